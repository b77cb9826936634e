"""Cluster knowledge base: multi-rank input, analysed once from every rank's small summary.

In synchronous training every rank's step lasts as long as the slowest one; the others show the difference as
communication wait. From each rank's per-step time split (its time model), its collectives and its links, this
KB builds the cluster step table per rank and per pipeline stage (with DP / PP / TP indices), names the slow rank
of each stage and why (compute, free time on the host, or waiting for another pipeline stage), finds for each
collective the ranks that arrived last and what they were doing before, the pipeline stages that sit in bubbles,
and the links slower than their transport's reference bandwidth. The ``cluster.spread`` finding carries the
report's ``cluster`` section (``evidence["cluster_section"]``), so the report and the findings share one
definition of the slow rank. It runs with ``ctx.cluster`` (one :class:`advisor.kb.RankData` per rank).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, ClassVar

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RankData, RuleDoc, rule
from advisor.toolkit.common import severity_for
from advisor.toolkit.peers import (
    group_coverage_finding,
    late_peer_finding,
    op_peers,
    own_ranks,
    peer_totals,
    window_waits,
)

OWN = {"compute": "compute_us", "free": "free_us", "waiting": "bubble_us"}
"""A rank's own time per step, by reason: compute, free (host-bound: the device idles waiting for the host) and
waiting for another pipeline stage (bubble). Waiting for peers in collectives is not its own time, and neither
is transmit time: a collective's transfers run at its slowest link for every member (slow-link findings)."""
COMPONENTS = ["compute_us", "uncovered_comm_us", "wait_us", "transmit_us", "idle_us", "overlapped_us", "free_us",
              "bubble_us", "preparing_us", "step_us"]
DIMS = ("dp", "pp", "tp")


# ---------------------------------------------------------------------------------------------------------
# tables
# ---------------------------------------------------------------------------------------------------------
def _label(rank: Any, i: int) -> str:
    return f"rank {int(rank)}" if rank is not None and pd.notna(rank) else f"input {i}"


def step_table(cluster: Sequence[RankData]) -> pd.DataFrame:
    """One row per step x rank: COMPONENTS, the rank's DP / PP / TP indices, and where the numbers came from.

    A rank without a step split counts its device busy time as compute over one step (``source``). Built column by
    column over every rank at once (a frame per rank, concatenated, cost ~5 ms a rank; issue 33)."""
    blocks: list[dict[str, np.ndarray]] = []
    per_row: dict[str, list[Any]] = {"i": [], "rank": [], "label": [], **{d: [] for d in DIMS}, "source": []}
    counts: list[int] = []
    for i, rd in enumerate(cluster):
        st = rd.step_time
        st = st if isinstance(st, pd.DataFrame) else pd.DataFrame()
        if len(st):
            values = st.to_numpy()  # one block of floats: its columns are views
            block = ({str(c): values[:, k] for k, c in enumerate(st.columns)} if values.dtype == np.float64
                     else {str(c): st[c].to_numpy() for c in st.columns})
            source = str(st.attrs.get("source", "step time split"))
        else:
            block = {"step": np.array([np.nan]), "compute_us": np.array([float(rd.busy_us)]),
                     "step_us": np.array([float(rd.busy_us)])}
            source = "device busy time"
        n = len(next(iter(block.values())))
        for c in COMPONENTS:
            if c not in block:
                block[c] = np.full(n, np.nan)
        blocks.append(block)
        counts.append(n)
        groups = rd.groups or {}
        per_row["i"].append(i)
        per_row["rank"].append(rd.rank if rd.rank is not None else np.nan)
        per_row["label"].append(_label(rd.rank, i))
        for d in DIMS:
            g = groups.get(d) or {}
            per_row[d].append(g.get("index") if g.get("index") is not None else np.nan)
        per_row["source"].append(source)
    names = list(blocks[0])
    if any(list(b) != names for b in blocks):  # differing step tables: let pandas align them
        return _step_table_framewise(cluster)
    cols: dict[str, Any] = {c: np.concatenate([b[c] for b in blocks]) for c in names}
    reps = np.asarray(counts)
    for c, values in per_row.items():
        cols[c] = np.repeat(np.asarray(values, dtype=object if c in ("label", "source") else None), reps)
    out = pd.DataFrame(cols)
    for c in ("label", "source"):
        out[c] = out[c].astype(str)
    out["pp"] = out["pp"].fillna(0.0)
    return out


def _step_table_framewise(cluster: Sequence[RankData]) -> pd.DataFrame:
    """:func:`step_table` one frame per rank, for ranks whose step tables differ in their columns."""
    frames = []
    for i, rd in enumerate(cluster):
        st = rd.step_time if isinstance(rd.step_time, pd.DataFrame) else pd.DataFrame()
        if len(st):
            df = st.copy()
            source = str(st.attrs.get("source", "step time split"))
        else:
            df = pd.DataFrame({"step": [np.nan], "compute_us": [float(rd.busy_us)], "step_us": [float(rd.busy_us)]})
            source = "device busy time"
        for c in COMPONENTS:
            if c not in df.columns:
                df[c] = np.nan
        df["i"] = i
        df["rank"] = rd.rank if rd.rank is not None else np.nan
        df["label"] = _label(rd.rank, i)
        for d in DIMS:
            g = (rd.groups or {}).get(d) or {}
            df[d] = g.get("index") if g.get("index") is not None else np.nan
        df["source"] = source
        frames.append(df)
    out = pd.concat(frames, ignore_index=True)
    out["pp"] = out["pp"].fillna(0.0)
    return out


