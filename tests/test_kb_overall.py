"""overall KB: the buckets of the rank's time model that cost time -- an idle device (a symptom, advice fitted to
the run) and exposed communication (a cause) -- each saving bounded by its bucket.

Real samples: the msinsight Level0 ResNet run where 81.5 ms of a 116 ms step is uncovered communication, the
4-rank Megatron run (test/st/level2), the server test ranks and the minimal fixture of the peer benchmark.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.ingest import load
from advisor.ingest.normalize import finalize_ops
from advisor.kb import AnalysisContext
from advisor.knowledge_bases.overall import OverallKB
from advisor.model import COMM_COLUMNS, STEPS_COLUMNS, Meta, Profile
from advisor.pipeline import score
from advisor.platform import resolve_platform
from advisor.toolkit.time import FREE_TIME_KEY, OTHER_COMM_KEY

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
SAMPLES = SHARED / "samples"
MSINSIGHT = SAMPLES / "Ascend__msinsight"
needs_samples = pytest.mark.skipif(not MSINSIGHT.is_dir(), reason="../shared/samples not available")



def run(profile: Profile, rules) -> list[Finding]:
    """Through the engine, as advisor runs it."""
    platform = resolve_platform(rules, profile.meta.chip)
    findings, statuses = engine.run([engine.KBInfo(OverallKB, "test", "", "")], profile, None, rules, platform)
    assert statuses[0].status == "ok", statuses[0].reason
    return findings


def by_rule(findings: list[Finding]) -> dict[str, Finding]:
    return {f.rule: f for f in findings}


def top(findings: list[Finding]) -> Finding:
    return max(findings, key=lambda f: f.estimated_saving_us)


def steps_frame(rows: list[dict[str, float]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for c in STEPS_COLUMNS:
        if c not in df.columns:
            df[c] = np.nan
    return df[STEPS_COLUMNS]


def comm_frame(rows: list[dict[str, object]]) -> pd.DataFrame:
    df = pd.DataFrame(rows)
    for c in COMM_COLUMNS:
        if c not in df.columns:
            df[c] = np.nan
    return df


def ops_frame(rows: list[tuple[str, str | None, str, float]], step: float = 1.0) -> pd.DataFrame:
    t, recs = 0.0, []
    for name, typ, core, dur in rows:
        recs.append({"name": name, "type": typ, "core": core, "start_us": t, "duration_us": dur, "step": step})
        t += dur + 1.0
    return finalize_ops(pd.DataFrame(recs))


def profile_with(steps: list[dict[str, float]], ops: pd.DataFrame | None = None,
                 comm: pd.DataFrame | None = None, context: str = "torch-eager",
                 env: dict[str, str] | None = None, chip: str = "Ascend910B2") -> Profile:
    p = Profile(ops=ops if ops is not None else ops_frame([("MatMulV2_1", "MatMulV2", "AI_CORE", 10.0)]),
                meta=Meta(source="mem", layout="scenario", chip=chip, context=context, environment=env or {}))
    p.steps = steps_frame(steps)
    if comm is not None:
        p.comm = comm
    return p


# ---------------------------------------------------------------------------------------------------------
# synthetic steps: one finding per significant bucket
# ---------------------------------------------------------------------------------------------------------
HOST_BOUND = [{"step": 1, "computing_us": 600.0, "comm_not_overlapped_us": 0.0, "overlapped_us": 0.0,
               "free_us": 400.0}]


def test_free_time_bucket_is_host_bound(rules):
    f = by_rule(run(profile_with(HOST_BOUND), rules))
    assert set(f) == {"overall.free-time"}
    free = f["overall.free-time"]
    assert free.estimated_saving_us == pytest.approx(400.0 - 0.1 * 1000.0)
    assert free.saving_by_op == {FREE_TIME_KEY: pytest.approx(300.0)}
    assert free.ops == []
    assert "host-bound" in free.title and "TASK_QUEUE_ENABLE=2" in free.recommendation
    assert free.fix is not None and free.fix.data["env"] == {"TASK_QUEUE_ENABLE": "2", "CPU_AFFINITY_CONF": "1"}
    assert free.severity == "critical"
    assert OverallKB.rule("overall.free-time").role == "symptom"
    assert OverallKB.rule("overall.uncovered-communication").role == "cause"


def test_balanced_step_has_no_findings(rules):
    """The split itself is the report's time object: a balanced step yields no finding at all."""
    p = profile_with([{"step": 1, "computing_us": 920.0, "comm_not_overlapped_us": 40.0, "overlapped_us": 300.0,
                       "free_us": 40.0}])
    assert run(p, rules) == []
    # 7 % idle is above min_bucket_share but below the free time a well-fed device keeps: nothing to recover
    p = profile_with([{"step": 1, "computing_us": 930.0, "comm_not_overlapped_us": 0.0, "overlapped_us": 0.0,
                       "free_us": 70.0}])
    assert run(p, rules) == []


