"""Read a GE dump ``ge_onnx_<seq>_graph_<id>_<stage>.pbtxt``: protobuf text of ``ge.onnx.ModelProto``.

GE writes each op as an ONNX NodeProto with ``op_type: "ge:<Type>"``; OpDef fields and tensor descriptors are
flattened into attributes (``id``, ``stream_id``, ``input_desc_dtype:<k>``, ``output_desc_layout:<k>``...).
Subgraphs are pseudo-nodes ``op_type: "subgraph"`` holding a GRAPH attribute; the op that runs one is named
``<subgraph>_<Type>_<n>`` (the dump carries no other link). This format drops string attributes such as
``_ge_attr_op_kernel_lib_name``, so engines here come from the op type (see ``engines``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from advisor.common.errors import InputError
from advisor.common.util import is_ascii_digits
from advisor.graph.build import GraphRecord, OpRecord, build_model_graph, empty_desc, f32
from advisor.graph.dtypes import CPP_DTYPE_ATTRS, cpp_dtype_name, proto_dtype_name
from advisor.graph.model_graph import ModelGraph
from advisor.graph.proto import ge_onnx_pb2
from advisor.graph.prototext import parse_text_file
from advisor.model import canonical_format

_A = ge_onnx_pb2.AttributeProto

OPDEF_FIELDS = frozenset({
    "id", "stream_id", "input_name", "src_name", "src_index", "dst_name", "dst_index", "input_i", "output_i",
    "workspace", "workspace_bytes", "is_input_const", "has_out_attr", "input_desc_nums", "output_desc_nums",
})
"""OpDef fields GE flattens into attributes; they are not op attributes in the other formats."""

_DESC_FIELDS = {"dtype": "dtype", "layout": "format", "shape": "shape", "origin_layout": "origin_format",
                "origin_shape": "origin_shape"}


def attr_value(a: ge_onnx_pb2.AttributeProto) -> Any:
    """One AttributeProto -> a plain value, chosen by its declared type (a default 0 has no ``i:`` line)."""
    t = a.type
    if t == _A.INT:
        return a.i
    if t == _A.STRING:
        return a.s.decode("utf-8", "replace")
    if t == _A.INTS:
        return list(a.ints)
    if t == _A.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if t == _A.FLOAT:
        return f32(a.f)
    if t == _A.FLOATS:
        return [f32(f) for f in a.floats]
    if t == _A.GRAPH:
        return {"graph": a.g.name}
    if t == _A.GRAPHS:
        return [{"graph": g.name} for g in a.graphs]
    if t == _A.TENSOR:
        return {"dims": list(a.t.dims), "data_type": a.t.data_type}
    if t == _A.TENSORS:
        return [{"dims": list(x.dims), "data_type": x.data_type} for x in a.tensors]
    # UNDEFINED: take whichever field is set
    if a.ints:
        return list(a.ints)
    if a.strings:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if a.floats:
        return [f32(f) for f in a.floats]
    if a.s:
        return a.s.decode("utf-8", "replace")
    return a.i


def _desc_slot(descs: dict[int, dict[str, Any]], k: int) -> dict[str, Any]:
    d = descs.get(k)
    if d is None:
        d = descs[k] = empty_desc()
    return d


def _op(node: ge_onnx_pb2.NodeProto) -> OpRecord:
    op_type = node.op_type[3:] if node.op_type.startswith("ge:") else node.op_type
    attrs: dict[str, Any] = {}
    ins: dict[int, dict[str, Any]] = {}
    outs: dict[int, dict[str, Any]] = {}
    n_in = n_out = 0
    ident = stream = None
    for a in node.attribute:
        name = a.name
        if name.startswith(("input_desc_", "output_desc_")):
            side, _, rest = name.partition("_desc_")
            field, sep, k = rest.rpartition(":")
            if rest == "nums":
                if side == "input":
                    n_in = a.i
                else:
                    n_out = a.i
                continue
            key = _DESC_FIELDS.get(field)
            if not sep or key is None or not is_ascii_digits(k):
                continue
            desc = _desc_slot(ins if side == "input" else outs, int(k))
            value = attr_value(a)
            if key == "dtype":
                desc[key] = proto_dtype_name(value)
            elif key in ("format", "origin_format"):
                desc[key] = canonical_format(value) if value else None
            else:
                desc[key] = list(value) if isinstance(value, list) else []
            continue
        if name == "id":
            ident = a.i
        elif name == "stream_id":
            stream = a.i
        if name in OPDEF_FIELDS:
            continue
        value = attr_value(a)
        if name in CPP_DTYPE_ATTRS and type(value) is int:
            value = cpp_dtype_name(value)
        attrs[name] = value
    n_in = max(n_in, max(ins, default=-1) + 1)
    n_out = max(n_out, max(outs, default=-1) + 1)
    return OpRecord(
        name=node.name,
        type=op_type,
        inputs=list(node.input),
        attrs=attrs,
        in_descs=[ins.get(k) or empty_desc() for k in range(n_in)],
        out_descs=[outs.get(k) or empty_desc() for k in range(n_out)],
        id=ident,
        stream_id=stream,
    )


def _walk(graph: ge_onnx_pb2.GraphProto, name: str, out: list[GraphRecord]) -> None:
    """Append this graph and (depth first) its subgraphs to ``out``."""
    record = GraphRecord(name=name, ops=[])
    out.append(record)
    subs: list[tuple[str, ge_onnx_pb2.GraphProto]] = []
    for node in graph.node:
        if node.op_type == "subgraph":
            for a in node.attribute:
                if a.type == _A.GRAPH or a.HasField("g"):
                    subs.append((node.name or a.g.name, a.g))
            continue
        record.ops.append(_op(node))
    for sub_name, _ in subs:
        prefix = sub_name + "_"
        for op in record.ops:
            if op.name.startswith(prefix) and sub_name not in op.called:
                op.called.append(sub_name)
                break
    for sub_name, sub in subs:
        _walk(sub, sub_name, out)


def read_ge_onnx(path: Path, fast: bool | None = None) -> ModelGraph:
    """Convert a ``ge_onnx_*.pbtxt`` dump into a ModelGraph."""
    model = ge_onnx_pb2.ModelProto()
    parse_text_file(path, model, "GE onnx text dump", fast)
    if not model.HasField("graph"):
        raise InputError(path, "GE onnx text dump holds no graph")
    records: list[GraphRecord] = []
    _walk(model.graph, model.graph.name or "graph", records)
    attrs = {"producer_name": model.producer_name, "ir_version": model.ir_version}
    return build_model_graph(records, source=str(path), fmt="ge-onnx-pbtxt", name=model.graph.name, attrs=attrs)
