"""ub-fusion: op chains that graph/UB fusion passes would merge, found left unfused.

UB fusion keeps the intermediate results of a conv/matmul epilogue (BN, bias, elementwise, activation,
pooling, dequant/quant) in the Unified Buffer instead of writing them to global memory and reading them
back; graph fusion folds BN/Scale/BiasAdd into the conv or matmul. An unfused chain costs one kernel per op
and a memory round trip per intermediate tensor (in a real SSD face-mask model, enabling UB fusion took the
execute time from 7.2 ms to 2.3 ms).

Detection: with a model graph, VF2 subgraph matching of the patterns in ``rules/ub-fusion.yaml`` among
nodes that are not already fused, where each intermediate output is consumed inside the chain only.
Without a graph, consecutive profile rows on one stream whose shapes link (next op's input = previous op's
output).
"""

from __future__ import annotations

import re
from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import PurePath
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection
from advisor.toolkit.advice import context_of, family
from advisor.toolkit.graph_patterns import (
    FusedMarkers,
    Match,
    Pattern,
    StreamOrder,
    atc_cmdline,
    atc_option,
    closed_chain,
    compile_patterns,
    data_digraph,
    desc_bytes,
    edge_desc,
    find_matches,
    fused_nodes,
    out_desc,
    per_name,
    select_disjoint,
    severity_for,
    stream_order,
)
from advisor.toolkit.time import window_us

SWITCH_FILE = "fusion_switch.cfg"


@dataclass
class _Chain:
    """One matched chain, its absorbed ops and their estimated saving."""

    nodes: tuple[str, ...]
    absorbed: dict[str, float] = field(default_factory=dict)
    """Absorbed op -> saving (us) over the profiled window (or per inference without a profile)."""
    absorbed_time: float = 0.0
    roundtrip_bytes: float = 0.0
    calls: int = 1
    measured: bool = True
    edges: list[tuple[str, str]] = field(default_factory=list)
    types: dict[str, str] = field(default_factory=dict)


