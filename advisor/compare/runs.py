"""Compare two analysis runs (BASE and NEW): device time, op types, rules, findings, score, and whether NEW
regressed.

Pure functions over two report dicts plus their per-op-type tables, so BASE and NEW may come from different
layouts (an msprof PROF dir against a torch_npu dir) or from saved JSON reports: both are normalized data.
:func:`load_side` makes a side of either; the CLI (``advisor compare``) only parses arguments, calls
:func:`load_side` and :func:`compare`, and renders with :mod:`advisor.report.comparison`.

What "regress" means (the exit code of ``advisor compare``):

- NEW's device busy time (the union of device task intervals; the sum of op durations when a report lacks
  it) is more than ``max_regression_pct`` percent above BASE's, or
- ``max_score_drop`` is given and NEW's score is more than that many points below BASE's.

New findings alone do not make a regression: a faster model may expose a new, smaller opportunity. Both runs
must cover the same workload (same steps, same batch); the comparison notes when op counts differ a lot.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import ijson
import pandas as pd

from advisor.common import provenance
from advisor.common.errors import InputError, UsageError
from advisor.compare.kernels import kernel_deltas
from advisor.config import rule_aliases
from advisor.config.loader import builtin_aliases
from advisor.report.json_report import load as load_saved_report

if TYPE_CHECKING:
    from advisor.pipeline.analysis import AnalysisOptions

COMPARISON_VERSION = "1"
MATCH_OVERLAP = 0.5
"""Two findings of the same rule whose op sets overlap this much (Jaccard) are the same finding."""


@dataclass
class OpTypeTable:
    """Per op type: count and total device time. ``complete`` is False when only the top types are known (a
    saved report keeps the 15 largest), in which case a type missing from it is unknown, not zero."""

    rows: dict[str, tuple[int, float]]
    total_us: float
    complete: bool = True


@dataclass
class Side:
    """One run to compare: its report and its op-type table; ``source`` is 'profile' or 'report'."""

    report: dict[str, Any]
    op_types: OpTypeTable
    source: str = "report"


def op_types_from_frame(by_type: pd.DataFrame, total_us: float | None = None) -> OpTypeTable:
    """From a frame indexed by op type with columns ``count`` and ``sum`` (microseconds)."""
    rows = {str(t): (int(r["count"]), float(r["sum"])) for t, r in by_type.iterrows()}
    total = float(total_us) if total_us is not None else sum(v for _, v in rows.values())
    return OpTypeTable(rows, total, True)


def op_types_from_report(report: Mapping[str, Any]) -> OpTypeTable:
    """From a saved report: ``summary.op_types_detail`` when present (all types), else ``top_op_types``."""
    summ = report["summary"]
    detail = summ.get("op_types_detail")
    items = detail if isinstance(detail, list) else summ.get("top_op_types", [])
    rows = {str(t["type"]): (int(t["count"]), float(t["total_us"])) for t in items}
    complete = isinstance(detail, list) or len(rows) >= int(summ.get("op_types", len(rows)))
    return OpTypeTable(rows, float(summ.get("device_time_us", 0.0)), complete)


# ---------------------------------------------------------------------------------------------------------
# the two sides: a profile analyzed now, or a saved report
# ---------------------------------------------------------------------------------------------------------
_REPORT_KEYS = {"schema_version", "tool", "generated_at", "input", "platform", "summary", "graph", "score",
                "score_detail", "knowledge_bases", "findings", "waived", "cluster"}


def is_saved_report(path: Path) -> bool:
    """A ``.json`` file whose first top-level key is a report key. Only the first tokens are read, so a
    multi-GB trace JSON (a profile) is not loaded to find out."""
    if not path.is_file() or path.suffix.lower() != ".json":
        return False
    try:
        with path.open("rb") as fh:
            events = ijson.parse(fh)
            prefix, event, _ = next(events)
            if event != "start_map":
                return False
            prefix, event, value = next(events)
            return event == "map_key" and value in _REPORT_KEYS
    except (ijson.JSONError, StopIteration, OSError, UnicodeDecodeError):
        return False


def load_side(path: Path, graph: Path | None, options: AnalysisOptions, label: str) -> Side:
    """Analyze a profile (full per-op-type table from the profile) or load a saved report."""
    if not path.exists():
        raise InputError(path, "no such file or directory")
    if is_saved_report(path):
        if graph is not None:
            raise UsageError(f"--graph-{label} applies to a profile, but {path} is a saved report")
        report = load_saved_report(path)
        return Side(report, op_types_from_report(report), "report")
    from advisor.pipeline.analysis import run_analysis

    result = run_analysis(path, graph, options)
    ranks = getattr(result, "ranks", None) or []
    frames = [r.by_type for r in ranks if getattr(r, "by_type", None) is not None and len(r.by_type)]
    if frames:
        by_type = pd.concat(frames).groupby(level=0).sum()
        table = op_types_from_frame(by_type, result.report["summary"]["device_time_us"])
    else:
        table = op_types_from_report(result.report)
    return Side(result.report, table, "profile")


# ---------------------------------------------------------------------------------------------------------
# the comparison
# ---------------------------------------------------------------------------------------------------------
def _pct(delta: float, base: float) -> float | None:
    return round(100.0 * delta / base, 3) if base else None


def _side_info(side: Side) -> dict[str, Any]:
    r = side.report
    s = r["summary"]
    return {"path": r["input"]["path"], "layout": r["input"]["layout"], "chip": r["input"].get("chip"),
            "source": side.source, "score": float(r["score"]), "ops": int(s["ops"]),
            "device_time_us": float(s["device_time_us"]), "device_busy_us": s.get("device_busy_us"),
            "findings": len(r["findings"]), "generated_at": r.get("generated_at")}


def device_time_delta(base: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """Busy time (union of task intervals) when both reports have it, else the sum of op durations."""
    bs, ns = base["summary"], new["summary"]
    metric = "device_busy_us" if bs.get("device_busy_us") and ns.get("device_busy_us") else "device_time_us"
    b, n = float(bs[metric]), float(ns[metric])
    out = {"metric": metric, "base_us": round(b, 3), "new_us": round(n, 3), "delta_us": round(n - b, 3),
           "delta_pct": _pct(n - b, b)}
    sb, sn = float(bs["device_time_us"]), float(ns["device_time_us"])
    out["sum_of_ops"] = {"base_us": round(sb, 3), "new_us": round(sn, 3), "delta_us": round(sn - sb, 3),
                         "delta_pct": _pct(sn - sb, sb)}
    return out


def op_type_deltas(base: OpTypeTable, new: OpTypeTable) -> list[dict[str, Any]]:
    """Per op type: count, total time and share in each run and their deltas, largest absolute time change
    first. Values unknown in a partial table are None."""
    out = []
    for t in sorted(set(base.rows) | set(new.rows)):
        b = base.rows.get(t, (0, 0.0) if base.complete else None)
        n = new.rows.get(t, (0, 0.0) if new.complete else None)
        row: dict[str, Any] = {"type": t}
        row["base_count"], row["base_us"] = (b[0], round(b[1], 3)) if b else (None, None)
        row["new_count"], row["new_us"] = (n[0], round(n[1], 3)) if n else (None, None)
        row["base_share"] = round(b[1] / base.total_us, 4) if b and base.total_us else None
        row["new_share"] = round(n[1] / new.total_us, 4) if n and new.total_us else None
        known = b is not None and n is not None
        row["count_delta"] = n[0] - b[0] if known else None
        row["delta_us"] = round(n[1] - b[1], 3) if known else None
        row["delta_pct"] = _pct(n[1] - b[1], b[1]) if known else None
        row["share_delta"] = (round(row["new_share"] - row["base_share"], 4)
                              if row["new_share"] is not None and row["base_share"] is not None else None)
        out.append(row)
    out.sort(key=lambda r: (r["delta_us"] is None, -abs(r["delta_us"] or 0.0), r["type"]))
    return out


def core_deltas(base: Mapping[str, Any], new: Mapping[str, Any]) -> list[dict[str, Any]]:
    b, n = base["summary"].get("by_core") or {}, new["summary"].get("by_core") or {}
    rows = [{"core": c, "base_us": round(float(b.get(c, 0.0)), 3), "new_us": round(float(n.get(c, 0.0)), 3),
             "delta_us": round(float(n.get(c, 0.0)) - float(b.get(c, 0.0)), 3)} for c in sorted(set(b) | set(n))]
    return sorted(rows, key=lambda r: (-abs(r["delta_us"]), r["core"]))


def rule_deltas(base: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]],
                aliases: rule_aliases.Aliases | None = None) -> list[dict[str, Any]]:
    """Per rule: number of findings and total estimated saving in each run; largest saving change first. A base
    finding of a rule renamed since (``rules/aliases.yaml``, to one rule) counts under the current id."""
    aliases = builtin_aliases() if aliases is None else aliases
    acc: dict[str, dict[str, Any]] = {}
    for side, findings in (("base", base), ("new", new)):
        for f in findings:
            rule = rule_aliases.canonical(f["rule"], aliases) if side == "base" else f["rule"]
            kb = f["kb"] if rule == f["rule"] else rule.split(".", 1)[0]
            row = acc.setdefault(rule, {"rule": rule, "kb": kb, "base_findings": 0, "new_findings": 0,
                                        "base_saving_us": 0.0, "new_saving_us": 0.0})
            row[f"{side}_findings"] += 1
            row[f"{side}_saving_us"] += float(f["estimated_saving_us"])
    out = []
    for row in acc.values():
        row["base_saving_us"] = round(row["base_saving_us"], 3)
        row["new_saving_us"] = round(row["new_saving_us"], 3)
        row["saving_delta_us"] = round(row["new_saving_us"] - row["base_saving_us"], 3)
        out.append(row)
    return sorted(out, key=lambda r: (-abs(r["saving_delta_us"]), r["rule"]))


def _fallback_key(f: Mapping[str, Any]) -> tuple[Any, ...]:
    return (f["rule"], f.get("rank"), tuple(sorted(f["ops"])))


def _brief(f: Mapping[str, Any]) -> dict[str, Any]:
    return {"id": f.get("id"), "rule": f["rule"], "kb": f["kb"], "title": f["title"], "severity": f["severity"],
            "ops_count": len(f["ops"]), "ops": list(f["ops"][:10]),
            "saving_us": round(float(f["estimated_saving_us"]), 3)}


def match_findings(base: Sequence[Mapping[str, Any]], new: Sequence[Mapping[str, Any]],
                   aliases: rule_aliases.Aliases | None = None) -> dict[str, list[Any]]:
    """Split findings into new / fixed / unchanged (present in both).

    Matched by ``id`` (rule + ops hash), then by rule + sorted ops, then, within a rule, by op overlap
    (Jaccard >= 0.5) so a finding whose op list grew or shrank a little is the same finding. A base finding of a
    rule renamed since (``rules/aliases.yaml``) matches findings of the rule(s) that replaced it; the pair keeps
    the base's id as ``base_rule``."""
    aliases = builtin_aliases() if aliases is None else aliases
    left = list(range(len(base)))
    right = list(range(len(new)))
    pairs: list[tuple[int, int, str]] = []

    def pair_by(key: Any, base_keys: Any, how: str) -> None:
        index: dict[Any, list[int]] = defaultdict(list)
        for j in right:
            k = key(new[j])
            if k is not None:
                index[k].append(j)
        for i in list(left):
            for k in base_keys(base[i]):
                if k is not None and index.get(k):
                    j = index[k].pop(0)
                    pairs.append((i, j, how))
                    left.remove(i)
                    right.remove(j)
                    break

    def renamed_keys(f: Mapping[str, Any]) -> list[tuple[Any, ...]]:
        return [_fallback_key({**f, "rule": r}) for r in rule_aliases.current_ids(f["rule"], aliases)]

    pair_by(lambda f: f.get("id"), lambda f: [f.get("id")], "id")
    pair_by(_fallback_key, renamed_keys, "rule+ops")
    for i in list(left):
        fb = base[i]
        ops_b = set(fb["ops"])
        rules_b = rule_aliases.current_ids(fb["rule"], aliases)
        best, best_score = None, 0.0
        for j in right:
            fn = new[j]
            if fn["rule"] not in rules_b:
                continue
            ops_n = set(fn["ops"])
            union = ops_b | ops_n
            score = len(ops_b & ops_n) / len(union) if union else 1.0
            if score > best_score:
                best, best_score = j, score
        if best is not None and best_score >= MATCH_OVERLAP:
            pairs.append((i, best, "overlap"))
            left.remove(i)
            right.remove(best)

    unchanged = []
    for i, j, how in sorted(pairs, key=lambda p: p[1]):
        b, n = base[i], new[j]
        item = _brief(n)
        item.pop("saving_us")
        item.update({"match": how, "base_saving_us": round(float(b["estimated_saving_us"]), 3),
                     "new_saving_us": round(float(n["estimated_saving_us"]), 3),
                     "saving_delta_us": round(float(n["estimated_saving_us"]) - float(b["estimated_saving_us"]), 3),
                     "base_severity": b["severity"]})
        if b["rule"] != n["rule"]:
            item["base_rule"] = b["rule"]
        unchanged.append(item)
    return {"new": [_brief(new[j]) for j in sorted(right)], "fixed": [_brief(base[i]) for i in sorted(left)],
            "unchanged": unchanged}


