"""roofline: heavy ops against the chip's compute and bandwidth roofs, bound classes, recoverable time."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from advisor.ingest.normalize import finalize_ops
from advisor.model import Meta, Profile
from advisor.platform import resolve_platform
from knowledge_bases.roofline import POINT_COLUMNS, RooflineKB, heavy_ops, roofline_points
from tests.scenarios import cases_b as cases

KB = "roofline"
COMPUTE_ADVICE = "Ascend__msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"
LLM_LEVEL2 = "Ascend__msinsight/test/st/level2/rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
MOE_OP_SUMMARY = ("hicann__cann-learning-hub/tutorials/ascendc_operator_development_V2/06_advanced_features/src/"
                  "06.04_super_kernel/performance_case/profiling-sk/PROF_000001_20260831222700438_02482130MJQJQRAN/"
                  "mindstudio_profiler_output/op_summary_20260831222806.csv")


@pytest.fixture(scope="module")
def rules():
    return cases.load_rules()


def run(profile, rules, chip=cases.CHIP):
    findings, statuses = cases.run_kbs([RooflineKB], profile, None, rules, chip)
    assert statuses[0].status == "ok", statuses[0].reason
    return findings, statuses[0]


def points(profile, rules, chip=cases.CHIP) -> pd.DataFrame:
    return roofline_points(profile.ops, resolve_platform(rules, chip), rules.for_kb(KB))


def load_profile(rel: str) -> Profile:
    ingest = pytest.importorskip("advisor.ingest")
    return ingest.load(cases.sample(rel))[0]


def one_op(op_type: str, ins: str, in_dt: str, outs: str, out_dt: str, in_fmt: str = "", out_fmt: str = "",
           core: str = "AI_CORE", duration: float = 100.0, **metrics: float) -> Profile:
    row = {"name": "op", "type": op_type, "core": core, "start_us": 0.0, "duration_us": duration,
           "input_shapes": ins, "input_dtypes": in_dt, "input_formats": in_fmt, "output_shapes": outs,
           "output_dtypes": out_dt, "output_formats": out_fmt, **metrics}
    return Profile(ops=finalize_ops(pd.DataFrame([row])), meta=Meta())


# --- labeled scenarios ------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", cases.SCENARIOS, ids=lambda f: f.__name__)
def test_scenario_corpus_flags_exactly_the_injected_ops(make, rules):
    sc = make()
    findings, _ = run(sc.profile, rules, sc.chip)
    assert cases.flagged(findings, KB) == sc.expected[KB]


def test_points_place_each_op_against_its_roof(rules):
    pts = points(cases.roofline_mixed().profile, rules).set_index("name")
    assert set(POINT_COLUMNS) <= set(pts.reset_index().columns)
    mm, add, good = pts.loc["mm_slow"], pts.loc["add_slow"], pts.loc["mm_ok"]
    assert (mm["bound"], mm["unit"], mm["calls"]) == ("compute", "cube", 4)
    assert mm["flops"] == 2 * 2048 ** 3 and mm["bytes"] == 3 * 2048 * 2048 * 2
    assert mm["pct_of_roof"] == pytest.approx(0.3, rel=1e-6)
    assert mm["roof_tflops"] == pytest.approx(69.47)  # Ascend310P3 fp16 cube peak
    assert mm["attained_tflops"] == pytest.approx(0.3 * 69.47, rel=1e-6)
    assert (add["bound"], add["unit"]) == ("memory", "vector")
    assert add["pct_of_roof"] == pytest.approx(0.4, rel=1e-6)
    assert add["roof_tflops"] == pytest.approx(add["intensity"] * 204.0 / 1e3, rel=1e-9)  # on the bandwidth roof
    # recoverable = duration - (time at the roof / 0.8), over 4 calls; nothing for an op at 90 % of its roof
    assert mm["recoverable_us"] == pytest.approx(4 * mm["duration_us"] * (1 - 0.3 / 0.8), rel=1e-6)
    assert good["recoverable_us"] == 0
    assert (pts["recoverable_us"] >= 0).all() and (pts["recoverable_us"] <= pts["total_us"]).all()


def test_findings_carry_the_table_points_and_the_bandwidth_basis(rules):
    findings, _ = run(cases.roofline_mixed().profile, rules)
    by_rule = {f.rule: f for f in findings}
    assert set(by_rule) == {"roofline.compute-bound", "roofline.memory-bound"}
    compute = by_rule["roofline.compute-bound"]
    assert compute.evidence["table"]["columns"][:10] == [
        "name", "type", "duration us", "calls", "flops", "bytes", "intensity", "attained TFLOPS", "roof TFLOPS",
        "% roof"]
    pts = compute.evidence["roofline_points"]
    row = dict(zip(pts["columns"], pts["rows"][0], strict=True))
    assert row["name"] == "mm_slow" and row["bound"] == "compute" and row["intensity"] > 300
    assert compute.evidence["hbm_gbps"] == 204.0 and "--rules" in compute.evidence["bandwidth_note"]
    assert "hbm_gbps" in compute.basis and "/ 0.8" in compute.basis
    assert compute.saving_by_op == {"mm_slow": pytest.approx(compute.estimated_saving_us)}
    assert compute.fix is not None and "--job_type=2" in compute.fix.command
    assert "fp16" in compute.recommendation and "AOE" in compute.recommendation
    memory = by_rule["roofline.memory-bound"]
    assert "fuse" in memory.recommendation and "TransData" in memory.recommendation
    assert compute.severity == "critical"  # 2 ms of 4.9 ms recoverable


def test_bandwidth_is_a_user_setting(rules, tmp_path):
    sc = cases.roofline_mixed()
    base = next(f for f in run(sc.profile, rules)[0] if f.rule == "roofline.memory-bound")
    faster = cases.load_rules({"platform": {"hbm_gbps": 408.0}}, tmp_path)
    pts = points(sc.profile, faster).set_index("name")
    assert pts.loc["add_slow", "pct_of_roof"] == pytest.approx(0.2, rel=1e-6)
    moved = next(f for f in run(sc.profile, faster)[0] if f.rule == "roofline.memory-bound")
    assert moved.evidence["hbm_gbps"] == 408.0
    assert moved.estimated_saving_us > base.estimated_saving_us


def test_pipe_metrics_decide_the_bound_class(rules):
    findings, _ = run(cases.roofline_metrics().profile, rules)
    rules_of = {f.rule: set(f.ops) for f in findings}
    assert rules_of == {"roofline.memory-bound": {"conv_mte2"}, "roofline.no-bound": {"conv_nobound"}}
    pts = points(cases.roofline_metrics().profile, rules).set_index("name")
    assert pts.loc["conv_mte2", "pipe"] == "mte2" and pts.loc["conv_good", "bound"] == "compute"


def test_latency_bound_saving_stops_at_the_minimum_kernel_time(rules):
    [f] = run(cases.roofline_latency().profile, rules)[0]
    assert f.rule == "roofline.latency-bound"
    min_us = rules.for_kb(KB)["min_kernel_us"]
    for saving in f.saving_by_op.values():
        assert saving == pytest.approx(40 * (9.0 - min_us))
    assert "batch" in f.recommendation.lower()


# --- FLOPs and bytes from shapes --------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "expected_flops"), [
    # NC1HWC0 conv, FRACTAL_Z weight, C0 = 8 (fp32, as torch_npu writes it): Conv2D1 of the msinsight CNN sample
    (("Conv2D", "32,1,224,224,8;121,4,16,8;64", "FLOAT;FLOAT;FLOAT", "32,8,55,55,8", "FLOAT",
      "NC1HWC0;FRACTAL_Z;ND", "NC1HWC0"), 2 * 32 * 64 * 55 * 55 * 8 * 11 * 11),
    # NCHW conv with an NCHW weight: 2 N Cout Hout Wout Cin kh kw
    (("Conv2D", "1,64,56,56;128,64,3,3", "FLOAT16;FLOAT16", "1,128,56,56", "FLOAT16", "NCHW;NCHW", "NCHW"),
     2 * 128 * 56 * 56 * 64 * 9),
    # depthwise: 2 x output elements x kh x kw
    (("DepthwiseConv2D", "1,32,112,112;32,1,3,3", "FLOAT16;FLOAT16", "1,32,112,112", "FLOAT16", "NCHW;NCHW",
      "NCHW"), 2 * 32 * 112 * 112 * 9),
    # MatMul with a transposed weight (N x K): 2 M N K
    (("MatMul", "4096,12288;4608,12288", "FLOAT16;FLOAT16", "4096,4608", "FLOAT16", "ND;ND", "ND"),
     2 * 4096 * 4608 * 12288),
    # BatchMatMul: 2 B M N K
    (("BatchMatMul", "12,1024,512;12,512,1024", "FLOAT16;FLOAT16", "12,1024,1024", "FLOAT16", "ND;ND", "ND"),
     2 * 12 * 1024 * 1024 * 512),
    # FRACTAL_NZ matmul: K from element counts
    (("MatMulV2", "64,32,16,16;32,64,16,16", "FLOAT16;FLOAT16", "32,32,16,16", "FLOAT16",
      "FRACTAL_NZ;FRACTAL_NZ", "FRACTAL_NZ"), 2 * 512 * 512 * 1024),
    # elementwise: flops_per_element x elements
    (("Sigmoid", "8,1024", "FLOAT16", "8,1024", "FLOAT16", "ND", "ND"), 4 * 8 * 1024),
    # pure data movement
    (("TransData", "1,64,56,56", "FLOAT16", "1,4,56,56,16", "FLOAT16", "NCHW", "NC1HWC0"), 0),
])
def test_flops_from_shapes(op, expected_flops, rules):
    op_type, ins, in_dt, outs, out_dt, in_fmt, out_fmt = op
    pts = points(one_op(op_type, ins, in_dt, outs, out_dt, in_fmt, out_fmt, duration=10_000.0), rules)
    assert pts.loc[0, "flops"] == pytest.approx(expected_flops, rel=1e-9)
    assert pts.loc[0, "source"] == "shapes"


def test_bytes_are_the_sum_of_input_and_output_tensors(rules):
    pts = points(one_op("Add", "8,1024;8,1024", "FLOAT;FLOAT", "8,1024", "FLOAT16"), rules)
    assert pts.loc[0, "bytes"] == 2 * 8 * 1024 * 4 + 8 * 1024 * 2


def test_measured_flops_and_bytes_win_over_shapes(rules):
    prof = one_op("MatMul", "1024,1024;1024,1024", "FLOAT16;FLOAT16", "1024,1024", "FLOAT16", duration=50.0,
                  cube_fops=3.0e9, main_mem_read_bw=100.0, main_mem_write_bw=20.0, aicore_time_us=40.0)
    pts = points(prof, rules)
    assert pts.loc[0, "flops"] == 3.0e9
    assert pts.loc[0, "bytes"] == pytest.approx(120.0 * 40.0 * 1e3)  # GB/s x us
    assert pts.loc[0, "source"] == "metrics"


def test_int8_and_fp32_cube_ops_use_their_own_peak(rules):
    plat = resolve_platform(rules, cases.CHIP)
    int8 = points(one_op("MatMul", "1024,1024;1024,1024", "INT8;INT8", "1024,1024", "INT32"), rules)
    fp32 = points(one_op("MatMul", "1024,1024;1024,1024", "FLOAT;FLOAT", "1024,1024", "FLOAT"), rules)
    assert int8.loc[0, "peak_tflops"] == plat["int8_tops"]
    assert fp32.loc[0, "peak_tflops"] == pytest.approx(plat["fp16_tflops"] * rules.for_kb(KB)["cube_peak"]["FLOAT"]["scale"])


def test_ops_whose_work_is_unknown_are_not_placed(rules):
    fa = one_op("FlashAttentionScore", "1,4096,1024;1,4096,1024", "BF16;BF16", "1,4096,1024", "BF16",
                core="MIX_AIC")
    sort = one_op("Sort", "1,65536", "FLOAT16", "1,65536", "FLOAT16", core="AI_VECTOR_CORE")
    for prof in (fa, sort):
        pts = points(prof, rules)
        assert pd.isna(pts.loc[0, "bound"]) and pts.loc[0, "recoverable_us"] == 0
    # shapes that make an op faster than its roof are not trusted either
    wrong = one_op("MatMulV3", "81920,4096;8192,512", "BF16;BF16", "4096,512", "BF16", "ND;ND", "ND", duration=20.0)
    assert pd.isna(points(wrong, rules).loc[0, "bound"])


def test_heavy_ops_cover_the_configured_share_of_time():
    pts = pd.DataFrame({"name": list("abcde"), "total_us": [50.0, 30.0, 10.0, 6.0, 4.0]})
    r = {"heavy_coverage": 0.8, "max_heavy_ops": 10, "min_op_total_us": 1.0}
    assert list(heavy_ops(pts, r)["name"]) == ["a", "b"]
    assert list(heavy_ops(pts, {**r, "heavy_coverage": 0.85})["name"]) == ["a", "b", "c"]
    assert list(heavy_ops(pts, {**r, "max_heavy_ops": 1})["name"]) == ["a"]


# --- real profiles ----------------------------------------------------------------------------------------


def test_well_tuned_llm_matmuls_from_cube_fops_have_nothing_to_recover(rules):
    """910B kernel_details with ArithmeticUtilization metrics: MatMuls run at ~300 of 354 TFLOPS."""
    prof = load_profile(COMPUTE_ADVICE)
    pts = points(prof, rules, "Ascend910B2")
    mm = pts[pts["type"] == "MatMul"]
    assert len(mm) >= 5 and (mm["source"] == "metrics").all() and (mm["bound"] == "compute").all()
    assert mm["attained_tflops"].between(250, 354).all()
    assert (mm["recoverable_us"] == 0).all()
    findings, _ = run(prof, rules, "Ascend910B2")
    assert not [f for f in findings if f.rule == "roofline.compute-bound" and "MatMul" in f.title]
    for f in findings:
        assert 0 < f.estimated_saving_us <= f.evidence["total_us"]
        assert set(f.saving_by_op) == set(f.ops)


def test_llm_training_profile_with_pipe_metrics(rules):
    """Level2 torch_npu profile: PipeUtilization ratios per op; FlashAttention's work is not derivable."""
    prof = load_profile(LLM_LEVEL2)
    pts = points(prof, rules, "Ascend910B2").set_index("name")
    fa = pts.loc["aclnnFlashAttentionScore_FlashAttentionScore_FlashAttentionScore"]
    assert pd.isna(fa["bound"])
    mm = pts.loc["aclnnMatmul_MatMulV3Common_MatMulV3"]
    assert mm["unit"] == "cube" and mm["pipe"] == "mte2" and mm["bound"] == "memory"
    assert 0 < mm["pct_of_roof"] < 1
    findings, status = run(prof, rules, "Ascend910B2")
    assert findings and all(f.rule.startswith("roofline.") for f in findings)
    assert any("neither shapes nor FLOP" in n for n in status.notes)
    busy = prof.busy_time_us()
    assert sum(f.estimated_saving_us for f in findings) < busy


