"""Root causes and their symptoms: the report lists each cause once, with what it explains folded under it.

Knowledge bases see the same ops from different angles: a decomposed Mish chain is also "no clear bound" to the
roofline, a "fusible sequence" to the scheduler and "vector bound" to the operator checks. Each rule declares its
role (``RuleDoc.role``): a ``cause`` names something to change (a decomposed activation, an unfused chain, a
TransData site, an AI CPU op, uncovered communication, host-bound dispatch, a badly shaped op); a ``symptom``
describes how ops behave (bound class, fusible sequence, device idle). A symptom whose ops a cause also names is
absorbed by that cause: it is listed under the cause's ``symptoms`` with its evidence and the saving it measured;
the cause's saving stays its own estimate (the union over its ops, never more than their time). The score counts
every op once at the largest weighed saving any finding gives it.
A symptom no cause explains stays a finding of its own: an unexplained behaviour is still worth acting on.

Findings of several ranks with the same rule and title are one finding (``ranks`` lists them).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

from advisor.findings import SEVERITIES, Finding
from advisor.score import Limits, per_op_savings
from advisor.units import fmt_us

CAUSE = "cause"
SYMPTOM = "symptom"


def _claims(f: Finding) -> set[str]:
    """What a finding claims time on: its ops and the pseudo-ops its saving is attributed to."""
    return set(f.ops) | set(f.saving_by_op)


def _same_scope(cause: Finding, symptom: Finding) -> bool:
    return cause.rank is None or cause.rank == symptom.rank


def _symptom_record(f: Finding, ops: Sequence[str], saving: float) -> dict[str, Any]:
    return {"rule": f.rule, "kb": f.kb, "title": f.title, "severity": f.severity, "ops": list(ops),
            "estimated_saving_us": round(saving, 3), "evidence": f.to_dict()["evidence"],
            **({"rank": f.rank} if f.rank is not None else {})}


def absorb(findings: Sequence[Finding], roles: Mapping[str, str],
           limits: Mapping[int | None, Limits] | None = None) -> list[Finding]:
    """Causes with their symptoms attached (see the module doc); unexplained symptoms stay findings. ``limits``
    (accepted for callers that pass the rank limits) is not needed: savings were bounded before."""
    causes = [f for f in findings if roles.get(f.rule, CAUSE) != SYMPTOM]
    symptoms = [f for f in findings if roles.get(f.rule, CAUSE) == SYMPTOM]
    claims = [(_claims(c), c) for c in causes]
    attached: dict[int, list[tuple[Finding, list[str], dict[str, float]]]] = defaultdict(list)
    out: list[Finding] = []
    for s in symptoms:
        split = per_op_savings(s)
        remaining = _claims(s)
        for i, (claimed, c) in sorted(enumerate(claims), key=lambda ic: -ic[1][1].estimated_saving_us):
            if not _same_scope(c, s):
                continue
            common = [op for op in s.ops if op in claimed and op in remaining]
            common += [op for op in s.saving_by_op if op in claimed and op in remaining and op not in common]
            if not common:
                continue
            attached[i].append((s, common, {op: split.get(op, 0.0) for op in common}))
            remaining -= set(common)
        if remaining == _claims(s):
            out.append(s)
        elif remaining:
            kept = [op for op in s.ops if op in remaining]
            by_op = {op: v for op, v in split.items() if op in remaining}
            out.append(replace(s, ops=kept, saving_by_op=by_op if s.saving_by_op else {},
                               estimated_saving_us=min(s.estimated_saving_us, sum(by_op.values()))))
    for i, (_, c) in enumerate(claims):
        parts = attached.get(i)
        if not parts:
            out.append(c)
            continue
        out.append(_with_symptoms(c, parts))
    return out


def _with_symptoms(cause: Finding, parts: list[tuple[Finding, list[str], dict[str, float]]]) -> Finding:
    """The cause with its symptoms folded under it. Its saving stays its own estimate of what its fix recovers
    (already the union over its ops): a symptom's saving on the same ops measures another remedy (tuning a
    kernel the cause's fix may remove), so it is listed, not added."""
    records = [_symptom_record(s, ops, sum(by_op.values())) for s, ops, by_op in parts]
    records.sort(key=lambda r: (-r["estimated_saving_us"], r["rule"]))
    return replace(cause, symptoms=[*cause.symptoms, *records])


