"""Static audit: a model graph without a profile (OM JSON, GE dumps, ONNX) against the chip cost model.

Every shared graph sample is audited end to end; ONNX models built here carry the Mish case of the SoC profiling
guide; the cost model's numbers are checked against hand-computed FLOPs and bytes."""

from __future__ import annotations

import csv
import importlib.util
import json
import math
import sys
from pathlib import Path

import jsonschema
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto as T
from onnx import helper as h

from advisor.cli import main
from advisor.graph.onnx_model import graph_from_onnx
from advisor.pipeline.analysis import run_analysis
from advisor.platform import resolve_platform
from advisor.testing import load_rules
from advisor.toolkit import costmodel
from tests.test_fix_models import model, weights, yolo_block

ROOT = Path(__file__).resolve().parents[1]
SAMPLES = ROOT.parent / "shared" / "samples"
EXAMPLE_OM = ROOT / "advisor" / "examples" / "ssd_mish_310p" / "ssd_mish_310p.om.json"
SCHEMA = json.loads((ROOT / "advisor" / "schemas" / "report.schema.json").read_text())
INVARIANTS = ROOT.parent / "shared" / "tools" / "report_invariants.py"
GRAPH_KINDS = ("om.json", "ge_proto.txt", "ge_onnx.pbtxt", "onnx.json")


def _graph_samples() -> list[Path]:
    if not (SAMPLES / "MANIFEST.tsv").is_file():
        return []
    with (SAMPLES / "MANIFEST.tsv").open(encoding="utf-8", newline="") as fh:
        return [SAMPLES / r["repo"].replace("/", "__") / r["path"] for r in csv.DictReader(fh, delimiter="\t")
                if r["kind"] in GRAPH_KINDS]


def _invariant_violations(report: dict) -> list[str]:
    if not INVARIANTS.is_file():
        return []
    spec = importlib.util.spec_from_file_location("report_invariants", INVARIANTS)
    mod = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules.setdefault("report_invariants", mod)
    spec.loader.exec_module(mod)  # type: ignore[union-attr]
    return mod.violations(report)


def _check_static_report(report: dict) -> None:
    jsonschema.validate(report, SCHEMA)
    assert report["input"]["layout"] == "static-audit"
    assert any("static audit" in n and "a profile would confirm" in n for n in report["input"]["notes"])
    window = report["score_detail"]["window_us"]
    assert window > 0
    for f in report["findings"]:
        assert f["evidence"]["estimated"] is True
        assert "ESTIMATE (static audit" in f["basis"] and f["title"].endswith("[estimate]")
        assert f["estimated_saving_us"] <= window * 1.001
    by_id = {k["id"]: k for k in report["knowledge_bases"]}
    for kb in ("overall", "schedule", "roofline", "operator"):  # their rules need measured data
        assert by_id[kb]["status"] == "skipped" and "static audit" in by_id[kb]["reason"]
    for kb in ("mish-leakyrelu", "ub-fusion", "aipp-fusion", "aicpu", "transdata"):
        assert by_id[kb]["status"] == "ok"
    assert _invariant_violations(report) == []


@pytest.mark.skipif(not _graph_samples(), reason="../shared/samples not present")
@pytest.mark.parametrize("path", _graph_samples(), ids=lambda p: p.name)
def test_static_audit_of_every_shared_graph_sample(path: Path) -> None:
    result = run_analysis(None, path)
    _check_static_report(result.report)
    # the estimated ops are the graph's compute nodes, each once, back to back on one stream
    summary = result.report["summary"]
    assert summary["ops"] >= 1
    assert summary["device_busy_us"] == pytest.approx(summary["device_time_us"], rel=1e-6)


