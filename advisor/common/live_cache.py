"""Values derived from a live object, worked out once and kept exactly as long as the object lives."""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Hashable
from typing import Any, TypeVar

T = TypeVar("T")
_MISSING = object()


class LiveCache:
    """Per live owner (by id; dropped by a finalizer when the owner goes) and per key, the value ``compute`` gave.
    Thread-safe: knowledge bases run in threads and ask for the same rank's derived tables."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._by_owner: dict[int, dict[Hashable, Any]] = {}

    def get(self, owner: Any, key: Hashable, compute: Callable[[], T]) -> T:
        with self._lock:
            per = self._by_owner.get(id(owner))
            if per is None:
                per = self._by_owner[id(owner)] = {}
                weakref.finalize(owner, self._by_owner.pop, id(owner), None)
            hit = per.get(key, _MISSING)
        if hit is _MISSING:
            hit = compute()
            with self._lock:
                per[key] = hit
        return hit


__all__ = ["LiveCache"]
