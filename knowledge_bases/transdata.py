"""TransData knowledge base: how much time format conversions take, why each one is there, what removes it.

AI Core cube units work in private ("heavy") formats -- NC1HWC0 (5HD) for feature maps, FRACTAL_Z for conv
weights, FRACTAL_NZ for matmul operands -- and GE inserts a ``TransData`` wherever a tensor crosses between an
op that uses one and an op that works in ND/NCHW. Each conversion is classified with the MindStudio Advisor
categories and traced to the op that forces it: from the model graph (producers and consumers, walking through
Cast and similar pass-through ops) or, without a graph, from the neighbouring rows on the same stream, confirmed
by matching tensor shapes.

Causes (one per kind of site: category and the op type forcing it; one per kind of round trip) own each
conversion once -- a round trip's conversions are not also a category site -- so their savings never add up past
the conversions' time. The conversion count is their symptom.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection
from advisor.toolkit.advice import context_of, family
from advisor.toolkit.common import (
    canon_format,
    categorical,
    code_table,
    fmt_shapes,
    next_index,
    node_shapes,
    node_type,
    prev_index,
    reach,
    row_keys,
    severity_for,
    stream_positions,
    walk,
)
from advisor.toolkit.graph_patterns import ModelGraph
from advisor.toolkit.time import window_us

NOT_SUPPORT = "Ops_Not_Support_Heavy_Format"
RESHAPE = "Reshape_Ops_Interrupts_Format"
HD_NZ = "Transform_Between_5HD_And_NZ"
OTHER = "Other_Transform"
PAIR = "Redundant_Pair"
"""Not one of the four official categories: a conversion undone by the very next one (no op between). Such
pairs are reported by ``transdata.roundtrip`` with both ops as the saving."""

CATEGORY_RULES = {NOT_SUPPORT: "transdata.unsupported-format", RESHAPE: "transdata.reshape-interrupts",
                  HD_NZ: "transdata.5hd-nz"}

_THRESHOLDS_COMMON = ("severity", "format_op_types", "inserted_transpose", "transparent_types", "max_hops")


_OP_SYMPTOMS = ("roofline.no-bound", "roofline.memory-bound", "roofline.latency-bound", "roofline.scalar-bound",
                "memory-bound.layers")
"""The symptoms measured on a TransData op itself: a fix that removes the op removes them."""


def _removes_transdata(count: str, ops: str) -> dict[str, str]:
    """The ``explains`` of a cause whose fix removes TransData ops: how it removes them from ``transdata.count``
    and, in one sentence, from every symptom measured on the ops."""
    return {"transdata.count": count, **dict.fromkeys(_OP_SYMPTOMS, ops)}


@dataclass
class Site:
    """One conversion site: an op name with one src->dst conversion and one cause."""

    name: str
    src: str
    dst: str
    in_shape: str = ""
    out_shape: str = ""
    category: str = OTHER
    forcing_op: str | None = None
    forcing_type: str | None = None
    forcing_format: str = ""
    via: str | None = None
    reason: str = ""
    agnostic: bool = False
    weight: bool = False
    total_us: float = 0.0
    tasks: int = 0
    basis: str = "profile"
    """How the site was traced, the key of its confidence in the rules: graph, profile (neighbouring rows with
    matching shapes), profile_without_shapes, unlinked."""
    partner: str | None = None
    """For a 5HD <-> NZ switch through a plain format: the other conversion of the hop (both halves are one cause)."""


@dataclass
class RoundTrip:
    first: str
    second: str
    outer: str
    inner: str
    between: list[tuple[str, str]] = field(default_factory=list)
    exact: bool = True
    occurrences: int = 0
    first_us: float = 0.0
    second_us: float = 0.0

    @property
    def saving_us(self) -> float:
        # an exact cancel goes entirely; when the shapes differ (e.g. another C0) one direct conversion remains
        return self.first_us + self.second_us if self.exact else min(self.first_us, self.second_us)


class Formats:
    """Format facts from the rules file: heavy families, and the op-type lists used to judge neighbours."""

    def __init__(self, rules: Mapping[str, Any]) -> None:
        self.family_of: dict[str, str] = {}
        for fam, fmts in rules["format_families"].items():
            for f in fmts:
                self.family_of[canon_format(f)] = fam
        self.weight_families = set(rules["weight_families"])
        self.conv_types = set(rules["format_op_types"])
        ins = rules["inserted_transpose"]
        self.ins_types = set(ins["types"])
        self.ins_prefixes = tuple(ins["name_prefixes"])
        self.transparent = set(rules["transparent_types"])
        self.reshape = set(rules["reshape_types"])
        self.agnostic = set(rules["format_agnostic_types"])
        self.boundary = set(rules["boundary_types"])

    def family(self, fmt: str) -> str | None:
        return self.family_of.get(fmt)

    def key(self, fmt: str) -> str:
        """Family for heavy formats, the format itself for plain ones: what a round trip must return to."""
        return self.family_of.get(fmt, fmt)

    def is_conversion(self, op_type: str | None, name: str | None) -> bool:
        if not op_type:
            return False
        if op_type in self.conv_types:
            return True
        return op_type in self.ins_types and bool(name) and str(name).startswith(self.ins_prefixes)


# ---------------------------------------------------------------------------------------------------------
# classification
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Neighbour:
    """The op next to a conversion on the side that decides its category (consumer of an exit, producer of
    an entry), with the one after it (for reshape chains)."""

    name: str | None = None
    type: str | None = None
    fmt: str = ""
    linked: bool = True
    conv_src: str = ""
    conv_dst: str = ""
    beyond_heavy: bool = False
    beyond_name: str | None = None
    beyond_type: str | None = None
    beyond_boundary: bool = False
    sandwiched: bool = True
    """The plain-format stretch past the neighbour returns to a private format (exit) or came from one
    (entry) within max_hops ops. If not, the conversion sits at the model's edge: it would move, not go."""


def classify(site: Site, nb: Neighbour, fm: Formats) -> None:
    """Fill ``site.category`` and the forcing op from the formats and the deciding neighbour."""
    fs, fd = fm.family(site.src), fm.family(site.dst)
    if fs and fd:
        if fs != fd and {fs, fd} == {"5HD", "NZ"}:
            site.category, site.reason = HD_NZ, f"direct {site.src} -> {site.dst} conversion"
            site.forcing_op, site.forcing_type = nb.name, nb.type
        else:
            site.category, site.reason = OTHER, f"re-layout between private formats ({site.src} -> {site.dst})"
        return
    if not fs and not fd:
        site.category, site.reason = OTHER, f"layout change between plain formats ({site.src} -> {site.dst})"
        return
    if fd in fm.weight_families or fs in fm.weight_families:
        site.category, site.weight = OTHER, True
        site.reason = f"weight conversion {site.src} -> {site.dst}"
        return
    exit_ = bool(fs)
    side = "consumer" if exit_ else "producer"
    if nb.name is None:
        site.category, site.reason = OTHER, ("model output" if exit_ else "model input") + f" (no {side})"
    elif not nb.linked:
        site.category, site.basis = OTHER, "unlinked"
        site.reason = f"{side} not adjacent in the profile (shapes do not match the neighbouring op)"
    elif nb.type in fm.boundary:
        site.category, site.reason = OTHER, ("model output" if exit_ else "model input / constant") + f" ({nb.type})"
    elif fm.is_conversion(nb.type, nb.name):
        _beside_conversion(site, nb, fm, fs or fd, exit_)
    elif nb.type in fm.reshape:
        _beside_view(site, nb, fm, exit_, side)
    elif not nb.sandwiched:
        site.category = OTHER
        site.reason = (f"{side} {nb.type} works in {nb.fmt or 'a plain format'} but the tensor "
                       + ("does not return to" if exit_ else "did not come from")
                       + " a private format: at the model's edge the conversion would move, not go")
    else:
        site.category = NOT_SUPPORT
        site.forcing_op, site.forcing_type, site.forcing_format = nb.name, nb.type, nb.fmt
        site.agnostic = nb.type in fm.agnostic
        site.reason = f"{side} {nb.type} works in {nb.fmt or 'a plain format'}"