class UbFusionKB(KnowledgeBase):
    id = "ub-fusion"
    title = "Unfused conv/matmul epilogues and elementwise chains (UB / graph fusion)"
    version = "1.1.0"
    api_version = "1.5"
    requires = ()
    requires_platform = ("hbm_gbps",)
    requires_any = ("ops", "graph")
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "ub-fusion"

    def _graph_groups(self, ctx: AnalysisContext) -> list[tuple[Pattern, list[_Chain]]]:
        """The graph's unfused chains by pattern, computed once (the chain and switch-file rules both read them)."""
        if getattr(self, "_groups", None) is None:
            self._groups = _graph_chains(ctx) if ctx.graph is not None and _applies(ctx) else []
        return self._groups

    @rule(RuleDoc(
        id="ub-fusion.unfused-chain",
        explains={
            "memory-bound.layers": "the fused kernel keeps the chain's intermediates in UB: the HBM round trips that make these layers memory bound go",
            "roofline.memory-bound": "the fused kernel keeps the chain's intermediates in UB instead of HBM",
            "roofline.no-bound": "one fused kernel replaces the chain's short kernels",
            "roofline.latency-bound": "one fused kernel replaces the chain's short kernels",
            "schedule.fusible-ops": "the fusion pass merges this very sequence into one kernel",
        },
        title="Fusable op chain left unfused in the model graph",
        what=(
            "Matches the fusion patterns of the rules (Conv2D/DepthwiseConv2D/MatMul/BatchMatMul followed by BN, "
            "Scale, BiasAdd, elementwise ops, activations, MaxPool, AscendDequant/AscendQuant; elementwise chains) "
            "in the model graph with networkx subgraph matching. A chain counts only when each intermediate output "
            "is consumed inside the chain and no node is already fused (pass_name_ub, a UB pass name, a "
            "fusion_scope shared with another node, a fused kernel name, or more than "
            "{fused_markers.max_original_ops} original op). One finding per pattern; when the build used a fusion "
            "switch file, one finding for all chains: the switch file is their one cause."
        ),
        why=(
            "Each unfused op is its own kernel: its input is written to global memory by the previous op and read "
            "back (shape x dtype size x 2 bytes per intermediate tensor), plus a kernel launch. UB fusion keeps "
            "the intermediate in the Unified Buffer; graph fusion folds BN/Scale/BiasAdd into the weights. The "
            "saving is estimated as the removed round trip at the chip bandwidth plus {launch_overhead_us} µs of "
            "launch overhead per absorbed op, capped by the absorbed ops' measured time (folded "
            "{folded_groups}: their whole time)."
        ),
        how_to_fix=(
            "Make sure the passes named in the finding are on: write the fusion_switch.cfg of the fix (JSON "
            "Switch / GraphFusion / UBFusion, the passes 'on') and rebuild -- `atc ... "
            "--fusion_switch_file=fusion_switch.cfg` for an offline model, TorchAir "
            "config.fusion_config.fusion_switch_file in graph mode, the GE option FUSION_SWITCH_FILE otherwise. "
            "Remove any 'ALL': 'off' or per-pass 'off' from an existing switch file. If the passes are on and the "
            "chain stays unfused, check fusion_result.json (match_times / effect_times): dynamic shapes, "
            "unsupported dtypes or an extra consumer of an intermediate tensor stop the pass."
        ),
        thresholds=("patterns", "type_groups", "folded_groups", "fused_markers", "launch_overhead_us",
                    "min_saving_us", "severity", "graph_confidence", "graph_confidence_switch_file",
                    "graph_only_severity", "non_ai_core_engines", "skip_graphs"),
        needs=("graph",),
        example="Conv2D -> BNInference -> Relu as three kernels; fused: one Conv2D kernel (ConvBatchnormFusionPass + "
                "TbeConvCommonRules0FusionPass).",
        role="cause",
    ))
    def check_graph(self, ctx: AnalysisContext) -> Iterable[Finding]:
        groups = self._graph_groups(ctx)
        if not groups:
            return
        r = ctx.rules
        cmdline = atc_cmdline(ctx.graph)
        switch_file = atc_option(cmdline, "fusion_switch_file")
        if switch_file is not None:
            yield from _emit(ctx, "ub-fusion.unfused-chain", groups, float(r["graph_confidence_switch_file"]),
                             cmdline, switch_file, "graph")
            return
        for pattern, chains in groups:
            yield from _emit(ctx, "ub-fusion.unfused-chain", [(pattern, chains)], float(r["graph_confidence"]),
                             cmdline, None, "graph")

    @rule(RuleDoc(
        id="ub-fusion.unfused-sequence",
        explains={
            "memory-bound.layers": "the fused kernel keeps the sequence's intermediates in UB: the HBM round trips that make these layers memory bound go",
            "roofline.memory-bound": "the fused kernel keeps the intermediates in UB instead of HBM",
            "roofline.no-bound": "one fused kernel replaces the sequence's short kernels",
            "roofline.latency-bound": "one fused kernel replaces the sequence's short kernels",
            "schedule.fusible-ops": "the fusion pass merges this very sequence into one kernel",
        },
        title="Fusable op sequence in the profile (no graph)",
        what=(
            "Without a model graph: finds the same patterns as ub-fusion.unfused-chain as consecutive device tasks "
            "on one stream (ordered by start time) where each op's input shape equals the previous op's output "
            "shape. Eager framework profiles (aclnn kernels, no model id) are skipped: UB fusion needs a compiled "
            "graph."
        ),
        why=(
            "Back-to-back kernels of a conv/matmul and its epilogue mean the epilogue was not fused: each "
            "intermediate tensor makes a round trip through global memory. Without the graph, consumers of the "
            "intermediate cannot be checked, so confidence is lower ({profile.confidence})."
        ),
        how_to_fix=(
            "Rebuild with the fusion switch file of the fix enabling the passes; pass --graph (OM JSON from "
            "`atc --mode=1`, or a GE dump) to confirm the chain and its consumers."
        ),
        thresholds=("patterns", "type_groups", "folded_groups", "launch_overhead_us", "min_saving_us", "severity",
                    "profile", "compute_cores"),
        needs=("ops",),
        role="cause",
    ))
    def check_profile(self, ctx: AnalysisContext) -> Iterable[Finding]:
        if ctx.graph is not None or not len(ctx.profile.ops) or not _applies(ctx):
            return
        ctx.note("ub-fusion.unfused-chain: skipped, needs the model graph (--graph); using consecutive profile rows")
        yield from _profile_findings(ctx, compile_patterns(ctx.rules))

    @rule(RuleDoc(
        id="ub-fusion.switch-file",
        explains={
            "memory-bound.layers": "the switched-off fusion passes fuse these ops again: their intermediates stay in UB",
            "schedule.fusible-ops": "the switched-off fusion passes merge this sequence again",
        },
        title="Model built with a fusion switch file",
        what=(
            "Reports an `atc --fusion_switch_file` (and `--buffer_optimize=off_optimize`) found in the OM's "
            "atc_cmdline attribute when no unfused chain carries it already: off_optimize, or a switch file that "
            "left no fusable chain unfused in this graph."
        ),
        why=(
            "A fusion switch file is how graph and UB fusion passes get turned off ('ALL': 'off' or per pass); "
            "off_optimize disables L2 buffer fusion. Both make fusable chains run as separate kernels."
        ),
        how_to_fix=(
            "Review the switch file: keep only the passes that must stay off (e.g. for accuracy) and rebuild; "
            "drop --buffer_optimize=off_optimize unless it is needed."
        ),
        thresholds=("graph_confidence_switch_file",),
        needs=("graph",),
        role="cause",
    ))
    def check_switch_file(self, ctx: AnalysisContext) -> Iterable[Finding]:
        cmdline = atc_cmdline(ctx.graph)
        switch_file = atc_option(cmdline, "fusion_switch_file")
        buffer_opt = atc_option(cmdline, "buffer_optimize")
        off_opt = buffer_opt == "off_optimize"
        if off_opt or (switch_file is not None and not self._graph_groups(ctx)):
            yield _switch_finding(ctx, cmdline or "", None if self._graph_groups(ctx) else switch_file,
                                  buffer_opt if off_opt else None)


