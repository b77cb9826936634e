"""Several msprof runs of one device are runs, not ranks: a ``PROF_GROUP_*`` folder of ``--aic-metrics`` re-runs
(the structure CANN's ``msprof_profile_run.sh`` writes: ``PROF_GROUP_<time>/PROF_<set>/PROF_*``), sibling ``PROF_*``
directories of one device, sibling ``OPPROF_*`` results. Same kernels -> one profile with the metric sets merged;
other kernels -> analyzed separately (the other run listed as skipped, with how to analyze it)."""

from __future__ import annotations

import csv
import json
import shutil
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.ingest import detect, load
from advisor.report.json_report import validate

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parents[1] / "shared" / "samples"
PIPE_PROF = SAMPLES / "neo-pan__ascend-msprof-skill/tests/fixtures/real_cann_minimal/reports/PROF_001"
CANN6_PROF = SAMPLES / ("mindspore-ai__mindinsight/tests/utils/resource/profiler/"
                        "PROF_000001_20230818142704322_COJGGGCANRMICFBC")
MINDINSIGHT_PROFILER = CANN6_PROF.parent
SUPER_KERNEL = SAMPLES / ("hicann__cann-learning-hub/tutorials/ascendc_operator_development_V2/06_advanced_features/"
                          "src/06.04_super_kernel/performance_case")
MSPROF_OP = HERE / "data" / "ingest_text" / "msprof_op" / "shape-256" / "reports"

needs_samples = pytest.mark.skipif(not PIPE_PROF.is_dir(), reason="../shared/samples not present")

# op_summary metric columns of the Memory set, task-based, as msprof's own system tests list them
# (Ascend/msprof test/st ... "Memory": "...,Context ID,aicore_time(us),aic_total_cycles,aic_l1_read_bw(GB/s),...")
MEMORY_SET = ["aicore_time(us)", "aic_total_cycles", "aic_l1_read_bw(GB/s)", "aic_l1_write_bw(GB/s)",
              "aic_main_mem_read_bw(GB/s)", "aic_main_mem_write_bw(GB/s)", "aic_l2_read_bw(GB/s)",
              "aic_l2_write_bw(GB/s)", "aiv_time(us)", "aiv_total_cycles", "aiv_ub_read_bw(GB/s)",
              "aiv_ub_write_bw(GB/s)", "aiv_main_mem_read_bw(GB/s)", "aiv_main_mem_write_bw(GB/s)",
              "aiv_l2_read_bw(GB/s)", "aiv_l2_write_bw(GB/s)"]


def _op_summary(prof: Path) -> Path:
    [path] = (prof / "mindstudio_profiler_output").glob("op_summary_*.csv")
    return path


def _read(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, newline="", encoding="utf-8") as fh:
        rows = list(csv.reader(fh))
    return rows[0], rows[1:]


def _memory_rerun(src: Path, dst: Path, drop_last: bool = False) -> list[list[str]]:
    """The same launches as the real PipeUtilization run ``src``, re-collected with the Memory set. The base
    columns are the real run's; the Memory metric values are made up for the test (no public Memory-set file of
    these kernels exists)."""
    header, rows = _read(_op_summary(src))
    base = header[: header.index("Context ID") + 1]
    out_rows = []
    for i, row in enumerate(rows[:-1] if drop_last else rows):
        metrics = [row[header.index("aicore_time(us)")], row[header.index("aic_total_cycles")]]
        metrics += [f"{0.5 + i:.3f}", "0.1", f"{12.5 + i:.3f}", f"{3.25 + i:.3f}", "8.0", "2.0"]
        metrics += [row[header.index("aiv_time(us)")], row[header.index("aiv_total_cycles")]]
        metrics += ["40.0", "20.0", f"{25.0 + i:.3f}", f"{6.5 + i:.3f}", "16.0", "4.0"]
        out_rows.append(row[: len(base)] + metrics)
    out = dst / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    with open(out / "op_summary_20260601120500.csv", "w", newline="", encoding="utf-8") as fh:
        csv.writer(fh).writerows([base + MEMORY_SET, *out_rows])
    return out_rows


def _prof_group(tmp: Path, drop_last: bool = False) -> tuple[Path, list[list[str]]]:
    group = tmp / "msprof_output" / "PROF_GROUP_20260601_120000"
    pipe = group / "PROF_PipeUtilization" / "PROF_000001_20260601120001000_AAAAAAAAAAAAAAAA"
    shutil.copytree(PIPE_PROF, pipe)
    (pipe / "device_0").mkdir()
    (group / "PROF_PipeUtilization" / "msprof.log").write_text("msprof log\n", encoding="utf-8")
    mem = group / "PROF_Memory" / "PROF_000001_20260601120400000_BBBBBBBBBBBBBBBB"
    rows = _memory_rerun(PIPE_PROF, mem, drop_last)
    (mem / "device_0").mkdir()
    return group, rows


