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
from advisor.ingest.sqlite_db import read_only_uri
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
    with sqlite3.connect(read_only_uri(rank / "ASCEND_PROFILER_OUTPUT/analysis.db"), uri=True) as con:
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


def _iterations(timeline: Path) -> list[dict[str, float]]:
    """msprof step trace (step_trace_*.json): per iteration its start, end, FP-BP, refresh and reduce times (us)."""
    _, trace = _trace_events(next(timeline.glob("step_trace_*.json")))
    steps: dict[int, dict[str, float]] = {}
    for e in trace:
        args = e.get("args") or {}
        if "Iteration ID" not in args:
            continue
        it = steps.setdefault(int(args["Iteration ID"]), {"reduce": 0.0})
        name = str(e["name"])
        if name.startswith("Iteration Refresh"):
            it["refresh"] = float(e["dur"])
        elif name.startswith("Iteration "):
            it["start"], it["end"] = float(e["ts"]), float(e["ts"]) + float(e["dur"])
        elif name.startswith("FP_BP Time"):
            it["fp_bp"] = float(e["dur"])
        elif name.startswith("Reduce_"):
            it["reduce"] += float(e["dur"])
    return [steps[k] for k in sorted(steps)]


@needs_samples
@pytest.mark.parametrize("prof", CANN6_PROFS, ids=lambda p: p.name)
def test_cann6_steady_state_after_the_warm_up(prof: Path):
    """CANN <= 6 msprof of MindSpore AlexNet: the step trace holds 10 iterations, the task timeline only the first, a
    warm-up 3x the others (its AllReduce waits for the peer's warm-up). The window is the median steady step, from the
    previous iteration's end (the data-augmentation gap is the step's data loading) to its own end; its compute is
    what the recorded tasks measure, its uncovered communication its reduce phase; the warm-up is excluded."""
    t = load(prof)[0].time
    _consistent(t)
    timeline = next(prof.glob("device_*/timeline"))
    its = _iterations(timeline)
    busy = [it["end"] - it["start"] for it in its]
    assert busy[0] > 1.5 * float(np.median(busy[1:]))  # the raw data marks a warm-up
    [warm] = t.excluded
    assert (warm.kind, warm.step) == ("warm-up", 1) and warm.window_us == pytest.approx(busy[0], rel=1e-6)
    # the median steady step by its own device time, with the gap since the previous iteration's end
    order = sorted(range(1, len(its)), key=lambda i: busy[i])
    mid = order[(len(order) - 1) // 2]
    [step] = t.steps
    assert step.step == mid + 1 and not step.tasks
    gap = its[mid]["start"] - its[mid - 1]["end"]
    assert t.window_us == pytest.approx(gap + busy[mid], rel=1e-6)
    assert t.free_by_kind["data_loading"] == pytest.approx(gap, rel=1e-6)
    assert t.uncovered_communication_us == pytest.approx(its[mid]["reduce"], rel=1e-6)
    # compute: the Overlap Analysis "Computing" of the recorded (warm-up) iteration, the tasks' measure of a step
    names, events = _trace_events(next(timeline.glob("msprof_*.json")))
    computing = sum(float(e["dur"]) for e in events
                    if names.get(e["pid"]) == "Overlap Analysis" and e["name"] == "Computing")
    assert t.compute_us == pytest.approx(min(computing, busy[mid] - its[mid]["reduce"]), rel=REL)
    # the reduce is mostly data moving: the transfer time the same collectives took in the warm-up
    assert t.uncovered_by_kind["transmit"] > 0.9 * t.uncovered_communication_us
    assert "warm-up" in warm.reason and t.steady_state["steps_recorded"] == len(its)


def _mindspore_steps(path: Path) -> list[dict[str, int]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return [{k: int(v) for k, v in r.items() if k in ("step_num", "total", "iteration_interval", "fp_and_bp",
                                                          "tail")}
                for r in csv.DictReader(fh) if r["step_num"].strip().isdigit() and r["step_num"].strip() != "0"]


def _steady(rows: list[dict[str, int]]) -> list[dict[str, int]]:
    """The rows after a warm-up, told apart here as the rules say: leading steps 1.5x the median of the rest."""
    busy = [r["total"] - r["iteration_interval"] for r in rows]
    n = 0
    while n < min(3, len(rows) - 1) and busy[n] >= 1.5 * float(np.median(busy[n + 1:])):
        n += 1
    return rows[n:]


@needs_samples
def test_mindspore_step_trace_without_tasks_reads_the_steady_steps():
    """MindSpore step_trace_raw (10 ns cycles) and no device task: the window is the steady steps, iteration_interval
    their data loading; rank 2's 2.16 s first step is a warm-up, rank 0's first step is not."""
    directory = MINDINSIGHT / "cluster_propose"
    warmups = {}
    for profile in load(directory):
        t = profile.time
        _consistent(t)
        dev = profile.meta.rank
        rows = _mindspore_steps(directory / f"step_trace_raw_{dev}_detail_time.csv")
        steady = _steady(rows)
        warmups[dev] = [e.step for e in t.excluded]
        assert t.window_us == pytest.approx(sum(r["total"] for r in steady) / 100.0, rel=REL)
        assert t.free_by_kind["data_loading"] == pytest.approx(sum(r["iteration_interval"] for r in steady) / 100.0,
                                                               rel=REL, abs=1.0)
        assert t.compute_us + t.uncovered_communication_us == pytest.approx(
            sum(r["fp_and_bp"] + r["tail"] for r in steady) / 100.0, rel=REL)
    assert warmups == {0: [], 2: [1]}


@needs_samples
def test_mindspore_untimed_ops_stand_for_their_executions():
    """run_1: 322 steps of ~205 ms in the step trace, but the op tables hold averages over 3 executions (about 1.2 ms
    of AI Core work each) and no time stamps: the window is 3 x the median steady step, compute the tasks' time --
    not the forward-backward phase, which is an interval on the device, not busy time."""
    directory = MINDINSIGHT / "run_1/normal_run/profiler"
    t = load(directory)[0].time
    _consistent(t)
    with open(directory / "aicore_intermediate_1_detail.csv", encoding="utf-8", newline="") as fh:
        detail = list(csv.DictReader(fh))
    freq = [int(r["execution_frequency"]) for r in detail]
    k = int(np.median(freq))
    task_us = sum(float(r["execution_time"]) * int(r["execution_frequency"]) for r in detail) * 1000.0
    rows = _steady(_mindspore_steps(directory / "step_trace_raw_1_detail_time.csv"))
    busy = sorted(rows, key=lambda r: r["total"] - r["iteration_interval"])
    mid = busy[(len(busy) - 1) // 2]
    assert t.window_us == pytest.approx(k * mid["total"] / 100.0, rel=1e-6)
    assert t.compute_us == pytest.approx(task_us, rel=REL)
    assert t.compute_us < 0.01 * t.window_us
    assert t.free_by_kind["data_loading"] == pytest.approx(k * mid["iteration_interval"] / 100.0, rel=1e-6)
    assert t.steps[0].count == k


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


# ---------------------------------------------------------------------------------------------------------
# what the free time is spent on (advisor/core/freetime.py)
# ---------------------------------------------------------------------------------------------------------
def _blocks(intervals: list[tuple[float, float]]) -> list[tuple[float, float]]:
    out: list[list[float]] = []
    for s, e in sorted(intervals):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def _overlap_len(a: list[tuple[float, float]], b: list[tuple[float, float]]) -> float:
    return sum(max(0.0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


@needs_samples
def test_free_time_split_by_the_dataloader_events_that_cover_it():
    """A torch trace alone: the idle gaps between device tasks inside ProfilerStep#1 that a DataLoader iteration
    covers are data loading, the rest host launch gaps -- computed here from the trace's own events."""
    path = SAMPLES / "Ascend__msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json"
    t = load(path)[0].time
    _consistent(t)
    names, events = _trace_events(path)
    device = _blocks([(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
                      if names.get(e["pid"]) == "Ascend Hardware"])
    lo = float(next(e["ts"] for e in events if e["name"] == "ProfilerStep#1"))
    hi = lo + t.window_us
    inside = [(max(s, lo), min(e, hi)) for s, e in device if e > lo and s < hi]
    edges = [lo, *[x for b in inside for x in b], hi]
    idle = [(a, b) for a, b in zip(edges[::2], edges[1::2], strict=True) if b > a]
    loader = [(float(e["ts"]), float(e["ts"]) + float(e["dur"])) for e in events
              if str(e["name"]).startswith("enumerate(DataLoader)")]
    loading = _overlap_len(idle, _blocks(loader))
    assert loading > 1000.0  # the 1.3 ms __next__ runs while the device idles
    # the profiler's free time (Overlap Analysis) split as the measured idle gaps split
    scale = t.free_us / sum(b - a for a, b in idle)
    assert scale == pytest.approx(1.0, abs=0.01)
    assert t.free_by_kind["data_loading"] == pytest.approx(loading * scale, rel=1e-4)  # float us at 1.7e15: 0.25 us
    assert t.free_by_kind["launch"] == pytest.approx(t.free_us - loading * scale, rel=1e-4)
    # the trace's "Other" task type is kernels of an unrecorded core: compute, never AI CPU
    assert t.compute_by_core["other"] > t.compute_by_core["ai_cpu"] > 0


def test_free_time_kinds_in_priority_order():
    """Data loading first, then the host blocked in a collective, the rest launch gaps; nothing counted twice."""
    from advisor.common.intervals import union
    from advisor.core import freetime

    busy = union(np.array([0.0, 100.0, 300.0]), np.array([50.0, 200.0, 400.0]))
    host = freetime.HostActivity(data_loading=union(np.array([40.0]), np.array([80.0])),
                                 comm_wait=union(np.array([60.0, 250.0]), np.array([90.0, 280.0])))
    kinds = freetime.split(150.0, 0.0, 400.0, busy, host)  # idle: [50, 100) and [200, 300)
    assert kinds == pytest.approx({"data_loading": 30.0, "comm_wait": 10.0 + 30.0, "launch": 80.0})
    assert sum(kinds.values()) == pytest.approx(150.0)
    # a pause is not split; the step's lead gap (a step trace's data-augmentation bound) is data loading
    kinds = freetime.split(100.0, 0.0, 400.0, busy, host, lead=(200.0, 250.0),
                           skip=union(np.array([250.0]), np.array([300.0])))
    assert kinds == pytest.approx({"data_loading": 30.0 + 50.0, "comm_wait": 10.0, "launch": 10.0})


@needs_samples
def test_msprof_step_trace_csv_gives_the_steps_the_json_gives(tmp_path: Path):
    """The graph-mode step_trace CSV of CANN >= 7 (Iteration ID, FP Start, BP End, Iteration End, Iteration Time,
    FP to BP Time, Iteration Refresh, Data Aug Bound) written from the same run's step_trace JSON: the same steps,
    the same warm-up, the same data-loading gaps."""
    prof = CANN6_PROFS[0]
    its = _iterations(next(prof.glob("device_*/timeline")))
    out = tmp_path / "PROF_000001_20230818142704322_COPYCSVCOPYCSVAA" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    header = ["Device_id", "Model ID", "Iteration ID", "FP Start(us)", "BP End(us)", "Iteration End(us)",
              "Iteration Time(us)", "FP to BP Time(us)", "Iteration Refresh(us)", "Data Aug Bound(us)"]
    rows = []
    for i, it in enumerate(its):
        fp = it["start"]
        aug = "N/A" if i == 0 else f"{fp - its[i - 1]['end']:.3f}"
        rows.append([0, 1, i + 1, f"{fp:.3f}", f"{fp + it['fp_bp']:.3f}", f"{it['end']:.3f}",
                     f"{it['end'] - it['start']:.3f}", f"{it['fp_bp']:.3f}", f"{it['refresh']:.3f}", aug])
    with open(out / "step_trace_20230818142800.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([header, *rows])
    t = load(out.parent)[0].time
    _consistent(t)
    assert [e.step for e in t.excluded] == [1]
    # no device task in this export: every steady step is read from its phases, from the previous iteration's end
    assert [s.step for s in t.steps] == list(range(2, len(its) + 1)) and not any(s.tasks for s in t.steps)
    assert t.window_us == pytest.approx(its[-1]["end"] - its[0]["end"], rel=1e-6)
    gaps = sum(its[i]["start"] - its[i - 1]["end"] for i in range(1, len(its)))
    assert t.free_by_kind["data_loading"] == pytest.approx(gaps, rel=1e-6)
    assert t.compute_us == pytest.approx(sum(it["end"] - it["start"] for it in its[1:]), rel=1e-6)
