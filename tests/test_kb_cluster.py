"""cluster KB: step tables, slow rank per stage, stage imbalance, communication bottleneck, pipeline bubble, slow
links and the report's cluster section -- from rank data reduced the way workers reduce it
(advisor.testing.rank_data)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.ingest import load
from advisor.ingest.normalize import finalize_ops
from advisor.kb import AnalysisContext, RankData
from advisor.knowledge_bases.cluster import ClusterKB, expected_bandwidth
from advisor.model import COMM_COLUMNS, STEPS_COLUMNS, Meta, Profile
from advisor.testing import rank_data

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MSINSIGHT = SHARED / "samples" / "Ascend__msinsight"
needs_samples = pytest.mark.skipif(not MSINSIGHT.is_dir(), reason="../shared/samples not available")



def empty_ops() -> pd.DataFrame:
    return finalize_ops(pd.DataFrame({"name": pd.Series(dtype=str)}))


def analyze(cluster: list[RankData], rules, platform: dict | None = None) -> tuple[list[Finding], list[str]]:
    """Through the engine's cluster scope (once, with every rank's data)."""
    profile = Profile(ops=empty_ops(), meta=Meta(source="mem"))
    findings, statuses = engine.run([engine.KBInfo(ClusterKB, "test", "", "")], profile, None, rules,
                                    platform or {}, cluster=cluster, available={"cluster", "steps", "comm"})
    assert statuses[0].status == "ok", statuses[0].reason
    return findings, statuses[0].notes


def by_rule(findings: list[Finding]) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in findings:
        out.setdefault(f.rule, []).append(f)
    return out


def steps(compute: float, comm: float, free: float, n: int = 1, bubble: float = 0.0) -> pd.DataFrame:
    df = pd.DataFrame({"step": [float(i) for i in range(n)], "computing_us": [compute] * n,
                       "comm_not_overlapped_us": [comm] * n, "overlapped_us": [0.0] * n, "free_us": [free] * n,
                       "bubble_us": [bubble] * n})
    for c in STEPS_COLUMNS:
        if c not in df.columns:
            df[c] = np.nan
    return df[STEPS_COLUMNS]


def comm(ops: list[tuple[str, str, float, float]], n: int = 1) -> pd.DataFrame:
    """communication.json rows: (op, group, wait, transit) per step, one transport row each."""
    rows = [{"step": float(s), "op": op, "group": g, "kind": "collective", "elapse_us": w + t, "transit_us": t,
             "wait_us": w, "idle_us": 0.0, "transport": "HCCS", "size_mb": 64.0, "transport_transit_us": t,
             "bandwidth_gbps": 18.0} for s in range(n) for op, g, w, t in ops]
    return pd.DataFrame(rows).reindex(columns=COMM_COLUMNS + ["kind", "transport_transit_us"])


def rank(r: int, compute: float, comm_us: float, free: float, *, ops: list | None = None, matrix=None,
         n: int = 1, bubble: float = 0.0, pp: int | None = None) -> RankData:
    meta = Meta(source=f"rank{r}", rank=r)
    extras: dict = {}
    if matrix is not None:
        extras["communication_matrix"] = matrix
    if pp is not None:
        extras["profiler_metadata"] = {"parallel_group_info": {
            "g_pp": {"group_name": "pp", "group_rank": pp, "global_ranks": [r]}}}
    p = Profile(ops=empty_ops(), meta=meta, steps=steps(compute, comm_us, free, n, bubble),
                comm=comm(ops or [("hcom_allReduce__1_0_1", "g", 1.0, 0.0)], n), extras=extras)
    return rank_data(p)


# ---------------------------------------------------------------------------------------------------------
# scope
# ---------------------------------------------------------------------------------------------------------
def test_rank_scope_run_skips_the_cluster_kb(rules):
    p = Profile(ops=finalize_ops(pd.DataFrame({"name": ["a"], "duration_us": [1.0]})), meta=Meta(source="mem"))
    findings, statuses = engine.run([engine.KBInfo(ClusterKB, "test", "", "")], p, None, rules, {})
    assert findings == [] and statuses == []


def test_direct_context_without_cluster(rules):
    ctx = AnalysisContext("cluster", Profile(ops=empty_ops(), meta=Meta(source="mem")), None,
                          rules.for_kb("cluster"), {})
    assert list(ClusterKB().analyze(ctx)) == [] and "single-rank" in ctx.notes[0]


def test_single_rank_is_skipped(rules):
    findings, notes = analyze([rank(0, 600.0, 300.0, 100.0)], rules)
    assert findings == [] and "single-rank" in notes[0]


# ---------------------------------------------------------------------------------------------------------
# slow rank
# ---------------------------------------------------------------------------------------------------------
def test_slow_rank_by_compute(rules):
    cluster = [rank(0, 600.0, 350.0, 50.0), rank(1, 600.0, 350.0, 50.0), rank(2, 900.0, 50.0, 50.0),
               rank(3, 600.0, 350.0, 50.0)]
    f = by_rule(analyze(cluster, rules)[0])
    (slow,) = f["cluster.slow-rank"]
    assert slow.rank == 2 and slow.evidence["reason"] == "compute"
    assert slow.estimated_saving_us == pytest.approx(3 * (900.0 - 600.0))  # what the three others wait for it
    assert "computes longer" in slow.recommendation
    section = f["cluster.spread"][0].evidence["cluster_section"]
    assert (section["slowest_rank"], section["slowest_reason"]) == (2, "compute")
    assert section["slowest_excess_us"] == pytest.approx(300.0)


def test_a_warm_up_step_does_not_make_a_rank_slow(rules):
    """Rank 1's first step is 12x longer (graph compilation); its other steps are like rank 0's: no slow rank."""
    r0 = rank(0, 600.0, 300.0, 100.0, n=5)
    p = Profile(ops=empty_ops(), meta=Meta(source="rank1", rank=1), steps=steps(600.0, 300.0, 100.0, n=5),
                comm=comm([("hcom_allReduce__1_0_1", "g", 1.0, 0.0)], 5))
    p.steps.loc[0, "computing_us"] = 7200.0
    found = by_rule(analyze([r0, rank_data(p)], rules)[0])
    assert "cluster.slow-rank" not in found


def test_microseconds_apart_is_not_a_slow_rank(rules):
    """In a 100 us step, 8 us more compute is 8 % of the step but within jitter (slow_rank.min_excess_us)."""
    cluster = [rank(0, 60.0, 30.0, 10.0), rank(1, 68.0, 22.0, 10.0), rank(2, 60.0, 30.0, 10.0)]
    assert "cluster.slow-rank" not in by_rule(analyze(cluster, rules)[0])


def test_an_input_without_steps_is_not_compared_with_ranks(rules):
    """A lone op summary next to two rank directories covers its whole capture: it is not 'the slow rank'."""
    lone = Profile(ops=finalize_ops(pd.DataFrame({"name": ["mm"], "duration_us": [5000.0], "start_us": [0.0],
                                                  "core": ["AI_CORE"]})), meta=Meta(source="op_summary.csv"))
    cluster = [rank(0, 600.0, 300.0, 100.0), rank(1, 610.0, 290.0, 100.0), rank_data(lone)]
    findings, notes = analyze(cluster, rules)
    assert "cluster.slow-rank" not in by_rule(findings)
    assert any("input 2 left out of the comparison" in n for n in notes)


def test_slow_rank_by_free_time(rules):
    cluster = [rank(0, 600.0, 300.0, 100.0), rank(1, 600.0, 50.0, 350.0), rank(2, 600.0, 300.0, 100.0)]
    (slow,) = by_rule(analyze(cluster, rules)[0])["cluster.slow-rank"]
    assert slow.rank == 1 and slow.evidence["reason"] == "free"
    assert "CPU_AFFINITY_CONF" in slow.recommendation


def test_waiting_in_collectives_is_not_own_time(rules):
    """The ranks that wait for rank 0 have more uncovered communication; they are not the slow rank."""
    cluster = [rank(0, 900.0, 100.0, 50.0), rank(1, 600.0, 400.0, 50.0), rank(2, 600.0, 400.0, 50.0)]
    (slow,) = by_rule(analyze(cluster, rules)[0])["cluster.slow-rank"]
    assert slow.rank == 0


def test_balanced_ranks_have_no_slow_rank(rules):
    cluster = [rank(0, 600.0, 300.0, 100.0), rank(1, 610.0, 290.0, 100.0), rank(2, 605.0, 300.0, 95.0)]
    f = by_rule(analyze(cluster, rules)[0])
    assert "cluster.slow-rank" not in f and "cluster.spread" in f


def test_steps_normalised_per_rank(rules):
    """A rank profiled over 4 steps is not 'slower' than one profiled over 1."""
    cluster = [rank(0, 600.0, 300.0, 100.0, n=4), rank(1, 600.0, 300.0, 100.0, n=1), rank(2, 600.0, 300.0, 100.0)]
    assert "cluster.slow-rank" not in by_rule(analyze(cluster, rules)[0])


def test_slow_rank_is_compared_within_its_pipeline_stage(rules):
    """Stage 1 computes more than stage 0 by design (layers): that is stage imbalance, not a slow rank."""
    cluster = [rank(0, 600.0, 500.0, 50.0, pp=0), rank(1, 600.0, 500.0, 50.0, pp=0),
               rank(2, 1000.0, 100.0, 50.0, pp=1), rank(3, 1000.0, 100.0, 50.0, pp=1)]
    f = by_rule(analyze(cluster, rules)[0])
    assert "cluster.slow-rank" not in f
    (imb,) = f["cluster.stage-imbalance"]
    assert imb.evidence["pipeline_stage"] == 1 and imb.evidence["ranks"] == [2, 3]
    # 200 us per step above the stages' mean, on each of the 4 ranks' steps (the cluster window sums the ranks')
    assert imb.estimated_saving_us == pytest.approx((1000.0 - 800.0) * 4)


# ---------------------------------------------------------------------------------------------------------
# communication bottleneck
# ---------------------------------------------------------------------------------------------------------
def test_bottleneck_names_the_last_rank_and_what_it_did_before(rules):
    """Rank 1 arrives 300 us late at every all-reduce (it computed 300 us more): the others wait for it."""
    def r(i: int, compute: float, wait: float) -> RankData:
        return rank(i, compute, wait + 50.0, 50.0, ops=[("hcom_allReduce__9_1_1", "dp", wait, 50.0)], n=2)

    cluster = [r(0, 600.0, 310.0), r(1, 900.0, 10.0), r(2, 600.0, 305.0), r(3, 600.0, 300.0)]
    f = by_rule(analyze(cluster, rules)[0])
    (b,) = f["cluster.comm-bottleneck"]
    assert b.evidence["last_ranks"] == [1] and b.rank == 1 and b.evidence["cause"] == "compute"
    assert b.evidence["median_wait_caused_us"] == pytest.approx(2 * 295.0)  # median of 300, 295, 290, per step
    assert b.evidence["before"]["compute"] == pytest.approx(300.0)
    # the slow-rank finding reports the cause: the bottleneck is its symptom and claims no saving of its own
    assert b.evidence["explained_by"] == ["cluster.slow-rank"] and b.estimated_saving_us == 0.0
    assert f["cluster.slow-rank"][0].rank == 1


def test_bottleneck_with_ties_names_every_late_rank(rules):
    def r(i: int, wait: float) -> RankData:
        return rank(i, 600.0, wait + 50.0, 50.0, ops=[("hcom_allGather__3_1_1", "w", wait, 50.0)])

    cluster = [r(0, 400.0), r(1, 5.0), r(2, 400.0), r(3, 8.0)]
    (b,) = by_rule(analyze(cluster, rules)[0])["cluster.comm-bottleneck"]
    assert b.evidence["last_ranks"] == [1, 3] and b.rank is None
    assert b.estimated_saving_us <= b.evidence["median_wait_caused_us"]


# ---------------------------------------------------------------------------------------------------------
# pipeline bubble
# ---------------------------------------------------------------------------------------------------------
def test_pipeline_bubble_names_the_stage_and_its_ranks(rules):
    cluster = [rank(r, 600.0, 300.0 + (200.0 if r >= 2 else 0.0), 100.0, pp=r // 2,
                    bubble=250.0 if r >= 2 else 5.0) for r in range(4)]
    (bub,) = by_rule(analyze(cluster, rules)[0])["cluster.pipeline-bubble"]
    assert bub.evidence["pipeline_stage"] == 1 and bub.evidence["ranks"] == [2, 3]
    mean_step = (2 * 1000.0 + 2 * 1200.0) / 4
    assert bub.estimated_saving_us == pytest.approx((250.0 - 0.05 * mean_step) * 2)
    assert bub.estimated_saving_us <= 250.0 * 2  # never more than the bubble time it claims


# ---------------------------------------------------------------------------------------------------------
# slow links
# ---------------------------------------------------------------------------------------------------------
def _matrix(links: dict[tuple[int, int], float], src: int, transport: str = "HCCS") -> pd.DataFrame:
    """Per-link 'total' rows of a newer communication_matrix.json, 100 MB per link at the given GB/s."""
    rows = [{"step": 1.0, "kind": "collective", "op": "allreduce", "stat": "total", "group": "g1",
             "src_rank": float(s), "dst_rank": float(d), "transport": transport, "size_mb": 100.0,
             "transit_us": 100.0 / bw * 1000.0, "bandwidth_gbps": bw, "op_name": None}
            for (s, d), bw in links.items() if s == src]
    rows.append({"step": 1.0, "kind": "collective", "op": "allreduce", "stat": "total", "group": "g1",
                 "src_rank": float(src), "dst_rank": float(src), "transport": "LOCAL", "size_mb": 100.0,
                 "transit_us": 300.0, "bandwidth_gbps": 333.0, "op_name": None})
    return pd.DataFrame(rows)


def test_slow_link_against_the_median(rules):
    links = {(s, d): 25.0 for s in range(4) for d in range(4) if s != d}
    links[(2, 3)] = 6.0
    cluster = [rank(r, 600.0, 300.0, 100.0, matrix=_matrix(links, r)) for r in range(4)]
    (f,) = by_rule(analyze(cluster, rules, {"soc": "Ascend910B2"})[0])["cluster.slow-link"]
    assert f.evidence["transport"] == "HCCS" and f.evidence["reference"] == "median"
    assert [(x["src_rank"], x["dst_rank"]) for x in f.evidence["links"]] == [(2, 3)]
    assert f.estimated_saving_us == pytest.approx(100.0 / 6.0 * 1000.0 - 100.0 / 25.0 * 1000.0)


def test_whole_transport_below_its_expected_bandwidth(rules):
    """Every RDMA link at 10 GB/s on a 910B (nominal 25 GB/s): no link is slower than its peers, so no slow link;
    one low-confidence information about the transport, with no saving and the nominal figure's source."""
    links = {(s, d): 10.0 for s in range(4) for d in range(4) if s != d}
    cluster = [rank(r, 600.0, 300.0, 100.0, matrix=_matrix(links, r, "RDMA")) for r in range(4)]
    found = by_rule(analyze(cluster, rules, {"soc": "Ascend910B3"})[0])
    assert "cluster.slow-link" not in found
    (f,) = found["cluster.transport-bandwidth"]
    assert f.severity == "info" and f.estimated_saving_us == 0.0 and f.confidence <= 0.3
    assert f.evidence["expected_gbps"] == 25.0 and "msprof" in f.evidence["expected_source"]
    assert "nominal" in f.evidence["expected_source"] and f.evidence["links_judged"] == 12
    assert f.title.startswith("RDMA links run at 10.0 GB/s on large transfers, 40% of the nominal 25 GB/s")
    # on a chip without a nominal RDMA figure, even links are fine
    assert not {"cluster.slow-link", "cluster.transport-bandwidth"} & set(
        by_rule(analyze(cluster, rules, {"soc": "Ascend910_9391"})[0]))


