"""Chrome trace-event JSON (msprof ``msprof_*.json``/``task_time_*``/``step_trace_*``/``hccl_*``, torch_npu
``trace_view.json``, MindSpore ``ascend_timeline_display_*.json``), read as a stream.

Traces reach several GB, so the file is never loaded whole: ``advisor.ingest.jsonstream`` parses it block by
block (``{"traceEvents": [...]}`` documents go through ``ijson``) and only the columns we keep are accumulated,
with repeated strings interned. Memory therefore grows
with the rows kept, not with the file (a 153 MB ``trace_view.json`` never exists as Python objects at once).

What becomes what:

* ``ph: "M"`` ``process_name`` / ``thread_name`` -> names of pids / (pid, tid). They may come after the events
  they name, so rows keep their pid and names are applied at the end; a pid without metadata is named
  ``str(pid)`` (e.g. ``"1993459 aclGraph"`` in aclGraph debug traces).
* ``ph: "X"`` in the ``Ascend Hardware`` process -> ``ops`` (one row per device task) when ``device_ops=True``;
  when ``device_ops=False`` (the caller has a kernel/op summary for them) only the tasks of the collectives on the
  communication streams are kept, as ``events`` of that process (``Notify Wait``, ``Write Value``, ``SDMA``...:
  ``advisor.timemodel.COMM_DEVICE_TASK``, decided once per distinct name; a stream is a communication stream when
  it holds a notify wait; ``tid`` is the stream) -- a Level0 kernel table lists compute tasks only, and these are
  the only record of how a collective waited -- and the others are dropped. Step-trace events that msprof
  writes into that process (args ``Iteration ID``, thread ``Step Trace...``) are not tasks and go to ``events``.
* every other ``ph: "X"`` -> ``events`` (CANN API ``AscendCL@...``/``Runtime@...``/``Node@launch``, Python
  ``cpu_op``, HCCL ops and tasks, ``Overlap Analysis`` Computing/Communication/Free, GC, dataloader...). Given an
  :class:`advisor.model.EventSelection` (``Meta.events_read``: what the knowledge bases read), only the events it
  selects are kept; the others are counted per process and name as the blocks stream
  (``advisor.ingest.event_summary``), their fields never buffered.
* ``ph: "C"`` -> ``counters``: one row per numeric arg (``AI Core Freq`` ``MHz``, ``HBM 0/Read``
  ``Read(MB/s)``...), the arg name in ``key``.
* msprof step trace ``Iteration N`` events (``cat: "Iteration Time"``) -> ``steps``.
* flows (``s``/``t``/``f``) and other phases are skipped (counted in a note).

``ts`` is a float (msprof <= 7.x, MindSpore) or a string with 3 decimals (torch_npu, msprof >= 8.x): both are
microseconds and are parsed, never scaled. ``args`` are kept as a dict (string values interned; events whose args
are equal share one dict, treat them as read-only) when they hold at most :data:`MAX_ARGS` entries, else None.
"""

from __future__ import annotations

import math
import re
import sys
from array import array
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import compress, repeat
from pathlib import Path
from typing import Any, BinaryIO, ClassVar, Union

import msgspec
import numpy as np
import orjson
import pandas as pd

from advisor.common.errors import InputError
from advisor.common.util import release_memory
from advisor.ingest.event_summary import EventCounter, note_counted, split_events
from advisor.ingest.jsonstream import StreamError, iter_array_chunks
from advisor.ingest.layout import Layout, Match, RankSource
from advisor.ingest.normalize import finalize_ops
from advisor.ingest.timebase import ns_of, ns_of_many, set_origin, us_from_ns
from advisor.model import (
    EVENT_SUMMARY_COLUMNS,
    EVENTS_COLUMNS,
    STEPS_COLUMNS,
    EventSelection,
    Meta,
    Profile,
    empty_frame,
    label_mask,
)
from advisor.timemodel import COMM_DEVICE_TASK, comm_streams

try:  # the C backend is ~10x faster; pure-python fallback keeps the reader working everywhere
    import ijson.backends.yajl2_c as _ijson
except ImportError:  # pragma: no cover - depends on how ijson was built
    import ijson as _ijson  # type: ignore[no-redef]

from ijson.common import JSONError

DEVICE_PROCESS = "Ascend Hardware"
TRACE_BLOCK_BYTES = 1 << 20
"""Bytes parsed at a time: the block's events (fields projected, ``args`` raw) take a few times its size."""
_TRIM_EVERY_BLOCKS = 64
"""Blocks between two hand-backs of freed memory to the OS while a trace streams (a 2M-kernel trace: ~1500)."""
MAX_ARGS = 16
"""Events whose args hold more entries than this keep ``args=None`` (the table stays light)."""
_VOLATILE_ARGS = frozenset({"Sequence number", "connection_id", "id", "item_id"})
"""Per-event counters and flow ids no analysis reads (torch_npu Python ``Sequence number``, msprof CANN
``connection_id``/``id``/``item_id``): dropped so that events with equal args share one dict (the 2M Python ops and
2M CANN launches of a 2M-kernel trace then hold one dict per call stack / API level, not 4M dicts)."""
COUNTER_COLUMNS = ["process", "name", "key", "ts_us", "value"]
STEP_EXTRA_COLUMNS = ["start_us", "duration_us", "fp_bp_us", "refresh_us"]
"""Columns beyond ``STEPS_COLUMNS`` filled from msprof step trace: iteration start/length, FP->BP, refresh (tail)."""

_ITERATION = re.compile(r"^Iteration (\d+)$")
_REDUCE = re.compile(r"^Reduce_(\d+)_\d+$")


