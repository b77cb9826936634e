"""Writes ``add_custom_950pr/``: an msprof op capture in the newer JSONL form (FORMATS.md 12), see README.md.

Every number is derived from a few per-block hardware event counts with the formulas the producer applies
(hicann/asc-tools ``npu_compute/src/npu_compute/pmu_csv_writer.cpp``): a core's time is its cycles over the clock,
a ratio an event's active cycles over the core's cycles, a bandwidth bytes (events x bytes per event) over the core's
time in GiB/s, a data volume bytes / 1024 KB; ``summary.jsonl`` holds each metric's mean over the rows (counters
rounded to whole numbers, everything else to six decimals, ``null`` where no row has a value). Run it from this
directory to regenerate the files (``python3 make_fixture.py``); the tests read the files, not this script.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

OUT = Path(__file__).resolve().parent / "add_custom_950pr"
SOC = "Ascend950PR_9599"
VECTOR_MHZ = 1600.0
GIB = 1024.0 ** 3
TASK_DURATION_US = 15.42

# per block: vector-core cycles and the events pmu_csv_writer.cpp reads (ids as in its source)
CYCLES = [20480, 20544, 20608, 20672, 20736, 20800, 20864, 23552]
EVENTS = {
    "vec": 0x501, "scalar": 0x1, "mte2": 0x202, "mte3": 0x203, "mte2_instr": 0x200, "mte3_instr": 0x201,
    "icache_access": 0x34, "icache_miss": 0x35, "gm_read": 0x422, "gm_write": 0x423, "dcache_miss_a": 0x57F,
    "dcache_miss_b": 0x580, "ub_read_vector": 0x571, "ub_write_vector": 0x572,
}
L2_READ = ("read_close_hit", "read_close_miss", "read_close_victim", "read_far_hit", "read_far_miss",
           "read_far_victim")
L2_WRITE = ("write_close_hit", "write_close_miss", "write_close_victim", "write_far_hit", "write_far_miss",
            "write_far_victim")


def block_events(b: int) -> dict[str, float]:
    cycles = CYCLES[b]
    return {"cycles": cycles, "vec": round(0.55 * cycles), "scalar": round(0.12 * cycles),
            "mte2": round(0.62 * cycles), "mte3": round(0.31 * cycles), "mte2_instr": 64, "mte3_instr": 32,
            "icache_access": 3000 + 10 * b, "icache_miss": 30 + b, "gm_read": 2048, "gm_write": 1024,
            "dcache_miss_a": 16, "dcache_miss_b": 16, "ub_read_vector": 1536, "ub_write_vector": 1024,
            "read_close_hit": 1500 + 4 * b, "read_close_miss": 300, "read_close_victim": 12, "read_far_hit": 200,
            "read_far_miss": 36, "read_far_victim": 0, "write_close_hit": 900, "write_close_miss": 100,
            "write_close_victim": 4, "write_far_hit": 20, "write_far_miss": 0, "write_far_victim": 0}


def bw(nbytes: float, time_us: float) -> float:
    return nbytes * 1e6 / GIB / time_us


def number(v: float | None) -> str:
    """The producer's ``Number``: 17 significant digits, NA for a missing value."""
    return "NA" if v is None else format(float(v), ".17g")


