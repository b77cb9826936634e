"""Pick the chip's peaks from ``rules/platforms.yaml`` for the detected (or user-given) SoC.

Which chip, in this order: a ``platform: {soc: ...}`` override of the user's rules; ``--chip``; the core counts and
clock the profile records (``Meta.hardware``, from ``info.json.N``): the chip with those counts, then the nearest
clock -- never the ``default:`` chip or a family alias when the file names its counts, and, when no chip has those
counts, the nearest chip's peaks scaled to them; but a chip the same file names that the table does not know (msprof
op's ``HardwareInfo.jsonl``: Ascend950PR) gets the file's counts and clocks and no peaks (unknown, never another
chip's); a chip name the profile records; the graph's ``soc_version``. Where
that leaves only a family's default (``Ascend910B-class`` -> Ascend910B2) or the ``default:`` chip, the kernels' own
counters decide when they can (:mod:`advisor.core.chip_evidence`: AI cores from cube_utilization, the clock from cycles
over per-block time). ``soc_source`` says which decided, in words a reader can check against the file, and
``soc_decided_by`` what kind of source it was; counters that contradict a chip a file, the user or a name decided
are said in the notes.
"""

from __future__ import annotations

import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from advisor.config.loader import EffectiveRules
from advisor.model import Hardware

if TYPE_CHECKING:
    from advisor.core.chip_evidence import KernelEvidence


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


def _lookup(data: Mapping[str, Any], name: str) -> str | None:
    """The chip entry ``name`` (normalized) stands for: itself, an alias, or the longest alias it starts with
    ("Ascend910B-class" is a 910B, not a 910A); None when none."""
    chips: Mapping[str, Any] = data.get("chips", {})
    aliases: Mapping[str, str] = data.get("aliases", {})
    lookup = {k.upper(): k for k in chips}
    key = name.upper()
    exact_alias = {a.upper(): t for a, t in aliases.items()}
    if key in lookup:
        return lookup[key]
    if key in exact_alias:
        return exact_alias[key]
    prefixes = sorted((a for a in exact_alias if key.startswith(a)), key=len, reverse=True)
    return exact_alias[prefixes[0]] if prefixes else None


def family_members(data: Mapping[str, Any], name: str | None) -> list[str]:
    """The chips a family name stands for: ``Ascend910B-class`` (inferred from split aic_/aiv_ metric columns) ->
    the split-core chips; ``Ascend910B`` -> every chip whose name it begins (Ascend910B1..B4); [] for a chip's own
    name, a one-chip alias or an unknown name."""
    chips: Mapping[str, Any] = data.get("chips", {})
    if not name:
        return []
    if str(name).endswith("-class"):
        return [n for n, spec in chips.items() if spec.get("split_cores")]
    norm = normalize_soc(name)
    if not norm or norm.upper() in {k.upper() for k in chips}:
        return []
    members = [n for n in chips if n.upper().startswith(norm.upper())]
    return members if len(members) > 1 else []


def exact_chip(data: Mapping[str, Any], name: str | None) -> str | None:
    """The chip entry named exactly (or by a one-chip alias such as ``Ascend310P``); None for a family
    (``Ascend910B-class``, ``Ascend910B``: chips with different core counts) or an unknown name."""
    norm = normalize_soc(name)
    if not norm or norm.endswith("-CLASS") or str(name).endswith("-class") or family_members(data, name):
        return None
    return _lookup(data, norm)


DECIDED_BY = ("file", "evidence", "user", "name", "family", "default")
"""What decided the chip (``platform["soc_decided_by"]``): the core counts a file records (info.json, msprof op's
HardwareInfo.jsonl), the kernels' own counters (:mod:`advisor.core.chip_evidence`), the user (``--chip``, ``platform:
{soc}`` in the rules), a chip name the run records, a family name's default, or the ``default:`` chip."""


def counts_decided(platform: Mapping[str, Any]) -> bool:
    """The platform's core counts are the run's chip's (a file, the kernels' counters, the user or an exact name
    decided), not a family's or the default's guess."""
    by = platform.get("soc_decided_by")
    if by is not None:
        return by in ("file", "evidence", "user", "name")
    return not str(platform.get("soc_source", "")).startswith("default")  # a platform built by resolve_platform


