"""Operator knowledge base: per-op checks on the device tasks of a profile.

Each rule looks at every op row (never a sample of them) and reports the ops it concerns with the time they
cost and a realistic share of it that the fix recovers:

* ``operator.block-dim``: blocks that leave cores idle in the op's last wave (``Block Dim`` or ``Block Num``);
* ``operator.no-bound``: ops whose busiest pipe is far from saturated (vector pipes read from ``aiv_*``);
* ``operator.dynamic-shape``: ops compiled for dynamic shapes (``OP State``; unknown when the column is absent);
* ``operator.ai-core-freq``: ops that ran while the AI Core clock was throttled (``AI Core Freq`` counter);
* ``operator.cube-affinity`` / ``operator.cube-bound``: matmul inner axis alignment and bound class;
* ``operator.fa-affinity`` / ``operator.fa-bound``: FlashAttention head dim / sequence alignment and bound;
* ``operator.vector-bound``: vector op types that are memory bound or far from any bound.

Work is done per distinct (name, type, shapes) group or with numpy over the whole table, so the cost grows
linearly with the rows.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from functools import reduce
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, Severity, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc
from advisor.model import parse_list, parse_shapes
from advisor.platform import has_tool

# ---------------------------------------------------------------------------------------------------------
# small helpers
# ---------------------------------------------------------------------------------------------------------
_GROUP = ["name", "type", "core", "input_shapes", "input_formats", "output_shapes", "input_dtypes"]


def severity_for(share: float, levels: Mapping[str, float]) -> Severity:
    """Severity from a share of device busy time (``levels``: lowest share of critical/major/minor)."""
    for name in ("critical", "major", "minor"):
        if name in levels and share >= float(levels[name]):
            return name  # type: ignore[return-value]
    return "info"


def plural(n: int, word: str, words: str | None = None) -> str:
    return f"{n} {word if n == 1 else (words or word + 's')}"


def pct(x: float) -> str:
    return f"{100.0 * x:.1f}%"


def _codes_map(series: pd.Series, fn: Any, fill: Any, dtype: Any = object) -> np.ndarray:
    """``fn`` evaluated once per distinct value of ``series`` and broadcast to the rows."""
    s = series if isinstance(series.dtype, pd.CategoricalDtype) else series.astype("category")
    cats = list(s.cat.categories)
    values = np.array([fn(c) for c in cats] + [fill], dtype=dtype)
    codes = s.cat.codes.to_numpy()
    return values[np.where(codes >= 0, codes, len(cats))]


def _in(series: pd.Series, values: Iterable[str]) -> np.ndarray:
    wanted = {str(v) for v in values}
    return _codes_map(series, lambda c: str(c) in wanted, False, bool)


def _col(ops: pd.DataFrame, name: str) -> np.ndarray:
    if name in ops.columns:
        return ops[name].to_numpy(dtype="float64")
    return np.full(len(ops), np.nan)


def _first(*arrays: np.ndarray) -> np.ndarray:
    """Element-wise first non-NaN value of the arrays."""
    out = arrays[0].copy()
    for a in arrays[1:]:
        out = np.where(np.isnan(out), a, out)
    return out


def _elements(shape: Sequence[int] | None) -> float:
    if shape is None:
        return math.nan
    n = 1
    for d in shape:
        if d < 0:
            return math.nan
        n *= d
    return float(n)


def _first_elements(value: object) -> float:
    shapes = parse_shapes(value)
    return _elements(shapes[0]) if shapes else math.nan


def _text(value: object) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or value is pd.NA:
        return ""
    return str(value)


def aoe_tuning(ctx: AnalysisContext, what: str = "Tune them") -> str:
    """The tuning sentence: AOE operator tuning where the chip's toolchain has AOE, else what replaces it."""
    if has_tool(ctx.platform, "aoe"):
        return f"{what} with AOE operator tuning (aoe --job_type=2)"
    return (f"{ctx.platform.get('soc')}'s toolchain has no AOE: change the model instead (fuse the layer with its "
            "neighbours, smaller dtypes, shapes the kernels tile well)")


def tune_fix(ctx: AnalysisContext, summary: str, names: list[str]) -> Fix:
    """AOE operator tuning of ``names``: the offline command for ATC models; for framework (eager) profiles the
    op list only, since the model is tuned from the training script there; a model change where the chip's
    toolchain has no AOE (SS928/SS927)."""
    framework = (ctx.profile.meta.framework or "").lower()
    data = {"tune_ops_name": names[:50]}
    if not has_tool(ctx.platform, "aoe"):
        return Fix("code", f"no AOE for {ctx.platform.get('soc')}: fuse / re-shape these layers in the model",
                   {"ops": names[:50]})
    if framework in ("pytorch", "mindspore"):
        return Fix("config", summary + " (op tuning of the framework graph; the list is AOE's tune_ops_name)", data)
    return Fix("config", summary, data, "aoe --framework=5 --model=<model.onnx> --job_type=2")


def _busy(ctx: AnalysisContext) -> float:
    busy = float(ctx.profile.busy_time_us()) if len(ctx.profile.ops) else 0.0
    return busy if busy > 0 else float(np.nansum(_col(ctx.profile.ops, "duration_us")))


def _by_name(names: np.ndarray, values: np.ndarray) -> dict[str, float]:
    """Sum of ``values`` per op name, largest first (the ``saving_by_op`` of a finding)."""
    if not len(names):
        return {}
    s = pd.Series(values, index=pd.Index(names, dtype=object)).groupby(level=0, sort=False).sum()
    s = s[s > 0].sort_values(ascending=False, kind="stable")
    return {str(k): float(v) for k, v in s.items()}


def _weighted(values: np.ndarray, weights: np.ndarray, keys: np.ndarray) -> pd.Series:
    """Duration-weighted mean of ``values`` per group id in ``keys`` (NaN values ignored)."""
    ok = np.isfinite(values) & np.isfinite(weights)
    num = pd.Series(np.where(ok, values * weights, 0.0)).groupby(keys).sum()
    den = pd.Series(np.where(ok, weights, 0.0)).groupby(keys).sum()
    return (num / den.where(den > 0)).astype("float64")