def rows() -> dict[str, tuple[list[str], list[list[float | None]]]]:
    """section -> (header, rows of values) for the vector kernel's 8 blocks (one ``vector0`` row each)."""
    common = ["block_id", "sub_block_id", "aic_time(us)", "aic_total_cycles", "aiv_time(us)", "aiv_total_cycles"]
    pipe_h = common + ["aiv_vec_time(us)", "aiv_vec_ratio", "aic_cube_time(us)", "aic_cube_ratio", "aic_scalar_time(us)",
                       "aic_scalar_ratio", "aiv_scalar_time(us)", "aiv_scalar_ratio", "aic_fixpipe_time(us)",
                       "aic_fixpipe_ratio", "aic_mte1_time(us)", "aic_mte1_ratio", "aic_mte2_time(us)", "aic_mte2_ratio",
                       "aiv_mte2_time(us)", "aiv_mte2_ratio", "aic_mte3_time(us)", "aic_mte3_ratio", "aiv_mte3_time(us)",
                       "aiv_mte3_ratio", "aic_icache_miss_rate", "aiv_icache_miss_rate", "aic_mte3_active_bw(GB/s)",
                       "aiv_mte3_active_bw(GB/s)", "aic_fixpipe_active_bw(GB/s)", "aiv_mte2_active_bw(GB/s)",
                       "aic_mte1_active_bw(GB/s)", "aic_mte2_active_bw(GB/s)"]
    mem_h = common + ["aiv_ub_to_gm_bw(GB/s)", "aiv_gm_to_ub_bw(GB/s)", "aic_l1_read_bw(GB/s)", "aic_l1_write_bw(GB/s)",
                      "aic_main_mem_read_bw(GB/s)", "aic_main_mem_write_bw(GB/s)", "aic_mte1_instructions",
                      "aic_mte1_ratio", "aic_mte2_instructions", "aic_mte2_ratio", "aic_mte3_instructions",
                      "aic_mte3_ratio", "aiv_main_mem_read_bw(GB/s)", "aiv_main_mem_write_bw(GB/s)",
                      "aiv_mte2_instructions", "aiv_mte2_ratio", "aiv_mte3_instructions", "aiv_mte3_ratio",
                      "read_main_memory_datas(KB)", "write_main_memory_datas(KB)", "GM_to_L1_datas(KB)",
                      "L0C_to_L1_datas(KB)", "L0C_to_GM_datas(KB)", "GM_to_UB_datas(KB)", "UB_to_GM_datas(KB)",
                      "GM_to_L1_bw_usage_rate(%)", "L0C_to_L1_bw_usage_rate(%)", "L0C_to_GM_bw_usage_rate(%)",
                      "GM_to_UB_bw_usage_rate(%)", "UB_to_GM_bw_usage_rate(%)"]
    l0_h = common + ["aic_l0a_read_bw(GB/s)", "aic_l0a_write_bw(GB/s)", "aic_l0b_read_bw(GB/s)",
                     "aic_l0b_write_bw(GB/s)", "aic_l0c_read_bw_cube(GB/s)", "aic_l0c_write_bw_cube(GB/s)"]
    ub_h = common + ["aiv_ub_read_bw_vector(GB/s)", "aiv_ub_write_bw_vector(GB/s)", "aiv_ub_write_bw_gm(GB/s)",
                     "aiv_ub_read_bw_gm(GB/s)"]
    l2_h = common + [f"{p}{s}" for p in ("aic_", "aiv_") for s in (*L2_READ, "read_hit_rate(%)", *L2_WRITE,
                                                                   "write_hit_rate(%)")]
    arith_h = ["block_id", "sub_block_id", "aic_time(us)", "aic_total_cycles", "aic_cube_ratio", "aic_cube_fp_ratio",
               "aic_cube_int_ratio", "aic_cube_total_instr_number", "aic_cube_fp_instr_number",
               "aic_cube_int_instr_number", "aiv_time(us)", "aiv_total_cycles", "aiv_vec_ratio", "aiv_vec_vf_ratio",
               "aiv_vec_sfu_ratio", "aiv_vec_simt_vf_ratio"]
    out: dict[str, tuple[list[str], list[list[float | None]]]] = {
        "PipeUtilization": (pipe_h, []), "Memory": (mem_h, []), "MemoryL0": (l0_h, []), "MemoryUB": (ub_h, []),
        "L2Cache": (l2_h, []), "ArithmeticUtilization": (arith_h, [])}
    na = None
    for b in range(len(CYCLES)):
        e = block_events(b)
        c = e["cycles"]
        t = c / VECTOR_MHZ
        key = [b, "vector0"]
        head = [*key, na, na, t, c]
        xgu = max(0.0, e["gm_read"] - e["dcache_miss_a"] - e["dcache_miss_b"])
        out["PipeUtilization"][1].append(head + [
            e["vec"] / VECTOR_MHZ, e["vec"] / c, na, na, na, na, e["scalar"] / VECTOR_MHZ, e["scalar"] / c, na, na,
            na, na, na, na, e["mte2"] / VECTOR_MHZ, e["mte2"] / c, na, na, e["mte3"] / VECTOR_MHZ, e["mte3"] / c,
            na, e["icache_miss"] / e["icache_access"], na, na, na, bw(xgu * 128, e["mte2"] / VECTOR_MHZ), na, na])
        gm_to_ub = bw(xgu * 128, t)
        out["Memory"][1].append(head + [
            na, gm_to_ub, na, na, na, na, na, na, na, na, na, na, bw(e["gm_read"] * 128, t),
            bw(e["gm_write"] * 128, t), e["mte2_instr"], e["mte2"] / c, e["mte3_instr"], e["mte3"] / c,
            na, na, na, na, na, xgu * 128 / 1024, na, na, na, na, 100.0 * min(gm_to_ub, 177.96) / 177.96, na])
        out["MemoryL0"][1].append(head + [na] * 6)
        out["MemoryUB"][1].append(head + [
            bw(e["ub_read_vector"] * 256, t), bw(e["ub_write_vector"] * 256, t), gm_to_ub, na])
        aiv_l2: list[float | None] = [e[k] for k in L2_READ]
        aiv_l2.append(100.0 * (e["read_close_hit"] + e["read_far_hit"]) / sum(e[k] for k in L2_READ))
        aiv_l2 += [e[k] for k in L2_WRITE]
        aiv_l2.append(100.0 * (e["write_close_hit"] + e["write_far_hit"]) / sum(e[k] for k in L2_WRITE))
        out["L2Cache"][1].append(head + [na] * 14 + aiv_l2)
        out["ArithmeticUtilization"][1].append(
            [*key, na, na, na, na, na, na, na, na, t, c, e["vec"] / c, 0.9 * e["vec"] / c, 0.02, 0.0])
    return out


