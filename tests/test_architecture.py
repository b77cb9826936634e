"""The package tree is the pipeline: each stage imports only earlier stages, no module imports itself through
others, and knowledge bases (built-in ones as third-party ones) import only the plugin API.

Imports are read from the source (every ``import`` statement, function-local ones included); those under
``if TYPE_CHECKING:`` name types for annotations only and are not counted.
"""

from __future__ import annotations

import ast
from pathlib import Path

import networkx as nx
import pytest

REPO = Path(__file__).resolve().parent.parent
PACKAGE_FOLDERS = {"advisor": REPO / "advisor", "advisor.knowledge_bases": REPO / "knowledge_bases",
                   "advisor.builtin_rules": REPO / "rules"}

STAGES: list[tuple[str, tuple[str, ...]]] = [
    ("common", ("advisor.common", "advisor._source_tree")),
    ("config", ("advisor.config",)),
    ("core", ("advisor.model", "advisor.timemodel", "advisor.findings", "advisor.platform", "advisor.core")),
    ("graph", ("advisor.graph",)),
    ("ingest", ("advisor.ingest",)),
    ("plugin API", ("advisor.kb", "advisor.hookspecs", "advisor.toolkit")),
    ("engine", ("advisor.engine",)),
    ("knowledge bases", ("advisor.knowledge_bases", "advisor.builtin_rules")),
    ("pipeline", ("advisor.pipeline",)),
    ("test kit", ("advisor.testing",)),
    ("report", ("advisor.report", "advisor.schemas")),
    ("compare", ("advisor.compare",)),
    ("fix", ("advisor.fix",)),
    ("cli", ("advisor.cli", "advisor.scaffold", "advisor.examples", "advisor.__main__")),
]
"""The stages in pipeline order (README "Architecture"); a module may import its own stage and earlier ones."""

PLUGIN_API = ("advisor", "advisor.kb", "advisor.hookspecs", "advisor.findings", "advisor.model", "advisor.timemodel",
              "advisor.platform", "advisor.toolkit")
"""What a knowledge base may import of advisor (docs/plugins.md, "The plugin API"): ``advisor`` itself is
``hookimpl``; ``advisor.toolkit`` covers its modules."""


def _modules() -> dict[str, Path]:
    out = {}
    for package, folder in PACKAGE_FOLDERS.items():
        for f in folder.rglob("*.py"):
            rel = f.relative_to(folder)
            if "template" in rel.parts or "__pycache__" in rel.parts:
                continue
            parts = [p for p in rel.with_suffix("").parts if p != "__init__"]
            out[".".join([package, *parts])] = f
    return out


MODULES = _modules()


def _type_only(tree: ast.Module) -> set[int]:
    skip: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            for stmt in node.body:
                skip.update(id(n) for n in ast.walk(stmt))
    return skip


def _resolve(name: str) -> str | None:
    """The advisor module ``name`` refers to (an imported name inside a module: that module)."""
    while name and name not in MODULES:
        name = name.rpartition(".")[0]
    return name or None


def imports_of(module: str) -> set[str]:
    """The advisor modules ``module`` imports at run time."""
    path = MODULES[module]
    tree = ast.parse(path.read_text(encoding="utf-8"))
    skip = _type_only(tree)
    package = module if path.name == "__init__.py" else module.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(tree):
        if id(node) in skip:
            continue
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join([*anchor, *([node.module] if node.module else [])])
            names = [f"{base}.{a.name}" for a in node.names] or [base]
        else:
            continue
        for name in names:
            if name.startswith("advisor") and (target := _resolve(name)) and target != module:
                found.add(target)
    return found


def _graph() -> nx.DiGraph:
    g = nx.DiGraph()
    for m in MODULES:
        g.add_node(m)
        g.add_edges_from((m, t) for t in imports_of(m))
    return g


GRAPH = _graph()


def stage_of(module: str) -> int:
    best = None
    for i, (_, prefixes) in enumerate(STAGES):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and (best is None or len(p) > best[1]):
                best = (i, len(p))
    assert best is not None, f"{module} belongs to no stage: add it to STAGES (and the README's architecture)"
    return best[0]


def test_every_module_belongs_to_a_stage():
    assert [m for m in MODULES if m != "advisor" and not any(
        m == p or m.startswith(p + ".") for _, ps in STAGES for p in ps)] == []


def test_no_module_imports_a_later_stage():
    forward = [f"{a} ({STAGES[stage_of(a)][0]}) imports {b} ({STAGES[stage_of(b)][0]})"
               for a, b in GRAPH.edges if a != "advisor" and b != "advisor" and stage_of(b) > stage_of(a)]
    assert forward == []


def test_no_import_cycles():
    cycles = [sorted(c) for c in nx.strongly_connected_components(GRAPH) if len(c) > 1]
    assert cycles == []


def test_knowledge_bases_import_only_the_plugin_api():
    def allowed(target: str) -> bool:
        return any(target == p or (p != "advisor" and target.startswith(p + ".")) for p in PLUGIN_API)

    kbs = [m for m in MODULES if m.startswith("advisor.knowledge_bases.")]
    assert len(kbs) >= 16
    outside = {m: sorted(t for t in imports_of(m) if not allowed(t)) for m in kbs}
    assert {m: t for m, t in outside.items() if t} == {}


def test_the_toolkit_never_imports_a_knowledge_base():
    assert [(a, b) for a, b in GRAPH.edges
            if a.startswith("advisor.toolkit") and b.startswith("advisor.knowledge_bases")] == []


@pytest.mark.parametrize("package", sorted(
    m for m, f in MODULES.items() if f.name == "__init__.py" and m.count(".") == 1
    and m not in ("advisor.knowledge_bases", "advisor.builtin_rules", "advisor.examples", "advisor.schemas")))
def test_each_stage_package_says_its_job_and_what_it_may_import(package):
    doc = ast.get_docstring(ast.parse(MODULES[package].read_text(encoding="utf-8"))) or ""
    assert len(doc) > 60, f"{package}/__init__.py: say the package's job"
    assert "may import" in doc.lower(), f"{package}/__init__.py: say what the package may import"
