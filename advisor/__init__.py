"""advisor: a rule-based performance advisor for AI models on Huawei Ascend NPUs.

Plugins import one name from here: ``from advisor import hookimpl``.
"""

from __future__ import annotations

import sys

import pluggy

from advisor import _source_tree

__version__ = "0.1.0"

hookimpl = pluggy.HookimplMarker("advisor")
"""Marker for knowledge-base plugin hook implementations (see ``advisor.hookspecs``)."""

__all__ = ["__version__", "hookimpl"]

_source_tree.map_subpackages(sys.modules[__name__])
