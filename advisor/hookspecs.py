"""The plugin contract: the hooks a knowledge-base plugin may implement. Nothing else is API.

A plugin is a module (or object) registered under the entry-point group ``advisor.knowledge_bases``::

    [project.entry-points."advisor.knowledge_bases"]
    my-kb = "my_package.my_kb"

and implements hooks with ``from advisor import hookimpl``. Built-in knowledge bases register the same way.

Versioning: ``API_VERSION`` is bumped on any incompatible change of these hooks, of
:class:`advisor.kb.KnowledgeBase`, :class:`advisor.kb.AnalysisContext` or :class:`advisor.findings.Finding`.
A knowledge base states the API major version it was written for in ``api_version``; the engine refuses
(reports as ``failed``) one written for another major version.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pluggy

if TYPE_CHECKING:
    from advisor.kb import KnowledgeBase

API_VERSION = "1.0"
"""Major.minor of the plugin API. Minor bumps only add; major bumps break."""

hookspec = pluggy.HookspecMarker("advisor")


@hookspec
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:  # type: ignore[empty-body]
    """Return the knowledge-base classes this plugin provides.

    Called once when the engine starts. Each class subclasses :class:`advisor.kb.KnowledgeBase` and declares
    ``id``, ``title``, ``version``, ``requires``, ``rules_file`` and ``rules`` (the rule docs), and implements
    ``analyze(ctx)``. Import heavy dependencies inside ``analyze``, not at module level, to keep start-up fast.

    Example::

        from advisor import hookimpl

        @hookimpl
        def advisor_knowledge_bases():
            return [MyKnowledgeBase]
    """


@hookspec
def advisor_rules_dirs() -> list[str]:  # type: ignore[empty-body]
    """Return directories holding this plugin's rules files (``<name>.yaml``) and their JSON Schemas
    (``schema/<name>.schema.json``). Built-in rules live in the ``rules`` package; a plugin that ships its
    rules inside its own package returns that folder here."""
