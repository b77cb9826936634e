"""The one op classification (advisor.toolkit.bound): bound by intensity against the ridge, pipes as evidence,
distance to the practical roof, computed once per rank and read by every knowledge base."""

from __future__ import annotations

import time

import numpy as np
import pandas as pd
import pytest

from advisor import ingest
from advisor.engine.kb_engine import KBInfo, run
from advisor.ingest.normalize import finalize_ops
from advisor.kb import AnalysisContext
from advisor.knowledge_bases.roofline import RooflineKB
from advisor.model import Meta, Profile
from advisor.platform import resolve_platform
from advisor.testing import load_rules
from advisor.toolkit import bound
from tests.scenarios import cases_b as cases
from tests.scenarios.builder import OpRow, make_profile

CHIP = cases.CHIP  # Ascend310P3: 69.47 TFLOPS fp16 cube, 4.4 TFLOPS fp16 vector, 204 GB/s (assumed)
LLM_RANK = "Ascend__msinsight/test/st/level2/rank_0_ascend_pt"
CNN_RANK = "Ascend__msinsight/test/data/pytorch/text/level2/rank0_ascend_pt"
COMPUTE_ADVICE = "Ascend__msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"
SANITIZED = "neo-pan__ascend-msprof-skill/tests/fixtures/real_cann_minimal/reports/PROF_001"



def classify(profile: Profile, rules, chip: str = CHIP) -> pd.DataFrame:
    return bound.classify(profile.ops, resolve_platform(rules, chip), rules.for_kb("bound"))


def one_op(op_type: str, ins: str, in_dt: str, outs: str, out_dt: str, in_fmt: str = "", out_fmt: str = "",
           core: str = "AI_CORE", duration: float = 100.0, name: str = "op", **metrics: float) -> Profile:
    row = {"name": name, "type": op_type, "core": core, "start_us": 0.0, "duration_us": duration,
           "input_shapes": ins, "input_dtypes": in_dt, "input_formats": in_fmt, "output_shapes": outs,
           "output_dtypes": out_dt, "output_formats": out_fmt, **metrics}
    return Profile(ops=finalize_ops(pd.DataFrame([row])), meta=Meta())


def sample_profile(rel: str) -> Profile:
    return ingest.load(cases.sample(rel))[0]


# --- the class: intensity against the ridge, latency, no clear bound ---------------------------------------


def test_intensity_against_the_ridge_decides_the_bound(rules):
    b = classify(cases.roofline_mixed().profile, rules).set_index("name")
    mm, add, good = b.loc["mm_slow"], b.loc["add_slow"], b.loc["mm_ok"]
    # 2 x 2048^3 FLOPs over 3 x 2048^2 fp16 tensors: 683 FLOP/B, above the ridge 69.47 TFLOPS / 204 GB/s = 341
    assert mm["intensity"] == pytest.approx(2 * 2048 ** 3 / (3 * 2048 * 2048 * 2))
    assert mm["ridge"] == pytest.approx(69.47e12 / 204e9)
    assert (mm["bound"], mm["unit"], mm["calls"]) == ("compute", "cube", 4)
    assert mm["pct_of_roof"] == pytest.approx(0.3, rel=1e-6)
    assert mm["roof_tflops"] == pytest.approx(69.47) and mm["attained_tflops"] == pytest.approx(0.3 * 69.47)
    assert (add["bound"], add["unit"]) == ("memory", "vector")
    assert add["roof_tflops"] == pytest.approx(add["intensity"] * 204.0 / 1e3, rel=1e-9)  # on the bandwidth roof
    # recoverable = total x (1 - share of the practical roof), the share = pct / target_fraction_of_roof (0.8)
    r = rules.for_kb("bound")
    assert mm["share_of_roof"] == pytest.approx(0.3 / r["target_fraction_of_roof"])
    assert mm["recoverable_us"] == pytest.approx(mm["total_us"] * (1 - 0.3 / 0.8), rel=1e-6)
    assert add["recoverable_us"] == pytest.approx(add["total_us"] * (1 - 0.4 / 0.8), rel=1e-6)
    assert good["at_roof"] and good["recoverable_us"] == 0  # 90 % of the roof: nothing to recover
    assert (b["recoverable_us"] >= 0).all() and (b["recoverable_us"] <= b["total_us"]).all()


