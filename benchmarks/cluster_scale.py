"""Cluster scale figures (not a test: it prints a table and writes JSON): the per-rank cost on the workers, the
client's serial cost and memory per rank, the report's size, and what they project for 4,096 ranks.

Usage:
    python benchmarks/cluster_scale.py                              # 512 and 2,048 ranks on 1 and 2 local workers
    python benchmarks/cluster_scale.py --sizes 64 512 --modes local2
    python benchmarks/cluster_scale.py --smoke                      # 8 and 16 ranks, 2 workers: the script works (CI)

Data: ``benchmarks/gen_cluster.py`` clusters of small torch_npu ranks (pp=2, 2 steps, 40 kernels per step: 80
kernels per rank) with an injected slow rank, slow link and pipeline bubble, generated once under
``benchmarks/_data/cluster_<n>`` (gitignored).

Each measurement is a fresh client process running ``advisor.pipeline.analysis.run_analysis`` and rendering the JSON and
Markdown reports. CPU seconds, not only wall seconds, because other work shares the machine:

* client CPU: the client process's own user + system time (receiving results, merging, the cluster knowledge base,
  the report, rendering); split into the part spent while the ranks are analyzed (``receive``: unpickling what
  comes back; in ``serial`` mode the ranks' analysis itself) and the part after (``post``);
* worker CPU: the local Dask cluster's worker processes (children of the client, counted when they exit);
* client peak RSS; the JSON report's bytes and the Markdown's characters.

Per-rank figures are totals over the ranks at the largest size measured (fixed costs -- imports, the cluster's
start -- included: they err high); client memory per rank is the slope of peak RSS between the sizes. ``--direct K`` also times K ranks analyzed in one warm process (the worker's
per-rank cost without Dask). The projection to 4,096 ranks (Amdahl): per rank, serial part c (the
client) and parallel part w (the workers), T(n) = c + w / n, efficiency E(n) = T(1) / (n T(n)) -- no credit for
the client receiving while the workers compute; a second figure gives that credit (only the ``post`` part serial,
T(n) = c_post + max(w / n, c - c_post)). ``--out`` writes the rows and the derived figures as JSON (see docs/cluster.md).
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
PROJECT_RANKS = 4096
MODES = {"serial": 1, "local1": 1, "local2": 2}

_CLIENT = r"""
import json, resource, sys, time
from pathlib import Path
from advisor.pipeline import analysis
from advisor.pipeline import executor
from advisor.report import json_report, markdown

path, mode, direct = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
if mode == "local1":  # the embedded Dask cluster with a single worker (plan() would run one worker in-process)
    executor.plan = lambda *a, **k: executor.LOCAL
workers = {"serial": 1, "local1": 1, "local2": 2}[mode]

def cpu(who):
    r = resource.getrusage(who)
    return r.ru_utime + r.ru_stime

receive = [0.0]
inner = analysis._analyze_ranks
def timed(*a, **k):
    t = cpu(resource.RUSAGE_SELF)
    try:
        return inner(*a, **k)
    finally:
        receive[0] += cpu(resource.RUSAGE_SELF) - t
analysis._analyze_ranks = timed

c0, w0, t0 = cpu(resource.RUSAGE_SELF), cpu(resource.RUSAGE_CHILDREN), time.perf_counter()
result = analysis.run_analysis(path, workers=workers)
js = json_report.render(result.report)
md = markdown.render(result.report)
wall = time.perf_counter() - t0
client, worker = cpu(resource.RUSAGE_SELF) - c0, cpu(resource.RUSAGE_CHILDREN) - w0
peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
row = {"wall_s": wall, "client_cpu_s": client, "client_receive_cpu_s": receive[0],
       "client_post_cpu_s": client - receive[0], "worker_cpu_s": worker, "client_peak_rss_mb": peak,
       "ranks": len(result.ranks), "skipped": len(result.skipped), "findings": len(result.findings),
       "score": result.report["score"], "json_bytes": len(js.encode()), "markdown_chars": len(md),
       "cluster_kb_s": sum(k.seconds or 0.0 for k in result.statuses if k.id == "cluster")}
if direct:  # K ranks analyzed in this (warm) process: a rank's cost on a worker, without Dask
    from advisor import ingest
    from advisor.pipeline.analysis import AnalysisOptions, analyze_rank, load_rules, select_kbs
    opts = AnalysisOptions()
    rules, infos = load_rules(opts), select_kbs(opts)
    sources = ingest.detect(path)
    analyze_rank(sources[0], None, infos, rules, None, None, ranks_in_input=len(sources))
    picked = sources[1:direct + 1]
    t = time.process_time()
    for src in picked:
        analyze_rank(src, None, infos, rules, None, None, ranks_in_input=len(sources))
    row["direct_ms_per_rank"] = 1000 * (time.process_time() - t) / len(picked)
