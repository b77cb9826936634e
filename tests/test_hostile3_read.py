"""Issue 30, hostile input round three, the readers' part: SQLite inputs opened read-only and immutable under a
time budget, numbers sanitized at every reader, files that cannot be read, a scheduler that never answers.

Every hostile input is built in ``tmp_path``; the CLI runs in a subprocess and the checks are what a user sees:
the exit code, one stderr line naming the file, the report's ``files_skipped``, the inputs unchanged."""

from __future__ import annotations

import socket
import threading
import time
from pathlib import Path

import pytest

from tests.hostile import assert_input_error, run

ROOT = Path(__file__).resolve().parents[1]


# ---------------------------------------------------------------------------------------------------------
# 7. a --scheduler that cannot be reached or never answers fails within 5 s
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture
def silent_port() -> int:
    """A TCP port that accepts connections and never says a byte (not a Dask scheduler)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    held: list[socket.socket] = []

    def accept() -> None:
        while True:
            try:
                held.append(server.accept()[0])
            except OSError:
                return

    threading.Thread(target=accept, daemon=True).start()
    yield server.getsockname()[1]
    server.close()
    for c in held:
        c.close()


def _tiny_profile(tmp_path: Path) -> Path:
    import importlib.util

    spec = importlib.util.spec_from_file_location("gen_cluster", ROOT / "benchmarks" / "gen_cluster.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    spec.loader.exec_module(module)  # type: ignore[union-attr]
    out = tmp_path / "cluster"
    module.generate(out, ranks=2, tp=2, pp=1, steps=1, ops=5, seed=1)
    return out


@pytest.mark.parametrize("kind", ["silent", "refused"])
def test_7_scheduler_that_never_answers_fails_within_5s(tmp_path: Path, silent_port: int, kind: str) -> None:
    port = silent_port if kind == "silent" else _free_port()
    profile = _tiny_profile(tmp_path)
    start = time.monotonic()
    rc, _, err = run("analyze", profile, "--scheduler", f"tcp://127.0.0.1:{port}", "-q", "--format", "json",
                     timeout=60)
    elapsed = time.monotonic() - start
    assert_input_error(rc, err, f"tcp://127.0.0.1:{port}", "scheduler")
    assert elapsed < 5.0, f"took {elapsed:.1f} s"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
