"""torch_npu ``Level0`` .db exports: op types and op task types are not recorded, so each op's core comes from
the runtime task type (``TASK.taskType``) and no compute time is lost.

No level-0 .db is in the shared samples; the fixture reproduces one from the level-1 sample of the same run layout
(msinsight ``test/data/pytorch/db/level1/rank0_ascend_pt``) by removing what level 0 does not collect:

* op_summary docs (CANN "op_summary（算子详细信息）", task_time=l0): ``OP Type``, ``OP State`` and ``Task Type``
  are ``N/A``, ``Block Dim`` is 0, no AI Core PMU data -> ``COMPUTE_TASK_INFO.opType``/``taskType`` and the tensor
  descriptions set to the ``N/A`` string id, ``blockDim``/``mixBlockDim`` to 0, ``TASK_PMU_INFO`` dropped (the
  level-0 text sample of the same producer has exactly these ``N/A`` cells and block dims of 0);
* torch_npu ``ProfilerLevel`` docs: Level1 adds "CANN层AscendCL数据 ... 以及HCCL的communication.json" -> the
  ``acl`` rows of ``CANN_API`` and analysis.db's ``CommAnalyzer*`` tables removed.

Every expected number is computed here with plain SQL on the fixture (or on the level-1 original), not by the
reader under test.
"""

from __future__ import annotations

import json
import shutil
import sqlite3
from contextlib import closing
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.ingest import load
from advisor.ingest.sqlite_db import read_only_uri
from advisor.report.json_report import validate

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"
LEVEL1 = SAMPLES / "Ascend__msinsight/test/data/pytorch/db/level1/rank0_ascend_pt"
DB_NAME = "ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"

pytestmark = pytest.mark.skipif(not (LEVEL1 / DB_NAME).is_file(), reason="../shared/samples not present")

_LEVEL0_NA_COLUMNS = ("opType", "taskType", "inputFormats", "inputDataTypes", "inputShapes", "outputFormats",
                      "outputDataTypes", "outputShapes", "attrInfo")


def make_level0_db(tmp: Path) -> Path:
    """A level-0-like torch_npu db export built from the level-1 sample (see the module docstring)."""
    root = tmp / "rank0_ascend_pt"
    shutil.copytree(LEVEL1, root)
    for p in root.rglob("*.db"):
        p.chmod(0o644)
    # closed (not only committed) so nothing stays in a -wal file the read-only reader would not see
    with closing(sqlite3.connect(root / DB_NAME)) as con:
        na = con.execute("SELECT id FROM STRING_IDS WHERE value = 'N/A'").fetchone()[0]
        assigns = ", ".join(f"{c} = {na}" for c in _LEVEL0_NA_COLUMNS)
        con.execute(f"UPDATE COMPUTE_TASK_INFO SET {assigns}, blockDim = 0, mixBlockDim = 0")
        con.execute("DROP TABLE TASK_PMU_INFO")
        con.execute("DELETE FROM CANN_API WHERE type = (SELECT id FROM ENUM_API_TYPE WHERE name = 'acl')")
        con.commit()
    with closing(sqlite3.connect(root / "ASCEND_PROFILER_OUTPUT/analysis.db")) as con:
        for table in ("CommAnalyzerTime", "CommAnalyzerBandwidth", "CommAnalyzerMatrix"):
            con.execute(f"DROP TABLE IF EXISTS {table}")
        con.commit()
    return root


