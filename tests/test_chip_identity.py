"""The chip comes from what the profile records (issue 27.5): the core counts and clock of ``info.json.N`` pick the
chip of rules/platforms.yaml with those counts, then the nearest clock; never the ``default:`` chip or a family
alias when the file names its counts; counts no chip has get the nearest chip's peaks scaled to them; the report
says which file decided, and ``--chip`` disagreeing with the profile is said."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from advisor.cli import main
from advisor.ingest import load
from advisor.ingest.msprof import core_count, mhz, parse_device_info
from advisor.model import Hardware
from advisor.platform import match_hardware

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parents[1] / "shared" / "samples"
CONTEST = SAMPLES / ("hansheng1001__AscendCContest/03FastGeluGrad/FrameworkLaunch/FastGeluGradTest/output/"
                     "PROF_000001_20240418221724365_MDRNMHLIQDFFBHKB")
CHIPS = yaml.safe_load((HERE.parent / "rules" / "platforms.yaml").read_text(encoding="utf-8"))["chips"]
MSPROF_OP = HERE / "data" / "ingest_text" / "msprof_op" / "shape-256" / "reports" / "op" / "OPPROF_001"

needs_samples = pytest.mark.skipif(not CONTEST.is_dir(), reason="../shared/samples not present")


def _analyze(path: Path, *extra: str) -> dict:
    result = CliRunner().invoke(main, ["analyze", str(path), "--format", "json", "--quiet", *extra],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    return json.loads(result.stdout)


def _info(prof: Path) -> dict:
    return json.loads((prof / "device_0" / "info.json.0").read_text(encoding="utf-8"))


def _with_info(tmp: Path, **changes: object) -> Path:
    """The real contest PROF copied, its info.json.0 rewritten as another chip's msprof writes it."""
    prof = tmp / CONTEST.name
    shutil.copytree(CONTEST, prof)
    info_path = prof / "device_0" / "info.json.0"
    data = _info(CONTEST)
    device = changes.pop("device", {})
    data["DeviceInfo"][0].update(device)
    data.update(changes)
    info_path.chmod(0o644)
    info_path.write_text(json.dumps(data), encoding="utf-8")
    return prof


@needs_samples
def test_contest_board_is_a_310b_not_a_910b_class() -> None:
    """The real 310B board: 1 AI core + 1 vector core at 1250 MHz. It was taken for a 910B-class chip (aiv_num 1)
    and given Ascend910B2's peaks."""
    device = _info(CONTEST)["DeviceInfo"][0]
    aic, aiv, clock = device["ai_core_num"], device["aiv_num"], float(device["aic_frequency"])
    # the chip with these counts (CHIPS, the rules data), then the nearest clock
    same = [n for n, c in CHIPS.items() if c["ai_core_num"] == aic and c.get("vector_core_num", 0) == aiv]
    want = min(same, key=lambda n: abs(CHIPS[n]["cube_freq_mhz"] - clock))
    assert want == "Ascend310B1"
    report = _analyze(CONTEST)
    plat = report["platform"]
    assert report["input"]["chip"] == plat["soc"] == want
    assert plat["soc_source"].startswith(f"info.json.0: {aic} AI core, {aiv} vector core, {clock:g} MHz -> {want}")
    # 1250 MHz is not the table's 1224 MHz: the cube peaks follow the board's clock
    scale = clock / CHIPS[want]["cube_freq_mhz"]
    assert plat["fp16_tflops"] == pytest.approx(CHIPS[want]["fp16_tflops"] * scale)
    assert plat["int8_tops"] == pytest.approx(CHIPS[want]["int8_tops"] * scale)
    assert plat["hbm_gbps"] == CHIPS[want]["hbm_gbps"]
    assert plat["soc_hardware"] == {"source": "info.json.0", "ai_cores": aic, "vector_cores": aiv,
                                    "clock_mhz": clock, "match": "counts, clock scaled"}
    assert any(n.startswith("chip from info.json.0") for n in report["input"]["notes"])


