"""Rules strictly as data, for every knowledge base advisor ships (pyproject.toml's ``advisor.knowledge_bases`` entry
points): every key of their rules files is required by the schema, every rule is declared beside its check with a
role, its thresholds name keys of the rules file, its prose cites values only as placeholders that render to the
effective values (a user override changes the text), no rule value is read with a code fallback, and changing a
threshold in the rules changes what the knowledge base decides on a fixture."""

from __future__ import annotations

import ast
import importlib
import inspect
import json
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import pytest
import tomllib
import yaml

from advisor.config.loader import builtin_rules_dir
from advisor.examples import example_graph, example_profile
from advisor.kb import ROLES, KnowledgeBase
from advisor.knowledge_bases.overall import OverallKB
from advisor.model import Profile
from advisor.pipeline.analysis import AnalysisOptions, run_analysis
from advisor.testing import run_kb
from tests.test_kb_environment import make as environment_profile
from tests.test_kb_memory import make as memory_profile

REPO = Path(__file__).resolve().parents[1]


def _shipped() -> tuple[type[KnowledgeBase], ...]:
    """Every knowledge base of pyproject.toml's entry points, through the module's own hook."""
    eps = tomllib.loads((REPO / "pyproject.toml").read_text("utf-8"))["project"]["entry-points"]
    return tuple(kb for module in eps["advisor.knowledge_bases"].values()
                 for kb in importlib.import_module(module).advisor_knowledge_bases())


KBS: tuple[type[KnowledgeBase], ...] = _shipped()

PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*(?:\.[A-Za-z0-9_*]+)*)\}")
PROSE = ("title", "what", "why", "how_to_fix", "example")


def _values(kb: type[KnowledgeBase]) -> dict:
    return yaml.safe_load((builtin_rules_dir() / f"{kb.rules_file}.yaml").read_text(encoding="utf-8"))


def _schema(kb: type[KnowledgeBase]) -> dict:
    return json.loads((builtin_rules_dir() / "schema" / f"{kb.rules_file}.schema.json").read_text(encoding="utf-8"))


@pytest.mark.parametrize("kb", KBS, ids=[k.id for k in KBS])
def test_the_schema_requires_every_key_of_the_rules_file(kb: type[KnowledgeBase]) -> None:
    assert set(_schema(kb)["required"]) == set(_values(kb))


@pytest.mark.parametrize("kb", KBS, ids=[k.id for k in KBS])
def test_rules_are_declared_beside_their_checks(kb: type[KnowledgeBase]) -> None:
    assert kb.checks, "no @rule-decorated check"
    declared = [doc.id for check in kb.checks for doc in check.__advisor_rules__]
    assert declared == [r.id for r in kb.rules] and len(set(declared)) == len(declared)
    assert all(r.id.startswith(f"{kb.id}.") for r in kb.rules)


@pytest.mark.parametrize("kb", KBS, ids=[k.id for k in KBS])
def test_roles_thresholds_and_placeholders(kb: type[KnowledgeBase]) -> None:
    values = _values(kb)
    for r in kb.rules:
        assert r.role in ROLES, r.id
        assert all(t.split(".")[0] in values for t in r.thresholds), (r.id, r.thresholds)
        rendered = r.render(values)
        for field in PROSE:
            left = PLACEHOLDER.findall(getattr(rendered, field))
            assert not left, f"{r.id}.{field}: unresolved {left}"
        # every placeholder names a key this rule declares among its thresholds
        for field in PROSE:
            for key in PLACEHOLDER.findall(getattr(r, field)):
                assert key.split(".")[0] in r.thresholds, f"{r.id}: {{{key}}} is not one of its thresholds"


def test_an_override_changes_the_rendered_prose() -> None:
    values = _values(OverallKB)
    values["free_time"]["target_share"] = 0.25
    doc = OverallKB.rule("overall.free-time").render(values)
    assert "above 0.25 of the window" in doc.what and "{free_time.target_share}" not in json.dumps(asdict(doc))


RULE_PARAMS = {"rules", "cfg", "cr", "conf", "config", "thresholds", "levels", "bounds"}
"""Parameter names that hold a rules mapping (or part of one) in the knowledge bases."""


def _walk(node: ast.AST) -> Iterator[ast.AST]:
    """``ast.walk`` that does not enter nested functions or classes (each is checked on its own)."""
    todo = [node]
    while todo:
        n = todo.pop()
        yield n
        todo.extend(c for c in ast.iter_child_nodes(n)
                    if not isinstance(c, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)))


