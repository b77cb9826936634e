"""AI CPU knowledge base: ops that fell back to the AI CPU, why, what moves them to AI Core, and AI Core idle time.

An op runs on the AI CPU when no AI Core kernel supports its type, dtype or shape. AI CPU kernels are one to two
orders of magnitude slower and, on the same stream, leave the AI Core idle while they run. The ops come from the
profile (task type ``AI_CPU``) and the model graph (engine ``AI_CPU``, from ``_ge_attr_op_kernel_lib_name``); each
gets its reasons and the fix for the first one, worded for what the user runs (torch, MindSpore, an offline model).

Roles: an AI CPU op (``aicpu.ops``) is a cause; the AI Core idling while AI CPU tasks run (``aicpu.serial``) is
its symptom, named on the same ops so the report folds it under them.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection
from advisor.platform import cann_release
from advisor.toolkit.advice import atc_option_fits, family, for_run
from advisor.toolkit.common import (
    atc_option,
    cat_map,
    detected_soc,
    dtypes_of,
    elements,
    fmt_shapes,
    graph_cmdline,
    node_dtypes,
    node_shapes,
    output_elements,
    severity_for,
    shapes_of,
    similar_size_median,
    type_from_name,
    type_mask,
)
from advisor.toolkit.time import covered_before, union, window_us

REASON_TITLES = {
    "no_aicore_kernel": "op type without an AI Core kernel",
    "double": "double-precision tensors",
    "int64": "64-bit integer tensors",
    "precision_mode": "fp32 kept by --precision_mode",
    "unsupported_dtype": "dtype outside the AI Core kernel's list",
    "dynamic_shape": "dynamic shape",
    "unknown": "no known reason",
}
"""Reasons in priority order (:func:`assign_reasons`): the first that applies decides the fix."""


@dataclass
class AicpuOp:
    """One AI CPU op (name + type + tensor description) with its measured tasks."""

    name: str
    type: str
    in_dtypes: tuple[str, ...] = ()
    out_dtypes: tuple[str, ...] = ()
    in_shapes: str = ""
    out_shapes: str = ""
    dynamic: bool = False
    tasks: int = 0
    total_us: float = 0.0
    max_us: float = 0.0
    elements: int = 0
    in_graph: bool = False
    reasons: list[str] = field(default_factory=list)
    detail: dict[str, str] = field(default_factory=dict)
    estimate_us: float = 0.0
    estimate_basis: str = ""

    @property
    def mean_us(self) -> float:
        return self.total_us / self.tasks if self.tasks else 0.0

    @property
    def saving_us(self) -> float:
        return max(0.0, self.mean_us - self.estimate_us) * self.tasks

    @property
    def dtypes(self) -> set[str]:
        return set(self.in_dtypes) | set(self.out_dtypes)


# ---------------------------------------------------------------------------------------------------------
# collecting AI CPU ops
# ---------------------------------------------------------------------------------------------------------
_GROUP_COLS = ["name", "type", "input_dtypes", "output_dtypes", "input_shapes", "output_shapes", "op_state"]


def profile_aicpu_ops(ops: pd.DataFrame) -> list[AicpuOp]:
    """AI CPU tasks grouped by op name, type and tensor description (one group per distinct launch)."""
    mask = type_mask(ops["core"], ["AI_CPU"])
    if not mask.any():
        return []
    sub = ops.loc[mask, _GROUP_COLS + ["duration_us"]].copy()
    for c in _GROUP_COLS:
        sub[c] = sub[c].astype(object).where(sub[c].notna(), "")
    sub["_n"] = output_elements(ops.loc[mask])
    g = sub.groupby(_GROUP_COLS, sort=False, dropna=False)
    agg = g.agg(total_us=("duration_us", "sum"), tasks=("duration_us", "size"), max_us=("duration_us", "max"),
                n=("_n", "max")).reset_index()
    out: list[AicpuOp] = []
    for rec in agg.itertuples(index=False):
        shapes = str(rec.input_shapes) + ";" + str(rec.output_shapes)
        out.append(AicpuOp(
            name=str(rec.name), type=str(rec.type) or type_from_name(str(rec.name)), in_dtypes=dtypes_of(rec.input_dtypes),
            out_dtypes=dtypes_of(rec.output_dtypes), in_shapes=str(rec.input_shapes), out_shapes=str(rec.output_shapes),
            dynamic=str(rec.op_state).lower() == "dynamic" or _has_unknown_dim(shapes),
            tasks=int(rec.tasks), total_us=float(np.nan_to_num(rec.total_us)), max_us=float(np.nan_to_num(rec.max_us)),
            elements=int(rec.n)))
    return out


def _has_unknown_dim(shapes: str) -> bool:
    return any(d < 0 for s in shapes_of(shapes) for d in s)


def graph_aicpu_ops(ctx: AnalysisContext, found: list[AicpuOp]) -> list[AicpuOp]:
    """Add AI CPU nodes of the graph; fill graph dtypes/shapes into the profile's groups of the same name."""
    graph = ctx.graph
    if graph is None:
        return found
    by_name: dict[str, list[AicpuOp]] = defaultdict(list)
    for op in found:
        by_name[op.name].append(op)
    out = list(found)
    for name, data in graph.g.nodes(data=True):
        if data.get("engine") != "AI_CPU":
            continue
        ins, outs = node_shapes(graph, name, "in"), node_shapes(graph, name, "out")
        in_dt, out_dt = tuple(node_dtypes(graph, name, "in")), tuple(node_dtypes(graph, name, "out"))
        attrs = data.get("attrs") or {}
        dynamic = bool(attrs.get("_is_unknown_shape") or attrs.get("_force_unknown_shape")
                       or attrs.get("_unknown_shape")) or any(d < 0 for s in ins + outs for d in s)
        if name in by_name:
            for op in by_name[name]:
                op.in_graph = True
                op.in_dtypes = op.in_dtypes or in_dt
                op.out_dtypes = op.out_dtypes or out_dt
                op.dynamic = op.dynamic or dynamic
            continue
        out.append(AicpuOp(name=name, type=str(data.get("type", "")), in_dtypes=in_dt, out_dtypes=out_dt,
                           in_shapes=fmt_shapes(ins), out_shapes=fmt_shapes(outs), dynamic=dynamic,
                           elements=elements(outs[0]) if outs else 0, in_graph=True))
    return out


