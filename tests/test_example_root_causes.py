"""The built-in example as an engineer reads it: each of its five built-in problems leads one root cause, named on
its ops, with a saving within 25 % of the time its fix can realistically recover (worked out here from the raw
op_summary, independently of the knowledge bases); the advice fits an offline model run through ACL on an
Ascend310P3 built with CANN 8.0; the report keeps its invariants."""

from __future__ import annotations

import re

import pandas as pd
import pytest

from advisor.examples import example_profile
from advisor.examples.regenerate import example_report
from advisor.pipeline.consistency import problems

OWN_KBS = ("transdata", "aicpu", "ub-fusion", "aipp-fusion", "mish-leakyrelu")


@pytest.fixture(scope="module")
def report() -> dict:
    return example_report()


@pytest.fixture(scope="module")
def op_time() -> pd.Series:
    """Total Task Duration per op name, straight from the example's op_summary CSV."""
    csv = next(example_profile().glob("mindstudio_profiler_output/op_summary_*.csv"))
    df = pd.read_csv(csv)
    return df.groupby("Op Name")["Task Duration(us)"].sum()


def _names(op_time: pd.Series, pattern: str) -> list[str]:
    return [n for n in op_time.index if re.fullmatch(pattern, n)]


def _problems(op_time: pd.Series) -> dict[str, tuple[list[str], float]]:
    """Built-in problem -> (the rule whose root cause must lead it, its ops, the time its fix recovers)."""
    mish = [n for n in _names(op_time, r"(Softplus|Tanh|Mul)_\d+") if n != "Mul_2"]  # Mul_2: the input scaling
    fused = _names(op_time, r"BatchNormalization_\d+") + _names(op_time, r"Relu_\d+")
    pre = ["Cast_0", "Sub_1", "Mul_2", "trans_TransData_3"]
    pair = ["trans_TransData_roundtrip_a", "trans_TransData_roundtrip_b"]
    int64 = ["post/Cast_int64", "post/GatherV2"]
    return {
        # three elementwise passes (Softplus, Tanh, Mul) become one (LeakyRelu, or native Mish)
        "mish-leakyrelu.mish": (mish, op_time[mish].sum() * 2 / 3),
        # BN folds into the conv weights, the activation runs in the conv's epilogue: both go
        "ub-fusion.unfused-chain": (fused, op_time[fused].sum()),
        # AIPP converts, normalizes and lays out the uint8 image inside the first convolution
        "aipp-fusion.preprocess-ops": (pre, op_time[pre].sum()),
        # a conversion undone right away: both go
        "transdata.roundtrip": (pair, op_time[pair].sum()),
        # int32 keeps the ops on AI Core, where they take a few microseconds
        "aicpu.ops": (int64, op_time[int64].sum()),
    }


def test_every_built_in_problem_leads_a_root_cause_sized_right(report: dict, op_time: pd.Series) -> None:
    for rule, (ops, realistic) in _problems(op_time).items():
        leading = [f for f in report["findings"] if f["rule"] == rule and set(ops) <= set(f["ops"])]
        assert len(leading) == 1, (rule, [f["title"] for f in report["findings"] if f["rule"] == rule])
        saving = leading[0]["estimated_saving_us"]
        assert abs(saving - realistic) <= 0.25 * realistic, (rule, saving, realistic)


def test_each_conversion_and_ai_cpu_op_is_one_cause(report: dict, op_time: pd.Series) -> None:
    """The TransData ops are one round-trip cause (no count, no category finding beside it) whose saving never
    exceeds their time; the AI CPU idle time is folded under the AI CPU ops it measures."""
    top = {f["rule"] for f in report["findings"]}
    assert "transdata.count" not in top and "aicpu.serial" not in top
    transdata = [f for f in report["findings"] if f["kb"] == "transdata"]
    assert [f["rule"] for f in transdata] == ["transdata.roundtrip"]
    assert transdata[0]["estimated_saving_us"] <= op_time[transdata[0]["ops"]].sum() + 1e-3
    assert sum(1 for f in report["findings"] if f["rule"] == "ub-fusion.unfused-chain") == 1
    serial = [s for f in report["findings"] if f["rule"] == "aicpu.ops" for s in f["symptoms"]
              if s["rule"] == "aicpu.serial"]
    assert {op for s in serial for op in s["ops"]} == {"post/Cast_int64", "post/GatherV2", "post/NonZero",
                                                       "post/NonMaxSuppressionV3"}


def test_advice_fits_an_offline_model_on_a_310p3_built_with_cann_80(report: dict) -> None:
    assert report["input"]["context"] == "om-acl"
    own = [f for f in report["findings"] if f["kb"] in OWN_KBS]
    for f in own:
        text = f["recommendation"] + str(f.get("fix") or "")
        assert "torch_npu" not in text and "TASK_QUEUE" not in text and "torchair" not in text, f["rule"]
        assert "bf16" not in text.lower(), f["rule"]
        assert not re.search(r"\b(DOMAIN|FORMATS|DESIGN|PEER)\.md\b", text), f["rule"]
    mish = next(f for f in own if f["rule"] == "mish-leakyrelu.mish")
    # CANN 8.0 predates the native Mish of CANN 8.1's ATC op set on 310P: LeakyRelu, with the upgrade named
    assert mish["evidence"]["native_kernel_on_soc"] is False and "predates" in mish["recommendation"]
    assert mish["fix"]["kind"] == "onnx-rewrite" and "Upgrading" in mish["recommendation"]
    fusion = next(f for f in own if f["rule"] == "ub-fusion.unfused-chain")
    assert fusion["fix"]["command"].startswith("atc --model=ssd_mish.onnx")
    # a static-shape model: --ac_parallel_enable acts only on dynamic shapes, and is not advised
    assert not any("ac_parallel_enable" in f["recommendation"] for f in own if f["kb"] == "aicpu")


def test_no_invariant_broken_by_these_knowledge_bases(report: dict) -> None:
    rules = {f["rule"] for f in report["findings"] if f["kb"] in OWN_KBS}
    broken = [p for p in problems(report) if any(p.startswith(r) or r in p for r in rules)]
    assert broken == []


def test_at_most_twelve_root_causes(report: dict) -> None:
    """Issue 13.6: the example shows at most 12 root causes."""
    assert len(report["findings"]) <= 12, [f["rule"] for f in report["findings"]]
