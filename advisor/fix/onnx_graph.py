"""Pattern-matching helpers over an ONNX main graph: who produces and who consumes each tensor,
constants through initializers and ``Constant`` nodes, and a small editor that rewires the graph.

Rewrites only ever touch the main graph. Tensors that a subgraph (If/Loop/Scan body) reads from the
outer scope, and graph outputs, are treated as having consumers we cannot see, so a pattern never
removes or renames them.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

import numpy as np
import onnx
from onnx import AttributeProto, GraphProto, ModelProto, NodeProto, TensorProto, numpy_helper

DEFAULT_DOMAINS = ("", "ai.onnx")
MS_DOMAIN = "com.microsoft"


def copy_model(model: ModelProto) -> ModelProto:
    """A deep copy, so a rewrite never mutates the model it was given."""
    out = ModelProto()
    out.CopyFrom(model)
    return out


def opset_version(model: ModelProto, domain: str = "") -> int | None:
    """The imported opset version of ``domain`` ('' and 'ai.onnx' are the same default domain)."""
    wanted = DEFAULT_DOMAINS if domain in DEFAULT_DOMAINS else (domain,)
    for imp in model.opset_import:
        if imp.domain in wanted:
            return int(imp.version)
    return None


def ensure_opset(model: ModelProto, domain: str, version: int) -> None:
    """Import ``domain`` at ``version`` unless it is imported already."""
    if opset_version(model, domain) is None:
        model.opset_import.append(onnx.helper.make_opsetid(domain, version))


def is_op(node: NodeProto, op_type: str, domain: str = "") -> bool:
    """``node`` is ``op_type`` of ``domain`` (the default domain accepts '' and 'ai.onnx')."""
    if node.op_type != op_type:
        return False
    if domain in DEFAULT_DOMAINS:
        return node.domain in DEFAULT_DOMAINS
    return node.domain == domain


def attr(node: NodeProto, name: str, default: object = None) -> object:
    """An attribute's Python value, or ``default`` when absent."""
    for a in node.attribute:
        if a.name == name:
            return onnx.helper.get_attribute_value(a)
    return default


def _subgraphs(node: NodeProto) -> Iterator[GraphProto]:
    for a in node.attribute:
        if a.type == AttributeProto.GRAPH:
            yield a.g
        elif a.type == AttributeProto.GRAPHS:
            yield from a.graphs


def outer_scope_refs(graph: GraphProto) -> set[str]:
    """Names read inside the subgraphs of ``graph``'s nodes (a superset of the true outer-scope reads)."""
    refs: set[str] = set()
    for node in graph.node:
        for sub in _subgraphs(node):
            for inner in sub.node:
                refs.update(i for i in inner.input if i)
            refs.update(o.name for o in sub.output)
            refs |= outer_scope_refs(sub)
    return refs


def close(value: float | None, target: float, rel: float = 1e-3) -> bool:
    """``value`` equals ``target`` within the precision of fp16 constants exported by frameworks."""
    return value is not None and math.isclose(value, target, rel_tol=rel, abs_tol=1e-7)


