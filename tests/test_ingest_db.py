"""SQLite exports: the real torch_npu / msprof samples end to end, a hand-written mini export with the schema
variants (tests/data/ingest_db/mini_msprof.sql), bad input, and that reading never writes."""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest

from advisor.common.errors import InputError
from advisor.ingest import load, read_source
from advisor.ingest.detect import RankSource
from advisor.ingest.sqlite_db import read_analysis_db, read_only_uri
from advisor.ingest.timebase import absolute_ns
from advisor.model import Meta

HERE = Path(__file__).resolve().parent
SAMPLES = HERE.parents[0].parent / "shared" / "samples"
MSINSIGHT = SAMPLES / "Ascend__msinsight"
TORCH_DB_DIR = MSINSIGHT / "test/data/pytorch/db/level1/rank0_ascend_pt"
TORCH_DB = TORCH_DB_DIR / "ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
MSPROF_DB = MSINSIGHT / "server/src/test/test_data/full_db/msprof_0.db"
MINI_SQL = HERE / "data" / "ingest_db" / "mini_msprof.sql"

needs_samples = pytest.mark.skipif(not TORCH_DB.is_file(), reason="../shared/samples not present")


def _sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture
def mini_db(tmp_path: Path) -> Path:
    """The mini export built from its SQL fixture, inside a ``PROF_*`` directory."""
    prof = tmp_path / "PROF_000001_20250101000000000_ABCDEFGHIJKLMNOP"
    prof.mkdir()
    db = prof / "msprof_20250101000000.db"
    con = sqlite3.connect(db)
    con.executescript(MINI_SQL.read_text(encoding="utf-8"))
    con.commit()
    con.close()
    return db


# ---------------------------------------------------------------------------------------------------------
# the mini export: every mapping checked against values written in the SQL fixture
# ---------------------------------------------------------------------------------------------------------
def test_mini_export_ops(mini_db: Path) -> None:
    [profile] = load(mini_db.parent)
    assert profile.meta.layout == "msprof-db"
    ops = profile.ops
    # 3 compute tasks (TASK x COMPUTE_TASK_INFO) + 1 COMMUNICATION_OP; the EVENT_WAIT task is not an op
    assert list(ops["name"]) == ["MatMul_1", "Add_2", "hcom_allReduce__1_0_1", "MatMul_1"]
    assert list(ops["core"]) == ["AI_CORE", "AI_VECTOR_CORE", "HCCL", "AI_CORE"]
    assert list(ops["type"]) == ["MatMul", "Add", "hcom_allReduce_", "MatMul"]
    assert ops["duration_us"].tolist() == pytest.approx([100.0, 10.0, 400.0, 50.5])
    assert absolute_ns(profile.meta, ops["start_us"].iloc[0])[0] == 1_000_000_000_000
    assert ops["wait_us"].tolist() == pytest.approx([0.0, 100.0, 150.0, 2.5])
    assert ops["block_dim"].tolist()[:2] == [24.0, 48.0]  # from blockNum
    assert ops["step"].tolist() == [1.0, 1.0, 1.0, 2.0]
    assert np.isnan(ops["model_id"].iloc[0]) and ops["model_id"].iloc[3] == 7.0  # 4294967295 = eager
    # tensors: quotes stripped, FORMAT_ dropped per tensor, NULL = missing
    assert ops["input_shapes"].iloc[0] == "128,256;256,64"
    assert ops["input_formats"].iloc[0] == "ND;FRACTAL_NZ"
    assert ops["input_dtypes"].iloc[0] == "FLOAT16;FLOAT16"
    assert ops["input_shapes"].isna().iloc[1]


def test_mini_export_pmu_metrics_keep_their_scale(mini_db: Path) -> None:
    """The fixture writes PMU times in us (95.5 us for a 100 us task): they must not be divided by 1000."""
    ops = load(mini_db.parent)[0].ops
    assert ops["aicore_time_us"].iloc[0] == pytest.approx(95.5)
    assert ops["mac_ratio"].iloc[0] == pytest.approx(0.8)
    assert ops["aiv_time_us"].iloc[1] == pytest.approx(9.0)
    assert ops["vec_ratio"].iloc[1] == pytest.approx(0.6)
    assert ops["mte2_ratio"].iloc[1] == pytest.approx(0.7)  # vector op: unified from aiv_*
    assert ops["mte2_ratio"].iloc[3] == pytest.approx(0.2)
    assert np.isnan(ops["mac_ratio"].iloc[2])  # HCCL op has no PMU row: NaN, not 0


