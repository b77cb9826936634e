"""A ``PROF_GROUP_*`` collection as the real script writes it (issue 27.5): ``msprof_output/PROF_GROUP_<time>/
PROF_<AicMetricsSet>/PROF_<n>_<ts>_<rand>/{device_0/{info.json.0, data/}, host/data/, msprof_<ts>.db,
mindstudio_profiler_output/op_summary_*.csv}``, one PROF per ``--aic-metrics`` set, each run with warm-up launches
first -- so the runs hold different numbers of launches of the same kernels. It is one rank with one window (the
primary run's device time, never a sum), its metric sets merged by kernel, its chip the one info.json names.

The PipeUtilization run is a real op_summary (neo-pan ``real_cann_minimal``), the info.json a real one (the
AscendC contest board's) rewritten as CANN 8 msprof writes it for a 910B3; the Memory run's metric values are
made up for the test (no public Memory-set file of these kernels exists)."""

from __future__ import annotations

import csv
import json
import shutil
import sqlite3
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from advisor.cli import main
from advisor.ingest import detect, detect_jobs, load
from advisor.report.json_report import validate

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parents[1] / "shared" / "samples"
PIPE_PROF = SAMPLES / "neo-pan__ascend-msprof-skill/tests/fixtures/real_cann_minimal/reports/PROF_001"
INFO_JSON = SAMPLES / ("hansheng1001__AscendCContest/03FastGeluGrad/FrameworkLaunch/FastGeluGradTest/output/"
                       "PROF_000001_20240418221724365_MDRNMHLIQDFFBHKB/device_0/info.json.0")
CHIPS = yaml.safe_load((HERE.parent / "rules" / "platforms.yaml").read_text(encoding="utf-8"))["chips"]
MEMORY_SET = ["aicore_time(us)", "aic_total_cycles", "aic_l1_read_bw(GB/s)", "aic_l1_write_bw(GB/s)",
              "aic_main_mem_read_bw(GB/s)", "aic_main_mem_write_bw(GB/s)", "aic_l2_read_bw(GB/s)",
              "aic_l2_write_bw(GB/s)", "aiv_time(us)", "aiv_total_cycles", "aiv_ub_read_bw(GB/s)",
              "aiv_ub_write_bw(GB/s)", "aiv_main_mem_read_bw(GB/s)", "aiv_main_mem_write_bw(GB/s)",
              "aiv_l2_read_bw(GB/s)", "aiv_l2_write_bw(GB/s)"]
"""The Memory set's op_summary columns, task-based, as msprof's own system tests list them."""

needs_samples = pytest.mark.skipif(not PIPE_PROF.is_dir() or not INFO_JSON.is_file(),
                                   reason="../shared/samples not present")


