"""The CI gate of `advisor analyze`: --fail-under exit codes, and report files written where CI expects them."""

from __future__ import annotations

import json
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

import pytest
from click.testing import CliRunner

import advisor.cli.analyze as analyze_cmd
from advisor.cli import main
from tests._report_sample import sample_report

if TYPE_CHECKING:
    from tests.conftest import CliFixture

STAMPED = r"advisor_\d{8}-\d{6}\.EXT"


@pytest.fixture
def fixed_report(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """`advisor analyze` analyzing anything yields the sample report (score 85.0), all its KBs having run."""
    report = sample_report()
    report["knowledge_bases"] = [k for k in report["knowledge_bases"] if k["status"] != "failed"]
    monkeypatch.setattr(analyze_cmd, "run_analysis", lambda *a, **k: SimpleNamespace(report=report))
    return report


@pytest.mark.parametrize(("threshold", "code"), [("90", 1), ("85.1", 1), ("85.0", 0), ("50", 0), ("0", 0)])
def test_fail_under(cli: CliFixture, fixed_report: dict, tmp_path: Path, threshold: str, code: int) -> None:
    assert fixed_report["score"] == 85.0
    rc, out, err = cli("analyze", str(tmp_path), "--format", "json", "--fail-under", threshold, "-q")
    assert rc == code
    assert json.loads(out)["score"] == 85.0  # the report is printed either way
    if code:
        assert f"score 85.0 is below --fail-under {threshold}" in err


def test_failed_knowledge_base_exits_3_whatever_the_score(cli: CliFixture, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    report = sample_report()  # has a failed KB
    monkeypatch.setattr(analyze_cmd, "run_analysis", lambda *a, **k: SimpleNamespace(report=report))
    rc, out, err = cli("analyze", str(tmp_path), "--format", "json", "-q", "--fail-under", "10")
    assert rc == 3 and "broken-kb" in err
    assert json.loads(out)["score"] == report["score"]  # the report is still written


def test_no_gate_without_fail_under(cli: CliFixture, fixed_report: dict, tmp_path: Path) -> None:
    fixed_report["score"] = 3.0
    assert cli("analyze", str(tmp_path), "--format", "json", "-q")[0] == 0


@pytest.mark.parametrize("bad", ["101", "-1", "abc"])
def test_bad_threshold_is_a_usage_error(cli: CliFixture, fixed_report: dict, tmp_path: Path, bad: str) -> None:
    rc, _, err = cli("analyze", str(tmp_path), "--fail-under", bad)
    assert rc == 2 and "--fail-under" in err


def test_missing_input_exits_2_with_one_line(cli: CliFixture, tmp_path: Path) -> None:
    missing = tmp_path / "PROF_does_not_exist"
    rc, out, err = cli("analyze", str(missing), "--fail-under", "75", "-q")
    assert rc == 2
    assert "Traceback" not in err and str(missing) in err
    assert len(err.strip().splitlines()) == 1


def test_unreadable_profile_exits_2(cli: CliFixture, tmp_path: Path) -> None:
    bogus = tmp_path / "PROF_000001_bogus"
    bogus.mkdir()
    (bogus / "readme.txt").write_text("not a profile")
    rc, _, err = cli("analyze", str(bogus), "--fail-under", "75", "-q")
    assert rc == 2 and "Traceback" not in err and "advisor: error:" in err


def test_junit_written_to_directory_and_gate_still_fails(cli: CliFixture, fixed_report: dict, tmp_path: Path) -> None:
    out_dir = tmp_path / "reports"
    out_dir.mkdir()
    rc, _, err = cli("analyze", str(tmp_path), "--fail-under", "90", "--format", "junit", "-o", str(out_dir), "-q")
    assert rc == 1
    files = list(out_dir.iterdir())
    assert len(files) == 1 and re.fullmatch(STAMPED.replace("EXT", "xml"), files[0].name)
    root = ET.parse(files[0]).getroot()
    assert root.tag == "testsuites" and int(root.get("failures")) == 3 + 1  # 3 rules + the score case
    score_case = next(c for c in root.iter("testcase") if c.get("name") == "score")
    assert "score 85.0 is below 90" in score_case.find("failure").get("message")
    assert f"wrote {files[0]}" in err


def test_default_directory_for_html_is_reports(cli: CliFixture, fixed_report: dict, tmp_path: Path,
                                               monkeypatch: pytest.MonkeyPatch) -> None:
    profile, work = tmp_path / "PROF", tmp_path / "work"
    profile.mkdir()
    work.mkdir()
    monkeypatch.chdir(work)
    rc, _, _ = cli("analyze", str(profile), "--format", "html", "-q")
    assert rc == 0
    files = sorted((work / "reports").iterdir())
    assert [f.name for f in files if not re.fullmatch(STAMPED.replace("EXT", "html"), f.name)] == []
    assert len(files) == 1 and files[0].read_text("utf-8").startswith("<!DOCTYPE html>")
    # run from inside the profile, the default reports/ would be inside the input: refused (issue 30)
    monkeypatch.chdir(profile)
    rc, _, err = cli("analyze", ".", "--format", "html", "-q")
    assert rc == 2 and "inside the input folder" in err and not (profile / "reports").exists()


def test_new_directory_named_with_trailing_slash(cli: CliFixture, fixed_report: dict, tmp_path: Path) -> None:
    target = tmp_path / "out" / "nested"
    rc, _, _ = cli("analyze", str(tmp_path), "--format", "markdown", "-o", f"{target}/", "-q")
    assert rc == 0
    files = list(target.iterdir())
    assert len(files) == 1 and re.fullmatch(STAMPED.replace("EXT", "md"), files[0].name)
    assert "advisor score **85.0**" in files[0].read_text("utf-8")


def test_output_file_is_replaced_atomically(cli: CliFixture, fixed_report: dict, tmp_path: Path) -> None:
    target = tmp_path / "report.xml"
    target.write_text("old content")
    rc, _, _ = cli("analyze", str(tmp_path), "--format", "junit", "-o", str(target), "-q")
    assert rc == 0
    ET.parse(target)  # complete, well-formed XML
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.xml"]  # no temporary files left behind


def test_builtin_example_end_to_end(cli: CliFixture) -> None:
    rc, out, err = cli("analyze", "--example", "--format", "json", "--fail-under", "100", "-q")
    report = json.loads(out)
    assert report["score"] < 100 and rc == 1, err
    rc, _, _ = cli("analyze", "--example", "--format", "json", "--fail-under", str(report["score"]), "-q")
    assert rc == 0


def test_saved_report_renders_in_every_format(tmp_path: Path) -> None:
    """Analyze once, render many: `advisor report saved.json --format X`."""


    runner = CliRunner()
    saved = tmp_path / "saved.json"
    result = runner.invoke(main, ["analyze", "--example", "--format", "json", "--quiet", "-o", str(saved)])
    assert result.exit_code == 0, result.output
    md = runner.invoke(main, ["report", str(saved), "--format", "markdown"])
    assert md.exit_code == 0 and "advisor score" in md.stdout
    xml = runner.invoke(main, ["report", str(saved), "--format", "junit", "-o", str(tmp_path / "r.xml")])
    assert xml.exit_code == 0 and (tmp_path / "r.xml").read_text().startswith("<?xml")
    bad = tmp_path / "bad.json"
    bad.write_text('{"not": "a report"}')
    err = runner.invoke(main, ["report", str(bad)])
    assert err.exit_code == 2 and "not an advisor report" in err.stderr


def test_the_gate_keys_fail_on_is_the_findings_severity_scale():
    """``[tool.advisor] fail_on`` is validated before any finding exists (advisor.config.loader); its enum is the
    findings' severity scale, written once more there because config comes before the model."""
    from advisor.config.loader import GATE_PROPERTIES
    from advisor.findings import SEVERITIES

    assert GATE_PROPERTIES["fail_on"]["enum"] == list(SEVERITIES)
