"""Schedule knowledge base: how the host feeds the device.

Host-side rules read the trace events (``ctx.profile.events``: CANN API calls, Python ops, GC records...) and,
where the trace is absent, the API statistics and ``operator_details`` call stacks: online operator compilation,
stream synchronizations right after launches, SyncBatchNorm layers, slow DataLoader iterations, recorded and
conjectured GC pauses, and torch op sequences a fused torch_npu API replaces. Each is a cause whose saving is idle
device time, attributed to the ``(free time)`` pseudo-op; together they never claim more than the free time of the
rank's time model. ``schedule.fusible-ops`` reads the device ops: repeated op sequences (hashed n-grams, no
pairwise comparison) that are host bound or MTE bound -- a symptom naming the ops of the sequence, so that the
cause that explains them (a decomposed activation, an unfused chain) absorbs it.

Every rule says which execution contexts it applies to (``contexts`` in ``rules/schedule.yaml``): torch_npu advice
only for PyTorch, MindSpore's own options for MindSpore, ACL calls for an offline-model application, and nothing
about dispatch for a kernel-development capture.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection, Profile, metric_values
from advisor.platform import has_tool
from advisor.toolkit import run_context as rc
from advisor.toolkit.common import cat_lookup, cat_map, categorical, severity_for
from advisor.toolkit.free_time import free_part, within_free_time
from advisor.toolkit.sequences import related
from advisor.toolkit.time import FREE_TIME_KEY, compute_tasks, idle_during, overlap, union

FUSIBLE = "schedule.fusible-ops"

# ---------------------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------------------


def _str_codes(series: pd.Series, rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``rows``, the rank of its value as a string (missing: "") among the distinct strings, and those
    strings in order: sorting or grouping by the rank is sorting or grouping by the strings, without a Python (or
    Arrow) string per row."""
    strings, codes = cat_lookup(series, str, "")
    distinct, rank = np.unique(strings, return_inverse=True)
    return rank.astype(np.int32)[codes[rows]], distinct


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


_MTE_PIPES = ("aic_mte2", "aiv_mte2", "aic_fixpipe", "aiv_mte3")
"""The pipes whose time makes a task's MTE time (:func:`_mte_time`)."""


def _f(frame: pd.DataFrame, col: str, rows: np.ndarray | None = None) -> np.ndarray:
    """A column as float64 as the file wrote it (:func:`~advisor.model.metric_values`; all NaN if absent), at
    ``rows`` only if given."""
    if col not in frame.columns:
        return np.full(len(frame) if rows is None else len(rows), np.nan)
    return metric_values(frame[col], rows)


def _stacks(events: pd.DataFrame, rows: np.ndarray) -> list[str]:
    """Distinct ``Call stack`` args of the event rows, most frequent first."""
    if not len(rows) or "args" not in events.columns:
        return []
    args = events["args"].to_numpy(dtype=object)[rows]
    # events with equal args share one dict (advisor.ingest.timeline): each distinct object is read once, in the
    # order of its first row, so the stacks keep the order of their first row
    ids = np.fromiter(map(id, args), dtype=np.int64, count=len(args))
    _, first, times = np.unique(ids, return_index=True, return_counts=True)
    order = np.argsort(first, kind="stable")
    counts: dict[str, int] = {}
    for a, n in zip(args[first[order]], times[order].tolist(), strict=True):
        if isinstance(a, dict):
            st = a.get("Call stack") or a.get("Call Stack")
            if isinstance(st, str) and st.strip():
                counts[st] = counts.get(st, 0) + n
    return [s for s, _ in sorted(counts.items(), key=lambda kv: -kv[1])]


def _detail_stacks(profile: Profile, names: Iterable[str]) -> dict[str, str]:
    """Call stacks of torch ops from ``operator_details.csv`` (torch_npu), first one per name."""
    det = profile.extras.get("operator_details") if isinstance(profile.extras, dict) else None
    if det is None or not len(det) or "call_stack" not in det.columns:
        return {}
    wanted = set(names)
    sub = det[det["name"].astype(str).isin(wanted) & det["call_stack"].notna()]
    out: dict[str, str] = {}
    for n, st in zip(sub["name"].astype(str), sub["call_stack"].astype(str), strict=True):
        if n not in out and st.strip(" ;\n"):
            out[n] = st
    return out


def _short_stack(stack: str, lines: int = 3) -> str:
    parts = [p.strip() for p in re.split(r"[;\n]+", stack) if p.strip()]
    return "; ".join(parts[:lines]) + (" ..." if len(parts) > lines else "")


def _named(events: pd.DataFrame, names: Sequence[str]) -> np.ndarray:
    wanted = {n.lower() for n in names}
    return cat_map(events["name"], lambda c: str(c).lower() in wanted, False, bool)


def _prefixed(events: pd.DataFrame, prefix: str) -> np.ndarray:
    return cat_map(events["name"], lambda c: str(c).startswith(prefix), False, bool)


def _gc_mask(ev: pd.DataFrame, categories: Sequence[str]) -> np.ndarray:
    wanted = {c.lower() for c in categories}
    if "category" not in ev.columns:
        return np.zeros(len(ev), bool)
    return cat_map(ev["category"], lambda c: str(c).lower() in wanted, False, bool)


