"""Text-profile ingest: every op_summary / kernel_details header variant, the other summary tables, the layouts
(msprof CANN 6 / 7, single CSV, torch_npu, MindSpore 2.x, SS928 JOB) and the one-line errors for bad input."""

from __future__ import annotations

import csv
import hashlib
import json
import math
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.common.errors import InputError
from advisor.ingest import load, read_source
from advisor.ingest.columns import (
    OPS_ALIASES,
    chip_from_name,
    header_key,
    metric_name,
    ops_header_variant,
    resolve_header,
)
from advisor.ingest.detect import RankSource
from advisor.ingest.timebase import absolute_ns, absolute_us
from advisor.model import COMM_COLUMNS, MEMORY_COLUMNS, OP_STATS_COLUMNS, OPS_COLUMNS, STEPS_COLUMNS, parse_shapes

DATA = Path(__file__).resolve().parent / "data" / "ingest_text"
SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
needs_samples = pytest.mark.skipif(not SAMPLES.is_dir(), reason="../shared/samples not present")

MSINSIGHT = SAMPLES / "Ascend__msinsight"
ANALYZE = SAMPLES / "Ascend__msprof-analyze"
HUB = SAMPLES / "hicann__cann-learning-hub"
NEO = SAMPLES / "neo-pan__ascend-msprof-skill"
SK = HUB / "tutorials/ascendc_operator_development_V2/06_advanced_features/src/06.04_super_kernel/performance_case"

V2_FILE = MSINSIGHT / "server/src/test/test_data/test_kernel_parse/op_summary_1.csv"
V3_FILE = NEO / "tests/fixtures/real_cann_minimal/reports/PROF_001/mindstudio_profiler_output/op_summary_001.csv"
V4_FILE = SK / ("profiling-static/PROF_000001_20260831222150690_02478372PGRDPKHI/mindstudio_profiler_output/"
                "op_summary_20260831222238.csv")
V5_FILE = HUB / "tutorials/tilelang_operator_development/06_tuning/data/msprof_sample/op_summary_current.csv"
KD1_FILE = MSINSIGHT / "test/data/pytorch/text/level0/rank0_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
KD1_NOSTEP_FILE = ANALYZE / "test/resource/test.csv"
KD2_FILE = ANALYZE / "test/ut/advisor/advisor_backend/compute_advice/kernel_details.csv"
KD3_FILE = MSINSIGHT / "server/src/test/test_data/test_rank_1/ASCEND_PROFILER_OUTPUT/kernel_details.csv"
KD4_FILE = ANALYZE / "test/ut/advisor/compute_advice/data/kernel_details.csv"
ST_RANK0 = MSINSIGHT / "test/st/level2/rank_0_ascend_pt"
KD5_FILE = ST_RANK0 / "ASCEND_PROFILER_OUTPUT/kernel_details.csv"
MINDINSIGHT_PROF = (SAMPLES / "mindspore-ai__mindinsight/tests/utils/resource/profiler/"
                    "PROF_000001_20230818142704322_COJGGGCANRMICFBC")


def _one(path: Path):
    profiles = load(path)
    assert len(profiles) == 1
    return profiles[0]


def _raw_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        rows = [r for r in csv.reader(fh) if r]
    return rows[0], rows[1:]


# ---------------------------------------------------------------------------------------------------------
# alias tables
# ---------------------------------------------------------------------------------------------------------
def test_metric_names_map_units_and_prefixes() -> None:
    assert metric_name("aicore_time(us)") == "aicore_time_us"
    assert metric_name("aiv_time(us)") == "aiv_time_us"
    assert metric_name("aic_mac_ratio") == "aic_mac_ratio"
    assert metric_name("cube_utilization(%)") == "cube_utilization"
    assert metric_name("aiv_ub_read_bw(GB/s)") == "aiv_ub_read_bw"
    assert metric_name("aic_read_main_memory_datas(KB)") == "aic_read_main_memory_datas_kb"
    assert metric_name("Task Duration(us)") is None
    assert metric_name("Block Dim") is None


