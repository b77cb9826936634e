"""How a finding's evidence reads: a person's label and a value with its unit, for every renderer.

Knowledge bases name evidence in snake_case with the unit in the name (``decomposed_us``, ``share_of_window``,
``hbm_gbps``). The JSON report keeps those keys (a contract); the Markdown and HTML reports show them through
:func:`evidence_label` and :func:`evidence_value`, so ``decomposed_us 3,605.729`` reads "decomposed: 3.61 ms"
and ``share_of_window 0.156`` reads "share of window: 15.6 %" in both.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from typing import Any

from advisor.common.units import fmt_us
from advisor.report.common import fmt_value
from advisor.report.summary_rows import fmt_bytes

# key suffix -> (unit shown after the label-less value, how the value is formatted)
_DURATION_SUFFIXES = ("_us", " us")
_SHARE_WORDS = ("share", "ratio", "fraction", "pct_of")
"""A key holding one of these words is a 0..1 share shown as a percentage (``mean_pct_of_roof`` is 0..1 too)."""
_SHARE_EXCEPTIONS = ("_per_", "_over_")
"""``calls_per_execute``, ``kernel_over_wall``: quotients, not shares of a whole (kept as numbers)."""
_UNITS = {"_gbps": "GB/s", "_tflops": "TFLOPS", "_tops": "TOPS", "_flops_per_byte": "FLOP/byte",
          "_flop_per_byte": "FLOP/byte", "_gflops_per_call": "GFLOP/call", "_bytes": "bytes", "_mb": "MB",
          "_ms": "ms"}
_UNIT_COLUMNS = {"gflops_per_call": "GFLOP", "bytes": "bytes", "flops": "FLOP", "intensity": "FLOP/byte", "ridge": "FLOP/byte"}

_LABELS = {
    "share_of_window": "share of the analyzed window",
    "window_share": "share of the analyzed window",
    "window_us": "analyzed window",
    "total_us": "total time",
    "recoverable_us": "recoverable time",
    "saving_us": "saving",
    "avg_us": "average duration",
    "max_us": "longest duration",
    "min_duration_us": "shortest duration counted",
    "duration_us": "duration",
    "time_us": "time",
    "start_us": "start",
    "mean_pct_of_roof": "mean attainment of the roof",
    "mean_share_of_practical_roof": "mean attainment of the practical roof",
    "pct_of_roof": "attainment of the roof",
    "share_of_roof": "attainment of the practical roof",
    "ridge_flops_per_byte": "ridge point",
    "hbm_gbps": "memory bandwidth",
    "peak_tflops": "peak",
    "soc": "chip",
    "soc_assumed": "chip assumed",
    "aicore_us": "AI Core time",
    "aicpu_us": "AI CPU time",
    "mte_us": "MTE time",
    "mte_over_aicore": "MTE time / AI Core time",
    "kernel_over_wall": "kernel time / wall time",
    "cann_version": "CANN version",
    "atc_cmdline": "ATC command line",
    "api": "API",
    "execute_api": "execute API",
    "fp16_tflops": "FP16 peak",
    "int8_tops": "INT8 peak",
    "fp16_cube_us": "FP16 cube time",
}
_ACRONYMS = {"aicore": "AI Core", "aicpu": "AI CPU", "ai": "AI", "mte": "MTE", "hbm": "HBM", "l2": "L2",
             "fp16": "FP16", "fp32": "FP32", "bf16": "BF16", "int8": "INT8", "cpu": "CPU", "npu": "NPU",
             "mte1": "MTE1", "mte2": "MTE2", "mte3": "MTE3", "vec": "vector", "mac": "MAC", "tflops": "TFLOPS",
             "gbps": "GB/s", "soc": "chip", "ub": "UB", "dma": "DMA", "hccl": "HCCL", "io": "I/O"}
_SNAKE = re.compile(r"^[a-z][a-z0-9]*(?:_[a-z0-9]+)+$")


def _strip_suffix(key: str) -> tuple[str, str | None]:
    """(key without its unit suffix, the unit) for keys that carry one."""
    for suffix in _DURATION_SUFFIXES:
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)], "duration"
    if "_us_" in key:  # native_us_each
        return key.replace("_us_", "_"), "duration"
    for suffix, unit in sorted(_UNITS.items(), key=lambda kv: -len(kv[0])):
        if key.endswith(suffix) and len(key) > len(suffix):
            return key[: -len(suffix)], unit
    return key, None


def _is_share(key: str) -> bool:
    k = key.lower()
    return any(w in k for w in _SHARE_WORDS) and not any(x in k for x in _SHARE_EXCEPTIONS)


def evidence_label(key: str) -> str:
    """The words a person reads for an evidence key (``share_of_window`` -> "share of the analyzed window")."""
    key = str(key)
    if key in _LABELS:
        return _LABELS[key]
    if not _SNAKE.match(key) and not key.endswith(" us"):
        return key  # already written for a person ("% roof", "attained TFLOPS")
    stem, unit = _strip_suffix(key)
    words = [_ACRONYMS.get(w, w) for w in stem.replace("_", " ").split()]
    return " ".join(words)  # the unit is shown with the value


def evidence_value(key: str, value: Any) -> str:
    """An evidence value with its unit, read from the key: ``_us`` a duration (:func:`advisor.common.units.fmt_us`),
    a share or ratio a percentage, bandwidth/throughput with their units; the rest as :func:`fmt_value`."""
    key = str(key)
    if isinstance(value, bool) or value is None or not isinstance(value, (int, float)):
        return fmt_value(value)
    if isinstance(value, float) and not math.isfinite(value):
        return fmt_value(value)
    stem, unit = _strip_suffix(key)
    if unit == "duration":
        return fmt_us(float(value))
    if unit is None and _is_share(key):
        return f"{value * 100:.1f} %"
    if unit == "bytes" or key in {"bytes"}:
        return fmt_bytes(float(value))
    unit = unit or _UNIT_COLUMNS.get(key)
    text = fmt_value(value)
    return f"{text} {unit}" if unit else text


def evidence_items(scalars: Sequence[tuple[str, Any]]) -> list[tuple[str, str]]:
    """(label, value with unit) for each named evidence value; an empty value says nothing and is left out."""
    items = [(evidence_label(k), evidence_value(k, v)) for k, v in scalars]
    return [(label, text) for label, text in items if text.strip()]


def evidence_table(table: Mapping[str, Any]) -> dict[str, Any]:
    """An evidence table with labelled columns and each cell formatted by its column's key; ``numeric`` marks the
    columns whose cells are numbers (right-aligned, never wrapped)."""
    columns = [str(c) for c in table["columns"]]
    rows = [[evidence_value(c, v) for c, v in zip(columns, r, strict=False)] if isinstance(r, (list, tuple)) else []
            for r in table["rows"]]
    def _numeric(i: int) -> bool:
        cells = [r[i] for r in table["rows"] if isinstance(r, (list, tuple)) and i < len(r) and r[i] is not None]
        return bool(cells) and all(isinstance(c, (int, float)) and not isinstance(c, bool) for c in cells)

    numeric = [_numeric(i) for i in range(len(columns))]
    out = {"columns": [evidence_label(c) for c in columns], "rows": rows, "numeric": numeric}
    if table.get("more_rows"):
        out["more_rows"] = table["more_rows"]
    return out
