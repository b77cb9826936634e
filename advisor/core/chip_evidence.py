"""What the kernels' own counters say about the chip: its AI core count and clock, measured from op_summary rows.

Most torch_npu exports and every lone op_summary / kernel_details CSV record no core counts (no ``info.json``), so
the chip would be a family's default (``Ascend910B-class`` -> Ascend910B2, 24 AI cores) even where the cube ops run
at Block Dim 20 at 99 % cube utilization -- a 20-core chip. msprof's own definitions give the counts back:

* clock: a side's cycles over its per-block time and blocks, ``aic_total_cycles / (aicore_time x Block Dim)``
  (``aiv_*`` with the vector blocks for the vector side). It is the clock wherever every block had a core to itself
  (one wave); a task whose blocks queued for cores gives less, so the clock is the top of the tasks' values.
* AI cores: ``cube_utilization = aic_total_cycles / (clock x AI cores x duration)`` (msprof runtime_report,
  DOMAIN.md 5.3), so AI cores = ``aic_total_cycles / (clock x cube_utilization x duration)``: a whole number,
  the same for every task, where msprof's definitions hold (``rules/platforms.yaml`` ``evidence``).
* at least this many cores: a task that ran at the clock ran all its blocks at once, so the chip has at least its
  Block Dim AI cores (cube side) or vector cores (vector side; Mix Block Dim for a MIX_AIC task's vector part).

:func:`kernel_evidence` measures them (vectorized: a 2M-task table takes a few column passes);
:func:`match_evidence` picks the chip of ``rules/platforms.yaml`` they describe; :func:`contradictions` says where
they disagree with a chip a file or the user named.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from advisor.common.frames import isin_mask
from advisor.model import Hardware, metric_values

CUBE_SIDE = ("AI_CORE", "MIX_AIC")
"""Task types whose Block Dim counts AI (cube) cores; a MIX_AIV task's cube part is its Mix Block Dim."""
VECTOR_SIDE = ("AI_VECTOR_CORE", "MIX_AIV")
"""Task types whose Block Dim counts vector cores; a MIX_AIC task's vector part is its Mix Block Dim."""


@dataclass(frozen=True)
class KernelEvidence:
    """The chip as the kernels' counters measure it (see the module doc); None where they do not tell."""

    file: str
    ai_cores: int | None = None
    ai_core_tasks: int = 0
    example: str = ""
    """The task that shows it best: ``MatMulV2: Block Dim 20 at 99.1 % cube utilization``."""
    clock_mhz: float | None = None
    clock_tasks: int = 0
    clock_side: str = ""
    """``aic`` or ``aiv``: the counters the clock comes from."""
    min_ai_cores: int | None = None
    min_vector_cores: int | None = None
    rejected: tuple[str, ...] = field(default=())
    """What was measured but not used, and why (the counters do not follow msprof's definitions)."""

    @property
    def decides(self) -> bool:
        return self.ai_cores is not None or self.clock_mhz is not None

    def describe(self) -> str:
        """``cube_utilization of 392 tasks gives 20 AI cores (MatMulV2: Block Dim 20 at 99.1 % cube utilization);
        ...`` -- every measure, with the counters it comes from."""
        parts = []
        if self.ai_cores is not None:
            parts.append(f"cube_utilization of {self.ai_core_tasks} task(s) gives {self.ai_cores} AI cores "
                         f"({self.example})")
        if self.clock_mhz is not None:
            side = "aic_total_cycles / (aicore_time x Block Dim)" if self.clock_side == "aic" else \
                "aiv_total_cycles / (aiv_time x blocks)"
            parts.append(f"{side} of {self.clock_tasks} task(s) gives {self.clock_mhz:g} MHz")
        least = [f"{n} {what}" for n, what in ((self.min_ai_cores, "AI cores"),
                                                (self.min_vector_cores, "vector cores")) if n]
        if least:
            parts.append("blocks that ran at once need at least " + " and ".join(least))
        return "; ".join(parts)

    def hardware(self) -> Hardware:
        return Hardware(ai_cores=self.ai_cores, vector_cores=None, clock_mhz=self.clock_mhz,
                        source=f"{self.file} kernel counters")


