"""The transdata knowledge base: counts, categories, forcing ops, round trips, fixes -- on labeled scenarios and
on real files (a torch_npu eager CNN profile, an ATC OM JSON of ResNet-101)."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.graph.load import load_graph
from advisor.knowledge_bases.transdata import TransDataKB
from advisor.testing import load_rules
from tests.scenarios.builder import OpRow, make_profile
from tests.scenarios.cases_a import (
    ALL_CASES,
    Net,
    expected_for,
    fz,
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
def _all_by_rule(findings):
    out = {}
    for f in findings:
        out.setdefault(f.rule, []).append(f)
    return out


def test_forcing_ops_and_categories_are_named():
    case = transdata_case()
    findings = run_kb(TransDataKB, case.net.profile(), case.net.graph())[0]
    f = _by_rule(findings)
    unsupported = f["transdata.unsupported-format"]
    assert unsupported.evidence["forcing_ops"] == {"ResizeBilinearV2": ["resize"]}
    assert unsupported.title.startswith("2 TransData forced by ResizeBilinearV2 (Ops_Not_Support_Heavy_Format)")
    assert "resize" in unsupported.recommendation
    reshape = f["transdata.reshape-interrupts"]
    assert reshape.evidence["forcing_ops"] == {"Flatten": ["flat"]}
    # one cause per op type that wants the other private format, past the partner conversion
    hdnz = _all_by_rule(findings)["transdata.5hd-nz"]
    assert {k: v for h in hdnz for k, v in h.evidence["forcing_ops"].items()} == {"BatchMatMulV2": ["head2"],
                                                                                   "Conv2D": ["conv4"]}
    assert all("1x1 Conv2D" in h.fix.summary for h in hdnz)
    # no two findings share a title, and every conversion belongs to one cause
    assert len({x.title for x in findings}) == len(findings)
    causes = [x for x in findings if x.rule != "transdata.count"]
    owned = [op for x in causes for op in x.saving_by_op]
    assert len(owned) == len(set(owned))
    count = f["transdata.count"]
    assert count.evidence["categories"] == {"Other_Transform": 3, "Ops_Not_Support_Heavy_Format": 4,
                                            "Redundant_Pair": 2, "Reshape_Ops_Interrupts_Format": 2,
                                            "Transform_Between_5HD_And_NZ": 2}
    assert count.evidence["count"] == 13


def test_savings_follow_the_category_fractions_and_round_trips():
    """Each conversion's time is claimed by one cause: the KB's savings add up to at most the conversions' time
    (the old overview claimed the Relu pair twice, as a round trip and as Ops_Not_Support)."""
    case = transdata_case()
    findings = run_kb(TransDataKB, case.net.profile(), case.net.graph())[0]
    by = _all_by_rule(findings)
    # Ops_Not_Support: 100 % of trans_TransData_1/2 (20 + 21)
    assert by["transdata.unsupported-format"][0].estimated_saving_us == pytest.approx(41.0)
    # 5HD <-> NZ: half of 6.5 + 5.5, over its two causes
    assert sum(x.estimated_saving_us for x in by["transdata.5hd-nz"]) == pytest.approx(6.0)
    # round trips: both ops of each exact pair; the cancelling pair and the one around Relu are two causes
    bare = next(x for x in by["transdata.roundtrip"] if not x.evidence["between_types"])
    relu = next(x for x in by["transdata.roundtrip"] if x.evidence["between_types"] == ["Relu"])
    assert bare.saving_by_op == pytest.approx({"trans_TransData_3": 19.0, "trans_TransData_4": 18.0})
    assert relu.saving_by_op == pytest.approx({"trans_TransData_8": 17.0, "trans_TransData_9": 16.0})
    assert bare.title == "1 format round trip(s) that cancel"
    # the count is a symptom: it names the avoidable conversions and claims no time of its own
    count = by["transdata.count"][0]
    assert count.estimated_saving_us == 0 and not count.saving_by_op
    assert "trans_TransData_0" not in count.ops  # model input: unavoidable
    # + the Flatten's two conversions (6 + 5): 128 us of the 142 us of avoidable conversions (5HD <-> NZ: half)
    assert sum(x.estimated_saving_us for x in findings) == pytest.approx(41.0 + 6.0 + 37.0 + 33.0 + 11.0)


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
    rules = load_rules(override={"rules": {"transdata": {"max_count": 50, "max_share": 1.0}}})
    f = _by_rule(run_kb(TransDataKB, case.net.profile(), case.net.graph(), rules)[0])
    assert "transdata.count" not in f
    assert "transdata.roundtrip" in f  # the other rules do not depend on the count


def test_saving_fraction_override(tmp_path):
    case = transdata_case()
    rules = load_rules(override={"rules": {"transdata": {"saving_fraction": {"Ops_Not_Support_Heavy_Format": 0.5}}}})
    f = _by_rule(run_kb(TransDataKB, case.net.profile(), case.net.graph(), rules)[0])
    assert f["transdata.unsupported-format"].estimated_saving_us == pytest.approx(20.5)


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
                   "transdata.5hd-nz", "transdata.roundtrip", "transdata.format-policy"}
    rules = load_rules().for_kb("transdata")
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
    weights are converted to FRACTAL_Z each step. The round trips around Relu, the back-to-back pairs and the
    exits into ReluGrad have one cause -- eager mode's plain formats between ops -- and one fix (graph mode): one
    finding, not one per op beside the conversions (issue 28)."""
    profile = _load_profile(EAGER_CNN)
    assert profile.meta.context == "torch-eager"
    findings, status = run_kb(TransDataKB, profile, None)
    assert status.status == "ok"
    by = _all_by_rule(findings)
    count = by["transdata.count"][0]
    assert count.evidence["count"] == 57  # TransData tasks in step 50
    assert count.evidence["count_basis"] == "per step"
    assert set(by) == {"transdata.format-policy", "transdata.count"}
    [policy] = by["transdata.format-policy"]
    assert policy.title == ("9 round trip(s) and 3 conversion(s) forced by eager mode's plain formats between ops "
                            "(around Relu, back to back, beside ReluGrad)")
    rows = {r[0]: r for r in policy.evidence["table"]["rows"]}
    pair = rows["trans_TransData_8 > trans_TransData_9"]
    assert pair[2] == "round trip around Relu" and pair[3] == "yes"
    assert policy.evidence["forcing_ops"] == {"ReluGrad": ["aclnnThresholdBackward_ReluGrad_ReluGrad"]}
    assert "trans_TransData_0" not in policy.ops  # the model input: unavoidable
    # weights converted at run time: private formats are not kept between ops in this eager run -- the fix is graph
    # mode (torchair), never allow_internal_format = True
    for f in findings:
        if f.fix is not None:
            assert "torchair" in f.fix.data["snippet"] and "allow_internal_format" not in str(f.fix.to_dict())
    # each conversion task is claimed once: the cause holds all the avoidable conversions' saving
    assert policy.estimated_saving_us == pytest.approx(count.evidence["avoidable_us"])
    assert count.evidence["avoidable_us"] <= count.evidence["transdata_us"]


