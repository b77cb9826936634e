"""The JSON report: strict JSON, validated against the packaged schema."""

from __future__ import annotations

import json
from functools import lru_cache
from importlib import resources
from typing import Any

import jsonschema

SCHEMA_VERSION = "1"


@lru_cache(maxsize=1)
def schema() -> dict[str, Any]:
    return json.loads(resources.files("advisor.schemas").joinpath("report.schema.json").read_text("utf-8"))


def validate(report: dict[str, Any]) -> None:
    """Raise jsonschema.ValidationError when the report breaks the contract (used in tests and on write)."""
    jsonschema.Draft202012Validator(schema()).validate(report)


def render(report: dict[str, Any], **_: Any) -> str:
    validate(report)
    return json.dumps(report, indent=2, ensure_ascii=False, allow_nan=False) + "\n"
