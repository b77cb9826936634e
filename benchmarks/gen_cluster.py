#!/usr/bin/env python3
"""Generate a torch_npu (text export) cluster profile with an injected slow rank, slow link and pipeline bubble.

    python benchmarks/gen_cluster.py --out DIR --ranks 16 [--tp 2 --pp 2] [--steps 3 --ops 60] [--seed 0]

Writes one ``<host>_<pid>_<time>_ascend_pt`` directory per rank, laid out as torch_npu writes them (file formats
copied from the real samples under shared/samples/Ascend__msinsight/test/st/level2 and test/data/pytorch/text):
``ASCEND_PROFILER_OUTPUT/{kernel_details.csv, step_trace_time.csv, trace_view.json, communication.json,
communication_matrix.json}``, ``profiler_info_<rank>.json``, ``profiler_metadata.json`` (ENV_VARIABLES,
distributed_args, parallel_group_info keyed by HCCL group name) and ``PROF_*/device_<id>/info.json.<id>``.
Also ``injected.json`` at the top: what was injected, for tests to check findings against.

The timing is one consistent model of a synchronous step, per rank r (Megatron rank order: tp fastest, then dp,
then pp; 8 ranks per node, HCCS inside a node, RDMA between nodes):

    free (host launch gap) | pipeline bubble (p2p receive wait) | compute kernels |
    DP all-reduce (wait for the group's last arrival, then ring transit at the group's slowest link) |
    world all-reduce (wait for the slowest DP group, then a short transit) | tail free

so every rank's step ends at the same time and the waiting ranks show the wait in communication.json. The
injected faults: ``--slow-rank`` computes ``--slow-factor`` more; ``--slow-link`` (a DP ring link, global
``src-dst``) runs at ``--link-factor`` of its bandwidth; ``--bubble-stage`` ranks wait ``--bubble-ms`` more for
the previous stage. Deterministic for a seed.
"""

from __future__ import annotations

import argparse
import json
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path

HEADER = ["Step Id", "Device_id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State",
          "Accelerator Core", "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim", "Mix Block Dim",
          "HF32 Eligible", "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes",
          "Output Data Types", "Output Formats", "Context ID", "aicore_time(us)", "aic_total_cycles",
          "aic_mac_time(us)", "aic_mac_ratio", "aic_mte2_time(us)", "aic_mte2_ratio", "aiv_time(us)",
          "aiv_vec_time(us)", "aiv_vec_ratio", "aiv_mte2_time(us)", "aiv_mte2_ratio"]
STEP_HEADER = ("Device_id,Step,Computing,Communication(Not Overlapped),Overlapped,Communication,Free,Stage,Bubble,"
               "Communication(Not Overlapped and Exclude Receive),Preparing")
# (name, type, core, mean duration us, block dim, input shapes, dtypes, output shape, mac/vec ratio, mte2 ratio)
KERNELS = [
    ("aclnnMatmul_MatMulV3Common_MatMulV3", "MatMulV3", "AI_CORE", 420.0, 24, "4096,4096;4096,11008",
     "DT_BF16;DT_BF16", "4096,11008", 0.82, 0.35),
    ("aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore", "FlashAttentionScore", "MIX_AIC", 380.0,
     24, "1,32,4096,128;1,32,4096,128;1,32,4096,128", "DT_BF16;DT_BF16;DT_BF16", "1,32,4096,128", 0.7, 0.4),
    ("aclnnRmsNorm_RmsNormAiCore_RmsNorm", "RmsNorm", "AI_VECTOR_CORE", 45.0, 48, "4096,4096;4096",
     "DT_BF16;DT_BF16", "4096,4096", 0.45, 0.6),
    ("aclnnSwiGlu_SwiGluAiCore_SwiGlu", "SwiGlu", "AI_VECTOR_CORE", 60.0, 48, "4096,22016", "DT_BF16",
     "4096,11008", 0.5, 0.55),
    ("aclnnAdd_AddAiCore_Add", "Add", "AI_VECTOR_CORE", 20.0, 48, "4096,4096;4096,4096", "DT_BF16;DT_BF16",
     "4096,4096", 0.3, 0.75),
]
TRANSPORTS = ("HCCS", "PCIE", "RDMA", "SDMA", "SIO")
RANKS_PER_NODE = 8
BANDWIDTH = {"HCCS": 25.0, "RDMA": 22.0}
"""GB/s a healthy link reaches here (below the 910B expected 28 / 25 GB/s, as real links do)."""
T0 = 1_736_413_971_000_000.0


