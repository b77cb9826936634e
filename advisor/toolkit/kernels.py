"""The kernels of a kernel-development run, seen the way Nsight Compute shows a kernel.

Per kernel (one op name of the run):

* **speed of light** -- per side of the kernel (the cube core ``aic`` and the vector core ``aiv`` of a split-core chip,
  the one ``AI Core`` elsewhere), each pipe's busy share of the side's cycles (cube, vector, scalar, MTE1/2/3,
  fixpipe), against the saturation the shared classification uses (``rules/bound.yaml`` ``pipe_saturation``), with
  the range over blocks where msprof op recorded them one by one;
* **launch statistics** -- block dim against the chip's cores (:mod:`advisor.toolkit.cores`: the run's file or
  platform, else a chip family's candidates, else unknown -- never the kernel's own block dim): waves, the last
  wave's blocks, the share of the core slots filled; for a MIX kernel the vector blocks per cube block;
* **memory workload** -- bytes to and from global memory, achieved bandwidth against the platform's ``hbm_gbps``,
  L2 hit rate per side;
* **stall evidence** -- instruction-fetch waits (``*_scalar_wait_ib_time``), icache miss rate, scalar issue time,
  UB bank conflicts and pipe waits (ResourceConflictRatio);
* **the shared classification per side** (:func:`advisor.toolkit.bound.classify` of each side as one op: bound,
  busiest pipe, share of the practical roof, recoverable time), and which side limits the kernel: a side whose units
  idle while it runs as long as the other side waits for it (cross-core synchronization) and never limits.

Facts and the shared classification only -- no advice: the kernel knowledge base sizes its findings on these views
and the report's ``kernels`` section shows them, so the two never disagree. Each figure names the file and the
column it comes from (msprof op's metric CSVs by their headers, or the run's op_summary).
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor.common.util import finite_float
from advisor.model import Profile, metric_values
from advisor.platform import counts_decided, is_assumed
from advisor.toolkit.bound import classify
from advisor.toolkit.cores import core_counts
from advisor.toolkit.time import isin_mask

BLOCKS_EXTRA = "msprof_op_blocks"
"""``profile.extras`` key of msprof op's per-block rows (advisor.ingest.msprof_op)."""

SIDES = ("aic", "aiv", "aicore")
SIDE_LABEL = {"aic": "cube core", "aiv": "vector core", "aicore": "AI Core"}
_PREFIX = {"aic": "aic_", "aiv": "aiv_", "aicore": ""}
_TIME = {"aic": "aicore_time_us", "aiv": "aiv_time_us", "aicore": "aicore_time_us"}
UNITS = (("cube", "mac"), ("vector", "vec"), ("scalar", "scalar"), ("mte1", "mte1"), ("mte2", "mte2"),
         ("mte3", "mte3"), ("fixpipe", "fixpipe"))
"""(unit as the report names it, pipe as the ratio columns name it), in the speed-of-light table's order."""
UNIT_OF = {pipe: unit for unit, pipe in UNITS}
COMPUTE_UNITS = ("cube", "vector")
MEMORY_UNITS = ("mte2", "mte3")

_METRIC_SET = (
    (re.compile(r"(cflt|_wait_ratio$)"), "ResourceConflictRatio"),
    (re.compile(r"(hit_rate|cache_hit|cache_miss)"), "L2Cache"),
    (re.compile(r"_l0[abc]_"), "MemoryL0"),
    (re.compile(r"_ub_(read|write)_bw_"), "MemoryUB"),
    (re.compile(r"(main_mem|_datas_kb|_instructions$|_l1_(read|write)_bw|ub_to_gm|gm_to_ub)"), "Memory"),
    (re.compile(r"(_fops$|_fp16_ratio|_fp32_ratio|_int8_ratio|_int16_ratio|_int32_ratio|_misc_ratio|_instr_number)"),
     "ArithmeticUtilization"),
)
"""The msprof op metric set a normalized column comes from (the rest are PipeUtilization's)."""


# ---------------------------------------------------------------------------------------------------------
# the views
# ---------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Unit:
    """One pipe of one side: its busy share of the side's cycles, as the file gives it."""

    unit: str
    ratio: float
    saturation: float
    time_us: float | None
    column: str
    """The header in the file (``aiv_scalar_ratio``; msprof op's ``aic_cube_ratio`` for the cube)."""
    low: float | None = None
    high: float | None = None
    """Lowest and highest over the blocks (msprof op per-block rows), None without them."""

    @property
    def of_saturation(self) -> float:
        return self.ratio / self.saturation if self.saturation > 0 else math.nan


