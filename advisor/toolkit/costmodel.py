"""A cost model of the chip: FLOPs and bytes of an op against the chip's peaks.

Two users:

* the shape math (:func:`conv_flops`, :func:`matmul_flops`, :func:`tensor_bytes`) that turns tensor descriptions
  into work, shared with the roofline knowledge base;
* the static audit (a model graph without a profile): :func:`estimate_ops` gives every compute node of the graph an
  estimated duration ``max(FLOPs / (peak x efficiency), bytes / (bandwidth x efficiency)) + launch overhead`` (AI CPU
  nodes: a fixed cost plus bytes at the AI CPU rate) and returns a normalized ops table, so the graph-capable rules
  of every knowledge base run unchanged on it. Every figure it produces is an estimate; the report says so.

Peaks come from ``ctx.platform`` (``rules/platforms.yaml``), efficiencies and op classes from
``rules/costmodel.yaml``. FLOP conventions: convolution 2 x output elements x weight elements / Cout, matmul
2 x M x N x K, vector ops ``flops_per_element`` x the larger of the first input's and the first output's elements.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from advisor.common.units import fmt_us
from advisor.model import canonical_dtype, canonical_format, dtype_bytes

if TYPE_CHECKING:
    from advisor.graph.model_graph import ModelGraph


# ---------------------------------------------------------------------------------------------------------
# shape math
# ---------------------------------------------------------------------------------------------------------
def numel(shape: Sequence[int] | None) -> int | None:
    """Element count of a shape; None when unknown or dynamic (a negative dim)."""
    if shape is None:
        return None
    dims = list(shape)
    if any((not isinstance(d, (int, np.integer))) or d < 0 for d in dims):
        return None
    return int(math.prod(dims)) if dims else 1


def tensor_bytes(shapes: Sequence[Sequence[int] | None], dtypes: Sequence[str]) -> float:
    """Sum of shape x dtype size over the tensors whose size is known."""
    total = 0.0
    for i, shape in enumerate(shapes):
        if shape is None or i >= len(dtypes):
            continue
        n, size = numel(shape), dtype_bytes(dtypes[i])
        if n is not None and size is not None:
            total += n * size
    return total


def channels(shape: Sequence[int], fmt: str) -> int | None:
    """Channel count of a feature map (padded for 5HD/6HD formats)."""
    if fmt in ("NC1HWC0", "NC1HWC0_C04") and len(shape) == 5:
        return shape[1] * shape[4]
    if fmt == "NDC1HWC0" and len(shape) == 6:
        return shape[2] * shape[5]
    if fmt in ("NHWC", "NDHWC") and len(shape) >= 4:
        return shape[-1]
    if fmt in ("NCHW", "NCDHW") and len(shape) >= 4:
        return shape[1]
    if len(shape) == 5:
        return shape[1] * shape[4]
    if len(shape) == 4:
        return shape[1]
    if len(shape) >= 1:
        return shape[-1]
    return None


def conv_flops(op_type: str, ins: Sequence[Sequence[int] | None], in_fmt: Sequence[str],
               out: Sequence[int] | None, out_fmt: str) -> float:
    """2 x output elements x (Cin/groups x kh x kw) -- the latter as weight elements / Cout."""
    if out is None or len(ins) < 2 or ins[1] is None:
        return math.nan
    w = ins[1]
    n_out, n_w = numel(out), numel(w)
    cout = channels(out, out_fmt)
    if not n_out or not n_w or not cout:
        return math.nan
    w_fmt = in_fmt[1] if len(in_fmt) > 1 else ""
    if op_type == "DepthwiseConv2D":
        fractal = w_fmt.startswith("FRACTAL_Z") and len(out) == 5 and out[1]
        taps = w[0] / out[1] if fractal else n_w / cout
        return 2.0 * n_out * taps
    return 2.0 * n_out * n_w / cout


def matmul_flops(ins: Sequence[Sequence[int] | None], in_fmt: Sequence[str], out: Sequence[int] | None,
                 out_fmt: str) -> float:
    """2 x M x N x K x batch; K from matching dims of ND inputs, else from element counts (NZ formats)."""
    if out is None or len(ins) < 2 or ins[0] is None or ins[1] is None or len(out) < 2:
        return math.nan
    a, b = ins[0], ins[1]
    n_out = numel(out)
    if not n_out or len(a) < 2 or len(b) < 2:
        return math.nan
    nz = "FRACTAL_NZ" in (out_fmt, *in_fmt[:2])
    if not nz:
        m, n = out[-2], out[-1]
        k = None
        if a[-2] == m:
            k = a[-1]
        elif a[-1] == m:
            k = a[-2]
        elif b[-1] == n:
            k = b[-2]
        elif b[-2] == n:
            k = b[-1]
        if k:
            return 2.0 * n_out * k
    n_a, n_b = numel(a), numel(b)
    if not n_a or not n_b:
        return math.nan
    b_fmt = in_fmt[1] if len(in_fmt) > 1 else ""
    matrix_rank = 4 if b_fmt == "FRACTAL_NZ" else 2
    batch_b = math.prod(b[:-matrix_rank]) if len(b) > matrix_rank else 1
    k2 = n_a * n_b / n_out / max(batch_b, 1)
    return 2.0 * n_out * math.sqrt(k2) if k2 > 0 else math.nan


# ---------------------------------------------------------------------------------------------------------
# one op's work
# ---------------------------------------------------------------------------------------------------------
def op_work(op_type: str, ins: Sequence[Sequence[int] | None], in_dtypes: Sequence[str], in_fmt: Sequence[str],
            outs: Sequence[Sequence[int] | None], out_dtypes: Sequence[str], out_fmt: Sequence[str],
            rules: Mapping[str, Any]) -> tuple[float, float, str]:
    """(FLOPs, bytes, unit) of one op; unit is ``cube``, ``vector`` or ``data`` (data movement, 0 FLOPs);
    FLOPs are NaN where the work is not proportional to tensor sizes (sorting, NMS...)."""
    nbytes = tensor_bytes(ins, in_dtypes) + tensor_bytes(outs, out_dtypes)
    out0 = outs[0] if outs else None
    o_fmt = out_fmt[0] if out_fmt else ""
    if op_type in set(rules["conv_types"]):
        return conv_flops(op_type, ins, in_fmt, out0, o_fmt), nbytes, "cube"
    if op_type in set(rules["transposed_conv_types"]):
        # each input element is multiplied with Cout/groups x kh x kw weights
        n_in, n_w = (numel(ins[0]) if ins else None), (numel(ins[1]) if len(ins) > 1 else None)
        cin = channels(ins[0], in_fmt[0] if in_fmt else "") if ins and ins[0] is not None else None
        flops = 2.0 * n_in * n_w / cin if n_in and n_w and cin else math.nan
        return flops, nbytes, "cube"
    if op_type in set(rules["matmul_types"]):
        return matmul_flops(ins, in_fmt, out0, o_fmt), nbytes, "cube"
    if op_type in set(rules["data_movement_types"]):
        return 0.0, nbytes, "data"
    if op_type in set(rules["no_estimate_types"]):
        return math.nan, nbytes, "vector"
    sizes = [n for n in ((numel(ins[0]) if ins else None), numel(out0)) if n is not None]
    per = float(rules["flops_per_element"].get(op_type, rules["default_flops_per_element"]))
    return (float(max(sizes)) * per if sizes else math.nan), nbytes, "vector"


def op_time_us(flops: float, nbytes: float, unit: str, dtype: str, engine: str, platform: Mapping[str, Any],
               rules: Mapping[str, Any]) -> float:
    """Estimated duration of one op at practical efficiencies (``rules/costmodel.yaml``) on this chip."""
    eff = rules["efficiency"]
    if engine == "AI_CPU":
        cpu = rules["ai_cpu"]
        return float(cpu["base_us"]) + nbytes / (float(cpu["bytes_per_us"]))
    bw = float(platform["hbm_gbps"]) * 1e3 * float(eff["bandwidth"])  # bytes per us
    t_mem = nbytes / bw if bw > 0 else 0.0
    if unit == "cube":
        peak = cube_tflops(platform, dtype) * float(eff["cube"])
    elif unit == "vector":
        peak = vector_tflops(platform, dtype) * float(eff["vector"])
    else:
        peak = math.inf
    t_compute = (flops / (peak * 1e6)) if (peak and np.isfinite(flops) and flops > 0) else 0.0
    return max(t_compute, t_mem) + float(rules["launch_overhead_us"])


def cube_tflops(platform: Mapping[str, Any], dtype: str) -> float:
    """Cube peak for a dtype: int8/int4 rates, fp32 where the cube has it, else the fp16 rate (ATC casts)."""
    d = canonical_dtype(dtype or "FLOAT16")
    fp16 = float(platform.get("fp16_tflops") or 1.0)
    if d in ("INT8", "UINT8"):
        return float(platform.get("int8_tops") or 2 * fp16)
    if d == "INT4":
        return 2.0 * float(platform.get("int8_tops") or 2 * fp16)
    if d == "FLOAT":
        return float(platform.get("cube_fp32_tflops") or platform.get("fp32_vector_tflops") or fp16 / 4)
    return fp16


def vector_tflops(platform: Mapping[str, Any], dtype: str) -> float:
    """Vector peak: the fp32 rate, twice that for 16-bit and 8-bit types."""
    base = float(platform.get("fp32_vector_tflops") or float(platform.get("fp16_tflops") or 1.0) / 32)
    return base * (1.0 if canonical_dtype(dtype or "FLOAT") in ("FLOAT", "INT32", "INT64", "DOUBLE") else 2.0)


# ---------------------------------------------------------------------------------------------------------
# the static audit's estimated ops table
# ---------------------------------------------------------------------------------------------------------
def _descs(node: Mapping[str, Any], side: str) -> list[Mapping[str, Any]]:
    return [d or {} for d in (node.get("inputs" if side == "in" else "outputs") or [])]


def _shape(desc: Mapping[str, Any]) -> tuple[int, ...] | None:
    """The descriptor's shape, dynamic dims (-1, -2) taken as 1 (the audit is per sample; the note says so)."""
    shape = desc.get("shape")
    if shape is None:
        return None
    return tuple(max(int(d), 1) if int(d) < 0 else int(d) for d in shape)


