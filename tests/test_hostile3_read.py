"""Issue 30, hostile input round three, the readers' part: SQLite inputs opened read-only and immutable under a
time budget, numbers sanitized at every reader, files that cannot be read, a scheduler that never answers.

Every hostile input is built in ``tmp_path``; the CLI runs in a subprocess and the checks are what a user sees:
the exit code, one stderr line naming the file, the report's ``files_skipped``, the inputs unchanged."""

from __future__ import annotations

import json
import os
import socket
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from advisor.common.errors import InputError
from advisor.ingest.sqlite_db import read_only_uri
from advisor.model import Meta, Profile, empty_frame
from tests import cluster_gen
from tests.hostile import (
    OM_JSON,
    PROF,
    TDB,
    assert_input_error,
    assert_report,
    copy_tree,
    db_copy,
    db_exec,
    have_samples,
    mini_tn,
    run,
    set_cell,
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
    module = cluster_gen.load()
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


# ---------------------------------------------------------------------------------------------------------
# 7. files that cannot be read: optional ones skipped (exit 3), required ones exit 2, truncated traces exit 2
# ---------------------------------------------------------------------------------------------------------
MSPROF_OP = ROOT / "tests/data/ingest_text/msprof_op/real_cann_minimal/reports/OPPROF_001"


def _make_unreadable(path: Path, kind: str) -> None:
    if path.exists():
        path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "dev-zero":
        path.symlink_to("/dev/zero")
    else:
        path.mkdir()


UNREADABLE = ["fifo", "dev-zero", "directory"]
_REASON = {"fifo": "is a FIFO", "dev-zero": "is a device", "directory": "is a directory"}


def _assert_skipped_unreadable(tree: Path, name: str, kind: str) -> None:
    before = tree_hash(tree)
    start = time.monotonic()
    rc, stdout, err = run("analyze", tree, "--format", "json", "-q", timeout=60)
    assert time.monotonic() - start < 30  # nothing blocked on the FIFO or read /dev/zero
    report = assert_report(rc, stdout, err, (3,))
    [line] = [ln for ln in err.splitlines() if ln.strip()]
    assert "incomplete analysis" in line and name in line
    [entry] = [s for s in report["input"]["files_skipped"] if Path(s["path"]).name == name]
    assert entry["unreadable"] is True and _REASON[kind] in entry["reason"]
    assert report["summary"]["ops"] > 0
    assert tree_hash(tree) == before


@pytest.mark.parametrize("kind", UNREADABLE)
def test_7_an_unreadable_msprof_op_metric_file_is_skipped_with_exit_3(tmp_path: Path, kind: str) -> None:
    launch = copy_tree(MSPROF_OP, tmp_path / "OPPROF_001")
    _make_unreadable(launch / "Memory.csv", kind)
    _assert_skipped_unreadable(launch, "Memory.csv", kind)


@needs_samples
@pytest.mark.parametrize("kind", UNREADABLE)
def test_7_an_unreadable_optional_torch_npu_file_is_skipped_with_exit_3(tmp_path: Path, kind: str) -> None:
    tn = mini_tn(tmp_path / "TN")
    _make_unreadable(tn / "ASCEND_PROFILER_OUTPUT" / "communication.json", kind)
    _assert_skipped_unreadable(tn, "communication.json", kind)


@needs_samples
@pytest.mark.parametrize("kind", UNREADABLE)
def test_7_an_unreadable_required_file_exits_2_naming_it(tmp_path: Path, kind: str) -> None:
    tn = mini_tn(tmp_path / "TN")
    _make_unreadable(tn / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", kind)
    assert_input_error(*run("analyze", tn, "--format", "json", "-q", timeout=60)[::2], "kernel_details.csv",
                       _REASON[kind])
    launch = copy_tree(MSPROF_OP, tmp_path / "OPPROF_001")
    _make_unreadable(launch / "OpBasicInfo.csv", kind)
    assert_input_error(*run("analyze", launch, "--format", "json", "-q", timeout=60)[::2], "OpBasicInfo.csv",
                       _REASON[kind])


@needs_samples
def test_7_a_truncated_trace_view_exits_2(tmp_path: Path) -> None:
    tn = mini_tn(tmp_path / "TN")
    trace = tn / "ASCEND_PROFILER_OUTPUT" / "trace_view.json"
    data = trace.read_bytes()
    trace.write_bytes(data[: len(data) // 2])
    assert_input_error(*run("analyze", tn, "--format", "json", "-q")[::2], "trace_view.json", "truncated JSON")


@needs_samples
def test_7_a_truncated_msprof_task_json_exits_2(tmp_path: Path) -> None:
    prof = copy_tree(PROF, tmp_path / PROF.name)
    events = [{"ph": "X", "name": f"op{i}", "pid": 1, "tid": 1, "ts": f"{1000 + i * 10}.0", "dur": 5.0,
               "args": {}} for i in range(50)]
    text = json.dumps(events)
    (prof / "mindstudio_profiler_output" / "msprof_20260831222806.json").write_text(text[: len(text) // 2])
    assert_input_error(*run("analyze", prof, "--format", "json", "-q")[::2], "msprof_20260831222806.json",
                       "truncated JSON")


# ---------------------------------------------------------------------------------------------------------
# 6. numbers: non-finite, beyond int64, non-ASCII digits
# ---------------------------------------------------------------------------------------------------------
def _set_basic(launch: Path, column: int, value: str) -> None:
    f = launch / "OpBasicInfo.csv"
    header, row, *rest = f.read_text(encoding="utf-8").splitlines()
    cells = row.split(",")
    cells[column] = value
    f.write_text("\n".join([header, ",".join(cells), *rest]) + "\n", encoding="utf-8")


@pytest.mark.parametrize("value", ["inf", "1e400", "-inf", "99999999999999999999999", "-5", "9223372036854775808"])
def test_6_an_absurd_block_dim_is_a_skipped_value_with_a_note(tmp_path: Path, value: str) -> None:
    launch = copy_tree(MSPROF_OP, tmp_path / "OPPROF_001")
    _set_basic(launch, 3, value)  # Block Dim
    rc, stdout, err = run("analyze", launch, "--format", "json", "-q")
    report = assert_report(rc, stdout, err, (0,))
    assert report["summary"]["ops"] == 1
    json.dumps(report, allow_nan=False)  # raises if an inf/nan reached the report
    notes = report["input"]["notes"]
    assert any("block_dim" in n and "read as missing" in n for n in notes), notes


def test_6_a_launch_folder_named_with_superscript_digits_is_read(tmp_path: Path) -> None:
    root = tmp_path / "OPPROF_002"
    for name in ("¹²", "0", "1"):
        copy_tree(MSPROF_OP, root / "MyOp" / name)
    rc, stdout, err = run("analyze", root, "--format", "json", "-q")
    report = assert_report(rc, stdout, err, (0,))
    assert report["summary"]["ops"] == 3


# ---------------------------------------------------------------------------------------------------------
# 3. the report's size is bounded whatever the input: steps beyond a limit are summarized
# ---------------------------------------------------------------------------------------------------------
MINDSPORE = ROOT.parent / "shared/samples/mindspore-ai__mindinsight/tests/utils/resource/run_2/normal_run/profiler"


def _step_trace(tmp_path: Path, rows: int, *, distinct: bool) -> Path:
    """The MindSpore legacy sample with its one step repeated ``rows`` times (or ``rows`` consecutive steps)."""
    d = copy_tree(MINDSPORE, tmp_path / "profiler")
    f = d / "step_trace_raw_1_detail_time.csv"
    header, row, average = f.read_text(encoding="utf-8").splitlines()
    cells = row.split(",")
    total = int(cells[3])
    lines = [header]
    for i in range(rows):
        c = list(cells)
        if distinct:
            c[0] = str(i + 1)
            for j in (1, 2, 4, 5):
                c[j] = str(int(cells[j]) + i * total)
        lines.append(",".join(c))
    f.write_text("\n".join([*lines, average]) + "\n", encoding="utf-8")
    return d


@pytest.mark.skipif(not MINDSPORE.is_dir(), reason="../shared/samples not present")
def test_3_repeated_step_rows_never_multiply_the_window(tmp_path: Path) -> None:
    one = _step_trace(tmp_path / "one", 1, distinct=False)
    many = _step_trace(tmp_path / "many", 200_000, distinct=False)
    start = time.monotonic()
    rc, stdout, err = run("analyze", many, "--format", "json", "-q", timeout=120)
    elapsed = time.monotonic() - start
    report = assert_report(rc, stdout, err, (0,))
    baseline = assert_report(*run("analyze", one, "--format", "json", "-q"), (0,))
    assert report["time"]["window_us"] == baseline["time"]["window_us"]
    assert len(report["time"]["steps"]) == len(baseline["time"]["steps"]) == 1
    assert any("199,999 rows repeat a step number" in n for n in report["input"]["notes"])
    assert len(stdout) < 200_000 and elapsed < 60


def test_3_steps_beyond_the_report_limit_are_summarized(tmp_path: Path) -> None:
    module = cluster_gen.load()
    module.generate(tmp_path / "run", ranks=1, tp=1, pp=1, steps=6, ops=5, seed=1)
    rules = tmp_path / "limit.yaml"
    rules.write_text("rules:\n  time:\n    report:\n      max_steps: 2\n", encoding="utf-8")
    full = assert_report(*run("analyze", tmp_path / "run", "--format", "json", "-q"), (0,))
    cut = assert_report(*run("analyze", tmp_path / "run", "--rules", rules, "--format", "json", "-q"), (0,))
    windows = [s["window_us"] for s in full["time"]["steps"]]
    assert len(windows) == 6 and "steps_truncated" not in full["time"]
    assert cut["time"]["steps"] == full["time"]["steps"][:2]
    summary = cut["time"]["steps_truncated"]
    assert (summary["listed"], summary["total"]) == (2, 6)
    assert summary["window_us_min"] == min(windows) and summary["window_us_max"] == max(windows)
    assert cut["time"]["window_us"] == full["time"]["window_us"]  # the totals still cover every step


# ---------------------------------------------------------------------------------------------------------
# 3. OM JSON: bounded memory, repeated op names in linear time
# ---------------------------------------------------------------------------------------------------------
def _om_json(tmp_path: Path, ops: int) -> Path:
    """The example OM JSON with its graph replaced by ``ops`` copies of one op (the same name every time)."""
    data = json.loads(OM_JSON.read_text(encoding="utf-8"))
    op = {"name": "Mul_2", "type": "Mul", "id": 5, "input": ["Sub_1:0"],
          "output_desc": [{"dtype": "DT_FLOAT16", "shape": {"dim": [1, 3, 300, 300]}, "layout": "NCHW"}]}
    data["graph"][0]["op"] = [op] * ops
    path = tmp_path / "repeated.om.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def test_3_an_om_json_past_the_op_budget_exits_2_naming_the_file(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.graph import load as graph_load

    path = _om_json(tmp_path, 300)
    monkeypatch.setattr(graph_load, "MAX_GRAPH_OPS", 200)
    with pytest.raises(InputError) as e:
        graph_load.load_graph(path)
    assert e.value.path == str(path) and "holds 300 ops, more than the 200" in e.value.problem
    monkeypatch.setattr(graph_load, "MAX_GRAPH_OPS", 300)
    assert len(graph_load.load_graph(path).g) == 300


def test_3_repeated_op_names_load_in_linear_time(tmp_path: Path) -> None:
    from advisor.graph.load import load_graph

    path = _om_json(tmp_path, 20_000)  # 3,000 took 7 s when each repeat searched its suffix from #2 up
    start = time.monotonic()
    graph = load_graph(path)
    assert time.monotonic() - start < 20
    assert len(graph.g) == 20_000


# ---------------------------------------------------------------------------------------------------------
# 6. static audit: shapes bounded, results beyond physical limits refused, garbage shapes exit 2
# ---------------------------------------------------------------------------------------------------------
def _onnx(path: Path, mm_dims: list[int], relu_dims: list[int]) -> Path:
    import onnx
    from onnx import TensorProto, helper

    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, mm_dims)
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, mm_dims)
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, relu_dims)
    m = helper.make_tensor_value_info("m", TensorProto.FLOAT, mm_dims)
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, relu_dims)
    graph = helper.make_graph([helper.make_node("MatMul", ["a", "b"], ["m"], name="mm"),
                               helper.make_node("Relu", ["x"], ["y"], name="relu")], "g", [a, b, x], [m, y])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)]), path)
    return path


