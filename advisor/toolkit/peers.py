"""The peers of a rank's collectives: who is in its communication groups, which of them the analysis holds, and
which one the rank's collectives wait for.

A collective ends when its last member arrives; a rank that arrived earlier shows the difference as notify waits
on the link to the late member. Where the communication tasks record their links (Level1+ HCCL tasks, the ``.db``
``COMMUNICATION_TASK_INFO``), the time model keeps the parts of those waits inside the uncovered communication
(``TimeModel.link_waits``, ``advisor.timemodel.LINK_WAIT_COLUMNS``). Per collective, each instant of it is held by
the peers being waited on then: a peer's *held* time shares each instant among them, its *sole* time is when it
alone is waited on. The late peer is the one that holds the most; peers whose waits cover most of its wait arrived
about as late (``co_late_share``) and are late with it; what they alone hold -- no other peer waited on -- is what
the collectives would end sooner had they arrived with the next latest peer. Ranks here are numbered within their
communication group, as the profiler records them (``src``/``dst`` of a task, the ``src-dst`` keys of
communication_matrix.json); a rank's own number is the ``src`` of its links.

Where only communication_matrix.json (or ``CommAnalyzerMatrix``) exists, the group's members are known but no wait
is attributed to a link: :func:`slowest_links` ranks its links by transit time, nothing more.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from advisor.common.util import finite_float
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext
from advisor.toolkit.advice import family
from advisor.toolkit.common import pct, severity_for
from advisor.toolkit.time import OTHER_COMM_KEY

PEER_COLUMNS = ["group", "peer", "src", "held_us", "sole_us", "uncovered_us", "ops", "op", "step", "wait_us",
                "op_held_us"]
"""Per (group, peer) of one rank, over the collectives of the split steps: the uncovered time it held (shared with
the peers waited on at the same instants), held alone, and waited on at all; how many collectives waited on it;
and the collective it held the longest (op, step, this rank's wait on the link there, the time it held it)."""

_OP_KEYS = ["step", "op", "group"]


def _group_key(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)


def _prepared(link_waits: pd.DataFrame) -> pd.DataFrame:
    return link_waits.assign(group=link_waits["group"].map(_group_key),
                             op=link_waits["op"].astype(object).where(link_waits["op"].notna(), OTHER_COMM_KEY),
                             step=link_waits["step"].astype("float64").fillna(-1.0))


def _coverage(op_rows: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """One collective's uncovered waits as (peers, segment lengths scaled as the split, peers x segments coverage):
    the instants between consecutive part edges, and which peers are waited on in each."""
    parts = op_rows[op_rows["start_us"].notna() & (op_rows["end_us"] > op_rows["start_us"])]
    peers = np.unique(op_rows["peer"].to_numpy(dtype="float64"))
    if not len(parts):
        return peers, np.zeros(0), np.zeros((len(peers), 0), dtype=bool)
    edges = np.unique(np.r_[parts["start_us"].to_numpy(), parts["end_us"].to_numpy()])
    mid = (edges[:-1] + edges[1:]) / 2.0
    cover = np.zeros((len(peers), len(mid)), dtype=bool)
    who = parts["peer"].to_numpy(dtype="float64")
    for i, p in enumerate(peers):
        mine = parts[who == p]
        if not len(mine):  # every wait on this peer hidden behind compute
            continue
        s, e = mine["start_us"].to_numpy(), mine["end_us"].to_numpy()
        order = np.argsort(s)
        s, e = s[order], np.maximum.accumulate(e[order])
        k = np.searchsorted(s, mid, side="right") - 1
        cover[i] = (k >= 0) & (mid < e[np.maximum(k, 0)])
    scale = float(parts["scale"].iloc[0])
    return peers, np.diff(edges) * scale, cover


def _raw_wait(op_rows: pd.DataFrame, peer: float) -> float:
    """This rank's wait on the link to ``peer`` in one collective: the union of its wait tasks, hidden or not."""
    t = op_rows[op_rows["peer"] == peer].drop_duplicates("task")
    s = np.sort(t["task_start_us"].to_numpy())
    e = t["task_end_us"].to_numpy()[np.argsort(t["task_start_us"].to_numpy())]
    total, cur_s, cur_e = 0.0, None, None
    for a, b in zip(s, e, strict=True):
        if cur_e is None or a > cur_e:
            total += 0.0 if cur_e is None else cur_e - cur_s
            cur_s, cur_e = a, b
        else:
            cur_e = max(cur_e, b)
    return total + (0.0 if cur_e is None else cur_e - cur_s)


def window_waits(time: Any) -> pd.DataFrame | None:
    """The time model's link waits (``TimeModel.link_waits``) of the steps in its analyzed window only (a step the
    window leaves out -- a warm-up step -- claims nothing); None when no wait records its link."""
    waits = getattr(time, "link_waits", None) if time is not None else None
    if waits is None or not len(waits):
        return None
    steps = {-1.0 if s.step is None else float(s.step) for s in time.steps}
    kept = waits[waits["step"].astype("float64").fillna(-1.0).isin(steps)]
    return kept if len(kept) else None


def op_peers(link_waits: pd.DataFrame | None) -> pd.DataFrame:
    """Per collective (step, op, group) and peer: held / sole / uncovered time and this rank's wait on the link."""
    cols = [*_OP_KEYS, "peer", "src", "held_us", "sole_us", "uncovered_us", "wait_us"]
    if link_waits is None or not len(link_waits):
        return pd.DataFrame(columns=cols)
    rows = []
    for key, op_rows in _prepared(link_waits).groupby(_OP_KEYS, sort=False):
        peers, length, cover = _coverage(op_rows)
        n = cover.sum(axis=0)
        src = float(op_rows["src"].iloc[0])
        for i, p in enumerate(peers):
            mine = cover[i]
            rows.append([*key, p, src, float((length * mine / np.maximum(n, 1)).sum()),
                         float((length * (mine & (n == 1))).sum()), float((length * mine).sum()), _raw_wait(op_rows, p)])
    return pd.DataFrame(rows, columns=cols)


def peer_totals(link_waits: pd.DataFrame | None) -> pd.DataFrame:
    """``TimeModel.link_waits`` -> one row per (group, peer) (``PEER_COLUMNS``), the peer that held the collectives
    the longest first."""
    per = op_peers(link_waits)
    if not len(per):
        return pd.DataFrame(columns=PEER_COLUMNS)
    keys = ["group", "peer"]
    sums = per.groupby(keys, sort=False).agg(src=("src", "first"), held_us=("held_us", "sum"),
                                              sole_us=("sole_us", "sum"), uncovered_us=("uncovered_us", "sum"),
                                              ops=("op", "size"))
    worst = per.loc[per.groupby(keys, sort=False)["held_us"].idxmax()].set_index(keys)
    out = sums.join(worst[["op", "step", "wait_us", "held_us"]].rename(columns={"held_us": "op_held_us"}))
    out = out.reset_index().sort_values(["held_us", "uncovered_us"], ascending=False, kind="stable")
    return out[PEER_COLUMNS].reset_index(drop=True)


def late_set(link_waits: pd.DataFrame, group: str, peer: float, co_late_share: float,
             exclude: Iterable[float] = ()) -> tuple[list[int], dict[str, float]]:
    """The peers late with ``peer`` in ``group`` (their uncovered waits overlap at least ``co_late_share`` of its
    own, over the collectives; none of ``exclude``) and the uncovered time they alone hold, per collective op name
    (no peer outside the set waited on): what the collectives would end sooner had they arrived with the others."""
    lw = _prepared(link_waits)
    lw = lw[lw["group"] == group]
    skip = {float(x) for x in exclude}
    ops = list(lw.groupby(_OP_KEYS, sort=False))
    mine_total, overlap = 0.0, {}
    for _, op_rows in ops:
        peers, length, cover = _coverage(op_rows)
        if peer not in peers:
            continue
        i = int(np.flatnonzero(peers == peer)[0])
        mine_total += float((length * cover[i]).sum())
        for j, q in enumerate(peers):
            if q != peer:
                overlap[q] = overlap.get(q, 0.0) + float((length * (cover[i] & cover[j])).sum())
    members = {float(peer)} | {q for q, v in overlap.items()
                               if mine_total > 0 and v >= co_late_share * mine_total and q not in skip}
    held: dict[str, float] = {}
    for (_, op, _), op_rows in ops:
        peers, length, cover = _coverage(op_rows)
        inside = np.isin(peers, list(members))
        if not inside.any():
            continue
        alone = cover[inside].any(axis=0) & ~cover[~inside].any(axis=0)
        v = float((length * alone).sum())
        if v > 0:
            held[str(op)] = held.get(str(op), 0.0) + v
    return sorted(int(m) for m in members), held


def members_from_waits(link_waits: pd.DataFrame | None) -> dict[str, set[int]]:
    """Per group: the ranks its links name (this rank and every peer it waited on)."""
    if link_waits is None or not len(link_waits):
        return {}
    out: dict[str, set[int]] = {}
    for g, src, peer in zip(link_waits["group"].map(_group_key), link_waits["src"], link_waits["peer"], strict=True):
        members = out.setdefault(g, set())
        members.update(int(r) for r in (src, peer) if np.isfinite(r))
    return out


def own_ranks(link_waits: pd.DataFrame | None, matrix: pd.DataFrame | None) -> dict[str, int]:
    """Per group: this rank's number in it (the ``src`` of its own links: waits first, else the matrix)."""
    out: dict[str, int] = {}
    for frame, col in ((matrix, "src_rank"), (link_waits, "src")):
        if frame is None or not len(frame) or col not in frame.columns:
            continue
        # plain Python over the rows: a rank's links are a few dozen, and the cluster knowledge base asks for every
        # rank (a groupby and a mode per group cost ~2 ms a rank; issue 33)
        counts: dict[str, Counter[float]] = {}
        for g, src in zip(frame["group"], _floats(frame[col]), strict=True):
            seen = counts.setdefault(_group_key(g), Counter())
            if src == src:
                seen[float(src)] += 1
        for g, seen in counts.items():
            if seen:
                most = max(seen.values())
                out[g] = int(min(v for v, n in seen.items() if n == most))  # the mode; the smallest of ties
    return out


def _floats(values: pd.Series) -> np.ndarray:
    """A column of rank numbers as floats, missing ones NaN (whatever the dtype: float, Int64, object)."""
    if values.dtype == np.float64:
        return values.to_numpy()
    return pd.to_numeric(values, errors="coerce").astype("float64").to_numpy()


def members_from_matrix(matrix: pd.DataFrame | None) -> dict[str, set[int]]:
    """Per group: the ranks of the ``src-dst`` link keys of communication_matrix.json / ``CommAnalyzerMatrix``."""
    if matrix is None or not len(matrix) or not {"src_rank", "dst_rank"} <= set(matrix.columns):
        return {}
    out: dict[str, set[int]] = {}
    for g, src, dst in zip(matrix["group"], _floats(matrix["src_rank"]),
                           _floats(matrix["dst_rank"]), strict=True):
        out.setdefault(_group_key(g), set()).update(int(r) for r in (src, dst) if 0 <= r < 2 ** 31)
    return out


def slowest_links(matrix: pd.DataFrame | None, limit: int) -> pd.DataFrame:
    """Links of each group by their total transit time over the profile, slowest first: group, src, dst, transport,
    size_mb, transit_us, bandwidth_gbps (the matrix's ``total`` entries where it has them, else its per-op entries
    summed; the rank's own LOCAL copy left out)."""
    cols = ["group", "src", "dst", "transport", "size_mb", "transit_us", "bandwidth_gbps"]
    if matrix is None or not len(matrix):
        return pd.DataFrame(columns=cols)
    stat = matrix["stat"].astype(object) if "stat" in matrix.columns else pd.Series(None, index=matrix.index)
    rows = matrix[stat == "total"] if (stat == "total").any() else matrix[stat.isna()]
    rows = rows[(rows["src_rank"] != rows["dst_rank"]) & (rows["transit_us"] > 0)]
    if not len(rows):
        return pd.DataFrame(columns=cols)
    g = rows.assign(group=rows["group"].map(_group_key), transport=rows["transport"].astype(str)).groupby(
        ["group", "src_rank", "dst_rank", "transport"], sort=False)
    out = g.agg(size_mb=("size_mb", "sum"), transit_us=("transit_us", "sum")).reset_index()
    out = out.rename(columns={"src_rank": "src", "dst_rank": "dst"})
    out["bandwidth_gbps"] = out["size_mb"] / (out["transit_us"] / 1000.0)
    return out.sort_values("transit_us", ascending=False, kind="stable").head(limit)[cols].reset_index(drop=True)


def ranks_text(ranks: Iterable[int]) -> str:
    """``rank 6`` / ``ranks 2-7`` / ``ranks 1, 3, 5``."""
    rs = sorted(set(int(r) for r in ranks))
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs) > 2 and rs == list(range(rs[0], rs[-1] + 1)):
        return f"ranks {rs[0]}-{rs[-1]}"
    shown = ", ".join(str(r) for r in rs[:8])
    return f"ranks {shown}" + (f" (+{len(rs) - 8} more)" if len(rs) > 8 else "")


def profile_all_ranks_advice(family: str) -> str:
    """How to profile every rank of the job, for the run's framework family (``advisor.toolkit.run_context``)."""
    if family == "torch":
        return ("start torch_npu.profiler.profile in every rank's process (not only behind `if rank == 0`), with the "
                "same schedule, experimental_config=torch_npu.profiler._ExperimentalConfig(profiler_level="
                "torch_npu.profiler.ProfilerLevel.Level1) so the HCCL tasks record the ranks of their links, and "
                "on_trace_ready=torch_npu.profiler.tensorboard_trace_handler(<one directory shared by every rank>); "
                "then analyze that directory: the cluster analysis compares the ranks")
    if family == "mindspore":
        return ("start mindspore.Profiler in every rank's process (not only on one rank), each writing into one "
                "shared directory, and analyze that directory: the cluster analysis compares the ranks")
    return ("profile every rank of the job (run the profiler around the launch command that starts all ranks, e.g. "
            "msprof --output=<dir> <launch script>), and analyze the directory holding every rank's profile")


def late_peer_rows(peers: pd.DataFrame, limit: int) -> list[list[Any]]:
    """Evidence rows of :func:`peer_totals`."""
    return [[r.group or None, int(r.peer), int(r.ops), round(float(r.held_us), 3), round(float(r.sole_us), 3),
             round(float(r.uncovered_us), 3), str(r.op), round(float(r.wait_us), 3)]
            for r in peers.head(limit).itertuples(index=False)]


LATE_PEER_TABLE = ["group", "peer", "collectives", "held_us", "held_alone_us", "uncovered_wait_us", "longest_held_op",
                   "wait_on_link_us"]


def _ranks_words(ranks: Sequence[int]) -> str:
    """``rank 6`` / ``rank 2 and rank 3`` (every number after the word rank: a title's quantities are other numbers)."""
    words = [f"rank {r}" for r in ranks]
    return words[0] if len(words) == 1 else ", ".join(words[:-1]) + " and " + words[-1]


def late_peer_finding(ctx: AnalysisContext, rule: str, cfg: Mapping[str, Any], waits: pd.DataFrame,
                      top: Any, window: float, outside: str, confidence: float, rank: int | None,
                      exclude: Iterable[float] = (), named: set[str] | None = None) -> Finding | None:
    """The finding naming the peer one rank's collectives waited for the longest (``top``: the first
    :func:`peer_totals` row) and the peers late with it, none of them in the analysis (``outside``: ``this profile``
    / ``this analysis``; ``exclude``: the analysis's ranks in the group); None below ``cfg["min_share"]`` of the
    window. Its saving is ``cfg["recoverable"]`` of the uncovered time they alone held, attributed to the
    collectives by the names in ``named`` (``toolkit.time.comm_op_names``: the others to the pseudo-op of other
    communication; None: as the tasks name them); it explains the waiting of that rank only
    (``evidence["waiting_ranks"]``, global ``rank``)."""
    group, peer, me = str(top.group), float(top.peer), int(top.src)
    late, held = late_set(waits, group, peer, float(cfg["co_late_share"]), exclude)
    alone = float(sum(held.values()))
    if window <= 0 or alone < float(cfg["min_share"]) * window:
        return None
    recoverable = float(cfg["recoverable"])
    by_op: dict[str, float] = {}
    for op, v in held.items():  # the names the uncovered communication's savings go to, so the score counts it once
        key = op if named is None or op in named else OTHER_COMM_KEY
        by_op[key] = by_op.get(key, 0.0) + v * recoverable
    members = members_from_waits(waits).get(group, {me, int(peer)})
    wait, n_ops, who = float(top.wait_us), len(by_op), _ranks_words(late)
    them = "it" if len(late) == 1 else "them"
    others = [r for r in late if r != int(peer)]
    return ctx.finding(
        rule=rule,
        title=f"Collectives wait for {who} (not in {outside}): {'it' if len(late) == 1 else 'the latest'} arrives "
              f"{wait / 1000:.1f} ms late at {top.op}; {alone / 1000:.1f} ms of uncovered time ({pct(alone / window)} "
              f"of the analyzed time) wait on {them} alone over {n_ops} collective{'s' if n_ops != 1 else ''}",
        severity=severity_for(recoverable * alone / window, ctx.rules["severity"]),
        ops=sorted(by_op, key=lambda k: -by_op[k]),
        evidence={"peer": int(peer), "late_ranks": late, "this_rank": me, "group": group or None,
                  "members": sorted(members), "waiting_ranks": [int(rank)] if rank is not None else [],
                  "held_alone_us": alone, "held_us": float(top.held_us), "uncovered_wait_us": float(top.uncovered_us),
                  "longest_wait_us": wait, "longest_held_op": str(top.op), "longest_held_step": finite_float(top.step),
                  "op_held_us": float(top.op_held_us), "collectives": n_ops,
                  "source": "notify waits per link (src rank / dst rank) of "
                            + ctx.profile.time.sources.get("uncovered_by_kind", "the HCCL task events")
                            + "; ranks numbered within the group",
                  "table": table(LATE_PEER_TABLE, late_peer_rows(peer_totals(waits), int(cfg["links_listed"])))},
        estimated_saving_us=alone * recoverable,
        basis=f"{recoverable:g} (late_peer.recoverable) of the uncovered time rank {me}'s collectives waited on "
              f"{who} alone ({alone / 1000:.2f} ms over {n_ops} collective(s)): what they would end sooner had "
              f"{them} arrived with the next latest peer",
        recommendation=f"Rank {me}'s collectives wait for {who}: at {top.op} rank {me} waited {wait / 1000:.1f} ms on "
                       f"the link to rank {int(peer)}"
                       + (f", and about as long on {_ranks_words(others)}" if others else "")
                       + f". {who[:1].upper() + who[1:]} {'is' if len(late) == 1 else 'are'} not in {outside}, so what "
                       "delayed " + them + " (longer compute, a host stall, data loading, a wait in another group) "
                       "cannot be seen: profile " + them + " -- " + profile_all_ranks_advice(family(ctx)) + ".",
        fix=Fix("code", f"profile {who} with the others", {"ranks": late, "group": group or None}),
        confidence=confidence, saving_by_op=by_op)


def group_coverage_finding(ctx: AnalysisContext, rule: str, cfg: Mapping[str, Any], matrices: Sequence[pd.DataFrame],
                           profiled: Mapping[str, set[int]], waiting_us: float, source: str,
                           outside: str, confidence: float) -> Finding | None:
    """Info finding, no saving: the largest communication group of the matrices (``src_rank`` / ``dst_rank``
    columns) has members not ``profiled`` (the matrices' own ``src`` ranks count as profiled), and no task names the
    link waited on; lists its slowest links by transit time. None when every member is profiled."""
    members: dict[str, set[int]] = {}
    mine: dict[str, set[int]] = {g: set(r) for g, r in profiled.items()}
    for m in matrices:
        for g, ranks in members_from_matrix(m).items():
            members.setdefault(g, set()).update(ranks)
        for g, r in own_ranks(None, m).items():
            mine.setdefault(g, set()).add(r)
    if not members:
        return None
    group = max(members, key=lambda g: len(members[g]))
    have = mine.get(group, set())
    missing = sorted(members[group] - have)
    if not missing:
        return None
    links = slowest_links(pd.concat(list(matrices), ignore_index=True), int(cfg["links_listed"]))
    links = links[links["group"] == group]
    rows = [[int(r.src), int(r.dst), str(r.transport), round(float(r.size_mb), 3), round(float(r.transit_us), 3),
             round(float(r.bandwidth_gbps), 3)] for r in links.itertuples(index=False)]
    slowest = (f"; slowest link by transit time {int(links.iloc[0].src)}->{int(links.iloc[0].dst)} "
               f"({float(links.iloc[0].transit_us) / 1000:.2f} ms)") if len(links) else ""
    who = ranks_text(have) if have else "The profiled rank"
    return ctx.finding(
        rule=rule,
        title=f"Communication group {group or '(unnamed)'} has {len(members[group])} members, {len(missing)} not in "
              f"{outside} ({ranks_text(missing)}): which one the {waiting_us / 1000:.1f} ms of wait/idle waits "
              f"for is not recorded{slowest}",
        severity="info", ops=[],
        evidence={"group": group or None, "members": sorted(members[group]), "profiled": sorted(have),
                  "not_profiled": missing, "wait_idle_us": waiting_us,
                  "source": f"{source} (src-dst link keys, transit time); no per-link task times",
                  "table": table(["src", "dst", "transport", "size_mb", "transit_us", "bandwidth_gbps"], rows)},
        estimated_saving_us=0.0,
        basis="no saving claimed: no task of the profile records which link the collectives waited on",
        recommendation=f"{who[:1].upper() + who[1:]} spend{'s' if len(have) <= 1 else ''} "
                       f"{waiting_us / 1000:.1f} ms of uncovered communication waiting or idle inside collectives of "
                       f"a group whose other members ({ranks_text(missing)}) are not in {outside}, and no HCCL task "
                       "times name the link waited on. To see which rank arrives late and why, "
                       + profile_all_ranks_advice(family(ctx)) + ".",
        confidence=confidence)



__all__ = ["LATE_PEER_TABLE", "PEER_COLUMNS", "group_coverage_finding", "late_peer_finding", "late_peer_rows",
           "late_set", "members_from_matrix", "members_from_waits", "op_peers", "own_ranks", "peer_totals",
           "profile_all_ranks_advice", "ranks_text", "slowest_links", "window_waits"]