@dataclass
class SideView:
    """One side of a kernel (cube core, vector core, or the one AI Core)."""

    side: str
    core_time_us: float
    """Mean time a core of this side ran (op_summary ``aicore_time``/``aiv_time``, msprof op per-block mean)."""
    time_column: str
    span_us: float
    """The part of the kernel's duration this side covers: duration x its slowest core's time / the longest side's
    (the slowest core: the blocks' longest core time where recorded one by one, else the mean core time). Scaled to
    the duration because the core times come from cycle counts whose clock is not always the duration's (the 310B
    contest kernels: aicore_time 36.2 us of a 91.9 us task, and 4.03 of 11.5 us after their rewrite, which cut
    both by the same 8-9x): the pipe ratios are shares of the task's time."""
    units: list[Unit]
    blocks: int | None = None
    """Sub-block rows of this side per launch (msprof op); None without per-block data."""
    block_times_us: list[tuple[str, float]] = field(default_factory=list)
    """(block id, core time) of every block of the first launch (msprof op)."""
    spread: float | None = None
    """1 - mean / max of the blocks' core times (mean over launches); None without per-block data."""
    scalar_issue_share: float | None = None
    """(scalar single + dual issue time) / core time, where the file splits the scalar time."""
    wait_ib_share: float | None = None
    """Scalar pipe waiting on instruction fetch (``*_scalar_wait_ib_time``) / core time."""
    icache_miss_rate: float | None = None
    conflicts: dict[str, float] = field(default_factory=dict)
    """Bank / bank-group / resource conflict ratios (ResourceConflictRatio), by column."""
    waits: dict[str, float] = field(default_factory=dict)
    """Pipe wait ratios (ResourceConflictRatio ``*_wait_ratio``), by column."""
    l2_hit_rate: float | None = None
    bytes: float | None = None
    flops: float | None = None
    bound: str | None = None
    """The shared classification of this side as one op (compute / memory / latency / scalar / none)."""
    share_of_roof: float | None = None
    recoverable_us: float = 0.0
    at_roof: bool = False
    roof_side: str | None = None
    intensity: float | None = None
    attained_tflops: float | None = None
    peak_tflops: float | None = None
    waits_for_other: bool = False
    """Its units idle while it runs as long as the other side: it waits for the other side (cross-core flags)."""

    @property
    def label(self) -> str:
        return SIDE_LABEL[self.side]

    def unit(self, name: str) -> Unit | None:
        return next((u for u in self.units if u.unit == name), None)

    @property
    def busiest_unit(self) -> Unit | None:
        """The busiest pipe against its saturation that is a unit of work (scalar is control code, not a unit)."""
        units = [u for u in self.units if u.unit != "scalar" and math.isfinite(u.of_saturation)]
        return max(units, key=lambda u: u.of_saturation) if units else None

    @property
    def busiest(self) -> Unit | None:
        """The busiest pipe against its saturation, scalar included."""
        units = [u for u in self.units if math.isfinite(u.of_saturation)]
        return max(units, key=lambda u: u.of_saturation) if units else None

    @property
    def demand_us(self) -> float:
        """The time this side needs at the practical roof of the shared classification: its span x its share of the
        practical roof (0 for a side that waits for the other)."""
        if self.waits_for_other:
            return 0.0
        share = self.share_of_roof if self.share_of_roof is not None and math.isfinite(self.share_of_roof) else 1.0
        return self.span_us * min(1.0, share)


@dataclass(frozen=True)
class Launch:
    """Blocks of one core family against the chip's cores of that family."""

    family: str
    """``cube`` (AI cores) or ``vector`` (vector cores)."""
    blocks: int
    cores: int
    column: str

    @property
    def waves(self) -> int:
        return max(1, math.ceil(self.blocks / self.cores))

    @property
    def fill(self) -> float:
        """Share of the core slots of all waves that hold a block."""
        return self.blocks / (self.waves * self.cores)

    @property
    def last_wave_blocks(self) -> int:
        return self.blocks - (self.waves - 1) * self.cores


@dataclass(frozen=True)
class ChipCores:
    """The chip's (AI cores, vector cores): one pair when the run's file or platform decides it, a chip family's
    pairs when only the family is known, none when unknown."""

    options: tuple[tuple[int, int], ...]
    decided: bool
    source: str
    detail: str


