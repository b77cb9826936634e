"""A Finding: one recommendation with the evidence behind it. Reports read findings only."""

from __future__ import annotations

import math
from dataclasses import dataclass, field, fields
from typing import Any, Literal

Severity = Literal["critical", "major", "minor", "info"]
SEVERITIES: tuple[str, ...] = ("critical", "major", "minor", "info")

FIX_KINDS: tuple[str, ...] = ("fusion-switch", "atc-option", "aipp-config", "onnx-rewrite", "code", "config", "env")
"""The documented kinds of :class:`Fix` (docs/plugins.md; the report schema's ``fix.kind`` enum): a Fix of
another kind is refused when it is made, so a report never carries a kind no tool knows how to apply."""


@dataclass
class Fix:
    """A concrete, typed change. ``kind`` says how to apply it; ``data`` holds the payload.

    Kinds: ``fusion-switch`` (data: {"GraphFusion": {...}, "UBFusion": {...}}), ``atc-option`` (data: {"flag":
    "--fusion_switch_file=..."}), ``aipp-config`` (data: {"aipp_op": {...}}), ``onnx-rewrite`` (data: {"rule":
    ...}, ``command``: the ``advisor fix`` call), ``code`` (a source change), ``config``, ``env``.
    """

    kind: str
    summary: str
    data: dict[str, Any] = field(default_factory=dict)
    command: str | None = None

    def __post_init__(self) -> None:
        if self.kind not in FIX_KINDS:
            raise ValueError(f"fix kind {self.kind!r} is not one of {', '.join(FIX_KINDS)}")

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"kind": self.kind, "summary": self.summary}
        if self.data:
            out["data"] = self.data
        if self.command:
            out["command"] = self.command
        return out


@dataclass
class Finding:
    """What a knowledge base reports. Field meanings are the JSON report contract (docs/plugins.md)."""

    kb: str
    rule: str
    title: str
    severity: Severity
    ops: list[str]
    evidence: dict[str, Any]
    estimated_saving_us: float
    basis: str
    recommendation: str
    fix: Fix | None = None
    confidence: float = 0.7
    saving_by_op: dict[str, float] = field(default_factory=dict)
    """Optional per-op split of the saving, so findings from different KBs on one op are not double-counted.
    When empty the engine splits ``estimated_saving_us`` evenly across ``ops``."""
    rank: int | None = None
    symptoms: list[dict[str, Any]] = field(default_factory=list)
    """Findings this root cause explains (filled by the engine, ``advisor.pipeline.hierarchy``): each with its rule, kb,
    title, severity, ops, the saving it measured on those ops, and its evidence."""
    ranks: list[int] = field(default_factory=list)
    """For a finding merged over several ranks (same rule, same title up to its quantities; ``advisor.pipeline.hierarchy``):
    the ranks it holds on (``rank`` is None)."""

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"finding {self.rule}: severity {self.severity!r} not in {SEVERITIES}")
        if not isinstance(self.estimated_saving_us, (int, float)) or math.isnan(self.estimated_saving_us):
            raise ValueError(f"finding {self.rule}: estimated_saving_us must be a number")
        self.estimated_saving_us = max(0.0, float(self.estimated_saving_us))
        self.confidence = min(1.0, max(0.0, float(self.confidence)))

    def to_dict(self) -> dict[str, Any]:
        # field by field, not dataclasses.asdict: that deep-copies op lists and evidence (slow on 100k ops)
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["ops"] = list(self.ops)
        d["fix"] = self.fix.to_dict() if self.fix else None
        d["evidence"] = _jsonable(self.evidence)
        d["saving_by_op"] = {k: round(float(v), 3) for k, v in sorted(self.saving_by_op.items())}
        d["estimated_saving_us"] = round(self.estimated_saving_us, 3)
        if self.rank is None:
            d.pop("rank")
        d["symptoms"] = [dict(x) for x in self.symptoms]
        if not self.ranks:
            d.pop("ranks")
        return d


def _jsonable(value: Any) -> Any:
    """Evidence may hold numpy scalars or NaN; make it strict JSON (NaN -> None)."""
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "item") and not isinstance(value, (str, bytes)):
        try:
            value = value.item()
        except (ValueError, AttributeError):
            return str(value)
    if isinstance(value, float):
        if math.isnan(value) or math.isinf(value):
            return None
        return round(value, 6)
    if value is None or isinstance(value, (str, int, bool)):
        return value
    return str(value)


def table(columns: list[str], rows: list[list[Any]] | list[tuple[Any, ...]], limit: int = 20) -> dict[str, Any]:
    """The small evidence table a finding carries (``evidence["table"]``); rows beyond ``limit`` are counted."""
    rows = [list(r) for r in rows]
    out: dict[str, Any] = {"columns": columns, "rows": rows[:limit]}
    if len(rows) > limit:
        out["more_rows"] = len(rows) - limit
    return out
