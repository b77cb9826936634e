"""Reports read as a person wants them (issue 31.5): evidence with labels and units, one duration format,
code spans as code in HTML, one chip name, no note meant for another report."""

from __future__ import annotations

import re

from advisor.common import escaping
from advisor.common.units import fmt_us
from advisor.report import render
from advisor.report.evidence_format import evidence_label, evidence_table, evidence_value
from tests._report_sample import sample_report


def test_evidence_keys_read_as_words_and_values_carry_units() -> None:
    assert evidence_label("share_of_window") == "share of the analyzed window"
    assert evidence_value("share_of_window", 0.156) == "15.6 %"
    assert evidence_label("decomposed_us") == "decomposed"
    assert evidence_value("decomposed_us", 3605.729) == "3.61 ms" == fmt_us(3605.729)
    assert evidence_value("hbm_gbps", 204.0) == "204 GB/s"
    assert evidence_value("peak_tflops", 69.47) == "69.47 TFLOPS"
    assert evidence_value("mean_pct_of_roof", 0.4213) == "42.1 %"
    assert evidence_value("calls_per_execute", 3.0) == "3"  # a quotient, not a share
    assert evidence_label("aicpu_us") == "AI CPU time"
    assert evidence_label("% roof") == "% roof"  # already written for a person
    assert evidence_value("native_us_each", 12.5) == "12.5 µs"
    assert evidence_value("soc_assumed", True) == "yes"


def test_evidence_table_labels_columns_and_formats_cells_by_column() -> None:
    view = evidence_table({"columns": ["op", "duration_us", "share", "note"],
                           "rows": [["a", 2500.0, 0.5, None], ["b", 3.0, 0.25, "x"]]})
    assert view["columns"] == ["op", "duration", "share", "note"]
    assert view["rows"][0] == ["a", "2.50 ms", "50.0 %", "–"]
    assert view["numeric"] == [False, True, True, False]


def _no_snake_key(text: str, report: dict) -> None:
    keys = {k for f in report["findings"] for k in (f.get("evidence") or {}) if "_" in k}
    shown = [k for k in keys if re.search(rf"(?<![\w/.-]){re.escape(k)}(?![\w/.-])", text)]
    assert not shown, shown


def test_markdown_and_html_show_labels_not_keys() -> None:
    report = sample_report()
    md = render(report, "markdown")
    html = render(report, "html")
    evidence_md = "\n".join(line for line in md.splitlines() if line.startswith("**Evidence**"))
    _no_snake_key(evidence_md, report)
    dls = "".join(re.findall(r'<dl class="kv evidence">(.*?)</dl>', html, re.S))
    assert dls and "<dt>duration</dt><dd>410.0 µs</dd>" in dls
    _no_snake_key(dls, report)


def test_one_duration_unit_everywhere() -> None:
    report = sample_report()
    for fmt in ("markdown", "html", "terminal"):
        out = render(report, fmt)
        assert not re.search(r"\d us\b", out), (fmt, re.findall(r".{30}\d us\b.{10}", out)[:3])
        assert "µs" in out


def test_html_report_does_not_point_to_itself() -> None:
    report = sample_report()
    assert "drawn in the HTML report" not in render(report, "html")
    assert "drawn in the HTML report" in render(report, "markdown")


def test_code_spans_become_code_in_html_and_stay_escaped() -> None:
    assert escaping.html_code_spans("set `--fusion_switch_file` <b>now</b>") == \
        "set <code>--fusion_switch_file</code> &lt;b&gt;now&lt;/b&gt;"
    assert escaping.html_code_spans("`<script>alert(1)</script>`") == \
        "<code>&lt;script&gt;alert(1)&lt;/script&gt;</code>"
    assert escaping.html_code_spans("a lone ` tick") == "a lone ` tick"
    report = sample_report()
    report["findings"][0]["recommendation"] = "Pass `--precision_mode=allow_mix` to atc; <i>not</i> `<img src=x>`"
    html = render(report, "html")
    assert "<code>--precision_mode=allow_mix</code>" in html and "<code>&lt;img src=x&gt;</code>" in html
    assert "<i>not</i>" not in html and "`--precision_mode" not in html


def test_one_chip_name_per_report() -> None:
    report = sample_report()
    report["input"]["chip"] = "Ascend910B-class"
    report["platform"]["soc"] = "Ascend910B2"
    for fmt in ("markdown", "html", "terminal"):
        out = render(report, fmt)
        assert "Ascend910B2" in out and "Ascend910B-class" not in out, fmt


def test_chart_axes_are_in_the_unit_of_their_labels() -> None:
    """An axis in ms beside bar labels in ms (not µs up to 400000 beside "ms" labels)."""
    from advisor.common.units import duration_scale
    from advisor.report import charts

    assert duration_scale(400_000) == ("ms", 1000.0) and duration_scale(12.0) == ("µs", 1.0)
    assert duration_scale(2.5e6) == ("s", 1e6)
    svg = charts.bar_chart([("Conv2D", 400_000.0), ("Add", 20_000.0)], "t", "x")
    assert "time (ms)" in svg and "400.00 ms" in svg and "time (µs)" not in svg
    assert ">400000<" not in svg and ">300000<" not in svg  # tick labels in ms
    small = charts.bar_chart([("Add", 12.0)], "s", "x")
    assert "time (µs)" in small and "12.0 µs" in small
    time = {"window_us": 3e6, "compute_by_core": {"cube": 2e6}, "free_us": 1e6, "steps": [
        {"step": 1, "window_us": 3e6, "compute_by_core": {"cube": 2e6}, "free_us": 1e6}]}
    svg = charts.time_chart(time)
    assert "time (s)" in svg and 'id="time-legend"' in svg and 'id="time-xlabel"' in svg
