"""One analysis run: rules -> knowledge bases -> profiles -> graph -> findings -> waivers -> score -> report dict.

This is the only place that strings the stages together; each stage lives in its own module (``engine``,
``score``, ``hierarchy``, ``report.build``) and the CLI renders what this returns.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

from advisor.common import safeload, stage_progress, stagetimes
from advisor.common.errors import InputError
from advisor.common.given_paths import PathSpelling, as_given
from advisor.config.loader import EffectiveRules
from advisor.core.steady import analyzed_ops
from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.graph.model_graph import ModelGraph
from advisor.ingest.sanitize import require_analyzable
from advisor.model import OPS_COLUMNS, Meta, Profile, empty_frame
from advisor.pipeline import consistency, executor, hierarchy, rank_detail, score, static_audit
from advisor.pipeline.rank_result import RankResult, Received, compact, target_cann
from advisor.pipeline.rank_summary import RankSummary
from advisor.pipeline.report_dict import build_report, cluster_section
from advisor.platform import platform_for_run

if TYPE_CHECKING:
    from advisor.ingest.detect import Discovery

Progress = Callable[[str], None]


@dataclass
class AnalysisOptions:
    only: Sequence[str] = ()
    skip: Sequence[str] = ()
    rules_file: Path | None = None
    pyproject: Path | None = None
    ecosystem: Path | None = None
    chip: str | None = None
    cann: str | None = None
    """The CANN release the advice targets (``--cann``): overrides the one the profile or graph records."""
    time_limit_s: float | None = None
    extra_kbs: list[engine.KBInfo] = field(default_factory=list)
    scheduler: str | None = None
    """Address of an existing Dask scheduler (``tcp://host:8786``) to send the per-rank work to."""
    rank_tables: Path | None = None
    """``--rank-tables FILE``: where every rank's rows go when the report summarizes them (many ranks,
    ``advisor.pipeline.rank_detail``); named in the report's ``rank_detail``."""


@dataclass
class AnalysisResult:
    ranks: list[RankSummary]
    graph: ModelGraph | None
    findings: list[Finding]
    statuses: list[engine.KBStatus]
    waived: list[score.WaivedFinding]
    score: score.Score
    platform: dict[str, Any]
    rules: EffectiveRules
    join: dict[str, Any] | None
    report: dict[str, Any]
    skipped: list[executor.RankFailure] = field(default_factory=list)
    """Ranks that could not be read (multi-rank input): reported in ``input.ranks_skipped``."""
    waiver_warnings: list[str] = field(default_factory=list)
    """Waivers that name no known rule or waived nothing (also in the report's notes); the CLI says them on stderr."""
    rank_tables: dict[str, Any] | None = None
    """The full per-rank tables the report summarizes (more than ``rank_detail.FULL_DETAIL_RANKS`` ranks), for
    ``--rank-tables``; None when the report lists every rank."""


def _noop(_: str) -> None:
    return None


def load_rules(options: AnalysisOptions, found: engine.Discovery | None = None) -> EffectiveRules:
    """The rules in force for these options (:func:`advisor.engine.kb_engine.load_rules`)."""
    return engine.load_rules(found, options.rules_file, options.pyproject)


def select_kbs(options: AnalysisOptions, found: engine.Discovery | None = None) -> list[engine.KBInfo]:
    """The installed knowledge bases (plus ``--ecosystem`` legacy ones and ``extra_kbs``) after ``--kb`` /
    ``--skip-kb``."""
    infos = engine.discover(found) + list(options.extra_kbs)
    if options.ecosystem is not None:
        from advisor.engine.msadvisor_ecosystem import load_ecosystem

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


def analyze_rank(src: Any, graph: ModelGraph | None, infos: list[engine.KBInfo], rules: EffectiveRules,
                 chip: str | None, time_limit_s: float | None, cann: str | None = None, *,
                 ranks_in_input: int = 1) -> RankResult:
    """Read one rank and run the knowledge bases on it (runs on a Dask worker for multi-rank input).
    ``ranks_in_input``: how many ranks the analysis reads (``Meta.ranks_in_input``)."""
    from advisor import ingest

    if src.layout == "static-audit":
        return static_audit.analyze(src, graph, infos, rules, chip, time_limit_s, cann)
    rank = f"rank {src.rank} of {ranks_in_input}: " if ranks_in_input > 1 and src.rank is not None else ""
    stage_progress.say(lambda: rank + stage_progress.reading_message(src.root))
    profile = ingest.read_source(src, engine.ops_projection(infos), engine.events_projection(infos, rules),
                                 rules.for_kb("time") or None)
    profile.meta.ranks_in_input = ranks_in_input
    require_analyzable(profile, graph)
    profile.ops = analyzed_ops(profile)  # the knowledge bases read the steps the time model analyzes
    ingest.context.refine_with_graph(profile.meta, graph)
    target_cann(profile.meta, cann)
    platform = chip_platform(profile.meta, rules, chip, graph, profile.ops)
    with stagetimes.stage("knowledge bases"), stage_progress.within(rank):
        findings, statuses = engine.run(infos, profile, graph, rules, platform, time_limit_s)
    for s in statuses:
        stagetimes.add(f"kb {s.id}", s.seconds or 0.0)
    with stagetimes.stage("rank summary"):
        summary = RankSummary.of(profile, platform, rules)
    return RankResult(summary, findings, statuses, platform)


def chip_platform(meta: Meta, rules: EffectiveRules, chip: str | None, graph: ModelGraph | None,
                  ops: pd.DataFrame | None = None) -> dict[str, Any]:
    """The run's platform (:func:`advisor.platform.platform_for_run`: ``--chip``, else the core counts and clock
    the profile records, else a chip it names, else the graph's SoC, with the kernels' own counters in ``ops``
    deciding between a family's chips and checked against the others); what decided goes to the notes, and a chip
    found from core counts becomes the run's chip."""
    from advisor.core.chip_evidence import kernel_evidence

    data = rules.for_kb("platforms")
    evidence = None
    if ops is not None and len(ops) and data.get("evidence"):
        clocks = [float(c["cube_freq_mhz"]) for c in data.get("chips", {}).values() if c.get("cube_freq_mhz")]
        evidence = kernel_evidence(ops, data["evidence"], _ops_file(meta), clocks)
    platform, notes = platform_for_run(rules, meta.chip, meta.hardware, chip,
                                       graph.soc_version if graph is not None else None, evidence)
    meta.notes.extend(n for n in notes if n not in meta.notes)
    found = platform.get("soc_hardware") or {}
    by_counts = found.get("match", "").startswith("counts")
    if platform.get("soc_decided_by") == "evidence":  # a chip the counters single out (not one of several as near)
        if not found.get("also") and by_counts:
            meta.chip = platform["soc"]
    elif not chip and by_counts and (not meta.chip or str(meta.chip).endswith("-class")):
        meta.chip = platform["soc"]
    return platform


def _ops_file(meta: Meta) -> str:
    """The name of the file the ops table came from (for the notes), else ``the ops table``."""
    names = [str(f).replace("\\", "/").rsplit("/", 1)[-1] for f in meta.files_read]
    given = meta.sources.get("ops")
    if given:
        return str(given).replace("\\", "/").rsplit("/", 1)[-1]
    kinds = ("op_summary", "kernel_details", "aicore_intermediate", "OpBasicInfo", "PipeUtilization", "msprof_")
    return next((n for n in names if n.startswith(kinds)), names[0] if len(names) == 1 else "the ops table")


def _analyze_rank_job(args: tuple[Any, Any]) -> RankResult:
    """The per-rank job of :func:`advisor.pipeline.executor.run_jobs`: ``((graph, options, rules, infos, ranks in the input),
    source)``."""
    (graph, options, rules, infos, ranks), src = args
    if infos is None:
        infos = _worker_kbs(options)  # on a worker: entry points are loaded there, once per process
    # compact where it is computed: the client receives and holds the rank's small tables as bytes (issue 33)
    return compact(analyze_rank(src, graph, infos, rules, options.chip, options.time_limit_s, options.cann,
                                ranks_in_input=ranks))


_WORKER_KBS: dict[tuple[Any, ...], list[engine.KBInfo]] = {}


def _worker_kbs(options: AnalysisOptions) -> list[engine.KBInfo]:
    """:func:`select_kbs` on a worker, found once per worker process and ``--kb`` / ``--skip-kb`` choice
    (discovering the entry points costs ~15 ms: per rank, that is a third of a small rank's budget; issue 33)."""
    key = (tuple(options.only), tuple(options.skip), str(options.ecosystem))
    if key not in _WORKER_KBS:
        _WORKER_KBS[key] = select_kbs(options)
    return _WORKER_KBS[key]


def _parallel_ok(options: AnalysisOptions) -> bool:
    return options.ecosystem is None and not options.extra_kbs


def run_analysis(path: Path | None, graph_path: Path | None = None, options: AnalysisOptions | None = None,
                 progress: Progress = _noop, workers: int | None = None,
                 job: Discovery | None = None) -> AnalysisResult:
    """Analyze ``path`` (the one job under it; or ``job``, one of the jobs ``ingest.detect_jobs`` found under it).
    Several ranks are analyzed on Dask (advisor.pipeline.executor): a local cluster, or ``options.scheduler``."""
    from advisor import ingest

    options = options or AnalysisOptions()
    found = engine.find_plugins()
    progress("loading rules")
    rules = load_rules(options, found)
    infos = select_kbs(options, found)

    if path is not None and graph_path is None and static_audit.is_graph_file(path):
        path, graph_path = None, path  # `advisor analyze model.onnx`: the graph alone
    if path is None:  # a model graph without a profile: static audit against the chip's cost model
        if graph_path is None:
            raise InputError("PATH", "give a profile, a model graph (--graph), or both")
        progress("reading model graph")
        graph, graph_note = load_graph_for(graph_path, graph_path)
        path, sources = graph_path, [ingest.RankSource(graph_path, static_audit.LAYOUT)]
        discovery_notes = []
    else:
        if not safeload.exists(path):
            raise InputError(path, "no such file or directory")
        found_job = job or ingest.detect_job(path)
        sources, discovery_notes = found_job.sources, found_job.notes
        progress("reading model graph")
        graph, graph_note = load_graph_for(path, graph_path)

    results, skipped = _analyze_ranks(path, sources, graph, infos, rules, options, progress, workers)
    summaries = [r.summary for r in results]
    if graph_note:
        summaries[0].meta.skip(*graph_note)
    summaries[0].meta.notes.extend(discovery_notes)  # symlink loops skipped, search bounds reached
    join_info = None
    if graph is not None:
        from advisor.graph.join import join_profile

        all_ops = pd.concat([s.join_ops for s in summaries], ignore_index=True)
        join_info = join_profile(graph, all_ops).to_dict()

    platform = results[0].platform
    findings = [f for r in results for f in r.findings]
    statuses = engine.merge_statuses([r.statuses for r in results])
    findings_c, statuses_c = _run_cluster_kbs(infos, summaries, graph, rules, platform, options, progress)
    cluster = cluster_section(findings_c)
    findings += findings_c
    statuses += statuses_c + engine.load_failures(found, options.only)

    t_report = time.perf_counter()  # stage "score and report": waivers, score, root causes, the report dict
    rules_seen = {f.rule for f in findings}
    findings, waived = score.apply_waivers(findings, rules.waivers)
    waiver_warnings = score.waiver_problems(rules.waivers, waived, rules_seen,
                                            (r.id for i in infos for r in i.cls.rules))
    summaries[0].meta.notes.extend(waiver_warnings)
    limits = {s.meta.rank: s.limits() for s in summaries}
    findings = score.bound_savings(findings, limits)
    window = sum(s.window_us for s in summaries)
    result_score = score.compute(findings, window, [s.id for s in statuses], sum(s.busy_us for s in summaries))
    findings, notes = root_causes(findings, infos, rules, limits)
    kb_rules = {i.id: [r.id for r in i.cls.rules] for i in infos}
    report = build_report(path, summaries, graph, join_info, findings, statuses, waived, result_score, platform,
                          kb_rules=kb_rules, cluster=cluster, skipped=skipped, notes=notes)
    report, rank_tables = rank_detail.bound(report, rank_tables=str(options.rank_tables) if options.rank_tables
                                            else None)
    stagetimes.add("score and report", time.perf_counter() - t_report)
    if os.environ.get("ADVISOR_SELF_CHECK") == "1":  # the test suite checks every report it produces
        bad = consistency.problems(report)
        if bad:
            raise AssertionError(f"report of {path} breaks its invariants: " + "; ".join(bad[:10]))
    return AnalysisResult(summaries, graph, findings, statuses, waived, result_score, platform, rules, join_info,
                          report, skipped, waiver_warnings, rank_tables)


def _analyze_ranks(path: Path, sources: list[Any], graph: ModelGraph | None, infos: list[engine.KBInfo],
                   rules: EffectiveRules, options: AnalysisOptions, progress: Progress,
                   workers: int | None) -> tuple[list[RankResult], list[executor.RankFailure]]:
    """Every rank through :mod:`advisor.pipeline.executor`: in this process, on the embedded local Dask cluster (several
    ranks) or on ``options.scheduler``. A single rank's error stops the run; in a cluster an unreadable rank is
    skipped and reported, unless no rank could be read."""
    if len(sources) == 1 and not options.scheduler:
        progress("reading profile")
        with stage_progress.reporting(progress):
            return [analyze_rank(sources[0], graph, infos, rules, options.chip, options.time_limit_s,
                                 options.cann)], []
    mode = executor.plan(len(sources), workers, options.scheduler, _parallel_ok(options))
    given = sources
    if mode == executor.REMOTE:  # the workers see the profile at the same absolute path (shared storage)
        sources = [type(s)(s.root.resolve(), s.layout, s.rank) for s in sources]
    shared = (graph, options, rules, infos if mode == executor.SERIAL else None, len(sources))
    received = Received()

    def keep(outcome: executor.Outcome[RankResult]) -> executor.Outcome[RankResult]:
        """Each rank as it arrives: paths as the user gave them, then what the client keeps of it (compact)."""
        if sources is not given:  # the report names paths as the user gave them, whatever the executor
            outcome = as_given(outcome, PathSpelling(str(sources[outcome.index].root), str(given[outcome.index].root)))
        if outcome.result is None:
            received.take(outcome.index, None)
            return outcome
        return replace(outcome, result=received.take(outcome.index, outcome.result))

    with stage_progress.reporting(progress):  # ranks analyzed in this process say their stages too
        outcomes = executor.run_jobs(_analyze_rank_job, sources, [str(s.root) for s in sources], mode=mode,
                                     workers=workers, scheduler=options.scheduler, shared=shared,
                                     progress=progress, on_outcome=keep)
    results = [o.result for o in outcomes if o.result is not None]
    skipped = [o.failure for o in outcomes if o.failure is not None]
    if not results:
        first = skipped[0]
        raise InputError(path, f"no rank could be read ({len(skipped)} tried); {first.path}: {first.reason}")
    results[0].statuses = received.statuses  # every rank's, merged in rank order as they arrived
    return results, skipped


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
    with stage_progress.reporting(progress), stage_progress.within("cluster "):
        return engine.run(cluster_infos, stub, graph, rules, platform, options.time_limit_s,
                          cluster=[s.rank_data() for s in summaries], available=available)


def root_causes(findings: list[Finding], infos: Sequence[engine.KBInfo], rules: EffectiveRules,
                limits: dict[int | None, score.Limits]) -> tuple[list[Finding], list[dict[str, Any]]]:
    """(findings, notes): symptoms under the one cause that explains them, top-level savings partitioning the
    window, one finding per rule and title over ranks, the waiting cluster causes explain moved under them, findings
    with no or an immaterial saving listed apart as notes, severities from the share of the window, ranked
    (``advisor.pipeline.hierarchy``, thresholds in ``rules/findings.yaml``)."""
    docs = [r for i in infos for r in i.cls.rules]
    roles = {r.id: r.role for r in docs}
    levels = {i.id: rules.for_kb(i.cls.rules_file).get("severity") for i in infos
              if i.cls.rules_file and rules.has(i.cls.rules_file)}
    explains = {r.id: tuple(r.explains) for r in docs if r.explains}
    cfg = rules.for_kb("findings") or hierarchy_defaults()
    windows = {r: lim.window_us for r, lim in limits.items()}
    # causes are served before symptoms on every op, so partitioning first gives each cause the time it alone
    # removes; a symptom then goes under the cause that removes the most of it without double counting
    causes_apart = hierarchy.partition(findings, limits, roles)
    findings = [f if roles.get(f.rule) == hierarchy.SYMPTOM else apart
                for f, apart in zip(findings, causes_apart, strict=True)]
    findings = hierarchy.absorb(findings, roles, limits, hierarchy.mechanisms_of(docs),
                                float(cfg["absorb"]["min_share"]))
    findings = hierarchy.partition(findings, limits, roles)
    findings = hierarchy.merge_ranks(findings)
    findings = hierarchy.explain_waiting(findings, explains)
    findings, notes = hierarchy.split_notes(findings, windows, float(cfg["materiality"]["notes_below"]))
    findings = hierarchy.reseverity(findings, windows, {k: v for k, v in levels.items() if isinstance(v, dict)},
                                    cfg["severity"], float(cfg["materiality"]["minor_below"]))
    return hierarchy.rank(findings), notes


def hierarchy_defaults() -> dict[str, Any]:
    """The built-in ``rules/findings.yaml`` (rules loaded without it: a test's own rules directory)."""
    from advisor.config.loader import builtin_rules_dir, load_rules_file

    return load_rules_file(builtin_rules_dir() / "findings.yaml", validate=False)