def _syncs_after_launch(ev: pd.DataFrame, rows: np.ndarray, sync: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The launch and synchronization ``rows`` ordered per thread by start (threads in the order of their names,
    ties kept in row order), and which of them are synchronizations right after a launch of the same thread."""
    tid = _str_codes(ev["tid"], rows)[0]
    order = np.lexsort((_f(ev, "start_us", rows), tid))
    rows, tid = rows[order], tid[order]
    is_sync = sync[rows]
    after = np.zeros(len(rows), dtype=bool)
    after[1:] = is_sync[1:] & ~is_sync[:-1] & (tid[1:] == tid[:-1])
    return rows, after


def _host_finding(ctx: AnalysisContext, rule_id: str, title: str, saving: float, basis: str, recommendation: str,
                  evidence: dict[str, Any], fix: Fix | None, confidence: float,
                  during: tuple[np.ndarray, np.ndarray] | None = None) -> Finding:
    """A host-side cause: its saving is idle device time, attributed to the free-time pseudo-op. ``during``: the
    host intervals of the work the fix removes; the saving is then at most the device's idle time inside them --
    host work the device does not wait for (it runs earlier tasks, or waits in a collective, meanwhile) is hidden,
    and removing it recovers nothing."""
    window = ctx.profile.time.window_us
    if during is not None and (idle := idle_during(ctx.profile, *during)) is not None:
        evidence = {**evidence, "device_idle_during_us": idle}
        if idle < saving:
            basis += (f"; at most the device's idle time during these host calls ({idle / 1000:.2f} ms): the rest "
                      "of their host time is hidden behind device work or waits")
            saving = idle
    return ctx.finding(rule=rule_id, title=title,
                       severity=severity_for(saving / window if window > 0 else 0.0, ctx.rules["severity"]),
                       ops=[], evidence=evidence, estimated_saving_us=saving, basis=basis,
                       recommendation=rc.unknown_context(ctx) + recommendation, fix=fix, confidence=confidence,
                       saving_by_op={FREE_TIME_KEY: saving})


def _events(ctx: AnalysisContext) -> pd.DataFrame | None:
    """The trace events this KB reads (:func:`events_read`), or None when the profile has no timeline (the
    event-based rules then do not run; ``analyze`` says so once)."""
    return ctx.profile.events if "events" in ctx.profile.available else None


def events_read(rules: Mapping[str, Any]) -> EventSelection:
    """The events the rules below read row by row, from their thresholds (each line names its reader)."""
    def exact(values: Iterable[str]) -> list[str]:  # _named: equal ignoring case
        return [f"(?i:{re.escape(str(v))})" for v in values]

    def prefixed(values: Iterable[str]) -> list[str]:  # str.startswith
        return [re.escape(str(v)) + "(?s:.*)" for v in values]

    loader = f"(?is:.*{re.escape(str(rules['dataloader']['name_contains']))}.*)"
    gap = rules["conjectured_gc"]
    return EventSelection(
        names=(*exact(rules["op_compile"]["event_names"]),  # op-compile
               *prefixed([rules["sync_stream"]["launch_prefix"], rules["sync_stream"]["sync_prefix"]]),  # sync-stream
               *exact(rules["syncbn"]["event_names"]),  # syncbn
               loader,  # dataloader, and the gaps it explains (conjectured-gc)
               *prefixed(gap["host_prefixes"]),  # conjectured-gc: host activity
               *prefixed([*rules["affinity_api"]["prefixes"], "Optimizer.step#"])),  # affinity-api
        processes=(*(re.escape(str(p)) for p in gap["host_processes"]),  # conjectured-gc: host activity
                   "(?is:.*overlap.*)"),  # device_gaps: Overlap Analysis Free
        categories=tuple(exact(rules["gc"]["categories"])))  # gc, and the gaps it explains (conjectured-gc)


# ---------------------------------------------------------------------------------------------------------
# the knowledge base
# ---------------------------------------------------------------------------------------------------------
_CAP = (" Host-side savings only shorten the step while the device waits: the host rules' savings together are "
        "at most the free time of the analyzed window (the rank's time model), and are attributed to the (free "
        "time) pseudo-op.")


class ScheduleKB(KnowledgeBase):
    id = "schedule"
    title = "Host scheduling (compilation, synchronization, data loading, GC, fusion candidates)"
    version = "2.0.0"
    api_version = "1.5"
    requires = ()
    requires_any = ("events", "ops", "api")
    ops_columns = ("aiv_time_us", *(f"{p}_{m}" for p in _MTE_PIPES for m in ("time_us", "ratio")))
    events_read = staticmethod(events_read)
    rules_file = "schedule"

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        """The checks in order, then the host causes' savings shared out of the free time (one cap for all)."""
        found = list(super().analyze(ctx))
        context = rc.context_of(ctx)
        skipped = [r.id for r in self.rules if context not in set(ctx.rules[_section(r.id)]["contexts"])]
        if skipped:
            rc.skip_note(ctx, ", ".join(skipped))
        if "events" not in ctx.profile.available:
            ctx.note("schedule: no trace events (trace_view.json / msprof_*.json): the synchronization, SyncBN, "
                     "GC and affinity-API rules did not run")
        return _share_free_time(ctx, found)

    # ------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="schedule.op-compile",
        explains={
            "overall.free-time": "the device idles while the host compiles the next op online: binary kernels remove the compilation",
        },
        title="Operators compiled online during the run",
        what="Counts calls matching op_compile.event_names in the trace (or op_compile.api_names in the API "
             "statistics) and reports them from {op_compile.min_count} calls on. Saving: "
             "{op_compile.saving_fraction} of their time." + _CAP,
        why="Each call compiles an operator for a new shape or attribute set before running it: milliseconds of "
            "host time per call while the device waits.",
        how_to_fix="PyTorch: use the precompiled binary kernels, torch_npu.npu.set_compile_mode(jit_compile=False) "
                   "(install the binary kernel package). ACL applications: compile the single ops ahead of time "
                   "(atc --singleop) and run them with aclopExecuteV2. Everywhere: keep input shapes stable and the "
                   "compile cache on.",
        thresholds=("op_compile", "severity"),
        needs=("events", "api"),
    ))
    def op_compile(self, ctx: AnalysisContext) -> list[Finding]:
        cfg = ctx.rules["op_compile"]
        if not rc.applies(ctx, cfg["contexts"]):
            return []
        ev = ctx.profile.events
        count, total, source = 0, 0.0, ""
        if len(ev):
            mask = _named(ev, cfg["event_names"])
            count, total, source = int(mask.sum()), float(np.nansum(_f(ev, "duration_us")[mask])), "trace"
        api = ctx.profile.api
        if not count and len(api):
            wanted = {n.lower() for n in cfg["api_names"]}
            rows = api[api["name"].astype(str).str.lower().isin(wanted)]
            if len(rows):
                count = int(np.nansum(_f(rows, "count")))
                total = float(np.nansum(_f(rows, "total_us")))
                source = "API statistics"
        if count < int(cfg["min_count"]):
            return []
        frac = float(cfg["saving_fraction"])
        rec, fix = _compile_advice(ctx, count)
        return [_host_finding(
            ctx, "schedule.op-compile",
            f"{plural(count, 'online operator compilation')} (aclopCompileAndExecute, {total / 1000:.1f} ms)",
            total * frac, f"time in aclopCompileAndExecute x {frac:g} (op_compile.saving_fraction: the compilation "
                          "part)", rec,
            {"calls": count, "time_us": total, "mean_us": total / count if count else None, "source": source,
             "events": list(cfg["event_names"])},
            fix, float(cfg["confidence"]))]

    # ------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="schedule.sync-stream",
        explains={
            "overall.free-time": "the host stops dispatching until the device drains: without the sync the next launches queue ahead",
        },
        title="Stream synchronized after kernel launches",
        what="Orders launch events (sync_stream.launch_prefix) and stream synchronizations "
             "(sync_stream.sync_prefix) per thread and counts synchronizations that directly follow a launch; "
             "reported when they exceed {sync_stream.min_co_occurrence_ratio} of the launches. Saving: "
             "{sync_stream.saving_fraction} of the synchronization time." + _CAP,
        why="A synchronization after each launch makes the host wait for every kernel: launches stop overlapping "
            "with execution (what ASCEND_LAUNCH_BLOCKING=1 or MindSpore's pynative_synchronize do).",
        how_to_fix="PyTorch: unset ASCEND_LAUNCH_BLOCKING; remove per-step host reads of device tensors (.item(), "
                   ".cpu(), print, torch.npu.synchronize()). MindSpore: keep pynative_synchronize off, avoid "
                   ".asnumpy() in the step. ACL applications: synchronize once per inference, not per launch.",
        thresholds=("sync_stream", "severity"),
        needs=("events",),
    ))
    def sync_stream(self, ctx: AnalysisContext) -> list[Finding]:
        cfg = ctx.rules["sync_stream"]
        ev = _events(ctx)
        if ev is None or not rc.applies(ctx, cfg["contexts"]):
            return []
        launch = _prefixed(ev, str(cfg["launch_prefix"]))
        sync = _prefixed(ev, str(cfg["sync_prefix"]))
        n_launch = int(launch.sum())
        if not n_launch or not sync.any():
            return []
        rows, after = _syncs_after_launch(ev, np.flatnonzero(launch | sync), sync)
        n_after = int(after.sum())
        ratio = n_after / n_launch
        if ratio <= float(cfg["min_co_occurrence_ratio"]) or n_after < int(cfg["min_syncs"]):
            return []
        wait = float(pd.Series(_f(ev, "duration_us", rows[after])).sum())
        frac = float(cfg["saving_fraction"])
        rec, fix = _sync_advice(ctx)
        return [_host_finding(
            ctx, "schedule.sync-stream",
            f"{plural(n_after, 'stream synchronization')} right after kernel launches ({ratio:.0%} of "
            f"{plural(n_launch, 'launch', 'launches')})",
            wait * frac, f"time of the synchronizations that follow a launch x {frac:g} (sync_stream.saving_fraction)",
            rec,
            {"launches": n_launch, "syncs_after_launch": n_after, "co_occurrence_ratio": ratio, "sync_time_us": wait,
             "ASCEND_LAUNCH_BLOCKING": rc.env_value(ctx, "ASCEND_LAUNCH_BLOCKING"),
             "events": [str(cfg["launch_prefix"]), str(cfg["sync_prefix"])]},
            fix, float(cfg["confidence"]))]

    # ------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="schedule.syncbn",
        explains={
            "overall.free-time": "a synchronous all-reduce per layer stops dispatch: plain BatchNorm removes them",
        },
        title="SyncBatchNorm in the model",
        what="Counts events named like syncbn.event_names; reported from {syncbn.min_count} on. Saving: "
             "{syncbn.saving_fraction} of their time." + _CAP,
        why="SyncBatchNorm all-reduces the batch statistics of every layer in every step: many small collectives "
            "that stall the host dispatch and the device.",
        how_to_fix="Use plain BatchNorm when the per-device batch is large enough (PyTorch: revert "
                   "torch.nn.SyncBatchNorm.convert_sync_batchnorm; MindSpore: nn.BatchNorm2d instead of "
                   "nn.SyncBatchNorm), or synchronize statistics only in the layers that need it.",
        thresholds=("syncbn", "severity"),
        needs=("events",),
    ))
    def syncbn(self, ctx: AnalysisContext) -> list[Finding]:
        cfg = ctx.rules["syncbn"]
        ev = _events(ctx)
        if ev is None or not rc.applies(ctx, cfg["contexts"]):
            return []
        mask = _named(ev, cfg["event_names"])
        count = int(mask.sum())
        if count < int(cfg["min_count"]):
            return []
        total = float(np.nansum(_f(ev, "duration_us")[mask]))
        frac = float(cfg["saving_fraction"])
        stacks = _stacks(ev, np.flatnonzero(mask))
        if rc.family(ctx) == rc.MINDSPORE:
            rec = ("Each SyncBatchNorm layer all-reduces its statistics every step. If the per-device batch is large "
                   "enough, build the network with mindspore.nn.BatchNorm2d instead of mindspore.nn.SyncBatchNorm.")
            fix = Fix("code", "replace SyncBatchNorm with BatchNorm2d",
                      {"snippet": "bn = mindspore.nn.BatchNorm2d(num_features)  # instead of nn.SyncBatchNorm"})
        else:
            rec = ("Each SyncBatchNorm layer all-reduces its statistics every step. If the per-device batch is large "
                   "enough, use plain BatchNorm (revert convert_sync_batchnorm).")
            fix = Fix("code", "replace SyncBatchNorm with BatchNorm", {"snippet": _REVERT_SYNCBN})
        return [_host_finding(
            ctx, "schedule.syncbn", f"{count} SyncBatchNorm calls (one all-reduce per layer and step)",
            total * frac, f"time of the SyncBatchNorm calls x {frac:g} (syncbn.saving_fraction)", rec,
            {"calls": count, "time_us": total, "events": list(cfg["event_names"]),
             "call_stacks": [_short_stack(s) for s in stacks[:3]]},
            fix, float(cfg["confidence"]))]

    # ------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="schedule.dataloader",
        explains={
            "overall.free-time": "the device idles while the main process loads the next batch: prefetching workers overlap it",
        },
        title="Slow DataLoader iterations",
        what="Reports PyTorch DataLoader iteration events (name containing dataloader.name_contains, from the trace "
             "or operator_details.csv) lasting {dataloader.min_duration_us} µs or more. Saving: per iteration its "
             "time beyond {dataloader.expected_us} µs (what a prefetching loader takes)." + _CAP,
        why="While __next__ runs, no step work is dispatched: the device idles.",
        how_to_fix="Load in background workers: DataLoader(num_workers>0, pin_memory=True, persistent_workers=True, "
                   "prefetch_factor>=2); move decoding and augmentation off the main process; read from local disk.",
        thresholds=("dataloader", "severity"),
        needs=("events",),
    ))
    def dataloader(self, ctx: AnalysisContext) -> list[Finding]:
        cfg = ctx.rules["dataloader"]
        if not rc.applies(ctx, cfg["contexts"]):
            return []
        key = str(cfg["name_contains"]).lower()
        limit = float(cfg["min_duration_us"])
        ev = ctx.profile.events
        names: list[str] = []
        durs = np.zeros(0)
        source = "trace"
        during = None
        if "events" in ctx.profile.available:
            mask = cat_map(ev["name"], lambda c: key in str(c).lower(), False, bool)
            d = _f(ev, "duration_us")
            mask &= d >= limit
            names, durs = cat_map(ev["name"], str, "", rows=np.flatnonzero(mask)).tolist(), d[mask]
            during = (_f(ev, "start_us")[mask], _f(ev, "start_us")[mask] + d[mask])
        else:
            det = ctx.profile.extras.get("operator_details") if isinstance(ctx.profile.extras, dict) else None
            if det is not None and len(det) and "host_total_us" in det.columns:
                d = _f(det, "host_total_us")
                det_names = det["name"].astype(object).where(det["name"].notna(), "").astype(str).to_numpy()
                mask = np.array([key in n.lower() for n in det_names], dtype=bool) & (d >= limit)
                names, durs, source = det_names[mask].tolist(), d[mask], "operator_details.csv"
        if not len(durs):
            return []
        expected = float(cfg["expected_us"])
        saving = float(np.clip(durs - expected, 0, None).sum())
        if any("singleprocess" in n.lower() for n in names):
            advice = ("The loader runs in the main process (SingleProcessDataLoaderIter): set num_workers > 0 so "
                      "batches are prepared in the background, with pin_memory=True.")
            snippet = "DataLoader(dataset, batch_size=..., num_workers=8, pin_memory=True, persistent_workers=True)"
        else:
            advice = ("Give the loader more workers and a deeper prefetch (num_workers, prefetch_factor, "
                      "persistent_workers=True, pin_memory=True); move decoding/augmentation off the critical path; "
                      "read data from local disk.")
            snippet = ("DataLoader(dataset, batch_size=..., num_workers=16, prefetch_factor=4, pin_memory=True, "
                       "persistent_workers=True)")
        return [_host_finding(
            ctx, "schedule.dataloader",
            f"{plural(len(durs), 'slow DataLoader iteration')} (longest {durs.max() / 1000:.1f} ms)",
            saving, f"per iteration: duration - {expected:g} µs (dataloader.expected_us, what a prefetching loader "
                    "takes)", advice,
            {"iterations": len(durs), "time_us": float(durs.sum()), "max_us": float(durs.max()),
             "threshold_us": limit, "source": source, "events": sorted(set(names))[:5]},
            Fix("code", "prefetch batches in background workers", {"snippet": snippet}), float(cfg["confidence"]),
            during=during)]

    # ------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="schedule.gc",
        explains={
            "overall.free-time": "the device idles while Python collects garbage: frozen or scheduled collection moves it off the step",
        },
        title="Python garbage-collection pauses",
        what="Reports GC events (category gc.categories, recorded with torch_npu's gc_detect_threshold) of "
             "{gc.min_duration_us} µs or more. Saving: {gc.saving_fraction} of the pauses." + _CAP,
        why="A full GC pass walks every Python object: tens of milliseconds during which nothing is dispatched.",
        how_to_fix="Call gc.freeze() once the model, optimizer and data loader are built, or gc.disable() and "
                   "gc.collect() between steps at a time you choose.",
        thresholds=("gc", "severity"),
        needs=("events",),
    ))
    def gc_pauses(self, ctx: AnalysisContext) -> list[Finding]:
        cfg = ctx.rules["gc"]
        ev = _events(ctx)
        if ev is None or not rc.applies(ctx, cfg["contexts"]):
            return []
        d = _f(ev, "duration_us")
        mask = _gc_mask(ev, cfg["categories"]) & (d >= float(cfg["min_duration_us"]))
        if not mask.any():
            return []
        durs = d[mask]
        starts = _f(ev, "start_us")[mask]
        order = np.argsort(-durs, kind="stable")[:int(cfg["pauses_listed"])]
        frac = float(cfg["saving_fraction"])
        snippet = "import gc\n# after building the model, optimizer and data loader:\ngc.freeze()"
        return [_host_finding(
            ctx, "schedule.gc", f"{plural(len(durs), 'Python GC pause')} ({durs.sum() / 1000:.1f} ms in total)",
            float(durs.sum()) * frac,
            f"GC pause time x {frac:g} (gc.saving_fraction: what gc.freeze() / scheduled collection removes)",
            "Python's garbage collector stopped the training loop. Call gc.freeze() once the model and data loader "
            "are built (long-lived objects leave the collected generations), or disable automatic GC and collect "
            "between steps.",
            {"pauses": len(durs), "time_us": float(durs.sum()), "max_us": float(durs.max()),
             "table": table(["start us", "duration us"], [[f"{starts[i]:.3f}", float(durs[i])] for i in order]),
             "events": ["GC"]},
            Fix("code", "freeze long-lived objects out of the GC", {"snippet": snippet}), float(cfg["confidence"]),
            during=(starts, starts + durs))]

    # ------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="schedule.conjectured-gc",
        explains={
            "overall.free-time": "the device idles while the host is silent (a GC pass or another stall): removing the stall removes the gap",
        },
        title="Long device-idle gaps with no host activity",
        what="Finds gaps between device tasks (and Overlap Analysis Free events) of {conjectured_gc.min_gap_us} µs "
             "or more in which the host issued almost no API calls (busy ratio below "
             "{conjectured_gc.max_busy_ratio}, event rate below {conjectured_gc.max_events_per_us} per us) and "
             "which recorded GC or DataLoader events do not explain. Runs whether or not GC events were recorded. "
             "Saving: {conjectured_gc.saving_fraction} of the gap time (the cause is conjectured)." + _CAP,
        why="A long gap with a silent host is typically a Python GC pass or another host-side stall the profiler "
            "did not record.",
        how_to_fix="Record GC with the profiler (torch_npu: experimental config gc_detect_threshold) to confirm; "
                   "apply gc.freeze() / scheduled gc.collect(); look for blocking host work (I/O, logging) in the "
                   "step.",
        thresholds=("conjectured_gc", "gc", "dataloader", "severity"),
        needs=("events", "ops"),
    ))
    def conjectured_gc(self, ctx: AnalysisContext) -> list[Finding]:
        cfg = ctx.rules["conjectured_gc"]
        ev = _events(ctx)
        if ev is None or not rc.applies(ctx, cfg["contexts"]):
            return []
        gs, ge = device_gaps(ctx.profile)
        if not len(gs):
            return []
        min_gap = float(cfg["min_gap_us"])
        long = (ge - gs) >= min_gap
        if not long.any():
            return []
        gs, ge = gs[long], ge[long]
        procs = set(cfg["host_processes"])
        prefixes = tuple(cfg["host_prefixes"])
        host = cat_map(ev["process"], lambda c: str(c) in procs, False, bool) | \
            cat_map(ev["name"], lambda c: str(c).startswith(prefixes), False, bool)
        hs = _f(ev, "start_us")[host]
        he = np.nan_to_num(_f(ev, "duration_us")[host], copy=False)
        he += hs
        del host
        hbs, hbe = union(hs, he)
        del he
        busy = overlap(hbs, hbe, gs, ge)
        del hbs, hbe
        finite = np.isfinite(hs)
        hs = hs if finite.all() else hs[finite]
        hs.sort()
        count = np.searchsorted(hs, ge) - np.searchsorted(hs, gs)
        del hs, finite
        length = ge - gs
        quiet = (busy / length < float(cfg["max_busy_ratio"])) & \
            (count / length < float(cfg["max_events_per_us"]))
        # gaps explained by recorded GC or dataloader events are reported by those rules
        gc_recorded = _gc_mask(ev, ctx.rules["gc"]["categories"])
        loader = str(ctx.rules["dataloader"]["name_contains"]).lower()
        explained_by = gc_recorded | cat_map(ev["name"], lambda c: loader in str(c).lower(), False, bool)
        es = _f(ev, "start_us")[explained_by]
        ebs, ebe = union(es, es + _f(ev, "duration_us")[explained_by])
        explained = overlap(ebs, ebe, gs, ge) / length >= float(cfg["explained_ratio"])
        sel = quiet & ~explained
        if not sel.any():
            return []
        frac = float(cfg["saving_fraction"])
        gap_time = float(length[sel].sum())
        order = np.argsort(-length[sel], kind="stable")[:int(ctx.rules["gc"]["pauses_listed"])]
        rows = [[f"{gs[sel][i]:.3f}", float(length[sel][i]), float(busy[sel][i]), int(count[sel][i])] for i in order]
        recorded = bool(gc_recorded.any())
        record = ("experimental_config = torch_npu.profiler._ExperimentalConfig(gc_detect_threshold=1)  # ms\n"
                  if rc.family(ctx) == rc.TORCH else "")
        how = ("Record GC with gc_detect_threshold to confirm, and call gc.freeze() after setup."
               if record else "Call gc.freeze() after setup and look for blocking host work (I/O, logging) in the "
                              "loop.")
        return [_host_finding(
            ctx, "schedule.conjectured-gc",
            f"{plural(int(sel.sum()), 'device-idle gap')} of {min_gap / 1000:g} ms or more with a silent host "
            f"({gap_time / 1000:.1f} ms)",
            gap_time * frac, f"gap time x {frac:g} (conjectured_gc.saving_fraction: the cause is conjectured, not "
                             "recorded)",
            "The device idled and the host made almost no API calls: typically a Python GC pass or a blocking host "
            "operation. " + ("Some GC pauses were recorded, but not in these gaps. " if recorded else "") + how,
            {"gaps": int(sel.sum()), "gap_time_us": gap_time, "gc_events_recorded": recorded,
             "events": [f"device idle {r[1] / 1000:.1f} ms from {r[0]} µs" for r in rows],
             "table": table(["start us", "gap us", "host busy us", "host events"], rows)},
            Fix("code", "freeze long-lived objects out of the GC",
                {"snippet": record + "import gc; gc.freeze()  # after building the model and data loader"}),
            float(cfg["confidence"]))]

    # ------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="schedule.affinity-api",
        explains={
            "schedule.fusible-ops": "the fused API replaces this sequence with one kernel",
            "overall.free-time": "one fused call instead of several dispatches: the device idle time during their dispatch goes",
        },
        title="Torch op sequences with a fused torch_npu API",
        what="Matches the first-level torch ops of each host thread (events with affinity_api.prefixes not nested "
             "in another) against affinity_api.rules (op-name token sequences such as pow? mean? add? rsqrt mul -> "
             "torch_npu.npu_rms_norm) and Optimizer.step#<Name>.step events against affinity_api.optimizers; "
             "reports each API with its matches and the call stacks recorded with them (trace 'Call stack', else "
             "operator_details.csv). PyTorch runs only. Saving: {affinity_api.saving_fraction} of the matched ops' "
             "host time." + _CAP,
        why="Each torch op is one host dispatch and at least one kernel; the fused API does the same work in one "
            "launch without writing intermediates to HBM.",
        how_to_fix="Replace the code at the call stacks with the fused API (e.g. torch_npu.npu_rms_norm(x, weight, "
                   "eps), torch_npu.optim.NpuFusedAdamW); profile with with_stack=True to get the call stacks.",
        thresholds=("affinity_api", "severity"),
        needs=("events",),
    ))
    def affinity_api(self, ctx: AnalysisContext) -> list[Finding]:
        cfg = ctx.rules["affinity_api"]
        ev = _events(ctx)
        if ev is None or not rc.applies(ctx, cfg["contexts"]):
            return []
        matches = _sequence_matches(ev, cfg)
        _optimizer_matches(ev, cfg, matches)
        frac = float(cfg["saving_fraction"])
        durs = _f(ev, "duration_us")
        out = []
        for api, rec in matches.items():
            matched = np.zeros(len(ev), dtype=bool)  # the rows of every match, each once, in order
            for r in rec["rows"]:
                matched[r] = True
            rows = np.flatnonzero(matched)
            del matched
            host_us = float(np.nansum(durs[rows]))
            starts = _f(ev, "start_us")[rows]
            stacks = _stacks(ev, rows)
            source = "trace"
            if not stacks:
                found = _detail_stacks(ctx.profile, cat_map(ev["name"], str, "", rows=rows))
                stacks = list(dict.fromkeys(found.values()))
                source = "operator_details.csv" if stacks else "none recorded"
            seqs = sorted(rec["sequences"].items(), key=lambda kv: -kv[1])
            where = (f" at {_short_stack(stacks[0])}" if stacks
                     else " (no call stack recorded: profile with with_stack=True to locate it)")
            note = f" Note: {rec['note']}." if rec.get("note") else ""
            out.append(_host_finding(
                ctx, "schedule.affinity-api",
                f"{api} can replace {plural(rec['count'], 'call sequence')} ({seqs[0][0]})",
                host_us * frac, f"host time of the matched torch ops x {frac:g} (affinity_api.saving_fraction: one "
                                "fused call instead of several)",
                f"Replace {seqs[0][0]}{where} with {api}.{note}",
                {"api": api, "matches": rec["count"], "host_time_us": host_us, "sequences": dict(seqs[:5]),
                 "call_stacks": [_short_stack(s, 6) for s in stacks[:5]], "stack_source": source,
                 "events": sorted({str(n) for n in cat_map(ev["name"], str, "", rows=rows)})},
                Fix("code", f"use {api}", {"api": api, "replaces": [s for s, _ in seqs[:5]],
                                           **({"snippet": rec["snippet"]} if rec.get("snippet") else {})}),
                float(cfg["confidence"]), during=(starts, starts + durs[rows])))
        return out

    # ------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id=FUSIBLE,
        title="Repeated op sequences that are host bound or MTE bound",
        what="Hashes every op-type sequence (type and shapes) of {fusible.min_length} to {fusible.max_length} "
             "consecutive compute tasks (a communication or runtime task -- an HCCL op, a notify wait or record, "
             "an event --, tasks on fusible.break_cores, kernels of fusible.no_saving_types and idle gaps over "
             "{fusible.max_launch_gap_us} µs break sequences) and keeps those occurring more than "
             "{fusible.min_occurrences} times without overlap that cover more than {fusible.min_step_share} of the "
             "analyzed window or are MTE bound, and that are host bound (kernel time / wall span below "
             "{fusible.host_bound_ratio}) or MTE bound ((MTE2 + MTE3/fixpipe time) / AI Core time above "
             "{fusible.mte_bound_ratio}). The best sequences, each sharing at most {fusible.max_overlap} of its tasks "
             "with better ones, are gathered into fusion opportunities, at most {fusible.top_num}: "
             "sequences whose op types are the same (other shapes), a rotation of one another (the same loop "
             "entered at another op) or a sub-sequence of one another (a part of the same chain), whose "
             "occurrences lie within a few tasks of one another in a run no break interrupts (a chain longer than "
             "{fusible.max_length}), or whose occurrences share tasks, are one opportunity and one finding, named after the longest sequence "
             "('and Nx in part': the occurrences of its parts). Saving, over the union of the opportunity's tasks "
             "(each counted once): {fusible.host_saving_fraction} of the gaps inside the occurrences (free time) "
             "plus {fusible.mte_saving_fraction} of the kernel time of the ops fusion can merge (per op).",
        why="Host bound: the device waits between the kernels for the host to launch the next. MTE bound: the "
            "kernels mostly move intermediate tensors through HBM. One fused kernel removes both costs. It is a "
            "symptom: the finding that names the cause on the same ops (a decomposed activation, an unfused "
            "chain) absorbs it.",
        how_to_fix="Fuse the sequence the way the run allows: a fused torch_npu API or graph mode (PyTorch), graph "
                   "kernel fusion (MindSpore), the build's fusion passes or a fused custom operator (offline "
                   "models).",
        thresholds=("fusible", "severity"),
        needs=("ops",),
        role="symptom",
    ))
    def fusible_ops(self, ctx: AnalysisContext) -> list[Finding]:
        cfg = ctx.rules["fusible"]
        ops = ctx.profile.ops
        if not len(ops) or not rc.applies(ctx, cfg["contexts"]):
            return []
        if not np.isfinite(_f(ops, "start_us")).any():
            ctx.note("schedule.fusible-ops: skipped, the ops have no start times")
            return []
        window = ctx.profile.time.window_us
        opportunities = find_sequences(ops, cfg, window)
        if not opportunities:
            return []
        order = np.argsort(_f(ops, "start_us"), kind="stable")  # positions are in start order
        return [_fusible_finding(ctx, opp, order, window) for opp in opportunities]


