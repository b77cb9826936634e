"""``msprof op`` results (layout ``msprof-op``): real CANN 8.x OPPROF directories (tests/data/ingest_text/msprof_op,
provenance in SOURCES.md). Every expected value is computed here from the CSVs with the csv module."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.ingest import detect, load
from advisor.ingest.msprof_op import BLOCKS_EXTRA
from advisor.report.json_report import validate

DATA = Path(__file__).resolve().parent / "data" / "ingest_text" / "msprof_op"
DEFAULT_RUN = DATA / "shape-256/reports/followups/collect_default_metric_followup/OPPROF_001"
PIPE_RUN = DATA / "shape-256/reports/op/OPPROF_001"
MINIMAL = DATA / "real_cann_minimal/reports/OPPROF_001"
VECTOR = DATA / "real_default_vector_minimal/reports/OPPROF_001"


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _f(text: str) -> float:
    return float("nan") if text in ("NA", "N/A", "") else float(text)


def _weighted(rows: list[dict[str, str]], value: str, weight: str) -> float:
    pairs = [(_f(r[value]), _f(r[weight])) for r in rows if r[value] not in ("NA", "")]
    return sum(v * w for v, w in pairs) / sum(w for _, w in pairs)


def _side(rows: list[dict[str, str]], prefix: str) -> list[dict[str, str]]:
    return [r for r in rows if r["sub_block_id"].startswith(prefix)]


def test_detected_as_msprof_op() -> None:
    [src] = detect(DEFAULT_RUN)
    assert src.layout == "msprof-op" and src.rank is None
    # pointing at the OpBasicInfo file reads its directory
    [src] = detect(DEFAULT_RUN / "OpBasicInfo.csv")
    assert (src.layout, src.root) == ("msprof-op", DEFAULT_RUN)


@pytest.mark.parametrize("run", [DEFAULT_RUN, PIPE_RUN, MINIMAL, VECTOR], ids=lambda p: p.parts[-3])
def test_one_op_row_per_launch_with_basic_info(run: Path) -> None:
    [profile] = load(run)
    [basic] = _rows(run / "OpBasicInfo.csv")
    ops = profile.ops
    assert len(ops) == 1
    op = ops.iloc[0]
    assert op["name"] == basic["Op Name"]
    assert op["duration_us"] == pytest.approx(float(basic["Task Duration(us)"]))
    assert op["block_dim"] == float(basic["Block Dim"])
    assert op["core"] == {"mix": "MIX_AIC", "vector": "AI_VECTOR_CORE"}[basic["Op Type"]]
    assert op["kernel_mode"] == basic["Op Type"]
    assert op["current_freq_mhz"] == float(basic["Current Freq"])
    assert ops["type"].isna().all()  # msprof op records no operator type: none is invented
    assert ops["start_us"].isna().all()
    pipe = _rows(run / "PipeUtilization.csv")
    assert len(profile.extras[BLOCKS_EXTRA]) == len(pipe)
    assert profile.meta.layout == "msprof-op"


def test_pipe_ratios_and_times_aggregate_over_sub_blocks() -> None:
    [profile] = load(DEFAULT_RUN)
    op = profile.ops.iloc[0]
    pipe = _rows(DEFAULT_RUN / "PipeUtilization.csv")
    cube, vec = _side(pipe, "cube"), _side(pipe, "vector")
    aic = {k: _weighted(cube, f"aic_{k}_ratio", "aic_total_cycles") for k in ("cube", "scalar", "mte2")}
    aiv = {k: _weighted(vec, f"aiv_{k}_ratio", "aiv_total_cycles") for k in ("vec", "scalar", "mte2")}
    assert op["aic_mac_ratio"] == pytest.approx(aic["cube"])
    assert op["aiv_scalar_ratio"] == pytest.approx(aiv["scalar"])
    assert op["aiv_vec_ratio"] == pytest.approx(aiv["vec"])
    # the unified pipe ratios are the busier side's (issue 28.5): its time x its busiest pipe
    aic_time = sum(_f(r["aic_time(us)"]) for r in cube) / len(cube)
    aiv_time = sum(_f(r["aiv_time(us)"]) for r in vec) / len(vec)
    aic_busy = aic_time * max(_weighted(cube, c, "aic_total_cycles") for c in pipe[0] if c.startswith("aic_")
                              and c.endswith("_ratio") and any(r[c] not in ("NA", "") for r in cube))
    aiv_busy = aiv_time * max(_weighted(vec, c, "aiv_total_cycles") for c in pipe[0] if c.startswith("aiv_")
                              and c.endswith("_ratio") and any(r[c] not in ("NA", "") for r in vec))
    side = aiv if aiv_busy > aic_busy else aic
    assert op["scalar_ratio"] == pytest.approx(side["scalar"]) and op["mte2_ratio"] == pytest.approx(side["mte2"])
    if side is aiv:
        assert op["vec_ratio"] == pytest.approx(aiv["vec"]) and np.isnan(op["mac_ratio"])
    else:
        assert op["mac_ratio"] == pytest.approx(aic["cube"]) and np.isnan(op["vec_ratio"])
    # per-core average time of the leading (cube) side, as op_summary's aicore_time
    assert op["aicore_time_us"] == pytest.approx(sum(_f(r["aic_time(us)"]) for r in cube) / len(cube))
    assert op["aiv_time_us"] == pytest.approx(sum(_f(r["aiv_time(us)"]) for r in vec) / len(vec))
    assert op["aic_total_cycles"] == sum(_f(r["aic_total_cycles"]) for r in cube)
    # FLOPs are op totals
    arith = _rows(DEFAULT_RUN / "ArithmeticUtilization.csv")
    assert op["vector_fops"] == sum(_f(r["aiv_vec_fops"]) for r in _side(arith, "vector")) == 4 * 16640
    assert op["cube_fops"] == 0.0
    # L2 hit rates weighted by the sub-blocks' cycles
    l2 = _rows(DEFAULT_RUN / "L2Cache.csv")
    assert op["aic_total_hit_rate"] == pytest.approx(
        _weighted(_side(l2, "cube"), "aic_total_hit_rate(%)", "aic_total_cycles"))


def test_bandwidth_times_core_time_is_the_bytes_moved() -> None:
    """roofline reads bytes as (main_mem_read_bw + write) x aicore_time: they must be what the sub-blocks moved."""
    for run in (DEFAULT_RUN, MINIMAL):
        [profile] = load(run)
        op = profile.ops.iloc[0]
        mem = _rows(run / "Memory.csv")
        volume = sum(_f(r["read_main_memory_datas(KB)"]) + _f(r["write_main_memory_datas(KB)"]) for r in mem) * 1024
        got = (op["main_mem_read_bw"] + op["main_mem_write_bw"]) * op["aicore_time_us"] * 1e3
        assert got == pytest.approx(volume, rel=1e-9)
        # the file's per-sub-block bandwidths are GiB/s over Task Duration: they give the same bytes
        [basic] = _rows(run / "OpBasicInfo.csv")
        bw_sum = sum(_f(r[f"{s}_main_mem_{d}_bw(GB/s)"]) for r in mem for s in ("aic", "aiv")
                     for d in ("read", "write") if r[f"{s}_main_mem_{d}_bw(GB/s)"] != "NA")
        assert bw_sum * 2 ** 30 * float(basic["Task Duration(us)"]) * 1e-6 == pytest.approx(volume, rel=2e-3)


def test_vector_kernel_and_missing_blocks_are_said() -> None:
    [profile] = load(VECTOR)
    op = profile.ops.iloc[0]
    pipe = _rows(VECTOR / "PipeUtilization.csv")
    assert op["aicore_time_us"] == pytest.approx(sum(_f(r["aiv_time(us)"]) for r in pipe) / len(pipe))
    assert op["vec_ratio"] == pytest.approx(_weighted(pipe, "aiv_vec_ratio", "aiv_total_cycles"))
    assert op["memory_bound"] == pytest.approx(op["mte2_ratio"] / op["vec_ratio"])
    assert any("3 block(s) where Block Dim is 8" in n for n in profile.meta.notes)


def _stamp_copy(src: Path, dst: Path, stamp: str) -> None:
    """Copy one launch's CSVs into a several-launch layout: ``<Metric>_<time>.csv`` (msopprof user guide)."""
    dst.mkdir(parents=True)
    for f in src.glob("*.csv"):
        shutil.copyfile(f, dst / f"{f.stem}_{stamp}.csv")


