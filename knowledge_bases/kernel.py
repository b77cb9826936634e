"""kernel: the advice Nsight Compute gives a CUDA developer, for an Ascend C kernel under development.

Reads the kernel views of :mod:`advisor.toolkit.kernels` (speed of light per side, launch against the chip's cores,
memory workload, stall evidence, the shared classification per side) of kernel-development runs (msprof op
``OPPROF_*`` captures, single-kernel msprof runs) and makes one finding per fix and kernel: the launch (block dim
against the cores), the blocks' balance, the MIX kernel's vector side, scalar-bound code, instruction-fetch waits,
global-memory transfers, UB bank conflicts, cube utilization. Each finding gives the measured figures with the file
and column they come from, a saving against the practical roof (never above the kernel's time) and the fix in Ascend
C terms. A kernel whose limiting side is at its roof gets no tuning advice (its launch may still leave cores idle).
The rules are causes: the roofline findings on the same kernel (its symptoms) go under them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from advisor import hookimpl
from advisor.findings import Finding, Fix
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection
from advisor.toolkit import run_context as rc
from advisor.toolkit.bound import rules_of
from advisor.toolkit.common import severity_for
from advisor.toolkit.kernels import KernelView, SideView, kernel_views
from advisor.toolkit.time import fmt_us, window_us

_SYMPTOMS = ("roofline.memory-bound", "roofline.compute-bound", "roofline.latency-bound", "roofline.scalar-bound",
             "roofline.no-bound")
_NEEDS = ("ops", "metrics")


def _explains(mechanism: str) -> dict[str, str]:
    return {s: mechanism for s in _SYMPTOMS}


class KernelKB(KnowledgeBase):
    id = "kernel"
    title = "Kernel tuning: an Ascend C kernel against the chip's units, cores and memory"
    version = "1.0.0"
    api_version = "1.5"
    requires = ("ops",)
    # the per-side pipe ratios and times, stall and conflict figures, cache rates, data volumes and FLOPs
    ops_columns = ("*_ratio", "*_time_us", "*_rate", "*main_mem_*_bw", "*_datas_kb", "*_fops")
    events_read = EventSelection()
    rules_file = "kernel"

    _views: tuple[int, list[KernelView]] | None = None

    # -----------------------------------------------------------------------------------------------------
    @rule(RuleDoc(
        id="kernel.block-dim",
        title="Block dim leaves cores idle (waves, last wave's fill)",
        what="For each kernel of a kernel-development run (contexts: {contexts}), its Block Dim (and Mix Block Dim) "
             "against the chip's cores of that family -- AI cores for cube and MIX kernels, vector cores for vector "
             "kernels -- from the run's info.json / HardwareInfo.jsonl or the chip's rules/platforms.yaml entry, "
             "never from the kernel's own block dim. B blocks on N cores run ceil(B/N) waves; the last wave fills "
             "B - (waves-1) x N cores.",
        why="Cores without a block idle for the whole kernel (Block Dim 2 on a 48-vector-core chip uses 4 % of it); "
            "a partial last wave idles the rest of the chip for one block's time (32 blocks on 24 cores: the second "
            "wave is a third full). Saving = the kernel's time x (1 - B / (waves x N)) x {block_dim.realism}: the "
            "same work in blocks that fill every wave. With only the chip family known, the smallest saving over "
            "its chips is counted (confidence {block_dim.confidence.family}).",
        how_to_fix="Set blockDim in the host tiling function to the core count (GetCoreNumAiv() for vector "
                   "kernels, GetCoreNumAic() for cube / MIX) or a multiple of it, and split the data per block from "
                   "GetBlockIdx() so each block gets an equal share (tail handled by the last tile, not by extra "
                   "blocks).",
        thresholds=("contexts", "block_dim", "min_kernel_share", "severity"), needs=_NEEDS,
        explains=_explains("blocks that fill every core shorten the kernel the roofline finding measures")))
    def block_dim(self, ctx: AnalysisContext) -> Iterable[Finding]:
        for v in self._kernels(ctx):
            f = _block_dim(ctx, v)
            if f is not None:
                yield f

    @rule(RuleDoc(
        id="kernel.block-imbalance",
        title="Blocks of one launch do unequal work",
        what="Per kernel with per-block rows (msprof op's metric CSVs), 1 - mean / max of the blocks' core times "
             "(aic_time / aiv_time) of each side; reported from {imbalance.min_spread}.",
        why="The kernel ends with its slowest block: the others idle meanwhile. Split evenly, the same work ends "
            "at the blocks' mean time: saving = the side's time x (1 - mean / max) x {imbalance.realism}.",
        how_to_fix="Compute each block's share in the host tiling so every block gets the same element count "
                   "(formerNum / tailNum split: the first blocks take one extra tile), and split along the axis "
                   "whose length is a multiple of the block count; a reduction whose length varies per row needs "
                   "its rows dealt round-robin, not in contiguous ranges.",
        thresholds=("contexts", "imbalance", "min_kernel_share", "severity"), needs=_NEEDS,
        explains=_explains("balanced blocks shorten the kernel the roofline finding measures")))
    def block_imbalance(self, ctx: AnalysisContext) -> Iterable[Finding]:
        for v in self._kernels(ctx):
            f = _imbalance(ctx, v)
            if f is not None:
                yield f

    @rule(RuleDoc(
        id="kernel.mix-balance",
        title="MIX kernel: the vector side runs on fewer vector cores than its clusters have",
        what="For a MIX kernel, the time of the cube side (aic_time) and the vector side (aiv_time), which side "
             "idles (its unit pipes below {mix.idle_unit_ratio} while it runs as long as the other: it waits on "
             "cross-core flags), and the vector blocks per cube block (Mix Block Dim / Block Dim) against the "
             "chip's vector cores per AI core.",
        why="A vector-limited MIX kernel launched with fewer vector blocks per cube block than the cluster has "
            "leaves vector cores idle: saving = the vector side's time x (1 - launched / available vector cores per "
            "cube core) x {mix.realism}.",
        how_to_fix="Launch the MIX kernel with both vector cores of each cluster (KERNEL_TYPE_MIX_AIC_1_2) and split "
                   "the vector work by GetSubBlockIdx(); where the cube side waits for the vector side, give it "
                   "the next tile (double-buffer the workspace between the sides) so it is not idle.",
        thresholds=("contexts", "mix", "min_kernel_share", "severity"), needs=_NEEDS,
        explains=_explains("vector work spread over every vector core shortens the kernel")))
    def mix_balance(self, ctx: AnalysisContext) -> Iterable[Finding]:
        for v in self._kernels(ctx):
            f = _mix(ctx, v)
            if f is not None:
                yield f

    @rule(RuleDoc(
        id="kernel.scalar-bound",
        title="Kernel side limited by its scalar pipe",
        what="A side (cube core, vector core, AI Core) whose scalar pipe is its busiest against saturation and at "
             "least the bound rules' scalar_bound_ratio busy (PipeUtilization *_scalar_ratio), not waiting for the "
             "other side of a MIX kernel, with at least {scalar.min_scalar_us} µs of scalar time per launch (less is "
             "the kernel's fixed setup) and, where the file splits it (*_scalar_single_time + *_scalar_dual_time), "
             "instructions issued for at least scalar_bound_ratio of the side's time (else the pipe mostly stalls "
             "on other pipes or flags). Kernels shorter than the bound rules' latency_max_us get no kernel advice "
             "(launch, head and tail dominate them).",
        why="The scalar unit computes addresses, loop control and tiling, and issues every other pipe's "
            "instructions: while it is busy the units wait. Practical roof: the side's busiest unit pipe at "
            "saturation, or {scalar.kept_fraction} of the scalar work (what remains once tiling is host-side and "
            "element loops are vector instructions), whichever is longer. Saving = the kernel's time beyond that "
            "roof (never more than the side's share of it).",
        how_to_fix="Compute the tiling on the host (TilingData) instead of per block; replace per-element "
                   "GetValue/SetValue loops by vector instructions (Adds, Muls, Compare, Select, ReduceMax over a "
                   "whole tile); hoist address arithmetic out of inner loops and process larger tiles per "
                   "instruction (repeat times up to 255) so fewer instructions are issued.",
        thresholds=("contexts", "scalar", "min_kernel_share", "severity"), needs=_NEEDS,
        explains=_explains("less scalar work removes the time the roofline finding measures on the kernel")))
    def scalar_bound(self, ctx: AnalysisContext) -> Iterable[Finding]:
        for v in self._kernels(ctx):
            yield from _scalar(ctx, v)

    @rule(RuleDoc(
        id="kernel.icache",
        title="Kernel side waiting on instruction fetch",
        what="A side whose scalar pipe waits on instruction fetch (PipeUtilization *_scalar_wait_ib_time) for at "
             "least {icache.min_wait_share} of its core time; without wait times, an icache miss rate "
             "(*_icache_miss_rate) of at least {icache.min_miss_rate} is noted without a saving.",
        why="Code larger than the instruction cache (heavily unrolled loops, many template instances inlined in "
            "the hot loop) stalls every pipe while instructions are fetched. Saving = the wait time x "
            "{icache.realism}: smaller code shortens the fetches, it does not remove every miss.",
        how_to_fix="Shrink the hot loop's code: fewer template instantiations and unrolled copies in it, rare paths "
                   "(tails, error checks) moved out of the loop, one loop body for main and tail tiles with a "
                   "length parameter; prefetch the code with ICachePreLoad at the kernel's start.",
        thresholds=("contexts", "icache", "min_kernel_share", "severity"), needs=_NEEDS,
        explains=_explains("shorter instruction fetches remove time the roofline finding measures")))
    def icache(self, ctx: AnalysisContext) -> Iterable[Finding]:
        for v in self._kernels(ctx):
            yield from _icache(ctx, v)

    @rule(RuleDoc(
        id="kernel.mte-bound",
        title="Kernel side limited by global-memory transfers (MTE2/MTE3)",
        what="A side the shared classification calls memory bound (MTE2/MTE3 its busiest, intensity below the "
             "ridge) and below its practical roof, with the kernel's achieved bandwidth (Memory "
             "read/write_main_memory_datas over Task Duration) against the platform's hbm_gbps and the L2 hit "
             "rate (L2Cache *_total_hit_rate).",
        why="Its time is the transfers'. Below {mte.low_bandwidth_share} of the platform bandwidth the transfers "
            "themselves are inefficient (small, unaligned or strided DataCopy, copies not overlapped with compute); "
            "above it the bytes are the limit. An L2 hit rate below {mte.low_l2_hit_rate} says tiles are not "
            "reused. Saving = the shared classification's recoverable time of the side.",
        how_to_fix="Overlap copies with compute: TQue depth 2 (BUFFER_NUM 2, double buffering) on the CopyIn / "
                   "CopyOut queues; copy larger contiguous blocks per DataCopy (32-byte aligned lengths and "
                   "addresses, DataCopyPad for the tail) instead of many small or strided ones; read each input "
                   "once per block (keep reused tiles in UB / L1); when the bytes are the limit, move fewer of "
                   "them (a 16-bit dtype, fused neighbouring kernels).",
        thresholds=("contexts", "mte", "min_kernel_share", "severity"), needs=_NEEDS,
        explains=_explains("efficient transfers shorten the memory-bound kernel the roofline finding measures")))
    def mte_bound(self, ctx: AnalysisContext) -> Iterable[Finding]:
        for v in self._kernels(ctx):
            yield from _mte(ctx, v)

    @rule(RuleDoc(
        id="kernel.bank-conflict",
        title="UB bank conflicts on the vector core",
        what="A vector side whose UB bank or bank-group conflict ratio (ResourceConflictRatio "
             "*_vec_bank_cflt_ratio, *_vec_bankgroup_cflt_ratio) reaches {bank_conflict.min_ratio}.",
        why="Operands of one vector instruction in the same UB bank (group) are read one after the other: the "
            "vector pipe stalls. Saving = the side's time x the conflict ratios x {bank_conflict.realism}.",
        how_to_fix="Place the source and destination tensors of a vector instruction in different bank groups: "
                   "allocate the TBuf/TQue buffers with a padding offset (e.g. 256 bytes) between them, and avoid "
                   "src/dst strides that are multiples of the bank-group size.",
        thresholds=("contexts", "bank_conflict", "min_kernel_share", "severity"), needs=_NEEDS,
        explains=_explains("conflict-free UB accesses remove vector stalls the roofline finding measures")))
    def bank_conflict(self, ctx: AnalysisContext) -> Iterable[Finding]:
        for v in self._kernels(ctx):
            yield from _bank(ctx, v)

    @rule(RuleDoc(
        id="kernel.cube-utilization",
        title="Cube far below its roof at a compute-bound intensity",
        what="A cube side (AI Core / cube core) at a compute-bound intensity (at or above the ridge of the shared "
             "classification; called compute bound, or of no clear bound with every pipe unsaturated) below its "
             "practical roof, with the cube pipe (aic_cube_ratio / aic_mac_ratio), "
             "MTE1 and scalar ratios as evidence.",
        why="At this intensity the cube can be the limit; a cube pipe well below saturation means the kernel feeds "
            "it too slowly (L1 -> L0 copies not overlapped, small base blocks, scalar issue). Saving = the shared "
            "classification's recoverable time of the side (its time x (1 - its share of the practical roof)).",
        how_to_fix="Use base blocks the cube fills (baseM / baseN / baseK multiples of 16, 128 x 256 x 64 for "
                   "fp16 where L0 allows), double-buffer L1 and L0A/L0B (depth-2 queues) so MTE1 and MTE2 overlap "
                   "the Mmad, and launch a block dim that is a multiple of the AI cores with equal tiles per block.",
        thresholds=("contexts", "cube", "min_kernel_share", "severity"), needs=_NEEDS,
        explains=_explains("a fed cube shortens the kernel the roofline finding measures")))
    def cube_utilization(self, ctx: AnalysisContext) -> Iterable[Finding]:
        for v in self._kernels(ctx):
            yield from _cube(ctx, v)

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        """The rules' findings, with the savings of one kernel's findings made to compose: each fix is sized on
        the kernel as the larger fixes before it leave it (time x (1 - s1/T) x (1 - s2/T)...), so together they
        never claim more than the kernel's time."""
        found = [f for check in self.checks for f in (check(self, ctx) or ())]
        by_kernel: dict[str, list[Finding]] = {}
        for f in found:
            by_kernel.setdefault(str(f.evidence.get("kernel")), []).append(f)
        views = {v.name: v for v in self._kernels(ctx)}
        window = window_us(ctx.profile)
        for name, group in by_kernel.items():
            v = views.get(name)
            if v is None or v.total_us <= 0 or len(group) < 2:
                continue
            left = 1.0
            for f in sorted(group, key=lambda x: -x.estimated_saving_us):
                alone = f.estimated_saving_us
                f.estimated_saving_us = alone * left
                f.saving_by_op = {name: f.estimated_saving_us} if f.estimated_saving_us > 0 else {}
                if left < 1.0:
                    f.evidence["saving_alone_us"] = round(alone, 3)
                    f.basis += (f"; sized after this kernel's larger fixes, which leave {left:.0%} of its time "
                                f"({fmt_us(alone)} alone)")
                    if window > 0:
                        f.evidence["share_of_window"] = round(f.estimated_saving_us / window, 4)
                        f.severity = severity_for(f.estimated_saving_us / window, ctx.rules["severity"])
                    f.evidence["share_of_kernel"] = round(f.estimated_saving_us / v.total_us, 4)
                left *= max(0.0, 1.0 - alone / v.total_us)
        return found

    # -----------------------------------------------------------------------------------------------------
    def _kernels(self, ctx: AnalysisContext) -> list[KernelView]:
        """The run's kernel views (computed once per profile); none outside the rules' contexts."""
        if self._views is not None and self._views[0] == id(ctx.profile):
            return self._views[1]
        views: list[KernelView] = []
        if rc.applies(ctx, ctx.rules["contexts"]):
            views = kernel_views(ctx.profile, ctx.platform, rules_of(ctx), ctx.rules)
            short = float(rules_of(ctx)["latency_max_us"])
            quick = [v.name for v in views if v.duration_us < short]
            if quick:
                ctx.note(f"kernel: {', '.join(quick[:5])} run(s) below {short:g} µs per launch (bound rules' "
                         "latency_max_us): launch, head and tail dominate them, no tuning advice is given")
            views = [v for v in views if v.duration_us >= short]
        else:
            rc.skip_note(ctx, "kernel")
        self._views = (id(ctx.profile), views)
        return views


