"""Every real SQLite, trace-JSON and MindSpore 1.x sample listed in ../shared/samples/MANIFEST.tsv is ingested:
the normalized table has exactly as many rows as the raw file holds (counted here independently with ``sqlite3``
SQL, the ``json`` module and ``csv``), and sampled cells (a duration, a name/type, a core) match the raw ones."""

from __future__ import annotations

import csv
import json
import re
import sqlite3
from collections import defaultdict
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from advisor.ingest import read_source
from advisor.ingest.detect import RankSource
from advisor.ingest.sqlite_db import read_analysis_db, read_only_uri
from advisor.ingest.timebase import absolute_ns, ns_of
from advisor.ingest.timeline import TraceTables, read_trace
from advisor.model import Meta, Profile

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
MANIFEST = SAMPLES / "MANIFEST.tsv"

DB_KINDS = {"msprof.db_sqlite", "torch_npu.db_sqlite"}
ANALYSIS_KINDS = {"torch_npu.analysis_db_sqlite"}
TRACE_KINDS = {"torch_npu.trace_view", "msprof.timeline_json", "msprof.task_time_json", "msprof.step_trace_json",
               "msprof.hccl_json", "aclgraph.debug_trace"}
LEGACY_KINDS = {"mindspore.legacy_profiler"}


@dataclass(frozen=True)
class Entry:
    kind: str
    path: Path

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.path.relative_to(SAMPLES)}"


def _entries(kinds: set[str]) -> list[Entry]:
    if not MANIFEST.is_file():
        return []
    with open(MANIFEST, encoding="utf-8", newline="") as fh:
        return [Entry(r["kind"], SAMPLES / r["repo"].replace("/", "__") / r["path"])
                for r in csv.DictReader(fh, delimiter="\t") if r["kind"] in kinds]


def _params(kinds: set[str]) -> list[Any]:
    entries = _entries(kinds)
    if not entries:
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared/samples not present"))]
    return [pytest.param(e, id=e.id) for e in entries]