def resolve_platform(rules: EffectiveRules, chip_hint: str | None,
                     hardware: Hardware | None = None) -> dict[str, Any]:
    """The platform dict for the user's ``soc`` override, else ``hardware`` (core counts and clock the profile
    records), else ``chip_hint``, else the default, with user overrides applied.

    ``soc`` says which entry was used, ``soc_source`` why (user, the file and its numbers, detected, default) and
    ``soc_decided_by`` what kind of source that is (:data:`DECIDED_BY`).
    """
    data = rules.for_kb("platforms")
    chips: dict[str, dict[str, Any]] = data.get("chips", {})
    overrides = dict(rules.platform_overrides)
    wanted = overrides.pop("soc", None)
    if not wanted and hardware is not None and unknown_named_chip(data, hardware):
        return file_platform(hardware, overrides)
    if not wanted and hardware is not None and (match := match_hardware(chips, hardware)) is not None:
        out = match.platform(chips)
        out.update(overrides)
        out["soc_decided_by"] = "file"
        return out
    source = "user" if wanted else "detected"
    decided_by = "user" if wanted else "name"
    if not wanted:
        wanted = chip_hint
    name = normalize_soc(wanted)
    chosen = _lookup(data, name) if name else None
    if chosen is None:
        chosen = data.get("default", next(iter(chips), None))
        source = "default (chip not detected)" if not name else f"default ({name} not in rules/platforms.yaml)"
        decided_by = "default"
    elif decided_by == "name" and family_members(data, wanted):
        source = (f"detected {wanted}, a family (" + ", ".join(family_members(data, wanted))
                  + f"): its default {chosen}; no core counts recorded")
        decided_by = "family"
    out = dict(chips.get(chosen, {}))
    out.update(overrides)
    out["soc"] = chosen
    out["soc_source"] = source
    out["soc_decided_by"] = decided_by
    if decided_by == "family":  # the counts the family's chips have (advisor.toolkit.cores picks among them)
        out["soc_family"] = {n: [int(chips[n]["ai_core_num"]), _vector_count(chips[n])]
                             for n in family_members(data, wanted)}
    return out


def platform_for_run(rules: EffectiveRules, profile_chip: str | None, hardware: Hardware | None,
                     user_chip: str | None = None, graph_soc: str | None = None,
                     evidence: KernelEvidence | None = None) -> tuple[dict[str, Any], list[str]]:
    """The platform of one analyzed run, and notes for the report: ``--chip`` (``user_chip``) wins, and a chip the
    profile names that disagrees with it is said; else :func:`resolve_platform` on what the profile records; where
    that is only a family's default or the default chip, the kernels' own counters (``evidence``,
    :mod:`advisor.core.chip_evidence`) decide when they can, and ``soc_source`` says what they measured and what they
    overrode. Counters that contradict a chip a file, the user or an exact name decided are said in a note; that
    chip stays."""
    data = rules.for_kb("platforms")
    chips = data.get("chips", {})
    unknown = unknown_named_chip(data, hardware) if hardware is not None else None
    match = match_hardware(chips, hardware) if hardware is not None and not unknown else None
    named_exactly = exact_chip(data, profile_chip)
    notes: list[str] = []

    def disagree(platform: dict[str, Any], who: str) -> None:
        if evidence is not None and (bad := contradictions(evidence, platform)):
            notes.append(f"the kernels' counters in {evidence.file} ({evidence.describe()}) contradict {who}: "
                         f"{'; '.join(bad)}; the peaks stay {platform['soc']}'s")

    if user_chip:
        platform = resolve_platform(rules, user_chip)
        if platform["soc_decided_by"] in ("name", "family"):
            platform["soc_source"] = f"--chip {user_chip}"
            platform["soc_decided_by"] = "user"
        named = unknown or (match.soc if match is not None else named_exactly)
        if named and named != platform["soc"]:
            why = (match.describe() if match is not None else
                   f"{hardware.source} names {unknown}" if unknown and hardware is not None else
                   f"the profile records {profile_chip}")
            notes.append(f"--chip {user_chip} disagrees with the chip the profile names ({why}); the peaks are "
                         f"{platform['soc']}'s, as asked")
        disagree(platform, f"--chip {user_chip}")
        return platform, notes
    platform = resolve_platform(rules, profile_chip or graph_soc, hardware)
    if unknown and hardware is not None and platform.get("soc_hardware", {}).get("match") == "file only":
        notes.append(unknown_chip_note(platform, hardware))
        disagree(platform, hardware.source)
        return platform, notes
    if match is not None and platform["soc_source"] == match.describe():
        notes.append(f"chip from {match.describe()}")
        if named_exactly and named_exactly != match.soc:
            notes.append(f"the profile also names {profile_chip}, which its core counts contradict; the peaks "
                         f"follow the counts ({match.soc})")
        disagree(platform, hardware.source if hardware is not None else "the profile's core counts")
        return platform, notes
    if platform["soc_decided_by"] in ("user", "name"):
        disagree(platform, "the rules' platform soc" if platform["soc_decided_by"] == "user"
                 else f"the chip the profile names ({profile_chip or graph_soc})")
        return platform, notes
    if evidence is None:
        return platform, notes
    for why in evidence.rejected:
        notes.append(f"chip: the kernels' counters in {evidence.file}: {why}")
    if not evidence.decides:
        return platform, notes
    family = family_members(data, profile_chip or graph_soc)
    found, why = match_evidence(chips, evidence, family or None)
    if found is None:
        notes.append(f"chip: the kernels' counters in {evidence.file} ({evidence.describe()}) do not decide "
                     f"({why}); the peaks are {platform['soc']}'s ({platform['soc_source']})")
        return platform, notes
    out = found.platform(chips)
    out.update({k: v for k, v in rules.platform_overrides.items() if k != "soc"})
    head = found.describe().split(" -> ", 1)[1]
    was = (f"instead of {platform['soc']}, the default of {profile_chip or graph_soc}"
           if platform["soc_decided_by"] == "family" else f"instead of {platform['soc']}, the default chip")
    if platform["soc"] == found.soc:
        was = f"confirms {platform['soc']}, the default of {profile_chip or graph_soc or 'rules/platforms.yaml'}"
    out["soc_source"] = f"{evidence.file} kernel counters: {evidence.describe()} -> {head}; {was}"
    out["soc_decided_by"] = "evidence"
    out["soc_hardware"] = {**out["soc_hardware"], "source": f"{evidence.file} kernel counters",
                           "ai_cores": evidence.ai_cores, "vector_cores": None,
                           "min_ai_cores": evidence.min_ai_cores, "min_vector_cores": evidence.min_vector_cores,
                           "also": list(found.also)}
    notes.append(f"chip from {out['soc_source']}")
    return out, notes


