"""Show a fix run: a rich table for people, a JSON document for machines."""

from __future__ import annotations

import json
from typing import Any

from rich import box
from rich.console import Console
from rich.table import Table

from advisor.common.escaping import rich_text, terminal_line
from advisor.fix.atc_config import AtcConfig
from advisor.fix.pipeline import KEPT, REJECTED, FixRun, StepReport
from advisor.fix.rewrites import REWRITES

_STYLE = {KEPT: "green", REJECTED: "red"}


def fix_json(run: FixRun, meta: dict[str, Any]) -> str:
    """The machine-readable result of ``advisor fix --apply``."""
    doc = {**meta, "rewrites": [s.to_dict() for s in run.steps], "notes": run.notes,
           "total": run.total.to_dict() if run.total else None}
    return json.dumps(doc, indent=2, allow_nan=False) + "\n"


WHY_COLUMN_WIDTH = 140
"""Below this console width a verified run's reasons go under the table (beside five numeric columns they would
be folded one word per line)."""


def print_fix(run: FixRun, console: Console, title: str, verified: bool) -> None:
    """One row per rewrite: matches, difference, latency, kept or rejected and why. Numbers are never wrapped."""
    t = Table(title=title, box=box.SIMPLE_HEAD, title_justify="left")
    t.add_column("rewrite", no_wrap=True)
    t.add_column("matches", justify="right", no_wrap=True)
    if verified:
        for col in ("max abs diff", "max rel diff", "before ms", "after ms", "gain"):
            t.add_column(col, justify="right", no_wrap=True)
    t.add_column("result", no_wrap=True)
    why_below = verified and console.width < WHY_COLUMN_WIDTH
    if not why_below:
        t.add_column("why", overflow="fold", ratio=1, min_width=20)
    steps = [*run.steps, *([run.total] if run.total else [])]
    for s in steps:
        row = [s.rule if s is not run.total else "[bold]all kept[/bold]", str(len(s.matches)) if s.rule != "total" else ""]
        if verified:
            row += _measured(s)
        row += [f"[{_STYLE.get(s.status, 'dim')}]{s.status}[/]"]
        if not why_below:
            row += [rich_text(_why(s))]
        t.add_row(*row)
    console.print(t)
    if why_below:
        for s in steps:
            if _why(s):
                console.print(f"  {s.rule if s is not run.total else 'all kept'}: {rich_text(_why(s))}", highlight=False)
    for s in run.steps:
        if s.matches:
            shown = ", ".join(s.matches[:6]) + (f", … (+{len(s.matches) - 6})" if len(s.matches) > 6 else "")
            console.print(f"  {s.rule}: {rich_text(shown)}", highlight=False)
        for n in s.notes:
            console.print(f"  {s.rule}: [dim]{rich_text(n)}[/dim]", highlight=False)
    for n in run.notes:
        console.print(f"  note: {rich_text(n)}", highlight=False)


def _measured(s: StepReport) -> list[str]:
    def num(v: float | None, fmt: str) -> str:
        return "–" if v is None else format(v, fmt)

    gain = s.gain_pct
    return [num(s.max_abs_diff, ".3g"), num(s.max_rel_diff, ".3g"), num(s.latency_before_ms, ".3f"),
            num(s.latency_after_ms, ".3f"), "–" if gain is None else f"{gain:+.1f}%"]


def _why(s: StepReport) -> str:
    if s.rule == "total":
        return "original model vs final model"
    if s.reason:
        return s.reason
    if s.status == KEPT and s.rule in REWRITES and REWRITES[s.rule].numerics_preserving:
        return "numerics preserved"
    return ""


def print_rewrites(console: Console) -> None:
    """The registry, for ``advisor fix`` without a model: each rewrite's description with its parameters under it
    (one text column, so it stays readable at 80 columns)."""
    t = Table(title="ONNX rewrites (advisor fix MODEL --apply RULE[,RULE] -o OUT)", box=box.SIMPLE_HEAD,
              title_justify="left")
    t.add_column("rule", no_wrap=True)
    t.add_column("numerics", no_wrap=True)
    t.add_column("what it does (params)", overflow="fold", ratio=1)
    for r in REWRITES.values():
        params = "\n".join(f"[dim]{r.name}.{p.name}={p.default}: {p.help}[/dim]" for p in r.params)
        t.add_row(r.name, "preserved" if r.numerics_preserving else "[yellow]approximate[/]",
                  r.description + (f"\n{params}" if params else ""))
    console.print(t)


def atc_json(cfg: AtcConfig, out_dir: str, written: list[str]) -> str:
    return json.dumps({"output_dir": out_dir, "written": written, "command": cfg.command or None,
                       "sources": cfg.sources, "onnx_rewrites": cfg.rewrites, "notes": cfg.notes,
                       "assumptions": cfg.assumptions}, indent=2) + "\n"


def print_atc(cfg: AtcConfig, console: Console, written: list[str]) -> None:
    """What was written and why; every line from the report is one line on the terminal (controls visible)."""
    if not written:
        console.print("no fusion-switch, aipp-config or atc-option fix in the report: nothing to write")
    for path in written:
        name = path.rsplit("/", 1)[-1]
        src = cfg.sources.get(name)
        console.print(_line(f"wrote {path}" + (f"  (from {', '.join(src)})" if src else "")), highlight=False)
    if cfg.command:
        console.print("\n" + _line(cfg.command), highlight=False, soft_wrap=True)
    for cmd in cfg.rewrites:
        console.print(f"ONNX rewrite suggested by the report: {_line(cmd)}", highlight=False, soft_wrap=True)
    for a in cfg.assumptions:
        console.print(f"assumption: {_line(a)}", highlight=False)
    for n in cfg.notes:
        console.print(f"note: {_line(n)}", highlight=False)


def _line(text: str) -> str:
    return rich_text(terminal_line(text))