def test_int8_moe_op_summary_runs_and_stays_plausible(rules):
    prof = load_profile(MOE_OP_SUMMARY)
    pts = points(prof, rules, "Ascend910B2")
    placed = pts.dropna(subset=["bound"])
    assert len(placed) and (placed["pct_of_roof"] <= rules.for_kb(KB)["max_pct_of_roof"]).all()
    findings, _ = run(prof, rules, "Ascend910B2")
    for f in findings:
        assert f.estimated_saving_us <= f.evidence["total_us"]


def test_many_rows_are_fast(rules):
    n = 400_000
    kinds = np.array(["MatMulV2", "Add", "Cast", "TransData", "Relu"])
    idx = np.arange(n) % 500
    ops = finalize_ops(pd.DataFrame({
        "name": pd.Series(idx.astype(str)).radd("op"), "type": kinds[idx % 5], "core": "AI_CORE",
        "start_us": np.arange(n) * 20.0, "duration_us": 5.0 + (idx % 7), "stream_id": 0,
        "input_shapes": np.where(idx % 5 == 0, "1024,1024;1024,1024", "1,64,56,56"),
        "input_dtypes": "FLOAT16", "output_shapes": np.where(idx % 5 == 0, "1024,1024", "1,64,56,56"),
        "output_dtypes": "FLOAT16"}))
    started = time.perf_counter()
    pts = roofline_points(ops, resolve_platform(rules, cases.CHIP), rules.for_kb(KB))
    assert time.perf_counter() - started < 20  # about 1 s here; generous for slow CI machines
    assert len(pts) == 500 and int(pts["calls"].sum()) == n


def test_rule_values_are_validated(tmp_path):
    from advisor.errors import RulesError

    with pytest.raises(RulesError, match="target_fraction_of_roof"):
        cases.load_rules({"rules": {KB: {"target_fraction_of_roof": 1.5}}}, tmp_path)
    with pytest.raises(RulesError, match="cube_peak"):
        cases.load_rules({"rules": {KB: {"cube_peak": {"FLOAT16": {"peak": "hbm_gbps", "scale": 1}}}}}, tmp_path)
