"""The child side of ``advisor.engine.isolation``: ``python -m advisor.engine.plugin_runner PARENT_PID JOB RESULT_FD``.

Two processes per job:

- the *keeper* (this module's ``main``) runs none of the plugin's code. It makes itself the subreaper of
  everything below it (Linux ``PR_SET_CHILD_SUBREAPER``: a process the plugin double-forks, even out of its
  process group and session with ``setsid``, is re-parented to the keeper when its parent ends, not to init),
  asks to be sent SIGTERM when the advisor process ends (``PR_SET_PDEATHSIG``: SIGKILL or SIGTERM of advisor
  included), forks the worker and waits. When the worker ends -- or on SIGTERM from advisor at the time limit, on
  Ctrl-C, or when advisor dies -- it kills the worker's process group, then every process re-parented to it,
  until none is left, and exits.
- the *worker*, in its own process group, with a memory limit it cannot raise (``RLIMIT_DATA``, soft and hard),
  imports the plugin and runs the job; it dies with the keeper (``PR_SET_PDEATHSIG``).

A job is pickled by the parent (our own data: never a plugin's) into a sealed memory file (``JOB`` is ``fd:N``:
no process can change it) or a private copy (``path:P``); the rank's data comes the same way. The result is JSON
written to the pipe ``RESULT_FD``, so nothing the plugin made is unpickled in the parent, and no file another
plugin could rewrite lies between them. Two kinds of job:

- ``discover``: import one entry point, call its hooks, describe its knowledge-base classes and rules dirs;
- ``analyze``: import it again, find the knowledge base by id, run ``analyze`` on this process's copy of the
  rank's data, and write its findings (at most ``max_findings``) as plain JSON (evidence bounded in depth, cycles
  refused).

Whatever the plugin does -- raise, ``sys.exit``, leave threads running, run out of memory -- the result is written
and the worker ends with ``os._exit``; what it prints goes to the parent's log file, never to the parent's stdout.
"""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import json
import math
import os
import pickle
import signal
import sys
import time
import warnings
from typing import Any

MAX_EVIDENCE_DEPTH = 32
SWEEP_SECONDS = 10.0
"""Longest the keeper keeps killing what is left below it (a process that forks as fast as it is killed)."""
EXIT_ORPHANED = 125
"""The keeper's exit code when advisor was gone before it could ask to follow it."""
_PR_SET_PDEATHSIG, _PR_SET_CHILD_SUBREAPER = 1, 36


class _Unusable(Exception):
    """The plugin returned something that cannot be sent back; the message is the failure reason."""


def _plain(value: Any, depth: int, seen: set[int], what: str) -> Any:
    """``value`` as JSON-able data: numpy scalars unwrapped, tuples as lists, non-finite floats as None; cycles and
    nesting deeper than MAX_EVIDENCE_DEPTH refused."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if hasattr(value, "item") and not isinstance(value, (dict, list, tuple)):
        try:
            return _plain(value.item(), depth, seen, what)
        except (ValueError, TypeError, AttributeError):
            return str(value)
    if isinstance(value, (dict, list, tuple)):
        if depth >= MAX_EVIDENCE_DEPTH:
            raise _Unusable(f"{what} is nested more than {MAX_EVIDENCE_DEPTH} levels deep")
        if id(value) in seen:
            raise _Unusable(f"{what} refers to itself (circular)")
        seen.add(id(value))
        try:
            if isinstance(value, dict):
                return {str(k): _plain(v, depth + 1, seen, what) for k, v in value.items()}
            return [_plain(v, depth + 1, seen, what) for v in value]
        finally:
            seen.discard(id(value))
    return str(value)


def _raw_number(value: Any) -> Any:
    """Savings are checked by the parent: keep them as numbers (inf/NaN as strings JSON can carry)."""
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, TypeError, AttributeError):
            return str(value)
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    return value if isinstance(value, (int, float)) and not isinstance(value, bool) else str(value)


def _finding(f: Any) -> dict[str, Any]:
    from advisor.findings import Finding

    if not isinstance(f, Finding):
        raise _Unusable(f"analyze() yielded {type(f).__name__}, not Finding")
    fix = None
    if f.fix is not None:
        fix = {"kind": _scalar(f.fix.kind), "summary": _scalar(f.fix.summary),
               "data": _plain(f.fix.data, 0, set(), "fix data"), "command": _scalar(f.fix.command)}
    ops = f.ops if isinstance(f.ops, (list, tuple)) else [f.ops]
    return {
        "kb": _scalar(f.kb), "rule": _scalar(f.rule), "title": _scalar(f.title), "severity": _scalar(f.severity),
        "ops": [o if isinstance(o, str) else {"not a string": type(o).__name__} for o in ops],
        "evidence": _plain(f.evidence, 0, set(), "evidence"),
        "estimated_saving_us": _raw_number(f.estimated_saving_us), "basis": _scalar(f.basis),
        "recommendation": _scalar(f.recommendation), "fix": fix, "confidence": _raw_number(f.confidence),
        "saving_by_op": ({str(k): _raw_number(v) for k, v in f.saving_by_op.items()}
                         if isinstance(f.saving_by_op, dict) else str(f.saving_by_op)),
        "rank": _scalar(f.rank),
    }


def _scalar(value: Any) -> Any:
    """A field as JSON carries it; anything else as a marker the parent's checks reject by type."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    return {"not a string or number": type(value).__name__}


