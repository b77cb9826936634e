"""The model summary as a person reads it in the terminal, Markdown and HTML reports: only the quantities the run
recorded, each with the file it comes from, "not recorded" where a file has no values (never 0), and numbers that
agree with the input files."""

from __future__ import annotations

import csv
import re
from pathlib import Path

import pytest

from advisor.pipeline.analysis import run_analysis
from advisor.report import render
from advisor.report.summary_rows import model_summary_rows
from tests._report_sample import sample_report

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"
COMPUTE_ADVICE = SAMPLES / "Ascend__msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv"
LEVEL1_RANK0 = SAMPLES / "Ascend__msinsight/test/data/pytorch/text/level1/rank0_ascend_pt"
MS_910A = SAMPLES / ("mindspore-ai__mindinsight/tests/utils/resource/profiler/"
                     "PROF_000001_20230818142704322_COJGGGCANRMICFBC")
SUPERKERNEL_STATIC = SAMPLES / ("hicann__cann-learning-hub/tutorials/ascendc_operator_development_V2/"
                                "06_advanced_features/src/06.04_super_kernel/performance_case/profiling-static/"
                                "PROF_000001_20260831222150690_02478372PGRDPKHI")
COMPUTE_CORES = {"AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV"}
needs_samples = pytest.mark.skipif(not SAMPLES.is_dir(), reason="../shared/samples not present")


def _section(markdown: str) -> str:
    m = re.search(r"### Model summary\n\n(.*?)(?=\n### |\Z)", markdown, re.S)
    return m.group(1) if m else ""


def _html_section(html: str) -> str:
    m = re.search(r'<section class="card" id="model-summary">(.*?)</section>', html, re.S)
    return m.group(1) if m else ""


def _rows(section: str) -> dict[str, list[str]]:
    out = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0] not in ("", "---"):
            out[cells[0]] = cells[1:]
    return out


@needs_samples
def test_a_kernel_details_with_shapes_and_pipe_metrics_in_all_three_reports() -> None:
    report = run_analysis(COMPUTE_ADVICE).report
    rows = _rows(_section(render(report, "markdown")))
    assert {"cube work", "vector work", "average block dim", "memory traffic", "Memory Bound"} <= set(rows)
    for _value, source in rows.values():
        assert source.startswith("kernel_details.csv") or "rules/platforms.yaml" in source, source
    cube = report["model_summary"]["cube"]
    assert 0 < cube["utilization"] <= 1
    assert f"utilization {cube['utilization'] * 100:.1f} %" in rows["cube work"][0]
    # block dim: weighted by each compute task's Duration(us), read here from the CSV itself
    raw = [r for r in csv.DictReader(COMPUTE_ADVICE.open()) if r["Accelerator Core"] in COMPUTE_CORES
           and float(r["Block Dim"]) > 0]
    weighted = sum(float(r["Block Dim"]) * float(r["Duration(us)"]) for r in raw) / sum(
        float(r["Duration(us)"]) for r in raw)
    assert rows["average block dim"][0].startswith(f"{round(weighted, 2):g} weighted by task time")
    assert f"{len(raw)} compute tasks" in rows["average block dim"][0]
    assert rows["average block dim"][1] == "kernel_details.csv: Block Dim"
    # no traffic measured in this capture (PipeUtilization): said so, not shown as 0
    assert "measured not recorded" in rows["memory traffic"][0] and "0 B" not in rows["memory traffic"][0]

    html = _html_section(render(report, "html"))
    text = render(report, "terminal")
    for label in ("cube work", "average block dim", "Memory Bound"):
        assert f"<td>{label}</td>" in html and label in text
    assert "kernel_details.csv: Block Dim" in html and "kernel_details.csv: Block Dim" in text


@needs_samples
def test_l2_cache_without_hit_rates_reads_not_recorded() -> None:
    report = run_analysis(LEVEL1_RANK0).report
    rows = _rows(_section(render(report, "markdown")))
    value, source = rows["L2 hit rate"]
    assert value.startswith("not recorded") and "%" not in value
    assert source == "l2_cache.csv: Hit Rate"
    assert "L2 hit rate" in render(report, "terminal")


@needs_samples
def test_a_profile_without_metrics_or_shapes_has_no_summary_section() -> None:
    report = run_analysis(MS_910A).report
    assert model_summary_rows(report["model_summary"])[0] == []
    assert "Model summary" not in render(report, "markdown")
    assert 'id="model-summary"' not in render(report, "html")
    assert "Model summary" not in render(report, "terminal")


@needs_samples
def test_cube_work_the_shapes_do_not_give_is_not_shown_as_zero() -> None:
    """GroupedMatmul runs as MIX_AIC: cube work the cost model cannot size from its shapes. The summary leaves its
    time out of utilization and says how much, instead of 0 GOPS of cube work."""
    report = run_analysis(SUPERKERNEL_STATIC).report
    ms = report["model_summary"]
    assert ms["cube"]["tasks"] == 0 and ms["work_unknown_time_us"] > 0
    rows = _rows(_section(render(report, "markdown")))
    assert "cube work" not in rows and "work not known" in rows
    assert 0 < ms["vector"]["utilization"] <= 1


@needs_samples
@pytest.mark.parametrize("path", [COMPUTE_ADVICE, SUPERKERNEL_STATIC, LEVEL1_RANK0,
                                  SAMPLES / "Ascend__workload_analysis/op_modeling/data/ops/Add/Add_Ascend310_test.csv"])
def test_utilizations_are_shares(path: Path) -> None:
    ms = run_analysis(path).report["model_summary"]
    for value in (ms.get("chip_utilization"), (ms.get("cube") or {}).get("utilization"),
                  (ms.get("vector") or {}).get("utilization")):
        assert value is None or 0 <= value <= 1


def test_several_ranks_one_row_per_quantity_with_the_range() -> None:
    one = sample_report(with_model_summary=True)["model_summary"]
    other = {**one, "average_block_dim": {**one["average_block_dim"], "time_weighted": 4.0}}
    rows, caption = model_summary_rows({"ranks": [{"rank": 0, **one}, {"rank": 3, **other}]})
    labels = [r.label for r in rows]
    assert len(labels) == len(set(labels)) == len(model_summary_rows(one)[0])
    (bd,) = [r for r in rows if r.label.startswith("average block dim")]
    assert bd.label == "average block dim (rank 0)" and "2 ranks from 4 (rank 3) to 8 (rank 0)" in bd.value
    assert "2 ranks" in caption


def test_a_static_audit_says_its_figures_are_estimates() -> None:
    ms = {**sample_report(with_model_summary=True)["model_summary"], "source": "estimate (cost model)"}
    rows, caption = model_summary_rows(ms)
    assert rows and "estimates" in caption