def test_mini_export_other_tables(mini_db: Path) -> None:
    profile = load(mini_db.parent)[0]
    steps = profile.steps.set_index("step")
    assert list(steps.index) == [1.0, 2.0]
    assert steps.loc[1.0, "computing_us"] == pytest.approx(110.0)
    assert steps.loc[1.0, "communication_us"] == pytest.approx(400.0)
    assert steps.loc[1.0, "free_us"] == pytest.approx(200.0)
    assert steps.loc[2.0, "free_us"] == pytest.approx(149.5)
    assert steps.loc[1.0, "overlapped_us"] == pytest.approx(0.0)

    comm = profile.comm
    assert len(comm) == 1 and comm["op"].iloc[0] == "hcom_allReduce__1_0_1" and comm["group"].iloc[0] == "group_a"
    assert comm["elapse_us"].iloc[0] == pytest.approx(400.0) and comm["wait_us"].iloc[0] == pytest.approx(150.0)

    api = profile.api.set_index("name")
    assert api.loc["launch", "level"] == "node" and api.loc["launch", "count"] == 2
    assert api.loc["launch", "total_us"] == pytest.approx(20.0)
    assert api.loc["aclrtSynchronizeStream", "avg_us"] == pytest.approx(50.0)

    ev = profile.events
    cann = ev[ev["process"] == "CANN"]
    assert sorted(cann["name"].astype(str)) == ["AscendCL@aclrtSynchronizeStream", "Node@launch", "Node@launch"]
    assert set(cann["tid"].astype(float)) == {7.0}  # globalTid 7 << 32 | 7
    hw = ev[ev["process"] == "Ascend Hardware"]
    assert list(hw["name"].astype(str)) == ["EVENT_WAIT"]
    assert (ev["process"] == "Overlap Analysis").sum() == 7

    assert profile.memory["allocated_mb"].iloc[0] == pytest.approx(1.0)
    assert profile.memory["reserved_mb"].iloc[0] == pytest.approx(2.0)
    assert profile.memory["component"].iloc[0] == "PTA"

    meta = profile.meta
    assert meta.rank == 3  # RANK_DEVICE_MAP (the directory name carries no rank)
    assert meta.chip == "Ascend910B"
    assert meta.environment == {"HCCL_ALGO": "ring"}
    assert str(mini_db) in meta.files_read


def test_rank_from_database_when_layout_has_none(mini_db: Path) -> None:
    profile = read_source(RankSource(mini_db, "msprof-db"))
    assert profile.meta.rank == 3


# ---------------------------------------------------------------------------------------------------------
# real exports
# ---------------------------------------------------------------------------------------------------------
@needs_samples
def test_mindspore_db_export_is_its_own_layout(tmp_path: Path) -> None:
    """MindSpore 2.x writes the same database as torch_npu (msprof-analyze's schema) as
    ``*_ascend_ms/ASCEND_PROFILER_OUTPUT/ascend_mindspore_profiler_<rank>.db``: the torch_npu sample under that name
    is layout mindspore-db, read by the same reader, with MindSpore's framework and execution contexts."""
    out = tmp_path / "rank0_ascend_ms" / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    shutil.copyfile(TORCH_DB, out / "ascend_mindspore_profiler_0.db")
    shutil.copyfile(TORCH_DB.parent / "analysis.db", out / "analysis.db")
    with closing(sqlite3.connect(read_only_uri(TORCH_DB), uri=True)) as con:
        compute = con.execute("SELECT COUNT(*) FROM COMPUTE_TASK_INFO").fetchone()[0]
    [profile] = load(out.parent)
    assert profile.meta.layout == "mindspore-db" and profile.meta.rank == 0
    assert profile.meta.framework == "mindspore"
    assert profile.meta.context in ("mindspore-graph", "mindspore-pynative")
    assert (profile.ops["core"] != "HCCL").sum() == compute
    [alone] = load(out / "ascend_mindspore_profiler_0.db")
    assert alone.meta.layout == "mindspore-db" and len(alone.ops) == len(profile.ops)


@needs_samples
def test_torch_npu_db_dir_end_to_end() -> None:
    [profile] = load(TORCH_DB_DIR)
    meta = profile.meta
    assert meta.layout == "torch_npu-db"
    assert meta.framework == "pytorch" and meta.chip == "Ascend910B"
    assert str(TORCH_DB) in meta.files_read and str(TORCH_DB.parent / "analysis.db") in meta.files_read
    ops = profile.ops
    assert len(ops) == 191  # 187 compute tasks + 4 hcom ops, as kernel_details.csv of the same run lists them
    assert ops["core"].value_counts().to_dict() == {"AI_VECTOR_CORE": 149, "AI_CORE": 23, "MIX_AIV": 13,
                                                    "HCCL": 4, "DSA_SQE": 2}
    assert set(ops["step"].dropna()) == {50.0}
    conv = ops[ops["name"] == "Conv2D1"].iloc[0]
    assert conv["type"] == "Conv2D" and conv["input_formats"] == "NC1HWC0;FRACTAL_Z;NCHW"
    assert conv["aicore_time_us"] == pytest.approx(311.573402777778)  # aic_total_time 311573.4 ns
    assert 0 < conv["mac_ratio"] < 1
    # analysis.db wins for steps and comm
    assert profile.steps["step"].tolist() == [50.0]
    assert profile.steps["computing_us"].iloc[0] == pytest.approx(8903.431)
    assert len(profile.comm) == 8 and set(profile.comm["transport"].astype(str)) == {"HCCS", "SDMA"}
    assert profile.available >= {"ops", "metrics", "steps", "comm", "api", "events", "memory"}


