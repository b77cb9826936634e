"""The mutation corpus (``tests/fuzz_corpus.py``) at the layer that reads each input: a reader returns data that
keeps the model's promises or raises AdvisorError (one line, exit 2 at the CLI); no other exception, no hang, no
input changed. ``python benchmarks/fuzz_long.py`` runs the corpus through the CLI, with more seeds."""

from __future__ import annotations

import faulthandler
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.common.errors import AdvisorError
from advisor.ingest.sanitize import MAX_DURATION_US, TABLES, _is_time, _is_timestamp, require_analyzable
from tests.fuzz_corpus import Case, corpus
from tests.hostile import have_samples, tree_hash

pytestmark = pytest.mark.skipif(not have_samples(), reason="../shared/samples not present")

CASE_TIME_LIMIT_S = 120
"""A case still running after this long is a hang: the test run stops with every thread's stack."""


def assert_promises(profile: object) -> None:
    """What every knowledge base may rely on: time columns finite (or missing), durations not negative, not absurd."""
    for table in TABLES:
        df = getattr(profile, table)
        for col in df.columns:
            if not isinstance(col, str) or not _is_time(col) or not pd.api.types.is_numeric_dtype(df[col].dtype):
                continue
            arr = df[col].to_numpy(dtype="float64")
            assert not np.isinf(arr).any(), f"{table}.{col} holds inf"
            if not _is_timestamp(col):
                with np.errstate(invalid="ignore"):
                    assert not (arr < 0).any(), f"{table}.{col} holds a negative duration"
                    assert not (arr > MAX_DURATION_US).any(), f"{table}.{col} holds an absurd duration"


def check_case(case: Case, tmp: Path) -> str:
    """Run one case; returns 'read' or the one-line error. Raises AssertionError on a broken promise."""
    from advisor import ingest
    from advisor.config.loader import builtin_rules_dir, load_effective_rules
    from advisor.graph.load import load_graph
    from advisor.report import render
    from advisor.report.json_report import load as load_report

    target = case.build(tmp)
    before = tree_hash(tmp) if tmp.exists() else {}
    faulthandler.dump_traceback_later(CASE_TIME_LIMIT_S, exit=True)
    try:
        if case.kind == "profile":
            for p in ingest.load(target):
                assert_promises(p)
                require_analyzable(p, None)
        elif case.kind == "graph":
            load_graph(target)
        elif case.kind == "rules":
            load_effective_rules([builtin_rules_dir()], override_file=target)
        else:
            report = load_report(target)
            for fmt in ("terminal", "markdown", "html", "junit", "json"):
                render(report, fmt)
        outcome = "read"
    except AdvisorError as e:
        assert "\n" not in str(e), f"{case.id}: a multi-line error: {e!r}"
        outcome = str(e)
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert (tree_hash(tmp) if tmp.exists() else {}) == before, f"{case.id}: an input was changed"
    return outcome


CASES = list(corpus())


def test_corpus_covers_every_defect_class() -> None:
    assert {c.defect for c in CASES} >= {1, 2, 3, 4, 5, 6, 7, 9, 11, 13}
    assert len(CASES) >= 300


@pytest.mark.parametrize("case", CASES, ids=[c.id for c in CASES])
def test_mutated_input(case: Case, tmp_path: Path) -> None:
    check_case(case, tmp_path)
