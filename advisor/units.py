"""How a duration reads, in one place: report tables and knowledge-base titles show the same figure the same
way."""

from __future__ import annotations

import math


def fmt_us(value: float | None) -> str:
    """A duration in microseconds, in the unit a person reads fastest."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "–"
    sign = "-" if value < 0 else ""
    v = abs(float(value))
    if v >= 1_000_000:
        return f"{sign}{v / 1_000_000:.2f} s"
    if v >= 1000:
        return f"{sign}{v / 1000:.2f} ms"
    return f"{sign}{v:.1f} µs"
