"""communication KB: small packets, SDMA bandwidth contention with MatMul, byte alignment, RDMA retransmission.

Peer mistakes covered: communication.json without a "Total Op Info" entry (the peer's Overall Summary crashes)
and the aggregate entry counted as an op (the peer's packet analysis).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.ingest import load
from advisor.ingest.normalize import finalize_ops
from advisor.ingest.torch_npu import TOTAL_OP_INFO
from advisor.kb import AnalysisContext
from advisor.knowledge_bases.communication import CommunicationKB
from advisor.knowledge_bases.overall import OverallKB
from advisor.model import COMM_COLUMNS, EVENTS_COLUMNS, Meta, Profile
from advisor.pipeline import score
from advisor.platform import resolve_platform

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MSINSIGHT = SHARED / "samples" / "Ascend__msinsight"
needs_samples = pytest.mark.skipif(not MSINSIGHT.is_dir(), reason="../shared/samples not available")



def run(profile: Profile, rules, kbs=(CommunicationKB,)) -> tuple[list[Finding], list[str]]:
    platform = resolve_platform(rules, profile.meta.chip)
    findings, statuses = engine.run([engine.KBInfo(k, "test", "", "") for k in kbs], profile, None, rules, platform)
    assert all(s.status == "ok" for s in statuses), [s.reason for s in statuses]
    return findings, [n for s in statuses for n in s.notes]


def by_rule(findings: list[Finding]) -> dict[str, Finding]:
    return {f.rule: f for f in findings}


def comm_rows(ops: list[dict[str, object]]) -> pd.DataFrame:
    df = pd.DataFrame(ops)
    for c in [*COMM_COLUMNS, "start_us", "transport_transit_us", "kind"]:
        if c not in df.columns:
            df[c] = np.nan
    return df


def make(comm: pd.DataFrame, ops: pd.DataFrame | None = None, events: pd.DataFrame | None = None,
         context: str = "torch-eager", chip: str = "Ascend910B2") -> Profile:
    if ops is None:
        ops = finalize_ops(pd.DataFrame({"name": ["add"], "type": ["Add"], "core": ["AI_VECTOR_CORE"],
                                         "start_us": [0.0], "duration_us": [10.0]}))
    p = Profile(ops=ops, meta=Meta(source="mem", chip=chip, context=context))
    p.comm = comm
    if events is not None:
        p.events = events
    return p


def transfer(op: str, transport: str, size_mb: float, transit_us: float, start: float = 0.0, step: float = 1.0,
             elapse: float | None = None) -> dict[str, object]:
    bw = size_mb / (transit_us / 1000.0) if transit_us else 0.0
    return {"step": step, "op": op, "group": "g", "kind": "collective", "start_us": start,
            "elapse_us": elapse if elapse is not None else transit_us, "transit_us": transit_us, "wait_us": 0.0,
            "idle_us": 0.0, "transport": transport, "size_mb": size_mb, "transport_transit_us": transit_us,
            "bandwidth_gbps": bw, "large_packet_ratio": 0.0}


# ---------------------------------------------------------------------------------------------------------
# small packets
# ---------------------------------------------------------------------------------------------------------
def test_small_sdma_packets(rules):
    rows = [transfer(f"hcom_allReduce__1_{i}_1", "SDMA", 2.0, 250.0) for i in range(3)]
    rows += [transfer("hcom_allReduce__1_9_1", "SDMA", 64.0, 3200.0)]  # 20 GB/s: the reference
    rows += [transfer(f"hcom_allReduce__1_{i}_1", "HCCS", 2.0, 250.0) for i in range(3)]  # HCCS duplicates SDMA
    f = by_rule(run(make(comm_rows(rows)), rules)[0])["communication.small-packets"]
    assert f.evidence["transport"] == "SDMA" and f.evidence["small_ops"] == 3 and f.evidence["ops"] == 4
    assert f.evidence["reference_gbps"] == pytest.approx(20.0)
    # each small op: 250 us at 8 GB/s vs 2 MB / 20 GB/s = 100 us; no step data: all of it counts as exposed
    assert f.estimated_saving_us == pytest.approx(3 * 150.0)
    assert sorted(f.ops) == [f"hcom_allReduce__1_{i}_1" for i in range(3)]


def test_large_packets_are_quiet(rules):
    rows = [transfer(f"hcom_allReduce__1_{i}_1", "SDMA", 64.0, 3200.0) for i in range(5)]
    rows.append(transfer("hcom_allReduce__1_9_1", "SDMA", 1.0, 100.0))  # 1 of 6 = 17% <= 20%
    assert "communication.small-packets" not in by_rule(run(make(comm_rows(rows)), rules)[0])


def test_rdma_threshold_is_per_transport(rules):
    rows = [transfer(f"hcom_send__1_{i}", "RDMA", 2.0, 100.0) for i in range(4)]  # 2 MB is large for RDMA
    assert "communication.small-packets" not in by_rule(run(make(comm_rows(rows)), rules)[0])
    rows = [transfer(f"hcom_send__1_{i}", "RDMA", 0.5, 100.0) for i in range(4)]
    f = by_rule(run(make(comm_rows(rows)), rules)[0])["communication.small-packets"]
    assert f.evidence["min_size_mb"] == 1.0 and f.evidence["reference_gbps"] == pytest.approx(12.5)


def test_matrix_fallback_without_communication_json(rules):
    matrix = pd.DataFrame([
        {"step": 1.0, "kind": "collective", "op": "allreduce", "stat": "top1", "group": "g", "src_rank": 0.0,
         "dst_rank": float(d), "transport": "HCCS", "size_mb": 0.5, "transit_us": 60.0, "bandwidth_gbps": 8.3,
         "op_name": f"hcom_allReduce__1_{d}_1"} for d in range(1, 4)
    ] + [{"step": 1.0, "kind": "collective", "op": "allreduce", "stat": "total", "group": "g", "src_rank": 0.0,
          "dst_rank": 1.0, "transport": "HCCS", "size_mb": 9.0, "transit_us": 600.0, "bandwidth_gbps": 15.0,
          "op_name": None}])
    p = make(comm_rows([]).iloc[0:0])
    p.extras["communication_matrix"] = matrix
    f = by_rule(run(p, rules)[0])["communication.small-packets"]
    assert f.evidence["source"] == "communication_matrix.json" and f.evidence["ops"] == 3  # "total" is no op


# ---------------------------------------------------------------------------------------------------------
# bandwidth contention
# ---------------------------------------------------------------------------------------------------------
def _ops_with_matmul(start: float) -> pd.DataFrame:
    return finalize_ops(pd.DataFrame({"name": ["aclnnMatmul_MatMulV2", "add"], "type": ["MatMulV2", "Add"],
                                      "core": ["AI_CORE", "AI_VECTOR_CORE"], "start_us": [start, 5000.0],
                                      "duration_us": [200.0, 10.0]}))


def test_contention_with_overlapping_matmul(rules):
    rows = [transfer("hcom_allReduce__1_0_1", "SDMA", 80.0, 10_000.0, start=1000.0)]  # 8 GB/s
    f = by_rule(run(make(comm_rows(rows), _ops_with_matmul(1500.0)), rules)[0])["communication.bandwidth-contention"]
    assert f.ops == ["hcom_allReduce__1_0_1"] and f.evidence["matmul_ops"] == ["aclnnMatmul_MatMulV2"]
    assert f.evidence["table"]["rows"][0][3] == pytest.approx(200.0)  # overlap with the MatMul
    assert f.estimated_saving_us == pytest.approx(10_000.0 * (1 - 8.0 / 14.4))


def test_no_contention_without_overlap_or_when_fast(rules):
    slow = [transfer("hcom_allReduce__1_0_1", "SDMA", 80.0, 10_000.0, start=1000.0)]
    assert "communication.bandwidth-contention" not in by_rule(
        run(make(comm_rows(slow), _ops_with_matmul(20_000.0)), rules)[0])
    fast = [transfer("hcom_allReduce__1_0_1", "SDMA", 160.0, 10_000.0, start=1000.0)]  # 16 GB/s >= 14.4
    assert "communication.bandwidth-contention" not in by_rule(
        run(make(comm_rows(fast), _ops_with_matmul(1500.0)), rules)[0])


# ---------------------------------------------------------------------------------------------------------
# RDMA retransmission
# ---------------------------------------------------------------------------------------------------------
def test_rdma_retransmission(rules):
    rows = [transfer("hcom_send__1_0", "RDMA", 100.0, 5_000_000.0), transfer("hcom_send__1_1", "RDMA", 100.0, 8000.0)]
    f = by_rule(run(make(comm_rows(rows)), rules)[0])["communication.rdma-retransmission"]
    assert f.ops == ["hcom_send__1_0"] and f.severity == "critical"
    assert f.estimated_saving_us == pytest.approx(5_000_000.0 - 100.0 / 12.5 * 1000.0)


def test_no_rdma_traffic_is_said(rules):
    findings, notes = run(make(comm_rows([transfer("hcom_x", "SDMA", 64.0, 3200.0)])), rules)
    assert "communication.rdma-retransmission" not in by_rule(findings)
    assert any("no RDMA traffic" in n for n in notes)


# ---------------------------------------------------------------------------------------------------------
# byte alignment
# ---------------------------------------------------------------------------------------------------------
def hccl_events(tasks: list[tuple[int, str, str]]) -> pd.DataFrame:
    rows = [{"process": "HCCL", "name": "hcom_allReduce__1_0_1", "category": None, "start_us": 0.0,
             "duration_us": 1000.0, "tid": "0", "args": None}]
    for i, (size, transport, link) in enumerate(tasks):
        rows.append({"process": "HCCL", "name": "Memcpy", "category": None, "start_us": 10.0 + 50 * i,
                     "duration_us": 40.0, "tid": "1",
                     "args": {"size(Byte)": size, "transport type": transport, "link type": link}})
    rows.append({"process": "HCCL", "name": "Memcpy", "category": None, "start_us": 5000.0, "duration_us": 40.0,
                 "tid": "1", "args": {"size(Byte)": 1000, "transport type": "SDMA", "link type": "HCCS"}})
    df = pd.DataFrame(rows)[EVENTS_COLUMNS]
    for c in ("process", "name", "tid"):
        df[c] = df[c].astype("category")
    return df


def test_byte_alignment(rules):
    ev = hccl_events([(1000, "SDMA", "HCCS"), (1024, "SDMA", "HCCS"), (300, "SDMA", "HCCS"),
                      (3000, "SDMA", "ON_CHIP"), (3000, "RDMA", "ROCE")])
    f = by_rule(run(make(comm_rows([]).iloc[0:0], events=ev), rules)[0])["communication.byte-alignment"]
    # 1000 B inside the op and 1000 B outside any op; 1024 aligned, 300 below 512, ON_CHIP and RDMA not checked
    assert f.evidence["misaligned"] == 2 and f.evidence["checked"] == 4
    assert set(f.ops) == {"hcom_allReduce__1_0_1", "Memcpy"}
    # the 10 us Add overlaps the 1000 us all-reduce: 99 % of the communication is exposed (time model); two 40 us
    # transfers 488 B off the block: 0.3 of their time is 12 us each, more than the 5 us the odd tail's extra
    # transfer costs (byte_alignment.max_saving_per_transfer_us)
    assert f.estimated_saving_us == pytest.approx(2 * min(40.0 * 0.3, 5.0) * 0.99)
    assert f.evidence["misaligned_wall_us"] == pytest.approx(80.0)


def test_aligned_transfers_are_quiet(rules):
    ev = hccl_events([(1024, "SDMA", "HCCS"), (4096, "SDMA", "HCCS")]).iloc[:-1]
    assert "communication.byte-alignment" not in by_rule(run(make(comm_rows([]).iloc[0:0], events=ev), rules)[0])


# ---------------------------------------------------------------------------------------------------------
# real profiles
# ---------------------------------------------------------------------------------------------------------

def _check_minimal(findings: list[Finding]) -> None:
    f = by_rule(findings)
    small = f["communication.small-packets"]
    # 4 all-reduce ops of 2 MB: the "Total Op Info" aggregate is not a fifth op (the peer counts it)
    assert small.evidence["ops"] == 4 and small.evidence["small_ops"] == 4
    assert TOTAL_OP_INFO not in small.ops and len(small.ops) == 4
    contention = f["communication.bandwidth-contention"]  # 8 GB/s SDMA while the second MatMulV2 runs
    assert contention.evidence["matmul_ops"] == ["aclnnMatmul_MatMulCommon_MatMulV2"]
    assert contention.evidence["median_bandwidth_gbps"] == pytest.approx(8.0)
    align = f["communication.byte-alignment"]  # Memcpy of 1000 and 3000 bytes; 1024 is aligned
    assert align.evidence["misaligned"] == 2 and align.evidence["checked"] == 3
    assert sorted(r[2] for r in align.evidence["table"]["rows"]) == [1000, 3000]
    assert align.ops == ["hcom_allReduce__1" "23_0_1"]


def test_minimal_fixture(minimal, rules):
    data = json.loads((minimal / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text())
    assert any(TOTAL_OP_INFO in kinds.get("collective", {}) for kinds in data.values())
    findings, notes = run(load(minimal)[0], rules)
    _check_minimal(findings)
    assert any("no RDMA traffic" in n for n in notes)


def test_communication_json_without_totals(minimal, rules, tmp_path):
    """The peer's Overall Summary crashes on this file; both KBs must work and find the same things."""
    copy = tmp_path / minimal.name
    shutil.copytree(minimal, copy)
    path = copy / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    data = json.loads(path.read_text())
    for kinds in data.values():
        for ops in kinds.values():
            ops.pop(TOTAL_OP_INFO, None)
    path.write_text(json.dumps(data))
    profile = load(copy)[0]
    assert len(profile.comm) and not profile.meta.files_skipped
    findings, _ = run(profile, rules, kbs=(CommunicationKB, OverallKB))
    _check_minimal(findings)
    assert {f.kb for f in findings} == {"communication", "overall"}