def _beside_conversion(site: Site, nb: Neighbour, fm: Formats, heavy: str | None, exit_: bool) -> None:
    """The deciding neighbour is another conversion: undone by it, a 5HD <-> NZ hop through a plain format, or a
    chain of conversions."""
    other_heavy = fm.family(nb.conv_dst if exit_ else nb.conv_src)
    if other_heavy == heavy:
        site.category, site.reason = PAIR, f"undone by {nb.name}"
    elif other_heavy:
        site.category, site.partner = HD_NZ, nb.name
        site.reason = f"{heavy} -> {other_heavy} through a plain format, via {nb.name}"
        if nb.beyond_name:
            # the op that wants the other private format, past the partner conversion
            site.forcing_op, site.forcing_type = nb.beyond_name, nb.beyond_type
            return
    else:
        site.category, site.reason = OTHER, f"chained with {nb.name}"
    site.forcing_op, site.forcing_type = nb.name, nb.type


def _beside_view(site: Site, nb: Neighbour, fm: Formats, exit_: bool, side: str) -> None:
    """The deciding neighbour is a view op: between private-format ops (Reshape_Ops_Interrupts_Format), at the
    model's edge, or in front of the plain-format op that does the work (Ops_Not_Support_Heavy_Format)."""
    if nb.beyond_heavy:
        site.category, site.via = RESHAPE, nb.name
        site.forcing_op, site.forcing_type, site.forcing_format = nb.name, nb.type, nb.fmt
        site.reason = f"{nb.type} {nb.name} between private-format ops"
    elif nb.beyond_boundary or nb.beyond_name is None:
        site.category, site.reason = OTHER, ("model output" if exit_ else "model input") + f" via {nb.type}"
    elif not nb.sandwiched:
        site.category, site.reason = OTHER, f"plain-format ops after {nb.type} {nb.name} up to the model's edge"
    else:
        # the plain-format op past the view is the one doing plain-format work
        site.category, site.via = NOT_SUPPORT, nb.name
        site.forcing_op, site.forcing_type = nb.beyond_name, nb.beyond_type
        site.agnostic = nb.beyond_type in fm.agnostic
        site.reason = f"{side} {nb.beyond_type} (after {nb.type} {nb.name}) works in a plain format"


def _shape_in(shape: str, shapes_cell: object) -> bool:
    if not shape or not isinstance(shapes_cell, str):
        return False
    return shape in [s.strip() for s in shapes_cell.split(";")]


def _first(cell: object) -> str:
    """First tensor of a ``;``-separated cell (``"1,64,56,56;64"`` -> ``"1,64,56,56"``)."""
    if not isinstance(cell, str) or cell in ("nan", "<NA>"):
        return ""
    return cell.split(";")[0].strip()


# ---------------------------------------------------------------------------------------------------------
# profile path
# ---------------------------------------------------------------------------------------------------------
class ProfileView:
    """The ops table in stream order with neighbour positions and per-row derived values, built once.

    Text columns stay categorical: per-row values (first format, first shape) are computed per category and
    looked up through the categorical's own (int8/int16) codes in stream order, so a million-row profile costs a
    few hundred string operations and a few bytes per row; nothing else of the table is copied.
    """

    COLS = ("name", "type", "input_formats", "output_formats", "input_shapes", "output_shapes")

    def __init__(self, ops: pd.DataFrame, fm: Formats) -> None:
        order, stream = stream_positions(ops)
        cats = {c: categorical(ops[c]) for c in self.COLS}
        self.values = {c: list(cats[c].cat.categories) for c in self.COLS}
        self.codes = {c: cats[c].cat.codes.to_numpy()[order] for c in self.COLS}
        del cats
        conv = self._per_row("type", lambda t: str(t) in fm.conv_types, False)
        if fm.ins_types and fm.ins_prefixes:
            prefixed = self._per_row("name", lambda n: str(n).startswith(fm.ins_prefixes), False)
            conv = conv | (self._per_row("type", lambda t: str(t) in fm.ins_types, False) & prefixed)
        self.conv = conv
        self.agnostic = self._per_row("type", lambda t: str(t) in fm.agnostic, False)
        self.dur = np.nan_to_num(ops["duration_us"].to_numpy(dtype="float64")[order])
        self.conv_steps = ops["step"].iloc[order[conv]]
        del order
        solid = ~(self._per_row("type", lambda t: str(t) in fm.transparent, False) & ~conv)
        index = np.int32 if len(solid) < 2**31 else np.int64
        self.nxt = next_index(solid, stream).astype(index)
        self.prv = prev_index(solid, stream).astype(index)
        del solid, stream
        self.has_shapes = bool(ops["input_shapes"].notna().any() or ops["output_shapes"].notna().any())
        # per category: first tensor's canonical format, as a family-or-format key id, and first shape as a
        # global id (the last entry: missing values)
        self._src = self._table("input_formats", lambda v: canon_format(_first(str(v))), "")
        self._dst = self._table("output_formats", lambda v: canon_format(_first(str(v))), "")
        keys: dict[str, int] = {}
        self._src_key = self._table("input_formats",
                                    lambda v: keys.setdefault(fm.key(canon_format(_first(str(v)))), len(keys)),
                                    keys.setdefault("", len(keys)), dtype=np.int64)
        self._dst_key = self._table("output_formats",
                                    lambda v: keys.setdefault(fm.key(canon_format(_first(str(v)))), len(keys)),
                                    keys[""], dtype=np.int64)
        self.heavy_src = self._per_row("input_formats",
                                       lambda v: fm.family(canon_format(_first(str(v)))) is not None, False)
        heavy_any = (lambda v: any(fm.family(canon_format(f)) for f in str(v).split(";") if f))  # noqa: E731
        self.in_heavy = self._per_row("input_formats", heavy_any, False)
        self.out_heavy = self._per_row("output_formats", heavy_any, False)
        self.heavy_dst = self._per_row("output_formats",
                                       lambda v: fm.family(canon_format(_first(str(v)))) is not None, False)
        shape_ids: dict[str, int] = {"": -1}
        self._in1 = self._table("input_shapes", lambda v: shape_ids.setdefault(_first(str(v)), len(shape_ids)), -1,
                                dtype=np.int64)
        self._out1 = self._table("output_shapes", lambda v: shape_ids.setdefault(_first(str(v)), len(shape_ids)),
                                 -1, dtype=np.int64)

    def _table(self, col: str, fn: Any, fill: Any, dtype: Any = object) -> np.ndarray:
        """:func:`code_table` of ``col``'s categories: indexed by the codes of ``col`` kept in stream order."""
        return code_table(self.values[col], fn, fill, dtype)

    def _per_row(self, col: str, fn: Any, fill: Any) -> np.ndarray:
        """:meth:`_table` of ``col`` (booleans) for every row."""
        return self._table(col, fn, fill, dtype=bool)[self.codes[col]]

    def src(self, at: np.ndarray | int) -> Any:
        """First input tensor's canonical format of the rows ``at``."""
        return self._src[self.codes["input_formats"][at]]

    def dst(self, at: np.ndarray | int) -> Any:
        """First output tensor's canonical format of the rows ``at``."""
        return self._dst[self.codes["output_formats"][at]]

    def src_key(self, at: np.ndarray) -> np.ndarray:
        """Format key id (family or format) of the first input of the rows ``at``."""
        return self._src_key[self.codes["input_formats"][at]]

    def dst_key(self, at: np.ndarray) -> np.ndarray:
        """Format key id (family or format) of the first output of the rows ``at``."""
        return self._dst_key[self.codes["output_formats"][at]]

    def in1(self, at: np.ndarray) -> np.ndarray:
        """Shape id of the first input of the rows ``at`` (-1: none)."""
        return self._in1[self.codes["input_shapes"][at]]

    def out1(self, at: np.ndarray) -> np.ndarray:
        """Shape id of the first output of the rows ``at`` (-1: none)."""
        return self._out1[self.codes["output_shapes"][at]]

    def sandwiched(self, pos: np.ndarray, max_hops: int) -> np.ndarray:
        """For conversions at ``pos``: does the plain stretch past the deciding neighbour meet a private format
        within ``max_hops`` rows (forward for exits, backward for entries)?"""
        exit_ = self.heavy_src[pos] & ~self.heavy_dst[pos]
        fwd = (self.conv & self.heavy_dst) | self.in_heavy
        back = (self.conv & self.heavy_src) | self.out_heavy
        out = np.zeros(len(pos), dtype=bool)
        cur = np.where(exit_, self.hop(self.nxt[pos], "down"), self.hop(self.prv[pos], "up"))
        for _ in range(max(1, max_hops)):
            c = np.maximum(cur, 0)
            out |= (cur >= 0) & np.where(exit_, fwd[c], back[c])
            cur = np.where(exit_, self.hop(cur, "down"), self.hop(cur, "up"))
        return out

    def hop(self, idx: np.ndarray, direction: str) -> np.ndarray:
        table_ = self.nxt if direction == "down" else self.prv
        return np.where(idx >= 0, table_[np.maximum(idx, 0)], -1)

    def text(self, col: str, code: int) -> str | None:
        return None if code < 0 else str(self.values[col][code])

    def name_at(self, i: int) -> str:
        return self.text("name", int(self.codes["name"][i])) or ""


