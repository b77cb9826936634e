"""The long hostile-input run: the mutation corpus of ``tests/fuzz_corpus.py`` (with more seeds) through the CLI.

    python benchmarks/fuzz_long.py [--seeds 3] [--jobs 2] [--limit N]

Every case is run as a user would (``advisor analyze ... --format json``; a graph with ``--graph``, a rules file with
``--rules``, a saved report with ``advisor report``) and checked against the contract of issue 14:

- exit 0, 2 or 3 (1 is the gate, never a reaction to input; 4 is a bug); no traceback;
- exit 2: exactly one line on stderr;
- exit 0 or 3: a complete JSON report on stdout (exit 3: a knowledge base failed, the report says which);
- the input is byte for byte unchanged; the run ends within the time limit (no hang).

It prints one line per failing case and a summary by defect class; exit 1 when any case broke the contract. The
in-CI part of the suite (tests/test_fuzz_corpus.py) runs the same cases at the reader of each input.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests.fuzz_corpus import Case, corpus  # noqa: E402
from tests.hostile import mini_tn, tree_hash  # noqa: E402

TIME_LIMIT_S = 300


def run_case(case: Case) -> tuple[Case, str, str]:
    """(case, outcome: ok-0 / ok-2 / ok-3 / BROKEN, detail)."""
    with tempfile.TemporaryDirectory(prefix="advisor-fuzz-") as tmp_dir:
        tmp = Path(tmp_dir)
        inputs = tmp / "inputs"
        inputs.mkdir()
        target = case.build(inputs)
        profile = mini_tn(tmp / "base" / "rank0_ascend_pt") if case.kind in ("graph", "rules") else None
        args = {"profile": ["analyze", target, "--format", "json", "-q"],
                "graph": ["analyze", profile, "--graph", target, "--format", "json", "-q"],
                "rules": ["analyze", profile, "--rules", target, "--format", "json", "-q"],
                "report": ["report", target, "--format", "json"]}[case.kind]
        before = tree_hash(inputs)
        started = time.monotonic()
        try:
            proc = subprocess.run([sys.executable, "-m", "advisor", *map(str, args)], capture_output=True, text=True,
                                  timeout=TIME_LIMIT_S, stdin=subprocess.DEVNULL, cwd=tmp,
                                  env={**os.environ, "ADVISOR_PLUGIN_LOAD_TIMEOUT": "30"})
        except subprocess.TimeoutExpired:
            return case, "BROKEN", f"no result after {TIME_LIMIT_S} s (hang)"
        seconds = time.monotonic() - started
        problems = []
        if "Traceback" in proc.stderr:
            problems.append("traceback")
        if proc.returncode not in (0, 2, 3):
            problems.append(f"exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
        if proc.returncode == 2 and len([ln for ln in proc.stderr.splitlines() if ln.strip()]) != 1:
            problems.append(f"exit 2 with {len(proc.stderr.splitlines())} stderr lines")
        if proc.returncode in (0, 3):
            try:
                json.loads(proc.stdout)
            except ValueError:
                problems.append("stdout is not a JSON report")
        if tree_hash(inputs) != before:
            problems.append("an input was changed")
        if problems:
            return case, "BROKEN", "; ".join(problems)
        return case, f"ok-{proc.returncode}", f"{seconds:.1f} s"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=3, help="seeds per random mutation (default 3)")
    ap.add_argument("--jobs", type=int, default=2, help="cases run at once (default 2)")
    ap.add_argument("--limit", type=int, default=0, help="run only the first N cases")
    args = ap.parse_args()
    cases = list(corpus(tuple(range(args.seeds))))
    if args.limit:
        cases = cases[: args.limit]
    started = time.monotonic()
    outcomes: dict[int, collections.Counter[str]] = collections.defaultdict(collections.Counter)
    broken = 0
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        for case, outcome, detail in pool.map(run_case, cases):
            outcomes[case.defect][outcome] += 1
            if outcome == "BROKEN":
                broken += 1
                print(f"BROKEN {case.id} (class {case.defect}): {detail}", flush=True)
    print(f"\n{len(cases)} cases in {time.monotonic() - started:.0f} s; {broken} broke the contract")
    for defect in sorted(outcomes):
        c = outcomes[defect]
        print(f"  class {defect:2}: " + ", ".join(f"{k} {v}" for k, v in sorted(c.items())))
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
