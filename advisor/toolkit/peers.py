"""The peers of a rank's collectives: who is in its communication groups, which of them the analysis holds, and
which one the rank's collectives wait for.

A collective ends when its last member arrives; a rank that arrived earlier shows the difference as notify waits
on the link to the late member. Where the communication tasks record their links (Level1+ HCCL tasks, the ``.db``
``COMMUNICATION_TASK_INFO``), the time model attributes the uncovered wait to each (op, peer)
(``TimeModel.link_waits``, ``advisor.timemodel.LINK_WAIT_COLUMNS``): ``sole_us`` is the uncovered time during which
the rank waited on that peer alone, what the collective would end sooner had that peer arrived with the next latest
one. Ranks here are numbered within their communication group, as the profiler records them (``src``/``dst`` of a
task, the ``src-dst`` keys of communication_matrix.json); a rank's own number is the ``src`` of its links.

Where only communication_matrix.json (or ``CommAnalyzerMatrix``) exists, the group's members are known but no wait
is attributed to a link: :func:`slowest_links` ranks its links by transit time, nothing more.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext
from advisor.toolkit.common import pct, severity_for
from advisor.toolkit.run_context import family_of
from advisor.toolkit.time import OTHER_COMM_KEY

PEER_COLUMNS = ["group", "peer", "src", "sole_us", "uncovered_us", "ops", "op", "step", "wait_us", "op_sole_us",
                "start_us"]
"""Per (group, peer) of one rank: the sole and total uncovered wait on it summed over the collectives of the split
steps, how many collectives waited on it, and the collective where the sole wait was longest (its op, step, the
rank's wait on the link there, that op's sole wait and when the wait began)."""


def _group_key(v: Any) -> str:
    return "" if v is None or (isinstance(v, float) and np.isnan(v)) else str(v)


def peer_totals(link_waits: pd.DataFrame | None) -> pd.DataFrame:
    """``TimeModel.link_waits`` -> one row per (group, peer) (``PEER_COLUMNS``), the largest sole wait first."""
    if link_waits is None or not len(link_waits):
        return pd.DataFrame(columns=PEER_COLUMNS)
    lw = link_waits.assign(group=link_waits["group"].map(_group_key))
    keys = ["group", "peer"]
    sums = lw.groupby(keys, sort=False).agg(src=("src", "first"), sole_us=("sole_us", "sum"),
                                             uncovered_us=("uncovered_us", "sum"), ops=("op", "size"))
    worst = lw.loc[lw.groupby(keys, sort=False)["sole_us"].idxmax()].set_index(keys)
    out = sums.join(worst[["op", "step", "wait_us", "sole_us", "start_us"]].rename(columns={"sole_us": "op_sole_us"}))
    out = out.reset_index().sort_values(["sole_us", "uncovered_us"], ascending=False, kind="stable")
    return out[PEER_COLUMNS].reset_index(drop=True)


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
        for g, srcs in frame.groupby(frame["group"].map(_group_key), sort=False)[col]:
            mode = srcs.dropna().mode()
            if len(mode):
                out[str(g)] = int(mode.iloc[0])
    return out


def members_from_matrix(matrix: pd.DataFrame | None) -> dict[str, set[int]]:
    """Per group: the ranks of the ``src-dst`` link keys of communication_matrix.json / ``CommAnalyzerMatrix``."""
    if matrix is None or not len(matrix) or not {"src_rank", "dst_rank"} <= set(matrix.columns):
        return {}
    out: dict[str, set[int]] = {}
    for g, sub in matrix.groupby(matrix["group"].map(_group_key), sort=False):
        ranks = pd.concat([sub["src_rank"], sub["dst_rank"]]).dropna()
        out[str(g)] = {int(r) for r in ranks if 0 <= r < 2 ** 31}
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
    """Evidence rows of :func:`peer_totals`: group, peer, collectives, sole / uncovered wait, worst collective."""
    return [[r.group or None, int(r.peer), int(r.ops), round(float(r.sole_us), 3), round(float(r.uncovered_us), 3),
             str(r.op), round(float(r.wait_us), 3)] for r in peers.head(limit).itertuples(index=False)]


LATE_PEER_TABLE = ["group", "peer", "collectives", "sole_uncovered_wait_us", "uncovered_wait_us", "longest_wait_op",
                   "longest_wait_us"]


def sole_by_op(link_waits: pd.DataFrame, group: str, peer: int) -> Mapping[str, float]:
    """The sole uncovered wait on ``peer`` per collective op name (what a finding attributes its saving to)."""
    lw = link_waits[(link_waits["group"].map(_group_key) == group) & (link_waits["peer"] == peer)]
    return {str(k): float(v) for k, v in lw.groupby(lw["op"].astype(object).fillna(OTHER_COMM_KEY))
            ["sole_us"].sum().items() if v > 0}


def late_peer_finding(ctx: AnalysisContext, rule: str, cfg: Mapping[str, Any], waits: pd.DataFrame,
                      top: Any, window: float, outside: str, confidence: float, rank: int | None) -> Finding:
    """The finding naming the peer one rank (global ``rank``, the finding's) waited on alone the longest (``top``: a
    :func:`peer_totals` row), a rank ``outside`` the analysis (``this profile`` / ``this analysis``): its saving is
    ``cfg["recoverable"]`` of the sole uncovered wait, attributed to the collectives it held; it explains the waiting
    of that rank only (``evidence["waiting_ranks"]``, ``advisor.hierarchy.explain_waiting``)."""
    group, peer, me = str(top.group), int(top.peer), int(top.src)
    recoverable = float(cfg["recoverable"])
    by_op = {op: v * recoverable for op, v in sole_by_op(waits, group, peer).items()}
    saving = float(sum(by_op.values()))
    members = members_from_waits(waits).get(group, {me, peer})
    sole, wait, n_ops = float(top.sole_us), float(top.wait_us), len(by_op)
    peers = peer_totals(waits)
    return ctx.finding(
        rule=rule,
        title=f"Collectives wait for rank {peer} (not in {outside}): it arrives {wait / 1000:.1f} ms late at "
              f"{top.op}; {sole / 1000:.1f} ms of uncovered time ({pct(sole / window)} of the analyzed time) wait "
              f"on it alone over {n_ops} collective{'s' if n_ops != 1 else ''}",
        severity=severity_for(saving / window if window > 0 else 0.0, ctx.rules["severity"]),
        ops=sorted(by_op, key=lambda k: -by_op[k]),
        evidence={"peer": peer, "this_rank": me, "group": group or None, "members": sorted(members),
                  "waiting_ranks": [int(rank)] if rank is not None else [],
                  "sole_wait_us": sole, "uncovered_wait_us": float(top.uncovered_us), "longest_wait_us": wait,
                  "longest_wait_op": str(top.op), "longest_wait_step": _num(top.step),
                  "op_sole_wait_us": float(top.op_sole_us), "collectives": n_ops,
                  "source": "notify waits per link (src rank / dst rank) of "
                            + ctx.profile.time.sources.get("uncovered_by_kind", "the HCCL task events")
                            + "; ranks numbered within the group",
                  "table": table(LATE_PEER_TABLE, late_peer_rows(peers, int(cfg["links_listed"])))},
        estimated_saving_us=saving,
        basis=f"{recoverable:g} (late_peer.recoverable) of the uncovered time rank {me} waited on rank {peer} alone "
              f"({sole / 1000:.2f} ms over {n_ops} collective(s)): what the collectives would end sooner had it "
              "arrived with the next latest peer",
        recommendation=f"Rank {me}'s collectives wait for rank {peer}: at {top.op} rank {me} waited "
                       f"{wait / 1000:.1f} ms on the link to it, {float(top.op_sole_us) / 1000:.1f} ms of that on no "
                       f"other peer. Rank {peer} is not in {outside}, so what delayed it (longer compute, a host "
                       "stall, data loading, its own wait in another group) cannot be seen: profile it -- "
                       + profile_all_ranks_advice(family_of(ctx)) + ".",
        fix=Fix("code", f"profile rank {peer} with the others", {"rank": peer, "group": group or None}),
        confidence=confidence, saving_by_op=by_op)


def group_coverage_finding(ctx: AnalysisContext, rule: str, cfg: Mapping[str, Any], matrices: Sequence[pd.DataFrame],
                           profiled: Mapping[str, set[int]], waiting_us: float, source: str,
                           outside: str) -> Finding | None:
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
                       + profile_all_ranks_advice(family_of(ctx)) + ".",
        confidence=0.3)


def _num(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return f if np.isfinite(f) else None


__all__ = ["LATE_PEER_TABLE", "PEER_COLUMNS", "group_coverage_finding", "late_peer_finding", "late_peer_rows",
           "members_from_matrix", "members_from_waits", "own_ranks", "peer_totals", "profile_all_ranks_advice",
           "ranks_text", "slowest_links", "sole_by_op"]
