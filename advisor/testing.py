"""The plugin test kit: build a profile from rows, run one knowledge base the way ``advisor analyze`` runs it, pick
its findings. Public API under the ``API_VERSION`` policy (``docs/plugins.md#testing``); the built-in tests and the
test that ``advisor kb new`` writes use it too.

    from advisor.testing import finding, make_profile, run_kb

    profile = make_profile([{"name": "conv1", "type": "Conv2D", "duration_us": 5000.0}])
    findings, notes = run_kb(MyKnowledgeBase, profile, rules=RULES_DIR, override={"max_op_us": 2000})
    assert finding(findings, "my-kb.long-op").ops == ["conv1"]

Nothing here reads files a test did not name, and nothing is mocked: ``run_kb`` validates the rules against their
schemas, resolves the chip's platform from ``rules/platforms.yaml`` and calls :func:`advisor.engine.kb_engine.run`.
"""

from __future__ import annotations

import copy
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from advisor.config.loader import EffectiveRules, apply_override, builtin_rules_dir, load_effective_rules
from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.ingest.event_summary import EventCounter, merge_summaries, split_events
from advisor.kb import KnowledgeBase, RankData
from advisor.model import (
    API_COLUMNS,
    COMM_COLUMNS,
    EVENTS_COLUMNS,
    MEMORY_COLUMNS,
    OP_STATS_COLUMNS,
    OPS_COLUMNS,
    STEPS_COLUMNS,
    TX_COLUMNS,
    EventSelection,
    Meta,
    Profile,
    empty_frame,
)
from advisor.platform import platform_for_run

Rows = Iterable[Mapping[str, Any]] | pd.DataFrame
RulesArg = EffectiveRules | str | Path | Sequence[str | Path] | None

_TABLES = {"op_stats": OP_STATS_COLUMNS, "api": API_COLUMNS, "tx": TX_COLUMNS, "steps": STEPS_COLUMNS,
           "events": EVENTS_COLUMNS, "comm": COMM_COLUMNS, "memory": MEMORY_COLUMNS}


def _frame(rows: Rows, columns: list[str]) -> pd.DataFrame:
    """``rows`` as a table with at least ``columns`` (missing ones NaN)."""
    df = rows.copy() if isinstance(rows, pd.DataFrame) else pd.DataFrame.from_records(list(rows))
    if not len(df.columns):
        return empty_frame(columns)
    for col in columns:
        if col not in df.columns:
            df[col] = float("nan")
    return df


def make_profile(rows: Rows = (), *, chip: str | None = None, start_us: float = 0.0, gap_us: float = 1.0,
                 extras: Mapping[str, Any] | None = None, tables: Mapping[str, Rows] | None = None,
                 **meta: Any) -> Profile:
    """A one-rank :class:`advisor.model.Profile` whose ``ops`` table holds ``rows``, as ingest would leave it.

    Each row is a mapping of ``ops`` column names (``advisor.model.OPS_COLUMNS``: ``name``, ``type``,
    ``duration_us``, ``input_shapes``, ``mac_ratio``...); columns a row leaves out are NaN, ``core`` defaults to
    ``AI_CORE``, and rows without ``start_us`` are laid back to back from ``start_us`` with ``gap_us`` between them.
    ``tables`` gives the other tables by name (``steps``, ``comm``, ``events``, ``op_stats``, ``api``, ``tx``,
    ``memory``: rows or a DataFrame); ``extras`` the side data (``docs/plugins.md`` lists the keys the built-in
    knowledge bases read); ``meta`` any :class:`advisor.model.Meta` field (``context``, ``rank``,
    ``cann_version``...). The time model (``profile.time``) is built from these tables on first use.
    """
    from advisor.ingest.normalize import finalize_ops

    records = [dict(r) for r in (rows.to_dict("records") if isinstance(rows, pd.DataFrame) else rows)]
    t = start_us
    for i, rec in enumerate(records):
        rec.setdefault("core", "AI_CORE")
        rec.setdefault("task_id", i)
        if rec.get("start_us") is None:
            rec["start_us"] = t
        t = float(rec["start_us"]) + float(rec.get("duration_us") or 0.0) + gap_us
    ops = finalize_ops(pd.DataFrame.from_records(records)) if records else finalize_ops(empty_frame(OPS_COLUMNS))
    others = {}
    for name, given in (tables or {}).items():
        if name not in _TABLES:
            raise ValueError(f"unknown table {name!r} (known: {', '.join(_TABLES)})")
        others[name] = _frame(given, _TABLES[name])
    meta = {"source": "<test>", "layout": "test", **meta}
    return Profile(ops=ops, meta=Meta(chip=chip, **meta), extras=dict(extras or {}), **others)


def load_rules(*dirs: str | Path, override: str | Path | Mapping[str, Any] | None = None) -> EffectiveRules:
    """The built-in rules plus the rules files in ``dirs`` (a plugin's ``rules/`` folder), each validated
    against its schema, then ``override``: a ``--rules`` file as ``advisor analyze --rules`` reads it, or what such
    a file holds as a mapping (``{"rules": {"my-kb": {"max_op_us": 40}}, "chip": ...}``), validated the same way."""
    if isinstance(override, Mapping):
        eff = load_effective_rules([builtin_rules_dir(), *map(Path, dirs)])
        apply_override(eff, override, "<test override>")
        return eff
    return load_effective_rules([builtin_rules_dir(), *map(Path, dirs)], override_file=override)


