"""msprof text output: CANN <=6 ``device_N`` dirs, CANN >=7 ``mindstudio_profiler_output``, lone op CSV files.

Layouts (FORMATS.md section 0):

* ``msprof-cann6``: ``root`` is ``PROF_*/device_N`` with ``summary/<kind>_<dev>_<model>[_<iter>].csv``,
  ``timeline/<kind>_<dev>_<model>_<iter>.json`` and ``info.json.N``. A device dir with only ``timeline/`` (the
  MindSpore/mindinsight sample) gets its ops from ``task_time_*.json`` (else ``msprof_*.json``), never both.
* ``msprof-cann7``: ``root`` is ``PROF_*`` with ``mindstudio_profiler_output/<kind>_<YYYYMMDDhhmmss>.csv``
  (only the newest export is read when a directory holds several), or a bare directory of such CSVs.
* ``op-summary-csv``: ``root`` is one op_summary / kernel_details CSV file of any header variant, including the
  derived Ascend310 per-op subset (no name/timing columns) of Ascend/workload_analysis.

The summary tables msprof shares with the framework exports (op_summary, op_statistic, api_statistic, step_trace_time,
l2_cache) are read by :mod:`advisor.ingest.summary_tables`; this module adds msprof's own (task_time, step_trace,
msprof_tx, info.json) and its directory layouts.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

import advisor.ingest.columns as C
import advisor.ingest.timebase as timebase
from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.common.util import is_ascii_digits
from advisor.ingest.csvread import read_table
from advisor.ingest.event_summary import merge_summaries
from advisor.ingest.layout import Layout, Match, RankSource
from advisor.ingest.normalize import clean_text, finalize_ops
from advisor.ingest.summary_tables import (
    complete,
    concat,
    find_kind,
    optional_table,
    read_api_stats,
    read_l2_cache,
    read_op_stats,
    read_ops_files,
    read_step_trace_time,
)
from advisor.ingest.timebase import us_from_float
from advisor.ingest.timeline import read_trace
from advisor.model import (
    API_COLUMNS,
    COMPUTE_CORES,
    EVENTS_COLUMNS,
    OP_STATS_COLUMNS,
    STEPS_COLUMNS,
    TX_COLUMNS,
    Hardware,
    Meta,
    Profile,
    mindspore_op_type,
)

_DEVICE_DIR = re.compile(r"^device_(\d+)$")


# ---------------------------------------------------------------------------------------------------------
# entry point
# ---------------------------------------------------------------------------------------------------------
def read(root: Path, meta: Meta) -> Profile:
    """Read an msprof layout (see module doc) into a Profile."""
    root = Path(root)
    if root.is_file():
        ops = read_ops_files([root], meta)
        return Profile(ops=ops, meta=meta)
    out_dir = root / "mindstudio_profiler_output"
    if out_dir.is_dir():
        read_device_info(root, meta)
        skip_not_read(root, meta)
        return read_output_dir(out_dir, meta)
    if (root / "summary").is_dir() or (root / "timeline").is_dir():
        return _read_cann6(root, meta)
    return read_output_dir(root, meta)


# ---------------------------------------------------------------------------------------------------------
# msprof's own tables
# ---------------------------------------------------------------------------------------------------------
def ops_from_task_time(task_time: pd.DataFrame) -> pd.DataFrame:
    """Ops from msprof task_time rows when no op_summary exists: named kernels only (not PROFILING_ENABLE...)."""
    named = task_time[task_time["name"].notna()]
    keep = [c for c in ("name", "core", "stream_id", "task_id", "start_us", "duration_us", "device_id")
            if c in named.columns]
    return finalize_ops(named[keep].reset_index(drop=True))


def read_tx(path: Path, meta: Meta) -> pd.DataFrame:
    """msprof_tx (msproftx ranges and marks) -> TX_COLUMNS (plus ``tid``, ``pid``, ``domain``); time stamps are
    offsets from the rank's origin like the ops' (CANN 6.x writes integer ns); marks last 0 us."""
    t = read_table(path, C.TX_ALIASES, text=C.TX_TEXT, required=["name"], meta=meta)
    meta.notes.extend(t.notes)
    df = t.frame
    if "start_us" in df.columns:
        start = df["start_us"].to_numpy(dtype="float64")
        end = df["stop_us"].to_numpy(dtype="float64") if "stop_us" in df.columns else start
    elif "start_ns" in df.columns:
        def ns(col: str) -> np.ndarray:
            cells = df[col].astype("string").str.strip().fillna("")
            ints = [int(c) if is_ascii_digits(c.removeprefix("-")) else timebase.MISSING_NS for c in cells]
            return timebase.us_from_ns(meta, np.asarray(ints, dtype=np.int64))

        start = ns("start_ns")
        end = ns("stop_ns") if "stop_ns" in df.columns else start
    else:
        raise InputError(path, "no Start_time(us)/Start_time(ns) column")
    out = pd.DataFrame({
        "name": clean_text(df["name"]).astype(object),
        "start_us": start,
        "duration_us": np.fmax(end - start, 0.0),
        "category": clean_text(df["category"]).astype(object) if "category" in df.columns else None,
    })
    for col in ("tid", "pid", "domain"):
        if col in df.columns:
            out[col] = df[col].to_numpy()
    return out


def read_task_time(path: Path, meta: Meta) -> pd.DataFrame:
    """msprof task_time CSV -> name, core, stream_id, task_id, duration_us, start_us, stop_us, device_id."""
    t = read_table(path, C.TASK_TIME_ALIASES, text=C.TASK_TIME_TEXT, required=["core", "duration_us"], meta=meta)
    meta.notes.extend(t.notes)
    df = t.frame
    for col in ("name", "core"):
        if col in df.columns:
            df[col] = clean_text(df[col])
    return complete(df, list(C.TASK_TIME_ALIASES))


def read_msprof_step_trace(path: Path, meta: Meta) -> pd.DataFrame:
    """msprof step_trace CSV (graph mode) -> STEPS_COLUMNS plus iteration/FP/BP columns, with the step's bounds in
    the time model's terms: it ends at ``Iteration End`` and starts at the previous iteration's end, ``FP Start -
    Data Aug Bound`` (the data-augmentation gap is its input pipeline, ``preparing_us``), else ``Iteration Time``
    before its end; ``fp_bp_us`` and ``refresh_us`` are its phases."""
    t = read_table(path, C.MSPROF_STEP_TRACE_ALIASES, text=(), required=["step", "iteration_us"], meta=meta)
    meta.notes.extend(t.notes)
    df = t.frame
    end = _column(df, "iteration_end_us")
    aug = _column(df, "data_aug_bound_us")
    start = np.where(np.isfinite(_column(df, "fp_start_us")) & np.isfinite(aug), _column(df, "fp_start_us") - aug,
                     end - _column(df, "iteration_us"))
    if np.isfinite(end).any():
        df["start_us"] = us_from_float(meta, start)
        df["duration_us"] = end - start
    df["preparing_us"] = aug
    df["computing_us"] = _column(df, "fp_bp_us")
    return complete(df, STEPS_COLUMNS)


def _column(df: pd.DataFrame, name: str) -> np.ndarray:
    return pd.to_numeric(df[name], errors="coerce").to_numpy(dtype="float64") if name in df else \
        np.full(len(df), np.nan)


# ---------------------------------------------------------------------------------------------------------
# device info (info.json.N)
# ---------------------------------------------------------------------------------------------------------
MAX_CLOCK_MHZ = 10_000.0
"""An AI Core clock above this is not a clock (info.json writes MHz; the fastest chip known runs at 1.85 GHz)."""


@dataclass
class DeviceInfo:
    """One ``DeviceInfo`` entry of ``info.json.N`` and the file's own fields that identify the run."""

    ai_core_num: int | None = None
    aiv_num: int | None = None
    aic_frequency: float | None = None
    extra: dict[str, object] = field(default_factory=dict)
    """``rank_id`` (None when msprof wrote -1: RANK_ID unset), ``hostname``, ``cann_version``."""


