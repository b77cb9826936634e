"""Input discovery (issue 27.6): profiles are found at any depth below the given folder (bounded, symlink loops
refused), and runs of different chips, layouts or jobs in one folder are refused with one line naming two of them
-- or analyzed one by one with ``--each`` -- never merged into one job."""

from __future__ import annotations

import csv
import json
import os
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.common.errors import InputError
from advisor.ingest import detect, detect_jobs
from advisor.ingest.detect import MAX_DEPTH
from advisor.report.json_report import validate

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parents[1] / "shared" / "samples"
EVIDENCE = SAMPLES / "wio1997__Inference-Foundry/evidence"
SERVING_RANK = EVIDENCE / ("20260925_loop045_boundary/run165/profiler/rank0/"
                           "rank0_752_20260925054655567_ascend_pt")
MIXED = SAMPLES / "Ascend__msinsight/server/src/test/test_data"
LEVEL1 = SAMPLES / "Ascend__msinsight/test/data/pytorch/text/level1"
ST_LEVEL2 = SAMPLES / "Ascend__msinsight/test/st/level2"
MINDINSIGHT = SAMPLES / "mindspore-ai__mindinsight/tests/utils/resource"
CONTEST_PROF = SAMPLES / ("hansheng1001__AscendCContest/03FastGeluGrad/FrameworkLaunch/FastGeluGradTest/output/"
                          "PROF_000001_20240418221724365_MDRNMHLIQDFFBHKB")

needs_samples = pytest.mark.skipif(not SERVING_RANK.is_dir() or not MIXED.is_dir(),
                                   reason="../shared/samples not present")


def _invoke(*args: str) -> object:
    return CliRunner().invoke(main, ["analyze", *args, "--quiet"])


def _profiler_info(rank_dir: Path) -> dict:
    [path] = rank_dir.glob("profiler_info*.json")
    return json.loads(path.read_text(encoding="utf-8"))