# ---------------------------------------------------------------------------------------------------------
# reasons
# ---------------------------------------------------------------------------------------------------------
def assign_reasons(op: AicpuOp, rules: Mapping[str, Any], cmdline: str, cann_version: object) -> None:
    """Every reason the op may run on the AI CPU, in priority order (``REASON_TITLES``)."""
    dtypes = op.dtypes
    listed = rules["aicpu_op_types"].get(op.type)
    if listed and _listed_applies(listed, op, cann_version):
        op.reasons.append("no_aicore_kernel")
        op.detail["no_aicore_kernel"] = f"{op.type} ({listed['status']})"
    double = sorted(dtypes & set(rules["double_dtypes"]))
    if double:
        op.reasons.append("double")
        op.detail["double"] = ", ".join(double)
    int64 = sorted(dtypes & set(rules["int64_dtypes"]))
    if int64:
        op.reasons.append("int64")
        side = "input" if set(op.in_dtypes) & set(int64) else "output"
        op.detail["int64"] = f"{', '.join(int64)} {side}"
    mode = atc_option(cmdline, "precision_mode") or atc_option(cmdline, "precision_mode_v2")
    if mode and mode in set(rules["precision"]["keep_fp32_modes"]) and "FLOAT" in dtypes:
        op.reasons.append("precision_mode")
        op.detail["precision_mode"] = f"--precision_mode={mode} with FLOAT tensors"
    supported = rules["aicore_dtypes"]
    allowed = set((supported.get("by_type") or {}).get(op.type) or supported["default"])
    outside = sorted(d for d in dtypes if allowed and d not in allowed and d not in int64 and d not in double)
    if outside:
        op.reasons.append("unsupported_dtype")
        op.detail["unsupported_dtype"] = ", ".join(outside)
    if op.dynamic:
        op.reasons.append("dynamic_shape")
        op.detail["dynamic_shape"] = "dynamic op state or unknown (-1) dims"
    if not op.reasons:
        op.reasons.append("unknown")


def _listed_applies(spec: Mapping[str, Any], op: AicpuOp, cann_version: object) -> bool:
    """A listed op type lacks an AI Core kernel for these input dtypes, at this CANN release (unknown: assumed)."""
    when = set(spec.get("when_dtypes") or ())
    if when and not set(op.in_dtypes) & when:
        return False
    until, have = cann_release(spec.get("until_cann")), cann_release(cann_version)
    return until is None or have is None or have < until


