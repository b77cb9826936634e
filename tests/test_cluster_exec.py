"""Per-rank analysis on Dask: serial, the embedded local cluster and an existing ("remote") scheduler give the same
report; injected cluster faults are found on exactly the right ranks and links; a broken rank is skipped with a
reason while the run goes on."""

from __future__ import annotations

import json
import multiprocessing
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.pipeline import executor
from advisor.pipeline.analysis import AnalysisOptions, run_analysis
from advisor.report.json_report import validate
from tests import cluster_gen

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "samples" / "Ascend__msinsight"
needs_samples = pytest.mark.skipif(not SAMPLES.is_dir(), reason="../shared/samples not available")



gen_cluster = cluster_gen.load()


@pytest.fixture(scope="module")
def gen16(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen16")
    gen_cluster.generate(out, ranks=16, tp=2, pp=2, steps=2, ops=25, seed=3)
    return out


@pytest.fixture(scope="module")
def scheduler() -> Any:
    """An existing Dask cluster the analysis reaches only through its address, as a remote one."""
    from distributed import LocalCluster

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, host="127.0.0.1",
                           dashboard_address="127.0.0.1:0")
    yield cluster.scheduler_address
    cluster.close()


def comparable(report: dict[str, Any]) -> dict[str, Any]:
    """The report without what legitimately differs between runs (timestamp, KB wall-clock seconds)."""
    out = json.loads(json.dumps(report))
    out.pop("generated_at")
    for kb in out["knowledge_bases"]:
        kb.pop("seconds")
    return out


def analyze(path: Path, **kw: Any) -> dict[str, Any]:
    scheduler = kw.pop("scheduler", None)
    report = run_analysis(path, options=AnalysisOptions(scheduler=scheduler), **kw).report
    validate(report)
    return report


@pytest.mark.parametrize("name", ["st/level2", "data/pytorch/text/level1", "gen16"])
def test_serial_local_and_remote_runs_are_identical(name: str, gen16: Path, scheduler: str) -> None:
    if name == "gen16":
        path = gen16
    elif not SAMPLES.is_dir():
        pytest.skip("../shared/samples not available")
    else:
        path = SAMPLES / "test" / name
    progress: list[str] = []
    serial = analyze(path, workers=1)
    local = analyze(path, workers=2, progress=progress.append)
    remote = analyze(path, scheduler=scheduler)
    assert serial["cluster"] is not None and serial["input"]["ranks"] >= 2
    assert any(f["kb"] == "cluster" for f in serial["findings"])
    assert comparable(local) == comparable(serial)
    assert comparable(remote) == comparable(serial)
    n = serial["input"]["ranks"]
    assert any("local Dask cluster of 2 workers" in p for p in progress)
    assert f"analyzed ranks {n}/{n}" in progress


def test_injected_faults_are_found_on_exactly_the_right_ranks_and_links(gen16: Path) -> None:
    injected = json.loads((gen16 / "injected.json").read_text())
    report = analyze(gen16, workers=2)
    by_rule: dict[str, list[dict[str, Any]]] = {}
    for f in report["findings"]:
        by_rule.setdefault(f["rule"], []).append(f)

    (slow,) = by_rule["cluster.slow-rank"]
    assert slow["rank"] == injected["slow_rank"] and slow["evidence"]["reason"] == "compute"
    assert report["cluster"]["slowest_rank"] == injected["slow_rank"]
    assert report["cluster"]["slowest_reason"] == "compute"

    (link,) = by_rule["cluster.slow-link"]
    want = injected["slow_link"]
    assert [(x["src_rank"], x["dst_rank"]) for x in link["evidence"]["links"]] == [(want["src"], want["dst"])]
    assert link["evidence"]["transport"] == want["transport"] == "HCCS"
    assert link["evidence"]["links"][0]["group"] == want["group"]

    (bubble,) = by_rule["cluster.pipeline-bubble"]
    assert bubble["evidence"]["pipeline_stage"] == injected["bubble_stage"]
    assert bubble["evidence"]["ranks"] == injected["bubble_ranks"]

    # the collectives wait for the slow rank (in its DP group) and for the bubble stage (in the world group): said
    # in the notes, their time being the slow rank's and the bubble's findings'
    late = {tuple(n["evidence"]["last_ranks"]): n for n in report["notes"] if n["rule"] == "cluster.comm-bottleneck"}
    assert late[(injected["slow_rank"],)]["evidence"]["cause"] == "compute"
    assert late[tuple(injected["bubble_ranks"])]["evidence"]["cause"] == "waiting"

    section = report["cluster"]
    assert section["parallel"]["sizes"] == {"dp": injected["dp"], "pp": injected["pp"], "tp": injected["tp"]}
    assert len(section["step_table"]) == injected["ranks"] * injected["steps"]
    assert {r["pp"] for r in section["stage_table"]} == set(range(injected["pp"]))
    # every saving is within the time it claims, every share within 100 %
    for f in report["findings"]:
        assert 0.0 <= f["share_of_device_time"] <= 1.0
    # one finding per problem: what 16 ranks say alike is said once, naming the ranks
    titles = [f["title"] for f in report["findings"]]
    assert len(titles) == len(set(titles))
    dynamic = [f for f in report["findings"] if f["rule"] == "operator.dynamic-shape"]
    assert len(dynamic) == 1 and dynamic[0]["ranks"] == list(range(16)) and "rank" not in dynamic[0]


