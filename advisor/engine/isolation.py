"""Third-party knowledge bases run where they can be stopped and cannot touch what the others see.

Built-in knowledge bases (this distribution's entry points) run in-process. Every other plugin is imported, asked
for its knowledge bases, and run, in child processes (``python -m advisor.engine.plugin_runner``: a *keeper* that runs
none of the plugin's code, and below it the *worker* that does), bounded by ``rules/plugins.yaml``:

- a time limit that fires, at import as in ``analyze``: the limit of ``plugins.yaml``; a knowledge base's own
  ``time_limit_s`` may lower it, never raise it. At the limit the keeper is told to end everything below it;
- a memory limit in the worker (``RLIMIT_DATA``) and caps on its findings count and answer size: past any of them
  the knowledge base is reported ``failed`` with the limit named, and none of its findings are kept;
- ``sys.exit``, ``os._exit``, a crash or a non-daemon thread cost that plugin its result, never this process;
- every process a plugin starts ends with it: on the worker's exit, at the time limit, on an exception or Ctrl-C
  here, and when this process dies (the keeper is a subreaper that kills what the plugin double-forked);
- the child's stdout and stderr go to a log file (the last line is quoted in the failure reason), so a
  ``print()`` cannot corrupt ``--format json`` on our stdout; ``os.chdir`` in the child moves nothing here;
- the job and the rank's data reach the child in a sealed memory file (Linux ``memfd`` with write seals: no
  process can change it, so one plugin cannot rewrite what the next one reads), elsewhere as a private copy per
  child; mutating ``ctx.profile.ops`` changes only the child's own unpickled copy;
- findings come back as JSON on a pipe, read here up to the answer cap, and are rebuilt and validated (types,
  finite savings no larger than the analyzed time, string op names, evidence JSON-able and bounded), as new
  objects the plugin cannot reach.

A child is a plain ``subprocess`` of ``sys.executable``, not ``multiprocessing``: ranks may run in daemonic worker
processes (a process pool, Dask workers), which multiprocessing refuses to give children; a subprocess works
from anywhere and needs nothing from the parent but file descriptors.
"""

from __future__ import annotations

import contextlib
import math
import os
import pickle
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, fields
from typing import Any, ClassVar

from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.findings import FIX_KINDS, SEVERITIES, Finding, Fix
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc

LIMITS_RULES = "plugins"
"""The rules file of the limits (``rules/plugins.yaml``)."""
MAX_EVIDENCE_DEPTH = 32
"""Deepest nesting of a finding's evidence (a report's evidence tables are 3 deep)."""
MAX_NOTES = 200
KEEPER_GRACE_S = 15.0
"""How long the keeper may take to end what is below it once told to (its sweep gives up after 10 s)."""
_MB = 1 << 20
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
# limits (rules/plugins.yaml)
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Limits:
    """What a third-party plugin may take: the values of ``rules/plugins.yaml`` (see the comments there)."""

    load_time_limit_s: float
    kb_time_limit_s: float
    memory_limit_mb: float
    memory_per_input_mb: float
    max_findings: int
    max_answer_mb: float
    max_rules_file_kb: float

    @classmethod
    def of(cls, values: Mapping[str, Any] | None = None) -> Limits:
        """The limits in ``values`` (the ``plugins`` rules in force), the shipped file's for any key missing."""
        merged = {**_shipped(), **(values or {})}
        return cls(**{f.name: (int if f.name == "max_findings" else float)(merged[f.name]) for f in fields(cls)})

    @property
    def max_answer_bytes(self) -> int:
        return int(self.max_answer_mb * _MB)

    def kb_time_limit(self, declared: Any) -> float:
        """A knowledge base's time limit: its own ``time_limit_s`` when lower than ``kb_time_limit_s``, else that."""
        try:
            own = float(declared)
        except (TypeError, ValueError):
            return self.kb_time_limit_s
        return own if math.isfinite(own) and 0 < own < self.kb_time_limit_s else self.kb_time_limit_s


_SHIPPED: dict[str, Any] = {}


def _shipped() -> dict[str, Any]:
    """``rules/plugins.yaml`` as shipped (discovery runs before the user's overrides are loaded)."""
    if not _SHIPPED:
        from advisor.config.loader import builtin_rules_dir, load_rules_file

        _SHIPPED.update(load_rules_file(builtin_rules_dir() / f"{LIMITS_RULES}.yaml", validate=False))
    return _SHIPPED


def discovery_limits() -> tuple[Limits, float]:
    """The shipped limits and the discovery time limit (``ADVISOR_PLUGIN_LOAD_TIMEOUT`` seconds, when set)."""
    limits = Limits.of()
    return limits, _env_seconds("ADVISOR_PLUGIN_LOAD_TIMEOUT", limits.load_time_limit_s)