def _of_rules(node: ast.AST, bound: set[str]) -> bool:
    """``node`` is a value of the rules: ``ctx.rules`` / ``toolkit_rules``, a name bound to one, or a key, ``.get``
    or conversion of one (possibly before an ``or``)."""
    if isinstance(node, ast.Attribute):
        return node.attr in ("rules", "toolkit_rules")
    if isinstance(node, ast.Name):
        return node.id in bound
    if isinstance(node, ast.Subscript):
        return _of_rules(node.value, bound)
    if isinstance(node, ast.BoolOp):
        return _of_rules(node.values[0], bound)
    if isinstance(node, ast.Call) and node.args or isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
        if isinstance(node.func, ast.Attribute) and node.func.attr in ("get", "items", "values"):
            return _of_rules(node.func.value, bound)
        if isinstance(node.func, ast.Name) and node.func.id in ("float", "int", "dict", "list", "tuple", "str"):
            return _of_rules(node.args[0], bound)
    return False


def _number(node: ast.AST) -> bool:
    return isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool)


def code_fallbacks(source: str) -> list[str]:
    """Every place a rule value is read with a default in code: ``cfg.get(key, 0.5)``, ``cfg.get(key) or 3``, or
    any ``ctx.rules.get(...)`` (the schema requires the KB's keys: read them by key). Names bound to a rules value
    are followed through assignments within each function."""
    tree = ast.parse(source)
    found = []
    scopes = [tree, *(n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)))]
    for scope in scopes:
        bound: set[str] = set()
        if not isinstance(scope, ast.Module):
            a = scope.args
            bound = {x.arg for x in [*a.posonlyargs, *a.args, *a.kwonlyargs]
                     if x.arg in RULE_PARAMS or x.arg.endswith(("_rules", "_cfg"))}
        grew = True
        while grew:
            grew = False
            for st in scope.body:
                for n in _walk(st):
                    if isinstance(n, (ast.Assign, ast.AnnAssign)) and n.value is not None and _of_rules(n.value, bound):
                        for target in (n.targets if isinstance(n, ast.Assign) else [n.target]):
                            for name in ast.walk(target):
                                if isinstance(name, ast.Name) and name.id not in bound:
                                    bound.add(name.id)
                                    grew = True
        for st in scope.body:
            for n in _walk(st):
                if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "get" \
                        and _of_rules(n.func.value, bound):
                    direct = isinstance(n.func.value, ast.Attribute) and n.func.value.attr == "rules"
                    if direct or len(n.args) >= 2 and _number(n.args[1]):
                        found.append(f"line {n.lineno}: {ast.unparse(n)}")
                elif isinstance(n, ast.BoolOp) and isinstance(n.op, ast.Or) and _of_rules(n.values[0], bound) \
                        and any(_number(v) for v in n.values[1:]):
                    found.append(f"line {n.lineno}: {ast.unparse(n)}")
    return sorted(set(found))


def test_the_fallback_check_finds_what_it_is_for() -> None:
    src = """
def f(ctx, cfg, other):
    sub = ctx.rules["slow_link"]
    a = sub.get("ratio", 0.8)
    b = float(cfg.get("min_links") or 3)
    c = ctx.rules.get("severity", {})
    d = other.get("count", 0)
    e = sub["ratio"]
"""
    assert code_fallbacks(src) == ["line 4: sub.get('ratio', 0.8)", "line 5: cfg.get('min_links') or 3",
                                   "line 6: ctx.rules.get('severity', {})"]


@pytest.mark.parametrize("kb", KBS, ids=[k.id for k in KBS])
def test_no_rule_value_is_read_with_a_code_fallback(kb: type[KnowledgeBase]) -> None:
    """Values come from the rules files: no ``confidence=0.x`` literal and no default in code for a rule value
    (the schema guarantees the key)."""
    source = inspect.getsource(inspect.getmodule(kb))
    assert not re.search(r"confidence\s*=\s*0\.\d", source), kb.id
    assert code_fallbacks(source) == [], kb.id


def test_the_static_audit_reads_its_confidence_factor_from_the_cost_model_rules() -> None:
    from advisor.pipeline import static_audit

    source = inspect.getsource(static_audit)
    assert 'rules.for_kb("costmodel")["static_confidence_factor"]' in source
    assert code_fallbacks(source) == []


# ---------------------------------------------------------------------------------------------------------
# every threshold is data: changing it in a copy of the rules changes the knowledge base's decision
# ---------------------------------------------------------------------------------------------------------
SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
EXAMPLE = "builtin example"
SEVERE = {"severity": {"critical": 0.011, "major": 0.0105, "minor": 0.01}}
"""A finding worth 1.1 % of the window is critical: a major or minor finding below 15 % becomes more severe."""

