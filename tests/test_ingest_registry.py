"""The layout registry: every layout is one record declared in its reader module, the registry is the one list of
them, and ``advisor.ingest`` has no import cycle (function-local imports counted)."""

from __future__ import annotations

import ast
import csv
import re
from pathlib import Path

import networkx as nx
import pytest

import advisor.ingest as ingest
from advisor.common.errors import InputError
from advisor.ingest import detect, load, registry
from advisor.ingest.layout import Layout, Match, RankSource
from advisor.ingest.msprof import read as read_msprof

ROOT = Path(__file__).resolve().parents[1]
INGEST = ROOT / "advisor" / "ingest"
DATA = ROOT / "tests" / "data" / "ingest_text"

NAMES = [layout.name for layout in registry.LAYOUTS]


# ---------------------------------------------------------------------------------------------------------
# one record per layout, declared beside its reader
# ---------------------------------------------------------------------------------------------------------
def test_names_are_unique_and_the_report_contract() -> None:
    """The names are the JSON report's ``input.layout``: these thirteen, spelled exactly so (extend, never rename)."""
    assert len(NAMES) == len(set(NAMES))
    assert set(NAMES) >= {"msprof-cann6", "msprof-cann7", "op-summary-csv", "msprof-db", "torch_npu-text",
                          "mindspore-text", "torch_npu-db", "mindspore-db", "mindspore-legacy", "soc-job", "trace-json",
                          "msprof-op", "msprof-op-simulator"}


@pytest.mark.parametrize("module", registry.READER_MODULES, ids=lambda m: m.__name__.rsplit(".", 1)[-1])
def test_each_layout_is_declared_beside_the_reader_that_reads_it(module: object) -> None:
    for layout in module.LAYOUTS:  # type: ignore[attr-defined]
        assert layout.read.__module__ == module.__name__, layout.name  # type: ignore[attr-defined]
        assert layout.in_dir or layout.as_file, f"{layout.name} cannot be detected"
        assert layout.summary and "\n" not in layout.summary


def test_detection_order_is_explicit() -> None:
    """No two recognizers of one kind share a place in the order: which layout wins never depends on the order the
    modules happen to be listed in."""
    for matches in (registry.directory_matches(), registry.file_matches()):
        orders = [m.order for m in matches]
        assert orders == sorted(orders) and len(orders) == len(set(orders))


def test_no_layout_string_table_outside_the_readers() -> None:
    """detect, the package, jobs and context name no layout: they look layouts up in the registry. (The readers
    and a few knowledge-base checks of one layout's files still compare with their own layout's name.)"""
    names = "|".join(re.escape(n) for n in NAMES)
    quoted = re.compile(rf"[\"']({names})[\"']")
    for module in ("__init__.py", "detect.py", "context.py", "registry.py", "layout.py"):
        assert not quoted.findall((INGEST / module).read_text(encoding="utf-8")), module
    jobs = (INGEST / "jobs.py").read_text(encoding="utf-8")
    assert len(set(quoted.findall(jobs))) <= 4  # its per-layout identity rules, not a table of every layout


def test_every_layout_has_a_reader_test_and_a_readme_row() -> None:
    """Adding a layout: its reader module, its test, the README table -- each layout name is asserted by a reader
    test (``tests/test_ingest_*.py``) and listed in README's "What it reads" table."""
    tests = "\n".join(p.read_text(encoding="utf-8") for p in sorted((ROOT / "tests").glob("test_ingest_*.py"))
                      if p.name != Path(__file__).name)
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    table = readme[readme.index("## What it reads"):]
    table = table[:table.index("\n\n", table.index("| producer"))]
    listed = set(re.findall(r"`([a-z][a-z0-9_-]*)`", "\n".join(row.rsplit("|", 2)[-2] for row in table.splitlines()
                                                          if row.startswith("|"))))
    for name in NAMES:
        assert f'"{name}"' in tests, f"no reader test names layout {name}"
        assert name in listed, f"README's 'What it reads' table has no row for layout {name}"
    assert listed - set(NAMES) <= {"static-audit"}, "README lists a layout no reader declares"


SAMPLES = {
    "msprof-cann6": DATA / "msprof_cann6",
    "msprof-cann7": DATA / "msprof_cann7",
    "torch_npu-text": DATA / "broken_optional",
    "mindspore-text": DATA / "mindspore",
    "mindspore-legacy": DATA / "mindspore_legacy_full_op_time",
    "soc-job": DATA / "soc_job",
    "msprof-op": DATA / "msprof_op" / "real_cann_minimal",
    "op-summary-csv": DATA / "op_summary_v1.csv",
}
"""The layouts with a sample in the repository (the others' reader tests build theirs or use ../shared/samples)."""


@pytest.mark.parametrize("layout", sorted(SAMPLES))
def test_repository_samples_are_detected_as_their_layout(layout: str) -> None:
    assert {s.layout for s in detect(SAMPLES[layout])} == {layout}