def _env_seconds(name: str, default: float) -> float:
    try:
        value = float(os.environ.get(name, ""))
    except ValueError:
        return default
    return value if math.isfinite(value) and value > 0 else default


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
        raise RuntimeError(f"{self.id} runs in its own process (advisor.engine.isolation.run_kb)")


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
upgraded plugin has another key. What a run found is returned by ``advisor.engine.kb_engine.find_plugins``."""


def discover_plugins(eps: Sequence[tuple[str, str, tuple[str, str]]]) \
        -> Iterator[tuple[str, tuple[object | None, list[str]]]]:
    """For each third-party entry point (name, ``module:attr``, (distribution, version)): a stand-in plugin to
    register (or None) and the load errors, from a child process each (run in parallel, once per process)."""
    todo = [(n, v, p) for n, v, p in eps if (n, v, p) not in _DISCOVERED]
    limits, limit_s = discovery_limits()
    width = max(2, os.cpu_count() or 2)  # at most this many children at once; each one's limit runs from its start
    running: list[tuple[tuple[str, str, tuple[str, str]], _Child]] = []
    queue = list(todo)
    try:
        while queue or running:
            while queue and len(running) < width:
                key = queue.pop(0)
                running.append((key, _Child({"kind": "discover", "name": key[0], "value": key[1]}, limit_s, limits)))
            key, child = running[0]
            _DISCOVERED[key] = _stand_in_plugin(key, child)
            running.pop(0)
    finally:
        for _, child in running:  # Ctrl-C (or any exception) here: no child outlives it
            child.close()
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
# what a child reads: sealed
# ---------------------------------------------------------------------------------------------------------
def _seals() -> int | None:
    """The memfd seals that make a file unchangeable (Linux), or None where there are none."""
    import fcntl

    names = ("F_SEAL_SEAL", "F_SEAL_SHRINK", "F_SEAL_GROW", "F_SEAL_WRITE")
    if not hasattr(os, "memfd_create") or not hasattr(fcntl, "F_ADD_SEALS") or \
            not all(hasattr(fcntl, n) for n in names):
        return None
    seals = 0
    for n in names:
        seals |= getattr(fcntl, n)
    return seals


class Sealed:
    """A pickle every child may read and none may change: a sealed ``memfd`` (its descriptor is handed to each
    child) or, where there is none, bytes written as a read-only private copy into each child's own folder."""

    def __init__(self, value: Any, name: str) -> None:
        self.name = name
        self._fd: int | None = None
        self._bytes = b""
        seals = _seals()
        if seals is not None:
            import fcntl

            fd = os.memfd_create(f"advisor-{name}", os.MFD_CLOEXEC | os.MFD_ALLOW_SEALING)
            try:
                with os.fdopen(os.dup(fd), "wb") as fh:
                    pickle.dump(value, fh, protocol=pickle.HIGHEST_PROTOCOL)
                fcntl.fcntl(fd, fcntl.F_ADD_SEALS, seals)
                self._fd = fd
            except OSError:
                os.close(fd)
        if self._fd is None:
            self._bytes = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self.size = os.fstat(self._fd).st_size if self._fd is not None else len(self._bytes)

    def hand_to(self, folder: str) -> tuple[str, int | None]:
        """(how a child finds it: ``fd:N`` or ``path:P``, the descriptor to pass it or None)."""
        if self._fd is not None:
            return f"fd:{self._fd}", self._fd
        path = os.path.join(folder, f"{self.name}.pkl")
        with open(path, "xb") as fh:
            fh.write(self._bytes)
        os.chmod(path, 0o400)
        return f"path:{path}", None

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None
        self._bytes = b""


class Snapshot(Sealed):
    """One rank's data (profile, graph, cluster), sealed once and read by every third-party knowledge base's child
    (each unpickles its own copy)."""

    def __init__(self, profile: Any, graph: Any, cluster: Any) -> None:
        super().__init__((profile, graph, cluster), "data")


# ---------------------------------------------------------------------------------------------------------
# running
# ---------------------------------------------------------------------------------------------------------
def run_kb(cls: type[IsolatedKnowledgeBase], ctx: AnalysisContext, limit_s: float, snapshot: Snapshot,
           saving_limit_us: float | None, limits: Limits | None = None) -> tuple[list[Finding], list[str]]:
    """Run one third-party knowledge base in a child process; its validated findings and notes. Raises KBFailed.

    ``limit_s`` is the time limit (:meth:`Limits.kb_time_limit` of the KB's own, or the user's ``--time-limit``);
    ``limits`` the ``plugins`` rules in force (default: as shipped)."""
    limits = limits or Limits.of()
    ep_name, ep_value = cls.entry_point
    job = {"kind": "analyze", "name": ep_name, "value": ep_value, "kb_id": cls.id,
           "rules": dict(ctx.rules), "platform": dict(ctx.platform), "toolkit_rules": dict(ctx.toolkit_rules)}
    result = _Child(job, limit_s, limits, snapshot).result()
    notes = [str(n)[:1000] for n in (result.get("notes") or [])[:MAX_NOTES]]
    raw = result.get("findings")
    if not isinstance(raw, list):
        raise KBFailed("returned no findings list")
    if len(raw) > limits.max_findings:
        raise KBFailed(_too_many(limits.max_findings))
    findings = []
    for i, d in enumerate(raw):
        try:
            findings.append(finding_from_dict(d, saving_limit_us))
        except ValueError as e:
            raise KBFailed(f"finding {i + 1}: {e}") from None
    return findings, notes