# ---------------------------------------------------------------------------------------------------------
# the rules
# ---------------------------------------------------------------------------------------------------------
def _block_dim(ctx: AnalysisContext, v: KernelView) -> Finding | None:
    cfg = ctx.rules["block_dim"]
    if not v.cores.options or not v.launch_by_cores:
        return None
    # the lead launch (Block Dim) of each candidate chip; a family's chips: the smallest saving is counted
    candidates = [option[0] for option in v.launch_by_cores if option]
    if not candidates:
        return None
    lead = max(candidates, key=lambda x: x.fill)
    if lead.fill >= 1.0:
        return None
    floor = float(rules_of(ctx)["min_kernel_us"])
    saving = _cap(v, min(v.duration_us * (1.0 - lead.fill) * float(cfg["realism"]), v.duration_us - floor))
    if not _material(ctx, v, saving):
        return None
    unit = "vector cores" if lead.family == "vector" else "AI cores"
    few = lead.blocks <= int(cfg["few_blocks"]) and lead.cores > lead.blocks
    if lead.waves == 1:
        shape = f"one wave on {lead.blocks} of {lead.cores} {unit}"
    else:
        shape = (f"{lead.waves} waves, the last {lead.last_wave_blocks} of {lead.cores} {unit} full "
                 f"({lead.last_wave_blocks / lead.cores:.0%})")
    chips = "" if v.cores.decided else f" (chip family: {v.cores.detail})"
    title = f"{v.name}: {lead.column} {lead.blocks} on {lead.cores} {unit}: {shape}"
    text = (f"{v.name} launches {lead.blocks} blocks on a chip with {lead.cores} {unit}{chips}: {shape}, "
            f"{lead.fill:.0%} of the core slots hold a block. ")
    if few:
        text += "With so few blocks almost the whole chip idles: "
    text += (f"set blockDim to {lead.cores} (GetCoreNum{'Aiv' if lead.family == 'vector' else 'Aic'}()) or a multiple "
             "of it, and give each block an equal share of the data from GetBlockIdx().")
    conf = float(cfg["confidence"][v.cores.source if v.cores.source in cfg["confidence"] else "family"])
    evidence = {**_base(v), "blocks": lead.blocks, "cores": lead.cores, "core_family": lead.family,
                "waves": lead.waves, "last_wave_blocks": lead.last_wave_blocks, "fill": round(lead.fill, 4),
                "cores_source": v.cores.source, "cores_detail": v.cores.detail,
                "measured": [_m(v, "OpBasicInfo", "Block Dim" if lead.column == "Block Dim" else "Mix Block Dim",
                                lead.blocks)]}
    return _finding(ctx, v, "kernel.block-dim", title, saving, evidence,
                    f"the kernel's time x (1 - {lead.blocks} / ({lead.waves} x {lead.cores})) x {cfg['realism']:g} "
                    "(realism)", text, Fix("code", f"blockDim a multiple of the {lead.cores} {unit}",
                                           {"kernel": v.name, "block_dim": lead.blocks, "cores": lead.cores}), conf)


