"""Small ONNX models for the ``advisor fix`` tests, built with onnx.helper, plus checks that they are sound
(valid and runnable), so a rewrite test never passes on a broken fixture."""

from __future__ import annotations

import math

import numpy as np
import onnx
import pytest
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

IR_VERSION = 10  # what the installed onnxruntime accepts, whatever the onnx library's default
RNG = np.random.default_rng(7)


def const(name: str, value: object, dtype: type = np.float32) -> onnx.TensorProto:
    return nh.from_array(np.array(value, dtype=dtype), name)


def weights(name: str, shape: tuple[int, ...], scale: float = 0.3) -> onnx.TensorProto:
    return nh.from_array((RNG.standard_normal(shape) * scale).astype(np.float32), name)


def model(nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto], outputs: list[onnx.ValueInfoProto],
          inits: list[onnx.TensorProto], opset: int = 13) -> onnx.ModelProto:
    g = h.make_graph(nodes, "g", inputs, outputs, inits)
    m = h.make_model(g, opset_imports=[h.make_opsetid("", opset)])
    m.ir_version = IR_VERSION
    return m


def yolo_block(native_mish: bool = False) -> onnx.ModelProto:
    """Conv -> Mish (Softplus->Tanh->Mul) -> Conv -> Mish (Exp->Add->Log->Tanh->Mul) -> Conv -> Relu.

    With ``native_mish`` (opset 18) a third activation is a native Mish node before the last Conv.
    """
    nodes = [
        h.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1]),
        h.make_node("Softplus", ["c1"], ["sp"], name="mish1/softplus"),
        h.make_node("Tanh", ["sp"], ["th"], name="mish1/tanh"),
        h.make_node("Mul", ["c1", "th"], ["m1"], name="mish1/mul"),
        h.make_node("Conv", ["m1", "W2"], ["c2"], name="conv2"),
        h.make_node("Exp", ["c2"], ["e"], name="mish2/exp"),
        h.make_node("Constant", [], ["one"], name="mish2/one", value=const("one_v", 1.0)),
        h.make_node("Add", ["one", "e"], ["ea"], name="mish2/add"),
        h.make_node("Log", ["ea"], ["lg"], name="mish2/log"),
        h.make_node("Tanh", ["lg"], ["th2"], name="mish2/tanh"),
        h.make_node("Mul", ["th2", "c2"], ["m2"], name="mish2/mul"),
    ]
    last_in = "m2"
    if native_mish:
        nodes.append(h.make_node("Mish", ["m2"], ["m3"], name="mish3"))
        last_in = "m3"
    nodes += [h.make_node("Conv", [last_in, "W3"], ["c3"], name="conv3"),
              h.make_node("Relu", ["c3"], ["y"], name="relu_out")]
    inits = [weights("W1", (8, 3, 3, 3)), weights("B1", (8,), 0.1), weights("W2", (8, 8, 1, 1)),
             weights("W3", (4, 8, 1, 1))]
    return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["N", 3, 16, 16])],
                 [h.make_tensor_value_info("y", T.FLOAT, ["N", 4, 16, 16])], inits, 18 if native_mish else 13)


