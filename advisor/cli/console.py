"""The one place a command makes its rich console: the terminal's width (or ``COLUMNS``), never below 80
columns, and a fixed readable width when the output is piped with no ``COLUMNS`` set."""

from __future__ import annotations

import os
import shutil
import sys
from typing import Any, TextIO

from rich.console import Console

MIN_WIDTH = 80
"""Narrower than this, tables of numbers cannot be laid out; the console stays at 80 and the terminal wraps."""
PIPED_WIDTH = 120
"""Width when stdout is not a terminal and ``COLUMNS`` is unset (a log, ``| less``): wide enough for every table."""


def console_width(stream: TextIO | None = None) -> int:
    """``COLUMNS`` when set, else the terminal's width, else :data:`PIPED_WIDTH`; at least :data:`MIN_WIDTH`."""
    stream = stream or sys.stdout
    columns = os.environ.get("COLUMNS", "").strip()
    if columns.isdigit() and int(columns) > 0:
        width = int(columns)
    elif stream.isatty():
        width = shutil.get_terminal_size((PIPED_WIDTH, 24)).columns
    else:
        width = PIPED_WIDTH
    return max(MIN_WIDTH, width)


def make_console(stderr: bool = False, **options: Any) -> Console:
    """A rich console for a command's output (``stderr`` for progress), sized by :func:`console_width`."""
    stream = sys.stderr if stderr else sys.stdout
    options.setdefault("highlight", False)
    return Console(stderr=stderr, width=console_width(stream), **options)