def test_pipes_are_evidence_not_the_class(rules):
    """A conv above the ridge stays compute bound when its MTE2 pipe is saturated: the pipe disagrees (the kernel
    re-reads its operands) and the time it could recover comes from its compute throughput."""
    b = classify(cases.roofline_metrics().profile, rules).set_index("name")
    mte2, loose, good = b.loc["conv_mte2"], b.loc["conv_nobound"], b.loc["conv_good"]
    assert (mte2["bound"], mte2["pipe"], mte2["pipe_agrees"]) == ("compute", "mte2", False)
    assert mte2["saturated"] == "mte2 0.95" and mte2["recoverable_us"] > 0
    # no pipe saturated and far below the roof: no clear bound
    assert (loose["bound"], loose["pipe"]) == ("none", "mte2") and loose["recoverable_us"] > 0
    # the mac pipe at 0.92 says the conv is at its roof, whatever its FLOPs say
    assert (good["bound"], good["pipe"], good["pipe_agrees"], good["at_roof"]) == ("compute", "mac", True, True)
    assert good["recoverable_us"] == 0


@pytest.mark.parametrize("mac", [0.62, 0.7, 0.84])
def test_convs_near_their_roof_have_nothing_to_recover(mac, rules):
    """A clean model's convs at 62-84 % MAC ratio are at (or near) their roof: no tuning to propose."""
    rows = [OpRow(f"conv{i}", "Conv2D", 300.0, core="AI_CORE", input_shapes="1,4,56,56,16;36,4,16,16",
                  input_dtypes="FLOAT16;FLOAT16", input_formats="NC1HWC0;FRACTAL_Z", output_shapes="1,4,56,56,16",
                  output_dtypes="FLOAT16", output_formats="NC1HWC0",
                  metrics={"mac_ratio": mac, "mte2_ratio": 0.3, "scalar_ratio": 0.1, "vec_ratio": 0.05})
            for i in range(3)]
    b = classify(make_profile(rows), rules)
    assert (b["bound"] != "none").all() and b["at_roof"].all() and (b["recoverable_us"] == 0).all()


def test_short_ops_and_tiny_work_are_latency_bound(rules):
    tiny = classify(cases.roofline_latency().profile, rules).set_index("name")
    assert (tiny["bound"] == "latency").all()
    # no kernel is faster than min_kernel_us: each 9 us call can recover 9 - 5 us
    min_us = rules.for_kb("bound")["min_kernel_us"]
    assert tiny["recoverable_us"].tolist() == pytest.approx([40 * (9.0 - min_us)] * 3)
    # a LeNet-sized matmul taking 30 us: its work fits in well under a microsecond at the roof
    lenet = classify(one_op("MatMul", "32,400;120,400", "FLOAT16;FLOAT16", "32,120", "FLOAT16", "ND;ND", "ND",
                            duration=30.0), rules)
    assert lenet.loc[0, "bound"] == "latency" and lenet.loc[0, "recoverable_us"] == pytest.approx(30.0 - min_us)


def test_ops_whose_work_is_unknown_are_classified_from_their_pipes(rules):
    fa = dict(input_shapes="1,4096,1024;1,4096,1024", input_dtypes="BF16;BF16", output_shapes="1,4096,1024",
              output_dtypes="BF16")
    plain = make_profile([OpRow("fa", "FlashAttentionScore", 500.0, core="MIX_AIC", **fa)], chip="Ascend910B2")
    b = classify(plain, rules, "Ascend910B2")
    assert pd.isna(b.loc[0, "bound"]) and b.loc[0, "recoverable_us"] == 0  # nothing to judge it by
    piped = make_profile([OpRow("fa", "FlashAttentionScore", 500.0, core="MIX_AIC", **fa,
                                metrics={"aic_fixpipe_ratio": 0.3, "aic_mte2_ratio": 0.4, "aiv_vec_ratio": 0.35,
                                         "aic_mac_ratio": 0.3})], chip="Ascend910B2")
    b = classify(piped, rules, "Ascend910B2").iloc[0]
    # no pipe saturated, but its MTE2 out-works its cube (msprof's Memory Bound 0.4 / 0.3 > 1): memory bound
    assert (b["source"], b["bound"], b["pipe"]) == ("pipes", "memory", "mte2")
    assert b["memory_bound_ratio"] == pytest.approx(0.4 / 0.3)
    assert b["share_of_roof"] == pytest.approx(0.4 / 0.8)  # the busiest pipe against its saturation
    assert np.isnan(b["pct_of_roof"]) and b["recoverable_us"] == pytest.approx(500 * 0.5)
    # its cube out-working its MTE2 and no pipe saturated: no clear bound
    loose = make_profile([OpRow("fa", "FlashAttentionScore", 500.0, core="MIX_AIC", **fa,
                                metrics={"aic_fixpipe_ratio": 0.45, "aic_mte2_ratio": 0.3, "aic_mac_ratio": 0.35})],
                         chip="Ascend910B2")
    b = classify(loose, rules, "Ascend910B2").iloc[0]
    assert (b["bound"], b["pipe"]) == ("none", "fixpipe") and b["memory_bound_ratio"] < 1
    assert b["share_of_roof"] == pytest.approx(0.45 / 0.75)
    # shapes that make an op faster than its roof are not trusted: the op is judged by its pipes (none here)
    wrong = one_op("MatMulV3", "81920,4096;8192,512", "BF16;BF16", "4096,512", "BF16", "ND;ND", "ND", duration=20.0)
    assert pd.isna(classify(wrong, rules, "Ascend910B2").loc[0, "bound"])


