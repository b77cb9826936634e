"""aipp-fusion: image preprocessing on the device that static AIPP would do inside the first convolution.

Between a model input (``Data``) and its first convolution, models often run Cast (uint8 -> fp16/fp32),
TransData (NCHW -> NC1HWC0 of the input), Transpose (NHWC -> NCHW), the mean/std normalization
(Sub/Mul/Div) and a channel swap (RGB <-> BGR) as separate kernels. Static AIPP (``atc --insert_op_conf``)
takes the uint8 image and does all of that in the first convolution (TbeAippConv* UB passes).

With a graph the walk goes from each input through absorbable ops only, to the first convolution; the
normalization constants are composed into one per-channel affine map ``y = a x + b`` where the graph keeps
them (Const values, Muls/Adds attributes), giving ``var_reci_chn = a`` and ``mean_chn + min_chn = -b / a``.
Without a graph, the preprocessing is the run of such ops right before the first convolution of each
iteration in the profile (lower confidence, constants unknown).
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection, canonical_format, parse_list, parse_shapes
from advisor.toolkit.advice import context_of
from advisor.toolkit.graph_patterns import (
    atc_cmdline,
    const_values,
    data_digraph,
    desc_bytes,
    per_name,
    scalar_attr,
    severity_for,
    stream_order,
)
from advisor.toolkit.time import window_us

if TYPE_CHECKING:
    import networkx as nx

CONFIG_FILE = "aipp.cfg"
_NORMALIZE_ROLES = ("subtract", "add", "multiply", "divide", "power")
_SCALAR_VALUE_KEYS = ("value", "scalar", "alpha")

_WHY = (
    "Each of these ops is a separate kernel that reads and writes the full input image (often in fp32), before the "
    "first convolution starts. Static AIPP reads the uint8 image once and converts, normalizes and swaps channels "
    "inside the first convolution (TbeAippConv* fusion), so the kernels disappear and the host sends 1 byte per "
    "pixel instead of 2-4. Saving: the absorbed ops' device time, less {residual_fraction} of it for the work AIPP "
    "still does."
)
_HOW = (
    "Write the aipp_op config of the fix (aipp.cfg; fields of insert_op.proto AippOpParams: input_format, "
    "src_image_size_w/h, rbuv_swap_switch, mean_chn_i/min_chn_i/var_reci_chn_i with out = (x - mean - min) x "
    "var_reci) and rebuild with `atc ... --insert_op_conf=aipp.cfg` (plus --enable_small_channel=1 for inputs with "
    "{small_channel_max} channels or fewer). Feed the model uint8 NHWC images and drop the same steps from the host "
    "preprocessing; set source_image_format in the rules to YUV420SP_U8 if the camera/decoder gives YUV. Static "
    "AIPP is an ATC option: it is advised for offline models only (contexts: {contexts})."
)

# AIPP removes the preprocessing ops: every symptom measured on them goes with them
_ABSORBED_EXPLAINS = dict.fromkeys(
    ("roofline.memory-bound", "roofline.no-bound", "roofline.latency-bound", "memory-bound.layers",
     "schedule.fusible-ops"),
    "static AIPP does the preprocessing in the model's input path: these ops are removed, and their time with them")


@dataclass
class _Value:
    """Channel i of a tensor = a[i] * x[perm[i]] + b[i] (x: the model input); None entries = unknown."""

    perm: list[int]
    a: list[float]
    b: list[float]
    known: bool = True

    def channels(self) -> int:
        return len(self.perm)


@dataclass
class _Preprocess:
    """One input's absorbable preprocessing."""

    input: str
    rank: int
    ops: list[str]
    convs: list[str]
    channels: int | None
    height: int | None
    width: int | None
    dtype: str | None
    value: _Value | None
    normalizes: bool
    swap_assumed: bool = False
    edges: list[tuple[str, str]] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)