# ---------------------------------------------------------------------------------------------------------
# a chip the profile names that rules/platforms.yaml does not know
# ---------------------------------------------------------------------------------------------------------
PEAK_KEYS = ("fp16_tflops", "int8_tops", "fp32_vector_tflops", "cube_fp32_tflops", "hbm_gbps", "l2_mib")
"""The chip's peaks: known only from ``rules/platforms.yaml`` (or the user's ``platform:`` overrides), never from a
profile, so a chip the table does not know has none -- ``None`` in the platform, listed in ``peaks_unknown``."""


def unknown_named_chip(data: Mapping[str, Any], hardware: Hardware) -> str | None:
    """The chip ``hardware``'s file names (msprof op ``HardwareInfo.jsonl`` ``chip info``) when ``rules/platforms.yaml``
    knows neither it nor an alias of it, and the file records its core counts; None otherwise."""
    if not hardware.chip or not hardware.ai_cores:
        return None
    name = normalize_soc(hardware.chip)
    return hardware.chip if name and _lookup(data, name) is None else None


def file_platform(hardware: Hardware, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The platform of a chip the table does not know: its core counts and clocks from the file that names it, its
    peaks unknown (``None``, listed in ``peaks_unknown``) unless the user's ``platform:`` overrides give them --
    another chip's peaks, scaled or not, would be measured against a different design (Ascend950PR, arch 3510, is
    no 910B with other counts)."""
    hw = hardware
    out: dict[str, Any] = {
        "ai_core_num": hw.ai_cores, "vector_core_num": hw.vector_cores or 0,
        "split_cores": bool(hw.ai_cores and hw.vector_cores), "cube_freq_mhz": hw.clock_mhz,
        "vector_freq_mhz": hw.vector_clock_mhz, **dict.fromkeys(PEAK_KEYS),
        "source": f"{hw.source}: core counts and clocks as recorded; peaks not known ({hw.chip} is not in "
                  "rules/platforms.yaml)"}
    out.update(overrides)
    out["peaks_unknown"] = [k for k in PEAK_KEYS if out.get(k) is None]
    arch = f", arch {hw.arch}" if hw.arch else ""
    out["soc"] = hw.chip
    out["soc_source"] = (f"{hw.source}: {hw.chip}{arch}, {hw.describe()} -> not in rules/platforms.yaml: its core "
                         "counts and clocks from the file, "
                         + ("its peaks unknown" if out["peaks_unknown"] else "its peaks from the rules' platform:"))
    out["soc_decided_by"] = "file"
    out["soc_hardware"] = {"source": hw.source, "ai_cores": hw.ai_cores, "vector_cores": hw.vector_cores,
                           "clock_mhz": hw.clock_mhz, "vector_clock_mhz": hw.vector_clock_mhz, "chip": hw.chip,
                           "arch": hw.arch, "match": "file only"}
    return out


def unknown_chip_note(platform: Mapping[str, Any], hardware: Hardware) -> str:
    """The report note for :func:`file_platform`: what the file says, which peaks are unknown and how to give them."""
    unknown = list(platform.get("peaks_unknown") or [])
    head = (f"chip {hardware.chip} from {hardware.source} ({hardware.describe()}): not in rules/platforms.yaml, so the "
            "core counts and clocks are the file's")
    if not unknown:
        return head + "; its peaks are the ones the rules' platform: gives"
    return (head + f"; its peaks ({', '.join(unknown)}) are unknown -- not borrowed from another chip -- so nothing "
            "is measured against them; give them with --rules (platform: {"
            + ", ".join(f"{k}: ..." for k in sorted(unknown, key=_GIVE_FIRST.index)[:2]) + "})")


_GIVE_FIRST = ("hbm_gbps", "fp16_tflops", "fp32_vector_tflops", "int8_tops", "cube_fp32_tflops", "l2_mib")
"""The unknown peaks a note asks for first: bandwidth and the fp16 cube peak place ops on the roofline."""


# ---------------------------------------------------------------------------------------------------------
# the chip a profile's core counts and clock describe
# ---------------------------------------------------------------------------------------------------------
CLOCK_TOLERANCE = 0.005
"""Relative clock difference below which a chip's peaks are used as they are: info.json writes the clock as an
integer or a float string ("1800", "1800.000000"), a chip table rounds to the MHz; half a percent covers both and
no two chips of one core count are that close (910B1/B2: 1850/1800 MHz, 2.7 %)."""

CUBE_PEAKS = ("fp16_tflops", "int8_tops", "cube_fp32_tflops")
"""Peaks of the cube: AI cores x MACs per cycle x clock, so they scale with AI cores and clock (DOMAIN.md 5.1)."""

VECTOR_PEAKS = ("fp32_vector_tflops",)
"""Peaks of the vector units: vector cores (the AI cores where a chip has no separate vector cores) x clock."""


@dataclass(frozen=True)
class ChipMatch:
    """The chip of ``rules/platforms.yaml`` a profile's :class:`Hardware` describes, and how well."""

    soc: str
    hardware: Hardware
    counts_match: bool
    """False: no chip has these counts; ``soc`` is the nearest and its peaks are scaled to them."""
    chip_clock: float | None
    also: tuple[str, ...] = ()
    """Other chips with the same counts and clock (e.g. Ascend910B1 and Ascend910_9391)."""

    @property
    def clock_scaled(self) -> bool:
        hw, chip = self.hardware.clock_mhz, self.chip_clock
        return hw is not None and chip is not None and abs(hw - chip) > CLOCK_TOLERANCE * chip

    def describe(self) -> str:
        """``info.json.0: 20 AI cores, 40 vector cores, 1800 MHz -> Ascend910B3`` (and what was scaled)."""
        head = f"{self.hardware.source}: {self.hardware.describe()} -> "
        if not self.counts_match:
            return (head + f"no chip in rules/platforms.yaml has these core counts; the peaks of the nearest, "
                           f"{self.soc}, scaled to them")
        text = head + self.soc
        if self.clock_scaled:
            text += f" (the nearest clock, {self.chip_clock:g} MHz; compute peaks scaled to {self.hardware.clock_mhz:g} MHz)"
        if self.also:
            text += (f" (as near: {', '.join(self.also)}, with the same counts)" if self.clock_scaled else
                     f" (same counts and clock as {', '.join(self.also)})")
        return text

    def platform(self, chips: Mapping[str, Mapping[str, Any]]) -> dict[str, Any]:
        """The chip's entry, its peaks scaled to the profile's counts and clock where they differ."""
        out = dict(chips[self.soc])
        if not self.counts_match or self.clock_scaled:
            out = _scaled(out, self.hardware)
        out["soc"] = self.soc
        out["soc_source"] = self.describe()
        out["soc_hardware"] = {"source": self.hardware.source, "ai_cores": self.hardware.ai_cores,
                               "vector_cores": self.hardware.vector_cores, "clock_mhz": self.hardware.clock_mhz,
                               "match": self.kind}
        return out

    @property
    def kind(self) -> str:
        """``counts`` (a chip with these counts and clock), ``counts, clock scaled`` or ``scaled`` (no chip has
        these counts)."""
        if not self.counts_match:
            return "scaled"
        return "counts, clock scaled" if self.clock_scaled else "counts"


