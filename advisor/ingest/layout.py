"""What a layout is: one record per way a producer writes its profile, and the rank sources detection yields.

A :class:`Layout` says everything advisor knows about one layout in one place: its name (the JSON report's
``input.layout``, a contract), the profiler that writes it, how it is recognized on disk (:class:`Match`: a
directory or a lone file, each tried at its place in the detection order), the reader that reads it, and what it
says about the execution context. Each reader module declares the layouts it reads (``LAYOUTS``) beside its
``read``; :mod:`advisor.ingest.registry` collects them, and detection, reading, job grouping and the execution
context look layouts up there -- adding a layout is its reader module, its test and the README table.

This module is the bottom of ``advisor.ingest``: it imports no other ingest module (every reader imports it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from advisor.model import Meta, Profile


@dataclass(frozen=True)
class RankSource:
    """One rank's data: where it is and which reader reads it."""

    root: Path
    layout: str
    rank: int | None = None
    runs: tuple[RankSource, ...] = ()
    """Other runs of the same device (re-runs with other metric sets): read and merged with this one."""


@dataclass
class Discovery:
    """What a walk below a folder found: the rank sources (runs of one device folded), and what the walk skipped."""

    sources: list[RankSource]
    notes: list[str] = field(default_factory=list)


Find = Callable[[Path], list[RankSource]]
"""A recognizer: a path -> the rank sources of its layout found there ([] when the path is not that layout).
Names only: no file is parsed (detection runs on every directory of a walk)."""


@dataclass(frozen=True)
class Match:
    """One way a layout is recognized: ``find`` tried at ``order`` (lowest first, against every layout's matches
    of the same kind). A layout can be recognized in several ways at different places of the order (msprof-cann7:
    early by ``mindstudio_profiler_output/``, last by loose summary CSVs that the more specific layouts also hold)."""

    order: int
    find: Find


@dataclass(frozen=True)
class Layout:
    """One layout: see the module doc."""

    name: str
    """The layout's name: ``Meta.layout``, the JSON report's ``input.layout`` (a contract: never renamed)."""
    family: str
    """The profiler that writes it: text and database exports of one profiler can be ranks of one job
    (``advisor.ingest.jobs``)."""
    summary: str
    """One line: what the layout is on disk, for whoever reads the registry (the README table says it for users)."""
    read: Callable[[Path, Meta], Profile]
    """The reader: ``read(root, meta) -> Profile`` for a :class:`RankSource` root of this layout."""
    in_dir: tuple[Match, ...] = ()
    """How a directory is recognized as this layout."""
    as_file: tuple[Match, ...] = ()
    """How a single file given on its own is recognized as this layout."""
    framework: str | None = None
    """``torch_npu`` / ``mindspore`` when the layout is that framework's export (the execution context's branch)."""
    context: tuple[str, str] | None = None
    """(execution context, evidence) the layout decides by itself (``advisor.ingest.context``), None when the data
    decides."""
    runs: bool = False
    """The layout's directories record no rank of their own: several of one device are runs of it, not ranks."""


__all__ = ["Discovery", "Find", "Layout", "Match", "RankSource"]