@dataclass
class TraceTables:
    """What one trace file holds, in the normalized vocabulary."""

    ops: pd.DataFrame | None
    """Canonical ops (``finalize_ops``) from ``Ascend Hardware`` X events; None when read with device_ops=False."""
    events: pd.DataFrame
    """``advisor.model.EVENTS_COLUMNS``: every other X event (those the selection keeps)."""
    counters: pd.DataFrame
    """``process, name, key, ts_us, value`` from C events."""
    steps: pd.DataFrame
    """``advisor.model.STEPS_COLUMNS`` (+ ``STEP_EXTRA_COLUMNS``) from msprof step trace, else empty."""
    event_summary: pd.DataFrame = field(default_factory=lambda: empty_frame(EVENT_SUMMARY_COLUMNS))
    """The X events the selection did not keep, counted per process and name (``advisor.ingest.event_summary``)."""
    process_names: dict[Any, str] = field(default_factory=dict)
    thread_names: dict[tuple[Any, Any], str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------------------------
# streaming
# ---------------------------------------------------------------------------------------------------------
class _EventFields(msgspec.Struct, gc=False):
    """The fields of a trace event that any table keeps; the decoder skips every other key without building it,
    and ``args`` stays raw JSON (``msgspec.Raw``) until a kept row needs it as a dict."""

    pid: Any = None
    tid: Any = None
    name: Any = None
    cat: Any = None
    ts: Any = None
    dur: Any = None
    args: msgspec.Raw = None  # type: ignore[assignment] - None when absent; a dict when built from ijson


class TraceEvent(_EventFields):
    """An event of any phase, ``ph`` as written (the generic decoder, and events built from ijson's dicts)."""

    ph: Any = None


class _XEvent(_EventFields, tag_field="ph", tag="X"):
    """An ``X`` event from the phase-tagged decoder, its phase told by its type."""

    ph: ClassVar[str] = "X"


class _MEvent(_XEvent, tag="M"):
    ph: ClassVar[str] = "M"


class _CEvent(_XEvent, tag="C"):
    ph: ClassVar[str] = "C"


_UNREAD_PHASES = ("B", "E", "i", "I", "b", "n", "e", "s", "t", "f", "P", "N", "O", "D", "V", "v", "R", "c", "(", ")")
"""Trace-event phases no table reads (flows, async, instant, object, sample, mark...): decoded as their phase only."""
_UNREAD_EVENTS = tuple(msgspec.defstruct(f"_Event_{i}", [], tag=ph, tag_field="ph", gc=False, namespace={"ph": ph})
                       for i, ph in enumerate(_UNREAD_PHASES))
_EVENT_TYPES = frozenset({TraceEvent, _XEvent, _MEvent, _CEvent, *_UNREAD_EVENTS})
_ITERATION_KEY = b"Iteration ID"
_DECODER = msgspec.json.Decoder(list[TraceEvent | list | str | int | float | bool | None])
_TAGGED_DECODER = msgspec.json.Decoder(
    list[Union[(_XEvent, _MEvent, _CEvent, *_UNREAD_EVENTS, list, str, int, float, bool, None)]])  # noqa: UP007


class _BlockDecoder:
    """Decodes the blocks of one trace tagged by phase -- ``X``, ``M`` and ``C`` events with their fields, the
    others with none (a torch_npu trace's flow events are two in five: their names, ids and time stamps are never
    built) -- until a block holds an event of another phase, or without one: from there the generic decoder
    (:class:`TraceEvent`, any ``ph``) reads the rest of the file."""

    def __init__(self) -> None:
        self.tagged = True

    def __call__(self, data: bytes) -> list[Any]:
        if self.tagged:
            try:
                return _TAGGED_DECODER.decode(data)
            except msgspec.ValidationError:
                self.tagged = False
        return _DECODER.decode(data)


_TOKEN_BATCH = 8192


def _as_event(d: dict[str, Any]) -> TraceEvent:
    return TraceEvent(d.get("pid"), d.get("tid"), d.get("name"), d.get("cat"), d.get("ts"), d.get("dur"),
                      d.get("args"), ph=d.get("ph"))


def _batches(f: BinaryIO, path: Path) -> Iterator[tuple[list[TraceEvent], bool]]:
    """Yield trace events a block at a time from a list or a ``{"traceEvents": [...]}`` document (elements that
    are not objects are left out), each block with whether its text holds an ``Iteration ID`` (msprof step
    trace) at all."""
    head = f.read(4096)
    stripped = head.lstrip(b"\xef\xbb\xbf \t\r\n")
    if not stripped:
        raise InputError(path, "empty file, expected a JSON trace (a list of trace events)")
    first = stripped[:1]
    f.seek(0)
    if head.startswith(b"\xef\xbb\xbf"):
        f.seek(3)
    if first == b"[":
        f.seek(head.index(b"["))
        try:
            for batch, text in iter_array_chunks(f, TRACE_BLOCK_BYTES, _BlockDecoder()):
                steps = _ITERATION_KEY in text
                if set(map(type, batch)) <= _EVENT_TYPES:
                    yield batch, steps  # type: ignore[misc]
                else:  # bare values (skipped), or dicts from the fallback parser
                    yield [e if type(e) in _EVENT_TYPES else _as_event(e) for e in batch
                           if type(e) in _EVENT_TYPES or type(e) is dict], steps
        except StreamError as e:
            if e.truncated:
                raise InputError(path, f"truncated JSON ({e} at byte {e.offset})") from None
            raise InputError(path, f"{e} near byte {e.offset}") from None
    elif first == b"{":  # {"traceEvents": [...]}: rare for Ascend traces, token-streamed
        batch: list[TraceEvent] = []
        for d in _ijson.items(f, "traceEvents.item", use_float=True):
            if type(d) is dict:
                batch.append(_as_event(d))
                if len(batch) >= _TOKEN_BATCH:
                    yield batch, True
                    batch = []
        if batch:
            yield batch, True
    else:
        raise InputError(path, "not a trace: expected a JSON list of trace events or {\"traceEvents\": [...]}")


def _json_error(path: Path, f: BinaryIO, err: Exception) -> InputError:
    """One line saying where the JSON breaks: truncated files are the common case (a copy cut short)."""
    size = path.stat().st_size
    msg = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
    pos = f.tell() if not f.closed else size
    if "premature EOF" in msg or "incomplete" in msg.lower():
        return InputError(path, f"truncated JSON (file ends inside an unfinished value at byte {size})")
    return InputError(path, f"invalid JSON ({msg} near byte {pos})")


def _num(value: Any) -> float:
    """ts/dur as written: float, int, or a decimal string; anything else is NaN."""
    if value is None:
        return math.nan
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


_intern = sys.intern
_FLOAT_FIELDS = frozenset({"dur", "value"})
_NS_FIELDS = frozenset({"ts"})
"""Time stamps are buffered as exact integer nanoseconds (``advisor.ingest.timebase.ns_of``)."""


def _find(values: list[Any], value: Any, start: int) -> int:
    """The position of ``value`` in ``values`` from ``start`` on, -1 when there is none."""
    try:
        return values.index(value, start)
    except ValueError:
        return -1


class _Coded:
    """A column of repeated values buffered as 4-byte codes into its distinct values (a 2M-kernel trace has 4M
    host events but a few thousand names, threads and args dicts): a quarter of a list of pointers, and a
    categorical for free. ``by_identity`` codes objects by ``id`` (shared args dicts: equal dicts are one object,
    see ``_TraceReader._args``), else by value (``1``, ``1.0`` and ``True`` are one value, as dict keys)."""

    def __init__(self, by_identity: bool = False) -> None:
        self.codes = array("i")
        self.values: list[Any] = []
        self.index: dict[Any, int] = {}
        self.by_identity = by_identity

    def extend(self, values: list[Any]) -> None:
        get, index = self.index.get, self.index
        keys = list(map(id, values)) if self.by_identity else values
        codes = list(map(get, keys, repeat(-1, len(keys))))  # map: a quarter faster than a comprehension
        i = -1
        while (i := _find(codes, -1, i + 1)) >= 0:  # the values new in this block (list.index: a C scan)
            c = get(keys[i], -1)
            if c == -1:
                c = index[keys[i]] = len(self.values)
                self.values.append(values[i])
            codes[i] = c
        self.codes.extend(codes)

    def objects(self) -> np.ndarray:
        """The column as an object array (one pointer per row to the shared value)."""
        table = np.empty(len(self.values), dtype=object)
        for i, v in enumerate(self.values):  # element-wise: a list or tuple value must stay one object
            table[i] = v
        return table[np.frombuffer(self.codes, dtype=np.int32)] if len(self.codes) else np.array([], dtype=object)

    def column(self) -> Any:
        """A categorical when the values are all strings (None: missing) or all ints, else the object array (mixed
        or odd values keep the exact objects: ``str(pid)`` of ``1.0`` is not that of ``1``)."""
        kinds = set(map(type, self.values))
        if not len(self.codes) or not (kinds <= {str, type(None)} or kinds == {int}):
            return self.objects()
        codes = np.frombuffer(self.codes, dtype=np.int32)
        if None in self.values:  # a missing value is code -1, not a category
            remap = np.array([-1 if v is None else i for i, v in enumerate(self.values)], dtype=np.int32)
            remap[remap >= 0] = np.arange(int((remap >= 0).sum()), dtype=np.int32)
            codes = remap[codes]
        categories = pd.Index([v for v in self.values if v is not None])
        return pd.Categorical.from_codes(codes, categories=categories)


class _Columns:
    """Column buffers for the rows being kept: float columns in ``array('d')`` (8 bytes a value, not 32), time
    stamps in ``array('q')`` (integer ns), ``coded`` ones as :class:`_Coded`, the rest in lists (cheaper than a list
    of dicts)."""

    def __init__(self, names: tuple[str, ...], coded: tuple[str, ...] = ()) -> None:
        self.names = names
        self.cols: dict[str, Any] = {n: array("d") if n in _FLOAT_FIELDS else array("q") if n in _NS_FIELDS
                                     else _Coded(by_identity=n == "args") if n in coded else [] for n in names}

    def frame(self, meta: Meta) -> pd.DataFrame:
        """Hand the buffers to a DataFrame one column at a time, freeing each as it goes (lower peak); time stamps
        become microsecond offsets from the rank's origin; coded columns of strings become categoricals (with the
        categories of the rows kept: see :func:`_category`)."""
        data: dict[str, Any] = {}
        for n in self.names:
            buf = self.cols.pop(n)
            if n in _FLOAT_FIELDS:
                data[n] = np.frombuffer(buf, dtype="float64").copy()
            elif n in _NS_FIELDS:
                data[n] = us_from_ns(meta, np.frombuffer(buf, dtype="int64"))
            elif isinstance(buf, _Coded):
                data[n] = buf.objects() if n == "args" else buf.column()
            else:
                data[n] = np.array(buf, dtype=object) if buf else np.array([], dtype=object)
            del buf
        self.cols = {}
        return pd.DataFrame(data)


def _category(col: pd.Series) -> pd.Series:
    """``col.astype("category")`` of its values as objects -- categories sorted, only those present -- without
    going through one object per row when ``col`` is already a categorical."""
    if not isinstance(col.dtype, pd.CategoricalDtype):
        return col.astype("category")
    col = col.cat.remove_unused_categories()
    try:
        ordered = sorted(col.cat.categories)
    except TypeError:  # values that do not sort: the object path decides their order
        return col.astype(object).astype("category")
    return col.cat.reorder_categories(ordered)


_X_FIELDS = ("pid", "tid", "name", "cat", "ts", "dur", "args")
_DEV_FIELDS = ("pid", "tid", "name", "ts", "dur", "core", "type", "stream_id", "task_id", "model_id",
               "total_cycles")
"""Device task rows keep only these (the args dict is not retained: 200k dicts would double the memory)."""
_DEV_ARG_KEYS: dict[str, tuple[str, ...]] = {
    "core": ("Task Type",),
    "type": ("type", "Op Type"),
    "stream_id": ("Stream Id", "Physic Stream Id"),
    "task_id": ("Task Id",),
    "model_id": ("Model Id",),
    "total_cycles": ("Total Cycle",),
}


def _late_device_rows(rows: pd.DataFrame) -> pd.DataFrame:
    """Device rows read before their process metadata still hold their args: extract the task fields."""
    args = rows["args"].tolist()
    out = {"pid": rows["pid"].tolist(), "tid": rows["tid"].tolist(), "name": rows["name"].tolist(),
           "ts": rows["ts"].tolist(), "dur": rows["dur"].tolist()}
    for col, keys in _DEV_ARG_KEYS.items():
        values: list[Any] = []
        for a in args:
            v = None
            if a is not None:
                for k in keys:
                    v = a.get(k)
                    if v is not None:
                        break
            values.append(v)
        out[col] = values
    return pd.DataFrame(out)


_MISSING_ARGS = object()
_ARGS_CACHE_LIMIT = 1 << 16


def _float_or_nan(v: Any) -> float:
    """``dur`` as written (a number or decimal text); NaN when absent or not a number."""
    try:
        return float(v)
    except (TypeError, ValueError):
        return math.nan


def _raw_args(a: Any) -> Any:
    """An event's ``args`` as parsed JSON (``msgspec.Raw`` from the block decoder, already a dict from ijson)."""
    if a is None or type(a) is dict:
        return a
    raw = a if type(a) is bytes else bytes(a)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:  # valid JSON orjson does not take (integers beyond 64 bits)
        return msgspec.json.decode(raw)


class _TraceReader:
    """Accumulates the tables of one trace, a decoded block at a time.

    Per block the work is vectorized where it can be: fields are pulled out of the decoded events with list
    comprehensions, time stamps parsed by :func:`ns_of_many`, and ``args`` decoded only for the rows kept. Process
    metadata (``M`` events) takes effect at its position in the file, as it would event by event.
    """

    def __init__(self, device_ops: bool, meta: Meta, select: EventSelection | None = None) -> None:
        self.device_ops = device_ops
        self.meta = meta
        self.tests = select.tests() if select is not None else None
        """Per field (process, name, category), whether a value selects an event (None: every event is kept); the
        events none selects go to ``dropped``."""
        self.dropped = EventCounter()
        self.keep_pid: dict[Any, bool] = {}  # whether the selection keeps a value, tested once per value
        self.keep_name: dict[str, bool] = {}
        self.keep_cat: dict[Any, bool] = {}
        self.undecided = False
        """Some event was kept because its pid had no process name yet: the selection is applied again at the end."""
        self.proc: dict[Any, str] = {}
        self.threads: dict[tuple[Any, Any], str] = {}
        self.device_pids: set[Any] = set()  # pids already known to be the device process
        self.x = _Columns(_X_FIELDS, coded=("pid", "tid", "name", "cat", "args"))
        self.dev = _Columns(_DEV_FIELDS)
        self.cnt = _Columns(("pid", "name", "key", "ts", "value"))
        # pids, tids and model ids repeat on every event: keep one object per distinct value (not one per row)
        self.canon = {}.setdefault
        # events with the same args share one dict (one per distinct call stack, not per event)
        self.share_args = {}.setdefault
        self.args_by_raw: dict[bytes, Any] = {b"": None, b"{}": None}
        self.skipped_phases: dict[str, int] = {}
        self.n_dropped_device = 0
        self.comm = _Columns(("tid", "name", "ts", "dur"))
        """Device tasks of the collectives, kept when ``device_ops`` is False (see the module doc)."""
        self.comm_name: dict[Any, bool] = {}  # whether a device task name is a collective's, tested once per name
        self.block_steps = True
        self.saw_steps = False
        """Some kept row has an ``Iteration ID`` arg (else no step table is looked for)."""

    def take(self, events: list[TraceEvent], steps: bool = True) -> None:
        """One block of events; ``steps`` False when its text has no ``Iteration ID`` (no step-trace rows)."""
        self.block_steps = steps
        phs = [e.ph for e in events]
        lo = 0
        for i in ([i for i, p in enumerate(phs) if p == "M"] if "M" in phs else ()):
            if i > lo:
                self._segment(events[lo:i], phs[lo:i])
            self._metadata(events[i])
            lo = i + 1
        if lo < len(events):
            self._segment(events[lo:] if lo else events, phs[lo:] if lo else phs)

    def _metadata(self, ev: TraceEvent) -> None:
        margs = _raw_args(ev.args)
        label = margs.get("name") if type(margs) is dict else None
        if type(label) is not str:
            return
        if ev.name == "process_name":
            self.proc[ev.pid] = label
            self.keep_pid.pop(ev.pid, None)
            if label == DEVICE_PROCESS:
                self.device_pids.add(ev.pid)
        elif ev.name == "thread_name":
            self.threads[(ev.pid, ev.tid)] = label

    def _segment(self, events: list[TraceEvent], phs: list[Any]) -> None:
        """A run of events without process metadata."""
        n_x = phs.count("X")
        if n_x < len(phs):
            try:
                counts = Counter(phs)
                if not all(type(k) is str for k in counts):  # 1, 1.0 and True are one key: count by the text
                    raise TypeError
            except TypeError:  # also an unhashable "ph" (a list or object)
                counts = Counter(ph if type(ph) is str else str(ph) for ph in phs)
            for ph, n in counts.items():
                if ph != "X" and ph != "C":
                    self.skipped_phases[ph] = self.skipped_phases.get(ph, 0) + n
            if "C" in counts:
                for e in [e for e, ph in zip(events, phs, strict=True) if ph == "C"]:
                    self._counter(e)
            if not n_x:
                return
            events = [e for e, ph in zip(events, phs, strict=True) if ph == "X"]
        pids = [e.pid for e in events]
        if self.device_pids:
            device = self.device_pids
            on_dev = [p in device for p in pids]
            if self.block_steps and True in on_dev:
                is_step = self._is_step
                on_dev = [d and not is_step(e.args) for d, e in zip(on_dev, events, strict=True)]
            n_dev = on_dev.count(True)
            if n_dev:
                if self.device_ops:
                    self._device_rows(list(compress(events, on_dev)), list(compress(pids, on_dev)))
                else:
                    self.n_dropped_device += n_dev - self._comm_rows(list(compress(events, on_dev)))
                keep = [not d for d in on_dev]
                events = list(compress(events, keep))
                pids = list(compress(pids, keep))
        if events:
            self._host_rows(events, pids)

    def _comm_rows(self, events: list[TraceEvent]) -> int:
        """Keep the device tasks named as a collective's tasks (decided once per distinct name: a block of compute
        kernels costs one set of its names); how many were kept."""
        names = [e.name for e in events]
        known = self.comm_name
        try:
            distinct = set(names)
        except TypeError:  # an unhashable name: not a task name
            return 0
        for n in distinct.difference(known):
            known[n] = type(n) is str and COMM_DEVICE_TASK.fullmatch(n) is not None
        if not any(known[n] for n in distinct):
            return 0
        rows = list(compress(events, map(known.__getitem__, names)))
        cols = self.comm.cols
        cols["tid"].extend([e.tid for e in rows])
        cols["name"].extend([_intern(e.name) for e in rows])
        cols["ts"].frombytes(ns_of_many([e.ts for e in rows]).tobytes())
        cols["dur"].extend([v if type(v) is float else _float_or_nan(v) for v in [e.dur for e in rows]])
        return len(rows)

    @staticmethod
    def _is_step(a: Any) -> bool:
        """msprof writes its step-trace events into the device process: args with an ``Iteration ID``."""
        if a is None:
            return False
        if type(a) is not dict:
            if b"Iteration ID" not in bytes(a):
                return False
            a = _raw_args(a)
        return type(a) is dict and "Iteration ID" in a

    def _host_rows(self, events: list[TraceEvent], pids: list[Any]) -> None:
        names = [v if type(v) is str else str(v) for v in [e.name for e in events]]
        cats = [v if type(v) is str else None for v in [e.cat for e in events]]
        ns = ns_of_many([e.ts for e in events])
        durs = [v if type(v) is float else _float_or_nan(v) for v in [e.dur for e in events]]
        if self.tests is not None:
            set_origin(self.meta, ns)  # what x.frame would take: this trace's first host time stamp
            keep = self._selected(events, pids, names, cats)
            if not all(keep):
                drop = [not k for k in keep]
                gone = ns[np.array(drop)]
                starts = us_from_ns(self.meta, gone) if self.meta.time_origin_ns is not None else \
                    np.full(len(gone), np.nan)  # no time stamp read yet: these have none either
                self.dropped.add(list(compress(pids, drop)), list(compress(names, drop)), starts,
                                 np.array(list(compress(durs, drop)), dtype="float64"))
                if True not in keep:
                    return
                events, pids, names, cats, durs = (list(compress(c, keep)) for c in (events, pids, names, cats, durs))
                ns = ns[np.array(keep)]
        cols = self.x.cols
        cols["pid"].extend(pids)
        cols["tid"].extend([e.tid for e in events])
        cols["name"].extend(names)
        cols["cat"].extend(cats)
        cols["ts"].frombytes(ns.tobytes())
        cols["dur"].extend(durs)
        args = [e.args for e in events]
        if set(map(type, args)) <= {msgspec.Raw, type(None)}:  # from the block decoder: look raw args up first
            keys = [b"" if a is None else bytes(a) for a in args]
            get = self.args_by_raw.get
            args = list(map(get, keys, repeat(_MISSING_ARGS, len(keys))))
            i = -1
            while (i := _find(args, _MISSING_ARGS, i + 1)) >= 0:  # args not seen before (as in _Coded.extend)
                args[i] = self._args(keys[i])
            cols["args"].extend(args)
        else:
            cols["args"].extend([self._args(a) for a in args])

    def _selected(self, events: list[TraceEvent], pids: list[Any], names: list[str], cats: list[Any]) -> list[bool]:
        """Per event, whether the analysis reads it: its process, name or category is selected, its pid is not
        named yet (decided again when the tables are assembled), or it carries msprof step trace (``Iteration
        ID``). Each distinct value is tested once; a block whose processes, names or categories are all selected
        is kept without a test per event."""
        assert self.tests is not None
        process_test, name_test, category_test = self.tests
        proc = self.proc

        def pid_test(pid: Any) -> bool:
            if pid not in proc:
                self.undecided = True
                return True
            return process_test(proc[pid])

        for values, known, test in ((pids, self.keep_pid, pid_test), (names, self.keep_name, name_test),
                                    (cats, self.keep_cat, category_test)):
            distinct = set(values)
            for v in distinct.difference(known):
                known[v] = test(v)
            if all(known[v] for v in distinct):
                return [True] * len(values)
        by_pid, by_name, by_cat = self.keep_pid, self.keep_name, self.keep_cat
        keep = [by_pid[p] or by_name[n] or by_cat[c] for p, n, c in zip(pids, names, cats, strict=True)]
        if self.block_steps and False in keep:
            is_step = self._is_step
            keep = [k or is_step(e.args) for k, e in zip(keep, events, strict=True)]
        return keep

    def _args(self, a: Any) -> dict[str, Any] | None:
        """A kept row's args: volatile keys dropped, strings interned, equal dicts shared; None when empty or
        longer than :data:`MAX_ARGS`."""
        if a is None:
            return None
        raw = None
        if type(a) is not dict:
            raw = bytes(a)
            hit = self.args_by_raw.get(raw, _MISSING_ARGS)
            if hit is not _MISSING_ARGS:
                return hit
            a = _raw_args(raw) if raw else None
        out = None
        if type(a) is dict and a and len(a) <= MAX_ARGS:
            for k in _VOLATILE_ARGS.intersection(a):
                del a[k]
            for k, v in a.items():
                if type(v) is str:
                    a[k] = _intern(v)
            try:
                out = self.share_args(tuple(a.items()), a)
            except TypeError:  # an unhashable value (list, nested dict): keep this event's own
                out = a
            if "Iteration ID" in a:
                self.saw_steps = True
        if raw is not None:
            if len(self.args_by_raw) >= _ARGS_CACHE_LIMIT:
                self.args_by_raw = {b"": None, b"{}": None}
            self.args_by_raw[raw] = out
        return out

    def _device_rows(self, events: list[TraceEvent], pids: list[Any]) -> None:
        canon, intern, cols = self.canon, _intern, self.dev.cols
        cols["pid"].extend([canon(p, p) for p in pids])
        cols["tid"].extend([canon(e.tid, e.tid) for e in events])
        cols["name"].extend([intern(v) if type(v) is str else str(v) for v in [e.name for e in events]])
        cols["ts"].frombytes(ns_of_many([e.ts for e in events]).tobytes())
        cols["dur"].extend([v if type(v) is float else _float_or_nan(v) for v in [e.dur for e in events]])
        core, typ, stream, task, model, cycles = (cols[n].append for n in _DEV_FIELDS[5:])
        for e in events:
            args = _raw_args(e.args)
            if type(args) is not dict or not args:
                core(None), typ(None), stream(None), task(None), model(None), cycles(None)
                continue
            v = args.get("Task Type")
            core(intern(v) if type(v) is str else None)
            v = args.get("type")
            if v is None:
                v = args.get("Op Type")
            typ(intern(v) if type(v) is str else None)
            v = args.get("Stream Id")
            stream(args.get("Physic Stream Id") if v is None else v)
            task(args.get("Task Id"))
            v = args.get("Model Id")
            model(canon(v, v))
            cycles(args.get("Total Cycle"))

    def _counter(self, ev: TraceEvent) -> None:
        args = _raw_args(ev.args)
        if type(args) is not dict:
            return
        cols = self.cnt.cols
        name = ev.name
        name = _intern(name) if type(name) is str else str(name)
        ts = ns_of(ev.ts)
        for key, value in args.items():
            if type(value) is not float and type(value) is not int:
                value = _num(value) if type(value) is str else math.nan
                if math.isnan(value):
                    continue
            cols["pid"].append(ev.pid)
            cols["name"].append(name)
            cols["key"].append(_intern(str(key)))
            cols["ts"].append(ts)
            cols["value"].append(float(value))


def read_trace(path: Path, meta: Meta, *, device_ops: bool, select: EventSelection | None = None) -> TraceTables:
    """Stream one trace file into tables (see the module doc for what goes where). With ``select``, X events it
    does not select are counted into ``event_summary`` instead of kept."""
    path = Path(path)
    reader = _TraceReader(device_ops, meta, select)
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed in finally; the error message needs its position
    except OSError as e:
        raise InputError(path, f"cannot be read ({e.strerror})") from None
    release_memory()  # what the reader before us freed: the events' buffers grow from here
    try:
        for i, (batch, steps) in enumerate(_batches(f, path), start=1):
            reader.take(batch, steps)
            if i % _TRIM_EVERY_BLOCKS == 0:
                release_memory()  # parsed blocks freed between the kept buffers' growth stay resident otherwise
    except JSONError as e:
        raise _json_error(path, f, e) from None
    except TypeError as e:  # an unhashable pid/tid (a list or object where a number belongs)
        raise InputError(path, f"unexpected trace event field ({e})") from None
    except (OSError, ValueError) as e:  # decode errors and I/O failures mid-stream
        raise InputError(path, f"cannot be read as JSON ({str(e).splitlines()[0] if str(e) else type(e).__name__})") \
            from None
    finally:
        f.close()
    release_memory()  # the blocks' parsed events, before the tables are built
    x, dev, cnt, saw_steps = reader.x, reader.dev, reader.cnt, reader.saw_steps
    proc, threads, skipped_phases = reader.proc, reader.threads, reader.skipped_phases
    n_dropped_device = reader.n_dropped_device

    meta.read(path)
    if skipped_phases:
        meta.notes.append(f"{path.name}: skipped " + ", ".join(f"{n} '{p}' events" for p, n in
                                                              sorted(skipped_phases.items())) + " (flows/other)")
    tables = _assemble(x, dev, cnt, proc, threads, device_ops=device_ops, n_dropped=n_dropped_device, meta=meta,
                       path=path, saw_steps=saw_steps)
    if select is not None:
        if reader.undecided:  # rows whose pid was named after them
            tables.events = split_events(tables.events, select, reader.dropped)
        tables.event_summary = reader.dropped.frame(lambda owner: proc.get(owner, str(owner)))
        note_counted(meta, path.name, reader.dropped, tables.event_summary)
    if not device_ops:
        _add_comm_tasks(tables, reader.comm, meta, path, n_dropped_device)
    return tables


def _add_comm_tasks(tables: TraceTables, comm: _Columns, meta: Meta, path: Path, n_dropped: int) -> None:
    """The collectives' device tasks kept while streaming, on communication streams only, as ``Ascend Hardware``
    events (category ``device_task``, ``tid`` the stream); the note says what was kept and what dropped."""
    cf = comm.frame(meta)
    kept = 0
    if len(cf):
        names = cf["name"].astype(object).to_numpy()
        on_comm = comm_streams(names, cf["tid"].astype(object).to_numpy())
        cf = cf[on_comm]
        kept = len(cf)
        n_dropped += int((~on_comm).sum())
    if kept:
        frame = pd.DataFrame({"process": DEVICE_PROCESS, "name": cf["name"].astype(object).to_numpy(),
                              "category": "device_task", "start_us": cf["ts"].to_numpy(dtype="float64"),
                              "duration_us": cf["dur"].to_numpy(dtype="float64"),
                              "tid": cf["tid"].astype(object).to_numpy(), "args": None})
        events = tables.events
        tables.events = _events_frame_concat(events, frame)
        meta.notes.append(f"{path.name}: {kept} '{DEVICE_PROCESS}' task events of collectives read from the "
                          "communication streams (notify waits, transfers)")
    if n_dropped:
        meta.notes.append(f"{path.name}: {n_dropped} '{DEVICE_PROCESS}' task events not read (compute and other "
                          "tasks: the kernel table lists them)")


def comm_task_events(ops: pd.DataFrame) -> pd.DataFrame:
    """The tasks of the collectives among device task rows read as ops (``_ops_frame``), on communication streams,
    as ``Ascend Hardware`` events: for a reader that read the trace's tasks but takes its ops from a kernel table."""
    if not len(ops):
        return empty_frame(EVENTS_COLUMNS)
    named = label_mask(ops["name"], COMM_DEVICE_TASK.fullmatch)
    if not named.any():
        return empty_frame(EVENTS_COLUMNS)
    sub = ops[named]
    streams = sub["stream_id"].to_numpy(dtype="float64")
    on = comm_streams(sub["name"].astype(object).to_numpy(), streams)
    sub = sub[on]
    return pd.DataFrame({"process": DEVICE_PROCESS, "name": sub["name"].astype(object).to_numpy(),
                         "category": "device_task", "start_us": sub["start_us"].to_numpy(dtype="float64"),
                         "duration_us": sub["duration_us"].to_numpy(dtype="float64"),
                         "tid": [int(v) if v == v else None for v in streams[on]], "args": None})


def add_events(events: pd.DataFrame, extra: pd.DataFrame) -> pd.DataFrame:
    """``events`` with ``extra`` rows appended (the columns categorical as the readers make them)."""
    return _events_frame_concat(events, extra) if len(extra) else events


def _events_frame_concat(events: pd.DataFrame, extra: pd.DataFrame) -> pd.DataFrame:
    """``events`` with ``extra`` rows appended, columns categorical as :func:`_events_frame` makes them."""
    if not len(events):
        out = extra
    else:
        out = pd.concat([events.astype({c: object for c in ("process", "name", "category", "tid")}), extra],
                        ignore_index=True)
    for col in ("process", "name", "category"):
        out[col] = out[col].astype(object).astype("category")
    tid = out["tid"]
    out["tid"] = tid.astype("category") if tid.map(type).nunique() <= 1 else tid.astype(str).astype("category")
    return out[EVENTS_COLUMNS].reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------------
# assembling the tables (vectorized, once)
# ---------------------------------------------------------------------------------------------------------
def _process_column(pids: pd.Series, proc: dict[Any, str]) -> pd.Series:
    """pid -> process name (``str(pid)`` where no metadata names it), as a categorical."""
    if isinstance(pids.dtype, pd.CategoricalDtype):  # per distinct pid, not per row
        names = np.array([proc.get(p, str(p)) for p in pids.cat.categories.tolist()], dtype=object)
        name_codes, uniq = pd.factorize(names)
        lut = np.append(name_codes, -1).astype(np.int32)  # a missing pid (code -1) picks the last entry: -1
        named = pd.Categorical.from_codes(lut[pids.cat.codes.to_numpy()], categories=pd.Index(uniq))
        return _category(pd.Series(named, index=pids.index))
    uniq = pd.unique(pids.to_numpy(dtype=object))
    mapping = {p: proc.get(p, str(p)) for p in uniq}
    return pids.map(mapping).astype("category")


def _thread_names(frame: pd.DataFrame, threads: dict[tuple[Any, Any], str]) -> pd.Series:
    if not threads or not len(frame):
        return pd.Series([None] * len(frame), index=frame.index, dtype=object)
    keys = list(zip(frame["pid"].tolist(), frame["tid"].tolist(), strict=True))
    return pd.Series([threads.get(k) for k in keys], index=frame.index, dtype=object)


def _assemble(x: _Columns, dev: _Columns, cnt: _Columns, proc: dict[Any, str],
              threads: dict[tuple[Any, Any], str], *, device_ops: bool, n_dropped: int, meta: Meta,
              path: Path, saw_steps: bool = True) -> TraceTables:
    xf = x.frame(meta)
    late_device = np.zeros(len(xf), dtype=bool)
    if len(xf):
        xf["process"] = _process_column(xf["pid"], proc)
        # rows seen before their process metadata: device tasks are recognised now
        late_device = (xf["process"] == DEVICE_PROCESS).to_numpy().copy()
        if late_device.any():
            is_step = np.fromiter((isinstance(a, dict) and "Iteration ID" in a for a in xf["args"]), bool, len(xf))
            late_device &= ~is_step
            if not device_ops:  # a collective's tasks stay events (as when read after the metadata)
                late_device &= ~label_mask(xf["name"], COMM_DEVICE_TASK.fullmatch)
    late = None
    if len(xf) and late_device.any():
        late = _late_device_rows(xf[late_device]) if device_ops else None
        xf = xf[~late_device]
    devf = dev.frame(meta)
    if late is not None and len(late):
        devf = pd.concat([devf, late], ignore_index=True) if len(devf) else late.reset_index(drop=True)

    # device rows on a "Step Trace" thread are iteration markers, not tasks
    if len(devf) and threads:
        tnames = _thread_names(devf, threads)
        on_step_thread = tnames.fillna("").str.startswith("Step Trace").to_numpy()
        if on_step_thread.any():
            moved = devf[on_step_thread]
            extra = pd.DataFrame({"pid": moved["pid"], "tid": moved["tid"], "name": moved["name"], "cat": None,
                                  "ts": moved["ts"], "dur": moved["dur"], "args": None})
            extra["process"] = DEVICE_PROCESS
            xf = pd.concat([xf, extra], ignore_index=True) if len(xf) else extra
            devf = devf[~on_step_thread]

    ops = _ops_frame(devf) if device_ops else None

    steps = _steps_frame(xf) if saw_steps else empty_frame(STEPS_COLUMNS + STEP_EXTRA_COLUMNS)
    events = _events_frame(xf)
    counters = _counters_frame(cnt, proc, meta)
    return TraceTables(ops=ops, events=events, counters=counters, steps=steps, process_names=dict(proc),
                       thread_names=dict(threads))


def _events_frame(xf: pd.DataFrame) -> pd.DataFrame:
    if not len(xf):
        return empty_frame(EVENTS_COLUMNS)
    out = pd.DataFrame({
        "process": xf["process"].astype("category"),  # categories of every row read, as _process_column made them
        "name": _category(xf["name"]),
        "category": _category(xf["cat"]),
        "start_us": xf["ts"].astype("float64"),
        "duration_us": xf["dur"].astype("float64"),
        "tid": _category(xf["tid"]) if isinstance(xf["tid"].dtype, pd.CategoricalDtype)  # one type: see _Coded
        else xf["tid"].astype("category") if xf["tid"].map(type).nunique() <= 1 else xf["tid"].astype(str)
        .astype("category"),
        "args": xf["args"],
    })
    return out.reset_index(drop=True)


def _ops_frame(devf: pd.DataFrame) -> pd.DataFrame:
    """Device task rows -> canonical ops (``finalize_ops`` types the id columns)."""
    if not len(devf):
        return finalize_ops(pd.DataFrame())
    df = pd.DataFrame({
        "name": devf["name"].to_numpy(dtype=object),
        "type": _text(devf["type"]),
        "core": _text(devf["core"]),
        "start_us": devf["ts"].to_numpy(dtype="float64"),
        "duration_us": devf["dur"].to_numpy(dtype="float64"),
        "stream_id": pd.to_numeric(devf["stream_id"], errors="coerce").to_numpy(dtype="float64"),
        "task_id": pd.to_numeric(devf["task_id"], errors="coerce").to_numpy(dtype="float64"),
        "model_id": pd.to_numeric(devf["model_id"], errors="coerce").to_numpy(dtype="float64"),
        "total_cycles": pd.to_numeric(devf["total_cycles"], errors="coerce").to_numpy(dtype="float64"),
    })
    # stream from the thread id where the task args do not carry it (trace threads are streams)
    missing = df["stream_id"].isna().to_numpy()
    if missing.any():
        tids = pd.to_numeric(devf["tid"].astype(str).str.extract(r"(\d+)$")[0], errors="coerce")
        df.loc[missing, "stream_id"] = tids.to_numpy(dtype="float64")[missing]
    return finalize_ops(df)


def _text(col: pd.Series) -> np.ndarray:
    """Strings stay, anything else (None, numbers written where text is expected) becomes None."""
    return np.array([v if type(v) is str else None for v in col.tolist()], dtype=object)


def _steps_frame(xf: pd.DataFrame) -> pd.DataFrame:
    """msprof step trace: ``Iteration N`` rows, with FP->BP, refresh and reduce time of the same iteration."""
    columns = STEPS_COLUMNS + STEP_EXTRA_COLUMNS
    if not len(xf):
        return empty_frame(columns)
    has_iter = np.fromiter((isinstance(a, dict) and "Iteration ID" in a for a in xf["args"]), bool, len(xf))
    if not has_iter.any():
        return empty_frame(columns)
    st = xf[has_iter]
    ids = pd.to_numeric(pd.Series([a.get("Iteration ID") for a in st["args"]], index=st.index), errors="coerce")
    names = st["name"].astype(str)
    cats = st["cat"].astype(object)
    is_iter = names.str.match(_ITERATION.pattern) | (cats == "Iteration Time")
    iters = pd.DataFrame({"step": ids[is_iter], "start_us": st["ts"][is_iter], "duration_us": st["dur"][is_iter]})
    iters = iters.dropna(subset=["step"]).drop_duplicates("step").set_index("step")
    if not len(iters):
        return empty_frame(columns)

    def per_step(mask: pd.Series) -> pd.Series:
        sel = st[mask.to_numpy()]
        return sel["dur"].groupby(ids[mask].to_numpy()).sum()

    fp_bp = per_step(names.str.startswith("FP_BP Time") | (cats == "FP_BP Time"))
    refresh = per_step(names.str.startswith("Iteration Refresh") | (cats == "Iteration Refresh"))
    reduce_mask = names.str.match(_REDUCE.pattern) | (cats == "Reduce")
    comm = _union_per_step(st[reduce_mask.to_numpy()], ids[reduce_mask])

    out = pd.DataFrame(index=iters.index)
    out["start_us"] = iters["start_us"]
    out["duration_us"] = iters["duration_us"]
    out["fp_bp_us"] = fp_bp.reindex(out.index)
    out["refresh_us"] = refresh.reindex(out.index)
    out["computing_us"] = out["fp_bp_us"]
    out["communication_us"] = comm.reindex(out.index)
    out = out.reset_index().rename(columns={"index": "step"})
    for col in columns:
        if col not in out.columns:
            out[col] = np.nan
    return out[columns].astype("float64").sort_values("step").reset_index(drop=True)


def _union_per_step(rows: pd.DataFrame, ids: pd.Series) -> pd.Series:
    """Length of the union of the reduce intervals of each step (reduces on parallel streams overlap)."""
    from advisor.model import busy_time_us

    if not len(rows):
        return pd.Series(dtype="float64")
    frame = pd.DataFrame({"start_us": rows["ts"].to_numpy(), "duration_us": rows["dur"].to_numpy(),
                          "step": ids.to_numpy()})
    return frame.groupby("step").apply(busy_time_us, include_groups=False).astype("float64")


def _counters_frame(cnt: _Columns, proc: dict[Any, str], meta: Meta) -> pd.DataFrame:
    cf = cnt.frame(meta)
    if not len(cf):
        return empty_frame(COUNTER_COLUMNS)
    return pd.DataFrame({
        "process": _process_column(cf["pid"], proc),
        "name": cf["name"].astype("category"),
        "key": cf["key"].astype("category"),
        "ts_us": cf["ts"].astype("float64"),
        "value": cf["value"].astype("float64"),
    })


# ---------------------------------------------------------------------------------------------------------
# the lone trace-json layout
# ---------------------------------------------------------------------------------------------------------
def read_trace_file(path: Path, meta: Meta | None = None) -> Profile:
    """A single trace JSON as a Profile: device tasks as ops, the rest as events; counters in extras."""
    path = Path(path)
    meta = meta or Meta(source=str(path), layout="trace-json")
    tables = read_trace(path, meta, device_ops=True, select=meta.events_read)
    meta.source_of("ops", path)
    meta.source_of("events", path)
    if len(tables.steps):
        meta.source_of("steps", path)
    ops = tables.ops if tables.ops is not None else finalize_ops(pd.DataFrame())
    extras: dict[str, Any] = {}
    if len(tables.counters):
        extras["counters"] = tables.counters
    return Profile(ops=ops, meta=meta, steps=tables.steps, events=tables.events, extras=extras,
                   event_summary=tables.event_summary)


def read(root: Path, meta: Meta) -> Profile:
    """Reader-registry entry for layout ``trace-json``."""
    root = Path(root)
    if root.is_dir():
        raise InputError(root, "expected a trace JSON file, got a directory")
    return read_trace_file(root, meta)



# ---------------------------------------------------------------------------------------------------------
# the layout this module reads (advisor.ingest.registry)
# ---------------------------------------------------------------------------------------------------------
def _trace_file(p: Path) -> list[RankSource]:
    return [RankSource(p, "trace-json")] if p.name.lower().endswith(".json") else []


LAYOUTS = (
    Layout("trace-json", "trace JSON", "one trace JSON file (msprof_*.json, trace_view.json)", read,
           as_file=(Match(91, _trace_file),)),
)


__all__ = ["COUNTER_COLUMNS", "DEVICE_PROCESS", "TraceTables", "add_events", "comm_task_events", "read", "read_trace",
           "read_trace_file"]
