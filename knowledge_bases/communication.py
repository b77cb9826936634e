"""Communication knowledge base: how collectives move their data.

Five rules, each a cause on the communication ops: small packets (latency-bound transfers, per transport), SDMA
bandwidth contention with MatMuls running at the same time, transfers not aligned to the SDMA block, RDMA
retransmission, and a late peer outside the profile (the notify waits of this rank's collectives, per link, from
the time model; single-rank input only: with several ranks the cluster knowledge base judges the peers). Savings only count the communication time that is exposed (the uncovered fraction of each step,
from the rank's time model), are attributed to the same op names the overall KB uses, so the score never counts
one op's communication twice, and together never exceed an op's exposed time. Advice names the framework's own
options (PyTorch DDP / Megatron, MindSpore comm_fusion) and fused compute-communication ops only where the chip
has them. Unlike msprof-analyze, the
"Total Op Info" aggregate is never counted as an op and communication.json without it is fine.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection, Profile
from advisor.toolkit import run_context as rc
from advisor.toolkit.common import pct, severity_for, soc_matches
from advisor.toolkit.peers import group_coverage_finding, late_peer_finding, peer_totals, window_waits
from advisor.toolkit.time import (
    comm_op_names,
    comm_op_times,
    exposed_fraction,
    isin_mask,
    overlap,
    union,
    union_length,
    window_us,
)

COMM_PROCESSES = ("HCCL", "Communication")

TRANSFER_COLUMNS = ["step", "op", "transport", "size_mb", "transit_us", "bandwidth_gbps", "large_packet_ratio",
                    "start_us", "elapse_us"]


# ---------------------------------------------------------------------------------------------------------
# inputs
# ---------------------------------------------------------------------------------------------------------
def transfers(profile: Profile) -> tuple[pd.DataFrame, str]:
    """One row per op and transport that moved data (size > 0), from communication.json, else the matrix."""
    comm = profile.comm
    if len(comm):
        df = pd.DataFrame({
            "step": comm["step"].to_numpy(dtype="float64"),
            "op": comm["op"].astype(str).to_numpy(),
            "transport": comm["transport"].astype(object).to_numpy(),
            "size_mb": comm["size_mb"].to_numpy(dtype="float64"),
            "transit_us": (comm["transport_transit_us"] if "transport_transit_us" in comm.columns
                           else comm["transit_us"]).to_numpy(dtype="float64"),
            "bandwidth_gbps": comm["bandwidth_gbps"].to_numpy(dtype="float64"),
            "large_packet_ratio": comm["large_packet_ratio"].to_numpy(dtype="float64"),
            "start_us": (comm["start_us"] if "start_us" in comm.columns
                         else pd.Series(np.nan, index=comm.index)).to_numpy(dtype="float64"),
            "elapse_us": comm["elapse_us"].to_numpy(dtype="float64"),
        })
        df = df[(df["size_mb"] > 0) & df["transport"].notna()]
        return df.reset_index(drop=True), "communication.json"
    matrix = profile.extras.get("communication_matrix")
    if isinstance(matrix, pd.DataFrame) and len(matrix) and {"op", "stat", "op_name"} <= set(matrix.columns):
        # newer matrices name the op of each top/middle/bottom entry in op_name; older ones key entries by op
        m = matrix.assign(op=matrix["op_name"].where(matrix["stat"].notna(), matrix["op"]))
        m = m[m["op"].notna() & (m["stat"].astype(str) != "total") & (m["size_mb"] > 0)]
        m = m.drop_duplicates(subset=["op", "src_rank", "dst_rank", "transport"])
        g = m.groupby(["op", m["transport"].astype(str)], sort=False)
        df = g.agg(step=("step", "first"), size_mb=("size_mb", "sum"), transit_us=("transit_us", "max")).reset_index()
        df["bandwidth_gbps"] = df["size_mb"] / (df["transit_us"] / 1000.0)
        df["large_packet_ratio"] = np.nan
        df["start_us"] = np.nan
        df["elapse_us"] = np.nan
        return df[TRANSFER_COLUMNS], "communication_matrix.json"
    return pd.DataFrame(columns=TRANSFER_COLUMNS), ""


def _frac(steps: np.ndarray, by_step: Mapping[float, float], overall: float) -> np.ndarray:
    return np.array([by_step.get(-1.0 if np.isnan(s) else float(s), overall) for s in steps], dtype="float64")








def _attribute(ops: Sequence[str], savings: Sequence[float]) -> dict[str, float]:
    out: dict[str, float] = {}
    for op, s in zip(ops, savings, strict=True):
        if s > 0:
            out[op] = out.get(op, 0.0) + float(s)
    return out


# ---------------------------------------------------------------------------------------------------------
# the knowledge base
# ---------------------------------------------------------------------------------------------------------
class CommunicationKB(KnowledgeBase):
    id = "communication"
    title = "Communication efficiency"
    version = "2.0.0"
    api_version = "1.5"
    requires = ()
    requires_any = ("comm", "events", "ops")
    ops_columns = ()
    events_read = EventSelection(processes=tuple(re.escape(p) for p in COMM_PROCESSES))  # byte-alignment
    rules_file = "communication"

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        """The transfers and their exposed share once, the checks in order, then each op's savings held within its
        exposed communication time (the rules' findings on one op never add up past it)."""
        tx, self._source = transfers(ctx.profile)
        self._by_step, self._overall = exposed_fraction(ctx.profile)
        if len(tx):
            tx["exposed"] = _frac(tx["step"].to_numpy(dtype="float64"), self._by_step, self._overall)
        else:
            ctx.note("communication: small-packets, bandwidth-contention and rdma-retransmission skipped, needs "
                     "communication.json or communication_matrix.json with transfer sizes")
        self._tx = tx
        return _within_exposed_time(ctx, list(super().analyze(ctx)))

    # ----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="communication.small-packets",
        title="Small communication packets",
        what="Per transport, counts the ops whose transfer is below small_packets.min_size_mb (SDMA "
             "{small_packets.min_size_mb.SDMA} MB, RDMA {small_packets.min_size_mb.RDMA} MB; communication.json, "
             "else communication_matrix.json links with small_packets.matrix_min_size_mb) and fires when they "
             "exceed {small_packets.max_small_ratio} of the ops. The transports that fire share one fix and make "
             "one finding (evidence 'transports'; the top-level figures are those of the transport with the "
             "largest saving). Saving: the transit time of the small transfers beyond their size at the bandwidth "
             "large transfers of the same transport reach in this profile (else nominal_gbps), times the exposed "
             "share of communication; per op at most its exposed communication time.",
        why="Small transfers are dominated by per-transfer latency and synchronisation and reach a fraction of the "
            "link bandwidth.",
        how_to_fix="Merge small collectives: larger gradient buckets (PyTorch DDP bucket_cap_mb, Megatron "
                   "--ddp-bucket-size; MindSpore comm_fusion), coalesce tensors before all-reduce, fewer but larger "
                   "pipeline/tensor-parallel messages.",
        thresholds=("small_packets", "nominal_gbps", "confidence", "severity"),
        needs=("comm",),
    ))
    def small_packets(self, ctx: AnalysisContext) -> list[Finding]:
        tx, source = self._tx, self._source
        if not len(tx):
            return []
        sp = ctx.rules["small_packets"]
        limits = sp["min_size_mb" if source == "communication.json" else "matrix_min_size_mb"]
        max_ratio = float(sp["max_small_ratio"])
        nominal = ctx.rules["nominal_gbps"]
        parts = []  # one per transport with too many small transfers
        for transport, grp in tx.groupby(tx["transport"].astype(str), sort=True):
            if transport not in limits:
                continue
            limit = float(limits[transport])
            small = grp["size_mb"] < limit
            ratio = float(small.mean())
            if ratio <= max_ratio:
                continue
            large = grp.loc[~small, "bandwidth_gbps"]
            large = large[large > 0]
            if len(large):
                ref, ref_basis = float(large.median()), f"median bandwidth of the {len(large)} transfers >= {limit:g} MB"
            elif transport in nominal:
                ref, ref_basis = float(nominal[transport]), f"nominal {transport} bandwidth (nominal_gbps)"
            else:
                ref, ref_basis = float("nan"), "no reference bandwidth"
            sm = grp[small]
            expected = sm["size_mb"] / ref * 1000.0 if ref == ref else sm["transit_us"]
            per = (sm["transit_us"] - expected).clip(lower=0.0).fillna(0.0) * sm["exposed"]
            parts.append({"transport": transport, "min_size_mb": limit, "small_ops": int(small.sum()),
                          "ops": int(len(grp)), "small_ratio": ratio,
                          "median_small_size_mb": float(sm["size_mb"].median()), "reference_gbps": ref,
                          "reference": ref_basis, "saving_us": float(per.sum()),
                          "by_op": _attribute(list(sm["op"]), list(per)), "names": set(sm["op"]),
                          "rows": [[r.op, round(r.size_mb, 4), round(r.transit_us, 3), _round(r.bandwidth_gbps),
                                    _round(r.large_packet_ratio), transport]
                                   for r in sm.sort_values("transit_us", ascending=False).itertuples(index=False)]})
        if not parts:
            return []
        # one fix (merge the small transfers) whatever the transport: one finding, the transports its parts
        parts.sort(key=lambda x: -x["saving_us"])
        main = parts[0]
        by_op: dict[str, float] = {}
        for x in parts:
            for op, v in x["by_op"].items():
                by_op[op] = by_op.get(op, 0.0) + v
        saving = sum(x["saving_us"] for x in parts)
        said = [f"{pct(x['small_ratio'])} of " + (f"{x['transport']} transfers are" if i == 0 else x["transport"])
                + f" below {x['min_size_mb']:g} MB ({x['small_ops']} of {x['ops']} ops)" for i, x in enumerate(parts)]
        # the advice names every transport's limit, not only those that fire here: ranks of one job whose small
        # transfers sit on other transports give the same advice, one finding over the ranks
        below = ", ".join(f"{float(v):g} MB on {t}" for t, v in limits.items())
        rec, fix = _merge_advice(ctx)
        return [ctx.finding(
            rule="communication.small-packets",
            title=", ".join(said),
            severity=_severity(ctx, saving),
            ops=sorted(by_op, key=lambda k: -by_op[k]) or sorted(set().union(*(x["names"] for x in parts))),
            evidence={"transport": main["transport"], "source": source, "min_size_mb": main["min_size_mb"],
                      "small_ops": main["small_ops"], "ops": main["ops"], "small_ratio": main["small_ratio"],
                      "max_small_ratio": max_ratio, "median_small_size_mb": main["median_small_size_mb"],
                      "reference_gbps": main["reference_gbps"],
                      "transports": [{k: v for k, v in x.items() if k not in ("by_op", "names", "rows")}
                                     for x in parts],
                      "table": table(["op", "size_mb", "transit_us", "bandwidth_gbps", "large_packet_ratio",
                                      "transport"], [r for x in parts for r in x["rows"]])},
            estimated_saving_us=saving,
            basis="; ".join(f"{x['transport']}: transit time beyond size / {x['reference_gbps']:.1f} GB/s "
                            f"({x['reference']})" for x in parts)
                  + ", times the exposed share of communication in the op's step",
            recommendation=rc.unknown_context(ctx) + f"Transfers below {below} are latency-bound (the evidence "
                           "gives each transport's share and median size). " + rec,
            fix=fix, confidence=float(ctx.rules["confidence"]["small_packets"]), saving_by_op=by_op)]

    # ----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="communication.bandwidth-contention",
        title="SDMA bandwidth contention with MatMul",
        what="Finds transfers on bandwidth_contention.transports slower than {bandwidth_contention.threshold} x "
             "{bandwidth_contention.baseline_gbps} GB/s that run while a MatMul task (matmul_patterns on the op "
             "type, else name) runs. Saving: their transit time beyond the threshold bandwidth, times the exposed "
             "share of communication.",
        why="MatMul and SDMA share HBM bandwidth; large matrix multiplications running under a collective slow the "
            "transfer down, and the collective then delays the next step.",
        how_to_fix="Schedule communication over phases without large MatMuls, or use fused compute-communication "
                   "ops that pipeline both where the chip and framework have them (torch_npu "
                   "npu_mm_all_reduce_base / MC2 on the chips in bandwidth_contention.mc2_socs).",
        thresholds=("bandwidth_contention", "comm_cores", "confidence", "severity"),
        needs=("comm", "ops"),
    ))
    def bandwidth_contention(self, ctx: AnalysisContext) -> list[Finding]:
        tx = self._tx
        if not len(tx):
            return []
        bc = ctx.rules["bandwidth_contention"]
        limit = float(bc["threshold"]) * float(bc["baseline_gbps"])
        cand = tx[tx["transport"].astype(str).isin(list(bc["transports"]))
                  & (tx["bandwidth_gbps"] > 0) & (tx["bandwidth_gbps"] < limit)]
        if not len(cand):
            return []
        ops = ctx.profile.ops
        windows = _windows(ctx, cand)
        if not len(ops) or windows is None:
            ctx.note("communication.bandwidth-contention: skipped, needs op start times in communication.json "
                     "and the ops table")
            return []
        pat = re.compile("|".join(f"(?:{p})" for p in bc["matmul_patterns"]), re.IGNORECASE)
        label = ops["type"].astype(object).where(ops["type"].notna(), ops["name"].astype(object))
        uniq = pd.unique(label.dropna())
        hit = {u for u in uniq if isinstance(u, str) and pat.search(u)}
        mm = label.isin(hit).to_numpy() & ops["start_us"].notna().to_numpy()
        if not mm.any():
            return []
        s = ops.loc[mm, "start_us"].to_numpy(dtype="float64")
        e = s + ops.loc[mm, "duration_us"].fillna(0.0).to_numpy(dtype="float64")
        bs, be = union(s, e)
        ws, we = windows
        over = overlap(bs, be, ws, we)
        hit_rows = cand[over > 0].copy()
        if not len(hit_rows):
            return []
        cs, ce = union(ws[over > 0], we[over > 0])
        under = overlap(cs, ce, s, e) > 0  # the MatMuls running under a slow transfer
        names = sorted({str(n) for n in ops.loc[mm, "name"].to_numpy()[under]})
        hit_rows["overlap_us"] = over[over > 0]
        per = (hit_rows["transit_us"] * (1.0 - hit_rows["bandwidth_gbps"] / limit)).clip(lower=0.0) \
            * hit_rows["exposed"]
        by_op = _attribute(list(hit_rows["op"]), list(per))
        saving = float(per.sum())
        rows = [[r.op, round(r.bandwidth_gbps, 3), round(r.transit_us, 3), round(r.overlap_us, 3)]
                for r in hit_rows.sort_values("transit_us", ascending=False).itertuples(index=False)]
        rec, fix = _contention_advice(ctx)
        return [ctx.finding(
            rule="communication.bandwidth-contention",
            title=f"{len(hit_rows)} SDMA transfers below {limit:g} GB/s run under MatMul",
            severity=_severity(ctx, saving), ops=sorted(by_op, key=lambda k: -by_op[k]) or list(hit_rows["op"]),
            evidence={"threshold_gbps": limit, "transfers": int(len(hit_rows)),
                      "median_bandwidth_gbps": float(hit_rows["bandwidth_gbps"].median()),
                      "matmul_ops": names[:20], "table": table(["op", "bandwidth_gbps", "transit_us",
                                                                "overlap_with_matmul_us"], rows)},
            estimated_saving_us=saving,
            basis=f"transit time beyond the {limit:g} GB/s threshold bandwidth, times the exposed share of "
                  "communication",
            recommendation=rc.unknown_context(ctx) + rec, fix=fix,
            confidence=float(ctx.rules["confidence"]["bandwidth_contention"]), saving_by_op=by_op)]

    # ----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="communication.byte-alignment",
        title="Transfers not aligned to the SDMA block",
        what="Finds HCCL transfer tasks (timeline task_patterns with args size(Byte), transport type, link type) on "
             "byte_alignment.transports, off-chip, whose size is above and not a multiple of "
             "{byte_alignment.align_bytes} bytes. Saving: {byte_alignment.misaligned_penalty} of their time (an "
             "assumption), times the exposed share of communication.",
        why="SDMA moves {byte_alignment.align_bytes}-byte-aligned data most efficiently; an odd tail forces extra, "
            "smaller transfers.",
        how_to_fix="Pad communicated tensors to multiples of {byte_alignment.align_bytes} bytes: hidden sizes, "
                   "vocabulary and bucket sizes in multiples of that many bytes' worth of elements.",
        thresholds=("byte_alignment", "confidence", "severity"),
        needs=("timeline",),
    ))
    def byte_alignment(self, ctx: AnalysisContext) -> list[Finding]:
        ba = ctx.rules["byte_alignment"]
        ev = ctx.profile.events
        if not len(ev):
            return []
        in_comm = isin_mask(ev["process"], COMM_PROCESSES)
        if not in_comm.any():
            return []
        sub = ev.loc[in_comm]
        names = sub["name"].astype(str)
        task_pat = re.compile("|".join(f"(?:{p})" for p in ba["task_patterns"]))
        op_pat = re.compile(str(ba["op_pattern"]))
        uniq = pd.unique(names)
        task_names = {n for n in uniq if task_pat.fullmatch(n)}
        op_names = {n for n in uniq if op_pat.fullmatch(n)}
        tasks = sub[names.isin(task_names).to_numpy()]
        if not len(tasks):
            return []
        align = int(ba["align_bytes"])
        sz, tr, lk = _transfer_args(tasks)
        checked = np.isin(tr, list(ba["transports"])) & ~np.isin(lk, list(ba["skip_link_types"])) & np.isfinite(sz)
        bad = checked & (sz > align) & (np.mod(np.nan_to_num(sz), align) != 0)
        if not bad.any():
            return []
        t_start = tasks["start_us"].to_numpy(dtype="float64")
        t_dur = tasks["duration_us"].fillna(0.0).to_numpy(dtype="float64")
        parents = _parents(sub[names.isin(op_names).to_numpy()], t_start)
        penalty = float(ba["misaligned_penalty"])
        # transfers of one collective run on several planes at once: what they cost the step is their wall time
        wall = union_length(t_start[bad], t_start[bad] + t_dur[bad])
        saving = min(wall * penalty, int(bad.sum()) * float(ba["max_saving_per_transfer_us"])) * self._overall
        transmit = ctx.profile.time.uncovered_by_kind.get("transmit")
        if transmit is not None and ctx.profile.time.sources.get("uncovered_by_kind"):
            saving = min(saving, penalty * transmit)  # padding speeds transfers up, nothing else
        per = t_dur[bad] * (saving / float(t_dur[bad].sum())) if t_dur[bad].sum() > 0 else t_dur[bad] * 0.0
        labels = np.where(parents[bad] != "", parents[bad], tasks["name"].astype(str).to_numpy()[bad])
        by_op = _attribute(list(labels), list(per))
        bad_time = float(t_dur[bad].sum())
        checked_time = float(t_dur[checked].sum())
        rows = [[str(p), str(n), int(s), str(link_type), round(float(d), 3)] for p, n, s, link_type, d in
                zip(labels, tasks["name"].astype(str).to_numpy()[bad], sz[bad], lk[bad], t_dur[bad], strict=True)]
        rows.sort(key=lambda r: -r[4])
        rec, fix = _alignment_advice(ctx, align)
        return [ctx.finding(
            rule="communication.byte-alignment",
            title=f"{int(bad.sum())} of {int(checked.sum())} SDMA transfers are not {align}-byte aligned "
                  f"({pct(bad_time / checked_time) if checked_time else '0%'} of their time)",
            severity=_severity(ctx, saving), ops=sorted(by_op, key=lambda k: -by_op[k]),
            evidence={"align_bytes": align, "misaligned": int(bad.sum()), "checked": int(checked.sum()),
                      "misaligned_us": bad_time, "misaligned_wall_us": wall, "checked_us": checked_time,
                      "table": table(["op", "task", "size_bytes", "link_type", "duration_us"], rows)},
            estimated_saving_us=saving,
            basis=f"{penalty:g} of the misaligned transfers' wall time ({wall / 1000:.2f} ms; misaligned_penalty, "
                  f"an assumption), at most {float(ba['max_saving_per_transfer_us']):g} µs per transfer (the odd "
                  "tail's extra transfer: max_saving_per_transfer_us), times the exposed share of communication, at "
                  "most that share of the uncovered transfer time",
            recommendation=rc.unknown_context(ctx) + rec, fix=fix,
            confidence=float(ctx.rules["confidence"]["byte_alignment"]), saving_by_op=by_op)]

    # ----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="communication.rdma-retransmission",
        title="RDMA retransmission",
        what="Flags RDMA transfers whose transit time reaches {rdma_retransmission.min_transit_ms} ms (the "
             "msprof-analyze bound); says so when the profile has no RDMA traffic. Saving: their transit time "
             "beyond the size at {nominal_gbps.RDMA} GB/s (nominal_gbps.RDMA), times the exposed share of "
             "communication.",
        why="A transfer that slow means packets were lost and retransmitted after a timeout: a network fault (link "
            "flaps, PFC/ECN misconfiguration, a bad optic), not a tuning matter.",
        how_to_fix="Check the NIC and switch counters for the affected ranks (hccn_tool -i <dev> -stat -g, "
                   "retransmission/CNP counters), the optics, and that HCCL_RDMA_TC / HCCL_RDMA_SL match the switch "
                   "QoS; raise HCCL_RDMA_TIMEOUT only as a stopgap.",
        thresholds=("rdma_retransmission", "nominal_gbps", "confidence", "severity"),
        needs=("comm",),
    ))
    def rdma_retransmission(self, ctx: AnalysisContext) -> list[Finding]:
        tx = self._tx
        if not len(tx):
            return []
        rdma = tx[tx["transport"].astype(str) == "RDMA"]
        if not len(rdma):
            ctx.note("communication.rdma-retransmission: no RDMA traffic in this profile (single-node run); "
                     "nothing to check")
            return []
        limit_us = float(ctx.rules["rdma_retransmission"]["min_transit_ms"]) * 1000.0
        bad = rdma[rdma["transit_us"] >= limit_us]
        if not len(bad):
            return []
        nominal = float(ctx.rules["nominal_gbps"]["RDMA"])
        per = (bad["transit_us"] - bad["size_mb"] / nominal * 1000.0).clip(lower=0.0) * bad["exposed"]
        by_op = _attribute(list(bad["op"]), list(per))
        saving = float(per.sum())
        rows = [[r.op, round(r.size_mb, 4), round(r.transit_us / 1000.0, 3), _round(r.bandwidth_gbps)]
                for r in bad.itertuples(index=False)]
        return [ctx.finding(
            rule="communication.rdma-retransmission",
            title=f"{len(bad)} RDMA transfers took over {limit_us / 1e6:g} s: likely retransmission",
            severity=_severity(ctx, saving), ops=sorted(by_op, key=lambda k: -by_op[k]) or list(bad["op"]),
            evidence={"min_transit_ms": limit_us / 1000.0, "transfers": int(len(bad)),
                      "table": table(["op", "size_mb", "transit_ms", "bandwidth_gbps"], rows)},
            estimated_saving_us=saving,
            basis=f"transit time beyond the size at {nominal:g} GB/s (nominal_gbps.RDMA), times the exposed share",
            recommendation="RDMA transfers this slow are retransmitting after packet loss. Check the NIC and switch "
                           "counters of the ranks involved (hccn_tool -i <device> -stat -g), optics and cables, "
                           "PFC/ECN configuration, and that HCCL_RDMA_TC / HCCL_RDMA_SL match the switch QoS.",
            fix=Fix("config", "check the RDMA network (NIC/switch counters, PFC/ECN, optics)",
                    {"commands": ["hccn_tool -i 0 -stat -g", "hccn_tool -i 0 -link -g"]}),
            confidence=float(ctx.rules["confidence"]["rdma_retransmission"]), saving_by_op=by_op)]


    # ----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="communication.late-peer",
        title="A peer outside the profile holds the collectives",
        what="Where the communication tasks record their links (HCCL tasks of a Level1+ trace, hccl_*.json, the .db "
             "COMMUNICATION_TASK_INFO), the time model keeps the notify waits inside the uncovered communication of "
             "the analyzed steps per peer rank; each instant of a collective is held by the peers waited on then "
             "(shared among them). The peer that held the collectives the longest is the late one, together with "
             "the peers whose waits cover {late_peer.co_late_share} of its own (they arrived about as late). Fires "
             "when the uncovered time they alone hold -- no other peer waited on -- reaches {late_peer.min_share} "
             "of the window and the analysis does not hold them (a single-rank input holds only itself; with "
             "several ranks the cluster knowledge base judges the peers). Saving: {late_peer.recoverable} of that "
             "time (the share of waiting overall.uncovered-communication counts recoverable), attributed to the "
             "collectives it held. Where only communication_matrix.json / CommAnalyzerMatrix records the links "
             "and wait or idle time reaches {late_peer.min_share} of the window, reports (info, no saving) the "
             "group's members the profile lacks and its slowest links by transit time: no wait is attributed to a "
             "link.",
        why="A collective ends when its last member arrives. Waiting on one link means that peer was late: what "
            "delayed it (longer compute, a host stall, its own wait upstream) is in its profile, which this one "
            "does not hold. It is the mechanism behind the waiting of overall.uncovered-communication: this finding "
            "takes the waiting it explains out of that one, so the time counts once.",
        how_to_fix="Profile the late rank too -- every rank of the job, at a level whose HCCL tasks record their "
                   "links -- and analyze them together: the cluster findings then name what the late rank did "
                   "before the collective.",
        thresholds=("late_peer", "confidence", "severity"),
        needs=("timeline", "comm"),
        explains=("overall.uncovered-communication",),
    ))
    def late_peer(self, ctx: AnalysisContext) -> list[Finding]:
        cfg = ctx.rules["late_peer"]
        profile = ctx.profile
        if profile.meta.ranks_in_input > 1:
            ctx.note("communication.late-peer: left to the cluster knowledge base, which sees every rank of the input")
            return []
        waits = window_waits(profile.time)
        if waits is None:
            return self._group_coverage(ctx, cfg)
        top = peer_totals(waits).iloc[0]
        found = late_peer_finding(ctx, "communication.late-peer", cfg, waits, top, window_us(profile), "this profile",
                                  float(ctx.rules["confidence"]["late_peer"]), profile.meta.rank,
                                  named=comm_op_names(profile, ctx.rules["comm_cores"]))
        return [found] if found is not None else []

    def _group_coverage(self, ctx: AnalysisContext, cfg: Mapping[str, Any]) -> list[Finding]:
        """No link records its wait: the group's members the profile lacks and its slowest links (info)."""
        t = ctx.profile.time
        kinds = t.uncovered_by_kind
        waiting = kinds.get("wait", 0.0) + kinds.get("idle", 0.0)
        if t.window_us <= 0 or waiting < float(cfg["min_share"]) * t.window_us:
            return []
        matrix = ctx.profile.extras.get("communication_matrix")
        matrix = matrix if isinstance(matrix, pd.DataFrame) and len(matrix) else None
        if matrix is None:
            if kinds.get("wait", 0.0) >= float(cfg["min_share"]) * t.window_us:
                ctx.note("communication.late-peer: the notify waits of this profile record no peer rank (the "
                         "device's own task records name none, as at profiler Level0): profile with Level1 or "
                         "higher to name the rank the collectives wait for")
            return []
        source = ctx.profile.meta.sources.get("communication_matrix", "communication_matrix.json")
        found = group_coverage_finding(ctx, "communication.late-peer", cfg, [matrix], {}, waiting, source,
                                       "this profile", float(ctx.rules["confidence"]["group_coverage"]))
        return [found] if found is not None else []


