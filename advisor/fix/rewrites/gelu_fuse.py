"""gelu-fuse: replace a decomposed GELU with one fused op.

What it does: finds the erf form ``0.5 * x * (1 + Erf(x / sqrt(2)))`` (Div(sqrt2) or Mul(1/sqrt2) -> Erf ->
Add(1) -> Mul(x) -> Mul(0.5), in any of the three orders exporters use for the two products) and the tanh form
``0.5 * x * (1 + Tanh(sqrt(2/pi) * (x + 0.044715 * x^3)))`` (x^3 as Pow(x, 3) or Mul(x, Mul(x, x))), and puts
one fused op in their place:

- opset >= 20: ``Gelu`` (``approximate="tanh"`` for the tanh form);
- earlier opsets, only with ``--allow-contrib``: ``com.microsoft`` ``Gelu`` (erf) / ``FastGelu`` (tanh), which
  onnxruntime runs but other runtimes (the ATC ONNX parser among them) do not know;
- otherwise the graph is left unchanged and the result says the fused op is not available in this opset.

Why: a decomposed GELU is five to eight elementwise ops, each a round trip through memory; the fused op is one.
On Ascend, ATC's GeluFusionPass fuses the tanh form only for static shapes (DOMAIN.md 2.3, 6.2).

Numerics: preserving — both replacements compute the same formula (differences are float rounding).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from onnx import ModelProto, NodeProto

from advisor.fix.onnx_graph import (
    MS_DOMAIN,
    GraphEditor,
    GraphIndex,
    close,
    copy_model,
    describe,
    ensure_opset,
    is_op,
    label,
    make_node,
    opset_version,
)
from advisor.fix.rewrites.base import Param, Rewrite, RewriteResult

SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
KAPPA = 0.044715
NATIVE_OPSET = 20


class GeluFuse(Rewrite):
    name = "gelu-fuse"
    description = "decomposed GELU (erf and tanh forms) -> Gelu (opset >= 20) or com.microsoft Gelu/FastGelu"
    numerics_preserving = True
    params = (Param("allow_contrib", bool, False,
                    "below opset 20, use com.microsoft Gelu/FastGelu (onnxruntime only)"),)

    def apply(self, model: ModelProto, params: Mapping[str, object]) -> RewriteResult:
        model = copy_model(model)
        opset = opset_version(model) or 1
        contrib = bool(self.param(params, "allow_contrib"))
        index = GraphIndex(model)
        editor = GraphEditor(index)
        found: list[tuple[str, list[NodeProto], str]] = []
        for node in index.nodes:
            if is_op(node, "Erf"):
                m = _match_erf(index, node)
                form = "erf"
            elif is_op(node, "Tanh"):
                m = _match_tanh(index, node)
                form = "tanh"
            else:
                continue
            if m is not None and editor.free(m[0]):
                editor.claim(m[0])
                found.append((form, m[0], m[1]))
        if not found:
            return RewriteResult(model, [])
        if opset < NATIVE_OPSET and not contrib:
            forms = sorted({f for f, _, _ in found})
            return RewriteResult(model, [], [
                f"found {len(found)} decomposed GELU ({'/'.join(forms)} form) but Gelu is not available in this "
                f"opset ({opset}; it needs opset >= {NATIVE_OPSET}); graph left unchanged. --allow-contrib uses "
                f"com.microsoft Gelu/FastGelu, which only onnxruntime runs"])
        editor.claimed.clear()
        matches: list[str] = []
        for form, chain, x in found:
            last = chain[-1]
            if opset >= NATIVE_OPSET:
                op, domain = "Gelu", ""
                attrs: dict[str, object] = {"approximate": "tanh"} if form == "tanh" else {}
                what = f"Gelu(approximate={'tanh' if form == 'tanh' else 'none'})"
            else:
                op, domain, attrs = ("FastGelu" if form == "tanh" else "Gelu"), MS_DOMAIN, {}
                what = f"{MS_DOMAIN}.{op}"
            doc = f"{self.tag()}: replaced decomposed GELU ({form} form) {describe(chain)} with {what}"
            new = make_node(op, [x], [last.output[0]], editor.unique_name(f"{label(last)}/gelu"), doc, domain, **attrs)
            editor.replace(chain, [new], at=last)
            matches.append(label(last))
        notes = []
        if opset < NATIVE_OPSET:
            ensure_opset(model, MS_DOMAIN, 1)
            notes.append(f"used {MS_DOMAIN} contrib ops (opset {opset} < {NATIVE_OPSET}): onnxruntime runs them, "
                         "the ATC ONNX parser does not")
        editor.apply()
        return RewriteResult(model, matches, notes)


def _match_erf(index: GraphIndex, erf: NodeProto) -> tuple[list[NodeProto], str] | None:
    """Div(x, sqrt2)|Mul(x, 1/sqrt2) -> Erf -> Add(1) -> 0.5 * x * (.)."""
    scale = index.producer_of(erf.input[0])
    if scale is None or index.sole_consumer(erf.input[0]) is not erf:
        return None
    if is_op(scale, "Div"):
        c = index.scalar(scale.input[1])
        if not close(c, SQRT2):
            return None
        x = scale.input[0]
    elif is_op(scale, "Mul"):
        op = index.scalar_operand(scale)
        if op is None or not close(op[0], 1.0 / SQRT2):
            return None
        x = op[1]
    else:
        return None
    tail = _one_plus_times_half_x(index, erf.output[0], x)
    if tail is None:
        return None
    return [scale, erf, *tail], x


def _match_tanh(index: GraphIndex, tanh: NodeProto) -> tuple[list[NodeProto], str] | None:
    """x + 0.044715*x^3 -> Mul(sqrt(2/pi)) -> Tanh -> Add(1) -> 0.5 * x * (.)."""
    beta = index.producer_of(tanh.input[0])
    if beta is None or not is_op(beta, "Mul") or index.sole_consumer(tanh.input[0]) is not tanh:
        return None
    op = index.scalar_operand(beta)
    if op is None or not close(op[0], SQRT_2_OVER_PI):
        return None
    inner = index.producer_of(op[1])
    if inner is None or not is_op(inner, "Add") or index.sole_consumer(op[1]) is not beta or len(inner.input) != 2:
        return None
    for k in (0, 1):
        x, t = inner.input[k], inner.input[1 - k]
        cubic = _kappa_cube(index, t, x, inner)
        if cubic is None:
            continue
        tail = _one_plus_times_half_x(index, tanh.output[0], x)
        if tail is None:
            return None
        return [*cubic, inner, beta, tanh, *tail], x
    return None


def _kappa_cube(index: GraphIndex, t: str, x: str, reader: NodeProto) -> list[NodeProto] | None:
    """``t`` = Mul(0.044715, x^3) with x^3 as Pow(x, 3), Mul(x, Mul(x, x)) or Mul(Mul(x, x), x)."""
    mul = index.producer_of(t)
    if mul is None or not is_op(mul, "Mul") or index.sole_consumer(t) is not reader:
        return None
    op = index.scalar_operand(mul)
    if op is None or not close(op[0], KAPPA):
        return None
    cube = index.producer_of(op[1])
    if cube is None or index.sole_consumer(op[1]) is not mul:
        return None
    if is_op(cube, "Pow"):
        if cube.input[0] == x and close(index.scalar(cube.input[1]), 3.0):
            return [cube, mul]
        return None
    if not is_op(cube, "Mul") or len(cube.input) != 2:
        return None
    for k in (0, 1):
        if cube.input[k] != x:
            continue
        sq = index.producer_of(cube.input[1 - k])
        if (sq is not None and index.mul_of(sq, x, x)
                and index.sole_consumer(cube.input[1 - k]) is cube):
            return [sq, cube, mul]
    return None


def _one_plus_times_half_x(index: GraphIndex, f: str, x: str) -> list[NodeProto] | None:
    """Add(f, 1) followed by the product with x and 0.5, in the orders exporters produce:
    (x * a) * 0.5, (x * 0.5) * a, (a * 0.5) * x. Returns the nodes, the one writing the result last."""
    add = index.sole_consumer(f)
    if add is None or not is_op(add, "Add"):
        return None
    op = index.scalar_operand(add, rank_of=x)
    if op is None or op[1] != f or not close(op[0], 1.0):
        return None
    a = add.output[0]
    m1 = index.sole_consumer(a)
    if m1 is None or not is_op(m1, "Mul") or len(m1.input) != 2:
        return None
    other = index.other_input(m1, a)
    if other == x:  # (x * a) * 0.5
        m2 = index.sole_consumer(m1.output[0])
        half = None if m2 is None or not is_op(m2, "Mul") else index.scalar_operand(m2, rank_of=x)
        if half is not None and half[1] == m1.output[0] and close(half[0], 0.5):
            return [add, m1, m2]  # type: ignore[list-item]
        return None
    half = index.scalar_operand(m1, rank_of=x)
    if half is not None and half[1] == a and close(half[0], 0.5):  # (a * 0.5) * x
        m2 = index.sole_consumer(m1.output[0])
        if m2 is not None and index.mul_of(m2, m1.output[0], x):
            return [add, m1, m2]
        return None
    h = index.producer_of(other) if other else None  # (x * 0.5) * a
    if h is None or not is_op(h, "Mul") or index.sole_consumer(other) is not m1:  # type: ignore[arg-type]
        return None
    half = index.scalar_operand(h, rank_of=x)
    if half is not None and half[1] == x and close(half[0], 0.5):
        return [add, h, m1]
    return None


REWRITE = GeluFuse()