def rank_table(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per rank: per-step medians of COMPONENTS, steps, and own time per step (the OWN components)."""
    g = steps.groupby("i", sort=True)
    df = g[COMPONENTS].median()  # a typical step: a warm-up step does not make a rank slow
    df["steps"] = g["step"].nunique(dropna=False)
    df["steps_recorded"] = steps["step"].notna().groupby(steps["i"], sort=True).any()
    for c in ("rank", "label", "source", *DIMS):
        df[c] = g[c].first()
    own = df[list(OWN.values())]
    df["own_us"] = own.sum(axis=1, min_count=1)
    return df.reset_index()


def stage_table(steps: pd.DataFrame) -> pd.DataFrame:
    """One row per step x pipeline stage: ranks, and the mean and max of each component over the stage's ranks."""
    g = steps.groupby(["step", "pp"], sort=True, dropna=False)
    mean = g[COMPONENTS].mean().add_suffix("_mean")
    mx = g[COMPONENTS].max().add_suffix("_max")
    out = pd.concat([mean, mx], axis=1)
    out["ranks"] = g["rank"].apply(lambda s: [int(r) for r in s if pd.notna(r)])
    return out.reset_index()


def collective_table(cluster: Sequence[RankData]) -> pd.DataFrame:
    """Every rank's communication ops (communication.json) with a ``rank`` column. p2p ops match across ranks
    only where both sides carry the same name (``hcom_batchSendRecv``), send / receive pairs do not. Columns are
    gathered over every rank and converted once (a frame per rank cost ~5 ms a rank; issue 33)."""
    kept = []  # (rank, its collectives), each rank's table read once (a rank's data may rebuild it on each read)
    for rd in cluster:
        c = rd.comm if rd.rank is not None else None
        if isinstance(c, pd.DataFrame) and len(c) and "wait_us" in c.columns:
            kept.append((rd.rank, c))
    if not kept:
        return pd.DataFrame(columns=["rank", "step", "op", "group", "wait_us", "elapse_us"])
    sizes = np.asarray([len(c) for _, c in kept])
    ranks = np.repeat(np.asarray([r for r, _ in kept]), sizes)

    def floats(col: str) -> np.ndarray:
        return np.concatenate([c[col].to_numpy(dtype="float64") for _, c in kept])

    def strings(col: str) -> np.ndarray:
        return np.concatenate([_str_values(c[col]) for _, c in kept])

    return pd.DataFrame({"rank": ranks, "step": floats("step"), "op": strings("op"), "group": strings("group"),
                         "wait_us": floats("wait_us"), "elapse_us": floats("elapse_us")})


def _str_values(values: pd.Series) -> np.ndarray:
    """``values.astype(str).to_numpy()``, by categories for a categorical column (converting each category once)."""
    if isinstance(values.dtype, pd.CategoricalDtype):
        codes = values.cat.codes.to_numpy()
        if (codes >= 0).all():
            return np.array([str(c) for c in values.cat.categories], dtype=object)[codes]
    return values.astype(str).to_numpy()


def last_arrivals(coll: pd.DataFrame, tie_share: float, tie_us: float) -> dict[tuple[int, ...], dict[str, Any]]:
    """Per set of last-arriving ranks: the median wait they caused (summed over their collectives), the rank time
    the others waited, the number of collectives, their steps, the member ranks and the top 20 collectives.

    For each collective (step, group, op) with two or more ranks, the ranks with the least wait (within
    ``tie_share`` of the wait spread, or ``tie_us``) arrived last; the others' wait beyond the least is for them.
    """
    keys = ["step", "group", "op"]
    w = coll.groupby([*keys, "rank"], sort=True, dropna=False)["wait_us"].min().reset_index()
    g = w.groupby(keys, sort=False, dropna=False)["wait_us"]
    least, most, n = g.transform("min"), g.transform("max"), g.transform("size")
    w["excess"] = w["wait_us"] - least
    w["late"] = w["wait_us"] <= least + np.maximum(tie_us, tie_share * (most - least))
    w["n"] = n
    w = w[w["n"] >= 2]
    others = w[~w["late"]]
    if not len(others):
        return {}
    per = others.groupby(keys, sort=False, dropna=False)["excess"].agg(delay="median", waited="sum", most="max")
    late = (w[w["late"]].groupby(keys, sort=False, dropna=False)["rank"]
            .agg(lambda r: tuple(sorted(int(x) for x in r))).rename("late_ranks"))
    per = per.join(late, how="inner").join(w.groupby(keys, sort=False, dropna=False)["n"].first()).reset_index()
    members = (w.merge(per[[*keys, "late_ranks"]], on=keys, how="inner").groupby("late_ranks")["rank"].unique()
               .to_dict())
    out: dict[tuple[int, ...], dict[str, Any]] = {}
    for late_ranks, grp in per.groupby("late_ranks", sort=False):
        out[late_ranks] = {"delay_us": float(grp["delay"].sum()), "waited_us": float(grp["waited"].sum()),
                           "collectives": int(len(grp)), "steps": set(grp["step"].tolist()),
                           "members": {int(r) for r in members[late_ranks]},
                           "top": grp.nlargest(20, "delay")}
    return out


def link_table(cluster: Sequence[RankData], skip: Iterable[str]) -> pd.DataFrame:
    """Every rank's links (communication_matrix.json sums and single-op transfers) with the reporting rank and,
    where the group's members are known from their own reports (each rank reports the links it sends on), global
    src / dst ranks."""
    frames, reporters = [], []
    for rd in cluster:
        m = rd.communication_matrix
        if isinstance(m, pd.DataFrame) and len(m) and {"src", "dst", "transport"} <= set(m.columns):
            frames.append(m)
            reporters.append(rd.rank)
    if not frames:
        return pd.DataFrame(columns=["group", "src", "dst", "transport", "size_mb", "transit_us", "transfers",
                                     "reporter", "src_rank", "dst_rank", "bandwidth_gbps"])
    df = pd.concat(frames, ignore_index=True)
    df["reporter"] = np.repeat(np.asarray(reporters), [len(m) for m in frames])
    local = df.groupby(["group", "reporter"])["src"].agg(lambda s: s.iloc[0] if s.nunique() == 1 else np.nan)
    to_global: dict[tuple[str, float], int] = {}
    for (group, reporter), src in local.items():
        if pd.notna(src) and reporter is not None and pd.notna(reporter):
            to_global[(str(group), float(src))] = int(reporter)
    df = df[~df["transport"].astype(str).isin(list(skip))].copy()
    df["src_rank"] = [to_global.get((str(g), float(s))) for g, s in zip(df["group"], df["src"], strict=True)]
    df["dst_rank"] = [to_global.get((str(g), float(d))) for g, d in zip(df["group"], df["dst"], strict=True)]
    df["bandwidth_gbps"] = df["size_mb"] / (df["transit_us"] / 1000.0)
    return df.reset_index(drop=True)


def large_transfers(links: pd.DataFrame, min_message_mb: Mapping[str, float], min_large_packet_ratio: float
                    ) -> pd.DataFrame:
    """Each link's transfers large enough to reach the link's bandwidth, summed: ``large_size_mb``,
    ``large_transit_us``, ``large_transfers``, ``large_gbps`` (NaN without one) and ``transfers_seen``.

    A transfer (one op on the link) is large when the op's Large Packet Ratio on that transport (communication.json,
    msprof's share of packets at or above the transport's message-size threshold) reaches
    ``min_large_packet_ratio``; where no ratio is recorded, when its own size reaches ``min_message_mb`` of the
    transport. Links without single-op detail are judged on their totals' mean size."""
    out = links.copy()
    sums = []
    for row in out.itertuples(index=False):
        sizes = tuple(getattr(row, "op_size_mb", ()) or ())
        times = tuple(getattr(row, "op_transit_us", ()) or ())
        ratios = tuple(getattr(row, "op_large_packet_ratio", ()) or ())
        if not sizes:  # no single-op detail: the totals, one transfer each
            n = max(1, int(row.transfers))
            sizes, times, ratios = (float(row.size_mb) / n,) * n, (float(row.transit_us) / n,) * n, (np.nan,) * n
        floor = _size_floor(min_message_mb, str(row.transport))
        big = [(sz, t) for sz, t, r in zip(sizes, times, ratios or (np.nan,) * len(sizes), strict=True)
               if (r >= min_large_packet_ratio if np.isfinite(r) else sz >= floor) and t > 0]
        size, transit = sum(sz for sz, _ in big), sum(t for _, t in big)
        sums.append((size, transit, len(big), len(sizes), size / (transit / 1000.0) if transit > 0 else np.nan))
    cols = ["large_size_mb", "large_transit_us", "large_transfers", "transfers_seen", "large_gbps"]
    for j, col in enumerate(cols):
        out[col] = [x[j] for x in sums]
    return out


def comparable(ctx: AnalysisContext, ranks: pd.DataFrame, rule: str) -> pd.DataFrame:
    """The ranks whose figures are per step: when some inputs recorded steps and others did not (a lone
    op_summary next to rank directories), the step-less ones cover their whole capture and are not compared."""
    has_steps = ranks["steps_recorded"] if "steps_recorded" in ranks.columns else pd.Series(True, index=ranks.index)
    if has_steps.any() and not has_steps.all():
        left = ", ".join(str(x) for x in ranks.loc[~has_steps, "label"])
        ctx.note(f"{rule}: {left} left out of the comparison: no recorded steps, unlike the other ranks")
        return ranks[has_steps]
    return ranks


def cluster_window(cluster: Sequence[RankData], ranks: pd.DataFrame) -> float:
    """The analyzed window of the whole input: every rank's time-model window summed (else its steps' time)."""
    total = 0.0
    for i, rd in enumerate(cluster):
        tm = rd.time  # read once: a rank's data may rebuild it on each read
        w = float(getattr(tm, "window_us", 0.0) or 0.0) if tm is not None else 0.0
        if w <= 0 and i in ranks.index:
            w = float(np.nan_to_num(ranks.at[i, "step_us"]) * max(1, int(ranks.at[i, "steps"])))
        total += w
    return total


def _size_floor(min_message_mb: Mapping[str, float], transport: str) -> float:
    """The least size (MB) of a transfer judged on ``transport``; a transport the rules give no size judges every
    transfer (rules/cluster.yaml slow_link.min_message_mb)."""
    return float(min_message_mb[transport]) if transport in min_message_mb else 0.0


def expected_bandwidth(rules: Mapping[str, Any], soc: str | None) -> dict[str, float]:
    """Expected GB/s per transport for the chip: the longest matching SoC prefix in the rules, else 'default'."""
    table_ = rules["slow_link"]["expected_gbps"]
    best = ""
    for prefix in table_:
        if prefix != "default" and soc and str(soc).startswith(prefix) and len(prefix) > len(best):
            best = prefix
    return {str(k): float(v) for k, v in table_[best or "default"].items()}


# ---------------------------------------------------------------------------------------------------------
# the knowledge base
# ---------------------------------------------------------------------------------------------------------
class ClusterKB(KnowledgeBase):
    id = "cluster"
    title = "Cluster: slow rank, communication bottleneck, pipeline bubble, slow link"
    version = "2.0.0"
    api_version = "1.5"
    scope: ClassVar[str] = "cluster"
    requires = ("cluster",)
    ops_columns = ()
    rules_file = "cluster"

    _window: float = 0.0

    def _severity(self, ctx: AnalysisContext, saving_us: float) -> str:
        """Severity from the share of the analyzed window the saving is (every rank's window summed: the window the
        report's score divides by), so a cluster finding reads as severe as the time it recovers."""
        return severity_for(saving_us / self._window if self._window > 0 else 0.0, ctx.rules["severity"])

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        cluster = list(ctx.cluster or [])
        if len(cluster) < 2:
            ctx.note("cluster: skipped, single-rank input")
            return []
        steps = step_table(cluster)
        ranks = rank_table(steps)
        stages = stage_table(steps)
        mean_step = float(ranks["step_us"].mean()) if ranks["step_us"].notna().any() else 0.0
        self._window = cluster_window(cluster, ranks)
        slow = self._slow_ranks(ctx, ranks, mean_step)
        findings: list[Finding] = [self._spread(ctx, ranks, steps, stages, mean_step, slow, cluster)]
        findings += [f for _, f in slow]
        findings += self._stage_imbalance(ctx, ranks, stages, mean_step)
        findings += self._bubbles(ctx, ranks, mean_step)
        peers = _Peers(cluster)
        findings += _explained(self._bottlenecks(ctx, cluster, ranks, steps, mean_step, peers), findings)
        findings += self._late_peers(ctx, cluster, peers)
        findings += self._slow_links(ctx, cluster, mean_step)
        return findings

    # ----------------------------------------------------------------------------------------------------
    # slow rank
    # ----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="cluster.slow-rank",
        title="Slow rank",
        what="Within each pipeline stage (all ranks without pipeline parallelism), takes each rank's own time "
             "per step: compute, free (host) and pipeline bubble (waiting for another stage); waiting for "
             "peers in collectives and transmit time (set by the collective's slowest link, see slow-link) are "
             "excluded. The rank with the most is the "
             "stage's slow rank; its reason is the component furthest above the stage's median. Fires when "
             "that component's spread across the stage reaches slow_rank.min_spread_share of the mean step. "
             "Saving: the rank's excess over the stage's mean in that component, per step x steps.",
        why="Collectives finish when the last rank arrives: every other rank waits (it shows as their "
            "communication wait) for the slow rank's extra compute, host stalls or its own wait for another "
            "stage.",
        how_to_fix="compute: rebalance work (uneven sequence lengths or MoE routing, a rank doing extra "
                   "logging/evaluation, a throttled device); free: find the host stall on that rank (data "
                   "loading, CPU binding, a noisy neighbour); waiting: look at the neighbour stage's rank.",
        thresholds=("slow_rank", "confidence", "severity"),
        needs=("steps", "comm"),
        explains=("overall.uncovered-communication",),
    ))
    def _slow_ranks(self, ctx: AnalysisContext, ranks: pd.DataFrame,
                    mean_step: float) -> list[tuple[dict[str, Any], Finding]]:
        cfg = ctx.rules["slow_rank"]
        threshold = float(cfg["min_spread_share"])
        floor = float(cfg["min_excess_us"])
        out = []
        if mean_step <= 0 or ranks["own_us"].isna().all():
            return []
        ranks = comparable(ctx, ranks, "cluster.slow-rank")
        for pp, stage in ranks.groupby("pp", sort=True):
            if len(stage) < 2 or stage["own_us"].isna().all():
                continue
            i = stage["own_us"].idxmax()
            others = stage.drop(index=i)
            excess = {reason: float(stage.at[i, col] - others[col].median()) for reason, col in OWN.items()
                      if pd.notna(stage.at[i, col]) and others[col].notna().any()}
            if not excess:
                continue
            reason = max(excess, key=lambda k: excess[k])
            col = OWN[reason]
            spread_share = float((stage[col].max() - stage[col].min()) / mean_step)
            if excess[reason] <= floor or spread_share < threshold:
                continue
            # every other rank of the stage waits for it, each by its own shortfall
            per_step = float((float(stage.at[i, col]) - others[col]).clip(lower=0.0).sum())
            n = int(stage.at[i, "steps"])
            rank = _i(stage.at[i, "rank"])
            label = str(stage.at[i, "label"])
            where = f" of pipeline stage {int(pp)}" if ranks["pp"].nunique() > 1 else ""
            info = {"rank": rank, "reason": reason, "excess_us": excess[reason], "pp": int(pp)}
            f = ctx.finding(
                rule="cluster.slow-rank",
                title=f"{label} is the slow rank{where}: {reason} {float(stage.at[i, col]) / 1000:.2f} ms per step "
                      f"vs a median {float(others[col].median()) / 1000:.2f} ms on the stage's other ranks",
                severity=self._severity(ctx, per_step * int(stage.at[i, "steps"])),
                ops=[], evidence={"slow_rank": rank, "reason": reason, "pipeline_stage": int(pp),
                                  "excess_over_median_us": {k: round(v, 3) for k, v in excess.items()},
                                  "spread_share": round(spread_share, 4), "mean_step_us": round(mean_step, 3),
                                  "source": "per-step time split (step_trace_time / time model)",
                                  "table": self._rank_rows(stage)},
                estimated_saving_us=per_step * n,
                basis=f"what the stage's {len(others)} other rank(s) wait for {label} per step: its {reason} time "
                      f"above each one's, summed ({per_step / 1000:.3f} ms per step x {n} steps)",
                recommendation=self._advice(ctx, reason, label, int(pp), ranks),
                fix=Fix("code", f"balance {reason} across ranks", {"rank": rank, "reason": reason}),
                confidence=float(ctx.rules["confidence"]["slow_rank"]))
            f.rank = rank
            out.append((info, f))
        out.sort(key=lambda x: -x[1].estimated_saving_us)
        return out

    @staticmethod
    def _advice(ctx: AnalysisContext, reason: str, label: str, pp: int, ranks: pd.DataFrame) -> str:
        if reason == "compute":
            return (f"{label} computes longer than the other ranks of its stage, which wait for it in "
                    "communication. The ranks of a stage run the same layers: look for uneven work (sequence "
                    "lengths or batch sizes per rank, MoE expert load) or extra work on that rank (logging, "
                    "evaluation, checkpointing), and for a slower device (frequency, temperature: npu-smi).")
        if reason == "free":
            return (f"{label} leaves its device idle longer than the other ranks: its host feeds the device more "
                    "slowly. Check that rank's data loading, CPU core binding (CPU_AFFINITY_CONF=1), host-side "
                    "synchronisation and other processes on its host.")
        if reason == "waiting":
            prev = f"pipeline stage {pp - 1}" if pp > 0 else "the next pipeline stage"
            return (f"{label} waits longer than its stage's other ranks for activations or gradients from {prev}: "
                    "find the slow rank there (its slow-rank or comm-bottleneck finding).")
        return f"{label}: look at what it does that its stage's other ranks do not."

    # ----------------------------------------------------------------------------------------------------
    # pipeline stage balance
    # ----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="cluster.stage-imbalance",
        title="Unbalanced pipeline stages",
        what="Per pipeline stage, the mean compute time per step of its ranks. Fires when the slowest stage's "
             "compute exceeds the fastest's by stage_imbalance.min_spread_share of the mean step: the other "
             "stages wait for it (in p2p transfers or pipeline bubbles). Saving: the slowest stage's compute "
             "above the mean of the stages, per step x steps (what balancing the layers would take off the "
             "step) x the ranks compared (every rank's step shortens, and the cluster's analyzed window is "
             "the sum of the ranks' windows).",
        why="A pipeline runs at the pace of its slowest stage; the others idle in every micro-batch.",
        how_to_fix="Move layers from the slow stage to the others (Megatron/MindSpeed: an uneven layer split such "
                   "as --num-layer-list, or --decoder-first/last-pipeline-num-layers), remembering that the "
                   "first stage also carries the embedding and the last the loss/head.",
        thresholds=("stage_imbalance", "confidence", "severity"),
        needs=("steps",),
        explains=("overall.uncovered-communication",),
    ))
    def _stage_imbalance(self, ctx: AnalysisContext, ranks: pd.DataFrame, stages: pd.DataFrame,
                         mean_step: float) -> list[Finding]:
        if ranks["pp"].nunique() < 2 or mean_step <= 0 or ranks["compute_us"].isna().all():
            return []
        ranks = comparable(ctx, ranks, "cluster.stage-imbalance")
        per_stage = ranks.groupby("pp", sort=True).agg(compute_us=("compute_us", "mean"), ranks=("rank", list),
                                                       steps=("steps", "max"))
        slow_pp = per_stage["compute_us"].idxmax()
        spread = float(per_stage["compute_us"].max() - per_stage["compute_us"].min())
        cfg = ctx.rules["stage_imbalance"]
        if spread / mean_step < float(cfg["min_spread_share"]) or spread <= float(cfg["min_excess_us"]):
            return []
        per_step = float(per_stage.at[slow_pp, "compute_us"] - per_stage["compute_us"].mean())
        n = int(per_stage.at[slow_pp, "steps"])
        n_ranks = int(len(ranks))
        saving = max(0.0, per_step) * n * n_ranks
        others = per_stage.drop(index=slow_pp)
        rows = [[int(pp), [_i(r) for r in row.ranks], _r(row.compute_us)] for pp, row in per_stage.iterrows()]
        return [ctx.finding(
            rule="cluster.stage-imbalance",
            title=f"Pipeline stage {int(slow_pp)} computes {float(per_stage.at[slow_pp, 'compute_us']) / 1000:.1f} ms "
                  f"per step vs {float(others['compute_us'].mean()) / 1000:.1f} ms on the other stages",
            severity=self._severity(ctx, saving),
            ops=[], evidence={"pipeline_stage": int(slow_pp), "ranks": [_i(r) for r in per_stage.at[slow_pp, "ranks"]],
                              "spread_share": round(spread / mean_step, 4), "mean_step_us": round(mean_step, 3),
                              "source": "per-step compute (step_trace_time Computing / time model)",
                              "table": table(["pp", "ranks", "compute_per_step_us"], rows)},
            estimated_saving_us=saving,
            basis=f"stage {int(slow_pp)}'s compute above the mean of the stages ({per_step / 1000:.3f} ms per step "
                  f"x {n} steps) x {n_ranks} ranks, whose steps all shorten",
            recommendation=f"Stage {int(slow_pp)} has more work than the others, which wait for it every "
                           "micro-batch: move layers from it to the other stages (an uneven layer split, e.g. "
                           "MindSpeed --num-layer-list); the first stage also runs the embedding and the last the "
                           "loss/head, so they usually get fewer transformer layers.",
            fix=Fix("config", f"move layers away from pipeline stage {int(slow_pp)}", {"pipeline_stage": int(slow_pp)}),
            confidence=float(ctx.rules["confidence"]["stage_imbalance"]))]

    # ----------------------------------------------------------------------------------------------------
    # communication bottleneck
    # ----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="cluster.comm-bottleneck",
        title="Communication bottleneck: the ranks the others wait for",
        what="For each collective (same op, group and step in every member's communication.json), the ranks "
             "with the least wait arrived last (ties within bottleneck.tie_share of the wait spread or "
             "bottleneck.tie_us); the others' wait beyond it is time spent waiting for them. Sets of "
             "last-arriving ranks are ranked by the median wait they cause, summed over their collectives; "
             "fires from bottleneck.min_share of the mean step per step. Traces what the late ranks did "
             "before: their compute, free, bubble and transmit time in those steps against the median of the "
             "other ranks of the same collectives. Saving: that median wait (what the collective would end "
             "sooner), capped at the late ranks' own excess.",
        why="The time a collective waits is not the waiting ranks' problem: it is set by the last rank to "
            "arrive, and whatever it did before (longer compute, a host stall, its own wait upstream).",
        how_to_fix="Fix the late ranks' cause: see the slow-rank, pipeline-bubble and slow-link findings for "
                   "those ranks.",
        thresholds=("bottleneck", "confidence", "severity"),
        needs=("comm",),
    ))
    def _bottlenecks(self, ctx: AnalysisContext, cluster: Sequence[RankData], ranks: pd.DataFrame,
                     steps: pd.DataFrame, mean_step: float, peers: _Peers | None = None) -> list[Finding]:
        cfg = ctx.rules["bottleneck"]
        peers = peers or _Peers(cluster)
        outside = peers.outside_held()
        coll = collective_table(cluster)
        if outside and len(coll):  # held by a peer outside the input: cluster.late-peer names it
            held = np.array([(_step_key(s), str(o)) in outside for s, o in zip(coll["step"], coll["op"], strict=True)])
            if held.any():
                ctx.note(f"cluster.comm-bottleneck: {len({o for _, o in outside})} collective(s) left to "
                         "cluster.late-peer: their longest sole wait is on a rank outside the input")
                coll = coll[~held]
        if not len(coll) or mean_step <= 0:
            if not len(coll):
                ctx.note("cluster.comm-bottleneck: skipped, no rank has communication.json")
            return []
        sets = last_arrivals(coll, float(cfg["tie_share"]), float(cfg["tie_us"]))
        n_steps = max(1, int(steps["step"].nunique()))
        threshold = float(cfg["min_share"]) * mean_step
        ranked = sorted(sets.items(), key=lambda kv: -kv[1]["delay_us"])
        out = []
        for late, e in ranked[: int(cfg["max_findings"])]:
            if e["delay_us"] / n_steps < threshold:
                continue
            f = self._bottleneck_finding(ctx, late, e, steps, mean_step, n_steps)
            named = peers.links_name(e["top"])
            if named:  # the notify waits of the member ranks name the rank they waited for
                f.evidence["link_waits_name"] = {str(k): v for k, v in sorted(named.items())}
            out.append(f)
        return out

    def _bottleneck_finding(self, ctx: AnalysisContext, late: tuple[int, ...], e: dict[str, Any],
                            steps: pd.DataFrame, mean_step: float, n_steps: int) -> Finding:
        members = e["members"]
        in_steps = steps[steps["step"].isin(e["steps"]) | steps["step"].isna()]
        mine = in_steps[in_steps["rank"].isin(late)]
        peers = in_steps[in_steps["rank"].isin(members - set(late))]
        before = {}
        for reason, col in OWN.items():
            if mine[col].notna().any() and peers[col].notna().any():
                before[reason] = float(mine.groupby("rank")[col].mean().mean() - peers.groupby("rank")[col]
                                       .mean().median())
        cause = max(before, key=lambda k: before[k]) if before else "unknown"
        excess_total = max(0.0, before.get(cause, 0.0)) * len(e["steps"])
        saving = min(e["delay_us"], excess_total) if before else e["delay_us"]
        who = _ranks_text(late)
        stage = _common_index(in_steps, late, "pp")
        where = f" (pipeline stage {stage})" if stage is not None and steps["pp"].nunique() > 1 and len(late) > 1 \
            and set(late) == set(in_steps.loc[in_steps["pp"] == stage, "rank"].dropna().astype(int)) else ""
        rows = [[_i(r.step), str(r.op), str(r.group), round(float(r.delay), 3), round(float(r.most), 3), int(r.n)]
                for r in e["top"].itertuples(index=False)]
        cause_text = {"compute": "computing longer", "free": "idle waiting for its host (free time)",
                      "waiting": "waiting for another pipeline stage (bubble)"}.get(cause, "")
        f = ctx.finding(
            rule="cluster.comm-bottleneck",
            title=f"{who}{where} arrive{'s' if len(late) == 1 else ''} last at {e['collectives']} collective"
                  f"{'s' if e['collectives'] != 1 else ''}: the others wait "
                  f"{e['delay_us'] / n_steps / 1000:.2f} ms per step (median)"
                  + (f"; before, {'it was' if len(late) == 1 else 'they were'} {cause_text} "
                     f"(+{before[cause] / 1000:.2f} ms per step)" if cause_text and before.get(cause, 0) > 0 else ""),
            severity=self._severity(ctx, saving),
            ops=[], evidence={"last_ranks": list(late), "collectives": int(e["collectives"]),
                              "median_wait_caused_us": round(e["delay_us"], 3),
                              "rank_time_waited_us": round(e["waited_us"], 3), "steps": len(e["steps"]),
                              "before": {k: round(v, 3) for k, v in before.items()}, "cause": cause,
                              "source": "communication.json wait times of every member rank; step time split",
                              "table": table(["step", "op", "group", "median_wait_us", "max_wait_us", "ranks"],
                                             rows)},
            estimated_saving_us=saving,
            basis="median wait the last-arriving ranks caused the others, summed over the collectives, capped at "
                  f"their own {cause} excess over the other ranks in those steps",
            recommendation=f"The other ranks wait for {who} in {e['collectives']} collective(s). "
                           + {"compute": "It computes longer than its peers: see its slow-rank finding and "
                                         "balance the work.",
                              "free": "Its device idles waiting for the host: check that rank's data loading and "
                                      "host (slow-rank finding).",
                              "waiting": "It was itself waiting for another pipeline stage: see the "
                                         "pipeline-bubble finding and the previous stage's ranks."}
                           .get(cause, "Look at what it does before these collectives."),
            fix=Fix("code", f"remove the delay of {who}", {"ranks": list(late), "cause": cause}),
            confidence=float(ctx.rules["confidence"]["comm_bottleneck"]))
        if len(late) == 1:
            f.rank = late[0]
        return f

    # ----------------------------------------------------------------------------------------------------
    # late peers outside the input
    # ----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="cluster.late-peer",
        title="A rank outside the analysis holds the collectives",
        what="Where a rank's communication tasks record their links (HCCL tasks of a Level1+ trace, the .db "
             "COMMUNICATION_TASK_INFO, hccl_*.json), its time model keeps the notify waits inside its uncovered "
             "communication per peer; each instant of a collective is held by the peers waited on then. For "
             "each rank, the peer that held its collectives the longest is named when the input does not hold "
             "it (peers and input ranks matched by their numbers within the group: a rank's own number is the "
             "src of its links), with the peers outside the input whose waits cover "
             "{late_peer.co_late_share} of its own, when the uncovered time they alone hold reaches "
             "{late_peer.min_share} of the rank's window; findings of several ranks on the same peers are one. "
             "Saving: {late_peer.recoverable} of that time per rank, attributed to the collectives it held. A "
             "late peer the input holds is cluster.comm-bottleneck's, whose collectives leave out those a peer "
             "outside the input holds. Without link waits, reports (info, no saving) a group whose members are "
             "not all in the input and its slowest links by transit time when the ranks' wait and idle time "
             "reach {late_peer.min_share} of the cluster window: no wait is attributed to a link.",
        why="A collective ends when its last member arrives; when that member was not profiled, nothing in the "
            "analysis says why it was late, and the ranks that were profiled only show the wait.",
        how_to_fix="Profile every rank of the job (or at least the late one) at a level whose HCCL tasks record "
                   "their links, and analyze them together.",
        thresholds=("late_peer", "confidence", "severity"),
        needs=("comm",),
        explains=("overall.uncovered-communication",),
    ))
    def _late_peers(self, ctx: AnalysisContext, cluster: Sequence[RankData],
                    peers: _Peers | None = None) -> list[Finding]:
        cfg = ctx.rules["late_peer"]
        peers = peers or _Peers(cluster)
        out = []
        for rd, waits in zip(cluster, peers.waits, strict=True):
            if waits is None:
                continue
            top = peer_totals(waits).iloc[0]
            inside = peers.input_ranks(str(top.group))
            if int(top.peer) in inside or rd.time is None:  # a late rank of the input: cluster.comm-bottleneck's
                continue
            named = rd.comm_op_names
            f = late_peer_finding(ctx, "cluster.late-peer", cfg, waits, top, float(rd.time.window_us),
                                  "this analysis", float(cfg["confidence"]), rd.rank, exclude=inside, named=named)
            if f is not None:
                f.rank = rd.rank
                out.append(f)
        if out or any(w is not None for w in peers.waits):
            return out
        return self._group_coverage(ctx, cluster, cfg, peers)

    def _group_coverage(self, ctx: AnalysisContext, cluster: Sequence[RankData],
                        cfg: Mapping[str, Any], peers: _Peers) -> list[Finding]:
        """No rank's tasks name the links waited on: the group's members outside the input (info)."""
        waiting = sum(float(t.uncovered_by_kind.get("wait", 0.0) + t.uncovered_by_kind.get("idle", 0.0))
                      for t in (rd.time for rd in cluster) if t is not None)
        if self._window <= 0 or waiting < float(cfg["min_share"]) * self._window:
            return []
        matrices = [m for m in peers.matrices() if m is not None]
        if not matrices:
            return []
        profiled: dict[str, set[int]] = {}
        for m in matrices:
            for g, r in own_ranks(None, m).items():
                profiled.setdefault(g, set()).add(r)
        found = group_coverage_finding(ctx, "cluster.late-peer", cfg, matrices, profiled, waiting,
                                       "communication_matrix.json of every rank", "this analysis",
                                       float(ctx.rules["confidence"]["group_coverage"]))
        return [found] if found is not None else []

    # ----------------------------------------------------------------------------------------------------
    # pipeline bubble
    # ----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="cluster.pipeline-bubble",
        title="Pipeline bubble",
        what="Per pipeline stage (PP index from profiler_metadata.json), the mean bubble time per step "
             "(step_trace_time Bubble: waiting for another stage's p2p transfers) over the mean step time. "
             "Fires for a stage at or above pipeline_bubble.max_share and names its ranks whose own bubble "
             "share reaches it. Saving: the stage's bubble above max_share of the step, per step x steps.",
        why="While a stage waits for activations or gradients from its neighbour its devices idle; a stage "
            "with much more bubble than the others waits for a slow or overloaded neighbour stage.",
        how_to_fix="More micro-batches per step (gradient accumulation / num_microbatches) shrink the bubble "
                   "(1F1B bubble share ~ (pp - 1) / (micro-batches + pp - 1)); an interleaved schedule "
                   "(virtual pipeline stages) shrinks it further; balance the layers across stages (the first "
                   "and last stages also carry the embedding and the loss/head).",
        thresholds=("pipeline_bubble", "confidence", "severity"),
        needs=("steps",),
        explains=("overall.uncovered-communication",),
    ))
    def _bubbles(self, ctx: AnalysisContext, ranks: pd.DataFrame, mean_step: float) -> list[Finding]:
        max_share = float(ctx.rules["pipeline_bubble"]["max_share"])
        if mean_step <= 0 or ranks["bubble_us"].isna().all() or ranks["pp"].nunique() < 2:
            return []
        out = []
        for pp, stage in ranks.groupby("pp", sort=True):
            bubble = float(stage["bubble_us"].mean())
            share = bubble / mean_step
            if not np.isfinite(share) or share < max_share:
                continue
            flagged = stage[stage["bubble_us"] / mean_step >= max_share]
            n = int(stage["steps"].max())
            per_step = max(0.0, bubble - max_share * mean_step)
            others = ranks[ranks["pp"] != pp]["bubble_us"]
            rows = [[r.label, _r(r.bubble_us), round(float(r.bubble_us) / mean_step, 4)]
                    for r in stage.itertuples(index=False)]
            out.append(ctx.finding(
                rule="cluster.pipeline-bubble",
                title=f"Pipeline stage {int(pp)} waits {share:.0%} of each step in bubbles ({bubble / 1000:.2f} ms; "
                      f"other stages {float(others.mean()) / 1000:.2f} ms)",
                severity=self._severity(ctx, per_step * n * len(stage)),
                ops=[], evidence={"pipeline_stage": int(pp), "ranks": [int(r) for r in flagged["rank"].dropna()],
                                  "bubble_per_step_us": round(bubble, 3), "share": round(share, 4),
                                  "other_stages_bubble_us": _r(others.mean()), "mean_step_us": round(mean_step, 3),
                                  "source": "step_trace_time Bubble (time model bubble_us)",
                                  "table": table(["rank", "bubble_us", "share"], rows, limit=64)},
                estimated_saving_us=per_step * n * len(stage),
                basis=f"the stage's bubble above {max_share:.0%} of the step ({per_step / 1000:.3f} ms per step x "
                      f"{n} steps x {len(stage)} ranks)",
                recommendation=(
                    f"Stage {int(pp)} spends {share:.0%} of the step waiting for p2p transfers from its neighbour "
                    "stages. If every stage shows it, raise the number of micro-batches per step (1F1B bubble "
                    "share is about (pp - 1) / (micro-batches + pp - 1)) or use an interleaved schedule (virtual "
                    "pipeline stages); if this stage stands out, the stage before it is slower: move layers away "
                    "from it (the first and last stages also carry the embedding and the loss/head)."),
                fix=Fix("config", "more micro-batches or an interleaved pipeline schedule",
                        {"pipeline_stage": int(pp)}),
                confidence=float(ctx.rules["confidence"]["pipeline_bubble"])))
        return out

    # ----------------------------------------------------------------------------------------------------
    # slow links
    # ----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="cluster.slow-link",
        title="Slow link",
        what="Per link (communication group, src -> dst, transport; every rank's communication_matrix.json), "
             "only its transfers large enough to reach the link's bandwidth: the single ops the matrix details "
             "(top / middle / bottom entries) whose Large Packet Ratio on that transport in the rank's "
             "communication.json reaches slow_link.min_large_packet_ratio (msprof's share of packets at or "
             "above the transport's message-size threshold), else whose own size reaches "
             "slow_link.min_message_mb. A link is slow below slow_link.max_bandwidth_ratio x the median of its "
             "transport's judged links, when there are at least min_links of them. Saving: the slow links' "
             "transit time on those transfers beyond their size at the median bandwidth.",
        why="A ring or tree collective is as fast as its slowest link; one degraded HCCS/RoCE link slows every "
            "step of every rank in the group. A slow link is one slower than its peers: the bandwidth of a small "
            "transfer is set by latency (a few MB over HCCS reads as half the link rate on a healthy link), so "
            "small transfers say nothing about the link and are not judged (the report notes the links left "
            "out). Links that are all alike are the transport-bandwidth rule's matter, not this one's.",
        how_to_fix="Check the link's hardware and configuration (hccn_tool link status and error counters, "
                   "optics, switch port, PFC/ECN) and the device placement of the two ranks.",
        thresholds=("slow_link", "confidence", "severity"),
        needs=("comm",),
    ))
    @rule(RuleDoc(
        id="cluster.transport-bandwidth",
        title="Transport below its nominal bandwidth",
        what="Reports (info, no saving, low confidence) a transport whose links, on transfers large enough to "
             "reach bandwidth (as for slow-link) and leaving out slow links, have a median below "
             "slow_link.max_bandwidth_ratio x the nominal bandwidth for the chip (slow_link.expected_gbps: "
             "msprof's HCCL analysis standard bandwidths).",
        why="When every link of a transport is equally below a nominal figure, no link is slow: an engineer "
            "expects no slow-link finding, since no link is worse than the others and the nominal figure is "
            "an assumption (it depends on the server's topology, the HCCL algorithm and concurrent traffic). "
            "It is still worth knowing, so it is said once, as information, without a saving that would move "
            "the score.",
        how_to_fix="Measure the achievable bandwidth (hccl_test with the same message sizes and ranks); if it "
                   "is higher, look at HCCL_ALGO, HCCL_BUFFSIZE and other traffic on the links.",
        thresholds=("slow_link", "confidence"),
        needs=("comm",),
    ))
    def _slow_links(self, ctx: AnalysisContext, cluster: Sequence[RankData], mean_step: float) -> list[Finding]:
        cfg = ctx.rules["slow_link"]
        links = link_table(cluster, cfg["skip_transports"])
        if not len(links):
            ctx.note("cluster.slow-link: skipped, no rank has a communication matrix")
            return []
        min_msg = {str(k): float(v) for k, v in cfg["min_message_mb"].items()}
        min_ratio = float(cfg["min_large_packet_ratio"])
        links = large_transfers(links, min_msg, min_ratio)
        expected = expected_bandwidth(ctx.rules, ctx.platform.get("soc"))
        ratio = float(cfg["max_bandwidth_ratio"])
        min_links = int(cfg["min_links"])
        out = []
        n_steps = max(1, max((len(st) if isinstance(st, pd.DataFrame) else 1) for st in (rd.step_time for rd in cluster)))
        for transport, grp in links.groupby(links["transport"].astype(str), sort=True):
            judged = grp[grp["large_transfers"] > 0]
            if len(judged) < len(grp):
                ctx.note(f"cluster.slow-link: {len(grp) - len(judged)} of {len(grp)} {transport} link(s) not judged: "
                         f"no transfer large enough to reach the link's bandwidth (op Large Packet Ratio >= "
                         f"{min_ratio:g}, else >= {_size_floor(min_msg, transport):g} "
                         "MB per op); small transfers are latency-bound")
            if not len(judged):
                continue
            median = float(judged["large_gbps"].median())
            exp = expected.get(transport)
            if len(judged) >= min_links:
                slow = judged[judged["large_gbps"] < ratio * median]
                if len(slow):
                    out.append(self._link_finding(ctx, transport, slow, median, ratio, exp, mean_step, n_steps,
                                                  len(judged)))
            peers = judged[judged["large_gbps"] >= ratio * median] if len(judged) >= min_links else judged
            if exp and len(peers) and float(peers["large_gbps"].median()) < ratio * exp:
                out.append(self._transport_finding(ctx, transport, peers, float(peers["large_gbps"].median()), exp,
                                                   ratio))
        return out

    def _link_finding(self, ctx: AnalysisContext, transport: str, slow: pd.DataFrame, ref: float, ratio: float,
                      exp: float | None, mean_step: float, n_steps: int, total: int) -> Finding:
        slow = slow.sort_values("large_gbps")
        per = (slow["large_transit_us"] - slow["large_size_mb"] / ref * 1000.0).clip(lower=0.0)
        saving = float(per.sum())
        worst = slow.iloc[0]
        name = _link_name(worst)
        evidence = {"transport": transport, "reference_gbps": round(ref, 3), "reference": "median",
                    "median_gbps": round(ref, 3), "links_compared": total, "ratio": ratio,
                    "expected_gbps": exp, "expected_source": _expected_source(exp),
                    "soc": ctx.platform.get("soc"),
                    "links": _link_rows(slow),
                    "source": "communication_matrix.json of every rank (single-op transfers large enough to reach "
                              "bandwidth, over the profiled steps) and communication.json Large Packet Ratio",
                    "table": _link_table(slow)}
        title = (f"Slow {transport} link {name}: {float(worst['large_gbps']):.1f} GB/s on large transfers vs a median "
                 f"{ref:.1f} GB/s over {total} links" + (f" ({len(slow)} slow links)" if len(slow) > 1 else ""))
        rec = (f"The {transport} link {name} runs at {float(worst['large_gbps']) / ref:.0%} of its peers on transfers "
               "large enough to reach bandwidth: check its hardware and configuration (hccn_tool -i <device> -link -g "
               "and -stat -g error counters, optics, switch port, PFC/ECN settings) and the placement of the two "
               "ranks.")
        return ctx.finding(
            rule="cluster.slow-link", title=title,
            severity=self._severity(ctx, saving),
            ops=[], evidence=evidence, estimated_saving_us=saving,
            basis=f"transit time of the slow links' large transfers beyond their size at the median {transport} "
                  f"bandwidth of the other links ({ref:.1f} GB/s), over the profiled steps",
            recommendation=rec,
            fix=Fix("config", f"inspect link {name}", {"link": name, "transport": transport}),
            confidence=float(ctx.rules["confidence"]["slow_link"]))

    def _transport_finding(self, ctx: AnalysisContext, transport: str, links: pd.DataFrame, median: float,
                           exp: float, ratio: float) -> Finding:
        soc = ctx.platform.get("soc") or "this chip"
        evidence = {"transport": transport, "median_gbps": round(median, 3), "expected_gbps": exp,
                    "expected_source": _expected_source(exp), "ratio": ratio, "soc": ctx.platform.get("soc"),
                    "links_judged": len(links), "links": _link_rows(links),
                    "source": "communication_matrix.json of every rank (single-op transfers large enough to reach "
                              "bandwidth) and communication.json Large Packet Ratio",
                    "table": _link_table(links)}
        return ctx.finding(
            rule="cluster.transport-bandwidth",
            title=(f"{transport} links run at {median:.1f} GB/s on large transfers, {median / exp:.0%} of the nominal "
                   f"{exp:g} GB/s for {soc} ({len(links)} link(s), none slower than its peers)"),
            severity="info", ops=[], evidence=evidence, estimated_saving_us=0.0,
            basis="no saving claimed: the nominal figure is an assumption, not a measurement of this system",
            recommendation=(f"Every {transport} link runs at about the same bandwidth, below msprof's nominal figure: "
                            "not one bad link. Measure what this system reaches (hccl_test all_reduce_test with the "
                            "same message sizes and ranks); if it reaches more, look at the HCCL algorithm "
                            "(HCCL_ALGO), the buffer size (HCCL_BUFFSIZE) and other traffic on the same links during "
                            "the collectives."),
            fix=Fix("config", f"measure the achievable {transport} bandwidth", {"transport": transport}),
            confidence=float(ctx.rules["confidence"]["transport_bandwidth"]))


    # ----------------------------------------------------------------------------------------------------
    # overview
    # ----------------------------------------------------------------------------------------------------
    @staticmethod
    def _rank_rows(ranks: pd.DataFrame, limit: int = 64) -> dict[str, Any]:
        cols = ["rank", "dp", "pp", "tp", "steps", "compute_us", "uncovered_comm_us", "wait_us", "transmit_us",
                "free_us", "bubble_us", "step_us", "own_us", "source"]
        rows = [[r.label, _i(r.dp), _i(r.pp), _i(r.tp), int(r.steps), _r(r.compute_us), _r(r.uncovered_comm_us),
                 _r(r.wait_us), _r(r.transmit_us), _r(r.free_us), _r(r.bubble_us), _r(r.step_us), _r(r.own_us),
                 r.source] for r in ranks.itertuples(index=False)]
        return table(cols, rows, limit=limit)

    @rule(RuleDoc(
        id="cluster.spread",
        title="Cluster step table and per-rank spread",
        what="Reports (info, no saving) each rank's per-step compute, uncovered communication (wait / "
             "transmit / idle), overlapped communication, free, bubble and preparing time with its DP / PP / TP "
             "indices, the same per pipeline stage, and the spread of each across ranks: the cluster overview "
             "(the report's cluster section).",
        why="Shows at a glance whether ranks and stages are balanced and which component differs.",
        how_to_fix="See the slow-rank, comm-bottleneck, pipeline-bubble and slow-link findings.",
        thresholds=("confidence",),
        needs=("steps",),
    ))
    def _spread(self, ctx: AnalysisContext, ranks: pd.DataFrame, steps: pd.DataFrame, stages: pd.DataFrame,
                mean_step: float, slow: list[tuple[dict[str, Any], Finding]],
                cluster: Sequence[RankData]) -> Finding:
        spread = {}
        for key, c in (("compute_us", "compute_us"), ("communication_us", "uncovered_comm_us"), ("wait_us", "wait_us"),
                       ("free_us", "free_us"), ("bubble_us", "bubble_us"), ("total_us", "step_us")):
            vals = ranks[c]
            if vals.notna().any():
                spread[key] = {
                    "min_us": _r(vals.min()), "max_us": _r(vals.max()), "spread_us": _r(vals.max() - vals.min()),
                    "spread_share": round(float((vals.max() - vals.min()) / mean_step), 4) if mean_step else 0.0}
        names = {"compute_us": "compute", "communication_us": "uncovered communication", "free_us": "free"}
        parts = [f"{names[k]} {v['min_us'] / 1000:.1f}-{v['max_us'] / 1000:.1f} ms"
                 for k, v in spread.items() if k in names]
        section = self._section(ranks, steps, stages, spread, slow, cluster)
        return ctx.finding(
            rule="cluster.spread", title=f"{len(ranks)} ranks, per step: " + ", ".join(parts), severity="info",
            ops=[], evidence={"ranks": int(len(ranks)), "mean_step_us": mean_step, "spread": spread,
                              "table": self._rank_rows(ranks), "cluster_section": section},
            estimated_saving_us=0.0,
            basis="overview only; savings are in the slow-rank, comm-bottleneck, pipeline-bubble and slow-link "
                  "findings",
            recommendation="Compare the ranks' compute, free and bubble time: in synchronous training the rank with "
                           "the most of its own time sets the step, the others wait in communication.",
            confidence=float(ctx.rules["confidence"]["spread"]))

    @staticmethod
    def _section(ranks: pd.DataFrame, steps: pd.DataFrame, stages: pd.DataFrame, spread: dict[str, Any],
                 slow: list[tuple[dict[str, Any], Finding]], cluster: Sequence[RankData]) -> dict[str, Any]:
        """The report's ``cluster`` section (keys of schema version 1 kept: ranks, slowest_rank, slowest_reason,
        slowest_excess_us, spread)."""
        rows = []
        for r in ranks.itertuples(index=False):
            n = int(r.steps)
            rows.append({"rank": _i(r.rank), "dp": _i(r.dp), "pp": _i(r.pp), "tp": _i(r.tp), "steps": n,
                         "compute_us": _r(r.compute_us * n), "communication_us": _r(r.uncovered_comm_us * n),
                         "free_us": _r(r.free_us * n), "total_us": _r(r.step_us * n),
                         "own_per_step_us": _r(r.own_us), "source": r.source})
        top = slow[0][0] if slow else _slowest_overall(ranks)
        step_rows = [{"step": _i(r.step), "rank": _i(r.rank), "dp": _i(r.dp), "pp": _i(r.pp), "tp": _i(r.tp),
                      **{c: _r(getattr(r, c)) for c in COMPONENTS}} for r in steps.itertuples(index=False)]
        stage_rows = [{"step": _i(r["step"]), "pp": _i(r["pp"]), "ranks": r["ranks"],
                       **{f"{c}_{k}": _r(r[f"{c}_{k}"]) for c in COMPONENTS for k in ("mean", "max")}}
                      for _, r in stages.iterrows()]
        sources = sorted({str((rd.groups or {}).get("source")) for rd in cluster if (rd.groups or {}).get("source")})
        sizes = {d: int(ranks[d].max()) + 1 for d in DIMS if ranks[d].notna().any()}
        return {
            "ranks": rows,
            "slowest_rank": _i(top["rank"]) if _i(top["rank"]) is not None else 0,
            "slowest_reason": str(top["reason"]),
            "slowest_excess_us": _r(top["excess_us"]) or 0.0,
            "spread": {k: {"min": v["min_us"], "max": v["max_us"], "spread_us": v["spread_us"]}
                       for k, v in spread.items()},
            "step_table": step_rows,
            "stage_table": stage_rows,
            "parallel": {"sizes": sizes, "source": sources[0] if len(sources) == 1 else sources or None},
        }

