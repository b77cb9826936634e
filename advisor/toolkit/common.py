"""Helpers shared by knowledge bases (part of the toolkit, :mod:`advisor.toolkit`).

Nothing here knows a rule; these are the small, vectorized building blocks the rules use: canonical formats,
stream-ordered neighbours in the ops table, graph walks that skip pass-through ops, severity from a share of
device time, and a "similar op" duration estimate.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from advisor.findings import Severity
from advisor.graph.model_graph import ModelGraph
from advisor.kb import AnalysisContext
from advisor.model import Profile, canonical_dtype, parse_list, parse_shapes

_SUFFIX = re.compile(r":\d+$")


# ---------------------------------------------------------------------------------------------------------
# names and formats
# ---------------------------------------------------------------------------------------------------------
def canon_format(fmt: object) -> str:
    """``FORMAT_NC1HWC0`` / ``NC1HWC0:1`` / ``nchw`` -> ``NC1HWC0`` / ``NC1HWC0`` / ``NCHW``; missing -> ``""``.

    torch_npu writes a sub-format suffix (``NC1HWC0:1``); the family is what matters for format decisions.
    """
    if fmt is None or (isinstance(fmt, float) and np.isnan(fmt)) or fmt is pd.NA:
        return ""
    text = str(fmt).strip().upper()
    if text.startswith("FORMAT_"):
        text = text[7:]
    return _SUFFIX.sub("", text)


def dtypes_of(value: object) -> tuple[str, ...]:
    """Canonical dtypes of a ``;``-separated dtypes cell (``DT_INT64;FLOAT16`` -> ``("INT64", "FLOAT16")``)."""
    if not isinstance(value, str):
        return ()
    return tuple(canonical_dtype(d) for d in parse_list(value) if d)


def shapes_of(value: object) -> list[tuple[int, ...]]:
    """Present tensor shapes of a shapes cell (empty tensors dropped)."""
    if not isinstance(value, str):
        return []
    return [s for s in parse_shapes(value) if s is not None]


def elements(shape: Sequence[int] | None) -> int:
    """Element count of a shape (scalars count 1, unknown dims -1 count as 1)."""
    if shape is None:
        return 0
    n = 1
    for d in shape:
        n *= max(int(d), 1)
    return n


_MS_NAME = re.compile(r"([A-Za-z][A-Za-z0-9]*)-op\d+$")
_GE_INSERTED = re.compile(r"^trans_([A-Za-z][A-Za-z0-9]*)_\d+$")


def type_from_name(name: str) -> str:
    """Best guess of an op type from its name when the profile has none (level-0 and timeline exports):
    MindSpore ``.../DropoutGenMask-op232`` -> ``DropoutGenMask``; GE ``trans_Cast_5`` -> ``Cast``; torch_npu
    ``aclnnInplaceRelu_Relu_Relu`` -> ``Relu``. Empty when nothing fits."""
    base = name.rsplit("/", 1)[-1]
    for rx in (_MS_NAME, _GE_INSERTED):
        m = rx.search(base)
        if m:
            return m.group(1)
    if base.startswith("aclnn") and "_" in base:
        return base.rsplit("_", 1)[-1]
    return ""


def soc_matches(soc: str | None, patterns: Iterable[str]) -> bool:
    """Glob match of a SoC name (``Ascend310P3``) against patterns (``Ascend310P*``), case-insensitive."""
    if not soc:
        return False
    s = soc.upper()
    return any(fnmatch.fnmatchcase(s, p.upper()) for p in patterns)


def detected_soc(ctx: AnalysisContext) -> str | None:
    """The chip the data came from: profile meta, then graph attrs, then a platform the user or data named.

    A platform picked only as the default (chip not detected) does not count: decisions like "this SoC has a
    native Mish kernel" must not rest on a guess.
    """
    if ctx.profile.meta.chip:
        return str(ctx.profile.meta.chip)
    if ctx.graph is not None and ctx.graph.soc_version:
        return ctx.graph.soc_version
    src = str(ctx.platform.get("soc_source", ""))
    if ctx.platform.get("soc") and not src.startswith("default"):
        return str(ctx.platform["soc"])
    return None


# ---------------------------------------------------------------------------------------------------------
# severity and shares
# ---------------------------------------------------------------------------------------------------------
def severity_for(share: float, levels: Mapping[str, float]) -> Severity:
    """Severity from a share of device time: ``levels`` maps critical/major/minor to the lowest share of each."""
    for name in ("critical", "major", "minor"):
        if name in levels and share >= float(levels[name]):
            return name  # type: ignore[return-value]
    return "info"


def device_busy_us(profile: Profile) -> float:
    """Denominator of every share: the union of device task intervals (the score's T)."""
    return float(profile.busy_time_us()) if len(profile.ops) else 0.0


def pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


# ---------------------------------------------------------------------------------------------------------
# the ops table in stream order
# ---------------------------------------------------------------------------------------------------------
def categorical(series: pd.Series) -> pd.Series:
    """The column as a categorical (normalized tables already are; scenario/test frames may not be)."""
    return series if isinstance(series.dtype, pd.CategoricalDtype) else series.astype("category")


def code_table(categories: Iterable[Any], fn: Any, fill: Any = None, dtype: Any = object) -> np.ndarray:
    """``fn`` of each category (one call each, in order), then ``fill``: indexed by a categorical's codes, the
    missing value's code -1 picks the fill."""
    return np.array([fn(c) for c in categories] + [fill], dtype=dtype)


def cat_lookup(series: pd.Series, fn: Any, fill: Any = None, dtype: Any = object) -> tuple[np.ndarray, np.ndarray]:
    """(:func:`code_table` of the column's categories, its codes): ``table[codes]`` is ``fn`` per row, and a
    subset of rows costs no copy of the codes of the others."""
    s = categorical(series)
    return code_table(s.cat.categories, fn, fill, dtype), s.cat.codes.to_numpy()


def cat_map(series: pd.Series, fn: Any, fill: Any = None, dtype: Any = object, rows: np.ndarray | None = None
            ) -> np.ndarray:
    """``fn`` applied once per distinct value, broadcast to every row (to the rows ``rows`` only, if given;
    ``fill`` for missing values).

    The cheap way to derive per-row values from a million-row categorical column with a few hundred values.
    """
    table_, codes = cat_lookup(series, fn, fill, dtype)
    return table_[codes if rows is None else codes[rows]]


def texts(series: pd.Series, mask: np.ndarray | None = None) -> np.ndarray:
    """The values of the rows under ``mask`` (all rows without one) as ``str`` objects, missing ones NaN -- what
    ``series.astype(str).to_numpy()`` gives, with one ``str`` per distinct value shared by its rows instead of one
    per row (~150 MB for a 2M-row name column)."""
    s = categorical(series)
    table_ = np.array([str(c) for c in s.cat.categories] + [np.nan], dtype=object)
    codes = s.cat.codes.to_numpy()
    if mask is not None:
        codes = codes[mask]
    return table_[np.where(codes >= 0, codes, len(table_) - 1)]


def text_ids(series: pd.Series, rows: np.ndarray | None = None, missing: str | None = "nan"
             ) -> tuple[np.ndarray, np.ndarray]:
    """Each row's id of its text (``str`` of its value; a missing value has the text ``missing``, or id -1 when
    that is None) for the rows ``rows`` (a mask or positions; all rows without), and the texts by id: grouping by
    the ids groups as by the texts, on small integers computed per category instead of a ``str`` per row."""
    s = categorical(series)
    labels = [str(c) for c in s.cat.categories] + ([] if missing is None else [missing])
    ids, text = pd.factorize(np.array(labels, dtype=object))
    table_ = (np.append(ids, -1) if missing is None else ids).astype(np.int32)  # code -1 picks the last entry
    codes = s.cat.codes.to_numpy()
    return table_[codes if rows is None else codes[rows]], np.asarray(text, dtype=object)


def combined_codes(df: pd.DataFrame, columns: Sequence[str], rows: np.ndarray | None = None) -> np.ndarray:
    """0..m-1 id, in order of first appearance, of each row's combination of values in ``columns`` (a missing
    value is a value), for the rows ``rows`` only if given: hash-based on the categoricals' codes, no sort and no
    copy of the rows."""
    key = np.zeros(len(df) if rows is None else len(rows), dtype=np.int64)
    for col in columns:
        cat = categorical(df[col])
        codes = cat.cat.codes.to_numpy()
        c = (codes if rows is None else codes[rows]).astype(np.int64) + 1  # int8/int16 codes: +1 must not wrap
        key, _ = pd.factorize(key * (len(cat.cat.categories) + 1) + c)
        key = key.astype(np.int64)
    return key


def all_dynamic(ops: pd.DataFrame, names: Iterable[str]) -> bool:
    """Every task of the ops named ``names`` ran a dynamic-shape kernel (``op_state`` "dynamic")."""
    sel = type_mask(ops["name"], {str(n) for n in names})
    state = cat_map(ops["op_state"], lambda c: str(c).lower() == "dynamic", False, dtype=bool)[sel]
    return bool(len(state)) and bool(state.all())


def type_mask(series: pd.Series, values: Iterable[str]) -> np.ndarray:
    """Boolean mask of rows whose value is in ``values`` (compared per category, not per row)."""
    wanted = set(values)
    return cat_map(series, lambda c: str(c) in wanted, False, dtype=bool)


def row_keys(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group identical rows of an int matrix: (group id per row in order of first appearance, first row of
    each group). Hash-based (iterative factorize), much faster than ``np.unique(axis=0)`` on wide keys."""
    n = matrix.shape[0]
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    key = np.zeros(n, dtype=np.int64)
    for col in matrix.T:
        col = col.astype(np.int64)
        span = int(col.max() - col.min()) + 1
        key, _ = pd.factorize(key * span + (col - col.min()), sort=False)
        key = key.astype(np.int64)
    first = np.full(int(key.max()) + 1, n, dtype=np.int64)
    np.minimum.at(first, key, np.arange(n))
    return key, first


def stream_positions(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Row positions sorted by (stream, start) -- rows without a start in file order, ties in file order (a stable
    sort) -- and each sorted row's stream (-1 where none): the order of :func:`stream_order` without copying a
    column of the table."""
    stream = ops["stream_id"].fillna(-1.0).to_numpy()
    start = ops["start_us"]
    key = start.fillna(np.inf).to_numpy() if start.notna().any() else np.arange(len(ops), dtype="float64")
    order = np.lexsort((key, stream))
    del key
    return order, stream[order]


def stream_order(ops: pd.DataFrame, columns: Sequence[str] | None = None) -> pd.DataFrame:
    """Ops sorted by (stream, start) with a positional index; ``row`` keeps the original index.

    Consecutive-op patterns only make sense within one stream; rows without a start time keep file order.
    Only ``columns`` (plus stream and start) are carried, to keep the copy small.
    """
    keep = list(dict.fromkeys([*(columns or ops.columns), "stream_id", "start_us"]))
    order, streams = stream_positions(ops)
    df = ops[keep].copy(deep=False)
    df["row"] = np.arange(len(df))
    out = df.iloc[order].reset_index(drop=True)
    out["_stream"] = streams
    return out


def next_index(mask: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """For each row, the position of the next row (after it) where ``mask`` is true on the same stream, else -1.

    ``stream`` must be sorted (see :func:`stream_order`), so the nearest masked row is on the same stream or
    there is none.
    """
    n = len(mask)
    out = np.full(n, -1, dtype=np.int64)
    pos = np.flatnonzero(mask)
    if not len(pos):
        return out
    idx = np.searchsorted(pos, np.arange(n), side="right")
    cand = pos[np.minimum(idx, len(pos) - 1)]
    ok = (idx < len(pos)) & (stream[cand] == stream)
    out[ok] = cand[ok]
    return out


def prev_index(mask: np.ndarray, stream: np.ndarray) -> np.ndarray:
    """For each row, the position of the previous row (before it) where ``mask`` is true on the same stream."""
    n = len(mask)
    out = np.full(n, -1, dtype=np.int64)
    pos = np.flatnonzero(mask)
    if not len(pos):
        return out
    idx = np.searchsorted(pos, np.arange(n), side="left") - 1
    cand = pos[np.maximum(idx, 0)]
    ok = (idx >= 0) & (stream[cand] == stream)
    out[ok] = cand[ok]
    return out


# ---------------------------------------------------------------------------------------------------------
# estimates
# ---------------------------------------------------------------------------------------------------------
def output_elements(ops: pd.DataFrame) -> np.ndarray:
    """Element count of each row's first output (else first input) tensor; 0 when unknown.

    Computed per distinct shape string, so a million-row table costs a few hundred parses.
    """
    def count(cell: object) -> int:
        shapes = shapes_of(cell)
        return elements(shapes[0]) if shapes else 0

    out_codes = ops["output_shapes"].astype("category")
    out_n = out_codes.cat.categories.map(count).to_numpy() if len(out_codes.cat.categories) else np.array([])
    codes = out_codes.cat.codes.to_numpy()
    res = np.where(codes >= 0, out_n[np.maximum(codes, 0)] if len(out_n) else 0, 0).astype(np.int64)
    if (res == 0).any():
        in_codes = ops["input_shapes"].astype("category")
        in_n = in_codes.cat.categories.map(count).to_numpy() if len(in_codes.cat.categories) else np.array([])
        ic = in_codes.cat.codes.to_numpy()
        alt = np.where(ic >= 0, in_n[np.maximum(ic, 0)] if len(in_n) else 0, 0).astype(np.int64)
        res = np.where(res == 0, alt, res)
    return res


def similar_size_median(durations: np.ndarray, sizes: np.ndarray, size: int, factor: float,
                        min_samples: int) -> float | None:
    """Median duration of ops whose element count is within ``factor`` of ``size`` (None if too few)."""
    if size <= 0 or not len(durations):
        return None
    lo, hi = size / factor, size * factor
    sel = (sizes >= lo) & (sizes <= hi) & np.isfinite(durations)
    if int(sel.sum()) < min_samples:
        return None
    return float(np.median(durations[sel]))


# ---------------------------------------------------------------------------------------------------------
# graph walks
# ---------------------------------------------------------------------------------------------------------
def node_type(graph: ModelGraph, name: str) -> str:
    return str(graph.node(name).get("type", "")) if name in graph.g else ""


def reach(graph: ModelGraph, start: str, direction: str, max_hops: int,
          expand: Callable[[str], bool]) -> Iterator[str]:
    """Every op met breadth-first from ``start`` along data edges (``direction`` ``"up"``: producers, ``"down"``:
    consumers), each once, for at most ``max_hops`` hops; the walk goes on only through the ops ``expand``
    accepts. A caller may stop early (a search) or collect (a walk)."""
    step = graph.data_predecessors if direction == "up" else graph.data_successors
    frontier, seen = [start], {start}
    for _ in range(max(1, max_hops)):
        nxt: list[str] = []
        for n in frontier:
            for m in step(n):
                if m in seen:
                    continue
                seen.add(m)
                yield m
                if expand(m):
                    nxt.append(m)
        frontier = nxt
        if not frontier:
            return


def walk(graph: ModelGraph, start: str, direction: str, skip_types: Iterable[str], max_hops: int) -> list[str]:
    """Nearest data producers (``direction="up"``) or consumers (``"down"``) of ``start`` whose type is not in
    ``skip_types``, walking through skipped ops for at most ``max_hops`` hops. Sorted, de-duplicated."""
    skip = set(skip_types)
    found = [m for m in reach(graph, start, direction, max_hops, lambda m: node_type(graph, m) in skip)
             if node_type(graph, m) not in skip]
    return sorted(dict.fromkeys(found), key=lambda n: (graph.node(n).get("id") or 0, n))


def node_dtypes(graph: ModelGraph, name: str, side: str) -> list[str]:
    descs = graph.node(name).get("inputs" if side == "in" else "outputs") or []
    return [canonical_dtype(str(d.get("dtype"))) for d in descs if d and d.get("dtype")]


def node_shapes(graph: ModelGraph, name: str, side: str) -> list[tuple[int, ...]]:
    descs = graph.node(name).get("inputs" if side == "in" else "outputs") or []
    return [tuple(int(x) for x in (d.get("shape") or [])) for d in descs if d]


def fmt_shapes(shapes: Sequence[Sequence[int]]) -> str:
    return ";".join(",".join(str(d) for d in s) for s in shapes)


def graph_cmdline(graph: ModelGraph | None) -> str:
    """The ``atc`` command line recorded in the OM (``atc_cmdline``), or ``""``."""
    if graph is None:
        return ""
    v = graph.attrs.get("atc_cmdline")
    return str(v) if v else ""


def atc_option(cmdline: str, name: str) -> str | None:
    """Value of ``--name=value`` (or ``--name value``) in an atc command line."""
    m = re.search(rf"--{re.escape(name)}(?:=|\s+)(\S+)", cmdline)
    return m.group(1) if m else None