def transformer_block(opset: int = 13, cube: str = "pow") -> onnx.ModelProto:
    """MatMul -> GELU (erf form) -> MatMul -> residual Add -> MatMul -> GELU (tanh form) -> MatMul -> Softmax.

    The erf GELU is exported as Div(sqrt2)->Erf->Add(1)->Mul(x)->Mul(0.5); the tanh GELU as
    x + 0.044715*x^3 (x^3 = Pow(x,3) or Mul(x, Mul(x,x))) -> Mul(sqrt(2/pi)) -> Tanh -> Add(1) -> Mul(0.5) -> Mul(x).
    """
    d, f = 16, 32
    nodes = [
        h.make_node("MatMul", ["x", "Wa"], ["ha"], name="ffn1/fc1"),
        h.make_node("Div", ["ha", "sqrt2"], ["g_div"], name="ffn1/gelu/div"),
        h.make_node("Erf", ["g_div"], ["g_erf"], name="ffn1/gelu/erf"),
        h.make_node("Add", ["g_erf", "one"], ["g_add"], name="ffn1/gelu/add"),
        h.make_node("Mul", ["ha", "g_add"], ["g_mul"], name="ffn1/gelu/mul"),
        h.make_node("Mul", ["g_mul", "half"], ["g_out"], name="ffn1/gelu/mul_1"),
        h.make_node("MatMul", ["g_out", "Wb"], ["hb"], name="ffn1/fc2"),
        h.make_node("Add", ["x", "hb"], ["r1"], name="ffn1/residual"),
        h.make_node("MatMul", ["r1", "Wc"], ["hc"], name="ffn2/fc1"),
    ]
    if cube == "pow":
        nodes.append(h.make_node("Pow", ["hc", "three"], ["t_cube"], name="ffn2/gelu/pow"))
    else:
        nodes += [h.make_node("Mul", ["hc", "hc"], ["t_sq"], name="ffn2/gelu/sq"),
                  h.make_node("Mul", ["hc", "t_sq"], ["t_cube"], name="ffn2/gelu/cube")]
    nodes += [
        h.make_node("Mul", ["kappa", "t_cube"], ["t_k"], name="ffn2/gelu/mul_kappa"),
        h.make_node("Add", ["hc", "t_k"], ["t_inner"], name="ffn2/gelu/add_inner"),
        h.make_node("Mul", ["t_inner", "beta"], ["t_beta"], name="ffn2/gelu/mul_beta"),
        h.make_node("Tanh", ["t_beta"], ["t_tanh"], name="ffn2/gelu/tanh"),
        h.make_node("Add", ["one", "t_tanh"], ["t_add"], name="ffn2/gelu/add_one"),
        h.make_node("Mul", ["t_add", "half"], ["t_half"], name="ffn2/gelu/mul_half"),
        h.make_node("Mul", ["t_half", "hc"], ["t_out"], name="ffn2/gelu/mul_x"),
        h.make_node("MatMul", ["t_out", "Wd"], ["hd"], name="ffn2/fc2"),
        h.make_node("Softmax", ["hd"], ["y"], name="head/softmax", axis=-1),
    ]
    inits = [weights("Wa", (d, f)), weights("Wb", (f, d)), weights("Wc", (d, f)), weights("Wd", (f, d)),
             const("sqrt2", math.sqrt(2.0)), const("one", 1.0), const("half", 0.5),
             const("kappa", 0.044715), const("beta", math.sqrt(2.0 / math.pi))]
    if cube == "pow":
        inits.append(const("three", 3.0))
    return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, ["B", 8, d])],
                 [h.make_tensor_value_info("y", T.FLOAT, ["B", 8, d])], inits, opset)


def conv_bn() -> onnx.ModelProto:
    """Conv(bias)+BN+Relu (foldable), Conv+BN without bias (foldable), and a Conv whose output also feeds an Add
    (not foldable)."""
    c = 6

    def bn_params(p: str) -> list[onnx.TensorProto]:
        return [nh.from_array((RNG.random(c) + 0.5).astype(np.float32), f"{p}_scale"),
                nh.from_array(RNG.standard_normal(c).astype(np.float32), f"{p}_bias"),
                nh.from_array(RNG.standard_normal(c).astype(np.float32), f"{p}_mean"),
                nh.from_array((RNG.random(c) + 0.2).astype(np.float32), f"{p}_var")]

    nodes = [
        h.make_node("Conv", ["x", "W1", "B1"], ["c1"], name="conv1", pads=[1, 1, 1, 1], strides=[1, 1]),
        h.make_node("BatchNormalization", ["c1", "bn1_scale", "bn1_bias", "bn1_mean", "bn1_var"], ["b1"],
                    name="bn1", epsilon=1e-3),
        h.make_node("Relu", ["b1"], ["r1"], name="relu1"),
        h.make_node("Conv", ["r1", "W2"], ["c2"], name="conv2", group=2),
        h.make_node("BatchNormalization", ["c2", "bn2_scale", "bn2_bias", "bn2_mean", "bn2_var"], ["b2"],
                    name="bn2"),
        h.make_node("Conv", ["b2", "W3"], ["c3"], name="conv3"),
        h.make_node("BatchNormalization", ["c3", "bn3_scale", "bn3_bias", "bn3_mean", "bn3_var"], ["b3"],
                    name="bn3"),
        h.make_node("Add", ["b3", "c3"], ["y"], name="shortcut"),
    ]
    inits = [weights("W1", (c, 3, 3, 3)), weights("B1", (c,), 0.1), weights("W2", (c, 3, 1, 1)),
             weights("W3", (c, c, 1, 1)), *bn_params("bn1"), *bn_params("bn2"), *bn_params("bn3")]
    return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [1, 3, 12, 12])],
                 [h.make_tensor_value_info("y", T.FLOAT, [1, c, 12, 12])], inits)


