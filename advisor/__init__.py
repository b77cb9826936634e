"""advisor: a rule-based performance advisor for AI models on Huawei Ascend NPUs.

Plugins import one name from here: ``from advisor import hookimpl``.
"""

from __future__ import annotations

import pluggy

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("advisor")
"""Marker for knowledge-base plugin hook implementations (see ``advisor.hookspecs``)."""

__all__ = ["__version__", "hookimpl"]
