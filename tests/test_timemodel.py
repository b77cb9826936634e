"""The time model (advisor/timemodel.py): one split of each rank's analyzed time, checked against every source of
truth the shared samples carry, computed here independently from the raw files (csv / sqlite3 / json modules)."""

from __future__ import annotations

import csv
import json
import sqlite3
from decimal import Decimal
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.ingest import load
from advisor.ingest.normalize import finalize_ops
from advisor.model import STEPS_COLUMNS, Meta, Profile
from advisor.timemodel import COMPUTE_KEYS, TimeModel, build

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
MSINSIGHT = SAMPLES / "Ascend__msinsight"
MINDINSIGHT = SAMPLES / "mindspore-ai__mindinsight/tests/utils/resource"
CANN6_PROFS = sorted((MINDINSIGHT / "profiler").glob("PROF_*")) if MINDINSIGHT.is_dir() else []
SUPER_KERNEL = SAMPLES / ("hicann__cann-learning-hub/tutorials/ascendc_operator_development_V2/06_advanced_features/"
                          "src/06.04_super_kernel/performance_case")
needs_samples = pytest.mark.skipif(not SAMPLES.is_dir(), reason="../shared/samples not present")
REL = 0.01  # the bar: within 1 % of the independent source


def _ops(rows: list[tuple[str, str, float, float]], step: float | None = None) -> pd.DataFrame:
    return finalize_ops(pd.DataFrame([{"name": n, "type": n, "core": c, "start_us": s, "duration_us": d,
                                       "step": step} for n, c, s, d in rows]))


def _consistent(t: TimeModel) -> None:
    """Shares add up to their parent at every level, and nothing is negative."""
    for s in [*t.steps]:
        assert s.window_us == pytest.approx(s.compute_us + s.uncovered_communication_us + s.free_us, rel=1e-6,
                                            abs=1e-3)
        assert sum(s.compute_by_core.values()) == pytest.approx(s.compute_us, rel=1e-6, abs=1e-3)
        assert sum(s.uncovered_by_kind.values()) == pytest.approx(s.uncovered_communication_us, rel=1e-6, abs=1e-3)
        assert s.communication_us + 1e-3 >= s.uncovered_communication_us
        values = [s.window_us, s.compute_us, s.free_us, s.uncovered_communication_us,
                  s.overlapped_communication_us, *s.compute_by_core.values(), *s.uncovered_by_kind.values()]
        assert min(values) >= 0


# ---------------------------------------------------------------------------------------------------------
# derived from device tasks
# ---------------------------------------------------------------------------------------------------------
def test_split_from_device_tasks_by_core_never_by_name():
    # a MatMul-named kernel on the vector core is vector work; a tilelang main_kernel on MIX_AIC is mix
    ops = _ops([("MatMul_custom", "AI_VECTOR_CORE", 0.0, 100.0), ("main_kernel", "MIX_AIC", 100.0, 50.0),
                ("hcom_allReduce__1_0_1", "HCCL", 120.0, 200.0), ("Conv2D", "AI_CORE", 400.0, 50.0)], step=1.0)
    t = build(Profile(ops=ops, meta=Meta(source="mem")))
    _consistent(t)
    assert t.window_us == pytest.approx(450.0)
    assert t.compute_us == pytest.approx(200.0)
    assert t.compute_by_core["vector"] == pytest.approx(100.0) and t.compute_by_core["mix"] == pytest.approx(50.0)
    assert t.compute_by_core["cube"] == pytest.approx(50.0)
    # the all-reduce [120, 320) overlaps main_kernel for 30 us; the rest is exposed
    assert t.communication_us == pytest.approx(200.0) and t.overlapped_communication_us == pytest.approx(30.0)
    assert t.uncovered_communication_us == pytest.approx(170.0)
    assert t.free_us == pytest.approx(450.0 - 200.0 - 170.0)
    assert t.uncovered_by_kind.get("unknown") == pytest.approx(170.0)  # nothing to split it with


