"""ub-fusion: unfused conv/matmul epilogues and elementwise chains, from graphs and from profiles."""

from __future__ import annotations

import json
import time

import networkx as nx
import numpy as np
import pandas as pd
import pytest

from advisor import ingest
from advisor.graph.model_graph import ModelGraph
from advisor.ingest.normalize import finalize_ops
from advisor.knowledge_bases.ub_fusion import UbFusionKB
from advisor.model import Meta, Profile
from advisor.testing import load_rules
from advisor.toolkit.graph_patterns import compile_patterns
from tests.scenarios import cases_b as cases
from tests.scenarios.builder import GraphBuilder, desc

KB = "ub-fusion"
OM_JSON = [
    "Ascend__samples/python/level1_single_api/9_amct/amct_onnx/resnet-101/src/nuq_conf/resnet-101_quantized.json",
    "Ascend__samples/python/level1_single_api/9_amct/amct_caffe/resnet50/src/nuq_files/resnet50_om_model.json",
    "Ascend__samples/python/level1_single_api/9_amct/amct_tensorflow/resnet-50_v1/src/nuq_conf/"
    "resnet-50_v1_quantized.json",
    "Ascend__msit/msit/test/UT/resource/msquickcmp/om/model.json",
]
GE_DIR = "Ascend__msprof/hisi/air/test/engines/nneng/st/testcase/graph_optimizer/"
AFTER_UB_MATCH = [GE_DIR + "ge_proto_00026_afterUBMatch.txt", GE_DIR + "ge_proto_00046_afterUBMatch.txt"]
BEFORE_UB_QUANT = GE_DIR + "graph_fusion/pass_fusion_manager/ge_proto_00015_OptimizeQuantGraph_FeGraphFusionAfter.txt"



def run(profile, graph, rules, chip=cases.CHIP):
    findings, statuses = cases.run_kbs([UbFusionKB], profile, graph, rules, chip)
    assert statuses[0].status == "ok", statuses[0].reason
    return findings, statuses[0]


# --- labeled scenarios ------------------------------------------------------------------------------------


@pytest.mark.parametrize("make", cases.SCENARIOS, ids=lambda f: f.__name__)
def test_scenario_corpus_flags_exactly_the_injected_ops(make, rules):
    sc = make()
    findings, _ = run(sc.profile, sc.graph, rules, sc.chip)
    assert cases.flagged(findings, KB) == sc.expected[KB]


def test_already_fused_and_multi_consumer_nodes_are_never_flagged(rules):
    sc = cases.unfused_chains()
    findings, _ = run(sc.profile, sc.graph, rules)
    named = cases.flagged(findings, KB)
    # fused kernel (pass_name_ub, 2 original ops), UB-matched pair (shared fusion_scope), conv with 2 consumers
    assert named.isdisjoint({"conv0relu0", "conv4", "relu4", "conv5", "relu5"})
    by_pattern = {f.evidence["pattern"]: f for f in findings}
    assert set(by_pattern) == {"conv-bn-act", "conv-act-maxpool", "conv-eltwise-act"}
    assert by_pattern["conv-act-maxpool"].fix.data["Switch"]["UBFusion"] == {"TbeConvReluMaxpoolingFusionPass": "on"}
    assert by_pattern["conv-bn-act"].fix.data["Switch"]["GraphFusion"] == {"ConvBatchnormFusionPass": "on"}


def test_saving_is_the_round_trip_capped_by_the_absorbed_ops_time(rules):
    sc = cases.unfused_chains()
    findings, _ = run(sc.profile, sc.graph, rules)
    f = next(f for f in findings if f.evidence["pattern"] == "conv-bn-act")
    ops = sc.profile.ops
    total = ops.groupby(ops["name"].astype(str))["duration_us"].sum()
    # heads keep running: only absorbed ops carry a saving
    assert set(f.saving_by_op) == {"bn1", "relu1"}
    # BN is folded into the conv weights by graph fusion: its whole time goes
    assert f.saving_by_op["bn1"] == pytest.approx(total["bn1"])
    # Relu reads a 1x64x56x56 fp16 tensor written by BN: 2 x 401408 bytes at 204 GB/s + 2 us launch, per call
    per_call = 2 * 401408 / 204e3 + 2.0
    assert f.saving_by_op["relu1"] == pytest.approx(min(total["relu1"], 2 * per_call))
    assert f.estimated_saving_us == pytest.approx(sum(f.saving_by_op.values()))
    assert "GB/s" in f.basis and "launch overhead" in f.basis
    assert f.confidence == rules.for_kb(KB)["graph_confidence"]


