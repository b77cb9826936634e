"""Decomposed activations and norms: Mish, GELU, Swish/SiLU, HardSwish and LayerNorm computed as op chains.

Exporters and ATC split functions the SoC has no single kernel for into elementwise chains (Mish ->
Softplus, Tanh, Mul), each a full pass over the tensor. The SoC profiling guide's case: a PyTorch net whose Mish
ran as Softplus+Tanh+Mul went from 23.3 ms to 14.2 ms per inference with LeakyRelu instead. Whether the run's
kernels have the native op depends on the chip, the CANN release and the execution context (the ATC op set for
offline and graph-mode models, the aclnn kernels for eager runs): :func:`advisor.toolkit.advice.native_kernel_for_run`.
Each decomposed chain is a cause (something to change) on its ops. Patterns are data (``rules/mish-leakyrelu.yaml``): matched on graph edges -- checking that the final Mul
really takes the same x that feeds the chain -- or, without a graph, as consecutive ops on one stream with
matching shapes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection
from advisor.toolkit.advice import context_of, family, native_kernel_for_run, native_since
from advisor.toolkit.common import (
    categorical,
    code_table,
    detected_soc,
    elements,
    next_index,
    node_type,
    output_elements,
    row_keys,
    severity_for,
    shapes_of,
    similar_size_median,
    stream_positions,
    type_mask,
    walk,
)
from advisor.toolkit.graph_patterns import ModelGraph
from advisor.toolkit.time import window_us


def aliases(step: str) -> frozenset[str]:
    """``"Div|RealDiv"`` -> {"Div", "RealDiv"}."""
    return frozenset(p.strip() for p in step.split("|") if p.strip())


@dataclass
class Occurrence:
    """One place in the model where a pattern matched (repeated launches of it are counted in ``tasks``)."""

    pattern: str
    form: str
    ops: tuple[str, ...]
    types: tuple[str, ...]
    tasks: int = 0
    total_us: float = 0.0
    per_op_us: dict[str, float] = field(default_factory=dict)
    elements: int = 0
    native_us: float = 0.0
    native_basis: str = ""

    @property
    def saving_us(self) -> float:
        return max(0.0, self.total_us - self.native_us * self.tasks)


# ---------------------------------------------------------------------------------------------------------
# graph matching
# ---------------------------------------------------------------------------------------------------------
class GraphMatcher:
    """Match pattern forms on graph data edges."""

    def __init__(self, graph: ModelGraph, rules: Mapping[str, Any]) -> None:
        self.g = graph
        self.skip = set(rules["chain_skip"])
        self.consts = set(rules["const_types"])
        self.exclusive = bool(rules["exclusive_intermediates"])
        self.hops = int(rules["chain_skip_hops"])
        self.order = {n: (d.get("id") if d.get("id") is not None else 0, n) for n, d in graph.g.nodes(data=True)}

    def _down(self, node: str) -> list[str]:
        return walk(self.g, node, "down", self.skip, self.hops)

    def _up(self, node: str) -> list[str]:
        return walk(self.g, node, "up", self.skip, self.hops)

    def _ancestors(self, node: str, hops: int) -> set[str]:
        seen = {node}
        frontier = [node]
        for _ in range(hops):
            frontier = [p for n in frontier for p in self._up(n) if p not in seen]
            seen.update(frontier)
        return seen

    def match(self, form: Mapping[str, Any], used: set[str]) -> list[list[str]]:
        steps = [aliases(s) for s in form["steps"]]
        tail = [aliases(s) for s in form.get("optional_tail") or []]
        links = [(int(link[0]), link[1], int(link[2]) if len(link) > 2 else 0) for link in form.get("links") or []]
        scalar = [int(i) for i in form.get("scalar_input_steps") or []]
        starts = sorted((n for n, d in self.g.g.nodes(data=True) if d.get("type") in steps[0] and n not in used),
                        key=lambda n: self.order[n])
        found: list[list[str]] = []
        for start in starts:
            if start in used:
                continue
            chain = self._chain(start, steps, used)
            if chain is None:
                continue
            x = {p for p in self._up(start) if node_type(self.g, p) not in self.consts}
            if not x or not self._links_ok(chain, links, x) or not all(self._scalar(chain[i]) for i in scalar):
                continue
            for t in tail:
                nxt = [m for m in self._down(chain[-1]) if node_type(self.g, m) in t and m not in used]
                if len(nxt) != 1 or len(self._down(chain[-1])) != 1:
                    break
                chain.append(nxt[0])
            if self.exclusive and not self._exclusive(chain):
                continue
            found.append(chain)
            used.update(chain)
        return found

    def _chain(self, start: str, steps: Sequence[frozenset[str]], used: set[str]) -> list[str] | None:
        chain = [start]
        for allowed in steps[1:]:
            cands = [m for m in self._down(chain[-1]) if node_type(self.g, m) in allowed and m not in chain
                     and m not in used]
            if not cands:
                return None
            chain.append(cands[0])
        return chain

    def _links_ok(self, chain: list[str], links: list[tuple[int, Any, int]], x: set[str]) -> bool:
        for idx, src, hops in links:
            if idx >= len(chain):
                return False
            node = chain[idx]
            prev = chain[idx - 1] if idx > 0 else None
            others = [p for p in self._up(node) if p != prev]
            target = x if src == "x" else {chain[int(src)]}
            if not any(self._ancestors(p, hops) & target for p in others):
                return False
        return True

    def _scalar(self, node: str) -> bool:
        """Takes a constant: a Const producer, or a single data input (Muls/Adds carry the scalar as an attr)."""
        producers = self.g.data_predecessors(node)
        return len(producers) <= 1 or any(node_type(self.g, p) in self.consts for p in producers)

    def _exclusive(self, chain: list[str]) -> bool:
        members = set(chain)
        for n in chain[:-1]:
            for m in self._down(n):
                if m not in members:
                    return False
        return True


# ---------------------------------------------------------------------------------------------------------
# profile matching
# ---------------------------------------------------------------------------------------------------------
class ProfileMatcher:
    """Match pattern forms as consecutive ops (skipping ``chain_skip``) on one stream, vectorized: the rows of
    the first step's types are the candidates, each step follows them one row further and filters by type."""

    def __init__(self, ops: pd.DataFrame, rules: Mapping[str, Any]) -> None:
        order, stream = stream_positions(ops)
        # the categoricals' own (int8/int16) codes in stream order; per-row values are looked up per category
        names, types = categorical(ops["name"]), categorical(ops["type"])
        self.name_codes = names.cat.codes.to_numpy()[order]
        self.name_values = [str(v) for v in names.cat.categories]
        self.type_codes = types.cat.codes.to_numpy()[order]
        self.type_values = [str(v) for v in types.cat.categories]
        self._type_cats = list(types.cat.categories)
        del names, types
        self.dur = np.nan_to_num(ops["duration_us"].to_numpy(dtype="float64")[order])
        ins, outs = categorical(ops["input_shapes"]), categorical(ops["output_shapes"])
        self.in_codes = ins.cat.codes.to_numpy()[order]
        self.out_codes = outs.cat.codes.to_numpy()[order]
        del order
        # per category, the last entry for missing values (code -1)
        shape_ids: dict[str, int] = {"": -1}
        in_cats, out_cats = ins.cat.categories, outs.cat.categories
        self._in1 = code_table(in_cats, lambda v: shape_ids.setdefault(_first(v), len(shape_ids)), -1, np.int64)
        self._out1 = code_table(out_cats, lambda v: shape_ids.setdefault(_first(v), len(shape_ids)), -1, np.int64)
        self._scalar_ok = code_table(in_cats, _scalar_input, True, bool)
        self._elements = code_table(in_cats, lambda v: _elements(str(v)), 0, np.int64)
        self._masks: dict[tuple[str, ...], np.ndarray] = {}
        self.solid = ~self._mask(frozenset(rules["chain_skip"]))
        self.nxt = next_index(self.solid, stream).astype(np.int32 if len(stream) < 2**31 else np.int64)
        self.used = np.zeros(len(stream), dtype=bool)

    def in1(self, at: np.ndarray) -> np.ndarray:
        """Shape id of the first input of the rows ``at`` (-1: none)."""
        return self._in1[self.in_codes[at]]

    def out1(self, at: np.ndarray) -> np.ndarray:
        """Shape id of the first output of the rows ``at`` (-1: none)."""
        return self._out1[self.out_codes[at]]

    def scalar_ok(self, at: np.ndarray) -> np.ndarray:
        """The rows ``at`` take one input or a one-element constant (:func:`_scalar_input`)."""
        return self._scalar_ok[self.in_codes[at]]

    def elements(self, at: int) -> int:
        """Elements of the first input of row ``at``."""
        return int(self._elements[self.in_codes[at]])

    def match(self, form: Mapping[str, Any]) -> np.ndarray:
        """Rows of each accepted match (one row of the result per match; -1 pads absent tail steps)."""
        steps = [aliases(s) for s in form["steps"]]
        tail = [aliases(s) for s in form.get("optional_tail") or []]
        same = [int(i) for i in form.get("same_shape_steps") or []]
        scalar = [int(i) for i in form.get("scalar_input_steps") or []]
        starts = np.flatnonzero(self.solid & ~self.used & self._mask(steps[0]))
        ok = np.ones(len(starts), dtype=bool)
        cols = [starts]
        cur = starts
        for allowed in steps[1:]:
            cur = np.where(cur >= 0, self.nxt[np.maximum(cur, 0)], -1)
            c = np.maximum(cur, 0)
            ok &= (cur >= 0) & self._mask(allowed)[c] & ~self.used[c]
            cols.append(cur)
        x = self.in1(starts)
        for k in same:
            if k < len(cols):
                ok &= (x < 0) | (self.out1(np.maximum(cols[k], 0)) == x)
        for k in scalar:
            if k < len(cols):
                ok &= self.scalar_ok(np.maximum(cols[k], 0))
        if not ok.any():
            return np.zeros((0, len(cols)), dtype=np.int64)
        cols = [c[ok] for c in cols]
        rows = np.stack(cols, axis=1)
        # matches of one form can overlap only when one starts inside the previous one: resolve those in order
        ends = rows.max(axis=1)
        if len(rows) > 1 and bool(np.any(rows[1:, 0] <= ends[:-1])):
            accepted: list[int] = []
            taken: set[int] = set()
            for i, r in enumerate(rows.tolist()):
                if taken.isdisjoint(r):
                    taken.update(r)
                    accepted.append(i)
            rows = rows[accepted]
        self.used[rows.ravel()] = True
        # optional tail steps, absorbed while present (vectorized; -1 pads where a tail is absent)
        alive = np.ones(len(rows), dtype=bool)
        last = rows[:, -1]
        extra = []
        for t in tail:
            j = np.where(alive, self.nxt[last], -1)
            c = np.maximum(j, 0)
            take = (j >= 0) & self._mask(t)[c] & ~self.used[c]
            out_c, out_last = self.out1(c), self.out1(last)
            take &= (out_c < 0) | (out_last < 0) | (out_c == out_last)
            col = np.where(take, j, -1)
            self.used[col[take]] = True
            extra.append(col)
            alive &= take
            last = np.where(take, j, last)
        return np.concatenate([rows, *[e[:, None] for e in extra]], axis=1) if extra else rows

    def _mask(self, allowed: frozenset[str]) -> np.ndarray:
        """Rows whose type is in ``allowed`` (decided per category), cached per set."""
        key = tuple(sorted(allowed))
        if key not in self._masks:
            self._masks[key] = code_table(self._type_cats, lambda t: str(t) in allowed, False, bool)[self.type_codes]
        return self._masks[key]


