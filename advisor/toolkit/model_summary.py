"""The model summary of a rank: how much cube and vector work the model does, how well the chip runs it, and how
much memory traffic it causes compared with what its tensors need (the report's ``model_summary`` object).

Every figure names its source. Work (GOps) comes from the PMU metrics where the profile has them (``cube_fops``,
``vector_fops``: msprof ArithmeticUtilization), else from tensor shapes with the cost model
(:mod:`advisor.toolkit.costmodel`; ``theoretical``). Utilization = work / (peak x the unit's busy time). Memory traffic:
real = measured DDR/HBM bytes (SoC JOB ``DDR Total(byte)``, or ``main_mem_read_bw + main_mem_write_bw`` x
``aicore_time``), theoretical = the ops' input + output tensor bytes; redundancy = real / theoretical (1 = every
tensor moved once). Memory Bound follows the chip: the SoC guide's ``max(Dstr, DLD, WLD) / max(Mac Busy,
Vec Ppen)`` for SS928/SS927 JOB summaries, msprof's ``mte2 / max(mac, vec)`` elsewhere. L2 hit rate from
``l2_cache`` where collected. For an inference application, the execute calls against the device busy time. The
memory-bound share is the shared op classification's (:func:`advisor.toolkit.bound.memory_bound_share`), so it is the
one the memory-bound and roofline knowledge bases report.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import pandas as pd

from advisor.config.loader import EffectiveRules
from advisor.model import Profile, metric_values
from advisor.toolkit import costmodel
from advisor.toolkit.common import type_mask

COMPUTE_CORES = ("AI_CORE", "AI_VECTOR_CORE", "MIX_AIC", "MIX_AIV")
SOC_FORMULA = "max(Dstr, DLD, WLD) / max(Mac Busy, Vec Ppen) (SS928/SS927 profiling guide)"
MSPROF_FORMULA = "mte2_ratio / max(mac_ratio, vec_ratio) (msprof op_summary memory_bound)"


def _r(x: float | None, digits: int = 3) -> float | None:
    if x is None or not np.isfinite(x):
        return None
    return round(float(x), digits)


def memory_bound_formula(ops: pd.DataFrame) -> str:
    """The chip's Memory Bound definition the profile's ``memory_bound`` column follows: the SoC guide's for SS928/SS927
    JOB summaries, msprof's elsewhere (written by msprof, else derived by ingest from the pipe ratios of each task's
    busier side, :mod:`advisor.ingest.normalize`)."""
    return SOC_FORMULA if "soc_dld_ratio" in ops.columns else MSPROF_FORMULA


def _file(profile: Profile, table: str, prefixes: tuple[str, ...] = ()) -> str | None:
    """The file a table was read from: the ingest's record (``meta.sources``), else the first file read whose name
    starts with one of ``prefixes``."""
    if table in profile.meta.sources:
        return profile.meta.sources[table]
    names = [str(path).replace("\\", "/").rsplit("/", 1)[-1] for path in profile.meta.files_read]
    if table == "ops" and len(names) == 1:  # a single op_summary / kernel_details file
        return names[0]
    return next((n for n in names if prefixes and n.startswith(prefixes)), None)


def _split_cores(platform: Mapping[str, Any]) -> bool:
    """Atlas A2/A3-class chips have separate cube and vector cores (``split_cores`` in rules/platforms.yaml): there
    an AI_CORE task runs on a cube core; on other chips an AI Core does both."""
    return bool(platform.get("split_cores"))


def _dtype_peaks(ops: pd.DataFrame, is_cube: np.ndarray, platform: Mapping[str, Any]) -> np.ndarray:
    """Each task's peak (TFLOPS) for the unit and dtype it ran (int8 on the cube runs at the int8 rate), so a
    utilization never exceeds what the chip can do in that dtype."""
    raw = ops["input_dtypes"] if "input_dtypes" in ops.columns else pd.Series("", index=ops.index)
    # per distinct dtype list (a categorical's categories; a million tasks carry a few dozen), mapped to the rows
    if isinstance(raw.dtype, pd.CategoricalDtype):
        names = np.array([str(c) for c in raw.cat.categories] + [""], dtype=object)
        codes = raw.cat.codes.to_numpy()
        inverse = np.where(codes >= 0, codes, len(names) - 1)
    else:
        names, inverse = np.unique(raw.astype(object).where(raw.notna(), "").astype(str).to_numpy(),
                                   return_inverse=True)
    firsts = np.array([n.split(";", 1)[0].strip() for n in names], dtype=object)
    firsts[np.isin(firsts, ("", "nan", "N/A", "None"))] = "FLOAT16"
    cube = np.array([costmodel.cube_tflops(platform, d) for d in firsts], dtype="float64")
    vector = np.array([costmodel.vector_tflops(platform, d) for d in firsts], dtype="float64")
    return np.where(np.asarray(is_cube, dtype=bool), cube[inverse], vector[inverse])


def summarize(profile: Profile, platform: Mapping[str, Any], rules: EffectiveRules, *,
              busy_us: float | None = None) -> dict[str, Any]:
    """The ``model_summary`` object of one rank (see the module doc). ``busy_us``: ``profile.busy_time_us()`` when
    the caller has it (a union of every task: computed before this holds its per-task arrays, it stays off the
    peak)."""
    cost_rules = rules.for_kb("costmodel")
    execute_apis = list(rules.for_kb("host-inference").get("execute_apis") or []) if rules.has("host-inference") \
        else []
    ops = profile.ops
    estimated = profile.meta.layout == "static-audit"
    out: dict[str, Any] = {"source": "estimate (cost model)" if estimated else "profile"}
    if not len(ops):
        return out
    ops_file = _file(profile, "ops")
    compute = ops["core"].isin(COMPUTE_CORES).to_numpy(dtype=bool)
    dur = ops["duration_us"].to_numpy(dtype="float64")
    flops, nbytes, unit = costmodel.profile_work(ops, cost_rules)
    cube_m = metric_values(ops["cube_fops"]) if "cube_fops" in ops.columns else np.full(len(ops), np.nan)
    vec_m = metric_values(ops["vector_fops"]) if "vector_fops" in ops.columns else np.full(len(ops), np.nan)
    measured = bool(np.nansum(cube_m) + np.nansum(vec_m) > 0)
    is_cube = unit == "cube"
    fp16 = float(platform.get("fp16_tflops") or 0.0)
    vec_peak = costmodel.vector_tflops(platform, "FLOAT16")
    dropped = 0
    if measured:
        cube_w, vec_w = np.nan_to_num(cube_m), np.nan_to_num(vec_m)
        does_cube, does_vec = compute & (cube_w > 0), compute & (vec_w > 0) & ~(cube_w > 0)
        cube_flops, vec_flops = float(cube_w[compute].sum()), float(vec_w[compute].sum())
        vec_util_work = float(vec_w[does_vec].sum())  # a cube task's vector work rides on the cube task's time
        work_source = "cube_fops/vector_fops"
        peaks = _dtype_peaks(ops, does_cube, platform)
        unknown_time = float(np.nansum(dur[compute & ~(cube_w > 0) & ~(vec_w > 0)]))
    else:
        # a cube-led task (MIX_AIC; AI_CORE on a split-core chip) whose type the cost model only knows as
        # elementwise (FlashAttention, GroupedMatmul, conv backprop...) does cube work the shapes do not tell
        cube_led = type_mask(ops["core"], ["MIX_AIC"]) | (type_mask(ops["core"], ["AI_CORE"]) & _split_cores(platform))
        known = np.isfinite(flops) & (unit != "data") & ~(cube_led & ~is_cube)
        # a shape-based estimate far above what the peak allows in the op's time means the shapes were not understood
        peak = np.where(is_cube, fp16, vec_peak) * 1e6 * float(cost_rules["max_pct_of_peak"])
        understood = ~(np.isfinite(flops) & (flops > peak * np.nan_to_num(dur)))
        if not estimated:
            dropped = int((compute & known & ~understood).sum())
            known = known & understood
        does_cube, does_vec = compute & known & is_cube, compute & known & ~is_cube
        cube_flops = float(np.nansum(np.where(does_cube, flops, 0.0)))
        vec_flops = vec_util_work = float(np.nansum(np.where(does_vec, flops, 0.0)))
        work_source = "theoretical, from tensor shapes" if (does_cube | does_vec).any() else None
        peaks = _dtype_peaks(ops, is_cube, platform)
        unknown_time = float(np.nansum(dur[compute & ~known & (unit != "data")]))
    cube_time = float(np.nansum(dur[does_cube]))
    vec_time = float(np.nansum(dur[does_vec]))
    busy = float(profile.busy_time_us()) if busy_us is None else busy_us
    if dropped:
        out["work_note"] = (f"{dropped} task(s) left out of work and utilization: their shape-based FLOPs exceed "
                            f"{float(cost_rules['max_pct_of_peak']):g}x the peak in their time (shapes not "
                            "understood)")
    if work_source:
        out["work_source"] = work_source
        out["cube"] = {"gops": _r(cube_flops / 1e9, 6), "time_us": _r(cube_time), "tasks": int(does_cube.sum()),
                       "utilization": _utilization(cube_flops, peaks, dur, does_cube)}
        out["vector"] = {"gops": _r(vec_flops / 1e9, 6), "time_us": _r(vec_time), "tasks": int(does_vec.sum()),
                         "utilization": _utilization(vec_util_work, peaks, dur, does_vec)}
        total = cube_flops + vec_flops
        rates = _mean_peak(peaks, dur, does_cube, fp16) + _mean_peak(peaks, dur, does_vec, vec_peak)
        out["chip_utilization"] = _r(total / (rates * 1e6 * busy), 4) if busy > 0 and rates > 0 else None
        out["utilization_basis"] = (f"work / (peak x time of the tasks doing it), the peak of each task's unit and "
                                    f"dtype; chip: work / ((cube + vector peak at the tasks' dtypes) x busy time); "
                                    f"peaks {fp16:g} TFLOPS cube (fp16), {vec_peak:g} TFLOPS vector (fp16) of "
                                    f"{platform.get('soc')}")
        out["work_unknown_time_us"] = _r(unknown_time)
        out["work_file"] = ops_file
    out["average_block_dim"] = _block_dim(ops, compute, dur)
    out["memory"] = _memory(ops, compute, nbytes)
    out["memory_bound"] = _memory_bound(profile, platform, rules)
    for key in ("average_block_dim", "memory", "memory_bound"):
        if out[key] is not None:
            out[key]["file"] = ops_file
    l2 = _l2(profile)
    if l2:
        l2["file"] = _file(profile, "l2_cache", ("l2_cache",))
        out["l2_cache"] = l2
    host = _host(profile, busy, execute_apis)
    if host:
        host["file"] = _file(profile, "api", ("api_statistic", "acl_statistic"))
        out["host"] = host
    return out


def _mean_peak(peaks: np.ndarray, dur: np.ndarray, rows: np.ndarray, default: float) -> float:
    """A unit's peak at the dtypes its tasks ran, weighted by their time (``default`` when no task used it)."""
    t = float(np.nansum(dur[rows]))
    return float(np.nansum(peaks[rows] * dur[rows])) / t if t > 0 else default