# ---------------------------------------------------------------------------------------------------------
# advice fitted to the run: the same idle device, advised per execution context
# ---------------------------------------------------------------------------------------------------------
TORCH_ONLY = ("TASK_QUEUE_ENABLE", "CPU_AFFINITY_CONF", "DataLoader", "torch_npu", "TorchAir", "torch.")


def free_finding(rules, context: str, **kw) -> Finding | None:
    return by_rule(run(profile_with(HOST_BOUND, context=context, **kw), rules)).get("overall.free-time")


def test_free_time_advice_for_an_acl_app(rules):
    f = free_finding(rules, "om-acl", chip="Ascend310P3")
    assert f is not None and f.fix is None
    assert "aclmdlExecuteAsync" in f.recommendation and "aclrtMallocHost" in f.recommendation
    assert "--dynamic_batch_size" in f.recommendation  # the 310P toolchain has ATC
    assert not any(word in f.recommendation for word in TORCH_ONLY)


def test_free_time_advice_for_mindspore(rules):
    graph = free_finding(rules, "mindspore-graph")
    assert "dataset_sink_mode=True" in graph.recommendation and "num_parallel_workers" in graph.recommendation
    pynative = free_finding(rules, "mindspore-pynative")
    assert "GRAPH_MODE" in pynative.recommendation and "@mindspore.jit" in pynative.recommendation
    for f in (graph, pynative):
        assert f.fix is None
        assert not any(word in f.recommendation for word in TORCH_ONLY)
        assert "aclmdl" not in f.recommendation


def test_free_time_advice_for_torch_graph_mode(rules):
    f = free_finding(rules, "torch-graph")
    assert "graph breaks" in f.recommendation and "reduce-overhead" in f.recommendation
    assert f.fix.data["env"] == {"CPU_AFFINITY_CONF": "1"}  # the task queue only pipelines the eager parts
    assert "torch.compile with the TorchAir backend" not in f.recommendation  # it already runs in graph mode


def test_free_time_advice_skips_settings_already_made(rules):
    f = free_finding(rules, "torch-eager", env={"TASK_QUEUE_ENABLE": "2", "CPU_AFFINITY_CONF": "1",
                                                "ASCEND_LAUNCH_BLOCKING": ""})
    assert "TASK_QUEUE_ENABLE" not in f.recommendation and "CPU_AFFINITY_CONF" not in f.recommendation
    assert "ASCEND_LAUNCH_BLOCKING" not in f.recommendation and f.fix is None
    half = free_finding(rules, "torch-eager", env={"TASK_QUEUE_ENABLE": "2"})
    assert half.fix.data["env"] == {"CPU_AFFINITY_CONF": "1"}


def test_free_time_unknown_context_states_the_assumption(rules):
    f = free_finding(rules, "unknown")
    assert "does not show how the model runs" in f.recommendation
    assert not any(word in f.recommendation for word in (*TORCH_ONLY, "aclmdl", "dataset_sink_mode"))


def test_no_free_time_finding_for_kernel_development(rules):
    p = profile_with(HOST_BOUND, context="kernel-dev")
    ctx = AnalysisContext("overall", p, None, rules.for_kb("overall"), {})
    assert list(OverallKB().analyze(ctx)) == []
    assert any("kernel-development" in n for n in ctx.notes)