def test_pipe_ratios_that_are_all_zero_were_not_collected(rules):
    prof = one_op("Add", "1024,1024;1024,1024", "FLOAT16;FLOAT16", "1024,1024", "FLOAT16", core="AI_VECTOR_CORE",
                  mac_ratio=0.0, vec_ratio=0.0, mte2_ratio=0.0, mte3_ratio=0.0, scalar_ratio=0.0)
    b = classify(prof, rules).iloc[0]
    assert b["pipe"] == "" and b["source"] == "shapes" and b["bound"] == "memory"


# --- FLOPs and bytes ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("op", "expected_flops"), [
    # NC1HWC0 conv, FRACTAL_Z weight, C0 = 8 (fp32, as torch_npu writes it): Conv2D1 of the msinsight CNN sample
    (("Conv2D", "32,1,224,224,8;121,4,16,8;64", "FLOAT;FLOAT;FLOAT", "32,8,55,55,8", "FLOAT",
      "NC1HWC0;FRACTAL_Z;ND", "NC1HWC0"), 2 * 32 * 64 * 55 * 55 * 8 * 11 * 11),
    (("Conv2D", "1,64,56,56;128,64,3,3", "FLOAT16;FLOAT16", "1,128,56,56", "FLOAT16", "NCHW;NCHW", "NCHW"),
     2 * 128 * 56 * 56 * 64 * 9),
    (("DepthwiseConv2D", "1,32,112,112;32,1,3,3", "FLOAT16;FLOAT16", "1,32,112,112", "FLOAT16", "NCHW;NCHW",
      "NCHW"), 2 * 32 * 112 * 112 * 9),
    (("MatMul", "4096,12288;4608,12288", "FLOAT16;FLOAT16", "4096,4608", "FLOAT16", "ND;ND", "ND"),
     2 * 4096 * 4608 * 12288),
    (("BatchMatMul", "12,1024,512;12,512,1024", "FLOAT16;FLOAT16", "12,1024,1024", "FLOAT16", "ND;ND", "ND"),
     2 * 12 * 1024 * 1024 * 512),
    (("MatMulV2", "64,32,16,16;32,64,16,16", "FLOAT16;FLOAT16", "32,32,16,16", "FLOAT16",
      "FRACTAL_NZ;FRACTAL_NZ", "FRACTAL_NZ"), 2 * 512 * 512 * 1024),
    # FullyConnection on a 5HD input and FRACTAL_Z weight: 2 N Cout C H W
    (("FullyConnection", "1,4,7,7,16;196,4,16,16", "FLOAT16;FLOAT16", "1,64", "FLOAT16", "NC1HWC0;FRACTAL_Z",
      "ND"), 2 * 64 * 64 * 7 * 7),
    (("Sigmoid", "8,1024", "FLOAT16", "8,1024", "FLOAT16", "ND", "ND"), 4 * 8 * 1024),
    (("TransData", "1,64,56,56", "FLOAT16", "1,4,56,56,16", "FLOAT16", "NCHW", "NC1HWC0"), 0),
])
def test_flops_from_shapes(op, expected_flops, rules):
    op_type, ins, in_dt, outs, out_dt, in_fmt, out_fmt = op
    b = classify(one_op(op_type, ins, in_dt, outs, out_dt, in_fmt, out_fmt, duration=10_000.0), rules)
    assert b.loc[0, "flops"] == pytest.approx(expected_flops, rel=1e-9)
    assert b.loc[0, "source"] == "shapes"


