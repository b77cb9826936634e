"""msprof op's JSON Lines capture (FORMATS.md 12: ``summary.jsonl`` + ``HardwareInfo.jsonl`` beside the per-block
metric CSVs, e.g. Ascend950PR): the kernel row comes from ``OpInfoSummary``, the per-block table from the CSVs as for
``OPPROF_*``, and the chip's core counts and clocks from ``HardwareInfo.jsonl`` -- the platform is built from them,
never from a guessed chip. Expected values are computed here from the files with ``csv`` / ``json``
(tests/data/ingest_text/msprof_op_jsonl, README.md there)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest

from advisor.ingest import detect, load
from advisor.model import KERNEL_BLOCK_KEY_COLUMNS

CAPTURE = Path(__file__).resolve().parent / "data" / "ingest_text" / "msprof_op_jsonl" / "add_custom_950pr"


def _csv(path: Path) -> list[dict[str, str]]:
    with open(path, newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _jsonl(path: Path) -> dict[str, dict]:
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["category"]: r for r in lines}


def _f(text: str) -> float:
    return float("nan") if text in ("NA", "") else float(text)


def _copy(tmp_path: Path, name: str = "capture") -> Path:
    dst = tmp_path / name
    shutil.copytree(CAPTURE, dst)
    return dst


def _analyze(cli, path: Path, tmp_path: Path, *extra: str) -> dict:
    out = tmp_path / "report.json"
    result = cli("analyze", str(path), "--format", "json", "-o", str(out), "--quiet", *extra)
    assert result.code == 0, result.err
    return json.loads(out.read_text(encoding="utf-8"))


def test_detected_as_msprof_op_from_the_directory_or_either_jsonl_file() -> None:
    for target in (CAPTURE, CAPTURE / "summary.jsonl", CAPTURE / "HardwareInfo.jsonl"):
        [src] = detect(target)
        assert (src.layout, src.root) == ("msprof-op", CAPTURE)


def test_op_row_is_the_op_info_summary() -> None:
    info = _jsonl(CAPTURE / "summary.jsonl")["OpInfoSummary"]
    [profile] = load(CAPTURE)
    [op] = profile.ops.to_dict("records")
    assert op["name"] == info["Op Name"]
    assert op["duration_us"] == pytest.approx(info["Task Duration(us)"])
    assert op["block_dim"] == info["Block Dim"]
    assert op["core"] == "AI_VECTOR_CORE" and info["Op Type"] == "vector"
    assert profile.meta.layout == "msprof-op" and profile.meta.context == "kernel-dev"
    assert profile.meta.sources["ops"] == "summary.jsonl"


def test_per_block_table_holds_every_csv_row_and_value() -> None:
    pipe = _csv(CAPTURE / "PipeUtilization.csv")
    l2 = _csv(CAPTURE / "L2Cache.csv")
    [profile] = load(CAPTURE)
    blocks = profile.kernel_blocks
    assert list(blocks.columns[:5]) == list(KERNEL_BLOCK_KEY_COLUMNS[:5])
    assert len(blocks) == len(pipe) == 8
    assert set(blocks["side"]) == {"aiv"} and set(blocks["sub_block_id"]) == {"vector0"}
    assert blocks["aiv_vec_ratio"].tolist() == pytest.approx([float(r["aiv_vec_ratio"]) for r in pipe])
    assert blocks["aiv_icache_miss_rate"].tolist() == pytest.approx([float(r["aiv_icache_miss_rate"]) for r in pipe])
    assert blocks["aiv_read_hit_rate"].tolist() == pytest.approx([float(r["aiv_read_hit_rate(%)"]) for r in l2])
    assert blocks["aic_mac_ratio"].isna().all()  # a vector kernel: the cube columns are NA in the file
    assert "msprof_op_summary" in profile.extras and "msprof_op_hardware" in profile.extras
    assert "kernel_blocks" in profile.available


def test_per_op_metrics_aggregate_the_blocks_over_their_own_core_time() -> None:
    """Ratios weighted by cycles; bandwidth: this capture's per-block GB/s is over the block's own core time
    (not the Task Duration), so the kernel's bytes are sum(bw x core time) and its bandwidth those bytes over the
    mean core time."""
    pipe = _csv(CAPTURE / "PipeUtilization.csv")
    mem = _csv(CAPTURE / "Memory.csv")
    [profile] = load(CAPTURE)
    op = profile.ops.iloc[0]
    cycles = [float(r["aiv_total_cycles"]) for r in pipe]
    times = [float(r["aiv_time(us)"]) for r in pipe]
    vec = sum(float(r["aiv_vec_ratio"]) * c for r, c in zip(pipe, cycles, strict=True)) / sum(cycles)
    assert op["aiv_vec_ratio"] == pytest.approx(vec, rel=1e-9)
    assert op["aicore_time_us"] == pytest.approx(sum(times) / len(times))
    read_bytes = sum(float(r["aiv_main_mem_read_bw(GB/s)"]) * 2**30 * float(r["aiv_time(us)"]) * 1e-6 for r in mem)
    assert op["main_mem_read_bw"] == pytest.approx(read_bytes / (sum(times) / len(times) * 1e3), rel=1e-9)
    # per block that is 2048 transactions of 128 B in the block's time, as the capture's formula says
    assert read_bytes == pytest.approx(8 * 2048 * 128, rel=1e-9)


def test_hardware_info_gives_core_counts_clocks_and_chip() -> None:
    core = _jsonl(CAPTURE / "HardwareInfo.jsonl")["AI Core Information"]
    device = _jsonl(CAPTURE / "HardwareInfo.jsonl")["Device Info"]
    [profile] = load(CAPTURE)
    hw = profile.meta.hardware
    assert hw is not None and hw.source == "HardwareInfo.jsonl"
    assert hw.ai_cores == core["ai cube count"] and hw.vector_cores == core["ai vector count"]
    assert hw.clock_mhz == core["ai cube frequency(MHZ)"] and hw.vector_clock_mhz == core["ai vector frequency(MHZ)"]
    assert hw.chip == device["chip info"].split()[0] and hw.arch == device["arch info"]
    assert profile.meta.chip == hw.chip


def test_unknown_chip_gets_the_files_counts_and_clocks_and_no_borrowed_peaks(cli, tmp_path: Path) -> None:
    core = _jsonl(CAPTURE / "HardwareInfo.jsonl")["AI Core Information"]
    report = _analyze(cli, CAPTURE, tmp_path)
    platform = report["platform"]
    assert platform["soc"] == "Ascend950PR_9599" and platform["soc_decided_by"] == "file"
    assert platform["ai_core_num"] == core["ai cube count"]
    assert platform["vector_core_num"] == core["ai vector count"]
    assert platform["cube_freq_mhz"] == core["ai cube frequency(MHZ)"]
    assert platform["vector_freq_mhz"] == core["ai vector frequency(MHZ)"]
    assert platform["hbm_gbps"] is None and platform["fp16_tflops"] is None
    assert "hbm_gbps" in platform["peaks_unknown"]
    kbs = {k["id"]: k for k in report["knowledge_bases"]}
    assert kbs["roofline"]["status"] == "skipped" and "hbm_gbps" in kbs["roofline"]["reason"]
    assert any("Ascend950PR_9599" in n and "unknown" in n for n in report["input"]["notes"])


def test_user_given_peaks_complete_an_unknown_chip(cli, tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("platform:\n  hbm_gbps: 1000.0\n  fp16_tflops: 300.0\n", encoding="utf-8")
    report = _analyze(cli, CAPTURE, tmp_path, "--rules", str(rules))
    platform = report["platform"]
    assert (platform["hbm_gbps"], platform["fp16_tflops"]) == (1000.0, 300.0)
    assert platform["ai_core_num"] == 16 and "hbm_gbps" not in platform["peaks_unknown"]
    assert {k["id"]: k["status"] for k in report["knowledge_bases"]}["roofline"] == "ok"


def test_known_chip_named_by_the_file_gets_that_chips_peaks(cli, tmp_path: Path) -> None:
    """A chip the table knows: its row, because the file's counts are that chip's (24 cube + 48 vector cores)."""
    capture = _copy(tmp_path)
    lines = (capture / "HardwareInfo.jsonl").read_text(encoding="utf-8")
    lines = lines.replace("Ascend950PR_9599 V100", "Ascend910B2 V1").replace('"arch info":"3510"', '"arch info":"2201"')
    lines = lines.replace('"ai cube count":16,"ai vector count":16', '"ai cube count":24,"ai vector count":48')
    (capture / "HardwareInfo.jsonl").write_text(lines, encoding="utf-8")
    platform = _analyze(cli, capture, tmp_path)["platform"]
    assert platform["soc"] == "Ascend910B2" and platform["ai_core_num"] == 24
    assert platform["hbm_gbps"] == 1600.0 and not platform.get("peaks_unknown")


def test_a_second_kernel_of_one_collection_is_a_second_launch(tmp_path: Path) -> None:
    capture = _copy(tmp_path)
    second = capture / "collection-p42-1"
    second.mkdir()
    for f in CAPTURE.glob("*.csv"):
        shutil.copyfile(f, second / f.name)
    text = (CAPTURE / "summary.jsonl").read_text(encoding="utf-8")
    (second / "summary.jsonl").write_text(text.replace('"Op Name":"add_custom"', '"Op Name":"mul_custom"')
                                          .replace('"Task Duration(us)":15.42', '"Task Duration(us)":20.5'),
                                          encoding="utf-8")
    [profile] = load(capture)
    assert profile.ops["name"].tolist() == ["add_custom", "mul_custom"]
    assert profile.ops["duration_us"].tolist() == pytest.approx([15.42, 20.5])
    blocks = profile.kernel_blocks
    assert blocks.groupby("launch")["name"].first().tolist() == ["add_custom", "mul_custom"]
    assert len(blocks) == 16


def test_each_device_directory_is_a_rank(tmp_path: Path) -> None:
    root = tmp_path / "result"
    for dev in (0, 1):
        shutil.copytree(CAPTURE, root / f"device{dev}")
    assert [(s.layout, s.rank) for s in detect(root)] == [("msprof-op", 0), ("msprof-op", 1)]


def test_null_fields_are_filled_from_the_blocks_and_said(tmp_path: Path) -> None:
    """OpInfoSummary's docs: name, type and Task Duration may be null (no launch record / no valid interval)."""
    capture = _copy(tmp_path, "kernel_dir")
    records = [json.loads(x) for x in (capture / "summary.jsonl").read_text(encoding="utf-8").splitlines()]
    for r in records:
        if r["category"] == "OpInfoSummary":
            r.update({"Op Name": None, "Op Type": None, "Task Duration(us)": None})
    (capture / "summary.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records), encoding="utf-8")
    times = [float(r["aiv_time(us)"]) for r in _csv(CAPTURE / "PipeUtilization.csv")]
    [profile] = load(capture)
    op = profile.ops.iloc[0]
    assert op["name"] == "kernel_dir" and op["core"] == "AI_VECTOR_CORE"
    assert op["duration_us"] == pytest.approx(max(times))
    notes = " ".join(profile.meta.notes)
    assert "Op Name is null" in notes and "Task Duration(us) is null" in notes


def test_broken_summary_line_is_one_line_on_stderr_exit_2(cli, tmp_path: Path) -> None:
    capture = _copy(tmp_path)
    (capture / "summary.jsonl").write_text('{"category":"OpInfoSummary"\n', encoding="utf-8")
    result = cli("analyze", str(capture), "--quiet")
    assert result.code == 2
    assert "Traceback" not in result.err and len(result.err.strip().splitlines()) == 1
    assert str(capture) in result.err


def test_broken_hardware_info_is_skipped_and_the_kernel_still_read(cli, tmp_path: Path) -> None:
    capture = _copy(tmp_path)
    (capture / "HardwareInfo.jsonl").write_text("[1, 2]\n", encoding="utf-8")
    report = _analyze(cli, capture, tmp_path)
    skipped = {Path(s["path"]).name: s["reason"] for s in report["input"]["files_skipped"]}
    assert "line 1" in skipped["HardwareInfo.jsonl"]
    assert report["summary"]["ops"] == 1
    assert report["platform"]["soc_decided_by"] != "file"