def test_fix_is_a_fusion_switch_file_and_the_atc_flag(rules):
    sc = cases.unfused_chains()
    findings, _ = run(sc.profile, sc.graph, rules)
    for f in findings:
        assert f.fix.kind == "fusion-switch"
        cfg = {"Switch": f.fix.data["Switch"]}
        assert set(cfg["Switch"]) == {"GraphFusion", "UBFusion"}
        assert all(v == "on" for part in cfg["Switch"].values() for v in part.values())
        json.loads(json.dumps(cfg))  # the fusion_switch.cfg content is plain JSON
        assert f.fix.data["flags"] == ["--fusion_switch_file=fusion_switch.cfg"]
        assert f.fix.command.startswith("atc ") and f.fix.command.endswith("--fusion_switch_file=fusion_switch.cfg")
        assert f.evidence["subgraph"]["edges"]


def test_fusion_switch_file_in_atc_cmdline_is_reported(rules):
    """The build's switch file is the one cause of every chain it left unfused: one finding, no separate info
    finding repeating it."""
    sc = cases.switch_file_off()
    findings, _ = run(sc.profile, sc.graph, rules)
    [chain] = findings
    assert chain.rule == "ub-fusion.unfused-chain"
    assert chain.title.startswith("Fusion passes off in --fusion_switch_file=/home/user/fusion_switch.cfg: ")
    assert chain.evidence["fusion_switch_file"] == "/home/user/fusion_switch.cfg"
    assert "--fusion_switch_file=/home/user/fusion_switch.cfg" in chain.recommendation
    assert chain.confidence == rules.for_kb(KB)["graph_confidence_switch_file"]
    # the user's command, with our switch file instead of theirs
    assert chain.fix.command.startswith("atc --model=ssd.onnx ")
    assert chain.fix.command.count("--fusion_switch_file") == 1
    assert chain.fix.command.endswith("--fusion_switch_file=fusion_switch.cfg")


def test_switch_file_without_unfused_chains_is_an_info_finding(rules):
    b = GraphBuilder("g")
    b.attrs["atc_cmdline"] = "atc --model=m.onnx --framework=5 --output=m --fusion_switch_file=f.cfg"
    b.node("data", "Data", outputs=[desc("NCHW", "FLOAT16", [1, 3, 8, 8])])
    [switch] = run(cases.empty_profile(), b.build(), rules)[0]
    assert switch.rule == "ub-fusion.switch-file" and switch.evidence["fusion_switch_file"] == "f.cfg"
    assert switch.severity == "info" and switch.estimated_saving_us == 0 and switch.ops == []


def test_buffer_optimize_off_is_reported_without_chains(rules):
    b = GraphBuilder("g")
    b.attrs["atc_cmdline"] = "atc --model=m.onnx --framework=5 --output=m --buffer_optimize=off_optimize"
    b.node("data", "Data", outputs=[desc("NCHW", "FLOAT16", [1, 3, 8, 8])])
    findings, _ = run(cases.empty_profile(), b.build(), rules)
    assert [f.rule for f in findings] == ["ub-fusion.switch-file"]
    assert findings[0].evidence["buffer_optimize"] == "off_optimize"


def test_graph_only_saving_is_estimated_per_inference(rules):
    sc = cases.unfused_chains()
    findings, _ = run(cases.empty_profile(), sc.graph, rules)
    assert cases.flagged(findings, KB) == sc.expected[KB]
    for f in findings:
        assert f.severity == rules.for_kb(KB)["graph_only_severity"]
        assert "per inference" in f.basis
        assert f.estimated_saving_us > 0


