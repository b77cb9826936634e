"""The keep/reject protocol of ``advisor fix --verify``: numerics, acceptance of approximations, the latency gate,
rewrites applied one by one so a bad one does not sink the others, random inputs from the model's signature."""

from __future__ import annotations

import sys
from collections.abc import Mapping

import numpy as np
import onnx
import onnxruntime  # noqa: F401 - in the test extra: a missing one fails the run instead of skipping it
import pytest

from advisor.common.errors import UsageError
from advisor.fix.onnx_graph import copy_model
from advisor.fix.pipeline import KEPT, NO_MATCH, REJECTED, FixOptions, run_fix
from advisor.fix.rewrites import REWRITES, Rewrite, RewriteResult
from advisor.fix.verify import VerifySettings, compare, input_feeds, load_onnxruntime
from tests.test_fix_models import conv_bn, transformer_block, yolo_block

ANY_SPEED = -1e9  # these tests are about numerics and bookkeeping, not about CPU timing noise


def settings(**kw: object) -> VerifySettings:
    base: dict[str, object] = {"runs": 3, "warmup": 1, "min_gain_pct": ANY_SPEED}
    base.update(kw)
    return VerifySettings(**base)  # type: ignore[arg-type]


def test_mish_is_rejected_without_acceptance_and_the_difference_is_reported() -> None:
    m = yolo_block()
    run = run_fix(m, ["mish-to-leakyrelu"], FixOptions(verify=settings()))
    step = run.steps[0]
    assert step.status == REJECTED and "--accept-approx" in step.reason
    assert step.max_abs_diff is not None and step.max_abs_diff > 1e-2
    assert step.latency_before_ms is not None and step.latency_after_ms is not None
    assert run.kept == [] and run.model.SerializeToString() == m.SerializeToString()


@pytest.mark.parametrize("how", [{"accept_all": True}, {"accept": {"mish-to-leakyrelu"}}])
def test_mish_is_kept_when_accepted_and_says_it_is_an_approximation(how: dict) -> None:
    run = run_fix(yolo_block(), ["mish-to-leakyrelu"], FixOptions(verify=settings(), **how))
    step = run.steps[0]
    assert step.status == KEPT and step.reason.startswith("approximation accepted")
    assert step.max_abs_diff > 1e-2
    assert "LeakyRelu" in [n.op_type for n in run.model.graph.node]
    assert run.total is not None and run.total.max_abs_diff == pytest.approx(step.max_abs_diff)


def test_approximation_without_verify_still_needs_acceptance() -> None:
    run = run_fix(yolo_block(), ["mish-to-leakyrelu"], FixOptions())
    assert run.steps[0].status == REJECTED and run.steps[0].max_abs_diff is None
    run = run_fix(yolo_block(), ["mish-to-leakyrelu"], FixOptions(accept_all=True))
    assert run.steps[0].status == KEPT


def test_numerics_preserving_rewrites_are_kept_within_tolerance() -> None:
    run = run_fix(transformer_block(20), ["gelu-fuse", "bn-fold"], FixOptions(verify=settings()))
    gelu, bn = run.steps
    assert gelu.status == KEPT and gelu.max_abs_diff < 1e-4 and gelu.reason == ""
    assert bn.status == NO_MATCH and bn.reason == "pattern not found"


def test_gelu_not_available_is_reported_as_no_match_with_the_reason() -> None:
    run = run_fix(transformer_block(13), ["gelu-fuse"], FixOptions(verify=settings()))
    assert run.steps[0].status == NO_MATCH and "not available in this opset" in run.steps[0].reason


def test_latency_gate_rejects_below_min_gain() -> None:
    run = run_fix(conv_bn(), ["bn-fold"], FixOptions(verify=settings(min_gain_pct=1e6)))
    step = run.steps[0]
    assert step.status == REJECTED and "below --min-gain" in step.reason
    assert step.max_abs_diff < 1e-4  # numerics were fine; only the gain was not enough


class _Corrupting(Rewrite):
    """Claims to preserve numerics but scales the first Conv weight: verification must catch it."""

    name = "corrupt"
    description = "test double"
    numerics_preserving = True

    def apply(self, model: onnx.ModelProto, params: Mapping[str, object]) -> RewriteResult:
        model = copy_model(model)
        w = model.graph.initializer[0]
        arr = onnx.numpy_helper.to_array(w) * 1.5
        w.CopyFrom(onnx.numpy_helper.from_array(arr, w.name))
        return RewriteResult(model, [w.name])


class _Dangling(Rewrite):
    """Produces an invalid graph (a node reading a tensor nothing produces): the checker must catch it."""

    name = "dangling"
    description = "test double"
    numerics_preserving = True

    def apply(self, model: onnx.ModelProto, params: Mapping[str, object]) -> RewriteResult:
        model = copy_model(model)
        model.graph.node[0].input[0] = "nowhere"
        return RewriteResult(model, [model.graph.node[0].name])


