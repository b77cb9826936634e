"""What a cluster analysis needs of one rank, reduced on the worker that read it.

A rank's op table stays where it was read; these small tables travel to the client instead (measured sizes in
``docs/cluster.md``): the per-step time split of its time model, one row per collective (start, elapse, wait, transit), per-transport
byte and time sums, per-link sums of the communication matrix, and the rank's parallel-group membership.
Every function takes the normalized profile (``advisor.model``) and never reads files.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from advisor.common.util import is_int
from advisor.toolkit.time import comm_op_times

STEP_TIME_COLUMNS = ["step", "compute_us", "uncovered_comm_us", "overlapped_us", "free_us", "bubble_us",
                     "preparing_us", "step_us", "wait_us", "transmit_us", "idle_us"]
"""Per-step time of one rank (us), from its time model: ``step_us`` is the step's window, ``wait/transmit/idle_us``
the time model's split of the uncovered communication; NaN where the time model has no figure."""

COLLECTIVE_COLUMNS = ["step", "op", "group", "kind", "start_us", "elapse_us", "transit_us", "wait_us", "idle_us"]
TRANSPORT_COLUMNS = ["transport", "size_mb", "transit_us"]
LINK_COLUMNS = ["group", "src", "dst", "transport", "size_mb", "transit_us", "transfers", "op_size_mb", "op_transit_us",
                "op_large_packet_ratio"]
"""Per-link sums, then the link's single-op transfers as tuples (one item per distinct op the matrix details:
its size, transit time and the op's Large Packet Ratio on that transport from communication.json, NaN where not
recorded); a matrix with totals only gives its total rows as the transfers."""

GROUP_KINDS = {"dp": ("dp", "dp_cp"), "pp": ("pp",), "tp": ("tp",), "cp": ("cp",), "ep": ("ep", "exp")}
"""Parallel dimension -> group names that carry it in ``profiler_metadata.json`` ``parallel_group_info``
(Megatron / MindSpeed naming), first match wins."""


def step_time(profile: Any) -> pd.DataFrame:
    """One row per step of the rank's time model (``profile.time``, ``advisor.timemodel``): STEP_TIME_COLUMNS."""
    tm = profile.time
    df = pd.DataFrame([_from_step_time(s) for s in (tm.steps if tm is not None else [])], columns=STEP_TIME_COLUMNS)
    df.attrs["source"] = "time model"
    return df


def _from_step_time(s: Any) -> dict[str, float]:
    kinds = s.uncovered_by_kind or {}
    return {"step": float(s.step) if s.step is not None else np.nan, "compute_us": s.compute_us,
            "uncovered_comm_us": s.uncovered_communication_us, "overlapped_us": s.overlapped_communication_us,
            "free_us": s.free_us, "bubble_us": _nan(s.bubble_us), "preparing_us": _nan(s.preparing_us),
            "step_us": s.window_us, "wait_us": _nan(kinds.get("wait")), "transmit_us": _nan(kinds.get("transmit")),
            "idle_us": _nan(kinds.get("idle"))}


def _nan(v: Any) -> float:
    return float("nan") if v is None else float(v)


def collectives(comm: pd.DataFrame) -> pd.DataFrame:
    """communication.json rows (one per op x transport) -> one row per communication op (COLLECTIVE_COLUMNS).

    Wait includes synchronization (as communication.json reports it); a missing idle is elapse - transit - wait.
    """
    if not len(comm):
        return pd.DataFrame(columns=COLLECTIVE_COLUMNS)
    df = comm_op_times(comm).rename(columns={"name": "op"})
    keys = [c for c in ("step", "op", "group", "kind", "start_us") if c in comm.columns]
    per = comm.drop_duplicates(subset=keys)  # the rows comm_op_times kept, in its order
    per = per[np.isfinite(per["elapse_us"].to_numpy(dtype="float64"))]
    df["group"] = per["group"].astype(object).where(per["group"].notna(), "").astype(str).to_numpy()
    df["kind"] = per["kind"].astype(str).to_numpy() if "kind" in per.columns else ""
    df["start_us"] = per["start_us"].to_numpy(dtype="float64") if "start_us" in per.columns else np.nan
    df = df[COLLECTIVE_COLUMNS]
    for col in ("op", "group", "kind"):
        df[col] = df[col].astype("category")
    return df