def roundtrips() -> onnx.ModelProto:
    """Lossless Cast fp32->fp64->fp32, lossy Cast fp32->fp16->fp32 (must stay), an identity Transpose pair,
    a non-identity Transpose pair (must stay), Reshape->Reshape, a Reshape back to the input shape, and a
    Cast pair whose result is a graph output."""
    nodes = [
        h.make_node("Cast", ["x"], ["x64"], name="cast_up", to=T.DOUBLE),
        h.make_node("Cast", ["x64"], ["x32"], name="cast_down", to=T.FLOAT),
        h.make_node("Cast", ["x32"], ["x16"], name="cast_half", to=T.FLOAT16),
        h.make_node("Cast", ["x16"], ["xq"], name="cast_back", to=T.FLOAT),
        h.make_node("Transpose", ["xq"], ["t1"], name="to_nhwc", perm=[0, 2, 3, 1]),
        h.make_node("Transpose", ["t1"], ["t2"], name="to_nchw", perm=[0, 3, 1, 2]),
        h.make_node("Relu", ["t2"], ["a"], name="act"),
        h.make_node("Transpose", ["a"], ["u1"], name="swap_hw", perm=[0, 1, 3, 2]),
        h.make_node("Transpose", ["u1"], ["u2"], name="swap_ch", perm=[0, 2, 1, 3]),
        h.make_node("Reshape", ["u2", "flat"], ["f1"], name="flatten"),
        h.make_node("Reshape", ["f1", "rows"], ["f2"], name="to_rows"),
        h.make_node("Sigmoid", ["f2"], ["s"], name="gate"),
        h.make_node("Reshape", ["s", "same"], ["s2"], name="reshape_noop"),
        h.make_node("Reshape", ["s2", "flat"], ["g1"], name="flat_again"),
        h.make_node("Reshape", ["g1", "same"], ["g2"], name="unflat"),
        h.make_node("Cast", ["g2"], ["g64"], name="out_up", to=T.DOUBLE),
        h.make_node("Cast", ["g64"], ["y"], name="out_down", to=T.FLOAT),
    ]
    inits = [const("flat", [1, -1], np.int64), const("rows", [2, 5, 12], np.int64),
             const("same", [2, 5, 12], np.int64)]
    return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [2, 3, 4, 5])],
                 [h.make_tensor_value_info("y", T.FLOAT, [2, 5, 12])], inits)


def swish(opset: int = 13) -> onnx.ModelProto:
    """MatMul -> x*Sigmoid(x) -> MatMul -> x*Sigmoid(1.702*x) -> Add; plus a Sigmoid gate Mul(a, Sigmoid(b))
    that is not a Swish and must stay."""
    nodes = [
        h.make_node("MatMul", ["x", "Wa"], ["a"], name="fc1"),
        h.make_node("Sigmoid", ["a"], ["sa"], name="silu1/sigmoid"),
        h.make_node("Mul", ["a", "sa"], ["m1"], name="silu1/mul"),
        h.make_node("MatMul", ["m1", "Wb"], ["b"], name="fc2"),
        h.make_node("Mul", ["b", "qbeta"], ["bb"], name="qgelu/scale"),
        h.make_node("Sigmoid", ["bb"], ["sb"], name="qgelu/sigmoid"),
        h.make_node("Mul", ["sb", "b"], ["m2"], name="qgelu/mul"),
        h.make_node("Sigmoid", ["x"], ["gx"], name="gate/sigmoid"),
        h.make_node("Mul", ["m2", "gx"], ["y"], name="gate/mul"),
    ]
    inits = [weights("Wa", (8, 8)), weights("Wb", (8, 8)), const("qbeta", 1.702)]
    return model(nodes, [h.make_tensor_value_info("x", T.FLOAT, [4, 8])],
                 [h.make_tensor_value_info("y", T.FLOAT, [4, 8])], inits, opset)


def run(m: onnx.ModelProto, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
    sess = ort.InferenceSession(m.SerializeToString(), opts, providers=["CPUExecutionProvider"])
    return sess.run(None, feeds)


def feeds_for(m: onnx.ModelProto, seed: int = 1) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    out = {}
    for v in m.graph.input:
        dims = [d.dim_value or 2 for d in v.type.tensor_type.shape.dim]
        out[v.name] = (rng.standard_normal(dims) * 2).astype(np.float32)
    return out


FIXTURES = {
    "yolo": yolo_block, "yolo-native": lambda: yolo_block(native_mish=True), "gelu13": transformer_block,
    "gelu20": lambda: transformer_block(20, cube="mul"), "conv-bn": conv_bn, "roundtrips": roundtrips,
    "swish13": swish, "swish24": lambda: swish(24),
}


@pytest.mark.parametrize("name", sorted(FIXTURES))
def test_fixture_models_are_valid_and_run(name: str) -> None:
    m = FIXTURES[name]()
    onnx.checker.check_model(m, full_check=True)
    outs = run(m, feeds_for(m))
    assert all(np.isfinite(o).all() for o in outs)
