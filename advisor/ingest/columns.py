"""Header alias tables: every spelling a producer wrote, mapped to the canonical names of ``advisor.model``.

One table per kind of CSV. A table maps a canonical column name to the header spellings seen in real files or
documented (see ``../shared/FORMATS.md``); matching is case- and whitespace-insensitive. Readers ask
:func:`resolve_header` which raw columns to read -- nothing else is read.

PMU metric columns (``aicore_time(us)``, ``aic_mac_ratio``, ``aiv_vec_time(us)``, ``cube_utilization(%)``,
``aic_main_mem_read_bw(GB/s)`` ...) come in dozens of ``--aic-metrics`` sets, so they are mapped by rule rather
than listed: a lower-case snake_case header with an optional unit suffix is a metric; the unit suffix becomes
``_us``/``_ns``/``_ms``/``_kb``/``_mb``/``_bytes`` and is dropped for ``(%)`` and ``(GB/s)`` (bandwidths are GB/s
throughout the model).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field

Aliases = Mapping[str, Sequence[str]]

# ---------------------------------------------------------------------------------------------------------
# ops tables: op_summary (msprof, V1-V5) and kernel_details (torch_npu / MindSpore 2.x, variants 1-6)
# ---------------------------------------------------------------------------------------------------------
OPS_TEXT_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("Op Name", "Name"),
    "type": ("OP Type", "Type"),
    "core": ("Task Type", "Accelerator Core"),
    "op_state": ("OP State",),
    "input_shapes": ("Input Shapes",),
    "input_dtypes": ("Input Data Types",),
    "input_formats": ("Input Formats",),
    "output_shapes": ("Output Shapes",),
    "output_dtypes": ("Output Data Types",),
    "output_formats": ("Output Formats",),
    "hf32_eligible": ("HF32 Eligible",),
    "model_name": ("Model Name",),
}
"""Text columns of an ops table. ``hf32_eligible`` and ``model_name`` are kept beyond the model's contract."""

OPS_NUMBER_ALIASES: dict[str, tuple[str, ...]] = {
    # "Task Start Time" (no unit) is the pre-7.0 spelling; its values are microseconds too.
    "start_us": ("Task Start Time(us)", "Start Time(us)", "Task Start Time", "Start Time"),
    "duration_us": ("Task Duration(us)", "Duration(us)"),
    "wait_us": ("Task Wait Time(us)", "Wait Time(us)"),
    "block_dim": ("Block Dim", "Block Num"),
    "mix_block_dim": ("Mix Block Dim", "Mix Block Num"),
    "stream_id": ("Stream ID",),
    "task_id": ("Task ID",),
    "model_id": ("Model ID",),
    "step": ("Step Id", "Step"),
    "device_id": ("Device_id", "Device ID"),
    "context_id": ("Context ID",),
    "infer_id": ("Infer ID",),
}
"""Numeric base columns of an ops table (``Block Num``/``Mix Block Num`` are the 2026 spellings)."""

OPS_ALIASES: dict[str, tuple[str, ...]] = {**OPS_TEXT_ALIASES, **OPS_NUMBER_ALIASES}

_UNIT_SUFFIX = {
    "us": "_us",
    "ns": "_ns",
    "ms": "_ms",
    "%": "",
    "gb/s": "",
    "kb": "_kb",
    "mb": "_mb",
    "b": "_bytes",
    "byte": "_bytes",
    "bytes": "_bytes",
}
_METRIC_RE = re.compile(r"^([a-z][a-z0-9_]*)\s*(?:\(\s*([A-Za-z%/]+)\s*\))?$")


def metric_name(header: str) -> str | None:
    """Canonical name of a PMU metric header, or None when ``header`` is not a metric column.

    ``aicore_time(us)`` -> ``aicore_time_us``; ``aic_mac_ratio`` -> ``aic_mac_ratio``; ``cube_utilization(%)`` ->
    ``cube_utilization``; ``aiv_ub_read_bw(GB/s)`` -> ``aiv_ub_read_bw``;
    ``aic_read_main_memory_datas(KB)`` -> ``aic_read_main_memory_datas_kb``. Title-case headers are not metrics.
    """
    m = _METRIC_RE.match(clean_header(header))
    if not m:
        return None
    base, unit = m.group(1), m.group(2)
    if unit is None:
        return base
    suffix = _UNIT_SUFFIX.get(unit.lower())
    return None if suffix is None else base + suffix