@dataclass
class KernelView:
    name: str
    type: str
    core: str
    launches: int
    duration_us: float
    """Mean duration of a launch (Task Duration)."""
    total_us: float
    block_dim: float | None
    mix_block_dim: float | None
    sides: list[SideView]
    cores: ChipCores
    launch_by_cores: list[list[Launch]]
    """Per option of ``cores``: the launch of each core family the kernel uses."""
    bytes: float | None
    achieved_gbps: float | None
    peak_gbps: float
    peak_assumed: bool
    files: dict[str, str]
    """Metric set (``PipeUtilization``, ``op_summary``...) -> the file read."""
    layout: str

    @property
    def split(self) -> bool:
        return any(s.side in ("aic", "aiv") for s in self.sides)

    @property
    def limiter(self) -> SideView | None:
        """The side with the most time at its practical roof (a side waiting for the other never limits)."""
        live = [s for s in self.sides if not s.waits_for_other]
        return max(live, key=lambda s: (s.demand_us, s.span_us)) if live else None

    def side(self, name: str) -> SideView | None:
        return next((s for s in self.sides if s.side == name), None)

    @property
    def vector_per_cube(self) -> float | None:
        """Vector blocks per cube block of a MIX kernel (Mix Block Dim / Block Dim)."""
        if not self.core.startswith("MIX") or not self.block_dim or not self.mix_block_dim:
            return None
        return self.mix_block_dim / self.block_dim

    def file_of(self, column: str) -> str:
        """The file a column of this kernel was read from."""
        if self.layout == "msprof-op":
            return self.files.get(metric_set(column), self.files.get("PipeUtilization", ""))
        return self.files.get("op_summary", "")

    def header(self, column: str) -> str:
        """A normalized column's header as this run's file writes it (:func:`header`; op_summary's
        PipelineExecuteUtilization spelling ``scalar_exe_ratio`` where the file has it)."""
        return file_header(header(column, self.layout), self.file_of(column))

    def cite(self, column: str) -> str:
        """``PipeUtilization.csv aiv_scalar_ratio``: the file's name and the column's header."""
        path = self.file_of(column)
        return f"{Path(path).name} {self.header(column)}" if path else self.header(column)

    def bound_text(self) -> str:
        """``vector core: vector`` / ``cube core: scalar`` -- the limiting side and its busiest pipe."""
        side = self.limiter
        if side is None:
            return ""
        top = side.busiest
        what = top.unit if top else (side.bound or "?")
        return f"{side.label}: {what}" if self.split else what

    def to_dict(self) -> dict[str, Any]:
        """The report's ``kernels`` entry (see report.schema.json)."""
        lim = self.limiter
        out: dict[str, Any] = {
            "name": self.name, "type": self.type or None, "core": self.core, "launches": self.launches,
            "duration_us": _r(self.duration_us), "total_us": _r(self.total_us),
            "block_dim": _int(self.block_dim), "mix_block_dim": _int(self.mix_block_dim),
            "bound": self.bound_text() or None, "limiting_side": lim.side if lim else None,
            "cores": {"options": [list(o) for o in self.cores.options], "decided": self.cores.decided,
                      "source": self.cores.source, "detail": self.cores.detail},
            "launch": [[{"family": x.family, "blocks": x.blocks, "cores": x.cores, "waves": x.waves,
                         "last_wave_blocks": x.last_wave_blocks, "fill": _r(x.fill, 4), "column": x.column}
                        for x in option] for option in self.launch_by_cores],
            "memory": {"bytes": _r(self.bytes, 0), "achieved_gbps": _r(self.achieved_gbps, 3),
                       "peak_gbps": _r(self.peak_gbps), "peak_assumed": self.peak_assumed,
                       "share_of_peak": _r(self.achieved_gbps / self.peak_gbps, 4)
                       if self.achieved_gbps is not None and self.peak_gbps > 0 else None},
            "sides": [_side_dict(s, self) for s in self.sides],
            "files": dict(self.files),
        }
        return out