@needs_samples
@pytest.mark.parametrize("clock", ["1800", "1800.000000", 1800, 1800.0])
def test_cann8_info_json_of_a_910b3(tmp_path: Path, clock: object) -> None:
    """info.json as CANN 8 msprof writes it (hicann/runtime info_json.cpp): rank_id -1 (RANK_ID unset), the host's
    device id in DeviceInfo[].id, the clock as a string (or a float), drvVersion, cannVersion, platform_version."""
    prof = _with_info(tmp_path, rank_id=-1, drvVersion=467732, cannVersion="8.1.RC1", platform_version="5",
                      device={"id": 4, "ai_core_num": 20, "aiv_num": 40, "aic_frequency": clock,
                              "aiv_frequency": clock})
    info = parse_device_info(prof / "device_0" / "info.json.0", 0)
    assert (info.ai_core_num, info.aiv_num, info.aic_frequency) == (20, 40, 1800.0)
    assert info.extra["rank_id"] is None and info.extra["cann_version"] == "8.1.RC1"
    report = _analyze(prof)
    plat = report["platform"]
    assert plat["soc"] == report["input"]["chip"] == "Ascend910B3"  # not Ascend910B2, the 910B default
    assert plat["soc_source"] == "info.json.0: 20 AI cores, 40 vector cores, 1800 MHz -> Ascend910B3"
    assert plat["fp16_tflops"] == CHIPS["Ascend910B3"]["fp16_tflops"]
    assert report["input"]["cann_version"] == "8.1.RC1"


@needs_samples
def test_counts_no_chip_has_get_the_nearest_chips_peaks_scaled(tmp_path: Path) -> None:
    prof = _with_info(tmp_path, device={"ai_core_num": 18, "aiv_num": 36, "aic_frequency": "1800"})
    report = _analyze(prof)
    plat = report["platform"]
    nearest = CHIPS["Ascend910B3"]  # 20 + 40 cores at 1800 MHz: the nearest count with separate vector cores
    assert plat["soc"] == "Ascend910B3" and plat["soc_hardware"]["match"] == "scaled"
    assert "no chip in rules/platforms.yaml has these core counts" in plat["soc_source"]
    assert plat["fp16_tflops"] == pytest.approx(nearest["fp16_tflops"] * 18 / 20)
    assert plat["fp32_vector_tflops"] == pytest.approx(nearest["fp32_vector_tflops"] * 36 / 40)
    assert (plat["ai_core_num"], plat["vector_core_num"]) == (18, 36)
    assert report["input"]["chip"] != "Ascend910B3"  # the run is not called a chip it is not


@needs_samples
def test_chip_option_disagreeing_with_the_profile_is_said(tmp_path: Path) -> None:
    prof = _with_info(tmp_path, device={"ai_core_num": 20, "aiv_num": 40, "aic_frequency": "1800"})
    report = _analyze(prof, "--chip", "Ascend910B2")
    assert report["platform"]["soc"] == "Ascend910B2"
    assert report["platform"]["soc_source"] == "--chip Ascend910B2"
    [note] = [n for n in report["input"]["notes"] if n.startswith("--chip")]
    assert "Ascend910B3" in note and "20 AI cores, 40 vector cores, 1800 MHz" in note
    same = _analyze(prof, "--chip", "Ascend910B3")
    assert not [n for n in same["input"]["notes"] if n.startswith("--chip")]


def test_clock_and_count_values_as_msprof_writes_them() -> None:
    assert [mhz(v) for v in ("1800", "1800.000000", 1800, 1850.0, " 1250 ")] == [1800.0, 1800.0, 1800.0, 1850.0,
                                                                              1250.0]
    assert [mhz(v) for v in (None, "", "N/A", "-1", "0", "nan", "1e9")] == [None] * 7
    assert [core_count(v) for v in (20, "20", 20.0, "40", 0)] == [20, 20, 20, 40, 0]
    assert [core_count(v) for v in (None, "x", -1, 2.5, "inf")] == [None] * 5