_PIPE_EXECUTE = ("vec", "mac", "scalar", "mte1", "mte2", "mte3", "fixpipe")
OPS_METRIC_RENAMES = {
    **{f"{p}_exe_ratio": f"{p}_ratio" for p in _PIPE_EXECUTE},
    **{f"{p}_exe_time_us": f"{p}_time_us" for p in _PIPE_EXECUTE},
}
"""``--aic-metrics PipelineExecuteUtilization`` (the pipe set of Atlas 200/500 A2 inference chips, 310B-class; DOMAIN.md
5.2): op_summary writes ``vec_exe_ratio``, ``scalar_exe_time(us)``... for what PipeUtilization calls ``vec_ratio``,
``scalar_time(us)`` -- the share of the total cycles each pipe executes (msprof's own ``memory_bound`` in those files
is ``mte2_exe_ratio / max(mac_exe_ratio, vec_exe_ratio)``, its PipeUtilization formula)."""


def ops_metric_name(header: str) -> str | None:
    """:func:`metric_name` for an ops table, the PipelineExecuteUtilization spellings as the pipe ratios and times."""
    name = metric_name(header)
    return OPS_METRIC_RENAMES.get(name, name) if name else None


# ---------------------------------------------------------------------------------------------------------
# other tables
# ---------------------------------------------------------------------------------------------------------
OP_STATS_ALIASES: dict[str, tuple[str, ...]] = {
    "type": ("OP Type", "Op Type"),
    "core": ("Core Type", "Task Type", "Accelerator Core"),
    "count": ("Count",),
    "total_us": ("Total Time(us)",),
    "min_us": ("Min Time(us)",),
    "avg_us": ("Avg Time(us)",),
    "max_us": ("Max Time(us)",),
    "ratio": ("Ratio(%)",),
    "device_id": ("Device_id",),
    "model_name": ("Model Name",),
}
"""op_statistic (torch_npu <=2025-01, msprof 8.x/9.x with ``Device_id``, msprof ``Model Name`` variant).
``ratio`` is stored as a 0-1 fraction (the file writes a percentage)."""
TIMESTAMP_COLUMNS = frozenset({"start_us", "stop_us", "timestamp_us", "fp_start_us", "bp_end_us",
                               "iteration_end_us", "alloc_us", "release_us"})
"""Canonical columns holding absolute time stamps: parsed exactly into offsets from the rank's origin
(``advisor.ingest.timebase``), never as plain floats."""

OP_STATS_TEXT = frozenset({"type", "core", "model_name"})

API_ALIASES: dict[str, tuple[str, ...]] = {
    "level": ("Level", "Type"),
    "name": ("API Name", "Name"),
    "total_us": ("Time(us)",),
    "count": ("Count",),
    "avg_us": ("Avg(us)",),
    "min_us": ("Min(us)",),
    "max_us": ("Max(us)",),
    "variance": ("Variance",),
    "device_id": ("Device_id",),
    "process_id": ("Process ID",),
    "thread_id": ("Thread ID",),
}
"""api_statistic (torch_npu, CANN 8.x/9.x with ``Device_id``=host) and CANN 5.x ``acl_statistic`` (``Name,Type``)."""
API_TEXT = frozenset({"level", "name", "device_id"})

TX_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("message",),
    "category": ("event_type",),
    "start_us": ("Start_time(us)",),
    "stop_us": ("End_time(us)",),
    "start_ns": ("Start_time(ns)",),
    "stop_ns": ("End_time(ns)",),
    "device_id": ("Device_id",),
    "pid": ("pid",),
    "tid": ("tid",),
    "domain": ("domain",),
}
"""msprof_tx (msproftx ranges and marks): CANN >= 7 ``msprof_tx_<ts>.csv`` (times in us, optional ``Device_id``,
``domain``, ``mark_id``, ``Device Start_time(us)``) and CANN 6.x ``msprof_tx.csv`` (times in ns)."""
TX_TEXT = frozenset({"name", "category", "domain", "device_id", "start_ns", "stop_ns"})

TASK_TIME_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("kernel_name",),
    "core": ("kernel_type",),
    "stream_id": ("stream_id",),
    "task_id": ("task_id",),
    "duration_us": ("task_time(us)",),
    "start_us": ("task_start(us)",),
    "stop_us": ("task_stop(us)",),
    "device_id": ("Device_id",),
}
"""msprof task_time CSV (CANN 8.x/9.0). Rows include non-compute tasks (PROFILING_ENABLE, EVENT_RECORD...)."""
TASK_TIME_TEXT = frozenset({"name", "core"})

