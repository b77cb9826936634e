"""Overall knowledge base: the buckets of the time model that cost time -- an idle device and exposed communication.

It reads the rank's time model (``advisor.timemodel``, built once at ingest; the report opens with it as ``time``)
and never recomputes it: a step is compute + uncovered communication + free time. Two findings, each with a
saving bounded by its bucket: free time above a target share (a symptom: the device waits for the host; the
host-side causes other knowledge bases measure claim the same free time and absorb it), and the part of uncovered
communication that overlap or rank balancing can recover (a cause). The split itself is not a finding: it is the
report's ``time`` object.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection
from advisor.platform import has_tool
from advisor.timemodel import TimeModel
from advisor.toolkit import run_context as rc
from advisor.toolkit.common import pct, severity_for
from advisor.toolkit.time import FREE_TIME_KEY, OTHER_COMM_KEY, comm_op_times, exposed_fraction, isin_mask


class OverallKB(KnowledgeBase):
    id = "overall"
    title = "Where the analyzed time goes (idle device, exposed communication)"
    version = "3.0.0"
    api_version = "1.5"
    requires = ()
    requires_any = ("ops", "steps", "timeline", "op_stats")
    ops_columns = ()
    events_read = EventSelection(processes=("Overlap Analysis",))  # the largest Free intervals
    rules_file = "overall"

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        if ctx.profile.time.window_us <= 0:
            ctx.note("overall: skipped, the profile has no step, overlap or device-task timing")
            return []
        return super().analyze(ctx)

    @rule(RuleDoc(
        id="overall.free-time",
        title="Device idle (free) time",
        what="Fires when free time (no device task running inside the analyzed window) exceeds "
             "{free_time.target_share} (and {min_bucket_share}) of the window. Saving: the free time above "
             "{free_time.target_share} of the window, attributed to the "
             "(free time) pseudo-op. The title names what the idle time is spent on, as the time model splits it "
             "(time.free_by_kind, rules/time.yaml): the input pipeline (data loading), host launch gaps, the host "
             "blocked in collectives, or unknown; from {free_time.host_bound_share} of the window on, a run whose "
             "idle time is mostly launch gaps is called host-bound. Pauses of the program and time outside the "
             "window (warm-up steps, an idle head or tail of the capture) are never counted. Not reported for "
             "kernel-development captures (contexts: {free_time.contexts}).",
        why="An idle device inside a step waits for something: the next batch of input data, the host's next launch "
            "(op dispatch, Python overhead, synchronisation), or a collective the host blocks in. It is a symptom: "
            "the host-side findings that measure a cause (a setting, GC pauses, a slow DataLoader, synchronous "
            "copies...) claim the same free time, and this finding folds under the largest of them.",
        how_to_fix="Data loading: more parallel input workers and prefetching (PyTorch DataLoader workers, "
                   "MindSpore dataset workers and data sink mode, an application's preprocessing threads). Launch "
                   "gaps: raise host throughput the way the framework allows (torch_npu task queue, core binding, no "
                   "per-step syncs, fused APIs or graph mode; MindSpore graph mode and sinking; ACL asynchronous "
                   "execution on several streams). Collectives: launch them asynchronously and do not wait on them "
                   "from the host.",
        thresholds=("min_bucket_share", "free_time", "severity"),
        needs=("steps",),
        role="symptom",
    ))
    def free_time(self, ctx: AnalysisContext) -> list[Finding]:
        r = ctx.rules
        cfg = r["free_time"]
        t = ctx.profile.time
        w = t.window_us
        free = t.free_us
        share = free / w
        target = float(cfg["target_share"])
        if share < max(float(r["min_bucket_share"]), target) or free - target * w <= 0:
            return []  # an idle share a well-fed device keeps is not a finding
        if not rc.applies(ctx, cfg["contexts"]):
            rc.skip_note(ctx, "overall.free-time")
            return []
        saving = free - target * w
        kinds = {k: v for k, v in t.free_by_kind.items() if v > 0}
        dominant = max(kinds, key=lambda k: kinds[k]) if kinds else "unknown"
        unrecorded = dominant == "unknown" and not any(s.tasks for s in t.steps)
        split_note = ""
        if dominant in ("launch", "unknown") and not unrecorded:  # idle inside steps with tasks: the host's
            what = "host-bound" if share >= float(cfg["host_bound_share"]) else "moderately host-bound"
            split_note = (f"; {pct(kinds['launch'] / free)} of it host launch gaps between device tasks"
                          if dominant == "launch" else "; the profile does not record what the host does in it: to "
                          "see, " + _timeline_advice(ctx))
        else:
            what = _FREE_KIND_TITLE[dominant].format(share=pct(kinds.get(dominant, free) / free))
        rec, fix = _free_advice(ctx, "unrecorded" if unrecorded else dominant)
        if t.steady_state.get("warmup_suspected"):
            what += "; the only step is the program's first, warm-up included"
            rec = ("Profile steady-state steps first: the only recorded step is the program's first, and part of "
                   "this idle time may be one-time warm-up (compilation, first allocations). ") + rec
        return [ctx.finding(
            rule="overall.free-time",
            title=f"Device idle {pct(share)} of the analyzed time ({free / 1000:.2f} ms): {what}",
            severity=severity_for(saving / w, r["severity"]), ops=[],
            evidence={"free_us": free, "free_share": share, "target_share": target, "window_us": w,
                      "free_by_kind_us": kinds, "dominant": dominant,
                      "steps": sum(s.count for s in t.steps), "source": t.sources.get("split", "time model"),
                      "largest_gaps": _largest_gaps(ctx, int(cfg["gaps_listed"])), "table": _free_table(t)},
            estimated_saving_us=saving,
            basis=f"free time above {pct(target)} of the analyzed window (free_time.target_share); source: "
                  f"{t.sources.get('split', 'time model')}{split_note}",
            recommendation=rec, fix=fix, confidence=float(cfg["confidence"]), saving_by_op={FREE_TIME_KEY: saving})]

    @rule(RuleDoc(
        id="overall.uncovered-communication",
        title="Communication not hidden by compute",
        what="Fires when uncovered communication reaches {min_bucket_share} of the window. Saving: the transmit "
             "time overlap can hide behind compute not already overlapping (x {communication.overlap_efficiency}) "
             "plus {communication.sync_recoverable} of the wait and idle time, at most the uncovered time above "
             "{communication.target_share} of the window; split over the communication ops by their exposed time "
             "(the first {communication.max_ops}, the rest as one pseudo-op). Wait- or idle-dominated, the title "
             "says 'waiting for peers' (their sum): one cause and one fix, so ranks showing more of one or of the "
             "other are one finding over the ranks.",
        why="Exposed communication adds directly to the step. Waiting means ranks or pipeline stages reach the "
            "collective at different times (slow rank, stage imbalance, late host launches); transmit time means "
            "communication is serialized with compute.",
        how_to_fix="Wait/idle-dominated: balance the work across ranks and pipeline stages (see the cluster "
                   "findings), remove host stalls before collectives. Transmit-dominated: overlap gradient "
                   "communication with backward, communicate in 16-bit, merge small collectives -- with the "
                   "framework's own options (DDP buckets / Megatron / DeepSpeed for PyTorch, comm_fusion and "
                   "PipelineCell for MindSpore).",
        thresholds=("min_bucket_share", "communication", "severity"),
        needs=("steps", "comm"),
    ))
    def uncovered_communication(self, ctx: AnalysisContext) -> list[Finding]:
        r = ctx.rules
        cr = r["communication"]
        t = ctx.profile.time
        w = t.window_us
        uncovered = t.uncovered_communication_us
        if uncovered / w < float(r["min_bucket_share"]):
            return []
        eff, sync_rec, target = float(cr["overlap_efficiency"]), float(cr["sync_recoverable"]), float(cr["target_share"])
        kinds = t.uncovered_by_kind
        hideable = 0.0
        for s in t.steps:
            room = max(0.0, s.compute_us - s.overlapped_communication_us)
            movable = s.uncovered_by_kind.get("transmit", 0.0) + s.uncovered_by_kind.get("unknown", 0.0)
            hideable += min(movable, room) * eff
        sync = sync_rec * (kinds.get("wait", 0.0) + kinds.get("idle", 0.0))
        saving = min(max(0.0, uncovered - target * w), hideable + sync)
        known = {k: v for k, v in kinds.items() if k != "unknown" and v > 0}
        dominant = max(known, key=lambda k: known[k]) if known else "unknown"
        ops, by_op = _comm_attribution(ctx, saving, int(cr["max_ops"]))
        rec, fix = _comm_advice(ctx, dominant, kinds, uncovered)
        waiting = kinds.get("wait", 0.0) + kinds.get("idle", 0.0)
        # wait- and idle-dominated: one cause (peers not ready) and one fix, whichever of the two a rank shows most
        title = (f"Uncovered communication {pct(uncovered / w)} of the analyzed time ({uncovered / 1000:.2f} ms)"
                 + (f", mostly waiting for peers ({pct(waiting / uncovered)} wait and idle)"
                    if dominant in ("wait", "idle") else
                    f", mostly {dominant} ({pct(kinds[dominant] / uncovered)})" if dominant != "unknown" else ""))
        return [ctx.finding(
            rule="overall.uncovered-communication", title=title,
            severity=severity_for(saving / w, r["severity"]), ops=ops,
            evidence={"uncovered_us": uncovered, "uncovered_share": uncovered / w, "window_us": w,
                      "by_kind_us": kinds, "dominant": dominant, "hideable_by_overlap_us": hideable,
                      "sync_recoverable_us": sync, "overlapped_us": t.overlapped_communication_us,
                      "source": t.sources.get("uncovered_by_kind", "no source (unknown)"),
                      "table": _comm_ops_table(ctx, int(cr["ops_listed"]))},
            estimated_saving_us=saving,
            basis=(f"transmit time hideable behind compute not already overlapping x {eff:g} "
                   f"({hideable / 1000:.2f} ms) + {sync_rec:g} of wait/idle time ({sync / 1000:.2f} ms), capped at "
                   f"the uncovered time above {pct(target)} of the window; split from "
                   f"{t.sources.get('uncovered_by_kind', 'no source (unknown)')}"),
            recommendation=rec, fix=fix,
            confidence=float(cr["confidence"]["split_unknown" if dominant == "unknown" else "split_known"]),
            saving_by_op=by_op)]


# ---------------------------------------------------------------------------------------------------------
# evidence and attribution
# ---------------------------------------------------------------------------------------------------------
_FREE_KIND_TITLE = {
    "data_loading": "waiting for input data ({share} of it data loading)",
    "comm_wait": "the host waits in collectives ({share} of it)",
    "unknown": "no recorded device task covers it",
}


def _free_table(t: TimeModel) -> dict[str, Any]:
    return table(["step", "window_us", "free_us", "free_share", "data_loading_us", "launch_us", "comm_wait_us"],
                 [["all" if s.step is None else s.step, _r(s.window_us), _r(s.free_us),
                   round(s.free_us / s.window_us, 4) if s.window_us else None,
                   *(_r(s.free_by_kind.get(k, 0.0)) for k in ("data_loading", "launch", "comm_wait"))]
                  for s in t.steps[:50]])


def _largest_gaps(ctx: AnalysisContext, n: int) -> dict[str, Any]:
    """The longest free intervals of the Overlap Analysis timeline inside the window (pauses and warm-up steps left
    out: they are not the window's idle time), where the profile has one."""
    ev = ctx.profile.events
    cols = ["start_us", "duration_us"]
    if not len(ev):
        return table(cols, [])
    free = ev[isin_mask(ev["process"], ["Overlap Analysis"]) & isin_mask(ev["name"], ["Free"])]
    start = free["start_us"].to_numpy(dtype="float64")
    outside = np.zeros(len(free), dtype=bool)
    for e in ctx.profile.time.excluded:
        if e.start_us is not None:
            outside |= (start >= e.start_us - 1e-3) & (start < e.start_us + e.window_us)
    free = free[~outside]
    top = free.nlargest(n, "duration_us")
    return table(cols, [[round(float(s), 3), round(float(d), 3)]
                        for s, d in zip(top["start_us"], top["duration_us"], strict=True)])


def _comm_ops(ctx: AnalysisContext) -> pd.DataFrame:
    """One row per communication op: name, step, elapse and its wait/transit/idle split where known."""
    profile = ctx.profile
    if len(profile.comm):
        return comm_op_times(profile.comm)
    ops = profile.ops
    if not len(ops):
        return pd.DataFrame(columns=["step", "name", "elapse_us", "wait_us", "transit_us", "idle_us"])
    sub = ops[isin_mask(ops["core"], ctx.rules["communication"]["comm_cores"])]
    return pd.DataFrame({"step": sub["step"].to_numpy(dtype="float64"), "name": sub["name"].astype(str).to_numpy(),
                         "elapse_us": sub["duration_us"].to_numpy(dtype="float64"), "wait_us": np.nan,
                         "transit_us": np.nan, "idle_us": np.nan})


def _comm_ops_table(ctx: AnalysisContext, limit: int) -> dict[str, Any]:
    c = _comm_ops(ctx)
    top = c.nlargest(limit, "elapse_us") if len(c) else c
    return table(["op", "elapse_us", "wait_us", "transit_us", "idle_us"],
                 [[r.name, _r(r.elapse_us), _r(r.wait_us), _r(r.transit_us), _r(r.idle_us)]
                  for r in top.itertuples(index=False)], limit=limit) | (
        {"more_rows": int(len(c) - limit)} if len(c) > limit else {})


def _comm_attribution(ctx: AnalysisContext, saving: float, max_ops: int) -> tuple[list[str], dict[str, float]]:
    """The saving split over the communication ops in proportion to their exposed time."""
    c = _comm_ops(ctx)
    if not len(c) or saving <= 0:
        return [], ({OTHER_COMM_KEY: saving} if saving > 0 else {})
    by_step, overall = exposed_fraction(ctx.profile)
    frac = np.array([by_step.get(float(s), overall) if np.isfinite(s) else overall for s in c["step"]])
    per = pd.Series(c["elapse_us"].to_numpy(dtype="float64") * frac, index=c["name"].to_numpy()).groupby(level=0).sum()
    if float(per.sum()) <= 0:
        return [], {OTHER_COMM_KEY: saving}
    per = (per / per.sum() * saving).sort_values(ascending=False)
    head, tail = per.iloc[:max_ops], per.iloc[max_ops:]
    by_op = {str(k): float(v) for k, v in head.items() if v > 0}
    if len(tail) and float(tail.sum()) > 0:
        by_op[OTHER_COMM_KEY] = float(tail.sum())
    return list(by_op), by_op


# ---------------------------------------------------------------------------------------------------------
# advice fitted to the run
# ---------------------------------------------------------------------------------------------------------
def _free_advice(ctx: AnalysisContext, dominant: str) -> tuple[str, Fix | None]:
    """What recovers idle time of the dominant kind, for this run's framework."""
    if dominant == "data_loading":
        return _input_advice(ctx), None
    if dominant == "comm_wait":
        return ("The host blocks in collective calls while the device idles: launch collectives asynchronously "
                "(torch.distributed async_op=True and wait() only where the result is used; MindSpore: let the graph "
                "schedule them), and keep host reads of reduced values (.item(), loss printing) off the step's "
                "critical path."), None
    if dominant == "unrecorded":
        return ("No recorded device task covers this idle time and the profile cannot tell what it is spent on "
                "(input data, launches, synchronisation, or work of an engine it does not record): "
                + _timeline_advice(ctx) + " " + _host_advice(ctx)[0]), None
    return _host_advice(ctx)


def _timeline_advice(ctx: AnalysisContext) -> str:
    """How to profile this run's framework so that its idle time gets a cause."""
    fam = rc.family(ctx)
    if fam == rc.MINDSPORE:
        return ("profile with the task timeline and AI CPU data on (mindspore.Profiler(..., aicore_metrics=..., "
                "profile_communication=True); MindSpore 2.x writes ASCEND_PROFILER_OUTPUT with the trace).")
    if fam == rc.TORCH:
        return ("profile with both activities (torch_npu.profiler.ProfilerActivity.CPU and NPU) so that "
                "trace_view.json shows the host side.")
    return "profile the host side too (msprof --ascendcl=on --runtime-api=on --task-time=on)."


def _input_advice(ctx: AnalysisContext) -> str:
    """Feeding the device faster, for this run's framework."""
    fam = rc.family(ctx)
    if fam == rc.MINDSPORE:
        return ("The device waits for the next batch between steps (the step trace's gap before each forward pass). "
                "Parallelize the dataset pipeline (num_parallel_workers in dataset.map and dataset.batch, "
                "python_multiprocessing=True for Python transforms, mindspore.dataset.config.set_prefetch_size), "
                "move augmentation to the device (dataset operations with device_target=\"Ascend\" where they "
                "exist), and train in data sink mode (model.train(..., dataset_sink_mode=True)) so the next batch is "
                "queued on the device while the current step runs.")
    if fam == rc.TORCH:
        return ("The device waits for input data: load in background workers (DataLoader(num_workers>0, "
                "pin_memory=True, persistent_workers=True, prefetch_factor>=2)), move decoding and augmentation out "
                "of the training loop, and copy batches with non_blocking=True.")
    return ("The device waits for input data: prepare the next input in another thread while the current one runs "
            "(double buffering), and move image conversion and resizing to DVPP/AIPP.")


def _host_advice(ctx: AnalysisContext) -> tuple[str, Fix | None]:
    """What raises host throughput for this run's framework (the causes themselves are other findings)."""
    fam = rc.family(ctx)
    if fam == rc.TORCH:
        return _torch_host_advice(ctx)
    if fam == rc.MINDSPORE:
        return _mindspore_host_advice(ctx), None
    if fam == rc.OM:
        return _acl_host_advice(ctx), None
    return (rc.unknown_context(ctx) + "The device waits for the host: find what the host does between device "
            "tasks (the host-side findings of this report name measured causes) -- per-step synchronisation, data "
            "loading or pre-processing in the thread that launches work, many small ops launched one by one -- "
            "and overlap it with device work."), None


def _torch_host_advice(ctx: AnalysisContext) -> tuple[str, Fix | None]:
    env: dict[str, str] = {}
    steps = []
    graph = rc.context_of(ctx) == "torch-graph"
    if rc.env_value(ctx, "TASK_QUEUE_ENABLE") != "2" and not graph:  # the task queue pipelines eager dispatch
        env["TASK_QUEUE_ENABLE"] = "2"
    if rc.env_value(ctx, "CPU_AFFINITY_CONF") in (None, "", "0"):
        env["CPU_AFFINITY_CONF"] = "1"
    if env:
        steps.append("enable " + " and ".join(
            {"TASK_QUEUE_ENABLE": "the level-2 dispatch pipeline (TASK_QUEUE_ENABLE=2; it needs the binary kernels "
                                  "and may raise peak memory)",
             "CPU_AFFINITY_CONF": "core binding of the dispatch threads (CPU_AFFINITY_CONF=1)"}[k] for k in env))
    if rc.env_value(ctx, "ASCEND_LAUNCH_BLOCKING") in (None, "1", "true"):
        steps.append("make sure ASCEND_LAUNCH_BLOCKING is unset")
    steps.append("remove per-step host synchronisation (.item(), .cpu(), printing device tensors, "
                 "torch.npu.synchronize())")
    steps.append("give the DataLoader workers (num_workers > 0, pin_memory=True, persistent_workers=True)")
    if graph:
        steps.append("keep the whole step in one graph: look for graph breaks and recompilations (they fall back to "
                     "eager dispatch, where only the task queue, TASK_QUEUE_ENABLE=2, hides launch cost) and keep "
                     "input shapes static so compiled graphs are reused; TorchAir's reduce-overhead mode (aclgraph "
                     "capture and replay) removes per-op launches")
    else:
        steps.append("cut the number of small ops: fused torch_npu APIs (see the affinity-API findings) or graph "
                     "mode (torch.compile with the TorchAir backend)")
    text = "; ".join(steps)
    rec = ("The device waits for the host. " + text[:1].upper() + text[1:]
           + ". Check the environment, memory and schedule findings for the measured causes.")
    if not env:
        return rec, None
    cmd = "export " + " ".join(f"{k}={v}" for k, v in env.items())
    title = " and ".join({"TASK_QUEUE_ENABLE": "level-2 task queue", "CPU_AFFINITY_CONF": "CPU core binding"}[k]
                         for k in env)
    return rec, Fix("env", title, {"env": env}, cmd)


def _mindspore_host_advice(ctx: AnalysisContext) -> str:
    if rc.context_of(ctx) == "mindspore-pynative":
        mode = ("PyNative mode dispatches every op from Python: run the training step in graph mode "
                "(mindspore.set_context(mode=mindspore.GRAPH_MODE), or decorate the step function with "
                "@mindspore.jit) so it is compiled and launched as a whole. ")
    else:
        mode = ("Use data sink mode (model.train(..., dataset_sink_mode=True), with sink_size) so the device reads "
                "batches from the dataset queue instead of waiting for the host every step; with static shapes, "
                "whole-graph sinking (jit_level O2) removes per-kernel launches. ")
    return ("The device waits for the host. " + mode
            + "Parallelize the data pipeline (num_parallel_workers in dataset.map and dataset.batch, "
              "python_multiprocessing=True for Python transforms) and avoid per-step host reads of device tensors "
              "(.asnumpy(), printing tensors).")


def _acl_host_advice(ctx: AnalysisContext) -> str:
    batch = (" Batch frames (a larger static batch, or atc --dynamic_batch_size gears)."
             if has_tool(ctx.platform, "atc") else " Batch frames where the model allows a larger batch.")
    return ("The device waits for the application between inferences. Keep sleeps and synchronisation out of the "
            "inference loop; run pre- and post-processing in their own threads (image conversion and resize in "
            "DVPP/AIPP); execute asynchronously (aclmdlExecuteAsync on two or more streams, one loaded model "
            "instance per stream) from input buffers allocated once with aclrtMallocHost and copied with "
            "aclrtMemcpyAsync, so the device always has the next inference queued." + batch
            + " The host-inference findings measure the copies, execute overhead and host-only ranges.")


def _comm_advice(ctx: AnalysisContext, dominant: str, kinds: dict[str, float],
                 uncovered: float) -> tuple[str, Fix | None]:
    fam = rc.family(ctx)
    prefix = rc.unknown_context(ctx)
    if dominant in ("wait", "idle"):
        rec = (f"{prefix}Most uncovered communication is {dominant} time ({pct(kinds[dominant] / uncovered)}): the "
               "collectives start before their peers are ready, so ranks wait for each other. Balance the work "
               "across ranks and pipeline stages (the cluster findings of an analysis of all ranks together, the "
               "job's profile directory, name the slow rank and the collectives it delays), remove host stalls "
               "before collectives (synchronisation, data loading on one rank), and keep enough micro-batches to "
               "fill the pipeline.")
        if fam == rc.TORCH:
            return rec, Fix("code", "balance ranks / pipeline stages and remove host stalls before collectives",
                            {"snippet": "# Megatron: rebalance layers per pipeline stage, e.g.\n"
                                        "#   --num-layers-per-virtual-pipeline-stage N  (interleaved schedule)\n"
                                        "#   more micro-batches: --global-batch-size / --micro-batch-size\n"
                                        "# remove per-step .item()/.cpu() before the backward pass"})
        if fam == rc.MINDSPORE:
            return rec, Fix("code", "balance pipeline stages and use more micro-batches",
                            {"snippet": "net = mindspore.nn.PipelineCell(net, micro_size=8)  # more micro-batches\n"
                                        "# assign cells to stages evenly: cell.pipeline_stage = k"})
        return rec, None
    half = rc.half_dtype(ctx.platform)
    rec = prefix + ("Communication runs serialized with compute. " if dominant == "transmit" else
                    "This profile cannot tell waiting from transfer (no communication analysis and no HCCL task "
                    "events; profile with Level1 or higher), so the saving counts only what overlap can hide. ")
    if fam == rc.TORCH:
        rec += ("Overlap gradient communication with the backward pass (DistributedDataParallel buckets with "
                "gradient_as_bucket_view=True; Megatron --overlap-grad-reduce --overlap-param-gather; DeepSpeed "
                f"\"overlap_comm\": true), communicate {half} gradients, and merge many small collectives into "
                "fewer large ones.")
        return rec, Fix("code", "overlap gradient communication with backward",
                        {"snippet": "model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25,\n"
                                    "    gradient_as_bucket_view=True)\n"
                                    "# Megatron: --overlap-grad-reduce --overlap-param-gather\n"
                                    "# DeepSpeed: \"zero_optimization\": {\"overlap_comm\": true}"})
    if fam == rc.MINDSPORE:
        rec += ("Fuse gradient all-reduces into buckets that overlap the backward pass "
                "(mindspore.set_auto_parallel_context(comm_fusion=...)), communicate in "
                f"{half}, and merge many small collectives into fewer large ones.")
        return rec, Fix("code", "fuse gradient all-reduces into larger buckets",
                        {"snippet": "mindspore.set_auto_parallel_context(\n"
                                    "    comm_fusion={\"allreduce\": {\"mode\": \"size\", \"config\": 32}})"})
    rec += (f"Overlap communication with compute, communicate in {half}, and merge many small collectives into "
            "fewer large ones.")
    return rec, None


def _r(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else round(float(v), 3)


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [OverallKB]
