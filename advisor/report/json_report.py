"""The JSON report: strict JSON, validated against the packaged schema."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from advisor.common import escaping, safeload
from advisor.common.errors import InputError

SCHEMA_VERSION = "1"


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(resources.files("advisor.schemas").joinpath("report.schema.json").read_text("utf-8"))


def validate(report: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when the report breaks the contract (used in tests and on write)."""
    jsonschema.Draft202012Validator(schema()).validate(report)


def render(report: dict[str, Any], **_: Any) -> str:
    validate(report)
    return escaping.json_text(json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False)) + "\n"


def load(path: Path) -> dict[str, Any]:
    """A saved ``advisor analyze --format json`` report, checked against the schema (InputError otherwise)."""
    report = safeload.load_json(path)
    if not isinstance(report, dict) or "schema_version" not in report:
        raise InputError(path, "JSON without schema_version: not an advisor report")
    if str(report["schema_version"]) != SCHEMA_VERSION:
        raise InputError(path, f"report schema_version {report['schema_version']} is not supported "
                               f"(expected {SCHEMA_VERSION})")
    try:
        validate(report)
    except jsonschema.ValidationError as e:
        where = "/".join(str(p) for p in e.absolute_path)[:200] or "(top level)"
        message = e.message if len(e.message) <= 300 else e.message[:299] + "…"
        raise InputError(path, f"not an advisor report: invalid at {where}: {message}") from None
    return report
