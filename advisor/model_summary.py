"""The model summary of a rank: how much cube and vector work the model does, how well the chip runs it, and how
much memory traffic it causes compared with what its tensors need (the report's ``model_summary`` object).

Every figure names its source. Work (GOps) comes from the PMU metrics where the profile has them (``cube_fops``,
``vector_fops``: msprof ArithmeticUtilization), else from tensor shapes with the cost model
(:mod:`advisor.costmodel`; ``theoretical``). Utilization = work / (peak x the unit's busy time). Memory traffic:
real = measured DDR/HBM bytes (SoC JOB ``DDR Total(byte)``, or ``main_mem_read_bw + main_mem_write_bw`` x
``aicore_time``), theoretical = the ops' input + output tensor bytes; redundancy = real / theoretical (1 = every
tensor moved once). Memory Bound follows the chip: the SoC guide's ``max(Dstr, DLD, WLD) / max(Mac Busy,
Vec Ppen)`` for SS928/SS927 JOB summaries, msprof's ``mte2 / max(mac, vec)`` elsewhere. L2 hit rate from
``l2_cache`` where collected. For an inference application, the execute calls against the device busy time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from advisor import costmodel
from advisor.model import Profile
from advisor.rules import EffectiveRules

COMPUTE_CORES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV")
SOC_FORMULA = "max(Dstr, DLD, WLD) / max(Mac Busy, Vec Ppen) (SS928/SS927 profiling guide)"
MSPROF_FORMULA = "mte2_ratio / max(mac_ratio, vec_ratio) (msprof op_summary memory_bound)"


def _r(x: float | None, digits: int = 3) -> float | None:
    if x is None or not np.isfinite(x):
        return None
    return round(float(x), digits)


def memory_bound_ratio(ops: pd.DataFrame) -> tuple[np.ndarray, str]:
    """Memory Bound of each row and the formula it follows: the profile's column where written (the SoC guide's for
    JOB summaries, msprof's otherwise), else msprof's formula from the pipe ratios (split-core: the larger of the
    aic_/aiv_ values)."""
    soc = "soc_dld_ratio" in ops.columns
    formula = SOC_FORMULA if soc else MSPROF_FORMULA
    given = ops["memory_bound"].to_numpy(dtype="float64") if "memory_bound" in ops.columns else np.full(len(ops), np.nan)

    def col(name: str) -> np.ndarray:
        return ops[name].to_numpy(dtype="float64") if name in ops.columns else np.full(len(ops), np.nan)

    mte2 = np.fmax(col("mte2_ratio"), np.fmax(col("aic_mte2_ratio"), col("aiv_mte2_ratio")))
    busy = np.fmax(np.fmax(col("mac_ratio"), col("vec_ratio")), np.fmax(col("aic_mac_ratio"), col("aiv_vec_ratio")))
    with np.errstate(divide="ignore", invalid="ignore"):
        derived = np.where(busy > 0, mte2 / busy, np.nan)
    return np.where(np.isnan(given), derived, given), formula


def summarize(profile: Profile, platform: Mapping[str, Any], rules: EffectiveRules) -> dict[str, Any]:
    """The ``model_summary`` object of one rank (see the module doc)."""
    cost_rules = rules.for_kb("costmodel")
    threshold = float(rules.for_kb("memory-bound").get("threshold", 1.0)) if rules.has("memory-bound") else 1.0
    execute_apis = list(rules.for_kb("host-inference").get("execute_apis") or []) if rules.has("host-inference") \
        else []
    ops = profile.ops
    estimated = profile.meta.layout == "static-audit"
    out: dict[str, Any] = {"source": "estimate (cost model)" if estimated else "profile"}
    if not len(ops):
        return out
    compute = ops["core"].isin(COMPUTE_CORES).to_numpy(dtype=bool)
    dur = ops["duration_us"].to_numpy(dtype="float64")
    flops, nbytes, unit = costmodel.profile_work(ops, cost_rules)
    cube_m = ops["cube_fops"].to_numpy(dtype="float64") if "cube_fops" in ops.columns else np.full(len(ops), np.nan)
    vec_m = ops["vector_fops"].to_numpy(dtype="float64") if "vector_fops" in ops.columns else np.full(len(ops), np.nan)
    measured = bool(np.nansum(cube_m) + np.nansum(vec_m) > 0)
    is_cube = unit == "cube"
    fp16 = float(platform.get("fp16_tflops") or 0.0)
    vec_peak = costmodel.vector_tflops(platform, "FLOAT16")
    dropped = 0
    if measured:
        cube_flops, vec_flops, work_source = np.nansum(cube_m[compute]), np.nansum(vec_m[compute]), "cube_fops/vector_fops"
    else:
        # a shape-based estimate far above what the peak allows in the op's time means the shapes were not understood
        peak = np.where(is_cube, fp16, vec_peak) * 1e6 * float(cost_rules.get("max_pct_of_peak", 1.5))
        understood = ~(np.isfinite(flops) & (flops > peak * np.nan_to_num(dur)))
        if not estimated:
            dropped = int((compute & ~understood).sum())
            compute = compute & understood
        cube_flops = float(np.nansum(np.where(is_cube & compute, flops, 0.0)))
        vec_flops = float(np.nansum(np.where(~is_cube & compute, flops, 0.0)))
        work_source = "theoretical, from tensor shapes" if np.isfinite(flops).any() else None
    cube_time = float(np.nansum(dur[compute & is_cube]))
    vec_time = float(np.nansum(dur[compute & ~is_cube]))
    busy = float(profile.busy_time_us())
    if dropped:
        out["work_note"] = (f"{dropped} task(s) left out of work and utilization: their shape-based FLOPs exceed "
                            f"{float(cost_rules.get('max_pct_of_peak', 1.5)):g}x the peak in their time (shapes not "
                            "understood)")
    if work_source:
        out["work_source"] = work_source
        out["cube"] = {"gops": _r(cube_flops / 1e9, 6), "time_us": _r(cube_time),
                       "utilization": _r(cube_flops / (fp16 * 1e6 * cube_time), 4) if cube_time > 0 and fp16 else None}
        out["vector"] = {"gops": _r(vec_flops / 1e9, 6), "time_us": _r(vec_time),
                         "utilization": _r(vec_flops / (vec_peak * 1e6 * vec_time), 4) if vec_time > 0 else None}
        total = cube_flops + vec_flops
        out["chip_utilization"] = _r(total / ((fp16 + vec_peak) * 1e6 * busy), 4) if busy > 0 and fp16 else None
        out["utilization_basis"] = (f"work / (peak x busy time); peaks {fp16:g} TFLOPS cube (fp16), {vec_peak:g} "
                                    f"TFLOPS vector (fp16) of {platform.get('soc')}")
    out["average_block_dim"] = _block_dim(ops, compute, dur)
    out["memory"] = _memory(ops, compute, nbytes)
    out["memory_bound"] = _memory_bound(ops, compute, dur, threshold)
    l2 = _l2(profile)
    if l2:
        out["l2_cache"] = l2
    host = _host(profile, busy, execute_apis)
    if host:
        out["host"] = host
    return out


def _block_dim(ops: pd.DataFrame, compute: np.ndarray, dur: np.ndarray) -> dict[str, Any] | None:
    bd = ops["block_dim"].to_numpy(dtype="float64")
    ok = compute & np.isfinite(bd) & (bd > 0)
    if not ok.any():
        return None
    w = np.nan_to_num(dur[ok])
    return {"mean": _r(float(bd[ok].mean()), 2),
            "time_weighted": _r(float((bd[ok] * w).sum() / w.sum()), 2) if w.sum() > 0 else None,
            "tasks": int(ok.sum()), "source": "op_summary Block Dim"}


def _memory(ops: pd.DataFrame, compute: np.ndarray, nbytes: np.ndarray) -> dict[str, Any] | None:
    real, source = None, None
    if "soc_ddr_total_bytes" in ops.columns and ops["soc_ddr_total_bytes"].notna().any():
        real, source = float(ops["soc_ddr_total_bytes"].sum()), "DDR Total(byte) (SoC JOB summary)"
    else:
        rd, wr = ops["main_mem_read_bw"].to_numpy(dtype="float64"), ops["main_mem_write_bw"].to_numpy(dtype="float64")
        t = ops["aicore_time_us"].to_numpy(dtype="float64")
        traffic = (np.nan_to_num(rd) + np.nan_to_num(wr)) * 1e3 * t  # GB/s x us = 1e3 bytes
        ok = compute & np.isfinite(t) & (np.isfinite(rd) | np.isfinite(wr))
        if ok.any():
            real, source = float(np.nansum(traffic[ok])), "(main_mem_read_bw + main_mem_write_bw) x aicore_time"
    theo_ok = compute & np.isfinite(nbytes)
    theoretical = float(np.nansum(nbytes[theo_ok])) if theo_ok.any() else None
    if real is None and theoretical is None:
        return None
    out: dict[str, Any] = {"real_bytes": _r(real, 0), "real_source": source, "theoretical_bytes": _r(theoretical, 0),
                           "theoretical_source": "input + output tensor bytes of each op" if theoretical else None}
    if real is not None and theoretical:
        out["redundancy"] = _r(real / theoretical, 3)
    return out


def _memory_bound(ops: pd.DataFrame, compute: np.ndarray, dur: np.ndarray, limit: float) -> dict[str, Any] | None:
    ratio, formula = memory_bound_ratio(ops)
    ok = compute & np.isfinite(ratio)
    if not ok.any():
        return None
    bound = ok & (ratio > limit)
    total = float(np.nansum(dur[ok]))
    return {"formula": formula, "threshold": limit, "ops_over": int(bound.sum()), "ops_with_ratio": int(ok.sum()),
            "share_of_time": _r(float(np.nansum(dur[bound])) / total, 4) if total > 0 else None}


def _l2(profile: Profile) -> dict[str, Any] | None:
    l2 = profile.extras.get("l2_cache")
    if not isinstance(l2, pd.DataFrame) or not len(l2) or "hit_rate" not in l2.columns:
        return None
    hit = pd.to_numeric(l2["hit_rate"], errors="coerce").to_numpy(dtype="float64")
    ok = np.isfinite(hit)
    if not ok.any():
        return {"tasks": int(len(l2)), "hit_rate": None, "note": "no numeric Hit Rate (N/A in every row)"}
    out: dict[str, Any] = {"tasks": int(len(l2)), "tasks_with_hit_rate": int(ok.sum()),
                           "hit_rate": _r(float(hit[ok].mean()), 4), "source": "l2_cache Hit Rate (mean over tasks)"}
    if "victim_rate" in l2.columns:
        victim = pd.to_numeric(l2["victim_rate"], errors="coerce").to_numpy(dtype="float64")
        if np.isfinite(victim).any():
            out["victim_rate"] = _r(float(np.nanmean(victim)), 4)
    return out


def _host(profile: Profile, busy: float, execute_apis: list[str]) -> dict[str, Any] | None:
    """Execute calls of an inference application against the device busy time (api_statistic)."""
    api = profile.api
    if not len(api) or not execute_apis:
        return None
    names = api["name"].astype(str)
    for name in [*execute_apis, "aclmdlExecuteAsync"]:
        hit = (names == name).to_numpy()
        if hit.any():
            count = float(pd.to_numeric(api.loc[hit, "count"], errors="coerce").sum())
            total = float(pd.to_numeric(api.loc[hit, "total_us"], errors="coerce").sum())
            if count <= 0:
                continue
            return {"execute_api": name, "calls": int(count), "avg_execute_us": _r(total / count),
                    "device_busy_per_execute_us": _r(busy / count),
                    "gap_per_execute_us": _r((total - busy) / count) if "Async" not in name else None,
                    "source": "api_statistic + device tasks"}
    return None
