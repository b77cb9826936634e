"""torch_npu and MindSpore 2.x text exports: ``<worker>_ascend_pt|_ascend_ms/ASCEND_PROFILER_OUTPUT``.

=============================  ===============================================================================
file                           becomes
=============================  ===============================================================================
kernel_details.csv             ``ops`` (main table: a broken one raises InputError)
op_statistic.csv               ``op_stats``
api_statistic.csv              ``api``
step_trace_time.csv            ``steps``
communication.json             ``comm``: one row per step x op x transport ("Total Op Info" aggregates skipped)
communication_matrix.json      ``extras["communication_matrix"]``: one row per step x op x link
memory_record.csv              ``memory``
operator_details.csv           ``extras["operator_details"]`` (host/device times and call stacks per torch op)
l2_cache.csv                   ``extras["l2_cache"]``
static_op_mem.csv              ``extras["static_op_mem"]``
operator_memory.csv            ``extras["operator_memory"]``
npu_module_mem.csv             ``extras["npu_module_mem"]``
trace_view.json                ``events`` / ``extras["counters"]`` (and ``ops`` when there is no kernel_details)
profiler_info_<rank>.json      ``meta``: torch_npu / CANN version, rank, profiler config
profiler_metadata.json         ``meta.environment`` (ENV_VARIABLES), the rest in ``extras["profiler_metadata"]``
PROF_*/device_*/info.json.N    ``meta.chip`` / ``meta.ai_core_num``
=============================  ===============================================================================

Every optional file is optional: absent is fine, broken is recorded in ``meta.files_skipped`` with its reason.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import advisor.ingest.columns as C
from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.ingest.layout import Find, Layout, Match, RankSource
from advisor.ingest.msprof import Traces, read_device_info
from advisor.ingest.normalize import finalize_ops
from advisor.ingest.summary_tables import (
    optional_table,
    read_api_stats,
    read_l2_cache,
    read_op_stats,
    read_ops_files,
    read_step_trace_time,
    text_table,
)
from advisor.ingest.timebase import us_from_float
from advisor.ingest.timeline import add_events, comm_task_events
from advisor.model import COMM_COLUMNS, MEMORY_COLUMNS, Meta, Profile

_STEP_KEY = re.compile(r"(\d+)$")
_AGG_SUFFIX = re.compile(r"^(.*)-(top\d+|middle|bottom\d+|total)$")
TOTAL_OP_INFO = "Total Op Info"
"""The per-step aggregate entry of communication(.matrix).json; it is not an op and is never counted as one."""

COMM_EXTRA_COLUMNS = ["kind", "start_us", "wait_ratio", "sync_ratio", "transport_transit_us"]
"""Columns beyond ``COMM_COLUMNS``: p2p/collective, op start, wait/sync ratios, per-transport transit time."""
MATRIX_COLUMNS = ["step", "kind", "op", "stat", "group", "src_rank", "dst_rank", "transport", "size_mb",
                  "transit_us", "bandwidth_gbps", "op_name"]


def read(root: Path, meta: Meta) -> Profile:
    """Read one rank's ``*_ascend_pt`` / ``*_ascend_ms`` directory (or its ASCEND_PROFILER_OUTPUT) into a Profile."""
    root = Path(root)
    out = root / "ASCEND_PROFILER_OUTPUT"
    if not out.is_dir():
        out, root = (root, root.parent) if root.name == "ASCEND_PROFILER_OUTPUT" else (root, root)
    meta.framework = meta.framework or ("MindSpore" if meta.layout.startswith("mindspore") else "PyTorch")
    extras: dict[str, Any] = {}

    _read_profiler_info(root, meta)
    metadata = _read_metadata(root, meta)
    if metadata:
        extras["profiler_metadata"] = metadata
    read_device_info(root, meta)

    kernel_details = out / "kernel_details.csv"
    has_kernels = kernel_details.is_file()
    if has_kernels:
        ops = read_ops_files([kernel_details], meta)
        meta.source_of("ops", kernel_details)
    else:
        ops = finalize_ops(pd.DataFrame({"name": pd.Series(dtype="str")}))
    profile = Profile(ops=ops, meta=meta, extras=extras)

    _read_tables(out, meta, profile)
    trace = out / "trace_view.json"
    if trace.is_file():
        _read_trace_view(trace, meta, profile, has_kernels)
    return profile