def _too_many(most: int) -> str:
    return (f"reported more than {most:,} findings, the most one knowledge base may report on one rank "
            "(rules: plugins.max_findings); none of its findings are kept")


class _Child:
    """One ``python -m advisor.engine.plugin_runner`` keeper (and its worker), started at construction, with its own time
    limit; :meth:`result` reads its answer, :meth:`close` (always called by it) ends everything it started."""

    def __init__(self, job: dict[str, Any], limit_s: float, limits: Limits, data: Sealed | None = None) -> None:
        self.limit_s = limit_s
        self._cap = limits.max_answer_bytes
        self._dir = tempfile.mkdtemp(prefix="advisor-kb-")
        self._log_path = os.path.join(self._dir, "log.txt")
        self._read_fd = -1
        self._proc: subprocess.Popen[bytes] | None = None
        passed: list[int] = []
        memory_mb = limits.memory_limit_mb
        if data is not None:
            job["snapshot"], fd = data.hand_to(self._dir)
            passed += [fd] if fd is not None else []
            memory_mb += limits.memory_per_input_mb * data.size / _MB
        sealed_job = Sealed({**job, "sys_path": list(sys.path), "memory_mb": memory_mb,
                             "max_findings": limits.max_findings, "max_answer_bytes": self._cap}, "job")
        write_fd = -1
        try:
            job_spec, fd = sealed_job.hand_to(self._dir)
            passed += [fd] if fd is not None else []
            self._read_fd, write_fd = os.pipe()
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in sys.path if p and os.path.isdir(p))
            env.pop("PYTHONSTARTUP", None)
            self._started = time.monotonic()
            with open(self._log_path, "wb") as log:
                self._proc = subprocess.Popen(
                    [sys.executable, "-m", "advisor.engine.plugin_runner", str(os.getpid()), job_spec, str(write_fd)],
                    stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, pass_fds=[write_fd, *passed],
                    start_new_session=True)
        except BaseException:
            self.close()
            raise
        finally:
            sealed_job.close()  # the child holds its own descriptor
            if write_fd >= 0:
                os.close(write_fd)  # the child's copy is the only one: end of file when it (and all below) ends

    def result(self) -> dict[str, Any]:
        try:
            data = self._read()
            code = self._wait_keeper()
            if data:
                try:
                    result = safeload.loads_json(data, "answer", MAX_EVIDENCE_DEPTH + 8)
                except InputError as e:
                    raise KBFailed(f"returned an unreadable result ({e.problem})") from None
                if not isinstance(result, dict):
                    raise KBFailed("returned an unreadable result")
                if result.get("error"):
                    raise KBFailed(str(result["error"])[:500])
                return result
            how = f"was killed by signal {code - 128}" if code > 128 else f"exited with code {code}"
            last = self._last_log_line()
            raise KBFailed(f"{how} without a result (os._exit or a crash)" + (f"; last output: {last}" if last else ""))
        finally:
            self.close()

    def _read(self) -> bytes:
        """The answer on the pipe, to its end (the worker and everything it started have ended), within the time
        limit and the answer cap."""
        assert self._proc is not None
        deadline = self._started + self.limit_s
        chunks: list[bytes] = []
        size = 0
        os.set_blocking(self._read_fd, False)
        with selectors.DefaultSelector() as sel:
            sel.register(self._read_fd, selectors.EVENT_READ)
            while True:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise KBFailed(f"ran past its time limit of {self.limit_s:g} s")
                if not sel.select(min(left, 1.0)):
                    continue
                try:
                    chunk = os.read(self._read_fd, 1 << 20)
                except BlockingIOError:
                    continue
                if not chunk:
                    return b"".join(chunks)
                size += len(chunk)
                if size > self._cap:
                    raise KBFailed(f"answered more than the {self._cap / _MB:,.0f} MB one knowledge base may answer "
                                   "(rules: plugins.max_answer_mb); none of its findings are kept")
                chunks.append(chunk)

    def _wait_keeper(self) -> int:
        assert self._proc is not None
        try:
            return self._proc.wait(timeout=max(1.0, self._started + self.limit_s - time.monotonic()) + KEEPER_GRACE_S)
        except subprocess.TimeoutExpired:
            raise KBFailed(f"ran past its time limit of {self.limit_s:g} s") from None

    def close(self) -> None:
        """End the keeper and everything below it (it kills the worker's group and what escaped it), then clean up.
        Called on every way out of :meth:`result`: an answer, the time limit, an exception, Ctrl-C."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            with contextlib.suppress(OSError):
                proc.send_signal(signal.SIGTERM)  # the keeper's cue to end everything below it
            try:
                proc.wait(timeout=KEEPER_GRACE_S)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(OSError):
                    os.killpg(proc.pid, signal.SIGKILL)
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=5)
        if self._read_fd >= 0:
            with contextlib.suppress(OSError):
                os.close(self._read_fd)
            self._read_fd = -1
        shutil.rmtree(self._dir, ignore_errors=True)

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
        raise ValueError(f"{what} {f:g} µs is more than the analyzed time ({limit:g} µs)")
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
