"""Run from a source checkout as from an installed wheel.

Installed, the repository folders ``knowledge_bases/`` and ``rules/`` are the subpackages
``advisor.knowledge_bases`` and ``advisor.builtin_rules`` (``[tool.setuptools.package-dir]`` in pyproject.toml).
In a checkout they sit beside ``advisor/``, not inside it; whenever the checkout's ``advisor`` is the one imported
(``python -m pytest`` from the repository root puts it ahead of the installed copy; scripts under ``benchmarks/``)
this maps the two names onto those folders, as the installed layout has them, so that every import is the
namespaced one wherever advisor runs.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

FOLDERS = {"knowledge_bases": "knowledge_bases", "builtin_rules": "rules"}
"""Subpackage of ``advisor`` -> its folder at the repository root."""


def _load(name: str, folder: Path) -> ModuleType:
    spec = importlib.util.spec_from_file_location(name, folder / "__init__.py",
                                                  submodule_search_locations=[str(folder)])
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def map_subpackages(package: ModuleType) -> None:
    """Give ``package`` (the ``advisor`` package) its subpackages that live outside its folder, when it is
    imported from a checkout; an installed ``advisor`` has them inside and this does nothing."""
    inside = Path(package.__file__).resolve().parent
    for name, folder_name in FOLDERS.items():
        full = f"{package.__name__}.{name}"
        folder = inside.parent / folder_name
        if full in sys.modules or (inside / name).is_dir() or not (folder / "__init__.py").is_file():
            continue
        setattr(package, name, _load(full, folder))