def _describe(cls: Any) -> dict[str, Any]:
    return {
        "id": str(cls.id), "title": str(cls.title), "version": str(cls.version), "api_version": str(cls.api_version),
        "requires": [str(r) for r in cls.requires], "requires_any": [str(r) for r in cls.requires_any],
        "rules_file": None if cls.rules_file is None else str(cls.rules_file),
        "rules": [{k: (list(v) if isinstance(v, tuple) else str(v)) for k, v in dataclasses.asdict(r).items()}
                  for r in cls.rules],
        "time_limit_s": float(cls.time_limit_s), "scope": str(getattr(cls, "scope", "rank")),
        "doc": (cls.__doc__ or "").strip(), "name": cls.__name__, "module": cls.__module__,
    }


def _load(job: dict[str, Any]) -> tuple[Any, list[Any], list[str]]:
    """Import the job's entry point and ask it for its knowledge bases and rules dirs."""
    from advisor.engine import kb_engine as engine

    found = engine.find_plugins(entry_points=False)
    engine.load_entry_point(found, job["name"], job["value"])
    infos = engine.discover(found)
    dirs = [str(d) for d in engine.rules_dirs(found, vet=False)[1:]]
    return found, infos, dirs


def _discover(job: dict[str, Any]) -> dict[str, Any]:
    found, infos, dirs = _load(job)
    errors = list(found.errors.values())
    kbs = []
    for info in infos:
        try:
            kbs.append(_describe(info.cls))
        except Exception as e:  # noqa: BLE001 - an attribute of the wrong type
            errors.append(f"{getattr(info.cls, 'id', info.cls)}: unusable declaration ({type(e).__name__}: {e})")
    return {"kbs": kbs, "rules_dirs": dirs, "errors": errors}


def _analyze(job: dict[str, Any]) -> dict[str, Any]:
    from advisor.kb import AnalysisContext

    _, infos, _ = _load(job)
    cls = next((i.cls for i in infos if i.id == job["kb_id"]), None)
    if cls is None:
        return {"error": f"its plugin no longer provides knowledge base '{job['kb_id']}'"}
    with read_only(job["snapshot"]) as data:
        profile, graph, cluster = pickle.loads(data)
    ctx = AnalysisContext(cls.id, profile, graph, job["rules"], job["platform"], cluster=cluster,
                          toolkit_rules=job.get("toolkit_rules") or {})
    most = int(job["max_findings"])
    produced = list(itertools.islice(iter(cls().analyze(ctx) or []), most + 1))  # a generator stops at the cap
    if len(produced) > most:
        return {"error": f"reported more than {most:,} findings, the most one knowledge base may report on one rank "
                         "(rules: plugins.max_findings); none of its findings are kept"}
    try:
        findings = [_finding(f) for f in produced]
    except _Unusable as e:
        return {"error": str(e)}
    return {"findings": findings, "notes": [str(n) for n in ctx.notes]}


