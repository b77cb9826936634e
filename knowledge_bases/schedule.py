"""Schedule knowledge base: how the host feeds the device.

Host-side rules read the trace events (``ctx.profile.events``: CANN API calls, Python ops, GC records...) and,
where the trace is absent, the API statistics and ``operator_details`` call stacks:

* ``schedule.op-compile``: online operator compilation (``aclopCompileAndExecute``);
* ``schedule.sync-stream``: stream synchronizations right after kernel launches;
* ``schedule.syncbn``: SyncBatchNorm layers;
* ``schedule.dataloader``: slow DataLoader iterations;
* ``schedule.gc``: recorded Python GC pauses;
* ``schedule.conjectured-gc``: long device-idle gaps with no host activity (checked even when GC is recorded);
* ``schedule.affinity-api``: torch op sequences one fused torch_npu API replaces, with their call stacks.

``schedule.fusible-ops`` reads the device ops: repeated op sequences (hashed n-grams, no pairwise
comparison) that are host bound or MTE bound.

A host stall only costs step time while the device waits, so the host findings together are capped at the
device idle time of the profiled window.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, Severity, table
from advisor.intervals import overlap, union
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc
from advisor.model import Profile

# ---------------------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------------------


def severity_for(share: float, levels: Mapping[str, float]) -> Severity:
    """Severity from a share of device busy time (``levels``: lowest share of critical/major/minor)."""
    for name in ("critical", "major", "minor"):
        if name in levels and share >= float(levels[name]):
            return name  # type: ignore[return-value]
    return "info"


def _codes_map(series: pd.Series, fn: Any, fill: Any, dtype: Any = object) -> np.ndarray:
    """``fn`` evaluated once per distinct value of ``series`` and broadcast to the rows."""
    s = series if isinstance(series.dtype, pd.CategoricalDtype) else series.astype("category")
    cats = list(s.cat.categories)
    values = np.array([fn(c) for c in cats] + [fill], dtype=dtype)
    codes = s.cat.codes.to_numpy()
    return values[np.where(codes >= 0, codes, len(cats))]


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def _f(frame: pd.DataFrame, col: str) -> np.ndarray:
    return frame[col].to_numpy(dtype="float64") if col in frame.columns else np.full(len(frame), np.nan)








@dataclass
class Window:
    """The profiled window and how long the device idled in it."""

    length_us: float
    busy_us: float
    source: str

    @property
    def idle_us(self) -> float:
        return max(self.length_us - self.busy_us, 0.0)


def profiled_window(profile: Profile, step_pattern: str) -> Window | None:
    """ProfilerStep#N events (their union) or, without them, the span of the device ops."""
    ops, ev = profile.ops, profile.events
    busy = float(profile.busy_time_us()) if len(ops) else 0.0
    if len(ev):
        pat = re.compile(step_pattern)
        steps = _codes_map(ev["name"], lambda c: bool(pat.match(str(c))), False, bool)
        if steps.any():
            s = _f(ev, "start_us")[steps]
            bs, be = union(s, s + _f(ev, "duration_us")[steps])
            if len(bs):
                length = float((be - bs).sum())
                if len(ops):
                    os_ = _f(ops, "start_us")
                    obs, obe = union(os_, os_ + _f(ops, "duration_us"))
                    inside = float(sum(overlap(bs, be, obs, obe))) if len(obs) else 0.0
                    busy = inside if inside > 0 else busy
                return Window(length, min(busy, length), "ProfilerStep events")
    if len(ops):
        s = _f(ops, "start_us")
        e = s + _f(ops, "duration_us")
        if np.isfinite(s).any():
            return Window(float(np.nanmax(e) - np.nanmin(s)), busy, "span of the device ops")
    return None


def _stacks(events: pd.DataFrame, rows: np.ndarray) -> list[str]:
    """Distinct ``Call stack`` args of the event rows, most frequent first."""
    if not len(rows) or "args" not in events.columns:
        return []
    counts: dict[str, int] = {}
    for a in events["args"].to_numpy(dtype=object)[rows]:
        if isinstance(a, dict):
            st = a.get("Call stack") or a.get("Call Stack")
            if isinstance(st, str) and st.strip():
                counts[st] = counts.get(st, 0) + 1
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


# ---------------------------------------------------------------------------------------------------------
# rule documentation
# ---------------------------------------------------------------------------------------------------------
_CAP = (" Host-side savings only shorten the step while the device waits: the savings of all host rules together "
        "are capped at the device idle time of the profiled window (ProfilerStep#N events, else the span of the "
        "device ops).")

