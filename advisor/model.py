"""The normalized profile model: one vocabulary for every layout and CANN version.

Ingest (``advisor.ingest``) is the only code that knows file layouts; everything downstream reads a
:class:`Profile`. Column names below are the contract; see ``docs/model.md`` for their meaning.

Times are microseconds (float); time stamps (``start_us``...) are offsets from the rank's origin
``Meta.time_origin_ns``, parsed without loss (``advisor.ingest.timebase``). Absent metrics are NaN, never 0. Tensor descriptions (shapes, dtypes,
formats) are kept as canonical strings -- tensors separated by ``;``, dims by ``,`` (``"1,3,224,224;64,3,7,7"``)
-- stored as categoricals because a million-row profile repeats a few hundred distinct values; use
:func:`parse_shapes` / :func:`parse_list` to get them as lists (cached per distinct value).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from advisor.timemodel import TimeModel

# ---------------------------------------------------------------------------------------------------------
# ops: one row per device task
# ---------------------------------------------------------------------------------------------------------
OP_ID_COLUMNS = ["name", "type", "core"]
"""Op name, op type, and core (task) type: AI_CORE, AI_VECTOR_CORE, MIX_AIC, MIX_AIV, AI_CPU (compute,
:data:`COMPUTE_CORES`), HCCL or COMMUNICATION (collectives), DSA_SQE, OTHER (anything else the profiler names is
kept as it is)."""

OP_TIME_COLUMNS = ["start_us", "duration_us", "wait_us"]

OP_TASK_COLUMNS = [
    "block_dim",
    "mix_block_dim",
    "stream_id",
    "task_id",
    "model_id",
    "step",
    "device_id",
    "context_id",
    "op_state",
]
"""Integer ids are float64 (NaN when absent). ``model_id`` 4294967295 (single-op/eager mode) becomes NaN.
``op_state`` is "dynamic"/"static" where the profile has an ``OP State`` column, else missing."""

OP_TENSOR_COLUMNS = [
    "input_shapes",
    "input_dtypes",
    "input_formats",
    "output_shapes",
    "output_dtypes",
    "output_formats",
]

OP_METRIC_COLUMNS = [
    "aicore_time_us",
    "total_cycles",
    "mac_ratio",
    "vec_ratio",
    "scalar_ratio",
    "mte1_ratio",
    "mte2_ratio",
    "mte3_ratio",
    "fixpipe_ratio",
    "icache_miss_rate",
    "cube_utilization",
    "memory_bound",
    "cube_fops",
    "vector_fops",
    "main_mem_read_bw",
    "main_mem_write_bw",
]
"""Unified metrics, whatever the header variant. On split-core chips (910B/A3) ``mac_ratio`` etc. are derived
from the ``aic_*`` (cube core) and ``aiv_*`` (vector core) columns, which are kept too as ``aic_<metric>`` /
``aiv_<metric>`` (e.g. ``aic_mte2_ratio``, ``aiv_time_us``). ``cube_utilization`` is a 0-1 fraction."""

OPS_COLUMNS = OP_ID_COLUMNS + OP_TIME_COLUMNS + OP_TASK_COLUMNS + OP_TENSOR_COLUMNS + OP_METRIC_COLUMNS
"""Every normalized ops table has at least these columns (plus optional ``aic_*``/``aiv_*``, ``rank``)."""

OPS_PIPELINE_COLUMNS = (
    *OP_ID_COLUMNS, *OP_TIME_COLUMNS, *OP_TENSOR_COLUMNS, "step", "stream_id", "model_id", "device_id", "op_state",
    "block_dim", "mix_block_dim", "rank", "aicore_time_us", "mac_ratio", "vec_ratio", "scalar_ratio", "mte1_ratio",
    "mte2_ratio", "mte3_ratio", "fixpipe_ratio", "memory_bound", "cube_fops", "vector_fops", "main_mem_read_bw",
    "main_mem_write_bw", "aic_mac_ratio", "aic_mte2_ratio", "aiv_vec_ratio", "aiv_mte2_ratio", "aic_*_fops",
    "aiv_*_fops", "soc_*", "cube_utilization", "total_cycles", "aic_total_cycles", "aiv_total_cycles", "aiv_time_us",
)
"""Ops columns advisor's own stages read whatever knowledge bases run -- ingest's checks, the time model, the model
summary, the shared op classification (``advisor.toolkit``), the chip's identity from the kernels' counters
(``advisor.core.chip_evidence``) and the reports -- so every :class:`OpsProjection`
keeps them (names or ``fnmatch`` patterns)."""


@dataclass(frozen=True)
class OpsProjection:
    """The ops columns an analysis reads: the pipeline's (:data:`OPS_PIPELINE_COLUMNS`) and those its knowledge
    bases declare (``KnowledgeBase.ops_columns``). Readers skip the other columns of a large profile -- a
    kernel_details.csv of a split-core chip carries ~30 per-core metrics no rule reads, ~0.3 GB at 2M kernels.

    ``metrics_at_precision``: every knowledge base reads metrics with :func:`metric_values` (API 1.3), so readers
    store them at the precision the file wrote them (:func:`store_metric`)."""

    patterns: frozenset[str]
    metrics_at_precision: bool = False

    @classmethod
    def of(cls, declared: Any, metrics_at_precision: bool = False) -> OpsProjection:
        return cls(frozenset(OPS_PIPELINE_COLUMNS) | frozenset(declared), metrics_at_precision)

    def wants(self, column: str) -> bool:
        return _projection_wants(self.patterns, column)

    def plus(self, columns: Any) -> OpsProjection:
        return OpsProjection(self.patterns | frozenset(columns), self.metrics_at_precision)

    def apply(self, ops: pd.DataFrame) -> pd.DataFrame:
        """``ops`` without the columns this projection does not want (the same frame when it wants them all)."""
        drop = [c for c in ops.columns if not self.wants(str(c))]
        return ops.drop(columns=drop) if drop else ops


@lru_cache(maxsize=4096)
def _projection_wants(patterns: frozenset[str], column: str) -> bool:
    return column in patterns or any(fnmatchcase(column, p) for p in patterns if "*" in p)


@dataclass(frozen=True)
class EventSelection:
    """The timeline events an analysis reads row by row: regular expressions, each matched against the whole event
    name, process name or category (``(?i:...)`` for case-insensitive parts). An event any of them matches is kept
    in ``Profile.events``; every other one is only counted, per process and name, into ``Profile.event_summary``
    while the trace streams (Python-function events of a ``with_stack`` trace, enqueue/dequeue, runtime calls no
    rule reads). Knowledge bases declare theirs with ``KnowledgeBase.events_read`` (API 1.4)."""

    names: tuple[str, ...] = ()
    processes: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()

    def __or__(self, other: EventSelection) -> EventSelection:
        return EventSelection(*(tuple(dict.fromkeys((*a, *b))) for a, b in
                                ((self.names, other.names), (self.processes, other.processes),
                                 (self.categories, other.categories))))

    def tests(self) -> tuple[Callable[[Any], bool], Callable[[Any], bool], Callable[[Any], bool]]:
        """(process test, name test, category test): whether a value of that field selects the event (values that
        are not strings select nothing). Readers test each distinct value once."""
        return _full_matcher(self.processes), _full_matcher(self.names), _full_matcher(self.categories)


def _full_matcher(patterns: tuple[str, ...]) -> Callable[[Any], bool]:
    if not patterns:
        return lambda value: False
    rx = re.compile("|".join(f"(?:{p})" for p in patterns))
    return lambda value: type(value) is str and rx.fullmatch(value) is not None


EVENT_SUMMARY_COLUMNS = ["process", "name", "count", "total_us", "first_us", "last_end_us"]
"""``Profile.event_summary``: one row per process and name of the events not kept (:class:`EventSelection`):
how many, their summed duration, the first start and the last end (start + duration, a missing duration 0)."""


COMPUTE_CORES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV", "AI_CPU")

# Other tables (each may be empty with these columns)
OP_STATS_COLUMNS = ["type", "core", "count", "total_us", "min_us", "avg_us", "max_us", "ratio"]
API_COLUMNS = ["level", "name", "total_us", "count", "avg_us", "min_us", "max_us"]
TX_COLUMNS = ["name", "start_us", "duration_us", "category"]
STEPS_COLUMNS = [
    "step",
    "computing_us",
    "communication_us",
    "comm_not_overlapped_us",
    "overlapped_us",
    "free_us",
    "stage_us",
    "bubble_us",
    "preparing_us",
]
EVENTS_COLUMNS = ["process", "name", "category", "start_us", "duration_us", "tid", "args"]
"""Host-side and other timeline events kept from a trace (CANN API calls, Python ops, GC, counters...):
``process`` is the trace process name (``CANN``, ``Python``, ``HCCL``...), ``args`` a dict or None."""
COMM_COLUMNS = [
    "step",
    "op",
    "group",
    "elapse_us",
    "transit_us",
    "wait_us",
    "sync_us",
    "idle_us",
    "transport",
    "size_mb",
    "bandwidth_gbps",
    "large_packet_ratio",
]
MEMORY_COLUMNS = ["component", "timestamp_us", "allocated_mb", "reserved_mb", "active_mb"]


# ---------------------------------------------------------------------------------------------------------
# kernel blocks: msprof op's per-block metrics, one row per launch x block x sub-block
# ---------------------------------------------------------------------------------------------------------
KERNEL_BLOCKS_EXTRA = "msprof_op_blocks"
"""``Profile.extras`` key of the per-block table (:attr:`Profile.kernel_blocks` reads it). Written by
``advisor.ingest.msprof_op`` for every msprof op layout (``OPPROF_*`` one launch, ``<OpName>/<n>/`` launches,
``device<N>/``, the JSON Lines capture ``summary.jsonl`` + ``HardwareInfo.jsonl``), also when an ``op_summary`` of the
same kernel sits beside it (``advisor.ingest.kernel_runs``)."""

KERNEL_BLOCK_KEY_COLUMNS = ("launch", "name", "block_id", "sub_block_id", "side", "kernel_name")
"""The row keys of :attr:`Profile.kernel_blocks` (every other column is a metric of
:data:`KERNEL_BLOCK_METRICS`):