def test_notify_waits_are_communication_not_compute():
    ops = _ops([("conv", "AI_CORE", 0.0, 10.0), ("NOTIFY_WAIT", "NOTIFY_WAIT", 10.0, 500.0),
                ("REDUCE_ASYNC_V2", "REDUCE_ASYNC_V2", 510.0, 40.0), ("add", "AI_VECTOR_CORE", 550.0, 10.0)])
    t = build(Profile(ops=ops, meta=Meta(source="mem")))
    _consistent(t)
    assert t.compute_us == pytest.approx(20.0)
    assert t.uncovered_communication_us == pytest.approx(540.0)
    assert t.uncovered_by_kind["wait"] == pytest.approx(500.0)
    assert t.uncovered_by_kind["transmit"] == pytest.approx(40.0)


def test_profiler_split_wins_and_bounds_are_its_own():
    ops = _ops([("mm", "AI_CORE", 0.0, 100.0), ("add", "AI_VECTOR_CORE", 100.0, 300.0)], step=7.0)
    steps = pd.DataFrame([{"step": 7.0, "computing_us": 400.0, "comm_not_overlapped_us": 50.0, "overlapped_us": 10.0,
                           "communication_us": 60.0, "free_us": 150.0, "bubble_us": 0.0, "preparing_us": 30.0}])
    for c in STEPS_COLUMNS:
        if c not in steps:
            steps[c] = np.nan
    p = Profile(ops=ops, meta=Meta(source="mem"), steps=steps)
    p.meta.sources["steps"] = "step_trace_time.csv"
    t = build(p)
    _consistent(t)
    assert t.window_us == pytest.approx(600.0) and t.free_us == pytest.approx(150.0)
    assert t.compute_by_core["cube"] == pytest.approx(100.0) and t.compute_by_core["vector"] == pytest.approx(300.0)
    assert t.steps[0].preparing_us == pytest.approx(30.0)
    assert "step_trace_time.csv" in t.sources["window"]


def test_pauses_of_a_short_capture_are_outside_the_window():
    # 3 kernels, then the program sleeps 5 s, then 2 more: the sleep is not dispatch overhead
    ops = _ops([("a", "AI_CORE", 0.0, 100.0), ("b", "AI_CORE", 110.0, 100.0), ("c", "AI_CORE", 220.0, 100.0),
                ("d", "AI_CORE", 5_000_320.0, 100.0), ("e", "AI_CORE", 5_000_430.0, 100.0)])
    t = build(Profile(ops=ops, meta=Meta(source="mem")))
    _consistent(t)
    assert t.window_us == pytest.approx(530.0, abs=1e-6) and t.free_us == pytest.approx(30.0)
    assert t.outside_window_us == pytest.approx(5_000_530.0 - 530.0)
    assert any("pause" in n for n in t.notes)


def test_no_timestamps_window_is_task_time():
    ops = finalize_ops(pd.DataFrame({"name": ["a", "b"], "core": ["AI_CORE", "AI_CPU"], "duration_us": [30.0, 70.0]}))
    t = build(Profile(ops=ops, meta=Meta(source="mem")))
    _consistent(t)
    assert t.window_us == pytest.approx(100.0) and t.compute_by_core["ai_cpu"] == pytest.approx(70.0)
    assert "no time stamps" in t.sources["window"]


def test_json_shape_of_the_report_time_object():
    ops = _ops([("a", "AI_CORE", 0.0, 10.0)])
    d = build(Profile(ops=ops, meta=Meta(source="mem"))).to_dict()
    for key in ("window_us", "steps", "compute_us", "communication_us", "overlapped_communication_us",
                "uncovered_communication_us", "free_us", "compute_by_core", "uncovered_by_kind", "sources"):
        assert key in d
    assert set(COMPUTE_KEYS) <= set(d["compute_by_core"]) and {"wait", "transmit", "idle"} <= set(
        d["uncovered_by_kind"])
    json.dumps(d)


# ---------------------------------------------------------------------------------------------------------
# real samples against their own source of truth
# ---------------------------------------------------------------------------------------------------------
def _step_trace_csv(path: Path) -> list[dict[str, float]]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return [{k: float(v) for k, v in row.items() if v not in ("", None) and k != "Type"}
                for row in csv.DictReader(fh)]