@needs_samples
def test_msprof_db_file_and_dir_agree() -> None:
    from_file = read_source(RankSource(MSPROF_DB, "msprof-db"))
    from_dir = load(MSPROF_DB.parent)[0]
    assert len(from_file.ops) == len(from_dir.ops) == 11
    assert from_file.ops["name"].tolist() == from_dir.ops["name"].tolist()
    # MSTX_EVENTS holds 13 ranges of another capture (2025; the session is 2023): skipped, not stretched over
    with sqlite3.connect(read_only_uri(MSPROF_DB), uri=True) as con:
        session = con.execute("SELECT startTimeNs, endTimeNs FROM SESSION_TIME_INFO").fetchone()
        mstx = con.execute("SELECT startNs, endNs FROM MSTX_EVENTS").fetchall()
    outside = [r for r in mstx if r[1] < session[0] - 10**9 or r[0] > session[1] + 10**9]
    assert len(mstx) == len(outside) == 13
    assert len(from_file.tx) == 0
    [skip] = [s for s in from_file.meta.files_skipped if s.path.endswith("MSTX_EVENTS")]
    assert "13 of 13" in skip.reason and "another capture" in skip.reason


@needs_samples
def test_analysis_db_alone_is_a_profile() -> None:
    path = MSINSIGHT / "test/st/level2/rank_3_ascend_pt/ASCEND_PROFILER_OUTPUT/analysis.db"
    [profile] = load(path)
    assert len(profile.ops) == 0 and len(profile.steps) == 1 and len(profile.comm) == 39
    steps, comm = read_analysis_db(path, Meta())
    assert steps["device_id"].tolist() == [5.0]
    assert set(comm["kind"].astype(str)) == {"collective", "p2p"}


# ---------------------------------------------------------------------------------------------------------
# bad input
# ---------------------------------------------------------------------------------------------------------
def test_not_sqlite_is_one_line_input_error(tmp_path: Path) -> None:
    bad = tmp_path / "msprof_20250101000000.db"
    bad.write_text("Model ID,Task ID\n1,2\n", encoding="utf-8")
    with pytest.raises(InputError) as err:
        load(bad)
    assert err.value.path == str(bad)
    assert "not an SQLite database" in err.value.problem and "\n" not in str(err.value)


def test_sqlite_without_task_table(tmp_path: Path) -> None:
    db = tmp_path / "ascend_pytorch_profiler_0.db"
    con = sqlite3.connect(db)
    con.execute("CREATE TABLE STRING_IDS (id INTEGER PRIMARY KEY, value TEXT)")
    con.commit()
    con.close()
    with pytest.raises(InputError) as err:
        load(db)
    assert "no TASK table" in err.value.problem and err.value.path == str(db)


def test_missing_database_in_layout_dir(tmp_path: Path) -> None:
    pt = tmp_path / "w_1_ascend_pt"
    (pt / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
    with pytest.raises(InputError):
        read_source(RankSource(pt, "torch_npu-db"))


# ---------------------------------------------------------------------------------------------------------
# read-only
# ---------------------------------------------------------------------------------------------------------
def test_reading_never_writes(mini_db: Path) -> None:
    """Hash before/after, no journal/WAL files, and it works in a read-only directory."""
    before = _sha(mini_db)
    os.chmod(mini_db, stat.S_IRUSR)
    os.chmod(mini_db.parent, stat.S_IRUSR | stat.S_IXUSR)
    try:
        listing = sorted(p.name for p in mini_db.parent.iterdir())
        profile = load(mini_db.parent)[0]
        assert len(profile.ops) == 4
        assert sorted(p.name for p in mini_db.parent.iterdir()) == listing
    finally:
        os.chmod(mini_db.parent, stat.S_IRWXU)
        os.chmod(mini_db, stat.S_IRUSR | stat.S_IWUSR)
    assert _sha(mini_db) == before


@needs_samples
def test_real_samples_unchanged(tmp_path: Path) -> None:
    copy = tmp_path / "rank0_ascend_pt"
    shutil.copytree(TORCH_DB_DIR, copy)
    hashes = {p.name: _sha(p) for p in (copy / "ASCEND_PROFILER_OUTPUT").iterdir()}
    load(copy)
    assert {p.name: _sha(p) for p in (copy / "ASCEND_PROFILER_OUTPUT").iterdir()} == hashes
