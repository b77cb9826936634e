"""Benchmark ``advisor analyze`` against the read floor on generated profiles of growing size (not a test: it
prints tables).

Usage:
    python benchmarks/run.py                      # 20k, 200k, 2M kernels, both layouts, peer at 20k
    python benchmarks/run.py --sizes 20000 200000 --layouts torch_npu --no-peer
    python benchmarks/run.py --sizes 2000 --smoke # quick check that the script works (CI)
    python benchmarks/run.py --markdown           # the tables as Markdown (benchmarks/README.md)
    python benchmarks/run.py --sizes 200000 --layouts torch_npu --no-peer --pairs 7   # + 7 pairs, medians

Data: ``../shared/bench/gen_ascend_pt.py`` for the torch_npu layout and ``benchmarks/gen_prof.py`` for the
msprof ``PROF_*`` layout, cached under ``benchmarks/_data/``.

Each measurement is a fresh process under ``/usr/bin/time`` (wall seconds, peak RSS), run one after the other in
the same invocation:

* **floor**: what merely reading the inputs costs -- a full ``orjson`` parse of the trace JSON plus a
  ``pyarrow.csv.read_csv`` of the kernel CSV(s), nothing else (issue 18.1's yardstick);
* **advisor**: ``advisor analyze --format json`` with every built-in knowledge base (its modules byte-compiled
  first, as a regular install has them), with its time per stage
  (``ADVISOR_STAGE_TIMES``, see ``advisor.common.stagetimes``): start-up (imports, plugin discovery, rules) is the wall
  time the stages do not account for;
* **peer**: msprof-analyze advisor (``../shared/bench/peer_msprof_analyze.sh``) on the torch_npu data at the sizes
  given to ``--peer-sizes`` (20k by default; it is super-linear, 25-35 min at 200k).
"""

from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
SHARED_BENCH = REPO.parent / "shared" / "bench"
DATA = HERE / "_data"

FLOOR_SCRIPT = r"""
import sys, orjson, pyarrow.csv as pc
rows = 0
for p in sys.argv[1:]:
    if p.endswith(".json"):
        with open(p, "rb") as f:
            rows += len(orjson.loads(f.read()))
    else:
        rows += pc.read_csv(p).num_rows
print(rows)
"""


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


def floor_inputs(profile: Path) -> list[Path]:
    """The files the floor reads: the trace JSON and the kernel CSV(s) the layout's analysis needs."""
    if profile.name.endswith("_ascend_pt"):
        out = profile / "ASCEND_PROFILER_OUTPUT"
        return [out / "trace_view.json", out / "kernel_details.csv"]
    out = profile / "mindstudio_profiler_output"
    return sorted(p for p in out.iterdir() if p.suffix in (".json", ".csv"))


def _size_mb(paths: list[Path]) -> float:
    return sum(p.stat().st_size for p in paths) / 1e6


def measure(cmd: list[str], env: dict[str, str] | None = None) -> tuple[float, float, str]:
    """Run ``cmd`` under /usr/bin/time; return (wall s, peak RSS MB, stdout)."""
    with tempfile.NamedTemporaryFile("r", suffix=".time") as tf:
        t0 = time.perf_counter()
        proc = subprocess.run(["/usr/bin/time", "-f", "%e %M", "-o", tf.name, *cmd], capture_output=True, text=True,
                              env=env)
        wall = time.perf_counter() - t0
        stats = Path(tf.name).read_text().split()
    if proc.returncode not in (0, 1):
        raise SystemExit(f"{' '.join(cmd)} failed ({proc.returncode}): {proc.stderr.strip()[-500:]}")
    rss_mb = float(stats[-1]) / 1024 if stats else float("nan")
    return wall, rss_mb, proc.stdout


FLOOR_BYTES_PER_JSON_BYTE = 10
"""A full orjson parse holds ~9x the JSON's size as Python objects: the floor is skipped where that would not fit
in the memory available (the machine is shared)."""


def _available_bytes() -> int:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemAvailable"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError):
        pass
    return 1 << 62


def run_floor(profile: Path) -> dict[str, float]:
    inputs = floor_inputs(profile)
    need = FLOOR_BYTES_PER_JSON_BYTE * sum(p.stat().st_size for p in inputs if p.suffix == ".json")
    if need > 0.8 * _available_bytes():
        print(f"  floor skipped: a full parse needs ~{need / 1e9:.0f} GB", file=sys.stderr)
        return {"wall_s": float("nan"), "rss_mb": float("nan")}
    wall, rss, _ = measure([sys.executable, "-c", FLOOR_SCRIPT, *map(str, inputs)])
    return {"wall_s": wall, "rss_mb": rss}


def byte_compile_advisor() -> None:
    """Byte-compile advisor's own modules, as a regular ``pip install`` does: an editable install run with
    ``PYTHONDONTWRITEBYTECODE=1`` (set in this machine's shells) would otherwise compile ~70 modules from source at
    every start (~0.2 s) -- a cost the floor's libraries, byte-compiled at install, never pay."""
    import advisor
    import advisor.knowledge_bases

    for package in (advisor, advisor.knowledge_bases):
        compileall.compile_dir(Path(package.__file__).parent, quiet=1)


