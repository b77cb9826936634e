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


def duration_scale(largest_us: float) -> tuple[str, float]:
    """(unit, microseconds per unit) for an axis whose largest value is ``largest_us``: the unit :func:`fmt_us`
    would print that value in, so a chart's axis and its bar labels agree."""
    v = abs(float(largest_us or 0.0))
    if v >= 1_000_000:
        return "s", 1_000_000.0
    if v >= 1000:
        return "ms", 1000.0
    return "µs", 1.0
