"""Operator knowledge base: causes that sit in how single operators are launched, shaped and clocked.

Every rule looks at every op row (never a sample of them) and names something to change:

* ``operator.block-dim``: blocks that leave cores idle in the op's last wave (``Block Dim`` or ``Block Num``);
* ``operator.dynamic-shape``: ops compiled for dynamic shapes (``OP State``; unknown when the column is absent);
* ``operator.ai-core-freq``: ops that ran while the AI Core clock was throttled (``AI Core Freq`` counter);
* ``operator.cube-affinity``: matmuls whose inner axis is not aligned to the cube's fractal and 32-byte blocks;
* ``operator.fa-affinity``: FlashAttention ops whose sequence or head dim does not fit the kernel's tiles.

How an op behaves against the chip's roofs (compute / memory / latency bound, no clear bound) is the shared
classification (:mod:`advisor.toolkit.bound`) that the roofline knowledge base reports; these rules read it to
size their savings -- an op at or near its roof recovers nothing from tiling or alignment -- and never classify
an op again.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection, dtype_bytes, parse_list, parse_shapes
from advisor.toolkit import advice, tuning
from advisor.toolkit.bound import op_bounds, rules_of
from advisor.toolkit.common import (
    all_dynamic,
    cat_map,
    combined_codes,
    pct,
    severity_for,
    text_ids,
    texts,
    type_mask,
)
from advisor.toolkit.cores import core_counts, task_occupancy
from advisor.toolkit.time import window_us

_GROUP = ["name", "type", "core", "input_shapes", "input_formats", "output_shapes", "input_dtypes"]
_CLOCK_CHUNK = 1 << 18
"""Tasks whose mean clock is computed at a time (:func:`_task_clock`)."""


class OperatorKB(KnowledgeBase):
    id = "operator"
    title = "Operator launch, shape and clock causes (block dim, dynamic shape, frequency, shape affinity)"
    version = "2.0.0"
    api_version = "1.5"
    requires = ("ops",)
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "operator"

    _limits: dict[str, dict[str, float]] | None = None

    def limits(self, ctx: AnalysisContext, kind: str) -> dict[str, float]:
        """Per op name, from the shared classification (ops it could not classify are absent): ``recoverable`` --
        the time reaching the practical roof would save (0 at or near the roof: no tuning or alignment to propose);
        ``headroom`` -- the time below the chip's roof itself (what filling idle cores can at most recover; 0 for
        latency-bound ops)."""
        if self._limits is None:
            b = op_bounds(ctx)
            # a latency-bound op's time is fixed per-kernel cost: more cores do not shorten it
            b = b[b["bound"].notna()].assign(headroom=lambda d: np.where(
                d["bound"] == "latency", 0.0, d["total_us"] * d["roof_gap"].fillna(0.0)))
            self._limits = {k: {str(n): float(v) for n, v in b.groupby("name")[col].sum().items()}
                            for k, col in (("recoverable", "recoverable_us"), ("headroom", "headroom"))}
        return self._limits[kind]

    # -----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="operator.block-dim",
        explains={
            "roofline.no-bound": "blocks on the idle cores raise the op's throughput toward its roof",
            "roofline.latency-bound": "blocks on the idle cores shorten the op",
            "roofline.memory-bound": "blocks on the idle cores add their load/store bandwidth to the op's",
        },
        title="Block dim leaves AI cores idle",
        what="For every AI Core / vector task (the bound rules' cube_cores and vector_cores), compares its block "
             "count (kernel_details 'Block Dim', or 'Block Num' in newer torch_npu) with the cores of its type (from "
             "info.json, else rules/platforms.yaml for a chip identified by name, else the block dim most of the "
             "profile's multi-core time uses). An op whose blocks fill only part of its last wave (used / (waves x "
             "cores) < 1; mix ops: the better of the cube and vector parts) is reported when a task lasts at least "
             "{block_dim.min_duration_us} µs and its first output is large enough to split over every core "
             "({block_dim.min_elements_per_core} elements per core); an op without an output shape only when its "
             "blocks fill at least {block_dim.min_used_without_shapes} of its last wave (its parallelism is "
             "unknown: few blocks usually mean a small op, not a bad tiling).",
        why="Cores without a block idle for the whole op: 20 blocks on 24 cores leave a sixth of the chip unused. "
            "Per task the saving is its time x the idle share x {block_dim.realism} (tiling and per-core overheads "
            "keep part of it), and never more than the time the op spends below the chip's roof (shared "
            "classification): an op that already saturates the chip's bandwidth gains nothing from more cores. "
            "msprof-analyze checks block_dim % cores but skips it when the header says 'Block Num' or every op is "
            "dynamic.",
        how_to_fix="Let the tiling use all cores: operator tuning where the flow has it, batch / hidden sizes that "
                   "divide into the core count, or (for kernels you write) a block dim that is a multiple of the "
                   "core count.",
        thresholds=("block_dim", "severity"),
        needs=("ops",),
        example="MatMulV2 with Block Dim 20 on a 24-core Ascend910B2: 4 cores idle for its 120 us."))
    def block_dim(self, ctx: AnalysisContext) -> Iterable[Finding]:
        ops, r = ctx.profile.ops, ctx.rules
        if advice.context_of(ctx) == "kernel-dev":
            ctx.note("operator.block-dim: a kernel-development run's launch is kernel.block-dim's (waves and the "
                     "last wave's fill per kernel)")
            return
        cfg, families = r["block_dim"], rules_of(ctx)
        counts = core_counts(ctx.profile, ctx.platform, families["cube_cores"], families["vector_cores"])
        aic, aiv = counts.cube, counts.vector
        if not aic:
            ctx.note("operator.block-dim: skipped, the core count is unknown (no info.json, chip not identified)")
            return
        blocks = _col(ops, "block_dim")
        if not np.isfinite(blocks).any():
            ctx.note("operator.block-dim: skipped, the profile has no Block Dim / Block Num column")
            return
        cube = type_mask(ops["core"], families["cube_cores"])
        vec = type_mask(ops["core"], families["vector_cores"])
        primary = np.where(cube, aic, np.where(vec, aiv, 0)).astype("float64")
        used = task_occupancy(ops, counts, families["cube_cores"], families["vector_cores"])
        dur = _col(ops, "duration_us")
        elements = cat_map(ops["output_shapes"], _first_elements, np.nan, "float64")
        big_enough = np.where(np.isfinite(elements), elements >= primary * float(cfg["min_elements_per_core"]),
                              np.nan_to_num(used) >= float(cfg["min_used_without_shapes"]))
        flagged = (cube | vec) & np.isfinite(used) & (used < 1.0 - 1e-9) & (dur >= float(cfg["min_duration_us"])) \
            & big_enough
        if not flagged.any():
            return
        realism = float(cfg["realism"])
        saving = np.where(flagged, dur * (1.0 - used) * realism, 0.0)
        by_op = self._bounded(ctx, _by_name(ops, flagged, saving), "headroom")
        if not by_op:
            return
        keep = flagged & _named(ops, by_op)
        total = float(sum(by_op.values()))
        g = _groups(ops, keep, {"saving_us": saving, "blocks": blocks, "cores": primary, "used": used * dur})
        g["blocks"] = g["blocks"] / g["count"]
        g["cores"] = g["cores"] / g["count"]
        g["used_pct"] = 100.0 * g["used"] / g["total_us"]
        g = g.sort_values("saving_us", ascending=False, kind="stable")
        rows = _rows(g, ["name", "type", "core", "blocks", "cores", "used_pct", "count", "total_us", "saving_us"], 2)
        top = ", ".join(f"{row[0]} ({row[3]:g} blocks on {row[4]:g} cores)" for row in rows[:3])
        window = window_us(ctx.profile)
        aoe = tuning.operator_tuning(ctx, list(by_op), all_dynamic(ops, by_op))
        if advice.context_of(ctx) == "kernel-dev":
            how = "Set the kernel's block dim to a multiple of the core count (or split the work so it divides)."
        else:
            how = ((aoe.text + " Or choose" if aoe else "Choose")
                   + " batch / hidden sizes whose split divides into the core count.")
        yield ctx.finding(
            rule="operator.block-dim",
            # no singular form: the same cause on ranks with 1 and 2 such ops is one finding over the ranks
            title=f"{len(by_op)} op(s) leave AI cores idle (block dim not a multiple of {aic}/{aiv} cores)",
            severity=_severity(total, window, r),
            ops=list(by_op),
            evidence={"ai_core_num": aic, "vector_core_num": aiv, "core_count_source": counts.detail,
                      "ops": len(by_op), "tasks": int(keep.sum()), "time_us": float(np.nansum(dur[keep])),
                      "table": table(["op", "type", "core", "block dim", "cores", "cores used %", "tasks",
                                      "time us", "saving us"], rows)},
            estimated_saving_us=total,
            basis=f"per task: duration x (1 - blocks / (waves x cores)) x {realism:g} (block_dim.realism), per op "
                  "at most its time below the chip's roof (shared op classification)",
            recommendation=f"{top}: their last wave leaves cores idle. {how}",
            fix=aoe.fix if aoe else Fix("code", "a block dim that fills every core",
                                           {"ops": list(by_op)[:tuning.MAX_FIX_OPS], "cores": [aic, aiv]}),
            confidence=float(cfg["confidence"][counts.source]),
            saving_by_op=by_op,
        )

    # -----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="operator.dynamic-shape",
        title="Dynamic-shape operators",
        what="Counts the ops whose OP State is 'dynamic' and their share of the ops' device time; reported when "
             "the share reaches {dynamic.min_time_share}. Says whether their shapes actually vary across calls. "
             "When the profile has no OP State column the rule says so in the report notes instead of guessing; "
             "the other operator rules still run. A kernel-development run is left alone (its author chose how "
             "the kernel is compiled), and so is torch_npu eager mode unless the recorded steps show shapes "
             "varying: its binary kernels (jit_compile=False) are dynamic-shape kernels by design.",
        why="Dynamic-shape kernels compute their tiling at run time and use generic loop bounds; where kernels are "
            "compiled online, every new shape also triggers a compile. The saving counted is {dynamic.saving_fraction}"
            " of the dynamic ops' time. msprof-analyze reports every op as dynamic when the column is missing and "
            "then skips its block-dim and no-bound checks.",
        how_to_fix="Shapes that vary between calls: bucket or pad the inputs to a few fixed sizes. Shapes that never "
                   "vary: build them as static shapes -- ATC --input_shape with static dims for an offline model, "
                   "graph mode with static inputs for a framework; in torch_npu eager mode keep binary kernels "
                   "(jit_compile=False) so no new shape triggers an online compile.",
        thresholds=("dynamic", "severity"),
        needs=("ops",)))
    def dynamic_shape(self, ctx: AnalysisContext) -> Iterable[Finding]:
        ops, r = ctx.profile.ops, ctx.rules
        cfg = r["dynamic"]
        state = ops["op_state"]
        if not state.notna().any():
            ctx.note("operator.dynamic-shape: skipped, the profile has no OP State column, so static/dynamic shape "
                     "is unknown (not assumed dynamic); the other operator rules ran on every op")
            return
        if advice.context_of(ctx) == "kernel-dev":
            ctx.note("operator.dynamic-shape: not assessed for a kernel-development run (the kernel's author chose "
                     "its shape mode)")
            return
        dyn = cat_map(state, lambda c: str(c).lower() == "dynamic", False, bool)
        known = state.notna().to_numpy()
        dur = np.nan_to_num(_col(ops, "duration_us"))
        dyn_time, known_time = float(dur[dyn].sum()), float(dur[known].sum())
        share = dyn_time / known_time if known_time > 0 else 0.0
        if not dyn.any() or share < float(cfg["min_time_share"]):
            return
        calls = pd.DataFrame({"name": _names(ops, dyn).astype(str),
                              "type": np.asarray(ops["type"].array[dyn], dtype=object),
                              "shape": np.asarray(ops["input_shapes"].array[dyn], dtype=object),
                              "step": _col(ops, "step")[dyn], "dur": dur[dyn]})
        per = calls.groupby("name", sort=False).agg(type=("type", "first"), count=("dur", "size"),
                                                    total_us=("dur", "sum"), shapes=("shape", "nunique"))
        fraction = float(cfg["saving_fraction"])
        per = per.assign(saving_us=per["total_us"] * fraction).sort_values("total_us", ascending=False,
                                                                             kind="stable")
        varying = varying_ops(calls, advice.family(ctx) == "torch")
        if advice.context_of(ctx) == "torch-eager" and not varying:
            ctx.note(f"operator.dynamic-shape: {len(per)} op(s) run dynamic-shape kernels: in torch_npu eager mode "
                     "these are its binary kernels (jit_compile=False), the intended mode, and no recorded step "
                     "shows their shapes varying; not reported")
            return
        by_op = {str(n): float(s) for n, s in per["saving_us"].items() if s > 0}
        total = float(sum(by_op.values()))
        tasks_known, tasks_dyn = int(known.sum()), int(dyn.sum())
        rows = [[str(n), _text(t), int(c), int(k), float(tot), float(sv)] for n, t, c, k, tot, sv in
                zip(per.index, per["type"], per["count"], per["shapes"], per["total_us"], per["saving_us"],
                    strict=True)]
        text, fix = _dynamic_advice(ctx, None if varying is None else len(varying), len(per))
        n_known = int(pd.Series(_names(ops, known)).nunique())
        yield ctx.finding(
            rule="operator.dynamic-shape",
            title=(f"{'All' if tasks_dyn == tasks_known else len(per)} of {n_known} ops run dynamic-shape kernels "
                   f"({pct(share)} of their device time)"),
            severity=_severity(total, window_us(ctx.profile), r),
            ops=list(by_op),
            evidence={"dynamic_tasks": tasks_dyn, "tasks_with_op_state": tasks_known,
                      "all_dynamic": tasks_dyn == tasks_known, "dynamic_time_us": dyn_time,
                      "share_of_op_time": share,
                      "ops_with_varying_shapes": None if varying is None else len(varying),
                      "table": table(["op", "type", "tasks", "distinct input shapes", "time us", "saving us"], rows)},
            estimated_saving_us=total,
            basis=f"dynamic ops' time x {fraction:g} (dynamic.saving_fraction: runtime tiling and generic loop "
                  "bounds that static kernels avoid)",
            recommendation=text,
            fix=fix,
            confidence=float(cfg["confidence"]),
            saving_by_op=by_op,
        )

    # -----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="operator.ai-core-freq",
        title="Ops ran while the AI Core clock was throttled",
        what="Reads the trace's AI Core clock counter ({frequency.counter_names}; MHz over time), computes each "
             "op's (task types {frequency.cores}) time-weighted mean clock over its execution and reports ops whose "
             "clock was at least {frequency.min_drop} below the nominal maximum (the chip's cube_freq_mhz when the "
             "chip was detected, or the highest value the counter recorded).",
        why="A lower clock stretches every compute cycle: an op at 1500 MHz on an 1800 MHz chip takes a fifth "
            "longer. Throttling comes from power capping or temperature, not from the model.",
        how_to_fix="Check the power cap and temperature of the NPU (npu-smi info; npu-smi info -t power -i <id>, "
                   "-t temp), the cooling and the power supply; remove power-saving settings; re-profile to "
                   "confirm the clock stays at its nominal value.",
        thresholds=("frequency", "severity"),
        needs=("ops", "timeline")))
    def ai_core_freq(self, ctx: AnalysisContext) -> Iterable[Finding]:
        ops, r = ctx.profile.ops, ctx.rules
        cfg = r["frequency"]
        samples = frequency_counter(ctx.profile, cfg["counter_names"])
        if not len(samples):
            if "events" in ctx.profile.available:
                ctx.note("operator.ai-core-freq: skipped, the trace has no AI Core clock counter")
            return
        ts, mhz = samples["ts_us"].to_numpy(), samples["mhz"].to_numpy()
        f_max, f_source = nominal_clock(ctx, float(mhz.max()))
        start, dur = _col(ops, "start_us"), _col(ops, "duration_us")
        ok = type_mask(ops["core"], cfg["cores"]) & np.isfinite(start) & np.isfinite(dur)
        if not ok.any():
            return
        clock = _task_clock(ts, mhz, start, dur, ok)
        drop = 1.0 - clock / f_max
        flagged = ok & np.isfinite(drop) & (drop >= float(cfg["min_drop"]))
        if not flagged.any():
            return
        saving = np.where(flagged, dur * drop, 0.0)
        by_op = _by_name(ops, flagged, saving)
        total = float(saving.sum())
        g = _groups(ops, flagged, {"saving_us": saving, "clock_w": np.nan_to_num(clock) * dur})
        g["mean_mhz"] = g["clock_w"] / g["total_us"]
        g = g.sort_values("saving_us", ascending=False, kind="stable")
        rows = _rows(g, ["name", "type", "core", "mean_mhz", "count", "total_us", "saving_us"], 1)
        low = float(mhz.min())
        yield ctx.finding(
            rule="operator.ai-core-freq",
            title=f"{_plural(len(by_op), 'op')} ran with the AI Core clock throttled (down to {low:g} of "
                  f"{f_max:g} MHz)",
            severity=_severity(total, window_us(ctx.profile), r),
            ops=list(by_op),
            evidence={"nominal_mhz": f_max, "nominal_source": f_source, "min_mhz": low, "samples": len(samples),
                      "throttled_tasks": int(flagged.sum()), "time_us": float(np.nansum(dur[flagged])),
                      "table": table(["op", "type", "core", "mean clock MHz", "tasks", "time us", "saving us"], rows)},
            estimated_saving_us=total,
            basis=f"per task: duration x (1 - mean clock during the task / {f_max:g} MHz)",
            recommendation=f"The AI Core clock fell to {low:g} MHz while these ops ran (nominal {f_max:g} MHz). "
                           "Check the NPU's power cap and temperature (npu-smi info -t power / -t temp), cooling and "
                           "power supply, and re-profile to confirm the clock holds.",
            fix=Fix("config", "keep the AI Core at its nominal clock: check power cap, temperature and cooling",
                    {"nominal_mhz": f_max, "observed_min_mhz": low}, "npu-smi info"),
            confidence=float(cfg["confidence"]),
            saving_by_op=by_op,
        )

    # -----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="operator.cube-affinity",
        explains={
            "roofline.compute-bound": "the cube-friendly shape raises the op's cube utilization toward its roof",
            "roofline.no-bound": "the cube-friendly shape raises the op's throughput toward its roof",
        },
        title="Matmul inner axis not aligned to the cube",
        what="For matmul-type ops (cube.types) on the cube cores holding at least {cube.min_time_share} of the "
             "analyzed window, "
             "reads the inner (contiguous, last) axis of their ND inputs. An axis is misaligned when it is neither "
             "a multiple of the cube fractal ({cube.fractal_elements} elements) nor of {cube.align_bytes} bytes "
             "in its dtype; FRACTAL_NZ inputs are aligned by construction.",
        why="The cube loads its operands in {cube.align_bytes}-byte blocks and {cube.fractal_elements}-element "
            "fractals: a ragged inner axis makes every row end in a partly filled block, with unaligned transfers "
            "and extra reformatting. Padding it to the next aligned size adds no cube work (the cube pads to the "
            "fractal anyway). The saving counted is {cube.affinity_saving_fraction} of the ops' time, at most what "
            "the shared classification says they can recover.",
        how_to_fix="Pad the inner axis to the next multiple of the fractal that is also a multiple of "
                   "{cube.align_bytes} bytes (zero-filled weight rows / columns), or choose model dimensions that "
                   "are; an axis that is already a multiple of the fractal needs nothing.",
        thresholds=("cube", "severity"),
        needs=("ops",)))
    def cube_affinity(self, ctx: AnalysisContext) -> Iterable[Finding]:
        ops, r = ctx.profile.ops, ctx.rules
        cfg = r["cube"]
        window = window_us(ctx.profile)
        mask = type_mask(ops["type"], cfg["types"]) & type_mask(ops["core"], rules_of(ctx)["cube_cores"])
        if not mask.any() or window <= 0:
            return
        g = _groups(ops, mask, {})
        g = g[g["total_us"] >= float(cfg["min_time_share"]) * window]
        fractal, align = int(cfg["fractal_elements"]), int(cfg["align_bytes"])
        found = [misaligned_axes(s, f, d, fractal, align) for s, f, d in
                 zip(g["input_shapes"], g["input_formats"], g["input_dtypes"], strict=True)]
        bad = np.array([bool(x) for x in found], dtype=bool)
        if not bad.any():
            return
        ga = g[bad].assign(axes=[_axes_text(x) for x in found if x])
        frac = float(cfg["affinity_saving_fraction"])
        ga, by_op = self._affinity_savings(ctx, ga, frac)
        if not by_op:
            return
        total = float(sum(by_op.values()))
        rows = _rows(ga, ["name", "type", "input_shapes", "input_dtypes", "axes", "count", "total_us", "saving_us"])
        first = next(x for x in found if x)[0]
        yield ctx.finding(
            rule="operator.cube-affinity",
            title=f"{_plural(len(by_op), 'matmul op')} with an inner axis not aligned to the cube "
                  f"({fractal} elements / {align} bytes)",
            severity=_severity(total, window, r),
            ops=list(by_op),
            evidence={"fractal_elements": fractal, "align_bytes": align, "groups": len(ga),
                      "table": table(["op", "type", "input shapes", "dtypes", "misaligned inner axes -> padded",
                                      "tasks", "time us", "saving us"], rows)},
            estimated_saving_us=total,
            basis=f"the ops' time x {frac:g} (cube.affinity_saving_fraction: partly filled blocks and unaligned "
                  "transfers an aligned axis avoids), per op at most the time the shared op classification says "
                  "it can recover",
            recommendation=f"{rows[0][0]} ({rows[0][2]}, {rows[0][3]}): pad the inner axis {first[0]} to {first[1]} "
                           f"(the next multiple of {fractal} elements and {align} bytes; the cube pads to its "
                           "fractal anyway, so this adds no cube work) or choose model dimensions that are aligned.",
            fix=Fix("code", "pad the matmul inner axes to the cube's alignment",
                    {"axes": {str(row[0]): str(row[4]) for row in rows}}),
            confidence=float(cfg["confidence"]),
            saving_by_op=by_op,
        )

    # -----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="operator.fa-affinity",
        explains={
            "schedule.fusible-ops": "the fused attention kernel replaces this sequence",
            "memory-bound.layers": "the fused attention kernel keeps the score matrix on chip",
            "roofline.memory-bound": "the fused attention kernel keeps the score matrix on chip",
            "roofline.no-bound": "the fused attention kernel replaces these ops",
        },
        title="FlashAttention sequence length or head dim does not fit the kernel's tiles",
        what="For FlashAttention ops (fa.types) with at least {fa.min_time_share} of the analyzed window, reads S "
             "(the larger of dims 1 and 2 of a 4-D query, of dims 0 and 1 of a 3-D BSH/SBH one; profiles do not "
             "record the layout) and D (last dim of a 4-D query) and reports S not a multiple of "
             "{fa.seq_multiple} or D not a multiple of {fa.head_dim_multiple}.",
        why="The FA kernels tile S in blocks of {fa.seq_multiple}: a remainder runs as a padded, partly masked "
            "block; a head dim off the {fa.head_dim_multiple}-element fractal pads every tile. The saving counted "
            "is {fa.affinity_saving_fraction} of the ops' time, at most what the shared classification says they "
            "can recover.",
        how_to_fix="Pad the sequence to the next multiple of {fa.seq_multiple} (the attention mask covering the "
                   "padding); keep head dims on the fractal (64 and 128 are the kernels' fast paths).",
        thresholds=("fa", "severity"),
        needs=("ops",)))
    def fa_affinity(self, ctx: AnalysisContext) -> Iterable[Finding]:
        ops, r = ctx.profile.ops, ctx.rules
        cfg = r["fa"]
        window = window_us(ctx.profile)
        mask = type_mask(ops["type"], cfg["types"])
        if not mask.any() or window <= 0:
            return
        g = _groups(ops, mask, {})
        g = g[g["total_us"] >= float(cfg["min_time_share"]) * window]
        s_mult, d_mult = int(cfg["seq_multiple"]), int(cfg["head_dim_multiple"])
        why = []
        for d, s in (fa_axes(x) for x in g["input_shapes"]):
            parts = []
            if s is not None and s % s_mult:
                parts.append(f"S={s} -> {-(-s // s_mult) * s_mult}")
            if d is not None and d % d_mult:
                parts.append(f"D={d}")
            why.append(", ".join(parts))
        bad = np.array([bool(w) for w in why], dtype=bool)
        if not bad.any():
            return
        ga = g[bad].assign(unaligned=[w for w in why if w])
        frac = float(cfg["affinity_saving_fraction"])
        ga, by_op = self._affinity_savings(ctx, ga, frac)
        if not by_op:
            return
        total = float(sum(by_op.values()))
        rows = _rows(ga, ["name", "type", "input_shapes", "unaligned", "count", "total_us", "saving_us"])
        yield ctx.finding(
            rule="operator.fa-affinity",
            title=f"{_plural(len(by_op), 'FlashAttention op')} with a sequence or head dim off the kernel's tiles",
            severity=_severity(total, window, r),
            ops=list(by_op),
            evidence={"seq_multiple": s_mult, "head_dim_multiple": d_mult,
                      "table": table(["op", "type", "input shapes", "unaligned", "tasks", "time us", "saving us"],
                                     rows)},
            estimated_saving_us=total,
            basis=f"the ops' time x {frac:g} (fa.affinity_saving_fraction: the partly masked remainder tile), per op "
                  "at most the time the shared op classification says it can recover",
            recommendation=f"{rows[0][0]}: {rows[0][3]}. Pad the sequence to the next multiple of {s_mult} (mask "
                           f"the padding) and keep head dims on the {d_mult}-element fractal.",
            fix=Fix("code", f"pad S to the next multiple of {s_mult}",
                    {"snippet": f"pad = (-seq_len) % {s_mult}  # pad inputs and attention mask by `pad`"}),
            confidence=float(cfg["confidence"]),
            saving_by_op=by_op,
        )

    # -----------------------------------------------------------------------------------------------------
    def _affinity_savings(self, ctx: AnalysisContext, groups: pd.DataFrame,
                          frac: float) -> tuple[pd.DataFrame, dict[str, float]]:
        """A shape-affinity saving: ``frac`` of each op's time, bounded by what the shared classification says it
        can recover (:meth:`_bounded`), and split back over the op's shape groups by time, largest first."""
        by_op = self._bounded(ctx, {str(k): float(v) * frac
                                    for k, v in groups.groupby("name")["total_us"].sum().items()})
        if not by_op:
            return groups.iloc[:0], by_op
        kept = groups[groups["name"].isin(list(by_op))]
        kept = kept.assign(saving_us=kept["name"].map(by_op) * kept["total_us"] / kept.groupby("name")["total_us"]
                           .transform("sum")).sort_values("saving_us", ascending=False, kind="stable")
        return kept, by_op

    def _bounded(self, ctx: AnalysisContext, by_op: Mapping[str, float], kind: str = "recoverable") -> dict[str, float]:
        """Savings per op capped by the shared classification's ``kind`` limit (:meth:`limits`; ops it could not
        classify keep their estimate); ops left with nothing are dropped, largest first."""
        limit = self.limits(ctx, kind)
        out = {op: min(v, limit[op]) if op in limit else v for op, v in by_op.items()}
        return dict(sorted(((k, v) for k, v in out.items() if v > 0), key=lambda kv: -kv[1]))


