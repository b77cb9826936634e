"""Issue 30, class 2: no output path is an input. ``-o`` onto a file an input pulls in (an ONNX model's external
data, the graph attached from inside a profile), or onto a link to one, is refused in one line (exit 2) and the file
is unchanged; a default output location never lies inside an input folder (only an explicit ``-o`` writes there).
"""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from advisor.cli import main
from advisor.common.errors import OutputError
from advisor.common.output import check_outside_inputs
from advisor.examples import example_graph, example_profile


def _digest(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _refused(result, name: str) -> None:
    assert result.exit_code == 2, result.output
    assert result.stderr.count("\n") == 1 and name in result.stderr and "Traceback" not in result.stderr
    assert "inputs are never overwritten" in result.stderr


# ---------------------------------------------------------------------------------------------------------
# advisor fix: the external-data file of the model
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture()
def external_model(tmp_path: Path) -> Path:
    """A model whose weight lives in ``m.weights`` beside it, with a Transpose pair remove-roundtrips removes."""
    weight = numpy_helper.from_array(np.arange(64 * 64, dtype=np.float32).reshape(64, 64), "W")
    nodes = [helper.make_node("Transpose", ["x"], ["t1"], perm=[1, 0]),
             helper.make_node("Transpose", ["t1"], ["t2"], perm=[1, 0]),
             helper.make_node("MatMul", ["t2", "W"], ["y"])]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 64])], [weight])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path / "m.onnx"
    onnx.save_model(model, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location="m.weights", size_threshold=0)
    assert (tmp_path / "m.weights").stat().st_size == 64 * 64 * 4
    return path


@pytest.mark.parametrize("how", ["same", "symlink", "hardlink"])
def test_fix_output_onto_the_external_data_file_is_refused(external_model: Path, how: str) -> None:
    weights = external_model.with_name("m.weights")
    before = _digest(weights)
    target = {"same": weights, "symlink": weights.with_name("link.bin"), "hardlink": weights.with_name("hard.bin")}[how]
    if how == "symlink":
        target.symlink_to("m.weights")
    elif how == "hardlink":
        os.link(weights, target)
    result = CliRunner().invoke(main, ["fix", str(external_model), "--apply", "all", "-o", str(target)])
    _refused(result, str(target))
    assert _digest(weights) == before and not list(weights.parent.glob(".*.tmp"))


def test_fix_elsewhere_writes_the_model_with_its_weights(external_model: Path) -> None:
    out = external_model.with_name("fixed.onnx")
    result = CliRunner().invoke(main, ["fix", str(external_model), "--apply", "all", "-o", str(out)])
    assert result.exit_code == 0, result.output
    fixed = onnx.load(str(out))
    assert [n.op_type for n in fixed.graph.node] == ["MatMul"]
    (w,) = fixed.graph.initializer
    assert np.array_equal(numpy_helper.to_array(w), np.arange(64 * 64, dtype=np.float32).reshape(64, 64))


def test_fix_with_missing_external_data_is_one_line(external_model: Path) -> None:
    external_model.with_name("m.weights").unlink()
    result = CliRunner().invoke(main, ["fix", str(external_model), "--apply", "all", "-o",
                                       str(external_model.with_name("o.onnx"))])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "external data" in result.stderr


# ---------------------------------------------------------------------------------------------------------
# advisor analyze: the graph attached from inside the profile; default locations inside the profile
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def profile_with_graph(tmp_path_factory: pytest.TempPathFactory) -> Path:
    prof = tmp_path_factory.mktemp("attached") / "PROF"
    shutil.copytree(example_profile(), prof)
    shutil.copy(example_graph(), prof / "model.om.json")
    return prof


@pytest.mark.parametrize("how", ["same", "symlink"])
def test_analyze_output_onto_the_attached_graph_is_refused(profile_with_graph: Path, tmp_path: Path,
                                                           how: str) -> None:
    graph = profile_with_graph / "model.om.json"
    before = _digest(graph)
    target = graph if how == "same" else tmp_path / "graph-link.json"
    if how == "symlink":
        target.symlink_to(graph)
    result = CliRunner().invoke(main, ["analyze", str(profile_with_graph), "--format", "json", "-q",
                                       "-o", str(target)])
    _refused(result, str(target))
    assert _digest(graph) == before


def test_default_output_inside_the_profile_is_refused(profile_with_graph: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(profile_with_graph)
    result = CliRunner().invoke(main, ["analyze", ".", "--format", "html", "-q"])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1
    assert "inside the input folder" in result.stderr and "give -o" in result.stderr
    assert not (profile_with_graph / "reports").exists()
    # asked explicitly, it is written there
    result = CliRunner().invoke(main, ["analyze", ".", "--format", "junit", "-q", "-o", "mine.xml"])
    assert result.exit_code in (0, 1), result.output
    assert (profile_with_graph / "mine.xml").is_file()
    (profile_with_graph / "mine.xml").unlink()


def test_check_outside_inputs(tmp_path: Path) -> None:
    prof = tmp_path / "PROF"
    (prof / "sub").mkdir(parents=True)
    (tmp_path / "alias").symlink_to(prof)
    check_outside_inputs(tmp_path / "reports", [prof, None, tmp_path / "missing"])
    check_outside_inputs(tmp_path / "PROF2" / "reports", [prof])  # a sibling with a common prefix
    for inside in (prof / "reports", prof, prof / "sub" / "r.html", tmp_path / "alias" / "reports"):
        with pytest.raises(OutputError, match="inside the input folder"):
            check_outside_inputs(inside, [prof])
