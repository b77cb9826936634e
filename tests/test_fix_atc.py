"""``advisor fix --atc-config``: a report's fusion-switch / AIPP / atc-option fixes become the files ATC reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.fix.atc_config import build, render_aipp

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
REFERENCE = SHARED / "reference"


def finding(rule: str, fix: dict | None, rank: int | None = None) -> dict:
    f = {"kb": rule.split(".")[0], "rule": rule, "title": rule, "severity": "major", "ops": [], "evidence": {},
         "estimated_saving_us": 1.0, "recommendation": "", "fix": fix}
    if rank is not None:
        f["rank"] = rank
    return f


def report(findings: list[dict], chip: str | None = "Ascend310P3") -> dict:
    return {"schema_version": "1", "input": {"path": "PROF_x", "layout": "msprof-cann7", "chip": chip,
                                             "cann_version": "8.0", "files_read": [], "files_skipped": []},
            "graph": {"source": "model.om.json", "nodes": 3, "edges": 2}, "findings": findings}


RGB_AIPP = {"aipp_mode": "static", "related_input_rank": 0, "input_format": "RGB888_U8", "src_image_size_w": 224,
            "src_image_size_h": 224, "csc_switch": False, "min_chn_0": 123.675, "min_chn_1": 116.28,
            "min_chn_2": 103.53, "var_reci_chn_0": 0.0171247538, "var_reci_chn_1": 0.0175070028,
            "var_reci_chn_2": 0.0174291939}

FINDINGS = [
    finding("ub-fusion.switch-off", {"kind": "fusion-switch", "summary": "turn conv fusion back on", "data": {
        "Switch": {"GraphFusion": {"ConvBatchnormFusionPass": "on"}, "UBFusion": {"TbeConv2DEltwisePass": "on"}},
        "flags": ["--fusion_switch_file=fusion_switch.cfg"]}}, rank=1),
    finding("ub-fusion.other", {"kind": "fusion-switch", "summary": "bare form, one conflict", "data": {
        "GraphFusion": {"ConvBatchnormFusionPass": "off", "SoftmaxFusionPass": "on"},
        "UBFusion": {"TbeEltwiseFusionPass": "ON"}}}, rank=3),
    finding("aipp-fusion.first-layer", {"kind": "aipp-config", "summary": "static AIPP", "data": {
        "aipp_op": RGB_AIPP, "text": "aipp_op {\n  aipp_mode : static\n}"}}, rank=2),
    finding("aipp-fusion.second-input", {"kind": "aipp-config", "summary": "text only", "data": {
        "text": "aipp_op {\n  aipp_mode : static\n  related_input_rank : 1\n  input_format : YUV400_U8\n}"}}, rank=4),
    finding("aicpu.serial", {"kind": "atc-option", "summary": "parallel AI CPU",
                             "data": {"flags": ["--ac_parallel_enable=1", "--soc_version=Ascend910B1"]}}, rank=5),
    finding("aipp-fusion.c04", {"kind": "atc-option", "summary": "small channel",
                                "data": {"flag": "--enable_small_channel=1"}}, rank=6),
    finding("aicpu.again", {"kind": "atc-option", "summary": "conflicting value",
                            "data": {"flags": ["--ac_parallel_enable=0"]}}, rank=7),
    finding("transdata.roundtrip", {"kind": "onnx-rewrite", "summary": "remove pairs", "data": {
        "rule": "remove-roundtrips"}, "command": "advisor fix model.onnx --apply remove-roundtrips -o fixed.onnx"}, 8),
    finding("roofline.memory-bound", None, 9),
    finding("aicpu.ops", {"kind": "code", "summary": "cast indices", "data": {"snippet": "x.int()"}}, 10),
]


def invoke(*args: str) -> tuple[int, str, str]:
    result = CliRunner().invoke(main, ["fix", *args], catch_exceptions=False)
    return result.exit_code, result.stdout, result.stderr


def test_report_fixes_become_fusion_switch_aipp_and_atc_command(tmp_path: Path) -> None:
    rpt = tmp_path / "report.json"
    rpt.write_text(json.dumps(report(FINDINGS)))
    out = tmp_path / "atc"
    code, stdout, _ = invoke("model.onnx", "--atc-config", str(rpt), "-o", str(out))
    assert code == 0
    assert sorted(p.name for p in out.iterdir()) == ["aipp.cfg", "atc_command.txt", "fusion_switch.cfg"]

    switch = json.loads((out / "fusion_switch.cfg").read_text())
    # SoftmaxFusionPass is not a pass of the target release's fusion config: dropped with a note
    assert switch == {"Switch": {
        "GraphFusion": {"ConvBatchnormFusionPass": "on"},
        "UBFusion": {"TbeConv2DEltwisePass": "on", "TbeEltwiseFusionPass": "on"}}}
    assert "ConvBatchnormFusionPass 'off' conflicts with 'on' from ub-fusion.switch-off" in stdout
    assert "GraphFusion.SoftmaxFusionPass dropped: not a GraphFusion pass of CANN 8.1" in stdout

    aipp = (out / "aipp.cfg").read_text()
    assert aipp.startswith("aipp_op {\n  aipp_mode : static\n  related_input_rank : 0\n  input_format : RGB888_U8\n")
    assert "  csc_switch : false\n" in aipp and "  var_reci_chn_0 : 0.0171247538\n" in aipp
    assert aipp.count("aipp_op {") == 2 and "related_input_rank : 1" in aipp

    lines = (out / "atc_command.txt").read_text().strip().splitlines()
    cmd = lines[-1]
    assert all(line.startswith("# ") for line in lines[:-1])
    assert cmd.startswith(f"atc --model=model.onnx --framework=5 --output={out.resolve() / 'model'} "
                          "--soc_version=Ascend310P3 ")
    assert f"--fusion_switch_file={out.resolve() / 'fusion_switch.cfg'}" in cmd
    assert f"--insert_op_conf={out.resolve() / 'aipp.cfg'}" in cmd
    # the graph is not known to be dynamic: --ac_parallel_enable (dynamic-shape graphs only) is not added
    assert cmd.endswith("--enable_small_channel=1") and "ac_parallel_enable" not in cmd
    assert "--ac_parallel_enable=1 dropped: it acts on dynamic-shape graphs only" in stdout
    assert "Ascend910B1" not in cmd
    assert "advisor fix model.onnx --apply remove-roundtrips" in stdout


def test_fusion_switch_has_the_shape_of_the_documented_example(tmp_path: Path) -> None:
    example = REFERENCE / "fusion_switch_example.cfg"
    if not example.exists():
        pytest.skip("../shared/reference is not available")
    ref = json.loads(example.read_text())
    cfg = build(report(FINDINGS), tmp_path)
    ours = json.loads(cfg.files["fusion_switch.cfg"])
    assert set(ours) == set(ref) == {"Switch"} and set(ours["Switch"]) <= set(ref["Switch"])
    assert {v for sec in ours["Switch"].values() for v in sec.values()} <= {"on", "off"}


def test_aipp_cfg_parses_with_the_insert_op_proto(tmp_path: Path, insert_op_pb2) -> None:
    """Parse our aipp.cfg with protobuf's text format against metadef's insert_op.proto, as ATC does."""
    from google.protobuf import text_format

    cfg = build(report(FINDINGS), tmp_path / "out")
    msg = text_format.Parse(cfg.files["aipp.cfg"], insert_op_pb2.InsertNewOps())
    ref = text_format.Parse((REFERENCE / "aipp_static_rgb_example.cfg").read_text(), insert_op_pb2.InsertNewOps())
    assert len(msg.aipp_op) == 2
    first = msg.aipp_op[0]
    assert first.aipp_mode == first.static and first.input_format == first.RGB888_U8
    assert first.src_image_size_w == ref.aipp_op[0].src_image_size_w == 224
    assert list(first.var_reci_chn_0) == pytest.approx(list(ref.aipp_op[0].var_reci_chn_0))
    assert msg.aipp_op[1].related_input_rank == 1


def test_render_aipp_drops_unknown_and_mistyped_fields() -> None:
    notes: list[str] = []
    text = render_aipp({"aipp_mode": "static", "colour": "red", "input_format": "JPEG", "crop": "yes",
                        "src_image_size_w": 224.5, "related_input_name": "images"}, "r", notes)
    assert text == 'aipp_op {\n  aipp_mode : static\n  related_input_name : "images"\n}\n'
    assert len(notes) == 4


def test_soc_placeholder_and_model_from_report(tmp_path: Path) -> None:
    rpt = report([FINDINGS[0]], chip=None)
    rpt["graph"]["source"] = "/models/yolo.onnx"
    cfg = build(rpt, tmp_path)
    assert "--model=/models/yolo.onnx" in cfg.command and "'--soc_version=<soc_version>'" in cfg.command
    assert f"--output={tmp_path.resolve() / 'yolo'}" in cfg.command
    assert any("names no chip" in n for n in cfg.notes)
    rpt["input"]["chip"] = "910B2"
    assert "--soc_version=Ascend910B2" in build(rpt, tmp_path).command


def test_report_without_atc_fixes_writes_nothing(tmp_path: Path) -> None:
    rpt = tmp_path / "report.json"
    rpt.write_text(json.dumps(report(FINDINGS[-3:])))
    code, stdout, _ = invoke("--atc-config", str(rpt), "-o", str(tmp_path / "atc"))
    assert code == 0 and "nothing to write" in stdout
    assert not (tmp_path / "atc").exists()


@pytest.mark.parametrize("content", ["not json at all", '{"findings": 3}', "[1, 2]"])
def test_bad_report_is_one_line_exit_2(tmp_path: Path, content: str) -> None:
    rpt = tmp_path / "report.json"
    rpt.write_text(content)
    code, _, stderr = invoke("--atc-config", str(rpt), "-o", str(tmp_path / "atc"))
    assert code == 2 and stderr.count("\n") == 1 and stderr.startswith("advisor: error:")


def test_atc_config_from_the_builtin_example_report(tmp_path: Path) -> None:
    """End to end: analyze the built-in example, then turn its report's ATC fixes into files."""
    result = CliRunner().invoke(main, ["analyze", "--example", "--format", "json", "--quiet"], catch_exceptions=False)
    assert result.exit_code == 0
    rpt = json.loads(result.stdout)
    (tmp_path / "r.json").write_text(result.stdout)
    code, stdout, _ = invoke("--atc-config", str(tmp_path / "r.json"), "-o", str(tmp_path / "atc"), "--format", "json")
    assert code == 0
    doc = json.loads(stdout)
    switches = [f["fix"]["data"] for f in rpt["findings"] if (f.get("fix") or {}).get("kind") == "fusion-switch"]
    if not switches:
        assert doc["written"] == [] or "fusion_switch.cfg" not in " ".join(doc["written"])
        return
    written = json.loads((tmp_path / "atc" / "fusion_switch.cfg").read_text())["Switch"]
    for data in switches:
        for section, passes in data.get("Switch", data).items():
            for name in passes if section in ("GraphFusion", "UBFusion") else ():
                # every advised pass is written, or dropped with a note saying why (not in the target release)
                assert name in written.get(section, {}) or any(f"{section}.{name} dropped" in n for n in doc["notes"])
    assert f"--soc_version={rpt['input']['chip']}" in doc["command"]