STEP_TRACE_TIME_ALIASES: dict[str, tuple[str, ...]] = {
    "step": ("Step",),
    "computing_us": ("Computing",),
    "comm_not_overlapped_us": ("Communication(Not Overlapped)",),
    "overlapped_us": ("Overlapped",),
    "communication_us": ("Communication",),
    "free_us": ("Free",),
    "stage_us": ("Stage",),
    "bubble_us": ("Bubble",),
    "comm_not_overlapped_exclude_receive_us": ("Communication(Not Overlapped and Exclude Receive)",),
    "preparing_us": ("Preparing",),
    "device_id": ("Device_id",),
}
"""torch_npu step_trace_time (2023, 2025 ``+Preparing``, 2.7.1 ``Device_id`` prefix); values are microseconds."""

MSPROF_STEP_TRACE_ALIASES: dict[str, tuple[str, ...]] = {
    "step": ("Iteration ID",),
    "fp_start_us": ("FP Start(us)",),
    "bp_end_us": ("BP End(us)",),
    "iteration_end_us": ("Iteration End(us)",),
    "iteration_us": ("Iteration Time(us)",),
    "fp_bp_us": ("FP to BP Time(us)",),
    "refresh_us": ("Iteration Refresh(us)",),
    "data_aug_bound_us": ("Data Aug Bound(us)",),
    "model_id": ("Model ID",),
    "device_id": ("Device_id",),
}
"""msprof step_trace CSV (graph mode, export config; no data file collected)."""

MEMORY_RECORD_ALIASES: dict[str, tuple[str, ...]] = {
    "component": ("Component",),
    "timestamp_us": ("Timestamp(us)",),
    "allocated_mb": ("Total Allocated(MB)",),
    "reserved_mb": ("Total Reserved(MB)",),
    "active_mb": ("Total Active(MB)",),
    "device": ("Device Type", "Device"),
}
MEMORY_RECORD_TEXT = frozenset({"component", "device"})

OPERATOR_DETAILS_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("Name",),
    "input_shapes": ("Input Shapes",),
    "call_stack": ("Call Stack",),
    "host_self_us": ("Host Self Duration(us)",),
    "host_total_us": ("Host Total Duration(us)",),
    "device_self_us": ("Device Self Duration(us)",),
    "device_total_us": ("Device Total Duration(us)",),
    "device_self_aicore_us": ("Device Self Duration With AICore(us)",),
    "device_total_aicore_us": ("Device Total Duration With AICore(us)",),
}
OPERATOR_DETAILS_TEXT = frozenset({"name", "input_shapes", "call_stack"})

L2_CACHE_ALIASES: dict[str, tuple[str, ...]] = {
    "stream_id": ("Stream Id",),
    "task_id": ("Task Id",),
    "hit_rate": ("Hit Rate",),
    "victim_rate": ("Victim Rate",),
    "name": ("Op Name",),
}
L2_CACHE_TEXT = frozenset({"name"})

STATIC_OP_MEM_ALIASES: dict[str, tuple[str, ...]] = {
    "device_id": ("Device_id",),
    "name": ("Op Name",),
    "model_name": ("Model Name",),
    "graph_id": ("Graph ID",),
    "node_index_start": ("Node Index Start",),
    "node_index_end": ("Node Index End",),
    "size_kb": ("Size(KB)",),
}
STATIC_OP_MEM_TEXT = frozenset({"name", "model_name"})

OPERATOR_MEMORY_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("Name",),
    "size_kb": ("Size(KB)",),
    "alloc_us": ("Allocation Time(us)",),
    "release_us": ("Release Time(us)",),
    "duration_us": ("Duration(us)",),
    "device": ("Device Type",),
}
OPERATOR_MEMORY_TEXT = frozenset({"name", "device"})

NPU_MODULE_MEM_ALIASES: dict[str, tuple[str, ...]] = {
    "component": ("Component",),
    "timestamp_us": ("Timestamp(us)",),
    "reserved_mb": ("Total Reserved(MB)",),
    "device": ("Device",),
}
NPU_MODULE_MEM_TEXT = frozenset({"component", "device"})