def test_real_om_json_resnet101_graph():
    if not RESNET101_OM.exists():
        pytest.skip("shared samples not available")
    graph = load_graph(RESNET101_OM)
    findings, status = run_kb(TransDataKB, None, graph)
    assert status.status == "ok"
    f = _by_rule(findings)
    # input NCHW -> 5HD and output NZ -> ND are unavoidable; the 5HD -> NCHW -> NZ hop before the FC is not
    assert f["transdata.count"].evidence["categories"] == {"Other_Transform": 2, "Transform_Between_5HD_And_NZ": 2}
    hdnz = _all_by_rule(findings)["transdata.5hd-nz"]
    assert {op for h in hdnz for op in h.ops} == {"trans_TransData_316", "trans_TransData_317"}
    assert {k: v for h in hdnz for k, v in h.evidence["forcing_ops"].items()} == {
        "MatMulV2": ["Gemm_353"], "ReduceMeanD": ["GlobalAveragePool_342"]}
    assert "transdata.roundtrip" not in f


# ---------------------------------------------------------------------------------------------------------
# advice fitted to the run; roles
# ---------------------------------------------------------------------------------------------------------
def _view_between_convs(weights_converted: bool) -> Net:
    """conv -> TransData -> Flatten-like view -> TransData -> conv (Reshape_Ops_Interrupts_Format), optionally
    with a weight converted to FRACTAL_Z at run time (what an eager run without kept private formats shows)."""
    n = Net("view")
    if weights_converted:
        n.op("w", "Const", outs=[nchw(64, 64, 3)])
        n.op("trans_w", "TransData", "w", [nchw(64, 64, 3)], [fz(64, 64, 3, 3)], 9.0)
    n.op("conv", "Conv2D", None, [hd(64, 8, 8)], [hd(64, 8, 8)], 50.0)
    n.op("t1", "TransData", "conv", [hd(64, 8, 8)], [nchw(64, 8, 8)], 10.0)
    n.op("view", "Transpose", "t1", [nchw(64, 8, 8)], [nchw(64, 8, 8)], 2.0)
    n.op("t2", "TransData", "view", [nchw(64, 8, 8)], [hd(64, 8, 8)], 10.0)
    n.op("conv2", "Conv2D", "t2", [hd(64, 8, 8)], [hd(64, 8, 8)], 50.0)
    return n