COUNTERS = ("_total_cycles", "_instructions", "_instr_number", "_hit", "_miss", "_victim")


def summary_record(section: str, header: list[str], values: list[list[float | None]]) -> dict[str, object]:
    """A Section summary record: every metric of the CSV (no block_id/sub_block_id), its mean over the rows."""
    record: dict[str, object] = {"category": section}
    for i, name in enumerate(header):
        if name in ("block_id", "sub_block_id"):
            continue
        col = [r[i] for r in values if r[i] is not None]
        if not col:
            record[name] = None
        elif name.endswith(COUNTERS):
            record[name] = round(statistics.fmean(col))
        else:
            record[name] = round(statistics.fmean(col), 6)
    return record


def main() -> None:
    OUT.mkdir(exist_ok=True)
    tables = rows()
    for section, (header, values) in tables.items():
        lines = [",".join(header)] + [",".join(v if isinstance(v, str) else str(v) if i == 0 else number(v)
                                               for i, v in enumerate(r)) for r in values]
        (OUT / f"{section}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    order = ("PipeUtilization", "Memory", "MemoryL0", "MemoryUB", "L2Cache", "ArithmeticUtilization")
    records = [summary_record(s, *tables[s]) for s in order]
    memory = records[1]
    pipe = tables["PipeUtilization"]
    vec = [r[pipe[0].index("aiv_vec_ratio")] for r in pipe[1]]
    times = [r[pipe[0].index("aiv_time(us)")] for r in pipe[1]]
    read = memory["aiv_main_mem_read_bw(GB/s)"]
    write = memory["aiv_main_mem_write_bw(GB/s)"]
    records.append({
        "category": "OpInfoSummary", "Op Name": "add_custom", "Op Type": "vector",
        "Task Duration(us)": TASK_DURATION_US, "Block Dim": len(CYCLES), "Mix Block Dim": None, "Device Id": 0,
        "Pid": 42, "Current Freq": int(VECTOR_MHZ), "Rated Freq": int(VECTOR_MHZ),
        "aicore_parallel_utilization": round(statistics.fmean(vec), 6),
        "aicore_parallel_balance": round(1.0 - statistics.pstdev(times) / statistics.fmean(times), 6),
        "aicore_gm_bw_theoretical(GB/s)": 1600, "aicore_gm_read_bw(GB/s)": read, "aicore_gm_write_bw(GB/s)": write,
        "aicore_gm_bw_usage_rate(%)": round(100.0 * (float(read) + float(write)) / 1600, 6)})  # type: ignore[arg-type]
    compact = {"separators": (",", ":"), "ensure_ascii": False}
    (OUT / "summary.jsonl").write_text("".join(json.dumps(r, **compact) + "\n" for r in records),  # type: ignore[arg-type]
                                       encoding="utf-8")
    hardware = [
        {"category": "Host Info", "cpu physical count": 2, "cpu logical count": 192,
         "memory total size(MB)": 1547405.5, "disk total size(GB)": 3518.64},
        {"category": "Device Info", "npu count": 1, "chip info": f"{SOC} V100", "arch info": "3510"},
        {"category": "CPU Information", "control cpu count": 4, "ai cpu count": 8, "ai cpu frequency(MHZ)": 1500},
        {"category": "AI Core Information", "ai core count": 32, "ai cube count": 16, "ai vector count": 16,
         "ai cube frequency(MHZ)": 1800, "ai vector frequency(MHZ)": 1600},
        {"category": "Memory Information", "hbm total(MB)": 65536, "hbm used(MB)": 16384, "hbm frequency(MHZ)": 3200}]
    (OUT / "HardwareInfo.jsonl").write_text("".join(json.dumps(r, **compact) + "\n" for r in hardware),  # type: ignore[arg-type]
                                            encoding="utf-8")
    events = [{"cname": cname, "dur": dur, "name": pipe_name, "ph": "X", "pid": "group0.veccore0", "tid": pipe_name,
               "ts": ts} for cname, pipe_name, ts, dur in (("yellow", "MTE2", 0.0, 2.5), ("rail_idle", "VECTOR", 2.5, 4.0),
                                                           ("rail_animation", "MTE3", 6.5, 1.5),
                                                           ("startup", "SCALAR", 0.0, 0.75))]
    trace = {"displayTimeUnit": "ns", "profilingType": "op", "schemaVersion": 1, "traceEvents": events}
    (OUT / "PipeTrace.json").write_text(json.dumps(trace, **compact) + "\n", encoding="utf-8")  # type: ignore[arg-type]


if __name__ == "__main__":
    main()
