"""The causes partition the analyzed window (issue 28), on every shared sample and the built-in example, as a reader
checks a report: the top-level savings add up to at most the window (per rank); no op-microsecond is claimed by two
top-level findings; a symptom is listed under one cause only and is then not also a top-level finding; every
symptom under a cause says how the cause removes it; no top-level finding has a share above 100 %; what has no
measured saving is a note, not a finding."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from advisor.examples import example_graph, example_profile
from advisor.pipeline.analysis import AnalysisResult, run_analysis
from advisor.pipeline.score import per_op_savings
from tests import golden

SAMPLES = golden.SAMPLES
PATHS = golden.sample_paths()


@pytest.fixture(scope="module", params=["builtin-example", *PATHS])
def result(request: pytest.FixtureRequest) -> AnalysisResult:
    if request.param == "builtin-example":
        return run_analysis(example_profile(), example_graph(), workers=1)
    path = SAMPLES / request.param
    if not path.exists():
        pytest.skip("../shared/samples not present")
    return run_analysis(path, workers=1)


@pytest.fixture(scope="module")
def report(result: AnalysisResult) -> dict:
    return result.report


def _windows(report: dict) -> dict[int | None, float]:
    t = report["time"]
    if t.get("ranks"):
        return {int(k): float(v["window_us"]) for k, v in t["ranks"].items()}
    return {None: float(t["window_us"])}


def test_top_level_savings_add_up_to_at_most_the_window(report: dict) -> None:
    windows = _windows(report)
    by_rank: dict[int | None, float] = defaultdict(float)
    for f in report["findings"]:
        by_rank[f.get("rank") if len(windows) > 1 else None] += f["estimated_saving_us"]
        assert 0.0 <= f["share_of_device_time"] <= 1.0
    for rank, total in by_rank.items():
        limit = windows.get(rank, sum(windows.values()))
        assert total <= limit * 1.001, (rank, total, limit)


def test_no_op_time_is_claimed_by_two_top_level_findings(result: AnalysisResult) -> None:
    """Per rank and op (or bucket of the time model), the top-level findings together claim at most the op's time
    (the bucket's): what a finding attributes to an op is disjoint from what the others attribute to it."""
    claims: dict[tuple, float] = defaultdict(float)
    for f in result.findings:
        for op, v in per_op_savings(f).items():
            claims[(f.rank, op)] += v
    for rank_summary in result.ranks:
        lim = rank_summary.limits()
        for (rank, op), total in claims.items():
            if rank not in (rank_summary.meta.rank, None) or (rank is None and len(result.ranks) > 1):
                continue
            bound = lim.bucket_us.get(op, lim.op_us.get(op))
            if bound is not None:
                assert total <= bound * 1.001 + 1e-3, (rank, op, total, bound)


def test_a_symptom_sits_under_one_cause_and_not_at_top_level(report: dict) -> None:
    top = {(f["rule"], f["title"], f.get("rank")) for f in report["findings"]}
    seen: dict[tuple, str] = {}
    for f in report["findings"]:
        for s in f.get("symptoms") or []:
            key = (s["rule"], s["title"], s.get("rank"))
            assert key not in top, f"{s['rule']} '{s['title']}' is a top-level finding and a symptom of {f['rule']}"
            owner = seen.setdefault(key, f["rule"])
            assert owner == f["rule"], f"{s['rule']} sits under {owner} and {f['rule']}"
            if "explained_us" in s and "mechanism" in s:
                assert s["mechanism"], s  # how the cause removes it, stated by the cause's rule


def test_what_has_no_measured_saving_is_a_note(report: dict) -> None:
    assert all(f["estimated_saving_us"] > 0 for f in report["findings"])
    assert all(n["reason"] for n in report.get("notes") or [])


def test_the_sample_list_is_not_empty() -> None:
    if not SAMPLES.is_dir():
        pytest.skip("../shared/samples not present")
    assert len(PATHS) >= 40 and all(isinstance(p, str) for p in PATHS) and Path(SAMPLES).is_dir()