print(json.dumps(row))
"""


def generate(n: int, data: Path = DATA) -> Path:
    """Generate (once, under ``data``) and return a cluster of ``n`` small ranks."""
    out = data / f"cluster_{n}"
    marker = out / ".complete"
    if not marker.exists():
        shutil.rmtree(out, ignore_errors=True)
        subprocess.run([sys.executable, str(HERE / "gen_cluster.py"), "--out", str(out), "--ranks", str(n),
                        "--pp", "2", "--steps", "2", "--ops", "40", "--seed", "0"], check=True,
                       stdout=subprocess.DEVNULL)
        marker.write_text("ok\n")
    return out


def measure(path: Path, mode: str, direct: int = 0) -> dict:
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    # the real path: a cluster reached through a symlink costs the rank detection a resolve per pair of ranks
    proc = subprocess.run([sys.executable, "-c", _CLIENT, str(path.resolve()), mode, str(direct)], capture_output=True,
                          text=True, env=env, check=False)
    if proc.returncode != 0:
        raise SystemExit(f"{mode} on {path} failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def per_rank(rows: list[dict], key: str) -> float:
    """``key`` per rank at the largest size measured: fixed costs (imports, the cluster's start) included, so the
    figure errs high; a slope between sizes would drop them but moves with the machine's other load."""
    big = max(rows, key=lambda r: r["ranks"])
    return big[key] / big["ranks"]


def derive(rows: list[dict]) -> dict:
    """Per-rank costs at the largest size, the measured 1 -> 2 worker efficiency and the projection to
    :data:`PROJECT_RANKS` ranks."""
    out: dict = {}
    local = [r for r in rows if r["mode"] in ("local1", "local2")]
    if not local:
        return out
    by_mode = {m: [r for r in local if r["mode"] == m] for m in ("local1", "local2")}
    basis = by_mode["local2"] or by_mode["local1"]
    w, c = per_rank(basis, "worker_cpu_s"), per_rank(basis, "client_cpu_s")
    c_post = per_rank(basis, "client_post_cpu_s")
    sizes = sorted({r["size"] for r in basis})
    lo, hi = (min(basis, key=lambda r: r["ranks"]), max(basis, key=lambda r: r["ranks"]))
    mem = ((hi["client_peak_rss_mb"] - lo["client_peak_rss_mb"]) / (hi["ranks"] - lo["ranks"])
           if hi["ranks"] > lo["ranks"] else hi["client_peak_rss_mb"] / hi["ranks"])
    direct = [r["direct_ms_per_rank"] for r in rows if "direct_ms_per_rank" in r]
    out.update({"at_ranks": sizes[-1], "worker_ms_per_rank": 1000 * w, "client_ms_per_rank": 1000 * c,
                "client_post_ms_per_rank": 1000 * c_post, "client_kb_per_rank": 1024 * mem,
                "direct_worker_ms_per_rank": min(direct) if direct else None,
                "per_size": {str(r["size"]) + " " + r["mode"]: {
                    "worker_ms_per_rank": 1000 * r["worker_cpu_s"] / r["ranks"],
                    "client_ms_per_rank": 1000 * r["client_cpu_s"] / r["ranks"],
                    "client_post_ms_per_rank": 1000 * r["client_post_cpu_s"] / r["ranks"],
                    "client_peak_rss_mb": r["client_peak_rss_mb"], "json_kb": r["json_bytes"] / 1024,
                    "markdown_chars": r["markdown_chars"]} for r in local}})
    both = sorted({r["size"] for r in by_mode["local1"]} & {r["size"] for r in by_mode["local2"]})
    out["efficiency_1_to_2"] = {}
    for n in both:
        one = next(r for r in by_mode["local1"] if r["size"] == n)
        two = next(r for r in by_mode["local2"] if r["size"] == n)
        out["efficiency_1_to_2"][str(n)] = {"wall": one["wall_s"] / (2 * two["wall_s"]),
                                            "cpu_parts": _efficiency(2, w, c), "receive_overlapped":
                                            _efficiency(2, w, c, c_post)}
    out["projection"] = {str(k): {"no_overlap": _efficiency(k, w, c), "receive_overlapped": _efficiency(k, w, c, c_post),
                                  "wall_s": PROJECT_RANKS * _step(k, w, c, c_post)} for k in (16, 64)}
    out["projection_client_mb"] = lo["client_peak_rss_mb"] + (PROJECT_RANKS - lo["ranks"]) * mem
    return out


def _step(k: int, w: float, c: float, c_post: float | None = None) -> float:
    """Seconds per rank on ``k`` workers: the client's serial part plus the workers' share. ``c_post``: only that
    part of the client's work is serial (what it does on receiving overlaps the workers, as long as it keeps up)."""
    if c_post is None:
        return c + w / k
    return c_post + max(w / k, c - c_post)


def _efficiency(k: int, w: float, c: float, c_post: float | None = None) -> float:
    """T(1) / (k T(k)): Amdahl's law with the measured serial (client) and parallel (worker) parts."""
    return _step(1, w, c, c_post) / (k * _step(k, w, c, c_post))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[512, 2048])
    ap.add_argument("--modes", nargs="+", default=["local1", "local2"], choices=list(MODES))
    ap.add_argument("--direct", type=int, default=32, metavar="K",
                    help="also time K ranks in one warm process (0: no)")
    ap.add_argument("--out", type=Path, help="write the rows and the derived figures as JSON here")
    ap.add_argument("--smoke", action="store_true", help="8 and 16 ranks, 2 local workers")
    ap.add_argument("--data", type=Path, default=DATA, help=f"where the clusters are (generated once): {DATA}")
    ap.add_argument("--derive", type=Path, metavar="JSON", help="only print the figures of rows saved with --out")
    a = ap.parse_args()
    if a.derive:
        _print(derive(json.loads(a.derive.read_text())["rows"]))
        return
    if a.smoke:
        a.sizes, a.modes, a.direct = [8, 16], ["local2"], 4
    rows = []
    print(f"{'ranks':>6} {'mode':>7} {'wall s':>7} {'worker cpu s':>12} {'client cpu s':>12} {'post s':>7} "
          f"{'client MB':>9} {'JSON KB':>8} {'MD chars':>8} {'score':>6}")
    for n in a.sizes:
        path = generate(n, a.data)
        for mode in a.modes:
            r = measure(path, mode, a.direct if mode == a.modes[0] and n == a.sizes[0] else 0)
            r.update({"size": n, "mode": mode})
            rows.append(r)
            print(f"{n:>6} {mode:>7} {r['wall_s']:>7.1f} {r['worker_cpu_s']:>12.1f} {r['client_cpu_s']:>12.1f} "
                  f"{r['client_post_cpu_s']:>7.2f} {r['client_peak_rss_mb']:>9.0f} {r['json_bytes'] / 1024:>8.0f} "
                  f"{r['markdown_chars']:>8} {r['score']:>6.1f}", flush=True)
    derived = derive(rows)
    if a.out:
        a.out.write_text(json.dumps({"rows": rows, "derived": derived}, indent=1) + "\n")
    _print(derived)


