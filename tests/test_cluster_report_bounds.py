"""A cluster report stays readable at any rank count (issue 33): above ``rank_detail.FULL_DETAIL_RANKS`` ranks the
per-rank lists keep the outliers and the ranks findings name, ``rank_detail`` gives each figure's distribution, the
findings, score and ``time`` totals are those of the full report, and ``--rank-tables FILE`` holds every rank."""

from __future__ import annotations

import csv
import json
import statistics
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.pipeline import consistency, rank_detail
from advisor.pipeline.analysis import run_analysis
from advisor.report import markdown
from advisor.report.json_report import render, validate
from tests import cluster_gen

ROOT = Path(__file__).resolve().parents[1]



@pytest.fixture(scope="module")
def gen8(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("gen8")
    cluster_gen.load().generate(out, ranks=8, tp=1, pp=2, steps=2, ops=20, seed=5)
    return out


@pytest.fixture(scope="module")
def full(gen8: Path) -> dict[str, Any]:
    """The report of 8 ranks, every rank listed (8 <= FULL_DETAIL_RANKS)."""
    report = run_analysis(gen8, workers=1).report
    assert "rank_detail" not in report and len(report["time"]["ranks"]) == 8
    return report


def _kernels_per_rank(root: Path) -> dict[int, int]:
    """Rows of each rank's kernel_details.csv, rank from its profiler_info_<rank>.json: read from the raw files."""
    out = {}
    for rank_dir in root.glob("*_ascend_pt"):
        rank = int(next(rank_dir.glob("profiler_info_*.json")).stem.rsplit("_", 1)[1])
        with (rank_dir / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv").open(newline="") as f:
            out[rank] = sum(1 for _ in csv.DictReader(f))
    return out


def _findings(report: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(f["rule"], f["title"], f.get("severity"), f["estimated_saving_us"], f.get("rank"))
            for key in ("findings", "notes") for f in report[key]]


def test_bounded_report_keeps_findings_score_and_time(full: dict[str, Any]) -> None:
    bounded, tables = rank_detail.bound(full, limit=2)
    validate(bounded)
    assert consistency.problems(bounded) == []
    assert _findings(bounded) == _findings(full)
    assert bounded["score"] == full["score"] and bounded["score_detail"] == full["score_detail"]
    totals = {k: v for k, v in full["time"].items() if k != "ranks"}
    assert {k: v for k, v in bounded["time"].items() if k not in ("ranks", "ranks_total")} == totals
    assert bounded["time"]["ranks_total"] == 8  # the totals' rank count, for the renderers ("8 rank(s)")
    detail = bounded["rank_detail"]
    listed = set(detail["listed_ranks"])
    assert set(map(int, bounded["time"]["ranks"])) == listed and len(listed) < 8
    assert {r["rank"] for r in bounded["summary"]["ranks"]} == listed
    assert {r["rank"] for r in bounded["cluster"]["step_table"]} == listed
    # what was cut is in the tables, whole
    assert tables is not None and tables["tables"]["time.ranks"] == full["time"]["ranks"]
    assert detail["summarized"]["time.ranks"] == {"rows": 8, "kept": len(listed)}
    assert detail["rank_tables"] is None


def test_listed_ranks_are_the_outliers_and_the_slow_rank(gen8: Path, full: dict[str, Any]) -> None:
    injected = json.loads((gen8 / "injected.json").read_text())
    bounded, _ = rank_detail.bound(full, limit=2)
    detail = bounded["rank_detail"]
    assert injected["slow_rank"] in detail["listed_ranks"]
    assert "the cluster's slowest rank" in detail["why_listed"][str(injected["slow_rank"])]
    # each figure's distribution over all ranks, checked against the full report's per-rank rows
    compute = {int(r): t["compute_us"] for r, t in full["time"]["ranks"].items()}
    d = detail["distribution"]["compute_us"]
    assert d["ranks"] == 8 and d["max"] == pytest.approx(max(compute.values()), abs=1e-3)
    assert d["median"] == pytest.approx(statistics.median(compute.values()), abs=1e-3)
    assert d["max_rank"] == max(compute, key=lambda r: (compute[r], -r)) == injected["slow_rank"]
    assert d["max_rank"] in detail["listed_ranks"] and d["min_rank"] in detail["listed_ranks"]


def test_op_count_distribution_matches_the_raw_files(gen8: Path, full: dict[str, Any]) -> None:
    rows = _kernels_per_rank(gen8)
    ops = {r["rank"]: r["ops"] for r in full["summary"]["ranks"]}
    assert set(ops) == set(rows) and all(ops[r] >= rows[r] for r in rows)  # kernels, plus communication tasks
    d = rank_detail.bound(full, limit=2)[0]["rank_detail"]["distribution"]["ops"]
    assert (d["min"], d["max"], d["ranks"]) == (min(ops.values()), max(ops.values()), len(rows))


def _many_ranks(full: dict[str, Any], n: int) -> dict[str, Any]:
    """The 8-rank report grown to ``n`` ranks (each rank's rows copied from one of the 8, findings merged over all)."""
    report = json.loads(json.dumps(full))
    ranks = full["time"]["ranks"]
    keys = sorted(ranks, key=int)
    report["input"]["ranks"] = n
    report["input"]["files_read"] = [f"{f}#{i}" for i in range(n // 8) for f in full["input"]["files_read"]]
    report["input"]["notes"] = full["input"]["notes"] * (n // 8)
    report["time"]["ranks"] = {str(r): ranks[keys[r % 8]] for r in range(n)}
    report["summary"]["ranks"] = [{**full["summary"]["ranks"][r % 8], "rank": r} for r in range(n)]
    report["model_summary"]["ranks"] = [{**full["model_summary"]["ranks"][r % 8], "rank": r} for r in range(n)]
    report["cluster"]["ranks"] = [{**full["cluster"]["ranks"][r % 8], "rank": r} for r in range(n)]
    report["cluster"]["step_table"] = [{**row, "rank": r} for r in range(n)
                                       for row in full["cluster"]["step_table"] if row["rank"] == r % 8]
    merged = next(f for f in report["findings"] if f.get("ranks"))
    merged["ranks"] = list(range(n))
    merged["ops"] = [f"hcom_allReduce__{r}" for r in range(n)]
    merged["evidence"]["by_rank"] = {str(r): {"estimated_saving_us": float(r % 97), "ops": 1} for r in range(n)}
    merged["symptoms"] = [{"rule": "x.y", "kb": "x", "title": "t", "severity": "minor", "ops": [],
                           "estimated_saving_us": float(r), "rank": r} for r in range(n)]
    merged["basis"] = f"summed over {n} inputs (ranks {', '.join(map(str, range(n)))})"
    return report


@pytest.mark.parametrize("n", [512, 4096])
def test_report_size_is_bounded_at_any_rank_count(full: dict[str, Any], n: int) -> None:
    big = _many_ranks(full, n)
    assert len(render(big)) > 2_000_000 or n < 4096  # the unbounded report of 4,096 ranks is large
    bounded, tables = rank_detail.bound(big)
    text = render(bounded)  # validates against the schema
    assert len(text.encode()) <= 2_000_000
    assert len(markdown.render(bounded)) < markdown.MAX_CHARS
    merged = next(f for f in bounded["findings"] if f.get("ranks"))
    assert len(merged["ranks"]) == rank_detail.MAX_FINDING_RANKS and merged["evidence"]["ranks_held"] == f"0-{n - 1}"
    assert merged["evidence"]["ranks_count"] == n and len(merged["ops"]) == rank_detail.MAX_OPS
    assert len(merged["evidence"]["by_rank"]) <= rank_detail.MAX_BY_RANK
    summary = merged["evidence"]["by_rank_summary"]
    assert summary["estimated_saving_us"] == pytest.approx(sum(float(r % 97) for r in range(n)))
    assert f"(ranks 0-{n - 1})" in merged["basis"] and len(merged["symptoms"]) == rank_detail.MAX_BY_RANK
    assert merged["evidence"]["symptoms_count"] == n
    assert tables is not None and len(tables["tables"]["time.ranks"]) == n
    assert len(bounded["input"]["notes"]) == len(set(full["input"]["notes"]))


def test_rank_tables_option_writes_every_rank(gen8: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(rank_detail, "FULL_DETAIL_RANKS", 2)
    out, tables = tmp_path / "report.json", tmp_path / "tables" / "ranks.json"
    result = CliRunner().invoke(main, ["analyze", str(gen8), "--workers", "1", "--format", "json", "-o", str(out),
                                       "--rank-tables", str(tables), "-q"])
    assert result.exit_code == 0, result.output
    report = json.loads(out.read_text())
    written = json.loads(tables.read_text())
    assert report["rank_detail"]["rank_tables"] == str(tables.resolve())
    assert sorted(map(int, written["tables"]["time.ranks"])) == list(range(8))
    assert len(written["tables"]["cluster.step_table"]) == 8 * 2
    assert not list(tables.parent.glob("*.tmp*"))  # written atomically: no temporary left behind


def test_rank_tables_never_go_into_the_input(gen8: Path) -> None:
    result = CliRunner().invoke(main, ["analyze", str(gen8), "--workers", "1", "--format", "json",
                                       "--rank-tables", str(gen8 / "ranks.json"), "-q"])
    assert result.exit_code == 2
    assert not (gen8 / "ranks.json").exists()
    assert len(result.output.strip().splitlines()) == 1 and "ranks.json" in result.output


def test_shortened_skips_keep_the_exit_code_and_the_count(full: dict[str, Any],
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from advisor.pipeline import gate

    big = _many_ranks(full, 512)
    big["input"]["ranks_skipped"] = [{"path": f"r{i}", "reason": "truncated CSV"} for i in range(150)]
    big["input"]["files_skipped"] = [{"path": f"f{i}", "reason": "empty"} for i in range(200)]
    big["input"]["files_skipped"][120] = {"path": "fifo", "reason": "a FIFO", "unreadable": True}
    bounded, _ = rank_detail.bound(big)
    assert len(bounded["input"]["ranks_skipped"]) == rank_detail.MAX_LIST_ROWS
    assert {"path": "fifo", "reason": "a FIFO", "unreadable": True} in bounded["input"]["files_skipped"]
    assert gate.outcome(bounded, None) == gate.EXIT_INCOMPLETE
    err = capsys.readouterr().err
    assert "150 of 662 ranks could not be read" in err and "1 input file(s) could not be read" in err