def _imbalance(ctx: AnalysisContext, v: KernelView) -> Finding | None:
    cfg = ctx.rules["imbalance"]
    sides = [s for s in v.sides if s.spread is not None and s.spread >= float(cfg["min_spread"])
             and not s.waits_for_other and s.block_times_us]
    if not sides:
        return None
    s = max(sides, key=lambda x: x.span_us * (x.spread or 0.0))
    spread = float(s.spread or 0.0)
    saving = _side_saving(ctx, v, s, s.span_us * (1.0 - spread * float(cfg["realism"])))
    if not _material(ctx, v, saving):
        return None
    times = [t for _, t in s.block_times_us]
    slow = max(s.block_times_us, key=lambda bt: bt[1])
    fast = min(s.block_times_us, key=lambda bt: bt[1])
    mean = sum(times) / len(times)
    col = s.time_column if s.side != "aiv" else "aiv_time_us"
    title = (f"{v.name}: {s.label} blocks unbalanced, block {slow[0]} {fmt_us(slow[1])} vs mean {fmt_us(mean)} "
             f"({spread:.0%} of the slowest block idles on average)")
    text = (f"The {len(times)} {s.label} blocks of {v.name} take {fmt_us(fast[1])} (block {fast[0]}) to "
            f"{fmt_us(slow[1])} (block {slow[0]}), mean {fmt_us(mean)}: the kernel waits for its slowest block. "
            "Give every block the same amount of work in the host tiling (equal element counts, the remainder "
            "spread one tile each over the first blocks) and split along an axis whose work per element is uniform.")
    evidence = {**_base(v), "side": s.side, "blocks": len(times), "spread": round(spread, 4),
                "slowest_block": slow[0], "slowest_us": round(slow[1], 3), "fastest_block": fast[0],
                "fastest_us": round(fast[1], 3), "mean_us": round(mean, 3),
                "block_times_us": [[b, round(t, 3)] for b, t in s.block_times_us],
                "measured": [_m(v, "PipeUtilization", _hdr(v, col), round(slow[1], 3), f"block {slow[0]}"),
                             _m(v, "PipeUtilization", _hdr(v, col), round(mean, 3), "mean of the blocks")]}
    return _finding(ctx, v, "kernel.block-imbalance", title, saving, evidence,
                    f"the {s.label}'s time x (1 - mean / max of its blocks' times = {spread:.3f}) x "
                    f"{cfg['realism']:g} (realism)" + _beyond(v),
                    text, Fix("code", "equal work per block in the host tiling", {"kernel": v.name, "side": s.side}),
                    float(cfg["confidence"]))


