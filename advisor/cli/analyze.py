"""``advisor analyze``: read a profile (and graph), run the knowledge bases, print or write the report."""

from __future__ import annotations

import sys
from pathlib import Path

import click

from advisor.cli.each import analyze_each
from advisor.cli.emit import StderrProgress, emit, outcome, write_rank_tables
from advisor.common.errors import UsageError
from advisor.common.escaping import terminal_line
from advisor.common.output import check_outside_inputs, output_target
from advisor.config.loader import find_pyproject
from advisor.findings import SEVERITIES
from advisor.pipeline import gate
from advisor.pipeline.analysis import AnalysisOptions, run_analysis
from advisor.report import EXTENSIONS

_STDOUT_FORMATS = ("terminal", "json", "markdown")
EXIT_KB_FAILED = gate.EXIT_INCOMPLETE


@click.command("analyze")
@click.argument("path", required=False, type=click.Path(path_type=Path))
@click.option("--graph", "graph_path", type=click.Path(path_type=Path),
              help="Model graph: atc --mode=1 OM JSON, GE dump ge_proto_*.txt / ge_onnx_*.pbtxt, or .onnx.")
@click.option("--format", "fmt", type=click.Choice(["terminal", "json", "markdown", "html", "junit"]),
              default="terminal", show_default=True, help="Report format.")
@click.option("-o", "--output", "out", type=click.Path(),
              help="Write the report here (a directory gets a timestamped file). Default: stdout for "
                   "terminal/json/markdown, reports/ for html/junit.")
