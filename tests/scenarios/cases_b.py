"""Labeled scenarios for the ub-fusion, aipp-fusion and roofline knowledge bases.

Each scenario describes a small model once (:class:`Model`) and renders the ModelGraph and/or the profile an
OM run of it gives (one device task per op, back to back). Op durations are set from each op's work at a
chosen fraction of the chip's roof (``roof=0.9`` = a well-tuned kernel), using the chip's peaks from
rules/platforms.yaml, so the roofline KB has a ground truth too. ``expected`` says, per knowledge base, the
exact set of op names its findings must name (an empty set = it must stay quiet).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.graph.model_graph import ModelGraph
from advisor.model import Profile, dtype_bytes
from tests.scenarios.builder import GraphBuilder, OpRow, desc, make_profile

if TYPE_CHECKING:
    from advisor.config.loader import EffectiveRules
    from advisor.engine.kb_engine import KBStatus
    from advisor.findings import Finding
    from advisor.kb import KnowledgeBase

CHIP = "Ascend310P3"
HOST_TYPES = {"Data", "Const", "NetOutput"}
CUBE_TYPES = {"Conv2D", "DepthwiseConv2D", "MatMul", "MatMulV2", "BatchMatMul", "FullyConnection"}
MIN_US = 5.0
"""Floor of every generated duration (the roofline rules' min_kernel_us): no kernel is faster."""

MEAN = [123.675, 116.28, 103.53]
STD = [58.395, 57.12, 57.375]


@cache
def peaks(chip: str = CHIP) -> dict[str, float]:
    """Cube TFLOPS, vector TFLOPS (fp16) and bandwidth (GB/s) of the chip, from rules/platforms.yaml."""
    import yaml

    from advisor.config.loader import builtin_rules_dir

    chips = yaml.safe_load((builtin_rules_dir() / "platforms.yaml").read_text())["chips"]
    c = chips[chip]
    return {"cube": float(c["fp16_tflops"]), "vector": 2.0 * float(c["fp32_vector_tflops"]),
            "gbps": float(c["hbm_gbps"])}


def hd(c: int, h: int, w: int, n: int = 1, dtype: str = "FLOAT16") -> dict[str, Any]:
    """NC1HWC0 feature map (C0 = 16) of an NCHW tensor."""
    return desc("NC1HWC0", dtype, [n, (c + 15) // 16, h, w, 16], origin_format="NCHW", origin_shape=[n, c, h, w])


def fz(cout: int, cin: int, k: int) -> dict[str, Any]:
    """FRACTAL_Z conv weight."""
    return desc("FRACTAL_Z", "FLOAT16", [(cin + 15) // 16 * k * k, (cout + 15) // 16, 16, 16],
                origin_format="NCHW", origin_shape=[cout, cin, k, k])


def nd(*shape: int, dtype: str = "FLOAT16") -> dict[str, Any]:
    return desc("ND", dtype, list(shape))


def _numel(d: dict[str, Any]) -> int:
    return math.prod(d["shape"]) if d["shape"] else 1


def _bytes(d: dict[str, Any]) -> float:
    return _numel(d) * (dtype_bytes(d["dtype"]) or 2)


def _text(ds: list[dict[str, Any]], key: str) -> str:
    if key == "shape":
        return ";".join(",".join(str(x) for x in d["shape"]) for d in ds)
    return ";".join(str(d[key]) for d in ds)


@dataclass
class Spec:
    name: str
    type: str
    after: list[str]
    ins: list[dict[str, Any]]
    outs: list[dict[str, Any]]
    flops: float
    us: float
    stream: int
    graph: dict[str, Any]


class Model:
    """A model described once; ``graph()`` and ``profile()`` render it."""

    def __init__(self, name: str, chip: str = CHIP, attrs: dict[str, Any] | None = None) -> None:
        self.name = name
        self.chip = chip
        self.attrs = dict(attrs or {})
        self.specs: list[Spec] = []

    def op(self, name: str, type_: str, after: list[str] | str | None = None, *,
           ins: list[dict[str, Any]] | None = None, outs: list[dict[str, Any]] | None = None,
           flops: float | None = None, roof: float = 0.9, us: float | None = None, stream: int = 0,
           **graph: Any) -> str:
        """Add an op; its duration is its time at the roof / ``roof`` (or ``us``), at least MIN_US."""
        ins, outs = list(ins or []), list(outs or [])
        if flops is None:
            flops = float(_numel(outs[0])) if outs and type_ not in ("TransData", "Transpose", "TransposeD",
                                                                   "Cast", "GatherV2") else 0.0
        if us is None and type_ not in HOST_TYPES:
            p = peaks(self.chip)
            peak = p["cube"] if type_ in CUBE_TYPES else p["vector"]
            t_roof = max(flops / (peak * 1e6), sum(_bytes(d) for d in ins + outs) / (p["gbps"] * 1e3))
            us = max(t_roof / roof, MIN_US)
        producers = [after] if isinstance(after, str) else list(after or [])
        self.specs.append(Spec(name, type_, producers, ins, outs, flops, us or 0.0, stream, graph))
        return name

    def conv(self, name: str, after: str | list[str], cin: int, cout: int, hw: int, k: int = 3, roof: float = 0.9,
             **graph: Any) -> str:
        ins = [hd(cin, hw, hw), fz(cout, cin, k)]
        out = hd(cout, hw, hw)
        flops = 2.0 * _numel(out) * _numel(ins[1]) / (out["shape"][1] * 16)
        return self.op(name, "Conv2D", after, ins=ins, outs=[out], flops=flops, roof=roof, **graph)

    def eltwise(self, name: str, type_: str, after: str | list[str], c: int, hw: int, roof: float = 0.9,
                n_in: int = 1, **graph: Any) -> str:
        return self.op(name, type_, after, ins=[hd(c, hw, hw)] * n_in, outs=[hd(c, hw, hw)], roof=roof, **graph)

    def graph(self) -> ModelGraph:
        b = GraphBuilder(self.name, soc=self.chip)
        b.attrs.update(self.attrs)
        for s in self.specs:
            engine = "GE_LOCAL" if s.type in HOST_TYPES else "AI_CORE"
            b.node(s.name, s.type, engine=engine, inputs=s.ins, outputs=s.outs, after=s.after or None, **s.graph)
        return b.build()

    def profile(self, iterations: int = 1) -> Profile:
        rows = []
        for _ in range(iterations):
            for s in self.specs:
                if s.type in HOST_TYPES:
                    continue
                rows.append(OpRow(
                    s.name, s.type, s.us, core="AI_CORE", stream_id=s.stream,
                    input_shapes=_text(s.ins, "shape"), input_dtypes=_text(s.ins, "dtype"),
                    input_formats=_text(s.ins, "format"), output_shapes=_text(s.outs, "shape"),
                    output_dtypes=_text(s.outs, "dtype"), output_formats=_text(s.outs, "format"),
                    extra={"model_id": 1},  # an OM model run (eager single-op tasks have none)
                ))
        return make_profile(rows, chip=self.chip)


@dataclass
class Scenario:
    name: str
    profile: Profile
    graph: ModelGraph | None
    expected: dict[str, set[str]]
    """Knowledge-base id -> the exact op names its findings must name (empty: must stay quiet)."""
    chip: str = CHIP
    rules: dict[str, Any] = field(default_factory=dict)
    """Per-KB rule values this scenario needs overridden (rules file name -> values)."""
    note: str = ""


# ---------------------------------------------------------------------------------------------------------
# ub-fusion
# ---------------------------------------------------------------------------------------------------------


def unfused_chains() -> Scenario:
    """Conv+BN+Relu, Conv+Relu+MaxPool and Conv+Add+Relu left unfused next to fused and ineligible ones."""
    m = Model("unfused_chains")
    m.op("data", "Data", outs=[desc("NCHW", "FLOAT16", [1, 64, 56, 56])])
    m.conv("conv0relu0", "data", 64, 64, 56, pass_name_ub="TbeConvCommonRules0FusionPass",
           original_ops=["conv0", "relu0"])
    m.conv("conv1", "conv0relu0", 64, 64, 56)
    m.eltwise("bn1", "BNInferenceD", "conv1", 64, 56)
    m.eltwise("relu1", "Relu", "bn1", 64, 56)
    m.conv("conv2", "relu1", 64, 64, 56)
    m.eltwise("relu2", "Relu", "conv2", 64, 56)
    m.op("pool2", "MaxPool", "relu2", ins=[hd(64, 56, 56)], outs=[hd(64, 28, 28)])
    m.conv("conv3", "pool2", 64, 64, 28)
    m.eltwise("add3", "Add", ["conv3", "pool2"], 64, 28, n_in=2)
    m.eltwise("relu3", "Relu", "add3", 64, 28)
    # matched by UB fusion already (afterUBMatch: a fusion_scope shared by both nodes)
    m.conv("conv4", "relu3", 64, 64, 28, attrs={"fusion_scope": 7})
    m.eltwise("relu4", "Relu", "conv4", 64, 28, attrs={"fusion_scope": 7})
    # conv5's output also goes to the model output: its Relu cannot take it into UB
    m.conv("conv5", "relu4", 64, 64, 28)
    m.eltwise("relu5", "Relu", "conv5", 64, 28)
    m.op("out", "NetOutput", ["relu5", "conv5"])
    return Scenario(
        "unfused_chains", m.profile(iterations=2), m.graph(),
        {"ub-fusion": {"conv1", "bn1", "relu1", "conv2", "relu2", "pool2", "conv3", "add3", "relu3"},
         "aipp-fusion": set(), "roofline": set()},
        note="conv0relu0 is fused, conv4/relu4 share a fusion scope, conv5 feeds two consumers",
    )


def switch_file_off() -> Scenario:
    """The OM was built with a fusion switch file; a Conv+Relu stayed unfused."""
    cmd = ("/usr/local/Ascend/bin/atc.bin --model=ssd.onnx --framework=5 --output=ssd --soc_version=Ascend310P3 "
           "--fusion_switch_file=/home/user/fusion_switch.cfg")
    m = Model("switch_file_off", attrs={"atc_cmdline": cmd})
    m.op("data", "Data", outs=[desc("NCHW", "FLOAT16", [1, 32, 56, 56])])
    m.conv("conv_s", "data", 32, 32, 56)
    m.eltwise("relu_s", "LeakyRelu", "conv_s", 32, 56)
    m.op("out", "NetOutput", "relu_s")
    return Scenario("switch_file_off", m.profile(), m.graph(),
                    {"ub-fusion": {"conv_s", "relu_s"}, "aipp-fusion": set(), "roofline": set()})


def unfused_sequence_profile() -> Scenario:
    """Profile only: back-to-back conv/relu and matmul/add/relu on one stream, and look-alikes that are not."""
    m = Model("unfused_sequence")
    m.conv("convA", None, 64, 64, 56)
    m.eltwise("reluA", "Relu", "convA", 64, 56)
    m.conv("convB", "reluA", 64, 64, 56)
    m.op("reluB", "Relu", "convB", ins=[hd(64, 28, 28)], outs=[hd(64, 28, 28)])  # shapes do not link
    m.conv("convC", "reluB", 64, 64, 28, stream=1)
    m.eltwise("reluC", "Relu", "convC", 64, 28, stream=2)  # another stream
    mm_out = nd(512, 1024)
    m.op("matmulD", "MatMulV2", "reluC", ins=[nd(512, 1024), nd(1024, 1024)], outs=[mm_out],
         flops=2.0 * 512 * 1024 * 1024)
    m.op("addD", "Add", "matmulD", ins=[mm_out, nd(1024)], outs=[mm_out])
    m.op("reluD", "Relu", "addD", ins=[mm_out], outs=[mm_out])
    return Scenario("unfused_sequence_profile", m.profile(iterations=3), None,
                    {"ub-fusion": {"convA", "reluA", "matmulD", "addD", "reluD"}, "aipp-fusion": set(),
                     "roofline": set()})


# ---------------------------------------------------------------------------------------------------------
# aipp-fusion
# ---------------------------------------------------------------------------------------------------------


def _preprocess_model(name: str) -> Model:
    m = Model(name)
    img = desc("NHWC", "UINT8", [1, 224, 224, 3])
    m.op("data", "Data", outs=[img])
    m.op("cast", "Cast", "data", ins=[img], outs=[desc("NHWC", "FLOAT16", [1, 224, 224, 3])])
    m.op("transpose", "TransposeD", "cast", ins=[desc("NHWC", "FLOAT16", [1, 224, 224, 3])],
         outs=[desc("NCHW", "FLOAT16", [1, 3, 224, 224])], attrs={"perm": [0, 3, 1, 2]})
    x = desc("NCHW", "FLOAT16", [1, 3, 224, 224])
    m.op("mean", "Const", outs=[desc("NCHW", "FLOAT16", [1, 3, 1, 1])], attrs={"value": MEAN})
    m.op("sub", "Sub", ["transpose", "mean"], ins=[x, desc("NCHW", "FLOAT16", [1, 3, 1, 1])], outs=[x])
    m.op("inv_std", "Const", outs=[desc("NCHW", "FLOAT16", [1, 3, 1, 1])], attrs={"value": [1 / s for s in STD]})
    m.op("mul", "Mul", ["sub", "inv_std"], ins=[x, desc("NCHW", "FLOAT16", [1, 3, 1, 1])], outs=[x])
    m.op("gather", "GatherV2", "mul", ins=[x, nd(3, dtype="INT32")], outs=[x])  # RGB -> BGR
    m.op("transdata", "TransData", "gather", ins=[x], outs=[hd(3, 224, 224)])
    m.op("conv1relu1", "Conv2D", "transdata", ins=[hd(3, 224, 224), fz(64, 3, 7)], outs=[hd(64, 112, 112)],
         flops=2.0 * 64 * 112 * 112 * 16 * 49, pass_name_ub="TbeConvCommonRules0FusionPass",
         original_ops=["conv1", "relu1"])
    m.op("out", "NetOutput", "conv1relu1")
    return m


PREPROCESS_OPS = {"cast", "transpose", "sub", "mul", "gather", "transdata"}


def preprocess_graph() -> Scenario:
    """Data(uint8 NHWC) -> Cast -> Transpose -> Sub(mean) -> Mul(1/std) -> Gather(BGR) -> TransData -> conv."""
    m = _preprocess_model("preprocess_graph")
    return Scenario("preprocess_graph", m.profile(iterations=2), m.graph(),
                    {"aipp-fusion": PREPROCESS_OPS, "ub-fusion": set(), "roofline": set()})


def preprocess_profile() -> Scenario:
    """The same model seen only through its profile (three iterations)."""
    m = _preprocess_model("preprocess_profile")
    return Scenario("preprocess_profile", m.profile(iterations=3), None,
                    {"aipp-fusion": PREPROCESS_OPS, "ub-fusion": set(), "roofline": set()})


# ---------------------------------------------------------------------------------------------------------
# roofline
# ---------------------------------------------------------------------------------------------------------


def roofline_mixed() -> Scenario:
    """A compute-bound MatMul at 30 % of its roof and a memory-bound Add at 40 %, among ops at 90 %."""
    m = Model("roofline_mixed")
    a, b, c = nd(2048, 2048), nd(2048, 2048), nd(2048, 2048)
    m.op("mm_slow", "MatMulV2", None, ins=[a, b], outs=[c], flops=2.0 * 2048 ** 3, roof=0.3)
    m.op("mm_ok", "MatMulV2", None, ins=[nd(2048, 1024), nd(1024, 2048)], outs=[nd(2048, 2048)],
         flops=2.0 * 2048 * 2048 * 1024)
    m.op("add_slow", "Add", None, ins=[hd(256, 112, 112), hd(256, 112, 112)], outs=[hd(256, 112, 112)], roof=0.4)
    m.op("add_ok", "Add", None, ins=[hd(128, 56, 56), hd(128, 56, 56)], outs=[hd(128, 56, 56)])
    m.conv("conv_ok", None, 256, 256, 28)
    m.op("trans_ok", "TransData", None, ins=[desc("NCHW", "FLOAT16", [1, 256, 28, 28])], outs=[hd(256, 28, 28)])
    return Scenario("roofline_mixed", m.profile(iterations=4), None,
                    {"roofline": {"mm_slow", "add_slow"}, "ub-fusion": set(), "aipp-fusion": set()})


def roofline_latency() -> Scenario:
    """Many calls of tiny ops that take 9 us each: fixed per-kernel cost, not work."""
    m = Model("roofline_latency")
    for i in range(3):
        m.op(f"tiny_mul{i}", "Mul", None, ins=[nd(64, 16), nd(64, 16)], outs=[nd(64, 16)], us=9.0)
    return Scenario("roofline_latency", m.profile(iterations=40), None,
                    {"roofline": {"tiny_mul0", "tiny_mul1", "tiny_mul2"}, "ub-fusion": set(),
                     "aipp-fusion": set()})


def roofline_metrics() -> Scenario:
    """PMU metrics decide: an MTE2-bound conv, a conv with no pipe above 0.8, a conv at its roof."""
    m = Model("roofline_metrics")
    m.conv("conv_mte2", None, 256, 256, 28, roof=0.35)
    m.conv("conv_nobound", None, 256, 256, 28, roof=0.35)
    m.conv("conv_good", None, 256, 256, 28, roof=0.9)
    prof = m.profile(iterations=3)
    ops = prof.ops
    ratios = {"conv_mte2": (0.30, 0.05, 0.10, 0.95), "conv_nobound": (0.45, 0.10, 0.40, 0.50),
              "conv_good": (0.92, 0.05, 0.10, 0.40)}
    for name, (mac, vec, scalar, mte2) in ratios.items():
        sel = ops["name"] == name
        ops.loc[sel, "mac_ratio"] = mac
        ops.loc[sel, "vec_ratio"] = vec
        ops.loc[sel, "scalar_ratio"] = scalar
        ops.loc[sel, "mte2_ratio"] = mte2
    return Scenario("roofline_metrics", prof, None,
                    {"roofline": {"conv_mte2", "conv_nobound"}, "ub-fusion": set(), "aipp-fusion": set()})


# ---------------------------------------------------------------------------------------------------------
# clean
# ---------------------------------------------------------------------------------------------------------


def clean_fused_model() -> Scenario:
    """An AIPP input, UB-fused convs, a fused FullyConnection, every kernel at 90 % of its roof."""
    m = Model("clean_fused_model")
    img = desc("NHWC", "UINT8", [1, 224, 224, 3])
    m.op("data", "Data", outs=[img])
    m.op("data_0_huawei_aipp", "Aipp", "data", ins=[img], outs=[hd(3, 224, 224)])
    m.op("conv1relu1", "Conv2D", "data_0_huawei_aipp", ins=[hd(3, 224, 224), fz(64, 3, 7)], outs=[hd(64, 112, 112)],
         flops=2.0 * 64 * 112 * 112 * 16 * 49, pass_name_ub="TbeAippConvReluMaxpoolingFusion",
         original_ops=["conv1", "bn1", "relu1"])
    m.op("pool1", "MaxPool", "conv1relu1", ins=[hd(64, 112, 112)], outs=[hd(64, 56, 56)])
    prev = "pool1"
    for i in range(2, 5):
        prev = m.conv(f"conv{i}relu{i}", prev, 64, 64, 56, fusion_passes=["ConvBatchnormFusionPass"],
                      pass_name_ub="TbeConvCommonRules0FusionPass", original_ops=[f"conv{i}", f"bn{i}", f"relu{i}"])
    m.conv("conv5add5relu5", [prev, "pool1"], 64, 64, 56, pass_name_ub="TbeConvDoubleInFusionPass",
           original_ops=["conv5", "add5", "relu5"])
    m.op("gap", "ReduceMeanD", "conv5add5relu5", ins=[hd(64, 56, 56)], outs=[nd(1, 64)])
    m.op("fc", "FullyConnection", "gap", ins=[nd(1, 64), nd(1000, 64)], outs=[nd(1, 1000)],
         flops=2.0 * 64 * 1000, fusion_passes=["TbeFullyconnectionElemwiseDequantFusionPass"])
    m.op("softmax", "SoftmaxV2", "fc", ins=[nd(1, 1000)], outs=[nd(1, 1000)])
    m.op("out", "NetOutput", "softmax")
    return Scenario("clean_fused_model", m.profile(iterations=3), m.graph(),
                    {"ub-fusion": set(), "aipp-fusion": set(), "roofline": set()})


SCENARIOS = [unfused_chains, switch_file_off, unfused_sequence_profile, preprocess_graph, preprocess_profile,
             roofline_mixed, roofline_latency, roofline_metrics, clean_fused_model]


# ---------------------------------------------------------------------------------------------------------
# helpers for the tests of these knowledge bases
# ---------------------------------------------------------------------------------------------------------
SAMPLES = Path(__file__).resolve().parents[2].parent / "shared" / "samples"
"""../shared/samples from the repository root (absent outside the development checkout)."""


def sample(rel: str) -> Path:
    """A file under ../shared/samples; the calling test is skipped when it is not there."""
    import pytest

    p = SAMPLES / rel
    if not p.exists():
        pytest.skip(f"sample not available: {rel}")
    return p


def sample_graph(rel: str) -> ModelGraph:
    """The model graph of a file under ../shared/samples, read as ``advisor analyze --graph`` reads it (the calling
    test is skipped when the file is not there)."""
    from advisor.graph.load import load_graph

    return load_graph(sample(rel))


def run_kbs(kbs: list[type[KnowledgeBase]], profile: Profile, graph: ModelGraph | None, rules: EffectiveRules,
            chip: str = CHIP) -> tuple[list[Finding], list[KBStatus]]:
    """Run knowledge bases through the engine, as ``advisor analyze`` does."""
    from advisor.engine.kb_engine import KBInfo, run
    from advisor.platform import resolve_platform

    return run([KBInfo(k, "test", "", "") for k in kbs], profile, graph, rules, resolve_platform(rules, chip))


def empty_profile() -> Profile:
    """A profile without ops (graph-only analysis)."""
    from advisor.model import OPS_COLUMNS, Meta, empty_frame

    return Profile(ops=empty_frame(OPS_COLUMNS), meta=Meta(source="<none>"))


def flagged(findings: list[Finding], kb: str) -> set[str]:
    """Every op name a knowledge base's findings name."""
    return {op for f in findings if f.kb == kb for op in f.ops}
