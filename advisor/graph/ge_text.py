"""Read a GE dump ``ge_proto_<seq>_<stage>.txt``: protobuf text format of ``ge.proto.ModelDef``.

Parsed with a real protobuf text parser (``prototext``) against classes generated from the newest ge_ir.proto
(a superset of the 2020-2023 dumps; see ``proto/README.md``), then converted message by message.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from advisor.common.errors import InputError
from advisor.graph.build import GraphRecord, OpRecord, build_model_graph, f32
from advisor.graph.dtypes import CPP_DTYPE_ATTRS, cpp_dtype_name, proto_dtype_name
from advisor.graph.model_graph import ModelGraph
from advisor.graph.proto import ge_ir_pb2
from advisor.graph.prototext import parse_text_file
from advisor.model import canonical_format


def _s(b: bytes) -> str:
    return b.decode("utf-8", "replace")


def decode_attrs(attr_map: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, v in attr_map.items():
        value = decode_value(v)
        if key in CPP_DTYPE_ATTRS and type(value) is int:
            value = cpp_dtype_name(value)
        out[key] = value
    return out


def decode_value(v: ge_ir_pb2.AttrDef) -> Any:
    """One AttrDef message -> a plain Python value (dtype numbers use the C++ table)."""
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "s":
        return _s(v.s)
    if kind == "i":
        return v.i
    if kind == "b":
        return v.b
    if kind == "f":
        return f32(v.f)
    if kind == "list":
        return _decode_list(v.list)
    if kind == "dt":
        return cpp_dtype_name(v.dt)
    if kind == "t":
        return {"desc": decode_desc(v.t.desc)}
    if kind == "td":
        return decode_desc(v.td)
    if kind == "func":
        return {"name": v.func.name, "attr": decode_attrs(v.func.attr)}
    if kind == "g":
        return {"graph": v.g.name}
    if kind == "list_list_int":
        return [list(r.list_i) for r in v.list_list_int.list_list_i]
    if kind == "list_list_float":
        return [[f32(f) for f in r.list_f] for r in v.list_list_float.list_list_f]
    if kind == "expression":
        return _s(v.expression)
    return None  # bt: raw bytes


def _decode_list(lv: ge_ir_pb2.AttrDef.ListValue) -> list[Any]:
    if lv.s:
        return [_s(b) for b in lv.s]
    if lv.i:
        return list(lv.i)
    if lv.f:
        return [f32(f) for f in lv.f]
    if lv.b:
        return list(lv.b)
    if lv.dt:
        return [cpp_dtype_name(d) for d in lv.dt]
    if lv.td:
        return [decode_desc(d) for d in lv.td]
    if lv.t:
        return [{"desc": decode_desc(t.desc)} for t in lv.t]
    if lv.na:
        return [{"name": n.name, "attr": decode_attrs(n.attr)} for n in lv.na]
    if lv.g:
        return [{"graph": gr.name} for gr in lv.g]
    return []


def decode_desc(d: ge_ir_pb2.TensorDescriptor) -> dict[str, Any]:
    """A TensorDescriptor message -> {format, origin_format, dtype, shape, origin_shape}."""
    origin_format = d.attr["origin_format"].s if "origin_format" in d.attr else b""
    origin_shape = list(d.attr["origin_shape"].list.i) if "origin_shape" in d.attr else None
    return {
        "format": canonical_format(d.layout) if d.layout else None,
        "origin_format": canonical_format(_s(origin_format)) if origin_format else None,
        "dtype": proto_dtype_name(d.dtype),
        "shape": list(d.shape.dim),
        "origin_shape": origin_shape,
    }


def _op(op: ge_ir_pb2.OpDef) -> OpRecord:
    return OpRecord(
        name=op.name,
        type=op.type,
        inputs=list(op.input),
        attrs=decode_attrs(op.attr),
        in_descs=[decode_desc(d) for d in op.input_desc],
        out_descs=[decode_desc(d) for d in op.output_desc],
        id=op.id,
        stream_id=op.stream_id,
        called=[s for s in op.subgraph_name if s],
    )


def read_ge_text(path: Path, fast: bool | None = None) -> ModelGraph:
    """Convert a ``ge_proto_*.txt`` dump into a ModelGraph (``graph[0]`` root, others subgraphs)."""
    model = ge_ir_pb2.ModelDef()
    parse_text_file(path, model, "GE ModelDef text dump", fast)
    if not model.graph:
        raise InputError(path, "GE text dump holds no graph")
    records: list[GraphRecord] = []
    for i, gd in enumerate(model.graph):
        records.append(GraphRecord(name=gd.name or f"graph_{i}", ops=[_op(op) for op in gd.op],
                                   attrs=decode_attrs(gd.attr)))
    name = model.name or records[0].name
    attrs = decode_attrs(model.attr)
    del model
    return build_model_graph(records, source=str(path), fmt="ge-proto-txt", name=name, attrs=attrs)