def transports(comm: pd.DataFrame) -> pd.DataFrame:
    """Bytes and transit time per transport (SDMA, RDMA, HCCS, PCIE, SIO...) over the rank's communication ops."""
    if not len(comm) or "transport" not in comm.columns:
        return pd.DataFrame(columns=TRANSPORT_COLUMNS)
    col = "transport_transit_us" if "transport_transit_us" in comm.columns else "transit_us"
    sub = comm[comm["transport"].notna() & (comm["size_mb"] > 0)]
    out = (sub.assign(transport=sub["transport"].astype(str))
           .groupby("transport", sort=True).agg(size_mb=("size_mb", "sum"), transit_us=(col, "sum")).reset_index())
    return out[TRANSPORT_COLUMNS]


def links(matrix: Any, comm: pd.DataFrame | None = None) -> pd.DataFrame:
    """communication_matrix.json (``advisor.ingest.torch_npu.MATRIX_COLUMNS``) -> one row per
    (group, src, dst, transport) with summed size and transit time and the number of transfers (matrix entries)
    summed, plus the link's single-op transfers (LINK_COLUMNS). Ranks are numbered within their group.

    Newer matrices carry top/middle/bottom/total aggregates per op kind: their ``total`` rows are summed, and the
    top/middle/bottom entries (single ops, named by ``Op Name``) are the link's transfers, each with the op's
    Large Packet Ratio on that transport from the rank's communication.json (``comm``) where it records one.
    Older matrices have one entry per op: summed as they are, and each is a transfer.
    """
    if not isinstance(matrix, pd.DataFrame) or not len(matrix):
        return pd.DataFrame(columns=LINK_COLUMNS)
    m = matrix
    stat = m["stat"].astype(object) if "stat" in m.columns else pd.Series(None, index=m.index, dtype=object)
    is_total = stat == "total"
    valid = m["transport"].notna() & (m["size_mb"] > 0) & (m["transit_us"] > 0)
    rows = m[(is_total if is_total.any() else stat.isna()) & valid]
    if not len(rows):
        return pd.DataFrame(columns=LINK_COLUMNS)
    keys = ["group", "src_rank", "dst_rank", "transport"]
    out = (_link_keys(rows).groupby(keys, sort=True)
           .agg(size_mb=("size_mb", "sum"), transit_us=("transit_us", "sum"), transfers=("size_mb", "size"))
           .reset_index())
    singles = m[~is_total & valid] if (~is_total & stat.notna() & valid).any() else rows
    per = _transfers_by_link(_op_transfers(_link_keys(singles), comm), keys)
    out = out.rename(columns={"src_rank": "src", "dst_rank": "dst"})
    found = [per.get(k, ((), (), ())) for k in zip(out["group"], out["src"], out["dst"], out["transport"],
                                                    strict=True)]
    for i, col in enumerate(("op_size_mb", "op_transit_us", "op_large_packet_ratio")):
        out[col] = [f[i] for f in found]
    return out[LINK_COLUMNS]


def _transfers_by_link(ops: pd.DataFrame, keys: list[str]) -> dict[tuple[Any, ...], tuple[tuple[float, ...], ...]]:
    """Per link (``keys``): its transfers' sizes, transit times and Large Packet Ratios as tuples, in row order.

    Plain Python: a rank has a few dozen transfers, and a groupby aggregating to tuples costs ~20 ms a rank whatever
    their number (issue 33). Links with a missing key are left out, as a groupby leaves them."""
    out: dict[tuple[Any, ...], tuple[list[float], list[float], list[float]]] = {}
    columns = [ops[k].tolist() for k in keys]
    values = zip(ops["size_mb"].tolist(), ops["transit_us"].tolist(), ops["lpr"].tolist(), strict=True)
    for key, (size, transit, lpr) in zip(zip(*columns, strict=True), values, strict=True):
        if any(v is None or (isinstance(v, float) and v != v) for v in key):
            continue
        sizes, transits, lprs = out.setdefault(key, ([], [], []))
        sizes.append(size)
        transits.append(transit)
        lprs.append(lpr)
    return {k: (tuple(a), tuple(b), tuple(c)) for k, (a, b, c) in out.items()}