def test_several_launches_in_launch_order(tmp_path: Path) -> None:
    opprof = tmp_path / "OPPROF_20260910120000_ABCDEFGH"
    _stamp_copy(PIPE_RUN, opprof / "main_kernel_mix_aic" / "1", "20260910120001200")
    _stamp_copy(DEFAULT_RUN, opprof / "main_kernel_mix_aic" / "0", "20260910120001100")
    _stamp_copy(VECTOR, opprof / "add_custom" / "0", "20260910120001150")
    [src] = detect(opprof)
    assert src.layout == "msprof-op"
    [profile] = load(opprof)
    ops = profile.ops
    assert ops["name"].astype(str).tolist() == ["main_kernel_mix_aic", "sanitized_add_custom_vector",
                                                "main_kernel_mix_aic"]
    assert ops["duration_us"].tolist() == pytest.approx([9.2, 9.22, 8.58])
    blocks = profile.extras[BLOCKS_EXTRA]
    assert len(blocks) == 6 + 3 + 6
    assert sorted(profile.meta.config["aic_metrics"]) == sorted(
        ["PipeUtilization", "ArithmeticUtilization", "Memory", "L2Cache", "ResourceConflictRatio"])


def test_each_device_is_a_rank(tmp_path: Path) -> None:
    opprof = tmp_path / "OPPROF_20260910120000_ABCDEFGH"
    for dev in (0, 1):
        _stamp_copy(DEFAULT_RUN, opprof / f"device{dev}" / "main_kernel_mix_aic" / "0", "20260910120001100")
    sources = detect(opprof)
    assert [(s.layout, s.rank) for s in sources] == [("msprof-op", 0), ("msprof-op", 1)]


