"""aipp-fusion: input preprocessing before the first convolution that static AIPP can absorb."""

from __future__ import annotations

import math

import pytest

from advisor import ingest
from advisor.graph.model_graph import ModelGraph
from advisor.knowledge_bases.aipp_fusion import AippFusionKB
from advisor.testing import load_rules
from tests.scenarios import cases_b as cases
from tests.scenarios.builder import GraphBuilder, desc

KB = "aipp-fusion"
INSERT_OP_PROTO = cases.SAMPLES.parent / "reference" / "metadef_insert_op.proto"
RESNET101 = "Ascend__samples/python/level1_single_api/9_amct/amct_onnx/resnet-101/src/nuq_conf/resnet-101_quantized.json"
RESNET50_TF = ("Ascend__samples/python/level1_single_api/9_amct/amct_tensorflow/resnet-50_v1/src/nuq_conf/"
               "resnet-50_v1_quantized.json")
RESNET50_CAFFE = "Ascend__samples/python/level1_single_api/9_amct/amct_caffe/resnet50/src/nuq_files/resnet50_om_model.json"
NMS_SUBMODEL = "Ascend__msit/msit/test/UT/resource/msquickcmp/om/model.json"
AFTER_UB_MATCH_AIPP = ("Ascend__msprof/hisi/air/test/engines/nneng/st/testcase/graph_optimizer/"
                       "ge_proto_00026_afterUBMatch.txt")



def run(profile, graph, rules, chip=cases.CHIP):
    findings, statuses = cases.run_kbs([AippFusionKB], profile, graph, rules, chip)
    assert statuses[0].status == "ok", statuses[0].reason
    return findings, statuses[0]


# --- labeled scenarios ------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", cases.SCENARIOS, ids=lambda f: f.__name__)
def test_scenario_corpus_flags_exactly_the_injected_ops(make, rules):
    sc = make()
    findings, _ = run(sc.profile, sc.graph, rules, sc.chip)
    assert cases.flagged(findings, KB) == sc.expected[KB]


def test_config_values_come_from_the_graph_constants(rules):
    sc = cases.preprocess_graph()
    [f] = run(sc.profile, sc.graph, rules)[0]
    p = f.fix.data["aipp_op"]
    assert f.fix.kind == "aipp-config"
    assert (p["aipp_mode"], p["input_format"], p["related_input_rank"]) == ("static", "RGB888_U8", 0)
    assert (p["src_image_size_w"], p["src_image_size_h"]) == (224, 224)
    assert p["csc_switch"] is False
    # the model reverses the channels after normalizing: AIPP swaps first, so the constants follow the swap
    assert p["rbuv_swap_switch"] is True
    for i, src in enumerate([2, 1, 0]):
        assert p[f"mean_chn_{i}"] + p[f"min_chn_{i}"] == pytest.approx(cases.MEAN[src], abs=1e-6)
        assert p[f"var_reci_chn_{i}"] == pytest.approx(1 / cases.STD[src], rel=1e-6)
    assert p["mean_chn_0"] == 103 and p["min_chn_0"] == pytest.approx(0.53)
    assert f.fix.data["flags"] == ["--insert_op_conf=aipp.cfg", "--enable_small_channel=1"]
    assert f.fix.command.endswith("--insert_op_conf=aipp.cfg --enable_small_channel=1")
    assert f.confidence == rules.for_kb(KB)["confidence"]["graph_with_constants"]
    assert "aipp_op {" in f.fix.data["text"] and "rbuv_swap_switch : true" in f.fix.data["text"]
    # the saving is the absorbed ops' device time less the residual AIPP cost
    ops = sc.profile.ops
    absorbed = ops[ops["name"].isin(cases.PREPROCESS_OPS)]["duration_us"].sum()
    assert f.estimated_saving_us == pytest.approx(absorbed * (1 - rules.for_kb(KB)["residual_fraction"]))
    assert f.evidence["subgraph"]["edges"][0] == ["data", "cast"]