RULES = (
    RuleDoc(
        id="schedule.op-compile",
        title="Operators compiled online during the run",
        what="Counts AscendCL@aclopCompileAndExecute calls in the trace (or aclopCompileAndExecute in the API "
             "statistics) and reports them from op_compile.min_count calls on." + _CAP,
        why="Each call compiles an operator for a new shape or attribute set before running it: milliseconds of "
            "host time per call while the device waits.",
        how_to_fix="Use the precompiled binary kernels: torch_npu.npu.set_compile_mode(jit_compile=False) at the "
                   "start of the script (install the binary kernel package); keep shapes stable between steps.",
        thresholds=("op_compile", "step_event_pattern", "severity"),
        needs=("events",),
    ),
    RuleDoc(
        id="schedule.sync-stream",
        title="Stream synchronized after kernel launches",
        what="Orders Node@launch and AscendCL@aclrtSynchronizeStream events per thread and counts "
             "synchronizations that directly follow a launch; reported when they reach "
             "sync_stream.min_co_occurrence_ratio of the launches." + _CAP,
        why="A synchronization after each launch makes the host wait for every kernel: launches stop overlapping "
            "with execution (what ASCEND_LAUNCH_BLOCKING=1 does).",
        how_to_fix="Unset ASCEND_LAUNCH_BLOCKING (or set it to 0); remove per-step host reads of device tensors "
                   "(.item(), .cpu(), print, torch.npu.synchronize()) from the training loop.",
        thresholds=("sync_stream", "step_event_pattern", "severity"),
        needs=("events",),
    ),
    RuleDoc(
        id="schedule.syncbn",
        title="SyncBatchNorm in the model",
        what="Counts SyncBatchNorm events; reported from syncbn.min_count on." + _CAP,
        why="SyncBatchNorm all-reduces the batch statistics of every layer in every step: many small "
            "collectives that stall the host dispatch and the device.",
        how_to_fix="Use plain BatchNorm when the per-device batch is large enough (revert "
                   "torch.nn.SyncBatchNorm.convert_sync_batchnorm), or synchronize statistics only in the layers "
                   "that need it.",
        thresholds=("syncbn", "step_event_pattern", "severity"),
        needs=("events",),
    ),
    RuleDoc(
        id="schedule.dataloader",
        title="Slow DataLoader iterations",
        what="Reports DataLoader iteration events (name containing dataloader.name_contains, from the trace or "
             "operator_details.csv) lasting dataloader.min_duration_us or more." + _CAP,
        why="While __next__ runs, no step work is dispatched: the device idles.",
        how_to_fix="Load in background workers: DataLoader(num_workers>0, pin_memory=True, persistent_workers="
                   "True, prefetch_factor>=2); move decoding and augmentation off the main process; read from "
                   "local disk.",
        thresholds=("dataloader", "step_event_pattern", "severity"),
        needs=("events",),
    ),
    RuleDoc(
        id="schedule.gc",
        title="Python garbage-collection pauses",
        what="Reports GC events (category gc.categories, recorded with torch_npu gc_detect_threshold) of "
             "gc.min_duration_us or more." + _CAP,
        why="A full GC pass walks every Python object: tens of milliseconds during which nothing is dispatched.",
        how_to_fix="Call gc.freeze() once the model, optimizer and data loader are built, or gc.disable() and "
                   "gc.collect() between steps at a time you choose.",
        thresholds=("gc", "step_event_pattern", "severity"),
        needs=("events",),
    ),
    RuleDoc(
        id="schedule.conjectured-gc",
        title="Long device-idle gaps with no host activity",
        what="Finds gaps between device tasks (and Overlap Analysis Free events) of conjectured_gc.min_gap_us or "
             "more in which the host issued almost no CANN API calls (busy ratio and event rate below the "
             "thresholds) and which recorded GC or DataLoader events do not explain. Runs whether or not GC events "
             "were recorded." + _CAP,
        why="A long gap with a silent host is typically a Python GC pass or another host-side stall the profiler "
            "did not record.",
        how_to_fix="Record GC with the profiler (torch_npu experimental config gc_detect_threshold) to confirm; "
                   "apply gc.freeze() / scheduled gc.collect(); look for blocking host work (I/O, logging) in the "
                   "step.",
        thresholds=("conjectured_gc", "step_event_pattern", "severity"),
        needs=("events", "ops"),
    ),
    RuleDoc(
        id="schedule.fusible-ops",
        title="Repeated op sequences that are host bound or MTE bound",
        what="Hashes every op-type sequence (type and shapes) of fusible.min_length to fusible.max_length "
             "consecutive device tasks (AI CPU and communication tasks break sequences) and keeps those occurring "
             "more than fusible.min_occurrences times without overlap that cover more than fusible.min_step_share "
             "of the step or are MTE bound, and that are host bound (sum of kernel time / wall span < "
             "host_bound_ratio) or MTE bound (MTE2 + MTE3/fixpipe time / AI Core time > mte_bound_ratio). The best "
             "non-overlapping sequences are reported.",
        why="Host bound: the device waits between the kernels for the host to launch the next. MTE bound: the "
            "kernels mostly move intermediate tensors through HBM. One fused kernel removes both costs.",
        how_to_fix="Replace the sequence with a fused torch_npu API when one exists (schedule.affinity-api), run "
                   "it in graph mode (torch.compile with the torchair backend) so GE fuses it, or write a fused "
                   "Ascend C kernel.",
        thresholds=("fusible", "severity"),
        needs=("ops",),
    ),
    RuleDoc(
        id="schedule.affinity-api",
        title="Torch op sequences with a fused torch_npu API",
        what="Matches the first-level torch ops of each host thread (aten::/npu:: events not nested in another) "
             "against affinity_api.rules (op-name token sequences such as pow? mean? add? rsqrt mul -> "
             "torch_npu.npu_rms_norm) and Optimizer.step#<Name>.step events against affinity_api.optimizers; "
             "reports each API with its matches and the call stacks recorded with them (trace 'Call stack', else "
             "operator_details.csv)." + _CAP,
        why="Each torch op is one host dispatch and at least one kernel; the fused API does the same work in one "
            "launch without writing intermediates to HBM.",
        how_to_fix="Replace the code at the call stacks with the fused API (e.g. torch_npu.npu_rms_norm(x, weight, "
                   "eps), torch_npu.optim.NpuFusedAdamW); profile with with_stack=True to get the call stacks.",
        thresholds=("affinity_api", "step_event_pattern", "severity"),
        needs=("events",),
    ),
)


# ---------------------------------------------------------------------------------------------------------
# the knowledge base
# ---------------------------------------------------------------------------------------------------------
class ScheduleKB(KnowledgeBase):
    id = "schedule"
    title = "Host scheduling (compilation, synchronization, data loading, GC, fusion candidates)"
    version = "1.0.0"
    api_version = "1"
    requires = ()
    requires_any = ("events", "ops", "api")
    rules_file = "schedule"
    rules = RULES

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        profile = ctx.profile
        busy = float(profile.busy_time_us()) if len(profile.ops) else 0.0
        window = profiled_window(profile, str(ctx.rules.get("step_event_pattern", r"^ProfilerStep#\d+")))
        denom = busy or (window.length_us if window else 0.0)
        host: list[HostIssue] = []
        if len(profile.events):
            for check in (op_compile, sync_stream, syncbn, dataloader, gc_pauses, conjectured_gc, affinity_api):
                host.extend(check(ctx))
        else:
            host.extend(op_compile(ctx))
            host.extend(dataloader(ctx))
            ctx.note("schedule: no trace events (trace_view.json / msprof_*.json): the synchronization, SyncBN, "
                     "GC and affinity-API rules did not run")
        out = finish_host(ctx, host, window, denom)
        if len(profile.ops):
            out.extend(fusible_ops(ctx, denom, window))
        return out