def test_om_example_static_audit_finds_the_built_in_problems() -> None:
    report = run_analysis(None, EXAMPLE_OM).report
    _check_static_report(report)
    rules = {f["rule"] for f in report["findings"]}
    assert {"mish-leakyrelu.mish", "ub-fusion.unfused-chain", "aipp-fusion.preprocess-ops", "aicpu.ops",
            "transdata.roundtrip"} <= rules
    assert report["input"]["context"] == "om-acl" and report["input"]["cann_version"] == "8.0.0"
    mish = next(f for f in report["findings"] if f["rule"] == "mish-leakyrelu.mish")
    # CANN 8.0.0 (opp_version) predates the op set checked to hold Mish on 310P: LeakyRelu through advisor fix
    assert mish["fix"]["kind"] == "onnx-rewrite" and mish["fix"]["data"]["rule"] == "mish-to-leakyrelu"
    assert "predates" in mish["recommendation"]


def test_om_built_with_cann_81_gets_the_native_mish(tmp_path: Path) -> None:
    data = json.loads(EXAMPLE_OM.read_text())
    for a in data["attr"]:
        if a["key"] == "opp_version":
            a["value"] = {"s": "8.1.RC1"}
    om = tmp_path / "m.om.json"
    om.write_text(json.dumps(data))
    report = run_analysis(None, om).report
    mish = next(f for f in report["findings"] if f["rule"] == "mish-leakyrelu.mish")
    assert mish["evidence"]["native_kernel_on_soc"] is True and mish["fix"]["kind"] == "code"
    assert "no accuracy cost" in mish["recommendation"]