def _read_tables(out: Path, meta: Meta, profile: Profile) -> None:
    """The optional tables of ASCEND_PROFILER_OUTPUT (statistics, steps, communication, memory, extras)."""
    if (df := _optional(out / "op_statistic.csv", meta, read_op_stats)) is not None:
        profile.op_stats = df
        meta.source_of("op_stats", "op_statistic.csv")
    if (df := _optional(out / "api_statistic.csv", meta, read_api_stats)) is not None:
        profile.api = df
    if (df := _optional(out / "step_trace_time.csv", meta, read_step_trace_time)) is not None:
        profile.steps = df
        meta.source_of("steps", "step_trace_time.csv")
    if (df := _optional(out / "communication.json", meta, read_communication)) is not None:
        profile.comm = df
        meta.source_of("comm", "communication.json")
    if (df := _optional(out / "memory_record.csv", meta, read_memory_record)) is not None:
        profile.memory = df
    for name, reader in _EXTRA_TABLES.items():
        if (df := _optional(out / f"{name}.csv", meta, reader)) is not None:
            profile.extras[name] = df
    if (df := _optional(out / "communication_matrix.json", meta, read_communication_matrix)) is not None:
        profile.extras["communication_matrix"] = df


def _read_trace_view(trace: Path, meta: Meta, profile: Profile, has_kernels: bool) -> None:
    """Timeline events from trace_view.json; its device tasks fill missing cores, or are the ops when there is no
    kernel_details.csv."""
    traces = Traces()
    # Level0 kernel_details has no Accelerator Core: the trace's device tasks carry it (Task Type)
    no_cores = has_kernels and bool(profile.ops["core"].isna().any())
    traces.add([trace], meta, device_ops=not has_kernels or no_cores, required=not has_kernels)
    meta.source_of("events", trace)
    if no_cores:
        device = [o for o in traces.ops if o is not None and len(o)]
        _fill_cores(profile.ops, device, meta)
        _keep_comm_tasks(traces, device, meta, trace)
    elif not has_kernels:
        frames = [o for o in traces.ops if o is not None and len(o)]
        if frames:
            profile.ops = frames[0]
            meta.source_of("ops", trace)
            meta.notes.append("no kernel_details.csv: device ops taken from trace_view.json "
                              "(no shapes or PMU metrics)")
    traces.apply(profile)


def _keep_comm_tasks(traces: Traces, device: list[pd.DataFrame], meta: Meta, trace: Path) -> None:
    """The trace's device tasks were read to fill cores: its collectives' tasks (a Level0 kernel table lists compute
    tasks only) stay as ``Ascend Hardware`` events, the time model's record of how the collectives waited."""
    frames = [f for f in (comm_task_events(d) for d in device) if len(f)]
    if not frames or not traces.events:
        return
    tasks = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    traces.events[-1] = add_events(traces.events[-1], tasks)
    n = len(tasks)
    meta.notes.append(f"{trace.name}: {n} 'Ascend Hardware' task events of collectives read from the communication "
                      "streams (notify waits, transfers)")


def _fill_cores(ops: pd.DataFrame, trace_ops: list[pd.DataFrame], meta: Meta) -> None:
    """Cores of kernel_details rows that have none, from the trace's device task of the same name and start
    (time stamps are exact, so the match is exact)."""
    if not trace_ops:
        return
    dev = pd.concat(trace_ops, ignore_index=True) if len(trace_ops) > 1 else trace_ops[0]
    key = lambda df: list(zip(df["name"].astype(str), np.round(df["start_us"].to_numpy(dtype="float64"), 3),  # noqa: E731
                              strict=True))
    lookup = dict(zip(key(dev), dev["core"].astype(object), strict=True))
    missing = ops["core"].isna().to_numpy()
    found = [lookup.get(k) for k, m in zip(key(ops), missing, strict=True) if m]
    filled = pd.Series(ops["core"].astype(object).to_numpy(), index=ops.index)
    filled[missing] = found
    n = int(sum(v is not None and v == v for v in found))
    ops["core"] = filled.astype("category")
    if n:
        meta.notes.append(f"kernel_details.csv records no core for {int(missing.sum())} task(s); {n} taken from the "
                          "device tasks of trace_view.json (Task Type)")


