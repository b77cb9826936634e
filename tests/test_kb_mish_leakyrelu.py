"""The mish-leakyrelu knowledge base: decomposed Mish, GELU, Swish, HardSwish and LayerNorm found on graph
edges (with the x-link checked) and as op sequences in a profile; savings against one native op; fixes by SoC."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.fix import rewrites
from advisor.graph.load import load_graph
from advisor.knowledge_bases.mish_leakyrelu import MishLeakyReluKB
from advisor.testing import load_rules
from tests.scenarios.builder import OpRow, make_profile
from tests.scenarios.cases_a import (
    ALL_CASES,
    Net,
    activations_case,
    expected_for,
    nchw,
    ops_by_rule,
    run_kb,
)

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
MEGATRON = SAMPLES / "Ascend__msinsight/test/st/level2/rank_0_ascend_pt"


def _by_rule(findings):
    return {f.rule: f for f in findings}


# ---------------------------------------------------------------------------------------------------------
# scenario corpus
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", ALL_CASES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("with_graph", [True, False], ids=["graph", "profile-only"])
def test_scenarios_flag_exactly_the_injected_ops(make, with_graph):
    case = make()
    graph = case.net.graph() if with_graph else None
    findings, status = run_kb(MishLeakyReluKB, case.net.profile(repeat=2), graph)
    assert status.status == "ok", status.reason
    assert ops_by_rule(findings, "mish-leakyrelu.") == expected_for(case, "mish-leakyrelu.")


def test_decoys_are_not_matched():
    """Softplus -> Tanh -> Mul(y, .) with y not the chain input, and an SE block's Sigmoid -> Mul."""
    case = activations_case()
    found = ops_by_rule(run_kb(MishLeakyReluKB, case.net.profile(), case.net.graph())[0])
    every = set().union(*found.values())
    assert not every & {"decoy_softplus", "decoy_tanh", "decoy_mul", "se_sig", "se_mul"}


def test_graph_match_needs_the_mul_to_take_x_even_when_scheduled_back_to_back():
    """Without the graph a back-to-back Softplus, Tanh, Mul looks like Mish; the graph shows the Mul takes y."""
    n = Net("decoy")
    t = nchw(16, 8, 8)
    n.op("x", "Data", outs=[t])
    n.op("y", "Data", outs=[t])
    n.op("sp", "Softplus", "x", [t], [t], 10.0)
    n.op("th", "Tanh", "sp", [t], [t], 10.0)
    n.op("mul", "Mul", ["y", "th"], [t, t], [t], 10.0)
    assert run_kb(MishLeakyReluKB, n.profile(), n.graph())[0] == []
    profile_only = ops_by_rule(run_kb(MishLeakyReluKB, n.profile(), None)[0])
    assert profile_only == {"mish-leakyrelu.mish": {"sp", "th", "mul"}}


def test_mish_saving_against_a_native_leaky_relu_of_the_same_size():
    case = activations_case()
    f = _by_rule(run_kb(MishLeakyReluKB, case.net.profile(repeat=2), case.net.graph())[0])["mish-leakyrelu.mish"]
    rows = {r[0]: r for r in f.evidence["table"]["rows"]}
    a = rows["mish_a_softplus > mish_a_tanh > mish_a_mul"]
    # 3 ops x 20 us per launch, LeakyRelu of the same shape 8 us, 2 launches
    assert a[3] == 2 and a[4] == pytest.approx(120.0) and a[5] == pytest.approx(8.0)
    assert a[6] == pytest.approx((60.0 - 8.0) * 2)
    assert "LeakyRelu" in f.basis
    assert sum(f.saving_by_op.values()) == pytest.approx(f.estimated_saving_us)


def _profile_on(case, cann):
    profile = case.net.profile()
    profile.meta.cann_version = cann
    return profile


def test_mish_fix_on_a_soc_without_native_mish(tmp_path):
    case = activations_case()
    # CANN 5.1 on a 310P: older than the first release whose op set was checked to hold Mish (8.1)
    f = _by_rule(run_kb(MishLeakyReluKB, _profile_on(case, "5.1.RC2"), case.net.graph())[0])["mish-leakyrelu.mish"]
    assert f.fix.kind == "onnx-rewrite"
    assert f.fix.data == {"rule": "mish-to-leakyrelu", "params": {"alpha": 0.1}, "approximate": True}
    assert f.fix.command == ("advisor fix model.onnx --apply mish-to-leakyrelu --param mish-to-leakyrelu.alpha=0.1 "
                             "--accept mish-to-leakyrelu -o fixed.onnx")
    assert "fine-tune or retrain" in f.recommendation and "Ascend310P3" in f.recommendation
    assert f.evidence["native_kernel_on_soc"] is False and "predates" in f.evidence["native_kernel_reason"]
    assert "Upgrading" in f.recommendation
    rules = load_rules(override={"rules": {"mish-leakyrelu": {"leaky_relu_negative_slope": 0.2}}})
    f2 = _by_rule(run_kb(MishLeakyReluKB, _profile_on(case, "5.1.RC2"), case.net.graph(), rules)[0])[
        "mish-leakyrelu.mish"]
    assert f2.fix.data["params"] == {"alpha": 0.2} and "alpha=0.2" in f2.fix.command


