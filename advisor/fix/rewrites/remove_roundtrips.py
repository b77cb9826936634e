"""remove-roundtrips: drop data movement that ends where it started.

What it does, on the main graph, repeated until nothing more matches:

- ``Cast(to=B) -> Cast(to=A)`` on an A tensor, when every A value is exactly representable in B (e.g.
  fp32->fp64->fp32, fp16->fp32->fp16, int32->int64->int32); a ``Cast`` to the type its input already has;
- ``Transpose(p1) -> Transpose(p2)`` whose permutations compose to the identity; a ``Transpose`` with the
  identity permutation;
- ``Reshape(x, s1) -> Reshape(., s2)`` collapsed to ``Reshape(x, s2)`` (when ``s2`` is a constant that does not
  copy dims with 0), and a ``Reshape`` whose static output shape equals its static input shape, removed.

The first node of a pair stays when something else also reads its output. When the pair's result is a graph
output, an ``Identity`` named after the removed node keeps the output name.

Why: each of these ops copies or converts a whole tensor (on Ascend, a Transpose or Cast is a vector op, often
with TransData around it) and produces nothing new.

Numerics: preserving — exactly (narrowing round trips such as fp32->fp16->fp32 are lossy and never removed).
"""

from __future__ import annotations

from collections.abc import Mapping

from onnx import ModelProto, NodeProto
from onnx import TensorProto as T

from advisor.fix.onnx_graph import GraphEditor, GraphIndex, attr, copy_model, describe, is_op, label, make_node
from advisor.fix.rewrites.base import Rewrite, RewriteResult

MAX_PASSES = 10

# A -> types that hold every value of A exactly (so A -> B -> A is the identity)
_WIDER: dict[int, set[int]] = {
    T.BOOL: {T.INT8, T.UINT8, T.INT16, T.UINT16, T.INT32, T.UINT32, T.INT64, T.UINT64, T.FLOAT16, T.BFLOAT16,
             T.FLOAT, T.DOUBLE},
    T.INT8: {T.INT16, T.INT32, T.INT64, T.FLOAT16, T.FLOAT, T.DOUBLE},
    T.UINT8: {T.INT16, T.UINT16, T.INT32, T.UINT32, T.INT64, T.UINT64, T.FLOAT16, T.FLOAT, T.DOUBLE},
    T.INT16: {T.INT32, T.INT64, T.FLOAT, T.DOUBLE},
    T.UINT16: {T.INT32, T.UINT32, T.INT64, T.UINT64, T.FLOAT, T.DOUBLE},
    T.INT32: {T.INT64, T.DOUBLE},
    T.UINT32: {T.INT64, T.UINT64, T.DOUBLE},
    T.FLOAT16: {T.FLOAT, T.DOUBLE},
    T.BFLOAT16: {T.FLOAT, T.DOUBLE},
    T.FLOAT: {T.DOUBLE},
}


def lossless(a: int, b: int) -> bool:
    """Casting A to B and back returns every A value unchanged."""
    return a == b or b in _WIDER.get(a, set())