def _mix(ctx: AnalysisContext, v: KernelView) -> Finding | None:
    cfg = ctx.rules["mix"]
    aic, aiv = v.side("aic"), v.side("aiv")
    if not v.core.startswith("MIX") or aic is None or aiv is None or v.vector_per_cube is None:
        return None
    per_cube = _vector_per_cube(v, cfg)
    if per_cube is None or v.vector_per_cube >= per_cube or v.limiter is not aiv:
        return None
    launched = v.vector_per_cube
    saving = _side_saving(ctx, v, aiv, aiv.span_us * (1.0 - (1.0 - launched / per_cube) * float(cfg["realism"])))
    if not _material(ctx, v, saving):
        return None
    title = (f"{v.name}: MIX kernel with {launched:g} vector block(s) per cube block of {per_cube} "
             f"(vector side {fmt_us(aiv.core_time_us)}, cube side {fmt_us(aic.core_time_us)})")
    text = (f"The vector side of {v.name} limits it ({fmt_us(aiv.core_time_us)} per vector core against "
            f"{fmt_us(aic.core_time_us)} on the cube core) and runs on {launched:g} of the {per_cube} vector cores of "
            "each cluster: launch it with both (KERNEL_TYPE_MIX_AIC_1_2) and split the vector work by "
            "GetSubBlockIdx().")
    if aic.waits_for_other:
        sc = aic.unit("scalar")
        issue = f", of which {aic.scalar_issue_share:.0%} issues instructions" \
            if aic.scalar_issue_share is not None else ""
        text += (f" The cube side's units idle (busiest {aic.busiest_unit.unit if aic.busiest_unit else '-'} "
                 f"{aic.busiest_unit.ratio if aic.busiest_unit else 0:.3f}) while it runs as long as the vector side"
                 + (f"; its scalar pipe ({sc.column} {sc.ratio:.3f}{issue}) spins on the cross-core flags: it "
                    "waits for the vector side, and shortens with it" if sc is not None else "") + ".")
    evidence = {**_base(v), **_mix_evidence(v, aic, aiv), "vector_per_cube": launched,
                "vector_cores_per_cube_core": per_cube,
                "measured": [_m(v, "OpBasicInfo", "Block Dim", _int(v.block_dim)),
                             _m(v, "OpBasicInfo", "Mix Block Dim", _int(v.mix_block_dim)),
                             _m(v, "PipeUtilization", _hdr(v, "aiv_time_us"), round(aiv.core_time_us, 3)),
                             _m(v, "PipeUtilization", _hdr(v, "aicore_time_us"), round(aic.core_time_us, 3)),
                             *[_m(v, "PipeUtilization", u.column, round(u.ratio, 4), _range_text(u))
                               for u in (aiv.busiest_unit, aic.unit("scalar")) if u is not None]]}
    return _finding(ctx, v, "kernel.mix-balance", title, saving, evidence,
                    f"the vector side's time x (1 - {launched:g} / {per_cube}) x {cfg['realism']:g} (realism)",
                    text, Fix("code", "both vector cores of each cluster", {"kernel": v.name}),
                    float(cfg["confidence"]))