def _applies(ctx: AnalysisContext) -> bool:
    """Fusion passes run where a graph is compiled (ATC, TorchAir/GE, MindSpore graph mode): rules ``contexts``."""
    context = context_of(ctx)
    if context in set(ctx.rules["contexts"]):
        return True
    ctx.note(f"ub-fusion: skipped, a {context} run launches ops one by one; graph and UB fusion apply to compiled "
             "graphs (ATC, TorchAir, MindSpore graph mode)")
    return False


# ---------------------------------------------------------------------------------------------------------
# graph
# ---------------------------------------------------------------------------------------------------------


def _graph_chains(ctx: AnalysisContext) -> list[tuple[Pattern, list[_Chain]]]:
    """Unfused chains of the graph, by pattern (in the rules' order): disjoint matches that are closed chains."""
    r = ctx.rules
    mg = ctx.graph
    assert mg is not None
    skip = r["skip_graphs"]
    if mg.format in set(skip["formats"]):
        ctx.note(f"ub-fusion.unfused-chain: skipped, a {mg.format} graph is not compiled yet (ATC fuses it at "
                 "conversion); pass the OM JSON (atc --mode=1) or a GE Build dump")
        return []
    stage = PurePath(str(mg.source)).name
    if skip["stage_regex"] and re.search(skip["stage_regex"], stage):
        ctx.note(f"ub-fusion.unfused-chain: skipped, {stage} was dumped before UB fusion runs; pass the OM JSON or "
                 "the GE Build / afterUBMatch dump")
        return []
    patterns = compile_patterns(r)
    dg = data_digraph(mg)
    exclude = fused_nodes(mg, FusedMarkers.from_rules(r["fused_markers"]))
    engines = {str(e).upper() for e in r["non_ai_core_engines"]}
    exclude |= {n for n, d in mg.g.nodes(data=True) if str(d.get("engine") or "").upper() in engines}
    priority = {p.id: i for i, p in enumerate(patterns)}
    matches = [m for m in find_matches(dg, patterns, exclude) if closed_chain(dg, m) and _same_shape_ok(mg, m)]
    chosen = select_disjoint(matches, priority)
    if not chosen:
        return []
    folded = _folded_types(r)
    stats = per_name(ctx.profile.ops)
    bw = _bytes_per_us(ctx)
    overhead = float(r["launch_overhead_us"])
    by_pattern: dict[str, list[_Chain]] = defaultdict(list)
    for m in chosen:
        by_pattern[m.pattern.id].append(_graph_chain(mg, m, folded, stats, bw, overhead))
    return [(p, by_pattern[p.id]) for p in patterns if p.id in by_pattern]