@dataclass
class Layout:
    tp: int
    dp: int
    pp: int

    @property
    def world(self) -> int:
        return self.tp * self.dp * self.pp

    def index(self, rank: int) -> dict[str, int]:
        return {"tp": rank % self.tp, "dp": (rank // self.tp) % self.dp, "pp": rank // (self.tp * self.dp)}

    def members(self, rank: int, dim: str) -> list[int]:
        i = self.index(rank)
        out = []
        for r in range(self.world):
            j = self.index(r)
            if all(j[d] == i[d] for d in ("tp", "dp", "pp") if d != dim):
                out.append(r)
        return out


def group_name(members: list[int], kind: str) -> str:
    """A stable HCCL-style numeric group name (real ones are hashes of the communicator)."""
    return str(3985310000000000000 + zlib.crc32(f"{kind}:{members}".encode()) * 1000)


def node(rank: int) -> int:
    return rank // RANKS_PER_NODE


def transport(a: int, b: int) -> str:
    return "HCCS" if node(a) == node(b) else "RDMA"


@dataclass
class RankStep:
    free_pre: float
    bubble: float
    compute: float
    kernels: list[tuple[int, float]]
    arrival: float = 0.0
    dp_wait: float = 0.0
    dp_transit: float = 0.0
    dp_end: float = 0.0
    world_wait: float = 0.0
    links: dict[tuple[int, int], float] = field(default_factory=dict)


def simulate(layout: Layout, steps: int, ops: int, rnd: random.Random, a: argparse.Namespace
             ) -> list[list[RankStep]]:
    """Per step, per rank: the timing model of the module docstring."""
    out = []
    bubble_ranks: set[int] = set()
    if a.bubble_stage is not None:
        bubble_ranks = {r for r in range(layout.world) if layout.index(r)["pp"] == a.bubble_stage}
    for _step in range(steps):
        rows = []
        for r in range(layout.world):
            kernels = []
            for k in range(ops):
                i = k % len(KERNELS)
                dur = max(1.0, rnd.gauss(KERNELS[i][3], KERNELS[i][3] * 0.03))
                if r == a.slow_rank:
                    dur *= 1.0 + a.slow_factor
                kernels.append((i, dur))
            base_bubble = 150.0 if layout.pp > 1 else 0.0
            bubble = base_bubble + (a.bubble_ms * 1000.0 if r in bubble_ranks else 0.0) + rnd.uniform(0, 20)
            rows.append(RankStep(free_pre=rnd.uniform(300.0, 400.0), bubble=bubble,
                                 compute=sum(d for _, d in kernels), kernels=kernels))
        for s in rows:
            s.arrival = s.free_pre + s.bubble + s.compute + ops * 2.0  # 2 us launch gap per kernel
        done: set[int] = set()
        for r in range(layout.world):
            if r in done:
                continue
            group = layout.members(r, "dp")
            done.update(group)
            last = max(rows[g].arrival for g in group)
            transit = 0.0
            if len(group) > 1:
                for j, g in enumerate(group):
                    dst = group[(j + 1) % len(group)]
                    bw = BANDWIDTH[transport(g, dst)]
                    if a.slow_link and (g, dst) == a.slow_link:
                        bw *= a.link_factor
                    link_t = a.dp_mb / bw * 1000.0  # MB / (GB/s) = ms -> us
                    rows[g].links[(g, dst)] = link_t
                    transit = max(transit, link_t)
            for g in group:
                rows[g].dp_wait = last - rows[g].arrival
                rows[g].dp_transit = transit
                rows[g].dp_end = last + transit
        world_end = max(s.dp_end for s in rows)
        for s in rows:
            s.world_wait = world_end - s.dp_end
        out.append(rows)
    return out


def comm_entry(start: float, wait: float, transit: float, sizes: dict[str, tuple[float, float]]) -> dict:
    bw = {}
    for t in TRANSPORTS:
        size, time_us = sizes.get(t, (0.0, 0.0))
        bw[t] = {"Transit Size(MB)": size, "Transit Time(ms)": time_us / 1000.0,
                 "Bandwidth(GB/s)": round(size / (time_us / 1000.0), 4) if time_us else 0,
                 "Large Packet Ratio": 1.0 if size else 0, "Size Distribution": {}}
    elapse = wait + transit
    return {"Communication Time Info": {
        "Start Timestamp(us)": start, "Elapse Time(ms)": elapse / 1000.0, "Transit Time(ms)": transit / 1000.0,
        "Wait Time(ms)": wait / 1000.0, "Synchronization Time(ms)": wait / 1000.0, "Idle Time(ms)": 0.0,
        "Wait Time Ratio": round(wait / (wait + transit), 4) if wait + transit else 0,
        "Synchronization Time Ratio": round(wait / (wait + transit), 4) if wait + transit else 0},
        "Communication Bandwidth Info": bw}


def csv_cell(x: object) -> str:
    s = str(x)
    return '"' + s.replace('"', '""') + '"' if any(c in s for c in ',"\t\n') else s


def write_rank(root: Path, rank: int, layout: Layout, sim: list[list[RankStep]], a: argparse.Namespace) -> None:
    device = rank % RANKS_PER_NODE
    pt = root / f"node{node(rank):04d}_{20000 + rank}_20250101000000000_ascend_pt"
    out = pt / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    groups = {dim: layout.members(rank, dim) for dim in ("tp", "dp", "pp")}
    world = list(range(layout.world))
    names = {dim: group_name(m, dim) for dim, m in groups.items()}
    names["world"] = group_name(world, "world")

    kd = [",".join(HEADER)]
    tv: list[dict] = [{"ph": "M", "name": "process_name", "pid": p, "tid": 0, "args": {"name": n}}
                      for p, n in ((1, "Python"), (2, "Ascend Hardware"), (3, "Overlap Analysis"),
                                   (4, "Communication"))]
    comm: dict = {}
    matrix: dict = {}
    steps_csv = [STEP_HEADER]
    step_start = T0
    task = 1
    for si, rows in enumerate(sim):
        step = si + 1
        s = rows[rank]
        step_len = s.dp_end + s.world_wait + a.world_us + 200.0
        t = step_start + s.free_pre
        tv.append({"ph": "X", "name": f"ProfilerStep#{step}", "pid": 1, "tid": 1, "ts": f"{step_start:.3f}",
                   "dur": step_len, "cat": "cpu_op", "args": {}})
        tv.append({"ph": "X", "name": "Free", "pid": 3, "tid": 3, "ts": f"{step_start:.3f}", "dur": s.free_pre,
                   "args": {}})
        p2p: dict = {}
        if layout.pp > 1:
            recv = f"hcom_receive__{rank % 1000:03d}_{step}_1"
            prev = groups["pp"][(groups["pp"].index(rank) - 1) % len(groups["pp"])]
            mb = 1.0
            link_t = mb / BANDWIDTH[transport(prev, rank)] * 1000.0
            p2p[f"{recv}@{names['pp']}"] = comm_entry(t, s.bubble - link_t, link_t,
                                                      {transport(prev, rank): (mb, link_t)})
            kd.append(_kernel_row(step, device, task, recv, "hcom_receive_", "HCCL", t, s.bubble))
            tv.append({"ph": "X", "name": recv, "pid": 4, "tid": 0, "ts": f"{t:.3f}", "dur": s.bubble, "args": {}})
            tv.append({"ph": "X", "name": "Communication(Not Overlapped)", "pid": 3, "tid": 2, "ts": f"{t:.3f}",
                       "dur": s.bubble, "args": {}})
            task += 1
            t += s.bubble
        comp_start = t
        for i, dur in s.kernels:
            t += 2.0
            k = KERNELS[i]
            kd.append(_kernel_row(step, device, task, k[0], k[1], k[2], t, dur, k))
            tv.append({"ph": "X", "name": k[0], "pid": 2, "tid": 2, "ts": f"{t:.3f}", "dur": dur,
                       "args": {"Task Type": k[2], "Stream Id": 2, "Task Id": task, "Model Id": 4294967295}})
            task += 1
            t += dur
        tv.append({"ph": "X", "name": "Computing", "pid": 3, "tid": 0, "ts": f"{comp_start:.3f}",
                   "dur": t - comp_start, "args": {}})
        coll: dict = {}
        dp_name = f"hcom_allReduce__{zlib.crc32(names['dp'].encode()) % 1000:03d}_{step}_1"
        dp_sizes = {}
        links: dict = {}
        dp_local = groups["dp"].index(rank)
        links[f"{dp_local}-{dp_local}"] = _link("LOCAL", a.dp_mb, a.dp_mb / 80.0)
        if len(groups["dp"]) > 1:
            dst = groups["dp"][(dp_local + 1) % len(groups["dp"])]
            tr = transport(rank, dst)
            link_t = s.links[(rank, dst)]
            dp_sizes = {tr: (a.dp_mb, link_t), "SDMA" if tr == "HCCS" else tr: (a.dp_mb, link_t)}
            links[f"{dp_local}-{groups['dp'].index(dst)}"] = _link(tr, a.dp_mb, link_t / 1000.0)
        coll[f"{dp_name}@{names['dp']}"] = comm_entry(t, s.dp_wait, s.dp_transit, dp_sizes)
        dp_elapse = s.dp_wait + s.dp_transit
        kd.append(_kernel_row(step, device, task, dp_name, "hcom_allReduce_", "HCCL", t, dp_elapse))
        task += 1
        w_name = f"hcom_allReduce__{zlib.crc32(names['world'].encode()) % 1000:03d}_{step}_2"
        w_start = t + dp_elapse
        w_dst = (rank + 1) % layout.world
        w_tr = transport(rank, w_dst)
        coll[f"{w_name}@{names['world']}"] = comm_entry(w_start, s.world_wait, a.world_us,
                                                        {w_tr: (0.004, a.world_us)})
        kd.append(_kernel_row(step, device, task, w_name, "hcom_allReduce_", "HCCL", w_start,
                              s.world_wait + a.world_us))
        task += 1
        for name, start, dur in ((dp_name, t, dp_elapse), (w_name, w_start, s.world_wait + a.world_us)):
            tv.append({"ph": "X", "name": name, "pid": 4, "tid": 0, "ts": f"{start:.3f}", "dur": dur, "args": {}})
            tv.append({"ph": "X", "name": "Communication(Not Overlapped)", "pid": 3, "tid": 2,
                       "ts": f"{start:.3f}", "dur": dur, "args": {}})
        tail = step_start + step_len - 200.0
        tv.append({"ph": "X", "name": "Free", "pid": 3, "tid": 3, "ts": f"{tail:.3f}", "dur": 200.0, "args": {}})
        comm[f"step{step}"] = {"p2p": p2p, "collective": coll}
        matrix[f"step{step}"] = {"p2p": {}, "collective": {
            f"allreduce-top1@{names['dp']}": links, f"allreduce-total@{names['dp']}": links}}
        uncovered = s.bubble + dp_elapse + s.world_wait + a.world_us
        free = s.free_pre + 200.0
        steps_csv.append(",".join(str(round(v, 3)) for v in (
            device, step, s.compute + len(s.kernels) * 2.0, uncovered, 0.0, uncovered, free,
            step_len - s.bubble, s.bubble, uncovered - s.bubble, 120.0)))
        step_start += step_len + 5000.0

    (out / "kernel_details.csv").write_text("\n".join(kd) + "\n")
    (out / "step_trace_time.csv").write_text("\n".join(steps_csv) + "\n")
    (out / "trace_view.json").write_text(json.dumps(tv, separators=(",", ":")))
    (out / "communication.json").write_text(json.dumps(comm))
    (out / "communication_matrix.json").write_text(json.dumps(matrix))
    (pt / f"profiler_info_{rank}.json").write_text(json.dumps({
        "config": {"common_config": {"activities": ["CPU", "NPU"], "with_stack": False},
                   "experimental_config": {"_profiler_level": "Level1", "_aic_metrics": "PipeUtilization"}},
        "rank_id": rank, "torch_npu_version": "2.1.0.post8", "cann_version": "8.0.RC3"}))
    info = {name: {"group_name": dim, "group_rank": groups[dim].index(rank), "global_ranks": groups[dim]}
            for dim, name in names.items() if dim != "world"}
    info[names["world"]] = {"group_name": "default_group", "group_rank": rank, "global_ranks": world}
    (pt / "profiler_metadata.json").write_text(json.dumps({
        "ENV_VARIABLES": {"ASCEND_GLOBAL_LOG_LEVEL": "3", "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True"},
        "distributed_args": {"tensor_model_parallel_size": layout.tp, "pipeline_model_parallel_size": layout.pp,
                             "data_parallel_size": layout.dp, "context_parallel_size": 1,
                             "expert_model_parallel_size": 1, "sequence_parallel": False, "rank": rank,
                             "world_size": layout.world},
        "parallel_group_info": info}, indent=1))
    dev = pt / "PROF_000001_20250101000000000_GENERATED" / f"device_{device}"
    dev.mkdir(parents=True)
    (dev / f"info.json.{device}").write_text(json.dumps({"DeviceInfo": [
        {"id": device, "ai_core_num": 24, "aiv_num": 48, "aic_frequency": "1800"}]}))


def _link(transport_type: str, size_mb: float, time_ms: float) -> dict:
    return {"Transport Type": transport_type, "Transit Size(MB)": size_mb, "Transit Time(ms)": time_ms,
            "Bandwidth(GB/s)": round(size_mb / time_ms, 4) if time_ms else 0, "Op Name": ""}


def _kernel_row(step: int, device: int, task: int, name: str, typ: str, core: str, start: float, dur: float,
                k: tuple | None = None) -> str:
    cells: list[object] = [step, device, 4294967295, task, 2, name, typ, "dynamic", core, f"{start:.3f}\t",
                           f"{dur:.3f}", "0", k[4] if k else 0, 0, "NO"]
    if k is None:
        cells += ["", "", "", "", "", "", "N/A"] + ["N/A"] * 11
    else:
        ins = k[5]
        cells += [f'"{ins}"', k[6], ";".join(["ND"] * len(k[6].split(";"))), f'"{k[7]}"', "DT_BF16", "ND", "N/A"]
        ratio, mte2 = k[8], k[9]
        if core == "AI_VECTOR_CORE":
            cells += [0, 0, 0, 0, 0, 0, f"{dur * 0.97:.3f}", f"{dur * ratio:.3f}", ratio, f"{dur * mte2:.3f}", mte2]
        else:
            cells += [f"{dur * 0.98:.3f}", int(dur * 1800), f"{dur * ratio:.3f}", ratio, f"{dur * mte2:.3f}", mte2,
                      0, 0, 0, 0, 0]
    return ",".join(csv_cell(c) for c in cells)


def generate(out: Path, ranks: int, tp: int = 1, pp: int = 2, steps: int = 3, ops: int = 60, seed: int = 0,
             slow_rank: int | None = -1, slow_factor: float = 0.35, slow_link: str | None = "auto",
             link_factor: float = 0.5, bubble_stage: int | None = -1, bubble_ms: float = 6.0,
             dp_mb: float = 64.0, world_us: float = 60.0) -> dict:
    """Write the cluster under ``out`` and return what was injected (also written to ``out/injected.json``).

    ``-1`` / ``"auto"`` pick defaults that keep the three faults apart: the slow rank is the last rank of the first
    pipeline stage, the slow link a DP ring link of another DP group of the first stage (or of the slow rank's
    group when it has no other), and the bubble is on the last stage. ``None`` disables a fault.
    """
    if ranks % (tp * pp):
        raise SystemExit(f"--ranks {ranks} is not a multiple of tp x pp = {tp * pp}")
    layout = Layout(tp, ranks // (tp * pp), pp)
    stage0 = [r for r in range(ranks) if layout.index(r)["pp"] == 0]
    if slow_rank == -1:
        slow_rank = stage0[-1]
    link: tuple[int, int] | None = None
    if slow_link == "auto":
        if layout.dp > 1:
            groups = sorted({tuple(layout.members(r, "dp")) for r in stage0})
            other = [g for g in groups if slow_rank not in g] or groups
            g = other[0]
            link = (g[0], g[1])
    elif slow_link:
        src, _, dst = slow_link.partition("-")
        link = (int(src), int(dst))
    if bubble_stage == -1:
        bubble_stage = pp - 1 if pp > 1 else None
    a = argparse.Namespace(slow_rank=slow_rank, slow_factor=slow_factor, slow_link=link, link_factor=link_factor,
                           bubble_stage=bubble_stage, bubble_ms=bubble_ms, dp_mb=dp_mb, world_us=world_us)
    rnd = random.Random(seed)
    sim = simulate(layout, steps, ops, rnd, a)
    out.mkdir(parents=True, exist_ok=True)
    for r in range(ranks):
        write_rank(out, r, layout, sim, a)
    injected = {
        "ranks": ranks, "tp": tp, "dp": layout.dp, "pp": pp, "steps": steps, "ops_per_step": ops,
        "slow_rank": slow_rank, "slow_factor": slow_factor,
        "slow_link": None if link is None else {
            "src": link[0], "dst": link[1], "transport": transport(*link),
            "group": group_name(layout.members(link[0], "dp"), "dp"),
            "src_in_group": layout.members(link[0], "dp").index(link[0]),
            "dst_in_group": layout.members(link[0], "dp").index(link[1]), "factor": link_factor},
        "bubble_stage": bubble_stage,
        "bubble_ranks": [r for r in range(ranks) if bubble_stage is not None and layout.index(r)["pp"] ==
                         bubble_stage],
        "bubble_ms": bubble_ms,
    }
    (out / "injected.json").write_text(json.dumps(injected, indent=1))
    return injected


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--ranks", type=int, default=16)
    ap.add_argument("--tp", type=int, default=1)
    ap.add_argument("--pp", type=int, default=2)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--ops", type=int, default=60, help="compute kernels per step and rank")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--slow-rank", type=int, default=-1, help="-1: last rank of the first stage; -2: none")
    ap.add_argument("--slow-factor", type=float, default=0.35)
    ap.add_argument("--slow-link", default="auto", help="global 'src-dst' of a DP ring link, 'auto' or 'none'")
    ap.add_argument("--link-factor", type=float, default=0.5)
    ap.add_argument("--bubble-stage", type=int, default=-1, help="-1: the last stage; -2: none")
    ap.add_argument("--bubble-ms", type=float, default=6.0)
    a = ap.parse_args()
    injected = generate(a.out, a.ranks, a.tp, a.pp, a.steps, a.ops, a.seed,
                        None if a.slow_rank == -2 else a.slow_rank, a.slow_factor,
                        None if a.slow_link == "none" else a.slow_link, a.link_factor,
                        None if a.bubble_stage == -2 else a.bubble_stage, a.bubble_ms)
    print(json.dumps(injected))


if __name__ == "__main__":
    main()
