"""cluster KB: slow rank and its reason, slow link, per-rank spread (runs once with ctx.cluster)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor import engine
from advisor.findings import Finding
from advisor.ingest import load
from advisor.ingest.normalize import finalize_ops
from advisor.kb import AnalysisContext, RankData
from advisor.model import COMM_COLUMNS, STEPS_COLUMNS, Meta, Profile
from advisor.rules import builtin_rules_dir, load_effective_rules
from knowledge_bases.cluster import ClusterKB

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MSINSIGHT = SHARED / "samples" / "Ascend__msinsight"
needs_samples = pytest.mark.skipif(not MSINSIGHT.is_dir(), reason="../shared/samples not available")


@pytest.fixture(scope="module")
def rules():
    return load_effective_rules([builtin_rules_dir()])


def analyze(cluster: list[RankData], rules, profile: Profile | None = None) -> tuple[list[Finding], list[str]]:
    """Through the engine's cluster scope (once, with every rank's data)."""
    profile = profile or Profile(ops=finalize_ops(pd.DataFrame({"name": pd.Series(dtype=str)})),
                                 meta=Meta(source="mem"))
    findings, statuses = engine.run([engine.KBInfo(ClusterKB, "test", "", "")], profile, None, rules, {},
                                    cluster=cluster, available={"cluster", "steps", "comm"})
    assert statuses[0].status == "ok", statuses[0].reason
    return findings, statuses[0].notes


def test_rank_scope_run_skips_the_cluster_kb(rules):
    p = Profile(ops=finalize_ops(pd.DataFrame({"name": ["a"], "duration_us": [1.0]})), meta=Meta(source="mem"))
    findings, statuses = engine.run([engine.KBInfo(ClusterKB, "test", "", "")], p, None, rules, {})
    assert findings == [] and statuses == []


def test_direct_context_without_cluster(rules):
    p = Profile(ops=finalize_ops(pd.DataFrame({"name": pd.Series(dtype=str)})), meta=Meta(source="mem"))
    ctx = AnalysisContext("cluster", p, None, rules.for_kb("cluster"), {})
    assert list(ClusterKB().analyze(ctx)) == [] and "single-rank" in ctx.notes[0]


def by_rule(findings: list[Finding]) -> dict[str, list[Finding]]:
    out: dict[str, list[Finding]] = {}
    for f in findings:
        out.setdefault(f.rule, []).append(f)
    return out


def steps(compute: float, comm: float, free: float, n: int = 1) -> pd.DataFrame:
    df = pd.DataFrame({"step": [float(i) for i in range(n)], "computing_us": [compute] * n,
                       "comm_not_overlapped_us": [comm] * n, "overlapped_us": [0.0] * n, "free_us": [free] * n})
    for c in STEPS_COLUMNS:
        if c not in df.columns:
            df[c] = np.nan
    return df[STEPS_COLUMNS]


def comm(wait: float, transit: float) -> pd.DataFrame:
    df = pd.DataFrame([{"step": 0.0, "op": "hcom_allReduce__1_0_1", "group": "g", "elapse_us": wait + transit,
                        "transit_us": transit, "wait_us": wait, "idle_us": 0.0, "transport": "HCCS",
                        "size_mb": 64.0, "bandwidth_gbps": 18.0}])
    return df.reindex(columns=COMM_COLUMNS)


def rank(r: int, compute: float, comm_us: float, free: float, *, wait: float = 1.0, transit: float = 0.0,
         matrix: pd.DataFrame | None = None, n: int = 1) -> RankData:
    return RankData(rank=r, meta=Meta(source=f"rank{r}", rank=r), steps=steps(compute, comm_us, free, n),
                    comm=comm(wait, transit), communication_matrix=matrix, busy_us=compute + comm_us,
                    device_time_us=compute + comm_us)


def test_slow_rank_by_compute(rules):
    cluster = [rank(0, 600.0, 350.0, 50.0), rank(1, 600.0, 350.0, 50.0), rank(2, 900.0, 50.0, 50.0),
               rank(3, 600.0, 350.0, 50.0)]
    f = by_rule(analyze(cluster, rules)[0])
    slow = f["cluster.slow-rank"][0]
    assert slow.rank == 2 and slow.evidence["reason"] == "compute"
    assert slow.estimated_saving_us == pytest.approx(900.0 - 675.0)  # excess over the mean of all ranks
    assert "computes longer" in slow.recommendation
    assert f["cluster.spread"][0].severity == "info"


def test_slow_rank_by_free_time(rules):
    cluster = [rank(0, 600.0, 300.0, 100.0), rank(1, 600.0, 50.0, 350.0), rank(2, 600.0, 300.0, 100.0)]
    slow = by_rule(analyze(cluster, rules)[0])["cluster.slow-rank"][0]
    assert slow.rank == 1 and slow.evidence["reason"] == "free"
    assert "CPU_AFFINITY_CONF" in slow.recommendation


def test_slow_rank_by_transmission(rules):
    """Time spent moving data is the rank's own; time waiting for the others is not."""
    cluster = [rank(0, 600.0, 400.0, 50.0, wait=100.0, transit=300.0),
               rank(1, 600.0, 400.0, 50.0, wait=390.0, transit=10.0),
               rank(2, 600.0, 400.0, 50.0, wait=390.0, transit=10.0)]
    slow = by_rule(analyze(cluster, rules)[0])["cluster.slow-rank"][0]
    assert slow.rank == 0 and slow.evidence["reason"] == "communication"


