"""Markdown report, sized for a pull-request comment: score and key numbers first, then the ranked findings
as a table, then one collapsible ``<details>`` block per finding, then knowledge-base statuses and skipped files.

GitHub rejects comments over 65,536 characters; the output stays under ``max_chars`` (60,000 by default) by
dropping the details of the lowest-ranked findings first and saying so.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from advisor.common import escaping
from advisor.report.common import (
    ADVICE_NOTES_HEADING,
    POINT_KEYS,
    advice_notes,
    chip_name,
    fmt_pct,
    fmt_us,
    fmt_value,
    kb_notes,
    split_evidence,
    symptom_lines,
    time_rows,
    time_sources,
)
from advisor.report.evidence_format import evidence_items, evidence_label, evidence_table
from advisor.report.kernel_rows import kernel_moved_text, kernel_predicted_text, kernel_sections
from advisor.report.summary_rows import RANK_DETAIL_HEADER, model_summary_rows, rank_detail_rows

MAX_CHARS = 60_000
SEVERITY_ICON = {"critical": "🔴", "major": "🟠", "minor": "🟡", "info": "🔵"}
_CELL_MAX = 160


def cell(value: Any, limit: int = _CELL_MAX) -> str:
    """Text safe in Markdown prose or a table cell (``escaping.markdown``: no raw HTML, no link or emphasis syntax,
    no pipes, no controls, one line), bounded length."""
    text = value if isinstance(value, str) else fmt_value(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return escaping.markdown(text)


def code(value: Any, limit: int = _CELL_MAX) -> str:
    """Inline code in a table cell (op and rule names), with the characters a code span cannot hold replaced."""
    text = str(value)
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    return f"`{escaping.markdown_code(text)}`"


def md_table(columns: Sequence[str], rows: Sequence[Sequence[Any]], align: Sequence[str] | None = None) -> str:
    """A GitHub-flavoured Markdown table; ``align`` items are 'l' or 'r'."""
    align = align or ["l"] * len(columns)
    head = "| " + " | ".join(cell(c) for c in columns) + " |"
    sep = "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"
    body = ["| " + " | ".join(c if isinstance(c, _Raw) else cell(c) for c in r) + " |" for r in rows]
    return "\n".join([head, sep, *body])


class _Raw(str):
    """A cell already formatted as Markdown (not escaped again)."""


def _score_line(report: Mapping[str, Any]) -> str:
    s = float(report["score"])
    mark = "🟢" if s >= 85 else "🟡" if s >= 65 else "🔴"
    return f"## {mark} advisor score **{s:.1f}** / 100"


def _key_numbers(report: Mapping[str, Any]) -> str:
    inp, summ = report["input"], report["summary"]
    detail = report.get("score_detail") or {}
    busy = detail.get("window_us", detail.get("device_busy_us", summ.get("device_busy_us")))
    rec = detail.get("recoverable_us")
    rows: list[list[Any]] = []
    if rec is not None and busy:
        rows.append(["Estimated recoverable", f"{fmt_us(rec)} of {fmt_us(busy)} analyzed ({fmt_pct(rec / busy)})"])
    rows.append(["Device time (sum of ops)", fmt_us(summ["device_time_us"])])
    rows.append(["Ops", f"{summ['ops']:,} in {summ['op_types']} op types"
                 + (f" · {inp['ranks']} ranks" if inp.get("ranks", 1) > 1 else "")])
    sev = _severity_counts(report["findings"])
    rows.append(["Findings", ", ".join(f"{n} {s}" for s, n in sev.items() if n) or "none"])
    rows.append(["Input", _Raw(code(inp["path"], 120) + " " + cell(
        f"({inp['layout']}, chip {chip_name(report)}, CANN {inp.get('cann_version') or '?'}, context "
        f"{inp.get('context') or 'unknown'})"))])
    graph = report.get("graph")
    if graph:
        join = graph.get("join") or {}
        share = join.get("matched_time_share")
        rows.append(["Model graph", _Raw(code(graph["source"], 120) + " " + cell(
            f"{graph['nodes']:,} nodes, {graph['edges']:,} edges"
            + (f", {fmt_pct(share, 0)} of device time matched" if share is not None else "")))])
    ran = {k["id"] for k in report["knowledge_bases"] if k["status"] == "ok"}
    by_kb = {k: v for k, v in (detail.get("by_kb") or {}).items() if k in ran}
    if by_kb:
        rows.append(["Sub-scores", ", ".join(f"{k} {v:.1f}" for k, v in sorted(by_kb.items()))])
    return md_table(["", ""], rows)


def _time_section(report: Mapping[str, Any]) -> str:
    """Where the analyzed time goes (the report's ``time``), with the source of each figure."""
    rows = time_rows(report.get("time"), report.get("platform"))
    if not rows:
        return ""
    table = md_table(["", "time", "share", "split"],
                     [[label, fmt_us(us), fmt_pct(share) if share is not None else "", detail]
                      for label, us, share, detail in rows], ["l", "r", "r", "l"])
    sources = time_sources(report.get("time"))
    return "### Time\n\n" + table + ("\n\n_Sources: " + cell("; ".join(sources), 2000) + "_" if sources else "")


def _rank_detail_section(report: Mapping[str, Any]) -> str:
    """Many ranks (``advisor.pipeline.rank_detail``): each per-rank figure's distribution and the ranks listed."""
    detail = report.get("rank_detail")
    rows, caption = rank_detail_rows(detail)
    if not detail:
        return ""
    table = md_table(list(RANK_DETAIL_HEADER), rows, ["l", "r", "r", "r", "r", "r"])
    return f"### Ranks ({detail['ranks']:,})\n\n" + table + "\n\n_" + cell(caption, 1200) + "_"


def _model_summary_section(report: Mapping[str, Any]) -> str:
    """The model summary (work, utilization, block dim, memory traffic, L2 hit rate), each row with its source."""
    rows, caption = model_summary_rows(report.get("model_summary"))
    if not rows:
        return ""
    table = md_table(["", "value", "source"], [[r.label, _Raw(cell(r.value, 400)), _Raw(cell(r.source, 300))] for r in rows])
    return "### Model summary\n\n" + table + (f"\n\n_{cell(caption, 400)}_" if caption else "")


def _kernels_section(report: Mapping[str, Any]) -> str:
    """Speed of light per kernel: each pipe of each side, busy share against saturation (kernel-dev runs)."""
    parts = []
    for k in kernel_sections(report.get("kernels")):
        table = md_table(["side", "unit", "busy", "of saturation", "blocks", "column"],
                         [[r.side, r.unit, f"{r.ratio:.1%}", f"{_bar(r.of_saturation)} {r.of_saturation:.0%}", r.blocks,
                           r.column] for r in k.rows], ["l", "l", "r", "l", "l", "l"])
        parts.append(f"**{cell(k.title, 300)}** — {cell(k.detail, 600)}\n\n{table}")
    return "### Kernels: speed of light\n\n" + "\n\n".join(parts) if parts else ""


def _bar(share: float, width: int = 10) -> str:
    full = max(0, min(width, round(share * width)))
    return "█" * full + "░" * (width - full)


def _severity_counts(findings: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    counts = {s: 0 for s in SEVERITY_ICON}
    for f in findings:
        counts[f["severity"]] = counts.get(f["severity"], 0) + 1
    return counts


def _findings_table(findings: Sequence[Mapping[str, Any]], top: int) -> str:
    rows = []
    for i, f in enumerate(findings[:top], 1):
        rows.append([str(i), _Raw(f"{SEVERITY_ICON[f['severity']]} {f['severity']}"), _Raw(code(f["rule"], 60)),
                     f["title"], len(f["ops"]), fmt_us(f["estimated_saving_us"]),
                     fmt_pct(f.get("share_of_device_time", 0.0))])
    out = md_table(["#", "severity", "rule", "finding", "ops", "est. saving", "% time"], rows,
                   ["r", "l", "l", "l", "r", "r", "r"])
    if len(findings) > top:
        out += f"\n\n_{len(findings) - top} more findings (lower estimated saving) are in the JSON / HTML report._"
    return out


def _evidence_table(name: str, table: Mapping[str, Any], limit: int = 10) -> str:
    """At most ``limit`` rows: a comment is for deciding, the HTML and JSON reports have the rest."""
    more = int(table.get("more_rows", 0)) + max(0, len(table["rows"]) - limit)
    view = evidence_table({"columns": table["columns"], "rows": table["rows"][:limit]})
    align = ["r" if n else "l" for n in view["numeric"]]
    text = md_table(view["columns"], view["rows"], align)
    title = "" if name == "table" else f"**{cell(evidence_label(name))}**\n\n"
    return title + text + (f"\n\n_{more} more rows not shown._" if more else "")


def _fence(text: str, lang: str = "") -> str:
    text = escaping.markdown_block(text)
    fence = "````" if "```" in text else "```"
    return f"{fence}{lang}\n{text}\n{fence}"


def finding_details(index: int, f: Mapping[str, Any]) -> str:
    """One finding as a collapsible block: recommendation, evidence, fix, command."""
    summary = escaping.markdown_html(f"{index}. {f['title']} — {fmt_us(f['estimated_saving_us'])}")
    parts = [f"<details><summary>{SEVERITY_ICON[f['severity']]} {summary}</summary>", ""]
    parts.append(f"**Rule** {code(f['rule'], 80)} ({cell(f['kb'])}, {f['severity']}, confidence "
                 f"{float(f.get('confidence', 0.7)):.0%})")
    parts.append("")
    parts.append(cell(f["recommendation"], 2000))
    if f.get("basis"):
        parts += ["", f"_Saving basis:_ {cell(f['basis'], 600)}"]
    if f["ops"]:
        shown = ", ".join(code(o, 100) for o in f["ops"][:12])
        parts += ["", f"**Ops ({len(f['ops'])})**: {shown}" + (f" … (+{len(f['ops']) - 12})" if len(f["ops"]) > 12
                                                             else "")]
    symptoms = symptom_lines(f, limit=10)
    if symptoms:
        parts += ["", "**Symptoms it explains** (same ops, folded here):", ""]
        parts += [f"- {cell(line, 400)}" for line in symptoms]
    ev = split_evidence(f.get("evidence"))
    if ev.scalars or ev.other:
        items = [f"{cell(k, 60)}: **{cell(v, 200)}**" for k, v in evidence_items(ev.scalars[:20])]
        items += [f"{cell(evidence_label(k), 60)}: {cell(v, 200)}"
                  + (" (drawn in the HTML report)" if k == "subgraph" else "") for k, v in ev.other[:10]]
        parts += ["", "**Evidence**: " + " · ".join(items)]
    tables = ev.tables
    if len(tables) > 1:  # roofline points repeat the main table; they are for the HTML chart
        tables = [(n, t) for n, t in tables if n not in POINT_KEYS] or tables
    for name, table in tables[:2]:
        parts += ["", _evidence_table(name, table)]
    fix = f.get("fix")
    if fix:
        parts += ["", f"**Fix** ({cell(fix['kind'])}): {cell(fix['summary'], 1000)}"]
        if fix.get("data"):
            data = json.dumps(fix["data"], indent=2, ensure_ascii=False)
            if len(data) > 3000:
                data = data[:3000] + "\n… (truncated; full data in the JSON report)"
            parts += ["", _fence(data, "json")]
        if fix.get("command"):
            parts += ["", _fence(fix["command"], "sh")]
    parts += ["", "</details>"]
    return "\n".join(parts)


def _op_types(report: Mapping[str, Any], top: int = 10) -> str:
    rows = [[_Raw(code(t["type"], 60)), t["count"], fmt_us(t["total_us"]), fmt_pct(t["share"])]
            for t in report["summary"].get("top_op_types", [])[:top]]
    if not rows:
        return ""
    return "### Time by op type\n\n" + md_table(["op type", "count", "total", "share"], rows, ["l", "r", "r", "r"])


def _kb_statuses(report: Mapping[str, Any]) -> str:
    icon = {"ok": "✅", "skipped": "⏭️", "failed": "❌"}
    rows = [[_Raw(code(k["id"], 60)), _Raw(f"{icon.get(k['status'], '')} {k['status']}"), k.get("findings", 0),
             cell(k.get("reason") or "", 300)] for k in report["knowledge_bases"]]
    if not rows:
        return ""
    return "### Knowledge bases\n\n" + md_table(["knowledge base", "status", "findings", "reason"], rows,
                                                ["l", "l", "r", "l"])


def _advice_notes(report: Mapping[str, Any], limit: int = 15) -> str:
    notes = advice_notes(report)
    if not notes:
        return ""
    rows = [[_Raw(code(rule, 60)), title, why] for rule, title, why in notes[:limit]]
    more = f"\n\n_{len(notes) - limit} more in the JSON report._" if len(notes) > limit else ""
    return f"### {ADVICE_NOTES_HEADING}\n\n" + md_table(["rule", "advice", "why not ranked"], rows) + more


def _input_notes(report: Mapping[str, Any], limit: int = 30) -> str:
    parts = []
    skipped = report["input"].get("files_skipped", [])
    if skipped:
        lines = [f"- {code(s['path'], 160)}: {cell(s['reason'], 300)}" for s in skipped[:limit]]
        if len(skipped) > limit:
            lines.append(f"- … {len(skipped) - limit} more")
        parts.append(f"### Skipped files ({len(skipped)})\n\n" + "\n".join(lines))
    notes = kb_notes(report)
    if notes:
        lines = [f"- {cell(n, 400)}" for n in notes[:limit]]
        if len(notes) > limit:
            lines.append(f"- … {len(notes) - limit} more")
        parts.append("### Notes\n\n" + "\n".join(lines))
    waived = report.get("waived") or []
    if waived:
        lines = [f"- {code(w['rule'], 60)} on {len(w['ops'])} op(s): {cell(w['waiver'].get('reason', ''), 200)}"
                 for w in waived[:limit]]
        parts.append(f"### Waived ({len(waived)})\n\n" + "\n".join(lines))
    return "\n\n".join(parts)


def _footer(report: Mapping[str, Any]) -> str:
    tool = report.get("tool", {})
    when = report.get("generated_at")
    return (f"<sub>advisor {cell(tool.get('version', ''))}" + (f" · {cell(when)}" if when else "")
            + " · score = 100 × (1 − S/T), S = estimated recoverable time, T = the analyzed window of the time model</sub>")


def render(report: dict[str, Any], max_chars: int = MAX_CHARS, top: int = 25, **_: Any) -> str:
    """The report as Markdown, strictly shorter than ``max_chars``."""
    findings = report["findings"]
    head = "\n\n".join(p for p in [_score_line(report), _key_numbers(report), _time_section(report),
                                       _rank_detail_section(report), _model_summary_section(report),
                                       _kernels_section(report)] if p)
    if findings:
        table = "### Top findings\n\n" + _findings_table(findings, top)
    else:
        table = "### Findings\n\nNo recoverable time found by the knowledge bases that ran."
    tail = "\n\n".join(p for p in [_advice_notes(report), _op_types(report), _kb_statuses(report),
                                     _input_notes(report), _footer(report)] if p)
    fixed = len(head) + len(table) + len(tail) + 300
    details: list[str] = []
    used = 0
    omitted = 0
    for i, f in enumerate(findings, 1):
        block = finding_details(i, f)
        if omitted or fixed + used + len(block) + 2 >= max_chars:
            omitted += 1
            continue
        details.append(block)
        used += len(block) + 2
    parts = [head, table]
    if details:
        parts.append("### Details\n\n" + "\n\n".join(details))
    if omitted:
        parts.append(f"_Details of {omitted} lower-ranked finding(s) left out to fit a pull-request comment; "
                     "see the JSON or HTML report._")
    parts.append(tail)
    text = "\n\n".join(parts) + "\n"
    if len(text) >= max_chars:  # only with absurdly long headers or a tiny max_chars
        note = "\n\n_Report truncated to fit a pull-request comment; see the JSON or HTML report._\n"
        text = text[: max(0, max_chars - len(note) - 1)]
        text = text[: text.rfind("\n") + 1] if "\n" in text else text
        text += note
    return text


# --- advisor compare --------------------------------------------------------------------------------------------

def _signed_us(value: float | None) -> str:
    if value is None:
        return "?"
    return ("+" if value > 0 else "") + fmt_us(value)


def _signed_pct(value: float | None) -> str:
    return "–" if value is None else f"{value:+.2f} %"


def render_comparison(cmp: dict[str, Any], max_chars: int = MAX_CHARS, top: int = 15, **_: Any) -> str:
    """An ``advisor compare`` result as Markdown for a pull-request comment."""
    reg = cmp["regression"]
    t = cmp["device_time"]
    head = ("## ❌ advisor compare: regression" if reg["regressed"] else "## ✅ advisor compare: no regression")
    lines = [head, ""]
    for reason in reg["reasons"]:
        lines.append(f"- {cell(reason, 300)}")
    if reg["reasons"]:
        lines.append("")
    b, n = cmp["base"], cmp["new"]
    rows = [
        ["Device time" + (" (busy)" if t["metric"] == "device_busy_us" else ""), fmt_us(t["base_us"]),
         fmt_us(t["new_us"]), f"{_signed_us(t['delta_us'])} ({_signed_pct(t['delta_pct'])})"],
        ["Sum of op durations", fmt_us(t["sum_of_ops"]["base_us"]), fmt_us(t["sum_of_ops"]["new_us"]),
         f"{_signed_us(t['sum_of_ops']['delta_us'])} ({_signed_pct(t['sum_of_ops']['delta_pct'])})"],
        ["Score", f"{cmp['score']['base']:.1f}", f"{cmp['score']['new']:.1f}", f"{cmp['score']['delta']:+.1f}"],
        ["Ops", f"{b['ops']:,}", f"{n['ops']:,}", f"{n['ops'] - b['ops']:+,}"],
        ["Findings", str(b["findings"]), str(n["findings"]), f"{n['findings'] - b['findings']:+d}"],
        ["Input", _Raw(code(b["path"], 80) + f" ({cell(b['layout'])})"),
         _Raw(code(n["path"], 80) + f" ({cell(n['layout'])})"), ""],
    ]
    lines.append(md_table(["", "base", "new", "delta"], rows, ["l", "r", "r", "r"]))
    limit = f"{reg['max_regression_pct']:g} %"
    lines += ["", f"<sub>Regression: device time more than {limit} above base"
              + (f", or score more than {reg['max_score_drop']:g} points below" if reg["max_score_drop"] is not None
                 else "") + ".</sub>"]

    movers = [r for r in cmp["op_types"] if r["delta_us"]][:top]
    if movers:
        mrows = [[_Raw(code(r["type"], 60)), r["base_count"] if r["base_count"] is not None else "?",
                  r["new_count"] if r["new_count"] is not None else "?", fmt_us(r["base_us"]), fmt_us(r["new_us"]),
                  _signed_us(r["delta_us"]), _signed_pct(r["delta_pct"])] for r in movers]
        lines += ["", "### Top movers by op type", "",
                  md_table(["op type", "base count", "new count", "base time", "new time", "delta", "delta %"],
                           mrows, ["l", "r", "r", "r", "r", "r", "r"])]
        if not cmp.get("op_types_complete", True):
            lines += ["", "_One side is a saved report with only its top op types; others are unknown._"]

    rules = [r for r in cmp["rules"] if r["saving_delta_us"] or r["base_findings"] != r["new_findings"]][:top]
    if rules:
        rrows = [[_Raw(code(r["rule"], 60)), f"{r['base_findings']} → {r['new_findings']}",
                  fmt_us(r["base_saving_us"]), fmt_us(r["new_saving_us"]), _signed_us(r["saving_delta_us"])]
                 for r in rules]
        lines += ["", "### Rules", "", md_table(["rule", "findings", "base saving", "new saving", "delta"], rrows,
                                                ["l", "r", "r", "r", "r"])]

    kernels = (cmp.get("kernels") or [])[:top]
    if kernels:

        krows = [[_Raw(code(k["name"], 80)), fmt_us(k["base_us"]) if k["base_us"] is not None else "?",
                  fmt_us(k["new_us"]) if k["new_us"] is not None else "?", _signed_us(k["delta_us"]),
                  _signed_pct(k["delta_pct"]),
                  (k["base_bound"] or "?") + (f" → {k['new_bound'] or '?'}" if k["new_bound"] != k["base_bound"]
                                              else ""),
                  kernel_moved_text(k), kernel_predicted_text(k)] for k in kernels]
        lines += ["", "### Kernels (tuning rounds)", "",
                  md_table(["kernel", "base", "new", "delta", "delta %", "bound", "moved", "estimated saving"],
                           krows, ["l", "r", "r", "r", "r", "l", "l", "l"])]

    fnd = cmp["findings"]
    lines += ["", f"### Findings: {len(fnd['new'])} new, {len(fnd['fixed'])} fixed, {len(fnd['unchanged'])} "
              "still present"]
    for label, key in (("New", "new"), ("Fixed", "fixed")):
        items = fnd[key]
        if not items:
            continue
        frows = [[_Raw(f"{SEVERITY_ICON[f['severity']]} {f['severity']}"), _Raw(code(f["rule"], 60)), f["title"],
                  f["ops_count"], fmt_us(f["saving_us"])] for f in items[:top]]
        lines += ["", f"**{label}**", "", md_table(["severity", "rule", "finding", "ops", "est. saving"], frows,
                                                   ["l", "l", "l", "r", "r"])]
        if len(items) > top:
            lines.append(f"\n_{len(items) - top} more in the JSON output._")
    if cmp.get("notes"):
        lines += ["", "### Notes", ""] + [f"- {cell(x, 400)}" for x in cmp["notes"]]
    text = "\n".join(lines) + "\n"
    if len(text) >= max_chars:
        note = "\n_Truncated to fit a pull-request comment; see the JSON output._\n"
        text = text[: max_chars - len(note) - 1]
        text = text[: text.rfind("\n") + 1] + note
    return text
