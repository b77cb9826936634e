"""The operator knowledge base: its causes (block dim, dynamic shape, clock, shape affinity), one positive and one
negative case per rule, savings bounded by the shared classification, advice fitted to the run, real samples."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from advisor import ingest
from advisor.config.loader import builtin_rules_dir, load_effective_rules
from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.ingest.normalize import finalize_ops
from advisor.knowledge_bases.operator import OperatorKB, mean_clock, misaligned_axes
from advisor.model import Meta, Profile
from advisor.pipeline import consistency, hierarchy
from advisor.pipeline.analysis import AnalysisOptions, run_analysis
from advisor.platform import resolve_platform
from advisor.toolkit import bound
from advisor.toolkit.cores import core_counts
from tests.scenarios.builder import OpRow, make_profile

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
MSINSIGHT = SAMPLES / "Ascend__msinsight" / "test"
COMPUTE_ADVICE = SAMPLES / "Ascend__msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv"
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


def recoverable(profile: Profile) -> dict[str, float]:
    platform, r = resolve_platform(RULES, profile.meta.chip), RULES.for_kb("bound")
    b = bound.classify(profile.ops, platform, r, core_counts(profile, platform, r["cube_cores"], r["vector_cores"]))
    return dict(zip(b["name"], b["recoverable_us"], strict=True))


def cube_row(name: str, dur: float, blocks: float = 8, mac: float = 0.5, mte2: float = 0.3,
             shapes: str = "1024,4096;4096,1024", op_type: str = "MatMulV2", fmt: str = "ND;ND",
             dtypes: str = "FLOAT16;FLOAT16", **extra: Any) -> OpRow:
    return OpRow(name, op_type, dur, core=extra.pop("core", "AI_CORE"), input_shapes=shapes, input_formats=fmt,
                 input_dtypes=dtypes, output_shapes="1024,1024", output_dtypes="FLOAT16",
                 metrics={"mac_ratio": mac, "mte2_ratio": mte2, "scalar_ratio": 0.1, "mte1_ratio": 0.2,
                          "aic_mac_ratio": mac, "aic_mte2_ratio": mte2},
                 extra={"block_dim": blocks, "op_state": "static", **extra})


# ---------------------------------------------------------------------------------------------------------
# the knowledge base's shape
# ---------------------------------------------------------------------------------------------------------
def test_rules_are_causes_declared_beside_their_checks() -> None:
    assert [r.id for r in OperatorKB.rules] == ["operator.block-dim", "operator.dynamic-shape",
                                                "operator.ai-core-freq", "operator.cube-affinity",
                                                "operator.fa-affinity"]
    assert {r.role for r in OperatorKB.rules} == {"cause"}
    # no second classification of the ops: the bound classes are the shared toolkit's (roofline reports them)
    assert not {"operator.no-bound", "operator.cube-bound", "operator.vector-bound", "operator.fa-bound"} & \
        {r.id for r in OperatorKB.rules}


def test_rule_prose_cites_thresholds_that_an_override_changes(tmp_path: Path) -> None:
    doc = OperatorKB.rule("operator.cube-affinity")
    shown = doc.render(RULES.for_kb("operator"))
    assert "16 elements" in shown.what and "32 bytes" in shown.what and "{" not in shown.what
    over = tmp_path / "r.yaml"
    over.write_text("rules:\n  operator:\n    cube:\n      align_bytes: 64\n")
    eff = load_effective_rules([builtin_rules_dir()], override_file=over)
    assert "64 bytes" in doc.render(eff.for_kb("operator")).what


# ---------------------------------------------------------------------------------------------------------
# operator.block-dim
# ---------------------------------------------------------------------------------------------------------
def test_block_dim_flags_partial_last_wave() -> None:
    # Ascend310P3: 8 AI cores, 7 vector cores (rules/platforms.yaml)
    p = make_profile([cube_row("mm_6", 1000, blocks=6), cube_row("mm_8", 1000, blocks=8),
                      cube_row("mm_16", 1000, blocks=16), cube_row("mm_12", 1000, blocks=12),
                      OpRow("add_5", "Add", 500, core="AI_VECTOR_CORE", input_shapes="1024,1024;1024,1024",
                            output_shapes="1024,1024", input_dtypes="FLOAT16;FLOAT16", output_dtypes="FLOAT16",
                            metrics={"vec_ratio": 0.3, "mte2_ratio": 0.3}, extra={"block_dim": 5})])
    f = only(run(p)[0], "operator.block-dim")
    assert set(f.ops) == {"mm_6", "mm_12", "add_5"}
    realism = CFG["block_dim"]["realism"]
    # 6 of 8 cores; 12 blocks = 2 waves of 8 -> 12/16 used; 5 of 7 vector cores
    assert f.saving_by_op["mm_6"] == pytest.approx(1000 * (2 / 8) * realism)
    assert f.saving_by_op["mm_12"] == pytest.approx(1000 * (4 / 16) * realism)
    assert f.saving_by_op["add_5"] == pytest.approx(500 * (2 / 7) * realism)
    assert f.evidence["core_count_source"].startswith("rules/platforms.yaml Ascend310P3")
    assert f.confidence == CFG["block_dim"]["confidence"]["platform"]


def test_block_dim_of_one_op_on_two_ranks_is_one_finding() -> None:
    """One finding per op per rule: a ConcatD whose blocks leave vector cores idle (the st/level2 sample's: 38 blocks
    on 40 cores) on rank 0, and again on rank 1 beside a MatMul there, is one cause over the two ranks -- not one
    finding per rank because one says '1 op leaves' and the other '2 ops leave'."""
    concat = OpRow("aclnnCat_ConcatD_ConcatD", "ConcatD", 70, core="AI_VECTOR_CORE", input_shapes="4096,1,8,256",
                   output_shapes="4096,1,8,512", input_dtypes="FLOAT16", output_dtypes="FLOAT16",
                   metrics={"vec_ratio": 0.3, "mte2_ratio": 0.3}, extra={"block_dim": 5})
    found = []
    for rank, rows in ((0, [concat]), (1, [concat, cube_row("mm_6", 1000, blocks=6)])):
        (f,) = [f for f in run(make_profile(rows))[0] if f.rule == "operator.block-dim"]
        found.append(replace(f, rank=rank))
    assert [len(f.ops) for f in found] == [1, 2]
    (merged,) = hierarchy.merge_ranks(found)
    assert merged.ranks == [0, 1] and set(merged.ops) == {"aclnnCat_ConcatD_ConcatD", "mm_6"}
    assert merged.estimated_saving_us == pytest.approx(sum(f.estimated_saving_us for f in found))


def test_block_dim_quiet_for_full_waves_short_or_small_ops() -> None:
    p = make_profile([cube_row("mm_8", 1000, blocks=8), cube_row("mm_24", 1000, blocks=24),
                      cube_row("short", CFG["block_dim"]["min_duration_us"] / 2, blocks=3),
                      OpRow("tiny", "Add", 100, core="AI_VECTOR_CORE", output_shapes="64", extra={"block_dim": 1})])
    none_of(run(p)[0], "operator.block-dim")


def test_block_dim_saving_never_exceeds_the_time_below_the_chips_roof() -> None:
    """Idle cores cost a compute-bound kernel their share of its time (7 of 8 cores at mac 0.95: 1/8), but an
    elementwise op that already moves data at the chip's bandwidth gains next to nothing from more cores."""
    add = OpRow("add", "Add", 32.0, core="AI_VECTOR_CORE", input_shapes="1024,1024;1024,1024",
                output_shapes="1024,1024", input_dtypes="FLOAT16;FLOAT16", output_dtypes="FLOAT16",
                metrics={"vec_ratio": 0.2, "mte2_ratio": 0.9}, extra={"block_dim": 3})
    p = make_profile([cube_row("busy", 1000, blocks=7, mac=0.95), add])
    f = only(run(p)[0], "operator.block-dim")
    realism = CFG["block_dim"]["realism"]
    assert f.saving_by_op["busy"] == pytest.approx(1000 * (1 / 8) * realism)
    # 6.3 MB at 204 GB/s is 30.8 us of its 32 us: at most the 4 % the bandwidth roof leaves, not 4/7 of it
    assert f.saving_by_op["add"] <= 32.0 * (1 - 30.8 / 32.0) + 1e-6