def _scalar(ctx: AnalysisContext, v: KernelView) -> Iterable[Finding]:
    cfg = ctx.rules["scalar"]
    bound = rules_of(ctx)
    for s in v.sides:
        sc, top = s.unit("scalar"), s.busiest
        if sc is None or top is None or top.unit != "scalar" or s.waits_for_other \
                or sc.ratio < float(bound["scalar_bound_ratio"]):
            continue
        if s.scalar_issue_share is not None and s.scalar_issue_share < float(bound["scalar_bound_ratio"]):
            continue  # the scalar pipe mostly stalls (on other pipes, flags): not its own work
        scalar_us = sc.time_us if sc.time_us is not None else sc.ratio * s.core_time_us
        if math.isfinite(scalar_us) and scalar_us < float(cfg["min_scalar_us"]):
            continue  # the kernel's fixed setup
        unit = s.busiest_unit
        unit_share = unit.of_saturation if unit is not None else 0.0
        kept = sc.ratio * float(cfg["kept_fraction"])
        roof = max(unit_share, kept)
        saving = _side_saving(ctx, v, s, s.span_us * roof)
        if not _material(ctx, v, saving):
            continue
        rng = _range(sc)
        title = (f"{v.name}: {s.label} scalar bound, {sc.column} {sc.ratio:.3f}{rng}"
                 + (f", busiest unit {unit.unit} {unit.ratio:.3f}" if unit else ""))
        text = (f"The scalar pipe of {v.name}'s {s.label} is busy {sc.ratio:.0%} of its time{rng} while its busiest "
                f"unit ({unit.unit if unit else 'none'}) is at {unit.ratio if unit else 0:.1%}: control code -- "
                "address arithmetic, loop control, per-element GetValue/SetValue, tiling computed on the device -- "
                "sets its time. Compute the tiling on the host (TilingData), turn element loops into vector "
                "instructions over whole tiles (Adds/Muls/Compare/Select/ReduceMax with repeat times up to 255), "
                "hoist address arithmetic out of inner loops.")
        if s.side == "aic":
            text += (" On the cube core: issue one Mmad per base block (larger baseM/baseN/baseK), and let the "
                     "Matmul API's iterate loop replace hand-written per-fractal loops.")
        if s.wait_ib_share is not None and s.wait_ib_share >= float(ctx.rules["icache"]["min_wait_share"]):
            text += f" Part of the scalar time is instruction fetch ({s.wait_ib_share:.0%}: see kernel.icache)."
        ev = {**_base(v), **_side_evidence(v, s), "scalar_ratio": round(sc.ratio, 4),
              "roof_share": round(roof, 4), "kept_fraction": float(cfg["kept_fraction"]),
              "measured": [_m(v, "PipeUtilization", sc.column, round(sc.ratio, 4), _range_text(sc)),
                           *([_m(v, "PipeUtilization", unit.column, round(unit.ratio, 4))] if unit else []),
                           _m(v, "PipeUtilization", _hdr(v, s.time_column), round(s.core_time_us, 3))]}
        if v.core.startswith("MIX"):
            ev.update(_mix_evidence(v, v.side("aic"), v.side("aiv")))
        yield _finding(ctx, v, "kernel.scalar-bound", title, saving, ev,
                       f"the {s.label}'s time down to max(busiest unit at saturation {unit_share:.3f}, scalar ratio "
                       f"{sc.ratio:.3f} x kept_fraction {cfg['kept_fraction']:g}) of it" + _beyond(v), text,
                       Fix("code", "move scalar work to the host tiling and to vector instructions",
                           {"kernel": v.name, "side": s.side}), float(cfg["confidence"]))


