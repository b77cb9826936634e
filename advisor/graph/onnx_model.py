"""Read a standard ONNX model (``.onnx``, or an ONNX graph/model written as JSON) with the onnx library.

ONNX edges are tensor names; they are turned into ``"producer:output_index"`` references so the shared
builder handles them like GE inputs. The main graph's inputs become ``Data`` nodes and the initializers its
nodes read become ``Const`` nodes (small ones with their values), as in an OM or GE graph; inside control-flow
bodies, outer-scope tensors stay unconnected. Engines are unknown before ATC compiles the model, except for types that fix them (Constant).
Control-flow bodies (If/Loop/Scan GRAPH attributes) become subgraphs ``<node>/<attr>`` linked to their node.
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import onnx
from google.protobuf import json_format
from onnx import AttributeProto, GraphProto, ModelProto

from advisor.common.errors import InputError
from advisor.graph.build import GraphRecord, OpRecord, build_model_graph, empty_desc, f32
from advisor.graph.dtypes import ONNX_DTYPE_ATTRS, onnx_dtype_name
from advisor.graph.model_graph import ModelGraph


def _value(a: AttributeProto, subgraphs: list[tuple[str, GraphProto]], owner: str) -> Any:
    t = a.type
    if t == AttributeProto.INT:
        return onnx_dtype_name(a.i) if a.name in ONNX_DTYPE_ATTRS else a.i
    if t == AttributeProto.FLOAT:
        return f32(a.f)
    if t == AttributeProto.STRING:
        return a.s.decode("utf-8", "replace")
    if t == AttributeProto.INTS:
        return list(a.ints)
    if t == AttributeProto.FLOATS:
        return [f32(f) for f in a.floats]
    if t == AttributeProto.STRINGS:
        return [s.decode("utf-8", "replace") for s in a.strings]
    if t == AttributeProto.TENSOR:
        return {"dims": list(a.t.dims), "dtype": onnx_dtype_name(a.t.data_type)}
    if t == AttributeProto.GRAPH:
        name = f"{owner}/{a.name}"
        subgraphs.append((name, a.g))
        return {"graph": name}
    if t == AttributeProto.GRAPHS:
        names = []
        for i, g in enumerate(a.graphs):
            names.append(f"{owner}/{a.name}[{i}]")
            subgraphs.append((names[-1], g))
        return [{"graph": n} for n in names]
    return None


def _value_infos(graph: GraphProto) -> dict[str, dict[str, Any]]:
    """Tensor name -> descriptor, from whatever type information the model carries."""
    out: dict[str, dict[str, Any]] = {}
    for vi in list(graph.input) + list(graph.output) + list(graph.value_info):
        tt = vi.type.tensor_type
        d = empty_desc()
        d["dtype"] = onnx_dtype_name(tt.elem_type)
        if tt.HasField("shape"):
            d["shape"] = [dim.dim_value if dim.HasField("dim_value") else -1 for dim in tt.shape.dim]
        out[vi.name] = d
    for init in graph.initializer:
        d = empty_desc()
        d["dtype"] = onnx_dtype_name(init.data_type)
        d["shape"] = list(init.dims)
        out.setdefault(init.name, d)
    return out


SMALL_CONST = 64
"""Initializers up to this many elements keep their values on their ``Const`` node (``attrs["value"]``): the
normalization constants AIPP takes over, scalars of activation patterns. Weights keep only dtype and shape."""


def _sources(graph: GraphProto, infos: dict[str, dict[str, Any]], used: set[str], first_id: int) -> list[OpRecord]:
    """``Data`` nodes for the model inputs and ``Const`` nodes for the initializers the nodes read, as an OM or GE
    graph has them (the main graph only)."""
    inits = {t.name: t for t in graph.initializer}
    read = {t for node in graph.node for t in node.input if t}
    records: list[OpRecord] = []

    def unique(base: str, suffix: str) -> str:
        name = base if base not in used else f"{base}/{suffix}"
        used.add(name)
        return name

    for k, vi in enumerate(v for v in graph.input if v.name not in inits):
        records.append(OpRecord(name=unique(vi.name, "input"), type="Data", inputs=[], attrs={"index": k},
                                in_descs=[], out_descs=[dict(infos.get(vi.name) or empty_desc())],
                                id=first_id + len(records), stream_id=None))
        records[-1].attrs["_onnx_tensor"] = vi.name
    for t in graph.initializer:
        if t.name not in read:
            continue
        attrs: dict[str, Any] = {"_onnx_tensor": t.name}
        n = 1
        for d in t.dims:
            n *= int(d)
        if n <= SMALL_CONST:
            with contextlib.suppress(Exception):  # external or malformed data: keep the descriptor only
                attrs["value"] = [f32(x) if isinstance(x, float) else x
                                  for x in onnx.numpy_helper.to_array(t).ravel().tolist()]
        records.append(OpRecord(name=unique(t.name, "const"), type="Const", inputs=[], attrs=attrs, in_descs=[],
                                out_descs=[dict(infos.get(t.name) or empty_desc())], id=first_id + len(records),
                                stream_id=None))
    return records


def _walk(graph: GraphProto, name: str, out: list[GraphRecord], parent: str | None) -> None:
    infos = _value_infos(graph)
    producers: dict[str, str] = {}
    names: list[str] = []
    used: set[str] = set()
    for i, node in enumerate(graph.node):
        node_name = node.name or f"{node.op_type}_{i}"
        if node_name in used:
            node_name = f"{node_name}_{i}"
        used.add(node_name)
        names.append(node_name)
        for k, tensor in enumerate(node.output):
            if tensor:
                producers[tensor] = f"{node_name}:{k}"
    record = GraphRecord(name=name, ops=[], parent=parent)
    out.append(record)
    if parent is None:
        for src in _sources(graph, infos, used, len(graph.node)):
            record.ops.append(src)
            producers.setdefault(src.attrs["_onnx_tensor"], f"{src.name}:0")
    pending: list[tuple[str, GraphProto, str]] = []
    for i, (node, node_name) in enumerate(zip(graph.node, names, strict=True)):
        subs: list[tuple[str, GraphProto]] = []
        attrs = {a.name: _value(a, subs, node_name) for a in node.attribute}
        op_type = node.op_type if node.domain in ("", "ai.onnx") else f"{node.domain}:{node.op_type}"
        record.ops.append(OpRecord(
            name=node_name,
            type=op_type,
            inputs=[producers.get(t, "") for t in node.input],
            attrs=attrs,
            in_descs=[dict(infos[t]) if t in infos else empty_desc() for t in node.input],
            out_descs=[dict(infos[t]) if t in infos else empty_desc() for t in node.output],
            id=i,
            stream_id=None,
            called=[s for s, _ in subs],
        ))
        pending.extend((s, g, node_name) for s, g in subs)
    for sub_name, sub, owner in pending:
        _walk(sub, sub_name, out, owner)


def _model_attrs(model: ModelProto) -> dict[str, Any]:
    attrs: dict[str, Any] = {"producer_name": model.producer_name, "ir_version": model.ir_version,
                             "opset": {o.domain or "ai.onnx": o.version for o in model.opset_import}}
    attrs.update({p.key: p.value for p in model.metadata_props})
    return attrs


def _with_shapes(model: ModelProto) -> ModelProto:
    """The model with ONNX shape inference applied, so intermediate tensors carry dtypes and shapes (the cost
    model of a static audit needs them); the model as it is when inference fails (custom ops, broken models)."""
    if len(model.graph.value_info) >= len(model.graph.node):
        return model
    try:
        return onnx.shape_inference.infer_shapes(model, strict_mode=False)
    except Exception:  # noqa: BLE001 - onnx raises several types for models it cannot infer
        return model


def graph_from_onnx(model: ModelProto | GraphProto, source: str) -> ModelGraph:
    """A ModelGraph from an in-memory ONNX ModelProto or GraphProto."""
    if isinstance(model, ModelProto):
        model = _with_shapes(model)
    graph = model.graph if isinstance(model, ModelProto) else model
    records: list[GraphRecord] = []
    _walk(graph, graph.name or "main_graph", records, None)
    attrs = _model_attrs(model) if isinstance(model, ModelProto) else {}
    return build_model_graph(records, source=source, fmt="onnx", name=graph.name or Path(source).stem, attrs=attrs)


def read_onnx_file(path: Path) -> ModelGraph:
    """Load an ``.onnx`` file (external weight data is not needed and not loaded)."""
    try:
        model = onnx.load(str(path), load_external_data=False)
    except Exception as e:  # protobuf DecodeError and friends: the file is not an ONNX model
        raise InputError(path, f"not a valid ONNX model: {type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}") from None
    return graph_from_onnx(model, str(path))


def is_onnx_json(data: Any) -> bool:
    """An ONNX ModelProto (``{"graph": {"node": [...]}}``) or GraphProto (``{"node": [...]}``) as JSON."""
    if not isinstance(data, dict):
        return False
    if isinstance(data.get("node"), list):
        return True
    g = data.get("graph")
    return isinstance(g, dict) and isinstance(g.get("node"), list)


def read_onnx_json(data: dict[str, Any], source: str) -> ModelGraph:
    """Convert ONNX written as JSON (protobuf's JSON mapping) into a ModelGraph."""
    message: ModelProto | GraphProto = GraphProto() if "node" in data else ModelProto()
    try:
        json_format.ParseDict(data, message, ignore_unknown_fields=True)
    except json_format.ParseError as e:
        raise InputError(source, f"not a valid ONNX JSON: {str(e).splitlines()[0]}") from None
    return graph_from_onnx(message, source)