def test_profile_sequence_needs_linked_shapes_and_one_stream(rules):
    sc = cases.unfused_sequence_profile()
    findings, status = run(sc.profile, None, rules)
    assert any("needs the model graph" in n for n in status.notes)
    assert {f.rule for f in findings} == {"ub-fusion.unfused-sequence"}
    mm = next(f for f in findings if f.evidence["pattern"] == "matmul-eltwise-act")
    assert mm.evidence["table"]["rows"][0][2] == 3  # three iterations aggregated into one chain
    assert mm.confidence == rules.for_kb(KB)["profile"]["confidence"]
    assert set(mm.saving_by_op) == {"addD", "reluD"}


def test_consecutive_elementwise_run_is_split_into_disjoint_chains(rules):
    shape, rows = "1,4,28,28,16", []
    t = 0.0
    for i, op_type in enumerate(["Add", "Relu", "Mul", "Relu", "Sub", "Relu"]):
        rows.append({"name": f"e{i}", "type": op_type, "core": "AI_VECTOR_CORE", "start_us": t, "duration_us": 10.0,
                     "stream_id": 0, "input_shapes": shape, "input_dtypes": "FLOAT16", "output_shapes": shape,
                     "output_dtypes": "FLOAT16", "model_id": 1})
        t += 11.0
    profile = Profile(ops=finalize_ops(pd.DataFrame(rows)), meta=Meta(layout="op-summary-csv"))
    findings, _ = run(profile, None, rules)
    chains = [r[0] for f in findings for r in f.evidence["table"]["rows"]]
    assert sorted(chains) == ["e0 -> e1", "e2 -> e3", "e4 -> e5"]


def test_pre_fusion_ge_dump_is_skipped_and_shows_the_chains_when_forced(rules, tmp_path):
    graph = cases.sample_graph(BEFORE_UB_QUANT)
    findings, status = run(cases.empty_profile(), graph, rules, "Ascend310")
    assert not [f for f in findings if f.rule == "ub-fusion.unfused-chain"]
    assert any("before UB fusion" in n for n in status.notes)
    forced = load_rules(override={"rules": {KB: {"skip_graphs": {"stage_regex": ""}}}})
    findings, _ = run(cases.empty_profile(), graph, forced, "Ascend310")
    patterns = {f.evidence["pattern"]: f for f in findings}
    # INT8 ResNet-50 before UB fusion: every conv still has its AscendDequant/AscendQuant epilogue
    assert {"conv-dequant-quant", "conv-dequant-eltwise-relu"} <= set(patterns)
    chains = [r[0] for r in patterns["conv-dequant-quant"].evidence["table"]["rows"]]
    assert "res2a_branch2a -> res2a_branch2a_dequant_layer -> res2a_branch2b_quant_layer" in chains
    for f in findings:
        for op in f.ops:
            assert graph.node(op)["type"] in {"Conv2D", "AscendDequant", "AscendQuant", "Eltwise", "Relu",
                                              "LeakyRelu", "Pooling", "FullyConnection", "ReLU", "Add"}


@pytest.mark.parametrize("rel", OM_JSON, ids=lambda p: p.rsplit("/", 1)[-1])
def test_real_om_models_are_already_fused(rel, rules):
    """The OM JSON samples were built with fusion on: e.g. ResNet-101 runs Conv+BN+Relu as one Conv2D."""
    graph = cases.sample_graph(rel)
    findings, _ = run(cases.empty_profile(), graph, rules, graph.soc_version or cases.CHIP)
    assert [f for f in findings if f.rule == "ub-fusion.unfused-chain"] == []
    if "resnet-101" in rel:
        fused = [n for n, d in graph.g.nodes(data=True) if d["type"] == "Conv2D" and len(d["original_ops"]) > 1]
        assert len(fused) >= 90  # the pattern is there, but fused