def test_block_dim_mix_op_uses_its_vector_part() -> None:
    # MIX_AIC with 6 cube blocks but a full vector part (14 blocks on 7 vector cores): not idle
    p = make_profile([cube_row("mix", 1000, blocks=6, core="MIX_AIC", mix_block_dim=14)])
    assert p.ops["core"].iloc[0] == "MIX_AIC"
    none_of(run(p)[0], "operator.block-dim")
    p = make_profile([cube_row("mix", 1000, blocks=6, core="MIX_AIC", mix_block_dim=0)])
    assert only(run(p)[0], "operator.block-dim").ops == ["mix"]


def test_block_dim_infers_cores_when_chip_unknown() -> None:
    rows = [cube_row(f"big{i}", 5000, blocks=20, mac=0.9) for i in range(5)] + [cube_row("odd", 2000, blocks=13)]
    p = make_profile(rows, chip="Ascend910B-class")
    f = only(run(p)[0], "operator.block-dim")
    assert f.ops == ["odd"]
    assert f.evidence["ai_core_num"] == 20 and "inferred" in f.evidence["core_count_source"]
    assert f.confidence == CFG["block_dim"]["confidence"]["inferred"]


def test_block_dim_advice_fits_the_flow() -> None:
    rows = [cube_row("mm_6", 1000, blocks=6)]
    om = make_profile(rows, context="om-acl")
    dev = make_profile(rows, context="kernel-dev")
    f_om = only(run(om)[0], "operator.block-dim")
    assert "aoe --framework=" in f_om.recommendation and f_om.fix.command.startswith("aoe ")
    # a kernel-development run's launch is the kernel knowledge base's (kernel.block-dim), said once
    found, status = run(dev)
    assert not [f for f in found if f.rule == "operator.block-dim"]
    assert any("kernel.block-dim" in n for n in status.notes)


