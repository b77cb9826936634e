"""precision: compute dtypes that leave the cube's throughput unused.

Convolutions and matmuls computed in fp32 run at a fraction of the cube's fp16 rate -- or, on chips whose cube has
no fp32 (310, 310P, 910A), not on the cube at all -- and move twice the bytes. ATC's ``--precision_mode`` decides
it for an offline model (``force_fp16`` is the default; ``must_keep_origin_dtype`` / ``force_fp32`` keep fp32);
the framework's mixed precision decides it online. On chips whose cube computes int8 and whose toolchain has AMCT,
post-training quantization doubles the cube rate again. The gain is estimated per op from the chip's peaks (cost
model: ``max(FLOPs / peak, bytes / bandwidth)`` in each dtype) applied to the op's time, and no dtype the chip
lacks is ever named.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import OP_TENSOR_COLUMNS, EventSelection, canonical_format, parse_list, parse_shapes
from advisor.platform import cube_supports, has_tool, is_assumed, supports_dtype
from advisor.toolkit import run_context as rc
from advisor.toolkit.common import atc_option, graph_cmdline, pct, severity_for, text_ids
from advisor.toolkit.costmodel import cube_tflops, op_work
from advisor.toolkit.time import fmt_us, isin_mask

_THRESHOLDS = ("conv_types", "transposed_conv_types", "matmul_types", "min_saving_us", "severity", "confidence",
               "contexts")


class PrecisionKB(KnowledgeBase):
    id = "precision"
    title = "Compute dtypes of conv/matmul ops (fp32 on the cube, int8 via AMCT)"
    version = "2.0.0"
    api_version = "1.5"
    requires = ()
    requires_platform = ("hbm_gbps", "fp16_tflops")
    requires_any = ("ops", "graph")
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "precision"

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        """The conv/matmul candidates once (dtype, time, FLOPs and bytes per op), then the checks."""
        self._cands = _cube_rows(ctx)
        if self._cands is None:
            ctx.note("precision: no conv/matmul op with a known dtype (profile Input Data Types or a compiled graph)")
            return []
        return super().analyze(ctx)

    @rule(RuleDoc(
        id="precision.fp32-cube",
        explains={
            "roofline.compute-bound": "in fp16/bf16 the cube's peak is several times its fp32 rate: the same op's compute roof rises",
            "roofline.memory-bound": "16-bit operands move half the bytes of fp32 ones",
            "memory-bound.layers": "16-bit operands move half the bytes of fp32 ones: the same layers' traffic halves",
        },
        title="Convolutions / matmuls computed in fp32",
        what="Finds conv and matmul ops (conv_types, transposed_conv_types, matmul_types) whose inputs are fp32 "
             "(fp32_dtypes): in the profile (Input Data Types) or, without one, in a compiled model graph (OM JSON / "
             "GE dump; an ONNX model is cast by ATC's default force_fp16). The gain per op is its time x (1 - t16 / "
             "t32), t = max(FLOPs / cube peak, bytes / bandwidth) in fp16 and in fp32 (the cube's fp32 rate where "
             "it has one, else the vector unit's); reported from {min_saving_us} µs on. Contexts: "
             "{contexts.fp32}.",
        why="The cube computes fp16 at its full rate; fp32 runs at a fraction of it (or falls back to the vector unit "
            "or AI CPU on cubes without fp32) and moves twice the bytes.",
        how_to_fix="ATC models: rebuild with --precision_mode={suggest_mode} (cube ops in fp16, others keep fp32 "
                   "where supported) or {alternative_modes}, instead of must_keep_origin_dtype / force_fp32; check "
                   "accuracy. Frameworks: mixed precision (torch.autocast on the NPU, MindSpore amp), with bf16 only "
                   "on chips that have it.",
        thresholds=(*_THRESHOLDS, "fp32_dtypes", "suggest_mode", "alternative_modes", "fp32_modes"),
        needs=("ops", "graph"),
    ))
    def fp32_cube(self, ctx: AnalysisContext) -> list[Finding]:
        if not rc.applies(ctx, ctx.rules["contexts"]["fp32"]):
            ctx.note(f"precision.fp32-cube: skipped for {rc.a_run(rc.context_of(ctx))} (the kernel's dtype is the "
                     "developer's choice)")
            return []
        f = _fp32(ctx, self._cands)
        return [f] if f is not None else []

    @rule(RuleDoc(
        id="precision.int8",
        explains={
            "roofline.compute-bound": "the cube's int8 rate is twice its fp16 rate: the same op's compute roof rises",
            "roofline.memory-bound": "int8 operands move half the bytes of 16-bit ones",
            "memory-bound.layers": "int8 operands move half the bytes of 16-bit ones",
        },
        title="fp16 cube work an int8 model would halve (AMCT)",
        what="When conv/matmul ops in fp16 take at least {int8.min_cube_share} of the compute time, on a chip whose "
             "cube computes int8 and whose toolchain has AMCT, and the model is not quantized yet (no "
             "quantized_markers types or dtypes), estimates the gain of int8: time x (1 - t8 / t16) x "
             "{int8.realism} (int8.realism). Contexts: {contexts.int8}.",
        why="The cube's int8 rate is twice its fp16 rate and int8 tensors halve the bytes; AMCT post-training "
            "quantization produces a model ATC compiles with quant/dequant fused into the convolutions.",
        how_to_fix="Calibrate with AMCT post-training quantization (the AMCT package of the model's source "
                   "framework, e.g. amct_onnx calibration for an ONNX model) on a few hundred representative "
                   "inputs, convert the quantized model with ATC, and compare accuracy; skip layers that lose "
                   "accuracy.",
        thresholds=(*_THRESHOLDS, "fp16_dtypes", "quantized_markers", "int8"),
        needs=("ops", "graph"),
    ))
    def int8(self, ctx: AnalysisContext) -> list[Finding]:
        if not rc.applies(ctx, ctx.rules["contexts"]["int8"]):
            return []
        f = _int8(ctx, self._cands)
        return [f] if f is not None else []


# ---------------------------------------------------------------------------------------------------------
# candidate ops: one row per op name with dtype, time, FLOPs and bytes
# ---------------------------------------------------------------------------------------------------------
def _work_rules(r: Mapping[str, Any]) -> dict[str, Any]:
    return {"conv_types": r["conv_types"], "transposed_conv_types": r["transposed_conv_types"],
            "matmul_types": r["matmul_types"], "data_movement_types": [], "no_estimate_types": [],
            "flops_per_element": {}}


def _cube_rows(ctx: AnalysisContext) -> pd.DataFrame | None:
    """Conv/matmul ops of the profile (dtype from Input Data Types, else from a compiled graph node of the same
    name): name, type, dtype, calls, total_us, flops and bytes per call."""
    r = ctx.rules
    ops = ctx.profile.ops
    cube_types = {*r["conv_types"], *r["transposed_conv_types"], *r["matmul_types"]}
    if not len(ops):
        return None
    wanted = ["name", "type", "duration_us", *OP_TENSOR_COLUMNS]
    sub = ops.loc[isin_mask(ops["type"], sorted(cube_types)), [c for c in wanted if c in ops.columns]]
    if not len(sub):
        return None
    graph = ctx.graph if ctx.graph is not None and ctx.graph.format != "onnx" else None
    work = _work_rules(r)
    rows = []
    name_ids, names = _text_ids(sub["name"])
    type_ids, types = _text_ids(sub["type"])
    for (name_id, type_id), g in sub.groupby([name_ids, type_ids], sort=False):
        name, op_type = names[name_id], types[type_id]
        first = g.iloc[0]
        in_dt = list(parse_list(first["input_dtypes"]))
        ins = list(parse_shapes(first["input_shapes"]))
        out_dt = list(parse_list(first["output_dtypes"]))
        outs = list(parse_shapes(first["output_shapes"]))
        in_fmt = [canonical_format(f) for f in parse_list(first["input_formats"])]
        out_fmt = [canonical_format(f) for f in parse_list(first["output_formats"])]
        source = "profile"
        if not in_dt and graph is not None and name in graph.g:
            node = graph.node(name)
            descs = [d or {} for d in (node.get("inputs") or [])]
            in_dt = [str(d.get("dtype") or "") for d in descs]
            ins = [tuple(d.get("shape") or ()) or None for d in descs]
            outs_d = [d or {} for d in (node.get("outputs") or [])]
            out_dt, outs = [str(d.get("dtype") or "") for d in outs_d], [tuple(d.get("shape") or ()) or None
                                                                          for d in outs_d]
            in_fmt = [canonical_format(str(d.get("format") or "")) for d in descs]
            out_fmt = [canonical_format(str(d.get("format") or "")) for d in outs_d]
            source = "graph"
        if not in_dt:
            continue
        flops, nbytes, _ = op_work(op_type, ins, in_dt, in_fmt, outs, out_dt, out_fmt, work)
        rows.append({"name": name, "type": op_type, "dtype": in_dt[0].upper().removeprefix("DT_"),
                     "calls": len(g), "total_us": float(g["duration_us"].sum()), "flops": flops, "bytes": nbytes,
                     "source": source})
    return pd.DataFrame(rows) if rows else None


def _text_ids(col: pd.Series) -> tuple[np.ndarray, list[str]]:
    """Each row's id of its text (``col.astype(str)``) and those texts: grouping by the ids groups as by the texts,
    without one str per row (a categorical's texts are made per category)."""
    if isinstance(col.dtype, pd.CategoricalDtype):
        ids, text = text_ids(col)
        return ids, list(text)
    ids, text = pd.factorize(col.astype(str))
    return ids, list(text)


def _t(flops: float, nbytes: float, tflops: float, bw_bytes_per_us: float) -> float:
    """Roof time of one call: max(FLOPs / peak, bytes / bandwidth)."""
    return max(flops / (tflops * 1e6) if tflops > 0 else 0.0, nbytes / bw_bytes_per_us if bw_bytes_per_us else 0.0)


def _gain(rows: pd.DataFrame, platform: Mapping[str, Any], src: str, dst: str, byte_scale: float) -> np.ndarray:
    """Per row: time x (1 - t_dst / t_src) with the chip's peaks for the two dtypes (bytes x byte_scale in dst)."""
    bw = float(platform["hbm_gbps"]) * 1e3
    out = np.zeros(len(rows))
    for i, row in enumerate(rows.itertuples()):
        if not np.isfinite(row.flops) or row.flops <= 0:
            continue
        nbytes = float(row.bytes) if np.isfinite(row.bytes) else 0.0
        t_src = _t(row.flops, nbytes, cube_tflops(platform, src), bw)
        t_dst = _t(row.flops, nbytes * byte_scale, cube_tflops(platform, dst), bw)
        if t_src > 0 and t_dst < t_src:
            out[i] = row.total_us * (1.0 - t_dst / t_src)
    return out


def _severity(ctx: AnalysisContext, saving: float) -> Any:
    window = ctx.profile.time.window_us
    return severity_for(saving / window, ctx.rules["severity"]) if window > 0 else "info"


def _table(rows: pd.DataFrame, gains: np.ndarray) -> dict[str, Any]:
    order = np.argsort(-gains)
    return table(["op", "type", "dtype", "calls", "total_us", "gflops_per_call", "saving_us", "dtype source"],
                 [[rows.iloc[i]["name"], rows.iloc[i]["type"], rows.iloc[i]["dtype"], int(rows.iloc[i]["calls"]),
                   round(float(rows.iloc[i]["total_us"]), 3),
                   round(float(rows.iloc[i]["flops"]) / 1e9, 4) if np.isfinite(rows.iloc[i]["flops"]) else None,
                   round(float(gains[i]), 3), rows.iloc[i]["source"]] for i in order if gains[i] > 0])


# ---------------------------------------------------------------------------------------------------------
# fp32 on the cube
# ---------------------------------------------------------------------------------------------------------
def _fp32(ctx: AnalysisContext, cands: pd.DataFrame) -> Finding | None:
    r = ctx.rules
    fp32 = {d.upper().removeprefix("DT_") for d in r["fp32_dtypes"]}
    rows = cands[cands["dtype"].isin(fp32)].reset_index(drop=True)
    if not len(rows):
        return None
    platform = ctx.platform
    gains = _gain(rows, platform, "FLOAT", "FLOAT16", 0.5)
    saving = float(gains.sum())
    if saving < float(r["min_saving_us"]):
        return None
    total = float(rows["total_us"].sum())
    rec, fix = _fp32_advice(ctx, rows)
    native = cube_supports(platform, "FLOAT")
    rate = (f"the cube's fp32 rate {platform.get('cube_fp32_tflops')} TFLOPS" if native else
            f"the vector unit's {platform.get('fp32_vector_tflops')} TFLOPS ({platform.get('soc')}'s cube has no fp32)")
    return ctx.finding(
        rule="precision.fp32-cube",
        title=f"{len(rows)} conv/matmul op(s) computed in fp32: {fmt_us(total)}",
        severity=_severity(ctx, saving),
        ops=list(rows["name"]),
        evidence={"ops": int(len(rows)), "fp32_us": total, "fp16_tflops": platform.get("fp16_tflops"),
                  "fp32_tflops_used": cube_tflops(platform, "FLOAT"), "cube_has_fp32": native,
                  "precision_mode": _mode(ctx), "table": _table(rows, gains)},
        estimated_saving_us=saving,
        basis=(f"per op: time x (1 - t16 / t32), t = max(FLOPs / peak, bytes / {platform.get('hbm_gbps')} GB/s) "
               f"with {platform.get('fp16_tflops')} TFLOPS fp16 and {rate}; fp16 moves half the bytes"
               + (f"; chip {platform.get('soc')} assumed" if is_assumed(platform) else "")),
        recommendation=rec,
        fix=fix,
        confidence=float(r["confidence"]["fp32"]),
        saving_by_op={str(n): float(g) for n, g in zip(rows["name"], gains, strict=True) if g > 0},
    )


def _mode(ctx: AnalysisContext) -> str | None:
    cmd = graph_cmdline(ctx.graph)
    return atc_option(cmd, "precision_mode") or atc_option(cmd, "precision_mode_v2")


def _fp32_advice(ctx: AnalysisContext, rows: pd.DataFrame) -> tuple[str, Fix]:
    r = ctx.rules
    fam = rc.family(ctx)
    names = ", ".join(list(rows["name"])[:4]) + (" ..." if len(rows) > 4 else "")
    if fam == rc.TORCH:
        half = "torch.bfloat16" if supports_dtype(ctx.platform, "bf16") else "torch.float16"
        return (f"{names} run in fp32 on the NPU. Run the model under mixed precision so convolutions and matmuls "
                f"use the cube's 16-bit rate: torch.autocast(device_type='npu', dtype={half}) around the forward "
                "pass (keep fp32 master weights in training), then check accuracy.",
                Fix("code", f"mixed precision ({half.split('.')[-1]}) for conv/matmul",
                    {"snippet": f"with torch.autocast(device_type='npu', dtype={half}):\n    out = model(x)"}))
    if fam == rc.MINDSPORE:
        return (f"{names} run in fp32. Enable mixed precision so convolutions and matmuls use fp16 on the cube: "
                "mindspore.amp.auto_mixed_precision(net, 'O2') (or ascend_config precision_mode "
                f"'{r['suggest_mode']}'), then check accuracy.",
                Fix("code", "MindSpore mixed precision for conv/matmul",
                    {"snippet": "net = mindspore.amp.auto_mixed_precision(net, 'O2')"}))
    mode = _mode(ctx)
    suggest = str(r["suggest_mode"])
    why = (f"The model was built with --precision_mode={mode}, which keeps fp32 on the cube. " if mode in
           set(r["fp32_modes"]) else "")
    v2 = bool(mode) and "precision_mode_v2" in graph_cmdline(ctx.graph)
    flag = "--precision_mode_v2=fp16" if v2 else f"--precision_mode={suggest}"
    alts = ", ".join(r["alternative_modes"])
    rec = (f"{rc.unknown_context(ctx)}{why}{names} compute in fp32. Rebuild with {flag} so convolutions and matmuls run in fp16 on the cube "
           f"(alternatives: {alts}; allow_mix_precision keeps fp32 only where its list requires it), then check "
           "accuracy against the fp32 model.")
    return rec, Fix("atc-option", f"rebuild with {flag}", {"flags": [flag]}, f"atc ... {flag}")


# ---------------------------------------------------------------------------------------------------------
# int8 through AMCT
# ---------------------------------------------------------------------------------------------------------
def _quantized(ctx: AnalysisContext, cands: pd.DataFrame) -> bool:
    m = ctx.rules["quantized_markers"]
    types = set(m["types"])
    if ctx.profile.ops["type"].astype(str).isin(types).any():
        return True
    if ctx.graph is not None and any(d.get("type") in types for _, d in ctx.graph.g.nodes(data=True)):
        return True
    q = {d.upper().removeprefix("DT_") for d in m["dtypes"]}
    return bool(cands["dtype"].isin(q).any())


def _int8(ctx: AnalysisContext, cands: pd.DataFrame) -> Finding | None:
    r = ctx.rules
    platform = ctx.platform
    if not (cube_supports(platform, "INT8") and has_tool(platform, "amct")):
        ctx.note(f"precision.int8: {platform.get('soc')} has no int8 cube or no AMCT")
        return None
    if _quantized(ctx, cands):
        return None
    fp16 = {d.upper().removeprefix("DT_") for d in r["fp16_dtypes"]}
    rows = cands[cands["dtype"].isin(fp16)].reset_index(drop=True)
    compute = ctx.profile.time.compute_us
    share = float(rows["total_us"].sum()) / compute if compute > 0 else 0.0
    if not len(rows) or share < float(r["int8"]["min_cube_share"]):
        return None
    realism = float(r["int8"]["realism"])
    gains = _gain(rows, platform, "FLOAT16", "INT8", 0.5) * realism
    saving = float(gains.sum())
    if saving < float(r["min_saving_us"]):
        return None
    rec_tool, fix = _amct(ctx)
    return ctx.finding(
        rule="precision.int8",
        title=f"{len(rows)} fp16 conv/matmul op(s), {pct(share)} of the compute time, could run in int8 (AMCT)",
        severity=_severity(ctx, saving),
        ops=list(rows["name"]),
        evidence={"ops": int(len(rows)), "fp16_cube_us": float(rows["total_us"].sum()), "share_of_compute_time": share,
                  "fp16_tflops": platform.get("fp16_tflops"), "int8_tops": platform.get("int8_tops"),
                  "realism": realism, "table": _table(rows, gains)},
        estimated_saving_us=saving,
        basis=(f"per op: time x (1 - t8 / t16) x {realism:g} (int8.realism), t = max(FLOPs / peak, bytes / "
               f"bandwidth) with {platform.get('fp16_tflops')} TFLOPS fp16 and {platform.get('int8_tops')} TOPS int8 "
               "(int8 moves half the bytes)"),
        recommendation=(f"{rc.unknown_context(ctx)}Convolutions and matmuls in fp16 take {pct(share)} of the "
                        f"compute time on {platform.get('soc')}, whose cube computes int8 at twice the fp16 rate. "
                        f"Quantize the model with AMCT post-training quantization ({rec_tool}; calibrate on a few "
                        "hundred representative inputs), convert the quantized model with ATC and compare accuracy; "
                        "keep accuracy-sensitive layers (first/last) in fp16 if needed."),
        fix=fix,
        confidence=float(r["confidence"]["int8"]),
        saving_by_op={str(n): float(g) for n, g in zip(rows["name"], gains, strict=True) if g > 0},
    )


_AMCT_PACKAGES = {"0": "amct_caffe", "3": "amct_tensorflow", "5": "amct_onnx"}
"""ATC ``--framework`` of the source model -> the AMCT package that quantizes it."""


def _amct(ctx: AnalysisContext) -> tuple[str, Fix]:
    """The AMCT tool for the model's source framework (from the OM's recorded atc command line), and the fix: a
    calibration command for an ONNX model (the form the ATC flow takes when the framework is not recorded)."""
    framework = atc_option(graph_cmdline(ctx.graph), "framework")
    package = _AMCT_PACKAGES.get(str(framework).strip("\"'")) if framework else None
    if package not in (None, "amct_onnx"):
        return (f"{package}, the AMCT package for the model's source framework",
                Fix("code", f"{package} post-training quantization, then ATC", {"tool": package}))
    shape = _input_shape(ctx)
    cmd = ("amct_onnx calibration --model model.onnx --save_path ./quant "
           + (f'--input_shape "{shape}" ' if shape else '--input_shape "<input>:<n,c,h,w>" ')
           + '--data_dir ./calibration_data --data_types "float32"')
    which = "amct_onnx for the ONNX source model" if package else (
        "amct_onnx for an ONNX source model; the AMCT package of the model's framework otherwise")
    return which, Fix("code", "AMCT post-training quantization, then ATC", {"snippet": cmd}, cmd)


def _input_shape(ctx: AnalysisContext) -> str | None:
    """``--input_shape`` recorded in the OM's atc command line (AMCT takes the same form)."""
    shape = atc_option(graph_cmdline(ctx.graph), "input_shape")
    return shape.strip("\"'") if shape else None


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [PrecisionKB]