def _dynamic(descs: Sequence[Mapping[str, Any]]) -> bool:
    return any(int(d) < 0 for desc in descs for d in (desc.get("shape") or ()))


def _fmt(desc: Mapping[str, Any]) -> str:
    return canonical_format(str(desc.get("format") or desc.get("origin_format") or ""))


def _deployed_dtype(dtype: str, graph_format: str, rules: Mapping[str, Any]) -> str:
    """An ONNX model is not compiled yet: ATC's default precision mode decides the dtype it runs in."""
    d = canonical_dtype(dtype) if dtype else ""
    if graph_format == "onnx" and d in set(rules["precision"]["onnx_cast"]):
        return str(rules["precision"]["onnx_runs_as"])
    return d


def _cell(values: Sequence[str]) -> str:
    return ";".join(values)


def _shape_cell(shapes: Sequence[tuple[int, ...] | None]) -> str:
    return ";".join("" if s is None else ",".join(str(d) for d in s) for s in shapes)


def _beyond_limits(shapes: Sequence[tuple[int, ...] | None], dtypes: Sequence[str], dur: float,
                   rules: Mapping[str, Any]) -> str | None:
    """Why an op's estimate is beyond what any chip can hold or run (``max_tensor_bytes``, ``max_op_us`` of the
    rules); None when it is within them."""
    limit = float(rules["max_tensor_bytes"])
    for i, shape in enumerate(shapes):
        n = numel(shape)
        size = (dtype_bytes(dtypes[i]) if i < len(dtypes) else None) or 1
        if n is not None and n * size > limit:
            return f"a tensor of {n * size:.3g} bytes"
    if not np.isfinite(dur) or dur > float(rules["max_op_us"]):
        return f"an estimated time of {fmt_us(dur)}"
    return None