def test_uncovered_comm_wait_vs_transmit(rules):
    step = [{"step": 1, "computing_us": 500.0, "comm_not_overlapped_us": 400.0, "overlapped_us": 0.0,
             "free_us": 100.0}]
    waiting = comm_frame([{"step": 1.0, "op": "hcom_allReduce__1_0_1", "group": "g", "elapse_us": 400.0,
                           "transit_us": 40.0, "wait_us": 360.0, "idle_us": 0.0, "transport": "HCCS", "size_mb": 8.0}])
    f = by_rule(run(profile_with(step, comm=waiting), rules))["overall.uncovered-communication"]
    assert f.evidence["dominant"] == "wait"
    assert f.evidence["by_kind_us"]["wait"] == pytest.approx(360.0)
    assert "Balance the work" in f.recommendation
    # 0.5 x 360 wait + 0.8 x min(40, 500 compute) = 212, capped at 400 - 0.1 x 1000 = 300
    assert f.estimated_saving_us == pytest.approx(0.5 * 360 + 0.8 * 40)
    assert f.ops == ["hcom_allReduce__1_0_1"]
    assert sum(f.saving_by_op.values()) == pytest.approx(f.estimated_saving_us)
    assert f.confidence == pytest.approx(rules.for_kb("overall")["communication"]["confidence"]["split_known"])

    moving = comm_frame([{"step": 1.0, "op": "hcom_allReduce__1_0_1", "group": "g", "elapse_us": 400.0,
                          "transit_us": 380.0, "wait_us": 20.0, "idle_us": 0.0, "transport": "HCCS", "size_mb": 8.0}])
    f2 = by_rule(run(profile_with(step, comm=moving), rules))["overall.uncovered-communication"]
    assert f2.evidence["dominant"] == "transmit"
    assert "Overlap gradient communication" in f2.recommendation
    assert "bf16 gradients" in f2.recommendation  # Ascend910B2 has bf16
    # transmit 380 can hide behind 500 us of compute not overlapping: 0.8 x 380 + 0.5 x 20 = 314, capped at 300
    assert f2.estimated_saving_us == pytest.approx(300.0)

    ms = by_rule(run(profile_with(step, comm=moving, context="mindspore-graph", chip="Ascend910A"),
                     rules))["overall.uncovered-communication"]
    assert "comm_fusion" in ms.recommendation and "fp16" in ms.recommendation and "bf16" not in ms.recommendation
    assert "DistributedDataParallel" not in ms.recommendation + str(ms.fix.data)


def test_uncovered_comm_overlap_room_is_bounded_by_compute(rules):
    step = [{"step": 1, "computing_us": 100.0, "comm_not_overlapped_us": 800.0, "overlapped_us": 60.0,
             "free_us": 100.0}]
    moving = comm_frame([{"step": 1.0, "op": "hcom_x", "group": "g", "elapse_us": 860.0, "transit_us": 860.0,
                          "wait_us": 0.0, "idle_us": 0.0}])
    f = by_rule(run(profile_with(step, comm=moving), rules))["overall.uncovered-communication"]
    # only 100 - 60 = 40 us of compute is left to hide transfers behind
    assert f.evidence["hideable_by_overlap_us"] == pytest.approx(0.8 * 40)
    assert f.estimated_saving_us == pytest.approx(32.0)


def test_many_comm_ops_are_grouped(rules):
    n = 80
    step = [{"step": 1, "computing_us": 100.0, "comm_not_overlapped_us": 800.0, "overlapped_us": 0.0,
             "free_us": 100.0}]
    comm = comm_frame([{"step": 1.0, "op": f"hcom_allReduce__1_{i}_1", "group": "g", "elapse_us": 10.0 + i,
                        "transit_us": 1.0, "wait_us": 9.0 + i, "idle_us": 0.0} for i in range(n)])
    f = by_rule(run(profile_with(step, comm=comm), rules))["overall.uncovered-communication"]
    assert len(f.ops) == 51 and f.ops[-1] == OTHER_COMM_KEY
    assert sum(f.saving_by_op.values()) == pytest.approx(f.estimated_saving_us)


def test_no_timing_is_a_note(rules):
    p = Profile(ops=finalize_ops(pd.DataFrame({"name": pd.Series(dtype=str)})), meta=Meta(source="mem"))
    p.steps = steps_frame([{"step": 1, "computing_us": np.nan}])
    ctx = AnalysisContext("overall", p, None, rules.for_kb("overall"), {})
    assert list(OverallKB().analyze(ctx)) == []
    assert "no step" in ctx.notes[0]