def parse_device_info(path: Path, device: int | None = None) -> DeviceInfo:
    """The ``DeviceInfo`` entry of an ``info.json.N`` file (the one for ``device`` when several).

    As CANN 8 msprof writes it (hicann/runtime ``info_json.cpp``): ``DeviceInfo[].id`` is the host's id of the
    device, which need not be the ``device_N`` of the directory (a container sees renumbered devices), so with one
    entry that entry is taken; ``aic_frequency`` is a string, integer or float formatted ("1800", "1800.000000");
    ``rank_id`` is -1 when RANK_ID was not set; ``cannVersion`` is the runtime's version (8.x and later)."""
    data = safeload.load_json(path)
    entries = data.get("DeviceInfo") if isinstance(data, dict) else None
    objects = [e for e in entries if isinstance(e, dict)] if isinstance(entries, list) else []
    if not objects:
        raise InputError(path, "no DeviceInfo entry (expected a list of objects)")
    entry = objects[0] if len(objects) == 1 else next((e for e in objects if _int(e.get("id")) == device), objects[0])
    rank = _int(data.get("rank_id"))
    host = data.get("hostname")
    cann = data.get("cannVersion")
    return DeviceInfo(core_count(entry.get("ai_core_num")), core_count(entry.get("aiv_num")), mhz(entry.get("aic_frequency")),
                      {"rank_id": rank if rank is not None and 0 <= rank < 4294967295 else None,
                       "hostname": host if isinstance(host, str) and host else None,
                       "cann_version": cann.strip() if isinstance(cann, str) and cann.strip() else None,
                       "pid_name": data.get("pid_name")})