# ---------------------------------------------------------------------------------------------------------
# shared helpers of the checks
# ---------------------------------------------------------------------------------------------------------
def _severity(ctx: AnalysisContext, saving: float) -> Any:
    window = window_us(ctx.profile)
    return severity_for(saving / window if window > 0 else 0.0, ctx.rules["severity"])


def _exposed_budget(ctx: AnalysisContext) -> dict[str, float]:
    """Per communication op name: its exposed time (elapse x the uncovered share of its step) -- what all the
    rules' savings on the op may add up to."""
    by_step, overall = exposed_fraction(ctx.profile)
    profile = ctx.profile
    if len(profile.comm):
        c = comm_op_times(profile.comm)
        names, steps, elapse = c["name"].to_numpy(), c["step"].to_numpy(dtype="float64"), c["elapse_us"].to_numpy()
    else:
        ops = profile.ops
        sub = ops[isin_mask(ops["core"], ctx.rules["comm_cores"])] if len(ops) else ops
        if not len(sub):
            return {}
        names = sub["name"].astype(str).to_numpy()
        steps = sub["step"].to_numpy(dtype="float64")
        elapse = sub["duration_us"].to_numpy(dtype="float64")
    exposed = elapse * _frac(steps, by_step, overall)
    return {str(k): float(v) for k, v in pd.Series(exposed, index=names).groupby(level=0).sum().items()}


