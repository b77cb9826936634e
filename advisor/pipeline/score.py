"""The performance score: one number from 0 to 100 that CI can gate on.

Formula (also printed by ``advisor explain score``)::

    score = 100 * (1 - S / T)

- ``T``: the analyzed window of the time model, all ranks summed (``advisor.timemodel``): per rank its steps'
  compute + uncovered communication + free time, from the profiler's own split where it has one, else derived
  from the device tasks (the device's active span when no step is recorded). The same run gives the same T
  whatever the layout it was exported in.
- ``S``: recoverable time, counted once per op and weighed by confidence: for each op, the largest
  ``confidence x saving`` any finding attributes to it (``saving_by_op``, else the finding's saving split evenly
  over its ops); findings without ops add ``confidence x saving``. A configuration fix whose effect is known
  (confidence 0.9) weighs nearly all its saving; a speculative one (tuning that may find nothing, 0.3) a third.
  Savings are first bounded by the time they claim (an op's time, a bucket of the time model). ``S`` <= ``T``.

Sub-score of a knowledge base: the same formula with only its findings. The score is deterministic for the
same input and rules, is 100 when nothing recoverable is found, and falls as estimated recoverable time grows.
"""

from __future__ import annotations

import fnmatch
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from advisor.common.units import fmt_us
from advisor.config.loader import Waiver
from advisor.findings import Finding

FORMULA = __doc__ or ""

_SUM_TOLERANCE = 1e-9
"""Relative difference under which a ``saving_by_op`` is taken to add up to the finding's saving as it is: scaling
it would only move float rounding (and the reported values' last digit)."""


def per_op_savings(f: Finding) -> dict[str, float]:
    """The saving a finding attributes to each op it names (or time-model bucket, a pseudo-op): its
    ``saving_by_op``, else the saving split evenly over ``ops``.

    The one per-op split of the project: the score's union over ops, the caps of :func:`bound_savings`, the
    waivers and the root-cause hierarchy all read it. The parts add up to ``estimated_saving_us``: a
    ``saving_by_op`` that sums to something else is scaled to it (a finding never claims more per op than in
    total)."""
    if f.saving_by_op:
        total = sum(float(v) for v in f.saving_by_op.values())
        if total <= 0:
            return {op: 0.0 for op in f.saving_by_op}
        if abs(total - f.estimated_saving_us) <= _SUM_TOLERANCE * max(1.0, total):
            return {op: float(v) for op, v in f.saving_by_op.items()}  # adds up already (float rounding aside)
        scale = f.estimated_saving_us / total
        return {op: float(v) * scale for op, v in f.saving_by_op.items()}
    if not f.ops:
        return {}
    share = f.estimated_saving_us / len(f.ops)
    return {op: share for op in f.ops}


@dataclass
class WaivedFinding:
    """The part of a finding a waiver removed: its ops and the saving attributed to them."""

    finding: Finding
    waiver: Waiver
    ops: list[str]
    saving_us: float | None = None
    """Saving of the waived ops; None means the whole finding's saving."""

    def to_dict(self) -> dict[str, Any]:
        saving = self.finding.estimated_saving_us if self.saving_us is None else self.saving_us
        return {"rule": self.finding.rule, "kb": self.finding.kb, "ops": list(self.ops),
                "estimated_saving_us": round(saving, 3), "waiver": self.waiver.to_dict()}