@dataclass
class HostIssue:
    """A host-side finding before its saving is capped at the device idle time."""

    rule: str
    title: str
    saving_us: float
    basis: str
    recommendation: str
    evidence: dict[str, Any]
    fix: Fix | None
    confidence: float
    ops: list[str] = field(default_factory=list)


def finish_host(ctx: AnalysisContext, issues: list[HostIssue], window: Window | None, denom: float) -> list[Finding]:
    """Cap the host findings' savings together at the device idle time, then build the findings."""
    total = sum(i.saving_us for i in issues)
    scale, cap_note = 1.0, ""
    if window is not None and total > window.idle_us:
        scale = window.idle_us / total if total > 0 else 0.0
        cap_note = (f"; host findings scaled by {scale:.3g} so together they do not exceed the device idle time "
                    f"({window.idle_us:.0f} us of the {window.source})")
    levels = ctx.rules.get("severity", {})
    out = []
    for i in issues:
        saving = i.saving_us * scale
        evidence = dict(i.evidence)
        if window is not None:
            evidence.setdefault("device_idle_us", window.idle_us)
        out.append(ctx.finding(rule=i.rule, title=i.title,
                               severity=severity_for(saving / denom if denom else 0.0, levels), ops=i.ops,
                               evidence=evidence, estimated_saving_us=saving, basis=i.basis + cap_note,
                               recommendation=i.recommendation, fix=i.fix, confidence=i.confidence))
    return out


def _named(events: pd.DataFrame, names: Sequence[str]) -> np.ndarray:
    wanted = {n.lower() for n in names}
    return _codes_map(events["name"], lambda c: str(c).lower() in wanted, False, bool)


def _prefixed(events: pd.DataFrame, prefix: str) -> np.ndarray:
    return _codes_map(events["name"], lambda c: str(c).startswith(prefix), False, bool)


# ---------------------------------------------------------------------------------------------------------
# host rules
# ---------------------------------------------------------------------------------------------------------
def op_compile(ctx: AnalysisContext) -> list[HostIssue]:
    cfg = ctx.rules.get("op_compile", {})
    ev = ctx.profile.events
    count, total, source = 0, 0.0, ""
    if len(ev):
        mask = _named(ev, cfg.get("event_names", []))
        count, total, source = int(mask.sum()), float(np.nansum(_f(ev, "duration_us")[mask])), "trace"
    api = ctx.profile.api
    if not count and len(api):
        wanted = {n.lower() for n in cfg.get("api_names", [])}
        rows = api[api["name"].astype(str).str.lower().isin(wanted)]
        if len(rows):
            count = int(np.nansum(_f(rows, "count")))
            total = float(np.nansum(_f(rows, "total_us")))
            source = "API statistics"
    if count < int(cfg.get("min_count", 20)):
        return []
    frac = float(cfg.get("saving_fraction", 0.9))
    snippet = "torch_npu.npu.set_compile_mode(jit_compile=False)"
    return [HostIssue(
        rule="schedule.op-compile",
        title=f"{plural(count, 'online operator compilation')} (aclopCompileAndExecute, {total / 1000:.1f} ms)",
        saving_us=total * frac,
        basis=f"time in aclopCompileAndExecute x {frac:g} (op_compile.saving_fraction: the compilation part)",
        recommendation=f"Operators were compiled {count} times while the model ran. Put {snippet} at the start of "
                       "the script (binary kernels need the CANN kernel package) and keep input shapes stable.",
        evidence={"calls": count, "time_us": total, "mean_us": total / count if count else None, "source": source,
                  "events": list(cfg.get("event_names", []))},
        fix=Fix("code", "use binary kernels instead of online compilation", {"snippet": snippet}),
        confidence=0.7,
    )]


def sync_stream(ctx: AnalysisContext) -> list[HostIssue]:
    cfg = ctx.rules.get("sync_stream", {})
    ev = ctx.profile.events
    launch = _prefixed(ev, str(cfg.get("launch_prefix", "Node@launch")))
    sync = _prefixed(ev, str(cfg.get("sync_prefix", "AscendCL@aclrtSynchronizeStream")))
    n_launch = int(launch.sum())
    if not n_launch or not sync.any():
        return []
    sel = launch | sync
    frame = pd.DataFrame({"tid": _codes_map(ev["tid"], str, "")[sel], "start": _f(ev, "start_us")[sel],
                          "dur": _f(ev, "duration_us")[sel], "is_sync": sync[sel]})
    frame = frame.sort_values(["tid", "start"], kind="stable")
    prev_launch = (~frame["is_sync"]).groupby(frame["tid"]).shift(1, fill_value=False).astype(bool)
    after = frame["is_sync"] & prev_launch
    n_after = int(after.sum())
    ratio = n_after / n_launch
    if ratio <= float(cfg.get("min_co_occurrence_ratio", 0.5)) or n_after < int(cfg.get("min_syncs", 1)):
        return []
    wait = float(frame.loc[after, "dur"].sum())
    frac = float(cfg.get("saving_fraction", 0.8))
    env = ctx.profile.meta.environment or {}
    blocking = str(env.get("ASCEND_LAUNCH_BLOCKING", "")).strip() == "1"
    if blocking:
        fix = Fix("env", "run kernels asynchronously: ASCEND_LAUNCH_BLOCKING=0",
                  {"ASCEND_LAUNCH_BLOCKING": "0"}, "unset ASCEND_LAUNCH_BLOCKING")
        cause = "ASCEND_LAUNCH_BLOCKING=1 is set in the profiled environment: "
    else:
        fix = Fix("code", "remove per-step host reads of device tensors",
                  {"snippet": "# avoid in the step loop: loss.item(), tensor.cpu(), print(tensor), "
                              "torch.npu.synchronize()"})
        cause = ""
    return [HostIssue(
        rule="schedule.sync-stream",
        title=f"{plural(n_after, 'stream synchronization')} right after kernel launches ({ratio:.0%} of "
              f"{plural(n_launch, 'launch', 'launches')})",
        saving_us=wait * frac,
        basis=f"time of the synchronizations that follow a launch x {frac:g} (sync_stream.saving_fraction)",
        recommendation=f"{cause}the host waits for each kernel after launching it, so launches stop overlapping with "
                       "execution. Unset ASCEND_LAUNCH_BLOCKING and remove .item()/.cpu()/synchronize() calls from "
                       "the step.",
        evidence={"launches": n_launch, "syncs_after_launch": n_after, "co_occurrence_ratio": ratio,
                  "sync_time_us": wait, "ASCEND_LAUNCH_BLOCKING": env.get("ASCEND_LAUNCH_BLOCKING"),
                  "events": [str(cfg.get("launch_prefix")), str(cfg.get("sync_prefix"))]},
        fix=fix,
        confidence=0.7,
    )]


