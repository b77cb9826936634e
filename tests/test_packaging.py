"""What ``pip install`` puts in site-packages: only ``advisor`` at the top level, the built-in knowledge bases and
rules under its namespace, and the same names when advisor runs from this checkout (the end-to-end install is
``tests/test_scaffold.py::test_scaffold_end_to_end_in_a_fresh_venv``)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

from setuptools import find_packages

from advisor.config.loader import builtin_rules_dir

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
SETUPTOOLS = PYPROJECT["tool"]["setuptools"]
MAPPED = {"advisor.knowledge_bases": "knowledge_bases", "advisor.builtin_rules": "rules"}


def test_every_package_folder_is_installed_under_advisor() -> None:
    assert SETUPTOOLS["package-dir"] == MAPPED
    expected = set(find_packages(str(REPO), include=["advisor", "advisor.*"])) | set(MAPPED)
    assert set(SETUPTOOLS["packages"]) == expected, "pyproject.toml [tool.setuptools] packages is out of date"
    assert {name.split(".")[0] for name in SETUPTOOLS["packages"]} == {"advisor"}
    for folder in MAPPED.values():
        assert (REPO / folder / "__init__.py").is_file()
    assert set(SETUPTOOLS["package-data"]["advisor.builtin_rules"]) == {"*.yaml", "schema/*.json"}


def test_every_builtin_knowledge_base_is_registered_by_its_namespaced_module() -> None:
    registered = PYPROJECT["project"]["entry-points"]["advisor.knowledge_bases"]
    modules = {p.stem for p in (REPO / "knowledge_bases").glob("*.py") if p.stem != "__init__"}
    assert sorted(registered.values()) == sorted(f"advisor.knowledge_bases.{m}" for m in modules)


def test_builtin_rules_are_found_through_the_package() -> None:
    assert builtin_rules_dir() == REPO / "rules"
    names = {p.stem for p in builtin_rules_dir().glob("*.yaml")}
    assert {"platforms", "bound", "transdata"} <= names
    assert all((builtin_rules_dir() / "schema" / f"{n}.schema.json").is_file() for n in names)


_CHECKOUT_RUN = """
import sys
sys.meta_path[:] = [f for f in sys.meta_path if "editable" not in repr(f).lower()]  # as after `pip install .`
sys.path.insert(0, sys.argv[1])
import advisor.knowledge_bases.overall as overall
from advisor.engine import kb_engine as engine
from advisor.config.loader import builtin_rules_dir
found = engine.find_plugins()
print(overall.__file__, builtin_rules_dir(), len(engine.discover(found)), sorted(found.errors),
      sorted(m for m in sys.modules if m.split(".")[0] in ("knowledge_bases", "rules")))
"""


def test_a_checkout_ahead_of_the_installed_copy_has_the_same_names() -> None:
    """CI runs ``python -m pytest`` from the repository after a regular ``pip install .``: the checkout's
    ``advisor`` is imported, and its built-ins must answer to the installed names, with nothing at the top level."""
    proc = subprocess.run([sys.executable, "-c", _CHECKOUT_RUN, str(REPO)], capture_output=True, text=True,
                          cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    kb_file, rules_dir, count, errors, top_level = proc.stdout.rsplit("\n", 2)[-2].split(" ", 4)
    assert Path(kb_file) == REPO / "knowledge_bases" / "overall.py"
    assert Path(rules_dir) == REPO / "rules"
    assert int(count) >= len(PYPROJECT["project"]["entry-points"]["advisor.knowledge_bases"])
    assert (errors, top_level) == ("[]", "[]")


_OLD_IMPORT = re.compile(r"^\s*(from|import)\s+(knowledge_bases|rules)\b|import_module\(f?[\"'](knowledge_bases|rules)\.",
                         re.MULTILINE)


def test_nothing_imports_the_builtins_by_a_top_level_name() -> None:
    """``knowledge_bases`` / ``rules`` would import a second copy of a module (from the checkout only): every
    import is the namespaced one, in code, tests, benchmarks, docs and the scaffold template."""
    roots = ["advisor", "knowledge_bases", "tests", "benchmarks", "docs", "README.md"]
    files = [p for r in roots for p in ([REPO / r] if (REPO / r).is_file() else (REPO / r).rglob("*"))
             if p.suffix in (".py", ".md", ".tmpl") and "__pycache__" not in p.parts]
    offenders = [str(p.relative_to(REPO)) for p in files if _OLD_IMPORT.search(p.read_text(encoding="utf-8"))]
    assert not offenders
