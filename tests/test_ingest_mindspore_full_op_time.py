"""MindSpore 1.x ``aicore_intermediate_N_detail.csv`` whose op-name column is headed ``full_op_time`` (or
``full_kernel_time``): real MindInsight test resources (tests/data/ingest_text/mindspore_legacy_full_op_time,
provenance in its SOURCES.md). Expected values are read from the files with the csv module, not the reader."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.ingest import load
from advisor.report.json_report import validate

FIXTURE = Path(__file__).resolve().parent / "data" / "ingest_text" / "mindspore_legacy_full_op_time"


def _rows(name: str) -> list[dict[str, str]]:
    with open(FIXTURE / name, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def test_full_op_time_header_is_read_as_op_names() -> None:
    [profile] = load(FIXTURE)
    detail = _rows("aicore_intermediate_1_detail.csv")
    assert list(detail[0]) == ["full_op_time", "execution_time", "execution_frequency"]
    ops = profile.ops
    expected_rows = sum(int(r["execution_frequency"]) for r in detail)
    assert len(ops) == expected_rows == 10
    assert ops["name"].astype(str).tolist() == [r["full_op_time"] for r in detail]
    assert ops["duration_us"].tolist() == pytest.approx([float(r["execution_time"]) * 1000.0 for r in detail])
    assert set(ops["core"].astype(str)) == {"AI_CORE"}
    # types, block dims and tensors joined from framework_raw by the full op name
    fw = {r["full_kernel_name"]: r for r in _rows("framework_raw_1.csv")}
    assert ops["type"].astype(str).tolist() == [fw[r["full_op_time"]]["kernel_type"] for r in detail]
    assert ops["block_dim"].tolist() == [float(fw[r["full_op_time"]]["block_dim"]) for r in detail]
    conv = ops[ops["type"].astype(str) == "Conv2D"].iloc[0]
    assert conv["input_shapes"] == "32,1,32,32,16;25,1,16,16"
    assert conv["input_formats"] == "NC1HWC0;FRACTAL_Z"
    assert not profile.meta.files_skipped
    assert len(profile.op_stats) == len(_rows("aicore_intermediate_1_type.csv"))


def test_full_kernel_time_header_too(tmp_path: Path) -> None:
    """The same resource at a later commit (904ec102) names the column ``full_kernel_time``."""
    shutil.copytree(FIXTURE, tmp_path / "profiler")
    detail = tmp_path / "profiler" / "aicore_intermediate_1_detail.csv"
    detail.write_text(detail.read_text(encoding="utf-8").replace("full_op_time,", "full_kernel_time,", 1),
                      encoding="utf-8")
    [profile] = load(tmp_path / "profiler")
    assert len(profile.ops) == 10
    assert profile.ops["duration_us"].sum() == pytest.approx(
        sum(float(r["execution_time"]) for r in _rows("aicore_intermediate_1_detail.csv")) * 1000.0)


def test_analyze_full_op_time_end_to_end(tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["analyze", str(FIXTURE), "--format", "json", "-o", str(out), "--quiet"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    validate(report)
    assert report["input"]["layout"] == "mindspore-legacy"
    assert report["summary"]["ops"] == 10