def test_match_prefers_counts_then_the_nearest_clock() -> None:
    at = {n: match_hardware(CHIPS, Hardware(c["ai_core_num"], c.get("vector_core_num", 0), c.get("cube_freq_mhz"),
                                            "t")) for n, c in CHIPS.items()}
    for name, match in at.items():  # every chip is found from its own numbers (or one with the same numbers)
        assert match is not None and match.counts_match and not match.clock_scaled
        assert name == match.soc or name in match.also, name
    b4 = match_hardware(CHIPS, Hardware(20, 40, 1550.0, "t"))  # 910B3 runs at 1800, 910B4 at 1500
    assert b4 is not None and b4.soc == "Ascend910B4" and b4.clock_scaled
    assert match_hardware(CHIPS, Hardware(None, None, 1800.0, "t")) is None


def test_msprof_op_hardware_info_names_the_chip(tmp_path: Path) -> None:
    """msprof op's HardwareInfo.jsonl (FORMATS.md 12) records the board's core counts and clock."""
    op = tmp_path / "OPPROF_20260910100000_AAAAAAAA"
    shutil.copytree(MSPROF_OP, op)
    lines = [{"category": "Device Info", "npu count": 1, "chip info": "Ascend910B3 V100"},
             {"category": "AI Core Information", "ai core count": 20, "ai cube count": 20, "ai vector count": 40,
              "ai cube frequency(MHZ)": 1800, "ai vector frequency(MHZ)": 1800}]
    (op / "HardwareInfo.jsonl").write_text("".join(json.dumps(x) + "\n" for x in lines), encoding="utf-8")
    [profile] = load(op)
    assert profile.meta.hardware == Hardware(20, 40, 1800.0, "HardwareInfo.jsonl")
    report = _analyze(op)
    assert report["platform"]["soc"] == "Ascend910B3"
    assert report["platform"]["soc_source"].startswith("HardwareInfo.jsonl: 20 AI cores, 40 vector cores")


# ---------------------------------------------------------------------------------------------------------
# issue 28.5: no core counts recorded -- the kernels' own counters decide between a family's chips
# ---------------------------------------------------------------------------------------------------------
LLM_RANK = SAMPLES / "Ascend__msinsight/test/st/level2/rank_0_ascend_pt"  # torch_npu, no info.json
CNN_RANK = SAMPLES / "Ascend__msinsight/test/data/pytorch/text/level1/rank0_ascend_pt"
FA_CSV = SAMPLES / "Ascend__msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv"
SUPER_KERNEL = SAMPLES / ("hicann__cann-learning-hub/tutorials/ascendc_operator_development_V2/06_advanced_features/"
                          "src/06.04_super_kernel/performance_case/profiling-static/"
                          "PROF_000001_20260831222150690_02478372PGRDPKHI")
TILELANG_CSV = SAMPLES / ("hicann__cann-learning-hub/tutorials/tilelang_operator_development/06_tuning/data/"
                          "msprof_sample/op_summary_current.csv")


def _num(row: dict, *keys: str) -> float:
    for k in keys:
        if k in row and str(row[k]).strip() not in ("", "N/A"):
            return float(str(row[k]).strip())
    return float("nan")


def _counters(csv_path: Path) -> tuple[float, set[int], int]:
    """From the raw CSV: the clock (aic_total_cycles / (aicore_time x Block Dim), the largest value), the AI core
    counts msprof's cube_utilization definition gives at that clock (cycles / (clock x utilization x duration)), and
    the largest Block Dim of a cube task that ran at the clock."""
    import csv

    rows = [r for r in csv.DictReader(csv_path.open(encoding="utf-8"))
            if (r.get("Task Type") or r.get("Accelerator Core")) in ("AI_CORE", "MIX_AIC")]
    per = []
    for r in rows:
        cyc, t = _num(r, "aic_total_cycles"), _num(r, "aicore_time(us)")
        blocks, dur = _num(r, "Block Dim", "Block Num"), _num(r, "Task Duration(us)", "Duration(us)")
        util = _num(r, "cube_utilization(%)") / 100
        if cyc > 0 and t > 0 and blocks > 0:
            per.append((cyc / (t * blocks), cyc, util, dur, blocks))
    clock = max(f for f, *_ in per)
    counts = {round(cyc / (clock * u * d)) for f, cyc, u, d, _ in per if u >= 0.05}
    least = max(int(b) for f, *_, b in per if abs(f - clock) <= 0.01 * clock)
    return clock, counts, least