def profile_sites(view: ProfileView, fm: Formats, max_hops: int, exclude: np.ndarray | None = None) -> list[Site]:
    """Classify every conversion row (except the ``exclude`` rows: those of round trips); rows with the same name,
    formats, shapes and neighbours share a site (in order of first appearance)."""
    pos = np.flatnonzero(view.conv if exclude is None else view.conv & ~exclude)
    if not len(pos):
        return []
    cols = list(view.COLS)
    keys = _site_keys(view, pos, max_hops)
    inverse, first_idx = row_keys(keys)

    sites: list[Site] = []
    for u in range(len(first_idx)):
        row = _key_row(view, keys[first_idx[u]], cols)
        src, dst = canon_format(_first(row["input_formats"])), canon_format(_first(row["output_formats"]))
        site = Site(name=str(row["name"]), src=src, dst=dst, in_shape=_first(row["input_shapes"]),
                    out_shape=_first(row["output_shapes"]))
        exit_ = fm.family(src) is not None and fm.family(dst) is None
        tag1, tag2 = ("n1", "n2") if exit_ else ("p1", "p2")
        nb = _profile_neighbour(row, tag1, tag2, site, exit_, view.has_shapes, fm)
        nb.sandwiched = bool(keys[first_idx[u], -1])
        if fm.family(src) is None and fm.family(dst) is None:
            nb = Neighbour()
        classify(site, nb, fm)
        if not view.has_shapes and site.category != OTHER:
            site.basis = "profile_without_shapes"
        sites.append(site)
    totals = np.bincount(inverse, weights=view.dur[pos], minlength=len(sites))
    counts = np.bincount(inverse, minlength=len(sites))
    for k, s in enumerate(sites):
        s.total_us, s.tasks = float(totals[k]), int(counts[k])
    return sites


def _site_keys(view: ProfileView, pos: np.ndarray, max_hops: int) -> np.ndarray:
    """Per conversion row at ``pos``: the codes of its :attr:`ProfileView.COLS`, then those of its neighbours n1,
    p1, n2, p2 (-2: no neighbour, -1: missing value), then whether it is sandwiched. int32 codes (the
    categoricals' own are int8/int16), filled in place: one array of ~120 B a row."""
    cols = list(view.COLS)
    keys = np.full((len(pos), 5 * len(cols) + 1), -2, dtype=np.int32)
    for k, c in enumerate(cols):
        keys[:, k] = view.codes[c][pos]
    n1, p1 = view.nxt[pos], view.prv[pos]
    for t, idx in enumerate((n1, p1, view.hop(n1, "down"), view.hop(p1, "up"))):
        ok = idx >= 0
        at = idx[ok]
        for k, c in enumerate(cols):
            keys[ok, (t + 1) * len(cols) + k] = view.codes[c][at]
    keys[:, -1] = view.sandwiched(pos, max_hops)
    return keys


def _key_row(view: ProfileView, key: np.ndarray, cols: list[str]) -> dict[str, str | None]:
    """A unique key (codes) back to text: ``name``, ``input_formats``... and ``n1_name``, ``p2_type``..."""
    row: dict[str, str | None] = {}
    for k, c in enumerate(cols):
        row[c] = view.text(c, int(key[k]))
    for t, tag in enumerate(("n1", "p1", "n2", "p2")):
        base = (t + 1) * len(cols)
        for k, c in enumerate(cols):
            code = int(key[base + k])
            row[f"{tag}_{c}"] = None if code == -2 else view.text(c, code)
    return row


def _profile_neighbour(row: Mapping[str, str | None], tag1: str, tag2: str, site: Site, exit_: bool,
                       has_shapes: bool, fm: Formats) -> Neighbour:
    name = row[f"{tag1}_name"]
    if name is None:
        return Neighbour()
    typ = row[f"{tag1}_type"]
    fmts_col = "input_formats" if exit_ else "output_formats"
    shapes_col = "input_shapes" if exit_ else "output_shapes"
    link_shape = site.out_shape if exit_ else site.in_shape
    linked = _shape_in(link_shape, row[f"{tag1}_{shapes_col}"]) if has_shapes and link_shape else True
    nb = Neighbour(name=str(name), type=str(typ), fmt=canon_format(_first(row[f"{tag1}_{fmts_col}"])), linked=linked)
    if fm.is_conversion(nb.type, nb.name):
        nb.conv_src = canon_format(_first(row[f"{tag1}_input_formats"]))
        nb.conv_dst = canon_format(_first(row[f"{tag1}_output_formats"]))
        if exit_:
            nb.linked = nb.linked and fm.family(nb.conv_src) is None
        else:
            nb.linked = nb.linked and fm.family(nb.conv_dst) is None
        if row[f"{tag2}_name"] is not None:
            nb.beyond_name, nb.beyond_type = str(row[f"{tag2}_name"]), str(row[f"{tag2}_type"])
    if nb.type in fm.reshape:
        bname, btype = row[f"{tag2}_name"], row[f"{tag2}_type"]
        nb.beyond_name = None if bname is None else str(bname)
        nb.beyond_type = None if btype is None else str(btype)
        if nb.beyond_name is not None:
            nb.beyond_boundary = nb.beyond_type in fm.boundary
            if fm.is_conversion(nb.beyond_type, nb.beyond_name):
                # the conversion after (before) the view goes into (comes from) a private format?
                side_fmts = row[f"{tag2}_output_formats"] if exit_ else row[f"{tag2}_input_formats"]
            else:
                side_fmts = row[f"{tag2}_{fmts_col}"]
            nb.beyond_heavy = any(fm.family(canon_format(f)) for f in str(side_fmts or "").split(";") if f)
    return nb


def profile_roundtrips(view: ProfileView, fm: Formats, max_between: int) -> tuple[list[RoundTrip], np.ndarray]:
    """Pairs X->Y ... Y->X on one stream with only pass-through or elementwise ops between, the second fed by
    the first's output shape, and the rows they hold (a row belongs to one cause: the round trip, not also a
    category). A plain->private->plain pair counts only with nothing between (around a real private-format op
    it is the normal entry and exit)."""
    rows = np.zeros(len(view.conv), dtype=bool)
    pos = np.flatnonzero(view.conv)
    if not len(pos):
        return [], rows
    # walk forward from each conversion through elementwise ops to the next conversion (vectorized)
    partner = np.full(len(pos), -1, dtype=np.int64)
    n_between = np.zeros(len(pos), dtype=np.int64)
    between = np.full((len(pos), max_between), -1, dtype=np.int64)
    cur = view.nxt[pos]
    alive = cur >= 0
    for step in range(max_between + 1):
        c = np.maximum(cur, 0)
        hit = alive & view.conv[c]
        partner[hit] = cur[hit]
        n_between[hit] = step
        alive = alive & ~view.conv[c] & view.agnostic[c]
        if step < max_between:
            between[alive, step] = cur[alive]
        cur = np.where(alive, view.nxt[c], -1)
        alive = alive & (cur >= 0)
    ok = partner >= 0
    j = np.maximum(partner, 0)
    src, dst = view.src_key(pos), view.dst_key(pos)
    ok &= src != dst
    ok &= (view.src_key(j) == dst) & (view.dst_key(j) == src)
    ok &= (n_between == 0) | view.heavy_src[pos]
    if view.has_shapes:
        out1, in2 = view.out1(pos), view.in1(j)
        ok &= (out1 < 0) | (in2 < 0) | (out1 == in2)
        exact = view.in1(pos) == view.out1(j)
    else:
        exact = np.ones(len(pos), dtype=bool)
    if not ok.any():
        return [], rows
    first, second = pos[ok], partner[ok]
    rows[first] = True
    rows[second] = True
    mid = between[ok]
    name_codes = view.codes["name"]
    mid_names = np.where(mid >= 0, name_codes[np.maximum(mid, 0)], -2)
    keys = np.concatenate([name_codes[first][:, None], name_codes[second][:, None], mid_names], axis=1)
    inv, first_seen = row_keys(keys)
    uniq = first_seen
    d1 = np.bincount(inv, weights=view.dur[first], minlength=len(uniq))
    d2 = np.bincount(inv, weights=view.dur[second], minlength=len(uniq))
    count = np.bincount(inv, minlength=len(uniq))
    inexact = np.bincount(inv, weights=(~exact[ok]).astype(float), minlength=len(uniq))
    trips: list[RoundTrip] = []
    for u in range(len(first_seen)):
        i, k = int(first[first_seen[u]]), int(second[first_seen[u]])
        mids = [int(m) for m in mid[first_seen[u]] if m >= 0]
        trips.append(RoundTrip(
            first=view.name_at(i), second=view.name_at(k), outer=str(view.src(i)), inner=str(view.dst(i)),
            between=[(view.name_at(m), view.text("type", int(view.codes["type"][m])) or "") for m in mids],
            exact=bool(inexact[u] == 0), occurrences=int(count[u]), first_us=float(d1[u]), second_us=float(d2[u])))
    return trips, rows