# ---------------------------------------------------------------------------------------------------------
# AI Core estimate
# ---------------------------------------------------------------------------------------------------------
class AicoreReference:
    """Durations and sizes of the profile's AI Core ops, to estimate what a moved op would take."""

    def __init__(self, ops: pd.DataFrame, cores: Sequence[str], est: Mapping[str, Any]) -> None:
        mask = type_mask(ops["core"], cores) if len(ops) else np.zeros(0, bool)
        self.dur = ops["duration_us"].to_numpy(dtype="float64")[mask]
        self.size = output_elements(ops)[mask] if len(ops) else np.zeros(0, np.int64)
        self.types = cat_map(ops["type"], str, "")[mask] if len(ops) else np.zeros(0, object)
        self.factor = float(est["size_factor"])
        self.min_same = int(est["min_same_type"])
        self.min_any = int(est["min_any_type"])
        self.ratio = float(est["aicore_ratio"])

    def estimate(self, op: AicpuOp) -> tuple[float, str]:
        if op.elements > 0 and len(self.dur):
            same = self.types == op.type
            m = similar_size_median(self.dur[same], self.size[same], op.elements, self.factor, self.min_same)
            if m is not None:
                return min(m, op.mean_us), f"median of {op.type} on AI Core at similar size in this profile"
            m = similar_size_median(self.dur, self.size, op.elements, self.factor, self.min_any)
            if m is not None:
                return min(m, op.mean_us), "median of AI Core ops of similar size in this profile"
        return op.mean_us * self.ratio, f"AI CPU time x {self.ratio:g} (estimate.aicore_ratio; no similar AI Core op)"


# ---------------------------------------------------------------------------------------------------------
# serialization (AI Core idle while AI CPU runs)
# ---------------------------------------------------------------------------------------------------------
def exposed_aicpu(ops: pd.DataFrame, cores: Sequence[str]) -> pd.DataFrame:
    """Per AI CPU task: its duration and the part of it during which no AI Core task runs."""
    start = ops["start_us"].to_numpy(dtype="float64")
    dur = ops["duration_us"].to_numpy(dtype="float64")
    ok = np.isfinite(start) & np.isfinite(dur)
    cpu = type_mask(ops["core"], ["AI_CPU"]) & ok
    aic = type_mask(ops["core"], cores) & ok
    bs, be = union(start[aic], start[aic] + dur[aic])
    s, e = start[cpu], start[cpu] + dur[cpu]
    overlap = covered_before(bs, be, e) - covered_before(bs, be, s)
    return pd.DataFrame({"name": ops["name"][cpu].astype(str).to_numpy(),
                         "type": ops["type"][cpu].astype(str).to_numpy(), "duration_us": dur[cpu],
                         "exposed_us": np.maximum(dur[cpu] - overlap, 0.0)})


# ---------------------------------------------------------------------------------------------------------
# the knowledge base
# ---------------------------------------------------------------------------------------------------------
@dataclass
class _Scan:
    """What both rules read, computed once per run: every AI CPU op, the ones reported, the run's facts."""

    found: list[AicpuOp]
    flagged: list[AicpuOp]
    cmdline: str
    window: float


