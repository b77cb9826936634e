"""Labeled scenarios for the transdata, aicpu and mish-leakyrelu knowledge bases.

Each scenario is one small model described once (:class:`Net`) and turned into both a ModelGraph and the
profile an OM run of it would give (one task per device op, in order, on one stream), with the op names each
rule must flag. The same expectations hold with and without the graph unless a case says otherwise.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from advisor.config.loader import EffectiveRules
from advisor.graph.model_graph import ModelGraph
from advisor.model import Profile
from advisor.testing import load_rules
from tests.scenarios.builder import GraphBuilder, OpRow, desc, make_profile

HOST_TYPES = {"Data", "Const", "NetOutput"}


def nchw(c: int, h: int, w: int, n: int = 1, dtype: str = "FLOAT16") -> dict[str, Any]:
    return desc("NCHW", dtype, [n, c, h, w])


def nd(*shape: int, dtype: str = "FLOAT16") -> dict[str, Any]:
    return desc("ND", dtype, list(shape))


def hd(c: int, h: int, w: int, n: int = 1, dtype: str = "FLOAT16") -> dict[str, Any]:
    """NC1HWC0 descriptor of an NCHW tensor (C0 = 16)."""
    return desc("NC1HWC0", dtype, [n, (c + 15) // 16, h, w, 16], origin_format="NCHW", origin_shape=[n, c, h, w])


def nz(m: int, k: int, dtype: str = "FLOAT16") -> dict[str, Any]:
    return desc("FRACTAL_NZ", dtype, [(k + 15) // 16, (m + 15) // 16, 16, 16], origin_format="ND", origin_shape=[m, k])


def fz(cout: int, cin: int, kh: int, kw: int) -> dict[str, Any]:
    return desc("FRACTAL_Z", "FLOAT16", [(cin + 15) // 16 * kh * kw, (cout + 15) // 16, 16, 16],
                origin_format="NCHW", origin_shape=[cout, cin, kh, kw])


def _shape_text(d: dict[str, Any]) -> str:
    return ",".join(str(x) for x in d["shape"])


@dataclass
class Spec:
    name: str
    type: str
    after: list[str]
    ins: list[dict[str, Any]]
    outs: list[dict[str, Any]]
    us: float
    core: str
    attrs: dict[str, Any]


class Net:
    """A model described once; ``graph()`` and ``profile()`` render it."""

    def __init__(self, name: str, soc: str = "Ascend310P3", attrs: dict[str, Any] | None = None) -> None:
        self.name = name
        self.soc = soc
        self.attrs = dict(attrs or {})
        self.specs: list[Spec] = []

    def op(self, name: str, type_: str, after: list[str] | str | None = None, ins: list[dict[str, Any]] | None = None,
           outs: list[dict[str, Any]] | None = None, us: float = 0.0, core: str = "AI_CORE",
           attrs: dict[str, Any] | None = None) -> str:
        producers = [after] if isinstance(after, str) else list(after or [])
        self.specs.append(Spec(name, type_, producers, list(ins or []), list(outs or []), us, core, dict(attrs or {})))
        return name

    def graph(self) -> ModelGraph:
        b = GraphBuilder(self.name, soc=self.soc)
        b.attrs.update(self.attrs)
        for s in self.specs:
            engine = "AI_CPU" if s.core == "AI_CPU" else ("GE_LOCAL" if s.type in HOST_TYPES else "AI_CORE")
            b.node(s.name, s.type, engine=engine, inputs=s.ins, outputs=s.outs, attrs=s.attrs, after=s.after)
        return b.build()

    def rows(self) -> list[OpRow]:
        out = []
        for s in self.specs:
            if s.type in HOST_TYPES:
                continue
            out.append(OpRow(
                name=s.name, type=s.type, duration_us=s.us, core=s.core,
                input_shapes=";".join(_shape_text(d) for d in s.ins),
                input_dtypes=";".join(d["dtype"] for d in s.ins),
                input_formats=";".join(d["format"] for d in s.ins),
                output_shapes=";".join(_shape_text(d) for d in s.outs),
                output_dtypes=";".join(d["dtype"] for d in s.outs),
                output_formats=";".join(d["format"] for d in s.outs)))
        return out

    def profile(self, repeat: int = 1, **meta: Any) -> Profile:
        """``repeat`` inferences back to back (the same op names again, as an OM run gives); ``meta``: Meta fields
        such as ``context`` or ``cann_version``."""
        return make_profile(self.rows() * repeat, chip=self.soc, **meta)


@dataclass
class Case:
    name: str
    net: Net
    expected: dict[str, set[str]]
    """Rule id -> op names its findings must name (rules not listed must not fire)."""
    notes: list[str] = field(default_factory=list)


# ---------------------------------------------------------------------------------------------------------
# TransData
# ---------------------------------------------------------------------------------------------------------
def transdata_case() -> Case:
    """A conv net with every kind of conversion: input/output (unavoidable), an op without 5HD support, a
    Flatten between conv and matmul, a cancelling pair, a 5HD -> NZ switch, and a Relu kept in NCHW."""
    n = Net("transdata")
    n.op("data", "Data", outs=[nchw(3, 56, 56)])
    n.op("w1", "Const", outs=[fz(64, 3, 3, 3)])
    n.op("trans_TransData_0", "TransData", "data", [nchw(3, 56, 56)], [hd(3, 56, 56)], 12.0,
         attrs={"src_format": "NCHW", "dst_format": "NC1HWC0"})
    n.op("conv1", "Conv2D", ["trans_TransData_0", "w1"], [hd(3, 56, 56), fz(64, 3, 3, 3)], [hd(64, 56, 56)], 80.0)
    # an op working in NCHW between two convs
    n.op("trans_TransData_1", "TransData", "conv1", [hd(64, 56, 56)], [nchw(64, 56, 56)], 20.0)
    n.op("resize", "ResizeBilinearV2", "trans_TransData_1", [nchw(64, 56, 56)], [nchw(64, 56, 56)], 30.0)
    n.op("trans_TransData_2", "TransData", "resize", [nchw(64, 56, 56)], [hd(64, 56, 56)], 21.0)
    n.op("conv2", "Conv2D", "trans_TransData_2", [hd(64, 56, 56)], [hd(64, 56, 56)], 90.0)
    # a pair that cancels
    n.op("trans_TransData_3", "TransData", "conv2", [hd(64, 56, 56)], [nchw(64, 56, 56)], 19.0)
    n.op("trans_TransData_4", "TransData", "trans_TransData_3", [nchw(64, 56, 56)], [hd(64, 56, 56)], 18.0)
    n.op("conv3", "Conv2D", "trans_TransData_4", [hd(64, 56, 56)], [hd(64, 56, 56)], 85.0)
    # a Relu kept in NCHW between convs (elementwise: supports every format) -> round trip too
    n.op("trans_TransData_8", "TransData", "conv3", [hd(64, 56, 56)], [nchw(64, 56, 56)], 17.0)
    n.op("relu", "Relu", "trans_TransData_8", [nchw(64, 56, 56)], [nchw(64, 56, 56)], 9.0)
    n.op("trans_TransData_9", "TransData", "relu", [nchw(64, 56, 56)], [hd(64, 56, 56)], 16.0)
    n.op("conv4", "Conv2D", "trans_TransData_9", [hd(64, 56, 56)], [hd(64, 7, 7)], 60.0)
    # Flatten between the conv and the classifier matmul
    n.op("trans_TransData_5", "TransData", "conv4", [hd(64, 7, 7)], [nchw(64, 7, 7)], 6.0)
    n.op("flat", "Flatten", "trans_TransData_5", [nchw(64, 7, 7)], [nd(1, 3136)], 2.0)
    n.op("trans_TransData_6", "TransData", "flat", [nd(1, 3136)], [nz(1, 3136)], 5.0)
    n.op("fc", "MatMulV2", "trans_TransData_6", [nz(1, 3136)], [nz(1, 10)], 7.0)
    n.op("trans_TransData_7", "TransData", "fc", [nz(1, 10)], [nd(1, 10)], 3.0)
    n.op("out", "NetOutput", "trans_TransData_7", [nd(1, 10)])
    # 5HD -> ND -> NZ into a second head
    n.op("trans_TransData_10", "TransData", "conv4", [hd(64, 7, 7)], [nchw(64, 7, 7)], 6.5)
    n.op("trans_TransData_11", "TransData", "trans_TransData_10", [nd(1, 64, 7, 7)], [nz(64, 49)], 5.5)
    n.op("head2", "BatchMatMulV2", "trans_TransData_11", [nz(64, 49)], [nz(64, 8)], 6.0)
    n.op("trans_TransData_12", "TransData", "head2", [nz(64, 8)], [nd(64, 8)], 2.5)
    n.op("out2", "NetOutput", "trans_TransData_12", [nd(64, 8)])
    avoidable = {f"trans_TransData_{i}" for i in (1, 2, 3, 4, 5, 6, 8, 9, 10, 11)}  # not input/output: 0, 7, 12
    return Case("transdata", n, {
        "transdata.count": avoidable,
        # the Relu kept in NCHW (8, 9) is a round trip: each conversion belongs to one cause
        "transdata.unsupported-format": {"trans_TransData_1", "trans_TransData_2"},
        "transdata.reshape-interrupts": {"trans_TransData_5", "trans_TransData_6"},
        "transdata.5hd-nz": {"trans_TransData_10", "trans_TransData_11"},
        "transdata.roundtrip": {"trans_TransData_3", "trans_TransData_4", "trans_TransData_8", "trans_TransData_9"},
    })


# ---------------------------------------------------------------------------------------------------------
# AI CPU
# ---------------------------------------------------------------------------------------------------------
def aicpu_case() -> Case:
    """AI CPU ops for each reason, serialized with the AI Core stream; one short one below the threshold."""
    n = Net("aicpu", attrs={"atc_cmdline": "atc --model=m.onnx --framework=5 --soc_version=Ascend310P3 "
                                           "--precision_mode=must_keep_origin_dtype"})
    n.op("x", "Data", outs=[nchw(32, 64, 64)])
    n.op("conv", "Conv2D", "x", [hd(32, 64, 64)], [hd(32, 64, 64)], 300.0)
    n.op("cast_ai_core", "Cast", "conv", [nd(1000, dtype="FLOAT16")], [nd(1000, dtype="FLOAT")], 4.0)
    n.op("idx_cast", "Cast", "cast_ai_core", [nd(1000, dtype="FLOAT16")], [nd(1000, dtype="INT64")], 120.0,
         core="AI_CPU")
    n.op("where_1", "Where", "idx_cast", [nd(1000, dtype="BOOL")], [nd(1000, 1, dtype="INT32")], 80.0,
         core="AI_CPU")
    n.op("index_put", "IndexPutV2", "where_1", [nd(1000, dtype="FLOAT"), nd(1000, dtype="INT32")],
         [nd(1000, dtype="FLOAT")], 500.0, core="AI_CPU")
    n.op("mul_f64", "Mul", "index_put", [nd(1000, dtype="DOUBLE"), nd(1000, dtype="DOUBLE")],
         [nd(1000, dtype="DOUBLE")], 60.0, core="AI_CPU")
    n.op("erfinv_fp32", "Erfinv", "mul_f64", [nd(1000, dtype="FLOAT")], [nd(1000, dtype="FLOAT")], 45.0,
         core="AI_CPU")
    n.op("tiny_cpu", "Shape", "erfinv_fp32", [nd(1000, dtype="FLOAT")], [nd(1, dtype="INT32")], 8.0, core="AI_CPU")
    n.op("add", "Add", "tiny_cpu", [nd(1000), nd(1000)], [nd(1000)], 5.0)
    n.op("out", "NetOutput", "add", [nd(1000)])
    flagged = {"idx_cast", "where_1", "index_put", "mul_f64", "erfinv_fp32"}
    return Case("aicpu", n, {
        "aicpu.ops": flagged,
        "aicpu.serial": flagged | {"tiny_cpu"},
    })


# ---------------------------------------------------------------------------------------------------------
# decomposed activations
# ---------------------------------------------------------------------------------------------------------
def _mish_softplus(n: Net, p: str, x: str, c: int, us: float) -> list[str]:
    t = nchw(c, 32, 32)
    n.op(f"{p}_softplus", "Softplus", x, [t], [t], us)
    n.op(f"{p}_tanh", "Tanh", f"{p}_softplus", [t], [t], us)
    n.op(f"{p}_mul", "Mul", [x, f"{p}_tanh"], [t, t], [t], us)
    return [f"{p}_softplus", f"{p}_tanh", f"{p}_mul"]


def activations_case() -> Case:
    """Mish (both forms), GELU (both forms), Swish, HardSwish, LayerNorm -- and decoys that must not match: an
    SE block (Sigmoid -> Mul with another tensor) and Softplus -> Tanh -> Mul(y, .) with y not the chain input."""
    n = Net("activations", soc="Ascend310P3")
    t = nchw(64, 32, 32)
    n.op("x", "Data", outs=[t])
    n.op("conv0", "Conv2D", "x", [t], [t], 50.0)
    mish_a = _mish_softplus(n, "mish_a", "conv0", 64, 20.0)
    n.op("conv1", "Conv2D", mish_a[-1], [t], [t], 50.0)
    mish_b = _mish_softplus(n, "mish_b", "conv1", 64, 20.0)
    # Mish, exp form
    n.op("conv2", "Conv2D", mish_b[-1], [t], [t], 50.0)
    for i, (name, typ, after) in enumerate([("m2_exp", "Exp", "conv2"), ("m2_add", "Add", "m2_exp"),
                                            ("m2_log", "Log", "m2_add"), ("m2_tanh", "Tanh", "m2_log")]):
        n.op(name, typ, after, [t], [t], 15.0 + i)
    n.op("m2_mul", "Mul", ["conv2", "m2_tanh"], [t, t], [t], 15.0)
    mish_c = ["m2_exp", "m2_add", "m2_log", "m2_tanh", "m2_mul"]
    # a native LeakyRelu of the same size (the estimate of the replacement)
    n.op("leaky", "LeakyRelu", "m2_mul", [t], [t], 8.0)
    # decoy: Softplus -> Tanh of conv3, multiplied with another tensor (conv4), not scheduled back to back
    n.op("conv3", "Conv2D", "leaky", [t], [t], 50.0)
    n.op("decoy_softplus", "Softplus", "conv3", [t], [t], 20.0)
    n.op("decoy_tanh", "Tanh", "decoy_softplus", [t], [t], 20.0)
    n.op("conv4", "Conv2D", "leaky", [t], [t], 50.0)
    n.op("decoy_mul", "Mul", ["conv4", "decoy_tanh"], [t, t], [t], 20.0)
    # Swish
    n.op("sw_sig", "Sigmoid", "decoy_mul", [t], [t], 12.0)
    n.op("sw_mul", "Mul", ["decoy_mul", "sw_sig"], [t, t], [t], 12.0)
    # SE block decoy: Sigmoid of a pooled branch times the feature map
    pooled = nchw(64, 1, 1)
    n.op("se_pool", "ReduceMeanD", "sw_mul", [t], [pooled], 6.0)
    n.op("se_fc", "Conv2D", "se_pool", [pooled], [pooled], 4.0)
    n.op("se_sig", "Sigmoid", "se_fc", [pooled], [pooled], 3.0)
    n.op("se_mul", "Mul", ["sw_mul", "se_sig"], [t, pooled], [t], 10.0)
    # HardSwish: x * relu6(x + 3) / 6
    n.op("hs_add", "Add", "se_mul", [t], [t], 10.0)
    n.op("hs_relu6", "Relu6", "hs_add", [t], [t], 10.0)
    n.op("hs_mul", "Mul", ["se_mul", "hs_relu6"], [t, t], [t], 10.0)
    n.op("hs_div", "RealDiv", "hs_mul", [t], [t], 10.0)
    # GELU, tanh form on a token tensor: 0.5 * x * (1 + tanh(0.798 * (x + 0.0447 * x^3)))
    tok = nd(1, 128, 768)
    n.op("mm", "BatchMatMulV2", "hs_div", [t], [tok], 40.0)
    gelu_t = [
        n.op("gt_pow", "Pow", "mm", [tok], [tok], 9.0),
        n.op("gt_mul1", "Mul", "gt_pow", [tok], [tok], 9.0),
        n.op("gt_add1", "Add", ["mm", "gt_mul1"], [tok, tok], [tok], 9.0),
        n.op("gt_mul2", "Mul", "gt_add1", [tok], [tok], 9.0),
        n.op("gt_tanh", "Tanh", "gt_mul2", [tok], [tok], 9.0),
        n.op("gt_add2", "Add", "gt_tanh", [tok], [tok], 9.0),
        n.op("gt_mul3", "Mul", ["gt_add2", "mm"], [tok, tok], [tok], 9.0),
        n.op("gt_half", "Mul", "gt_mul3", [tok], [tok], 9.0),
    ]
    # GELU, erf form as torch.onnx exports F.gelu: Div -> Erf -> Add -> Mul(x, .) -> Mul(0.5)
    gelu_e = [
        n.op("ge_div", "RealDiv", "gt_half", [tok], [tok], 8.0),
        n.op("ge_erf", "Erf", "ge_div", [tok], [tok], 8.0),
        n.op("ge_add", "Add", "ge_erf", [tok], [tok], 8.0),
        n.op("ge_mul", "Mul", ["gt_half", "ge_add"], [tok, tok], [tok], 8.0),
        n.op("ge_half", "Muls", "ge_mul", [tok], [tok], 8.0),
    ]
    prev = "ge_half"
    # LayerNorm
    stat = nd(1, 128, 1)
    ln = [("ln_mean", "ReduceMeanD", [prev], [tok], [stat]),
          ("ln_sub", "Sub", [prev, "ln_mean"], [tok, stat], [tok]),
          ("ln_pow", "Pow", ["ln_sub"], [tok], [tok]),
          ("ln_var", "ReduceMeanD", ["ln_pow"], [tok], [stat]),
          ("ln_add", "Add", ["ln_var"], [stat], [stat]),
          ("ln_sqrt", "Sqrt", ["ln_add"], [stat], [stat]),
          ("ln_div", "RealDiv", ["ln_sub", "ln_sqrt"], [tok, stat], [tok]),
          ("ln_gamma", "Mul", ["ln_div"], [tok], [tok]),
          ("ln_beta", "Add", ["ln_gamma"], [tok], [tok])]
    for name, typ, after, ins, outs in ln:
        n.op(name, typ, after, ins, outs, 7.0)
    n.op("out", "NetOutput", "ln_beta", [tok])
    return Case("activations", n, {
        "mish-leakyrelu.mish": set(mish_a + mish_b + mish_c),
        "mish-leakyrelu.gelu": set(gelu_t + gelu_e),
        "mish-leakyrelu.swish": {"sw_sig", "sw_mul"},
        "mish-leakyrelu.hardswish": {"hs_add", "hs_relu6", "hs_mul", "hs_div"},
        "mish-leakyrelu.layernorm": {name for name, *_ in ln},
    })


# ---------------------------------------------------------------------------------------------------------
# a clean model: every knowledge base stays quiet
# ---------------------------------------------------------------------------------------------------------
def clean_case() -> Case:
    """Input and output conversions only, native activations, nothing on the AI CPU."""
    n = Net("clean")
    n.op("data", "Data", outs=[nchw(3, 64, 64)])
    n.op("trans_TransData_0", "TransData", "data", [nchw(3, 64, 64)], [hd(3, 64, 64)], 10.0)
    prev = "trans_TransData_0"
    for i in range(4):
        n.op(f"conv{i}", "Conv2D", prev, [hd(64, 64, 64)], [hd(64, 64, 64)], 80.0)
        n.op(f"act{i}", "LeakyRelu", f"conv{i}", [hd(64, 64, 64)], [hd(64, 64, 64)], 8.0)
        prev = f"act{i}"
    n.op("pool", "MaxPool", prev, [hd(64, 64, 64)], [hd(64, 32, 32)], 20.0)
    n.op("gelu", "Gelu", "pool", [hd(64, 32, 32)], [hd(64, 32, 32)], 6.0)
    n.op("sig", "Sigmoid", "gelu", [hd(64, 32, 32)], [hd(64, 32, 32)], 5.0)
    n.op("trans_TransData_1", "TransData", "sig", [hd(64, 32, 32)], [nchw(64, 32, 32)], 8.0)
    n.op("out", "NetOutput", "trans_TransData_1", [nchw(64, 32, 32)])
    return Case("clean", n, {})


ALL_CASES = (transdata_case, aicpu_case, activations_case, clean_case)


# ---------------------------------------------------------------------------------------------------------
# running a knowledge base the way the engine does
# ---------------------------------------------------------------------------------------------------------
@cache
def _builtin_rules() -> EffectiveRules:
    """The built-in rules, loaded once for the scenario runs (which only read them)."""
    return load_rules()


def run_kb(kb_cls: type, profile: Profile | None, graph: ModelGraph | None, rules: Any = None,
           chip: str = "Ascend310P3") -> tuple[list[Any], Any]:
    """Run one knowledge base through ``advisor.engine.kb_engine.run``; returns (findings, status). A missing profile is
    an empty one (graph-only analysis)."""
    import pandas as pd

    from advisor.engine.kb_engine import KBInfo, run
    from advisor.ingest.normalize import finalize_ops
    from advisor.model import OPS_COLUMNS, Meta
    from advisor.platform import resolve_platform

    rules = rules or _builtin_rules()
    if profile is None:
        profile = Profile(ops=finalize_ops(pd.DataFrame(columns=OPS_COLUMNS)), meta=Meta(source="<graph only>"))
    findings, statuses = run([KBInfo(kb_cls, "test", "", "")], profile, graph, rules, resolve_platform(rules, chip))
    return findings, statuses[0]


def ops_by_rule(findings: list[Any], prefix: str = "") -> dict[str, set[str]]:
    """Rule id -> union of the op names its findings name."""
    out: dict[str, set[str]] = {}
    for f in findings:
        if f.rule.startswith(prefix):
            out.setdefault(f.rule, set()).update(f.ops)
    return out


def expected_for(case: Case, prefix: str) -> dict[str, set[str]]:
    return {r: ops for r, ops in case.expected.items() if r.startswith(prefix)}