# ---------------------------------------------------------------------------------------------------------
# a layout added to the registry alone is detected, grouped and read
# ---------------------------------------------------------------------------------------------------------
def _fake_reader(root: Path, meta: object) -> object:
    """The fake layout's reader: its ``ops.csv`` is an op_summary (read by the msprof reader)."""
    csv_file = root / "ops.csv" if root.is_dir() else root
    return read_msprof(csv_file, meta)  # type: ignore[arg-type]


def _fake_dir(d: Path) -> list[RankSource]:
    return [RankSource(d, "fake-layout")] if (d / "FAKE_PROFILER").is_file() else []


def _fake_file(p: Path) -> list[RankSource]:
    return [RankSource(p, "fake-layout")] if p.name.endswith(".fake") else []


FAKE = Layout("fake-layout", "fake profiler", "a folder holding FAKE_PROFILER and ops.csv", _fake_reader,
              in_dir=(Match(5, _fake_dir),), as_file=(Match(5, _fake_file),), context=("kernel-dev", "fake profiler"))


def test_a_layout_added_to_the_registry_alone_is_detected_and_read(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    src = DATA / "op_summary_v1.csv"
    with open(src, newline="", encoding="utf-8") as fh:
        rows = sum(1 for _ in csv.DictReader(fh))
    run = tmp_path / "run"
    run.mkdir()
    (run / "FAKE_PROFILER").write_text("", encoding="utf-8")
    (run / "ops.csv").write_bytes(src.read_bytes())
    (tmp_path / "capture.fake").write_bytes(src.read_bytes())
    with pytest.raises(InputError):
        detect(run)  # not a layout before it is registered
    monkeypatch.setattr(registry, "LAYOUTS", (*registry.LAYOUTS, FAKE))

    assert [(s.root, s.layout) for s in detect(run)] == [(run, "fake-layout")]
    assert [(s.root, s.layout) for s in detect(tmp_path / "capture.fake")] == [(tmp_path / "capture.fake",
                                                                                "fake-layout")]
    [profile] = load(run)
    assert profile.meta.layout == "fake-layout"
    assert len(profile.ops) == rows
    assert (profile.meta.context, profile.meta.context_evidence) == ("kernel-dev", "fake profiler")
    # a folder holding the run twice is two ranks of one job of the fake profiler
    (tmp_path / "run2").mkdir()
    for f in run.iterdir():
        (tmp_path / "run2" / f.name).write_bytes(f.read_bytes())
    (tmp_path / "capture.fake").unlink()
    assert sorted((s.root.name, s.rank) for s in detect(tmp_path)) == [("run", 0), ("run2", 1)]


def test_runs_follow_the_layout_record(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``Layout.runs``: two folders of a layout that records no rank are runs of one device, folded into one."""
    for name in ("PROF_a", "PROF_b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "FAKE_PROFILER").write_text("", encoding="utf-8")
    monkeypatch.setattr(registry, "LAYOUTS", (*registry.LAYOUTS, FAKE))
    assert len(detect(tmp_path)) == 2
    monkeypatch.setattr(registry, "LAYOUTS", (*registry.LAYOUTS[:-1], Layout(
        FAKE.name, FAKE.family, FAKE.summary, FAKE.read, in_dir=FAKE.in_dir, runs=True)))
    [folded] = detect(tmp_path)
    assert [folded.root.name, *(r.root.name for r in folded.runs)] == ["PROF_a", "PROF_b"]


# ---------------------------------------------------------------------------------------------------------
# no import cycle inside advisor.ingest
# ---------------------------------------------------------------------------------------------------------
def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    parts = [p for p in rel.parts if p != "__init__"]
    return ".".join(parts)


def _imports(path: Path, modules: set[str]) -> set[str]:
    """The ``advisor.ingest`` modules ``path`` imports anywhere in it (module level, in functions, under
    TYPE_CHECKING): ``from pkg import name`` is the submodule ``pkg.name`` when there is one, else ``pkg``."""
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            for alias in node.names:
                found.add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return {m for m in found if m in modules and m != name}


def test_no_import_cycle_inside_ingest() -> None:
    files = sorted(INGEST.rglob("*.py"))
    modules = {_module_name(f) for f in files}
    graph = nx.DiGraph()
    for f in files:
        graph.add_node(_module_name(f))
        graph.add_edges_from((_module_name(f), target) for target in _imports(f, modules))
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert not cycles, f"import cycles in advisor.ingest: {cycles}"
    assert graph.number_of_edges() > 40  # the walk sees the imports (a parser that saw none would pass)
    # the bottom of the package imports no ingest module; the readers never import detection or the registry
    assert not list(graph.successors("advisor.ingest.layout"))
    upper = {"advisor.ingest", "advisor.ingest.registry", "advisor.ingest.detect", "advisor.ingest.jobs",
             "advisor.ingest.context", "advisor.ingest.runs"}
    for module in registry.READER_MODULES:
        assert not set(graph.successors(module.__name__)) & upper, module.__name__


def test_the_package_says_its_job_and_what_it_may_import() -> None:
    doc = ingest.__doc__ or ""
    assert "May import" in doc and "registry" in doc
