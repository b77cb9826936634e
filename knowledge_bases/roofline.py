"""roofline: where the heavy ops sit against the chip's compute and bandwidth roofs, and what is recoverable.

For each op: FLOPs (``cube_fops + vector_fops`` when the profile has them, else from shapes: convolution
2 x output elements x weight elements / Cout, matmul 2 x M x N x K, vector ops ~1 FLOP per output element)
and bytes (``main_mem_read_bw + main_mem_write_bw`` x time when measured, else the sum of input and output
tensor bytes). Arithmetic intensity = FLOPs / bytes; the roof at that intensity is
``min(peak, intensity x bandwidth)`` with the peak of the op's unit and dtype (``ctx.platform``).

The time an op needs at the roof is ``max(FLOPs / peak, bytes / bandwidth)``; the practical target is that
time divided by ``target_fraction_of_roof`` (never below ``min_kernel_us``) and the recoverable time is
``duration - target`` (never negative), summed over calls.

:func:`roofline_points` is a pure function (ops table in, one row per op name out) used by the knowledge base
and by the HTML report's log-log roofline chart.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.costmodel import conv_flops, matmul_flops, tensor_bytes
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc
from advisor.model import canonical_dtype, canonical_format, parse_list, parse_shapes
from advisor.toolkit.graph_patterns import device_time_us, numel, severity_for

COMPUTE_CORES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV")
BOUNDS = ("memory", "compute", "latency", "none")
POINT_COLUMNS = ["name", "type", "core", "unit", "calls", "total_us", "duration_us", "flops", "bytes", "intensity",
                 "attained_tflops", "roof_tflops", "peak_tflops", "bound", "pct_of_roof", "recoverable_us",
                 "pipe", "source"]
_SHAPE_KEYS = ["type", "core", "input_shapes", "input_dtypes", "input_formats", "output_shapes", "output_dtypes",
               "output_formats"]
_PIPES = ("mac", "vec", "scalar", "mte1", "mte2", "mte3", "fixpipe")
_MEMORY_PIPES = ("mte2", "mte3")
_COMPUTE_PIPES = ("mac", "vec")

_BANDWIDTH_NOTE = ("bandwidth is the platform's hbm_gbps, a working assumption for most chips: set the real figure "
                   "with --rules my.yaml (platform: {hbm_gbps: N})")


def _doc(bound: str, title: str, what: str, why: str, how: str) -> RuleDoc:
    return RuleDoc(
        id=f"roofline.{bound}-bound" if bound != "none" else "roofline.no-bound",
        title=title,
        what=what,
        why=why,
        how_to_fix=how,
        thresholds=("heavy_coverage", "max_heavy_ops", "min_op_total_us", "target_fraction_of_roof", "min_kernel_us",
                    "latency_max_us", "latency_max_pct_of_roof", "pipe_bound_ratio", "cube_peak", "vector_peak",
                    "min_saving_us", "severity"),
        needs=("ops",),
    )


_COMMON_WHAT = (
    "Places each heavy op (the op names covering heavy_coverage of compute time) on the roofline: FLOPs and "
    "bytes from cube_fops/vector_fops and main-memory bandwidth metrics where the profile has them, else from "
    "shapes and dtypes; the roof at the op's intensity is min(peak, intensity x hbm_gbps) with the peak of its "
    "unit and dtype. "
)
_COMMON_WHY = (
    " Recoverable time = duration - (time at the roof / target_fraction_of_roof), at least min_kernel_us, never "
    "negative; ops are grouped by type."
)

RULE_MEMORY = _doc(
    "memory", "Memory-bound heavy ops below the bandwidth roof",
    _COMMON_WHAT + "Memory bound: MTE2/MTE3 pipe ratio above pipe_bound_ratio, or (without pipe metrics) "
    "intensity below the ridge point.",
    "These ops are limited by global-memory traffic; they run below the bandwidth the chip offers." + _COMMON_WHY,
    "Cut the bytes: fuse the op into its producer/consumer (UB fusion, see ub-fusion findings), avoid TransData "
    "round trips (keep one format; see transdata findings), use a smaller dtype (fp16/bf16 instead of fp32, int8 "
    "where accuracy allows), reuse data already on chip. If the bytes cannot shrink, tune the op's tiling (AOE "
    "operator tuning) so transfers are larger and aligned.",
)
RULE_COMPUTE = _doc(
    "compute", "Compute-bound heavy ops below the compute roof",
    _COMMON_WHAT + "Compute bound: cube (mac) or vector pipe ratio above pipe_bound_ratio, or (without pipe "
    "metrics) intensity at or above the ridge point.",
    "These ops are limited by arithmetic but reach only part of the cube/vector peak for their dtype." + _COMMON_WHY,
    "Use the fastest dtype the unit supports (fp16/bf16 on the cube instead of fp32 -- atc --precision_mode / "
    "allow_hf32 on A2 -- or int8 via AMCT quantization); make matmul/conv dimensions multiples of 16 (fp16) or "
    "32 (int8); tune tiling and block dim with AOE operator tuning (aoe --job_type=2) so all AI cores are used.",
)
RULE_LATENCY = _doc(
    "latency", "Short ops far below both roofs (latency bound)",
    _COMMON_WHAT + "Latency bound: mean duration below latency_max_us and below latency_max_pct_of_roof of the "
    "roof -- fixed costs (launch, scheduling, head/tail) dominate.",
    "Each call spends most of its time on fixed per-kernel costs rather than work." + _COMMON_WHY,
    "Give each kernel more work: larger batch, fuse small ops (UB fusion, fused operators), run independent "
    "small ops on several streams, and avoid per-step host-side launches (graph mode / static shapes).",
)
RULE_NONE = _doc(
    "none", "Heavy ops with no clear bound",
    _COMMON_WHAT + "No bound: pipe metrics exist but no pipe ratio reaches pipe_bound_ratio (or only the scalar "
    "pipe does) -- the op is neither feeding the units nor moving data efficiently.",
    "Such ops usually suffer from poor tiling, pipeline stalls or scalar overhead." + _COMMON_WHY,
    "Run AOE operator tuning (aoe --job_type=2) on the model to search better tilings; check block dim "
    "against the core count; for custom operators, overlap MTE and compute with double buffering.",
)
_RULE_BY_BOUND = {"memory": RULE_MEMORY, "compute": RULE_COMPUTE, "latency": RULE_LATENCY, "none": RULE_NONE}


class RooflineKB(KnowledgeBase):
    id = "roofline"
    title = "Roofline: heavy ops against the chip's compute and bandwidth roofs"
    version = "1.0.0"
    api_version = "1"
    requires = ("ops",)
    rules_file = "roofline"
    rules = (RULE_MEMORY, RULE_COMPUTE, RULE_LATENCY, RULE_NONE)

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        r = ctx.rules
        ops = ctx.profile.ops
        points = roofline_points(ops, ctx.platform, r)
        if not len(points):
            ctx.note("roofline: no AI Core op had shapes or FLOP metrics to place on the roofline")
            return
        unplaced = int(points["bound"].isna().sum())
        if unplaced:
            ctx.note(f"roofline: {unplaced} op name(s) had neither shapes nor FLOP/byte metrics and were skipped")
        # heavy = the ops covering heavy_coverage of compute time (placed or not); only placed ones are judged
        heavy = heavy_ops(points, r).dropna(subset=["bound"])
        total = device_time_us(ops)
        for (op_type, bound), group in heavy.groupby(["type", "bound"], sort=False, observed=True):
            saving = float(group["recoverable_us"].sum())
            if saving < float(r["min_saving_us"]):
                continue
            yield _finding(ctx, str(op_type), str(bound), group, saving, total)


# ---------------------------------------------------------------------------------------------------------
# the pure part
# ---------------------------------------------------------------------------------------------------------


def roofline_points(ops: pd.DataFrame, platform: Mapping[str, Any], rules: Mapping[str, Any]) -> pd.DataFrame:
    """One row per op name (calls aggregated) on the roofline; columns ``POINT_COLUMNS``.

    ``duration_us``, ``flops`` and ``bytes`` are per call (means); ``total_us`` and ``recoverable_us`` add up
    all calls. ``bound`` is NaN for ops with neither FLOPs nor bytes. ``source`` says where FLOPs/bytes came
    from (``metrics`` or ``shapes``).
    """
    if not len(ops):
        return pd.DataFrame(columns=POINT_COLUMNS)
    mask = ops["core"].isin(COMPUTE_CORES).to_numpy(dtype=bool) & (ops["duration_us"].to_numpy(dtype="float64") > 0)
    wanted = {"name", "duration_us", "aicore_time_us", *_SHAPE_KEYS, *(f"{p}_ratio" for p in _PIPES)}
    # only the columns used here: a row subset of the whole table would copy all ~60 columns (0.8 GB at 2M rows)
    df = ops.loc[mask, [c for c in ops.columns if c in wanted or c.endswith(("_fops", "main_mem_read_bw",
                                                                               "main_mem_write_bw"))]]
    if not len(df):
        return pd.DataFrame(columns=POINT_COLUMNS)
    dur = df["duration_us"].to_numpy(dtype="float64")

    # FLOPs, bytes and unit per distinct (type, shapes, dtypes, formats), mapped back to rows
    codes = _combined_codes(df, _SHAPE_KEYS)
    first = np.unique(codes, return_index=True)[1]
    work = np.array([_shape_work(df.iloc[i], rules) for i in first], dtype=object).reshape(-1, 4)
    work_flops = work[:, 0].astype("float64")[codes]
    work_bytes = work[:, 1].astype("float64")[codes]
    is_cube_shape = work[:, 2].astype(bool)[codes]
    # peak of each distinct op description on either unit (the unit is final once metrics are known)
    peak_cube = np.array([_peak(True, str(w[3]), platform, rules) for w in work])[codes]
    peak_vector = np.array([_peak(False, str(w[3]), platform, rules) for w in work])[codes]

    m_flops = _metric_flops(df)
    m_cube = _metric_cube_flops(df)
    m_bytes = _metric_bytes(df)
    has_m_flops = np.nan_to_num(m_flops) > 0
    flops = np.where(has_m_flops, m_flops, work_flops)
    has_m_bytes = np.nan_to_num(m_bytes) > 0
    nbytes = np.where(has_m_bytes, m_bytes, work_bytes)
    is_cube = is_cube_shape | (m_cube > 0)
    source = np.where(has_m_flops | has_m_bytes, "metrics", "shapes")

    peak_tflops = np.where(is_cube, peak_cube, peak_vector)
    bw_per_us = float(platform["hbm_gbps"]) * 1e3  # bytes per microsecond
    flops_per_us = peak_tflops * 1e6
    t_roof = np.fmax(np.nan_to_num(flops) / flops_per_us, np.nan_to_num(nbytes) / bw_per_us)
    # placed: the work is known (FLOPs known, even 0 for data movement) and something is moved or computed;
    # a shape-based point far above its roof means the shapes were not understood
    placed = ~np.isnan(flops) & ((np.nan_to_num(flops) > 0) | (np.nan_to_num(nbytes) > 0))
    placed &= has_m_flops | (t_roof <= float(rules["max_pct_of_roof"]) * dur)
    target = np.maximum(t_roof / float(rules["target_fraction_of_roof"]), float(rules["min_kernel_us"]))
    recoverable = np.where(placed, np.maximum(0.0, dur - target), 0.0)

    rows = pd.DataFrame({
        "name": _categorical(df["name"]),
        "type": _categorical(df["type"]),
        "core": _categorical(df["core"]),
        "dur": dur,
        "flops": np.where(placed, flops, np.nan),
        "bytes": np.where(placed, nbytes, np.nan),
        "t_roof": np.where(placed, t_roof, np.nan),
        "peak": peak_tflops,
        "recoverable": recoverable,
        "metrics": source == "metrics",
        "cube": is_cube,
    })
    for pipe in _PIPES:
        col = f"{pipe}_ratio"
        ratio = df[col].to_numpy(dtype="float64") if col in df.columns else np.full(len(df), np.nan)
        rows[f"w_{pipe}"] = ratio * dur
        rows[f"d_{pipe}"] = np.where(np.isnan(ratio), 0.0, dur)

    g = rows.groupby(["name", "type", "core"], sort=False, observed=True)
    agg = g.agg(calls=("dur", "size"), total_us=("dur", "sum"), flops=("flops", "mean"), bytes=("bytes", "mean"),
                t_roof=("t_roof", "mean"), peak_tflops=("peak", "first"), recoverable_us=("recoverable", "sum"),
                metrics=("metrics", "mean"), cube=("cube", "max"))
    sums = g[[f"w_{p}" for p in _PIPES] + [f"d_{p}" for p in _PIPES]].sum(min_count=1)
    agg = agg.join(sums).reset_index()
    for col in ("name", "type", "core"):
        agg[col] = agg[col].astype(object).where(agg[col].notna(), "")
    agg["duration_us"] = agg["total_us"] / agg["calls"]
    with np.errstate(divide="ignore", invalid="ignore"):
        agg["intensity"] = np.where(agg["bytes"] > 0, agg["flops"] / agg["bytes"], np.nan)
        agg["attained_tflops"] = agg["flops"] / agg["duration_us"] / 1e6
        ridge_roof = agg["intensity"] * bw_per_us / 1e6
        agg["roof_tflops"] = np.where(agg["intensity"].notna(), np.fmin(agg["peak_tflops"], ridge_roof),
                                      agg["peak_tflops"])
        agg["pct_of_roof"] = agg["t_roof"] / agg["duration_us"]
        ratios = {p: agg[f"w_{p}"] / agg[f"d_{p}"].where(agg[f"d_{p}"] > 0) for p in _PIPES}
    agg["source"] = np.where(agg["metrics"] >= 0.5, "metrics", "shapes")
    agg["unit"] = np.where(agg["cube"].astype(bool), "cube", "vector")
    agg["bound"], agg["pipe"] = _classify(agg, ratios, bw_per_us, rules)
    return agg[POINT_COLUMNS].sort_values("total_us", ascending=False, kind="stable").reset_index(drop=True)


def heavy_ops(points: pd.DataFrame, rules: Mapping[str, Any]) -> pd.DataFrame:
    """The op names with the most time until ``heavy_coverage`` of their total time is covered."""
    if not len(points):
        return points
    pts = points[points["total_us"] >= float(rules["min_op_total_us"])]
    pts = pts.sort_values("total_us", ascending=False, kind="stable")
    total = float(pts["total_us"].sum())
    if total <= 0:
        return pts.iloc[:0]
    before = pts["total_us"].cumsum().shift(fill_value=0.0) / total
    return pts[before < float(rules["heavy_coverage"])].head(int(rules["max_heavy_ops"]))


def _classify(agg: pd.DataFrame, ratios: Mapping[str, pd.Series], bw_per_us: float,
              rules: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray]:
    """Bound class and dominant pipe per op name."""
    n = len(agg)
    thr = float(rules["pipe_bound_ratio"])
    table_ = np.column_stack([ratios[p].to_numpy(dtype="float64") for p in _PIPES]) if n else np.empty((0, 7))
    has_pipes = ~np.isnan(table_).all(axis=1) if n else np.zeros(0, dtype=bool)
    filled = np.nan_to_num(table_, nan=-1.0)
    top = filled.argmax(axis=1) if n else np.zeros(0, dtype=int)
    pipe = np.where(has_pipes, np.array(_PIPES, dtype=object)[top], "")
    mem = np.max(filled[:, [_PIPES.index(p) for p in _MEMORY_PIPES]], axis=1) if n else np.zeros(0)
    comp = np.max(filled[:, [_PIPES.index(p) for p in _COMPUTE_PIPES]], axis=1) if n else np.zeros(0)

    intensity = agg["intensity"].to_numpy(dtype="float64")
    ridge = agg["peak_tflops"].to_numpy(dtype="float64") * 1e6 / bw_per_us
    by_roof = np.where(np.nan_to_num(intensity, nan=0.0) >= ridge, "compute", "memory")
    by_pipes = np.where((mem > thr) & (mem >= comp), "memory", np.where(comp > thr, "compute", "none"))
    bound = np.where(has_pipes, by_pipes, by_roof).astype(object)
    latency = (agg["duration_us"].to_numpy(dtype="float64") < float(rules["latency_max_us"])) & (
        np.nan_to_num(agg["pct_of_roof"].to_numpy(dtype="float64")) < float(rules["latency_max_pct_of_roof"]))
    bound = np.where(latency, "latency", bound).astype(object)
    # not placed: no FLOPs, or no bytes and no pipe ratios (the op's intensity is unknown: neither its roof nor
    # its bound can be told, and measuring it against the compute peak would claim almost all its time)
    unplaced = agg["flops"].isna().to_numpy() | (np.isnan(intensity) & ~has_pipes)
    bound[unplaced] = np.nan
    return bound, pipe


# ---------------------------------------------------------------------------------------------------------
# FLOPs and bytes
# ---------------------------------------------------------------------------------------------------------


def _metric_flops(df: pd.DataFrame) -> np.ndarray:
    """cube + vector FLOPs measured by the PMU (both core sides on split-core chips); NaN when absent."""
    split = [c for c in ("aic_cube_fops", "aiv_cube_fops", "aic_vector_fops", "aiv_vector_fops") if c in df.columns]
    cols = split if split else [c for c in ("cube_fops", "vector_fops") if c in df.columns]
    if not cols:
        return np.full(len(df), np.nan)
    arr = np.column_stack([df[c].to_numpy(dtype="float64") for c in cols])
    out = np.nansum(arr, axis=1)
    out[np.isnan(arr).all(axis=1)] = np.nan
    return out


def _metric_cube_flops(df: pd.DataFrame) -> np.ndarray:
    """Cube FLOPs measured by the PMU (0 where absent): a non-zero value says the op ran on the cube."""
    cols = [c for c in ("aic_cube_fops", "aiv_cube_fops", "cube_fops") if c in df.columns]
    out = np.zeros(len(df))
    for c in cols:
        out = np.fmax(out, np.nan_to_num(df[c].to_numpy(dtype="float64")))
    return out


def _metric_bytes(df: pd.DataFrame) -> np.ndarray:
    """Bytes moved to/from main memory: (read + write bandwidth, GB/s) x time (us) x 1e3."""
    if "main_mem_read_bw" not in df.columns or "main_mem_write_bw" not in df.columns:
        return np.full(len(df), np.nan)
    bw = df["main_mem_read_bw"].to_numpy(dtype="float64") + df["main_mem_write_bw"].to_numpy(dtype="float64")
    t = df["aicore_time_us"].to_numpy(dtype="float64") if "aicore_time_us" in df.columns else \
        np.full(len(df), np.nan)
    t = np.where(np.nan_to_num(t) > 0, t, df["duration_us"].to_numpy(dtype="float64"))
    return bw * t * 1e3


def _combined_codes(df: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """0..m-1 id of each row's combination of values in ``columns`` (hash-based, no sort of the rows)."""
    key = np.zeros(len(df), dtype=np.int64)
    for col in columns:
        cat = df[col] if isinstance(df[col].dtype, pd.CategoricalDtype) else df[col].astype("category")
        c = cat.cat.codes.to_numpy().astype(np.int64) + 1
        key, _ = pd.factorize(key * (len(cat.cat.categories) + 1) + c)
        key = key.astype(np.int64)
    return key