class RemoveRoundtrips(Rewrite):
    name = "remove-roundtrips"
    description = "lossless Cast A->B->A, Transpose pairs composing to identity, Reshape chains and no-op Reshapes"
    numerics_preserving = True

    def apply(self, model: ModelProto, params: Mapping[str, object]) -> RewriteResult:
        model = copy_model(model)
        matches: list[str] = []
        for _ in range(MAX_PASSES):
            found = self._pass(model)
            if not found:
                break
            matches += found
        return RewriteResult(model, matches)

    def _pass(self, model: ModelProto) -> list[str]:
        index = GraphIndex(model)
        editor = GraphEditor(index)
        matches: list[str] = []
        for node in index.nodes:
            if not editor.free([node]):
                continue
            if is_op(node, "Cast"):
                done = self._cast(index, editor, node)
            elif is_op(node, "Transpose"):
                done = self._transpose(index, editor, node)
            elif is_op(node, "Reshape"):
                done = self._reshape(index, editor, node)
            else:
                done = False
            if done:
                matches.append(label(node))
        if matches:
            editor.apply()
        return matches

    # --- each pattern reads the last node of the round trip ----------------------------------------

    def _cast(self, index: GraphIndex, editor: GraphEditor, c2: NodeProto) -> bool:
        src = c2.input[0]
        to = attr(c2, "to")
        c1 = index.producer_of(src)
        if c1 is not None and is_op(c1, "Cast") and editor.free([c1]):
            a = index.elem_type(c1.input[0])
            b = attr(c1, "to")
            if a is not None and a == to and lossless(a, int(b)):  # type: ignore[arg-type]
                self._bypass(index, editor, c1, c2, f"lossless Cast round trip {_tname(a)}->{_tname(b)}->{_tname(a)}")
                return True
        if index.elem_type(src) is not None and index.elem_type(src) == to:
            self._bypass(index, editor, None, c2, f"Cast to {_tname(to)} of a {_tname(to)} tensor")
            return True
        return False

    def _transpose(self, index: GraphIndex, editor: GraphEditor, t2: NodeProto) -> bool:
        rank = index.rank(t2.input[0])
        p2 = _perm(t2, rank)
        if p2 is None:
            return False
        t1 = index.producer_of(t2.input[0])
        if t1 is not None and is_op(t1, "Transpose") and editor.free([t1]):
            p1 = _perm(t1, len(p2))
            # output[i] = input[p1[p2[i]]]: the pair is the identity when p1[p2[i]] == i
            if p1 is not None and len(p1) == len(p2) and all(p1[p2[i]] == i for i in range(len(p2))):
                self._bypass(index, editor, t1, t2, f"Transpose pair perm={p1} then perm={p2} (identity)")
                return True
        if p2 == list(range(len(p2))):
            self._bypass(index, editor, None, t2, f"Transpose with identity perm={p2}")
            return True
        return False

    def _reshape(self, index: GraphIndex, editor: GraphEditor, r2: NodeProto) -> bool:
        out_shape = index.shape(r2.output[0])
        r1 = index.producer_of(r2.input[0])
        chained = r1 is not None and is_op(r1, "Reshape") and editor.free([r1])
        x = r1.input[0] if chained else r2.input[0]  # type: ignore[union-attr]
        x_shape = index.shape(x)
        if _static(x_shape) and _static(out_shape) and x_shape == out_shape:
            what = f"Reshape back to the input shape {x_shape}"
            self._bypass(index, editor, r1 if chained else None, r2, what)
            return True
        if not chained:
            return False
        target = index.constant(r2.input[1])
        if target is None or (0 in target.reshape(-1).tolist() and not attr(r2, "allowzero", 0)):
            return False  # a 0 in s2 copies a dim of the intermediate tensor, which x does not have
        nodes = [r1, r2] if index.sole_consumer(r1.output[0]) is r2 else [r2]  # type: ignore[list-item]
        doc = f"{self.tag()}: collapsed {describe([r1, r2])} into one Reshape"  # type: ignore[list-item]
        new = make_node("Reshape", [x, r2.input[1]], [r2.output[0]], editor.unique_name(f"{label(r2)}/collapsed"),
                        doc)
        new.attribute.extend(r2.attribute)
        editor.replace(nodes, [new], at=r2)
        return True

    def _bypass(self, index: GraphIndex, editor: GraphEditor, first: NodeProto | None, last: NodeProto,
                what: str) -> None:
        """Remove ``last`` (and ``first`` when ``last`` is its only reader); readers of ``last`` read the source."""
        head = first if first is not None else last
        src = head.input[0]
        nodes = [last]
        if first is not None and index.sole_consumer(first.output[0]) is last:
            nodes.insert(0, first)
        out = last.output[0]
        if index.is_internal(out):
            editor.remove(nodes, {out: src})
            return
        chain = [first, last] if first is not None else [last]
        doc = f"{self.tag()}: removed {what}: {describe(chain)}"
        ident = make_node("Identity", [src], [out], editor.unique_name(f"{label(last)}/identity"), doc)
        editor.replace(nodes, [ident], at=last)


def _perm(node: NodeProto, rank: int | None) -> list[int] | None:
    """The permutation of a Transpose (absent means reversed dims, which needs the rank)."""
    perm = attr(node, "perm")
    if perm is not None:
        return [int(p) for p in perm]  # type: ignore[union-attr]
    return None if rank is None else list(range(rank))[::-1]


def _static(shape: list[int | None] | None) -> bool:
    return shape is not None and all(isinstance(d, int) and d > 0 for d in shape)


def _tname(code: object) -> str:
    """``float``, ``double``, ``float16``… for notes."""
    try:
        return T.DataType.Name(int(code)).lower()  # type: ignore[call-overload]
    except (TypeError, ValueError):
        return str(code)


REWRITE = RemoveRoundtrips()