@pytest.mark.parametrize("dims", [[2**20, 2**20, 2**20], [2**62, 4]])
def test_6_an_onnx_with_impossible_shapes_is_refused(tmp_path: Path, dims: list[int]) -> None:
    path = _onnx(tmp_path / "huge.onnx", dims, dims)
    assert_input_error(*run("analyze", "--graph", path, "--format", "json", "-q")[::2], "huge.onnx",
                       "beyond physical limits")


def test_6_ops_beyond_physical_limits_are_left_out_with_a_note(tmp_path: Path) -> None:
    sane = _onnx(tmp_path / "sane.onnx", [4, 64, 64], [4, 64, 64])
    mixed = _onnx(tmp_path / "mixed.onnx", [2**20, 2**20, 2**20], [4, 64, 64])
    base = assert_report(*run("analyze", "--graph", sane, "--format", "json", "-q"), (0,))
    report = assert_report(*run("analyze", "--graph", mixed, "--format", "json", "-q"), (0,))
    assert any("1 op(s) left out of the audit" in n and "mm" in n for n in report["input"]["notes"])
    assert report["summary"]["ops"] == base["summary"]["ops"] - 1 == 1
    # the relu alone: its estimate as in the sane graph, nothing near 1e23 us
    assert report["summary"]["device_time_us"] < base["summary"]["device_time_us"]
    assert all((f.get("saving_us") or 0) < 1e6 for f in report["findings"])


