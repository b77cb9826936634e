"""Root causes and their symptoms: the report lists each cause once, and the causes partition the analyzed time.

Knowledge bases see the same ops from different angles: a decomposed Mish chain is also "no clear bound" to the
roofline, a "fusible sequence" to the scheduler and "memory bound" to the layer check. Each rule declares its
role (``RuleDoc.role``): a ``cause`` names something to change (a decomposed activation, an unfused chain, a
TransData site, an AI CPU op, uncovered communication, host-bound dispatch, a badly shaped op); a ``symptom``
describes how ops behave (bound class, fusible sequence, device idle). As top-down analysis attributes every cycle
to one node:

* a cause explains a symptom only through a mechanism its rule states (``RuleDoc.explains``: symptom rule id ->
  how fixing the cause removes the symptom's time), on what both claim (the same ops, or the same bucket of the time
  model). Each symptom sits under exactly one cause -- the one whose fix removes the most of its time, when that is
  at least ``absorb.min_share`` of it (``rules/findings.yaml``) -- and is then never also a top-level finding; a
  symptom no cause explains that much stays a finding of its own (:func:`absorb`);
* the top-level findings partition the window: largest first, each keeps of its saving on an op (or bucket) only
  what the larger ones left of that op's time (:func:`partition`), so no op-microsecond belongs to two of them and
  their savings add up to at most the window;
* a cluster cause that makes ranks wait takes the whole waiting part of the per-rank findings it explains
  (:func:`explain_waiting`);
* materiality is data: a finding below ``materiality.minor_below`` of the window is never above minor, one below
  ``materiality.notes_below`` -- or with no measured saving (an environment hint, an overview) -- is a note, not a
  finding (:func:`split_notes`); severity comes from the share of the steady-state window alone (:func:`reseverity`).

The score counts every op once at the largest weighed saving any finding gives it (``advisor.pipeline.score``), before this.
Findings of several ranks with the same rule and title are one finding (``ranks`` lists them).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from advisor.common.units import fmt_us
from advisor.findings import SEVERITIES, Finding
from advisor.pipeline.score import Limits, limits_of, per_op_savings
from advisor.toolkit.sequences import related

CAUSE = "cause"
SYMPTOM = "symptom"


def mechanisms_of(docs: Iterable[Any]) -> dict[str, dict[str, str]]:
    """Cause rule id -> {symptom rule id: mechanism}, from the rules' ``explains`` (a mapping; a plain tuple of rule
    ids -- the waiting a cluster cause explains -- has no stated mechanism text)."""
    out: dict[str, dict[str, str]] = {}
    for doc in docs:
        explains = getattr(doc, "explains", ()) or ()
        if isinstance(explains, Mapping):
            out[doc.id] = {str(k): str(v) for k, v in explains.items()}
        elif explains:
            out[doc.id] = {str(k): "" for k in explains}
    return out


def _claims(f: Finding) -> set[str]:
    """What a finding claims time on: its ops and the pseudo-ops its saving is attributed to."""
    return set(f.ops) | set(f.saving_by_op)


def _same_scope(cause: Finding, symptom: Finding) -> bool:
    return cause.rank is None or cause.rank == symptom.rank


def _symptom_record(f: Finding, ops: Sequence[str], saving: float, mechanism: str | None = None) -> dict[str, Any]:
    return {"rule": f.rule, "kb": f.kb, "title": f.title, "severity": f.severity, "ops": list(ops),
            "estimated_saving_us": round(saving, 3), "evidence": f.to_dict()["evidence"],
            **({"mechanism": mechanism} if mechanism else {}), **({"rank": f.rank} if f.rank is not None else {})}


def removed_by(cause: Finding, symptom: Finding) -> float:
    """How much of ``symptom``'s time fixing ``cause`` removes: on every op (or bucket) both claim, the smaller of
    the two savings there."""
    c, s = per_op_savings(cause), per_op_savings(symptom)
    return sum(min(c[k], s[k]) for k in c.keys() & s.keys())


def absorb(findings: Sequence[Finding], roles: Mapping[str, str],
           limits: Mapping[int | None, Limits] | None = None,
           mechanisms: Mapping[str, Mapping[str, str]] | None = None, min_share: float = 0.5) -> list[Finding]:
    """Each symptom under the one cause that removes the most of its time through a stated mechanism, when the
    causes that explain it together remove at least ``min_share`` of it (see the module doc); the other symptoms
    stay findings, whole. A cause is a rule: its findings (one per op group, e.g. AI CPU ops by reason) share the
    symptom op by op, the part on ops none of them names going with the one that removes the most; the other rules
    that explain a part are named in the record (``also_explained_by``). ``limits`` is accepted for callers that
    pass the rank limits: savings were bounded before."""
    mechanisms = mechanisms or {}
    causes = [f for f in findings if roles.get(f.rule, CAUSE) != SYMPTOM]
    attached: dict[int, list[dict[str, Any]]] = defaultdict(list)
    out: list[Finding] = []
    for s in findings:
        if roles.get(s.rule, CAUSE) != SYMPTOM:
            continue
        found = _explaining_cause(s, causes, mechanisms, min_share)
        if found is None:
            out.append(s)
            continue
        owners, others = found
        how = mechanisms[causes[owners[0]].rule][s.rule]
        for i, part in _share_out(s, [causes[i] for i in owners], owners).items():
            ops, saving, gone = part
            attached[i].append({**_symptom_record(s, ops, saving, how), "explained_us": round(gone, 3),
                                **({"also_explained_by": others} if others else {})})
    for i, c in enumerate(causes):
        parts = attached.get(i)
        if not parts:
            out.append(c)
            continue
        parts.sort(key=lambda r: (-r["estimated_saving_us"], r["rule"]))
        # the cause's saving stays its own estimate of what its fix recovers (already the union over its ops): a
        # symptom's saving on the same ops measures another remedy, so it is listed, not added
        out.append(replace(c, symptoms=[*c.symptoms, *parts]))
    return out


def _explaining_cause(s: Finding, causes: Sequence[Finding], mechanisms: Mapping[str, Mapping[str, str]],
                      min_share: float) -> tuple[list[int], dict[str, float]] | None:
    """(indices of the findings of the cause rule that removes the most of ``s``'s time through a stated mechanism,
    largest removal first; the other explaining rules with what they remove), or None when the explaining causes
    together remove less than ``min_share`` of it (a symptom without time of its own goes to the rule whose findings
    name the most of its ops)."""
    claims = _claims(s)
    sym = per_op_savings(s)
    by_rule: dict[str, list[tuple[float, int]]] = defaultdict(list)
    covered: dict[str, float] = defaultdict(float)  # per claim: what the explaining causes remove of it together
    for i, c in enumerate(causes):
        if s.rule not in mechanisms.get(c.rule, {}) or not _same_scope(c, s) or not claims & _claims(c):
            continue
        if s.estimated_saving_us > 0:
            mine = per_op_savings(c)
            for k in mine.keys() & sym.keys():
                covered[k] = min(sym[k], covered[k] + min(mine[k], sym[k]))
            by_rule[c.rule].append((removed_by(c, s), i))
        else:
            by_rule[c.rule].append((float(len(claims & _claims(c))), i))
    if not by_rule:
        return None
    if s.estimated_saving_us > 0 and sum(covered.values()) < min_share * s.estimated_saving_us:
        return None
    totals = {r: sum(g for g, _ in v) for r, v in by_rule.items()}
    rule = max(sorted(totals), key=lambda r: totals[r])
    others = {r: round(v, 3) for r, v in sorted(totals.items(), key=lambda rv: -rv[1]) if r != rule and v > 0}
    return [i for _, i in sorted(by_rule[rule], key=lambda gi: (-gi[0], gi[1]))], others


def _share_out(s: Finding, owners: Sequence[Finding], index: Sequence[int]
               ) -> dict[int, tuple[list[str], float, float]]:
    """``s``'s ops and saving shared among the findings of its cause: each claim to the finding that removes the most
    of it there, claims none of them names to the first (the one removing the most overall). Per owner: (ops, the
    symptom's saving on them, what the owner removes of it)."""
    split = per_op_savings(s) or {op: 0.0 for op in s.ops}
    shares = [per_op_savings(o) for o in owners]
    parts: dict[int, tuple[list[str], float, float]] = {}
    for k, v in split.items():
        best = max(range(len(owners)), key=lambda j: (min(shares[j].get(k, 0.0), v), k in _claims(owners[j]), -j))
        if k not in _claims(owners[best]):
            best = 0
        ops, saving, gone = parts.get(index[best], ([], 0.0, 0.0))
        parts[index[best]] = ([*ops, k] if k in s.ops else ops, saving + v, gone + min(shares[best].get(k, 0.0), v))
    return parts


def partition(findings: Sequence[Finding], limits: Mapping[int | None, Limits],
              roles: Mapping[str, str] | None = None) -> list[Finding]:
    """The top-level findings with disjoint claims. On each op (or bucket of the time model: free time, other
    communication ops) the claims are served causes before symptoms (a fix owns the time it removes; what is left of
    a symptom is what no cause explains), then the largest claim on that op first: a fix that removes the op
    (dropping a TransData) owns its time before one that only speeds it up (more cores for it), whose gain vanishes
    with the op. Each finding keeps on an op at most what the claims before it left of that op's time. A finding
    whose claims were taken entirely keeps no saving (it goes to the notes, :func:`split_notes`)."""
    roles = roles or {}
    splits = [per_op_savings(f) for f in findings]
    claims: dict[tuple[int | None, str], list[tuple[int, float]]] = defaultdict(list)
    for i, split in enumerate(splits):
        for op, v in split.items():
            claims[(findings[i].rank, op)].append((i, v))

    def served_first(i: int, v: float) -> tuple:
        f = findings[i]
        return roles.get(f.rule, CAUSE) == SYMPTOM, -v, -f.estimated_saving_us, f.rule, f.title

    kept: list[dict[str, float]] = [{} for _ in findings]
    taken_by: list[list[str]] = [[] for _ in findings]
    for (_rank, op), wanted in claims.items():
        lim = limits_of(findings[wanted[0][0]], limits)
        cap = lim.of(op) if lim is not None else None
        used = 0.0
        before: list[str] = []
        for i, v in sorted(wanted, key=lambda c: served_first(*c)):
            left = v if cap is None else max(0.0, min(v, cap - used))
            if left < v - 1e-9:
                taken_by[i].extend(r for r in before if r not in taken_by[i])
            kept[i][op] = left
            used += left
            before.append(findings[i].rule)
    out: list[Finding] = []
    for i, f in enumerate(findings):
        total = sum(kept[i].values()) if splits[i] else f.estimated_saving_us
        if total < f.estimated_saving_us - 1e-6:
            others = taken_by[i]
            out.append(replace(f, estimated_saving_us=total,
                               saving_by_op=dict(kept[i]) if f.saving_by_op else {},
                               evidence={**f.evidence, "claimed_by": others[:5],
                                         "saving_before_partition_us": f.estimated_saving_us},
                               basis=f"{f.basis}; {fmt_us(f.estimated_saving_us - total)} of it is time other "
                                     f"findings already claim on the same ops or bucket ({', '.join(others[:3])})"))
        else:
            out.append(f)
    return out




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
               levels: Mapping[str, Mapping[str, float]], default: Mapping[str, float] | None = None,
               minor_below: float = 0.0) -> list[Finding]:
    """Severity from the share of the analyzed (steady-state) window a finding's saving is -- its KB's ``severity``
    levels, else ``default`` (``rules/findings.yaml``) -- and never above minor below ``minor_below`` of it: a
    finding never looks more urgent than the time it can recover. Findings with no saving are ``info``."""
    total = sum(windows.values())
    out = []
    for f in findings:
        lv = levels.get(f.kb) or default
        if f.estimated_saving_us <= 0:
            out.append(f if f.severity == "info" else replace(f, severity="info"))
            continue
        window = windows.get(f.rank, total) if f.rank is not None else total
        share = f.estimated_saving_us / window if window > 0 else 0.0
        sev = f.severity
        if lv:
            sev = next((s for s in ("critical", "major", "minor") if share >= float(lv.get(s, 2.0))), "info")
        if share < minor_below and SEVERITIES.index(sev) < SEVERITIES.index("minor"):
            sev = "minor"
        out.append(f if sev == f.severity else replace(f, severity=sev))
    return out


