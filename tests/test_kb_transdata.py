"""The transdata knowledge base: counts, categories, forcing ops, round trips, fixes -- on labeled scenarios and
on real files (a torch_npu eager CNN profile, an ATC OM JSON of ResNet-101)."""

from __future__ import annotations

from pathlib import Path

import pytest

from knowledge_bases.transdata import TransDataKB
from tests.scenarios.builder import OpRow, make_profile
from tests.scenarios.cases_a import (
    ALL_CASES,
    Net,
    effective_rules,
    expected_for,
    hd,
    nchw,
    ops_by_rule,
    run_kb,
    transdata_case,
)

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
EAGER_CNN = SAMPLES / "Ascend__msinsight/test/data/pytorch/text/level1/rank0_ascend_pt"
RESNET101_OM = SAMPLES / "Ascend__samples/python/level1_single_api/9_amct/amct_onnx/resnet-101/src/nuq_conf/resnet-101_quantized.json"


def _by_rule(findings):
    return {f.rule: f for f in findings}


# ---------------------------------------------------------------------------------------------------------
# scenario corpus: exactly the injected ops, with and without the graph
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", ALL_CASES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("with_graph", [True, False], ids=["graph", "profile-only"])
def test_scenarios_flag_exactly_the_injected_ops(make, with_graph):
    case = make()
    graph = case.net.graph() if with_graph else None
    findings, status = run_kb(TransDataKB, case.net.profile(repeat=2), graph)
    assert status.status == "ok", status.reason
    assert ops_by_rule(findings, "transdata.") == expected_for(case, "transdata.")


def test_clean_model_is_quiet_even_though_io_conversions_are_a_large_share():
    case = [m for m in ALL_CASES if m.__name__ == "clean_case"][0]()
    findings, _ = run_kb(TransDataKB, case.net.profile(), case.net.graph())
    assert findings == []


# ---------------------------------------------------------------------------------------------------------
# classification and forcing ops
# ---------------------------------------------------------------------------------------------------------
def test_forcing_ops_and_categories_are_named():
    case = transdata_case()
    f = _by_rule(run_kb(TransDataKB, case.net.profile(), case.net.graph())[0])
    unsupported = f["transdata.unsupported-format"]
    assert unsupported.evidence["forcing_ops"] == {"ResizeBilinearV2": ["resize"], "Relu": ["relu"]}
    assert "resize" in unsupported.recommendation and "Elementwise" in unsupported.recommendation
    reshape = f["transdata.reshape-interrupts"]
    assert reshape.evidence["forcing_ops"] == {"Flatten": ["flat"]}
    hdnz = f["transdata.5hd-nz"]
    # the op that wants the other private format, past the partner conversion
    assert hdnz.evidence["forcing_ops"] == {"BatchMatMulV2": ["head2"], "Conv2D": ["conv4"]}
    assert "1x1 Conv2D" in hdnz.fix.summary
    count = f["transdata.count"]
    assert count.evidence["categories"] == {"Other_Transform": 3, "Ops_Not_Support_Heavy_Format": 4,
                                            "Redundant_Pair": 2, "Reshape_Ops_Interrupts_Format": 2,
                                            "Transform_Between_5HD_And_NZ": 2}
    assert count.evidence["count"] == 13


def test_savings_follow_the_category_fractions_and_round_trips():
    case = transdata_case()
    f = _by_rule(run_kb(TransDataKB, case.net.profile(), case.net.graph())[0])
    # Ops_Not_Support: 100 % of trans_TransData_1/2/8/9 (20 + 21 + 17 + 16)
    assert f["transdata.unsupported-format"].estimated_saving_us == pytest.approx(74.0)
    # 5HD <-> NZ: half of 6.5 + 5.5
    assert f["transdata.5hd-nz"].estimated_saving_us == pytest.approx(6.0)
    # round trips: both ops of each exact pair (19 + 18, 17 + 16)
    rt = f["transdata.roundtrip"]
    assert rt.estimated_saving_us == pytest.approx(70.0)
    assert rt.saving_by_op == pytest.approx({"trans_TransData_3": 19.0, "trans_TransData_4": 18.0,
                                             "trans_TransData_8": 17.0, "trans_TransData_9": 16.0})
    # the overview never counts an op twice: per op the larger of category and round-trip savings
    count = f["transdata.count"]
    assert count.saving_by_op["trans_TransData_8"] == pytest.approx(17.0)
    assert count.estimated_saving_us == pytest.approx(sum(count.saving_by_op.values()))
    assert "trans_TransData_0" not in count.saving_by_op  # model input: unavoidable