def _first(cell: object) -> str:
    if cell is None or (isinstance(cell, float) and np.isnan(cell)):
        return ""
    return str(cell).split(";")[0].strip()


def _scalar_input(cell: object) -> bool:
    """One input, or an input of at most one element (the constant); unknown shapes pass."""
    text = "" if cell is None else str(cell)
    parts = text.split(";")
    if not text or len(parts) <= 1:
        return True
    return any(not p.strip() for p in parts) or any(elements(s) <= 1 for s in shapes_of(text))


# ---------------------------------------------------------------------------------------------------------
# the knowledge base
# ---------------------------------------------------------------------------------------------------------
def _doc(rule_id: str, title: str, what: str, why: str, how: str) -> RuleDoc:
    return RuleDoc(id=f"mish-leakyrelu.{rule_id}", title=title, what=what, why=why, how_to_fix=how,
                   thresholds=("patterns", "severity", "size_factor", "chain_skip", "chain_skip_hops", "const_types",
                               "exclusive_intermediates", "confidence",
                               *(("leaky_relu_negative_slope",) if rule_id == "mish" else ())),
                   needs=("graph", "ops"), role="cause", explains=_CHAIN_EXPLAINS)


_CHAIN_EXPLAINS = {rule: "the decomposed chain's kernels are replaced by one kernel: their own time, launches and "
                         "HBM round trips go" for rule in ("roofline.no-bound", "roofline.memory-bound",
                                                           "roofline.latency-bound", "roofline.scalar-bound",
                                                           "memory-bound.layers",
                                                           "schedule.fusible-ops")}