def test_block_num_and_block_dim_resolve_to_the_same_columns() -> None:
    for header in (["Op Name", "Block Dim", "Mix Block Dim"], ["Name", "Block Num", "Mix Block Num"]):
        r = resolve_header(header, OPS_ALIASES)
        assert r.columns == {"name": 0, "block_dim": 1, "mix_block_dim": 2}
    assert header_key("\ufeff Task Start Time (us) ") == header_key("Task Start Time(us)")


def test_chip_from_name() -> None:
    assert chip_from_name("MaxPool_Ascend310_test.csv") == "Ascend310"
    assert chip_from_name("op_Ascend910B2.csv") == "Ascend910B2"
    assert chip_from_name("op_summary_0_1.csv") is None


def test_header_variant_labels() -> None:
    base = ["Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "OP State", "Task Type",
            "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)"]
    v3 = resolve_header([*base, "Block Dim", "aic_mac_ratio"], OPS_ALIASES, extra=metric_name)
    v4 = resolve_header([*base, "Block Num", "aic_mac_ratio"], OPS_ALIASES, extra=metric_name)
    v5 = resolve_header([*base, "Block Num", "aic_mte3_ratio"], OPS_ALIASES, extra=metric_name)
    assert ops_header_variant(v3) == ("op_summary V3", "8.x (header V3)")
    assert ops_header_variant(v4)[0] == "op_summary V4"
    assert ops_header_variant(v5)[0] == "op_summary V5"


# ---------------------------------------------------------------------------------------------------------
# op_summary header variants V1-V5
# ---------------------------------------------------------------------------------------------------------
def test_v1_unprefixed_metrics_and_unitless_start_time() -> None:
    p = _one(DATA / "op_summary_v1.csv")
    assert p.meta.layout == "op-summary-csv"
    ops = p.ops
    assert len(ops) == len(_raw_rows(DATA / "op_summary_v1.csv")[1]) == 4
    assert set(OPS_COLUMNS) <= set(ops.columns)
    conv = ops[ops["name"] == "Conv2D_1"].iloc[0]
    assert conv["type"] == "Conv2D" and conv["core"] == "AI_CORE"
    assert absolute_ns(p.meta, conv["start_us"])[0] == 1665480000001020_000  # not rescaled, exact to the ns
    assert conv["duration_us"] == 250.5 and conv["block_dim"] == 32
    assert conv["mac_ratio"] == pytest.approx(0.767) and conv["memory_bound"] == pytest.approx(0.421)
    assert conv["aicore_time_us"] == pytest.approx(248.1)
    assert "vec_time_us" in ops.columns
    cpu = ops[ops["type"] == "Where"].iloc[0]
    assert cpu["core"] == "AI_CPU"
    assert math.isnan(cpu["aicore_time_us"]) and math.isnan(cpu["mac_ratio"])  # N/A -> NaN, not 0
    assert p.meta.cann_version == "≤6.x (header V1)"
    assert any("'Task Start Time' has no unit" in n for n in p.meta.notes)
    assert ops["op_state"].isna().all()
    assert any("no OP State column" in n for n in p.meta.notes)


@needs_samples
def test_v2_step_id_and_memory_l0_metrics() -> None:
    p = _one(V2_FILE)
    first = p.ops.iloc[0]
    assert first["name"] == "ZerosLike" and first["core"] == "AI_CORE"
    assert absolute_ns(p.meta, first["start_us"])[0] == 1695115378713661_000
    assert first["duration_us"] == pytest.approx(496.8508)
    assert first["step"] == 2 and math.isnan(first["model_id"])  # 4294967295 = eager
    assert first["aicore_time_us"] == pytest.approx(982.72) and first["aiv_time_us"] == pytest.approx(491.36)
    assert "aic_l0a_read_bw" in p.ops.columns
    hccl = p.ops[p.ops["core"] == "HCCL"].iloc[0]
    assert math.isnan(hccl["aicore_time_us"]) and math.isnan(hccl["task_id"])
    assert p.meta.chip == "Ascend910B-class"
    # line 17 of this real file is one field short: it is kept and reported
    assert len(p.ops) == 21
    assert any("line 17" in n for n in p.meta.notes)


