"""Events no rule reads: ``advisor analyze`` on a ``with_stack`` trace, with the events selection (the default) and
with every event kept (as a plugin written before API 1.4 makes it), side by side (not a test: it prints a table).

Usage:
    python benchmarks/with_stack.py                    # 200k kernels
    python benchmarks/with_stack.py --sizes 200000 2000000 --markdown

Data: the torch_npu profiles of ``benchmarks/run.py`` (``../shared/bench/gen_ascend_pt.py``), copied under
``benchmarks/_data/with_stack_<n>/`` with their ``trace_view.json`` given what ``with_stack=True`` adds to a real
trace: every ``aten::`` op called from two Python frames (``python_function`` events enclosing it, each with its own
``Python id`` args, as torch_npu writes them). The shared torch_npu samples hold 1.5 such frames per op; here 2.
No knowledge base reads these frames row by row (the trace's call stacks are the ops' ``Call stack`` args).
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

import orjson

sys.path.insert(0, str(Path(__file__).resolve().parent))
from run import DATA, _fmt_table, generate, machine, measure  # noqa: E402 - the benchmark's own helpers

FRAMES = ("torch/nn/modules/module.py(1501): _call_impl", "model.py(%d): forward")
KEEP_EVERY_EVENT = (
    "import sys\n"
    "from advisor import engine\n"
    "engine.events_projection = lambda infos, rules: None  # as with a knowledge base of API < 1.4\n"
    "from advisor.cli import main\n"
    "sys.exit(main())\n")


def with_stack(n: int) -> Path:
    """The torch_npu profile of ``n`` kernels with two Python frames around every aten op (cached)."""
    base = generate("torch_npu", n)
    out_root = DATA / f"with_stack_{n}"
    if (out_root / base.name).exists():
        return out_root / base.name
    tmp = out_root.with_suffix(".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    shutil.copytree(base, tmp / base.name, ignore=shutil.ignore_patterns("trace_view.json"))
    trace = next(base.rglob("trace_view.json"))
    python_id = 0
    with open(trace, "rb") as src, open(tmp / base.name / trace.relative_to(base), "wb") as dst:
        sep = b"["

        def emit(body: bytes) -> None:
            nonlocal sep
            dst.write(sep + body)
            sep = b",\n"

        for line in src:  # the generator writes one event per line: "[{...}," "{...}," ... "{...}]"
            body = line.strip().lstrip(b"[").rstrip(b",]")
            if not body:
                continue
            emit(body)
            if b'"aten::' not in body:
                continue
            ev = orjson.loads(body)
            ts, dur = float(ev["ts"]), float(ev["dur"])
            for depth, frame in enumerate(FRAMES):
                python_id += 1
                pad = 0.5 * (len(FRAMES) - depth)
                emit(orjson.dumps({
                    "ph": "X", "name": frame % (python_id % 997) if "%d" in frame else frame, "pid": ev["pid"],
                    "tid": ev["tid"], "ts": f"{ts - pad:.3f}", "dur": dur + 2 * pad, "cat": "python_function",
                    "args": {"Python id": python_id, "Python parent id": python_id - 1, "Python thread": 0}}))
        dst.write(b"]\n")
    tmp.rename(out_root)
    return out_root / base.name


def run(profile: Path, keep_every_event: bool) -> dict[str, float]:
    cmd = [sys.executable, "-c", KEEP_EVERY_EVENT] if keep_every_event else [
        sys.executable, "-m", "advisor"]
    wall, rss, out = measure([*cmd, "analyze", str(profile), "--format", "json", "--quiet"])
    report = json.loads(out)
    return {"wall_s": wall, "rss_mb": rss, "findings": len(report["findings"]), "score": report["score"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[200000])
    ap.add_argument("--markdown", action="store_true")
    args = ap.parse_args()
    print(machine())
    rows = []
    for n in args.sizes:
        profile = with_stack(n)
        size = sum(p.stat().st_size for p in profile.rglob("*") if p.is_file()) / 1e6
        for keep in (False, True):
            r = run(profile, keep)
            rows.append([f"{n:,}", f"{size:,.0f}", "every event kept" if keep else "selected (default)",
                         f"{r['wall_s']:.1f}", f"{r['rss_mb']:.0f}", str(r["findings"]), f"{r['score']}"])
            print(" | ".join(rows[-1]), file=sys.stderr)
    print(_fmt_table(["kernels", "MB", "events", "s", "peak MB", "findings", "score"], rows, args.markdown))


if __name__ == "__main__":
    main()