# ---------------------------------------------------------------------------------------------------------
# operator.dynamic-shape
# ---------------------------------------------------------------------------------------------------------
def test_dynamic_shape_reports_varying_shapes() -> None:
    rows = [cube_row("mm", 100, shapes=f"{n},4096;4096,1024", op_state="dynamic") for n in (128, 256, 512)]
    rows += [cube_row("st", 100)]
    f = only(run(make_profile(rows, context="om-acl"))[0], "operator.dynamic-shape")
    assert f.ops == ["mm"] and f.evidence["dynamic_tasks"] == 3 and not f.evidence["all_dynamic"]
    assert f.evidence["ops_with_varying_shapes"] == 1
    assert f.estimated_saving_us == pytest.approx(300 * CFG["dynamic"]["saving_fraction"])
    assert f.title == "1 of 2 ops run dynamic-shape kernels (75.0% of their device time)"
    assert f.confidence == CFG["dynamic"]["confidence"]


def test_dynamic_shape_same_problem_two_flows_two_advices() -> None:
    # two steps, the matmul's input grows from one to the next: shapes vary between steps
    rows = [cube_row("mm", 100, shapes=f"{n},4096;4096,1024", op_state="dynamic", step=s)
            for s, n in ((1, 128), (2, 256))]
    om = only(run(make_profile(rows, context="om-acl"))[0], "operator.dynamic-shape")
    torch = only(run(make_profile(rows, context="torch-eager"))[0], "operator.dynamic-shape")
    ms = only(run(make_profile(rows, context="mindspore-graph"))[0], "operator.dynamic-shape")
    assert om.fix.kind == "atc-option" and "--input_shape" in om.recommendation
    assert "torch" not in om.recommendation and "allow_internal_format" not in str(om.fix.to_dict())
    assert "jit_compile=False" in torch.recommendation and "allow_internal_format = False" in torch.fix.data["snippet"]
    assert "atc" not in torch.recommendation and torch.evidence["ops_with_varying_shapes"] == 1
    assert "padded_batch" in ms.fix.data["snippet"] and "torch" not in ms.recommendation