@click.option("--kb", "only", multiple=True, metavar="ID", help="Run only this knowledge base (repeatable).")
@click.option("--skip-kb", "skip", multiple=True, metavar="ID", help="Do not run this knowledge base (repeatable).")
@click.option("--rules", "rules_file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="YAML overriding rule values, platform peaks and adding waivers.")
@click.option("--ecosystem", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="A MindStudio ecosystem.json: run its legacy knowledge bases too.")
@click.option("--chip", help="SoC to use for peaks when the profile does not say (e.g. Ascend310P3, Ascend910B2).")
@click.option("--cann", metavar="VERSION",
              help="CANN release the advice targets (e.g. 8.1.RC1): native kernels, fusion passes and ATC options "
                   "of that release; overrides the version the profile or graph records.")
@click.option("--fail-under", type=click.FloatRange(0, 100),
              help="Exit 1 when the score is below this value (default: fail_under of [tool.advisor], else none).")
@click.option("--fail-on", type=click.Choice(SEVERITIES),
              help="JUnit: a rule's test case fails at this severity or worse (default: fail_on of "
                   "[tool.advisor], else major).")
@click.option("--example", is_flag=True, help="Analyze the built-in example (an SSD-like model on Ascend 310P).")
@click.option("--scheduler", metavar="ADDRESS",
              help="Send the per-rank work to an existing Dask cluster (e.g. tcp://host:8786) whose workers see "
                   "PATH at the same absolute path (shared storage). Default: a local Dask cluster for multi-rank "
                   "input. See docs/cluster.md.")
@click.option("--workers", type=click.IntRange(min=1), metavar="N",
              help="Worker processes of the local Dask cluster (default: one per core; 1 analyzes the ranks in "
                   "this process).")
@click.option("--each", is_flag=True,
              help="Analyze each run (job) found below PATH on its own, instead of refusing a folder that holds "
                   "several: one report per run, each headed by its path on stdout, or one file per run in -o DIR "
                   "(named after the run's path). Exit code: the worst of the runs.")
@click.option("--rank-tables", "rank_tables", type=click.Path(path_type=Path), metavar="FILE",
              help="Write every rank's rows (time, op counts, step table, model summary, files read, merged findings' "
                   "ranks) to this JSON file. A report of more than 32 ranks lists only the outliers and the ranks "
                   "findings name, with each figure's distribution over all ranks. See docs/cluster.md.")
@click.option("--quiet", "-q", is_flag=True, help="No progress display.")
def command(path: Path | None, graph_path: Path | None, fmt: str, out: Path | str | None, only: tuple[str, ...],
            skip: tuple[str, ...], rules_file: Path | None, ecosystem: Path | None, chip: str | None,
            cann: str | None, fail_under: float | None, fail_on: str | None, example: bool, scheduler: str | None, workers: int | None,
            each: bool, rank_tables: Path | None, quiet: bool) -> None:
    """Analyze a profile: PROF_xxx, *_ascend_pt, *_ascend_ms, a MindSpore profiler/ dir, a JOB dir, a folder
    holding the ranks of one job at any depth, or a single op_summary/kernel_details CSV, msprof/torch_npu .db or
    trace JSON. A folder holding runs of several jobs is refused; --each analyzes each of them.

    With --graph MODEL and no PATH (or a model graph as PATH) it runs a static audit: the graph-capable rules on
    times estimated from a cost model of the chip (--chip, else the OM's soc_version).

    \b
    Exit codes (docs/ci.md):
      0  the report was written (and the score is at or above --fail-under)
      1  gate failed: the score is below --fail-under
      2  unusable input or usage: one line on stderr names the file and the problem
      3  incomplete: the report was written, but a knowledge base failed or a rank was skipped
      4  a bug in advisor (ADVISOR_TRACEBACK=1 shows where)
    With --each: the worst code of the runs."""
    if example:
        if path is not None:
            raise UsageError("give either PATH or --example, not both")
        from advisor.examples import example_graph, example_profile

        path, graph_path = example_profile(), graph_path or example_graph()
    if path is None and graph_path is None:
        raise UsageError("missing PATH (or --graph MODEL for a static audit of a model graph alone, or --example)")

    gate_in_force = gate.settings({"fail_under": fail_under, "fail_on": fail_on})
    fail_under, fail_on = gate_in_force.fail_under, gate_in_force.fail_on
    if scheduler is not None and workers is not None:
        raise UsageError("--workers sizes the local Dask cluster: it cannot be used with --scheduler")
    inputs = [path, graph_path, rules_file, ecosystem, find_pyproject(Path.cwd())]
    if rank_tables is not None:
        if each:
            raise UsageError("--rank-tables names one file: it cannot be used with --each")
        rank_tables = output_target(rank_tables, None, inputs)
        check_outside_inputs(rank_tables, inputs)  # never written into a profile folder
    options = AnalysisOptions(only=only, skip=skip, rules_file=rules_file, ecosystem=ecosystem, chip=chip,
                              cann=cann, scheduler=scheduler, rank_tables=rank_tables)
    if out is None and fmt not in _STDOUT_FORMATS:
        out = "reports/"
        check_outside_inputs(Path(out), inputs)  # only an explicit -o writes into the profile folder
    if each:
        if path is None or example:
            raise UsageError("--each needs a PATH to look for runs below")

        code = analyze_each(path, graph_path, options, fmt, out, inputs, fail_on, fail_under, quiet, workers)
        if code:
            sys.exit(code)
        return
    # checked (and made absolute) before the analysis: fail fast, and nothing run later can move it
    target = None if out is None else output_target(out, EXTENSIONS[fmt], inputs)
    with StderrProgress(enabled=not quiet) as progress:
        result = run_analysis(path, graph_path, options, progress, workers=workers)
    for warning in getattr(result, "waiver_warnings", ()):  # a stand-in result (tests) may have none
        click.echo(f"advisor: warning: {terminal_line(warning)}", err=True)
    tables = getattr(result, "rank_tables", None)  # a stand-in result (tests) may have none
    emit(result.report, fmt, target, fail_on, fail_under,
         files_read=(tables or {}).get("tables", {}).get("input.files_read"))
    if rank_tables is not None:
        write_rank_tables(result.report, tables, rank_tables)
    code = outcome(result.report, fail_under)
    if code:
        sys.exit(code)
