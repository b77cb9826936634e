"""One analysis run: rules -> knowledge bases -> profiles -> graph -> findings -> waivers -> score -> report dict.

This is the only place that strings the stages together; the CLI renders what it returns.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from advisor import __version__, engine, score
from advisor.errors import InputError
from advisor.findings import Finding
from advisor.graph.model import ModelGraph
from advisor.hookspecs import API_VERSION
from advisor.model import Profile
from advisor.platform import resolve_platform
from advisor.rules import EffectiveRules, find_pyproject, load_effective_rules

Progress = Callable[[str], None]


@dataclass
class AnalysisOptions:
    only: Sequence[str] = ()
    skip: Sequence[str] = ()
    rules_file: Path | None = None
    pyproject: Path | None = None
    ecosystem: Path | None = None
    chip: str | None = None
    time_limit_s: float | None = None
    extra_kbs: list[engine.KBInfo] = field(default_factory=list)


@dataclass
class AnalysisResult:
    profiles: list[Profile]
    graph: ModelGraph | None
    findings: list[Finding]
    statuses: list[engine.KBStatus]
    waived: list[engine.WaivedFinding]
    score: score.Score
    platform: dict[str, Any]
    rules: EffectiveRules
    join: dict[str, Any] | None
    report: dict[str, Any]


def _noop(_: str) -> None:
    return None


def load_rules(options: AnalysisOptions, pm: Any = None) -> EffectiveRules:
    pyproject = options.pyproject if options.pyproject is not None else find_pyproject(Path.cwd())
    return load_effective_rules(engine.rules_dirs(pm), override_file=options.rules_file, pyproject=pyproject)


def select_kbs(options: AnalysisOptions, pm: Any = None) -> list[engine.KBInfo]:
    infos = engine.discover(pm) + list(options.extra_kbs)
    if options.ecosystem is not None:
        from advisor.legacy import load_ecosystem

        infos += [engine.KBInfo(cls, "ecosystem", str(options.ecosystem), "") for cls in
                  load_ecosystem(options.ecosystem)]
    return engine.select(infos, options.only, options.skip)


def load_graph_for(path: Path, graph_path: Path | None, profiles: list[Profile]) -> ModelGraph | None:
    """``--graph`` when given, else a graph dump found inside the profile directory, else None."""
    from advisor.graph.load import find_graph_in_profile, load_graph

    if graph_path is not None:
        if not graph_path.exists():
            raise InputError(graph_path, "no such file")
        return load_graph(graph_path)
    root = path if path.is_dir() else path.parent
    found = find_graph_in_profile(root)
    if found is None:
        return None
    try:
        return load_graph(found)
    except InputError as e:
        for p in profiles:
            p.meta.skip(found, f"graph dump not usable: {e.problem}")
        return None


def run_analysis(path: Path, graph_path: Path | None = None, options: AnalysisOptions | None = None,
                 progress: Progress = _noop) -> AnalysisResult:
    from advisor import ingest

    options = options or AnalysisOptions()
    pm = engine.plugin_manager()
    progress("loading rules")
    rules = load_rules(options, pm)
    infos = select_kbs(options, pm)

    progress("reading profile")
    if not path.exists():
        raise InputError(path, "no such file or directory")
    sources = ingest.detect(path)
    profiles: list[Profile] = []
    for i, src in enumerate(sources):
        if len(sources) > 1:
            progress(f"reading rank {i + 1}/{len(sources)}")
        profiles.append(ingest.read_source(src))

    progress("reading model graph")
    graph = load_graph_for(path, graph_path, profiles)
    join_info = None
    if graph is not None:
        from advisor.graph.join import join_profile

        all_ops = pd.concat([p.ops[["name", "type", "duration_us"]] for p in profiles], ignore_index=True)
        join_info = join_profile(graph, all_ops).to_dict()

    chip_hint = options.chip or next((p.meta.chip for p in profiles if p.meta.chip), None)
    if not chip_hint and graph is not None:
        chip_hint = graph.soc_version
    platform = resolve_platform(rules, chip_hint)

    findings: list[Finding] = []
    statuses_by_rank: list[list[engine.KBStatus]] = []
    for i, profile in enumerate(profiles):
        progress(f"running knowledge bases{f' (rank {i + 1}/{len(profiles)})' if len(profiles) > 1 else ''}")
        f, st = engine.run(infos, profile, graph, rules, platform, options.time_limit_s)
        findings.extend(f)
        statuses_by_rank.append(st)
    statuses = _merge_statuses(statuses_by_rank)
    for name, reason in engine.PLUGIN_LOAD_ERRORS.items():
        if not options.only or name in options.only:
            statuses.append(engine.KBStatus(name, "failed", f"plugin failed to load: {reason}"))

    findings, waived = engine.apply_waivers(findings, rules.waivers)
    busy = sum(p.busy_time_us() for p in profiles)
    result_score = score.compute(findings, busy, [s.id for s in statuses])
    findings = rank_findings(findings)
    report = build_report(path, profiles, graph, join_info, findings, statuses, waived, result_score, platform)
    return AnalysisResult(profiles, graph, findings, statuses, waived, result_score, platform, rules, join_info,
                          report)


def _merge_statuses(per_rank: list[list[engine.KBStatus]]) -> list[engine.KBStatus]:
    """One status per KB across ranks: failed if it failed anywhere, ok if it ran anywhere."""
    if not per_rank:
        return []
    merged: dict[str, engine.KBStatus] = {}
    order = {"failed": 2, "ok": 1, "skipped": 0}
    for statuses in per_rank:
        for s in statuses:
            cur = merged.get(s.id)
            if cur is None:
                merged[s.id] = engine.KBStatus(s.id, s.status, s.reason, s.version, s.package, s.findings,
                                               s.seconds, list(s.notes))
                continue
            cur.findings += s.findings
            cur.seconds += s.seconds
            cur.notes.extend(n for n in s.notes if n not in cur.notes)
            if order[s.status] > order[cur.status]:
                cur.status, cur.reason = s.status, s.reason
    return list(merged.values())


_SEVERITY_ORDER = {"critical": 0, "major": 1, "minor": 2, "info": 3}


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Largest estimated saving first; ties by severity, then rule id and first op (deterministic)."""
    return sorted(findings, key=lambda f: (-round(f.estimated_saving_us, 3), _SEVERITY_ORDER[f.severity], f.rule,
                                           f.ops[0] if f.ops else "", f.rank if f.rank is not None else -1))


