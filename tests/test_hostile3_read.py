"""Issue 30, hostile input round three, the readers' part: SQLite inputs opened read-only and immutable under a
time budget, numbers sanitized at every reader, files that cannot be read, a scheduler that never answers.

Every hostile input is built in ``tmp_path``; the CLI runs in a subprocess and the checks are what a user sees:
the exit code, one stderr line naming the file, the report's ``files_skipped``, the inputs unchanged."""

from __future__ import annotations

import json
import socket
import sqlite3
import sys
import threading
import time
from contextlib import closing
from pathlib import Path

import pytest

from advisor.errors import InputError
from advisor.ingest.sqlite_db import read_only_uri
from advisor.model import Meta
from tests.hostile import (
    TDB,
    assert_input_error,
    assert_report,
    copy_tree,
    db_copy,
    db_exec,
    have_samples,
    run,
    tree_hash,
)

needs_samples = pytest.mark.skipif(not have_samples(), reason="../shared/samples not present")

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
    sys.modules.setdefault("gen_cluster", module)  # its dataclasses look their module up
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


# ---------------------------------------------------------------------------------------------------------
# 3. SQLite inputs: read-only and immutable, bounded in time, never a view, never multiplied rows
# ---------------------------------------------------------------------------------------------------------
def _db(tmp_path: Path) -> tuple[Path, Path]:
    """A writable copy of the torch_npu SQLite sample: (rank dir, its profiler db)."""
    rank = db_copy(tmp_path / "rank0_ascend_pt")
    return rank, rank / "ASCEND_PROFILER_OUTPUT" / "ascend_pytorch_profiler_0.db"


@needs_samples
def test_3_reading_a_wal_mode_database_leaves_no_wal_or_shm(tmp_path: Path) -> None:
    """The torch_npu sample is in WAL mode: opened read-only but not immutable, SQLite creates -wal and -shm files
    beside it (a test once did so beside the shared sample)."""
    rank = copy_tree(TDB, tmp_path / "rank0_ascend_pt")
    out = rank / "ASCEND_PROFILER_OUTPUT"
    for side in out.glob("*.db-*"):
        side.unlink()
    assert (out / "ascend_pytorch_profiler_0.db").read_bytes()[18] == 2  # WAL mode
    before = tree_hash(rank)
    rc, stdout, err = run("analyze", rank, "--format", "json", "-q")
    assert_report(rc, stdout, err, (0, 3))
    with closing(sqlite3.connect(read_only_uri(out / "ascend_pytorch_profiler_0.db"), uri=True)) as con:
        assert con.execute("SELECT COUNT(*) FROM TASK").fetchone()[0] == 552
    assert tree_hash(rank) == before
    assert not [p.name for p in out.iterdir() if p.name.endswith(("-wal", "-shm", "-journal"))]


@needs_samples
@pytest.mark.parametrize("view", [
    "CREATE VIEW TASK AS SELECT a.* FROM TASK_ a, TASK_ b, TASK_ c, TASK_ d",
    "CREATE VIEW TASK AS WITH RECURSIVE r(startNs, endNs, deviceId, globalTaskId) AS (SELECT 0, 1, 0, 0 UNION ALL "
    "SELECT startNs + 1, endNs + 1, 0, globalTaskId + 1 FROM r) SELECT * FROM r",
])
def test_3_a_view_where_a_table_is_expected_exits_2_at_once(tmp_path: Path, view: str) -> None:
    rank, db = _db(tmp_path)
    db_exec(db, "ALTER TABLE TASK RENAME TO TASK_", view)
    before = tree_hash(rank)
    start = time.monotonic()
    rc, _, err = run("analyze", rank, "--format", "json", "-q", timeout=60)
    assert_input_error(rc, err, "ascend_pytorch_profiler_0.db", "views", "'TASK'")
    assert time.monotonic() - start < 20
    assert tree_hash(rank) == before


@needs_samples
def test_3_a_query_past_its_time_budget_is_stopped_naming_the_file(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.ingest import sqlite_db

    _, db = _db(tmp_path)
    monkeypatch.setattr(sqlite_db, "DB_TIME_BUDGET_S", 0.0)
    monkeypatch.setattr(sqlite_db, "_PROGRESS_STEPS", 1)
    with pytest.raises(InputError) as e:
        sqlite_db.read_analysis_db(db.parent / "analysis.db", Meta(source=str(db.parent)))
    assert e.value.path == str(db.parent / "analysis.db")
    assert "time budget" in e.value.problem


@needs_samples
def test_3_a_query_past_its_row_budget_is_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.ingest import sqlite_db

    rank, db = _db(tmp_path)
    monkeypatch.setattr(sqlite_db, "DB_MAX_CELLS", 100)
    with pytest.raises(InputError) as e:
        sqlite_db.read(rank, Meta(source=str(rank), layout="torch_npu-db"))
    assert e.value.path == str(db) and "budget" in e.value.problem


@needs_samples
def test_3_repeated_task_ids_never_multiply_rows(tmp_path: Path) -> None:
    rank, db = _db(tmp_path)
    db_exec(db, "INSERT INTO TASK SELECT * FROM TASK")
    rc, _, err = run("analyze", rank, "--format", "json", "-q")
    assert_input_error(rc, err, "ascend_pytorch_profiler_0.db", "TASK repeats globalTaskId 552 times")


@needs_samples
def test_6_duplicate_string_ids_exit_2(tmp_path: Path) -> None:
    rank, db = _db(tmp_path)
    db_exec(db, "CREATE TABLE S AS SELECT id, value FROM STRING_IDS", "DROP TABLE STRING_IDS",
            "ALTER TABLE S RENAME TO STRING_IDS", "INSERT INTO STRING_IDS SELECT id, value || 'x' FROM STRING_IDS "
            "WHERE id IN (SELECT id FROM STRING_IDS LIMIT 3)")
    rc, _, err = run("analyze", rank, "--format", "json", "-q")
    assert_input_error(rc, err, "ascend_pytorch_profiler_0.db", "STRING_IDS has 3 duplicate ids")


@needs_samples
def test_7_a_corrupt_schema_exits_2_naming_the_file(tmp_path: Path) -> None:
    rank, db = _db(tmp_path)
    data = bytearray(db.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[100:page] = bytes([0xA5]) * (page - 100)  # sqlite_master's page, after the file header
    db.write_bytes(bytes(data))
    rc, _, err = run("analyze", rank, "--format", "json", "-q")
    assert_input_error(rc, err, "ascend_pytorch_profiler_0.db")


@needs_samples
def test_6_an_infinite_block_dim_in_a_db_is_a_skipped_value(tmp_path: Path) -> None:
    rank, db = _db(tmp_path)
    db_exec(db, "UPDATE COMPUTE_TASK_INFO SET blockDim = 1e400 WHERE rowid IN (SELECT rowid FROM COMPUTE_TASK_INFO "
                "LIMIT 5)", "UPDATE TASK SET startNs = 9.3e18 WHERE rowid = 7")
    rc, stdout, err = run("analyze", rank, "--format", "json", "-q")
    report = assert_report(rc, stdout, err, (0, 3))
    assert json.dumps(report, allow_nan=False)
