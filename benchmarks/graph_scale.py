"""Benchmark ``load_graph`` on generated OM-JSON graphs of growing size (not a test: it prints a table).

Usage:
    python benchmarks/graph_scale.py                         # 25k, 50k, 100k nodes
    python benchmarks/graph_scale.py --nodes 100000 --keep /tmp/big.om.json
    python benchmarks/graph_scale.py --nodes 2000            # quick check that the script works
    python benchmarks/graph_scale.py --kind ge-proto --nodes 5000 20000   # the same ops as a GE text dump

Each graph mimics ``atc --mode=1`` output of a large model: a chain of conv/matmul blocks with their Const
weights, TransData/Cast boundaries, ~30 attributes per compute op (kernel lib, original op names, fusion
passes, kernel names, slice info), input/output descriptors with origin_format/origin_shape attrs, ``null``
entries, singular floats as strings, an occasional control edge. The load runs in a fresh process so the
peak RSS (``ru_maxrss``) belongs to it alone; the baseline row is the same process importing the modules
without loading, so "load RSS" minus baseline is the graph's cost. Wall time suffers when the machine is
busy; "load CPU s" (process CPU time) is the steadier figure.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

TYPES = [("Conv2D", "AIcoreEngine"), ("MatMulV2", "AIcoreEngine"), ("Add", "AIcoreEngine"),
         ("Relu", "AIcoreEngine"), ("TransData", "AIcoreEngine"), ("Cast", "AIcoreEngine"),
         ("Const", "DNN_VM_GE_LOCAL_OP_STORE"), ("Const", "DNN_VM_GE_LOCAL_OP_STORE"),
         ("Unique", "aicpu_tf_kernel"), ("ReduceMeanD", "AIcoreEngine")]


def _a(key: str, value: Any) -> dict[str, Any]:
    return {"key": key, "value": value}


def _desc(fmt: str, dims: list[int], dtype: str = "DT_FLOAT16") -> dict[str, Any]:
    return {"dtype": dtype, "layout": fmt, "shape": {"dim": dims}, "device_type": "NPU", "real_dim_cnt": len(dims),
            "attr": [_a("origin_format", {"s": "NCHW"}),
                     _a("origin_shape", {"list": {"i": [1, 64, 56, 56], "val_type": "VT_LIST_INT"}}),
                     _a("shape_range", None), _a("origin_shape_initialized", {"b": True}),
                     _a("_datadump_origin_name", {"s": "x"})]}


def make_op(i: int) -> dict[str, Any]:
    op_type, lib = TYPES[i % len(TYPES)]
    name = f"block{i // len(TYPES)}/{op_type}_{i}"
    if op_type == "Conv2D":
        name = f"Conv_{i}Relu_{i + 1}"
    attrs = [
        _a("_ge_attr_op_kernel_lib_name", {"s": lib}),
        _a("_lxfusion_op_kernel_lib_name", {"s": lib}),
        _a("_datadump_original_op_names", {"list": {"s": [f"Conv_{i}", f"Relu_{i + 1}"], "val_type": "VT_LIST_STRING"}}),
        _a("tvm_blockdim", {"i": 32}),
        _a("imply_type", {"i": 1}),
        _a("_fe_imply_type", {"i": 6}),
        _a("tvm_magic", {"s": "RT_DEV_BINARY_MAGIC_ELF"}),
        _a(f"{name}_kernelname", {"s": f"te_{op_type.lower()}_{i:064x}_1__kernel0"}),
        _a("_op_slice_info", {"s": '{"_op_slice_info":{"l1FusionEnable":0,"minTbeL1Space":0,"reduceMaps":[],'
                                   '"splitMaps":[{"inputList":[{"axis":[0],"idx":0}]}]}}'}),
        _a("strides", {"list": {"i": [1, 1, 1, 1], "val_type": "VT_LIST_INT"}}),
        _a("pads", {"list": {"i": [0, 0, 0, 0], "val_type": "VT_LIST_INT"}}),
        _a("dilations", {"list": {"i": [1, 1, 1, 1], "val_type": "VT_LIST_INT"}}),
        _a("groups", {"i": 1}),
        _a("alpha", {"f": "0.1"}),
        _a("OUTPUT_IS_VAR", {"list": {"b": [False], "val_type": "VT_LIST_BOOL"}}),
        _a("_is_op_dynamic_impl", {"b": False}),
        _a("continuous_input", {"b": False}),
        _a("_input_name_key", {"list": {"s": ["x", "filter", "bias"]}}),
        _a("_input_name_value", {"list": {"i": [0, 1, 2]}}),
        _a("_output_name_key", {"list": {"s": ["y"]}}),
        _a("_session_graph_id", {"s": "-1_0"}),
        _a("op_para_size", {"i": 16384}),
        _a("shape_range", None),
    ]
    if i % 7 == 0:
        attrs.append(_a("pass_name", {"list": {"s": ["ConvScaleFusionPass"], "val_type": "VT_LIST_STRING"}}))
    if i % 11 == 0:
        attrs.append(_a("pass_name_ub", {"s": "TbeConvDoubleInFusionPass"}))
    if op_type == "Cast":
        attrs.append(_a("dst_type", {"i": 1}))
    inputs = [] if i == 0 else [f"{make_name(i - 1)}:0"]
    if i > 2:
        inputs.append(f"{make_name(i - 2)}:0")
    if i % 50 == 0 and i > 3:
        inputs.append(f"{make_name(i - 3)}:-1")
    op = {"name": name, "type": op_type, "id": i, "attr": attrs, "input": inputs, "has_out_attr": True,
          "input_desc": [_desc("NC1HWC0", [1, 4, 56, 56, 16]), _desc("FRACTAL_Z", [36, 4, 16, 16])][:len(inputs)]
          + ([None] if i % 13 == 0 else []),
          "output_desc": [_desc("NC1HWC0", [1, 4, 56, 56, 16])]}
    if i % 3:
        op["stream_id"] = i % 3
    return op


def make_name(i: int) -> str:
    op_type = TYPES[i % len(TYPES)][0]
    return f"Conv_{i}Relu_{i + 1}" if op_type == "Conv2D" else f"block{i // len(TYPES)}/{op_type}_{i}"


def _set_attr(msg: Any, value: dict[str, Any] | None) -> None:
    """An OM JSON AttrDef dict -> the AttrDef message (strings are bytes in the proto)."""
    for k, x in (value or {}).items():
        if k == "s":
            msg.s = x.encode()
        elif k in ("i", "b"):
            setattr(msg, k, x)
        elif k == "f":
            msg.f = float(x)
        elif k == "list":
            for lk, items in x.items():
                if lk == "val_type":
                    msg.list.val_type = msg.list.ListValueType.Value(items)
                else:
                    getattr(msg.list, lk).extend(i.encode() if lk == "s" else i for i in items)


def _set_desc(msg: Any, d: dict[str, Any] | None) -> None:
    from advisor.graph.proto import ge_ir_pb2

    if not d:
        return
    msg.dtype = ge_ir_pb2.DataType.Value(d["dtype"])
    msg.layout = d["layout"]
    msg.shape.dim.extend(d["shape"]["dim"])
    for e in d["attr"]:
        if e:
            _set_attr(msg.attr[e["key"]], e["value"])


def generate_ge_text(n: int, path: Path) -> None:
    """The same ops as a ``ge_proto_*.txt`` dump (protobuf text of ModelDef), written op by op."""
    from google.protobuf import text_format

    from advisor.graph.proto import ge_ir_pb2

    with path.open("w") as fh:
        fh.write('graph {\n  name: "bench_0"\n')
        for i in range(n):
            op = make_op(i)
            msg = ge_ir_pb2.OpDef(name=op["name"], type=op["type"], id=op["id"], stream_id=op.get("stream_id", 0),
                                  input=op["input"], has_out_attr=True)
            for e in op["attr"]:
                _set_attr(msg.attr[e["key"]], e["value"])
            for d in op["input_desc"]:
                _set_desc(msg.input_desc.add(), d)
            for d in op["output_desc"]:
                _set_desc(msg.output_desc.add(), d)
            fh.write("  op {\n" + text_format.MessageToString(msg, indent=4) + "  }\n")
        fh.write("}\n")


def generate(n: int, path: Path) -> None:
    """Write an OM JSON of ``n`` ops, streamed op by op so the generator itself stays small."""
    head = {"name": "bench", "version": 2, "custom_version": "1.83.10.1.252",
            "attr": [_a("soc_version", {"s": "Ascend910B1"}), _a("stream_num", {"i": 3})]}
    with path.open("w") as fh:
        fh.write(json.dumps(head)[:-1] + ', "graph": [{"name": "bench_0", "op": [')
        for i in range(n):
            if i:
                fh.write(",")
            fh.write(json.dumps(make_op(i)))
        fh.write("]}]}")


CHILD = r"""
import json, resource, sys, time
from advisor.graph.load import load_graph
from advisor.graph.summary import summarize
def cpu():  # this process and its children (protoc parses big GE text dumps in a subprocess)
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + ch.ru_utime + ch.ru_stime
if sys.argv[2] == "load":
    t, c = time.perf_counter(), cpu()
    mg = load_graph(sys.argv[1])
    t_load, c_load = time.perf_counter() - t, cpu() - c
    t = time.perf_counter()
    s = summarize(mg)
    t_sum = time.perf_counter() - t
    out = {"nodes": s["nodes"], "edges": s["edges"], "load_s": t_load, "load_cpu_s": c_load, "summary_s": t_sum}
