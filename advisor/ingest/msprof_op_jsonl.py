"""msprof op's JSON Lines files: ``summary.jsonl`` (the kernel and each metric set's aggregates) and
``HardwareInfo.jsonl`` (the board it ran on).

The newer msprof op capture (FORMATS.md 12; the ``npu-compute`` collector of hicann/asc-tools, Ascend 950 / arch
3510) writes the per-block metric CSVs of the classic ``OPPROF_*`` layout (``block_id,sub_block_id,...``) but no
``OpBasicInfo.csv``; instead:

* ``summary.jsonl``, one JSON object per line keyed by ``category``: one record per metric set collected
  (``PipeUtilization``, ``Memory``, ``MemoryL0``, ``MemoryUB``, ``L2Cache``, ``ArithmeticUtilization``,
  ``ResourceConflictRatio``) holding each CSV column's mean over the task records (``null`` where no row has a
  value: all ``aic_*`` of a vector-only kernel), then ``OpInfoSummary`` with the ``OpBasicInfo.csv`` fields
  (``Op Name``, ``Op Type``, ``Task Duration(us)`` -- the median over replays --, ``Block Dim``, ``Mix Block Dim``,
  ``Device Id``, ``Pid``, ``Current Freq``, ``Rated Freq``) and the collector's own aggregates
  (``aicore_parallel_utilization``, ``aicore_parallel_balance``, ``aicore_gm_*``);
* ``HardwareInfo.jsonl``, one object per ``category``: ``Host Info``, ``Device Info`` (``chip info`` "SoC version",
  ``arch info``), ``CPU Information``, ``AI Core Information`` (``ai core count``, ``ai cube count``, ``ai vector
  count``, ``ai cube frequency(MHZ)``, ``ai vector frequency(MHZ)``), ``Memory Information`` (HBM capacity and
  clock). Classic ``OPPROF_*`` results of some releases carry it too.

What each becomes:

* ``OpInfoSummary`` -> the launch's op row, in the same columns ``OpBasicInfo.csv`` gives (``advisor.ingest.
  msprof_op``); a ``null`` name, duration or block count is filled from the CSVs there and said in the notes;
* the metric-set records and ``OpInfoSummary``'s aggregates -> ``profile.extras["msprof_op_summary"]`` (one row per
  launch and category, canonical metric names). They are the collector's plain means over rows, not the per-op
  metrics (those are aggregated from the per-block rows by ``msprof_op``); ``aicore_gm_bw_usage_rate`` is over a
  fixed 1600 GB/s the collector assumes for every chip, not the chip's bandwidth, and is not used;
* ``HardwareInfo.jsonl`` -> ``meta.hardware`` (:class:`advisor.model.Hardware`): the cube cores (``ai cube count``;
  ``ai core count`` where the cube count is missing), vector cores, cube and vector clocks, chip and architecture;
  ``advisor.platform`` takes the chip's counts and clocks from here, never from a table, and reports the peaks of a
  chip ``rules/platforms.yaml`` does not know as unknown. The whole record -> ``profile.extras["msprof_op_hardware"]``.
  A field the collector could not query is 0 or "" (its docs): those are read as unknown -- except the clocks,
  which fall back to the fixed frequency and then to 1650 MHz (its docs), so a 1650 is taken as written.
  ``ai core count`` is "the count the device interface reports, as is"; the cube count is what the platform's
  ``ai_core_num`` means (cube cores on a split-core chip), so it is preferred.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

import advisor.ingest.columns as C
from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.ingest.msprof import mhz
from advisor.model import Hardware, Meta

SUMMARY = "summary.jsonl"
HARDWARE_INFO = "HardwareInfo.jsonl"
OP_INFO = "OpInfoSummary"
SUMMARY_EXTRA = "msprof_op_summary"
"""``profile.extras`` key of the collector's per-launch aggregates (one row per launch and ``category``)."""
HARDWARE_EXTRA = "msprof_op_hardware"
"""``profile.extras`` key of ``HardwareInfo.jsonl`` as read: ``{category: {field: value}}``."""

_DEVICE_DIR = re.compile(r"^device\d+$")

MAX_JSONL_BYTES = 16 << 20
"""Largest ``summary.jsonl`` / ``HardwareInfo.jsonl`` read: a few KB each in practice (one line per metric set)."""


# ---------------------------------------------------------------------------------------------------------
# reading a JSON Lines file
# ---------------------------------------------------------------------------------------------------------
def read_records(path: Path) -> list[dict[str, Any]]:
    """The JSON objects of ``path``, one per non-blank line. InputError naming the line when one is not an object."""
    text = safeload.read_bytes(path, MAX_JSONL_BYTES).decode("utf-8", errors="replace")
    records: list[dict[str, Any]] = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = safeload.loads_json(line, path)
        except InputError as e:
            raise InputError(path, f"line {number}: {e.problem}") from None
        if not isinstance(record, dict):
            raise InputError(path, f"line {number}: a JSON {type(record).__name__} where an object is expected")
        records.append(record)
    return records