def waiver_problems(waivers: Sequence[Waiver], waived: Sequence[WaivedFinding], rules_seen: Iterable[str],
                    rules_known: Iterable[str]) -> list[str]:
    """A waiver that names no rule advisor knows, or that removed nothing from this run: said, not silently
    accepted (a typo in a rule id would otherwise hide nothing and look like it works). ``rules_seen`` are the
    rules of this run's findings, ``rules_known`` every rule the knowledge bases that ran declare."""
    known = set(rules_known) | set(rules_seen)
    used = {id(w.waiver) for w in waived}
    out = []
    for w in waivers:
        where = f"waiver {w.rule!r} ops {w.ops!r} ({w.source})"
        if w.renamed_to and not any(fnmatch.fnmatchcase(r, w.rule) for r in known):
            out.append(f"{where} names a former rule id: it waives {', '.join(w.renamed_to)} (rules/aliases.yaml); "
                       "write the current id")
        if not any(w.matches_rule(r) for r in known):
            out.append(f"{where} names no rule of the knowledge bases that ran (see `advisor rules list`); it "
                       "waives nothing")
        elif id(w) not in used:
            out.append(f"{where} matched no finding of this run; it waives nothing")
    return out


# ---------------------------------------------------------------------------------------------------------
# waivers: applied before the score, with the same per-op split
# ---------------------------------------------------------------------------------------------------------
def apply_waivers(findings: list[Finding], waivers: Sequence[Waiver]) -> tuple[list[Finding], list[WaivedFinding]]:
    """Remove waived ops from findings; return the findings that remain and what each waiver removed.

    A finding all of whose ops are waived disappears; one with some ops waived keeps the others, with its saving
    reduced by the waived ops' share. A finding without ops is waived only by a waiver for all ops (``*``).
    The input findings are not modified.
    """
    if not waivers:
        return list(findings), []
    kept: list[Finding] = []
    waived: list[WaivedFinding] = []
    for f in findings:
        applicable = [w for w in waivers if w.matches_rule(f.rule)]
        if not applicable:
            kept.append(f)
            continue
        if not f.ops:
            w = next((w for w in applicable if w.ops == "*"), None)
            if w is not None:
                waived.append(WaivedFinding(f, w, []))
            else:
                kept.append(f)
            continue
        by_waiver: dict[int, list[str]] = {}
        for op in f.ops:
            idx = next((i for i, w in enumerate(applicable) if w.matches_op(op)), None)
            if idx is not None:
                by_waiver.setdefault(idx, []).append(op)
        if not by_waiver:
            kept.append(f)
            continue
        dropped = {op for ops in by_waiver.values() for op in ops}
        savings = per_op_savings(f)
        for idx, ops in by_waiver.items():
            waived.append(WaivedFinding(f, applicable[idx], ops, sum(savings.get(op, 0.0) for op in ops)))
        remaining = [op for op in f.ops if op not in dropped]
        if remaining:
            kept.append(replace(
                f, ops=remaining,
                saving_by_op={op: s for op, s in f.saving_by_op.items() if op not in dropped},
                estimated_saving_us=sum(savings.get(op, 0.0) for op in remaining),
            ))
    return kept, waived


# ---------------------------------------------------------------------------------------------------------
# bounds and the score
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Limits:
    """What a finding on one rank may claim: each op's total time, each bucket of the time model, the window."""

    window_us: float
    op_us: Mapping[str, float] = field(default_factory=dict)
    """Total device time per op name on this rank."""
    bucket_us: Mapping[str, float] = field(default_factory=dict)
    """Time of the pseudo-ops that stand for a bucket (free time, other communication ops)."""

    def of(self, op: str) -> float | None:
        """The most a finding may claim on ``op``: its bucket's time for a pseudo-op, else the op's time (None:
        an op this rank does not hold)."""
        return self.bucket_us[op] if op in self.bucket_us else self.op_us.get(op)


def limits_of(f: Finding, limits: Mapping[int | None, Limits]) -> Limits | None:
    """The limits of ``f``'s rank; a finding of no listed rank takes the only rank's, else none (a cluster
    finding, bounded by the job's windows)."""
    if f.rank in limits:
        return limits[f.rank]
    return next(iter(limits.values())) if len(limits) == 1 else None


