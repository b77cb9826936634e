"""roofline: the shared op classification reported for the heavy ops, as symptoms, with advice fitted to the run."""

from __future__ import annotations

import pytest

from advisor import ingest
from advisor.knowledge_bases.roofline import RooflineKB, heavy_ops
from advisor.model import Profile
from advisor.pipeline import consistency
from advisor.pipeline.analysis import AnalysisOptions, run_analysis
from advisor.platform import resolve_platform
from advisor.testing import load_rules
from advisor.toolkit import bound
from tests.scenarios import cases_b as cases

KB = "roofline"
LLM_LEVEL2 = "Ascend__msinsight/test/st/level2/rank_0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
CNN_LEVEL2 = "Ascend__msinsight/test/data/pytorch/text/level2"
COMPUTE_ADVICE = "Ascend__msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"



def run(profile: Profile, rules, chip: str = cases.CHIP):
    findings, statuses = cases.run_kbs([RooflineKB], profile, None, rules, chip)
    assert statuses[0].status == "ok", statuses[0].reason
    return findings, statuses[0]


def by_rule(findings, rule_id):
    return {f.rule: f for f in findings}[rule_id]


def mixed(context: str = "om-acl", chip: str = cases.CHIP) -> Profile:
    p = cases.roofline_mixed().profile
    p.meta.context = context
    p.meta.chip = chip
    return p


# --- labeled scenarios ------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", cases.SCENARIOS, ids=lambda f: f.__name__)
def test_scenario_corpus_flags_exactly_the_injected_ops(make, rules):
    sc = make()
    findings, _ = run(sc.profile, rules, sc.chip)
    assert cases.flagged(findings, KB) == sc.expected[KB]


def test_every_rule_is_a_symptom_declared_beside_its_check():
    assert [r.id for r in RooflineKB.rules] == ["roofline.memory-bound", "roofline.compute-bound",
                                                "roofline.latency-bound", "roofline.scalar-bound",
                                                "roofline.no-bound"]
    assert {r.role for r in RooflineKB.rules} == {"symptom"}
    assert len(RooflineKB.checks) == 5


def test_findings_name_the_ops_with_the_recoverable_time(rules):
    findings, _ = run(mixed(), rules)
    compute, memory = by_rule(findings, "roofline.compute-bound"), by_rule(findings, "roofline.memory-bound")
    assert compute.ops == ["mm_slow"] and memory.ops == ["add_slow"]
    pts = bound.classify(mixed().ops, resolve_platform(rules, cases.CHIP), rules.for_kb("bound")).set_index("name")
    # the saving is the classification's recoverable time of the op, never more than its time
    assert compute.saving_by_op == {"mm_slow": pytest.approx(pts.loc["mm_slow", "recoverable_us"])}
    assert compute.estimated_saving_us == pytest.approx(pts.loc["mm_slow", "total_us"] * (1 - 0.3 / 0.8))
    # the title names the practical roof the saving is sized on (0.3 of an 0.8 practical roof: 37 %)
    assert compute.title == "MatMulV2: 1 compute-bound op(s) at 30% of the roof, 37% of the practical roof"
    row = dict(zip(compute.evidence["table"]["columns"], compute.evidence["table"]["rows"][0], strict=True))
    assert row["name"] == "mm_slow" and row["% roof"] == 30.0 and row["intensity"] > row["ridge"]
    pts_ev = compute.evidence["roofline_points"]
    assert dict(zip(pts_ev["columns"], pts_ev["rows"][0], strict=True))["bound"] == "compute"
    assert compute.evidence["hbm_gbps"] == 204.0 and "--rules" in compute.evidence["bandwidth_note"]
    assert "hbm_gbps" in compute.basis and compute.confidence == rules.for_kb(KB)["confidence"]["shapes"]
    assert compute.severity == "critical"  # 2 ms of a 4.9 ms window


def test_bandwidth_is_a_user_setting(rules, tmp_path):
    base = by_rule(run(mixed(), rules)[0], "roofline.memory-bound")
    faster = load_rules(override={"platform": {"hbm_gbps": 408.0}})
    moved = by_rule(run(mixed(), faster)[0], "roofline.memory-bound")
    assert moved.evidence["hbm_gbps"] == 408.0 and "20%" in moved.title
    assert moved.estimated_saving_us > base.estimated_saving_us


def test_latency_bound_saving_stops_at_the_minimum_kernel_time(rules):
    [f] = run(cases.roofline_latency().profile, rules)[0]
    assert f.rule == "roofline.latency-bound"
    min_us = rules.for_kb("bound")["min_kernel_us"]
    assert all(v == pytest.approx(40 * (9.0 - min_us)) for v in f.saving_by_op.values())
    assert "batch" in f.recommendation.lower()


def test_heavy_ops_cover_the_configured_share_of_time():
    import pandas as pd

    pts = pd.DataFrame({"name": list("abcde"), "total_us": [50.0, 30.0, 10.0, 6.0, 4.0]})
    r = {"heavy_coverage": 0.8, "max_heavy_ops": 10, "min_op_total_us": 1.0}
    assert list(heavy_ops(pts, r)["name"]) == ["a", "b"]
    assert list(heavy_ops(pts, {**r, "heavy_coverage": 0.85})["name"]) == ["a", "b", "c"]
    assert list(heavy_ops(pts, {**r, "max_heavy_ops": 1})["name"]) == ["a"]