"""What replacing a decomposed activation chain with its single-kernel form removes, on the chain's ops."""


class MishLeakyReluKB(KnowledgeBase):
    """One check matches every pattern (a node belongs to at most one match), so it emits the five rules."""

    id = "mish-leakyrelu"
    title = "Decomposed activations and norms"
    version = "1.1.0"
    api_version = "1.5"
    requires = ()
    requires_any = ("ops", "graph")
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "mish-leakyrelu"

    @rule(_doc(
        "mish", "Mish computed as Softplus -> Tanh -> Mul",
        "Finds Mish decomposed as Softplus -> Tanh -> Mul(x, .) or Exp -> Add -> Log -> Tanh -> Mul(x, .), checking on "
        "the graph that the Mul's other input is the same x that feeds the chain (without a graph: the op sequence "
        "on one stream with the same tensor shape).",
        "Each op is a full pass over the tensor, and no fusion pass merges them. The SoC profiling guide's case "
        "(SS928, whose toolchain has no Mish): Mish -> LeakyRelu cut inference from 23.3 ms to 14.2 ms. CANN 8.1's "
        "ATC op set has a native Mish kernel on 310/310B/310P/910/A2/A3 (rules/platforms.yaml native_ops); the "
        "op-by-op (aclnn) kernels of torch_npu eager and MindSpore PyNative have it on the SoCs of the pattern's "
        "native_socs only.",
        "Where the run's kernels have a native Mish (the chip's ATC op set at the run's CANN release for offline "
        "and graph-mode models, the aclnn kernels for eager runs), run Mish as one op: export it as one op (ONNX "
        "opset >= 18) for ATC, torch.nn.Mish / mindspore.ops.mish in the framework. Otherwise replace Mish with "
        "LeakyRelu(negative_slope={leaky_relu_negative_slope}) (`advisor fix model.onnx --apply mish-to-leakyrelu "
        "--accept mish-to-leakyrelu` for ONNX models, nn.LeakyReLU in the framework); it is a different function, "
        "so fine-tune or retrain and check accuracy. An unknown CANN release is stated as an assumption."))
    @rule(_doc(
        "gelu", "GELU computed as Pow/Tanh or Erf op chains",
        "Finds GELU decomposed in its tanh form (Pow -> Mul -> Add(x) -> Mul -> Tanh -> Add -> Mul(x)) or its erf "
        "form (Div -> Erf -> Add -> Mul(x) [-> Mul(0.5)]).",
        "Seven or so elementwise passes instead of one; the Gelu kernel exists on every Ascend product. "
        "GeluFusionPass fuses the tanh form only for static shapes.",
        "Fuse the chain into Gelu: for ONNX models `advisor fix model.onnx --apply gelu-fuse` (or export with ONNX "
        "opset >= 20 Gelu), keeping GeluFusionPass on and the shapes static for ATC; in the framework call its GELU "
        "(torch.nn.functional.gelu, mindspore.ops.gelu)."))
    @rule(_doc(
        "swish", "Swish/SiLU computed as Sigmoid -> Mul",
        "Finds x * sigmoid(x) (and x * sigmoid(beta * x)) where the Mul takes the chain input x.",
        "Two or three passes instead of one fused kernel.",
        "Where the run's kernels have a native Swish, fuse into it (`advisor fix model.onnx --apply swish-fuse` for "
        "ONNX models; torch.nn.SiLU / mindspore.ops.silu in the framework). Without one: keep it, or replace it "
        "with HardSwish where that is native, and fine-tune (a different function)."))
    @rule(_doc(
        "hardswish", "HardSwish computed as Add -> Relu6/Clip -> Mul -> Div",
        "Finds x * relu6(x + 3) / 6 (either order of the Mul and Div) and x * HardSigmoid(x).",
        "Four passes where the native HardSwish op does one.",
        "Export with ONNX opset >= 14 so the model carries the HardSwish op; in the framework call "
        "torch.nn.Hardswish / mindspore.ops.hardswish where the run's kernels have it."))
    @rule(_doc(
        "layernorm", "LayerNorm computed as ReduceMean/Sub/Pow/Sqrt/Div chains",
        "Finds ReduceMean -> Sub(x) -> Pow -> ReduceMean -> Add(eps) -> Sqrt -> Div(Sub) [-> Mul(gamma) -> "
        "Add(beta)] (and the Rsqrt/Mul variant).",
        "Nine small ops, two reductions, each reading the tensor again; LayerNormONNXFusionPass / "
        "LayerNormFusionPass fuse it only for static shapes, a last-axis reduce and keep_dims=true.",
        "Export with ONNX opset >= 17 so the model carries LayerNormalization, or keep the pattern fusable "
        "(static shapes, normalize over the last axis); in the framework call its LayerNorm (torch.nn.LayerNorm, "
        "mindspore.nn.LayerNorm)."))
    def check_chains(self, ctx: AnalysisContext) -> Iterable[Finding]:
        rules = ctx.rules
        ops = ctx.profile.ops
        patterns: Mapping[str, Any] = rules["patterns"]
        occurrences = _match(ctx, patterns)
        if not occurrences:
            return []
        window = window_us(ctx.profile) if len(ops) else 0.0
        estimator = NativeEstimator(ops, float(rules["size_factor"])) if len(ops) else None
        soc = detected_soc(ctx)
        findings = []
        for pid, occ in occurrences.items():
            pat = patterns[pid]
            for o in occ:
                if estimator is not None and o.tasks:
                    o.native_us, o.native_basis = estimator.estimate(o, pat)
            native, native_why = native_kernel_for_run(ctx, str(pat["native_op"]), pat["native_socs"], soc)
            advice = _advice(ctx, pid, pat, occ, soc, native, native_why)
            if advice.fix is None:  # nothing this run's kernels can do better: not a cause to act on
                ctx.note(f"mish-leakyrelu.{pat['rule']}: {advice.text}")
                continue
            findings.append(self._finding(ctx, pat, occ, window, soc, (native, native_why), advice))
        return findings

    def _finding(self, ctx: AnalysisContext, pat: Mapping[str, Any], occ: list[Occurrence], window: float,
                 soc: str | None, native_of: tuple[bool | None, str], advice: _Advice) -> Finding:
        rules = ctx.rules
        by_op: dict[str, float] = defaultdict(float)
        for o in occ:
            if o.total_us > 0:
                for name, us in o.per_op_us.items():
                    by_op[name] += us * o.saving_us / o.total_us
        saving = sum(o.saving_us for o in occ)
        total = sum(o.total_us for o in occ)
        timed = total > 0
        rows = [[" > ".join(o.ops), " > ".join(o.types), o.form, o.tasks, round(o.total_us, 3),
                 round(o.native_us, 3), round(o.saving_us, 3)] for o in sorted(occ, key=lambda o: -o.saving_us)]
        native, native_why = native_of
        title = f"{pat['function']} computed as an op chain at {len(occ)} place(s)"  # ranks of one job merge
        bases = sorted({o.native_basis for o in occ if o.native_basis})
        return ctx.finding(
            rule=f"mish-leakyrelu.{pat['rule']}",
            title=title,
            severity=severity_for(saving / window, rules["severity"]) if window and timed else "info",
            ops=list(dict.fromkeys(n for o in occ for n in o.ops)),
            evidence={"function": pat["function"], "occurrences": len(occ), "decomposed_us": total,
                      "soc": soc, "native_kernel_on_soc": native, "native_kernel_reason": native_why,
                      "cann_version": ctx.profile.meta.cann_version, "context": context_of(ctx),
                      "table": table(["ops", "types", "form", "launches", "total_us", "native_us_each", "saving_us"],
                                     rows)},
            estimated_saving_us=saving,
            basis=("decomposed ops' measured time minus one native op per launch: " + "; ".join(bases))
            if timed else "no timing (graph only)",
            recommendation=advice.text,
            fix=advice.fix,
            confidence=float(rules["confidence"][advice.kind]),
            saving_by_op={k: v for k, v in by_op.items() if v > 0},
        )