NOTE_OPS = 50
"""Ops a note lists (the first ones of its finding's): enough to find them, a note stays small."""


def split_notes(findings: Sequence[Finding], windows: Mapping[int | None, float],
                notes_below: float) -> tuple[list[Finding], list[dict[str, Any]]]:
    """(findings, notes): a finding with no measured saving (an environment hint, an overview, a member list) or a
    saving below ``notes_below`` of its window is a note -- advice the report lists apart, not a finding to rank."""
    total = sum(windows.values())
    kept: list[Finding] = []
    notes: list[dict[str, Any]] = []
    for f in findings:
        window = windows.get(f.rank, total) if f.rank is not None else total
        share = f.estimated_saving_us / window if window > 0 else 0.0
        if f.estimated_saving_us > 0 and share >= notes_below:
            kept.append(f)
            continue
        claimed = f.evidence.get("claimed_by") if isinstance(f.evidence, dict) else None
        if f.estimated_saving_us <= 0 and claimed:
            why = (f"its {fmt_us(float(f.evidence.get('saving_before_partition_us') or 0.0))} is time other findings "
                   f"claim: {', '.join(claimed)}")
        elif f.estimated_saving_us <= 0:
            why = "no measured saving"
        else:
            why = f"{fmt_us(f.estimated_saving_us)}, {share:.2%} of the window (under {notes_below:.1%})"
        notes.append({"kb": f.kb, "rule": f.rule, "title": f.title, "recommendation": f.recommendation,
                      "estimated_saving_us": round(f.estimated_saving_us, 3), "reason": why, "basis": f.basis,
                      "evidence": f.to_dict()["evidence"], "fix": f.fix.to_dict() if f.fix else None,
                      **({"ops": list(f.ops[:NOTE_OPS])} if f.ops else {}),
                      **({"rank": f.rank} if f.rank is not None else {}), **({"ranks": f.ranks} if f.ranks else {}),
                      **({"symptoms": [x["rule"] for x in f.symptoms]} if f.symptoms else {})})
    notes.sort(key=lambda n: (-n["estimated_saving_us"], n["rule"], n["title"]))
    return kept, notes