def _section(rule_id: str) -> str:
    """The rules-file section of a rule (``schedule.op-compile`` -> ``op_compile``)."""
    return {"schedule.gc": "gc", "schedule.conjectured-gc": "conjectured_gc", FUSIBLE: "fusible"}.get(
        rule_id, rule_id.split(".", 1)[1].replace("-", "_"))


def _share_free_time(ctx: AnalysisContext, findings: list[Finding]) -> list[Finding]:
    """The host causes together claim at most the free time of the window; the fusible sequences' free-time parts
    (host-bound gaps) get what the causes leave."""
    t = ctx.profile.time
    levels = ctx.rules["severity"]
    causes = within_free_time([f for f in findings if f.rule != FUSIBLE], t.free_us, t.window_us, levels)
    left = max(0.0, t.free_us - sum(free_part(f) for f in causes))
    fusible = within_free_time([f for f in findings if f.rule == FUSIBLE], left, t.window_us, levels)
    by_id = {id(f): g for f, g in zip([f for f in findings if f.rule != FUSIBLE], causes, strict=True)}
    by_id.update({id(f): g for f, g in zip([f for f in findings if f.rule == FUSIBLE], fusible, strict=True)})
    return [by_id[id(f)] for f in findings]


# ---------------------------------------------------------------------------------------------------------
# advice fitted to the run
# ---------------------------------------------------------------------------------------------------------
_REVERT_SYNCBN = ("def revert_sync_batchnorm(module):\n"
                  "    out = module\n"
                  "    if isinstance(module, torch.nn.SyncBatchNorm):\n"
                  "        out = torch.nn.BatchNorm2d(module.num_features, module.eps, module.momentum, module.affine,\n"
                  "                                   module.track_running_stats)\n"
                  "        if module.affine:\n"
                  "            out.weight, out.bias = module.weight, module.bias\n"
                  "        out.running_mean, out.running_var = module.running_mean, module.running_var\n"
                  "        out.num_batches_tracked = module.num_batches_tracked\n"
                  "    for name, child in module.named_children():\n"
                  "        out.add_module(name, revert_sync_batchnorm(child))\n"
                  "    return out")


