"""``msprof op`` (msOpProf, on-board single-operator profiling): ``OPPROF_{timestamp}_XXX`` directories, and the
newer JSON Lines capture.

Layouts (msopprof user guide, "msprof op" results; real CANN 8.5.2 files in tests/data/ingest_text/msprof_op; FORMATS.md
section 12):

* one kernel launch: ``OPPROF_*/{OpBasicInfo.csv, PipeUtilization.csv, ArithmeticUtilization.csv, Memory.csv,
  MemoryL0.csv, MemoryUB.csv, L2Cache.csv, ResourceConflictRatio.csv, dump/, visualize_data.bin}`` (the metric CSVs
  present are the ``--aic-metrics`` sets collected; ``Default`` is all of them);
* several launches (``--launch-count`` > 1): ``OPPROF_*/<OpName>/<n>/<Metric>_<yyyymmddhhmmssmmm>.csv`` (also
  ``<OpName>_<hash>_<n>/<launch>/``), one directory per launch, ordered here by that time suffix;
* several devices (MC2/LCCL ops): ``OPPROF_*/device<N>/<OpName>/<n>/...`` -- one rank per device (see ``detect``);
* the JSON Lines capture (Ascend 950, the ``npu-compute`` collector; :mod:`advisor.ingest.msprof_op_jsonl`): the same
  metric CSVs with no ``OpBasicInfo.csv``, the kernel in ``summary.jsonl`` (``OpInfoSummary``) and the board in
  ``HardwareInfo.jsonl``; a second kernel of one collection in ``collection-p<pid>-<n>/`` beside the first;
* either of them beside msprof's timed export of the same program (``op_summary_*.csv``): both are read, see
  :mod:`advisor.ingest.kernel_runs`.

What each file becomes:

* ``OpBasicInfo`` (or ``OpInfoSummary``): one op row per launch. ``name`` = ``Op Name``; ``core`` from ``Op Type``,
  the kernel mode: ``vector`` -> AI_VECTOR_CORE, ``cube`` -> AI_CORE, ``mix`` -> MIX_AIC (for mix kernels ``Block Dim``
  counts the cube cores and ``Mix Block Dim`` the vector cores: the cube side leads); ``duration_us`` = ``Task
  Duration(us)``; ``block_dim``, ``mix_block_dim``, ``device_id``; ``kernel_mode``, ``current_freq_mhz``,
  ``rated_freq_mhz`` kept as extra columns. ``type`` stays unknown: msprof op records no operator type. No start
  times: each launch is replayed on its own, not timed on one clock with the others.
* the per-block metric CSVs (one row per ``block_id`` x ``sub_block_id``; ``cube0`` rows carry the ``aic_*``
  columns, ``vector0``/``vector1`` rows the ``aiv_*`` ones, ``NA`` elsewhere) become per-op metrics named as in
  op_summary (``aic_cube_ratio`` -> ``aic_mac_ratio``, ``aic_time(us)`` -> ``aicore_time_us``; see
  ``columns.msprof_op_metric_name``), aggregated over the sub-blocks of their side:

  - times (us) are averaged (op_summary's ``aicore_time`` is the per-core average);
  - cycles, instruction counts, FLOPs, cache hits/misses and data volumes (KB) are summed;
  - ratios and rates (``*_ratio``, ``*_rate``, ``*_active_bw``) are weighted by each sub-block's cycles;
  - bandwidths: a sub-block's ``*_bw(GB/s)`` is its bytes in GiB/s over a time -- the launch's ``Task Duration`` in
    the ``OPPROF_*`` files (checked on the real files: ``aiv_main_mem_read_bw`` x Task Duration =
    ``read_main_memory_datas(KB)`` of the row), the sub-block's own core time in the JSON Lines capture (its docs:
    "bandwidth is data over execution time", the Task time only for mix kernels) -- so the bytes of a side are the
    sum of bandwidth x 2**30 x that time, and the per-op ``aic_*_bw``/``aiv_*_bw`` are those bytes over the side's
    mean core time in GB/s -- the model's convention, bandwidth x core time = bytes.

  ``aicore_time_us`` is the mean core time of the leading side (vector for vector kernels), and the unified
  ``main_mem_read_bw``/``main_mem_write_bw`` count the bytes of both sides over that time (from
  ``read/write_main_memory_datas(KB)`` when the Memory set was collected).

  A metric CSV is one row per (``block_id``, ``sub_block_id``); a file repeating keys (repeated measurements of
  one block: the JSON Lines capture may write one row per replay) is read as one row per key -- identical repeats
  dropped, differing ones averaged -- and the notes say so, naming the file: the files are joined on that key and
  a repeated key would multiply rows (60 repeats in seven files: 60**7 rows per block). A CSV over
  :data:`MAX_METRIC_CSV_BYTES` or :data:`MAX_BLOCK_ROWS` is not read (listed as skipped).
* every per-block row, with all its metric columns -> ``profile.extras["msprof_op_blocks"]``, read by knowledge
  bases as ``Profile.kernel_blocks`` (columns ``launch``, ``name``, ``block_id``, ``sub_block_id``, ``side``
  (``aic``/``aiv``), then the canonical metric names; ``kernel_name`` is the ``Op Name`` msprof op recorded, ``name``
  the op row's name the block belongs to -- the same, except beside an op_summary whose name for the kernel
  differs). The columns and their meaning: ``advisor.model.KERNEL_BLOCK_KEY_COLUMNS`` / ``KERNEL_BLOCK_METRICS``.
* ``HardwareInfo.jsonl``, ``summary.jsonl``: :mod:`advisor.ingest.msprof_op_jsonl`.
* ``dump/``, ``visualize_data.bin``, ``trace.json``, ``PipeTrace.json``: MindStudio Insight / Chrome trace inputs,
  listed as skipped.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

import advisor.ingest.columns as C
import advisor.ingest.kernel_runs as kernel_runs
import advisor.ingest.msprof_op_jsonl as J
from advisor.common.errors import InputError
from advisor.common.units import fmt_us
from advisor.common.util import is_ascii_digits
from advisor.ingest.csvread import read_table
from advisor.ingest.layout import Layout, Match, RankSource
from advisor.ingest.normalize import finalize_ops
from advisor.model import KERNEL_BLOCK_KEY_COLUMNS, KERNEL_BLOCKS_EXTRA, Meta, Profile

METRIC_SETS = ("PipeUtilization", "ArithmeticUtilization", "Memory", "MemoryL0", "MemoryUB", "L2Cache",
               "ResourceConflictRatio")
"""The ``--aic-metrics`` sets msprof op writes one CSV each for (``Default`` = all of them); read in this order,
so a column several files carry (``aic_time(us)``, ``aic_mte2_ratio``) is taken from the first."""

KERNEL_MODE_CORE = {"vector": "AI_VECTOR_CORE", "aiv": "AI_VECTOR_CORE", "cube": "AI_CORE", "aic": "AI_CORE",
                    "aicore": "AI_CORE", "ai_core": "AI_CORE", "mix": "MIX_AIC"}
"""``OpBasicInfo`` ``Op Type`` (kernel mode) -> normalized core."""

BLOCKS_EXTRA = KERNEL_BLOCKS_EXTRA
"""``profile.extras`` key of the per-block metric table (``Profile.kernel_blocks``; its columns are documented in
``advisor.model``: ``KERNEL_BLOCK_KEY_COLUMNS``, ``KERNEL_BLOCK_METRICS``)."""

MAX_METRIC_CSV_BYTES = 64 << 20
"""Largest metric CSV read: one row per block and sub-block is a few KB (48 cores x 3 sub-blocks); 64 MiB is
thousands of times that."""

MAX_BLOCK_ROWS = 200_000
"""Most rows a metric CSV may hold: ~1,400 times the sub-blocks of the largest chip, room for repeated
measurements; beyond, the file is not one kernel's per-block table."""

