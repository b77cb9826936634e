"""Memory Bound per the chip (SoC JOB formula / msprof ratio) and the report's model summary.

The JOB fixture is written with the SS928V100/SS927V100 profiling guide's op_summary column list, in its order,
and its per-picture file name; the Memory Bound of rows that leave it empty is computed by the reader with the
guide's formula, which the test recomputes independently."""

from __future__ import annotations

import csv
import json
import math
from pathlib import Path

import jsonschema
import pytest

from advisor.ingest import load
from advisor.knowledge_bases.memory_bound import MemoryBoundKB
from advisor.pipeline.analysis import run_analysis
from advisor.platform import resolve_platform
from advisor.testing import load_rules
from advisor.toolkit.model_summary import SOC_FORMULA, summarize
from tests.scenarios.builder import OpRow, make_profile
from tests.scenarios.cases_a import run_kb

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "samples"
SCHEMA = json.loads((ROOT / "advisor" / "schemas" / "report.schema.json").read_text())
GUIDE_COLUMNS = ["Layer Id", "Ori Layer Name", "Layer Name", "Layer Type", "Time(us)", "Time Ratio", "Mac Busy Ratio",
                 "Mac Ppen Ratio", "Vec Busy Ratio", "Vec Ppen Ratio", "Dstr Ratio", "Dtrans Ratio", "DLD Ratio",
                 "WLD Ratio", "Memory Bound", "DDR Read(byte)", "DDR Write(byte)", "DDR Total(byte)"]
# name, type, time, mac busy, vec ppen, dstr, dld, wld, memory bound as written ("" = computed by the reader)
LAYERS = [
    ("conv1", "Convolution", 400.0, 0.82, 0.10, 0.20, 0.30, 0.12, "0.366"),
    ("fc6", "InnerProduct", 300.0, 0.30, 0.05, 0.05, 0.10, 0.69, ""),         # weight loads: 0.69 / 0.30 = 2.3
    ("relu2", "ReLU", 50.0, 0.00, 0.40, 0.60, 0.55, 0.00, ""),                # stores: 0.60 / 0.40 = 1.5
    ("pool3", "Pooling", 80.0, 0.00, 0.50, 0.30, 0.35, 0.00, "0.7"),
]


def _guide_bound(mac: float, vec: float, dstr: float, dld: float, wld: float) -> float:
    return max(dstr, dld, wld) / max(mac, vec)


def write_job(root: Path, pictures: int = 2) -> Path:
    job = root / "JOB_SS928_memory_bound"
    job.mkdir()
    for pic in range(1, pictures + 1):
        path = job / f"op_summary_0.net.1.1.{pictures}.{pic}.0.012.1000.csv"
        with path.open("w", newline="") as fh:
            w = csv.writer(fh)
            w.writerow(GUIDE_COLUMNS)
            for i, (name, typ, t, mac, vec, dstr, dld, wld, mb) in enumerate(LAYERS):
                ddr_r, ddr_w = int(t * 1000), int(t * 800)
                w.writerow([i, name, name, typ, t, "", mac, mac * 0.8, vec * 1.1, vec, dstr, 0.01, dld, wld, mb,
                            ddr_r, ddr_w, ddr_r + ddr_w])
    return job


def test_job_memory_bound_uses_the_guide_formula_and_gives_soc_advice(tmp_path: Path) -> None:
    job = write_job(tmp_path)
    profile = load(job)[0]
    got = profile.ops.drop_duplicates("name").set_index("name")["memory_bound"]
    for name, _, _, mac, vec, dstr, dld, wld, written in LAYERS:
        expected = float(written) if written else _guide_bound(mac, vec, dstr, dld, wld)
        assert got[name] == pytest.approx(expected, rel=1e-6)
    findings, status = run_kb(MemoryBoundKB, profile, None, chip="SS928V100")
    assert status.status == "ok"
    (f,) = findings
    assert f.evidence["formula"] == SOC_FORMULA
    assert set(f.ops) == {"fc6", "relu2"}  # conv1 (0.37) and pool3 (0.7) are below 1
    # fc6 dominates the time-weighted transfers: weight loads
    assert f.evidence["dominant_transfer"] == "weight loads (WLD)" and "int8" in f.recommendation
    assert "AOE" not in json.dumps(f.fix.to_dict()) and "has no AOE" in f.recommendation
    fc6 = 2 * 300.0 * (1 - 1 / (0.69 / 0.30)) * 0.5
    assert f.saving_by_op["fc6"] == pytest.approx(fc6)
    assert f.estimated_saving_us == pytest.approx(fc6 + 2 * 50.0 * (1 - 1 / 1.5) * 0.5)


