"""The time model of one rank: the analyzed window, its steps, and where each step's time goes.

Everything a report says in shares and savings divides by this, so it is built once, in the data-model layer,
from every source the profile has, and read by every knowledge base, the score and the reports. Top-down, as in
top-down microarchitecture analysis: each step splits once into

    window = compute + uncovered communication + free

with compute split by the core a task ran on (``cube`` = AI_CORE: the cube core on 910B-class chips, the whole AI
Core on 310/310P/910A; ``vector`` = AI_VECTOR_CORE; ``mix`` = MIX_AIC/MIX_AIV; ``ai_cpu``; ``other``: any other
compute task, or a kernel whose core the profile does not record), communication into overlapped (hidden behind
compute) and uncovered, and uncovered communication into ``wait`` (waiting for peers: notify waits,
synchronisation), ``transmit`` (data moving) and ``idle`` (inside a collective, neither) -- plus ``unknown`` when
the profile carries nothing to split it with. Shares at each level add up to their parent.

The uncovered split is read from the device's own communication tasks wherever a layout records them -- notify
waits are ``wait``, SDMA / RDMA / memcpy / reduce tasks ``transmit``, signalling (notify record, write value) and
gaps ``idle`` -- from, best first: HCCL task events (trace ``HCCL`` plane tasks of Level1+, ``hccl_*.json``, the
``.db`` ``COMMUNICATION_TASK_INFO``), the device's task records on its communication streams (trace ``Ascend
Hardware`` events, the ``.db`` ``TASK`` rows of a Level0 export), notify-wait tasks of the ops table; only where no
task covers a step, from the per-op totals of the profiler's analysis (communication.json, ``CommAnalyzerTime``,
``hccl_raw``), whose "idle" holds notify waits that follow the first transfer. So one run exported as text and as
``.db`` splits the same way. Where the waits record their link (``src rank`` / ``dst rank``), the uncovered wait
is also attributed to the peer waited for (``TimeModel.link_waits``).

Sources, best first; every figure names the one it came from (``TimeModel.sources``):

- the profiler's own per-step split: ``step_trace_time.csv`` / ``analysis.db`` ``StepTraceTime`` / the msprof
  ``.db`` ``OVERLAP_ANALYSIS`` inside ``STEP_TIME``;
- else the ``Overlap Analysis`` intervals of the trace (Computing / Communication / Free), inside step bounds;
- else derived from device tasks: unions of compute task intervals and of communication op intervals (HCCL op
  rows, HCCL op events of the trace or ``hccl_*.json``, else the device's notify/reduce tasks), inside step
  bounds (msprof step trace, MindSpore ``step_trace_raw``, ``STEP_TIME``) or, where no step is recorded, the
  device's active span;
- MindSpore step traces without task times: ``iteration_interval`` is time outside the device's step work (free),
  ``fp_and_bp`` compute, the ``tail`` compute plus the communication that runs after BP end (uncovered).

Notify waits and reduce/copy tasks of a collective are communication, never compute. Time a capture holds outside
the analyzed window (an idle head or tail, steps recorded without device tasks) is reported as such and is not
part of the window, so no finding can claim it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from functools import lru_cache
from typing import Any

import numpy as np
import pandas as pd

from advisor.common.intervals import complement, overlap, union
from advisor.common.units import fmt_us
from advisor.common.util import finite_float
from advisor.core import freetime, steady
from advisor.model import EventSelection, Profile, label_mask, register_time_model

COMPUTE_KEYS: tuple[str, ...] = ("cube", "vector", "mix", "ai_cpu", "other")
UNCOVERED_KEYS: tuple[str, ...] = ("wait", "transmit", "idle")
FREE_KEYS: tuple[str, ...] = ("data_loading", "launch", "comm_wait", "unknown")
"""What the device's idle time is spent on (``advisor.core.freetime``): the input pipeline (a step trace's data
augmentation gap, DataLoader or dataset events), host launch and dispatch gaps, the host blocked in a collective,
or unknown (no host timeline and no step phase to tell)."""

CORE_COMPUTE: dict[str, str] = {
    "AI_CORE": "cube", "KERNEL_AICORE": "cube", "AIC": "cube",
    "AI_VECTOR_CORE": "vector", "KERNEL_AIVEC": "vector", "AIV": "vector",
    "MIX_AIC": "mix", "MIX_AIV": "mix", "KERNEL_MIX_AIC": "mix", "KERNEL_MIX_AIV": "mix", "FFTS_PLUS": "mix",
    "AI_CPU": "ai_cpu", "KERNEL_AICPU": "ai_cpu", "AICPU": "ai_cpu",
    "DSA_SQE": "other", "DSA": "other",
    "OTHER": "other",
}
"""Device task core / task type -> compute bucket. Anything not here and not communication is not compute. ``OTHER``
is the task type a torch_npu trace writes for kernels whose core it does not name (``aclnn...AiCore...`` kernels in
the msprof-analyze timeline_advice trace): compute of an unrecorded core, as the trace's Overlap Analysis counts it."""
COMM_CORES = frozenset({"HCCL", "COMMUNICATION"})
"""Op-level communication rows (one per collective) in the ops table."""
_WAIT = re.compile(r"notify[ _]?wait", re.IGNORECASE)
_TRANSMIT = re.compile(r"memcpy|reduce|rdma|sdma|local[ _]?copy|send|recv|copy", re.IGNORECASE)
"""Tasks that move data. Signalling tasks (``Notify_Record`` / the device's ``Write Value``) are neither waits nor
transfers: inside the uncovered part they count as idle."""
_COMM_TASK = re.compile(r"^(notify[ _]?(wait|record)|reduce[ _]?(async|inline|tbe)\w*|rdma\w*|memcpy|sdma\w*"
                        r"|local[ _]?copy|write[ _]?value)$", re.IGNORECASE)
"""Task-level names of a collective (HCCL plane tasks, device task types), as opposed to op-level names."""
_DEVICE_COMM_TASK = re.compile(r"^(notify[ _]?(wait|record)|reduce[ _]?async\w*)$", re.IGNORECASE)
"""Device task types that are communication wherever they run (copies can be host<->device too)."""
COMM_DEVICE_TASK = re.compile(r"(?i:notify[ _]?(wait|record)|write[ _]?value|sdma|rdma\w*|memcpy(_async)?"
                              r"|reduce[ _]?(async|inline|tbe)\w*|local[ _]?copy)")
"""Names the device's own task records (trace ``Ascend Hardware`` events, the ``.db`` ``TASK`` types) give the tasks
of a collective on its communication stream: ``Notify Wait``, ``Write Value``, ``SDMA``... (full match). A copy can
run on a compute stream too, so only a stream that holds a notify wait is a communication stream
(:func:`comm_streams`)."""
INVALID_RANK = 2 ** 31
"""A src/dst rank at or above this (``4294967295``: uint32 -1) is not recorded."""

HCCL_PROCESSES = ("HCCL", "Communication")
OVERLAP_PROCESS = "Overlap Analysis"
DEVICE_PROCESS = "Ascend Hardware"