def _peak(cube: bool, dtype: str, platform: Mapping[str, Any], rules: Mapping[str, Any]) -> float:
    """Peak TFLOPS of the cube or vector unit for a dtype (rules cube_peak / vector_peak x platform value)."""
    table_ = rules["cube_peak"] if cube else rules["vector_peak"]
    entry = table_.get(dtype) or table_["*"]
    base = platform.get(entry["peak"]) or platform.get("fp16_tflops") or 1.0
    return float(base) * float(entry["scale"])


def _categorical(col: pd.Series) -> pd.Categorical:
    return col.array if isinstance(col.dtype, pd.CategoricalDtype) else pd.Categorical(col.astype("string"))


def _dims(value: object) -> list[tuple[int, ...] | None]:
    return list(parse_shapes(value))


def _shape_work(row: pd.Series, rules: Mapping[str, Any]) -> tuple[float, float, bool, str]:
    """(FLOPs, bytes, runs on cube, unit dtype) of one op from its tensor descriptions; NaN when unknown."""
    op_type = str(row["type"]) if pd.notna(row["type"]) else ""
    core = str(row["core"]) if pd.notna(row["core"]) else ""
    ins, outs = _dims(row["input_shapes"]), _dims(row["output_shapes"])
    in_dt, out_dt = list(parse_list(row["input_dtypes"])), list(parse_list(row["output_dtypes"]))
    in_fmt = [canonical_format(f) for f in parse_list(row["input_formats"])]
    out_fmt = [canonical_format(f) for f in parse_list(row["output_formats"])]
    nbytes = tensor_bytes(ins, in_dt) + tensor_bytes(outs, out_dt)
    is_cube = op_type in set(rules["cube_types"])
    dtype = canonical_dtype((in_dt or out_dt or [""])[0]) if is_cube else canonical_dtype((out_dt or in_dt or [""])[0])
    flops = math.nan
    out0 = outs[0] if outs else None
    if op_type in set(rules["no_estimate_types"]):
        pass
    elif op_type in set(rules["data_movement_types"]):
        flops = 0.0
    elif op_type in set(rules["conv_types"]) or op_type == "FullyConnection":
        flops = conv_flops(op_type, ins, in_fmt, out0, (out_fmt or [""])[0])
    elif op_type in set(rules["matmul_types"]):
        flops = matmul_flops(ins, in_fmt, out0, (out_fmt or [""])[0])
    elif not is_cube and (op_type in set(rules["vector_types"]) or core == "AI_VECTOR_CORE"):
        sizes = [n for n in (numel(ins[0]) if ins else None, numel(out0)) if n is not None]
        if sizes:
            flops = float(max(sizes)) * float(rules["flops_per_element"].get(op_type, 1.0))
    return flops, (nbytes if nbytes > 0 else math.nan), is_cube, dtype