def syncbn(ctx: AnalysisContext) -> list[HostIssue]:
    cfg = ctx.rules.get("syncbn", {})
    ev = ctx.profile.events
    mask = _named(ev, cfg.get("event_names", ["SyncBatchNorm"]))
    count = int(mask.sum())
    if count < int(cfg.get("min_count", 20)):
        return []
    total = float(np.nansum(_f(ev, "duration_us")[mask]))
    frac = float(cfg.get("saving_fraction", 0.5))
    stacks = _stacks(ev, np.flatnonzero(mask))
    snippet = ("def revert_sync_batchnorm(module):\n"
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
    return [HostIssue(
        rule="schedule.syncbn",
        title=f"{count} SyncBatchNorm calls (one all-reduce per layer and step)",
        saving_us=total * frac,
        basis=f"time of the SyncBatchNorm calls x {frac:g} (syncbn.saving_fraction)",
        recommendation="Each SyncBatchNorm layer all-reduces its statistics every step. If the per-device batch is "
                       "large enough, use plain BatchNorm (revert convert_sync_batchnorm).",
        evidence={"calls": count, "time_us": total, "events": list(cfg.get("event_names", [])),
                  "call_stacks": [_short_stack(s) for s in stacks[:3]]},
        fix=Fix("code", "replace SyncBatchNorm with BatchNorm", {"snippet": snippet}),
        confidence=0.5,
    )]


def dataloader(ctx: AnalysisContext) -> list[HostIssue]:
    cfg = ctx.rules.get("dataloader", {})
    key = str(cfg.get("name_contains", "dataloader")).lower()
    limit = float(cfg.get("min_duration_us", 10000))
    ev = ctx.profile.events
    names: list[str] = []
    durs = np.zeros(0)
    source = "trace"
    if len(ev):
        mask = _codes_map(ev["name"], lambda c: key in str(c).lower(), False, bool)
        d = _f(ev, "duration_us")
        mask &= d >= limit
        names, durs = _codes_map(ev["name"], str, "")[mask].tolist(), d[mask]
    else:
        det = ctx.profile.extras.get("operator_details") if isinstance(ctx.profile.extras, dict) else None
        if det is not None and len(det) and "host_total_us" in det.columns:
            d = _f(det, "host_total_us")
            det_names = det["name"].astype(object).where(det["name"].notna(), "").astype(str).to_numpy()
            mask = np.array([key in n.lower() for n in det_names], dtype=bool) & (d >= limit)
            names, durs, source = det_names[mask].tolist(), d[mask], "operator_details.csv"
    if not len(durs):
        return []
    expected = float(cfg.get("expected_us", 1000))
    saving = float(np.clip(durs - expected, 0, None).sum())
    single = any("singleprocess" in n.lower() for n in names)
    if single:
        advice = ("The loader runs in the main process (SingleProcessDataLoaderIter): set num_workers > 0 so "
                  "batches are prepared in the background, with pin_memory=True.")
        snippet = "DataLoader(dataset, batch_size=..., num_workers=8, pin_memory=True, persistent_workers=True)"
    else:
        advice = ("Give the loader more workers and a deeper prefetch (num_workers, prefetch_factor, "
                  "persistent_workers=True, pin_memory=True); move decoding/augmentation off the critical path; "
                  "read data from local disk.")
        snippet = ("DataLoader(dataset, batch_size=..., num_workers=16, prefetch_factor=4, pin_memory=True, "
                   "persistent_workers=True)")
    distinct = sorted(set(names))
    return [HostIssue(
        rule="schedule.dataloader",
        title=f"{plural(len(durs), 'slow DataLoader iteration')} (longest {durs.max() / 1000:.1f} ms)",
        saving_us=saving,
        basis=f"per iteration: duration - {expected:g} us (dataloader.expected_us, what a prefetching loader takes)",
        recommendation=advice,
        evidence={"iterations": len(durs), "time_us": float(durs.sum()), "max_us": float(durs.max()),
                  "threshold_us": limit, "source": source, "events": distinct[:5]},
        fix=Fix("code", "prefetch batches in background workers", {"snippet": snippet}),
        confidence=0.6,
    )]


def _gc_mask(ev: pd.DataFrame, categories: Sequence[str]) -> np.ndarray:
    wanted = {c.lower() for c in categories}
    if "category" not in ev.columns:
        return np.zeros(len(ev), bool)
    return _codes_map(ev["category"], lambda c: str(c).lower() in wanted, False, bool)


def gc_pauses(ctx: AnalysisContext) -> list[HostIssue]:
    cfg = ctx.rules.get("gc", {})
    ev = ctx.profile.events
    d = _f(ev, "duration_us")
    mask = _gc_mask(ev, cfg.get("categories", ["GC"])) & (d >= float(cfg.get("min_duration_us", 1000)))
    if not mask.any():
        return []
    durs = d[mask]
    starts = _f(ev, "start_us")[mask]
    order = np.argsort(-durs, kind="stable")[:10]
    frac = float(cfg.get("saving_fraction", 0.9))
    rows = [[f"{starts[i]:.3f}", float(durs[i])] for i in order]
    snippet = "import gc\n# after building the model, optimizer and data loader:\ngc.freeze()"
    return [HostIssue(
        rule="schedule.gc",
        title=f"{plural(len(durs), 'Python GC pause')} ({durs.sum() / 1000:.1f} ms in total)",
        saving_us=float(durs.sum()) * frac,
        basis=f"GC pause time x {frac:g} (gc.saving_fraction: what gc.freeze() / scheduled collection removes)",
        recommendation="Python's garbage collector stopped the training loop. Call gc.freeze() once the model and "
                       "data loader are built (long-lived objects leave the collected generations), or disable "
                       "automatic GC and collect between steps.",
        evidence={"pauses": len(durs), "time_us": float(durs.sum()), "max_us": float(durs.max()),
                  "table": table(["start us", "duration us"], rows), "events": ["GC"]},
        fix=Fix("code", "freeze long-lived objects out of the GC", {"snippet": snippet}),
        confidence=0.8,
    )]


def device_gaps(profile: Profile) -> tuple[np.ndarray, np.ndarray]:
    """Idle gaps between device task blocks, plus Overlap Analysis ``Free`` events, merged."""
    ops = profile.ops
    gs, ge = np.zeros(0), np.zeros(0)
    if len(ops):
        s = _f(ops, "start_us")
        bs, be = union(s, s + _f(ops, "duration_us"))
        if len(bs) > 1:
            gs, ge = be[:-1], bs[1:]
    ev = profile.events
    if len(ev):
        free = _codes_map(ev["name"], lambda c: str(c) == "Free", False, bool)
        free &= _codes_map(ev["process"], lambda c: "overlap" in str(c).lower(), False, bool)
        if free.any():
            fs = _f(ev, "start_us")[free]
            gs = np.concatenate([gs, fs])
            ge = np.concatenate([ge, fs + _f(ev, "duration_us")[free]])
    if not len(gs):
        return gs, ge
    return union(gs, ge)


def conjectured_gc(ctx: AnalysisContext) -> list[HostIssue]:
    cfg = ctx.rules.get("conjectured_gc", {})
    gs, ge = device_gaps(ctx.profile)
    if not len(gs):
        return []
    min_gap = float(cfg.get("min_gap_us", 200000))
    long = (ge - gs) >= min_gap
    if not long.any():
        return []
    gs, ge = gs[long], ge[long]
    ev = ctx.profile.events
    procs = set(cfg.get("host_processes", ["CANN"]))
    prefixes = tuple(cfg.get("host_prefixes", ["AscendCL@"]))
    host = _codes_map(ev["process"], lambda c: str(c) in procs, False, bool) | \
        _codes_map(ev["name"], lambda c: str(c).startswith(prefixes), False, bool)
    hs = _f(ev, "start_us")[host]
    he = hs + np.nan_to_num(_f(ev, "duration_us")[host])
    hbs, hbe = union(hs, he)
    busy = overlap(hbs, hbe, gs, ge)
    hs_sorted = np.sort(hs[np.isfinite(hs)])
    count = np.searchsorted(hs_sorted, ge) - np.searchsorted(hs_sorted, gs)
    length = ge - gs
    quiet = (busy / length < float(cfg.get("max_busy_ratio", 0.01))) & \
        (count / length < float(cfg.get("max_events_per_us", 1e-4)))
    # gaps explained by recorded GC or dataloader events are reported by those rules
    explained_by = _gc_mask(ev, ctx.rules.get("gc", {}).get("categories", ["GC"])) | \
        _codes_map(ev["name"], lambda c: str(ctx.rules.get("dataloader", {}).get("name_contains", "dataloader"))
                   .lower() in str(c).lower(), False, bool)
    es = _f(ev, "start_us")[explained_by]
    ebs, ebe = union(es, es + _f(ev, "duration_us")[explained_by])
    explained = overlap(ebs, ebe, gs, ge) / length >= float(cfg.get("explained_ratio", 0.5))
    sel = quiet & ~explained
    if not sel.any():
        return []
    frac = float(cfg.get("saving_fraction", 0.5))
    gap_time = float(length[sel].sum())
    order = np.argsort(-length[sel], kind="stable")[:10]
    rows = [[f"{gs[sel][i]:.3f}", float(length[sel][i]), float(busy[sel][i]), int(count[sel][i])] for i in order]
    recorded = bool(_gc_mask(ev, ctx.rules.get("gc", {}).get("categories", ["GC"])).any())
    snippet = ("experimental_config = torch_npu.profiler._ExperimentalConfig(gc_detect_threshold=1)  # ms\n"
               "import gc; gc.freeze()  # after building the model and data loader")
    return [HostIssue(
        rule="schedule.conjectured-gc",
        title=f"{plural(int(sel.sum()), 'device-idle gap')} of {min_gap / 1000:g} ms or more with a silent host "
              f"({gap_time / 1000:.1f} ms)",
        saving_us=gap_time * frac,
        basis=f"gap time x {frac:g} (conjectured_gc.saving_fraction: the cause is conjectured, not recorded)",
        recommendation="The device idled and the host made almost no API calls: typically a Python GC pass or a "
                       "blocking host operation. " + ("Some GC pauses were recorded, but not in these gaps. "
                                                      if recorded else "")
                       + "Record GC with gc_detect_threshold to confirm, and call gc.freeze() after setup.",
        evidence={"gaps": int(sel.sum()), "gap_time_us": gap_time, "gc_events_recorded": recorded,
                  "events": [f"device idle {r[1] / 1000:.1f} ms from {r[0]} us" for r in rows],
                  "table": table(["start us", "gap us", "host busy us", "host events"], rows)},
        fix=Fix("code", "record GC and freeze long-lived objects", {"snippet": snippet}),
        confidence=0.3,
    )]


# ---------------------------------------------------------------------------------------------------------
# schedule.affinity-api
# ---------------------------------------------------------------------------------------------------------
_TOKEN = re.compile(r"^(?P<alt>[A-Za-z0-9_.|]+?)(?P<q>\?|\{\d+,\d+\})?$")


def compile_pattern(tokens: Sequence[str]) -> re.Pattern[str]:
    """Token list -> regex over ``-op1--op2-...`` (each op wrapped in dashes)."""
    parts = []
    for tok in tokens:
        m = _TOKEN.match(str(tok).strip())
        if not m:
            raise ValueError(f"bad affinity pattern token {tok!r}")
        alts = "|".join(re.escape(a) for a in m.group("alt").split("|"))
        q = m.group("q") or ""
        parts.append(f"(?:-(?:{alts})-){q}")
    return re.compile("".join(parts))


def first_level(events: pd.DataFrame, prefixes: Sequence[str]) -> pd.DataFrame:
    """Torch-op events not nested in another torch-op event of the same thread, in time order per thread."""
    mask = _codes_map(events["name"], lambda c: str(c).startswith(tuple(prefixes)), False, bool)
    if not mask.any():
        return pd.DataFrame(columns=["row", "tid", "start", "end", "op"])
    rows = np.flatnonzero(mask)
    start = _f(events, "start_us")[mask]
    frame = pd.DataFrame({"row": rows, "tid": _codes_map(events["tid"], str, "")[mask], "start": start,
                          "end": start + np.nan_to_num(_f(events, "duration_us")[mask]),
                          "op": _codes_map(events["name"], lambda c: str(c).split("::", 1)[-1], "")[mask]})
    frame = frame.sort_values(["tid", "start", "end"], ascending=[True, True, False], kind="stable")
    prev_end = frame.groupby("tid", sort=False)["end"].transform(lambda s: s.cummax().shift(1))
    nested = (frame["start"] < prev_end) & (frame["end"] <= prev_end)
    return frame[~nested.fillna(False).to_numpy()].reset_index(drop=True)


def affinity_api(ctx: AnalysisContext) -> list[HostIssue]:
    cfg = ctx.rules.get("affinity_api", {})
    ev = ctx.profile.events
    frac = float(cfg.get("saving_fraction", 0.5))
    durs = _f(ev, "duration_us")
    matches: dict[str, dict[str, Any]] = {}

    top = first_level(ev, cfg.get("prefixes", ["aten::"]))
    if len(top):
        # one string per thread, threads separated by a token no pattern matches
        tokens = [f"-{op}-" for op in top["op"]]
        tid_change = np.r_[False, top["tid"].to_numpy()[1:] != top["tid"].to_numpy()[:-1]]
        tokens = [("-|-" + t) if ch else t for t, ch in zip(tokens, tid_change, strict=True)]
        offsets = np.cumsum([0] + [len(t) for t in tokens])
        text = "".join(tokens)
        own = offsets[:-1] + np.where(tid_change, 3, 0)  # where each op's own "-op-" begins
        top_rows = top["row"].to_numpy(dtype=np.int64)
        top_ops = top["op"].to_numpy(dtype=object)
        for rule in cfg.get("rules", []):
            api = str(rule["api"])
            for tokens_ in rule.get("patterns", []):
                pat = compile_pattern(tokens_)
                for m in pat.finditer(text):
                    if m.end() == m.start():
                        continue
                    i = int(np.searchsorted(own, m.start(), side="left"))
                    j = int(np.searchsorted(own, m.end(), side="left"))
                    idx = top_rows[i:j]
                    rec = matches.setdefault(api, {"count": 0, "rows": [], "sequences": {}, "note": rule.get("note"),
                                                   "snippet": rule.get("snippet")})
                    rec["count"] += 1
                    rec["rows"].extend(idx.tolist())
                    seq = "-".join(top_ops[i:j])
                    rec["sequences"][seq] = rec["sequences"].get(seq, 0) + 1
    optimizers: Mapping[str, str] = cfg.get("optimizers", {})
    if optimizers:
        opt = _codes_map(ev["name"], lambda c: str(c).startswith("Optimizer.step#"), False, bool)
        for r in np.flatnonzero(opt):
            kind = str(ev["name"].iat[r]).split("#", 1)[1]
            api = optimizers.get(kind)
            if api:
                rec = matches.setdefault(api, {"count": 0, "rows": [], "sequences": {}, "note": None,
                                               "snippet": f"optimizer = {api}(model.parameters(), lr=lr)"})
                rec["count"] += 1
                rec["rows"].append(int(r))
                rec["sequences"][kind] = rec["sequences"].get(kind, 0) + 1
    out = []
    for api, rec in matches.items():
        rows = np.unique(np.array(rec["rows"], dtype=np.int64))
        host_us = float(np.nansum(durs[rows]))
        stacks = _stacks(ev, rows)
        source = "trace"
        if not stacks:
            names = _codes_map(ev["name"], str, "")[rows]
            found = _detail_stacks(ctx.profile, names)
            stacks = list(dict.fromkeys(found.values()))
            source = "operator_details.csv" if stacks else "none recorded"
        seqs = sorted(rec["sequences"].items(), key=lambda kv: -kv[1])
        where = f" at {_short_stack(stacks[0])}" if stacks else " (no call stack recorded: profile with " \
                                                                "with_stack=True to locate it)"
        note = f" Note: {rec['note']}." if rec.get("note") else ""
        out.append(HostIssue(
            rule="schedule.affinity-api",
            title=f"{api} can replace {plural(rec['count'], 'call sequence')} ({seqs[0][0]})",
            saving_us=host_us * frac,
            basis=f"host time of the matched torch ops x {frac:g} (affinity_api.saving_fraction: one fused call "
                  "instead of several)",
            recommendation=f"Replace {seqs[0][0]}{where} with {api}.{note}",
            evidence={"api": api, "matches": rec["count"], "host_time_us": host_us,
                      "sequences": dict(seqs[:5]), "call_stacks": [_short_stack(s, 6) for s in stacks[:5]],
                      "stack_source": source,
                      "events": sorted({str(n) for n in _codes_map(ev["name"], str, "")[rows]})},
            fix=Fix("code", f"use {api}", {"api": api, "replaces": [s for s, _ in seqs[:5]],
                                           **({"snippet": rec["snippet"]} if rec.get("snippet") else {})}),
            confidence=0.5,
        ))
    return out


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
    saving_us: float


def _mte_time(ops: pd.DataFrame) -> tuple[np.ndarray, np.ndarray]:
    """Per task: MTE time (max(aic_mte2, aiv_mte2) + max(aic_fixpipe, aiv_mte3)) and AI Core time."""
    aicore = _f(ops, "aicore_time_us")
    aiv_time = _f(ops, "aiv_time_us")
    aicore = np.where(np.isnan(aicore), aiv_time, aicore)

    def timed(name: str) -> np.ndarray:
        t = _f(ops, f"{name}_time_us")
        ratio = _f(ops, f"{name}_ratio")
        base = aiv_time if name.startswith("aiv_") else _f(ops, "aicore_time_us")
        return np.where(np.isnan(t), ratio * base, t)

    mte2 = np.fmax(timed("aic_mte2"), timed("aiv_mte2"))
    out = np.fmax(timed("aic_fixpipe"), timed("aiv_mte3"))
    if np.isnan(mte2).all():  # unprefixed metrics (310P): ratios x aicore time
        mte2 = _f(ops, "mte2_ratio") * aicore
        out = _f(ops, "mte3_ratio") * aicore
    return np.nan_to_num(mte2) + np.nan_to_num(out), aicore


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
    group_of = np.repeat(np.arange(len(group_start)), group_end - group_start)
    needs_scan = np.zeros(len(group_start), dtype=bool)
    needs_scan[group_of[1:][close]] = True
    for g in np.flatnonzero(needs_scan).tolist():
        a, b = int(group_start[g]), int(group_end[g])
        free = -1
        for i, p in enumerate(pos[a:b].tolist(), start=a):
            if p >= free:
                free = p + length
            else:
                keep[i] = False
    return keep


def _codes(series: pd.Series) -> np.ndarray:
    s = series if isinstance(series.dtype, pd.CategoricalDtype) else series.astype("category")
    return s.cat.codes.to_numpy().astype(np.int64)


def op_keys(ops: pd.DataFrame) -> np.ndarray:
    """One id per distinct (op type, input shapes, output shapes); the op name stands in for a missing type
    (Level0 kernel_details write N/A types)."""
    t = _codes(ops["type"])
    n_types = int(t.max()) + 1 if len(t) else 0
    kind = np.where(t >= 0, t, _codes(ops["name"]) + n_types + 1)
    frame = pd.DataFrame({"k": kind, "i": _codes(ops["input_shapes"]), "o": _codes(ops["output_shapes"])})
    return frame.groupby(["k", "i", "o"], sort=False).ngroup().to_numpy()


def op_labels(ops: pd.DataFrame) -> np.ndarray:
    """What a sequence shows for each op: its type, else its name."""
    types = _codes_map(ops["type"], str, "")
    names = _codes_map(ops["name"], str, "?")
    return np.where(types == "", names, types)


def find_sequences(ops: pd.DataFrame, cfg: Mapping[str, Any], step_us: float) -> list[Sequence_]:
    """Repeated sequences of op (type, shapes), best first, occurrences not overlapping one another."""
    order = np.argsort(_f(ops, "start_us"), kind="stable")
    ops = ops.iloc[order]
    n = len(ops)
    keys = op_keys(ops).astype(np.uint64) + np.uint64(1)
    brk = _codes_map(ops["core"], lambda c: str(c) in set(cfg.get("break_cores", [])), False, bool)
    cum_brk = np.concatenate([[0], np.cumsum(brk)])
    start = _f(ops, "start_us")
    dur = np.nan_to_num(_f(ops, "duration_us"))
    end = start + dur
    mte, aicore = _mte_time(ops)
    heavy = _codes_map(ops["type"], lambda c: str(c) in set(cfg.get("no_saving_types", [])), False, bool)
    cum = {name: np.concatenate([[0.0], np.cumsum(np.nan_to_num(v))])
           for name, v in (("dur", dur), ("mte", mte), ("aic", aicore), ("fus", np.where(heavy, 0.0, dur)))}
    host_r, mte_r = float(cfg.get("host_bound_ratio", 0.4)), float(cfg.get("mte_bound_ratio", 0.8))
    min_occ, min_share = int(cfg.get("min_occurrences", 5)), float(cfg.get("min_step_share", 0.01))
    host_f, mte_f = float(cfg.get("host_saving_fraction", 0.5)), float(cfg.get("mte_saving_fraction", 0.3))
    cands: list[Sequence_] = []
    h = keys.copy()
    for length in range(1, int(cfg.get("max_length", 10)) + 1):
        if length > 1:
            h = h[:-1] * _PRIME + keys[length - 1:]
        if length < int(cfg.get("min_length", 2)) or n < length:
            continue
        m = n - length + 1
        pos = np.arange(m)
        valid = (cum_brk[pos + length] - cum_brk[pos]) == 0
        if not valid.any():
            continue
        w_end = np.lib.stride_tricks.sliding_window_view(end, length).max(axis=1)
        frame = pd.DataFrame({"h": h[valid], "pos": pos[valid]})
        frame["span"] = (w_end - start[:m])[valid]
        for name, c in cum.items():
            frame[name] = (c[length:length + m] - c[:m])[valid]
        counts = frame.groupby("h", sort=False)["pos"].transform("size")
        frame = frame[counts.to_numpy() > min_occ]
        if not len(frame):
            continue
        frame = frame.sort_values(["h", "pos"], kind="stable")
        frame = frame[non_overlapping(frame["h"].to_numpy(), frame["pos"].to_numpy(), length)]
        agg = frame.groupby("h", sort=False).agg(occ=("pos", "size"), span=("span", "sum"), dur=("dur", "sum"),
                                                 mte=("mte", "sum"), aic=("aic", "sum"), fus=("fus", "sum"))
        agg = agg[agg["occ"] > min_occ]
        if not len(agg):
            continue
        with np.errstate(divide="ignore", invalid="ignore"):
            host_bound = (agg["dur"] / agg["span"]) < host_r
            mte_bound = (agg["mte"] / agg["aic"]) > mte_r
        share_ok = (agg["span"] / step_us > min_share) if step_us > 0 else pd.Series(True, index=agg.index)
        keep = (host_bound | mte_bound) & (share_ok | mte_bound)
        agg = agg[keep.fillna(False)]
        if not len(agg):
            continue
        saving = np.maximum(np.where(host_bound[agg.index], (agg["span"] - agg["dur"]).clip(lower=0) * host_f, 0.0),
                            np.where(mte_bound[agg.index].fillna(False), agg["fus"] * mte_f, 0.0))
        agg = agg.assign(saving=saving).sort_values("saving", ascending=False).head(200)
        positions = frame[frame["h"].isin(agg.index)].groupby("h", sort=False)["pos"].apply(np.asarray)
        for hv, r in agg.iterrows():
            cands.append(Sequence_(length, positions[hv], float(r.span), float(r.dur),
                                   float(r.mte), float(r.aic), bool(host_bound[hv]),
                                   bool(mte_bound[hv]) if not pd.isna(mte_bound[hv]) else False,
                                   float(r.saving)))
    cands.sort(key=lambda c: -c.saving_us)
    chosen: list[Sequence_] = []
    covered = np.zeros(n, dtype=np.int64)
    cs = np.zeros(n + 1, dtype=np.int64)  # prefix sums of `covered`, updated after each pick
    for c in cands:
        if len(chosen) >= int(cfg.get("top_num", 5)):
            break
        overlap = (cs[c.positions + c.length] - cs[c.positions]).sum() / (len(c.positions) * c.length)
        if overlap > 0.5:
            continue
        chosen.append(c)
        covered[(c.positions[:, None] + np.arange(c.length)).ravel()] = 1
        cs[1:] = np.cumsum(covered)
    return chosen


def fusible_ops(ctx: AnalysisContext, denom: float, window: Window | None) -> list[Finding]:
    cfg = ctx.rules.get("fusible", {})
    ops = ctx.profile.ops
    if not np.isfinite(_f(ops, "start_us")).any():
        ctx.note("schedule.fusible-ops: skipped, the ops have no start times")
        return []
    step_us = window.length_us if window else 0.0
    seqs = find_sequences(ops, cfg, step_us)
    if not seqs:
        return []
    order = np.argsort(_f(ops, "start_us"), kind="stable")
    sorted_ops = ops.iloc[order]
    names = _codes_map(sorted_ops["name"], str, "")
    types = op_labels(sorted_ops)
    dur = np.nan_to_num(_f(sorted_ops, "duration_us"))
    levels = ctx.rules.get("severity", {})
    out = []
    for seq in seqs:
        first = int(seq.positions[0])
        pattern = " -> ".join(types[first:first + seq.length])
        idx = (seq.positions[:, None] + np.arange(seq.length)).ravel()
        per = pd.Series(dur[idx]).groupby(names[idx]).sum()
        total = float(per.sum())
        by_op = {str(k): seq.saving_us * float(v) / total for k, v in per.sort_values(ascending=False).items()} \
            if total > 0 else {}
        kinds = [k for k, b in (("host bound", seq.host_bound), ("MTE bound", seq.mte_bound)) if b]
        rows = [[int(order[p]), int(order[p + seq.length - 1])] for p in seq.positions[:10]]
        basis = []
        if seq.host_bound:
            basis.append(f"host bound: gaps inside the occurrences x {cfg.get('host_saving_fraction', 0.5):g} "
                         "(fusible.host_saving_fraction)")
        if seq.mte_bound:
            basis.append(f"MTE bound: kernel time of the ops fusion can merge (not fusible.no_saving_types) x "
                         f"{cfg.get('mte_saving_fraction', 0.3):g} (fusible.mte_saving_fraction)")
        out.append(ctx.finding(
            rule="schedule.fusible-ops",
            title=f"{' and '.join(kinds)[:1].upper()}{' and '.join(kinds)[1:]} sequence repeated {len(seq.positions)}x: {pattern}",
            severity=severity_for(seq.saving_us / denom if denom else 0.0, levels),
            ops=list(by_op),
            evidence={"sequence": pattern.split(" -> "), "length": seq.length, "occurrences": len(seq.positions),
                      "wall_us": seq.span_us, "kernel_us": seq.kernel_us, "mte_us": seq.mte_us,
                      "aicore_us": seq.aicore_us,
                      "kernel_over_wall": seq.kernel_us / seq.span_us if seq.span_us else None,
                      "mte_over_aicore": seq.mte_us / seq.aicore_us if seq.aicore_us else None,
                      "step_share": seq.span_us / window.length_us if window and window.length_us else None,
                      "table": table(["first row", "last row"], rows)},
            estimated_saving_us=seq.saving_us,
            basis="; ".join(basis) + " (the larger of the two)",
            recommendation=f"The sequence {pattern} runs {len(seq.positions)} times and is {' and '.join(kinds)}: "
                           "replace it with a fused torch_npu API if one exists (see schedule.affinity-api), run it "
                           "in graph mode (torch.compile with the torchair backend) so it gets fused, or write a "
                           "fused kernel.",
            fix=Fix("code", "fuse the repeated op sequence", {"sequence": pattern.split(" -> ")}),
            confidence=0.5,
            saving_by_op=by_op,
        ))
    return out


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [ScheduleKB]
