"""Join profile op rows to graph nodes by name.

Profiles name device tasks after the graph op that launched them, but not always verbatim. Tried in order,
once per distinct name (a million rows repeat a few thousand names):

1. ``exact``: the name is a node key.
2. ``original``: a node lists it in ``original_ops`` (``_datadump_original_op_names``: the framework ops a
   fused node was built from; the profile of an un-fused run names them).
3. ``fused``: a node whose name embeds it as a whole token -- ATC names fused ops by concatenating the
   originals (``Conv_0Relu_2`` holds ``Conv_0``), and dynamic-shape partitions prefix them
   (``PartitionedCall_Gather_1221_gatherv2_3`` holds ``Gather_1221``). The shortest such node wins.
4. ``stripped``: the name minus a suffix msprof adds to auxiliary tasks of an op, seen in real profiles:
   ``NonZero_MemSet`` (memset task of NonZero), ``StatelessDropOutGenMask/DSASTATELESSGENBITMASK`` (DSA
   task of the op), and UB-fused ``*_ub_fusion`` names; then steps 1-3 again.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from advisor.common.util import paused_gc
from advisor.graph.model_graph import ModelGraph

_STRIP = (
    re.compile(r"_MemSet$"),
    re.compile(r"/[A-Z][A-Z0-9_]*$"),
    re.compile(r"_ub_fusion$"),
)
FUSED_SCAN_LIMIT = 50_000
"""At most this many distinct still-unmatched names (longest total time first) get the fused-name search."""
CANDIDATE_LIMIT = 5_000
"""Node names checked per searched name (those sharing its rarest word, shortest first)."""
UNMATCHED_TOP = 10


@dataclass
class JoinResult:
    """Which graph node each profile row ran (None when no node matched)."""

    nodes: pd.Series
    """Node key per ops row (same index as the ops table), None where unmatched."""
    name_to_node: dict[str, str]
    """Distinct profile op name -> node key, for every name that matched."""
    method: dict[str, str]
    """Distinct profile op name -> how it matched: exact, original, fused, stripped."""
    matched_share: float
    """Share of device time (``duration_us``) whose rows matched a node (NaN when the table has no time)."""
    matched_rows: int
    """Tasks that matched: rows, or the sum of the ``count`` column of a table aggregated per name."""
    total_rows: int
    unmatched_top: list[dict[str, Any]] = field(default_factory=list)
    """Largest unmatched ops by total time: ``{"name", "type", "duration_us", "count"}``."""

    def node_for(self, name: str) -> str | None:
        return self.name_to_node.get(name)

    def to_dict(self) -> dict[str, Any]:
        """The ``graph.join`` object of the JSON report."""
        by_method: dict[str, int] = {}
        for m in self.method.values():
            by_method[m] = by_method.get(m, 0) + 1
        share = None if np.isnan(self.matched_share) else round(float(self.matched_share), 6)
        return {
            "matched_time_share": share,
            "matched_rows": self.matched_rows,
            "total_rows": self.total_rows,
            "matched_names_by_method": by_method,
            "unmatched_top": self.unmatched_top,
        }


_WORD = re.compile(r"[A-Za-z]+|\d+")


class _Matcher:
    """Name lookups against one graph, built once per join."""

    def __init__(self, graph: ModelGraph) -> None:
        g = graph.g
        self.keys: set[str] = set(g.nodes)
        self.original: dict[str, str] = {}
        for n, data in g.nodes(data=True):
            for o in data.get("original_ops") or ():
                prev = self.original.get(o)
                if prev is None or len(n) < len(prev):
                    self.original[o] = n
        self._names: list[str] = []
        self._words: dict[str, list[int]] | None = None

    def direct(self, name: str) -> tuple[str, str] | None:
        if name in self.keys:
            return name, "exact"
        node = self.original.get(name)
        if node is not None:
            return node, "original"
        return None

    def _index(self) -> dict[str, list[int]]:
        """Word -> node positions (nodes sorted shortest first), built on the first fused lookup."""
        if self._words is None:
            self._names = sorted(self.keys, key=len)
            words: dict[str, list[int]] = {}
            for i, n in enumerate(self._names):
                for w in set(_WORD.findall(n)):
                    words.setdefault(w, []).append(i)
            self._words = words
        return self._words

    def fused(self, name: str) -> str | None:
        """The shortest node name holding ``name`` as a whole token (see module doc).

        Candidates come from a word index: a token starts at a word boundary of the node name and every word
        of it but the last is a whole word there, so the rarest of those words narrows the search.
        """
        words = _WORD.findall(name)
        if not words:
            return None
        index = self._index()
        usable = words[:-1] if len(words) > 1 else words
        postings: list[list[int]] = []
        for w in usable:
            p = index.get(w)
            if p is None:
                return None
            postings.append(p)
        rarest = min(postings, key=len)
        for i in rarest[:CANDIDATE_LIMIT]:
            node = self._names[i]
            j = node.find(name)
            while j >= 0:
                if _is_token(node, j, j + len(name)):
                    return node
                j = node.find(name, j + 1)
        return None


def _is_token(node: str, a: int, b: int) -> bool:
    """Whether ``node[a:b]`` stands as a whole op name inside ``node`` (not part of a longer word/number)."""
    if a == 0 and b == len(node):
        return False  # that would be an exact match, handled before
    inner = node[a:b]
    if a > 0:
        prev = node[a - 1]
        first = inner[0]
        # ONNX-style concatenation "Conv_0Relu_2": a new name starts after a digit; else after a separator
        if prev.isalnum() and not (prev.isdigit() and first.isalpha()):
            return False
    if b < len(node):
        nxt = node[b]
        last = inner[-1]
        if not last.isalnum():
            return False  # "Conv_" is a fragment, not a name
        if last.isdigit() and nxt.isdigit():
            return False
        if last.isalpha() and nxt.isalpha() and nxt.islower():
            return False
        if nxt == "_" and node[b + 1:b + 2].isdigit():
            return False  # "Relu" inside "Relu_2" is another instance, not this op
    return True


def _match_names(matcher: _Matcher, names: list[str], time_of: dict[str, float]) -> tuple[dict[str, str], dict[str, str]]:
    found: dict[str, str] = {}
    how: dict[str, str] = {}
    pending: list[str] = []
    for n in names:
        hit = matcher.direct(n)
        if hit:
            found[n], how[n] = hit
        else:
            pending.append(n)
    pending.sort(key=lambda n: -time_of.get(n, 0.0))
    for n in pending[:FUSED_SCAN_LIMIT]:
        node = matcher.fused(n)
        if node is not None:
            found[n], how[n] = node, "fused"
            continue
        for pat in _STRIP:
            base = pat.sub("", n)
            if base != n and base:
                hit = matcher.direct(base)
                node = hit[0] if hit else matcher.fused(base)
                if node is not None:
                    found[n], how[n] = node, "stripped"
                    break
    return found, how


def join_profile(graph: ModelGraph, ops: pd.DataFrame) -> JoinResult:
    """Map every ops row to a graph node by its ``name``; see the module doc for the matching order.

    ``ops`` is the ops table, or one already aggregated per name; an optional ``count`` column then says how
    many tasks each row stands for (row and unmatched counts use it; time shares are the same either way).
    """
    with paused_gc():
        return _join(graph, ops)


def _join(graph: ModelGraph, ops: pd.DataFrame) -> JoinResult:
    total_rows = len(ops)
    if total_rows == 0 or "name" not in ops.columns:
        return JoinResult(nodes=pd.Series([None] * total_rows, index=ops.index, dtype=object), name_to_node={},
                          method={}, matched_share=float("nan"), matched_rows=0, total_rows=total_rows)
    col = ops["name"]
    cat = col if isinstance(col.dtype, pd.CategoricalDtype) else col.astype("category")
    codes = cat.cat.codes.to_numpy()
    categories = [str(c) for c in cat.cat.categories]
    valid = codes >= 0
    if "duration_us" in ops.columns:
        dur = pd.to_numeric(ops["duration_us"], errors="coerce").to_numpy(dtype="float64", na_value=np.nan)
    else:
        dur = np.full(total_rows, np.nan)
    dur0 = np.nan_to_num(dur, nan=0.0)
    if "count" in ops.columns:
        weight = pd.to_numeric(ops["count"], errors="coerce").fillna(1).to_numpy(dtype="int64")
    else:
        weight = np.ones(total_rows, dtype="int64")
    time_per_cat = np.bincount(codes[valid], weights=dur0[valid], minlength=len(categories))
    time_of = dict(zip(categories, time_per_cat.tolist(), strict=True))

    found, how = _match_names(_Matcher(graph), categories, time_of)

    node_of_cat = np.array([found.get(c) for c in categories] + [None], dtype=object)
    node_arr = node_of_cat[np.where(valid, codes, len(categories))]
    matched = np.fromiter((n is not None for n in node_of_cat), dtype=bool, count=len(node_of_cat))[
        np.where(valid, codes, len(categories))]
    matched_rows = int(weight[matched].sum())
    tasks = int(weight.sum())
    total = float(dur0.sum())
    share = float(dur0[matched].sum()) / total if total > 0 else float("nan")

    unmatched_top: list[dict[str, Any]] = []
    if matched_rows < tasks:
        miss = ~matched & valid
        count_per_cat = np.bincount(codes[miss], weights=weight[miss], minlength=len(categories)).astype("int64")
        time_miss = np.bincount(codes[miss], weights=dur0[miss], minlength=len(categories))
        present = np.bincount(codes[miss], minlength=len(categories)) > 0
        order = [i for i in np.lexsort((-count_per_cat, -time_miss)) if present[i]][:UNMATCHED_TOP]
        first_row: dict[int, Any] = {}
        if "type" in ops.columns and order:
            idx = np.flatnonzero(miss & np.isin(codes, order))
            uniq, first = np.unique(codes[idx], return_index=True)
            types = ops["type"].to_numpy(dtype=object)[idx[first]]
            first_row = dict(zip(uniq.tolist(), types, strict=True))
        for i in order:
            t = first_row.get(int(i))
            unmatched_top.append({"name": categories[i], "type": None if t is None or pd.isna(t) else str(t),
                                  "duration_us": round(float(time_miss[i]), 3), "count": int(count_per_cat[i])})
    nodes = pd.Series(node_arr, index=ops.index, dtype=object, name="node")
    return JoinResult(nodes=nodes, name_to_node=found, method=how, matched_share=share,
                      matched_rows=matched_rows, total_rows=tasks, unmatched_top=unmatched_top)
