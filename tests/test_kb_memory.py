"""memory KB: expensive device-memory allocator calls (timeline events, else api_statistic.csv)."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.ingest import load
from advisor.ingest.normalize import finalize_ops
from advisor.kb import AnalysisContext
from advisor.knowledge_bases.memory import MemoryKB
from advisor.model import API_COLUMNS, EVENTS_COLUMNS, STEPS_COLUMNS, Meta, Profile
from advisor.platform import resolve_platform
from advisor.toolkit.time import FREE_TIME_KEY

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SAMPLES = SHARED / "samples"
needs_samples = pytest.mark.skipif(not SAMPLES.is_dir(), reason="../shared/samples not available")
CJK = re.compile(r"[\u3000-\u9fff]")



def run(profile: Profile, rules) -> list[Finding]:
    platform = resolve_platform(rules, profile.meta.chip)
    findings, statuses = engine.run([engine.KBInfo(MemoryKB, "test", "", "")], profile, None, rules, platform)
    assert statuses[0].status == "ok", statuses[0].reason
    return findings


def make(events: list[tuple[str, float, float]] | None = None, api: list[tuple[str, str, float, int]] | None = None,
         free_us: float | None = None, env: dict[str, str] | None = None, context: str = "torch-eager") -> Profile:
    ops = finalize_ops(pd.DataFrame({"name": ["mm"], "type": ["MatMulV2"], "core": ["AI_CORE"], "start_us": [0.0],
                                     "duration_us": [100.0]}))
    p = Profile(ops=ops, meta=Meta(source="mem", environment=env or {}, context=context))
    if events:
        ev = pd.DataFrame([{"process": "CANN", "name": n, "category": None, "start_us": s, "duration_us": d,
                            "tid": "1", "args": None} for n, s, d in events])[EVENTS_COLUMNS]
        for c in ("process", "name", "tid"):
            ev[c] = ev[c].astype("category")
        p.events = ev
    if api:
        p.api = pd.DataFrame([{"level": lvl, "name": n, "total_us": t, "count": c, "avg_us": t / c, "min_us": 0.0,
                               "max_us": t} for lvl, n, t, c in api])[API_COLUMNS]
    if free_us is not None:
        steps = pd.DataFrame({"step": [1.0], "computing_us": [50_000.0], "comm_not_overlapped_us": [0.0],
                              "overlapped_us": [0.0], "free_us": [free_us]})
        for c in STEPS_COLUMNS:
            if c not in steps.columns:
                steps[c] = np.nan
        p.steps = steps[STEPS_COLUMNS]
    return p


def apis(f: Finding) -> set[str]:
    return {row[0] for row in f.evidence["table"]["rows"]}


def test_many_allocations_fire(rules):
    events = [("AscendCL@aclrtMalloc", i * 1000.0, 600.0) for i in range(30)]
    f = run(make(events, free_us=50_000.0), rules)
    assert len(f) == 1 and f[0].rule == "memory.allocator-calls"
    assert f[0].ops == [] and apis(f[0]) == {"AscendCL@aclrtMalloc"}
    assert f[0].evidence["allocator_us"] == pytest.approx(18_000.0) and f[0].evidence["calls"] == 30
    assert f[0].estimated_saving_us == pytest.approx(0.9 * 18_000.0)
    assert f[0].saving_by_op == {FREE_TIME_KEY: pytest.approx(16_200.0)}
    assert f[0].fix is not None and f[0].fix.data["env"] == {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}


def test_below_threshold_is_quiet(rules):
    assert run(make([("AscendCL@aclrtMalloc", 0.0, 9_000.0)]), rules) == []


def test_nested_runtime_calls_count_once(rules):
    events = [("AscendCL@aclrtMalloc", 0.0, 6_000.0), ("Runtime@DevMalloc", 100.0, 5_800.0),
              ("AscendCL@aclrtFree", 10_000.0, 5_000.0), ("Runtime@DevFree", 10_100.0, 4_800.0),
              ("AscendCL@aclnnAdd", 20_000.0, 50_000.0)]
    f = run(make(events), rules)
    assert f and f[0].evidence["allocator_us"] == pytest.approx(11_000.0)
    assert apis(f[0]) == {"AscendCL@aclrtMalloc", "Runtime@DevMalloc", "AscendCL@aclrtFree", "Runtime@DevFree"}


def test_saving_capped_by_free_time(rules):
    f = run(make([("AscendCL@aclMallocMemInner", 0.0, 20_000.0)], free_us=5_000.0), rules)
    assert f[0].estimated_saving_us == pytest.approx(5_000.0)
    assert "capped" in f[0].basis


def test_api_statistic_fallback(rules):
    api = [("acl", "aclrtMalloc", 15_000.0, 50), ("runtime", "DevMalloc", 14_000.0, 50),
           ("acl", "aclnnAdd", 90_000.0, 500)]
    f = run(make(api=api), rules)
    assert f and f[0].evidence["source"] == "api_statistic"
    # acl calls wrap the runtime ones: the larger level is the time
    assert f[0].evidence["allocator_us"] == pytest.approx(15_000.0)


def test_no_caching_allocator_is_named(rules):
    f = run(make([("AscendCL@aclrtMalloc", 0.0, 20_000.0)], env={"PYTORCH_NO_NPU_MEMORY_CACHING": "1"}), rules)
    assert f[0].recommendation.startswith("PYTORCH_NO_NPU_MEMORY_CACHING is set")


def test_no_allocator_data_note(rules):
    ctx = AnalysisContext("memory", make([("AscendCL@aclnnAdd", 0.0, 20.0)]), None, rules.for_kb("memory"), {})
    assert list(MemoryKB().analyze(ctx)) == [] and "no device-memory allocator calls" in ctx.notes[0]


# ---------------------------------------------------------------------------------------------------------
# advice fitted to the run: the same allocator calls, per execution context
# ---------------------------------------------------------------------------------------------------------
MALLOCS = [("AscendCL@aclrtMalloc", i * 1000.0, 600.0) for i in range(30)]


def test_acl_app_is_told_to_allocate_once(rules):
    (f,) = run(make(MALLOCS, free_us=50_000.0, context="om-acl"), rules)
    assert "aclrtMallocHost" in f.recommendation and "once at start-up" in f.recommendation
    assert f.fix is not None and f.fix.kind == "code"
    text = f.recommendation + str(f.fix.data)
    assert "PYTORCH_" not in text and "torch" not in text


def test_mindspore_is_told_to_size_its_pool(rules):
    (f,) = run(make(MALLOCS, free_us=50_000.0, context="mindspore-graph"), rules)
    assert "max_device_memory" in f.recommendation and "PYTORCH_" not in f.recommendation + str(f.fix.data)
    assert "environment" not in f.evidence


def test_kernel_development_is_not_assessed(rules):
    ctx = AnalysisContext("memory", make(MALLOCS, free_us=50_000.0, context="kernel-dev"), None,
                          rules.for_kb("memory"), {})
    assert list(MemoryKB().analyze(ctx)) == [] and "kernel-development" in ctx.notes[0]


def test_rule_is_a_cause_with_confidence_from_the_rules(rules):
    assert MemoryKB.rule("memory.allocator-calls").role == "cause"
    (f,) = run(make(MALLOCS, free_us=50_000.0), rules)
    assert f.confidence == pytest.approx(rules.for_kb("memory")["confidence"])



def test_minimal_fixture_in_english(minimal, rules):
    """The 12 ms aclMallocMemInner; the peer prints this finding in Chinese whatever -l says."""
    f = run(load(minimal)[0], rules)
    assert len(f) == 1 and apis(f[0]) == {"AscendCL@aclMallocMemInner"}
    assert f[0].evidence["allocator_us"] == pytest.approx(12_000.0)
    # 12 ms of allocator calls x recoverable_fraction 0.9, inside the 38.7 ms the device idles in ProfilerStep#1
    assert f[0].estimated_saving_us == pytest.approx(0.9 * 12_000.0)
    for text in (f[0].title, f[0].recommendation, f[0].basis):
        assert not CJK.search(text) and text.isascii()


@needs_samples
def test_real_profiles_with_few_allocations_are_quiet(rules):
    """The Megatron rank's api_statistic (DevMalloc 87 us) and the peer's own timeline test file (73 us)."""
    rank0 = load(SAMPLES / "Ascend__msinsight/test/st/level2/rank_0_ascend_pt")[0]
    assert rank0.api["name"].astype(str).eq("DevMalloc").any()
    assert run(rank0, rules) == []
    trace = load(SAMPLES / "Ascend__msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json")[0]
    assert trace.events["name"].astype(str).eq("AscendCL@aclMallocMemInner").any()
    assert run(trace, rules) == []