# ---------------------------------------------------------------------------------------------------------
# findings
# ---------------------------------------------------------------------------------------------------------
_ADVICE = {
    "memory": ("are memory bound: {pct} of the bandwidth roof at their intensity. Cut the bytes they move: fuse them "
               "into neighbouring ops (UB fusion), avoid TransData round trips, use fp16/bf16 or int8 instead of "
               "fp32, and reuse data already on chip; then tune tiling with AOE so transfers are large."),
    "compute": ("are compute bound at {pct} of the {unit} peak for their dtype. Use fp16/bf16 (or int8 via AMCT) "
                "on the cube instead of fp32, align matmul/conv dimensions to 16 (fp16) / 32 (int8), and run AOE "
                "operator tuning (aoe --job_type=2) for better tiling and block dim."),
    "latency": ("are latency bound: short kernels ({dur} per call) at {pct} of their roof, dominated by fixed "
                "per-kernel costs. Batch more work per call, fuse small ops, or run independent ops on several "
                "streams."),
    "none": ("show no clear bound (no pipe above the bound ratio; {pct} of the roof): run AOE operator tuning "
             "(aoe --job_type=2) and check block dim against the core count."),
}


def _fmt_pct(x: float) -> str:
    return f"{x * 100:.0f}%" if np.isfinite(x) else "n/a"