* ``launch`` -- 0-based msprof op launch (``<OpName>/<n>/`` directories in launch order; 0 for one launch);
* ``name`` -- the ``ops`` row name the block belongs to (``ops["name"] == name``): msprof op's ``Op Name``, or the
  ``op_summary`` kernel it was matched to when one is read beside it;
* ``block_id`` -- the block (float, as the CSV's ``block_id``; row index on chips whose CSVs have none);
* ``sub_block_id`` -- ``cube0`` / ``vector0`` / ``vector1`` as the CSV writes it (None where it has none);
* ``side`` -- ``aic`` (the cube core, or the one AI Core of chips without split cores) or ``aiv`` (a vector core):
  a MIX kernel has one ``aic`` row and one or two ``aiv`` rows per block; only the ``aic_*`` metrics are set on
  ``aic`` rows and only the ``aiv_*`` ones on ``aiv`` rows (NaN elsewhere);
* ``kernel_name`` -- the ``Op Name`` msprof op recorded (equal to ``name`` unless matched to an op_summary kernel).

Exactly one row per (launch, block_id, sub_block_id): repeated keys in a metric CSV are read once (see
``advisor.ingest.msprof_op.one_row_per_block``), never multiplied by the join of the metric CSVs."""

KERNEL_BLOCK_METRICS: dict[str, str] = {
    # times and cycles (PipeUtilization; every set repeats them)
    "aicore_time_us": "cube core's (AI Core's) run time of the block, us (msprof op ``aic_time(us)``)",
    "aiv_time_us": "vector core's run time of the sub-block, us",
    "{side}_total_cycles": "the core's cycles over the block (the weight of its ratios)",
    # pipe busy shares (PipeUtilization): fraction 0-1 of the side's cycles, with the pipe's time in us beside it
    "aic_mac_ratio": "cube (MAC) pipe busy share (msprof op ``aic_cube_ratio``); ``aic_mac_time_us`` its time",
    "aiv_vec_ratio": "vector pipe busy share; ``aiv_vec_time_us`` its time (``aic_vec_ratio`` on chips without "
                     "split cores)",
    "{side}_scalar_ratio": "scalar pipe busy share; ``{side}_scalar_time_us``",
    "{side}_mte1_ratio": "MTE1 (L1 -> L0A/L0B) busy share; ``{side}_mte1_time_us``",
    "{side}_mte2_ratio": "MTE2 (GM -> L1/UB) busy share; ``{side}_mte2_time_us``",
    "{side}_mte3_ratio": "MTE3 (UB/L1 -> GM) busy share; ``{side}_mte3_time_us``",
    "aic_fixpipe_ratio": "FIXPIPE (L0C -> GM/L1) busy share; ``aic_fixpipe_time_us``",
    "{side}_{pipe}_active_bw": "a pipe's bandwidth while active, GB/s (mte1/mte2/mte3/fixpipe)",
    # instruction fetch and scalar stalls (PipeUtilization, CANN 8.x)
    "{side}_icache_miss_rate": "instruction-cache miss rate, fraction 0-1",
    "{side}_scalar_wait_ib_time_us": "scalar unit waiting on instruction fetch (instruction buffer), us",
    "{side}_scalar_single_time_us": "scalar single-issue time, us (``_dual_`` dual-issue)",
    "{side}_scalar_{unit}_stall_time_us": "scalar unit stalled on a pipe (mte1/mte2/mte3/cube/vector) or UB, us",
    # conflicts and waits (ResourceConflictRatio): fraction 0-1 of the side's cycles
    "aiv_vec_bank_cflt_ratio": "UB bank conflicts of the vector unit (``bankgroup_``/``resc_``/``mte_``/``total_``"
                               " beside it)",
    "{side}_{pipe}_wait_ratio": "a pipe waiting on another (cross-pipe synchronization)",
    # L2 cache (L2Cache): counts, and hit rates in percent 0-100 as written (``(%)`` in the header)
    "{side}_total_hit_rate": "L2 hit rate of the side's accesses, percent (``read_``/``write_hit_rate`` beside it; "
                             "the JSON Lines capture writes only read/write)",
    "{side}_{r0,r1,write}_cache_{hit,miss_allocate}": "L2 hit / miss counts (JSON Lines capture: "
                                                     "``{side}_{read,write}_{close,far}_{hit,miss,victim}``)",
    # achieved bandwidth per level (Memory, MemoryL0, MemoryUB): GB/s over the block's time
    "{side}_main_mem_read_bw": "global memory (HBM/DDR) read bandwidth; ``_write_bw`` the write one",
    "aic_l1_read_bw": "L1 buffer read bandwidth (``aic_l1_write_bw``)",
    "aic_l0{a,b}_{read,write}_bw": "L0A/L0B bandwidth; ``aic_l0c_{read,write}_bw_cube`` L0C's",
    "aiv_ub_{read,write}_bw_{vector,scalar,gm}": "unified-buffer bandwidth by the unit using it",
    "aiv_gm_to_ub_bw": "GM -> UB bandwidth (``aiv_ub_to_gm_bw`` back)",
    "{src}_to_{dst}_datas_kb": "data moved between levels, KB (``gm_to_l1``, ``l0c_to_gm``, ``gm_to_ub``...)",
    "read_main_memory_datas_kb": "bytes read from global memory, KB (``write_main_memory_datas_kb``)",
    "{src}_to_{dst}_bw_usage_rate": "that path's share of its peak bandwidth, percent",
    "{side}_{unit}_instructions": "MTE instruction counts (Memory)",
    # arithmetic (ArithmeticUtilization)
    "{side}_{cube,vector}_fops": "floating-point operations of the block",
    "aic_cube_{fp16,int8,fp,int}_ratio": "cube instruction mix, fraction 0-1 (``aiv_vec_*_ratio`` for the vector)",
}
"""The metric columns of :attr:`Profile.kernel_blocks`, by name pattern (``{side}`` = ``aic`` / ``aiv``): the
msprof op CSV header lower-cased, units as a suffix (``aic_l1_read_bw(GB/s)`` -> ``aic_l1_read_bw``,
``aiv_vec_time(us)`` -> ``aiv_vec_time_us``, ``L1_to_GM_datas(KB)(estimate)`` -> ``l1_to_gm_datas_kb_estimate``)
and the op_summary spellings where both exist (``aic_cube_ratio`` -> ``aic_mac_ratio``, ``aic_time(us)`` ->
``aicore_time_us``; ``advisor.ingest.columns.msprof_op_metric_name``). Which columns are present depends on the
metric sets collected (``meta.config["aic_metrics"]``) and the release. Values are the file's, block by block; the
per-op aggregate of each is on the op's ``ops`` row (times averaged, counts summed, ratios weighted by cycles,
bandwidths as total bytes over the side's mean core time)."""


def empty_frame(columns: list[str]) -> pd.DataFrame:
    """A typed empty table, so knowledge bases never special-case a missing one.

    Built from one empty float block (as a dict of empty Series would consolidate to): ~40x cheaper, and a rank
    makes some twenty of them (issue 33: a small rank's cost is mostly such fixed overhead)."""
    names = list(dict.fromkeys(columns))
    if not names:
        return pd.DataFrame({})
    return pd.DataFrame(np.empty((0, len(names)), dtype="float64"), columns=names)


@dataclass
class SkippedFile:
    path: str
    reason: str
    unreadable: bool = False
    """The file exists but could not be read at all (a FIFO, a device, a directory where a file is expected): the
    analysis is incomplete (exit 3), unlike a file skipped for what it holds."""

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"path": self.path, "reason": self.reason}
        if self.unreadable:
            out["unreadable"] = True
        return out


