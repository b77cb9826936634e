"""The host-side and time knowledge bases on the shared real samples, across layouts and execution contexts: every
report keeps its invariants (``advisor.pipeline.consistency``), and the advice of these knowledge bases fits the run --
no torch_npu setting outside PyTorch, no MindSpore option outside MindSpore, no ACL application call outside an
offline-model app, no bf16 on a chip without it, nothing about dispatch for a kernel-development capture."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pytest

from advisor.pipeline import consistency
from advisor.pipeline.analysis import run_analysis
from advisor.platform import supports_dtype

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "samples"
MINE = {"overall", "schedule", "environment", "memory", "communication", "host-inference", "precision",
        "memory-bound"}
CASES = [
    "Ascend__msinsight/test/data/pytorch/db/level1/rank0_ascend_pt",
    "Ascend__msinsight/test/data/pytorch/text/level0",
    "Ascend__msinsight/test/data/pytorch/text/level1/rank0_ascend_pt",
    "Ascend__msinsight/test/st/level2/rank_0_ascend_pt",
    "Ascend__msinsight/server/src/test/test_data/test_rank_0",
    "Ascend__msinsight/server/src/test/test_data/test_kernel_parse/op_summary_1.csv",
    "Ascend__msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv",
    "Ascend__msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json",
    "Ascend__workload_analysis/op_modeling/data/ops/MaxPool/MaxPool_Ascend310_test.csv",
    "hicann__cann-learning-hub/tutorials/ascendc_operator_development_V2/06_advanced_features/src/06.04_super_kernel/"
    "performance_case/profiling-sk/PROF_000001_20260831222700438_02482130MJQJQRAN",
    "neo-pan__ascend-msprof-skill/tests/fixtures/real_cann_minimal/reports/PROF_001",
    "mindspore-ai__mindinsight/tests/utils/resource/profiler",
    "mindspore-ai__mindinsight/tests/utils/resource/run_1/normal_run/profiler",
    "mindspore-ai__mindinsight/tests/utils/resource/cluster_propose",
]
EXAMPLE = "advisor/examples/ssd_mish_310p"
FORBIDDEN = {
    "torch": ("TASK_QUEUE_ENABLE", "CPU_AFFINITY_CONF", "torch_npu", "DataLoader", "PYTORCH_NPU", "TorchAir",
              "torch.", "DistributedDataParallel"),
    "mindspore": ("mindspore.", "dataset_sink_mode", "comm_fusion", "GRAPH_MODE"),
    "acl": ("aclmdlExecuteAsync", "aclrtMallocHost", "aclopExecuteV2"),
}
FAMILY = {"torch-eager": "torch", "torch-graph": "torch", "mindspore-graph": "mindspore",
          "mindspore-pynative": "mindspore", "om-acl": "acl"}


@cache
def report(rel: str) -> dict[str, Any]:
    path = ROOT / rel if rel == EXAMPLE else SAMPLES / rel
    if rel == EXAMPLE:
        path = next(path.glob("PROF_*"))
    return run_analysis(path).report


def _mine(rep: dict[str, Any]) -> list[dict[str, Any]]:
    """This group's findings and symptoms, wherever the hierarchy put them."""
    out = []
    for f in rep["findings"]:
        out += [x for x in [f, *f.get("symptoms", [])] if x.get("kb") in MINE]
    return out


def _text(f: dict[str, Any]) -> str:
    return " ".join(str(x) for x in (f.get("title"), f.get("recommendation"), json.dumps(f.get("fix") or {})))


@pytest.mark.parametrize("rel", [*CASES, EXAMPLE])
def test_reports_keep_their_invariants_and_the_advice_fits_the_run(rel: str) -> None:
    if rel != EXAMPLE and not (SAMPLES / rel).exists():
        pytest.skip(f"{rel} not present")
    rep = report(rel)
    mine_rules = {r for f in _mine(rep) for r in [f["rule"]]}
    assert not [p for p in consistency.problems(rep) if p.split(":")[0] in mine_rules or "advised both" in p]
    context = rep["input"]["context"]
    family = FAMILY.get(context)
    evidence = rep["input"].get("context_evidence") or ""
    for f in [x for x in rep["findings"] if x["kb"] in MINE]:
        text = _text(f).replace(evidence, "")  # the stated assumption may quote the detection's evidence
        for other, words in FORBIDDEN.items():
            if other != family:
                assert not [w for w in words if w in text], (rel, f["rule"], other, context)
        if "bf16" in text:
            assert supports_dtype(rep["platform"], "bf16"), (rel, f["rule"])
    if context == "kernel-dev":
        assert not [f for f in _mine(rep) if f["kb"] in {"overall", "schedule", "memory", "host-inference",
                                                          "memory-bound"}]


@pytest.mark.parametrize("rel", [*CASES, EXAMPLE])
def test_savings_stay_within_what_they_claim(rel: str) -> None:
    """Each finding of this group within the window; within one knowledge base, the free time and each op's time
    are not claimed past what they are."""
    if rel != EXAMPLE and not (SAMPLES / rel).exists():
        pytest.skip(f"{rel} not present")
    rep = report(rel)
    window = rep["score_detail"]["window_us"]
    time = rep["time"]
    per_rank = time.get("ranks") or {}
    per_kb_free: dict[tuple[str, Any], float] = {}
    for f in rep["findings"]:
        if f["kb"] not in MINE or f.get("symptoms") or f.get("ranks"):
            continue  # a cause with symptoms carries the union of their savings; merged ranks sum their savings
        assert f["estimated_saving_us"] <= window * 1.001
        key = (f["kb"], f.get("rank"))
        per_kb_free[key] = per_kb_free.get(key, 0.0) + (f.get("saving_by_op") or {}).get("(free time)", 0.0)
    for (kb, rank), claimed in per_kb_free.items():
        free = per_rank[str(rank)]["free_us"] if per_rank and rank is not None else time["free_us"]
        assert claimed <= free * 1.001 + 1e-6, (rel, kb, claimed, free)