def _match(ctx: AnalysisContext, patterns: Mapping[str, Any]) -> dict[str, list[Occurrence]]:
    """Every pattern's occurrences: on graph edges when there is a graph (timed from the profile), else as op
    sequences in the profile. Longer forms first; a node belongs to one match."""
    rules = ctx.rules
    ops = ctx.profile.ops
    occurrences: dict[str, list[Occurrence]] = defaultdict(list)
    if ctx.graph is not None:
        matcher = GraphMatcher(ctx.graph, rules)
        used: set[str] = set()
        for pid, pat in patterns.items():
            for form in sorted(pat["forms"], key=lambda f: -len(f["steps"])):
                for chain in matcher.match(form, used):
                    occurrences[pid].append(Occurrence(pid, form["name"], tuple(chain),
                                                       tuple(node_type(ctx.graph, n) for n in chain)))
        if len(ops):
            _attach_profile_times(occurrences, ops)
    elif len(ops):
        pm = ProfileMatcher(ops, rules)
        for pid, pat in patterns.items():
            for form in sorted(pat["forms"], key=lambda f: -len(f["steps"])):
                rows = pm.match(form)
                if len(rows):
                    occurrences[pid] += _group_rows(pid, form["name"], rows, pm)
        if occurrences:
            ctx.note("mish-leakyrelu: no model graph (--graph); patterns were matched as consecutive ops on one "
                     "stream with matching shapes, without checking data edges")
    return occurrences


