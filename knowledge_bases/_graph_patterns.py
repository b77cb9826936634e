"""Moved to :mod:`advisor.toolkit.graph_patterns` (kept so that plugins importing the old path keep working)."""

from advisor.toolkit.graph_patterns import *  # noqa: F403