class AippFusionKB(KnowledgeBase):
    id = "aipp-fusion"
    title = "Input preprocessing that static AIPP can absorb"
    version = "1.1.0"
    api_version = "1.5"
    requires = ()
    requires_platform = ("hbm_gbps",)
    requires_any = ("ops", "graph")
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "aipp-fusion"

    @rule(RuleDoc(
        id="aipp-fusion.preprocess-ops",
        explains=_ABSORBED_EXPLAINS,
        title="Input preprocessing ops that static AIPP can absorb",
        what="Walks the model graph from each input ({input_types}) to the first convolution and collects the ops "
             "on the way when all of them are preprocessing AIPP performs: Cast, TransData of the input, Transpose "
             "NHWC->NCHW, Sub/Add/Mul/Div/Power by constants (mean/std), channel Split+Concat, Gather or ReverseV2 "
             "(colour swap). Inputs already handled by AIPP (an Aipp node or aipp attributes) are skipped.",
        why=_WHY,
        how_to_fix=_HOW,
        thresholds=("input_types", "first_layer_types", "absorbable", "constant_types", "max_input_channels",
                    "small_channel_max", "max_preprocess_ops", "source_image_format", "csc_yuv420sp",
                    "residual_fraction", "launch_overhead_us", "min_saving_us", "severity", "graph_only_severity",
                    "confidence", "aipp_markers", "contexts"),
        needs=("graph",),
        example="Data(uint8 NHWC) -> Cast -> Transpose -> Sub(mean) -> Mul(1/std) -> TransData -> Conv2D",
        role="cause",
    ))
    def check_graph(self, ctx: AnalysisContext) -> Iterable[Finding]:
        if ctx.graph is None or not _applies(ctx, "aipp-fusion.preprocess-ops"):
            return
        yield from _graph_findings(ctx)

    @rule(RuleDoc(
        id="aipp-fusion.preprocess-sequence",
        explains=_ABSORBED_EXPLAINS,
        title="Preprocessing kernels before the first convolution (profile only)",
        what="Without a model graph: in each iteration, the run of Cast/TransData/Transpose/Sub/Mul/Div... kernels "
             "on an image-shaped input (at most {max_input_channels} channels) right before the first convolution, "
             "within {profile.lookback_ops} rows. Only for runs whose context is one of {contexts}.",
        why=_WHY,
        how_to_fix=_HOW + " Pass --graph to get the normalization constants filled in.",
        thresholds=("first_layer_types", "absorbable", "max_input_channels", "small_channel_max",
                    "source_image_format", "residual_fraction", "min_saving_us", "severity", "confidence", "profile",
                    "contexts", "compute_cores"),
        needs=("ops",),
        role="cause",
    ))
    def check_profile(self, ctx: AnalysisContext) -> Iterable[Finding]:
        if ctx.graph is not None or not len(ctx.profile.ops):
            return
        if not _applies(ctx, "aipp-fusion.preprocess-sequence"):
            return
        ctx.note("aipp-fusion.preprocess-ops: skipped, needs the model graph (--graph); using the profile "
                 "(constants unknown)")
        yield from _profile_findings(ctx)


def _applies(ctx: AnalysisContext, rule_id: str) -> bool:
    """Static AIPP is an ATC option: only runs of an offline model (or of an undecided context) get it."""
    context = context_of(ctx)
    if context in set(ctx.rules["contexts"]):
        return True
    ctx.note(f"{rule_id}: skipped, a {context} run; static AIPP is an option of offline (ATC) models")
    return False


# ---------------------------------------------------------------------------------------------------------
# graph
# ---------------------------------------------------------------------------------------------------------


def _has_aipp(mg: Any, r: Mapping[str, Any]) -> bool:
    markers = r["aipp_markers"]
    types = set(markers["types"])
    rx = re.compile(markers["attr_regex"])
    for _, d in mg.g.nodes(data=True):
        if d.get("type") in types:
            return True
        if any(rx.search(str(k)) for k in (d.get("attrs") or {})):
            return True
    return any(rx.search(str(k)) for k in mg.attrs)


def _graph_findings(ctx: AnalysisContext) -> Iterable[Finding]:
    r = ctx.rules
    mg = ctx.graph
    assert mg is not None
    if _has_aipp(mg, r):
        ctx.note("aipp-fusion.preprocess-ops: the model already uses AIPP")
        return
    dg = data_digraph(mg)
    inputs = sorted(mg.nodes_of_type(*r["input_types"]), key=lambda n: _input_order(mg, n))
    found = []
    for rank, node in enumerate(inputs):
        pre = _walk(mg, dg, node, rank, r)
        if pre is not None:
            found.append(pre)
    stats = per_name(ctx.profile.ops)
    cmdline = atc_cmdline(mg)
    for pre in found:
        yield from _emit(ctx, "aipp-fusion.preprocess-ops", pre, stats, cmdline, source="graph")