STEP_TRACE_FILES = sorted(MSINSIGHT.glob("**/ASCEND_PROFILER_OUTPUT/step_trace_time.csv")) if MSINSIGHT.is_dir() \
    else []


@needs_samples
@pytest.mark.parametrize("path", STEP_TRACE_FILES, ids=lambda p: str(p.relative_to(MSINSIGHT)))
def test_matches_step_trace_time_csv(path: Path):
    rank_dir = path.parent.parent
    t = load(rank_dir)[0].time
    _consistent(t)
    rows = _step_trace_csv(path)
    assert len(t.steps) == len(rows)
    for s, row in zip(t.steps, rows, strict=True):
        assert s.step == int(row["Step"])
        assert s.compute_us == pytest.approx(row["Computing"], rel=REL)
        assert s.uncovered_communication_us == pytest.approx(row["Communication(Not Overlapped)"], rel=REL)
        assert s.free_us == pytest.approx(row["Free"], rel=REL)
        assert s.window_us == pytest.approx(row["Computing"] + row["Communication(Not Overlapped)"] + row["Free"],
                                            rel=REL)
    assert "step_trace_time.csv" in t.sources["window"]


@needs_samples
def test_matches_analysis_db_step_trace():
    rank = MSINSIGHT / "test/data/pytorch/db/level1/rank0_ascend_pt"
    t = load(rank)[0].time
    _consistent(t)
    with sqlite3.connect(rank / "ASCEND_PROFILER_OUTPUT/analysis.db") as con:
        con.row_factory = sqlite3.Row
        rows = [dict(r) for r in con.execute("SELECT * FROM StepTraceTime")]
    assert len(rows) == len(t.steps) == 1
    row = rows[0]
    assert t.compute_us == pytest.approx(float(row["computing"]), rel=REL)
    assert t.uncovered_communication_us == pytest.approx(float(row["communication_not_overlapped"]), rel=REL)
    assert t.free_us == pytest.approx(float(row["free"]), rel=REL)
    assert "analysis.db" in t.sources["window"]
    # level-1 db: the compute split comes from the TASK types, communication from COMMUNICATION_OP
    assert t.compute_by_core["vector"] > t.compute_by_core["cube"] > 0


def _trace_events(path: Path) -> tuple[dict[int, str], list[dict]]:
    data = json.loads(path.read_text(encoding="utf-8"))
    names = {e["pid"]: e["args"]["name"] for e in data if e.get("ph") == "M" and e.get("name") == "process_name"}
    return names, [e for e in data if e.get("ph") == "X"]


@needs_samples
@pytest.mark.parametrize("prof", CANN6_PROFS, ids=lambda p: p.name)
def test_cann6_overlap_analysis_and_hccl_json(prof: Path):
    """CANN <= 6 msprof: AllReduce takes most of the iteration (hccl_*.json); notify waits are not compute."""
    t = load(prof)[0].time
    _consistent(t)
    timeline = next(prof.glob("device_*/timeline"))
    names, events = _trace_events(next(timeline.glob("msprof_*.json")))
    oa: dict[str, float] = {}
    for e in events:
        if names.get(e["pid"]) == "Overlap Analysis":
            oa[e["name"]] = oa.get(e["name"], 0.0) + float(e["dur"])
    assert t.compute_us == pytest.approx(oa["Computing"], rel=REL)
    assert t.uncovered_communication_us == pytest.approx(oa["Communication(Not Overlapped)"], rel=REL)
    # the window is the recorded iterations (step_trace_*.json "Iteration N"); the part of an iteration before its
    # first device task is idle device time too, so free = the OA's Free + that head
    _, trace = _trace_events(next(timeline.glob("step_trace_*.json")))
    iterations = {e["name"]: float(e["dur"]) for e in trace if str(e.get("name", "")).startswith("Iteration ")
                  and e.get("ph") == "X"}
    assert t.window_us == pytest.approx(sum(iterations[f"Iteration {s.step}"] for s in t.steps), rel=REL)
    assert t.free_us >= oa.get("Free", 0.0) - 1.0
    assert t.free_us == pytest.approx(t.window_us - oa["Computing"] - oa["Communication(Not Overlapped)"],
                                      rel=REL, abs=1.0)
    # hccl_*.json: the op-level event on the Communication Kernel thread is the collective
    _, hccl = _trace_events(next(timeline.glob("hccl_*.json")))
    op_level = [e for e in hccl if not e["name"].lower().startswith(("notify", "memcpy", "reduce_inline"))]
    assert t.communication_us == pytest.approx(sum(float(e["dur"]) for e in op_level), rel=REL)
    assert t.uncovered_communication_us > 0.8 * t.window_us
    assert t.uncovered_by_kind["wait"] > t.uncovered_by_kind["transmit"] > 0


