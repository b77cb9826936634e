"""The built-in example: an SSD-like detector with a Mish backbone profiled on Ascend 310P3.

``advisor analyze --example`` analyzes it; ``python -m advisor.examples.build`` regenerates its files.
"""

from __future__ import annotations

from pathlib import Path

EXAMPLE_DIR = Path(__file__).parent / "ssd_mish_310p"


def example_profile() -> Path:
    """The example's PROF_ directory (msprof CANN 8 layout)."""
    return next(EXAMPLE_DIR.glob("PROF_*"))


def example_graph() -> Path:
    """The example's ``atc --mode=1`` OM JSON."""
    return EXAMPLE_DIR / "ssd_mish_310p.om.json"
