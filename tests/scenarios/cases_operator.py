"""Labeled scenarios for the roofline and operator knowledge bases on an Atlas A2 chip (Ascend910B2).

Each profile is a few layers of a transformer step, every kernel generated from its work at a chosen fraction of
the chip's roof (peaks from rules/platforms.yaml) with pipe ratios and block dims that agree with it, as msprof
would record them. One problem is injected per scenario; ``expected`` names, per knowledge base, the exact ops its
findings must name (an empty set: it must stay quiet), and ``recoverable`` the time the injected problem can
realistically give back, which the finding's saving must be within 25 % of.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from advisor.model import Profile
from tests.scenarios.builder import OpRow, make_profile
from tests.scenarios.cases_b import peaks

CHIP = "Ascend910B2"
CUBE_CORES, VECTOR_CORES = 24, 48
ROOF = 0.9
"""A well-tuned kernel's share of its roof."""


@dataclass
class Scenario:
    name: str
    profile: Profile
    expected: dict[str, set[str]]
    recoverable: dict[str, float] = field(default_factory=dict)
    """Rule id -> the time (us) the injected problem can realistically give back."""


def _matmul(name: str, m: int, k: int, n: int, roof: float = ROOF, blocks: int = CUBE_CORES,
            stretch: float = 1.0) -> OpRow:
    """A bf16 matmul at ``roof`` of the cube peak on the cores it uses; ``stretch`` slows it further (a
    throttled clock: its cycles, and so its pipe ratios, stay the same)."""
    p = peaks(CHIP)
    flops = 2.0 * m * k * n
    used = blocks / (math.ceil(blocks / CUBE_CORES) * CUBE_CORES)
    us = flops / (p["cube"] * 1e6) / roof / used * stretch
    return OpRow(name, "MatMulV3", us, core="AI_CORE", input_shapes=f"{m},{k};{k},{n}", input_dtypes="BF16;BF16",
                 input_formats="ND;ND", output_shapes=f"{m},{n}", output_dtypes="BF16", output_formats="ND",
                 metrics={"aic_mac_ratio": roof, "aic_mte2_ratio": 0.45, "aic_scalar_ratio": 0.1,
                          "aic_mte1_ratio": 0.4, "aic_fixpipe_ratio": 0.2},
                 extra={"block_dim": blocks, "op_state": "static"})


def _vector(name: str, op_type: str, shape: tuple[int, ...], n_in: int, roof: float = ROOF,
            stretch: float = 1.0) -> OpRow:
    """A bf16 elementwise op at ``roof`` of the bandwidth roof (it moves its inputs and output once)."""
    p = peaks(CHIP)
    elems = math.prod(shape)
    us = (n_in + 1) * elems * 2 / (p["gbps"] * 1e3) / roof * stretch
    text = ",".join(map(str, shape))
    return OpRow(name, op_type, us, core="AI_VECTOR_CORE", input_shapes=";".join([text] * n_in),
                 input_dtypes=";".join(["BF16"] * n_in), input_formats=";".join(["ND"] * n_in), output_shapes=text,
                 output_dtypes="BF16", output_formats="ND",
                 metrics={"aiv_vec_ratio": 0.3, "aiv_mte2_ratio": roof * 0.95, "aiv_mte3_ratio": 0.4,
                          "aiv_scalar_ratio": 0.1},
                 extra={"block_dim": VECTOR_CORES, "op_state": "static"})


def _layer(i: int, stretch: float = 1.0, **over: OpRow) -> list[OpRow]:
    """One decoder layer: qkv / out / up / down projections and the elementwise work between them."""
    rows = [_matmul(f"qkv{i}", 4096, 4096, 12288, stretch=stretch),
            _vector(f"rope{i}", "Mul", (4096, 4096), 2, stretch=stretch),
            _matmul(f"out{i}", 4096, 4096, 4096, stretch=stretch),
            _vector(f"add{i}", "Add", (4096, 4096), 2, stretch=stretch),
            _vector(f"norm{i}", "RmsNorm", (4096, 4096), 1, stretch=stretch),
            _matmul(f"up{i}", 4096, 4096, 11008, stretch=stretch),
            _vector(f"swiglu{i}", "Mul", (4096, 11008), 2, stretch=stretch),
            _matmul(f"down{i}", 4096, 11008, 4096, stretch=stretch)]
    return [over.get(r.name, r) for r in rows]


def _profile(rows: list[OpRow]) -> Profile:
    p = make_profile(rows, chip=CHIP, gap_us=2.0, context="torch-graph", ai_core_num=CUBE_CORES,
                     aiv_num=VECTOR_CORES)
    return p


def clean_tuned_model() -> Scenario:
    """Every kernel at 90 % of its roof, every core busy, static shapes: nothing to report."""
    return Scenario("clean_tuned_model", _profile([r for i in range(4) for r in _layer(i)]),
                    {"roofline": set(), "operator": set()})


def block_dim_tail() -> Scenario:
    """The down projections of two layers run 20 blocks on 24 cores: a sixth of the chip idles for them."""
    tail = {f"down{i}": _matmul(f"down{i}", 4096, 11008, 4096, blocks=20) for i in (1, 2)}
    rows = [r for i in range(4) for r in _layer(i, **(tail if i in (1, 2) else {}))]
    idle = sum(r.duration_us * (1 - 20 / 24) for r in rows if r.name in tail)
    return Scenario("block_dim_tail", _profile(rows), {"operator": set(tail), "roofline": set()},
                    {"operator.block-dim": idle})


def unaligned_hidden() -> Scenario:
    """A projection with a ragged inner axis (K = 4100, not on the 16-element fractal) that also runs far below
    its roof."""
    odd = _matmul("up1", 4096, 4100, 11008, roof=0.35)
    odd.metrics["aic_mac_ratio"] = 0.35
    rows = [r for i in range(4) for r in _layer(i, **({"up1": odd} if i == 1 else {}))]
    return Scenario("unaligned_hidden", _profile(rows), {"operator": {"up1"}, "roofline": {"up1"}})


def throttled_clock() -> Scenario:
    """The AI Core clock drops to 1500 of 1800 MHz during layer 2: its kernels take 1.2x as long."""
    import pandas as pd

    rows = [r for i in range(4) for r in _layer(i, stretch=1800.0 / 1500.0 if i == 2 else 1.0)]
    profile = _profile(rows)
    ops = profile.ops
    layer2 = ops["name"].astype(str).str.endswith("2")
    start = float(ops.loc[layer2, "start_us"].min())
    end = float((ops["start_us"] + ops["duration_us"])[layer2].max())
    profile.extras["counters"] = pd.DataFrame({
        "process": pd.Categorical(["Ascend Hardware"] * 3), "name": pd.Categorical(["AI Core Freq"] * 3),
        "key": pd.Categorical(["MHz"] * 3), "ts_us": [0.0, start - 0.5, end + 0.5], "value": [1800.0, 1500.0, 1800.0]})
    names = {r.name for r in rows if r.name.endswith("2")}
    lost = sum(r.duration_us * (1 - 1500.0 / 1800.0) for r in rows if r.name in names)
    return Scenario("throttled_clock", profile, {"operator": names, "roofline": set()},
                    {"operator.ai-core-freq": lost})


SCENARIOS = [clean_tuned_model, block_dim_tail, unaligned_hidden, throttled_clock]