def estimate_ops(graph: ModelGraph, platform: Mapping[str, Any], rules: Mapping[str, Any]) -> pd.DataFrame:
    """One estimated device task per compute node of ``graph``, in graph order on one stream (canonical ops
    columns; ``start_us`` back to back). Nodes that launch no kernel (inputs, constants, GE-local and runtime
    ops, shape-only ops) are left out, and so are ops whose shapes are beyond physical limits (listed in
    ``ops.attrs["beyond_physical_limits"]``). Extra columns: ``flops``, ``bytes``, ``unit``, ``estimate`` (what decided
    the time: flops or bytes) and ``dynamic_shape`` (a dynamic dim was taken as 1)."""
    from advisor.ingest.normalize import finalize_ops

    skip_types = set(rules["no_kernel_types"])
    skip_engines = set(rules["no_kernel_engines"])
    vector_core = int(platform.get("vector_core_num") or 0) > 0
    rows: list[dict[str, Any]] = []
    beyond: list[str] = []
    order = sorted(graph.g.nodes(data=True), key=lambda nd: (nd[1].get("id") if nd[1].get("id") is not None
                                                              else 1 << 40, nd[0]))
    clock = 0.0
    for name, node in order:
        op_type = str(node.get("type") or "")
        engine = str(node.get("engine") or "UNKNOWN").upper()
        if op_type in skip_types or engine in skip_engines or node.get("called_subgraphs"):
            continue
        ins_d, outs_d = _descs(node, "in"), _descs(node, "out")
        ins, outs = [_shape(d) for d in ins_d], [_shape(d) for d in outs_d]
        in_dt = [_deployed_dtype(str(d.get("dtype") or ""), graph.format, rules) for d in ins_d]
        out_dt = [_deployed_dtype(str(d.get("dtype") or ""), graph.format, rules) for d in outs_d]
        in_fmt, out_fmt = [_fmt(d) for d in ins_d], [_fmt(d) for d in outs_d]
        flops, nbytes, unit = op_work(op_type, ins, in_dt, in_fmt, outs, out_dt, out_fmt, rules)
        if engine in ("AI_CPU", "HOST_CPU"):
            core = "AI_CPU"
        elif unit == "cube" or not vector_core:
            core = "AI_CORE"
        else:
            core = "AI_VECTOR_CORE"
        dtype = (in_dt[0] if unit == "cube" and in_dt else (out_dt[0] if out_dt else "")) or "FLOAT16"
        dur = op_time_us(flops, nbytes, unit, dtype, "AI_CPU" if core == "AI_CPU" else engine, platform, rules)
        if (why := _beyond_limits([*ins, *outs], [*in_dt, *out_dt], dur, rules)) is not None:
            beyond.append(f"{name} ({why})")
            continue
        rows.append({
            "name": name, "type": op_type, "core": core, "start_us": clock, "duration_us": dur, "wait_us": 0.0,
            "stream_id": 0.0, "model_id": 1.0, "step": 1.0, "task_id": float(len(rows)),
            "input_shapes": _shape_cell(ins), "input_dtypes": _cell(in_dt), "input_formats": _cell(in_fmt),
            "output_shapes": _shape_cell(outs), "output_dtypes": _cell(out_dt), "output_formats": _cell(out_fmt),
            "flops": flops, "bytes": nbytes, "unit": "ai_cpu" if core == "AI_CPU" else unit,
            "estimate": "flops" if np.isfinite(flops) and flops > 0 else "bytes",
            "dynamic_shape": _dynamic(ins_d) or _dynamic(outs_d),
        })
        clock += dur
    frame = pd.DataFrame(rows) if rows else pd.DataFrame({"name": pd.Series(dtype="str")})
    ops = finalize_ops(frame)
    for col in ("unit", "estimate"):
        if col in ops.columns:
            ops[col] = ops[col].astype("category")
    ops.attrs["beyond_physical_limits"] = beyond
    return ops