# ---------------------------------------------------------------------------------------------------------
# the model
# ---------------------------------------------------------------------------------------------------------
@dataclass
class StepTime:
    """One step (or the whole window when no step is recorded): its time split, in microseconds."""

    step: int | None
    window_us: float
    compute_us: float
    compute_by_core: dict[str, float]
    communication_us: float
    overlapped_communication_us: float
    uncovered_communication_us: float
    uncovered_by_kind: dict[str, float]
    free_us: float
    start_us: float | None = None
    """Offset from the rank's time origin (``Meta.time_origin_ns``) where the step's bounds are known."""
    bubble_us: float | None = None
    """Pipeline-parallel bubble, where the profiler records it (part of the step's uncovered communication)."""
    preparing_us: float | None = None
    """Host time before the step's first device task, where the profiler records it (outside the window)."""
    free_by_kind: dict[str, float] = field(default_factory=dict)
    """``free_us`` split by what the idle time is spent on (:data:`FREE_KEYS`); empty until ``advisor.core.freetime``
    splits it (then it adds up to ``free_us``)."""
    count: int = 1
    """How many steps this row stands for: 1, or k when the analysis reads k executions of a step whose device
    tasks the profile records only outside the steady state (``advisor.core.steady``): every figure is k times the
    median steady step."""
    tasks: bool = True
    """Whether the split rests on the step's own device tasks (False: only the step trace's phases cover it)."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"step": self.step, **_figures(self)}
        if self.start_us is not None:
            out["start_us"] = _r(self.start_us)
        for key in ("bubble_us", "preparing_us"):
            value = getattr(self, key)
            if value is not None:
                out[key] = _r(value)
        if self.count != 1:
            out["count"] = self.count
        if not self.tasks:
            out["from_phases"] = True
        return out


@dataclass
class TimeModel:
    """The analyzed window of one rank, its steps, and the split of their time (see the module doc)."""

    steps: list[StepTime]
    sources: dict[str, str]
    origin_ns: int | None = None
    capture_us: float | None = None
    """Span of everything the profile recorded (host and device), when time stamps exist."""
    notes: list[str] = field(default_factory=list)
    excluded: list[Excluded] = field(default_factory=list)
    """Recorded time left out of the window, each with its reason: warm-up steps, pauses of the program."""
    steady_state: dict[str, Any] = field(default_factory=dict)
    """How the analyzed steps were chosen (``advisor.core.steady``): steps recorded, analyzed, warm-up, the median step."""
    link_waits: pd.DataFrame | None = None
    """Where the communication tasks record their peers: the notify waits of the split steps per link, with their
    parts inside the uncovered communication (``LINK_WAIT_COLUMNS``); None where no wait records its peer."""
    report_max_steps: int = 1000
    """Steps (and excluded intervals) the report lists one by one (``rules/time.yaml`` ``report.max_steps``); the
    rest are summarized, so a capture of 200k steps does not make a 100 MB report."""
    idle: tuple[np.ndarray, np.ndarray] | None = field(default=None, repr=False, compare=False)
    """The device's idle blocks inside the analyzed steps whose tasks were recorded (pauses left out): where host
    work is on the critical path (``advisor.toolkit.time.idle_during``). Rank-local: not sent between processes
    (:meth:`portable`)."""

    # totals over the steps -------------------------------------------------------------------------------
    def _sum(self, name: str) -> float:
        return float(sum(getattr(s, name) for s in self.steps))

    def _sum_map(self, name: str, keys: Iterable[str]) -> dict[str, float]:
        out = {k: 0.0 for k in keys}
        for s in self.steps:
            for k, v in getattr(s, name).items():
                out[k] = out.get(k, 0.0) + v
        return out

    @property
    def window_us(self) -> float:
        return self._sum("window_us")

    @property
    def compute_us(self) -> float:
        return self._sum("compute_us")

    @property
    def communication_us(self) -> float:
        return self._sum("communication_us")

    @property
    def overlapped_communication_us(self) -> float:
        return self._sum("overlapped_communication_us")

    @property
    def uncovered_communication_us(self) -> float:
        return self._sum("uncovered_communication_us")

    @property
    def free_us(self) -> float:
        return self._sum("free_us")

    @property
    def compute_by_core(self) -> dict[str, float]:
        return self._sum_map("compute_by_core", COMPUTE_KEYS)

    @property
    def uncovered_by_kind(self) -> dict[str, float]:
        return self._sum_map("uncovered_by_kind", UNCOVERED_KEYS)

    @property
    def free_by_kind(self) -> dict[str, float]:
        return self._sum_map("free_by_kind", FREE_KEYS)

    @property
    def outside_window_us(self) -> float:
        """Capture time outside the analyzed window (idle head/tail, steps without device tasks)."""
        if self.capture_us is None:
            return 0.0
        return max(0.0, self.capture_us - self.window_us)

    def portable(self) -> TimeModel:
        """This model without what only the rank's own knowledge bases read (the idle blocks): what a rank summary
        carries to the report and the cluster analysis."""
        return replace(self, idle=None) if self.idle is not None else self

    def bucket_us(self, bucket: str) -> float:
        """The time a finding may claim for a bucket: ``window``, ``compute``, ``communication`` (uncovered),
        ``free``, or a compute core (``cube``...)."""
        if bucket in ("communication", "uncovered_communication"):
            return self.uncovered_communication_us
        if bucket in COMPUTE_KEYS:
            return self.compute_by_core.get(bucket, 0.0)
        return float(getattr(self, f"{bucket}_us"))

    def to_dict(self) -> dict[str, Any]:
        """The JSON report's ``time`` object (microseconds)."""
        limit = max(1, int(self.report_max_steps))
        out: dict[str, Any] = {**_figures(self), "steps": [s.to_dict() for s in self.steps[:limit]],
                               "sources": dict(self.sources)}
        if len(self.steps) > limit:
            out["steps_truncated"] = _steps_summary(self.steps, limit)
        if self.capture_us is not None:
            out["capture_us"] = _r(self.capture_us)
            out["outside_window_us"] = _r(self.outside_window_us)
        if self.origin_ns is not None:
            out["origin_ns"] = int(self.origin_ns)
        if self.notes:
            out["notes"] = list(self.notes)
        if self.excluded:
            out["excluded"] = [e.to_dict() for e in self.excluded[:limit]]
            if len(self.excluded) > limit:
                out["excluded_truncated"] = {"listed": limit, "total": len(self.excluded),
                                             "window_us": _r(sum(e.window_us for e in self.excluded))}
        if self.steady_state:
            out["steady_state"] = dict(self.steady_state)
        return out


@dataclass
class Excluded:
    """Recorded time outside the analyzed window and why: a warm-up step, or a pause of the program."""

    kind: str
    """``warm-up`` or ``pause``."""
    window_us: float
    reason: str
    step: int | None = None
    start_us: float | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "window_us": _r(self.window_us), "reason": self.reason}
        if self.step is not None:
            out["step"] = self.step
        if self.start_us is not None:
            out["start_us"] = _r(self.start_us)
        return out


def _r(v: float) -> float:
    return round(float(v), 3)


def _steps_summary(steps: list[StepTime], listed: int) -> dict[str, Any]:
    """What the report says of the steps it does not list one by one: how many, and the spread of their windows
    (the totals of ``time`` cover every step)."""
    windows = np.array([s.window_us for s in steps], dtype="float64")
    return {"listed": listed, "total": len(steps), "window_us_min": _r(float(windows.min())),
            "window_us_median": _r(float(np.median(windows))), "window_us_max": _r(float(windows.max()))}


def _figures(t: Any) -> dict[str, Any]:
    return {
        "window_us": _r(t.window_us),
        "compute_us": _r(t.compute_us),
        "communication_us": _r(t.communication_us),
        "overlapped_communication_us": _r(t.overlapped_communication_us),
        "uncovered_communication_us": _r(t.uncovered_communication_us),
        "free_us": _r(t.free_us),
        "compute_by_core": {k: _r(v) for k, v in t.compute_by_core.items() if v or k in COMPUTE_KEYS},
        "uncovered_by_kind": {k: _r(v) for k, v in t.uncovered_by_kind.items() if v or k in UNCOVERED_KEYS},
        "free_by_kind": {k: _r(v) for k, v in t.free_by_kind.items() if v},
    }


def merge(models: Iterable[TimeModel]) -> dict[str, Any]:
    """Totals over several ranks (for a multi-rank report's ``time``): each figure summed over the ranks."""
    models = list(models)
    keys = ("window_us", "compute_us", "communication_us", "overlapped_communication_us",
            "uncovered_communication_us", "free_us")
    out: dict[str, Any] = {k: _r(sum(getattr(m, k) for m in models)) for k in keys}
    for name, names in (("compute_by_core", COMPUTE_KEYS), ("uncovered_by_kind", UNCOVERED_KEYS),
                        ("free_by_kind", FREE_KEYS)):
        acc: dict[str, float] = {k: 0.0 for k in names}
        for m in models:
            for k, v in getattr(m, name).items():
                acc[k] = acc.get(k, 0.0) + v
        out[name] = {k: _r(v) for k, v in acc.items()}
    return out


# ---------------------------------------------------------------------------------------------------------
# device tasks: compute and communication intervals
# ---------------------------------------------------------------------------------------------------------
@dataclass
class _Intervals:
    """Blocks of the unions a step split needs, all as (starts, ends) arrays of disjoint sorted blocks."""

    compute: tuple[np.ndarray, np.ndarray]
    by_core: dict[str, tuple[np.ndarray, np.ndarray]]
    comm: tuple[np.ndarray, np.ndarray]
    wait: tuple[np.ndarray, np.ndarray] | None
    transmit: tuple[np.ndarray, np.ndarray] | None
    comm_ops: pd.DataFrame | None
    """Per communication op (start, end, wait/transit/idle us): splits a step that no communication task covers."""
    untimed_compute: dict[str, float]
    """Compute time of tasks without a start time, per core bucket (MindSpore averages, op_statistic only)."""
    sources: dict[str, str]
    waits: pd.DataFrame | None = None
    """The notify waits whose peer is recorded (``WAIT_COLUMNS``), for the per-link attribution."""
    link_waits: list[pd.DataFrame] = field(default_factory=list)
    """Per split step, the notify waits whose link is recorded with their uncovered parts (``LINK_WAIT_COLUMNS``),
    filled as the steps are split."""


def _empty() -> tuple[np.ndarray, np.ndarray]:
    return np.empty(0), np.empty(0)


def _blocks_len(b: tuple[np.ndarray, np.ndarray], lo: float = -np.inf, hi: float = np.inf) -> float:
    bs, be = b
    if not len(bs):
        return 0.0
    return float((np.minimum(be, hi) - np.maximum(bs, lo)).clip(min=0.0).sum())


def _intersect(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray],
               lo: float = -np.inf, hi: float = np.inf) -> float:
    """Length of (a ∩ b) inside [lo, hi)."""
    a_s, a_e = a
    if not len(a_s) or not len(b[0]):
        return 0.0
    s = np.maximum(a_s, lo)
    e = np.minimum(a_e, hi)
    ok = e > s
    return float(overlap(b[0], b[1], s[ok], e[ok]).sum())


def _labels(series: pd.Series) -> np.ndarray:
    """Upper-cased text of each row ("" where missing), computed once per distinct value."""
    codes, uniques = pd.factorize(series.astype(object), use_na_sentinel=True)
    lut = np.array([str(u).strip().upper() for u in uniques] + [""], dtype=object)
    return lut[np.where(codes < 0, len(uniques), codes)]