# ---------------------------------------------------------------------------------------------------------
# graph path
# ---------------------------------------------------------------------------------------------------------
def _conv_formats(graph: ModelGraph, name: str) -> tuple[str, str]:
    node = graph.node(name)
    attrs = node.get("attrs") or {}
    ins, outs = node.get("inputs") or [], node.get("outputs") or []
    src = canon_format(attrs.get("src_format") or (ins[0].get("format") if ins and ins[0] else ""))
    dst = canon_format(attrs.get("dst_format") or (outs[0].get("format") if outs and outs[0] else ""))
    return src, dst


def _heavy_formats(graph: ModelGraph, name: str, side: str, fm: Formats) -> bool:
    descs = graph.node(name).get("inputs" if side == "in" else "outputs") or []
    return any(fm.family(canon_format(d.get("format"))) for d in descs if d)


def graph_sites(graph: ModelGraph, fm: Formats, max_hops: int) -> list[Site]:
    sites: list[Site] = []
    convs = [n for n, d in graph.g.nodes(data=True) if fm.is_conversion(str(d.get("type", "")), n)]
    for name in sorted(convs, key=lambda n: (graph.node(n).get("id") or 0, n)):
        src, dst = _conv_formats(graph, name)
        ins, outs = node_shapes(graph, name, "in"), node_shapes(graph, name, "out")
        site = Site(name=name, src=src, dst=dst, in_shape=fmt_shapes(ins[:1]), out_shape=fmt_shapes(outs[:1]),
                    basis="graph")
        exit_ = fm.family(src) is not None and fm.family(dst) is None
        direction = "down" if exit_ else "up"
        candidates = walk(graph, name, direction, fm.transparent, max_hops)
        best: Site | None = None
        for cand in candidates or [None]:
            trial = Site(name=name, src=src, dst=dst, in_shape=site.in_shape, out_shape=site.out_shape, basis="graph")
            classify(trial, _graph_neighbour(graph, cand, exit_, fm, max_hops), fm)
            if best is None or _PRIORITY[trial.category] < _PRIORITY[best.category]:
                best = trial
        sites.append(best or site)
    return sites


_PRIORITY = {PAIR: 0, HD_NZ: 1, RESHAPE: 2, NOT_SUPPORT: 3, OTHER: 4}


def _graph_neighbour(graph: ModelGraph, cand: str | None, exit_: bool, fm: Formats, max_hops: int) -> Neighbour:
    if cand is None:
        return Neighbour()
    typ = node_type(graph, cand)
    side = "in" if exit_ else "out"
    descs = graph.node(cand).get("inputs" if exit_ else "outputs") or []
    fmts = [canon_format(d.get("format")) for d in descs if d]
    nb = Neighbour(name=cand, type=typ, fmt=next((f for f in fmts if f), ""))
    if fm.is_conversion(typ, cand):
        nb.conv_src, nb.conv_dst = _conv_formats(graph, cand)
        beyond = walk(graph, cand, "down" if exit_ else "up", fm.transparent, max_hops)
        if beyond:
            nb.beyond_name, nb.beyond_type = beyond[0], node_type(graph, beyond[0])
    nb.sandwiched = _graph_sandwiched(graph, cand, exit_, fm, max_hops)
    if typ in fm.reshape:
        beyond = walk(graph, cand, "down" if exit_ else "up", fm.transparent | fm.reshape, max_hops)
        if beyond:
            nb.beyond_name, nb.beyond_type = beyond[0], node_type(graph, beyond[0])
            nb.beyond_boundary = all(node_type(graph, b) in fm.boundary for b in beyond)
            for b in beyond:
                btype = node_type(graph, b)
                if fm.is_conversion(btype, b):
                    s, d = _conv_formats(graph, b)
                    if fm.family(d if exit_ else s):
                        nb.beyond_heavy = True
                elif _heavy_formats(graph, b, side, fm):
                    nb.beyond_heavy = True
    return nb


def _graph_sandwiched(graph: ModelGraph, start: str, exit_: bool, fm: Formats, max_hops: int) -> bool:
    """Within ``max_hops`` ops past ``start`` (downstream for exits, upstream for entries), does the tensor
    meet a private format again: a conversion into (out of) one, or an op taking (giving) one?"""
    def goes_on(m: str) -> bool:  # conversions and format boundaries end the walk
        mtype = node_type(graph, m)
        return not fm.is_conversion(mtype, m) and mtype not in fm.boundary

    for m in reach(graph, start, "down" if exit_ else "up", max_hops, goes_on):
        if fm.is_conversion(node_type(graph, m), m):
            s, d = _conv_formats(graph, m)
            if fm.family(d if exit_ else s):
                return True
        elif _heavy_formats(graph, m, "in" if exit_ else "out", fm):
            return True
    return False


def graph_roundtrips(graph: ModelGraph, fm: Formats, max_between: int) -> list[RoundTrip]:
    out: list[RoundTrip] = []
    seen: set[tuple[str, str]] = set()
    convs = sorted((n for n, d in graph.g.nodes(data=True) if fm.is_conversion(str(d.get("type", "")), n)),
                   key=lambda n: (graph.node(n).get("id") or 0, n))
    for first in convs:
        src, dst = _conv_formats(graph, first)
        if fm.key(src) == fm.key(dst):
            continue
        frontier: list[tuple[str, list[str]]] = [(first, [])]
        while frontier:
            node, path = frontier.pop()
            for m in graph.data_successors(node):
                mtype = node_type(graph, m)
                if fm.is_conversion(mtype, m):
                    s2, d2 = _conv_formats(graph, m)
                    solid = [p for p in path if node_type(graph, p) not in fm.transparent]
                    if (fm.key(s2) == fm.key(dst) and fm.key(d2) == fm.key(src)
                            and (not solid or fm.family(src)) and (first, m) not in seen):
                        seen.add((first, m))
                        exact = (node_shapes(graph, first, "in")[:1] == node_shapes(graph, m, "out")[:1])
                        out.append(RoundTrip(first=first, second=m, outer=src, inner=dst,
                                             between=[(p, node_type(graph, p)) for p in path], exact=exact,
                                             occurrences=1))
                    continue
                if mtype in fm.transparent or mtype in fm.agnostic:
                    solid = [p for p in path if node_type(graph, p) not in fm.transparent]
                    if len(solid) + (mtype not in fm.transparent) <= max_between:
                        frontier.append((m, [*path, m]))
    return out


# ---------------------------------------------------------------------------------------------------------
# the knowledge base
# ---------------------------------------------------------------------------------------------------------
@dataclass
class _Scan:
    """Every conversion traced to its cause, once per run. Each conversion row belongs to one cause: a round trip
    (both of its conversions), else its category's site; ``all_sites`` also holds the unavoidable ones.
    ``conversions``: their count and its basis (:func:`_count_conversions`); the profile view is not kept."""

    sites: list[Site]
    trips: list[RoundTrip]
    all_sites: list[Site]
    conversions: tuple[int, str]
    window: float
    policy: dict[str, Any]