def _link_keys(rows: pd.DataFrame) -> pd.DataFrame:
    return rows.assign(group=rows["group"].astype(object).where(rows["group"].notna(), "").astype(str),
                       transport=rows["transport"].astype(str))


def _op_transfers(rows: pd.DataFrame, comm: pd.DataFrame | None) -> pd.DataFrame:
    """Distinct single-op transfers of each link (an op can be both the top and the middle entry), with the op's
    Large Packet Ratio on the transport (communication.json of the same rank and step)."""
    name = rows["op_name"].astype(object).where(rows["op_name"].notna() & (rows["op_name"].astype(str) != ""),
                                                rows["op"].astype(object)) if "op_name" in rows.columns \
        else rows["op"].astype(object)
    df = rows.assign(op_key=name.astype(str), step_key=rows["step"].astype(str))
    df = df.drop_duplicates(subset=["step_key", "op_key", "group", "src_rank", "dst_rank", "transport", "size_mb",
                                    "transit_us"])
    lpr = pd.Series(np.nan, index=df.index)
    if isinstance(comm, pd.DataFrame) and len(comm) and "large_packet_ratio" in comm.columns:
        c = comm[comm["transport"].notna()]
        keys = zip(c["step"].astype(str), c["op"].astype(str), c["transport"].astype(str), strict=True)
        ratio = dict(zip(keys, c["large_packet_ratio"].astype("float64"), strict=True))
        wanted = zip(df["step_key"], df["op_key"], df["transport"], strict=True)
        lpr = pd.Series([ratio.get(k, np.nan) for k in wanted], index=df.index, dtype="float64")
    return df.assign(lpr=lpr)


def parallel_groups(metadata: Mapping[str, Any] | None, rank: int | None) -> dict[str, Any]:
    """The rank's DP / PP / TP (CP, EP) indices and group members, from ``profiler_metadata.json``.

    ``parallel_group_info`` gives each group's name, members (global ranks) and this rank's index in it. Without
    it, ``distributed_args`` sizes give the indices under Megatron's default rank order (tp fastest, then cp,
    dp, pp), marked ``"source": "distributed_args"``. Returns {} when neither is recorded.
    """
    meta = metadata or {}
    info = meta.get("parallel_group_info")
    out: dict[str, Any] = {}
    if isinstance(info, Mapping) and info:
        groups = [g for g in info.values() if isinstance(g, Mapping)]
        for dim, names in GROUP_KINDS.items():
            for name in names:
                g = next((g for g in groups if str(g.get("group_name", "")).lower() == name), None)
                if g is not None:
                    members = [int(r) for r in g.get("global_ranks") or [] if is_int(r)]
                    index = g.get("group_rank")
                    if not is_int(index) and rank in members:
                        index = members.index(rank)
                    out[dim] = {"index": int(index) if is_int(index) else None, "size": len(members),
                                "ranks": members}
                    break
        if out:
            out["source"] = "parallel_group_info"
            return out
    args = meta.get("distributed_args")
    if isinstance(args, Mapping) and rank is not None:
        size = {d: int(args.get(k) or 1) for d, k in (("tp", "tensor_model_parallel_size"),
                                                      ("pp", "pipeline_model_parallel_size"),
                                                      ("cp", "context_parallel_size"),
                                                      ("dp", "data_parallel_size")) if is_int(args.get(k) or 1)}
        if size:
            tp, cp, dp = size.get("tp", 1), size.get("cp", 1), size.get("dp", 1)
            out = {"tp": {"index": rank % tp, "size": tp},
                   "cp": {"index": (rank // tp) % cp, "size": cp},
                   "dp": {"index": (rank // (tp * cp)) % dp, "size": dp},
                   "pp": {"index": rank // (tp * cp * dp), "size": size.get("pp", 1)},
                   "source": "distributed_args"}
    return out

