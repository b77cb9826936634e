"""MindSpore 1.x ``profiler/`` directories: the mindinsight samples end to end, and a hand-written directory
with the variants (no timeline, newer headers, reduce columns in the step trace, several links per transport)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from advisor.common.errors import InputError
from advisor.ingest import load, read_source
from advisor.ingest.detect import RankSource, detect
from advisor.ingest.mindspore_legacy import tensor_strings
from advisor.ingest.timebase import absolute_ns, absolute_us

RESOURCE = Path(__file__).resolve().parents[1].parent / "shared" / "samples" / "mindspore-ai__mindinsight" / \
    "tests" / "utils" / "resource"
RUN1 = RESOURCE / "run_1" / "normal_run" / "profiler"
RUN2 = RESOURCE / "run_2" / "normal_run" / "profiler"
CLUSTER = RESOURCE / "cluster_propose"
needs_samples = pytest.mark.skipif(not RUN2.is_dir(), reason="../shared/samples not present")


def test_tensor_strings() -> None:
    info = {
        "output_0": {"format": "NC1HWC0", "data_type": "NUMBER_TYPE_FLOAT16", "shape": [32, 1, 28, 28, 16]},
        "input_10": {"format": "DefaultFormat", "data_type": "INT32", "shape": "1"},
        "input_2": {"format": "FRACTAL_Z", "data_type": "NUMBER_TYPE_FLOAT32", "shape": "25,1,16,16"},
        "input_0": {"format": "DEFAULT", "data_type": "UNKNOWN", "shape": ""},
        "attr": {"x": 1},
    }
    t = tensor_strings(info)
    assert t["input_shapes"] == ";25,1,16,16;1"
    assert t["input_dtypes"] == "UNKNOWN;FLOAT;INT32"
    assert t["input_formats"] == "ND;FRACTAL_Z;ND"
    assert t["output_shapes"] == "32,1,28,28,16" and t["output_dtypes"] == "FLOAT16"
    assert tensor_strings({}) == {} and tensor_strings(None) == {}


# ---------------------------------------------------------------------------------------------------------
# samples
# ---------------------------------------------------------------------------------------------------------
@needs_samples
def test_run2_tasks_from_timeline_on_the_step_clock() -> None:
    [profile] = load(RUN2.parent)  # detection finds profiler/ one level down
    meta = profile.meta
    assert meta.layout == "mindspore-legacy" and meta.framework == "mindspore 1.x"
    ops = profile.ops
    assert ops["core"].value_counts().to_dict() == {"AI_CORE": 107, "AI_CPU": 5}
    transdata = ops[ops["name"] == "Default/TransData-op118"]
    assert transdata["duration_us"].tolist() == [46.64, 47.43]  # two tasks; the CSV holds their mean 47.035 us
    first = transdata.iloc[0]
    assert first["type"] == "TransData" and first["block_dim"] == 32 and first["stream_id"] == 519
    assert first["input_shapes"] == "2,3,227,227" and first["output_formats"] == "NC1HWC0"
    assert first["input_formats"] == "ND"
    # timeline ts are relative; AI CPU rows (us since boot) put them on one clock with the step trace
    assert absolute_us(profile.meta, first["start_us"])[0] == pytest.approx(154901853050 + 6042915.169984102)
    step = profile.steps.iloc[0]
    assert absolute_ns(profile.meta, step["start_us"])[0] == 15490789606875 * 10  # 10 ns cycles, exact
    in_step = ops[ops["step"] == 1.0]
    assert len(in_step) > 90 and (in_step["start_us"] >= step["start_us"]).all()
    cpu = ops[ops["core"] == "AI_CPU"]
    assert cpu["name"].tolist() == ["InitData", "GetNext", "EndOfSequence", "GetNext", "EndOfSequence"]
    assert cpu["duration_us"].iloc[0] == 160.0 and cpu["aicpu_total_us"].iloc[0] == pytest.approx(7906.0)
    assert "output_format_data_hwts_1.txt" in {Path(s.path).name for s in meta.files_skipped}


@needs_samples
def test_run1_average_rows_and_mismatched_timeline() -> None:
    profile = read_source(RankSource(RUN1, "mindspore-legacy"))
    skipped = {Path(s.path).name: s.reason for s in profile.meta.files_skipped}
    assert "do not match" in skipped["timeline_display_1.json"]
    ops = profile.ops
    assert len(ops) == 205 and ops["start_us"].isna().all()
    matmul = ops[ops["name"].astype(str).str.endswith("fc3-Dense/MatMul-op97")]
    assert len(matmul) == 1 and matmul["duration_us"].iloc[0] == pytest.approx(380.77)
    assert profile.device_time_us() == pytest.approx(profile.op_stats["total_us"].sum(), rel=1e-6)
    assert len(profile.steps) == 322
    assert profile.steps["duration_us"].iloc[0] == pytest.approx(28427118 / 100)
    assert profile.steps["preparing_us"].iloc[1] == pytest.approx(21081 / 100)
    assert profile.steps["communication_us"].isna().all()  # run_1 stream columns are not collectives
    assert profile.extras["step_trace_points"]["fp_start"] == "Default/Cast-op6"
    assert list(profile.extras["minddata_pipeline"]["op_type"]) == ["Batch", "Shuffle", "TFReader", "TFReader"]


@needs_samples
def test_cluster_dir_is_two_ranks() -> None:
    sources = detect(CLUSTER)
    assert [(s.layout, s.rank) for s in sources] == [("mindspore-legacy", 0), ("mindspore-legacy", 2)]
    profiles = load(CLUSTER)
    assert [p.meta.rank for p in profiles] == [0, 2]
    r0, r2 = profiles
    assert len(r0.steps) == len(r2.steps) == 5
    assert set(r0.comm["op"]) != set(r2.comm["op"])  # each rank's own hccl_raw
    row = r0.comm[(r0.comm["step"] == 1.0) & (r0.comm["op"] == "stream_41_0_AllReduce-op4582")].iloc[0]
    assert row["transport"] == "SDMA"
    assert row["transit_us"] == pytest.approx((0.00237 + 0.00085) * 1000)
    assert row["size_mb"] == pytest.approx((4.096 + 2.048) / 1000)
    assert row["elapse_us"] == pytest.approx((0.00322 + 0.01035) * 1000)
    assert r0.steps["communication_us"].notna().all()
    assert "cluster_analyse" in r0.extras and "cluster_analyse" not in r2.extras


# ---------------------------------------------------------------------------------------------------------
# a hand-written directory: newer headers, no timeline, no execution_frequency
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def legacy_dir(tmp_path: Path) -> Path:
    d = tmp_path / "profiler"
    d.mkdir()
    conv_info = json.dumps({"input_0": {"format": "NC1HWC0", "data_type": "NUMBER_TYPE_FLOAT16",
                                        "shape": [8, 1, 32, 32, 16]},
                            "input_1": {"format": "FRACTAL_Z", "data_type": "NUMBER_TYPE_FLOAT16",
                                        "shape": [9, 4, 16, 16]},
                            "output_0": {"format": "NC1HWC0", "data_type": "NUMBER_TYPE_FLOAT16",
                                         "shape": [8, 4, 32, 32, 16]}})
    (d / "framework_raw_3.csv").write_text(
        "task_id,stream_id,block_dim,full_op_name,op_name,op_type,subgraph,op_info\n"
        f'5,12,8,Default/net/Conv2D-op1,Conv2D-op1,Conv2D,Default,"{conv_info.replace(chr(34), chr(34) * 2)}"\n'
        "6,12,1,Default/net/ReLU-op2,ReLU-op2,ReLU,Default,{}\n", encoding="utf-8")
    (d / "aicore_intermediate_3_detail.csv").write_text(
        "full_op_name,execution_time\nDefault/net/Conv2D-op1,0.125\nDefault/net/ReLU-op2,0.004\n"
        "Default/net/Cast-op9,0.002\n", encoding="utf-8")
    (d / "aicpu_intermediate_3.csv").write_text(
        "serial_number,kernel_type,total_time,dispatch_time,execution_time,run_start,run_end\n"
        "1,GetNext,0.5,0.1,0.22,1000,1300\n", encoding="utf-8")
    (d / "step_trace_raw_3_detail_time.csv").write_text(
        "step_num,start_point,end_point,total,fp_point,bp_point,iteration_interval,fp_and_bp,tail,"
        "stream_5_0_AllReduce-op3,stream_5_0_AllReduce-op3_start_point,stream_5_0_AllReduce-op3_end_point,"
        "stream_6_0_AllReduce-op4,stream_6_0_AllReduce-op4_start_point,stream_6_0_AllReduce-op4_end_point\n"
        "1,100000,200000,100000,110000,180000,10000,70000,20000,5000,150000,155000,5000,153000,158000\n"
        "-,100000,200000,100000,110000,180000,10000,70000,20000,5000,150000,155000,5000,153000,158000\n",
        encoding="utf-8")
    links = {"0-1": {"RDMA": [0.01, 100.0, 1e7, 0.001]}, "1-0": {"RDMA": [0.03, 300.0, 1e7, 0.0]},
             "0-0": {"SDMA": [0.002, 10.0, 5e6]}}
    ops_cost = json.dumps({"AllReduce-op3": ["1", 0.05, 0.02, links], "Send-op7": ["1", 0.01, 0.0, {}]})
    avg = json.dumps({"AllReduce-op3": ["-", 0.05, 0.02, links]})
    (d / "hccl_raw_3.csv").write_text(
        "step_num,communication_cost,wait_cost,link_info,communication_operator_cost\n"
        f'1,0.06,0.02,"{{}}","{ops_cost.replace(chr(34), chr(34) * 2)}"\n'
        f'-,0.06,0.02,"{{}}","{avg.replace(chr(34), chr(34) * 2)}"\n', encoding="utf-8")
    return d


def test_handwritten_dir(legacy_dir: Path) -> None:
    [profile] = load(legacy_dir)
    assert profile.meta.rank == 3
    ops = profile.ops
    assert ops["name"].tolist() == ["GetNext", "Default/net/Conv2D-op1", "Default/net/ReLU-op2",
                                    "Default/net/Cast-op9"]
    assert ops["duration_us"].tolist() == pytest.approx([300.0, 125.0, 4.0, 2.0])
    conv = ops.iloc[1]
    assert conv["type"] == "Conv2D" and conv["block_dim"] == 8 and conv["task_id"] == 5
    assert conv["input_shapes"] == "8,1,32,32,16;9,4,16,16" and conv["input_dtypes"] == "FLOAT16;FLOAT16"
    assert conv["input_formats"] == "NC1HWC0;FRACTAL_Z" and conv["output_shapes"] == "8,4,32,32,16"
    assert ops.iloc[3]["type"] == "Cast"  # not in framework_raw: from the name
    assert ops.iloc[0]["step"] == 1.0  # GetNext starts at 1000 us, inside step 1 [1000, 2000] us
    assert np.isnan(ops.iloc[1:]["step"]).all()  # averages have no start time, hence no step

    step = profile.steps.iloc[0]
    assert len(profile.steps) == 1  # the '-' average row is dropped
    assert step["duration_us"] == 1000.0 and step["computing_us"] == 700.0 and step["preparing_us"] == 100.0
    assert step["tail_us"] == 200.0
    assert step["communication_us"] == pytest.approx(80.0)  # union of [1500,1550] and [1530,1580] us

    comm = profile.comm.set_index(["op", "transport"])
    assert len(profile.comm) == 3  # AllReduce over RDMA and SDMA, Send without links
    rdma = comm.loc[("AllReduce-op3", "RDMA")]
    assert rdma["transit_us"] == pytest.approx(40.0) and rdma["size_mb"] == pytest.approx(0.4)
    assert rdma["bandwidth_gbps"] == pytest.approx(10.0)  # 400 KB in 0.04 ms
    assert rdma["elapse_us"] == pytest.approx(70.0) and rdma["wait_us"] == pytest.approx(20.0)
    send = profile.comm[profile.comm["op"] == "Send-op7"]
    assert send["transport"].isna().all()


def test_no_profiler_files(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("x", encoding="utf-8")
    with pytest.raises(InputError, match="no MindSpore profiler files"):
        read_source(RankSource(tmp_path, "mindspore-legacy"))


def test_reading_leaves_files_unchanged(legacy_dir: Path) -> None:
    import hashlib

    def hashes() -> dict[str, str]:
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(legacy_dir.iterdir())}

    before = hashes()
    load(legacy_dir)
    assert hashes() == before