SOC_JOB_ALIASES: dict[str, tuple[str, ...]] = {
    "soc_layer_id": ("Layer Id", "Layer ID"),
    "soc_ori_layer_name": ("Ori Layer Name",),
    "name": ("Layer Name",),
    "type": ("Layer Type",),
    "duration_us": ("Time(us)",),
    "soc_time_ratio": ("Time Ratio",),
    "mac_ratio": ("Mac Busy Ratio",),
    "soc_mac_ppen_ratio": ("Mac Ppen Ratio",),
    "vec_ratio": ("Vec Busy Ratio",),
    "soc_vec_ppen_ratio": ("Vec Ppen Ratio",),
    "soc_dstr_ratio": ("Dstr Ratio",),
    "soc_dtrans_ratio": ("Dtrans Ratio",),
    "soc_dld_ratio": ("DLD Ratio",),
    "soc_wld_ratio": ("WLD Ratio",),
    "memory_bound": ("Memory Bound",),
    "soc_ddr_read_bytes": ("DDR Read(byte)",),
    "soc_ddr_write_bytes": ("DDR Write(byte)",),
    "soc_ddr_total_bytes": ("DDR Total(byte)",),
}
"""SS928V100/SS927V100 (SVP ACL) ``op_summary_{dev}.{model}.{id}.{batch}.{pics}.{pic}.{icache}.{freq}.csv``."""
SOC_JOB_TEXT = frozenset({"soc_ori_layer_name", "name", "type"})


MSPROF_OP_BASIC_ALIASES: dict[str, tuple[str, ...]] = {
    "name": ("Op Name",),
    "kernel_mode": ("Op Type", "OpType"),
    "duration_us": ("Task Duration(us)", "Task Duration（us）"),
    "block_dim": ("Block Dim",),
    "mix_block_dim": ("Mix Block Dim",),
    "device_id": ("Device Id", "Device ID"),
    "pid": ("Pid", "PID"),
    "current_freq_mhz": ("Current Freq",),
    "rated_freq_mhz": ("Rated Freq",),
}
"""``msprof op`` ``OpBasicInfo.csv`` (CANN 8.x/9.x, msopprof docs). ``Op Type`` is the kernel mode (``vector``,
``cube``, ``mix``), not an operator type."""
MSPROF_OP_BASIC_TEXT = frozenset({"name", "kernel_mode"})

MSPROF_OP_BLOCK_ALIASES: dict[str, tuple[str, ...]] = {
    "block_id": ("block_id",),
    "sub_block_id": ("sub_block_id",),
}
"""Row keys of the ``msprof op`` per-block metric CSVs (``PipeUtilization.csv``, ``Memory.csv``...); the metric
columns themselves are mapped by :func:`msprof_op_metric_name`."""

_MSPROF_OP_RENAMES = {
    "aic_time_us": "aicore_time_us",
    "aic_cube_time_us": "aic_mac_time_us",
    "aic_cube_ratio": "aic_mac_ratio",
    "aiv_vec_fops": "aiv_vector_fops",
    "aic_vec_fops": "aic_vector_fops",
}
"""msprof op spellings -> the op_summary spellings the model already uses (``aic_cube_ratio`` is the cube pipe's
share, op_summary's ``aic_mac_ratio``)."""


def msprof_op_metric_name(header: str) -> str | None:
    """Canonical name of an ``msprof op`` metric header: lower-cased, ``(estimate)`` kept as a suffix, units as
    in :func:`metric_name`, then the op_summary spelling (``aic_cube_ratio`` -> ``aic_mac_ratio``).
    ``GM_to_UB_datas(KB)`` -> ``gm_to_ub_datas_kb``; ``L1_to_GM_datas(KB)(estimate)`` -> ``l1_to_gm_datas_kb_estimate``."""
    text = clean_header(header)
    if not text or text.lower() in ("block_id", "sub_block_id"):
        return None
    estimate = text.lower().endswith("(estimate)")
    if estimate:
        text = text[: -len("(estimate)")].strip()
    name = metric_name(text.lower())
    if name is None:
        return None
    name = _MSPROF_OP_RENAMES.get(name, name)
    return name + "_estimate" if estimate else name

# ---------------------------------------------------------------------------------------------------------
# header resolution
# ---------------------------------------------------------------------------------------------------------
def clean_header(header: str) -> str:
    """A header cell as written minus BOM, surrounding quotes and whitespace."""
    return header.replace("\ufeff", "").strip().strip('"').strip()


def header_key(header: str) -> str:
    """Matching key: case-insensitive, whitespace-collapsed, no space before a ``(unit)``."""
    text = re.sub(r"\s+", " ", clean_header(header)).lower()
    return text.replace(" (", "(")