@dataclass(frozen=True)
class Hardware:
    """The chip as the profile itself records it: core counts and cube clock, and the file that says so.

    Read by ingest (msprof ``info.json.N``, msprof op ``HardwareInfo.jsonl``); ``advisor.platform`` picks the chip
    of ``rules/platforms.yaml`` these numbers describe, so a profile that names its core counts never gets a default
    or a family's peaks."""

    ai_cores: int | None = None
    vector_cores: int | None = None
    clock_mhz: float | None = None
    """AI Core (cube) clock in MHz."""
    source: str = ""
    """The file the numbers come from (``info.json.0``)."""
    vector_clock_mhz: float | None = field(default=None, compare=False)
    """Vector core clock in MHz where the file records its own (msprof op ``HardwareInfo.jsonl``)."""
    chip: str | None = field(default=None, compare=False)
    """The SoC the same file names (``HardwareInfo.jsonl`` ``chip info``: ``Ascend950PR_9599``), None when it names
    none: a chip named here that ``rules/platforms.yaml`` does not know is analyzed with these counts and clocks and
    no borrowed peaks (``advisor.platform``)."""
    arch: str | None = field(default=None, compare=False)
    """The NPU architecture the file records (``arch info``: ``3510``)."""

    def describe(self) -> str:
        """``20 AI cores, 40 vector cores, 1800 MHz`` (what is known; ``vector 1600 MHz`` when the vector clock
        differs)."""
        parts = []
        if self.ai_cores is not None:
            parts.append(f"{self.ai_cores} AI core{'s' if self.ai_cores != 1 else ''}")
        if self.vector_cores is not None:
            parts.append(f"{self.vector_cores} vector core{'s' if self.vector_cores != 1 else ''}")
        if self.clock_mhz is not None:
            parts.append(f"{self.clock_mhz:g} MHz")
        if self.vector_clock_mhz is not None and self.vector_clock_mhz != self.clock_mhz:
            parts.append(f"vector {self.vector_clock_mhz:g} MHz")
        return ", ".join(parts) or "no core counts"


