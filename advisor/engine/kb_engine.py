"""The engine: find knowledge bases (pluggy entry points), run each on the normalized model, collect findings.

A knowledge base whose required data is absent is ``skipped``; one that raises, returns something that is not
a Finding, runs past its time limit, or was written for another plugin API is ``failed``. The others still run.
A plugin that cannot be imported, or whose hook raises or returns something unusable, is recorded in the
:class:`Discovery` that :func:`find_plugins` returns instead of stopping the program. Discovery keeps no state in
this module: every caller gets its own result.
"""

from __future__ import annotations

import copy
import importlib.metadata
import pickle
import re
import threading
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pluggy

from advisor import hookspecs
from advisor.common import stage_progress, stagetimes
from advisor.common.errors import RulesError, UsageError
from advisor.common.util import release_memory
from advisor.config.loader import (
    RULES_SUFFIX,
    EffectiveRules,
    builtin_rules_dir,
    find_pyproject,
    load_effective_rules,
    load_rules_file,
)
from advisor.engine import isolation, plugin_location
from advisor.findings import Finding
from advisor.kb import ROLES, TOOLKIT_RULES, AnalysisContext, KnowledgeBase, RankData

if TYPE_CHECKING:  # annotations only: discovery (also in plugin child processes) does not need pandas
    from advisor.graph.model_graph import ModelGraph
    from advisor.model import EventSelection, OpsProjection, Profile

ENTRY_POINT_GROUP = "advisor.knowledge_bases"

DATA_NAMES: tuple[str, ...] = ("meta", "ops", "op_stats", "api", "tx", "steps", "events", "timeline", "comm",
                               "memory", "metrics", "kernel_blocks", "graph", "cluster")
"""What a knowledge base may list in ``requires`` / ``requires_any`` (see ``Profile.available``; ``kernel_blocks``
when msprof op's per-block metrics were read, ``Profile.kernel_blocks``; ``graph`` when a model graph was given;
``cluster`` for multi-rank input, to cluster-scope KBs)."""

