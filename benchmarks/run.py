"""Benchmark ``advisor analyze`` on generated profiles of growing size (not a test: it prints a table).

Usage:
    python benchmarks/run.py                      # 20k, 200k, 2M kernels, both layouts
    python benchmarks/run.py --sizes 20000 200000 --layouts torch_npu
    python benchmarks/run.py --sizes 2000 --smoke # quick check that the script works (CI)
    python benchmarks/run.py --sizes 20000 --peer # also run the peer (msprof-analyze advisor) on the same data

Data: ``../shared/bench/gen_ascend_pt.py`` for the torch_npu layout and ``benchmarks/gen_prof.py`` for the
msprof ``PROF_*`` layout, cached under ``benchmarks/_data/``. Each run is a fresh process
(``advisor analyze --format json`` with every built-in knowledge base) measured with ``/usr/bin/time``:
wall seconds and peak RSS.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED_BENCH = REPO.parent / "shared" / "bench"
DATA = HERE / "_data"


def generate(layout: str, n: int, seed: int = 0) -> Path:
    """Generate (once) and return the profile directory for ``layout`` with ``n`` kernels."""
    out = DATA / f"{layout}_{n}"
    marker = out / ".complete"
    if not marker.exists():
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        if layout == "torch_npu":
            gen = SHARED_BENCH / "gen_ascend_pt.py"
            if not gen.exists():
                raise SystemExit(f"{gen} not found: the torch_npu generator lives in ../shared/bench")
            subprocess.run([sys.executable, str(gen), "--ops", str(n), "--out", str(out), "--seed", str(seed)],
                           check=True, stdout=subprocess.DEVNULL)
        else:
            subprocess.run([sys.executable, str(HERE / "gen_prof.py"), "--ops", str(n), "--out", str(out),
                            "--seed", str(seed)], check=True, stdout=subprocess.DEVNULL)
        marker.write_text("ok\n")
    children = [c for c in out.iterdir() if c.is_dir()]
    return children[0]


def _size_mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6


def measure(cmd: list[str]) -> tuple[float, float, str]:
    """Run ``cmd`` under /usr/bin/time; return (wall s, peak RSS MB, stdout)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", tf.name, *cmd], capture_output=True, text=True)
        wall = time.perf_counter() - t0
        stats = Path(tf.name).read_text().split()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    rss_mb = float(stats[-1]) / 1024 if stats else float("nan")
    return wall, rss_mb, proc.stdout


def run_advisor(profile: Path) -> dict[str, float]:
    advisor = shutil.which("advisor") or str(Path(sys.executable).parent / "advisor")
    wall, rss, out = measure([advisor, "analyze", str(profile), "--format", "json", "--quiet"])
    report = json.loads(out)
    return {"wall_s": wall, "rss_mb": rss, "ops": report["summary"]["ops"], "findings": len(report["findings"]),
            "failed": sum(k["status"] == "failed" for k in report["knowledge_bases"])}


def run_peer(profile: Path) -> dict[str, float]:
    script = SHARED_BENCH / "peer_msprof_analyze.sh"
    out = Path(tempfile.mkdtemp(prefix="peer_"))
    proc = subprocess.run(["bash", str(script), str(profile.parent if profile.name.startswith("PROF_") else profile),
                           str(out)], capture_output=True, text=True)
    m = re.search(r"wall_s=([\d.]+) max_rss_kb=(\d+)", proc.stdout)
    if not m:
        raise SystemExit(f"peer run failed: {proc.stdout[-300:]} {proc.stderr[-300:]}")
    return {"wall_s": float(m.group(1)), "rss_mb": int(m.group(2)) / 1024}


def main() -> None:
    ap = argparse.ArgumentParser(description="Benchmark advisor analyze on generated profiles.")
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000, 2_000_000])
    ap.add_argument("--layouts", nargs="+", choices=["torch_npu", "msprof"], default=["torch_npu", "msprof"])
    ap.add_argument("--peer", action="store_true", help="also run msprof-analyze advisor on the torch_npu data")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, temporary data dir (CI check)")
    args = ap.parse_args()
    global DATA
    if args.smoke:
        DATA = Path(tempfile.mkdtemp(prefix="advisor_bench_"))

    rows = []
    for layout in args.layouts:
        for n in args.sizes:
            profile = generate(layout, n)
            r = run_advisor(profile)
            r.update(layout=layout, size=n, data_mb=_size_mb(profile), rows_per_s=r["ops"] / r["wall_s"])
            if args.peer and layout == "torch_npu":
                p = run_peer(profile)
                r.update(peer_wall_s=p["wall_s"], peer_rss_mb=p["rss_mb"], speedup=p["wall_s"] / r["wall_s"])
            rows.append(r)
            print(f"  {layout} {n:,}: {r['wall_s']:.1f} s, {r['rss_mb']:.0f} MB", file=sys.stderr, flush=True)

    head = f"{'layout':<10} {'kernels':>10} {'data MB':>8} {'rows':>10} {'wall s':>8} {'peak MB':>8} {'rows/s':>10}" \
           f" {'us/row':>7} {'findings':>8}"
    if args.peer:
        head += f" {'peer s':>8} {'peer MB':>8} {'x faster':>8}"
    print(head)
    for r in rows:
        line = (f"{r['layout']:<10} {r['size']:>10,} {r['data_mb']:>8.0f} {r['ops']:>10,} {r['wall_s']:>8.1f} "
                f"{r['rss_mb']:>8.0f} {r['rows_per_s']:>10,.0f} {1e6 / r['rows_per_s']:>7.1f} {r['findings']:>8}")
        if "peer_wall_s" in r:
            line += f" {r['peer_wall_s']:>8.1f} {r['peer_rss_mb']:>8.0f} {r['speedup']:>8.1f}"
        print(line)
    if any(r["failed"] for r in rows):
        print("warning: some knowledge bases failed; see the JSON report", file=sys.stderr)
    if args.smoke:
        shutil.rmtree(DATA, ignore_errors=True)


if __name__ == "__main__":
    main()