def _utilization(work: float, peaks: np.ndarray, dur: np.ndarray, rows: np.ndarray) -> float | None:
    """Work over what the unit could have done in the tasks' time at each task's dtype peak."""
    capacity = float(np.nansum(peaks[rows] * dur[rows])) * 1e6
    return _r(work / capacity, 4) if capacity > 0 else None


def _block_dim(ops: pd.DataFrame, compute: np.ndarray, dur: np.ndarray) -> dict[str, Any] | None:
    """Block Dim of the compute tasks: weighted by task time (the parallelism the device spent its time at) and the
    plain mean over tasks."""
    bd = ops["block_dim"].to_numpy(dtype="float64")
    ok = compute & np.isfinite(bd) & (bd > 0)
    if not ok.any():
        return None
    w = np.nan_to_num(dur[ok])
    return {"mean": _r(float(bd[ok].mean()), 2),
            "time_weighted": _r(float((bd[ok] * w).sum() / w.sum()), 2) if w.sum() > 0 else None,
            "tasks": int(ok.sum()), "source": "op_summary Block Dim"}


def _memory(ops: pd.DataFrame, compute: np.ndarray, nbytes: np.ndarray) -> dict[str, Any] | None:
    """Measured against theoretical traffic; the redundancy only over the tasks that have both."""
    real, source = np.full(len(ops), np.nan), None
    if "soc_ddr_total_bytes" in ops.columns and ops["soc_ddr_total_bytes"].notna().any():
        real, source = metric_values(ops["soc_ddr_total_bytes"]), "DDR Total(byte) (SoC JOB summary)"
    else:
        rd, wr = metric_values(ops["main_mem_read_bw"]), metric_values(ops["main_mem_write_bw"])
        t = metric_values(ops["aicore_time_us"])
        ok = compute & np.isfinite(t) & (np.isfinite(rd) | np.isfinite(wr))
        if ok.any():
            real = np.where(ok, (np.nan_to_num(rd) + np.nan_to_num(wr)) * 1e3 * t, np.nan)  # GB/s x us = 1e3 bytes
            source = "(main_mem_read_bw + main_mem_write_bw) x aicore_time"
    has_real, has_theo = np.isfinite(real), compute & np.isfinite(nbytes)
    if not has_real.any() and not has_theo.any():
        return None
    out: dict[str, Any] = {
        "real_bytes": _r(float(real[has_real].sum()), 0) if has_real.any() else None, "real_source": source,
        "theoretical_bytes": _r(float(nbytes[has_theo].sum()), 0) if has_theo.any() else None,
        "theoretical_source": "input + output tensor bytes of each op" if has_theo.any() else None}
    both = has_real & has_theo
    theo_both = float(nbytes[both].sum()) if both.any() else 0.0
    if theo_both > 0:
        out["redundancy"] = _r(float(real[both].sum()) / theo_both, 3)
        out["redundancy_tasks"] = int(both.sum())
    return out


