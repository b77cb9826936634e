"""Each ONNX rewrite on a small model: it happened, the model is valid, numerics hold (or visibly do not, for
Mish -> LeakyRelu), unrelated nodes are untouched and new nodes are traceable to what they replaced."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

from advisor.fix.onnx_graph import GraphIndex, opset_version
from advisor.fix.rewrites import REWRITES, get
from advisor.fix.rewrites.bn_fold import fold
from advisor.fix.rewrites.remove_roundtrips import lossless
from tests.test_fix_models import conv_bn, feeds_for, roundtrips, run, swish, transformer_block, yolo_block

TOL = 1e-4


def types(m: onnx.ModelProto) -> list[str]:
    return [n.op_type for n in m.graph.node]


def by_name(m: onnx.ModelProto) -> dict[str, onnx.NodeProto]:
    return {n.name: n for n in m.graph.node}


def assert_untouched(before: onnx.ModelProto, after: onnx.ModelProto, names: list[str]) -> None:
    """The named nodes are byte-identical (inputs, outputs, attributes) before and after."""
    b, a = by_name(before), by_name(after)
    for name in names:
        assert name in a, f"{name} disappeared"
        assert a[name].SerializeToString() == b[name].SerializeToString(), f"{name} changed"


def max_diff(before: onnx.ModelProto, after: onnx.ModelProto) -> float:
    feeds = feeds_for(before)
    return max(float(np.abs(x.astype(np.float64) - y).max()) for x, y in zip(run(before, feeds), run(after, feeds),
                                                                               strict=True))


def test_registry_has_the_five_rewrites_with_the_common_interface() -> None:
    assert set(REWRITES) >= {"mish-to-leakyrelu", "gelu-fuse", "swish-fuse", "bn-fold", "remove-roundtrips"}
    for name, r in REWRITES.items():
        assert r.name == name and r.description and isinstance(r.numerics_preserving, bool)
    assert REWRITES["mish-to-leakyrelu"].numerics_preserving is False
    assert all(REWRITES[n].numerics_preserving for n in ("gelu-fuse", "swish-fuse", "bn-fold", "remove-roundtrips"))


# --- mish-to-leakyrelu ---------------------------------------------------------------------------------------

def test_mish_both_decomposed_forms_become_leakyrelu() -> None:
    m = yolo_block()
    r = get("mish-to-leakyrelu").apply(m, {})
    assert r.matches == ["mish1/mul", "mish2/mul"]
    assert types(r.model) == ["Conv", "LeakyRelu", "Conv", "LeakyRelu", "Conv", "Relu"]
    onnx.checker.check_model(r.model, full_check=True)
    nodes = by_name(r.model)
    lr1, lr2 = nodes["mish1/mul/leakyrelu"], nodes["mish2/mul/leakyrelu"]
    assert list(lr1.input) == ["c1"] and list(lr1.output) == ["m1"]
    assert list(lr2.input) == ["c2"] and list(lr2.output) == ["m2"]
    assert "Softplus 'mish1/softplus' -> Tanh 'mish1/tanh' -> Mul 'mish1/mul'" in lr1.doc_string
    assert "Exp 'mish2/exp' -> Add 'mish2/add' -> Log 'mish2/log'" in lr2.doc_string
    assert onnx.helper.get_attribute_value(lr1.attribute[0]) == pytest.approx(0.1)
    assert_untouched(m, r.model, ["conv1", "conv2", "conv3", "relu_out"])
    assert "mish2/one" not in nodes  # the Constant feeding only the removed Add is gone
    assert {t.name for t in r.model.graph.initializer} == {"W1", "B1", "W2", "W3"}
    assert m.graph.node[1].op_type == "Softplus"  # the input model was not mutated


def test_mish_to_leakyrelu_changes_outputs_and_takes_alpha() -> None:
    m = yolo_block()
    r = get("mish-to-leakyrelu").apply(m, {"alpha": 0.05})
    assert max_diff(m, r.model) > 1e-2  # a different function, not a rounding difference
    alphas = [onnx.helper.get_attribute_value(n.attribute[0]) for n in r.model.graph.node if n.op_type == "LeakyRelu"]
    assert alphas == [pytest.approx(0.05)] * 2


def test_native_mish_is_replaced_too() -> None:
    m = yolo_block(native_mish=True)
    r = get("mish-to-leakyrelu").apply(m, {})
    assert "mish3" in r.matches and "Mish" not in types(r.model)
    assert by_name(r.model)["mish3/leakyrelu"].output[0] == "m3"
    onnx.checker.check_model(r.model, full_check=True)


def test_mish_with_another_reader_of_tanh_is_left_alone() -> None:
    m = yolo_block()
    m.graph.node.append(onnx.helper.make_node("Identity", ["th"], ["th_copy"], name="spy"))
    m.graph.output.append(onnx.helper.make_tensor_value_info("th_copy", onnx.TensorProto.FLOAT, None))
    r = get("mish-to-leakyrelu").apply(m, {})
    assert r.matches == ["mish2/mul"]  # mish1's Tanh output is also read elsewhere


def test_mul_with_a_different_tensor_is_not_mish() -> None:
    m = yolo_block()
    for n in m.graph.node:
        if n.name == "mish1/mul":
            n.input[0] = "x_other"
    m.graph.node.insert(0, onnx.helper.make_node("Neg", ["x"], ["x_other"], name="neg"))
    r = get("mish-to-leakyrelu").apply(m, {})
    assert r.matches == ["mish2/mul"]


# --- gelu-fuse -----------------------------------------------------------------------------------------------

@pytest.mark.parametrize("cube", ["pow", "mul"])
def test_gelu_at_opset20_becomes_native_gelu(cube: str) -> None:
    m = transformer_block(20, cube=cube)
    r = get("gelu-fuse").apply(m, {})
    assert r.matches == ["ffn1/gelu/mul_1", "ffn2/gelu/mul_x"]
    assert types(r.model) == ["MatMul", "Gelu", "MatMul", "Add", "MatMul", "Gelu", "MatMul", "Softmax"]
    onnx.checker.check_model(r.model, full_check=True)
    g_erf, g_tanh = by_name(r.model)["ffn1/gelu/mul_1/gelu"], by_name(r.model)["ffn2/gelu/mul_x/gelu"]
    assert g_erf.domain == "" and not g_erf.attribute  # approximate="none" is the default
    assert onnx.helper.get_attribute_value(g_tanh.attribute[0]) == b"tanh"
    assert list(g_erf.input) == ["ha"] and list(g_tanh.input) == ["hc"]
    assert "erf form" in g_erf.doc_string and "Erf 'ffn1/gelu/erf'" in g_erf.doc_string
    assert max_diff(m, r.model) < TOL
    assert_untouched(m, r.model, ["ffn1/fc1", "ffn1/fc2", "ffn1/residual", "ffn2/fc1", "ffn2/fc2", "head/softmax"])
    assert {t.name for t in r.model.graph.initializer} == {"Wa", "Wb", "Wc", "Wd"}


def test_gelu_at_opset13_is_not_available_without_contrib() -> None:
    m = transformer_block(13)
    r = get("gelu-fuse").apply(m, {})
    assert r.matches == [] and not r.changed
    assert "not available in this opset" in r.notes[0] and "13" in r.notes[0]
    assert r.model.SerializeToString() == m.SerializeToString()


def test_gelu_at_opset13_with_contrib_uses_com_microsoft_ops() -> None:
    m = transformer_block(13)
    r = get("gelu-fuse").apply(m, {"allow_contrib": True})
    nodes = by_name(r.model)
    assert nodes["ffn1/gelu/mul_1/gelu"].op_type == "Gelu" and nodes["ffn1/gelu/mul_1/gelu"].domain == "com.microsoft"
    assert nodes["ffn2/gelu/mul_x/gelu"].op_type == "FastGelu"
    assert opset_version(r.model, "com.microsoft") == 1 and opset_version(r.model) == 13
    onnx.checker.check_model(r.model, full_check=True)
    assert max_diff(m, r.model) < TOL


def test_gelu_with_wrong_constant_is_not_matched() -> None:
    m = transformer_block(20)
    for t in m.graph.initializer:
        if t.name == "sqrt2":
            t.CopyFrom(onnx.numpy_helper.from_array(np.array(2.0, dtype=np.float32), "sqrt2"))
    r = get("gelu-fuse").apply(m, {})
    assert r.matches == ["ffn2/gelu/mul_x"]  # only the tanh form is still a GELU


# --- swish-fuse ----------------------------------------------------------------------------------------------

def test_swish_at_opset24_becomes_native_swish_with_beta() -> None:
    m = swish(24)
    r = get("swish-fuse").apply(m, {})
    assert r.matches == ["silu1/mul", "qgelu/mul"]
    nodes = by_name(r.model)
    assert nodes["silu1/mul/swish"].op_type == "Swish"
    alpha = {n: onnx.helper.get_attribute_value(nodes[n].attribute[0]) for n in ("silu1/mul/swish", "qgelu/mul/swish")}
    assert alpha == {"silu1/mul/swish": pytest.approx(1.0), "qgelu/mul/swish": pytest.approx(1.702)}
    onnx.checker.check_model(r.model, full_check=True)
    assert max_diff(m, r.model) < TOL
    assert_untouched(m, r.model, ["fc1", "fc2", "gate/sigmoid", "gate/mul"])  # Mul(a, Sigmoid(b)) is no Swish


def test_swish_before_opset24_is_skipped_not_turned_into_hardswish() -> None:
    m = swish(13)
    r = get("swish-fuse").apply(m, {})
    assert not r.changed and "no Swish" in r.notes[0] and "HardSwish is a different function" in r.notes[0]
    assert "HardSwish" not in types(r.model)


def test_swish_with_contrib_uses_quickgelu_and_keeps_numerics() -> None:
    m = swish(13)
    r = get("swish-fuse").apply(m, {"allow_contrib": True})
    ops = [(n.op_type, n.domain) for n in r.model.graph.node if n.name.endswith("/swish")]
    assert ops == [("QuickGelu", "com.microsoft")] * 2
    onnx.checker.check_model(r.model, full_check=True)
    assert max_diff(m, r.model) < TOL


# --- bn-fold -------------------------------------------------------------------------------------------------

def test_bn_fold_folds_when_conv_output_is_private() -> None:
    m = conv_bn()
    r = get("bn-fold").apply(m, {})
    assert r.matches == ["bn1", "bn2"]
    assert any("bn3: not folded (the Conv output has other consumers)" in n for n in r.notes)
    assert types(r.model) == ["Conv", "Relu", "Conv", "Conv", "BatchNormalization", "Add"]
    onnx.checker.check_model(r.model, full_check=True)
    nodes = by_name(r.model)
    conv1 = nodes["conv1/bnfold"]
    assert list(conv1.output) == ["b1"] and conv1.input[0] == "x"
    assert {a.name: onnx.helper.get_attribute_value(a) for a in conv1.attribute} == {"pads": [1, 1, 1, 1],
                                                                                     "strides": [1, 1]}
    assert onnx.helper.get_attribute_value(nodes["conv2/bnfold"].attribute[0]) == 2  # group kept
    assert "Conv 'conv1' -> BatchNormalization 'bn1'" in conv1.doc_string
    assert max_diff(m, r.model) < TOL
    assert_untouched(m, r.model, ["relu1", "conv3", "bn3", "shortcut"])
    names = {t.name for t in r.model.graph.initializer}
    assert "bn1_scale" not in names and "W1" not in names and "bn3_scale" in names


def test_fold_matches_the_batchnorm_formula() -> None:
    rng = np.random.default_rng(3)
    w, b = rng.standard_normal((4, 2, 3, 3)), rng.standard_normal(4)
    scale, beta, mean, var = rng.random(4) + 0.5, rng.standard_normal(4), rng.standard_normal(4), rng.random(4) + .1
    w2, b2 = fold(w, b, scale, beta, mean, var, 1e-5)
    x = rng.standard_normal((2, 3, 3))
    conv = (w * x).sum(axis=(1, 2, 3)) + b
    expected = (conv - mean) / np.sqrt(var + 1e-5) * scale + beta
    np.testing.assert_allclose((w2 * x).sum(axis=(1, 2, 3)) + b2, expected, rtol=1e-12)


# --- remove-roundtrips ---------------------------------------------------------------------------------------

def test_roundtrips_removed_only_where_lossless_and_identity() -> None:
    m = roundtrips()
    r = get("remove-roundtrips").apply(m, {})
    assert sorted(r.matches) == sorted(["cast_down", "to_nchw", "to_rows", "reshape_noop", "unflat", "out_down"])
    onnx.checker.check_model(r.model, full_check=True)
    nodes = by_name(r.model)
    for gone in ("cast_up", "cast_down", "to_nhwc", "to_nchw", "flatten", "reshape_noop", "flat_again", "unflat"):
        assert gone not in nodes
    # fp32 -> fp16 -> fp32 is lossy and the (0,1,3,2)+(0,2,1,3) transposes do not cancel: both stay
    assert_untouched(m, r.model, ["cast_back", "swap_hw", "swap_ch", "gate"])
    assert nodes["cast_half"].input[0] == "x"  # was x32, the output of the removed fp64 round trip
    assert nodes["act"].input[0] == "xq"  # was t2, the output of the removed Transpose pair
    collapsed = nodes["to_rows/collapsed"]
    assert list(collapsed.input) == ["u2", "rows"] and "Reshape 'flatten' -> Reshape 'to_rows'" in collapsed.doc_string
    ident = nodes["out_down/identity"]  # the graph output keeps its name through an Identity
    assert list(ident.output) == ["y"] and list(ident.input) == ["s"] and "out_up" in ident.doc_string
    assert max_diff(m, r.model) == 0.0


def test_reshape_with_zero_dims_is_not_collapsed() -> None:
    m = roundtrips()
    for t in m.graph.initializer:
        if t.name == "rows":
            t.CopyFrom(onnx.numpy_helper.from_array(np.array([0, 5, 12], dtype=np.int64), "rows"))
    m.graph.node.remove(next(n for n in m.graph.node if n.name == "flatten"))
    m.graph.node.insert(9, onnx.helper.make_node("Reshape", ["u2", "two_rows"], ["f1"], name="flatten"))
    m.graph.initializer.append(onnx.numpy_helper.from_array(np.array([2, -1], dtype=np.int64), "two_rows"))
    onnx.checker.check_model(m, full_check=True)
    r = get("remove-roundtrips").apply(m, {})
    assert "flatten" in by_name(r.model) and "to_rows" in by_name(r.model)  # 0 copies a dim of the intermediate
    assert max_diff(m, r.model) == 0.0


def test_lossless_table() -> None:
    t = onnx.TensorProto
    assert lossless(t.FLOAT, t.DOUBLE) and lossless(t.FLOAT16, t.FLOAT) and lossless(t.INT32, t.INT64)
    assert not lossless(t.FLOAT, t.FLOAT16) and not lossless(t.INT64, t.INT32) and not lossless(t.INT32, t.FLOAT)


# --- helpers -------------------------------------------------------------------------------------------------

def test_graph_index_constant_lookup_through_initializers_and_constant_nodes() -> None:
    idx = GraphIndex(yolo_block())
    assert idx.scalar("mish2/one".replace("mish2/", "")) == 1.0  # Constant node output "one"
    assert idx.constant("W1").shape == (8, 3, 3, 3)
    assert idx.constant("c1") is None
    assert [n.name for n in idx.consumers_of("c1")] == ["mish1/softplus", "mish1/mul"]
    assert idx.sole_consumer("c1") is None and idx.sole_consumer("sp").name == "mish1/tanh"
    assert idx.mul_of(idx.producer_of("m1"), "c1", "th")
    assert idx.shape("c1") == [None, 8, 16, 16]


@pytest.mark.parametrize("ir_version, folded", [(3, True), (8, False)])
def test_bn_fold_initializers_listed_as_inputs(ir_version: int, folded: bool) -> None:
    """Before IR 4 every initializer is also an input (still a constant); from IR 4 such an input can be
    overridden at run time, so it is not a constant and nothing is folded."""
    m = conv_bn()
    m.ir_version = ir_version
    inits = {t.name for t in m.graph.initializer}
    for t in m.graph.initializer:
        m.graph.input.append(onnx.helper.make_tensor_value_info(t.name, t.data_type, list(t.dims)))
    r = get("bn-fold").apply(m, {})
    assert r.changed is folded
    if folded:
        remaining = {v.name for v in r.model.graph.input}
        assert "bn1_scale" not in remaining and "W1" not in remaining and "bn3_scale" in remaining
        assert remaining - {"x"} <= inits | {t.name for t in r.model.graph.initializer}
        onnx.checker.check_model(r.model)