def _print(d: dict) -> None:
    if not d:
        return
    print(f"\nper rank at {d['at_ranks']} ranks (fixed costs included):")
    print(f"  worker: {d['worker_ms_per_rank']:.0f} ms CPU per rank on the Dask workers"
          + (f", {d['direct_worker_ms_per_rank']:.0f} ms in one warm process" if d.get("direct_worker_ms_per_rank")
             else ""))
    print(f"  client: {d['client_ms_per_rank']:.1f} ms CPU per rank ({d['client_post_ms_per_rank']:.1f} ms of it after "
          f"the ranks are in), {d['client_kb_per_rank']:.0f} KB of peak RSS per extra rank")
    for n, e in d["efficiency_1_to_2"].items():
        print(f"1 -> 2 workers at {n} ranks: efficiency {e['wall']:.2f} measured (wall), {e['cpu_parts']:.2f} "
              f"expected from the CPU parts ({e['receive_overlapped']:.2f} receiving while the workers compute)")
    for k, p in d["projection"].items():
        print(f"{PROJECT_RANKS} ranks on {k} workers: ~{p['wall_s'] / 60:.1f} min, efficiency {p['no_overlap']:.2f} "
              f"({p['receive_overlapped']:.2f} with the client receiving while the workers compute)")
    print(f"{PROJECT_RANKS} ranks: client peak ~{d['projection_client_mb']:.0f} MB")


if __name__ == "__main__":
    main()