def mhz(value: object) -> float | None:
    """A clock in MHz from ``1800``, ``"1800"``, ``"1800.000000"`` or ``1800.0``; None when absent or not a clock."""
    try:
        f = float(str(value).strip())
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) and 0 < f <= MAX_CLOCK_MHZ else None


def core_count(value: object) -> int | None:
    """A core count (``20``, ``"20"``, ``20.0``); None when absent, negative or not a whole number."""
    try:
        f = float(str(value).strip())
    except (TypeError, ValueError, OverflowError):
        return None
    return int(f) if math.isfinite(f) and f >= 0 and f == int(f) else None


def info_json_files(root: Path) -> list[Path]:
    """``info.json.N`` files of a run: in ``root`` (a ``device_N`` dir), its ``device_*`` dirs, or the ``PROF_*``
    of a torch_npu / MindSpore rank; ``.done`` markers excluded."""
    for pattern in ("info.json.*", "device_*/info.json.*", "PROF_*/device_*/info.json.*"):
        found = [p for p in sorted(root.glob(pattern)) if not p.name.endswith(".done")]
        if found:
            return found
    return []


def read_device_info(root: Path, meta: Meta) -> None:
    """Core counts, clock and chip from ``info.json.N`` in ``root`` or its ``device_*`` / ``PROF_*/device_*``
    dirs (``meta.hardware``, ``meta.ai_core_num`` / ``aiv_num``, ``meta.chip``, ``meta.cann_version``)."""
    from advisor.platform import builtin_chip_for

    for path in info_json_files(root)[:1]:
        m = _DEVICE_DIR.match(path.parent.name)
        device = int(m.group(1)) if m else _int(path.suffix.lstrip("."))
        try:
            info = parse_device_info(path, device)
        except InputError as e:
            meta.skip(path, e.problem)
            continue
        meta.read(path)
        app = info.extra.get("pid_name")
        meta.application = meta.application or (str(app).strip() if isinstance(app, str) and app.strip() else None)
        meta.ai_core_num = meta.ai_core_num or info.ai_core_num
        meta.aiv_num = meta.aiv_num if meta.aiv_num is not None else info.aiv_num
        if info.extra.get("cann_version") and not meta.cann_version:
            meta.cann_version = str(info.extra["cann_version"])
        if not info.ai_core_num:
            continue
        hw = Hardware(info.ai_core_num, info.aiv_num, info.aic_frequency, path.name)
        meta.hardware = meta.hardware or hw
        match = builtin_chip_for(hw)
        if match is not None and match.counts_match and (not meta.chip or meta.chip.endswith("-class")):
            meta.chip = match.soc  # the analysis says how (advisor.platform.platform_for_run), with the user's rules


NOT_READ = {
    "sample.json": "msprof's collection settings (application, PMU event sets, switches): the application is read "
                   "from info.json, what was collected from the summaries' columns; not read",
    "prof_rule": "msprof's own expert-rule verdicts (prof_rule): advisor applies its own rules; not read",
}
"""msprof files a PROF directory holds that carry nothing a rule needs, with the reason they are not read."""


