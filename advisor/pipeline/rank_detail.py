"""A cluster report that stays readable at any rank count: per-rank detail summarized, the full tables apart.

Up to :data:`FULL_DETAIL_RANKS` ranks the report lists every rank, as it always did. Above, every per-rank list of
the report keeps its key but only the ranks worth reading -- the outliers of each per-rank figure (highest and
lowest), the ranks a finding names and the cluster's slowest rank -- and the new ``rank_detail`` section gives the
distribution of each figure over all ranks (min, median, p90, max, and which rank holds the extremes), what was
shortened (``summarized``: key -> ranks / rows in the input and kept) and where the full tables went
(``rank_tables``: the file ``advisor analyze --rank-tables FILE`` wrote, else null). The findings, the score and
``time``'s totals are untouched: only lists that grow with the ranks are bounded (issue 33: 4,096 ranks made a
47 MB report).
"""

from __future__ import annotations

import statistics
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from advisor.common.util import is_int

FULL_DETAIL_RANKS = 32
"""Reports of up to this many ranks list every rank (the shared multi-rank samples, the tests' clusters)."""
OUTLIERS_PER_FIGURE = 2
"""Ranks named per figure and end: the two highest and the two lowest of each per-rank figure."""
MIN_SPREAD = 0.01
"""A figure whose ranks differ by at most this share of its median names no outliers (all ranks alike)."""
MAX_LISTED_RANKS = 48
"""At most this many ranks keep their rows in the report's per-rank lists, whatever the rank count."""
MAX_LIST_ROWS = 100
"""Rows kept of a list that grows with the ranks but is not per rank (files read, notes, skipped files)."""
MAX_FINDING_RANKS = 64
"""Rank ids kept in a merged finding's ``ranks`` (``evidence.ranks_held`` says all of them as ranges)."""
MAX_BY_RANK = 16
"""Ranks kept in a merged finding's ``evidence.by_rank``: the listed ranks and the largest savings."""
MAX_OPS = 64
"""Op names kept in a finding merged over many ranks (communication ops are named per rank and group)."""

FIGURES = {  # the per-rank figures whose distribution the report gives: (list, field)
    "window_us": ("time", "window_us"),
    "compute_us": ("time", "compute_us"),
    "uncovered_communication_us": ("time", "uncovered_communication_us"),
    "free_us": ("time", "free_us"),
    "ops": ("summary", "ops"),
    "device_time_us": ("summary", "device_time_us"),
    "own_per_step_us": ("cluster", "own_per_step_us"),
}


def rank_ranges(ranks: Iterable[int]) -> str:
    """``0-3, 8, 10-11``: rank ids as runs of consecutive ids (a 4,096-rank list in a few characters)."""
    ids = sorted(set(int(r) for r in ranks))
    runs: list[str] = []
    start = prev = None
    for r in ids:
        if start is None:
            start = prev = r
        elif r == prev + 1:
            prev = r
        else:
            runs.append(f"{start}" if start == prev else f"{start}-{prev}")
            start = prev = r
    if start is not None:
        runs.append(f"{start}" if start == prev else f"{start}-{prev}")
    return ", ".join(runs)


def bound(report: dict[str, Any], *, limit: int | None = None,
          rank_tables: str | None = None) -> tuple[dict[str, Any], dict[str, Any] | None]:
    """``(report, tables)``: the report with its per-rank lists bounded and a ``rank_detail`` section, and the full
    per-rank tables (JSON path -> the unbounded value) for ``--rank-tables``; ``(report, None)`` unchanged when the
    input has at most ``limit`` ranks (default :data:`FULL_DETAIL_RANKS`). ``rank_tables``: the file the full tables are written to, named in the
    report."""
    limit = FULL_DETAIL_RANKS if limit is None else limit
    n = int((report.get("input") or {}).get("ranks") or 1)
    if n <= limit:
        return report, None
    out = dict(report)
    per_rank = _per_rank_rows(report)
    distribution = {name: _distribution(rows) for name, rows in per_rank.items() if rows}
    listed, why = _listed(report, per_rank)
    tables: dict[str, Any] = {}
    summarized: dict[str, dict[str, int]] = {}

    def keep(path: str, full: Sequence[Any] | Mapping[str, Any], kept: Sequence[Any] | Mapping[str, Any]) -> None:
        if len(kept) < len(full):
            tables[path] = full
            summarized[path] = {"rows": len(full), "kept": len(kept)}

    _bound_input(out, keep)
    _bound_ranks(out, listed, keep)
    for key in ("findings", "notes"):
        if isinstance(out.get(key), list):
            full = out[key]
            out[key] = [_bound_finding(f, listed) for f in full]
            changed = [i for i, (a, b) in enumerate(zip(full, out[key], strict=True)) if a != b]
            if changed:  # the findings as analyzed, with every rank, ops and symptom
                tables[key] = [full[i] for i in changed]
                summarized[key] = {"rows": len(changed), "kept": 0}
    out["rank_detail"] = {
        "ranks": n,
        "full_detail_up_to": limit,
        "listed_ranks": sorted(listed),
        "why_listed": {str(r): why[r] for r in sorted(listed)},
        "distribution": distribution,
        "summarized": summarized,
        "rank_tables": rank_tables,
    }
    return out, {"input": report.get("input", {}).get("path"), "ranks": n, "tables": tables}