def _icache(ctx: AnalysisContext, v: KernelView) -> Iterable[Finding]:
    cfg = ctx.rules["icache"]
    for s in v.sides:
        if s.waits_for_other or _units_at_roof(ctx, s):
            continue
        col = f"{'' if s.side == 'aicore' else s.side + '_'}scalar_wait_ib_time_us"
        if s.wait_ib_share is not None and s.wait_ib_share >= float(cfg["min_wait_share"]):
            wait_us = s.span_us * s.wait_ib_share
            saving = _side_saving(ctx, v, s, s.span_us - wait_us * float(cfg["realism"]))
            if not _material(ctx, v, saving):
                continue
            title = (f"{v.name}: {s.label} waits on instruction fetch {s.wait_ib_share:.0%} of its time"
                     + (f" (icache miss rate {s.icache_miss_rate:.2f})" if s.icache_miss_rate is not None else ""))
            measured = [_m(v, "PipeUtilization", _hdr(v, col), round(s.core_time_us * s.wait_ib_share, 3)),
                        _m(v, "PipeUtilization", _hdr(v, s.time_column), round(s.core_time_us, 3))]
        elif s.icache_miss_rate is not None and s.icache_miss_rate >= float(cfg["min_miss_rate"]) \
                and s.wait_ib_share is None:
            saving = 0.0
            title = f"{v.name}: {s.label} icache miss rate {s.icache_miss_rate:.2f} (fetch wait not measured)"
            measured = []
        else:
            continue
        miss_col = f"{'' if s.side == 'aicore' else s.side + '_'}icache_miss_rate"
        if s.icache_miss_rate is not None:
            measured.append(_m(v, "PipeUtilization", miss_col, round(s.icache_miss_rate, 4)))
        text = (f"The {s.label} of {v.name} stalls on instruction fetch: its code does not fit the instruction "
                "cache. Shrink the hot loop -- fewer template instances and unrolled copies inlined in it, tails and "
                "checks moved out of it, one loop body for main and tail tiles -- and prefetch the code with "
                "ICachePreLoad at the kernel's start.")
        yield _finding(ctx, v, "kernel.icache", title, saving,
                       {**_base(v), **_side_evidence(v, s), "wait_ib_share": _num(s.wait_ib_share, 4),
                        "icache_miss_rate": _num(s.icache_miss_rate, 4), "measured": measured},
                       f"the instruction-fetch wait x {cfg['realism']:g} (realism)" if saving else
                       "no fetch wait measured: no saving estimated", text,
                       Fix("code", "smaller hot-loop code, ICachePreLoad", {"kernel": v.name, "side": s.side}),
                       float(cfg["confidence"]))


def _mte(ctx: AnalysisContext, v: KernelView) -> Iterable[Finding]:
    cfg = ctx.rules["mte"]
    for s in v.sides:
        if s.bound != "memory" or s.at_roof or s.recoverable_us <= 0 or s.waits_for_other:
            continue
        saving = _side_saving(ctx, v, s, s.span_us - s.recoverable_us)
        if not _material(ctx, v, saving):
            continue
        mte = max((u for u in s.units if u.unit in ("mte2", "mte3")), key=lambda u: u.of_saturation, default=None)
        share = v.achieved_gbps / v.peak_gbps if v.achieved_gbps is not None and v.peak_gbps > 0 else None
        low_bw = share is not None and share < float(cfg["low_bandwidth_share"])
        low_l2 = s.l2_hit_rate is not None and s.l2_hit_rate < float(cfg["low_l2_hit_rate"])
        bw = (f"{v.achieved_gbps:.0f} GB/s, {share:.0%} of the platform's {v.peak_gbps:g} GB/s"
              + (" (assumed)" if v.peak_assumed else "")) if share is not None else "bandwidth not measured"
        title = (f"{v.name}: {s.label} bound by global-memory transfers"
                 + (f" ({mte.unit} {mte.ratio:.2f})" if mte else "") + f", {bw}")
        text = f"The {s.label} of {v.name} spends its time in {mte.unit if mte else 'MTE'} transfers ({bw}). "
        if low_bw or share is None:
            text += ("The transfers are inefficient rather than the bytes too many: copy larger contiguous blocks "
                     "per DataCopy with 32-byte aligned lengths and addresses (DataCopyPad for the tail), avoid "
                     "strided or per-row copies, and overlap copies with compute with TQue depth 2 (BUFFER_NUM 2).")
        else:
            text += ("The bytes are the limit: move fewer of them -- read each input once per block (keep reused "
                     "tiles in UB), a 16-bit dtype where accuracy allows, the neighbouring kernel fused in -- and "
                     "keep the copies double-buffered (TQue depth 2).")
        if low_l2:
            text += (f" The L2 hit rate is {s.l2_hit_rate:.0%}: tiles re-read by several blocks miss L2; order the "
                     "blocks' tiles so neighbours share them.")
        measured = [_m(v, "PipeUtilization", mte.column, round(mte.ratio, 4), _range_text(mte))] if mte else []
        if v.bytes is not None:
            measured.append(_m(v, "Memory", "read_main_memory_datas(KB) + write_main_memory_datas(KB)"
                               if v.layout == "msprof-op" else "main_mem_read_bw + main_mem_write_bw",
                               round(v.bytes / 1024.0, 3), "KB per launch"))
        if s.l2_hit_rate is not None:
            measured.append(_m(v, "L2Cache", _hdr(v, f"{'' if s.side == 'aicore' else s.side + '_'}total_hit_rate"),
                               round(s.l2_hit_rate, 4)))
        yield _finding(ctx, v, "kernel.mte-bound", title, saving,
                       {**_base(v), **_side_evidence(v, s), "achieved_gbps": _num(v.achieved_gbps, 3),
                        "peak_gbps": v.peak_gbps, "peak_assumed": v.peak_assumed, "share_of_peak": _num(share, 4),
                        "l2_hit_rate": _num(s.l2_hit_rate, 4), "measured": measured},
                       f"the shared classification's recoverable time of the {s.label} (its time x (1 - "
                       f"{_num(s.share_of_roof, 3)} of the practical roof))", text,
                       Fix("code", "larger aligned DataCopy, TQue depth 2" if low_bw or share is None
                           else "fewer bytes moved", {"kernel": v.name, "side": s.side}),
                       float(cfg["confidence"]))