def _join_same_advice(groups: dict[tuple[str, str], list[Finding]],
                      order: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """Groups of one rule with the same advice (recommendation up to its quantities, or op sequences that are one
    fusion opportunity: :func:`advisor.toolkit.sequences.related`) and no rank in common are joined into the first
    of them; the keys left, in order."""
    first_of: dict[tuple[str, str], tuple[str, str]] = {}
    kept: list[tuple[str, str]] = []
    for key in order:
        group = groups[key]
        advice = (key[0], _QUANTITY.sub("#", group[0].recommendation))
        into = first_of.get(advice)
        if into is None:
            into = next((k for k in kept if k[0] == key[0] and _same_sequence(groups[k][0], group[0])), None)
        if into is not None and not {f.rank for f in groups[into]} & {f.rank for f in group}:
            groups[into].extend(group)
            del groups[key]
            continue
        first_of.setdefault(advice, key)
        kept.append(key)
    return kept


def _same_sequence(a: Finding, b: Finding) -> bool:
    sa, sb = a.evidence.get("sequence"), b.evidence.get("sequence")
    return isinstance(sa, list) and isinstance(sb, list) and bool(sa) and bool(sb) and related(sa, sb) is not None


def explain_waiting(findings: Sequence[Finding], explains: Mapping[str, Sequence[str]]) -> list[Finding]:
    """Cluster causes take the waiting they cause out of the per-rank findings they explain (``RuleDoc.explains``):
    ranks that idle in collectives because stage 1 computes 170 ms more per step are one cause, not two. The largest
    cause that explains a finding takes the whole waiting part of it (``evidence["sync_recoverable_us"]`` as a share
    of the finding's saving, so a finding merged over ranks keeps its ratio) -- a symptom sits under one cause --
    the explained finding keeping the rest of its saving (transfers to hide) or, with nothing left, only listed
    under the cause. The cause's saving stays its own estimate."""
    causes = sorted((f for f in findings if explains.get(f.rule) and f.estimated_saving_us > 0),
                    key=lambda f: -f.estimated_saving_us)
    if not causes:
        return list(findings)
    current = {id(f): f for f in findings}
    listed: dict[int, list[dict[str, Any]]] = defaultdict(list)
    for cause in causes:
        for key, f in list(current.items()):
            if f.rule not in explains[cause.rule] or f.estimated_saving_us <= 0 or not _same_waiting_ranks(cause, f):
                continue
            moved = min(_waiting_part(f), f.estimated_saving_us)
            if moved <= 0:
                continue
            listed[id(cause)].append({**_symptom_record(f, list(f.ops), moved), "explained_us": round(moved, 3)})
            left = f.estimated_saving_us - moved
            if left <= 1e-6:
                del current[key]
            else:
                explained = {**(f.evidence.get("explained_by") or {}), cause.rule: round(moved, 3)}
                current[key] = replace(f, estimated_saving_us=left, saving_by_op={},
                                       title=f"{f.title}: what its waiting ({cause.rule}) does not explain",
                                       evidence={**f.evidence, "explained_by": explained, "sync_recoverable_us": 0.0},
                                       basis=f.basis + f"; its waiting ({fmt_us(moved)}) is explained by "
                                                       f"{cause.rule}")
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


__all__ = ["CAUSE", "SYMPTOM", "absorb", "explain_waiting", "mechanisms_of", "merge_ranks", "partition",
           "rank", "removed_by", "reseverity", "split_notes"]


def rank(findings: Sequence[Finding]) -> list[Finding]:
    """The report's order: largest estimated saving first; ties by severity, then rule id, first op and rank
    (deterministic)."""
    order = {s: i for i, s in enumerate(SEVERITIES)}
    return sorted(findings, key=lambda f: (-round(f.estimated_saving_us, 3), order[f.severity], f.rule,
                                           f.ops[0] if f.ops else "", f.rank if f.rank is not None else -1))