def bound_savings(findings: list[Finding], limits: Mapping[int | None, Limits]) -> list[Finding]:
    """Every saving within the time it claims: per op at most the op's time (pseudo-ops: their bucket of the time
    model), a finding at most the sum of its ops' bounds (op-less: the window). Findings over their bound are
    replaced by a capped copy whose ``basis`` says so; the rest are returned as they are.

    ``limits`` maps a rank to its limits; findings of a rank not in it (cluster findings) are bounded by the sum
    of every rank's window."""
    total_window = sum(lim.window_us for lim in limits.values())
    out: list[Finding] = []
    for f in findings:
        lim = limits_of(f, limits)
        window = lim.window_us if lim is not None else total_window
        split = per_op_savings(f)
        capped_split: dict[str, float] = {}
        for op, v in split.items():
            bound = lim.of(op) if lim is not None else None
            capped_split[op] = min(v, bound) if bound is not None else v
        total = sum(capped_split.values()) if capped_split else f.estimated_saving_us
        total = min(total, f.estimated_saving_us, window) if window > 0 else min(total, f.estimated_saving_us)
        if total < f.estimated_saving_us - 1e-6:
            out.append(replace(
                f, estimated_saving_us=total,
                saving_by_op={op: v for op, v in capped_split.items()} if f.saving_by_op else {},
                basis=f"{f.basis}; capped at {fmt_us(total)}, the time its ops / bucket take in the analyzed window"))
        else:
            out.append(f)
    return out


def _key(f: Finding, op: str) -> tuple[int | None, str]:
    return (f.rank, op)


def recoverable_us(findings: Iterable[Finding], weighted: bool = True) -> float:
    """S: the union of savings over ops (max per op), plus op-less findings' savings; each saving weighed by the
    finding's confidence (``weighted=False``: as estimated)."""
    best: dict[tuple[int | None, str], float] = defaultdict(float)
    unattributed = 0.0
    for f in findings:
        w = f.confidence if weighted else 1.0
        split = per_op_savings(f)
        if not split:
            unattributed += w * f.estimated_saving_us
            continue
        for op, s in split.items():
            k = _key(f, op)
            best[k] = max(best[k], w * s)
    return sum(best.values()) + unattributed


@dataclass
class Score:
    score: float
    window_us: float
    recoverable_us: float
    """What the findings claim: the union over ops of their estimated savings (not weighed)."""
    by_kb: dict[str, float]
    device_busy_us: float | None = None
    weighted_recoverable_us: float | None = None
    """S of the formula: the union of ``confidence x saving``."""

    def to_dict(self) -> dict[str, object]:
        return {
            "value": self.score,
            "window_us": round(self.window_us, 3),
            "device_busy_us": round(self.device_busy_us if self.device_busy_us is not None else self.window_us, 3),
            "recoverable_us": round(self.recoverable_us, 3),
            "weighted_recoverable_us": round(self.weighted_recoverable_us if self.weighted_recoverable_us
                                             is not None else self.recoverable_us, 3),
            "by_kb": self.by_kb,
            "formula": "100 * (1 - S/T); T = the analyzed window of the time model, S = per-op max of confidence x "
                       "estimated saving (union)",
        }


def _value(s: float, t: float) -> float:
    if t <= 0:
        return 100.0
    return round(100.0 * (1.0 - min(s, t) / t), 1)


def compute(findings: list[Finding], window_us: float, kb_ids: Iterable[str],
            device_busy_us: float | None = None) -> Score:
    """Score ``findings`` against the analyzed window ``window_us`` (T); ``device_busy_us`` is reported only."""
    s = recoverable_us(findings)
    claimed = recoverable_us(findings, weighted=False)
    by_kb = {kb: _value(recoverable_us(f for f in findings if f.kb == kb), window_us) for kb in kb_ids}
    cap = (lambda v: min(v, window_us)) if window_us else (lambda v: v)
    return Score(_value(s, window_us), window_us, cap(claimed), by_kb, device_busy_us, cap(s))