def _input_order(mg: Any, node: str) -> tuple[int, int, str]:
    d = mg.node(node)
    idx = (d.get("attrs") or {}).get("index")
    return (int(idx) if isinstance(idx, (int, np.integer)) else 1 << 30, int(d.get("id") or 0), node)


def _roles(r: Mapping[str, Any]) -> dict[str, str]:
    return {t: role for role, types in r["absorbable"].items() for t in types}


def _walk(mg: Any, dg: nx.DiGraph, start: str, rank: int, r: Mapping[str, Any]) -> _Preprocess | None:
    """The absorbable ops from ``start`` to the first convolution(s), or None when the path is not simple."""
    roles = _roles(r)
    first = set(r["first_layer_types"])
    consts = set(r["constant_types"])
    ops: list[str] = []
    convs: list[str] = []
    seen = {start}
    queue = list(dg.successors(start))
    while queue:
        node = queue.pop(0)
        if node in seen:
            continue
        seen.add(node)
        t = dg.nodes[node].get("type")
        if t in first:
            convs.append(node)
            continue
        if t not in roles:
            return None  # the input also feeds something AIPP cannot replace
        ops.append(node)
        if len(ops) > int(r["max_preprocess_ops"]):
            return None
        queue.extend(dg.successors(node))
    if not ops or not convs:
        return None
    inside = set(ops) | {start}
    for node in ops:  # every non-constant producer must be inside the chain
        for p in dg.predecessors(node):
            if p not in inside and dg.nodes[p].get("type") not in consts:
                return None
    import networkx as nx  # here: a module-level lazy module would be imported by the plugin manager's scan

    order = [n for n in nx.topological_sort(dg.subgraph(inside | set(convs))) if n in set(ops)]
    desc = (mg.node(start).get("outputs") or [{}])[0] or {}
    layout, c, h, w = _image_dims(desc, [dg.nodes[n].get("type") for n in order], r)
    value = _compose(mg, dg, start, order, c, roles, consts) if c else None
    sub = dg.subgraph(inside | set(convs))
    pos = {n: i for i, n in enumerate(nx.lexicographical_topological_sort(sub))}
    edges = sorted(sub.edges(), key=lambda e: (pos[e[0]], pos[e[1]]))  # data flow order, deterministic
    types = {n: str(dg.nodes[n].get("type")) for n in [start, *order, *convs]}
    return _Preprocess(
        input=start, rank=rank, ops=order, convs=convs, channels=c, height=h, width=w,
        dtype=desc.get("dtype"), value=value,
        normalizes=any(roles.get(dg.nodes[n].get("type")) in _NORMALIZE_ROLES for n in order),
        swap_assumed=any(roles.get(dg.nodes[n].get("type")) == "channel_gather" for n in order),
        edges=edges, types=types,
    )


def _image_dims(desc: Mapping[str, Any], types: Sequence[str | None], r: Mapping[str, Any]
                ) -> tuple[str, int | None, int | None, int | None]:
    """(layout, C, H, W) of the input image from its descriptor (format, else where the small dim is)."""
    shape = list(desc.get("origin_shape") or desc.get("shape") or [])
    fmt = canonical_format(str(desc.get("origin_format") or desc.get("format") or ""))
    if len(shape) != 4:
        return "", None, None, None
    max_c = int(r["max_input_channels"])
    transposed = any(t in set(r["absorbable"]["transpose"]) for t in types)
    if fmt == "NHWC" or (fmt != "NCHW" and (transposed or 0 < shape[3] <= max_c < shape[1])):
        layout, c, h, w = "NHWC", shape[3], shape[1], shape[2]
    else:
        layout, c, h, w = "NCHW", shape[1], shape[2], shape[3]
    if not (0 < c <= max_c):
        return layout, None, None, None

    def dim(x: int) -> int | None:
        return x if x > 0 else None

    return layout, c, dim(h), dim(w)


