"""Every shared real sample, analyzed as a user would: the report keeps every invariant of advisor/pipeline/consistency.py
(no saving above the window, no share above 100 %, no setting advised both ways, no duplicate titles, severities
that match the share of the window, no alignment advice that adds work, no citation of files users lack, one finding
per op per rule), and the time model adds up."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.common.errors import InputError
from advisor.pipeline.analysis import run_analysis
from advisor.pipeline.consistency import problems

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
LIST = Path(__file__).with_name("data") / "shared_samples.txt"
"""One sample per line, relative to ../shared/samples; a leading ``!`` marks one that holds no profile a report
could be made from (a fuzz seed, a graph-debug dump, statistics without ops), which must be refused as bad input."""
_LINES = LIST.read_text("utf-8").split() if LIST.is_file() else []
PATHS = [p for p in _LINES if not p.startswith("!") and (SAMPLES / p).exists()]
REFUSED = [p[1:] for p in _LINES if p.startswith("!") and (SAMPLES / p[1:]).exists()]


@pytest.mark.skipif(not REFUSED, reason="../shared/samples not present")
@pytest.mark.parametrize("rel", REFUSED)
def test_unusable_sample_is_refused_as_bad_input(rel: str) -> None:
    """Exit 2 with the path in the message, never a report that scores an empty analysis."""
    with pytest.raises(InputError) as err:
        run_analysis(SAMPLES / rel, workers=1)
    assert Path(rel).name in str(err.value)


@pytest.mark.skipif(not PATHS, reason="../shared/samples not present")
@pytest.mark.parametrize("rel", PATHS)
def test_report_keeps_its_invariants(rel: str) -> None:
    report = run_analysis(SAMPLES / rel, workers=1).report
    assert problems(report) == []
    t = report["time"]
    window = t["window_us"]
    assert window == pytest.approx(t["compute_us"] + t["uncovered_communication_us"] + t["free_us"], rel=1e-6,
                                   abs=1e-3)
    assert report["score_detail"]["recoverable_us"] <= window * 1.001
    for f in report["findings"]:
        assert f["estimated_saving_us"] <= window * 1.001
        assert 0.0 <= f["share_of_device_time"] <= 1.0


def test_the_sample_list_covers_every_layout() -> None:
    """At least ten real samples, across msprof CANN 6/7, .db exports, torch_npu text, MindSpore legacy, lone CSVs
    and traces (issue 13.6)."""
    if not PATHS:
        pytest.skip("../shared/samples not present")
    assert len(PATHS) >= 10
    kinds = {"PROF_": False, ".db": False, "_ascend_pt": False, "profiler": False, ".csv": False, ".json": False}
    for p in PATHS:
        for k in kinds:
            kinds[k] |= k in p
    assert all(kinds.values()), kinds
