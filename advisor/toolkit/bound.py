"""The one classification of every compute op, shared by every knowledge base.

For each op of a rank (one row per name, type and core): calls, total and mean time, FLOPs and bytes per call
(the PMU's ``cube_fops``/``vector_fops`` and main-memory bandwidth where the profile has them, else the tensor
shapes and dtypes through the shape math of :mod:`advisor.toolkit.costmodel`), arithmetic intensity, the chip's ridge for
the op's unit and dtype, roof and attained throughput, and:

* ``bound`` -- ``compute`` or ``memory`` from the intensity against the ridge (the primary criterion);
  ``latency`` for short ops far below their roof; ``scalar`` for ops whose scalar pipe out-works every unit at
  ``scalar_bound_ratio`` or more (control code sets their time); ``none`` (no clear bound) for ops far below their
  roof whose pipes are all unsaturated -- unless the chip's own Memory Bound (msprof's ``mte2 / max(mac, vec)``,
  the SoC guide's formula on SS928/SS927) is above ``memory_bound_ratio`` and the intensity does not put them above
  the ridge: then they are ``memory`` bound. :func:`memory_bound_share` is the one memory-bound answer the model
  summary and the memory-bound and roofline knowledge bases all give. A MIX kernel's pipe ratios are its busier side's (cube or vector core,
  :mod:`advisor.ingest.normalize`), so it is never judged on the pipes of the side that idles. An op whose work is unknown (FlashAttention, sorting, shapes not understood) is
  classified from its pipe ratios alone (``source`` ``pipes``); one with neither is not classified (NaN).
* the pipe ratios as supporting evidence: the busiest pipe, the saturated ones, and whether the busiest pipe
  agrees with the bound (a compute-bound matmul whose MTE2 pipe is saturated re-reads its operands).
* ``share_of_roof`` -- how close the op is to the practical roof: the larger of its throughput against
  ``target_fraction_of_roof`` of the roof at its intensity and the ratios of the pipes that measure it against
  their saturation (the compute and scalar pipes always: the op's arithmetic and control code cannot be tiled
  away; the memory pipes for memory-bound ops and ops of unknown work). An op at or above ``near_roof`` is at its roof: nothing recoverable,
  no tuning advice. Else ``recoverable_us`` = total x (1 - share), never below ``min_kernel_us`` per call.

Thresholds live in ``rules/bound.yaml``; peaks and bandwidth in ``ctx.platform``. :func:`op_bounds` computes the
table once per rank and platform (cached on the profile) for every knowledge base; :func:`classify` is the pure
function behind it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from advisor.common.live_cache import LiveCache
from advisor.model import canonical_dtype, canonical_format, metric_values, parse_list, parse_shapes
from advisor.toolkit.common import combined_codes
from advisor.toolkit.cores import CoreCounts, core_counts, task_occupancy
from advisor.toolkit.costmodel import op_work, values_at
from advisor.toolkit.time import isin_mask

if TYPE_CHECKING:

    from advisor.kb import AnalysisContext
    from advisor.model import Profile

RULES_NAME = "bound"
"""Rules file of the classification (``rules/bound.yaml``), passed to knowledge bases in ``ctx.toolkit_rules``."""

BOUNDS = ("compute", "memory", "latency", "scalar", "none")
PIPES = ("mac", "vec", "scalar", "mte1", "mte2", "mte3", "fixpipe")
COLUMNS = ["name", "type", "core", "unit", "dtype", "calls", "total_us", "duration_us", "flops", "bytes",
           "intensity", "ridge", "peak_tflops", "roof_tflops", "attained_tflops", "pct_of_roof", "roof_side",
           "pipe", "pipe_ratio", "pipe_agrees", "saturated", "cores_used", "share_of_roof", "roof_gap", "bound",
           "at_roof", "recoverable_us", "source", *(f"{p}_ratio" for p in PIPES), "memory_bound_ratio"]
"""One row per op. ``flops``/``bytes``/``duration_us`` are per call (means); ``total_us`` and ``recoverable_us``
cover every call. ``pct_of_roof`` is the throughput against the roof itself (0-1, capped: a point above its roof
is at it); ``share_of_roof`` the share of the practical roof (0-1). ``roof_side`` is the bound by intensity alone;
``saturated`` lists the saturated pipes (``mte2 0.85, mac 0.81``); ``cores_used`` is the share of the core slots
the op's blocks fill (NaN when the block dim or the core count is unknown); ``roof_gap`` the share of the op's
time the chip's roof itself still leaves (1 - the larger of its throughput against the roof and its measuring
pipes' chip-wide ratios; no practical target, no near-roof band): the bound of a cause that changes how the op
runs, such as its idle cores; ``source`` says where the work came from (``metrics``, ``shapes``, ``pipes``);
``memory_bound_ratio`` the chip's own Memory Bound (msprof's ``mte2 / max(mac, vec)``, the SoC guide's formula for
SS928/SS927 JOB summaries), time-weighted over the op's calls."""

