"""Every layout advisor reads, collected from the reader modules that declare them.

Each reader module declares the layouts it reads as ``LAYOUTS`` (:class:`advisor.ingest.layout.Layout` records:
name, profiler, recognizers with their place in the detection order, reader, execution context); this is the one
list of those modules. Detection (:mod:`advisor.ingest.detect`), reading (:func:`advisor.ingest.read_source`), job
grouping (:mod:`advisor.ingest.jobs`) and the execution context (:mod:`advisor.ingest.context`) look layouts up
here and nowhere else. To add a layout: declare it in its reader module (a new module: add it to
:data:`READER_MODULES`), add its reader test with a sample, and a row to README's "What it reads" table.

Imports: the reader modules (and :mod:`advisor.ingest.layout`); detection, jobs and the package import this.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType

import advisor.ingest.mindspore_legacy as mindspore_legacy
import advisor.ingest.msprof as msprof
import advisor.ingest.msprof_op as msprof_op
import advisor.ingest.msprof_op_simulator as msprof_op_simulator
import advisor.ingest.soc_job as soc_job
import advisor.ingest.sqlite_db as sqlite_db
import advisor.ingest.timeline as timeline
import advisor.ingest.torch_npu as torch_npu
from advisor.ingest.layout import Layout, Match

READER_MODULES: tuple[ModuleType, ...] = (msprof, sqlite_db, torch_npu, mindspore_legacy, soc_job, timeline,
                                          msprof_op, msprof_op_simulator)
"""The modules that declare layouts (``LAYOUTS``)."""

LAYOUTS: tuple[Layout, ...] = tuple(layout for module in READER_MODULES for layout in module.LAYOUTS)
"""Every layout, in the order of :data:`READER_MODULES`. The views below are derived from it when asked (a test
can add a layout here and nowhere else)."""


@dataclass(frozen=True)
class _Views:
    layouts: tuple[Layout, ...]
    by_name: dict[str, Layout]
    in_dir: tuple[Match, ...]
    as_file: tuple[Match, ...]
    runs: frozenset[str]


_views: _Views | None = None


def _current() -> _Views:
    """The views of :data:`LAYOUTS` as it is now (built once per value: detection asks for every directory)."""
    global _views
    if _views is None or _views.layouts is not LAYOUTS:
        by_order = lambda matches: tuple(sorted(matches, key=lambda m: m.order))  # noqa: E731
        _views = _Views(LAYOUTS, {layout.name: layout for layout in LAYOUTS},
                        by_order([m for layout in LAYOUTS for m in layout.in_dir]),
                        by_order([m for layout in LAYOUTS for m in layout.as_file]),
                        frozenset(layout.name for layout in LAYOUTS if layout.runs))
    return _views


def directory_matches() -> tuple[Match, ...]:
    """How a directory is recognized: every layout's directory recognizers in detection order (the first that finds
    rank sources decides)."""
    return _current().in_dir


def file_matches() -> tuple[Match, ...]:
    """How a single file given on its own is recognized, in detection order."""
    return _current().as_file


def layout(name: str) -> Layout:
    """The layout named ``name``; KeyError for a name no reader declares."""
    return _current().by_name[name]


def find(name: str) -> Layout | None:
    """The layout named ``name``, None for another (``static-audit``, ``unknown``: a Meta not read from a layout)."""
    return _current().by_name.get(name)


def run_layouts() -> frozenset[str]:
    """Layouts whose directories record no rank of their own: several of them with one device are runs."""
    return _current().runs


__all__ = ["LAYOUTS", "READER_MODULES", "directory_matches", "file_matches", "find", "layout", "run_layouts"]