def _compile_advice(ctx: AnalysisContext, count: int) -> tuple[str, Fix | None]:
    lead = f"Operators were compiled {count} times while the model ran. "
    fam = rc.family(ctx)
    if fam == rc.TORCH:
        snippet = "torch_npu.npu.set_compile_mode(jit_compile=False)"
        return (lead + f"Put {snippet} at the start of the script (binary kernels need the CANN kernel package) "
                "and keep input shapes stable.",
                Fix("code", "use binary kernels instead of online compilation", {"snippet": snippet}))
    if fam == rc.OM and has_tool(ctx.platform, "atc"):
        return (lead + "The application runs single operators compiled on the fly: compile them ahead of time with "
                "ATC's single-op mode (atc --singleop=op_list.json --output=op_models --soc_version=...), load "
                "them with aclopSetModelDir and run them with aclopExecuteV2, with input shapes the compiled set "
                "covers.",
                Fix("code", "compile the single operators offline",
                    {"snippet": "atc --singleop=op_list.json --output=op_models --soc_version=<soc>\n"
                                "// at start-up: aclopSetModelDir(\"op_models\"); per call: aclopExecuteV2(...)"}))
    return (lead + "Keep input shapes to a few fixed sizes so compiled operators are reused, and keep the "
            "operator compile cache on (ACL_OP_COMPILER_CACHE_MODE=enable).",
            Fix("env", "keep the operator compile cache on", {"env": {"ACL_OP_COMPILER_CACHE_MODE": "enable"}},
                "export ACL_OP_COMPILER_CACHE_MODE=enable"))


def _sync_advice(ctx: AnalysisContext) -> tuple[str, Fix]:
    fam = rc.family(ctx)
    if fam == rc.MINDSPORE:
        return ("The host waits for each kernel after launching it, so launches stop overlapping with execution. "
                "Keep pynative_synchronize off (mindspore.set_context(pynative_synchronize=False), its default) and "
                "remove per-step .asnumpy() calls and tensor prints from the step.",
                Fix("code", "launch asynchronously",
                    {"snippet": "mindspore.set_context(pynative_synchronize=False)\n"
                                "# avoid in the step loop: loss.asnumpy(), print(tensor)"}))
    if fam == rc.OM:
        return ("The application synchronizes the stream right after launching work, so host and device never "
                "overlap. Queue the whole inference (aclmdlExecuteAsync / the kernel launches) and call "
                "aclrtSynchronizeStream once, just before the outputs are read.",
                Fix("code", "synchronize once per inference, not per launch",
                    {"snippet": "aclmdlExecuteAsync(model_id, input, output, stream);\n"
                                "// ... queue the next copies / work ...\n"
                                "aclrtSynchronizeStream(stream);  // once, before reading the output"}))
    blocking = (rc.env_value(ctx, "ASCEND_LAUNCH_BLOCKING") or "").lower() in ("1", "true")
    cause = "ASCEND_LAUNCH_BLOCKING=1 is set in the profiled environment: " if blocking else ""
    rec = (f"{cause}the host waits for each kernel after launching it, so launches stop overlapping with "
           "execution. Unset ASCEND_LAUNCH_BLOCKING and remove .item()/.cpu()/synchronize() calls from the step.")
    rec = rec[:1].upper() + rec[1:]
    if blocking:
        return rec, Fix("env", "run kernels asynchronously: ASCEND_LAUNCH_BLOCKING=0", {"ASCEND_LAUNCH_BLOCKING": "0"},
                        "unset ASCEND_LAUNCH_BLOCKING")
    return rec, Fix("code", "remove per-step host reads of device tensors",
                    {"snippet": "# avoid in the step loop: loss.item(), tensor.cpu(), print(tensor), "
                                "torch.npu.synchronize()"})