@pytest.mark.parametrize("rel", AFTER_UB_MATCH, ids=lambda p: p.rsplit("/", 1)[-1])
def test_ge_after_ub_match_dumps_are_quiet(rel, rules):
    """afterUBMatch: Conv2D/LeakyRelu/Eltwise share fusion_scope ids -- matched, not missed."""
    graph = cases.sample_graph(rel)
    findings, _ = run(cases.empty_profile(), graph, rules, "Ascend310")
    assert [f for f in findings if f.rule == "ub-fusion.unfused-chain"] == []
    scopes = [d["attrs"].get("fusion_scope") for _, d in graph.g.nodes(data=True) if d["type"] == "LeakyRelu"]
    assert scopes and all(s is not None for s in scopes)


def test_eager_framework_profile_is_not_searched(rules):
    prof = ingest.load(cases.sample("Ascend__msinsight/test/data/pytorch/text/level2/rank0_ascend_pt"))[0]
    findings, status = run(prof, None, rules, "Ascend910B2")
    assert findings == []
    assert any("eager" in n for n in status.notes)


def test_onnx_graphs_are_left_to_atc(rules):
    sc = cases.unfused_chains()
    g = sc.graph
    onnx_like = ModelGraph(g=g.g, source="model.onnx", format="onnx", name="m", attrs={})
    findings, status = run(cases.empty_profile(), onnx_like, rules)
    assert findings == [] and any("onnx" in n for n in status.notes)


def test_patterns_must_be_rooted_at_slot_zero():
    with pytest.raises(ValueError, match="reachable from slot 0"):
        compile_patterns({"type_groups": {}, "patterns": [{"id": "bad", "nodes": ["Conv2D", "Relu", "Add"],
                                                             "edges": [[0, 1], [2, 1]]}]})


def test_large_graph_and_profile_run_fast(rules):
    """2,000 conv blocks (6,000 nodes) and a 200,000-row profile stay within seconds."""
    g = nx.MultiDiGraph()
    prev = "data"
    g.add_node("data", type="Data", engine="GE_LOCAL", inputs=[], outputs=[], original_ops=[], fusion_passes=[],
               pass_name_ub=None, attrs={})
    fm = desc("NC1HWC0", "FLOAT16", [1, 4, 28, 28, 16])
    for i in range(2000):
        for name, op_type in ((f"c{i}", "Conv2D"), (f"b{i}", "BNInferenceD"), (f"r{i}", "Relu")):
            g.add_node(name, type=op_type, engine="AI_CORE", inputs=[fm], outputs=[fm], original_ops=[],
                       fusion_passes=[], pass_name_ub=None, attrs={})
            g.add_edge(prev, name, src_index=0, dst_index=0, kind="data")
            prev = name
    graph = ModelGraph(g=g, source="big.json", format="om-json")
    started = time.perf_counter()
    findings, _ = run(cases.empty_profile(), graph, rules)
    assert time.perf_counter() - started < 30
    assert len(findings[0].evidence["table"]["rows"]) == 20 and findings[0].evidence["chains"] == 2000

    n = 200_001
    kinds = np.array(["Conv2D", "Relu", "Add"])[np.arange(n) % 3]
    shape = "1,4,28,28,16"
    ops = finalize_ops(pd.DataFrame({
        "name": pd.Series(kinds).str.cat(pd.Series((np.arange(n) % 300).astype(str))), "type": kinds,
        "core": "AI_CORE", "start_us": np.arange(n) * 10.0, "duration_us": 8.0, "stream_id": 0, "model_id": 1,
        "input_shapes": shape, "input_dtypes": "FLOAT16", "output_shapes": shape, "output_dtypes": "FLOAT16"}))
    profile = Profile(ops=ops, meta=Meta(layout="op-summary-csv"))
    started = time.perf_counter()
    findings, _ = run(profile, None, rules)
    assert time.perf_counter() - started < 30
    assert {f.evidence["pattern"] for f in findings} == {"conv-act"}


