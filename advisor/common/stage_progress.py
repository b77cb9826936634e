"""Progress of the stage in hand, said from wherever the work is (reading a rank, knowledge base k of n) without
passing a callback through every signature.

The command installs a reporter for the analysis (``advisor analyze`` shows it on stderr only when stderr is a
terminal); code deep in the analysis calls :func:`say`. With no reporter (tests, Dask workers, a library caller)
:func:`say` does nothing and computes nothing: messages may be given as callables, evaluated only when shown.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

Message = str | Callable[[], str]

_reporter: ContextVar[Callable[[str], None] | None] = ContextVar("advisor_progress", default=None)
_prefix: ContextVar[str] = ContextVar("advisor_progress_prefix", default="")

MAX_FILES_COUNTED = 100_000
"""Sizing the input stops after this many files: progress must not cost what the reading costs."""


@contextmanager
def reporting(reporter: Callable[[str], None] | None) -> Iterator[None]:
    """Send what :func:`say` is told to ``reporter`` within the block (None: keep the one in force)."""
    if reporter is None:
        yield
        return
    token = _reporter.set(reporter)
    try:
        yield
    finally:
        _reporter.reset(token)


@contextmanager
def within(prefix: str) -> Iterator[None]:
    """Messages said within the block start with ``prefix`` (``rank 3: ``)."""
    token = _prefix.set(_prefix.get() + prefix)
    try:
        yield
    finally:
        _prefix.reset(token)


def active() -> bool:
    return _reporter.get() is not None


def say(message: Message) -> None:
    """Report ``message`` (a callable is called only when a reporter listens)."""
    reporter = _reporter.get()
    if reporter is None:
        return
    reporter(_prefix.get() + (message() if callable(message) else message))


def input_size(root: Path) -> tuple[int, int, bool]:
    """(bytes, files, complete) of a file or of the files below a directory (symlinks not followed; at most
    :data:`MAX_FILES_COUNTED` files, ``complete`` False beyond)."""
    root = Path(root)
    try:
        if not root.is_dir():
            return root.stat().st_size, 1, True
    except OSError:
        return 0, 0, True
    total, files, stack = 0, 0, [str(root)]
    while stack:
        try:
            entries = list(os.scandir(stack.pop()))
        except OSError:
            continue
        for entry in entries:
            try:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.is_file(follow_symlinks=False):
                    total += entry.stat(follow_symlinks=False).st_size
                    files += 1
                    if files >= MAX_FILES_COUNTED:
                        return total, files, False
            except OSError:
                continue
    return total, files, True


def reading_message(root: Path) -> str:
    """``reading 213.4 MB of profile (57 files)``: the stage before the knowledge bases, with its size."""
    size, files, complete = input_size(root)
    more = "" if complete else " or more"
    return f"reading {size / 1e6:,.1f} MB{more} of profile ({files:,}{more} file{'s' if files != 1 else ''})"