def _operand(mg: Any, dg: nx.DiGraph, node: str, chain_src: str, consts: set[str]) -> tuple[list[float] | None, int]:
    """The constant operand of a binary op and the input slot the chain value arrives on."""
    chain_slot = 0
    const: list[float] | None = None
    for u, _, d in mg.g.in_edges(node, data=True):
        if d.get("kind", "data") != "data":
            continue
        if u == chain_src:
            chain_slot = int(d.get("dst_index", 0) or 0)
        elif dg.nodes[u].get("type") in consts:
            const = const_values(mg, u)
    if const is None:
        const = scalar_attr(mg, node, _SCALAR_VALUE_KEYS)
    return const, chain_slot


def _compose(mg: Any, dg: nx.DiGraph, start: str, order: Sequence[str], channels: int, roles: Mapping[str, str],
             consts: set[str]) -> _Value:
    """Push a symbolic per-channel affine value through the preprocessing ops."""
    values: dict[str, _Value] = {start: _Value(list(range(channels)), [1.0] * channels, [0.0] * channels)}
    out_index: dict[tuple[str, str], int] = {}
    for u, v, d in mg.g.edges(data=True):
        if d.get("kind", "data") == "data":
            out_index[(u, v)] = int(d.get("src_index", 0) or 0)
    for node in order:
        preds = [p for p in dg.predecessors(node) if p in values]
        role = roles.get(dg.nodes[node].get("type"))
        ins = [_take(values[p], p, node, out_index, roles.get(dg.nodes[p].get("type"))) for p in preds]
        if role == "channel_concat":
            slots = {}
            for u, _, d in mg.g.in_edges(node, data=True):
                if u in values and d.get("kind", "data") == "data":
                    slots[int(d.get("dst_index", 0) or 0)] = _take(values[u], u, node, out_index,
                                                                    roles.get(dg.nodes[u].get("type")))
            parts = [slots[k] for k in sorted(slots)]
            values[node] = _Value([i for p in parts for i in p.perm], [x for p in parts for x in p.a],
                                  [x for p in parts for x in p.b], all(p.known for p in parts))
            continue
        if not ins:
            values[node] = _Value(list(range(channels)), [math.nan] * channels, [math.nan] * channels, False)
            continue
        cur = ins[0]
        if role in ("channel_gather", "channel_reverse"):
            values[node] = _Value(cur.perm[::-1], cur.a[::-1], cur.b[::-1], cur.known)
        elif role in _NORMALIZE_ROLES:
            values[node] = _affine(mg, dg, node, preds[0], role, cur, consts)
        else:  # cast, layout, transpose, channel_split: channels unchanged (split handled when taken)
            values[node] = cur
    last = order[-1]
    return values[last]


def _take(val: _Value, src: str, dst: str, out_index: Mapping[tuple[str, str], int], src_role: str | None) -> _Value:
    """The value on edge src -> dst: one channel of a channel split, else the whole tensor."""
    if src_role != "channel_split":
        return val
    k = out_index.get((src, dst), 0)
    if k >= val.channels():
        return _Value([k], [math.nan], [math.nan], False)
    return _Value([val.perm[k]], [val.a[k]], [val.b[k]], val.known)


def _affine(mg: Any, dg: nx.DiGraph, node: str, src: str, role: str, cur: _Value, consts: set[str]) -> _Value:
    n = cur.channels()
    if role == "power":
        attrs = mg.node(node).get("attrs") or {}
        power, scale, shift = (_first(attrs.get(k), d) for k, d in (("power", 1.0), ("scale", 1.0), ("shift", 0.0)))
        if power != 1.0 or any(math.isnan(x) for x in (scale, shift)):
            return _Value(cur.perm, [math.nan] * n, [math.nan] * n, False)
        return _Value(cur.perm, [x * scale for x in cur.a], [x * scale + shift for x in cur.b], cur.known)
    const, slot = _operand(mg, dg, node, src, consts)
    c = _per_channel(const, n)
    if c is None:
        return _Value(cur.perm, [math.nan] * n, [math.nan] * n, False)
    a, b = list(cur.a), list(cur.b)
    for i in range(n):
        if role == "subtract":
            a[i], b[i] = (a[i], b[i] - c[i]) if slot == 0 else (-a[i], c[i] - b[i])
        elif role == "add":
            b[i] = b[i] + c[i]
        elif role == "multiply":
            a[i], b[i] = a[i] * c[i], b[i] * c[i]
        elif role == "divide":
            if slot != 0 or c[i] == 0:
                return _Value(cur.perm, [math.nan] * n, [math.nan] * n, False)
            a[i], b[i] = a[i] / c[i], b[i] / c[i]
    return _Value(cur.perm, a, b, cur.known)