def test_ops_only_profile_uses_device_tasks(rules):
    ops = finalize_ops(pd.DataFrame({
        "name": ["mm", "hcom_allReduce__1_0_1", "add"], "type": ["MatMulV2", "hcom_allReduce_", "Add"],
        "core": ["AI_CORE", "HCCL", "AI_VECTOR_CORE"], "start_us": [0.0, 50.0, 400.0],
        "duration_us": [100.0, 300.0, 50.0], "step": [3.0, 3.0, 3.0]}))
    f = by_rule(run(Profile(ops=ops, meta=Meta(source="mem", context="torch-eager")), rules))
    # compute 150, comm 300 of which 50 overlaps the MatMul; span 450 with a 50 us gap (350-400)
    comm = f["overall.uncovered-communication"]
    assert comm.evidence["uncovered_us"] == pytest.approx(250.0) and comm.ops == ["hcom_allReduce__1_0_1"]
    free = f["overall.free-time"]
    assert free.evidence["free_us"] == pytest.approx(50.0)
    assert free.estimated_saving_us == pytest.approx(50.0 - 0.1 * 450.0)
    assert "derived from device tasks" in free.evidence["source"]


# ---------------------------------------------------------------------------------------------------------
# real samples
# ---------------------------------------------------------------------------------------------------------
@needs_samples
def test_level0_resnet_uncovered_comm_leads(rules):
    """81.5 ms of the 116.3 ms step is uncovered communication: the largest bucket; free (25.9 ms) second. Level0
    records no HCCL task events and no communication analysis, but rank 0's trace_view.json holds the device's own
    communication-stream tasks: the split is read from them (wait-dominated: the first all-reduce is a 72.7 ms notify
    wait). Rank 1 has no trace: its split stays unknown and the saving counts only what overlap can hide."""
    for r in (0, 1):
        p = load(MSINSIGHT / f"test/data/pytorch/text/level0/rank{r}_ascend_pt")[0]
        assert p.meta.context == "torch-eager"
        findings = run(p, rules)
        f = by_rule(findings)
        comm = f["overall.uncovered-communication"]
        assert comm.ops[0] == "hcom_allReduce__868_0_1"  # the 73 ms all-reduce
        free = f["overall.free-time"]
        assert free.estimated_saving_us == pytest.approx(p.time.free_us - 0.1 * p.time.window_us, rel=1e-6)
        assert "TASK_QUEUE_ENABLE=2" in free.recommendation  # torch_npu eager, not recorded in the environment
        for finding in findings:  # the JSON report contract: plain types only
            json.dumps(finding.to_dict())
        if r == 1:
            assert comm.evidence["dominant"] == "unknown" and "cannot tell waiting from transfer" in comm.recommendation
            assert comm.confidence == pytest.approx(
                rules.for_kb("overall")["communication"]["confidence"]["split_unknown"])
            continue
        assert comm.evidence["uncovered_us"] == pytest.approx(81515.607, rel=1e-6)
        assert free.evidence["free_us"] == pytest.approx(25908.102, rel=1e-6)
        assert comm.evidence["window_us"] == pytest.approx(116251.182, rel=1e-6)
        assert comm.evidence["dominant"] == "wait" and "communication-stream tasks" in comm.evidence["source"]
        assert comm.confidence == pytest.approx(rules.for_kb("overall")["communication"]["confidence"]["split_known"])
        kinds = comm.evidence["by_kind_us"]
        cr = rules.for_kb("overall")["communication"]
        sync = cr["sync_recoverable"] * (kinds["wait"] + kinds["idle"])
        assert comm.evidence["sync_recoverable_us"] == pytest.approx(sync, rel=1e-9)
        assert comm.estimated_saving_us == pytest.approx(sync + comm.evidence["hideable_by_overlap_us"], rel=1e-9)
        assert comm.severity == "critical"  # 36 % of the window, not "minor"


@needs_samples
def test_level2_with_communication_json(rules):
    p = load(MSINSIGHT / "test/data/pytorch/text/level2/rank0_ascend_pt")[0]
    f = by_rule(run(p, rules))
    comm = f["overall.uncovered-communication"]
    # the trace's HCCL plane tasks split it (communication.json only for a step no task covers): its "idle" is the
    # 86 ms notify wait on the link to rank 5
    assert comm.evidence["source"].startswith("trace_view.json: HCCL task events")
    kinds = comm.evidence["by_kind_us"]
    assert sum(kinds.values()) == pytest.approx(95962.016, rel=1e-6)
    assert comm.evidence["dominant"] == "wait"


