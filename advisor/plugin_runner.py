"""The child side of ``advisor.isolation``: ``python -m advisor.plugin_runner JOB.pkl RESULT.json``.

A job is pickled by the parent (our own data: never a plugin's); the result is JSON, so nothing the plugin made is
unpickled in the parent. Two kinds of job:

- ``discover``: import one entry point, call its hooks, describe its knowledge-base classes and rules dirs;
- ``analyze``: import it again, find the knowledge base by id, run ``analyze`` on this process's copy of the
  rank's data, and write its findings as plain JSON (evidence bounded in depth, cycles refused).

Whatever the plugin does -- raise, ``sys.exit``, leave threads running -- the result is written and the process
ends with ``os._exit``; what it prints goes to the parent's log file, never to the parent's stdout.
"""

from __future__ import annotations

import dataclasses
import json
import math
import os
import pickle
import sys
import warnings
from pathlib import Path
from typing import Any

from advisor.output import write_atomic

MAX_EVIDENCE_DEPTH = 32


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
    from advisor import engine

    found = engine.find_plugins(entry_points=False)
    engine.load_entry_point(found, job["name"], job["value"])
    infos = engine.discover(found)
    dirs = [str(d) for d in engine.rules_dirs(found)[1:]]
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
    with open(job["snapshot"], "rb") as fh:
        profile, graph, cluster = pickle.load(fh)
    ctx = AnalysisContext(cls.id, profile, graph, job["rules"], job["platform"], cluster=cluster,
                          toolkit_rules=job.get("toolkit_rules") or {})
    produced = list(cls().analyze(ctx) or [])
    try:
        findings = [_finding(f) for f in produced]
    except _Unusable as e:
        return {"error": str(e)}
    return {"findings": findings, "notes": [str(n) for n in ctx.notes]}


def _where(e: BaseException, job: dict[str, Any]) -> str:
    """`` at my_kb/kb.py:42``: the last frame in the plugin's own code, not the library frame that raised."""
    from advisor.plugin_location import where

    return where(e, str(job.get("value", "")).split(":")[0] or None)


def main(argv: list[str]) -> None:
    job_path, result_path = argv[1], argv[2]
    warnings.simplefilter("ignore")
    with open(job_path, "rb") as fh:
        job = pickle.load(fh)
    sys.path[:] = job["sys_path"]
    try:
        result = _discover(job) if job["kind"] == "discover" else _analyze(job)
    except SystemExit as e:
        result = {"error": f"called sys.exit({e.code!r})"}
    except BaseException as e:  # noqa: BLE001 - the plugin's failure is the result
        text = str(e).strip().splitlines()[0][:300] if str(e).strip() else ""
        result = {"error": f"raised {type(e).__name__}" + (f": {text}" if text else "") + _where(e, job)}
    try:
        data = json.dumps(result, allow_nan=False)
    except (TypeError, ValueError) as e:
        data = json.dumps({"error": f"returned data that is not JSON ({e})"})
    write_atomic(Path(result_path), data)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)  # threads the plugin left running must not keep this process alive


if __name__ == "__main__":
    main(sys.argv)