class AicpuKB(KnowledgeBase):
    id = "aicpu"
    title = "AI CPU fallback"
    version = "1.1.0"
    api_version = "1.5"
    requires = ()
    requires_any = ("ops", "graph")
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "aicpu"

    def _scan(self, ctx: AnalysisContext) -> _Scan:
        if getattr(self, "_cached", None) is None:
            rules = ctx.rules
            ops = ctx.profile.ops
            cmdline = graph_cmdline(ctx.graph)
            found = graph_aicpu_ops(ctx, profile_aicpu_ops(ops) if len(ops) else [])
            by_design = set(rules["by_design_types"])
            queue = [op for op in found if op.type in by_design]
            if queue:
                ctx.note(f"aicpu: {', '.join(dict.fromkeys(op.name for op in queue))} "
                         f"({sum(op.total_us for op in queue):.1f} µs) are device data-queue ops that run on the AI "
                         "CPU by design, waiting for the host's data pipeline: not counted as AI CPU fallbacks")
            found = [op for op in found if op.type not in by_design]
            ref = AicoreReference(ops, rules["ai_core_cores"], rules["estimate"])
            flagged = []
            for op in found:
                if op.tasks and op.max_us <= float(rules["min_duration_us"]):
                    continue
                assign_reasons(op, rules, cmdline, ctx.profile.meta.cann_version)
                if op.tasks:
                    op.estimate_us, op.estimate_basis = ref.estimate(op)
                flagged.append(op)
            self._cached = _Scan(found, flagged, cmdline, window_us(ctx.profile) if len(ops) else 0.0)
        return self._cached

    @rule(RuleDoc(
        id="aicpu.ops",
        explains={
            "aicpu.serial": "the op runs on AI Core once it has a kernel there: the AI Core no longer idles while it runs on the AI CPU",
        },
        title="Ops running on the AI CPU",
        what="Lists ops that run on the AI CPU (profile task type AI_CPU; graph engine AI_CPU from "
             "_ge_attr_op_kernel_lib_name) whose longest task exceeds {min_duration_us} µs, with their share of "
             "the analyzed time and the reason: op type without an AI Core kernel (aicpu_op_types, each marked "
             "confirmed or empirical), double precision, 64-bit integers, fp32 kept by --precision_mode, a dtype "
             "outside the AI Core kernel's list (aicore_dtypes), or dynamic shape. One finding per reason (per op "
             "type for missing kernels). Device data-queue ops ({by_design_types}) run there by design and are "
             "left out.",
        why="An AI CPU kernel is typically 10-100x slower than the AI Core one and blocks the AI Core stream while "
            "it runs; msprof only says 'check and reduce AI CPU operators'. The saving is the AI CPU time minus "
            "what the op would take on AI Core (the median of AI Core ops of similar size in the same profile, "
            "else the AI CPU time x {estimate.aicore_ratio}).",
        how_to_fix="Per reason, worded for the framework the run uses: cast int64 -> int32 where the values allow "
                   "(indices, shapes); cast double -> float; rewrite ops without an AI Core kernel (IndexPut -> "
                   "mask multiply, NonZero -> a kept mask, TopK on ints -> cast to fp32, upgrade CANN for "
                   "ArgMin; in an offline model, end the model before host-style post-processing such as NMS "
                   "with atc --out_nodes); build with --precision_mode={precision.suggest_mode} instead of a mode "
                   "that keeps fp32; fix shapes or, for dynamic-shape offline models where the CANN release and "
                   "chip have it, --ac_parallel_enable=1.",
        thresholds=("min_duration_us", "severity", "int64_dtypes", "double_dtypes", "aicore_dtypes",
                    "dtype_suggestion", "aicpu_op_types", "estimate", "precision", "confidence", "by_design_types",
                    "inserted_name_prefixes"),
        needs=("ops", "graph"),
        role="cause",
    ))
    def check_ops(self, ctx: AnalysisContext) -> Iterable[Finding]:
        scan = self._scan(ctx)
        groups: dict[tuple[str, str], list[AicpuOp]] = defaultdict(list)
        for op in scan.flagged:
            reason = op.reasons[0]
            groups[(reason, op.type if reason == "no_aicore_kernel" else "")].append(op)
        for (reason, op_type), members in sorted(groups.items(), key=lambda kv: -sum(o.saving_us for o in kv[1])):
            yield self._ops_finding(ctx, scan, reason, op_type, members)

    def _ops_finding(self, ctx: AnalysisContext, scan: _Scan, reason: str, op_type: str,
                     members: list[AicpuOp]) -> Finding:
        rules = ctx.rules
        by_op: dict[str, float] = defaultdict(float)
        for op in members:
            by_op[op.name] += op.saving_us
        saving = sum(by_op.values())
        total = sum(op.total_us for op in members)
        window = scan.window
        share = total / window if window else 0.0
        timed = any(op.tasks for op in members)
        rows = [[op.name, op.type, ";".join(op.in_dtypes), ";".join(op.out_dtypes), op.out_shapes or op.in_shapes,
                 op.tasks, round(op.total_us, 3), round(op.max_us, 3), ", ".join(op.reasons),
                 round(op.estimate_us, 3), round(op.saving_us, 3)]
                for op in sorted(members, key=lambda o: -o.total_us)]
        bases = sorted({op.estimate_basis for op in members if op.estimate_basis})
        label = REASON_TITLES[reason] + (f" ({op_type})" if op_type else "")
        rec, fix, confidence = _advice(ctx, scan, reason, op_type, members)
        return ctx.finding(
            rule="aicpu.ops",
            title=f"{len(members)} AI CPU op(s): {label}",  # no per-rank figure: data-parallel ranks merge
            severity=severity_for(saving / window, rules["severity"]) if window and timed else "info",
            ops=list(dict.fromkeys(op.name for op in members)),
            evidence={"reason": reason, "details": {op.name: op.detail.get(reason, "") for op in members},
                      "aicpu_us": total, "share_of_window": share, "window_us": window,
                      "min_duration_us": float(rules["min_duration_us"]), "context": ctx.profile.meta.context,
                      "table": table(["op", "type", "in dtypes", "out dtypes", "shape", "tasks", "total_us", "max_us",
                                      "reasons", "aicore_estimate_us", "saving_us"], rows)},
            estimated_saving_us=saving,
            basis=("AI CPU time minus the estimated AI Core time of the same op per task: " + "; ".join(bases))
            if timed else "no timing (graph only)",
            recommendation=rec,
            fix=fix,
            confidence=confidence,
            saving_by_op={k: v for k, v in by_op.items() if v > 0},
        )

    @rule(RuleDoc(
        id="aicpu.serial",
        title="AI Core idle while AI CPU tasks run",
        what="Measures the time during which an AI CPU task runs and no AI Core / AI Vector core task "
             "({ai_core_cores}) overlaps it, as a share of the analyzed time; fires above "
             "{parallelism.max_serial_share} (msprof rule_ai_core_and_ai_cpu_parallelism_1: 0.05). Named on the AI "
             "CPU ops, so the aicpu.ops finding on the same ops explains it.",
        why="AI CPU tasks serialized with the AI Core stream add their whole duration to the step; "
            "{parallelism.recoverable_fraction} of that time is counted as recoverable (data dependencies keep "
            "the rest on the critical path).",
        how_to_fix="Move the ops to AI Core (the aicpu.ops findings say why each runs on the AI CPU). For "
                   "dynamic-shape offline models, --ac_parallel_enable=1 (GE option AC_PARALLEL_ENABLE, CANN 8.0 "
                   "and later, not on Ascend 310/310B) lets AI CPU ops run on their own stream beside AI Core.",
        thresholds=("parallelism", "ai_core_cores", "severity", "confidence", "by_design_types"),
        needs=("ops",),
        role="symptom",
    ))
    def check_serial(self, ctx: AnalysisContext) -> Iterable[Finding]:
        ops = ctx.profile.ops
        if not len(ops):
            if ctx.graph is not None and self._scan(ctx).found:
                ctx.note("aicpu.serial: skipped, needs a profile with task start times")
            return
        if not type_mask(ops["core"], ["AI_CPU"]).any():
            return
        scan = self._scan(ctx)
        rules = ctx.rules
        par = rules["parallelism"]
        exp = exposed_aicpu(ops, rules["ai_core_cores"])
        by_design = set(rules["by_design_types"])
        exp = exp[~exp["type"].isin(by_design).to_numpy()]
        window = scan.window
        if not len(exp) or not window:
            return
        exposed = float(exp["exposed_us"].sum())
        share = exposed / window
        limit = float(par["max_serial_share"])
        if share <= limit:
            return
        frac = float(par["recoverable_fraction"])
        per = exp.groupby("name", sort=False).agg(tasks=("duration_us", "size"), aicpu_us=("duration_us", "sum"),
                                                   exposed_us=("exposed_us", "sum"))
        per = per.sort_values("exposed_us", ascending=False)
        by_op = {str(k): float(v) * frac for k, v in per["exposed_us"].items() if v > 0}
        rows = [[str(k), int(r.tasks), round(float(r.aicpu_us), 3), round(float(r.exposed_us), 3)]
                for k, r in per.iterrows()]
        rec, fix = _serial_advice(ctx, scan, list(by_op))
        yield ctx.finding(
            rule="aicpu.serial",
            title="AI Core idle while AI CPU tasks run",
            severity=severity_for(exposed * frac / window, rules["severity"]),
            ops=list(by_op) or [str(k) for k in per.index],
            evidence={"serialized_us": exposed, "share_of_window": share, "max_serial_share": limit,
                      "aicpu_us": float(exp["duration_us"].sum()), "window_us": window,
                      "table": table(["op", "tasks", "aicpu_us", "ai_core_idle_us"], rows)},
            estimated_saving_us=exposed * frac,
            basis=f"{frac:.0%} (parallelism.recoverable_fraction) of the AI CPU time with no AI Core task running; "
                  "data dependencies keep the rest on the critical path",
            recommendation=rec,
            fix=fix,
            confidence=float(rules["confidence"]["serial"]),
            saving_by_op=by_op,
        )