def basis(platform: Mapping[str, Any], rules: Mapping[str, Any], graph_format: str) -> str:
    """One sentence saying how the estimates were made (shown with every static-audit figure)."""
    eff = rules["efficiency"]
    text = (f"estimated from a cost model of {platform.get('soc')}: FLOPs and bytes of each op from the graph's "
            f"tensor shapes against {platform.get('fp16_tflops')} TFLOPS fp16 cube / "
            f"{platform.get('fp32_vector_tflops')} TFLOPS fp32 vector / {platform.get('hbm_gbps')} GB/s at "
            f"{eff['cube']:.0%}/{eff['vector']:.0%}/{eff['bandwidth']:.0%} efficiency plus "
            f"{fmt_us(float(rules['launch_overhead_us']))} per kernel")
    if graph_format == "onnx":
        text += (f"; fp32 ops assumed to run as {rules['precision']['onnx_runs_as']} (ATC's default "
                 "--precision_mode=force_fp16)")
    return text


def values_at(column: pd.Series, positions: np.ndarray) -> list[Any]:
    """The cells of ``column`` at row ``positions`` as ``column.iloc[i]`` gives them (a missing category: NaN), one
    scalar at a time: a handful of rows, without converting every category of a large column to objects."""
    values = column.array
    if isinstance(values, pd.Categorical):
        names, codes = values.categories, values.codes
        return [names[c] if c >= 0 else np.nan for c in codes[positions]]
    return [values[int(i)] for i in positions]