HARDWARE_INFO = J.HARDWARE_INFO
_TIME_SUFFIX = re.compile(r"_(\d{14,17})$")
_COLLECTION_DIR = re.compile(r"^collection-p\d+-\d+$")
_NOT_READ = {"dump": "raw msprof op dump (MindStudio Insight input), not read",
             "visualize_data.bin": "MindStudio Insight visualization file, not read",
             "trace.json": "MC2/LCCL pipeline trace for MindStudio Insight, not read",
             "PipeTrace.json": "sampled pipeline timeline (Chrome trace of at most 6 cores, each replay on its own "
                               "clock), not read"}


# ---------------------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------------------
def read(root: Path, meta: Meta) -> Profile:
    """Reader-registry entry for layout ``msprof-op``: ``root`` is an ``OPPROF_*`` directory (or one device's /
    one launch's directory inside it), or a JSON Lines capture's result directory."""
    root = Path(root)
    if root.is_file():
        root = root.parent
    profile = read_launches(root, meta)
    timed = kernel_runs.timed_exports(root)
    if timed:
        return kernel_runs.combine(root, profile, timed)
    return profile


def read_launches(root: Path, meta: Meta) -> Profile:
    """The msprof op launches under ``root``: one op row each, the per-block table in ``extras``."""
    launches = launch_dirs(root)
    if not launches:
        raise InputError(root, "no OpBasicInfo.csv or summary.jsonl beside the metric CSVs: not an msprof op "
                               "(OPPROF_*) result directory")
    rows: list[dict[str, object]] = []
    blocks: list[pd.DataFrame] = []
    summaries: list[pd.DataFrame] = []
    metric_sets: set[str] = set()
    for launch in launches:
        row, block, summary = _read_launch(launch, len(rows), meta, metric_sets)
        if summary is not None:
            summaries.append(summary)
        if row is None:
            continue
        rows.append(row)
        if block is not None:
            blocks.append(block)
    if not rows:
        raise InputError(root, "no kernel launch could be read (every OpBasicInfo.csv / summary.jsonl is empty or "
                               "unusable)")
    _skip_tool_files(root, launches, meta)

    ops = finalize_ops(pd.DataFrame(rows))
    profile = Profile(ops=ops, meta=meta)
    if blocks:
        profile.extras[BLOCKS_EXTRA] = pd.concat(blocks, ignore_index=True)
    if summaries:
        profile.extras[J.SUMMARY_EXTRA] = pd.concat(summaries, ignore_index=True)
    meta.framework = meta.framework or "msprof op"
    meta.config = {**meta.config, "aic_metrics": [m for m in METRIC_SETS if m in metric_sets]}
    meta.source_of("ops", "OpBasicInfo.csv" if any(_metric_file(d, "OpBasicInfo") for d in launches)
                   else J.SUMMARY)
    mark_kernel_dev(meta)
    meta.notes.append(
        f"msprof op: {len(rows)} kernel launch(es), metric sets "
        + (", ".join(m for m in METRIC_SETS if m in metric_sets) or "none (OpBasicInfo only)")
        + "; launches are replayed one by one, so ops have no start times and no op types")
    _note_clock(ops, meta)
    hardware = J.read_hardware_info(root, meta)
    if hardware is not None:
        profile.extras[J.HARDWARE_EXTRA] = hardware
    return profile