def _memory_bound(profile: Profile, platform: Mapping[str, Any], rules: EffectiveRules) -> dict[str, Any] | None:
    """The memory-bound share of the compute time: the shared op classification's answer
    (:func:`advisor.toolkit.bound.memory_bound_share`), the one the memory-bound and roofline knowledge bases give.
    ``ops_over`` / ``ops_with_ratio`` count tasks (of the memory-bound ops / of every compute op), ``ops`` the op
    names; ``formula`` is the chip's Memory Bound the classification reads where intensity and pipes leave the bound
    open, ``threshold`` its limit (rules/bound.yaml ``memory_bound_ratio``)."""
    from advisor.toolkit.bound import RULES_NAME, builtin_rules, for_profile, memory_bound_share

    bound_rules = rules.for_kb(RULES_NAME) if rules.has(RULES_NAME) else builtin_rules()
    view = memory_bound_share(for_profile(profile, platform, bound_rules))
    if view is None:
        return None
    return {"formula": memory_bound_formula(profile.ops), "threshold": float(bound_rules["memory_bound_ratio"]), "ops_over": view.tasks,
            "ops_with_ratio": view.compute_tasks, "share_of_time": _r(view.share, 4),
            "ops": int(view.ops["name"].nunique()), "memory_bound_us": _r(view.time_us),
            "basis": ("the shared op classification (advisor.toolkit.bound): ops below the ridge of their unit "
                      "that reach no other bound, or with no clear bound and a Memory Bound above the threshold; "
                      "their time over every compute op's")}


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