@pytest.fixture(scope="module")
def level0(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_level0_db(tmp_path_factory.mktemp("level0"))


def _sql(path: Path, query: str) -> list[tuple]:
    with closing(sqlite3.connect(read_only_uri(path), uri=True)) as con:
        return con.execute(query).fetchall()


_TASKS = """SELECT t.startNs, t.endNs - t.startNs, tt.value, ct.value
            FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId
            JOIN STRING_IDS tt ON tt.id = t.taskType LEFT JOIN STRING_IDS ct ON ct.id = c.taskType
            ORDER BY t.startNs"""


def test_fixture_lacks_what_level0_lacks(level0: Path) -> None:
    db = level0 / DB_NAME
    assert _sql(db, "SELECT DISTINCT s.value FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.opType") \
        == [("N/A",)]
    assert _sql(db, "SELECT DISTINCT s.value FROM COMPUTE_TASK_INFO c JOIN STRING_IDS s ON s.id = c.taskType") \
        == [("N/A",)]
    assert not _sql(db, "SELECT name FROM sqlite_master WHERE name = 'TASK_PMU_INFO'")


def test_rows_and_cores_come_from_the_task_table(level0: Path) -> None:
    [profile] = load(level0)
    ops = profile.ops
    db = level0 / DB_NAME
    n_compute = _sql(db, "SELECT COUNT(*) FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId")
    n_comm = _sql(db, "SELECT COUNT(*) FROM COMMUNICATION_OP")
    assert len(ops) == n_compute[0][0] + n_comm[0][0] == 191

    # the level-1 original records each task's core: level 0 must agree wherever the runtime type is exact
    truth = _sql(LEVEL1 / DB_NAME, _TASKS)
    compute = ops[ops["core"].astype(str) != "HCCL"].sort_values("start_us", kind="stable")
    assert len(compute) == len(truth)
    got = compute["core"].astype(str).tolist()
    exact = 0
    for core, (_, _, runtime_type, level1_core) in zip(got, truth, strict=True):
        if runtime_type == "KERNEL_AICORE":
            assert core == "AI_CORE"  # a mix kernel launched as an AI Core kernel stays AI_CORE at level 0
        else:
            assert core == level1_core, runtime_type
            exact += 1
    assert exact == 156  # 149 KERNEL_AIVEC + 5 MIX_AIV + 2 STARS_COMMON
    assert sum(c == "AI_VECTOR_CORE" for c in got) == 149


def test_no_compute_time_is_lost_and_nothing_is_invented(level0: Path) -> None:
    [profile] = load(level0)
    ops = profile.ops
    db = level0 / DB_NAME
    [(compute_ns,)] = _sql(db, "SELECT SUM(t.endNs - t.startNs) FROM COMPUTE_TASK_INFO c "
                               "JOIN TASK t ON t.globalTaskId = c.globalTaskId")
    compute = ops[ops["core"].astype(str) != "HCCL"]
    assert compute["core"].notna().all()
    assert compute["duration_us"].sum() == pytest.approx(compute_ns / 1000.0, rel=1e-9)
    assert compute_ns / 1000.0 > 8800.0  # the ~8.8 ms of AI Core/vector work the summary used to drop
    # op types are not recorded at level 0: none is made up from the op names
    assert compute["type"].isna().all()
    # block dim 0 means "not collected" here, not zero cores
    assert compute["block_dim"].isna().all()
    assert any("profiler level 0" in n and "TASK.taskType" in n for n in profile.meta.notes)


def test_level1_cores_are_untouched() -> None:
    [profile] = load(LEVEL1)
    truth = [row[3] for row in _sql(LEVEL1 / DB_NAME, _TASKS)]
    compute = profile.ops[profile.ops["core"].astype(str) != "HCCL"].sort_values("start_us", kind="stable")
    assert compute["core"].astype(str).tolist() == truth
    assert not any("profiler level 0" in n for n in profile.meta.notes)


def test_analyze_level0_end_to_end(level0: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.json"
    result = CliRunner().invoke(main, ["analyze", str(level0), "--format", "json", "-o", str(out), "--quiet"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.stderr
    report = json.loads(out.read_text(encoding="utf-8"))
    validate(report)
    by_core = report["summary"]["by_core"]
    [(vec_ns,)] = _sql(level0 / DB_NAME, "SELECT SUM(t.endNs - t.startNs) FROM TASK t "
                                         "JOIN STRING_IDS s ON s.id = t.taskType "
                                         "WHERE s.value = 'KERNEL_AIVEC' AND t.globalTaskId IN "
                                         "(SELECT globalTaskId FROM COMPUTE_TASK_INFO)")
    assert by_core["AI_VECTOR_CORE"] == pytest.approx(vec_ns / 1000.0, abs=1e-3)
    assert np.isclose(sum(v for k, v in by_core.items() if k != "HCCL"),
                      report["summary"]["device_time_us"] - by_core["HCCL"])