def skip_not_read(root: Path, meta: Meta) -> None:
    """List ``sample.json`` (in ``root`` or its ``device_*`` dirs) and ``prof_rule_*.json`` (next to the summaries)
    as skipped, with the reason (:data:`NOT_READ`)."""
    for path in sorted({*root.glob("sample.json"), *root.glob("device_*/sample.json")}):
        meta.skip(path, NOT_READ["sample.json"])
    for d in (root / "mindstudio_profiler_output", root / "summary", root):
        for path in sorted(d.glob("prof_rule_*.json")) if d.is_dir() else []:
            meta.skip(path, NOT_READ["prof_rule"])


def _int(value: object) -> int | None:
    try:
        return int(str(value).strip())
    except (TypeError, ValueError, OverflowError):
        return None


# ---------------------------------------------------------------------------------------------------------
# timelines (parsed by advisor.ingest.timeline)
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Traces:
    """Trace tables accumulated over several JSON files."""

    ops: list[pd.DataFrame] = field(default_factory=list)
    events: list[pd.DataFrame] = field(default_factory=list)
    counters: list[pd.DataFrame] = field(default_factory=list)
    steps: list[pd.DataFrame] = field(default_factory=list)
    event_summaries: list[pd.DataFrame] = field(default_factory=list)

    def add(self, paths: list[Path], meta: Meta, *, device_ops: bool, required: bool = False,
            events: bool = True, steps: bool = True) -> None:
        """Parse ``paths``; an optional trace that fails is skipped with its reason, a required one raises -- and so
        does a truncated one (a copy cut short: whatever else it has, the run's timeline is not all there, and a
        report from half a trace would look complete). ``events``/``steps`` False drop those tables (another file
        of the directory is their source)."""
        for path in paths:
            try:
                t = read_trace(path, meta, device_ops=device_ops, select=meta.events_read if events else None)
            except InputError as e:
                if required or e.problem.startswith("truncated JSON"):
                    raise
                meta.skip(path, e.problem)
                continue
            if str(path) not in meta.files_read:
                meta.read(path)
            if device_ops and t.ops is not None:
                self.ops.append(t.ops)
            if events:
                self.events.append(t.events)
                self.counters.append(t.counters)
                self.event_summaries.append(t.event_summary)
            if steps and t.steps is not None and len(t.steps):
                self.steps.append(t.steps)

    def apply(self, profile: Profile) -> None:
        """Put the collected events/counters (and steps when the profile has none) into ``profile``."""
        events = [e for e in self.events if e is not None and len(e)]
        if events:
            profile.events = concat(events, EVENTS_COLUMNS)
        if any(len(s) for s in self.event_summaries):
            profile.event_summary = merge_summaries([profile.event_summary, *self.event_summaries])
        counters = [c for c in self.counters if c is not None and len(c)]
        if counters:
            profile.extras["counters"] = pd.concat(counters, ignore_index=True)
        if not len(profile.steps) and self.steps:
            profile.steps = concat(self.steps, STEPS_COLUMNS)


# ---------------------------------------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------------------------------------
def read_output_dir(out: Path, meta: Meta) -> Profile:
    """A ``mindstudio_profiler_output`` (or bare) directory of ``<kind>_<ts>.csv`` summaries + ``msprof_*.json``."""
    ops_files = find_kind(out, "op_summary", meta) or find_kind(out, "kernel_details", meta)
    task_time = concat([optional_table(p, meta, read_task_time) for p in find_kind(out, "task_time", meta)],
                       list(C.TASK_TIME_ALIASES))
    msprof_json = find_kind(out, "msprof", meta, ext="json", exclude=("msprof_tx",))
    traces = Traces()
    if ops_files:
        ops = read_ops_files(ops_files, meta)
        meta.source_of("ops", ops_files[-1])
    elif len(task_time):
        ops = ops_from_task_time(task_time)
        meta.source_of("ops", "task_time CSV")
        meta.notes.append("no op_summary: ops taken from task_time (no shapes or PMU metrics)")
    elif msprof_json:
        traces.add(msprof_json, meta, device_ops=True, required=True)
        ops = _trace_ops(traces, meta, "msprof_*.json")
        meta.source_of("ops", msprof_json[-1])
    else:
        ops = finalize_ops(pd.DataFrame({"name": pd.Series(dtype="str")}))
    profile = Profile(ops=ops, meta=meta)
    if len(task_time):
        profile.extras["task_time"] = task_time
    _read_summaries(out, meta, profile)
    if msprof_json and not traces.events:
        traces.add(msprof_json, meta, device_ops=False)
    if msprof_json:
        meta.source_of("events", msprof_json[-1])
    traces.apply(profile)
    return profile


