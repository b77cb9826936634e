"""Generate the built-in example: an SSD-like face-mask detector with a Mish backbone on Ascend 310P3.

The model carries the problems the built-in knowledge bases are about, as they appear in real msprof output
(CANN 8.x ``mindstudio_profiler_output`` layout, op_summary header V3 with unprefixed 310P metrics) and in the
``atc --mode=1`` JSON of its OM:

- UB fusion switched off (``--fusion_switch_file`` with ``"ALL": "off"``): Conv2D -> BNInferenceD -> Relu/Mish
  chains run as separate kernels, each writing its output to global memory and reading it back;
- Mish decomposed into Softplus -> Tanh -> Mul in the backbone (the OM was built with CANN 8.0, whose op set
  predates the native Mish kernel CANN 8.1 has on 310P);
- preprocessing after ``Data`` (Cast uint8->fp16, Sub mean, Mul 1/std, TransData NCHW->NC1HWC0) that AIPP
  could absorb;
- a redundant TransData round trip (NC1HWC0 -> NCHW -> NC1HWC0) and heads that leave 5HD for Transpose/Reshape;
- post-processing on the AI CPU with int64 tensors (Cast to int64, NonZero, GatherV2, NonMaxSuppressionV3).

Durations follow a simple device model (cube/vector throughput and 310P3 bandwidth with realistic
efficiencies) plus deterministic jitter, 10 inferences. Run ``python -m advisor.examples.build`` to regenerate;
the output is deterministic.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

HERE = Path(__file__).parent
EXAMPLE_DIR = HERE / "ssd_mish_310p"
PROF_NAME = "PROF_000001_20261101093000123_EXAMPLEA"
STAMP = "20261101093012"
GRAPH_NAME = "ssd_mish_310p.om.json"
ITERATIONS = 10

# device model of an Ascend 310P3 (peaks from rules/platforms.yaml, practical efficiencies)
CUBE_FLOPS = 69.47e12 * 0.45
VEC_FLOPS = 2.2e12 * 0.5
BANDWIDTH = 204e9 * 0.7
LAUNCH_US = 3.0
AICPU_BASE_US = 60.0
AICPU_BYTES_PER_S = 1.0e9

HEADER = [
    "Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "OP State", "Task Type",
    "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Input Shapes",
    "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types", "Output Formats", "Context ID",
    "aicore_time(us)", "total_cycles", "vec_time(us)", "vec_ratio", "mac_time(us)", "mac_ratio", "scalar_time(us)",
    "scalar_ratio", "mte1_time(us)", "mte1_ratio", "mte2_time(us)", "mte2_ratio", "mte3_time(us)", "mte3_ratio",
    "icache_miss_rate", "memory_bound",
]

DT_NAME = {"FLOAT16": "DT_FLOAT16", "FLOAT": "DT_FLOAT", "UINT8": "DT_UINT8", "INT64": "DT_INT64", "INT32": "DT_INT32"}
DT_BYTES = {"FLOAT16": 2, "FLOAT": 4, "UINT8": 1, "INT64": 8, "INT32": 4}
KERNEL_LIB = {"AI_CORE": "AIcoreEngine", "AI_CPU": "aicpu_ascend_kernel", "GE_LOCAL": "DNN_VM_GE_LOCAL_OP_STORE"}


@dataclass
class Tensor:
    shape: list[int]
    dtype: str = "FLOAT16"
    fmt: str = "NC1HWC0"
    origin_shape: list[int] | None = None
    origin_format: str = "NCHW"

    @property
    def bytes(self) -> int:
        return int(np.prod(self.shape)) * DT_BYTES[self.dtype]


@dataclass
class Op:
    name: str
    type: str
    inputs: list[tuple[str, Tensor]]  # (producer "name:idx" or "", tensor)
    outputs: list[Tensor]
    engine: str = "AI_CORE"
    flops: float = 0.0
    cube: bool = False
    attrs: dict[str, object] = field(default_factory=dict)

    @property
    def runs_on_device(self) -> bool:
        return self.engine in ("AI_CORE", "AI_CPU")


def _5hd(n: int, c: int, h: int, w: int) -> Tensor:
    return Tensor([n, math.ceil(c / 16), h, w, 16], origin_shape=[n, c, h, w])


def _nchw(n: int, c: int, h: int, w: int, dtype: str = "FLOAT16") -> Tensor:
    return Tensor([n, c, h, w], dtype, "NCHW", [n, c, h, w])


class ModelBuilder:
    """Lays out the ops of the example model in execution order."""

    def __init__(self) -> None:
        self.ops: list[Op] = []
        self.counter = 0

    def add(self, type_: str, inputs: list[tuple[str, Tensor]], outputs: list[Tensor], *, name: str | None = None,
            **kw: object) -> str:
        name = name or f"{type_}_{self.counter}"
        self.counter += 1
        self.ops.append(Op(name, type_, inputs, outputs, **kw))  # type: ignore[arg-type]
        return name

    def const(self, name: str, shape: list[int], dtype: str = "FLOAT16", fmt: str = "NCHW") -> tuple[str, Tensor]:
        t = Tensor(shape, dtype, fmt, shape, "NCHW")
        self.add("Const", [], [t], name=name, engine="GE_LOCAL")
        return f"{name}:0", t

    def conv_block(self, x: tuple[str, Tensor], cout: int, stride: int, act: str) -> tuple[str, Tensor]:
        src, t = x
        n, c, h, w = t.origin_shape  # type: ignore[misc]
        ho, wo = math.ceil(h / stride), math.ceil(w / stride)
        k = 3
        idx = self.counter
        wname, wt = self.const(f"conv{idx}_weight", [math.ceil(c / 16) * k * k, math.ceil(cout / 16), 16, 16],
                               fmt="FRACTAL_Z")
        out = _5hd(n, cout, ho, wo)
        conv = self.add("Conv2D", [(src, t), (wname, wt)], [out], name=f"Conv_{idx}",
                        flops=2.0 * n * cout * ho * wo * c * k * k, cube=True,
                        attrs={"strides": [1, 1, stride, stride], "pads": [1, 1, 1, 1]})
        bn = self.add("BNInferenceD", [(f"{conv}:0", out)], [out], name=f"BatchNormalization_{idx + 1}",
                      flops=2.0 * np.prod(out.shape))
        cur = f"{bn}:0"
        if act == "relu":
            r = self.add("Relu", [(cur, out)], [out], name=f"Relu_{idx + 2}", flops=float(np.prod(out.shape)))
            return f"{r}:0", out
        sp = self.add("Softplus", [(cur, out)], [out], name=f"Softplus_{idx + 2}", flops=4.0 * np.prod(out.shape))
        th = self.add("Tanh", [(f"{sp}:0", out)], [out], name=f"Tanh_{idx + 3}", flops=4.0 * np.prod(out.shape))
        mul = self.add("Mul", [(cur, out), (f"{th}:0", out)], [out], name=f"Mul_{idx + 4}",
                       flops=float(np.prod(out.shape)))
        return f"{mul}:0", out

    def transdata(self, x: tuple[str, Tensor], to: str, name: str) -> tuple[str, Tensor]:
        src, t = x
        n, c, h, w = t.origin_shape  # type: ignore[misc]
        out = _5hd(n, c, h, w) if to == "NC1HWC0" else _nchw(n, c, h, w, t.dtype)
        self.add("TransData", [(src, t)], [out], name=name, attrs={"src_format": t.fmt, "dst_format": to})
        return f"{name}:0", out


def build_model() -> ModelBuilder:
    m = ModelBuilder()
    image = Tensor([1, 3, 300, 300], "UINT8", "NCHW", [1, 3, 300, 300])
    m.add("Data", [], [image], name="images", engine="GE_LOCAL", attrs={"index": 0})
    x = ("images:0", image)
    f16 = _nchw(1, 3, 300, 300)
    m.add("Cast", [x], [f16], name="Cast_0", flops=float(np.prod(f16.shape)), attrs={"dst_type": 1})
    mean = m.const("Sub_0_mean", [1, 3, 1, 1])
    m.add("Sub", [("Cast_0:0", f16), mean], [f16], name="Sub_1", flops=float(np.prod(f16.shape)))
    scale = m.const("Mul_2_scale", [1, 3, 1, 1])
    m.add("Mul", [("Sub_1:0", f16), scale], [f16], name="Mul_2", flops=float(np.prod(f16.shape)))
    x = m.transdata(("Mul_2:0", f16), "NC1HWC0", "trans_TransData_3")

    plan = [(32, 2, "mish"), (64, 1, "mish"), (64, 2, "mish"), (128, 1, "mish"), (128, 2, "relu"),
            (256, 1, "relu"), (256, 2, "relu"), (512, 1, "relu"), (256, 2, "relu"), (256, 2, "relu")]
    feature_maps = []
    for i, (cout, stride, act) in enumerate(plan):
        x = m.conv_block(x, cout, stride, act)
        if i == 3:  # a framework-side Identity on NCHW left a 5HD -> NCHW -> 5HD round trip
            x = m.transdata(x, "NCHW", "trans_TransData_roundtrip_a")
            x = m.transdata(x, "NC1HWC0", "trans_TransData_roundtrip_b")
        if i in (5, 7, 8, 9):
            feature_maps.append(x)

    locs, confs = [], []
    for j, (src, t) in enumerate(feature_maps):
        n, c, h, w = t.origin_shape  # type: ignore[misc]
        for kind, ch, bucket in (("loc", 16, locs), ("conf", 8, confs)):
            idx = m.counter
            wname, wt = m.const(f"head{j}_{kind}_weight", [math.ceil(c / 16) * 9, 1, 16, 16], fmt="FRACTAL_Z")
            out = _5hd(n, ch, h, w)
            conv = m.add("Conv2D", [(src, t), (wname, wt)], [out], name=f"Conv_{idx}_{kind}{j}",
                         flops=2.0 * n * ch * h * w * c * 9, cube=True)
            nchw = m.transdata((f"{conv}:0", out), "NCHW", f"trans_TransData_{kind}{j}")
            nhwc = Tensor([n, h, w, ch], "FLOAT16", "NHWC", [n, h, w, ch], "NHWC")
            tr = m.add("TransposeD", [nchw], [nhwc], name=f"Transpose_{kind}{j}", attrs={"perm": [0, 2, 3, 1]})
            flat = Tensor([n, h * w * ch // (4 if kind == "loc" else 2), 4 if kind == "loc" else 2], "FLOAT16",
                          "ND", None, "ND")
            r = m.add("Reshape", [(f"{tr}:0", nhwc)], [flat], name=f"Reshape_{kind}{j}", engine="GE_LOCAL")
            bucket.append((f"{r}:0", flat))
    total_boxes = sum(t.shape[1] for _, t in locs)
    loc_all = Tensor([1, total_boxes, 4], "FLOAT16", "ND", None, "ND")
    conf_all = Tensor([1, total_boxes, 2], "FLOAT16", "ND", None, "ND")
    m.add("ConcatD", locs, [loc_all], name="Concat_loc", flops=0.0, attrs={"concat_dim": 1})
    m.add("ConcatD", confs, [conf_all], name="Concat_conf", flops=0.0, attrs={"concat_dim": 1})
    m.add("SoftmaxV2", [("Concat_conf:0", conf_all)], [conf_all], name="Softmax_conf",
          flops=5.0 * np.prod(conf_all.shape))
    scores = Tensor([1, total_boxes], "FLOAT16", "ND", None, "ND")
    m.add("ReduceMaxD", [("Softmax_conf:0", conf_all)], [scores], name="ReduceMax_scores",
          flops=float(np.prod(conf_all.shape)))
    s64 = Tensor([1, total_boxes], "INT64", "ND", None, "ND")
    m.add("Cast", [("ReduceMax_scores:0", scores)], [s64], name="post/Cast_int64", engine="AI_CPU",
          attrs={"dst_type": 9})
    idx64 = Tensor([total_boxes // 8, 2], "INT64", "ND", None, "ND")
    m.add("NonZero", [("post/Cast_int64:0", s64)], [idx64], name="post/NonZero", engine="AI_CPU")
    boxes = Tensor([total_boxes // 8, 4], "FLOAT16", "ND", None, "ND")
    m.add("GatherV2", [("Concat_loc:0", loc_all), ("post/NonZero:0", idx64)], [boxes], name="post/GatherV2",
          engine="AI_CPU", attrs={"batch_dims": 0})
    keep = Tensor([200], "INT64", "ND", None, "ND")
    m.add("NonMaxSuppressionV3", [("post/GatherV2:0", boxes), ("ReduceMax_scores:0", scores)], [keep],
          name="post/NonMaxSuppressionV3", engine="AI_CPU")
    m.add("NetOutput", [("post/NonMaxSuppressionV3:0", keep), ("post/GatherV2:0", boxes)], [], name="Node_Output",
          engine="GE_LOCAL")
    return m


# -------------------------------------------------------------------------------------------------------------
# profile rows
# -------------------------------------------------------------------------------------------------------------
def _shapes(ts: list[Tensor]) -> str:
    return '"' + ";".join(",".join(str(d) for d in t.shape) for t in ts) + '"'


def _timing(op: Op, rng: np.random.Generator) -> dict[str, float]:
    """Duration and PipeUtilization ratios from a roofline-style device model with deterministic jitter."""
    in_bytes = sum(t.bytes for _, t in op.inputs)
    out_bytes = sum(t.bytes for t in op.outputs)
    mem_us = (in_bytes + out_bytes) / BANDWIDTH * 1e6
    if op.engine == "AI_CPU":
        dur = AICPU_BASE_US + (in_bytes + out_bytes) / AICPU_BYTES_PER_S * 1e6
        return {"dur": dur * rng.uniform(0.95, 1.05)}
    comp_us = op.flops / (CUBE_FLOPS if op.cube else VEC_FLOPS) * 1e6
    dur = max(mem_us, comp_us) + 0.25 * min(mem_us, comp_us) + LAUNCH_US
    dur *= rng.uniform(0.97, 1.03)
    busy = dur - LAUNCH_US * 0.6
    mte2 = min(0.95, (in_bytes / BANDWIDTH * 1e6) / busy)
    mte3 = min(0.9, (out_bytes / BANDWIDTH * 1e6) / busy)
    mac = min(0.95, comp_us / busy) if op.cube else 0.0
    vec = (min(0.9, comp_us / busy) if not op.cube else 0.08) + 0.02
    return {"dur": dur, "aicore": busy, "mac": mac, "vec": vec, "mte2": mte2, "mte3": mte3,
            "scalar": 0.05 + 0.02 * rng.random(), "mte1": 0.3 * mac}


def profile_rows(m: ModelBuilder) -> list[list[str]]:
    rng = np.random.default_rng(20261101)
    rows: list[list[str]] = []
    t = 1_762_000_000_000.0  # us
    task = 0
    device_ops = [op for op in m.ops if op.runs_on_device]
    for it in range(ITERATIONS):
        t += 180.0 if it else 0.0  # host gap between inferences
        for op in device_ops:
            tm = _timing(op, rng)
            dur = tm["dur"]
            wait = 1.2 if op.engine == "AI_CORE" else 3.5
            start = t + wait
            block_dim = 8 if op.engine == "AI_CORE" else 1
            ins = [tn for _, tn in op.inputs]
            base = ["0", "1", str(task), "2" if op.engine == "AI_CORE" else "3", op.name, op.type, "static",
                    op.engine, f"{start:.3f}\t", f"{dur:.3f}", f"{wait:.3f}", str(block_dim), _shapes(ins),
                    ";".join(t_.dtype for t_ in ins), ";".join(t_.fmt for t_ in ins), _shapes(op.outputs),
                    ";".join(t_.dtype for t_ in op.outputs), ";".join(t_.fmt for t_ in op.outputs), "N/A"]
            if op.engine == "AI_CPU":
                metrics = ["N/A"] * 16
            else:
                busy = tm["aicore"]
                cycles = int(busy * 1060 * block_dim)
                mb = tm["mte2"] / max(tm["mac"], tm["vec"])
                metrics = [f"{busy:.3f}", str(cycles), f"{busy * tm['vec']:.3f}", f"{tm['vec']:.3f}",
                           f"{busy * tm['mac']:.3f}", f"{tm['mac']:.3f}", f"{busy * tm['scalar']:.3f}",
                           f"{tm['scalar']:.3f}", f"{busy * tm['mte1']:.3f}", f"{tm['mte1']:.3f}",
                           f"{busy * tm['mte2']:.3f}", f"{tm['mte2']:.3f}", f"{busy * tm['mte3']:.3f}",
                           f"{tm['mte3']:.3f}", f"{0.01 + 0.02 * rng.random():.3f}", f"{mb:.3f}"]
            rows.append(base + metrics)
            t = start + dur
            task += 1
    return rows


def _csv_text(header: list[str], rows: list[list[str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n", quoting=csv.QUOTE_MINIMAL)
    w.writerow(header)
    for r in rows:
        # shape cells carry literal quotes, exactly as msprof writes them ("""1,3,300,300""")
        w.writerow(r)
    return buf.getvalue()


def op_statistic(rows: list[list[str]]) -> str:
    stats: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        stats.setdefault((r[5], r[7]), []).append(float(r[9]))
    total = sum(sum(v) for v in stats.values())
    out = [["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
            "Max Time(us)", "Ratio(%)"]]
    for (typ, core), v in sorted(stats.items(), key=lambda kv: -sum(kv[1])):
        out.append(["0", typ, core, str(len(v)), f"{sum(v):.3f}", f"{min(v):.3f}", f"{sum(v) / len(v):.3f}",
                    f"{max(v):.3f}", f"{100 * sum(v) / total:.3f}"])
    return _csv_text(out[0], out[1:])


def api_statistic(rows: list[list[str]]) -> str:
    per_iter = sum(float(r[9]) for r in rows) / ITERATIONS
    lines = [
        ["host", "acl", "aclmdlExecute", f"{per_iter * ITERATIONS * 1.04:.3f}", str(ITERATIONS),
         f"{per_iter * 1.04:.3f}", f"{per_iter * 1.01:.3f}", f"{per_iter * 1.09:.3f}", "4210.551"],
        ["host", "acl", "aclmdlLoadFromFile", "91234.870", "1", "91234.870", "91234.870", "91234.870", "0"],
        ["host", "runtime", "rtMemcpy", "1320.400", str(2 * ITERATIONS), "66.020", "41.100", "98.300", "310.220"],
    ]
    header = ["Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)", "Variance"]
    return _csv_text(header, lines)


# -------------------------------------------------------------------------------------------------------------
# OM JSON (atc --mode=1)
# -------------------------------------------------------------------------------------------------------------
def _desc(t: Tensor) -> dict[str, object]:
    attrs = [{"key": "origin_format", "value": {"s": t.origin_format}}]
    if t.origin_shape:
        attrs.append({"key": "origin_shape", "value": {"list": {"i": t.origin_shape, "val_type": "VT_LIST_INT"}}})
    return {"dtype": DT_NAME[t.dtype], "shape": {"dim": t.shape}, "layout": t.fmt, "real_dim_cnt": len(t.shape),
            "device_type": "NPU", "attr": attrs}


def _attr(key: str, value: object) -> dict[str, object]:
    if isinstance(value, bool):
        return {"key": key, "value": {"b": value}}
    if isinstance(value, int):
        return {"key": key, "value": {"i": value}}
    if isinstance(value, list):
        return {"key": key, "value": {"list": {"i": value, "val_type": "VT_LIST_INT"}}}
    return {"key": key, "value": {"s": str(value)}}


def om_json(m: ModelBuilder) -> dict[str, object]:
    ops_json = []
    for i, op in enumerate(m.ops):
        attrs = [_attr("_ge_attr_op_kernel_lib_name", KERNEL_LIB[op.engine])]
        if op.type == "Cast" and "dst_type" in op.attrs:
            attrs.append({"key": "dst_type", "value": {"dt": op.attrs["dst_type"]}})
        attrs += [_attr(k, v) for k, v in op.attrs.items() if k != "dst_type"]
        if op.engine == "AI_CORE":
            attrs.append(_attr("tvm_blockdim", 8))
        attrs.append({"key": "_datadump_original_op_names", "value": {"list": {"s": [op.name],
                                                                                 "val_type": "VT_LIST_STRING"}}})
        entry: dict[str, object] = {"name": op.name, "type": op.type, "id": i, "attr": attrs,
                                    "output_desc": [_desc(t) for t in op.outputs]}
        if op.engine != "GE_LOCAL":
            entry["stream_id"] = 0
        if op.inputs:
            entry["input"] = [src for src, _ in op.inputs]
            entry["input_desc"] = [_desc(t) for _, t in op.inputs]
        ops_json.append(entry)
    cmdline = ("atc --model=ssd_mish.onnx --framework=5 --output=ssd_mish_310p --soc_version=Ascend310P3 "
               "--fusion_switch_file=fusion_switch.cfg --input_shape=images:1,3,300,300")
    return {
        "name": "ssd_mish_310p",
        "version": 1,
        "custom_version": "1.83.10.1.252",
        "attr": [
            {"key": "soc_version", "value": {"s": "Ascend310P3"}},
            {"key": "atc_cmdline", "value": {"s": cmdline}},
            {"key": "framework_type", "value": {"s": "5"}},
            {"key": "opp_version", "value": {"s": "8.0.0"}},
            {"key": "stream_num", "value": {"i": 2}},
        ],
        "graph": [{"name": "ssd_mish_310p", "input": ["images:0"], "op": ops_json}],
    }


def write(out_dir: Path = EXAMPLE_DIR) -> Path:
    m = build_model()
    rows = profile_rows(m)
    prof = out_dir / PROF_NAME
    output = prof / "mindstudio_profiler_output"
    output.mkdir(parents=True, exist_ok=True)
    (output / f"op_summary_{STAMP}.csv").write_text(_csv_text(HEADER, rows), encoding="utf-8")
    (output / f"op_statistic_{STAMP}.csv").write_text(op_statistic(rows), encoding="utf-8")
    (output / f"api_statistic_{STAMP}.csv").write_text(api_statistic(rows), encoding="utf-8")
    device = prof / "device_0"
    device.mkdir(exist_ok=True)
    info = {"DeviceInfo": [{"id": 0, "ai_core_num": 8, "aiv_num": 7, "aic_frequency": "1060",
                            "aiv_frequency": "1060", "hwts_frequency": "50"}],
            "platform_version": "Ascend310P3", "version": "1.0"}
    (device / "info.json.0").write_text(json.dumps(info, indent=1) + "\n", encoding="utf-8")
    switch = {"Switch": {"GraphFusion": {"ALL": "off"}, "UBFusion": {"ALL": "off"}}}
    (out_dir / "fusion_switch.cfg").write_text(json.dumps(switch, indent=2) + "\n", encoding="utf-8")
    graph_path = out_dir / GRAPH_NAME
    graph_path.write_text(json.dumps(om_json(m), indent=1) + "\n", encoding="utf-8")
    return out_dir


if __name__ == "__main__":
    print(write())
