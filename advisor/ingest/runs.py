"""Several runs of one device read as one profile: their metric sets merged when they profiled the same kernels.

msprof collects one ``--aic-metrics`` set per run, so an engineer who wants pipe ratios, memory bandwidth and L2
hit rates of the same kernels runs the program once per set (a ``PROF_GROUP_<time>/PROF_<set>/PROF_*`` folder, or
sibling ``PROF_*`` / ``OPPROF_*`` directories). ``advisor.ingest.detect`` recognizes those as runs, not ranks;
this module reads them and:

* picks the primary run -- the one with pipe ratios (what the bound classification reads), then the one with the
  most metric columns, then the first by path. Its timing, steps, events and every other table are the profile's:
  the analyzed window is one run's device time, never a sum of runs;
* copies over the metric columns the primary lacks, kernel by kernel. A kernel is an op name with its input
  shapes. Re-runs of a test script need not launch the same number of times (warm-up launches, several cases,
  random-input ops), so:

  - a kernel launched as often in both runs gets the other run's values launch by launch (the n-th launch of the
    kernel in time order takes the n-th one's values: ``per launch``);
  - a kernel launched a different number of times gets the other run's mean over its launches, weighted by their
    durations (ratios and bandwidths are shares of a launch's time: ``kernel mean``);
  - a kernel the other run did not launch keeps no value (NaN, never 0).

  Runs of one ``PROF_GROUP_*`` are re-runs of one program by construction and are merged so whenever they share
  :data:`MIN_SHARED_TIME` of the primary's kernel time; other sibling runs only when they launched the same kernels
  (each kernel of either run is in the other), since two experiments on one device (a kernel before and after a
  change) would otherwise lend each other numbers. A run that is not merged is listed under ``files_skipped`` with
  the command to analyze it on its own;
* says which, per run, in ``meta.notes``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.common.errors import InputError
from advisor.ingest.layout import RankSource
from advisor.model import (
    OP_ID_COLUMNS,
    OP_TASK_COLUMNS,
    OP_TENSOR_COLUMNS,
    OP_TIME_COLUMNS,
    Meta,
    Profile,
    metric_values,
)
from advisor.platform import cann_release

_NOT_METRICS = frozenset({*OP_ID_COLUMNS, *OP_TIME_COLUMNS, *OP_TASK_COLUMNS, *OP_TENSOR_COLUMNS, "rank", "launch",
                          "kernel_mode", "pid", "current_freq_mhz", "rated_freq_mhz", "hf32_eligible", "model_name",
                          "infer_id"})
_PIPE_RATIOS = ("mac_ratio", "vec_ratio")


MIN_SHARED_TIME = 0.5
"""Share of the primary run's kernel time that another run of its ``PROF_GROUP_*`` must have launched too for its
metrics to be merged: re-runs of one script share nearly all of it (they differ in warm-up launches and random
inputs), a run of another program shares little."""


@dataclass
class Merge:
    """What merging one run's metrics into the primary did."""

    columns: list[str]
    per_launch: int
    """Kernels whose values were copied launch by launch."""
    kernel_mean: int
    """Kernels given the other run's duration-weighted mean (other launch counts)."""
    missing: int
    """Kernels of the primary the other run did not launch (left without values)."""


def read_runs(src: RankSource, read_one: Callable[[RankSource], Profile]) -> Profile:
    """Read every run of ``src`` (itself and ``src.runs``) and merge them into one profile (see module doc)."""
    members = [RankSource(src.root, src.layout, src.rank), *src.runs]
    read: list[tuple[RankSource, Profile]] = []
    failed: list[tuple[RankSource, str]] = []
    for m in members:
        try:
            read.append((m, read_one(m)))
        except InputError as e:
            failed.append((m, e.problem))
    if not read:
        raise InputError(src.root, "no run of this device could be read: " + "; ".join(r for _, r in failed[:3]))
    order = sorted(range(len(read)), key=lambda i: _primary_rank(read[i][1], i))
    primary_src, primary = read[order[0]]
    meta = primary.meta
    base = _common_parent([m.root for m in members])
    one_session = any(part.upper().startswith("PROF_GROUP") for part in base.parts)
    merged: list[str] = []
    for i in order[1:]:
        other_src, other = read[i]
        text = _merge_run(primary_src, primary, other_src, other, base, one_session)
        if text:
            merged.append(text)
    for m, reason in failed:
        meta.skip(m.root, f"run not read: {reason}")
    _adopt_device_info(meta, [read[i][1].meta for i in order[1:]])
    meta.notes.append(
        f"{len(members)} runs of one device under {base} (runs, not ranks): timing and tables from "
        f"{_rel(primary_src.root, base)} (its window, {primary.time.window_us:.3f} µs, is the analyzed one: runs "
        f"are not added up)"
        + ("; metric columns merged from " + "; ".join(merged) if merged else "; no metrics merged"))
    return primary