@dataclass
class GraphIndex:
    """Producer/consumer maps and constant lookup for one model's main graph (a snapshot: rebuild after edits)."""

    model: ModelProto
    producer: dict[str, int] = field(default_factory=dict)
    consumers: dict[str, list[int]] = field(default_factory=dict)
    initializers: dict[str, TensorProto] = field(default_factory=dict)
    graph_inputs: set[str] = field(default_factory=set)
    graph_outputs: set[str] = field(default_factory=set)
    outer_refs: set[str] = field(default_factory=set)
    value_types: dict[str, onnx.TypeProto] = field(default_factory=dict)

    def __post_init__(self) -> None:
        g = self.model.graph
        self._nodes = list(g.node)  # one wrapper per node, so ``is`` compares nodes within this snapshot
        for i, node in enumerate(self._nodes):
            for o in node.output:
                if o:
                    self.producer[o] = i
            for name in node.input:
                if name:
                    self.consumers.setdefault(name, []).append(i)
        self.initializers = {t.name: t for t in g.initializer}
        self.graph_inputs = {v.name for v in g.input}
        self.graph_outputs = {v.name for v in g.output}
        self.outer_refs = outer_scope_refs(g)
        self.value_types = _inferred_types(self.model)

    @property
    def nodes(self) -> list[NodeProto]:
        return list(self._nodes)

    def node(self, index: int) -> NodeProto:
        return self._nodes[index]

    def producer_of(self, name: str) -> NodeProto | None:
        i = self.producer.get(name)
        return None if i is None else self._nodes[i]

    def consumers_of(self, name: str) -> list[NodeProto]:
        return [self._nodes[i] for i in self.consumers.get(name, [])]

    def is_internal(self, name: str) -> bool:
        """Only main-graph nodes read ``name``: it is not a graph output nor read by a subgraph."""
        return name not in self.graph_outputs and name not in self.outer_refs

    def sole_consumer(self, name: str) -> NodeProto | None:
        """The one node reading ``name`` when nothing else (graph output, subgraph, other node) does."""
        users = self.consumers.get(name, [])
        if len(users) != 1 or not self.is_internal(name):
            return None
        return self._nodes[users[0]]

    def index_of(self, node: NodeProto) -> int:
        """Position of ``node`` in the main graph (nodes are matched by their first output)."""
        out = next((o for o in node.output if o), None)
        if out is not None and out in self.producer:
            return self.producer[out]
        for i, n in enumerate(self._nodes):
            if n is node:
                return i
        raise KeyError(node.name)

    # --- constants -------------------------------------------------------------------------------

    def constant(self, name: str) -> np.ndarray | None:
        """The value of ``name`` when it is an initializer or a Constant output.

        From IR 4 on, an initializer that is also a graph input is only a default the caller may override, so it is
        not a constant; before IR 4 every initializer had to be listed as an input, and it is.
        """
        if name in self.initializers and (name not in self.graph_inputs or self.model.ir_version < 4):
            return numpy_helper.to_array(self.initializers[name])
        node = self.producer_of(name)
        if node is None or not is_op(node, "Constant"):
            return None
        return constant_node_value(node)

    def scalar(self, name: str) -> float | None:
        """A one-element numeric constant as a float, else None."""
        value = self.constant(name)
        if value is None or value.size != 1 or value.dtype.kind not in "fiub":
            return None
        return float(value.reshape(-1)[0])

    def scalar_operand(self, node: NodeProto, rank_of: str | None = None) -> tuple[float, str] | None:
        """For a binary op with one scalar-constant operand: (value, the other input's name).

        When ``rank_of`` is given, the constant must not broadcast the result to a higher rank than that tensor.
        """
        if len(node.input) != 2:
            return None
        for k in (0, 1):
            value = self.scalar(node.input[k])
            if value is None:
                continue
            const = self.constant(node.input[k])
            other = node.input[1 - k]
            limit = self.rank(rank_of or other)
            if const is not None and const.ndim > 1 and (limit is None or const.ndim > limit):
                return None
            return value, other
        return None

    def other_input(self, node: NodeProto, name: str) -> str | None:
        """The other operand of a binary op, one of whose inputs is ``name``."""
        if len(node.input) != 2:
            return None
        if node.input[0] == name:
            return node.input[1]
        if node.input[1] == name:
            return node.input[0]
        return None

    def mul_of(self, node: NodeProto, x: str, y: str) -> bool:
        """``node`` is Mul(x, y) in either order — the check that a Mul's other operand is the very same x."""
        return is_op(node, "Mul") and sorted(node.input) == sorted([x, y])

    # --- types and shapes ------------------------------------------------------------------------

    def elem_type(self, name: str) -> int | None:
        """The element type of ``name`` (TensorProto.* code), from inputs, initializers or shape inference."""
        if name in self.initializers:
            return int(self.initializers[name].data_type)
        t = self.value_types.get(name)
        if t is not None and t.HasField("tensor_type") and t.tensor_type.elem_type:
            return int(t.tensor_type.elem_type)
        return None

    def shape(self, name: str) -> list[int | None] | None:
        """The static shape of ``name`` (None for symbolic dims), or None when the rank is unknown."""
        if name in self.initializers:
            return list(self.initializers[name].dims)
        t = self.value_types.get(name)
        if t is None or not t.HasField("tensor_type") or not t.tensor_type.HasField("shape"):
            return None
        return [d.dim_value if d.HasField("dim_value") else None for d in t.tensor_type.shape.dim]

    def rank(self, name: str) -> int | None:
        shape = self.shape(name)
        return None if shape is None else len(shape)


