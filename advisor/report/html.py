"""HTML report: one self-contained file (inline CSS and SVG, no scripts, no network) that opens offline.

Score first, then where the time goes (by op type, by core type), the roofline of the chip with the ops the
roofline knowledge base measured, the ranked findings table, and one section per finding with its evidence,
fix and, for fusion findings, a drawing of the subgraph.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import resources
from typing import Any

import jinja2
from markupsafe import Markup

from advisor.common import escaping
from advisor.common.escaping import controls, deep
from advisor.report import charts
from advisor.report.common import (
    ADVICE_NOTES_HEADING,
    POINT_KEYS,
    SEVERITY_RANK,
    advice_notes,
    chip_name,
    finding_subgraph,
    fmt_pct,
    fmt_us,
    fmt_value,
    is_fusion_finding,
    kb_notes,
    roofline_points,
    split_evidence,
    symptom_lines,
    time_rows,
    time_sources,
)
from advisor.report.evidence_format import evidence_items, evidence_label, evidence_table
from advisor.report.kernel_rows import kernel_sections
from advisor.report.summary_rows import model_summary_rows

MAX_DETAILED = 200
"""Findings beyond this rank appear in the table only (keeps very large reports quick to open)."""
MAX_DRAWINGS = 20
"""Fusion findings beyond this many get no subgraph drawing."""


def _template() -> jinja2.Template:
    text = resources.files("advisor").joinpath("templates/report.html.j2").read_text("utf-8")
    env = jinja2.Environment(autoescape=True, trim_blocks=True, lstrip_blocks=True,
                             undefined=jinja2.StrictUndefined)
    env.filters.update(us=fmt_us, pct=fmt_pct, value=fmt_value,
                       prose=lambda text: Markup(escaping.html_code_spans(text)))
    return env.from_string(text)


def _fix_view(fix: Mapping[str, Any] | None) -> dict[str, Any] | None:
    if not fix:
        return None
    data = json.dumps(fix["data"], indent=2, ensure_ascii=False) if fix.get("data") else ""
    return {"kind": fix["kind"], "summary": fix["summary"], "data": data, "command": fix.get("command") or ""}


def _finding_views(findings: list[Mapping[str, Any]]) -> list[dict[str, Any]]:
    views = []
    drawings = 0
    for i, f in enumerate(findings[:MAX_DETAILED], 1):
        ev = split_evidence(f.get("evidence"))
        svg = None
        source = ""
        if is_fusion_finding(f) and drawings < MAX_DRAWINGS:
            sg = finding_subgraph(f)
            if sg is not None:
                svg = Markup(charts.subgraph_chart(sg, f"subgraph-{i}"))
                drawings += 1
                source = sg.source
        views.append({
            "index": i, "f": f, "anchor": f"finding-{i}", "scalars": evidence_items(ev.scalars),
            "tables": [(n, evidence_label(n), evidence_table(t)) for n, t in ev.tables],
            "other": [(evidence_label(k), v) for k, v in ev.other], "fix": _fix_view(f.get("fix")), "subgraph_svg": svg,
            "subgraph_source": source,
            "ops_shown": f["ops"][:40], "ops_more": max(0, len(f["ops"]) - 40),
            "symptoms": symptom_lines(f, limit=20),
        })
    return views


def render(report: dict[str, Any], **_: Any) -> str:
    """The report as one HTML document."""
    report = deep(report, controls)  # Jinja escapes HTML; controls from the input are made visible first
    summary = report["summary"]
    total = float(summary.get("device_time_us") or 0.0)
    findings = report["findings"]
    points = roofline_points(findings)
    platform = report.get("platform") or {}
    counts = {s: 0 for s in SEVERITY_RANK}
    for f in findings:
        counts[f["severity"]] += 1
    context = {
        "r": report,
        "inp": report["input"],
        "chip": chip_name(report),
        "summary": summary,
        "detail": report.get("score_detail") or {},
        "score": float(report["score"]),
        "score_class": "good" if report["score"] >= 85 else "fair" if report["score"] >= 65 else "poor",
        "severity_counts": counts,
        "op_type_svg": Markup(charts.op_type_chart(summary.get("top_op_types", []), total))
        if summary.get("top_op_types") else None,
        "core_svg": Markup(charts.core_chart(summary["by_core"], total)) if summary.get("by_core") else None,
        "roofline_svg": Markup(charts.roofline_chart(platform, points)) if points else None,
        "time": report.get("time") or {},
        "time_rows": time_rows(report.get("time"), report.get("platform")),
        "time_sources": time_sources(report.get("time")),
        "time_svg": Markup(charts.time_chart(report["time"], platform=report.get("platform"))) if (report.get("time") or {}).get("window_us") else None,
        "roofline_points": len(points),
        "model_summary": model_summary_rows(report.get("model_summary")),
        "kernels": kernel_sections(report.get("kernels")),
        "platform": platform,
        "findings": findings,
        "views": _finding_views(findings),
        "max_detailed": MAX_DETAILED,
        "point_keys": POINT_KEYS,
        "notes": kb_notes(report),
        "advice_notes": advice_notes(report),
        "advice_heading": ADVICE_NOTES_HEADING,
        "sub_scores": {k: v for k, v in (report.get("score_detail") or {}).get("by_kb", {}).items()
                       if k in {kb["id"] for kb in report["knowledge_bases"] if kb["status"] == "ok"}},
    }
    return _template().render(**context)