@needs_samples
def test_megatron_4_ranks_uncovered_comm_leads(rules):
    """Megatron GPT-like, pp=2 dp=2: uncovered communication is the largest saving on every rank; ranks 2 and 3
    (no kernel_details) take the compute split from op_statistic or leave it unsplit."""
    for r in range(4):
        p = load(MSINSIGHT / f"test/st/level2/rank_{r}_ascend_pt")[0]
        findings = run(p, rules)
        f = by_rule(findings)
        assert top(findings).rule == "overall.uncovered-communication", r
        comm = f["overall.uncovered-communication"]
        assert comm.evidence["dominant"] in ("idle", "wait")
        assert all(op.startswith("hcom_") for op in comm.ops)
        assert comm.estimated_saving_us <= p.time.uncovered_communication_us
        assert "Megatron" in str(comm.fix.data)


@needs_samples
def test_server_ranks(rules):
    for r in (0, 1):
        findings = run(load(MSINSIGHT / f"server/src/test/test_data/test_rank_{r}")[0], rules)
        assert top(findings).rule == "overall.uncovered-communication"



def test_minimal_fixture_free_time_from_overlap_timeline(minimal, rules):
    findings = run(load(minimal)[0], rules)
    f = by_rule(findings)
    free = f["overall.free-time"]
    assert "Overlap Analysis" in free.evidence["source"]
    assert top(findings).rule == "overall.free-time"
    # the recorded step (ProfilerStep#1, 40 ms) less its compute (1,135 us) and uncovered communication (130 us):
    # the 25 ms DataLoader stall before the first device task is idle device time of the step
    assert free.evidence["free_us"] == pytest.approx(40_000.0 - 1_135.0 - 130.0)
    assert free.evidence["largest_gaps"]["rows"]  # the Free intervals of the overlap timeline


def test_free_saving_is_counted_once_with_other_kbs(rules):
    """Other KBs attribute free-time savings to the same key: the score takes the maximum, not the sum."""
    free = by_rule(run(profile_with(HOST_BOUND), rules))["overall.free-time"]
    other = Finding("environment", "environment.debug", "x", "major", [], {}, 200.0, "b", "r",
                    saving_by_op={FREE_TIME_KEY: 200.0})
    assert score.recoverable_us([free, other], weighted=False) == pytest.approx(free.estimated_saving_us)


def test_speed_on_a_large_profile(rules):
    n = 400_000
    rng = np.random.default_rng(0)
    types = np.array(["MatMulV3", "Add", "FlashAttentionScore", "Cast", "hcom_allReduce_"])
    cores = np.array(["AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "AI_VECTOR_CORE", "HCCL"])
    k = rng.integers(0, 5, n)
    dur = rng.uniform(1, 50, n)
    ops = finalize_ops(pd.DataFrame({"name": [f"op{i % 5000}" for i in range(n)], "type": types[k], "core": cores[k],
                                     "start_us": np.cumsum(dur + 1.0), "duration_us": dur,
                                     "step": (np.arange(n) // (n // 10)).astype(float)}))
    p = Profile(ops=ops, meta=Meta(source="mem", context="torch-eager"))
    ctx = AnalysisContext("overall", p, None, rules.for_kb("overall"), {})
    t = time.perf_counter()
    findings = list(OverallKB().analyze(ctx))
    assert time.perf_counter() - t < 10.0
    free = by_rule(findings)["overall.free-time"]  # the 1 us gaps between tasks
    assert len(free.evidence["table"]["rows"]) == 10


@needs_samples
def test_rank_without_op_data_leaves_compute_unsplit(rules):
    """Rank 3 of the Megatron run has only step_trace_time and communication files: compute is all "other", and the
    communication finding still names the collectives."""
    p = load(MSINSIGHT / "test/st/level2/rank_3_ascend_pt")[0]
    assert p.time.compute_by_core["other"] == pytest.approx(p.time.compute_us)
    comm = by_rule(run(p, rules))["overall.uncovered-communication"]
    assert comm.ops and all(op.startswith("hcom_") for op in comm.ops)
