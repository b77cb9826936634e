"""The cluster generator of ``benchmarks/gen_cluster.py`` (a script, not a package), loaded once for the tests that
analyze generated clusters."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent


def load() -> ModuleType:
    """``benchmarks/gen_cluster.py`` as the module ``gen_cluster`` (its ``generate(out, ranks=..., ...)``)."""
    if "gen_cluster" in sys.modules:
        return sys.modules["gen_cluster"]
    spec = importlib.util.spec_from_file_location("gen_cluster", ROOT / "benchmarks" / "gen_cluster.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_cluster"] = module
    spec.loader.exec_module(module)
    return module
