"""What the device's idle time is spent on: each step's free time split by what covers its idle gaps.

Free time is a symptom with several causes, and each has its own fix: the input pipeline (a graph-mode step
trace's gap before the forward pass -- msprof's Data Aug Bound, MindSpore's ``iteration_interval`` -- or PyTorch
DataLoader / MindSpore dataset events), the host blocked in a collective or barrier, and host launch gaps (the host
dispatches the next kernel too late: Python, op compilation, synchronisation). An idle gap is given to the first of
these that covers it, in that order; an idle gap between device tasks that nothing else covers is a launch gap (the
device runs whatever is queued: it idles because the host has not queued the next task). The split is measured on
the idle gaps between device tasks and scaled to the step's free time as the profiler counted it, so the kinds
always add up to ``free_us``; where no task interval measures the gaps (a step known only from its step-trace
phases, a profiler split without task times) the free time is ``unknown``.

Pauses of the program (a gap much longer than all the device work of the capture) are outside the window and are
never split here (``advisor.timemodel``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from advisor.common.intervals import Blocks, complement, intersect, length, union
from advisor.model import Profile, label_mask

DEVICE_PROCESSES = frozenset({"Ascend Hardware", "HCCL", "Communication", "Overlap Analysis", "Step Trace"})
"""Trace processes whose events are device or analysis rows, not host activity."""


@dataclass(frozen=True)
class HostActivity:
    """Host events that explain idle device time, as unions of their intervals."""

    data_loading: Blocks
    comm_wait: Blocks


def _pattern(patterns: list[str]) -> re.Pattern[str]:
    return re.compile("|".join(f"(?:{p})" for p in patterns), re.IGNORECASE)


def event_names(rules: dict[str, Any]) -> tuple[str, ...]:
    """The event names the split reads row by row (for the trace readers' event selection)."""
    cfg = rules["free_time"]
    return tuple(f"(?i:{p})" for p in (*cfg["data_loading_events"], *cfg["comm_wait_events"]))


def host_activity(profile: Profile, rules: dict[str, Any]) -> HostActivity:
    """The host events of ``profile`` that cover idle device time, by kind."""
    ev = profile.events
    empty = (np.empty(0), np.empty(0))
    if not len(ev) or "start_us" not in ev:
        return HostActivity(empty, empty)
    host = ev[~label_mask(ev["process"], DEVICE_PROCESSES.__contains__)]
    if not len(host):
        return HostActivity(empty, empty)
    cfg = rules["free_time"]
    s = host["start_us"].to_numpy(dtype="float64")
    e = s + np.nan_to_num(host["duration_us"].to_numpy(dtype="float64"))

    def blocks(patterns: list[str]) -> Blocks:
        rx = _pattern(patterns)
        rows = label_mask(host["name"], lambda name: rx.fullmatch(name) is not None)
        return union(s[rows], e[rows])

    return HostActivity(blocks(cfg["data_loading_events"]), blocks(cfg["comm_wait_events"]))


def split(free_us: float, lo: float, hi: float, busy: Blocks, host: HostActivity,
          lead: tuple[float, float] | None = None, skip: Blocks | None = None) -> dict[str, float]:
    """``free_us`` of the step spanning ``[lo, hi)`` split by kind (``advisor.timemodel.FREE_KEYS``).

    ``busy``: device busy blocks (compute and communication); ``lead``: the step's data-loading gap before its
    forward pass, where a step trace records one; ``skip``: pauses left out of the window."""
    if free_us <= 0:
        return {}
    if not (np.isfinite(lo) and np.isfinite(hi)) or hi <= lo or not len(busy[0]):
        return {"unknown": free_us}
    covered = busy if skip is None or not len(skip[0]) else union(np.r_[busy[0], skip[0]], np.r_[busy[1], skip[1]])
    idle = complement(covered, lo, hi)
    measured = length(idle)
    if measured <= 0:
        return {"unknown": free_us}
    loading = host.data_loading
    if lead is not None and lead[1] > lead[0]:
        loading = union(np.r_[loading[0], lead[0]], np.r_[loading[1], lead[1]])
    loading_idle = intersect(idle, loading)
    rest = intersect(idle, complement(loading, lo, hi))
    waiting = length(intersect(rest, host.comm_wait))
    parts = {"data_loading": length(loading_idle), "comm_wait": waiting}
    parts["launch"] = max(0.0, measured - parts["data_loading"] - waiting)
    scale = free_us / measured  # the profiler's free time, split as the idle gaps split
    return {k: v * scale for k, v in parts.items() if v > 0}


__all__ = ["HostActivity", "event_names", "host_activity", "split"]