# ---------------------------------------------------------------------------------------------------------
# dynamic shape
# ---------------------------------------------------------------------------------------------------------
def varying_ops(calls: pd.DataFrame, names_per_api: bool) -> set[str] | None:
    """Op names whose input shapes change between steps (several steps recorded), or between calls when each
    name is one layer; None when it cannot be told: one step of a framework that names ops by their API (torch_npu
    gives every layer calling ``aclnnMatmul`` the same name, so several shapes under one name are several
    layers)."""
    steps = calls["step"].dropna().unique()
    if len(steps) >= 2:
        seen = calls.dropna(subset=["step"]).groupby(["name", "step"], sort=False)["shape"] \
            .agg(lambda s: frozenset(s.astype(str)))
        return {str(n) for n, sets in seen.groupby(level=0) if sets.nunique() > 1 or len(sets) < len(steps)}
    if names_per_api:
        return None
    return {str(n) for n, k in calls.groupby("name", sort=False)["shape"].nunique().items() if k > 1}


def _dynamic_advice(ctx: AnalysisContext, n_varying: int | None, n_ops: int) -> tuple[str, Fix]:
    """What to do about dynamic-shape kernels in this flow."""
    flow = advice.context_of(ctx)
    if n_varying is None:
        lead = ("One step cannot tell whether their shapes vary between steps (the framework names ops by their "
                "API, so one name covers every layer calling it): inputs whose sizes vary should be bucketed or "
                "padded to a few fixed sizes.")
    elif n_varying:
        lead = (f"{n_varying} of these {n_ops} ops change shape between calls: bucket or pad their inputs to a few "
                "fixed sizes.")
    else:
        lead = "Their shapes never change in this profile, so static-shape kernels would avoid the runtime tiling."
    if flow == "torch-eager":
        text = lead + (" Graph mode with torchair compiles them for their static shapes." if n_varying == 0 else
                       " Keep binary kernels (torch_npu.npu.set_compile_mode(jit_compile=False)) so no new shape "
                       "triggers an online compile.")
        return text, Fix("code", "binary kernels, no internal formats (torch_npu)",
                         {"snippet": "torch_npu.npu.set_compile_mode(jit_compile=False)\n"
                                     "torch_npu.npu.config.allow_internal_format = False"})
    if flow == "torch-graph":
        return lead + " Give the torchair graph static input shapes (bucketed sizes) so it compiles static kernels.", \
            Fix("code", "static input shapes for the torchair graph", {"how": "pad/bucket inputs to fixed sizes"})
    if advice.family(ctx) == "mindspore":
        return lead + " Feed the network fixed shapes (a padded batch per bucket) so its kernels compile static.", \
            Fix("code", "static input shapes: pad/bucket the dataset to a few fixed sizes",
                {"snippet": "dataset = dataset.padded_batch(batch_size, pad_info={...})  # fixed shapes"})
    if advice.family(ctx) == "om":
        return lead + " Build the model with static input shapes (atc --input_shape with fixed dims, or a few " \
                      "--dynamic_dims gears).", \
            Fix("atc-option", "build with static input shapes (or a few --dynamic_dims gears)",
                {"flags": ["--input_shape=<name>:<static dims>"]}, "atc ... --input_shape=<name>:<static dims>")
    return lead + " Compile them for static shapes where the flow allows it.", \
        Fix("code", "static shapes for these ops", {"how": "pad/bucket inputs to fixed sizes"})


