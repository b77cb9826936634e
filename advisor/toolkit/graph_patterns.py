"""Graph and profile helpers shared by the fusion knowledge bases (ub-fusion, aipp-fusion) and roofline.

Why a module of its own: subgraph matching, "is this node already fused", tensor sizes and the per-name
profile summary are needed by several knowledge bases and must behave the same in all of them.
"""

from __future__ import annotations

import re
import shlex
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
import pandas as pd

from advisor.common.util import lazy_module
from advisor.graph.model_graph import ModelGraph
from advisor.model import dtype_bytes
from advisor.toolkit.costmodel import numel

nx = lazy_module("networkx")  # imported when a graph is analyzed

# ---------------------------------------------------------------------------------------------------------
# tensors (``numel``, the element count of a shape, is the cost model's: ``advisor.toolkit.costmodel.numel``)
# ---------------------------------------------------------------------------------------------------------


def desc_bytes(desc: Mapping[str, Any] | None) -> float | None:
    """Bytes of a tensor descriptor ({"dtype", "shape"}) or None when the size cannot be known."""
    if not desc:
        return None
    n = numel(desc.get("shape"))
    size = dtype_bytes(str(desc.get("dtype") or ""))
    if n is None or size is None:
        return None
    return float(n) * size


def out_desc(mg: ModelGraph, node: str, index: int = 0) -> dict[str, Any] | None:
    """Output descriptor ``index`` of ``node`` (None if the graph does not carry it)."""
    outs = mg.node(node).get("outputs") or []
    if 0 <= index < len(outs):
        return outs[index]
    return None


def edge_desc(mg: ModelGraph, src: str, dst: str) -> dict[str, Any] | None:
    """The tensor flowing on the data edge src -> dst: the producer's output desc, else the consumer's input."""
    data = mg.g.get_edge_data(src, dst) or {}
    for attrs in data.values():
        if attrs.get("kind", "data") != "data":
            continue
        desc = out_desc(mg, src, int(attrs.get("src_index", 0) or 0))
        if desc and desc.get("shape"):
            return desc
        ins = mg.node(dst).get("inputs") or []
        k = int(attrs.get("dst_index", 0) or 0)
        if 0 <= k < len(ins):
            return ins[k]
    return None


# ---------------------------------------------------------------------------------------------------------
# graph views
# ---------------------------------------------------------------------------------------------------------


def data_digraph(mg: ModelGraph) -> nx.DiGraph:
    """Data edges only, parallel edges collapsed; node attributes shared with the ModelGraph."""
    dg = nx.DiGraph()
    dg.add_nodes_from(mg.g.nodes(data=True))
    dg.add_edges_from((u, v) for u, v, d in mg.g.edges(data=True) if d.get("kind", "data") == "data")
    return dg


@dataclass(frozen=True)
class FusedMarkers:
    """How to tell that a node is already fused (compiled from the ``fused_markers`` rules)."""

    shared_scope_attr: str
    attrs: tuple[str, ...]
    ub_pass_regex: re.Pattern[str]
    name_regex: re.Pattern[str]
    max_original_ops: int

    @classmethod
    def from_rules(cls, rules: Mapping[str, Any]) -> FusedMarkers:
        return cls(
            shared_scope_attr=str(rules["shared_scope_attr"]),
            attrs=tuple(rules["attrs"]),
            ub_pass_regex=re.compile(rules["ub_pass_regex"]),
            name_regex=re.compile(rules["name_regex"]),
            max_original_ops=int(rules["max_original_ops"]),
        )


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple, set)):
        return list(value)
    return [value]


def fused_nodes(mg: ModelGraph, markers: FusedMarkers) -> set[str]:
    """Nodes already fused, or matched for fusion, by GE/FE: never candidates for a new chain."""
    scopes: Counter[Any] = Counter()
    for _, data in mg.g.nodes(data=True):
        scope = (data.get("attrs") or {}).get(markers.shared_scope_attr)
        if scope is not None and not isinstance(scope, (dict, list)):
            scopes[scope] += 1
    out: set[str] = set()
    for name, data in mg.g.nodes(data=True):
        attrs = data.get("attrs") or {}
        scope = attrs.get(markers.shared_scope_attr)
        passes = [str(p) for p in _as_list(data.get("fusion_passes"))]
        if data.get("pass_name_ub"):
            passes.append(str(data["pass_name_ub"]))
        if (
            (scope is not None and not isinstance(scope, (dict, list)) and scopes[scope] > 1)
            or data.get("pass_name_ub")
            or any(bool(attrs.get(k)) for k in markers.attrs)
            or any(markers.ub_pass_regex.search(p) for p in passes)
            or markers.name_regex.search(str(name))
            or len(_as_list(data.get("original_ops"))) > markers.max_original_ops
        ):
            out.add(name)
    return out