def _normalize_graph(div_first: bool = True) -> ModelGraph:
    """uint8 NCHW input -> Cast -> Div(255) -> Sub(mean) -> Div(std) -> TransData -> Conv2D (torchvision style)."""
    b = GraphBuilder("torchvision_norm")
    x8 = desc("NCHW", "UINT8", [1, 3, 320, 256])
    x = desc("NCHW", "FLOAT", [1, 3, 320, 256])
    c3 = desc("NCHW", "FLOAT", [1, 3, 1, 1])
    b.node("input", "Data", outputs=[x8], engine="GE_LOCAL")
    b.node("cast", "Cast", after="input", inputs=[x8], outputs=[x])
    b.node("k255", "Const", outputs=[desc("ND", "FLOAT", [])], attrs={"value": 255.0}, engine="GE_LOCAL")
    b.node("scale", "RealDiv", after=["cast", "k255"], inputs=[x, desc("ND", "FLOAT", [])], outputs=[x])
    b.node("mean", "Const", outputs=[c3], attrs={"value": [0.485, 0.456, 0.406]}, engine="GE_LOCAL")
    b.node("sub", "Sub", after=["scale", "mean"], inputs=[x, c3], outputs=[x])
    b.node("std", "Const", outputs=[c3], attrs={"value": [0.229, 0.224, 0.225]}, engine="GE_LOCAL")
    b.node("div", "Div", after=["sub", "std"], inputs=[x, c3], outputs=[x])
    b.node("trans", "TransData", after="div", inputs=[x], outputs=[desc("NC1HWC0", "FLOAT16", [1, 1, 320, 256, 16])])
    b.node("conv", "Conv2D", after="trans", inputs=[desc("NC1HWC0", "FLOAT16", [1, 1, 320, 256, 16])],
           outputs=[desc("NC1HWC0", "FLOAT16", [1, 4, 160, 128, 16])], pass_name_ub="TbeConvCommonRules0FusionPass")
    return b.build()


def test_divide_by_255_then_mean_std_composes_into_one_affine_map(rules):
    [f] = run(cases.empty_profile(), _normalize_graph(), rules)[0]
    p = f.fix.data["aipp_op"]
    assert set(f.ops) == {"cast", "scale", "sub", "div", "trans"}
    assert (p["src_image_size_w"], p["src_image_size_h"]) == (256, 320)  # NCHW: W is the last dim
    assert p["rbuv_swap_switch"] is False
    for i, (m, s) in enumerate(zip([0.485, 0.456, 0.406], [0.229, 0.224, 0.225], strict=True)):
        assert p[f"mean_chn_{i}"] + p[f"min_chn_{i}"] == pytest.approx(m * 255, rel=1e-6)
        assert p[f"var_reci_chn_{i}"] == pytest.approx(1 / (255 * s), rel=1e-6)
    # no profile: a per-inference estimate from tensor sizes, graph-only severity
    assert f.severity == rules.for_kb(KB)["graph_only_severity"] and "per inference" in f.basis


def test_yuv_camera_gets_colour_space_conversion(rules, tmp_path):
    yuv = load_rules(override={"rules": {KB: {"source_image_format": "YUV420SP_U8"}}})
    sc = cases.preprocess_graph()
    [f] = run(sc.profile, sc.graph, yuv)[0]
    p = f.fix.data["aipp_op"]
    csc = yuv.for_kb(KB)["csc_yuv420sp"]
    assert p["input_format"] == "YUV420SP_U8" and p["csc_switch"] is True
    # the model wants BGR: the matrix's R and B output rows are exchanged instead of swapping U/V
    assert p["rbuv_swap_switch"] is False
    assert [p[f"matrix_r0c{c}"] for c in range(3)] == [csc[f"matrix_r2c{c}"] for c in range(3)]
    assert [p[f"matrix_r2c{c}"] for c in range(3)] == [csc[f"matrix_r0c{c}"] for c in range(3)]
    assert p["input_bias_1"] == csc["input_bias_1"]


