"""``advisor fix MODEL --apply ...`` through the real click group: output file, JSON, table, bad input."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import onnxruntime  # noqa: F401 - in the test extra: a missing one fails the run instead of skipping it
import pytest
from click.testing import CliRunner

from advisor.cli import main
from tests.test_fix_models import conv_bn, roundtrips, transformer_block, yolo_block

FAST = ["--runs", "3", "--warmup", "1", "--min-gain", "-1e9"]


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["fix", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def save(m: onnx.ModelProto, path: Path) -> Path:
    onnx.save(m, str(path))
    return path


def test_apply_with_verify_writes_a_valid_model_and_json(tmp_path: Path) -> None:
    src = save(transformer_block(20), tmp_path / "bert.onnx")
    out = tmp_path / "fixed.onnx"
    code, stdout, stderr = invoke(str(src), "--apply", "gelu-fuse", "--apply", "remove-roundtrips", "--verify",
                                  "-o", str(out), "--format", "json", *FAST)
    assert code == 0, stderr
    doc = json.loads(stdout)
    assert doc["output"] == str(out) and doc["verify"]["runs"] == 3
    gelu, trips = doc["rewrites"]
    assert gelu["rule"] == "gelu-fuse" and gelu["status"] == "kept" and gelu["max_abs_diff"] < 1e-4
    assert gelu["matches"] == ["ffn1/gelu/mul_1", "ffn2/gelu/mul_x"]
    assert gelu["latency_before_ms"] > 0 and gelu["latency_after_ms"] > 0 and gelu["gain_pct"] is not None
    assert trips["status"] == "no-match"
    assert doc["total"]["max_abs_diff"] < 1e-4
    fixed = onnx.load(str(out))
    onnx.checker.check_model(fixed, full_check=True)
    assert [n.op_type for n in fixed.graph.node].count("Gelu") == 2
    assert f"wrote {out}" in stderr


def test_mish_needs_accept_approx_and_table_shows_the_difference(tmp_path: Path) -> None:
    src = save(yolo_block(), tmp_path / "yolo.onnx")
    out = tmp_path / "yolo_leaky.onnx"
    code, stdout, stderr = invoke(str(src), "--apply", "mish-to-leakyrelu", "--verify", "-o", str(out), *FAST)
    assert code == 0 and not out.exists()
    assert "rejected" in stdout and "--accept-approx" in stdout and "max abs diff" in stdout
    assert "nothing written" in stderr

    code, stdout, _ = invoke(str(src), "--apply", "mish-to-leakyrelu", "--verify", "-o", str(out), "--accept-approx",
                             "--param", "mish-to-leakyrelu.alpha=0.2", "--shape", "x=2,3,16,16", *FAST)
    assert code == 0 and "kept" in stdout and "approximation accepted" in stdout
    leaky = [n for n in onnx.load(str(out)).graph.node if n.op_type == "LeakyRelu"]
    assert [n.name for n in leaky] == ["mish1/mul/leakyrelu", "mish2/mul/leakyrelu"]
    assert onnx.helper.get_attribute_value(leaky[0].attribute[0]) == pytest.approx(0.2)


def test_per_rule_accept_and_no_verify(tmp_path: Path) -> None:
    src = save(yolo_block(), tmp_path / "yolo.onnx")
    code, _, stderr = invoke(str(src), "--apply", "mish-to-leakyrelu,bn-fold", "--accept", "mish-to-leakyrelu")
    assert code == 0
    default_out = tmp_path / "yolo.fixed.onnx"
    assert default_out.exists() and str(default_out) in stderr


def test_apply_all_on_conv_bn_and_roundtrips(tmp_path: Path) -> None:
    for name, m in (("cb", conv_bn()), ("rt", roundtrips())):
        src = save(m, tmp_path / f"{name}.onnx")
        code, stdout, _ = invoke(str(src), "--apply", "all", "--verify", "--format", "json", *FAST)
        assert code == 0
        status = {r["rule"]: r["status"] for r in json.loads(stdout)["rewrites"]}
        assert status["bn-fold" if name == "cb" else "remove-roundtrips"] == "kept"
        assert status["mish-to-leakyrelu"] == "no-match"


def test_gelu_contrib_flag(tmp_path: Path) -> None:
    src = save(transformer_block(13), tmp_path / "bert13.onnx")
    code, stdout, _ = invoke(str(src), "--apply", "gelu-fuse", "--format", "json")
    assert code == 0 and "not available in this opset" in json.loads(stdout)["rewrites"][0]["reason"]
    code, stdout, _ = invoke(str(src), "--apply", "gelu-fuse", "--allow-contrib", "--verify", "--format", "json",
                             *FAST)
    step = json.loads(stdout)["rewrites"][0]
    assert step["status"] == "kept" and step["max_abs_diff"] < 1e-4


def test_scan_without_apply_lists_matches_and_writes_nothing(tmp_path: Path) -> None:
    src = save(yolo_block(), tmp_path / "yolo.onnx")
    code, stdout, _ = invoke(str(src), "--format", "json")
    assert code == 0
    found = {r["rule"]: (r["status"], r["matches"]) for r in json.loads(stdout)["rewrites"]}
    assert found["mish-to-leakyrelu"] == ("found", ["mish1/mul", "mish2/mul"])
    assert found["bn-fold"][0] == "no-match"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["yolo.onnx"]
    code, stdout, _ = invoke()
    assert code == 0 and "mish-to-leakyrelu" in stdout and "remove-roundtrips" in stdout


@pytest.mark.parametrize("args, message", [
    (["--apply", "mish-to-relu"], "unknown rewrite 'mish-to-relu'"),
    (["--apply", "bn-fold", "--param", "bn-fold.alpha=1"], "bn-fold has no parameter 'alpha'"),
    (["--apply", "mish-to-leakyrelu", "--param", "mish-to-leakyrelu.alpha=steep"], "could not convert"),
    (["--apply", "bn-fold", "--verify", "--shape", "x=a,b"], "expected NAME=D0,D1"),
    (["--apply", "bn-fold", "--verify", "--shape", "images=1,3,12,12"], "does not have"),
    (["--apply", "bn-fold", "--atc-config", "r.json"], "separate modes"),
])
def test_bad_options_are_one_line_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    src = save(conv_bn(), tmp_path / "cb.onnx")
    code, _, stderr = invoke(str(src), *args)
    assert code == 2 and stderr.count("\n") == 1 and stderr.startswith("advisor: error:") and message in stderr


@pytest.mark.parametrize("content", [b"this is a text file, not a model\n", b"", b'{"graph": 1}'])
def test_not_an_onnx_file_is_one_line_exit_2(tmp_path: Path, content: bytes) -> None:
    bad = tmp_path / "model.onnx"
    bad.write_bytes(content)
    code, _, stderr = invoke(str(bad), "--apply", "bn-fold")
    assert code == 2 and stderr.count("\n") == 1 and "not an ONNX model" in stderr


def test_missing_model_file_is_exit_2(tmp_path: Path) -> None:
    code, _, stderr = invoke(str(tmp_path / "nope.onnx"), "--apply", "bn-fold")
    assert code == 2 and "no such file" in stderr


def test_missing_onnxruntime_with_verify_is_exit_2(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "onnxruntime", None)
    src = save(conv_bn(), tmp_path / "cb.onnx")
    code, _, stderr = invoke(str(src), "--apply", "bn-fold", "--verify")
    assert code == 2 and stderr.count("\n") == 1 and "pip install onnxruntime" in stderr
