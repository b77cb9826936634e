"""What every report must keep, whatever the input: checks an engineer would make before trusting it.

A report that breaks one of these misleads its reader; the test suite checks every report it produces (the
environment variable ``ADVISOR_SELF_CHECK=1`` makes ``advisor analyze`` refuse to write such a report), and
``advisor`` users can run :func:`problems` on saved reports.

1. no saving above the analyzed window, no recoverable total above it;
2. no share above 100 % in a title;
3. no setting advised in two directions (``X = True`` and ``X = False``);
4. no two top-level findings with the same title;
5. severities consistent with the share of the window: a score of 100 carries no major or critical finding, a
   major or critical finding recovers at least 1 % of the window, and a finding recovering 15 % or more is not
   minor or info;
6. no arithmetic advice that increases work: padding an axis that is already a multiple of the cube's fractal
   (16), or padding to a smaller size;
7. advice never cites project-internal files (DESIGN/DOMAIN/FORMATS/PEER notes) users do not have;
8. one finding per op per rule: no op named by two top-level findings of one rule on one rank, nor by two findings
   of one rule with the same fix on other ranks (one cause over the ranks is one finding); findings about op
   sequences (evidence ``sequence``) are compared by their patterns, none the same as, a rotation or a
   sub-sequence of another's -- their op names recur in other sequences (a forward and a backward Add are two
   launches of one kernel name).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from typing import Any

from advisor.common.units import fmt_us

_BOOL_SET = re.compile(r"\b([A-Za-z_][A-Za-z0-9_.]*)\s*[=:]\s*(True|False|true|false)\b")
_PCT = re.compile(r"(\d+(?:\.\d+)?)\s*%")
_INTERNAL = re.compile(r"\b(DOMAIN|FORMATS|DESIGN|PEER)\.md\b")
_PAD = re.compile(r"\bpad(?:ded|ding)?\s+(?:\w+\s+)?(?:axis\s+)?(?:[A-Za-z]\s*=\s*)?(\d+)\s+(?:up\s+)?to\s+(\d+)",
                  re.IGNORECASE)
FRACTAL = 16


def _all(findings: list[Mapping[str, Any]]) -> Iterator[Mapping[str, Any]]:
    for f in findings:
        yield f
        for s in f.get("symptoms") or []:
            if isinstance(s, Mapping):
                yield s


def _text(f: Mapping[str, Any]) -> str:
    return " ".join(str(x) for x in (f.get("title"), f.get("recommendation"), json.dumps(f.get("fix") or {})))


def problems(report: Mapping[str, Any]) -> list[str]:
    """Every violation of the module's invariants in ``report`` (one line each); empty when it is sound."""
    findings = list(report.get("findings") or [])
    detail = report.get("score_detail") or {}
    window = float(detail.get("window_us") or 0.0)
    everything = list(_all(findings))
    rank_windows = {str(r): float(t.get("window_us") or 0.0)
                    for r, t in ((report.get("time") or {}).get("ranks") or {}).items() if isinstance(t, Mapping)}
    return (_over_the_window(everything, detail, window) + _shares_over_100(everything)
            + _contradictions(everything) + _duplicate_titles(findings)
            + _severities(findings, report.get("score"), window, rank_windows) + _advice(everything)
            + _one_per_op(findings))


def _over_the_window(everything: list[Mapping[str, Any]], detail: Mapping[str, Any], window: float) -> list[str]:
    """No saving, and not the recoverable total, exceeds the analyzed window."""
    if window <= 0:
        return []
    out = [f"{f.get('rule')}: saving {fmt_us(s)} exceeds the analyzed window {fmt_us(window)}"
           for f in everything if (s := float(f.get("estimated_saving_us") or 0.0)) > window * 1.001]
    rec = float(detail.get("recoverable_us") or 0.0)
    if rec > window * 1.001:
        out.append(f"recoverable {fmt_us(rec)} exceeds the analyzed window {fmt_us(window)}")
    return out


def _shares_over_100(everything: list[Mapping[str, Any]]) -> list[str]:
    return [f"{f.get('rule')}: share {p} % in title {str(f.get('title'))[:80]!r}"
            for f in everything for p in _PCT.findall(str(f.get("title") or "")) if float(p) > 100.05]