def constant_node_value(node: NodeProto) -> np.ndarray | None:
    """The value of a ``Constant`` node whatever attribute carries it."""
    for a in node.attribute:
        if a.name == "value":
            return numpy_helper.to_array(a.t)
        if a.name == "value_float":
            return np.array(a.f, dtype=np.float32)
        if a.name == "value_floats":
            return np.array(list(a.floats), dtype=np.float32)
        if a.name == "value_int":
            return np.array(a.i, dtype=np.int64)
        if a.name == "value_ints":
            return np.array(list(a.ints), dtype=np.int64)
    return None


def _inferred_types(model: ModelProto) -> dict[str, onnx.TypeProto]:
    """Types of graph inputs/outputs and of every tensor shape inference can type (best effort)."""
    try:
        inferred = onnx.shape_inference.infer_shapes(model, check_type=False, strict_mode=False)
    except Exception:  # noqa: BLE001 - shape inference is a hint here, never a requirement
        inferred = model
    out: dict[str, onnx.TypeProto] = {}
    for vi in list(inferred.graph.value_info) + list(inferred.graph.input) + list(inferred.graph.output):
        out[vi.name] = vi.type
    return out


class GraphEditor:
    """Collects node removals, insertions and input renames, then rebuilds the main graph in one pass.

    New nodes are inserted where the node they replace stood, so the node list stays topologically sorted
    whenever the replacement reads only tensors that the replaced subgraph read.
    """

    def __init__(self, index: GraphIndex) -> None:
        self.index = index
        self.removed: set[int] = set()
        self.inserted: dict[int, list[NodeProto]] = {}
        self.renames: dict[str, str] = {}
        self.claimed: set[int] = set()
        self._names = {n.name for n in index.model.graph.node if n.name}
        self._dropped_inputs: set[str] = set()

    def free(self, nodes: Iterable[NodeProto]) -> bool:
        """None of ``nodes`` is already part of another match (matches must not overlap)."""
        return not any(self.index.index_of(n) in self.claimed for n in nodes)

    def unique_name(self, base: str) -> str:
        """``base``, or ``base_2``… when a node of that name exists."""
        name, k = base, 2
        while name in self._names:
            name, k = f"{base}_{k}", k + 1
        self._names.add(name)
        return name

    def replace(self, nodes: Iterable[NodeProto], new_nodes: Iterable[NodeProto], at: NodeProto) -> None:
        """Remove ``nodes`` and put ``new_nodes`` where ``at`` stood."""
        idx = [self.index.index_of(n) for n in nodes]
        self.claimed.update(idx)
        self.removed.update(idx)
        for i in idx:
            self._dropped_inputs.update(x for x in self.index.node(i).input if x)
        self.inserted.setdefault(self.index.index_of(at), []).extend(new_nodes)

    def remove(self, nodes: list[NodeProto], renames: dict[str, str]) -> None:
        """Remove ``nodes``; every reader of a key of ``renames`` reads its value instead."""
        self.replace(nodes, [], at=nodes[0])
        self.renames.update(renames)

    def claim(self, nodes: Iterable[NodeProto]) -> None:
        """Mark ``nodes`` as used by a match without removing them."""
        self.claimed.update(self.index.index_of(n) for n in nodes)

    def apply(self) -> ModelProto:
        """The edited model (the index's model is rebuilt in place) with dead constants pruned."""
        model = self.index.model
        g = model.graph
        rebuilt: list[NodeProto] = []
        for i, node in enumerate(g.node):
            if i not in self.removed:
                kept = NodeProto()
                kept.CopyFrom(node)
                rebuilt.append(kept)
            rebuilt.extend(self.inserted.get(i, []))
        for node in rebuilt:
            for k, name in enumerate(node.input):
                target = self._resolve(name)
                if target != name:
                    node.input[k] = target
        del g.node[:]
        g.node.extend(rebuilt)
        prune_dead(model, self._dropped_inputs)
        prune_value_info(model)
        return model

    def _resolve(self, name: str) -> str:
        seen = set()
        while name in self.renames and name not in seen:
            seen.add(name)
            name = self.renames[name]
        return name


