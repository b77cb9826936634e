"""Where a plugin broke: the file and line of its own code, not of the library frame the exception came from.

A knowledge base that indexes a missing pandas column raises inside pandas (``base.py:3823``); its author needs
the line of ``kb.py`` that made the call. Used by the engine (built-in and in-process knowledge bases, hooks,
entry points) and by the child process that runs a third-party one (``advisor.engine.plugin_runner``).
"""

from __future__ import annotations

import importlib.util
import sys
import traceback
from pathlib import Path


def _own_paths(module: str | None) -> list[Path]:
    """The plugin's code: the folder of the top-level package of ``module`` (its file for a one-module plugin) and
    the module's own file (a built-in knowledge base's folder is not under its package's)."""
    if not module:
        return []
    top = module.split(".")[0]
    paths: list[Path] = []
    try:  # a module that failed to import is not in sys.modules: its spec still says where it lives
        spec = sys.modules[top].__spec__ if top in sys.modules else importlib.util.find_spec(top)
    except (ImportError, ValueError, AttributeError):
        spec = None
    if spec is not None:
        if spec.submodule_search_locations:
            paths.extend(Path(p).resolve() for p in spec.submodule_search_locations)
        elif spec.origin:
            paths.append(Path(spec.origin).resolve())
    file = getattr(sys.modules.get(module), "__file__", None)
    if file and module != top:
        paths.append(Path(file).resolve())
    return paths


def _shown(file: Path, root: Path) -> str:
    return str(file.relative_to(root.parent)) if root.is_dir() else file.name


def where(e: BaseException, module: str | None = None) -> str:
    """`` at my_kb/kb.py:42``: the last frame of ``e``'s traceback inside the plugin that ``module`` (its entry
    point's module, or its knowledge base's ``__module__``) belongs to; the innermost frame when none is."""
    frames = [f for f in traceback.extract_tb(e.__traceback__) if not f.filename.startswith("<")]
    if not frames:
        return ""
    roots = _own_paths(module)
    for frame in reversed(frames):
        file = Path(frame.filename).resolve()
        root = next((r for r in roots if file == r or r in file.parents), None)
        if root is not None:
            return f" at {_shown(file, root)}:{frame.lineno}"
    return f" at {Path(frames[-1].filename).name}:{frames[-1].lineno}"
