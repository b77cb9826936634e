"""``advisor graph FILE``: what a model graph holds -- op types, engines, formats, fusion passes, subgraphs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from advisor.cli.console import make_console
from advisor.common.escaping import deep, rich_text
from advisor.common.util import paused_gc
from advisor.graph.load import load_graph
from advisor.graph.summary import summarize

TOP = 15


@click.command("graph")
@click.argument("file", type=click.Path(path_type=Path))
@click.option("--format", "fmt", type=click.Choice(["terminal", "json"]), default="terminal", show_default=True,
              help="Output format (json goes to stdout).")
def command(file: Path, fmt: str) -> None:
    """Summarize a model graph: OM JSON (atc --mode=1), GE dump (ge_proto_*.txt, ge_onnx_*.pbtxt) or .onnx.

    FILE may also be a profile directory holding a graph dump.
    """
    with paused_gc():
        summary = summarize(load_graph(file))
    if fmt == "json":
        click.echo(json.dumps(summary, indent=2, ensure_ascii=False))
    else:
        render(summary)


def _table(title: str, counts: dict[str, int], label: str, total: int | None = None) -> Any:
    from rich.table import Table

    t = Table(title=title, title_justify="left")
    t.add_column(label)
    t.add_column("count", justify="right")
    if total:
        t.add_column("share", justify="right")
    items = list(counts.items())
    for k, n in items[:TOP]:
        row = [k, str(n)] + ([f"{100 * n / total:.1f}%"] if total else [])
        t.add_row(*row)
    if len(items) > TOP:
        rest = sum(n for _, n in items[TOP:])
        t.add_row(f"... {len(items) - TOP} more", str(rest), *([f"{100 * rest / total:.1f}%"] if total else []))
    return t


def render(s: dict[str, Any]) -> None:
    """Print the summary as rich tables."""
    from rich.table import Table

    s = deep(s, rich_text)  # node and op type names come from the file: no controls, no markup
    console = make_console()
    head = Table.grid(padding=(0, 2))
    head.add_column(style="bold")
    head.add_column()
    head.add_row("graph", f"{s['name']}  ({s['format']})")
    head.add_row("source", s["source"])
    if s.get("soc_version"):
        head.add_row("soc", s["soc_version"])
    head.add_row("nodes", str(s["nodes"]))
    head.add_row("edges", f"{s['edges']}  ({s['data_edges']} data, {s['control_edges']} control)")
    if s.get("unresolved_inputs"):
        head.add_row("unresolved inputs", str(s["unresolved_inputs"]))
    head.add_row("TransData", str(s["transdata"]))
    head.add_row("Cast", str(s["cast"]))
    head.add_row("format changes", str(s["format_changes"]["total"]))
    head.add_row("fused nodes", str(s["fused_nodes"]))
    console.print(head)

    console.print(_table("Op types", s["by_type"], "type", s["nodes"]))
    console.print(_table("Engines", s["by_engine"], "engine", s["nodes"]))
    if s["formats"]:
        console.print(_table("Output formats", s["formats"], "format"))
    pairs = s["format_changes"]["pairs"]
    if pairs:
        t = Table(title="Format changes along data edges", title_justify="left")
        t.add_column("producer format")
        t.add_column("consumer format")
        t.add_column("edges", justify="right")
        for p in pairs[:TOP]:
            t.add_row(p["from"], p["to"], str(p["count"]))
        console.print(t)
    if s["fusion_passes"]:
        console.print(_table("Graph-fusion passes (pass_name)", s["fusion_passes"], "pass"))
    if s["ub_fusion_passes"]:
        console.print(_table("UB-fusion passes (pass_name_ub)", s["ub_fusion_passes"], "pass"))
    if s["subgraphs"]:
        t = Table(title="Subgraphs", title_justify="left")
        t.add_column("name")
        t.add_column("nodes", justify="right")
        t.add_column("run by")
        for sub in s["subgraphs"]:
            t.add_row(sub["name"], str(sub["nodes"]), sub["parent"] or "-")
        console.print(t)