# ---------------------------------------------------------------------------------------------------------
# advice per reason, worded for the run's framework (advisor.toolkit.advice)
# ---------------------------------------------------------------------------------------------------------
_INT64_SNIPPETS = {
    "torch": "idx = idx.to(torch.int32)  # before the op; values < 2^31",
    "mindspore": "idx = ops.cast(idx, mindspore.int32)  # before the op; values < 2^31",
    "om": ("import onnx\nm = onnx.load('model.onnx')  # the model ATC converts\n"
           "# per 64-bit index/shape tensor feeding these ops: a Cast to INT32 in front of its consumer\n"
           "cast = onnx.helper.make_node('Cast', [idx], [idx + '_i32'], to=onnx.TensorProto.INT32)\n"
           "# rewire the consumer's input to idx + '_i32', then onnx.save(m, 'model_i32.onnx') and rebuild"),
}
_INT64_CAST_SNIPPETS = {
    "torch": "t = t.to(torch.int32)  # instead of .long() / torch.int64 / uint64",
    "mindspore": "t = ops.cast(t, mindspore.int32)  # instead of mindspore.int64",
    "om": ("import onnx\nm = onnx.load('model.onnx')  # the model ATC converts\nfor n in m.graph.node:\n"
           "    if n.op_type == 'Cast' and n.name in CASTS:  # the casts named in this finding\n"
           "        for a in n.attribute:\n            if a.name == 'to':\n"
           "                a.i = onnx.TensorProto.INT32\nonnx.save(m, 'model_i32.onnx')  # then rebuild with atc"),
}
_DOUBLE_SNIPPETS = {
    "torch": "x = x.float()  # or .to(torch.float32); np.float32 for numpy constants",
    "mindspore": "x = ops.cast(x, mindspore.float32)",
    "om": "# before export: float32 constants and inputs (numpy float64 constants become DOUBLE in the ONNX graph)",
}