def _per_rank_rows(report: Mapping[str, Any]) -> dict[str, list[tuple[int, float]]]:
    """Each per-rank figure of :data:`FIGURES` as (rank, value) over every rank that has it."""
    time_ranks = (report.get("time") or {}).get("ranks") or {}
    summary_ranks = (report.get("summary") or {}).get("ranks") or []
    cluster_ranks = (report.get("cluster") or {}).get("ranks") or []
    source = {"time": [(int(r), t) for r, t in time_ranks.items() if isinstance(t, Mapping) and is_int(r)],
              "summary": [(int(row["rank"]), row) for row in summary_ranks if row.get("rank") is not None],
              "cluster": [(int(row["rank"]), row) for row in cluster_ranks if row.get("rank") is not None]}
    out: dict[str, list[tuple[int, float]]] = {}
    for name, (where, field) in FIGURES.items():
        out[name] = [(r, float(row[field])) for r, row in source[where]
                     if isinstance(row.get(field), int | float) and row.get(field) == row.get(field)]
    return out



def _distribution(rows: list[tuple[int, float]]) -> dict[str, Any]:
    values = sorted(v for _, v in rows)
    lowest, highest = min(rows, key=lambda x: (x[1], x[0])), min(rows, key=lambda x: (-x[1], x[0]))
    return {"ranks": len(values), "min": round(values[0], 3), "median": round(statistics.median(values), 3),
            "p90": round(values[min(len(values) - 1, int(0.9 * len(values)))], 3), "max": round(values[-1], 3),
            "mean": round(statistics.fmean(values), 3), "min_rank": lowest[0], "max_rank": highest[0]}


def _listed(report: Mapping[str, Any], per_rank: Mapping[str, list[tuple[int, float]]]
            ) -> tuple[set[int], dict[int, list[str]]]:
    """The ranks whose rows stay in the report, and why each: the ones findings and the cluster section name
    first, then each figure's outliers, at most :data:`MAX_LISTED_RANKS`."""
    why: dict[int, list[str]] = {}

    def name(rank: Any, reason: str) -> None:
        if rank is None or not is_int(rank):
            return
        r = int(rank)
        if r in why or len(why) < MAX_LISTED_RANKS:
            reasons = why.setdefault(r, [])
            if reason not in reasons:
                reasons.append(reason)

    cluster = report.get("cluster") or {}
    name(cluster.get("slowest_rank"), "the cluster's slowest rank")
    for key in ("findings", "notes"):
        for f in report.get(key) or []:
            name(f.get("rank"), f"named by {f.get('rule')}")
            for s in f.get("symptoms") or []:
                name(s.get("rank"), f"named by {s.get('rule')}")
            evidence = f.get("evidence") or {}
            for field in ("slow_rank", "rank"):
                name(evidence.get(field), f"named by {f.get('rule')}")
    for figure, rows in per_rank.items():
        values = [v for _, v in rows]
        if not values or max(values) - min(values) <= MIN_SPREAD * abs(statistics.median(values)):
            continue  # alike on every rank (to rounding): no rank stands out
        for r, _ in sorted(rows, key=lambda x: (-x[1], x[0]))[:OUTLIERS_PER_FIGURE]:
            name(r, f"highest {figure}")
        for r, _ in sorted(rows, key=lambda x: (x[1], x[0]))[:OUTLIERS_PER_FIGURE]:
            name(r, f"lowest {figure}")
    return set(why), why