@needs_samples
def test_prof_group_is_one_device_with_merged_metric_sets(tmp_path: Path) -> None:
    group, mem_rows = _prof_group(tmp_path)
    for target in (group, group.parent):  # the group itself, or the output directory holding it
        [src] = detect(target)
        assert src.layout == "msprof-cann7" and len(src.runs) == 1
    [profile] = load(group)
    ops = profile.ops
    header, pipe_rows = _read(_op_summary(PIPE_PROF))
    assert len(ops) == len(pipe_rows) == 2
    # timing and pipe ratios from the PipeUtilization run
    assert ops["duration_us"].tolist() == pytest.approx([float(r[header.index("Task Duration(us)")])
                                                        for r in pipe_rows])
    assert ops["aiv_scalar_ratio"].tolist() == pytest.approx([float(r[header.index("aiv_scalar_ratio")])
                                                             for r in pipe_rows])
    # the Memory run's bandwidths, op by op
    mem_header = header[: header.index("Context ID") + 1] + MEMORY_SET
    for col, raw in (("aic_main_mem_read_bw", "aic_main_mem_read_bw(GB/s)"),
                     ("aiv_main_mem_write_bw", "aiv_main_mem_write_bw(GB/s)"), ("aiv_l2_read_bw", "aiv_l2_read_bw(GB/s)")):
        assert ops[col].tolist() == pytest.approx([float(r[mem_header.index(raw)]) for r in mem_rows]), col
    assert ops["main_mem_read_bw"].notna().all()  # the unified column comes along (MIX_AIC: the cube side's)
    note = next(n for n in profile.meta.notes if "runs of one device" in n)
    assert "runs, not ranks" in note and "PROF_PipeUtilization" in note and "PROF_Memory" in note


@needs_samples
def test_prof_group_analyzed_as_one_rank(tmp_path: Path) -> None:
    group, _ = _prof_group(tmp_path)
    out = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["analyze", str(group), "--format", "json", "-o", str(out), "--quiet"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    validate(report)
    assert report["input"]["ranks"] == 1
    assert report["cluster"] is None
    assert not [f for f in report["findings"] if f["kb"] == "cluster"]
    assert any("runs of one device" in n for n in report["input"]["notes"])


@needs_samples
def test_rerun_with_fewer_launches_gives_the_kernels_mean(tmp_path: Path) -> None:
    """The Memory re-run launched the kernel once, the PipeUtilization run twice: both launches get the Memory
    run's value for that kernel (issue 27.5: runs of one script may hold different numbers of launches)."""
    group, mem_rows = _prof_group(tmp_path, drop_last=True)
    [profile] = load(group)
    assert len(profile.ops) == 2
    header, _ = _read(_op_summary(PIPE_PROF))
    column = header.index("Context ID") + 1 + MEMORY_SET.index("aic_main_mem_read_bw(GB/s)")
    want = float(mem_rows[0][column])  # the one launch of the Memory run
    assert profile.ops["aic_main_mem_read_bw"].tolist() == pytest.approx([want, want])
    assert not [s for s in profile.meta.files_skipped if "PROF_Memory" in s.path]
    note = next(n for n in profile.meta.notes if "runs of one device" in n)
    assert "by the kernel's mean over that run" in note


@needs_samples
def test_same_device_reruns_in_cann6_layout(tmp_path: Path) -> None:
    """Two copies of a CANN <= 6 PROF of device 0 (rank_id 0 in both info.json): one device, same kernels."""
    for name in ("PROF_000001_20230818142704322_AAAAAAAAAAAAAAAA", "PROF_000001_20230818152704322_BBBBBBBBBBBBBBBB"):
        shutil.copytree(CANN6_PROF, tmp_path / name)
    [src] = detect(tmp_path)
    assert (src.layout, src.rank, len(src.runs)) == ("msprof-cann6", 0, 1)
    [profile] = load(tmp_path)
    [single] = load(CANN6_PROF)
    assert len(profile.ops) == len(single.ops)
    assert any("repeat run" in n for n in profile.meta.notes)


@needs_samples
def test_distinct_devices_stay_ranks() -> None:
    sources = detect(MINDINSIGHT_PROFILER)
    assert [(s.layout, s.rank, s.runs) for s in sources] == [("msprof-cann6", 0, ()), ("msprof-cann6", 1, ())]


@needs_samples
def test_two_experiments_without_rank_information_are_not_ranks() -> None:
    """The super-kernel tutorial's profiling-sk and profiling-static PROF dirs: two runs (different kernels)."""
    [src] = detect(SUPER_KERNEL)
    assert len(src.runs) == 1
    [profile] = load(SUPER_KERNEL)
    [skipped] = [s for s in profile.meta.files_skipped if "profiling-static" in s.path]
    assert "advisor analyze" in skipped.reason


def test_msprof_op_reruns_keep_the_fuller_metric_set(tmp_path: Path) -> None:
    """The same kernel collected twice with msprof op: --aic-metrics=PipeUtilization, then Default."""
    out = tmp_path / "msprof_op_out"
    shutil.copytree(MSPROF_OP / "op" / "OPPROF_001", out / "OPPROF_20260910100000_AAAAAAAA")
    shutil.copytree(MSPROF_OP / "followups" / "collect_default_metric_followup" / "OPPROF_001",
                    out / "OPPROF_20260910100500_BBBBBBBB")
    [src] = detect(out)
    assert src.layout == "msprof-op" and len(src.runs) == 1
    [profile] = load(out)
    op = profile.ops.iloc[0]
    assert op["duration_us"] == pytest.approx(9.2)  # the Default run is the primary: it has every metric set
    assert op["main_mem_read_bw"] > 0
    assert any("repeat run" in n and "8.580" in n for n in profile.meta.notes)


@needs_samples
def test_same_device_on_two_hosts_is_two_ranks(tmp_path: Path) -> None:
    """device_0 of two machines (a multi-node job profiling one card per node) is two ranks, not two runs."""
    for name, host in (("node_a", "A2007104679"), ("node_b", "B2007104680")):
        prof = tmp_path / name / CANN6_PROF.name
        shutil.copytree(CANN6_PROF, prof)
        info = prof / "device_0" / "info.json.0"
        data = json.loads(info.read_text(encoding="utf-8"))
        data["hostname"] = host
        info.chmod(0o644)
        info.write_text(json.dumps(data), encoding="utf-8")
    sources = detect(tmp_path)
    assert len(sources) == 2 and all(not s.runs for s in sources)
