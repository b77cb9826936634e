"""Pick the chip's peaks from ``rules/platforms.yaml`` for the detected (or user-given) SoC."""

from __future__ import annotations

import re
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
