"""Helpers shared by the Markdown, HTML and JUnit renderers: number formatting and reading finding evidence.

Evidence is free-form (``evidence`` in the report schema): named numbers, a small ``table`` ({columns, rows}),
and sometimes richer structures (roofline ``points``, a fusion ``subgraph``). These helpers read it tolerantly
so every renderer shows the same things the same way.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from advisor.common.units import fmt_us
from advisor.findings import SEVERITIES

SEVERITY_RANK = {s: i for i, s in enumerate(SEVERITIES)}

FUSION_RULE_PREFIXES = ("ub-fusion.", "aipp-fusion.", "mish-leakyrelu.")


def fmt_pct(share: float | None, digits: int = 1) -> str:
    """A 0..1 share as a percentage."""
    if share is None:
        return "–"
    return f"{share * 100:.{digits}f} %"


def fmt_value(value: Any) -> str:
    """An evidence value as short text (floats rounded, lists shortened)."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, float):
        if math.isnan(value):
            return "–"
        if value != 0 and (abs(value) >= 1e6 or abs(value) < 1e-3):
            return f"{value:.3g}"
        return f"{value:,.3f}".rstrip("0").rstrip(".")
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, (list, tuple)):
        shown = ", ".join(fmt_value(v) for v in value[:8])
        return shown + (f", … (+{len(value) - 8})" if len(value) > 8 else "")
    if isinstance(value, Mapping):
        return ", ".join(f"{k}={fmt_value(v)}" for k, v in list(value.items())[:8])
    return str(value)


def is_table(value: Any) -> bool:
    return isinstance(value, Mapping) and isinstance(value.get("columns"), list) and isinstance(value.get("rows"), list)


def records_as_table(records: list[Mapping[str, Any]], limit: int = 20) -> dict[str, Any]:
    """A list of dicts (e.g. roofline points) as an evidence table, columns in first-seen order."""
    columns: list[str] = []
    for r in records:
        for k in r:
            if k not in columns:
                columns.append(str(k))
    rows = [[r.get(c) for c in columns] for r in records[:limit]]
    out: dict[str, Any] = {"columns": columns, "rows": rows}
    if len(records) > limit:
        out["more_rows"] = len(records) - limit
    return out


@dataclass
class Evidence:
    """A finding's evidence split by how it is shown."""

    scalars: list[tuple[str, Any]] = field(default_factory=list)
    tables: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    other: list[tuple[str, str]] = field(default_factory=list)


def split_evidence(evidence: Mapping[str, Any] | None) -> Evidence:
    """Named numbers/strings, tables ({columns, rows} or lists of records) and a one-line summary of the rest."""
    out = Evidence()
    for key, value in (evidence or {}).items():
        if key == "subgraph":
            nodes = value.get("nodes", []) if isinstance(value, Mapping) else []
            out.other.append((key, f"{len(nodes)} nodes"))
        elif is_table(value):
            out.tables.append((key, dict(value)))
        elif isinstance(value, list) and value and all(isinstance(v, Mapping) for v in value):
            out.tables.append((key, records_as_table(value)))
        elif isinstance(value, Mapping):
            out.other.append((key, fmt_value(value)))
        else:
            out.scalars.append((key, value))
    return out


# --- roofline points -------------------------------------------------------------------------------------------

_INTENSITY = ("intensity", "arithmetic_intensity", "intensity_flop_per_byte", "flop_per_byte", "ai")
_ATTAINED = ("attained_tflops", "achieved_tflops", "tflops", "attained")
_BOUND = ("bound", "bound_class", "class", "limit")
_LABEL = ("op", "name", "op_name", "type", "op_type")


@dataclass(frozen=True)
class RooflinePoint:
    label: str
    intensity: float
    attained_tflops: float
    bound: str


def _pick(row: Mapping[str, Any], names: Iterable[str]) -> Any:
    lower = {str(k).lower().replace(" ", "_"): v for k, v in row.items()}
    for n in names:
        if n in lower and lower[n] is not None:
            return lower[n]
    return None


def _positive(value: Any) -> float | None:
    try:
        v = float(value)
    except (TypeError, ValueError):
        return None
    return v if math.isfinite(v) and v > 0 else None