def test_mish_on_310p_with_cann_81_uses_the_native_kernel_and_unknown_cann_is_an_assumption():
    case = activations_case()
    f = _by_rule(run_kb(MishLeakyReluKB, _profile_on(case, "8.1.RC1"), case.net.graph())[0])["mish-leakyrelu.mish"]
    assert f.evidence["native_kernel_on_soc"] is True and f.fix.kind == "code"
    assert "no accuracy cost" in f.recommendation and "Ascend310P3" in f.recommendation
    g = _by_rule(run_kb(MishLeakyReluKB, _profile_on(case, None), case.net.graph())[0])["mish-leakyrelu.mish"]
    assert g.evidence["native_kernel_on_soc"] is None and "unknown" in g.recommendation
    assert "CANN 8.1 or later" in g.recommendation and g.fix.data["rule"] == "mish-to-leakyrelu"


def test_mish_fix_on_a_soc_with_native_mish():
    case = activations_case()
    graph = case.net.graph()
    graph.attrs["soc_version"] = "Ascend910B2"
    profile = _profile_on(case, "8.1.RC1")
    profile.meta.chip = "Ascend910B2"
    f = _by_rule(run_kb(MishLeakyReluKB, profile, graph, chip="Ascend910B2")[0])
    assert f["mish-leakyrelu.mish"].fix.kind == "code"
    assert "opset_version=18" in f["mish-leakyrelu.mish"].fix.data["snippet"]
    # Swish has a native kernel on A2 too
    assert f["mish-leakyrelu.swish"].fix.data == {"rule": "swish-fuse"}


def test_fixes_of_the_other_patterns():
    case = activations_case()
    f = _by_rule(run_kb(MishLeakyReluKB, _profile_on(case, "5.1.RC2"), case.net.graph())[0])
    assert f["mish-leakyrelu.gelu"].fix.data == {"rule": "gelu-fuse"}
    assert "GeluFusionPass" in f["mish-leakyrelu.gelu"].recommendation
    assert {r[2] for r in f["mish-leakyrelu.gelu"].evidence["table"]["rows"]} == {"tanh-approximation", "erf"}
    # 310P with CANN 5.1 has no Swish kernel: keep or HardSwish
    assert f["mish-leakyrelu.swish"].fix.kind == "code" and "HardSwish" in f["mish-leakyrelu.swish"].fix.data["snippet"]
    assert "opset_version=14" in f["mish-leakyrelu.hardswish"].fix.data["snippet"]
    assert "opset_version=17" in f["mish-leakyrelu.layernorm"].fix.data["snippet"]
    assert "LayerNormONNXFusionPass" in f["mish-leakyrelu.layernorm"].recommendation


def test_layernorm_estimate_uses_the_native_cost_factor():
    case = activations_case()
    f = _by_rule(run_kb(MishLeakyReluKB, case.net.profile(), case.net.graph())[0])["mish-leakyrelu.layernorm"]
    row = f.evidence["table"]["rows"][0]
    # nine ops of 7 us; no LayerNorm in the profile: cheapest op (7) x native_cost_factor (2)
    assert row[4] == pytest.approx(63.0) and row[5] == pytest.approx(14.0)
    assert "native_cost_factor" in f.basis


def test_profile_only_groups_launches_by_op_names():
    case = activations_case()
    findings, status = run_kb(MishLeakyReluKB, case.net.profile(repeat=3), None)
    mish = _by_rule(findings)["mish-leakyrelu.mish"]
    assert {r[3] for r in mish.evidence["table"]["rows"]} == {3}
    assert len(mish.evidence["table"]["rows"]) == 3
    assert any("no model graph" in n for n in status.notes)


def test_cast_between_steps_does_not_break_a_chain():
    rows = [OpRow("sp", "Softplus", 10, input_shapes="1,8", output_shapes="1,8"),
            OpRow("c", "Cast", 1, input_shapes="1,8", output_shapes="1,8"),
            OpRow("th", "Tanh", 10, input_shapes="1,8", output_shapes="1,8"),
            OpRow("mul", "Mul", 10, input_shapes="1,8;1,8", output_shapes="1,8")]
    found = ops_by_rule(run_kb(MishLeakyReluKB, make_profile(rows), None)[0])
    assert found == {"mish-leakyrelu.mish": {"sp", "th", "mul"}}


