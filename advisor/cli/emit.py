"""How a report leaves the CLI: printed on stdout or written atomically, the exit code it calls for, and the progress
shown on stderr meanwhile. Shared by ``advisor analyze`` and its ``--each`` mode."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import click
from rich.console import Console

from advisor.cli.console import make_console
from advisor.common.escaping import terminal_line
from advisor.common.output import check_output, write_atomic
from advisor.common.stagetimes import stage
from advisor.pipeline import gate
from advisor.report import render


class StderrProgress:
    """A spinner on stderr that appears only once the work has taken more than a second, and only on a TTY."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled and sys.stderr.isatty()
        self._status = None
        self._text = "working"
        self._timer: threading.Timer | None = None
        self._lock = threading.Lock()

    def __enter__(self) -> StderrProgress:
        if self.enabled:
            self._timer = threading.Timer(1.0, self._show)
            self._timer.daemon = True
            self._timer.start()
        return self

    def _show(self) -> None:
        with self._lock:
            if self._status is None:
                self._status = Console(stderr=True).status(self._text)
                self._status.start()

    def __call__(self, text: str) -> None:
        with self._lock:
            self._text = text
            if self._status is not None:
                self._status.update(text)

    def __exit__(self, *exc: object) -> None:
        if self._timer is not None:
            self._timer.cancel()
        with self._lock:
            if self._status is not None:
                self._status.stop()






def _files_read(report: dict) -> list[str]:
    graph = report.get("graph") or {}
    return [*report["input"].get("files_read", []), *([graph["source"]] if graph.get("source") else [])]


def write_rank_tables(report: dict, tables: dict | None, target: Path) -> None:
    """``--rank-tables``: every rank's rows, written atomically (the tables the report summarized, else the
    report's own per-rank lists)."""
    from advisor.pipeline import rank_detail

    check_output(target, _files_read(report) + list((tables or {}).get("tables", {}).get("input.files_read") or []))
    write_atomic(target, rank_detail.tables_text(tables or rank_detail.full_tables(report)))
    click.echo(f"advisor: wrote {terminal_line(target)}", err=True)


def emit(report: dict, fmt: str, target: Path | None, fail_on: str, fail_under: float | None,
         files_read: list[str] | None = None) -> None:
    """Print ``report`` in ``fmt`` on stdout, or write it atomically to ``target``. ``files_read``: every file the
    analysis read, when the report lists only some (many ranks): the target may be none of them."""
    with stage("render"):
        if fmt == "terminal" and target is None:
            from advisor.report.terminal import print_report

            print_report(report, make_console())
            return
        text = (render(report, fmt, fail_on=fail_on, fail_under=fail_under) if fmt == "junit"
                else render(report, fmt))
        if target is None:
            click.echo(text, nl=False)
        else:
            check_output(target, _files_read(report) + list(files_read or []))
            write_atomic(target, text)
            click.echo(f"advisor: wrote {terminal_line(target)}", err=True)


def outcome(report: dict, fail_under: float | None) -> int:
    """The exit code ``report`` calls for (0, 1: below ``--fail-under``, 3: incomplete), said on stderr."""
    return gate.outcome(report, fail_under)
