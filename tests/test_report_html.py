"""HTML report: one self-contained file with charts, the findings table and per-finding details."""

from __future__ import annotations

import re
from html.parser import HTMLParser

import pytest

from advisor.report import render
from advisor.report.common import finding_subgraph, roofline_points
from tests._report_sample import sample_report


class _Collect(HTMLParser):
    """Element ids, external references and whether the document nests properly."""

    VOID = {"meta", "link", "br", "img", "input", "hr", "wbr", "source", "area", "base", "col", "embed", "param",
            "track"}

    def __init__(self) -> None:
        super().__init__()
        self.ids: dict[str, str] = {}
        self.refs: list[tuple[str, str, str]] = []
        self.stack: list[str] = []
        self.tags: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for k, v in attrs:
            if k == "id" and v:
                self.ids[v] = tag
            if k in ("src", "href", "xlink:href", "action", "data", "poster") and v:
                self.refs.append((tag, k, v))
        if tag not in self.VOID:
            self.stack.append(tag)

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append(tag)
        for k, v in attrs:
            if k == "id" and v:
                self.ids[v] = tag
            if k in ("src", "href", "xlink:href") and v:
                self.refs.append((tag, k, v))

    def handle_endtag(self, tag: str) -> None:
        assert self.stack and self.stack[-1] == tag, f"</{tag}> closes <{self.stack[-1] if self.stack else None}>"
        self.stack.pop()


def _parse(text: str) -> _Collect:
    p = _Collect()
    p.feed(text)
    p.close()
    assert p.stack == [], p.stack
    return p


@pytest.fixture(scope="module")
def report_html() -> tuple[dict, str]:
    report = sample_report()
    return report, render(report, "html")


def test_self_contained_no_network(report_html: tuple[dict, str]) -> None:
    _, html = report_html
    p = _parse(html)
    assert "script" not in p.tags and "img" not in p.tags and "iframe" not in p.tags
    for tag, attr, value in p.refs:
        assert value.startswith(("#", "data:")), (tag, attr, value)
    assert not re.search(r"url\(\s*['\"]?(https?:|//)", html)
    assert "@import" not in html and "@font-face" not in html
    assert "default-src 'none'" in html  # the page itself forbids any fetch


def test_required_sections_and_ids(report_html: tuple[dict, str]) -> None:
    report, html = report_html
    p = _parse(html)
    assert p.ids["roofline-chart"] == "figure" and p.ids["findings-table"] == "table"
    assert {"op-type-chart", "core-chart", "score", "kb-table"} <= set(p.ids)
    for i in range(1, len(report["findings"]) + 1):
        assert f"finding-{i}" in p.ids
    assert html.count("<svg") >= 3 + 2  # op types, cores, roofline, two fusion drawings
    assert '<div class="value">85.0</div>' in html


def test_time_breakdown_charts_label_the_data(report_html: tuple[dict, str]) -> None:
    _, html = report_html
    op_chart = html[html.index('id="op-type-chart"'):html.index('id="core-chart"')]
    for label in ("Conv2D", "NonMaxSuppressionV3", "TransData", "1.44 ms  61%"):
        assert label in op_chart
    core_chart = html[html.index('id="core-chart"'):html.index('id="roofline-chart"')]
    for label in ("AI_CORE", "AI_CPU", "AI_VECTOR_CORE", "505.0 µs  21%"):
        assert label in core_chart


def test_roofline_has_roofs_and_points_by_bound(report_html: tuple[dict, str]) -> None:
    _, html = report_html
    chart = html[html.index('id="roofline-chart"'):html.index('id="findings-table"')]
    for label in ("HBM 204 GB/s", "FP16 cube 69.47 TFLOPS", "FP32 vector 2.2 TFLOPS", "memory-bound (2)",
                  "compute-bound (1)", "latency-bound (1)", "4 ops plotted"):
        assert label in chart, label


def test_no_roofline_section_without_points() -> None:
    """A roofline with no op on it (a graph-only audit, no roofline finding) is an empty card: not shown."""
    report = sample_report()
    report["findings"] = [f for f in report["findings"] if f["kb"] != "roofline"]
    html = render(report, "html")
    assert 'id="roofline-chart"' not in html and "<h2>Roofline</h2>" not in html
    assert "op-type-chart" in html  # the other charts stay