def _same_shape_ok(mg: Any, m: Match) -> bool:
    if not m.pattern.same_shape:
        return True
    shapes = {tuple((out_desc(mg, n) or {}).get("shape") or ()) for n in m.nodes}
    return len(shapes) == 1


def _folded_types(r: Mapping[str, Any]) -> set[str]:
    groups = r["type_groups"]
    out: set[str] = set()
    for g in r["folded_groups"]:
        out.update(groups.get(g, [g]))
    return out


def _bytes_per_us(ctx: AnalysisContext) -> float:
    """Chip bandwidth in bytes per microsecond (GB/s x 1e3)."""
    return float(ctx.platform["hbm_gbps"]) * 1e3


def _graph_chain(mg: Any, m: Match, folded: set[str], stats: Any, bw: float, overhead: float) -> _Chain:
    """Saving of one chain: per absorbed op, the round trip of the tensors it reads from the chain."""
    order = [m.nodes[i] for i in m.pattern.order]
    chain = _Chain(nodes=tuple(order), edges=[(m.nodes[a], m.nodes[b]) for a, b in m.pattern.edges],
                   types={n: str(mg.node(n).get("type")) for n in order})
    in_chain = set(order)
    written: set[str] = set()
    for node in order[1:]:
        rt = 0.0
        for u in order:
            if u == node or not mg.g.has_edge(u, node) or u not in in_chain:
                continue
            b = desc_bytes(edge_desc(mg, u, node)) or 0.0
            rt += b  # read back by this op
            if u not in written:
                rt += b  # written by the producer (once)
                written.add(u)
        own = sum(desc_bytes(d) or 0.0 for d in (mg.node(node).get("inputs") or [])) + sum(
            desc_bytes(d) or 0.0 for d in (mg.node(node).get("outputs") or []))
        is_folded = mg.node(node).get("type") in folded
        if node in stats.index:
            total_us = float(stats.at[node, "total_us"])
            calls = int(stats.at[node, "calls"])
            saving = total_us if is_folded else min(total_us, calls * (rt / bw + overhead))
            chain.absorbed_time += total_us
            chain.calls = max(chain.calls, calls)
        else:
            chain.measured = False
            estimate = (own or rt) / bw + overhead
            saving = estimate if is_folded else min(estimate, rt / bw + overhead)
        chain.absorbed[node] = max(0.0, saving)
        chain.roundtrip_bytes += rt
    return chain


# ---------------------------------------------------------------------------------------------------------
# profile only
# ---------------------------------------------------------------------------------------------------------


def _profile_findings(ctx: AnalysisContext, patterns: Sequence[Pattern]) -> Iterable[Finding]:
    r = ctx.rules
    prof = r["profile"]
    ops = ctx.profile.ops
    eager = _name_prefix_mask(ops["name"], tuple(prof["eager_name_prefixes"]))
    if prof["skip_rows_without_model_id"]:
        eager = eager | ops["model_id"].isna().to_numpy()
    compute = ops["core"].isin(r["compute_cores"]).to_numpy(dtype=bool)
    if compute.any() and eager[compute].all():
        ctx.note("ub-fusion.unfused-sequence: skipped, every op ran in eager (single-op) mode (no model id, or aclnn "
                 "kernels); UB fusion applies to compiled graphs (ATC, TorchAir, MindSpore graph mode)")
        return
    sub = ops.loc[~eager & compute]
    if len(sub) < 2:
        return
    seq = stream_order(sub)
    folded = _folded_types(r)
    bw = _bytes_per_us(ctx)
    overhead = float(r["launch_overhead_us"])
    order = sorted(range(len(patterns)), key=lambda i: (-len(patterns[i].slots), i))
    used = np.zeros(len(seq) + 1, dtype=bool)
    for prio in order:
        p = patterns[prio]
        starts = _accept(_sequence_starts(seq, p), len(p.slots), used)
        if not len(starts):
            continue
        chains = _aggregate_sequences(seq, p, starts, folded, bw, overhead)
        yield from _emit(ctx, "ub-fusion.unfused-sequence", [(p, chains)], float(prof["confidence"]), None, None,
                         "profile")


