"""``advisor explain RULE | KB_ID | score`` and ``advisor kb list``, with a test plugin registered in place of the
installed entry points."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from click.testing import CliRunner

from advisor import hookimpl
from advisor.cli import main
from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc
from advisor.pipeline.score import FORMULA

SCHEMA = {"type": "object", "additionalProperties": False,
          "properties": {"max_idle_us": {"type": "number", "exclusiveMinimum": 0},
                         "severity": {"type": "object", "properties": {"major": {"type": "number"},
                                                                       "minor": {"type": "number"}}}}}


class IdleGaps(KnowledgeBase):
    """Idle gaps between device tasks."""

    id = "idle-gaps"
    title = "Device idle gaps"
    version = "0.3.0"
    requires = ("ops",)
    rules_file = "idle-gaps"
    rules = (
        RuleDoc(id="idle-gaps.long-gap", title="Long idle gaps between tasks",
                what="Finds gaps longer than max_idle_us between consecutive device tasks.",
                why="The device waits for the host: nothing runs during a gap.",
                how_to_fix="Enable the task queue, or capture the step as a graph.",
                thresholds=("max_idle_us", "severity"), needs=("ops",),
                example="A 900 us gap between two MatMul calls."),
        RuleDoc(id="idle-gaps.count", title="Many small gaps", what="Counts gaps.", why="They add up.",
                how_to_fix="Fuse small ops.", thresholds=("not_in_file",)),
    )

    def analyze(self, ctx: AnalysisContext) -> list[Finding]:
        return []


class OldApi(IdleGaps):
    id = "old-api"
    api_version = "0"
    rules = ()


@pytest.fixture()
def plugin_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    rules_dir = tmp_path / "plugin_rules"
    (rules_dir / "schema").mkdir(parents=True)
    (rules_dir / "idle-gaps.yaml").write_text("max_idle_us: 500\nseverity: {major: 0.05, minor: 0.01}\n",
                                              encoding="utf-8")
    (rules_dir / "schema" / "idle-gaps.schema.json").write_text(json.dumps(SCHEMA), encoding="utf-8")

    @hookimpl
    def advisor_knowledge_bases() -> list[type]:
        return [IdleGaps, OldApi]

    @hookimpl
    def advisor_rules_dirs() -> list[str]:
        return [str(rules_dir)]

    def fake_find_plugins(entry_points: bool = True) -> engine.Discovery:
        found = real(entry_points=False)
        found.register(SimpleNamespace(advisor_knowledge_bases=advisor_knowledge_bases,
                                       advisor_rules_dirs=advisor_rules_dirs), name="idle-gaps")
        found.errors["broken-plugin"] = "cannot import broken_mod (ModuleNotFoundError: nope)"
        found.packages["broken-plugin"] = ("broken-dist", "9.9")
        return found

    real = engine.find_plugins
    monkeypatch.setattr(engine, "find_plugins", fake_find_plugins)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def invoke(*args: str) -> tuple[int, str]:
    res = CliRunner().invoke(main, list(args))
    return res.exit_code, res.output


def test_explain_rule_prints_docs_and_effective_thresholds_with_sources(plugin_env: Path) -> None:
    override = plugin_env / "my.yaml"
    override.write_text("rules:\n  idle-gaps:\n    max_idle_us: 250\n", encoding="utf-8")
    code, out = invoke("explain", "idle-gaps.long-gap", "--rules", str(override))
    assert code == 0, out
    assert out.startswith("idle-gaps.long-gap: Long idle gaps between tasks")
    for heading, text in [("What it does", "Finds gaps longer than max_idle_us"),
                          ("Why it matters", "The device waits for the host"),
                          ("How to fix it", "Enable the task queue"), ("Data it needs", "ops"),
                          ("Example", "A 900 us gap")]:
        assert heading in out and text in out
    lines = out.splitlines()
    assert any(ln.strip().startswith("max_idle_us: 250") and ln.endswith("# my.yaml") for ln in lines)
    assert any(ln.strip().startswith("major: 0.05") and ln.endswith("# default") for ln in lines)


def test_explain_rule_json_and_missing_threshold(plugin_env: Path) -> None:
    code, out = invoke("explain", "idle-gaps.count", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert data["topic"] == "rule" and data["knowledge_base"]["id"] == "idle-gaps"
    assert data["rules"][0]["thresholds"] == [{"key": "not_in_file", "value": None,
                                               "source": "not set in rules file 'idle-gaps'"}]


def test_explain_kb_lists_all_its_rules(plugin_env: Path) -> None:
    code, out = invoke("explain", "idle-gaps")
    assert code == 0
    assert out.startswith("idle-gaps: Device idle gaps")
    assert "idle-gaps.long-gap: Long idle gaps" in out and "idle-gaps.count: Many small gaps" in out
    assert "Idle gaps between device tasks." in out


def test_explain_score_prints_the_formula(plugin_env: Path) -> None:
    code, out = invoke("explain", "score")
    assert code == 0
    assert "score = 100 * (1 - S / T)" in out
    # the docstring's reStructuredText reads as plain text: no ``literal`` marks, no "::" before the formula
    assert "``" not in out and "::" not in out and "Formula (also printed by advisor explain score):" in out
    assert "- T: the analyzed window" in out and "- S: recoverable time" in out
    assert len(out.split()) == len(FORMULA.split())  # the same words


def test_explain_unknown_topic_suggests(plugin_env: Path) -> None:
    code, out = invoke("explain", "idle-gaps.long-gaps")
    assert code == 2
    assert "no rule or knowledge base 'idle-gaps.long-gaps'; did you mean idle-gaps.long-gap" in out


def test_kb_list_shows_version_package_requires_status(plugin_env: Path) -> None:
    code, out = invoke("kb", "list", "--format", "json")
    assert code == 0
    rows = {r["id"]: r for r in json.loads(out)["knowledge_bases"]}
    assert rows["idle-gaps"]["status"] == "ok"
    assert rows["idle-gaps"]["version"] == "0.3.0" and rows["idle-gaps"]["requires"] == ["ops"]
    assert rows["idle-gaps"]["rules"] == ["idle-gaps.long-gap", "idle-gaps.count"]
    assert rows["old-api"]["status"].startswith("failed to load: written for plugin API 0")
    assert rows["broken-plugin"]["status"] == \
        "failed to load: cannot import broken_mod (ModuleNotFoundError: nope)"
    assert rows["broken-plugin"]["package"] == "broken-dist"

    code, out = invoke("kb", "list")
    assert code == 0
    line = next(ln for ln in out.splitlines() if ln.startswith("idle-gaps"))
    assert "0.3.0" in line and line.rstrip().endswith("ok")
    assert any(ln.startswith("broken-plugin") and "broken-dist 9.9" in ln and "failed to load" in ln
               for ln in out.splitlines())