_SHAPE_KEYS = ("type", "input_shapes", "input_dtypes", "input_formats", "output_shapes", "output_dtypes",
               "output_formats")


def profile_work(ops: pd.DataFrame, rules: Mapping[str, Any]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(FLOPs, bytes, unit) of each row of a profile's ops table from its tensor descriptions, computed once per
    distinct (type, shapes, dtypes, formats) combination; NaN where the profile has no shapes."""
    from advisor.model import parse_list, parse_shapes

    n = len(ops)
    if not n:
        return np.zeros(0), np.zeros(0), np.zeros(0, dtype=object)
    codes = np.zeros(n, dtype=np.int64)
    for key in _SHAPE_KEYS:
        col = ops[key] if isinstance(ops[key].dtype, pd.CategoricalDtype) else ops[key].astype("category")
        c = col.cat.codes.to_numpy().astype(np.int64) + 1
        codes, _ = pd.factorize(codes * (len(col.cat.categories) + 2) + c, sort=False)
        codes = codes.astype(np.int64)
    first = np.unique(codes, return_index=True)[1]
    out_flops = np.full(len(first), np.nan)
    out_bytes = np.full(len(first), np.nan)
    out_unit = np.empty(len(first), dtype=object)
    # the keys' values of each combination's first row, a column at a time (a row of the whole table is a
    # Series of every column: most of the cost on a small profile)
    firsts = {key: values_at(ops[key], first) for key in _SHAPE_KEYS}
    for k in range(len(first)):
        row = {key: values[k] for key, values in firsts.items()}
        op_type = str(row["type"]) if pd.notna(row["type"]) else ""
        ins, outs = list(parse_shapes(row["input_shapes"])), list(parse_shapes(row["output_shapes"]))
        in_fmt = [canonical_format(f) for f in parse_list(row["input_formats"])]
        out_fmt = [canonical_format(f) for f in parse_list(row["output_formats"])]
        flops, nbytes, unit = op_work(op_type, ins, list(parse_list(row["input_dtypes"])), in_fmt, outs,
                                      list(parse_list(row["output_dtypes"])), out_fmt, rules)
        if not ins and not outs:
            flops, nbytes = math.nan, math.nan
        out_flops[k], out_bytes[k], out_unit[k] = flops, (nbytes if nbytes > 0 else math.nan), unit
    # factorize numbers combinations 0..k-1 in order of appearance, and first[k] is the first row of combination k
    return out_flops[codes], out_bytes[codes], out_unit[codes]