@needs_samples
def test_v3_op_state_mix_block_dim_and_split_metrics() -> None:
    p = _one(V3_FILE)
    first = p.ops.iloc[0]
    assert first["core"] == "MIX_AIC" and first["op_state"] == "dynamic"
    assert first["block_dim"] == 256 and first["mix_block_dim"] == 512
    assert absolute_ns(p.meta, first["start_us"])[0] == 1000000_000 and first["duration_us"] == pytest.approx(42399.12)
    assert first["aic_scalar_ratio"] == pytest.approx(0.841) and first["aiv_scalar_ratio"] == pytest.approx(0.995)
    assert first["cube_utilization"] == pytest.approx(0.00029)
    assert p.meta.cann_version == "8.x (header V3)"


@needs_samples
def test_v4_block_num_trailing_tab_and_quoted_shapes() -> None:
    p = _one(V4_FILE)
    _, rows = _raw_rows(V4_FILE)
    first = p.ops.iloc[0]
    assert rows[0][8].endswith("\t")
    assert absolute_ns(p.meta, first["start_us"])[0] == 1788186112069418_015
    assert first["block_dim"] == 40  # header says "Block Num"
    assert first["core"] == "AI_VECTOR_CORE"
    assert parse_shapes(first["input_shapes"]) == ((9216, 7168),)
    assert first["input_dtypes"] == "INT8"
    assert p.ops.iloc[1]["core"] == "DSA_SQE"
    assert p.meta.cann_version == "≥9.0 (header V4)"


@needs_samples
def test_v5_mte3_on_cube_core_and_na_op_state() -> None:
    p = _one(V5_FILE)
    op = p.ops.iloc[0]
    assert op["aic_mte3_ratio"] == 0.0 and op["aic_fixpipe_ratio"] == pytest.approx(0.065)
    assert op["block_dim"] == 64 and op["core"] == "AI_CORE"
    assert pd.isna(op["op_state"])  # "N/A" is missing, never "dynamic"
    assert op["cube_utilization"] == pytest.approx(0.7663)
    assert op["mac_ratio"] == pytest.approx(0.18)  # unified from aic_mac_ratio
    assert p.meta.cann_version == "≥9.0 (header V5)"


@needs_samples
def test_derived_ascend310_subset_gets_names_core_and_duration() -> None:
    path = SAMPLES / "Ascend__workload_analysis/op_modeling/data/ops/MaxPool/MaxPool_Ascend310_test.csv"
    p = _one(path)
    _, rows = _raw_rows(path)
    assert len(p.ops) == len(rows) == 400
    assert (p.ops["type"] == "MaxPool").all() and (p.ops["core"] == "AI_CORE").all()
    assert p.ops["name"].is_unique
    assert p.ops.iloc[0]["duration_us"] == pytest.approx(float(rows[0][10]))
    assert parse_shapes(p.ops.iloc[0]["input_shapes"]) == ((4, 1, 1751, 829, 16),)
    assert p.meta.chip == "Ascend310"


# ---------------------------------------------------------------------------------------------------------
# kernel_details variants 1-6
# ---------------------------------------------------------------------------------------------------------
@needs_samples
def test_kernel_details_variant1_level0_na_types_are_missing() -> None:
    p = _one(KD1_FILE)
    _, rows = _raw_rows(KD1_FILE)
    assert len(p.ops) == len(rows) == 191
    assert p.ops["type"].isna().all()  # every Type cell is N/A
    na_core = np.array([r[3] == "N/A" for r in rows])
    assert (p.ops["core"].isna().to_numpy() == na_core).all() and (p.ops["core"][~na_core] == "HCCL").all()
    assert p.ops.iloc[0]["step"] == 50
    assert "metrics" not in p.available
    q = _one(KD1_NOSTEP_FILE)
    assert absolute_ns(q.meta, q.ops.iloc[0]["start_us"])[0] == 1702866902796675_000  # numeric start time: no x1000
    assert q.ops.iloc[0]["duration_us"] == pytest.approx(932.0498)
    assert q.ops["step"].isna().all()


