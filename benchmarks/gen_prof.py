"""Generate a large msprof ``PROF_*`` directory (CANN 8 layout) for benchmarks.

Usage: python benchmarks/gen_prof.py --ops 200000 --out DIR [--seed 0]

Writes ``DIR/PROF_000001_20260101000000000_BENCHMARK/`` with ``mindstudio_profiler_output/op_summary_*.csv``
(header V3, PipeUtilization ``aic_``/``aiv_`` metrics, trailing TABs on start times, quoted shape cells),
``op_statistic_*.csv``, ``api_statistic_*.csv`` and ``msprof_*.json`` (Chrome trace: process metadata, one
"Ascend Hardware" X event per task and one CANN ``Node@launch`` event per task), plus ``device_0/info.json.0``.
A transformer-like layer repeats (42 layers an iteration, op names repeating every iteration as in graph mode);
layers carry a TransData and a decomposed GELU, every 7th an AI CPU int64 op.
Deterministic for a given seed. Columns are built vectorized, so 2M rows take well under a minute.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np
import pandas as pd

HEADER = [
    "Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "OP State", "Task Type",
    "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Mix Block Dim", "HF32 Eligible",
    "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types", "Output Formats",
    "Context ID", "aicore_time(us)", "aic_total_cycles", "aic_mac_time(us)", "aic_mac_ratio", "aic_scalar_time(us)",
    "aic_scalar_ratio", "aic_mte1_time(us)", "aic_mte1_ratio", "aic_mte2_time(us)", "aic_mte2_ratio",
    "aic_fixpipe_time(us)", "aic_fixpipe_ratio", "aic_icache_miss_rate", "aiv_time(us)", "aiv_total_cycles",
    "aiv_vec_time(us)", "aiv_vec_ratio", "aiv_scalar_time(us)", "aiv_scalar_ratio", "aiv_mte2_time(us)",
    "aiv_mte2_ratio", "aiv_mte3_time(us)", "aiv_mte3_ratio", "aiv_icache_miss_rate", "cube_utilization(%)",
]

# (type, core, mean duration us, block dim, input shapes, input dtypes, output shape, (mac, mte2) or (vec, mte2))
LAYER = [
    ("MatMulV2", "AI_CORE", 120.0, 20, "8192,4096;4096,4096", "FLOAT16;FLOAT16", "8192,4096", (0.55, 0.45)),
    ("Add", "AI_VECTOR_CORE", 15.0, 48, "8192,4096;4096", "FLOAT16;FLOAT16", "8192,4096", (0.25, 0.8)),
    ("Div", "AI_VECTOR_CORE", 9.0, 48, "8192,4096;1", "FLOAT16;FLOAT16", "8192,4096", (0.3, 0.7)),
    ("Erf", "AI_VECTOR_CORE", 11.0, 48, "8192,4096", "FLOAT16", "8192,4096", (0.5, 0.5)),
    ("Add", "AI_VECTOR_CORE", 9.0, 48, "8192,4096;1", "FLOAT16;FLOAT16", "8192,4096", (0.3, 0.75)),
    ("Mul", "AI_VECTOR_CORE", 12.0, 48, "8192,4096;8192,4096", "FLOAT16;FLOAT16", "8192,4096", (0.3, 0.8)),
    ("Mul", "AI_VECTOR_CORE", 9.0, 48, "8192,4096;1", "FLOAT16;FLOAT16", "8192,4096", (0.3, 0.75)),
    ("BatchMatMul", "AI_CORE", 210.0, 24, "32,1024,128;32,128,1024", "FLOAT16;FLOAT16", "32,1024,1024",
     (0.82, 0.3)),
    ("SoftmaxV2", "AI_VECTOR_CORE", 40.0, 48, "32,1024,1024", "FLOAT16", "32,1024,1024", (0.55, 0.4)),
    ("TransData", "AI_CORE", 30.0, 8, "8192,4096", "FLOAT16", "256,512,16,16", (0.0, 0.6)),
    ("MatMulV2", "AI_CORE", 120.0, 20, "8192,4096;4096,4096", "FLOAT16;FLOAT16", "8192,4096", (0.55, 0.45)),
    ("LayerNormV3", "AI_VECTOR_CORE", 35.0, 48, "8192,4096;4096;4096", "FLOAT16;FLOAT16;FLOAT16", "8192,4096",
     (0.45, 0.5)),
]
AICPU = ("NonZero", "AI_CPU", 60.0, 1, "4096", "INT64", "4096,1", None)
AICPU_EVERY = 7  # one AI CPU op after every 7th layer
LAYERS_PER_ITERATION = 42  # op names repeat every iteration, as in graph mode


def _layer_plan(n_ops: int) -> list[tuple]:
    """(kind..., layer index, position in layer) rows, ``n_ops`` of them."""
    plan: list[tuple] = []
    layer = 0
    while len(plan) < n_ops:
        plan.extend((*k, layer, i) for i, k in enumerate(LAYER))
        if (layer + 1) % AICPU_EVERY == 0:
            plan.append((*AICPU, layer, len(LAYER)))
        layer += 1
    return plan[:n_ops]


def build_table(n_ops: int, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    plan = _layer_plan(n_ops)
    kinds = pd.DataFrame(plan, columns=["type", "core", "mean", "block", "ishape", "idtype", "oshape", "ratios",
                                        "layer", "position"])
    n = len(kinds)
    dur = kinds["mean"].to_numpy() * rng.uniform(0.9, 1.1, n)
    wait = rng.uniform(0.5, 2.5, n)
    start = 1_767_225_600_000_000.0 + np.cumsum(np.concatenate([[0.0], (dur + wait)[:-1]])) + wait
    is_cube = (kinds["core"] == "AI_CORE").to_numpy()
    is_cpu = (kinds["core"] == "AI_CPU").to_numpy()
    r1 = np.array([r[0] if r else np.nan for r in kinds["ratios"]]) * rng.uniform(0.95, 1.05, n)
    r2 = np.array([r[1] if r else np.nan for r in kinds["ratios"]]) * rng.uniform(0.95, 1.05, n)
    aic_time = np.where(is_cube, dur * 0.95, np.nan)
    aiv_time = np.where(~is_cube & ~is_cpu, dur * 0.95, np.nan)

    def fmt(a: np.ndarray) -> np.ndarray:
        return np.where(np.isnan(a), "N/A", np.char.mod("%.3f", np.nan_to_num(a)))

    # graph-mode names repeat every iteration: "layer<k>/<Type>_<position in layer>"
    names = ("layer" + (kinds["layer"] % LAYERS_PER_ITERATION).astype(str) + "/" + kinds["type"] + "_"
             + kinds["position"].astype(str))
    zeros = np.zeros(n)
    aic_mac = np.where(is_cube, r1, np.where(is_cpu, np.nan, 0.0))
    aic_mte2 = np.where(is_cube, r2, np.where(is_cpu, np.nan, 0.0))
    aiv_vec = np.where(~is_cube & ~is_cpu, r1, np.where(is_cpu, np.nan, 0.0))
    aiv_mte2 = np.where(~is_cube & ~is_cpu, r2, np.where(is_cpu, np.nan, 0.0))
    cols = {
        "Device_id": np.zeros(n, dtype=int), "Model ID": np.full(n, 4294967295), "Task ID": np.arange(n) % 65536,
        "Stream ID": np.where(is_cpu, 3, 2), "Op Name": names, "OP Type": kinds["type"], "OP State": "static",
        "Task Type": kinds["core"], "Task Start Time(us)": np.char.add(np.char.mod("%.3f", start), "\t"),
        "Task Duration(us)": np.char.mod("%.3f", dur), "Task Wait Time(us)": np.char.mod("%.3f", wait),
        "Block Dim": kinds["block"], "Mix Block Dim": 0, "HF32 Eligible": "NO",
        "Input Shapes": '"' + kinds["ishape"] + '"', "Input Data Types": kinds["idtype"],
        "Input Formats": kinds["idtype"].str.replace(r"[A-Z0-9]+", "ND", regex=True),
        "Output Shapes": '"' + kinds["oshape"] + '"', "Output Data Types": np.where(is_cpu, "INT64", "FLOAT16"),
        "Output Formats": np.where(kinds["type"] == "TransData", "FRACTAL_NZ", "ND"), "Context ID": "N/A",
        "aicore_time(us)": fmt(np.where(is_cpu, np.nan, dur * 0.95)),
        "aic_total_cycles": fmt(np.where(is_cube, dur * 1800, np.where(is_cpu, np.nan, 0.0))),
        "aic_mac_time(us)": fmt(aic_time * np.nan_to_num(aic_mac)), "aic_mac_ratio": fmt(aic_mac),
        "aic_scalar_time(us)": fmt(np.where(is_cube, dur * 0.05, np.where(is_cpu, np.nan, 0.0))),
        "aic_scalar_ratio": fmt(np.where(is_cube, 0.05, np.where(is_cpu, np.nan, 0.0))),
        "aic_mte1_time(us)": fmt(np.where(is_cube, dur * 0.2, np.where(is_cpu, np.nan, 0.0))),
        "aic_mte1_ratio": fmt(np.where(is_cube, 0.2, np.where(is_cpu, np.nan, 0.0))),
        "aic_mte2_time(us)": fmt(aic_time * np.nan_to_num(aic_mte2)), "aic_mte2_ratio": fmt(aic_mte2),
        "aic_fixpipe_time(us)": fmt(np.where(is_cube, dur * 0.1, np.where(is_cpu, np.nan, 0.0))),
        "aic_fixpipe_ratio": fmt(np.where(is_cube, 0.1, np.where(is_cpu, np.nan, 0.0))),
        "aic_icache_miss_rate": fmt(np.where(is_cpu, np.nan, 0.01 + zeros)),
        "aiv_time(us)": fmt(np.where(is_cpu, np.nan, np.nan_to_num(aiv_time))),
        "aiv_total_cycles": fmt(np.where(is_cpu, np.nan, np.nan_to_num(aiv_time) * 1800)),
        "aiv_vec_time(us)": fmt(np.where(is_cpu, np.nan, np.nan_to_num(aiv_time) * np.nan_to_num(aiv_vec))),
        "aiv_vec_ratio": fmt(aiv_vec),
        "aiv_scalar_time(us)": fmt(np.where(is_cpu, np.nan, np.nan_to_num(aiv_time) * 0.05)),
        "aiv_scalar_ratio": fmt(np.where(is_cube | is_cpu, np.where(is_cpu, np.nan, 0.0), 0.05)),
        "aiv_mte2_time(us)": fmt(np.where(is_cpu, np.nan, np.nan_to_num(aiv_time) * np.nan_to_num(aiv_mte2))),
        "aiv_mte2_ratio": fmt(aiv_mte2),
        "aiv_mte3_time(us)": fmt(np.where(is_cpu, np.nan, np.nan_to_num(aiv_time) * 0.2)),
        "aiv_mte3_ratio": fmt(np.where(is_cube | is_cpu, np.where(is_cpu, np.nan, 0.0), 0.2)),
        "aiv_icache_miss_rate": fmt(np.where(is_cpu, np.nan, 0.01 + zeros)),
        "cube_utilization(%)": fmt(np.where(is_cube, np.nan_to_num(aic_mac) * 90, np.where(is_cpu, np.nan, 0.0))),
    }
    df = pd.DataFrame(cols)[HEADER]
    df.attrs["start"], df.attrs["dur"] = start, dur
    return df


def write_trace(path: Path, df: pd.DataFrame, chunk: int = 50_000) -> None:
    """msprof_*.json: a top-level JSON array written in chunks (never the whole document in memory)."""
    start, dur = df.attrs["start"], df.attrs["dur"]
    names = df["Op Name"].to_numpy()
    cores = df["Task Type"].to_numpy()
    streams = df["Stream ID"].to_numpy()
    with path.open("w", encoding="utf-8") as fh:
        meta = [
            {"name": "process_name", "pid": 1000, "tid": 0, "ph": "M", "args": {"name": "CANN"}},
            {"name": "process_name", "pid": 2000, "tid": 0, "ph": "M", "args": {"name": "Ascend Hardware"}},
        ]
        fh.write("[" + ",\n".join(json.dumps(m) for m in meta))
        for lo in range(0, len(df), chunk):
            parts = []
            for i in range(lo, min(lo + chunk, len(df))):
                ts = start[i]
                parts.append(json.dumps({"name": "Node@launch", "pid": 1000, "tid": 7, "ts": f"{ts - 30:.3f}",
                                         "dur": 4.2, "ph": "X", "args": {"level": "node", "id": i}}))
                parts.append(json.dumps({"name": names[i], "pid": 2000, "tid": int(streams[i]), "ts": f"{ts:.3f}",
                                         "dur": round(float(dur[i]), 3), "ph": "X",
                                         "args": {"Task Type": cores[i], "Stream Id": int(streams[i]),
                                                  "Task Id": i % 65536, "Batch Id": 0}}))
            fh.write(",\n" + ",\n".join(parts))
        fh.write("]\n")


def write(n_ops: int, out: Path, seed: int = 0) -> Path:
    prof = out / "PROF_000001_20260101000000000_BENCHMARK"
    output = prof / "mindstudio_profiler_output"
    output.mkdir(parents=True, exist_ok=True)
    df = build_table(n_ops, seed)
    stamp = "20260101000000"
    df.to_csv(output / f"op_summary_{stamp}.csv", index=False)
    durs = df["Task Duration(us)"].astype(float)
    g = durs.groupby([df["OP Type"], df["Task Type"]]).agg(["count", "sum", "min", "mean", "max"]).reset_index()
    g.insert(0, "Device_id", 0)
    g["Ratio(%)"] = 100 * g["sum"] / g["sum"].sum()
    g.columns = ["Device_id", "OP Type", "Core Type", "Count", "Total Time(us)", "Min Time(us)", "Avg Time(us)",
                 "Max Time(us)", "Ratio(%)"]
    g.to_csv(output / f"op_statistic_{stamp}.csv", index=False, float_format="%.3f")
    api = pd.DataFrame([["host", "acl", "aclopCompileAndExecute", 1000.0, 10, 100.0, 90.0, 120.0, 5.0],
                        ["host", "runtime", "rtKernelLaunch", 4.2 * len(df), len(df), 4.2, 3.0, 9.0, 0.5]],
                       columns=["Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)",
                                "Max(us)", "Variance"])
    api.to_csv(output / f"api_statistic_{stamp}.csv", index=False)
    write_trace(output / f"msprof_{stamp}.json", df)
    (prof / "device_0").mkdir(exist_ok=True)
    info = {"DeviceInfo": [{"id": 0, "ai_core_num": 24, "aiv_num": 48, "aic_frequency": "1800"}],
            "platform_version": "Ascend910B2"}
    (prof / "device_0" / "info.json.0").write_text(json.dumps(info) + "\n", encoding="utf-8")
    return prof


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ops", type=int, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    print(write(args.ops, args.out, args.seed))


if __name__ == "__main__":
    main()
