"""memory-bound: layers whose time goes to moving data, by the chip's own Memory Bound definition.

The SS928/SS927 SoC profiling guide defines, per layer of a JOB summary, ``Memory Bound = max(Dstr, DLD, WLD) /
max(Mac Busy, Vec Ppen)`` (DDR store, feature-map load and weight load against the busiest compute unit); msprof
writes ``memory_bound = mte2_ratio / max(mac_ratio, vec_ratio)`` in op_summary. Above 1 a layer waits for data more
than it computes. The advice depends on which transfer dominates (on the SoC: stores, feature-map loads or weight
loads), on the execution context (the framework's own fusion) and on the toolchain: the SoC's has no AOE, so it is
never suggested there. It is a symptom: the cause on the same layers (an unfused chain, a decomposed activation, a
TransData site) absorbs it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection, metric_values
from advisor.model_summary import COMPUTE_CORES, SOC_FORMULA, memory_bound_ratio
from advisor.platform import has_tool, supports_dtype
from advisor.toolkit import run_context as rc
from advisor.toolkit.bound import op_bounds
from advisor.toolkit.common import atc_option, graph_cmdline, pct, severity_for, text_ids
from advisor.units import fmt_us

_SOC_PARTS = {
    "soc_dstr_ratio": ("DDR stores (Dstr)", "the layer writes its output feature map to DDR: fuse it with its "
                       "consumer (activation, pooling, eltwise in the same layer) or shrink the output (fewer "
                       "channels, 8-bit feature maps)"),
    "soc_dld_ratio": ("feature-map loads (DLD)", "the layer reads its input feature map from DDR: fuse it with "
                      "its producer, lower the input resolution or channel count, or use 8-bit feature maps"),
    "soc_wld_ratio": ("weight loads (WLD)", "the layer streams its weights from DDR: quantize the weights to "
                      "int8 (or lower), reuse each weight over a larger batch, or prune channels"),
}


class MemoryBoundKB(KnowledgeBase):
    id = "memory-bound"
    title = "Layers bound by data movement (the chip's Memory Bound)"
    version = "2.0.0"
    api_version = "1.4"
    requires = ("ops",)
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "memory-bound"

    @rule(RuleDoc(
        id="memory-bound.layers",
        title="Layers bound by data movement (Memory Bound > threshold)",
        what="Takes each compute task's Memory Bound -- the SoC guide's max(Dstr, DLD, WLD) / max(Mac Busy, Vec "
             "Ppen) for SS928/SS927 JOB summaries, msprof's mte2_ratio / max(mac_ratio, vec_ratio) elsewhere (the "
             "profile's column, else computed from the pipe ratios) -- and reports the layers above {threshold} "
             "(at least {min_op_us} us each, {min_saving_us} us of saving in all), with the transfer that "
             "dominates them. Not assessed for kernel-development captures (contexts: {contexts}): a single "
             "kernel's bound is the roofline classification's.",
        why="A layer above 1 spends more time moving data between DDR/HBM and the core than computing: the compute "
            "units idle. The part of its time beyond compute, time x (1 - 1/MemoryBound), is what less traffic can "
            "recover ({recoverable_fraction} of it is counted). Above {model_share} of the compute time the whole "
            "model is memory bound (msprof rule_memory_bound_1). A symptom: the finding that names its cause on "
            "the same layers (an unfused chain, a decomposed activation, a TransData site) absorbs it.",
        how_to_fix="Move fewer bytes: fuse the layer with its neighbours so intermediates stay on chip (the build's "
                   "fusion passes for offline models, fused APIs or graph mode in PyTorch, graph kernel fusion in "
                   "MindSpore; on the SoC, conv + activation + pooling in one layer), use 16-bit or int8 tensors, "
                   "keep layouts consistent (no TransData round trips). Weight-load bound layers: int8 weights or a "
                   "larger batch that reuses each weight; store-bound layers: fuse the consumer. Where the "
                   "toolchain has AOE (ATC models on Ascend, not the SS928/SS927 SVP toolchain), tune tiling with "
                   "AOE so transfers are larger.",
        thresholds=("contexts", "threshold", "min_op_us", "min_saving_us", "recoverable_fraction", "model_share",
                    "max_rows", "confidence", "severity"),
        needs=("ops", "metrics"),
        role="symptom",
    ))
    def layers(self, ctx: AnalysisContext) -> list[Finding]:
        r = ctx.rules
        if not rc.applies(ctx, r["contexts"]):
            rc.skip_note(ctx, "memory-bound.layers")
            return []
        ops = ctx.profile.ops
        ratio, formula = memory_bound_ratio(ops)
        compute = ops["core"].isin(COMPUTE_CORES).to_numpy(dtype=bool)
        ok = compute & np.isfinite(ratio)
        if not ok.any():
            ctx.note("memory-bound: no Memory Bound in the profile (needs PipeUtilization metrics: mte2/mac/vec "
                     "ratios, or a SoC JOB summary)")
            return []
        dur = ops["duration_us"].to_numpy(dtype="float64")
        limit = float(r["threshold"])
        bound = ok & (ratio > limit)
        if not bound.any():
            return []
        compute_time = float(np.nansum(dur[ok]))
        per = _per_layer(ops, bound, ratio)
        del ratio, compute, ok, bound  # the per-task arrays, before the classification of every op is computed
        per = per[per["dur"] >= float(r["min_op_us"])]
        per = _agreeing(per, op_bounds(ctx))
        if not len(per):
            return []
        frac = float(r["recoverable_fraction"])
        per["saving"] = per["extra"] * frac
        saving = float(per["saving"].sum())
        if saving < float(r["min_saving_us"]):
            return []
        per = per.sort_values("saving", ascending=False)
        window = ctx.profile.time.window_us
        share_bound = float(per["dur"].sum()) / compute_time if compute_time > 0 else 0.0
        soc = formula == SOC_FORMULA
        part, part_advice = _dominant(per) if soc else (None, "")
        table_rows = [[str(x.name), str(x.type), round(float(x.dur), 3), round(float(x.ratio_x_dur / x.dur), 3),
                       round(float(x.saving), 3)] for x in per.head(int(r["max_rows"])).itertuples()]
        return [ctx.finding(
            rule="memory-bound.layers",
            title=(f"{len(per)} layer(s) memory bound (Memory Bound > {limit:g}): {fmt_us(float(per['dur'].sum()))}, "
                   f"{pct(share_bound)} of the compute time"),
            severity=severity_for(saving / window, r["severity"]) if window > 0 else "info",
            ops=[str(n) for n in dict.fromkeys(per["name"])],
            evidence={"formula": formula, "threshold": limit, "layers": int(len(per)),
                      "memory_bound_us": float(per["dur"].sum()), "share_of_compute_time": share_bound,
                      "model_memory_bound": share_bound > float(r["model_share"]), "dominant_transfer": part,
                      "source": "SoC JOB op_summary" if soc else "op_summary pipe ratios",
                      "table": table(["layer", "type", "time_us", "memory_bound", "saving_us"], table_rows)},
            estimated_saving_us=saving,
            basis=(f"per layer: time x (1 - 1/MemoryBound), the time data movement adds beyond compute, x "
                   f"{frac:g} (recoverable_fraction)"),
            recommendation=_advice(ctx, part, part_advice, share_bound, float(r["model_share"]), soc,
                                   tunable=not bool(per["at_roof"].all())),
            fix=Fix("code", "cut the bytes these layers move (fusion, smaller dtypes, weight reuse)",
                    {"layers": [str(n) for n in per["name"].head(int(r["max_rows"]))],
                     "dominant_transfer": part}),
            confidence=float(r["confidence"]),
            saving_by_op={str(n): float(s) for n, s in per.groupby("name", sort=False)["saving"].sum().items()},
        )]


def _per_layer(ops: pd.DataFrame, bound: np.ndarray, ratio: np.ndarray) -> pd.DataFrame:
    """Per layer (name, type) over the ``bound`` tasks: time, ratio x time, the time beyond compute (time x (1 -
    1/MemoryBound)) and, on the SoC, each transfer ratio x time. Grouped on integer codes and summed one column
    at a time, as a groupby of the tasks' frame would (same order, same sums) without building it (~120 MB)."""
    names, name_text = text_ids(ops["name"], bound, missing=None)
    types, type_text = text_ids(ops["type"], bound, missing=None)
    keep = (names >= 0) & (types >= 0)  # a task without a name or type is in no layer (a groupby drops NaN keys)
    if not keep.all():
        bound = bound.copy()
        bound[bound] = keep
        names, types = names[keep], types[keep]
    span = len(type_text) + 1
    group, pairs = pd.factorize(names.astype(np.int64) * span + types)
    del names, types

    def total(values: np.ndarray) -> np.ndarray:
        return pd.Series(values).groupby(group, sort=False).sum(min_count=1).to_numpy()

    per = pd.DataFrame({"name": name_text[pairs // span], "type": type_text[pairs % span]})
    dur = ops["duration_us"].to_numpy(dtype="float64")[bound]
    known = np.nan_to_num(dur)
    per["dur"] = total(dur)
    mb = ratio[bound]
    per["ratio_x_dur"] = total(mb * known)
    per["extra"] = total(known * (1.0 - 1.0 / mb))
    del mb, known
    for col in _SOC_PARTS:
        if col in ops.columns:
            per[col] = total(metric_values(ops[col], bound) * dur)
    return per


def _agreeing(per: pd.DataFrame, bounds: pd.DataFrame) -> pd.DataFrame:
    """The layers the shared op classification (:mod:`advisor.toolkit.bound`) does not contradict (issue 13: one
    verdict per op). A Memory Bound above 1 on an op whose intensity is above the ridge (a matmul re-reading its
    operands) is the classification's compute case, and a short op far below its roof is latency bound: neither is
    reported here. Memory-bound ops, ops with no clear bound and ops the classification could not judge stay; so do
    ops at their memory roof, whose traffic only fusion or smaller dtypes remove (``at_roof`` says so: no tiling
    advice for them)."""
    if not len(bounds):
        return per.assign(at_roof=False)
    judged = bounds.groupby(["name", "type"], sort=False).agg(
        bound=("bound", "first"), at_roof=("at_roof", "all")).reset_index()
    judged["name"] = judged["name"].astype(str)
    judged["type"] = judged["type"].astype(str)
    out = per.merge(judged, on=["name", "type"], how="left")
    keep = ~out["bound"].isin(["compute", "latency"])
    out["at_roof"] = out["at_roof"].astype("boolean").fillna(False).astype(bool)
    return out[keep].drop(columns=["bound"])


def _dominant(per: pd.DataFrame) -> tuple[str | None, str]:
    """The SoC transfer (store / feature-map load / weight load) with the most time-weighted ratio."""
    totals = {c: float(per[c].sum()) for c in _SOC_PARTS if c in per.columns and per[c].notna().any()}
    if not totals:
        return None, ""
    best = max(totals, key=lambda c: totals[c])
    return _SOC_PARTS[best]


def _advice(ctx: AnalysisContext, part: str | None, part_advice: str, share: float, model_share: float,
            soc: bool, tunable: bool) -> str:
    """The fix for this run's toolchain; tiling tuning (AOE) only where some layer is below its roof."""
    lead = (rc.unknown_context(ctx) + "These layers wait for data more than they compute; "
            f"{pct(share)} of the compute time is in them"
            + (" -- the model as a whole is memory bound. " if share > model_share else ". "))
    if soc:
        text = lead + (f"Their dominant transfer is {part}: {part_advice}. " if part else "")
        text += ("Check DDR Read/Write per layer in the JOB summary after the change. The SoC toolchain has no "
                 "AOE: the fix is in the model (fusion, dtypes, shapes).")
        return text
    half = rc.half_dtype(ctx.platform)
    fam = rc.family_of(ctx)
    fusion = {rc.TORCH: "fuse them with their neighbours so intermediates stay on chip (fused torch_npu APIs, or "
                        "graph mode so the graph compiler fuses them)",
              rc.MINDSPORE: "fuse them with their neighbours so intermediates stay on chip (graph kernel fusion: "
                            "mindspore.set_context(enable_graph_kernel=True))",
              rc.OM: "fuse them with their neighbours so intermediates stay on chip (check the build's fusion "
                      "passes: a fusion switch file that disables UB fusion keeps them apart)",
              }.get(fam, "fuse them with their neighbours so intermediates stay on chip")
    small = f"16-bit ({half}) or int8" if supports_dtype(ctx.platform, "int8") else f"16-bit ({half})"
    text = lead + (f"Move fewer bytes: {fusion}, use {small} tensors, and avoid TransData round "
                   "trips between them.")
    if not tunable:
        text += (" They already run at the chip's memory roof (advisor.toolkit.bound): only fewer bytes help, not "
                 "tuning.")
    elif fam == rc.OM and has_tool(ctx.platform, "aoe"):
        framework = atc_option(graph_cmdline(ctx.graph), "framework")
        model = "<model>" if framework else "<model.onnx>"
        text += (f" Then tune their tiling with AOE operator tuning (aoe --framework={framework or 5} "
                 f"--model={model} --job_type=2{'' if framework else ', for an ONNX source model'}).")
    return text


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [MemoryBoundKB]