def _matrix_ranks(links: pd.DataFrame | None) -> pd.DataFrame | None:
    """A rank's per-link sums (``cluster_data.LINK_COLUMNS``) with the matrix's column names (``src_rank``,
    ``dst_rank``), as the toolkit's group readers take them."""
    if not isinstance(links, pd.DataFrame) or not len(links) or not {"src", "dst"} <= set(links.columns):
        return None
    out = links.copy(deep=False)  # renamed without copying the data (asked of every rank; issue 33)
    out.columns = ["src_rank" if c == "src" else "dst_rank" if c == "dst" else c for c in links.columns]
    return out


class _Peers:
    """The ranks' link waits and own numbers per group, read once per analysis: the late-peer and bottleneck rules
    ask for them per rank and per collective (read each time, that was quadratic in the ranks; issue 33)."""

    def __init__(self, cluster: Sequence[RankData]) -> None:
        self.cluster = list(cluster)
        self.waits = [window_waits(rd.time) for rd in self.cluster]
        self._owns: list[dict[str, int]] | None = None
        self._heads: dict[tuple[float, str], tuple[str, int]] | None = None
        self._numbers: dict[str, list[int | None]] = {}
        self._matrices: list[pd.DataFrame | None] | None = None

    def matrices(self) -> list[pd.DataFrame | None]:
        """Per rank: its links with the matrix's column names (:func:`_matrix_ranks`), or None."""
        if self._matrices is None:
            self._matrices = [_matrix_ranks(rd.communication_matrix) for rd in self.cluster]
        return self._matrices

    def heads(self) -> dict[tuple[float, str], tuple[str, int]]:
        """Per collective (step, op): the (group, peer) that held it the longest, summed over the ranks that waited
        in it (``toolkit.peers.op_peers`` of each rank's link waits)."""
        if self._heads is None:
            self._heads = _collective_heads(self.waits)
        return self._heads

    def _numbers_in(self, group: str) -> list[int | None]:
        """Per rank: its number within ``group`` -- the src of its links in that group, else the one number its
        links give in every group, else its global rank (None without one)."""
        if group not in self._numbers:
            if self._owns is None:
                self._owns = [own_ranks(w, m) for w, m in zip(self.waits, self.matrices(), strict=True)]
            out: list[int | None] = []
            for own, rd in zip(self._owns, self.cluster, strict=True):
                if group in own:
                    out.append(own[group])
                elif len(set(own.values())) == 1:
                    out.append(next(iter(own.values())))
                else:
                    out.append(int(rd.rank) if rd.rank is not None else None)
            self._numbers[group] = out
        return self._numbers[group]

    def input_ranks(self, group: str) -> set[int]:
        """The numbers within ``group`` of the input's ranks."""
        return {n for n in self._numbers_in(group) if n is not None}

    def global_rank(self, group: str, local: int) -> int | None:
        """The input rank whose number within ``group`` is ``local`` (None when no input rank has it)."""
        for n, rd in zip(self._numbers_in(group), self.cluster, strict=True):
            if rd.rank is not None and n == local:
                return int(rd.rank)
        return None

    def links_name(self, top: pd.DataFrame) -> dict[int, int]:
        """For the collectives (step, op) of ``top``: per input rank (global), how many of them it held the
        longest, by the member ranks' notify waits -- the rank the links say arrived last."""
        wanted = {(_step_key(s), str(o)) for s, o in zip(top["step"], top["op"], strict=True)}
        out: dict[int, int] = {}
        for key, (group, peer) in self.heads().items():
            rank = self.global_rank(group, peer) if key in wanted else None
            if rank is not None:
                out[rank] = out.get(rank, 0) + 1
        return out

    def outside_held(self) -> set[tuple[float, str]]:
        """(step, op) of the collectives held the longest by a peer outside the input."""
        return {key for key, (group, peer) in self.heads().items() if peer not in self.input_ranks(group)}