def test_bytes_are_the_sum_of_input_and_output_tensors(rules):
    b = classify(one_op("Add", "8,1024;8,1024", "FLOAT;FLOAT", "8,1024", "FLOAT16"), rules)
    assert b.loc[0, "bytes"] == 2 * 8 * 1024 * 4 + 8 * 1024 * 2


def test_measured_flops_and_bytes_win_over_shapes(rules):
    prof = one_op("MatMul", "1024,1024;1024,1024", "FLOAT16;FLOAT16", "1024,1024", "FLOAT16", duration=50.0,
                  cube_fops=3.0e9, main_mem_read_bw=100.0, main_mem_write_bw=20.0, aicore_time_us=40.0)
    b = classify(prof, rules)
    assert b.loc[0, "flops"] == 3.0e9 and b.loc[0, "source"] == "metrics"
    assert b.loc[0, "bytes"] == pytest.approx(120.0 * 40.0 * 1e3)  # GB/s x us


def test_int8_and_fp32_cube_ops_use_their_own_peak(rules):
    plat = resolve_platform(rules, CHIP)
    int8 = classify(one_op("MatMul", "1024,1024;1024,1024", "INT8;INT8", "1024,1024", "INT32"), rules)
    fp32 = classify(one_op("MatMul", "1024,1024;1024,1024", "FLOAT;FLOAT", "1024,1024", "FLOAT"), rules)
    assert int8.loc[0, "peak_tflops"] == plat["int8_tops"]
    scale = rules.for_kb("bound")["cube_peak"]["FLOAT"]["scale"]
    assert fp32.loc[0, "peak_tflops"] == pytest.approx(plat["fp16_tflops"] * scale)
    assert fp32.loc[0, "ridge"] == pytest.approx(plat["fp16_tflops"] * scale * 1e3 / plat["hbm_gbps"])


# --- real profiles -----------------------------------------------------------------------------------------


def test_llm_matmul_above_the_ridge_is_compute_bound_at_its_roof(rules):
    """The MatMulV3 of the level2 LLM profile: 674 FLOP/B, above the ridge (221), MTE2 saturated, mac ~0.75. It
    is compute bound (the pipe disagrees) and near its practical roof: nothing to claim, no tuning to propose."""
    b = classify(sample_profile(LLM_RANK), rules, "Ascend910B2").set_index("name")
    mm = b.loc["aclnnMatmul_MatMulV3Common_MatMulV3"]
    assert mm["intensity"] > mm["ridge"] and mm["bound"] == "compute"
    assert (mm["pipe"], mm["pipe_agrees"]) == ("mte2", False)
    assert mm["at_roof"] and mm["recoverable_us"] == 0
    fa = b.loc["aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad"]
    assert fa["source"] == "pipes" and fa["pipe"] == "fixpipe"


@pytest.mark.parametrize("rel", [LLM_RANK, CNN_RANK, COMPUTE_ADVICE])
def test_shares_never_exceed_the_roof_or_the_time(rel, rules):
    b = classify(sample_profile(rel), rules, "Ascend910B2")
    placed = b[b["pct_of_roof"].notna()]
    assert len(placed) and (placed["pct_of_roof"] <= 1.0).all()
    assert (b["share_of_roof"].dropna().between(0, 1)).all()
    assert (b["recoverable_us"] <= b["total_us"] + 1e-9).all()
    assert not (b["at_roof"] & (b["recoverable_us"] > 0)).any()
    assert set(b["bound"].dropna()) <= set(bound.BOUNDS)


def test_well_tuned_matmuls_from_cube_fops_are_at_their_roof(rules):
    """910B kernel_details with ArithmeticUtilization metrics: MatMuls run at ~300 of 354 TFLOPS."""
    b = classify(sample_profile(COMPUTE_ADVICE), rules, "Ascend910B2")
    mm = b[b["type"] == "MatMul"]
    assert len(mm) >= 5 and (mm["source"] == "metrics").all() and (mm["bound"] == "compute").all()
    assert mm["attained_tflops"].between(250, 354).all() and (mm["recoverable_us"] == 0).all()


