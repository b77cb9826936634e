"""Charts for the HTML report, drawn with matplotlib (Agg) and returned as inline SVG text.

SVG keeps the report one self-contained file that opens offline: no scripts, no fonts, no images to fetch.
Output is deterministic for the same report (fixed hash salt, no date metadata), so committed example reports
only change when their content does.
"""

from __future__ import annotations

import io
import math
import re
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import matplotlib

matplotlib.use("Agg", force=False)

import matplotlib.pyplot as plt  # noqa: E402  (backend must be chosen first)
import networkx as nx  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from advisor.common.escaping import matplotlib_text  # noqa: E402
from advisor.common.units import duration_scale  # noqa: E402
from advisor.report.common import RooflinePoint, Subgraph, core_label, fmt_us  # noqa: E402

BOUND_COLORS = {"compute": "#d62728", "memory": "#1f77b4", "latency": "#7f7f7f", "overhead": "#7f7f7f",
                "vector": "#ff7f0e", "none": "#9467bd", "unknown": "#9467bd"}
_EXTRA_COLORS = ("#2ca02c", "#8c564b", "#e377c2", "#bcbd22", "#17becf")
_CORE_COLORS = {"AI_CORE": "#1f77b4", "AI_VECTOR_CORE": "#ff7f0e", "MIX_AIC": "#17becf", "MIX_AIV": "#bcbd22",
                "AI_CPU": "#d62728", "HCCL": "#2ca02c"}
_RC = {"svg.fonttype": "none", "font.family": "sans-serif", "font.size": 9, "axes.spines.top": False,
       "axes.spines.right": False}


def to_svg(fig: Figure, salt: str, tight: bool = True) -> str:
    """The figure as an ``<svg>`` element: no XML prolog, no doctype, no metadata, ids unique per chart.
    ``tight`` crops to the drawn content (costs a second layout pass)."""
    buf = io.StringIO()
    # text is kept as text (svg.fonttype none): the browser draws glyphs DejaVu lacks, so no warning on stderr
    with matplotlib.rc_context({"svg.hashsalt": salt}), warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=r"Glyph .* missing from font")
        fig.savefig(buf, format="svg", metadata={"Date": None, "Creator": None},
                    bbox_inches="tight" if tight else None)
    plt.close(fig)
    text = buf.getvalue()
    text = text[text.index("<svg"):]
    text = re.sub(r"<metadata>.*?</metadata>\s*", "", text, flags=re.S)
    return text.strip()


def _short(label: str, limit: int = 32) -> str:
    label = matplotlib_text(label)
    return label if len(label) <= limit else label[: limit - 1] + "…"


def bar_chart(items: Sequence[tuple[str, float]], salt: str, title: str, color: str | Mapping[str, str] = "#1f77b4",
              total: float | None = None) -> str:
    """Horizontal bars, largest on top, labelled with the time and share of ``total``."""
    items = list(items)
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(6.4, 0.32 * max(3, len(items)) + 0.8))
        labels = [_short(k) for k, _ in items][::-1]
        raw = [v for _, v in items][::-1]
        unit, per_unit = duration_scale(max(raw, default=0.0))
        values = [v / per_unit for v in raw]
        colors = [color.get(k, "#7f7f7f") for k, _ in items][::-1] if isinstance(color, Mapping) \
            else [color] * len(items)
        bars = ax.barh(range(len(items)), values, color=colors)
        ax.set_yticks(range(len(items)), labels)
        ax.set_xlabel(f"time ({unit})").set_gid(f"{salt}-xlabel")
        ax.set_title(title, loc="left")
        vmax = max(values, default=0) or 1.0
        ax.set_xlim(0, vmax * 1.35)
        for bar, v in zip(bars, raw, strict=True):
            text = fmt_us(v) + (f"  {v / total:.0%}" if total else "")
            ax.text(bar.get_width() + vmax * 0.01, bar.get_y() + bar.get_height() / 2, text, va="center", fontsize=8)
        return to_svg(fig, salt)


def op_type_chart(top_op_types: Sequence[Mapping[str, Any]], total: float) -> str:
    items = [(str(t["type"]), float(t["total_us"])) for t in top_op_types[:15]]
    return bar_chart(items, "op-types", "Device time by op type", "#1f77b4", total)


def core_chart(by_core: Mapping[str, float], total: float) -> str:
    items = sorted(((str(k), float(v)) for k, v in by_core.items()), key=lambda kv: -kv[1])
    return bar_chart(items, "cores", "Device time by core type", _CORE_COLORS, total)