_SHAPE_KEYS = ["type", "core", "input_shapes", "input_dtypes", "input_formats", "output_shapes", "output_dtypes",
               "output_formats"]
_METRIC_SUFFIXES = ("_fops", "main_mem_read_bw", "main_mem_write_bw")
CHUNK_ROWS = 1 << 19
"""Tasks classified at a time: bounds the per-task work columns (~200 B a task) whatever the profile's size."""


# ---------------------------------------------------------------------------------------------------------
# the shared accessor
# ---------------------------------------------------------------------------------------------------------
_CLASSIFICATIONS = LiveCache()
"""Classifications per live profile and per platform + rules."""


def op_bounds(ctx: AnalysisContext) -> pd.DataFrame:
    """The classification of ``ctx.profile``'s ops on ``ctx.platform`` (columns :data:`COLUMNS`), computed once
    per rank: every knowledge base that asks gets the same table (a copy)."""
    return for_profile(ctx.profile, ctx.platform, rules_of(ctx))


def rules_of(ctx: AnalysisContext) -> Mapping[str, Any]:
    """The effective ``rules/bound.yaml`` the engine passed (user overrides applied), else the built-in file."""
    given = getattr(ctx, "toolkit_rules", None) or {}
    return given.get(RULES_NAME) or builtin_rules()


@lru_cache(maxsize=1)
def builtin_rules() -> Mapping[str, Any]:
    """The built-in ``rules/bound.yaml`` (validated), for contexts built without the engine's toolkit rules."""
    from advisor.config.loader import builtin_rules_dir, load_rules_file

    return load_rules_file(builtin_rules_dir() / f"{RULES_NAME}.yaml")


def for_profile(profile: Profile, platform: Mapping[str, Any], rules: Mapping[str, Any]) -> pd.DataFrame:
    """:func:`classify` of ``profile.ops``, cached on the profile for this platform and these rules."""
    key = json.dumps([platform, rules], sort_keys=True, default=str)
    return _CLASSIFICATIONS.get(profile, key, lambda: classify(
        profile.ops, platform, rules, core_counts(profile, platform, rules["cube_cores"], rules["vector_cores"]),
    )).copy()


# ---------------------------------------------------------------------------------------------------------
# the pure part
# ---------------------------------------------------------------------------------------------------------
def classify(ops: pd.DataFrame, platform: Mapping[str, Any], rules: Mapping[str, Any],
             cores: CoreCounts | None = None) -> pd.DataFrame:
    """One row per compute op (name, type, core) of ``ops``, sorted by total time; see the module doc.

    ``cores``: the chip's core counts (:func:`advisor.toolkit.cores.core_counts`); with them, an op whose blocks
    leave cores idle has its pipe ratios (measured on the cores that ran) scaled to the whole chip."""
    if not len(ops):
        return pd.DataFrame(columns=COLUMNS)
    dur_all = ops["duration_us"].to_numpy(dtype="float64")
    mask = isin_mask(ops["core"], rules["compute_cores"]) & (np.nan_to_num(dur_all) > 0)
    if not mask.any():
        return pd.DataFrame(columns=COLUMNS)
    wanted = {"name", "duration_us", "aicore_time_us", "block_dim", "mix_block_dim", "mac_ratio", "vec_ratio",
              *_SHAPE_KEYS}
    # only the columns used here, a chunk of rows at a time, the pipe ratios one column at a time: the per-task
    # work columns of a whole 2M-task table would take ~1 GB, the chunks' per-op sums a few MB
    positions = [i for i, c in enumerate(ops.columns) if c in wanted or c.endswith(_METRIC_SUFFIXES)]
    rows_at = np.flatnonzero(mask).astype(np.int32 if len(ops) < 2**31 else np.int64)
    work = "mean" if len(rows_at) <= CHUNK_ROWS else "sum"
    partials = [_chunk_sums(ops, rows_at[lo:lo + CHUNK_ROWS], positions, platform, rules, cores, work)
                for lo in range(0, len(rows_at), CHUNK_ROWS)]
    agg = partials[0] if len(partials) == 1 else _combine(partials)
    return _judge(_means(agg), platform, rules)