def _side_dict(s: SideView, k: KernelView) -> dict[str, Any]:
    top = s.busiest
    return {
        "side": s.side, "label": s.label, "core_time_us": _r(s.core_time_us), "span_us": _r(s.span_us),
        "time_column": k.cite(s.time_column), "blocks": s.blocks, "spread": _r(s.spread, 4),
        "units": [{"unit": u.unit, "ratio": _r(u.ratio, 6), "of_saturation": _r(min(u.of_saturation, 1.0), 4),  # saturated is 100 %
                   "saturation": u.saturation, "time_us": _r(u.time_us), "column": u.column,
                   "file": Path(k.file_of(_canonical_of(s.side, u))).name or None,
                   "low": _r(u.low, 6), "high": _r(u.high, 6)} for u in s.units],
        "busiest": top.unit if top else None, "bound": s.bound, "share_of_roof": _r(s.share_of_roof, 4),
        "at_roof": bool(s.at_roof), "recoverable_us": _r(s.recoverable_us), "roof_side": s.roof_side,
        "intensity": _r(s.intensity, 4), "attained_tflops": _r(s.attained_tflops, 6),
        "scalar_issue_share": _r(s.scalar_issue_share, 4), "wait_ib_share": _r(s.wait_ib_share, 4),
        "icache_miss_rate": _r(s.icache_miss_rate, 4), "l2_hit_rate": _r(s.l2_hit_rate, 4),
        "conflicts": {c: _r(v, 6) for c, v in s.conflicts.items()}, "waits": {c: _r(v, 6) for c, v in s.waits.items()},
        "waits_for_other": s.waits_for_other, "demand_us": _r(s.demand_us),
    }


def _canonical_of(side: str, u: Unit) -> str:
    return f"{_PREFIX[side]}{dict((a, b) for a, b in UNITS)[u.unit]}_ratio"


# ---------------------------------------------------------------------------------------------------------
# building them
# ---------------------------------------------------------------------------------------------------------
def kernel_views(profile: Profile, platform: Mapping[str, Any], bound_rules: Mapping[str, Any],
                 kernel_rules: Mapping[str, Any]) -> list[KernelView]:
    """One view per kernel of ``profile`` (the compute ops, longest total time first, at most
    ``kernel_rules["max_kernels"]``)."""
    ops = profile.ops
    if not len(ops):
        return []
    compute = isin_mask(ops["core"], bound_rules["compute_cores"]) & (np.nan_to_num(_col(ops, "duration_us")) > 0)
    if not compute.any():
        return []
    sub = ops[compute]
    names = sub["name"].astype(str)
    totals = sub["duration_us"].astype("float64").groupby(names.to_numpy(), sort=False).sum()
    totals = totals.sort_values(ascending=False, kind="stable").head(int(kernel_rules["max_kernels"]))
    cores = chip_cores(profile, platform, bound_rules)
    blocks = _blocks(profile)
    files = _files(profile)
    views = []
    for name in totals.index:
        rows = sub[names.to_numpy() == name]
        views.append(_view(str(name), rows, blocks, cores, platform, bound_rules, kernel_rules, files,
                           str(profile.meta.layout or "")))
    _classify_sides(views, profile, platform, bound_rules)
    for v in views:
        _mark_waiting(v, kernel_rules)
    return views


def chip_cores(profile: Profile, platform: Mapping[str, Any], bound_rules: Mapping[str, Any]) -> ChipCores:
    """The chip's core counts as the run decides them (:func:`advisor.toolkit.cores.core_counts` when its source is
    the run's file or platform); a family's candidates when the chip is only known as a family; else none. Counts
    inferred from the profile's own block dims are not used: in a single-kernel run they are the kernel's block dim,
    and the kernel would always look like it fills the chip."""
    counts = core_counts(profile, platform, bound_rules["cube_cores"], bound_rules["vector_cores"])
    if counts.source in ("info_json", "platform") and counts.cube:
        return ChipCores(((int(counts.cube), int(counts.vector or counts.cube)),), True, counts.source, counts.detail)
    family = sorted({(int(a), int(v)) for a, v in (platform.get("soc_family") or {}).values()})
    if family:
        chip = profile.meta.chip or platform.get("soc")
        return ChipCores(tuple(family), False, "family",
                         f"{chip}: one of {', '.join(f'{a} AI / {v} vector cores' for a, v in family)} "
                         "(rules/platforms.yaml); --chip names the chip")
    if counts_decided(platform) and platform.get("ai_core_num"):  # pragma: no cover - core_counts decides these
        a = int(platform["ai_core_num"])
        return ChipCores(((a, int(platform.get("vector_core_num") or a)),), True, "platform", str(platform.get("soc")))
    return ChipCores((), False, "unknown", "the run records no core counts (no info.json / HardwareInfo.jsonl) and "
                                           "names no chip; --chip names it")


