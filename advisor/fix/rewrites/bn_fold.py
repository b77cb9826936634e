"""bn-fold: fold an inference BatchNormalization into the Conv before it.

What it does: for ``Conv(X, W[, B]) -> BatchNormalization(scale, bias, mean, var, epsilon)`` where the Conv
output feeds only the BatchNormalization and every parameter is a constant, writes one Conv with
``W' = W * s`` (per output channel) and ``B' = (B - mean) * s + bias``, ``s = scale / sqrt(var + epsilon)``.

Why: the BatchNormalization is a full elementwise pass over the Conv output; folded, it costs nothing.
ATC does the same with ConvBatchnormFusionPass when the pass is on (DOMAIN.md 2.3); folding in the ONNX file
makes it independent of the fusion switch and of other runtimes.

Numerics: preserving — the same affine map, computed once in float64 and stored in the weight's dtype
(differences are float rounding). Skipped: training-mode BN (more than one output), ConvTranspose (its weight
layout is [C_in, C_out/group, ...]), a Conv output read by anything else, non-constant parameters.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
from onnx import ModelProto, NodeProto, TensorProto, numpy_helper

from advisor.fix.onnx_graph import (
    GraphEditor,
    GraphIndex,
    add_initializers,
    attr,
    copy_model,
    describe,
    is_op,
    label,
    make_node,
)
from advisor.fix.rewrites.base import Rewrite, RewriteResult


class BnFold(Rewrite):
    name = "bn-fold"
    description = "Conv -> BatchNormalization (inference) folded into the Conv weights and bias"
    numerics_preserving = True

    def apply(self, model: ModelProto, params: Mapping[str, object]) -> RewriteResult:
        model = copy_model(model)
        index = GraphIndex(model)
        editor = GraphEditor(index)
        matches: list[str] = []
        notes: list[str] = []
        new_inits: list[TensorProto] = []
        taken = set(index.initializers) | set(index.producer) | index.graph_inputs
        for bn in index.nodes:
            if not is_op(bn, "BatchNormalization"):
                continue
            conv = index.producer_of(bn.input[0])
            if conv is None or not is_op(conv, "Conv") or not editor.free([conv, bn]):
                continue
            why = _unfoldable(index, conv, bn)
            if why:
                notes.append(f"{label(bn)}: not folded ({why})")
                continue
            w = index.constant(conv.input[1])
            b = index.constant(conv.input[2]) if len(conv.input) > 2 and conv.input[2] else None
            scale, beta, mean, var = (index.constant(n) for n in bn.input[1:5])
            eps = float(attr(bn, "epsilon", 1e-5))  # type: ignore[arg-type]
            w2, b2 = fold(w, b, scale, beta, mean, var, eps)  # type: ignore[arg-type]
            base = label(conv)
            w_name = _fresh(f"{conv.input[1]}/bnfold", taken)
            b_name = _fresh(f"{base}/bnfold/bias", taken)
            new_inits += [numpy_helper.from_array(w2, w_name), numpy_helper.from_array(b2, b_name)]
            doc = f"{self.tag()}: {describe([conv, bn])} folded into one Conv (weights {w_name}, bias {b_name})"
            keep = {a.name: a for a in conv.attribute}
            new = make_node("Conv", [conv.input[0], w_name, b_name], [bn.output[0]],
                            editor.unique_name(f"{base}/bnfold"), doc)
            new.attribute.extend(keep.values())
            editor.replace([conv, bn], [new], at=bn)
            matches.append(label(bn))
        if matches:
            add_initializers(model, new_inits)
            editor.apply()
        return RewriteResult(model, matches, notes)


def fold(w: np.ndarray, b: np.ndarray | None, scale: np.ndarray, beta: np.ndarray, mean: np.ndarray,
         var: np.ndarray, eps: float) -> tuple[np.ndarray, np.ndarray]:
    """Conv weight and bias with the BN affine map folded in, in the weight's dtype."""
    s = scale.astype(np.float64) / np.sqrt(var.astype(np.float64) + eps)
    w2 = w.astype(np.float64) * s.reshape((-1,) + (1,) * (w.ndim - 1))
    b0 = np.zeros_like(s) if b is None else b.astype(np.float64)
    b2 = (b0 - mean.astype(np.float64)) * s + beta.astype(np.float64)
    return w2.astype(w.dtype), b2.astype(w.dtype)


def _unfoldable(index: GraphIndex, conv: NodeProto, bn: NodeProto) -> str | None:
    """Why this Conv/BN pair cannot be folded, or None."""
    if len([o for o in bn.output if o]) != 1 or attr(bn, "training_mode", 0):
        return "training-mode BatchNormalization"
    if index.sole_consumer(conv.output[0]) is not bn:
        return "the Conv output has other consumers"
    if len(bn.input) < 5:
        return "BatchNormalization has fewer than 5 inputs"
    w = index.constant(conv.input[1])
    if w is None or w.dtype.kind != "f":
        return "Conv weight is not a float constant"
    if len(conv.input) > 2 and conv.input[2] and index.constant(conv.input[2]) is None:
        return "Conv bias is not a constant"
    values = [index.constant(n) for n in bn.input[1:5]]
    if any(v is None for v in values):
        return "BatchNormalization parameters are not constants"
    c_out = w.shape[0]
    if any(v.size != c_out for v in values):  # type: ignore[union-attr]
        return f"BatchNormalization has {values[0].size} channels, Conv has {c_out}"  # type: ignore[union-attr]
    return None


def _fresh(name: str, taken: set[str]) -> str:
    out, k = name, 2
    while out in taken:
        out, k = f"{name}_{k}", k + 1
    taken.add(out)
    return out


REWRITE = BnFold()