def _bound_input(out: dict[str, Any], keep: Any) -> None:
    """Files read and skipped, skipped ranks: the first :data:`MAX_LIST_ROWS` (and every unreadable file); notes:
    each once (ranks of one job repeat the same notes), then the first :data:`MAX_LIST_ROWS`."""
    given = out.get("input") or {}
    data = dict(given)
    for key in ("files_read", "files_skipped", "ranks_skipped"):
        rows = given.get(key)
        if isinstance(rows, list) and len(rows) > MAX_LIST_ROWS:
            # files that could not be read at all stay, every one: they make the analysis incomplete (exit 3)
            data[key] = [row for i, row in enumerate(rows) if i < MAX_LIST_ROWS
                         or (isinstance(row, Mapping) and row.get("unreadable"))]
            keep(f"input.{key}", rows, data[key])
    notes = given.get("notes")
    if isinstance(notes, list):
        once = list(dict.fromkeys(notes))[:MAX_LIST_ROWS]
        data["notes"] = once
        keep("input.notes", notes, once)
    out["input"] = data


def _bound_ranks(out: dict[str, Any], listed: set[int], keep: Any) -> None:
    """The per-rank lists: ``summary.ranks``, ``time.ranks``, ``model_summary.ranks``, ``cluster.ranks`` and
    ``cluster.step_table`` keep the listed ranks' rows; ``kernels`` its first rows."""

    def rows_of(section: str, key: str) -> None:
        part = out.get(section)
        if not isinstance(part, dict) or not isinstance(part.get(key), list):
            return
        full = part[key]
        kept = [row for row in full if not isinstance(row, Mapping) or row.get("rank") in listed]
        out[section] = {**part, key: kept}
        keep(f"{section}.{key}", full, kept)
        if section == "model_summary" and len(kept) < len(full):
            out[section]["ranks_total"] = len(full)

    rows_of("summary", "ranks")
    rows_of("model_summary", "ranks")
    rows_of("cluster", "ranks")
    rows_of("cluster", "step_table")
    time = out.get("time")
    if isinstance(time, dict) and isinstance(time.get("ranks"), dict):
        full = time["ranks"]
        kept = {r: t for r, t in full.items() if is_int(r) and int(r) in listed}
        out["time"] = {**time, "ranks": kept, **({"ranks_total": len(full)} if len(kept) < len(full) else {})}
        keep("time.ranks", full, kept)
    kernels = out.get("kernels")
    if isinstance(kernels, list) and len(kernels) > MAX_LIST_ROWS:
        out["kernels"] = kernels[:MAX_LIST_ROWS]
        keep("kernels", kernels, out["kernels"])


def _is_rank_list(key: str, value: Any) -> bool:
    return (key == "ranks" or key.endswith("_ranks")) and isinstance(value, list) \
        and all(isinstance(r, int) for r in value)


def _bound_finding(f: Mapping[str, Any], listed: set[int]) -> dict[str, Any]:
    """A finding (or a symptom under one) with the lists that grow with the ranks bounded; ``f`` itself is left
    as it is. Rank lists (``ranks``, ``*_ranks`` in the finding, its evidence and its fix's data): the first
    :data:`MAX_FINDING_RANKS`, all of them as ranges in ``<key>_held`` and counted in ``<key>_count``;
    ``evidence.by_rank``: the listed ranks and the largest savings, all of them summed up in
    ``evidence.by_rank_summary``; ``ops``: the first :data:`MAX_OPS` (``evidence.ops_count``); ``symptoms``: the
    listed ranks' and the largest, :data:`MAX_BY_RANK` of them (``evidence.symptoms_count``), each bounded alike;
    a rank list spelled out in ``basis``: as ranges."""
    g = dict(f)
    evidence = dict(f.get("evidence") or {}) if isinstance(f.get("evidence"), Mapping) else f.get("evidence")
    held = g.get("ranks")
    if _is_rank_list("ranks", held) and len(held) > MAX_FINDING_RANKS:
        g["ranks"] = held[:MAX_FINDING_RANKS]
        if isinstance(evidence, dict):
            evidence["ranks_held"], evidence["ranks_count"] = rank_ranges(held), len(held)
        spelled = f"(ranks {', '.join(map(str, held))})"
        if spelled in str(g.get("basis") or ""):
            g["basis"] = str(g["basis"]).replace(spelled, f"(ranks {rank_ranges(held)})")
    ops = g.get("ops")
    if isinstance(ops, list) and len(ops) > MAX_OPS:
        g["ops"] = ops[:MAX_OPS]
        if isinstance(evidence, dict):
            evidence["ops_count"] = len(ops)
    if isinstance(evidence, dict):
        _bound_rank_lists(evidence)
        _bound_by_rank(evidence, listed)
        g["evidence"] = evidence
    fix = g.get("fix")
    if isinstance(fix, Mapping) and isinstance(fix.get("data"), Mapping):
        data = dict(fix["data"])
        if _bound_rank_lists(data):
            g["fix"] = {**fix, "data": data}
    symptoms = g.get("symptoms")
    if isinstance(symptoms, list) and symptoms:
        if len(symptoms) > MAX_BY_RANK:
            first = [i for i, x in enumerate(symptoms) if x.get("rank") is None or x.get("rank") in listed]
            rest = sorted(set(range(len(symptoms))) - set(first),
                          key=lambda i: (-float(symptoms[i].get("estimated_saving_us") or 0.0), i))
            symptoms = [symptoms[i] for i in sorted((first + rest)[:MAX_BY_RANK])]
            if isinstance(evidence, dict):
                evidence["symptoms_count"] = len(f["symptoms"])
        g["symptoms"] = [_bound_finding(x, listed) if isinstance(x, Mapping) else x for x in symptoms]
    return g


