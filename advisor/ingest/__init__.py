"""Ingest: find out what a path holds and read it into normalized :class:`advisor.model.Profile` objects.

This package is the only code that knows file layouts and CANN versions. ``load(path)`` returns one Profile per
rank (a parent directory of several ``*_ascend_pt`` / ``PROF_*`` / ``device_N`` folders gives several; several
msprof runs of one device, e.g. a ``PROF_GROUP_*`` folder of ``--aic-metrics`` re-runs, give one, see ``runs``).

Layouts are declared by their reader modules (``LAYOUTS``: :class:`advisor.ingest.layout.Layout` records with the
recognizers, reader and execution context of each) and collected in :mod:`advisor.ingest.registry`, the one list
detection, reading and job grouping use; README's "What it reads" table lists them for users.

Modules, bottom up -- each imports only those above it, never one below (``tests/test_ingest_registry.py`` checks
that the package has no import cycle):

* ``layout`` -- the records (Layout, RankSource, Discovery); imports no ingest module;
* shared helpers: ``columns``, ``timebase``, ``normalize``, ``csvread``, ``jsonstream``, ``sanitize``,
  ``event_summary``, ``task_types``, ``summary_tables`` (the summary CSVs msprof and the frameworks share);
* readers, one module per producer, each with ``read(root, meta) -> Profile`` and its ``LAYOUTS``: ``timeline``,
  ``msprof``, ``torch_npu``, ``sqlite_db``, ``mindspore_legacy``, ``soc_job``, ``kernel_runs``, ``msprof_op_jsonl``,
  ``msprof_op``, ``msprof_op_simulator``;
* ``registry`` (every layout), then ``jobs`` (which sources are one job), ``detect`` (what a path holds), ``runs``
  (several runs of one device merged) and ``context`` (the execution context);
* this package: ``load`` / ``read_source``.

May import: :mod:`advisor.common`, :mod:`advisor.config`, the model (``advisor.model``, ``timemodel``,
``platform``, :mod:`advisor.core`) and :mod:`advisor.graph`; never the plugin API, the engine, knowledge bases,
the pipeline or reports (``tests/test_architecture.py``).
"""

from __future__ import annotations

import fnmatch
import os
from pathlib import Path
from typing import Any

import advisor.ingest.context as context
import advisor.ingest.registry as registry
from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.common.stagetimes import stage
from advisor.common.util import paused_gc, release_memory, tune_allocator
from advisor.ingest.detect import detect, detect_job, detect_jobs
from advisor.ingest.layout import Discovery, RankSource
from advisor.ingest.normalize import share_constant_columns, store_metrics
from advisor.ingest.runs import read_runs
from advisor.ingest.sanitize import sanitize
from advisor.model import EventSelection, Meta, OpsProjection, Profile
from advisor.timemodel import TimeModel  # importing it registers the builder of Profile.time

REQUIRED_FILES = ("kernel_details*.csv", "op_summary*.csv", "OpBasicInfo*.csv", "trace_view.json", "msprof_*.json",
                  "*.db")
"""Names of the files a rank cannot be analyzed without (its op table, its trace, its database): one that cannot be
read is an input error; any other unreadable file is skipped and the analysis is incomplete (exit 3)."""
_DATA_SUFFIXES = (".csv", ".json", ".jsonl", ".db")


def _required(name: str) -> bool:
    return not name.startswith("msprof_tx") and any(fnmatch.fnmatchcase(name, p) for p in REQUIRED_FILES)


def refuse_special_files(root: Path, max_depth: int = 4, max_entries: int = 200_000) -> list[tuple[str, str]]:
    """The files of the rank that cannot be read at all: a FIFO, socket or device where a file is expected (a
    reader opening it would block forever or read without end) or a directory named as a data file. Names only are
    checked (``scandir``), so this costs no file read. A required file (:data:`REQUIRED_FILES`) among them fails
    here; the others are returned as (path, reason) for the report's files_skipped -- readers never open them, as
    they only open regular files."""
    if not root.is_dir():
        if os.path.lexists(root):
            safeload.check_regular(root)
        return []
    unreadable: list[tuple[str, str]] = []
    seen = 0
    stack = [(root, 0)]
    while stack:
        d, depth = stack.pop()
        try:
            entries = list(os.scandir(d))
        except OSError:
            continue
        for e in entries:
            seen += 1
            if seen > max_entries:
                return unreadable
            try:
                if e.is_dir():
                    if e.name.endswith(_DATA_SUFFIXES):
                        raise InputError(e.path, "is a directory, expected a regular file")
                    if depth < max_depth and not e.is_symlink():
                        stack.append((Path(e.path), depth + 1))
                elif not e.is_file():
                    safeload.check_regular(e.path)  # raises: FIFO, socket, device (or a dangling link: skipped)
            except InputError as err:
                if "no such file" in err.problem:
                    continue
                if _required(e.name):
                    raise
                unreadable.append((e.path, f"{err.problem}: not read"))
    return unreadable


def read_source(src: RankSource, ops_columns: OpsProjection | None = None,
                events_read: EventSelection | None = None, time_rules: dict[str, Any] | None = None) -> Profile:
    """Read one rank with the reader for its layout (several runs of one device: merged, see ``runs``), keeping the
    ops columns ``ops_columns`` wants and the timeline events ``events_read`` selects (all when None); the time
    model is built with ``time_rules`` (``rules/time.yaml``; None: the built-in file)."""
    unreadable = refuse_special_files(src.root)
    if src.runs:
        # whole ops: which run is primary depends on the metrics each holds
        merged = read_runs(src, lambda run: read_source(run, None, events_read, time_rules))
        if ops_columns is not None:
            merged.ops = ops_columns.apply(merged.ops)
        merged.ops = store_metrics(share_constant_columns(merged.ops), ops_columns)  # pinned: see its doc
        return merged
    layout = registry.layout(src.layout)
    tune_allocator()  # before the first large column of this process
    meta = Meta(source=str(src.root), layout=src.layout, rank=src.rank, ops_columns=ops_columns,
                events_read=events_read, time_rules=time_rules)
    for path, reason in unreadable:
        meta.skip(path, reason, unreadable=True)
    with stage("read"), paused_gc():
        profile: Profile = layout.read(src.root, meta)
        if ops_columns is not None:
            profile.ops = ops_columns.apply(profile.ops)
        release_memory()
    with stage("sanitize"):
        sanitize(profile)
        profile.ops = store_metrics(share_constant_columns(profile.ops), ops_columns)
    if not len(profile.ops) and not len(profile.op_stats) and not len(profile.steps):
        skipped = "; ".join(f"{s.path}: {s.reason}" for s in meta.files_skipped[:3])
        raise InputError(src.root, f"no profile data could be read (layout {src.layout})"
                         + (f"; {skipped}" if skipped else ""))
    with stage("model"):
        context.apply(profile)
        build_time_model(profile)
        release_memory()
    return profile


def build_time_model(profile: Profile) -> TimeModel:
    """Build the rank's time model now (``Profile.time`` is built on first use): once, from the tables exactly as
    ingest left them, inside the ``model`` stage that times it and releases the memory building it took -- not
    later inside the first knowledge base that happens to ask."""
    return profile.time


def load(path: str | Path) -> list[Profile]:
    """Detect the layout(s) under ``path`` and read every rank. Raises InputError on unusable input."""
    p = Path(path)
    if not safeload.exists(p):
        raise InputError(p, "no such file or directory")
    sources = detect(p)
    return [read_source(s) for s in sources]


__all__ = ["Discovery", "RankSource", "build_time_model", "detect", "detect_job", "detect_jobs", "load", "read_source"]