# ---------------------------------------------------------------------------------------------------------
# subgraph matching
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Pattern:
    """A fusable chain: slot type sets in data-flow order and the data edges between slots."""

    id: str
    slots: tuple[frozenset[str], ...]
    slot_names: tuple[str, ...]
    edges: tuple[tuple[int, int], ...]
    graph_fusion: tuple[str, ...] = ()
    ub_fusion: tuple[str, ...] = ()
    same_shape: bool = False

    @cached_property
    def order(self) -> list[int]:
        """Slots in a topological order (the order their kernels run)."""
        g = nx.DiGraph()
        g.add_nodes_from(range(len(self.slots)))
        g.add_edges_from(self.edges)
        return list(nx.lexicographical_topological_sort(g))

    @cached_property
    def sinks(self) -> set[int]:
        """Slots whose output leaves the chain."""
        srcs = {u for u, _ in self.edges}
        return {i for i in range(len(self.slots)) if i not in srcs}

    @cached_property
    def graph(self) -> nx.DiGraph:
        """The pattern as a DiGraph (node = slot index, attribute ``types``) for the VF2 matcher."""
        g = nx.DiGraph()
        for i, types in enumerate(self.slots):
            g.add_node(i, types=types)
        g.add_edges_from(self.edges)
        return g

    @cached_property
    def distances(self) -> dict[int, int]:
        """Slot -> shortest distance (edges) from the head slot 0."""
        return dict(nx.single_source_shortest_path_length(self.graph, 0))


def compile_patterns(rules: Mapping[str, Any]) -> list[Pattern]:
    """Patterns from a rules mapping with ``type_groups`` and ``patterns`` (slot names resolved to type sets)."""
    groups = {k: frozenset(v) for k, v in (rules.get("type_groups") or {}).items()}
    out: list[Pattern] = []
    for p in rules.get("patterns") or []:
        names = tuple(p["nodes"])
        slots = tuple(groups.get(n, frozenset({n})) for n in names)
        edges = p.get("edges") or [[i, i + 1] for i in range(len(names) - 1)]
        if any(not (0 <= int(a) < len(names) and 0 <= int(b) < len(names)) for a, b in edges):
            raise ValueError(f"pattern {p['id']}: an edge names a slot that does not exist")
        reach = nx.descendants(nx.DiGraph([(int(a), int(b)) for a, b in edges]), 0) if edges else set()
        if reach != set(range(1, len(names))):
            raise ValueError(f"pattern {p['id']}: every slot must be reachable from slot 0 (the head)")
        out.append(Pattern(
            id=p["id"], slots=slots, slot_names=names, edges=tuple((int(a), int(b)) for a, b in edges),
            graph_fusion=tuple(p.get("graph_fusion") or ()), ub_fusion=tuple(p.get("ub_fusion") or ()),
            same_shape=bool(p.get("same_shape", False)),
        ))
    return out


@dataclass(frozen=True)
class Match:
    pattern: Pattern
    nodes: tuple[str, ...]
    """Graph node per slot (slot order)."""


def _type_match(g_attrs: Mapping[str, Any], p_attrs: Mapping[str, Any]) -> bool:
    return g_attrs.get("type") in p_attrs["types"]


