"""One analysis run: rules -> knowledge bases -> profiles -> graph -> findings -> waivers -> score -> report dict.

This is the only place that strings the stages together; the CLI renders what it returns.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import pandas as pd

from advisor import __version__, cluster_data, consistency, engine, executor, hierarchy, safeload, score
from advisor.errors import InputError
from advisor.findings import Finding
from advisor.graph.model import ModelGraph
from advisor.hookspecs import API_VERSION
from advisor.ingest.sanitize import require_analyzable
from advisor.kb import RankData
from advisor.model import OPS_COLUMNS, Profile, empty_frame
from advisor.platform import resolve_platform
from advisor.rules import EffectiveRules, find_pyproject, load_effective_rules
from advisor.timemodel import TimeModel, merge
from advisor.toolkit.time import FREE_TIME_KEY, OTHER_COMM_KEY

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
    scheduler: str | None = None
    """Address of an existing Dask scheduler (``tcp://host:8786``) to send the per-rank work to."""


@dataclass
class AnalysisResult:
    ranks: list[RankSummary]
    graph: ModelGraph | None
    findings: list[Finding]
    statuses: list[engine.KBStatus]
    waived: list[engine.WaivedFinding]
    score: score.Score
    platform: dict[str, Any]
    rules: EffectiveRules
    join: dict[str, Any] | None
    report: dict[str, Any]
    skipped: list[executor.RankFailure] = field(default_factory=list)
    """Ranks that could not be read (multi-rank input): reported in ``input.ranks_skipped``."""


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


def load_graph_for(path: Path, graph_path: Path | None) -> tuple[ModelGraph | None, tuple[str, str] | None]:
    """``--graph`` when given, else a graph dump found inside the profile directory, else None.

    A found-but-unusable dump is not an error (it was not asked for): it comes back as a (path, reason) note.
    """
    from advisor.graph.load import find_graph_in_profile, load_graph

    if graph_path is not None:
        if not safeload.exists(graph_path):
            raise InputError(graph_path, "no such file")
        return load_graph(graph_path), None
    if not path.is_dir():
        return None, None  # a lone file: a graph somewhere in its folder is not part of that profile
    found = find_graph_in_profile(path)
    if found is None:
        return None, None
    try:
        return load_graph(found), None
    except InputError as e:
        return None, (str(found), f"graph dump not usable: {e.problem}")


@dataclass
class RankSummary:
    """What the report needs of one rank once its knowledge bases have run (small: no op rows)."""

    meta: Any
    ops: int
    device_time_us: float
    busy_us: float
    by_type: pd.DataFrame  # index type: count, sum
    by_core: pd.Series
    steps: pd.DataFrame
    join_ops: pd.DataFrame  # name, type, duration_us aggregated per unique name (the graph join, the score's caps)
    comm: pd.DataFrame
    """One row per communication op (``advisor.cluster_data.COLLECTIVE_COLUMNS``), not per op x transport."""
    communication_matrix: Any
    """Per-link sums of communication_matrix.json (``advisor.cluster_data.LINK_COLUMNS``)."""
    available: set[str]
    time: TimeModel
    """The rank's time model (window, steps, compute / communication / free): small, no op rows."""
    small_extras: dict[str, Any]
    """Extras cheap to pass between processes (profiler metadata), for cluster-scope knowledge bases."""
    model_summary: dict[str, Any] | None = None
    """The rank's ``model_summary`` (advisor.model_summary: work, utilization, block dim, memory traffic, Memory
    Bound, L2 hit rate, execute calls)."""
    step_time: pd.DataFrame = field(default_factory=pd.DataFrame)
    transports: pd.DataFrame = field(default_factory=pd.DataFrame)
    groups: dict[str, Any] = field(default_factory=dict)

    def rank_data(self) -> RankData:
        return RankData(self.meta.rank, self.meta, self.steps, self.comm, self.communication_matrix, self.busy_us,
                        self.device_time_us, self.time, step_time=self.step_time, transports=self.transports,
                        groups=self.groups)

    @classmethod
    def of(cls, profile: Profile, platform: dict[str, Any] | None = None, rules: EffectiveRules | None = None
           ) -> RankSummary:
        """Reduce a rank's profile to what the report and the cluster analysis need (no op rows travel)."""
        ops = profile.ops
        by_type = ops.groupby("type", observed=True)["duration_us"].agg(["count", "sum"])
        by_core = ops.groupby("core", observed=True)["duration_us"].sum()
        join_ops = (ops.groupby("name", observed=True)
                    .agg(type=("type", "first"), duration_us=("duration_us", "sum"), count=("duration_us", "size"))
                    .reset_index())
        busy = profile.busy_time_us()
        metadata = profile.extras.get("profiler_metadata")
        return cls(profile.meta, len(ops), profile.device_time_us(), busy, by_type, by_core,
                   profile.steps, join_ops, cluster_data.collectives(profile.comm),
                   cluster_data.links(profile.extras.get("communication_matrix")),
                   set(profile.available), profile.time,
                   {"profiler_metadata": metadata} if metadata else {},
                   _model_summary(profile, platform, rules),
                   step_time=cluster_data.step_time(profile), transports=cluster_data.transports(profile.comm),
                   groups=cluster_data.parallel_groups(metadata, profile.meta.rank))

    def limits(self) -> score.Limits:
        """What a finding on this rank may claim (see :func:`advisor.score.bound_savings`)."""
        t = self.time
        op_us = dict(zip(self.join_ops["name"].astype(str), self.join_ops["duration_us"].astype(float), strict=True))
        return score.Limits(t.window_us, op_us, {FREE_TIME_KEY: t.free_us,
                                                 OTHER_COMM_KEY: t.uncovered_communication_us})

    @property
    def window_us(self) -> float:
        """The analyzed window of this rank (``time.window_us``): what every share and the score divide by."""
        return self.time.window_us


def _model_summary(profile: Profile, platform: dict[str, Any] | None, rules: EffectiveRules | None
                   ) -> dict[str, Any] | None:
    if platform is None or rules is None:
        return None
    from advisor.model_summary import summarize

    return summarize(profile, platform, rules)


@dataclass
class RankResult:
    summary: RankSummary
    findings: list[Finding]
    statuses: list[engine.KBStatus]
    platform: dict[str, Any]


def analyze_rank(src: Any, graph: ModelGraph | None, infos: list[engine.KBInfo], rules: EffectiveRules,
                 chip: str | None, time_limit_s: float | None) -> RankResult:
    """Read one rank and run the knowledge bases on it (runs on a Dask worker for multi-rank input)."""
    from advisor import ingest

    if src.layout == "static-audit":
        from advisor import static_audit

        return static_audit.analyze(src, graph, infos, rules, chip, time_limit_s)
    profile = ingest.read_source(src)
    require_analyzable(profile, graph)
    ingest.context.refine_with_graph(profile.meta, graph)
    hint = chip or profile.meta.chip or (graph.soc_version if graph is not None else None)
    platform = resolve_platform(rules, hint)
    findings, statuses = engine.run(infos, profile, graph, rules, platform, time_limit_s)
    return RankResult(RankSummary.of(profile, platform, rules), findings, statuses, platform)


def _analyze_rank_job(args: tuple[Any, Any]) -> RankResult:
    """The per-rank job of :func:`advisor.executor.run_jobs`: ``((graph, options, rules, infos), source)``."""
    (graph, options, rules, infos), src = args
    if infos is None:
        infos = select_kbs(options)  # on a worker: entry points are loaded there
    return analyze_rank(src, graph, infos, rules, options.chip, options.time_limit_s)


def _parallel_ok(options: AnalysisOptions) -> bool:
    return options.ecosystem is None and not options.extra_kbs


def run_analysis(path: Path | None, graph_path: Path | None = None, options: AnalysisOptions | None = None,
                 progress: Progress = _noop, workers: int | None = None) -> AnalysisResult:
    """Analyze ``path``. Several ranks are analyzed on Dask (advisor.executor): a local cluster, or ``options.scheduler``."""
    from advisor import ingest

    options = options or AnalysisOptions()
    pm = engine.plugin_manager()
    progress("loading rules")
    rules = load_rules(options, pm)
    infos = select_kbs(options, pm)

    from advisor import static_audit

    if path is not None and graph_path is None and static_audit.is_graph_file(path):
        path, graph_path = None, path  # `advisor analyze model.onnx`: the graph alone
    if path is None:  # a model graph without a profile: static audit against the chip's cost model
        if graph_path is None:
            raise InputError("PATH", "give a profile, a model graph (--graph), or both")
        progress("reading model graph")
        graph, graph_note = load_graph_for(graph_path, graph_path)
        path, sources = graph_path, [ingest.RankSource(graph_path, static_audit.LAYOUT)]
    else:
        if not safeload.exists(path):
            raise InputError(path, "no such file or directory")
        sources = ingest.detect(path)
        progress("reading model graph")
        graph, graph_note = load_graph_for(path, graph_path)

    results, skipped = _analyze_ranks(path, sources, graph, infos, rules, options, progress, workers)
    summaries = [r.summary for r in results]
    if graph_note:
        summaries[0].meta.skip(*graph_note)
    join_info = None
    if graph is not None:
        from advisor.graph.join import join_profile

        all_ops = pd.concat([s.join_ops for s in summaries], ignore_index=True)
        join_info = join_profile(graph, all_ops).to_dict()

    platform = results[0].platform
    findings = [f for r in results for f in r.findings]
    statuses = _merge_statuses([r.statuses for r in results])
    findings_c, statuses_c = _run_cluster_kbs(infos, summaries, graph, rules, platform, options, progress)
    cluster_section = _cluster_section(findings_c)
    findings += findings_c
    statuses += statuses_c
    for name, reason in engine.PLUGIN_LOAD_ERRORS.items():
        if not options.only or name in options.only:
            statuses.append(engine.KBStatus(name, "failed", f"plugin failed to load: {reason}"))

    findings, waived = engine.apply_waivers(findings, rules.waivers)
    limits = {s.meta.rank: s.limits() for s in summaries}
    findings = score.bound_savings(findings, limits)
    window = sum(s.window_us for s in summaries)
    result_score = score.compute(findings, window, [s.id for s in statuses], sum(s.busy_us for s in summaries))
    findings = root_causes(findings, infos, rules, limits)
    kb_rules = {i.id: [r.id for r in i.cls.rules] for i in infos}
    report = build_report(path, summaries, graph, join_info, findings, statuses, waived, result_score, platform,
                          kb_rules=kb_rules, cluster=cluster_section, skipped=skipped)
    if os.environ.get("ADVISOR_SELF_CHECK") == "1":  # the test suite checks every report it produces
        bad = consistency.problems(report)
        if bad:
            raise AssertionError(f"report of {path} breaks its invariants: " + "; ".join(bad[:10]))
    return AnalysisResult(summaries, graph, findings, statuses, waived, result_score, platform, rules, join_info,
                          report, skipped)


def _analyze_ranks(path: Path, sources: list[Any], graph: ModelGraph | None, infos: list[engine.KBInfo],
                   rules: EffectiveRules, options: AnalysisOptions, progress: Progress,
                   workers: int | None) -> tuple[list[RankResult], list[executor.RankFailure]]:
    """Every rank through :mod:`advisor.executor`: in this process, on the embedded local Dask cluster (several
    ranks) or on ``options.scheduler``. A single rank's error stops the run; in a cluster an unreadable rank is
    skipped and reported, unless no rank could be read."""
    if len(sources) == 1 and not options.scheduler:
        progress("reading profile")
        return [analyze_rank(sources[0], graph, infos, rules, options.chip, options.time_limit_s)], []
    mode = executor.plan(len(sources), workers, options.scheduler, _parallel_ok(options))
    if mode == executor.REMOTE:  # the workers see the profile at the same absolute path (shared storage)
        sources = [type(s)(s.root.resolve(), s.layout, s.rank) for s in sources]
    shared = (graph, options, rules, infos if mode == executor.SERIAL else None)
    outcomes = executor.run_jobs(_analyze_rank_job, sources, [str(s.root) for s in sources], mode=mode,
                                 workers=workers, scheduler=options.scheduler, shared=shared, progress=progress)
    results = [o.result for o in outcomes if o.result is not None]
    skipped = [o.failure for o in outcomes if o.failure is not None]
    if not results:
        first = skipped[0]
        raise InputError(path, f"no rank could be read ({len(skipped)} tried); {first.path}: {first.reason}")
    return results, skipped


def _cluster_section(findings: list[Finding]) -> dict[str, Any] | None:
    """The report's ``cluster`` section: the cluster knowledge base's overview (its ``cluster.spread`` finding
    carries it as ``evidence["cluster_section"]``, taken out here so the report holds it once)."""
    for f in findings:
        if f.rule == "cluster.spread" and isinstance(f.evidence.get("cluster_section"), dict):
            return f.evidence.pop("cluster_section")
    return None


def _run_cluster_kbs(infos: list[engine.KBInfo], summaries: list[RankSummary], graph: ModelGraph | None,
                     rules: EffectiveRules, platform: dict[str, Any], options: AnalysisOptions,
                     progress: Progress) -> tuple[list[Finding], list[engine.KBStatus]]:
    """Cluster-scope knowledge bases run once over every rank's data; skipped for single-rank input."""
    cluster_infos = [i for i in infos if getattr(i.cls, "scope", "rank") == "cluster"]
    if not cluster_infos:
        return [], []
    if len(summaries) < 2:
        return [], [engine.KBStatus(i.id, "skipped", "single-rank input", version=i.cls.version, package=i.package)
                    for i in cluster_infos]
    progress("running cluster knowledge bases")
    first = summaries[0]
    stub = Profile(ops=empty_frame(OPS_COLUMNS), meta=first.meta, steps=first.steps,
                   extras=dict(first.small_extras))
    available = set().union(*(s.available for s in summaries)) | {"cluster"}
    return engine.run(cluster_infos, stub, graph, rules, platform, options.time_limit_s,
                      cluster=[s.rank_data() for s in summaries], available=available)


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


def root_causes(findings: list[Finding], infos: Sequence[engine.KBInfo], rules: EffectiveRules,
                limits: dict[int | None, score.Limits]) -> list[Finding]:
    """Symptoms folded under their causes, one finding per rule and title over ranks, severities from the share of
    the window, ranked (``advisor.hierarchy``)."""
    roles = {r.id: r.role for i in infos for r in i.cls.rules}
    levels = {i.id: rules.for_kb(i.cls.rules_file).get("severity") for i in infos
              if i.cls.rules_file and rules.has(i.cls.rules_file)}
    findings = hierarchy.absorb(findings, roles, limits)
    findings = hierarchy.merge_ranks(findings)
    findings = hierarchy.reseverity(findings, {r: lim.window_us for r, lim in limits.items()},
                                    {k: v for k, v in levels.items() if isinstance(v, dict)})
    return rank_findings(findings)


_SEVERITY_ORDER = {"critical": 0, "major": 1, "minor": 2, "info": 3}


def rank_findings(findings: list[Finding]) -> list[Finding]:
    """Largest estimated saving first; ties by severity, then rule id and first op (deterministic)."""
    return sorted(findings, key=lambda f: (-round(f.estimated_saving_us, 3), _SEVERITY_ORDER[f.severity], f.rule,
                                           f.ops[0] if f.ops else "", f.rank if f.rank is not None else -1))


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
                 findings: list[Finding], statuses: list[engine.KBStatus], waived: list[engine.WaivedFinding],
                 result_score: score.Score, platform: dict[str, Any],
                 kb_rules: dict[str, list[str]] | None = None, cluster: dict[str, Any] | None = None,
                 skipped: Sequence[executor.RankFailure] = ()) -> dict[str, Any]:
    """The JSON report (schema: advisor/schemas/report.schema.json)."""
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
            "context": _context(metas)[0],
            "context_evidence": _context(metas)[1],
            "ranks": max(1, len(ranks)),
            "files_read": [f for m in metas for f in m.files_read],
            "files_skipped": [s.to_dict() for m in metas for s in m.files_skipped],
            "ranks_skipped": [s.to_dict() for s in skipped],
            "notes": notes,
        },
        "platform": {k: v for k, v in platform.items()},
        "summary": summary,
        "graph": graph_dict,
        "time": _time(ranks),
        "score": result_score.score,
        "score_detail": result_score.to_dict(),
        "knowledge_bases": [{**s.to_dict(), "rules": list((kb_rules or {}).get(s.id, []))} for s in statuses],
        "findings": out_findings,
        "waived": [w.to_dict() for w in waived],
        "cluster": cluster,
        "model_summary": _model_summaries(ranks),
    }


def _model_summaries(ranks: list[RankSummary]) -> dict[str, Any] | None:
    """The model summary of a single rank, or ``{"ranks": [...]}`` with each rank's."""
    have = [r for r in ranks if r.model_summary is not None]
    if not have:
        return None
    if len(ranks) == 1:
        return have[0].model_summary
    return {"ranks": [{"rank": r.meta.rank, **(r.model_summary or {})} for r in have]}
