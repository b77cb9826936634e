"""Time for knowledge bases: read the rank's time model, never recompute it.

Every share a finding shows divides by ``window_us(profile)``; a saving of idle time is attributed to
:data:`FREE_TIME_KEY` and one of uncovered communication to the communication ops (or :data:`OTHER_COMM_KEY`),
so that the score counts each microsecond once however many findings claim it.
"""

from __future__ import annotations

from collections.abc import Iterable

import numpy as np
import pandas as pd

from advisor.common.frames import isin_mask
from advisor.common.intervals import covered_before, intersect, length, overlap, union, union_length
from advisor.common.live_cache import LiveCache
from advisor.common.units import fmt_us
from advisor.model import Profile
from advisor.timemodel import COMM_CORES, COMPUTE_KEYS, UNCOVERED_KEYS, StepTime, TimeModel, compute_bucket

FREE_TIME_KEY = "(free time)"
"""Pseudo-op the savings of device idle time are attributed to (by every knowledge base that recovers it)."""
OTHER_COMM_KEY = "(other communication ops)"
"""Pseudo-op for uncovered communication not attributed to a named communication op."""
PSEUDO_OP_BUCKETS = {FREE_TIME_KEY: "free", OTHER_COMM_KEY: "communication"}
"""Bucket of the time model each pseudo-op stands for (savings on it are bounded by that bucket)."""


def time_of(profile: Profile) -> TimeModel:
    """The rank's time model (built once at ingest)."""
    return profile.time


def window_us(profile: Profile) -> float:
    """The analyzed window: the denominator of every share."""
    return profile.time.window_us


def exposed_fraction(profile: Profile) -> tuple[dict[float, float], float]:
    """Share of communication time that compute does not hide, per step id and overall (1.0 when the profile has no
    communication time to measure it with)."""
    t = profile.time
    by_step = {float(s.step): _frac(s) for s in t.steps if s.step is not None and s.communication_us > 0}
    total = t.communication_us
    overall = min(1.0, t.uncovered_communication_us / total) if total > 0 else 1.0
    return by_step, overall


def _frac(s: StepTime) -> float:
    return min(1.0, s.uncovered_communication_us / s.communication_us)


def idle_during(profile: Profile, starts: np.ndarray, ends: np.ndarray) -> float | None:
    """How much of the host intervals ``[starts, ends)`` the device spends idle (inside the analyzed steps): the
    part of that host work on the critical path, which removing it can recover. Host work while the device is busy
    (or waits in a collective, or runs the tasks queued before) is hidden and recovers nothing. None when the profile
    records no device task intervals to tell."""
    idle = profile.time.idle
    if idle is None:
        return None
    s = np.asarray(starts, dtype="float64")
    e = np.asarray(ends, dtype="float64")
    ok = np.isfinite(s) & np.isfinite(e) & (e > s)
    if not ok.any():
        return 0.0
    return length(intersect(union(s[ok], e[ok]), idle))


def compute_tasks(cores: pd.Series, rows: np.ndarray | None = None) -> np.ndarray:
    """Per task (of ``rows`` if given): whether it is a kernel in the time model's split of the step -- an AI Core,
    vector, mix, AI CPU or other compute task, or one whose core is not recorded -- and not a communication op or
    task (``HCCL``, ``NOTIFY_WAIT``, ``NOTIFY_RECORD``, ``REDUCE_ASYNC_V2``...) nor a runtime task
    (``EVENT_RECORD``, ``MEMCPY_ASYNC``...). Decided once per distinct core label."""
    s = cores if isinstance(cores.dtype, pd.CategoricalDtype) else cores.astype("category")
    table = np.array([compute_bucket(str(c).strip().upper()) != "" for c in s.cat.categories] + [True], dtype=bool)
    codes = s.cat.codes.to_numpy()
    return table[codes if rows is None else codes[rows]]


_COMM_TIMES = LiveCache()
"""comm_op_times per live ``comm`` table (and its row count): several knowledge bases and the rank summary ask for
the same rank's."""


def comm_op_times(comm: pd.DataFrame) -> pd.DataFrame:
    """The ``comm`` table (one row per op x transport) -> one row per op: step, name, elapse/wait/transit/idle.
    Worked out once per table (a copy each call)."""
    return _COMM_TIMES.get(comm, len(comm), lambda: _comm_op_times(comm)).copy()


def _comm_op_times(comm: pd.DataFrame) -> pd.DataFrame:
    keys = [c for c in ("step", "op", "group", "kind", "start_us") if c in comm.columns]
    per = comm.drop_duplicates(subset=keys)
    elapse = per["elapse_us"].to_numpy(dtype="float64")
    transit = per["transit_us"].fillna(0.0).to_numpy(dtype="float64")
    wait = per["wait_us"].fillna(0.0).to_numpy(dtype="float64")
    idle = per["idle_us"].to_numpy(dtype="float64")
    idle = np.where(np.isnan(idle), np.clip(elapse - transit - wait, 0.0, None), idle)
    df = pd.DataFrame({"step": per["step"].to_numpy(dtype="float64"), "name": per["op"].astype(str).to_numpy(),
                       "elapse_us": elapse, "wait_us": wait, "transit_us": transit, "idle_us": idle})
    return df[np.isfinite(df["elapse_us"])].reset_index(drop=True)


def comm_op_names(profile: Profile, comm_cores: Iterable[str] = COMM_CORES) -> set[str]:
    """The communication op names savings of uncovered communication are attributed to: the ops of the ``comm``
    table (communication.json, CommAnalyzerTime), else the ops table's rows of a communication core; a saving on a
    collective by another name goes to :data:`OTHER_COMM_KEY`, so that every knowledge base claims the same keys and
    the score counts each microsecond once."""
    if len(profile.comm):
        return set(profile.comm["op"].astype(str).unique())
    ops = profile.ops
    if not len(ops):
        return set()
    return set(ops.loc[isin_mask(ops["core"], comm_cores), "name"].astype(str).unique())


__all__ = ["COMM_CORES", "COMPUTE_KEYS", "FREE_TIME_KEY", "OTHER_COMM_KEY", "PSEUDO_OP_BUCKETS", "UNCOVERED_KEYS",
           "comm_op_names", "comm_op_times", "compute_tasks", "covered_before", "exposed_fraction", "fmt_us",
           "idle_during", "intersect", "isin_mask", "length", "overlap", "time_of", "union", "union_length",
           "window_us"]
# covered_before, intersect, length, overlap, union, union_length (interval arithmetic, advisor.common.intervals)
# and fmt_us (how a duration reads, advisor.common.units) are the toolkit's: knowledge bases import them from here.