# ---------------------------------------------------------------------------------------------------------
# timing
# ---------------------------------------------------------------------------------------------------------
def _group_rows(pid: str, form: str, rows: np.ndarray, pm: ProfileMatcher) -> list[Occurrence]:
    """Profile matches with the same op names are one place in the model launched several times."""
    present = rows >= 0
    names = np.where(present, pm.name_codes[np.maximum(rows, 0)], -2)
    key, first = row_keys(names)
    tasks = np.bincount(key, minlength=len(first))
    width = rows.shape[1]
    per_col = [np.bincount(key, weights=np.where(present[:, k], pm.dur[np.maximum(rows[:, k], 0)], 0.0),
                           minlength=len(first)) for k in range(width)]
    out: list[Occurrence] = []
    for g, f in enumerate(first):
        r = [int(i) for i in rows[f] if i >= 0]
        op_names = tuple(pm.name_values[pm.name_codes[i]] for i in r)
        o = Occurrence(pid, form, op_names, tuple(pm.type_values[pm.type_codes[i]] for i in r))
        o.tasks = int(tasks[g])
        o.elements = pm.elements(r[0])
        for k in range(len(r)):
            o.per_op_us[op_names[k]] = o.per_op_us.get(op_names[k], 0.0) + float(per_col[k][g])
        o.total_us = float(sum(per_col[k][g] for k in range(len(r))))
        out.append(o)
    return out