def _kernel_csv(root: Path) -> Path:
    found = sorted(root.rglob("kernel_details.csv")) or sorted(root.rglob("op_summary_*.csv"))
    return root if root.is_file() else found[0]


@needs_samples
@pytest.mark.parametrize("sample", [LLM_RANK, SUPER_KERNEL], ids=["torch_npu-llm", "super-kernel"])
def test_cube_ops_at_block_dim_20_mean_a_20_core_chip(sample: Path) -> None:
    """Block Dim 20 at 99 % cube utilization: a 20-core chip, not the 24-core Ascend910B2 the family name gave."""
    clock, counts, least = _counters(_kernel_csv(sample))
    assert counts == {20} and least == 20 and clock == pytest.approx(1650, abs=1)
    report = _analyze(sample)
    plat = report["platform"]
    twenty = [n for n, c in CHIPS.items() if c["ai_core_num"] == 20]  # Ascend910B3 (1800 MHz), Ascend910B4 (1500)
    assert plat["soc"] in twenty and plat["ai_core_num"] == 20 and plat["soc_decided_by"] == "evidence"
    assert plat["soc_hardware"]["ai_cores"] == 20 and plat["soc_hardware"]["clock_mhz"] == pytest.approx(clock, abs=1)
    chip = CHIPS[plat["soc"]]
    # the cube's peak at the measured clock: 20 cores x 16^3 MACs x 2 x 1650 MHz
    assert plat["fp16_tflops"] == pytest.approx(chip["fp16_tflops"] * clock / chip["cube_freq_mhz"], rel=1e-3)
    assert plat["fp16_tflops"] == pytest.approx(20 * 4096 * 2 * clock * 1e6 / 1e12, rel=5e-3)
    src = plat["soc_source"]
    assert "gives 20 AI cores" in src and "1650 MHz" in src and "instead of Ascend910B2" in src
    # 1650 MHz is as near to the 910B3's 1800 as to the 910B4's 1500: the report names both, the run no chip
    assert set(twenty) - {plat["soc"]} <= set(plat["soc_hardware"]["also"])
    assert report["input"]["chip"] == "Ascend910B-class"
    block = [f for f in _all(report) if f["rule"] == "operator.block-dim"]
    for f in block:  # the counts of the block-dim rule are the platform's, and it says where they came from
        assert (f["evidence"]["ai_core_num"], f["evidence"]["vector_core_num"]) == (20, 40)
        assert "kernels' counters" in f["evidence"]["core_count_source"]


def _all(report: dict) -> list[dict]:
    out, todo = [], [*report["findings"], *report.get("notes", [])]  # a finding too small to rank is a note
    while todo:
        f = todo.pop()
        out.append(f)
        todo.extend(f.get("symptoms") or [])
    return out


@needs_samples
def test_counters_that_single_out_a_chip_name_it() -> None:
    """FlashAttentionScoreGrad at Block Dim 20 and 99.3 % cube utilization, 1800 MHz: an Ascend910B3."""
    clock, counts, _ = _counters(FA_CSV)
    assert counts == {20} and clock == pytest.approx(1800, abs=1)
    report = _analyze(FA_CSV)
    want = [n for n, c in CHIPS.items() if c["ai_core_num"] == 20 and c.get("cube_freq_mhz") == 1800]
    assert want == ["Ascend910B3"]
    assert report["platform"]["soc"] == report["input"]["chip"] == "Ascend910B3"
    assert report["platform"]["fp16_tflops"] == CHIPS["Ascend910B3"]["fp16_tflops"]
    assert any(n.startswith("chip from kernel_details.csv kernel counters") for n in report["input"]["notes"])