def _step_window(rank_dir: Path) -> float:
    """Computing + not-overlapped communication + free of step_trace_time.csv: the step's wall time."""
    with open(rank_dir / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    return sum(float(r["Computing"]) + float(r["Communication(Not Overlapped)"]) + float(r["Free"]) for r in rows)


# ---------------------------------------------------------------------------------------------------------
# any depth
# ---------------------------------------------------------------------------------------------------------
@needs_samples
@pytest.mark.parametrize("given", [EVIDENCE, EVIDENCE / "20260925_loop045_boundary"], ids=["evidence", "case"])
def test_serving_rank_five_levels_down_is_found(given: Path) -> None:
    [src] = detect(given)
    assert src.root == SERVING_RANK and src.layout == "torch_npu-text"
    assert src.rank == int(_profiler_info(SERVING_RANK)["rank_id"])  # not the time stamp in the folder's name
    result = _invoke(str(given), "--format", "json")
    assert result.exit_code == 0, result.stderr
    report = json.loads(result.stdout)
    validate(report)
    assert report["input"]["ranks"] == 1
    assert report["time"]["window_us"] == pytest.approx(_step_window(SERVING_RANK), abs=0.01)


@needs_samples
def test_depth_is_bounded(tmp_path: Path) -> None:
    deep = tmp_path / "top"
    ok = deep.joinpath(*[f"l{i}" for i in range(MAX_DEPTH - 1)])
    shutil.copytree(SERVING_RANK, ok / SERVING_RANK.name)  # at depth MAX_DEPTH: found
    [src] = detect(deep)
    assert src.root == ok / SERVING_RANK.name
    too_deep = tmp_path / "other"
    below = too_deep.joinpath(*[f"l{i}" for i in range(MAX_DEPTH)])
    shutil.copytree(SERVING_RANK, below / SERVING_RANK.name)  # one level more: not looked at, and said
    with pytest.raises(InputError, match=f"did not look deeper than {MAX_DEPTH} levels"):
        detect(too_deep)


@needs_samples
def test_symlink_loop_is_not_followed_and_said(tmp_path: Path) -> None:
    top = tmp_path / "serving"
    rank = top / "case" / "profile" / SERVING_RANK.name
    shutil.copytree(SERVING_RANK, rank)
    os.symlink("../..", top / "case" / "profile" / "back_up")  # -> serving/: a loop
    os.symlink(rank, top / "alias_of_rank")  # a second name of the rank: not a second rank
    [src] = detect(top)
    assert src.root == rank
    result = _invoke(str(top), "--format", "json")
    assert result.exit_code == 0, result.stderr
    notes = json.loads(result.stdout)["input"]["notes"]
    assert any("back_up: a symlink to a folder above it (a loop), not followed" in n for n in notes)


# ---------------------------------------------------------------------------------------------------------
# one job, or a mix refused
# ---------------------------------------------------------------------------------------------------------
@needs_samples
def test_mixed_folder_is_refused_naming_two_runs() -> None:
    """msinsight's test_data: a lone msprof op_summary (and an msprof .db) beside two torch_npu ranks. It was
    analyzed as one 3-rank job "msprof-cann7+torch_npu-text"."""
    result = _invoke(str(MIXED))
    assert result.exit_code == 2 and result.stdout == ""
    [line] = result.stderr.splitlines()
    assert "Traceback" not in result.stderr and "--each" in line
    assert "test_rank_0" in line and ("full_db" in line or "test_kernel_parse" in line)
    assert "msprof and torch_npu" in line


@needs_samples
def test_each_analyzes_every_job_of_the_mixed_folder(tmp_path: Path) -> None:
    out = tmp_path / "reports"
    result = _invoke(str(MIXED), "--each", "--format", "json", "-o", str(out))
    assert result.exit_code == 0, result.stderr
    reports = {p.name: json.loads(p.read_text(encoding="utf-8")) for p in sorted(out.glob("*.json"))}
    assert len(reports) == 2
    torch = [r for r in reports.values() if r["input"]["layout"] == "torch_npu-text"]
    msprof = [r for r in reports.values() if r["input"]["layout"].startswith("msprof")]
    assert len(torch) == 1 and len(msprof) == 1
    ranks = sorted(int(_profiler_info(MIXED / d)["rank_id"]) for d in ("test_rank_0", "test_rank_1"))
    assert torch[0]["input"]["ranks"] == len(ranks) == 2 and msprof[0]["input"]["ranks"] == 1
    for r in reports.values():
        validate(r)
        assert "torch_npu" not in r["input"]["layout"] or "msprof" not in r["input"]["layout"]
    # on stdout: one report after the other, each headed by its run's path
    shown = _invoke(str(MIXED), "--each", "--format", "markdown")
    assert shown.exit_code == 0
    heads = [line for line in shown.stdout.splitlines() if line.startswith("==> ")]
    assert len(heads) == 2 and all(str(MIXED) in h for h in heads)


@needs_samples
def test_each_never_writes_inside_the_input(tmp_path: Path) -> None:
    copy = tmp_path / "test_data"
    shutil.copytree(MIXED, copy)
    result = _invoke(str(copy), "--each", "--format", "json", "-o", str(copy / "reports"))
    assert result.exit_code == 2 and "inside the input" in result.stderr
    assert not (copy / "reports").exists()
    (tmp_path / "a_file").write_text("x", encoding="utf-8")
    result = _invoke(str(copy), "--each", "--format", "json", "-o", str(tmp_path / "a_file"))
    assert result.exit_code == 2 and "is a file" in result.stderr


@needs_samples
def test_inference_prof_and_training_rank_are_not_one_job(tmp_path: Path) -> None:
    """An msprof PROF of a 310P3 inference app beside a torch_npu rank of a training job (issue 27.6)."""
    prof = tmp_path / "folder" / "app" / CONTEST_PROF.name
    shutil.copytree(CONTEST_PROF, prof)
    info = prof / "device_0" / "info.json.0"
    data = json.loads(info.read_text(encoding="utf-8"))
    data["DeviceInfo"][0].update({"ai_core_num": 8, "aiv_num": 7, "aic_frequency": "1060"})
    info.chmod(0o644)
    info.write_text(json.dumps(data), encoding="utf-8")
    shutil.copytree(LEVEL1 / "rank0_ascend_pt", tmp_path / "folder" / "train" / "rank0_ascend_pt")
    result = _invoke(str(tmp_path / "folder"))
    assert result.exit_code == 2
    assert "app/" in result.stderr and "train/rank0_ascend_pt" in result.stderr
    jobs = detect_jobs(tmp_path / "folder")
    assert sorted(j.sources[0].layout for j in jobs) == ["msprof-cann7", "torch_npu-text"]
    each = _invoke(str(tmp_path / "folder"), "--each", "--format", "json", "-o", str(tmp_path / "out"))
    assert each.exit_code == 0, each.stderr
    chips = sorted(json.loads(p.read_text(encoding="utf-8"))["platform"]["soc"] for p in (tmp_path / "out").iterdir())
    assert "Ascend310P3" in chips  # the inference app keeps its own chip


@needs_samples
def test_two_chips_of_one_profiler_are_not_one_job(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    for name, device, counts in (("a", 0, (8, 7, "1060")), ("b", 1, (20, 40, "1800"))):
        prof = folder / name / CONTEST_PROF.name
        shutil.copytree(CONTEST_PROF, prof)
        os.rename(prof / "device_0", prof / f"device_{device}")
        old = prof / f"device_{device}" / "info.json.0"
        data = json.loads(old.read_text(encoding="utf-8"))
        data["DeviceInfo"][0].update(dict(zip(("ai_core_num", "aiv_num", "aic_frequency"), counts, strict=True)))
        old.unlink()
        (prof / f"device_{device}" / f"info.json.{device}").write_text(json.dumps(data), encoding="utf-8")
    result = _invoke(str(folder))
    assert result.exit_code == 2
    assert "different chips: 8 AI cores, 7 vector cores, 1060 MHz and 20 AI cores, 40 vector cores, 1800 MHz" \
        in result.stderr


@needs_samples
def test_serving_loops_of_one_case_are_separate_jobs(tmp_path: Path) -> None:
    """The same serving case profiled twice, three hours apart (``<case>/run<N>/profiler/rank0/...``): two jobs of
    one rank each, not a 2-rank job."""
    folder = tmp_path / "evidence"
    for run, shift_s in (("run165", 0), ("run166", 3 * 3600)):
        rank = folder / "case" / run / "profiler" / "rank0" / SERVING_RANK.name
        shutil.copytree(SERVING_RANK, rank)
        [info_path] = rank.glob("profiler_info*.json")
        info = json.loads(info_path.read_text(encoding="utf-8"))
        info["end_info"]["collectionTimeEnd"] += shift_s * 10**9
        info_path.chmod(0o644)
        info_path.write_text(json.dumps(info), encoding="utf-8")
    result = _invoke(str(folder))
    assert result.exit_code == 2 and "captured 3.0 h apart" in result.stderr
    assert "run165" in result.stderr and "run166" in result.stderr
    assert [len(j.sources) for j in detect_jobs(folder)] == [1, 1]


@needs_samples
def test_two_rank_zeros_of_one_time_are_two_jobs(tmp_path: Path) -> None:
    """Two copies of one rank 0 (same capture time): one job has each rank once."""
    for case in ("a", "b"):
        shutil.copytree(LEVEL1 / "rank0_ascend_pt", tmp_path / case / "rank0_ascend_pt")
    result = _invoke(str(tmp_path))
    assert result.exit_code == 2 and "both are rank 0" in result.stderr


@needs_samples
@pytest.mark.parametrize("folder", [LEVEL1, ST_LEVEL2], ids=["level1", "st-level2"])
def test_ranks_of_one_job_stay_one_job(folder: Path) -> None:
    ranks = sorted(int(_profiler_info(d)["rank_id"]) for d in folder.glob("*_ascend_pt"))
    sources = detect(folder)
    assert sorted(s.rank for s in sources) == ranks
    assert len(detect_jobs(folder)) == 1


@needs_samples
def test_mindspore_ranks_of_one_job_stay_one_job() -> None:
    profiler = MINDINSIGHT / "profiler"
    devices = sorted(int(p.name.split("_")[1]) for p in profiler.glob("PROF_*/device_*"))
    assert [s.rank for s in detect(profiler)] == devices == [0, 1]
    cluster = MINDINSIGHT / "cluster_propose"
    ids = sorted({int(p.stem.split("_")[2]) for p in cluster.glob("hccl_raw_*.csv")})
    assert [s.rank for s in detect(cluster)] == ids


# ---------------------------------------------------------------------------------------------------------
# --each: exit code and options
# ---------------------------------------------------------------------------------------------------------
def test_each_exit_code_is_the_worst_of_the_runs() -> None:
    from advisor.cli.each import worst

    assert worst([]) == 0 and worst([0, 1]) == 1 and worst([1, 3, 0]) == 3 and worst([3, 2, 1]) == 2


@needs_samples
def test_each_goes_on_after_a_run_it_cannot_read(tmp_path: Path) -> None:
    folder = tmp_path / "runs"
    shutil.copytree(LEVEL1 / "rank0_ascend_pt", folder / "train" / "rank0_ascend_pt")
    empty = folder / "app" / "PROF_000001_20260101000000000_AAAAAAAAAAAAAAAA" / "mindstudio_profiler_output"
    empty.mkdir(parents=True)
    header = CONTEST_PROF / "mindstudio_profiler_output"
    [summary] = header.glob("op_summary_*.csv")
    (empty / summary.name).write_text(summary.read_text(encoding="utf-8").splitlines()[0] + "\n", encoding="utf-8")
    result = _invoke(str(folder), "--each", "--format", "json")
    assert result.exit_code == 2
    [error] = result.stderr.splitlines()
    assert "app/PROF_000001" in error and "no profile data" in error
    heads = [line for line in result.stdout.splitlines() if line.startswith("==> ")]
    assert len(heads) == 2 and heads[1].endswith("rank0_ascend_pt <==")
    report = json.loads(result.stdout.split(heads[1], 1)[1])
    assert report["input"]["layout"] == "torch_npu-text"


def test_each_is_in_the_help_and_needs_a_path() -> None:
    shown = CliRunner().invoke(main, ["analyze", "--help"])
    assert "--each" in shown.stdout and "worst of the runs" in " ".join(shown.stdout.split())
    result = CliRunner().invoke(main, ["analyze", "--example", "--each"])
    assert result.exit_code == 2 and "--each needs a PATH" in result.stderr