@needs_samples
def test_kernel_details_variant2_arithmetic_utilization() -> None:
    p = _one(KD2_FILE)
    first = p.ops.iloc[0]
    assert first["core"] == "AI_VECTOR_CORE" and first["block_dim"] == 48
    assert first["aiv_vec_fp16_ratio"] == 0.0 and first["aiv_vec_int32_ratio"] == pytest.approx(0.0822)
    assert first["vector_fops"] == 137176320  # unified from aiv_vector_fops on a vector op
    assert p.meta.cann_version == "7.x (kernel_details variant 2)"


@needs_samples
def test_kernel_details_variant3_hf32_without_op_state() -> None:
    p = _one(KD3_FILE)
    assert str(p.ops.iloc[0]["hf32_eligible"]) == "NO"
    assert p.ops["op_state"].isna().all()
    assert p.meta.cann_version == "7.x (kernel_details variant 3)"


@needs_samples
def test_kernel_details_variant4_quoted_tab_start_and_matmul_metrics() -> None:
    p = _one(KD4_FILE)
    mm = p.ops.iloc[0]
    assert mm["type"] == "MatMulV2" and mm["op_state"] == "dynamic"
    assert absolute_ns(p.meta, mm["start_us"])[0] == 1736413971558972_912
    assert parse_shapes(mm["input_shapes"]) == ((81920, 4096), (8192, 512))
    assert mm["mac_ratio"] == pytest.approx(0.824) and mm["mte2_ratio"] == pytest.approx(0.964)
    assert mm["cube_utilization"] == pytest.approx(0.79295)
    assert math.isnan(mm["context_id"])


@needs_samples
def test_kernel_details_variant5_device_id_prefix() -> None:
    p = _one(KD5_FILE)
    assert len(p.ops) == 2463
    assert (p.ops["device_id"] == 0).all() and p.ops.iloc[0]["step"] == 13
    assert p.meta.cann_version == "8.x (kernel_details variant 5)"


def test_kernel_details_variant6_block_num_and_absent_metrics() -> None:
    p = _one(DATA / "kernel_details_block_num.csv")
    ops = p.ops
    assert ops["block_dim"].tolist()[:3] == [24, 20, 48]
    assert ops.loc[1, "mix_block_dim"] == 40 and ops.loc[1, "core"] == "MIX_AIC"
    assert math.isnan(ops.loc[3, "block_dim"])  # HCCL: N/A
    assert absolute_ns(p.meta, ops.loc[0, "start_us"])[0] == 1780000000000100_250
    assert absolute_ns(p.meta, ops.loc[2, "start_us"])[0] == 1780000000001630_000
    # no PMU columns at all: metrics are NaN, never 0
    for col in ("aicore_time_us", "mac_ratio", "vec_ratio", "mte2_ratio", "memory_bound", "cube_utilization"):
        assert ops[col].isna().all(), col
    assert "metrics" not in p.available
    shapes = parse_shapes(ops.loc[1, "input_shapes"])
    assert shapes == ((4096, 8, 128),) * 3 + (None, None, None, (1, 1, 4096, 4096))


def test_bom_and_crlf_file() -> None:
    p = _one(DATA / "kernel_details_bom_crlf.csv")
    assert list(p.ops["name"]) == ["aclnnMatmul_MatMulCommon_MatMulV2", "aclnnMul_MulAiCore_Mul"]
    assert p.ops.loc[0, "step"] == 3 and p.ops.loc[0, "op_state"] == "static"
    assert p.ops.loc[1, "vec_ratio"] == pytest.approx(0.272)  # vector op: from aiv_vec_ratio
    assert p.ops.loc[1, "mte2_ratio"] == pytest.approx(0.78)  # vector op: from aiv_mte2_ratio, not aic_


# ---------------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("empty.csv", "empty file"),
        ("binary.csv", "binary data"),
        ("not_utf8.csv", "not UTF-8"),
        ("missing_name.csv", "no 'Op Name'/'Name' column; found: 'Model ID'"),
        ("truncated.csv", "truncated: the last row (line 4)"),
        ("garbled.csv", "garbled row at line 3"),
        ("unclosed_quote.csv", "the last row (line 5)"),
    ],
)
def test_bad_inputs_raise_one_line_input_error(name: str, reason: str) -> None:
    with pytest.raises(InputError) as err:
        load(DATA / "bad" / name)
    message = str(err.value)
    assert name in message and reason in message
    assert "\n" not in message


