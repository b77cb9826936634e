"""Metric columns stored at the precision the data has (issue 18.2): float32 where that holds every value the file
wrote, read back exactly with ``advisor.model.metric_values`` -- so no finding, score or time changes (18.4)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from advisor import model
from advisor.engine import kb_engine as engine
from advisor.ingest import detect, read_source
from advisor.kb import KnowledgeBase
from advisor.model import OPS_FULL_PRECISION_COLUMNS, OpsProjection, metric_values, store_metric
from tests import golden


def _parsed(texts: list[str]) -> np.ndarray:
    """Values as a CSV reader parses the texts (correctly rounded float64)."""
    return np.array([float(t) if t else np.nan for t in texts])


def test_ratios_and_times_with_the_files_decimals_are_stored_as_float32_and_read_back_exactly() -> None:
    rng = np.random.default_rng(7)
    ratios = _parsed([f"{v:.3f}" for v in rng.random(5000)] + [""])
    times = _parsed([f"{v:.3f}" for v in rng.random(5000) * 4000] + ["0.001", ""])
    for values in (ratios, times):
        stored = store_metric(values)
        assert stored.dtype == np.float32
        np.testing.assert_array_equal(metric_values(stored), values)  # NaN where NaN
        part = stored[::7]  # a part of a column (smaller magnitudes) reads back as exactly
        np.testing.assert_array_equal(metric_values(pd.Series(part)), values[::7])


def test_values_a_float32_cannot_hold_keep_the_column_float64() -> None:
    cycles = _parsed(["123456789", "5", "7"])  # more than 24 bits
    fine = _parsed(["1234.567891", "0.5", "2"])  # 10 significant digits
    stamps = _parsed(["1700000000123.456", "1700000000124.5"])
    with_inf = np.array([1.5, np.inf])
    for values in (cycles, fine, stamps, with_inf):
        assert store_metric(values) is values
    whole = _parsed(["16000000", "3", "12"])  # integers below 2**24 are exact in float32
    assert store_metric(whole).dtype == np.float32
    np.testing.assert_array_equal(metric_values(store_metric(whole)), whole)


def test_float64_columns_read_as_they_are() -> None:
    values = np.array([0.1, 0.2, np.nan])
    assert metric_values(values) is values
    np.testing.assert_array_equal(metric_values(pd.Series(values)), values)


NAMES = golden.committed()


@pytest.fixture
def negated_metrics(monkeypatch: pytest.MonkeyPatch) -> None:
    """Stored metrics negated (and ``metric_values`` undoing it): a rule reading a metric column without
    ``metric_values`` sees every ratio and pipe time with the wrong sign, and its finding changes."""
    store, restore = model._store, model._restore
    monkeypatch.setattr(model, "_store", lambda v: store(-v))
    monkeypatch.setattr(model, "_restore", lambda s: -restore(s))


@pytest.mark.parametrize("name", NAMES)
def test_every_reader_of_a_metric_goes_through_metric_values(name: str, negated_metrics: None) -> None:
    diff = golden.changes(name, lines=40)
    if diff:
        pytest.fail(f"{name}: a metric column is read without advisor.model.metric_values\n{diff}")


def _info(cls: type[KnowledgeBase]) -> engine.KBInfo:
    return engine.KBInfo(cls=cls, plugin="test", package="test", package_version="0")


def test_metrics_are_stored_at_precision_only_when_every_knowledge_base_reads_them_through_metric_values() -> None:
    class Current(KnowledgeBase):
        id = "current"
        api_version = "1.3"
        ops_columns = ()

    class Older(KnowledgeBase):
        id = "older"
        api_version = "1.2"
        ops_columns = ()

    assert engine.ops_projection([_info(Current)]).metrics_at_precision
    assert not engine.ops_projection([_info(Current), _info(Older)]).metrics_at_precision
    builtin = [i for i in engine.discover(engine.find_plugins()) if i.cls.__module__.startswith("advisor.knowledge_bases.")]
    assert len(builtin) >= 13 and engine.ops_projection(builtin).metrics_at_precision


SPLIT_CORE_KERNELS = "Ascend__msinsight/test/st/level2/rank_0_ascend_pt"


def test_a_real_profile_read_at_precision_holds_the_same_values() -> None:
    root = golden.SAMPLES / SPLIT_CORE_KERNELS
    if not root.is_dir():
        pytest.skip("../shared/samples not present")
    src = detect(root)[0]
    full = read_source(src, OpsProjection.of(("*",))).ops
    compact = read_source(src, OpsProjection.of(("*",), metrics_at_precision=True)).ops
    stored = [c for c in compact.columns if compact[c].dtype == np.float32]
    assert len(stored) >= 20, "the kernel_details metrics (ratios, pipe times) are stored as float32"
    assert not set(stored) & OPS_FULL_PRECISION_COLUMNS
    assert list(compact.columns) == list(full.columns)
    for col in full.columns:
        if pd.api.types.is_float_dtype(full[col].dtype):
            np.testing.assert_array_equal(metric_values(compact[col]), metric_values(full[col]), err_msg=col)
    saved = full.memory_usage(index=False).sum() - compact.memory_usage(index=False).sum()
    assert saved >= 4 * len(full) * len(stored) * 0.99
