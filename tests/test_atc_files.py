"""ATC files that run: the atc command rebuilt from the OM's recorded command line, options checked against the
CANN release and the graph, fusion_switch.cfg checked against the target release's fusion config, aipp.cfg with the
ONNX model's normalization constants (or a placeholder comment), and the aipp-preprocess rewrite that goes with it.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper as h
from onnx import numpy_helper as nh

from advisor.cli import main
from advisor.fix.atc_config import build
from advisor.fix.rewrites import get
from advisor.pipeline.analysis import run_analysis
from tests.test_fix_models import model, weights

ROOT = Path(__file__).resolve().parents[1]
REFERENCE = ROOT.parent / "shared" / "reference"
EXAMPLE = ROOT / "advisor" / "examples" / "ssd_mish_310p"
MEAN = np.array([0.485, 0.456, 0.406], np.float32)
STD = np.array([0.229, 0.224, 0.225], np.float32)


def preprocessing_model() -> onnx.ModelProto:
    """uint8 NHWC image -> Cast -> Transpose -> /255 -> -mean -> /std -> Conv -> Relu (a torchvision-style export)."""
    nodes = [h.make_node("Cast", ["img"], ["f"], name="pre/cast", to=T.FLOAT),
             h.make_node("Transpose", ["f"], ["t"], name="pre/transpose", perm=[0, 3, 1, 2]),
             h.make_node("Div", ["t", "s255"], ["d"], name="pre/div255"),
             h.make_node("Sub", ["d", "mean"], ["m"], name="pre/sub_mean"),
             h.make_node("Div", ["m", "std"], ["x"], name="pre/div_std"),
             h.make_node("Conv", ["x", "W"], ["c"], name="conv1", pads=[1, 1, 1, 1]),
             h.make_node("Relu", ["c"], ["y"], name="relu1")]
    inits = [nh.from_array(np.array(255.0, np.float32), "s255"), nh.from_array(MEAN.reshape(1, 3, 1, 1), "mean"),
             nh.from_array(STD.reshape(1, 3, 1, 1), "std"), weights("W", (16, 3, 3, 3))]
    return model(nodes, [h.make_tensor_value_info("img", T.UINT8, [1, 32, 32, 3])],
                 [h.make_tensor_value_info("y", T.FLOAT, [1, 16, 32, 32])], inits)


def _atc(report: dict, tmp: Path, *extra: str) -> tuple[dict, Path]:
    (tmp / "r.json").write_text(json.dumps(report))
    out = tmp / "atc"
    res = CliRunner().invoke(main, ["fix", "--atc-config", str(tmp / "r.json"), "-o", str(out), "--format", "json",
                                    *extra], catch_exceptions=False)
    assert res.exit_code == 0, res.output
    return json.loads(res.stdout), out


def _example_report() -> dict:
    return run_analysis(next(EXAMPLE.glob("PROF_*")), EXAMPLE / "ssd_mish_310p.om.json").report


def test_example_command_is_the_recorded_build_with_the_generated_files(tmp_path: Path) -> None:
    report = _example_report()
    recorded = report["graph"]["build"]["atc_cmdline"]
    doc, out = _atc(report, tmp_path)
    lines = (out / "atc_command.txt").read_text().splitlines()
    cmd = shlex.split(lines[-1])
    args = dict(a[2:].split("=", 1) for a in cmd[1:])
    for part in shlex.split(recorded)[1:]:  # every recorded option is kept (or pointed at a generated file)
        name, _, value = part[2:].partition("=")
        assert name in args
        if name not in ("model", "output", "fusion_switch_file"):
            assert args[name] == value, name
    # AIPP takes over Cast/Sub/Mul: ATC builds the model without them, whose input keeps name and NCHW shape
    assert args["model"] == "ssd_mish.aipp.onnx" and args["input_shape"] == "images:1,3,300,300"
    assert args["output"] == str((out / "ssd_mish_310p").resolve())
    assert args["fusion_switch_file"] == str((out / "fusion_switch.cfg").resolve())
    assert args["insert_op_conf"] == str((out / "aipp.cfg").resolve())
    assert "ac_parallel_enable" not in args  # a static graph
    assert any(line.startswith("# first: advisor fix ssd_mish.onnx --apply aipp-preprocess") for line in lines)
    # the OM's switch file is replaced, and the file says so; CANN 8.0.0 predates TbeConvCommonRules0FusionPass
    assert any("REPLACES fusion_switch.cfg" in line for line in lines)
    assert "TbeConvCommonRules0FusionPass" not in (out / "fusion_switch.cfg").read_text()
    assert any("TbeConvCommonRules0FusionPass dropped" in n for n in doc["notes"])
    # the aipp.cfg keeps the TODO: the OM JSON carries no constant values
    assert "# TODO mean_chn_i / min_chn_i / var_reci_chn_i" in (out / "aipp.cfg").read_text()


def test_merge_with_the_builds_own_switch_file(tmp_path: Path) -> None:
    report = _example_report()
    doc, out = _atc(report, tmp_path, "--merge-switch", str(EXAMPLE / "fusion_switch.cfg"))
    merged = json.loads((out / "fusion_switch.cfg").read_text())["Switch"]
    assert merged["GraphFusion"]["ALL"] == "off" and merged["UBFusion"]["ALL"] == "off"
    assert merged["GraphFusion"]["ConvBatchnormFusionPass"] == "on"  # a pass setting overrides ALL
    assert "merged with the advised passes" in (out / "atc_command.txt").read_text()


def _dynamic_report(cann: str | None, chip: str, cmdline: str = "") -> dict:
    return {"input": {"path": "x", "layout": "static-audit", "chip": chip, "cann_version": cann},
            "graph": {"source": "m.om.json", "nodes": 1, "edges": 0,
                      "build": {"atc_cmdline": cmdline or f"atc --model=m.onnx --framework=5 --output=m "
                                                          f"--soc_version={chip} --input_shape=x:-1,3,224,224",
                                "dynamic_shape": True}},
            "findings": [{"rule": "aicpu.serial", "fix": {"kind": "atc-option", "summary": "",
                                                          "data": {"flags": ["--ac_parallel_enable=1"]}}},
                         {"rule": "ub-fusion.unfused-chain", "fix": {"kind": "fusion-switch", "summary": "", "data": {
                             "Switch": {"GraphFusion": {"ConvBatchnormFusionPass": "on"},
                                        "UBFusion": {"TbeConvCommonRules0FusionPass": "on",
                                                     "TbeConv2DEltwisePass": "on",
                                                     "TbeMatmulElemwiseFusionPass": "on"}}}}}]}


@pytest.mark.parametrize(("cann", "chip", "kept", "why"), [
    ("8.1.RC1", "Ascend310P3", True, ""),
    ("7.0.0", "Ascend310P3", False, "predates it"),
    ("8.1.RC1", "Ascend310", False, "not available on Ascend310"),
    (None, "Ascend310P3", True, "assume"),
])
def test_dynamic_only_option_by_release_and_soc(tmp_path: Path, cann: str | None, chip: str, kept: bool,
                                                 why: str) -> None:
    cfg = build(_dynamic_report(cann, chip), tmp_path)
    assert ("--ac_parallel_enable=1" in cfg.command) is kept
    text = " ".join(cfg.notes + cfg.assumptions)
    assert why in text
    if cann is None:
        assert "ac_parallel_enable=1 (CANN >= 8.0)" in cfg.files["atc_command.txt"]


def test_fusion_switch_passes_exist_in_the_cann_81_fusion_config(tmp_path: Path) -> None:
    """The generated file, checked against the fusion config of the release it targets (read here directly)."""
    ref = REFERENCE / "cann8.1_fe_fusion_config.json"
    if not ref.exists():
        pytest.skip("../shared/reference is not available")
    config = json.loads(ref.read_text())
    known = {s: set(config["Switch"][s]) | {p for g in config["Priority"][s].values() for p in g}
             for s in ("GraphFusion", "UBFusion")}
    cfg = build(_dynamic_report("8.1.RC1", "Ascend310P3"), tmp_path)
    written = json.loads(cfg.files["fusion_switch.cfg"])["Switch"]
    assert written["UBFusion"] == {"TbeConvCommonRules0FusionPass": "on", "TbeConv2DEltwisePass": "on"}
    for section, passes in written.items():
        assert set(passes) <= known[section], section
    assert any("TbeMatmulElemwiseFusionPass dropped: not a UBFusion pass" in n for n in cfg.notes)
    assert not any("checked against CANN 8.1's fusion config; the target" in a for a in cfg.assumptions)


def test_precision_mode_is_not_added_to_a_build_using_precision_mode_v2(tmp_path: Path) -> None:
    rpt = _dynamic_report("8.1.RC1", "Ascend310P3", "atc --model=m.onnx --framework=5 --output=m "
                                                   "--soc_version=Ascend310P3 --precision_mode_v2=origin")
    rpt["findings"] = [{"rule": "precision.fp32-cube", "fix": {"kind": "atc-option", "summary": "",
                                                               "data": {"flags": ["--precision_mode=force_fp16"]}}},
                       rpt["findings"][1]]
    cfg = build(rpt, tmp_path)
    assert "--precision_mode=" not in cfg.command and "--precision_mode_v2=origin" in cfg.command
    assert any("excludes --precision_mode" in n for n in cfg.notes)


def test_recorded_command_line_cannot_inject(tmp_path: Path) -> None:
    rpt = _dynamic_report("8.1.RC1", "Ascend310P3", "atc --model='m.onnx;touch pwned' --framework=5 --output=m "
                                                   "--soc_version=Ascend310P3 --log='$(reboot)'")
    cfg = build(rpt, tmp_path)
    args = shlex.split(cfg.command)
    assert "--model=m.onnx;touch pwned" in args and "--log=$(reboot)" in args  # one argument each, quoted
    res = subprocess.run(["sh", "-n", "-c", cfg.command], capture_output=True)
    assert res.returncode == 0


def test_aipp_from_onnx_initializers_and_the_rewrite_reproduce_the_model(tmp_path: Path) -> None:
    """aipp.cfg's mean/min/var (from the ONNX initializers) applied to a uint8 image, fed to the model the
    aipp-preprocess rewrite produced, give the original model's output: AIPP + rewritten model = original."""
    import onnxruntime as ort
    path = tmp_path / "pre.onnx"
    onnx.save(preprocessing_model(), str(path))
    report = run_analysis(None, path).report
    (f,) = [x for x in report["findings"] if x["rule"] == "aipp-fusion.preprocess-ops"]
    params = f["fix"]["data"]["aipp_op"]
    assert f["fix"]["data"]["model_rewrite"]["input_shape"] == [1, 3, 32, 32]
    assert "becomes uint8 NHWC" in f["recommendation"]
    for i in range(3):
        assert params[f"mean_chn_{i}"] + params[f"min_chn_{i}"] == pytest.approx(MEAN[i] * 255, rel=1e-5)
        assert params[f"var_reci_chn_{i}"] == pytest.approx(1 / (255 * STD[i]), rel=1e-5)

    result = get("aipp-preprocess").apply(onnx.load(str(path)), {})
    assert result.matches == ["pre/div_std"] and result.input_map == {"img": "x"}
    assert [n.op_type for n in result.model.graph.node] == ["Conv", "Relu"]

    img = np.random.default_rng(0).integers(0, 256, size=(1, 32, 32, 3)).astype(np.uint8)
    aipp = np.stack([(img[0, :, :, i].astype(np.float32) - params[f"mean_chn_{i}"] - params[f"min_chn_{i}"])
                     * params[f"var_reci_chn_{i}"] for i in range(3)])[None]
    before = ort.InferenceSession(path.read_bytes()).run(None, {"img": img})[0]
    after = ort.InferenceSession(result.model.SerializeToString()).run(None, {"img": aipp.astype(np.float32)})[0]
    assert np.abs(before - after).max() < 1e-4


