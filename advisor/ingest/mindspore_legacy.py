"""MindSpore 1.x profiler output: one flat ``profiler/`` directory of ``<kind>_<device>.csv`` files.

A directory may hold several devices' files (``hccl_raw_0.csv``, ``hccl_raw_2.csv``); the reader takes the
device given as ``meta.rank`` when its files are there, else the only (or the lowest) device id present.

What each file becomes, and the decisions behind it:

* ``aicore_intermediate_N_detail.csv`` (``full_kernel_name,execution_time,execution_frequency``,
  ``full_op_name,execution_time``, or the early ``full_op_time``/``full_kernel_time,execution_time,
  execution_frequency`` whose first column holds the op names too): one row per AI Core op with its **average
  time per execution in ms**
  (checked: in the samples ``execution_time x execution_frequency`` summed per type equals the ``_type.csv`` total,
  and per-op averages equal the mean of that op's tasks in the timeline).
* ``ascend_timeline_display_N.json`` (older name ``timeline_display_N.json``): one X event per AI Core task with
  ``args.fullname``/``type``/``input_k``/``output_k``. When its op names match the detail file, **ops are the
  timeline tasks**: one row per task, ``duration_us`` = the task's own time, ``stream_id`` = the event tid.
  Without a usable timeline, each detail op is repeated ``execution_frequency`` times (1 when the column is
  absent) with ``duration_us`` = the average per execution and no start time, so that sums and per-call
  durations are both right. A timeline whose names do not match the CSVs (another run) is skipped, with reason.
* ``framework_raw_N.csv`` (``full_kernel_name,...,kernel_type,...`` or ``full_op_name,...,op_type,...``): op
  type, block dim, task/stream ids and tensors: ``op_info`` is JSON ``{"input_0": {"format", "data_type",
  "shape"}, ...}`` turned into the canonical ``input_shapes`` / ``input_dtypes`` / ``input_formats`` strings
  (``NUMBER_TYPE_FLOAT32`` -> ``FLOAT``; ``DefaultFormat`` -> ``ND``).
* ``aicpu_intermediate_N.csv``: one op per row, core ``AI_CPU``; ``start_us`` = ``run_start`` and
  ``duration_us`` = ``run_end - run_start`` (both us: they match the timeline's AI CPU events);
  ``total_time``/``dispatch_time`` (ms) are kept as ``aicpu_total_us`` / ``aicpu_dispatch_us``.
  When the timeline carries the same AI CPU events, its relative ``ts`` are shifted by the offset they imply so
  AI Core and AI CPU rows share one clock (that of the step trace).
* ``aicore_intermediate_N_type.csv`` -> ``op_stats`` (AI Core). The older variant (``kernel_type,total_time``)
  holds totals over the run, the newer one (``op_type,execution_time``) sums of per-op averages; both are ms.
* ``step_trace_raw_N_detail_time.csv`` -> ``steps``: values are system-counter cycles of 10 ns (100 MHz, as
  MindSpore's own parsers divide by 100 to get us). ``computing_us`` = ``fp_and_bp``, ``preparing_us`` =
  ``iteration_interval``, ``communication_us`` = union of the ``stream_<s>_<i>_<Op>-op<n>`` intervals; extra
  columns ``start_us``, ``duration_us`` (``total``), ``fp_bp_us``, ``tail_us``. The trailing average row
  (``step_num`` ``-``/``0``) is dropped.
* ``hccl_raw_N.csv`` -> ``comm``: per step (average row ``-`` dropped), per op of
  ``communication_operator_cost``, one row per transport (summed over its src-dst links); link values are
  ``[time ms, size KB, bandwidth KB/s(, wait ms)]``. ``elapse_us`` = the op's communication + wait cost.
* ``minddata_pipeline_raw_N.csv`` -> ``extras["minddata_pipeline"]``; ``step_trace_point_info.json`` ->
  ``extras["step_trace_points"]``; ``ascend_cluster_analyse_<mode>_<stages>_<ranks>_N.csv`` (ms) ->
  ``extras["cluster_analyse"]`` in us.
* ``output_*.txt`` are MindSpore's intermediate text dumps: not read (listed as skipped).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.common.util import is_ascii_digits
from advisor.ingest.layout import Layout, Match, RankSource
from advisor.ingest.normalize import finalize_ops
from advisor.ingest.timebase import us_from_float, us_from_ns
from advisor.ingest.timeline import read_trace
from advisor.model import (
    COMM_COLUMNS,
    OP_STATS_COLUMNS,
    STEPS_COLUMNS,
    Meta,
    Profile,
    canonical_dtype,
    canonical_format,
    empty_frame,
    mindspore_op_type,
)

SYSCNT_PER_US = 100.0
"""Step-trace values are 100 MHz system-counter cycles: cycles / 100 = us."""
TIMELINE_MATCH_MIN = 0.5
"""Share of timeline op names that must appear in the CSVs for the timeline to be used as the ops source."""
STEP_EXTRA_COLUMNS = ["start_us", "duration_us", "fp_bp_us", "tail_us"]

_DEVICE_FILE = re.compile(
    r"^(?:aicore_intermediate|framework_raw|step_trace_raw|hccl_raw|aicpu_intermediate|minddata_pipeline_raw|"
    r"ascend_timeline_display|timeline_display)_(\d+)(?:_|\.)")
_COMM_FIELD = re.compile(r"^stream_\d+_\d+_([A-Za-z]+)-op\d+$")
_TENSOR_KEY = re.compile(r"^(input|output)_(\d+)$")


# ---------------------------------------------------------------------------------------------------------
# files
# ---------------------------------------------------------------------------------------------------------
def device_ids(root: Path) -> list[int]:
    return sorted({int(m.group(1)) for p in root.iterdir() if p.is_file() and (m := _DEVICE_FILE.match(p.name))})


def _pick_device(root: Path, meta: Meta) -> int:
    ids = device_ids(root)
    if not ids:
        raise InputError(root, "no MindSpore profiler files (aicore_intermediate_N_*.csv, framework_raw_N.csv, "
                               "step_trace_raw_N_detail_time.csv, hccl_raw_N.csv...)")
    if meta.rank is not None and meta.rank in ids:
        return meta.rank
    if len(ids) > 1:
        meta.notes.append(f"{root.name}: files for devices {ids}; reading device {ids[0]}")
    return ids[0]


def _csv(path: Path, meta: Meta) -> pd.DataFrame | None:
    """A small CSV as text columns; None (and a skip entry) when absent or unreadable."""
    if not path.is_file():
        return None
    try:
        df = pd.read_csv(path, dtype=str, keep_default_na=False, skipinitialspace=True)
    except (OSError, ValueError, pd.errors.ParserError, UnicodeDecodeError) as e:
        meta.skip(path, f"unreadable CSV ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
        return None
    df.columns = [str(c).strip().lstrip("\ufeff") for c in df.columns]
    meta.read(path)
    return df


def _num(series: pd.Series) -> pd.Series:
    return pd.to_numeric(series, errors="coerce").astype("float64")


def _first_col(df: pd.DataFrame, *names: str) -> str | None:
    return next((n for n in names if n in df.columns), None)


# ---------------------------------------------------------------------------------------------------------
# tensors
# ---------------------------------------------------------------------------------------------------------
def _dtype(value: Any) -> str:
    text = str(value or "").strip()
    for prefix in ("NUMBER_TYPE_", "kNumberType"):
        if text.startswith(prefix):
            text = text[len(prefix):]
    return canonical_dtype(text) if text else ""


_MS_FORMATS = {"DEFAULTFORMAT": "ND", "DEFAULT": "ND", "FRACZ": "FRACTAL_Z"}
"""MindSpore's own format names (``kOpFormat_FRAC_Z = "FracZ"``) -> the names GE and msprof use."""


