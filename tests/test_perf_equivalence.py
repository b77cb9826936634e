"""The fast paths of issue 18 give exactly what the straightforward code gives: time stamps parsed vectorized
(``ns_of_many``) equal ``ns_of`` one by one, and a trace read in blocks cut after their last ``},`` equals the same
trace parsed whole, wherever the cuts fall (strings holding ``},``, nested args, odd spacing)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import orjson
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.ingest import jsonstream
from advisor.ingest.timebase import ns_of, ns_of_many
from advisor.ingest.timeline import read_trace
from advisor.model import Meta

_DECIMALS = st.builds(lambda neg, whole, frac: f"{'-' if neg else ''}{whole}{'.' + frac if frac is not None else ''}",
                      st.booleans(), st.integers(0, 10**17),
                      st.none() | st.text("0123456789", max_size=7))
_TS = st.one_of(_DECIMALS, st.floats(allow_nan=True, allow_infinity=True), st.integers(-10**19, 10**19), st.none(),
                st.text(max_size=6), st.sampled_from([" 12.5", "1e3", "+5.5", ".5", "1_0", "٣.5", "12.5\t"]))


@settings(max_examples=300, deadline=None)
@given(st.lists(_TS, max_size=40), st.booleans())
def test_vectorized_time_stamps_equal_ns_of(values: list[object], same_width: bool) -> None:
    if same_width:  # the fixed-width fast path: every string "ddd...d.ddd" of one length
        values = [f"{abs(hash(str(v))) % 10**16:016d}.{abs(hash(repr(v))) % 1000:03d}" for v in values]
    assert ns_of_many(values).tolist() == [ns_of(v) for v in values]


def _events(n: int) -> list[dict[str, object]]:
    out: list[dict[str, object]] = [{"ph": "M", "name": "process_name", "pid": 1, "tid": 0,
                                     "args": {"name": "Python"}},
                                    {"ph": "M", "name": "process_name", "pid": 2, "tid": 0,
                                     "args": {"name": "Ascend Hardware"}}]
    for i in range(n):
        tricky = "},{\"ph\":\"X\"" if i % 7 == 0 else "a]b}c"
        out.append({"ph": "X", "name": f"aten::op{i % 5}", "pid": 1, "tid": i % 3, "ts": f"{1736413971558000 + i}.{i % 1000:03d}",
                    "dur": 1.5 + i, "cat": "cpu_op", "args": {"Call stack": tricky, "Sequence number": i,
                                                             "Input Dims": [[1, i % 4]]}})
        out.append({"ph": "X", "name": f"Kernel{i % 3}", "pid": 2, "tid": 2, "ts": 1000.5 + i, "dur": 2.0,
                    "args": {"Task Type": "AI_CORE", "Stream Id": 2, "Task Id": i}})
        out.append({"ph": "f", "name": "flow", "pid": 2, "tid": 2, "ts": str(i), "id": i, "bp": "e"})
        if i % 11 == 0:
            out.append({"ph": "C", "name": "AI Core Freq", "pid": 2, "ts": str(i), "args": {"MHz": 1800 + i}})
    return out


def _frames_equal(a: pd.DataFrame, b: pd.DataFrame) -> None:
    pd.testing.assert_frame_equal(a.drop(columns=["args"], errors="ignore"), b.drop(columns=["args"], errors="ignore"))
    if "args" in a.columns:
        assert a["args"].tolist() == b["args"].tolist()


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 400), st.sampled_from([64, 257, 1024, 4096]), st.sampled_from([",", ", ", ",\n  "]))
def test_block_cuts_do_not_change_the_tables(n: int, block: int, sep: str) -> None:
    import tempfile

    events = _events(n)
    text = "[" + sep.join(json.dumps(e) for e in events) + "]"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace_view.json"
        path.write_text(text, encoding="utf-8")
        whole = read_trace(path, Meta(), device_ops=True)
        from advisor.ingest import timeline

        saved = timeline.TRACE_BLOCK_BYTES
        timeline.TRACE_BLOCK_BYTES = block
        try:
            cut = read_trace(path, Meta(), device_ops=True)
        finally:
            timeline.TRACE_BLOCK_BYTES = saved
    _frames_equal(whole.events, cut.events)
    _frames_equal(whole.ops, cut.ops)
    _frames_equal(whole.counters, cut.counters)
    assert len(whole.events) == n and len(whole.ops) == n


def test_blocks_parse_to_what_orjson_parses(tmp_path: Path) -> None:
    """Every element of the array comes out once, in order, whatever the block size."""
    events = _events(60)
    path = tmp_path / "t.json"
    path.write_bytes(orjson.dumps(events))
    for block in (16, 100, 333, 1 << 20):
        with open(path, "rb") as f:
            got = [e for batch in jsonstream.iter_array_batches(f, block) for e in batch]
        assert got == events
    assert np.all(np.diff([int(e["ts"].split(".")[0]) for e in events if e["ph"] == "X" and e["pid"] == 1]) >= 0)
