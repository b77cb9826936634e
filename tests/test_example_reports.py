"""The committed example reports (reports/example.*) match what the current code produces.

When this fails, the knowledge bases or the renderers changed the example's output on purpose or not: look at
the difference, then run `python -m advisor.examples.regenerate` and commit the files.
"""

from __future__ import annotations

import difflib
import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from advisor.examples import regenerate
from advisor.report.json_report import validate

REPO = Path(__file__).resolve().parents[1]
COMMITTED = REPO / "reports"


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("example-reports")
    regenerate.regenerate(out)
    return out


def test_regenerated_files_are_complete_and_deterministic(fresh: Path) -> None:
    assert sorted(p.name for p in fresh.iterdir()) == sorted(regenerate.FILES.values())
    report = json.loads((fresh / "example.json").read_text("utf-8"))
    validate(report)
    assert report["generated_at"] == regenerate.FIXED_GENERATED_AT
    assert all(kb.get("seconds", 0.0) == 0.0 for kb in report["knowledge_bases"])
    text = "".join(p.read_text("utf-8") for p in fresh.iterdir())
    assert str(REPO) not in text  # no absolute paths of this machine
    assert report["input"]["path"].startswith("advisor/examples/")
    ET.parse(fresh / "example.xml")
    # a second run gives byte-identical files
    again = regenerate.render_all(regenerate.example_report())
    for name, body in again.items():
        assert body == (fresh / name).read_text("utf-8"), name


@pytest.mark.parametrize("name", sorted(regenerate.FILES.values()))
def test_committed_example_is_current(fresh: Path, name: str) -> None:
    committed = COMMITTED / name
    assert committed.is_file(), f"{committed} missing: run python -m advisor.examples.regenerate"
    want = regenerate.normalize(name, (fresh / name).read_text("utf-8"))
    have = regenerate.normalize(name, committed.read_text("utf-8"))
    if want != have:
        diff = "\n".join(list(difflib.unified_diff(have.splitlines(), want.splitlines(), "committed", "fresh",
                                                   lineterm=""))[:40])
        pytest.fail(f"{committed} is stale; run python -m advisor.examples.regenerate\n{diff}")


def test_normalize_ignores_only_volatile_fields() -> None:
    a = json.dumps({"generated_at": "2025-01-01", "tool": {"version": "1"}, "knowledge_bases": [{"seconds": 1.0}],
                    "score": 50})
    b = json.dumps({"generated_at": "2026-02-02", "tool": {"version": "2"}, "knowledge_bases": [{"seconds": 9.0}],
                    "score": 50})
    assert regenerate.normalize("x.json", a) == regenerate.normalize("x.json", b)
    c = json.dumps({"generated_at": "2025-01-01", "score": 51})
    assert regenerate.normalize("x.json", a) != regenerate.normalize("x.json", c)
    md1 = "score **50** · advisor 0.1.0 · 2025-01-01T00:00:00+00:00"
    md2 = "score **50** · advisor 0.2.0 · 2026-03-04T05:06:07+00:00"
    assert regenerate.normalize("x.md", md1) == regenerate.normalize("x.md", md2)
    assert regenerate.normalize("x.md", md1) != regenerate.normalize("x.md", md1.replace("50", "51"))
    h1 = '<figure id="r"><svg width="1"><path d="M 0 0"/></svg></figure><td>7</td>'
    h2 = '<figure id="r"><svg width="2"><path d="M 1 1"/></svg></figure><td>7</td>'
    assert regenerate.normalize("x.html", h1) == regenerate.normalize("x.html", h2)
    assert regenerate.normalize("x.html", h1) != regenerate.normalize("x.html", h1.replace("<td>7", "<td>8"))