def _chunk_sums(ops: pd.DataFrame, at: np.ndarray, positions: list[int], platform: Mapping[str, Any],
                rules: Mapping[str, Any], cores: CoreCounts | None, work: str) -> pd.DataFrame:
    """:func:`_aggregate` of the tasks at row positions ``at`` of ``ops`` (the columns at ``positions``), with the
    duration-weighted sums of each pipe ratio and of the core occupancy, summed one column at a time."""
    df = ops.iloc[at, positions]
    rows = _row_work(df, platform, rules)
    occupancy = task_occupancy(df, cores, rules["cube_cores"], rules["vector_cores"]) if cores is not None \
        else np.full(len(df), np.nan)
    del df
    # group number of each task, in the order of agg's rows; a sum per group visits its tasks in row order, as a
    # groupby of the whole table would
    ids, first = _op_ids(rows)
    agg = _aggregate(rows, ids, first, work)
    dur = rows["dur"].to_numpy()
    del rows
    weighted: dict[str, np.ndarray] = {}
    for pipe in PIPES:
        col = f"{pipe}_ratio"
        ratio = metric_values(ops[col], at) if col in ops.columns else np.full(len(at), np.nan)
        _add_weighted(weighted, pipe, ratio, dur)
    _add_weighted(weighted, "occ", occupancy, dur)
    mb = metric_values(ops["memory_bound"], at) if "memory_bound" in ops.columns else np.full(len(at), np.nan)
    _add_weighted(weighted, "mb", mb, dur)
    # one groupby for every column (the same per-column sums as one groupby each, at a fraction of the fixed cost)
    sums = pd.DataFrame(weighted).groupby(ids).sum()
    return pd.concat([agg, sums[_SUMS].reset_index(drop=True)], axis=1)


def _add_weighted(out: dict[str, np.ndarray], what: str, value: np.ndarray, dur: np.ndarray) -> None:
    """``w_<what>`` (value x duration) and ``d_<what>`` (the duration) per task, 0 where ``value`` is not finite:
    summed per group, the duration-weighted mean's parts."""
    ok = np.isfinite(value)
    out[f"w_{what}"] = np.where(ok, value * dur, 0.0)
    out[f"d_{what}"] = np.where(ok, dur, 0.0)


def _row_work(df: pd.DataFrame, platform: Mapping[str, Any], rules: Mapping[str, Any]) -> pd.DataFrame:
    """Per task: duration, FLOPs, bytes and time at the roof where the work is known, and the unit's peak."""
    dur = df["duration_us"].to_numpy(dtype="float64")
    flops, nbytes, cube, peak, dtype, has_m_flops, has_m_bytes = _task_work(df, platform, rules)
    bw_per_us = _bandwidth_per_us(platform)  # bytes per microsecond
    with np.errstate(divide="ignore", invalid="ignore"):
        t_roof = np.fmax(flops / (peak * 1e6), nbytes / bw_per_us)
    # placed on the roofline: FLOPs (0 for data movement) and bytes known; shape-based work far above the roof
    # means the shapes were not understood; no roofline without the chip's peaks (unknown chip: pipes alone)
    placed = np.isfinite(flops) & np.isfinite(nbytes) & (nbytes > 0) & _has_roofs(platform)
    placed &= has_m_flops | (t_roof <= float(rules["max_pct_of_roof"]) * dur)
    metrics = placed & (has_m_flops | has_m_bytes)
    del has_m_flops, has_m_bytes
    return pd.DataFrame({
        "name": _categorical(df["name"]), "type": _categorical(df["type"]), "core": _categorical(df["core"]),
        "dur": dur, "placed_dur": np.where(placed, dur, 0.0),
        "flops": np.where(placed, flops, np.nan), "bytes": np.where(placed, nbytes, np.nan),
        "t_roof": np.where(placed, t_roof, 0.0), "peak": peak, "cube": cube, "metrics": metrics, "dtype": dtype,
    })