def _names(members: Sequence[AicpuOp]) -> str:
    return ", ".join(dict.fromkeys(op.name for op in members[:5])) + (" ..." if len(members) > 5 else "")


def _where(fam: str) -> str:
    """Where the user changes the model, by framework family."""
    return {"om": "in the model before ATC conversion (the exported ONNX / framework model)",
            "torch": "in the model code", "mindspore": "in the network code"}.get(fam, "in the model")


def _advice(ctx: AnalysisContext, scan: _Scan, reason: str, op_type: str,
            members: list[AicpuOp]) -> tuple[str, Fix, float]:
    rules = ctx.rules
    conf = rules["confidence"]
    fam = family(ctx)
    names = _names(members)
    if reason == "no_aicore_kernel":
        spec = rules["aicpu_op_types"][op_type]
        text = for_run(spec["fix"], fam)
        snippet = for_run(spec.get("snippet"), fam)
        rec = f"{op_type} has no AI Core kernel here ({spec['status']}: {spec['source']}). {text} Ops: {names}."
        data = {"op_type": op_type, "status": spec["status"], **({"snippet": snippet} if snippet else {})}
        return rec, Fix(spec["fix_kind"], text, data), float(conf[spec["status"]])
    if reason == "double":
        rec = (f"Double-precision tensors keep {names} on the AI CPU; AI Core kernels work in float32/float16. "
               f"Cast to float32 {_where(fam)} where the tensor is created (float64 constants and inputs).")
        return rec, Fix("code", "cast double tensors to float32", _snippet(_DOUBLE_SNIPPETS, fam)), \
            float(conf["double"])
    if reason == "int64":
        return _int64_advice(ctx, members, fam, names)
    if reason == "precision_mode":
        mode = atc_option(scan.cmdline, "precision_mode") or atc_option(scan.cmdline, "precision_mode_v2")
        suggest = rules["precision"]["suggest_mode"]
        rec = (f"The model was built with --precision_mode={mode}: fp32 ops whose AI Core kernel supports only "
               f"fp16 fall back to AI CPU ({names}). Build with --precision_mode={suggest} (or force_fp16), or "
               "mark only the accuracy-critical ops to keep fp32.")
        return rec, Fix("atc-option", f"build with --precision_mode={suggest}",
                        {"flags": [f"--precision_mode={suggest}"]}, f"atc ... --precision_mode={suggest}"), \
            float(conf["precision_mode"])
    if reason == "unsupported_dtype":
        sugg = rules["dtype_suggestion"]
        outside = sorted({d for op in members for d in op.detail.get("unsupported_dtype", "").split(", ") if d})
        conv = ", ".join(f"{d} -> {sugg.get(d, 'a supported dtype')}" for d in outside)
        rec = (f"{names} use dtypes the AI Core kernel does not accept ({', '.join(outside)}). Convert {_where(fam)}: "
               f"{conv}.")
        return rec, Fix("code", f"convert {', '.join(outside)} to a supported dtype",
                        {"conversions": {d: sugg.get(d, "") for d in outside}}), float(conf["unsupported_dtype"])
    if reason == "dynamic_shape":
        return _dynamic_advice(ctx, scan, members, fam, names)
    return _unknown_advice(ctx, members, fam, names)