def _roofs(platform: Mapping[str, Any]) -> tuple[list[tuple[str, float]], float | None]:
    """Compute roofs (label, TFLOPS) and the memory roof slope in TFLOPS per FLOP/byte."""
    roofs = []
    for key, label in (("fp16_tflops", "FP16 cube"), ("fp32_vector_tflops", "FP32 vector")):
        v = platform.get(key)
        if isinstance(v, (int, float)) and v > 0:
            roofs.append((f"{label} {v:g} TFLOPS", float(v)))
    bw = platform.get("hbm_gbps")
    slope = float(bw) / 1000.0 if isinstance(bw, (int, float)) and bw > 0 else None
    return roofs, slope


def roofline_chart(platform: Mapping[str, Any], points: Sequence[RooflinePoint]) -> str:
    """Log-log roofline: the chip's compute roofs and memory roof, ops coloured by bound class."""
    roofs, slope = _roofs(platform)
    xs = [p.intensity for p in points]
    ridges = [peak / slope for _, peak in roofs] if slope else []
    lo = min([*xs, *(r / 100 for r in ridges)], default=0.01)
    hi = max([*xs, *(r * 30 for r in ridges)], default=1000.0)
    lo, hi = 10 ** math.floor(math.log10(lo)), 10 ** math.ceil(math.log10(hi))
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        ax.set_xscale("log")
        ax.set_yscale("log")
        top = max([peak for _, peak in roofs] + [p.attained_tflops for p in points], default=1.0)
        if slope:
            x_end = max(ridges) if ridges else hi
            ax.plot([lo, x_end], [slope * lo, slope * x_end], color="#333333", lw=1.5,
                    label=f"HBM {platform.get('hbm_gbps'):g} GB/s")
        for i, (label, peak) in enumerate(roofs):
            x_start = peak / slope if slope else lo
            ax.plot([x_start, hi], [peak, peak], color="#333333", lw=1.5, ls="-" if i == 0 else "--", label=label)
        classes: dict[str, list[RooflinePoint]] = {}
        for p in points:
            classes.setdefault(p.bound, []).append(p)
        for j, (bound, pts) in enumerate(sorted(classes.items())):
            color = BOUND_COLORS.get(bound, _EXTRA_COLORS[j % len(_EXTRA_COLORS)])
            label = "no clear bound" if bound in ("none", "unknown", "") else f"{bound}-bound"
            ax.scatter([p.intensity for p in pts], [p.attained_tflops for p in pts], s=22, color=color,
                       edgecolors="white", linewidths=0.5, label=f"{label} ({len(pts)})", zorder=3)
        ax.set_xlim(lo, hi)
        bottom = min([p.attained_tflops for p in points] + [slope * lo if slope else top / 1e4], default=top / 1e4)
        ax.set_ylim(max(bottom / 2, top / 1e6), top * 2)
        ax.set_xlabel("arithmetic intensity (FLOP/byte)").set_gid("roofline-xlabel")
        ax.set_ylabel("attained TFLOPS").set_gid("roofline-ylabel")
        soc = platform.get("soc") or "chip"
        ax.set_title(f"Roofline: {matplotlib_text(soc)}" + ("" if points else " (no per-op points in this report)"), loc="left")
        ax.minorticks_off()  # minor log ticks cost seconds of text layout and add little
        ax.grid(True, which="major", color="#dddddd", lw=0.5)
        if roofs or slope or points:
            ax.legend(loc="lower right", fontsize=8, frameon=False).set_gid("roofline-legend")
        return to_svg(fig, "roofline")


def _layers(sg: Subgraph) -> dict[str, int]:
    """Longest-path depth of each node (cycles, which a dataflow subgraph should not have, fall back to order)."""
    g = nx.DiGraph()
    g.add_nodes_from(sg.nodes)
    g.add_edges_from(sg.edges)
    if not nx.is_directed_acyclic_graph(g):
        return {n: i for i, n in enumerate(sg.nodes)}
    depth: dict[str, int] = {}
    for n in nx.topological_sort(g):
        depth[n] = max((depth[p] + 1 for p in g.predecessors(n)), default=0)
    return depth