def _view(name: str, rows: pd.DataFrame, blocks: pd.DataFrame | None, cores: ChipCores,
          platform: Mapping[str, Any], bound_rules: Mapping[str, Any], kernel_rules: Mapping[str, Any],
          files: dict[str, str], layout: str) -> KernelView:
    dur = _col(rows, "duration_us")
    core = _first_text(rows, "core")
    block_dim, mix_block_dim = _mean(_col(rows, "block_dim")), _mean(_col(rows, "mix_block_dim"))
    sat = bound_rules["pipe_saturation"]
    mine = None
    if blocks is not None:
        mine = blocks[blocks["name"].astype(str) == name]
        mine = mine.drop_duplicates(["launch", "block_id", "sub_block_id"]) if len(mine) else None
    sides = []
    split = any(np.isfinite(_col(rows, f"{p}{pipe}_ratio")).any() for p in ("aic_", "aiv_") for _, pipe in UNITS)
    for side in (("aic", "aiv") if split else ("aicore",)):
        view = _side(side, rows, dur, mine, sat, layout)
        if view is not None:
            sides.append(view)
    mean_dur = _mean(dur) or 0.0
    # each side's slowest core: the mean core time over (1 - spread) where blocks were recorded one by one
    slowest = {s.side: s.core_time_us / (1.0 - s.spread) if s.spread is not None and s.spread < 1.0
               else s.core_time_us for s in sides}
    longest = max((t for t in slowest.values() if math.isfinite(t) and t > 0), default=math.nan)
    for s in sides:
        t = slowest[s.side]
        s.span_us = mean_dur * (t / longest if math.isfinite(t) and t > 0 and longest > 0 else 1.0)
    summary = files.get("op_summary", "") if layout != "msprof-op" else ""
    for s in sides:
        s.units = [replace(u, column=file_header(u.column, summary)) for u in s.units]
    launch = [_launches(core, block_dim, mix_block_dim, option, bound_rules) for option in cores.options]
    nbytes = _kernel_bytes(rows)
    peak = float(platform.get("hbm_gbps") or 0.0)
    achieved = nbytes / (mean_dur * 1e3) if nbytes is not None and mean_dur > 0 else None
    return KernelView(name=name, type=_first_text(rows, "type"), core=core, launches=len(rows), duration_us=mean_dur,
                      total_us=float(np.nansum(dur)), block_dim=block_dim, mix_block_dim=mix_block_dim, sides=sides,
                      cores=cores, launch_by_cores=launch, bytes=nbytes, achieved_gbps=achieved, peak_gbps=peak,
                      peak_assumed=is_assumed(platform) or "assumed" in str(platform.get("source", "")).lower(),
                      files=files, layout=layout)


def _side(side: str, rows: pd.DataFrame, dur: np.ndarray, blocks: pd.DataFrame | None,
          sat: Mapping[str, Any], layout: str) -> SideView | None:
    prefix = _PREFIX[side]
    time_col = _TIME[side]
    core_time = _mean(_col(rows, time_col))
    units = []
    side_blocks = blocks[blocks["side"].astype(str) == ("aiv" if side == "aiv" else "aic")] \
        if blocks is not None and "side" in blocks.columns else None
    for unit, pipe in UNITS:
        col = f"{prefix}{pipe}_ratio"
        ratio = _weighted(_col(rows, col), dur)
        if ratio is None:
            continue
        low = high = None
        if side_blocks is not None and col in side_blocks.columns:
            vals = metric_values(side_blocks[col])
            vals = vals[np.isfinite(vals)]
            if len(vals):
                low, high = float(vals.min()), float(vals.max())
        units.append(Unit(unit, ratio, float(sat.get(pipe, 0.8)), _mean(_col(rows, f"{prefix}{pipe}_time_us")),
                          header(col, layout), low, high))
    if not units or (core_time is not None and core_time <= 0 and all(u.ratio == 0 for u in units)):
        return None  # the side did not run (op_summary writes 0 for the side a kernel does not use)
    view = SideView(side=side, core_time_us=core_time if core_time is not None else math.nan, time_column=time_col,
                    span_us=math.nan, units=units)
    _stalls(view, rows, dur, prefix, side)
    if side_blocks is not None and len(side_blocks) and time_col in side_blocks.columns:
        _block_stats(view, side_blocks, time_col)
    return view


