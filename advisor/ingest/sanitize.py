"""The one number sanitizer of ingest: every layout's normalized tables pass through :func:`sanitize` once, after
the reader returns (``advisor.ingest.read_source``), so no knowledge base, score or report sees a value that no
profiler can write.

- a time that is not finite (``inf``, ``1e400``, a 400-digit integer), a negative duration, a duration longer than
  :data:`MAX_DURATION_US` or a time stamp beyond :data:`MAX_TIMESTAMP_US` becomes missing (NaN);
- any other number that is not finite becomes missing;
- a numeric column that arrived as text or objects (a SQLite column holding NULLs, ``N/A`` cells) is made numeric;
- ops without a duration (``N/A``, text) are counted.

Each kind of change is a note naming the file it came from, so a report never silently drops or trusts a value.
:func:`require_analyzable` then refuses an input with nothing to analyze instead of scoring it 100.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor.common.errors import InputError
from advisor.model import OP_TENSOR_COLUMNS, Meta, Profile, metric_values

MAX_DURATION_US = 1e11
"""Longest duration accepted (about 28 hours): a profiler records seconds to minutes; anything longer is a corrupt
cell or a unit error, and would make every share and saving meaningless."""
MAX_TIMESTAMP_US = 1e17
"""Largest time stamp accepted: microseconds since 1970 reach 1e17 in the year 5138 (a nanosecond stamp read as
microseconds, 1.7e18, is caught)."""

MAX_BLOCK_DIM = 65_535
"""Largest block dim a kernel can launch with (CANN's limit for blockDim): a larger one is a corrupt cell, and one
near 1e23 overflowed the integer arithmetic of the occupancy model."""
_COUNTS = {"block_dim": MAX_BLOCK_DIM, "mix_block_dim": MAX_BLOCK_DIM}
"""Count columns and the largest value each can hold; negative or larger ones become missing."""

TABLES = ("ops", "op_stats", "api", "tx", "steps", "events", "comm", "memory")
_DURATIONS = frozenset({"duration_us", "dur_us", "wait_us", "elapse_us", "transit_us", "sync_us", "idle_us",
                        "total_us", "min_us", "avg_us", "max_us", "computing_us", "communication_us",
                        "comm_not_overlapped_us", "overlapped_us", "free_us", "stage_us", "bubble_us",
                        "preparing_us", "fp_bp_us", "refresh_us", "exe_us", "latency_us"})
"""Time columns that are lengths of time (never negative); every other ``*_us`` column is a point in time."""
_TEXT = frozenset({"name", "type", "core", "op_state", "process", "category", "args", "tid", "pid", "op", "group",
                   "transport", "component", "level", "step", "key", "model_name", "source", "link", "rank_set",
                   *OP_TENSOR_COLUMNS})
_SOURCE_HINTS: dict[str, tuple[str, ...]] = {
    "ops": ("op_summary", "kernel_details", "task_time", "aicore_intermediate", "trace_view", "msprof", ".db", ".csv",
            ".json"),
    "op_stats": ("op_statistic",),
    "api": ("api_statistic",),
    "tx": ("msproftx", "tx"),
    "steps": ("step_trace", "trace_view", ".db"),
    "events": ("trace_view", "msprof", "timeline", ".db", ".json"),
    "comm": ("communication", "hccl", ".db"),
    "memory": ("memory", "npu_mem", ".db"),
}


_KEYS = {"ops": "name", "events": "name", "api": "name", "tx": "name", "comm": "op", "op_stats": "type"}
"""The text column that identifies a row: a row without it (a SQLite NULL, an empty cell) cannot be named in a
finding, so it is dropped with a note instead of failing the knowledge base that reads it."""


def _source(table: str, meta: Meta) -> str:
    """The file a table most likely came from (the rank's path when no file read matches)."""
    for hint in _SOURCE_HINTS.get(table, ()):
        for f in meta.files_read:
            if hint in Path(f).name.lower():
                return f
    return meta.source or "input"


def _is_time(col: str) -> bool:
    return col.endswith("_us")


def _is_timestamp(col: str) -> bool:
    return _is_time(col) and col not in _DURATIONS and not col.endswith(("duration_us", "_time_us", "elapse_us"))


def out_of_range(arr: np.ndarray, col: str) -> tuple[np.ndarray, dict[str, int]]:
    """Values of column ``col`` to read as missing (not finite; for times: absurd time stamps, negative or absurd
    durations), and how many of each kind of problem (for :func:`note_problems`)."""
    bad = ~np.isfinite(arr) & ~np.isnan(arr)
    kinds: dict[str, int] = {}
    if bad.any():
        kinds["not finite"] = int(bad.sum())
    if col in _COUNTS:
        with np.errstate(invalid="ignore"):
            absurd = np.isfinite(arr) & ((arr < 0) | (arr > _COUNTS[col]))
        if absurd.any():
            kinds[f"negative or above {_COUNTS[col]:,}"] = int(absurd.sum())
            bad |= absurd
    if not _is_time(col):
        return bad, kinds
    if _is_timestamp(col):
        absurd = np.abs(np.nan_to_num(arr, nan=0.0, posinf=0.0, neginf=0.0)) > MAX_TIMESTAMP_US
        if absurd.any():
            kinds[f"beyond {MAX_TIMESTAMP_US:.0e} µs"] = int(absurd.sum())
            bad |= absurd
        return bad, kinds
    with np.errstate(invalid="ignore"):
        negative = arr < 0
        absurd = np.isfinite(arr) & (arr > MAX_DURATION_US)
    if negative.any():
        kinds["negative"] = int(negative.sum())
        bad |= negative
    if absurd.any():
        kinds[f"longer than {MAX_DURATION_US:.0e} µs"] = int(absurd.sum())
        bad |= absurd
    return bad, kinds


def note_problems(meta: Meta, where: str, table: str, problems: dict[str, dict[str, int]]) -> None:
    """One note per column of ``table`` with values read as missing: ``{column: {problem: count}}``."""
    for col, kinds in problems.items():
        if kinds:
            meta.notes.append(f"{where}: {table}.{col}: {', '.join(f'{n} {k}' for k, n in kinds.items())} value(s) "
                              "read as missing")


def _sanitize_frame(df: pd.DataFrame, table: str, meta: Meta, source: str | None = None) -> None:
    """Fix ``df`` in place (columns are replaced only where something changes) and note each change."""
    if not isinstance(df, pd.DataFrame) or not len(df):
        return
    where = source or _source(table, meta)
    problems: dict[str, dict[str, int]] = {}
    for col in list(df.columns):
        if not isinstance(col, str) or col in _TEXT:
            continue
        s = df[col]
        if s.dtype == object or pd.api.types.is_string_dtype(s.dtype):
            # a numeric column that arrived as objects (NULLs of a SQLite column, text cells): made numeric when
            # it is a time, or when every value it holds is a number
            values = pd.to_numeric(s, errors="coerce").to_numpy(dtype="float64")
            texts = int((s.notna() & np.isnan(values)).sum())
            if texts and not _is_time(col):
                continue  # a text column outside the contract: leave it to its reader
            if texts:
                problems.setdefault(col, {})["not a number"] = texts
            df[col] = values
            s = df[col]
        if not pd.api.types.is_float_dtype(s.dtype) and not pd.api.types.is_integer_dtype(s.dtype):
            continue
        if pd.api.types.is_integer_dtype(s.dtype) and not _is_time(col) and col not in _COUNTS:
            continue  # integers are finite; ids are not bounded here
        arr = metric_values(s).astype("float64", copy=False)  # a float32 metric (store_metrics): as written
        bad, kinds = out_of_range(arr, col)
        if bad.any():
            fixed = arr.copy()
            fixed[bad] = np.nan
            df[col] = fixed
        if kinds:
            problems.setdefault(col, {}).update(kinds)
    note_problems(meta, where, table, problems)


def sanitize(profile: Profile) -> Profile:
    """Apply the number rules to every table of ``profile`` (and DataFrames in ``extras``), in place."""
    meta = profile.meta
    ops = profile.ops
    no_duration = int(ops["duration_us"].isna().sum()) if "duration_us" in ops.columns and len(ops) else 0
    for table in TABLES:
        df = getattr(profile, table)
        key = _KEYS.get(table)
        if key is not None and len(df) and key in df.columns:
            unnamed = df[key].isna().to_numpy()
            if unnamed.any():
                meta.notes.append(f"{_source(table, meta)}: {table}: {int(unnamed.sum())} of {len(df)} rows without "
                                  f"a {key} dropped")
                df = df.loc[~unnamed].reset_index(drop=True)
                setattr(profile, table, df)
        _sanitize_frame(df, table, meta)
    for key, value in profile.extras.items():
        if isinstance(value, pd.DataFrame):
            _sanitize_frame(value, str(key), meta)
    if no_duration:
        meta.notes.append(f"{_source('ops', meta)}: {no_duration} of {len(ops)} ops have no duration (N/A or "
                          "not a number); their time is not counted")
    return profile


def has_analyzable_data(profile: Profile) -> bool:
    """Ops with a duration, or steps: what the score and every rank-scope finding are measured against."""
    ops = profile.ops
    has_ops = len(ops) > 0 and "duration_us" in ops.columns and bool(ops["duration_us"].notna().any())
    return has_ops or len(profile.steps) > 0


def require_analyzable(profile: Profile, graph: Any) -> None:
    """An input with no ops, no steps and no graph is an error, never a score of 100."""
    if graph is not None or has_analyzable_data(profile):
        return
    meta = profile.meta
    read = ", ".join(Path(f).name for f in meta.files_read[:4]) or "nothing"
    skipped = "; ".join(f"{Path(s.path).name}: {s.reason}" for s in meta.files_skipped[:2])
    what = "no ops with a duration and no steps" if len(profile.ops) else "no ops and no steps"
    raise InputError(meta.source or "input", f"{what} to analyze (read: {read}"
                     + (f"; skipped {skipped}" if skipped else "") + "); an op summary / kernel_details / task "
                     "table or a step trace is needed")