def _read(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def _pipe_csv() -> Path:
    [path] = (PIPE_PROF / "mindstudio_profiler_output").glob("op_summary_*.csv")
    return path


def _cann8_info(device_dir: Path) -> None:
    """info.json.0 as CANN 8 msprof writes it for a 910B3: RANK_ID unset (-1), the host's device id 4, the clock
    as a float string, drvVersion and cannVersion."""
    data = json.loads(INFO_JSON.read_text(encoding="utf-8"))
    data["DeviceInfo"][0].update({"id": 4, "ai_core_num": 20, "aiv_num": 40, "aic_frequency": "1800.000000",
                                  "aiv_frequency": "1800.000000"})
    data.update({"rank_id": -1, "drvVersion": 467732, "cannVersion": "8.1.RC1", "platform_version": "5",
                 "hostname": "node-a"})
    device_dir.mkdir(parents=True, exist_ok=True)
    (device_dir / "data").mkdir(exist_ok=True)
    (device_dir / "info.json.0").write_text(json.dumps(data), encoding="utf-8")


def _run_dir(prof: Path, with_device: bool = True) -> None:
    """The raw folders and database a CANN 8 PROF holds beside its exports."""
    if with_device:
        _cann8_info(prof / "device_0")
    (prof / "host" / "data").mkdir(parents=True, exist_ok=True)
    sqlite3.connect(prof / "msprof_20260601120010.db").close()


def _memory_run(prof: Path) -> list[list[str]]:
    """The PipeUtilization run's two launches re-collected with the Memory set, after one warm-up launch of the
    same kernel: three launches, each with its own values."""
    header, rows = _read(_pipe_csv())
    base = header[: header.index("Context ID") + 1]
    start, dur = header.index("Task Start Time(us)"), header.index("Task Duration(us)")
    warmup = list(rows[0])
    warmup[start], warmup[dur] = "900000.000", "60000.000"
    out_rows = []
    for i, row in enumerate([warmup, *rows]):
        metrics = [row[header.index("aicore_time(us)")], row[header.index("aic_total_cycles")]]
        metrics += [f"{0.5 + i:.3f}", "0.1", f"{12.5 + 3 * i:.3f}", f"{3.25 + i:.3f}", "8.0", "2.0"]
        metrics += [row[header.index("aiv_time(us)")], row[header.index("aiv_total_cycles")]]
        metrics += ["40.0", "20.0", f"{25.0 + 5 * i:.3f}", f"{6.5 + i:.3f}", "16.0", "4.0"]
        out_rows.append(row[: len(base)] + metrics)
    out = prof / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    with open(out / "op_summary_20260601120500.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([base + MEMORY_SET, *out_rows])
    return [base + MEMORY_SET, *out_rows]


def _collection(tmp: Path, memory_device: bool = True, pipe_device: bool = True) -> tuple[Path, list[list[str]]]:
    group = tmp / "msprof_output" / "PROF_GROUP_20260601_120000"
    pipe = group / "PROF_PipeUtilization" / "PROF_000001_20260601120001000_AAAAAAAAAAAAAAAA"
    shutil.copytree(PIPE_PROF, pipe)
    _run_dir(pipe, with_device=pipe_device)
    (group / "PROF_PipeUtilization" / "msprof.log").write_text("msprof log\n", encoding="utf-8")
    mem = group / "PROF_Memory" / "PROF_000001_20260601120400000_BBBBBBBBBBBBBBBB"
    table = _memory_run(mem)
    _run_dir(mem, with_device=memory_device)
    return group, table


def _window_of_pipe_run() -> float:
    """The PipeUtilization run's device time from its op_summary: first start to last end."""
    header, rows = _read(_pipe_csv())
    start, dur = header.index("Task Start Time(us)"), header.index("Task Duration(us)")
    begins = [float(r[start]) for r in rows]
    ends = [float(r[start]) + float(r[dur]) for r in rows]
    return max(ends) - min(begins)


def _analyze(path: Path) -> dict:
    result = CliRunner().invoke(main, ["analyze", str(path), "--format", "json", "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    validate(report)
    return report


@needs_samples
@pytest.mark.parametrize("memory_device", [True, False], ids=["device_0-in-both", "exports-only-memory-run"])
def test_collection_is_one_rank_with_one_runs_window(tmp_path: Path, memory_device: bool) -> None:
    group, _ = _collection(tmp_path, memory_device)
    for given in (group, group.parent):  # the group, or the msprof_output folder holding it
        [src] = detect(given)
        assert src.layout == "msprof-cann7" and len(src.runs) == 1, given
    report = _analyze(group.parent)
    assert report["input"]["ranks"] == 1 and report["cluster"] is None
    assert not [f for f in report["findings"] if f["kb"] == "cluster"]
    window = _window_of_pipe_run()
    assert report["time"]["window_us"] == pytest.approx(window, abs=1e-3)  # one run's, not the two runs' sum
    note = next(n for n in report["input"]["notes"] if "runs of one device" in n)
    assert "PROF_PipeUtilization" in note and "PROF_Memory" in note and f"its window, {window:.3f} µs" in note


@needs_samples
@pytest.mark.parametrize("pipe_device", [True, False], ids=["primary-has-info.json", "only-the-other-run-has-it"])
def test_collection_chip_comes_from_its_info_json(tmp_path: Path, pipe_device: bool) -> None:
    group, _ = _collection(tmp_path, pipe_device=pipe_device)
    report = _analyze(group)
    plat = report["platform"]
    assert plat["soc"] == report["input"]["chip"] == "Ascend910B3"  # not the 910B-class default, Ascend910B2
    assert plat["fp16_tflops"] == CHIPS["Ascend910B3"]["fp16_tflops"]
    assert plat["soc_source"] == "info.json.0: 20 AI cores, 40 vector cores, 1800 MHz -> Ascend910B3"
    assert report["input"]["cann_version"] == "8.1.RC1"


@needs_samples
def test_metric_sets_merge_by_kernel_across_launch_counts(tmp_path: Path) -> None:
    """Pipe run: 2 launches; Memory run: a warm-up + the same 2. Each launch of the kernel gets the Memory run's
    duration-weighted mean of its three launches."""
    group, table = _collection(tmp_path)
    [profile] = load(group)
    header, rows = table[0], table[1:]
    dur = [float(r[header.index("Task Duration(us)")]) for r in rows]
    for col, raw in (("aic_main_mem_read_bw", "aic_main_mem_read_bw(GB/s)"),
                     ("aiv_main_mem_read_bw", "aiv_main_mem_read_bw(GB/s)"), ("aic_l1_read_bw", "aic_l1_read_bw(GB/s)")):
        values = [float(r[header.index(raw)]) for r in rows]
        mean = sum(v * d for v, d in zip(values, dur, strict=True)) / sum(dur)
        assert profile.ops[col].tolist() == pytest.approx([mean, mean]), col
    _, pipe_rows = _read(_pipe_csv())
    pipe_header = _read(_pipe_csv())[0]
    assert profile.ops["aiv_scalar_ratio"].tolist() == pytest.approx(
        [float(r[pipe_header.index("aiv_scalar_ratio")]) for r in pipe_rows])  # the primary's own metrics stay
    note = next(n for n in profile.meta.notes if "runs of one device" in n)
    assert "1 by the kernel's mean over that run" in note


@needs_samples
def test_a_metric_set_folder_is_one_run(tmp_path: Path) -> None:
    """Given one ``PROF_<Set>`` folder, that run alone is analyzed (its own window)."""
    group, table = _collection(tmp_path)
    [src] = detect(group / "PROF_Memory")
    assert not src.runs
    report = _analyze(group / "PROF_Memory")
    header, rows = table[0], table[1:]
    start, dur = header.index("Task Start Time(us)"), header.index("Task Duration(us)")
    span = max(float(r[start]) + float(r[dur]) for r in rows) - min(float(r[start]) for r in rows)
    assert report["time"]["window_us"] == pytest.approx(span, abs=1e-3)


@needs_samples
def test_runs_of_other_kernels_are_kept_apart(tmp_path: Path) -> None:
    """A run of the group that launched other kernels (another program) lends no numbers; it is listed with the
    command that analyzes it."""
    group, table = _collection(tmp_path)
    csv_path = next((group / "PROF_Memory").rglob("op_summary_*.csv"))
    header, rows = table[0], table[1:]
    for r in rows:
        r[header.index("Op Name")] = "another_kernel"
    with open(csv_path, "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([header, *rows])
    [profile] = load(group)
    assert "aic_main_mem_read_bw" not in profile.ops or profile.ops["aic_main_mem_read_bw"].isna().all()
    [skipped] = [s for s in profile.meta.files_skipped if "PROF_Memory" in s.path]
    assert "other kernels" in skipped.reason and "advisor analyze" in skipped.reason


@needs_samples
def test_two_collection_sessions_are_not_one_job(tmp_path: Path) -> None:
    """Two PROF_GROUP folders (two sessions of one device) are not folded into one set of runs."""
    first, _ = _collection(tmp_path)
    second = first.parent / "PROF_GROUP_20260602_090000"
    shutil.copytree(first, second)
    out = first.parent
    result = CliRunner().invoke(main, ["analyze", str(out), "--quiet"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "--each" in result.stderr
    assert "PROF_GROUP_20260601_120000" in result.stderr and "PROF_GROUP_20260602_090000" in result.stderr
    jobs = detect_jobs(out)
    assert [len(j.sources) for j in jobs] == [1, 1] and all(len(j.sources[0].runs) == 1 for j in jobs)