def test_job_report_model_summary_and_no_aoe_anywhere(tmp_path: Path) -> None:
    job = write_job(tmp_path)
    report = run_analysis(job).report
    jsonschema.validate(report, SCHEMA)
    assert report["platform"]["soc"] == "SS928V100" and report["input"]["context"] == "om-acl"
    ms = report["model_summary"]
    ddr = sum(int(t * 1000) + int(t * 800) for _, _, t, *_ in LAYERS) * 2
    assert ms["memory"]["real_bytes"] == ddr and ms["memory"]["real_source"].startswith("DDR Total")
    assert ms["memory_bound"]["formula"] == SOC_FORMULA and ms["memory_bound"]["ops_over"] == 4
    total = sum(t for _, _, t, *_ in LAYERS)
    assert ms["memory_bound"]["share_of_time"] == pytest.approx((300 + 50) / total, abs=1e-4)
    for f in report["findings"]:
        text = f["recommendation"] + json.dumps(f.get("fix") or {})
        assert "aoe --" not in text and "AOE operator tuning (aoe" not in text, f["rule"]


def test_msprof_ratio_where_the_column_is_absent_and_aoe_only_for_atc_models() -> None:
    rows = [OpRow(f"add{i}", "Add", 100.0, core="AI_CORE", metrics={"mte2_ratio": 0.45, "vec_ratio": 0.15,
                                                                     "mac_ratio": 0.0}) for i in range(3)]
    rows.append(OpRow("mm", "MatMulV2", 200.0, metrics={"mte2_ratio": 0.2, "mac_ratio": 0.8, "vec_ratio": 0.1}))
    profile = make_profile(rows, context="om-acl")
    (f,) = run_kb(MemoryBoundKB, profile, None)[0]
    assert f.evidence["formula"].startswith("mte2_ratio / max(mac_ratio, vec_ratio)")
    assert set(f.ops) == {"add0", "add1", "add2"}
    assert f.estimated_saving_us == pytest.approx(3 * 100.0 * (1 - 1 / 3.0) * 0.5)
    assert "aoe --framework=5" in f.recommendation  # below their roof: tiling can still help  # an ATC model on a chip with AOE
    eager = make_profile(rows, context="torch-eager")
    (g,) = run_kb(MemoryBoundKB, eager, None)[0]
    assert "AOE" not in g.recommendation


def test_layers_at_their_memory_roof_get_no_tuning_advice_and_compute_bound_ops_are_not_memory_bound() -> None:
    """Issue 13: one verdict per op. Adds whose MTE2 pipe is saturated already run at the memory roof (fewer bytes
    help, AOE does not); a matmul above the ridge whose MTE2 pipe out-works its cube is the shared classification's
    compute case, not a memory-bound layer."""
    rows = [OpRow(f"add{i}", "Add", 100.0, core="AI_CORE", metrics={"mte2_ratio": 0.95, "vec_ratio": 0.3,
                                                                     "mac_ratio": 0.0}) for i in range(3)]
    rows.append(OpRow("mm", "MatMulV2", 400.0, input_shapes="2048,2048;2048,2048", input_dtypes="FLOAT16;FLOAT16",
                      output_shapes="2048,2048", output_dtypes="FLOAT16",
                      metrics={"mte2_ratio": 0.9, "mac_ratio": 0.3, "vec_ratio": 0.1}))
    (f,) = run_kb(MemoryBoundKB, make_profile(rows, context="om-acl"), None)[0]
    assert set(f.ops) == {"add0", "add1", "add2"}
    assert "aoe" not in f.recommendation.lower() and "memory roof" in f.recommendation


def test_model_summary_work_utilization_block_dim_and_redundancy() -> None:
    m, k, n = 512, 1024, 2048
    mm = OpRow("mm", "MatMulV2", 100.0, input_shapes=f"{m},{k};{k},{n}", input_dtypes="FLOAT16;FLOAT16",
               input_formats="ND;ND", output_shapes=f"{m},{n}", output_dtypes="FLOAT16", output_formats="ND",
               metrics={"main_mem_read_bw": 100.0, "main_mem_write_bw": 50.0, "aicore_time_us": 90.0})
    add = OpRow("add", "Add", 20.0, core="AI_VECTOR_CORE", input_shapes=f"{m},{n};{m},{n}",
                input_dtypes="FLOAT16;FLOAT16", output_shapes=f"{m},{n}", output_dtypes="FLOAT16",
                metrics={"main_mem_read_bw": 200.0, "main_mem_write_bw": 100.0, "aicore_time_us": 18.0})
    profile = make_profile([mm, mm, add])
    platform = resolve_platform(load_rules(), "Ascend310P3")
    ms = summarize(profile, platform, load_rules())
    flops = 2.0 * m * n * k
    assert ms["work_source"].startswith("theoretical")
    assert ms["cube"]["gops"] == pytest.approx(2 * flops / 1e9, rel=1e-3)
    assert ms["cube"]["utilization"] == pytest.approx(2 * flops / (platform["fp16_tflops"] * 1e6 * 200.0), rel=1e-3)
    assert ms["vector"]["gops"] == pytest.approx(m * n / 1e9, rel=1e-3)
    assert ms["average_block_dim"]["mean"] == 8.0
    real = 2 * (150.0 * 1e3 * 90.0) + 300.0 * 1e3 * 18.0  # GB/s x us = 1e3 bytes
    theo = 2 * 2 * (m * k + k * n + m * n) + 2 * 3 * m * n
    assert ms["memory"]["real_bytes"] == pytest.approx(real, rel=1e-6)
    assert ms["memory"]["theoretical_bytes"] == pytest.approx(theo, rel=1e-6)
    assert ms["memory"]["redundancy"] == pytest.approx(real / theo, abs=1e-3)