def _corrupt_copy(src: Path, dst: Path, rank: int) -> Path:
    shutil.copytree(src, dst)
    (broken,) = [d for d in dst.iterdir() if (d / f"profiler_info_{rank}.json").exists()]
    (broken / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").write_bytes(b"\x00\xff garbage \x00" * 50)
    (broken / "ASCEND_PROFILER_OUTPUT" / "step_trace_time.csv").write_bytes(b"\x00\xff garbage \x00" * 50)
    (broken / "ASCEND_PROFILER_OUTPUT" / "trace_view.json").write_text("[{not json")
    return broken


def test_a_corrupt_rank_is_skipped_with_its_reason(tmp_path: Path) -> None:
    src = tmp_path / "gen"
    gen_cluster.generate(src, ranks=4, tp=1, pp=2, steps=1, ops=10, seed=1)
    broken = _corrupt_copy(src, tmp_path / "cluster", rank=2)
    report = analyze(tmp_path / "cluster", workers=2)
    (skipped,) = report["input"]["ranks_skipped"]
    assert skipped["path"] == str(broken) and "kernel_details.csv" in skipped["reason"]
    assert report["input"]["ranks"] == 3 and sorted(r["rank"] for r in report["cluster"]["ranks"]) == [0, 1, 3]

    out = tmp_path / "r.json"
    result = CliRunner().invoke(main, ["analyze", str(tmp_path / "cluster"), "--format", "json", "-o", str(out),
                                       "-q", "--workers", "1"])
    assert result.exit_code == 3, result.output
    assert "1 of 4 ranks could not be read" in result.stderr and broken.name in result.stderr
    assert json.loads(out.read_text())["input"]["ranks_skipped"][0]["path"] == str(broken)


def test_remote_run_names_paths_as_given_through_a_symlink(tmp_path: Path, scheduler: str,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """Workers get resolved absolute paths; the report still names a relative path through a symlink as given,
    as the serial run does, for the files read and for a rank skipped."""
    src = tmp_path / "gen"
    gen_cluster.generate(src, ranks=3, tp=1, pp=1, steps=1, ops=5, seed=2, bubble_stage=None, slow_link=None)
    _corrupt_copy(src, tmp_path / "real" / "cluster", rank=1)
    (tmp_path / "link").symlink_to(tmp_path / "real", target_is_directory=True)
    monkeypatch.chdir(tmp_path)
    given = Path("link") / "cluster"
    serial, remote = analyze(given, workers=1), analyze(given, scheduler=scheduler)
    for report in (serial, remote):
        assert report["input"]["files_read"] and all(f.startswith("link/cluster/") for f in report["input"]["files_read"])
        assert all(r["path"].startswith("link/cluster/") for r in report["summary"]["ranks"])
        (skipped,) = report["input"]["ranks_skipped"]
        assert skipped["path"].startswith("link/cluster/") and "kernel_details.csv" in skipped["reason"]
    assert comparable(remote) == comparable(serial)


def test_no_readable_rank_is_an_input_error(tmp_path: Path) -> None:
    src = tmp_path / "gen"
    gen_cluster.generate(src, ranks=2, tp=1, pp=1, steps=1, ops=5, seed=1, bubble_stage=None, slow_link=None)
    dst = tmp_path / "cluster"
    shutil.copytree(src, dst)
    for d in dst.iterdir():
        if d.is_dir():
            for name in ("kernel_details.csv", "step_trace_time.csv", "trace_view.json"):
                (d / "ASCEND_PROFILER_OUTPUT" / name).write_text("\x00")
    result = CliRunner().invoke(main, ["analyze", str(dst), "--format", "json", "-q", "--workers", "1"])
    assert result.exit_code == 2
    assert result.stderr.count("\n") == 1 and "no rank could be read (2 tried)" in result.stderr
    assert "Traceback" not in result.output + result.stderr


def test_unreachable_scheduler_is_one_line(gen16: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(executor, "CONNECT_TIMEOUT", 1.0)
    result = CliRunner().invoke(main, ["analyze", str(gen16), "--scheduler", "tcp://127.0.0.1:9", "-q",
                                       "--format", "json"])
    assert result.exit_code == 2
    assert "cannot reach the Dask scheduler at tcp://127.0.0.1:9" in result.stderr
    assert result.stderr.count("\n") == 1


def test_workers_and_scheduler_exclude_each_other(gen16: Path) -> None:
    result = CliRunner().invoke(main, ["analyze", str(gen16), "--scheduler", "tcp://127.0.0.1:9", "--workers", "2"])
    assert result.exit_code == 2 and "--workers" in result.stderr


def _child_exit_code(_: Any) -> int:
    """A job that starts a process of its own (as plugin isolation does inside a rank's analysis)."""
    p = multiprocessing.get_context("spawn").Process(target=sys.exit, args=(7,))
    p.start()
    p.join(60)
    return p.exitcode if p.exitcode is not None else -1


def test_local_cluster_workers_may_start_processes() -> None:
    out = executor.run_jobs(_child_exit_code, [0, 1], ["a", "b"], mode=executor.LOCAL, workers=2)
    assert [o.failure for o in out] == [None, None] and [o.result for o in out] == [7, 7]


def test_plan() -> None:
    assert executor.plan(1, None, None) == executor.SERIAL
    assert executor.plan(8, 1, None) == executor.SERIAL
    assert executor.plan(8, 2, None) == executor.LOCAL
    assert executor.plan(8, 2, None, parallel_ok=False) == executor.SERIAL
    assert executor.plan(1, None, "tcp://h:8786") == executor.REMOTE