def _fusion_advice(ctx: AnalysisContext, pattern: str, times: int, kinds: str) -> str:
    lead = rc.unknown_context(ctx) + f"The sequence {pattern} runs {times} times and is {kinds}: "
    context = rc.context_of(ctx)
    fam = rc.family(ctx)
    if context == "torch-graph":
        return lead + ("graph mode did not fuse it. Replace it with a fused torch_npu API if one exists (see the "
                       "affinity-API findings) or a fused custom operator.")
    if fam == rc.TORCH:
        return lead + ("replace it with a fused torch_npu API if one exists (see the affinity-API findings), run it "
                       "in graph mode (torch.compile with the TorchAir backend) so it gets fused, or write a fused "
                       "kernel.")
    if context == "mindspore-pynative":
        return lead + ("run the step in graph mode (mindspore.jit) with graph kernel fusion "
                       "(mindspore.set_context(enable_graph_kernel=True)), or use a fused operator.")
    if fam == rc.MINDSPORE:
        return lead + ("enable graph kernel fusion (mindspore.set_context(enable_graph_kernel=True)) or use a fused "
                       "operator for it.")
    if fam == rc.OM:
        return lead + ("the model's build did not fuse it. Check the findings that name a cause on these ops (a "
                       "disabled fusion pass, a decomposed activation); otherwise implement the sequence as one "
                       "custom operator.")
    return lead + "fuse it into one kernel (a fused operator, or the framework's graph fusion)."


