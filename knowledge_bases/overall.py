"""Overall knowledge base: where the step time goes, and the biggest bucket first.

It reads the rank's time model (``advisor.timemodel``, built once at ingest) and never recomputes it: a step is
compute + uncovered communication + free time; compute splits by the core a task ran on, uncovered communication
into wait / transmit / idle. One finding per significant bucket, each with a realistic saving bounded by its
bucket: free time above a target share, and the part of uncovered communication that overlap or rank balancing
can recover.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc
from advisor.timemodel import COMPUTE_KEYS, TimeModel
from advisor.toolkit.common import pct, severity_for
from advisor.toolkit.time import FREE_TIME_KEY, OTHER_COMM_KEY, comm_op_times, exposed_fraction, isin_mask

CORE_TITLES = {"cube": "cube (AI Core)", "vector": "vector (AI Vector Core)", "mix": "mix (MIX_AIC/MIX_AIV)",
               "ai_cpu": "AI CPU", "other": "other"}


class OverallKB(KnowledgeBase):
    id = "overall"
    title = "Step time breakdown"
    version = "2.0.0"
    api_version = "1"
    requires = ()
    requires_any = ("ops", "steps", "timeline", "op_stats")
    rules_file = "overall"
    rules = (
        RuleDoc(
            id="overall.breakdown",
            title="Step time breakdown (compute / uncovered communication / free)",
            what="Reports the rank's time model: each step split into compute (by the core its tasks ran on: "
                 "cube, vector, mix, AI CPU, other), uncovered communication (wait, transmit, idle) and free time, "
                 "from the profiler's own per-step split where it has one, else the trace's Overlap Analysis, else "
                 "derived from device tasks. Always reported (info, no saving): it is the chart of where the time "
                 "goes.",
            why="The largest cost of a step is often not an operator but communication the compute does not "
                "hide, or an idle device; operator-level findings cannot show that.",
            how_to_fix="Start with the largest bucket: see the overall.free-time, overall.uncovered-communication "
                       "and overall.compute findings.",
            needs=("steps", "ops", "comm"),
        ),
        RuleDoc(
            id="overall.free-time",
            title="Device idle (free) time",
            what="Fires when free time (no device task running inside the analyzed window) exceeds "
                 "min_bucket_share of the window. Saving: the free time above free_time.target_share of the "
                 "window. Time outside the window (an idle head or tail of the capture) is never counted.",
            why="An idle device inside a step means the host does not feed it fast enough (op dispatch, Python "
                "overhead, synchronisation, data loading): a host-bound step.",
            how_to_fix="Raise host throughput; the advice depends on how the model runs (see the finding).",
            thresholds=("min_bucket_share", "free_time", "severity"),
            needs=("steps",),
        ),
        RuleDoc(
            id="overall.uncovered-communication",
            title="Communication not hidden by compute",
            what="Fires when uncovered communication exceeds min_bucket_share of the window. Saving: the transmit "
                 "time overlap can hide behind compute not already overlapping (x overlap_efficiency) plus "
                 "sync_recoverable of the wait and idle time, at most the uncovered time above "
                 "communication.target_share of the window.",
            why="Exposed communication adds directly to the step. Waiting means ranks or pipeline stages reach "
                "the collective at different times (slow rank, stage imbalance, late host launches); transmit "
                "time means communication is serialized with compute.",
            how_to_fix="Wait/idle-dominated: balance the work across ranks and pipeline stages (see the cluster "
                       "findings), remove host stalls before collectives. Transmit-dominated: overlap gradient "
                       "communication with backward, communicate in lower precision, merge small collectives.",
            thresholds=("min_bucket_share", "communication", "severity"),
            needs=("steps", "comm"),
        ),
        RuleDoc(
            id="overall.compute",
            title="Compute is the largest bucket",
            what="Reports (info, no saving of its own) when compute is the largest bucket of the window, with its "
                 "split by core, so the operator findings can be read in proportion.",
            why="A compute-bound step is improved by the operator knowledge bases (roofline, AI CPU, fusion); "
                "the split says which ones matter.",
            how_to_fix="See the operator findings for the leading core.",
            thresholds=("min_bucket_share",),
            needs=("steps", "ops"),
        ),
    )

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        rules = ctx.rules
        t = ctx.profile.time
        window = t.window_us
        if window <= 0:
            ctx.note("overall: skipped, the profile has no step, overlap or device-task timing")
            return []
        findings = [self._breakdown_finding(ctx, t)]
        min_share = float(rules["min_bucket_share"])
        if t.free_us / window >= min_share:
            findings.append(self._free_finding(ctx, t))
        if t.uncovered_communication_us / window >= min_share:
            findings.append(self._comm_finding(ctx, t))
        compute = t.compute_us
        if compute / window >= min_share and compute >= max(t.uncovered_communication_us, t.free_us):
            findings.append(self._compute_finding(ctx, t))
        return findings

    # ----------------------------------------------------------------------------------------------------
    @staticmethod
    def _evidence(t: TimeModel) -> dict[str, Any]:
        w = t.window_us
        return {
            "sources": dict(t.sources),
            "steps": len(t.steps),
            "window_us": w,
            "breakdown": {
                "compute": {"us": t.compute_us, "share": t.compute_us / w, "by_core_us": t.compute_by_core},
                "uncovered_communication": {"us": t.uncovered_communication_us,
                                            "share": t.uncovered_communication_us / w,
                                            "by_kind_us": t.uncovered_by_kind},
                "free": {"us": t.free_us, "share": t.free_us / w},
                "overlapped_communication_us": t.overlapped_communication_us,
            },
            "table": _step_table(t),
        }

    def _breakdown_finding(self, ctx: AnalysisContext, t: TimeModel) -> Finding:
        w = t.window_us
        parts = sorted([("compute", t.compute_us), ("uncovered communication", t.uncovered_communication_us),
                        ("free", t.free_us)], key=lambda p: -p[1])
        title = "Time split: " + ", ".join(f"{pct(v / w)} {k}" for k, v in parts)
        n = len(t.steps)
        return ctx.finding(
            rule="overall.breakdown", title=title, severity="info", ops=[], evidence=self._evidence(t),
            estimated_saving_us=0.0, basis="breakdown only; savings are in the bucket findings",
            recommendation=f"{'Per step' if n > 1 else 'Over the analyzed window'} ({t.sources.get('split', '')}), "
                           f"the largest bucket is {parts[0][0]} ({pct(parts[0][1] / w)} of {w / 1000:.2f} ms); "
                           "start there.",
            confidence=0.9)

    def _free_finding(self, ctx: AnalysisContext, t: TimeModel) -> Finding:
        rules = ctx.rules
        w = t.window_us
        free = t.free_us
        target = float(rules["free_time"]["target_share"])
        saving = max(0.0, free - target * w)
        share = free / w
        evidence = self._evidence(t)
        evidence.update({"free_us": free, "free_share": share, "target_share": target,
                         "largest_gaps": _largest_gaps(ctx)})
        level = "host-bound" if share >= 2 * target else "moderately host-bound"
        rec, fix = _host_advice(ctx)
        return ctx.finding(
            rule="overall.free-time",
            title=f"Device idle {pct(share)} of the analyzed time ({free / 1000:.2f} ms): {level}",
            severity=severity_for(saving / w, rules["severity"]), ops=[], evidence=evidence,
            estimated_saving_us=saving,
            basis=f"free time above {pct(target)} of the analyzed window (free_time.target_share); source: "
                  f"{t.sources.get('split', 'time model')}",
            recommendation=rec, fix=fix, confidence=0.6, saving_by_op={FREE_TIME_KEY: saving})

    def _comm_finding(self, ctx: AnalysisContext, t: TimeModel) -> Finding:
        rules = ctx.rules
        cr = rules["communication"]
        eff = float(cr["overlap_efficiency"])
        sync_rec = float(cr["sync_recoverable"])
        target = float(cr["target_share"])
        w = t.window_us
        kinds = t.uncovered_by_kind
        hideable = 0.0
        for s in t.steps:
            room = max(0.0, s.compute_us - s.overlapped_communication_us)
            movable = s.uncovered_by_kind.get("transmit", 0.0) + s.uncovered_by_kind.get("unknown", 0.0)
            hideable += min(movable, room) * eff
        sync = sync_rec * (kinds.get("wait", 0.0) + kinds.get("idle", 0.0))
        uncovered = t.uncovered_communication_us
        saving = min(max(0.0, uncovered - target * w), hideable + sync)
        known = {k: v for k, v in kinds.items() if k != "unknown" and v > 0}
        dominant = max(known, key=lambda k: known[k]) if known else "unknown"
        evidence = self._evidence(t)
        evidence.update({"uncovered_us": uncovered, "uncovered_share": uncovered / w, "by_kind_us": kinds,
                         "dominant": dominant, "hideable_by_overlap_us": hideable, "sync_recoverable_us": sync,
                         "ops_table": _comm_ops_table(ctx)})
        ops, by_op = _comm_attribution(ctx, saving, int(cr["max_ops"]))
        rec, fix = _comm_advice(dominant, kinds, uncovered)
        title = (f"Uncovered communication {pct(uncovered / w)} of the analyzed time ({uncovered / 1000:.2f} ms)"
                 + (f", mostly {dominant} ({pct(kinds[dominant] / uncovered)})" if dominant != "unknown" else ""))
        return ctx.finding(
            rule="overall.uncovered-communication", title=title,
            severity=severity_for(saving / w, rules["severity"]), ops=ops, evidence=evidence,
            estimated_saving_us=saving,
            basis=(f"transmit time hideable behind compute not already overlapping x {eff:g} "
                   f"({hideable / 1000:.2f} ms) + {sync_rec:g} of wait/idle time ({sync / 1000:.2f} ms), capped at "
                   f"the uncovered time above {pct(target)} of the window; split from "
                   f"{t.sources.get('uncovered_by_kind', 'no source (unknown)')}"),
            recommendation=rec, fix=fix, confidence=0.5 if dominant == "unknown" else 0.6, saving_by_op=by_op)

    def _compute_finding(self, ctx: AnalysisContext, t: TimeModel) -> Finding:
        compute = t.compute_us
        split = t.compute_by_core
        lead = max(COMPUTE_KEYS, key=lambda c: split.get(c, 0.0))
        advice = {
            "vector": "Vector work leads: fuse element-wise chains and norms, remove redundant Cast/Transpose/"
                      "TransData (see the fusion and transdata findings).",
            "cube": "AI Core work leads: check cube utilization and shape alignment (roofline and operator "
                    "findings).",
            "mix": "Mixed cube/vector kernels lead: check their cube utilization and tiling (operator findings).",
            "ai_cpu": "AI CPU tasks lead: move them to AI Core (aicpu findings).",
            "other": "Most compute runs on tasks whose core the profile does not record (Level0 profiles record "
                     "none); profile with a higher level to see the split.",
        }[lead]
        evidence = self._evidence(t)
        evidence["compute_by_core_share"] = {c: (v / compute if compute else 0.0) for c, v in split.items()}
        return ctx.finding(
            rule="overall.compute",
            title=f"Compute is {pct(compute / t.window_us)} of the analyzed time, led by {CORE_TITLES[lead]} "
                  f"({pct(split.get(lead, 0.0) / compute) if compute else '0%'})",
            severity="info", ops=[], evidence=evidence, estimated_saving_us=0.0,
            basis="no saving of its own: the operator knowledge bases estimate per-op savings",
            recommendation=advice, confidence=0.8)


# ---------------------------------------------------------------------------------------------------------
# evidence and attribution
# ---------------------------------------------------------------------------------------------------------
def _step_table(t: TimeModel) -> dict[str, Any]:
    cols = ["step", "window_us", "compute_us", *(f"{k}_us" for k in COMPUTE_KEYS), "uncovered_comm_us",
            "wait_us", "transmit_us", "idle_us", "unknown_us", "free_us"]
    rows = []
    for s in t.steps:
        rows.append(["all" if s.step is None else s.step, _r(s.window_us), _r(s.compute_us),
                     *(_r(s.compute_by_core.get(k, 0.0)) for k in COMPUTE_KEYS), _r(s.uncovered_communication_us),
                     *(_r(s.uncovered_by_kind.get(k, 0.0)) for k in ("wait", "transmit", "idle", "unknown")),
                     _r(s.free_us)])
    return table(cols, rows)


def _largest_gaps(ctx: AnalysisContext, n: int = 5) -> dict[str, Any]:
    """The longest free intervals of the Overlap Analysis timeline, where the profile has one."""
    ev = ctx.profile.events
    cols = ["start_us", "duration_us"]
    if not len(ev):
        return table(cols, [])
    free = ev[isin_mask(ev["process"], ["Overlap Analysis"]) & isin_mask(ev["name"], ["Free"])]
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
    sub = ops[isin_mask(ops["core"], ["HCCL", "COMMUNICATION"])]
    return pd.DataFrame({"step": sub["step"].to_numpy(dtype="float64"), "name": sub["name"].astype(str).to_numpy(),
                         "elapse_us": sub["duration_us"].to_numpy(dtype="float64"), "wait_us": np.nan,
                         "transit_us": np.nan, "idle_us": np.nan})


def _comm_ops_table(ctx: AnalysisContext, limit: int = 15) -> dict[str, Any]:
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


def _host_advice(ctx: AnalysisContext) -> tuple[str, Fix | None]:
    rec = ("The device waits for the host. Enable the level-2 dispatch pipeline (TASK_QUEUE_ENABLE=2) and core "
           "binding (CPU_AFFINITY_CONF=1), make sure ASCEND_LAUNCH_BLOCKING is unset, remove per-step host "
           "synchronisation (.item(), .cpu(), printing device tensors), give the DataLoader more workers with "
           "pin_memory=True, and cut the number of small ops (fused torch_npu ops, graph mode). Check the "
           "environment and memory findings for settings that slow dispatch.")
    fix = Fix("env", "level-2 task queue and CPU core binding",
              {"env": {"TASK_QUEUE_ENABLE": "2", "CPU_AFFINITY_CONF": "1"}},
              "export TASK_QUEUE_ENABLE=2 CPU_AFFINITY_CONF=1")
    return rec, fix


def _comm_advice(dominant: str, kinds: Mapping[str, float], uncovered: float) -> tuple[str, Fix]:
    if dominant in ("wait", "idle"):
        rec = (f"Most uncovered communication is {dominant} time ({pct(kinds[dominant] / uncovered)}): the "
               "collectives start before their peers are ready, so ranks wait for each other. Balance the work "
               "across ranks and pipeline stages (see the cluster findings for the slow rank), remove host stalls "
               "before collectives (synchronisation, data loading on one rank), and keep the number of "
               "micro-batches high enough to fill the pipeline.")
        fix = Fix("code", "balance ranks / pipeline stages and remove host stalls before collectives",
                  {"snippet": "# Megatron: rebalance layers per pipeline stage, e.g.\n"
                              "#   --num-layers-per-virtual-pipeline-stage N  (interleaved schedule)\n"
                              "#   more micro-batches: --global-batch-size / --micro-batch-size\n"
                              "# remove per-step .item()/.cpu() before the backward pass"})
        return rec, fix
    rec = ("Communication runs serialized with compute. " if dominant == "transmit" else
           "This profile cannot tell waiting from transfer (no communication analysis and no HCCL task events; "
           "profile with profiler_level Level1 or higher), so the saving counts only what overlap can hide. ")
    rec += ("Overlap gradient communication with the backward pass (DistributedDataParallel buckets with "
            "gradient_as_bucket_view=True; Megatron --overlap-grad-reduce --overlap-param-gather; DeepSpeed "
            "\"overlap_comm\": true), communicate bf16/fp16 gradients, and merge many small collectives into fewer "
            "large ones.")
    fix = Fix("code", "overlap gradient communication with backward",
              {"snippet": "model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25,\n"
                          "    gradient_as_bucket_view=True)\n"
                          "# Megatron: --overlap-grad-reduce --overlap-param-gather\n"
                          "# DeepSpeed: \"zero_optimization\": {\"overlap_comm\": true}"})
    return rec, fix


def _r(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else round(float(v), 3)


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [OverallKB]