def _scan(ctx: AnalysisContext) -> _Scan:
    rules = ctx.rules
    fm = Formats(rules)
    ops = ctx.profile.ops
    max_hops, max_between = int(rules["max_hops"]), int(rules["roundtrip_max_between"])
    view = ProfileView(ops, fm) if len(ops) else None
    prof_trips, trip_rows = profile_roundtrips(view, fm, max_between) if view is not None else ([], None)
    if ctx.graph is not None:
        gsites = graph_sites(ctx.graph, fm, max_hops)
        prof_sites = profile_sites(view, fm, max_hops) if view is not None else []
        _attach_times(gsites, prof_sites)
        in_graph = {s.name for s in gsites}
        trips = graph_roundtrips(ctx.graph, fm, max_between)
        _attach_trip_times(trips, prof_sites)
        trips += [t for t in prof_trips if t.first not in in_graph]
        in_trips = {n for t in trips for n in (t.first, t.second)}
        # conversions the graph does not hold (e.g. single-op launches): the profile's classification
        extra = profile_sites(view, fm, max_hops, trip_rows) if view is not None else []
        sites = [x for x in gsites if x.name not in in_trips] + [x for x in extra if x.name not in in_graph]
        all_sites = gsites + [x for x in prof_sites if x.name not in in_graph]
    else:
        all_sites = profile_sites(view, fm, max_hops) if view is not None else []
        sites = profile_sites(view, fm, max_hops, trip_rows) if view is not None else []
        trips = prof_trips
        if all_sites:
            ctx.note("transdata: no model graph (--graph); conversions were traced to the neighbouring ops on the "
                     "same stream, confirmed by tensor shapes")
    return _Scan(sites, trips, all_sites, _count_conversions(view, all_sites),
                 window_us(ctx.profile) if len(ops) else 0.0, _format_policy(ctx, view, all_sites))


