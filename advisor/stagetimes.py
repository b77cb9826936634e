"""Wall time per stage of one run (read, time model, each knowledge base, report), for the benchmark.

Set ``ADVISOR_STAGE_TIMES=FILE`` and the process writes ``{"stage": seconds, ...}`` to FILE as it exits;
otherwise nothing is recorded beyond a dict update per stage. Stages of ranks analyzed on other processes (a Dask
cluster) are not seen here.
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


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Add the wall time of the ``with`` body to ``name``."""
    t0 = time.perf_counter()
    try:
        yield
    finally:
        _times[name] = _times.get(name, 0.0) + time.perf_counter() - t0


def add(name: str, seconds: float) -> None:
    _times[name] = _times.get(name, 0.0) + seconds


def snapshot() -> dict[str, float]:
    return dict(_times)


def dump_if_asked() -> None:
    """Write the stages to ``$ADVISOR_STAGE_TIMES`` when it is set (the benchmark reads them)."""
    target = os.environ.get(ENV)
    if target:
        Path(target).write_text(json.dumps({k: round(v, 4) for k, v in _times.items()}), encoding="utf-8")


if os.environ.get(ENV):
    atexit.register(dump_if_asked)
