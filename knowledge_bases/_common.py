"""Moved to :mod:`advisor.toolkit.common` (kept so that plugins importing the old path keep working)."""

from advisor.toolkit.common import *  # noqa: F403
