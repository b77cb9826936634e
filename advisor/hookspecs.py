"""The plugin contract: the hooks a knowledge-base plugin may implement, and the version of the whole plugin API.

A plugin is a module (or object) registered under the entry-point group ``advisor.knowledge_bases``::

    [project.entry-points."advisor.knowledge_bases"]
    my-kb = "my_package"

and implements hooks with ``from advisor import hookimpl``. Built-in knowledge bases register the same way.
``advisor kb new NAME`` writes a complete, installable example; ``docs/plugins.md`` explains each field.

Versioning: ``API_VERSION`` is ``MAJOR.MINOR`` and covers everything docs/plugins.md lists as API: these hooks,
:mod:`advisor.kb` (``KnowledgeBase``, ``RuleDoc``, ``rule``, ``AnalysisContext``, ``RankData``),
:mod:`advisor.findings` (``Finding``, ``Fix`` and its kinds), the normalized model of :mod:`advisor.model` (its
tables' column names, ``Meta``, the ``profile.extras`` keys documented there), the time model
(:class:`advisor.timemodel.TimeModel`, ``profile.time``), the knowledge-base toolkit :mod:`advisor.toolkit` (every
module listed in its docstring) and the test kit :mod:`advisor.testing`. The minor number
grows when something is added (a new optional hook, a new field with a default, a new column or extras key); the
major number grows on any incompatible change (a removed or renamed field, column or key, a changed meaning). A
knowledge base states the version it was written for in ``api_version`` (``"1"``, ``"1.2"``...); the engine
reports it as ``failed`` (and runs the others) when the major differs or when it needs a newer minor than this
advisor provides.

History: 1.0 the first contract. 1.1 added ``RuleDoc.role`` and ``RuleDoc.render`` (prose citing ``{key}``
shows the value in force), the ``rule`` decorator (a rule declared on its check), ``Finding.symptoms`` and
``Finding.ranks``, ``profile.time`` (the time model), ``Meta.context`` / ``context_evidence``, typed
``RankData`` fields for cluster-scope knowledge bases (``scope = "cluster"``, ``ctx.cluster``), ``Fix.kind``
checked against ``advisor.findings.FIX_KINDS``, and :mod:`advisor.testing`. 1.2 added
``KnowledgeBase.ops_columns`` (the ops columns a KB reads; when every KB of a run declares them, the others are not
read), :class:`advisor.model.OpsProjection` and ``Meta.ops_columns``. 1.3 added
:func:`advisor.model.metric_values` (a metric column as the float64 the file wrote) and
``OpsProjection.metrics_at_precision``: when every KB of a run declares ``ops_columns`` and ``api_version`` 1.3 or
later, the ops metric columns (all number columns but ``OPS_FULL_PRECISION_COLUMNS``) may be stored as float32.
1.4 added ``KnowledgeBase.events_read`` (the timeline events a KB reads row by row), :class:`advisor.model.EventSelection`,
``Meta.events_read`` and ``profile.event_summary``: when every rank-scope KB of a run declares ``events_read``, the
events none of them selects are counted per process and name instead of kept in ``profile.events``.
1.5 made the toolkit (:mod:`advisor.toolkit` and its modules) API: a knowledge base imports nothing of advisor but
the hooks, :mod:`advisor.kb`, :mod:`advisor.findings`, the model (:mod:`advisor.model`, :mod:`advisor.timemodel`,
:mod:`advisor.platform`) and the toolkit. Added for that: interval arithmetic (``union``, ``overlap``,
``union_length``, ``intersect``, ``length``, ``covered_before``) and ``fmt_us`` in :mod:`advisor.toolkit.time`,
``ModelGraph`` in :mod:`advisor.toolkit.graph_patterns`, the cost model :mod:`advisor.toolkit.costmodel` and the
model summary :mod:`advisor.toolkit.model_summary`. ``advisor.toolkit.run_context.family_of`` (an alias) is now
``family``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from advisor.kb import KnowledgeBase

API_VERSION = "1.5"
"""Major.minor of the plugin API. Minor bumps only add; major bumps break."""

hookspec = pluggy.HookspecMarker("advisor")


@hookspec
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:  # type: ignore[empty-body]
    """Return the knowledge-base classes this plugin provides.

    Called once per run, before any profile is read. Each class subclasses :class:`advisor.kb.KnowledgeBase`
    and declares ``id`` (kebab-case, unique among installed plugins), ``title``, ``version``, ``api_version``,
    ``requires``, ``rules_file`` and ``rules`` (one :class:`advisor.kb.RuleDoc` per rule), and implements
    ``analyze(ctx)``. A class that does not satisfy this, or an id already provided by another plugin, is
    reported by ``advisor kb list`` as failed to load; the other knowledge bases still run.

    Keep this hook cheap: import heavy dependencies inside ``analyze``, not at module level.

    Example::

        from advisor import hookimpl

        @hookimpl
        def advisor_knowledge_bases():
            return [MyKnowledgeBase]
    """


@hookspec
def advisor_rules_dirs() -> list[str]:  # type: ignore[empty-body]
    """Return directories holding this plugin's rules files and their JSON Schemas.

    Each ``<name>.yaml`` in a returned directory is loaded as rules file ``<name>`` and validated against
    ``schema/<name>.schema.json`` in the same directory (the schema is required). Built-in rules live in the
    ``rules`` package and need no hook; a plugin that ships its rules inside its own package returns that folder::

        @hookimpl
        def advisor_rules_dirs():
            return [str(Path(__file__).parent / "rules")]

    A file name already used by another rules directory is an error (rules file names are global: users
    override values as ``rules: {<name>: {...}}``).
    """