def _stalls(view: SideView, rows: pd.DataFrame, dur: np.ndarray, prefix: str, side: str) -> None:
    """Scalar issue share, instruction-fetch wait, icache misses, conflicts, pipe waits and L2 hit rate."""
    ct = view.core_time_us
    if math.isfinite(ct) and ct > 0:
        single, dual = _mean(_col(rows, f"{prefix}scalar_single_time_us")), \
            _mean(_col(rows, f"{prefix}scalar_dual_time_us"))
        if single is not None and dual is not None:
            view.scalar_issue_share = (single + dual) / ct
        wait_ib = _mean(_col(rows, f"{prefix}scalar_wait_ib_time_us"))
        if wait_ib is not None:
            view.wait_ib_share = wait_ib / ct
    view.icache_miss_rate = _weighted(_col(rows, f"{prefix}icache_miss_rate"), dur)
    for col in rows.columns:
        if not str(col).startswith(prefix) or (side == "aicore" and str(col).startswith(("aic_", "aiv_"))):
            continue
        if str(col).endswith("cflt_ratio"):
            v = _weighted(_col(rows, col), dur)
            if v is not None:
                view.conflicts[str(col)] = v
        elif str(col).endswith("_wait_ratio"):
            v = _weighted(_col(rows, col), dur)
            if v is not None:
                view.waits[str(col)] = v
    hit = _weighted(_col(rows, f"{prefix}total_hit_rate"), dur)
    if hit is not None:
        view.l2_hit_rate = hit / 100.0 if hit > 1.0 else hit


def _block_stats(view: SideView, side_blocks: pd.DataFrame, time_col: str) -> None:
    """Blocks per launch, the first launch's block times and the mean spread (1 - mean / max) over launches."""
    spreads, counts = [], []
    for i, (_, launch) in enumerate(side_blocks.groupby("launch", sort=True)):
        t = metric_values(launch[time_col])
        ok = np.isfinite(t) & (t > 0)
        if not ok.any():
            continue
        counts.append(int(len(launch)))
        spreads.append(1.0 - float(t[ok].mean()) / float(t[ok].max()))
        if i == 0:
            ids = launch["block_id"].to_numpy()
            subs = launch["sub_block_id"].astype(str).to_numpy()
            view.block_times_us = [(f"{_block_text(b)}/{s}" if len(set(subs)) > 1 else _block_text(b), float(x))
                                   for b, s, x, good in zip(ids, subs, t, ok, strict=True) if good]
    if spreads:
        view.spread = float(np.mean(spreads))
        view.blocks = int(round(float(np.mean(counts))))


def _block_text(b: object) -> str:
    try:
        return str(int(float(b)))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return str(b)


def _launches(core: str, block_dim: float | None, mix_block_dim: float | None, option: tuple[int, int],
              bound_rules: Mapping[str, Any]) -> list[Launch]:
    """The launch of each core family the kernel uses on a chip with ``option`` = (AI cores, vector cores)."""
    aic, aiv = option
    out = []
    vector_lead = core in set(bound_rules["vector_cores"])
    if block_dim and block_dim > 0:
        out.append(Launch("vector" if vector_lead else "cube", int(round(block_dim)), aiv if vector_lead else aic,
                          "Block Dim"))
    if core.startswith("MIX") and mix_block_dim and mix_block_dim > 0:
        out.append(Launch("cube" if vector_lead else "vector", int(round(mix_block_dim)), aic if vector_lead else aiv,
                          "Mix Block Dim"))
    return out


def _kernel_bytes(rows: pd.DataFrame) -> float | None:
    """Bytes to and from global memory per launch: msprof op's data volumes (KB) where collected, else the
    model's bandwidth x core time (GB/s x us -> bytes, docs/model.md)."""
    read, write = _mean(_col(rows, "read_main_memory_datas_kb")), _mean(_col(rows, "write_main_memory_datas_kb"))
    if read is not None and write is not None:
        return (read + write) * 1024.0
    bw_r, bw_w = _col(rows, "main_mem_read_bw"), _col(rows, "main_mem_write_bw")
    t = _col(rows, "aicore_time_us")
    t = np.where(np.nan_to_num(t) > 0, t, _col(rows, "duration_us"))
    vals = (bw_r + bw_w) * t * 1e3
    return _mean(vals)


