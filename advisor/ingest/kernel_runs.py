"""An msprof op result beside msprof's timed export of the same program: one folder, both read.

A kernel developer often keeps both in one folder: ``msprof op`` (``OpBasicInfo.csv`` or ``summary.jsonl`` and the
per-block metric CSVs: one launch replayed on its own, measured block by block) and ``msprof --application``'s
``op_summary_*.csv`` (every launch of the program timed on one clock: warm-ups and repeats, 11 launches for
``--warm-up=10 --launch-count=1``). Both are the run's data (FORMATS.md 12):

* the ops are the op_summary's launches (timed: start times, waits, the device's real sequence); the msprof op
  launches are not added as ops -- their time is a replay of one of those launches, counting it twice would be wrong;
* each msprof op launch is attached to the op_summary kernel it measured: the kernel whose name (or op type) its
  ``Op Name`` is, or begins with followed by ``_`` (``ChunkScaledDotKkt_1f44..._0_mix_aic`` is ``ChunkScaledDotKkt``;
  the longest such name wins). Its per-block table (``extras["msprof_op_blocks"]``) names that kernel in ``name``
  (``kernel_name`` keeps msprof op's own); its per-op row goes to ``extras["msprof_op_launches"]``;
* per-op metrics the op_summary does not have for that kernel (pipe ratios when msprof ran without
  ``--aic-metrics``, L2 hit rates, bank conflicts...) are given to its launches from msprof op, the duration-weighted
  mean over its msprof op launches -- unless the two ran the kernel with different Block Dims (another launch
  configuration: the blocks are attached, the metrics are not, and the notes say so);
* an msprof op launch no op_summary kernel matches is not attached: its directory is listed in ``files_skipped``
  with the kernels the op_summary holds (analyze it on its own).
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.common.errors import InputError
from advisor.ingest.msprof import read_output_dir
from advisor.model import (
    COMPUTE_CORES,
    KERNEL_BLOCKS_EXTRA,
    OP_ID_COLUMNS,
    OP_TASK_COLUMNS,
    OP_TENSOR_COLUMNS,
    OP_TIME_COLUMNS,
    Meta,
    Profile,
    metric_values,
)

LAUNCHES_EXTRA = "msprof_op_launches"
"""``profile.extras`` key of the msprof op launches' own per-op rows (``kernel`` = the op they are attached to)."""

_TIMED_KINDS = ("op_summary", "kernel_details")
_NOT_METRICS = frozenset({*OP_ID_COLUMNS, *OP_TIME_COLUMNS, *OP_TASK_COLUMNS, *OP_TENSOR_COLUMNS, "launch",
                          "kernel_mode", "pid", "current_freq_mhz", "rated_freq_mhz", "device_id", "rank"})


def timed_exports(root: Path) -> list[Path]:
    """msprof's timed per-launch exports directly in ``root`` (``op_summary*.csv``, else ``kernel_details*.csv``)."""
    for kind in _TIMED_KINDS:
        found = sorted(p for p in root.glob(f"{kind}*.csv") if p.is_file()
                       and re.match(rf"^{kind}(?:_[^.]*)?\.csv$", p.name))
        if found:
            return found
    return []


def combine(root: Path, op_profile: Profile, timed: list[Path]) -> Profile:
    """``op_profile`` (the msprof op launches read from ``root``) with the timed export in ``root`` (see the module
    doc); ``op_profile`` alone when the export cannot be read (listed as skipped)."""
    meta = op_profile.meta
    try:
        profile = read_output_dir(root, meta)
    except InputError as e:
        for p in timed:
            meta.skip(p, f"{e.problem}; the msprof op launch(es) beside it are analyzed alone")
        return op_profile
    ops = profile.ops
    compute = ops[ops["core"].isin(COMPUTE_CORES)] if "core" in ops else ops
    if not len(compute):
        for p in timed:
            meta.skip(p, "no compute task to attach the msprof op launch(es) to; they are analyzed alone")
        return op_profile
    launches = op_profile.ops.copy()
    kernels = [match_kernel(str(n), compute) for n in launches["name"].astype(str)]
    launches["kernel"] = kernels
    blocks = op_profile.extras.get(KERNEL_BLOCKS_EXTRA)
    attached = [k for k in kernels if k is not None]
    _drop_unmatched(launches, compute, timed[-1].name, root, meta)
    given: dict[str, np.ndarray] = {}
    for kernel in dict.fromkeys(attached):
        given.update(_give_metrics(ops, given, launches[launches["kernel"] == kernel], kernel, timed[-1].name, meta))
    if given:  # one concat, not a column insert per metric (hundreds of msprof op columns)
        ops = pd.concat([ops.drop(columns=[c for c in given if c in ops]),
                         pd.DataFrame(given, index=ops.index)], axis=1)
    if blocks is not None:
        blocks = blocks[blocks["launch"].isin(launches.loc[launches["kernel"].notna(), "launch"])].copy()
        blocks["name"] = blocks["launch"].map(dict(zip(launches["launch"], launches["kernel"], strict=True)))
        profile.extras[KERNEL_BLOCKS_EXTRA] = blocks.reset_index(drop=True)
    for key, value in op_profile.extras.items():
        profile.extras.setdefault(key, value)
    profile.extras[LAUNCHES_EXTRA] = launches.reset_index(drop=True)
    profile.ops = ops
    meta.notes[:] = [n for n in meta.notes if not n.startswith("msprof op: ")]
    if attached:
        names = ", ".join(dict.fromkeys(attached))
        meta.notes.append(
            f"msprof op beside {timed[-1].name}: the ops are its {len(ops)} timed launches; msprof op's "
            f"{len(attached)} replayed launch(es) of {names} (metric sets "
            f"{', '.join(meta.config.get('aic_metrics', [])) or 'none'}) are not ops (their time is a replay of one of "
            f"those launches): their per-block metrics are attached to {names}"
            + (f"; metrics {_shown(list(given))} given to its launches from msprof op (the kernel's mean over its "
               f"msprof op launches)" if given else ""))
    return profile


