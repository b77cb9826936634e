"""Shared test setup: fixtures every test file may ask for by name.

Knowledge-base tests build profiles and run knowledge bases with the public kit ``advisor.testing`` (the same a
plugin's tests use); what is specific to this repository's tests lives here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import pytest
from click.testing import CliRunner

from advisor.config.loader import EffectiveRules
from advisor.testing import load_rules

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
"""The shared, read-only material beside the repository (samples, bench scripts); tests skip what is missing."""

os.environ.setdefault("ADVISOR_SELF_CHECK", "1")  # every report a test produces keeps advisor/pipeline/consistency.py


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


@pytest.fixture(scope="module")
def rules() -> EffectiveRules:
    """The built-in rules, validated, with no override: one copy per test module, for tests that only read them
    (a test that changes rules asks for ``builtin_rules`` or calls ``advisor.testing.load_rules(override=...)``)."""
    return load_rules()


@pytest.fixture(scope="session")
def minimal(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The peer benchmark's minimal torch_npu profile (``*_ascend_pt``), made once per session by
    ``../shared/bench/make_min_ascend_pt.py``; read it, copy it to change it."""
    script = SHARED / "bench" / "make_min_ascend_pt.py"
    if not script.is_file():
        pytest.skip("../shared/bench/make_min_ascend_pt.py not available")
    out = tmp_path_factory.mktemp("min")
    subprocess.run([sys.executable, str(script), str(out)], check=True, capture_output=True)
    return next(out.glob("*_ascend_pt"))


@pytest.fixture(scope="session")
def insert_op_pb2(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``domi.InsertNewOps`` and friends, compiled once from metadef's insert_op.proto (``../shared/reference``) with
    grpc_tools' protoc (in the test extra), as ATC parses aipp.cfg."""
    import importlib

    from grpc_tools import protoc

    proto = SHARED / "reference" / "metadef_insert_op.proto"
    if not proto.exists():
        pytest.skip("../shared/reference/metadef_insert_op.proto not available")
    out = tmp_path_factory.mktemp("proto")
    (out / "insert_op.proto").write_text(proto.read_text(encoding="utf-8"), encoding="utf-8")
    assert protoc.main(["protoc", f"-I{out}", f"--python_out={out}", str(out / "insert_op.proto")]) == 0
    sys.path.insert(0, str(out))
    try:
        return importlib.import_module("insert_op_pb2")
    finally:
        sys.path.remove(str(out))


_SIDE_FILES = ("-wal", "-shm", "-journal")


def _sample_db_side_files() -> set[Path]:
    """SQLite side files (``-wal``, ``-shm``, ``-journal``) beside the shared samples' databases."""
    samples = SHARED / "samples"
    if not samples.is_dir():
        return set()
    global _DB_DIRS
    if _DB_DIRS is None:
        _DB_DIRS = sorted({p.parent for p in samples.rglob("*.db")})
    return {p for d in _DB_DIRS for p in d.iterdir() if p.name.endswith(_SIDE_FILES)}


_DB_DIRS: list[Path] | None = None


@pytest.fixture(autouse=True, scope="module")
def _samples_stay_untouched() -> Any:
    """No test opens a shared sample database writable (or read-only but not immutable: a WAL-mode file then gets
    -wal/-shm files beside it): every module must leave the samples' directories as it found them."""
    before = _sample_db_side_files()
    yield
    new = _sample_db_side_files() - before
    assert not new, f"this module left SQLite side files beside shared samples: {sorted(map(str, new))}"