def test_trailing_empty_cells_are_tolerated_and_header_only_file_has_no_ops(tmp_path: Path) -> None:
    path = tmp_path / "op_summary_trailing.csv"
    path.write_text("Op Name,OP Type,Task Type,Task Duration(us)\nA,Add,AI_CORE,1.5,\nB,Mul,AI_VECTOR_CORE,2.5,\n")
    ops = _one(path).ops
    assert list(ops["name"]) == ["A", "B"] and list(ops["duration_us"]) == [1.5, 2.5]
    empty = tmp_path / "op_summary_empty.csv"
    empty.write_text("Op Name,OP Type,Task Type,Task Duration(us)\n")
    with pytest.raises(InputError, match="no profile data"):
        load(empty)


def test_broken_optional_files_are_skipped_with_reasons() -> None:
    p = _one(DATA / "broken_optional")
    assert len(p.ops) == 3
    skipped = {Path(s.path).name: s.reason for s in p.meta.files_skipped}
    assert set(skipped) == {"op_statistic.csv", "api_statistic.csv", "communication.json"}
    assert "binary" in skipped["op_statistic.csv"]
    assert "'API Name'" in skipped["api_statistic.csv"]
    assert "invalid JSON" in skipped["communication.json"]
    assert any(f.endswith("kernel_details.csv") for f in p.meta.files_read)
    assert p.meta.torch_npu_version == "2.6.0" and p.meta.cann_version == "8.1.RC1"  # recorded beats header guess
    assert p.meta.environment["HCCL_ALGO"] == "level0:NA;level1:H-D_R"
    assert len(p.op_stats) == 0 and list(p.op_stats.columns) == OP_STATS_COLUMNS


def _fingerprint(root: Path) -> dict[str, tuple[str, int]]:
    return {str(f): (hashlib.sha256(f.read_bytes()).hexdigest(), f.stat().st_mtime_ns)
            for f in sorted(root.rglob("*")) if f.is_file()}


@needs_samples
def test_inputs_are_not_modified() -> None:
    roots = [DATA, ST_RANK0, V4_FILE.parent]
    before = [_fingerprint(r) for r in roots]
    for r in (DATA / "broken_optional", DATA / "msprof_cann6", ST_RANK0, V4_FILE.parent.parent):
        load(r)
    assert [_fingerprint(r) for r in roots] == before


# ---------------------------------------------------------------------------------------------------------
# layouts
# ---------------------------------------------------------------------------------------------------------
def test_msprof_cann6_summary_dir() -> None:
    p = _one(DATA / "msprof_cann6")
    assert p.meta.layout == "msprof-cann6" and p.meta.rank == 0
    assert p.meta.chip == "Ascend310P3" and p.meta.ai_core_num == 8 and p.meta.aiv_num == 7
    assert list(p.ops["name"]) == ["Conv_0", "Sigmoid_1", "MatMul_7"]  # both model files, in order
    assert p.ops.loc[2, "model_id"] == 2
    assert p.op_stats.loc[0, "ratio"] == pytest.approx(0.54545)  # percent in the file, fraction in the model
    assert p.op_stats.loc[0, "type"] == "Conv2D"
    assert p.api.loc[0, "name"] == "aclmdlExecute" and p.api.loc[0, "level"] == "ACL_MODEL"
    assert p.api.loc[0, "total_us"] == pytest.approx(1502.3)


def test_msprof_cann7_reads_newest_export_and_all_its_slices() -> None:
    p = _one(DATA / "msprof_cann7")
    assert list(p.ops["name"]) == ["MatMul_a", "MatMul_b", "MatMul_c"]
    skipped = [Path(s.path).name for s in p.meta.files_skipped]
    assert skipped == ["op_summary_20250101000000.csv"]
    assert len(p.op_stats) == 1 and p.op_stats.loc[0, "count"] == 3
    assert p.ops["cube_utilization"].tolist() == [0.125] * 3


