"""JUnit XML report, so CI systems show advisor rules as test cases.

One ``<testsuite>`` per knowledge base and one ``<testcase>`` per rule: the rules the knowledge base declares
(``knowledge_bases[].rules``) plus any rule id seen in its findings. A rule's test case fails when one of its
findings reaches the ``fail_on`` severity (default ``major``); lower-severity findings are listed in
``<system-out>`` of a passing case. A skipped knowledge base gives skipped test cases, a failed one error test
cases. A first suite, ``advisor``, carries the score (and fails when ``fail_under`` is given and not met).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from typing import Any

from advisor.common.escaping import controls, deep
from advisor.report.common import SEVERITY_RANK, fmt_us, symptom_lines

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _x(text: object) -> str:
    """Text XML 1.0 can hold (profiles may carry control characters in op names)."""
    return _NOT_XML.sub("?", str(text))


def _suite(parent: ET.Element, name: str, seconds: float = 0.0) -> ET.Element:
    return ET.SubElement(parent, "testsuite", name=name, tests="0", failures="0", errors="0", skipped="0",
                         time=f"{seconds:.3f}")


def _case(suite: ET.Element, classname: str, name: str) -> ET.Element:
    suite.set("tests", str(int(suite.get("tests", "0")) + 1))
    return ET.SubElement(suite, "testcase", classname=classname, name=name, time="0")


def _bump(suite: ET.Element, key: str) -> None:
    suite.set(key, str(int(suite.get(key, "0")) + 1))


def _finding_text(f: Mapping[str, Any]) -> str:
    ops = ", ".join(f["ops"][:10]) + (f" … (+{len(f['ops']) - 10})" if len(f["ops"]) > 10 else "")
    lines = [f"[{f['severity']}] {f['title']} (est. saving {fmt_us(f['estimated_saving_us'])})",
             f"  {f['recommendation']}"]
    if ops:
        lines.append(f"  ops: {ops}")
    lines += [f"  explains {line}" for line in symptom_lines(f)]
    fix = f.get("fix")
    if fix:
        lines.append(f"  fix ({fix['kind']}): {fix['summary']}")
        if fix.get("command"):
            lines.append(f"  $ {fix['command']}")
    return _x("\n".join(lines))


def _rule_ids(kb: Mapping[str, Any], findings: Sequence[Mapping[str, Any]]) -> list[str]:
    ids = [str(r) for r in kb.get("rules") or []]
    for f in findings:
        if f["rule"] not in ids:
            ids.append(f["rule"])
    return ids


def build(report: Mapping[str, Any], fail_on: str = "major", fail_under: float | None = None) -> ET.Element:
    """The ``<testsuites>`` element for a report."""
    if fail_on not in SEVERITY_RANK:
        raise ValueError(f"fail_on must be one of {', '.join(SEVERITY_RANK)}")
    threshold = SEVERITY_RANK[fail_on]
    root = ET.Element("testsuites", name="advisor")

    top = _suite(root, "advisor")
    props = ET.SubElement(top, "properties")
    for key, value in (("score", f"{float(report['score']):.1f}"), ("input", report["input"]["path"]),
                       ("layout", report["input"]["layout"]), ("chip", report["input"].get("chip") or ""),
                       ("fail_on", fail_on), ("advisor_version", report.get("tool", {}).get("version", ""))):
        ET.SubElement(props, "property", name=key, value=_x(value))
    case = _case(top, "advisor", "score")
    score = float(report["score"])
    if fail_under is not None and score < fail_under:
        ET.SubElement(case, "failure", message=f"score {score:.1f} is below {fail_under:g}", type="score")
        _bump(top, "failures")
    ET.SubElement(case, "system-out").text = f"score {score:.1f} / 100"

    by_kb: dict[str, list[Mapping[str, Any]]] = {}
    for f in report["findings"]:
        by_kb.setdefault(f["kb"], []).append(f)
    kbs = list(report["knowledge_bases"])
    known = {k["id"] for k in kbs}
    kbs += [{"id": kb_id, "status": "ok", "reason": ""} for kb_id in by_kb if kb_id not in known]

    for kb in kbs:
        kb_findings = by_kb.get(kb["id"], [])
        suite = _suite(root, f"advisor.{kb['id']}", float(kb.get("seconds") or 0.0))
        classname = f"advisor.{kb['id']}"
        rule_ids = _rule_ids(kb, kb_findings) or [kb["id"]]
        for rule in rule_ids:
            case = _case(suite, classname, _x(rule))
            if kb["status"] == "skipped":
                ET.SubElement(case, "skipped", message=_x(kb.get("reason") or "skipped"))
                _bump(suite, "skipped")
                continue
            if kb["status"] == "failed":
                reason = _x(kb.get("reason") or "knowledge base failed")
                ET.SubElement(case, "error", message=reason, type="KnowledgeBaseError").text = reason
                _bump(suite, "errors")
                continue
            mine = [f for f in kb_findings if f["rule"] == rule]
            failing = [f for f in mine if SEVERITY_RANK[f["severity"]] <= threshold]
            if failing:
                saving = sum(f["estimated_saving_us"] for f in failing)
                worst = min(failing, key=lambda f: SEVERITY_RANK[f["severity"]])["severity"]
                el = ET.SubElement(case, "failure", type=worst,
                                   message=f"{len(failing)} finding(s) at {fail_on} or worse; "
                                           f"est. saving {fmt_us(saving)}")
                el.text = "\n\n".join(_finding_text(f) for f in failing)
                _bump(suite, "failures")
            rest = [f for f in mine if f not in failing]
            if rest:
                ET.SubElement(case, "system-out").text = "\n\n".join(_finding_text(f) for f in rest)

    for key in ("tests", "failures", "errors", "skipped"):
        root.set(key, str(sum(int(s.get(key, "0")) for s in root)))
    return root


def render(report: dict[str, Any], fail_on: str = "major", fail_under: float | None = None, **_: Any) -> str:
    """The report as JUnit XML text."""
    report = deep(report, controls)  # XML 1.0 cannot hold control characters: made visible (\x1b)
    root = build(report, fail_on, fail_under)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