def test_sanitized_kernel_with_empty_pipes_claims_nothing_from_them(rules):
    b = classify(sample_profile(SANITIZED), rules, "Ascend910B2")
    assert (b["recoverable_us"] < b["total_us"] * 0.5).all()


# --- MIX kernels: judged on their busier side; scalar bound (issue 28.5) --------------------------------------
TILELANG_MIX = ("neo-pan__ascend-msprof-skill/tests/fixtures/tilelang_design_feedback/candidate_comparability/"
                "missing_raw_index_candidate/reports/app/PROF_000001_20260605161708478_FRJKORBPFMHQMGLA")
TILELANG_GEMM = ("hicann__cann-learning-hub/tutorials/tilelang_operator_development/06_tuning/data/msprof_sample/"
                 "op_summary_current.csv")


def _raw_rows(rel: str) -> list[dict]:
    import csv

    root = cases.sample(rel)
    path = root if root.is_file() else next(root.rglob("op_summary_*.csv"))
    return list(csv.DictReader(path.open(encoding="utf-8")))


def _side_busy(row: dict, side: str) -> float:
    """A side's busiest pipe time: its time x its largest pipe ratio (scalar included), from the raw row."""
    time_col = "aicore_time(us)" if side == "aic" else "aiv_time(us)"
    ratios = [float(v) for k, v in row.items() if k.startswith(f"{side}_") and k.endswith("_ratio") and v not in
              ("", "N/A")]
    return float(row[time_col]) * max(ratios)


def test_a_mix_kernel_is_judged_on_its_busy_side(rules):
    """The tilelang MIX_AIC kernel: its cube side runs ~10 us, its vector side 79.5 ms with the scalar pipe at 0.999
    and every other pipe idle. It is scalar bound on its vector side -- not 'no clear bound' (or memory bound)
    from its idle cube side's pipes."""
    rows = _raw_rows(TILELANG_MIX)
    assert all(_side_busy(r, "aiv") > _side_busy(r, "aic") for r in rows)
    dur = [float(r["Task Duration(us)"]) for r in rows]
    scalar = sum(float(r["aiv_scalar_ratio"]) * d for r, d in zip(rows, dur, strict=True)) / sum(dur)
    b = classify(sample_profile(TILELANG_MIX), rules, "Ascend910B2").iloc[0]
    assert (b["core"], b["bound"], b["pipe"]) == ("MIX_AIC", "scalar", "scalar")
    assert b["pipe_ratio"] == pytest.approx(scalar, abs=1e-6) and b["pipe_agrees"] is None
    assert np.isnan(b["mac_ratio"]) and b["vec_ratio"] == 0  # the vector side's pipes, not the cube side's
    # its scalar pipe is saturated: at its (scalar) roof, nothing recoverable, no tuning advice
    assert b["at_roof"] and b["recoverable_us"] == 0


def test_a_kernel_whose_scalar_pipe_is_busiest_is_scalar_bound(rules):
    """A MIX kernel whose idle cube side has mte2 0.01 and whose vector side runs its scalar pipe at 0.517: scalar
    bound, its recoverable time from the scalar pipe's share of saturation (not 'no clear bound at mte2 0.01'
    claiming nearly all of it)."""
    metrics = {"aicore_time_us": 8.0, "aic_mac_ratio": 0.0, "aic_scalar_ratio": 0.3, "aic_mte2_ratio": 0.01,
               "aiv_time_us": 450.0, "aiv_vec_ratio": 0.05, "aiv_scalar_ratio": 0.517, "aiv_mte2_ratio": 0.01,
               "aiv_mte3_ratio": 0.01}
    prof = make_profile([OpRow("mix", "custom_kernel", 456.0, core="MIX_AIC", metrics=metrics,
                               extra={"block_dim": 24, "mix_block_dim": 48})], chip="Ascend910B2")  # every core
    b = classify(prof, rules, "Ascend910B2").iloc[0]
    r = rules.for_kb("bound")
    assert r["scalar_bound_ratio"] <= 0.517 and (b["bound"], b["pipe"]) == ("scalar", "scalar")
    share = 0.517 / r["pipe_saturation"]["scalar"]
    assert b["share_of_roof"] == pytest.approx(share)
    assert b["recoverable_us"] == pytest.approx(456.0 * (1 - share)) and b["recoverable_us"] < 0.4 * 456.0
    findings, _ = run([KBInfo(RooflineKB, "t", "", "")], prof, None, rules, resolve_platform(rules, "Ascend910B2"))
    assert not [f for f in findings if f.rule == "roofline.no-bound"]
    (f,) = [f for f in findings if f.rule == "roofline.scalar-bound"]
    assert f.ops == ["mix"] and f.estimated_saving_us == pytest.approx(b["recoverable_us"])
    assert "scalar pipe 0.52" in f.title


