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