def _bank(ctx: AnalysisContext, v: KernelView) -> Iterable[Finding]:
    cfg = ctx.rules["bank_conflict"]
    for s in v.sides:
        if s.side == "aic" or s.waits_for_other or _units_at_roof(ctx, s):
            continue
        hits = {c: r for c, r in s.conflicts.items() if "bank" in c and r >= float(cfg["min_ratio"])}
        if not hits:
            continue
        ratio = min(1.0, sum(hits.values()))
        saving = _side_saving(ctx, v, s, s.span_us * (1.0 - ratio * float(cfg["realism"])))
        if not _material(ctx, v, saving):
            continue
        parts = ", ".join(f"{c} {r:.3f}" for c, r in hits.items())
        text = (f"Vector instructions of {v.name} hit the same UB bank (group) for their operands ({parts}): they "
                "are serialized. Allocate the source and destination buffers so they fall in different bank groups "
                "(a 256-byte pad between TBuf/TQue buffers) and avoid strides that are multiples of the bank-group "
                "size.")
        yield _finding(ctx, v, "kernel.bank-conflict", f"{v.name}: {s.label} UB bank conflicts ({parts})", saving,
                       {**_base(v), **_side_evidence(v, s), "conflicts": {c: round(r, 4) for c, r in hits.items()},
                        "measured": [_m(v, "ResourceConflictRatio", c, round(r, 4)) for c, r in hits.items()]},
                       f"the {s.label}'s time x the conflict ratios ({ratio:.3f}) x {cfg['realism']:g} (realism)",
                       text, Fix("code", "UB buffers in different bank groups", {"kernel": v.name}),
                       float(cfg["confidence"]))


def _cube(ctx: AnalysisContext, v: KernelView) -> Iterable[Finding]:
    cfg = ctx.rules["cube"]
    for s in v.sides:
        cube = s.unit("cube")
        # compute bound by the shared classification, or far below the roof with no pipe saturated ("none") at
        # an intensity above the ridge: either way the cube is the roof the kernel can reach
        compute = s.bound == "compute" or (s.bound == "none" and s.roof_side == "compute")
        if s.side == "aiv" or cube is None or not compute or s.at_roof or s.recoverable_us <= 0 \
                or s.waits_for_other:
            continue
        saving = _side_saving(ctx, v, s, s.span_us - s.recoverable_us)
        if not _material(ctx, v, saving):
            continue
        others = [u for u in (s.unit("mte1"), s.unit("mte2"), s.unit("scalar")) if u is not None]
        title = (f"{v.name}: cube at {cube.ratio:.0%} ({cube.column}) at a compute-bound intensity, "
                 f"{_pct(s.share_of_roof)} of the practical roof")
        text = (f"{v.name} is compute bound by its intensity ({_num(s.intensity, 1)} FLOP/byte) but its cube pipe is "
                f"busy {cube.ratio:.0%} of the time ({', '.join(f'{u.unit} {u.ratio:.2f}' for u in others)}): the "
                "cube waits for its operands. Use base blocks the cube fills (baseM/baseN/baseK multiples of 16; "
                "128 x 256 x 64 for fp16 where L0 allows), double-buffer L1 and L0A/L0B so MTE1/MTE2 overlap the "
                "Mmad, and launch a block dim that is a multiple of the AI cores with equal tiles per block.")
        yield _finding(ctx, v, "kernel.cube-utilization", title, saving,
                       {**_base(v), **_side_evidence(v, s), "cube_ratio": round(cube.ratio, 4),
                        "intensity": _num(s.intensity, 3), "attained_tflops": _num(s.attained_tflops, 4),
                        "peak_tflops": _num(s.peak_tflops, 3),
                        "measured": [_m(v, "PipeUtilization", u.column, round(u.ratio, 4), _range_text(u))
                                     for u in (cube, *others)]},
                       f"the shared classification's recoverable time of the {s.label} (its time x (1 - "
                       f"{_num(s.share_of_roof, 3)} of the practical roof))", text,
                       Fix("code", "cube tiling with full base blocks and double-buffered L1/L0", {"kernel": v.name}),
                       float(cfg["confidence"]))