# --- advice fitted to the run ------------------------------------------------------------------------------


def test_same_slow_matmul_two_flows_two_right_advices(rules):
    """An ATC model gets the aoe command line; a torchair graph gets AOE_MODE; neither gets the other's."""
    om = by_rule(run(mixed("om-acl"), rules)[0], "roofline.compute-bound")
    assert "aoe --framework=" in om.recommendation and "--job_type=2" in om.fix.command
    assert "AOE_MODE" not in om.recommendation and "torch" not in om.recommendation
    graph = by_rule(run(mixed("torch-graph"), rules)[0], "roofline.compute-bound")
    assert "AOE_MODE=2" in graph.recommendation and graph.fix.kind == "env"
    assert "aoe --framework" not in graph.recommendation


def test_no_aoe_where_the_flow_has_none(rules):
    # a kernel under development tunes its own tiling; dynamic-shape torch eager ops are not tunable by AOE;
    # the SS928 toolchain has no AOE at all
    dev = by_rule(run(mixed("kernel-dev"), rules)[0], "roofline.compute-bound")
    eager = mixed("torch-eager")
    eager.ops["op_state"] = pd_categorical(["dynamic"] * len(eager.ops))
    eager_f = by_rule(run(eager, rules)[0], "roofline.compute-bound")
    soc = mixed("om-acl", "SS928V100")
    soc_findings = run(soc, rules, "SS928V100")[0]
    for f in (dev, eager_f, *soc_findings):
        assert "aoe" not in f.recommendation.lower() and (f.fix is None or "aoe" not in str(f.fix.to_dict()))


def test_dtype_advice_only_for_fp32_and_only_dtypes_the_chip_has(rules):
    from tests.scenarios.builder import OpRow, make_profile

    def add(chip: str, dtype: str) -> Profile:
        shape = "1,64,112,112"
        p = make_profile([OpRow("add", "Add", 200.0, core="AI_VECTOR_CORE", input_shapes=f"{shape};{shape}",
                                input_dtypes=f"{dtype};{dtype}", output_shapes=shape, output_dtypes=dtype)],
                         chip=chip)
        p.meta.context = "om-acl"
        return p

    on_310p = by_rule(run(add("Ascend310P3", "FLOAT"), rules)[0], "roofline.memory-bound")
    assert "fp16 halves" in on_310p.recommendation and "bf16" not in on_310p.recommendation
    on_910b = by_rule(run(add("Ascend910B2", "FLOAT"), rules, "Ascend910B2")[0], "roofline.memory-bound")
    assert "fp16 or bf16" in on_910b.recommendation
    already = by_rule(run(add("Ascend310P3", "FLOAT16"), rules)[0], "roofline.memory-bound")
    assert "fp16" not in already.recommendation and "UB fusion" in already.recommendation


def pd_categorical(values):
    import pandas as pd

    return pd.Series(values, dtype="category")


# --- real profiles ----------------------------------------------------------------------------------------


def test_llm_matmuls_at_their_roof_get_no_finding(rules):
    """Level2 LLM profile: the MatMulV3 calls once reported 'memory-bound at 52 % of the roof' are compute bound
    near their roof; FlashAttention is judged by its pipes."""
    prof = ingest.load(cases.sample(LLM_LEVEL2))[0]
    findings, status = run(prof, rules, "Ascend910B2")
    named = {op for f in findings for op in f.ops}
    assert "aclnnMatmul_MatMulV3Common_MatMulV3" not in named
    for f in findings:
        assert 0 < f.estimated_saving_us <= f.evidence["total_us"]
        assert set(f.saving_by_op) == set(f.ops) and f.rule in {r.id for r in RooflineKB.rules}


def test_well_tuned_llm_matmuls_have_nothing_to_recover(rules):
    prof = ingest.load(cases.sample(COMPUTE_ADVICE))[0]
    findings, _ = run(prof, rules, "Ascend910B2")
    assert not [f for f in findings if "MatMul" in f.title]


def test_reports_on_real_profiles_keep_the_invariants():
    """No share above 100 % in a title (the CNN profile once showed 'no clear bound at 105% of the roof'), no op
    at its roof told to tune, savings within the window."""
    result = run_analysis(cases.sample(CNN_LEVEL2), options=AnalysisOptions(only=["roofline"]))
    assert consistency.problems(result.report) == []
    for f in result.report["findings"]:
        assert "101%" not in f["title"] and "105%" not in f["title"]


def test_html_chart_plots_roofline_symptoms_folded_under_their_cause(rules):
    """A roofline symptom absorbed by a cause keeps its points on the report's roofline chart."""
    from advisor.report.common import roofline_points

    [f] = [f for f in run(mixed(), rules)[0] if f.rule == "roofline.compute-bound"]
    symptom = {"rule": f.rule, "kb": f.kb, "title": f.title, "ops": f.ops, "evidence": f.to_dict()["evidence"]}
    cause = {"rule": "x.cause", "kb": "x", "title": "a cause", "ops": f.ops, "evidence": {}, "symptoms": [symptom]}
    points = roofline_points([cause])
    assert [(p.label, p.bound) for p in points] == [("mm_slow", "compute")]