@pytest.mark.parametrize(("dim", "problem"), [("abc", "'abc' is not an integer"), (1.5, "'1.5' is not an integer"),
                                              ([1], "'[1]' is not an integer")])
def test_6_a_garbage_om_json_shape_exits_2_naming_the_file(tmp_path: Path, dim: object, problem: str) -> None:
    data = json.loads(OM_JSON.read_text(encoding="utf-8"))
    data["graph"][0]["op"][5]["output_desc"][0]["shape"]["dim"] = [1, dim, 300, 300]
    path = tmp_path / "garbage.om.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    assert_input_error(*run("analyze", "--graph", path, "--format", "json", "-q")[::2], "garbage.om.json", problem)


def test_6_a_corrupt_onnx_exits_2_naming_the_file(tmp_path: Path) -> None:
    raw = _onnx(tmp_path / "ok.onnx", [4, 64, 64], [4, 64, 64]).read_bytes()
    bad = tmp_path / "garbage.onnx"
    bad.write_bytes(raw[:40] + b"\xff" * 30 + raw[70:])
    assert_input_error(*run("analyze", "--graph", bad, "--format", "json", "-q")[::2], "garbage.onnx")


# ---------------------------------------------------------------------------------------------------------
# 6. the number sanitizer and the digit test, as properties
# ---------------------------------------------------------------------------------------------------------
_ANY_NUMBER = (st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-10**30, max_value=10**30)
               | st.sampled_from([2**63, 2**63 - 1, 65_535, 65_536, -1, 0]))