def _rules_for(kb: type[KnowledgeBase], rules: RulesArg, override: Mapping[str, Any] | str | Path | None
               ) -> EffectiveRules:
    if isinstance(rules, EffectiveRules):
        eff = rules
    elif rules is None:
        eff = load_rules()
    elif isinstance(rules, (str, Path)):
        eff = load_rules(rules)
    else:
        eff = load_rules(*rules)
    if isinstance(override, Mapping):  # values of the KB's own rules file, over its defaults (validated)
        if not kb.rules_file:
            raise ValueError(f"{kb.id} has no rules_file: nothing to override")
        if isinstance(rules, EffectiveRules):
            eff = copy.deepcopy(eff)
        apply_override(eff, {"rules": {kb.rules_file: dict(override)}}, "<test override>")
    elif override is not None:
        dirs = [p.parent for p in eff.files.values()]
        eff = load_effective_rules(list(dict.fromkeys(dirs)), override_file=Path(override))
    return eff


def run_kb(kb: type[KnowledgeBase], profile: Profile | None = None, graph: Any = None, rules: RulesArg = None,
           chip: str | None = None, *, override: Mapping[str, Any] | str | Path | None = None,
           cluster: Sequence[RankData] | None = None, expect: str = "ok", time_limit_s: float | None = None
           ) -> tuple[list[Finding], list[str]]:
    """Run one knowledge base through :func:`advisor.engine.kb_engine.run`; return its findings and notes.

    ``rules``: the built-in rules (None), plus a plugin's rules folder (a path, or several), or an
    :class:`advisor.config.loader.EffectiveRules` (:func:`load_rules`). ``override``: values of the KB's own rules file
    (a mapping, validated against its schema like a user's override) or a ``--rules`` YAML file. ``chip`` picks
    the platform (else the profile's chip; else the default chip, marked assumed). A cluster-scope KB gets
    ``cluster`` (one :class:`advisor.kb.RankData` per rank, see :func:`rank_data`). The KB's status must be
    ``expect`` (``ok``, ``skipped`` or ``failed``), else AssertionError with the engine's reason. A KB that
    declares ``events_read`` sees only the events it selects, as in ``advisor analyze``.
    """
    eff = _rules_for(kb, rules, override)
    if profile is None:
        if not cluster:
            raise ValueError("run_kb needs a profile (or cluster= for a cluster-scope knowledge base)")
        profile = Profile(ops=empty_frame(OPS_COLUMNS), meta=cluster[0].meta, steps=cluster[0].steps)
    platform, _ = platform_for_run(eff, profile.meta.chip, profile.meta.hardware, chip)
    info = engine.KBInfo(kb, "test", "", "")
    profile = _events_it_reads(profile, engine.events_projection([info], eff))
    available = None
    if cluster is not None:  # what the ranks carry, as advisor analyze gives it to cluster-scope KBs
        available = {"meta", "cluster"} | {name for name in ("steps", "comm") for r in cluster
                                           if getattr(r, name) is not None and len(getattr(r, name))}
    findings, statuses = engine.run([info], profile, graph, eff, platform, time_limit_s,
                                    cluster=list(cluster) if cluster is not None else None, available=available)
    if not statuses:
        raise AssertionError(f"{kb.id} did not run: its scope {kb.scope!r} does not match the input "
                             f"({'cluster' if cluster is not None else 'one rank'})")
    status = statuses[0]
    if status.status != expect:
        raise AssertionError(f"{kb.id} {status.status}" + (f": {status.reason}" if status.reason else "")
                             + f" (expected {expect})")
    return findings, list(status.notes)


def _events_it_reads(profile: Profile, selection: EventSelection | None) -> Profile:
    """``profile`` with only the events ``selection`` keeps, the others counted (a copy; None: as it is): what
    ``advisor analyze`` gives a KB that declares ``events_read``, so a rule reading an event its KB does not
    declare fails in the plugin's own tests."""
    if selection is None or not len(profile.events):
        return profile
    counter = EventCounter()
    kept = split_events(profile.events, selection, counter)
    if kept is profile.events:
        return profile
    out = copy.copy(profile)
    out.events = kept
    out.event_summary = merge_summaries([profile.event_summary, counter.frame()])
    return out


def rank_data(profile: Profile) -> RankData:
    """What a cluster-scope knowledge base sees of this rank (``ctx.cluster`` holds one per rank), reduced the way
    ``advisor analyze`` reduces a rank on its worker."""
    from advisor.pipeline.rank_summary import RankSummary

    return RankSummary.of(profile).rank_data()


def installed() -> dict[str, str]:
    """What ``advisor kb list`` finds through the installed entry points: knowledge-base id -> ``ok``, and plugin
    name -> ``failed to load: <reason>`` for a plugin that did not load."""
    found = engine.find_plugins()
    out = {info.id: "ok" for info in engine.discover(found)}
    out.update({name: f"failed to load: {reason}" for name, reason in found.errors.items()})
    return out


def findings_of(findings: Iterable[Finding], rule: str) -> list[Finding]:
    """The findings of ``rule`` (a rule id such as ``my-kb.long-op``)."""
    return [f for f in findings if f.rule == rule]


def finding(findings: Iterable[Finding], rule: str) -> Finding:
    """The one finding of ``rule``; AssertionError naming the rules found when there is none or several."""
    findings = list(findings)
    hits = findings_of(findings, rule)
    if len(hits) != 1:
        found = ", ".join(sorted({f.rule for f in findings})) or "none"
        raise AssertionError(f"expected one finding of {rule}, got {len(hits)} (rules found: {found})")
    return hits[0]


def no_finding(findings: Iterable[Finding], rule: str) -> None:
    """AssertionError when ``rule`` was reported (with the titles it was reported with)."""
    hits = findings_of(findings, rule)
    if hits:
        raise AssertionError(f"{rule} should not be reported, got: " + "; ".join(f.title for f in hits))
