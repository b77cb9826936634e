"""Execution-context detection (advisor/ingest/context.py) on every profile of ../shared/samples, with the reason
each one is what it is, plus the model-graph refinement and the report field."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from advisor.graph.load import load_graph
from advisor.ingest import context, load
from advisor.model import Meta

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
DATA = Path(__file__).parent / "data"
EXAMPLE = Path(__file__).resolve().parents[1] / "advisor" / "examples" / "ssd_mish_310p"
needs_samples = pytest.mark.skipif(not (SAMPLES / "MANIFEST.tsv").is_file(), reason="../shared/samples not present")

MSI = "Ascend__msinsight"
MSA = "Ascend__msprof-analyze"
HUB = "hicann__cann-learning-hub"
NEO = "neo-pan__ascend-msprof-skill/tests/fixtures"
MINDINSIGHT = "mindspore-ai__mindinsight/tests/utils/resource"
SK = f"{HUB}/tutorials/ascendc_operator_development_V2/06_advanced_features/src/06.04_super_kernel/performance_case"
CUMMIN = "Lulili520__ascendc-optim-agent/log/Cummin"
KKT = "Ryan12210801__chunk-scaled-dot-kkt-ascendc/results/device_profiles/perf_official_like_k128_20260723_173539"
CONTEST = "hansheng1001__AscendCContest"
GELU = f"{CONTEST}/03FastGeluGrad/FrameworkLaunch/FastGeluGradTest/output"
MSE = f"{CONTEST}/06MseLossGrad/FrameworkLaunch/MseLossGradTest/output"
FOUNDRY = ("wio1997__Inference-Foundry/evidence/20260925_loop045_boundary/run165/profiler/rank0/"
           "rank0_752_20260925054655567_ascend_pt")

# (profile under ../shared/samples, expected context, why that is right)
EXPECTED = [
    (f"{MSI}/server/src/test/test_data/full_db/msprof_0.db", "torch-eager",
     "msprof db of a PyTorch step: aclnn*GetWorkspaceSize / aclnnInplaceAdd host calls"),
    (f"{MSI}/server/src/test/test_data/heatMap/trace_view.json", "torch-eager",
     "CANN events of aclnnGroupedMatmulV4 launches (single-op API)"),
    (f"{MSI}/server/src/test/test_data/test_kernel_parse/op_summary_1.csv", "unknown",
     "a torch_npu-exported op_summary alone: HCCL and step ids say framework run, nothing says which"),
    (f"{MSI}/server/src/test/test_data/test_rank_0/ASCEND_PROFILER_OUTPUT/kernel_details.csv", "unknown",
     "a lone kernel_details.csv without aclnn names: torch_npu or MindSpore, mode unknown"),
    (f"{MSI}/server/src/test/test_data/test_rank_1/ASCEND_PROFILER_OUTPUT/kernel_details.csv", "unknown",
     "same run, rank 1"),
    (f"{MSI}/test/data/pytorch/db/level1/rank0_ascend_pt", "torch-eager", "torch_npu db export, no graph markers"),
    (f"{MSI}/test/data/pytorch/text/level0/rank0_ascend_pt", "torch-eager", "torch_npu text export, eager CNN"),
    (f"{MSI}/test/data/pytorch/text/level0/rank1_ascend_pt", "torch-eager", "torch_npu text export, eager CNN"),
    (f"{MSI}/test/data/pytorch/text/level1/rank0_ascend_pt", "torch-eager", "aclnn APIs in api_statistic"),
    (f"{MSI}/test/data/pytorch/text/level1/rank1_ascend_pt", "torch-eager", "torch_npu text export"),
    (f"{MSI}/test/data/pytorch/text/level2/rank0_ascend_pt", "torch-eager", "torch_npu text export"),
    (f"{MSI}/test/data/pytorch/text/level2/rank1_ascend_pt", "torch-eager", "torch_npu text export"),
    (f"{MSI}/test/st/level2/rank_0_ascend_pt", "torch-eager", "torch_npu 2.7.1 Megatron run, eager"),
    (f"{MSI}/test/st/level2/rank_1_ascend_pt", "torch-eager", "torch_npu 2.7.1 Megatron run, eager"),
    (f"{MSI}/test/st/level2/rank_2_ascend_pt", "torch-eager", "torch_npu 2.7.1 Megatron run, eager"),
    (f"{MSI}/test/st/level2/rank_3_ascend_pt", "torch-eager", "torch_npu 2.7.1 Megatron run, eager"),
    (f"{MSA}/test/resource/test.csv", "unknown", "8 GE-named ops (trans_Cast_19...) with no other signal"),
    (f"{MSA}/test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv", "unknown",
     "a lone kernel_details.csv without aclnn names"),
    (f"{MSA}/test/ut/advisor/compute_advice/data/kernel_details.csv", "torch-eager",
     "kernel_details.csv of aclnnMatmul / aclnnFlashAttentionScore kernels"),
    (f"{MSA}/test/ut/advisor/timeline_advice/trace_view.json", "torch-eager", "Python events, aclnn launches"),
    ("Ascend__workload_analysis/op_modeling/data/ops/Add/Add_Ascend310_test.csv", "kernel-dev",
     "600 measurements of Add over many shapes (single-operator modeling data)"),
    ("Ascend__workload_analysis/op_modeling/data/ops/MaxPool/MaxPool_Ascend310_test.csv", "kernel-dev",
     "single-operator modeling data"),
    ("Ascend__workload_analysis/op_modeling/data/ops/TopKD/TopKD_Ascend310_test.csv", "kernel-dev",
     "single-operator modeling data"),
    (f"{HUB}/skills/examples/as_strided/docs/perf/profiler_output/trace.json", "torch-eager",
     "torch_npu profiler trace (Python events)"),
    (f"{HUB}/skills/examples/as_strided/docs/perf/round_001", "torch-eager",
     "api_statistic of aclnnInplaceCopy launches (torch.as_strided + contiguous)"),
    (f"{SK}/profiling-sk/PROF_000001_20260831222700438_02482130MJQJQRAN", "kernel-dev",
     "Ascend C super-kernel tutorial: 21 tasks, no framework, no model id"),
    (f"{SK}/profiling-static/PROF_000001_20260831222150690_02478372PGRDPKHI", "kernel-dev",
     "same tutorial, static variant"),
    (f"{HUB}/tutorials/tilelang_operator_development/06_tuning/data/msprof_sample/op_summary_current.csv",
     "kernel-dev", "one TileLang GEMM kernel"),
    (f"{MINDINSIGHT}/cluster_propose", "mindspore-graph", "MindSpore 1.x profiler files, graph mode"),
    (f"{MINDINSIGHT}/profiler/PROF_000001_20230818142704322_COJGGGCANRMICFBC", "mindspore-graph",
     "msprof PROF of MindSpore AlexNet: Default/...-opN scoped op names, GE@Infer"),
    (f"{MINDINSIGHT}/profiler/PROF_000001_20230818142704567_GQFAMHBKGODKJMLA", "mindspore-graph",
     "same job, device 1"),
    (f"{MINDINSIGHT}/run_1/normal_run/profiler", "mindspore-graph", "MindSpore 1.x, scoped op names"),
    (f"{MINDINSIGHT}/run_2/normal_run/profiler", "mindspore-graph", "MindSpore 1.x, dataset sink (GetNext)"),
    (f"{NEO}/real_cann_minimal/reports/PROF_001", "kernel-dev",
     "one sanitized custom MIX_AIC kernel, DevMalloc/DeviceSynchronize only"),
    (f"{NEO}/tilelang_design_feedback/candidate_comparability/missing_raw_index_candidate/reports/app/"
     "PROF_000001_20260605161708478_FRJKORBPFMHQMGLA", "kernel-dev",
     "TileLang main_kernel launched with KernelLaunch/DevBinaryRegister, no op API"),
    (f"{CUMMIN}/round_000/msprof_output/OPPROF_20260522141558_SZQVDGFRHWOMIFFS", "kernel-dev",
     "msprof op capture of one AscendC kernel (Cummin, baseline round of an optimization loop)"),
    (f"{CUMMIN}/round_002/msprof_output/OPPROF_20260522155410_KNNIUXUQKCPVXVCH", "kernel-dev",
     "msprof op, same kernel, tuning round 2"),
    (f"{CUMMIN}/round_004/msprof_output/OPPROF_20260522162413_VGXOUDUYNXPRDCPN", "kernel-dev",
     "msprof op, same kernel, tuning round 4"),
    (f"{KKT}/OPPROF_20260723173540_TGVEYIXEDZNYMEZV", "kernel-dev",
     "msprof op capture of one MIX AscendC kernel (ChunkScaledDotKkt)"),
    (f"{GELU}/PROF_000001_20240418221724365_MDRNMHLIQDFFBHKB", "kernel-dev",
     "contest test program execute_op (info.json pid_name) launching one custom FastGeluGrad task through its "
     "own aclnnFastGeluGrad API: no Python framework, no model id, no step"),
    (f"{GELU}/PROF_000001_20240418222714274_QCBFEEAPNECJJJJA", "kernel-dev", "same test, optimized kernel"),
    (f"{MSE}/PROF_000001_20240419182808128_KJPIFHBDARDPDJAB", "kernel-dev",
     "execute_op launching one custom MseLossGrad task through aclnnMseLossGrad"),
    (f"{MSE}/PROF_000001_20240421232712043_GCJHMABMLMCQENJC", "kernel-dev", "same test, optimized kernel"),
    (FOUNDRY, "torch-eager",
     "torch_npu 2.10 export (profiler_info) holding only step_trace_time: no trace or API records where graph "
     "markers could show, so torch_npu's default eager mode is assumed, and said to be assumed"),
]


@needs_samples
@pytest.mark.parametrize(("rel", "expected", "why"), EXPECTED, ids=[e[0].rsplit("/", 2)[-2] + "/" +
                                                                    e[0].rsplit("/", 1)[-1] for e in EXPECTED])
def test_context_of_every_shared_profile(rel: str, expected: str, why: str) -> None:
    profiles = load(SAMPLES / rel)
    for p in profiles:
        assert p.meta.context == expected, f"{rel}: {p.meta.context} ({p.meta.context_evidence}); expected: {why}"
        assert p.meta.context_evidence


@needs_samples
def test_every_loadable_shared_profile_has_an_expected_context() -> None:
    """A new profile added to the samples must be given its expected context here."""
    from tests.test_manifest_coverage import NOT_PROFILES, SIDE_FILES, _manifest, _path

    listed = {SAMPLES / rel for rel, _, _ in EXPECTED}
    for row in _manifest():
        if row["kind"] in NOT_PROFILES or row["kind"] in SIDE_FILES:
            continue
        path = _path(row)
        if any(path == p or p in path.parents for p in listed):
            continue
        if path.parent.name == "ASCEND_PROFILER_OUTPUT" or any(
                p.name.startswith("PROF_") for p in path.parents):
            continue  # part of a listed profile directory or a side table of one
        if row["kind"] in ("torch_npu.trace_view", "aclgraph.debug_trace", "msprof.api_statistic",
                           "msprof.op_statistic"):
            continue  # empty traces, and the as_strided summaries listed as their directory
        pytest.fail(f"{path} ({row['kind']}) has no expected context in tests/test_context.py")


@needs_samples
def test_an_assumed_mode_says_so_and_a_python_program_is_no_operator_test() -> None:
    """The wio1997 export has nothing in which graph markers could show: the evidence says eager mode is assumed.
    The contest profile is an operator test because its program is native; under a Python interpreter the same
    capture is left to the framework rules."""
    [foundry] = load(SAMPLES / FOUNDRY)
    assert "assumed" in foundry.meta.context_evidence
    [contest] = load(SAMPLES / GELU / "PROF_000001_20240418221724365_MDRNMHLIQDFFBHKB")
    assert contest.meta.application == "execute_op"
    assert "execute_op" in contest.meta.context_evidence and "aclnnFastGeluGrad" in contest.meta.context_evidence
    contest.meta.application = "python3.9"
    assert context.detect(contest)[0] == "torch-eager"
    contest.meta.application = "my_inference_app"  # native, but calling an op API of a kernel it did not capture
    contest.api = contest.api.assign(name=contest.api["name"].astype(str).str.replace("FastGeluGrad", "Add"))
    ctx, why = context.detect(contest)
    assert ctx == "unknown" and "native program 'my_inference_app'" in why


def test_local_fixtures_and_the_example() -> None:
    job = load(DATA / "ingest_text" / "soc_job" / "JOB_SS928_yolo")[0]
    assert job.meta.context == "om-acl" and "SVP ACL" in job.meta.context_evidence
    ms = load(DATA / "ingest_text" / "mindspore" / "rank_1_ascend_ms")[0]
    assert ms.meta.context == "mindspore-graph"
    example = load(next(EXAMPLE.glob("PROF_*")))[0]
    assert example.meta.context == "om-acl" and "aclmdlExecute" in example.meta.context_evidence


def test_pynative_marker_and_graph_markers() -> None:
    import pandas as pd

    from advisor.model import EVENTS_COLUMNS, Profile, empty_frame

    ms = load(DATA / "ingest_text" / "mindspore" / "rank_1_ascend_ms")[0]
    ms.meta.config = {"common_config": {"mode": "PYNATIVE_MODE"}}
    assert context.detect(ms)[0] == "mindspore-pynative"

    events = pd.DataFrame({"process": ["Python", "Python"], "name": ["npu_fx_compiler_inference", "forward"],
                           "category": ["", ""], "start_us": [0.0, 1.0], "duration_us": [1.0, 1.0],
                           "tid": [1, 1], "args": [None, None]})
    base = load(SAMPLES / f"{MSI}/test/data/pytorch/text/level0/rank0_ascend_pt")[0] if SAMPLES.is_dir() else \
        Profile(ops=ms.ops, meta=Meta(layout="torch_npu-text"))
    torchair = Profile(ops=base.ops, meta=base.meta, events=events)
    ctx, why = context.detect(torchair)
    assert ctx == "torch-graph" and "npu_fx_compiler_inference" in why
    capture = Profile(ops=base.ops, meta=base.meta, events=empty_frame(EVENTS_COLUMNS),
                      api=pd.DataFrame({"level": ["acl"], "name": ["aclmdlRICaptureBegin"], "total_us": [1.0],
                                        "count": [1], "avg_us": [1.0], "min_us": [1.0], "max_us": [1.0]}))
    assert context.detect(capture)[0] == "torch-graph"


@needs_samples
def test_cann_version_from_the_om_and_graph_refinement() -> None:
    msit = load_graph(SAMPLES / "Ascend__msit/msit/test/UT/resource/msquickcmp/om/model.json")
    assert context.cann_from_graph(msit) == "5.1.RC2"  # opp_version 1.82.22.2.220
    r101 = load_graph(SAMPLES / "Ascend__samples/python/level1_single_api/9_amct/amct_onnx/resnet-101/src/nuq_conf/"
                               "resnet-101_quantized.json")
    assert context.cann_from_graph(r101) == "5.0.3"  # opp_version 1.79.22.7.220

    meta = Meta(layout="op-summary-csv", context="unknown", cann_version="7.x (header V2)")
    context.refine_with_graph(meta, msit)
    assert meta.context == "om-acl" and "OM JSON" in meta.context_evidence
    assert meta.cann_version == "5.1.RC2"
    torch_meta = Meta(layout="torch_npu-text", context="torch-eager", context_evidence="x", cann_version="8.3.RC1")
    context.refine_with_graph(torch_meta, msit)
    assert torch_meta.context == "torch-eager" and torch_meta.cann_version == "8.3.RC1"
    assert any("profile's context is kept" in n for n in torch_meta.notes)


def test_report_carries_the_context(tmp_path: Path) -> None:
    import jsonschema
    from click.testing import CliRunner

    from advisor.cli import main

    out = tmp_path / "r.json"
    res = CliRunner().invoke(main, ["analyze", "--example", "--format", "json", "-o", str(out), "-q"])
    assert res.exit_code in (0, 3), res.output
    report = json.loads(out.read_text())
    schema = json.loads((Path(__file__).resolve().parents[1] / "advisor/schemas/report.schema.json").read_text())
    jsonschema.validate(report, schema)
    assert report["input"]["context"] == "om-acl"
    assert "aclmdlExecute" in report["input"]["context_evidence"]
    assert report["input"]["cann_version"] == "8.0.0"  # the OM's opp_version, more precise than the header's 8.x