def test_shape_mismatch_rejects_a_profile_sequence():
    rows = [OpRow("sig", "Sigmoid", 5, input_shapes="1,64,1,1", output_shapes="1,64,1,1"),
            OpRow("mul", "Mul", 10, input_shapes="1,64,32,32;1,64,1,1", output_shapes="1,64,32,32")]
    assert run_kb(MishLeakyReluKB, make_profile(rows), None)[0] == []


def test_graph_only_reports_without_timing():
    case = activations_case()
    findings, status = run_kb(MishLeakyReluKB, None, case.net.graph())
    assert status.status == "ok"
    assert all(f.severity == "info" and f.estimated_saving_us == 0 for f in findings)
    assert ops_by_rule(findings) == expected_for(case, "mish-leakyrelu.")


def test_patterns_are_data_a_rules_file_adds_one(tmp_path):
    """Softsign = x / (1 + |x|): Abs -> Add -> Div(x, .), added by a user's rules file only."""
    overrides = {"rules": {"mish-leakyrelu": {"patterns": {"softsign": {
        "rule": "softsign", "function": "Softsign", "native_op": "Softsign", "native_socs": ["*"],
        "estimate_from": ["Softsign"], "native_cost_factor": 1.0,
        "forms": [{"name": "abs-add-div", "steps": ["Abs", "Add|Adds", "Div|RealDiv"], "links": [[2, "x"]]}]}}}}}
    rules = load_rules(override=overrides)
    n = Net("softsign")
    t = nchw(8, 4, 4)
    n.op("x", "Data", outs=[t])
    n.op("abs", "Abs", "x", [t], [t], 4.0)
    n.op("add", "Adds", "abs", [t], [t], 4.0)
    n.op("div", "RealDiv", ["x", "add"], [t, t], [t], 4.0)
    found = _by_rule(run_kb(MishLeakyReluKB, n.profile(), n.graph(), rules)[0])
    assert set(found) == {"mish-leakyrelu.softsign"}
    assert set(found["mish-leakyrelu.softsign"].ops) == {"abs", "add", "div"}
    assert found["mish-leakyrelu.softsign"].fix.data == {"native_op": "Softsign"}
    # the built-in rules know nothing of it
    assert run_kb(MishLeakyReluKB, n.profile(), n.graph())[0] == []


def test_invalid_pattern_in_a_rules_file_is_rejected(tmp_path):
    from advisor.common.errors import RulesError

    bad = {"rules": {"mish-leakyrelu": {"patterns": {"x": {"rule": "x", "function": "X", "native_op": "X",
                                                           "native_socs": ["*"], "estimate_from": [],
                                                           "native_cost_factor": 1.0,
                                                           "forms": [{"name": "f", "steps": ["Abs; Add"]}]}}}}}
    with pytest.raises(RulesError):
        load_rules(override=bad)


def test_rule_docs_are_complete():
    rules = load_rules().for_kb("mish-leakyrelu")
    assert {r.id for r in MishLeakyReluKB.rules} == {f"mish-leakyrelu.{p['rule']}" for p in rules["patterns"].values()}
    for r in MishLeakyReluKB.rules:
        assert r.what and r.why and r.how_to_fix
        assert all(k in rules for k in r.thresholds), r.id


# ---------------------------------------------------------------------------------------------------------
# ONNX models: the finding's fix closes the loop
# ---------------------------------------------------------------------------------------------------------
def _mish_swish_onnx(path: Path) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 8, 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 8, 8])
    w = helper.make_tensor("w", TensorProto.FLOAT, [16, 16, 1, 1], np.full(256, 0.01, dtype=np.float32))
    nodes = [helper.make_node("Conv", ["x", "w"], ["c"], name="conv"),
             helper.make_node("Softplus", ["c"], ["s"], name="sp"),
             helper.make_node("Tanh", ["s"], ["t"], name="th"),
             helper.make_node("Mul", ["c", "t"], ["m"], name="mul"),
             helper.make_node("Sigmoid", ["m"], ["g"], name="sig"),
             helper.make_node("Mul", ["m", "g"], ["y"], name="mul2")]
    model = helper.make_model(helper.make_graph(nodes, "g", [x], [y], [w]),
                              opset_imports=[helper.make_opsetid("", 13)])
    onnx.save(model, path)
    return path


