"""Third-party knowledge bases run where they can be stopped and cannot touch what the others see.

Built-in knowledge bases (this distribution's entry points) run in-process. Every other plugin is imported, asked
for its knowledge bases, and run, in a child process (``python -m advisor.plugin_runner``):

- a time limit that fires: the child's whole process group is killed at the limit, at import as in ``analyze``
  (a thread cannot be stopped; a regex or a C call holding the GIL would not even let the timer run);
- ``sys.exit``, ``os._exit``, a crash or a non-daemon thread cost that plugin its result, never this process:
  it is reported ``failed`` with the reason, the run goes on and the report is written;
- the child's stdout and stderr go to a log file (the last line is quoted in the failure reason), so a
  ``print()`` cannot corrupt ``--format json`` on our stdout; ``os.chdir`` in the child moves nothing here;
- the child works on its own copy of the profile (read from a pickle), so mutating ``ctx.profile.ops`` changes
  nothing the other knowledge bases see;
- findings come back as JSON and are rebuilt and validated here (types, finite savings no larger than the
  analyzed time, string op names, evidence JSON-able and bounded), as new objects the plugin cannot reach.

A child is a plain ``subprocess`` of ``sys.executable``, not ``multiprocessing``: ranks may run in daemonic worker
processes (a process pool, Dask workers), which multiprocessing refuses to give children; a subprocess works
from anywhere and needs nothing from the parent but files.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from advisor import safeload
from advisor.errors import InputError
from advisor.findings import FIX_KINDS, SEVERITIES, Finding, Fix
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc

DISCOVERY_TIME_LIMIT_S = 60.0
"""Longest a third-party plugin may take to import and return its knowledge bases and rules dirs (the environment
variable ``ADVISOR_PLUGIN_LOAD_TIMEOUT`` overrides it, in seconds)."""
MAX_RESULT_BYTES = 1 << 30
"""Largest result a child may hand back (findings of a knowledge base, as JSON)."""
MAX_EVIDENCE_DEPTH = 32
"""Deepest nesting of a finding's evidence (a report's evidence tables are 3 deep)."""
MAX_NOTES = 200
_OWN_DISTRIBUTION = "ascend-advisor"
_OWN_MODULES = ("advisor",)


class KBFailed(Exception):
    """A third-party knowledge base failed in its child process; the message is the report's reason."""


def is_builtin(value: str, distribution: str) -> bool:
    """An entry point of this distribution (or, when the distribution is unknown, one of our own modules)."""
    if distribution:
        return distribution.lower().replace("_", "-") == _OWN_DISTRIBUTION
    return value.split(":")[0].split(".")[0] in _OWN_MODULES


# ---------------------------------------------------------------------------------------------------------
# stand-ins for third-party knowledge bases in this process
# ---------------------------------------------------------------------------------------------------------
class IsolatedKnowledgeBase(KnowledgeBase):
    """The declaration of a third-party knowledge base, as its plugin returned it in a child process.

    ``advisor kb list``, ``explain`` and the engine's checks read these attributes; ``analyze`` runs in a child
    process (:func:`run_kb`), never here.
    """

    entry_point: ClassVar[tuple[str, str]] = ("", "")
    """(entry-point name, ``module:attr``) that provides it."""

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        raise RuntimeError(f"{self.id} runs in its own process (advisor.isolation.run_kb)")


def is_isolated(cls: type) -> bool:
    return isinstance(cls, type) and issubclass(cls, IsolatedKnowledgeBase)


def _stand_in(ep_name: str, ep_value: str, d: dict[str, Any]) -> type[IsolatedKnowledgeBase]:
    rules = tuple(RuleDoc(id=str(r["id"]), title=str(r["title"]), what=str(r["what"]), why=str(r["why"]),
                          how_to_fix=str(r["how_to_fix"]), thresholds=tuple(map(str, r["thresholds"])),
                          needs=tuple(map(str, r["needs"])), example=str(r["example"]),
                          role=str(r.get("role", "cause"))) for r in d["rules"])
    attrs = {
        "id": str(d["id"]), "title": str(d["title"]), "version": str(d["version"]),
        "api_version": str(d["api_version"]), "requires": tuple(map(str, d["requires"])),
        "requires_any": tuple(map(str, d["requires_any"])),
        "rules_file": None if d["rules_file"] is None else str(d["rules_file"]), "rules": rules,
        "time_limit_s": float(d["time_limit_s"]), "scope": str(d["scope"]),
        "entry_point": (ep_name, ep_value), "__doc__": d.get("doc") or None, "__module__": str(d["module"]),
    }
    return type(str(d["name"]), (IsolatedKnowledgeBase,), attrs)


class _PluginStandIn:
    """What a third-party plugin's hooks returned, registered with pluggy in its place."""

    def __init__(self, kbs: list[type[IsolatedKnowledgeBase]], dirs: list[str]) -> None:
        self._kbs, self._dirs = kbs, dirs

    def advisor_knowledge_bases(self) -> list[type[KnowledgeBase]]:
        return list(self._kbs)

    def advisor_rules_dirs(self) -> list[str]:
        return list(self._dirs)