# ---------------------------------------------------------------------------------------------------------
# AI Core frequency
# ---------------------------------------------------------------------------------------------------------
def frequency_counter(profile: Any, names: Sequence[str]) -> pd.DataFrame:
    """The AI Core clock samples (``ts_us``, ``mhz``) sorted by time, from ``extras["counters"]``."""
    counters = profile.extras.get("counters") if isinstance(profile.extras, dict) else None
    if counters is None or not len(counters):
        return pd.DataFrame({"ts_us": pd.Series(dtype="float64"), "mhz": pd.Series(dtype="float64")})
    wanted = {n.lower() for n in names}
    mask = cat_map(counters["name"], lambda c: str(c).lower() in wanted, False, bool)
    sub = pd.DataFrame({"ts_us": counters["ts_us"].to_numpy(dtype="float64")[mask],
                        "mhz": counters["value"].to_numpy(dtype="float64")[mask]})
    sub = sub[np.isfinite(sub["ts_us"]) & np.isfinite(sub["mhz"]) & (sub["mhz"] > 0)]
    return sub.sort_values("ts_us", kind="stable").drop_duplicates("ts_us", keep="last").reset_index(drop=True)


def mean_clock(ts: np.ndarray, mhz: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Time-weighted mean of the step function ``mhz`` (value holds from its sample to the next) over each
    [start, end); NaN for intervals that end before the first sample. Starts before it are clipped to it."""
    cum = np.concatenate([[0.0], np.cumsum(mhz[:-1] * np.diff(ts))])

    def integral(t: np.ndarray) -> np.ndarray:
        k = np.clip(np.searchsorted(ts, t, side="right") - 1, 0, len(ts) - 1)
        return cum[k] + mhz[k] * (t - ts[k])

    s = np.maximum(start, ts[0])
    length = end - s
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = (integral(end) - integral(s)) / length
        point = mhz[np.clip(np.searchsorted(ts, s, side="right") - 1, 0, len(ts) - 1)]
    out = np.where(length > 0, mean, point)
    return np.where(end < ts[0], np.nan, out)


def _task_clock(ts: np.ndarray, mhz: np.ndarray, start: np.ndarray, dur: np.ndarray, ok: np.ndarray) -> np.ndarray:
    """:func:`mean_clock` over each ``ok`` task (NaN elsewhere), a chunk of tasks at a time: elementwise, so the
    same values without its ~100 MB of per-task temporaries on a 2M-task profile."""
    clock = np.full(len(start), np.nan)
    at = np.flatnonzero(ok)
    for lo in range(0, len(at), _CLOCK_CHUNK):
        i = at[lo:lo + _CLOCK_CHUNK]
        s = start[i]
        clock[i] = mean_clock(ts, mhz, s, s + dur[i])
    return clock


def nominal_clock(ctx: AnalysisContext, observed_max: float) -> tuple[float, str]:
    plat = ctx.platform
    detected = not str(plat.get("soc_source", "")).startswith("default")
    nominal = plat.get("cube_freq_mhz")
    if detected and nominal and float(nominal) >= observed_max:
        return float(nominal), f"{plat.get('soc')} nominal AI Core clock (rules/platforms.yaml)"
    return observed_max, "highest AI Core Freq sample in the trace"


# ---------------------------------------------------------------------------------------------------------
# shapes
# ---------------------------------------------------------------------------------------------------------
def misaligned_axes(shapes: object, formats: object, dtypes: object, fractal: int,
                    align_bytes: int) -> list[tuple[int, int]]:
    """(inner axis, padded size) of each of the first two inputs whose ND inner (last) axis is neither a multiple
    of ``fractal`` elements nor of ``align_bytes`` bytes; padded = the next multiple of both. FRACTAL_NZ (and
    other fractal) inputs are aligned by construction and skipped."""
    dims, fmts, dts = parse_shapes(shapes), parse_list(formats), parse_list(dtypes)
    out = []
    for i, shape in enumerate(dims[:2]):
        if not shape:
            continue
        fmt = fmts[i].upper().removeprefix("FORMAT_").split(":")[0] if i < len(fmts) else "ND"
        size = dtype_bytes(dts[i]) if i < len(dts) else None
        if fmt.startswith("FRACTAL") or not size:
            continue
        axis = int(shape[-1])
        if axis <= 0 or axis % fractal == 0 or (axis * size) % align_bytes == 0:
            continue
        step = math.lcm(fractal, align_bytes // math.gcd(align_bytes, int(size)))
        out.append((axis, -(-axis // step) * step))
    return out


def _axes_text(axes: list[tuple[int, int]]) -> str:
    return ", ".join(f"{a} -> {b}" for a, b in axes)


def fa_axes(shapes: object) -> tuple[int | None, int | None]:
    """(D, S) of the query. 4-D (BNSD / BSND): D = last dim, S = the larger of dims 1 and 2 (heads are fewer
    than tokens). 3-D (BSH / SBH): S = the larger of dims 0 and 1, D unknown (H = heads x D)."""
    dims = parse_shapes(shapes)
    q = dims[0] if dims else None
    if not q:
        return None, None
    if len(q) == 4:
        return int(q[3]), int(max(q[1], q[2]))
    if len(q) == 3:
        return None, int(max(q[0], q[1]))
    return None, None


# ---------------------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------------------
def _severity(saving: float, window: float, rules: Mapping[str, Any]) -> Any:
    return severity_for(saving / window, rules["severity"]) if window > 0 else "info"


def _plural(n: int, word: str) -> str:
    return f"{n} {word if n == 1 else word + 's'}"


def _col(ops: pd.DataFrame, name: str) -> np.ndarray:
    return ops[name].to_numpy(dtype="float64") if name in ops.columns else np.full(len(ops), np.nan)


def _text(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    return str(value)


def _first_elements(value: object) -> float:
    shapes = parse_shapes(value)
    shape = shapes[0] if shapes else None
    if shape is None or any(d < 0 for d in shape):
        return math.nan
    return float(math.prod(shape))


def _names(ops: pd.DataFrame, mask: np.ndarray) -> np.ndarray:
    """The op names of the rows under ``mask`` (only those rows are materialized)."""
    return texts(ops["name"], mask)


def _named(ops: pd.DataFrame, names: Iterable[str]) -> np.ndarray:
    """Rows whose name (as text, a missing one "nan" as :func:`_by_name` keys it) is one of ``names``."""
    wanted = set(names)
    hit = type_mask(ops["name"], wanted)
    return hit | ops["name"].isna().to_numpy() if "nan" in wanted else hit


def _by_name(ops: pd.DataFrame, mask: np.ndarray, values: np.ndarray) -> dict[str, float]:
    """Sum of ``values`` (one per row) over the rows under ``mask`` per op name, largest first (the
    ``saving_by_op`` of a finding); a missing name is an op "nan". Grouped on integer ids of the names' texts, not
    on one str per row (~70 MB at 600k rows): the same groups, order and sums."""
    ids, text = text_ids(ops["name"], mask)
    if not len(ids):
        return {}
    sums = pd.Series(values[mask]).groupby(ids, sort=False).sum()
    s = pd.Series(sums.to_numpy(), index=pd.Index(text[sums.index.to_numpy()]))
    s = s[s > 0].sort_values(ascending=False, kind="stable")
    return {str(k): float(v) for k, v in s.items()}


def _groups(ops: pd.DataFrame, mask: np.ndarray, extra: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Rows under ``mask`` grouped by name/type/core/shapes: count, total, max, and sums of ``extra``.
    Grouped on one integer key from the columns' codes (:func:`_group_key`) and aggregated a column at a time:
    the groups, order and sums of a groupby of the rows' frame, without copying it (~100 MB at 1M rows)."""
    cols = [c for c in _GROUP if c in ops.columns]
    at = np.flatnonzero(mask)
    key, first = _group_key(ops, cols, at)
    out: dict[str, Any] = {c: np.array([_text(v) for v in np.asarray(ops[c].array.take(at[first]), dtype=object)],
                                       dtype=object) for c in cols}
    # the duration and every extra summed by one groupby (the same per-column sums, one fixed cost)
    values = pd.DataFrame({"dur": ops["duration_us"].to_numpy(dtype="float64")[at],
                           **{f"x{i}": v[at] for i, v in enumerate(extra.values())}})
    by_key = values.groupby(key, sort=False)
    sums = by_key.sum()
    out["count"], out["total_us"], out["max_us"] = by_key.size().to_numpy(), sums["dur"].to_numpy(), \
        by_key["dur"].max().to_numpy()
    for i, k in enumerate(extra):
        out[k] = sums[f"x{i}"].to_numpy()
    for c in _GROUP:
        if c not in out:
            out[c] = ""
    return pd.DataFrame(out, index=pd.RangeIndex(len(first)))


def _group_key(ops: pd.DataFrame, cols: Sequence[str], at: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Group id (0, 1, ... in order of first appearance; a missing value is a value) of each row ``at`` by its
    values in ``cols``, and each group's first row (a position in ``at``)."""
    key = combined_codes(ops, cols, at)
    first = pd.Series(key).drop_duplicates().index.to_numpy()
    return key, first


def _rows(frame: pd.DataFrame, columns: Sequence[str], digits: int = 3) -> list[list[Any]]:
    return [[round(v, digits) if isinstance(v, float) and math.isfinite(v) else
             (None if isinstance(v, float) else v) for v in rec]
            for rec in frame[list(columns)].itertuples(index=False)]


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [OperatorKB]
