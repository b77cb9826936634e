"""The summary tables msprof and the framework profilers both write, one reader each.

torch_npu's and MindSpore's ``ASCEND_PROFILER_OUTPUT`` hold msprof's summaries under other names (kernel_details.csv
is a renamed op_summary), so the msprof reader (:mod:`advisor.ingest.msprof`) and the framework reader
(:mod:`advisor.ingest.torch_npu`) share these:

=====================================================  ==========================================================
file                                                   reader
=====================================================  ==========================================================
op_summary / kernel_details (every header variant)     :func:`read_ops_files` (the main table: errors raise)
op_statistic                                           :func:`read_op_stats`
api_statistic / acl_statistic                          :func:`read_api_stats`
step_trace_time                                        :func:`read_step_trace_time`
l2_cache                                               :func:`read_l2_cache`
=====================================================  ==========================================================

with :func:`find_kind` (the newest export of a kind in a directory), :func:`optional_table` (a broken optional file
is skipped with its reason) and :func:`concat`. Imports: the shared ingest helpers (columns, csvread, normalize),
never a reader module.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pandas as pd

import advisor.ingest.columns as C
from advisor.common.errors import InputError
from advisor.common.util import release_memory
from advisor.ingest.csvread import found_list, read_columns, read_table, sniff_header
from advisor.ingest.normalize import clean_text, finalize_ops, read_projection, store_metrics
from advisor.model import API_COLUMNS, OP_METRIC_COLUMNS, OP_STATS_COLUMNS, STEPS_COLUMNS, Meta, empty_frame

_EXPORT_TS = re.compile(r"_(\d{14,17})$")
_SLICE = re.compile(r"_slice_(\d+)")
_EXTRA_TEXT_OPS = ("hf32_eligible", "model_name")


# ---------------------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------------------
def find_kind(directory: Path, kind: str, meta: Meta, *, ext: str = "csv", exclude: tuple[str, ...] = ()) -> list[Path]:
    """Files ``<kind>[_suffix].<ext>`` directly in ``directory``; of several timestamped exports only the newest
    (all of its slices) is kept and the older ones are recorded as skipped."""
    if not directory.is_dir():
        return []
    pattern = re.compile(rf"^{re.escape(kind)}(?:_[^.]*)?\.{re.escape(ext)}$")
    found = [p for p in directory.iterdir()
             if p.is_file() and pattern.match(p.name) and not p.name.startswith(exclude)]
    stamped = {p: m.group(1) for p in found if (m := _EXPORT_TS.search(p.stem))}
    if len(set(stamped.values())) > 1:
        newest = max(stamped.values())
        for p, ts in stamped.items():
            if ts != newest:
                meta.skip(p, f"older export ({ts}); the newest {kind} export ({newest}) is read")
        found = [p for p in found if stamped.get(p, newest) == newest]
    return sorted(found, key=_file_order)


def _file_order(p: Path) -> tuple[int, str]:
    m = _SLICE.search(p.stem)
    return (int(m.group(1)) if m else -1, p.name)


def optional_table(path: Path, meta: Meta, reader: Callable[[Path, Meta], pd.DataFrame]) -> pd.DataFrame | None:
    """Read an optional file; a broken one is recorded in ``meta.files_skipped`` instead of failing the profile."""
    try:
        df = reader(path, meta)
    except InputError as e:
        meta.skip(path, e.problem)
        return None
    meta.read(path)
    return df


def concat(frames: list[pd.DataFrame], columns: list[str]) -> pd.DataFrame:
    """Concatenate per-file tables (an empty typed frame when there are none)."""
    frames = [f for f in frames if f is not None]
    if not frames:
        return empty_frame(columns)
    if len(frames) == 1:
        return frames[0]
    return pd.concat(frames, ignore_index=True)


# ---------------------------------------------------------------------------------------------------------
# ops tables (op_summary / kernel_details, every variant)
# ---------------------------------------------------------------------------------------------------------
def read_ops_files(paths: list[Path], meta: Meta) -> pd.DataFrame:
    """Read one or more op_summary / kernel_details CSVs (the main table: errors raise) into a normalized ops table."""
    frames = []
    for p in paths:
        frames.append(_read_ops_csv(p, meta))
        meta.read(p)
    raw = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    del frames
    ops = finalize_ops(raw, share_missing=True)
    del raw
    if meta.ops_columns is not None:  # the derived columns exist now: drop their unwanted sources at once
        ops = meta.ops_columns.apply(ops)
    release_memory()
    for col in _EXTRA_TEXT_OPS:
        if col in ops.columns:
            ops[col] = clean_text(ops[col]).astype("category")
    if ops["device_id"].nunique() > 1:
        ids = ", ".join(str(int(v)) for v in sorted(ops["device_id"].dropna().unique())[:8])
        meta.notes.append(f"the ops table holds several devices ({ids}); they are analyzed together")
    return store_metrics(ops, meta.ops_columns)  # before the trace is read: ~0.15 GB less at 2M tasks


def _read_ops_csv(path: Path, meta: Meta) -> pd.DataFrame:
    header = sniff_header(path)
    resolved = C.resolve_header(header, C.OPS_ALIASES, extra=C.ops_metric_name)
    # the Ascend/workload_analysis per-op files are named <Op>_<SoC>_*.csv; a kernel_details or op_summary file that
    # lacks its name or duration column is damaged, not that subset
    derived = (not resolved.has("name") and resolved.has("input_shapes") and resolved.has("aicore_time_us")
               and "_Ascend" in path.stem and not path.name.lower().startswith(("kernel_details", "op_summary")))
    if not resolved.has("name") and not derived:
        raise InputError(path, f"no {C.describe_missing(['name'], C.OPS_ALIASES)} column; found: {found_list(header)}")
    if not resolved.has("duration_us") and not derived:
        raise InputError(path, f"no {C.describe_missing(['duration_us'], C.OPS_ALIASES)} column; "
                               f"found: {found_list(header)}")
    frame, notes = read_columns(path, header, _projected(resolved.columns, meta), text=C.OPS_TEXT_ALIASES.keys(),
                                meta=meta, share_constants=True)
    meta.notes.extend(notes)
    # "(%)" metrics are percentages: make them fractions here, where the unit is known (finalize_ops can only
    # guess from the values, which fails for a file whose utilizations are all below 1 %)
    for col, source in resolved.sources.items():
        if source.replace(" ", "").endswith("(%)") and col in frame.columns:
            frame[col] = frame[col] / 100.0
    _note_header(path, resolved, meta)
    if derived:
        frame = _complete_derived_subset(path, frame, meta)
    return frame


def _projected(columns: dict[str, int], meta: Meta) -> dict[str, int]:
    """The metric columns of ``columns`` the analysis reads (``meta.ops_columns``), and every other column (ids and
    text are few; the reader may use them before ingest drops the unwanted ones)."""
    if meta.ops_columns is None:
        return columns
    wanted = read_projection(meta.ops_columns)
    return {c: pos for c, pos in columns.items() if wanted.wants(c) or not _is_metric(c)}


def _is_metric(column: str) -> bool:
    """A PMU metric: a unified one, or a column the header names beyond the aliases (``aic_*``, ``aiv_*``...)."""
    return column in OP_METRIC_COLUMNS or column not in C.OPS_ALIASES


def _note_header(path: Path, resolved: C.ResolvedHeader, meta: Meta) -> None:
    """Record what the header says: variant, CANN hint, chip class, missing OP State."""
    variant, cann = C.ops_header_variant(resolved)
    note = f"{path.name}: {variant}"
    if note not in meta.notes:
        meta.notes.append(note)
    if cann and not meta.cann_version:
        meta.cann_version = cann
    if not meta.chip:
        if C.split_core_metrics(resolved):
            meta.chip = "Ascend910B-class"
            meta.notes.append("chip inferred from the aic_/aiv_ split metric columns (Atlas A2/A3-class)")
        elif named := C.chip_from_name(path.name):
            meta.chip = named
            meta.notes.append(f"chip {named} taken from the file name")
    if not resolved.has("op_state"):
        msg = "the profile has no OP State column: static/dynamic shape is unknown (not assumed dynamic)"
        if msg not in meta.notes:
            meta.notes.append(msg)
    if resolved.source("start_us") in ("Task Start Time", "Start Time"):
        meta.notes.append(f"{path.name}: '{resolved.source('start_us')}' has no unit in the header; read as us")


def _complete_derived_subset(path: Path, frame: pd.DataFrame, meta: Meta) -> pd.DataFrame:
    """Name, type, core and duration for the derived per-op subset (Ascend/workload_analysis ``<Op>_<SoC>_*.csv``):
    one row per measured op instance, all on AI Core, timed by ``aicore_time(us)``."""
    op_type = re.split(r"_(?=Ascend)", path.stem, maxsplit=1)[0] or path.stem
    n = len(frame)
    frame["type"] = op_type
    frame["name"] = pd.Series([f"{op_type}_{i}" for i in range(n)], index=frame.index, dtype="str")
    frame["core"] = "AI_CORE"
    frame["duration_us"] = frame["aicore_time_us"]
    meta.notes.append(f"{path.name}: derived per-op subset without name/timing columns; ops are named "
                      f"{op_type}_<row>, core AI_CORE, duration = aicore_time(us)")
    return frame


# ---------------------------------------------------------------------------------------------------------
# statistics, steps, L2
# ---------------------------------------------------------------------------------------------------------
def read_op_stats(path: Path, meta: Meta) -> pd.DataFrame:
    """op_statistic -> OP_STATS_COLUMNS (``ratio`` as a 0-1 fraction)."""
    t = read_table(path, C.OP_STATS_ALIASES, text=C.OP_STATS_TEXT, required=["type", "total_us"])
    meta.notes.extend(t.notes)
    df = t.frame
    for col in ("type", "core", "model_name"):
        if col in df.columns:
            df[col] = clean_text(df[col])
    if "core" in df.columns:
        df["core"] = df["core"].str.upper()
    if "ratio" in df.columns:
        df["ratio"] = df["ratio"] / 100.0
    return complete(df, OP_STATS_COLUMNS)


def read_api_stats(path: Path, meta: Meta) -> pd.DataFrame:
    """api_statistic / CANN 5.x acl_statistic -> API_COLUMNS (plus ``variance``)."""
    t = read_table(path, C.API_ALIASES, text=C.API_TEXT, required=["name", "total_us"])
    meta.notes.extend(t.notes)
    df = t.frame
    for col in ("level", "name", "device_id"):
        if col in df.columns:
            df[col] = clean_text(df[col])
    return complete(df, API_COLUMNS)


def read_step_trace_time(path: Path, meta: Meta) -> pd.DataFrame:
    """torch_npu step_trace_time (any variant) -> STEPS_COLUMNS (plus the exclude-receive column)."""
    t = read_table(path, C.STEP_TRACE_TIME_ALIASES, text=(), required=["step", "computing_us"])
    meta.notes.extend(t.notes)
    return complete(t.frame, STEPS_COLUMNS)


def read_l2_cache(path: Path, meta: Meta) -> pd.DataFrame:
    """l2_cache.csv (torch_npu) / l2_cache_*.csv (msprof, plus Device_id): L2 hit/victim rate per task
    (``extras["l2_cache"]``)."""
    return text_table(path, meta, C.L2_CACHE_ALIASES, C.L2_CACHE_TEXT, ["name", "hit_rate"])


def text_table(path: Path, meta: Meta, aliases: C.Aliases, text: frozenset[str], required: list[str],
                *, multiline: bool = False) -> pd.DataFrame:
    """A side table whose ``text`` columns are cleaned text and whose missing columns are NA, every alias a column."""
    t = read_table(path, aliases, text=text, required=required, multiline=multiline, meta=meta)
    meta.notes.extend(t.notes)
    df = t.frame
    for col in text:
        if col in df.columns:
            df[col] = clean_text(df[col])
    for col in aliases:
        if col not in df.columns:
            df[col] = pd.Series(pd.NA, index=df.index, dtype="string") if col in text else np.nan
    return df


def complete(df: pd.DataFrame, columns: list[str]) -> pd.DataFrame:
    """Add the contract's missing columns as NaN, contract columns first."""
    for col in columns:
        if col not in df.columns:
            df[col] = np.nan
    rest = [c for c in df.columns if c not in columns]
    return df[list(columns) + rest]


__all__ = ["complete", "concat", "find_kind", "optional_table", "read_api_stats", "read_l2_cache", "read_op_stats",
           "read_ops_files", "read_step_trace_time", "text_table"]
