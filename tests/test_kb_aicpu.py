"""The aicpu knowledge base: AI CPU ops with their reasons, fixes and savings, and AI Core idle time -- on labeled
scenarios and on real files (torch_npu / msprof profiles with AI_CPU Cast tasks, a MindSpore msprof directory,
an ATC OM JSON with an AI CPU Cast)."""

from __future__ import annotations

from pathlib import Path

import pytest

from advisor.common.intervals import covered_before as covered
from advisor.graph.load import load_graph
from advisor.knowledge_bases.aicpu import AicpuKB, exposed_aicpu
from advisor.testing import load_rules
from tests.scenarios.builder import OpRow, make_profile
from tests.scenarios.cases_a import (
    ALL_CASES,
    aicpu_case,
    expected_for,
    ops_by_rule,
    run_kb,
)

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
GPT_KERNELS = SAMPLES / "Ascend__msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"
MS_ALEXNET = SAMPLES / "mindspore-ai__mindinsight/tests/utils/resource/profiler/PROF_000001_20230818142704322_COJGGGCANRMICFBC"
NMS_OM = SAMPLES / "Ascend__msit/msit/test/UT/resource/msquickcmp/om/model.json"


def _findings_by_reason(findings):
    return {f.evidence["reason"] + (":" + f.title.split("(")[1].split(")")[0] if "kernel (" in f.title else ""): f
            for f in findings if f.rule == "aicpu.ops"}


def _reasons_of(findings) -> dict[str, str]:
    out = {}
    for f in findings:
        if f.rule == "aicpu.ops":
            for op in f.ops:
                out[op] = f.evidence["reason"]
    return out


# ---------------------------------------------------------------------------------------------------------
# scenario corpus
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("make", ALL_CASES, ids=lambda m: m.__name__)
@pytest.mark.parametrize("with_graph", [True, False], ids=["graph", "profile-only"])
def test_scenarios_flag_exactly_the_injected_ops(make, with_graph):
    case = make()
    graph = case.net.graph() if with_graph else None
    findings, status = run_kb(AicpuKB, case.net.profile(repeat=2), graph)
    assert status.status == "ok", status.reason
    assert ops_by_rule(findings, "aicpu.") == expected_for(case, "aicpu.")


def test_reasons_per_op_with_the_graph():
    case = aicpu_case()
    findings, _ = run_kb(AicpuKB, case.net.profile(), case.net.graph())
    assert _reasons_of(findings) == {"idx_cast": "int64", "where_1": "no_aicore_kernel",
                                     "index_put": "no_aicore_kernel", "mul_f64": "double",
                                     "erfinv_fp32": "precision_mode"}


def test_without_the_graph_the_precision_mode_reason_is_unknown():
    case = aicpu_case()
    findings, _ = run_kb(AicpuKB, case.net.profile(), None)
    assert _reasons_of(findings)["erfinv_fp32"] == "unknown"


def test_fixes_per_reason():
    case = aicpu_case()
    findings, _ = run_kb(AicpuKB, case.net.profile(), case.net.graph())
    by_op = {f.ops[0]: f for f in findings if f.rule == "aicpu.ops"}
    # IndexPutV2: confirmed, mask multiply
    ip = by_op["index_put"]
    assert "mask multiply" in ip.fix.summary and ip.fix.data["status"] == "confirmed"
    assert ip.confidence > by_op["where_1"].confidence  # Where is empirical
    assert by_op["where_1"].fix.data["status"] == "empirical"
    # the graph records an atc command line: an offline model, so the fixes edit the ONNX model ATC converts
    assert "onnx.TensorProto.INT32" in by_op["idx_cast"].fix.data["snippet"]
    assert "ATC conversion" in by_op["mul_f64"].recommendation and "torch" not in by_op["mul_f64"].recommendation
    prec = by_op["erfinv_fp32"]
    assert prec.fix.kind == "atc-option"
    assert prec.fix.data["flags"] == ["--precision_mode=allow_fp32_to_fp16"]
    assert "must_keep_origin_dtype" in prec.recommendation


