"""Speed work changes no result (issue 18.4): every shared sample and the built-in example still give the findings
(rule, title, severity, ops, saving as the report rounds it), the score and the ``time`` section committed in
``tests/data/golden/`` -- generated from ``main``'s code with ``python -m tests.golden --update`` (see its
docstring: run it from a worktree of ``main``, never from the branch under test)."""

from __future__ import annotations

import pytest

from tests import golden

NAMES = golden.committed()


def test_every_sample_has_a_golden() -> None:
    if not golden.SAMPLES.is_dir():
        pytest.skip("../shared/samples not present")
    missing = [n for n in golden.names() if not (golden.GOLDEN / golden.golden_name(n)).is_file()]
    assert missing == [], f"no golden for {missing}: python -m tests.golden --update (from main)"


@pytest.mark.parametrize("name", NAMES)
def test_report_matches_its_golden(name: str) -> None:
    diff = golden.changes(name)
    if diff:
        pytest.fail(f"{name}: the report changed\n{diff}")


def test_the_digest_sees_a_changed_saving() -> None:
    """The comparison is not vacuous: a saving moved in its last reported decimal is a difference."""
    report = {"score": 50, "time": {"window_us": 10.0}, "findings": [{"rule": "r", "estimated_saving_us": 1.234}]}
    moved = {**report, "findings": [{"rule": "r", "estimated_saving_us": 1.235}]}
    assert golden.dump(golden.digest(report)) != golden.dump(golden.digest(moved))
    assert golden.dump(golden.digest(report)) == golden.dump(golden.digest(dict(report)))


def test_numbers_read_by_the_csv_reader_equal_the_trimmed_text_path(tmp_path) -> None:
    """A numeric column parsed by the CSV reader (plain cells) or, after a cell it refuses, as trimmed text gives the
    same float64 values: the fast path may not change a digit."""
    import numpy as np

    from advisor.ingest.csvread import read_columns, sniff_header

    values = ["0.123", "12.5", "1e-3", "7", "N/A", "", "0.30000000000000004", "123456.789012"]
    clean = tmp_path / "clean.csv"
    odd = tmp_path / "odd.csv"
    clean.write_text("Name,Ratio\n" + "".join(f"op{i},{v}\n" for i, v in enumerate(values)), encoding="utf-8")
    odd.write_text("Name,Ratio\n" + "".join(f"op{i},{v}\n" for i, v in enumerate(values)) + "opx,\"0.5\t\"\n",
                   encoding="utf-8")
    a, _ = read_columns(clean, sniff_header(clean), {"name": 0, "mac_ratio": 1}, text={"name"})
    b, _ = read_columns(odd, sniff_header(odd), {"name": 0, "mac_ratio": 1}, text={"name"})
    want = np.array([0.123, 12.5, 1e-3, 7.0, np.nan, np.nan, 0.30000000000000004, 123456.789012])
    np.testing.assert_array_equal(a["mac_ratio"].to_numpy(), want)
    np.testing.assert_array_equal(b["mac_ratio"].to_numpy()[:-1], want)
    assert b["mac_ratio"].iloc[-1] == 0.5