# ---------------------------------------------------------------------------------------------------------
# sizing and evidence
# ---------------------------------------------------------------------------------------------------------
def _side_saving(ctx: AnalysisContext, v: KernelView, s: SideView, new_span_us: float) -> float:
    """The kernel's time saved when side ``s`` runs ``new_span_us`` instead of its span: the cores' part of the
    kernel then lasts as long as its longest side (the other sides keep theirs; a side that waits for ``s``
    shortens with it), the launch, head and tail beyond it stay, and the kernel never gets shorter than the bound
    rules' min_kernel_us."""
    live = [o.span_us for o in v.sides if o is not s and not o.waits_for_other and math.isfinite(o.span_us)]
    before = max([s.span_us, *live])
    after = max([max(new_span_us, 0.0), *live])
    floor = float(rules_of(ctx)["min_kernel_us"])
    return _cap(v, min(max(0.0, before - after), v.duration_us - floor))


def _beyond(v: KernelView) -> str:
    return ", as the kernel's time beyond its other side's" if len(v.sides) > 1 else ""


def _cap(v: KernelView, saving: float) -> float:
    """Per launch -> over the run's launches; never more than the kernel's time."""
    per_launch = min(max(saving, 0.0), v.duration_us)
    return per_launch * v.launches if v.launches else per_launch


def _material(ctx: AnalysisContext, v: KernelView, saving: float) -> bool:
    return v.total_us > 0 and saving >= float(ctx.rules["min_kernel_share"]) * v.total_us


def _units_at_roof(ctx: AnalysisContext, s: SideView) -> bool:
    """The side's busiest unit pipe at the bound rules' near_roof share of its saturation: no tuning advice."""
    top = s.busiest_unit
    return top is not None and top.of_saturation >= float(rules_of(ctx)["near_roof"])


def _vector_per_cube(v: KernelView, cfg: Mapping[str, Any]) -> int | None:
    if v.cores.decided and v.cores.options:
        aic, aiv = v.cores.options[0]
        return int(round(aiv / aic)) if aic else None
    return int(cfg["vector_per_cube"])


def _base(v: KernelView) -> dict[str, Any]:
    lim = v.limiter
    return {"kernel": v.name, "core": v.core, "launches": v.launches, "duration_us": round(v.duration_us, 3),
            "total_us": round(v.total_us, 3), "block_dim": _int(v.block_dim), "mix_block_dim": _int(v.mix_block_dim),
            "bound": v.bound_text() or None, "limiting_side": lim.side if lim else None,
            "speed_of_light": _sol(v)}


def _sol(v: KernelView) -> list[dict[str, Any]]:
    """The speed-of-light rows: one per side and unit (ratio of the side's cycles, against saturation)."""
    return [{"side": s.side, "unit": u.unit, "ratio": round(u.ratio, 4), "of_saturation": _num(u.of_saturation, 4),
             "column": u.column} for s in v.sides for u in s.units]


def _side_evidence(v: KernelView, s: SideView) -> dict[str, Any]:
    return {"side": s.side, "side_core_time_us": _num(s.core_time_us, 3), "side_span_us": _num(s.span_us, 3),
            "side_bound": s.bound, "share_of_practical_roof": _num(s.share_of_roof, 4)}


def _mix_evidence(v: KernelView, aic: SideView | None, aiv: SideView | None) -> dict[str, Any]:
    idle = [s.side for s in (aic, aiv) if s is not None and s.waits_for_other]
    return {"aic_time_us": _num(aic.core_time_us, 3) if aic else None,
            "aiv_time_us": _num(aiv.core_time_us, 3) if aiv else None, "idle_side": idle[0] if idle else None}


def _m(v: KernelView, metric_set: str, column: str, value: Any, note: str = "") -> dict[str, Any]:
    """One measured figure with the file and the column it comes from."""
    from pathlib import Path

    path = v.files.get(metric_set) if v.layout == "msprof-op" else v.files.get("op_summary")
    if not path and v.layout == "msprof-op":
        path = v.files.get("PipeUtilization")
    if v.layout != "msprof-op" and column in ("Block Dim", "Mix Block Dim"):
        column = column
    out = {"file": Path(path).name if path else None, "column": column, "value": value}
    if note:
        out["note"] = note
    return out


def _hdr(v: KernelView, column: str) -> str:
    return v.header(column)


def _finding(ctx: AnalysisContext, v: KernelView, rule_id: str, title: str, saving: float,
             evidence: dict[str, Any], basis: str, text: str, fix: Fix | None, confidence: float) -> Finding:
    window = window_us(ctx.profile)
    if window > 0:
        evidence["share_of_window"] = round(saving / window, 4)
    evidence["share_of_kernel"] = round(saving / v.total_us, 4) if v.total_us > 0 else None
    return ctx.finding(rule=rule_id, title=title,
                       severity=severity_for(saving / window, ctx.rules["severity"]) if window > 0 and saving > 0
                       else "info",
                       ops=[v.name], evidence=evidence, estimated_saving_us=saving, basis=basis,
                       recommendation=text, fix=fix, confidence=confidence,
                       saving_by_op={v.name: saving} if saving > 0 else {})


def _range(u: Any) -> str:
    if u.low is None or u.high is None or abs(u.high - u.low) < 0.005:
        return ""
    return f" ({u.low:.2f}-{u.high:.2f} over the blocks)"


def _range_text(u: Any) -> str:
    if u.low is None or u.high is None:
        return ""
    return f"blocks {u.low:.4f}-{u.high:.4f}"


def _num(x: float | None, digits: int = 3) -> float | None:
    if x is None or not math.isfinite(float(x)):
        return None
    return round(float(x), digits)


def _int(x: float | None) -> int | None:
    return int(round(x)) if x is not None and math.isfinite(x) else None


def _pct(x: float | None) -> str:
    return f"{math.floor(min(x, 1.0) * 100 + 1e-6):.0f}%" if x is not None and math.isfinite(x) else "n/a"


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [KernelKB]