def _task_work(df: pd.DataFrame, platform: Mapping[str, Any], rules: Mapping[str, Any]) -> tuple[np.ndarray, ...]:
    """Per task: FLOPs, bytes, whether it runs on the cube, its unit's peak, its dtype (categorical) and whether
    the PMU measured its FLOPs / its bytes. The PMU's values where it measured them, else the shapes', worked out
    once per distinct (type, shapes, dtypes, formats); each per-task array is freed once merged."""
    codes = combined_codes(df, _SHAPE_KEYS)
    first = np.unique(codes, return_index=True)[1]
    # the keys of each combination's first task, a column at a time (a row of the frame is a Series of every column)
    firsts = {key: values_at(df[key], first) for key in _SHAPE_KEYS}
    work = [_shape_work({key: values[k] for key, values in firsts.items()}, rules) for k in range(len(first))]
    m_flops = _metric_flops(df)
    has_m_flops = np.nan_to_num(m_flops) > 0
    flops = np.where(has_m_flops, m_flops, np.array([w[0] for w in work], dtype="float64")[codes])
    del m_flops
    m_bytes = _metric_bytes(df)
    has_m_bytes = np.nan_to_num(m_bytes) > 0
    nbytes = np.where(has_m_bytes, m_bytes, np.array([w[1] for w in work], dtype="float64")[codes])
    del m_bytes
    cube = np.array([w[2] for w in work], dtype=bool)[codes] | (_metric_cube_flops(df) > 0)
    # a kernel the shapes do not describe (custom, tilelang) runs on the cube when its mac pipe out-works its vector
    # pipe: its roof is the cube's (a MIX kernel's ratios are its busier side's, advisor.ingest.normalize)
    mac = metric_values(df["mac_ratio"]) if "mac_ratio" in df.columns else np.full(len(df), np.nan)
    vec = metric_values(df["vec_ratio"]) if "vec_ratio" in df.columns else np.full(len(df), np.nan)
    unknown = ~np.isfinite(np.array([w[0] for w in work], dtype="float64")[codes])
    cube |= unknown & (np.nan_to_num(mac) > 0) & (np.nan_to_num(mac) > np.nan_to_num(vec))
    dtypes = np.array([w[3] for w in work], dtype=object)
    peaks = np.array([[_peak(False, str(d), platform, rules) for d in dtypes],
                      [_peak(True, str(d), platform, rules) for d in dtypes]])
    peak = peaks[cube.astype(np.intp), codes]  # the cube's peak for cube tasks, else the vector unit's
    # the categorical pd.Categorical(dtypes[codes]) would make (sorted categories), without an object per task
    categories, dtype_ids = np.unique(dtypes, return_inverse=True)
    dtype = pd.Categorical.from_codes(dtype_ids[codes], categories=categories)
    return flops, nbytes, cube, peak, dtype, has_m_flops, has_m_bytes


_GROUP = ["name", "type", "core"]
_SUMS = [f"w_{p}" for p in (*PIPES, "occ", "mb")] + [f"d_{p}" for p in (*PIPES, "occ", "mb")]