def test_mindspore_text_export() -> None:
    p = _one(DATA / "mindspore")
    assert p.meta.layout == "mindspore-text" and p.meta.framework == "MindSpore"
    assert p.meta.rank == 1 and p.meta.cann_version == "8.0.0"
    assert p.ops.loc[0, "type"] == "Conv2D" and p.ops.loc[0, "mac_ratio"] == pytest.approx(0.71)
    assert list(p.steps.columns[: len(STEPS_COLUMNS)]) == STEPS_COLUMNS
    assert p.steps.loc[0, "preparing_us"] == 3.5 and p.steps.loc[0, "free_us"] == 15.0


def test_soc_job_layer_profile() -> None:
    p = _one(DATA / "soc_job")
    ops = p.ops
    assert p.meta.layout == "soc-job" and p.meta.chip == "SS928V100/SS927V100"
    assert len(ops) == 12 and sorted(ops["step"].unique()) == [1.0, 2.0]
    assert (ops["core"] == "AI_CORE").all()
    conv = ops.iloc[0]
    assert conv["name"] == "Conv_0" and conv["type"] == "Convolution" and conv["duration_us"] == 412.6
    assert conv["mac_ratio"] == 0.812 and conv["vec_ratio"] == 0.102
    assert conv["soc_ddr_total_bytes"] == 3481600 and conv["soc_wld_ratio"] == 0.118
    assert conv["icache_miss_rate"] == pytest.approx(0.012) and conv["model_id"] == 1
    # the file's Memory Bound agrees with the guide's formula
    expected = np.fmax(np.fmax(ops["soc_dstr_ratio"], ops["soc_dld_ratio"]), ops["soc_wld_ratio"]) / \
        np.fmax(ops["mac_ratio"], ops["soc_vec_ppen_ratio"])
    assert np.allclose(ops["memory_bound"], expected, atol=1e-3)


def test_soc_job_computes_memory_bound_when_absent(tmp_path: Path) -> None:
    src = next((DATA / "soc_job/JOB_SS928_yolo").glob("*.1.0.012.1000.csv"))
    header, rows = _raw_rows(src)
    keep = [i for i, h in enumerate(header) if h != "Memory Bound"]
    job = tmp_path / "JOB_test"
    job.mkdir()
    with open(job / src.name, "w", newline="") as fh:
        w = csv.writer(fh)
        w.writerow([header[i] for i in keep])
        w.writerows([[r[i] for i in keep] for r in rows])
    ops = _one(job).ops
    assert ops.loc[1, "memory_bound"] == pytest.approx(0.612 / 0.391)


@needs_samples
def test_torch_npu_meta_and_side_tables() -> None:
    p = _one(ST_RANK0)
    m = p.meta
    assert m.layout == "torch_npu-text" and m.framework == "PyTorch"
    assert (m.torch_npu_version, m.cann_version, m.rank) == ("2.7.1", "8.3.RC1", 0)
    assert m.config["experimental_config"]["_profiler_level"] == "Level2"
    assert m.environment["PYTORCH_NPU_ALLOC_CONF"] == "expandable_segments:True"
    assert p.extras["profiler_metadata"]["distributed_args"]["world_size"] == 4
    assert list(p.memory.columns[: len(MEMORY_COLUMNS)]) == MEMORY_COLUMNS
    assert list(p.comm.columns[: len(COMM_COLUMNS)]) == COMM_COLUMNS
    assert "Total Op Info" not in set(p.comm["op"].astype(str))
    with open(ST_RANK0 / "ASCEND_PROFILER_OUTPUT/communication.json") as fh:
        raw = json.load(fh)
    op_key = next(iter(raw["step13"]["collective"]))
    info = raw["step13"]["collective"][op_key]["Communication Time Info"]
    row = p.comm[p.comm["op"] == op_key.split("@")[0]].iloc[0]
    assert row["step"] == 13 and row["kind"] == "collective" and row["group"] == op_key.split("@")[1]
    assert row["elapse_us"] == pytest.approx(info["Elapse Time(ms)"] * 1000)
    matrix = p.extras["communication_matrix"]
    assert {"top1", "middle", "bottom1", "total"} <= set(matrix["stat"].dropna())
    assert set(matrix["transport"].dropna()) <= {"LOCAL", "HCCS", "RDMA", "PCIE", "SDMA", "SIO"}


