"""Cluster knowledge base: multi-rank input, analysed once after every rank.

In synchronous training every rank's step lasts as long as the slowest one; the others show the difference as
communication wait. This KB compares the ranks' own time (compute, free, data transmission -- not waiting),
names the slow rank and why (compute, communication or free time), finds the slow link (the src -> dst link of a
communication group with the lowest bandwidth relative to its transport's median, from every rank's
communication matrix) and reports the per-rank spread. It runs with ``ctx.cluster`` (one
:class:`advisor.kb.RankData` per rank) and stays silent on single-rank input.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RankData, RuleDoc
from advisor.toolkit.common import severity_for
from advisor.toolkit.time import comm_op_times

COMPONENTS = ("compute", "communication", "free")
"""A rank's own time: compute, communication transmit (data moving; waiting excluded) and free time."""


# ---------------------------------------------------------------------------------------------------------
# per-rank table
# ---------------------------------------------------------------------------------------------------------
def _label(rd: RankData, i: int) -> str:
    return f"rank {rd.rank}" if rd.rank is not None else f"input {i}"


def _bandwidth(comm: Any, transport: str) -> float:
    """Bytes / transit time over the rank's transfers on a transport (GB/s), NaN without any."""
    if not isinstance(comm, pd.DataFrame) or not len(comm) or "transport" not in comm.columns:
        return float("nan")
    sub = comm[(comm["transport"].astype(str) == transport) & (comm["size_mb"] > 0)]
    col = "transport_transit_us" if "transport_transit_us" in sub.columns else "transit_us"
    t = float(sub[col].sum()) if len(sub) else 0.0
    return float(sub["size_mb"].sum()) / (t / 1000.0) if t > 0 else float("nan")


def rank_table(cluster: Sequence[RankData]) -> pd.DataFrame:
    """One row per rank: steps, compute/comm/free (sums), comm wait vs transmit, own time, SDMA/RDMA bandwidth.

    ``*_per_step`` columns divide by the rank's step count so ranks with different windows compare fairly.
    """
    rows = []
    for i, rd in enumerate(cluster):
        st = rd.steps if isinstance(rd.steps, pd.DataFrame) else pd.DataFrame()
        have = bool(len(st)) and "computing_us" in st.columns and st["computing_us"].notna().any()
        n = int(st["step"].nunique(dropna=False)) if have else 1
        compute = float(st["computing_us"].sum()) if have else float(rd.busy_us)
        comm = float(st["comm_not_overlapped_us"].sum()) if have else float("nan")
        free = float(st["free_us"].sum()) if have else float("nan")
        transmit = wait = float("nan")
        if have and isinstance(rd.comm, pd.DataFrame) and len(rd.comm):
            per = comm_op_times(rd.comm)
            t, w, d = (float(per[c].sum()) for c in ("transit_us", "wait_us", "idle_us"))
            if t + w + d > 0:
                transmit = comm * t / (t + w + d)
                wait = comm - transmit
        rows.append({"label": _label(rd, i), "rank": rd.rank, "steps": n, "compute_us": compute,
                     "comm_us": comm, "comm_wait_us": wait, "comm_transmit_us": transmit, "free_us": free,
                     "source": "step_trace_time" if have else "device busy time",
                     "sdma_gbps": _bandwidth(rd.comm, "SDMA"), "rdma_gbps": _bandwidth(rd.comm, "RDMA")})
    df = pd.DataFrame(rows)
    df["total_us"] = df[["compute_us", "comm_us", "free_us"]].sum(axis=1, min_count=1)
    # communication as a rank's own time: the transmit part (or none when the split is unknown)
    df["communication_us"] = df["comm_transmit_us"].fillna(0.0).where(df["comm_us"].notna(), np.nan)
    for c in ("compute", "communication", "free", "total"):
        df[f"{c}_per_step"] = df[f"{c}_us"] / df["steps"]
    df["own_per_step"] = df[["compute_per_step", "communication_per_step", "free_per_step"]].sum(axis=1)
    return df