def _optional(path: Path, meta: Meta, reader: Any) -> pd.DataFrame | None:
    return optional_table(path, meta, reader) if path.is_file() else None


# ---------------------------------------------------------------------------------------------------------
# meta: profiler_info_<rank>.json, profiler_metadata.json
# ---------------------------------------------------------------------------------------------------------
def _load_json(path: Path) -> Any:
    return safeload.load_json(path)


def _read_profiler_info(root: Path, meta: Meta) -> None:
    """Versions, rank and profiler config from ``profiler_info_<rank>.json`` (or ``profiler_info.json``)."""
    files = sorted(root.glob("profiler_info*.json"))
    if meta.rank is not None:
        files.sort(key=lambda p: p.stem != f"profiler_info_{meta.rank}")
    for path in files[:1]:
        try:
            info = _load_json(path)
            if not isinstance(info, dict):
                raise InputError(path, "expected a JSON object")
        except InputError as e:
            meta.skip(path, e.problem)
            return
        meta.read(path)
        config = info.get("config")
        if isinstance(config, dict):
            meta.config = config
        if info.get("torch_npu_version"):
            meta.torch_npu_version = str(info["torch_npu_version"])
        if info.get("cann_version"):
            meta.cann_version = str(info["cann_version"])
        for key in ("mindspore_version", "ms_version"):
            if info.get(key):
                meta.notes.append(f"MindSpore version {info[key]}")
        rank = info.get("rank_id")
        try:
            if rank is not None and int(rank) >= 0:
                meta.rank = int(rank)
        except (TypeError, ValueError):
            pass
        level = (meta.config.get("experimental_config") or {}).get("_profiler_level") if meta.config else None
        if level:
            meta.notes.append(f"profiler level {level}")


def _read_metadata(root: Path, meta: Meta) -> dict[str, Any]:
    """``ENV_VARIABLES`` into ``meta.environment``; the rest (distributed args, groups) is returned."""
    path = root / "profiler_metadata.json"
    if not path.is_file():
        return {}
    try:
        data = _load_json(path)
        if not isinstance(data, dict):
            raise InputError(path, "expected a JSON object")
    except InputError as e:
        meta.skip(path, e.problem)
        return {}
    meta.read(path)
    env = data.get("ENV_VARIABLES")
    if isinstance(env, dict):
        meta.environment = {str(k): "" if v is None else str(v) for k, v in env.items()}
    return {k: v for k, v in data.items() if k != "ENV_VARIABLES"}


# ---------------------------------------------------------------------------------------------------------
# communication.json / communication_matrix.json
# ---------------------------------------------------------------------------------------------------------
def _step_of(key: str) -> float:
    m = _STEP_KEY.search(str(key))
    return float(m.group(1)) if m else np.nan


