"""Memory knowledge base: expensive device-memory allocator calls.

torch_npu's caching allocator serves a training step from memory it already holds; calls that reach the runtime
allocator (``aclrtMalloc``, ``aclMallocMemInner``, ``DevMalloc``...) are slow host work that stalls op dispatch.
Many or long ones mean the cache is bypassed (``PYTORCH_NO_NPU_MEMORY_CACHING``), emptied
(``torch.npu.empty_cache()``) or fragmented. The calls come from the timeline (host events) or, without one, from
api_statistic.csv. Unlike msprof-analyze, whose text for this finding is always Chinese, the text is English.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc
from advisor.model import busy_time_us
from advisor.toolkit.common import severity_for
from advisor.toolkit.time import FREE_TIME_KEY

COMM_CORES = ("HCCL", "COMMUNICATION")


def _full_match(patterns: Sequence[str]) -> re.Pattern[str] | None:
    pats = [p for p in patterns if p]
    return re.compile("|".join(f"(?:{p})" for p in pats)) if pats else None


def allocator_calls(ctx: AnalysisContext) -> tuple[pd.DataFrame, float, str]:
    """Per allocator API: count, total_us, max_us; the union time of all calls; and the source."""
    rules = ctx.rules
    ev = ctx.profile.events
    pat = _full_match(rules.get("event_patterns") or [])
    if len(ev) and pat is not None:
        names = ev["name"].astype("category")
        cats = list(names.cat.categories)
        hit = np.array([bool(pat.fullmatch(str(c))) for c in cats], dtype=bool)
        codes = names.cat.codes.to_numpy()
        mask = (codes >= 0) & hit[np.maximum(codes, 0)]
        if mask.any():
            sub = ev.loc[mask, ["name", "start_us", "duration_us"]].copy()
            sub["name"] = sub["name"].astype(str)
            per = sub.groupby("name")["duration_us"].agg(count="size", total_us="sum", max_us="max")
            return per.sort_values("total_us", ascending=False), busy_time_us(sub), "timeline"
    api = ctx.profile.api
    apat = _full_match(rules.get("api_patterns") or [])
    if len(api) and apat is not None:
        names = api["name"].astype(str)
        mask = names.map(lambda n: bool(apat.fullmatch(n))).to_numpy(dtype=bool)
        if mask.any():
            sub = api.loc[mask]
            per = pd.DataFrame({"count": sub["count"].to_numpy(dtype="float64"),
                                "total_us": sub["total_us"].to_numpy(dtype="float64"),
                                "max_us": sub["max_us"].to_numpy(dtype="float64")},
                               index=pd.Index(names[mask].to_numpy(), name="name"))
            per = per.groupby(level=0).agg({"count": "sum", "total_us": "sum", "max_us": "max"})
            # acl calls wrap runtime calls: the largest level is the best estimate of their union
            levels = sub.groupby(sub["level"].astype(str))["total_us"].sum()
            return per.sort_values("total_us", ascending=False), float(levels.max()), "api_statistic"
    return pd.DataFrame(columns=["count", "total_us", "max_us"]), 0.0, ""


class MemoryKB(KnowledgeBase):
    id = "memory"
    title = "Device memory allocation"
    version = "1.0.0"
    api_version = "1"
    requires = ()
    requires_any = ("events", "api")
    rules_file = "memory"
    rules = (
        RuleDoc(
            id="memory.allocator-calls",
            title="Expensive device-memory allocator calls",
            what="Sums the time of device-memory allocator calls (timeline events AscendCL@aclMallocMemInner, "
                 "AscendCL@aclrtMalloc*, AscendCL@aclrtFree*, Runtime@DevMalloc/DevFree..., else the same APIs in "
                 "api_statistic.csv; nested calls counted once) and fires when it reaches min_total_us. Saving: "
                 "recoverable_fraction of that time, at most the device's free time (allocation is host work "
                 "that stalls op dispatch).",
            why="A working caching allocator serves every step from memory it holds; runtime allocations on the "
                "hot path cost milliseconds of host time each and synchronize the device.",
            how_to_fix="Keep the caching allocator on (unset PYTORCH_NO_NPU_MEMORY_CACHING), set "
                       "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True to stop fragmentation, remove "
                       "torch.npu.empty_cache() from the training loop, and pre-allocate buffers whose size "
                       "changes (pad dynamic shapes to a few buckets).",
            thresholds=("event_patterns", "api_patterns", "min_total_us", "recoverable_fraction", "severity"),
            needs=("events", "api", "steps"),
        ),
    )

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        rules = ctx.rules
        per, union, source = allocator_calls(ctx)
        if not len(per):
            ctx.note("memory: no device-memory allocator calls in the timeline or api_statistic.csv")
            return []
        threshold = float(rules.get("min_total_us", 10000))
        if union < threshold:
            return []
        t = ctx.profile.time
        total, free = t.window_us, t.free_us
        step_source = t.sources.get("split", "")
        frac = float(rules.get("recoverable_fraction", 0.9))
        saving = frac * union
        capped = total > 0 and saving > free
        if capped:
            saving = free
        denom = total if total > 0 else union
        env = ctx.profile.meta.environment
        names = [str(n) for n in per.index]
        evidence: dict[str, Any] = {
            "source": source, "allocator_us": union, "threshold_us": threshold, "calls": int(per["count"].sum()),
            "step_us": total, "free_us": free if total > 0 else None, "step_source": step_source or None,
            "table": table(["api", "count", "total_us", "max_us"],
                           [[n, int(r["count"]), round(float(r["total_us"]), 3), round(float(r["max_us"]), 3)]
                            for n, r in per.iterrows()]),
            "environment": {k: env[k] for k in ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_NO_NPU_MEMORY_CACHING")
                            if k in env},
        }
        cause = self._cause(env)
        return [ctx.finding(
            rule="memory.allocator-calls",
            title=f"Device-memory allocator calls take {union / 1000:.1f} ms ({_calls(int(per['count'].sum()))}"
                  f"{f', {union / total:.1%} of the step' if 0 < union <= total else ''})",
            severity=severity_for(saving / denom, rules.get("severity", {})),
            ops=names, evidence=evidence, estimated_saving_us=saving,
            basis=f"{frac:g} of the allocator time (recoverable_fraction)"
                  + (", capped at the device's free time" if capped else ""),
            recommendation=cause + "Remove torch.npu.empty_cache() from the training loop and pre-allocate "
                           "buffers whose size changes between steps (pad dynamic shapes to a few sizes); with "
                           "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True the allocator grows segments instead of "
                           "fragmenting and reallocating.",
            fix=Fix("env", "caching allocator with expandable segments",
                    {"env": {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"},
                     "unset": ["PYTORCH_NO_NPU_MEMORY_CACHING"]},
                    "export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True; unset PYTORCH_NO_NPU_MEMORY_CACHING"),
            confidence=0.6, saving_by_op={FREE_TIME_KEY: saving})]

    @staticmethod
    def _cause(env: dict[str, str]) -> str:
        if env.get("PYTORCH_NO_NPU_MEMORY_CACHING", "").strip().lower() in ("1", "true"):
            return ("PYTORCH_NO_NPU_MEMORY_CACHING is set: the caching allocator is off, so every tensor goes to "
                    "the runtime allocator. Unset it. ")
        conf = env.get("PYTORCH_NPU_ALLOC_CONF")
        if conf is not None and "expandable_segments:true" not in conf.replace(" ", "").lower():
            return "PYTORCH_NPU_ALLOC_CONF has no expandable_segments:True. "
        return ""


def _calls(n: int) -> str:
    return f"{n} call" if n == 1 else f"{n} calls"


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [MemoryKB]