class _CoreLabels:
    """The ``core`` column as codes into its distinct upper-cased labels (a 2M-task table has a handful): each
    per-task test is decided once per label, with no per-task text."""

    def __init__(self, cores: pd.Series) -> None:
        self.codes, uniques = pd.factorize(cores, use_na_sentinel=True)  # missing: -1, the slot after the labels
        self.labels = [str(u).strip().upper() for u in uniques]

    def test(self, fn: Callable[[str], Any]) -> np.ndarray:
        """Tasks whose label passes ``fn`` (a missing core is the label "")."""
        return np.array([bool(fn(label)) for label in [*self.labels, ""]], dtype=bool)[self.codes]

    def buckets(self) -> np.ndarray:
        """Each label's compute bucket ("" when not compute; "other" for a kernel whose core is not recorded)."""
        return np.array([compute_bucket(label) for label in self.labels] + ["other"], dtype=object)


def compute_bucket(label: str) -> str:
    """The compute bucket of a task's core / task type (upper case; ``cube``, ``vector``, ``mix``, ``ai_cpu``,
    ``other``), or "" for a task that computes nothing: a communication op or task (``HCCL``, ``NOTIFY_WAIT``,
    ``REDUCE_ASYNC_V2``...), a runtime task (``EVENT_RECORD``, ``MEMCPY_ASYNC``...)."""
    if label in COMM_CORES or _COMM_TASK.match(label):
        return ""
    return CORE_COMPUTE.get(label, "")


def _matches(labels: np.ndarray, rx: re.Pattern[str], search: bool = False) -> np.ndarray:
    """Rows whose label matches ``rx`` (decided once per distinct label)."""
    if not len(labels):
        return np.zeros(0, dtype=bool)
    codes, uniq = pd.factorize(labels)  # hashing the labels: no fixed-width text copy, no sort
    hit = np.array([bool(rx.search(str(u)) if search else rx.match(str(u))) for u in uniq] + [False], dtype=bool)
    return hit[codes]


def _device_tasks(profile: Profile) -> tuple[pd.DataFrame, str]:
    """The ops table, or per-type totals from op_statistic when that is all the profile has."""
    if len(profile.ops) or not len(profile.op_stats):
        return profile.ops, profile.meta.sources.get("ops", "device tasks")
    st = profile.op_stats
    return pd.DataFrame({"name": st["type"].astype(str), "type": st["type"].astype(str),
                         "core": st["core"].astype(str), "start_us": np.nan, "step": np.nan,
                         "duration_us": st["total_us"].to_numpy(dtype="float64")}), \
        profile.meta.sources.get("op_stats", "op_statistic")


def _hccl_events(profile: Profile) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(op-level, task-level) HCCL events of the timeline."""
    ev = profile.events
    if not len(ev):
        return ev, ev
    hccl = ev[label_mask(ev["process"], set(HCCL_PROCESSES).__contains__)]
    if not len(hccl):
        return hccl, hccl
    is_task = _matches(_labels(hccl["name"]), _COMM_TASK)
    return hccl[~is_task], hccl[is_task]


def _intervals(profile: Profile) -> _Intervals:
    ops, ops_source = _device_tasks(profile)
    sources: dict[str, str] = {}
    n = len(ops)
    starts = ops["start_us"].to_numpy(dtype="float64") if n else np.empty(0)
    durs = ops["duration_us"].to_numpy(dtype="float64") if n else np.empty(0)
    ends = starts + np.nan_to_num(durs)
    core = _CoreLabels(ops["core"] if n else pd.Series([], dtype=object))
    buckets = core.buckets()
    timed = np.isfinite(starts)
    is_compute = (buckets != "")[core.codes]

    compute = union(starts[is_compute & timed], ends[is_compute & timed])
    in_bucket = {k: (buckets == k)[core.codes] for k in COMPUTE_KEYS}
    by_core = {k: union(starts[rows & timed], ends[rows & timed]) for k, rows in in_bucket.items()}
    untimed = {k: float(np.nansum(durs[rows & ~timed])) for k, rows in in_bucket.items()}
    del in_bucket
    if is_compute.any():
        sources["compute"] = ops_source
        sources["compute_by_core"] = f"{ops_source}: task core types"

    comm_rows = core.test(COMM_CORES.__contains__) & timed
    op_events, task_events = _hccl_events(profile)
    events_source = profile.meta.sources.get("events", "timeline")
    if comm_rows.any():
        comm = union(starts[comm_rows], ends[comm_rows])
        spans = _op_spans(ops["name"][comm_rows], starts[comm_rows], ends[comm_rows])
        sources["communication"] = f"{ops_source}: communication op rows"
    elif len(op_events):
        s = op_events["start_us"].to_numpy(dtype="float64")
        e = s + op_events["duration_us"].to_numpy(dtype="float64")
        comm, spans = union(s, e), _op_spans(op_events["name"], s, e)
        sources["communication"] = f"{events_source}: HCCL op events"
    else:
        spans = None
        dev_comm = core.test(_DEVICE_COMM_TASK.match) & timed
        if len(task_events):
            s = task_events["start_us"].to_numpy(dtype="float64")
            comm = union(s, s + task_events["duration_us"].to_numpy(dtype="float64"))
            sources["communication"] = f"{events_source}: HCCL task events"
        elif dev_comm.any():
            comm = union(starts[dev_comm], ends[dev_comm])
            sources["communication"] = f"{ops_source}: notify/reduce device tasks"
        else:
            comm = _empty()

    # the uncovered split: the device's own communication tasks first (notify waits are waiting, transfers are
    # transmit), wherever a layout has them; the profiler's per-op analysis (communication.json, CommAnalyzerTime,
    # hccl_raw) only where no task is recorded
    tasks = _task_split(task_events, events_source) or _device_event_split(profile, events_source) \
        or _ops_task_split(ops, core, starts, ends, timed, is_compute, ops_source)
    comm_ops = _comm_op_split(profile.comm) if len(profile.comm) else None
    comm_source = f"{profile.meta.sources.get('comm', 'communication table')}: per-op wait (incl. synchronization) / " \
                  "transit / idle times, in proportion"
    wait = transmit = waits = None
    if tasks is not None:
        wait, transmit, waits, task_source = tasks
        sources["uncovered_by_kind"] = task_source + (f"; a step no task covers: {comm_source}"
                                                      if comm_ops is not None else "")
        if waits is not None and spans is not None:
            waits = waits.assign(op=_op_of(spans, waits["start"].to_numpy()))
    elif comm_ops is not None:
        sources["uncovered_by_kind"] = comm_source
    return _Intervals(compute, by_core, comm, wait, transmit, comm_ops, untimed, sources, waits)


WAIT_COLUMNS = ["start", "end", "src", "dst", "group"]
"""A notify wait of a collective: its interval, the ranks of the link it waits on (numbered within the
communication group, NaN where not recorded) and the group's name (None where not recorded)."""
_Split = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray], pd.DataFrame | None, str]