def test_a_cube_kernel_is_measured_against_the_cube_roof(rules):
    """The tilelang GEMM (AI_CORE, aic_mac_ratio 0.18, no vector work, its type unknown to the shape math) and a MIX
    kernel whose cube side does the work (aic_mac_ratio 0.247, aiv_vec_ratio 0.009) run on the cube: their ridge and
    peak are the cube's, not the vector unit's."""
    (row,) = _raw_rows(TILELANG_GEMM)
    assert float(row["aic_mac_ratio"]) > 0 and float(row["aiv_vec_ratio"]) == 0
    platform = resolve_platform(rules, "Ascend910B2")
    b = classify(sample_profile(TILELANG_GEMM), rules, "Ascend910B2").iloc[0]
    assert b["unit"] == "cube" and b["peak_tflops"] == pytest.approx(platform["fp16_tflops"])
    mix = make_profile([OpRow("mix", "custom_gemm", 200.0, core="MIX_AIC", metrics={
        "aicore_time_us": 190.0, "aic_mac_ratio": 0.247, "aic_mte2_ratio": 0.3, "aic_scalar_ratio": 0.1,
        "aiv_time_us": 40.0, "aiv_vec_ratio": 0.009, "aiv_scalar_ratio": 0.05})], chip="Ascend910B2")
    m = classify(mix, rules, "Ascend910B2").iloc[0]
    assert m["unit"] == "cube" and m["ridge"] == pytest.approx(platform["fp16_tflops"] / platform["hbm_gbps"] * 1e3)
    assert m["pipe"] == "mte2" and m["mac_ratio"] == pytest.approx(0.247) and np.isnan(m["vec_ratio"])


# --- shared once per rank ---------------------------------------------------------------------------------


def test_computed_once_per_rank_and_platform(rules, monkeypatch):
    profile = cases.roofline_mixed().profile
    plat = resolve_platform(rules, CHIP)
    calls = []
    real = bound.classify
    monkeypatch.setattr(bound, "classify", lambda *a: calls.append(1) or real(*a))
    ctx = AnalysisContext("x", profile, None, {}, plat, toolkit_rules={"bound": rules.for_kb("bound")})
    first = bound.op_bounds(ctx)
    first["bound"] = "tampered"  # a knowledge base gets a copy: it cannot change what the next one reads
    second = bound.op_bounds(AnalysisContext("y", profile, None, {}, dict(plat),
                                             toolkit_rules={"bound": rules.for_kb("bound")}))
    assert len(calls) == 1 and "tampered" not in set(second["bound"])
    bound.op_bounds(AnalysisContext("z", profile, None, {}, {**plat, "hbm_gbps": 408.0},
                                    toolkit_rules={"bound": rules.for_kb("bound")}))
    assert len(calls) == 2  # another platform is another classification


def test_user_overrides_of_the_bound_rules_reach_every_knowledge_base(tmp_path):
    """--rules my.yaml with rules: {bound: ...} changes the classification the knowledge bases read."""
    sc = cases.roofline_mixed()
    base = load_rules()
    lenient = load_rules(override={"rules": {"bound": {"near_roof": 0.45}}})  # of the practical roof
    flagged = {f.ops[0] for f in run([KBInfo(RooflineKB, "t", "", "")], sc.profile, None, base,
                                     resolve_platform(base, CHIP))[0]}
    lenient_flags = {op for f in run([KBInfo(RooflineKB, "t", "", "")], sc.profile, None, lenient,
                                     resolve_platform(lenient, CHIP))[0] for op in f.ops}
    # mm_slow reaches 37.5 % of the practical roof, add_slow 50 %: only mm_slow stays below 45 %
    assert flagged == {"mm_slow", "add_slow"} and lenient_flags == {"mm_slow"}