@dataclass
class Meta:
    """Where the data came from and what was (not) read."""

    source: str = ""
    layout: str = "unknown"
    """The name of the layout the profile was read as: a ``Layout`` of ``advisor.ingest.registry`` (the README's
    "What it reads" table lists them), or ``static-audit`` (a model graph without a profile: ops estimated by
    ``advisor.toolkit.costmodel``)."""
    chip: str | None = None
    cann_version: str | None = None
    torch_npu_version: str | None = None
    framework: str | None = None
    rank: int | None = None
    ai_core_num: int | None = None
    aiv_num: int | None = None
    hardware: Hardware | None = None
    """Core counts and clock as the profile records them (``info.json.N``...), None when it records none."""
    files_read: list[str] = field(default_factory=list)
    files_skipped: list[SkippedFile] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    environment: dict[str, str] = field(default_factory=dict)
    """Environment variables recorded by the profiler (profiler_metadata.json ENV_VARIABLES...)."""
    config: dict[str, Any] = field(default_factory=dict)
    """Profiler configuration (profiler_info ``config``) when recorded."""
    application: str | None = None
    """Name of the profiled process (msprof ``info.json.N`` ``pid_name``: ``python``, or a native program such as
    an operator test's ``execute_op``) when recorded."""
    sources: dict[str, str] = field(default_factory=dict)
    """Which file or table each table came from (``ops``, ``steps``, ``comm``, ``events``, ``op_stats``...), so
    figures derived from them can name their source."""
    time_origin_ns: int | None = None
    """Absolute time (ns) that every ``*_us`` time stamp of this rank is an offset from (``advisor.ingest.timebase``):
    absolute ns = ``time_origin_ns + start_us * 1000``. None when the profile holds no time stamps."""
    context: str = "unknown"
    """Execution context (``advisor.ingest.context``): om-acl, torch-eager, torch-graph, mindspore-graph,
    mindspore-pynative, kernel-dev or unknown."""
    context_evidence: str = ""
    """One line saying which signal decided ``context``."""
    ranks_in_input: int = 1
    """How many ranks the analysis reads: 1, this rank alone (its peers in a collective are not in the analysis); more
    for a multi-rank input, whose ranks the cluster knowledge bases see together."""
    ops_columns: OpsProjection | None = field(default=None, repr=False, compare=False)
    """The ops columns the analysis reads (:class:`OpsProjection`): readers may skip the others. None: all."""
    events_read: EventSelection | None = field(default=None, repr=False, compare=False)
    """The timeline events the analysis reads row by row (:class:`EventSelection`): trace readers count the others
    into ``Profile.event_summary`` instead of keeping them. None: keep every event."""
    time_rules: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    """The time model's thresholds (``rules/time.yaml`` as the analysis loaded it); None: the built-in file."""

    def read(self, path: object) -> None:
        self.files_read.append(str(path))

    def skip(self, path: object, reason: str, *, unreadable: bool = False) -> None:
        self.files_skipped.append(SkippedFile(str(path), reason, unreadable))

    def source_of(self, table: str, source: object) -> None:
        """Record where ``table`` came from: a path (its file name is kept) or a description."""
        name = source.name if hasattr(source, "name") else str(source)
        if table not in self.sources:
            self.sources[table] = name
        elif name not in self.sources[table].split(" + "):
            self.sources[table] += f" + {name}"