def test_l2_hit_rate_from_l2_cache(tmp_path: Path) -> None:
    profile = make_profile([OpRow("a", "Add", 10.0), OpRow("b", "Mul", 10.0)])
    import pandas as pd

    profile.extras["l2_cache"] = pd.DataFrame({"name": ["a", "b", "c"], "hit_rate": [0.9, 0.5, float("nan")],
                                               "victim_rate": [0.1, 0.2, 0.3]})
    ms = summarize(profile, resolve_platform(load_rules(), "Ascend910B2"), load_rules())
    assert ms["l2_cache"]["hit_rate"] == pytest.approx(0.7) and ms["l2_cache"]["tasks_with_hit_rate"] == 2
    assert ms["l2_cache"]["victim_rate"] == pytest.approx(0.2)


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="../shared/samples not present")
def test_l2_cache_of_a_real_torch_npu_sample() -> None:
    root = SAMPLES / "Ascend__msinsight/test/data/pytorch/text/level1/rank0_ascend_pt"
    report = run_analysis(root).report
    jsonschema.validate(report, SCHEMA)
    raw = list(csv.DictReader((root / "ASCEND_PROFILER_OUTPUT" / "l2_cache.csv").open()))
    l2 = report["model_summary"]["l2_cache"]
    assert l2["tasks"] == len(raw)
    numeric = [float(r["Hit Rate"]) for r in raw if r["Hit Rate"] not in ("N/A", "")]
    if numeric:
        assert l2["hit_rate"] == pytest.approx(sum(numeric) / len(numeric), abs=1e-4)
    else:  # this capture writes N/A hit rates (only victim rates)
        assert l2["hit_rate"] is None and "N/A" in l2["note"]


def test_example_model_summary_host_section() -> None:
    report = run_analysis(next((ROOT / "advisor/examples/ssd_mish_310p").glob("PROF_*"))).report
    host = report["model_summary"]["host"]
    assert host["execute_api"] == "aclmdlExecute" and host["calls"] == 10
    assert host["avg_execute_us"] == pytest.approx(1617.892, abs=1e-3)
    busy = report["summary"]["device_busy_us"]
    assert host["device_busy_per_execute_us"] == pytest.approx(busy / 10, abs=1e-3)
    assert not math.isnan(report["model_summary"]["cube"]["gops"])


def test_shapes_that_do_not_fit_the_time_are_left_out_of_utilization() -> None:
    m = k = n = 4096  # 137 GFLOP in 10 us would be 13,700 TFLOPS: the shapes are not what ran
    bad = OpRow("mm_bad", "MatMulV2", 10.0, input_shapes=f"{m},{k};{k},{n}", input_dtypes="FLOAT16;FLOAT16",
                input_formats="ND;ND", output_shapes=f"{m},{n}", output_dtypes="FLOAT16", output_formats="ND")
    ok = OpRow("mm_ok", "MatMulV2", 4000.0, input_shapes=f"{m},{k};{k},{n}", input_dtypes="FLOAT16;FLOAT16",
               input_formats="ND;ND", output_shapes=f"{m},{n}", output_dtypes="FLOAT16", output_formats="ND")
    ms = summarize(make_profile([bad, ok]), resolve_platform(load_rules(), "Ascend310P3"), load_rules())
    assert "1 task(s) left out" in ms["work_note"]
    assert 0 < ms["cube"]["utilization"] <= 1 and ms["cube"]["time_us"] == pytest.approx(4000.0)


def _bound_rows() -> list[OpRow]:
    return [OpRow(f"add{i}", "Add", 100.0, core="AI_CORE", metrics={"mte2_ratio": 0.9, "vec_ratio": 0.3,
                                                                     "mac_ratio": 0.0}) for i in range(3)]


def test_memory_bound_advice_per_context() -> None:
    torch = run_kb(MemoryBoundKB, make_profile(_bound_rows(), chip="Ascend910B2", context="torch-eager"), None,
                   chip="Ascend910B2")[0][0]
    assert "torch_npu" in torch.recommendation and "bf16" in torch.recommendation
    ms = run_kb(MemoryBoundKB, make_profile(_bound_rows(), context="mindspore-graph"), None)[0][0]
    assert "enable_graph_kernel" in ms.recommendation and "torch" not in ms.recommendation
    assert "bf16" not in ms.recommendation  # 310P has no bf16
    assert MemoryBoundKB.rule("memory-bound.layers").role == "symptom"
    assert ms.confidence == load_rules().for_kb("memory-bound")["confidence"]


def test_kernel_development_is_left_to_the_roofline() -> None:
    findings, status = run_kb(MemoryBoundKB, make_profile(_bound_rows(), context="kernel-dev"), None)
    assert findings == [] and any("kernel-development" in n for n in status.notes)
