"""Golden reports: what a user reads off a report (findings, score, ``time``), committed per shared sample and for
the built-in example, so that performance work can prove it changed no result (issue 18.4).

    python -m tests.golden --update              # rewrite tests/data/golden/ from the code on sys.path
    python -m tests.golden --update --out DIR    # write elsewhere
    python -m tests.golden --check               # exit 1 when a fresh report differs from its golden

The goldens must come from ``main``'s code, not from the branch that is being checked: generate them in a
separate worktree of ``main`` (``git worktree add /tmp/main-golden main``) with that tree first on the path::

    cd /tmp/main-golden && ADVISOR_SHARED_SAMPLES=/work/shared/samples PYTHONPATH=/tmp/main-golden \
        python -m tests.golden --update --out <branch>/tests/data/golden

Each golden is small: ``generated_at``, knowledge-base timings and absolute paths are not in it; savings are
kept as the report rounds them (3 decimals).
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from advisor.examples.regenerate import relativize

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "data" / "golden"
SAMPLES = Path(os.environ.get("ADVISOR_SHARED_SAMPLES", REPO.parent / "shared" / "samples"))
"""``../shared/samples`` beside the repo (set ADVISOR_SHARED_SAMPLES when running from a worktree elsewhere)."""
LIST = REPO / "tests" / "data" / "shared_samples.txt"
EXAMPLE = "builtin-example"


def sample_paths() -> list[str]:
    """The usable shared samples (lines with a leading ``!`` are inputs that must be refused: no report)."""
    if not LIST.is_file():
        return []
    return [p for p in LIST.read_text("utf-8").split() if not p.startswith("!")]


def golden_name(rel: str) -> str:
    """A file name for sample ``rel`` (its path with separators and odd characters folded)."""
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", rel).strip("_")[-150:] + ".json"


def _finding(f: dict[str, Any]) -> dict[str, Any]:
    out = {
        "rule": f.get("rule"),
        "title": f.get("title"),
        "severity": f.get("severity"),
        "ops": f.get("ops"),
        "estimated_saving_us": f.get("estimated_saving_us"),
        "share_of_device_time": f.get("share_of_device_time"),
    }
    if f.get("symptoms"):
        out["symptoms"] = [_finding(s) for s in f["symptoms"]]
    return out


def digest(report: dict[str, Any]) -> dict[str, Any]:
    """The parts of a report that must not change when only speed changes."""
    return {
        "score": report.get("score"),
        "score_detail": report.get("score_detail"),
        "time": report.get("time"),
        "summary": report.get("summary"),
        "findings": [_finding(f) for f in report.get("findings", [])],
        "waived": [_finding(f) for f in report.get("waived", [])],
    }


def fresh_digest(rel: str) -> dict[str, Any]:
    """Analyze one shared sample (or the built-in example) as ``advisor analyze`` would, with the built-in rules."""
    from advisor.pipeline.analysis import AnalysisOptions, run_analysis

    if rel == EXAMPLE:
        from advisor.examples.regenerate import example_report

        return digest(example_report())
    with tempfile.TemporaryDirectory() as tmp:
        neutral = Path(tmp) / "pyproject.toml"
        neutral.write_text("", encoding="utf-8")
        report = run_analysis(SAMPLES / rel, options=AnalysisOptions(pyproject=neutral), workers=1).report
    return relativize(digest(report), (str(SAMPLES) + os.sep,))


def dump(data: dict[str, Any]) -> str:
    return json.dumps(data, indent=1, sort_keys=True, ensure_ascii=False) + "\n"


def names() -> list[str]:
    return [EXAMPLE, *[p for p in sample_paths() if (SAMPLES / p).exists()]]


def committed() -> list[str]:
    """The names that have a committed golden."""
    return [n for n in names() if (GOLDEN / golden_name(n)).is_file()]


def changes(rel: str, lines: int = 60) -> str:
    """How a fresh analysis of ``rel`` differs from its golden (a unified diff, ``lines`` at most); "" when not."""
    want = (GOLDEN / golden_name(rel)).read_text("utf-8")
    have = dump(fresh_digest(rel))
    if have == want:
        return ""
    return "\n".join(list(difflib.unified_diff(want.splitlines(), have.splitlines(), "golden", "fresh",
                                               lineterm=""))[:lines])


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--update", action="store_true", help="write the goldens")
    ap.add_argument("--check", action="store_true", help="compare fresh reports with the goldens")
    ap.add_argument("--out", type=Path, default=GOLDEN)
    args = ap.parse_args(argv)
    import advisor

    print(f"advisor from {Path(advisor.__file__).parent}", file=sys.stderr)
    bad = 0
    if args.update:
        args.out.mkdir(parents=True, exist_ok=True)
        for old in args.out.glob("*.json"):
            old.unlink()
    for rel in names():
        body = dump(fresh_digest(rel))
        target = args.out / golden_name(rel)
        if args.update:
            target.write_text(body, encoding="utf-8")
        elif not target.is_file() or target.read_text("utf-8") != body:
            print(f"differs: {rel}", file=sys.stderr)
            bad += 1
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
