"""Joining profile rows to graph nodes: exact names, original_ops, fused names, stripped task suffixes."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.graph.join import join_profile
from advisor.graph.load import load_graph
from tests.scenarios.builder import GraphBuilder

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
RESNET101 = (SAMPLES / "Ascend__samples/python/level1_single_api/9_amct/amct_onnx/resnet-101/src/nuq_conf"
             / "resnet-101_quantized.json")


def small_graph():
    b = GraphBuilder()
    b.node("trans_TransData_0", "TransData")
    b.node("Conv_0Relu_2", "Conv2D", original_ops=["Conv_0", "BatchNormalization_1", "Relu_2"],
           after="trans_TransData_0")
    b.node("Conv_3Add_5Relu_6", "Conv2D", after="Conv_0Relu_2")  # fused, but no original_ops recorded
    b.node("PartitionedCall_Gather_12_gatherv2_3", "GatherV2", after="Conv_3Add_5Relu_6")
    b.node("NonZero", "NonZero", engine="AI_CPU", after="PartitionedCall_Gather_12_gatherv2_3")
    b.node("Relu_20", "Relu", after="NonZero")
    b.node("StatelessDropOutGenMask", "StatelessDropOutGenMask", after="Relu_20")
    return b.build()


def ops_table(rows: list[tuple[str, str, float]]) -> pd.DataFrame:
    return pd.DataFrame(rows, columns=["name", "type", "duration_us"])


def test_each_matching_rule() -> None:
    ops = ops_table([
        ("Conv_0Relu_2", "Conv2D", 10.0),             # exact
        ("Relu_2", "Relu", 4.0),                      # listed in original_ops
        ("Add_5", "Add", 3.0),                        # embedded in a fused name without original_ops
        ("Gather_12", "GatherV2", 2.0),               # embedded after a partition prefix
        ("NonZero_MemSet", "MemSet", 1.0),            # memset task of NonZero
        ("StatelessDropOutGenMask/DSASTATELESSGENBITMASK", "DSAStatelessGenBitMask", 1.5),  # DSA task
        ("Relu", "Relu", 6.0),                        # not "Relu_20": that is another instance
        ("Conv_3", "Conv2D", 1.0),                    # token at the start of a fused name
        ("aclnnAdd_AddAiCore_Add", "Add", 7.0),       # eager op: not in the graph
        ("Conv_0Relu_2", "Conv2D", 10.0),
    ])
    r = join_profile(small_graph(), ops)
    assert r.nodes.tolist() == ["Conv_0Relu_2", "Conv_0Relu_2", "Conv_3Add_5Relu_6",
                                "PartitionedCall_Gather_12_gatherv2_3", "NonZero", "StatelessDropOutGenMask", None,
                                "Conv_3Add_5Relu_6", None, "Conv_0Relu_2"]
    assert r.method == {"Conv_0Relu_2": "exact", "Relu_2": "original", "Add_5": "fused", "Gather_12": "fused",
                        "NonZero_MemSet": "stripped", "StatelessDropOutGenMask/DSASTATELESSGENBITMASK": "stripped",
                        "Conv_3": "fused"}
    assert r.matched_rows == 8 and r.total_rows == 10
    assert r.matched_share == pytest.approx((45.5 - 13.0) / 45.5)
    assert r.unmatched_top == [
        {"name": "aclnnAdd_AddAiCore_Add", "type": "Add", "duration_us": 7.0, "count": 1},
        {"name": "Relu", "type": "Relu", "duration_us": 6.0, "count": 1},
    ]
    d = r.to_dict()
    assert d["matched_time_share"] == pytest.approx(32.5 / 45.5, abs=1e-6)
    assert d["unmatched_top"] == r.unmatched_top
    assert d["matched_names_by_method"] == {"exact": 1, "original": 1, "fused": 3, "stripped": 2}


def test_no_false_match_inside_longer_numbers_or_words() -> None:
    ops = ops_table([("Conv_0Relu_20", "Conv2D", 1.0), ("onv_0", "Conv2D", 1.0), ("Conv_", "X", 1.0),
                     ("elu_2", "Relu", 1.0), ("Relu_2", "Relu", 1.0)])
    b = GraphBuilder()
    b.node("Conv_0Relu_21", "Conv2D")  # holds neither "Relu_2" nor "Conv_0Relu_20"
    r = join_profile(b.build(), ops)
    assert r.nodes.isna().all()
    assert r.matched_share == 0.0


def test_categorical_names_index_and_nan_durations() -> None:
    names = ["Conv_0Relu_2", "missing", "Relu_2", "missing"]
    ops = pd.DataFrame({"name": pd.Categorical(names), "type": ["Conv2D", "Foo", "Relu", "Foo"],
                        "duration_us": [2.0, np.nan, 2.0, 4.0]}, index=[10, 11, 12, 13])
    r = join_profile(small_graph(), ops)
    assert r.nodes.index.tolist() == [10, 11, 12, 13]
    assert r.nodes.tolist() == ["Conv_0Relu_2", None, "Conv_0Relu_2", None]
    assert r.matched_share == pytest.approx(0.5)
    assert r.unmatched_top == [{"name": "missing", "type": "Foo", "duration_us": 4.0, "count": 2}]
    assert r.node_for("Relu_2") == "Conv_0Relu_2"


def test_table_aggregated_per_name_with_counts() -> None:
    """The analyze pipeline may pass one row per name with a task count: same shares, counts from ``count``."""
    ops = pd.DataFrame({"name": ["Conv_0Relu_2", "aclnnAdd", "NonZero_MemSet"], "type": ["Conv2D", "Add", "MemSet"],
                        "duration_us": [30.0, 12.0, 6.0], "count": [3, 40, 2]})
    r = join_profile(small_graph(), ops)
    assert (r.matched_rows, r.total_rows) == (5, 45)
    assert r.matched_share == pytest.approx(36 / 48)
    assert r.unmatched_top == [{"name": "aclnnAdd", "type": "Add", "duration_us": 12.0, "count": 40}]


def test_empty_table() -> None:
    r = join_profile(small_graph(), ops_table([]))
    assert r.total_rows == 0 and r.matched_rows == 0
    assert r.to_dict()["matched_time_share"] is None


def test_million_rows_join_on_distinct_names() -> None:
    """Vectorized: 1M rows over 3k distinct names must not take per-row Python work."""
    import time

    g = small_graph()
    rng = np.random.default_rng(1)
    pool = np.array(["Conv_0Relu_2", "Relu_2", "Add_5"] + [f"eager_op_{i}" for i in range(3000)], dtype=object)
    picks = rng.integers(0, len(pool), 1_000_000)
    ops = pd.DataFrame({"name": pool[picks], "type": "T", "duration_us": 1.0})
    t = time.perf_counter()
    r = join_profile(g, ops)
    elapsed = time.perf_counter() - t
    expected = float(np.isin(picks, [0, 1, 2]).mean())
    assert r.matched_share == pytest.approx(expected)
    assert r.matched_rows == int(np.isin(picks, [0, 1, 2]).sum())
    assert elapsed < 30  # generous: a per-row loop would take minutes


@pytest.mark.skipif(not RESNET101.is_file(), reason="../shared/samples not present")
def test_join_against_a_real_om_json() -> None:
    mg = load_graph(RESNET101)
    ops = ops_table([("Conv_0Relu_2", "Conv2D", 50.0), ("BatchNormalization_1", "BatchNorm", 5.0),
                     ("trans_TransData_1", "TransData", 8.0), ("Gemm_353", "MatMulV2", 20.0),
                     ("Relu_999", "Relu", 17.0)])
    r = join_profile(mg, ops)
    assert r.nodes.tolist() == ["Conv_0Relu_2", "Conv_0Relu_2", "trans_TransData_1", "Gemm_353", None]
    assert r.matched_share == pytest.approx(83 / 100)
