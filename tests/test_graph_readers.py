"""Graph readers against every real graph file in ../shared/samples, with counts made independently here."""

from __future__ import annotations

import csv
import json
import re
from collections import Counter
from functools import cache
from pathlib import Path

import pytest

from advisor.graph.load import load_graph
from advisor.graph.model_graph import ModelGraph

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
DATA = Path(__file__).resolve().parent / "data" / "graph"
GRAPH_KINDS = ("om.json", "ge_proto.txt", "ge_onnx.pbtxt", "onnx.json")


def _manifest() -> list[tuple[str, Path]]:
    manifest = SAMPLES / "MANIFEST.tsv"
    if not manifest.is_file():
        return []
    with manifest.open(encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh, delimiter="\t"))
    return [(r["kind"], SAMPLES / r["repo"].replace("/", "__") / r["path"]) for r in rows if r["kind"] in GRAPH_KINDS]


SAMPLE_GRAPHS = _manifest()
needs_samples = pytest.mark.skipif(not SAMPLE_GRAPHS, reason="../shared/samples not present")


@cache
def loaded(path: Path) -> ModelGraph:
    """Each sample is read once per session (the big text dumps take a second each); tests only read it."""
    return load_graph(path)


def sample(name: str) -> Path:
    hits = [p for _, p in SAMPLE_GRAPHS if p.name == name]
    if not hits:
        pytest.skip(f"sample {name} not present")
    return hits[0]


# --- independent counts -------------------------------------------------------------------------------------

def _src(ref: str) -> tuple[str, int]:
    src, _, idx = ref.rpartition(":")
    return src, int(idx)