def _finding(ctx: AnalysisContext, op_type: str, bound: str, group: pd.DataFrame, saving: float,
             total_us: float) -> Finding:
    r = ctx.rules
    rule = _RULE_BY_BOUND[bound]
    group = group.sort_values("recoverable_us", ascending=False, kind="stable")
    weights = group["total_us"].to_numpy(dtype="float64")
    pct = float(np.average(np.nan_to_num(group["pct_of_roof"].to_numpy(dtype="float64")), weights=weights))
    mean_dur = float(group["total_us"].sum() / group["calls"].sum())
    unit = str(group["unit"].iloc[0])
    advice = _ADVICE[bound].format(pct=_fmt_pct(pct), unit=unit, dur=f"{mean_dur:.1f} us")
    bw = float(ctx.platform["hbm_gbps"])
    cols = ["name", "type", "duration us", "calls", "flops", "bytes", "intensity", "attained TFLOPS", "roof TFLOPS",
            "% roof", "bound", "pipe", "recoverable us"]
    rows = [[p.name, p.type, round(p.duration_us, 3), int(p.calls), _num(p.flops), _num(p.bytes), _num(p.intensity, 3),
             _num(p.attained_tflops, 4), _num(p.roof_tflops, 4), _num(p.pct_of_roof * 100, 1), p.bound, p.pipe,
             round(p.recoverable_us, 3)] for p in group.itertuples(index=False)]
    metrics_share = float((group["source"] == "metrics").mean())
    confidence = float(r["confidence"]["metrics"] if metrics_share >= 0.5 else r["confidence"]["shapes"])
    evidence: dict[str, Any] = {
        "op_type": op_type,
        "bound": bound,
        "ops": len(group),
        "total_us": round(float(group["total_us"].sum()), 3),
        "recoverable_us": round(saving, 3),
        "mean_pct_of_roof": round(pct, 4),
        "peak_tflops": float(group["peak_tflops"].iloc[0]),
        "hbm_gbps": bw,
        "ridge_flops_per_byte": round(float(group["peak_tflops"].iloc[0]) * 1e3 / bw, 3),
        "bandwidth_note": _BANDWIDTH_NOTE,
        "soc": ctx.platform.get("soc"),
        "source": "metrics" if metrics_share >= 0.5 else "shapes",
        "table": table(cols, rows),
        "roofline_points": table(POINT_COLUMNS, [[_jsonable(v) for v in rec] for rec in
                                                 group[POINT_COLUMNS].itertuples(index=False, name=None)],
                                 limit=int(r["max_points"])),
    }
    if total_us > 0:
        evidence["share_of_device_time"] = round(saving / total_us, 4)
        severity = severity_for(saving / total_us, r["severity"])
    else:
        severity = "info"
    fix = None
    if bound in ("compute", "none"):
        fix = Fix(kind="config", summary="AOE operator tuning of the model",
                  data={"tool": "aoe", "job_type": 2},
                  command="aoe --framework=<n> --model=<model> --job_type=2")
    saving_by_op = {str(n): float(s) for n, s in zip(group["name"], group["recoverable_us"], strict=True) if s > 0}
    return ctx.finding(
        rule=rule.id,
        title=(f"{op_type}: {len(group)} op(s) with no clear bound at {_fmt_pct(pct)} of the roof" if bound == "none"
               else f"{op_type}: {len(group)} {bound}-bound op(s) at {_fmt_pct(pct)} of the roof"),
        severity=severity,  # type: ignore[arg-type]
        ops=list(saving_by_op),
        evidence=evidence,
        estimated_saving_us=saving,
        basis=(f"per call: duration - max(time at the roof / {float(r['target_fraction_of_roof']):g}, "
               f"{float(r['min_kernel_us']):g} us); roof = min(peak {float(group['peak_tflops'].iloc[0]):g} TFLOPS, "
               f"intensity x {bw:g} GB/s); FLOPs/bytes from {evidence['source']}; {_BANDWIDTH_NOTE}"),
        recommendation=f"{len(group)} {op_type} op(s) {advice}",
        fix=fix,
        confidence=confidence,
        saving_by_op=saving_by_op,
    )


def _num(x: float, digits: int = 0) -> float | int | None:
    if x is None or not np.isfinite(x):
        return None
    return round(float(x), digits) if digits else int(round(float(x)))


def _jsonable(v: Any) -> Any:
    if isinstance(v, (float, np.floating)):
        return None if not np.isfinite(v) else round(float(v), 6)
    if isinstance(v, np.integer):
        return int(v)
    return v


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [RooflineKB]