def _f(value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        return np.nan


def _ms(value: Any) -> float:
    return _f(value) * 1000.0


def _steps_of(data: Any, path: Path) -> Any:
    if not isinstance(data, dict):
        raise InputError(path, "expected a JSON object keyed by step")
    for step_key, kinds in data.items():
        if not isinstance(kinds, dict):
            raise InputError(path, f"step '{step_key}' is not an object of p2p/collective ops")
        for kind, ops in kinds.items():
            if not isinstance(ops, dict):
                continue
            for op_key, info in ops.items():
                if op_key == TOTAL_OP_INFO or not isinstance(info, dict):
                    continue
                yield _step_of(step_key), str(kind), str(op_key), info


def read_communication(path: Path, meta: Meta) -> pd.DataFrame:
    """communication.json -> COMM_COLUMNS (+ COMM_EXTRA_COLUMNS), times in us, one row per transport."""
    data = _load_json(path)
    rows: list[dict[str, Any]] = []
    for step, kind, op_key, info in _steps_of(data, path):
        op, _, group = op_key.partition("@")
        t = info.get("Communication Time Info") or {}
        base = {
            "step": step, "op": op, "group": group or None, "kind": kind,
            "start_us": _f(t.get("Start Timestamp(us)")),
            "elapse_us": _ms(t.get("Elapse Time(ms)")),
            "transit_us": _ms(t.get("Transit Time(ms)")),
            "wait_us": _ms(t.get("Wait Time(ms)")),
            "sync_us": _ms(t.get("Synchronization Time(ms)")),
            "idle_us": _ms(t.get("Idle Time(ms)")),
            "wait_ratio": _f(t.get("Wait Time Ratio")),
            "sync_ratio": _f(t.get("Synchronization Time Ratio")),
        }
        bandwidth = info.get("Communication Bandwidth Info") or {}
        if not isinstance(bandwidth, dict) or not bandwidth:
            rows.append({**base, "transport": None})
            continue
        for transport, b in bandwidth.items():
            b = b if isinstance(b, dict) else {}
            rows.append({
                **base,
                "transport": str(transport),
                "size_mb": _f(b.get("Transit Size(MB)")),
                "transport_transit_us": _ms(b.get("Transit Time(ms)")),
                "bandwidth_gbps": _f(b.get("Bandwidth(GB/s)")),
                "large_packet_ratio": _f(b.get("Large Packet Ratio")),
            })
    df = pd.DataFrame(rows, columns=COMM_COLUMNS + COMM_EXTRA_COLUMNS)
    df["start_us"] = us_from_float(meta, df["start_us"].to_numpy(dtype="float64"))
    for col in ("op", "group", "transport", "kind"):
        df[col] = df[col].astype("category")
    return df


def split_matrix_op(op: str) -> tuple[str, str | None]:
    """``allreduce-top1`` -> (``allreduce``, ``top1``); an op key without an aggregate suffix -> (op, None)."""
    m = _AGG_SUFFIX.match(op)
    return (m.group(1), m.group(2)) if m else (op, None)


def read_communication_matrix(path: Path, meta: Meta) -> pd.DataFrame:
    """communication_matrix.json -> MATRIX_COLUMNS; ``op-top1@group`` style keys split into op and ``stat``."""
    data = _load_json(path)
    rows: list[dict[str, Any]] = []
    for step, kind, op_key, links in _steps_of(data, path):
        op, _, group = op_key.partition("@")
        op, stat = split_matrix_op(op)
        for link, v in links.items():
            v = v if isinstance(v, dict) else {}
            src, _, dst = str(link).partition("-")
            rows.append({
                "step": step, "kind": kind, "op": op, "stat": stat, "group": group or None,
                "src_rank": _f(src), "dst_rank": _f(dst),
                "transport": v.get("Transport Type"),
                "size_mb": _f(v.get("Transit Size(MB)")),
                "transit_us": _ms(v.get("Transit Time(ms)")),
                "bandwidth_gbps": _f(v.get("Bandwidth(GB/s)")),
                "op_name": v.get("Op Name"),
            })
    return pd.DataFrame(rows, columns=MATRIX_COLUMNS)


# ---------------------------------------------------------------------------------------------------------
# CSV side tables
# ---------------------------------------------------------------------------------------------------------
def read_memory_record(path: Path, meta: Meta) -> pd.DataFrame:
    """memory_record.csv (2023 and 2024+ variants) -> MEMORY_COLUMNS (+ ``device``)."""
    df = text_table(path, meta, C.MEMORY_RECORD_ALIASES, C.MEMORY_RECORD_TEXT, ["component", "timestamp_us"])
    df["component"] = df["component"].astype("category")
    return df[MEMORY_COLUMNS + ["device"]]


def read_operator_details(path: Path, meta: Meta) -> pd.DataFrame:
    """operator_details.csv: per torch op host/device durations and the call stack (multi-line cells)."""
    return text_table(path, meta, C.OPERATOR_DETAILS_ALIASES, C.OPERATOR_DETAILS_TEXT, ["name"], multiline=True)


def read_operator_memory(path: Path, meta: Meta) -> pd.DataFrame:
    """operator_memory.csv: allocations per op (size, lifetime)."""
    return text_table(path, meta, C.OPERATOR_MEMORY_ALIASES, C.OPERATOR_MEMORY_TEXT, ["name", "size_kb"])


def read_npu_module_mem(path: Path, meta: Meta) -> pd.DataFrame:
    """npu_module_mem.csv: reserved memory per CANN component over time."""
    return text_table(path, meta, C.NPU_MODULE_MEM_ALIASES, C.NPU_MODULE_MEM_TEXT, ["component", "reserved_mb"])


def read_static_op_mem(path: Path, meta: Meta) -> pd.DataFrame:
    """static_op_mem.csv (graph mode): static memory per op node range of a graph, in KB."""
    return text_table(path, meta, C.STATIC_OP_MEM_ALIASES, C.STATIC_OP_MEM_TEXT, ["name", "size_kb"])


_EXTRA_TABLES = {
    "static_op_mem": read_static_op_mem,
    "operator_details": read_operator_details,
    "l2_cache": read_l2_cache,
    "operator_memory": read_operator_memory,
    "npu_module_mem": read_npu_module_mem,
}


# ---------------------------------------------------------------------------------------------------------
# the layouts this module reads (advisor.ingest.registry); the database exports are sqlite_db's
# ---------------------------------------------------------------------------------------------------------
_RANK_WORD = re.compile(r"(?:^|[_-])rank[_-]?(\d+)(?:[_-]|$)", re.IGNORECASE)
_RANK_IN_NAME = re.compile(r"_(\d{1,6})(?:_ascend_(?:pt|ms))?$")
"""A trailing number of at most 6 digits (``worker_3_ascend_pt``); torch_npu's default names end in a 14-17 digit
time stamp (``rank0_752_20260925054655567_ascend_pt``), which is no rank."""
_TEXT_FILES = ("kernel_details.csv", "op_statistic.csv", "step_trace_time.csv", "trace_view.json")


def rank_from_name(name: str) -> int | None:
    """``rank0_...`` / ``rank_1_ascend_pt`` / ``test_rank_0`` -> the rank; else a short trailing number."""
    m = _RANK_WORD.search(name) or _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None


def export_layout(d: Path) -> str | None:
    """``torch_npu-text`` / ``torch_npu-db`` / ``mindspore-text`` / ``mindspore-db`` for a framework profiler's rank
    directory (``*_ascend_pt`` / ``*_ascend_ms``, or any holding ``ASCEND_PROFILER_OUTPUT/``); None for another."""
    out_dir = d / "ASCEND_PROFILER_OUTPUT"
    if not (out_dir.is_dir() or d.name.endswith(("_ascend_pt", "_ascend_ms"))):
        return None
    is_ms = d.name.endswith("_ascend_ms") or any(out_dir.glob("ascend_mindspore_profiler*.db"))
    has_db = any(out_dir.glob("ascend_pytorch_profiler*.db")) or any(out_dir.glob("ascend_mindspore_profiler*.db"))
    has_text = any((out_dir / n).exists() for n in _TEXT_FILES)
    kind = "mindspore" if is_ms else "torch_npu"
    return f"{kind}-text" if has_text or not has_db else f"{kind}-db"


def find_export(layout: str) -> Find:
    """The recognizer of one of the four framework export layouts (see :func:`export_layout`)."""

    def find(d: Path) -> list[RankSource]:
        return [RankSource(d, layout, rank_from_name(d.name))] if export_layout(d) == layout else []

    return find


LAYOUTS = (
    Layout("torch_npu-text", "torch_npu", "torch_npu: *_ascend_pt/ASCEND_PROFILER_OUTPUT CSV + JSON", read,
           in_dir=(Match(30, find_export("torch_npu-text")),), framework="torch_npu"),
    Layout("mindspore-text", "MindSpore", "MindSpore 2.x: *_ascend_ms/ASCEND_PROFILER_OUTPUT CSV + JSON", read,
           in_dir=(Match(32, find_export("mindspore-text")),), framework="mindspore"),
)