def test_round_trip_whose_shapes_differ_saves_only_the_cheaper_conversion():
    n = Net("c0")
    n.op("a", "Conv2D", None, [hd(64, 8, 8)], [hd(64, 8, 8)], 50.0)
    n.op("t1", "TransData", "a", [hd(64, 8, 8)], [nchw(64, 8, 8)], 10.0)
    # back to 5HD with another C0 (as torch_npu's NC1HWC0:1 variant): not an exact inverse
    other_c0 = {"format": "NC1HWC0:1", "origin_format": "NCHW", "dtype": "FLOAT16", "shape": [1, 8, 8, 8, 8],
                "origin_shape": [1, 64, 8, 8]}
    n.op("t2", "TransData", "t1", [nchw(64, 8, 8)], [other_c0], 7.0)
    n.op("b", "Conv2D", "t2", [other_c0], [hd(64, 8, 8)], 50.0)
    f = _by_rule(run_kb(TransDataKB, n.profile(), None)[0])
    rt = f["transdata.roundtrip"]
    assert rt.estimated_saving_us == pytest.approx(7.0)
    assert rt.evidence["table"]["rows"][0][4].startswith("no")


def test_entry_and_exit_around_a_private_format_op_at_the_model_edge():
    """NCHW -> 5HD -> conv -> 5HD -> NCHW is the normal way in and out of a conv, not a round trip; and with
    plain-format ops only before and after it, the conversions would move, not go (Other_Transform)."""
    n = Net("around")
    n.op("pre", "Softsign", None, [nchw(64, 8, 8)], [nchw(64, 8, 8)], 5.0)
    n.op("t1", "TransData", "pre", [nchw(64, 8, 8)], [hd(64, 8, 8)], 10.0)
    n.op("conv", "Conv2D", "t1", [hd(64, 8, 8)], [hd(64, 8, 8)], 50.0)
    n.op("t2", "TransData", "conv", [hd(64, 8, 8)], [nchw(64, 8, 8)], 10.0)
    n.op("post", "Softsign", "t2", [nchw(64, 8, 8)], [nchw(64, 8, 8)], 5.0)
    for graph in (n.graph(), None):
        assert run_kb(TransDataKB, n.profile(), graph)[0] == []


def test_plain_op_behind_a_view_between_convs_is_the_forcing_op():
    """conv -> TransData -> Reshape -> Softmax -> Reshape -> TransData -> conv: Softmax works in ND."""
    flat = {"format": "ND", "origin_format": "ND", "dtype": "FLOAT16", "shape": [1, 64, 64], "origin_shape": [1, 64, 64]}
    n = Net("view")
    n.op("conv", "Conv2D", None, [hd(64, 8, 8)], [hd(64, 8, 8)], 50.0)
    n.op("t1", "TransData", "conv", [hd(64, 8, 8)], [nchw(64, 8, 8)], 10.0)
    n.op("r1", "Reshape", "t1", [nchw(64, 8, 8)], [flat], 1.0)
    n.op("sm", "SoftmaxV2", "r1", [flat], [flat], 8.0)
    n.op("r2", "Reshape", "sm", [flat], [nchw(64, 8, 8)], 1.0)
    n.op("t2", "TransData", "r2", [nchw(64, 8, 8)], [hd(64, 8, 8)], 10.0)
    n.op("conv2", "Conv2D", "t2", [hd(64, 8, 8)], [hd(64, 8, 8)], 50.0)
    for graph in (n.graph(), None):
        f = _by_rule(run_kb(TransDataKB, n.profile(), graph)[0])
        assert set(f) == {"transdata.count", "transdata.unsupported-format"}  # count: avoidable share > 2 %
        assert f["transdata.unsupported-format"].evidence["forcing_ops"] == {"SoftmaxV2": ["sm"]}


def test_reshape_before_the_model_output_is_not_an_interruption():
    n = Net("tail")
    n.op("x", "Data", outs=[nchw(64, 7, 7)])
    n.op("t0", "TransData", "x", [nchw(64, 7, 7)], [hd(64, 7, 7)], 3.0)
    n.op("conv", "Conv2D", "t0", [hd(64, 7, 7)], [hd(64, 7, 7)], 50.0)
    n.op("t1", "TransData", "conv", [hd(64, 7, 7)], [nchw(64, 7, 7)], 4.0)
    n.op("flat", "Reshape", "t1", [nchw(64, 7, 7)], [{"format": "ND", "origin_format": "ND", "dtype": "FLOAT16",
                                                      "shape": [1, 3136], "origin_shape": [1, 3136]}], 1.0)
    n.op("out", "NetOutput", "flat")
    findings, _ = run_kb(TransDataKB, n.profile(), n.graph())
    assert not any(f.rule == "transdata.reshape-interrupts" for f in findings)


def test_count_threshold_comes_from_the_rules_file(tmp_path):
    case = transdata_case()
    # everything above the threshold: the overview fires
    assert "transdata.count" in _by_rule(run_kb(TransDataKB, case.net.profile(), case.net.graph())[0])
    rules = effective_rules({"rules": {"transdata": {"max_count": 50, "max_share": 1.0}}}, tmp_path)
    f = _by_rule(run_kb(TransDataKB, case.net.profile(), case.net.graph(), rules)[0])
    assert "transdata.count" not in f
    assert "transdata.roundtrip" in f  # the other rules do not depend on the count