def _collective_heads(waits: Sequence[pd.DataFrame | None]) -> dict[tuple[float, str], tuple[str, int]]:
    """Per collective (step, op): the (group, peer) that held it the longest, summed over the ranks' link waits."""
    frames = [f for f in (op_peers(w) for w in waits if w is not None) if len(f)]
    if not frames:
        return {}
    per = pd.concat(frames, ignore_index=True)
    held = per.groupby(["step", "op", "group", "peer"], sort=False)["held_us"].sum().reset_index()
    held = held[held["held_us"] > 0]
    heads = held.loc[held.groupby(["step", "op"], sort=False)["held_us"].idxmax()]
    return {(_step_key(r.step), str(r.op)): (str(r.group), int(r.peer)) for r in heads.itertuples(index=False)}


def _step_key(v: Any) -> float:
    """A step id as a set key (a missing step is -1: NaN never equals itself)."""
    try:
        f = float(v)
    except (TypeError, ValueError):
        return -1.0
    return f if np.isfinite(f) else -1.0


def _expected_source(exp: float | None) -> str | None:
    if not exp:
        return None
    return ("msprof HCCL analysis standard bandwidth for the chip (rules/cluster.yaml slow_link.expected_gbps): a "
            "nominal figure, not measured on this system")


def _link_rows(links: pd.DataFrame, limit: int = 64) -> list[dict[str, Any]]:
    return [{"group": str(r["group"]), "src": _i(r["src"]), "dst": _i(r["dst"]), "src_rank": _i(r["src_rank"]),
             "dst_rank": _i(r["dst_rank"]), "bandwidth_gbps": round(float(r["large_gbps"]), 3),
             "large_transfers": int(r["large_transfers"]), "transfers": int(r["transfers_seen"])}
            for _, r in links.head(limit).iterrows()]