def _contradictions(everything: list[Mapping[str, Any]]) -> list[str]:
    """A setting advised both True and False."""
    seen: dict[str, set[str]] = {}
    for f in everything:
        for key, value in _BOOL_SET.findall(_text(f)):
            seen.setdefault(key, set()).add(value.lower())
    return [f"{k} advised both True and False" for k, v in sorted(seen.items()) if len(v) > 1]


def _duplicate_titles(findings: list[Mapping[str, Any]]) -> list[str]:
    titles = [f.get("title") for f in findings]
    return [f"duplicate title: {str(t)[:80]}" for t in sorted({t for t in titles if titles.count(t) > 1}, key=str)]


def _severities(findings: list[Mapping[str, Any]], score: Any, window: float,
                rank_windows: Mapping[str, float]) -> list[str]:
    """Severity follows the share of the window at stake (a one-rank finding: that rank's window); a perfect score
    has no critical or major finding."""
    out: list[str] = []
    for f in findings:
        sev = f.get("severity")
        own = rank_windows.get(str(f.get("rank")), window) if f.get("rank") is not None else window
        share = float(f.get("estimated_saving_us") or 0.0) / own if own > 0 else 0.0
        if score is not None and float(score) >= 99.95 and sev in ("critical", "major"):
            out.append(f"score {score} with a {sev} finding {f.get('rule')}")
        if sev in ("critical", "major") and share < 0.01:
            out.append(f"{f.get('rule')}: {sev} for {share:.2%} of the window")
        if sev in ("minor", "info") and share >= 0.15:
            out.append(f"{f.get('rule')}: {sev} for {share:.1%} of the window")
    return out


def _advice(everything: list[Mapping[str, Any]]) -> list[str]:
    """Padding that adds work; internal tools users do not have."""
    out: list[str] = []
    for f in everything:
        for a, b in _PAD.findall(_text(f)):
            frm, to = int(a), int(b)
            if to <= frm or frm % FRACTAL == 0:
                out.append(f"{f.get('rule')}: advises padding {frm} to {to}, which adds work")
        m = _INTERNAL.search(_text(f))
        if m:
            out.append(f"{f.get('rule')}: advice cites {m.group(0)}, which users do not have")
    return out


def _one_per_op(findings: list[Mapping[str, Any]]) -> list[str]:
    """Two findings of one rule naming one op (on one rank, or with the same fix), or about related op sequences."""
    out: list[str] = []
    for i, a in enumerate(findings):
        for b in findings[i + 1:]:
            if a.get("rule") != b.get("rule"):
                continue
            sa, sb = _sequence(a), _sequence(b)
            if sa is not None and sb is not None:
                if _related(sa, sb):
                    out.append(f"{a.get('rule')}: op sequences {' -> '.join(sa)} and {' -> '.join(sb)} are one")
                continue
            shared = sorted(set(a.get("ops") or []) & set(b.get("ops") or []))
            if not shared:
                continue
            ra, rb = _ranks(a), _ranks(b)
            if not ra or not rb or ra & rb:
                out.append(f"{a.get('rule')}: {shared[0]} named by two findings ({str(a.get('title'))[:40]!r}, "
                           f"{str(b.get('title'))[:40]!r})")
            elif _fix(a) is not None and _fix(a) == _fix(b):
                out.append(f"{a.get('rule')}: {shared[0]} named by two findings with one fix on ranks "
                           f"{sorted(ra)} and {sorted(rb)}")
    return out


def _sequence(f: Mapping[str, Any]) -> tuple[str, ...] | None:
    seq = (f.get("evidence") or {}).get("sequence")
    return tuple(str(x) for x in seq) if isinstance(seq, list) and seq else None


def _related(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    """The same pattern, a rotation (equal length) or a contiguous sub-sequence of the other."""
    short, long_ = (a, b) if len(a) <= len(b) else (b, a)
    hay = long_ + long_[:-1] if len(short) == len(long_) else long_
    return any(hay[i:i + len(short)] == short for i in range(len(hay) - len(short) + 1))


def _ranks(f: Mapping[str, Any]) -> set[int]:
    """The ranks a finding holds on (empty: the whole input, e.g. a cluster finding)."""
    if f.get("rank") is not None:
        return {int(f["rank"])}
    return {int(r) for r in f.get("ranks") or []}


def _fix(f: Mapping[str, Any]) -> tuple[Any, Any] | None:
    fix = f.get("fix")
    return (fix.get("kind"), fix.get("summary")) if isinstance(fix, Mapping) else None


__all__ = ["problems"]