def _op_matrix(links: dict[tuple[int, int], tuple[float, float]], src: int, transport: str = "HCCS",
               op_name: str = "hcom_allReduce__1_0_1") -> pd.DataFrame:
    """A newer matrix: per link the single op (``top1``) and the ``total`` entry, (size MB, GB/s) per link."""
    rows = []
    for (s, d), (size, bw) in links.items():
        if s != src:
            continue
        for stat in ("top1", "total"):
            rows.append({"step": 0.0, "kind": "collective", "op": "allreduce", "stat": stat, "group": "g1",
                         "src_rank": float(s), "dst_rank": float(d), "transport": transport, "size_mb": size,
                         "transit_us": size / bw * 1000.0, "bandwidth_gbps": bw,
                         "op_name": op_name if stat != "total" else None})
    return pd.DataFrame(rows)


def test_small_transfers_are_not_judged(rules):
    """4 MB per op over HCCS is latency-bound: a link at 6 GB/s among links at 12 GB/s says nothing about the link
    (msprof's HCCS large-message threshold is 32 MB); the report notes the links left out."""
    links = {(s, d): (4.0, 12.0) for s in range(4) for d in range(4) if s != d}
    links[(2, 3)] = (4.0, 6.0)
    cluster = [rank(r, 600.0, 300.0, 100.0, matrix=_op_matrix(links, r)) for r in range(4)]
    findings, notes = analyze(cluster, rules, {"soc": "Ascend910B2"})
    assert not {"cluster.slow-link", "cluster.transport-bandwidth"} & set(by_rule(findings))
    assert any("12 of 12 HCCS link(s) not judged" in n and "latency-bound" in n for n in notes)