_QUANTITY = re.compile(r"(?<![\w/.])(?<!rank )(?<!ranks )(?<!stage )(?<!step )\d+(?:\.\d+)?")
"""A number standing alone in a title (a share, a time, a count), not one inside a name such as ``Conv_33`` nor
one that names a rank, a stage or a step (``rank 3 arrives last`` and ``rank 2 arrives last`` are two findings)."""


def merge_ranks(findings: Sequence[Finding]) -> list[Finding]:
    """Findings of several ranks with the same rule and the same title up to its quantities become one, listing
    the ranks: 16 ranks with "uncovered communication 62.8 %" .. "63.3 %" are one cause, shown with the largest
    rank's figures and the saving summed over the ranks (the window it is measured against is their sum too).
    Findings of different ranks whose titles differ in a word but whose advice is the same up to its quantities
    ("host-bound" on one rank, "moderately host-bound" on the other) are the same cause too."""
    groups: dict[tuple[str, str], list[Finding]] = defaultdict(list)
    order: list[tuple[str, str]] = []
    for f in findings:
        key = (f.rule, _QUANTITY.sub("#", f.title))
        if key not in groups:
            order.append(key)
        groups[key].append(f)
    order = _join_same_advice(groups, order)
    out: list[Finding] = []
    for key in order:
        group = groups[key]
        ranks = sorted({r for f in group for r in ([f.rank] if f.rank is not None else f.ranks)})
        if len(group) == 1 or len({f.rank for f in group}) < len(group):  # one input's findings stay apart
            out.extend(group)
            continue
        first = max(group, key=lambda f: f.estimated_saving_us)
        ops = list(dict.fromkeys(op for f in group for op in f.ops))
        evidence = dict(first.evidence)
        evidence["by_rank"] = {str(f.rank): {"estimated_saving_us": round(f.estimated_saving_us, 3),
                                             "ops": len(f.ops)} for f in group if f.rank is not None}
        symptoms = [{**s, "rank": f.rank} if f.rank is not None and "rank" not in s else s
                    for f in group for s in f.symptoms]
        out.append(replace(first, rank=None, ranks=ranks, ops=ops, saving_by_op={}, evidence=evidence,
                           estimated_saving_us=sum(f.estimated_saving_us for f in group), symptoms=symptoms,
                           severity=min((f.severity for f in group), key=SEVERITIES.index),
                           basis=first.basis + f"; summed over {len(group)} inputs"
                           + (f" (ranks {', '.join(map(str, ranks))})" if ranks else "")))
    return out


def reseverity(findings: Sequence[Finding], windows: Mapping[int | None, float],
               levels: Mapping[str, Mapping[str, float]]) -> list[Finding]:
    """Severity from the share of the analyzed window a finding's saving is (its KB's ``severity`` levels): a
    finding never looks more urgent than the time it can recover. Findings with no saving keep ``info``."""
    total = sum(windows.values())
    out = []
    for f in findings:
        lv = levels.get(f.kb)
        if not lv or f.estimated_saving_us <= 0:
            out.append(f if f.estimated_saving_us > 0 or f.severity == "info" else replace(f, severity="info"))
            continue
        window = windows.get(f.rank, total) if f.rank is not None else total
        share = f.estimated_saving_us / window if window > 0 else 0.0
        sev = next((s for s in ("critical", "major", "minor") if share >= float(lv.get(s, 2.0))), "info")
        out.append(f if sev == f.severity else replace(f, severity=sev))
    return out