_time_model_builder: Callable[[Profile], TimeModel] | None = None
"""How :attr:`Profile.time` is built: :func:`advisor.timemodel.build`, registered by that module when it is imported.
The model is declared before the time model that reads it, so it names no later module; the plugin API imports both."""


def register_time_model(build: Callable[[Profile], TimeModel]) -> None:
    """Make ``build`` the builder of every profile's time model (``advisor.timemodel`` calls it on import)."""
    global _time_model_builder
    _time_model_builder = build


@dataclass
class Profile:
    """One rank's profile in the normalized vocabulary. Tables are never None (empty frames instead)."""

    ops: pd.DataFrame
    meta: Meta
    op_stats: pd.DataFrame = field(default_factory=lambda: empty_frame(OP_STATS_COLUMNS))
    api: pd.DataFrame = field(default_factory=lambda: empty_frame(API_COLUMNS))
    tx: pd.DataFrame = field(default_factory=lambda: empty_frame(TX_COLUMNS))
    steps: pd.DataFrame = field(default_factory=lambda: empty_frame(STEPS_COLUMNS))
    events: pd.DataFrame = field(default_factory=lambda: empty_frame(EVENTS_COLUMNS))
    comm: pd.DataFrame = field(default_factory=lambda: empty_frame(COMM_COLUMNS))
    memory: pd.DataFrame = field(default_factory=lambda: empty_frame(MEMORY_COLUMNS))
    event_summary: pd.DataFrame = field(default_factory=lambda: empty_frame(EVENT_SUMMARY_COLUMNS))
    """Events of the timeline not kept in ``events`` because no knowledge base reads them row by row
    (``Meta.events_read``), counted per process and name (:data:`EVENT_SUMMARY_COLUMNS`)."""
    extras: dict[str, Any] = field(default_factory=dict)
    """Raw-but-parsed side data a knowledge base may want (e.g. ``communication_matrix``)."""
    _time: Any = field(default=None, repr=False, compare=False)

    @property
    def time(self) -> TimeModel:
        """The rank's time model (``advisor.timemodel``): window, steps, compute / communication / free split.
        Built once, from the tables as ingest left them; every knowledge base, the score and the reports read it."""
        if self._time is None:
            if _time_model_builder is None:
                raise RuntimeError("Profile.time is built by advisor.timemodel; import it first")
            self._time = _time_model_builder(self)
        return self._time

    @property
    def kernel_blocks(self) -> pd.DataFrame:
        """msprof op's per-block metrics: one row per launch, block and sub-block (keys
        :data:`KERNEL_BLOCK_KEY_COLUMNS`, metrics :data:`KERNEL_BLOCK_METRICS`); an empty frame with the key columns
        when the profile has none (not an msprof op result)."""
        blocks = self.extras.get(KERNEL_BLOCKS_EXTRA)
        if isinstance(blocks, pd.DataFrame):
            return blocks
        return empty_frame(list(KERNEL_BLOCK_KEY_COLUMNS))

    @property
    def available(self) -> set[str]:
        """Names of the data this profile carries, as knowledge bases declare them in ``requires``."""
        have = {"meta"}
        for name in ("ops", "op_stats", "api", "tx", "steps", "events", "comm", "memory"):
            if len(getattr(self, name)):
                have.add(name)
        if len(self.events) or len(self.event_summary):  # a timeline whose events no rule reads is still one
            have.update(("events", "timeline"))
        if len(self.ops) and self.ops["aicore_time_us"].notna().any():
            have.add("metrics")
        if len(self.kernel_blocks):
            have.add("kernel_blocks")
        return have

    def device_time_us(self) -> float:
        """Sum of device task durations (all cores)."""
        if not len(self.ops):
            return 0.0
        return float(self.ops["duration_us"].sum(skipna=True))

    def busy_time_us(self) -> float:
        """Union of device task intervals: time the device was busy with at least one task."""
        return busy_time_us(self.ops)


