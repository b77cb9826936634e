"""Read the JSON that ``atc --mode=1`` writes for an OM model (a GE ModelDef rendered by GE's pb2json).

Its quirks (DOMAIN.md 1.2): proto maps are lists of ``{"key", "value"}``; enums are names; a singular float
is a ``"%g"`` string; fields at their default are omitted; empty sub-messages are ``null``. Tools that use
protobuf's own MessageToJson write maps as objects, int64 as strings and camelCase keys -- accepted too.
Each op dict is released as soon as it is converted, so the peak is the parsed JSON plus the graph built so
far, not two full copies (benchmarks/graph_scale.py measures it).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import Any

from advisor.graph.build import GraphRecord, OpRecord, build_model_graph, empty_desc
from advisor.graph.dtypes import CPP_DTYPE_ATTRS, cpp_dtype_name, proto_dtype_name
from advisor.graph.model_graph import ModelGraph
from advisor.model import canonical_format

_CAMEL = {
    "input_desc": "inputDesc", "output_desc": "outputDesc", "stream_id": "streamId",
    "subgraph_name": "subgraphName", "val_type": "valType", "list_list_int": "listListInt",
    "list_list_float": "listListFloat", "list_list_i": "listListI", "list_i": "listI",
    "list_list_f": "listListF", "list_f": "listF", "custom_version": "customVersion",
}


def _get(d: dict[str, Any], key: str) -> Any:
    v = d.get(key)
    if v is None and key in _CAMEL:
        v = d.get(_CAMEL[key])
    return v


def _int(v: Any) -> int:
    return v if type(v) is int else int(v)


def _bool(v: Any) -> bool:
    return v if type(v) is bool else str(v).lower() in ("true", "1")


def attr_items(entries: Any) -> Iterator[tuple[str, Any]]:
    """(key, raw value) pairs of a proto map written as a list of {key, value} or as an object."""
    if not entries:
        return
    if isinstance(entries, dict):
        yield from entries.items()
        return
    for e in entries:
        if e:
            key = e.get("key")
            if key is not None:
                yield key, e.get("value")


def decode_attrs(entries: Any) -> dict[str, Any]:
    """A map<string, AttrDef> -> {name: plain value}; integer dtype attrs use the C++ numbering."""
    out: dict[str, Any] = {}
    if not entries:
        return out
    if type(entries) is list:  # the atc form; scalar values take the fast path (this loop runs per attribute)
        for e in entries:
            if not e:
                continue
            key = e.get("key")
            v = e.get("value")
            if v and len(v) == 1:
                ((k, x),) = v.items()
                tx = type(x)
                if (k == "s" and tx is str) or (k == "b" and tx is bool) or (k == "i" and tx is int
                                                                            and key not in CPP_DTYPE_ATTRS):
                    out[key] = x
                    continue
            value = decode_value(v)
            if key in CPP_DTYPE_ATTRS and type(value) is int:
                value = cpp_dtype_name(value)
            out[key] = value
        return out
    for key, raw in attr_items(entries):
        value = decode_value(raw)
        if key in CPP_DTYPE_ATTRS and type(value) is int:
            value = cpp_dtype_name(value)
        out[key] = value
    return out


def decode_value(v: Any) -> Any:
    """One AttrDef (its oneof written as a single key) -> a plain Python value."""
    if not v:
        return None
    for k, x in v.items():
        decode = _VALUE_DECODERS.get(k)
        if decode is not None:
            return decode(x)
    return None


def _list_list(x: Any, outer: str, inner: str, cast: Callable[[Any], Any]) -> list[list[Any]]:
    return [[cast(i) for i in (_get(r or {}, inner) or [])] for r in (_get(x or {}, outer) or [])]


_VALUE_DECODERS: dict[str, Callable[[Any], Any]] = {
    "s": lambda x: x,
    "i": lambda x: _int(x),
    "b": lambda x: _bool(x),
    "list": lambda x: _decode_list(x),
    "f": float,
    "dt": lambda x: cpp_dtype_name(x),
    "t": lambda x: {"desc": decode_desc((x or {}).get("desc"))},
    "td": lambda x: decode_desc(x),
    "func": lambda x: {"name": (x or {}).get("name", ""), "attr": decode_attrs((x or {}).get("attr"))},
    "g": lambda x: {"graph": (x or {}).get("name", "")},
    "list_list_int": lambda x: _list_list(x, "list_list_i", "list_i", _int),
    "listListInt": lambda x: _list_list(x, "list_list_i", "list_i", _int),
    "list_list_float": lambda x: _list_list(x, "list_list_f", "list_f", float),
    "listListFloat": lambda x: _list_list(x, "list_list_f", "list_f", float),
    "expression": lambda x: x,
    "bt": lambda x: None,  # bytes: dropped by atc, meaningless here
}
"""AttrDef oneof key -> its decoder (keys as atc --mode=1 writes them, camelCase variants of newer dumps too)."""


_INT_TEXT = re.compile(r"-?[0-9]+", re.ASCII)


def _ints(items: list[Any]) -> list[int]:
    """A JSON int list, reused as is when its items are already ints (pb2json), else converted (int64 written as
    strings). Anything else (text, fractions, lists) is a ValueError: a shape of garbage is a malformed file, never
    an error deep in the cost model."""
    if not isinstance(items, list):
        raise ValueError(f"a shape is a {type(items).__name__}, not a list of integers")
    if all(type(i) is int for i in items):
        return items
    out = []
    for i in items:
        if type(i) is int:
            out.append(i)
        elif isinstance(i, str) and _INT_TEXT.fullmatch(i.strip()):
            out.append(int(i))
        else:
            raise ValueError(f"shape dim {str(i)[:40]!r} is not an integer")
    return out


def _decode_list(x: Any) -> list[Any]:
    if not x:
        return []
    for k, items in x.items():
        if k == "s":
            return items
        if k == "i":
            return _ints(items)
        if k == "f":
            return [float(f) for f in items]
        if k == "b":
            return items if not items or type(items[0]) is bool else [_bool(b) for b in items]
        if k == "dt":
            return [cpp_dtype_name(d) for d in items]
        if k == "td":
            return [decode_desc(d) for d in items]
        if k == "t":
            return [{"desc": decode_desc((t or {}).get("desc"))} for t in items]
        if k == "na":
            return [{"name": (n or {}).get("name", ""), "attr": decode_attrs((n or {}).get("attr"))} for n in items]
        if k == "g":
            return [{"graph": (gr or {}).get("name", "")} for gr in items]
    return []


def decode_desc(d: Any) -> dict[str, Any]:
    """A TensorDescriptor -> {format, origin_format, dtype, shape, origin_shape}."""
    if not d:
        return empty_desc()
    shape = d.get("shape")
    dims = shape.get("dim") if shape else None
    origin_format = origin_shape = None
    attrs = d.get("attr")
    if type(attrs) is list:
        for e in attrs:
            if e:
                key = e.get("key")
                if key == "origin_format":
                    origin_format = decode_value(e.get("value"))
                elif key == "origin_shape":
                    origin_shape = decode_value(e.get("value"))
    elif attrs:
        for key, raw in attr_items(attrs):
            if key == "origin_format":
                origin_format = decode_value(raw)
            elif key == "origin_shape":
                origin_shape = decode_value(raw)
    layout = d.get("layout")
    return {
        "format": _format(layout),
        "origin_format": _format(origin_format) if type(origin_format) is str else None,
        "dtype": proto_dtype_name(d.get("dtype")),
        "shape": _ints(dims) if dims else [],
        "origin_shape": origin_shape if type(origin_shape) is list else None,
    }


def _format(layout: Any) -> str | None:
    if not layout:
        return None
    return canonical_format(layout) if layout.startswith("FORMAT_") or not layout.isupper() else layout


def _op(op: dict[str, Any]) -> OpRecord:
    ident = op.get("id")
    stream = _get(op, "stream_id")
    return OpRecord(
        name=str(op.get("name", "")),
        type=str(op.get("type", "")),
        inputs=[str(i) if i is not None else "" for i in (op.get("input") or [])],
        attrs=decode_attrs(op.get("attr")),
        in_descs=[decode_desc(d) for d in (_get(op, "input_desc") or [])],
        out_descs=[decode_desc(d) for d in (_get(op, "output_desc") or [])],
        id=_int(ident) if ident is not None else 0,
        stream_id=_int(stream) if stream is not None else 0,
        called=[str(s) for s in (_get(op, "subgraph_name") or []) if s],
    )


def is_om_json(data: Any) -> bool:
    """Whether a parsed JSON document is a GE ModelDef (a ``graph`` list of GraphDefs holding ``op`` lists)."""
    if not isinstance(data, dict):
        return False
    graphs = data.get("graph")
    if isinstance(graphs, list):
        return all(isinstance(g, dict) for g in graphs) and (
            not graphs or any(k in graphs[0] for k in ("op", "name", "attr", "input"))
        )
    return isinstance(data.get("op"), list)  # a bare GraphDef


def read_om_json(data: dict[str, Any], source: str) -> ModelGraph:
    """Convert a parsed OM JSON (ModelDef, or a bare GraphDef) into a ModelGraph; ``data`` is consumed."""
    graph_dicts = data.get("graph") if isinstance(data.get("graph"), list) else [data]
    records: list[GraphRecord] = []
    for i, gd in enumerate(graph_dicts):
        ops = gd.get("op") or []
        recs = []
        for j, op in enumerate(ops):
            if op:
                recs.append(_op(op))
            ops[j] = None  # free the raw dict now; the record keeps the strings it needs
        records.append(GraphRecord(name=str(gd.get("name") or f"graph_{i}"), ops=recs,
                                   attrs=decode_attrs(gd.get("attr"))))
    model_attrs = decode_attrs(data.get("attr")) if "graph" in data else {}
    name = str(data.get("name") or (records[0].name if records else ""))
    if not records:
        records = [GraphRecord(name=name or "graph", ops=[])]
    return build_model_graph(records, source=source, fmt="om-json", name=name, attrs=model_attrs)