def _merge_run(primary_src: RankSource, primary: Profile, other_src: RankSource, other: Profile, base: Path,
               one_session: bool) -> str:
    """Merge ``other``'s metrics into ``primary`` when they profiled the same kernels; the note part saying what was
    merged ("" when nothing was: the reason is in the notes or ``files_skipped``)."""
    meta, where = primary.meta, _rel(other_src.root, base)
    new = [c for c in _metric_columns(other.ops) if c not in set(_metric_columns(primary.ops))]
    if not new:
        if _same_kernels(primary.ops, other.ops):
            meta.notes.append(f"{where}: a repeat run of the same kernels with no metric the primary run lacks; not "
                              f"merged (its device time {other.device_time_us():.3f} µs, the primary's "
                              f"{primary.device_time_us():.3f} µs)")
        else:
            _skip_other(meta, primary_src, other_src, primary, other)
        return ""
    shared = _shared_time(primary.ops, other.ops)
    if not (_same_kernels(primary.ops, other.ops) or (one_session and shared >= MIN_SHARED_TIME)):
        _skip_other(meta, primary_src, other_src, primary, other)
        return ""
    result = merge_metrics(primary.ops, other.ops, new)
    meta.files_read.extend(other.meta.files_read)
    shown = ", ".join(new[:6]) + (f", ... ({len(new)} columns)" if len(new) > 6 else "")
    how = [f"{result.per_launch} kernel(s) per launch"]
    if result.kernel_mean:
        how.append(f"{result.kernel_mean} by the kernel's mean over that run (other launch counts)")
    if result.missing:
        how.append(f"{result.missing} not launched there (no value)")
    return f"{where}: {shown} ({', '.join(how)})"


def _adopt_device_info(meta: Meta, others: list[Meta]) -> None:
    """What the primary run lacks of the device (its info.json: core counts, clock, CANN version) from the other
    runs of the same device: a run holding only its exports still ran on the chip the others record."""
    for other in others:
        if meta.hardware is None and other.hardware is not None:
            meta.hardware = other.hardware
            meta.ai_core_num = meta.ai_core_num or other.ai_core_num
            meta.aiv_num = meta.aiv_num if meta.aiv_num is not None else other.aiv_num
            if not meta.chip or str(meta.chip).endswith("-class"):
                meta.chip = other.chip
        if cann_release(meta.cann_version) is None and cann_release(other.cann_version) is not None:
            meta.cann_version = other.cann_version  # a release the other run records beats a header's family


def _skip_other(meta: Meta, primary_src: RankSource, other_src: RankSource, primary: Profile, other: Profile) -> None:
    meta.skip(other_src.root, f"another run of the same device with other kernels ({len(other.ops)} vs "
                              f"{len(primary.ops)} ops): not merged; analyze it on its own "
                              f"(advisor analyze {other_src.root}) or compare the two (advisor compare "
                              f"{primary_src.root} {other_src.root})")


def _primary_rank(profile: Profile, index: int) -> tuple[int, int, int]:
    ops = profile.ops
    has_pipes = any(c in ops and ops[c].notna().any() for c in _PIPE_RATIOS)
    return (0 if has_pipes else 1, -len(_metric_columns(ops)), index)


def _metric_columns(ops: pd.DataFrame) -> list[str]:
    """Numeric per-op metric columns that hold at least one value."""
    return [c for c in ops.columns if c not in _NOT_METRICS and pd.api.types.is_numeric_dtype(ops[c])
            and ops[c].notna().any()]


def _kernels(ops: pd.DataFrame) -> np.ndarray:
    """The kernel of each op row: its name and input shapes (``"MatMul|64,128;128,256"``)."""
    names = ops["name"].astype(str).to_numpy()
    shapes = ops["input_shapes"].astype(str).to_numpy() if "input_shapes" in ops else np.full(len(ops), "")
    return np.char.add(np.char.add(names.astype(str), "|"), shapes.astype(str))