class _Crashing(Rewrite):
    name = "crashing"
    description = "test double"
    numerics_preserving = True

    def apply(self, model: onnx.ModelProto, params: Mapping[str, object]) -> RewriteResult:
        raise RuntimeError("boom")


def test_one_bad_rewrite_does_not_sink_the_others(monkeypatch: pytest.MonkeyPatch) -> None:
    for r in (_Corrupting(), _Dangling(), _Crashing()):
        monkeypatch.setitem(REWRITES, r.name, r)
    m = conv_bn()
    run = run_fix(m, ["corrupt", "dangling", "crashing", "bn-fold"], FixOptions(verify=settings()))
    corrupt, dangling, crashing, bn = run.steps
    assert corrupt.status == REJECTED and "differ beyond tolerance" in corrupt.reason and corrupt.max_abs_diff > 1e-2
    assert dangling.status == REJECTED and dangling.reason.startswith("invalid graph after the rewrite")
    assert crashing.status == REJECTED and "boom" in crashing.reason
    assert bn.status == KEPT and bn.max_abs_diff < 1e-4
    w1 = next(t for t in m.graph.initializer if t.name == "W1")
    folded = next(t for t in run.model.graph.initializer if t.name == "W1/bnfold")
    # bn-fold ran on the original weights, not on the corrupted ones
    scale = onnx.numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == "bn1_scale"))
    var = onnx.numpy_helper.to_array(next(t for t in m.graph.initializer if t.name == "bn1_var"))
    expected = onnx.numpy_helper.to_array(w1) * (scale / np.sqrt(var + 1e-3)).reshape(-1, 1, 1, 1)
    np.testing.assert_allclose(onnx.numpy_helper.to_array(folded), expected, rtol=1e-5)


def test_each_rewrite_is_verified_against_the_previous_model() -> None:
    run = run_fix(yolo_block(), ["mish-to-leakyrelu", "remove-roundtrips"],
                  FixOptions(verify=settings(), accept_all=True))
    assert run.steps[0].status == KEPT and run.steps[1].status == NO_MATCH
    run = run_fix(conv_bn(), ["bn-fold", "bn-fold"], FixOptions(verify=settings()))
    assert [s.status for s in run.steps] == [KEPT, NO_MATCH]  # the second sees the folded model


def test_input_feeds_use_model_dtypes_dynamic_dims_and_shape_overrides() -> None:
    m = yolo_block()  # x: [N, 3, 16, 16] float
    feeds = input_feeds(m, VerifySettings())
    assert feeds["x"].shape == (1, 3, 16, 16) and feeds["x"].dtype == np.float32
    assert input_feeds(m, VerifySettings(shapes={"x": [4, 3, 16, 16]}))["x"].shape == (4, 3, 16, 16)
    np.testing.assert_array_equal(input_feeds(m, VerifySettings())["x"], feeds["x"])  # fixed seed
    with pytest.raises(UsageError, match="conflicts"):
        input_feeds(m, VerifySettings(shapes={"x": [1, 3, 32, 32]}))
    with pytest.raises(UsageError, match="does not have"):
        input_feeds(m, VerifySettings(shapes={"y": [1]}))
    g = onnx.helper.make_graph(
        [onnx.helper.make_node("Cast", ["ids"], ["y"], to=onnx.TensorProto.FLOAT)], "g",
        [onnx.helper.make_tensor_value_info("ids", onnx.TensorProto.INT64, ["L"])],
        [onnx.helper.make_tensor_value_info("y", onnx.TensorProto.FLOAT, ["L"])])
    ids = input_feeds(onnx.helper.make_model(g), VerifySettings(shapes={"ids": [7]}))["ids"]
    assert ids.dtype == np.int64 and ids.shape == (7,)


def test_compare_tolerance_and_shape_change() -> None:
    a = {"y": np.array([1.0, 2.0, 0.0], dtype=np.float32)}
    near = {"y": np.array([1.00001, 2.0, 1e-6], dtype=np.float32)}
    far = {"y": np.array([1.1, 2.0, 0.0], dtype=np.float32)}
    assert compare(a, near, 1e-4, 1e-4).within
    d = compare(a, far, 1e-4, 1e-4)
    assert not d.within and d.max_abs == pytest.approx(0.1, rel=1e-5) and d.max_rel == pytest.approx(0.1, rel=1e-5)
    assert compare(a, {"y": np.zeros(4, dtype=np.float32)}, 1e-4, 1e-4).problem.startswith("output 'y' shape")


def test_missing_onnxruntime_is_one_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    with pytest.raises(UsageError, match=r"pip install onnxruntime"):
        load_onnxruntime()
