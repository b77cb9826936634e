"""What the client keeps of each rank of a cluster (advisor.pipeline.rank_result, issue 33): the same tables, statuses
and findings as the rank's analysis gave, in a fraction of the memory, whatever order the ranks arrive in."""

from __future__ import annotations

import gc
import pickle
import tracemalloc
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from advisor import ingest
from advisor.engine.kb_engine import merge_statuses
from advisor.pipeline.analysis import AnalysisOptions, analyze_rank, load_rules, select_kbs
from advisor.pipeline.rank_result import RANK_DATA_TABLES, SUMMARY_TABLES, RankResult, Received, compact
from tests import cluster_gen

ROOT = Path(__file__).resolve().parent.parent



@pytest.fixture(scope="module")
def ranks(tmp_path_factory: pytest.TempPathFactory) -> list[RankResult]:
    out = tmp_path_factory.mktemp("compact") / "cluster"
    cluster_gen.load().generate(out, ranks=4, tp=1, pp=2, steps=2, ops=8, seed=5)
    options = AnalysisOptions()
    rules, infos = load_rules(options), select_kbs(options)
    sources = ingest.detect(out)
    return [analyze_rank(s, None, infos, rules, None, None, ranks_in_input=len(sources)) for s in sources]


def _same(a: Any, b: Any) -> None:
    if isinstance(a, pd.DataFrame):
        pd.testing.assert_frame_equal(a, b)
    elif isinstance(a, pd.Series):
        pd.testing.assert_series_equal(a, b)
    elif isinstance(a, (set, dict, list, str, int, float, type(None))):
        assert a == b
    else:  # the time model (its link waits are a table): compared field by field through its pickle
        assert pickle.dumps(a) == pickle.dumps(b)


def _held_bytes(objects: list[Any]) -> int:
    """Memory the unpickled ``objects`` take (tracemalloc), shared values counted once."""
    blob = pickle.dumps(objects)
    gc.collect()
    tracemalloc.start()
    try:
        kept = pickle.loads(blob)
        gc.collect()
        size = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    del kept
    return size


def test_compact_ranks_read_the_same_tables_statuses_and_findings_in_any_arrival_order(
        ranks: list[RankResult]) -> None:
    originals = pickle.loads(pickle.dumps(ranks))
    received = Received()
    held: dict[int, RankResult] = {}
    for index in (2, 0, 3, 1):  # as the workers send them back, not in rank order
        sent = pickle.loads(pickle.dumps(compact(pickle.loads(pickle.dumps(ranks[index])))))
        got = received.take(index, sent)
        assert got is not None and got.statuses == []
        held[index] = got
    for index, original in enumerate(originals):
        summary = held[index].summary
        for name in SUMMARY_TABLES:
            _same(getattr(original.summary, name), getattr(summary, name))
        data, expected = summary.rank_data(), original.summary.rank_data()
        for name in RANK_DATA_TABLES:
            _same(getattr(expected, name), getattr(data, name))
        assert (data.rank, data.busy_us, data.device_time_us) == (expected.rank, expected.busy_us,
                                                                  expected.device_time_us)
        assert summary.limits() == original.summary.limits()
        assert [f.to_dict() for f in held[index].findings] == [f.to_dict() for f in original.findings]
        assert held[index].platform == original.platform
    merged = merge_statuses([r.statuses for r in originals])  # in rank order, as a single pass gives them
    assert [s.to_dict() for s in received.statuses] == [s.to_dict() for s in merged]


def test_a_failed_rank_does_not_hold_back_the_statuses_of_the_ranks_after_it(ranks: list[RankResult]) -> None:
    received = Received()
    received.take(1, compact(pickle.loads(pickle.dumps(ranks[1]))))
    assert received.statuses == []  # rank 0 has not arrived yet
    received.take(0, None)  # rank 0 failed
    assert [s.to_dict() for s in received.statuses] == [s.to_dict() for s in merge_statuses([ranks[1].statuses])]


def test_the_client_holds_a_fraction_of_each_rank(ranks: list[RankResult]) -> None:
    received = Received()
    held = [received.take(i, compact(pickle.loads(pickle.dumps(r)))) for i, r in enumerate(ranks)]
    full, small = _held_bytes(list(ranks[1:])), _held_bytes([received, *held[1:]])
    assert small < full / 2, (small, full)