def run_advisor(profile: Path) -> dict[str, object]:
    advisor = shutil.which("advisor") or str(Path(sys.executable).parent / "advisor")
    with tempfile.NamedTemporaryFile("r", suffix=".json") as st:
        env = dict(os.environ, ADVISOR_STAGE_TIMES=st.name)
        wall, rss, out = measure([advisor, "analyze", str(profile), "--format", "json", "--quiet"], env=env)
        stages = json.loads(Path(st.name).read_text() or "{}")
    peaks = stages.pop("peak_mb", {})
    rss = max(rss, peaks.pop("process", 0.0))  # measuring stages resets the OS's own peak figure
    report = json.loads(out)
    accounted = sum(v for k, v in stages.items() if not k.startswith("kb "))
    stages["start-up"] = max(wall - accounted, 0.0)
    return {"wall_s": wall, "rss_mb": rss, "ops": report["summary"]["ops"], "findings": len(report["findings"]),
            "score": report["score"], "stages": stages, "peak_mb": peaks,
            "failed": sum(k["status"] == "failed" for k in report["knowledge_bases"])}


def pairs(profile: Path, n: int, label: str) -> str:
    """``n`` floor/advisor pairs back to back: one run each moves with the machine's load, the medians and the
    spread of the per-pair ratios less so."""
    floor, advisor = [], []
    for _ in range(n):
        floor.append(run_floor(profile)["wall_s"])
        advisor.append(float(run_advisor(profile)["wall_s"]))  # type: ignore[arg-type]
    ratios = sorted(a / f for a, f in zip(advisor, floor, strict=True))
    return (f"{label}, {n} pairs: median floor {statistics.median(floor):.2f} s, advisor "
            f"{statistics.median(advisor):.2f} s ({statistics.median(advisor) / statistics.median(floor):.2f}x); "
            f"per-pair advisor/floor {ratios[0]:.2f}-{ratios[-1]:.2f}x")


def run_peer(profile: Path) -> dict[str, float]:
    script = SHARED_BENCH / "peer_msprof_analyze.sh"
    out = Path(tempfile.mkdtemp(prefix="peer_"))
    # run from the output directory: the peer writes operator_tuning_file_*.cfg into its working directory
    proc = subprocess.run(["bash", str(script), str(profile.parent if profile.name.startswith("PROF_") else profile),
                           str(out)], capture_output=True, text=True, cwd=out)
    shutil.rmtree(out, ignore_errors=True)
    m = re.search(r"wall_s=([\d.]+) max_rss_kb=(\d+)", proc.stdout)
    if not m:
        raise SystemExit(f"peer run failed: {proc.stdout[-300:]} {proc.stderr[-300:]}")
    return {"wall_s": float(m.group(1)), "rss_mb": int(m.group(2)) / 1024}


def machine() -> str:
    """CPU model, cores, RAM, load average: the figures only compare within one machine and one run."""
    cpu = platform.processor() or "unknown CPU"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
        mem_kb = next(int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                      if line.startswith("MemTotal"))
        ram = f"{mem_kb / 1024 / 1024:.0f} GB RAM"
    except (OSError, StopIteration, ValueError):
        ram = "RAM unknown"
    load = " / ".join(f"{x:.2f}" for x in os.getloadavg())
    return f"{cpu}, {os.cpu_count()} cores, {ram}, Python {platform.python_version()}, load average {load}"


STAGES = ["start-up", "read", "sanitize", "model", "knowledge bases", "rank summary", "score and report", "render"]


def _fmt_table(head: list[str], rows: list[list[str]], markdown: bool) -> str:
    if markdown:
        lines = ["| " + " | ".join(head) + " |", "|" + "|".join("---:" if i else "---" for i in range(len(head)))
                 + "|"]
        lines += ["| " + " | ".join(r) + " |" for r in rows]
        return "\n".join(lines)
    widths = [max(len(h), *(len(r[i]) for r in rows)) for i, h in enumerate(head)]
    return "\n".join("  ".join(c.rjust(w) if i else c.ljust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True)))
                     for r in [head, *rows])