@pytest.mark.parametrize("source", ["RGB888_U8", "YUV420SP_U8"])
def test_generated_text_parses_as_insert_op_proto(source, rules, insert_op_pb2, tmp_path):
    from google.protobuf import text_format

    r = load_rules(override={"rules": {KB: {"source_image_format": source}}})
    sc = cases.preprocess_graph()
    [f] = run(sc.profile, sc.graph, r)[0]
    msg = text_format.Parse(f.fix.data["text"], insert_op_pb2.InsertNewOps())
    [op] = msg.aipp_op
    params = f.fix.data["aipp_op"]
    assert insert_op_pb2.AippOpParams.AippMode.Name(op.aipp_mode) == "static"
    assert insert_op_pb2.AippOpParams.InputFormat.Name(op.input_format) == source
    assert (op.src_image_size_w, op.src_image_size_h) == (224, 224)
    assert op.mean_chn_0 == params["mean_chn_0"]
    assert op.min_chn_2 == pytest.approx(params["min_chn_2"], rel=1e-6)
    assert list(op.var_reci_chn_1) == pytest.approx([params["var_reci_chn_1"]], rel=1e-6)
    assert op.csc_switch is (source == "YUV420SP_U8")


def test_profile_only_finding_has_lower_confidence_and_says_what_to_fill(rules):
    sc = cases.preprocess_profile()
    [f] = run(sc.profile, None, rules)[0]
    assert f.rule == "aipp-fusion.preprocess-sequence"
    assert f.confidence == rules.for_kb(KB)["confidence"]["profile"]
    p = f.fix.data["aipp_op"]
    assert (p["src_image_size_w"], p["src_image_size_h"]) == (224, 224)
    assert not any(k.startswith(("mean_chn", "var_reci_chn")) for k in p)
    assert any("mean_chn" in t for t in f.evidence["todo"]) and "# TODO" in f.fix.data["text"]
    assert f.evidence["input_dtype"] == "UINT8"
    assert f.evidence["table"]["rows"][0][2] == 3  # three iterations


def test_inputs_that_feed_other_ops_are_not_rewritten(rules):
    b = GraphBuilder("two_users")
    img = desc("NCHW", "FLOAT", [1, 3, 64, 64])
    b.node("input", "Data", outputs=[img], engine="GE_LOCAL")
    b.node("cast", "Cast", after="input", inputs=[img], outputs=[desc("NCHW", "FLOAT16", [1, 3, 64, 64])])
    b.node("conv", "Conv2D", after="cast")
    b.node("shape", "Shape", after="input")  # the raw input is also used elsewhere
    assert run(cases.empty_profile(), b.build(), rules)[0] == []

    b = GraphBuilder("resize_first")
    b.node("input", "Data", outputs=[img], engine="GE_LOCAL")
    b.node("cast", "Cast", after="input")
    b.node("resize", "ResizeBilinearV2", after="cast")  # not something the static config reproduces
    b.node("conv", "Conv2D", after="resize")
    assert run(cases.empty_profile(), b.build(), rules)[0] == []


def test_aipp_attributes_mean_the_input_is_already_handled(rules):
    sc = cases.preprocess_graph()
    sc.graph.node("data")["attrs"]["aipp"] = {"aipp_mode": 1}
    findings, status = run(sc.profile, sc.graph, rules)
    assert findings == [] and any("already uses AIPP" in n for n in status.notes)


@pytest.mark.parametrize(("rel", "ops", "hw"), [
    (RESNET101, {"trans_Cast_0", "trans_TransData_1"}, (224, 224)),
    (RESNET50_TF, {"trans_Cast_0", "trans_TransData_1"}, (224, 224)),
    (RESNET50_CAFFE, {"trans_TransData_0"}, (224, 224)),
], ids=["resnet101-onnx", "resnet50-tf-nhwc", "resnet50-caffe"])
def test_real_om_models_convert_their_input_on_the_device(rel, ops, hw, rules):
    """These OMs take a float image and run Cast/TransData before the first (fused) conv."""
    graph = cases.sample_graph(rel)
    [f] = run(cases.empty_profile(), graph, rules, graph.soc_version or cases.CHIP)[0]
    assert set(f.ops) == ops
    p = f.fix.data["aipp_op"]
    assert (p["src_image_size_h"], p["src_image_size_w"]) == hw
    assert "--enable_small_channel=1" in f.fix.data["flags"]
    # no Sub/Mul in these graphs (the host normalizes): nothing to fill in, no normalization fields
    assert not any(k.startswith(("mean_chn", "min_chn", "var_reci_chn")) for k in p) and "todo" not in f.evidence
    assert "uint8 NHWC" in f.recommendation  # the model input is float today
    assert f.fix.command.startswith("atc ") and "--insert_op_conf=aipp.cfg" in f.fix.command
    if rel == RESNET101:  # the user's own atc command line, recorded in the OM, is reused
        assert "--model=/home/y00502400/tmp/resnet-101.onnx" in f.fix.command