def _within_exposed_time(ctx: AnalysisContext, findings: list[Finding]) -> list[Finding]:
    """In rule order, each finding keeps per op at most what the op's exposed time has left."""
    budget = _exposed_budget(ctx)
    out = []
    for f in findings:
        by_op = {}
        for op, v in f.saving_by_op.items():
            left = budget.get(op)
            if left is None:
                by_op[op] = v
                continue
            by_op[op] = min(v, left)
            budget[op] = left - by_op[op]
        saving = sum(by_op.values())
        if saving < f.estimated_saving_us - 1e-6:
            f = replace(f, saving_by_op=by_op, estimated_saving_us=saving, severity=_severity(ctx, saving),
                        basis=f.basis + "; per op at most what the op's exposed communication time has left after "
                                        "the rules before this one")
        out.append(f)
    return out


def _transfer_args(tasks: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """size(Byte), transport type and link type of each HCCL task (its trace args)."""
    size, transport, link = [], [], []
    for a in tasks["args"]:
        a = a if isinstance(a, dict) else {}
        try:
            size.append(float(a.get("size(Byte)")))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            size.append(np.nan)
        transport.append(str(a.get("transport type", "")))
        link.append(str(a.get("link type", "")))
    return np.array(size, dtype="float64"), np.array(transport, dtype=object), np.array(link, dtype=object)


def _windows(ctx: AnalysisContext, cand: pd.DataFrame) -> tuple[np.ndarray, np.ndarray] | None:
    """[start, end) of each candidate transfer's op: communication.json times, else the ops table."""
    s = cand["start_us"].to_numpy(dtype="float64")
    e = s + cand["elapse_us"].to_numpy(dtype="float64")
    if np.isfinite(s).all() and np.isfinite(e).all():
        return s, e
    ops = ctx.profile.ops
    sub = ops[isin_mask(ops["core"], ctx.rules["comm_cores"])]
    if not len(sub):
        return None
    first = sub.groupby(sub["name"].astype(str)).agg(start=("start_us", "min"), dur=("duration_us", "max"))
    st = cand["op"].map(first["start"]).to_numpy(dtype="float64")
    du = cand["op"].map(first["dur"]).to_numpy(dtype="float64")
    s = np.where(np.isfinite(s), s, st)
    e = np.where(np.isfinite(e), e, st + du)
    return (np.nan_to_num(s, nan=0.0), np.nan_to_num(e, nan=0.0)) if np.isfinite(st).any() else None


def _parents(op_events: pd.DataFrame, t_start: np.ndarray) -> np.ndarray:
    """Name of the HCCL op whose interval contains each task start ("" when none)."""
    out = np.full(len(t_start), "", dtype=object)
    if not len(op_events):
        return out
    o = op_events.sort_values("start_us")
    os_ = o["start_us"].to_numpy(dtype="float64")
    oe = os_ + o["duration_us"].fillna(0.0).to_numpy(dtype="float64")
    on = o["name"].astype(str).to_numpy()
    k = np.searchsorted(os_, t_start, side="right") - 1
    ok = (k >= 0) & (t_start < oe[np.maximum(k, 0)])
    out[ok] = on[k[ok]]
    return out


# ---------------------------------------------------------------------------------------------------------
# advice fitted to the run
# ---------------------------------------------------------------------------------------------------------
def _merge_advice(ctx: AnalysisContext) -> tuple[str, Fix | None]:
    fam = rc.family(ctx)
    if fam == rc.TORCH:
        return ("Merge them: larger gradient buckets (DDP bucket_cap_mb, Megatron --ddp-bucket-size), coalesced "
                "all-reduce of flattened tensors, fewer and larger point-to-point messages.",
                Fix("code", "merge small collectives into larger buckets",
                    {"snippet": "model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=100)\n"
                                "# or torch.distributed.all_reduce_coalesced / flatten the tensors first"}))
    if fam == rc.MINDSPORE:
        return ("Merge them: fuse gradient all-reduces into larger buckets (comm_fusion in "
                "mindspore.set_auto_parallel_context), and send fewer, larger pipeline messages.",
                Fix("code", "fuse gradient all-reduces into larger buckets",
                    {"snippet": "mindspore.set_auto_parallel_context(\n"
                                "    comm_fusion={\"allreduce\": {\"mode\": \"size\", \"config\": 64}})"}))
    return ("Merge them into fewer, larger collectives (flatten the tensors before communicating).", None)


def _contention_advice(ctx: AnalysisContext) -> tuple[str, Fix | None]:
    lead = ("These SDMA transfers share HBM bandwidth with MatMuls running at the same time and reach less than the "
            "threshold bandwidth. Move the collectives to phases without large MatMuls (e.g. overlap them with "
            "vector work)")
    mc2 = soc_matches(ctx.platform.get("soc"), ctx.rules["bandwidth_contention"]["mc2_socs"])
    if rc.family(ctx) == rc.TORCH and mc2:
        return (lead + ", or use fused compute-communication ops (torch_npu.npu_mm_all_reduce_base, MC2) that "
                "pipeline the two.",
                Fix("code", "use a fused MatMul + AllReduce for tensor-parallel layers",
                    {"snippet": "out = torch_npu.npu_mm_all_reduce_base(x, weight, hcom_group_name)"}))
    return lead + ".", None


def _alignment_advice(ctx: AnalysisContext, align: int) -> tuple[str, Fix | None]:
    half = rc.half_dtype(ctx.platform)
    rec = (f"Pad the communicated tensors to multiples of {align} bytes: sizes in multiples of {align // 2} "
           f"{half} or {align // 4} fp32 elements (hidden size, vocabulary, bucket sizes), so every SDMA transfer "
           "moves whole aligned blocks.")
    fam = rc.family(ctx)
    if fam == rc.TORCH:
        return rec, Fix("code", f"pad communicated tensors to {align}-byte multiples",
                        {"snippet": f"pad = (-t.numel() * t.element_size()) % {align} // t.element_size()\n"
                                    "t = torch.nn.functional.pad(t.flatten(), (0, pad))"})
    if fam == rc.MINDSPORE:
        return rec, Fix("code", f"pad communicated tensors to {align}-byte multiples",
                        {"snippet": f"pad = (-t.size * t.itemsize) % {align} // t.itemsize\n"
                                    "t = mindspore.ops.pad(t.flatten(), (0, pad))"})
    return rec, None


def _round(v: Any) -> float | None:
    try:
        f = float(v)
    except (TypeError, ValueError):
        return None
    return round(f, 4) if np.isfinite(f) else None


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [CommunicationKB]