@needs_samples
def test_excel_mangled_memory_timestamps_and_multiline_call_stacks() -> None:
    p = _one(MSINSIGHT / "server/src/test/test_data/test_rank_1")
    assert absolute_us(p.meta, p.memory.loc[0, "timestamp_us"])[0] == pytest.approx(1.69512e15)
    assert p.memory.loc[0, "reserved_mb"] == pytest.approx(10750.375) and math.isnan(p.memory.loc[0, "allocated_mb"])
    q = _one(MSINSIGHT / "test/data/pytorch/text/level1/rank1_ascend_pt")
    details = q.extras["operator_details"]
    assert len(details) == 859
    assert details["call_stack"].str.contains("\n").any()


@needs_samples
def test_cann6_device_dir_with_only_timeline_takes_ops_from_task_time_json() -> None:
    profiles = load(MINDINSIGHT_PROF)
    assert len(profiles) == 1
    p = profiles[0]
    with open(MINDINSIGHT_PROF / "device_0/timeline/task_time_0_2_1.json") as fh:
        events = json.load(fh)
    hardware = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
                and e["args"]["name"] == "Ascend Hardware"}
    tasks = [e for e in events if e.get("ph") == "X" and e.get("pid") in hardware]
    assert len(p.ops) == len(tasks)  # from task_time_*.json only: msprof_*.json is not counted twice
    assert p.meta.chip == "Ascend910A" and p.meta.ai_core_num == 32
    assert any(s.path.endswith("hccl_0_2_1.json") for s in p.meta.files_skipped)
    with open(MINDINSIGHT_PROF / "device_0/timeline/step_trace_0_2_1.json") as fh:
        iterations = [e for e in json.load(fh) if e.get("ph") == "X" and re.match(r"^Iteration \d+$", e.get("name", ""))]
    assert len(p.steps) == len(iterations)
    assert len(p.events) > 0


@needs_samples
def test_bare_directory_with_only_statistics() -> None:
    d = HUB / "skills/examples/as_strided/docs/perf/round_001"
    p = read_source(RankSource(d, "msprof-cann7"))
    assert len(p.ops) == 0 and len(p.op_stats) == 1 and len(p.api) == 5
    assert p.op_stats.loc[0, "type"] == "Slice" and p.op_stats.loc[0, "ratio"] == 1.0


@needs_samples
def test_cann7_dir_without_csv_takes_ops_from_msprof_json(tmp_path: Path) -> None:
    out = tmp_path / "PROF_000001_20230818142704322_ABCDEFGHIJKLMNOP" / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    src = MINDINSIGHT_PROF / "device_0/timeline/msprof_0_2_1.json"
    (out / "msprof_20230818142704.json").write_bytes(src.read_bytes())
    p = _one(out.parent)
    hardware_tasks = _one(MINDINSIGHT_PROF).ops  # the same run read from task_time_*.json
    assert len(p.ops) == len(hardware_tasks) > 0
    assert len(p.events) > 0


@needs_samples
def test_task_time_csv_is_the_ops_fallback(tmp_path: Path) -> None:
    src = NEO / "tests/fixtures/real_cann_minimal/reports/PROF_001/mindstudio_profiler_output/task_time_001.csv"
    (tmp_path / src.name).write_bytes(src.read_bytes())
    p = read_source(RankSource(tmp_path, "msprof-cann7"))
    _, rows = _raw_rows(src)
    named = [r for r in rows if r[1] != "N/A"]
    assert len(p.extras["task_time"]) == len(rows)
    assert list(p.ops["name"]) == [r[1] for r in named] and list(p.ops["core"]) == [r[2] for r in named]
    assert list(p.ops["duration_us"]) == [float(r[5]) for r in named]
