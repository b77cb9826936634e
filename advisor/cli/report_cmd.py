"""``advisor report SAVED.json``: render a saved JSON report in another format and gate on it (analyze once,
render many: the exit code is the one ``advisor analyze`` would have given)."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from advisor.common.escaping import terminal_line
from advisor.common.output import output_target, write_atomic
from advisor.findings import SEVERITIES
from advisor.pipeline import gate
from advisor.report import EXTENSIONS, render
from advisor.report.json_report import load


@click.command("report")
@click.argument("saved", type=click.Path(path_type=Path, dir_okay=False))
@click.option("--format", "fmt", type=click.Choice(["terminal", "json", "markdown", "html", "junit"]),
              default="markdown", show_default=True)
@click.option("-o", "--output", "out", type=click.Path(), help="Write here (a directory gets a timestamped name).")
@click.option("--fail-under", type=click.FloatRange(0, 100),
              help="Exit 1 when the saved score is below this value, as `advisor analyze --fail-under` "
                   "(default: fail_under of [tool.advisor], else none).")
@click.option("--fail-on", type=click.Choice(SEVERITIES),
              help="JUnit: a rule's test case fails at this severity or worse (default: fail_on of "
                   "[tool.advisor], else major).")
def command(saved: Path, fmt: str, out: str | None, fail_under: float | None, fail_on: str | None) -> None:
    """Render a saved JSON report (from `advisor analyze --format json`) as another format.

    Exit codes, as `advisor analyze`: 0 ok; 1 the score is below --fail-under; 2 unusable input; 3 the saved
    analysis is incomplete (a knowledge base failed or a rank was skipped)."""
    settings = gate.settings({"fail_under": fail_under, "fail_on": fail_on})
    target = None if out is None else output_target(out, EXTENSIONS[fmt], [saved])
    report = load(saved)
    text = (render(report, fmt, fail_on=settings.fail_on, fail_under=settings.fail_under) if fmt == "junit"
            else render(report, fmt))
    if target is None:
        click.echo(text, nl=False)
    else:
        write_atomic(target, text)
        click.echo(f"advisor: wrote {terminal_line(target)}", err=True)
    code = gate.outcome(report, settings.fail_under)
    if code:
        sys.exit(code)
