"""Wall time and peak memory per stage of one run (read, time model, each knowledge base, report), for the
benchmark.

Set ``ADVISOR_STAGE_TIMES=FILE`` and the process writes ``{"stage": seconds, ..., "peak_mb": {"stage": MB}}`` to
FILE as it exits; otherwise nothing is recorded beyond a dict update per stage. The peak resident memory of a
stage is read from Linux's high-water mark (``VmHWM``), which is reset as each stage starts (``clear_refs``), so a
stage's figure is what was resident at its worst moment, whatever earlier stages left. Since that reset also
resets the peak the OS reports for the process, the process peak is written too (``peak_mb.process``). Stages of
ranks analyzed on other processes (a Dask cluster) are not seen here.
"""

from __future__ import annotations

import atexit
import json
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ENV = "ADVISOR_STAGE_TIMES"
_times: dict[str, float] = {}
_peaks: dict[str, float] = {}
_open: list[float] = []
"""Peak (MB) seen so far by each stage still open, innermost last."""
_measure_memory = bool(os.environ.get(ENV)) and os.path.exists("/proc/self/clear_refs")


@contextmanager
def stage(name: str, timed: bool = True) -> Iterator[None]:
    """Add the wall time of the ``with`` body to ``name`` (unless ``timed`` is false: its time is counted elsewhere)
    and, when measuring, record its peak memory."""
    _enter_memory()
    t0 = time.perf_counter()
    try:
        yield
    finally:
        if timed:
            _times[name] = _times.get(name, 0.0) + time.perf_counter() - t0
        _leave_memory(name)


def _high_water_mb() -> float:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return 0.0


def _reset_high_water() -> None:
    try:
        with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
            f.write("5")
    except OSError:
        pass


def _enter_memory() -> None:
    if not _measure_memory:
        return
    if _open:
        _open[-1] = max(_open[-1], _high_water_mb())
    _reset_high_water()
    _open.append(0.0)


def _leave_memory(name: str) -> None:
    if not _measure_memory:
        return
    peak = max(_open.pop(), _high_water_mb())
    _peaks[name] = max(_peaks.get(name, 0.0), peak)
    if _open:
        _open[-1] = max(_open[-1], peak)
    _reset_high_water()


def add(name: str, seconds: float) -> None:
    _times[name] = _times.get(name, 0.0) + seconds


def snapshot() -> dict[str, float]:
    return dict(_times)


def dump_if_asked() -> None:
    """Write the stages to ``$ADVISOR_STAGE_TIMES`` when it is set (the benchmark reads them)."""
    target = os.environ.get(ENV)
    if target:
        record: dict[str, object] = {k: round(v, 4) for k, v in _times.items()}
        if _peaks:
            # resetting the high-water mark also resets what the OS reports as the process's peak (ru_maxrss):
            # the process peak is given here
            process = max(max(_peaks.values()), _high_water_mb())
            record["peak_mb"] = {**{k: round(v, 1) for k, v in _peaks.items()}, "process": round(process, 1)}
        Path(target).write_text(json.dumps(record), encoding="utf-8")


if os.environ.get(ENV):
    atexit.register(dump_if_asked)