def subgraph_chart(sg: Subgraph, salt: str) -> str:
    """A small left-to-right drawing of a fusion candidate's ops."""
    depth = _layers(sg)
    by_layer: dict[int, list[str]] = {}
    for n in sg.nodes:
        by_layer.setdefault(depth[n], []).append(n)
    pos = {n: (d, -i + (len(ns) - 1) / 2) for d, ns in by_layer.items() for i, n in enumerate(ns)}
    width = max(by_layer) + 1 if by_layer else 1
    height = max((len(v) for v in by_layer.values()), default=1)
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(min(10.0, 2.0 * width + 0.6), 0.8 * height + 0.5))
        boxes = {}
        for n, (x, y) in pos.items():
            label = matplotlib_text(n)
            label = label if len(label) <= 22 else "…" + label[-21:]
            if sg.types.get(n) and sg.types[n] not in n:
                label += "\n" + _short(sg.types[n], 22)
            boxes[n] = ax.text(x, y, label, ha="center", va="center", fontsize=8, zorder=3,
                               bbox={"boxstyle": "round,pad=0.35", "fc": "#eef4fb", "ec": "#1f77b4", "lw": 0.8})
        for src, dst in sg.edges:  # drawn after the boxes so the arrows end at their borders
            ax.annotate("", xy=pos[dst], xytext=pos[src], zorder=4,
                        arrowprops={"arrowstyle": "-|>", "color": "#555555", "lw": 0.9, "shrinkA": 1, "shrinkB": 1,
                                    "patchA": boxes[src].get_bbox_patch(), "patchB": boxes[dst].get_bbox_patch(),
                                    "connectionstyle": "arc3,rad=0.0" if pos[src][1] == pos[dst][1]
                                    else "arc3,rad=0.08"})
        ax.set_xlim(-0.6, width - 0.4)
        ax.set_ylim(-height / 2 - 0.1, height / 2 + 0.1)
        ax.axis("off")
        fig.subplots_adjust(left=0, right=1, bottom=0, top=1)
        return to_svg(fig, salt, tight=False)


TIME_SEGMENTS = (
    ("compute_by_core", "cube", "compute: cube", "#1f77b4"),
    ("compute_by_core", "vector", "compute: vector", "#ff7f0e"),
    ("compute_by_core", "mix", "compute: mix", "#17becf"),
    ("compute_by_core", "ai_cpu", "compute: AI CPU", "#d62728"),
    ("compute_by_core", "other", "compute: other", "#8c564b"),
    ("uncovered_by_kind", "wait", "communication: wait", "#9467bd"),
    ("uncovered_by_kind", "transmit", "communication: transmit", "#2ca02c"),
    ("uncovered_by_kind", "idle", "communication: idle", "#bcbd22"),
    ("uncovered_by_kind", "unknown", "communication: unsplit", "#c5b0d5"),
    ("free_by_kind", "data_loading", "free: data loading", "#e7ba52"),
    ("free_by_kind", "launch", "free: host launch gaps", "#dddddd"),
    ("free_by_kind", "comm_wait", "free: host waits on collectives", "#ce6dbd"),
    ("free_by_kind", "unknown", "free: cause unknown", "#eeeeee"),
    (None, "free_rest", "free", "#dddddd"),
)


def _free_rest(t: Mapping[str, Any]) -> float:
    """Free time no ``free_by_kind`` entry accounts for (all of it in a report without the split)."""
    return max(0.0, float(t.get("free_us", 0.0)) - sum(float(v) for v in (t.get("free_by_kind") or {}).values()))


def _bar_total(t: Mapping[str, Any]) -> float:
    """The length of one stacked bar of :func:`time_chart`: every segment it draws."""
    return sum(float((t.get(group) or {}).get(key, 0.0)) if group else _free_rest(t)
               for group, key, _, _ in TIME_SEGMENTS)


def time_chart(time: Mapping[str, Any], salt: str = "time", max_steps: int = 30,
               platform: Mapping[str, Any] | None = None) -> str:
    """One stacked horizontal bar per step (per rank for multi-rank input): compute by core, uncovered
    communication by kind, free time -- the time model of the report."""
    if time.get("ranks"):
        bars = [(f"rank {matplotlib_text(r)}", t) for r, t in time["ranks"].items()]
    else:
        steps = time.get("steps") or []
        bars = [("all" if s.get("step") is None else f"step {matplotlib_text(s['step'])}", s) for s in steps] \
            or [("all", time)]
    bars = bars[:max_steps]
    with plt.rc_context(_RC):
        fig, ax = plt.subplots(figsize=(7.2, 0.36 * max(2, len(bars)) + 1.2))
        labels = [b for b, _ in bars][::-1]
        lefts = [0.0] * len(bars)
        unit, per_unit = duration_scale(max((_bar_total(t) for _, t in bars), default=0.0))
        for group, key, name, color in TIME_SEGMENTS:
            values = [(float((t.get(group) or {}).get(key, 0.0)) if group else _free_rest(t)) / per_unit
                      for _, t in bars][::-1]
            if not any(values):
                continue
            label = f"compute: {core_label(key, platform)}" if group == "compute_by_core" else name
            ax.barh(labels, values, left=lefts, color=color, label=label, height=0.6)
            lefts = [a + b for a, b in zip(lefts, values, strict=True)]
        ax.set_xlabel(f"time ({unit})").set_gid(f"{salt}-xlabel")
        ax.set_title("Analyzed time per step: compute / uncovered communication / free", loc="left")
        # beside the bars, not under them: below, it would meet the axis label as the bar count changes
        legend = ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), ncol=1, frameon=False, fontsize=8)
        legend.set_gid(f"{salt}-legend")
        return to_svg(fig, salt)  # inside the rc context: text stays text (svg.fonttype none), like every chart