def _notes(base: Side, new: Side) -> list[str]:
    notes = []
    ob, on = base.report["summary"]["ops"], new.report["summary"]["ops"]
    if ob and on and abs(on - ob) / max(ob, on) > 0.2:
        notes.append(f"op counts differ a lot ({ob:,} vs {on:,}): check that both runs cover the same steps and "
                     "batch size, or the time delta compares different workloads")
    for label, side in (("base", base), ("new", new)):
        if not side.op_types.complete:
            notes.append(f"{label} is a saved report that keeps only its top "
                         f"{len(side.op_types.rows)} op types; other types show as unknown")
    cb, cn = base.report["input"].get("chip"), new.report["input"].get("chip")
    if cb and cn and cb != cn:
        notes.append(f"different chips ({cb} vs {cn})")
    vb, vn = base.report.get("tool", {}).get("version"), new.report.get("tool", {}).get("version")
    if vb and vn and vb != vn:
        notes.append(f"reports made by different advisor versions ({vb} vs {vn}); rules may differ")
    notes += [f"{d}: findings and score may move without the model changing"
              for d in provenance.differences(base.report, new.report)]
    return notes


def regression(time: Mapping[str, Any], score_delta: float, max_regression_pct: float,
               max_score_drop: float | None) -> dict[str, Any]:
    reasons = []
    pct = time.get("delta_pct")
    if pct is not None and pct > max_regression_pct:
        reasons.append(f"device time +{pct:.2f} % ({time['metric'].removesuffix('_us').replace('_', ' ')}), "
                       f"limit {max_regression_pct:g} %")
    if max_score_drop is not None and -score_delta > max_score_drop:
        reasons.append(f"score {score_delta:+.1f} points, limit -{max_score_drop:g}")
    return {"max_regression_pct": max_regression_pct, "max_score_drop": max_score_drop,
            "regressed": bool(reasons), "reasons": reasons}


