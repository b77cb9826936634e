"""The steady state of a rank: which recorded steps the analysis reads, and which it reports apart.

A run's first steps are often much longer than the rest: graph and operator compilation, allocator growth, first
touch of memory, peers reaching their first collective late. A saving sized on such a step is one the run pays once,
so findings, savings and the score read the steady state -- the steps after a warm-up the data marks (a leading step
``warmup_factor`` times the median of the steps after it, ``rules/time.yaml``) -- and the warm-up is reported apart.

The analyzed steps and the device tasks the knowledge bases read must be the same steps, or every share is off by
their ratio. So:

* the steady steps that hold device tasks are analyzed, and the warm-up's tasks are left out of the ops table
  (:func:`analyzed_ops`);
* when the profile records device tasks only outside the steady state (a capture whose task timeline covers the
  warm-up step while its step trace covers ten steps, or op tables of averages over k executions without time
  stamps), the window is k times the median steady step, k the number of executions the tasks record -- the tasks
  then stand for k steps of the steady state, and the report says so.
"""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from advisor.model import Profile
    from advisor.timemodel import StepTime


def busy_us(step: StepTime) -> float:
    """A step's own device time: its window without the data-loading gap before its work (a slow input pipeline
    lengthens every step alike; it does not make a step a warm-up)."""
    return step.window_us - step.free_by_kind.get("data_loading", 0.0)


def warmup_count(steps: list[StepTime], rules: dict[str, Any]) -> int:
    """How many leading steps are warm-up: each at least ``warmup_factor`` times the median of the steps after it."""
    cfg = rules["steady_state"]
    if len(steps) < int(cfg["min_steps"]):
        return 0
    busy = [busy_us(s) for s in steps]
    n = 0
    for i in range(min(int(cfg["max_warmup_steps"]), len(steps) - 1)):
        rest = float(np.median(busy[i + 1:]))
        if rest <= 0 or busy[i] < float(cfg["warmup_factor"]) * rest:
            break
        n = i + 1
    return n


def choose(steps: list[StepTime], rules: dict[str, Any], executions: int, first_step: str | None = None,
           ) -> tuple[list[StepTime], list[tuple[StepTime, str]], dict[str, Any], list[str]]:
    """(analyzed steps, the warm-up steps left out with why, the ``steady_state`` record, notes) of a rank's
    recorded ``steps``
    in time order. ``executions``: how many steps the profile's device tasks record when no step holds them with
    time stamps (0 when there are no such tasks). ``first_step``: why the profile's first step is the program's
    first (its profiler schedule skipped nothing), when it says so."""
    n_warm = warmup_count(steps, rules)
    warm, steady = steps[:n_warm], steps[n_warm:]
    notes: list[str] = []
    info: dict[str, Any] = {"steps_recorded": len(steps), "warmup_steps": len(warm)}
    if first_step and len(steps) < int(rules["steady_state"]["min_steps"]):
        info["warmup_suspected"] = True
        notes.append(f"the only recorded step is the program's first ({first_step}): it may hold one-time warm-up "
                     "(compilation, first allocations) that no later step pays, so its savings are upper bounds; "
                     "profile steady-state steps (torch_npu.profiler.schedule(skip_first=N, wait=1, warmup=1, "
                     "active=3))")
    excluded = []
    if steady:
        median = float(np.median([busy_us(s) for s in steady]))
        info["median_step_us"] = round(median, 3)
        factor = float(rules["steady_state"]["warmup_factor"])
        for s in warm:
            excluded.append((s, f"warm-up: {busy_us(s) / 1000:.2f} ms of device time, "
                             f"{busy_us(s) / median:.1f}x the median of the steps after it ({median / 1000:.2f} ms; "
                             f"steady_state.warmup_factor {factor:g}): not analyzed"))
    with_tasks = [s for s in steady if s.tasks]
    if with_tasks:
        analyzed = with_tasks
        if len(with_tasks) < len(steady):
            notes.append(f"{len(steady) - len(with_tasks)} of {len(steady)} steady-state steps hold no device task "
                         "of this capture (only the step trace covers them): not analyzed")
    elif steady and (executions > 0 or any(s.tasks for s in warm)):
        k = max(1, executions)
        analyzed = [representative(steady, k)]
        where = ("recorded only in the warm-up step(s)" if any(s.tasks for s in warm)
                 else "recorded without time stamps")
        notes.append(f"the device tasks are {where}; they stand for {k} step(s) of the steady state: the window is "
                     f"{k} x the median steady step (step {analyzed[0].step}, {busy_us(analyzed[0]) / k / 1000:.2f} "
                     f"ms of device time, from the step trace's phases)")
    else:
        analyzed = steady
    info["steps_analyzed"] = sum(s.count for s in analyzed)
    if analyzed:
        info["analyzed"] = _range([s.step for s in analyzed])
    return analyzed, excluded, info, notes


def representative(steady: list[StepTime], k: int) -> StepTime:
    """The median steady step (by its own device time), every figure k times: it stands for k executions."""
    order = sorted(steady, key=busy_us)
    mid = order[(len(order) - 1) // 2]
    if k == 1:
        return mid

    def times(d: dict[str, float]) -> dict[str, float]:
        return {key: v * k for key, v in d.items()}

    return replace(mid, window_us=mid.window_us * k, compute_us=mid.compute_us * k,
                   compute_by_core=times(mid.compute_by_core), communication_us=mid.communication_us * k,
                   overlapped_communication_us=mid.overlapped_communication_us * k,
                   uncovered_communication_us=mid.uncovered_communication_us * k,
                   uncovered_by_kind=times(mid.uncovered_by_kind), free_us=mid.free_us * k,
                   free_by_kind=times(mid.free_by_kind), count=k)


def _range(ids: list[int | None]) -> str:
    known = [i for i in ids if i is not None]
    if not known:
        return "all"
    return str(known[0]) if len(known) == 1 else f"{known[0]}-{known[-1]} ({len(known)} steps)"


def analyzed_ops(profile: Profile) -> pd.DataFrame:
    """The ops of the analyzed steps: the warm-up's device tasks left out when steady steps hold tasks of their
    own (by the ops' step id where they carry one, else by start time inside the warm-up step)."""
    t = profile.time
    warm = [e for e in t.excluded if e.kind == "warm-up"]
    ops = profile.ops
    if not warm or not len(ops) or not any(s.tasks and s.count == 1 for s in t.steps):
        return ops
    ids = ops["step"].to_numpy(dtype="float64")
    start = ops["start_us"].to_numpy(dtype="float64")
    drop = np.zeros(len(ops), dtype=bool)
    for e in warm:
        if e.step is not None and np.isfinite(ids).any():
            drop |= ids == float(e.step)
        elif e.start_us is not None:
            drop |= (start >= e.start_us) & (start < e.start_us + e.window_us)
    if not drop.any():
        return ops
    profile.meta.notes.append(f"{int(drop.sum())} device task(s) of the warm-up step(s) "
                              f"{', '.join(str(e.step) for e in warm)} are not analyzed (see time.excluded)")
    return ops[~drop].reset_index(drop=True)


__all__ = ["analyzed_ops", "busy_us", "choose", "representative", "warmup_count"]
