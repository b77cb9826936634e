"""Ops column projection (plugin API 1.2): when every knowledge base of a run declares the ops columns it reads,
readers skip the others -- and the report is the one the whole table gives."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.engine import kb_engine as engine
from advisor.ingest import detect, read_source
from advisor.ingest.normalize import share_constant_columns
from advisor.kb import KnowledgeBase
from advisor.model import OPS_PIPELINE_COLUMNS, OpsProjection
from advisor.pipeline.analysis import AnalysisOptions, run_analysis

SAMPLES = Path(__file__).resolve().parents[2] / "shared" / "samples"
SPLIT_CORE = [  # kernel_details / op_summary with aic_*/aiv_* columns no built-in rule reads
    "Ascend__msinsight/test/data/pytorch/text/level2/rank0_ascend_pt",
    "Ascend__msprof-analyze/test/ut/advisor/compute_advice/data/kernel_details.csv",
    "neo-pan__ascend-msprof-skill/tests/fixtures/real_cann_minimal/reports/PROF_001",
    "hicann__cann-learning-hub/tutorials/ascendc_operator_development_V2/06_advanced_features/src/06.04_super_kernel/"
    "performance_case/profiling-sk/PROF_000001_20260831222700438_02482130MJQJQRAN",
]


def _sample(rel: str) -> Path:
    path = SAMPLES / rel
    if not path.exists():
        pytest.skip(f"{path} not present")
    return path


def _report(path: Path, tmp_path: Path) -> dict:
    neutral = tmp_path / "pyproject.toml"
    neutral.write_text("", encoding="utf-8")
    report = run_analysis(path, options=AnalysisOptions(pyproject=neutral), workers=1).report
    text = json.dumps(report, sort_keys=True, default=str)
    report = json.loads(text)
    report.pop("generated_at", None)
    for kb in report.get("knowledge_bases", []):
        kb.pop("seconds", None)
    return report


@pytest.mark.parametrize("rel", SPLIT_CORE)
def test_projected_read_gives_the_report_of_the_whole_table(rel: str, tmp_path: Path, monkeypatch) -> None:
    path = _sample(rel)
    projected = _report(path, tmp_path)
    monkeypatch.setattr(engine, "ops_projection", lambda infos: None)
    whole = _report(path, tmp_path)
    assert projected == whole


def test_projection_drops_unread_metric_columns_and_keeps_derived_ones() -> None:
    src = detect(_sample(SPLIT_CORE[0]))[0]
    whole = read_source(src).ops
    projected = read_source(src, OpsProjection.of(())).ops
    unread = [c for c in whole.columns if not OpsProjection.of(()).wants(c)]
    assert unread, "the sample has per-core columns no built-in rule reads"
    assert not set(unread) & set(projected.columns)
    assert len(projected) == len(whole)
    for col in projected.columns:  # every kept column -- mac_ratio etc. derived from aic_/aiv_ columns included
        pd.testing.assert_series_equal(projected[col], whole[col], check_names=False, obj=col)


def test_a_knowledge_base_that_does_not_declare_its_columns_turns_the_projection_off() -> None:
    class Declares(KnowledgeBase):
        id = "declares"
        ops_columns = ("aiv_*_ratio",)

    class Silent(KnowledgeBase):
        id = "silent"

    class ClusterWide(KnowledgeBase):
        id = "cluster-wide"
        scope = "cluster"

    def info(cls: type[KnowledgeBase]) -> engine.KBInfo:
        return engine.KBInfo(cls=cls, plugin="test", package="test", package_version="0")

    projection = engine.ops_projection([info(Declares), info(ClusterWide)])
    assert projection is not None
    assert projection.wants("aiv_vec_ratio") and projection.wants("start_us")
    assert not projection.wants("aic_icache_miss_rate")
    assert all(projection.wants(c) for c in OPS_PIPELINE_COLUMNS if "*" not in c)
    assert engine.ops_projection([info(Declares), info(Silent)]) is None


@pytest.mark.parametrize("bad", ["aiv_vec_ratio", ("aiv_vec_ratio", 3)])
def test_ops_columns_must_be_a_tuple_of_names(bad: object) -> None:
    cls = type("BadColumns", (KnowledgeBase,), {"id": "bad-columns", "title": "t", "ops_columns": bad,
                                                "analyze": lambda self, ctx: ()})
    assert "ops_columns" in (engine._invalid_class(cls) or "")


def test_constant_columns_are_shared_without_changing_a_value() -> None:
    n = 100_000
    df = pd.DataFrame({"missing": np.full(n, np.nan), "zero": np.zeros(n), "varies": np.arange(n, dtype=float),
                       "name": pd.Categorical(["a"] * n)})
    before = df.copy(deep=True)
    out = share_constant_columns(df)
    pd.testing.assert_frame_equal(out, before)
    for col in ("missing", "zero"):
        values = out[col].to_numpy()
        assert values.strides == (0,) and values.base is not None and values.base.nbytes == 8
    assert out["varies"].to_numpy().strides == (8,)
    out.loc[3, "zero"] = 5.0  # pandas copies the shared column before writing
    assert out["zero"].iloc[3] == 5.0 and out["zero"].sum() == 5.0 and before["zero"].sum() == 0.0


def test_the_ops_of_a_read_profile_take_in_place_writes() -> None:
    """Columns read as one shared value (all NaN here: metrics the sample lacks) are read-only arrays; the profile
    that leaves ingest still takes ``.loc`` writes, on itself and on a frame derived from it."""
    ops = read_source(detect(_sample(SPLIT_CORE[0]))[0], OpsProjection.of(())).ops
    shared = [c for c in ops.columns if ops[c].dtype == np.float64 and ops[c].to_numpy().strides == (0,)]
    assert shared, "the sample has metrics it does not record"
    col = shared[0]
    before = ops[col].to_numpy().copy()
    view = ops[["name", col]]
    ops.loc[0, col] = 1.5
    view.loc[1, col] = 2.5
    np.testing.assert_array_equal(ops[col].to_numpy()[1:], before[1:])  # the other rows keep the shared value
    assert ops[col].iloc[0] == 1.5
    np.testing.assert_array_equal(view[col].to_numpy()[[0, 2]], before[[0, 2]])
    assert view[col].iloc[1] == 2.5


def test_finalize_ops_outside_ingest_gives_writable_columns() -> None:
    from advisor.ingest.normalize import finalize_ops

    ops = finalize_ops(pd.DataFrame({"name": ["a", "b"], "duration_us": [1.0, 2.0]}))
    ops.loc[0, "mac_ratio"] = 0.5  # a missing metric filled in by a test or a plugin
    assert ops["mac_ratio"].tolist()[0] == 0.5 and np.isnan(ops["mac_ratio"].iloc[1])