def test_rule_values_are_validated(tmp_path):
    from advisor.common.errors import RulesError

    with pytest.raises(RulesError, match="near_roof"):
        load_rules(override={"rules": {"bound": {"near_roof": 1.5}}})
    with pytest.raises(RulesError, match="cube_peak"):
        load_rules(override={"rules": {"bound": {"cube_peak": {"FLOAT16": {"peak": "hbm_gbps", "scale": 1}}}}})


def test_many_rows_are_fast(rules):
    n = 400_000
    kinds = np.array(["MatMulV2", "Add", "Cast", "TransData", "Relu"])
    idx = np.arange(n) % 500
    ops = finalize_ops(pd.DataFrame({
        "name": pd.Series(idx.astype(str)).radd("op"), "type": kinds[idx % 5], "core": "AI_CORE",
        "start_us": np.arange(n) * 20.0, "duration_us": 5.0 + (idx % 7), "stream_id": 0,
        "input_shapes": np.where(idx % 5 == 0, "1024,1024;1024,1024", "1,64,56,56"),
        "input_dtypes": "FLOAT16", "output_shapes": np.where(idx % 5 == 0, "1024,1024", "1,64,56,56"),
        "output_dtypes": "FLOAT16", "mte2_ratio": (idx % 9) / 10.0, "vec_ratio": 0.2}))
    started = time.perf_counter()
    b = bound.classify(ops, resolve_platform(rules, CHIP), rules.for_kb("bound"))
    assert time.perf_counter() - started < 20  # about 1 s here; generous for slow CI machines
    assert len(b) == 500 and int(b["calls"].sum()) == n


@pytest.mark.parametrize("rel", [LLM_RANK, CNN_RANK, COMPUTE_ADVICE])
def test_classifying_in_chunks_gives_the_whole_table_result(rules, rel, monkeypatch):
    """Large profiles are classified a chunk of tasks at a time (bounded memory): same ops, same classes, same
    sums (up to summation order) as one pass over every task."""
    profile = sample_profile(rel)
    whole = classify(profile, rules)
    monkeypatch.setattr(bound, "CHUNK_ROWS", max(7, len(profile.ops) // 5))
    chunked = classify(profile, rules)
    assert len(whole) > 3
    assert chunked["name"].tolist() == whole["name"].tolist()
    for col in ("bound", "source", "unit", "dtype", "pipe", "saturated", "calls"):
        assert chunked[col].tolist() == whole[col].tolist(), col
    for col in ("total_us", "flops", "bytes", "share_of_roof", "recoverable_us", "cores_used", "mte2_ratio"):
        np.testing.assert_allclose(chunked[col].to_numpy(dtype=float), whole[col].to_numpy(dtype=float),
                                   rtol=1e-9, equal_nan=True, err_msg=col)


def test_a_kernel_msprof_op_records_without_an_op_type_is_classified(rules):
    """msprof op (OPPROF_*) records no op type: the kernel is still classified (it was dropped as a missing group
    key). The Cummin kernel's vector side runs its scalar pipe at ~0.63 of its cycles: scalar bound."""
    import csv

    rel = "Lulili520__ascendc-optim-agent/log/Cummin/round_000/msprof_output/OPPROF_20260522141558_SZQVDGFRHWOMIFFS"
    rows = list(csv.DictReader((cases.sample(rel) / "PipeUtilization.csv").open(encoding="utf-8")))
    cycles = [float(r["aiv_total_cycles"]) for r in rows]
    scalar = sum(float(r["aiv_scalar_ratio"]) * c for r, c in zip(rows, cycles, strict=True)) / sum(cycles)
    others = {k: sum(float(r[k]) * c for r, c in zip(rows, cycles, strict=True)) / sum(cycles)
              for k in ("aiv_vec_ratio", "aiv_mte2_ratio", "aiv_mte3_ratio")}
    assert scalar >= rules.for_kb("bound")["scalar_bound_ratio"] and scalar > max(others.values())
    b = classify(sample_profile(rel), rules, "Ascend910B2")
    assert len(b) == 1
    row = b.iloc[0]
    assert (row["name"], row["type"], row["bound"], row["pipe"]) == ("Cummin_kernel", "", "scalar", "scalar")
    assert row["pipe_ratio"] == pytest.approx(scalar, rel=1e-6)
