"""JUnit report: one test case per rule, failing at the configured severity; CI tools must be able to parse it."""

from __future__ import annotations

import xml.etree.ElementTree as ET

import pytest

from advisor.report import render
from tests._report_sample import sample_report


def _cases(xml: str) -> dict[str, ET.Element]:
    root = ET.fromstring(xml)
    return {f"{c.get('classname')}::{c.get('name')}": c for c in root.iter("testcase")}


def _outcome(case: ET.Element) -> str:
    for tag in ("failure", "error", "skipped"):
        if case.find(tag) is not None:
            return tag
    return "passed"


def test_one_case_per_declared_rule_and_outcomes() -> None:
    xml = render(sample_report(), "junit", fail_on="major")
    assert xml.startswith('<?xml version="1.0" encoding="UTF-8"?>')
    outcomes = {k: _outcome(c) for k, c in _cases(xml).items()}
    assert outcomes == {
        "advisor::score": "passed",
        "advisor.aicpu::aicpu.op-on-aicpu": "failure",  # critical
        "advisor.aipp-fusion::aipp-fusion.missing-aipp": "skipped",  # KB skipped: needs graph
        "advisor.mish-leakyrelu::mish-leakyrelu.decomposed-mish": "failure",  # major
        "advisor.roofline::roofline.memory-bound-low-bandwidth": "passed",  # minor < major
        "advisor.roofline::roofline.compute-bound-low-util": "passed",  # declared, no finding
        "advisor.transdata::transdata.format-roundtrip": "failure",
        "advisor.transdata::transdata.count": "passed",
        "advisor.ub-fusion::ub-fusion.conv-relu-not-fused": "passed",
        "advisor.broken-kb::broken-kb": "error",  # KB failed, declares no rules
    }


@pytest.mark.parametrize(("fail_on", "failures"), [("critical", 1), ("major", 3), ("minor", 5), ("info", 5)])
def test_fail_on_threshold(fail_on: str, failures: int) -> None:
    root = ET.fromstring(render(sample_report(), "junit", fail_on=fail_on))
    assert int(root.get("failures")) == failures
    assert sum(_outcome(c) == "failure" for c in root.iter("testcase")) == failures


def test_totals_are_consistent() -> None:
    root = ET.fromstring(render(sample_report(), "junit"))
    suites = list(root)
    assert all(s.tag == "testsuite" for s in suites)
    for s in suites:
        cases = s.findall("testcase")
        assert int(s.get("tests")) == len(cases)
        assert int(s.get("failures")) == sum(_outcome(c) == "failure" for c in cases)
        assert int(s.get("errors")) == sum(_outcome(c) == "error" for c in cases)
        assert int(s.get("skipped")) == sum(_outcome(c) == "skipped" for c in cases)
    for key in ("tests", "failures", "errors", "skipped"):
        assert int(root.get(key)) == sum(int(s.get(key)) for s in suites)
    assert (int(root.get("tests")), int(root.get("errors")), int(root.get("skipped"))) == (10, 1, 1)


def test_failure_text_carries_the_fix() -> None:
    cases = _cases(render(sample_report(), "junit"))
    failure = cases["advisor.transdata::transdata.format-roundtrip"].find("failure")
    assert failure.get("type") == "major" and "est. saving 120.0 µs" in failure.get("message")
    assert "$ atc --model=ssd.onnx" in failure.text and "trans_TransData_0" in failure.text
    minor = cases["advisor.ub-fusion::ub-fusion.conv-relu-not-fused"].find("system-out")
    assert "TbeConvElemwiseFusionPass" in minor.text


def test_score_property_and_fail_under() -> None:
    report = sample_report()
    root = ET.fromstring(render(report, "junit"))
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["score"] == f"{report['score']:.1f}" and props["fail_on"] == "major"
    cases = _cases(render(report, "junit", fail_under=report["score"] + 1))
    assert _outcome(cases["advisor::score"]) == "failure"
    assert _outcome(_cases(render(report, "junit", fail_under=report["score"] - 1))["advisor::score"]) == "passed"


def test_rules_from_findings_without_declaration_and_hostile_text() -> None:
    report = sample_report()
    for kb in report["knowledge_bases"]:
        kb.pop("rules", None)
    report["findings"][0]["ops"] = ["bad\x01name\x1f", "<&>"]
    report["findings"][0]["title"] = "]]> & <tag>"
    xml = render(report, "junit")
    cases = _cases(xml)  # parses: control characters replaced, markup escaped
    assert "advisor.aicpu::aicpu.op-on-aicpu" in cases
    assert "advisor.transdata::transdata.count" not in cases  # undeclared and no finding
    assert "bad\\x01name\\x1f" in cases["advisor.aicpu::aicpu.op-on-aicpu"].find("failure").text


def test_unknown_severity_is_rejected() -> None:
    with pytest.raises(ValueError):
        render(sample_report(), "junit", fail_on="blocker")