def _kinds(names: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(is a wait, is a transfer) per task name (decided once per distinct name)."""
    w = _matches(names, _WAIT, search=True)
    return w, _matches(names, _TRANSMIT, search=True) & ~w


def _task_split(tasks: pd.DataFrame, source: str) -> _Split | None:
    """Waits and transfers from HCCL task events (trace ``HCCL`` plane tasks, ``hccl_*.json``, the ``.db``
    ``COMMUNICATION_TASK_INFO``), with the src / dst rank of each wait where its args carry them."""
    if not len(tasks):
        return None
    s = tasks["start_us"].to_numpy(dtype="float64")
    e = s + tasks["duration_us"].to_numpy(dtype="float64")
    w, t = _kinds(_labels(tasks["name"]))
    waits = _wait_frame(s[w], e[w], tasks["args"].to_numpy()[w])
    return union(s[w], e[w]), union(s[t], e[t]), waits, \
        f"{source}: HCCL task events (notify waits / transfers inside the uncovered part)"


def _wait_frame(s: np.ndarray, e: np.ndarray, args: np.ndarray) -> pd.DataFrame | None:
    """The waits whose args record the link's ranks (``src rank`` / ``dst rank``; ``group`` where given): ``src``
    is this rank (the rank most waits start from), ``dst`` the peer waited for."""
    def rank(a: Any, key: str) -> float:
        v = a.get(key) if isinstance(a, dict) else None
        try:
            f = float(v)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            return np.nan
        return f if 0 <= f < INVALID_RANK else np.nan

    src = np.array([rank(a, "src rank") for a in args], dtype="float64")
    dst = np.array([rank(a, "dst rank") for a in args], dtype="float64")
    known = np.isfinite(dst) & np.isfinite(src) & (dst != src)
    if not known.any():
        return None
    src, dst = src[known], dst[known]
    me = float(pd.Series(src).mode().iloc[0])
    peer = np.where(dst == me, src, dst)
    group = np.array([a.get("group") if isinstance(a, dict) else None for a in args[known]], dtype=object)
    return pd.DataFrame({"start": s[known], "end": e[known], "src": me, "dst": peer, "group": group})


def comm_streams(names: np.ndarray, streams: np.ndarray) -> np.ndarray:
    """Rows on a communication stream: a stream that holds a notify wait (a copy on a compute stream is not a
    collective's)."""
    wait = _matches(names, _WAIT, search=True)
    if not wait.any():
        return np.zeros(len(names), dtype=bool)
    return pd.Series(streams).isin(pd.unique(streams[wait])).to_numpy()


def _device_event_split(profile: Profile, source: str) -> _Split | None:
    """Waits and transfers from the device's own task records on its communication streams (trace ``Ascend
    Hardware`` events kept beside a kernel table, the ``.db`` ``TASK`` rows of a Level0 export): no peer ranks."""
    ev = profile.events
    if not len(ev):
        return None
    dev = ev[label_mask(ev["process"], DEVICE_PROCESS.__eq__)]
    dev = dev[label_mask(dev["name"], COMM_DEVICE_TASK.fullmatch)] if len(dev) else dev
    if not len(dev):
        return None
    names = _labels(dev["name"])
    on_comm = comm_streams(names, dev["tid"].astype(object).to_numpy())
    if not on_comm.any():
        return None
    s = dev["start_us"].to_numpy(dtype="float64")[on_comm]
    e = s + dev["duration_us"].to_numpy(dtype="float64")[on_comm]
    w, t = _kinds(names[on_comm])
    return union(s[w], e[w]), union(s[t], e[t]), None, \
        f"{source}: the device's communication-stream tasks (notify waits / transfers inside the uncovered part)"


def _ops_task_split(ops: pd.DataFrame, core: _CoreLabels, starts: np.ndarray, ends: np.ndarray, timed: np.ndarray,
                    is_compute: np.ndarray, source: str) -> _Split | None:
    """Waits and transfers from the ops table when it holds the device's notify-wait tasks (ops read from a trace),
    on its communication streams where the table records streams."""
    if not len(ops) or not core.test(_DEVICE_COMM_TASK.match).any():
        return None
    w = core.test(_WAIT.search) & timed
    t = core.test(_TRANSMIT.search) & timed & ~w & ~is_compute
    if "stream_id" in ops.columns and ops["stream_id"].notna().any():
        streams = ops["stream_id"].to_numpy(dtype="float64")
        on_comm = pd.Series(streams).isin(pd.unique(streams[w])).to_numpy()
        t &= on_comm
    return union(starts[w], ends[w]), union(starts[t], ends[t]), None, \
        f"{source}: notify-wait / reduce / copy device tasks"


def _op_spans(names: pd.Series, s: np.ndarray, e: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(starts, ends, names) of the communication ops, in start order."""
    order = np.argsort(s, kind="stable")
    return s[order], e[order], names.astype(str).to_numpy()[order]


def _op_of(spans: tuple[np.ndarray, np.ndarray, np.ndarray], t: np.ndarray) -> np.ndarray:
    """Name of the communication op whose span holds each time (None outside every op)."""
    os_, oe, on = spans
    k = np.searchsorted(os_, t, side="right") - 1
    ok = (k >= 0) & (t < oe[np.maximum(k, 0)])
    out = np.full(len(t), None, dtype=object)
    out[ok] = on[k[ok]]
    return out


def _comm_op_split(comm: pd.DataFrame) -> pd.DataFrame | None:
    """One row per communication op: start, end, and its wait (incl. synchronisation) / transit / idle times."""
    keys = [c for c in ("step", "op", "group", "start_us") if c in comm.columns]
    per = comm.drop_duplicates(subset=keys)
    elapse = per["elapse_us"].to_numpy(dtype="float64")
    if not np.isfinite(elapse).any():
        return None
    transit = per["transit_us"].to_numpy(dtype="float64")
    wait = per["wait_us"].to_numpy(dtype="float64")
    idle = per["idle_us"].to_numpy(dtype="float64")
    idle = np.where(np.isnan(idle), np.clip(elapse - np.nan_to_num(transit) - np.nan_to_num(wait), 0.0, None), idle)
    start = per["start_us"].to_numpy(dtype="float64") if "start_us" in per else np.full(len(per), np.nan)
    return pd.DataFrame({"step": per["step"].to_numpy(dtype="float64"), "start": start, "end": start + elapse,
                         "elapse": elapse, "wait": np.nan_to_num(wait), "transit": np.nan_to_num(transit),
                         "idle": np.nan_to_num(idle)})


# ---------------------------------------------------------------------------------------------------------
# splitting one step
# ---------------------------------------------------------------------------------------------------------
def _core_split(iv: _Intervals, compute_us: float, lo: float, hi: float, untimed_share: float = 0.0) -> dict[str, float]:
    """``compute_us`` split over the core buckets in proportion to each core's busy time in [lo, hi)."""
    raw = {k: _blocks_len(iv.by_core[k], lo, hi) + untimed_share * iv.untimed_compute.get(k, 0.0)
           for k in COMPUTE_KEYS}
    total = sum(raw.values())
    if total <= 0:
        return {k: (compute_us if k == "other" else 0.0) for k in COMPUTE_KEYS}
    return {k: compute_us * v / total for k, v in raw.items()}


def _uncovered_split(iv: _Intervals, uncovered: float, lo: float, hi: float,
                     step: float | None) -> dict[str, float]:
    """``uncovered`` split into wait / transmit / idle (+ unknown) for the uncovered part of [lo, hi): by the
    communication tasks' intervals where they cover it, else by the per-op totals of the profiler's analysis."""
    if uncovered <= 0:
        return {k: 0.0 for k in UNCOVERED_KEYS}
    if iv.wait is not None and iv.transmit is not None:
        exposed = _exposed_blocks(iv, lo, hi)
        measured = _blocks_len(exposed)
        if measured > 0:
            transmit = _intersect(exposed, iv.transmit)
            both = _intersect(exposed, union(*_concat(iv.wait, iv.transmit)))
            wait = max(0.0, both - transmit)  # a wait while data moves on another plane counts as transmit
            scale = uncovered / measured  # the profiler's uncovered total, split as the intervals split
            out = {"wait": wait * scale, "transmit": transmit * scale}
            out["idle"] = max(0.0, uncovered - out["wait"] - out["transmit"])
            if iv.waits is not None:
                iv.link_waits.append(_link_waits(iv.waits, exposed, step, scale))
            return out
    if iv.comm_ops is not None and len(iv.comm_ops):
        parts = _op_totals_split(iv, lo, hi, step)
        total = sum(parts.values())
        if total > 0:
            return {k: uncovered * v / total for k, v in parts.items()}
    return {"wait": 0.0, "transmit": 0.0, "idle": 0.0, "unknown": uncovered}


def _op_totals_split(iv: _Intervals, lo: float, hi: float, step: float | None) -> dict[str, float]:
    """Wait / transit / idle of the step's communication ops (per-op totals), each op counted for its uncovered
    part only: an op hidden behind compute adds nothing to the split."""
    c = iv.comm_ops
    assert c is not None
    if step is not None and c["step"].notna().any():
        c = c[c["step"] == step]
    elif np.isfinite(lo):
        inside = (c["start"] < hi) & (c["end"] > lo)
        c = c[inside] if inside.any() else c
    frac = np.ones(len(c))
    timed = np.isfinite(c["start"].to_numpy()) & (c["elapse"].to_numpy() > 0)
    if timed.any() and len(iv.compute[0]):
        s_, e_ = c["start"].to_numpy()[timed], c["end"].to_numpy()[timed]
        frac[timed] = 1.0 - overlap(iv.compute[0], iv.compute[1], s_, e_) / (e_ - s_)
    frac = np.clip(frac, 0.0, 1.0)
    return {"wait": float((c["wait"].to_numpy() * frac).sum()), "transmit": float((c["transit"].to_numpy()
            * frac).sum()), "idle": float((c["idle"].to_numpy() * frac).sum())}


LINK_WAIT_COLUMNS = ["step", "op", "group", "src", "peer", "task", "task_start_us", "task_end_us", "start_us", "end_us",
                     "scale"]
"""The notify waits of a split step whose link is recorded: one row per part of a wait inside the uncovered
communication (``start_us``/``end_us``; NaN for a wait compute hides entirely), with the wait task it belongs to
(``task``, its ``task_start_us``/``task_end_us``), the collective (``op``, ``step``, ``group``), this rank's number
(``src``) and the peer waited for (``peer``) -- numbered within the group -- and ``scale``, the step's profiler
uncovered total over the measured uncovered time (uncovered lengths are multiplied by it, as the split is).
``advisor.toolkit.peers`` reads which peer held a collective from it."""


def _link_waits(waits: pd.DataFrame, exposed: tuple[np.ndarray, np.ndarray], step: float | None,
                scale: float) -> pd.DataFrame:
    """The parts of each wait inside the uncovered blocks of one step (``LINK_WAIT_COLUMNS``): the waits that overlap
    the step's uncovered span, cut at the blocks' edges (vectorized: a wait spans a handful of blocks)."""
    bs, be = exposed
    s, e = waits["start"].to_numpy(dtype="float64"), waits["end"].to_numpy(dtype="float64")
    if not len(bs) or not len(s):
        return pd.DataFrame(columns=LINK_WAIT_COLUMNS)
    keep = (e > bs[0]) & (s < be[-1])
    if not keep.any():
        return pd.DataFrame(columns=LINK_WAIT_COLUMNS)
    w = waits[keep]
    s, e = s[keep], e[keep]
    first = np.searchsorted(be, s, side="right")  # the first block ending after the wait starts
    last = np.searchsorted(bs, e, side="left")  # blocks starting before the wait ends
    n = np.maximum(last - first, 0)
    task = np.repeat(np.arange(len(w)), np.maximum(n, 1))  # a hidden wait keeps one row, with no part
    k = np.repeat(first, np.maximum(n, 1)) + (np.arange(len(task)) - np.repeat(np.cumsum(np.maximum(n, 1))
                                                                               - np.maximum(n, 1), np.maximum(n, 1)))
    hidden = np.repeat(n == 0, np.maximum(n, 1))
    kk = np.clip(k, 0, len(bs) - 1)
    ps = np.where(hidden, np.nan, np.maximum(s[task], bs[kk]))
    pe = np.where(hidden, np.nan, np.minimum(e[task], be[kk]))
    op = w["op"].to_numpy(dtype=object) if "op" in w.columns else np.full(len(w), None, dtype=object)
    return pd.DataFrame({"step": np.nan if step is None else float(step), "op": op[task],
                         "group": w["group"].to_numpy(dtype=object)[task], "src": w["src"].to_numpy()[task],
                         "peer": w["dst"].to_numpy()[task], "task": task, "task_start_us": s[task],
                         "task_end_us": e[task], "start_us": ps, "end_us": pe, "scale": float(scale)},
                        columns=LINK_WAIT_COLUMNS)


def _collect_link_waits(iv: _Intervals) -> pd.DataFrame | None:
    """The per-step link waits recorded while the steps were split, as one table (None when there are none)."""
    frames = [f for f in iv.link_waits if len(f)]
    if not frames:
        return None
    offset = 0
    for f in frames:  # task ids unique over the steps
        f["task"] = f["task"].to_numpy() + offset
        offset = int(f["task"].max()) + 1
    return pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0].reset_index(drop=True)


def _concat(a: tuple[np.ndarray, np.ndarray], b: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    return np.r_[a[0], b[0]], np.r_[a[1], b[1]]


def _exposed_blocks(iv: _Intervals, lo: float, hi: float) -> tuple[np.ndarray, np.ndarray]:
    """Communication blocks inside [lo, hi) minus compute: the uncovered communication intervals."""
    cs, ce = iv.comm
    if not len(cs):
        return _empty()
    s, e = np.maximum(cs, lo), np.minimum(ce, hi)
    ok = e > s
    s, e = s[ok], e[ok]
    ps, pe = iv.compute
    if not len(ps) or not len(s):
        return s, e
    # subtract the compute blocks: walk the boundaries of both sorted block lists
    out_s: list[float] = []
    out_e: list[float] = []
    j = 0
    for a, b in zip(s, e, strict=True):
        cur = a
        while j < len(ps) and pe[j] <= cur:
            j += 1
        k = j
        while k < len(ps) and ps[k] < b:
            if ps[k] > cur:
                out_s.append(cur)
                out_e.append(min(ps[k], b))
            cur = max(cur, pe[k])
            if cur >= b:
                break
            k += 1
        if cur < b:
            out_s.append(cur)
            out_e.append(b)
    return np.array(out_s), np.array(out_e)


def _derived_step(iv: _Intervals, step: float | None, lo: float, hi: float) -> StepTime:
    """A step split from device-task intervals inside [lo, hi)."""
    window = hi - lo
    compute = _blocks_len(iv.compute, lo, hi)
    comm = _blocks_len(iv.comm, lo, hi)
    overlapped = _intersect(iv.comm, iv.compute, lo, hi)
    uncovered = max(0.0, comm - overlapped)
    free = max(0.0, window - compute - uncovered)
    return StepTime(
        step=_step_id(step), window_us=window, compute_us=compute,
        compute_by_core=_core_split(iv, compute, lo, hi), communication_us=comm,
        overlapped_communication_us=overlapped, uncovered_communication_us=uncovered,
        uncovered_by_kind=_uncovered_split(iv, uncovered, lo, hi, step), free_us=free, start_us=lo)


def _step_id(step: Any) -> int | None:
    try:
        f = float(step)
    except (TypeError, ValueError):
        return None
    return int(f) if np.isfinite(f) else None


# ---------------------------------------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------------------------------------
def _has(st: pd.DataFrame, col: str) -> bool:
    return col in st.columns and bool(st[col].notna().any())


def _profiler_split(profile: Profile, iv: _Intervals) -> list[tuple[StepTime, float, float]] | None:
    """Steps as the profiler split them (step_trace_time.csv, StepTraceTime, OVERLAP_ANALYSIS in STEP_TIME), each
    with the span [lo, hi) of the device tasks it covers (infinite when unknown)."""
    st = profile.steps
    if not len(st) or not (_has(st, "free_us") or _has(st, "comm_not_overlapped_us")):
        return None
    st = st.sort_values("step", kind="stable")
    out = []
    ops = profile.ops
    step_ids = ops["step"].to_numpy(dtype="float64") if len(ops) else np.empty(0)
    per_step_ops = len(step_ids) and np.isfinite(step_ids).any()
    for r in st.itertuples(index=False):
        compute = _nz(getattr(r, "computing_us", np.nan))
        uncovered = _nz(getattr(r, "comm_not_overlapped_us", np.nan))
        overlapped = _nz(getattr(r, "overlapped_us", np.nan))
        comm_total = _nz(getattr(r, "communication_us", np.nan)) or uncovered + overlapped
        free = _nz(getattr(r, "free_us", np.nan))
        start = getattr(r, "start_us", np.nan)
        dur = getattr(r, "duration_us", np.nan)
        lo, hi = (float(start), float(start) + float(dur)) if np.isfinite(start) and np.isfinite(dur) \
            else _step_bounds(profile, r.step, step_ids) if per_step_ops else (-np.inf, np.inf)
        out.append((StepTime(
            step=_step_id(r.step), window_us=compute + uncovered + free, compute_us=compute,
            compute_by_core=_core_split(iv, compute, lo, hi, untimed_share=1.0),
            communication_us=comm_total, overlapped_communication_us=overlapped,
            uncovered_communication_us=uncovered,
            uncovered_by_kind=_uncovered_split(iv, uncovered, lo, hi, r.step), free_us=free,
            start_us=float(start) if np.isfinite(start) else (lo if np.isfinite(lo) else None),
            bubble_us=finite_float(getattr(r, "bubble_us", np.nan)),
            preparing_us=finite_float(getattr(r, "preparing_us", np.nan))),
            lo, hi))
    return out


def _nz(v: Any) -> float:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return 0.0
    return f if np.isfinite(f) else 0.0



def _step_bounds(profile: Profile, step: Any, step_ids: np.ndarray) -> tuple[float, float]:
    """[first start, last end) of the device tasks carrying this step id."""
    sel = step_ids == float(step)
    if not sel.any():
        return -np.inf, np.inf
    ops = profile.ops
    s = ops["start_us"].to_numpy(dtype="float64")[sel]
    e = s + np.nan_to_num(ops["duration_us"].to_numpy(dtype="float64")[sel])
    if not np.isfinite(s).any():
        return -np.inf, np.inf
    return float(np.nanmin(s)), float(np.nanmax(e))


def _overlap_analysis(profile: Profile, iv: _Intervals, bounds: list[tuple[Any, float, float]]) -> list[StepTime] | None:
    """Steps from the trace's Overlap Analysis intervals, clipped to each step's bounds."""
    ev = profile.events
    if not len(ev):
        return None
    oa = ev[label_mask(ev["process"], OVERLAP_PROCESS.__eq__)]
    if not len(oa):
        return None
    names = oa["name"].astype(str).to_numpy()
    s = oa["start_us"].to_numpy(dtype="float64")
    e = s + oa["duration_us"].to_numpy(dtype="float64")
    kinds = {k: union(s[names == k], e[names == k]) for k in
             ("Computing", "Communication", "Communication(Not Overlapped)", "Free")}
    recorded = bool(bounds)
    if not bounds:
        lo = float(np.nanmin(s))
        hi = float(np.nanmax(e))
        bounds = [(None, lo, hi)]
    out = []
    for step, lo, hi in bounds:
        compute = _blocks_len(kinds["Computing"], lo, hi)
        uncovered = _blocks_len(kinds["Communication(Not Overlapped)"], lo, hi)
        comm = _blocks_len(kinds["Communication"], lo, hi) or uncovered
        free = _blocks_len(kinds["Free"], lo, hi)
        if compute + uncovered + free <= 0:
            continue
        if recorded:  # a recorded step is all step time: what no interval covers (its head before the first
            free = max(free, (hi - lo) - compute - uncovered)  # device task) is device idle, not outside
        out.append(StepTime(
            step=_step_id(step), window_us=compute + uncovered + free, compute_us=compute,
            compute_by_core=_core_split(iv, compute, lo, hi), communication_us=comm,
            overlapped_communication_us=max(0.0, comm - uncovered), uncovered_communication_us=uncovered,
            uncovered_by_kind=_uncovered_split(iv, uncovered, lo, hi, step), free_us=free, start_us=lo))
    return out or None


def _recorded_bounds(profile: Profile) -> list[tuple[Any, float, float]]:
    """(step, start, end) of the steps whose bounds the profile records (step trace, STEP_TIME)."""
    st = profile.steps
    if not len(st) or not (_has(st, "start_us") and _has(st, "duration_us")):
        return []
    ok = st["start_us"].notna() & st["duration_us"].notna() & (st["duration_us"] > 0)
    rows = st[ok].sort_values("start_us")
    return [(r.step, float(r.start_us), float(r.start_us) + float(r.duration_us)) for r in rows.itertuples()]


def _task_step_bounds(profile: Profile) -> list[tuple[Any, float, float]]:
    """Steps the device tasks carry in a step id column (kernel_details ``Step Id``): first start to last end of
    each step's tasks (cut at the next step's first start). Only when every timed task has a step id."""
    ops = profile.ops
    if not len(ops):
        return []
    ids = ops["step"].to_numpy(dtype="float64")
    s = ops["start_us"].to_numpy(dtype="float64")
    timed = np.isfinite(s)
    if not timed.any() or not np.isfinite(ids[timed]).all() or len(np.unique(ids[timed])) < 2:
        return []
    e = s + np.nan_to_num(ops["duration_us"].to_numpy(dtype="float64"))
    frame = pd.DataFrame({"step": ids[timed], "lo": s[timed], "hi": e[timed]}).groupby("step").agg(
        lo=("lo", "min"), hi=("hi", "max")).sort_values("lo")
    lo, hi = frame["lo"].to_numpy(), frame["hi"].to_numpy().copy()
    hi[:-1] = np.minimum(hi[:-1], lo[1:])  # a step's last tasks running into the next step end it
    return [(step, float(a), float(b)) for step, a, b in zip(frame.index, lo, hi, strict=True)]


_STEP_MARKER = re.compile(r"^ProfilerStep#(\d+)$")


def _marker_bounds(profile: Profile, iv: _Intervals) -> list[tuple[Any, float, float]]:
    """Steps of a trace that records only torch's ``ProfilerStep#N`` ranges (no step table): each range on the
    host, its end moved to the end of the last device task that starts inside it (the device runs behind the
    host), and cut at the next step's start."""
    ev = profile.events
    if not len(ev) or not {"name", "start_us", "duration_us"} <= set(ev.columns):
        return []
    marks = ev[label_mask(ev["name"], _STEP_MARKER.match)]
    marks = marks[marks["start_us"].notna() & marks["duration_us"].notna()].sort_values("start_us")
    if not len(marks):
        return []
    lo = marks["start_us"].to_numpy(dtype="float64")
    hi = lo + marks["duration_us"].to_numpy(dtype="float64")
    starts = np.concatenate([iv.compute[0], iv.comm[0]])
    order = np.argsort(starts, kind="stable")
    starts, ends = starts[order], np.concatenate([iv.compute[1], iv.comm[1]])[order]
    first, last = np.searchsorted(starts, lo, "left"), np.searchsorted(starts, hi, "left")
    out: list[tuple[Any, float, float]] = []
    for i, (name, a, b) in enumerate(zip(marks["name"].astype(str), lo, hi, strict=True)):
        end = max(b, float(ends[first[i]:last[i]].max())) if last[i] > first[i] else b  # blocks starting inside
        if i + 1 < len(lo):
            end = min(end, float(lo[i + 1]))
        out.append((int(_STEP_MARKER.match(name).group(1)), float(a), end))
    return out


def _app_loop_bounds(profile: Profile) -> list[tuple[Any, float, float]]:
    """An offline-model application that marks its loop with msproftx ranges: the span of those ranges is the
    analyzed window (its sleeps and host work between inferences are the app's free time, which host-side findings
    recover), not only the device's active span. Framework runs keep their steps: their mstx marks can span the
    whole process."""
    tx = profile.tx
    if profile.meta.context != "om-acl" or not len(tx):
        return []
    start = tx["start_us"].to_numpy(dtype="float64")
    end = start + np.nan_to_num(tx["duration_us"].to_numpy(dtype="float64"))
    ok = np.isfinite(start)
    if not ok.any() or np.nanmax(end[ok]) <= np.nanmin(start[ok]):
        return []
    return [(None, float(np.nanmin(start[ok])), float(np.nanmax(end[ok])))]


def _active_span(iv: _Intervals) -> tuple[float, float] | None:
    firsts = [b[0][0] for b in (iv.compute, iv.comm) if len(b[0])]
    lasts = [b[1][-1] for b in (iv.compute, iv.comm) if len(b[1])]
    if not firsts:
        return None
    return float(min(firsts)), float(max(lasts))


def _pause_gaps(busy: tuple[np.ndarray, np.ndarray], lo: float, hi: float, factor: float) -> list[tuple[float, float]]:
    """Idle gaps of the device inside [lo, hi) longer than ``factor`` times all its work there: pauses of the
    program (setup, compilation, a sleep between runs), not dispatch overhead (``rules/time.yaml`` ``pause``)."""
    work = _blocks_len(busy, lo, hi)
    if work <= 0:
        return []
    gs, ge = complement(busy, lo, hi)
    long = (ge - gs) > factor * work
    return [(float(a), float(b)) for a, b in zip(gs[long], ge[long], strict=True)]


def _covers_tasks(iv: _Intervals, lo: float, hi: float) -> bool:
    return _blocks_len(iv.compute, lo, hi) + _blocks_len(iv.comm, lo, hi) > 0


def _lead_gaps(profile: Profile, bounds: list[tuple[Any, float, float]]
               ) -> tuple[list[tuple[Any, float, float]], dict[Any, tuple[float, float]]]:
    """Graph-mode step traces (msprof ``Iteration N``, MindSpore ``step_trace_raw``) record where each step's work
    starts; the time between the previous step's end and that start is the step's input pipeline (msprof's Data Aug
    Bound, MindSpore's ``iteration_interval``). Each step runs from the previous step's end, and that gap is its
    data-loading time: (bounds so extended, step -> data-loading gap)."""
    st = profile.steps
    if not bounds or not _has(st, "fp_bp_us"):
        return bounds, {}
    preparing = dict(zip(st["step"], st["preparing_us"], strict=True)) if _has(st, "preparing_us") else {}
    out: list[tuple[Any, float, float]] = []
    leads: dict[Any, tuple[float, float]] = {}
    prev_hi: float | None = None
    for step, lo, hi in sorted(bounds, key=lambda b: b[1]):
        interval = finite_float(preparing.get(step))
        if interval:  # the step already starts at the previous one's end (MindSpore): the gap is inside it
            leads[step] = (lo, min(hi, lo + interval))
        elif prev_hi is not None and lo - prev_hi > _GAP_TOLERANCE_US:
            leads[step] = (prev_hi, lo)
            lo = prev_hi
        out.append((step, lo, hi))
        prev_hi = hi
    return out, leads


_GAP_TOLERANCE_US = 1.0
"""Consecutive steps closer than this are contiguous (clock rounding), not separated by a data-loading gap."""


@dataclass
class _PhaseContext:
    """What a step known only from its step-trace phases borrows from the steps whose device tasks were recorded."""

    compute_per_step: float | None
    """Device compute of one step as the recorded tasks measure it: caps a phase's compute (a forward-backward
    phase is an interval on the device, not busy time)."""
    transfer_per_step: float | None
    """Uncovered transfer time of one step as the recorded collectives measured it (data moves as fast every step;
    the rest of a phase step's communication is waiting)."""
    source: str


def _phase_steps(profile: Profile, iv: _Intervals, bounds: dict[Any, tuple[float, float]],
                 leads: dict[Any, tuple[float, float]], skip: set[Any], ctx: _PhaseContext) -> list[StepTime]:
    """Steps from a step trace's phases, for the steps no recorded device task covers (a task timeline shorter than
    the step trace, or none at all): the data-loading gap before the forward pass is free time, the forward-backward
    phase and the tail compute, except the communication that runs after BP end (uncovered); compute is capped at
    what the recorded tasks measure for a step, the rest of the phases is idle time of unknown cause."""
    st = profile.steps
    if not len(st) or not _has(st, "duration_us"):
        return []
    fp_col = "fp_bp_us" if _has(st, "fp_bp_us") else "computing_us" if _has(st, "computing_us") else None
    if fp_col is None:
        return []
    tail_col = "tail_us" if _has(st, "tail_us") else "refresh_us" if _has(st, "refresh_us") else None
    out = []
    for r in st.sort_values("step").itertuples(index=False):
        step = _step_id(r.step)
        if step in skip:
            continue
        start = finite_float(getattr(r, "start_us", np.nan))
        lo, hi = bounds.get(r.step, (start, start + _nz(r.duration_us)) if start is not None else (None, None))
        window = (hi - lo) if lo is not None else _nz(r.duration_us)
        if window <= 0:
            continue
        fp_bp = _nz(getattr(r, fp_col))
        tail = _nz(getattr(r, tail_col)) if tail_col else 0.0
        lead = leads.get(r.step)
        data = (lead[1] - lead[0]) if lead else max(0.0, window - fp_bp - tail)
        comm = min(_nz(getattr(r, "communication_us", np.nan)), window)
        uncovered = min(comm, tail)
        compute = max(0.0, window - data - uncovered)
        if ctx.compute_per_step is not None:
            compute = min(compute, ctx.compute_per_step)
        free = max(0.0, window - compute - uncovered)
        loading = min(data, free)
        transfer = min(uncovered, ctx.transfer_per_step) if ctx.transfer_per_step is not None else None
        by_kind = ({"wait": uncovered - transfer, "transmit": transfer, "idle": 0.0} if transfer is not None
                   else {"wait": 0.0, "transmit": 0.0, "idle": 0.0, **({"unknown": uncovered} if uncovered else {})})
        out.append(StepTime(
            step=step, window_us=window, compute_us=compute,
            compute_by_core=_core_split(iv, compute, -np.inf, np.inf, untimed_share=1.0),
            communication_us=comm, overlapped_communication_us=max(0.0, comm - uncovered),
            uncovered_communication_us=uncovered, uncovered_by_kind=by_kind, free_us=free, start_us=lo,
            free_by_kind={k: v for k, v in (("data_loading", loading), ("unknown", free - loading)) if v > 0},
            tasks=False))
    return out


def _phase_context(steps: list[StepTime], iv: _Intervals, executions: int) -> _PhaseContext:
    """Per-step compute and transfer time from the steps whose tasks were recorded (or the untimed tasks' total over
    the executions they record)."""
    task_steps = [s for s in steps if s.tasks]
    if task_steps:
        transfer = [s.uncovered_by_kind.get("transmit", 0.0) for s in task_steps]
        known = any(s.uncovered_by_kind.get("transmit", 0.0) or s.uncovered_by_kind.get("wait", 0.0)
                    for s in task_steps)
        return _PhaseContext(float(np.median([s.compute_us for s in task_steps])),
                             float(np.median(transfer)) if known else None,
                             f"the device tasks of step(s) {', '.join(str(s.step) for s in task_steps[:5])}")
    untimed = sum(iv.untimed_compute.values())
    if untimed > 0 and executions > 0:
        return _PhaseContext(untimed / executions, None, f"the untimed device tasks over {executions} executions")
    return _PhaseContext(None, None, "")


def _executions(profile: Profile) -> int:
    """How many executions an ops table without time stamps records: the median count of an op name (MindSpore's
    averages repeat each op ``execution_frequency`` times)."""
    ops = profile.ops
    if not len(ops) or ops["start_us"].notna().any():
        return 0
    counts = ops.groupby(ops["name"].astype(str), sort=False).size()
    return max(1, int(round(float(np.median(counts.to_numpy())))))


def _untimed_step(iv: _Intervals) -> list[StepTime]:
    """No time stamps at all (op_statistic, averaged ops, an estimated graph): the window is the task time."""
    total = sum(iv.untimed_compute.values())
    if total <= 0:
        return []
    return [StepTime(step=None, window_us=total, compute_us=total,
                     compute_by_core={k: iv.untimed_compute.get(k, 0.0) for k in COMPUTE_KEYS},
                     communication_us=0.0, overlapped_communication_us=0.0, uncovered_communication_us=0.0,
                     uncovered_by_kind={k: 0.0 for k in UNCOVERED_KEYS}, free_us=0.0)]


def _capture_span(profile: Profile) -> float | None:
    """Span of every time stamp the profile holds (device tasks and host events, kept or counted)."""
    lo, hi = np.inf, -np.inf
    for frame in (profile.ops, profile.events, profile.tx):
        if not len(frame) or "start_us" not in frame:
            continue
        s = frame["start_us"].to_numpy(dtype="float64")
        e = s + np.nan_to_num(frame["duration_us"].to_numpy(dtype="float64"))
        if np.isfinite(s).any():
            lo, hi = min(lo, float(np.nanmin(s))), max(hi, float(np.nanmax(e)))
    st = profile.steps  # a step trace can cover more steps than the device tasks
    if len(st) and _has(st, "start_us") and _has(st, "duration_us"):
        s = st["start_us"].to_numpy(dtype="float64")
        e = s + st["duration_us"].to_numpy(dtype="float64")
        if np.isfinite(e).any():
            lo, hi = min(lo, float(np.nanmin(s))), max(hi, float(np.nanmax(e)))
    counted = profile.event_summary  # events not kept: their first start and last end
    if len(counted) and np.isfinite(first := counted["first_us"].to_numpy(dtype="float64")).any():
        lo, hi = min(lo, float(np.nanmin(first))), max(hi, float(np.nanmax(counted["last_end_us"].to_numpy())))
    return hi - lo if np.isfinite(lo) and hi > lo else None


# ---------------------------------------------------------------------------------------------------------
# building
# ---------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def builtin_time_rules() -> dict[str, Any]:
    """``rules/time.yaml`` as shipped (validated by the test suite, as every built-in rules file)."""
    from advisor.config.loader import builtin_rules_dir, load_rules_file

    return load_rules_file(builtin_rules_dir() / "time.yaml", validate=False)


def time_rules(meta: Any) -> dict[str, Any]:
    """The time model's thresholds: those the analysis loaded (``Meta.time_rules``), else the built-in file."""
    return getattr(meta, "time_rules", None) or builtin_time_rules()


def time_model_events(rules: dict[str, Any] | None = None) -> EventSelection:
    """The events the time model reads row by row: HCCL ops and tasks, the device's communication-stream tasks,
    Overlap Analysis intervals, step markers, and the host events that tell what idle time is spent on (``advisor.core.freetime``); it reads the extent of every
    other event from ``Profile.event_summary``."""
    return EventSelection(names=(r"ProfilerStep#\d+", COMM_DEVICE_TASK.pattern,
                                 *freetime.event_names(rules or builtin_time_rules())),
                          processes=tuple(re.escape(p) for p in (*HCCL_PROCESSES, OVERLAP_PROCESS)))


@dataclass
class _Split:
    """Steps in time order with the span [lo, hi) of device time each covers, before the steady state is chosen."""

    steps: list[StepTime] = field(default_factory=list)
    spans: list[tuple[float, float]] = field(default_factory=list)
    recorded: bool = True
    """The steps are recorded ones; False: one window over the capture (where pauses are looked for)."""
    leads: dict[Any, tuple[float, float]] = field(default_factory=dict)

    def add(self, step: StepTime, lo: float, hi: float) -> None:
        self.steps.append(step)
        self.spans.append((lo, hi))


def _split(profile: Profile, iv: _Intervals, sources: dict[str, str], notes: list[str]) -> _Split:
    """Every recorded step (or one window over the capture), split from the best source the profile has."""
    out = _Split()
    steps_source = profile.meta.sources.get("steps", "step table")
    profiler = _profiler_split(profile, iv)
    if profiler is not None:
        sources["window"] = sources["split"] = f"{steps_source} (the profiler's per-step split)"
        for step, lo, hi in profiler:
            out.add(step, lo, hi)
        return out
    bounds = _recorded_bounds(profile)
    from_table = bool(bounds)
    bounds, out.leads = _lead_gaps(profile, bounds)
    if not bounds:
        bounds, steps_source = _other_bounds(profile, iv, steps_source)
    with_tasks = [(s, lo, hi) for s, lo, hi in bounds if _covers_tasks(iv, lo, hi)]
    _task_steps(profile, iv, with_tasks, steps_source, sources, out)
    if from_table:
        _add_phase_steps(profile, iv, bounds, len(with_tasks), steps_source, sources, notes, out)
    if not out.steps and (span := _active_span(iv)) is not None:
        out.recorded = False
        sources["window"] = "active span of the device tasks (no step recorded)"
        sources["split"] = "derived from device tasks (unions of compute and communication intervals)"
        out.add(_derived_step(iv, None, *span), *span)
        untimed = sum(iv.untimed_compute.values())
        if untimed > 0:
            notes.append(f"{fmt_us(untimed)} of tasks without start times are not in the window")
    if not out.steps and (untimed_steps := _untimed_step(iv)):
        sources["window"] = sources["split"] = f"{sources.get('compute', 'device tasks')}: task time (no time stamps)"
        out.steps, out.spans, out.recorded = untimed_steps, [(-np.inf, np.inf)], True
    return out


def _other_bounds(profile: Profile, iv: _Intervals, steps_source: str) -> tuple[list[tuple[Any, float, float]], str]:
    """Step bounds where no step table records them: an application's msproftx loop, the tasks' step ids, torch's
    ProfilerStep#N ranges -- with the source that names them."""
    if bounds := _app_loop_bounds(profile):
        return bounds, f"{profile.meta.sources.get('tx', 'msprof_tx')}: the application's msproftx span"
    if bounds := _task_step_bounds(profile):
        return bounds, f"{profile.meta.sources.get('ops', 'device tasks')} step ids"
    if bounds := _marker_bounds(profile, iv):
        return bounds, (f"{profile.meta.sources.get('events', 'timeline')}: ProfilerStep#N ranges (host), "
                        "extended to the device tasks they launched")
    return [], steps_source


def _task_steps(profile: Profile, iv: _Intervals, with_tasks: list[tuple[Any, float, float]], steps_source: str,
                sources: dict[str, str], out: _Split) -> None:
    """The steps whose device tasks were recorded: from the Overlap Analysis intervals, else derived from the
    tasks; the Overlap Analysis extent when no step is recorded."""
    oa = _overlap_analysis(profile, iv, with_tasks)
    if oa is not None:
        sources["split"] = f"{profile.meta.sources.get('events', 'timeline')}: Overlap Analysis intervals"
        sources["window"] = (f"{steps_source}: step bounds" if with_tasks
                             else "Overlap Analysis extent (no step recorded)")
        out.recorded = bool(with_tasks)
        spans = {_step_id(s): (lo, hi) for s, lo, hi in with_tasks}
        for step in oa:
            lo, hi = spans.get(step.step, (step.start_us, (step.start_us or 0.0) + step.window_us))
            out.add(step, lo if lo is not None else -np.inf, hi)
    elif with_tasks:
        sources["window"] = f"{steps_source}: step bounds"
        sources["split"] = "derived from device tasks (unions of compute and communication intervals)"
        for s, lo, hi in with_tasks:
            out.add(_derived_step(iv, s, lo, hi), lo, hi)


def _add_phase_steps(profile: Profile, iv: _Intervals, bounds: list[tuple[Any, float, float]], n_with_tasks: int,
                     steps_source: str, sources: dict[str, str], notes: list[str], out: _Split) -> None:
    """The recorded steps no device task covers, from the step trace's phases, in time order with the others."""
    ctx = _phase_context(out.steps, iv, n_with_tasks or _executions(profile))
    phases = _phase_steps(profile, iv, {s: (lo, hi) for s, lo, hi in bounds}, out.leads,
                          {st.step for st in out.steps}, ctx)
    if not phases:
        if n_with_tasks < len(bounds):
            notes.append(f"{len(bounds) - n_with_tasks} of {len(bounds)} recorded steps hold no device task of "
                         "this capture: outside the analyzed window")
        return
    _note_phases(sources, notes, steps_source, phases, ctx, bool(out.steps))
    for step in phases:
        out.add(step, step.start_us if step.start_us is not None else -np.inf, (step.start_us or 0.0) + step.window_us)
    order = sorted(range(len(out.steps)), key=lambda i: (out.spans[i][0], out.steps[i].step or 0))
    out.steps, out.spans = [out.steps[i] for i in order], [out.spans[i] for i in order]


def _note_phases(sources: dict[str, str], notes: list[str], steps_source: str, phases: list[StepTime],
                 ctx: _PhaseContext, with_tasks: bool) -> None:
    if with_tasks:
        notes.append(f"{len(phases)} recorded step(s) hold no device task of this capture: split from the step "
                     f"trace's phases ({steps_source}), compute capped at {fmt_us(ctx.compute_per_step or 0)} per "
                     f"step as measured on {ctx.source}")
        return
    sources["window"] = sources["split"] = f"{steps_source}: step phases (no device task times)"
    sources.pop("uncovered_by_kind", None)
    if ctx.compute_per_step is not None:
        notes.append(f"compute of each step capped at {fmt_us(ctx.compute_per_step)}, what {ctx.source} measure per "
                     "step: the step trace's forward-backward phase is an interval on the device, not busy time")


def _first_step(profile: Profile) -> str | None:
    """Why the capture's first step is the program's first: a torch_npu profiler schedule that neither skips nor
    waits nor warms up (profiler_info's ``schedule``)."""
    sched = ((profile.meta.config or {}).get("common_config") or {}).get("schedule")
    if not isinstance(sched, dict):
        return None
    keys = ("skip_first", "wait", "warmup")
    if all(_nz(sched.get(k)) == 0 for k in keys):
        return "profiler_info schedule: " + ", ".join(f"{k}={_nz(sched.get(k)):g}" for k in keys)
    return None


def _idle_blocks(split: _Split, analyzed: list[StepTime], busy: tuple[np.ndarray, np.ndarray],
                 skip: tuple[np.ndarray, np.ndarray]) -> tuple[np.ndarray, np.ndarray] | None:
    """The idle blocks of the device inside the analyzed steps that hold recorded tasks (pauses left out)."""
    kept = {id(s) for s in analyzed if s.tasks}
    spans = [(lo, hi) for s, (lo, hi) in zip(split.steps, split.spans, strict=True)
             if id(s) in kept and np.isfinite(lo) and np.isfinite(hi) and hi > lo]
    if not spans:
        return None
    covered = busy if not len(skip[0]) else union(np.r_[busy[0], skip[0]], np.r_[busy[1], skip[1]])
    parts = [complement(covered, lo, hi) for lo, hi in spans]
    return union(np.concatenate([p[0] for p in parts]), np.concatenate([p[1] for p in parts]))


def _phase_sources(sources: dict[str, str], profile: Profile, task_steps: list[StepTime]) -> None:
    """The analyzed step is a phase step while device tasks exist in other steps: say what each figure rests on."""
    steps_source = profile.meta.sources.get("steps", "step table")
    which = ", ".join(str(s.step) for s in task_steps[:5])
    sources["window"] = f"{steps_source}: the median steady step's phases"
    sources["split"] = (f"{steps_source}: step phases; compute capped at what the device tasks of step(s) {which} "
                        "measure per step")
    if any(s.uncovered_by_kind.get("transmit") for s in task_steps):
        sources["uncovered_by_kind"] = (f"transfer time of the same collectives in step(s) {which} "
                                        f"({sources.get('uncovered_by_kind', 'HCCL tasks')}); the rest is waiting")


def _remove_pauses(split: _Split, iv: _Intervals, factor: float) -> tuple[list[Excluded], tuple[np.ndarray, np.ndarray]]:
    """Pauses of the program inside a window over the whole capture (no step recorded): out of the window and of
    its free time, listed as excluded."""
    busy = union(*_concat(iv.compute, iv.comm))
    excluded: list[Excluded] = []
    skip_s: list[float] = []
    skip_e: list[float] = []
    for i, (step, (lo, hi)) in enumerate(zip(split.steps, split.spans, strict=True)):
        gaps = _pause_gaps(busy, lo, hi, factor)
        if not gaps:
            continue
        paused = sum(b - a for a, b in gaps)
        work = _blocks_len(busy, lo, hi)
        split.steps[i] = replace(step, window_us=max(0.0, step.window_us - paused),
                                 free_us=max(0.0, step.free_us - paused))
        for a, b in gaps:
            excluded.append(Excluded("pause", b - a, f"pause of the program: the device idles {(b - a) / 1000:.2f} ms, "
                                     f"{(b - a) / work:.0f}x all its work in the capture ({work / 1000:.3f} ms; "
                                     f"pause.factor {factor:g}): outside the window, not a host-bound saving",
                                     start_us=a))
            skip_s.append(a)
            skip_e.append(b)
    return excluded, (np.array(skip_s), np.array(skip_e))


def build(profile: Profile) -> TimeModel:
    """The time model of ``profile`` (see the module doc for the sources, best first)."""
    rules = time_rules(profile.meta)
    iv = _intervals(profile)
    sources = dict(iv.sources)
    notes: list[str] = []
    split = _split(profile, iv, sources, notes)
    excluded: list[Excluded] = []
    skip = _empty()
    if not split.recorded:
        excluded, skip = _remove_pauses(split, iv, float(rules["pause"]["factor"]))
        if excluded:
            sources["window"] += ", without its pauses"
    busy = union(*_concat(iv.compute, iv.comm))
    host = freetime.host_activity(profile, rules)
    for step, (lo, hi) in zip(split.steps, split.spans, strict=True):
        if step.tasks and not step.free_by_kind:
            step.free_by_kind = freetime.split(step.free_us, lo, hi, busy, host, split.leads.get(step.step), skip)
    executions = sum(1 for s in split.steps if s.tasks) or _executions(profile)
    steps, warm_up, info, more = steady.choose(split.steps, rules, executions, _first_step(profile))
    warm = [Excluded("warm-up", s.window_us, why, s.step, s.start_us) for s, why in warm_up]
    notes.extend(more)
    if steps and not any(s.tasks for s in steps) and any(s.tasks for s in split.steps):
        _phase_sources(sources, profile, [s for s in split.steps if s.tasks])
    capture = _capture_span(profile)
    model = TimeModel(steps=steps, sources=sources, origin_ns=profile.meta.time_origin_ns, capture_us=capture,
                      notes=notes, excluded=[*warm, *excluded],
                      steady_state=info if len(split.steps) > 1 or info.get("warmup_suspected") else {},
                      link_waits=_collect_link_waits(iv), idle=_idle_blocks(split, steps, busy, skip),
                      report_max_steps=int(rules["report"]["max_steps"]))
    if capture is not None and model.window_us > 0 and model.outside_window_us > 0.05 * capture:
        notes.append(f"the capture holds {fmt_us(model.window_us)} of analyzed device time in {fmt_us(capture)}; "
                     f"{fmt_us(model.outside_window_us)} lie outside the analyzed window (warm-up steps, pauses, an "
                     "idle head or tail: see time.excluded; profile more steps, or start the capture closer to the "
                     "work)")
    return model


def shares(model: TimeModel) -> Mapping[str, float]:
    """Shares of the window (0-1) of compute, uncovered communication and free time."""
    w = model.window_us
    if w <= 0:
        return {"compute": 0.0, "communication": 0.0, "free": 0.0}
    return {"compute": model.compute_us / w, "communication": model.uncovered_communication_us / w,
            "free": model.free_us / w}


register_time_model(build)

__all__ = ["COMM_DEVICE_TASK", "COMPUTE_KEYS", "DEVICE_PROCESS", "LINK_WAIT_COLUMNS", "UNCOVERED_KEYS", "StepTime",
           "TimeModel", "build", "comm_streams", "compute_bucket", "merge", "shares"]
