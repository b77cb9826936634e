"""Former rule ids (``rules/aliases.yaml``): a renamed or split rule keeps working under its old id.

Waivers, ``advisor compare`` (a baseline report made before the rename) and ``advisor explain`` key on rule ids;
each resolves a former id through the one declared list here instead of failing to match.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Mapping
from typing import Any

ALIASES_FILE = "aliases"
"""Name of the rules file that declares the former ids (``rules/aliases.yaml``)."""

Aliases = Mapping[str, tuple[str, ...]]
"""Former rule id -> the current rule id(s) that report its findings."""


def from_values(values: Mapping[str, Any] | None) -> dict[str, tuple[str, ...]]:
    """The alias table of a loaded ``aliases`` rules file (its ``renamed`` mapping); {} without one."""
    renamed = (values or {}).get("renamed") or {}
    return {str(old): tuple(str(n) for n in new) for old, new in renamed.items()}


def current_ids(rule_id: str, aliases: Aliases) -> tuple[str, ...]:
    """The current rule ids for ``rule_id``: those it was renamed to, else itself."""
    return tuple(aliases.get(rule_id, (rule_id,)))


def renamed_to(pattern: str, aliases: Aliases) -> tuple[str, ...]:
    """The current rule ids of every former id the rule pattern (a waiver's glob) names, in declaration order."""
    found: dict[str, None] = {}
    for old, new in aliases.items():
        if fnmatch.fnmatchcase(old, pattern):
            found.update(dict.fromkeys(new))
    return tuple(found)


def canonical(rule_id: str, aliases: Aliases) -> str:
    """The one current id of a former id renamed to a single rule; a split rule's or any other id unchanged."""
    new = aliases.get(rule_id, ())
    return new[0] if len(new) == 1 else rule_id


def check(aliases: Aliases, known: Iterable[str]) -> list[str]:
    """Problems of an alias table against the rules that exist: a former id that is still a rule's id, or that
    names a rule no knowledge base declares."""
    ids = set(known)
    out = [f"{old}: still the id of a rule, cannot be an alias" for old in aliases if old in ids]
    out += [f"{old}: names {new}, which no knowledge base declares" for old, news in aliases.items()
            for new in news if new not in ids]
    return out