def _groups(ops: pd.DataFrame, mask: np.ndarray, extra: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Rows under ``mask`` grouped by name/type/core/shapes: count, total, max, and sums of ``extra``.

    Grouping runs on the categorical columns (codes), so it costs one pass however many rows there are."""
    cols = [c for c in _GROUP if c in ops.columns]
    sub = ops.loc[mask, cols].copy()
    sub["duration_us"] = ops["duration_us"].to_numpy(dtype="float64")[mask]
    for k, v in extra.items():
        sub[k] = v[mask]
    agg: dict[str, tuple[str, str]] = {"count": ("duration_us", "size"), "total_us": ("duration_us", "sum"),
                                       "max_us": ("duration_us", "max")}
    for k in extra:
        agg[k] = (k, "sum")
    g = sub.groupby(cols, sort=False, observed=True, dropna=False).agg(**agg).reset_index()
    for c in cols:
        g[c] = g[c].astype(object).map(_text)
    for c in _GROUP:
        if c not in g.columns:
            g[c] = ""
    return g


def _rows(frame: pd.DataFrame, columns: Sequence[str], digits: int = 3) -> list[list[Any]]:
    out = []
    for rec in frame[list(columns)].itertuples(index=False):
        out.append([round(v, digits) if isinstance(v, float) and math.isfinite(v) else
                    (None if isinstance(v, float) else v) for v in rec])
    return out


# ---------------------------------------------------------------------------------------------------------
# rule documentation
# ---------------------------------------------------------------------------------------------------------
RULES = (
    RuleDoc(
        id="operator.block-dim",
        title="Block dim leaves AI cores idle",
        what="For every AI Core / vector task, compares its block count (kernel_details 'Block Dim', or 'Block "
             "Num' in newer torch_npu) with the cores of its type (AI_CORE and MIX_AIC: ai_core_num; "
             "AI_VECTOR_CORE and MIX_AIV: aiv_num; from info.json, else rules/platforms.yaml for a chip identified by "
             "name, else the block dim most of the profile's multi-core time uses). An op whose blocks fill "
             "only part of its last wave (used / (waves x cores) < 1; mix ops: the better of the cube and vector "
             "parts) is reported when it lasts at least block_dim.min_duration_us and its first output is large "
             "enough to split over every core (min_elements_per_core).",
        why="Cores without a block idle for the whole op: 20 blocks on 24 cores leave 17 % of the chip unused, 7 "
            "blocks leave 71 %. msprof-analyze checks the same (block_dim % cores) but skips it entirely when the "
            "header says 'Block Num' or every op is dynamic.",
        how_to_fix="Let the tiling use all cores: run AOE operator tuning (aoe --job_type=2) on the model, pick "
                   "batch / hidden sizes that divide into the core count, or for custom (Ascend C) kernels set "
                   "block dim to a multiple of the core count.",
        thresholds=("block_dim", "ai_core_cores", "vector_cores", "severity"),
        needs=("ops",),
        example="MatMulV2 with Block Dim 20 on a 24-core Ascend910B2: 4 cores idle for its 120 us.",
    ),
    RuleDoc(
        id="operator.no-bound",
        title="Ops with no clear bound (every pipe under-used)",
        what="For every op row with PMU data, takes the busiest of its pipe ratios (no_bound.pipes: mac, vec, "
             "scalar, mte1, mte2, mte3, fixpipe; each from the unified column and its aic_/aiv_ variants, so "
             "vector ops are judged by their aiv_* pipes). Ops (name + shapes) whose busiest pipe stays below "
             "no_bound.bound_ratio and whose longest task exceeds no_bound.min_duration_us are reported. Every row "
             "is checked, whatever the first one is.",
        why="An op that saturates no pipe is limited by latency, synchronisation or a poor tiling, not by the "
            "hardware: its time can usually be cut by tuning. msprof-analyze decides whether to run this check "
            "from the first CSV row only, and reads vector ops' mte2/scalar ratios from the cube columns.",
        how_to_fix="Tune the ops with AOE operator tuning (aoe --job_type=2, or the op tuning list in the "
                   "report); check block dim and shapes (operator.block-dim, operator.cube-affinity); for custom "
                   "kernels enable double buffering and larger tiles.",
        thresholds=("no_bound", "severity"),
        needs=("ops", "metrics"),
    ),
    RuleDoc(
        id="operator.dynamic-shape",
        title="Dynamic-shape operators",
        what="Counts ops whose OP State is 'dynamic' and their share of device time; reported when the share "
             "reaches dynamic.min_time_share. Says whether their shapes actually vary across calls. When the "
             "profile has no OP State column the rule says so in the report notes instead of guessing; the "
             "other operator rules still run.",
        why="Dynamic-shape kernels compute their tiling at run time and use generic loop bounds; in eager mode "
            "with online compilation every new shape also triggers a compile. msprof-analyze reports every op as "
            "dynamic when the column is missing and then skips its block-dim and no-bound checks.",
        how_to_fix="Shapes that vary between steps: keep binary kernels with "
                   "torch_npu.npu.set_compile_mode(jit_compile=False) and torch_npu.npu.config.allow_internal_format"
                   " = False, and bucket/pad inputs to a few fixed sizes. Shapes that never vary: compile them "
                   "statically (graph mode with torchair, or --input_shape with static dims for ATC models).",
        thresholds=("dynamic", "severity"),
        needs=("ops",),
    ),
    RuleDoc(
        id="operator.ai-core-freq",
        title="Ops ran while the AI Core clock was throttled",
        what="Reads the 'AI Core Freq' counter of the trace (MHz over time), computes each AI Core / vector op's "
             "time-weighted mean clock over its execution and reports ops whose clock was at least "
             "frequency.min_drop below the nominal maximum (the chip's cube_freq_mhz when the chip was detected, "
             "or the highest value the counter recorded).",
        why="A lower clock stretches every compute cycle: an op at 1500 MHz on an 1800 MHz chip takes 20 % "
            "longer. Throttling comes from power capping or temperature, not from the model.",
        how_to_fix="Check the power cap and temperature of the NPU (npu-smi info; npu-smi info -t power -i <id>, "
                   "-t temp), the cooling and the power supply; remove power-saving settings; re-profile to "
                   "confirm the clock stays at its nominal value.",
        thresholds=("frequency", "severity"),
        needs=("ops", "timeline"),
    ),
    RuleDoc(
        id="operator.cube-affinity",
        title="Matmul inner axis not aligned",
        what="For matmul-type ops (cube.types) holding at least cube.min_time_share of device time, checks the "
             "inner (contiguous) axis of the two inputs: the last dim in ND, n1 x n0 in FRACTAL_NZ. An inner axis "
             "that is not a multiple of cube.inner_axis_multiple elements is reported.",
        why="The cube loads its operands in 512-byte aligned bursts and 16x16 fractal blocks: an unaligned inner "
            "axis makes every row load partially filled blocks and unaligned MTE2 transfers.",
        how_to_fix="Pad the inner dimension to a multiple of 256 (e.g. hidden size 4000 -> 4096, vocabulary "
                   "sizes rounded up), or choose model dimensions that are multiples of 256.",
        thresholds=("cube", "severity"),
        needs=("ops",),
    ),
    RuleDoc(
        id="operator.cube-bound",
        title="Matmul far from the cube roof or bound on MTE2",
        what="For matmul-type ops holding at least cube.min_time_share of device time, classifies the cube ratios "
             "(duration-weighted): aic_mac_ratio >= cube.mac_bound_ratio is mac bound (fine); otherwise "
             "aic_mte2_ratio >= cube.mte2_bound_ratio is MTE2 bound; otherwise the op has optimization space "
             "(mac_bound_ratio - mac ratio). Each ratio is compared with its own threshold.",
        why="A matmul that keeps the cube busy less than 80 % of its time waits on data or synchronisation. "
            "msprof-analyze compares the mac ratio with the mte2 threshold in its second test.",
        how_to_fix="Optimization space: tune tiling with AOE (aoe --job_type=2), align shapes "
                   "(operator.cube-affinity), use larger batched matmuls. MTE2 bound: keep weights in FRACTAL_NZ "
                   "(torch_npu.npu_format_cast(w, 29)), raise arithmetic intensity (bigger M), or quantize weights.",
        thresholds=("cube", "severity"),
        needs=("ops", "metrics"),
    ),
    RuleDoc(
        id="operator.fa-affinity",
        title="FlashAttention head dim or sequence length not aligned",
        what="For FlashAttention ops (fa.types) with at least fa.min_time_share of device time, reads D (head dim, "
             "last dim of a 4-D query) and S (the larger of dims 1 and 2 of a 4-D query, of dims 0 and 1 of a 3-D "
             "BSH/SBH one; profiles do not record the layout) and reports those not divisible by "
             "fa.axis_multiple.",
        why="The FA kernels tile S and D in blocks of 128: a remainder runs as a padded, partly empty block.",
        how_to_fix="Pad the sequence to a multiple of 128 (with the attention mask covering the padding) and use "
                   "head dims of 64 / 128.",
        thresholds=("fa", "severity"),
        needs=("ops",),
    ),
    RuleDoc(
        id="operator.fa-bound",
        title="FlashAttention ops far from their bound",
        what="For FlashAttention ops with at least fa.min_time_share of device time, checks aic_mte2_ratio, "
             "aic_fixpipe_ratio and aiv_vec_ratio against fa.bound; an op reaching none of them has optimization "
             "space.",
        why="A FlashAttention kernel below every bound spends its time on synchronisation between its cube and "
            "vector stages or on a poor split of S.",
        how_to_fix="Use the fused layout the kernel prefers (BSND/TND with sparse_mode for causal masks), align S "
                   "and D (operator.fa-affinity), and update CANN (FA kernels improve each release).",
        thresholds=("fa", "severity"),
        needs=("ops", "metrics"),
    ),
    RuleDoc(
        id="operator.vector-bound",
        title="Vector op types that are memory bound or far from any bound",
        what="For the ops (name + shapes) whose op type runs on the vector cores (AI_VECTOR_CORE, MIX_AIV) and holds "
             "at least vector.min_time_share of device time, reads aiv_vec_ratio, aiv_mte2_ratio and "
             "aiv_mte3_ratio (the vector columns, not the cube ones; duration-weighted). Memory bound: mte2 or "
             "mte3 >= vector.single_bound_ratio, or vec+mte2+mte3 >= vector.total_bound_ratio with mte2+mte3 > "
             "vec. Not bound: vec+mte2+mte3 below total_bound_ratio and every ratio below single_bound_ratio. "
             "Vector-bound ops are at their roof: listed in the evidence with no saving.",
        why="A memory-bound elementwise op moves its tensors through HBM once per op: fusing it with its "
            "neighbours removes the round trips. An op that is bound on nothing waits on scalar work or "
            "synchronisation.",
        how_to_fix="Memory bound: fuse with neighbouring ops (torch_npu fused APIs, graph mode UB fusion, a custom "
                   "fused kernel). Not bound: AOE operator tuning, larger tensors per launch.",
        thresholds=("vector", "severity"),
        needs=("ops", "metrics"),
    ),
)


# ---------------------------------------------------------------------------------------------------------
# the knowledge base
# ---------------------------------------------------------------------------------------------------------
class OperatorKB(KnowledgeBase):
    id = "operator"
    title = "Operator efficiency (block dim, bound, dynamic shape, frequency, shape affinity)"
    version = "1.0.0"
    api_version = "1"
    requires = ("ops",)
    rules_file = "operator"
    rules = RULES

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        ops = ctx.profile.ops
        if not len(ops):
            return []
        busy = _busy(ctx)
        out: list[Finding] = []
        for check in (block_dim, no_bound, dynamic_shape, ai_core_freq, cube_checks, fa_checks, vector_bound):
            out.extend(check(ctx, ops, busy))
        return out


# ---------------------------------------------------------------------------------------------------------
# operator.block-dim
# ---------------------------------------------------------------------------------------------------------
def core_counts(ctx: AnalysisContext, ops: pd.DataFrame) -> tuple[int | None, int | None, str, float]:
    """(AI cores, vector cores, where they came from, confidence).

    info.json first; then the platform entry of a chip identified by name; else (chip unknown, or only its
    class such as ``Ascend910B-class``) the block dim most multi-core tasks of each core family use, weighted by
    time: large kernels fill every core, so that value is the core count (an underestimate only makes the rule
    quieter)."""
    meta, plat, rules = ctx.profile.meta, ctx.platform, ctx.rules
    if meta.ai_core_num:
        aic = int(meta.ai_core_num)
        aiv = int(meta.aiv_num) if meta.aiv_num else aic
        return aic, aiv, "info.json", 0.7
    chip = str(meta.chip or "")
    named = bool(chip) and not chip.endswith("-class") and \
        not str(plat.get("soc_source", "")).startswith("default")
    if named and plat.get("ai_core_num"):
        aic = int(plat["ai_core_num"])
        aiv = int(plat.get("vector_core_num") or 0) or aic
        return aic, aiv, f"rules/platforms.yaml {plat.get('soc')}", 0.6
    blocks = _col(ops, "block_dim")
    dur = _col(ops, "duration_us")

    def mode(cores: Sequence[str]) -> int | None:
        m = _in(ops["core"], cores) & (blocks > 1) & np.isfinite(dur)
        if not m.any():
            return None
        w = pd.Series(dur[m]).groupby(blocks[m]).sum()
        return int(w.idxmax())

    aic = mode(rules.get("ai_core_cores", []))
    aiv = mode(rules.get("vector_cores", []))
    if aic is None and aiv is None:
        return None, None, "unknown", 0.0
    aic = aic or aiv
    aiv = aiv or aic
    what = f"chip {chip}" if chip else "chip not identified"
    return aic, aiv, f"inferred from the block dims of this profile ({what}: the most used values)", 0.4


def _used_fraction(blocks: np.ndarray, cores: np.ndarray) -> np.ndarray:
    """Share of the core-slots of all waves that hold a block: blocks / (ceil(blocks/cores) x cores)."""
    with np.errstate(divide="ignore", invalid="ignore"):
        waves = np.ceil(blocks / cores)
        return np.where((blocks > 0) & (cores > 0), blocks / (waves * cores), np.nan)


def block_dim(ctx: AnalysisContext, ops: pd.DataFrame, busy: float) -> list[Finding]:
    rules = ctx.rules
    cfg = rules.get("block_dim", {})
    aic, aiv, source, confidence = core_counts(ctx, ops)
    if not aic:
        ctx.note("operator.block-dim: skipped, the core count is unknown (no info.json, chip not identified)")
        return []
    blocks = _col(ops, "block_dim")
    if not np.isfinite(blocks).any():
        ctx.note("operator.block-dim: skipped, the profile has no Block Dim / Block Num column")
        return []
    cube = _in(ops["core"], rules.get("ai_core_cores", []))
    vec = _in(ops["core"], rules.get("vector_cores", []))
    mix = _codes_map(ops["core"], lambda c: str(c).startswith("MIX"), False, bool)
    primary = np.where(cube, aic, np.where(vec, aiv, 0)).astype("float64")
    secondary = np.where(cube, aiv, np.where(vec, aic, 0)).astype("float64")
    used = _used_fraction(blocks, primary)
    mix_blocks = _col(ops, "mix_block_dim")
    used_mix = np.where(mix & (mix_blocks > 0), _used_fraction(mix_blocks, secondary), np.nan)
    used = np.fmax(used, used_mix)
    dur = _col(ops, "duration_us")
    elements = _codes_map(ops["output_shapes"], _first_elements, np.nan, "float64")
    big_enough = ~(elements < primary * float(cfg.get("min_elements_per_core", 0)))
    flagged = (cube | vec) & np.isfinite(used) & (used < 1.0 - 1e-9) & (dur >= float(cfg.get("min_duration_us", 0))) \
        & big_enough
    if not flagged.any():
        return []
    realism = float(cfg.get("realism", 0.5))
    saving = np.where(flagged, dur * (1.0 - used) * realism, 0.0)
    names = ops["name"].to_numpy(dtype=object)
    by_op = _by_name(names[flagged], saving[flagged])
    total = float(saving.sum())
    g = _groups(ops, flagged, {"saving_us": saving, "blocks": blocks, "cores": primary, "used": used * dur})
    g["blocks"] = g["blocks"] / g["count"]
    g["cores"] = g["cores"] / g["count"]
    g["used_pct"] = 100.0 * g["used"] / g["total_us"]
    g = g.sort_values("saving_us", ascending=False, kind="stable")
    flagged_time = float(np.nansum(dur[flagged]))
    share = total / busy if busy else 0.0
    rows = _rows(g, ["name", "type", "core", "blocks", "cores", "used_pct", "count", "total_us", "saving_us"], 2)
    evidence = {
        "ai_core_num": aic, "vector_core_num": aiv, "core_count_source": source,
        "ops": len(by_op), "tasks": int(flagged.sum()), "time_us": flagged_time,
        "share_of_device_time": flagged_time / busy if busy else None,
        "table": table(["op", "type", "core", "block dim", "cores", "cores used %", "tasks", "time us",
                        "saving us"], rows),
    }
    top = ", ".join(f"{r[0]} ({r[3]:g} blocks on {r[4]:g} cores)" for r in rows[:3])
    return [ctx.finding(
        rule="operator.block-dim",
        title=f"{plural(len(by_op), 'op')} leave{'s' if len(by_op) == 1 else ''} AI cores idle (block dim not a "
              f"multiple of {aic}/{aiv} cores)",
        severity=severity_for(share, rules.get("severity", {})),
        ops=list(by_op),
        evidence=evidence,
        estimated_saving_us=total,
        basis=f"per task: duration x (1 - blocks / (waves x cores)) x {realism:g} (block_dim.realism: tiling and "
              "per-core overheads keep part of the idle share)",
        recommendation=f"{top}: their last wave leaves cores idle. {aoe_tuning(ctx, 'Tune their tiling')} or "
                       "choose shapes whose split divides into the core count; for custom kernels set the block dim "
                       "to a multiple of the core count.",
        fix=tune_fix(ctx, "tune tiling / block dim of these ops with AOE operator tuning", list(by_op)),
        confidence=confidence,
        saving_by_op=by_op,
    )]


# ---------------------------------------------------------------------------------------------------------
# operator.no-bound
# ---------------------------------------------------------------------------------------------------------
def busiest_pipe(ops: pd.DataFrame, pipes: Sequence[str]) -> tuple[np.ndarray, np.ndarray]:
    """Per row: the highest pipe ratio over the unified, aic_ and aiv_ columns, and that pipe's name."""
    arrays: list[np.ndarray] = []
    labels: list[str] = []
    for p in pipes:
        for col in (p, f"aic_{p}", f"aiv_{p}"):
            if col in ops.columns:
                arrays.append(ops[col].to_numpy(dtype="float64"))
                labels.append(col)
    if not arrays:
        return np.full(len(ops), np.nan), np.full(len(ops), "", dtype=object)
    stacked = np.vstack(arrays)
    best = reduce(np.fmax, arrays)
    filled = np.where(np.isnan(stacked), -np.inf, stacked)
    which = np.array(labels, dtype=object)[np.argmax(filled, axis=0)]
    return best, which


def no_bound(ctx: AnalysisContext, ops: pd.DataFrame, busy: float) -> list[Finding]:
    rules = ctx.rules
    cfg = rules.get("no_bound", {})
    bound = float(cfg.get("bound_ratio", 0.8))
    best, which = busiest_pipe(ops, cfg.get("pipes", []))
    has_pmu = np.isfinite(best) & (best > 0)
    if not has_pmu.any():
        ctx.note("operator.no-bound: skipped, the profile has no pipe ratios (collect with "
                 "aic_metrics=PipeUtilization)")
        return []
    dur = _col(ops, "duration_us")
    cand = has_pmu & (best < bound) & np.isfinite(dur)
    if not cand.any():
        return []
    # an op (name + shapes) qualifies by its longest task, then all its unbound tasks count
    gid = ops.groupby(["name", "input_shapes", "output_shapes"], observed=True, dropna=False, sort=False).ngroup()
    gid = gid.to_numpy()
    max_per_group = pd.Series(np.where(cand, dur, -np.inf)).groupby(gid).transform("max").to_numpy()
    flagged = cand & (max_per_group > float(cfg.get("min_duration_us", 20.0)))
    if not flagged.any():
        return []
    realism = float(cfg.get("realism", 0.5))
    saving = np.where(flagged, dur * (1.0 - best / bound) * realism, 0.0)
    names = ops["name"].to_numpy(dtype=object)
    by_op = _by_name(names[flagged], saving[flagged])
    total = float(saving.sum())
    g = _groups(ops, flagged, {"saving_us": saving, "best_w": np.nan_to_num(best) * dur})
    g["busiest"] = g["best_w"] / g["total_us"]
    pipe_of = pd.Series(which[flagged]).groupby(names[flagged].astype(str)).agg(lambda s: s.mode().iat[0])
    g["pipe"] = g["name"].map(pipe_of)
    g = g.sort_values("saving_us", ascending=False, kind="stable")
    rows = _rows(g, ["name", "type", "core", "input_shapes", "busiest", "pipe", "count", "total_us", "saving_us"])
    flagged_time = float(np.nansum(dur[flagged]))
    share = total / busy if busy else 0.0
    top = ", ".join(f"{r[0]} (busiest pipe {r[5]} {r[4]:.2f})" for r in rows[:3])
    return [ctx.finding(
        rule="operator.no-bound",
        title=f"{plural(len(by_op), 'op')} saturate{'s' if len(by_op) == 1 else ''} no pipe (all ratios < {bound:g})",
        severity=severity_for(share, rules.get("severity", {})),
        ops=list(by_op),
        evidence={"bound_ratio": bound, "ops": len(by_op), "tasks": int(flagged.sum()), "time_us": flagged_time,
                  "share_of_device_time": flagged_time / busy if busy else None,
                  "rows_with_pmu": int(has_pmu.sum()),
                  "table": table(["op", "type", "core", "input shapes", "busiest ratio", "busiest pipe", "tasks",
                                  "time us", "saving us"], rows)},
        estimated_saving_us=total,
        basis=f"per task: duration x (1 - busiest pipe ratio / {bound:g}) x {realism:g} (no_bound.realism): a tuned "
              "op's busiest pipe reaches the bound ratio",
        recommendation=f"{top}: no pipe is busy, so latency, synchronisation or the tiling limits them. "
                       f"{aoe_tuning(ctx)} and check their block dim and shape alignment.",
        fix=tune_fix(ctx, "tune these ops with AOE operator tuning", list(by_op)),
        confidence=0.5,
        saving_by_op=by_op,
    )]


# ---------------------------------------------------------------------------------------------------------
# operator.dynamic-shape
# ---------------------------------------------------------------------------------------------------------
def dynamic_shape(ctx: AnalysisContext, ops: pd.DataFrame, busy: float) -> list[Finding]:
    rules = ctx.rules
    cfg = rules.get("dynamic", {})
    state = ops["op_state"]
    if not state.notna().any():
        ctx.note("operator.dynamic-shape: skipped, the profile has no OP State column, so static/dynamic shape "
                 "is unknown (not assumed dynamic); the other operator rules ran on every op")
        return []
    dyn = _codes_map(state, lambda c: str(c).lower() == "dynamic", False, bool)
    if not dyn.any():
        return []
    dur = _col(ops, "duration_us")
    dyn_time = float(np.nansum(dur[dyn]))
    share_time = dyn_time / busy if busy else 0.0
    if share_time < float(cfg.get("min_time_share", 0.0)):
        return []
    known = int(state.notna().sum())
    names = ops["name"].to_numpy(dtype=object)
    sub = pd.DataFrame({"name": ops["name"][dyn], "type": ops["type"][dyn],
                        "shape": ops["input_shapes"].cat.codes[dyn] if isinstance(ops["input_shapes"].dtype,
                                                                                    pd.CategoricalDtype)
                        else ops["input_shapes"][dyn], "dur": dur[dyn]})
    per = sub.groupby("name", sort=False, observed=True).agg(type=("type", "first"), count=("dur", "size"),
                                                             total_us=("dur", "sum"), shapes=("shape", "nunique"))
    varying = per[per["shapes"] > 1]
    fraction = float(cfg.get("saving_fraction", 0.05))
    saving = np.where(dyn, np.nan_to_num(dur) * fraction, 0.0)
    by_op = _by_name(names[dyn], saving[dyn])
    per = per.assign(saving_us=per["total_us"] * fraction).sort_values("total_us", ascending=False, kind="stable")
    rows = [[str(n), _text(t), int(c), int(k), float(tot), float(sv)] for n, t, c, k, tot, sv in
            zip(per.index, per["type"], per["count"], per["shapes"], per["total_us"], per["saving_us"], strict=True)]
    all_dynamic = int(dyn.sum()) == known
    framework = (ctx.profile.meta.framework or "").lower()
    if len(varying):
        advice = (f"{len(varying)} of them change shape between calls: keep binary kernels "
                  "(torch_npu.npu.set_compile_mode(jit_compile=False), allow_internal_format=False) so no shape "
                  "triggers an online compile, and pad/bucket inputs to a few fixed sizes.")
    else:
        advice = ("Their shapes never change in this profile: static-shape kernels (graph mode with torchair, or "
                  "static --input_shape for ATC models) would avoid runtime tiling; in eager mode keep "
                  "jit_compile=False unless the shapes are fixed for the whole run.")
    if framework == "pytorch":
        snippet = ("torch_npu.npu.set_compile_mode(jit_compile=False)\n"
                   "torch_npu.npu.config.allow_internal_format = False")
        fix = Fix("code", "binary kernels, no internal formats (torch_npu)", {"snippet": snippet})
    elif framework == "mindspore":
        fix = Fix("code", "static input shapes: pad/bucket the dataset to a few fixed sizes",
                  {"snippet": "dataset = dataset.padded_batch(batch_size, pad_info={...})  # fixed shapes"})
    else:
        fix = Fix("atc-option", "build with static input shapes (or a few --dynamic_dims gears)",
                  {"flags": ["--input_shape=<name>:<static dims>"]}, "atc ... --input_shape=<name>:<static dims>")
    return [ctx.finding(
        rule="operator.dynamic-shape",
        title=(f"{'All' if all_dynamic else int(dyn.sum())} of {known} ops run dynamic-shape kernels "
               f"({pct(share_time)} of device time)"),
        severity=severity_for(float(saving.sum()) / busy if busy else 0.0, rules.get("severity", {})),
        ops=list(by_op),
        evidence={"dynamic_tasks": int(dyn.sum()), "tasks_with_op_state": known, "all_dynamic": all_dynamic,
                  "dynamic_time_us": dyn_time, "share_of_device_time": share_time,
                  "ops_with_varying_shapes": len(varying),
                  "table": table(["op", "type", "tasks", "distinct input shapes", "time us", "saving us"], rows)},
        estimated_saving_us=float(saving.sum()),
        basis=f"dynamic ops' device time x {fraction:g} (dynamic.saving_fraction: runtime tiling and generic loop "
              "bounds that static kernels avoid)",
        recommendation=advice,
        fix=fix,
        confidence=0.3,
        saving_by_op=by_op,
    )]


# ---------------------------------------------------------------------------------------------------------
# operator.ai-core-freq
# ---------------------------------------------------------------------------------------------------------
def frequency_counter(profile: Any, names: Sequence[str]) -> pd.DataFrame:
    """The AI Core clock samples (``ts_us``, ``mhz``) sorted by time, from ``extras["counters"]``."""
    counters = profile.extras.get("counters") if isinstance(profile.extras, dict) else None
    if counters is None or not len(counters):
        return pd.DataFrame({"ts_us": pd.Series(dtype="float64"), "mhz": pd.Series(dtype="float64")})
    wanted = {n.lower() for n in names}
    mask = _codes_map(counters["name"], lambda c: str(c).lower() in wanted, False, bool)
    sub = pd.DataFrame({"ts_us": counters["ts_us"].to_numpy(dtype="float64")[mask],
                        "mhz": counters["value"].to_numpy(dtype="float64")[mask]})
    sub = sub[np.isfinite(sub["ts_us"]) & np.isfinite(sub["mhz"]) & (sub["mhz"] > 0)]
    return sub.sort_values("ts_us", kind="stable").drop_duplicates("ts_us", keep="last").reset_index(drop=True)


def mean_clock(ts: np.ndarray, mhz: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Time-weighted mean of the step function ``mhz`` (value holds from its sample to the next) over each
    [start, end); NaN for intervals that end before the first sample. Starts before it are clipped to it."""
    # integral of the clock up to each sample
    widths = np.diff(ts)
    cum = np.concatenate([[0.0], np.cumsum(mhz[:-1] * widths)])

    def integral(t: np.ndarray) -> np.ndarray:
        k = np.clip(np.searchsorted(ts, t, side="right") - 1, 0, len(ts) - 1)
        return cum[k] + mhz[k] * (t - ts[k])

    s = np.maximum(start, ts[0])
    e = end
    length = e - s
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = (integral(e) - integral(s)) / length
        point = mhz[np.clip(np.searchsorted(ts, s, side="right") - 1, 0, len(ts) - 1)]
    out = np.where(length > 0, mean, point)
    return np.where(e < ts[0], np.nan, out)


def nominal_clock(ctx: AnalysisContext, observed_max: float) -> tuple[float, str]:
    plat = ctx.platform
    detected = not str(plat.get("soc_source", "")).startswith("default")
    nominal = plat.get("cube_freq_mhz")
    if detected and nominal and float(nominal) >= observed_max:
        return float(nominal), f"{plat.get('soc')} nominal AI Core clock (rules/platforms.yaml)"
    return observed_max, "highest AI Core Freq sample in the trace"


def ai_core_freq(ctx: AnalysisContext, ops: pd.DataFrame, busy: float) -> list[Finding]:
    rules = ctx.rules
    cfg = rules.get("frequency", {})
    samples = frequency_counter(ctx.profile, cfg.get("counter_names", ["AI Core Freq"]))
    if not len(samples):
        if "events" in ctx.profile.available:
            ctx.note("operator.ai-core-freq: skipped, the trace has no 'AI Core Freq' counter")
        return []
    ts, mhz = samples["ts_us"].to_numpy(), samples["mhz"].to_numpy()
    f_max, f_source = nominal_clock(ctx, float(mhz.max()))
    cores = _in(ops["core"], cfg.get("cores", []))
    start, dur = _col(ops, "start_us"), _col(ops, "duration_us")
    ok = cores & np.isfinite(start) & np.isfinite(dur)
    if not ok.any():
        return []
    clock = np.full(len(ops), np.nan)
    clock[ok] = mean_clock(ts, mhz, start[ok], start[ok] + dur[ok])
    drop = 1.0 - clock / f_max
    flagged = ok & np.isfinite(drop) & (drop >= float(cfg.get("min_drop", 0.05)))
    if not flagged.any():
        return []
    saving = np.where(flagged, dur * drop, 0.0)
    names = ops["name"].to_numpy(dtype=object)
    by_op = _by_name(names[flagged], saving[flagged])
    total = float(saving.sum())
    g = _groups(ops, flagged, {"saving_us": saving, "clock_w": np.nan_to_num(clock) * dur})
    g["mean_mhz"] = g["clock_w"] / g["total_us"]
    g = g.sort_values("saving_us", ascending=False, kind="stable")
    rows = _rows(g, ["name", "type", "core", "mean_mhz", "count", "total_us", "saving_us"], 1)
    low = float(mhz.min())
    return [ctx.finding(
        rule="operator.ai-core-freq",
        title=f"{plural(len(by_op), 'op')} ran with the AI Core clock throttled (down to {low:g} of {f_max:g} MHz)",
        severity=severity_for(total / busy if busy else 0.0, rules.get("severity", {})),
        ops=list(by_op),
        evidence={"nominal_mhz": f_max, "nominal_source": f_source, "min_mhz": low, "samples": len(samples),
                  "throttled_tasks": int(flagged.sum()), "time_us": float(np.nansum(dur[flagged])),
                  "table": table(["op", "type", "core", "mean clock MHz", "tasks", "time us", "saving us"], rows)},
        estimated_saving_us=total,
        basis=f"per task: duration x (1 - mean clock during the task / {f_max:g} MHz)",
        recommendation=f"The AI Core clock fell to {low:g} MHz while these ops ran (nominal {f_max:g} MHz). Check "
                       "the NPU's power cap and temperature (npu-smi info -t power / -t temp), cooling and power "
                       "supply, and re-profile to confirm the clock holds.",
        fix=Fix("config", "keep the AI Core at its nominal clock: check power cap, temperature and cooling",
                {"nominal_mhz": f_max, "observed_min_mhz": low}, "npu-smi info"),
        confidence=0.8,
        saving_by_op=by_op,
    )]


# ---------------------------------------------------------------------------------------------------------
# cube and FlashAttention checks
# ---------------------------------------------------------------------------------------------------------
def inner_axes(shapes: object, formats: object, nz_formats: Sequence[str]) -> list[int]:
    """Inner (contiguous) axis length of the first two inputs: ND last dim, FRACTAL_NZ n1 x n0."""
    dims = parse_shapes(shapes)
    fmts = parse_list(formats)
    nz = {f.upper() for f in nz_formats}
    out = []
    for i, shape in enumerate(dims[:2]):
        if not shape:
            continue
        fmt = fmts[i].upper().removeprefix("FORMAT_").split(":")[0] if i < len(fmts) else "ND"
        if fmt in nz and len(shape) >= 4:
            out.append(int(shape[-4]) * int(shape[-1]))
        else:
            out.append(int(shape[-1]))
    return out


def _kind_groups(ops: pd.DataFrame, mask: np.ndarray, ratios: Mapping[str, np.ndarray]) -> pd.DataFrame:
    """Groups of the rows under ``mask`` with duration-weighted mean ratios."""
    dur = _col(ops, "duration_us")
    g = _groups(ops, mask, {f"_w_{k}": np.where(np.isfinite(v), v * dur, 0.0) for k, v in ratios.items()}
                | {f"_d_{k}": np.where(np.isfinite(v), dur, 0.0) for k, v in ratios.items()})
    for k in ratios:
        g[k] = (g[f"_w_{k}"] / g[f"_d_{k}"].where(g[f"_d_{k}"] > 0)).astype("float64")
    return g.drop(columns=[c for c in g.columns if c.startswith(("_w_", "_d_"))])


def _group_saving(ctx: AnalysisContext, g: pd.DataFrame, frac: pd.Series) -> dict[str, float]:
    s = (g["total_us"] * frac).groupby(g["name"]).sum()
    s = s[s > 0].sort_values(ascending=False, kind="stable")
    return {str(k): float(v) for k, v in s.items()}


def cube_checks(ctx: AnalysisContext, ops: pd.DataFrame, busy: float) -> list[Finding]:
    rules = ctx.rules
    cfg = rules.get("cube", {})
    mask = _in(ops["type"], cfg.get("types", [])) & _in(ops["core"], rules.get("ai_core_cores", []))
    if not mask.any():
        return []
    ratios = {"mac": _first(_col(ops, "aic_mac_ratio"), _col(ops, "mac_ratio")),
              "mte2": _first(_col(ops, "aic_mte2_ratio"), _col(ops, "mte2_ratio"))}
    g = _kind_groups(ops, mask, ratios)
    g = g[g["total_us"] >= float(cfg.get("min_time_share", 0.0)) * busy]
    if not len(g):
        return []
    levels = rules.get("severity", {})
    out: list[Finding] = []

    # affinity
    multiple = int(cfg.get("inner_axis_multiple", 256))
    nz = cfg.get("nz_formats", ["FRACTAL_NZ"])
    axes = [inner_axes(s, f, nz) for s, f in zip(g["input_shapes"], g["input_formats"], strict=True)]
    bad = np.array([any(a % multiple for a in ax) for ax in axes], dtype=bool)
    if bad.any():
        ga = g[bad].assign(inner=[", ".join(map(str, ax)) for ax, b in zip(axes, bad, strict=True) if b])
        frac = float(cfg.get("affinity_saving_fraction", 0.1))
        by_op = _group_saving(ctx, ga, pd.Series(frac, index=ga.index))
        total = float(sum(by_op.values()))
        ga = ga.assign(saving_us=ga["total_us"] * frac).sort_values("saving_us", ascending=False, kind="stable")
        rows = _rows(ga, ["name", "type", "input_shapes", "input_dtypes", "inner", "count", "total_us", "saving_us"])
        out.append(ctx.finding(
            rule="operator.cube-affinity",
            title=f"{plural(len(by_op), 'matmul op')} with an inner axis that is not a multiple of {multiple}",
            severity=severity_for(total / busy if busy else 0.0, levels),
            ops=list(by_op),
            evidence={"multiple": multiple, "groups": len(ga),
                      "table": table(["op", "type", "input shapes", "dtypes", "inner axes", "tasks", "time us",
                                      "saving us"], rows)},
            estimated_saving_us=total,
            basis=f"the ops' time x {frac:g} (cube.affinity_saving_fraction: partly filled fractal blocks and "
                  "unaligned MTE2 bursts an aligned axis avoids)",
            recommendation=f"{rows[0][0]} ({rows[0][2]}) has inner axes {rows[0][4]}: pad the inner dimension to a "
                           f"multiple of {multiple} elements (e.g. 4000 -> 4096) or choose model dims that are.",
            fix=Fix("code", f"pad the matmul inner dimension to a multiple of {multiple}",
                    {"snippet": f"x = torch.nn.functional.pad(x, (0, (-x.shape[-1]) % {multiple}))  # and the "
                                "matching weight rows"}),
            confidence=0.5,
            saving_by_op=by_op,
        ))

    # bound class: each ratio against its own threshold
    mac_t, mte2_t = float(cfg.get("mac_bound_ratio", 0.8)), float(cfg.get("mte2_bound_ratio", 0.95))
    realism = float(cfg.get("realism", 0.5))
    gb = g[np.isfinite(g["mac"]) | np.isfinite(g["mte2"])].copy()
    if len(gb):
        mac = gb["mac"].fillna(0.0)
        mte2 = gb["mte2"].fillna(0.0)
        gb["bound"] = np.where(mac >= mac_t, "mac", np.where(mte2 >= mte2_t, "mte2", "none"))
        space = (1.0 - mac / mac_t).clip(lower=0.0) * realism
        frac = pd.Series(np.where(gb["bound"] == "mac", 0.0,
                                  np.where(gb["bound"] == "mte2", float(cfg.get("mte2_saving_fraction", 0.1)),
                                           space)), index=gb.index)
        gb["saving_us"] = gb["total_us"] * frac
        gb["space_pct"] = np.where(gb["bound"] == "none", 100.0 * (mac_t - mac), 0.0)
        todo = gb[gb["bound"] != "mac"]
        if len(todo):
            by_op = _group_saving(ctx, todo, frac[todo.index])
            total = float(sum(by_op.values()))
            todo = todo.sort_values("saving_us", ascending=False, kind="stable")
            rows = _rows(todo, ["name", "type", "input_shapes", "mac", "mte2", "bound", "space_pct", "count",
                                "total_us", "saving_us"])
            n_mte2 = int((todo["bound"] == "mte2").sum())
            out.append(ctx.finding(
                rule="operator.cube-bound",
                title=f"{plural(len(todo), 'matmul shape')} below the cube roof ({n_mte2} MTE2 bound, "
                      f"{len(todo) - n_mte2} with optimization space)",
                severity=severity_for(total / busy if busy else 0.0, levels),
                ops=list(by_op),
                evidence={"mac_bound_ratio": mac_t, "mte2_bound_ratio": mte2_t,
                          "mac_bound_groups": int((gb["bound"] == "mac").sum()),
                          "table": table(["op", "type", "input shapes", "mac ratio", "mte2 ratio", "bound",
                                          "optimization space %", "tasks", "time us", "saving us"], rows)},
                estimated_saving_us=total,
                basis=f"optimization space: time x (1 - mac ratio / {mac_t:g}) x {realism:g} (cube.realism); MTE2 "
                      f"bound: time x {cfg.get('mte2_saving_fraction', 0.1):g} (cube.mte2_saving_fraction)",
                recommendation=f"{aoe_tuning(ctx, 'Tune the tiling of these matmuls')} and align their shapes; "
                               "for MTE2-bound ones keep the weights in FRACTAL_NZ "
                               "(torch_npu.npu_format_cast(w, 29)) or raise the rows per call (batch more tokens).",
                fix=tune_fix(ctx, "tune these matmuls with AOE operator tuning", list(by_op)),
                confidence=0.5,
                saving_by_op=by_op,
            ))
    return out


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


def fa_checks(ctx: AnalysisContext, ops: pd.DataFrame, busy: float) -> list[Finding]:
    rules = ctx.rules
    cfg = rules.get("fa", {})
    mask = _in(ops["type"], cfg.get("types", []))
    if not mask.any():
        return []
    bounds: Mapping[str, float] = cfg.get("bound", {})
    ratios = {k: _col(ops, k) for k in bounds}
    g = _kind_groups(ops, mask, ratios)
    g = g[g["total_us"] >= float(cfg.get("min_time_share", 0.0)) * busy]
    if not len(g):
        return []
    levels = rules.get("severity", {})
    out: list[Finding] = []
    multiple = int(cfg.get("axis_multiple", 128))
    ds = [fa_axes(s) for s in g["input_shapes"]]
    why = []
    for d, s in ds:
        parts = []
        if d is not None and d % multiple:
            parts.append(f"D={d}")
        if s is not None and s % multiple:
            parts.append(f"S={s}")
        why.append(", ".join(parts))
    bad = np.array([bool(w) for w in why])
    if bad.any():
        ga = g[bad].assign(unaligned=[w for w in why if w])
        frac = float(cfg.get("affinity_saving_fraction", 0.1))
        by_op = _group_saving(ctx, ga, pd.Series(frac, index=ga.index))
        total = float(sum(by_op.values()))
        ga = ga.assign(saving_us=ga["total_us"] * frac).sort_values("saving_us", ascending=False, kind="stable")
        rows = _rows(ga, ["name", "type", "input_shapes", "unaligned", "count", "total_us", "saving_us"])
        out.append(ctx.finding(
            rule="operator.fa-affinity",
            title=f"{plural(len(by_op), 'FlashAttention op')} with head dim or sequence not a multiple of {multiple}",
            severity=severity_for(total / busy if busy else 0.0, levels),
            ops=list(by_op),
            evidence={"multiple": multiple,
                      "table": table(["op", "type", "input shapes", "unaligned", "tasks", "time us", "saving us"],
                                     rows)},
            estimated_saving_us=total,
            basis=f"the ops' time x {frac:g} (fa.affinity_saving_fraction: the padded remainder block)",
            recommendation=f"{rows[0][0]}: {rows[0][3]}. Pad the sequence to a multiple of {multiple} (mask the "
                           "padding) and use head dims of 64 or 128.",
            fix=Fix("code", f"pad S to a multiple of {multiple}",
                    {"snippet": f"pad = (-seq_len) % {multiple}  # pad inputs and attention mask by `pad`"}),
            confidence=0.5,
            saving_by_op=by_op,
        ))
    have = [k for k in bounds if g[k].notna().any()]
    if have:
        level = pd.concat([(g[k] / float(bounds[k])) for k in have], axis=1).max(axis=1, skipna=True)
        hit = pd.concat([(g[k] >= float(bounds[k])).rename(k) for k in have], axis=1)
        realism = float(cfg.get("realism", 0.5))
        frac = ((1.0 - level).clip(lower=0.0) * realism).where(~hit.any(axis=1), 0.0).fillna(0.0)
        g = g.assign(level=level, saving_us=g["total_us"] * frac,
                     bound=hit.apply(lambda r: ", ".join(k for k in have if r[k]) or "none", axis=1))
        todo = g[(g["bound"] == "none") & g["level"].notna()]
        if len(todo):
            by_op = _group_saving(ctx, todo, frac[todo.index])
            total = float(sum(by_op.values()))
            g = g.sort_values(["saving_us", "total_us"], ascending=False, kind="stable")
            rows = _rows(g, ["name", "type", "input_shapes", "bound", *have, "count", "total_us", "saving_us"])
            out.append(ctx.finding(
                rule="operator.fa-bound",
                title=f"{plural(len(todo), 'FlashAttention op shape')} below all of their bounds (of {len(g)} examined)",
                severity=severity_for(total / busy if busy else 0.0, levels),
                ops=list(by_op),
                evidence={"bounds": dict(bounds),
                          "table": table(["op", "type", "input shapes", "bound", *have, "tasks", "time us",
                                          "saving us"], rows)},
                estimated_saving_us=total,
                basis=f"not bound: time x (1 - max(ratio / its bound)) x {realism:g} (fa.realism); bound: 0",
                recommendation="Use the layout the FA kernel prefers (BSND/TND, sparse_mode for causal masks), align "
                               "S and D to 128 and keep CANN current; tune with AOE if the shapes are fixed.",
                fix=Fix("code", "FA layout / sparse_mode / aligned S and D",
                        {"snippet": "torch_npu.npu_fusion_attention(q, k, v, head_num, input_layout='BSND', "
                                    "sparse_mode=3)  # causal"}),
                confidence=0.4,
                saving_by_op=by_op,
            ))
    return out


# ---------------------------------------------------------------------------------------------------------
# operator.vector-bound
# ---------------------------------------------------------------------------------------------------------
def vector_bound(ctx: AnalysisContext, ops: pd.DataFrame, busy: float) -> list[Finding]:
    rules = ctx.rules
    cfg = rules.get("vector", {})
    mask = _in(ops["core"], rules.get("vector_cores", []))
    if not mask.any():
        return []
    dur = _col(ops, "duration_us")
    ratios = {"vec": _first(_col(ops, "aiv_vec_ratio"), _col(ops, "vec_ratio")),
              "mte2": _first(_col(ops, "aiv_mte2_ratio"), _col(ops, "mte2_ratio")),
              "mte3": _first(_col(ops, "aiv_mte3_ratio"), _col(ops, "mte3_ratio"))}
    has = mask & np.isfinite(ratios["vec"]) & np.isfinite(ratios["mte2"]) & np.isfinite(dur)
    if not has.any():
        return []
    # op types with a noticeable share of the time, then each op (name + shapes) of those types on its own
    types = _codes_map(ops["type"], _text, "")
    per_type = pd.Series(dur[has]).groupby(types[has]).sum()
    big = set(per_type.index[per_type >= float(cfg.get("min_time_share", 0.01)) * busy])
    if not big:
        return []
    sel = has & np.isin(types, list(big))
    g = _kind_groups(ops, sel, ratios)
    tot_t, one_t = float(cfg.get("total_bound_ratio", 0.9)), float(cfg.get("single_bound_ratio", 0.7))
    mte3 = g["mte3"].fillna(0.0)
    total = g["vec"] + g["mte2"] + mte3
    mem = (g["mte2"] >= one_t) | (mte3 >= one_t) | ((total >= tot_t) & (g["mte2"] + mte3 > g["vec"]))
    vec_b = ~mem & ((g["vec"] >= one_t) | (total >= tot_t))
    realism = float(cfg.get("realism", 0.5))
    mem_f = float(cfg.get("memory_bound_saving_fraction", 0.2))
    frac = pd.Series(np.where(mem, mem_f, np.where(vec_b, 0.0, (1.0 - total / tot_t).clip(lower=0.0) * realism)),
                     index=g.index)
    g = g.assign(bound=np.where(mem, "memory (mte2/mte3)", np.where(vec_b, "vec (at the roof)", "none")),
                 total_ratio=total, saving_us=g["total_us"] * frac)
    todo = g[g["bound"] != "vec (at the roof)"]
    if not len(todo):
        return []
    by_op = _group_saving(ctx, todo, frac[todo.index])
    saving = float(sum(by_op.values()))
    g = g.sort_values(["saving_us", "total_us"], ascending=False, kind="stable")
    rows = _rows(g, ["name", "type", "input_shapes", "bound", "vec", "mte2", "mte3", "total_ratio", "count",
                     "total_us", "saving_us"])
    n_mem = int((todo["bound"] == "memory (mte2/mte3)").sum())
    n_none = len(todo) - n_mem
    return [ctx.finding(
        rule="operator.vector-bound",
        title=f"Vector ops: {n_mem} memory bound, {n_none} reach no bound (of {len(g)} examined)",
        severity=severity_for(saving / busy if busy else 0.0, rules.get("severity", {})),
        ops=list(by_op),
        evidence={"total_bound_ratio": tot_t, "single_bound_ratio": one_t, "types_examined": sorted(big),
                  "vec_bound_groups": int(vec_b.sum()),
                  "table": table(["op", "type", "input shapes", "bound", "aiv vec", "aiv mte2", "aiv mte3",
                                  "vec+mte2+mte3", "tasks", "time us", "saving us"], rows, limit=30)},
        estimated_saving_us=saving,
        basis=f"memory bound: time x {mem_f:g} (vector.memory_bound_saving_fraction, one HBM round trip less once "
              f"fused); not bound: time x (1 - (vec+mte2+mte3) / {tot_t:g}) x {realism:g} (vector.realism); "
              "vector bound: 0 (at the roof)",
        recommendation="Memory-bound vector ops move their tensors through HBM for little compute: fuse them with "
                       "their neighbours (torch_npu fused APIs, graph mode, a custom fused kernel). Ops bound on "
                       "nothing: AOE operator tuning and larger tensors per launch.",
        fix=Fix("code", "fuse memory-bound elementwise ops with their neighbours",
                {"types": sorted({str(t) for t in todo["type"]})}),
        confidence=0.5,
        saving_by_op=by_op,
    )]


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [OperatorKB]
