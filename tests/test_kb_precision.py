"""precision: fp32 conv/matmul work -> --precision_mode (gain from the cube's fp16 vs fp32 peaks); int8 via AMCT
only where the chip's cube and toolchain have it; never a dtype the chip lacks."""

from __future__ import annotations

import json
from pathlib import Path

import onnx
import pytest

from advisor.config.loader import builtin_rules_dir, load_effective_rules
from advisor.knowledge_bases.precision import PrecisionKB
from advisor.pipeline.analysis import run_analysis
from advisor.platform import resolve_platform
from tests.scenarios.builder import OpRow, make_profile
from tests.scenarios.cases_a import run_kb
from tests.test_fix_models import yolo_block

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_OM = ROOT / "advisor" / "examples" / "ssd_mish_310p" / "ssd_mish_310p.om.json"
M, K, N = 1024, 1024, 1024


def _mm(name: str, dtype: str, us: float = 500.0) -> OpRow:
    return OpRow(name, "MatMulV2", us, input_shapes=f"{M},{K};{K},{N}", input_dtypes=f"{dtype};{dtype}",
                 input_formats="ND;ND", output_shapes=f"{M},{N}", output_dtypes=dtype, output_formats="ND")


def _expected_gain(platform: dict, us: float, src_tflops: float, dst_tflops: float) -> float:
    flops = 2.0 * M * N * K
    b32 = 4.0 * (M * K + K * N + M * N)
    bw = platform["hbm_gbps"] * 1e3
    t32 = max(flops / (src_tflops * 1e6), b32 / bw)
    t16 = max(flops / (dst_tflops * 1e6), b32 / 2 / bw)
    return us * (1 - t16 / t32)


def _rules():
    return load_effective_rules([builtin_rules_dir()])


@pytest.mark.parametrize(("chip", "half"), [("Ascend910B2", "bfloat16"), ("Ascend310P3", "float16")])
def test_fp32_matmul_in_torch_uses_autocast_with_a_dtype_the_chip_has(chip: str, half: str) -> None:
    profile = make_profile([_mm("mm0", "FLOAT"), _mm("mm1", "FLOAT")], chip=chip, context="torch-eager")
    findings, _ = run_kb(PrecisionKB, profile, None, chip=chip)
    (f,) = [x for x in findings if x.rule == "precision.fp32-cube"]
    assert f"torch.{half}" in f.recommendation and f.fix.kind == "code"
    if half == "float16":
        assert "bfloat16" not in json.dumps(f.fix.to_dict()) and "bf16" not in f.recommendation
    p = resolve_platform(_rules(), chip)
    src = p.get("cube_fp32_tflops") or p["fp32_vector_tflops"]
    assert f.estimated_saving_us == pytest.approx(2 * _expected_gain(p, 500.0, src, p["fp16_tflops"]), rel=1e-6)
    assert f.evidence["cube_has_fp32"] is (chip == "Ascend910B2")
    assert f.estimated_saving_us < 2 * 500.0  # never more than the ops' time


def test_om_with_fp32_convs_gets_the_precision_mode_flag(tmp_path: Path) -> None:
    data = json.loads(EXAMPLE_OM.read_text())
    for a in data["attr"]:
        if a["key"] == "atc_cmdline":
            a["value"]["s"] += " --precision_mode=must_keep_origin_dtype"
    for op in data["graph"][0]["op"]:
        if op["type"] == "Conv2D":
            for d in [*(op.get("input_desc") or []), *(op.get("output_desc") or [])]:
                if d and d.get("dtype") == "DT_FLOAT16":
                    d["dtype"] = "DT_FLOAT"
    om = tmp_path / "fp32.om.json"
    om.write_text(json.dumps(data))
    report = run_analysis(None, om).report  # a static audit: the graph alone
    f = next(x for x in report["findings"] if x["rule"] == "precision.fp32-cube")
    assert f["fix"]["kind"] == "atc-option" and f["fix"]["data"]["flags"] == ["--precision_mode=allow_fp32_to_fp16"]
    assert "must_keep_origin_dtype" in f["recommendation"] and f["evidence"]["precision_mode"] == "must_keep_origin_dtype"
    assert f["evidence"]["cube_has_fp32"] is False  # 310P: fp32 convs leave the cube
    assert 0 < f["estimated_saving_us"] <= report["score_detail"]["window_us"]


def test_onnx_fp32_model_is_cast_by_atc_by_default(tmp_path: Path) -> None:
    path = tmp_path / "m.onnx"
    onnx.save(yolo_block(), str(path))
    report = run_analysis(None, path, options=None).report
    assert all(f["rule"] != "precision.fp32-cube" for f in report["findings"])