def report(rows: list[dict[str, object]], markdown: bool) -> str:
    head = ["layout", "kernels", "input MB", "floor s", "floor MB", "advisor s", "advisor MB", "advisor/floor",
            "us/kernel", "findings", "score", "peer s", "peer MB"]
    body = []
    for r in rows:
        a, f = r["advisor"], r["floor"]
        peer = r.get("peer")
        body.append([str(r["layout"]), f"{r['size']:,}", f"{r['data_mb']:.0f}", f"{f['wall_s']:.2f}",
                     f"{f['rss_mb']:.0f}", f"{a['wall_s']:.2f}", f"{a['rss_mb']:.0f}",
                     f"{a['wall_s'] / f['wall_s']:.2f}", f"{1e6 * a['wall_s'] / r['size']:.1f}", str(a["findings"]),
                     f"{a['score']:.1f}", f"{peer['wall_s']:.1f}" if peer else "", f"{peer['rss_mb']:.0f}" if peer
                     else ""])
    out = [_fmt_table(head, body, markdown), ""]
    kb_names = sorted({k for r in rows for k in r["advisor"]["stages"] if k.startswith("kb ")})
    head2 = ["layout", "kernels", *STAGES]
    body2 = [[str(r["layout"]), f"{r['size']:,}", *(f"{r['advisor']['stages'].get(s, 0.0):.2f}" for s in STAGES)]
             for r in rows]
    gap = [""] if markdown else []
    out += ["Seconds per stage (advisor):", *gap, _fmt_table(head2, body2, markdown), ""]
    top = sorted(kb_names, key=lambda k: -max(r["advisor"]["stages"].get(k, 0.0) for r in rows))[:8]
    head3 = ["layout", "kernels", *(k[3:] for k in top)]
    body3 = [[str(r["layout"]), f"{r['size']:,}", *(f"{r['advisor']['stages'].get(k, 0.0):.2f}" for k in top)]
             for r in rows]
    out += ["Seconds per knowledge base (the slowest eight):", *gap, _fmt_table(head3, body3, markdown), *gap]
    if any(r["advisor"].get("peak_mb") for r in rows):
        mem_stages = [s for s in STAGES if s != "start-up"]
        head4 = ["layout", "kernels", *mem_stages, "largest KB"]
        body4 = []
        for r in rows:
            peaks = r["advisor"].get("peak_mb", {})
            kb_peaks = {k[3:]: v for k, v in peaks.items() if k.startswith("kb ")}
            worst = max(kb_peaks, key=kb_peaks.__getitem__) if kb_peaks else ""
            body4.append([str(r["layout"]), f"{r['size']:,}", *(f"{peaks[s]:.0f}" if s in peaks else "" for s in
                                                                mem_stages),
                          f"{worst} {kb_peaks[worst]:.0f}" if worst else ""])
        out += ["", "Peak resident MB per stage (advisor; Linux VmHWM, reset as each stage starts):", *gap,
                _fmt_table(head4, body4, markdown), *gap]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description="Benchmark advisor analyze against the read floor.")
    ap.add_argument("--sizes", type=int, nargs="+", default=[20_000, 200_000, 2_000_000])
    ap.add_argument("--layouts", nargs="+", choices=["torch_npu", "msprof"], default=["torch_npu", "msprof"])
    ap.add_argument("--peer-sizes", type=int, nargs="*", default=[20_000],
                    help="sizes at which msprof-analyze runs on the torch_npu data (none: --peer-sizes)")
    ap.add_argument("--no-peer", action="store_true", help="do not run the peer")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes, temporary data dir, no peer (CI check)")
    ap.add_argument("--markdown", action="store_true", help="print Markdown tables")
    ap.add_argument("--json", type=Path, help="also write the raw figures here")
    ap.add_argument("--pairs", type=int, default=0, metavar="N",
                    help="then N back-to-back floor/advisor pairs per layout and size, with their medians")
    args = ap.parse_args()
    global DATA
    if args.smoke:
        DATA = Path(tempfile.mkdtemp(prefix="advisor_bench_"))
        args.no_peer = True
    print(f"Machine: {machine()}" + ("\n" if args.markdown else ""), flush=True)
    byte_compile_advisor()
    rows: list[dict[str, object]] = []
    for layout in args.layouts:
        for n in args.sizes:
            profile = generate(layout, n)
            row: dict[str, object] = {"layout": layout, "size": n, "data_mb": _size_mb(floor_inputs(profile))}
            row["floor"] = run_floor(profile)
            row["advisor"] = run_advisor(profile)
            if not args.no_peer and layout == "torch_npu" and n in args.peer_sizes:
                row["peer"] = run_peer(profile)
            rows.append(row)
            a, f = row["advisor"], row["floor"]
            print(f"  {layout} {n:,}: floor {f['wall_s']:.2f} s {f['rss_mb']:.0f} MB; advisor {a['wall_s']:.2f} s "
                  f"{a['rss_mb']:.0f} MB", file=sys.stderr, flush=True)
    print(report(rows, args.markdown))
    print(f"Load average after: {' / '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if args.json:
        args.json.write_text(json.dumps({"machine": machine(), "rows": rows}, indent=1), encoding="utf-8")
    for row in rows if args.pairs else []:
        print(pairs(generate(str(row["layout"]), int(row["size"])), args.pairs, f"{row['layout']} {row['size']:,}"))
    if any(r["advisor"]["failed"] for r in rows):
        print("warning: some knowledge bases failed; see the JSON report", file=sys.stderr)
    if args.smoke:
        shutil.rmtree(DATA, ignore_errors=True)


if __name__ == "__main__":
    main()
