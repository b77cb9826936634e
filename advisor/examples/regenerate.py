"""Regenerate the committed example reports (``reports/example.{json,md,html,xml}``) from the built-in example.

    python -m advisor.examples.regenerate            # write reports/ in the current directory
    python -m advisor.examples.regenerate --out DIR  # write elsewhere
    python -m advisor.examples.regenerate --check    # exit 1 when the committed files are stale

Output is deterministic: a fixed ``generated_at``, knowledge-base timings set to 0, paths relative to the
directory that holds the ``advisor`` package, no user rules (``[tool.advisor]`` in a nearby pyproject.toml is
ignored). ``tests/test_example_reports.py`` fails when the committed files no longer match.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

FIXED_GENERATED_AT = "2025-01-01T00:00:00+00:00"
"""``generated_at`` of the committed example (override with ADVISOR_GENERATED_AT)."""
FILES = {"json": "example.json", "markdown": "example.md", "html": "example.html", "junit": "example.xml"}
PACKAGE_PARENT = Path(__file__).resolve().parents[2]
"""Paths inside the report are written relative to this directory (the repo root, or site-packages)."""


def relativize(value: Any, prefixes: tuple[str, ...]) -> Any:
    """``value`` with every string's path ``prefixes`` removed (reports that do not depend on where they ran)."""
    if isinstance(value, str):
        for p in prefixes:
            value = value.replace(p, "")
        return value
    if isinstance(value, list):
        return [relativize(v, prefixes) for v in value]
    if isinstance(value, dict):
        return {k: relativize(v, prefixes) for k, v in value.items()}
    return value


def stabilize(report: dict[str, Any], generated_at: str) -> dict[str, Any]:
    """The report without what changes from run to run or machine to machine."""
    root = str(PACKAGE_PARENT)
    prefixes = (root + os.sep, root + "/") if os.sep != "/" else (root + "/",)
    out = relativize(report, prefixes)
    out["generated_at"] = generated_at
    for kb in out.get("knowledge_bases", []):
        if "seconds" in kb:
            kb["seconds"] = 0.0
    for f in out.get("findings", []):  # order-free collections some knowledge bases fill from sets
        sg = f.get("evidence", {}).get("subgraph")
        if isinstance(sg, dict) and isinstance(sg.get("edges"), list):
            sg["edges"] = sorted(sg["edges"], key=str)
        if isinstance(f.get("saving_by_op"), dict):
            f["saving_by_op"] = dict(sorted(f["saving_by_op"].items()))
    return out


def example_report(generated_at: str | None = None) -> dict[str, Any]:
    """Analyze the built-in example (profile + graph) with the built-in rules only."""
    from advisor.examples import example_graph, example_profile
    from advisor.pipeline.analysis import AnalysisOptions, run_analysis

    with tempfile.TemporaryDirectory() as tmp:
        neutral = Path(tmp) / "pyproject.toml"
        neutral.write_text("", encoding="utf-8")
        result = run_analysis(example_profile(), example_graph(), AnalysisOptions(pyproject=neutral), workers=1)
    when = generated_at or os.environ.get("ADVISOR_GENERATED_AT") or FIXED_GENERATED_AT
    return stabilize(result.report, when)


def render_all(report: dict[str, Any]) -> dict[str, str]:
    """File name -> text for every committed format."""
    from advisor.report import render

    return {name: render(report, fmt) for fmt, name in FILES.items()}


def regenerate(out_dir: Path, generated_at: str | None = None) -> list[Path]:
    from advisor.common.output import write_atomic

    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for name, text in render_all(example_report(generated_at)).items():
        target = out_dir / name
        write_atomic(target, text)
        written.append(target)
    return written


_SVG = re.compile(r"<svg\b.*?</svg>", re.S)
_VERSION = re.compile(r"advisor \d+\.\d+\.\d+\S*")


def normalize(name: str, text: str) -> str:
    """A form of a committed report that ignores what may legitimately differ between machines: the time of
    generation, timings, the advisor version, and chart drawing details (matplotlib versions draw paths
    differently; the charts' data is checked through the JSON)."""
    if name.endswith(".json"):
        data = json.loads(text)
        data.pop("generated_at", None)
        data.get("tool", {}).pop("version", None)
        for kb in data.get("knowledge_bases", []):
            kb.pop("seconds", None)
        return json.dumps(data, indent=1, sort_keys=True)
    if name.endswith(".xml"):
        root = ET.fromstring(text)
        for el in root.iter():
            el.attrib.pop("time", None)
            if el.tag == "property" and el.get("name") == "advisor_version":
                el.set("value", "")
        return ET.tostring(root, encoding="unicode")
    text = re.sub(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[^\s<·]*", "<time>", text)
    text = _VERSION.sub("advisor <version>", text)
    if name.endswith(".html"):
        text = _SVG.sub("<svg/>", text)
    return text


def stale(committed_dir: Path, fresh: dict[str, str]) -> list[str]:
    """Names of committed files that are missing or differ from ``fresh`` after normalization."""
    out = []
    for name, text in fresh.items():
        path = committed_dir / name
        if not path.is_file() or normalize(name, path.read_text("utf-8")) != normalize(name, text):
            out.append(name)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m advisor.examples.regenerate", description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("reports"), help="directory to write (default: reports)")
    parser.add_argument("--check", action="store_true", help="do not write; exit 1 when the files in --out are stale")
    args = parser.parse_args(argv)
    if args.check:
        names = stale(args.out, render_all(example_report()))
        for n in names:
            print(f"stale: {args.out / n}", file=sys.stderr)
        if names:
            print("run: python -m advisor.examples.regenerate", file=sys.stderr)
        return 1 if names else 0
    for path in regenerate(args.out):
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