def _join_same_advice(groups: dict[tuple[str, str], list[Finding]],
                      order: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Groups of one rule with the same advice (recommendation up to its quantities) and no rank in common are
    joined into the first of them; the keys left, in order."""
    first_of: dict[tuple[str, str], tuple[str, str]] = {}
    kept: list[tuple[str, str]] = []
    for key in order:
        group = groups[key]
        advice = (key[0], _QUANTITY.sub("#", group[0].recommendation))
        into = first_of.get(advice)
        if into is not None and not {f.rank for f in groups[into]} & {f.rank for f in group}:
            groups[into].extend(group)
            del groups[key]
            continue
        first_of.setdefault(advice, key)
        kept.append(key)
    return kept


def explain_waiting(findings: Sequence[Finding], explains: Mapping[str, Sequence[str]]) -> list[Finding]:
    """Cluster causes take the waiting they cause out of the per-rank findings they explain (``RuleDoc.explains``):
    ranks that idle in collectives because stage 1 computes 170 ms more per step are one cause, not two. Largest
    cause first, each explains up to its own saving of the waiting part of those findings (``evidence
    ["sync_recoverable_us"]`` as a share of the finding's saving, so a finding merged over ranks keeps its ratio);
    the explained finding keeps the rest of its saving (transfers to hide, unexplained waiting) or, with nothing
    left, becomes a symptom of the cause."""
    causes = sorted((f for f in findings if explains.get(f.rule) and f.estimated_saving_us > 0),
                    key=lambda f: -f.estimated_saving_us)
    if not causes:
        return list(findings)
    current = {id(f): f for f in findings}
    waiting = {id(f): _waiting_part(f) for f in findings}  # what is left to explain of each finding's waiting
    listed: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for cause in causes:
        budget = cause.estimated_saving_us
        for key, f in list(current.items()):
            if budget <= 0 or f.rule not in explains[cause.rule] or f.estimated_saving_us <= 0 \
                    or not _same_waiting_ranks(cause, f):
                continue
            moved = min(budget, waiting[key], f.estimated_saving_us)
            if moved <= 0:
                continue
            budget -= moved
            waiting[key] -= moved
            listed[id(cause)].append({**_symptom_record(f, list(f.ops), moved), "explained_us": round(moved, 3)})
            left = f.estimated_saving_us - moved
            if left <= 1e-6:
                del current[key]
            else:
                explained = {**(f.evidence.get("explained_by") or {}), cause.rule: round(moved, 3)}
                current[key] = replace(f, estimated_saving_us=left, saving_by_op={},
                                       evidence={**f.evidence, "explained_by": explained},
                                       basis=f.basis + f"; {fmt_us(moved)} of its waiting is explained by {cause.rule}")
    return [replace(f, symptoms=[*f.symptoms, *listed[key]]) if key in listed else f
            for key, f in current.items()]


def _same_waiting_ranks(cause: Finding, f: Finding) -> bool:
    """Whether ``cause`` may explain ``f``'s waiting: a cause that names the ranks whose waiting it is
    (``evidence["waiting_ranks"]``: a late peer explains the waiting of the ranks that waited on it) explains only
    findings of those ranks; any other cause (a slow rank, a stage, a bubble: the others wait for it) explains all."""
    named = cause.evidence.get("waiting_ranks")
    if not isinstance(named, (list, tuple)):
        return True
    allowed = {int(r) for r in named} | {int(r) for r in cause.ranks} | ({cause.rank} if cause.rank is not None
                                                                         else set())
    theirs = {int(r) for r in f.ranks} | ({f.rank} if f.rank is not None else set())
    return not theirs or bool(allowed & theirs)


def _waiting_part(f: Finding) -> float:
    """The part of ``f``'s saving that is waiting for peers (its ``sync_recoverable_us`` evidence, as a share)."""
    sync = f.evidence.get("sync_recoverable_us")
    if not isinstance(sync, (int, float)) or sync <= 0:
        return 0.0
    by_rank = f.evidence.get("by_rank") or {}
    own = float(by_rank[max(by_rank, key=lambda r: by_rank[r]["estimated_saving_us"])]["estimated_saving_us"]) \
        if by_rank else f.estimated_saving_us
    return f.estimated_saving_us * min(1.0, float(sync) / own) if own > 0 else 0.0


__all__ = ["CAUSE", "SYMPTOM", "absorb", "explain_waiting", "merge_ranks", "reseverity"]


def rank(findings: Sequence[Finding]) -> list[Finding]:
    """The report's order: largest estimated saving first; ties by severity, then rule id, first op and rank
    (deterministic)."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (-round(f.estimated_saving_us, 3), order[f.severity], f.rule,
                                           f.ops[0] if f.ops else "", f.rank if f.rank is not None else -1))