def _first(value: Any, default: float) -> float:
    if value is None:
        return default
    if isinstance(value, (list, tuple)):
        return float(value[0]) if value else default
    try:
        return float(value)
    except (TypeError, ValueError):
        return math.nan


def _per_channel(values: Sequence[float] | None, n: int) -> list[float] | None:
    if not values:
        return None
    if len(values) == 1:
        return [float(values[0])] * n
    if len(values) == n:
        return [float(v) for v in values]
    return None


# ---------------------------------------------------------------------------------------------------------
# profile only
# ---------------------------------------------------------------------------------------------------------


def _profile_findings(ctx: AnalysisContext) -> Iterable[Finding]:
    r = ctx.rules
    ops = ctx.profile.ops
    if ops["type"].isin(r["aipp_markers"]["types"]).any():
        ctx.note("aipp-fusion.preprocess-sequence: the model already runs AIPP")
        return
    keep = ops["core"].isin(r["compute_cores"]).to_numpy(dtype=bool, copy=True)
    if r["profile"]["skip_rows_without_model_id"]:
        if keep.any() and ops["model_id"].isna().to_numpy()[keep].all():
            ctx.note("aipp-fusion.preprocess-sequence: skipped, no op carries a model id (eager single-op execution); AIPP is "
                     "an option of offline (ATC) models")
            return
        keep &= ops["model_id"].notna().to_numpy()
    sub = ops.loc[keep]
    first = set(r["first_layer_types"])
    conv_rows = sub[sub["type"].isin(first)]
    if not len(conv_rows):
        return
    anchor = str(conv_rows.sort_values("start_us", kind="stable")["name"].iloc[0])
    seq = stream_order(sub)
    image_like = _image_like(sub, r)[seq.rows]
    roles = _roles(r)
    absorbable = seq.type_in(roles) & image_like
    anchor_codes = np.flatnonzero(seq.names == anchor)
    anchors = np.flatnonzero(np.isin(seq.name_code, anchor_codes))
    if not len(anchors):
        return
    alive = np.ones(len(anchors), dtype=bool)
    picked: list[np.ndarray] = []
    for k in range(1, int(r["profile"]["lookback_ops"]) + 1):
        pos = anchors - k
        ok = pos >= 0
        pos_c = np.where(ok, pos, 0)
        alive &= ok & absorbable[pos_c] & (seq.stream[pos_c] == seq.stream[anchors])
        if not alive.any():
            break
        picked.append(pos_c[alive])
    if not picked:
        return
    rows = np.unique(np.concatenate(picked))
    names = list(dict.fromkeys(str(n) for n in seq.name_of(np.sort(rows))))
    row_types = [str(t) for t in seq.type_of(rows)]
    first_row = sub.iloc[int(seq.rows[int(rows.min())])]
    c, h, w = _profile_image(first_row["input_shapes"], r)
    dtype = (parse_list(first_row["input_dtypes"]) or (None,))[0]
    pre = _Preprocess(
        input="(model input)", rank=0, ops=names, convs=[anchor], channels=c, height=h, width=w, dtype=dtype,
        value=None, normalizes=any(roles.get(t) in _NORMALIZE_ROLES for t in row_types),
        swap_assumed=any(roles.get(t) in ("channel_gather", "channel_reverse", "channel_concat") for t in row_types),
    )
    pre.types = {str(n): str(t) for n, t in zip(seq.name_of(rows), row_types, strict=True)}
    pre.types[anchor] = str(seq.type_of(anchors[0]))
    chain = [*names, anchor]
    pre.edges = list(zip(chain, chain[1:], strict=False))
    yield from _emit(ctx, "aipp-fusion.preprocess-sequence", pre, per_name(ops), None, source="profile")


