"""How many cores the run's chip has, and how many of them each task kept busy.

The core counts come from the profile's ``info.json`` first, then from ``rules/platforms.yaml`` for the chip the run
was identified as (:func:`advisor.platform.counts_decided`: by a file's counts, the kernels' own counters, ``--chip``
or an exact chip name), else from the profile itself: the block dim most of its multi-core time uses (large kernels
fill every core, so that value is the core count; an underestimate only makes the checks quieter). A family's
default (``Ascend910B-class`` -> Ascend910B2) is not trusted for this either (its chips differ in core count): the
profile's block dims pick among the family's counts, never a count none of its chips has.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from advisor.model import Profile
from advisor.platform import counts_decided
from advisor.toolkit.time import isin_mask


@dataclass(frozen=True)
class CoreCounts:
    cube: int | None
    """AI (cube) cores: what AI_CORE / MIX_AIC tasks are spread over."""
    vector: int | None
    """Vector cores: what AI_VECTOR_CORE / MIX_AIV tasks are spread over."""
    source: str
    """``info_json``, ``platform``, ``inferred`` or ``unknown``."""
    detail: str
    """Where exactly, in words."""


def core_counts(profile: Profile, platform: Mapping[str, Any], cube_cores: Sequence[str],
                vector_cores: Sequence[str]) -> CoreCounts:
    """The chip's core counts (see the module doc); ``cube_cores`` / ``vector_cores`` name the task types of each
    core family."""
    meta = profile.meta
    if meta.ai_core_num:
        aic = int(meta.ai_core_num)
        return CoreCounts(aic, int(meta.aiv_num) if meta.aiv_num else aic, "info_json", "the profile's info.json")
    chip = str(meta.chip or "")
    if counts_decided(platform) and not (chip.endswith("-class") and "soc_decided_by" not in platform) \
            and platform.get("ai_core_num"):
        aic = int(platform["ai_core_num"])
        return CoreCounts(aic, int(platform.get("vector_core_num") or 0) or aic, "platform",
                          f"rules/platforms.yaml {platform.get('soc')}{_decided(platform)}")
    ops = profile.ops
    if not len(ops):
        return CoreCounts(None, None, "unknown", "unknown")
    blocks = ops["block_dim"].to_numpy(dtype="float64")
    dur = ops["duration_us"].to_numpy(dtype="float64")

    def mode(cores: Sequence[str]) -> int | None:
        m = isin_mask(ops["core"], cores) & (blocks > 1) & np.isfinite(dur)
        if not m.any():
            return None
        return int(pd.Series(dur[m]).groupby(blocks[m]).sum().idxmax())

    family = {tuple(v) for v in (platform.get("soc_family") or {}).values()}
    if family:  # a family's chips: the counts of the one whose cores the kernels' block dims fill in whole waves
        a, v = _family_fit(ops, blocks, dur, sorted(family), cube_cores, vector_cores,
                           (platform.get("ai_core_num"), platform.get("vector_core_num")))
        return CoreCounts(a, v or a, "inferred",
                          f"inferred from the block dims of this profile among {chip or platform.get('soc')}'s chips "
                          f"({a} AI / {v or a} vector cores: the counts whose multiples most kernel time runs at)")
    aic, aiv = mode(cube_cores), mode(vector_cores)
    if aic is None and aiv is None:
        return CoreCounts(None, None, "unknown", "unknown")
    what = f"chip {chip}" if chip else "chip not identified"
    return CoreCounts(aic or aiv, aiv or aic, "inferred",
                      f"inferred from the block dims of this profile ({what}: the most used values)")


def _family_fit(ops: pd.DataFrame, blocks: np.ndarray, dur: np.ndarray, pairs: Sequence[tuple[int, int]],
                cube_cores: Sequence[str], vector_cores: Sequence[str], default: tuple[Any, Any]) -> tuple[int, int]:
    """The (AI, vector) core counts among ``pairs`` under which the most multi-core kernel time runs at block dims
    that are multiples of the count (tiling libraries split work by the chip's cores); ties go to ``default``."""
    multi = (blocks > 1) & np.isfinite(dur)
    cube, vec = isin_mask(ops["core"], cube_cores) & multi, isin_mask(ops["core"], vector_cores) & multi

    def fit(count: int, m: np.ndarray) -> float:
        return float(np.nansum(dur[m & (np.mod(blocks, count) == 0)])) if count else 0.0

    want = (int(default[0] or 0), int(default[1] or 0))
    return max(pairs, key=lambda p: (fit(p[0], cube) + fit(p[1], vec), p == want))


def _decided(platform: Mapping[str, Any]) -> str:
    """What made the platform the run's chip, in words: the counts of a block-dim finding name their source."""
    by, source = platform.get("soc_decided_by"), str(platform.get("soc_source", ""))
    if by == "evidence":
        return f", the chip the kernels' counters identify ({source.split(' -> ', 1)[0]})"
    if by == "file":
        return f", the chip of {source}"
    if by == "user":
        return f" ({source})" if source.startswith("--chip") else " (the rules' platform soc)"
    if by == "name":
        return ", the chip the profile names"
    return ""


def used_fraction(blocks: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """Share of the core-slots of all waves that hold a block: blocks / (ceil(blocks / cores) x cores); NaN where
    either is unknown."""
    with np.errstate(divide="ignore", invalid="ignore"):
        waves = np.ceil(blocks / cores)
        return np.where((blocks > 0) & (cores > 0), blocks / (waves * cores), np.nan)


def task_occupancy(ops: pd.DataFrame, counts: CoreCounts, cube_cores: Sequence[str],
                   vector_cores: Sequence[str]) -> np.ndarray:
    """Per task, the share of its core family's slots its blocks fill (mix tasks: the better of their cube and
    vector parts); NaN where the block dim or the core count is unknown."""
    n = len(ops)
    if not n or not counts.cube:
        return np.full(n, np.nan)
    cube, vec = isin_mask(ops["core"], cube_cores), isin_mask(ops["core"], vector_cores)
    primary = np.where(cube, counts.cube, np.where(vec, counts.vector, 0)).astype("float64")
    secondary = np.where(cube, counts.vector, np.where(vec, counts.cube, 0)).astype("float64")
    used = used_fraction(ops["block_dim"].to_numpy(dtype="float64"), primary)
    mix = ops["mix_block_dim"].to_numpy(dtype="float64") if "mix_block_dim" in ops.columns else np.full(n, np.nan)
    return np.fmax(used, np.where(mix > 0, used_fraction(mix, secondary), np.nan))


__all__ = ["CoreCounts", "core_counts", "task_occupancy", "used_fraction"]
