"""``advisor analyze PATH --each``: every run (job) found below PATH analyzed on its own.

Without ``--each`` a folder holding runs of different jobs is refused (``advisor.ingest.jobs``); with it each job
gets its own report: on stdout one after the other, each headed by ``==> <its path> <==``; with ``-o DIR`` one file
per job in DIR, named after the job's path below PATH (atomic writes, never inside an input). A run that cannot be
analyzed gets its one line on stderr and the others are still analyzed. The exit code is the worst of the runs'.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

import click

from advisor.cli.emit import StderrProgress, emit, outcome
from advisor.common.errors import InputError, OutputError
from advisor.common.escaping import terminal_line
from advisor.common.output import output_target
from advisor.ingest.detect import Discovery
from advisor.pipeline.analysis import AnalysisOptions, run_analysis
from advisor.report import EXTENSIONS

EXIT_ORDER = (0, 1, 3, 2)
"""Exit codes from best to worst (README): ok, gate failed (``--fail-under``), incomplete (a knowledge base failed
or a rank was skipped: a report exists), unusable input (a run could not be analyzed at all: no report)."""


def worst(codes: Sequence[int]) -> int:
    """The worst of ``codes`` in :data:`EXIT_ORDER` (0 for none)."""
    return max(codes, key=EXIT_ORDER.index, default=0)


def analyze_each(path: Path, graph_path: Path | None, options: AnalysisOptions, fmt: str, out: Path | str | None,
                 inputs: list[Path | None], fail_on: str, fail_under: float | None, quiet: bool,
                 workers: int | None) -> int:
    """Analyze every job below ``path`` on its own (see the module doc); the worst exit code."""
    from advisor.ingest import detect_jobs

    out_dir = None if out is None else output_dir(out, path)
    jobs = detect_jobs(path)
    codes = []
    for job, stem in zip(jobs, file_stems(path, jobs), strict=True):
        where = job_root(job)
        target = None if out_dir is None else output_target(out_dir / f"{stem}.{EXTENSIONS[fmt]}", None, inputs)
        if target is None:
            click.echo(f"==> {terminal_line(str(where))} <==")
        try:
            with StderrProgress(enabled=not quiet) as progress:
                result = run_analysis(where, graph_path, options, progress, workers=workers, job=job)
        except InputError as e:  # this run cannot be analyzed; the others still are
            click.echo(terminal_line(f"advisor: error: {e}"), err=True)
            codes.append(2)
            continue
        emit(result.report, fmt, target, fail_on, fail_under)
        codes.append(outcome(result.report, fail_under))
    return worst(codes)


def output_dir(out: Path | str, path: Path) -> Path:
    """``-o`` as the folder the reports go to: not a file, and not inside the input ``path``."""
    target = Path(os.path.abspath(out))
    if target.exists() and not target.is_dir():
        raise OutputError(target, "is a file; with --each, -o names the folder that gets one report per run")
    real, given = Path(os.path.realpath(target)), Path(os.path.realpath(path))
    if given.is_dir() and (real == given or given in real.parents):
        raise OutputError(target, f"is inside the input {path}; inputs are never written (choose another -o)")
    return target


def job_root(job: Discovery) -> Path:
    """The folder a job is in: its one source, or the deepest folder holding all of its sources."""
    roots = [s.root for s in job.sources]
    if len(roots) == 1:
        return roots[0]
    return Path(os.path.commonpath([str(r) for r in roots]))


def file_stems(path: Path, jobs: list[Discovery]) -> list[str]:
    """A file name (without extension) per job, from its path below ``path``: ``text/level1`` -> ``text_level1``;
    a job spread over ``path`` itself is named after its first run (``test_rank_0+1``); unique."""
    stems: list[str] = []
    for job in jobs:
        rel = _rel(job_root(job), path)
        if rel == "." and len(job.sources) > 1:
            rel = f"{_rel(job.sources[0].root, path)}+{len(job.sources) - 1}"
        stem = re.sub(r"[^A-Za-z0-9_.+-]+", "_", path.name if rel == "." else rel).strip("_.") or "run"
        unique, n = stem, 2
        while unique in stems:
            unique, n = f"{stem}-{n}", n + 1
        stems.append(unique)
    return stems


def _rel(root: Path, base: Path) -> str:
    try:
        return os.path.relpath(root, base) if base.is_dir() else root.name
    except ValueError:
        return root.name
