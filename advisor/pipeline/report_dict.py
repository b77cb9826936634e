"""The JSON report assembled from what an analysis produced (schema: ``advisor/schemas/report.schema.json``).

``advisor.pipeline.analysis`` runs the stages and hands their results here; every renderer reads the dict this returns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Sequence
from datetime import datetime, timezone
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from advisor import __version__
from advisor.common.provenance import produced_by
from advisor.findings import Finding
from advisor.hookspecs import API_VERSION
from advisor.timemodel import merge

if TYPE_CHECKING:
    from advisor.engine.kb_engine import KBStatus
    from advisor.graph.model_graph import ModelGraph
    from advisor.pipeline.executor import RankFailure
    from advisor.pipeline.rank_summary import RankSummary
    from advisor.pipeline.score import Score, WaivedFinding


def cluster_section(findings: list[Finding]) -> dict[str, Any] | None:
    """The report's ``cluster`` section: the cluster knowledge base's overview (its ``cluster.spread`` finding
    carries it as ``evidence["cluster_section"]``, taken out here so the report holds it once): one definition of
    the slow rank for the section and the findings. Call before the findings are folded (``advisor.pipeline.hierarchy``)."""
    for f in findings:
        if f.rule == "cluster.spread" and isinstance(f.evidence.get("cluster_section"), dict):
            return f.evidence.pop("cluster_section")
    return None


def finding_id(f: Finding) -> str:
    """A stable id for a finding (rule + rank + ops), used by compare to match findings across runs."""
    key = "|".join([f.rule, str(f.rank), *sorted(f.ops)])
    return f.rule + ":" + hashlib.sha1(key.encode()).hexdigest()[:10]


def _summary(ranks: list[RankSummary]) -> dict[str, Any]:
    by_type = pd.concat([r.by_type for r in ranks]).groupby(level=0).sum() if ranks else pd.DataFrame()
    by_type = by_type.sort_values("sum", ascending=False) if len(by_type) else by_type
    by_core = pd.concat([r.by_core for r in ranks]).groupby(level=0).sum() if ranks else pd.Series(dtype=float)
    total = float(sum(r.device_time_us for r in ranks))
    top = [{"type": str(t), "count": int(row["count"]), "total_us": round(float(row["sum"]), 3),
            "share": round(float(row["sum"]) / total, 4) if total else 0.0} for t, row in by_type.head(15).iterrows()]
    summary: dict[str, Any] = {
        "ops": int(sum(r.ops for r in ranks)),
        "device_time_us": round(total, 3),
        "device_busy_us": round(sum(r.busy_us for r in ranks), 3),
        "op_types": int(len(by_type)),
        "by_core": {str(k): round(float(v), 3) for k, v in by_core.items()},
        "top_op_types": top,
        "op_types_detail": [{"type": str(t), "count": int(row["count"]), "total_us": round(float(row["sum"]), 3)}
                            for t, row in by_type.iterrows()],
    }
    if len(ranks) > 1:
        summary["ranks"] = [{"rank": r.meta.rank, "path": r.meta.source, "ops": r.ops,
                             "device_time_us": round(r.device_time_us, 3), "device_busy_us": round(r.busy_us, 3)}
                            for r in ranks]
    return summary


def _time(ranks: list[RankSummary]) -> dict[str, Any]:
    """The report's ``time``: the rank's time model; for several ranks their totals plus ``ranks`` (rank id ->
    that rank's time model)."""
    if len(ranks) == 1:
        return ranks[0].time.to_dict()
    out = merge(r.time for r in ranks)
    out["ranks"] = {str(r.meta.rank if r.meta.rank is not None else i): r.time.to_dict() for i, r in enumerate(ranks)}
    return out


def _first(values: list[str | None]) -> str | None:
    return next((v for v in values if v), None)


def _context(metas: list[Any]) -> tuple[str, str]:
    """The ranks' execution context (the first rank's; ranks of one job share it)."""
    first = next((m for m in metas if getattr(m, "context", "unknown") != "unknown"), metas[0] if metas else None)
    if first is None:
        return "unknown", ""
    return first.context, first.context_evidence


def build_report(path: Path, ranks: list[RankSummary], graph: ModelGraph | None, join_info: dict[str, Any] | None,
                 findings: list[Finding], statuses: list[KBStatus], waived: list[WaivedFinding],
                 result_score: Score, platform: dict[str, Any],
                 kb_rules: dict[str, list[str]] | None = None, cluster: dict[str, Any] | None = None,
                 skipped: Sequence[RankFailure] = (), notes: Sequence[dict[str, Any]] = ()) -> dict[str, Any]:
    """The JSON report (schema: advisor/schemas/report.schema.json). ``notes``: advice with no or an immaterial
    measured saving, listed apart from the findings (``advisor.pipeline.hierarchy.split_notes``)."""
    metas = [r.meta for r in ranks]
    layouts = sorted({m.layout for m in metas})
    summary = _summary(ranks)
    total = result_score.window_us or summary["device_busy_us"] or summary["device_time_us"]
    out_findings = []
    for f in findings:
        d = f.to_dict()
        d["id"] = finding_id(f)
        d["share_of_device_time"] = round(f.estimated_saving_us / total, 4) if total else 0.0
        out_findings.append(d)
    input_notes = [n for m in metas for n in m.notes]
    graph_dict = None
    if graph is not None:
        graph_dict = {**graph.summary(), "join": join_info}
    return {
        "schema_version": "1",
        "tool": {"name": "advisor", "version": __version__, "api_version": API_VERSION},
        "produced_by": produced_by(__version__, API_VERSION, (s.to_dict() for s in statuses)),
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "input": {
            "path": str(path),
            "layout": "+".join(layouts) if layouts else "unknown",
            "chip": _first([m.chip for m in metas]) or (graph.soc_version if graph else None),
            "cann_version": _first([m.cann_version for m in metas]),
            "torch_npu_version": _first([m.torch_npu_version for m in metas]),
            "context": _context(metas)[0],
            "context_evidence": _context(metas)[1],
            "ranks": max(1, len(ranks)),
            "files_read": [f for m in metas for f in m.files_read],
            "files_skipped": [s.to_dict() for m in metas for s in m.files_skipped],
            "ranks_skipped": [s.to_dict() for s in skipped],
            "notes": input_notes,
        },
        "platform": {k: v for k, v in platform.items()},
        "summary": summary,
        "graph": graph_dict,
        "time": _time(ranks),
        "score": result_score.score,
        "score_detail": result_score.to_dict(),
        "knowledge_bases": [{**s.to_dict(), "rules": list((kb_rules or {}).get(s.id, []))} for s in statuses],
        "findings": out_findings,
        "notes": [dict(n) for n in notes],
        "waived": [w.to_dict() for w in waived],
        "cluster": cluster,
        "model_summary": _model_summaries(ranks),
        "kernels": _kernels(ranks),
    }


def _kernels(ranks: list[RankSummary]) -> list[dict[str, Any]] | None:
    """The kernels of a kernel-development run (advisor.toolkit.kernels); each names its rank on multi-rank input."""
    have = [r for r in ranks if r.kernels]
    if not have:
        return None
    if len(ranks) == 1:
        return list(have[0].kernels or [])
    return [{"rank": r.meta.rank, **k} for r in have for k in (r.kernels or [])]


def _model_summaries(ranks: list[RankSummary]) -> dict[str, Any] | None:
    """The model summary of a single rank, or ``{"ranks": [...]}`` with each rank's."""
    have = [r for r in ranks if r.model_summary is not None]
    if not have:
        return None
    if len(ranks) == 1:
        return have[0].model_summary
    return {"ranks": [{"rank": r.meta.rank, **(r.model_summary or {})} for r in have]}