def test_saving_fraction_override(tmp_path):
    case = transdata_case()
    rules = effective_rules({"rules": {"transdata": {"saving_fraction": {"Ops_Not_Support_Heavy_Format": 0.5}}}},
                            tmp_path)
    f = _by_rule(run_kb(TransDataKB, case.net.profile(), case.net.graph(), rules)[0])
    assert f["transdata.unsupported-format"].estimated_saving_us == pytest.approx(37.0)


def test_graph_only_reports_without_timing():
    case = transdata_case()
    findings, status = run_kb(TransDataKB, None, case.net.graph())
    assert status.status == "ok"
    f = _by_rule(findings)
    assert f["transdata.unsupported-format"].severity == "info"
    assert f["transdata.unsupported-format"].estimated_saving_us == 0
    assert f["transdata.unsupported-format"].basis.startswith("no timing")


def test_profile_without_shapes_still_classifies_with_lower_confidence():
    rows = [OpRow("conv", "Conv2D", 50, output_formats="NC1HWC0"),
            OpRow("t1", "TransData", 10, input_formats="NC1HWC0", output_formats="NCHW"),
            OpRow("resize", "ResizeBilinearV2", 5, input_formats="NCHW", output_formats="NCHW"),
            OpRow("t2", "TransData", 10, input_formats="NCHW", output_formats="NC1HWC0"),
            OpRow("conv2", "Conv2D", 50, input_formats="NC1HWC0")]
    f = _by_rule(run_kb(TransDataKB, make_profile(rows), None)[0])
    assert f["transdata.unsupported-format"].ops == ["t1", "t2"]
    assert f["transdata.unsupported-format"].confidence == pytest.approx(0.5)


def test_empty_profile_and_no_conversions():
    findings, status = run_kb(TransDataKB, make_profile([OpRow("conv", "Conv2D", 10)]), None)
    assert status.status == "ok" and findings == []


def test_rule_docs_are_complete():
    ids = {r.id for r in TransDataKB.rules}
    assert ids == {"transdata.count", "transdata.unsupported-format", "transdata.reshape-interrupts",
                   "transdata.5hd-nz", "transdata.roundtrip"}
    rules = effective_rules().for_kb("transdata")
    for r in TransDataKB.rules:
        assert r.what and r.why and r.how_to_fix
        assert all(k in rules for k in r.thresholds), r.id


# ---------------------------------------------------------------------------------------------------------
# real files
# ---------------------------------------------------------------------------------------------------------
def _load_profile(path: Path):
    if not path.exists():
        pytest.skip(f"{path} not available")
    from advisor.ingest import load

    return load(path)[0]


def test_real_torch_npu_eager_cnn_profile():
    """AlexNet-like training on 910B in eager mode: every conv output goes back to NCHW for Relu and the
    weights are converted to FRACTAL_Z each step."""
    profile = _load_profile(EAGER_CNN)
    findings, status = run_kb(TransDataKB, profile, None)
    assert status.status == "ok"
    f = _by_rule(findings)
    assert f["transdata.count"].evidence["count"] == 57  # TransData tasks in step 50
    assert f["transdata.count"].evidence["count_basis"] == "per step"
    unsupported = f["transdata.unsupported-format"]
    assert set(unsupported.evidence["forcing_ops"]) == {"Relu", "ReluGrad"}
    assert "trans_TransData_8" in unsupported.ops and "trans_TransData_0" not in unsupported.ops
    # torch_npu eager with weights converted at run time: the private-format policy is off -> suggest True
    assert unsupported.fix.data["setting"] == "torch.npu.config.allow_internal_format"
    assert unsupported.fix.data["value"] is True
    rows = f["transdata.roundtrip"].evidence["table"]["rows"]
    pair = [r for r in rows if r[0] == "trans_TransData_8" and r[1] == "trans_TransData_9"]
    assert pair and pair[0][3].startswith("aclnnInplaceRelu_Relu_Relu") and pair[0][4] == "yes"
    # savings stay within the conversions' own time
    assert f["transdata.count"].estimated_saving_us <= f["transdata.count"].evidence["transdata_us"]


def test_real_om_json_resnet101_graph():
    if not RESNET101_OM.exists():
        pytest.skip("shared samples not available")
    load_graph = pytest.importorskip("advisor.graph.load").load_graph
    graph = load_graph(RESNET101_OM)
    findings, status = run_kb(TransDataKB, None, graph)
    assert status.status == "ok"
    f = _by_rule(findings)
    # input NCHW -> 5HD and output NZ -> ND are unavoidable; the 5HD -> NCHW -> NZ hop before the FC is not
    assert f["transdata.count"].evidence["categories"] == {"Other_Transform": 2, "Transform_Between_5HD_And_NZ": 2}
    hdnz = f["transdata.5hd-nz"]
    assert set(hdnz.ops) == {"trans_TransData_316", "trans_TransData_317"}
    assert hdnz.evidence["forcing_ops"] == {"MatMulV2": ["Gemm_353"], "ReduceMeanD": ["GlobalAveragePool_342"]}
    assert "transdata.roundtrip" not in f