def _link_table(links: pd.DataFrame) -> dict[str, Any]:
    rows = [[_link_name(r), r["transport"], round(float(r["large_gbps"]), 3), round(float(r["large_size_mb"]), 3),
             round(float(r["large_transit_us"]), 3), f"{int(r['large_transfers'])}/{int(r['transfers_seen'])}",
             round(float(r["bandwidth_gbps"]), 3), _i(r["reporter"])] for _, r in links.iterrows()]
    return table(["link", "transport", "large_gbps", "large_mb", "large_transit_us", "large/all transfers",
                  "all_gbps", "reported_by"], rows)


_CAUSE_RULES = {"compute": ("cluster.slow-rank", "cluster.stage-imbalance"), "free": ("cluster.slow-rank",),
                "waiting": ("cluster.slow-rank", "cluster.pipeline-bubble")}


def _explained(bottlenecks: list[Finding], causes: list[Finding]) -> list[Finding]:
    """A bottleneck whose late ranks and cause another finding reports (the slow rank, its stage's imbalance or
    bubble) is that finding's symptom: it names it in ``evidence["explained_by"]`` and claims no saving of its
    own, so the score counts the time once."""
    for b in bottlenecks:
        late = set(b.evidence.get("last_ranks") or [])
        cause = b.evidence.get("cause")
        by = []
        for f in causes:
            if f.rule not in _CAUSE_RULES.get(str(cause), ()):
                continue
            covered = {f.rank} if f.rule == "cluster.slow-rank" else set(f.evidence.get("ranks") or [])
            if f.rule == "cluster.slow-rank" and f.evidence.get("reason") != cause:
                continue
            if late and late <= covered:
                by.append(f.rule)
        if by:
            b.evidence["explained_by"] = sorted(set(by))
            b.evidence["saving_if_unexplained_us"] = round(b.estimated_saving_us, 3)
            b.estimated_saving_us = 0.0
            b.basis = f"symptom of the {', '.join(sorted(set(by)))} finding, whose saving counts this time once"
    return bottlenecks