def find_matches(dg: nx.DiGraph, patterns: Sequence[Pattern], exclude: Iterable[str] = ()) -> list[Match]:
    """Every occurrence of each pattern among nodes not in ``exclude`` (VF2 subgraph monomorphism).

    Patterns are rooted at slot 0 (their only source). For each node that can fill slot 0, the matcher runs
    on the node's downstream neighbourhood (as deep as the pattern) within the candidate nodes, with slot 0
    pinned to it -- so the cost follows the number of heads, not the size of the model. A pattern is tried
    only if every slot's types occur within its distance from the head.
    """
    wanted: set[str] = set().union(*(s for p in patterns for s in p.slots)) if patterns else set()
    excluded = set(exclude)
    keep = [n for n, d in dg.nodes(data=True) if d.get("type") in wanted and n not in excluded]
    sub = nx.DiGraph(dg.subgraph(keep))  # a real graph: views re-filter the whole model on every lookup
    found: list[Match] = []
    for head, data in sub.nodes(data=True):
        head_type = data.get("type")
        usable = [p for p in patterns if head_type in p.slots[0]]
        if not usable or sub.out_degree(head) == 0:
            continue
        max_depth = max(max(p.distances.values()) for p in usable)
        reach = nx.single_source_shortest_path_length(sub, head, cutoff=max_depth)
        within: list[set[str]] = [set() for _ in range(max_depth + 1)]
        for n, dist in reach.items():
            within[dist].add(sub.nodes[n].get("type"))
        for d in range(1, max_depth + 1):
            within[d] |= within[d - 1]
        for pattern in usable:
            dists = pattern.distances
            if any(not (within[dists[i]] & pattern.slots[i]) for i in range(1, len(pattern.slots))):
                continue
            depth = max(dists.values())
            local = [n for n, dist in reach.items() if dist <= depth]
            matcher = nx.algorithms.isomorphism.DiGraphMatcher(sub.subgraph(local), pattern.graph, node_match=_type_match)
            seen: set[tuple[str, ...]] = set()
            for mapping in matcher.subgraph_monomorphisms_iter():
                if mapping.get(head) != 0:
                    continue
                inverse = {slot: node for node, slot in mapping.items()}
                nodes = tuple(inverse[i] for i in range(len(pattern.slots)))
                if nodes not in seen:
                    seen.add(nodes)
                    found.append(Match(pattern, nodes))
    return found


def closed_chain(dg: nx.DiGraph, match: Match) -> bool:
    """True when every non-sink node's outputs are consumed inside the chain only (fusion keeps them in UB)."""
    inside = set(match.nodes)
    sinks = match.pattern.sinks
    for i, node in enumerate(match.nodes):
        if i in sinks:
            continue
        succ = set(dg.successors(node))
        if not succ or not succ <= inside:
            return False
    return True


def select_disjoint(matches: Sequence[Match], priority: Mapping[str, int]) -> list[Match]:
    """Keep the longest matches first (then pattern priority, then names) so that no node is claimed twice."""
    ordered = sorted(matches, key=lambda m: (-len(m.nodes), priority.get(m.pattern.id, 1 << 30), m.nodes))
    used: set[str] = set()
    out: list[Match] = []
    for m in ordered:
        if used.isdisjoint(m.nodes):
            out.append(m)
            used.update(m.nodes)
    return out


# ---------------------------------------------------------------------------------------------------------
# constants in graphs
# ---------------------------------------------------------------------------------------------------------
_VALUE_KEYS = ("value", "values", "const_value", "data", "float_data", "val")


def _numbers(value: Any) -> list[float] | None:
    """A flat list of floats from an attribute value (number, list, ndarray, or a dict holding one)."""
    if value is None or isinstance(value, (str, bytes, bool)):
        return None
    if isinstance(value, (int, float, np.integer, np.floating)):
        return [float(value)]
    if isinstance(value, np.ndarray):
        return [float(x) for x in value.ravel()] if value.dtype.kind in "iuf" else None
    if isinstance(value, Mapping):
        for key in (*_VALUE_KEYS, "f", "i", "list", "t"):
            if key in value:
                got = _numbers(value[key])
                if got:
                    return got
        return None
    if isinstance(value, (list, tuple)):
        flat: list[float] = []
        for v in value:
            got = _numbers(v)
            if got is None:
                return None
            flat.extend(got)
        return flat or None
    return None


def const_values(mg: ModelGraph, node: str) -> list[float] | None:
    """Values of a constant node (Const/Constant/initializer), when the graph kept them."""
    attrs = mg.node(node).get("attrs") or {}
    for key in _VALUE_KEYS:
        if key in attrs:
            got = _numbers(attrs[key])
            if got:
                return got
    return None


def scalar_attr(mg: ModelGraph, node: str, keys: Sequence[str]) -> list[float] | None:
    """A numeric attribute of an op itself (e.g. Muls ``value``, Adds ``value``, Power ``scale``)."""
    attrs = mg.node(node).get("attrs") or {}
    for key in keys:
        if key in attrs:
            got = _numbers(attrs[key])
            if got:
                return got
    return None


