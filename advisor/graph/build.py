"""Turn the ops every reader extracts into one ``ModelGraph``: node keys, contract attributes, edges, subgraphs.

Readers only decode their format into :class:`OpRecord` / :class:`GraphRecord`; everything the contract
promises about nodes and edges (engine, original_ops, fusion passes, data vs control edges, subgraph links)
is decided here once, so the four formats cannot drift apart.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from advisor.common.util import is_ascii_digits, lazy_module
from advisor.graph.engines import infer_engine
from advisor.graph.model_graph import ModelGraph

nx = lazy_module("networkx")  # imported when a graph is analyzed

EMPTY_DESC: dict[str, Any] = {"format": None, "origin_format": None, "dtype": None, "shape": None,
                              "origin_shape": None}


def empty_desc() -> dict[str, Any]:
    """A descriptor whose every field is unknown (e.g. a ``null`` entry in an OM JSON desc list)."""
    return dict(EMPTY_DESC)


@dataclass(slots=True)
class OpRecord:
    """One op as a reader decoded it; ``inputs`` are ``"src:idx"`` strings (``""`` = unconnected slot)."""

    name: str
    type: str
    inputs: list[str]
    attrs: dict[str, Any]
    in_descs: list[dict[str, Any]]
    out_descs: list[dict[str, Any]]
    id: int | None = None
    stream_id: int | None = None
    called: list[str] = field(default_factory=list)
    """Names of subgraphs this op runs (``subgraph_name``, control-flow branches)."""


@dataclass(slots=True)
class GraphRecord:
    name: str
    ops: list[OpRecord]
    attrs: dict[str, Any] = field(default_factory=dict)
    parent: str | None = None
    """Name of the op that runs this subgraph, when the format says so directly."""


def f32(x: float) -> float:
    """A proto ``float`` as the short decimal it was written as (0.1, not 0.10000000149011612)."""
    return float(str(np.float32(x)))


def split_input(ref: str) -> tuple[str, int]:
    """``"Conv_0:1"`` -> ``("Conv_0", 1)``; ``"x:-1"`` is a control input; a bare name is output 0."""
    src, sep, idx = ref.rpartition(":")
    if sep and is_ascii_digits(idx.removeprefix("-")):
        return src, int(idx)
    return ref, 0


def as_str_list(value: Any) -> list[str]:
    """An attribute that should be a list of names, whatever shape the dump gave it."""
    if value is None or value == "":
        return []
    if isinstance(value, str):
        return [value]
    if isinstance(value, list | tuple):
        return [str(v) for v in value if v not in (None, "")]
    return [str(value)]


def _node_attrs(op: OpRecord, graph_name: str) -> dict[str, Any]:
    attrs = op.attrs
    original = as_str_list(attrs.pop("_datadump_original_op_names", None))
    passes = as_str_list(attrs.pop("pass_name", None))
    ub = as_str_list(attrs.pop("pass_name_ub", None))
    node: dict[str, Any] = {
        "type": op.type,
        "engine": infer_engine(op.type, attrs),
        "inputs": op.in_descs,
        "outputs": op.out_descs,
        "original_ops": original,
        "fusion_passes": passes,
        "pass_name_ub": ub[0] if ub else None,
        "attrs": attrs,
        "stream_id": op.stream_id,
        "id": op.id,
        "subgraph": graph_name,
    }
    if op.called:
        node["called_subgraphs"] = list(op.called)
    return node


def _subgraph_refs(value: Any, names: set[str]) -> Iterable[str]:
    """Subgraph names an attribute value points at: a func (``{"name": ...}``, e.g. If ``then_branch``), a
    graph value (``{"graph": ...}``), or lists of those. Plain strings are not links: ``_graph_name`` names
    the partition an op sits in, not one it runs."""
    if isinstance(value, dict):
        for key in ("name", "graph"):
            v = value.get(key)
            if isinstance(v, str) and v in names:
                yield v
    elif isinstance(value, list):
        for v in value:
            if isinstance(v, dict):
                yield from _subgraph_refs(v, names)


def _unique_key(gr: GraphRecord, op_name: str, used: set[str], last: dict[str, int]) -> str:
    """The node key of an op: its name, qualified by its (sub)graph when an earlier graph already uses the name
    (``#n`` appended from the second repeat on). ``last`` remembers the highest ``n`` given per qualified name, so
    a name repeated a million times costs a million steps, not half a trillion."""
    key = op_name
    if key in used:
        base = f"{gr.name}/{op_name}"
        key, n = base, last.get(base, 1)
        while key in used:
            n += 1
            key = f"{base}#{n}"
        last[base] = n
    used.add(key)
    return key


def _called(op: Any, sub_names: set[str]) -> list[str]:
    """Subgraphs an op calls: its ``called`` list plus subgraph names referenced from its attributes."""
    called = list(op.called)
    for v in op.attrs.values():
        for s in _subgraph_refs(v, sub_names):
            if s not in called:
                called.append(s)
    return called


def _nodes(graphs: list[GraphRecord], parents: dict[str, str]
           ) -> tuple[list[tuple[str, dict[str, Any]]], dict[str, list[str]], list[dict[str, str]], list[list[str]],
                      dict[str, str]]:
    """Node keys and attributes of every (sub)graph, each graph's node keys (by name, and in op order), every
    name's first key; fills ``parents`` (subgraph -> the node that calls it)."""
    sub_names = {gr.name for gr in graphs[1:]}
    nodes: list[tuple[str, dict[str, Any]]] = []
    subgraphs: dict[str, list[str]] = {}
    local_keys: list[dict[str, str]] = []
    op_keys: list[list[str]] = []
    global_keys: dict[str, str] = {}
    used: set[str] = set()
    last: dict[str, int] = {}
    for gr in graphs:
        keys: dict[str, str] = {}
        members: list[str] = []
        for op in gr.ops:
            key = _unique_key(gr, op.name, used, last)
            keys.setdefault(op.name, key)
            global_keys.setdefault(op.name, key)
            members.append(key)
            nodes.append((key, _node_attrs(op, gr.name)))
            called = _called(op, sub_names) if sub_names else []
            if called:
                nodes[-1][1]["called_subgraphs"] = called
                for s in called:
                    parents.setdefault(s, key)
        local_keys.append(keys)
        op_keys.append(members)
        subgraphs[gr.name] = members
    return nodes, subgraphs, local_keys, op_keys, global_keys


def _edges(graphs: list[GraphRecord], local_keys: list[dict[str, str]], op_keys: list[list[str]],
           global_keys: dict[str, str]) -> tuple[list[tuple[str, str, dict[str, Any]]], int]:
    """Data and control edges from each op's inputs (names resolved in its own graph first), and how many input
    references named no known op."""
    edges: list[tuple[str, str, dict[str, Any]]] = []
    unresolved = 0
    for gr, keys, members in zip(graphs, local_keys, op_keys, strict=True):
        for op, dst in zip(gr.ops, members, strict=True):
            slot = 0
            for ref in op.inputs:
                if not ref:
                    slot += 1
                    continue
                src_name, idx = split_input(ref)
                src = keys.get(src_name) or global_keys.get(src_name)
                if src is None:
                    unresolved += 1
                elif idx < 0:
                    edges.append((src, dst, {"src_index": -1, "dst_index": -1, "kind": "control"}))
                else:
                    edges.append((src, dst, {"src_index": idx, "dst_index": slot, "kind": "data"}))
                if idx >= 0:
                    slot += 1
    return edges, unresolved


def build_model_graph(graphs: list[GraphRecord], *, source: str, fmt: str, name: str = "",
                      attrs: dict[str, Any] | None = None) -> ModelGraph:
    """Assemble the networkx graph: ``graphs[0]`` is the root, the others are its subgraphs."""
    g = nx.MultiDiGraph()
    parents: dict[str, str] = {}
    nodes, subgraphs, local_keys, op_keys, global_keys = _nodes(graphs, parents)
    g.add_nodes_from(nodes)
    del nodes
    edges, unresolved = _edges(graphs, local_keys, op_keys, global_keys)
    for gr in graphs:
        if gr.parent is not None and gr.name not in parents:
            parents[gr.name] = global_keys.get(gr.parent, gr.parent)
    g.add_edges_from(edges)
    g.graph["unresolved_inputs"] = unresolved

    return ModelGraph(g=g, source=source, format=fmt, name=name or (graphs[0].name if graphs else ""),
                      attrs=dict(attrs or {}), subgraphs=subgraphs, root_graph=graphs[0].name if graphs else "",
                      subgraph_parents=parents, graph_attrs={gr.name: gr.attrs for gr in graphs if gr.attrs})