def _format(value: Any) -> str:
    text = str(value or "").strip()
    if text.upper() in _MS_FORMATS:
        return _MS_FORMATS[text.upper()]
    return canonical_format(text) if text else ""


def _shape(value: Any) -> str:
    if isinstance(value, list | tuple):
        return ",".join(str(int(d)) for d in value if str(d).strip() != "")
    return ",".join(p.strip() for p in str(value or "").strip().strip("[]").split(",") if p.strip())


def tensor_strings(info: Any) -> dict[str, str | None]:
    """``{"input_0": {...}, "output_0": {...}}`` -> canonical input/output shapes, dtypes, formats."""
    out: dict[str, str | None] = {}
    if not isinstance(info, dict):
        return out
    sides: dict[str, list[tuple[int, dict[str, Any]]]] = {"input": [], "output": []}
    for key, desc in info.items():
        m = _TENSOR_KEY.match(str(key))
        if m and isinstance(desc, dict):
            sides[m.group(1)].append((int(m.group(2)), desc))
    for side, items in sides.items():
        if not items:
            continue
        items.sort(key=lambda kv: kv[0])
        out[f"{side}_shapes"] = ";".join(_shape(d.get("shape")) for _, d in items)
        out[f"{side}_dtypes"] = ";".join(_dtype(d.get("data_type")) for _, d in items)
        out[f"{side}_formats"] = ";".join(_format(d.get("format")) for _, d in items)
    return out