def busy_time_us(ops: pd.DataFrame) -> float:
    """Length of the union of [start, start+duration) intervals; rows without a start time add their duration."""
    from advisor.common.intervals import union_length

    if not len(ops):
        return 0.0
    starts = ops["start_us"].to_numpy(dtype="float64")
    durs = ops["duration_us"].to_numpy(dtype="float64")
    no_start = np.isnan(starts)
    return union_length(starts, starts + durs) + float(np.nansum(durs[no_start]))


# ---------------------------------------------------------------------------------------------------------
# metric columns at the data's precision
# ---------------------------------------------------------------------------------------------------------
OPS_FULL_PRECISION_COLUMNS = frozenset({*OP_TIME_COLUMNS, *OP_TASK_COLUMNS, "rank"})
"""Ops number columns always stored as float64: time stamps need it, ids and durations are read everywhere. Every
other number column is a metric, stored as float32 where that holds every value the file wrote exactly
(:func:`store_metric`): 4 bytes a row instead of 8. Read metrics with :func:`metric_values`."""

_SCALED_LIMIT = float(2 ** 22)
"""A float32 holds ``v`` within ``|v| * 2**-24``; scaled by ``10**d`` below this bound the error stays under 0.25, so
rounding the scaled value recovers the integer ``v * 10**d`` of a value with at most ``d`` decimals."""