def _classify_sides(views: list[KernelView], profile: Profile, platform: Mapping[str, Any],
                    bound_rules: Mapping[str, Any]) -> None:
    """Each side of each kernel through the shared classification as one op: its pipe ratios, its FLOPs and bytes,
    its part of the kernel's duration; no core-count scaling (the launch is judged on its own)."""
    rows = []
    for v in views:
        src = profile.ops[profile.ops["name"].astype(str) == v.name].iloc[0]
        for s in v.sides:
            p = _PREFIX[s.side]
            row: dict[str, Any] = {
                "name": f"{v.name}\x00{s.side}", "type": src.get("type"), "core": _side_core(s.side, v.core),
                "duration_us": s.span_us, "aicore_time_us": s.core_time_us, "block_dim": np.nan,
                "mix_block_dim": np.nan,
                **{k: src.get(k) for k in ("input_shapes", "input_dtypes", "input_formats", "output_shapes",
                                          "output_dtypes", "output_formats")}}
            for _, pipe in UNITS:
                u = s.unit(UNIT_OF[pipe])
                row[f"{pipe}_ratio"] = u.ratio if u else np.nan
            # the chip's own Memory Bound of the side (msprof's mte2_ratio / max(mac_ratio, vec_ratio)), the input
            # the shared classification reads from op_summary's memory_bound column
            compute = np.nanmax([row["mac_ratio"], row["vec_ratio"], np.nan]) \
                if np.isfinite([row["mac_ratio"], row["vec_ratio"]]).any() else np.nan
            row["memory_bound"] = row["mte2_ratio"] / compute if compute and compute > 0 else np.nan
            fops = {"aic": ("aic_cube_fops",), "aiv": ("aiv_vector_fops", "aiv_cube_fops"),
                    "aicore": ("cube_fops", "vector_fops")}[s.side]
            flops = [float(src[c]) for c in fops if c in src.index and pd.notna(src[c])]
            row["cube_fops" if s.side != "aiv" else "vector_fops"] = sum(flops) if flops else np.nan
            for d in ("read", "write"):
                col = f"{p}main_mem_{d}_bw"
                row[f"main_mem_{d}_bw"] = float(src[col]) if col in src.index and pd.notna(src[col]) else np.nan
            rows.append(row)
    if not rows:
        return
    frame = pd.DataFrame(rows)
    table = classify(frame, platform, bound_rules, None)
    by = {str(r["name"]): r for _, r in table.iterrows()}
    for v in views:
        for s in v.sides:
            r = by.get(f"{v.name}\x00{s.side}")
            if r is None:
                continue
            s.bound = None if pd.isna(r["bound"]) else str(r["bound"])
            s.share_of_roof = finite_float(r["share_of_roof"])
            s.recoverable_us = float(r["recoverable_us"] or 0.0)
            s.at_roof = bool(r["at_roof"])
            s.roof_side = None if r["roof_side"] is None or pd.isna(r["roof_side"]) else str(r["roof_side"])
            s.intensity, s.attained_tflops = finite_float(r["intensity"]), finite_float(r["attained_tflops"])
            s.peak_tflops = finite_float(r["peak_tflops"])
            s.flops, s.bytes = finite_float(r["flops"]), finite_float(r["bytes"])


def _side_core(side: str, core: str) -> str:
    return {"aic": "AI_CORE", "aiv": "AI_VECTOR_CORE"}.get(side, core)


def _mark_waiting(v: KernelView, kernel_rules: Mapping[str, Any]) -> None:
    """A side whose busiest unit pipe is below ``mix.idle_unit_ratio`` while it runs as long as another side whose
    units work (within ``mix.same_time_tolerance``) waits for that side: its scalar pipe spins on cross-core flags."""
    if len(v.sides) < 2:
        return
    cfg = kernel_rules["mix"]
    idle, tol = float(cfg["idle_unit_ratio"]), float(cfg["same_time_tolerance"])
    for s in v.sides:
        top = s.busiest_unit
        if top is None or top.ratio >= idle:
            continue
        others = [o for o in v.sides if o is not s and (o.busiest_unit is not None and o.busiest_unit.ratio >= idle)]
        if others and all(math.isfinite(o.core_time_us) and o.core_time_us > 0
                          and abs(s.core_time_us - o.core_time_us) <= tol * o.core_time_us for o in others):
            s.waits_for_other = True


# ---------------------------------------------------------------------------------------------------------
# files and headers
# ---------------------------------------------------------------------------------------------------------
def metric_set(column: str) -> str:
    """The msprof op metric set (CSV) a normalized column comes from."""
    for rx, name in _METRIC_SET:
        if rx.search(column):
            return name
    return "PipeUtilization"