def _type_from_name(name: str) -> str:
    """``Default/net/Conv2D-op12`` -> ``Conv2D``; a name without the ``-op<N>`` suffix is its own last component."""
    return mindspore_op_type(name) or str(name).rsplit("/", 1)[-1]


# ---------------------------------------------------------------------------------------------------------
# framework_raw
# ---------------------------------------------------------------------------------------------------------
def read_framework(path: Path, meta: Meta) -> pd.DataFrame | None:
    """framework_raw_N.csv -> one row per full op name: type, block_dim, task/stream ids, tensor strings."""
    df = _csv(path, meta)
    if df is None:
        return None
    name_col = _first_col(df, "full_op_name", "full_kernel_name")
    if name_col is None:
        meta.skip(path, "no full_op_name/full_kernel_name column")
        return None
    type_col = _first_col(df, "op_type", "kernel_type")
    tensors = [tensor_strings(_json(v)) for v in (df["op_info"] if "op_info" in df else [""] * len(df))]
    out = pd.DataFrame({
        "name": df[name_col].str.strip(),
        "type": df[type_col].str.strip() if type_col else df[name_col].map(_type_from_name),
        "block_dim": _num(df["block_dim"]) if "block_dim" in df else np.nan,
        "task_id": _num(df["task_id"]) if "task_id" in df else np.nan,
        "stream_id": _num(df["stream_id"]) if "stream_id" in df else np.nan,
    })
    tensor_df = pd.DataFrame(tensors, index=out.index)
    out = pd.concat([out, tensor_df], axis=1)
    return out.drop_duplicates("name", keep="first").set_index("name")


def _json(text: Any) -> Any:
    try:
        return safeload.loads_json(text) if isinstance(text, str) and text.strip() else None
    except InputError:
        return None


# ---------------------------------------------------------------------------------------------------------
# ops
# ---------------------------------------------------------------------------------------------------------
DETAIL_NAME_COLUMNS = ("full_op_name", "full_kernel_name", "full_op_time", "full_kernel_time")
"""Headers of the op-name column of ``aicore_intermediate_N_detail.csv``; ``full_op_time``/``full_kernel_time``
(MindInsight test resources, 2020) hold op names despite the name."""


def _detail_ops(detail: pd.DataFrame, path: Path, meta: Meta) -> pd.DataFrame | None:
    name_col = _first_col(detail, *DETAIL_NAME_COLUMNS)
    if name_col is None or "execution_time" not in detail:
        meta.skip(path, "no " + "/".join(DETAIL_NAME_COLUMNS) + " or execution_time column")
        return None
    avg_us = _num(detail["execution_time"]) * 1000.0
    if "execution_frequency" in detail:
        freq = _num(detail["execution_frequency"]).fillna(1).clip(lower=1).astype("int64")
    else:
        freq = pd.Series(1, index=detail.index, dtype="int64")
    names = detail[name_col].str.strip()
    reps = freq.to_numpy()
    return pd.DataFrame({
        "name": np.repeat(names.to_numpy(dtype=object), reps),
        "duration_us": np.repeat(avg_us.to_numpy(), reps),
        "core": "AI_CORE",
    })