def metric_values(values: pd.Series | np.ndarray, rows: np.ndarray | None = None) -> np.ndarray:
    """The float64 values of a metric column (at ``rows`` only, if given) exactly as the file wrote them.

    A float32 column is decoded: each value rounded to the most decimals its magnitude allows in float32 (at most 9)
    -- the decimals the file wrote, which :func:`store_metric` checked for the whole column before storing it; a
    part of it has smaller magnitudes, so as many decimals or more. Anything else is returned as float64."""
    if isinstance(values, pd.Series):
        if values.dtype != np.float32:
            out = values.to_numpy(dtype="float64")
            return out if rows is None else out[rows]
        values = values.to_numpy()
    raw = np.asarray(values) if rows is None else np.asarray(values)[rows]
    return _restore(raw) if raw.dtype == np.float32 else raw.astype("float64", copy=False)


def store_metric(values: np.ndarray) -> np.ndarray:
    """``values`` (float64) as float32 when :func:`metric_values` gives every one of them back exactly (NaN kept),
    else ``values`` itself. A value with more digits than a float32 holds -- a 9-digit cycle count, a division's
    result -- keeps the whole column float64."""
    if values.dtype != np.float64 or len(values) < 2 or values.strides == (0,) or np.isinf(values).any():
        return values
    stored = _store(values)
    back = _restore(stored)
    same = (back == values) | (np.isnan(back) & np.isnan(values))
    return stored if bool(same.all()) else values


def _store(values: np.ndarray) -> np.ndarray:
    return values.astype(np.float32)


def _restore(stored: np.ndarray) -> np.ndarray:
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        top = float(np.nanmax(np.abs(stored), initial=0.0))
        out = stored.astype("float64")
        if not np.isfinite(top) or top == 0.0:
            return out
        scale = 10.0 ** min(9, max(0, int(np.floor(np.log10(_SCALED_LIMIT / top)))))
        out *= scale
        np.rint(out, out=out)
        out /= scale
    return out


# ---------------------------------------------------------------------------------------------------------
# tensor-description helpers
# ---------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=65536)
def parse_shapes(value: object) -> tuple[tuple[int, ...] | None, ...]:
    """``"1,3,224,224;64,3,7,7;"`` -> ``((1,3,224,224), (64,3,7,7), None)``; empty tensor -> None.

    Scalars (an empty dim list in a present tensor) are ``()``; unparsable dims make that tensor None.
    """
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ()
    text = str(value).strip().strip('"').strip()
    if not text or text.upper() in ("N/A", "NA", "NULL"):
        return ()
    out: list[tuple[int, ...] | None] = []
    for part in text.split(";"):
        part = part.strip()
        if not part:
            out.append(None)
            continue
        try:
            out.append(tuple(int(d) for d in part.split(",") if d.strip() != ""))
        except ValueError:
            out.append(None)
    return tuple(out)