def _read_summaries(directory: Path, meta: Meta, profile: Profile) -> None:
    """op_statistic, api_statistic (else acl_statistic), step_trace(_time) from ``directory`` when present."""
    stat_files = find_kind(directory, "op_statistic", meta)
    profile.op_stats = concat([optional_table(p, meta, read_op_stats) for p in stat_files], OP_STATS_COLUMNS)
    if stat_files:
        meta.source_of("op_stats", stat_files[-1])
    api_files = find_kind(directory, "api_statistic", meta) or find_kind(directory, "acl_statistic", meta)
    profile.api = concat([optional_table(p, meta, read_api_stats) for p in api_files], API_COLUMNS)
    split_files = find_kind(directory, "step_trace_time", meta)
    trace_files = find_kind(directory, "step_trace", meta, exclude=("step_trace_time",))
    steps = [optional_table(p, meta, read_step_trace_time) for p in split_files]
    steps += [optional_table(p, meta, read_msprof_step_trace) for p in trace_files]
    profile.steps = concat(steps, STEPS_COLUMNS)
    if len(profile.steps):
        meta.source_of("steps", (split_files + trace_files)[-1])
    tx_files = find_kind(directory, "msprof_tx", meta)
    tx = [optional_table(p, meta, read_tx) for p in tx_files]
    if any(t is not None and len(t) for t in tx):
        profile.tx = concat(tx, TX_COLUMNS)
        meta.source_of("tx", tx_files[-1])
    l2 = [optional_table(p, meta, read_l2_cache) for p in find_kind(directory, "l2_cache", meta)]
    if any(t is not None and len(t) for t in l2):
        profile.extras["l2_cache"] = pd.concat([t for t in l2 if t is not None], ignore_index=True)


def _read_cann6(device_dir: Path, meta: Meta) -> Profile:
    """``PROF_*/device_N`` of CANN <=6: summary CSVs when present, else ops from the timeline JSON."""
    read_device_info(device_dir, meta)
    skip_not_read(device_dir, meta)
    summary, timeline = device_dir / "summary", device_dir / "timeline"
    ops_files = find_kind(summary, "op_summary", meta)
    task_csv = concat([optional_table(p, meta, read_task_time) for p in find_kind(summary, "task_time", meta)],
                      list(C.TASK_TIME_ALIASES))
    msprof_json = find_kind(timeline, "msprof", meta, ext="json", exclude=("msprof_tx",))
    task_json = find_kind(timeline, "task_time", meta, ext="json")
    hccl_json = find_kind(timeline, "hccl", meta, ext="json")
    step_json = find_kind(timeline, "step_trace", meta, ext="json")
    traces = Traces()
    other_steps = not step_json  # step_trace_*.json is the one source of steps when present

    if ops_files:
        ops = read_ops_files(ops_files, meta)
        meta.source_of("ops", ops_files[-1])
        for p in task_json:
            meta.skip(p, "device tasks already read from summary/op_summary")
    elif task_json:
        traces.add(task_json, meta, device_ops=True, required=True, events=False, steps=other_steps)
        ops = _trace_ops(traces, meta, "task_time_*.json")
        meta.source_of("ops", task_json[-1])
    elif msprof_json:
        traces.add(msprof_json, meta, device_ops=True, required=True, steps=other_steps)
        ops = _trace_ops(traces, meta, "msprof_*.json")
        meta.source_of("ops", msprof_json[-1])
    elif len(task_csv):
        meta.source_of("ops", "task_time CSV")
        ops = ops_from_task_time(task_csv)
        meta.notes.append("no op_summary: ops taken from task_time (no shapes or PMU metrics)")
    else:
        ops = finalize_ops(pd.DataFrame({"name": pd.Series(dtype="str")}))

    profile = Profile(ops=ops, meta=meta)
    if len(task_csv):
        profile.extras["task_time"] = task_csv
    _read_summaries(summary, meta, profile)

    if msprof_json:
        if not any(str(p) in meta.files_read for p in msprof_json):  # not already read for the ops
            traces.add(msprof_json, meta, device_ops=False, steps=other_steps)
        meta.source_of("events", msprof_json[-1])
        for p in hccl_json:
            meta.skip(p, "HCCL events are also in msprof_*.json; not read twice")
    elif hccl_json:
        traces.add(hccl_json, meta, device_ops=False, steps=other_steps)
        meta.source_of("events", hccl_json[-1])
    if not len(profile.steps):
        traces.add(step_json, meta, device_ops=False, events=False)
        if step_json:
            meta.source_of("steps", step_json[-1])
    else:
        for p in step_json:
            meta.skip(p, "steps already read from the summary step_trace CSV")
    traces.apply(profile)
    return profile