def test_saving_uses_the_same_op_on_ai_core_at_similar_size():
    case = aicpu_case()
    findings, _ = run_kb(AicpuKB, case.net.profile(repeat=3), case.net.graph())
    cast = next(f for f in findings if f.rule == "aicpu.ops" and f.ops == ["idx_cast"])
    # cast_ai_core: a Cast of 1000 elements on AI Core took 4 us; the AI CPU one 120 us, three launches
    assert cast.estimated_saving_us == pytest.approx((120.0 - 4.0) * 3)
    assert "median of Cast on AI Core" in cast.basis
    # no similar AI Core op for IndexPutV2 of that size except Cast/Add: median of AI Core ops of similar size
    ip = next(f for f in findings if f.rule == "aicpu.ops" and f.ops == ["index_put"])
    assert ip.estimated_saving_us < 500.0 * 3 and "similar size" in ip.basis


def test_duration_threshold_from_rules(tmp_path):
    case = aicpu_case()
    rules = load_rules(override={"rules": {"aicpu": {"min_duration_us": 100}}})
    findings, _ = run_kb(AicpuKB, case.net.profile(), case.net.graph(), rules)
    assert ops_by_rule(findings)["aicpu.ops"] == {"idx_cast", "index_put"}


def test_ratio_fallback_when_no_ai_core_op_is_similar():
    rows = [OpRow("conv", "Conv2D", 100, input_shapes="1,64,56,56", output_shapes="1,64,56,56"),
            OpRow("nz", "NonZero", 200, core="AI_CPU", input_shapes="7", input_dtypes="FLOAT16",
                  output_shapes="7,1", output_dtypes="INT64")]
    findings, _ = run_kb(AicpuKB, make_profile(rows), None)
    nz = next(f for f in findings if f.rule == "aicpu.ops")
    assert nz.evidence["reason"] == "no_aicore_kernel"
    assert nz.estimated_saving_us == pytest.approx(200 * (1 - 0.1))
    assert "aicore_ratio" in nz.basis


def test_topk_only_on_integer_inputs():
    rows = [OpRow("topk_f", "TopK", 50, core="AI_CPU", input_dtypes="FLOAT", output_dtypes="FLOAT;INT32"),
            OpRow("topk_i", "TopK", 50, core="AI_CPU", input_dtypes="INT32", output_dtypes="INT32;INT32")]
    reasons = _reasons_of(run_kb(AicpuKB, make_profile(rows), None)[0])
    assert reasons == {"topk_i": "no_aicore_kernel", "topk_f": "unknown"}


_DYN_ROWS = [OpRow("conv", "Conv2D", 100),
             OpRow("dyn", "Erfinv", 60, core="AI_CPU", input_dtypes="FLOAT16", output_dtypes="FLOAT16",
                   input_shapes="-1,128", output_shapes="-1,128")]


def _dynamic_finding(chip="Ascend310P3", **meta):
    f = next(f for f in run_kb(AicpuKB, make_profile(_DYN_ROWS, chip=chip, **meta), None, chip=chip)[0]
             if f.rule == "aicpu.ops")
    assert f.evidence["reason"] == "dynamic_shape"
    return f


def test_dynamic_shape_fix_fits_the_run():
    """The same dynamic-shape AI CPU op: --ac_parallel_enable only for an offline model on a chip and CANN release
    that have it (the assumption stated when the release is unknown); torch and unknown runs get static shapes."""
    om = _dynamic_finding(context="om-acl", cann_version="8.1.RC1")
    assert om.fix.data["flags"] == ["--ac_parallel_enable=1"] and "assumed" not in om.recommendation
    unknown_cann = _dynamic_finding(context="om-acl")
    assert unknown_cann.fix.data["flags"] == ["--ac_parallel_enable=1"]
    assert "CANN version of this run is unknown" in unknown_cann.recommendation
    old = _dynamic_finding(context="om-acl", cann_version="7.0.0")
    assert "flags" not in old.fix.data and "predates --ac_parallel_enable" in old.recommendation
    ascend310 = _dynamic_finding(chip="Ascend310", context="om-acl", cann_version="8.1.RC1")
    assert "flags" not in ascend310.fix.data and "not available on Ascend310" in ascend310.recommendation
    eager = _dynamic_finding(context="torch-eager")
    assert "jit_compile=False" in eager.fix.data["snippet"] and "atc" not in eager.recommendation
    plain = _dynamic_finding()
    assert "flags" not in plain.fix.data and "atc" not in plain.recommendation