def _time_order(ops: pd.DataFrame) -> np.ndarray:
    """Row positions in time order (file order where no start times were recorded, as in msprof op)."""
    start = ops["start_us"].to_numpy(dtype="float64") if "start_us" in ops else np.full(len(ops), np.nan)
    if np.isnan(start).all():
        return np.arange(len(ops))
    return np.argsort(start, kind="stable")


def _occurrence(kernels: np.ndarray, order: np.ndarray) -> np.ndarray:
    """The n-th launch of its kernel each row is, counting in ``order``."""
    ranked = pd.Series(kernels[order]).groupby(kernels[order], sort=False).cumcount().to_numpy()
    out = np.empty(len(kernels), dtype="int64")
    out[order] = ranked
    return out


def _same_kernels(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    """Both runs launched the same kernels (launch counts may differ)."""
    return bool(len(a) and len(b)) and set(_kernels(a)) == set(_kernels(b))


def _shared_time(primary: pd.DataFrame, other: pd.DataFrame) -> float:
    """The share of the primary's kernel time spent in kernels the other run launched too."""
    dur = np.nan_to_num(primary["duration_us"].to_numpy(dtype="float64"), nan=0.0)
    if dur.sum() <= 0:
        return 0.0
    present = np.isin(_kernels(primary), np.unique(_kernels(other)))
    return float(dur[present].sum() / dur.sum())


def merge_metrics(primary: pd.DataFrame, other: pd.DataFrame, columns: list[str]) -> Merge:
    """Copy ``columns`` of ``other`` into ``primary`` (in place), kernel by kernel (see the module doc)."""
    pk, ok = _kernels(primary), _kernels(other)
    p_occ, o_occ = _occurrence(pk, _time_order(primary)), _occurrence(ok, _time_order(other))
    p_count = pd.Series(pk).value_counts()
    o_count = pd.Series(ok).value_counts()
    counts = pd.DataFrame({"p": p_count, "o": o_count})
    launch_kernels = set(counts.index[counts["p"] == counts["o"]])
    mean_kernels = set(counts.index[counts["p"].notna() & counts["o"].notna() & (counts["p"] != counts["o"])])
    by_launch = pd.Series(np.arange(len(other)), index=pd.MultiIndex.from_arrays([ok, o_occ]))
    launch_rows = np.isin(pk, list(launch_kernels))
    source = by_launch.reindex(pd.MultiIndex.from_arrays([pk[launch_rows], p_occ[launch_rows]])).to_numpy()
    mean_rows = np.isin(pk, list(mean_kernels))
    weights = np.nan_to_num(other["duration_us"].to_numpy(dtype="float64"), nan=0.0)
    for col in columns:
        values = metric_values(other[col])
        out = np.full(len(primary), np.nan)
        out[launch_rows] = values[source.astype(int)]
        if mean_rows.any():
            out[mean_rows] = _weighted_means(ok, values, weights).reindex(pk[mean_rows]).to_numpy()
        primary[col] = out
    missing = len(set(p_count.index) - set(o_count.index))
    return Merge(columns, len(launch_kernels), len(mean_kernels), missing)


def _weighted_means(kernels: np.ndarray, values: np.ndarray, weights: np.ndarray) -> pd.Series:
    """Per kernel, the mean of its finite values weighted by launch duration (unweighted where no launch has one)."""
    ok = np.isfinite(values)
    w = np.where(weights > 0, weights, 0.0)
    frame = pd.DataFrame({"k": kernels[ok], "vw": values[ok] * w[ok], "w": w[ok], "v": values[ok]})
    sums = frame.groupby("k", sort=False).agg(vw=("vw", "sum"), w=("w", "sum"), v=("v", "mean"))
    return pd.Series(np.where(sums["w"] > 0, sums["vw"] / sums["w"].where(sums["w"] > 0, 1.0), sums["v"]),
                     index=sums.index)


def _common_parent(paths: list[Path]) -> Path:
    parts = [p.resolve().parts for p in paths]
    common: list[str] = []
    for items in zip(*parts, strict=False):
        if len(set(items)) != 1:
            break
        common.append(items[0])
    return Path(*common) if common else Path("/")


def _rel(path: Path, base: Path) -> str:
    try:
        return str(path.resolve().relative_to(base)) or path.name
    except ValueError:
        return str(path)


__all__ = ["MIN_SHARED_TIME", "Merge", "merge_metrics", "read_runs"]