def header(column: str, layout: str) -> str:
    """A normalized column's header as the file writes it: msprof op's (``aic_cube_ratio``, ``aic_time(us)``,
    ``aiv_total_hit_rate(%)``) or op_summary's (``aic_mac_ratio``, ``aicore_time(us)``)."""
    name = column
    if layout == "msprof-op":
        name = {"aicore_time_us": "aic_time_us", "aic_mac_ratio": "aic_cube_ratio",
                "aic_mac_time_us": "aic_cube_time_us", "aiv_vector_fops": "aiv_vec_fops"}.get(name, name)
        if name.endswith("_hit_rate") or name.endswith("_usage_rate"):
            return name + "(%)"
        if re.search(r"_bw(_[a-z]+)?$", name):
            return name + "(GB/s)"
        if name.endswith("_kb"):
            return name[:-3] + "(KB)"
    if name.endswith("_time_us"):
        return name[:-3] + "(us)"
    return name


_EXE = re.compile(r"^(vec|mac|scalar|mte1|mte2|mte3|fixpipe)_(ratio|time\(us\))$")


def file_header(name: str, path: str) -> str:
    """``name`` as the CSV at ``path`` spells it: op_summary's ``--aic-metrics PipelineExecuteUtilization`` (310B)
    writes ``scalar_exe_ratio`` for ``scalar_ratio`` (advisor.ingest.columns.OPS_METRIC_RENAMES)."""
    m = _EXE.match(name)
    if not m or not path.lower().endswith(".csv"):
        return name
    exe = f"{m.group(1)}_exe_{m.group(2)}"
    return exe if exe in _first_line(path) and name not in _first_line(path).split(",") else name


@lru_cache(maxsize=64)
def _first_line(path: str) -> str:
    try:
        with open(path, encoding="utf-8-sig", errors="replace") as fh:
            return fh.readline().strip()
    except OSError:
        return ""


def _files(profile: Profile) -> dict[str, str]:
    """Metric set -> the file of the run that holds it (msprof op CSVs; the op summary otherwise)."""
    out: dict[str, str] = {}
    for f in profile.meta.files_read:
        base = Path(str(f)).name
        stem = base.split(".")[0]
        for name in ("OpBasicInfo", "PipeUtilization", "ArithmeticUtilization", "MemoryL0", "MemoryUB", "Memory",
                     "L2Cache", "ResourceConflictRatio"):
            if stem == name or re.fullmatch(rf"{name}_\d+", stem):
                out.setdefault(name, str(f))
                break
        else:
            low = base.lower()
            summary_csv = low.startswith(("op_summary", "kernel_details")) and low.endswith(".csv")
            if summary_csv or (low.endswith(".db") and "op_summary" not in out):
                out.setdefault("op_summary", str(f))
    if "op_summary" not in out and profile.meta.source and str(profile.meta.source).lower().endswith(".csv"):
        out["op_summary"] = str(profile.meta.source)
    return out


def _blocks(profile: Profile) -> pd.DataFrame | None:
    blocks = profile.extras.get(BLOCKS_EXTRA) if isinstance(profile.extras, dict) else None
    return blocks if isinstance(blocks, pd.DataFrame) and len(blocks) else None


# ---------------------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------------------
def _col(frame: pd.DataFrame, name: str) -> np.ndarray:
    if name not in frame.columns:
        return np.full(len(frame), np.nan)
    return metric_values(pd.to_numeric(frame[name], errors="coerce")
                         if frame[name].dtype == object else frame[name])


def _mean(values: np.ndarray) -> float | None:
    v = values[np.isfinite(values)]
    return float(v.mean()) if len(v) else None


def _weighted(values: np.ndarray, weights: np.ndarray) -> float | None:
    ok = np.isfinite(values)
    if not ok.any():
        return None
    w = np.nan_to_num(weights[ok])
    return float(np.average(values[ok], weights=w)) if w.sum() > 0 else float(values[ok].mean())


def _first_text(rows: pd.DataFrame, col: str) -> str:
    if col not in rows.columns:
        return ""
    vals = rows[col].dropna()
    return str(vals.iloc[0]) if len(vals) else ""



def _r(x: float | None, digits: int = 3) -> float | None:
    if x is None or not isinstance(x, (int, float)) or not math.isfinite(float(x)):
        return None
    return round(float(x), digits) if digits else float(round(float(x)))


def _int(x: float | None) -> int | None:
    return int(round(x)) if x is not None and math.isfinite(x) else None


def kernel_table(views: Sequence[KernelView]) -> list[dict[str, Any]]:
    """The report's ``kernels`` section."""
    return [v.to_dict() for v in views]


__all__ = ["SIDES", "SIDE_LABEL", "UNITS", "ChipCores", "KernelView", "Launch", "SideView", "Unit", "chip_cores",
           "file_header", "header", "kernel_table", "kernel_views", "metric_set"]
