"""``advisor compare --format junit``: the regression gate as JUnit test cases, so CI systems show it beside
the analysis's own JUnit report.

One suite, ``advisor-compare``, with a ``device_time`` test case (fails when NEW's device time is more than
``--max-regression`` % above BASE's), a ``score_drop`` test case (fails when ``--max-score-drop`` is given and
NEW's score dropped by more; skipped without it) and a ``new_findings`` test case that passes and lists the
findings NEW has and BASE had not. The notes (different chips, different knowledge bases...) are properties.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from typing import Any

from advisor.report.common import fmt_us

_NOT_XML = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\ud800-\udfff\ufffe\uffff]")


def _x(text: object) -> str:
    return _NOT_XML.sub("?", str(text))


def build(cmp: dict[str, Any]) -> ET.Element:
    """The comparison's JUnit tree: suites and counts as CI viewers expect them."""
    root = ET.Element("testsuites", name="advisor-compare")
    suite = ET.SubElement(root, "testsuite", name="advisor-compare", tests="0", failures="0", errors="0",
                          skipped="0", time="0.000")
    props = ET.SubElement(suite, "properties")
    time, score, limits = cmp["device_time"], cmp["score"], cmp["regression"]
    for name, value in (("base", cmp["base"]["path"]), ("new", cmp["new"]["path"]),
                        ("device_time_metric", time["metric"]), ("device_time_delta_pct", time.get("delta_pct")),
                        ("score_base", score["base"]), ("score_new", score["new"]), ("score_delta", score["delta"]),
                        *((f"note_{i}", note) for i, note in enumerate(cmp.get("notes") or [], start=1))):
        ET.SubElement(props, "property", name=name, value=_x("" if value is None else value))

    def case(name: str) -> ET.Element:
        suite.set("tests", str(int(suite.get("tests", "0")) + 1))
        return ET.SubElement(suite, "testcase", classname="advisor-compare", name=name, time="0")

    def bump(key: str) -> None:
        suite.set(key, str(int(suite.get(key, "0")) + 1))

    pct, max_pct = time.get("delta_pct"), float(limits["max_regression_pct"])
    t = case("device_time")
    summary = (f"{time['metric'].removesuffix('_us').replace('_', ' ')}: {fmt_us(time['base_us'])} -> "
               f"{fmt_us(time['new_us'])} ({'n/a' if pct is None else f'{pct:+.2f} %'}), limit +{max_pct:g} %")
    if pct is not None and pct > max_pct:
        ET.SubElement(t, "failure", message=_x(f"device time +{pct:.2f} %, limit {max_pct:g} %"),
                      type="regression").text = _x(summary)
        bump("failures")
    else:
        ET.SubElement(t, "system-out").text = _x(summary)

    s = case("score_drop")
    drop = limits.get("max_score_drop")
    if drop is None:
        ET.SubElement(s, "skipped", message="no --max-score-drop given")
        bump("skipped")
    elif -float(score["delta"]) > float(drop):
        ET.SubElement(s, "failure", message=_x(f"score {score['delta']:+.1f} points, limit -{float(drop):g}"),
                      type="regression")
        bump("failures")
    else:
        ET.SubElement(s, "system-out").text = _x(f"score {score['base']:.1f} -> {score['new']:.1f} "
                                                 f"({score['delta']:+.1f}), limit -{float(drop):g}")

    n = case("new_findings")
    new = cmp["findings"]["new"]
    ET.SubElement(n, "system-out").text = _x("\n".join(
        f"[{f.get('severity', '')}] {f.get('rule', '')}: {f.get('title', '')}" for f in new) or "none")

    root.set("tests", suite.get("tests", "0"))
    for key in ("failures", "errors", "skipped"):
        root.set(key, suite.get(key, "0"))
    return root


def render(cmp: dict[str, Any]) -> str:
    """The comparison as JUnit XML text."""
    root = build(cmp)
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"