def test_the_ops_large_packet_ratio_decides_over_its_size(rules):
    """A 64 MB op whose packets were all small (communication.json Large Packet Ratio 0) is not judged; the same
    op with large packets (ratio 1) is, and its slow link is found."""
    links = {(s, d): (64.0, 20.0) for s in range(4) for d in range(4) if s != d}
    links[(1, 2)] = (64.0, 5.0)

    def cluster_with(ratio: float) -> list[RankData]:
        out = []
        for r in range(4):
            p = Profile(ops=empty_ops(), meta=Meta(source=f"rank{r}", rank=r), steps=steps(600.0, 300.0, 100.0),
                        comm=comm([("hcom_allReduce__1_0_1", "g1", 1.0, 10.0)]).assign(large_packet_ratio=ratio),
                        extras={"communication_matrix": _op_matrix(links, r)})
            out.append(rank_data(p))
        return out

    assert "cluster.slow-link" not in by_rule(analyze(cluster_with(0.0), rules, {"soc": "Ascend910B2"})[0])
    (f,) = by_rule(analyze(cluster_with(1.0), rules, {"soc": "Ascend910B2"})[0])["cluster.slow-link"]
    assert [(x["src_rank"], x["dst_rank"]) for x in f.evidence["links"]] == [(1, 2)]
    assert f.evidence["reference"] == "median" and f.evidence["reference_gbps"] == pytest.approx(20.0)
    assert f.estimated_saving_us == pytest.approx(64.0 / 5.0 * 1000.0 - 64.0 / 20.0 * 1000.0)
    assert f.estimated_saving_us <= 64.0 / 5.0 * 1000.0  # never more than the link's transit time


