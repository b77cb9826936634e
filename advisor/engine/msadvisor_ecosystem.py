"""Run MindStudio msadvisor "ecosystem" knowledge bases unchanged, as advisor knowledge bases.

An ecosystem knowledge base is a Python module with ``evaluate(data_path, parameter)`` returning a JSON string::

    {"classType": "0|1", "errorCode": "0|1", "summary": "...",
     "extendResult": [{"type": "0|1|2", "extendTitle": "...", "dataType": [...], "key": [...], "value": [...]}]}

registered in an ``ecosystem.json``::

    {"model_list": [{"model_name": "model",
                     "session_list": [{"python_model_path": "src", "parameter": {"topk": 5}}]}]}

Conventions of those modules (as the published ones use them): ``python_model_path`` is the folder holding
``<model_name>.py`` (a path to the ``.py`` file itself is accepted too), relative to the ``ecosystem.json``
folder; ``parameter`` is handed over as a JSON string (modules call ``json.loads`` on it); ``classType`` is the
scope of the result (``0`` op, ``1`` model); ``errorCode`` ``0`` ("success") means the module has
recommendations and ``1`` ("optimized") that there is nothing to improve; ``extendResult`` ``type`` ``0`` is a
list (``value`` one-dimensional), ``1`` a table (``key`` = column names, ``value`` = rows), ``2`` source details.

Each module runs in a child Python process: legacy modules print to stdout (which would corrupt a JSON report),
some call ``os._exit``, and they import sibling modules by generic names (``model``, ``utils``) that would clash
between knowledge bases in one process. The child is killed when it runs past the knowledge base's time limit.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.findings import SEVERITIES, Finding, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc

NO_ESTIMATE = "legacy knowledge base gives no time estimate"
EXTEND_TYPES = {"0": "list", "1": "table", "2": "details"}
_ERROR_OPTIMIZED = "1"
_OP_NAME_KEY = re.compile(r"^\s*(op|operator|node)[\s_]*name\s*$", re.IGNORECASE)
_TABLE_LIMIT = 50

# The child process: redirect stdout to stderr before importing the module, call evaluate, and write the result
# as JSON on the original stdout. Kept free of advisor imports so it starts fast.
_CHILD = r"""
import importlib.util, inspect, json, os, sys, traceback
request = json.loads(sys.stdin.read())
out = os.fdopen(os.dup(1), "w", encoding="utf-8")
os.dup2(2, 1)
sys.stdout = sys.stderr
module_dir = os.path.dirname(request["file"])
sys.path.insert(0, module_dir)
try:
    spec = importlib.util.spec_from_file_location(request["module"], request["file"])
    module = importlib.util.module_from_spec(spec)
    sys.modules[request["module"]] = module
    spec.loader.exec_module(module)
    fn = getattr(module, "evaluate", None) or getattr(module, "Evaluate", None)
    if fn is None:
        raise AttributeError("the module has no evaluate(data_path, parameter) function")
    try:
        takes = len([p for p in inspect.signature(fn).parameters.values()
                     if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD, p.VAR_POSITIONAL)])
    except (TypeError, ValueError):
        takes = 2
    args = (request["data_path"], request["parameter"])[: max(1, min(2, takes))]
    result = fn(*args)
except BaseException as e:
    traceback.print_exc()
    out.write(json.dumps({"error": type(e).__name__ + ": " + str(e)}))
    out.flush()
    sys.exit(1)
if isinstance(result, bytes):
    result = result.decode("utf-8", "replace")
if result is not None and not isinstance(result, str):
    result = json.dumps(result, default=str)