def test_no_empty_chart_cards() -> None:
    report = sample_report()
    report["summary"]["top_op_types"] = []
    report["summary"]["by_core"] = {}
    html = render(report, "html")
    assert "Where the device time goes" not in html and "No op time in this input" not in html


def test_roofline_without_platform_peaks() -> None:
    report = sample_report()
    report["platform"] = {}
    html = render(report, "html")
    assert 'id="roofline-chart"' in html and "memory-bound (2)" in html


def test_findings_table_rows_and_details(report_html: tuple[dict, str]) -> None:
    report, html = report_html
    table = html[html.index('id="findings-table"'):html.index("</table>", html.index('id="findings-table"'))]
    assert table.count("<tr>") == len(report["findings"]) + 1
    assert '<a href="#finding-1">NonMaxSuppressionV3 runs on AI CPU (410 µs)</a>' in table
    assert "atc --model=ssd.onnx --framework=5 --input_format=NC1HWC0" in html
    assert "<td>trans_TransData_2</td>" in html


def test_fusion_findings_get_subgraph_drawings(report_html: tuple[dict, str]) -> None:
    report, html = report_html
    ub = next(i for i, f in enumerate(report["findings"], 1) if f["rule"].startswith("ub-fusion."))
    mish = next(i for i, f in enumerate(report["findings"], 1) if f["rule"].startswith("mish-leakyrelu."))
    nms = next(i for i, f in enumerate(report["findings"], 1) if f["rule"].startswith("aicpu."))

    def section(i: int) -> str:
        start = html.index(f'id="finding-{i}"')
        return html[start:html.index("</article>", start)]

    assert "<svg" in section(ub) and "relu0/Relu" in section(ub) and "subgraph this fusion finding" in section(ub)
    assert "<svg" in section(mish) and "first ops in order" in section(mish)
    assert "<svg" not in section(nms)


def test_text_is_escaped() -> None:
    report = sample_report()
    report["findings"][0]["title"] = "<script>alert(1)</script>"
    report["findings"][0]["ops"] = ['"><img src=x onerror=alert(1)>']
    html = render(report, "html")
    assert "<script>alert" not in html and "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_deterministic() -> None:
    report = sample_report()
    assert render(report, "html") == render(report, "html")


def test_subgraph_and_points_readers_are_tolerant() -> None:
    f = {"rule": "ub-fusion.x", "ops": ["a"], "evidence": {"subgraph": {"nodes": ["a", {"name": "b", "type": "Relu"}],
                                                                        "edges": [{"src": "a", "dst": "b"}, ["b", "zz"]]}}}
    sg = finding_subgraph(f)
    assert sg is not None and sg.nodes == ["a", "b"] and sg.edges == [("a", "b")] and sg.types == {"b": "Relu"}
    assert finding_subgraph({"rule": "ub-fusion.x", "ops": ["only"], "evidence": {}}) is None
    chains = finding_subgraph({"rule": "mish-leakyrelu.mish", "ops": ["s1", "t1", "m1", "s2", "t2", "m2"],
                               "evidence": {"table": {"columns": ["ops", "types"],
                                                      "rows": [["s1 > t1 > m1", "Softplus > Tanh > Mul"],
                                                               ["s2 -> t2 -> m2", "Softplus > Tanh > Mul"]]}}})
    assert chains is not None and chains.source == "chains"
    assert chains.edges == [("s1", "t1"), ("t1", "m1"), ("s2", "t2"), ("t2", "m2")]
    plain = finding_subgraph({"rule": "ub-fusion.x", "ops": [f"o{i}" for i in range(20)], "evidence": {}})
    assert plain is not None and plain.drawn_as_chain and len(plain.nodes) == 8
    pts = roofline_points([
        {"ops": ["x"], "evidence": {"intensity": 2.0, "attained_tflops": 0.3, "bound": "Memory"}},
        {"ops": [], "evidence": {"points": [{"name": "y", "arithmetic_intensity": 50, "tflops": 4, "class": "compute"},
                                            {"name": "bad", "intensity": None, "attained_tflops": 1}]}},
        {"ops": [], "evidence": {"t": {"columns": ["op", "intensity", "attained_tflops"], "rows": [["z", 1, 0]]}}},
    ])
    assert [(p.label, p.intensity, p.attained_tflops, p.bound) for p in pts] == [
        ("x", 2.0, 0.3, "memory"), ("y", 50.0, 4.0, "compute")]