@needs_samples
def test_level2_real_byte_alignment(rules):
    """Real 8-rank ResNet run: 4 HCCS transfers of the all-reduces are not 512-byte multiples (and the collectives
    wait for rank 5, which this profile lacks: tests/test_comm_tasks.py)."""
    findings, _ = run(load(MSINSIGHT / "test/data/pytorch/text/level2/rank0_ascend_pt")[0], rules)
    f = by_rule(findings)
    assert set(f) == {"communication.byte-alignment", "communication.late-peer"}
    align = f["communication.byte-alignment"]
    assert align.evidence["misaligned"] == 4
    assert all(r[2] % 512 != 0 and r[3] == "HCCS" for r in align.evidence["table"]["rows"])
    assert all(op.startswith("hcom_allReduce__271_") for op in align.ops)


@needs_samples
def test_server_rank_small_rdma_packets(rules):
    findings, _ = run(load(MSINSIGHT / "server/src/test/test_data/test_rank_0")[0], rules)
    small = [f for f in findings if f.rule == "communication.small-packets"]
    assert [f.evidence["transport"] for f in small] == ["RDMA"]
    assert small[0].evidence["small_ops"] == 4 and small[0].evidence["ops"] == 6


@needs_samples
def test_savings_share_op_names_with_overall(rules):
    """Both KBs attribute communication savings to the same op names: the score keeps the larger per op."""
    p = load(MSINSIGHT / "test/st/level2/rank_2_ascend_pt")[0]
    findings, _ = run(p, rules, kbs=(CommunicationKB, OverallKB))
    small = by_rule(findings)["communication.small-packets"]
    overall = by_rule(findings)["overall.uncovered-communication"]
    assert set(small.saving_by_op) & set(overall.saving_by_op)
    assert score.recoverable_us(findings) < sum(f.estimated_saving_us for f in findings)