def test_onnx_model_and_the_mish_rewrite_closes_the_loop(tmp_path):
    import onnx

    path = _mish_swish_onnx(tmp_path / "m.onnx")
    findings, status = run_kb(MishLeakyReluKB, None, load_graph(path))
    assert status.status == "ok"
    f = _by_rule(findings)
    assert set(f["mish-leakyrelu.mish"].ops) == {"sp", "th", "mul"}
    assert set(f["mish-leakyrelu.swish"].ops) == {"sig", "mul2"}
    fix = f["mish-leakyrelu.mish"].fix
    result = rewrites.get(fix.data["rule"]).apply(onnx.load(path), fix.data["params"])
    assert result.changed
    onnx.save(result.model, tmp_path / "fixed.onnx")
    after = ops_by_rule(run_kb(MishLeakyReluKB, None, load_graph(tmp_path / "fixed.onnx"))[0])
    assert "mish-leakyrelu.mish" not in after and "mish-leakyrelu.swish" in after


# ---------------------------------------------------------------------------------------------------------
# real files
# ---------------------------------------------------------------------------------------------------------
def test_real_megatron_profile_has_no_decomposed_activation():
    """A Megatron GPT profile on 910B uses fused kernels (no Softplus/Tanh/Mul chains): nothing to report."""
    if not MEGATRON.exists():
        pytest.skip("shared samples not available")
    from advisor.ingest import load

    profile = load(MEGATRON)[0]
    assert len(profile.ops) > 2000
    findings, status = run_kb(MishLeakyReluKB, profile, None, chip="Ascend910B2")
    assert status.status == "ok" and findings == []


# ---------------------------------------------------------------------------------------------------------
# advice fitted to the run: the kernels of the execution context, the chip and the CANN release
# ---------------------------------------------------------------------------------------------------------
def _mish_for(context, chip="Ascend310P3", cann="8.1.RC1"):
    case = activations_case()
    profile = case.net.profile(context=context, cann_version=cann)
    profile.meta.chip = chip
    findings, _ = run_kb(MishLeakyReluKB, profile, None, chip=chip)
    return _by_rule(findings)


def test_same_mish_two_contexts_two_fixes():
    """One decomposed Mish on a 310P3 with CANN 8.1: an offline model (ATC op set: native Mish) is told to export
    Mish as one op; a torch_npu eager run (aclnn kernels: no Mish on 310P) is told to use LeakyReLU in its code --
    never the ONNX rewrite, which has no model to rewrite there."""
    om = _mish_for("om-acl")["mish-leakyrelu.mish"]
    assert om.evidence["native_kernel_on_soc"] is True and "opset_version=18" in om.fix.data["snippet"]
    assert "torch_npu" not in om.recommendation
    eager = _mish_for("torch-eager")["mish-leakyrelu.mish"]
    assert eager.evidence["native_kernel_on_soc"] is False and "aclnn" in eager.evidence["native_kernel_reason"]
    assert eager.fix.kind == "code" and "torch.nn.LeakyReLU(negative_slope=0.1)" in eager.fix.data["snippet"]
    assert "advisor fix" not in eager.recommendation + str(eager.fix.to_dict())
    a2 = _mish_for("torch-eager", chip="Ascend910B2")["mish-leakyrelu.mish"]
    assert "torch.nn.functional.mish" in a2.fix.data["snippet"] and a2.confidence > eager.confidence
    ms = _mish_for("mindspore-graph")["mish-leakyrelu.mish"]
    assert "mindspore.ops.mish" in ms.fix.data["snippet"] and "torch" not in ms.recommendation


def test_swish_without_any_native_kernel_for_the_run_is_not_a_finding():
    """torch_npu eager on a 310P: aclnn has neither Swish nor HardSwish there -- nothing to change, so no cause;
    the knowledge base says so in a note."""
    found = _mish_for("torch-eager")
    assert "mish-leakyrelu.swish" not in found and "mish-leakyrelu.hardswish" not in found
    assert "mish-leakyrelu.gelu" in found and "torch.nn.functional.gelu" in found["mish-leakyrelu.gelu"].fix.data[
        "snippet"]


def test_rules_are_causes_and_confidences_come_from_the_rules(tmp_path):
    assert {r.role for r in MishLeakyReluKB.rules} == {"cause"}
    rules = load_rules(override={"rules": {"mish-leakyrelu": {"confidence": {"replacement": 0.42}}}})
    case = activations_case()
    f = _by_rule(run_kb(MishLeakyReluKB, _profile_on(case, "5.1.RC2"), case.net.graph(), rules)[0])
    assert f["mish-leakyrelu.mish"].confidence == pytest.approx(0.42)
    doc = MishLeakyReluKB.rule("mish-leakyrelu.mish").render(rules.for_kb("mish-leakyrelu"))
    assert "LeakyRelu(negative_slope=0.1)" in doc.how_to_fix