def _vector_count(spec: Mapping[str, Any]) -> int:
    return int(spec.get("vector_core_num") or 0)


def _same_counts(spec: Mapping[str, Any], hw: Hardware) -> bool:
    if spec.get("ai_core_num") != hw.ai_cores:
        return False
    return hw.vector_cores is None or _vector_count(spec) == hw.vector_cores


def _clock_distance(spec: Mapping[str, Any], hw: Hardware) -> tuple[int, float]:
    """How far the chip's clock is from the profile's (chips whose clock is unknown after those whose is)."""
    clock = spec.get("cube_freq_mhz")
    if clock is None or hw.clock_mhz is None:
        return (1, 0.0)
    return (0, abs(float(clock) - hw.clock_mhz))


def _count_distance(spec: Mapping[str, Any], hw: Hardware) -> tuple[int, float]:
    """How far the chip's core counts are from the profile's: a chip with separate vector cores (or without) when
    the profile's has them (or not) first, then the ratio of AI cores."""
    split_differs = hw.vector_cores is not None and (_vector_count(spec) > 0) != (hw.vector_cores > 0)
    ratio = abs(math.log(int(spec["ai_core_num"]) / hw.ai_cores)) if hw.ai_cores else math.inf
    return (int(split_differs), ratio)


def match_hardware(chips: Mapping[str, Mapping[str, Any]], hw: Hardware) -> ChipMatch | None:
    """The chip with ``hw``'s core counts, then the nearest clock; when none has those counts, the nearest chip
    (its peaks to be scaled). None when ``hw`` records no AI core count."""
    if not hw.ai_cores or hw.ai_cores <= 0 or not chips:
        return None
    same = [n for n, spec in chips.items() if _same_counts(spec, hw)]
    if same:
        same.sort(key=lambda n: _clock_distance(chips[n], hw))
        best = same[0]
        also = tuple(n for n in same[1:] if _clock_distance(chips[n], hw) == _clock_distance(chips[best], hw))
        return ChipMatch(best, hw, True, _clock_of(chips[best]), also)
    nearest = min(chips, key=lambda n: (*_count_distance(chips[n], hw), *_clock_distance(chips[n], hw)))
    return ChipMatch(nearest, hw, False, _clock_of(chips[nearest]))