def test_torch_eager_binary_kernels_are_not_a_cause() -> None:
    """torch_npu eager runs binary (dynamic-shape) kernels by design; one step of it names ops by their API, so
    several shapes under one name are several layers, not shapes that vary."""
    rows = [cube_row("mm", 100, shapes=f"{n},4096;4096,1024", op_state="dynamic") for n in (128, 256)]
    findings, status = run(make_profile(rows, context="torch-eager"))
    none_of(findings, "operator.dynamic-shape")
    assert any("binary kernels (jit_compile=False)" in n for n in status.notes)


def test_dynamic_shape_quiet_when_static_unknown_or_kernel_dev() -> None:
    none_of(run(make_profile([cube_row("a", 100), cube_row("b", 100)]))[0], "operator.dynamic-shape")
    p = make_profile([cube_row("a", 100), cube_row("b", 100)])
    p.ops["op_state"] = pd.Series(pd.NA, index=p.ops.index, dtype="string").astype("category")
    findings, status = run(p)
    none_of(findings, "operator.dynamic-shape")
    assert any("no OP State column" in n for n in status.notes)
    dev = make_profile([cube_row("a", 100, op_state="dynamic")], context="kernel-dev")
    findings, status = run(dev)
    none_of(findings, "operator.dynamic-shape")
    assert any("kernel-development" in n for n in status.notes)


def test_dynamic_share_never_exceeds_the_ops_time() -> None:
    """The msprof-analyze fixture once gave 'All of 29 ops run dynamic-shape kernels (124.3% of device time)'."""
    if not COMPUTE_ADVICE.is_file():
        pytest.skip("../shared/samples is not available")
    profile = ingest.load(COMPUTE_ADVICE)[0]
    profile.meta.context = "om-acl"  # the bare kernel_details.csv says nothing of its flow; judge it as a model
    f = only(run(profile, "Ascend910B2")[0], "operator.dynamic-shape")
    assert f.evidence["share_of_op_time"] <= 1.0 and "100.0%" in f.title


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
    got = mean_clock(ts, mhz, np.array([50.0, 100.0, 150.0, -50.0, -20.0]),
                     np.array([150.0, 200.0, 250.0, -10.0, 10.0]))
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
    assert f.evidence["nominal_mhz"] == 1800 and f.confidence == CFG["frequency"]["confidence"]


def test_ai_core_freq_quiet_at_nominal_clock() -> None:
    t0 = 1_000_000.0
    p = make_profile([cube_row("a", 100, start_us=t0)], chip="Ascend910B2")
    none_of(run(_with_clock(p, [(t0 - 10, 1800.0), (t0 + 50, 1790.0)]))[0], "operator.ai-core-freq")
    none_of(run(make_profile([cube_row("a", 100)]))[0], "operator.ai-core-freq")