class TransDataKB(KnowledgeBase):
    """Causes: each TransData site (by category and the op type forcing it) and each kind of round trip; the
    conversion count is their symptom. A conversion row is claimed by one cause only."""

    id = "transdata"
    title = "TransData format conversions"
    version = "1.1.0"
    api_version = "1.5"
    requires = ()
    requires_any = ("ops", "graph")
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "transdata"

    def _scan(self, ctx: AnalysisContext) -> _Scan:
        if getattr(self, "_cached", None) is None:
            self._cached = _scan(ctx)
        return self._cached

    @rule(RuleDoc(
        id="transdata.format-policy",
        explains=_removes_transdata(
            count="the conversions the policy change removes are among those counted: they go with it",
            ops="the run-wide change removes these TransData ops"),
        title="The run's format policy forces the conversions (torch_npu eager mode)",
        what="In a torch_npu eager run, the conversions one run-wide change removes, whatever op they sit beside. "
             "Private formats not kept between ops (weights converted to FRACTAL_Z at run time): every round trip "
             "(X -> Y ... Y -> X, at most {roundtrip_max_between} elementwise ops between) and every conversion "
             "around an op working in a plain format between private-format ops -- graph mode keeps the private "
             "format along the chain. Private formats kept between ops: the conversions around ops without a "
             "5HD/NZ kernel (not {format_agnostic_types}) and around view ops ({reshape_types}) -- "
             "allow_internal_format = False. One finding per change; a conversion it holds is neither a round "
             "trip nor a site of the other transdata rules, so it is counted once.",
        why="An eager op takes and returns its own layout: a conv returns NC1HWC0 that the next op converts back to "
            "NCHW, and the op after that converts it to NC1HWC0 again. The op between is not the cause -- each "
            "op of the chain would force the same pair -- so naming it (one finding per op beside the conversion) "
            "splits one cause into several findings with one fix. Saving: both conversions of a round trip that "
            "cancels exactly (the cheaper one when the shapes differ); of a conversion beside a plain-format op "
            "{saving_fraction.Ops_Not_Support_Heavy_Format} of its time, beside a view op "
            "{saving_fraction.Reshape_Ops_Interrupts_Format}.",
        how_to_fix="Private formats not kept: compile the model with torchair (graph mode): GE keeps the private "
                   "format along the chain and drops the conversions. Private formats kept and reaching ops without "
                   "a 5HD/NZ kernel: torch.npu.config.allow_internal_format = False, and measure.",
        thresholds=("roundtrip_max_between", "saving_fraction", "format_agnostic_types", "reshape_types",
                    "confidence", *_THRESHOLDS_COMMON),
        needs=("ops",),
        role="cause",
    ))
    def check_policy(self, ctx: AnalysisContext) -> Iterable[Finding]:
        scan = self._scan(ctx)
        groups: dict[str, tuple[list[Site], list[RoundTrip]]] = {}
        for x in scan.sites:
            if x.category in CATEGORY_RULES and (change := policy_fix(scan.policy, x)):
                groups.setdefault(change, ([], []))[0].append(x)
        for t in scan.trips:
            if change := policy_fix(scan.policy):
                groups.setdefault(change, ([], []))[1].append(t)
        for change, (sites, trips) in groups.items():
            yield self._policy_finding(ctx, scan, change, sites, trips)

    def _policy_finding(self, ctx: AnalysisContext, scan: _Scan, change: str, sites: list[Site],
                        trips: list[RoundTrip]) -> Finding:
        rules = ctx.rules
        fractions = rules["saving_fraction"]
        by_op: dict[str, float] = defaultdict(float)
        for x in sites:
            by_op[x.name] += x.total_us * float(fractions[x.category])
        for op, us in _trip_savings(trips).items():
            by_op[op] += us
        by_op = {k: v for k, v in by_op.items() if v > 0}
        saving = sum(by_op.values())
        forcing: dict[str, list[str]] = defaultdict(list)
        for x in sites:
            if x.forcing_op and x.forcing_op not in forcing[str(x.forcing_type)]:
                forcing[str(x.forcing_type)].append(x.forcing_op)
        between = sorted({ty for t in trips for _, ty in t.between})
        rows = ([[f"{t.first} > {t.second}", f"{t.outer}->{t.inner}->{t.outer}",
                  "round trip " + (f"around {', '.join(ty for _, ty in t.between)}" if t.between else "back to back"),
                  "yes" if t.exact else "no (shape differs)", t.occurrences, round(t.saving_us, 3)]
                 for t in sorted(trips, key=lambda t: -t.saving_us)]
                + [[x.name, f"{x.src}->{x.dst}", f"{x.category}: {x.reason}", "", x.tasks,
                    round(x.total_us * float(fractions[x.category]), 3)] for x in sorted(sites, key=lambda x: -x.total_us)])
        ops = list(dict.fromkeys([n for t in trips for n in (t.first, t.second)] + [x.name for x in sites]))
        names = _names(forcing)
        where = ([f"around {', '.join(between)}"] if between else []) \
            + (["back to back"] if any(not t.between for t in trips) else []) \
            + ([f"beside {', '.join(forcing)}"] if forcing else [])
        counts = " and ".join(c for c in (f"{len(trips)} round trip(s)" if trips else "",
                                          f"{len(sites)} conversion(s)" if sites else "") if c)
        if change == GRAPH_MODE:
            title = f"{counts} forced by eager mode's plain formats between ops ({', '.join(where)})"
            said = []
            if trips:
                said.append(f"{len(trips)} round trip(s) take a tensor out of its private format and back "
                            f"({', '.join(w for w in where if not w.startswith('beside'))})")
            if sites:
                said.append(f"{len(sites)} conversion(s) bracket ops working in a plain format between "
                            f"private-format ops ({names})")
            rec, fix = _torchair_fix(" and ".join(said) + ".")
        else:
            title = f"{counts} where private formats kept in eager mode reach ops without a 5HD/NZ kernel ({names})"
            rec, fix = _internal_format_off(f"These ops run in a plain format between private-format ops and force "
                                            f"the conversions: {names}.")
        timed = saving > 0
        confidences = [float(rules["confidence"]["roundtrip"])] if trips else []
        confidences += [float(rules["confidence"][x.basis]) for x in sites]
        return ctx.finding(
            rule="transdata.format-policy",
            title=title,
            severity=severity_for(saving / scan.window, rules["severity"]) if scan.window and timed else "info",
            ops=ops,
            evidence={"change": change, "format_policy": dict(scan.policy), "round_trips": len(trips),
                      "sites": len(sites), "between_types": between, "forcing_ops": dict(forcing),
                      "transdata_us": sum(x.total_us for x in sites) + sum(t.first_us + t.second_us for t in trips),
                      "context": context_of(ctx),
                      "table": table(["transdata", "conversion", "cause", "exact inverse", "tasks", "saving_us"],
                                     rows)},
            estimated_saving_us=saving,
            basis="round trips: both conversions' measured time for exact inverses, the cheaper one when the shapes "
                  "differ; other conversions: saving_fraction of their category; each conversion counted by this "
                  "finding only" if timed else "no timing (graph only)",
            recommendation=rec,
            fix=fix,
            confidence=min(confidences),
            saving_by_op=by_op,
        )

    @rule(RuleDoc(
        id="transdata.unsupported-format",
        explains=_removes_transdata(
            count="the conversions this op forces are among those counted: they go with it",
            ops="removing the forced conversion removes the TransData op"),
        title="Op without a 5HD/NZ implementation forces conversions (Ops_Not_Support_Heavy_Format)",
        what="TransData whose consumer (private -> plain) or producer (plain -> private) is a compute op working in "
             "ND/NCHW between private-format ops, found in the graph (walking through {transparent_types}) or, "
             "without a graph, as the adjacent op on the same stream whose tensor shape matches. One finding per "
             "forcing op type.",
        why="Every such op costs a conversion into and out of the plain format around it; replacing it with an op "
            "that has an NC1HWC0/FRACTAL_NZ kernel removes both ({saving_fraction.Ops_Not_Support_Heavy_Format} "
            "of their time is counted).",
        how_to_fix="Replace the named op with one that supports NC1HWC0/FRACTAL_NZ, or move it before the first / "
                   "after the last private-format op. Elementwise ops ({format_agnostic_types}) support every "
                   "format: their plain placement comes from the format policy -- in a graph keep the op's other "
                   "inputs the same rank/format so the format propagates; in torch_npu eager mode either compile "
                   "the model with torchair (graph mode keeps private formats along the chain) or, where private "
                   "formats are kept and leak into ops without a 5HD/NZ kernel, set "
                   "torch.npu.config.allow_internal_format = False, as the finding says.",
        thresholds=("saving_fraction", "format_agnostic_types", "boundary_types", "confidence",
                    *_THRESHOLDS_COMMON),
        needs=("ops", "graph"),
        role="cause",
    ))
    @rule(RuleDoc(
        id="transdata.reshape-interrupts",
        explains=_removes_transdata(
            count="the conversions around the reshape are among those counted: they go with it",
            ops="moving the reshape removes the TransData ops around it"),
        title="Reshape/Flatten/Transpose between private-format ops (Reshape_Ops_Interrupts_Format)",
        what="TransData forced by a view op ({reshape_types}) that sits between two ops working in private formats. "
             "One finding per view op type.",
        why="View ops run on plain layouts, so the tensor goes private -> ND -> view -> ND -> private "
            "({saving_fraction.Reshape_Ops_Interrupts_Format} of the conversions' time is counted).",
        how_to_fix="Remove the view between the convs or move it after the last one (e.g. flatten once before the "
                   "classifier) in the model; in PyTorch code make the tensor contiguous with .contiguous() right "
                   "after a permute/transpose so later ops do not re-convert it.",
        thresholds=("reshape_types", "saving_fraction", "confidence", *_THRESHOLDS_COMMON),
        needs=("ops", "graph"),
        role="cause",
    ))
    @rule(RuleDoc(
        id="transdata.5hd-nz",
        explains=_removes_transdata(
            count="the 5HD<->NZ conversions are among those counted",
            ops="keeping one format removes the TransData op"),
        title="Conversion between NC1HWC0 and FRACTAL_NZ (Transform_Between_5HD_And_NZ)",
        what="TransData converting a feature map between the conv format (5HD) and the matmul format (NZ), "
             "directly or through a plain format. One finding per op type that wants the other format.",
        why="The chain switches private format, usually at a conv -> MatMul/Gemm boundary, costing one or two "
            "full-tensor conversions; at best one direct conversion remains "
            "({saving_fraction.Transform_Between_5HD_And_NZ} of their time is counted).",
        how_to_fix="Keep one private format along the chain: e.g. express the fully connected layer after a conv as "
                   "a 1x1 Conv2D (stays in NC1HWC0), or keep the matmul chain in ND/NZ end to end.",
        thresholds=("format_families", "saving_fraction", "confidence", *_THRESHOLDS_COMMON),
        needs=("ops", "graph"),
        role="cause",
    ))
    def check_sites(self, ctx: AnalysisContext) -> Iterable[Finding]:
        scan = self._scan(ctx)
        mine = [x for x in scan.sites if x.category in CATEGORY_RULES and policy_fix(scan.policy, x) is None]
        hops = _hops(mine, Formats(ctx.rules))
        groups: dict[tuple[str, str], list[Site]] = defaultdict(list)
        for x in mine:
            groups[(x.category, hops.get(x.name, x.forcing_type or ""))].append(x)
        order = sorted(groups.items(), key=lambda kv: -sum(x.total_us for x in kv[1]))
        for (category, forcing_type), sites in order:
            yield self._site_finding(ctx, scan, category, forcing_type, sites)

    def _site_finding(self, ctx: AnalysisContext, scan: _Scan, category: str, forcing_type: str,
                      sites: list[Site]) -> Finding:
        rules = ctx.rules
        frac = float(rules["saving_fraction"][category])
        by_op: dict[str, float] = defaultdict(float)
        for x in sites:
            by_op[x.name] += x.total_us * frac
        saving = sum(by_op.values())
        forcing: dict[str, list[str]] = defaultdict(list)
        for x in sites:
            if x.forcing_op and x.forcing_op not in forcing[str(x.forcing_type)]:
                forcing[str(x.forcing_type)].append(x.forcing_op)
        rows = [[x.name, f"{x.src}->{x.dst}", _forcing(x), x.forcing_format or "", x.reason, x.tasks,
                 round(x.total_us, 3), round(x.total_us * frac, 3)] for x in sorted(sites, key=lambda x: -x.total_us)]
        total = sum(x.total_us for x in sites)
        timed = total > 0
        recommendation, fix = _site_advice(ctx, scan, category, sites, forcing)
        what = f"forced by {forcing_type}" if forcing_type else "at a 5HD/NZ boundary"
        return ctx.finding(
            rule=CATEGORY_RULES[category],
            title=f"{len(sites)} TransData {what} ({category})",  # no per-rank figure: ranks of one job merge
            severity=severity_for(saving / scan.window, rules["severity"]) if scan.window and timed else "info",
            ops=list(dict.fromkeys(x.name for x in sites)),
            evidence={"category": category, "forcing_type": forcing_type or None, "forcing_ops": dict(forcing),
                      "transdata_us": total, "saving_fraction": frac, "context": context_of(ctx),
                      "table": table(["transdata", "conversion", "forced by", "its format", "why", "tasks",
                                      "total_us", "saving_us"], rows)},
            estimated_saving_us=saving,
            basis=f"{frac:.0%} of the conversions' measured time (saving_fraction.{category}); each conversion "
                  "counted by one finding" if timed else "no timing (graph only)",
            recommendation=recommendation,
            fix=fix,
            confidence=min(float(rules["confidence"][x.basis]) for x in sites),
            saving_by_op={k: v for k, v in by_op.items() if v > 0},
        )

    @rule(RuleDoc(
        id="transdata.roundtrip",
        explains=_removes_transdata(
            count="the cancelling conversions are among those counted: both go",
            ops="the round trip's TransData ops are removed"),
        title="Redundant format round trip (A -> B -> A)",
        what="Two conversions that undo each other: X -> Y followed by Y -> X with nothing, pass-through ops or "
             "elementwise ops between (at most {roundtrip_max_between}; e.g. NC1HWC0 -> NCHW -> Relu -> NC1HWC0, "
             "or a TransData pair that cancels), found on graph edges or consecutive profile rows with matching "
             "shapes. One finding for the pairs that cancel outright, one per kind of op between.",
        why="Both conversions are pure overhead: the ops between them could run in the outer format.",
        how_to_fix="Keep the tensor in the outer format: remove what makes the pair (in an ONNX model `advisor fix "
                   "--apply remove-roundtrips` removes cancelling Cast/Transpose/Reshape pairs), let the elementwise "
                   "ops between run in the private format (graph: keep their other inputs the same rank/format; "
                   "torch_npu eager: compile with torchair), keep formats consistent.",
        thresholds=("roundtrip_max_between", "format_agnostic_types", "confidence", *_THRESHOLDS_COMMON),
        needs=("ops", "graph"),
        role="cause",
    ))
    def check_roundtrips(self, ctx: AnalysisContext) -> Iterable[Finding]:
        scan = self._scan(ctx)
        groups: dict[tuple[str, ...], list[RoundTrip]] = defaultdict(list)
        for t in scan.trips:
            if policy_fix(scan.policy) is None:
                groups[tuple(sorted({ty for _, ty in t.between}))].append(t)
        for between, trips in sorted(groups.items(), key=lambda kv: -sum(t.saving_us for t in kv[1])):
            yield self._roundtrip(ctx, scan, between, trips)

    def _roundtrip(self, ctx: AnalysisContext, scan: _Scan, between: tuple[str, ...],
                   trips: list[RoundTrip]) -> Finding:
        by_op = _trip_savings(trips)
        saving = sum(by_op.values())
        rows = [[t.first, t.second, f"{t.outer}->{t.inner}->{t.outer}",
                 " > ".join(f"{n} ({ty})" for n, ty in t.between) or "(nothing)",
                 "yes" if t.exact else "no (shape differs)", t.occurrences, round(t.saving_us, 3)]
                for t in sorted(trips, key=lambda t: -t.saving_us)]
        ops = list(dict.fromkeys([n for t in trips for n in (t.first, t.second)]))
        timed = saving > 0
        rec, fix = _roundtrip_advice(ctx, scan, between, trips, ops)
        what = f"around {', '.join(between)}" if between else "that cancel"
        return ctx.finding(
            rule="transdata.roundtrip",
            title=f"{len(trips)} format round trip(s) {what}",
            severity=severity_for(saving / scan.window, ctx.rules["severity"]) if scan.window and timed else "info",
            ops=ops,
            evidence={"round_trips": len(trips), "between_types": list(between), "context": context_of(ctx),
                      "table": table(["first", "second", "formats", "between", "exact inverse", "occurrences",
                                      "saving_us"], rows)},
            estimated_saving_us=saving,
            basis="both conversions' measured time for exact inverses; the cheaper one when the shapes differ "
                  "(a direct conversion would remain)" if timed else "no timing (graph only)",
            recommendation=rec,
            fix=fix,
            confidence=float(ctx.rules["confidence"]["roundtrip"]),
            saving_by_op=by_op,
        )

    @rule(RuleDoc(
        id="transdata.count",
        title="Too many format conversions (TransData)",
        what="Counts the format-conversion ops ({format_op_types}, and Transpose ops GE inserted for layout) per "
             "step -- or distinct conversion sites when the profile has no steps -- and lists each with its "
             "category and the op that forces it. Fires above {max_count} (msprof rule_transData_1: 2), or when "
             "avoidable conversions (not Other_Transform) exceed {max_share} of the analyzed time, and only when "
             "some conversion is avoidable. Named on the avoidable conversions, so the site and round-trip "
             "findings on them explain it; a count carries no saving of its own (theirs is counted once).",
        why="A TransData moves the whole tensor through memory without computing anything; a few are unavoidable "
            "(model input/output, weights), more than that usually means a format chain is broken by one op. "
            "msprof's own summary only says 'please check and reduce the transData'.",
        how_to_fix="Follow the site and round-trip findings (transdata.unsupported-format, "
                   "transdata.reshape-interrupts, transdata.5hd-nz, transdata.roundtrip): each names the op to "
                   "change. Other_Transform conversions (input, output, weights) are expected and need no action.",
        thresholds=("max_count", "max_share", "saving_fraction", "confidence", *_THRESHOLDS_COMMON),
        needs=("ops",),
        role="symptom",
    ))
    def check_count(self, ctx: AnalysisContext) -> Iterable[Finding]:
        scan = self._scan(ctx)
        rules = ctx.rules
        fractions = rules["saving_fraction"]
        claimed: dict[str, float] = defaultdict(float)
        for x in scan.sites:
            if x.category in CATEGORY_RULES:
                claimed[x.name] += x.total_us * float(fractions[x.category])
        for op, us in _trip_savings(scan.trips).items():
            claimed[op] += us
        names = list(dict.fromkeys([x.name for x in scan.sites if x.category in CATEGORY_RULES]
                                   + [n for t in scan.trips for n in (t.first, t.second)]))
        if not names:
            return
        window = scan.window
        all_sites = scan.all_sites
        total_us = sum(x.total_us for x in all_sites)
        avoidable_us = sum(claimed.values())
        avoidable_share = avoidable_us / window if window else 0.0
        count, basis = scan.conversions
        if count <= int(rules["max_count"]) and avoidable_share <= float(rules["max_share"]):
            return
        cats: dict[str, int] = defaultdict(int)
        for x in all_sites:
            cats[x.category] += 1
        rows = [[x.name, f"{x.src}->{x.dst}", x.category, _forcing(x), x.tasks, round(x.total_us, 3)]
                for x in sorted(all_sites, key=lambda x: -x.total_us)]
        summary = ", ".join(f"{n} {c}" for c, n in sorted(cats.items(), key=lambda x: -x[1]))
        yield ctx.finding(
            rule="transdata.count",
            title=f"{count} format conversions ({basis})",
            severity="info",
            ops=names,
            evidence={"count": count, "count_basis": basis, "max_count": int(rules["max_count"]),
                      "transdata_us": total_us, "share_of_window": total_us / window if window else 0.0,
                      "avoidable_us": avoidable_us, "avoidable_share": avoidable_share, "window_us": window,
                      "categories": dict(cats),
                      "table": table(["op", "conversion", "category", "forced by", "tasks", "total_us"], rows)},
            estimated_saving_us=0.0,
            basis="a count, not a saving: the site and round-trip findings on these conversions carry the time "
                  f"their fixes recover ({avoidable_us:.1f} µs in all, each conversion counted once); "
                  "Other_Transform conversions count as unavoidable",
            recommendation=f"Conversions by category: {summary}. The site and round-trip findings name what forces "
                           "the avoidable ones; conversions of the model input/output and of weights are expected.",
            confidence=float(rules["confidence"]["count"]),
        )


