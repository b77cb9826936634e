"""The report's ``model_summary`` (advisor.toolkit.model_summary) as rows a person reads: quantity, value, source.

Shared by the terminal, Markdown and HTML reports. Only what the run recorded appears (a quantity without data
has no row; a recorded-but-empty one says "not recorded", never 0); every row names the file and column or
formula it comes from.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from advisor.report.common import fmt_pct, fmt_us, fmt_value


@dataclass(frozen=True)
class SummaryRow:
    """One quantity of the model summary as a person reads it: what, how much, where it comes from."""

    label: str
    value: str
    source: str
    number: float | None = None
    """The row's headline number (to tell ranks apart); None when it has none."""


def fmt_bytes(value: float | None) -> str:
    if value is None:
        return "–"
    v = float(value)
    for unit, size in (("GB", 1e9), ("MB", 1e6), ("KB", 1e3)):
        if abs(v) >= size:
            return f"{v / size:.2f} {unit}"
    return f"{v:.0f} B"


def _in(file: Any, what: str) -> str:
    return f"{file}: {what}" if file else what


def _work_row(label: str, part: Mapping[str, Any] | None, ms: Mapping[str, Any]) -> SummaryRow | None:
    if not isinstance(part, Mapping) or not (part.get("tasks") or (part.get("tasks") is None and part.get("gops"))):
        return None  # no task did this kind of work (or none whose work is known)
    util = part.get("utilization")
    value = f"{fmt_value(part.get('gops'))} GOPS in {fmt_us(part.get('time_us'))}"
    if part.get("tasks") is not None:
        value += f" ({part['tasks']:,} tasks)"
    value += f", utilization {fmt_pct(util)}" if util is not None else ", utilization not computable"
    source = "cube_fops / vector_fops" if ms.get("work_source") == "cube_fops/vector_fops" else \
        "tensor shapes (cost model)"
    return SummaryRow(label, value, _in(ms.get("work_file"), source), util)


def _work_rows(ms: Mapping[str, Any]) -> list[SummaryRow]:
    rows = [r for r in (_work_row("cube work", ms.get("cube"), ms), _work_row("vector work", ms.get("vector"), ms))
            if r]
    if ms.get("work_source"):
        unknown = ms.get("work_unknown_time_us")
        if unknown:
            rows.append(SummaryRow("work not known", f"{fmt_us(unknown)} of compute tasks left out of the work and "
                                   "utilization above (fused or unclassified types, no shapes)",
                                   _in(ms.get("work_file"), "task types and shapes"), float(unknown)))
        if ms.get("work_note"):
            rows.append(SummaryRow("left out", str(ms["work_note"]), _in(ms.get("work_file"), "tensor shapes")))
        if ms.get("chip_utilization") is not None:
            rows.append(SummaryRow("chip utilization", fmt_pct(ms["chip_utilization"]),
                                   "work / ((cube + vector peak) x busy time); peaks: rules/platforms.yaml",
                                   ms["chip_utilization"]))
    return rows


def _block_dim_row(bd: Any) -> SummaryRow | None:
    if not isinstance(bd, Mapping):
        return None
    weighted = bd.get("time_weighted")
    value = (f"{fmt_value(weighted)} weighted by task time ({fmt_value(bd.get('mean'))} unweighted, "
             f"{bd.get('tasks', 0):,} compute tasks)" if weighted is not None
             else f"{fmt_value(bd.get('mean'))} unweighted ({bd.get('tasks', 0):,} compute tasks)")
    return SummaryRow("average block dim", value, _in(bd.get("file"), "Block Dim"),
                      weighted if weighted is not None else bd.get("mean"))


def _memory_row(mem: Any) -> SummaryRow | None:
    if not isinstance(mem, Mapping):
        return None
    real, theo = mem.get("real_bytes"), mem.get("theoretical_bytes")
    parts = [f"measured {fmt_bytes(real)}" if real is not None else "measured not recorded (aic-metrics Memory)",
             f"theoretical {fmt_bytes(theo)}" if theo is not None else "theoretical not known (no shapes)"]
    if mem.get("redundancy") is not None:
        parts.append(f"redundancy {fmt_value(mem['redundancy'])}x (measured / theoretical over "
                     f"{mem.get('redundancy_tasks', 0):,} tasks with both)")
    sources = [s for s in (mem.get("real_source"), "tensor shapes" if theo is not None else None) if s]
    return SummaryRow("memory traffic", ", ".join(parts), _in(mem.get("file"), "; ".join(sources)),
                      mem.get("redundancy"))


