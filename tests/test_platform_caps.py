"""Chip capabilities in rules/platforms.yaml and the advisor.platform queries knowledge bases use."""

from __future__ import annotations

import pytest

from advisor.platform import (
    cann_release,
    cube_supports,
    has_tool,
    is_assumed,
    native_kernel,
    resolve_platform,
    short_dtype,
    supports_dtype,
)


@pytest.mark.parametrize("soc", ["Ascend310", "Ascend310B1", "Ascend310P3", "Ascend910A"])
def test_no_bf16_outside_a2_a3(builtin_rules, soc: str) -> None:
    p = resolve_platform(builtin_rules, soc)
    assert not supports_dtype(p, "DT_BF16") and not cube_supports(p, "BF16")
    assert supports_dtype(p, "FLOAT16") and cube_supports(p, "fp16") and cube_supports(p, "INT8")
    assert not cube_supports(p, "FLOAT")  # fp32 work is cast or falls back on these cubes


@pytest.mark.parametrize("soc", ["Ascend910B1", "Ascend910B4", "Ascend910_9391"])
def test_a2_a3_have_bf16_and_an_fp32_cube_rate(builtin_rules, soc: str) -> None:
    p = resolve_platform(builtin_rules, soc)
    assert supports_dtype(p, "bf16") and cube_supports(p, "FLOAT")
    assert 0 < p["cube_fp32_tflops"] < p["fp16_tflops"]


def test_int8_peak_is_twice_fp16_where_derived(builtin_rules) -> None:
    for soc in ("Ascend310P3", "Ascend910B2", "SS928V100"):
        p = resolve_platform(builtin_rules, soc)
        assert p["int8_tops"] == pytest.approx(2 * p["fp16_tflops"], rel=0.01)


def test_ss928_toolchain_has_no_aoe_or_amct_and_no_native_mish(builtin_rules) -> None:
    p = resolve_platform(builtin_rules, "SS928V100/SS927V100")  # the name the SoC JOB reader records
    assert p["soc"] == "SS928V100" and p["soc_source"] == "detected"
    assert has_tool(p, "atc") and not has_tool(p, "aoe") and not has_tool(p, "amct")
    assert native_kernel(p, "Mish", "8.1.RC1")[0] is False
    assert has_tool(resolve_platform(builtin_rules, "Ascend310P3"), "aoe")


def test_native_mish_depends_on_the_cann_release(builtin_rules) -> None:
    p = resolve_platform(builtin_rules, "Ascend310P3")
    assert native_kernel(p, "Mish", "8.1.RC1")[0] is True
    assert native_kernel(p, "Mish", "9.0.0")[0] is True
    older, why = native_kernel(p, "Mish", "5.1.RC2")
    assert older is False and "predates" in why
    unknown, why = native_kernel(p, "Mish", None)
    assert unknown is None and "unknown" in why
    assert native_kernel(p, "Mish", "8.x (header V3)")[0] is None  # a family is not a release


def test_helpers() -> None:
    assert cann_release("8.1.RC1") == (8, 1) and cann_release("5.0 beta") == (5, 0) and cann_release("8.x") is None
    assert short_dtype("DT_FLOAT") == "fp32" and short_dtype("float16") == "fp16" and short_dtype("BF16") == "bf16"
    assert is_assumed({"soc_source": "default (chip not detected)"}) and not is_assumed({"soc_source": "detected"})