def test_unsupported_dtype_reason():
    rows = [OpRow("eq16", "Equal", 40, core="AI_CPU", input_dtypes="INT16;INT16", output_dtypes="BOOL")]
    f = next(f for f in run_kb(AicpuKB, make_profile(rows), None)[0] if f.rule == "aicpu.ops")
    assert f.evidence["reason"] == "unsupported_dtype"
    assert f.fix.data["conversions"] == {"INT16": "INT32"}


# ---------------------------------------------------------------------------------------------------------
# aicpu.serial
# ---------------------------------------------------------------------------------------------------------
def test_serialized_ai_cpu_time_and_fix():
    case = aicpu_case()
    findings, _ = run_kb(AicpuKB, case.net.profile(), case.net.graph())
    serial = next(f for f in findings if f.rule == "aicpu.serial")
    # all AI CPU tasks run alone on the stream: 120 + 80 + 500 + 60 + 45 + 8
    assert serial.evidence["serialized_us"] == pytest.approx(813.0)
    assert serial.estimated_saving_us == pytest.approx(813.0 * 0.5)
    # a static-shape offline model: --ac_parallel_enable acts only on dynamic-shape graphs
    assert serial.fix.kind == "code" and "ac_parallel_enable" not in serial.recommendation
    assert serial.fix.data["ops"][0] == "index_put"


def test_serialized_ai_cpu_in_a_dynamic_offline_model_gets_ac_parallel(tmp_path):
    case = aicpu_case()
    graph = case.net.graph()
    graph.g.nodes["where_1"]["attrs"]["_is_unknown_shape"] = True
    assert graph.dynamic_shape()
    profile = case.net.profile(context="om-acl", cann_version="8.0.RC1")
    serial = next(f for f in run_kb(AicpuKB, profile, graph)[0] if f.rule == "aicpu.serial")
    assert serial.fix.data == {"flags": ["--ac_parallel_enable=1"]}


def test_ai_cpu_overlapping_ai_core_is_not_serialized():
    rows = [OpRow("conv", "Conv2D", 1000, start_us=0.0, stream_id=0),
            OpRow("cpu", "NonZero", 300, core="AI_CPU", start_us=100.0, stream_id=1)]
    findings, _ = run_kb(AicpuKB, make_profile(rows), None)
    assert not any(f.rule == "aicpu.serial" for f in findings)
    assert any(f.rule == "aicpu.ops" for f in findings)


def test_ac_parallel_already_on_suggests_moving_the_ops(tmp_path):
    case = aicpu_case()
    graph = case.net.graph()
    graph.attrs["atc_cmdline"] = "atc --model=m.onnx --framework=5 --ac_parallel_enable=1"
    serial = next(f for f in run_kb(AicpuKB, case.net.profile(), graph)[0] if f.rule == "aicpu.serial")
    assert serial.fix.kind == "code"


def test_covered_length_is_exact():
    import numpy as np

    bs, be = np.array([0.0, 10.0]), np.array([5.0, 20.0])
    assert covered(bs, be, np.array([3.0, 7.0, 15.0, 30.0])).tolist() == [3.0, 5.0, 10.0, 15.0]
    ops = make_profile([OpRow("a", "Conv2D", 10, start_us=0.0), OpRow("b", "Where", 10, core="AI_CPU", start_us=5.0,
                                                                       stream_id=1)]).ops
    exp = exposed_aicpu(ops, ["AI_CORE"])
    assert exp["exposed_us"].tolist() == [5.0]


def test_rule_docs_are_complete():
    rules = load_rules().for_kb("aicpu")
    assert {r.id for r in AicpuKB.rules} == {"aicpu.ops", "aicpu.serial"}
    for r in AicpuKB.rules:
        assert r.what and r.why and r.how_to_fix
        assert all(k in rules for k in r.thresholds), r.id
    statuses = {spec["status"] for spec in rules["aicpu_op_types"].values()}
    assert statuses == {"confirmed", "empirical"}


# ---------------------------------------------------------------------------------------------------------
# real files
# ---------------------------------------------------------------------------------------------------------
def _load(path: Path):
    if not path.exists():
        pytest.skip(f"{path} not available")
    from advisor.ingest import load

    return load(path)[0]


