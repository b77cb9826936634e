"""The engine: find knowledge bases (pluggy entry points), run each on the normalized model, collect findings.

A knowledge base whose required data is absent is ``skipped``; one that raises, returns something that is not
a Finding, or runs past its time limit is ``failed``. The others still run.
"""

from __future__ import annotations

import importlib.metadata
import threading
import time
import traceback
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pluggy

from advisor import hookspecs
from advisor.errors import UsageError
from advisor.findings import Finding
from advisor.graph.model import ModelGraph
from advisor.kb import AnalysisContext, KnowledgeBase
from advisor.model import Profile
from advisor.rules import EffectiveRules, Waiver, builtin_rules_dir

ENTRY_POINT_GROUP = "advisor.knowledge_bases"


@dataclass
class KBInfo:
    """A discovered knowledge base and where it came from."""

    cls: type[KnowledgeBase]
    plugin: str
    package: str
    package_version: str

    @property
    def id(self) -> str:
        return self.cls.id


@dataclass
class KBStatus:
    id: str
    status: str  # ok | skipped | failed
    reason: str = ""
    version: str = ""
    package: str = ""
    findings: int = 0
    seconds: float = 0.0
    notes: list[str] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "status": self.status, "reason": self.reason, "version": self.version,
                "package": self.package, "findings": self.findings, "seconds": round(self.seconds, 3),
                "notes": list(self.notes)}


@dataclass
class WaivedFinding:
    finding: Finding
    waiver: Waiver
    ops: list[str]

    def to_dict(self) -> dict[str, Any]:
        return {"rule": self.finding.rule, "kb": self.finding.kb, "ops": self.ops,
                "estimated_saving_us": round(self.finding.estimated_saving_us, 3), **{
                    "waiver": self.waiver.to_dict()}}


PLUGIN_PACKAGES: dict[str, tuple[str, str]] = {}
"""Entry-point name -> (distribution name, version), for ``advisor kb list``."""
PLUGIN_LOAD_ERRORS: dict[str, str] = {}
"""Entry points that failed to import (name -> reason), reported by ``advisor kb list`` and in reports."""


def plugin_manager() -> pluggy.PluginManager:
    """A plugin manager with every installed ``advisor.knowledge_bases`` entry point loaded.

    Entry points are loaded one by one so that a plugin that fails to import is reported, not fatal.
    """
    pm = pluggy.PluginManager("advisor")
    pm.add_hookspecs(hookspecs)
    PLUGIN_LOAD_ERRORS.clear()
    for dist in importlib.metadata.distributions():
        for ep in dist.entry_points:
            if ep.group != ENTRY_POINT_GROUP or pm.get_plugin(ep.name) is not None or pm.is_blocked(ep.name):
                continue
            try:
                plugin = ep.load()
                pm.register(plugin, name=ep.name)
            except Exception as e:  # noqa: BLE001 - a broken plugin must not stop the others
                PLUGIN_LOAD_ERRORS[ep.name] = f"{dist.metadata['name']}: cannot load {ep.value} ({type(e).__name__}: {e})"
                continue
            PLUGIN_PACKAGES[ep.name] = (dist.metadata["name"], dist.version)
    return pm


def _package_of(plugin_name: str) -> tuple[str, str]:
    return PLUGIN_PACKAGES.get(plugin_name, ("", ""))


def discover(pm: pluggy.PluginManager | None = None) -> list[KBInfo]:
    """Every knowledge base the installed plugins provide, sorted by id. Duplicate ids are an error."""
    pm = pm or plugin_manager()
    infos: list[KBInfo] = []
    seen: dict[str, str] = {}
    for plugin in pm.get_plugins():
        name = pm.get_name(plugin) or repr(plugin)
        impl = getattr(plugin, "advisor_knowledge_bases", None)
        if impl is None:
            continue
        package, version = _package_of(name)
        for cls in impl() or []:
            if not (isinstance(cls, type) and issubclass(cls, KnowledgeBase)) or not cls.id:
                raise UsageError(f"plugin {name}: {cls!r} is not a KnowledgeBase subclass with an id")
            if cls.id in seen:
                raise UsageError(f"knowledge base id '{cls.id}' is provided twice ({seen[cls.id]} and {name})")
            seen[cls.id] = name
            infos.append(KBInfo(cls, name, package, version))
    return sorted(infos, key=lambda i: i.id)


def rules_dirs(pm: pluggy.PluginManager | None = None) -> list[Path]:
    """The built-in rules dir first, then the dirs plugins declare."""
    pm = pm or plugin_manager()
    dirs = [builtin_rules_dir()]
    for result in pm.hook.advisor_rules_dirs():
        for d in result or []:
            p = Path(d)
            if p not in dirs:
                dirs.append(p)
    return dirs