def _mindspore_steps(path: Path) -> list[dict[str, int]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return [{k: int(v) for k, v in r.items() if k in ("step_num", "total", "iteration_interval", "fp_and_bp",
                                                          "tail")}
                for r in csv.DictReader(fh) if r["step_num"].strip().isdigit() and r["step_num"].strip() != "0"]


@needs_samples
@pytest.mark.parametrize("directory", ["run_1/normal_run/profiler", "cluster_propose"])
def test_mindspore_step_trace(directory: str):
    """MindSpore step_trace_raw (10 ns cycles): the window is the iterations, iteration_interval is free time."""
    for profile in load(MINDINSIGHT / directory):
        t = profile.time
        _consistent(t)
        dev = profile.meta.rank if profile.meta.rank is not None else 1
        rows = _mindspore_steps(MINDINSIGHT / directory / f"step_trace_raw_{dev}_detail_time.csv")
        assert t.window_us == pytest.approx(sum(r["total"] for r in rows) / 100.0, rel=REL)
        assert t.free_us == pytest.approx(sum(r["iteration_interval"] for r in rows) / 100.0, rel=REL, abs=1.0)
        assert t.compute_us + t.uncovered_communication_us == pytest.approx(
            sum(r["fp_and_bp"] + r["tail"] for r in rows) / 100.0, rel=REL)


@needs_samples
def test_times_are_exact_busy_time_matches_raw_sums():
    """Kernels that never overlap: the union of their intervals equals the raw file's sum to the ns."""
    path = next((SUPER_KERNEL / "profiling-static").glob("PROF_*/mindstudio_profiler_output/op_summary_*.csv"))
    with open(path, encoding="utf-8", newline="") as fh:
        rows = list(csv.DictReader(fh))
    raw = sum(Decimal(r["Task Duration(us)"].strip()) for r in rows)
    profile = load(path.parent.parent)[0]
    assert profile.busy_time_us() == pytest.approx(float(raw), abs=1e-6)
    assert profile.time.compute_us == pytest.approx(float(raw), abs=1e-6)


@needs_samples
def test_short_capture_claims_no_pause():
    """A few kernels inside a 6 s capture: the pauses between runs are outside the window."""
    t = load(next((SUPER_KERNEL / "profiling-sk").glob("PROF_*")))[0].time
    _consistent(t)
    assert t.capture_us > 6e6 and t.window_us < 0.01 * t.capture_us
    assert t.outside_window_us > 0.99 * t.capture_us


@needs_samples
def test_level0_text_cores_from_the_trace():
    """Level0 kernel_details has no Accelerator Core: the trace's device tasks give it, so compute keeps its cores."""
    t = load(MSINSIGHT / "test/data/pytorch/text/level0/rank0_ascend_pt")[0].time
    assert t.compute_by_core["cube"] + t.compute_by_core["mix"] > 0.9 * t.compute_us


@needs_samples
def test_trace_only_export_takes_its_steps_from_profilerstep_ranges():
    """A torch_npu trace_view.json alone: ``ProfilerStep#N`` is the step (host range, extended to the device tasks
    it launched), so the head of the step before the first device task is free time, not outside the window."""
    path = SAMPLES / "Ascend__msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"
    t = load(path)[0].time
    _consistent(t)
    _, events = _trace_events(path)
    (step,) = [e for e in events if e.get("name") == "ProfilerStep#1"]
    assert [s.step for s in t.steps] == [1]
    assert t.window_us >= float(step["dur"]) - 1e-3
    assert "ProfilerStep#N" in t.sources["window"]