@needs_samples
def test_counters_confirm_the_default_where_it_is_right() -> None:
    clock, counts, _ = _counters(_kernel_csv(CNN_RANK))
    assert counts == {24} and clock == pytest.approx(1800, abs=1)
    plat = _analyze(CNN_RANK)["platform"]
    assert plat["soc"] == "Ascend910B2" and "confirms Ascend910B2" in plat["soc_source"]


@needs_samples
def test_chip_option_is_never_overridden_by_the_counters() -> None:
    report = _analyze(LLM_RANK, "--chip", "Ascend910B2")
    assert report["platform"]["soc"] == "Ascend910B2" and report["platform"]["soc_source"] == "--chip Ascend910B2"
    [note] = [n for n in report["input"]["notes"] if "contradict --chip Ascend910B2" in n]
    assert "20 AI cores, not 24" in note


@needs_samples
def test_counters_that_break_msprofs_definitions_are_not_used() -> None:
    """A tilelang GEMM at Block Num 64 whose counters give 77.5 AI cores: not a chip; the family's default stays
    and the notes say why."""
    report = _analyze(TILELANG_CSV)
    assert report["platform"]["soc_decided_by"] == "family" and report["platform"]["soc"] == "Ascend910B2"
    assert any("not a whole number" in n and "not used" in n for n in report["input"]["notes"])


def test_counters_against_recorded_counts_are_said() -> None:
    """info.json says 24 AI cores; the counters say 20: the file wins, the note says so."""
    from advisor.core.chip_evidence import KernelEvidence
    from advisor.platform import platform_for_run
    from advisor.testing import load_rules

    ev = KernelEvidence(file="op_summary.csv", ai_cores=20, ai_core_tasks=5, example="MatMulV2: Block Dim 20 at "
                        "99.0 % cube utilization", clock_mhz=1800.0, clock_tasks=5, clock_side="aic",
                        min_vector_cores=40)
    platform, notes = platform_for_run(load_rules(), None, Hardware(24, 48, 1800.0, "info.json.0"), evidence=ev)
    assert platform["soc"] == "Ascend910B2" and platform["soc_decided_by"] == "file"
    [note] = [n for n in notes if "contradict info.json.0" in n]
    assert "20 AI cores, not 24" in note
    # no counts recorded, a family name: the same counters decide
    platform, _ = platform_for_run(load_rules(), "Ascend910B-class", None, evidence=ev)
    assert platform["soc"] == "Ascend910B3" and platform["soc_decided_by"] == "evidence"
    # a chip named exactly stays, with the note
    platform, notes = platform_for_run(load_rules(), "Ascend910B2", None, evidence=ev)
    assert platform["soc"] == "Ascend910B2" and any("contradict the chip the profile names" in n for n in notes)


@needs_samples
def test_a_family_without_counters_gets_one_of_its_chips_counts() -> None:
    """A 910B-class kernel_details without cycle counters: the block-dim rule's core counts are among the family's
    chips' (20/40 or 24/48), picked by the block dims its kernel time runs at -- never 48 AI cores because AI_CORE
    kernels ran 48 blocks."""
    import csv

    root = SAMPLES / "Ascend__msinsight/server/src/test/test_data/test_rank_1"
    path = next(root.rglob("kernel_details.csv"))
    rows = [r for r in csv.DictReader(path.open(encoding="utf-8")) if r["Accelerator Core"] == "AI_CORE"]
    fits = {n: sum(float(r["Duration(us)"]) for r in rows if int(r["Block Dim"]) > 1 and int(r["Block Dim"]) % n == 0)
            for n in {c["ai_core_num"] for c in CHIPS.values() if c.get("split_cores")}}
    best = max(fits, key=lambda n: fits[n])
    report = _analyze(root)
    assert report["platform"]["soc_decided_by"] == "family"
    block = [f for f in _all(report) if f["rule"] == "operator.block-dim"]
    assert block
    for f in block:
        assert f["evidence"]["ai_core_num"] == best == 24
        assert "among Ascend910B-class's chips" in f["evidence"]["core_count_source"]