def test_int8_via_amct_only_where_the_chip_and_toolchain_have_it() -> None:
    rows = [_mm(f"mm{i}", "FLOAT16", 300.0) for i in range(4)]
    prof = make_profile(rows, chip="Ascend310P3", context="om-acl")
    findings, _ = run_kb(PrecisionKB, prof, None)
    (f,) = [x for x in findings if x.rule == "precision.int8"]
    p = resolve_platform(_rules(), "Ascend310P3")
    flops, b16 = 2.0 * M * N * K, 2.0 * (M * K + K * N + M * N)
    bw = p["hbm_gbps"] * 1e3
    t16 = max(flops / (p["fp16_tflops"] * 1e6), b16 / bw)
    t8 = max(flops / (p["int8_tops"] * 1e6), b16 / 2 / bw)
    assert f.estimated_saving_us == pytest.approx(4 * 300.0 * (1 - t8 / t16) * 0.6, rel=1e-6)
    assert f.fix.command.startswith("amct_onnx calibration")
    # SS928: the SVP toolchain has no AMCT
    ss = make_profile(rows, chip="SS928V100", context="om-acl")
    findings, status = run_kb(PrecisionKB, ss, None, chip="SS928V100")
    assert not [x for x in findings if x.rule == "precision.int8"] and any("AMCT" in n for n in status.notes)
    # already quantized
    q = make_profile([*rows, OpRow("q", "AscendQuant", 5.0)], chip="Ascend310P3", context="om-acl")
    assert not [x for x in run_kb(PrecisionKB, q, None)[0] if x.rule == "precision.int8"]
    # a torch_npu run is not told to use AMCT
    t = make_profile(rows, chip="Ascend310P3", context="torch-eager")
    assert not [x for x in run_kb(PrecisionKB, t, None)[0] if x.rule == "precision.int8"]


def test_same_fp32_matmuls_two_contexts_two_right_advices() -> None:
    rows = [_mm("mm0", "FLOAT"), _mm("mm1", "FLOAT")]
    ms = next(x for x in run_kb(PrecisionKB, make_profile(rows, chip="Ascend910B2", context="mindspore-graph"),
                                None, chip="Ascend910B2")[0] if x.rule == "precision.fp32-cube")
    assert "auto_mixed_precision" in ms.recommendation and "torch" not in ms.recommendation
    om = next(x for x in run_kb(PrecisionKB, make_profile(rows, chip="Ascend310P3", context="om-acl"), None)[0]
              if x.rule == "precision.fp32-cube")
    assert om.fix.kind == "atc-option" and "autocast" not in om.recommendation
    unknown = next(x for x in run_kb(PrecisionKB, make_profile(rows, chip="Ascend310P3", context="unknown"), None)[0]
                   if x.rule == "precision.fp32-cube")
    assert unknown.recommendation.startswith("The profile does not show how the model runs")
    assert PrecisionKB.rule("precision.fp32-cube").role == "cause"


def test_kernel_development_keeps_its_dtypes() -> None:
    prof = make_profile([_mm("mm0", "FLOAT")], chip="Ascend910B2", context="kernel-dev")
    findings, status = run_kb(PrecisionKB, prof, None, chip="Ascend910B2")
    assert not findings and any("developer's choice" in n for n in status.notes)


@pytest.mark.parametrize(("framework", "tool"), [("0", "amct_caffe"), ("5", "amct_onnx"), (None, "amct_onnx")])
def test_amct_package_follows_the_source_framework(framework: str | None, tool: str) -> None:
    """A Caffe model (atc --framework=0) is quantized with amct_caffe, not told to run amct_onnx."""
    from tests.scenarios.builder import GraphBuilder

    gb = GraphBuilder()
    if framework is not None:
        gb.attrs["atc_cmdline"] = f"atc --model=m --framework={framework} --soc_version=Ascend310P3"
    rows = [_mm(f"mm{i}", "FLOAT16", 300.0) for i in range(4)]
    findings, _ = run_kb(PrecisionKB, make_profile(rows, chip="Ascend310P3", context="om-acl"), gb.build())
    (f,) = [x for x in findings if x.rule == "precision.int8"]
    assert tool in f.recommendation + json.dumps(f.fix.to_dict())
    if tool != "amct_onnx":
        assert "amct_onnx" not in f.recommendation + json.dumps(f.fix.to_dict())