# ---------------------------------------------------------------------------------------------------------
# links
# ---------------------------------------------------------------------------------------------------------
def link_table(cluster: Sequence[RankData], skip: Iterable[str]) -> pd.DataFrame:
    """Per (group, src, dst, transport): size_mb, transit_us, bandwidth_gbps over every rank's matrix.

    Per-link ``total`` rows are used where the matrix has them (one per op kind and link), else the per-op rows.
    """
    frames = []
    for rd in cluster:
        m = _matrix_frame(rd.communication_matrix)
        if m is None or not len(m):
            continue
        stat = m["stat"]
        # newer matrices: top/middle/bottom/total aggregates per op kind; older ones: one entry per op
        rows = m[stat.astype(str) == "total"] if (stat.astype(str) == "total").any() else m[stat.isna()]
        frames.append(rows.assign(reporter=rd.rank))
    if not frames:
        return pd.DataFrame(columns=["group", "src_rank", "dst_rank", "transport", "size_mb", "transit_us",
                                     "bandwidth_gbps", "reported_by"])
    df = pd.concat(frames, ignore_index=True)
    df = df[~df["transport"].astype(str).isin(list(skip)) & (df["size_mb"] > 0) & (df["transit_us"] > 0)]
    df["group"] = df["group"].astype(str)
    df = df.drop_duplicates(subset=["step", "group", "op", "src_rank", "dst_rank", "transport", "size_mb",
                                    "transit_us"])
    g = df.groupby(["group", "src_rank", "dst_rank", df["transport"].astype(str)], sort=False)
    out = g.agg(size_mb=("size_mb", "sum"), transit_us=("transit_us", "sum"),
                reported_by=("reporter", lambda s: ",".join(sorted({str(x) for x in s})))).reset_index()
    out["bandwidth_gbps"] = out["size_mb"] / (out["transit_us"] / 1000.0)
    return out


def _matrix_frame(matrix: Any) -> pd.DataFrame | None:
    """The normalized matrix table (advisor.ingest.torch_npu MATRIX_COLUMNS), from a DataFrame or its records."""
    if matrix is None:
        return None
    if isinstance(matrix, pd.DataFrame):
        df = matrix
    elif isinstance(matrix, Mapping) and {"src_rank", "dst_rank", "size_mb"} <= set(matrix):
        df = pd.DataFrame(dict(matrix))
    elif isinstance(matrix, list):
        df = pd.DataFrame(matrix)
    else:
        return None
    needed = {"src_rank", "dst_rank", "transport", "size_mb", "transit_us"}
    if not needed <= set(df.columns):
        return None
    for col, default in (("group", ""), ("step", np.nan), ("op", ""), ("stat", None)):
        if col not in df.columns:
            df = df.assign(**{col: default})
    return df


