"""Several runs of one device read as one profile: their metric sets merged when they profiled the same kernels.

msprof collects one ``--aic-metrics`` set per run, so an engineer who wants pipe ratios, memory bandwidth and L2
hit rates of the same kernels runs the program once per set (a ``PROF_GROUP_<time>/PROF_<set>/PROF_*`` folder, or
sibling ``PROF_*`` / ``OPPROF_*`` directories). ``advisor.ingest.detect`` recognizes those as runs, not ranks;
this module reads them and:

* picks the primary run -- the one with pipe ratios (what the bound classification reads), then the one with the
  most metric columns, then the first by path. Its timing, steps, events and every other table are the profile's;
* matches each other run's ops to the primary's by (op name, occurrence of that name): when both hold exactly the
  same ops, the metric columns the primary lacks are copied over op by op (``merged``); when they differ the run
  is not merged and is listed under ``files_skipped`` with the command to analyze it on its own (``separate``);
* says which in ``meta.notes``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.errors import InputError
from advisor.ingest.detect import RankSource
from advisor.model import OP_ID_COLUMNS, OP_TASK_COLUMNS, OP_TENSOR_COLUMNS, OP_TIME_COLUMNS, Profile, metric_values

_NOT_METRICS = frozenset({*OP_ID_COLUMNS, *OP_TIME_COLUMNS, *OP_TASK_COLUMNS, *OP_TENSOR_COLUMNS, "rank", "launch",
                          "kernel_mode", "pid", "current_freq_mhz", "rated_freq_mhz", "hf32_eligible", "model_name",
                          "infer_id"})
_PIPE_RATIOS = ("mac_ratio", "vec_ratio")


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
    merged: list[str] = []
    for i in order[1:]:
        other_src, other = read[i]
        where = _rel(other_src.root, base)
        if not _same_ops(primary.ops, other.ops):
            meta.skip(other_src.root, f"another run of the same device with other ops ({len(other.ops)} vs "
                                      f"{len(primary.ops)}): not merged; analyze it on its own "
                                      f"(advisor analyze {other_src.root}) or compare the two (advisor compare "
                                      f"{primary_src.root} {other_src.root})")
            continue
        columns = _merge_metrics(primary.ops, other.ops)
        meta.files_read.extend(other.meta.files_read)
        if columns:
            shown = ", ".join(columns[:6]) + (f", ... ({len(columns)} columns)" if len(columns) > 6 else "")
            merged.append(f"{where}: {shown}")
        else:
            meta.notes.append(f"{where}: a repeat run of the same ops with no metric the primary run lacks; not "
                              f"merged (its device time {other.device_time_us():.3f} us, the primary's "
                              f"{primary.device_time_us():.3f} us)")
    for m, reason in failed:
        meta.skip(m.root, f"run not read: {reason}")
    meta.notes.append(
        f"{len(members)} runs of one device under {base} (runs, not ranks): timing and tables from "
        f"{_rel(primary_src.root, base)}"
        + ("; metric columns merged op by op from " + "; ".join(merged) if merged else "; no metrics merged"))
    return primary


def _primary_rank(profile: Profile, index: int) -> tuple[int, int, int]:
    ops = profile.ops
    has_pipes = any(c in ops and ops[c].notna().any() for c in _PIPE_RATIOS)
    return (0 if has_pipes else 1, -len(_metric_columns(ops)), index)


def _metric_columns(ops: pd.DataFrame) -> list[str]:
    """Numeric per-op metric columns that hold at least one value."""
    return [c for c in ops.columns if c not in _NOT_METRICS and pd.api.types.is_numeric_dtype(ops[c])
            and ops[c].notna().any()]


def _op_keys(ops: pd.DataFrame) -> pd.Series:
    """(name, n-th occurrence of that name in time order) -- the identity of a kernel launch across runs."""
    order = ops.sort_values("start_us", kind="stable").index if ops["start_us"].notna().any() else ops.index
    names = ops.loc[order, "name"].astype(str)
    occurrence = names.groupby(names, sort=False).cumcount()
    keys = names + "#" + occurrence.astype(str)
    return keys.reindex(ops.index)


def _same_ops(a: pd.DataFrame, b: pd.DataFrame) -> bool:
    if len(a) != len(b) or not len(a):
        return False
    return sorted(_op_keys(a)) == sorted(_op_keys(b))


def _merge_metrics(primary: pd.DataFrame, other: pd.DataFrame) -> list[str]:
    """Copy into ``primary`` (in place) the metric columns it has no value in, matched op by op."""
    have = set(_metric_columns(primary))
    new = [c for c in _metric_columns(other) if c not in have]
    if not new:
        return []
    lookup = pd.Series(np.arange(len(other)), index=_op_keys(other).to_numpy())
    rows = lookup.reindex(_op_keys(primary).to_numpy()).to_numpy()
    for col in new:
        values = metric_values(other[col])
        primary[col] = values[rows.astype(int)]
    return new


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


__all__ = ["read_runs"]