@given(st.lists(_ANY_NUMBER, min_size=1, max_size=30))
@settings(max_examples=150, deadline=None)
def test_6_sanitized_block_dims_are_counts_a_chip_can_launch(values: list[float]) -> None:
    from advisor.ingest.sanitize import MAX_BLOCK_DIM, sanitize

    floats = np.array([float(v) for v in values], dtype="float64")
    ops = empty_frame(["name", "duration_us", "block_dim", "mix_block_dim", "aic_mac_ratio"]).reindex(
        range(len(values)))
    ops["name"] = [f"op{i}" for i in range(len(values))]
    ops["duration_us"] = 1.0
    for col in ("block_dim", "mix_block_dim", "aic_mac_ratio"):
        ops[col] = floats
    profile = Profile(ops=ops, meta=Meta(source="mem"))
    sanitize(profile)
    for col in ("block_dim", "mix_block_dim"):
        out = profile.ops[col].to_numpy(dtype="float64")
        kept = ~np.isnan(out)
        assert ((out[kept] >= 0) & (out[kept] <= MAX_BLOCK_DIM)).all()
        sane = np.isfinite(floats) & (floats >= 0) & (floats <= MAX_BLOCK_DIM)
        assert (kept == sane).all()  # every sane value kept as is, every other one missing
        assert (out[kept] == floats[kept]).all()
    assert np.isfinite(profile.ops["aic_mac_ratio"].to_numpy(dtype="float64")[
        ~np.isnan(profile.ops["aic_mac_ratio"].to_numpy(dtype="float64"))]).all()
    if (~(np.isfinite(floats) & (floats >= 0) & (floats <= MAX_BLOCK_DIM))).any():
        assert any("block_dim" in n and "read as missing" in n for n in profile.meta.notes)