def read_hardware_info(root: Path, meta: Meta) -> None:
    """``HardwareInfo.jsonl`` into ``meta`` (see :func:`advisor.ingest.msprof_op_jsonl.read_hardware_info`)."""
    J.read_hardware_info(root, meta)


def mark_kernel_dev(meta: Meta) -> None:
    """Single-op kernel development context (``profile.meta.context``, once the data model has it)."""
    if hasattr(meta, "context"):
        meta.context = "kernel-dev"


# ---------------------------------------------------------------------------------------------------------
# directories
# ---------------------------------------------------------------------------------------------------------
def launch_dirs(root: Path) -> list[Path]:
    """Directories holding one launch each: ``root`` itself, ``<OpName>/<n>`` below it in launch order, or, for the
    JSON Lines capture, ``root`` and its ``collection-p<pid>-<n>`` directories."""
    if any(root.glob("OpBasicInfo*.csv")):
        return [root]
    found = [p.parent for p in root.glob("*/*/OpBasicInfo*.csv")]
    if found:
        return sorted(set(found), key=_launch_order)
    if not is_jsonl_capture(root):
        return []
    collections = sorted(c for c in root.iterdir() if c.is_dir() and _COLLECTION_DIR.match(c.name)
                         and has_metric_csv(c))
    return ([root] if has_metric_csv(root) or (root / J.SUMMARY).is_file() else []) + collections