def _elements(cell: object) -> int:
    shapes = shapes_of(cell)
    return elements(shapes[0]) if shapes else 0


def _attach_profile_times(occurrences: Mapping[str, list[Occurrence]], ops: pd.DataFrame) -> None:
    names = ops["name"].astype(str)
    wanted = {n for occ in occurrences.values() for o in occ for n in o.ops}
    sub = ops.loc[names.isin(wanted).to_numpy()]
    if not len(sub):
        return
    key = sub["name"].astype(str)
    g = sub.groupby(key, sort=False)
    total = g["duration_us"].sum()
    count = g.size()
    first_in = g["input_shapes"].first()
    for occ in occurrences.values():
        for o in occ:
            present = [n for n in o.ops if n in total.index]
            if not present:
                continue
            o.per_op_us = {n: float(total[n]) for n in present}
            o.total_us = float(sum(o.per_op_us.values()))
            o.tasks = int(max(count[n] for n in present))
            if o.ops[0] in first_in.index:
                o.elements = _elements(first_in[o.ops[0]])


class NativeEstimator:
    """Time of the one native op that replaces an occurrence."""

    def __init__(self, ops: pd.DataFrame, factor: float) -> None:
        self.type_col = ops["type"]
        self.dur = ops["duration_us"].to_numpy(dtype="float64")
        self.size = output_elements(ops)
        self.factor = factor
        self._masks: dict[tuple[str, ...], np.ndarray] = {}

    def estimate(self, o: Occurrence, pat: Mapping[str, Any]) -> tuple[float, str]:
        kinds = tuple(pat["estimate_from"])
        if kinds not in self._masks:
            self._masks[kinds] = type_mask(self.type_col, kinds)
        ref = self._masks[kinds]
        if ref.any() and o.elements > 0:
            m = similar_size_median(self.dur[ref], self.size[ref], o.elements, self.factor, 1)
            if m is not None:
                kinds = "/".join(pat["estimate_from"])
                return min(m, o.total_us / max(o.tasks, 1)), f"median {kinds} of the same size in this profile"
        per_launch = [us / max(o.tasks, 1) for us in o.per_op_us.values()]
        factor = float(pat["native_cost_factor"])
        cheapest = min(per_launch) if per_launch else 0.0
        est = min(cheapest * factor, sum(per_launch))
        return est, (f"cheapest op of the occurrence x {factor:g} (native_cost_factor; no "
                     f"{'/'.join(pat['estimate_from'])} of this size in the profile)")


# ---------------------------------------------------------------------------------------------------------
# advice, fitted to the run: framework family (advisor.toolkit.advice) and the kernels it has
# ---------------------------------------------------------------------------------------------------------
@dataclass
class _Advice:
    text: str
    fix: Fix | None
    kind: str
    """Key of the rules' ``confidence``: native, native_assumed, replacement, fuse, export, keep, custom."""


def _onnx_rewrite(rule_id: str, summary: str, params: str = "", data: Mapping[str, Any] | None = None) -> Fix:
    return Fix("onnx-rewrite", summary, {"rule": rule_id, **(data or {})},
               f"advisor fix model.onnx --apply {rule_id}{params} -o fixed.onnx")


