"""Small helpers shared across stages."""

from __future__ import annotations

import functools
import gc
import importlib.util
import math
import re
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any


@contextmanager
def paused_gc() -> Iterator[None]:
    """Pause the cyclic garbage collector while millions of small containers are created.

    Parsing allocates only acyclic dicts/lists/strings; CPython's collector would otherwise rescan the growing
    heap again and again (it made json.load of a 64 MB OM JSON 5x slower, and trace parsing 2x slower).
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def release_memory() -> None:
    """Hand memory freed by a stage back to the OS (Arrow's pool, then glibc's heap) so that the next stage's
    peak does not sit on top of it: reading a 2M-row CSV otherwise leaves ~0.6 GB of freed buffers resident."""
    try:
        import pyarrow as pa

        pa.default_memory_pool().release_unused()
    except ImportError:  # pragma: no cover - pyarrow is a dependency
        pass
    trim = _glibc("malloc_trim")
    if trim is not None:
        trim(0)


_M_MMAP_THRESHOLD = -3
_M_ARENA_MAX = -8
MMAP_THRESHOLD_BYTES = 4 << 20
"""Allocations from this size on (a column of 500k+ rows) get their own pages, returned to the OS when freed."""
_TUNED: list[bool] = []


def tune_allocator() -> None:
    """Tune glibc's allocator once per process (no-op off glibc):

    * a fixed mmap threshold: by default it rises to the size of the largest block freed, so after the first
      multi-MB column is freed every later one comes from the heap, whose freed space stays resident (a 2M-kernel
      profile then peaked ~0.5 GB higher); large columns get their own pages instead;
    * one arena for every thread: knowledge bases run in worker threads (for their time limit), and a thread's own
      arena hands each freed temporary back to the OS at once, so the next one is page-faulted in afresh
      (schedule.fusible-ops took 0.49 s in a thread against 0.28 s on the main thread at 200k kernels, 100k page
      faults against 6k). The threads take turns under the GIL, so sharing one arena costs no parallelism
      (Arrow's own threads allocate from its pool, not from glibc)."""
    if _TUNED:
        return
    _TUNED.append(True)
    mallopt = _glibc("mallopt")
    if mallopt is not None:
        mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)
        mallopt(_M_ARENA_MAX, 1)


@functools.cache
def _glibc(name: str) -> Any:
    """glibc's function ``name`` (None elsewhere: macOS, musl, Windows)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        import ctypes

        return getattr(ctypes.CDLL("libc.so.6"), name)
    except (OSError, AttributeError):
        return None


def lazy_module(name: str) -> Any:
    """``name`` imported on first attribute access (``importlib.util.LazyLoader``): networkx costs 0.1 s of every
    start, and only runs that analyze a model graph use it."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.find_spec(name)
    if spec is None or spec.loader is None:
        raise ModuleNotFoundError(f"No module named {name!r}", name=name)
    loader = importlib.util.LazyLoader(spec.loader)
    spec.loader = loader
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    loader.exec_module(module)
    return module


_ASCII_INT = re.compile(r"[0-9]+", re.ASCII)


def is_ascii_digits(text: str) -> bool:
    """True when ``text`` is only the digits 0-9. ``str.isdigit`` also accepts superscripts and other Unicode
    digits that ``int()`` rejects (a folder named ``¹²`` made a reader crash)."""
    return _ASCII_INT.fullmatch(text) is not None


def finite_float(value: Any) -> float | None:
    """``value`` as a finite float, else None (missing, text, NaN or infinite): for optional numbers read from
    JSON or a table cell."""
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) else None


def is_int(value: Any) -> bool:
    """Whether ``int(value)`` gives a number (a rank id written as text or as a number); a bool is not one."""
    try:
        int(value)
    except (TypeError, ValueError):
        return False
    return not isinstance(value, bool)