def has_metric_csv(d: Path) -> bool:
    """``d`` holds a metric-set CSV by its plain name (``PipeUtilization.csv``...)."""
    return any((d / f"{kind}.csv").is_file() for kind in METRIC_SETS)


def is_jsonl_capture(d: Path) -> bool:
    """The JSON Lines capture: ``summary.jsonl`` or ``HardwareInfo.jsonl`` beside metric-set CSVs (names only)."""
    return ((d / J.SUMMARY).is_file() or (d / J.HARDWARE_INFO).is_file()) and (
        has_metric_csv(d) or any(c.is_dir() and _COLLECTION_DIR.match(c.name) for c in d.iterdir()))


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
    for d in sorted({root, *launches}):
        for name, reason in _NOT_READ.items():
            if (d / name).exists():
                meta.skip(d / name, reason)


# ---------------------------------------------------------------------------------------------------------
# one launch
# ---------------------------------------------------------------------------------------------------------
def _read_launch(launch: Path, index: int, meta: Meta, metric_sets: set[str]
                 ) -> tuple[dict[str, object] | None, pd.DataFrame | None, pd.DataFrame | None]:
    """The launch's op row, per-block table and (JSON Lines capture) the collector's aggregates."""
    basic_path = _metric_file(launch, "OpBasicInfo")
    summary = None
    if basic_path is not None:
        row = _basic_row(basic_path, meta)
        basis = "task"
    else:
        row, summary = J.read_summary(launch, index, meta)
        if row is None and not (launch / J.SUMMARY).exists():
            meta.skip(launch, f"metric CSVs without {J.SUMMARY} or OpBasicInfo.csv: no kernel name or Task "
                              "Duration; not read")
        basis = "core"
    if row is None:
        return None, None, summary
    row["launch"] = index
    blocks = _read_blocks(launch, meta, metric_sets)
    if basic_path is None:
        _complete_from_blocks(row, blocks, launch, meta)
    mode = str(row.get("kernel_mode") or "").strip().lower()
    row["core"] = KERNEL_MODE_CORE.get(mode)
    if row["core"] is None and mode:
        meta.notes.append(f"{basic_path or launch / J.SUMMARY}: unknown kernel mode (Op Type) {mode!r}: core left "
                          "unknown")
    if blocks is None:
        return row, None, summary
    blocks = blocks.copy()  # one consolidated block before the inserts (the merged metric CSVs leave many)
    blocks.insert(0, "launch", index)
    blocks.insert(1, "name", row["name"])
    blocks["kernel_name"] = row["name"]
    if basis == "core" and row["core"] == "MIX_AIC" and np.isfinite(float(row["duration_us"])):  # type: ignore[arg-type]
        basis = "task"  # the JSON Lines capture's docs: a mix kernel's bandwidths are over its Task time
    row.update(aggregate_blocks(blocks, str(row["core"] or ""), float(row["duration_us"]),  # type: ignore[arg-type]
                                basis))
    n_blocks = blocks["block_id"].nunique()
    block_dim = float(pd.to_numeric(pd.Series([row.get("block_dim")]), errors="coerce").iloc[0])
    if np.isfinite(block_dim) and n_blocks != int(block_dim):
        meta.notes.append(f"{launch.name}: metric CSVs hold {n_blocks} block(s) where Block Dim is {int(block_dim)}; "
                          "per-op metrics are over the blocks present")
    return row, blocks, summary


def _basic_row(path: Path, meta: Meta) -> dict[str, object] | None:
    basic = read_table(path, C.MSPROF_OP_BASIC_ALIASES, text=C.MSPROF_OP_BASIC_TEXT,
                       required=("name", "duration_us")).frame
    meta.read(path)
    if len(basic) != 1:
        meta.skip(path, f"{len(basic)} rows where one kernel launch is expected; not read")
        return None
    return {c: basic[c].iloc[0] for c in basic.columns}