def _image_like(ops: pd.DataFrame, r: Mapping[str, Any]) -> np.ndarray:
    """Rows whose first input looks like an image (<= max_input_channels) and whose output is not a weight."""
    max_c = int(r["max_input_channels"])
    in_codes = ops["input_shapes"].astype("category")
    out_fmt = ops["output_formats"].astype("category")
    in_ok = np.array([_looks_like_image(v, max_c) for v in in_codes.cat.categories] + [False], dtype=bool)
    fmt_ok = np.array([not any(f.startswith("FRACTAL") for f in (canonical_format(x) for x in parse_list(v)))
                       for v in out_fmt.cat.categories] + [True], dtype=bool)
    return in_ok[in_codes.cat.codes.to_numpy()] & fmt_ok[out_fmt.cat.codes.to_numpy()]


def _looks_like_image(value: object, max_c: int) -> bool:
    shapes = parse_shapes(value)
    if not shapes or shapes[0] is None:
        return False
    s = shapes[0]
    if len(s) == 4:
        return 0 < s[1] <= max_c or 0 < s[3] <= max_c
    if len(s) == 5:  # NC1HWC0 with a single C1 block
        return s[1] == 1
    return False


def _profile_image(value: object, r: Mapping[str, Any]) -> tuple[int | None, int | None, int | None]:
    shapes = parse_shapes(value)
    max_c = int(r["max_input_channels"])
    if not shapes or shapes[0] is None or len(shapes[0]) != 4:
        return None, None, None
    s = shapes[0]
    if 0 < s[3] <= max_c and s[1] > max_c:
        return s[3], s[1], s[2]
    if 0 < s[1] <= max_c:
        return s[1], s[2], s[3]
    return None, None, None


# ---------------------------------------------------------------------------------------------------------
# config and finding
# ---------------------------------------------------------------------------------------------------------