def _snippet(snippets: Mapping[str, str], fam: str) -> dict[str, Any]:
    text = snippets.get(fam)
    return {"snippet": text} if text else {}


def _int64_advice(ctx: AnalysisContext, members: list[AicpuOp], fam: str, names: str) -> tuple[str, Fix, float]:
    int64 = set(ctx.rules["int64_dtypes"])
    conf = ctx.rules["confidence"]
    casts = [op.name for op in members if op.type == "Cast" and set(op.out_dtypes) & int64]
    inserted = tuple(ctx.rules["inserted_name_prefixes"])
    if casts and len(casts) == len(members) and all(c.startswith(inserted) for c in casts):
        rec = (f"The graph compiler inserted these casts to a 64-bit integer ({names}) and they run on the AI CPU "
               "(msprof rule_aicpu_2): the op they feed takes a 64-bit integer input. Give that op int32 input "
               f"{_where(fam)} (or a variant of it that takes int32), and the cast goes.")
        return rec, Fix("code", "feed the consumer of the inserted casts int32 instead of a 64-bit integer",
                        _snippet(_INT64_SNIPPETS, fam) | {"ops": casts}), float(conf["int64_cast"])
    if casts and len(casts) == len(members):
        rec = (f"The casts to a 64-bit integer ({names}) themselves run on the AI CPU (msprof rule_aicpu_2). Keep "
               f"the value int32 {_where(fam)} (drop the cast, or make the consumer accept int32)"
               + (", or do the conversion on the host." if fam != "om" else "; set the Cast's target type to INT32 "
                  "and rebuild the offline model."))
        data = _snippet(_INT64_CAST_SNIPPETS, fam) | {"ops": casts}
        return rec, Fix("code", "keep the value int32 instead of casting it to a 64-bit integer on the device",
                        data), float(conf["int64_cast"])
    rec = (f"64-bit integer tensors keep {names} on the AI CPU (msprof rule_aicpu_2). Cast int64 -> int32 "
           f"{_where(fam)} where the values allow (indices, shapes, counters stay below 2^31) before the op, and "
           "keep them int32."
           + (" ONNX exports carry int64 for indices and shapes (NonZero, ArgMax, Shape produce int64 by "
              "definition): a Cast to INT32 in front of the consumer keeps it on AI Core." if fam == "om" else ""))
    return rec, Fix("code", "cast int64 -> int32 before the op (values < 2^31)", _snippet(_INT64_SNIPPETS, fam)), \
        float(conf["int64"])


def _dynamic_advice(ctx: AnalysisContext, scan: _Scan, members: list[AicpuOp], fam: str,
                    names: str) -> tuple[str, Fix, float]:
    confidence = float(ctx.rules["confidence"]["dynamic_shape"])
    if fam == "torch":
        if ctx.profile.meta.context == "torch-graph":
            rec = (f"{names} run on AI CPU with dynamic shapes in a torchair graph. Keep the input shapes static "
                   "(pad to fixed sizes; torch.compile(..., dynamic=False)) so GE compiles static kernels.")
            return rec, Fix("code", "static shapes in graph mode",
                            {"snippet": "model = torch.compile(model, backend=npu_backend, dynamic=False)"}), confidence
        rec = (f"{names} run on AI CPU with dynamic shapes. Keep shapes static (pad to fixed sizes) and use "
               "torch_npu.npu.set_compile_mode(jit_compile=False) so binary kernels are used.")
        return rec, Fix("code", "fixed shapes; torch_npu.npu.set_compile_mode(jit_compile=False)",
                        {"snippet": "torch_npu.npu.set_compile_mode(jit_compile=False)"}), confidence
    if fam != "om":
        rec = (f"{names} run on AI CPU with dynamic shapes. Keep the input shapes static {_where(fam)} (pad to fixed "
               "sizes, no data-dependent output shapes) so the ops compile to AI Core kernels.")
        return rec, Fix("code", "static input shapes", {"ops": [o.name for o in members]}), confidence
    fits, why = atc_option_fits("ac_parallel_enable", ctx.profile.meta.cann_version, detected_soc(ctx), True)
    rec = (f"{names} run on AI CPU in a dynamic-shape graph. Fix the input shapes (--input_shape with static dims, or "
           "--dynamic_batch_size gears)")
    if fits is False:
        rec += f". ({why}: --ac_parallel_enable does not apply.)"
        return rec, Fix("atc-option", "static shapes (--input_shape / --dynamic_batch_size)",
                        {"ops": [o.name for o in members]}), confidence
    rec += (", and build with --ac_parallel_enable=1 so the remaining AI CPU ops run beside AI Core"
            + (f" ({why}: assumed)." if fits is None else "."))
    return rec, Fix("atc-option", "static shapes; --ac_parallel_enable=1 for what stays dynamic",
                    {"flags": ["--ac_parallel_enable=1"]}, "atc ... --ac_parallel_enable=1"), confidence