def _trace_ops(traces: Traces, meta: Meta, source: str) -> pd.DataFrame:
    frames = [o for o in traces.ops if o is not None and len(o)]
    meta.notes.append(f"no summary CSVs: device ops taken from {source} (no shapes or PMU metrics)")
    if not frames:
        return finalize_ops(pd.DataFrame({"name": pd.Series(dtype="str")}))
    ops = frames[0] if len(frames) == 1 else finalize_ops(pd.concat(frames, ignore_index=True))
    return types_from_full_names(ops, meta, source)


def types_from_full_names(ops: pd.DataFrame, meta: Meta, source: str) -> pd.DataFrame:
    """Op types for the compute tasks of a timeline that records none (MindSpore's CANN <= 6 task_time JSON) from
    the framework's full op names; tasks whose names do not follow the convention keep no type."""
    if not len(ops) or "type" not in ops.columns:
        return ops
    missing = ops["type"].isna().to_numpy() & ops["core"].isin(COMPUTE_CORES).to_numpy()
    if not missing.any():
        return ops
    derived = ops["name"].map(mindspore_op_type).astype("string")
    fill = missing & derived.notna().to_numpy()
    if not fill.any():
        return ops
    types = ops["type"].astype("string")
    types[fill] = derived[fill]
    ops = ops.assign(type=types.astype("category"))
    meta.notes.append(f"{source}: op types taken from the framework's full op names (<scope>/<Type>-op<N>) for "
                      f"{int(fill.sum())} task(s)")
    return ops


# ---------------------------------------------------------------------------------------------------------
# the layouts this module reads (advisor.ingest.registry)
# ---------------------------------------------------------------------------------------------------------
_SUMMARY_KINDS = ("op_summary", "kernel_details", "op_statistic")


def _cann7_export(d: Path) -> list[RankSource]:
    """A CANN >= 7 ``PROF_*``: its ``mindstudio_profiler_output/``."""
    return [RankSource(d, "msprof-cann7")] if (d / "mindstudio_profiler_output").is_dir() else []


def _loose_summaries(d: Path) -> list[RankSource]:
    """A bare directory of msprof summary CSVs (tried last: the more specific layouts hold such CSVs too)."""
    return [RankSource(d, "msprof-cann7")] if any(any(d.glob(f"{k}*.csv")) for k in _SUMMARY_KINDS) else []


def _cann6_devices(d: Path) -> list[RankSource]:
    """A CANN <= 6 ``PROF_*``: one rank per ``device_N/`` holding ``summary/`` or ``timeline/`` (or ``d`` is one)."""

    def has_output(c: Path) -> bool:
        return (c / "summary").is_dir() or (c / "timeline").is_dir()

    devices = sorted(((int(m.group(1)), c) for c in d.iterdir() if c.is_dir() and (m := _DEVICE_DIR.match(c.name))),
                     key=lambda nc: nc[0])
    found = [RankSource(c, "msprof-cann6", n) for n, c in devices if has_output(c)]
    if found:
        return found
    if (m := _DEVICE_DIR.match(d.name)) and has_output(d):
        return [RankSource(d, "msprof-cann6", int(m.group(1)))]
    return []


def _op_csv_file(p: Path) -> list[RankSource]:
    return [RankSource(p, "op-summary-csv")] if p.name.lower().endswith(".csv") else []


LAYOUTS = (
    Layout("msprof-cann6", "msprof", "msprof, CANN <= 6: PROF_*/device_N/{summary,timeline}", read,
           in_dir=(Match(50, _cann6_devices),), runs=True),
    Layout("msprof-cann7", "msprof", "msprof, CANN >= 7: PROF_*/mindstudio_profiler_output (or a bare directory of "
           "its summary CSVs)", read, in_dir=(Match(40, _cann7_export), Match(90, _loose_summaries)), runs=True),
    Layout("op-summary-csv", "msprof", "one op_summary / kernel_details CSV file", read,
           as_file=(Match(90, _op_csv_file),)),
)
