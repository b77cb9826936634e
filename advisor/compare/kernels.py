"""Tuning rounds of a kernel compared: per kernel, its time in each round, the unit that bounds it, the pipe ratios
that moved, and whether the base report's estimated saving was realized (predicted against measured).

Reads the two reports' ``kernels`` sections (advisor.toolkit.kernels) and the base report's kernel findings
(knowledge base ``kernel``), so saved reports compare as well as profiles. The comparison's ``kernels`` key; empty
when neither run is a kernel-development run.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

MOVED = 0.02
"""A pipe ratio that changed by at least this much (absolute share of the side's cycles) has moved."""
MAX_MOVED = 6


def kernel_deltas(base: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    """One entry per kernel of either report (matched by name; a run of one kernel each is matched whatever the
    names, as a renamed kernel between rounds is still the kernel being tuned)."""
    kb, kn = _by_name(base.get("kernels")), _by_name(new.get("kernels"))
    if not kb and not kn:
        return []
    pairs: list[tuple[str, Mapping[str, Any] | None, Mapping[str, Any] | None, bool]]
    if len(kb) == 1 and len(kn) == 1 and set(kb) != set(kn):
        (nb, b), (nn, n) = next(iter(kb.items())), next(iter(kn.items()))
        pairs = [(f"{nb} → {nn}", b, n, True)]
    else:
        pairs = [(name, kb.get(name), kn.get(name), False) for name in dict.fromkeys([*kb, *kn])]
    findings = list(_kernel_findings(base.get("findings") or []))
    new_findings = list(_kernel_findings(new.get("findings") or []))
    return [_delta(name, b, n, paired, findings, new_findings) for name, b, n, paired in pairs]


def _delta(name: str, b: Mapping[str, Any] | None, n: Mapping[str, Any] | None, paired: bool,
           base_findings: Sequence[Mapping[str, Any]], new_findings: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    bu = _num((b or {}).get("duration_us"))
    nu = _num((n or {}).get("duration_us"))
    delta = nu - bu if bu is not None and nu is not None else None
    out: dict[str, Any] = {
        "name": name, "paired_by_position": paired,
        "base_us": bu, "new_us": nu, "delta_us": _round(delta),
        "delta_pct": _round(100.0 * delta / bu) if delta is not None and bu else None,
        "base_bound": (b or {}).get("bound"), "new_bound": (n or {}).get("bound"),
        "base_block_dim": (b or {}).get("block_dim"), "new_block_dim": (n or {}).get("block_dim"),
        "moved": _moved(b, n),
    }
    mine = [f for f in base_findings if f["evidence"].get("kernel") == (b or {}).get("name")]
    launches = max(1, int((b or {}).get("launches") or 1))
    predicted = sum(float(f.get("estimated_saving_us") or 0.0) for f in mine) / launches
    realized = -delta if delta is not None else None
    still = {f["rule"] for f in new_findings if f["evidence"].get("kernel") == (n or {}).get("name")}
    out["predicted"] = {
        "saving_us": _round(predicted), "findings": [
            {"rule": f["rule"], "saving_us": _round(float(f.get("estimated_saving_us") or 0.0) / launches),
             "still_reported": f["rule"] in still} for f in mine],
        "realized_us": _round(realized),
        "realized_share": _round(realized / predicted, 4) if realized is not None and predicted > 0 else None,
        "verdict": _verdict(predicted, realized),
    }
    return out


def _verdict(predicted: float, realized: float | None) -> str:
    """``realized`` (at least the predicted saving), ``partly`` (some of it), ``not realized`` (no gain or a loss),
    ``no prediction`` (the base report estimated nothing), ``unknown`` (a side without the kernel)."""
    if realized is None:
        return "unknown"
    if predicted <= 0:
        return "no prediction"
    if realized >= predicted:
        return "realized"
    return "partly" if realized > 0 else "not realized"


def _moved(b: Mapping[str, Any] | None, n: Mapping[str, Any] | None) -> list[dict[str, Any]]:
    """The pipe ratios that changed by at least :data:`MOVED`, the largest change first."""
    rb, rn = _ratios(b), _ratios(n)
    rows = []
    for key in dict.fromkeys([*rb, *rn]):
        x, y = rb.get(key), rn.get(key)
        if x is None or y is None or abs(y - x) < MOVED:
            continue
        side, unit, column = key
        rows.append({"side": side, "unit": unit, "column": column, "base": round(x, 4), "new": round(y, 4),
                     "delta": round(y - x, 4)})
    rows.sort(key=lambda r: -abs(r["delta"]))
    return rows[:MAX_MOVED]


def _ratios(k: Mapping[str, Any] | None) -> dict[tuple[str, str, str], float]:
    """Each side's pipe ratios and its blocks' spread (1 - mean / max of their core times)."""
    out = {}
    for s in (k or {}).get("sides") or []:
        if s.get("spread") is not None:
            out[(str(s["side"]), "block spread", f"1 - mean / max of {s.get('time_column') or 'core time'}")] = \
                float(s["spread"])
        for u in s.get("units") or []:
            if u.get("ratio") is not None:
                out[(str(s["side"]), str(u["unit"]), str(u.get("column") or ""))] = float(u["ratio"])
    return out


def _by_name(kernels: Iterable[Mapping[str, Any]] | None) -> dict[str, Mapping[str, Any]]:
    return {str(k["name"]): k for k in kernels or [] if k.get("rank") in (None, 0)}


def _kernel_findings(findings: Iterable[Mapping[str, Any]]) -> Iterable[Mapping[str, Any]]:
    """The kernel knowledge base's findings, wherever the hierarchy put them."""
    for f in findings:
        if f.get("kb") == "kernel":
            yield f
        yield from _kernel_findings(f.get("symptoms") or [])


def _num(x: Any) -> float | None:
    return float(x) if isinstance(x, (int, float)) else None


def _round(x: float | None, digits: int = 3) -> float | None:
    return round(x, digits) if x is not None else None


__all__ = ["MOVED", "kernel_deltas"]