def test_balanced_ranks_have_no_slow_rank(rules):
    cluster = [rank(0, 600.0, 300.0, 100.0), rank(1, 610.0, 290.0, 100.0), rank(2, 605.0, 300.0, 95.0)]
    f = by_rule(analyze(cluster, rules)[0])
    assert "cluster.slow-rank" not in f and "cluster.spread" in f


def test_steps_normalised_per_rank(rules):
    """A rank profiled over 4 steps is not 'slower' than one profiled over 1."""
    cluster = [rank(0, 600.0, 300.0, 100.0, n=4), rank(1, 600.0, 300.0, 100.0, n=1), rank(2, 600.0, 300.0, 100.0)]
    assert "cluster.slow-rank" not in by_rule(analyze(cluster, rules)[0])


def _matrix(links: dict[tuple[int, int], float], src: int) -> pd.DataFrame:
    """Per-link 'total' rows of a newer communication_matrix.json, 100 MB per link at the given GB/s."""
    rows = [{"step": 1.0, "kind": "collective", "op": "allreduce", "stat": "total", "group": "g1",
             "src_rank": float(s), "dst_rank": float(d), "transport": "HCCS", "size_mb": 100.0,
             "transit_us": 100.0 / bw * 1000.0, "bandwidth_gbps": bw, "op_name": None}
            for (s, d), bw in links.items() if s == src]
    rows.append({"step": 1.0, "kind": "collective", "op": "allreduce", "stat": "total", "group": "g1",
                 "src_rank": float(src), "dst_rank": float(src), "transport": "LOCAL", "size_mb": 100.0,
                 "transit_us": 300.0, "bandwidth_gbps": 333.0, "op_name": None})
    return pd.DataFrame(rows)


def test_slow_link(rules):
    links = {(s, d): 19.0 for s in range(4) for d in range(4) if s != d}
    links[(2, 3)] = 6.0
    cluster = [rank(r, 600.0, 300.0, 100.0, matrix=_matrix(links, r)) for r in range(4)]
    slow = by_rule(analyze(cluster, rules)[0])["cluster.slow-link"]
    assert len(slow) == 1
    f = slow[0]
    assert f.evidence["transport"] == "HCCS" and f.evidence["links"] == 12 and f.evidence["slow_links"] == 1
    assert f.evidence["table"]["rows"][0][0] == "2->3 (group g1)"
    assert f.estimated_saving_us == pytest.approx(100.0 / 6.0 * 1000.0 - 100.0 / 19.0 * 1000.0)


def test_even_links_and_no_matrix(rules):
    links = {(s, d): 19.0 + 0.1 * d for s in range(3) for d in range(3) if s != d}
    cluster = [rank(r, 600.0, 300.0, 100.0, matrix=_matrix(links, r)) for r in range(3)]
    assert "cluster.slow-link" not in by_rule(analyze(cluster, rules)[0])
    findings, notes = analyze([rank(0, 1, 1, 1), rank(1, 1, 1, 1)], rules)
    assert "cluster.slow-link" not in by_rule(findings) and any("no rank has a communication matrix" in n
                                                                for n in notes)


def test_single_rank_is_skipped(rules):
    findings, notes = analyze([rank(0, 600.0, 300.0, 100.0)], rules)
    assert findings == [] and "single-rank" in notes[0]
    findings, _ = analyze([], rules)
    assert findings == []


# ---------------------------------------------------------------------------------------------------------
# real multi-rank runs
# ---------------------------------------------------------------------------------------------------------
def rank_data(path: Path) -> tuple[RankData, Profile]:
    p = load(path)[0]
    return RankData(p.meta.rank, p.meta, p.steps, p.comm, p.extras.get("communication_matrix"), p.busy_time_us(),
                    p.device_time_us()), p


@needs_samples
def test_megatron_4_ranks_pipeline_imbalance(rules):
    """pp=2 dp=2: ranks 2 and 3 compute ~400 ms per step, ranks 0 and 1 ~231 ms and wait in communication."""
    loaded = [rank_data(MSINSIGHT / f"test/st/level2/rank_{r}_ascend_pt") for r in range(4)]
    findings, _ = analyze([rd for rd, _ in loaded], rules, profile=loaded[0][1])
    f = by_rule(findings)
    slow = f["cluster.slow-rank"][0]
    assert slow.rank == 3 and slow.evidence["reason"] == "compute"
    assert set(slow.evidence["similar_ranks"]) == {"rank 2", "rank 3"}
    mean_compute = (231290.1 + 230903.72 + 400448.26 + 401131.7) / 4
    assert slow.estimated_saving_us == pytest.approx(401131.7 - mean_compute, rel=1e-4)
    assert "pipeline_model_parallel_size=2" in slow.recommendation  # from rank 0's profiler_metadata.json
    spread = f["cluster.spread"][0].evidence["spread"]
    assert spread["compute"]["min_us"] == pytest.approx(230903.72, rel=1e-6)
    assert spread["compute"]["max_us"] == pytest.approx(401131.7, rel=1e-6)
    assert "cluster.slow-link" not in f  # every HCCS link runs at 19-21 GB/s
    for finding in findings:  # the JSON report contract: plain types only
        json.dumps({**finding.to_dict(), "fix": finding.fix.to_dict() if finding.fix else None})


@needs_samples
def test_balanced_real_pairs(rules):
    for base in ("server/src/test/test_data/test_rank_{}", "test/data/pytorch/text/level2/rank{}_ascend_pt"):
        cluster = [rank_data(MSINSIGHT / base.format(r))[0] for r in (0, 1)]
        f = by_rule(analyze(cluster, rules)[0])
        assert set(f) == {"cluster.spread"}, base
