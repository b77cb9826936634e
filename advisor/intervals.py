"""Unions of time intervals, vectorized: device busy time, overlap of one kind of task with another.

Several analyses ask "how much of this task ran while something else was running": merge the other tasks into
disjoint sorted blocks once (:func:`union`), then answer per task with two binary searches (:func:`overlap`).
"""

from __future__ import annotations

import numpy as np


def union(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Sorted, disjoint blocks ``[block_starts, block_ends)`` covering the intervals (non-finite ones dropped).

    Copies the inputs only when some are dropped and frees each per-interval array once used (a 2M-task union
    would otherwise hold ~100 MB of them at once)."""
    starts = np.asarray(starts, dtype="float64")
    ends = np.asarray(ends, dtype="float64")
    ok = np.isfinite(starts) & np.isfinite(ends)
    if not ok.all():
        starts, ends = starts[ok], ends[ok]
    del ok
    if not len(starts):
        return starts.copy(), ends.copy()
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    del order
    run_end = np.maximum.accumulate(e)
    new = np.empty(len(s), dtype=bool)
    new[0] = True
    np.greater(s[1:], run_end[:-1], out=new[1:])
    del run_end
    first = np.flatnonzero(new)
    del new
    block_starts = s[first]
    del s
    return block_starts, np.maximum.reduceat(e, first)


def union_length(starts: np.ndarray, ends: np.ndarray) -> float:
    """Total length of the union of ``[start, end)`` intervals."""
    bs, be = union(starts, ends)
    return float((be - bs).sum())


def covered_before(bs: np.ndarray, be: np.ndarray, t: np.ndarray) -> np.ndarray:
    """Length of the blocks (from :func:`union`) lying before each time ``t``."""
    t = np.asarray(t, dtype="float64")
    if not len(bs):
        return np.zeros(len(t))
    cum = np.r_[0.0, np.cumsum(be - bs)]
    k = np.searchsorted(bs, t, side="right") - 1
    kk = np.maximum(k, 0)
    inside = np.clip(t - bs[kk], 0.0, be[kk] - bs[kk])
    return np.where(k >= 0, cum[kk] + inside, 0.0)


def overlap(bs: np.ndarray, be: np.ndarray, s: np.ndarray, e: np.ndarray) -> np.ndarray:
    """How long each interval ``[s, e)`` overlaps the blocks."""
    return covered_before(bs, be, e) - covered_before(bs, be, s)
