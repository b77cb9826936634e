"""The static audit: a model graph (OM JSON, GE dump, ONNX) analyzed without a profile.

Mish chains, unfused Conv+BN+Act, preprocessing AIPP can absorb, AI CPU engines and fp32 on the cube are all visible
in the graph before the model is ever run. The audit builds an estimated ops table from the graph with the chip cost
model (:mod:`advisor.toolkit.costmodel`), runs the graph-capable rules of every knowledge base on it (a rule is
graph-capable when its :class:`advisor.kb.RuleDoc` ``needs`` names ``graph``), and labels every finding as an
estimate that a profile would confirm. The report's ``input.layout`` is ``static-audit``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from advisor.common.errors import InputError
from advisor.config.loader import EffectiveRules
from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.model import Meta, Profile
from advisor.platform import exact_chip, is_assumed, resolve_platform
from advisor.toolkit import costmodel

if TYPE_CHECKING:
    from advisor.graph.model_graph import ModelGraph
    from advisor.pipeline.rank_result import RankResult

LAYOUT = "static-audit"
CONFIRM = ("a profile would confirm it (msprof --application=<app> --output=<dir>, or the framework profiler, then "
           "advisor analyze PROF_xxx --graph <model>)")


def is_graph_file(path: Path) -> bool:
    """A model graph given where a profile was expected (``advisor analyze model.onnx``)."""
    from advisor.graph.load import looks_like_om_json, text_dump_kind

    if not path.is_file():
        return False
    suffix = path.suffix.lower()
    if suffix in (".onnx", ".om"):
        return True
    if suffix == ".json":
        return looks_like_om_json(path)
    if suffix in (".txt", ".pbtxt", ".prototxt") and path.name.startswith(("ge_proto_", "ge_onnx_")):
        try:
            return text_dump_kind(path.read_text(encoding="utf-8", errors="replace")[:4096]) is not None
        except OSError:
            return False
    return False


def graph_rule_ids(infos: Sequence[engine.KBInfo]) -> set[str]:
    """Rules that can run on a graph: their documentation says they need ``graph``."""
    return {r.id for i in infos for r in i.cls.rules if "graph" in r.needs}


def select(infos: Sequence[engine.KBInfo]) -> tuple[list[engine.KBInfo], list[engine.KBStatus]]:
    """Knowledge bases with at least one graph-capable rule; the others are skipped with the reason."""
    keep, skipped = [], []
    for info in infos:
        if getattr(info.cls, "scope", "rank") != "rank":
            continue  # cluster KBs are skipped by the analysis (single input)
        if any("graph" in r.needs for r in info.cls.rules):
            keep.append(info)
        else:
            skipped.append(engine.KBStatus(info.id, "skipped", "static audit: its rules need a profile (no "
                                           "graph-capable rule)", version=info.cls.version, package=info.package))
    return keep, skipped


def label(findings: list[Finding], allowed: set[str], statuses: list[engine.KBStatus], factor: float) -> list[Finding]:
    """Keep graph-capable rules' findings; mark each one an estimate that a profile would confirm."""
    kept: list[Finding] = []
    dropped: dict[str, list[str]] = {}
    for f in findings:
        if f.rule not in allowed:
            dropped.setdefault(f.kb, []).append(f.rule)
            continue
        f.basis = f"{f.basis.replace('measured', 'estimated')}; ESTIMATE (static audit, no profile): {CONFIRM}"
        f.title = f"{f.title} [estimate]"
        f.evidence = {**f.evidence, "estimated": True}
        f.confidence = f.confidence * factor
        kept.append(f)
    for s in statuses:
        if s.id in dropped:
            s.findings -= len(dropped[s.id])
            s.notes.append("static audit: profile-only rule(s) not reported: " + ", ".join(sorted(set(dropped[s.id]))))
    return kept