@lru_cache(maxsize=65536)
def parse_list(value: object) -> tuple[str, ...]:
    """``"FLOAT16;INT64"`` -> ``("FLOAT16", "INT64")`` (dtypes, formats)."""
    if value is None or (isinstance(value, float) and np.isnan(value)):
        return ()
    text = str(value).strip().strip('"').strip()
    if not text or text.upper() == "N/A":
        return ()
    return tuple(p.strip() for p in text.split(";"))


DTYPE_BYTES = {
    "FLOAT": 4,
    "FLOAT32": 4,
    "DT_FLOAT": 4,
    "FLOAT16": 2,
    "DT_FLOAT16": 2,
    "BF16": 2,
    "BFLOAT16": 2,
    "DT_BF16": 2,
    "INT8": 1,
    "DT_INT8": 1,
    "UINT8": 1,
    "DT_UINT8": 1,
    "INT16": 2,
    "UINT16": 2,
    "INT32": 4,
    "DT_INT32": 4,
    "UINT32": 4,
    "INT64": 8,
    "DT_INT64": 8,
    "UINT64": 8,
    "DOUBLE": 8,
    "DT_DOUBLE": 8,
    "FLOAT64": 8,
    "BOOL": 1,
    "DT_BOOL": 1,
    "HIFLOAT8": 1,
    "FLOAT8_E5M2": 1,
    "FLOAT8_E4M3FN": 1,
    "INT4": 0.5,
}


def dtype_bytes(dtype: str) -> float | None:
    """Bytes per element of a dtype name as profiles and graphs spell it (``FLOAT16``, ``DT_FLOAT16``...)."""
    key = dtype.strip().upper()
    if key.startswith("DT_") and key not in DTYPE_BYTES:
        key = key[3:]
    return DTYPE_BYTES.get(key)


_MINDSPORE_FULL_NAME = re.compile(r"(.+)-op\d+")


def mindspore_op_type(name: object) -> str | None:
    """The op type a MindSpore full op name carries (``Default/net/conv1-Conv2d/Conv2D-op12`` -> ``Conv2D``: the
    last scope component without its ``-op<N>`` id); None for a name without that suffix."""
    m = _MINDSPORE_FULL_NAME.fullmatch(str(name).rsplit("/", 1)[-1])
    return m.group(1) if m else None


def canonical_dtype(dtype: str) -> str:
    """``DT_FLOAT16`` / ``float16`` / ``FLOAT16`` -> ``FLOAT16``; ``FLOAT32`` -> ``FLOAT``."""
    key = dtype.strip().upper()
    if key.startswith("DT_"):
        key = key[3:]
    return {"FLOAT32": "FLOAT", "FP16": "FLOAT16", "FP32": "FLOAT", "BFLOAT16": "BF16", "FLOAT64": "DOUBLE"}.get(
        key, key
    )


def canonical_format(fmt: str) -> str:
    """``FORMAT_NC1HWC0`` -> ``NC1HWC0``."""
    key = fmt.strip().upper()
    return key[7:] if key.startswith("FORMAT_") else key


HEAVY_FORMATS = frozenset(
    {"NC1HWC0", "FRACTAL_Z", "FRACTAL_NZ", "NC1HWC0_C04", "FRACTAL_Z_C04", "NDC1HWC0", "FRACTAL_Z_3D", "C1HWNCOC0"}
)
"""Private ('heavy') formats FE uses on AI Core; conversions to/from them are TransData ops."""


def label_mask(series: pd.Series, keep: Any) -> np.ndarray:
    """``keep(str(value))`` for every row, False where the value is missing (as ``series.astype(str).isin(...)``
    gives it), decided once per category of a categorical column: no per-row text for millions of events."""
    if isinstance(series.dtype, pd.CategoricalDtype):
        hit = np.array([bool(keep(str(c))) for c in series.cat.categories] + [False], dtype=bool)
        codes = series.cat.codes.to_numpy()
        return hit[np.where(codes >= 0, codes, len(hit) - 1)]
    codes, uniques = pd.factorize(series, use_na_sentinel=True)
    hit = np.array([bool(keep(str(u))) for u in uniques] + [False], dtype=bool)
    return hit[np.where(codes >= 0, codes, len(hit) - 1)]