def _mark_hooks() -> None:
    from advisor import hookimpl

    for name in ("advisor_knowledge_bases", "advisor_rules_dirs"):
        setattr(_PluginStandIn, name, hookimpl(getattr(_PluginStandIn, name)))


_mark_hooks()


_DISCOVERED: dict[tuple[str, str, tuple[str, str]], tuple[object | None, list[str]]] = {}
"""A memo, not discovery state: (entry point, ``module:attr``, (distribution, version)) -> what its child process
returned. A worker that analyzes many ranks asks once per process instead of spawning a child per rank; an
upgraded plugin has another key. What a run found is returned by ``advisor.engine.find_plugins``."""


def discover_plugins(eps: Sequence[tuple[str, str, tuple[str, str]]]) \
        -> Iterator[tuple[str, tuple[object | None, list[str]]]]:
    """For each third-party entry point (name, ``module:attr``, (distribution, version)): a stand-in plugin to
    register (or None) and the load errors, from a child process each (run in parallel, once per process)."""
    todo = [(n, v, p) for n, v, p in eps if (n, v, p) not in _DISCOVERED]
    limit = _env_seconds("ADVISOR_PLUGIN_LOAD_TIMEOUT", DISCOVERY_TIME_LIMIT_S)
    width = max(2, os.cpu_count() or 2)  # at most this many children at once; each one's limit runs from its start
    running: list[tuple[tuple[str, str, tuple[str, str]], _Child]] = []
    queue = list(todo)
    while queue or running:
        while queue and len(running) < width:
            key = queue.pop(0)
            running.append((key, _Child({"kind": "discover", "name": key[0], "value": key[1]}, limit)))
        key, child = running.pop(0)
        _DISCOVERED[key] = _stand_in_plugin(key, child)
    for key in eps:
        yield key[0], _DISCOVERED[key]


def _stand_in_plugin(key: tuple[str, str, tuple[str, str]], child: _Child) -> tuple[object | None, list[str]]:
    """The stand-in plugin for what one discovery child returned, and the load errors."""
    name, value, _ = key
    try:
        result = child.result()
    except KBFailed as e:
        return None, [f"cannot load {value}: {e}"]
    errors = [str(x) for x in result.get("errors", [])]
    kbs = []
    for d in result.get("kbs", []):
        try:
            kbs.append(_stand_in(name, value, d))
        except (KeyError, TypeError, ValueError) as e:
            errors.append(f"unusable knowledge base declaration ({type(e).__name__}: {e})")
    dirs = [str(x) for x in result.get("rules_dirs", [])]
    return (_PluginStandIn(kbs, dirs) if kbs or dirs else None), errors


# ---------------------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------------------
def _env_seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default


class Snapshot:
    """One rank's data pickled once to a private file, read by every third-party knowledge base's child."""

    def __init__(self, profile: Any, graph: Any, cluster: Any) -> None:
        self._dir = tempfile.mkdtemp(prefix="advisor-snapshot-")
        self.path = os.path.join(self._dir, "data.pkl")
        with open(self.path, "wb") as fh:
            pickle.dump((profile, graph, cluster), fh, protocol=pickle.HIGHEST_PROTOCOL)

    def close(self) -> None:
        shutil.rmtree(self._dir, ignore_errors=True)


def run_kb(cls: type[IsolatedKnowledgeBase], ctx: AnalysisContext, limit_s: float, snapshot: Snapshot,
           saving_limit_us: float | None) -> tuple[list[Finding], list[str]]:
    """Run one third-party knowledge base in a child process; its validated findings and notes. Raises KBFailed."""
    ep_name, ep_value = cls.entry_point
    job = {"kind": "analyze", "name": ep_name, "value": ep_value, "kb_id": cls.id, "snapshot": snapshot.path,
           "rules": dict(ctx.rules), "platform": dict(ctx.platform), "toolkit_rules": dict(ctx.toolkit_rules)}
    result = _Child(job, limit_s).result()
    notes = [str(n)[:1000] for n in (result.get("notes") or [])[:MAX_NOTES]]
    raw = result.get("findings")
    if not isinstance(raw, list):
        raise KBFailed("returned no findings list")
    findings = []
    for i, d in enumerate(raw):
        try:
            findings.append(finding_from_dict(d, saving_limit_us))
        except ValueError as e:
            raise KBFailed(f"finding {i + 1}: {e}") from None
    return findings, notes


