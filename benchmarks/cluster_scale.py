"""Cluster scale figures (not a test: it prints a table and writes JSON): ranks per minute and client memory.

Usage:
    python benchmarks/cluster_scale.py                         # 8, 64, 512 ranks; serial, 1 and 2 local workers
    python benchmarks/cluster_scale.py --sizes 8 64 --modes 2  # a subset
    python benchmarks/cluster_scale.py --smoke                 # 4 ranks, 2 workers: the script works (CI)

Data: ``benchmarks/gen_cluster.py`` clusters of small torch_npu ranks (pp=2, 2 steps, 40 kernels per step) with an
injected slow rank, slow link and pipeline bubble, cached under ``benchmarks/_data/cluster_<n>``. Each
measurement is a fresh client process running ``advisor.pipeline.analysis.run_analysis``: wall seconds, ranks per minute,
the client's peak RSS (the workers are separate processes) and the pickled size of what each rank sends back
(its ``RankResult``: summary, findings and knowledge-base statuses; re-made in the client for 8 ranks after the
measured run). ``--out`` writes the rows as JSON; the projection to 4,096 ranks printed
at the end uses the measured per-rank cost and summary size (see docs/cluster.md).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
DATA = HERE / "_data"

_CLIENT = r"""
import json, pickle, resource, sys, time
from pathlib import Path
from advisor.pipeline import executor
from advisor.pipeline.analysis import run_analysis

path, mode = Path(sys.argv[1]), sys.argv[2]
if mode == "local1":  # the embedded Dask cluster with a single worker (plan() would run one worker in-process)
    executor.plan = lambda *a, **k: executor.LOCAL
workers = {"serial": 1, "local1": 1, "local2": 2}[mode]
base = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
t0 = time.perf_counter()
result = run_analysis(path, workers=workers)
wall = time.perf_counter() - t0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
# what one rank sends back (its RankResult: summary, findings, statuses), re-made here for 8 of the ranks
from advisor import ingest
from advisor.pipeline.analysis import AnalysisOptions, analyze_rank, load_rules, select_kbs
opts = AnalysisOptions()
rules, infos = load_rules(opts), select_kbs(opts)
sources = ingest.detect(path)
sample = sources[:: max(1, len(sources) // 8)][:8]
sizes = [len(pickle.dumps(analyze_rank(src, None, infos, rules, None, None), protocol=5)) for src in sample]
cluster_s = sum(k.seconds for k in result.statuses if k.id == "cluster")
print(json.dumps({"wall_s": wall, "client_peak_rss_mb": peak / 1024, "client_rss_before_mb": base / 1024,
                  "ranks": len(result.ranks), "skipped": len(result.skipped),
                  "summary_bytes_mean": sum(sizes) / len(sizes), "summary_bytes_max": max(sizes),
                  "cluster_kb_s": cluster_s, "findings": len(result.findings)}))
"""


def generate(n: int) -> Path:
    """Generate (once) and return a cluster of ``n`` small ranks."""
    out = DATA / f"cluster_{n}"
    marker = out / ".complete"
    if not marker.exists():
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([sys.executable, str(HERE / "gen_cluster.py"), "--out", str(out), "--ranks", str(n),
                        "--pp", "2", "--steps", "2", "--ops", "40", "--seed", "0"], check=True,
                       stdout=subprocess.DEVNULL)
        marker.write_text("ok\n")
    return out


def measure(path: Path, mode: str) -> dict:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    proc = subprocess.run([sys.executable, "-c", _CLIENT, str(path), mode], capture_output=True, text=True, env=env,
                          check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} on {path} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 64, 512])
    ap.add_argument("--modes", nargs="+", default=["serial", "local1", "local2"],
                    choices=["serial", "local1", "local2"])
    ap.add_argument("--out", type=Path, help="write the rows as JSON here")
    ap.add_argument("--smoke", action="store_true", help="4 ranks, 2 local workers")
    a = ap.parse_args()
    if a.smoke:
        a.sizes, a.modes = [4], ["local2"]
    rows = []
    print(f"{'ranks':>6} {'mode':>7} {'wall s':>8} {'ranks/min':>10} {'client peak MB':>15} "
          f"{'summary KB/rank':>16} {'cluster KB s':>13}")
    for n in a.sizes:
        path = generate(n)
        for mode in a.modes:
            r = measure(path, mode)
            r.update({"size": n, "mode": mode, "ranks_per_min": 60.0 * r["ranks"] / r["wall_s"]})
            rows.append(r)
            print(f"{n:>6} {mode:>7} {r['wall_s']:>8.1f} {r['ranks_per_min']:>10.0f} {r['client_peak_rss_mb']:>15.0f} "
                  f"{r['summary_bytes_mean'] / 1024:>16.1f} {r['cluster_kb_s']:>13.2f}", flush=True)
    if a.out:
        a.out.write_text(json.dumps(rows, indent=1) + "\n")
    _projection(rows)


def _projection(rows: list[dict]) -> None:
    """Client memory slope and per-rank worker cost, projected to 4,096 ranks."""
    two = sorted((r for r in rows if r["mode"] == "local2"), key=lambda r: r["size"])
    if len(two) < 2:
        return
    small, big = two[0], two[-1]
    slope_mb = (big["client_peak_rss_mb"] - small["client_peak_rss_mb"]) / (big["size"] - small["size"])
    per_rank_s = big["wall_s"] * 2 / big["size"]  # worker-seconds per rank at 2 workers
    summary_kb = big["summary_bytes_mean"] / 1024
    print(f"\nclient memory: {slope_mb * 1024:.0f} KB per extra rank (peak RSS {small['size']} -> {big['size']} ranks), "
          f"pickled per-rank result {summary_kb:.1f} KB")
    print(f"worker cost: {per_rank_s:.2f} worker-seconds per rank ({big['size']} ranks on 2 local workers)")
    for machines, cores in ((1, 2), (8, 64), (32, 64)):
        wall = 4096 * per_rank_s / (machines * cores)
        print(f"4096 ranks on {machines} machine(s) x {cores} workers: ~{wall / 60:.1f} min of rank analysis, client "
              f"~{small['client_peak_rss_mb'] + slope_mb * (4096 - small['size']):.0f} MB peak")


if __name__ == "__main__":
    main()