def count_om_json(path: Path) -> tuple[int, int, int, int]:
    """(ops, edges, control edges, TransData) straight from the JSON document."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    ops = [op for g in doc["graph"] for op in (g.get("op") or []) if op]
    names = {op["name"] for op in ops}
    refs = [r for op in ops for r in (op.get("input") or []) if r and _src(r)[0] in names]
    control = sum(1 for r in refs if _src(r)[1] == -1)
    return len(ops), len(refs), control, sum(op["type"] == "TransData" for op in ops)


def count_ge_proto(path: Path) -> tuple[int, int, int, int]:
    """Same counts by regex over the text: OpDef fields sit at 4 spaces inside ``  op {`` blocks."""
    text = path.read_text(encoding="utf-8")
    ops = re.findall(r"^  op \{$", text, re.M)
    names = set(re.findall(r'^    name: "(.*)"$', text, re.M))
    refs = [r for r in re.findall(r'^    input: "(.*)"$', text, re.M) if r and _src(r)[0] in names]
    control = sum(1 for r in refs if _src(r)[1] == -1)
    transdata = len(re.findall(r'^    type: "TransData"$', text, re.M))
    return len(ops), len(refs), control, transdata


def count_ge_onnx(path: Path) -> tuple[int, int, int, int]:
    """GE onnx text: a node's ``name`` line is followed by its ``op_type`` line; subgraph holders are not ops."""
    text = path.read_text(encoding="utf-8")
    nodes = re.findall(r'^\s*name: "(.*)"\n\s*op_type: "(.*)"$', text, re.M)
    ops = [(n, t) for n, t in nodes if t != "subgraph"]
    names = {n for n, _ in ops}
    refs = [r for r in re.findall(r'^\s*input: "(.*)"$', text, re.M) if r and _src(r)[0] in names]
    control = sum(1 for r in refs if _src(r)[1] == -1)
    return len(ops), len(refs), control, sum(t == "ge:TransData" for _, t in ops)


def count_onnx_json(path: Path) -> tuple[int, int, int, int]:
    """ONNX JSON: the nodes, plus one Data node per model input and one Const node per initializer a node reads;
    an edge per node input that one of them produces."""
    doc = json.loads(path.read_text(encoding="utf-8"))
    graph = doc.get("graph", doc)
    inits = {t["name"] for t in graph.get("initializer", [])}
    inputs = {v["name"] for v in graph.get("input", [])} - inits
    read = {i for n in graph["node"] for i in n.get("input", [])}
    produced = {o for n in graph["node"] for o in n.get("output", [])} | inputs | (inits & read)
    refs = [i for n in graph["node"] for i in n.get("input", []) if i in produced]
    nodes = len(graph["node"]) + len(inputs) + len(inits & read)
    return nodes, len(refs), 0, sum(n["op_type"] == "TransData" for n in graph["node"])


COUNTERS = {"om.json": count_om_json, "ge_proto.txt": count_ge_proto, "ge_onnx.pbtxt": count_ge_onnx,
            "onnx.json": count_onnx_json}


def control_edges(mg: ModelGraph) -> int:
    return sum(1 for *_, d in mg.g.edges(data=True) if d["kind"] == "control")


@needs_samples
@pytest.mark.parametrize(("kind", "path"), SAMPLE_GRAPHS, ids=[p.name for _, p in SAMPLE_GRAPHS])
def test_counts_match_independent_count(kind: str, path: Path) -> None:
    mg = loaded(path)
    nodes, edges, control, transdata = COUNTERS[kind](path)
    assert nodes > 0
    assert mg.g.number_of_nodes() == nodes
    assert mg.g.number_of_edges() == edges
    assert control_edges(mg) == control
    assert sum(1 for _ in mg.nodes_of_type("TransData")) == transdata
    assert mg.g.graph["unresolved_inputs"] == 0


@needs_samples
@pytest.mark.parametrize(("kind", "path"), SAMPLE_GRAPHS, ids=[p.name for _, p in SAMPLE_GRAPHS])
def test_every_node_follows_the_contract(kind: str, path: Path) -> None:
    mg = loaded(path)
    engines = {"AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "GE_LOCAL", "RTS", "HCCL", "HOST_CPU", "DVPP", "UNKNOWN"}
    for name, d in mg.g.nodes(data=True):
        assert d["engine"] in engines, name
        assert d["subgraph"] in mg.subgraphs and name in mg.subgraphs[d["subgraph"]]
        for desc in d["inputs"] + d["outputs"]:
            assert set(desc) == {"format", "origin_format", "dtype", "shape", "origin_shape"}
            assert desc["dtype"] is None or not desc["dtype"].startswith("DT_")
        assert isinstance(d["original_ops"], list) and isinstance(d["fusion_passes"], list)
    for u, v, d in mg.g.edges(data=True):
        assert d["kind"] in ("data", "control")
        if d["kind"] == "data":  # the producer really has that output / the consumer that input slot
            outs, ins = mg.node(u)["outputs"], mg.node(v)["inputs"]
            assert not outs or d["src_index"] < len(outs), (u, v, d)
            assert not ins or d["dst_index"] < len(ins), (u, v, d)


@needs_samples
def test_ge_proto_and_ge_onnx_dumps_of_one_build_give_the_same_graph() -> None:
    """The 2023 asys dump wrote the same built graph in both text formats."""
    a = loaded(sample("ge_proto_00000001_Build.txt"))
    b = loaded(sample("ge_onnx_00000001_graph_11_Build.pbtxt"))
    assert set(a.g.nodes) == set(b.g.nodes)

    def edges(mg: ModelGraph) -> Counter[tuple[str, str, int, int, str]]:
        return Counter((u, v, d["src_index"], d["dst_index"], d["kind"]) for u, v, d in mg.g.edges(data=True))

    assert edges(a) == edges(b)
    assert a.subgraphs == b.subgraphs
    assert a.subgraph_parents == b.subgraph_parents
    for n in a.g.nodes:
        assert a.node(n)["type"] == b.node(n)["type"]
        assert [d["dtype"] for d in a.node(n)["outputs"]] == [d["dtype"] for d in b.node(n)["outputs"]]


@needs_samples
def test_subgraphs_kept_and_linked_to_the_op_that_runs_them() -> None:
    path = sample("ge_proto_00000001_Build.txt")
    text = path.read_text(encoding="utf-8")
    graph_names = re.findall(r'^  name: "(.*)"$', text, re.M)
    links: dict[str, str] = {}  # each "subgraph_name" line belongs to the op whose "name" line precedes it
    op_name = None
    for line in text.splitlines():
        if m := re.match(r'^    name: "(.*)"$', line):
            op_name = m.group(1)
        elif (m := re.match(r'^    subgraph_name: "(.*)"$', line)) and op_name:
            links[op_name] = m.group(1)
    mg = loaded(path)
    assert list(mg.subgraphs) == graph_names and mg.root_graph == graph_names[0]
    assert len(links) == 4
    assert mg.subgraph_parents == {sub: op for op, sub in links.items()}
    for op, sub in links.items():
        assert mg.node(op)["called_subgraphs"] == [sub]
    unique = mg.node("Unique")
    assert unique["subgraph"] == "ge_default_20230713074125_sub_2_unknow"


@needs_samples
def test_ai_cpu_engine_from_kernel_lib_and_from_type() -> None:
    # aicpu_tf_kernel in the GE proto dump
    text_graph = loaded(sample("ge_proto_00000001_Build.txt"))
    assert text_graph.node("Unique")["attrs"]["_ge_attr_op_kernel_lib_name"] == "aicpu_tf_kernel"
    assert text_graph.node("Unique")["engine"] == "AI_CPU"
    assert text_graph.node("GatherV2")["engine"] == "AI_CORE"
    # the onnx dump of the same build drops string attributes: the type alone says AI CPU
    onnx_graph = loaded(sample("ge_onnx_00000001_graph_11_Build.pbtxt"))
    assert "_ge_attr_op_kernel_lib_name" not in onnx_graph.node("Unique")["attrs"]
    assert onnx_graph.node("Unique")["engine"] == "AI_CPU"
    # aicpu_ascend_kernel in the OM JSON
    om = loaded(sample("model.json"))
    assert om.node("Cast_1206")["engine"] == "AI_CPU"
    assert om.node("trans_Cast_0")["engine"] == "AI_CORE"
    assert Counter(d["engine"] for _, d in om.g.nodes(data=True))["AI_CPU"] == 1


@needs_samples
def test_cast_dst_type_uses_the_cpp_numbering() -> None:
    om = loaded(sample("model.json"))
    # dst_type 9: INT64 in ge::DataType (it would be UINT32 in the proto enum)
    assert om.node("Cast_1206")["attrs"]["dst_type"] == "INT64"
    assert om.node("Cast_1206")["outputs"][0]["dtype"] == "INT64"
    # dst_type 1: FLOAT16 (FLOAT in the proto enum); SrcT 0: FLOAT
    assert om.node("trans_Cast_0")["attrs"]["dst_type"] == "FLOAT16"
    assert om.node("trans_Cast_0")["attrs"]["SrcT"] == "FLOAT"


@needs_samples
@pytest.mark.parametrize("name", ["ge_proto_00026_afterUBMatch.txt", "resnet50_om_model.json",
                                  "resnet-101_quantized.json", "model.json"])
def test_cast_attrs_agree_with_descriptor_dtypes(name: str) -> None:
    """Descriptors use the proto enum, dst_type/SrcT the C++ one: decoded right, they name the same types."""
    mg = loaded(sample(name))
    casts = [mg.node(n) for n in mg.nodes_of_type("Cast")]
    checked = 0
    for c in casts:
        if "dst_type" in c["attrs"] and c["outputs"] and c["outputs"][0]["dtype"]:
            assert c["attrs"]["dst_type"] == c["outputs"][0]["dtype"]
            checked += 1
        if "SrcT" in c["attrs"] and c["inputs"] and c["inputs"][0]["dtype"]:
            assert c["attrs"]["SrcT"] == c["inputs"][0]["dtype"]
    assert checked > 0


@needs_samples
def test_om_json_fused_node_descriptors_and_passes() -> None:
    mg = loaded(sample("resnet-101_quantized.json"))
    assert mg.format == "om-json" and mg.soc_version == "Ascend310"
    conv = mg.node("Conv_0Relu_2")
    assert conv["type"] == "Conv2D" and conv["engine"] == "AI_CORE"
    assert conv["original_ops"] == ["BatchNormalization_1", "Conv_0", "Relu_2"]
    assert conv["fusion_passes"] == ["TbeCommonRules0FusionPass"]
    x, w = conv["inputs"][0], conv["inputs"][1]
    assert (x["format"], x["origin_format"], x["shape"], x["origin_shape"]) == (
        "NC1HWC0", "NCHW", [1, 1, 224, 224, 16], [1, 3, 224, 224])
    assert (w["format"], w["dtype"], w["origin_shape"]) == ("FRACTAL_Z", "FLOAT16", [64, 3, 7, 7])
    assert "_datadump_original_op_names" not in conv["attrs"] and "pass_name" not in conv["attrs"]


@needs_samples
def test_text_dump_values_decoded() -> None:
    mg = loaded(sample("ge_proto_00000001_Build.txt"))
    assert mg.format == "ge-proto-txt"
    gather = mg.node("GatherV2")
    assert gather["attrs"]["Tparams"] == "FLOAT" and gather["attrs"]["Tindices"] == "INT32"  # dt values, C++
    assert [d["dtype"] for d in gather["inputs"]] == ["FLOAT", "INT32", "INT32"]
    const = mg.node("GatherV2/axis")
    assert const["attrs"]["dtype"] == "INT32"
    assert const["outputs"][0]["dtype"] == "INT32"


# --- quirks of the OM JSON writer, in a small hand-made file -------------------------------------------------

def test_om_json_writer_quirks() -> None:
    mg = load_graph(DATA / "quirks.om.json")
    assert mg.name == "quirks" and mg.root_graph == "quirks_root"
    assert mg.attrs == {"soc_version": "Ascend310P3", "stream_num": 2}  # map written as an object, int as string
    assert mg.g.number_of_nodes() == 11  # a null op entry is skipped
    assert mg.g.graph["unresolved_inputs"] == 1  # NetOutput input from an op that is not in the file
    x = mg.node("x")["outputs"][0]
    assert x == {"format": "NCHW", "origin_format": "NCHW", "dtype": "FLOAT", "shape": [1, 3, 16, 16],
                 "origin_shape": None}
    conv = mg.node("Conv_1Mul_2Relu_3")
    assert conv["attrs"] == {"_ge_attr_op_kernel_lib_name": "AIcoreEngine", "alpha": 0.1, "groups": 1,
                             "strides": [1, 1, 1, 1], "T": "FLOAT16", "types": ["FLOAT", "INT64"],
                             "pads": [[1, 1], [0, 0]]}
    assert conv["fusion_passes"] == ["ConvScaleFusionPass", "ConvReluFusionPass"]
    assert conv["pass_name_ub"] == "TbeConvElemwiseFusionPass"
    assert conv["inputs"][2] == {"format": None, "origin_format": None, "dtype": None, "shape": None,
                                 "origin_shape": None}  # a null desc
    ins = sorted((u, d["dst_index"], d["kind"]) for u, _, d in mg.g.in_edges("Conv_1Mul_2Relu_3", data=True))
    # the empty "" input keeps slot 2; the control input has no slot
    assert ins == [("cond", -1, "control"), ("trans_TransData_0", 0, "data"), ("w", 1, "data")]
    assert mg.node("trans_TransData_0")["id"] == 1 and mg.node("trans_TransData_0")["stream_id"] == 1
    assert mg.node("trans_TransData_0")["attrs"]["empty"] is None
    cast = mg.node("cast_int64")
    assert (cast["engine"], cast["attrs"]["dst_type"], cast["original_ops"]) == ("AI_CPU", "INT64", ["Cast_9"])
    assert mg.node("w")["attrs"]["value"]["desc"]["format"] == "FRACTAL_Z"
    # subgraphs linked through the If's then/else func attributes; a repeated name is qualified
    assert mg.node("cond")["called_subgraphs"] == ["quirks_then", "quirks_else"]
    assert mg.subgraph_parents == {"quirks_then": "cond", "quirks_else": "cond"}
    assert mg.subgraphs["quirks_else"] == ["quirks_else/x", "else_out"]
    assert list(mg.g.predecessors("else_out")) == ["quirks_else/x"]
    assert mg.graph_attrs["quirks_root"] == {"_is_graph_inferred": True}


def test_onnx_model_built_with_helper(tmp_path: Path) -> None:
    from onnx import TensorProto, helper

    then_g = helper.make_graph([helper.make_node("Identity", ["y"], ["t_out"], name="then_id")], "then",
                               [], [helper.make_tensor_value_info("t_out", TensorProto.FLOAT16, [1, 8])])
    else_g = helper.make_graph([helper.make_node("Neg", ["y"], ["e_out"], name="else_neg")], "else",
                               [], [helper.make_tensor_value_info("e_out", TensorProto.FLOAT16, [1, 8])])
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["mm"], name="MatMul_0"),
        helper.make_node("Cast", ["mm"], ["y"], name="Cast_1", to=TensorProto.FLOAT16),
        helper.make_node("ReduceSum", ["y"], ["s"], name="", keepdims=0),
        helper.make_node("Greater", ["s", "zero"], ["c"], name="Greater_3"),
        helper.make_node("If", ["c"], ["z"], name="If_4", then_branch=then_g, else_branch=else_g),
    ]
    graph = helper.make_graph(
        nodes, "tiny",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("z", TensorProto.FLOAT16, [1, 8])],
        initializer=[helper.make_tensor("w", TensorProto.FLOAT, [4, 8], [0.0] * 32),
                     helper.make_tensor("zero", TensorProto.FLOAT16, [], [0.0])],
        value_info=[helper.make_tensor_value_info("mm", TensorProto.FLOAT, [1, 8])],
    )
    path = tmp_path / "tiny.onnx"
    path.write_bytes(helper.make_model(graph, producer_name="test").SerializeToString())

    mg = load_graph(path)
    assert mg.format == "onnx" and mg.attrs["producer_name"] == "test"
    assert mg.g.number_of_nodes() == 10  # 5 + one node in each branch + input x, initializers w and zero
    assert set(mg.g.nodes) == {"MatMul_0", "Cast_1", "ReduceSum_2", "Greater_3", "If_4", "then_id", "else_neg",
                               "x", "w", "zero"}
    # the model input is a Data node, the initializers Const nodes (small ones with their values)
    assert mg.node("x")["type"] == "Data" and mg.node("x")["outputs"][0]["shape"] == [1, 4]
    assert mg.node("w")["type"] == "Const" and mg.node("w")["attrs"]["value"] == [0.0] * 32
    assert mg.node("zero")["engine"] == "GE_LOCAL"
    data = sorted((u, v, d["src_index"], d["dst_index"]) for u, v, d in mg.g.edges(data=True))
    assert data == [("Cast_1", "ReduceSum_2", 0, 0), ("Greater_3", "If_4", 0, 0), ("MatMul_0", "Cast_1", 0, 0),
                    ("ReduceSum_2", "Greater_3", 0, 0), ("w", "MatMul_0", 0, 1), ("x", "MatMul_0", 0, 0),
                    ("zero", "Greater_3", 0, 1)]
    cast = mg.node("Cast_1")
    assert cast["attrs"]["to"] == "FLOAT16" and cast["engine"] == "UNKNOWN"
    assert cast["inputs"][0]["dtype"] == "FLOAT" and cast["inputs"][0]["shape"] == [1, 8]
    assert mg.node("MatMul_0")["inputs"][1] == {"format": None, "origin_format": None, "dtype": "FLOAT",
                                                "shape": [4, 8], "origin_shape": None}
    assert mg.node("ReduceSum_2")["attrs"]["keepdims"] == 0
    assert sorted(mg.node("If_4")["called_subgraphs"]) == ["If_4/else_branch", "If_4/then_branch"]
    assert mg.subgraph_parents == {"If_4/then_branch": "If_4", "If_4/else_branch": "If_4"}
    assert mg.node("then_id")["subgraph"] == "If_4/then_branch"