def _name_prefix_mask(names: pd.Series, prefixes: tuple[str, ...]) -> np.ndarray:
    """Rows whose op name starts with one of ``prefixes`` (tested once per distinct name)."""
    if not prefixes or not len(names):
        return np.zeros(len(names), dtype=bool)
    cat = names if isinstance(names.dtype, pd.CategoricalDtype) else names.astype("category")
    table_ = np.array([str(c).startswith(prefixes) for c in cat.cat.categories] + [False], dtype=bool)
    return table_[cat.cat.codes.to_numpy()]


def _accept(starts: np.ndarray, k: int, used: np.ndarray) -> np.ndarray:
    """Greedy, in start order: keep chains whose rows no earlier chain claimed; mark their rows used."""
    if not len(starts):
        return starts
    span = starts[:, None] + np.arange(k)[None, :]
    starts = starts[~used[span].any(axis=1)]
    if not len(starts):
        return starts
    gaps = np.diff(starts)
    if len(gaps) and (gaps < k).any():  # overlapping matches of one pattern (e.g. long elementwise runs)
        keep: list[int] = []
        last = -k
        for s0 in starts.tolist():
            if s0 - last >= k:
                keep.append(s0)
                last = s0
        starts = np.asarray(keep, dtype=np.int64)
    used[(starts[:, None] + np.arange(k)[None, :]).ravel()] = True
    return starts


def _aggregate_sequences(seq: StreamOrder, p: Pattern, starts: np.ndarray, folded: set[str], bw: float,
                         overhead: float) -> list[_Chain]:
    """One _Chain per distinct sequence of op names, its occurrences summed (vectorized over occurrences)."""
    k = len(p.slots)
    pos = starts[:, None] + np.arange(k)[None, :]
    codes = seq.name_code[pos]
    is_folded = seq.type_in(folded)
    frame = pd.DataFrame(codes, columns=[f"n{j}" for j in range(k)])
    frame["calls"] = 1
    how: dict[str, str] = {"calls": "sum"}
    for j in range(k):
        frame[f"t{j}"] = seq.type_code[pos[:, j]]
        how[f"t{j}"] = "first"
    for j in range(1, k):
        dur = seq.duration[pos[:, j]]
        rt = 2.0 * np.nan_to_num(seq.out0_bytes[pos[:, j - 1]])
        saving = np.where(is_folded[pos[:, j]], dur, np.minimum(dur, rt / bw + overhead))
        frame[f"s{j}"] = np.maximum(0.0, saving)
        frame[f"d{j}"] = dur
        frame[f"b{j}"] = rt
        how.update({f"s{j}": "sum", f"d{j}": "sum", f"b{j}": "sum"})
    agg = frame.groupby([f"n{j}" for j in range(k)], sort=False).agg(how)
    chains: list[_Chain] = []
    for key, row in agg.iterrows():
        names = tuple(str(seq.names[c]) for c in key)
        chain = _Chain(nodes=names, calls=int(row["calls"]), edges=list(zip(names, names[1:], strict=False)),
                       types={names[j]: str(seq.types[int(row[f"t{j}"])]) for j in range(k)})
        for j in range(1, k):
            chain.absorbed[names[j]] = chain.absorbed.get(names[j], 0.0) + float(row[f"s{j}"])
            chain.absorbed_time += float(row[f"d{j}"])
            chain.roundtrip_bytes += float(row[f"b{j}"])
        chains.append(chain)
    return chains


def _heads(seq: StreamOrder, types: frozenset[str]) -> np.ndarray:
    """Rows of the given types (cached on the sequence: many patterns share their head slot)."""
    cache: dict[frozenset[str], np.ndarray] = seq.__dict__.setdefault("_heads", {})
    if types not in cache:
        cache[types] = np.flatnonzero(seq.type_codes(types)[seq.type_code])
    return cache[types]


def _sequence_starts(seq: StreamOrder, p: Pattern) -> np.ndarray:
    """Start positions where the pattern's slots (in run order) appear as consecutive, shape-linked rows."""
    order = p.order
    k = len(order)
    n = len(seq)
    if n < k:
        return np.empty(0, dtype=np.int64)
    heads = _heads(seq, p.slots[order[0]])
    starts = heads[heads <= n - k]
    link = seq.next_linked
    for j in range(1, k):
        if not len(starts):
            break
        cur = starts + j
        keep = seq.type_codes(p.slots[order[j]])[seq.type_code[cur]] & link[cur - 1]
        if p.same_shape:
            keep &= seq.outs[cur] == seq.outs[starts]
        starts = starts[keep]
    return starts.astype(np.int64)