def _where(e: BaseException, job: dict[str, Any]) -> str:
    """`` at my_kb/kb.py:42``: the last frame in the plugin's own code, not the library frame that raised."""
    from advisor.engine.plugin_location import where

    return where(e, str(job.get("value", "")).split(":")[0] or None)


@contextlib.contextmanager
def read_only(spec: str) -> Any:
    """The bytes the parent handed over as ``fd:N`` (a sealed memory file, mapped read-only) or ``path:P`` (this
    child's private copy), as a buffer ``pickle.loads`` reads."""
    kind, _, where = spec.partition(":")
    if kind == "fd":
        import mmap

        fd = int(where)
        if os.fstat(fd).st_size == 0:
            yield b""
            return
        with mmap.mmap(fd, 0, prot=mmap.PROT_READ) as mapped:
            yield mapped
    else:
        with open(where, "rb") as fh:
            yield fh.read()


# ---------------------------------------------------------------------------------------------------------
# the worker: runs the plugin's code
# ---------------------------------------------------------------------------------------------------------
def _limit_memory(megabytes: float) -> None:
    """Cap what this process may allocate (soft and hard: the plugin cannot raise it back unless it runs as root).

    ``RLIMIT_DATA`` (Linux 4.7+: heap and private writable mappings, what a process touches), not ``RLIMIT_AS``:
    the address space also counts what is reserved and never used (thread stacks, allocator arenas, the mapped
    snapshot), so a limit there would fail plugins that merely import numpy or torch."""
    try:
        import resource
    except ImportError:  # pragma: no cover - not POSIX
        return
    limit = int(megabytes * (1 << 20))
    for which in ("RLIMIT_DATA", "RLIMIT_AS") if sys.platform == "darwin" else ("RLIMIT_DATA",):
        with contextlib.suppress(ValueError, OSError, AttributeError):
            resource.setrlimit(getattr(resource, which), (limit, limit))


def _run_job(job: dict[str, Any]) -> dict[str, Any]:
    reserve = bytearray(8 << 20)  # given back on MemoryError, so the failure can still be reported
    try:
        return _discover(job) if job["kind"] == "discover" else _analyze(job)
    except MemoryError:
        del reserve
        return {"error": f"ran out of memory: it may allocate {job['memory_mb']:,.0f} MB "
                         "(rules: plugins.memory_limit_mb, plugins.memory_per_input_mb)"}
    except SystemExit as e:
        return {"error": f"called sys.exit({e.code!r})"}
    except BaseException as e:  # noqa: BLE001 - the plugin's failure is the result
        text = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        return {"error": f"raised {type(e).__name__}" + (f": {text}" if text else "") + _where(e, job)}


def _answer(job: dict[str, Any], result: dict[str, Any]) -> bytes:
    try:
        data = json.dumps(result, allow_nan=False).encode("utf-8")
    except (TypeError, ValueError) as e:
        data = json.dumps({"error": f"returned data that is not JSON ({e})"}).encode("utf-8")
    except MemoryError:
        data = b""
    most = int(job["max_answer_bytes"])
    if not data or len(data) > most:
        size = f"{len(data) / (1 << 20):,.1f} MB" if data else "more than its memory limit"
        data = json.dumps({"error": f"answered {size}, more than the {most / (1 << 20):,.0f} MB one knowledge base "
                                    "may answer (rules: plugins.max_answer_mb); none of its findings are kept"}
                          ).encode("utf-8")
    return data