def prune_dead(model: ModelProto, candidates: set[str]) -> None:
    """Drop Constant nodes and initializers among ``candidates`` that nothing reads any more.

    Only tensors the removed nodes read are candidates, so constants unrelated to a rewrite stay as they were.
    """
    g = model.graph
    while True:
        used = {i for n in g.node for i in n.input if i} | {o.name for o in g.output} | outer_scope_refs(g)
        dead = {n.output[0] for n in g.node
                if is_op(n, "Constant") and n.output[0] in candidates and n.output[0] not in used}
        if not dead:
            break
        keep = [_copy(n) for n in g.node if not (is_op(n, "Constant") and n.output[0] in dead)]
        del g.node[:]
        g.node.extend(keep)
    used = {i for n in g.node for i in n.input if i} | {o.name for o in g.output} | outer_scope_refs(g)
    dead = {t.name for t in g.initializer if t.name in candidates and t.name not in used}
    if dead:
        keep_init = [t for t in g.initializer if t.name not in dead]
        del g.initializer[:]
        g.initializer.extend(keep_init)
        keep_inputs = [v for v in g.input if v.name not in dead]  # IR < 4 lists initializers as inputs
        del g.input[:]
        g.input.extend(keep_inputs)


def _copy(node: NodeProto) -> NodeProto:
    out = NodeProto()
    out.CopyFrom(node)
    return out


def prune_value_info(model: ModelProto) -> None:
    """Drop value_info of tensors no node produces any more (stale after a rewrite)."""
    g = model.graph
    produced = {o for n in g.node for o in n.output}
    keep = [v for v in g.value_info if v.name in produced]
    if len(keep) != len(g.value_info):
        del g.value_info[:]
        g.value_info.extend(keep)


def add_initializers(model: ModelProto, tensors: Iterable[TensorProto]) -> None:
    """Add initializers; before IR 4 each must also be declared as a graph input."""
    for t in tensors:
        model.graph.initializer.append(t)
        if model.ir_version < 4:
            model.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))


def make_node(op_type: str, inputs: list[str], outputs: list[str], name: str, doc: str, domain: str = "",
              **attrs: object) -> NodeProto:
    """A node carrying a doc_string that says what it replaced (traceability in Netron and dumps)."""
    return onnx.helper.make_node(op_type, inputs, outputs, name=name, doc_string=doc, domain=domain or None, **attrs)


def describe(nodes: Iterable[NodeProto]) -> str:
    """``Softplus 'a' -> Tanh 'b' -> Mul 'c'`` for doc strings and notes."""
    return " -> ".join(f"{n.op_type} '{n.name or n.output[0]}'" for n in nodes)


def label(node: NodeProto) -> str:
    """A node's name, or its first output when the exporter left it unnamed."""
    return node.name or (node.output[0] if node.output else node.op_type)