def _complete_from_blocks(row: dict[str, object], blocks: pd.DataFrame | None, launch: Path, meta: Meta) -> None:
    """What ``OpInfoSummary`` left ``null`` (its docs: no name, no valid task interval, no launch record), from the
    launch directory and its per-block rows; the notes say which."""
    where = launch / J.SUMMARY
    if not row.get("name"):
        row["name"] = launch.name
        meta.notes.append(f"{where}: Op Name is null: the kernel is called {launch.name} (its directory)")
    sides = set(blocks["side"]) if blocks is not None else set()
    if not row.get("kernel_mode") and sides:
        row["kernel_mode"] = "mix" if sides == {"aic", "aiv"} else ("vector" if sides == {"aiv"} else "cube")
        meta.notes.append(f"{where}: Op Type is null: {row['kernel_mode']} from the sides of its metric rows")
    block_dim = float(row.get("block_dim", np.nan))  # type: ignore[arg-type]
    if block_dim != block_dim and blocks is not None:
        row["block_dim"] = float(blocks["block_id"].nunique())
    duration = float(row.get("duration_us", np.nan))  # type: ignore[arg-type]
    if duration != duration:
        longest = np.nan
        if blocks is not None:
            times = [_num(blocks, c) for c in ("aicore_time_us", "aiv_time_us")]
            longest = float(np.nanmax(np.concatenate(times))) if any(np.isfinite(t).any() for t in times) else np.nan
        if longest != longest:
            raise InputError(where, "Task Duration(us) is null and no core time is recorded: the kernel's duration "
                                    "is unknown")
        row["duration_us"] = longest
        meta.notes.append(f"{where}: Task Duration(us) is null (no valid task interval): the longest core time, "
                          f"{fmt_us(longest)}, stands for it")


def _read_blocks(launch: Path, meta: Meta, metric_sets: set[str]) -> pd.DataFrame | None:
    """The metric CSVs of one launch joined on (block_id, sub_block_id), one row per key; a column two files carry
    comes from the first in ``METRIC_SETS`` order."""
    merged: pd.DataFrame | None = None
    for kind in METRIC_SETS:
        path = _metric_file(launch, kind)
        if path is None:
            continue
        frame = _read_metric_csv(path, meta)
        if frame is None:
            continue
        metric_sets.add(kind)
        if merged is None:
            merged = frame
            continue
        new = [c for c in frame.columns if c not in merged.columns]
        merged = merged.merge(frame[["block_id", "sub_block_id", *new]], on=["block_id", "sub_block_id"], how="outer",
                              validate="one_to_one")
    if merged is None:
        return None
    merged = merged.copy()  # consolidated: the outer merges leave a fragmented frame
    merged["sub_block_id"] = merged["sub_block_id"].astype(object)
    merged.insert(2, "side", [_row_side(s) for s in merged["sub_block_id"]])
    return merged.sort_values(["block_id", "sub_block_id"], kind="stable", na_position="first").reset_index(drop=True)


def _read_metric_csv(path: Path, meta: Meta) -> pd.DataFrame | None:
    """One metric CSV with its row keys, one row per key (see the module doc); None when not read (skipped)."""
    try:
        size = path.stat().st_size
    except OSError as e:
        meta.skip(path, f"cannot be read ({e.strerror or e})")
        return None
    if size > MAX_METRIC_CSV_BYTES:
        meta.skip(path, f"{size / 2**20:.0f} MiB, over the {MAX_METRIC_CSV_BYTES >> 20} MiB a per-block metric CSV "
                        "is read up to: not one kernel's per-block table")
        return None
    try:
        table = read_table(path, C.MSPROF_OP_BLOCK_ALIASES, text={"sub_block_id"}, extra=C.msprof_op_metric_name)
    except InputError as e:
        meta.skip(path, e.problem)
        return None
    frame = table.frame
    if len(frame.columns) <= ("block_id" in frame) + ("sub_block_id" in frame):
        meta.skip(path, "no metric columns")
        return None
    if len(frame) > MAX_BLOCK_ROWS:
        meta.skip(path, f"{len(frame)} rows, over the {MAX_BLOCK_ROWS} a per-block metric CSV is read up to: not one "
                        "kernel's per-block table")
        return None
    meta.read(path)
    if "block_id" not in frame:  # Atlas inference chips: one row per AI Core, no block ids
        frame.insert(0, "block_id", np.arange(len(frame), dtype="float64"))
    if "sub_block_id" not in frame:
        frame["sub_block_id"] = None
    frame["sub_block_id"] = frame["sub_block_id"].astype(object).where(frame["sub_block_id"].notna(), None)
    return one_row_per_block(frame, path, meta)