def finding_id(f: Finding) -> str:
    """A stable id for a finding (rule + rank + ops), used by compare to match findings across runs."""
    key = "|".join([f.rule, str(f.rank), *sorted(f.ops)])
    return f.rule + ":" + hashlib.sha1(key.encode()).hexdigest()[:10]


def _summary(profiles: list[Profile]) -> dict[str, Any]:
    ops = pd.concat([p.ops[["type", "core", "duration_us"]] for p in profiles], ignore_index=True) \
        if profiles else pd.DataFrame(columns=["type", "core", "duration_us"])
    total = float(ops["duration_us"].sum(skipna=True)) if len(ops) else 0.0
    by_type = (ops.groupby("type", observed=True)["duration_us"].agg(["count", "sum"]).sort_values("sum", ascending=False)
               if len(ops) else pd.DataFrame(columns=["count", "sum"]))
    by_core = ops.groupby("core", observed=True)["duration_us"].sum() if len(ops) else pd.Series(dtype=float)
    top = [{"type": str(t), "count": int(r["count"]), "total_us": round(float(r["sum"]), 3),
            "share": round(float(r["sum"]) / total, 4) if total else 0.0} for t, r in by_type.head(15).iterrows()]
    summary: dict[str, Any] = {
        "ops": int(len(ops)),
        "device_time_us": round(total, 3),
        "device_busy_us": round(sum(p.busy_time_us() for p in profiles), 3),
        "op_types": int(ops["type"].nunique()) if len(ops) else 0,
        "by_core": {str(k): round(float(v), 3) for k, v in by_core.items()},
        "top_op_types": top,
    }
    if len(profiles) > 1:
        summary["ranks"] = [{"rank": p.meta.rank, "path": p.meta.source, "ops": int(len(p.ops)),
                             "device_time_us": round(p.device_time_us(), 3),
                             "device_busy_us": round(p.busy_time_us(), 3)} for p in profiles]
    return summary


def _first(values: list[str | None]) -> str | None:
    return next((v for v in values if v), None)


def build_report(path: Path, profiles: list[Profile], graph: ModelGraph | None, join_info: dict[str, Any] | None,
                 findings: list[Finding], statuses: list[engine.KBStatus], waived: list[engine.WaivedFinding],
                 result_score: score.Score, platform: dict[str, Any]) -> dict[str, Any]:
    """The JSON report (schema: advisor/schemas/report.schema.json)."""
    metas = [p.meta for p in profiles]
    layouts = sorted({m.layout for m in metas})
    summary = _summary(profiles)
    total = summary["device_busy_us"] or summary["device_time_us"]
    out_findings = []
    for f in findings:
        d = f.to_dict()
        d["id"] = finding_id(f)
        d["share_of_device_time"] = round(f.estimated_saving_us / total, 4) if total else 0.0
        out_findings.append(d)
    notes = [n for m in metas for n in m.notes]
    graph_dict = None
    if graph is not None:
        graph_dict = {**graph.summary(), "join": join_info}
    return {
        "schema_version": "1",
        "tool": {"name": "advisor", "version": __version__, "api_version": API_VERSION},
        "generated_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "input": {
            "path": str(path),
            "layout": "+".join(layouts) if layouts else "unknown",
            "chip": _first([m.chip for m in metas]) or (graph.soc_version if graph else None),
            "cann_version": _first([m.cann_version for m in metas]),
            "torch_npu_version": _first([m.torch_npu_version for m in metas]),
            "ranks": max(1, len(profiles)),
            "files_read": [f for m in metas for f in m.files_read],
            "files_skipped": [s.to_dict() for m in metas for s in m.files_skipped],
            "notes": notes,
        },
        "platform": {k: v for k, v in platform.items()},
        "summary": summary,
        "graph": graph_dict,
        "score": result_score.score,
        "score_detail": result_score.to_dict(),
        "knowledge_bases": [s.to_dict() for s in statuses],
        "findings": out_findings,
        "waived": [w.to_dict() for w in waived],
    }