def test_no_communication_at_all(rules):
    ctx = AnalysisContext("communication", make(comm_rows([]).iloc[0:0]), None, rules.for_kb("communication"), {})
    assert list(CommunicationKB().analyze(ctx)) == []
    assert "needs communication.json" in ctx.notes[0]


# ---------------------------------------------------------------------------------------------------------
# causes, savings within each op's exposed time, advice fitted to the run
# ---------------------------------------------------------------------------------------------------------
def test_rules_are_causes_with_confidences_from_the_rules(rules):
    assert {r.role for r in CommunicationKB.rules} == {"cause"}
    comm = comm_rows([transfer(f"hcom_allReduce__1_{i}_1", "SDMA", 1.0, 500.0) for i in range(5)])
    f = by_rule(run(make(comm), rules)[0])["communication.small-packets"]
    assert f.confidence == pytest.approx(rules.for_kb("communication")["confidence"]["small_packets"])


def test_findings_on_one_op_stay_within_its_exposed_time(rules):
    """A slow small SDMA transfer under a MatMul is both a small packet and contended: the two findings together
    claim at most the op's exposed time."""
    ops = finalize_ops(pd.DataFrame({"name": ["mm"], "type": ["MatMulV2"], "core": ["AI_CORE"],
                                     "start_us": [0.0], "duration_us": [2000.0]}))
    comm = comm_rows([transfer("hcom_allReduce__1_0_1", "SDMA", 1.0, 1000.0, start=100.0),
                      transfer("hcom_allReduce__1_1_1", "SDMA", 32.0, 2000.0, start=100.0)])
    findings, _ = run(make(comm, ops=ops), rules)
    assert {f.rule for f in findings} >= {"communication.small-packets", "communication.bandwidth-contention"}
    claimed = sum(f.saving_by_op.get("hcom_allReduce__1_0_1", 0.0) for f in findings)
    assert claimed <= 1000.0 + 1e-6