def _sql(path: Path, query: str) -> list[tuple[Any, ...]]:
    con = sqlite3.connect(read_only_uri(path), uri=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


# ---------------------------------------------------------------------------------------------------------
# SQLite exports
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("entry", _params(DB_KINDS))
def test_db_ops_match_raw_tables(entry: Entry) -> None:
    layout = "msprof-db" if entry.kind.startswith("msprof") else "torch_npu-db"
    profile = read_source(RankSource(entry.path, layout))
    (n_compute,), = _sql(entry.path, "SELECT COUNT(*) FROM TASK t JOIN COMPUTE_TASK_INFO c "
                                     "ON t.globalTaskId = c.globalTaskId")
    (n_comm,), = _sql(entry.path, "SELECT COUNT(*) FROM COMMUNICATION_OP")
    assert len(profile.ops) == n_compute + n_comm
    assert (profile.ops["core"] == "HCCL").sum() == n_comm

    # sampled compute tasks: name, type, core and duration as the raw tables have them
    sample = _sql(entry.path, """
        SELECT n.value, ty.value, core.value, t.endNs - t.startNs, t.startNs, t.taskId
        FROM TASK t JOIN COMPUTE_TASK_INFO c ON t.globalTaskId = c.globalTaskId
        JOIN STRING_IDS n ON n.id = c.name JOIN STRING_IDS ty ON ty.id = c.opType
        JOIN STRING_IDS core ON core.id = c.taskType
        ORDER BY t.globalTaskId""")
    ops = profile.ops
    starts_ns = absolute_ns(profile.meta, ops["start_us"].to_numpy())
    for name, op_type, core, dur_ns, start_ns, task_id in sample[:: max(1, len(sample) // 7)]:
        row = ops[(ops["task_id"] == task_id).to_numpy() & (starts_ns == start_ns)]  # time stamps exact to the ns
        assert len(row) == 1, (name, task_id)
        row = row.iloc[0]
        assert row["name"] == name and row["type"] == op_type and row["core"] == core
        assert row["duration_us"] == pytest.approx(dur_ns / 1000.0, abs=1e-6)

    # CANN_API -> api: one row per (level, name), counts and totals as SQL aggregates them
    api = _sql(entry.path, "SELECT s.value, COUNT(*), SUM(a.endNs - a.startNs) FROM CANN_API a "
                           "JOIN STRING_IDS s ON s.id = a.name GROUP BY a.type, a.name")
    assert len(profile.api) == len(api)
    by_name = profile.api.groupby("name")[["count", "total_us"]].sum()
    for name, count, total_ns in api[:5]:
        assert by_name.loc[name, "count"] >= count
        assert by_name.loc[name, "total_us"] >= total_ns / 1000.0 - 1e-6


@pytest.mark.parametrize("entry", _params(DB_KINDS))
def test_db_pmu_metrics_match_raw_rows(entry: Entry) -> None:
    tables = {r[0] for r in _sql(entry.path, "SELECT name FROM sqlite_master WHERE type='table'")}
    if "TASK_PMU_INFO" not in tables:
        pytest.skip("no PMU table in this export")
    layout = "msprof-db" if entry.kind.startswith("msprof") else "torch_npu-db"
    profile = read_source(RankSource(entry.path, layout))
    ops = profile.ops
    starts_ns = absolute_ns(profile.meta, ops["start_us"].to_numpy())
    rows = _sql(entry.path, """
        SELECT t.taskId, t.startNs, s.value, p.value FROM TASK_PMU_INFO p
        JOIN TASK t ON t.globalTaskId = p.globalTaskId JOIN STRING_IDS s ON s.id = p.name
        WHERE s.value IN ('aic_mac_ratio', 'aiv_vec_ratio', 'aic_total_time', 'aiv_mte2_ratio')
        ORDER BY t.globalTaskId""")
    assert rows
    column = {"aic_mac_ratio": ("aic_mac_ratio", 1.0), "aiv_vec_ratio": ("aiv_vec_ratio", 1.0),
              "aic_total_time": ("aicore_time_us", 1e-3), "aiv_mte2_ratio": ("aiv_mte2_ratio", 1.0)}
    for task_id, start_ns, metric, value in rows[:: max(1, len(rows) // 25)]:
        row = ops[(ops["task_id"] == task_id).to_numpy() & (starts_ns == start_ns)].iloc[0]
        col, scale = column[metric]
        assert row[col] == pytest.approx(value * scale, rel=1e-9, abs=1e-12), (task_id, metric)


@pytest.mark.parametrize("entry", _params(ANALYSIS_KINDS))
def test_analysis_db_steps_and_comm(entry: Entry) -> None:
    steps, comm = read_analysis_db(entry.path, Meta())
    (n_steps,), = _sql(entry.path, "SELECT COUNT(*) FROM StepTraceTime")
    assert len(steps) == n_steps
    # comm: one row per (step, op, group, transport) of the bandwidth table, plus ops that have none
    (n_bw,), = _sql(entry.path, "SELECT COUNT(*) FROM (SELECT DISTINCT step, hccl_op_name, group_name, "
                                "transport_type FROM CommAnalyzerBandwidth)")
    (n_bare,), = _sql(entry.path, "SELECT COUNT(*) FROM (SELECT DISTINCT step, hccl_op_name, group_name "
                                  "FROM CommAnalyzerTime EXCEPT SELECT DISTINCT step, hccl_op_name, group_name "
                                  "FROM CommAnalyzerBandwidth)")
    assert len(comm) == n_bw + n_bare
    for op, step, elapse_ms, wait_ms in _sql(entry.path, "SELECT hccl_op_name, step, elapse_time, wait_time "
                                                         "FROM CommAnalyzerTime LIMIT 5"):
        rows = comm[(comm["op"] == op) & (comm["step"] == float(re.sub(r"\D", "", step)))]
        assert len(rows) >= 1
        assert rows["elapse_us"].iloc[0] == pytest.approx(elapse_ms * 1000.0)
        assert rows["wait_us"].iloc[0] == pytest.approx(wait_ms * 1000.0)
    (computing,), = _sql(entry.path, "SELECT computing FROM StepTraceTime LIMIT 1")
    assert steps["computing_us"].iloc[0] == pytest.approx(computing)


# ---------------------------------------------------------------------------------------------------------
# trace JSON
# ---------------------------------------------------------------------------------------------------------
@dataclass
class RawTrace:
    device: list[dict[str, Any]]
    other_x: int
    counters: int
    iterations: int
    first_other: dict[str, Any] | None
    """The first X event that is not a device task (kept in ``events`` even without device ops)."""


def _raw_trace(path: Path) -> RawTrace:
    """Count what the trace holds with the json module (the file is small enough to load)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    events = data["traceEvents"] if isinstance(data, dict) else data
    proc = {e["pid"]: e["args"]["name"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"}
    threads = {(e["pid"], e["tid"]): e["args"]["name"] for e in events
               if e.get("ph") == "M" and e.get("name") == "thread_name"}
    device, other, counters, iterations, first_other = [], 0, 0, 0, None
    for e in events:
        if e.get("ph") == "X":
            args = e.get("args") or {}
            step_like = "Iteration ID" in args or threads.get((e["pid"], e.get("tid")), "").startswith("Step Trace")
            if proc.get(e["pid"]) == "Ascend Hardware" and not step_like:
                device.append(e)
            else:
                other += 1
                first_other = first_other or e
                iterations += bool(re.fullmatch(r"Iteration \d+", str(e.get("name"))) and "Iteration ID" in args)
        elif e.get("ph") == "C":
            counters += sum(1 for v in (e.get("args") or {}).values()
                            if isinstance(v, int | float) and not isinstance(v, bool))
    return RawTrace(device, other, counters, iterations, first_other)


@cache
def _trace_with_meta(path: Path, device_ops: bool) -> tuple[TraceTables, Meta]:
    meta = Meta()
    return read_trace(path, meta, device_ops=device_ops), meta


def _trace(path: Path, device_ops: bool) -> TraceTables:
    return _trace_with_meta(path, device_ops)[0]


@pytest.mark.parametrize("entry", _params(TRACE_KINDS))
def test_trace_tables_match_raw_events(entry: Entry) -> None:
    raw = _raw_trace(entry.path)
    tables, meta = _trace_with_meta(entry.path, True)
    assert tables.ops is not None
    assert len(tables.ops) == len(raw.device)
    assert len(tables.events) == raw.other_x
    assert len(tables.counters) == raw.counters
    assert len(tables.steps) == raw.iterations
    ops = tables.ops
    starts_ns = absolute_ns(meta, ops["start_us"].to_numpy())
    for e in raw.device[:: max(1, len(raw.device) // 9)]:
        row = ops[(ops["name"] == e["name"]).to_numpy() & (starts_ns == ns_of(e["ts"]))]  # exact to the ns
        assert len(row) >= 1, e["name"]
        row = row.iloc[0]
        assert row["duration_us"] == pytest.approx(float(e["dur"]))
        task_type = (e.get("args") or {}).get("Task Type")
        if task_type:
            assert row["core"] == task_type.upper()
        stream = (e.get("args") or {}).get("Stream Id", (e.get("args") or {}).get("Physic Stream Id"))
        if stream is not None:
            assert row["stream_id"] == float(stream)


def _collective_tasks(device: list[dict]) -> list[tuple[str, int]]:
    """The device tasks a reader without device ops keeps: a collective's task names on a stream (tid) that holds
    a notify wait."""
    names = re.compile(r"(?i:notify[ _]?(wait|record)|write[ _]?value|sdma|rdma\w*|memcpy(_async)?"
                       r"|reduce[ _]?(async|inline|tbe)\w*|local[ _]?copy)")
    streams = {e.get("tid") for e in device if re.search(r"(?i)notify[ _]?wait", str(e.get("name")))}
    return sorted((str(e["name"]), int(e["tid"])) for e in device
                  if e.get("tid") in streams and names.fullmatch(str(e.get("name"))))


@pytest.mark.parametrize("entry", _params(TRACE_KINDS))
def test_trace_without_device_ops_keeps_everything_else(entry: Entry) -> None:
    """Device tasks are dropped, except the collectives' on communication streams (kept as events); every other
    event and counter is kept."""
    raw = _raw_trace(entry.path)
    tables, meta = _trace_with_meta(entry.path, False)
    assert tables.ops is None
    kept = (tables.events["process"].astype(str) == "Ascend Hardware") & \
        (tables.events["category"].astype(str) == "device_task")
    tasks = tables.events[kept.to_numpy()]
    assert sorted(zip(tasks["name"].astype(str), tasks["tid"].astype(int), strict=True)) == _collective_tasks(raw.device)
    assert len(tables.events) - len(tasks) == raw.other_x
    assert len(tables.counters) == raw.counters
    if raw.first_other is not None:
        ev = tables.events
        first = raw.first_other
        match = ev[(ev["name"] == first["name"]).to_numpy()
                   & (absolute_ns(meta, ev["start_us"].to_numpy()) == ns_of(first["ts"]))]
        assert len(match) >= 1
        assert match["duration_us"].iloc[0] == pytest.approx(float(first.get("dur", "nan")), nan_ok=True)


# ---------------------------------------------------------------------------------------------------------
# MindSpore 1.x profiler directories
# ---------------------------------------------------------------------------------------------------------
_DEV = re.compile(r"_(\d+)(?:_detail|_type|_detail_time)?\.(?:csv|json|txt)$")


def _device_of(path: Path) -> int | None:
    m = _DEV.search(path.name)
    return int(m.group(1)) if m else None


@cache
def _legacy(directory: Path, device: int | None) -> Profile:
    return read_source(RankSource(directory, "mindspore-legacy", device))


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh))


def _canon_shapes(info: dict[str, Any], side: str) -> str:
    items = sorted(((int(k.split("_")[1]), v) for k, v in info.items() if k.startswith(side + "_")))
    out = []
    for _, desc in items:
        shape = desc.get("shape")
        out.append(",".join(str(d) for d in shape) if isinstance(shape, list) else str(shape or "").replace(" ", ""))
    return ";".join(out)


def _timeline_names(directory: Path, device: int) -> list[str] | None:
    path = directory / f"ascend_timeline_display_{device}.json"
    if not path.is_file():
        return None
    events = json.loads(path.read_text(encoding="utf-8"))
    return [e["args"]["fullname"] for e in events if e.get("ph") == "X" and "fullname" in (e.get("args") or {})]


@pytest.mark.parametrize("entry", _params(LEGACY_KINDS))
def test_legacy_file_is_ingested(entry: Entry) -> None:  # noqa: C901 - one branch per legacy file kind, each checked against its raw rows
    directory, name = entry.path.parent, entry.path.name
    device = _device_of(entry.path)
    if name.startswith("ascend_cluster_analyse_"):
        device = int(re.search(r"_(\d+)\.csv$", name).group(1))  # type: ignore[union-attr]
    profile = _legacy(directory, device)
    ops, meta = profile.ops, profile.meta
    read = {Path(p).name for p in meta.files_read}
    skipped = {Path(s.path).name: s.reason for s in meta.files_skipped}

    if name.endswith(".txt"):
        assert name in skipped and name not in read
    elif name == "step_trace_point_info.json":
        assert profile.extras["step_trace_points"] == json.loads(entry.path.read_text(encoding="utf-8"))
    elif name.startswith("aicore_intermediate_") and name.endswith("_detail.csv"):
        raw = _rows(entry.path)
        key = "full_op_name" if "full_op_name" in raw[0] else "full_kernel_name"
        core = ops[ops["core"] == "AI_CORE"]
        timeline = _timeline_names(directory, device)  # type: ignore[arg-type]
        if timeline is not None:  # tasks from the timeline: one row per task
            assert len(core) == len(timeline)
        else:
            assert len(core) == sum(int(r.get("execution_frequency") or 1) for r in raw)
        assert set(core["name"].astype(str)) == {r[key] for r in raw}
        mean = core.groupby("name", observed=True)["duration_us"].mean()
        for r in raw[:: max(1, len(raw) // 10)]:
            assert mean[r[key]] == pytest.approx(float(r["execution_time"]) * 1000.0, rel=1e-6)
    elif name.startswith("aicore_intermediate_") and name.endswith("_type.csv"):
        raw = _rows(entry.path)
        assert len(profile.op_stats) == len(raw)
        time_col = "total_time" if "total_time" in raw[0] else "execution_time"
        type_col = "kernel_type" if "kernel_type" in raw[0] else "op_type"
        first = profile.op_stats.iloc[0]
        assert first["type"] == raw[0][type_col]
        assert first["total_us"] == pytest.approx(float(raw[0][time_col]) * 1000.0)
    elif name.startswith("framework_raw_"):
        raw = _rows(entry.path)
        key = "full_op_name" if "full_op_name" in raw[0] else "full_kernel_name"
        type_key = "op_type" if "op_type" in raw[0] else "kernel_type"
        by_name = {}
        for r in raw:
            by_name.setdefault(r[key], r)
        core = ops[ops["core"] == "AI_CORE"].drop_duplicates("name")
        assert len(core) and set(core["name"].astype(str)) <= set(by_name)
        for _, row in core.iloc[:: max(1, len(core) // 10)].iterrows():
            r = by_name[row["name"]]
            assert row["type"] == r[type_key]
            assert row["block_dim"] == float(r["block_dim"])
            info = json.loads(r["op_info"])
            expected = _canon_shapes(info, "input")
            assert (row["input_shapes"] if isinstance(row["input_shapes"], str) else "") == expected
    elif name.startswith("aicpu_intermediate_"):
        raw = _rows(entry.path)
        cpu = ops[ops["core"] == "AI_CPU"].sort_values("start_us")
        assert len(cpu) == len(raw)
        for r, (_, row) in zip(raw, cpu.iterrows(), strict=True):
            assert row["name"] == r["kernel_type"]
            assert row["duration_us"] == pytest.approx(float(r["run_end"]) - float(r["run_start"]))
    elif name.startswith("step_trace_raw_"):
        raw = [r for r in _rows(entry.path) if r["step_num"].isdigit() and r["step_num"] != "0"]
        assert len(profile.steps) == len(raw)
        assert profile.steps["duration_us"].iloc[0] == pytest.approx(float(raw[0]["total"]) / 100.0)
        assert profile.steps["computing_us"].iloc[-1] == pytest.approx(float(raw[-1]["fp_and_bp"]) / 100.0)
    elif name.startswith("hccl_raw_"):
        expected = 0
        transports: dict[tuple[str, str], set[str]] = defaultdict(set)
        for r in _rows(entry.path):
            if not r["step_num"].isdigit():
                continue
            for op, values in json.loads(r["communication_operator_cost"]).items():
                links = values[3] if len(values) > 3 else {}
                found = {t for link in links.values() for t in link}
                transports[(r["step_num"], op)] = found
                expected += max(1, len(found))
        assert len(profile.comm) == expected
        (step, op), found = next(iter(transports.items()))
        rows = profile.comm[(profile.comm["step"] == float(step)) & (profile.comm["op"] == op)]
        assert set(rows["transport"].dropna()) == found
    elif name.startswith("minddata_pipeline_raw_"):
        assert len(profile.extras["minddata_pipeline"]) == len(_rows(entry.path))
    elif name.startswith("ascend_cluster_analyse_"):
        raw = _rows(entry.path)
        cluster = profile.extras["cluster_analyse"]
        assert len(cluster) == len(raw)
        assert cluster["computation_us"].iloc[0] == pytest.approx(float(raw[0]["computation_time"]) * 1000.0)
    elif name.startswith(("ascend_timeline_display_", "timeline_display_")):
        events = json.loads(entry.path.read_text(encoding="utf-8"))
        tasks = [e for e in events if e.get("ph") == "X" and "fullname" in (e.get("args") or {})]
        detail = directory / f"aicore_intermediate_{device}_detail.csv"
        csv_names = {r.get("full_op_name") or r.get("full_kernel_name") for r in _rows(detail)}
        if {e["args"]["fullname"] for e in tasks} & csv_names:  # same run as the CSVs: tasks are the ops
            core = ops[ops["core"] == "AI_CORE"]
            assert len(core) == len(tasks)
            assert sorted(core["duration_us"].round(6)) == sorted(round(float(e["dur"]), 6) for e in tasks)
            assert name in read
        else:  # a timeline of another run (run_1 in the samples): reported, not mixed in
            assert name in skipped and "do not match" in skipped[name]
            assert len(_trace(entry.path, False).events) == sum(1 for e in events if e.get("ph") == "X")
    else:
        pytest.fail(f"no check for {name}")
