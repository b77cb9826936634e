"""Terminal report (rich): score first, then the ranked findings, then what to do about the top ones."""

from __future__ import annotations

import io
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from advisor.common.escaping import deep, terminal
from advisor.common.units import fmt_us
from advisor.report.common import ADVICE_NOTES_HEADING, advice_notes, chip_name, symptom_lines, time_rows, time_sources
from advisor.report.kernel_rows import kernel_sections
from advisor.report.summary_rows import RANK_DETAIL_HEADER, model_summary_rows, rank_detail_rows

_SEVERITY_STYLE = {"critical": "bold red", "major": "red", "minor": "yellow", "info": "cyan"}


def _us(value: float) -> str:
    return fmt_us(value)


def _one_per_line(text: str) -> str:
    """A list written "a 1.2 ms, b 3.4 ms" one item a line: in a narrow column a wrapped line would part a number
    from its unit."""
    parts, depth, start = [], 0, 0
    for i, c in enumerate(text):
        depth += (c == "(") - (c == ")")
        if depth == 0 and text.startswith(", ", i):
            parts.append(text[start:i])
            start = i + 2
    parts.append(text[start:])
    return "\n".join(p for p in parts if p)


def _score_style(score: float) -> str:
    return "bold green" if score >= 85 else "bold yellow" if score >= 65 else "bold red"


def build(report: dict[str, Any], top: int = 20) -> Group:
    # every string comes from the input or a plugin: controls made visible; cells, titles and captions are Text,
    # never markup (``[link=...]`` in a str would become a terminal hyperlink)
    report = deep(report, terminal)
    parts: list[Any] = [_header(report)]
    time_table = _time_table(report.get("time"), report.get("platform"))
    if time_table is not None:
        parts.append(time_table)
    ranks_table = _rank_detail_table(report.get("rank_detail"))
    if ranks_table is not None:
        parts.append(ranks_table)
    summary_table = _model_summary_table(report.get("model_summary"))
    if summary_table is not None:
        parts.append(summary_table)
    parts.extend(_kernel_tables(report.get("kernels")))
    findings = report["findings"]
    if findings:
        parts.append(_findings_table(findings, top))
        parts.extend(_finding_panel(i, f) for i, f in enumerate(findings[:3], 1))
    else:
        parts.append(Text("No recoverable time found by the knowledge bases that ran.", style="green"))
    advice = _advice_notes(report)
    if advice is not None:
        parts.append(advice)
    parts.extend(_run_notes(report))
    return Group(*parts)


def _advice_notes(report: dict[str, Any], limit: int = 10) -> Table | None:
    """The report's notes: advice with no, or an immaterial, measured saving, listed apart from the findings."""
    notes = advice_notes(report)
    if not notes:
        return None
    t = Table(box=box.SIMPLE_HEAD, title=ADVICE_NOTES_HEADING, title_justify="left", expand=True)
    t.add_column("rule", no_wrap=True, style="dim")
    t.add_column("advice", ratio=2, overflow="fold")
    t.add_column("why not ranked", ratio=1, overflow="fold", style="dim")
    for rule, title, why in notes[:limit]:
        t.add_row(Text(rule), Text(title), Text(why))
    if len(notes) > limit:
        t.caption = f"{len(notes) - limit} more in the JSON report ('notes')"
        t.caption_justify = "left"
    return t


def _header(report: dict[str, Any]) -> Panel:
    """Score, input, graph and cluster in one panel."""
    inp, summ = report["input"], report["summary"]
    head = Text()
    head.append("Score ", style="bold")
    head.append(f"{report['score']:.1f}", style=_score_style(report["score"]))
    head.append(" / 100", style="dim")
    detail = report.get("score_detail", {})
    if detail:
        window = detail.get("window_us", detail.get("device_busy_us", 0))
        head.append(f"   recoverable {_us(detail.get('recoverable_us', 0))} of {_us(window)} analyzed", style="dim")
    lines = [head,
             Text(inp["path"], style="dim"),
             Text(f"layout {inp['layout']}  ·  chip {chip_name(report)}"
                  f"  ·  CANN {inp.get('cann_version') or '?'}  ·  context {inp.get('context') or 'unknown'}",
                  style="dim"),
             Text(f"{summ['ops']:,} ops · {summ['op_types']} op types · {_device_time(summ)}"
                  + (f" · {inp['ranks']} ranks" if inp.get("ranks", 1) > 1 else ""), style="dim")]
    graph = report.get("graph")
    if graph:
        join = graph.get("join") or {}
        share = join.get("matched_time_share")
        lines.append(Text(f"graph {graph['source']} · {graph['nodes']:,} nodes · {graph['edges']:,} edges"
                          + (f" · {share:.0%} of device time matched to graph nodes" if share is not None else ""),
                          style="dim"))
    cluster = report.get("cluster")
    if cluster:
        lines.append(Text(f"slowest rank {cluster['slowest_rank']}: {cluster['slowest_reason']} "
                          f"+{_us(cluster.get('slowest_excess_us', 0))} over the other ranks' median", style="dim"))
    return Panel(Group(*lines), title="advisor", title_align="left", box=box.ROUNDED)


