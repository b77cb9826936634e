"""Pick the chip's peaks from ``rules/platforms.yaml`` for the detected (or user-given) SoC."""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from advisor.rules import EffectiveRules


def normalize_soc(name: str | None) -> str | None:
    """``Ascend910B1`` / ``ascend910b1`` / ``910B1`` -> ``Ascend910B1``."""
    if not name:
        return None
    text = str(name).strip()
    if text.upper().startswith("SS9"):  # SVP SoCs (SS928V100...) are not Ascend-numbered
        return text.upper()
    m = re.search(r"(?i)(?:ascend)?\s*(\d{3}[a-z]?[\w]*)", text)
    if not m:
        return text
    return "Ascend" + m.group(1).upper().replace("_93", "_93")


def resolve_platform(rules: EffectiveRules, chip_hint: str | None) -> dict[str, Any]:
    """The platform dict for ``chip_hint`` (or the user's ``chip``/default), with user overrides applied.

    ``soc`` says which entry was used and ``soc_source`` why (detected, user, default).
    """
    data = rules.for_kb("platforms")
    chips: dict[str, dict[str, Any]] = data.get("chips", {})
    aliases: dict[str, str] = data.get("aliases", {})
    overrides = dict(rules.platform_overrides)
    wanted = overrides.pop("soc", None)
    source = "user" if wanted else "detected"
    if not wanted:
        wanted = chip_hint
    name = normalize_soc(wanted)
    chosen = None
    if name:
        lookup = {k.upper(): k for k in chips}
        key = name.upper()
        exact_alias = {a.upper(): t for a, t in aliases.items()}
        if key in lookup:
            chosen = lookup[key]
        elif key in exact_alias:
            chosen = exact_alias[key]
        else:  # the longest alias the name starts with: "Ascend910B-class" is a 910B, not a 910A
            prefixes = sorted((a for a in exact_alias if key.startswith(a)), key=len, reverse=True)
            chosen = exact_alias[prefixes[0]] if prefixes else None
    if chosen is None:
        chosen = data.get("default", next(iter(chips), None))
        source = "default (chip not detected)" if not name else f"default ({name} not in rules/platforms.yaml)"
    out = dict(chips.get(chosen, {}))
    out.update(overrides)
    out["soc"] = chosen
    out["soc_source"] = source
    return out


# ---------------------------------------------------------------------------------------------------------
# chip capabilities (rules/platforms.yaml: cube_dtypes, dtypes, tools, native_ops, cube_fp32_tflops)
# ---------------------------------------------------------------------------------------------------------
_DTYPE_NAMES = {"FLOAT16": "fp16", "FP16": "fp16", "HALF": "fp16", "FLOAT": "fp32", "FLOAT32": "fp32", "FP32": "fp32",
                "BF16": "bf16", "BFLOAT16": "bf16", "HF32": "hf32", "INT8": "int8", "UINT8": "int8", "INT4": "int4",
                "HIFLOAT8": "hif8", "FLOAT8_E4M3FN": "fp8", "FLOAT8_E5M2": "fp8"}


def short_dtype(dtype: str) -> str:
    """``DT_FLOAT16`` / ``FLOAT16`` / ``float16`` -> ``fp16`` (the names ``platforms.yaml`` uses)."""
    key = str(dtype).strip().upper()
    key = key[3:] if key.startswith("DT_") else key
    return _DTYPE_NAMES.get(key, key.lower())


def is_assumed(platform: Mapping[str, Any]) -> bool:
    """The platform is the default, not the chip the data came from: capability statements are assumptions."""
    return str(platform.get("soc_source", "")).startswith("default")


def supports_dtype(platform: Mapping[str, Any], dtype: str) -> bool:
    """Whether advice may name ``dtype`` for this chip (e.g. bf16 only on Atlas A2/A3-class chips)."""
    return short_dtype(dtype) in set(platform.get("dtypes") or ("fp32", "fp16", "int8"))


def cube_supports(platform: Mapping[str, Any], dtype: str) -> bool:
    """Whether the cube computes ``dtype`` natively."""
    return short_dtype(dtype) in set(platform.get("cube_dtypes") or ("fp16", "int8"))


def has_tool(platform: Mapping[str, Any], tool: str) -> bool:
    """Whether ``tool`` (atc, aoe, amct, msprof-op) exists for this chip's toolchain."""
    tools = platform.get("tools")
    return True if tools is None else tool in set(tools)


def cann_release(version: object) -> tuple[int, int] | None:
    """``8.1.RC1`` -> (8, 1); ``5.0 beta`` -> (5, 0); a family such as ``8.x (header V3)`` or None -> None."""
    if not version:
        return None
    m = re.match(r"^\s*(\d+)\.(\d+)", str(version))
    return (int(m.group(1)), int(m.group(2))) if m else None


def native_kernel(platform: Mapping[str, Any], op: str, cann_version: object) -> tuple[bool | None, str]:
    """Whether ATC's op set has a native ``op`` kernel for this chip at this CANN release, and why.

    True: listed for the chip and the release is at least the one checked; False: not listed for the chip, or the
    release predates the one checked (unverified there); None: listed, but the release is unknown (the advice must
    state the assumption).
    """
    soc = platform.get("soc") or "this chip"
    table = platform.get("native_ops")
    if table is None:
        return None, f"no native-kernel data for {soc}"
    entry = table.get(op)
    if entry is None:
        return False, f"{soc}'s ATC op set has no native {op} kernel"
    since = str(entry["since_cann"])
    need, have = cann_release(since), cann_release(cann_version)
    if have is None:
        return None, (f"CANN {since}'s ATC op set has a native {op} kernel for {soc}; the CANN version of this run "
                      f"is unknown{f' ({cann_version})' if cann_version else ''}")
    if need is not None and have < need:
        return False, (f"CANN {cann_version} predates {since}, the first release whose op set was checked to hold a "
                       f"native {op} kernel for {soc}")
    return True, f"CANN {cann_version}'s ATC op set has a native {op} kernel for {soc} (listed since {since})"