def select(infos: Sequence[KBInfo], only: Iterable[str] = (), skip: Iterable[str] = ()) -> list[KBInfo]:
    """Apply ``--kb`` / ``--skip-kb``; unknown ids are a usage error."""
    known = {i.id for i in infos}
    only, skip = list(only), list(skip)
    for kb_id in [*only, *skip]:
        if kb_id not in known:
            raise UsageError(f"unknown knowledge base '{kb_id}' (installed: {', '.join(sorted(known))})")
    chosen = [i for i in infos if (not only or i.id in only) and i.id not in skip]
    return chosen


def _missing(kb: type[KnowledgeBase], available: set[str]) -> str | None:
    missing = [r for r in kb.requires if r not in available]
    if missing:
        return "needs " + ", ".join(missing) + " (not in this input)"
    if kb.requires_any and not any(r in available for r in kb.requires_any):
        return "needs one of " + ", ".join(kb.requires_any) + " (none in this input)"
    return None


def _run_with_limit(kb: KnowledgeBase, ctx: AnalysisContext, limit: float) -> list[Finding]:
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["findings"] = list(kb.analyze(ctx) or [])
        except BaseException as e:  # noqa: BLE001 - a plugin's failure must not stop the others
            result["error"] = e
            result["trace"] = traceback.format_exc(limit=-3)

    thread = threading.Thread(target=target, name=f"kb-{kb.id}", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        raise TimeoutError(f"ran past its time limit of {limit:g} s")
    if "error" in result:
        e = result["error"]
        raise RuntimeError(f"{type(e).__name__}: {e}") from e
    return result["findings"]


def run(
    infos: Sequence[KBInfo],
    profile: Profile,
    graph: ModelGraph | None,
    rules: EffectiveRules,
    platform: dict[str, Any],
    time_limit_s: float | None = None,
) -> tuple[list[Finding], list[KBStatus]]:
    """Run the knowledge bases on one profile; return findings and one status per knowledge base."""
    available = set(profile.available)
    if graph is not None:
        available.add("graph")
    api_major = hookspecs.API_VERSION.split(".")[0]
    findings: list[Finding] = []
    statuses: list[KBStatus] = []
    for info in infos:
        cls = info.cls
        status = KBStatus(cls.id, "ok", version=cls.version, package=info.package)
        statuses.append(status)
        if str(cls.api_version).split(".")[0] != api_major:
            status.status, status.reason = "failed", (
                f"written for plugin API {cls.api_version}, this advisor provides {hookspecs.API_VERSION}")
            continue
        reason = _missing(cls, available)
        if reason:
            status.status, status.reason = "skipped", reason
            continue
        ctx = AnalysisContext(cls.id, profile, graph, rules.for_kb(cls.rules_file), platform)
        started = time.perf_counter()
        try:
            produced = _run_with_limit(cls(), ctx, time_limit_s or cls.time_limit_s)
            bad = [f for f in produced if not isinstance(f, Finding)]
            if bad:
                raise TypeError(f"analyze() yielded {type(bad[0]).__name__}, not Finding")
        except (RuntimeError, TimeoutError, TypeError) as e:
            status.status, status.reason = "failed", str(e)
            status.seconds = time.perf_counter() - started
            continue
        status.seconds = time.perf_counter() - started
        for f in produced:
            f.kb = cls.id
            if profile.meta.rank is not None and f.rank is None:
                f.rank = profile.meta.rank
        status.findings = len(produced)
        status.notes = list(ctx.notes)
        findings.extend(produced)
    return findings, statuses


def apply_waivers(findings: list[Finding], waivers: Sequence[Waiver]) -> tuple[list[Finding], list[WaivedFinding]]:
    """Drop waived ops from findings; a finding all of whose ops are waived is removed and listed."""
    if not waivers:
        return findings, []
    kept: list[Finding] = []
    waived: list[WaivedFinding] = []
    for f in findings:
        applicable = [w for w in waivers if w.matches_rule(f.rule)]
        if not applicable:
            kept.append(f)
            continue
        if not f.ops:
            w = next((w for w in applicable if w.ops == "*"), None)
            if w:
                waived.append(WaivedFinding(f, w, []))
            else:
                kept.append(f)
            continue
        drop: dict[str, Waiver] = {}
        for op in f.ops:
            w = next((w for w in applicable if w.matches_op(op)), None)
            if w:
                drop[op] = w
        if not drop:
            kept.append(f)
            continue
        first = next(iter(drop.values()))
        if len(drop) == len(f.ops):
            waived.append(WaivedFinding(f, first, list(f.ops)))
            continue
        remaining = [op for op in f.ops if op not in drop]
        share = _saving_share(f, remaining)
        waived.append(WaivedFinding(f, first, list(drop)))
        f.ops = remaining
        f.saving_by_op = {op: s for op, s in f.saving_by_op.items() if op in remaining}
        f.estimated_saving_us = f.estimated_saving_us * share
        kept.append(f)
    return kept, waived


def _saving_share(f: Finding, remaining: list[str]) -> float:
    if f.saving_by_op:
        total = sum(f.saving_by_op.values())
        return sum(f.saving_by_op.get(op, 0.0) for op in remaining) / total if total else 0.0
    return len(remaining) / len(f.ops) if f.ops else 1.0
