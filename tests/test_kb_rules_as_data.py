"""Rules strictly as data for the host-side and time knowledge bases (issue 15.1-15.2): every key of their rules
files is required by the schema, every rule is declared beside its check with a role, its thresholds name keys of
the rules file, and its prose cites values only as placeholders that render to the effective values (a user
override changes the text)."""

from __future__ import annotations

import json
import re
from dataclasses import asdict

import pytest
import yaml

from advisor.config.loader import builtin_rules_dir
from advisor.kb import ROLES, KnowledgeBase
from advisor.knowledge_bases.communication import CommunicationKB
from advisor.knowledge_bases.environment import EnvironmentKB
from advisor.knowledge_bases.host_inference import HostInferenceKB
from advisor.knowledge_bases.memory import MemoryKB
from advisor.knowledge_bases.memory_bound import MemoryBoundKB
from advisor.knowledge_bases.overall import OverallKB
from advisor.knowledge_bases.precision import PrecisionKB
from advisor.knowledge_bases.schedule import ScheduleKB

KBS: tuple[type[KnowledgeBase], ...] = (OverallKB, ScheduleKB, EnvironmentKB, MemoryKB, CommunicationKB,
                                        HostInferenceKB, PrecisionKB, MemoryBoundKB)
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


def test_no_code_defaults_or_confidence_literals() -> None:
    """Values come from the rules files: no ``confidence=0.x`` literal and no ``rules.get(key, default)`` in these
    modules (the rules dicts are read by key, the schema guarantees the key)."""
    import inspect

    for kb in KBS:
        source = inspect.getsource(inspect.getmodule(kb))
        assert not re.search(r"confidence\s*=\s*0\.\d", source), kb.id
        assert not re.search(r"\b(ctx\.rules|rules|r|cfg|cr|sp|bc|ba|bounds|levels)\.get\(", source), kb.id