def _slowest_overall(ranks: pd.DataFrame) -> dict[str, Any]:
    """The rank with the most own time per step over all ranks, and the component furthest above the others'
    median (the cluster section's slowest rank when no stage has a slow rank to report)."""
    own = ranks["own_us"].fillna(ranks["compute_us"])
    i = int(own.idxmax())
    others = ranks.drop(index=i)
    excess = {reason: float(ranks.at[i, col] - others[col].median()) for reason, col in OWN.items()
              if pd.notna(ranks.at[i, col]) and others[col].notna().any()}
    reason = max(excess, key=lambda k: excess[k]) if excess else "compute"
    return {"rank": ranks.at[i, "rank"], "reason": reason, "excess_us": max(0.0, excess.get(reason, 0.0))}


def _ranks_text(ranks: Sequence[int]) -> str:
    if len(ranks) == 1:
        return f"rank {ranks[0]}"
    if len(ranks) > 2 and list(ranks) == list(range(ranks[0], ranks[-1] + 1)):
        return f"ranks {ranks[0]}-{ranks[-1]}"
    shown = ", ".join(str(r) for r in ranks[:8])
    return f"ranks {shown}" + (f" (+{len(ranks) - 8} more)" if len(ranks) > 8 else "")


def _common_index(steps: pd.DataFrame, ranks: Sequence[int], dim: str) -> int | None:
    vals = steps.loc[steps["rank"].isin(ranks), dim].dropna().unique()
    return int(vals[0]) if len(vals) == 1 else None


def _link_name(r: Any) -> str:
    if r.get("src_rank") is not None and pd.notna(r.get("src_rank")) and r.get("dst_rank") is not None \
            and pd.notna(r.get("dst_rank")):
        return f"rank {int(r['src_rank'])}->rank {int(r['dst_rank'])} (group {r['group']})"
    return f"{_i(r['src'])}->{_i(r['dst'])} (group {r['group']}, ranks within the group)"


def _i(v: Any) -> int | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(f) else int(f)


def _r(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return None if np.isnan(f) else round(f, 3)


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [ClusterKB]