def compare(base: Side, new: Side, max_regression_pct: float = 2.0, max_score_drop: float | None = None,
            aliases: rule_aliases.Aliases | None = None) -> dict[str, Any]:
    """The comparison of two runs as a JSON-able dict (new minus base everywhere); ``aliases``: the former rule
    ids (default: ``rules/aliases.yaml``)."""
    time = device_time_delta(base.report, new.report)
    score_delta = round(float(new.report["score"]) - float(base.report["score"]), 1)
    return {
        "schema_version": COMPARISON_VERSION,
        "kind": "advisor-comparison",
        "base": _side_info(base),
        "new": _side_info(new),
        "device_time": time,
        "score": {"base": float(base.report["score"]), "new": float(new.report["score"]), "delta": score_delta},
        "op_types": op_type_deltas(base.op_types, new.op_types),
        "op_types_complete": base.op_types.complete and new.op_types.complete,
        "by_core": core_deltas(base.report, new.report),
        "rules": rule_deltas(base.report["findings"], new.report["findings"], aliases),
        "findings": match_findings(base.report["findings"], new.report["findings"], aliases),
        "regression": regression(time, score_delta, max_regression_pct, max_score_drop),
        "notes": _notes(base, new),
        "kernels": kernel_deltas(base.report, new.report),
    }

