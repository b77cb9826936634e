"""``advisor compare`` on kernel tuning rounds: per kernel its time in each round, its bound, the metrics that moved
and whether the base report's estimated saving was realized -- on the three msprof op rounds of the Cummin kernel
(../shared/samples), the figures recomputed from the raw CSVs."""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from advisor.compare.kernels import MOVED, kernel_deltas
from advisor.compare.runs import compare, load_side
from advisor.pipeline.analysis import AnalysisOptions, run_analysis

ROOT = Path(__file__).resolve().parents[1]
CUMMIN = ROOT.parent / "shared" / "samples" / "Lulili520__ascendc-optim-agent" / "log" / "Cummin"


def _round(name: str) -> Path:
    found = sorted((CUMMIN / f"round_{name}" / "msprof_output").glob("OPPROF_*"))
    if not found:
        pytest.skip(f"Cummin round {name} not available")
    return found[0]


def _csv(path: Path) -> pd.DataFrame:
    frame = pd.read_csv(path)
    return frame.loc[:, [c for c in frame.columns if not str(c).startswith("Unnamed")]]


def _duration(path: Path) -> float:
    return float(_csv(path / "OpBasicInfo.csv")["Task Duration(us)"].iloc[0])


def _aiv_ratio(path: Path, column: str) -> float:
    pipe = _csv(path / "PipeUtilization.csv")
    rows = pipe[pipe["sub_block_id"].astype(str).str.startswith("vector")]
    w = rows["aiv_total_cycles"].astype(float)
    return float((rows[column].astype(float) * w).sum() / w.sum())


def _spread(path: Path) -> float:
    pipe = _csv(path / "PipeUtilization.csv")
    t = pipe[pipe["sub_block_id"].astype(str).str.startswith("vector")]["aiv_time(us)"].astype(float)
    return float(1.0 - t.mean() / t.max())


@cache
def _compare(a: str, b: str) -> dict[str, Any]:
    options = AnalysisOptions()
    return compare(load_side(_round(a), None, options, "base"), load_side(_round(b), None, options, "new"))


def _kernel_savings(report: dict[str, Any]) -> float:
    total = 0.0
    stack = list(report["findings"])
    while stack:
        f = stack.pop()
        stack.extend(f.get("symptoms") or [])
        if f["kb"] == "kernel":
            total += f["estimated_saving_us"]
    return total


def test_round_000_to_004_time_bound_and_moved_metrics() -> None:
    (k,) = _compare("000", "004")["kernels"]
    base, new = _round("000"), _round("004")
    assert k["name"] == "Cummin_kernel"
    assert k["base_us"] == pytest.approx(_duration(base), abs=1e-3)
    assert k["new_us"] == pytest.approx(_duration(new), abs=1e-3)
    assert k["delta_us"] == pytest.approx(_duration(new) - _duration(base), abs=1e-2)
    assert k["base_bound"] == k["new_bound"] == "vector core: scalar"
    moved = {(m["side"], m["unit"]): m for m in k["moved"]}
    for unit, column in (("scalar", "aiv_scalar_ratio"), ("mte3", "aiv_mte3_ratio")):
        m = moved[("aiv", unit)]
        assert m["column"] == column
        assert m["base"] == pytest.approx(_aiv_ratio(base, column), abs=1e-3)
        assert m["new"] == pytest.approx(_aiv_ratio(new, column), abs=1e-3)
    spread = moved[("aiv", "block spread")]
    assert spread["base"] == pytest.approx(_spread(base), abs=1e-3)
    assert spread["new"] == pytest.approx(_spread(new), abs=1e-3)
    assert all(abs(m["delta"]) >= MOVED for m in k["moved"])


def test_round_000_prediction_against_what_round_004_measured() -> None:
    cmp = _compare("000", "004")
    (k,) = cmp["kernels"]
    base_report = run_analysis(_round("000")).report
    predicted = _kernel_savings(base_report)
    p = k["predicted"]
    assert p["saving_us"] == pytest.approx(predicted, rel=1e-6)
    realized = _duration(_round("000")) - _duration(_round("004"))
    assert p["realized_us"] == pytest.approx(realized, abs=1e-2)
    assert p["realized_share"] == pytest.approx(realized / predicted, rel=1e-3)
    assert p["verdict"] == "realized"
    rules = {f["rule"]: f["still_reported"] for f in p["findings"]}
    # round 004 balanced the blocks (fixed) and still spends its time in scalar code
    assert rules == {"kernel.block-imbalance": False, "kernel.scalar-bound": True}


def test_round_000_to_002_realized_part_of_the_estimate() -> None:
    (k,) = _compare("000", "002")["kernels"]
    p = k["predicted"]
    realized = _duration(_round("000")) - _duration(_round("002"))
    assert 0 < realized < p["saving_us"]
    assert p["verdict"] == "partly"


def test_saved_report_compares_like_the_profile(tmp_path: Path) -> None:
    report = run_analysis(_round("000")).report
    saved = tmp_path / "round_000.json"
    saved.write_text(json.dumps(report), encoding="utf-8")
    options = AnalysisOptions()
    from_saved = compare(load_side(saved, None, options, "base"), load_side(_round("004"), None, options, "new"))
    assert from_saved["kernels"][0]["predicted"] == _compare("000", "004")["kernels"][0]["predicted"]


def test_cli_shows_the_kernels(cli: Any) -> None:
    code, out, _ = cli("compare", str(_round("000")), str(_round("004")), "--format", "markdown")
    assert code == 0
    assert "### Kernels (tuning rounds)" in out and "Cummin_kernel" in out and ": realized" in out
    code, out, _ = cli("compare", str(_round("000")), str(_round("004")))
    assert "Kernels (tuning rounds)" in out


def test_runs_without_kernels_have_none() -> None:
    assert kernel_deltas({"findings": []}, {"findings": [], "kernels": None}) == []