def _clock_of(spec: Mapping[str, Any]) -> float | None:
    clock = spec.get("cube_freq_mhz")
    return float(clock) if clock is not None else None


def _scaled(spec: dict[str, Any], hw: Hardware) -> dict[str, Any]:
    """``spec`` with its compute peaks scaled to ``hw``'s core counts and clock, its counts and clock replaced, and
    its ``source`` saying so. Memory bandwidth and capabilities are the chip's (they do not follow core counts)."""
    out = dict(spec)
    aic_ratio = hw.ai_cores / int(spec["ai_core_num"]) if hw.ai_cores else 1.0
    chip_clock = _clock_of(spec)
    clock_ratio = hw.clock_mhz / chip_clock if hw.clock_mhz and chip_clock else 1.0
    chip_vec = _vector_count(spec)
    vec_ratio = hw.vector_cores / chip_vec if chip_vec and hw.vector_cores else aic_ratio
    for key in CUBE_PEAKS:
        if key in out:
            out[key] = float(out[key]) * aic_ratio * clock_ratio
    for key in VECTOR_PEAKS:
        if key in out:
            out[key] = float(out[key]) * vec_ratio * clock_ratio
    if hw.ai_cores:
        out["ai_core_num"] = hw.ai_cores
    if hw.vector_cores is not None:
        out["vector_core_num"] = hw.vector_cores
    if hw.clock_mhz is not None:
        out["cube_freq_mhz"] = hw.clock_mhz
    out["source"] = f"{spec.get('source', '')}; compute peaks scaled to {hw.describe()} ({hw.source})"
    return out