def aipp_params(pre: _Preprocess, r: Mapping[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """AippOpParams for this input, and what the user still has to fill in."""
    todo: list[str] = []
    fmt = str(r["source_image_format"])
    if pre.channels == 1:
        fmt = "YUV400_U8"
    params: dict[str, Any] = {"aipp_mode": "static", "related_input_rank": pre.rank, "input_format": fmt}
    if pre.width and pre.height:
        params["src_image_size_w"] = pre.width
        params["src_image_size_h"] = pre.height
    else:
        todo.append("src_image_size_w/h: the input size is dynamic or unknown")
    params["crop"] = False
    v = pre.value
    swap = False
    if v is not None and v.channels() > 1:
        if v.perm == list(range(v.channels()))[::-1]:
            swap = True
        elif v.perm != list(range(v.channels())):
            todo.append(f"channel order {v.perm} is not a plain R/B swap; reorder on the host")
    yes = fmt == "YUV420SP_U8"
    params["csc_switch"] = yes
    if yes:
        csc = dict(r["csc_yuv420sp"])
        if swap:  # BGR model: swap the output rows of the matrix instead of U/V
            for col in range(3):
                csc[f"matrix_r0c{col}"], csc[f"matrix_r2c{col}"] = csc[f"matrix_r2c{col}"], csc[f"matrix_r0c{col}"]
        params.update(csc)
        params["rbuv_swap_switch"] = False
    else:
        params["rbuv_swap_switch"] = swap
    if pre.swap_assumed and v is not None:
        todo.append("a Gather reorders the channels: its indices were taken as a reversal (RGB<->BGR); check them")
    elif pre.swap_assumed:
        todo.append("an op reorders the channels: set rbuv_swap_switch : true if it swaps R and B")
    if pre.normalizes:
        if v is not None and v.known and all(math.isfinite(x) and x != 0 for x in v.a) and all(
                math.isfinite(x) for x in v.b):
            for i in range(v.channels()):
                mean = -v.b[i] / v.a[i]
                whole = math.trunc(mean)
                params[f"mean_chn_{i}"] = int(whole)
                params[f"min_chn_{i}"] = _short(mean - whole)
                params[f"var_reci_chn_{i}"] = _short(v.a[i])
        else:
            todo.append("mean_chn_i / min_chn_i / var_reci_chn_i: the normalization constants are not in the "
                        f"{'graph' if v is not None else 'profile'}; AIPP computes (x - mean_chn - min_chn) * "
                        "var_reci_chn per channel")
    return params, todo


def _short(x: float) -> float:
    return float(f"{x:.10g}")


_KEY_ORDER = ("aipp_mode", "related_input_rank", "input_format", "src_image_size_w", "src_image_size_h", "crop",
              "csc_switch", "rbuv_swap_switch")


def render_aipp(params_list: Sequence[Mapping[str, Any]], comments: Sequence[str] = ()) -> str:
    """``aipp_op { key : value }`` prototxt text (one block per input) that atc --insert_op_conf reads."""
    lines = [f"# {c}" for c in comments]
    for params in params_list:
        lines.append("aipp_op {")
        keys = [k for k in _KEY_ORDER if k in params] + [k for k in params if k not in _KEY_ORDER]
        for k in keys:
            lines.append(f"    {k} : {_text(params[k])}")
        lines.append("}")
    return "\n".join(lines) + "\n"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:.10g}"
    return str(value)


def _emit(ctx: AnalysisContext, rule_id: str, pre: _Preprocess, stats: pd.DataFrame, cmdline: str | None,
          source: str) -> Iterable[Finding]:
    r = ctx.rules
    total_us = window_us(ctx.profile) if len(ctx.profile.ops) else 0.0
    residual = float(r["residual_fraction"])
    bw = float(ctx.platform["hbm_gbps"]) * 1e3
    saving_by_op: dict[str, float] = {}
    rows = []
    measured = True
    for op in pre.ops:
        if op in stats.index:
            t = float(stats.at[op, "total_us"])
            calls = int(stats.at[op, "calls"])
        else:
            measured = False
            node = ctx.graph.node(op) if ctx.graph is not None and op in ctx.graph.g else {}
            nbytes = sum(desc_bytes(d) or 0.0 for d in [*(node.get("inputs") or []), *(node.get("outputs") or [])])
            t, calls = nbytes / bw + float(r["launch_overhead_us"]), 1
        saving_by_op[op] = t * (1.0 - residual)
        rows.append([op, pre.types.get(op, ""), calls, round(t, 3), round(saving_by_op[op], 3)])
    saving = float(sum(saving_by_op.values()))
    if saving < float(r["min_saving_us"]):
        return
    measured = measured and total_us > 0
    severity = severity_for(saving / total_us, r["severity"]) if measured else str(r["graph_only_severity"])
    params, todo = aipp_params(pre, r)
    small = pre.channels is not None and pre.channels <= int(r["small_channel_max"])
    flags = [f"--insert_op_conf={CONFIG_FILE}"] + (["--enable_small_channel=1"] if small else [])
    comments = [f"static AIPP for input {pre.input} (related_input_rank {pre.rank}); generated by advisor"]
    comments += [f"TODO {t}" for t in todo]
    text = render_aipp([params], comments)
    if source == "graph" and pre.value is not None and pre.value.known and pre.normalizes:
        confidence = float(r["confidence"]["graph_with_constants"])
    else:
        confidence = float(r["confidence"]["graph" if source == "graph" else "profile"])
    evidence: dict[str, Any] = {
        "input": pre.input,
        "input_dtype": pre.dtype,
        "channels": pre.channels,
        "image_hw": [pre.height, pre.width],
        "first_layer": pre.convs,
        "absorbed_ops_us": round(sum(row[3] for row in rows), 3),
        "residual_fraction": residual,
        "source": source,
        "table": table(["op", "type", "calls", "time us", "saving us"], rows),
        "subgraph": {"nodes": [{"name": n, "type": pre.types.get(n, "")} for n in [pre.input, *pre.ops, *pre.convs]
                               if n in pre.types or n == pre.input],
                     "edges": [list(e) for e in pre.edges]},
    }
    if todo:
        evidence["todo"] = todo
    if total_us > 0:
        evidence["share_of_window"] = round(saving / total_us, 4)
    rewrite = _model_rewrite(ctx, pre, cmdline) if source == "graph" else None
    data: dict[str, Any] = {"aipp_op": params, "text": text, "file": CONFIG_FILE, "flags": flags,
                            "model_input": {"name": pre.input, "becomes": "uint8 NHWC"}}
    if rewrite:
        data["model_rewrite"] = rewrite
    fix = Fix(
        kind="aipp-config",
        summary=f"static AIPP on input {pre.input} ({params['input_format']}), written to {CONFIG_FILE}",
        data=data,
        command=_atc_command(cmdline, flags),
    )
    kinds = ", ".join(dict.fromkeys(pre.types.get(op, "") for op in pre.ops))
    host = (f" With AIPP the model input '{pre.input}' becomes uint8 NHWC (the decoded image, "
            f"{pre.height or 'H'}x{pre.width or 'W'}x{pre.channels or 'C'}): feed raw images and drop the matching "
            "host-side conversion/normalization.")
    if rewrite:
        host += (" Build the OM from the model without these ops (`" + rewrite["command"] + "`), or it converts and "
                 "normalizes twice.")
    elif source == "graph":
        host += " Remove the same ops from the model before conversion, or it converts and normalizes twice."
    basis = (f"absorbed ops' device time x (1 - residual_fraction {residual:g})"
             + ("" if measured else "; ops not in the profile: tensor bytes / platform hbm_gbps + launch overhead, "
                "per inference"))
    yield ctx.finding(
        rule=rule_id,
        title=f"{len(pre.ops)} preprocessing op(s) before {pre.convs[0]} can move into AIPP ({kinds})",
        severity=severity,  # type: ignore[arg-type]
        ops=list(pre.ops),
        evidence=evidence,
        estimated_saving_us=saving,
        basis=basis,
        recommendation=(
            f"{kinds} run as separate kernels on the input image before the first convolution. Static AIPP "
            f"({CONFIG_FILE} of the fix, `atc ... {' '.join(flags)}`) does the conversion"
            f"{', normalization' if pre.normalizes else ''} and layout change inside the first convolution "
            "(TbeAippConv* fusion)." + host + (" Still to fill in: " + "; ".join(todo) + "." if todo else "")
        ),
        fix=fix,
        confidence=confidence,
        saving_by_op=saving_by_op,
    )


def _model_rewrite(ctx: AnalysisContext, pre: _Preprocess, cmdline: str | None) -> dict[str, Any] | None:
    """``advisor fix MODEL --apply aipp-preprocess`` for an ONNX model (or an OM built from one), and the shape the
    input has once the ops are gone (NCHW of the image): the model ATC must build with the AIPP config."""
    mg = ctx.graph
    if mg is None:
        return None
    model = None
    if mg.format == "onnx":
        model = str(mg.source)
    else:
        m = re.search(r"--model[= ](\S+)", cmdline or "")
        framework = re.search(r"--framework[= ](\d+)", cmdline or "")
        onnx_built = (framework is not None and framework.group(1) == "5") or \
            str(mg.attrs.get("framework_type") or "") == "5"
        if not onnx_built:
            return None
        model = m.group(1) if m else "model.onnx"
    stem = re.sub(r"\.onnx$", "", model)
    desc = (mg.node(pre.input).get("outputs") or [{}])[0] or {} if pre.input in mg.g else {}
    shape = list(desc.get("origin_shape") or desc.get("shape") or [])
    batch = int(shape[0]) if shape and isinstance(shape[0], int) and shape[0] > 0 else 1
    out: dict[str, Any] = {"rule": "aipp-preprocess", "input": pre.input,
                           "command": f"advisor fix {model} --apply aipp-preprocess -o {stem}.aipp.onnx"}
    if pre.channels and pre.height and pre.width:
        out["input_shape"] = [batch, int(pre.channels), int(pre.height), int(pre.width)]
    return out


def _atc_command(cmdline: str | None, flags: Sequence[str]) -> str:
    if not cmdline:
        return "atc --model=<model> --framework=<n> --output=<om> --soc_version=<soc> " + " ".join(flags)
    parts = cmdline.split()
    if parts and re.search(r"(^|/)atc(\.bin)?$", parts[0]):
        parts[0] = "atc"
    drop = ("insert_op_conf", "enable_small_channel")
    parts = [p for p in parts if not any(re.match(rf"^--?{d}(=|$)", p) for d in drop)]
    return " ".join([*parts, *flags])


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [AippFusionKB]