def test_expected_bandwidth_by_longest_prefix(rules):
    r = rules.for_kb("cluster")
    assert expected_bandwidth(r, "Ascend910B2")["HCCS"] == 28.0
    assert expected_bandwidth(r, "Ascend910A")["HCCS"] == 18.0
    assert expected_bandwidth(r, "Ascend310P3") == {}


def test_even_links_and_no_matrix(rules):
    links = {(s, d): 19.0 + 0.1 * d for s in range(3) for d in range(3) if s != d}
    cluster = [rank(r, 600.0, 300.0, 100.0, matrix=_matrix(links, r)) for r in range(3)]
    assert "cluster.slow-link" not in by_rule(analyze(cluster, rules)[0])
    findings, notes = analyze([rank(0, 1, 1, 1), rank(1, 1, 1, 1)], rules)
    assert "cluster.slow-link" not in by_rule(findings)
    assert any("no rank has a communication matrix" in n for n in notes)


# ---------------------------------------------------------------------------------------------------------
# real multi-rank profiles
# ---------------------------------------------------------------------------------------------------------
def real(path: Path) -> RankData:
    return rank_data(load(path)[0])


@needs_samples
def test_megatron_4_ranks_pipeline_imbalance(rules):
    """pp=2 dp=2: ranks 2 and 3 (stage 1) compute ~400 ms per step, ranks 0 and 1 ~231 ms and wait for them in
    the pipeline's batchSendRecv."""
    cluster = [real(MSINSIGHT / f"test/st/level2/rank_{r}_ascend_pt") for r in range(4)]
    findings, _ = analyze(cluster, rules, {"soc": "Ascend910B2"})
    f = by_rule(findings)
    (imb,) = f["cluster.stage-imbalance"]
    assert imb.evidence["pipeline_stage"] == 1 and imb.evidence["ranks"] == [2, 3]
    stage0, stage1 = (231290.1 + 230903.72) / 2, (400448.26 + 401131.7) / 2
    assert imb.estimated_saving_us == pytest.approx((stage1 - (stage0 + stage1) / 2) * 4, rel=1e-4)  # x 4 ranks
    assert "cluster.slow-rank" not in f  # the ranks of each stage are even
    late = sorted(b.evidence["last_ranks"][0] for b in f["cluster.comm-bottleneck"])
    assert late == [2, 3]  # the stage-0 ranks wait for their stage-1 peers in hcom_batchSendRecv
    assert all(b.evidence["cause"] == "compute" for b in f["cluster.comm-bottleneck"])
    section = f["cluster.spread"][0].evidence["cluster_section"]
    rows = {r["rank"]: r for r in section["ranks"]}
    assert (rows[0]["dp"], rows[0]["pp"], rows[2]["dp"], rows[2]["pp"], rows[3]["dp"]) == (0, 0, 0, 1, 1)
    assert section["parallel"] == {"sizes": {"dp": 2, "pp": 2, "tp": 1}, "source": "parallel_group_info"}
    assert len(section["step_table"]) == 4 and len(section["stage_table"]) == 2
    assert section["spread"]["compute_us"]["min"] == pytest.approx(230903.72, rel=1e-6)
    for finding in findings:  # the JSON report contract: plain types only
        json.dumps({**finding.to_dict(), "fix": finding.fix.to_dict() if finding.fix else None})


