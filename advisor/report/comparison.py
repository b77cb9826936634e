"""A comparison of two runs (``advisor.compare.runs.compare``) as text: terminal, JSON or Markdown."""

from __future__ import annotations

import io
import json
from typing import Any

from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from advisor.common.escaping import deep, json_text, terminal
from advisor.report.common import fmt_us
from advisor.report.kernel_rows import kernel_moved_text, kernel_predicted_text


def _delta_text(us: float | None, pct: float | None = None, worse_if_positive: bool = True) -> Text:
    if us is None:
        return Text("?", style="dim")
    sign = "+" if us > 0 else ""
    style = ("red" if us > 0 else "green") if worse_if_positive else ("green" if us > 0 else "red")
    text = f"{sign}{fmt_us(us)}" + (f" ({pct:+.2f} %)" if pct is not None else "")
    return Text(text, style=style if us else "dim")


def build_terminal(cmp: dict[str, Any], top: int = 10) -> Group:
    cmp = deep(cmp, terminal)  # names come from the inputs: controls made visible, cells are Text (not markup)
    reg = cmp["regression"]
    parts: list[Any] = []
    head = Text("REGRESSION" if reg["regressed"] else "no regression", style="bold red" if reg["regressed"]
                else "bold green")
    parts.append(head)
    for r in reg["reasons"]:
        parts.append(Text(f"  {r}", style="red"))
    t = cmp["device_time"]
    kt = Table(box=box.SIMPLE_HEAD)
    for c, j in (("", "left"), ("base", "right"), ("new", "right"), ("delta", "right")):
        kt.add_column(c, justify=j)
    kt.add_row("device time" + (" (busy)" if t["metric"] == "device_busy_us" else ""), fmt_us(t["base_us"]),
               fmt_us(t["new_us"]), _delta_text(t["delta_us"], t["delta_pct"]))
    s = t["sum_of_ops"]
    kt.add_row("sum of op durations", fmt_us(s["base_us"]), fmt_us(s["new_us"]), _delta_text(s["delta_us"],
                                                                                          s["delta_pct"]))
    sc = cmp["score"]
    kt.add_row("score", f"{sc['base']:.1f}", f"{sc['new']:.1f}",
               Text(f"{sc['delta']:+.1f}", style="green" if sc["delta"] > 0 else "red" if sc["delta"] < 0 else "dim"))
    kt.add_row("ops", f"{cmp['base']['ops']:,}", f"{cmp['new']['ops']:,}", f"{cmp['new']['ops'] - cmp['base']['ops']:+,}")
    parts.append(kt)
    parts.append(Text(f"base {cmp['base']['path']} ({cmp['base']['layout']})\nnew  {cmp['new']['path']} "
                      f"({cmp['new']['layout']})", style="dim"))
    movers = [r for r in cmp["op_types"] if r["delta_us"]][:top]
    if movers:
        mt = Table(box=box.SIMPLE_HEAD, title="Top movers by op type", title_justify="left")
        for c, j in (("op type", "left"), ("count", "right"), ("base", "right"), ("new", "right"),
                     ("delta", "right")):
            mt.add_column(c, justify=j)
        for r in movers:
            mt.add_row(Text(str(r["type"])), f"{r['base_count']} → {r['new_count']}", fmt_us(r["base_us"]), fmt_us(r["new_us"]),
                       _delta_text(r["delta_us"], r["delta_pct"]))
        parts.append(mt)
    rules = [r for r in cmp["rules"] if r["saving_delta_us"] or r["base_findings"] != r["new_findings"]][:top]
    if rules:
        rt = Table(box=box.SIMPLE_HEAD, title="Rules (estimated recoverable time)", title_justify="left")
        for c, j in (("rule", "left"), ("findings", "right"), ("base", "right"), ("new", "right"),
                     ("delta", "right")):
            rt.add_column(c, justify=j)
        for r in rules:
            rt.add_row(Text(str(r["rule"])), f"{r['base_findings']} → {r['new_findings']}", fmt_us(r["base_saving_us"]),
                       fmt_us(r["new_saving_us"]), _delta_text(r["saving_delta_us"]))
        parts.append(rt)
    kernel_table = _kernels_table(cmp.get("kernels") or [], top)
    if kernel_table is not None:
        parts.append(kernel_table)
    f = cmp["findings"]
    parts.append(Text(f"findings: {len(f['new'])} new, {len(f['fixed'])} fixed, {len(f['unchanged'])} still present",
                      style="bold"))
    for label, key, style in (("new", "new", "red"), ("fixed", "fixed", "green")):
        for item in f[key][:top]:
            parts.append(Text(f"  {label:5} [{item['severity']}] {item['rule']}: {item['title']} "
                              f"({fmt_us(item['saving_us'])})", style=style))
    for n in cmp.get("notes", []):
        parts.append(Text(f"note: {n}", style="yellow"))
    return Group(*parts)


def _kernels_table(kernels: list[dict[str, Any]], top: int) -> Table | None:
    """Per kernel: time, bound, the metrics that moved, the base report's estimated saving against the measured."""
    if not kernels:
        return None
    t = Table(box=box.SIMPLE_HEAD, title="Kernels (tuning rounds)", title_justify="left", expand=True)
    for c, j in (("kernel", "left"), ("base", "right"), ("new", "right"), ("delta", "right"), ("bound", "left"),
                 ("moved", "left"), ("estimated saving", "left")):
        t.add_column(c, justify=j, overflow="fold")  # type: ignore[arg-type]
    for k in kernels[:top]:
        bound = k["base_bound"] or "?"
        if k["new_bound"] != k["base_bound"]:
            bound += f" → {k['new_bound'] or '?'}"
        t.add_row(Text(k["name"]), fmt_us(k["base_us"]) if k["base_us"] is not None else "?",
                  fmt_us(k["new_us"]) if k["new_us"] is not None else "?", _delta_text(k["delta_us"], k["delta_pct"]),
                  Text(bound), Text(kernel_moved_text(k)), Text(kernel_predicted_text(k)))
    return t


def render(cmp: dict[str, Any], fmt: str) -> str:
    """The comparison in ``fmt`` (json, markdown, terminal without colour)."""
    if fmt == "json":
        return json_text(json.dumps(cmp, indent=2, ensure_ascii=False, allow_nan=False)) + "\n"
    if fmt == "markdown":
        from advisor.report.markdown import render_comparison

        return render_comparison(cmp)
    buf = io.StringIO()
    Console(file=buf, width=120, force_terminal=False, color_system=None).print(build_terminal(cmp))
    return buf.getvalue()
