"""Issue 30: msprof op metric CSVs that repeat their (block_id, sub_block_id) keys -- 60 rows per key in each of
the seven metric sets -- were joined as a cartesian product (60**7 rows per block, 23 GB). A repeated key is read
once (identical repeats) or as the mean of its repeats (differing ones), with a note naming the file; the per-block
table keeps one row per key. The hostile files are generated here; expected values are computed with ``csv``."""

from __future__ import annotations

import csv
import statistics
import time
from pathlib import Path

import pytest

from advisor.ingest import load
from advisor.ingest.msprof_op import METRIC_SETS

BLOCKS = 2
SUBS = ("cube0", "vector0", "vector1")
REPEATS = 60


def _metric(kind: str, side: str) -> str:
    return f"{side}_{kind.lower()}_ratio"


def _value(kind_index: int, block: int, sub: int, repeat: int, differ: bool) -> float:
    base = 0.1 + 0.01 * kind_index + 0.1 * block + 0.02 * sub
    return base + (0.001 * repeat if differ else 0.0)


def _write_run(root: Path, differ: bool) -> Path:
    """An OPPROF_ result whose seven metric CSVs each hold REPEATS rows per (block, sub-block) key."""
    run = root / "OPPROF_20260101000000_REPEATED"
    run.mkdir(parents=True)
    (run / "OpBasicInfo.csv").write_text(
        "Op Name,Op Type,Task Duration(us),Block Dim,Mix Block Dim,Device Id,Pid,Current Freq,Rated Freq\n"
        f"rep_kernel,mix,50.0,{BLOCKS},{2 * BLOCKS},0,1,1800,1800\n", encoding="utf-8")
    for k, kind in enumerate(METRIC_SETS):
        header = ["block_id", "sub_block_id", "aic_time(us)", "aic_total_cycles", "aiv_time(us)", "aiv_total_cycles",
                  _metric(kind, "aic"), _metric(kind, "aiv")]
        lines = [",".join(header)]
        for repeat in range(REPEATS):
            for b in range(BLOCKS):
                for s, sub in enumerate(SUBS):
                    v = _value(k, b, s, repeat, differ)
                    cube = sub == "cube0"
                    cells = [b, sub, 40.0 if cube else "NA", 72000 if cube else "NA", "NA" if cube else 30.0,
                             "NA" if cube else 54000, v if cube else "NA", "NA" if cube else v]
                    lines.append(",".join(str(c) for c in cells))
        (run / f"{kind}.csv").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return run


def _expected(path: Path, column: str) -> dict[tuple[str, str], float]:
    """The mean of each key's values of ``column`` (identical repeats: the value)."""
    values: dict[tuple[str, str], list[float]] = {}
    with open(path, newline="", encoding="utf-8") as fh:
        for row in csv.DictReader(fh):
            if row[column] != "NA":
                values.setdefault((row["block_id"], row["sub_block_id"]), []).append(float(row[column]))
    return {k: statistics.fmean(v) for k, v in values.items()}


@pytest.mark.parametrize("differ", [False, True], ids=["identical", "differing"])
def test_repeated_keys_never_multiply_rows(tmp_path: Path, differ: bool) -> None:
    run = _write_run(tmp_path, differ)
    started = time.perf_counter()
    [profile] = load(run)
    assert time.perf_counter() - started < 20  # a cartesian join of 60**7 rows per block never finishes
    blocks = profile.kernel_blocks
    assert len(blocks) == BLOCKS * len(SUBS)
    assert not blocks.duplicated(["launch", "block_id", "sub_block_id"]).any()
    for kind in METRIC_SETS:
        for side in ("aic", "aiv"):
            column = _metric(kind, side)
            want = _expected(run / f"{kind}.csv", column)
            got = {(str(int(b)), str(s)): float(v) for b, s, v in
                   zip(blocks["block_id"], blocks["sub_block_id"], blocks[column], strict=True) if v == v}
            assert got == pytest.approx(want, rel=1e-12)
    notes = [n for n in profile.meta.notes if "(block_id, sub_block_id) keys" in n]
    assert len(notes) == len(METRIC_SETS)
    assert all(f"{REPEATS * BLOCKS * len(SUBS)} rows for {BLOCKS * len(SUBS)}" in n for n in notes)
    assert all(("mean of its repeats" in n) == differ for n in notes)
    # the op row still aggregates one value per block: the cube side's ratio is the cycle-weighted block mean
    aic = [v for (b, s), v in _expected(run / "PipeUtilization.csv", "aic_pipeutilization_ratio").items()]
    assert profile.ops.iloc[0]["aic_pipeutilization_ratio"] == pytest.approx(statistics.fmean(aic), rel=1e-12)


def test_oversized_metric_csv_is_skipped_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from advisor.ingest import msprof_op

    run = _write_run(tmp_path, differ=False)
    monkeypatch.setattr(msprof_op, "MAX_BLOCK_ROWS", 100)
    [profile] = load(run)
    skipped = {Path(s.path).name: s.reason for s in profile.meta.files_skipped}
    assert set(skipped) >= {f"{kind}.csv" for kind in METRIC_SETS}
    assert all("360 rows" in skipped[f"{kind}.csv"] for kind in METRIC_SETS)
    assert len(profile.ops) == 1 and profile.ops.iloc[0]["name"] == "rep_kernel"
