"""The operator knowledge base: one positive and one negative case per rule, real samples, and scale."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from advisor import engine, ingest
from advisor.findings import Finding
from advisor.ingest.normalize import finalize_ops
from advisor.model import Meta, Profile
from advisor.platform import resolve_platform
from advisor.rules import builtin_rules_dir, load_effective_rules
from knowledge_bases.operator import OperatorKB, mean_clock
from tests.scenarios.builder import OpRow, make_profile

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
MSINSIGHT = SAMPLES / "Ascend__msinsight" / "test"
RULES = load_effective_rules([builtin_rules_dir()])
CFG = RULES.for_kb("operator")


def run(profile: Profile, chip: str | None = None) -> tuple[list[Finding], engine.KBStatus]:
    platform = resolve_platform(RULES, chip or profile.meta.chip)
    findings, statuses = engine.run([engine.KBInfo(OperatorKB, "test", "", "")], profile, None, RULES, platform)
    assert statuses[0].status == "ok", statuses[0].reason
    return findings, statuses[0]


def only(findings: list[Finding], rule: str) -> Finding:
    found = [f for f in findings if f.rule == rule]
    assert len(found) == 1, [f.rule for f in findings]
    return found[0]


def none_of(findings: list[Finding], rule: str) -> None:
    assert not [f for f in findings if f.rule == rule], [f.title for f in findings if f.rule == rule]


def cube_row(name: str, dur: float, blocks: float = 8, mac: float = 0.85, mte2: float = 0.3,
             shapes: str = "1024,4096;4096,1024", op_type: str = "MatMulV2", fmt: str = "ND;ND",
             **extra: Any) -> OpRow:
    return OpRow(name, op_type, dur, core="AI_CORE", input_shapes=shapes, input_formats=fmt,
                 input_dtypes="FLOAT16;FLOAT16", output_shapes="1024,1024", output_dtypes="FLOAT16",
                 metrics={"mac_ratio": mac, "mte2_ratio": mte2, "scalar_ratio": 0.1, "mte1_ratio": 0.2,
                          "aic_mac_ratio": mac, "aic_mte2_ratio": mte2},
                 extra={"block_dim": blocks, "op_state": "static", **extra})


def vec_row(name: str, dur: float, vec: float, mte2: float, mte3: float = 0.1, blocks: float = 7,
            op_type: str = "Add", shapes: str = "1024,1024", **extra: Any) -> OpRow:
    return OpRow(name, op_type, dur, core="AI_VECTOR_CORE", input_shapes=f"{shapes};{shapes}",
                 output_shapes=shapes, input_dtypes="FLOAT16;FLOAT16", output_dtypes="FLOAT16",
                 metrics={"aiv_vec_ratio": vec, "aiv_mte2_ratio": mte2, "aiv_mte3_ratio": mte3,
                          "aiv_scalar_ratio": 0.05, "aic_mte2_ratio": 0.0, "aic_mac_ratio": 0.0},
                 extra={"block_dim": blocks, "op_state": "static", **extra})


# ---------------------------------------------------------------------------------------------------------
# operator.block-dim
# ---------------------------------------------------------------------------------------------------------
def test_block_dim_flags_partial_last_wave() -> None:
    # Ascend310P3: 8 AI cores, 7 vector cores (rules/platforms.yaml)
    p = make_profile([cube_row("mm_6", 100, blocks=6), cube_row("mm_8", 100, blocks=8),
                      cube_row("mm_16", 100, blocks=16), cube_row("mm_12", 100, blocks=12),
                      vec_row("add_5", 50, 0.9, 0.1, blocks=5), vec_row("add_14", 50, 0.9, 0.1, blocks=14)])
    f = only(run(p)[0], "operator.block-dim")
    assert set(f.ops) == {"mm_6", "mm_12", "add_5"}
    realism = CFG["block_dim"]["realism"]
    # 6 of 8 cores; 12 blocks = 2 waves of 8 -> 12/16 used; 5 of 7 vector cores
    assert f.saving_by_op["mm_6"] == pytest.approx(100 * (2 / 8) * realism)
    assert f.saving_by_op["mm_12"] == pytest.approx(100 * (4 / 16) * realism)
    assert f.saving_by_op["add_5"] == pytest.approx(50 * (2 / 7) * realism)
    assert f.evidence["core_count_source"].startswith("rules/platforms.yaml Ascend310P3")


def test_block_dim_quiet_for_full_waves_short_or_small_ops() -> None:
    p = make_profile([cube_row("mm_8", 100, blocks=8), cube_row("mm_24", 100, blocks=24),
                      cube_row("short", CFG["block_dim"]["min_duration_us"] / 2, blocks=3),
                      OpRow("tiny", "Add", 100, core="AI_VECTOR_CORE", output_shapes="64",
                            extra={"block_dim": 1})])
    none_of(run(p)[0], "operator.block-dim")


def test_block_dim_mix_op_uses_its_vector_part() -> None:
    # MIX_AIC with 6 cube blocks but a full vector part (14 blocks on 7 vector cores): not idle
    p = make_profile([cube_row("mix", 100, blocks=6, core="MIX_AIC", mix_block_dim=14)])
    assert p.ops["core"].iloc[0] == "MIX_AIC"
    none_of(run(p)[0], "operator.block-dim")
    # the same cube part without a vector part leaves 2 of 8 cores idle
    p = make_profile([cube_row("mix", 100, blocks=6, core="MIX_AIC", mix_block_dim=0)])
    assert only(run(p)[0], "operator.block-dim").ops == ["mix"]


def test_block_dim_infers_cores_when_chip_unknown() -> None:
    rows = [cube_row(f"big{i}", 500, blocks=20) for i in range(5)] + [cube_row("odd", 200, blocks=13)]
    p = make_profile(rows, chip="Ascend910B-class")
    f = only(run(p)[0], "operator.block-dim")
    assert f.ops == ["odd"]
    assert f.evidence["ai_core_num"] == 20 and "inferred" in f.evidence["core_count_source"]
    assert f.confidence < 0.5


# ---------------------------------------------------------------------------------------------------------
# operator.no-bound
# ---------------------------------------------------------------------------------------------------------
def test_no_bound_flags_every_unbound_op() -> None:
    p = make_profile([cube_row("bound", 100, mac=0.9), cube_row("loose", 100, mac=0.4, mte2=0.5),
                      vec_row("v_loose", 30, 0.2, 0.3), vec_row("v_mte2", 30, 0.1, 0.92)])
    f = only(run(p)[0], "operator.no-bound")
    assert set(f.ops) == {"loose", "v_loose"}
    r = CFG["no_bound"]
    assert f.saving_by_op["loose"] == pytest.approx(100 * (1 - 0.5 / r["bound_ratio"]) * r["realism"])


def test_no_bound_needs_pmu_data() -> None:
    p = make_profile([OpRow("a", "Add", 100, core="AI_CORE"), OpRow("b", "Mul", 100, core="AI_CORE")])
    findings, status = run(p)
    none_of(findings, "operator.no-bound")
    assert any(n.startswith("operator.no-bound: skipped") for n in status.notes)


# ---------------------------------------------------------------------------------------------------------
# operator.dynamic-shape
# ---------------------------------------------------------------------------------------------------------
def test_dynamic_shape_reports_varying_shapes() -> None:
    rows = [cube_row("mm", 100, shapes=f"{n},4096;4096,1024", op_state="dynamic") for n in (128, 256, 512)]
    rows += [cube_row("st", 100)]
    f = only(run(make_profile(rows))[0], "operator.dynamic-shape")
    assert f.ops == ["mm"] and f.evidence["dynamic_tasks"] == 3 and not f.evidence["all_dynamic"]
    assert f.evidence["ops_with_varying_shapes"] == 1
    assert "jit_compile=False" in f.recommendation
    assert f.estimated_saving_us == pytest.approx(300 * CFG["dynamic"]["saving_fraction"])


def test_dynamic_shape_quiet_when_static_or_unknown() -> None:
    none_of(run(make_profile([cube_row("a", 100), cube_row("b", 100)]))[0], "operator.dynamic-shape")
    p = make_profile([cube_row("a", 100), cube_row("b", 100)])
    p.ops["op_state"] = pd.Series(pd.NA, index=p.ops.index, dtype="string").astype("category")
    findings, status = run(p)
    none_of(findings, "operator.dynamic-shape")
    assert any("no OP State column" in n for n in status.notes)


# ---------------------------------------------------------------------------------------------------------
# operator.ai-core-freq
# ---------------------------------------------------------------------------------------------------------
def _with_clock(profile: Profile, samples: list[tuple[float, float]]) -> Profile:
    profile.extras["counters"] = pd.DataFrame({
        "process": pd.Categorical(["Ascend Hardware"] * len(samples)),
        "name": pd.Categorical(["AI Core Freq"] * len(samples)), "key": pd.Categorical(["MHz"] * len(samples)),
        "ts_us": [t for t, _ in samples], "value": [v for _, v in samples]})
    return profile


def test_mean_clock_integrates_the_step_function() -> None:
    ts, mhz = np.array([0.0, 100.0, 200.0]), np.array([1800.0, 1500.0, 1800.0])
    got = mean_clock(ts, mhz, np.array([50.0, 100.0, 150.0, -50.0, -20.0]), np.array([150.0, 200.0, 250.0, -10.0,
                                                                                       10.0]))
    assert got[:3] == pytest.approx([1650.0, 1500.0, 1650.0])
    assert np.isnan(got[3]) and got[4] == pytest.approx(1800.0)  # before the first sample: unknown / clipped


def test_ai_core_freq_flags_throttled_ops() -> None:
    t0 = 1_000_000.0
    p = make_profile([cube_row("fast", 100, start_us=t0), cube_row("slow", 100, start_us=t0 + 1000),
                      cube_row("edge", 100, start_us=t0 + 1950)], chip="Ascend910B2")
    _with_clock(p, [(t0 - 10, 1800.0), (t0 + 500, 1200.0), (t0 + 2000, 1800.0)])
    f = only(run(p)[0], "operator.ai-core-freq")
    assert set(f.ops) == {"slow", "edge"}
    assert f.saving_by_op["slow"] == pytest.approx(100 * (1 - 1200 / 1800))
    assert f.saving_by_op["edge"] == pytest.approx(100 * (1 - (50 * 1200 + 50 * 1800) / 100 / 1800))
    assert f.evidence["nominal_mhz"] == 1800


def test_ai_core_freq_quiet_at_nominal_clock() -> None:
    t0 = 1_000_000.0
    p = make_profile([cube_row("a", 100, start_us=t0)], chip="Ascend910B2")
    none_of(run(_with_clock(p, [(t0 - 10, 1800.0), (t0 + 50, 1790.0)]))[0], "operator.ai-core-freq")
    none_of(run(make_profile([cube_row("a", 100)]))[0], "operator.ai-core-freq")


# ---------------------------------------------------------------------------------------------------------
# operator.cube-affinity / operator.cube-bound
# ---------------------------------------------------------------------------------------------------------
def test_cube_affinity_flags_unaligned_inner_axis() -> None:
    p = make_profile([cube_row("k4000", 300, shapes="8192,4000;4000,8192"),
                      cube_row("k4096", 300, shapes="8192,4096;4096,8192"),
                      # FRACTAL_NZ (n1, m1, m0, n0): inner axis n1 x n0 = 250 x 16 = 4000
                      cube_row("nz", 300, shapes="250,512,16,16;256,250,16,16", fmt="FRACTAL_NZ;FRACTAL_NZ")])
    f = only(run(p)[0], "operator.cube-affinity")
    assert set(f.ops) == {"k4000", "nz"}
    assert f.saving_by_op["k4000"] == pytest.approx(300 * CFG["cube"]["affinity_saving_fraction"])


def test_cube_bound_quiet_when_mac_bound() -> None:
    findings = run(make_profile([cube_row("mm", 300, mac=0.9, mte2=0.2, shapes="8192,4096;4096,8192")]))[0]
    none_of(findings, "operator.cube-bound")
    none_of(findings, "operator.cube-affinity")


def test_cube_bound_optimization_space() -> None:
    f = only(run(make_profile([cube_row("mm", 300, mac=0.6, mte2=0.5)]))[0], "operator.cube-bound")
    c = CFG["cube"]
    assert f.estimated_saving_us == pytest.approx(300 * (1 - 0.6 / c["mac_bound_ratio"]) * c["realism"])


# ---------------------------------------------------------------------------------------------------------
# operator.fa-affinity / operator.fa-bound
# ---------------------------------------------------------------------------------------------------------
def _fa(name: str, q: str, mte2: float = 0.5, fixpipe: float = 0.5, vec: float = 0.5) -> OpRow:
    return OpRow(name, "FlashAttentionScore", 500, core="MIX_AIC", input_shapes=f"{q};{q};{q}",
                 input_dtypes="DT_BF16;DT_BF16;DT_BF16",
                 metrics={"aic_mte2_ratio": mte2, "aic_fixpipe_ratio": fixpipe, "aiv_vec_ratio": vec},
                 extra={"block_dim": 8, "op_state": "static"})


def test_fa_affinity_flags_unaligned_seq_and_head_dim() -> None:
    p = make_profile([_fa("fa_s1000", "2,16,1000,128"), _fa("fa_d96", "2,16,4096,96"),
                      _fa("fa_ok", "2,16,4096,128"), _fa("fa_sbh", "4096,1,2048")])
    f = only(run(p)[0], "operator.fa-affinity")
    assert set(f.ops) == {"fa_s1000", "fa_d96"}
    why = {r[0]: r[3] for r in f.evidence["table"]["rows"]}
    assert why == {"fa_s1000": "S=1000", "fa_d96": "D=96"}


def test_fa_bound_only_for_ops_below_every_bound() -> None:
    p = make_profile([_fa("fa_loose", "2,16,4096,128"), _fa("fa_fix", "2,16,2048,128", fixpipe=0.8)])
    f = only(run(p)[0], "operator.fa-bound")
    assert f.ops == ["fa_loose"]
    bound = {r[0]: r[3] for r in f.evidence["table"]["rows"]}
    assert bound == {"fa_loose": "none", "fa_fix": "aic_fixpipe_ratio"}
    none_of(run(make_profile([_fa("fa_fix", "2,16,2048,128", fixpipe=0.8)]))[0], "operator.fa-bound")


# ---------------------------------------------------------------------------------------------------------
# operator.vector-bound
# ---------------------------------------------------------------------------------------------------------
def test_vector_bound_classes() -> None:
    p = make_profile([vec_row("mem", 200, 0.1, 0.85), vec_row("loose", 200, 0.2, 0.3, op_type="Mul"),
                      vec_row("vec", 200, 0.8, 0.1, op_type="Exp")])
    f = only(run(p)[0], "operator.vector-bound")
    assert set(f.ops) == {"mem", "loose"}
    c = CFG["vector"]
    assert f.saving_by_op["mem"] == pytest.approx(200 * c["memory_bound_saving_fraction"])
    assert f.saving_by_op["loose"] == pytest.approx(200 * (1 - 0.6 / c["total_bound_ratio"]) * c["realism"])


def test_vector_bound_quiet_at_the_vector_roof() -> None:
    p = make_profile([vec_row("vec", 200, 0.85, 0.1, op_type="Exp"), cube_row("mm", 5000, mac=0.9)])
    none_of(run(p)[0], "operator.vector-bound")


# ---------------------------------------------------------------------------------------------------------
# real samples
# ---------------------------------------------------------------------------------------------------------
def test_sample_llm_training_rank() -> None:
    path = MSINSIGHT / "st" / "level2" / "rank_0_ascend_pt"
    if not path.is_dir():
        pytest.skip("../shared/samples is not available")
    findings, status = run(ingest.load(path)[0])
    dyn = only(findings, "operator.dynamic-shape")
    assert dyn.evidence["all_dynamic"]
    fa = only(findings, "operator.fa-bound")
    assert fa.ops == ["aclnnFlashAttentionScoreGrad_FlashAttentionScoreGrad_FlashAttentionScoreGrad"]
    cb = only(findings, "operator.cube-bound")
    assert cb.ops == ["aclnnMatmul_MatMulV3Common_MatMulV3"] and len(cb.evidence["table"]["rows"]) == 5
    # the chip is only known as a class here: the core count comes from the block dims (20 / 40)
    bd = only(findings, "operator.block-dim")
    assert (bd.evidence["ai_core_num"], bd.evidence["vector_core_num"]) == (20, 40)


def test_sample_without_op_state() -> None:
    path = MSINSIGHT / "data" / "pytorch" / "text" / "level0" / "rank0_ascend_pt"
    if not path.is_dir():
        pytest.skip("../shared/samples is not available")
    findings, status = run(ingest.load(path)[0])
    none_of(findings, "operator.dynamic-shape")
    assert any("no OP State column" in n for n in status.notes)


# ---------------------------------------------------------------------------------------------------------
# scale
# ---------------------------------------------------------------------------------------------------------
def test_three_hundred_thousand_rows_in_seconds() -> None:
    n = 300_000
    rng = np.random.default_rng(0)
    kinds = np.array(["MatMulV2", "Add", "Mul", "TransData", "FlashAttentionScore"])
    k = rng.integers(0, len(kinds), n)
    dur = rng.uniform(5, 200, n)
    start = 1e6 + np.cumsum(dur + 2.0)
    cores = np.where(np.isin(k, [0, 3]), "AI_CORE", np.where(k == 4, "MIX_AIC", "AI_VECTOR_CORE"))
    shapes = np.array(["4096,4000;4000,4096", "1024,1024;1024,1024", "2,16,4096,128;2,16,4096,128"])
    df = pd.DataFrame({
        "name": pd.Categorical(np.char.add(kinds[k], (np.arange(n) % 10).astype(str))), "type": kinds[k],
        "core": cores, "start_us": start, "duration_us": dur, "block_dim": rng.choice([7.0, 8.0, 16.0], n),
        "op_state": rng.choice(["static", "dynamic"], n), "input_shapes": shapes[np.minimum(k, 2)],
        "output_shapes": "1024,1024", "aic_mac_ratio": rng.uniform(0, 1, n), "aic_mte2_ratio": rng.uniform(0, 1, n),
        "aiv_vec_ratio": rng.uniform(0, 1, n), "aiv_mte2_ratio": rng.uniform(0, 1, n),
        "aiv_mte3_ratio": rng.uniform(0, 0.3, n), "aic_fixpipe_ratio": rng.uniform(0, 1, n)})
    profile = Profile(ops=finalize_ops(df), meta=Meta(layout="scenario", chip="Ascend310P3"))
    profile.extras["counters"] = pd.DataFrame({"process": "Ascend Hardware", "name": "AI Core Freq", "key": "MHz",
                                               "ts_us": start[::1000], "value": rng.choice([1060.0, 900.0], n // 1000)})
    t = time.perf_counter()
    findings, status = run(profile)
    elapsed = time.perf_counter() - t
    assert {f.rule for f in findings} >= {"operator.block-dim", "operator.no-bound", "operator.dynamic-shape",
                                         "operator.ai-core-freq", "operator.cube-affinity", "operator.vector-bound"}
    assert elapsed < 60, f"operator KB took {elapsed:.1f} s on {n} rows"


def test_findings_contract_on_the_peer_fixture(tmp_path: Path) -> None:
    """Every finding names its ops and carries a per-op saving with its basis and a fix."""
    import subprocess
    import sys

    make = SAMPLES.parent / "bench" / "make_min_ascend_pt.py"
    if not make.is_file():
        pytest.skip("../shared/bench/make_min_ascend_pt.py is not available")
    subprocess.run([sys.executable, str(make), str(tmp_path)], check=True, capture_output=True)
    findings, _ = run(ingest.load(next(tmp_path.glob("*_ascend_pt")))[0])
    assert {f.rule for f in findings} == {"operator.block-dim", "operator.no-bound", "operator.ai-core-freq",
                                         "operator.cube-affinity", "operator.cube-bound", "operator.vector-bound"}
    for f in findings:
        assert f.ops and f.basis and f.fix is not None and f.recommendation, f.rule
        assert sum(f.saving_by_op.values()) == pytest.approx(f.estimated_saving_us), f.rule
        assert set(f.saving_by_op) <= set(f.ops), f.rule