def one_row_per_block(frame: pd.DataFrame, path: Path, meta: Meta) -> pd.DataFrame:
    """``frame`` with one row per (block_id, sub_block_id): identical repeats dropped, differing ones (repeated
    measurements of one block) averaged; the notes name the file."""
    keys = frame[["block_id", "sub_block_id"]].astype(str)
    repeated = keys.duplicated(keep=False)
    if not repeated.any():
        return frame
    n_keys = int((~keys.duplicated()).sum())
    rows = len(frame)
    exact = frame.drop_duplicates(ignore_index=True)
    if not exact[["block_id", "sub_block_id"]].astype(str).duplicated().any():
        meta.notes.append(f"{path}: {rows} rows for {n_keys} (block_id, sub_block_id) keys, the repeats identical: "
                          "read once per key")
        return exact
    metrics = [c for c in frame.columns if c not in ("block_id", "sub_block_id")]
    group = frame.assign(_key=keys["block_id"] + "\x00" + keys["sub_block_id"])
    first = group.drop_duplicates("_key").set_index("_key")[["block_id", "sub_block_id"]]
    means = group.groupby("_key", sort=False)[metrics].mean(numeric_only=True)
    out = first.join(means).reset_index(drop=True)
    most = int(keys.value_counts().max())
    meta.notes.append(f"{path}: {rows} rows for {n_keys} (block_id, sub_block_id) keys (up to {most} per key, their "
                      "values differing): read as one row per key, the mean of its repeats (repeated measurements of "
                      "one block)")
    return out[["block_id", "sub_block_id", *[c for c in metrics if c in out.columns]]]


def _row_side(sub_block: object) -> str:
    """``cube0`` -> aic, ``vector1`` / ``vector0_core3`` -> aiv; rows without a sub-block (Atlas inference chips) are
    AI Core rows."""
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


BLOCK_KEY_COLUMNS = KERNEL_BLOCK_KEY_COLUMNS
"""Columns of the per-block table that are not metrics."""


def aggregate_blocks(blocks: pd.DataFrame, core: str, duration_us: float, basis: str = "task") -> dict[str, float]:
    """One launch's per-block rows -> per-op metrics (see the module doc). ``basis``: the time a row's bandwidth is
    over -- ``task`` (the launch's Task Duration, ``OPPROF_*`` files) or ``core`` (the row's own core time, the JSON
    Lines capture)."""
    side = blocks["side"].to_numpy()
    cycles = {"aic": _num(blocks, "aic_total_cycles"), "aiv": _num(blocks, "aiv_total_cycles")}
    times = {"aic": _num(blocks, "aicore_time_us"), "aiv": _num(blocks, "aiv_time_us")}
    row_cycles = np.where(side == "aiv", cycles["aiv"], cycles["aic"])
    row_time = np.where(side == "aiv", times["aiv"], times["aic"])
    bw_time = np.full(len(blocks), duration_us) if basis == "task" else row_time
    mean_time = {s: _nanmean(times[s][side == s]) for s in ("aic", "aiv")}
    out: dict[str, float] = {}
    for col in blocks.columns:
        if col in BLOCK_KEY_COLUMNS:
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
        else:  # bandwidth: bytes over the rows' time -> GB/s over the side's mean core time
            moved = _bytes_from_bw(values, bw_time[mask])
            t = mean_time[col_side]
            out[col] = moved / (t * 1e3) if np.isfinite(moved) and t > 0 else np.nan
    if "aic_vec_ratio" in out and "aiv_vec_ratio" not in out:  # Atlas inference chips: vector unit in the AI Core
        out["vec_ratio"] = out["aic_vec_ratio"]
    lead = "aiv" if core == "AI_VECTOR_CORE" else "aic"
    other = "aic" if lead == "aiv" else "aiv"
    lead_time = mean_time[lead] if np.isfinite(mean_time[lead]) else mean_time[other]
    out["aicore_time_us"] = lead_time
    for direction in ("read", "write"):
        moved = _main_memory_bytes(blocks, direction, bw_time)
        out[f"main_mem_{direction}_bw"] = moved / (lead_time * 1e3) if np.isfinite(moved) and lead_time > 0 \
            else np.nan
    return out