KB_ID_PATTERN = re.compile(r"^[a-z][a-z0-9]*(-[a-z0-9]+)*$")


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
class Discovery:
    """What plugin discovery found: the plugin manager with every plugin registered, each entry point's
    distribution, and the plugins that failed to load (name -> reason).

    Returned by :func:`find_plugins` and filled further by :func:`discover` / :func:`rules_dirs` (a hook that
    raises). ``advisor kb list`` and the report's knowledge-base statuses read ``errors``.
    """

    pm: pluggy.PluginManager
    packages: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Entry-point name -> (distribution name, version)."""
    errors: dict[str, str] = field(default_factory=dict)
    """Plugin (or entry-point) name -> why it failed to load."""

    def register(self, plugin: object, name: str) -> None:
        """Register a plugin object directly (tests, and the child process of an isolated plugin)."""
        self.pm.register(plugin, name=name)

    def record_error(self, name: str, reason: str) -> None:
        previous = self.errors.get(name)
        self.errors[name] = f"{previous}; {reason}" if previous and reason not in previous else reason

    def package_of(self, plugin_name: str) -> tuple[str, str]:
        return self.packages.get(plugin_name, ("", ""))


# ---------------------------------------------------------------------------------------------------------
# discovery
# ---------------------------------------------------------------------------------------------------------
def _where(e: BaseException, module: str | None) -> str:
    """`` at my_kb/kb.py:42``: the plugin's own frame (``advisor.engine.plugin_location``), so its author sees where it
    broke; nothing for an ImportError, whose message names the module (the frames are importlib's)."""
    return "" if isinstance(e, ImportError) else plugin_location.where(e, module)


def _module_of(impl: Any) -> str | None:
    """The module a hook implementation belongs to (plugins register modules; an object, its class's module)."""
    plugin = impl.plugin
    return plugin.__name__ if hasattr(plugin, "__file__") else getattr(type(plugin), "__module__", None)


def _describe(e: BaseException) -> str:
    text = str(e).strip().splitlines()[0] if str(e).strip() else ""
    return f"{type(e).__name__}: {text}" if text else type(e).__name__


def find_plugins(entry_points: bool = True) -> Discovery:
    """A plugin manager with the hook specs added and, unless ``entry_points`` is False, every installed
    ``advisor.knowledge_bases`` entry point registered; returned with what failed to load.

    Entry points are loaded one by one so that a plugin that fails to import is recorded, not fatal. Tests pass
    ``entry_points=False`` and register plugins directly (:meth:`Discovery.register`).
    """
    pm = pluggy.PluginManager("advisor")
    pm.add_hookspecs(hookspecs)
    found = Discovery(pm)
    if not entry_points:
        return found
    third_party = []
    # entry_points() lists each distribution once (the first found on sys.path), unlike distributions()
    for ep in sorted(importlib.metadata.entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        dist = getattr(ep, "dist", None)
        package = (dist.metadata["name"], dist.version) if dist is not None else ("", "")
        if pm.has_plugin(ep.name) or pm.is_blocked(ep.name) or any(e.name == ep.name for e, _ in third_party):
            key = f"{ep.name} ({package[0] or 'another package'})"
            found.packages[key] = package
            found.record_error(key, f"entry point name '{ep.name}' is already used by "
                                    f"{found.package_of(ep.name)[0] or 'another plugin'}")
            continue
        found.packages[ep.name] = package
        if isolation.is_builtin(ep.value, package[0]):
            load_entry_point(found, ep.name, ep.value)
        else:
            third_party.append((ep, package))
    # third-party plugins are imported and asked for their knowledge bases in child processes (advisor.engine.isolation):
    # one that exits, hangs or prints at import cannot take this process with it
    for name, (plugin, errors) in isolation.discover_plugins([(ep.name, ep.value, pkg) for ep, pkg in third_party]):
        for reason in errors:
            found.record_error(name, reason)
        if plugin is not None:
            pm.register(plugin, name=name)
    rules_dirs(found)  # a plugin whose rules cannot be used is disabled here, before its knowledge bases are listed
    return found


def load_entry_point(found: Discovery, name: str, value: str) -> object | None:
    """Import one ``module[:attr]`` entry point in this process and register it; failures are recorded."""
    pm = found.pm
    try:
        plugin = importlib.metadata.EntryPoint(name, value, ENTRY_POINT_GROUP).load()
    except Exception as e:  # noqa: BLE001 - a broken plugin must not stop the others
        found.record_error(name, f"cannot import {value} ({_describe(e)}{_where(e, value.split(':')[0])})")
        return None
    try:
        pm.register(plugin, name=name)
    except Exception as e:  # noqa: BLE001 - e.g. a hookimpl with a misspelled name or wrong arguments
        found.record_error(name, f"cannot register {value} ({_describe(e)})")
        return None
    problem = _hook_problem(pm, plugin)
    if problem:
        found.record_error(name, f"{value}: {problem}")
    return plugin


_HOOK_NAMES = ("advisor_knowledge_bases", "advisor_rules_dirs")


def _hook_problem(pm: pluggy.PluginManager, plugin: object) -> str | None:
    """Catch the silent mistakes: a hook function without ``@hookimpl`` (pluggy ignores it), or no hook at all."""
    implemented = [n for n in _HOOK_NAMES if any(i.plugin is plugin for i in getattr(pm.hook, n).get_hookimpls())]
    unmarked = [n for n in _HOOK_NAMES if n not in implemented and callable(getattr(plugin, n, None))]
    if unmarked:
        return f"{unmarked[0]} is not marked with @hookimpl (from advisor import hookimpl)"
    if not implemented:
        return "implements none of the advisor hooks (" + ", ".join(_HOOK_NAMES) + ")"
    return None


def _invalid_class(cls: object) -> str | None:
    """Why ``cls`` cannot be used as a knowledge base, or None."""
    if not (isinstance(cls, type) and issubclass(cls, KnowledgeBase)):
        return f"{cls!r} is not a KnowledgeBase subclass"
    if not cls.id or not KB_ID_PATTERN.match(cls.id):
        return f"{cls.__name__}.id {cls.id!r} is not a kebab-case id (like 'my-kb')"
    if not cls.checks and "analyze" not in {n for k in cls.__mro__ if k is not KnowledgeBase for n in vars(k)}:
        return f"{cls.__name__} declares no @rule check and does not implement analyze(ctx)"
    bad_role = next((r for r in cls.rules if r.role not in ROLES), None)
    if bad_role is not None:
        return f"{cls.id}: rule {bad_role.id} has role {bad_role.role!r} (known: {', '.join(ROLES)})"
    unknown = [r for r in (*cls.requires, *cls.requires_any) if r not in DATA_NAMES]
    if unknown:
        return f"{cls.id}: requires unknown data {', '.join(map(repr, unknown))} (known: {', '.join(DATA_NAMES)})"
    rule_ids = [r.id for r in cls.rules]
    if len(set(rule_ids)) != len(rule_ids):
        return f"{cls.id}: a rule id is documented twice"
    columns = cls.ops_columns
    if columns is not None and (isinstance(columns, str) or not all(isinstance(c, str) for c in columns)):
        return f"{cls.id}: ops_columns must be None or a tuple of column names, not {columns!r}"
    return None


def _impls(pm: pluggy.PluginManager, hook_name: str) -> list[Any]:
    """Hook implementations sorted by plugin name, so discovery order never depends on install order."""
    return sorted(getattr(pm.hook, hook_name).get_hookimpls(), key=lambda i: i.plugin_name)


def discover(found: Discovery | None = None) -> list[KBInfo]:
    """Every knowledge base the registered plugins provide, sorted by id.

    A plugin whose hook raises or returns something that is not a knowledge-base class, and a second knowledge
    base with an id already taken, are recorded in ``found.errors`` and left out.
    """
    found = found or find_plugins()
    pm = found.pm
    infos: list[KBInfo] = []
    seen: dict[str, str] = {}
    for impl in _impls(pm, "advisor_knowledge_bases"):
        name = impl.plugin_name
        try:
            provided = list(impl.function() or [])
        except Exception as e:  # noqa: BLE001 - one plugin's bug must not stop the others
            found.record_error(name, "advisor_knowledge_bases() raised "
                                     f"{_describe(e)}{_where(e, _module_of(impl))}")
            continue
        package, version = found.package_of(name)
        for cls in provided:
            problem = _invalid_class(cls)
            if problem is None and cls.id in seen:
                problem = f"knowledge base id '{cls.id}' is already provided by {seen[cls.id]}"
            if problem:
                found.record_error(name, problem)
                continue
            seen[cls.id] = name
            infos.append(KBInfo(cls, name, package, version))
    return sorted(infos, key=lambda i: i.id)


def rules_dirs(found: Discovery | None = None, vet: bool = True) -> list[Path]:
    """The built-in rules dir first, then the dirs plugins declare (in plugin-name order).

    A plugin whose rules cannot be used -- a file too large, not YAML (a "billion laughs" of aliases included),
    against its schema, or named like a file already taken (a built-in one, another plugin's) -- is disabled: it
    is unregistered, so its knowledge bases do not run, and the reason is recorded in ``found.errors`` for the
    report. It never stops the run. ``vet`` False returns the dirs unread (a plugin's child process: its rules
    are read and judged by advisor's own process).
    """
    found = found or find_plugins()
    pm = found.pm
    dirs = [builtin_rules_dir()]
    taken = {p.stem: p for p in dirs[0].glob(f"*{RULES_SUFFIX}")}
    max_bytes = int(isolation.Limits.of().max_rules_file_kb * 1024)
    for impl in _impls(pm, "advisor_rules_dirs"):
        try:
            result = list(impl.function() or [])
        except Exception as e:  # noqa: BLE001
            found.record_error(impl.plugin_name,
                               f"advisor_rules_dirs() raised {_describe(e)}{_where(e, _module_of(impl))}")
            continue
        theirs: list[Path] = []
        for d in result:
            p = Path(d)
            if not p.is_dir():
                found.record_error(impl.plugin_name, f"advisor_rules_dirs() returned {p}, which is not a directory")
                continue
            if all(p.resolve() != known.resolve() for known in [*dirs, *theirs]):
                theirs.append(p)
        files, problem = _plugin_rules(theirs, taken, max_bytes) if vet else ({}, "")
        if problem:
            found.record_error(impl.plugin_name, f"its rules are unusable, the plugin is disabled: {problem}")
            pm.unregister(impl.plugin)
            continue
        taken.update(files)
        dirs.extend(theirs)
    return dirs


def _plugin_rules(dirs: Sequence[Path], taken: dict[str, Path], max_bytes: int) -> tuple[dict[str, Path], str]:
    """The rules files of one plugin's ``dirs`` by name, and why they cannot be used ("" when they can)."""
    files: dict[str, Path] = {}
    for d in dirs:
        for path in sorted(d.glob(f"*{RULES_SUFFIX}")):
            name = path.stem
            other = taken.get(name) or files.get(name)
            if other is not None and other.resolve() != path.resolve():
                return files, f"rules file name '{name}' ({path}) is already used by {other}"
            try:
                size = path.stat().st_size
                if size > max_bytes:
                    return files, (f"{path} is {size / 1024:,.0f} KB, more than the {max_bytes / 1024:,.0f} KB a "
                                   "plugin's rules file may take (rules: plugins.max_rules_file_kb)")
                load_rules_file(path)
            except OSError as e:
                return files, f"{path}: {e.strerror or e}"
            except RulesError as e:
                return files, str(e)
            files[name] = path
    return files, ""


def load_rules(found: Discovery | None = None, rules_file: Path | None = None, pyproject: Path | None = None
               ) -> EffectiveRules:
    """The rules in force: every rules dir (:func:`rules_dirs`), then ``[tool.advisor]`` of ``pyproject`` (default:
    the nearest pyproject.toml from the current directory), then ``rules_file`` (``--rules``). The one loader of
    ``advisor analyze``, ``compare``, ``rules show`` and ``explain``."""
    pyproject = pyproject if pyproject is not None else find_pyproject(Path.cwd())
    return load_effective_rules(rules_dirs(found), override_file=rules_file, pyproject=pyproject)


def select(infos: Sequence[KBInfo], only: Iterable[str] = (), skip: Iterable[str] = ()) -> list[KBInfo]:
    """Apply ``--kb`` / ``--skip-kb``; unknown ids are a usage error."""
    known = {i.id for i in infos}
    only, skip = list(only), list(skip)
    for kb_id in [*only, *skip]:
        if kb_id not in known:
            raise UsageError(f"unknown knowledge base '{kb_id}' (installed: {', '.join(sorted(known)) or 'none'})")
    return [i for i in infos if (not only or i.id in only) and i.id not in skip]


# ---------------------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------------------
def ops_projection(infos: Sequence[KBInfo]) -> OpsProjection | None:
    """The ops columns the rank-scope knowledge bases ``infos`` read (``KnowledgeBase.ops_columns``) with the
    pipeline's own; None -- every column -- when one of them does not say (a plugin written before API 1.2).
    Metrics are stored at the file's precision only when every one of them is written for API 1.3 or later (it
    reads them with ``advisor.model.metric_values``)."""
    from advisor.model import OpsProjection

    declared: set[str] = set()
    at_precision = True
    for info in infos:
        if getattr(info.cls, "scope", "rank") != "rank":
            continue  # cluster-scope KBs see RankData, no op rows
        if info.cls.ops_columns is None:
            return None
        declared.update(info.cls.ops_columns)
        theirs = _api_parts(info.cls.api_version)
        at_precision &= theirs is not None and (theirs + [0])[:2] >= [1, 3]
    return OpsProjection.of(declared, at_precision)


def events_projection(infos: Sequence[KBInfo], rules: EffectiveRules) -> EventSelection | None:
    """The timeline events the rank-scope knowledge bases ``infos`` read row by row (``KnowledgeBase.events_read``)
    with the time model's; None -- keep every event -- when one of them does not say (a plugin
    written before API 1.4) or its declaration raises."""
    from advisor.model import EventSelection
    from advisor.timemodel import time_model_events

    selection = time_model_events(rules.for_kb("time") or None)
    for info in infos:
        if getattr(info.cls, "scope", "rank") != "rank":
            continue  # cluster-scope KBs see RankData, no events
        theirs = info.cls.events_read
        if callable(theirs):
            try:
                theirs = theirs(rules.for_kb(info.cls.rules_file))
            except Exception:  # noqa: BLE001 - a plugin's bug must not cost the run its events
                return None
        if not isinstance(theirs, EventSelection):
            return None  # not declared (None), or not a selection
        selection = selection | theirs
    return selection


def _api_parts(kb_api: str) -> list[int] | None:
    """``"1.2"`` -> ``[1, 2]``; None when it is not numbers separated by dots."""
    try:
        return [int(x) for x in str(kb_api).strip().split(".")]
    except ValueError:
        return None


def api_mismatch(kb_api: str) -> str | None:
    """Why a KB written for plugin API ``kb_api`` cannot run on this advisor, or None."""
    ours = [int(x) for x in hookspecs.API_VERSION.split(".")]
    theirs = _api_parts(kb_api)
    if theirs is None:
        return f"api_version {kb_api!r} is not MAJOR or MAJOR.MINOR"
    if theirs[0] != ours[0] or (len(theirs) > 1 and theirs[1] > ours[1]):
        return f"written for plugin API {kb_api}, this advisor provides {hookspecs.API_VERSION}"
    return None


def _missing(kb: type[KnowledgeBase], available: set[str]) -> str | None:
    missing = [r for r in kb.requires if r not in available]
    if missing:
        return "needs " + ", ".join(missing) + " (not in this input)"
    if kb.requires_any and not any(r in available for r in kb.requires_any):
        return "needs one of " + ", ".join(kb.requires_any) + " (none in this input)"
    return None


def _missing_peaks(kb: type[KnowledgeBase], platform: dict[str, Any]) -> str | None:
    """The chip peaks ``kb`` needs that the platform leaves unknown (a chip the table does not know)."""
    missing = [k for k in getattr(kb, "requires_platform", ()) if platform.get(k) is None]
    if not missing:
        return None
    return (f"needs the chip's {', '.join(missing)}, unknown for {platform.get('soc')} (not in rules/platforms.yaml; "
            "give them with --rules: platform: {" + ", ".join(f"{k}: ..." for k in missing) + "})")


RELEASE_AFTER_ROWS = 100_000
"""Ops rows from which the memory a knowledge base freed is handed back to the OS before the next one runs: below,
its peak is a few MB and trimming the heap (a millisecond at each call) costs more than it saves."""


class _KBFailed(Exception):
    """A knowledge base failed; the message is the reason shown in the report."""


def _run_with_limit(cls: type[KnowledgeBase], ctx: AnalysisContext, limit: float) -> list[Finding]:
    """Instantiate and run one KB in a worker thread, waiting at most ``limit`` seconds.

    Python cannot stop a thread: a KB past its limit is reported failed and left to finish in the background
    (daemon thread, its results discarded).
    """
    result: dict[str, Any] = {}

    def target() -> None:
        try:
            result["findings"] = list(cls().analyze(ctx) or [])
        except BaseException as e:  # noqa: BLE001 - a plugin's failure must not stop the others
            result["error"] = e

    thread = threading.Thread(target=target, name=f"kb-{cls.id}", daemon=True)
    thread.start()
    thread.join(limit)
    if thread.is_alive():
        raise _KBFailed(f"ran past its time limit of {limit:g} s")
    if "error" in result:
        e = result["error"]
        raise _KBFailed(f"raised {_describe(e)}{_where(e, cls.__module__)}")
    produced = result["findings"]
    bad = next((f for f in produced if not isinstance(f, Finding)), None)
    if bad is not None:
        raise _KBFailed(f"analyze() yielded {type(bad).__name__}, not Finding")
    return produced


def run(
    infos: Sequence[KBInfo],
    profile: Profile,
    graph: ModelGraph | None,
    rules: EffectiveRules,
    platform: dict[str, Any],
    time_limit_s: float | None = None,
    cluster: list[RankData] | None = None,
    available: set[str] | None = None,
) -> tuple[list[Finding], list[KBStatus]]:
    """Run the knowledge bases on one profile; return findings and one status per knowledge base.

    ``time_limit_s`` overrides every KB's own ``time_limit_s``. Rank-scope KBs run when ``cluster`` is None,
    cluster-scope KBs (``scope = "cluster"``) when it is given (then ``available`` says what the ranks carry).
    """
    wanted_scope = "rank" if cluster is None else "cluster"
    infos = [i for i in infos if getattr(i.cls, "scope", "rank") == wanted_scope]
    available = set(available if available is not None else profile.available)
    if graph is not None:
        available.add("graph")
    findings: list[Finding] = []
    statuses: list[KBStatus] = []
    snapshot: isolation.Snapshot | None = None
    try:
        for k, info in enumerate(infos, start=1):
            stage_progress.say(f"knowledge base {k} of {len(infos)}: {info.id}")
            snapshot = _run_one(info, profile, graph, rules, platform, time_limit_s, cluster, available, findings,
                                statuses, snapshot)
    finally:
        if snapshot is not None:
            snapshot.close()
    return findings, statuses


def saving_limit_us(profile: Profile, cluster: list[RankData] | None) -> float:
    """The most time a finding may claim to save: the longest of the rank's step time, busy time and summed op time
    (all ranks summed for cluster scope). Used to refuse a third-party finding that claims more than exists."""
    if cluster is not None:
        return float(sum(max(r.busy_us or 0.0, r.device_time_us or 0.0, _steps_total(r.steps)) for r in cluster))
    return max(profile.busy_time_us(), profile.device_time_us(), _steps_total(profile.steps))


def _steps_total(steps: Any) -> float:
    if steps is None or not len(steps):
        return 0.0
    cols = [c for c in ("computing_us", "comm_not_overlapped_us", "free_us") if c in steps.columns]
    total = float(steps[cols].sum(axis=1, min_count=1).sum()) if cols else 0.0
    return total if total == total else 0.0


def _run_one(info: KBInfo, profile: Profile, graph: ModelGraph | None, rules: EffectiveRules,
             platform: dict[str, Any], time_limit_s: float | None, cluster: list[RankData] | None,
             available: set[str], findings: list[Finding], statuses: list[KBStatus],
             snapshot: isolation.Snapshot | None) -> isolation.Snapshot | None:
    """Run one knowledge base (a third-party one in its own process); append its findings and status."""
    cls = info.cls
    status = KBStatus(cls.id, "ok", version=cls.version, package=info.package)
    statuses.append(status)
    problem = api_mismatch(cls.api_version)
    if problem is None and cls.rules_file and not rules.has(cls.rules_file):
        problem = f"its rules file '{cls.rules_file}' was not found in any rules directory"
    if problem:
        status.status, status.reason = "failed", problem
        return snapshot
    reason = _missing(cls, available) or _missing_peaks(cls, platform)
    if reason:
        status.status, status.reason = "skipped", reason
        return snapshot
    # each KB gets its own copy of the rules and platform, so one cannot change what the next one reads
    ctx = AnalysisContext(cls.id, profile, graph, _private_copy(rules.for_kb(cls.rules_file)),
                          _private_copy(platform), cluster=cluster,
                          toolkit_rules=_CopiedOnRead({n: rules.for_kb(n) for n in TOOLKIT_RULES if rules.has(n)}))
    started = time.perf_counter()
    limit = time_limit_s or cls.time_limit_s
    try:
        if isolation.is_isolated(cls):
            # a third-party KB's own time_limit_s may lower the limit of rules/plugins.yaml, never raise it
            limits = isolation.Limits.of(rules.for_kb(isolation.LIMITS_RULES))
            limit = time_limit_s or limits.kb_time_limit(cls.time_limit_s)
            snapshot = snapshot or isolation.Snapshot(profile, graph, cluster)
            produced, notes = isolation.run_kb(cls, ctx, limit, snapshot, saving_limit_us(profile, cluster), limits)
            ctx.notes.extend(notes)
        else:
            with stagetimes.stage(f"kb {cls.id}", timed=False):
                produced = _run_with_limit(cls, ctx, limit)
            if len(profile.ops) >= RELEASE_AFTER_ROWS:
                release_memory()  # what the KB freed in its thread's arena, before the next one's peak sits on it
    except (_KBFailed, isolation.KBFailed) as e:
        status.status, status.reason = "failed", str(e)
        produced = []
    status.seconds = time.perf_counter() - started
    status.notes = list(ctx.notes)
    for f in produced:
        f.kb = cls.id
        if cluster is None and profile.meta.rank is not None and f.rank is None:
            f.rank = profile.meta.rank
    status.findings = len(produced)
    findings.extend(produced)
    return snapshot


class _CopiedOnRead(Mapping[str, Any]):
    """Rules files a knowledge base may read: each a private copy (:func:`_private_copy`) made when it is first
    read -- most knowledge bases never read the toolkit's rules, and copying them for each was a per-rank cost."""

    def __init__(self, originals: dict[str, Any]) -> None:
        self._originals, self._copies = originals, {}

    def __getitem__(self, name: str) -> Any:
        if name not in self._copies:
            self._copies[name] = _private_copy(self._originals[name])
        return self._copies[name]

    def __iter__(self) -> Iterator[str]:
        return iter(self._originals)

    def __len__(self) -> int:
        return len(self._originals)


def _private_copy(value: Any) -> Any:
    """A copy of plain rule data no knowledge base can change for the next one: a pickle round trip, several times
    cheaper than ``copy.deepcopy`` on nested YAML dicts (it runs per knowledge base and rank; issue 33); deepcopy
    for what does not pickle."""
    try:
        return pickle.loads(pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL))
    except Exception:  # noqa: BLE001 - an unpicklable value a third-party rules file or platform holds
        return copy.deepcopy(value)


def merge_statuses(per_rank: Sequence[Sequence[KBStatus]]) -> list[KBStatus]:
    """One status per KB across ranks: failed if it failed anywhere, ok if it ran anywhere."""
    if not per_rank:
        return []
    merged: dict[str, KBStatus] = {}
    order = {"failed": 2, "ok": 1, "skipped": 0}
    for statuses in per_rank:
        for s in statuses:
            cur = merged.get(s.id)
            if cur is None:
                merged[s.id] = KBStatus(s.id, s.status, s.reason, s.version, s.package, s.findings, s.seconds,
                                        list(s.notes))
                continue
            cur.findings += s.findings
            cur.seconds += s.seconds
            cur.notes.extend(n for n in s.notes if n not in cur.notes)
            if order[s.status] > order[cur.status]:
                cur.status, cur.reason = s.status, s.reason
    return list(merged.values())



def load_failures(found: Discovery, only: Iterable[str] = ()) -> list[KBStatus]:
    """A ``failed`` status per plugin that did not load (all of them, or those named in ``only``), so the report
    says what did not run."""
    only = list(only)
    return [KBStatus(name, "failed", f"plugin failed to load: {reason}") for name, reason in found.errors.items()
            if not only or name in only]