DECISIONS: dict[str, tuple[str | Callable[[], Profile], dict[str, Any]]] = {
    "aicpu": (EXAMPLE, {"min_duration_us": 1e9}),
    "aipp-fusion": (EXAMPLE, {"min_saving_us": 1e12}),
    "host-inference": (EXAMPLE, SEVERE),
    "memory-bound": (EXAMPLE, {"min_saving_us": 1e12}),
    "mish-leakyrelu": (EXAMPLE, {"confidence": {"replacement": 0.3, "native": 0.3, "native_assumed": 0.3}}),
    "overall": (EXAMPLE, {"min_bucket_share": 1.0}),
    "precision": (EXAMPLE, {"min_saving_us": 1e12}),
    "roofline": (EXAMPLE, {"min_saving_us": 1e12}),
    "schedule": (EXAMPLE, SEVERE),
    "transdata": (EXAMPLE, SEVERE),
    "ub-fusion": (EXAMPLE, {"min_saving_us": 1e12}),
    "communication": ("Ascend__msinsight/test/data/pytorch/db/level1/rank0_ascend_pt", {"late_peer": {"recoverable": 0.25}}),
    "cluster": ("Ascend__msinsight/test/data/pytorch/text/level1", {"bottleneck": {"min_share": 0.9}}),
    "operator": ("mindspore-ai__mindinsight/tests/utils/resource/run_2/normal_run/profiler",
                 {"block_dim": {"realism": 0.4}}),
    "kernel": ("Ascend__workload_analysis/op_modeling/data/ops/MaxPool/MaxPool_Ascend310_test.csv", SEVERE),
    "memory": (lambda: memory_profile([("AscendCL@aclrtMalloc", i * 1000.0, 600.0) for i in range(30)],
                                      free_us=50_000.0), {"min_total_us": 1e12}),
    "environment": (lambda: environment_profile({"ASCEND_LAUNCH_BLOCKING": "1"}),
                    {"variables": {"ASCEND_LAUNCH_BLOCKING": {"free_time_fraction": 0.1}}}),
}


def _flat(findings: Iterable[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for f in findings:
        yield f
        yield from _flat(f.get("symptoms") or [])


def _decisions_of(kb: type[KnowledgeBase], override: dict[str, Any] | None, tmp: Path) -> list[tuple[Any, ...]]:
    """What the knowledge base decided on its fixture, alone: each finding's rule, severity, ops, saving, confidence."""
    source, _ = DECISIONS[kb.id]
    if callable(source):
        found, _notes = run_kb(kb, source(), override=override)
        return sorted((f.rule, f.severity, tuple(f.ops), round(f.estimated_saving_us, 3), f.confidence)
                      for f in found)
    neutral = tmp / "pyproject.toml"
    neutral.write_text("", encoding="utf-8")
    rules_file = None
    if override is not None:
        rules_file = tmp / "override.yaml"
        rules_file.write_text(yaml.safe_dump({"rules": {kb.rules_file: override}}), encoding="utf-8")
    options = AnalysisOptions(only=[kb.id], pyproject=neutral, rules_file=rules_file)
    if source == EXAMPLE:
        result = run_analysis(example_profile(), example_graph(), options, workers=1)
    else:
        result = run_analysis(SAMPLES / source, options=options, workers=1)
    return sorted((f["rule"], f["severity"], tuple(f["ops"]), f["estimated_saving_us"], f.get("confidence"))
                  for f in _flat(result.report["findings"]) if f["kb"] == kb.id)


def test_every_knowledge_base_has_a_decision_fixture() -> None:
    assert set(DECISIONS) == {kb.id for kb in KBS}


@pytest.mark.parametrize("kb", KBS, ids=[k.id for k in KBS])
def test_a_threshold_changed_in_the_rules_changes_the_decision(kb: type[KnowledgeBase], tmp_path: Path) -> None:
    source, override = DECISIONS[kb.id]
    if isinstance(source, str) and source != EXAMPLE and not (SAMPLES / source).exists():
        pytest.skip("../shared/samples not available")
    default = _decisions_of(kb, None, tmp_path)
    assert default, f"{kb.id}: no finding on its fixture"
    assert _decisions_of(kb, override, tmp_path) != default, f"{kb.id}: {override} changed nothing"


def test_the_toolkit_reads_rule_values_without_code_fallbacks() -> None:
    """The shared toolkit the knowledge bases call (advisor.toolkit) reads the values it is given by key too."""
    import pkgutil

    import advisor.toolkit

    found = {m.name: code_fallbacks(inspect.getsource(importlib.import_module(f"advisor.toolkit.{m.name}")))
             for m in pkgutil.iter_modules(advisor.toolkit.__path__)}
    assert {k: v for k, v in found.items() if v} == {}
