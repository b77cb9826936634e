"""Markdown report: what a reviewer sees in a pull-request comment."""

from __future__ import annotations

import copy
import re

from advisor.report import render
from advisor.report.markdown import MAX_CHARS
from tests._report_sample import sample_report


def _cells(line: str) -> int:
    """Number of cells in a Markdown table row (unescaped pipes)."""
    return len(re.split(r"(?<!\\)\|", line.strip())) - 2


def _tables_well_formed(text: str) -> None:
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        if lines[i].startswith("|") and i + 1 < len(lines) and re.match(r"^\|(-{3}:?\|)+$", lines[i + 1]):
            width = _cells(lines[i])
            assert _cells(lines[i + 1]) == width
            j = i + 2
            while j < len(lines) and lines[j].startswith("|"):
                assert _cells(lines[j]) == width, lines[j]
                j += 1
            i = j
        else:
            i += 1


def test_score_and_key_numbers_come_first() -> None:
    report = sample_report()
    md = render(report, "markdown")
    first = md.splitlines()[0]
    assert first.startswith("## ") and f"**{report['score']:.1f}** / 100" in first
    assert md.index("Estimated recoverable") < md.index("### Top findings") < md.index("### Details")
    assert "545.0 µs of 2.35 ms analyzed" in md


def test_findings_table_in_rank_order_with_details_per_finding() -> None:
    report = sample_report()
    md = render(report, "markdown")
    table = md[md.index("### Top findings"):md.index("### Details")]
    positions = [table.index(f"`{f['rule']}`") for f in report["findings"]]
    assert positions == sorted(positions)
    assert md.count("<details><summary>") == len(report["findings"]) == md.count("</details>")
    # the top finding's block holds its recommendation, evidence and fix
    block = md[md.index("<details>"):md.index("</details>")]
    assert "NonMaxSuppressionV3 runs on AI CPU" in block and "**Fix** (code)" in block
    assert "duration: **410.0 µs**" in block and "duration_us" not in block


def test_evidence_table_fix_data_and_command() -> None:
    md = render(sample_report(), "markdown")
    assert "| trans_TransData_3 | NCHW | NC1HWC0 | 35.0 µs |" in md
    assert "```sh\natc --model=ssd.onnx --framework=5 --input_format=NC1HWC0 --soc_version=Ascend310P3\n```" in md
    assert '"TbeConvElemwiseFusionPass": "on"' in md
    assert "| conv3/Conv2D | Conv2D | 240 FLOP/byte | 21 TFLOPS | compute |" in md  # roofline points as a table


def test_statuses_skipped_files_and_notes() -> None:
    report = sample_report()
    md = render(report, "markdown")
    assert "| `aipp-fusion` | ⏭️ skipped | 0 | needs graph (not in this input) |" in md
    assert "| `broken-kb` | ❌ failed | 0 | RuntimeError: boom |" in md
    assert "l2_cache_0_1.csv`: no L2 cache columns" in md
    assert "- no step trace: one analysis window" in md
    # sub-scores only for knowledge bases that ran
    sub = next(line for line in md.splitlines() if line.startswith("| Sub-scores"))
    assert f"aicpu {report['score_detail']['by_kb']['aicpu']:.1f}" in sub and "broken-kb" not in sub and "aipp-fusion" not in sub


def test_special_characters_do_not_break_tables_or_html() -> None:
    report = sample_report()
    report["findings"][0]["title"] = "a | b <script>x</script>\nsecond line"
    report["findings"][0]["ops"] = ["op|with|pipes", "op`tick"]
    md = render(report, "markdown")
    _tables_well_formed(md)
    assert "<script>" not in md
    assert "a \\| b &lt;script&gt;x&lt;/script&gt; second line" in md


def test_no_findings() -> None:
    report = sample_report()
    report["findings"] = []
    md = render(report, "markdown")
    assert "No recoverable time found" in md and "<details>" not in md
    _tables_well_formed(md)


def test_huge_report_stays_under_comment_limit() -> None:
    report = sample_report()
    base = report["findings"]
    many = []
    for i in range(2000):
        f = copy.deepcopy(base[i % len(base)])
        f["title"] = f"{f['title']} #{i}"
        f["evidence"]["table"] = {"columns": ["op", "duration_us", "detail"],
                                  "rows": [[f"op_{i}_{j}", 1.5 * j, "x" * 200] for j in range(20)], "more_rows": 500}
        many.append(f)
    report["findings"] = many
    md = render(report, "markdown")
    assert len(md) < MAX_CHARS
    assert md.count("<details><summary>") == md.count("</details>") > 5
    assert "lower-ranked finding(s) left out" in md
    assert "1975 more findings" in md  # table shows the top 25
    assert "### Knowledge bases" in md and "### Skipped files" in md  # the tail survives truncation
    _tables_well_formed(md)


def test_small_limit_is_respected() -> None:
    md = render(sample_report(), "markdown", max_chars=3000)
    assert len(md) < 3000