def _timeline_ops(events: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(AI Core task rows, AI CPU-like rows without args) from the legacy timeline's events."""
    has_full = np.fromiter((isinstance(a, dict) and "fullname" in a for a in events["args"]), bool, len(events))
    core = events[has_full]
    args = core["args"].tolist()
    rows = pd.DataFrame({
        "name": [a.get("fullname") for a in args],
        "type": [a.get("type") for a in args],
        "core": "AI_CORE",
        "start_us": core["start_us"].to_numpy(dtype="float64"),
        "duration_us": core["duration_us"].to_numpy(dtype="float64"),
        "stream_id": pd.to_numeric(core["tid"].astype(str), errors="coerce").to_numpy(dtype="float64"),
    })
    tensors = pd.DataFrame([tensor_strings(a) for a in args], index=rows.index)
    rows = pd.concat([rows, tensors], axis=1)
    other = events[~has_full & events["args"].isna().to_numpy()]
    return rows, other


def _read_timeline(root: Path, dev: int, meta: Meta, known_names: set[str]) -> tuple[pd.DataFrame, pd.DataFrame] | None:
    for name in (f"ascend_timeline_display_{dev}.json", f"timeline_display_{dev}.json"):
        path = root / name
        if not path.is_file():
            continue
        try:
            tables = read_trace(path, meta, device_ops=False)
        except InputError as e:
            meta.skip(path, e.problem)
            continue
        rows, other = _timeline_ops(tables.events)
        names = set(rows["name"].dropna())
        share = len(names & known_names) / len(names) if names else 0.0
        if not len(rows) or (known_names and share < TIMELINE_MATCH_MIN):
            meta.files_read.remove(str(path))
            meta.skip(path, f"timeline op names do not match the profiler CSVs ({share:.0%} of "
                            f"{len(names)} names found): another run, not used")
            continue
        return rows, other
    return None


def _aicpu_ops(df: pd.DataFrame, meta: Meta) -> pd.DataFrame:
    start = _num(df["run_start"]) if "run_start" in df else pd.Series(np.nan, index=df.index)
    end = _num(df["run_end"]) if "run_end" in df else pd.Series(np.nan, index=df.index)
    duration = end - start
    start = pd.Series(us_from_float(meta, start.to_numpy(dtype="float64")), index=df.index)
    name_col = _first_col(df, "kernel_type", "op_type", "node_type_name")
    names = df[name_col].str.strip() if name_col else pd.Series(None, index=df.index, dtype=object)
    return pd.DataFrame({
        "name": names,
        "type": names,
        "core": "AI_CPU",
        "start_us": start,
        "duration_us": duration,
        "aicpu_total_us": _num(df["total_time"]) * 1000.0 if "total_time" in df else np.nan,
        "aicpu_dispatch_us": _num(df["dispatch_time"]) * 1000.0 if "dispatch_time" in df else np.nan,
    })


def _clock_offset(aicpu: pd.DataFrame, timeline_other: pd.DataFrame) -> float | None:
    """Absolute-us offset of the timeline, from AI CPU events present both there and in aicpu_intermediate."""
    if not len(aicpu) or not len(timeline_other):
        return None
    a = aicpu.sort_values("start_us")
    t = timeline_other.sort_values("start_us")
    n = min(len(a), len(t))
    same = a["name"].to_numpy()[:n] == t["name"].astype(str).to_numpy()[:n]
    if not same.any():
        return None
    diffs = a["start_us"].to_numpy()[:n][same] - t["start_us"].to_numpy()[:n][same]
    diffs = diffs[~np.isnan(diffs)]
    return float(np.median(diffs)) if len(diffs) else None


# ---------------------------------------------------------------------------------------------------------
# steps, comm, stats
# ---------------------------------------------------------------------------------------------------------
def read_step_trace(path: Path, meta: Meta) -> pd.DataFrame | None:
    df = _csv(path, meta)
    if df is None or "step_num" not in df:
        return None
    step_text = df["step_num"].str.strip()
    df = df[step_text.str.fullmatch(r"[0-9]+") & (step_text != "0")]
    repeated = df["step_num"].str.strip().duplicated()
    if repeated.any():  # one row per step: a repeated one would count its time twice
        meta.notes.append(f"{path.name}: {int(repeated.sum()):,} rows repeat a step number already read; the first "
                          "row of each step is kept")
        df = df[~repeated.to_numpy()]
    us = lambda c: _num(df[c]) / SYSCNT_PER_US if c in df else pd.Series(np.nan, index=df.index)  # noqa: E731
    out = pd.DataFrame({
        "step": _num(df["step_num"]),
        "computing_us": us("fp_and_bp"),
        "preparing_us": us("iteration_interval"),
        "start_us": _stamp_us(df, "start_point", meta),
        "duration_us": us("total"),
        "fp_bp_us": us("fp_and_bp"),
        "tail_us": us("tail"),
    })
    comm_fields = [c for c in df.columns if _COMM_FIELD.match(c)
                   and f"{c}_start_point" in df and f"{c}_end_point" in df]
    if comm_fields:
        starts = np.column_stack([_stamp_us(df, f"{c}_start_point", meta) for c in comm_fields])
        ends = np.column_stack([_stamp_us(df, f"{c}_end_point", meta) for c in comm_fields])
        out["communication_us"] = _row_unions(starts, ends)
    for col in STEPS_COLUMNS:
        if col not in out:
            out[col] = np.nan
    return out[[*STEPS_COLUMNS, *STEP_EXTRA_COLUMNS]].astype("float64").reset_index(drop=True)


def _row_unions(starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """Per row, the length of the union of its intervals (columns) that are set (start > 0, end >= start):
    vectorized over the rows, a loop over the few interval columns only (a million steps took minutes row by
    row)."""
    ok = (starts > 0) & (ends >= starts)
    s = np.where(ok, starts, np.inf)
    order = np.argsort(s, axis=1, kind="stable")
    s = np.take_along_axis(s, order, axis=1)
    e = np.take_along_axis(np.where(ok, ends, -np.inf), order, axis=1)
    total = np.zeros(len(s))
    reach = np.full(len(s), -np.inf)
    for j in range(s.shape[1]):
        valid = np.isfinite(s[:, j])
        gain = e[:, j] - np.maximum(s[:, j], reach)
        total += np.where(valid & (gain > 0), gain, 0.0)
        reach = np.where(valid, np.maximum(reach, e[:, j]), reach)
    return total


def _stamp_us(df: pd.DataFrame, col: str, meta: Meta) -> np.ndarray:
    """A step-trace time stamp column (integer 10 ns cycles) -> exact offsets from the rank's time origin."""
    if col not in df:
        return np.full(len(df), np.nan)
    cycles = _num(df[col]).to_numpy(dtype="float64")
    ns = np.where(np.isfinite(cycles) & (cycles > 0), cycles, np.nan) * (1000.0 / SYSCNT_PER_US)
    return us_from_ns(meta, ns)


def read_hccl_raw(path: Path, meta: Meta) -> pd.DataFrame | None:
    df = _csv(path, meta)
    if df is None or "communication_operator_cost" not in df:
        return None
    rows: list[dict[str, Any]] = []
    for step_text, ops_text in zip(df["step_num"], df["communication_operator_cost"], strict=True):
        if not is_ascii_digits(str(step_text).strip()):
            continue  # the last row ('-') is MindSpore's average over steps
        ops = _json(ops_text)
        if not isinstance(ops, dict):
            continue
        for op, values in ops.items():
            if not isinstance(values, list) or len(values) < 3:
                continue
            cost, wait = _f(values[1]), _f(values[2])
            base = {"step": float(step_text), "op": str(op), "group": None,
                    "elapse_us": (cost + wait) * 1000.0, "wait_us": wait * 1000.0}
            per_transport: dict[str, list[float]] = {}
            links = values[3] if len(values) > 3 and isinstance(values[3], dict) else {}
            for link in links.values():
                if not isinstance(link, dict):
                    continue
                for transport, v in link.items():
                    if isinstance(v, list) and len(v) >= 2:
                        acc = per_transport.setdefault(str(transport), [0.0, 0.0])
                        acc[0] += _f(v[0])
                        acc[1] += _f(v[1])
            if not per_transport:
                rows.append({**base, "transport": None})
                continue
            for transport, (time_ms, size_kb) in per_transport.items():
                rows.append({**base, "transport": transport, "transit_us": time_ms * 1000.0,
                             "size_mb": size_kb / 1000.0,
                             "bandwidth_gbps": (size_kb / time_ms / 1000.0) if time_ms > 0 else np.nan})
    out = pd.DataFrame(rows)
    for col in COMM_COLUMNS:
        if col not in out:
            out[col] = np.nan
    return out[COMM_COLUMNS] if len(out) else empty_frame(COMM_COLUMNS)


def _f(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def read_type_stats(path: Path, meta: Meta) -> pd.DataFrame | None:
    df = _csv(path, meta)
    if df is None:
        return None
    type_col = _first_col(df, "op_type", "kernel_type")
    time_col = _first_col(df, "total_time", "execution_time")
    if type_col is None or time_col is None:
        meta.skip(path, "no op_type/kernel_type and total_time/execution_time columns")
        return None
    out = pd.DataFrame({
        "type": df[type_col].str.strip(),
        "core": "AI_CORE",
        "count": _num(df["execution_frequency"]) if "execution_frequency" in df else np.nan,
        "total_us": _num(df[time_col]) * 1000.0,
        "ratio": _num(df["percent"]) / 100.0 if "percent" in df else np.nan,
    })
    out["avg_us"] = out["total_us"] / out["count"]
    for col in OP_STATS_COLUMNS:
        if col not in out:
            out[col] = np.nan
    return out[OP_STATS_COLUMNS]


def _cluster_analyse(root: Path, dev: int, meta: Meta) -> pd.DataFrame | None:
    for path in sorted(root.glob(f"ascend_cluster_analyse_*_{dev}.csv")):
        df = _csv(path, meta)
        if df is None:
            continue
        out = pd.DataFrame({"step": np.arange(1, len(df) + 1, dtype="float64")})
        for col in df.columns:
            out[re.sub(r"_time$", "", col) + "_us"] = (_num(df[col]) * 1000.0).to_numpy()
        return out
    return None


# ---------------------------------------------------------------------------------------------------------
# the reader
# ---------------------------------------------------------------------------------------------------------
def read(root: Path, meta: Meta) -> Profile:
    """Reader-registry entry for layout ``mindspore-legacy``."""
    root = Path(root)
    if root.is_file():
        root = root.parent
    dev = _pick_device(root, meta)
    meta.framework = meta.framework or "mindspore 1.x"
    if meta.rank is None:
        meta.rank = dev

    framework = read_framework(root / f"framework_raw_{dev}.csv", meta)
    detail_path = root / f"aicore_intermediate_{dev}_detail.csv"
    detail = _csv(detail_path, meta)
    detail_ops = _detail_ops(detail, detail_path, meta) if detail is not None else None

    known = set(detail_ops["name"]) if detail_ops is not None else set()
    if not known and framework is not None:
        known = set(framework.index)
    aicpu_df = _csv(root / f"aicpu_intermediate_{dev}.csv", meta)
    aicpu = _aicpu_ops(aicpu_df, meta) if aicpu_df is not None else pd.DataFrame()

    timeline = _read_timeline(root, dev, meta, known)
    if timeline is not None:
        core_ops, timeline_other = timeline
        meta.source_of("ops", "MindSpore timeline (device tasks)")
        offset = _clock_offset(aicpu, timeline_other)
        if offset is not None:
            core_ops["start_us"] = core_ops["start_us"] + offset
        else:
            meta.notes.append("timeline start times are relative to the first event (no AI CPU events to align)")
    elif detail_ops is not None:
        core_ops = detail_ops
        meta.source_of("ops", f"aicore_intermediate_{dev}_detail.csv (averages)")
        meta.notes.append("AI Core ops from aicore_intermediate averages (no timeline): each op repeated "
                          "execution_frequency times with its average duration, no start times")
    else:
        core_ops = pd.DataFrame()

    if framework is not None and len(core_ops):
        core_ops = _join_framework(core_ops, framework)
    elif len(core_ops) and "type" not in core_ops:
        core_ops["type"] = core_ops["name"].map(_type_from_name)

    steps = read_step_trace(root / f"step_trace_raw_{dev}_detail_time.csv", meta)
    parts = [p for p in (core_ops, aicpu) if len(p)]
    ops = pd.concat(parts, ignore_index=True) if parts else pd.DataFrame()
    if len(ops) and "start_us" in ops and ops["start_us"].notna().any():
        ops = ops.sort_values("start_us", kind="stable", na_position="last", ignore_index=True)
        if steps is not None and len(steps):
            ops["step"] = _assign_steps(ops["start_us"].to_numpy(dtype="float64"), steps)
    ops = finalize_ops(ops)

    profile = Profile(ops=ops, meta=meta)
    if steps is not None:
        profile.steps = steps
        meta.source_of("steps", f"step_trace_raw_{dev}_detail_time.csv")
    stats = read_type_stats(root / f"aicore_intermediate_{dev}_type.csv", meta)
    if stats is not None:
        profile.op_stats = stats
        meta.source_of("op_stats", f"aicore_intermediate_{dev}_type.csv")
    comm = read_hccl_raw(root / f"hccl_raw_{dev}.csv", meta)
    if comm is not None:
        profile.comm = comm
        meta.source_of("comm", f"hccl_raw_{dev}.csv")
    _extras(root, dev, meta, profile)
    for txt in sorted(root.glob("output_*.txt")):
        meta.skip(txt, "MindSpore intermediate text dump, not read (the CSV/JSON outputs carry the data)")
    return profile


def _join_framework(ops: pd.DataFrame, framework: pd.DataFrame) -> pd.DataFrame:
    """Fill type/block dim/ids/tensors from framework_raw by full op name (the op row's own values win)."""
    fw = framework.reindex(ops["name"].to_numpy())
    fw.index = ops.index
    for col in fw.columns:
        if col in ops:
            ops[col] = ops[col].where(ops[col].notna() & (ops[col].astype(str) != ""), fw[col])
        else:
            ops[col] = fw[col]
    missing_type = ops["type"].isna()
    if missing_type.any():
        ops.loc[missing_type, "type"] = ops.loc[missing_type, "name"].map(_type_from_name)
    return ops


def _assign_steps(start_us: np.ndarray, steps: pd.DataFrame) -> np.ndarray:
    out = np.full(len(start_us), np.nan)
    s = steps.dropna(subset=["start_us", "duration_us"]).sort_values("start_us")
    if not len(s):
        return out
    starts = s["start_us"].to_numpy()
    ends = starts + s["duration_us"].to_numpy()
    idx = np.searchsorted(starts, start_us, side="right") - 1
    ok = (idx >= 0) & ~np.isnan(start_us)
    ok[ok] = start_us[ok] <= ends[idx[ok]]
    out[ok] = s["step"].to_numpy()[idx[ok]]
    return out


def _extras(root: Path, dev: int, meta: Meta, profile: Profile) -> None:
    pipeline = _csv(root / f"minddata_pipeline_raw_{dev}.csv", meta)
    if pipeline is not None:
        profile.extras["minddata_pipeline"] = pipeline
    points = root / "step_trace_point_info.json"
    if points.is_file():
        try:
            profile.extras["step_trace_points"] = safeload.load_json(points)
            meta.read(points)
        except InputError as e:
            meta.skip(points, e.problem)
    cluster = _cluster_analyse(root, dev, meta)
    if cluster is not None:
        profile.extras["cluster_analyse"] = cluster



# ---------------------------------------------------------------------------------------------------------
# the layout this module reads (advisor.ingest.registry)
# ---------------------------------------------------------------------------------------------------------
_MARKERS = ("aicore_intermediate_", "framework_raw_", "step_trace_raw_", "hccl_raw_", "aicpu_intermediate_")
_MARKER_FILE = re.compile(r"^(?:aicore_intermediate|framework_raw|step_trace_raw|hccl_raw|aicpu_intermediate)_(\d+)")


def legacy_device_ids(d: Path) -> list[int]:
    """Device ids of a MindSpore 1.x profiler dir, from its file names (``hccl_raw_2.csv`` -> 2)."""
    return sorted({int(m.group(1)) for p in d.glob("*.csv") if (m := _MARKER_FILE.match(p.name))})


def _profiler_dir(d: Path) -> list[RankSource]:
    """A MindSpore 1.x ``profiler/`` directory; one flat dir can hold several devices' files (``hccl_raw_0.csv``,
    ``hccl_raw_2.csv``): one rank each."""
    if not any(any(d.glob(f"{marker}*.csv")) for marker in _MARKERS):
        return []
    ids = legacy_device_ids(d)
    if len(ids) > 1:
        return [RankSource(d, "mindspore-legacy", i) for i in ids]
    return [RankSource(d, "mindspore-legacy", None)]


LAYOUTS = (
    Layout("mindspore-legacy", "MindSpore 1.x", "MindSpore 1.x: a flat profiler/ directory (aicore_intermediate_*, "
           "framework_raw_*, ...)", read, in_dir=(Match(70, _profiler_dir),), framework="mindspore"),
)


__all__ = ["device_ids", "read", "read_framework", "read_hccl_raw", "read_step_trace", "read_type_stats",
           "tensor_strings"]
