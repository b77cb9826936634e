"""advisor: a rule-based performance advisor for AI models on Huawei Ascend NPUs.

Plugins import one name from here: ``from advisor import hookimpl``.

The modules at this level are the plugin API (``hookspecs``, ``kb``, ``findings``, ``model``, ``timemodel``,
``platform``, ``testing``, and the ``toolkit`` package); the other packages are the pipeline's stages, in order:
``common`` -> ``config`` -> ``core`` -> ``graph`` -> ``ingest`` -> (plugin API) -> ``engine`` -> knowledge bases ->
``pipeline`` -> ``report`` -> ``compare`` -> ``fix`` -> ``cli``. Each imports only earlier ones
(``tests/test_architecture.py``).
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
