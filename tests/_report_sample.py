"""A realistic report dict for the renderer and compare tests, built through the real ``build_report`` path.

The ops table is built in memory (tests/scenarios/builder.py); findings look like what the built-in knowledge
bases emit: evidence tables, a fusion subgraph, roofline points, typed fixes with commands.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from advisor.config.loader import builtin_rules_dir
from advisor.engine import kb_engine as engine
from advisor.findings import Finding, Fix, table
from advisor.pipeline import score
from advisor.pipeline.hierarchy import rank as rank_findings
from advisor.pipeline.rank_summary import RankSummary
from advisor.pipeline.report_dict import build_report
from advisor.testing import load_rules
from tests.scenarios.builder import OpRow, make_profile


def sample_ops(scale: float = 1.0, extra_transdata: int = 0) -> list[OpRow]:
    """An SSD-like inference step: convs, a few TransData, AI CPU ops, a decomposed Mish."""
    rows: list[OpRow] = []
    for i in range(12):
        rows.append(OpRow(f"conv{i}/Conv2D", "Conv2D", 120.0 * scale, input_shapes='"1,64,56,56;64,64,3,3"',
                          input_dtypes="FLOAT16;FLOAT16", input_formats="NC1HWC0;FRACTAL_Z",
                          output_shapes='"1,64,56,56"', output_dtypes="FLOAT16", output_formats="NC1HWC0"))
        rows.append(OpRow(f"relu{i}/Relu", "Relu", 18.0 * scale, core="AI_VECTOR_CORE"))
    for i in range(4 + extra_transdata):
        rows.append(OpRow(f"trans_TransData_{i}", "TransData", 35.0, core="AI_VECTOR_CORE",
                          input_formats="NCHW", output_formats="NC1HWC0"))
    rows.append(OpRow("softplus_0", "Softplus", 22.0, core="AI_VECTOR_CORE"))
    rows.append(OpRow("tanh_0", "Tanh", 15.0, core="AI_VECTOR_CORE"))
    rows.append(OpRow("mul_0", "Mul", 12.0, core="AI_VECTOR_CORE"))
    rows.append(OpRow("nms/NonMaxSuppressionV3", "NonMaxSuppressionV3", 410.0, core="AI_CPU"))
    rows.append(OpRow("topk/TopKV2", "TopKV2", 95.0, core="AI_CPU"))
    return rows


def sample_findings(n_transdata: int = 4, with_mish: bool = True) -> list[Finding]:
    trans_ops = [f"trans_TransData_{i}" for i in range(n_transdata)]
    out = [
        Finding(
            kb="transdata", rule="transdata.format-roundtrip", title=f"{n_transdata} TransData ops convert "
            "NCHW<->NC1HWC0 between adjacent AI Core ops", severity="major", ops=trans_ops,
            evidence={"count": n_transdata, "total_us": 35.0 * n_transdata, "share_of_device_time": 0.05,
                      "table": table(["op", "from", "to", "duration_us"],
                                     [[o, "NCHW", "NC1HWC0", 35.0] for o in trans_ops])},
            estimated_saving_us=30.0 * n_transdata, basis="the TransData time itself (removed by a 5HD input)",
            recommendation="Feed NC1HWC0 directly: set --input_format=NC1HWC0 so ATC drops the conversion.",
            fix=Fix("atc-option", "convert with --input_format=NC1HWC0", {"flag": "--input_format=NC1HWC0"},
                    "atc --model=ssd.onnx --framework=5 --input_format=NC1HWC0 --soc_version=Ascend310P3"),
            confidence=0.8),
        Finding(
            kb="aicpu", rule="aicpu.op-on-aicpu", title="NonMaxSuppressionV3 runs on AI CPU (410 µs)",
            severity="critical", ops=["nms/NonMaxSuppressionV3"],
            evidence={"duration_us": 410.0, "core": "AI_CPU", "ai_core_equivalent": "NonMaxSuppressionV6"},
            estimated_saving_us=330.0, basis="AI Core NonMaxSuppressionV6 time for the same input (measured ratio)",
            recommendation="Use the AI Core kernel: export NMS as NonMaxSuppressionV6 or use the Ascend "
            "post-processing op; check the | pipe and <angle> escaping.",
            fix=Fix("code", "replace torchvision.ops.nms with torch_npu.npu_nms_v4"), confidence=0.6),
        Finding(
            kb="ub-fusion", rule="ub-fusion.conv-relu-not-fused", title="Conv2D+Relu pairs not fused by UB fusion",
            severity="minor", ops=["conv0/Conv2D", "relu0/Relu"],
            evidence={"pairs": 1, "pass_name": "TbeConvElemwiseFusionPass",
                      "subgraph": {"nodes": [{"name": "conv0/Conv2D", "type": "Conv2D"},
                                             {"name": "relu0/Relu", "type": "Relu"}, "conv1/Conv2D"],
                                   "edges": [["conv0/Conv2D", "relu0/Relu"], ["relu0/Relu", "conv1/Conv2D"]]}},
            estimated_saving_us=16.0, basis="the Relu time (fused into the conv epilogue)",
            recommendation="Enable TbeConvElemwiseFusionPass in the fusion switch file.",
            fix=Fix("fusion-switch", "turn TbeConvElemwiseFusionPass on",
                    {"UBFusion": {"TbeConvElemwiseFusionPass": "on"}},
                    "atc ... --fusion_switch_file=fusion_switch.cfg")),
        Finding(
            kb="roofline", rule="roofline.memory-bound-low-bandwidth", title="3 Conv2D ops reach 31 % of the "
            "memory roof", severity="minor", ops=["conv2/Conv2D", "conv3/Conv2D", "conv4/Conv2D"],
            evidence={"points": table(["op", "type", "intensity", "attained_tflops", "bound"], [
                ["conv2/Conv2D", "Conv2D", 18.5, 1.2, "memory"], ["conv3/Conv2D", "Conv2D", 240.0, 21.0, "compute"],
                ["conv4/Conv2D", "Conv2D", 3.1, 0.18, "memory"], ["relu1/Relu", "Relu", 0.25, 0.02, "latency"]]),
                "peak_tflops": 69.47, "hbm_gbps": 204.0},
            estimated_saving_us=40.0, basis="time at 80 % of the roof",
            recommendation="Raise arithmetic intensity: fuse the elementwise tail, keep activations in FP16.",
            fix=None, confidence=0.5),
    ]
    if with_mish:
        out.append(Finding(
            kb="mish-leakyrelu", rule="mish-leakyrelu.decomposed-mish", title="Decomposed Mish "
            "(Softplus -> Tanh -> Mul)", severity="major", ops=["softplus_0", "tanh_0", "mul_0"],
            evidence={"chains": 1, "total_us": 49.0},
            estimated_saving_us=39.0, basis="native LeakyRelu time on the same tensor",
            recommendation="Replace Mish with LeakyRelu (accuracy cost about 1 % in the SoC guide case).",
            fix=Fix("onnx-rewrite", "rewrite Mish chains to LeakyRelu(alpha=0.01)", {"rule": "mish-to-leakyrelu"},
                    "advisor fix model.onnx --apply mish-to-leakyrelu --verify")))
    return out


def sample_report(scale: float = 1.0, n_transdata: int = 4, with_mish: bool = True,
                  path: str = "/data/PROF_000001_sample", layout: str = "scenario",
                  with_model_summary: bool = False) -> dict[str, Any]:
    """A report dict through ``build_report`` with statuses ok / skipped / failed and a skipped file (and the
    model summary of its ops when ``with_model_summary``)."""
    profile = make_profile(sample_ops(scale, extra_transdata=n_transdata - 4), chip="Ascend310P3",
                           cann_version="7.0.0")
    profile.meta.layout = layout
    profile.meta.read("/data/PROF_000001_sample/device_0/summary/op_summary_0_1.csv")
    profile.meta.skip("/data/PROF_000001_sample/device_0/summary/l2_cache_0_1.csv", "no L2 cache columns")
    profile.meta.notes.append("no step trace: one analysis window")
    findings = sample_findings(n_transdata, with_mish)
    kbs = ["aicpu", "aipp-fusion", "mish-leakyrelu", "roofline", "transdata", "ub-fusion", "broken-kb"]
    statuses = [engine.KBStatus(k, "ok", version="1.0.0", package="ascend-advisor",
                                findings=sum(f.kb == k for f in findings), seconds=0.01) for k in kbs[:-1]]
    statuses[1] = engine.KBStatus("aipp-fusion", "skipped", "needs graph (not in this input)", "1.0.0")
    statuses.append(engine.KBStatus("broken-kb", "failed", "RuntimeError: boom", "0.1.0", "broken-plugin"))
    busy = profile.busy_time_us()
    result_score = score.compute(findings, busy, [s.id for s in statuses])
    chips = yaml.safe_load((builtin_rules_dir() / "platforms.yaml").read_text("utf-8"))["chips"]
    platform = {**chips["Ascend310P3"], "soc": "Ascend310P3", "soc_source": "detected"}
    kb_rules = {"aicpu": ["aicpu.op-on-aicpu"], "aipp-fusion": ["aipp-fusion.missing-aipp"],
                "mish-leakyrelu": ["mish-leakyrelu.decomposed-mish"],
                "roofline": ["roofline.memory-bound-low-bandwidth", "roofline.compute-bound-low-util"],
                "transdata": ["transdata.format-roundtrip", "transdata.count"],
                "ub-fusion": ["ub-fusion.conv-relu-not-fused"]}
    rules = load_rules() if with_model_summary else None
    return build_report(Path(path), [RankSummary.of(profile, platform, rules)], None, None, rank_findings(findings), statuses, [],
                        result_score, platform, kb_rules=kb_rules)