def test_real_gpt_training_kernel_details_int64_casts():
    """torch_npu LLM training on 910B: two Cast INT32 -> UINT64 ops run on AI_CPU, 7 tasks, 785 us."""
    profile = _load(GPT_KERNELS)
    findings, status = run_kb(AicpuKB, profile, None)
    assert status.status == "ok"
    ops = [f for f in findings if f.rule == "aicpu.ops"]
    assert len(ops) == 1
    f = ops[0]
    assert f.evidence["reason"] == "int64"
    assert set(f.ops) == {"trans_Cast_5", "trans_Cast_18"}
    assert f.evidence["aicpu_us"] == pytest.approx(785.18, abs=0.01)
    assert f.evidence["details"]["trans_Cast_5"] == "UINT64 output"
    assert "int32" in f.fix.summary
    assert 0 < f.estimated_saving_us < f.evidence["aicpu_us"]


def test_real_mindspore_dropout_gen_mask_on_ai_cpu():
    profile = _load(MS_ALEXNET)
    findings, _ = run_kb(AicpuKB, profile, None)
    f = next(f for f in findings if f.rule == "aicpu.ops")
    assert f.evidence["reason"] == "no_aicore_kernel"
    assert all("DropoutGenMask" in op for op in f.ops) and len(f.ops) == 2
    assert f.fix.data["status"] == "empirical"


def test_real_om_json_cast_to_int64_on_ai_cpu():
    if not NMS_OM.exists():
        pytest.skip("shared samples not available")
    graph = load_graph(NMS_OM)
    findings, status = run_kb(AicpuKB, None, graph, chip="Ascend310")
    assert status.status == "ok"
    f = next(f for f in findings if f.rule == "aicpu.ops")
    assert f.ops == ["Cast_1206"]
    assert f.evidence["reason"] == "int64" and f.evidence["details"]["Cast_1206"] == "INT64 output"
    assert f.severity == "info" and f.estimated_saving_us == 0
    assert "aicpu.serial: skipped, needs a profile with task start times" in status.notes


# ---------------------------------------------------------------------------------------------------------
# advice fitted to the run, roles, rules as data
# ---------------------------------------------------------------------------------------------------------
_NMS_ROWS = [OpRow("conv", "Conv2D", 400.0, input_shapes="1,64,56,56", output_shapes="1,64,56,56"),
             OpRow("post/nms", "NonMaxSuppressionV3", 900.0, core="AI_CPU", input_dtypes="FLOAT16;FLOAT16",
                   output_dtypes="INT32", input_shapes="100,4;100", output_shapes="20")]


def _nms(context: str):
    findings, _ = run_kb(AicpuKB, make_profile(_NMS_ROWS, context=context), None)
    return next(f for f in findings if f.rule == "aicpu.ops")


def test_same_ai_cpu_op_two_contexts_two_fixes():
    """NMS on the AI CPU: torch_npu's batched NMS for a torch run; for an offline model run through ACL, no
    torch_npu API but ending the model before NMS (atc --out_nodes) and NMS on the host."""
    torch_f, om_f = _nms("torch-eager"), _nms("om-acl")
    assert "torch_npu.npu_batch_nms" in torch_f.fix.data["snippet"]
    assert "torch" not in om_f.recommendation + str(om_f.fix.to_dict())
    assert "--out_nodes" in om_f.recommendation and "--out_nodes" in om_f.fix.data["snippet"]
    assert torch_f.estimated_saving_us == om_f.estimated_saving_us > 0  # the problem is the same


def test_int64_fix_fits_the_run():
    rows = [OpRow("conv", "Conv2D", 100.0, input_shapes="1000", output_shapes="1000"),
            OpRow("gather", "GatherV2", 300.0, core="AI_CPU", input_dtypes="FLOAT16;INT64",
                  output_dtypes="FLOAT16", input_shapes="1000;200", output_shapes="200")]
    by_context = {}
    for context in ("torch-eager", "mindspore-graph", "om-acl"):
        findings, _ = run_kb(AicpuKB, make_profile(rows, context=context), None)
        by_context[context] = next(f for f in findings if f.rule == "aicpu.ops")
    assert "torch.int32" in by_context["torch-eager"].fix.data["snippet"]
    assert "mindspore.int32" in by_context["mindspore-graph"].fix.data["snippet"]
    om = by_context["om-acl"]
    assert "onnx" in om.fix.data["snippet"] and "ATC conversion" in om.recommendation
    assert "torch" not in om.recommendation and "mindspore" not in om.recommendation