def _bytes_from_bw(gib_per_s: np.ndarray, time_us: np.ndarray) -> float:
    """Bytes moved at ``gib_per_s`` (one value per sub-block, GiB/s) during each row's ``time_us``."""
    ok = np.isfinite(gib_per_s) & np.isfinite(time_us)
    if not ok.any():
        return np.nan
    return float(np.sum(gib_per_s[ok] * time_us[ok]) * 2.0 ** 30 * 1e-6)


def _main_memory_bytes(blocks: pd.DataFrame, direction: str, bw_time: np.ndarray) -> float:
    """Bytes read from / written to main memory by all sub-blocks: the data volume column when present, else
    the bandwidth columns of both sides."""
    volume = _num(blocks, f"{direction}_main_memory_datas_kb")
    if np.isfinite(volume).any():
        return float(np.nansum(volume) * 1024.0)
    side = blocks["side"].to_numpy()
    parts = [_bytes_from_bw(_num(blocks, f"{s}_main_mem_{direction}_bw")[side == s], bw_time[side == s])
             for s in ("aic", "aiv")]
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



# ---------------------------------------------------------------------------------------------------------
# the layout this module reads (advisor.ingest.registry)
# ---------------------------------------------------------------------------------------------------------
_OPPROF_DEVICE_DIR = re.compile(r"^device(\d+)$")
_JSONL_FILES = (J.SUMMARY.lower(), J.HARDWARE_INFO.lower())


def _jsonl_capture(d: Path) -> bool:
    """:func:`is_jsonl_capture`, False for a folder that cannot be listed."""
    try:
        return is_jsonl_capture(d)
    except OSError:
        return False


def _launches_at(d: Path) -> bool:
    """``d`` holds msprof op launches: ``OpBasicInfo.csv`` in it or two levels down, or the JSON Lines capture."""
    return any(d.glob("OpBasicInfo*.csv")) or any(d.glob("*/*/OpBasicInfo*.csv")) or _jsonl_capture(d)


def _device_dirs(d: Path) -> list[tuple[int, Path]]:
    """``(N, device<N>/)`` children of ``d`` holding msprof op launches, in device order."""
    return sorted((int(m.group(1)), c) for c in d.iterdir()
                  if c.is_dir() and (m := _OPPROF_DEVICE_DIR.match(c.name)) and _launches_at(c))


def _result_dir(d: Path) -> list[RankSource]:
    """An ``msprof op`` result: one launch (``OpBasicInfo.csv`` here), several (``<OpName>/<n>/``), the JSON Lines
    capture -- or one rank per ``device<N>/`` (multi-device MC2/LCCL ops)."""
    if not (d.name.startswith("OPPROF_") or any(d.glob("OpBasicInfo*.csv")) or _jsonl_capture(d)
            or _device_dirs(d)):
        return []
    if _launches_at(d):
        return [RankSource(d, "msprof-op")]
    return [RankSource(c, "msprof-op", n) for n, c in _device_dirs(d)]


def _result_file(p: Path) -> list[RankSource]:
    """An ``OpBasicInfo.csv`` (or the JSON Lines capture's ``summary.jsonl`` / ``HardwareInfo.jsonl``) given alone:
    its directory."""
    name = p.name.lower()
    if (name.startswith("opbasicinfo") and name.endswith(".csv")) or (name in _JSONL_FILES and _jsonl_capture(p.parent)):
        return [RankSource(p.parent, "msprof-op")]
    return []


LAYOUTS = (
    Layout("msprof-op", "msprof", "msprof op (kernel tuning): OPPROF_* with OpBasicInfo.csv (or summary.jsonl) and "
           "the per-block metric CSVs", read, in_dir=(Match(10, _result_dir),), as_file=(Match(20, _result_file),),
           context=("kernel-dev", "msprof op (single-operator) output"), runs=True),
)


__all__ = ["BLOCKS_EXTRA", "BLOCK_KEY_COLUMNS", "KERNEL_MODE_CORE", "MAX_BLOCK_ROWS", "MAX_METRIC_CSV_BYTES",
           "METRIC_SETS", "aggregate_blocks", "aggregation", "has_metric_csv", "is_jsonl_capture", "launch_dirs",
           "mark_kernel_dev", "one_row_per_block", "read", "read_hardware_info", "read_launches"]
