"""Op patterns that are one fusion opportunity: the same, a rotation or a sub-sequence of one another.

The schedule knowledge base gathers its repeated sequences by it, and the engine joins the findings of several
ranks whose sequences it relates (rank 5 cut the chain one op earlier: the same fix).
"""

from __future__ import annotations

from collections.abc import Sequence


def related(a: Sequence[str], b: Sequence[str]) -> str | None:
    """How two op patterns are one fusion opportunity: ``same``, ``rotation`` (the same loop entered at another op)
    or ``sub-sequence`` (one runs inside the other); None when they are not."""
    a, b = tuple(a), tuple(b)
    if a == b:
        return "same"
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    if len(short) == len(long_):
        return "rotation" if _inside(short, long_ + long_[:-1]) else None
    return "sub-sequence" if _inside(short, long_) else None


def _inside(short: tuple[str, ...], long_: tuple[str, ...]) -> bool:
    k = len(short)
    return any(long_[i:i + k] == short for i in range(len(long_) - k + 1))