# ---------------------------------------------------------------------------------------------------------
# operator.cube-affinity
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(("shapes", "formats", "dtypes", "expected"), [
    ("8192,4001;4001,8192", "ND;ND", "FLOAT16;FLOAT16", [(4001, 4016)]),
    # 4000 is 250 fractals of 16: aligned, however the peer's "multiple of 256" sees it
    ("8192,4000;4000,8192", "ND;ND", "FLOAT16;FLOAT16", []),
    # K = 16 of a GroupedMatmul is one fractal: padding it to 256 would be 16x the work
    ("4096,16;16,7168", "ND;ND", "BF16;BF16", []),
    # 9216 = 36 x 256 fp32: aligned
    ("32,9216;4096,9216", "ND;ND", "FLOAT;FLOAT", []),
    # fp32 12 elements = 48 bytes: pad to 16; int8 48 = three fractals: aligned
    ("64,12;12,64", "ND;ND", "FLOAT;FLOAT", [(12, 16)]),
    ("64,48;48,64", "ND;ND", "INT8;INT8", []),
    ("64,40;40,64", "ND;ND", "INT8;INT8", [(40, 64)]),
    # FRACTAL_NZ is aligned by construction
    ("250,512,16,16;256,250,16,16", "FRACTAL_NZ;FRACTAL_NZ", "FLOAT16;FLOAT16", []),
])
def test_alignment_rule_never_pads_an_aligned_axis(shapes, formats, dtypes, expected) -> None:
    c = CFG["cube"]
    got = misaligned_axes(shapes, formats, dtypes, c["fractal_elements"], c["align_bytes"])
    assert got == expected
    assert all(to > frm and frm % c["fractal_elements"] for frm, to in got)


def test_cube_affinity_flags_a_misaligned_inner_axis_only() -> None:
    p = make_profile([cube_row("k4001", 3000, shapes="8192,4001;4001,8192"),
                      cube_row("k4000", 3000, shapes="8192,4000;4000,8192")], context="om-acl")
    f = only(run(p)[0], "operator.cube-affinity")
    assert f.ops == ["k4001"]
    assert f.saving_by_op["k4001"] == pytest.approx(3000 * CFG["cube"]["affinity_saving_fraction"])
    assert "pad the inner axis 4001 to 4016" in f.recommendation
    report = {"findings": [f.to_dict()], "score_detail": {"window_us": 1e9}}
    assert consistency.problems(report) == []


def test_cube_affinity_quiet_for_ops_at_their_roof() -> None:
    p = make_profile([cube_row("k4001", 3000, shapes="8192,4001;4001,8192", mac=0.9)])
    none_of(run(p)[0], "operator.cube-affinity")


# ---------------------------------------------------------------------------------------------------------
# operator.fa-affinity
# ---------------------------------------------------------------------------------------------------------
def _fa(name: str, q: str, mte2: float = 0.4, fixpipe: float = 0.3, vec: float = 0.3) -> OpRow:
    return OpRow(name, "FlashAttentionScore", 500, core="MIX_AIC", input_shapes=f"{q};{q};{q}",
                 input_dtypes="DT_BF16;DT_BF16;DT_BF16",
                 metrics={"aic_mte2_ratio": mte2, "aic_fixpipe_ratio": fixpipe, "aiv_vec_ratio": vec},
                 extra={"block_dim": 8, "op_state": "static"})


def test_fa_affinity_flags_sequence_off_the_tile_and_head_dim_off_the_fractal() -> None:
    p = make_profile([_fa("fa_s1000", "2,16,1000,128"), _fa("fa_d100", "2,16,4096,100"),
                      _fa("fa_d96", "2,16,4096,96"), _fa("fa_ok", "2,16,4096,128"), _fa("fa_sbh", "4096,1,2048")])
    f = only(run(p)[0], "operator.fa-affinity")
    assert set(f.ops) == {"fa_s1000", "fa_d100"}  # D = 96 is six fractals: fine
    why = {r[0]: r[3] for r in f.evidence["table"]["rows"]}
    assert why == {"fa_s1000": "S=1000 -> 1024", "fa_d100": "D=100"}


def test_fa_affinity_quiet_at_the_kernels_roof() -> None:
    p = make_profile([_fa("fa_s1000", "2,16,1000,128", fixpipe=0.74)])
    none_of(run(p)[0], "operator.fa-affinity")


