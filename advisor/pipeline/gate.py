"""The CI gate: its settings (command line, else ``[tool.advisor]`` in ``pyproject.toml``, else the defaults) and
the exit code a report calls for.

One gate for ``advisor analyze`` and ``advisor report SAVED.json``, so analyzing once and deriving every format
from the saved JSON fails a CI job exactly as analyzing each time would (docs/ci.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import click

from advisor.common.escaping import terminal_line
from advisor.config.loader import GATE_PROPERTIES as SCHEMA_PROPERTIES
from advisor.config.loader import find_pyproject, validate_pyproject_section

EXIT_OK = 0
EXIT_GATE_FAILED = 1
"""The score is below ``--fail-under`` (``advisor compare``: NEW regressed)."""
EXIT_INCOMPLETE = 3
"""The report was written but a knowledge base failed or a rank could not be read: the analysis is incomplete."""

DEFAULTS: dict[str, Any] = {"fail_under": None, "fail_on": "major", "max_regression": 2.0, "max_score_drop": None}


@dataclass(frozen=True)
class GateSettings:
    fail_under: float | None = None
    fail_on: str = "major"
    max_regression: float = 2.0
    max_score_drop: float | None = None


def configured(start: Path | None = None) -> dict[str, Any]:
    """The gate keys of the nearest ``pyproject.toml`` with a ``[tool.advisor]`` table (from ``start``, default
    the working directory, upwards), validated; empty when there is none."""
    pyproject = find_pyproject(start or Path.cwd())
    if pyproject is None:
        return {}
    section = validate_pyproject_section(pyproject)
    return {k: section[k] for k in SCHEMA_PROPERTIES if k in section}


def settings(cli: Mapping[str, Any], start: Path | None = None) -> GateSettings:
    """The gate in force: each value from the command line when given (not None), else ``[tool.advisor]``,
    else the default."""
    project = configured(start) if any(cli.get(k) is None for k in SCHEMA_PROPERTIES) else {}
    merged = {k: cli[k] if cli.get(k) is not None else project.get(k, DEFAULTS[k]) for k in SCHEMA_PROPERTIES}
    return GateSettings(**merged)


def outcome(report: Mapping[str, Any], fail_under: float | None) -> int:
    """The exit code ``report`` calls for (0; 1: score below ``fail_under``; 3: incomplete), said on stderr.
    Incomplete takes precedence: a score computed without a knowledge base cannot pass or fail a gate."""
    inp = report.get("input") or {}
    skipped_ranks = inp.get("ranks_skipped") or []
    if skipped_ranks:
        first = skipped_ranks[0]
        # a report of many ranks lists the first ones (advisor.pipeline.rank_detail) and says how many there were
        shortened = ((report.get("rank_detail") or {}).get("summarized") or {}).get("input.ranks_skipped") or {}
        n_skipped = int(shortened.get("rows") or len(skipped_ranks))
        click.echo(terminal_line(f"advisor: incomplete analysis, {n_skipped} of "
                                 f"{n_skipped + inp.get('ranks', 0)} ranks could not be read and were "
                                 f"skipped (first: {first['path']}: {first['reason']})"), err=True)
    unreadable = [f for f in inp.get("files_skipped") or [] if f.get("unreadable")]
    if unreadable:
        click.echo(terminal_line(f"advisor: incomplete analysis, {len(unreadable)} input file(s) could not be read "
                                 f"(first: {unreadable[0]['path']}: {unreadable[0]['reason']})"), err=True)
    failed = [k for k in report.get("knowledge_bases") or [] if k.get("status") == "failed"]
    if failed:
        click.echo(terminal_line("advisor: incomplete analysis, knowledge base(s) failed: "
                                 + "; ".join(f"{k['id']} ({k.get('reason', '')})" for k in failed)), err=True)
    if failed or skipped_ranks or unreadable:
        return EXIT_INCOMPLETE
    if fail_under is not None and float(report["score"]) < fail_under:
        click.echo(f"advisor: score {float(report['score']):.1f} is below --fail-under {fail_under:g}", err=True)
        return EXIT_GATE_FAILED
    return EXIT_OK