@given(st.text(alphabet=st.characters(categories=["Nd", "No", "Nl", "Lu"]) | st.sampled_from("0123456789-¹²³"),
               max_size=8))
@settings(max_examples=300, deadline=None)
def test_6_ascii_digit_strings_are_exactly_what_int_reads(text: str) -> None:
    from advisor.common.util import is_ascii_digits

    if is_ascii_digits(text):
        assert int(text) >= 0 and text.isascii()
    else:
        assert not (text.isascii() and text.isdigit())


@pytest.mark.parametrize("name", ["¹²", "١٢", "12"])
def test_6_rank_ids_written_in_other_digits_never_crash(name: str) -> None:
    from advisor.ingest.jobs import _rank_id

    assert _rank_id(name) == (12 if name == "12" else None)


@pytest.mark.skipif(not MINDSPORE.is_dir(), reason="../shared/samples not present")
@pytest.mark.parametrize("stamp", [str(2**63 + 5), "1e400", "inf", "¹²"])
def test_6_a_step_trace_stamp_beyond_int64_is_a_skipped_value(tmp_path: Path, stamp: str) -> None:
    d = _step_trace(tmp_path, 1, distinct=False)
    f = d / "step_trace_raw_1_detail_time.csv"
    header, row, average = f.read_text(encoding="utf-8").splitlines()
    cells = row.split(",")
    cells[1] = stamp  # start_point
    f.write_text("\n".join([header, ",".join(cells), average]) + "\n", encoding="utf-8")
    rc, stdout, err = run("analyze", d, "--format", "json", "-q")
    report = assert_report(rc, stdout, err, (0,))
    json.dumps(report, allow_nan=False)
    assert report["time"]["window_us"] > 0


@needs_samples
@pytest.mark.parametrize(("column", "value"), [("Block Dim", "1e400"), ("Block Dim", "inf"),
                                               ("Block Dim", "99999999999999999999999"), ("Duration(us)", "1e400")])
def test_6_absurd_numbers_in_kernel_details_are_skipped_values(tmp_path: Path, column: str, value: str) -> None:
    tn = mini_tn(tmp_path / "TN")
    set_cell(tn / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", column, value)
    rc, stdout, err = run("analyze", tn, "--format", "json", "-q")
    report = assert_report(rc, stdout, err, (0,))
    json.dumps(report, allow_nan=False)
    assert any("read as missing" in n for n in report["input"]["notes"]), report["input"]["notes"]