# ---------------------------------------------------------------------------------------------------------
# schedule.conjectured-gc
# ---------------------------------------------------------------------------------------------------------
def device_gaps(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """Idle gaps between device task blocks, plus Overlap Analysis ``Free`` events, merged."""
    ops = profile.ops
    gs, ge = np.zeros(0), np.zeros(0)
    if len(ops):
        s = _f(ops, "start_us")
        bs, be = union(s, s + _f(ops, "duration_us"))
        if len(bs) > 1:
            gs, ge = be[:-1], bs[1:]
        del bs, be  # views of them may live on as the gaps
    ev = profile.events
    if len(ev):
        free = cat_map(ev["name"], lambda c: str(c) == "Free", False, bool)
        free &= cat_map(ev["process"], lambda c: "overlap" in str(c).lower(), False, bool)
        if free.any():
            fs = _f(ev, "start_us")[free]
            gs = np.concatenate([gs, fs])
            ge = np.concatenate([ge, fs + _f(ev, "duration_us")[free]])
    if not len(gs):
        return gs, ge
    return union(gs, ge)


# ---------------------------------------------------------------------------------------------------------
# schedule.affinity-api
# ---------------------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"^(?P<alt>[A-Za-z0-9_.|]+?)(?P<q>\?|\{\d+,\d+\})?$")
THREAD_BREAK = "\x00"
"""Between the ops of two threads in the text the patterns scan: no token matches it."""
OTHER_OP = "\x01"
"""The letter of every op no pattern names."""


def parse_pattern(tokens: Sequence[str]) -> list[tuple[list[str], str]]:
    """Token list (``name``, ``a|b``, ``name?``, ``name{0,2}``) -> (op names, quantifier) per token; ValueError
    on a token that is not one."""
    parts = []
    for tok in tokens:
        m = _TOKEN.match(str(tok).strip())
        if not m:
            raise ValueError(f"bad affinity pattern token {tok!r}")
        parts.append((m.group("alt").split("|"), m.group("q") or ""))
    return parts


def op_alphabet(patterns: Iterable[Sequence[str]]) -> dict[str, str]:
    """One letter per op name the patterns mention (every other op is :data:`OTHER_OP`): the first-level ops of
    a rank become one character each, so the patterns scan a string as long as the op count."""
    names = dict.fromkeys(n for tokens in patterns for alts, _ in parse_pattern(tokens) for n in alts)
    return {name: _letter(i) for i, name in enumerate(names)}


def _letter(i: int) -> str:
    code = i + 2  # after THREAD_BREAK and OTHER_OP
    return chr(code if code < 0xD800 else code + 0x800)  # never a surrogate


def compile_pattern(tokens: Sequence[str], alphabet: Mapping[str, str]) -> re.Pattern[str]:
    """Token list -> regex over ops written one letter each in ``alphabet`` (:func:`op_alphabet`)."""
    parts = []
    for alts, q in parse_pattern(tokens):
        letters = "".join(re.escape(alphabet[a]) for a in dict.fromkeys(alts))
        parts.append(f"[{letters}]{q}")
    return re.compile("".join(parts))


@dataclass
class TopOps:
    """First-level torch ops in time order per thread (threads in the order of their names)."""

    rows: np.ndarray
    """Event row of each op."""
    tids: np.ndarray
    """Thread of each op, as the rank of its name (:func:`_str_codes`)."""
    ops: np.ndarray
    """Op of each event, an index into ``names``."""
    names: np.ndarray
    """Op names (``aten::`` and other namespaces dropped), one per distinct op."""


def first_level(events: pd.DataFrame, prefixes: Sequence[str]) -> TopOps:
    """Torch-op events not nested in another torch-op event of the same thread, in time order per thread (ends
    descending for equal starts, so that the enclosing op comes first)."""
    rows = np.flatnonzero(cat_map(events["name"], lambda c: str(c).startswith(tuple(prefixes)), False, bool))
    rows = rows.astype(np.int32 if len(events) < 2**31 else np.int64)
    op_names, codes = cat_lookup(events["name"], lambda c: str(c).split("::", 1)[-1], "")
    op_of_name, names = pd.factorize(op_names)  # one op id per distinct op (aten::add and add are one)
    names = np.asarray(names, dtype=object)
    if not len(rows):
        return TopOps(rows, rows, rows, names)
    start = _f(events, "start_us", rows)
    end = start + np.nan_to_num(_f(events, "duration_us", rows), copy=False)
    tid = _str_codes(events["tid"], rows)[0]
    order = np.lexsort((-end, start, tid))
    rows, start, end, tid = rows[order], start[order], end[order], tid[order]
    del order
    keep = np.ones(len(rows), dtype=bool)
    for a, b in zip(*_bounds(tid), strict=True):  # per thread: nested in the latest end among the earlier ops
        # (NaN start times sort last and compare false: a NaN the running max carries on changes nothing)
        prev_end = np.maximum.accumulate(end[a:b - 1])
        keep[a + 1:b] = ~((start[a + 1:b] < prev_end) & (end[a + 1:b] <= prev_end))
    del start, end
    rows = rows[keep]
    return TopOps(rows, tid[keep], op_of_name.astype(np.int32)[codes[rows]], names)


def _bounds(sorted_codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Where each run of equal values of ``sorted_codes`` begins and ends."""
    begin = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
    return begin, np.r_[begin[1:], len(sorted_codes)]


def _ranges(first: np.ndarray, last: np.ndarray) -> np.ndarray:
    """The indices of the ranges ``first[k]:last[k]``, one after the other."""
    lengths = last - first
    return np.repeat(first - np.r_[0, np.cumsum(lengths)[:-1]], lengths) + np.arange(lengths.sum())


def _sequence_matches(ev: pd.DataFrame, cfg: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Fused API -> its matches among the first-level torch ops: count, event rows (arrays), matched sequences."""
    matches: dict[str, dict[str, Any]] = {}
    top = first_level(ev, cfg["prefixes"])
    if not len(top.rows):
        return matches
    # one letter per op, threads separated by a letter no pattern matches (op_alphabet); built as code points
    # from one letter per distinct op (a Python string per event would take ~300 MB at 2M events)
    op_codes, op_names, top_rows = top.ops, top.names, top.rows
    tid_change = np.r_[False, top.tids[1:] != top.tids[:-1]]
    specs = [(str(spec["api"]), pattern, spec) for spec in cfg["rules"] for pattern in spec["patterns"]]
    alphabet = op_alphabet(pattern for _, pattern, _ in specs)
    name_of_letter = {letter: name for name, letter in alphabet.items()}
    letter_of_op = np.array([ord(alphabet.get(str(n), OTHER_OP)) for n in op_names], dtype=np.uint32)
    points = np.insert(letter_of_op[op_codes], np.flatnonzero(tid_change), np.uint32(ord(THREAD_BREAK)))
    text = points.tobytes().decode("utf-32-le")
    del points
    # where each op's letter is: its index plus the thread breaks before it
    own = np.arange(len(op_codes), dtype=np.int64) + np.cumsum(tid_change)
    for api, pattern, spec in specs:
        bounds = np.fromiter((i for m in compile_pattern(pattern, alphabet).finditer(text) if m.end() != m.start()
                              for i in m.span()), dtype=np.int64).reshape(-1, 2)
        if not len(bounds):
            continue
        first = np.searchsorted(own, bounds[:, 0], side="left")
        last = np.searchsorted(own, bounds[:, 1], side="left")
        rec = matches.setdefault(api, {"count": 0, "rows": [], "sequences": {}, "note": spec.get("note"),
                                       "snippet": spec.get("snippet")})
        rec["count"] += len(bounds)
        rec["rows"].append(top_rows[_ranges(first, last)].astype(np.int64))
        seqs = rec["sequences"]  # counted by the matched letters, each distinct one spelt out once
        for letters, n in Counter(text[a:b] for a, b in bounds.tolist()).items():
            seq = "-".join(name_of_letter[ch] for ch in letters)
            seqs[seq] = seqs.get(seq, 0) + n
    return matches


def _optimizer_matches(ev: pd.DataFrame, cfg: Mapping[str, Any], matches: dict[str, dict[str, Any]]) -> None:
    """``Optimizer.step#<Name>.step`` events whose optimizer has a fused torch_npu version, added to ``matches``."""
    optimizers: Mapping[str, str] = cfg["optimizers"]
    if not optimizers:
        return
    opt = cat_map(ev["name"], lambda c: str(c).startswith("Optimizer.step#"), False, bool)
    for r in np.flatnonzero(opt):
        kind = str(ev["name"].iat[r]).split("#", 1)[1]
        api = optimizers.get(kind)
        if api:
            rec = matches.setdefault(api, {"count": 0, "rows": [], "sequences": {}, "note": None,
                                           "snippet": f"optimizer = {api}(model.parameters(), lr=lr)"})
            rec["count"] += 1
            rec["rows"].append(np.array([r], dtype=np.int64))
            rec["sequences"][kind] = rec["sequences"].get(kind, 0) + 1


# ---------------------------------------------------------------------------------------------------------
# schedule.fusible-ops
# ---------------------------------------------------------------------------------------------------------
_PRIME = np.uint64(1099511628211)


@dataclass
class Sequence_:
    """One repeated op sequence: where its non-overlapping occurrences start and what they cost."""

    length: int
    positions: np.ndarray
    span_us: float
    kernel_us: float
    mte_us: float
    aicore_us: float
    host_bound: bool
    mte_bound: bool
    host_saving_us: float
    mte_saving_us: float
    labels: tuple[str, ...] = ()
    """What the sequence shows for each op (:func:`op_labels`: its type, else its name)."""

    @property
    def saving_us(self) -> float:
        return self.host_saving_us + self.mte_saving_us


_CHUNK = 1 << 18
"""Tasks per chunk where a per-task quantity is only needed summed (:func:`_prefix_sums`)."""


def _pipe_time(col: Callable[[str], np.ndarray], pipe: str) -> np.ndarray:
    """A pipe's time per task: its own column, else its ratio x the time of its core (AI Core or AI Vector)."""
    t = col(f"{pipe}_time_us")
    base = col("aiv_time_us" if pipe.startswith("aiv_") else "aicore_time_us")
    return np.where(np.isnan(t), col(f"{pipe}_ratio") * base, t)


def _mte2_time(col: Callable[[str], np.ndarray]) -> np.ndarray:
    aic_mte2, aiv_mte2 = _MTE_PIPES[:2]
    return np.fmax(_pipe_time(col, aic_mte2), _pipe_time(col, aiv_mte2))


def _mte_time(ops: pd.DataFrame, rows: np.ndarray, prefixed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Per task of ``rows``: MTE time (max(aic_mte2, aiv_mte2) + max(aic_fixpipe, aiv_mte3)) and AI Core time.
    Without a prefixed MTE2 time on any task (``prefixed`` False), the unprefixed ratios (310P) x AI Core time."""

    def col(name: str) -> np.ndarray:
        return _f(ops, name, rows)

    aicore = col("aicore_time_us")
    aicore = np.where(np.isnan(aicore), col("aiv_time_us"), aicore)
    if prefixed:
        aic_out, aiv_out = _MTE_PIPES[2:]
        mte2, out = _mte2_time(col), np.fmax(_pipe_time(col, aic_out), _pipe_time(col, aiv_out))
    else:
        mte2, out = col("mte2_ratio") * aicore, col("mte3_ratio") * aicore
    return np.nan_to_num(mte2) + np.nan_to_num(out), aicore


def _prefixed_mte2(ops: pd.DataFrame) -> bool:
    """Whether any task has a prefixed MTE2 time (aic_mte2 / aiv_mte2, or their ratios x core time)."""
    for a in range(0, len(ops), _CHUNK):
        rows = np.arange(a, min(a + _CHUNK, len(ops)))
        if not np.isnan(_mte2_time(lambda name, rows=rows: _f(ops, name, rows))).all():
            return True
    return False


def _prefix_sums(ops: pd.DataFrame, order: np.ndarray, no_saving_types: Iterable[str]) -> dict[str, np.ndarray]:
    """Prefix sums over the tasks in ``order`` of duration, MTE time, AI Core time and the duration of the ops
    fusion can merge: an occurrence's sum is the difference of two. Built a chunk at a time, each continuing the
    running sum, so that no per-task column is kept beside them (the same numbers as one cumulative sum)."""
    n = len(order)
    sums = {name: np.zeros(n + 1) for name in ("dur", "mte", "aic", "fus")}
    heavy, type_codes = cat_lookup(ops["type"], lambda c: str(c) in set(no_saving_types), False, bool)
    prefixed = _prefixed_mte2(ops)
    for a in range(0, n, _CHUNK):
        rows = order[a:a + _CHUNK]
        dur = np.nan_to_num(_f(ops, "duration_us", rows))
        mte, aicore = _mte_time(ops, rows, prefixed)
        fus = np.where(heavy[type_codes[rows]], 0.0, dur)
        for name, v in (("dur", dur), ("mte", mte), ("aic", aicore), ("fus", fus)):
            c = sums[name]
            np.cumsum(np.r_[c[a], np.nan_to_num(v)], out=c[a:a + len(rows) + 1])
    return sums


def non_overlapping(h: np.ndarray, pos: np.ndarray, length: int) -> np.ndarray:
    """Rows sorted by (sequence hash, position): True for the occurrences a left-to-right scan keeps so that no
    two kept occurrences of a sequence overlap (``A A A A`` holds ``A A`` twice, not three times).

    Sequences whose occurrences never overlap are kept whole with numpy; only the others are scanned."""
    n = len(h)
    keep = np.ones(n, dtype=bool)
    if n < 2:
        return keep
    same = h[1:] == h[:-1]
    close = same & (np.diff(pos) < length)
    if not close.any():
        return keep
    group_start = np.r_[0, np.flatnonzero(~same) + 1]
    group_end = np.r_[group_start[1:], n]
    scanned = np.unique(np.searchsorted(group_start, np.flatnonzero(close) + 1, side="right") - 1)
    for g in scanned.tolist():
        a, b = int(group_start[g]), int(group_end[g])
        free = -1
        for i, p in enumerate(pos[a:b].tolist(), start=a):
            if p >= free:
                free = p + length
            else:
                keep[i] = False
    return keep


def _codes_of(series: pd.Series, order: np.ndarray) -> np.ndarray:
    return categorical(series).cat.codes.to_numpy()[order].astype(np.int64)


def op_keys(ops: pd.DataFrame, order: np.ndarray) -> np.ndarray:
    """One id per distinct (op type, input shapes, output shapes) of the rows in ``order``, numbered by first
    appearance; the op name stands in for a missing type (Level0 kernel_details write N/A types)."""
    t = _codes_of(ops["type"], order)
    n_types = int(t.max()) + 1 if len(t) else 0
    key = np.where(t >= 0, t, _codes_of(ops["name"], order) + n_types + 1)
    del t
    for col in ("input_shapes", "output_shapes"):  # one pair at a time: the ids stay below the row count
        key *= len(categorical(ops[col]).cat.categories) + 1
        key += _codes_of(ops[col], order) + 1
        key = pd.factorize(key)[0]
    return key


def op_labels(ops: pd.DataFrame, rows: np.ndarray) -> np.ndarray:
    """What a sequence shows for each op of ``rows``: its type, else its name."""
    types = cat_map(ops["type"], str, "", rows=rows)
    names = cat_map(ops["name"], str, "?", rows=rows)
    return np.where(types == "", names, types)


def _runs(hs: np.ndarray) -> np.ndarray:
    """Where each run of equal values of the sorted ``hs`` begins."""
    return np.flatnonzero(np.r_[True, hs[1:] != hs[:-1]])


def _hashes(keys: np.ndarray, length: int) -> np.ndarray:
    """Hash of the op sequence of ``length`` starting at each position: ``h * PRIME + key`` over its op keys, mod
    2**64 (the same numbers as extending the hashes of ``length - 1`` by one key; none kept between lengths)."""
    m = len(keys) - length + 1
    h = keys[:m].astype(np.uint64)
    for j in range(1, length):
        h *= _PRIME
        h += keys[j:j + m]
    return h


@dataclass
class _Occurrences:
    """The occurrences of the repeated sequences of one length: by sequence (hash order), then position."""

    positions: np.ndarray
    begin: np.ndarray
    """Where each sequence's occurrences begin in ``positions``."""
    hashes: np.ndarray
    """Each sequence's hash (ascending)."""

    def ranges(self, hashes: np.ndarray) -> Iterator[tuple[int, int]]:
        """Where the occurrences of each of ``hashes`` (some of this length's) lie in ``positions``."""
        k = np.searchsorted(self.hashes, hashes)
        end = np.r_[self.begin[1:], len(self.positions)]
        return zip(self.begin[k].tolist(), end[k].tolist(), strict=True)


def _occurrences(keys: np.ndarray, valid: np.ndarray, length: int, min_occ: int) -> _Occurrences | None:
    """The occurrences of the sequences of ``length`` (``valid``: no break inside) seen more than ``min_occ``
    times, none overlapping another of its sequence; None without any. Counted by sorting, not hashing: no hash
    table."""
    ps = np.flatnonzero(valid).astype(np.int32 if len(valid) < 2**31 else np.int64)
    if not len(ps):
        return None
    hs = _hashes(keys, length)
    if len(ps) < len(hs):
        hs = hs[ps]
    by_sequence = np.argsort(hs, kind="stable")  # positions ascend within a sequence
    ps = ps[by_sequence]
    hs = hs[by_sequence]  # one at a time: each old array goes as its sorted copy comes
    del by_sequence
    counts = np.diff(np.r_[_runs(hs), len(hs)])
    repeated = np.repeat(counts > min_occ, counts)
    if not repeated.any():
        return None
    ps, hs = ps[repeated], hs[repeated]
    del repeated
    kept = non_overlapping(hs, ps, length)
    ps, hs = ps[kept], hs[kept]
    begin = _runs(hs)
    return _Occurrences(ps, begin, hs[begin])


def _per_occurrence(ps: np.ndarray, fn: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """``fn`` of the occurrences at ``ps``, a chunk at a time: no full-length temporaries."""
    out = np.empty(len(ps))
    for a in range(0, len(ps), _CHUNK):
        out[a:a + _CHUNK] = fn(ps[a:a + _CHUNK])
    return out


def _group_sums(values: np.ndarray, ids: np.ndarray) -> np.ndarray:
    return pd.Series(values, copy=False).groupby(ids, sort=False).sum().to_numpy()


@dataclass
class _Times:
    """Start and end times of the tasks in start order: the ends sorted, the starts read through ``order``; and
    per start position the latest end among the ``length`` tasks from it (widened one task at a time as the
    sequences grow: one pass over the tasks per length, then one read per occurrence, not ``length``)."""

    order: np.ndarray
    start_us: np.ndarray
    end: np.ndarray
    window_end: np.ndarray | None = None
    length: int = 1

    def start(self, pos: np.ndarray) -> np.ndarray:
        return self.start_us[self.order[pos]]

    def widen(self, length: int) -> None:
        """Make :attr:`window_end` cover ``length`` tasks (NaN where any of them has no end, as a max over them)."""
        while self.length < length:
            self.length += 1
            tail = self.end[self.length - 1:]
            if self.window_end is None:  # the first widening copies the ends, the next ones work in place
                self.window_end = np.maximum(self.end[:-1], tail)
            else:
                self.window_end = self.window_end[:-1]
                np.maximum(self.window_end, tail, out=self.window_end)

    def span(self, pos: np.ndarray, length: int) -> np.ndarray:
        """Wall time of the occurrences at ``pos``: the latest end among their tasks less their start."""
        self.widen(length)
        assert self.length == length
        ends = self.end if self.window_end is None else self.window_end
        return ends[pos] - self.start(pos)


def _sequence_sums(occ: _Occurrences, length: int, times: _Times, sums: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Per sequence (index: hash, in hash order): occurrences, wall span and the sums, each summed over the
    occurrences in position order; one column at a time (a frame of them all is copied into one block)."""
    ps = occ.positions
    ids = np.zeros(len(ps), dtype=np.int32)  # the sequence of each occurrence, numbered in hash order
    ids[occ.begin[1:]] = 1
    np.cumsum(ids, out=ids)
    agg = pd.DataFrame({"occ": np.diff(np.r_[occ.begin, len(ps)])}, index=pd.Index(occ.hashes))
    per_occurrence = {"span": lambda: _per_occurrence(ps, lambda p: times.span(p, length))}
    for name, c in sums.items():
        # take: a third faster than indexing on 2M-task prefix sums
        per_occurrence[name] = lambda c=c: _per_occurrence(ps, lambda p: np.take(c, p + length) - np.take(c, p))
    if len(ps) <= _CHUNK:  # few occurrences: one groupby of them all (the same sums, one fixed cost)
        together = pd.DataFrame({name: values() for name, values in per_occurrence.items()})
        summed = together.groupby(ids, sort=False).sum()
        for name in per_occurrence:
            agg[name] = summed[name].to_numpy()
        return agg
    for name, values in per_occurrence.items():
        agg[name] = _group_sums(values(), ids)
    return agg


def _worth_fusing(agg: pd.DataFrame, cfg: Mapping[str, Any], window_us: float) -> pd.DataFrame | None:
    """The best sequences (``fusible.candidates_per_length``) of one length that occur often enough and are host
    bound or MTE bound, with their savings; None without any."""
    agg = agg[agg["occ"] > int(cfg["min_occurrences"])]
    if not len(agg):
        return None
    with np.errstate(divide="ignore", invalid="ignore"):
        host_bound = (agg["dur"] / agg["span"]) < float(cfg["host_bound_ratio"])
        mte_bound = ((agg["mte"] / agg["aic"]) > float(cfg["mte_bound_ratio"])).fillna(False)
    share_ok = ((agg["span"] / window_us > float(cfg["min_step_share"])) if window_us > 0
                else pd.Series(True, index=agg.index))
    keep = (host_bound | mte_bound) & (share_ok | mte_bound)
    agg = agg[keep.fillna(False)]
    if not len(agg):
        return None
    host_bound, mte_bound = host_bound[agg.index], mte_bound[agg.index]
    host_s = np.where(host_bound, (agg["span"] - agg["dur"]).clip(lower=0) * float(cfg["host_saving_fraction"]), 0.0)
    mte_s = np.where(mte_bound, agg["fus"] * float(cfg["mte_saving_fraction"]), 0.0)
    agg = agg.assign(host_s=host_s, mte_s=mte_s, saving=host_s + mte_s, host_bound=host_bound, mte_bound=mte_bound)
    return agg.sort_values("saving", ascending=False).head(int(cfg["candidates_per_length"]))


@dataclass
class _Candidates:
    """The candidate sequences of every length: their numbers, and per length which sequence starts at each
    position (0: none; at most one, a position starting one sequence per length), from which a candidate's
    positions are read back when the best are chosen (a byte per position, not a position per occurrence); and
    where each candidate first occurs (its op pattern is read there)."""

    seqs: list[tuple[Sequence_, int, int]]
    marks: dict[int, np.ndarray]

    def add(self, length: int, agg: pd.DataFrame, occ: _Occurrences, m: int) -> None:
        """The sequences of ``agg`` (index: hashes) of one length, of ``m`` start positions."""
        marks = np.zeros(m, dtype=np.uint8 if len(agg) < 255 else np.uint32)
        first = []
        for mark, (a, b) in enumerate(occ.ranges(agg.index.to_numpy()), start=1):
            marks[occ.positions[a:b]] = mark
            first.append(int(occ.positions[a]))
        self.marks[length] = marks
        for mark, (r, at) in enumerate(zip(agg.itertuples(), first, strict=True), start=1):
            self.seqs.append((Sequence_(length, np.zeros(0, dtype=np.int64), float(r.span), float(r.dur),
                                        float(r.mte), float(r.aic), bool(r.host_bound), bool(r.mte_bound),
                                        float(r.host_s), float(r.mte_s)), mark, at))

    def positions(self, seq: Sequence_, mark: int) -> np.ndarray:
        return np.flatnonzero(self.marks[seq.length] == mark)


@dataclass
class Opportunity:
    """One fusion opportunity: the reported sequences whose op patterns are the same (other shapes), rotations or
    sub-sequences of one another, pieces of one unbroken chain, or whose occurrences share tasks. ``parts[i]`` says
    how ``sequences[i]`` joined (``same``, ``rotation``, ``sub-sequence``, ``continuation``, ``shared tasks``; the
    first is ``same``); ``weights[i]`` is the share
    of its tasks no better sequence of the opportunity holds (1 unless ``fusible.max_overlap`` lets them share
    tasks): its figures count with that weight, so every task counts once."""

    sequences: list[Sequence_]
    parts: list[str]
    weights: list[float]

    @property
    def lead(self) -> Sequence_:
        """The sequence the finding is named after: the longest (the others are its parts), then the best."""
        return max(self.sequences, key=lambda s: (s.length, s.saving_us))

    def total(self, attr: str) -> float:
        return sum(w * float(getattr(s, attr)) for s, w in zip(self.sequences, self.weights, strict=True))

    @property
    def saving_us(self) -> float:
        return self.total("saving_us")


def find_sequences(ops: pd.DataFrame, cfg: Mapping[str, Any], window_us: float) -> list[Opportunity]:
    """Repeated sequences of op (type, shapes) of compute tasks, best first, occurrences not overlapping one
    another and sharing no task with a better sequence (``fusible.max_overlap``), gathered into fusion
    opportunities (:class:`Opportunity`): at most ``fusible.top_num`` of them."""
    order = np.argsort(_f(ops, "start_us"), kind="stable")
    n = len(order)
    keys = op_keys(ops, order) + 1
    keys = keys.astype(np.uint32 if keys.max(initial=0) < 2**32 else np.uint64)
    # a communication or runtime task (HCCL op, notify wait / record, event...) is no kernel to fuse: it breaks a
    # sequence, as the cores of fusible.break_cores do
    ok = compute_tasks(ops["core"], order)
    ok &= ~cat_map(ops["core"], lambda c: str(c) in set(cfg["break_cores"]), False, bool, rows=order)
    # a matmul, convolution or attention kernel is fused or compute bound by design: the vector ops on either side
    # of it fuse with their neighbours (Add -> RmsNorm), not through it
    ok &= ~cat_map(ops["type"], lambda c: str(c) in set(cfg["no_saving_types"]), False, bool, rows=order)
    sums = _prefix_sums(ops, order, cfg["no_saving_types"])
    start = _f(ops, "start_us")
    times = _Times(order.astype(np.int32 if n < 2**31 else np.int64), start,
                   start[order] + np.nan_to_num(_f(ops, "duration_us", order)))
    joins = _joins(start[order], times.end, float(cfg["max_launch_gap_us"]))
    del order
    cands = _Candidates([], {})
    valid = ok.copy()  # per start position: no break inside the sequence of `length`
    for length in range(1, int(cfg["max_length"]) + 1):
        if length > 1:
            valid = valid[:-1]
            valid &= ok[length - 1:]
            valid &= joins[length - 1:]
        if length < int(cfg["min_length"]) or n < length:
            continue
        occ = _occurrences(keys, valid, length, int(cfg["min_occurrences"]))
        if occ is None:
            continue
        agg = _worth_fusing(_sequence_sums(occ, length, times, sums), cfg, window_us)
        if agg is not None:
            cands.add(length, agg, occ, len(valid))
    task_order = times.order
    runs = np.cumsum(~ok | ~joins, dtype=np.int64)  # per task: its run of tasks no break interrupts
    del valid, ok, keys, times, sums
    types, type_codes = cat_lookup(ops["type"], str, "")
    names, name_codes = cat_lookup(ops["name"], str, "?")

    def pattern_at(pos: int, length: int) -> tuple[str, ...]:  # op_labels of the tasks from `pos` on
        rows = task_order[pos:pos + length]
        return tuple(t or m for t, m in zip(types[type_codes[rows]], names[name_codes[rows]], strict=True))

    return _best(cands, n, int(cfg["top_num"]), float(cfg["max_overlap"]), pattern_at, runs)


def _joins(starts: np.ndarray, ends: np.ndarray, max_gap_us: float) -> np.ndarray:
    """Per task (in start order): whether it follows the tasks before it within ``max_gap_us`` of idle time, so a
    sequence may hold it and its predecessor; a longer gap (a pause, a sleep, data loading) breaks sequences."""
    joins = np.ones(len(starts), dtype=bool)
    if len(starts) > 1:
        joins[1:] = starts[1:] - np.maximum.accumulate(ends)[:-1] <= max_gap_us
    return joins


def _best(cands: _Candidates, n: int, top_num: int, max_overlap: float,
          pattern_at: Callable[[int, int], tuple[str, ...]], runs: np.ndarray) -> list[Opportunity]:
    """The best candidates, each sharing at most ``max_overlap`` of its tasks with the better ones chosen, gathered
    into at most ``top_num`` opportunities: a candidate whose op pattern is the same as, a rotation or a
    sub-sequence of a chosen one's, or that shares tasks with it, joins that one's opportunity (the nearest one in
    the task order, where several qualify) instead of becoming another; two opportunities whose longest patterns
    are related are one."""
    cands.seqs.sort(key=lambda c: -c[0].saving_us)
    opps: list[Opportunity] = []
    covered = np.zeros(n, dtype=bool)
    cs = np.zeros(n + 1, dtype=np.int32 if n < 2**31 else np.int64)  # prefix sums of `covered`, after each pick
    owner = np.zeros(n, dtype=np.int32)  # opportunity (+1) of each covered task
    for seq, mark, first in cands.seqs:
        seq.labels = pattern_at(first, seq.length)
        kin = [i for i, o in enumerate(opps) if any(related(seq.labels, s.labels) for s in o.sequences)]
        seq.positions = cands.positions(seq, mark)
        shared = (cs[seq.positions + seq.length] - cs[seq.positions]).sum() / (len(seq.positions) * seq.length)
        if shared > max_overlap:
            seq.positions = seq.positions[:0]
            continue
        spans = (seq.positions[:, None] + np.arange(seq.length)).ravel()
        next_to = _continued(seq.positions, seq.length, owner, runs)
        if shared > 0 and max_overlap > 0:
            held = owner[spans]
            at = int(np.bincount(held[held > 0]).argmax()) - 1
        elif next_to is not None:
            at = next_to
        elif kin:
            at = min(kin, key=lambda i: _distance(seq.positions, opps[i])) if len(kin) > 1 else kin[0]
        elif len(opps) < top_num:
            at = len(opps)
            opps.append(Opportunity([], [], []))
        else:
            seq.positions = seq.positions[:0]
            continue
        how = "shared tasks" if shared > 0 else next(
            (r for s in opps[at].sequences if (r := related(seq.labels, s.labels))),
            "continuation" if next_to is not None else "same")
        opps[at].sequences.append(seq)
        opps[at].parts.append(how)
        opps[at].weights.append(1.0 - shared)
        covered[spans] = True
        np.cumsum(covered, dtype=cs.dtype, out=cs[1:])
        owner[spans] = np.where(owner[spans] > 0, owner[spans], at + 1)
        at = _merge_related(opps, at, owner)
    return opps


_CONTINUATION_REACH = 3
"""Tasks between an occurrence and a chosen opportunity's task of the same unbroken run for the two to be one chain
(a fused op such as RotaryPositionEmbedding between two parts is not in either)."""


def _continued(positions: np.ndarray, length: int, owner: np.ndarray, runs: np.ndarray) -> int | None:
    """The opportunity whose tasks lie within a few tasks of at least half of these occurrences (before their first
    task or after their last) in the same run no break interrupts: a run of fusible ops longer than
    fusible.max_length, cut in pieces by the window -- one chain between two kernels that break it (the QKV matmul
    and the attention), one fix."""
    if not len(positions):
        return None
    n = len(owner)
    near = []
    for k in range(1, _CONTINUATION_REACH + 1):
        for at, anchor in ((positions - k, positions), (positions + length - 1 + k, positions + length - 1)):
            ok = (at >= 0) & (at < n)
            at, anchor = np.clip(at, 0, n - 1), np.clip(anchor, 0, n - 1)
            near.append(np.where(ok & (runs[at] == runs[anchor]), owner[at], 0))
    hits = np.stack(near)  # per (direction, distance) and occurrence: the opportunity there (+1), 0 for none
    first = np.where(hits > 0, hits, np.iinfo(hits.dtype).max).min(axis=0)  # nearest-listed hit per occurrence
    counts = np.bincount(np.where(first == np.iinfo(hits.dtype).max, 0, first), minlength=2)
    counts[0] = 0
    best = int(counts.argmax())
    return best - 1 if best > 0 and counts[best] * 2 >= len(positions) else None


def _merge_related(opps: list[Opportunity], at: int, owner: np.ndarray | None) -> int:
    """Fold into opportunity ``at`` every other whose longest pattern is related to its own (its lead changed: a
    longer pattern holding both joined it); where ``at`` is then."""
    while True:
        lead = opps[at].lead.labels
        other = next((j for j, o in enumerate(opps) if j != at and related(lead, o.lead.labels)), None)
        if other is None:
            return at
        if owner is not None:  # the other's tasks are this one's; the numbers after the other's move down by one
            owner[owner == other + 1] = at + 1
            owner[owner > other + 1] -= 1
        o = opps.pop(other)
        at -= other < at
        opps[at].sequences += o.sequences
        opps[at].parts += o.parts
        opps[at].weights += o.weights


def _period(labels: tuple[str, ...]) -> tuple[str, ...]:
    """The shortest pattern ``labels`` is whole repetitions of (``labels`` itself when it is none)."""
    n = len(labels)
    return next(labels[:p] for p in range(1, n + 1) if n % p == 0 and labels[:p] * (n // p) == labels)


def _distance(positions: np.ndarray, opp: Opportunity) -> float:
    """Median distance (in tasks) from each occurrence start to the nearest task of an opportunity."""
    tasks = np.sort(np.concatenate([(s.positions[:, None] + np.arange(s.length)).ravel() for s in opp.sequences]))
    k = np.searchsorted(tasks, positions)
    before = np.abs(positions - tasks[np.maximum(k - 1, 0)])
    after = np.abs(tasks[np.minimum(k, len(tasks) - 1)] - positions)
    return float(np.median(np.minimum(before, after)))


def _fusible_finding(ctx: AnalysisContext, opp: Opportunity, order: np.ndarray, window: float) -> Finding:
    """One finding per opportunity (positions into the tasks in ``order``), named after its longest sequence, over
    the union of its tasks: the MTE part of the saving on the ops (in proportion to the time of the ops fusion can
    merge), the host part on the free-time pseudo-op."""
    cfg = ctx.rules["fusible"]
    ops = ctx.profile.ops
    seqs = opp.sequences
    lead = opp.lead
    pattern = " -> ".join(lead.labels)
    tasks = np.concatenate([(s.positions[:, None] + np.arange(s.length)).ravel() for s in seqs])
    if min(opp.weights) < 1.0:  # sequences sharing tasks (fusible.max_overlap): each task once
        tasks = np.unique(tasks)
    tasks = order[tasks]
    name, names = _str_codes(ops["name"], tasks)  # grouped by name in the names' order, a code per task
    dur = np.nan_to_num(_f(ops, "duration_us", tasks))
    heavy = cat_map(ops["type"], lambda c: str(c) in set(cfg["no_saving_types"]), False, bool, rows=tasks)
    per_name = pd.Series(dur).groupby(name).sum()
    per_name.index = names[per_name.index]
    per_name = per_name.sort_values(ascending=False)
    mergeable = pd.Series(np.where(heavy, 0.0, dur)).groupby(name).sum()
    mergeable.index = names[mergeable.index]
    mte = opp.total("mte_saving_us")
    host = opp.total("host_saving_us")
    by_op = {str(k): mte * float(v) / float(mergeable.sum()) for k, v in mergeable.items()
             if v > 0 and mergeable.sum() > 0 and mte > 0}
    if host > 0:
        by_op[FREE_TIME_KEY] = host
    saving = sum(by_op.values())
    host_bound, mte_bound = any(s.host_bound for s in seqs), any(s.mte_bound for s in seqs)
    kinds = " and ".join(k for k, b in (("host bound", host_bound), ("MTE bound", mte_bound)) if b)
    full = [s for s in seqs if s.labels == lead.labels]
    occurrences = sum(len(s.positions) for s in full)
    partial = sum(len(s.positions) for s in seqs) - occurrences
    # a sequence that is a shorter loop run twice back to back (A -> B -> A -> B) is named as that loop, its
    # occurrences counted per loop
    unit = _period(lead.labels)
    loops = lead.length // len(unit)
    pattern = " -> ".join(unit)
    span, kernel = opp.total("span_us"), opp.total("kernel_us")
    mte_us, aicore = opp.total("mte_us"), opp.total("aicore_us")
    basis = []
    if host > 0:
        basis.append(f"host bound: gaps inside the occurrences x {float(cfg['host_saving_fraction']):g} "
                     "(fusible.host_saving_fraction), device free time")
    if mte > 0:
        basis.append(f"MTE bound: kernel time of the ops fusion can merge (not fusible.no_saving_types) x "
                     f"{float(cfg['mte_saving_fraction']):g} (fusible.mte_saving_fraction)")
    if partial:
        basis.append("over the union of the tasks of the sequence and its parts, each task counted once")
    starts = sorted((int(p), s.length) for s in seqs for p in s.positions)
    rows = [[int(order[p]), int(order[p + length - 1])] for p, length in starts[:10]]
    parts: dict[tuple[str, ...], dict[str, Any]] = {}
    for s, how in zip(seqs, opp.parts, strict=True):
        if s.labels != lead.labels:
            rec = parts.setdefault(s.labels, {"sequence": list(s.labels), "relation": related(s.labels, lead.labels)
                                              or how, "occurrences": 0})
            rec["occurrences"] += len(s.positions)
    return ctx.finding(
        rule=FUSIBLE,
        title=f"{kinds[:1].upper()}{kinds[1:]} sequence repeated {occurrences * loops}x"
              + (f" (and {partial}x in part)" if partial else "") + f": {pattern}",
        severity=severity_for(saving / window if window > 0 else 0.0, ctx.rules["severity"]),
        ops=[str(k) for k in per_name.index],
        evidence={"sequence": list(unit), "length": len(unit), "occurrences": occurrences * loops,
                  "shape_variants": len(full), "wall_us": span, "kernel_us": kernel, "mte_us": mte_us,
                  "aicore_us": aicore, "kernel_over_wall": kernel / span if span else None,
                  "mte_over_aicore": mte_us / aicore if aicore else None,
                  "window_share": span / window if window > 0 else None,
                  "tasks": len(tasks), "parts": list(parts.values()),
                  "table": table(["first row", "last row"], rows)},
        estimated_saving_us=saving,
        basis="; ".join(basis) if basis else "no saving",
        recommendation=_fusion_advice(ctx, pattern, occurrences * loops, kinds),
        fix=Fix("code", "fuse the repeated op sequence", {"sequence": list(lead.labels)}),
        confidence=float(cfg["confidence"]),
        saving_by_op=by_op,
    )


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [ScheduleKB]
