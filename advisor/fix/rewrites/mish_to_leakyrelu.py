"""mish-to-leakyrelu: replace Mish (native or decomposed) with LeakyRelu.

What it does: finds ``Mul(x, Tanh(Softplus(x)))``, ``Mul(x, Tanh(Log(Add(Exp(x), 1))))`` and a native ``Mish``
node, and puts one ``LeakyRelu(x, alpha)`` in their place.

Why: SoCs whose vector unit has no Mish kernel (SS928, 310P, 310B) run a decomposed Mish as three to five
vector ops after every convolution; in the SS928 profiling guide, replacing Mish with LeakyRelu cut execution
from 23.3 ms to 14.2 ms (DOMAIN.md 6.1).

Numerics: NOT preserving — LeakyRelu is a different function (Mish(-1) = -0.30, LeakyRelu_0.1(-1) = -0.1, and
Mish(x) < x for small positive x). The model needs fine-tuning with the new activation; ``advisor fix`` applies it
only with ``--accept-approx`` and reports the output difference.
"""

from __future__ import annotations

from collections.abc import Mapping

from onnx import ModelProto, NodeProto

from advisor.fix.onnx_graph import GraphEditor, GraphIndex, close, copy_model, describe, is_op, label, make_node
from advisor.fix.rewrites.base import Param, Rewrite, RewriteResult


class MishToLeakyRelu(Rewrite):
    name = "mish-to-leakyrelu"
    description = "Mish (Softplus->Tanh->Mul, Exp->Add->Log->Tanh->Mul, or native Mish) -> LeakyRelu(alpha)"
    numerics_preserving = False
    params = (Param("alpha", float, 0.1, "negative slope of the LeakyRelu (0.1 is the darknet/YOLO leaky slope)"),)

    def apply(self, model: ModelProto, params: Mapping[str, object]) -> RewriteResult:
        alpha = float(self.param(params, "alpha"))  # type: ignore[arg-type]
        model = copy_model(model)
        index = GraphIndex(model)
        editor = GraphEditor(index)
        matches: list[str] = []
        for node in index.nodes:
            chain = _match(index, node)
            if chain is None or not editor.free(chain):
                continue
            x, last = chain[0].input[0], chain[-1]
            doc = f"{self.tag()}: replaced Mish {describe(chain)} with LeakyRelu(alpha={alpha:g}); approximation"
            new = make_node("LeakyRelu", [x], [last.output[0]], editor.unique_name(f"{label(last)}/leakyrelu"), doc,
                            alpha=alpha)
            editor.replace(chain, [new], at=last)
            matches.append(label(last))
        notes = []
        if matches:
            editor.apply()
            notes.append(f"LeakyRelu(alpha={alpha:g}) is not Mish: fine-tune the model with the new activation")
        return RewriteResult(model, matches, notes)


def _match(index: GraphIndex, node: NodeProto) -> list[NodeProto] | None:
    """The nodes of one Mish starting at ``node`` (first node reads x, last node writes the result)."""
    if is_op(node, "Mish"):
        return [node]
    if is_op(node, "Softplus"):
        x = node.input[0]
        head = [node]
        tanh_in = node.output[0]
    elif is_op(node, "Exp"):
        x = node.input[0]
        add = index.sole_consumer(node.output[0])
        if add is None or not is_op(add, "Add"):
            return None
        one = index.scalar_operand(add, rank_of=x)
        if one is None or one[1] != node.output[0] or not close(one[0], 1.0):
            return None
        log = index.sole_consumer(add.output[0])
        if log is None or not is_op(log, "Log"):
            return None
        head = [node, add, log]
        tanh_in = log.output[0]
    else:
        return None
    tanh = index.sole_consumer(tanh_in)
    if tanh is None or not is_op(tanh, "Tanh"):
        return None
    mul = index.sole_consumer(tanh.output[0])
    if mul is None or not index.mul_of(mul, x, tanh.output[0]):
        return None
    return [*head, tanh, mul]


REWRITE = MishToLeakyRelu()
