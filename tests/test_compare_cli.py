"""`advisor compare` on the command line: saved reports, real profiles of different layouts, exit codes."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from advisor.compare.runs import is_saved_report
from advisor.report import render
from advisor.report.markdown import MAX_CHARS
from tests._report_sample import sample_report

if TYPE_CHECKING:
    from tests.conftest import CliFixture

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
MSINSIGHT = SAMPLES / "Ascend__msinsight"


@pytest.fixture
def reports(tmp_path: Path) -> tuple[Path, Path, Path]:
    """base, a 10 % slower run with 2 more TransData and the Mish fixed, and a copy of base."""
    base, slower, same = tmp_path / "base.json", tmp_path / "slower.json", tmp_path / "same.json"
    base.write_text(render(sample_report(), "json"))
    slower.write_text(render(sample_report(scale=1.1, n_transdata=6, with_mish=False), "json"))
    same.write_text(render(sample_report(), "json"))
    return base, slower, same


def test_regression_exits_1(cli: CliFixture, reports: tuple[Path, Path, Path]) -> None:
    base, slower, _ = reports
    rc, out, err = cli("compare", str(base), str(slower), "--format", "json")
    assert rc == 1
    cmp = json.loads(out)
    assert cmp["regression"]["regressed"] and "device time +10.03 %" in err
    assert cmp["base"]["source"] == cmp["new"]["source"] == "report"


def test_within_limit_and_improvement_exit_0(cli: CliFixture, reports: tuple[Path, Path, Path]) -> None:
    base, slower, same = reports
    assert cli("compare", str(base), str(slower), "--max-regression", "10.5")[0] == 0
    assert cli("compare", str(slower), str(base))[0] == 0  # faster
    rc, out, _ = cli("compare", str(base), str(same), "--format", "json")
    assert rc == 0 and json.loads(out)["device_time"]["delta_us"] == 0


def test_score_drop_gate(cli: CliFixture, reports: tuple[Path, Path, Path], tmp_path: Path) -> None:
    base, _, _ = reports
    worse = json.loads(base.read_text())
    worse["score"] = worse["score"] - 4
    p = tmp_path / "worse.json"
    p.write_text(json.dumps(worse))
    assert cli("compare", str(base), str(p))[0] == 0
    rc, _, err = cli("compare", str(base), str(p), "--max-score-drop", "3")
    assert rc == 1 and "score -4.0 points" in err


def test_terminal_output(cli: CliFixture, reports: tuple[Path, Path, Path]) -> None:
    base, slower, _ = reports
    rc, out, _ = cli("compare", str(base), str(slower))
    assert rc == 1
    assert "REGRESSION" in out and "TransData" in out and "1 fixed" in out


def test_markdown_output_to_directory(cli: CliFixture, reports: tuple[Path, Path, Path], tmp_path: Path) -> None:
    base, slower, _ = reports
    rc, _, err = cli("compare", str(base), str(slower), "--format", "markdown", "-o", f"{tmp_path}/pr/")
    assert rc == 1
    files = list((tmp_path / "pr").iterdir())
    assert len(files) == 1 and re.fullmatch(r"advisor_compare_\d{8}-\d{6}\.md", files[0].name)
    md = files[0].read_text("utf-8")
    assert md.startswith("## ❌ advisor compare: regression")
    assert "| `TransData` | 4 | 6 | 140.0 µs | 210.0 µs | +70.0 µs | +50.00 % |" in md
    assert "`mish-leakyrelu.decomposed-mish`" in md[md.index("**Fixed**"):]
    assert len(md) < MAX_CHARS


@pytest.mark.parametrize("content", ["{not json", '{"schema_version": "9", "tool": {}}', '{"tool": 1}',
                                     '{"schema_version": "1", "tool": {"name": "advisor", "version": "x"}}'])
def test_bad_report_exits_2(cli: CliFixture, reports: tuple[Path, Path, Path], tmp_path: Path, content: str) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text(content)
    rc, _, err = cli("compare", str(reports[0]), str(bad))
    assert rc == 2 and "Traceback" not in err and str(bad) in err and len(err.strip().splitlines()) == 1


def test_missing_path_and_graph_for_report_exit_2(cli: CliFixture, reports: tuple[Path, Path, Path], tmp_path: Path) -> None:
    rc, _, err = cli("compare", str(reports[0]), str(tmp_path / "nope"))
    assert rc == 2 and "no such file" in err
    rc, _, err = cli("compare", str(reports[0]), str(reports[1]), "--graph-new", str(reports[0]))
    assert rc == 2 and "--graph-new applies to a profile" in err
    assert cli("compare", str(reports[0]), str(reports[1]), "--max-regression", "-1")[0] == 2


def test_report_detection_reads_only_the_start(tmp_path: Path, reports: tuple[Path, Path, Path]) -> None:
    assert is_saved_report(reports[0])
    trace = tmp_path / "trace_view.json"
    trace.write_text('[{"ph": "X", "name": "op", "ts": 1, "dur": 2}]')
    assert not is_saved_report(trace)
    trace2 = tmp_path / "trace2.json"
    trace2.write_text('{"traceEvents": [' + ",".join(['{"ph": "X"}'] * 1000) + "]}")
    assert not is_saved_report(trace2)
    assert not is_saved_report(tmp_path)


needs_samples = pytest.mark.skipif(not MSINSIGHT.is_dir(), reason="../shared/samples not available")


@needs_samples
def test_across_layouts_samecli(cli: CliFixture) -> None:
    """An msprof op_summary CSV and the torch_npu directory of the same GPT-3 run compare as equal."""
    msprof = MSINSIGHT / "server/src/test/test_data/test_kernel_parse/op_summary_1.csv"
    torch_npu = MSINSIGHT / "server/src/test/test_data/test_rank_0"
    rc, out, err = cli("compare", str(msprof), str(torch_npu), "--format", "json")
    assert rc == 0, err
    cmp = json.loads(out)
    assert cmp["base"]["layout"] != cmp["new"]["layout"]
    assert cmp["base"]["source"] == cmp["new"]["source"] == "profile"
    assert cmp["device_time"]["base_us"] > 0 and cmp["device_time"]["delta_us"] == 0
    assert cmp["op_types"] and all(r["delta_us"] == 0 for r in cmp["op_types"])
    # every finding on the op table is found again; the torch_npu directory also holds communication data
    # (communication.json, step_trace_time.csv) that a lone op_summary CSV lacks, so it may add findings on it
    assert not cmp["findings"]["fixed"] and len(cmp["findings"]["unchanged"]) == cmp["base"]["findings"]
    for f in cmp["findings"]["new"]:
        assert "communication" in f["rule"] or f["kb"] == "communication", f


@needs_samples
def test_two_ranks_profile_against_saved_report(cli: CliFixture, tmp_path: Path) -> None:
    """Rank 1 against rank 0 of a torch_npu run: full op-type table from the profiles; a saved report works too."""
    text = MSINSIGHT / "test/data/pytorch/text/level2"
    rc, out, err = cli("compare", str(text / "rank0_ascend_pt"), str(text / "rank1_ascend_pt"), "--format", "json")
    assert rc == 0, err  # rank 1 is 2.4 % faster
    cmp = json.loads(out)
    assert cmp["device_time"]["delta_pct"] == pytest.approx(-2.4, abs=0.05)
    assert cmp["op_types_complete"] and len(cmp["op_types"]) > 15
    top = cmp["op_types"][0]
    assert top["type"] == "hcom_allReduce_" and top["delta_us"] < 0
    # the same comparison with BASE as a saved report: the gate flips when NEW is the slower rank
    rc, saved, _ = cli("analyze", str(text / "rank1_ascend_pt"), "--format", "json", "-q")
    report = tmp_path / "rank1.json"
    report.write_text(saved)
    rc, out, err = cli("compare", str(report), str(text / "rank0_ascend_pt"), "--format", "json")
    assert rc == 1 and "device time +2.4" in err