def _unknown_advice(ctx: AnalysisContext, members: list[AicpuOp], fam: str, names: str) -> tuple[str, Fix, float]:
    conf = ctx.rules["confidence"]
    if not any(op.dtypes for op in members):
        how = {"torch": "re-profile with shapes recorded (torch_npu.profiler.profile(..., record_shapes=True))",
               "om": "pass the offline model's graph (atc --mode=1 --om=model.om --json=model.json; --graph "
                     "model.json)"}.get(fam, "pass the model graph (--graph)")
        rec = (f"{names} run on AI CPU, but the profile carries no dtypes or shapes for them, so the reason cannot "
               f"be told: {how}.")
        return rec, Fix("code", "give advisor the ops' dtypes and shapes to find why these ops fall back",
                        {"ops": [o.name for o in members]}), float(conf["no_dtypes"])
    rec = (f"{names} run on AI CPU for no reason this knowledge base recognizes (dtypes and type look AI "
           "Core-capable). Check the op's spec for this SoC (operator list of the CANN version) and the attributes "
           "it is called with.")
    return rec, Fix("code", "check the op specification for this SoC and CANN version",
                    {"ops": [o.name for o in members]}), float(conf["unknown"])


def _serial_advice(ctx: AnalysisContext, scan: _Scan, ops: list[str]) -> tuple[str, Fix]:
    move = Fix("code", "move the serialized ops to AI Core (see the aicpu.ops findings)", {"ops": ops})
    fam = family(ctx)
    if fam == "torch":
        return ("The AI CPU ops run in stream order, so the AI Core waits for them. Move them to AI Core (the "
                "aicpu.ops findings say why each runs on the AI CPU: dtypes, rewrites).", move)
    if fam != "om":
        return ("The AI Core waits while these AI CPU ops run. Move them to AI Core (the aicpu.ops findings say why "
                "each runs on the AI CPU).", move)
    dynamic = ctx.graph.dynamic_shape() if ctx.graph is not None else any(o.dynamic for o in scan.found)
    if atc_option(scan.cmdline, "ac_parallel_enable") == "1":
        return ("AI CPU tasks still leave the AI Core idle although --ac_parallel_enable=1 is set: the AI Core "
                "work depends on their results. Move the ops to AI Core (aicpu.ops findings).", move)
    fits, why = atc_option_fits("ac_parallel_enable", ctx.profile.meta.cann_version, detected_soc(ctx), dynamic)
    if fits is False or not dynamic:
        extra = f" ({why})" if fits is False and dynamic else ""
        return ("The AI Core waits while these AI CPU ops run: in a static-shape offline model they run in stream "
                "order. Move them to AI Core, or out of the model (the aicpu.ops findings say how)" + extra + ".",
                move)
    rec = ("This dynamic-shape model runs its AI CPU ops in stream order: build with --ac_parallel_enable=1 (GE "
           "option AC_PARALLEL_ENABLE) so they run on their own stream beside AI Core"
           + (f" ({why}: assumed)" if fits is None else "") + "; better, move them to AI Core (aicpu.ops findings).")
    return rec, Fix("atc-option", "let AI CPU ops run on their own stream beside AI Core: --ac_parallel_enable=1",
                    {"flags": ["--ac_parallel_enable=1"]}, "atc ... --ac_parallel_enable=1")


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [AicpuKB]