@dataclass
class _Child:
    """One ``python -m advisor.plugin_runner`` process, started at construction, with its own time limit."""

    job: dict[str, Any]
    limit_s: float

    def __post_init__(self) -> None:
        self._dir = tempfile.mkdtemp(prefix="advisor-kb-")
        self._job_path = os.path.join(self._dir, "job.pkl")
        self._result_path = os.path.join(self._dir, "result.json")
        self._log_path = os.path.join(self._dir, "log.txt")
        with open(self._job_path, "wb") as fh:
            pickle.dump({**self.job, "sys_path": list(sys.path)}, fh, protocol=pickle.HIGHEST_PROTOCOL)
        env = dict(os.environ)
        env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
        env.pop("PYTHONSTARTUP", None)
        self._started = time.monotonic()
        with open(self._log_path, "wb") as log:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "advisor.plugin_runner", self._job_path, self._result_path],
                stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True)

    def result(self) -> dict[str, Any]:
        try:
            remaining = max(0.0, self.limit_s - (time.monotonic() - self._started))
            try:
                code = self._proc.wait(timeout=remaining)
            except subprocess.TimeoutExpired:
                self._kill()
                raise KBFailed(f"ran past its time limit of {self.limit_s:g} s") from None
            self._kill()  # grandchildren it left behind
            if os.path.exists(self._result_path):
                try:
                    result = safeload.load_json(self._result_path, MAX_RESULT_BYTES, MAX_EVIDENCE_DEPTH + 8)
                except InputError as e:
                    raise KBFailed(f"returned an unreadable result ({e.problem})") from None
                if not isinstance(result, dict):
                    raise KBFailed("returned an unreadable result")
                if result.get("error"):
                    raise KBFailed(str(result["error"])[:500])
                return result
            how = f"was killed by signal {-code}" if code < 0 else f"exited with code {code}"
            last = self._last_log_line()
            raise KBFailed(f"{how} without a result (os._exit or a crash)" + (f"; last output: {last}" if last else ""))
        finally:
            shutil.rmtree(self._dir, ignore_errors=True)

    def _kill(self) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self._proc.wait(timeout=10)

    def _last_log_line(self) -> str:
        try:
            with open(self._log_path, "rb") as fh:
                fh.seek(max(0, os.path.getsize(self._log_path) - 4096))
                lines = [ln.strip() for ln in fh.read().decode("utf-8", "replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return lines[-1][:300] if lines else ""


# ---------------------------------------------------------------------------------------------------------
# findings from JSON, validated
# ---------------------------------------------------------------------------------------------------------
def _number(value: Any, what: str, limit: float | None = None) -> float:
    if isinstance(value, str) and value.lower().lstrip("+-") in ("inf", "infinity", "nan"):
        raise ValueError(f"{what} is not a finite number ({value})")
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError(f"{what} is {type(value).__name__}, not a number")
    f = float(value)
    if not math.isfinite(f):
        raise ValueError(f"{what} is not a finite number")
    if f < 0:
        raise ValueError(f"{what} is negative ({f:g})")
    if limit is not None and f > limit * (1 + 1e-9) + 1e-6:
        raise ValueError(f"{what} {f:g} us is more than the analyzed time ({limit:g} us)")
    return f


def _text(value: Any, what: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{what} is {type(value).__name__}, not a string")
    return value


def finding_from_dict(d: Any, saving_limit_us: float | None) -> Finding:
    """A Finding rebuilt from a child's JSON, every field checked; ValueError says what is wrong."""
    if not isinstance(d, dict):
        raise ValueError("not an object")
    ops = d.get("ops")
    if not isinstance(ops, list) or not all(isinstance(o, str) for o in ops):
        raise ValueError("ops must be a list of op-name strings")
    evidence = d.get("evidence")
    if not isinstance(evidence, dict):
        raise ValueError("evidence must be a mapping")
    severity = d.get("severity")
    if severity not in SEVERITIES:
        raise ValueError(f"severity {severity!r} is not one of {', '.join(SEVERITIES)}")
    saving = _number(d.get("estimated_saving_us"), "estimated_saving_us", saving_limit_us)
    by_op = d.get("saving_by_op") or {}
    if not isinstance(by_op, dict):
        raise ValueError("saving_by_op must be a mapping")
    by_op = {_text(k, "a saving_by_op key"): _number(v, f"saving_by_op[{k!r}]", saving_limit_us)
             for k, v in by_op.items()}
    confidence = d.get("confidence", 0.7)
    if isinstance(confidence, bool) or not isinstance(confidence, (int, float)) or not math.isfinite(confidence):
        raise ValueError("confidence is not a finite number")
    rank = d.get("rank")
    if rank is not None and (isinstance(rank, bool) or not isinstance(rank, int)):
        raise ValueError("rank is not an integer")
    fix = None
    if d.get("fix") is not None:
        f = d["fix"]
        if not isinstance(f, dict) or f.get("kind") not in FIX_KINDS:
            raise ValueError(f"fix kind must be one of {', '.join(FIX_KINDS)}")
        data = f.get("data") or {}
        if not isinstance(data, dict):
            raise ValueError("fix data must be a mapping")
        command = f.get("command")
        fix = Fix(kind=f["kind"], summary=_text(f.get("summary"), "fix summary"), data=data,
                  command=None if command is None else _text(command, "fix command"))
    return Finding(kb=_text(d.get("kb", ""), "kb"), rule=_text(d.get("rule"), "rule"),
                   title=_text(d.get("title"), "title"), severity=severity, ops=list(ops), evidence=evidence,
                   estimated_saving_us=saving, basis=_text(d.get("basis", ""), "basis"),
                   recommendation=_text(d.get("recommendation"), "recommendation"), fix=fix,
                   confidence=float(confidence), saving_by_op=by_op, rank=rank)