@lru_cache(maxsize=1)
def _builtin_platforms() -> dict[str, Any]:
    from advisor.config.loader import builtin_rules_dir, load_rules_file

    return load_rules_file(builtin_rules_dir() / "platforms.yaml", validate=False)


# ---------------------------------------------------------------------------------------------------------
# matching the kernels' counters (advisor.core.chip_evidence) to a chip
# ---------------------------------------------------------------------------------------------------------
def match_evidence(chips: Mapping[str, Mapping[str, Any]], ev: KernelEvidence,
                   candidates: Sequence[str] | None = None) -> tuple[ChipMatch | None, str]:
    """The chip of ``chips`` (among ``candidates``: the named family's) the evidence describes, and why not when
    None. With an AI core count: the chips with that count and enough vector cores, then the nearest clock (a count
    no chip has: the nearest chip's peaks scaled, as for info.json). With a clock alone: the chips at that clock
    with enough cores, when they all have the same counts."""
    names = [n for n in (candidates or chips) if n in chips]
    if not names or not ev.decides:
        return None, "no chip to match"
    hw = ev.hardware()

    def enough(spec: Mapping[str, Any]) -> bool:
        vec = int(spec.get("vector_core_num") or 0)
        return (ev.min_vector_cores is None or vec >= ev.min_vector_cores or
                (vec == 0 and int(spec["ai_core_num"]) >= ev.min_vector_cores)) and \
            (ev.min_ai_cores is None or int(spec["ai_core_num"]) >= ev.min_ai_cores)

    def clock_gap(n: str) -> tuple[int, float]:
        c = chips[n].get("cube_freq_mhz")
        return (1, 0.0) if c is None or ev.clock_mhz is None else (0, abs(float(c) - ev.clock_mhz))

    if ev.ai_cores is not None:
        same = [n for n in names if int(chips[n]["ai_core_num"]) == ev.ai_cores and enough(chips[n])]
        if same:
            same.sort(key=clock_gap)
            best = same[0]
            also = tuple(n for n in same[1:] if clock_gap(n) == clock_gap(best))
            return ChipMatch(best, hw, True, _clock_of(chips[best]), also), ""
        split = [n for n in names if enough(chips[n])] or names
        nearest = min(split, key=lambda n: (abs(math.log(int(chips[n]["ai_core_num"]) / ev.ai_cores)), clock_gap(n)))
        return ChipMatch(nearest, hw, False, _clock_of(chips[nearest])), ""
    at_clock = [n for n in names if chips[n].get("cube_freq_mhz") is not None
                and abs(float(chips[n]["cube_freq_mhz"]) - float(ev.clock_mhz or 0)) <= CLOCK_TOLERANCE *
                float(chips[n]["cube_freq_mhz"]) and enough(chips[n])]
    counts = {(int(chips[n]["ai_core_num"]), int(chips[n].get("vector_core_num") or 0)) for n in at_clock}
    if len(counts) == 1:
        (aic, _), = counts
        return ChipMatch(at_clock[0], Hardware(aic, None, ev.clock_mhz, hw.source), True,
                         _clock_of(chips[at_clock[0]]), tuple(at_clock[1:])), ""
    if not at_clock:
        return None, f"no chip in rules/platforms.yaml runs at {ev.clock_mhz:g} MHz with that many cores"
    return None, f"{ev.clock_mhz:g} MHz fits {', '.join(at_clock)}, whose core counts differ"


def contradictions(ev: KernelEvidence, platform: Mapping[str, Any]) -> list[str]:
    """Where the counters disagree with the chip ``platform`` describes (its AI / vector core counts)."""
    aic, vec = platform.get("ai_core_num"), int(platform.get("vector_core_num") or 0)
    out = []
    if ev.ai_cores is not None and aic and ev.ai_cores != int(aic):
        out.append(f"{ev.ai_cores} AI cores, not {aic}")
    elif ev.min_ai_cores is not None and aic and ev.min_ai_cores > int(aic):
        out.append(f"at least {ev.min_ai_cores} AI cores, not {aic}")
    if ev.min_vector_cores is not None and vec and ev.min_vector_cores > vec:
        out.append(f"at least {ev.min_vector_cores} vector cores, not {vec}")
    return out


def builtin_chip_for(hw: Hardware) -> ChipMatch | None:
    """:func:`match_hardware` against the built-in ``rules/platforms.yaml`` (ingest names the chip with it; the
    analysis matches again against the effective rules, which a user may have extended)."""
    return match_hardware(_builtin_platforms().get("chips", {}), hw)


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