def _mish_advice(ctx: AnalysisContext, occ: list[Occurrence], where: str, native: bool | None,
                 native_why: str) -> _Advice:
    """Native Mish where the run's kernels have it; LeakyRelu otherwise (``advisor fix`` for ONNX models, the
    framework's LeakyReLU in code), with the accuracy caveat; the CANN assumption stated when the release is
    unknown."""
    slope = float(ctx.rules["leaky_relu_negative_slope"])
    fam = family(ctx)
    n, k = len(occ), len(occ[0].ops)
    caveat = ("LeakyRelu is a different function: fine-tune or retrain and check accuracy (the SoC profiling "
              "guide's case reported about 1% accuracy difference for 23.3 ms -> 14.2 ms).")
    if fam == "torch":
        leaky = Fix("code", f"replace Mish with LeakyReLU(negative_slope={slope:g})",
                    {"snippet": f"act = torch.nn.LeakyReLU(negative_slope={slope:g})  # instead of torch.nn.Mish()"})
        one_op = "call torch.nn.functional.mish / torch.nn.Mish so it launches as one kernel"
        native_fix = Fix("code", "call Mish as one op", {"snippet": "y = torch.nn.functional.mish(x)"})
    elif fam == "mindspore":
        leaky = Fix("code", f"replace Mish with LeakyReLU(alpha={slope:g})",
                    {"snippet": f"act = mindspore.nn.LeakyReLU(alpha={slope:g})  # instead of Mish"})
        one_op = "use mindspore.ops.mish so it runs as one kernel"
        native_fix = Fix("code", "call Mish as one op", {"snippet": "y = mindspore.ops.mish(x)"})
    else:
        leaky = _onnx_rewrite("mish-to-leakyrelu", f"replace Mish with LeakyRelu(negative_slope={slope:g})",
                              f" --param mish-to-leakyrelu.alpha={slope:g} --accept mish-to-leakyrelu",
                              {"params": {"alpha": slope}, "approximate": True})
        one_op = ("export it as one op (ONNX opset >= 18 keeps Mish as one node; then check that the OM shows a "
                  "single Mish op)")
        native_fix = Fix("code", "keep Mish as one op (native kernel)",
                         {"snippet": "torch.onnx.export(model, sample, 'model.onnx', opset_version=18)  "
                                     "# Mish stays one node -> one ATC Mish op"})
    head = f"Mish runs as {n} decomposed chain(s) of {k} ops {where}"
    if native:
        return _Advice(f"{head}. {native_why}: {one_op}, with no accuracy cost. Only if that is not possible, "
                       f"replace it with LeakyRelu(negative_slope={slope:g}); {caveat}", native_fix, "native")
    if native is None:
        since = native_since(ctx, "Mish")
        when = f"on CANN {since} or later" if since else "if the run's kernels have a native Mish"
        older = "on an older release" if since else "otherwise"
        return _Advice(f"{head}. {native_why}: {when} {one_op} (no accuracy cost); {older} replace Mish with "
                       f"LeakyRelu(negative_slope={slope:g}), one op instead of {k}. {caveat}", leaky,
                       "native_assumed")
    upgrade = (" Upgrading to a release whose op set has the native kernel, then running Mish as one op, avoids "
               "the accuracy cost." if "predates" in native_why else "")
    return _Advice(f"{head}. {native_why}. Replace Mish with LeakyRelu(negative_slope={slope:g}): one op instead of "
                   f"{k}. {caveat}{upgrade}", leaky, "replacement")


def _swish_advice(ctx: AnalysisContext, pat: Mapping[str, Any], n: int, where: str, native: bool | None,
                  native_why: str) -> _Advice:
    fam = family(ctx)
    if fam == "torch":
        fuse = Fix("code", "call SiLU as one op", {"snippet": "y = torch.nn.functional.silu(x)  # aclnnSilu"})
    elif fam == "mindspore":
        fuse = Fix("code", "call SiLU as one op", {"snippet": "y = mindspore.ops.silu(x)"})
    else:
        fuse = _onnx_rewrite("swish-fuse", "fuse Sigmoid+Mul into Swish")
    head = f"Swish/SiLU runs as {n} Sigmoid+Mul chain(s) {where}"
    if native:
        return _Advice(f"{head}. {native_why}: run it as one Swish op.", fuse, "fuse")
    if native is None:
        since = native_since(ctx, "Swish")
        when = f"on CANN {since} or later" if since else "if the run's kernels have a native Swish"
        return _Advice(f"{head}. {native_why}: {when} run it as one Swish op; otherwise keep it.", fuse,
                       "native_assumed")
    replacement = str(pat.get("replacement") or "")
    rep_pat = next((p for p in ctx.rules["patterns"].values() if p["native_op"] == replacement), None)
    rep_native, rep_why = (native_kernel_for_run(ctx, replacement, rep_pat["native_socs"], detected_soc(ctx))
                           if rep_pat is not None else (False, ""))
    if rep_native is False and "predates" not in rep_why:  # the chip's kernels lack it, not just unchecked
        return _Advice(f"{head}: {native_why}, and no native {replacement or 'replacement'} either: keep it.",
                       None, "keep")
    snippet = ("model.act = torch.nn.Hardswish()  # instead of torch.nn.SiLU(); fine-tune" if fam == "torch" else
               f"# replace Sigmoid+Mul with one {replacement} op, then fine-tune")
    return _Advice(f"{head}: {native_why}. Keep it, or replace it with {replacement} and fine-tune: a different "
                   "function.", Fix("code", f"replace SiLU with {replacement} (accuracy trade-off, fine-tune)",
                                    {"snippet": snippet}), "replacement")


