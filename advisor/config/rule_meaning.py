"""What each rules value means, stated once: the ``description`` of its key in the rules file's JSON Schema.

``advisor explain`` shows it beside the value in force; ``tests/test_rules_described.py`` checks that every number
a rule reads (threshold, confidence, ratio) has one and that no comment of the YAML file repeats it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Any


def _deref(node: Any, root: Mapping[str, Any]) -> Any:
    """``node`` with its local ``$ref`` (``#/$defs/...``) merged in; its own keys (a description) win."""
    for _ in range(10):
        if not isinstance(node, Mapping) or "$ref" not in node:
            return node
        target: Any = root
        for part in str(node["$ref"]).removeprefix("#/").split("/"):
            target = target.get(part) if isinstance(target, Mapping) else None
        node = {**(target or {}), **{k: v for k, v in node.items() if k != "$ref"}}
    return node


def _child(node: Any, key: str, root: Mapping[str, Any]) -> Any:
    """The schema of ``key`` inside the (dereferenced) object schema ``node``, or None."""
    node = _deref(node, root)
    if not isinstance(node, Mapping):
        return None
    props = node.get("properties") or {}
    if key in props:
        return props[key]
    for pattern, sub in (node.get("patternProperties") or {}).items():
        if re.search(pattern, key):
            return sub
    for alt in (*(node.get("oneOf") or ()), *(node.get("anyOf") or ())):
        found = _child(alt, key, root)
        if found is not None:
            return found
    extra = node.get("additionalProperties")
    return extra if isinstance(extra, Mapping) else None


def schema_of(schema: Mapping[str, Any], dotted: str) -> Any:
    """The schema of the value at ``dotted`` (``slow_link.min_links``), dereferenced; None when the schema has no
    such key."""
    node: Any = schema
    for part in dotted.split("."):
        node = _child(node, part, schema)
        if node is None:
            return None
    return _deref(node, schema)


def description(schema: Mapping[str, Any], dotted: str) -> str:
    """The description of ``dotted``, "" when it has none."""
    node = schema_of(schema, dotted)
    return str(node.get("description", "")) if isinstance(node, Mapping) else ""


def descriptions(schema: Mapping[str, Any], dotted: str, value: Any) -> dict[str, str]:
    """Every description at ``dotted`` and under it (for the keys ``value`` holds), by dotted key; a description
    shared by several keys (every entry of a table) is given once, at the first."""
    out: dict[str, str] = {}

    def visit(key: str, sub: Any) -> None:
        text = description(schema, key)
        if text and text not in out.values():
            out[key] = text
        if isinstance(sub, Mapping):
            for k, v in sub.items():
                visit(f"{key}.{k}", v)

    visit(dotted, value)
    return out


def numbers(values: Mapping[str, Any], prefix: str = "") -> Iterator[str]:
    """The dotted key of every number in a rules file (thresholds, confidences, ratios, counts)."""
    for key, value in values.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping):
            yield from numbers(value, dotted + ".")
        elif isinstance(value, (int, float)) and not isinstance(value, bool):
            yield dotted


def undescribed(schema: Mapping[str, Any], values: Mapping[str, Any]) -> list[str]:
    """The numbers of ``values`` whose meaning the schema does not state: no description on their key nor on a
    mapping that holds them (``severity`` describes its levels once)."""
    out = []
    for dotted in numbers(values):
        parts = dotted.split(".")
        if not any(description(schema, ".".join(parts[:n])) for n in range(1, len(parts) + 1)):
            out.append(dotted)
    return out
