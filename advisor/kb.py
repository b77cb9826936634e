"""What a knowledge base is: its declaration, its rules' documentation, and the context it analyzes.

A knowledge base reads the normalized model only (``ctx.profile``, ``ctx.graph``), never raw files, and
yields :class:`advisor.findings.Finding`. Its thresholds come from its rules file (``ctx.rules``), never from
constants in code.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, ClassVar

from advisor.findings import Finding, Fix, Severity
from advisor.timemodel import TimeModel  # imported, not only named: it registers the builder of profile.time

if TYPE_CHECKING:
    import pandas as pd

    from advisor.graph.model_graph import ModelGraph
    from advisor.model import EventSelection, Meta, Profile

_Check = Callable[..., Any]


ROLES = ("cause", "symptom")

TOOLKIT_RULES = ("bound",)
"""Rules files of the toolkit itself (``rules/bound.yaml``: the shared op classification), passed to every knowledge
base in :attr:`AnalysisContext.toolkit_rules`."""


@dataclass(frozen=True)
class RuleDoc:
    """One rule's documentation, ruff-style: what it does, why it matters, how to fix it.

    ``thresholds`` names the keys of the KB's rules file this rule reads, so ``advisor explain`` can show
    their effective values; the prose may cite them as ``{key}`` or ``{key.sub}`` and is shown with the values in
    effect (:meth:`render`). ``needs`` says which data the rule uses (``ops``, ``graph``, ``metrics``...).
    ``role``: ``cause`` (something to change: a decomposed activation, a TransData site...) or ``symptom`` (how
    ops behave: bound class, fusible sequence, idle device). ``explains``: the symptoms a cause's fix removes, as
    ``{symptom rule id: mechanism}`` -- how fixing the cause removes the symptom's time on the ops (or the bucket of
    the time model) both claim; a symptom is folded under the one cause that removes the most of its time through
    such a mechanism (``advisor.pipeline.hierarchy``). For a cause that makes ranks wait (a slow stage, a slow rank, a
    pipeline bubble, a late peer), the rule ids of the per-rank findings whose waiting it explains: their saving's
    waiting part (``evidence["sync_recoverable_us"]``) is moved under the cause, so it is counted once; a cause
    whose ``evidence["waiting_ranks"]`` names the ranks that waited explains those ranks' findings only.
    """

    id: str
    title: str
    what: str
    why: str
    how_to_fix: str
    thresholds: tuple[str, ...] = ()
    needs: tuple[str, ...] = ("ops",)
    example: str = ""
    role: str = "cause"
    explains: tuple[str, ...] | Mapping[str, str] = ()

    def render(self, values: Mapping[str, Any]) -> RuleDoc:
        """A copy whose prose cites the effective threshold values instead of ``{key}`` placeholders."""
        def fill(text: str) -> str:
            return _PLACEHOLDER.sub(lambda m: _lookup(values, m.group(1), m.group(0)), text)
        return replace(self, title=fill(self.title), what=fill(self.what), why=fill(self.why),
                       how_to_fix=fill(self.how_to_fix), example=fill(self.example))


_PLACEHOLDER = re.compile(r"\{([a-z_][a-z0-9_]*(?:\.[A-Za-z0-9_*]+)*)\}")


def _lookup(values: Mapping[str, Any], dotted: str, default: str) -> str:
    cur: Any = values
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return default
        cur = cur[part]
    if isinstance(cur, float):
        return f"{cur:g}"
    if isinstance(cur, (list, tuple)):
        return ", ".join(str(v) for v in cur)
    return str(cur)


def rule(doc: RuleDoc) -> Callable[[_Check], _Check]:
    """Declare, beside a check method, the rule it implements (sqlfluff-style). Stack several for a check that
    emits the findings of several rules. The knowledge base's ``rules`` are collected from these, in order, and
    its default :meth:`KnowledgeBase.analyze` runs the checks in that order."""
    def deco(fn: _Check) -> _Check:
        fn.__advisor_rules__ = (doc, *getattr(fn, "__advisor_rules__", ()))  # type: ignore[attr-defined]
        return fn
    return deco


class KnowledgeBase:
    """Base class of every knowledge base, built-in or plugin.

    Subclasses set the class attributes and implement :meth:`analyze`.
    """

    id: ClassVar[str] = ""
    """Stable kebab-case id; appears in reports, waivers and ``--kb``."""
    title: ClassVar[str] = ""
    version: ClassVar[str] = "0.0.0"
    api_version: ClassVar[str] = "1"
    """Major version of ``advisor.hookspecs.API_VERSION`` this KB was written for."""
    requires: ClassVar[tuple[str, ...]] = ("ops",)
    """Data needed to run at all: any of ops, op_stats, api, steps, events/timeline, comm, memory, metrics,
    kernel_blocks (msprof op's per-block metrics, ``Profile.kernel_blocks``), graph. Use ``requires_any`` when any one of several is enough."""
    requires_any: ClassVar[tuple[str, ...]] = ()
    requires_platform: ClassVar[tuple[str, ...]] = ()
    """Chip peaks this KB cannot work without (``hbm_gbps``, ``fp16_tflops``...): skipped, saying so, when the
    platform leaves them unknown (a chip ``rules/platforms.yaml`` does not know: ``platform["peaks_unknown"]``)."""
    ops_columns: ClassVar[tuple[str, ...] | None] = None
    """The ``ops`` columns this KB reads (names, or ``fnmatch`` patterns like ``"aiv_*_ratio"``), beyond the ones
    every analysis keeps (:data:`advisor.model.OPS_PIPELINE_COLUMNS`). When every KB of a run declares them, the
    others are not read (a 2M-kernel profile then holds ~0.35 GB less). None (the default): all columns (API 1.2)."""
    events_read: ClassVar[EventSelection | Callable[[Mapping[str, Any]], EventSelection] | None] = None
    """The timeline events this KB reads row by row: an :class:`advisor.model.EventSelection` of name, process and
    category patterns (``EventSelection()``: none), or a static method that builds one from the KB's rules (when
    the names are thresholds). When every KB of a run declares it, trace readers count the other events per process
    and name (``profile.event_summary``) instead of keeping them. None (the default): every event (API 1.3)."""
    rules_file: ClassVar[str | None] = None
    """Name of the rules file (``<name>.yaml`` in a rules dir), usually the KB id."""
    rules: ClassVar[tuple[RuleDoc, ...]] = ()
    time_limit_s: ClassVar[float] = 120.0
    scope: ClassVar[str] = "rank"
    """``rank``: runs on each rank's profile. ``cluster``: runs once after all ranks, with ``ctx.cluster``
    (one :class:`RankData` per rank); skipped for single-rank input."""

    checks: ClassVar[tuple[Callable[..., Iterable[Finding]], ...]] = ()
    """Check methods declared with :func:`rule`, in definition order (collected automatically)."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        checks = [fn for fn in vars(cls).values() if callable(fn) and hasattr(fn, "__advisor_rules__")]
        if checks:
            cls.checks = tuple(checks)
            cls.rules = tuple(doc for fn in checks for doc in fn.__advisor_rules__)  # type: ignore[attr-defined]

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        """Run the declared checks in order (override for a knowledge base without :func:`rule` checks)."""
        if not self.checks:  # pragma: no cover - a KB must declare checks or override analyze
            raise NotImplementedError
        for check in self.checks:
            yield from check(self, ctx) or ()

    @classmethod
    def rule(cls, rule_id: str) -> RuleDoc:
        for r in cls.rules:
            if r.id == rule_id:
                return r
        raise KeyError(rule_id)


@dataclass
class RankData:
    """What a cluster-scope knowledge base sees of one rank (small: no op rows; built on the worker that read the
    rank by ``advisor.pipeline.cluster_data``, see docs/cluster.md for what travels)."""

    rank: int | None
    meta: Meta
    """The rank's profile metadata (chip, versions, source path, context, files read and skipped)."""
    steps: pd.DataFrame
    """``advisor.model.STEPS_COLUMNS`` table of that rank."""
    comm: pd.DataFrame
    """One row per communication op of that rank (``advisor.pipeline.cluster_data.COLLECTIVE_COLUMNS``: step, op, group,
    start, elapse, transit, wait, idle), from communication.json."""
    communication_matrix: pd.DataFrame | None
    """Per-link sums of that rank's communication_matrix.json (``advisor.pipeline.cluster_data.LINK_COLUMNS``; ranks
    numbered within their group), or None."""
    busy_us: float
    """Union of the rank's device task intervals (µs)."""
    device_time_us: float
    """Sum of the rank's device task durations (µs)."""
    time: TimeModel | None = None
    """The rank's :class:`advisor.timemodel.TimeModel` (window, steps, compute / communication / free split)."""
    step_time: pd.DataFrame | None = None
    """Per-step time split (``advisor.pipeline.cluster_data.STEP_TIME_COLUMNS``), from the rank's time model."""
    transports: pd.DataFrame | None = None
    """Bytes and transit time per transport (``advisor.pipeline.cluster_data.TRANSPORT_COLUMNS``)."""
    groups: dict[str, Any] = field(default_factory=dict)
    """DP / PP / TP indices and members (``advisor.pipeline.cluster_data.parallel_groups``); {} when not recorded."""
    comm_op_names: set[str] | None = None
    """The communication op names the rank's savings of uncovered communication are attributed to
    (``advisor.toolkit.time.comm_op_names``); None when not known."""


@dataclass
class AnalysisContext:
    """Everything a knowledge base may read."""

    kb_id: str
    profile: Profile
    graph: ModelGraph | None
    rules: Mapping[str, Any]
    """Effective values of the KB's rules file (defaults, then pyproject, then --rules)."""
    platform: Mapping[str, Any]
    """Peaks and capabilities of the detected chip (``rules/platforms.yaml``): soc, soc_source, ai_core_num,
    vector_core_num, cube_freq_mhz, fp16_tflops, int8_tops, fp32_vector_tflops, hbm_gbps, cube_dtypes, dtypes,
    cube_fp32_tflops, tools, native_ops. Query capabilities with ``advisor.platform`` (supports_dtype,
    cube_supports, has_tool, native_kernel, is_assumed)."""
    notes: list[str] = field(default_factory=list)
    cluster: list[RankData] | None = None
    """Cluster-scope knowledge bases only: every rank's data."""
    toolkit_rules: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """Effective values of the toolkit's rules files (:data:`TOOLKIT_RULES`), the same for every knowledge base;
    read through the toolkit (e.g. :func:`advisor.toolkit.bound.op_bounds`), not directly."""

    @property
    def has_graph(self) -> bool:
        return self.graph is not None

    def finding(
        self,
        rule: str,
        title: str,
        severity: Severity,
        ops: list[str],
        evidence: dict[str, Any],
        estimated_saving_us: float,
        basis: str,
        recommendation: str,
        fix: Fix | None = None,
        confidence: float = 0.7,
        saving_by_op: dict[str, float] | None = None,
    ) -> Finding:
        """Build a Finding with this KB's id filled in."""
        return Finding(
            kb=self.kb_id,
            rule=rule,
            title=title,
            severity=severity,
            ops=list(ops),
            evidence=evidence,
            estimated_saving_us=estimated_saving_us,
            basis=basis,
            recommendation=recommendation,
            fix=fix,
            confidence=confidence,
            saving_by_op=dict(saving_by_op or {}),
        )

    def note(self, text: str) -> None:
        """Say what this KB could not do (e.g. a rule skipped for lack of a graph); shown in the report."""
        self.notes.append(text)
