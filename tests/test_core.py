"""Core pieces that every layout relies on: detection, normalization, busy time, score."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.common.errors import InputError
from advisor.findings import Finding
from advisor.ingest.detect import detect
from advisor.ingest.normalize import finalize_ops
from advisor.ingest.sqlite_db import read_only_uri
from advisor.model import busy_time_us, parse_list, parse_shapes
from advisor.pipeline import score

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
needs_samples = pytest.mark.skipif(not SAMPLES.is_dir(), reason="../shared/samples not present")


def _finding(rule: str, kb: str, ops: list[str], saving: float, by_op: dict[str, float] | None = None) -> Finding:
    return Finding(kb=kb, rule=rule, title=rule, severity="major", ops=ops, evidence={}, estimated_saving_us=saving,
                   basis="test", recommendation="", saving_by_op=by_op or {})


def test_parse_shapes_handles_quotes_empty_tensors_and_scalars() -> None:
    assert parse_shapes('"9216,7168;1,7168,4096;;1"') == ((9216, 7168), (1, 7168, 4096), None, (1,))
    assert parse_shapes("N/A") == ()
    assert parse_list("FLOAT16;INT64") == ("FLOAT16", "INT64")


def test_finalize_ops_keeps_absent_metrics_nan_and_derives_split_core_metrics() -> None:
    df = pd.DataFrame({
        "name": ["mm", "add"], "type": ["MatMul", "Add"], "core": ["mix_aic", "AI_VECTOR_CORE"],
        "start_us": ["10.5\t", "20"], "duration_us": ["5", "N/A"], "model_id": [4294967295, 1],
        "aic_mac_ratio": [0.8, 0.0], "aic_mte2_ratio": [0.2, 0.0], "aiv_vec_ratio": [0.0, 0.6],
        "aiv_mte2_ratio": [0.1, 0.9],
    })
    ops = finalize_ops(df)
    assert ops["start_us"].tolist() == [10.5, 20.0]  # trailing TAB stripped, never rescaled
    assert np.isnan(ops.loc[1, "duration_us"])
    assert np.isnan(ops.loc[0, "model_id"]) and ops.loc[1, "model_id"] == 1
    assert ops.loc[0, "core"] == "MIX_AIC"
    assert ops.loc[0, "mte2_ratio"] == pytest.approx(0.2)  # cube op: aic value
    assert ops.loc[1, "mte2_ratio"] == pytest.approx(0.9)  # vector op: aiv value, not the aic zero
    assert ops.loc[1, "memory_bound"] == pytest.approx(0.9 / 0.6)
    assert ops["fixpipe_ratio"].isna().all()  # absent -> NaN, never 0


def test_busy_time_is_the_union_of_intervals() -> None:
    ops = pd.DataFrame({"start_us": [0.0, 5.0, 20.0, 21.0], "duration_us": [10.0, 10.0, 2.0, 0.5]})
    assert busy_time_us(ops) == pytest.approx(15.0 + 2.0)


def test_score_counts_an_op_once_across_knowledge_bases() -> None:
    a = _finding("a.rule", "kb-a", ["op1", "op2"], 40.0, {"op1": 30.0, "op2": 10.0})
    b = _finding("b.rule", "kb-b", ["op1"], 25.0)
    a.confidence = b.confidence = 1.0
    assert score.recoverable_us([a, b]) == pytest.approx(40.0)
    s = score.compute([a, b], 200.0, ["kb-a", "kb-b"])
    assert s.score == pytest.approx(80.0)
    assert s.by_kb == {"kb-a": 80.0, "kb-b": 87.5}


def test_score_weighs_each_saving_by_its_confidence() -> None:
    """A known configuration fix (0.9) weighs nearly all its saving, speculative tuning (0.3) a third; per op
    the larger weighed saving counts."""
    fix = _finding("cfg.rule", "kb-a", ["op1"], 50.0)
    tune = _finding("tune.rule", "kb-b", ["op1", "op2"], 100.0, {"op1": 50.0, "op2": 50.0})
    fix.confidence, tune.confidence = 0.9, 0.3
    assert score.recoverable_us([fix, tune]) == pytest.approx(0.9 * 50.0 + 0.3 * 50.0)
    assert score.recoverable_us([fix, tune], weighted=False) == pytest.approx(100.0)
    s = score.compute([fix, tune], 200.0, ["kb-a", "kb-b"])
    assert s.score == pytest.approx(100.0 * (1 - 60.0 / 200.0))
    assert s.recoverable_us == pytest.approx(100.0) and s.weighted_recoverable_us == pytest.approx(60.0)
    assert score.compute([], 200.0, []).score == 100.0
    assert score.compute([_finding("x", "k", [], 500.0)], 200.0, ["k"]).score == 0.0


def test_detect_rejects_missing_empty_and_unrecognized(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="empty"):
        detect(tmp_path)
    (tmp_path / "notes.txt").write_text("hello")
    with pytest.raises(InputError, match="no recognizable Ascend profile"):
        detect(tmp_path)


@needs_samples
def test_detect_layouts_of_real_samples() -> None:
    cases = {
        "mindspore-ai__mindinsight/tests/utils/resource/profiler/PROF_000001_20230818142704322_COJGGGCANRMICFBC":
            ["msprof-cann6"],
        "neo-pan__ascend-msprof-skill/tests/fixtures/real_cann_minimal/reports/PROF_001": ["msprof-cann7"],
        "Ascend__msinsight/test/data/pytorch/text/level1/rank0_ascend_pt": ["torch_npu-text"],
        "Ascend__msinsight/test/data/pytorch/db/level1/rank0_ascend_pt": ["torch_npu-db"],
        "Ascend__msinsight/server/src/test/test_data/full_db": ["msprof-db"],
        "mindspore-ai__mindinsight/tests/utils/resource/run_2/normal_run/profiler": ["mindspore-legacy"],
    }
    for rel, layouts in cases.items():
        assert [s.layout for s in detect(SAMPLES / rel)] == layouts, rel
    ranks = detect(SAMPLES / "Ascend__msinsight/test/st/level2")
    assert [s.rank for s in ranks] == [0, 1, 2, 3]
    assert {s.layout for s in ranks} == {"torch_npu-text"}


@pytest.mark.parametrize(("chip", "expected"), [
    ("Ascend910B-class", "Ascend910B2"),  # the longest alias wins: a 910B is not a 910A
    ("Ascend910", "Ascend910A"),
    ("ascend910b3", "Ascend910B3"),
    ("310P", "Ascend310P3"),
    ("Ascend910_9391", "Ascend910_9391"),
])
def test_platform_peaks_follow_the_detected_chip(chip: str, expected: str) -> None:
    from advisor.config.loader import builtin_rules_dir, load_effective_rules
    from advisor.platform import resolve_platform

    assert resolve_platform(load_effective_rules([builtin_rules_dir()]), chip)["soc"] == expected


def test_unknown_chip_falls_back_to_the_default_and_says_so() -> None:
    from advisor.config.loader import builtin_rules_dir, load_effective_rules
    from advisor.platform import resolve_platform

    p = resolve_platform(load_effective_rules([builtin_rules_dir()]), "Ascend999Z")
    assert p["soc"] == "Ascend910B2" and "Ascend999Z not in rules/platforms.yaml" in p["soc_source"]


def test_interval_union_and_overlap() -> None:
    from advisor.common.intervals import overlap, union, union_length

    bs, be = union(np.array([10.0, 0.0, 3.0, np.nan]), np.array([20.0, 5.0, 4.0, 1.0]))
    assert bs.tolist() == [0.0, 10.0] and be.tolist() == [5.0, 20.0]
    assert union_length(np.array([0.0, 2.0]), np.array([3.0, 4.0])) == 4.0
    assert overlap(bs, be, np.array([4.0, 6.0]), np.array([12.0, 8.0])).tolist() == [3.0, 0.0]


@needs_samples
def test_score_window_takes_its_free_time_from_the_overlap_timeline_without_pauses() -> None:
    """msprof .db with no step table: the overlap-analysis timeline gives the window, free time included (measured
    against device busy time only, an idle capture would score 0) -- but not the 132.8 ms gap in which the program
    pauses (more than pause.factor times all the device's work): that is outside the window, never a saving."""
    import sqlite3

    from advisor.pipeline.analysis import run_analysis

    db = SAMPLES / "Ascend__msinsight/server/src/test/test_data/full_db/msprof_0.db"
    with sqlite3.connect(read_only_uri(db), uri=True) as con:
        oa = con.execute("SELECT startNs, endNs, type FROM OVERLAP_ANALYSIS").fetchall()
        busy = con.execute("SELECT startNs, endNs FROM TASK").fetchall()
    work_us = sum(e - s for s, e in _merged(busy)) / 1000.0
    extent_us = (max(e for _, e, _ in oa) - min(s for s, _, _ in oa)) / 1000.0
    pauses = [(e - s) / 1000.0 for s, e in _gaps(_merged(busy)) if (e - s) / 1000.0 > 10 * work_us]
    assert len(pauses) == 1 and pauses[0] == pytest.approx(132797.234, abs=1e-3)
    report = run_analysis(db.parent).report
    t = report["time"]
    assert t["window_us"] == pytest.approx(extent_us - pauses[0], rel=1e-6)
    [pause] = t["excluded"]
    assert pause["kind"] == "pause" and pause["window_us"] == pytest.approx(pauses[0], abs=1e-3)
    assert report["score_detail"]["window_us"] > report["score_detail"]["device_busy_us"]
    assert all(f["estimated_saving_us"] <= t["free_us"] + t["compute_us"] for f in report["findings"])
    assert report["score"] > 0


def _merged(intervals: list[tuple[int, int]]) -> list[tuple[int, int]]:
    out: list[list[int]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _gaps(blocks: list[tuple[int, int]]) -> list[tuple[int, int]]:
    return [(a[1], b[0]) for a, b in zip(blocks, blocks[1:], strict=False)]