def match_kernel(kernel_name: str, compute: pd.DataFrame) -> str | None:
    """The op name of ``compute`` whose name or op type ``kernel_name`` is, or begins with followed by ``_``; the
    longest match, then the kernel with the most time; None when none matches."""
    names = compute["name"].astype(str).to_numpy()
    types = compute["type"].astype(str).to_numpy() if "type" in compute else np.full(len(compute), "")
    best: dict[str, int] = {}
    for name, op_type in set(zip(names, types, strict=True)):
        for ident in (name, op_type):
            if ident and ident != "nan" and (kernel_name == ident or kernel_name.startswith(ident + "_")):
                best[name] = max(best.get(name, 0), len(ident))
    if not best:
        return None
    longest = max(best.values())
    tied = [n for n, length in best.items() if length == longest]
    if len(tied) == 1:
        return tied[0]
    time = compute.groupby(compute["name"].astype(str))["duration_us"].sum()
    return max(tied, key=lambda n: (float(time.get(n, 0.0)), n))


def _drop_unmatched(launches: pd.DataFrame, compute: pd.DataFrame, timed: str, root: Path, meta: Meta) -> None:
    """List msprof op launches no op_summary kernel matches as skipped."""
    unmatched = launches[launches["kernel"].isna()]
    if not len(unmatched):
        return
    held = compute["name"].astype(str).value_counts()
    listed = ", ".join(f"{n} ({c})" for n, c in held.head(5).items()) + (
        f", ... ({len(held)} kernels)" if len(held) > 5 else "")
    for name in dict.fromkeys(unmatched["name"].astype(str)):
        meta.skip(root, f"msprof op launch(es) of {name}: {timed} holds no kernel of that name or op type (it holds "
                        f"{listed}): not attached; analyze the msprof op result on its own (in a folder without the "
                        "op_summary)")


def _give_metrics(ops: pd.DataFrame, given: dict[str, np.ndarray], launches: pd.DataFrame, kernel: str, timed: str,
                  meta: Meta) -> dict[str, np.ndarray]:
    """The per-op metrics ``ops`` lacks for ``kernel``, from its msprof op ``launches`` (duration-weighted mean):
    ``{column: whole column}``, starting from ``given`` (the columns other kernels were given already) or ``ops``.
    Empty when the Block Dims differ (said in the notes)."""
    rows = (ops["name"].astype(str) == kernel).to_numpy()
    theirs = _block_dims(ops.loc[rows, "block_dim"]) if "block_dim" in ops else set()
    mine = _block_dims(launches["block_dim"]) if "block_dim" in launches else set()
    if theirs and mine and theirs != mine:
        meta.notes.append(
            f"msprof op ran {kernel} with Block Dim {_dims(mine)} where {timed}'s launches ran {_dims(theirs)}: "
            "another launch configuration; its per-block metrics are attached to the kernel, its per-op metrics "
            "are not given to those launches")
        return {}
    weights = np.nan_to_num(launches["duration_us"].to_numpy(dtype="float64"), nan=0.0)
    out: dict[str, np.ndarray] = {}
    for col in launches.columns:
        if col in _NOT_METRICS or col == "kernel" or not pd.api.types.is_numeric_dtype(launches[col]):
            continue
        values = metric_values(launches[col])
        ok = np.isfinite(values)
        if not ok.any():
            continue
        if col in ops and np.isfinite(metric_values(ops[col])[rows]).any():
            continue  # op_summary measured it for these launches: its own values stay
        w = weights[ok]
        value = float(np.sum(values[ok] * w) / w.sum()) if w.sum() > 0 else float(values[ok].mean())
        if col in given:
            column = given[col]
        else:
            column = metric_values(ops[col]) if col in ops else np.full(len(ops), np.nan)
            column = column.astype("float64", copy=True)
        column[rows] = value
        out[col] = column
    return out


def _block_dims(values: pd.Series) -> set[int]:
    v = pd.to_numeric(values, errors="coerce").to_numpy(dtype="float64")
    return {int(x) for x in v[np.isfinite(v)]}


def _dims(dims: set[int]) -> str:
    return "/".join(str(d) for d in sorted(dims))


def _shown(columns: list[str]) -> str:
    unique = list(dict.fromkeys(columns))
    return ", ".join(unique[:6]) + (f", ... ({len(unique)} columns)" if len(unique) > 6 else "")


__all__ = ["LAUNCHES_EXTRA", "combine", "match_kernel", "timed_exports"]