def _bound_rank_lists(data: dict[str, Any]) -> bool:
    """Rank lists of ``data`` longer than :data:`MAX_FINDING_RANKS` cut to it, with ``<key>_held`` (ranges) and
    ``<key>_count`` beside; whether any was."""
    cut = False
    for key, value in list(data.items()):
        if _is_rank_list(key, value) and len(value) > MAX_FINDING_RANKS:
            data[key] = value[:MAX_FINDING_RANKS]
            data[f"{key}_held"], data[f"{key}_count"] = rank_ranges(value), len(value)
            cut = True
    return cut


def _bound_by_rank(evidence: dict[str, Any], listed: set[int]) -> None:
    by_rank = evidence.get("by_rank")
    if not isinstance(by_rank, Mapping) or len(by_rank) <= MAX_BY_RANK:
        return
    saving = {r: float((v or {}).get("estimated_saving_us") or 0.0) if isinstance(v, Mapping) else 0.0
              for r, v in by_rank.items()}
    chosen = [r for r in by_rank if is_int(r) and int(r) in listed][:MAX_BY_RANK // 2]
    chosen += [r for r in sorted(saving, key=lambda r: (-saving[r], r)) if r not in chosen][:MAX_BY_RANK - len(chosen)]
    keep = set(chosen)
    evidence["by_rank"] = {r: v for r, v in by_rank.items() if r in keep}
    rows = [(int(r), v) for r, v in saving.items() if is_int(r)]
    evidence["by_rank_summary"] = {**_distribution(rows), "estimated_saving_us": round(sum(saving.values()), 3),
                                   "kept": len(keep)}


PER_RANK_PATHS = ("summary.ranks", "time.ranks", "model_summary.ranks", "cluster.ranks", "cluster.step_table",
                  "input.files_read", "input.files_skipped", "input.ranks_skipped", "input.notes", "kernels")


def full_tables(report: Mapping[str, Any]) -> dict[str, Any]:
    """The per-rank tables of a report that lists every rank (nothing summarized): what ``--rank-tables`` writes
    for a small cluster, so that the file is there whenever it was asked for."""
    tables: dict[str, Any] = {}
    for path in PER_RANK_PATHS:
        node: Any = report
        for part in path.split("."):
            node = node.get(part) if isinstance(node, Mapping) else None
        if node:
            tables[path] = node
    return {"input": (report.get("input") or {}).get("path"), "ranks": (report.get("input") or {}).get("ranks"),
            "tables": tables}


def tables_text(tables: Mapping[str, Any]) -> str:
    """The ``--rank-tables`` file: JSON, one key per report path (``time.ranks``, ``cluster.step_table``, ...)
    holding its every row; ``findings`` / ``notes``: the findings the report shortened, as analyzed."""
    import json

    return json.dumps({"kind": "advisor rank tables", **tables}, indent=1, ensure_ascii=False, allow_nan=False) + "\n"