def _work(job_spec: str, result_fd: int) -> None:
    """The worker: read the job, limit memory, run it, write the answer to the pipe, end."""
    warnings.simplefilter("ignore")
    with read_only(job_spec) as data:
        job = pickle.loads(data)
    _limit_memory(float(job["memory_mb"]))
    sys.path[:] = job["sys_path"]
    data = _answer(job, _run_job(job))
    with contextlib.suppress(OSError), os.fdopen(result_fd, "wb") as out:
        out.write(data)  # past the parent's cap it closes the pipe: EPIPE
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # threads the plugin left running must not keep this process alive


# ---------------------------------------------------------------------------------------------------------
# the keeper: ends everything below it
# ---------------------------------------------------------------------------------------------------------
def _prctl(option: int, value: int) -> bool:
    """Linux ``prctl(option, value)``; False where there is none."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        import ctypes

        libc = ctypes.CDLL(None, use_errno=True)
        return bool(libc.prctl(option, value, 0, 0, 0) == 0)
    except (OSError, AttributeError):  # pragma: no cover - no libc prctl
        return False


class _Stop(Exception):
    """SIGTERM (advisor's time limit, Ctrl-C or exit; or advisor died), SIGINT or SIGHUP reached the keeper."""


def _stop(signum: int, frame: Any) -> None:
    raise _Stop


def _children() -> list[int]:
    """This process's live children (after the worker ends: the processes re-parented to the keeper)."""
    me = os.getpid()
    try:
        with open(f"/proc/{me}/task/{me}/children", encoding="ascii") as fh:
            return [int(p) for p in fh.read().split()]
    except OSError:
        pass
    found = []
    with contextlib.suppress(OSError):
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(OSError), open(f"/proc/{entry}/stat", "rb") as fh:
                    if int(fh.read().rsplit(b")", 1)[1].split()[1]) == me:
                        found.append(int(entry))
    return found


def _sweep() -> None:
    """Kill and reap every process below the keeper, until there is none (or SWEEP_SECONDS passed)."""
    mine = os.getpgrp()
    deadline = time.monotonic() + SWEEP_SECONDS
    while time.monotonic() < deadline:
        for pid in _children():
            with contextlib.suppress(OSError):
                group = os.getpgid(pid)
                if group != mine:
                    os.killpg(group, signal.SIGKILL)
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        try:
            while os.waitpid(-1, os.WNOHANG)[0]:
                pass
        except ChildProcessError:
            return  # nothing left below
        time.sleep(0.005)


def _exit_code(status: int) -> int:
    if os.WIFSIGNALED(status):
        return 128 + os.WTERMSIG(status)
    return os.WEXITSTATUS(status) if os.WIFEXITED(status) else 1


def main(argv: list[str]) -> None:
    parent, job_spec, result_fd = int(argv[1]), argv[2], int(argv[3])
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, _stop)
    _prctl(_PR_SET_CHILD_SUBREAPER, 1)
    _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
    if os.getppid() != parent:
        os._exit(EXIT_ORPHANED)  # advisor ended before the keeper could ask to follow it
    keeper = os.getpid()
    worker = os.fork()
    if worker == 0:
        for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(signum, signal.SIG_DFL)
        with contextlib.suppress(OSError):
            os.setpgid(0, 0)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != keeper:
            os._exit(EXIT_ORPHANED)
        _work(job_spec, result_fd)
    with contextlib.suppress(OSError):
        os.setpgid(worker, worker)  # as the worker does: whichever runs first
    os.close(result_fd)
    with contextlib.suppress(_Stop):
        os.waitid(os.P_PID, worker, os.WEXITED | os.WNOWAIT)  # ended, not reaped: its pid still names its group
    for signum in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)  # the sweep runs to its end
    with contextlib.suppress(OSError):
        os.killpg(worker, signal.SIGKILL)  # the worker, if still running, and what it started in its group
    with contextlib.suppress(OSError):
        os.kill(worker, signal.SIGKILL)
    status = None
    with contextlib.suppress(ChildProcessError):
        _, status = os.waitpid(worker, 0)
    _sweep()  # what escaped the group (setsid) and was re-parented here
    os._exit(_exit_code(status) if status is not None else 128 + signal.SIGKILL)


if __name__ == "__main__":
    main(sys.argv)
