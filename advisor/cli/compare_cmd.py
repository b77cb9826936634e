"""``advisor compare BASE NEW``: diff two runs (profiles or saved JSON reports) and gate on regression.

Exit codes: 0 no regression, 1 NEW regressed beyond the limits, 2 unusable input (as every command).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import click
import ijson
import pandas as pd
from rich import box
from rich.console import Console, Group
from rich.table import Table
from rich.text import Text

from advisor.analysis import AnalysisOptions, run_analysis
from advisor.cli.common import check_output, output_target, write_atomic
from advisor.compare import Side, compare, op_types_from_frame, op_types_from_report
from advisor.errors import InputError, UsageError
from advisor.escaping import deep, terminal, terminal_line
from advisor.report.common import fmt_us
from advisor.report.json_report import load as load_saved_report

_REPORT_KEYS = {"schema_version", "tool", "generated_at", "input", "platform", "summary", "graph", "score",
                "score_detail", "knowledge_bases", "findings", "waived", "cluster"}
_EXT = {"terminal": "txt", "json": "json", "markdown": "md"}


def is_saved_report(path: Path) -> bool:
    """A ``.json`` file whose first top-level key is a report key. Only the first tokens are read, so a
    multi-GB trace JSON (a profile) is not loaded to find out."""
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    try:
        with path.open("rb") as fh:
            events = ijson.parse(fh)
            prefix, event, _ = next(events)
            if event != "start_map":
                return False
            prefix, event, value = next(events)
            return event == "map_key" and value in _REPORT_KEYS
    except (ijson.JSONError, StopIteration, OSError, UnicodeDecodeError):
        return False




def load_side(path: Path, graph: Path | None, options: AnalysisOptions, label: str) -> Side:
    """Analyze a profile (full per-op-type table from the profile) or load a saved report."""
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if is_saved_report(path):
        if graph is not None:
            raise UsageError(f"--graph-{label} applies to a profile, but {path} is a saved report")
        report = load_saved_report(path)
        return Side(report, op_types_from_report(report), "report")
    result = run_analysis(path, graph, options)
    ranks = getattr(result, "ranks", None) or []
    frames = [r.by_type for r in ranks if getattr(r, "by_type", None) is not None and len(r.by_type)]
    if frames:
        by_type = pd.concat(frames).groupby(level=0).sum()
        table = op_types_from_frame(by_type, result.report["summary"]["device_time_us"])
    else:
        table = op_types_from_report(result.report)
    return Side(result.report, table, "profile")


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


def render(cmp: dict[str, Any], fmt: str) -> str:
    if fmt == "json":
        return json.dumps(cmp, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
    if fmt == "markdown":
        from advisor.report.markdown import render_comparison

        return render_comparison(cmp)
    import io

    buf = io.StringIO()
    Console(file=buf, width=120, force_terminal=False, color_system=None).print(build_terminal(cmp))
    return buf.getvalue()




@click.command("compare")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--graph-base", type=click.Path(path_type=Path), help="Model graph for BASE (when BASE is a profile).")
@click.option("--graph-new", type=click.Path(path_type=Path), help="Model graph for NEW (when NEW is a profile).")
@click.option("--max-regression", type=click.FloatRange(min=0), default=2.0, show_default=True, metavar="PCT",
              help="Exit 1 when NEW's device time is more than PCT % above BASE's.")
@click.option("--max-score-drop", type=click.FloatRange(min=0), metavar="POINTS",
              help="Also exit 1 when NEW's score is more than POINTS below BASE's.")
@click.option("--format", "fmt", type=click.Choice(["terminal", "json", "markdown"]), default="terminal",
              show_default=True)
@click.option("-o", "--output", "out", type=click.Path(),
              help="Write here instead of stdout (a directory gets a timestamped file).")
@click.option("--rules", "rules_file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="YAML overriding rule values, used for both runs.")
@click.option("--chip", help="SoC to use for peaks when a profile does not say.")
def command(base: Path, new: Path, graph_base: Path | None, graph_new: Path | None, max_regression: float,
            max_score_drop: float | None, fmt: str, out: str | None, rules_file: Path | None,
            chip: str | None) -> None:
    """Compare two runs. BASE and NEW are profiles (any layout `advisor analyze` reads; they may differ) or
    saved JSON reports of `advisor analyze --format json`.

    Regression: NEW's device busy time is more than --max-regression % above BASE's, or (with
    --max-score-drop) NEW's score dropped by more than that. Exit 0 when not regressed, 1 when regressed,
    2 on unusable input.
    """
    options = AnalysisOptions(rules_file=rules_file, chip=chip)
    target = None if out is None else output_target(out, _EXT[fmt], [base, new, graph_base, graph_new, rules_file],
                                                    prefix="advisor_compare")
    base_side = load_side(base, graph_base, options, "base")
    new_side = load_side(new, graph_new, options, "new")
    cmp = compare(base_side, new_side, max_regression, max_score_drop)
    if fmt == "terminal" and out is None:
        Console().print(build_terminal(cmp))
    else:
        text = render(cmp, fmt)
        if target is None:
            click.echo(text, nl=False)
        else:
            check_output(target, [f for side in (base_side, new_side)
                                  for f in side.report.get("input", {}).get("files_read", [])])
            write_atomic(target, text)
            click.echo(f"advisor: wrote {terminal_line(target)}", err=True)
    if cmp["regression"]["regressed"]:
        click.echo(terminal_line("advisor: regression: " + "; ".join(cmp["regression"]["reasons"])), err=True)
        sys.exit(1)