def _point(row: Mapping[str, Any]) -> RooflinePoint | None:
    intensity = _positive(_pick(row, _INTENSITY))
    attained = _positive(_pick(row, _ATTAINED))
    if intensity is None or attained is None:
        return None
    bound = _pick(row, _BOUND)
    label = _pick(row, _LABEL)
    return RooflinePoint(str(label) if label is not None else "", intensity, attained,
                         str(bound).lower() if bound is not None else "unknown")


def _rows_of(value: Any) -> list[Mapping[str, Any]]:
    if is_table(value):
        cols = [str(c) for c in value["columns"]]
        return [dict(zip(cols, r, strict=False)) for r in value["rows"] if isinstance(r, (list, tuple))]
    if isinstance(value, list):
        return [v for v in value if isinstance(v, Mapping)]
    return []


POINT_KEYS = ("points", "roofline_points")


def _with_symptoms(findings: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    """Each finding, then the symptoms folded under it (a roofline symptom absorbed by its cause still has its
    points)."""
    for f in findings:
        yield f
        yield from (s for s in f.get("symptoms") or () if isinstance(s, Mapping))


def roofline_points(findings: Iterable[Mapping[str, Any]]) -> list[RooflinePoint]:
    """Every (intensity, attained TFLOPS, bound) the findings and their symptoms carry: ``evidence["points"]`` (or
    ``roofline_points``) rows when present, else any evidence table with those columns, else a finding's own
    named numbers. An op seen in several findings is plotted once."""
    seen: set[object] = set()
    out: list[RooflinePoint] = []
    for f in _with_symptoms(findings):
        ev = f.get("evidence") or {}
        dedicated = [ev[k] for k in POINT_KEYS if k in ev]
        rows: list[Mapping[str, Any]] = []
        for value in dedicated or [v for v in ev.values() if v is not ev]:
            rows.extend(_rows_of(value))
        if not dedicated:
            rows.append(ev)
        for row in rows:
            p = _point(row)
            if p is None:
                continue
            if not p.label and row is ev and f.get("ops"):
                p = RooflinePoint(str(f["ops"][0]), p.intensity, p.attained_tflops, p.bound)
            key: object = p.label or (round(p.intensity, 6), round(p.attained_tflops, 6))
            if key not in seen:
                seen.add(key)
                out.append(p)
    return out


# --- fusion subgraphs ------------------------------------------------------------------------------------------

@dataclass
class Subgraph:
    nodes: list[str]
    edges: list[tuple[str, str]]
    types: dict[str, str] = field(default_factory=dict)
    source: str = "subgraph"
    """Where the drawing comes from: ``subgraph`` (evidence), ``chains`` (op chains such as "A > B > C" in an
    evidence table) or ``ops`` (the finding's ops in order, a last resort)."""

    @property
    def drawn_as_chain(self) -> bool:
        return self.source == "ops"


def is_fusion_finding(f: Mapping[str, Any]) -> bool:
    ev = f.get("evidence") or {}
    return str(f.get("rule", "")).startswith(FUSION_RULE_PREFIXES) or isinstance(ev.get("subgraph"), Mapping)


def _from_subgraph(sg: Mapping[str, Any], max_nodes: int) -> Subgraph:
    names: list[str] = []
    types: dict[str, str] = {}
    for n in sg["nodes"]:
        if isinstance(n, Mapping):
            name = str(n.get("name") or n.get("id") or "")
            if n.get("type"):
                types[name] = str(n["type"])
        else:
            name = str(n)
        if name and name not in names:
            names.append(name)
    names = names[:max_nodes]
    keep = set(names)
    edges = []
    for e in sg.get("edges") or []:
        if isinstance(e, Mapping):
            src, dst = e.get("src", e.get("source")), e.get("dst", e.get("target"))
        elif isinstance(e, (list, tuple)) and len(e) >= 2:
            src, dst = e[0], e[1]
        else:
            continue
        if str(src) in keep and str(dst) in keep:
            edges.append((str(src), str(dst)))
    return Subgraph(names, edges, types, "subgraph")


_CHAIN_SEP = re.compile(r"\s*(?:->|>|→)\s*")


def _from_chains(ev: Mapping[str, Any], ops: Sequence[str], max_nodes: int) -> Subgraph | None:
    """Chains written as "A > B > C" or "A -> B" in evidence table cells, when every name is one of the ops."""
    known = set(ops)
    nodes: list[str] = []
    edges: list[tuple[str, str]] = []
    for value in ev.values():
        if not is_table(value):
            continue
        for row in value["rows"]:
            for cell in row if isinstance(row, (list, tuple)) else []:
                if not isinstance(cell, str) or not _CHAIN_SEP.search(cell):
                    continue
                names = [n for n in _CHAIN_SEP.split(cell.strip()) if n]
                if len(names) < 2 or not all(n in known for n in names):
                    continue
                if len(nodes) + len(names) > max_nodes:
                    return Subgraph(nodes, edges, {}, "chains") if nodes else None
                nodes.extend(n for n in names if n not in nodes)
                edges.extend(zip(names[:-1], names[1:], strict=True))
    return Subgraph(nodes, edges, {}, "chains") if edges else None


def finding_subgraph(f: Mapping[str, Any], max_nodes: int = 24, max_chain: int = 8) -> Subgraph | None:
    """What to draw for a fusion finding: ``evidence["subgraph"]`` (nodes as names or {name, type}, edges as
    [src, dst]); else op chains its evidence tables spell out; else its first ops as a chain. None when there
    is nothing to draw."""
    ev = f.get("evidence") or {}
    sg = ev.get("subgraph")
    if isinstance(sg, Mapping) and sg.get("nodes"):
        return _from_subgraph(sg, max_nodes)
    ops = [str(o) for o in (f.get("ops") or [])]
    chains = _from_chains(ev, ops, max_nodes)
    if chains is not None:
        return chains
    ops = ops[:max_chain]
    if len(ops) < 2:
        return None
    return Subgraph(ops, list(zip(ops[:-1], ops[1:], strict=True)), {}, "ops")


def chip_name(report: Mapping[str, Any]) -> str:
    """The one chip name a report shows: the chip the figures were computed for (``platform.soc``, e.g.
    Ascend910B2), else the profile's own name (which may be a family, ``Ascend910B-class``), else "?"."""
    return str((report.get("platform") or {}).get("soc") or report.get("input", {}).get("chip") or "?")


ADVICE_NOTES_HEADING = "Advice not ranked (no measured saving, or below materiality)"
"""How every report heads the JSON report's ``notes``: advice listed apart from the ranked findings."""


def advice_notes(report: Mapping[str, Any]) -> list[tuple[str, str, str]]:
    """(rule, title, why it is not ranked) for each of the report's ``notes`` (``advisor.pipeline.hierarchy.split_notes``),
    largest saving first."""
    return [(str(n.get("rule", "")), str(n.get("title", "")), str(n.get("reason", "")))
            for n in report.get("notes") or []]


def kb_notes(report: Mapping[str, Any]) -> list[str]:
    """Notes from the input and from each knowledge base, de-duplicated, in report order."""
    notes: list[str] = []
    for n in list(report.get("input", {}).get("notes", [])):
        if n not in notes:
            notes.append(n)
    for kb in report.get("knowledge_bases", []):
        for n in kb.get("notes", []):
            text = f"{kb['id']}: {n}"
            if text not in notes:
                notes.append(text)
    return notes


# ---------------------------------------------------------------------------------------------------------
# the time section every report opens with
# ---------------------------------------------------------------------------------------------------------
TIME_PARTS = (("compute_us", "compute"), ("uncovered_communication_us", "uncovered communication"),
              ("free_us", "free (device idle)"))


def core_label(key: str, platform: Mapping[str, Any] | None) -> str:
    """How a ``compute_by_core`` key reads for this chip: ``cube`` holds AI_CORE tasks, which are cube-core tasks
    only where cube and vector cores are separate (``split_cores`` in rules/platforms.yaml); elsewhere an AI Core
    runs both units, so its time is "AI Core" time (an Add on a 310 is not cube work)."""
    if key == "cube" and not (platform or {}).get("split_cores"):
        return "AI Core"
    return {"ai_cpu": "AI CPU"}.get(key, key)


FREE_LABELS = {"data_loading": "data loading", "launch": "host launch gaps", "comm_wait": "host waits on collectives",
               "unknown": "cause unknown"}
"""How each ``free_by_kind`` key (advisor.timemodel.FREE_KEYS) reads in a report."""


def _window_detail(time: Mapping[str, Any]) -> str:
    if "steps" not in time:
        return f"{int(time.get('ranks_total') or len(time.get('ranks') or {})):,} rank(s)"
    steady = time.get("steady_state") or {}
    if steady:
        warm = int(steady.get("warmup_steps") or 0)
        return (f"{steady.get('steps_analyzed')} of {steady.get('steps_recorded')} recorded steps"
                + (f" (steps {steady['analyzed']})" if steady.get("analyzed") and steady.get("steps_analyzed") != 1
                   else f" (step {steady['analyzed']})" if steady.get("analyzed") else "")
                + (f", {warm} warm-up step(s) not analyzed" if warm else "")
                + ("; the only step is the program's first: warm-up not excluded" if steady.get("warmup_suspected")
                   else ""))
    listed = (time.get("steps_truncated") or {}).get("total") or len(time.get("steps") or [])
    return f"{listed or 'all'} step(s)"


def time_rows(time: Mapping[str, Any] | None,
              platform: Mapping[str, Any] | None = None) -> list[tuple[str, float, float | None, str]]:
    """(label, us, share of the window, detail) for the window and its split, from the report's ``time``, then the
    recorded time left out of it (warm-up steps, pauses) with the reason."""
    if not time or not time.get("window_us"):
        return []
    window = float(time["window_us"])
    by_core = ", ".join(f"{core_label(k, platform)} {fmt_us(v)}"
                        for k, v in (time.get("compute_by_core") or {}).items() if v)
    by_kind = ", ".join(f"{k} {fmt_us(v)}" for k, v in (time.get("uncovered_by_kind") or {}).items() if v)
    free_kind = ", ".join(f"{FREE_LABELS.get(k, k)} {fmt_us(v)}" for k, v in (time.get("free_by_kind") or {}).items()
                          if v)
    rows: list[tuple[str, float, float | None, str]] = [
        ("analyzed window", window, 1.0, _window_detail(time)),
        ("compute", float(time["compute_us"]), float(time["compute_us"]) / window, by_core),
        ("uncovered communication", float(time["uncovered_communication_us"]),
         float(time["uncovered_communication_us"]) / window, by_kind),
        ("free (device idle)", float(time["free_us"]), float(time["free_us"]) / window, free_kind),
        ("overlapped communication", float(time["overlapped_communication_us"]), None, "hidden behind compute"),
    ]
    excluded = list(time.get("excluded") or [])
    for e in excluded[:EXCLUDED_LISTED]:
        label = f"step {e['step']} ({e['kind']})" if e.get("step") is not None else e["kind"]
        rows.append((label, float(e["window_us"]), None, str(e["reason"])))
    if len(excluded) > EXCLUDED_LISTED:
        rest = excluded[EXCLUDED_LISTED:]
        rows.append((f"{len(rest)} more excluded", sum(float(e["window_us"]) for e in rest), None,
                     "warm-up steps and pauses (time.excluded)"))
    outside = time.get("outside_window_us")
    if outside:
        rows.append(("outside the window", float(outside), None, "capture time not analyzed: warm-up steps, pauses, "
                     "steps not analyzed, idle head/tail"))
    return rows


EXCLUDED_LISTED = 3
"""Excluded intervals (warm-up steps, pauses) a report lists one by one; the rest are summed in one row."""


def time_sources(time: Mapping[str, Any] | None) -> list[str]:
    """``figure: source`` lines for the time section."""
    if not time:
        return []
    sources = time.get("sources") or {}
    if not sources and time.get("ranks"):
        first = next(iter(time["ranks"].values()))
        sources = first.get("sources") or {}
    return [f"{k}: {v}" for k, v in sources.items()]


def symptom_lines(f: Mapping[str, Any], limit: int = 6) -> list[str]:
    """One line per symptom a root cause explains (``findings[].symptoms``), largest first."""
    out = []
    symptoms = list(f.get("symptoms") or [])
    for sym in symptoms[:limit]:
        where = f"rank {sym['rank']} · " if sym.get("rank") is not None else ""
        ops = len(sym.get("ops") or [])
        on = f"on {ops} op(s)" if ops else "of it"  # a bucket of the time model (free time) names no op
        out.append(f"{where}{sym['rule']}: {sym['title']} ({fmt_us(sym.get('estimated_saving_us', 0.0))} {on})")
    if len(symptoms) > limit:
        out.append(f"... and {len(symptoms) - limit} more")
    return out