def test_aipp_cfg_with_todo_and_onnx_constants_parses_with_insert_op_proto(tmp_path: Path, insert_op_pb2) -> None:
    from google.protobuf import text_format

    path = tmp_path / "pre.onnx"
    onnx.save(preprocessing_model(), str(path))
    for report in (run_analysis(None, path).report, _example_report()):
        cfg = build(report, tmp_path / "out")
        msg = text_format.Parse(cfg.files["aipp.cfg"], insert_op_pb2.InsertNewOps())
        assert len(msg.aipp_op) == 1 and msg.aipp_op[0].aipp_mode == msg.aipp_op[0].static
    onnx_op = text_format.Parse(build(run_analysis(None, path).report, tmp_path / "o2").files["aipp.cfg"],
                                insert_op_pb2.InsertNewOps()).aipp_op[0]
    assert onnx_op.mean_chn_0 == 123 and list(onnx_op.var_reci_chn_0) == pytest.approx([1 / (255 * 0.229)])


def test_aipp_preprocess_verify_feeds_the_rewritten_model(tmp_path: Path) -> None:
    import onnxruntime  # noqa: F401 - in the test extra (--verify runs both models)
    path = tmp_path / "pre.onnx"
    onnx.save(preprocessing_model(), str(path))
    # what is checked is the feed and the numerics: any measured latency is accepted (a loaded machine can time the
    # rewritten model slower in three runs, which would reject it)
    res = CliRunner().invoke(main, ["fix", str(path), "--apply", "aipp-preprocess", "--verify", "--runs", "3",
                                    "--warmup", "1", "--min-gain", "-1000", "--format", "json",
                                    "-o", str(tmp_path / "out.onnx")])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout[res.stdout.index("{"):])
    (step,) = doc["rewrites"]
    assert step["status"] == "kept" and step["max_abs_diff"] == 0
    assert doc["total"]["max_abs_diff"] == 0
    assert onnx.load(str(tmp_path / "out.onnx")).graph.input[0].type.tensor_type.elem_type == T.FLOAT
