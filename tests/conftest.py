"""Shared test setup: fixtures every test file may ask for by name.

Knowledge-base tests build profiles and run knowledge bases with the public kit ``advisor.testing`` (the same a
plugin's tests use); what is specific to this repository's tests lives here.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import NamedTuple

import pytest
from click.testing import CliRunner

from advisor.rules import EffectiveRules
from advisor.testing import load_rules

os.environ.setdefault("ADVISOR_SELF_CHECK", "1")  # every report a test produces keeps advisor/consistency.py


class CliResult(NamedTuple):
    """What a user sees of one ``advisor`` command: its exit code, stdout and stderr."""

    code: int
    out: str
    err: str


def _invoke(*args: str) -> CliResult:
    from advisor.cli import main

    result = CliRunner().invoke(main, list(args), catch_exceptions=False)
    return CliResult(result.exit_code, result.stdout, result.stderr)


CliFixture = Callable[..., CliResult]


@pytest.fixture(scope="session")
def cli() -> CliFixture:
    """Run ``advisor ARGS...`` in this process: ``code, out, err = cli("analyze", path, "--format", "json")``."""
    return _invoke


@pytest.fixture
def builtin_rules() -> EffectiveRules:
    """The built-in rules, validated against their schemas, with no user override (a fresh copy per test)."""
    return load_rules()