def profile_of(graph: ModelGraph, platform: dict[str, Any], rules: EffectiveRules) -> Profile:
    """The estimated profile of ``graph`` on ``platform``."""
    from advisor.ingest.context import refine_with_graph

    cm = rules.for_kb("costmodel")
    ops = costmodel.estimate_ops(graph, platform, cm)
    beyond = list(ops.attrs.get("beyond_physical_limits") or [])
    if not len(ops) and beyond:
        raise InputError(graph.source, f"every compute op has shapes beyond physical limits (first: {beyond[0]}): "
                                       "the graph's shapes are not usable")
    if not len(ops):
        raise InputError(graph.source, "the graph has no compute op to audit (only inputs, constants and "
                                       "runtime ops)")
    # the chip the estimates are for (--chip, else the graph's soc_version); a default chip is an assumption, not a
    # chip of the run: then only what the graph names, if anything (the notes say the peaks are assumed)
    meta = Meta(source=str(graph.source), layout=LAYOUT,
                chip=graph.soc_version if is_assumed(platform) else platform.get("soc"))
    meta.read(graph.source)
    # every time of the report is the cost model's: the time section names it as the source of the device tasks
    meta.sources["ops"] = f"cost-model estimate of {Path(str(graph.source)).name} on {platform.get('soc')}"
    meta.notes.append(f"static audit of {graph.format} graph {Path(str(graph.source)).name}: no profile was given; "
                      f"every time is {costmodel.basis(platform, cm, graph.format)}. The figures are estimates: "
                      f"{CONFIRM}")
    if "dynamic_shape" in ops.columns and ops["dynamic_shape"].astype(bool).any():
        n = int(ops["dynamic_shape"].astype(bool).sum())
        meta.notes.append(f"{n} op(s) have dynamic dims: taken as 1 (one sample per inference); pass a model with "
                          "static shapes (or ATC --input_shape) for estimates at the deployed batch size")
    if beyond:
        meta.notes.append(f"{len(beyond)} op(s) left out of the audit: their shapes are beyond physical limits "
                          f"(first: {beyond[0]}); check the graph's shapes")
    if is_assumed(platform):
        meta.notes.append(f"the graph names no SoC: the peaks of {platform.get('soc')} are assumed (pass --chip "
                          "for the target chip)")
    profile = Profile(ops=ops, meta=meta)
    profile.extras["cost_model"] = {"basis": costmodel.basis(platform, cm, graph.format),
                                    "estimated_ops": int(len(ops))}
    refine_with_graph(meta, graph)
    if meta.context == "unknown":
        meta.context_evidence = f"a {graph.format} graph alone (a GE dump can come from ATC or a framework)"
    return profile


def static_platform(rules: EffectiveRules, chip: str | None, graph_soc: str | None) -> dict[str, Any]:
    """The chip a graph alone is estimated on: ``--chip``, else the graph's ``soc_version``, else the default (an
    assumption the notes state); ``soc_source`` says which."""
    platform = resolve_platform(rules, chip or graph_soc)
    if platform["soc_source"] == "detected":
        platform["soc_source"] = f"--chip {chip}" if chip else f"the graph's soc_version {graph_soc}"
    return platform


def analyze(src: Any, graph: ModelGraph | None, infos: list[engine.KBInfo], rules: EffectiveRules,
            chip: str | None, time_limit_s: float | None, cann: str | None = None) -> RankResult:
    """Estimate the graph's ops, run the graph-capable rules on them, label the findings as estimates."""
    from advisor.pipeline.rank_result import RankResult, target_cann
    from advisor.pipeline.rank_summary import RankSummary

    if graph is None:
        raise InputError(src.root, "a static audit needs a model graph")
    platform = static_platform(rules, chip, graph.soc_version)
    profile = profile_of(graph, platform, rules)
    if chip and graph.soc_version and exact_chip(rules.for_kb("platforms"), graph.soc_version) not in (
            None, platform.get("soc")):
        profile.meta.notes.append(f"--chip {chip} differs from the graph's soc_version {graph.soc_version}; the "
                                  f"estimates are for {platform.get('soc')}, as asked")
    target_cann(profile.meta, cann)
    keep, skipped = select(infos)
    findings, statuses = engine.run(keep, profile, graph, rules, platform, time_limit_s)
    factor = float(rules.for_kb("costmodel")["static_confidence_factor"])
    findings = label(findings, graph_rule_ids(keep), statuses, factor)
    return RankResult(RankSummary.of(profile, platform, rules), findings, statuses + skipped, platform)