def _op_ids(rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per task of :func:`_row_work`, the number of its op (name, type, core) in order of first appearance -- the
    groups of ``groupby(_GROUP, sort=False, observed=True)`` -- and each op's first task: from the categorical codes,
    without a grouping of three keys (its fixed cost is most of a small rank's classification)."""
    codes = [rows[c].array.codes.astype(np.int64) for c in _GROUP]
    ids = codes[0]
    for col, c in zip(_GROUP[1:], codes[1:], strict=True):  # (each step's numbers stay below the task count)
        ids = pd.factorize(ids * len(rows[col].array.categories) + c, sort=False)[0]
    return ids, np.unique(ids, return_index=True)[1]


def _aggregate(rows: pd.DataFrame, ids: np.ndarray, first: np.ndarray, work: str = "mean") -> pd.DataFrame:
    """Per op (name, type, core) of a chunk of tasks (``rows``: :func:`_row_work`; ``ids``, ``first``:
    :func:`_op_ids`): calls, time and work of the placed calls. ``work``: ``mean`` when the chunk holds every task,
    ``sum`` for one chunk of many (:func:`_combine` takes the means over all of them)."""
    # one reduction per kind over its columns, grouped by the op numbers: what a named aggregation by the three
    # keys computes (the same sums, each visiting its tasks in row order), at a fraction of its fixed cost
    g = rows.groupby(ids)
    sums = g[["dur", "placed_dur", "t_roof", "metrics"]].sum()
    works = getattr(g[["flops", "bytes"]], work)()
    firsts = g[["peak", "dtype"]].first()
    keys = {c: rows[c].array.take(first) for c in _GROUP}
    agg = pd.DataFrame({"calls": g.size(), "total_us": sums["dur"], "placed_us": sums["placed_dur"],
                        "flops": works["flops"], "bytes": works["bytes"], "t_roof": sums["t_roof"],
                        "peak_tflops": firsts["peak"], "cube": g["cube"].max(), "metrics": sums["metrics"],
                        "placed_calls": g["flops"].count(), "dtype": firsts["dtype"]}).reset_index(drop=True)
    return pd.concat([pd.DataFrame(keys), agg], axis=1)


def _combine(partials: list[pd.DataFrame]) -> pd.DataFrame:
    """The per-op rows of all chunks (:func:`_aggregate` with sums) summed, in order of first appearance."""
    g = pd.concat(partials, ignore_index=True).groupby(_GROUP, sort=False)
    agg = g.agg(calls=("calls", "sum"), total_us=("total_us", "sum"), placed_us=("placed_us", "sum"),
                flops=("flops", "sum"), bytes=("bytes", "sum"), t_roof=("t_roof", "sum"),
                peak_tflops=("peak_tflops", "first"), cube=("cube", "max"), metrics=("metrics", "sum"),
                placed_calls=("placed_calls", "sum"), dtype=("dtype", "first"))
    agg = agg.join(g[_SUMS].sum()).reset_index()
    with np.errstate(divide="ignore", invalid="ignore"):
        placed = agg["placed_calls"].where(agg["placed_calls"] > 0)
        agg["flops"], agg["bytes"] = agg["flops"] / placed, agg["bytes"] / placed
    return agg


def _means(agg: pd.DataFrame) -> pd.DataFrame:
    """Text keys, and mean duration, pipe ratios and core occupancy per op from their sums."""
    for col in ("name", "type", "core", "dtype"):
        agg[col] = agg[col].astype(object).where(agg[col].notna(), "")
    means = {"duration_us": agg["total_us"].to_numpy() / agg["calls"].to_numpy()}
    named = {**{p: f"{p}_ratio" for p in PIPES}, "occ": "cores_used", "mb": "memory_bound_ratio"}
    with np.errstate(divide="ignore", invalid="ignore"):
        for what, col in named.items():
            w, d = agg[f"w_{what}"].to_numpy(dtype="float64"), agg[f"d_{what}"].to_numpy(dtype="float64")
            means[col] = w / np.where(d > 0, d, np.nan)
    kept = agg.drop(columns=[c for c in agg.columns if c.startswith(("w_", "d_")) or c in means])
    return pd.concat([kept, pd.DataFrame(means, index=kept.index)], axis=1)


def _bandwidth_per_us(platform: Mapping[str, Any]) -> float:
    """The chip's memory bandwidth in bytes per microsecond; NaN when unknown (a chip rules/platforms.yaml does not
    know, ``advisor.platform.file_platform``)."""
    bw = platform.get("hbm_gbps")
    return float(bw) * 1e3 if bw is not None else math.nan


def _has_roofs(platform: Mapping[str, Any]) -> bool:
    """The chip's bandwidth and fp16 peak are known: ops can be placed on its roofline."""
    return platform.get("hbm_gbps") is not None and platform.get("fp16_tflops") is not None


def _judge(table: pd.DataFrame, platform: Mapping[str, Any], rules: Mapping[str, Any]) -> pd.DataFrame:
    """Bound class, pipe evidence, share of the practical roof and recoverable time of each op."""
    # the columns read and written as a dict, the frame made once at the end: a frame's column lookups and
    # insertions cost tens of microseconds each, the dict's nothing
    agg: dict[str, Any] = {c: table[c] for c in table.columns}
    bw_per_us = _bandwidth_per_us(platform)
    placed = (agg["placed_calls"] > 0).to_numpy()
    with np.errstate(divide="ignore", invalid="ignore"):
        intensity = np.where(placed & (agg["bytes"] > 0), agg["flops"] / agg["bytes"], np.nan)
        ridge = agg["peak_tflops"].to_numpy(dtype="float64") * 1e6 / bw_per_us
        pct_raw = np.where(placed, agg["t_roof"] / agg["placed_us"], np.nan)
        agg["attained_tflops"] = np.where(placed, agg["flops"] / (agg["placed_us"] / agg["placed_calls"]) / 1e6,
                                          np.nan)
    agg["intensity"], agg["ridge"] = intensity, ridge
    agg["roof_tflops"] = np.where(placed, np.fmin(agg["peak_tflops"], intensity * bw_per_us / 1e6), np.nan)
    agg["pct_of_roof"] = np.minimum(pct_raw, 1.0)
    roof_side = np.where(placed, np.where(intensity >= ridge, "compute", "memory"), None).astype(object)
    agg["roof_side"] = roof_side
    agg["unit"] = np.where(agg["cube"].astype(bool), "cube", "vector")

    pipes = _pipe_evidence(agg, rules)
    roof_share = pct_raw / float(rules["target_fraction_of_roof"])
    pipe_share = np.where(placed, np.where(roof_side == "memory", pipes["measure_memory"], pipes["measure_compute"]),
                          pipes["measure_unknown"])
    share = np.clip(np.fmax(roof_share, pipe_share), 0.0, 1.0)
    known = np.isfinite(share)
    pipe_busy = np.where(placed, np.where(roof_side == "memory", pipes["busy_memory"], pipes["busy_compute"]),
                         pipes["busy_unknown"])
    agg["roof_gap"] = 1.0 - np.clip(np.fmax(pct_raw, pipe_busy), 0.0, 1.0)
    at_roof = known & (share >= float(rules["near_roof"]))

    # no clear bound: far below the roof with every pipe unsaturated; a saturated pipe or an op at its roof names
    # the bound (by intensity where the work is known, else by that pipe)
    clear = at_roof | pipes["any_sat"]
    bound = np.where(placed, roof_side, np.where(pipes["has"], np.where(clear, pipes["cls"], "none"),
                                                 None)).astype(object)
    bound[placed & pipes["has"] & ~clear] = "none"
    # an op with no clear bound whose data movement out-works its compute by the chip's own Memory Bound (above
    # memory_bound_ratio) is memory bound -- unless its intensity puts it above the ridge (then the pipes say it
    # re-reads its operands: the compute case)
    mb = agg["memory_bound_ratio"].to_numpy(dtype="float64")
    bound[(bound == "none") & (roof_side != "compute") & (np.nan_to_num(mb) > float(rules["memory_bound_ratio"]))] \
        = "memory"
    # scalar bound: the scalar pipe out-works every unit at scalar_bound_ratio or more -- control code (tiling,
    # addressing, loops over elements) sets the time, whatever the unit's roof (a MIX kernel: its busier side's)
    bound[pipes["scalar"]] = "scalar"
    # latency bound: short calls, or work so small that a kernel at the practical roof would still take less than
    # the shortest kernel -- either way fixed per-kernel costs, not the units, set the time
    mean_us = agg["duration_us"].to_numpy(dtype="float64")
    with np.errstate(divide="ignore", invalid="ignore"):
        roof_us = np.where(placed, agg["t_roof"] / agg["placed_calls"], np.nan) / float(rules["target_fraction_of_roof"])
    overhead = (mean_us < float(rules["latency_max_us"])) | (roof_us < float(rules["min_kernel_us"]))
    bound[known & overhead & (share < float(rules["latency_max_share"]))] = "latency"
    bound[~known] = None

    total = agg["total_us"].to_numpy(dtype="float64")
    floor = np.maximum(0.0, total - agg["calls"].to_numpy(dtype="float64") * float(rules["min_kernel_us"]))
    recoverable = np.where(known & ~at_roof, np.fmin(total * (1.0 - np.nan_to_num(share)), floor), 0.0)

    agg["pipe"], agg["pipe_ratio"], agg["saturated"] = pipes["busiest"], pipes["busiest_ratio"], pipes["saturated"]
    agreeing = np.isin(bound, ["compute", "memory"]) & pipes["has"] & (pipes["busiest"] != "scalar")
    agg["pipe_agrees"] = np.where(agreeing, pipes["cls"] == bound, None)
    agg["share_of_roof"] = np.where(known, share, np.nan)
    agg["bound"] = pd.array([b if b is not None else np.nan for b in bound], dtype=object)
    agg["at_roof"] = at_roof
    agg["recoverable_us"] = recoverable
    agg["source"] = np.where(placed, np.where(agg["metrics"] * 2 >= agg["placed_calls"], "metrics", "shapes"),
                             np.where(pipes["has"], "pipes", ""))
    out = pd.DataFrame({c: agg[c] for c in COLUMNS}, index=table.index)
    return out.sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)


def _pipe_evidence(agg: Mapping[str, Any], rules: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Per op: the pipes' shares of their saturation, the busiest non-scalar pipe and its class, the saturated
    pipes, and the share of the practical roof the pipes measure: the compute and scalar pipes always (the op's
    arithmetic and control code are not tiled away), the memory pipes too for memory-bound ops (their traffic is
    about the minimum), every pipe for ops whose work is unknown."""
    n = len(agg["calls"])
    sat = rules["pipe_saturation"]
    compute, memory, internal = list(rules["compute_pipes"]), list(rules["memory_pipes"]), \
        list(rules["internal_pipes"])
    roofs = [p for p in PIPES if p in {*compute, *memory, *internal}]
    ratio = {p: agg[f"{p}_ratio"].to_numpy(dtype="float64") for p in PIPES}
    # a running kernel keeps some pipe busy (its scalar pipe at least): ratios that are all 0 were not collected
    # (sanitized exports)
    measured = np.zeros(n, dtype=bool)
    for p in (*roofs, "scalar"):
        measured |= np.nan_to_num(ratio[p]) > 0
    ratio = {p: np.where(measured, v, np.nan) for p, v in ratio.items()}
    frac = {p: ratio[p] / float(sat[p]) for p in PIPES}
    # the ratios are measured on the cores that ran: cores its blocks leave idle scale them down to the whole chip
    # (whether the chip's bandwidth is saturated is the FLOP/byte throughput's to say)
    occupancy = np.nan_to_num(agg["cores_used"].to_numpy(dtype="float64"), nan=1.0)
    chip = {p: frac[p] * occupancy for p in PIPES}
    busy = {p: ratio[p] * occupancy for p in PIPES}

    def best(names: Sequence[str], of: Mapping[str, np.ndarray] = chip) -> np.ndarray:
        stack = [of[p] for p in names]
        if not stack:
            return np.full(n, np.nan)
        with np.errstate(invalid="ignore"):
            return np.fmax.reduce(np.vstack(stack), axis=0) if n else np.zeros(0)

    table_ = np.vstack([frac[p] for p in roofs]) if roofs else np.full((1, n), np.nan)
    has = ~np.isnan(table_).all(axis=0) if n else np.zeros(0, dtype=bool)
    top = np.nan_to_num(table_, nan=-1.0).argmax(axis=0) if n else np.zeros(0, dtype=int)
    unit_pipe = np.where(has, np.array(roofs, dtype=object)[top], "")
    cls = np.where(np.isin(unit_pipe, compute), "compute", "memory")  # the busiest unit's (scalar is no unit)
    # the busiest pipe as the evidence names it: the scalar pipe where it out-works every unit (control code)
    scalar_top = has & (np.nan_to_num(frac["scalar"], nan=-1.0) > np.nan_to_num(table_, nan=-1.0).max(axis=0)) \
        if n else np.zeros(0, dtype=bool)
    busiest = np.where(scalar_top, "scalar", unit_pipe)
    busiest_ratio = np.array([ratio[p][i] if p else np.nan for i, p in enumerate(busiest)], dtype="float64")
    scalar_bound = scalar_top & (np.nan_to_num(ratio["scalar"]) >= float(rules["scalar_bound_ratio"]))
    saturated = [", ".join(f"{p} {ratio[p][i]:.2f}" for p in PIPES if frac[p][i] >= 1.0) for i in range(n)]
    any_sat = np.nan_to_num(best(roofs, frac), nan=0.0) >= 1.0
    return {"has": has, "busiest": busiest, "busiest_ratio": busiest_ratio, "cls": cls, "scalar": scalar_bound,
            "saturated": np.array(saturated, dtype=object), "any_sat": any_sat,
            "measure_compute": best([*compute, "scalar"]), "measure_memory": best([*compute, *memory, "scalar"]),
            "measure_unknown": best([*roofs, "scalar"]), "busy_compute": best([*compute, "scalar"], busy),
            "busy_memory": best([*compute, *memory, "scalar"], busy), "busy_unknown": best([*roofs, "scalar"], busy)}


# ---------------------------------------------------------------------------------------------------------
# the one answer to "how much of the compute time is memory bound"
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MemoryBoundShare:
    """The memory-bound part of a classification (:func:`memory_bound_share`): what the model summary, the
    memory-bound and the roofline knowledge bases all report, so they agree on every profile."""

    ops: pd.DataFrame
    """The table's rows (name, type, core) whose bound is ``memory``."""
    time_us: float
    """Their time (every call)."""
    compute_us: float
    """The time of every compute op of the table (the share's denominator)."""
    tasks: int
    compute_tasks: int

    @property
    def share(self) -> float:
        return self.time_us / self.compute_us if self.compute_us > 0 else 0.0


def memory_bound_share(table: pd.DataFrame) -> MemoryBoundShare | None:
    """The ops of ``table`` (:func:`op_bounds` / :func:`for_profile`) whose bound is ``memory`` and their share of
    the compute time; None for a table without compute ops or with none classified (neither work nor pipes)."""
    bound = table["bound"].to_numpy(dtype=object)
    if not len(table) or not pd.notna(bound).any():
        return None
    mem = table[bound == "memory"]
    return MemoryBoundShare(ops=mem, time_us=float(mem["total_us"].sum()),
                            compute_us=float(table["total_us"].sum()), tasks=int(mem["calls"].sum()),
                            compute_tasks=int(table["calls"].sum()))


# ---------------------------------------------------------------------------------------------------------
# FLOPs and bytes
# ---------------------------------------------------------------------------------------------------------
def _metric_flops(df: pd.DataFrame) -> np.ndarray:
    """cube + vector FLOPs measured by the PMU (both core sides on split-core chips); NaN when absent."""
    split = [c for c in ("aic_cube_fops", "aiv_cube_fops", "aic_vector_fops", "aiv_vector_fops") if c in df.columns]
    cols = split if split else [c for c in ("cube_fops", "vector_fops") if c in df.columns]
    if not cols:
        return np.full(len(df), np.nan)
    arr = np.column_stack([metric_values(df[c]) for c in cols])
    out = np.nansum(arr, axis=1)
    out[np.isnan(arr).all(axis=1)] = np.nan
    return out


def _metric_cube_flops(df: pd.DataFrame) -> np.ndarray:
    """Cube FLOPs measured by the PMU (0 where absent): a non-zero value says the op ran on the cube."""
    out = np.zeros(len(df))
    for c in ("aic_cube_fops", "aiv_cube_fops", "cube_fops"):
        if c in df.columns:
            out = np.fmax(out, np.nan_to_num(metric_values(df[c])))
    return out


def _metric_bytes(df: pd.DataFrame) -> np.ndarray:
    """Bytes moved to/from main memory: (read + write bandwidth, GB/s) x time (us) x 1e3."""
    if "main_mem_read_bw" not in df.columns or "main_mem_write_bw" not in df.columns:
        return np.full(len(df), np.nan)
    bw = metric_values(df["main_mem_read_bw"]) + metric_values(df["main_mem_write_bw"])
    t = metric_values(df["aicore_time_us"]) if "aicore_time_us" in df.columns else \
        np.full(len(df), np.nan)
    t = np.where(np.nan_to_num(t) > 0, t, df["duration_us"].to_numpy(dtype="float64"))
    return bw * t * 1e3


def _shape_work(row: Mapping[str, Any], rules: Mapping[str, Any]) -> tuple[float, float, bool, str]:
    """(FLOPs, bytes, runs on the cube, the dtype its peak is read for) of one op from its tensor descriptions
    (:func:`advisor.toolkit.costmodel.op_work`); NaN when unknown. Op types the rules do not know get FLOPs only on the
    vector cores (elsewhere their work is unknown: a custom or fused kernel)."""
    op_type = _text(row["type"])
    ins, outs = list(parse_shapes(row["input_shapes"])), list(parse_shapes(row["output_shapes"]))
    in_dt, out_dt = list(parse_list(row["input_dtypes"])), list(parse_list(row["output_dtypes"]))
    in_fmt = [canonical_format(f) for f in parse_list(row["input_formats"])]
    out_fmt = [canonical_format(f) for f in parse_list(row["output_formats"])]
    is_cube = op_type in set(rules["cube_types"])
    dtype = canonical_dtype((in_dt or out_dt or [""])[0]) if is_cube else canonical_dtype((out_dt or in_dt or [""])[0])
    if not ins and not outs:
        return math.nan, math.nan, is_cube, dtype
    flops, nbytes, unit = op_work(op_type, ins, in_dt, in_fmt, outs, out_dt, out_fmt, rules)
    if unit == "vector" and op_type not in set(rules["vector_types"]):
        on_vector = _text(row["core"]) in set(rules["vector_cores"])
        if is_cube or not on_vector or op_type in set(rules["no_estimate_types"]):
            flops = math.nan
    return flops, (nbytes if nbytes > 0 else math.nan), is_cube or unit == "cube", dtype


def _peak(cube: bool, dtype: str, platform: Mapping[str, Any], rules: Mapping[str, Any]) -> float:
    """Peak TFLOPS of the cube or vector unit for a dtype (rules cube_peak / vector_peak x platform value)."""
    table_ = rules["cube_peak"] if cube else rules["vector_peak"]
    entry = table_.get(dtype) or table_["*"]
    base = platform.get(entry["peak"]) or platform.get("fp16_tflops") or 1.0
    return float(base) * float(entry["scale"])


def _categorical(col: pd.Series) -> pd.Categorical:
    """The column as a categorical whose missing values are "" (a kernel msprof op records without an op type is
    still an op: a groupby would drop a missing key)."""
    cat = col.array if isinstance(col.dtype, pd.CategoricalDtype) else pd.Categorical(col.astype("string"))
    if not (cat.codes < 0).any():
        return cat
    if "" not in cat.categories:
        cat = cat.add_categories([""])
    return cat.fillna("")


def _text(value: object) -> str:
    return "" if value is None or value is pd.NA or (isinstance(value, float) and math.isnan(value)) else str(value)


__all__ = ["BOUNDS", "COLUMNS", "PIPES", "RULES_NAME", "MemoryBoundShare", "builtin_rules", "classify", "for_profile",
           "memory_bound_share", "op_bounds", "rules_of"]