@needs_samples
@pytest.mark.parametrize("name", ["ge_proto_00017_OptimizeOriginalGraph_FeGraphFusionAfter.txt",
                                  "ge_onnx_00000001_graph_11_Build.pbtxt"])
def test_protoc_and_python_text_parsers_agree(name: str) -> None:
    """Big dumps go through protoc's C++ text parser; it must give exactly what protobuf's Python parser gives."""
    import grpc_tools  # noqa: F401 - in the test extra (protoc)

    from advisor.graph.ge_onnx import read_ge_onnx
    from advisor.graph.ge_text import read_ge_text

    reader = read_ge_onnx if name.startswith("ge_onnx") else read_ge_text
    fast, slow = reader(sample(name), fast=True), reader(sample(name), fast=False)
    assert dict(fast.g.nodes(data=True)) == dict(slow.g.nodes(data=True))
    assert sorted(fast.g.edges(data="kind")) == sorted(slow.g.edges(data="kind"))
    assert (fast.attrs, fast.subgraphs, fast.graph_attrs) == (slow.attrs, slow.subgraphs, slow.graph_attrs)


def test_protoc_path_reports_syntax_errors_like_python(tmp_path: Path) -> None:
    import grpc_tools  # noqa: F401 - in the test extra (protoc)

    from advisor.common.errors import InputError
    from advisor.graph.ge_text import read_ge_text

    bad = tmp_path / "ge_proto_00000003_Build.txt"
    bad.write_text('graph {\n  name: "g"\n  op {\n    name: "a"\n    type: Data\n  }\n}\n', encoding="utf-8")
    with pytest.raises(InputError, match=r"5:\d+"):
        read_ge_text(bad, fast=True)