# ---------------------------------------------------------------------------------------------------------
# model build options
# ---------------------------------------------------------------------------------------------------------


def atc_cmdline(mg: ModelGraph | None) -> str | None:
    """The ``atc`` command line recorded in the OM (attr ``atc_cmdline``), if any."""
    if mg is None:
        return None
    value = mg.attrs.get("atc_cmdline")
    if isinstance(value, Mapping):
        value = value.get("s")
    return str(value) if value else None


def atc_option(cmdline: str | None, option: str) -> str | None:
    """Value of ``--option=value`` / ``-option=value`` / ``--option value`` in an atc command line."""
    if not cmdline:
        return None
    try:
        parts = shlex.split(cmdline)
    except ValueError:
        parts = cmdline.split()
    for i, part in enumerate(parts):
        key, sep, val = part.lstrip("-").partition("=")
        if key == option and part.startswith("-"):
            if sep:
                return val
            if i + 1 < len(parts) and not parts[i + 1].startswith("-"):
                return parts[i + 1]
            return ""
    return None


# ---------------------------------------------------------------------------------------------------------
# profile summaries
# ---------------------------------------------------------------------------------------------------------


def per_name(ops: pd.DataFrame) -> pd.DataFrame:
    """Total device time and call count per op name (index: name)."""
    if not len(ops):
        return pd.DataFrame({"total_us": pd.Series(dtype="float64"), "calls": pd.Series(dtype="int64")})
    names = ops["name"].astype("string")
    g = ops.assign(_n=names).groupby("_n", observed=True, sort=False)["duration_us"]
    return pd.DataFrame({"total_us": g.sum(min_count=1).fillna(0.0), "calls": g.size()})


def severity_for(share: float, thresholds: Mapping[str, float]) -> str:
    """critical / major / minor / info by the saving's share of device time."""
    for level in ("critical", "major", "minor"):
        if share >= float(thresholds[level]):
            return level
    return "info"


def device_time_us(ops: pd.DataFrame) -> float:
    """Device busy time (union of task intervals) as the denominator of shares."""
    from advisor.model import busy_time_us

    return busy_time_us(ops) if len(ops) else 0.0


# ---------------------------------------------------------------------------------------------------------
# profile rows as a per-stream sequence (consecutive-op patterns without a graph)
# ---------------------------------------------------------------------------------------------------------
MAX_LINK_INPUTS = 3
"""Inputs of an op compared with the previous op's output when linking consecutive rows."""


@dataclass
class StreamOrder:
    """Op rows ordered by (stream, start), with names/types/shapes as integer codes for vectorized checks."""

    rows: np.ndarray
    """Positions into the ops table, in stream/start order."""
    name_code: np.ndarray
    names: np.ndarray
    """Distinct op names; ``names[name_code[i]]`` is row i's name."""
    type_code: np.ndarray
    types: np.ndarray
    stream: np.ndarray
    duration: np.ndarray
    out0: np.ndarray
    """Code of output 0's shape (-1 unknown); equal codes = equal shapes."""
    outs: np.ndarray
    """Code of the whole output-shape list (same_shape checks)."""
    ins: np.ndarray
    """(n, MAX_LINK_INPUTS) codes of the first input shapes (-1 absent)."""
    out0_bytes: np.ndarray
    """Bytes of output 0 (NaN unknown)."""

    def __len__(self) -> int:
        return len(self.rows)

    def type_in(self, wanted: Iterable[str]) -> np.ndarray:
        """Per row: its type is one of ``wanted`` (decided per distinct type, not per row)."""
        return np.isin(self.types, list(wanted))[self.type_code]

    def type_codes(self, wanted: Iterable[str]) -> np.ndarray:
        """Boolean table over type codes: ``table[type_code[i]]`` says whether row i's type is wanted."""
        return np.isin(self.types, list(wanted))

    @property
    def next_linked(self) -> np.ndarray:
        """``next_linked[i]``: row i+1 consumes row i's output 0 on the same stream (computed once)."""
        cached = getattr(self, "_next_linked", None)
        if cached is None:
            n = len(self.rows)
            cached = self.linked(np.arange(n - 1), np.arange(1, n)) if n > 1 else np.zeros(0, dtype=bool)
            self._next_linked = cached
        return cached

    def name_of(self, pos: np.ndarray | int) -> Any:
        return self.names[self.name_code[pos]]

    def type_of(self, pos: np.ndarray | int) -> Any:
        return self.types[self.type_code[pos]]

    def linked(self, prev: np.ndarray, cur: np.ndarray) -> np.ndarray:
        """Row ``cur`` consumes a tensor shaped like row ``prev``'s output 0 (same stream)."""
        o = self.out0[prev]
        hit = np.zeros(len(cur), dtype=bool)
        for k in range(self.ins.shape[1]):
            hit |= self.ins[cur, k] == o
        return hit & (o >= 0) & (self.stream[prev] == self.stream[cur])


