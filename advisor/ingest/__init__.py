"""Ingest: find out what a path holds and read it into normalized :class:`advisor.model.Profile` objects.

This package is the only code that knows file layouts and CANN versions. ``load(path)`` returns one Profile per
rank (a parent directory of several ``*_ascend_pt`` / ``PROF_*`` / ``device_N`` folders gives several; several
msprof runs of one device, e.g. a ``PROF_GROUP_*`` folder of ``--aic-metrics`` re-runs, give one, see ``runs``).

Readers live one module per producer and expose ``read(root: Path, meta: Meta) -> Profile``:

============================  ===========================================================================
layout                        module
============================  ===========================================================================
msprof-cann6 / msprof-cann7   ``msprof`` (``device_N/summary`` + ``timeline``; ``mindstudio_profiler_output``)
op-summary-csv                ``msprof`` (a single op_summary / kernel_details CSV file)
msprof-db                     ``sqlite_db`` (``msprof_*.db``)
torch_npu-text, mindspore-text ``torch_npu`` (``ASCEND_PROFILER_OUTPUT`` CSV/JSON)
torch_npu-db, mindspore-db    ``sqlite_db`` (``ascend_pytorch_profiler_*.db`` / ``ascend_mindspore_profiler_*.db``)
mindspore-legacy              ``mindspore_legacy`` (MindSpore 1.x ``profiler/`` flat dir)
soc-job                       ``soc_job`` (SS928/SS927 SVP ACL ``JOB*`` summaries)
trace-json                    ``timeline`` (a lone trace JSON file)
msprof-op                     ``msprof_op`` (``msprof op`` results: ``OPPROF_*`` with ``OpBasicInfo.csv`` and
                              the per-block metric CSVs; one launch, ``<OpName>/<n>/`` launches, ``device<N>/``)
msprof-op-simulator           ``msprof_op_simulator`` (``msprof op simulator``: ``OPPROF_*/simulator/``)
============================  ===========================================================================

May import :mod:`advisor.common`, :mod:`advisor.config`, the model and time model, and :mod:`advisor.graph`
(execution context from a graph); never the plugin API, the engine or a later stage.
"""

from __future__ import annotations

import fnmatch
import importlib
import os
from pathlib import Path
from typing import Any

from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.common.stagetimes import stage
from advisor.common.util import paused_gc, release_memory, tune_allocator
from advisor.ingest import context
from advisor.ingest.detect import Discovery, RankSource, detect, detect_job, detect_jobs
from advisor.ingest.normalize import share_constant_columns, store_metrics
from advisor.ingest.sanitize import sanitize
from advisor.model import EventSelection, Meta, OpsProjection, Profile
from advisor.timemodel import build_time_model

_READERS = {
    "msprof-cann6": "advisor.ingest.msprof",
    "msprof-cann7": "advisor.ingest.msprof",
    "op-summary-csv": "advisor.ingest.msprof",
    "msprof-db": "advisor.ingest.sqlite_db",
    "torch_npu-text": "advisor.ingest.torch_npu",
    "mindspore-text": "advisor.ingest.torch_npu",
    "torch_npu-db": "advisor.ingest.sqlite_db",
    "mindspore-db": "advisor.ingest.sqlite_db",
    "mindspore-legacy": "advisor.ingest.mindspore_legacy",
    "soc-job": "advisor.ingest.soc_job",
    "trace-json": "advisor.ingest.timeline",
    "msprof-op": "advisor.ingest.msprof_op",
    "msprof-op-simulator": "advisor.ingest.msprof_op_simulator",
}


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
        from advisor.ingest.runs import read_runs

        # whole ops: which run is primary depends on the metrics each holds
        merged = read_runs(src, lambda run: read_source(run, None, events_read, time_rules))
        if ops_columns is not None:
            merged.ops = ops_columns.apply(merged.ops)
        merged.ops = store_metrics(share_constant_columns(merged.ops), ops_columns)  # pinned: see its doc
        return merged
    module = importlib.import_module(_READERS[src.layout])
    tune_allocator()  # before the first large column of this process
    meta = Meta(source=str(src.root), layout=src.layout, rank=src.rank, ops_columns=ops_columns,
                events_read=events_read, time_rules=time_rules)
    for path, reason in unreadable:
        meta.skip(path, reason, unreadable=True)
    with stage("read"), paused_gc():
        profile: Profile = module.read(src.root, meta)
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


def load(path: str | Path) -> list[Profile]:
    """Detect the layout(s) under ``path`` and read every rank. Raises InputError on unusable input."""
    p = Path(path)
    if not safeload.exists(p):
        raise InputError(p, "no such file or directory")
    sources = detect(p)
    return [read_source(s) for s in sources]


__all__ = ["Discovery", "RankSource", "detect", "detect_job", "detect_jobs", "load", "read_source"]