# ---------------------------------------------------------------------------------------------------------
# findings
# ---------------------------------------------------------------------------------------------------------


def _emit(ctx: AnalysisContext, rule_id: str, groups: list[tuple[Pattern, list[_Chain]]], confidence: float,
          cmdline: str | None, switch_file: str | None, source: str) -> Iterable[Finding]:
    """One finding for ``groups`` (one pattern, or every pattern a build's switch file left unfused)."""
    r = ctx.rules
    chains = [c for _, cs in groups for c in cs]
    saving_by_op: dict[str, float] = defaultdict(float)
    for c in chains:
        for op, s in c.absorbed.items():
            saving_by_op[op] += s
    saving = float(sum(saving_by_op.values()))
    if saving < float(r["min_saving_us"]):
        return
    window = window_us(ctx.profile) if len(ctx.profile.ops) else 0.0
    measured = all(c.measured for c in chains) and window > 0
    severity = severity_for(saving / window, r["severity"]) if measured else str(r["graph_only_severity"])
    ops = list(dict.fromkeys(n for c in chains for n in c.nodes))
    bw = float(ctx.platform["hbm_gbps"])
    pattern_of = {id(c): p.id for p, cs in groups for c in cs}
    rows = [[" -> ".join(c.nodes), pattern_of[id(c)], c.calls, round(c.absorbed_time, 3),
             round(c.roundtrip_bytes / max(c.calls, 1)), round(sum(c.absorbed.values()), 3)]
            for c in sorted(chains, key=lambda c: -sum(c.absorbed.values()))]
    graph_fusion = list(dict.fromkeys(x for p, _ in groups for x in p.graph_fusion))
    ub_fusion = list(dict.fromkeys(x for p, _ in groups for x in p.ub_fusion))
    passes = ", ".join([*graph_fusion, *ub_fusion])
    evidence: dict[str, Any] = {
        "pattern": ", ".join(p.id for p, _ in groups),
        "slots": "; ".join(" -> ".join(p.slot_names) for p, _ in groups),
        "patterns": {p.id: len(cs) for p, cs in groups},
        "chains": len(chains),
        "source": source,
        "absorbed_ops_us": round(sum(c.absorbed_time for c in chains), 3),
        "bandwidth_gbps": bw,
        "launch_overhead_us": float(r["launch_overhead_us"]),
        "table": table(["chain", "pattern", "calls", "absorbed ops us", "round-trip bytes per call", "saving us"],
                       rows),
        "subgraph": {"nodes": [{"name": n, "type": c.types.get(n, "")} for c in chains for n in c.nodes],
                     "edges": [list(e) for c in chains for e in c.edges]},
    }
    if window > 0:
        evidence["share_of_window"] = round(saving / window, 4)
    if switch_file is not None:
        evidence["fusion_switch_file"] = switch_file
    if cmdline:
        evidence["atc_cmdline"] = cmdline
    fix, how = _fix(ctx, graph_fusion, ub_fusion, cmdline)
    kinds = ", ".join(f"{p.id.replace('-', ' + ')} x{len(cs)}" for p, cs in groups)
    if switch_file is not None:
        title = (f"Fusion passes off in --fusion_switch_file={switch_file}: {len(chains)} unfused chain(s) "
                 f"({', '.join(f'{p.id} x{len(cs)}' for p, cs in groups)})")
        lead = (f"The model was built with --fusion_switch_file={switch_file}, which most likely turns these passes "
                f"off: {len(chains)} chain(s) ({kinds}) run as separate kernels. ")
    else:
        title = f"Unfused {groups[0][0].id} chain(s): {len(chains)} ({passes})"
        lead = f"{len(chains)} chain(s) {kinds} run as separate kernels. "
    recommendation = (
        f"{lead}Enable {passes} ({how}) so the epilogue stays in the Unified Buffer instead of a global-memory round "
        "trip per intermediate tensor, and BN/Scale/BiasAdd fold into the weights. If the passes are already on, "
        "fusion_result.json (match_times/effect_times) says why they did not apply."
    )
    basis = (
        "per absorbed op: intermediate tensor bytes x 2 (written, then read back) / "
        f"{bw:g} GB/s (platform hbm_gbps) + {float(r['launch_overhead_us']):g} µs launch overhead, capped by the "
        "op's measured time; folded BN/Scale/BiasAdd: their whole time"
    )
    if not all(c.measured for c in chains):
        basis += "; ops not in the profile: per inference, from tensor sizes only"
    yield ctx.finding(
        rule=rule_id,
        title=title,
        severity=severity,  # type: ignore[arg-type]
        ops=ops,
        evidence=evidence,
        estimated_saving_us=saving,
        basis=basis,
        recommendation=recommendation,
        fix=fix,
        confidence=confidence,
        saving_by_op=dict(saving_by_op),
    )