def _findings_table(findings: list[dict[str, Any]], top: int) -> Table:
    t = Table(box=box.SIMPLE_HEAD, title=f"Findings ({len(findings)}), largest estimated saving first",
              title_justify="left", expand=True)
    t.add_column("#", justify="right", style="dim", no_wrap=True)
    t.add_column("severity", no_wrap=True)
    t.add_column("finding", ratio=1, overflow="fold")
    t.add_column("saving", justify="right", no_wrap=True)
    t.add_column("% time", justify="right", no_wrap=True)
    for i, f in enumerate(findings[:top], 1):
        cell = Text(f["title"])
        where = f"rank {f['rank']} · " if f.get("rank") is not None else (
            f"ranks {', '.join(map(str, f['ranks']))} · " if f.get("ranks") else "")
        cell.append(f"\n{where}{f['rule']} · {len(f['ops'])} op(s)", style="dim")
        if f.get("symptoms"):
            cell.append(f" · explains {len(f['symptoms'])} symptom(s)", style="dim")
        t.add_row(str(i), Text(f["severity"], style=_SEVERITY_STYLE[f["severity"]]), cell,
                  _us(f["estimated_saving_us"]), f"{f.get('share_of_device_time', 0) * 100:.1f}")
    if len(findings) > top:
        t.caption = f"{len(findings) - top} more findings in the JSON / HTML report"
    return t


def _finding_panel(i: int, f: dict[str, Any]) -> Panel:
    """One of the top findings in full: recommendation, fix, basis, symptoms, ops."""
    body = [Text(f["recommendation"])]
    if f.get("fix"):
        fix = f["fix"]
        body.append(Text(f"fix ({fix['kind']}): {fix['summary']}", style="green"))
        if fix.get("command"):
            body.append(Text(f"  $ {fix['command']}", style="bold"))
    body.append(Text(f"saving basis: {f.get('basis', '')}", style="dim"))
    for line in symptom_lines(f):
        body.append(Text(f"explains {line}", style="dim"))
    ops = ", ".join(f["ops"][:6]) + (f" … (+{len(f['ops']) - 6})" if len(f["ops"]) > 6 else "")
    if ops:
        body.append(Text(f"ops: {ops}", style="dim"))
    return Panel(Group(*body), title=Text(f"{i}. {f['title']}"), title_align="left", box=box.ROUNDED,
                 border_style=_SEVERITY_STYLE[f["severity"]])


def _run_notes(report: dict[str, Any]) -> list[Any]:
    """Knowledge bases that did not run, skipped files, notes and waivers."""
    parts: list[Any] = []
    not_ok = [k for k in report["knowledge_bases"] if k["status"] != "ok"]
    if not_ok:
        kt = Table(box=box.SIMPLE, title="Knowledge bases not run", title_justify="left")
        kt.add_column("id")
        kt.add_column("status")
        kt.add_column("reason")
        for k in not_ok:
            kt.add_row(Text(k["id"]), Text(k["status"], style="red" if k["status"] == "failed" else "yellow"),
                       Text(k["reason"]))
        parts.append(kt)
    notes = [n for k in report["knowledge_bases"] for n in k.get("notes", [])] + report["input"].get("notes", [])
    skipped = report["input"].get("files_skipped", [])
    if skipped or notes:
        lines = [Text(f"skipped {s['path']}: {s['reason']}", style="yellow") for s in skipped[:10]]
        lines += [Text(f"note: {n}", style="dim") for n in notes[:15]]
        parts.append(Group(*lines))
    if report.get("waived"):
        parts.append(Text(f"{len(report['waived'])} finding(s) waived (see the JSON report).", style="dim"))
    return parts


