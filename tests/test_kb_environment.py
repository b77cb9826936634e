"""environment KB: environment variables recorded by the profiler (profiler_metadata.json ENV_VARIABLES), judged
for the run's execution context (torch_npu variables only for PyTorch runs)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.common.errors import RulesError
from advisor.config.loader import builtin_rules_dir, load_effective_rules
from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.ingest import load
from advisor.ingest.normalize import finalize_ops
from advisor.kb import AnalysisContext
from advisor.knowledge_bases.environment import EnvironmentKB, matches
from advisor.knowledge_bases.overall import OverallKB
from advisor.model import STEPS_COLUMNS, Meta, Profile
from advisor.pipeline import hierarchy, score
from advisor.platform import resolve_platform
from advisor.toolkit.time import FREE_TIME_KEY

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MSINSIGHT = SHARED / "samples" / "Ascend__msinsight"
needs_samples = pytest.mark.skipif(not MSINSIGHT.is_dir(), reason="../shared/samples not available")



def run(profile: Profile, rules, kbs=(EnvironmentKB,)) -> list[Finding]:
    platform = resolve_platform(rules, profile.meta.chip)
    findings, statuses = engine.run([engine.KBInfo(k, "test", "", "") for k in kbs], profile, None, rules, platform)
    assert all(s.status == "ok" for s in statuses), [s.reason for s in statuses]
    return findings


def by_var(findings: list[Finding]) -> dict[str, Finding]:
    return {f.evidence["variable"]: f for f in findings if f.kb == "environment"}


def make(env: dict[str, str], *, comm: bool = False, chip: str | None = "Ascend910B2", free_us: float = 200.0,
         op_state: str | None = None, context: str = "torch-eager") -> Profile:
    rows = {"name": ["mm", "add"], "type": ["MatMulV2", "Add"], "core": ["AI_CORE", "AI_VECTOR_CORE"],
            "start_us": [0.0, 100.0], "duration_us": [90.0, 50.0]}
    if comm:
        rows = {k: [*v, x] for (k, v), x in zip(rows.items(), ["hcom_allReduce__1_0_1", "hcom_allReduce_", "HCCL",
                                                                200.0, 100.0], strict=True)}
    if op_state:
        rows["op_state"] = [op_state] * len(rows["name"])
    p = Profile(ops=finalize_ops(pd.DataFrame(rows)), meta=Meta(source="mem", chip=chip, environment=env,
                                                                  context=context))
    steps = pd.DataFrame({"step": [1.0], "computing_us": [800.0], "comm_not_overlapped_us": [0.0],
                          "overlapped_us": [0.0], "free_us": [free_us]})
    for c in STEPS_COLUMNS:
        if c not in steps.columns:
            steps[c] = np.nan
    p.steps = steps[STEPS_COLUMNS]
    return p


def test_conditions():
    assert matches("1", {"equals": ["1", "true"]}) and matches("TRUE", {"equals": ["1", "true"]})
    assert not matches("0", {"equals": ["1"]}) and not matches("", {"equals": ["1"]})
    assert matches("1", {"less_than": 3}) and not matches("3", {"less_than": 3}) and not matches("x", {"less_than": 3})
    spec = {"missing_token": "expandable_segments:True", "unset_matches": True}
    assert matches("", spec) and matches("max_split_size_mb:128", spec)
    assert not matches("expandable_segments: true,max_split_size_mb:128", spec)
    assert matches("ring", {"is_set": True}) and not matches(" ", {"is_set": True})


def test_launch_blocking_and_log_level(rules):
    p = make({"ASCEND_LAUNCH_BLOCKING": "1", "ASCEND_GLOBAL_LOG_LEVEL": "0", "PYTORCH_NPU_ALLOC_CONF":
              "expandable_segments:True"})
    f = by_var(run(p, rules))
    assert set(f) == {"ASCEND_LAUNCH_BLOCKING", "ASCEND_GLOBAL_LOG_LEVEL"}
    lb = f["ASCEND_LAUNCH_BLOCKING"]
    assert lb.rule == "environment.debug" and lb.ops == []
    assert lb.estimated_saving_us == pytest.approx(0.5 * 200.0)
    assert lb.saving_by_op == {FREE_TIME_KEY: pytest.approx(100.0)}
    assert lb.fix is not None and lb.fix.kind == "env" and lb.fix.data == {"unset": ["ASCEND_LAUNCH_BLOCKING"]}
    assert "synchronous" in lb.recommendation
    log = f["ASCEND_GLOBAL_LOG_LEVEL"]
    assert log.fix is not None and log.fix.command == "export ASCEND_GLOBAL_LOG_LEVEL=3"
    assert log.estimated_saving_us == pytest.approx(0.2 * 200.0)


def test_warning_log_level_is_info_only(rules):
    f = by_var(run(make({"ASCEND_GLOBAL_LOG_LEVEL": "2"}), rules))["ASCEND_GLOBAL_LOG_LEVEL"]
    assert f.severity == "info" and f.estimated_saving_us == 0


def test_defaults_and_unrecorded_are_not_flagged(rules):
    """Recorded empty = unset = the default: the peer flags empty ASCEND_GLOBAL_LOG_LEVEL and ACLNN_CACHE_LIMIT; not us."""
    env = {"ASCEND_GLOBAL_LOG_LEVEL": "", "ACLNN_CACHE_LIMIT": "", "ASCEND_LAUNCH_BLOCKING": "", "HCCL_ALGO": "",
           "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True", "TASK_QUEUE_ENABLE": "2", "HCCL_BUFFSIZE": "400"}
    assert run(make(env, comm=True), rules) == []
    # TASK_QUEUE_ENABLE=0 flagged only when the profile records it
    assert "TASK_QUEUE_ENABLE" in by_var(run(make({"TASK_QUEUE_ENABLE": "0"}), rules))
    assert run(make({"ASCEND_GLOBAL_LOG_LEVEL": "3"}), rules) == []


def test_hccl_settings_need_communication(rules):
    env = {"HCCL_ALGO": "level0:NA;level1:ring", "HCCL_BUFFSIZE": "100"}
    assert run(make(env, comm=False), rules) == []
    f = by_var(run(make(env, comm=True), rules))
    assert set(f) == {"HCCL_ALGO", "HCCL_BUFFSIZE"}
    assert f["HCCL_ALGO"].severity == "info" and f["HCCL_ALGO"].rule == "environment.communication"
    assert f["HCCL_BUFFSIZE"].fix is not None and f["HCCL_BUFFSIZE"].fix.data == {"env": {"HCCL_BUFFSIZE": "200"}}


def test_rdma_settings_fix_is_configuration(rules):
    f = by_var(run(make({"HCCL_RDMA_TC": "100"}, comm=True), rules))["HCCL_RDMA_TC"]
    assert f.fix is not None and f.fix.kind == "config"


def test_inf_nan_mode_by_chip(rules):
    env = {"INF_NAN_MODE_ENABLE": "0"}
    assert "INF_NAN_MODE_ENABLE" in by_var(run(make(env, chip="Ascend910B2"), rules))
    assert run(make(env, chip="Ascend910A"), rules) == []
    ctx = AnalysisContext("environment", make(env, chip=None), None, rules.for_kb("environment"), {})
    assert list(EnvironmentKB().analyze(ctx)) == [] and "chip is unknown" in ctx.notes[0]


def test_host_cache_on_dynamic_shapes(rules):
    env = {"HOST_CACHE_CAPACITY": ""}
    assert "HOST_CACHE_CAPACITY" in by_var(run(make(env, op_state="dynamic"), rules))
    assert run(make(env, op_state="static"), rules) == []
    assert run(make({"HOST_CACHE_CAPACITY": "20"}, op_state="dynamic"), rules) == []


def test_no_environment_is_a_note(rules):
    ctx = AnalysisContext("environment", make({}), None, rules.for_kb("environment"), {})
    assert list(EnvironmentKB().analyze(ctx)) == []
    assert "records no environment" in ctx.notes[0]


def test_no_free_time_no_saving(rules):
    f = by_var(run(make({"ASCEND_LAUNCH_BLOCKING": "1"}, free_us=0.0), rules))["ASCEND_LAUNCH_BLOCKING"]
    assert f.estimated_saving_us == 0 and f.severity == "major"


def test_free_time_savings_counted_once_with_overall(rules):
    p = make({"ASCEND_LAUNCH_BLOCKING": "1", "TASK_QUEUE_ENABLE": "0"}, free_us=600.0)
    findings = run(p, rules, kbs=(EnvironmentKB, OverallKB))
    free = next(f for f in findings if f.rule == "overall.free-time")
    env_total = sum(f.estimated_saving_us for f in findings if f.kb == "environment")
    assert env_total > free.estimated_saving_us  # 0.5 x 600 + 0.4 x 600 = 540 > 600 - 0.1 x 1400 = 460
    assert score.recoverable_us(findings, weighted=False) == pytest.approx(
        max(free.estimated_saving_us, 0.5 * 600.0, 0.4 * 600.0))


def test_settings_together_claim_at_most_the_free_time(rules):
    """0.5 + 0.4 + 0.4 of the free time: scaled down together, in proportion, to the free time."""
    env = {"ASCEND_LAUNCH_BLOCKING": "1", "TASK_QUEUE_ENABLE": "0", "PYTORCH_NO_NPU_MEMORY_CACHING": "1"}
    f = by_var(run(make(env, free_us=600.0), rules))
    assert sum(x.estimated_saving_us for x in f.values()) == pytest.approx(600.0)
    assert f["ASCEND_LAUNCH_BLOCKING"].estimated_saving_us == pytest.approx(600.0 * 0.5 / 1.3)
    assert all("scaled by" in x.basis for x in f.values())


def test_free_time_symptom_folds_under_the_setting(rules):
    """The idle device (overall.free-time, a symptom) is explained by the setting that slows dispatch: one root
    cause in the report, the free time counted once."""
    findings = run(make({"TASK_QUEUE_ENABLE": "0"}, free_us=600.0), rules, kbs=(EnvironmentKB, OverallKB))
    docs = [r for k in (EnvironmentKB, OverallKB) for r in k.rules]
    (cause,) = hierarchy.absorb(findings, {r.id: r.role for r in docs}, None, hierarchy.mechanisms_of(docs))
    assert cause.rule == "environment.dispatch" and [s["rule"] for s in cause.symptoms] == ["overall.free-time"]
    assert cause.estimated_saving_us <= 600.0


def test_schema_rejects_two_conditions(tmp_path):
    override = tmp_path / "over.yaml"
    override.write_text("rules:\n  environment:\n    variables:\n      X_VAR:\n        category: debug\n"
                        "        equals: ['1']\n        less_than: 3\n        recommended: '0'\n        why: 'w'\n"
                        "        contexts: [torch-eager]\n        free_time_fraction: 0.0\n        severity: info\n")
    with pytest.raises(RulesError):
        load_effective_rules([builtin_rules_dir()], override_file=override)


def test_schema_requires_contexts_and_fraction(tmp_path):
    override = tmp_path / "over.yaml"
    override.write_text("rules:\n  environment:\n    variables:\n      X_VAR:\n        category: debug\n"
                        "        equals: ['1']\n        recommended: '0'\n        why: 'w'\n        severity: info\n")
    with pytest.raises(RulesError):
        load_effective_rules([builtin_rules_dir()], override_file=override)


# ---------------------------------------------------------------------------------------------------------
# advice fitted to the run: torch_npu variables only for PyTorch, CANN/HCCL variables everywhere
# ---------------------------------------------------------------------------------------------------------
TORCH_VARS = {"ASCEND_LAUNCH_BLOCKING": "1", "TASK_QUEUE_ENABLE": "0", "PYTORCH_NO_NPU_MEMORY_CACHING": "1",
              "PYTORCH_NPU_ALLOC_CONF": "", "ACLNN_CACHE_LIMIT": "100"}
CANN_VARS = {"ASCEND_GLOBAL_LOG_LEVEL": "0", "ACL_OP_COMPILER_CACHE_MODE": "disable"}


@pytest.mark.parametrize("context", ["om-acl", "mindspore-graph", "mindspore-pynative"])
def test_torch_variables_not_advised_outside_pytorch(rules, context):
    p = make({**TORCH_VARS, **CANN_VARS}, context=context)
    ctx = AnalysisContext("environment", p, None, rules.for_kb("environment"), {})
    f = by_var(EnvironmentKB().analyze(ctx))
    assert set(f) == set(CANN_VARS), context
    assert all(f"{var}=" in " ".join(ctx.notes) and f"{context} run" in " ".join(ctx.notes) for var in TORCH_VARS)
    text = " ".join(x.recommendation + str(x.fix) for x in f.values())
    assert "TASK_QUEUE_ENABLE" not in text and "PYTORCH_" not in text


def test_same_settings_on_pytorch_are_all_flagged(rules):
    f = by_var(run(make({**TORCH_VARS, **CANN_VARS}, context="torch-graph"), rules))
    assert set(f) == set(TORCH_VARS) | set(CANN_VARS)
    assert f["TASK_QUEUE_ENABLE"].fix.data == {"env": {"TASK_QUEUE_ENABLE": "2"}}


def test_unknown_context_states_the_assumption(rules):
    f = by_var(run(make({"TASK_QUEUE_ENABLE": "0"}, context="unknown"), rules))["TASK_QUEUE_ENABLE"]
    assert "does not show how the model runs" in f.recommendation


def test_roles_are_causes_on_the_free_time_pseudo_op(rules):
    assert {r.role for r in EnvironmentKB.rules} == {"cause"}
    assert [r.id for r in EnvironmentKB.rules] == ["environment.debug", "environment.dispatch", "environment.memory",
                                                   "environment.communication", "environment.precision"]
    f = by_var(run(make({"TASK_QUEUE_ENABLE": "0"}), rules))["TASK_QUEUE_ENABLE"]
    assert f.saving_by_op == {FREE_TIME_KEY: pytest.approx(0.4 * 200.0)}
    assert f.confidence == pytest.approx(rules.for_kb("environment")["confidence"]["with_saving"])


# ---------------------------------------------------------------------------------------------------------
# real profiles
# ---------------------------------------------------------------------------------------------------------

def test_minimal_fixture(minimal, rules):
    env = json.loads((minimal / "profiler_metadata.json").read_text())["ENV_VARIABLES"]
    assert env["ASCEND_LAUNCH_BLOCKING"] == "1"
    f = by_var(run(load(minimal)[0], rules))
    assert set(f) == {"ASCEND_LAUNCH_BLOCKING", "ASCEND_GLOBAL_LOG_LEVEL", "HCCL_ALGO", "PYTORCH_NPU_ALLOC_CONF"}
    lb = f["ASCEND_LAUNCH_BLOCKING"]
    # free time of the recorded step (ProfilerStep#1, 40 ms, holding the 25 ms DataLoader stall): 40,000 us less
    # 1,135 us of compute and 130 us of uncovered communication = 38,735 us, half of it recoverable
    assert lb.estimated_saving_us == pytest.approx(0.5 * 38_735.0) and lb.severity == "critical"
    assert f["HCCL_ALGO"].estimated_saving_us == 0
    # ACLNN_CACHE_LIMIT and HOST_CACHE_CAPACITY recorded empty: defaults, not flagged (the peer flags both)
    assert "ACLNN_CACHE_LIMIT" not in f and "HOST_CACHE_CAPACITY" not in f


@needs_samples
def test_megatron_run_is_clean(rules):
    """ASCEND_GLOBAL_LOG_LEVEL=3, PYTORCH_NPU_ALLOC_CONF=expandable_segments:True, HCCL_* empty: clean."""
    for r in range(4):
        p = load(MSINSIGHT / f"test/st/level2/rank_{r}_ascend_pt")[0]
        assert p.meta.environment["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
        findings = run(p, rules)
        # eager ops are all "dynamic": at most the HOST_CACHE_CAPACITY hint (info, no saving) where the rank
        # recorded OP State (rank 0 has kernel_details.csv; the others were exported without it)
        expected = [("HOST_CACHE_CAPACITY", "info", 0.0)] if r == 0 else []
        assert [(f.evidence["variable"], f.severity, f.estimated_saving_us) for f in findings] == expected, r


@needs_samples
def test_level0_unset_allocator_conf(rules):
    p = load(MSINSIGHT / "test/data/pytorch/text/level0/rank0_ascend_pt")[0]
    f = by_var(run(p, rules))
    assert set(f) == {"PYTORCH_NPU_ALLOC_CONF"}
    assert f["PYTORCH_NPU_ALLOC_CONF"].fix is not None
    assert f["PYTORCH_NPU_ALLOC_CONF"].fix.data == {"env": {"PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"}}
