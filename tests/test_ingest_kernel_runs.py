"""A folder holding msprof op's files (``OpBasicInfo.csv`` + metric CSVs) and an ``op_summary`` of the same
program (advisor/ingest/kernel_runs.py): both are read -- the ops are the op_summary's timed launches (launch count
and time statistics), msprof op's per-block metrics are attached to the kernel it measured and its per-op metrics
given to that kernel's launches where the op_summary lacks them. The msprof op files are a real capture
(../shared/samples, Ryan12210801__chunk-scaled-dot-kkt-ascendc); the op_summary is generated here (no public
folder holds both). Expected values are computed with ``csv``."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from advisor.ingest import detect, load
from tests.conftest import SHARED

KKT = SHARED / "samples" / ("Ryan12210801__chunk-scaled-dot-kkt-ascendc/results/device_profiles/"
                            "perf_official_like_k128_20260723_173539/OPPROF_20260723173540_TGVEYIXEDZNYMEZV")
pytestmark = pytest.mark.skipif(not KKT.is_dir(), reason="shared samples not present")

HEADER = ("Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,Task Start Time(us),"
          "Task Duration(us),Task Wait Time(us),Block Dim,Mix Block Dim,Input Shapes,Input Data Types,Input Formats,"
          "Output Shapes,Output Data Types,Output Formats")
KKT_DURATIONS = [610.5, 590.25, 580.0, 577.75, 576.5, 575.0, 576.25, 579.5, 575.5, 574.75, 576.0]
"""11 launches (``--warm-up=10 --launch-count=1``), the first ones slower."""


def _rows(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _folder(tmp_path: Path, block_dim: int = 20, kernel: str = "ChunkScaledDotKkt") -> Path:
    """The msprof op files and an op_summary of 11 launches of ``kernel`` and 3 of a Cast, in one folder."""
    run = tmp_path / "run"
    shutil.copytree(KKT, run)
    lines = [HEADER]
    start = 1_753_000_000_000_000.0
    task = 1
    for duration in KKT_DURATIONS:
        lines.append(f'0,4294967295,{task},2,{kernel},{kernel},static,MIX_AIC,{start:.3f},{duration},0,'
                     f'{block_dim},{block_dim},"""64,128""",FLOAT16,ND,"""64,64""",FLOAT,ND')
        start += duration + 40.0
        task += 1
        if task in (4, 8, 11):
            lines.append(f'0,4294967295,{task},2,Cast_1,Cast,static,AI_VECTOR_CORE,{start:.3f},3.5,0,8,0,'
                         '"""64,64""",FLOAT,ND,"""64,64""",FLOAT16,ND')
            start += 10.0
            task += 1
    (run / "op_summary_0_1.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run


def test_both_are_read_the_ops_are_the_timed_launches(tmp_path: Path) -> None:
    run = _folder(tmp_path)
    [src] = detect(run)
    assert src.layout == "msprof-op"
    [profile] = load(run)
    summary = _rows(run / "op_summary_0_1.csv")
    ops = profile.ops
    assert len(ops) == len(summary) == 14
    kkt = ops[ops["name"] == "ChunkScaledDotKkt"]
    assert len(kkt) == 11
    assert kkt["duration_us"].tolist() == pytest.approx(
        [float(r["Task Duration(us)"]) for r in summary if r["Op Name"] == "ChunkScaledDotKkt"])
    assert kkt["start_us"].notna().all()  # timed on one clock, unlike msprof op's replays
    read = {Path(p).name for p in profile.meta.files_read}
    assert {"op_summary_0_1.csv", "OpBasicInfo.csv", "PipeUtilization.csv", "L2Cache.csv"} <= read
    notes = " ".join(profile.meta.notes)
    assert "msprof op beside op_summary_0_1.csv" in notes
    assert "its 14 timed launches" in notes


def test_per_block_metrics_attach_to_the_kernel_msprof_op_measured(tmp_path: Path) -> None:
    run = _folder(tmp_path)
    [basic] = _rows(run / "OpBasicInfo.csv")
    pipe = _rows(run / "PipeUtilization.csv")
    [profile] = load(run)
    blocks = profile.kernel_blocks
    assert len(blocks) == len(pipe)
    assert set(blocks["name"]) == {"ChunkScaledDotKkt"}  # the ops row it belongs to
    assert set(blocks["kernel_name"]) == {basic["Op Name"]}  # msprof op's own name kept
    cube = [r for r in pipe if r["sub_block_id"] == "cube0"]
    got = blocks[blocks["side"] == "aic"]["aic_mac_ratio"].tolist()
    assert got == pytest.approx([float(r["aic_cube_ratio"]) for r in cube])
    launches = profile.extras["msprof_op_launches"]
    assert launches["kernel"].tolist() == ["ChunkScaledDotKkt"]
    assert launches["duration_us"].tolist() == pytest.approx([float(basic["Task Duration(us)"])])


def test_metrics_op_summary_lacks_are_given_from_msprof_op(tmp_path: Path) -> None:
    """msprof ran without --aic-metrics: the kernel's launches get msprof op's per-op figures (cube ratio weighted
    by each cube core's cycles, from the per-block CSV); the Cast, which msprof op did not measure, gets none."""
    run = _folder(tmp_path)
    pipe = _rows(run / "PipeUtilization.csv")
    cube = [r for r in pipe if r["sub_block_id"] == "cube0"]
    weights = [float(r["aic_total_cycles"]) for r in cube]
    mac = sum(float(r["aic_cube_ratio"]) * w for r, w in zip(cube, weights, strict=True)) / sum(weights)
    [profile] = load(run)
    ops = profile.ops
    kkt = ops[ops["name"] == "ChunkScaledDotKkt"]
    assert kkt["aic_mac_ratio"].tolist() == pytest.approx([mac] * 11, rel=1e-6)
    assert ops[ops["name"] == "Cast_1"]["aic_mac_ratio"].isna().all()
    assert "given to its launches from msprof op" in " ".join(profile.meta.notes)


def test_another_block_dim_attaches_blocks_but_gives_no_metrics(tmp_path: Path) -> None:
    run = _folder(tmp_path, block_dim=40)
    [profile] = load(run)
    assert len(profile.kernel_blocks) == len(_rows(run / "PipeUtilization.csv"))
    assert "aic_mac_ratio" not in profile.ops or profile.ops["aic_mac_ratio"].isna().all()
    assert any("Block Dim 20 where op_summary_0_1.csv's launches ran 40" in n for n in profile.meta.notes)


def test_a_kernel_the_op_summary_does_not_hold_is_skipped_saying_why(tmp_path: Path) -> None:
    run = _folder(tmp_path, kernel="OtherKernel")
    [profile] = load(run)
    assert len(profile.ops) == 14 and not len(profile.kernel_blocks)
    [skip] = [s for s in profile.meta.files_skipped if "msprof op launch" in s.reason]
    assert Path(skip.path) == run
    assert "ChunkScaledDotKkt_1f444be706a062fefb190a53c330768a_0_mix_aic" in skip.reason
    assert "OtherKernel (11)" in skip.reason and "analyze the msprof op result on its own" in skip.reason


def test_unreadable_op_summary_leaves_msprof_op_alone_and_lists_it(tmp_path: Path) -> None:
    run = _folder(tmp_path)
    (run / "op_summary_0_1.csv").write_text("not,an,op summary\n1,2,3\n", encoding="utf-8")
    [profile] = load(run)
    assert len(profile.ops) == 1 and profile.ops.iloc[0]["name"].startswith("ChunkScaledDotKkt_")
    assert any(Path(s.path).name == "op_summary_0_1.csv" for s in profile.meta.files_skipped)


def test_analyze_end_to_end(cli, tmp_path: Path) -> None:
    run = _folder(tmp_path)
    out = tmp_path / "report.json"
    result = cli("analyze", str(run), "--format", "json", "-o", str(out), "--quiet")
    assert result.code == 0, result.err
    report = json.loads(out.read_text(encoding="utf-8"))
    assert report["summary"]["ops"] == 14
    assert report["summary"]["device_time_us"] == pytest.approx(sum(KKT_DURATIONS) + 3 * 3.5, abs=1e-3)


FIELDS = {  # (file, header) -> the kernel_blocks column a knowledge base reads (advisor.model.KERNEL_BLOCK_METRICS)
    ("PipeUtilization", "aic_cube_ratio"): "aic_mac_ratio",
    ("PipeUtilization", "aiv_vec_ratio"): "aiv_vec_ratio",
    ("PipeUtilization", "aic_scalar_ratio"): "aic_scalar_ratio",
    ("PipeUtilization", "aic_mte1_ratio"): "aic_mte1_ratio",
    ("PipeUtilization", "aiv_mte2_ratio"): "aiv_mte2_ratio",
    ("PipeUtilization", "aiv_mte3_ratio"): "aiv_mte3_ratio",
    ("PipeUtilization", "aic_fixpipe_ratio"): "aic_fixpipe_ratio",
    ("PipeUtilization", "aic_icache_miss_rate"): "aic_icache_miss_rate",
    ("PipeUtilization", "aiv_scalar_wait_ib_time(us)"): "aiv_scalar_wait_ib_time_us",
    ("ResourceConflictRatio", "aiv_vec_bank_cflt_ratio"): "aiv_vec_bank_cflt_ratio",
    ("L2Cache", "aic_total_hit_rate(%)"): "aic_total_hit_rate",
    ("Memory", "aiv_main_mem_read_bw(GB/s)"): "aiv_main_mem_read_bw",
    ("Memory", "aic_l1_read_bw(GB/s)"): "aic_l1_read_bw",
    ("MemoryL0", "aic_l0a_read_bw(GB/s)"): "aic_l0a_read_bw",
    ("MemoryUB", "aiv_ub_read_bw_vector(GB/s)"): "aiv_ub_read_bw_vector",
}


def test_kernel_blocks_carry_both_sides_of_a_mix_kernel_block_by_block() -> None:
    """The MIX kernel's per-block table (``Profile.kernel_blocks``): one ``aic`` and one ``aiv`` row per block, each
    field the kernel KB reads holding the CSV's value of that row."""
    [profile] = load(KKT)
    blocks = profile.kernel_blocks
    assert "kernel_blocks" in profile.available
    pipe = _rows(KKT / "PipeUtilization.csv")
    assert len(blocks) == len(pipe)
    sides = blocks.groupby("block_id")["side"].apply(lambda s: tuple(sorted(s)))
    assert set(sides) == {("aic", "aiv")} and len(sides) == 20
    for (kind, header), column in FIELDS.items():
        rows = _rows(KKT / f"{kind}.csv")
        want = {(float(r["block_id"]), r["sub_block_id"]): float(r[header]) for r in rows if r[header] != "NA"}
        assert want, header
        got = {(float(b), str(s)): float(v) for b, s, v in
               zip(blocks["block_id"], blocks["sub_block_id"], blocks[column], strict=True) if v == v}
        assert got == pytest.approx(want), column