def _fix(ctx: AnalysisContext, graph_fusion: list[str], ub_fusion: list[str], cmdline: str | None
         ) -> tuple[Fix, str]:
    """The switch file that turns the passes on, and how the run's build takes it (by execution context)."""
    switch = {"Switch": {"GraphFusion": {p: "on" for p in graph_fusion}, "UBFusion": {p: "on" for p in ub_fusion}}}
    summary = f"enable {', '.join([*graph_fusion, *ub_fusion])}"
    flag = f"--fusion_switch_file={SWITCH_FILE}"
    fam = family(ctx)
    if fam == "torch":
        snippet = f'config.fusion_config.fusion_switch_file = "{SWITCH_FILE}"  # torchair CompilerConfig'
        return (Fix("fusion-switch", f"{summary} in {SWITCH_FILE} and pass it to torchair",
                    {**switch, "snippet": snippet}),
                f"{SWITCH_FILE} of the fix, TorchAir config.fusion_config.fusion_switch_file")
    if fam == "mindspore":
        return (Fix("fusion-switch", f"{summary} in {SWITCH_FILE} (GE option FUSION_SWITCH_FILE)", switch),
                f"{SWITCH_FILE} of the fix, through the GE option FUSION_SWITCH_FILE")
    return (Fix("fusion-switch", f"{summary} and rebuild with {flag}", {**switch, "flags": [flag]},
                _atc_command(cmdline, flag)),
            f"{SWITCH_FILE} of the fix, `atc ... {flag}`" + ("" if fam == "om" else
                                                              "; in TorchAir graph mode config.fusion_config."
                                                              "fusion_switch_file"))


def _atc_command(cmdline: str | None, flag: str) -> str:
    """The user's atc command with the switch-file flag set, or a template when the OM did not record one."""
    if not cmdline:
        return f"atc --model=<model> --framework=<n> --output=<om> --soc_version=<soc> {flag}"
    parts = cmdline.split()
    if parts and re.search(r"(^|/)atc(\.bin)?$", parts[0]):
        parts[0] = "atc"
    parts = [p for p in parts if not re.match(r"^--?fusion_switch_file(=|$)", p)]
    return " ".join([*parts, flag])


def _switch_finding(ctx: AnalysisContext, cmdline: str, switch_file: str | None, buffer_opt: str | None) -> Finding:
    found = []
    if switch_file is not None:
        found.append(f"--fusion_switch_file={switch_file}")
    if buffer_opt == "off_optimize":
        found.append("--buffer_optimize=off_optimize")
    return ctx.finding(
        rule="ub-fusion.switch-file",
        title="Model built with " + " and ".join(found),
        severity="info",
        ops=[],
        evidence={"atc_cmdline": cmdline, "fusion_switch_file": switch_file, "buffer_optimize": buffer_opt},
        estimated_saving_us=0.0,
        basis="configuration check; unfused chains it causes are reported (with their savings) by "
              "ub-fusion.unfused-chain",
        recommendation=" ".join(part for part, on in (
            ("No chain of the rules' fusion patterns was left unfused in this graph, but the switch file may turn "
             "off other passes: check it for 'off' entries ('ALL': 'off' turns off every pass that can be "
             "disabled), keep only those needed, and rebuild.", switch_file is not None),
            ("--buffer_optimize=off_optimize disables L2 buffer fusion: drop it (the default l2_optimize keeps data "
             "in the L2 buffer between ops) unless it is needed, and rebuild.", buffer_opt == "off_optimize"),
        ) if on),
        confidence=float(ctx.rules["graph_confidence_switch_file"]),
    )


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [UbFusionKB]