# ---------------------------------------------------------------------------------------------------------
# helpers
# ---------------------------------------------------------------------------------------------------------
def _hops(sites: list[Site], fm: Formats) -> dict[str, str]:
    """The two conversions of a 5HD <-> NZ switch through a plain format are one cause (the boundary between the op
    wanting one private format and the op wanting the other), though each names the op on the other side: per
    conversion of such a hop, the forcing op types of its hop (the partner conversion itself only when the profile
    shows nothing past it), joined."""
    root: dict[str, str] = {}

    def find(n: str) -> str:
        while root.setdefault(n, n) != n:
            n = root[n]
        return n

    for x in sites:
        if x.category == HD_NZ and x.partner:
            root[find(x.name)] = find(x.partner)
    types: dict[str, set[str]] = defaultdict(set)
    for x in sites:
        if x.category == HD_NZ and x.forcing_type:
            types[find(x.name)].add(x.forcing_type)
    out = {}
    for x in sites:
        if x.category == HD_NZ and x.name in root:
            hop = types[find(x.name)]
            named = {t for t in hop if not fm.is_conversion(t, "")} or hop
            out[x.name] = " and ".join(sorted(named))
    return out


def _forcing(s: Site) -> str:
    return f"{s.forcing_op} ({s.forcing_type})" if s.forcing_op else ""


def _attach_times(sites: list[Site], prof_sites: list[Site]) -> None:
    times: dict[str, tuple[float, int]] = {}
    for p in prof_sites:
        t, n = times.get(p.name, (0.0, 0))
        times[p.name] = (t + p.total_us, n + p.tasks)
    for s in sites:
        s.total_us, s.tasks = times.get(s.name, (0.0, 0))


def _attach_trip_times(trips: list[RoundTrip], prof_sites: list[Site]) -> None:
    times: dict[str, tuple[float, int]] = {}
    for p in prof_sites:
        t, n = times.get(p.name, (0.0, 0))
        times[p.name] = (t + p.total_us, n + p.tasks)
    for t in trips:
        t.first_us, n1 = times.get(t.first, (0.0, 0))
        t.second_us, n2 = times.get(t.second, (0.0, 0))
        t.occurrences = max(n1, n2, 1)


def _trip_savings(trips: list[RoundTrip]) -> dict[str, float]:
    out: dict[str, float] = defaultdict(float)
    for t in trips:
        if t.exact:
            out[t.first] += t.first_us
            out[t.second] += t.second_us
        else:
            cheaper, us = (t.first, t.first_us) if t.first_us <= t.second_us else (t.second, t.second_us)
            out[cheaper] += us
    return {k: v for k, v in out.items() if v > 0}


def _count_conversions(view: ProfileView | None, sites: list[Site]) -> tuple[int, str]:
    """Conversions per step when steps are known (msprof's rule counts a profile of one iteration); else
    distinct sites (name + shapes), so a profile of many inferences is not counted many times over."""
    if view is not None and view.conv.any():
        steps = view.conv_steps
        if steps.notna().any():
            return int(steps.value_counts().max()), "per step"
    distinct = {(s.name, s.in_shape, s.out_shape) for s in sites}
    return len(distinct), "distinct sites"


def _from_onnx(graph: ModelGraph | None) -> bool:
    if graph is None:
        return False
    if graph.format == "onnx":
        return True
    fw = str(graph.attrs.get("framework_type", ""))
    cmd = str(graph.attrs.get("atc_cmdline", ""))
    return fw in ("5", "Onnx", "ONNX") or "--framework=5" in cmd