def _reshape_finding(context: str, weights_converted: bool = False):
    """The finding on the view's conversions: the view's own (reshape-interrupts), or the run's format policy when
    a run-wide setting is the fix (format-policy)."""
    n = _view_between_convs(weights_converted)
    findings, _ = run_kb(TransDataKB, n.profile(context=context), None)
    [f] = [f for f in findings if f.rule in ("transdata.reshape-interrupts", "transdata.format-policy")]
    return f


def test_same_view_problem_fixed_the_way_each_run_can():
    om = _reshape_finding("om-acl")
    assert "before ATC conversion" in om.recommendation and "contiguous" not in om.recommendation
    assert "torch" not in str(om.fix.to_dict())
    graph_mode = _reshape_finding("torch-graph")
    assert ".contiguous()" in graph_mode.fix.data["snippet"]
    kept = _reshape_finding("torch-eager")  # private formats kept between ops and leaking into the view
    assert kept.rule == "transdata.format-policy" and kept.evidence["change"] == "internal-format-off"
    assert kept.fix.data == {"setting": "torch.npu.config.allow_internal_format", "value": False,
                             "snippet": "import torch_npu\ntorch.npu.config.allow_internal_format = False"}
    not_kept = _reshape_finding("torch-eager", weights_converted=True)  # nothing kept: the view op is to move
    assert not_kept.rule == "transdata.reshape-interrupts"
    assert "allow_internal_format" not in str(not_kept.fix.to_dict()) and "view" in not_kept.fix.summary


def test_allow_internal_format_is_only_ever_advised_false_and_only_for_torch():
    import re

    for context in ("om-acl", "torch-eager", "torch-graph", "mindspore-graph", "unknown"):
        for weights in (False, True):
            for case_net in (_view_between_convs(weights), transdata_case().net):
                findings, _ = run_kb(TransDataKB, case_net.profile(context=context), None)
                text = " ".join(f.recommendation + str(f.fix.to_dict() if f.fix else "") for f in findings)
                assert not re.search(r"allow_internal_format\W+True", text), (context, weights)
                if not context.startswith("torch"):
                    assert "allow_internal_format" not in text and "torch_npu" not in text, context


def test_count_is_a_symptom_folded_under_the_sites():
    from advisor.pipeline.hierarchy import absorb, mechanisms_of

    roles = {r.id: r.role for r in TransDataKB.rules}
    assert roles["transdata.count"] == "symptom"
    assert {v for k, v in roles.items() if k != "transdata.count"} == {"cause"}
    case = transdata_case()
    findings = run_kb(TransDataKB, case.net.profile(), case.net.graph())[0]
    top = absorb(findings, roles, None, mechanisms_of(TransDataKB.rules))
    assert "transdata.count" not in {f.rule for f in top}
    folded = [s for f in top for s in f.symptoms if s["rule"] == "transdata.count"]
    assert {op for s in folded for op in s["ops"]} == case.expected["transdata.count"]
    # absorbing the count grows no cause: it carries no time of its own
    assert sum(f.estimated_saving_us for f in top) == pytest.approx(sum(f.estimated_saving_us for f in findings))