else:
    out = {}
out["peak_rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
out["child_peak_rss_mb"] = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
print(json.dumps(out))
"""


def measure(path: Path, mode: str) -> dict[str, Any]:
    res = subprocess.run([sys.executable, "-c", CHILD, str(path), mode], capture_output=True, text=True, check=True)
    return json.loads(res.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[25_000, 50_000, 100_000])
    ap.add_argument("--kind", choices=["om-json", "ge-proto"], default="om-json")
    ap.add_argument("--keep", type=Path, help="write the (last) generated graph here instead of a temp file")
    args = ap.parse_args()
    base = measure(Path("-"), "baseline")
    print(f"baseline (imports only): peak RSS {base['peak_rss_mb']:.0f} MB")
    print(f"{'nodes':>8} {'edges':>8} {'file MB':>8} {'gen s':>6} {'load s':>7} {'load CPU s':>10} {'summary s':>9} "
          f"{'peak RSS MB':>11} {'KB/node':>7} {'protoc RSS MB':>13}")
    with tempfile.TemporaryDirectory() as tmp:
        for n in args.nodes:
            name = f"graph_{n}.om.json" if args.kind == "om-json" else f"ge_proto_{n:08d}_Build.txt"
            path = args.keep if args.keep and n == args.nodes[-1] else Path(tmp) / name
            t = time.perf_counter()
            (generate if args.kind == "om-json" else generate_ge_text)(n, path)
            gen_s = time.perf_counter() - t
            size_mb = path.stat().st_size / 1e6
            r = measure(path, "load")
            per_node = (r["peak_rss_mb"] - base["peak_rss_mb"]) * 1024 / n
            print(f"{r['nodes']:>8} {r['edges']:>8} {size_mb:>8.1f} {gen_s:>6.1f} {r['load_s']:>7.2f} "
                  f"{r['load_cpu_s']:>10.2f} {r['summary_s']:>9.2f} {r['peak_rss_mb']:>11.0f} {per_node:>7.1f} "
                  f"{r['child_peak_rss_mb']:>13.0f}")


if __name__ == "__main__":
    main()
