"""swish-fuse: replace ``x * Sigmoid(x)`` (SiLU) and ``x * Sigmoid(beta * x)`` with one op.

What it does: finds ``Mul(x, Sigmoid(x))`` and the scaled form ``Mul(x, Sigmoid(Mul(x, beta)))`` and puts one
op in their place, chosen by what the model's opset offers:

- opset >= 24: ``Swish(alpha=beta)`` — the default ONNX domain has no Swish before opset 24;
- earlier opsets, only with ``--allow-contrib``: ``com.microsoft`` ``QuickGelu(alpha=beta)``, whose definition
  is exactly ``x * sigmoid(alpha * x)`` (so alpha=1 is SiLU); onnxruntime runs it, the ATC parser does not;
- otherwise the graph is left unchanged and the result says no native Swish exists in this opset.

``HardSwish`` is deliberately not used: ``x * relu6(x + 3) / 6`` is a different function (it differs from SiLU
by up to ~0.14 around |x| = 2..3), so it would silently change the model.

Why: two elementwise ops (three when scaled) become one, saving a memory round trip per activation.

Numerics: preserving — the replacement computes the same formula.
"""

from __future__ import annotations

from collections.abc import Mapping

from onnx import ModelProto, NodeProto

from advisor.fix.onnx_graph import (
    MS_DOMAIN,
    GraphEditor,
    GraphIndex,
    copy_model,
    describe,
    ensure_opset,
    is_op,
    label,
    make_node,
    opset_version,
)
from advisor.fix.rewrites.base import Param, Rewrite, RewriteResult

NATIVE_OPSET = 24


class SwishFuse(Rewrite):
    name = "swish-fuse"
    description = "x*Sigmoid(x) / x*Sigmoid(beta*x) -> Swish (opset >= 24) or com.microsoft QuickGelu(alpha=beta)"
    numerics_preserving = True
    params = (Param("allow_contrib", bool, False,
                    "below opset 24, use com.microsoft QuickGelu(alpha=beta) (onnxruntime only)"),)

    def apply(self, model: ModelProto, params: Mapping[str, object]) -> RewriteResult:
        model = copy_model(model)
        opset = opset_version(model) or 1
        contrib = bool(self.param(params, "allow_contrib"))
        index = GraphIndex(model)
        editor = GraphEditor(index)
        found: list[tuple[list[NodeProto], str, float]] = []
        for node in index.nodes:
            if not is_op(node, "Sigmoid"):
                continue
            m = _match(index, node)
            if m is not None and editor.free(m[0]):
                editor.claim(m[0])
                found.append(m)
        if not found:
            return RewriteResult(model, [])
        if opset < NATIVE_OPSET and not contrib:
            return RewriteResult(model, [], [
                f"found {len(found)} x*sigmoid(x) but the default ONNX domain has no Swish in this opset ({opset}; "
                f"Swish needs opset >= {NATIVE_OPSET}; HardSwish is a different function); graph left unchanged. "
                f"--allow-contrib uses {MS_DOMAIN} QuickGelu(alpha=beta), which only onnxruntime runs"])
        editor.claimed.clear()
        matches: list[str] = []
        for chain, x, beta in found:
            last = chain[-1]
            if opset >= NATIVE_OPSET:
                op, domain, what = "Swish", "", f"Swish(alpha={beta:g})"
            else:
                op, domain, what = "QuickGelu", MS_DOMAIN, f"{MS_DOMAIN}.QuickGelu(alpha={beta:g})"
            doc = f"{self.tag()}: replaced {describe(chain)} (x*sigmoid({beta:g}*x)) with {what}"
            new = make_node(op, [x], [last.output[0]], editor.unique_name(f"{label(last)}/swish"), doc, domain,
                            alpha=float(beta))
            editor.replace(chain, [new], at=last)
            matches.append(label(last))
        notes = []
        if opset < NATIVE_OPSET:
            ensure_opset(model, MS_DOMAIN, 1)
            notes.append(f"used {MS_DOMAIN}.QuickGelu (opset {opset} < {NATIVE_OPSET}): onnxruntime runs it, "
                         "the ATC ONNX parser does not")
        editor.apply()
        return RewriteResult(model, matches, notes)


def _match(index: GraphIndex, sig: NodeProto) -> tuple[list[NodeProto], str, float] | None:
    """Sigmoid(x) -> Mul(x, .) or Mul(x, beta) -> Sigmoid -> Mul(x, .): (nodes, x, beta)."""
    s = sig.input[0]
    mul = index.sole_consumer(sig.output[0])
    if mul is None or not is_op(mul, "Mul"):
        return None
    if index.mul_of(mul, s, sig.output[0]):
        return [sig, mul], s, 1.0
    scale = index.producer_of(s)
    if scale is None or not is_op(scale, "Mul") or index.sole_consumer(s) is not sig:
        return None
    op = index.scalar_operand(scale)
    if op is None:
        return None
    beta, x = op
    if not index.mul_of(mul, x, sig.output[0]):
        return None
    return [scale, sig, mul], x, beta


REWRITE = SwishFuse()
