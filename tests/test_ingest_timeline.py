"""Streamed trace-JSON reading: what goes to ops/events/counters/steps, both ``ts`` spellings, metadata after
the events, broken files as one-line InputErrors, bounded memory, and files left untouched."""

from __future__ import annotations

import hashlib
import json
import math
import os
import stat
import tracemalloc
from pathlib import Path
from typing import Any

import pytest

from advisor.common.errors import InputError
from advisor.ingest import load
from advisor.ingest.timebase import absolute_ns
from advisor.ingest.timeline import MAX_ARGS, TraceTables, read_trace
from advisor.model import EVENTS_COLUMNS, STEPS_COLUMNS, Meta

HW, CANN, PY, OVL, FREQ = 800, 100002, 1000, 1000011, 900


def _write(path: Path, events: list[dict[str, Any]] | dict[str, Any]) -> Path:
    path.write_text(json.dumps(events), encoding="utf-8")
    return path


def _meta(pid: int, name: str) -> dict[str, Any]:
    return {"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name}}


def _torch_like() -> list[dict[str, Any]]:
    """A trace_view.json in miniature; the process metadata comes LAST (allowed by the format)."""
    stack = "model.py(10): forward\ntrain.py(42): step"
    return [
        {"ph": "X", "name": "aten::matmul", "pid": PY, "tid": PY, "ts": "1736413971558000.500", "dur": 6.0,
         "cat": "cpu_op", "args": {"Sequence number": -1, "Call stack": stack}},
        {"ph": "X", "name": "aten::add", "pid": PY, "tid": PY, "ts": "1736413971558010.250", "dur": 4.0,
         "cat": "cpu_op", "args": {"Sequence number": -1, "Call stack": stack}},
        {"ph": "X", "name": "AscendCL@aclrtSynchronizeStream", "pid": CANN, "tid": PY,
         "ts": "1736413971558020.000", "dur": 50.0, "args": {"level": "acl", "connection_id": 1}},
        {"ph": "s", "name": "torch_to_npu", "id": "1", "pid": PY, "tid": PY, "ts": "1736413971558000.500",
         "cat": "async_npu"},
        {"ph": "X", "name": "MatMulV2", "pid": HW, "tid": 2, "ts": "1736413971558972.912", "dur": 120.5,
         "args": {"Model Id": 4294967295, "Task Type": "AI_CORE", "Physic Stream Id": 2, "Task Id": 7}},
        {"ph": "X", "name": "Add", "pid": HW, "tid": 3, "ts": 1736413971559100.25, "dur": 3.5,
         "args": {"Model Id": 12, "Task Type": "AI_VECTOR_CORE", "Stream Id": 3, "Task Id": 8}},
        {"ph": "X", "name": "Computing", "pid": OVL, "tid": 0, "ts": "1736413971558972.912", "dur": 131.0},
        {"ph": "C", "name": "AI Core Freq", "pid": FREQ, "tid": 0, "ts": "1736413971558000.000",
         "args": {"MHz": 1800}},
        {"ph": "C", "name": "read_bandwidth", "pid": FREQ, "tid": 0, "ts": "1736413971558500.000",
         "args": {"value": 3, "acc_id": 0, "label": "x"}},
        _meta(PY, "Python"), _meta(CANN, "CANN"), _meta(HW, "Ascend Hardware"), _meta(OVL, "Overlap Analysis"),
        _meta(FREQ, "AI Core Freq"),
    ]


def test_tables_from_a_torch_like_trace(tmp_path: Path) -> None:
    path = _write(tmp_path / "trace_view.json", _torch_like())
    meta = Meta()
    t = read_trace(path, meta, device_ops=True)
    assert str(path) in meta.files_read

    ops = t.ops
    assert ops is not None and list(ops["name"]) == ["MatMulV2", "Add"]
    assert list(ops["core"]) == ["AI_CORE", "AI_VECTOR_CORE"]
    # ts string with 3 decimals and ts float: both us, never scaled
    assert absolute_ns(meta, ops["start_us"].to_numpy()).tolist() == [1736413971558972_912, 1736413971559100_250]
    assert ops["duration_us"].tolist() == [120.5, 3.5]
    assert ops["stream_id"].tolist() == [2.0, 3.0]  # "Physic Stream Id" (newer) and "Stream Id" (older)
    assert ops["task_id"].tolist() == [7.0, 8.0]
    assert math.isnan(ops["model_id"].iloc[0]) and ops["model_id"].iloc[1] == 12.0

    ev = t.events
    assert list(ev.columns) == EVENTS_COLUMNS
    assert ev["process"].astype(str).tolist() == ["Python", "Python", "CANN", "Overlap Analysis"]
    assert ev["name"].astype(str).tolist() == ["aten::matmul", "aten::add", "AscendCL@aclrtSynchronizeStream",
                                               "Computing"]
    assert ev["category"].astype(object).tolist()[:2] == ["cpu_op", "cpu_op"]
    assert ev["args"].iloc[2] == {"level": "acl"}  # per-event flow ids (connection_id) are dropped: see _VOLATILE_ARGS
    assert ev["args"].iloc[3] is None
    # repeated call stacks are stored once
    assert ev["args"].iloc[0]["Call stack"] is ev["args"].iloc[1]["Call stack"]

    c = t.counters
    assert c[["name", "key", "value"]].astype(object).values.tolist() == [
        ["AI Core Freq", "MHz", 1800.0], ["read_bandwidth", "value", 3.0], ["read_bandwidth", "acc_id", 0.0]]
    assert set(c["process"].astype(str)) == {"AI Core Freq"}
    assert len(t.steps) == 0 and list(t.steps.columns)[: len(STEPS_COLUMNS)] == STEPS_COLUMNS
    assert any("'s' events" in n for n in meta.notes)


def test_device_ops_false_drops_device_tasks(tmp_path: Path) -> None:
    events = _torch_like()
    events = events[-5:] + events[:-5]  # metadata first this time: tasks are dropped while streaming
    path = _write(tmp_path / "trace_view.json", events)
    meta = Meta()
    t = read_trace(path, meta, device_ops=False)
    assert t.ops is None
    assert "Ascend Hardware" not in set(t.events["process"].astype(str))
    assert len(t.events) == 4
    assert any("2 'Ascend Hardware' task events not read" in n for n in meta.notes)


def test_trace_events_object_and_no_metadata(tmp_path: Path) -> None:
    """``{"traceEvents": [...]}`` is accepted; a pid without process_name is named by its pid."""
    doc = {"otherData": {"x": 1}, "traceEvents": [
        {"ph": "X", "name": "EVENT_WAIT_1", "pid": "1993459 aclGraph", "tid": "stream165", "ts": 0, "dur": 9.5,
         "args": {"Model Id": 1, "Stream Id": 165, "Task Id": 0}}]}
    t = read_trace(_write(tmp_path / "graph_debug.json", doc), Meta(), device_ops=True)
    assert t.ops is not None and len(t.ops) == 0
    assert t.events["process"].astype(str).tolist() == ["1993459 aclGraph"]
    assert t.events["start_us"].tolist() == [0.0]


def test_big_arg_sets_are_not_kept(tmp_path: Path) -> None:
    args = {f"k{i}": i for i in range(MAX_ARGS + 1)}
    path = _write(tmp_path / "t.json", [{"ph": "X", "name": "x", "pid": 1, "tid": 1, "ts": 1, "dur": 1,
                                         "args": args}])
    assert read_trace(path, Meta(), device_ops=False).events["args"].iloc[0] is None


def test_msprof_step_trace(tmp_path: Path) -> None:
    """msprof writes iteration markers into Ascend Hardware on a "Step Trace" thread: steps, not tasks."""
    events = [
        _meta(3, "Ascend Hardware"),
        {"ph": "M", "name": "thread_name", "pid": 3, "tid": 10036, "args": {"name": "Step Trace(Model ID:2)"}},
        {"ph": "X", "name": "Iteration 1", "pid": 3, "tid": 10036, "ts": 100.0, "dur": 1000.0,
         "cat": "Iteration Time", "args": {"Iteration ID": 1, "Iteration Time(ns)": 1000000.0}},
        {"ph": "X", "name": "FP_BP Time 1", "pid": 3, "tid": 10036, "ts": 110.0, "dur": 600.0,
         "cat": "FP_BP Time", "args": {"Iteration ID": 1}},
        {"ph": "X", "name": "Iteration Refresh 1", "pid": 3, "tid": 10036, "ts": 710.0, "dur": 390.0,
         "cat": "Iteration Refresh", "args": {"Iteration ID": 1}},
        {"ph": "X", "name": "Reduce_1_0", "pid": 3, "tid": 10036, "ts": 720.0, "dur": 100.0, "cat": "Reduce",
         "args": {"Iteration ID": 1}},
        {"ph": "X", "name": "Reduce_1_1", "pid": 3, "tid": 10036, "ts": 780.0, "dur": 100.0, "cat": "Reduce",
         "args": {"Iteration ID": 1}},
        {"ph": "X", "name": "Marker", "pid": 3, "tid": 10036, "ts": 900.0, "dur": 1.0},
        {"ph": "X", "name": "Conv2D", "pid": 3, "tid": 2, "ts": 120.0, "dur": 50.0,
         "args": {"Task Type": "AI_CORE", "Stream Id": 2, "Task Id": 4}},
    ]
    t = read_trace(_write(tmp_path / "msprof_0_1_1.json", events), Meta(), device_ops=True)
    assert t.ops is not None and t.ops["name"].tolist() == ["Conv2D"]
    assert len(t.events) == 6  # 5 iteration markers + the step-thread marker
    step = t.steps.iloc[0]
    assert step["step"] == 1.0 and step["duration_us"] == 1000.0 and step["computing_us"] == 600.0
    assert step["communication_us"] == pytest.approx(160.0)  # union of the two overlapping reduces
    assert step["refresh_us"] == 390.0


def test_layout_trace_json_through_load(tmp_path: Path) -> None:
    path = _write(tmp_path / "trace_view.json", _torch_like())
    [profile] = load(path)
    assert profile.meta.layout == "trace-json"
    assert len(profile.ops) == 2 and len(profile.events) == 4
    assert len(profile.extras["counters"]) == 3


# ---------------------------------------------------------------------------------------------------------
# broken files
# ---------------------------------------------------------------------------------------------------------
def test_truncated_json_names_file_and_byte(tmp_path: Path) -> None:
    text = json.dumps(_torch_like())
    path = tmp_path / "trace_view.json"
    path.write_text(text[: len(text) // 2], encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_trace(path, Meta(), device_ops=True)
    assert err.value.path == str(path)
    assert err.value.problem == f"truncated JSON (file ends inside an unfinished value at byte {len(text) // 2})"
    assert "\n" not in str(err.value)


def test_truncated_json_through_load_is_input_error(tmp_path: Path) -> None:
    path = tmp_path / "msprof_20250101000000.json"
    path.write_text('[{"ph": "X", "name": "a", "pid": 1, "ts": 1, "dur": 1}, {"ph": "X", "na', encoding="utf-8")
    with pytest.raises(InputError, match="truncated JSON"):
        load(path)


@pytest.mark.parametrize("content, expected", [
    ('[{"ph": "X", "name": x}]', "invalid JSON"),
    ("", "empty file"),
    ("   \n", "empty file"),
    ("42", "not a trace"),
    ('[{"ph": "X"}] trailing', "invalid JSON"),
])
def test_bad_json_is_one_line_input_error(tmp_path: Path, content: str, expected: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError) as err:
        read_trace(path, Meta(), device_ops=True)
    assert expected in err.value.problem and err.value.path == str(path)
    assert "\n" not in str(err.value)


def test_missing_file_is_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="cannot be read"):
        read_trace(tmp_path / "nope.json", Meta(), device_ops=True)


# ---------------------------------------------------------------------------------------------------------
# streaming: memory does not grow with the file, only with the rows kept
# ---------------------------------------------------------------------------------------------------------
def _big_trace(path: Path, n: int) -> None:
    """n device tasks + n flow events + a few host events; written incrementally (no big list in memory)."""
    with open(path, "w", encoding="utf-8") as fh:
        fh.write("[" + json.dumps(_meta(HW, "Ascend Hardware")))
        for i in range(n):
            ts = "%.3f" % (1736413971558000.0 + i * 10.0)
            fh.write(",\n" + json.dumps({"ph": "X", "name": f"Kernel_{i % 16}", "pid": HW, "tid": 2, "ts": ts,
                                         "dur": 5.0, "args": {"Model Id": 4294967295, "Task Type": "AI_CORE",
                                                              "Stream Id": 2, "Task Id": i}}))
            fh.write(",\n" + json.dumps({"ph": "f", "bp": "e", "name": "torch_to_npu", "id": str(i), "pid": HW,
                                         "tid": 2, "ts": ts, "cat": "async_npu"}))
        for i in range(10):
            fh.write(",\n" + json.dumps({"ph": "X", "name": f"ProfilerStep#{i}", "pid": PY, "tid": PY,
                                         "ts": str(i), "dur": 1.0, "cat": "cpu_op"}))
        fh.write("]\n")


def _peak_bytes(path: Path, device_ops: bool) -> tuple[int, TraceTables]:
    tracemalloc.start()
    try:
        t = read_trace(path, Meta(), device_ops=device_ops)
        return tracemalloc.get_traced_memory()[1], t
    finally:
        tracemalloc.stop()


def test_streaming_memory_does_not_grow_with_the_file(tmp_path: Path) -> None:
    """Dropping device tasks, the peak is one parse block's worth whatever the file size (json.load would need
    ~20x the file as Python objects)."""
    small, big = tmp_path / "small.json", tmp_path / "big.json"
    _big_trace(small, 10_000)
    _big_trace(big, 80_000)
    assert big.stat().st_size > 8 * small.stat().st_size / 1.1 > 20_000_000
    peak_small, _ = _peak_bytes(small, device_ops=False)
    peak_big, t = _peak_bytes(big, device_ops=False)
    assert len(t.events) == 10
    assert peak_big < 1.5 * peak_small + 2_000_000, (peak_small, peak_big)
    assert peak_big < 48_000_000, peak_big  # one block's objects, not the 20+ MB file's


def test_streaming_memory_is_bounded(tmp_path: Path) -> None:
    path = tmp_path / "trace_view.json"
    _big_trace(path, 10_000)
    size = path.stat().st_size
    assert size > 3_000_000

    tracemalloc.start()
    try:
        t = read_trace(path, Meta(), device_ops=False)
        _, peak_dropped = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        t_ops = read_trace(path, Meta(), device_ops=True)
        _, peak_kept = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(t.events) == 10 and len(t_ops.ops) == 10_000  # type: ignore[arg-type]
    # nothing kept -> one parse block's objects, independent of the file size (see the test above)
    assert peak_dropped < 64_000_000, peak_dropped
    # kept rows: the peak is a small multiple of the finished table (building it), not of the file
    kept = int(t_ops.ops.memory_usage(deep=True).sum())  # type: ignore[union-attr]
    assert peak_kept < peak_dropped + 2.5 * kept + 2_000_000, (peak_kept, peak_dropped, kept)


# ---------------------------------------------------------------------------------------------------------
# read-only
# ---------------------------------------------------------------------------------------------------------
def test_input_file_unchanged_and_read_only_ok(tmp_path: Path) -> None:
    path = _write(tmp_path / "trace_view.json", _torch_like())
    before = hashlib.sha256(path.read_bytes()).hexdigest()
    os.chmod(path, stat.S_IRUSR)
    os.chmod(tmp_path, stat.S_IRUSR | stat.S_IXUSR)
    try:
        listing = sorted(p.name for p in tmp_path.iterdir())
        t = read_trace(path, Meta(), device_ops=True)
        assert t.ops is not None and len(t.ops) == 2
        assert sorted(p.name for p in tmp_path.iterdir()) == listing
    finally:
        os.chmod(tmp_path, stat.S_IRWXU)
        os.chmod(path, stat.S_IRUSR | stat.S_IWUSR)
    assert hashlib.sha256(path.read_bytes()).hexdigest() == before


def test_coded_columns_give_the_tables_per_row_objects_gave(tmp_path: Path) -> None:
    """Host event columns are buffered as codes into their distinct values; the events table is what one object
    per row gave: categories sorted and only those of kept rows, ``str(pid)`` of a float pid as written, equal
    args one shared dict."""
    events = [
        {"ph": "X", "name": "zeta", "pid": 7, "tid": 2, "ts": 1.0, "dur": 1.0, "cat": "b", "args": {"k": "v"}},
        {"ph": "X", "name": "alpha", "pid": 7, "tid": 1, "ts": 2.0, "dur": 1.0, "args": {"k": "v"}},
        {"ph": "X", "name": 12, "pid": 7.5, "tid": "t", "ts": 3.0, "dur": 1.0, "cat": "a"},
        {"ph": "X", "name": "task", "pid": HW, "tid": 3, "ts": 4.0, "dur": 1.0, "args": {"Task Type": "AI_CORE"}},
        _meta(HW, "Ascend Hardware"),  # after its task: the task is recognized at the end and leaves the events
        _meta(7, "Python"),
    ]
    t = read_trace(_write(tmp_path / "t.json", events), Meta(source=str(tmp_path)), device_ops=True)
    ev = t.events
    assert ev["name"].tolist() == ["zeta", "alpha", "12"]
    assert list(ev["name"].cat.categories) == ["12", "alpha", "zeta"]  # sorted; the device task's name is gone
    assert ev["process"].tolist() == ["Python", "Python", "7.5"]
    assert ev["category"].tolist()[0] == "b" and ev["category"].isna().tolist() == [False, True, False]
    assert ev["args"].iloc[0] == {"k": "v"} and ev["args"].iloc[0] is ev["args"].iloc[1]
    assert ev["tid"].astype(str).tolist() == ["2", "1", "t"]
    assert t.ops is not None and t.ops["name"].tolist() == ["task"]


def _same_tables(a: TraceTables, b: TraceTables) -> None:
    import pandas as pd

    for x, y in ((a.events, b.events), (a.counters, b.counters), (a.ops, b.ops), (a.steps, b.steps)):
        pd.testing.assert_frame_equal(x, y)


@pytest.mark.parametrize("odd", [{"ph": "Q", "name": "odd"}, {"name": "no phase"}, {"ph": 7, "name": "number"}])
def test_phase_tagged_decoding_reads_what_the_generic_decoder_reads(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                                    odd: dict[str, Any]) -> None:
    """Blocks are decoded tagged by phase (flows without their fields) until a block holds a phase the tagged
    decoder does not know, or none: from there the generic decoder reads the rest, and nothing differs."""
    import advisor.ingest.timeline as timeline

    events = _torch_like() * 3
    events.insert(len(events) // 2, odd)  # in a later block: earlier blocks were read tagged
    path = _write(tmp_path / "trace_view.json", events)
    monkeypatch.setattr(timeline, "TRACE_BLOCK_BYTES", 512)
    tagged_meta, generic_meta = Meta(), Meta()
    switched: list[bool] = []
    decode = timeline._BlockDecoder.__call__

    def spy(self: Any, data: bytes) -> list[Any]:
        out = decode(self, data)
        switched.append(not self.tagged)
        return out

    monkeypatch.setattr(timeline._BlockDecoder, "__call__", spy)
    tagged = read_trace(path, tagged_meta, device_ops=True)
    assert switched[0] is False and switched[-1] is True  # tagged first, generic after the odd event
    monkeypatch.setattr(timeline._BlockDecoder, "__init__", lambda self: setattr(self, "tagged", False))
    generic = read_trace(path, generic_meta, device_ops=True)
    _same_tables(tagged, generic)
    assert tagged_meta.notes == generic_meta.notes
    assert any("3 's' events" in n for n in tagged_meta.notes)