@pytest.mark.parametrize(("chip", "native"), [("Ascend310P3", None), ("SS928V100", False), ("Ascend910B2", None)])
def test_onnx_with_decomposed_mish_from_the_graph_alone(tmp_path: Path, chip: str, native: bool | None) -> None:
    path = tmp_path / "yolo.onnx"
    onnx.save(yolo_block(), str(path))
    res = CliRunner().invoke(main, ["analyze", str(path), "--chip", chip, "--format", "json", "-q"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    _check_static_report(report)
    # issue 28.5: the chip the estimates are for is the run's chip (it was null: "chip ?" in the header)
    assert report["input"]["chip"] == report["platform"]["soc"] == chip
    assert report["platform"]["soc_source"] == f"--chip {chip}"
    text = CliRunner().invoke(main, ["analyze", str(path), "--chip", chip, "-q"]).output
    assert f"chip {chip}" in text
    mish = next(f for f in report["findings"] if f["rule"] == "mish-leakyrelu.mish")
    assert mish["evidence"]["occurrences"] == 2 and mish["estimated_saving_us"] > 0
    assert mish["evidence"]["native_kernel_on_soc"] is native
    assert mish["fix"]["data"]["rule"] == "mish-to-leakyrelu"  # an ONNX model records no CANN release
    if native is None:
        assert "CANN version of this run is unknown" in mish["recommendation"]
    else:
        assert "no native Mish kernel" in mish["recommendation"]
    assert any("dynamic dims" in n for n in report["input"]["notes"])  # the batch dim is "N"


def test_graph_flag_without_path_and_errors(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["analyze", "--graph", str(EXAMPLE_OM), "--format", "json", "-q"])
    assert res.exit_code == 0 and json.loads(res.output)["input"]["layout"] == "static-audit"
    om = json.loads(EXAMPLE_OM.read_text())
    soc = next(a["value"]["s"] for a in om["attr"] if a["key"] == "soc_version")
    report = json.loads(res.output)
    assert report["input"]["chip"] == report["platform"]["soc"] == soc
    assert report["platform"]["soc_source"] == f"the graph's soc_version {soc}"
    # a graph that names no SoC and no --chip: the default chip's peaks are an assumption, the chip stays unnamed
    path = tmp_path / "yolo.onnx"
    onnx.save(yolo_block(), str(path))
    bare = json.loads(CliRunner().invoke(main, ["analyze", "--graph", str(path), "--format", "json", "-q"]).output)
    assert bare["input"]["chip"] is None and bare["platform"]["soc_source"].startswith("default")
    assert any("peaks of" in n and "assumed" in n for n in bare["input"]["notes"])
    res = CliRunner().invoke(main, ["analyze"])
    assert res.exit_code == 2 and "--graph MODEL" in res.output
    only_inputs = model([h.make_node("Identity", ["x"], ["y"], name="id")],
                        [h.make_tensor_value_info("x", T.FLOAT, [1, 3])],
                        [h.make_tensor_value_info("y", T.FLOAT, [1, 3])], [])
    onnx.save(only_inputs, str(tmp_path / "noop.onnx"))
    res = CliRunner().invoke(main, ["analyze", "--graph", str(tmp_path / "noop.onnx")])
    assert res.exit_code == 2 and "no compute op" in res.output


def _platform(soc: str) -> dict:
    return resolve_platform(load_rules(), soc)


def _cm() -> dict:
    return load_rules().for_kb("costmodel")


def test_cost_model_numbers_for_an_onnx_conv_and_an_elementwise_op() -> None:
    conv = model([h.make_node("Conv", ["x", "W"], ["c"], name="conv", pads=[1, 1, 1, 1]),
                  h.make_node("Sigmoid", ["c"], ["y"], name="sig")],
                 [h.make_tensor_value_info("x", T.FLOAT, [1, 16, 32, 32])],
                 [h.make_tensor_value_info("y", T.FLOAT, [1, 32, 32, 32])], [weights("W", (32, 16, 3, 3))])
    graph = graph_from_onnx(conv, "conv.onnx")
    p, cm = _platform("Ascend310P3"), _cm()
    ops = costmodel.estimate_ops(graph, p, cm).set_index("name")
    # conv: 2 x (1*32*32*32 outputs) x (16*3*3) MACs; fp32 ONNX runs as fp16 under ATC's default precision
    flops = 2 * 32 * 32 * 32 * 16 * 9
    assert ops.at["conv", "flops"] == pytest.approx(flops)
    nbytes = 2 * (16 * 32 * 32 + 32 * 16 * 9 + 32 * 32 * 32)
    assert ops.at["conv", "bytes"] == pytest.approx(nbytes)
    eff = cm["efficiency"]
    t_cube = flops / (p["fp16_tflops"] * eff["cube"] * 1e6)
    t_mem = nbytes / (p["hbm_gbps"] * 1e3 * eff["bandwidth"])
    assert ops.at["conv", "duration_us"] == pytest.approx(max(t_cube, t_mem) + cm["launch_overhead_us"])
    assert ops.at["conv", "core"] == "AI_CORE" and ops.at["sig", "core"] == "AI_VECTOR_CORE"  # 310P has vector cores
    assert ops.at["sig", "flops"] == pytest.approx(4 * 32 * 32 * 32)  # flops_per_element Sigmoid
    assert ops.at["sig", "start_us"] == pytest.approx(ops.at["conv", "duration_us"])  # back to back
    # the same ops on a chip without vector cores run on the AI Core
    assert set(costmodel.estimate_ops(graph, _platform("Ascend310"), cm)["core"]) == {"AI_CORE"}


def test_cost_model_ai_cpu_and_fp32_cube_rates() -> None:
    p, cm = _platform("Ascend910B2"), _cm()
    cpu = costmodel.op_time_us(1e6, 4e6, "vector", "FLOAT", "AI_CPU", p, cm)
    assert cpu == pytest.approx(cm["ai_cpu"]["base_us"] + 4e6 / cm["ai_cpu"]["bytes_per_us"])
    assert costmodel.cube_tflops(p, "FLOAT") == p["cube_fp32_tflops"] < costmodel.cube_tflops(p, "FLOAT16")
    assert costmodel.cube_tflops(p, "INT8") == p["int8_tops"]
    p310 = _platform("Ascend310P3")
    assert costmodel.cube_tflops(p310, "FLOAT") == p310["fp32_vector_tflops"]  # no fp32 cube on 310P
    assert math.isnan(costmodel.op_work("NonZero", [(1, 100)], ["FLOAT"], ["ND"], [(100, 2)], ["INT64"], ["ND"],
                                        cm)[0])