def _advice(ctx: AnalysisContext, pid: str, pat: Mapping[str, Any], occ: list[Occurrence], soc: str | None,
            native: bool | None, native_why: str) -> _Advice:
    where = f"on {soc}" if soc else "(SoC not detected)"
    n = len(occ)
    fam = family(ctx)
    if pid == "mish":
        return _mish_advice(ctx, occ, where, native, native_why)
    if pid == "swish":
        return _swish_advice(ctx, pat, n, where, native, native_why)
    if pid == "gelu":
        if fam in ("torch", "mindspore"):
            call = "torch.nn.functional.gelu (approximate='tanh' for the tanh form)" if fam == "torch" else \
                "mindspore.ops.gelu"
            return _Advice(f"GELU runs as {n} decomposed chain(s). Call {call} so it runs as one Gelu kernel.",
                           Fix("code", "call GELU as one op", {"snippet": f"y = {call.split(' ')[0]}(x)"}), "fuse")
        tanh = any(o.form.startswith("tanh") for o in occ)
        return _Advice(f"GELU runs as {n} decomposed chain(s). Fuse it into one Gelu op (kernel on every Ascend "
                       "product): `advisor fix --apply gelu-fuse`, or export with ONNX opset >= 20 (Gelu)."
                       + (" For the tanh form ATC's GeluFusionPass should do this: keep it on (not 'off' in "
                          "--fusion_switch_file) and the input shapes static." if tanh else ""),
                       _onnx_rewrite("gelu-fuse", "fuse the GELU chain into one Gelu op"), "fuse")
    if pid == "hardswish":
        if fam in ("torch", "mindspore"):
            if native is False:
                return _Advice(f"HardSwish runs as {n} decomposed chain(s) {where}: {native_why}: keep it.", None,
                               "keep")
            call = "torch.nn.Hardswish" if fam == "torch" else "mindspore.ops.hardswish"
            return _Advice(f"HardSwish runs as {n} decomposed chain(s). Call {call} so it runs as one kernel.",
                           Fix("code", "call HardSwish as one op", {"snippet": f"act = {call}"}), "export")
        return _Advice(f"HardSwish runs as {n} decomposed chain(s). Export with ONNX opset >= 14 so the model "
                       "carries one HardSwish op.",
                       Fix("code", "export with ONNX opset >= 14 (HardSwish op)",
                           {"snippet": "torch.onnx.export(model, sample, 'model.onnx', opset_version=14)"}), "export")
    if pid == "layernorm":
        if fam in ("torch", "mindspore"):
            call = "torch.nn.LayerNorm / torch.nn.functional.layer_norm" if fam == "torch" else "mindspore.nn.LayerNorm"
            return _Advice(f"LayerNorm runs as {n} decomposed chain(s). Use {call} so it runs as one LayerNorm "
                           "kernel.", Fix("code", "use the framework's LayerNorm", {"snippet": call}), "export")
        return _Advice(f"LayerNorm runs as {n} decomposed chain(s). Export with ONNX opset >= 17 so the model carries "
                       "LayerNormalization, or keep the chain fusable by LayerNormONNXFusionPass / "
                       "LayerNormFusionPass (static shapes, normalization over the last axis, keep_dims=true).",
                       Fix("code", "export with ONNX opset >= 17 (LayerNormalization)",
                           {"snippet": "torch.onnx.export(model, sample, 'model.onnx', opset_version=17)"}), "export")
    # a pattern added in a user's rules file
    return _Advice(f"{pat['function']} runs as {n} decomposed chain(s); use the native {pat['native_op']} op"
                   + (f" {where}" if soc else "") + ".",
                   Fix("code", f"use the native {pat['native_op']} op", {"native_op": pat["native_op"]}), "custom")


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [MishLeakyReluKB]