def test_swish_epilogue_is_matched_as_a_dag(rules):
    """Conv -> Sigmoid -> Mul with the conv output also feeding the Mul (x * sigmoid(x))."""
    fm = desc("NC1HWC0", "FLOAT16", [1, 2, 40, 40, 16])

    def build(mul_inputs: list[str]) -> ModelGraph:
        b = GraphBuilder("swish")
        b.node("data", "Data", outputs=[fm], engine="GE_LOCAL")
        b.node("conv", "Conv2D", after="data", outputs=[fm])
        b.node("other", "Relu", after="data", outputs=[fm])
        b.node("sig", "Sigmoid", after="conv", outputs=[fm])
        b.node("mul", "Mul", after=mul_inputs, outputs=[fm])
        return b.build()

    findings, _ = run(cases.empty_profile(), build(["conv", "sig"]), rules)
    [f] = findings
    assert f.evidence["pattern"] == "conv-swish" and set(f.ops) == {"conv", "sig", "mul"}
    assert sorted(map(tuple, f.evidence["subgraph"]["edges"])) == [("conv", "mul"), ("conv", "sig"), ("sig", "mul")]
    # the Mul takes another tensor: not a swish, and the conv output (now read by Sigmoid only) is a conv-act
    findings, _ = run(cases.empty_profile(), build(["other", "sig"]), rules)
    assert [f.evidence["pattern"] for f in findings] == ["conv-act"]


def test_broadcast_elementwise_pairs_are_not_chained(rules):
    b = GraphBuilder("broadcast")
    big, small = desc("ND", "FLOAT16", [64, 1024]), desc("ND", "FLOAT16", [1, 1024])
    b.node("x", "Data", outputs=[small], engine="GE_LOCAL")
    b.node("add", "Add", after="x", outputs=[small])
    b.node("relu", "Relu", after="add", outputs=[big])  # output shape differs: not a same-shape chain
    assert run(cases.empty_profile(), b.build(), rules)[0] == []


# ---------------------------------------------------------------------------------------------------------
# one cause per switch file; the fix fitted to the run
# ---------------------------------------------------------------------------------------------------------
def test_every_chain_a_switch_file_left_unfused_is_one_finding(rules):
    """Three patterns unfused in a build with a switch file: one cause (the file), one fix enabling every pass,
    the savings of the chains added once per op."""
    sc = cases.unfused_chains()
    per_pattern, _ = run(sc.profile, sc.graph, rules)
    assert len(per_pattern) == 3  # no switch file: each pattern is its own cause
    sc.graph.attrs["atc_cmdline"] = "atc --model=m.onnx --framework=5 --output=m --fusion_switch_file=off.cfg"
    [merged] = run(sc.profile, sc.graph, rules)[0]
    assert set(merged.ops) == sc.expected["ub-fusion"]
    assert merged.estimated_saving_us == pytest.approx(sum(f.estimated_saving_us for f in per_pattern))
    assert merged.saving_by_op == pytest.approx({k: v for f in per_pattern for k, v in f.saving_by_op.items()})
    passes = {p for f in per_pattern for part in f.fix.data["Switch"].values() for p in part}
    assert {p for part in merged.fix.data["Switch"].values() for p in part} == passes
    assert merged.evidence["patterns"] == {f.evidence["pattern"]: f.evidence["chains"] for f in per_pattern}


@pytest.mark.parametrize(("context", "how"), [("om-acl", "atc"), ("torch-graph", "torchair"),
                                              ("unknown", "atc"), ("torch-eager", None),
                                              ("mindspore-pynative", None)])
def test_fusion_fix_fits_the_run(rules, context, how):
    sc = cases.unfused_sequence_profile()
    sc.profile.meta.context = context
    findings, status = run(sc.profile, None, rules)
    if how is None:
        assert findings == [] and any(f"a {context} run launches ops one by one" in n for n in status.notes)
        return
    f = findings[0]
    if how == "atc":
        assert f.fix.command.startswith("atc ") and "torchair" not in f.fix.summary
    else:
        assert f.fix.command is None and "config.fusion_config.fusion_switch_file" in f.fix.data["snippet"]
        assert "atc " not in f.recommendation


def test_rules_are_causes():
    assert {r.id: r.role for r in UbFusionKB.rules} == {"ub-fusion.unfused-chain": "cause",
                                                       "ub-fusion.unfused-sequence": "cause",
                                                       "ub-fusion.switch-file": "cause"}
