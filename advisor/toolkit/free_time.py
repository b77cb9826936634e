"""Host-side savings share the device's free time: within one knowledge base they never claim more of it than there is.

Every host-side cause (a setting that slows dispatch, GC pauses, a slow DataLoader, synchronous copies...) recovers
idle device time and attributes its saving to the ``(free time)`` pseudo-op
(:data:`advisor.toolkit.time.FREE_TIME_KEY`). Several causes of one knowledge base can each measure more than the
window's free time; :func:`within_free_time` scales their free-time parts down together, in proportion, so their
sum is at most the free time of the rank's time model, and says so in each finding's basis.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace

from advisor.common.units import fmt_us
from advisor.findings import Finding
from advisor.toolkit.common import severity_for
from advisor.toolkit.time import FREE_TIME_KEY


def free_part(f: Finding) -> float:
    """The saving a finding attributes to the free-time pseudo-op."""
    return float(f.saving_by_op.get(FREE_TIME_KEY, 0.0))


def within_free_time(findings: Sequence[Finding], free_us: float, window_us: float,
                     levels: Mapping[str, float]) -> list[Finding]:
    """``findings`` with their free-time parts scaled so that together they claim at most ``free_us``; a scaled
    finding's saving is the sum of its parts, its severity re-derived from its share of ``window_us``."""
    claimed = sum(free_part(f) for f in findings)
    if claimed <= free_us or claimed <= 0:
        return list(findings)
    scale = max(0.0, free_us) / claimed
    note = (f"; the free-time savings of this knowledge base scaled by {scale:.3g} so that together they do not "
            f"exceed the device's free time ({fmt_us(free_us)})")
    out = []
    for f in findings:
        part = free_part(f)
        if part <= 0:
            out.append(f)
            continue
        by_op = {**f.saving_by_op, FREE_TIME_KEY: part * scale}
        saving = sum(by_op.values())
        out.append(replace(f, saving_by_op=by_op, estimated_saving_us=saving, basis=f.basis + note,
                           severity=severity_for(saving / window_us, levels) if window_us > 0 else "info"))
    return out


__all__ = ["free_part", "within_free_time"]
