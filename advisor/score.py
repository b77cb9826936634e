"""The performance score: one number from 0 to 100 that CI can gate on.

Formula (also printed by ``advisor explain score``)::

    score = 100 * (1 - S / T)

- ``T``: the analyzed window, all ranks summed: per rank the total step time (computing + uncovered
  communication + free) where the profile records step times, else the device busy time (the union of device
  task intervals). Step time is used when known because findings also recover free and communication time.
- ``S``: recoverable time, counted once per op: for each op, the largest saving any finding attributes to it
  (``saving_by_op``, else the finding's saving split evenly over its ops); findings without ops add their
  saving as is. ``S`` is capped at ``T``.

Sub-score of a knowledge base: the same formula with only its findings. The score is deterministic for the
same input and rules, is 100 when nothing recoverable is found, and falls as estimated recoverable time grows.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass

from advisor.findings import Finding

FORMULA = __doc__ or ""


def per_op_savings(f: Finding) -> dict[str, float]:
    """The saving a finding attributes to each op it names."""
    if f.saving_by_op:
        return {op: float(v) for op, v in f.saving_by_op.items()}
    if not f.ops:
        return {}
    share = f.estimated_saving_us / len(f.ops)
    return {op: share for op in f.ops}


def _key(f: Finding, op: str) -> tuple[int | None, str]:
    return (f.rank, op)


def recoverable_us(findings: Iterable[Finding]) -> float:
    """S: the union of savings over ops (max per op), plus op-less findings' savings."""
    best: dict[tuple[int | None, str], float] = defaultdict(float)
    unattributed = 0.0
    for f in findings:
        split = per_op_savings(f)
        if not split:
            unattributed += f.estimated_saving_us
            continue
        for op, s in split.items():
            k = _key(f, op)
            best[k] = max(best[k], s)
    return sum(best.values()) + unattributed


@dataclass
class Score:
    score: float
    window_us: float
    recoverable_us: float
    by_kb: dict[str, float]
    device_busy_us: float | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "value": self.score,
            "window_us": round(self.window_us, 3),
            "device_busy_us": round(self.device_busy_us if self.device_busy_us is not None else self.window_us, 3),
            "recoverable_us": round(self.recoverable_us, 3),
            "by_kb": self.by_kb,
            "formula": "100 * (1 - S/T); T = analyzed window (step time, else device busy time), "
                       "S = per-op max of estimated savings (union)",
        }


def _value(s: float, t: float) -> float:
    if t <= 0:
        return 100.0
    return round(100.0 * (1.0 - min(s, t) / t), 1)


def compute(findings: list[Finding], window_us: float, kb_ids: Iterable[str],
            device_busy_us: float | None = None) -> Score:
    """Score ``findings`` against the analyzed window ``window_us`` (T); ``device_busy_us`` is reported only."""
    s = recoverable_us(findings)
    by_kb = {kb: _value(recoverable_us(f for f in findings if f.kb == kb), window_us) for kb in kb_ids}
    return Score(_value(s, window_us), window_us, min(s, window_us) if window_us else s, by_kb, device_busy_us)