out.write(json.dumps({"result": result}))
out.flush()
"""


def slug(text: str) -> str:
    """``Compute_bound identific`` -> ``compute-bound-identific`` (kebab-case, for KB ids)."""
    s = re.sub(r"[^a-z0-9]+", "-", str(text).lower()).strip("-")
    return re.sub(r"^[^a-z]+", "", s) or "model"


class LegacyKnowledgeBase(KnowledgeBase):
    """Base of the classes :func:`load_ecosystem` creates: one per ``model_list`` entry."""

    requires: ClassVar[tuple[str, ...]] = ("meta",)
    version: ClassVar[str] = "legacy"
    model_name: ClassVar[str] = ""
    sessions: ClassVar[tuple[tuple[Path, dict[str, Any]], ...]] = ()
    """(module file, parameter) per ``session_list`` entry."""
    ecosystem_file: ClassVar[str] = ""

    def analyze(self, ctx: AnalysisContext) -> Iterator[Finding]:
        data_path = ctx.profile.meta.source
        if not data_path:
            ctx.note("the input has no path to hand to the legacy knowledge base")
            return
        for module_file, parameter in self.sessions:
            result = self._evaluate(module_file, data_path, parameter)
            if result is None:
                ctx.note(f"{module_file.name}: evaluate() returned nothing")
                continue
            yield from convert_result(ctx, self.rules[0].id, result, module_file)

    def _evaluate(self, module_file: Path, data_path: str, parameter: dict[str, Any]) -> dict[str, Any] | None:
        request = {"file": str(module_file), "module": f"advisor_legacy_{slug(self.model_name).replace('-', '_')}",
                   "data_path": str(Path(data_path).resolve()), "parameter": json.dumps(parameter, ensure_ascii=False)}
        limit = max(1.0, self.time_limit_s - 1.0)
        try:
            proc = subprocess.run([sys.executable, "-c", _CHILD], input=json.dumps(request), capture_output=True,
                                  text=True, timeout=limit, cwd=str(module_file.parent))
        except subprocess.TimeoutExpired:
            raise TimeoutError(f"{module_file.name}: evaluate() ran past {limit:g} s") from None
        reply = _last_json_line(proc.stdout)
        printed = _tail(proc.stderr)
        if reply is None:
            raise RuntimeError(f"{module_file.name} exited (code {proc.returncode}) without returning a result"
                               + (f"; it printed: {printed}" if printed else ""))
        if "error" in reply:
            raise RuntimeError(f"{module_file.name}: {reply['error']}")
        text = reply.get("result")
        if text is None or not str(text).strip():
            return None
        try:
            result = safeload.loads_json(str(text), module_file.name)
        except InputError as e:
            raise ValueError(f"{module_file.name}: evaluate() did not return usable JSON ({e.problem})") from None
        if not isinstance(result, dict):
            raise ValueError(f"{module_file.name}: evaluate() returned {type(result).__name__}, not an object")
        return result


def _last_json_line(text: str) -> dict[str, Any] | None:
    text = text.strip()
    if not text:
        return None
    try:
        value = safeload.loads_json(text)
    except InputError:
        return None
    return value if isinstance(value, dict) else None


def _tail(text: str, limit: int = 300) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    joined = " | ".join(lines[-3:])
    return joined[-limit:]


# ---------------------------------------------------------------------------------------------------------
# result conversion
# ---------------------------------------------------------------------------------------------------------
def _cell(value: Any, dtype: str | None) -> Any:
    """Coerce a cell by its declared dataType (``0`` str, ``1`` int, ``2`` double); keep it when that fails."""
    if isinstance(value, (list, dict)):
        return json.dumps(value, ensure_ascii=False)
    try:
        if dtype == "1":
            return int(float(value))
        if dtype == "2":
            return float(value)
    except (TypeError, ValueError):
        return value
    return value


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, (list, tuple)):
        return list(value)
    return [value]


def _section_table(section: dict[str, Any]) -> tuple[dict[str, Any], list[str]]:
    """One extendResult entry as an evidence table, plus the op names it lists (for waivers and scoring)."""
    kind = EXTEND_TYPES.get(str(section.get("type", "0")), "list")
    keys = [str(k) for k in _as_list(section.get("key"))]
    dtypes = [str(t) for t in _as_list(section.get("dataType"))]
    values = section.get("value")
    ops: list[str] = []
    if kind == "table":
        rows = [r if isinstance(r, (list, tuple)) else [r] for r in _as_list(values)]
        width = max([len(keys), *(len(r) for r in rows)]) if rows or keys else 1
        columns = keys + [f"column {i + 1}" for i in range(len(keys), width)]
        cells = [[_cell(v, dtypes[i] if i < len(dtypes) else None) for i, v in enumerate(r)] for r in rows]
        op_cols = [i for i, k in enumerate(columns) if _OP_NAME_KEY.match(k)]
        if op_cols:
            ops = [str(r[op_cols[0]]) for r in rows if len(r) > op_cols[0] and r[op_cols[0]] not in (None, "")]
        return table(columns, cells, limit=_TABLE_LIMIT), ops
    if isinstance(values, dict):
        return table(["key", "value"], [[str(k), _cell(v, None)] for k, v in values.items()], limit=_TABLE_LIMIT), ops
    column = keys[0] if len(keys) == 1 else ("detail" if kind == "details" else "item")
    dtype = dtypes[0] if dtypes else None
    return table([column], [[_cell(v, dtype)] for v in _as_list(values)], limit=_TABLE_LIMIT), ops


def convert_result(ctx: AnalysisContext, rule: str, result: dict[str, Any], module_file: Path) -> list[Finding]:
    """Findings from one legacy result: one per ``extendResult`` section, or one for the summary alone.

    ``errorCode`` "1" (well optimized) gives no finding, only a note. A result that is not well optimized gives
    findings of severity ``major`` (or ``errorCode`` itself when it names a severity), with a saving of 0.
    """
    summary = str(result.get("summary") or "").strip()
    code = str(result.get("errorCode", "0")).strip()
    if code == _ERROR_OPTIMIZED:
        ctx.note(f"{module_file.name}: {summary or 'nothing to optimize'}")
        return []
    severity = code.lower() if code.lower() in SEVERITIES else "major"
    scope = {"0": "op", "1": "model"}.get(str(result.get("classType", "")).strip(), "unknown")
    sections = [s for s in _as_list(result.get("extendResult")) if isinstance(s, dict)]
    base_evidence: dict[str, Any] = {"summary": summary, "scope": scope, "error_code": code,
                                     "module": str(module_file)}
    findings: list[Finding] = []
    for section in sections:
        ev_table, ops = _section_table(section)
        title = str(section.get("extendTitle") or summary or "legacy knowledge base result").strip()
        if not ev_table["rows"] and not summary:
            continue
        evidence = {**base_evidence, "kind": EXTEND_TYPES.get(str(section.get("type", "0")), "list"),
                    "table": ev_table}
        findings.append(ctx.finding(
            rule=rule, title=title, severity=severity, ops=list(dict.fromkeys(ops)), evidence=evidence,
            estimated_saving_us=0.0, basis=NO_ESTIMATE,
            recommendation=_recommendation(summary, title, ev_table), confidence=0.5,
        ))
    if not findings and summary:
        findings.append(ctx.finding(
            rule=rule, title=summary, severity=severity, ops=[], evidence=base_evidence,
            estimated_saving_us=0.0, basis=NO_ESTIMATE, recommendation=summary, confidence=0.5,
        ))
    return findings


def _recommendation(summary: str, title: str, ev_table: dict[str, Any]) -> str:
    parts = [p for p in (summary, title if title != summary else "") if p]
    text = ". ".join(p.rstrip(".") for p in parts)
    if ev_table["columns"] and ev_table["columns"][0] in ("item", "detail") and ev_table["rows"]:
        items = "; ".join(str(r[0]) for r in ev_table["rows"][:5])
        text = f"{text}: {items}" if text else items
    return text or "see the evidence table"


# ---------------------------------------------------------------------------------------------------------
# ecosystem.json
# ---------------------------------------------------------------------------------------------------------
def _module_file(base: Path, model_name: str, model_path: str, ecosystem: Path) -> Path:
    p = Path(model_path)
    p = p if p.is_absolute() else base / p
    if p.is_dir():
        p = p / f"{model_name}.py"
    if p.suffix != ".py":
        p = p.with_suffix(".py") if p.with_suffix(".py").is_file() else p
    if not p.is_file():
        raise InputError(ecosystem, f"model '{model_name}': python_model_path '{model_path}' does not lead to a "
                                    f"Python file (looked for {p})")
    return p.resolve()


def load_ecosystem(path: Path) -> list[type[KnowledgeBase]]:
    """One knowledge-base class per ``model_list`` entry of an ``ecosystem.json`` (id ``legacy-<model name>``).

    The file and the module paths are checked here, so a wrong path is reported before any analysis starts.
    """
    path = Path(path)
    data = safeload.load_json(path)
    models = data.get("model_list") if isinstance(data, dict) else None
    if not isinstance(models, list) or not models:
        raise InputError(path, "no 'model_list' array: not an msadvisor ecosystem.json")
    classes: list[type[KnowledgeBase]] = []
    seen: set[str] = set()
    for i, model in enumerate(models):
        if not isinstance(model, dict) or not str(model.get("model_name") or "").strip():
            raise InputError(path, f"model_list[{i}] has no model_name")
        name = str(model["model_name"]).strip()
        sessions_in = model.get("session_list") or [{}]
        if not isinstance(sessions_in, list):
            raise InputError(path, f"model '{name}': session_list is not an array")
        sessions: list[tuple[Path, dict[str, Any]]] = []
        for j, session in enumerate(sessions_in):
            if not isinstance(session, dict):
                raise InputError(path, f"model '{name}': session_list[{j}] is not an object")
            parameter = session.get("parameter") or {}
            if isinstance(parameter, str):
                try:
                    parameter = safeload.loads_json(parameter, path) if parameter.strip() else {}
                except InputError as e:
                    raise InputError(path, f"model '{name}': parameter is not a JSON object ({e.problem})") from None
            if not isinstance(parameter, dict):
                raise InputError(path, f"model '{name}': parameter is not an object")
            module = _module_file(path.parent, name, str(session.get("python_model_path") or "."), path)
            sessions.append((module, parameter))
        kb_id = f"legacy-{slug(name)}"
        if kb_id in seen:
            raise InputError(path, f"two models give the knowledge base id '{kb_id}'")
        seen.add(kb_id)
        rule = RuleDoc(
            id=f"{kb_id}.result",
            title=f"Result of the msadvisor knowledge base '{name}'",
            what=f"Runs the MindStudio msadvisor ecosystem knowledge base '{name}' ({sessions[0][0]}) on the input "
                 "directory and reports each recommendation it returns.",
            why="Knowledge bases written for msadvisor keep working without being rewritten; their findings are "
                "ranked and waived like any other.",
            how_to_fix="Follow the recommendation and the table of each finding. The legacy module gives no time "
                       "estimate, so these findings do not lower the score.",
            needs=("meta",),
        )
        attrs = {"id": kb_id, "title": f"msadvisor knowledge base {name}", "model_name": name,
                 "sessions": tuple(sessions), "ecosystem_file": str(path.resolve()), "rules": (rule,),
                 "__module__": __name__, "__doc__": f"Legacy msadvisor knowledge base '{name}' from {path}."}
        classes.append(type(f"Legacy_{slug(name).replace('-', '_')}", (LegacyKnowledgeBase,), attrs))
    return classes
