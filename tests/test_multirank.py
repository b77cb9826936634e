"""A parent directory of several ranks: analyzed rank by rank in parallel processes, with a cluster summary."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.pipeline.analysis import run_analysis
from advisor.report.json_report import validate

BENCH = Path(__file__).resolve().parents[1].parent / "shared" / "bench" / "gen_ascend_pt.py"


@pytest.fixture(scope="module")
def eight_ranks(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not BENCH.exists():
        pytest.skip("../shared/bench not present")
    parent = tmp_path_factory.mktemp("cluster")
    for rank in range(8):
        out = tmp_path_factory.mktemp(f"gen{rank}")
        subprocess.run([sys.executable, str(BENCH), "--ops", str(600 + 150 * (rank == 5)), "--out", str(out),
                        "--seed", str(rank)], check=True, stdout=subprocess.DEVNULL)
        (src,) = [d for d in out.iterdir() if d.is_dir()]
        info = src / "profiler_info_0.json"  # each worker records its own rank, as torch_npu does
        data = json.loads(info.read_text())
        data["rank_id"] = rank
        info.unlink()
        (src / f"profiler_info_{rank}.json").write_text(json.dumps(data))
        shutil.move(str(src), parent / f"localhost_{1000 + rank}_20250101000000000_ascend_pt")
    return parent


def test_eight_ranks_are_analyzed_in_parallel_with_a_cluster_summary(eight_ranks: Path) -> None:
    parallel = run_analysis(eight_ranks, workers=2)
    report = parallel.report
    validate(report)
    assert report["input"]["ranks"] == 8
    assert len(report["summary"]["ranks"]) == 8
    assert sum(r["ops"] for r in report["summary"]["ranks"]) == report["summary"]["ops"]
    cluster = report["cluster"]
    assert len(cluster["ranks"]) == 8
    assert cluster["slowest_rank"] in range(8)
    assert cluster["slowest_reason"] in ("compute", "free", "waiting")
    assert {"compute_us", "total_us"} <= set(cluster["spread"])
    # per-rank findings keep their rank; the same analysis in one process gives the same findings
    assert {f["rank"] for f in report["findings"] if "rank" in f} <= set(range(8))
    serial = run_analysis(eight_ranks, workers=1).report
    key = lambda r: sorted((f["rule"], f.get("rank", -1), tuple(f["ops"])) for f in r["findings"])  # noqa: E731
    assert key(serial) == key(report)
    assert serial["score"] == report["score"]
