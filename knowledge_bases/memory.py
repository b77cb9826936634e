"""Memory knowledge base: expensive device-memory allocator calls.

A framework's memory pool (torch_npu's caching allocator, MindSpore's memory pool) or an inference application's
buffers allocated once serve every step from memory already held; calls that reach the runtime allocator
(``aclrtMalloc``, ``aclMallocMemInner``, ``DevMalloc``...) are slow host work that stalls op dispatch. Many or long
ones mean the cache is bypassed (``PYTORCH_NO_NPU_MEMORY_CACHING``), emptied (``torch.npu.empty_cache()``),
fragmented, too small, or -- in an ACL application -- that buffers are allocated per inference. The calls come from
the timeline (host events) or, without one, from api_statistic.csv. Unlike msprof-analyze, whose text for this
finding is always Chinese, the text is English.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection
from advisor.toolkit import run_context as rc
from advisor.toolkit.common import severity_for
from advisor.toolkit.time import FREE_TIME_KEY, union_length


def _full_match(patterns: Sequence[str]) -> re.Pattern[str] | None:
    pats = [p for p in patterns if p]
    return re.compile("|".join(f"(?:{p})" for p in pats)) if pats else None


def allocator_calls(ctx: AnalysisContext) -> tuple[pd.DataFrame, float, str]:
    """Per allocator API: count, total_us, max_us; the union time of all calls; and the source."""
    rules = ctx.rules
    ev = ctx.profile.events
    pat = _full_match(rules["event_patterns"])
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
            start = sub["start_us"].to_numpy(dtype="float64")
            spent = union_length(start, start + sub["duration_us"].to_numpy(dtype="float64"))
            return per.sort_values("total_us", ascending=False), spent, "timeline"
    api = ctx.profile.api
    apat = _full_match(rules["api_patterns"])
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
    version = "2.0.0"
    api_version = "1.5"
    requires = ()
    requires_any = ("events", "api")
    ops_columns = ()
    events_read = staticmethod(lambda rules: EventSelection(names=tuple(p for p in rules["event_patterns"] if p)))
    """The allocator calls (event_patterns, full-match regular expressions like the selection's)."""
    rules_file = "memory"

    @rule(RuleDoc(
        id="memory.allocator-calls",
        explains={
            "overall.free-time": "the device idles while the host allocates device memory: a caching allocator configuration removes the calls",
        },
        title="Expensive device-memory allocator calls",
        what="Sums the time of device-memory allocator calls (timeline events matching event_patterns -- "
             "AscendCL@aclMallocMemInner, AscendCL@aclrtMalloc*, AscendCL@aclrtFree*, Runtime@DevMalloc/DevFree... "
             "-- else the same APIs in api_statistic.csv, api_patterns; nested calls counted once) and fires from "
             "{min_total_us} µs on. Saving: {recoverable_fraction} of that time, at most the device's free time "
             "(allocation is host work that stalls op dispatch), attributed to the (free time) pseudo-op. Not "
             "assessed for kernel-development captures (contexts: {contexts}).",
        why="A working memory pool serves every step from memory it holds; runtime allocations on the hot path cost "
            "milliseconds of host time each and synchronize the device.",
        how_to_fix="PyTorch: keep the caching allocator on (unset PYTORCH_NO_NPU_MEMORY_CACHING), set "
                   "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True, remove torch.npu.empty_cache() from the "
                   "training loop. MindSpore: size the memory pool for the step's peak. ACL applications: allocate "
                   "device and pinned host buffers once at start-up and reuse them. Everywhere: pad dynamic shapes "
                   "to a few sizes so buffers can be reused.",
        thresholds=("contexts", "event_patterns", "api_patterns", "min_total_us", "recoverable_fraction",
                    "confidence", "severity"),
        needs=("events", "api", "steps"),
    ))
    def allocator(self, ctx: AnalysisContext) -> list[Finding]:
        r = ctx.rules
        if not rc.applies(ctx, r["contexts"]):
            rc.skip_note(ctx, "memory.allocator-calls")
            return []
        per, spent, source = allocator_calls(ctx)
        if not len(per):
            ctx.note("memory: no device-memory allocator calls in the timeline or api_statistic.csv")
            return []
        threshold = float(r["min_total_us"])
        if spent < threshold:
            return []
        t = ctx.profile.time
        total, free = t.window_us, t.free_us
        frac = float(r["recoverable_fraction"])
        saving = frac * spent
        capped = total > 0 and saving > free
        if capped:
            saving = free
        calls = int(per["count"].sum())
        evidence: dict[str, Any] = {
            "source": source, "allocator_us": spent, "threshold_us": threshold, "calls": calls,
            "window_us": total, "free_us": free if total > 0 else None,
            "window_source": t.sources.get("split") or None,
            "table": table(["api", "count", "total_us", "max_us"],
                           [[n, int(x["count"]), round(float(x["total_us"]), 3), round(float(x["max_us"]), 3)]
                            for n, x in per.iterrows()]),
        }
        rec, fix = _advice(ctx)
        if rc.family(ctx) == rc.TORCH:
            env = ctx.profile.meta.environment
            evidence["environment"] = {k: env[k] for k in ("PYTORCH_NPU_ALLOC_CONF", "PYTORCH_NO_NPU_MEMORY_CACHING")
                                       if k in env}
        return [ctx.finding(
            rule="memory.allocator-calls",
            title=f"Device-memory allocator calls take {spent / 1000:.1f} ms ({calls} call{'s' if calls != 1 else ''}"
                  f"{f', {spent / total:.1%} of the analyzed time' if 0 < spent <= total else ''})",
            severity=severity_for(saving / (total if total > 0 else spent), r["severity"]),
            ops=[], evidence=evidence, estimated_saving_us=saving,
            basis=f"{frac:g} of the allocator time (recoverable_fraction)"
                  + (", capped at the device's free time" if capped else ""),
            recommendation=rec, fix=fix, confidence=float(r["confidence"]), saving_by_op={FREE_TIME_KEY: saving})]


def _advice(ctx: AnalysisContext) -> tuple[str, Fix | None]:
    fam = rc.family(ctx)
    if fam == rc.TORCH:
        return _torch_advice(ctx)
    if fam == rc.MINDSPORE:
        return ("The runtime allocator is called during the run: MindSpore's memory pool grows in steps instead "
                "of serving the step from memory it holds. Give the pool room for the step's peak "
                "(mindspore.set_context(max_device_memory=...), and in PyNative mode a mempool_block_size that "
                "covers the peak) and keep input shapes to a few sizes so memory is reused.",
                Fix("code", "size the MindSpore memory pool for the step's peak",
                    {"snippet": "mindspore.set_context(max_device_memory=\"<GB the job may use>\",\n"
                                "                       mempool_block_size=\"<GB covering the step's peak>\")"}))
    if fam == rc.OM:
        return ("The application calls the runtime allocator while it runs. Allocate the model's input and "
                "output device buffers (aclrtMalloc) and pinned host buffers (aclrtMallocHost) once at start-up, "
                "build the datasets once and reuse them for every inference; frequent allocation and release of "
                "pinned host memory is slow and synchronizing.",
                Fix("code", "allocate buffers once, outside the inference loop",
                    {"snippet": "aclrtMalloc(&dev_in, size, ACL_MEM_MALLOC_HUGE_FIRST);  // once, at start-up\n"
                                "aclrtMallocHost(&host_in, size);                        // once, at start-up\n"
                                "// per frame: fill host_in, aclrtMemcpyAsync, aclmdlExecuteAsync -- no malloc/free"}))
    return (rc.unknown_context(ctx) + "The runtime allocator is called while the model runs: allocate buffers "
            "once and reuse them (a memory pool large enough for the peak), and keep input shapes to a few sizes so "
            "memory is reused."), None


def _torch_advice(ctx: AnalysisContext) -> tuple[str, Fix]:
    cause = ""
    if (rc.env_value(ctx, "PYTORCH_NO_NPU_MEMORY_CACHING") or "").lower() in ("1", "true"):
        cause = ("PYTORCH_NO_NPU_MEMORY_CACHING is set: the caching allocator is off, so every tensor goes to the "
                 "runtime allocator. Unset it. ")
    conf = rc.env_value(ctx, "PYTORCH_NPU_ALLOC_CONF")
    if conf is not None and "expandable_segments:true" not in conf.replace(" ", "").lower():
        cause += "PYTORCH_NPU_ALLOC_CONF has no expandable_segments:True. "
    rec = (cause + "Remove torch.npu.empty_cache() from the training loop and pre-allocate buffers whose size "
           "changes between steps (pad dynamic shapes to a few sizes); with "
           "PYTORCH_NPU_ALLOC_CONF=expandable_segments:True the allocator grows segments instead of fragmenting "
           "and reallocating.")
    return rec, Fix("env", "caching allocator with expandable segments",
                    {"env": {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"},
                     "unset": ["PYTORCH_NO_NPU_MEMORY_CACHING"]},
                    "export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True; unset PYTORCH_NO_NPU_MEMORY_CACHING")


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [MemoryKB]
