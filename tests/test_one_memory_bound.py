"""One memory-bound answer per report (issue 28.5): the model summary's memory_bound share, the memory-bound
knowledge base and the roofline knowledge base all read the shared op classification
(``advisor.toolkit.bound.memory_bound_share``), so on every shared sample they name the same ops and the same share
of the compute time -- where one said 98.7 % of the time, another 2.2 % and the third called the same conv
compute bound."""

from __future__ import annotations

import csv
from pathlib import Path

import pytest

from advisor.pipeline.analysis import AnalysisOptions, run_analysis
from tests.golden import SAMPLES, sample_paths

COMPUTE = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV")
PRESENT = [p for p in sample_paths() if (SAMPLES / p).exists()]


def _report(rel: str, tmp_path: Path) -> dict:
    neutral = tmp_path / "pyproject.toml"
    neutral.write_text("", encoding="utf-8")
    return run_analysis(SAMPLES / rel, options=AnalysisOptions(pyproject=neutral), workers=1).report


def _findings(report: dict) -> list[dict]:
    out, todo = [], list(report["findings"])
    while todo:
        f = todo.pop()
        out.append(f)
        todo.extend(f.get("symptoms") or [])
    return out


@pytest.mark.skipif(not PRESENT, reason="../shared/samples not present")
@pytest.mark.parametrize("rel", PRESENT)
def test_model_summary_memory_bound_kb_and_roofline_agree(rel: str, tmp_path: Path) -> None:
    report = _report(rel, tmp_path)
    ms = report.get("model_summary") or {}
    summaries = [m["memory_bound"] for m in (ms.get("ranks") or [ms]) if m.get("memory_bound")]
    shares = {round(m["share_of_time"], 4) for m in summaries}
    for m in summaries:
        assert 0.0 <= m["share_of_time"] <= 1.0 and m["ops_over"] <= m["ops_with_ratio"]
        assert "shared op classification" in m["basis"]
    findings = _findings(report)
    layers = [f for f in findings if f["rule"] == "memory-bound.layers"]
    roof_memory = [f for f in findings if f["rule"] == "roofline.memory-bound"]
    roof_other = [f for f in findings if f["rule"].startswith("roofline.") and f["rule"] != "roofline.memory-bound"]
    # the finding's ops (split among the causes that absorb them as a symptom, and what is left) make up the
    # model summary's memory-bound ops; its share is the model summary's
    kb_ops = {op for f in layers for op in f["ops"]}
    for f in layers:
        assert round(f["evidence"]["share_of_compute_time"], 4) in shares
        if len(summaries) == 1:
            assert f["evidence"]["memory_bound_us"] == pytest.approx(summaries[0]["memory_bound_us"], abs=1e-3)
            assert f["evidence"]["layers"] == summaries[0]["ops"]
        assert f["estimated_saving_us"] <= f["evidence"]["memory_bound_us"] + 1e-6
    if layers and len(summaries) == 1:
        assert len(kb_ops) <= summaries[0]["ops"]
    for f in roof_memory:  # the roofline's memory-bound ops are among them, with the same share
        assert round(f["evidence"]["memory_bound_share_of_compute"], 4) in shares
        if layers:
            assert set(f["ops"]) <= kb_ops
    # no op is memory bound in one section and compute / latency / scalar / no clear bound in another
    assert not kb_ops & {op for f in roof_other for op in f["ops"]}


LONE_CSV = [p for p in PRESENT if p.endswith(".csv")]


@pytest.mark.skipif(not LONE_CSV, reason="../shared/samples not present")
@pytest.mark.parametrize("rel", LONE_CSV)
def test_the_share_is_of_every_compute_task_in_the_file(rel: str, tmp_path: Path) -> None:
    """The denominator, recomputed from the raw CSV: every AI Core / vector / mix task's duration."""
    rows = list(csv.DictReader((SAMPLES / rel).open(encoding="utf-8")))
    core = next((k for k in ("Task Type", "Accelerator Core", "Core Type") if k in rows[0]), None)
    dur = next((k for k in ("Task Duration(us)", "Duration(us)") if k in rows[0]), None)
    if core is None or dur is None:
        pytest.skip(f"{rel}: no task type / duration columns (another layout)")
    tasks = [float(r[dur]) for r in rows if r[core] in COMPUTE and float(r[dur] or 0) > 0]
    report = _report(rel, tmp_path)
    mb = (report.get("model_summary") or {}).get("memory_bound")
    if mb is None:
        return
    assert mb["ops_with_ratio"] == len(tasks)
    assert mb["share_of_time"] == pytest.approx(mb["memory_bound_us"] / sum(tasks), abs=1e-4)
    for f in _findings(report):
        if f["rule"] == "memory-bound.layers":
            assert f["evidence"]["compute_us"] == pytest.approx(sum(tasks), rel=1e-6)