def test_real_models_without_a_conv_or_with_aipp_are_quiet(rules):
    nms = cases.sample_graph(NMS_SUBMODEL)  # Data -> Cast -> Transpose -> NMS: no convolution to feed
    assert run(cases.empty_profile(), nms, rules, "Ascend310")[0] == []
    with_aipp = cases.sample_graph(AFTER_UB_MATCH_AIPP)  # has data_0_huawei_aipp (type Aipp)
    findings, status = run(cases.empty_profile(), with_aipp, rules, "Ascend310")
    assert findings == [] and any("already uses AIPP" in n for n in status.notes)


def test_online_framework_profile_is_skipped(rules):
    """torch_npu training: trans_TransData_0 converts the 32x3x224x224 input, but AIPP is an offline option."""
    prof = ingest.load(cases.sample("Ascend__msinsight/test/data/pytorch/text/level2/rank0_ascend_pt"))[0]
    assert prof.ops["name"].astype(str).iloc[0] == "trans_TransData_0"
    assert prof.meta.context == "torch-eager"
    findings, status = run(prof, None, rules, "Ascend910B2")
    assert findings == [] and any("a torch-eager run; static AIPP is an option of offline (ATC) models" in n
                                  for n in status.notes)


def test_minimum_saving_threshold(rules, tmp_path):
    sc = cases.preprocess_graph()
    high = load_rules(override={"rules": {KB: {"min_saving_us": 1e9}}})
    assert run(sc.profile, sc.graph, high)[0] == []


def test_power_op_with_exponent_one_is_affine(rules):
    b = GraphBuilder("power")
    x = desc("NCHW", "FLOAT16", [1, 1, 32, 32])
    b.node("input", "Data", outputs=[desc("NCHW", "UINT8", [1, 1, 32, 32])], engine="GE_LOCAL")
    b.node("cast", "Cast", after="input", outputs=[x])
    b.node("pw", "Power", after="cast", outputs=[x], attrs={"power": 1.0, "scale": 0.5, "shift": -1.0})
    b.node("conv", "Conv2D", after="pw")
    [f] = run(cases.empty_profile(), b.build(), rules)[0]
    p = f.fix.data["aipp_op"]
    assert p["input_format"] == "YUV400_U8"  # one channel
    assert p["var_reci_chn_0"] == 0.5 and p["mean_chn_0"] + p["min_chn_0"] == pytest.approx(2.0)
    assert not math.isnan(f.estimated_saving_us)


@pytest.mark.parametrize(("context", "advised"), [("om-acl", True), ("unknown", True), ("torch-graph", False),
                                                  ("mindspore-graph", False), ("kernel-dev", False)])
def test_aipp_is_advised_only_where_atc_builds_the_model(rules, context, advised):
    """The same preprocessing kernels before the first conv: an ATC option only for offline (or undecided) runs."""
    sc = cases.preprocess_profile()
    sc.profile.meta.context = context
    findings, status = run(sc.profile, None, rules)
    assert bool(findings) is advised
    if advised:
        assert findings[0].fix.kind == "aipp-config" and "--insert_op_conf=aipp.cfg" in findings[0].fix.command
    else:
        assert any(f"a {context} run" in n for n in status.notes)
    assert {r.role for r in AippFusionKB.rules} == {"cause"}
