"""Events no rule reads, counted instead of kept (``Meta.events_read``, ``Profile.event_summary``).

A ``with_stack`` trace holds more Python-function, enqueue/dequeue and runtime events than operator events, and no
knowledge base reads them row by row. The trace reader decides per event (per distinct name, process and category,
so the test runs once per value) whether the analysis reads it; the others go to :class:`EventCounter`, which keeps
four numbers per process and name. The same counting serves readers that get their events as a table (SQLite
exports): :func:`split_events`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from advisor.ingest.sanitize import note_problems, out_of_range
from advisor.model import EVENT_SUMMARY_COLUMNS, EventSelection, Meta, empty_frame, label_mask

_GROW = 256


class EventCounter:
    """Count, summed duration, first start and last end per ``(owner, name)`` of the events added a block at a
    time. ``owner`` is whatever names the process when the block is read (a trace's pid, resolved to its process
    name by :meth:`frame`). Times pass the sanitizer's rules first, as kept events do (``problems``)."""

    def __init__(self) -> None:
        self.problems: dict[str, dict[str, int]] = {}
        """What :func:`advisor.ingest.sanitize.out_of_range` read as missing, per column."""
        self.index: dict[tuple[Any, str], int] = {}
        self.count = np.zeros(_GROW, dtype=np.int64)
        self.total = np.zeros(_GROW)
        self.first = np.full(_GROW, np.nan)
        self.last = np.full(_GROW, np.nan)

    def __len__(self) -> int:
        return int(self.count[:len(self.index)].sum())

    def add(self, owners: Sequence[Any], names: Sequence[str], starts_us: np.ndarray, durs_us: np.ndarray) -> None:
        """Events as parallel columns: who recorded them, their names, start (us offsets) and duration (us)."""
        if not len(names):
            return
        index = self.index
        codes = np.fromiter((index.setdefault(k, len(index)) for k in zip(owners, names, strict=True)), np.int64,
                            len(names))
        self._reserve(len(index))
        n = len(index)
        starts = self._sane(np.asarray(starts_us, dtype="float64"), "start_us")
        durs = self._sane(np.asarray(durs_us, dtype="float64"), "duration_us")
        self.count[:n] += np.bincount(codes, minlength=n)
        self.total[:n] += np.bincount(codes, weights=np.nan_to_num(durs, nan=0.0), minlength=n)
        ends = starts + np.nan_to_num(durs)
        timed = np.isfinite(starts)
        _fold(np.fmin, self.first, codes[timed], starts[timed])
        _fold(np.fmax, self.last, codes[timed], ends[timed])

    def _sane(self, values: np.ndarray, column: str) -> np.ndarray:
        bad, kinds = out_of_range(values, column)
        if not kinds:
            return values
        seen = self.problems.setdefault(column, {})
        for kind, n in kinds.items():
            seen[kind] = seen.get(kind, 0) + n
        return np.where(bad, np.nan, values)

    def _reserve(self, n: int) -> None:
        if n <= len(self.count):
            return
        size = max(n, 2 * len(self.count))
        self.count = np.concatenate([self.count, np.zeros(size - len(self.count), dtype=np.int64)])
        self.total = np.concatenate([self.total, np.zeros(size - len(self.total))])
        self.first = np.concatenate([self.first, np.full(size - len(self.first), np.nan)])
        self.last = np.concatenate([self.last, np.full(size - len(self.last), np.nan)])

    def frame(self, process_of: Callable[[Any], str] = str) -> pd.DataFrame:
        """The counts per process (``process_of(owner)``) and name (:data:`EVENT_SUMMARY_COLUMNS`)."""
        if not self.index:
            return empty_frame(EVENT_SUMMARY_COLUMNS)
        n = len(self.index)
        keys = list(self.index)
        return merge_summaries([pd.DataFrame({
            "process": [process_of(owner) for owner, _ in keys], "name": [name for _, name in keys],
            "count": self.count[:n].copy(), "total_us": self.total[:n].copy(), "first_us": self.first[:n].copy(),
            "last_end_us": self.last[:n].copy()})])


def _fold(op: np.ufunc, into: np.ndarray, codes: np.ndarray, values: np.ndarray) -> None:
    """``into[c] = op(into[c], v)`` for every (c, v), NaN in ``into`` meaning "none yet" (fmin/fmax skip it)."""
    if len(codes):
        op.at(into, codes, values)


def merge_summaries(frames: Sequence[pd.DataFrame]) -> pd.DataFrame:
    """Summaries of several files (or of one file read in two ways) as one: counts and durations added, the first
    start the earliest, the last end the latest. Sorted by process and name."""
    frames = [f for f in frames if f is not None and len(f)]
    if not frames:
        return empty_frame(EVENT_SUMMARY_COLUMNS)
    both = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    both = both.assign(process=both["process"].astype(str), name=both["name"].astype(str))
    out = both.groupby(["process", "name"], sort=True).agg(
        count=("count", "sum"), total_us=("total_us", "sum"), first_us=("first_us", "min"),
        last_end_us=("last_end_us", "max")).reset_index()
    out["count"] = out["count"].astype("int64")
    return out[EVENT_SUMMARY_COLUMNS]


def split_events(events: pd.DataFrame, selection: EventSelection | None, into: EventCounter) -> pd.DataFrame:
    """The events ``selection`` keeps; the others are added to ``into`` (events without a name are kept: the
    sanitizer drops them with its note). None keeps everything."""
    if selection is None or not len(events):
        return events
    wanted = events["name"].isna().to_numpy(copy=True)
    for column, test in zip(("process", "name", "category"), selection.tests(), strict=True):
        wanted |= label_mask(events[column], test)
    if wanted.all():
        return events
    dropped = events[~wanted]
    into.add(dropped["process"].astype(object).where(dropped["process"].notna(), "").astype(str).tolist(),
             dropped["name"].astype(str).tolist(), dropped["start_us"].to_numpy(dtype="float64"),
             dropped["duration_us"].to_numpy(dtype="float64"))
    kept = events[wanted].reset_index(drop=True)
    for col in ("process", "name", "category", "tid"):
        if isinstance(kept[col].dtype, pd.CategoricalDtype):
            kept[col] = kept[col].cat.remove_unused_categories()
    return kept


def note_counted(meta: Meta, source: str, counter: EventCounter, summary: pd.DataFrame) -> None:
    """Say in the report how many events of ``source`` were counted instead of kept, and which of their times the
    sanitizer read as missing."""
    if n := len(counter):
        meta.notes.append(f"{source}: {n} events of {len(summary)} names no knowledge base reads were counted per "
                          "name, not kept")
    note_problems(meta, source, "events", counter.problems)


__all__ = ["EventCounter", "merge_summaries", "note_counted", "split_events"]
