"""``msprof op`` (msOpProf, on-board single-operator profiling): ``OPPROF_{timestamp}_XXX`` directories.

Layouts (msopprof user guide, "msprof op" results; real CANN 8.5.2 files in tests/data/ingest_text/msprof_op):

* one kernel launch: ``OPPROF_*/{OpBasicInfo.csv, PipeUtilization.csv, ArithmeticUtilization.csv, Memory.csv,
  MemoryL0.csv, MemoryUB.csv, L2Cache.csv, ResourceConflictRatio.csv, dump/, visualize_data.bin}`` (the metric CSVs
  present are the ``--aic-metrics`` sets collected; ``Default`` is all of them);
* several launches (``--launch-count`` > 1): ``OPPROF_*/<OpName>/<n>/<Metric>_<yyyymmddhhmmssmmm>.csv``, one
  directory per launch, ordered here by that time suffix;
* several devices (MC2/LCCL ops): ``OPPROF_*/device<N>/<OpName>/<n>/...`` -- one rank per device (see ``detect``).

What each file becomes:

* ``OpBasicInfo``: one op row per launch. ``name`` = ``Op Name``; ``core`` from ``Op Type``, the kernel mode:
  ``vector`` -> AI_VECTOR_CORE, ``cube`` -> AI_CORE, ``mix`` -> MIX_AIC (for mix kernels ``Block Dim`` counts the
  cube cores and ``Mix Block Dim`` the vector cores: the cube side leads); ``duration_us`` = ``Task Duration(us)``;
  ``block_dim``, ``mix_block_dim``, ``device_id``; ``kernel_mode``, ``current_freq_mhz``, ``rated_freq_mhz`` kept
  as extra columns. ``type`` stays unknown: msprof op records no operator type. No start times: each launch is
  replayed on its own, not timed on one clock with the others.
* the per-block metric CSVs (one row per ``block_id`` x ``sub_block_id``; ``cube0`` rows carry the ``aic_*``
  columns, ``vector0``/``vector1`` rows the ``aiv_*`` ones, ``NA`` elsewhere) become per-op metrics named as in
  op_summary (``aic_cube_ratio`` -> ``aic_mac_ratio``, ``aic_time(us)`` -> ``aicore_time_us``; see
  ``columns.msprof_op_metric_name``), aggregated over the sub-blocks of their side:

  - times (us) are averaged (op_summary's ``aicore_time`` is the per-core average);
  - cycles, instruction counts, FLOPs, cache hits/misses and data volumes (KB) are summed;
  - ratios and rates (``*_ratio``, ``*_rate``, ``*_active_bw``) are weighted by each sub-block's cycles;
  - bandwidths: a sub-block's ``*_bw(GB/s)`` is its bytes over the launch's ``Task Duration`` in GiB/s (checked
    on the real files: ``aiv_main_mem_read_bw`` x Task Duration = ``read_main_memory_datas(KB)`` of the row), so
    the bytes of a side are sum(bandwidth) x 2**30 x Task Duration, and the per-op ``aic_*_bw``/``aiv_*_bw`` are
    those bytes over the side's mean core time in GB/s -- the model's convention, bandwidth x core time = bytes.

  ``aicore_time_us`` is the mean core time of the leading side (vector for vector kernels), and the unified
  ``main_mem_read_bw``/``main_mem_write_bw`` count the bytes of both sides over that time (from
  ``read/write_main_memory_datas(KB)`` when the Memory set was collected).
* every per-block row, with all its metric columns -> ``profile.extras["msprof_op_blocks"]`` (columns ``launch``,
  ``name``, ``block_id``, ``sub_block_id``, ``side`` (``aic``/``aiv``), then the canonical metric names).
* ``dump/``, ``visualize_data.bin``, ``trace.json``: MindStudio Insight inputs, listed as skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from advisor import safeload
from advisor.errors import InputError
from advisor.ingest import columns as C
from advisor.ingest.csvread import read_table
from advisor.ingest.normalize import finalize_ops
from advisor.model import Meta, Profile
from advisor.util import is_ascii_digits

METRIC_SETS = ("PipeUtilization", "ArithmeticUtilization", "Memory", "MemoryL0", "MemoryUB", "L2Cache",
               "ResourceConflictRatio")
"""The ``--aic-metrics`` sets msprof op writes one CSV each for (``Default`` = all of them); read in this order,
so a column several files carry (``aic_time(us)``, ``aic_mte2_ratio``) is taken from the first."""

KERNEL_MODE_CORE = {"vector": "AI_VECTOR_CORE", "aiv": "AI_VECTOR_CORE", "cube": "AI_CORE", "aic": "AI_CORE",
                    "aicore": "AI_CORE", "ai_core": "AI_CORE", "mix": "MIX_AIC"}
"""``OpBasicInfo`` ``Op Type`` (kernel mode) -> normalized core."""

BLOCKS_EXTRA = "msprof_op_blocks"
"""``profile.extras`` key of the per-block metric table."""

_TIME_SUFFIX = re.compile(r"_(\d{14,17})$")
_NOT_READ = {"dump": "raw msprof op dump (MindStudio Insight input), not read",
             "visualize_data.bin": "MindStudio Insight visualization file, not read",
             "trace.json": "MC2/LCCL pipeline trace for MindStudio Insight, not read"}


# ---------------------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------------------
def read(root: Path, meta: Meta) -> Profile:
    """Reader-registry entry for layout ``msprof-op``: ``root`` is an ``OPPROF_*`` directory (or one device's /
    one launch's directory inside it)."""
    root = Path(root)
    if root.is_file():
        root = root.parent
    launches = launch_dirs(root)
    if not launches:
        raise InputError(root, "no OpBasicInfo.csv: not an msprof op (OPPROF_*) result directory")
    rows: list[dict[str, object]] = []
    blocks: list[pd.DataFrame] = []
    metric_sets: set[str] = set()
    for i, launch in enumerate(launches):
        row, block = _read_launch(launch, i, meta, metric_sets)
        if row is None:
            continue
        rows.append(row)
        if block is not None:
            blocks.append(block)
    if not rows:
        raise InputError(root, "no kernel launch could be read (every OpBasicInfo.csv is empty or unusable)")
    _skip_tool_files(root, launches, meta)

    ops = finalize_ops(pd.DataFrame(rows))
    profile = Profile(ops=ops, meta=meta)
    if blocks:
        profile.extras[BLOCKS_EXTRA] = pd.concat(blocks, ignore_index=True)
    meta.framework = meta.framework or "msprof op"
    meta.config = {**meta.config, "aic_metrics": [m for m in METRIC_SETS if m in metric_sets]}
    mark_kernel_dev(meta)
    meta.notes.append(
        f"msprof op: {len(rows)} kernel launch(es), metric sets "
        + (", ".join(m for m in METRIC_SETS if m in metric_sets) or "none (OpBasicInfo only)")
        + "; launches are replayed one by one, so ops have no start times and no op types")
    _note_clock(ops, meta)
    read_hardware_info(root, meta)
    return profile


HARDWARE_INFO = "HardwareInfo.jsonl"
"""msprof op's record of the board (FORMATS.md 12): one JSON object per line, keyed by ``category``."""


def read_hardware_info(root: Path, meta: Meta) -> None:
    """Core counts and cube clock from ``HardwareInfo.jsonl`` (``AI Core Information``: ``ai core count``,
    ``ai vector count``, ``ai cube frequency(MHZ)``) into ``meta.hardware``, and the ``chip info`` it names; the
    file is optional (absent on older releases) and a broken one is listed as skipped."""
    from advisor.ingest.msprof import core_count, mhz
    from advisor.model import Hardware

    path = root / HARDWARE_INFO
    if not path.is_file():
        return
    try:
        lines = safeload.read_bytes(path).decode("utf-8", errors="replace").splitlines()
        records = [safeload.loads_json(line, path) for line in lines if line.strip()]
    except InputError as e:
        meta.skip(path, e.problem)
        return
    by_category = {str(r.get("category")): r for r in records if isinstance(r, dict)}
    core, device = by_category.get("AI Core Information", {}), by_category.get("Device Info", {})
    meta.read(path)
    hw = Hardware(core_count(core.get("ai core count")), core_count(core.get("ai vector count")),
                  mhz(core.get("ai cube frequency(MHZ)")), path.name)
    if hw.ai_cores:
        meta.hardware = meta.hardware or hw
        meta.ai_core_num = meta.ai_core_num or hw.ai_cores
        meta.aiv_num = meta.aiv_num if meta.aiv_num is not None else hw.vector_cores
    chip = str(device.get("chip info") or "").split()
    if chip and not meta.chip:
        meta.chip = chip[0]  # "Ascend950PR_9599 V100": the SoC, then its version


def mark_kernel_dev(meta: Meta) -> None:
    """Single-op kernel development context (``profile.meta.context``, once the data model has it)."""
    if hasattr(meta, "context"):
        meta.context = "kernel-dev"


# ---------------------------------------------------------------------------------------------------------
# directories
# ---------------------------------------------------------------------------------------------------------
def launch_dirs(root: Path) -> list[Path]:
    """Directories holding one launch each: ``root`` itself, or ``<OpName>/<n>`` below it, in launch order."""
    if any(root.glob("OpBasicInfo*.csv")):
        return [root]
    found = [p.parent for p in root.glob("*/*/OpBasicInfo*.csv")]
    return sorted(set(found), key=_launch_order)


def _launch_order(d: Path) -> tuple[str, str, int]:
    stamps = [m.group(1) for p in d.glob("OpBasicInfo*.csv") if (m := _TIME_SUFFIX.search(p.stem))]
    index = int(d.name) if is_ascii_digits(d.name) else 0
    return (min(stamps) if stamps else "", d.parent.name, index)


def _metric_file(launch: Path, kind: str) -> Path | None:
    """``<kind>.csv`` or ``<kind>_<time>.csv`` (not ``MemoryL0`` for ``Memory``)."""
    exact = launch / f"{kind}.csv"
    if exact.is_file():
        return exact
    stamped = sorted(p for p in launch.glob(f"{kind}_*.csv") if _TIME_SUFFIX.search(p.stem)
                     and p.stem[: _TIME_SUFFIX.search(p.stem).start()] == kind)  # type: ignore[union-attr]
    return stamped[-1] if stamped else None


def _skip_tool_files(root: Path, launches: Iterable[Path], meta: Meta) -> None:
    for d in {root, *launches}:
        for name, reason in _NOT_READ.items():
            if (d / name).exists():
                meta.skip(d / name, reason)


# ---------------------------------------------------------------------------------------------------------
# one launch
# ---------------------------------------------------------------------------------------------------------
def _read_launch(launch: Path, index: int, meta: Meta,
                 metric_sets: set[str]) -> tuple[dict[str, object] | None, pd.DataFrame | None]:
    basic_path = _metric_file(launch, "OpBasicInfo")
    if basic_path is None:
        return None, None
    basic = read_table(basic_path, C.MSPROF_OP_BASIC_ALIASES, text=C.MSPROF_OP_BASIC_TEXT,
                       required=("name", "duration_us")).frame
    meta.read(basic_path)
    if len(basic) != 1:
        meta.skip(basic_path, f"{len(basic)} rows where one kernel launch is expected; not read")
        return None, None
    row: dict[str, object] = {c: basic[c].iloc[0] for c in basic.columns}
    mode = str(row.get("kernel_mode") or "").strip().lower()
    row["core"] = KERNEL_MODE_CORE.get(mode)
    if row["core"] is None and mode:
        meta.notes.append(f"{basic_path}: unknown kernel mode (Op Type) {mode!r}: core left unknown")
    row["launch"] = index

    blocks = _read_blocks(launch, meta, metric_sets)
    if blocks is None:
        return row, None
    blocks = blocks.copy()  # one consolidated block before the two inserts (the merged metric CSVs leave many)
    blocks.insert(0, "launch", index)
    blocks.insert(1, "name", row["name"])
    row.update(aggregate_blocks(blocks, str(row["core"] or ""), float(row["duration_us"])))
    n_blocks = blocks["block_id"].nunique()
    block_dim = float(pd.to_numeric(pd.Series([row.get("block_dim")]), errors="coerce").iloc[0])
    if np.isfinite(block_dim) and n_blocks != int(block_dim):
        meta.notes.append(f"{launch.name}: metric CSVs hold {n_blocks} block(s) where Block Dim is {int(block_dim)}; "
                          "per-op metrics are over the blocks present")
    return row, blocks


def _read_blocks(launch: Path, meta: Meta, metric_sets: set[str]) -> pd.DataFrame | None:
    """The metric CSVs of one launch joined on (block_id, sub_block_id); a column two files carry comes from the
    first in ``METRIC_SETS`` order."""
    merged: pd.DataFrame | None = None
    for kind in METRIC_SETS:
        path = _metric_file(launch, kind)
        if path is None:
            continue
        try:
            table = read_table(path, C.MSPROF_OP_BLOCK_ALIASES, text={"sub_block_id"},
                               extra=C.msprof_op_metric_name)
        except InputError as e:
            meta.skip(path, e.problem)
            continue
        frame = table.frame
        if len(frame.columns) <= ("block_id" in frame) + ("sub_block_id" in frame):
            meta.skip(path, "no metric columns")
            continue
        meta.read(path)
        metric_sets.add(kind)
        if "block_id" not in frame:  # Atlas inference chips: one row per AI Core, no block ids
            frame.insert(0, "block_id", np.arange(len(frame), dtype="float64"))
        if "sub_block_id" not in frame:
            frame["sub_block_id"] = None
        frame["sub_block_id"] = frame["sub_block_id"].astype(object).where(frame["sub_block_id"].notna(), None)
        if merged is None:
            merged = frame
            continue
        new = [c for c in frame.columns if c not in merged.columns]
        merged = merged.merge(frame[["block_id", "sub_block_id", *new]], on=["block_id", "sub_block_id"], how="outer")
    if merged is None:
        return None
    merged = merged.copy()  # consolidated: the outer merges leave a fragmented frame
    merged["sub_block_id"] = merged["sub_block_id"].astype(object)
    merged.insert(2, "side", [_row_side(s) for s in merged["sub_block_id"]])
    return merged.sort_values(["block_id", "sub_block_id"], kind="stable", na_position="first").reset_index(drop=True)


def _row_side(sub_block: object) -> str:
    """``cube0`` -> aic, ``vector1`` -> aiv; rows without a sub-block (Atlas inference chips) are AI Core rows."""
    text = str(sub_block or "").lower()
    return "aiv" if text.startswith(("vector", "vec", "aiv")) else "aic"


# ---------------------------------------------------------------------------------------------------------
# per-block -> per-op
# ---------------------------------------------------------------------------------------------------------
def aggregation(column: str) -> str:
    """How a per-block metric adds up to the op: ``mean`` (times), ``weighted`` (ratios and rates, by cycles),
    ``throughput`` (bandwidths) or ``sum`` (cycles, counts, FLOPs, data volumes)."""
    if column.endswith("_time_us"):
        return "mean"
    if column.endswith(("_ratio", "_rate", "_rate_estimate", "_active_bw")) or "_rate" in column:
        return "weighted"
    if re.search(r"_bw(?:_[a-z]+)?$", column):
        return "throughput"
    return "sum"


def _column_side(column: str) -> str | None:
    if column.startswith(("aic_", "aicore_")):
        return "aic"
    if column.startswith("aiv_"):
        return "aiv"
    return None


def aggregate_blocks(blocks: pd.DataFrame, core: str, duration_us: float) -> dict[str, float]:
    """One launch's per-block rows -> per-op metrics (see the module doc)."""
    side = blocks["side"].to_numpy()
    cycles = {"aic": _num(blocks, "aic_total_cycles"), "aiv": _num(blocks, "aiv_total_cycles")}
    times = {"aic": _num(blocks, "aicore_time_us"), "aiv": _num(blocks, "aiv_time_us")}
    row_cycles = np.where(side == "aiv", cycles["aiv"], cycles["aic"])
    mean_time = {s: _nanmean(times[s][side == s]) for s in ("aic", "aiv")}
    out: dict[str, float] = {}
    for col in blocks.columns:
        if col in ("launch", "name", "block_id", "sub_block_id", "side"):
            continue
        col_side = _column_side(col)
        mask = side == col_side if col_side else np.ones(len(blocks), bool)
        values = _num(blocks, col)[mask]
        kind = aggregation(col)
        if kind == "mean":
            out[col] = _nanmean(values)
        elif kind == "weighted":
            out[col] = _weighted(values, row_cycles[mask])
        elif kind == "sum" or col_side is None:
            out[col] = float(np.nansum(values)) if np.isfinite(values).any() else np.nan
        else:  # bandwidth: bytes over the launch duration -> GB/s over the side's mean core time
            moved = _bytes_from_bw(values, duration_us)
            t = mean_time[col_side]
            out[col] = moved / (t * 1e3) if np.isfinite(moved) and t > 0 else np.nan
    if "aic_vec_ratio" in out and "aiv_vec_ratio" not in out:  # Atlas inference chips: vector unit in the AI Core
        out["vec_ratio"] = out["aic_vec_ratio"]
    lead = "aiv" if core == "AI_VECTOR_CORE" else "aic"
    other = "aic" if lead == "aiv" else "aiv"
    lead_time = mean_time[lead] if np.isfinite(mean_time[lead]) else mean_time[other]
    out["aicore_time_us"] = lead_time
    for direction in ("read", "write"):
        moved = _main_memory_bytes(blocks, direction, duration_us)
        out[f"main_mem_{direction}_bw"] = moved / (lead_time * 1e3) if np.isfinite(moved) and lead_time > 0 \
            else np.nan
    return out


def _bytes_from_bw(gib_per_s: np.ndarray, duration_us: float) -> float:
    """Bytes moved at ``gib_per_s`` (one value per sub-block, GiB/s over the launch) during ``duration_us``."""
    ok = np.isfinite(gib_per_s)
    if not ok.any() or not np.isfinite(duration_us):
        return np.nan
    return float(gib_per_s[ok].sum() * 2.0 ** 30 * duration_us * 1e-6)


def _main_memory_bytes(blocks: pd.DataFrame, direction: str, duration_us: float) -> float:
    """Bytes read from / written to main memory by all sub-blocks: the data volume column when present, else
    the bandwidth columns of both sides."""
    volume = _num(blocks, f"{direction}_main_memory_datas_kb")
    if np.isfinite(volume).any():
        return float(np.nansum(volume) * 1024.0)
    parts = [_bytes_from_bw(_num(blocks, f"{s}_main_mem_{direction}_bw")[blocks["side"].to_numpy() == s],
                            duration_us) for s in ("aic", "aiv")]
    parts = [p for p in parts if np.isfinite(p)]
    return float(sum(parts)) if parts else np.nan


def _num(frame: pd.DataFrame, column: str) -> np.ndarray:
    if column not in frame:
        return np.full(len(frame), np.nan)
    return pd.to_numeric(frame[column], errors="coerce").to_numpy(dtype="float64")


def _nanmean(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.mean()) if len(values) else np.nan


def _weighted(values: np.ndarray, weights: np.ndarray) -> float:
    ok = np.isfinite(values)
    if not ok.any():
        return np.nan
    w = weights[ok]
    if np.isfinite(w).all() and w.sum() > 0:
        return float(np.sum(values[ok] * w) / w.sum())
    return float(values[ok].mean())


def _note_clock(ops: pd.DataFrame, meta: Meta) -> None:
    if "current_freq_mhz" not in ops or "rated_freq_mhz" not in ops:
        return
    cur = pd.to_numeric(ops["current_freq_mhz"], errors="coerce")
    rated = pd.to_numeric(ops["rated_freq_mhz"], errors="coerce")
    low = (cur < rated).to_numpy()
    if low.any():
        meta.notes.append(f"{int(low.sum())} of {len(ops)} launch(es) ran below the rated AI Core clock "
                          f"(down to {cur[low].min():g} of {rated[low].max():g} MHz, OpBasicInfo Current Freq)")


__all__ = ["BLOCKS_EXTRA", "KERNEL_MODE_CORE", "METRIC_SETS", "aggregate_blocks", "aggregation", "launch_dirs",
           "mark_kernel_dev", "read"]