def _summary_rows(ms: Mapping[str, Any]) -> list[SummaryRow]:
    rows = _work_rows(ms)
    rows += [r for r in (_block_dim_row(ms.get("average_block_dim")), _memory_row(ms.get("memory"))) if r]
    mb = ms.get("memory_bound")
    if isinstance(mb, Mapping):
        share = mb.get("share_of_time")
        if "basis" in mb:  # the shared op classification's answer (the memory-bound and roofline findings')
            value = (f"{mb.get('ops', 0):,} op(s) memory bound, {mb.get('ops_over', 0):,} of "
                     f"{mb.get('ops_with_ratio', 0):,} tasks" + (f" ({fmt_pct(share)} of the compute time)"
                                                                  if share is not None else ""))
            source = "shared op classification"
        else:  # a report saved by an earlier version: a Memory Bound ratio above the threshold, task by task
            value = (f"ratio > {fmt_value(mb.get('threshold'))} in {mb.get('ops_over', 0):,} of "
                     f"{mb.get('ops_with_ratio', 0):,} tasks with a ratio"
                     + (f" ({fmt_pct(share)} of their time)" if share is not None else ""))
            source = str(mb.get("formula") or "").split(" (", 1)[0]
        rows.append(SummaryRow("Memory Bound", value, _in(mb.get("file"), source), share))
    l2 = ms.get("l2_cache")
    if isinstance(l2, Mapping):
        hit = l2.get("hit_rate")
        if hit is not None:
            value = f"{fmt_pct(hit)} mean over {l2.get('tasks_with_hit_rate', l2.get('tasks', 0)):,} tasks"
            if l2.get("victim_rate") is not None:
                value += f", victim rate {fmt_pct(l2['victim_rate'])}"
        else:
            value = f"not recorded ({l2.get('note') or 'no numeric Hit Rate'})"
        rows.append(SummaryRow("L2 hit rate", value, _in(l2.get("file"), "Hit Rate"), hit))
    host = ms.get("host")
    if isinstance(host, Mapping):
        value = (f"{host.get('calls', 0):,} x {host.get('execute_api')}: {fmt_us(host.get('avg_execute_us'))} per "
                 f"call, device busy {fmt_us(host.get('device_busy_per_execute_us'))} per call")
        if host.get("gap_per_execute_us") is not None:
            value += f", host gap {fmt_us(host['gap_per_execute_us'])} per call"
        rows.append(SummaryRow("execute calls", value, _in(host.get("file"), "calls vs device tasks"),
                               host.get("gap_per_execute_us")))
    return rows


_HEADLINE = {"cube work": fmt_pct, "vector work": fmt_pct, "chip utilization": fmt_pct, "work not known": fmt_us,
             "average block dim": fmt_value, "memory traffic": lambda v: f"redundancy {fmt_value(v)}x",
             "Memory Bound": fmt_pct, "L2 hit rate": fmt_pct, "execute calls": lambda v: f"host gap {fmt_us(v)}"}
"""How each quantity's headline number reads when ranks are compared."""


def model_summary_rows(ms: Mapping[str, Any] | None) -> tuple[list[SummaryRow], str]:
    """The rows of the report's ``model_summary`` and a one-line caption (estimates; ranks). Only the quantities
    this run recorded appear. Several ranks: one row per quantity, the value of the rank with the highest headline
    number and the range over the ranks; every rank is in the JSON report."""
    if not isinstance(ms, Mapping):
        return [], ""
    estimated = ms.get("source") == "estimate (cost model)"
    note = "estimates from the chip's cost model (no profile); a profile would confirm them" if estimated else ""
    ranks = ms.get("ranks")
    if not isinstance(ranks, list):
        return _summary_rows(ms), note
    per_rank = [(r.get("rank"), _summary_rows(r)) for r in ranks if isinstance(r, Mapping)]
    rows = []
    labels = list(dict.fromkeys(row.label for _, rank_rows in per_rank for row in rank_rows))
    for label in labels:
        have = [(rank, row) for rank, rank_rows in per_rank for row in rank_rows if row.label == label]
        numbered = [(rank, row) for rank, row in have if row.number is not None]
        if not numbered:
            rank, row = have[0]
            rows.append(SummaryRow(f"{label} (rank {rank})", row.value, row.source))
            continue
        low = min(numbered, key=lambda x: float(x[1].number or 0))
        high = max(numbered, key=lambda x: float(x[1].number or 0))
        show = _HEADLINE.get(label, fmt_value)
        spread = (f"; {len(numbered)} ranks from {show(low[1].number)} (rank {low[0]}) to {show(high[1].number)} "
                  f"(rank {high[0]})" if show(low[1].number) != show(high[1].number)
                  else f"; the same on {len(numbered)} of {len(per_rank)} ranks")
        rows.append(SummaryRow(f"{label} (rank {high[0]})", high[1].value + spread, high[1].source, high[1].number))
    total = ms.get("ranks_total")  # many ranks: the report lists some (advisor.pipeline.rank_detail)
    caption = f"{len(per_rank)} ranks: each quantity shown for its highest rank with the range; every rank in the " \
              "JSON report" if not total or total <= len(per_rank) else \
        f"{len(per_rank)} of {total} ranks (the outliers and the ranks findings name): each quantity shown for its " \
        "highest rank with the range over them; every rank: --rank-tables FILE"
    return rows, "; ".join(p for p in (note, caption) if p)


RANK_DETAIL_HEADER = ("per rank", "min", "median", "p90", "max", "rank of min / max")


def rank_detail_rows(detail: Mapping[str, Any] | None) -> tuple[list[list[str]], str]:
    """A report of many ranks (``rank_detail``, advisor.pipeline.rank_detail): each per-rank figure's distribution
    over every rank (durations read as durations), and the caption saying which ranks the report lists and where
    every rank's rows are. ``([], "")`` when the report lists every rank."""
    if not detail:
        return [], ""

    def value(name: str, v: float) -> str:
        return fmt_us(v) if name.endswith("_us") else f"{v:,.0f}" if float(v).is_integer() else f"{v:,.3f}"

    rows = [[name.removesuffix("_us").replace("_", " "), *(value(name, d[k]) for k in ("min", "median", "p90", "max")),
             f"{d['min_rank']} / {d['max_rank']}"] for name, d in (detail.get("distribution") or {}).items()]
    where = (f"every rank's rows are in {detail['rank_tables']}" if detail.get("rank_tables")
             else "every rank's rows: advisor analyze ... --rank-tables FILE")
    listed = ", ".join(str(r) for r in detail.get("listed_ranks") or [])
    return rows, (f"The report lists ranks {listed} (the outliers of each figure and the ranks findings name); "
                  f"{where}.")