@pytest.mark.parametrize(("context", "chip", "named", "absent"), [
    ("torch-eager", "Ascend910B2", "bucket_cap_mb", "comm_fusion"),
    ("mindspore-graph", "Ascend910B2", "comm_fusion", "torch"),
    ("om-acl", "Ascend310P3", "flatten", "torch"),
])
def test_small_packet_advice_per_context(rules, context, chip, named, absent):
    comm = comm_rows([transfer(f"hcom_allReduce__1_{i}_1", "SDMA", 1.0, 500.0) for i in range(5)])
    f = by_rule(run(make(comm, context=context, chip=chip), rules)[0])["communication.small-packets"]
    text = f.recommendation + str(f.fix.data if f.fix else "")
    assert named in text and absent not in text


def test_fused_matmul_allreduce_only_for_pytorch_on_a2(rules):
    ops = finalize_ops(pd.DataFrame({"name": ["mm"], "type": ["MatMulV2"], "core": ["AI_CORE"],
                                     "start_us": [0.0], "duration_us": [2000.0]}))
    comm = comm_rows([transfer("hcom_allReduce__1_0_1", "SDMA", 32.0, 4000.0, start=100.0)])
    a2 = by_rule(run(make(comm, ops=ops), rules)[0])["communication.bandwidth-contention"]
    assert "npu_mm_all_reduce_base" in a2.recommendation
    for context, chip in (("torch-eager", "Ascend910A"), ("mindspore-graph", "Ascend910B2")):
        f = by_rule(run(make(comm, ops=ops, context=context, chip=chip), rules)[0])[
            "communication.bandwidth-contention"]
        assert "npu_mm_all_reduce_base" not in f.recommendation and f.fix is None


def test_alignment_advice_names_a_dtype_the_chip_has(rules):
    from advisor.knowledge_bases.communication import _alignment_advice

    for chip, half in (("Ascend910B2", "bf16"), ("Ascend910A", "fp16")):
        p = make(comm_rows([]).iloc[0:0], chip=chip)
        ctx = AnalysisContext("communication", p, None, rules.for_kb("communication"),
                              resolve_platform(rules, chip))
        rec, _ = _alignment_advice(ctx, 512)
        assert f"256 {half}" in rec and ("bf16" not in rec or half == "bf16")
