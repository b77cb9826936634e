"""What a graph holds, as plain data: the ``advisor graph`` command renders it, the JSON output is it."""

from __future__ import annotations

from collections import Counter
from typing import Any

from advisor.graph.model_graph import ModelGraph
from advisor.model import HEAVY_FORMATS

UNKNOWN_FORMATS = frozenset({"RESERVED", "UNDEFINED", "MAX"})
"""Layouts that mean "no tensor here" (an unconnected optional input), not a real format."""


def _fmt(desc: Any) -> str | None:
    if not isinstance(desc, dict):
        return None
    f = desc.get("format")
    return None if not f or f in UNKNOWN_FORMATS else f


def _counts(counter: Counter[str]) -> dict[str, int]:
    return dict(sorted(counter.items(), key=lambda kv: (-kv[1], kv[0])))


def format_changes(graph: ModelGraph) -> list[dict[str, Any]]:
    """Data edges whose producer output format differs from the consumer's input format, counted by pair.

    ``heavy`` marks pairs involving a private AI Core format (NC1HWC0, FRACTAL_Z/NZ...): real conversions,
    unlike NCHW vs ND which differ in name only."""
    g = graph.g
    pairs: Counter[tuple[str, str]] = Counter()
    for u, v, d in g.edges(data=True):
        if d.get("kind") != "data":
            continue
        outs = g.nodes[u].get("outputs") or []
        ins = g.nodes[v].get("inputs") or []
        si, di = d.get("src_index", 0), d.get("dst_index", 0)
        if 0 <= si < len(outs) and 0 <= di < len(ins):
            a, b = _fmt(outs[si]), _fmt(ins[di])
            if a and b and a != b:
                pairs[(a, b)] += 1
    return [{"from": a, "to": b, "count": n, "heavy": a in HEAVY_FORMATS or b in HEAVY_FORMATS} for (a, b), n in sorted(pairs.items(), key=lambda kv: (-kv[1], kv[0]))]


def summarize(graph: ModelGraph) -> dict[str, Any]:
    """Counts a user checks first: size, op types, engines, formats, fusion passes, TransData/Cast, subgraphs."""
    g = graph.g
    by_type: Counter[str] = Counter()
    by_engine: Counter[str] = Counter()
    formats: Counter[str] = Counter()
    passes: Counter[str] = Counter()
    ub_passes: Counter[str] = Counter()
    fused_nodes = 0
    for _, data in g.nodes(data=True):
        by_type[data.get("type") or "?"] += 1
        by_engine[data.get("engine") or "UNKNOWN"] += 1
        for desc in data.get("outputs") or ():
            f = _fmt(desc)
            if f:
                formats[f] += 1
        for p in data.get("fusion_passes") or ():
            passes[p] += 1
        if data.get("pass_name_ub"):
            ub_passes[data["pass_name_ub"]] += 1
        if len(data.get("original_ops") or ()) > 1:
            fused_nodes += 1
    edge_kinds: Counter[str] = Counter(d.get("kind", "data") for _, _, d in g.edges(data=True))
    changes = format_changes(graph)
    subgraphs = [
        {"name": name, "nodes": len(members), "parent": graph.subgraph_parents.get(name)}
        for name, members in graph.subgraphs.items() if name != graph.root_graph
    ]
    return {
        "source": graph.source,
        "format": graph.format,
        "name": graph.name,
        "soc_version": graph.soc_version,
        "nodes": g.number_of_nodes(),
        "edges": g.number_of_edges(),
        "data_edges": edge_kinds.get("data", 0),
        "control_edges": edge_kinds.get("control", 0),
        "unresolved_inputs": int(g.graph.get("unresolved_inputs", 0)),
        "by_type": _counts(by_type),
        "by_engine": _counts(by_engine),
        "formats": _counts(formats),  # layouts of the tensors ops produce
        "format_changes": {"total": sum(c["count"] for c in changes), "pairs": changes},
        "fusion_passes": _counts(passes),
        "ub_fusion_passes": _counts(ub_passes),
        "fused_nodes": fused_nodes,
        "transdata": by_type.get("TransData", 0),
        "cast": by_type.get("Cast", 0),
        "subgraphs": subgraphs,
    }