@dataclass
class ResolvedHeader:
    """Which raw columns (by position) feed which canonical column."""

    header: list[str]
    columns: dict[str, int] = field(default_factory=dict)
    """canonical name -> position in the raw header (first match wins)."""
    sources: dict[str, str] = field(default_factory=dict)
    """canonical name -> raw header text it came from."""

    def has(self, name: str) -> bool:
        return name in self.columns

    def source(self, name: str) -> str | None:
        return self.sources.get(name)


def resolve_header(
    header: Sequence[str],
    aliases: Aliases,
    *,
    extra: Callable[[str], str | None] | None = None,
) -> ResolvedHeader:
    """Map a raw header row to canonical names using ``aliases`` (then ``extra`` for unlisted headers)."""
    lookup: dict[str, str] = {}
    for canonical, spellings in aliases.items():
        for s in spellings:
            lookup.setdefault(header_key(s), canonical)
    out = ResolvedHeader(header=[clean_header(h) for h in header])
    for pos, raw in enumerate(header):
        canonical = lookup.get(header_key(raw))
        if canonical is None and extra is not None:
            canonical = extra(raw)
        if canonical is None or canonical in out.columns:
            continue
        out.columns[canonical] = pos
        out.sources[canonical] = clean_header(raw)
    return out


def describe_missing(canonical: Iterable[str], aliases: Aliases) -> str:
    """``'Op Name'/'Name'`` for an error message about missing columns."""
    spellings: list[str] = []
    for c in canonical:
        spellings.extend(aliases.get(c, (c,)))
    return "/".join(f"'{s}'" for s in dict.fromkeys(spellings))


# ---------------------------------------------------------------------------------------------------------
# what a header says about the producer
# ---------------------------------------------------------------------------------------------------------
def ops_header_variant(resolved: ResolvedHeader) -> tuple[str, str | None]:
    """(variant label, CANN version guess) of an op_summary / kernel_details header (FORMATS.md section 1/3).

    The guess is only a hint for reports ("8.x (header V3)"); versions recorded by the producer win.
    """
    src = resolved.sources
    kernel_details = src.get("name", "").lower() == "name"
    split = any(c.startswith(("aic_", "aiv_")) for c in resolved.columns)
    has_metrics = split or any(metric_name(h) for h in resolved.header)
    block_num = src.get("block_dim", "").lower() == "block num"
    if kernel_details:
        if block_num:
            return "kernel_details variant 6 (Block Num)", "9.x-era (kernel_details Block Num header)"
        if resolved.has("op_state"):
            if resolved.has("device_id"):
                return "kernel_details variant 5", "8.x (kernel_details variant 5)"
            return "kernel_details variant 4", "8.x (kernel_details variant 4)"
        if not has_metrics and not resolved.has("model_id"):
            return "kernel_details variant 1 (Level0)", None
        if resolved.has("hf32_eligible"):
            return "kernel_details variant 3", "7.x (kernel_details variant 3)"
        return "kernel_details variant 2", "7.x (kernel_details variant 2)"
    if not resolved.has("name") and resolved.has("input_shapes"):
        return "derived per-op subset (V1')", None
    if block_num:
        if "aic_mte3_ratio" in resolved.columns:
            return "op_summary V5", "≥9.0 (header V5)"
        return "op_summary V4", "≥9.0 (header V4)"
    if resolved.has("op_state"):
        return "op_summary V3", "8.x (header V3)"
    if split:
        return "op_summary V2", "7.x (header V2)"
    if not has_metrics:
        return "op_summary without PMU metrics", None
    return "op_summary V1", "≤6.x (header V1)"


def split_core_metrics(resolved: ResolvedHeader) -> bool:
    """True when metrics are split into ``aic_*`` (cube core) / ``aiv_*`` (vector core): Atlas A2/A3-class chips."""
    return any(c.startswith(("aic_", "aiv_")) for c in resolved.columns)


_CHIP_IN_NAME = re.compile(r"(?i)(Ascend\d{3}(?:[A-Z]\d?|_\d{4})?)")


def chip_from_name(name: str) -> str | None:
    """``MaxPool_Ascend310_test.csv`` -> ``Ascend310`` (file or directory names that embed the SoC)."""
    m = _CHIP_IN_NAME.search(name)
    if not m:
        return None
    text = m.group(1)
    return "Ascend" + text[6:].upper()