# ---------------------------------------------------------------------------------------------------------
# measuring
# ---------------------------------------------------------------------------------------------------------
def kernel_evidence(ops: pd.DataFrame, cfg: Mapping[str, Any], file: str = "op_summary",
                    chip_clocks: Sequence[float] = ()) -> KernelEvidence | None:
    """The chip the kernels' counters describe (``cfg``: ``rules/platforms.yaml`` ``evidence``; ``chip_clocks``: the
    clocks of its chips, a measured clock far from all of them is not one); None when the profile has no counters to
    tell (no cycles, or no per-block times)."""
    n = len(ops)
    if not n:
        return None
    dur = _col(ops, "duration_us")
    blocks, mix = _col(ops, "block_dim"), _col(ops, "mix_block_dim")
    mix_aic, mix_aiv = isin_mask(ops["core"], ["MIX_AIC"]), isin_mask(ops["core"], ["MIX_AIV"])
    cube = isin_mask(ops["core"], CUBE_SIDE) | mix_aiv
    vec = isin_mask(ops["core"], VECTOR_SIDE) | mix_aic
    cube_blocks = np.where(mix_aiv, mix, blocks)
    vec_blocks = np.where(mix_aic, mix, blocks)
    del mix_aic, mix_aiv
    cube_cycles = _col(ops, "aic_total_cycles") if "aic_total_cycles" in ops.columns else _col(ops, "total_cycles")
    cube_time = _col(ops, "aicore_time_us")
    if "aiv_total_cycles" in ops.columns:
        vec_cycles, vec_time = _col(ops, "aiv_total_cycles"), _col(ops, "aiv_time_us")
    else:  # one core type holds both units (310P and older): the vector tasks' counters are the unprefixed ones
        vec_cycles, vec_time = _col(ops, "total_cycles"), cube_time
    tol = float(cfg["clock_tolerance"])
    rejected: list[str] = []

    def side_clock(mask: np.ndarray, cycles: np.ndarray, time: np.ndarray, nblocks: np.ndarray
                   ) -> tuple[float | None, np.ndarray, int]:
        with np.errstate(divide="ignore", invalid="ignore"):
            f = cycles / (time * nblocks)
        ok = mask & np.isfinite(f) & (cycles > 0) & (time > 0) & (nblocks > 0) & (dur > 0)
        if not ok.any():
            return None, f, 0
        vals = f[ok]
        # the top of the values: tasks whose blocks queued for cores measure less than the clock
        top = float(np.percentile(vals, 90))
        near = np.abs(vals - top) <= tol * top
        clock = _weighted_median(vals[near], dur[ok][near])
        return clock, f, int(near.sum())

    clock_c, f_c, tasks_c = side_clock(cube, cube_cycles, cube_time, cube_blocks)
    clock_v, f_v, tasks_v = side_clock(vec, vec_cycles, vec_time, vec_blocks)
    clock, clock_side, clock_tasks = (clock_c, "aic", tasks_c) if clock_c is not None else (clock_v, "aiv", tasks_v)
    if clock is None:
        return None
    if not _plausible(clock, cfg, chip_clocks):
        rejected.append(f"the counters give a {clock:.4g} MHz clock, far from every chip's (the blocks queued for "
                        "cores in every task, or the counters mean something else here): not used")
        return KernelEvidence(file=file, rejected=tuple(rejected))

    def least(mask: np.ndarray, f: np.ndarray, side_clock_mhz: float | None, nblocks: np.ndarray) -> int | None:
        if side_clock_mhz is None:
            return None
        at_clock = mask & np.isfinite(f) & (np.abs(f - side_clock_mhz) <= tol * side_clock_mhz)
        return int(np.nanmax(nblocks[at_clock])) if at_clock.any() else None

    real_c = clock_c if clock_c is not None and _plausible(clock_c, cfg, chip_clocks) else None
    real_v = clock_v if clock_v is not None and _plausible(clock_v, cfg, chip_clocks) else None
    min_aic, min_aiv = least(cube, f_c, real_c, cube_blocks), least(vec, f_v, real_v, vec_blocks)

    ai_cores, ai_tasks, example = None, 0, ""
    util = _col(ops, "cube_utilization")
    if clock_c is not None:
        ok = cube & np.isfinite(util) & (util >= float(cfg["min_cube_utilization"])) & (cube_cycles > 0) & (dur > 0)
        if ok.any():
            with np.errstate(divide="ignore", invalid="ignore"):
                per = cube_cycles[ok] / (clock_c * util[ok] * dur[ok])
            mid = _weighted_median(per, dur[ok])
            count_tol = float(cfg["count_tolerance"])
            agree = np.abs(per - mid) <= count_tol
            share = float(dur[ok][agree].sum() / dur[ok].sum())
            whole = abs(mid - round(mid)) <= count_tol and round(mid) >= 1
            if whole and share >= float(cfg["agreement"]):
                ai_cores, ai_tasks = int(round(mid)), int(agree.sum())
                rows = np.flatnonzero(ok)[agree]
                best = rows[int(np.argmax(util[rows]))]
                example = (f"{_text(ops['type'].iloc[best])}: Block Dim {cube_blocks[best]:g} at "
                           f"{util[best] * 100:.1f} % cube utilization")
            else:  # the counters do not follow msprof's definitions here: their clock is no better
                rejected.append(f"cube_utilization of {int(ok.sum())} task(s) gives {mid:.2f} AI cores"
                                + ("" if whole else " (not a whole number)")
                                + (f", {share:.0%} of their time agreeing" if share < float(cfg["agreement"]) else "")
                                + f" at the {clock_c:.4g} MHz their cycles give: msprof's definitions do not hold "
                                  "here, not used")
                return KernelEvidence(file=file, rejected=tuple(rejected))
    return KernelEvidence(file=file, ai_cores=ai_cores, ai_core_tasks=ai_tasks, example=example,
                          clock_mhz=round(clock, 1), clock_tasks=clock_tasks, clock_side=clock_side,
                          min_ai_cores=min_aic, min_vector_cores=min_aiv, rejected=tuple(rejected))


def _plausible(clock: float, cfg: Mapping[str, Any], clocks: Sequence[float]) -> bool:
    """A clock within ``max_clock_gap`` of some chip's: anything else is not a clock (without chip clocks every
    positive value passes)."""
    gap = float(cfg["max_clock_gap"])
    return clock > 0 and (not clocks or any(abs(clock - c) <= gap * c for c in clocks))


def _col(ops: pd.DataFrame, name: str) -> np.ndarray:
    return metric_values(ops[name]).astype("float64", copy=False) if name in ops.columns else \
        np.full(len(ops), np.nan)


def _weighted_median(values: np.ndarray, weights: np.ndarray) -> float:
    order = np.argsort(values, kind="stable")
    v, w = values[order], np.nan_to_num(weights[order])
    if w.sum() <= 0:
        return float(np.median(v))
    return float(v[np.searchsorted(np.cumsum(w), 0.5 * w.sum())])


def _text(value: object) -> str:
    return "" if value is None or (isinstance(value, float) and value != value) else str(value)


__all__ = ["KernelEvidence", "kernel_evidence"]
