"""memory-bound: layers whose time goes to moving data, by the one shared op classification.

Which layers are memory bound is :mod:`advisor.toolkit.bound`'s answer (``memory_bound_share``): ops below the ridge
of their unit that reach no other bound, and ops with no clear bound whose Memory Bound -- the chip's own definition
-- is above the classification's ``memory_bound_ratio``. The model summary and the roofline knowledge base read the
same table, so the three never disagree on an op or on the share of the compute time. The SS928/SS927 SoC profiling
guide defines, per layer of a JOB summary, ``Memory Bound = max(Dstr, DLD, WLD) / max(Mac Busy, Vec Ppen)`` (DDR
store, feature-map load and weight load against the busiest compute unit); msprof writes ``memory_bound =
mte2_ratio / max(mac_ratio, vec_ratio)`` in op_summary. The ratio sizes the saving and, on the SoC, which transfer
dominates decides the advice; the execution context (the framework's own fusion) and the toolchain (the SoC's has no
AOE) decide the rest. It is a symptom: the cause on the same layers (an unfused chain, a decomposed activation, a
TransData site) absorbs it.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection, metric_values
from advisor.platform import has_tool, supports_dtype
from advisor.toolkit import run_context as rc
from advisor.toolkit.bound import memory_bound_share, op_bounds, rules_of
from advisor.toolkit.common import atc_option, graph_cmdline, pct, severity_for
from advisor.toolkit.model_summary import SOC_FORMULA, memory_bound_formula
from advisor.toolkit.time import fmt_us

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
    api_version = "1.5"
    requires = ("ops",)
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "memory-bound"

    @rule(RuleDoc(
        id="memory-bound.layers",
        title="Layers bound by data movement (the shared classification's memory-bound ops)",
        what="Reports the layers the shared op classification (rules file bound) calls memory bound -- below the "
             "ridge of their unit and dtype with no other bound, or with no clear bound and a Memory Bound above "
             "the bound rules' memory_bound_ratio (the SoC guide's max(Dstr, DLD, WLD) / max(Mac Busy, Vec Ppen) "
             "for SS928/SS927 JOB summaries, msprof's mte2_ratio / max(mac_ratio, vec_ratio) elsewhere) -- with "
             "their share of the compute time (the model summary's memory_bound figure) and, on the SoC, the "
             "transfer that dominates them; reported when they can save {min_saving_us} µs in all. Not assessed "
             "for kernel-development captures (contexts: {contexts}): a single kernel's bound is the roofline "
             "finding's.",
        why="A layer above 1 spends more time moving data between DDR/HBM and the core than computing: the compute "
            "units idle. The part of its time beyond compute, time x (1 - 1/MemoryBound), is what less traffic can "
            "recover ({recoverable_fraction} of it is counted; a layer whose Memory Bound is not above 1 is memory "
            "bound by its intensity and recovers nothing here). Above {model_share} of the compute time the whole "
            "model is memory bound (msprof rule_memory_bound_1). A symptom: the finding that names its cause on "
            "the same layers (an unfused chain, a decomposed activation, a TransData site) absorbs it.",
        how_to_fix="Move fewer bytes: fuse the layer with its neighbours so intermediates stay on chip (the build's "
                   "fusion passes for offline models, fused APIs or graph mode in PyTorch, graph kernel fusion in "
                   "MindSpore; on the SoC, conv + activation + pooling in one layer), use 16-bit or int8 tensors, "
                   "keep layouts consistent (no TransData round trips). Weight-load bound layers: int8 weights or a "
                   "larger batch that reuses each weight; store-bound layers: fuse the consumer. Where the "
                   "toolchain has AOE (ATC models on Ascend, not the SS928/SS927 SVP toolchain), tune tiling with "
                   "AOE so transfers are larger.",
        thresholds=("contexts", "min_saving_us", "recoverable_fraction", "model_share", "max_rows", "confidence",
                    "severity"),
        needs=("ops", "metrics"),
        role="symptom",
    ))
    def layers(self, ctx: AnalysisContext) -> list[Finding]:
        r = ctx.rules
        if not rc.applies(ctx, r["contexts"]):
            rc.skip_note(ctx, "memory-bound.layers")
            return []
        view = memory_bound_share(op_bounds(ctx))
        if view is None or not len(view.ops):
            return []
        ops = ctx.profile.ops
        formula = memory_bound_formula(ops)
        per = _per_layer(view.ops)
        if not per["ratio"].notna().any():
            ctx.note("memory-bound: no Memory Bound in the profile (needs PipeUtilization metrics: mte2/mac/vec "
                     "ratios, or a SoC JOB summary): the memory-bound layers' saving is not estimated")
        frac = float(r["recoverable_fraction"])
        per["saving"] = per["dur"] * np.clip(1.0 - 1.0 / per["ratio"].to_numpy(dtype="float64"), 0.0, None) * frac
        per["saving"] = per["saving"].fillna(0.0)
        saving = float(per["saving"].sum())
        if saving < float(r["min_saving_us"]):
            return []
        per = per.sort_values("saving", ascending=False, kind="stable")
        window = ctx.profile.time.window_us
        share_bound = view.share
        soc = formula == SOC_FORMULA
        part, part_advice = _dominant(_soc_parts(ops, per)) if soc else (None, "")
        limit = float(rules_of(ctx)["memory_bound_ratio"])
        table_rows = [[str(x.name), str(x.type), round(float(x.dur), 3),
                       None if pd.isna(x.ratio) else round(float(x.ratio), 3), round(float(x.saving), 3)]
                      for x in per.head(int(r["max_rows"])).itertuples()]
        return [ctx.finding(
            rule="memory-bound.layers",
            title=(f"{len(per)} layer(s) memory bound: {fmt_us(view.time_us)}, {pct(share_bound)} of the compute "
                   "time"),
            severity=severity_for(saving / window, r["severity"]) if window > 0 else "info",
            ops=[str(n) for n in dict.fromkeys(per["name"])],
            evidence={"formula": formula, "threshold": limit, "layers": int(len(per)),
                      "memory_bound_us": view.time_us, "share_of_compute_time": share_bound,
                      "compute_us": view.compute_us, "model_memory_bound": share_bound > float(r["model_share"]),
                      "dominant_transfer": part,
                      "source": "SoC JOB op_summary" if soc else "op_summary pipe ratios",
                      "basis": "the shared op classification (advisor.toolkit.bound), as the model summary's "
                               "memory_bound and the roofline findings",
                      "table": table(["layer", "type", "time_us", "memory_bound", "saving_us"], table_rows)},
            estimated_saving_us=saving,
            basis=(f"per layer: time x (1 - 1/MemoryBound), the time data movement adds beyond compute, x "
                   f"{frac:g} (recoverable_fraction); 0 where the Memory Bound is not above 1"),
            recommendation=_advice(ctx, part, part_advice, share_bound, float(r["model_share"]), soc,
                                   tunable=not bool(per["at_roof"].all())),
            fix=Fix("code", "cut the bytes these layers move (fusion, smaller dtypes, weight reuse)",
                    {"layers": [str(n) for n in per["name"].head(int(r["max_rows"]))],
                     "dominant_transfer": part}),
            confidence=float(r["confidence"]),
            saving_by_op={str(n): float(v) for n, v in per.groupby("name", sort=False)["saving"].sum().items()
                          if v > 0},
        )]


def _per_layer(mem: pd.DataFrame) -> pd.DataFrame:
    """Per layer (name, type) of the memory-bound rows of the classification: time, the time-weighted Memory Bound
    (NaN where none was measured) and whether every row is at its roof."""
    ratio = mem["memory_bound_ratio"].to_numpy(dtype="float64")
    dur = mem["total_us"].to_numpy(dtype="float64")
    ok = np.isfinite(ratio)
    frame = pd.DataFrame({"name": mem["name"].astype(str).to_numpy(), "type": mem["type"].astype(str).to_numpy(),
                          "dur": dur, "w": np.where(ok, ratio * dur, 0.0), "d": np.where(ok, dur, 0.0),
                          "at_roof": mem["at_roof"].astype(bool).to_numpy()})
    per = frame.groupby(["name", "type"], sort=False).agg(dur=("dur", "sum"), w=("w", "sum"), d=("d", "sum"),
                                                           at_roof=("at_roof", "all")).reset_index()
    per["ratio"] = per["w"] / per["d"].where(per["d"] > 0)
    return per.drop(columns=["w", "d"])


def _soc_parts(ops: pd.DataFrame, per: pd.DataFrame) -> pd.DataFrame:
    """For SoC JOB summaries: each transfer ratio x time summed over the tasks of ``per``'s layers (one row)."""
    names = set(per["name"])
    rows = ops["name"].astype(str).isin(names).to_numpy()
    dur = ops["duration_us"].to_numpy(dtype="float64")[rows]
    at = np.flatnonzero(rows)
    return pd.DataFrame([{col: float(np.nansum(metric_values(ops[col], at) * dur))
                          for col in _SOC_PARTS if col in ops.columns}])


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
    fam = rc.family(ctx)
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
