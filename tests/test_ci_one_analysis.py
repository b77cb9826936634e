"""CI in one analysis: gate and JUnit from a saved report, the gate's settings in ``[tool.advisor]``, the
comparison as JUnit, and the knowledge bases that produced a report (issue 31, item 3)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from advisor.common.errors import RulesError
from advisor.config.loader import builtin_rules_dir, load_effective_rules
from advisor.report import render
from advisor.report.json_report import validate
from tests._report_sample import sample_report

if TYPE_CHECKING:
    from tests.conftest import CliFixture


def _complete(report: dict[str, Any]) -> dict[str, Any]:
    """The sample report as if no knowledge base had failed (the sample has one that did)."""
    for kb in report["knowledge_bases"]:
        if kb["status"] == "failed":
            kb.update(status="ok", reason="")
    return report


@pytest.fixture
def saved(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, float]:
    """A complete saved report and its score; the working directory is a fresh one without pyproject.toml."""
    report = _complete(sample_report())
    path = tmp_path / "saved.json"
    path.write_text(render(report, "json"))
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)
    return path, float(report["score"])


def _score_case(xml: str) -> ET.Element:
    root = ET.fromstring(xml)
    return next(c for c in root.iter("testcase") if c.get("name") == "score")


def test_report_gates_a_saved_report_as_analyze_would(cli: CliFixture, saved: tuple[Path, float]) -> None:
    path, score = saved
    assert 0 < score < 100
    rc, out, err = cli("report", str(path), "--format", "junit", "--fail-under", f"{score + 1:.1f}")
    assert rc == 1 and f"score {score:.1f} is below --fail-under {score + 1:g}" in err
    assert _score_case(out).find("failure") is not None
    rc, out, err = cli("report", str(path), "--format", "junit", "--fail-under", f"{score - 1:.1f}")
    assert rc == 0 and err == "" and _score_case(out).find("failure") is None
    rc, out, _ = cli("report", str(path), "--format", "markdown")
    assert rc == 0 and out.strip()


def test_report_of_an_incomplete_analysis_exits_3(cli: CliFixture, tmp_path: Path) -> None:
    report = sample_report()  # one knowledge base failed
    failed = [k["id"] for k in report["knowledge_bases"] if k["status"] == "failed"]
    path = tmp_path / "saved.json"
    path.write_text(render(report, "json"))
    rc, _, err = cli("report", str(path), "--format", "junit", "--fail-under", "0")
    assert failed and rc == 3 and f"knowledge base(s) failed: {failed[0]}" in err


def test_pyproject_carries_the_gate(cli: CliFixture, saved: tuple[Path, float]) -> None:
    path, score = saved
    Path("pyproject.toml").write_text(f'[tool.advisor]\nfail_under = {score + 1:.1f}\nfail_on = "critical"\n')
    rc, out, err = cli("report", str(path), "--format", "junit")
    assert rc == 1 and "below --fail-under" in err
    root = ET.fromstring(out)
    # fail_on = critical: only critical findings fail their rule's test case
    report = json.loads(path.read_text())
    critical_rules = {f["rule"] for f in report["findings"] if f["severity"] == "critical"}
    failing = {c.get("name") for c in root.iter("testcase") if c.find("failure") is not None} - {"score"}
    assert failing == critical_rules
    assert cli("report", str(path), "--format", "junit", "--fail-under", "0")[0] == 0  # the command line wins


def test_pyproject_gate_values_are_validated(cli: CliFixture, saved: tuple[Path, float]) -> None:
    path, _ = saved
    Path("pyproject.toml").write_text("[tool.advisor]\nfail_under = 120\n")
    rc, out, err = cli("report", str(path), "--format", "junit")
    assert rc == 2 and out == "" and err.count("\n") == 1
    assert "pyproject.toml" in err and "tool.advisor.fail_under" in err


def test_rules_loading_accepts_gate_keys_in_pyproject_only(tmp_path: Path) -> None:
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.advisor]\nfail_under = 75\nmax_regression = 1.5\n"
                         "[tool.advisor.rules.transdata]\nmax_count = 4\n")
    eff = load_effective_rules([builtin_rules_dir()], pyproject=pyproject)
    assert eff.values["transdata"]["max_count"] == 4
    rules_file = tmp_path / "rules.yaml"
    rules_file.write_text("fail_under: 75\n")
    with pytest.raises(RulesError, match="unknown key"):
        load_effective_rules([builtin_rules_dir()], override_file=rules_file)


@pytest.fixture
def pair(tmp_path: Path) -> tuple[Path, Path]:
    base, slower = tmp_path / "base.json", tmp_path / "slower.json"
    base.write_text(render(sample_report(), "json"))
    slower.write_text(render(sample_report(scale=1.1, n_transdata=6, with_mish=False), "json"))
    return base, slower


def test_compare_writes_junit(cli: CliFixture, pair: tuple[Path, Path]) -> None:
    base, slower = pair
    rc, out, _ = cli("compare", str(base), str(slower), "--format", "junit")
    root = ET.fromstring(out)
    cases = {c.get("name"): c for c in root.iter("testcase")}
    assert rc == 1 and set(cases) == {"device_time", "score_drop", "new_findings"}
    assert "device time +10.03 %" in cases["device_time"].find("failure").get("message")
    assert cases["score_drop"].find("skipped") is not None and root.get("failures") == "1"
    cmp = json.loads(cli("compare", str(base), str(slower), "--format", "json")[1])
    listed = cases["new_findings"].find("system-out").text
    assert all(f["title"] in listed for f in cmp["findings"]["new"])
    assert listed == "none" or cmp["findings"]["new"]

    rc, out, _ = cli("compare", str(base), str(base), "--format", "junit", "--max-score-drop", "0")
    root = ET.fromstring(out)
    assert rc == 0 and root.get("failures") == "0" and root.get("skipped") == "0"


def test_compare_limits_from_pyproject(cli: CliFixture, pair: tuple[Path, Path], tmp_path: Path,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    base, slower = pair
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.advisor]\nmax_regression = 15\n")
    rc, out, _ = cli("compare", str(base), str(slower), "--format", "json")
    assert rc == 0 and json.loads(out)["regression"]["max_regression_pct"] == 15
    assert cli("compare", str(base), str(slower), "--format", "json", "--max-regression", "2")[0] == 1


def test_report_lists_what_produced_it() -> None:
    report = sample_report()
    validate(report)
    produced = report["produced_by"]
    assert produced["advisor"] == report["tool"]["version"] and produced["plugin_api"] == report["tool"]["api_version"]
    kbs = {k["name"]: k for k in produced["knowledge_bases"]}
    assert set(kbs) == {k["id"] for k in report["knowledge_bases"]}
    for kb in report["knowledge_bases"]:
        assert kbs[kb["id"]]["version"] == kb["version"]
        assert kbs[kb["id"]]["source"] == ("core" if kb["package"] in ("", "ascend-advisor") else "plugin")


def test_compare_warns_when_the_producers_differ(cli: CliFixture, pair: tuple[Path, Path]) -> None:
    base, _ = pair
    other = json.loads(base.read_text())
    kb = other["produced_by"]["knowledge_bases"][0]
    kb["version"] = "99.0.0"
    other["produced_by"]["knowledge_bases"].append({"name": "my-kb", "version": "0.1.0", "source": "plugin",
                                                    "package": "my-kb", "package_version": "0.1.0"})
    new = base.with_name("other.json")
    new.write_text(json.dumps(other))
    rc, out, err = cli("compare", str(base), str(new), "--format", "json")
    assert rc == 0
    assert f"knowledge base versions differ: {kb['name']}" in err and "99.0.0" in err
    assert "knowledge bases only in new: my-kb" in err
    notes = json.loads(out)["notes"]
    assert any("only in new: my-kb" in n for n in notes)
    _, _, err = cli("compare", str(base), str(base), "--format", "json")
    assert "produced differently" not in err


def test_docs_readme_and_explain_state_one_score_formula(cli: CliFixture) -> None:
    """``advisor explain score`` prints the docstring of advisor/pipeline/score.py (as plain text); docs/ci.md quotes it whole and the
    README states its formula line: none may drift from the code's definition."""
    import re
    import textwrap

    from advisor.cli.explain_cmd import plain_text
    from advisor.pipeline.score import FORMULA

    root = Path(__file__).resolve().parents[1]
    definition = plain_text(textwrap.dedent(FORMULA).strip())  # as a terminal shows it: no ``literal`` marks
    rc, out, _ = cli("explain", "score")
    assert rc == 0 and out.strip() == definition
    blocks = re.findall(r"```text\n(.*?)\n```", (root / "docs" / "ci.md").read_text(), flags=re.S)
    assert definition in blocks
    (line,) = [x.strip() for x in definition.splitlines() if x.strip().startswith("score =")]
    readme = " ".join((root / "README.md").read_text().split())
    assert f"`{line}`" in readme
    assert "device busy time of the profile" not in (root / "docs" / "ci.md").read_text()  # the old, wrong T
