"""The report's ``kernels`` (advisor.toolkit.kernels) as what a kernel developer reads: one heading per kernel
(time, launch against the cores, bound) and its speed-of-light rows -- each pipe of each side against saturation.
Shared by the terminal, Markdown and HTML renderers so the three show the same figures."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from advisor.common.units import fmt_us

MAX_KERNELS = 6
"""Kernels shown in the human-readable reports (the JSON keeps every one)."""


@dataclass(frozen=True)
class SolRow:
    side: str
    unit: str
    ratio: float
    of_saturation: float
    """ratio / saturation, for the bar (1.0 = saturated)."""
    blocks: str
    """``0.59-0.64`` over the blocks, or empty."""
    column: str


@dataclass(frozen=True)
class KernelSection:
    title: str
    detail: str
    rows: list[SolRow]


def kernel_sections(kernels: Sequence[Mapping[str, Any]] | None, limit: int = MAX_KERNELS) -> list[KernelSection]:
    out = []
    for k in list(kernels or [])[:limit]:
        rows = []
        for s in k.get("sides") or []:
            label = str(s.get("label") or s.get("side"))
            if s.get("waits_for_other"):
                label += " (waits)"
            for u in s.get("units") or []:
                ratio = u.get("ratio")
                if ratio is None:
                    continue
                low, high = u.get("low"), u.get("high")
                spread = f"{low:.2f}-{high:.2f}" if low is not None and high is not None and high - low >= 0.005 \
                    else ""
                rows.append(SolRow(label, str(u["unit"]), float(ratio), float(u.get("of_saturation") or 0.0),
                                   spread, str(u.get("column") or "")))
        out.append(KernelSection(_title(k), _detail(k), rows))
    return out


def _title(k: Mapping[str, Any]) -> str:
    rank = f"rank {k['rank']}: " if k.get("rank") is not None else ""
    launches = int(k.get("launches") or 1)
    time = fmt_us(float(k.get("duration_us") or 0.0)) + (f" x {launches} launches" if launches > 1 else "")
    return f"{rank}{k['name']} ({k.get('core')}, {time})"


def _detail(k: Mapping[str, Any]) -> str:
    parts = []
    blocks = f"Block Dim {k.get('block_dim')}" + (f", Mix Block Dim {k['mix_block_dim']}"
                                                  if k.get("mix_block_dim") else "")
    launch = [opt[0] for opt in (k.get("launch") or []) if opt]
    if launch:
        best = max(launch, key=lambda x: x.get("fill") or 0.0)
        family = "vector cores" if best.get("family") == "vector" else "AI cores"
        blocks += (f" on {best['cores']} {family}: {best['waves']} wave(s), last {best['last_wave_blocks']} of "
                   f"{best['cores']}, {float(best.get('fill') or 0):.0%} of the core slots")
        if not (k.get("cores") or {}).get("decided"):
            blocks += " (chip family: the best case)"
    else:
        blocks += " (core count unknown: --chip names the chip)"
    parts.append(blocks)
    if k.get("bound"):
        parts.append(f"bound: {k['bound']}")
    mem = k.get("memory") or {}
    if mem.get("achieved_gbps") is not None:
        share = mem.get("share_of_peak")
        parts.append(f"global memory {mem['achieved_gbps']:.1f} GB/s"
                     + (f" ({share:.0%} of {mem.get('peak_gbps'):g} GB/s"
                        + (", assumed" if mem.get("peak_assumed") else "") + ")" if share is not None else ""))
    return "; ".join(parts)


def kernel_moved_text(k: dict[str, Any], limit: int = 3) -> str:
    """``aiv mte3 0.36 -> 0.05; aiv scalar 0.63 -> 0.93``: the metrics of a kernel that moved most."""
    return "; ".join(f"{m['side']} {m['unit']} {m['base']:.2f} → {m['new']:.2f}" for m in k["moved"][:limit])


def kernel_predicted_text(k: dict[str, Any]) -> str:
    """``predicted 15.50 ms, measured 16.53 ms (107 %): realized``."""
    p = k["predicted"]
    if p["verdict"] in ("unknown", "no prediction"):
        return p["verdict"]
    share = f" ({p['realized_share']:.0%})" if p.get("realized_share") is not None else ""
    return f"predicted {fmt_us(p['saving_us'])}, measured {fmt_us(p['realized_us'])}{share}: {p['verdict']}"


__all__ = ["MAX_KERNELS", "KernelSection", "SolRow", "kernel_moved_text", "kernel_predicted_text", "kernel_sections"]