def test_argmin_has_an_ai_core_kernel_from_cann_7():
    rows = [OpRow("argmin", "ArgMin", 200.0, core="AI_CPU", input_dtypes="FLOAT16", output_dtypes="INT32",
                  input_shapes="64,1000", output_shapes="64")]
    old = run_kb(AicpuKB, make_profile(rows, cann_version="6.3.RC2"), None)[0]
    assert _reasons_of(old) == {"argmin": "no_aicore_kernel"}
    assert next(f for f in old if f.rule == "aicpu.ops").fix.kind == "env"
    new = run_kb(AicpuKB, make_profile(rows, cann_version="8.1.RC1"), None)[0]
    assert _reasons_of(new) == {"argmin": "unknown"}


def test_serial_is_a_symptom_folded_under_the_ai_cpu_ops():
    from advisor.pipeline.hierarchy import absorb, mechanisms_of

    case = aicpu_case()
    findings, _ = run_kb(AicpuKB, case.net.profile(), case.net.graph())
    roles = {r.id: r.role for r in AicpuKB.rules}
    assert roles == {"aicpu.ops": "cause", "aicpu.serial": "symptom"}
    serial = next(f for f in findings if f.rule == "aicpu.serial")
    top = absorb(findings, roles, None, mechanisms_of(AicpuKB.rules))
    # the AI CPU ops findings remove most of the serial time: the symptom sits under them, op by op, and not at top
    # level; tiny_cpu (below min_duration_us, named by no cause) goes with the finding that removes the most
    assert "aicpu.serial" not in {f.rule for f in top}
    parts = [(f.ops, s) for f in top for s in f.symptoms if s["rule"] == "aicpu.serial"]
    assert sorted(op for _, s in parts for op in s["ops"]) == sorted(serial.ops)
    assert sum(s["estimated_saving_us"] for _, s in parts) == pytest.approx(serial.estimated_saving_us, abs=1e-3)
    idx = next(f for f in top if f.ops == ["idx_cast"])
    assert [s["rule"] for s in idx.symptoms] == ["aicpu.serial"] and idx.symptoms[0]["mechanism"]
    # per op the larger of the two estimates, never more than the op's time
    assert idx.estimated_saving_us <= 120.0


def test_confidence_and_thresholds_come_from_the_rules(tmp_path):
    case = aicpu_case()
    rules = load_rules(override={"rules": {"aicpu": {"confidence": {"confirmed": 0.66}, "parallelism": {
        "recoverable_fraction": 0.25}}}})
    findings, _ = run_kb(AicpuKB, case.net.profile(), case.net.graph(), rules)
    assert next(f for f in findings if f.ops == ["index_put"]).confidence == pytest.approx(0.66)
    serial = next(f for f in findings if f.rule == "aicpu.serial")
    assert serial.estimated_saving_us == pytest.approx(813.0 * 0.25)
    doc = AicpuKB.rule("aicpu.serial").render(rules.for_kb("aicpu"))
    assert "0.25" in doc.why and "{" not in doc.why


def test_device_data_queue_ops_are_not_fallbacks():
    """GetNext / InitData / EndOfSequence are MindSpore's dataset-sink data queue: on the AI CPU by design, waiting
    for the host pipeline. Not an AI CPU fallback to move to AI Core, and no AI Core idle time to blame on them."""
    rows = [OpRow("InitData", "InitData", 160.0, core="AI_CPU"),
            OpRow("GetNext", "GetNext", 518.0, core="AI_CPU"),
            OpRow("conv", "Conv2D", 300.0, input_shapes="1,64,56,56", output_shapes="1,64,56,56"),
            OpRow("EndOfSequence", "EndOfSequence", 48.0, core="AI_CPU")]
    findings, status = run_kb(AicpuKB, make_profile(rows, context="mindspore-graph"), None)
    assert findings == []
    assert any("GetNext" in n and "data-queue" in n for n in status.notes)


def test_real_mindspore_sink_mode_data_queue():
    profile = _load(SAMPLES / "mindspore-ai__mindinsight/tests/utils/resource/run_2/normal_run/profiler")
    findings, status = run_kb(AicpuKB, profile, None)
    assert not any({"GetNext", "InitData", "EndOfSequence"} & set(f.ops) for f in findings)
    assert any("data-queue" in n for n in status.notes)
