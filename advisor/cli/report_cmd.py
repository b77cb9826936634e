"""``advisor report SAVED.json``: render a saved JSON report in another format (analyze once, render many)."""

from __future__ import annotations

from pathlib import Path

import click

from advisor.escaping import terminal_line
from advisor.output import output_target, write_atomic
from advisor.report import EXTENSIONS, render
from advisor.report.json_report import load


@click.command("report")
@click.argument("saved", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["terminal", "json", "markdown", "html", "junit"]),
              default="markdown", show_default=True)
@click.option("-o", "--output", "out", type=click.Path(), help="Write here (a directory gets a timestamped name).")
@click.option("--fail-on", type=click.Choice(["critical", "major", "minor", "info"]), default="major",
              show_default=True, help="JUnit: a rule's test case fails at this severity or worse.")
def command(saved: Path, fmt: str, out: str | None, fail_on: str) -> None:
    """Render a saved JSON report (from `advisor analyze --format json`) as another format."""
    target = None if out is None else output_target(out, EXTENSIONS[fmt], [saved])
    report = load(saved)
    text = render(report, fmt, fail_on=fail_on) if fmt == "junit" else render(report, fmt)
    if target is None:
        click.echo(text, nl=False)
        return
    write_atomic(target, text)
    click.echo(f"advisor: wrote {terminal_line(target)}", err=True)