@needs_samples
def test_real_links_judged_on_large_transfers_only(rules):
    """4-rank Megatron (st/level2): the HCCS links that carry large packets (reduceScatter / allReduce with
    125 MB packets, Large Packet Ratio 1) run alike at ~19 GB/s: no slow link, one information about HCCS below
    msprof's nominal 28 GB/s for a 910B. The 2-rank CNN (data/.../level2) moves only small packets (Large Packet
    Ratio 0): no link is judged, and a note says so."""
    cluster = [real(MSINSIGHT / f"test/st/level2/rank_{r}_ascend_pt") for r in range(4)]
    found, _ = analyze(cluster, rules, {"soc": "Ascend910B2"})
    f = by_rule(found)
    assert "cluster.slow-link" not in f
    (hccs,) = f["cluster.transport-bandwidth"]
    assert hccs.severity == "info" and hccs.estimated_saving_us == 0.0 and hccs.confidence <= 0.3
    assert 15.0 < hccs.evidence["median_gbps"] < 22.0 and hccs.evidence["expected_gbps"] == 28.0
    pair = [real(MSINSIGHT / f"test/data/pytorch/text/level2/rank{r}_ascend_pt") for r in (0, 1)]
    found, notes = analyze(pair, rules, {"soc": "Ascend910B2"})
    assert not {"cluster.slow-link", "cluster.transport-bandwidth"} & set(by_rule(found))
    assert any("14 of 14 HCCS link(s) not judged" in n for n in notes)


@needs_samples
def test_mindspore_pair_with_a_warm_up_step_has_no_slow_rank(rules):
    """cluster_propose: rank 2's first step is a 2.1 s warm-up; its other steps compute like rank 0's."""
    found = by_rule(analyze(load_ranks(SHARED / "samples/mindspore-ai__mindinsight/tests/utils/resource/"
                                                 "cluster_propose"), rules)[0])
    assert "cluster.slow-rank" not in found and "cluster.spread" in found


def load_ranks(path: Path) -> list[RankData]:
    return [rank_data(p) for p in load(path)]


@needs_samples
def test_balanced_real_pair(rules):
    cluster = [real(MSINSIGHT / f"server/src/test/test_data/test_rank_{r}") for r in (0, 1)]
    f = by_rule(analyze(cluster, rules)[0])
    assert "cluster.slow-rank" not in f and "cluster.stage-imbalance" not in f and "cluster.spread" in f
