"""``advisor rules list`` (every rule of core knowledge bases and plugins), ``advisor --version`` (the plugin API)
and the exit codes ``advisor analyze --help`` lists (issue 31, item 7)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING

import pytest

from advisor import hookimpl
from advisor.engine import kb_engine as engine
from advisor.hookspecs import API_VERSION
from tests.test_explain import SCHEMA, IdleGaps

if TYPE_CHECKING:
    from tests.conftest import CliFixture

EXAMPLE_REPORT = Path(__file__).resolve().parents[1] / "reports" / "example.json"


@pytest.fixture()
def with_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The installed knowledge bases plus a plugin, ``idle-gaps`` (distribution ``idle-gaps-kb``), whose rules
    file sets its own severity levels (no ``critical``)."""
    rules_dir = tmp_path / "plugin_rules"
    (rules_dir / "schema").mkdir(parents=True)
    (rules_dir / "idle-gaps.yaml").write_text("max_idle_us: 500\nseverity: {major: 0.05, minor: 0.01}\n")
    (rules_dir / "schema" / "idle-gaps.schema.json").write_text(json.dumps(SCHEMA))

    @hookimpl
    def advisor_knowledge_bases() -> list[type]:
        return [IdleGaps]

    @hookimpl
    def advisor_rules_dirs() -> list[str]:
        return [str(rules_dir)]

    real = engine.find_plugins

    def find_plugins(entry_points: bool = True) -> engine.Discovery:
        found = real(entry_points)
        found.register(SimpleNamespace(advisor_knowledge_bases=advisor_knowledge_bases,
                                       advisor_rules_dirs=advisor_rules_dirs), name="idle-gaps")
        found.packages["idle-gaps"] = ("idle-gaps-kb", "0.3.0")
        return found

    monkeypatch.setattr(engine, "find_plugins", find_plugins)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def test_rules_list_has_every_rule_of_core_and_plugins(cli: CliFixture, with_plugin: Path) -> None:
    rc, out, err = cli("rules", "list", "--format", "json")
    assert rc == 0 and err == ""
    rows = {r["id"]: r for r in json.loads(out)["rules"]}
    declared = {rule: kb["id"] for kb in json.loads(EXAMPLE_REPORT.read_text())["knowledge_bases"]
                for rule in kb["rules"]}  # the example report's knowledge bases and the rules they declare
    assert declared and {rule: rows[rule]["kb"] for rule in declared} == declared
    assert all(rows[rule]["source"] == "core" for rule in declared)
    assert set(rows) == set(declared) | {"idle-gaps.long-gap", "idle-gaps.count"}
    gap = rows["idle-gaps.long-gap"]
    assert gap["source"] == "plugin" and gap["package"] == "idle-gaps-kb" and gap["kb"] == "idle-gaps"
    assert gap["summary"] == "Long idle gaps between tasks"
    assert gap["severity"] == {"min": "info", "max": "major", "levels": {"major": 0.05, "minor": 0.01},
                               "levels_from": "idle-gaps"}

    rc, text, _ = cli("rules", "list")
    lines = {line.split()[0]: line for line in text.splitlines() if line.strip()}
    assert rc == 0 and f"{len(rows)} rules." in text
    assert "idle-gaps (idle-gaps-kb)" in lines["idle-gaps.long-gap"] and "info..major" in lines["idle-gaps.long-gap"]
    for rule, row in rows.items():
        assert row["summary"] in lines[rule]


def test_rules_list_severity_follows_rules_overrides(cli: CliFixture, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    override = tmp_path / "r.yaml"
    override.write_text("rules:\n  transdata:\n    severity: {critical: 0.5, major: 0.2, minor: 0.05}\n")
    rc, out, err = cli("rules", "list", "--format", "json", "--rules", str(override))
    assert rc == 0, err
    transdata = [r for r in json.loads(out)["rules"] if r["kb"] == "transdata"]
    assert transdata and all(r["severity"]["levels"] == {"critical": 0.5, "major": 0.2, "minor": 0.05}
                             for r in transdata)


def test_a_level_above_the_whole_window_is_never_reached() -> None:
    from advisor.cli.rules_list import severity_range

    assert severity_range({"critical": 1.5, "major": 0.1, "minor": 0.02})["max"] == "major"
    assert severity_range({"critical": 1.0, "major": 0.1, "minor": 0.02})["max"] == "critical"
    assert severity_range(None) == {"min": "info", "max": "critical", "levels": {}}


def test_version_names_the_plugin_api(cli: CliFixture) -> None:
    rc, out, _ = cli("--version")
    assert rc == 0 and f"plugin API {API_VERSION}" in out


def test_analyze_help_lists_the_exit_codes(cli: CliFixture) -> None:
    from advisor.cli import EXIT_INTERNAL_ERROR
    from advisor.pipeline import gate

    rc, out, _ = cli("analyze", "--help")
    text = out[out.index("Exit codes"):out.index("Options:")]
    codes = {int(line.split()[0]) for line in text.splitlines()[1:] if line.strip()[:1].isdigit()}
    assert rc == 0 and codes == {0, gate.EXIT_GATE_FAILED, 2, gate.EXIT_INCOMPLETE, EXIT_INTERNAL_ERROR}
    assert "--fail-under" in text