def test_opbasicinfo_without_duration_is_unusable(tmp_path: Path) -> None:
    bad = tmp_path / "OPPROF_20260910120000_ABCDEFGH"
    shutil.copytree(PIPE_RUN, bad)
    (bad / "OpBasicInfo.csv").write_text("Op Name,Op Type,Block Dim\nk,mix,2\n", encoding="utf-8")
    result = CliRunner().invoke(main, ["analyze", str(bad), "--quiet"])
    assert result.exit_code == 2
    assert "OpBasicInfo.csv" in result.stderr and "Task Duration" in result.stderr
    assert "Traceback" not in result.stderr and len(result.stderr.strip().splitlines()) == 1


@pytest.mark.parametrize("run", [DEFAULT_RUN, MINIMAL, VECTOR], ids=lambda p: p.parts[-3])
def test_analyze_msprof_op_end_to_end(run: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["analyze", str(run), "--format", "json", "-o", str(out), "--quiet"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    validate(report)
    assert report["input"]["layout"] == "msprof-op"
    assert report["summary"]["ops"] == 1
    [basic] = _rows(run / "OpBasicInfo.csv")
    assert report["summary"]["device_time_us"] == pytest.approx(float(basic["Task Duration(us)"]), abs=1e-3)
    for f in report["findings"]:
        assert f["estimated_saving_us"] <= report["summary"]["device_time_us"] + 1e-6


def test_atlas_inference_rows_without_block_ids(tmp_path: Path) -> None:
    """Atlas inference chips (msopprof docs, "Atlas inference products" tables): AI Core columns only, no
    block_id/sub_block_id; the vector unit's ratio is ``aic_vec_ratio``. The header is the docs'; values made up."""
    run = tmp_path / "OPPROF_20260910120000_INFERENC"
    run.mkdir()
    (run / "OpBasicInfo.csv").write_text(
        "Op Name,Op Type,Task Duration(us),Block Dim,Mix Block Dim,Device Id,Pid,Current Freq,Rated Freq,\n"
        "k,aicore,5.0,2,NA,0,1,1000,1000,\n", encoding="utf-8")
    (run / "PipeUtilization.csv").write_text(
        "aic_time(us),aic_total_cycles,aic_vec_ratio,aic_mte2_ratio\n2.0,2000,0.5,0.25\n4.0,6000,0.1,0.75\n",
        encoding="utf-8")
    [profile] = load(run)
    op = profile.ops.iloc[0]
    assert op["core"] == "AI_CORE"
    assert op["aicore_time_us"] == pytest.approx(3.0)
    assert op["vec_ratio"] == pytest.approx((0.5 * 2000 + 0.1 * 6000) / 8000)
    assert op["mte2_ratio"] == pytest.approx((0.25 * 2000 + 0.75 * 6000) / 8000)