def by_category(records: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """``{category: record}`` (the first record of a category wins)."""
    out: dict[str, dict[str, Any]] = {}
    for r in records:
        out.setdefault(str(r.get("category")), r)
    return out


# ---------------------------------------------------------------------------------------------------------
# summary.jsonl
# ---------------------------------------------------------------------------------------------------------
def read_summary(launch: Path, index: int, meta: Meta) -> tuple[dict[str, object] | None, pd.DataFrame | None]:
    """The launch's op row from ``summary.jsonl``'s ``OpInfoSummary`` (keys as ``OpBasicInfo.csv`` gives them, None
    when the file or the record is missing or broken: listed as skipped) and the file's aggregates (see the module
    doc)."""
    path = launch / SUMMARY
    if not path.is_file():
        return None, None
    try:
        records = read_records(path)
    except InputError as e:
        meta.skip(path, e.problem)
        return None, None
    meta.read(path)
    aggregates = _aggregates(records, index)
    info = by_category(records).get(OP_INFO)
    if info is None:
        meta.skip(path, f"no {OP_INFO} record (categories: "
                        + ", ".join(sorted({str(r.get('category')) for r in records})) + "): no kernel name or duration")
        return None, aggregates
    return op_row(info), aggregates


def op_row(info: dict[str, Any]) -> dict[str, object]:
    """``OpInfoSummary`` -> the columns ``OpBasicInfo.csv`` is read into (``MSPROF_OP_BASIC_ALIASES``)."""
    keys = {C.header_key(k): k for k in info}
    row: dict[str, object] = {}
    for canonical, aliases in C.MSPROF_OP_BASIC_ALIASES.items():
        raw = next((info[keys[C.header_key(a)]] for a in aliases if C.header_key(a) in keys), None)
        if canonical in C.MSPROF_OP_BASIC_TEXT:
            row[canonical] = str(raw).strip() if raw is not None and str(raw).strip() else None
        else:
            row[canonical] = _number(raw)
    return row


def _number(value: object) -> float:
    if isinstance(value, bool):
        return np.nan
    try:
        f = float(value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return np.nan
    return f if math.isfinite(f) else np.nan


def _aggregates(records: list[dict[str, Any]], index: int) -> pd.DataFrame:
    """One row per record: ``launch``, ``category``, then each field under its canonical metric name."""
    rows: list[dict[str, object]] = []
    for r in records:
        row: dict[str, object] = {"launch": index, "category": str(r.get("category"))}
        for key, value in r.items():
            name = C.msprof_op_metric_name(str(key)) if key != "category" else None
            if name is not None and not isinstance(value, str):
                row[name] = _number(value)
        rows.append(row)
    return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------------------
# HardwareInfo.jsonl
# ---------------------------------------------------------------------------------------------------------
def hardware_info_file(root: Path) -> Path | None:
    """``HardwareInfo.jsonl`` of a result: in ``root``, or in the result directory above a ``device<N>`` one (one
    snapshot per collection, not per device)."""
    for d in (root, root.parent) if _DEVICE_DIR.match(root.name) else (root,):
        if (d / HARDWARE_INFO).is_file():
            return d / HARDWARE_INFO
    return None


def read_hardware_info(root: Path, meta: Meta) -> dict[str, dict[str, Any]] | None:
    """Core counts, clocks and chip from ``HardwareInfo.jsonl`` into ``meta.hardware`` (and ``meta.chip`` /
    ``ai_core_num`` / ``aiv_num`` where not known yet); the file as read, None when absent or broken (listed as
    skipped). The file is optional: older releases do not write it."""
    path = hardware_info_file(root)
    if path is None:
        return None
    try:
        categories = by_category(read_records(path))
    except InputError as e:
        meta.skip(path, e.problem)
        return None
    meta.read(path)
    hw = hardware_from(categories, path.name)
    if hw is None:
        meta.notes.append(f"{path.name}: no AI core count recorded (the collector writes 0 where its query failed)")
        return categories
    meta.hardware = meta.hardware or hw
    meta.ai_core_num = meta.ai_core_num or hw.ai_cores
    meta.aiv_num = meta.aiv_num if meta.aiv_num is not None else hw.vector_cores
    if hw.chip and not meta.chip:
        meta.chip = hw.chip
    return categories


def hardware_from(categories: dict[str, dict[str, Any]], source: str) -> Hardware | None:
    """The :class:`Hardware` of ``HardwareInfo.jsonl``'s categories; None without an AI core count."""
    core = categories.get("AI Core Information", {})
    device = categories.get("Device Info", {})
    cube = _positive_int(core.get("ai cube count"))
    cores = cube if cube is not None else _positive_int(core.get("ai core count"))
    if cores is None:
        return None
    chip_words = str(device.get("chip info") or "").split()
    arch = str(device.get("arch info") or "").strip() or None
    return Hardware(cores, _positive_int(core.get("ai vector count")), _clock(core.get("ai cube frequency(MHZ)")),
                    source, vector_clock_mhz=_clock(core.get("ai vector frequency(MHZ)")),
                    chip=chip_words[0] if chip_words else None, arch=arch)


def _positive_int(value: object) -> int | None:
    f = _number(value)
    return int(f) if f == f and f > 0 and f == int(f) else None


def _clock(value: object) -> float | None:
    f = mhz(value)
    return f if f else None


__all__ = ["HARDWARE_EXTRA", "HARDWARE_INFO", "OP_INFO", "SUMMARY", "SUMMARY_EXTRA", "by_category", "hardware_from",
           "op_row", "read_hardware_info", "read_records", "read_summary"]