def _category_codes(col: pd.Series) -> tuple[np.ndarray, list[Any]]:
    cat = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
    return cat.cat.codes.to_numpy(), list(cat.cat.categories)


def stream_order(ops: pd.DataFrame) -> StreamOrder:
    """Sort rows by stream then start time and encode their shapes (work per distinct value, not per row)."""
    from advisor.model import parse_list, parse_shapes

    stream = ops["stream_id"].to_numpy(dtype="float64", na_value=np.nan)
    start = ops["start_us"].to_numpy(dtype="float64", na_value=np.nan)
    stream_key = np.where(np.isnan(stream), -1.0, stream)
    order = np.lexsort((np.arange(len(ops)), np.nan_to_num(start, nan=np.inf), stream_key))

    registry: dict[Any, int] = {}

    def code(shape: Any) -> int:
        if shape is None:
            return -1
        return registry.setdefault(shape, len(registry))

    in_codes, in_cats = _category_codes(ops["input_shapes"])
    in_table = np.full((len(in_cats) + 1, MAX_LINK_INPUTS), -1, dtype=np.int64)
    for i, text in enumerate(in_cats):
        shapes = parse_shapes(text)
        for k, s in enumerate(shapes[:MAX_LINK_INPUTS]):
            in_table[i, k] = code(s)
    out_codes, out_cats = _category_codes(ops["output_shapes"])
    out0_table = np.full(len(out_cats) + 1, -1, dtype=np.int64)
    outs_table = np.full(len(out_cats) + 1, -1, dtype=np.int64)
    for i, text in enumerate(out_cats):
        shapes = parse_shapes(text)
        out0_table[i] = code(shapes[0]) if shapes else -1
        outs_table[i] = code(("all", shapes)) if shapes else -1
    dt_codes, dt_cats = _category_codes(ops["output_dtypes"])
    # bytes of output 0 per distinct (shape, dtype) pair
    width = len(dt_cats) + 1
    pair = (out_codes.astype(np.int64) + 1) * width + (dt_codes.astype(np.int64) + 1)
    uniq, inverse = np.unique(pair, return_inverse=True)
    pair_bytes = np.full(len(uniq), np.nan)
    for j, p in enumerate(uniq):
        oc, dc = divmod(int(p), width)
        oc, dc = oc - 1, dc - 1
        if oc < 0 or dc < 0:
            continue
        shapes = parse_shapes(out_cats[oc])
        dtypes = parse_list(dt_cats[dc])
        if shapes and dtypes:
            n = numel(shapes[0])
            size = dtype_bytes(dtypes[0])
            if n is not None and size is not None:
                pair_bytes[j] = n * size
    row_bytes = pair_bytes[inverse.reshape(-1)]
    name_codes, name_cats = _category_codes(ops["name"])
    type_codes, type_cats = _category_codes(ops["type"])
    names = np.array([str(x) for x in name_cats] + [""], dtype=object)
    types = np.array([str(x) for x in type_cats] + [""], dtype=object)

    return StreamOrder(
        rows=order,
        name_code=np.where(name_codes < 0, len(names) - 1, name_codes)[order],
        names=names,
        type_code=np.where(type_codes < 0, len(types) - 1, type_codes)[order],
        types=types,
        stream=stream_key[order],
        duration=np.nan_to_num(ops["duration_us"].to_numpy(dtype="float64", na_value=np.nan)[order], nan=0.0),
        out0=out0_table[out_codes][order],
        outs=outs_table[out_codes][order],
        ins=in_table[in_codes][order],
        out0_bytes=row_bytes[order],
    )
