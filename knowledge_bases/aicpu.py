"""AI CPU knowledge base: ops that fell back to the AI CPU, why, what moves them to AI Core, and AI Core idle time.

An op runs on the AI CPU when no AI Core kernel supports its type, dtype or shape (DOMAIN.md section 4). AI CPU
kernels are one to two orders of magnitude slower and, on the same stream, leave the AI Core idle while they
run. The ops come from the profile (task type ``AI_CPU``) and the model graph (engine ``AI_CPU``, from
``_ge_attr_op_kernel_lib_name``); each gets its reasons and the fix for the first one.
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
from advisor.intervals import covered_before, union
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc
from advisor.toolkit.common import (
    atc_option,
    cat_map,
    device_busy_us,
    dtypes_of,
    elements,
    fmt_shapes,
    graph_cmdline,
    node_dtypes,
    node_shapes,
    output_elements,
    pct,
    severity_for,
    shapes_of,
    similar_size_median,
    type_from_name,
    type_mask,
)

REASONS = ("no_aicore_kernel", "double", "int64", "precision_mode", "unsupported_dtype", "dynamic_shape", "unknown")
"""Reasons in priority order: the first that applies decides the fix."""

REASON_TITLES = {
    "no_aicore_kernel": "op type without an AI Core kernel",
    "double": "double-precision tensors",
    "int64": "64-bit integer tensors",
    "precision_mode": "fp32 kept by --precision_mode",
    "unsupported_dtype": "dtype outside the AI Core kernel's list",
    "dynamic_shape": "dynamic shape",
    "unknown": "no known reason",
}


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
def assign_reasons(op: AicpuOp, rules: Mapping[str, Any], cmdline: str) -> None:
    dtypes = op.dtypes
    listed = (rules.get("aicpu_op_types") or {}).get(op.type)
    if listed:
        when = set(listed.get("when_dtypes") or [])
        if not when or set(op.in_dtypes) & when:
            op.reasons.append("no_aicore_kernel")
            op.detail["no_aicore_kernel"] = f"{op.type} ({listed.get('status')})"
    double = sorted(dtypes & set(rules.get("double_dtypes") or []))
    if double:
        op.reasons.append("double")
        op.detail["double"] = ", ".join(double)
    int64 = sorted(dtypes & set(rules.get("int64_dtypes") or []))
    if int64:
        op.reasons.append("int64")
        side = "input" if set(op.in_dtypes) & set(int64) else "output"
        op.detail["int64"] = f"{', '.join(int64)} {side}"
    prec = rules.get("precision") or {}
    mode = atc_option(cmdline, "precision_mode") or atc_option(cmdline, "precision_mode_v2")
    if mode and mode in set(prec.get("keep_fp32_modes") or []) and "FLOAT" in dtypes:
        op.reasons.append("precision_mode")
        op.detail["precision_mode"] = f"--precision_mode={mode} with FLOAT tensors"
    supported = (rules.get("aicore_dtypes") or {})
    allowed = set((supported.get("by_type") or {}).get(op.type) or supported.get("default") or [])
    outside = sorted(d for d in dtypes if allowed and d not in allowed and d not in int64 and d not in double)
    if outside:
        op.reasons.append("unsupported_dtype")
        op.detail["unsupported_dtype"] = ", ".join(outside)
    if op.dynamic:
        op.reasons.append("dynamic_shape")
        op.detail["dynamic_shape"] = "dynamic op state or unknown (-1) dims"
    if not op.reasons:
        op.reasons.append("unknown")


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
        self.factor = float(est.get("size_factor", 4.0))
        self.min_same = int(est.get("min_same_type", 1))
        self.min_any = int(est.get("min_any_type", 3))
        self.ratio = float(est.get("aicore_ratio", 0.1))

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
    return pd.DataFrame({"name": ops["name"][cpu].astype(str).to_numpy(), "duration_us": dur[cpu],
                         "exposed_us": np.maximum(dur[cpu] - overlap, 0.0)})


# ---------------------------------------------------------------------------------------------------------
# the knowledge base
# ---------------------------------------------------------------------------------------------------------
class AicpuKB(KnowledgeBase):
    id = "aicpu"
    title = "AI CPU fallback"
    version = "1.0.0"
    api_version = "1"
    requires = ()
    requires_any = ("ops", "graph")
    rules_file = "aicpu"
    rules = (
        RuleDoc(
            id="aicpu.ops",
            title="Ops running on the AI CPU",
            what="Lists ops that run on the AI CPU (profile task type AI_CPU; graph engine AI_CPU from "
                 "_ge_attr_op_kernel_lib_name) whose longest task exceeds min_duration_us, with their share of "
                 "device time and the reason: op type without an AI Core kernel (aicpu_op_types, each marked "
                 "confirmed or empirical), double precision, 64-bit integers, fp32 kept by --precision_mode, a "
                 "dtype outside the AI Core kernel's list (aicore_dtypes), or dynamic shape. One finding per "
                 "reason (per op type for missing kernels).",
            why="An AI CPU kernel is typically 10-100x slower than the AI Core one and blocks the AI Core stream "
                "while it runs; msprof only says 'check and reduce AI CPU operators'.",
            how_to_fix="Per reason: cast int64 -> int32 where the values allow (indices, shapes); cast double -> "
                       "float; rewrite ops without an AI Core kernel (IndexPut -> mask multiply, NonZero -> "
                       "torch.where with a mask, TopK on ints -> cast to fp32, upgrade CANN for ArgMin); use "
                       "--precision_mode=allow_fp32_to_fp16 instead of must_keep_origin_dtype; fix shapes or, for "
                       "dynamic graphs, let AI CPU run beside AI Core with --ac_parallel_enable=1.",
            thresholds=("min_duration_us", "severity", "int64_dtypes", "double_dtypes", "aicore_dtypes",
                        "aicpu_op_types", "estimate", "precision"),
            needs=("ops", "graph"),
        ),
        RuleDoc(
            id="aicpu.serial",
            title="AI Core idle while AI CPU tasks run",
            what="Measures the time during which an AI CPU task runs and no AI Core / AI Vector core task "
                 "overlaps it, as a share of device busy time (msprof rule_ai_core_and_ai_cpu_parallelism_1: "
                 "0.05).",
            why="AI CPU tasks serialized with the AI Core stream add their whole duration to the step.",
            how_to_fix="Move the ops to AI Core (aicpu.ops findings); for dynamic-shape graphs build with "
                       "--ac_parallel_enable=1 (GE option AC_PARALLEL_ENABLE) so AI CPU ops run on their own stream "
                       "in parallel with AI Core (not on Atlas 200I/500 A2).",
            thresholds=("parallelism", "ai_core_cores", "severity"),
            needs=("ops",),
        ),
    )

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        rules = ctx.rules
        ops = ctx.profile.ops
        cmdline = graph_cmdline(ctx.graph)
        busy = device_busy_us(ctx.profile)
        levels = rules.get("severity", {})
        found = profile_aicpu_ops(ops) if len(ops) else []
        found = graph_aicpu_ops(ctx, found)
        if not found:
            return []
        ref = AicoreReference(ops, rules.get("ai_core_cores", []), rules.get("estimate", {}))
        min_us = float(rules.get("min_duration_us", 20.0))
        flagged: list[AicpuOp] = []
        for op in found:
            if op.tasks and op.max_us <= min_us:
                continue
            assign_reasons(op, rules, cmdline)
            if op.tasks:
                op.estimate_us, op.estimate_basis = ref.estimate(op)
            flagged.append(op)
        findings: list[Finding] = []
        groups: dict[tuple[str, str], list[AicpuOp]] = defaultdict(list)
        for op in flagged:
            reason = op.reasons[0]
            groups[(reason, op.type if reason == "no_aicore_kernel" else "")].append(op)
        for (reason, op_type), members in sorted(groups.items(), key=lambda kv: -sum(o.saving_us for o in kv[1])):
            findings.append(self._ops_finding(ctx, reason, op_type, members, busy, levels, rules, cmdline))
        if len(ops):
            serial = self._serial(ctx, ops, busy, levels, rules, cmdline, found)
            if serial is not None:
                findings.append(serial)
        elif ctx.graph is not None:
            ctx.note("aicpu.serial: skipped, needs a profile with task start times")
        return findings

    # -- aicpu.ops ------------------------------------------------------------------------------------------
    def _ops_finding(self, ctx: AnalysisContext, reason: str, op_type: str, members: list[AicpuOp], busy: float,
                     levels: Mapping[str, float], rules: Mapping[str, Any], cmdline: str) -> Finding:
        by_op: dict[str, float] = defaultdict(float)
        for op in members:
            by_op[op.name] += op.saving_us
        saving = sum(by_op.values())
        total = sum(op.total_us for op in members)
        share = total / busy if busy else 0.0
        timed = any(op.tasks for op in members)
        rows = [[op.name, op.type, ";".join(op.in_dtypes), ";".join(op.out_dtypes), op.out_shapes or op.in_shapes,
                 op.tasks, round(op.total_us, 3), round(op.max_us, 3), ", ".join(op.reasons),
                 round(op.estimate_us, 3), round(op.saving_us, 3)]
                for op in sorted(members, key=lambda o: -o.total_us)]
        bases = sorted({op.estimate_basis for op in members if op.estimate_basis})
        label = REASON_TITLES[reason] + (f" ({op_type})" if op_type else "")
        rec, fix, confidence = _advice(reason, op_type, members, rules, cmdline, ctx)
        title = f"{len(members)} AI CPU op(s): {label}"
        if timed:
            title += f", {total:.1f} us ({pct(share)} of device time)"
        return ctx.finding(
            rule="aicpu.ops",
            title=title,
            severity=severity_for(saving / busy, levels) if busy and timed else "info",
            ops=list(dict.fromkeys(op.name for op in members)),
            evidence={"reason": reason, "details": {op.name: op.detail.get(reason, "") for op in members},
                      "aicpu_us": total, "share_of_device_time": share, "device_busy_us": busy,
                      "min_duration_us": float(rules.get("min_duration_us", 20.0)),
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

    # -- aicpu.serial ---------------------------------------------------------------------------------------
    def _serial(self, ctx: AnalysisContext, ops: pd.DataFrame, busy: float, levels: Mapping[str, float],
                rules: Mapping[str, Any], cmdline: str, found: list[AicpuOp]) -> Finding | None:
        if not type_mask(ops["core"], ["AI_CPU"]).any():
            return None
        par = rules.get("parallelism", {})
        exp = exposed_aicpu(ops, rules.get("ai_core_cores", []))
        if not len(exp) or not busy:
            return None
        exposed = float(exp["exposed_us"].sum())
        share = exposed / busy
        limit = float(par.get("max_serial_share", 0.05))
        if share <= limit:
            return None
        frac = float(par.get("recoverable_fraction", 0.5))
        per = exp.groupby("name", sort=False).agg(tasks=("duration_us", "size"), aicpu_us=("duration_us", "sum"),
                                                   exposed_us=("exposed_us", "sum"))
        per = per.sort_values("exposed_us", ascending=False)
        by_op = {str(k): float(v) * frac for k, v in per["exposed_us"].items() if v > 0}
        rows = [[str(k), int(r.tasks), round(float(r.aicpu_us), 3), round(float(r.exposed_us), 3)]
                for k, r in per.iterrows()]
        already = atc_option(cmdline, "ac_parallel_enable") == "1"
        dynamic = any(o.dynamic for o in found)
        if _is_eager(ctx):
            fix = Fix("code", "move the serialized ops to AI Core (see aicpu.ops)", {"ops": list(by_op)})
            rec = ("In PyTorch eager mode the AI CPU ops run in stream order, so the AI Core waits for them. Move "
                   "them to AI Core (aicpu.ops findings: dtypes, rewrites); in graph mode (torchair) GE's "
                   "AC_PARALLEL_ENABLE option lets AI CPU ops of dynamic-shape graphs run beside AI Core.")
        elif already:
            fix = Fix("code", "move the serialized ops to AI Core (see aicpu.ops); --ac_parallel_enable is already 1",
                      {"ops": list(by_op)})
            rec = ("AI CPU tasks still leave the AI Core idle although --ac_parallel_enable=1 is set: the AI Core "
                   "work depends on their results. Move the ops to AI Core (aicpu.ops findings).")
        else:
            fix = Fix("atc-option", "let AI CPU ops run on their own stream beside AI Core: --ac_parallel_enable=1",
                      {"flags": ["--ac_parallel_enable=1"]}, "atc ... --ac_parallel_enable=1")
            rec = ("For " + ("this dynamic-shape graph" if dynamic else "dynamic-shape graphs")
                   + " build with --ac_parallel_enable=1 (GE option AC_PARALLEL_ENABLE; default 0; not on Atlas "
                   "200I/500 A2) so AI CPU ops run in parallel with AI Core; better, move the ops to AI Core "
                   "(aicpu.ops findings).")
        return ctx.finding(
            rule="aicpu.serial",
            title=f"AI Core idle while AI CPU runs: {exposed:.1f} us ({pct(share)} of device time)",
            severity=severity_for(exposed * frac / busy, levels),
            ops=list(by_op) or [str(k) for k in per.index],
            evidence={"serialized_us": exposed, "share_of_device_time": share, "max_serial_share": limit,
                      "aicpu_us": float(exp["duration_us"].sum()), "device_busy_us": busy,
                      "table": table(["op", "tasks", "aicpu_us", "ai_core_idle_us"], rows)},
            estimated_saving_us=exposed * frac,
            basis=f"{frac:.0%} (parallelism.recoverable_fraction) of the AI CPU time with no AI Core task running; "
                  "data dependencies keep the rest on the critical path",
            recommendation=rec,
            fix=fix,
            confidence=0.6,
            saving_by_op=by_op,
        )


# ---------------------------------------------------------------------------------------------------------
# advice per reason
# ---------------------------------------------------------------------------------------------------------
def _is_eager(ctx: AnalysisContext) -> bool:
    return ctx.graph is None and (ctx.profile.meta.layout or "").startswith("torch_npu")


def _advice(reason: str, op_type: str, members: list[AicpuOp], rules: Mapping[str, Any], cmdline: str,
            ctx: AnalysisContext) -> tuple[str, Fix, float]:
    names = ", ".join(dict.fromkeys(op.name for op in members[:5])) + (" ..." if len(members) > 5 else "")
    if reason == "no_aicore_kernel":
        spec = (rules.get("aicpu_op_types") or {}).get(op_type, {})
        status = spec.get("status", "empirical")
        rec = (f"{op_type} has no AI Core kernel here ({status}: {spec.get('source', '')}). {spec.get('fix', '')} "
               f"Ops: {names}.")
        kind = spec.get("fix_kind", "code")
        return rec, Fix(kind, spec.get("fix", f"rewrite {op_type}"),
                        {"op_type": op_type, "status": status, "snippet": spec.get("snippet", "")}), \
            0.85 if status == "confirmed" else 0.6
    if reason == "double":
        rec = (f"Double-precision tensors keep {names} on the AI CPU; AI Core kernels work in float32/float16. "
               "Cast to float32 where the op is created (numpy float64 constants, torch.float64 tensors).")
        return rec, Fix("code", "cast double tensors to float32", {"snippet": "x = x.float()  # or .to(torch.float32); "
                                                                              "np.float32 for numpy constants"}), 0.8
    if reason == "int64":
        casts = [op.name for op in members if op.type == "Cast" and set(op.out_dtypes) & set(rules.get("int64_dtypes") or [])]
        if casts and len(casts) == len(members):
            rec = (f"The casts to a 64-bit integer ({names}) themselves run on the AI CPU (msprof rule_aicpu_2). "
                   "Keep the value int32 (drop the cast, or make the consumer accept int32), or do the conversion "
                   "on the host.")
            return rec, Fix("code", "keep the value int32 instead of casting it to a 64-bit integer on the device",
                            {"snippet": "t = t.to(torch.int32)  # instead of .long() / torch.int64 / uint64"}), 0.75
        rec = (f"64-bit integer tensors keep {names} on the AI CPU (msprof rule_aicpu_2). Cast int64 -> int32 where "
               "the values allow (indices, shapes, counters stay below 2^31) before the op, and keep them int32.")
        return rec, Fix("code", "cast int64 -> int32 before the op (values < 2^31)",
                        {"snippet": "idx = idx.to(torch.int32)  # ONNX: Cast(to=INT32) on indices/shape inputs"}), 0.8
    if reason == "precision_mode":
        mode = atc_option(cmdline, "precision_mode") or atc_option(cmdline, "precision_mode_v2")
        suggest = (rules.get("precision") or {}).get("suggest_mode", "allow_fp32_to_fp16")
        rec = (f"The model was built with --precision_mode={mode}: fp32 ops whose AI Core kernel supports only "
               f"fp16 fall back to AI CPU ({names}). Build with --precision_mode={suggest} (or force_fp16), or "
               "mark only the accuracy-critical ops to keep fp32.")
        return rec, Fix("atc-option", f"build with --precision_mode={suggest}",
                        {"flags": [f"--precision_mode={suggest}"]}, f"atc ... --precision_mode={suggest}"), 0.7
    if reason == "unsupported_dtype":
        sugg = rules.get("dtype_suggestion") or {}
        outside = sorted({d for op in members for d in op.detail.get("unsupported_dtype", "").split(", ") if d})
        conv = ", ".join(f"{d} -> {sugg.get(d, 'a supported dtype')}" for d in outside)
        rec = (f"{names} use dtypes the AI Core kernel does not accept ({', '.join(outside)}). Convert: {conv}.")
        return rec, Fix("code", f"convert {', '.join(outside)} to a supported dtype",
                        {"conversions": {d: sugg.get(d, "") for d in outside}}), 0.7
    if reason == "dynamic_shape":
        if _is_eager(ctx):
            rec = (f"{names} run on AI CPU with dynamic shapes. Keep shapes static (pad to fixed sizes) and use "
                   "torch_npu.npu.set_compile_mode(jit_compile=False) so binary kernels are used.")
            return rec, Fix("code", "fixed shapes; torch_npu.npu.set_compile_mode(jit_compile=False)",
                            {"snippet": "torch_npu.npu.set_compile_mode(jit_compile=False)"}), 0.5
        rec = (f"{names} run on AI CPU in a dynamic-shape graph. Fix the input shapes (--input_shape with static "
               "dims, or --dynamic_batch_size gears), and build with --ac_parallel_enable=1 so the remaining AI CPU "
               "ops run beside AI Core.")
        return rec, Fix("atc-option", "static shapes; --ac_parallel_enable=1 for what stays dynamic",
                        {"flags": ["--ac_parallel_enable=1"]}, "atc ... --ac_parallel_enable=1"), 0.5
    if not any(op.dtypes for op in members):
        rec = (f"{names} run on AI CPU, but the profile carries no dtypes or shapes for them, so the reason cannot "
               "be told. Re-profile with shapes recorded (torch_npu: record_shapes=True; msprof op_summary) or pass "
               "the model graph (--graph) to get it.")
        return rec, Fix("code", "re-profile with shapes/dtypes (or pass --graph) to find why these ops fall back",
                        {"ops": [o.name for o in members], "snippet": "torch_npu.profiler.profile(..., record_shapes=True)"}), 0.3
    rec = (f"{names} run on AI CPU for no reason this knowledge base recognizes (dtypes and type look AI "
           "Core-capable). Check the op's spec for this SoC (operator list of the CANN version) and the attributes "
           "it is called with.")
    return rec, Fix("code", "check the op specification for this SoC and CANN version", {"ops": [o.name for o in members]}), 0.4


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [AicpuKB]