# ---------------------------------------------------------------------------------------------------------
# the knowledge base
# ---------------------------------------------------------------------------------------------------------
class ClusterKB(KnowledgeBase):
    id = "cluster"
    title = "Cluster: slow rank and slow link"
    version = "1.0.0"
    api_version = "1"
    scope: ClassVar[str] = "cluster"
    requires = ("cluster",)
    rules_file = "cluster"
    rules = (
        RuleDoc(
            id="cluster.slow-rank",
            title="Slow rank",
            what="Per rank (per step), takes its own time: compute, free time and communication transmit time "
                 "(uncovered communication x transit share from communication.json; waiting for other ranks "
                 "excluded). The rank with the most is the slow rank; its reason is the component furthest above "
                 "the other ranks' median. Fires when that component's spread across ranks reaches "
                 "slow_rank.min_spread_share of the mean step. Saving: the slow rank's excess over the mean of "
                 "all ranks in that component, per step.",
            why="Collectives finish when the last rank arrives: every other rank waits (it shows as their "
                "communication wait) for the slow rank's extra compute, host stalls or slow transfers.",
            how_to_fix="compute: rebalance work (pipeline stage layer split, uneven sequence lengths or MoE "
                       "routing, a rank doing extra logging/evaluation); free: find the host stall on that rank "
                       "(data loading, CPU binding, a noisy neighbour); communication: check its links (slow-link "
                       "findings).",
            thresholds=("slow_rank", "severity"),
            needs=("steps", "comm"),
        ),
        RuleDoc(
            id="cluster.slow-link",
            title="Slow link",
            what="Sums every rank's communication_matrix.json per link (communication group, src -> dst, "
                 "transport; 'total' rows where present) and flags links whose bandwidth is below "
                 "slow_link.max_bandwidth_ratio x the median of their transport (links under min_size_mb and "
                 "transports in skip_transports are not compared). Saving: the link's transit time beyond its "
                 "size at the median bandwidth.",
            why="A collective is as fast as its slowest link; one degraded HCCS/RoCE link slows every step of "
                "every rank in the group.",
            how_to_fix="Check the link's hardware and configuration (hccn_tool link status and counters, optics, "
                       "switch port), and the device placement of the two ranks.",
            thresholds=("slow_link", "severity"),
            needs=("comm",),
        ),
        RuleDoc(
            id="cluster.spread",
            title="Per-rank time spread",
            what="Reports (info, no saving) each rank's compute, uncovered communication (wait / transmit), free "
                 "time and SDMA/RDMA bandwidth, with the spread of each across ranks: the cluster overview.",
            why="Shows at a glance whether ranks are balanced and which component differs.",
            how_to_fix="See the slow-rank and slow-link findings.",
            thresholds=(),
            needs=("steps", "comm"),
        ),
    )

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        cluster = list(ctx.cluster or [])
        if len(cluster) < 2:
            ctx.note("cluster: skipped, single-rank input")
            return []
        df = rank_table(cluster)
        mean_step = float(df["total_per_step"].mean()) if df["total_per_step"].notna().any() else float(
            df["compute_per_step"].mean())
        findings = [self._spread(ctx, df, mean_step)]
        slow = self._slow_rank(ctx, df, mean_step)
        if slow is not None:
            findings.append(slow)
        findings += self._slow_links(ctx, cluster, mean_step)
        return findings

    # ----------------------------------------------------------------------------------------------------
    @staticmethod
    def _rank_rows(df: pd.DataFrame) -> dict[str, Any]:
        cols = ["rank", "steps", "compute_us", "comm_uncovered_us", "comm_wait_us", "comm_transmit_us", "free_us",
                "total_us", "own_per_step_us", "sdma_gbps", "rdma_gbps", "source"]
        rows = [[r.label, int(r.steps), _r(r.compute_us), _r(r.comm_us), _r(r.comm_wait_us), _r(r.comm_transmit_us),
                 _r(r.free_us), _r(r.total_us), _r(r.own_per_step), _r(r.sdma_gbps), _r(r.rdma_gbps), r.source]
                for r in df.itertuples(index=False)]
        return table(cols, rows, limit=64)

    def _spread(self, ctx: AnalysisContext, df: pd.DataFrame, mean_step: float) -> Finding:
        spread = {}
        for c, col in (("compute", "compute_per_step"), ("uncovered_communication", "comm_us"),
                       ("free", "free_per_step"), ("total", "total_per_step")):
            vals = df[col] / (df["steps"] if col == "comm_us" else 1)
            if vals.notna().any():
                spread[c] = {"min_us": float(vals.min()), "max_us": float(vals.max()),
                             "spread_us": float(vals.max() - vals.min()),
                             "spread_share": float((vals.max() - vals.min()) / mean_step) if mean_step else 0.0}
        parts = [f"{k.replace('_', ' ')} {v['min_us'] / 1000:.1f}-{v['max_us'] / 1000:.1f} ms"
                 for k, v in spread.items() if k != "total"]
        return ctx.finding(
            rule="cluster.spread", title=f"{len(df)} ranks, per step: " + ", ".join(parts), severity="info",
            ops=[], evidence={"ranks": int(len(df)), "mean_step_us": mean_step, "spread": spread,
                              "table": self._rank_rows(df)},
            estimated_saving_us=0.0, basis="overview only; savings are in the slow-rank and slow-link findings",
            recommendation="Compare the ranks' compute and free time: in synchronous training the rank with the "
                           "most of its own time sets the step, the others wait in communication.",
            confidence=0.9)

    def _slow_rank(self, ctx: AnalysisContext, df: pd.DataFrame, mean_step: float) -> Finding | None:
        if df["own_per_step"].isna().all() or mean_step <= 0:
            return None
        slow_i = int(df["own_per_step"].idxmax())
        others = df.drop(index=slow_i)
        excess: dict[str, float] = {}
        for c in COMPONENTS:
            col = f"{c}_per_step"
            if pd.notna(df.at[slow_i, col]) and others[col].notna().any():
                excess[c] = float(df.at[slow_i, col] - others[col].median())
        if not excess:
            return None
        reason = max(excess, key=lambda c: excess[c])
        col = f"{reason}_per_step"
        spread_share = float((df[col].max() - df[col].min()) / mean_step)
        threshold = float((ctx.rules.get("slow_rank") or {}).get("min_spread_share", 0.05))
        if excess[reason] <= 0 or spread_share < threshold:
            return None
        steps = int(df.at[slow_i, "steps"])
        per_step = max(0.0, float(df.at[slow_i, col] - df[col].mean()))
        saving = per_step * steps
        label = str(df.at[slow_i, "label"])
        raw_rank = df.at[slow_i, "rank"]
        rank = int(raw_rank) if raw_rank is not None and pd.notna(raw_rank) else None
        peers = df.loc[(df[col] - df.at[slow_i, col]).abs() <= threshold * mean_step, "label"].tolist()
        rec = self._advice(ctx, reason, label, peers)
        f = ctx.finding(
            rule="cluster.slow-rank",
            title=f"{label} is the slow rank: {reason} {float(df.at[slow_i, col]) / 1000:.1f} ms per step vs a median "
                  f"{float(others[col].median()) / 1000:.1f} ms on the other ranks",
            severity=severity_for(per_step / mean_step, ctx.rules.get("severity", {})),
            ops=[], evidence={"slow_rank": rank, "reason": reason,
                              "excess_over_median_us": excess, "spread_share": spread_share,
                              "similar_ranks": peers, "mean_step_us": mean_step, "table": self._rank_rows(df)},
            estimated_saving_us=saving,
            basis=f"{label}'s {reason} time above the mean of all ranks ({per_step / 1000:.2f} ms per step x "
                  f"{steps} steps): what the other ranks wait for",
            recommendation=rec,
            fix=Fix("code", f"balance {reason} across ranks", {"rank": rank, "reason": reason}),
            confidence=0.6)
        f.rank = rank
        return f

    @staticmethod
    def _advice(ctx: AnalysisContext, reason: str, label: str, peers: list[str]) -> str:
        group = f" ({', '.join(peers)} alike)" if len(peers) > 1 else ""
        if reason == "compute":
            meta = (ctx.profile.extras.get("profiler_metadata") or {}) if ctx.profile is not None else {}
            args = meta.get("distributed_args") or {}
            pp = args.get("pipeline_model_parallel_size")
            text = (f"{label}{group} computes longer than the other ranks, which wait for it in communication. ")
            if isinstance(pp, int) and pp > 1:
                text += (f"With pipeline parallelism (pipeline_model_parallel_size={pp}), different compute per rank "
                         "means unbalanced stages: move layers from the slow stage to the others (the first and "
                         "last stages also carry the embedding and the loss/head), or use an interleaved schedule.")
            else:
                text += ("Check for uneven work: sequence lengths or batch sizes per rank, MoE expert load, extra "
                         "work on that rank (logging, evaluation, checkpointing).")
            return text
        if reason == "free":
            return (f"{label}{group} spends longer idle than the other ranks: its host feeds the device more slowly. "
                    "Check that rank's data loading, CPU core binding (CPU_AFFINITY_CONF=1), host-side "
                    "synchronisation and other processes on its host.")
        return (f"{label}{group} spends longer transmitting data than the other ranks: check its links (slow-link "
                "findings) and its placement in the topology.")

    def _slow_links(self, ctx: AnalysisContext, cluster: Sequence[RankData], mean_step: float) -> list[Finding]:
        sl = ctx.rules.get("slow_link") or {}
        links = link_table(cluster, sl.get("skip_transports") or [])
        if not len(links):
            ctx.note("cluster.slow-link: skipped, no rank has a communication matrix")
            return []
        links = links[links["size_mb"] >= float(sl.get("min_size_mb", 1.0))]
        ratio = float(sl.get("max_bandwidth_ratio", 0.8))
        out = []
        for transport, grp in links.groupby("transport", sort=True):
            if len(grp) < int(sl.get("min_links", 3)):
                continue
            median = float(grp["bandwidth_gbps"].median())
            slow = grp[grp["bandwidth_gbps"] < ratio * median].sort_values("bandwidth_gbps")
            if not len(slow):
                continue
            per = (slow["transit_us"] - slow["size_mb"] / median * 1000.0).clip(lower=0.0)
            saving = float(per.sum())
            worst = slow.iloc[0]
            name = _link_name(worst)
            rows = [[_link_name(r), round(float(r["bandwidth_gbps"]), 3), round(float(r["size_mb"]), 3),
                     round(float(r["transit_us"]), 3), r["reported_by"]] for _, r in slow.iterrows()]
            out.append(ctx.finding(
                rule="cluster.slow-link",
                title=f"Slow {transport} link {name}: {float(worst['bandwidth_gbps']):.1f} GB/s vs a median "
                      f"{median:.1f} GB/s over {len(grp)} links" + (f" ({len(slow)} slow links)" if len(slow) > 1 else ""),
                severity=severity_for(saving / max(mean_step, 1.0), ctx.rules.get("severity", {})),
                ops=[], evidence={"transport": transport, "median_gbps": median, "ratio": ratio,
                                  "links": int(len(grp)), "slow_links": int(len(slow)),
                                  "table": table(["link", "bandwidth_gbps", "size_mb", "transit_us", "reported_by"],
                                                 rows)},
                estimated_saving_us=saving,
                basis=f"transit time on the slow links beyond their size at the median {transport} bandwidth "
                      f"({median:.1f} GB/s)",
                recommendation=f"The {transport} link {name} runs at {float(worst['bandwidth_gbps']) / median:.0%} "
                               "of the median link: check its hardware and configuration (hccn_tool link status "
                               "and error counters, optics, switch port) and the placement of the two ranks. Ranks "
                               "are numbered within their communication group.",
                fix=Fix("config", f"inspect link {name}", {"link": name, "transport": transport}),
                confidence=0.5))
        return out


def _rank_id(v: Any) -> str:
    return str(int(v)) if pd.notna(v) else "?"


def _link_name(r: Any) -> str:
    return f"{_rank_id(r['src_rank'])}->{_rank_id(r['dst_rank'])} (group {r['group']})"


def _r(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(f) else round(f, 3)


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [ClusterKB]