def _time_table(time: dict[str, Any] | None, platform: dict[str, Any] | None) -> Table | None:
    """Where the analyzed time goes: the window and its split, each figure's source under the table."""
    rows = time_rows(time, platform)
    if not rows:
        return None
    t = Table(box=box.SIMPLE_HEAD, title="Time", title_justify="left", expand=True)
    t.add_column("", no_wrap=True)
    t.add_column("time", justify="right", no_wrap=True)
    t.add_column("share", justify="right", no_wrap=True)
    t.add_column("split", ratio=1, overflow="fold", style="dim")
    for label, us, share, detail in rows:
        t.add_row(Text(label), _us(us), f"{share * 100:.1f}%" if share is not None else "", Text(_one_per_line(detail)))
    sources = time_sources(time)
    if sources:
        t.caption = Text("sources: " + "; ".join(sources))
        t.caption_justify = "left"
    return t


def _kernel_tables(kernels: list[dict[str, Any]] | None) -> list[Table]:
    """Speed of light per kernel (kernel-dev runs): each pipe of each side, busy share and a bar against saturation
    (the columns the figures come from are in the JSON and Markdown reports)."""
    out = []
    for k in kernel_sections(kernels):
        t = Table(box=box.SIMPLE_HEAD, title=f"Speed of light: {k.title}", title_justify="left", expand=True)
        t.add_column("side", overflow="fold")
        t.add_column("unit", no_wrap=True)
        t.add_column("busy", justify="right", no_wrap=True)
        t.add_column("of saturation", no_wrap=True)
        t.add_column("blocks", style="dim", no_wrap=True)
        last = None
        for r in k.rows:
            full = max(0, min(12, round(r.of_saturation * 12)))
            bar = Text("\u2588" * full, style="red" if r.of_saturation >= 1 else "cyan")
            bar.append("\u2591" * (12 - full), style="dim")
            bar.append(f" {r.of_saturation:.0%}")
            t.add_row(Text(r.side if r.side != last else ""), Text(r.unit), Text(f"{r.ratio:.1%}"), bar,
                      Text(r.blocks))
            last = r.side
        t.caption = k.detail
        t.caption_justify = "left"
        out.append(t)
    return out


def _rank_detail_table(detail: dict[str, Any] | None) -> Table | None:
    """Many ranks: each per-rank figure's distribution over every rank, and which ranks the report lists."""
    rows, caption = rank_detail_rows(detail)
    if not rows or not detail:
        return None
    t = Table(box=box.SIMPLE_HEAD, title=f"Ranks ({detail['ranks']:,})", title_justify="left", expand=True)
    for i, head in enumerate(RANK_DETAIL_HEADER):
        t.add_column(head, justify="left" if i == 0 else "right", no_wrap=i > 0)
    for row in rows:
        t.add_row(*(Text(c) for c in row))
    t.caption = Text(caption)
    t.caption_justify = "left"
    return t


def _model_summary_table(ms: dict[str, Any] | None) -> Table | None:
    """What the model does on the chip (work, utilization, block dim, traffic, L2), each with its source."""
    rows, caption = model_summary_rows(ms)
    if not rows:
        return None
    t = Table(box=box.SIMPLE_HEAD, title="Model summary", title_justify="left", expand=True)
    t.add_column("", no_wrap=True)
    t.add_column("value (source)", ratio=1, overflow="fold")
    for row in rows:
        cell = Text(_one_per_line(row.value))
        cell.append(f"\n{row.source}", style="dim")
        t.add_row(Text(row.label), cell)
    if caption:
        t.caption = Text(caption)
        t.caption_justify = "left"
    return t


def render_text(report: dict[str, Any], width: int = 120, color: bool = False, **_: Any) -> str:
    buf = io.StringIO()
    console = Console(file=buf, width=width, force_terminal=color, color_system="auto" if color else None)
    console.print(build(report))
    return buf.getvalue()


def print_report(report: dict[str, Any], console: Console) -> None:
    console.print(build(report))


def _device_time(summ: dict) -> str:
    """The summed task time, and the busy time beside it where overlapping streams make the sum larger."""
    total, busy = float(summ.get("device_time_us") or 0.0), summ.get("device_busy_us")
    if busy is not None and total > float(busy) * 1.05:
        return f"task time {_us(total)} summed over streams (device busy {_us(float(busy))})"
    return f"device time {_us(total)}"
