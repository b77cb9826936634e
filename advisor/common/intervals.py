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


Blocks = tuple[np.ndarray, np.ndarray]
"""Sorted, disjoint ``[starts, ends)`` blocks, as :func:`union` returns them."""


def length(blocks: Blocks) -> float:
    """Total length of disjoint blocks."""
    return float((blocks[1] - blocks[0]).sum()) if len(blocks[0]) else 0.0


def complement(blocks: Blocks, lo: float, hi: float) -> Blocks:
    """The parts of ``[lo, hi)`` that no block covers (the gaps between them), as blocks."""
    bs, be = blocks
    keep = (be > lo) & (bs < hi)
    bs, be = np.maximum(bs[keep], lo), np.minimum(be[keep], hi)
    starts = np.r_[lo, be]
    ends = np.r_[bs, hi]
    ok = ends > starts
    return starts[ok], ends[ok]


def intersect(a: Blocks, b: Blocks) -> Blocks:
    """The blocks covered by both ``a`` and ``b`` (each sorted and disjoint): each block of ``a`` meets a run of
    consecutive blocks of ``b``, so there are at most ``len(a) + len(b)`` pieces."""
    (a_s, a_e), (b_s, b_e) = a, b
    if not len(a_s) or not len(b_s):
        return np.empty(0), np.empty(0)
    first = np.searchsorted(b_e, a_s, side="right")
    last = np.searchsorted(b_s, a_e, side="left")
    counts = np.maximum(last - first, 0)
    total = int(counts.sum())
    if not total:
        return np.empty(0), np.empty(0)
    ai = np.repeat(np.arange(len(a_s)), counts)
    offsets = np.repeat(np.cumsum(counts) - counts, counts)
    bi = np.arange(total) - offsets + np.repeat(first, counts)
    s = np.maximum(a_s[ai], b_s[bi])
    e = np.minimum(a_e[ai], b_e[bi])
    ok = e > s
    return s[ok], e[ok]
