"""``advisor compare BASE NEW``: diff two runs (profiles or saved JSON reports) and gate on regression.

Exit codes: 0 no regression, 1 NEW regressed beyond the limits, 2 unusable input (as every command).
The comparison is :mod:`advisor.compare.runs`; its rendering :mod:`advisor.report.comparison`.
"""

from __future__ import annotations

import sys
from pathlib import Path

import click

from advisor.cli.console import make_console
from advisor.common import provenance
from advisor.common.escaping import terminal_line
from advisor.common.output import check_output, output_target, write_atomic
from advisor.compare.runs import compare, load_side
from advisor.pipeline import gate
from advisor.pipeline.analysis import AnalysisOptions
from advisor.report.comparison import build_terminal, render
from advisor.report.comparison_junit import render as render_junit

_EXT = {"terminal": "txt", "json": "json", "markdown": "md", "junit": "xml"}


@click.command("compare")
@click.argument("base", type=click.Path(path_type=Path))
@click.argument("new", type=click.Path(path_type=Path))
@click.option("--graph-base", type=click.Path(path_type=Path), help="Model graph for BASE (when BASE is a profile).")
@click.option("--graph-new", type=click.Path(path_type=Path), help="Model graph for NEW (when NEW is a profile).")
@click.option("--max-regression", type=click.FloatRange(min=0), metavar="PCT",
              help="Exit 1 when NEW's device time is more than PCT % above BASE's (default: max_regression of "
                   "[tool.advisor], else 2).")
@click.option("--max-score-drop", type=click.FloatRange(min=0), metavar="POINTS",
              help="Also exit 1 when NEW's score is more than POINTS below BASE's (default: max_score_drop of "
                   "[tool.advisor], else none).")
@click.option("--format", "fmt", type=click.Choice(["terminal", "json", "markdown", "junit"]), default="terminal",
              show_default=True, help="junit: the gate as test cases (device_time, score_drop, new_findings).")
@click.option("-o", "--output", "out", type=click.Path(),
              help="Write here instead of stdout (a directory gets a timestamped file).")
@click.option("--rules", "rules_file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="YAML overriding rule values, used for both runs.")
@click.option("--chip", help="SoC to use for peaks when a profile does not say.")
def command(base: Path, new: Path, graph_base: Path | None, graph_new: Path | None, max_regression: float | None,
            max_score_drop: float | None, fmt: str, out: str | None, rules_file: Path | None,
            chip: str | None) -> None:
    """Compare two runs. BASE and NEW are profiles (any layout `advisor analyze` reads; they may differ) or
    saved JSON reports of `advisor analyze --format json`.

    Regression: NEW's device busy time is more than --max-regression % above BASE's, or (with
    --max-score-drop) NEW's score dropped by more than that. Exit 0 when not regressed, 1 when regressed,
    2 on unusable input.
    """
    limits = gate.settings({"max_regression": max_regression, "max_score_drop": max_score_drop})
    options = AnalysisOptions(rules_file=rules_file, chip=chip)
    target = None if out is None else output_target(out, _EXT[fmt], [base, new, graph_base, graph_new, rules_file],
                                                    prefix="advisor_compare")
    base_side = load_side(base, graph_base, options, "base")
    new_side = load_side(new, graph_new, options, "new")
    cmp = compare(base_side, new_side, limits.max_regression, limits.max_score_drop)
    for difference in provenance.differences(base_side.report, new_side.report):
        click.echo(terminal_line(f"advisor: warning: the two reports were produced differently: {difference}"),
                   err=True)
    if fmt == "terminal" and out is None:
        make_console().print(build_terminal(cmp))
    else:
        text = render_junit(cmp) if fmt == "junit" else render(cmp, fmt)
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