# ---------------------------------------------------------------------------------------------------------
# real samples
# ---------------------------------------------------------------------------------------------------------
def test_sample_llm_training_rank() -> None:
    path = MSINSIGHT / "st" / "level2" / "rank_0_ascend_pt"
    if not path.is_dir():
        pytest.skip("../shared/samples is not available")
    findings, status = run(ingest.load(path)[0])
    none_of(findings, "operator.dynamic-shape")  # torch_npu eager binary kernels, one step
    assert any("binary kernels" in n for n in status.notes)
    # FlashAttention and the matmuls are at their roof: no affinity claims on them
    none_of(findings, "operator.fa-affinity")
    none_of(findings, "operator.cube-affinity")


def test_sample_without_op_state() -> None:
    path = MSINSIGHT / "data" / "pytorch" / "text" / "level0" / "rank0_ascend_pt"
    if not path.is_dir():
        pytest.skip("../shared/samples is not available")
    findings, status = run(ingest.load(path)[0])
    none_of(findings, "operator.dynamic-shape")
    assert any("no OP State column" in n for n in status.notes)


@pytest.mark.parametrize("rel", ["Ascend__msinsight/test/st/level2", "Ascend__msinsight/test/data/pytorch/text/level2",
                                 "Ascend__msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv"])
def test_reports_on_real_profiles_keep_the_invariants(rel: str) -> None:
    path = SAMPLES / rel
    if not path.exists():
        pytest.skip("../shared/samples is not available")
    result = run_analysis(path, options=AnalysisOptions(only=["operator", "roofline"]))
    assert consistency.problems(result.report) == []


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
    shapes = np.array(["4096,4001;4001,4096", "1024,1024;1024,1024", "2,16,4000,128;2,16,4000,128"])
    df = pd.DataFrame({
        "name": pd.Categorical(np.char.add(kinds[k], (np.arange(n) % 10).astype(str))), "type": kinds[k],
        "core": cores, "start_us": start, "duration_us": dur, "block_dim": rng.choice([7.0, 8.0, 16.0], n),
        "op_state": rng.choice(["static", "dynamic"], n), "input_shapes": shapes[np.minimum(k, 2)],
        "input_dtypes": "FLOAT16;FLOAT16", "input_formats": "ND;ND", "output_shapes": "1024,1024",
        "output_dtypes": "FLOAT16", "aic_mac_ratio": rng.uniform(0, 0.5, n), "aic_mte2_ratio": rng.uniform(0, 0.5, n),
        "aiv_vec_ratio": rng.uniform(0, 0.5, n), "aiv_mte2_ratio": rng.uniform(0, 0.5, n),
        "aiv_mte3_ratio": rng.uniform(0, 0.3, n), "aic_fixpipe_ratio": rng.uniform(0, 0.5, n)})
    profile = Profile(ops=finalize_ops(df), meta=Meta(layout="scenario", chip="Ascend310P3"))
    profile.extras["counters"] = pd.DataFrame({"process": "Ascend Hardware", "name": "AI Core Freq", "key": "MHz",
                                               "ts_us": start[::1000], "value": rng.choice([1060.0, 900.0], n // 1000)})
    t = time.perf_counter()
    findings, status = run(profile)
    elapsed = time.perf_counter() - t
    assert {f.rule for f in findings} >= {"operator.block-dim", "operator.dynamic-shape", "operator.ai-core-freq",
                                         "operator.cube-affinity", "operator.fa-affinity"}
    assert elapsed < 60, f"operator KB took {elapsed:.1f} s on {n} rows"


def test_findings_contract_on_the_peer_fixture(minimal: Path) -> None:
    """Every finding names its ops and carries a per-op saving with its basis and a fix."""
    findings, _ = run(ingest.load(minimal)[0])
    assert {f.rule for f in findings} >= {"operator.block-dim", "operator.ai-core-freq"}
    for f in findings:
        assert f.ops and f.basis and f.fix is not None and f.recommendation, f.rule
        assert sum(f.saving_by_op.values()) == pytest.approx(f.estimated_saving_us), f.rule
        assert set(f.saving_by_op) <= set(f.ops), f.rule
