"""Dispatch by content/extension, bad input as one-line InputErrors, finding a dump in a profile, dtype tables."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from advisor.common.errors import InputError
from advisor.graph import dtypes
from advisor.graph.load import find_graph_in_profile, load_graph
from advisor.graph.proto import ge_ir_pb2

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
GE_DIR = SAMPLES / "hicann__oam-tools/test/st/msaicerr/res/ori_data/asys_output_20230713074104794/dfx/graph/370_0"
OM_JSON = SAMPLES / "Ascend__msit/msit/test/UT/resource/msquickcmp/om/model.json"
needs_samples = pytest.mark.skipif(not GE_DIR.is_dir() or not OM_JSON.is_file(), reason="../shared/samples not present")
DATA = Path(__file__).resolve().parent / "data" / "graph"


def _error(path: Path) -> InputError:
    with pytest.raises(InputError) as info:
        load_graph(path)
    err = info.value
    assert err.path == str(path)
    assert "\n" not in str(err)
    return err


def test_truncated_json(tmp_path: Path) -> None:
    text = (DATA / "quirks.om.json").read_text(encoding="utf-8")
    bad = tmp_path / "model.json"
    bad.write_text(text[: len(text) // 2], encoding="utf-8")
    assert "invalid JSON" in _error(bad).problem


def test_text_dump_with_syntax_error(tmp_path: Path) -> None:
    bad = tmp_path / "ge_proto_00000001_Build.txt"
    bad.write_text('graph {\n  name: "g"\n  op {\n    name "a"\n  }\n}\n', encoding="utf-8")
    err = _error(bad)
    assert "4:" in err.problem and "ModelDef" in err.problem
    bad_onnx = tmp_path / "ge_onnx_00000001_graph_1_Build.pbtxt"
    bad_onnx.write_text('ir_version: 6\ngraph {\n  node {\n    op_type: "ge:Data"\n    bogus {\n', encoding="utf-8")
    assert "onnx" in _error(bad_onnx).problem


@pytest.mark.parametrize(("name", "content", "expected"), [
    ("op_summary.txt", "Op Name,OP Type,Task Duration(us)\nConv,Conv2D,1.0\n", "not a GE graph dump"),
    ("trace_view.json", '{"traceEvents": [{"ph": "X", "name": "a"}]}', "not a model graph"),
    ("list.json", "[1, 2, 3]", "not a model graph"),
    ("empty.txt", "", "not a GE graph dump"),
    ("model.yaml", "graph: {}", "unknown graph file type"),
    ("model.om", "IMOD", "atc --mode=1"),
    ("weights.onnx", "definitely not protobuf \x00\x01\x02", "not a valid ONNX model"),
])
def test_non_graph_files(tmp_path: Path, name: str, content: str, expected: str) -> None:
    path = tmp_path / name
    path.write_text(content, encoding="utf-8")
    assert expected in _error(path).problem


def test_binary_text_and_missing_path(tmp_path: Path) -> None:
    binary = tmp_path / "dump.txt"
    binary.write_bytes(b"\xff\xfe\x00\x01graph")
    assert "binary" in _error(binary).problem
    assert "no such file" in _error(tmp_path / "nope.json").problem


def test_malformed_om_json_values(tmp_path: Path) -> None:
    path = tmp_path / "m.json"
    path.write_text('{"graph": [{"name": "g", "op": [{"name": "a", "type": "Data", "id": "not-a-number"}]}]}')
    assert "malformed OM JSON" in _error(path).problem


@needs_samples
def test_text_kind_is_told_by_content(tmp_path: Path) -> None:
    """A GE onnx dump renamed .txt still reads as one (and a GE proto dump renamed .pbtxt)."""
    a = tmp_path / "renamed.txt"
    shutil.copy(GE_DIR / "ge_onnx_00000000_graph_1_Build.pbtxt", a)
    b = tmp_path / "renamed.pbtxt"
    shutil.copy(GE_DIR / "ge_proto_00000000_Build.txt", b)
    assert load_graph(a).format == "ge-onnx-pbtxt"
    assert load_graph(b).format == "ge-proto-txt"
    assert set(load_graph(a).g.nodes) == set(load_graph(b).g.nodes)


@needs_samples
def test_find_graph_in_profile(tmp_path: Path) -> None:
    prof = tmp_path / "PROF_000001_20230713074104794_ABC"
    out = prof / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    (out / "msprof_20230713074200.json").write_text('[{"ph": "X"}]')
    (out / "op_summary_20230713074200.csv").write_text("Op Name\n")
    assert find_graph_in_profile(prof) is None
    with pytest.raises(InputError):
        load_graph(prof)

    dump = prof / "dfx" / "graph"
    dump.mkdir(parents=True)
    for f in ("ge_onnx_00000001_graph_11_Build.pbtxt", "ge_proto_00000000_Build.txt", "ge_proto_00000001_Build.txt"):
        shutil.copy(GE_DIR / f, dump / f)
    (dump / "ge_proto_00000002_PreRunAfterOptimize.txt").write_text("graph {\n}\n")  # not a Build graph
    raw = prof / "device_0" / "data"
    raw.mkdir(parents=True)
    (raw / "ge_proto_00000009_Build.txt").write_text("raw data folders are not searched")
    assert find_graph_in_profile(prof) == dump / "ge_proto_00000001_Build.txt"  # the last Build
    assert load_graph(prof).g.number_of_nodes() == 18

    (dump / "ge_proto_00000000_Build.txt").unlink()
    (dump / "ge_proto_00000001_Build.txt").unlink()
    assert find_graph_in_profile(prof) == dump / "ge_onnx_00000001_graph_11_Build.pbtxt"

    model = prof / "model" / "net.json"  # an atc --mode=1 JSON under any name is preferred
    model.parent.mkdir()
    shutil.copy(OM_JSON, model)
    assert find_graph_in_profile(prof) == model


def test_dtype_tables() -> None:
    # the proto table is the enum of the generated ge_ir_pb2 (from the newest ge_ir.proto)
    for value in ge_ir_pb2.DataType.values():
        enum_name = ge_ir_pb2.DataType.Name(value)
        assert "DT_" + dtypes.PROTO_DTYPES[value] == enum_name
    assert dtypes.proto_dtype_name("DT_FLOAT16") == "FLOAT16"
    assert dtypes.proto_dtype_name(2) == "FLOAT16"
    assert dtypes.proto_dtype_name("8") == "INT64"
    assert dtypes.proto_dtype_name(27) == dtypes.proto_dtype_name("DT_BF16") == "BF16"
    assert dtypes.proto_dtype_name(0) is None and dtypes.proto_dtype_name("DT_UNDEFINED") is None
    # the C++ ge::DataType numbering of dt values and Cast dst_type
    assert [dtypes.cpp_dtype_name(i) for i in (0, 1, 2, 3, 4, 6, 7, 8, 9, 10, 11, 12, 27)] == [
        "FLOAT", "FLOAT16", "INT8", "INT32", "UINT8", "INT16", "UINT16", "UINT32", "INT64", "UINT64", "DOUBLE",
        "BOOL", "BF16"]
    assert 5 not in dtypes.CPP_DTYPES and dtypes.cpp_dtype_name(5) == "UNKNOWN_5"
    assert dtypes.onnx_dtype_name(10) == "FLOAT16" and dtypes.onnx_dtype_name(16) == "BF16"
