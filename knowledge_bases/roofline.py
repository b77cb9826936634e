"""roofline: where the heavy ops sit against the chip's compute and bandwidth roofs, and what is recoverable.

The classification itself is shared by every knowledge base (:mod:`advisor.toolkit.bound`, ``rules/bound.yaml``):
bound by arithmetic intensity against the ridge of the op's unit and dtype (or the scalar pipe, where control code
out-works every unit), pipe ratios as evidence, the share
of the practical roof each op reaches and the time reaching it would save. This knowledge base reports it for
the heavy ops (those covering ``heavy_coverage`` of compute time), one finding per op type and bound. Its rules
are symptoms -- how ops behave -- so a cause naming the same ops (a decomposed activation, an unfused chain, a
TransData site, a badly shaped op) absorbs them; ops at or near their roof are never reported.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection
from advisor.platform import is_assumed
from advisor.toolkit import advice, tuning
from advisor.toolkit.bound import COLUMNS, memory_bound_share, op_bounds, rules_of
from advisor.toolkit.common import all_dynamic, severity_for
from advisor.toolkit.time import window_us

_THRESHOLDS = ("heavy_coverage", "max_heavy_ops", "min_op_total_us", "min_saving_us", "max_points", "severity",
               "confidence")
_WHAT = (
    "Reads the shared op classification (rules file bound: FLOPs and bytes from cube_fops/vector_fops and "
    "main-memory bandwidth metrics where the profile has them, else from shapes and dtypes; the roof at an op's "
    "intensity is min(peak of its unit and dtype, intensity x hbm_gbps)) for the heavy ops -- the op names "
    "covering {heavy_coverage} of compute time, at most {max_heavy_ops}, each above {min_op_total_us} µs -- and "
    "reports each op type and bound whose ops can recover at least {min_saving_us} µs. "
)
_WHY = (
    " Recoverable time = the ops' time x (1 - the share of the practical roof they reach), the share being the "
    "larger of their throughput against the bound rules' target_fraction_of_roof of the roof and their measuring "
    "pipes' ratios against saturation; ops at or above the bound rules' near_roof share recover nothing."
)
_BANDWIDTH_NOTE = ("bandwidth is the platform's hbm_gbps, a working assumption for most chips: set the real figure "
                   "with --rules my.yaml (platform: {hbm_gbps: N})")


class RooflineKB(KnowledgeBase):
    id = "roofline"
    title = "Roofline: heavy ops against the chip's compute and bandwidth roofs"
    version = "2.0.0"
    api_version = "1.5"
    requires = ("ops",)
    requires_platform = ("hbm_gbps",)
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "roofline"

    _heavy: pd.DataFrame | None = None
    _memory_share: float | None = None

    @rule(RuleDoc(
        id="roofline.memory-bound",
        title="Memory-bound heavy ops below the bandwidth roof",
        what=_WHAT + "Memory bound: arithmetic intensity below the ridge of the op's unit and dtype (peak / "
                     "bandwidth), with a measuring pipe (compute, or MTE2/MTE3) below saturation.",
        why="These ops are limited by global-memory traffic and reach only part of the bandwidth the chip offers."
            + _WHY,
        how_to_fix="Cut the bytes: fuse the ops with their producers/consumers so intermediates stay on chip, "
                   "avoid layout conversions between them, use a 16-bit dtype the chip has where they run fp32; "
                   "then let operator tuning (where the flow has it) find tilings with larger, aligned transfers.",
        thresholds=_THRESHOLDS, needs=("ops",), role="symptom"))
    def memory_bound(self, ctx: AnalysisContext) -> Iterable[Finding]:
        return self._report(ctx, "memory")

    @rule(RuleDoc(
        id="roofline.compute-bound",
        title="Compute-bound heavy ops below the compute roof",
        what=_WHAT + "Compute bound: arithmetic intensity at or above the ridge; the evidence says when a memory "
                     "pipe is saturated anyway (the kernel re-reads its operands).",
        why="These ops are limited by arithmetic but reach only part of the cube/vector peak for their dtype."
            + _WHY,
        how_to_fix="Compute in the fastest dtype the unit has (16-bit on the cube instead of fp32, where accuracy "
                   "allows), keep matmul/conv dimensions multiples of the cube fractal, and let operator tuning "
                   "(where the flow has it) find a tiling that keeps the cube fed.",
        thresholds=_THRESHOLDS, needs=("ops",), role="symptom"))
    def compute_bound(self, ctx: AnalysisContext) -> Iterable[Finding]:
        return self._report(ctx, "compute")

    @rule(RuleDoc(
        id="roofline.latency-bound",
        title="Short ops far below their roof (latency bound)",
        what=_WHAT + "Latency bound: mean duration below the bound rules' latency_max_us and a share of the "
                     "practical roof below latency_max_share -- fixed costs (launch, scheduling, head/tail) "
                     "dominate; no kernel is expected below the bound rules' min_kernel_us.",
        why="Each call spends most of its time on fixed per-kernel costs rather than work." + _WHY,
        how_to_fix="Give each kernel more work: a larger batch, fused small ops, graph execution where the flow "
                   "has it.",
        thresholds=_THRESHOLDS, needs=("ops",), role="symptom"))
    def latency_bound(self, ctx: AnalysisContext) -> Iterable[Finding]:
        return self._report(ctx, "latency")

    @rule(RuleDoc(
        id="roofline.scalar-bound",
        title="Heavy ops whose scalar pipe limits them (scalar bound)",
        what=_WHAT + "Scalar bound: the op's scalar pipe is its busiest (against the bound rules' pipe_saturation) "
                     "and at least the bound rules' scalar_bound_ratio busy -- control code, not a unit, sets its "
                     "time. A MIX kernel is judged on its busier side (cube or vector core).",
        why="The scalar unit computes tiling, addresses and loop control and issues the other pipes' instructions; "
            "while it is busy the cube and vector units wait. Unit roofs do not apply: the practical roof is the "
            "scalar pipe's saturation." + _WHY,
        how_to_fix="Give each instruction more work: larger tiles (fewer loop iterations and address updates), "
                   "tiling computed once on the host instead of per block, vector instructions instead of scalar "
                   "loops over elements; for library ops, operator tuning where the flow has it, or static shapes "
                   "so tiling is not computed at run time.",
        thresholds=_THRESHOLDS, needs=("ops", "metrics"), role="symptom"))
    def scalar_bound(self, ctx: AnalysisContext) -> Iterable[Finding]:
        return self._report(ctx, "scalar")

    @rule(RuleDoc(
        id="roofline.no-bound",
        title="Heavy ops with no clear bound",
        what=_WHAT + "No clear bound: the op has pipe metrics, is below the near_roof share of its practical roof "
                     "and none of its pipes reaches its saturation (bound rules' pipe_saturation).",
        why="Such ops are limited by latency inside the kernel -- synchronisation between pipes, scalar work, "
            "small tiles -- not by the hardware's units." + _WHY,
        how_to_fix="Operator tuning where the flow has it; block dim against the core count (operator.block-dim); "
                   "for kernels you write, double-buffer the copies against the compute and use larger tiles.",
        thresholds=_THRESHOLDS, needs=("ops", "metrics"), role="symptom"))
    def no_bound(self, ctx: AnalysisContext) -> Iterable[Finding]:
        return self._report(ctx, "none")

    # -----------------------------------------------------------------------------------------------------
    def _heavy_ops(self, ctx: AnalysisContext) -> pd.DataFrame:
        """The heavy ops of the shared classification that are below their roof (computed once per run)."""
        if self._heavy is None:
            bounds = op_bounds(ctx)
            if not len(bounds):
                ctx.note("roofline: the profile has no AI Core op to place on the roofline")
            unknown = int(bounds["bound"].isna().sum())
            if unknown:
                ctx.note(f"roofline: {unknown} op name(s) had neither shapes, FLOP/byte metrics nor pipe ratios "
                         "and were not classified")
            heavy = heavy_ops(bounds, ctx.rules)
            self._heavy = heavy[heavy["bound"].notna() & (heavy["recoverable_us"] > 0)]
            view = memory_bound_share(bounds)
            self._memory_share = view.share if view is not None else None
        return self._heavy

    def _report(self, ctx: AnalysisContext, bound: str) -> Iterable[Finding]:
        heavy = self._heavy_ops(ctx)
        mine = heavy[heavy["bound"] == bound]
        for op_type, group in mine.groupby("type", sort=False):
            if float(group["recoverable_us"].sum()) >= float(ctx.rules["min_saving_us"]):
                f = _finding(ctx, str(op_type), bound, group)
                if bound == "memory" and self._memory_share is not None:
                    # the share every memory-bound figure of the report gives (model summary, memory-bound KB)
                    f.evidence["memory_bound_share_of_compute"] = round(self._memory_share, 4)
                yield f


def heavy_ops(points: pd.DataFrame, rules: Any) -> pd.DataFrame:
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


# ---------------------------------------------------------------------------------------------------------
# findings
# ---------------------------------------------------------------------------------------------------------
_TABLE = ["name", "type", "duration us", "calls", "flops", "bytes", "intensity", "ridge", "attained TFLOPS",
          "roof TFLOPS", "% roof", "% practical roof", "bound", "busiest pipe", "saturated", "recoverable us"]


def _finding(ctx: AnalysisContext, op_type: str, bound: str, group: pd.DataFrame) -> Finding:
    r = ctx.rules
    group = group.sort_values("recoverable_us", ascending=False, kind="stable")
    saving = float(group["recoverable_us"].sum())
    weights = group["total_us"].to_numpy(dtype="float64")
    pct = _weighted(group["pct_of_roof"], weights)
    share = _weighted(group["share_of_roof"], weights)
    source = _source(group)
    window = window_us(ctx.profile)
    rows = [[p.name, p.type, round(p.duration_us, 3), int(p.calls), _num(p.flops), _num(p.bytes),
             _num(p.intensity, 3), _num(p.ridge, 1), _num(p.attained_tflops, 4), _num(p.roof_tflops, 4),
             _num(p.pct_of_roof * 100, 1), _num(p.share_of_roof * 100, 1), p.bound,
             f"{p.pipe} {p.pipe_ratio:.2f}" if p.pipe else "", p.saturated, round(p.recoverable_us, 3)]
            for p in group.itertuples(index=False)]
    bw = float(ctx.platform["hbm_gbps"])
    evidence: dict[str, Any] = {
        "op_type": op_type, "bound": bound, "ops": len(group),
        "total_us": round(float(group["total_us"].sum()), 3), "recoverable_us": round(saving, 3),
        "mean_pct_of_roof": None if pct is None else round(pct, 4),
        "mean_share_of_practical_roof": None if share is None else round(share, 4),
        "peak_tflops": float(group["peak_tflops"].iloc[0]), "hbm_gbps": bw,
        "ridge_flops_per_byte": round(float(group["ridge"].iloc[0]), 3), "bandwidth_note": _BANDWIDTH_NOTE,
        "soc": ctx.platform.get("soc"), "soc_assumed": is_assumed(ctx.platform), "source": source,
        "table": table(_TABLE, rows),
        "roofline_points": table(COLUMNS, [[_jsonable(v) for v in rec]
                                           for rec in group[COLUMNS].itertuples(index=False, name=None)],
                                 limit=int(r["max_points"])),
    }
    if window > 0:
        evidence["share_of_window"] = round(saving / window, 4)
    text, fix = _advice(ctx, op_type, bound, group, pct)
    saving_by_op = {str(n): float(s) for n, s in zip(group["name"], group["recoverable_us"], strict=True)}
    return ctx.finding(
        rule=f"roofline.{'no' if bound == 'none' else bound}-bound",
        title=_title(op_type, bound, group, pct),
        severity=severity_for(saving / window, r["severity"]) if window > 0 else "info",
        ops=list(saving_by_op),
        evidence=evidence,
        estimated_saving_us=saving,
        basis=(f"per op: its time x (1 - the share of the practical roof it reaches, {_fmt_pct(share)} on average "
               f"here); roof = min(peak {float(group['peak_tflops'].iloc[0]):g} TFLOPS, intensity x {bw:g} GB/s); "
               f"work from {source}; {_BANDWIDTH_NOTE}"),
        recommendation=text,
        fix=fix,
        confidence=float(r["confidence"][source]),
        saving_by_op=saving_by_op,
    )


def _title(op_type: str, bound: str, group: pd.DataFrame, pct: float | None) -> str:
    n = len(group)
    practical = _weighted(group['share_of_roof'], group['total_us'])
    at = f"at {_fmt_pct(practical)} of the practical roof (pipes)"
    if pct is not None:  # the saving is sized on the practical roof: the title names it when it differs
        at = f"at {_fmt_pct(pct)} of the roof" + \
             (f", {_fmt_pct(practical)} of the practical roof" if practical is not None and abs(practical - pct) >= 0.05
              else "")
    if bound == "none":
        top = group.iloc[0]
        return f"{op_type}: {n} op(s) with no clear bound {at}, busiest pipe {top['pipe']} {top['pipe_ratio']:.2f}"
    if bound == "latency":
        per_call = float(group["total_us"].sum() / group["calls"].sum())
        return f"{op_type}: {n} latency-bound op(s), {per_call:.1f} µs per call {at}"
    if bound == "scalar":
        top = group.iloc[0]
        return f"{op_type}: {n} scalar-bound op(s), scalar pipe {top['pipe_ratio']:.2f} {at}"
    return f"{op_type}: {n} {bound}-bound op(s) {at}"


def _advice(ctx: AnalysisContext, op_type: str, bound: str, group: pd.DataFrame,
            pct: float | None) -> tuple[str, Fix | None]:
    """The recommendation and fix for one op type and bound, worded for the run's flow and chip."""
    n, names = len(group), [str(x) for x in group["name"]]
    dynamic = all_dynamic(ctx.profile.ops, names)
    aoe = tuning.operator_tuning(ctx, names, dynamic)
    tune = f" {aoe.text}" if aoe else ""
    at = _fmt_pct(pct) if pct is not None else "an unknown share"
    where = f"{at} of their roof" if pct is not None else \
        f"{_fmt_pct(_weighted(group['share_of_roof'], group['total_us']))} of their practical roof (by their pipes)"
    dtype = str(group["dtype"].iloc[0])
    smaller = tuning.smaller_dtype(ctx, dtype)
    if bound == "memory":
        text = (f"{n} {op_type} op(s) are memory bound at {at} of the bandwidth roof at their intensity: they need "
                f"fewer bytes moved, not more compute. To cut the bytes, {tuning.fuse(ctx)}.")
        if smaller:
            text += f" They move {dtype} tensors: {smaller} halves the bytes where accuracy allows."
        return text + tune, Fix("code", "cut the bytes these ops move", {"ops": names[:tuning.MAX_FIX_OPS],
                                                                         "how": tuning.fuse(ctx)})
    if bound == "compute":
        unit = str(group["unit"].iloc[0])
        text = f"{n} {op_type} op(s) are compute bound at {at} of the {unit} peak for {dtype}."
        if smaller and unit == "cube":
            text += f" The cube computes {smaller} at several times the fp32 rate (see the precision findings)."
        reread = group[group["pipe_agrees"].eq(False) & group["saturated"].astype(bool)]
        if len(reread):
            top = reread.iloc[0]
            text += (f" Their {top['pipe']} pipe is saturated ({top['pipe_ratio']:.2f}) although their intensity "
                     "is above the ridge: the kernel re-reads its operands, a tiling with more reuse shortens it.")
            if op_type in set(rules_of(ctx)["matmul_types"]) and advice.family(ctx) == "torch":
                text += " Keeping the weights in FRACTAL_NZ (torch_npu.npu_format_cast(w, 29)) saves the reformat."
        return text + tune, aoe.fix if aoe else None
    if bound == "latency":
        per_call = float(group["total_us"].sum() / group["calls"].sum())
        text = (f"{n} {op_type} op(s) take {per_call:.1f} µs per call at {where}: fixed per-kernel "
                f"costs (launch, scheduling, head and tail) dominate. Give each kernel more work: "
                f"{tuning.more_work_per_kernel(ctx)}.")
        return text, Fix("code", "more work per kernel launch", {"ops": names[:tuning.MAX_FIX_OPS],
                                                                 "how": tuning.more_work_per_kernel(ctx)})
    if bound == "scalar":
        top = group.iloc[0]
        text = (f"{n} {op_type} op(s) spend their time in control code: the scalar pipe is their busiest "
                f"({top['pipe_ratio']:.2f}) at {where}, so the cube and vector units wait for it.")
        if advice.context_of(ctx) == "kernel-dev":
            text += (" Compute the tiling once on the host, use larger tiles (fewer loop iterations and address "
                     "updates per byte), and replace scalar loops over elements by vector instructions.")
        else:
            text += (" Static shapes let the tiling be computed at compile time; otherwise the kernel's control "
                     "code is its owner's to fix." + tune)
        return text, aoe.fix if aoe else None
    top = group.iloc[0]
    text = (f"{n} {op_type} op(s) keep no pipe saturated (busiest: {top['pipe']} {top['pipe_ratio']:.2f}) at {where}"
            ": latency inside the kernel (synchronisation between pipes, scalar work, small tiles) "
            "limits them, not the chip's units.")
    if advice.context_of(ctx) == "kernel-dev":
        text += (" Double-buffer the copies against the compute, use larger tiles, and check the block dim "
                 "against the core count.")
    else:
        text += " Check their block dim against the core count (operator findings)." + tune
    return text, aoe.fix if aoe else None


def _source(group: pd.DataFrame) -> str:
    counts = group.groupby("source")["total_us"].sum()
    return str(counts.idxmax()) if len(counts) else "shapes"


def _weighted(values: pd.Series, weights: Any) -> float | None:
    v = values.to_numpy(dtype="float64")
    w = np.asarray(weights, dtype="float64")
    ok = np.isfinite(v) & (w > 0)
    return float(np.average(v[ok], weights=w[ok])) if ok.any() else None


def _fmt_pct(x: float | None) -> str:
    """A share as a whole percentage, rounded down: an op shown at 75 % is not one that fell just short of it."""
    return f"{math.floor(min(x, 1.0) * 100 + 1e-6):.0f}%" if x is not None and np.isfinite(x) else "n/a"


def _num(x: Any, digits: int = 0) -> float | int | None:
    if x is None or not np.isfinite(x):
        return None
    return round(float(x), digits) if digits else int(round(float(x)))


def _jsonable(v: Any) -> Any:
    if isinstance(v, (float, np.floating)):
        return None if not np.isfinite(v) else round(float(v), 6)
    if isinstance(v, (np.integer, np.bool_)):
        return v.item()
    return v


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [RooflineKB]