# ---------------------------------------------------------------------------------------------------------
# advice, fitted to the run (advisor.toolkit.advice)
# ---------------------------------------------------------------------------------------------------------
_TORCHAIR = ("import torchair\nfrom torchair.configs.compiler_config import CompilerConfig\n"
             "npu_backend = torchair.get_npu_backend(compiler_config=CompilerConfig())\n"
             "model = torch.compile(model, backend=npu_backend)  # GE keeps private formats along the chain")


def _format_policy(ctx: AnalysisContext, view: ProfileView | None, sites: list[Site]) -> dict[str, Any]:
    """How a torch_npu eager run treats private formats, read from its conversions: weights converted to
    FRACTAL_Z at run time mean private formats are not kept between ops; none means they are kept (and may leak
    into ops without a 5HD/NZ kernel)."""
    if context_of(ctx) != "torch-eager" or view is None:
        return {"eager": False}
    return {"eager": True, "internal_kept": not any(x.weight and x.tasks > 0 for x in sites)}


GRAPH_MODE = "graph-mode"
INTERNAL_FORMAT_OFF = "internal-format-off"


def policy_fix(policy: Mapping[str, Any], site: Site | None = None) -> str | None:
    """The run-wide change that removes a conversion when the run's format policy forces it (torch_npu eager mode),
    else None (the op beside it is the cause): ``GRAPH_MODE`` (torchair) when private formats are not kept between
    ops -- every round trip (``site`` None) and every conversion around a plain-format op -- or around an
    elementwise op; ``INTERNAL_FORMAT_OFF`` when kept private formats reach an op without a 5HD/NZ kernel or a view
    op. The same choice as the advice of :func:`_site_advice` and :func:`_roundtrip_advice`."""
    if not policy.get("eager"):
        return None
    if site is None:
        return GRAPH_MODE
    if site.category == NOT_SUPPORT:
        return GRAPH_MODE if site.agnostic or not policy.get("internal_kept") else INTERNAL_FORMAT_OFF
    if site.category == RESHAPE and policy.get("internal_kept"):
        return INTERNAL_FORMAT_OFF
    return None


def _torchair_fix(why: str) -> tuple[str, Fix]:
    rec = (f"{why} In torch_npu eager mode each op takes and returns its own layout, so these conversions stay; "
           "compiled with torchair (graph mode), GE keeps the private format along the chain and drops them.")
    return rec, Fix("code", "compile the model with torchair (graph mode) so GE keeps private formats between ops",
                    {"snippet": _TORCHAIR})


def _internal_format_off(why: str) -> tuple[str, Fix]:
    rec = (f"{why} This eager run keeps private formats between ops and they reach ops without a 5HD/NZ kernel: "
           "set torch.npu.config.allow_internal_format = False so tensors stay in plain formats between ops, and "
           "measure.")
    return rec, Fix("code", "set torch.npu.config.allow_internal_format = False (torch_npu eager) and re-profile",
                    {"setting": "torch.npu.config.allow_internal_format", "value": False,
                     "snippet": "import torch_npu\ntorch.npu.config.allow_internal_format = False"})


def _names(forcing: Mapping[str, list[str]]) -> str:
    return "; ".join(f"{t}: {', '.join(ops[:3])}{' ...' if len(ops) > 3 else ''}" for t, ops in forcing.items())


def _site_advice(ctx: AnalysisContext, scan: _Scan, category: str, sites: list[Site],
                 forcing: Mapping[str, list[str]]) -> tuple[str, Fix]:
    fam = family(ctx)
    policy = scan.policy
    names = _names(forcing)
    model = "in the model before ATC conversion" if fam == "om" else "in the model"
    if category == NOT_SUPPORT:
        agnostic = all(x.agnostic for x in sites)
        why = (f"These ops run in a plain format between private-format ops and force the conversions: {names}.")
        if policy.get("eager"):
            if agnostic or not policy.get("internal_kept"):
                return _torchair_fix(why + (" They are elementwise ops with kernels for every format." if agnostic
                                            else ""))
            return _internal_format_off(why)
        if agnostic:
            rec = (f"{why} They are elementwise ops with kernels for every format: their plain placement comes from "
                   "their other inputs -- keep those the same rank and format (no ND constant or tensor of another "
                   f"rank broadcast into them) {model} so the private format propagates through them.")
            return rec, Fix("code", f"let {', '.join(forcing)} run in the private format",
                            {"forcing_ops": dict(forcing),
                             "snippet": "# give the elementwise op inputs of the same rank/format (e.g. a (1,C,1,1) "
                                        "constant instead of a (C,) vector) so it runs in NC1HWC0"})
        rec = (f"{why} Replace them {model} with ops that have an NC1HWC0/FRACTAL_NZ kernel, or move them before "
               "the first / after the last private-format op.")
        return rec, Fix("code", f"replace or move the ops forcing plain formats ({', '.join(forcing)})",
                        {"forcing_ops": dict(forcing),
                         "snippet": "# replace the op with one supporting NC1HWC0/FRACTAL_NZ or move it out of the "
                                    "conv/matmul chain; keep its other inputs 4D so the format propagates"})
    if category == RESHAPE:
        why = f"View ops between private-format ops force conversions out and back: {names}."
        if policy.get("eager") and policy.get("internal_kept"):
            return _internal_format_off(why)
        rec = (f"{why} Remove the view between the convs or move it after the last one {model} (e.g. flatten once "
               "before the classifier)"
               + ("; call .contiguous() right after permute/transpose so later ops do not re-convert." if fam == "torch"
                  else "."))
        snippet = ("x = x.permute(0, 2, 3, 1).contiguous()  # materialize once, or reshape after the last conv"
                   if fam == "torch" else "# move the Reshape/Flatten/Transpose after the last conv of the chain")
        return rec, Fix("code", f"move or remove the view ops ({', '.join(forcing)}) between private-format ops",
                        {"forcing_ops": dict(forcing), "snippet": snippet})
    rec = (f"The tensor switches between NC1HWC0 and FRACTAL_NZ ({names or 'conv -> matmul boundary'}). Keep one "
           f"private format along the chain {model}: express the fully connected layer after a conv as a 1x1 Conv2D "
           "(stays in NC1HWC0), or keep the matmul chain in ND/NZ end to end.")
    snippet = ("fc = nn.Conv2d(in_features, out_features, kernel_size=1)  # instead of nn.Linear after global "
               "pooling; flatten the output afterwards" if fam == "torch" else
               "# a 1x1 Conv (weights reshaped to (out, in, 1, 1)) instead of the MatMul/Gemm after the conv")
    return rec, Fix("code", "keep one private format: 1x1 Conv2D instead of MatMul/Gemm after the conv",
                    {"forcing_ops": dict(forcing), "snippet": snippet})


def _roundtrip_advice(ctx: AnalysisContext, scan: _Scan, between: tuple[str, ...], trips: list[RoundTrip],
                      ops: list[str]) -> tuple[str, Fix]:
    outer = trips[0].outer
    if between:
        why = (f"{len(trips)} round trip(s) convert a tensor out of {outer} and straight back around elementwise "
               f"ops ({', '.join(between)}), which have kernels for every format, so the tensor can stay in {outer}.")
    else:
        why = f"{len(trips)} round trip(s) convert a tensor and convert it straight back: the pair cancels."
    if scan.policy.get("eager"):
        return _torchair_fix(why)
    if not between and _from_onnx(ctx.graph):
        rec = (f"{why} The pair comes from ops of the ONNX model that change nothing (a Cast, Transpose or Reshape "
               "and its inverse, or a same-shape Reshape): remove them -- `advisor fix model.onnx --apply "
               "remove-roundtrips` removes such pairs -- rebuild, and check that the pair is gone.")
        return rec, Fix("onnx-rewrite", "remove the cancelling pairs from the ONNX model", {"rule": "remove-roundtrips"},
                        "advisor fix model.onnx --apply remove-roundtrips -o fixed.onnx")
    middle = ", ".join(between) or "the pair"
    rec = (f"{why} Keep the tensor in {outer} across {middle}: remove the op that makes the pair, or give the ops "
           "between inputs of the same rank and format so the private format propagates.")
    return rec, Fix("code", f"keep the tensor in its outer format across {middle}",
                    {"ops": ops, "between_types": list(between),
                     "snippet": "# keep the ops between the conversions in the private format: avoid broadcasting "
                                "an ND constant/tensor of another rank into them, or move them after the chain"})


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [TransDataKB]
