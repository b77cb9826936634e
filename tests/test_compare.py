"""advisor compare: the pure comparison of two report dicts."""

from __future__ import annotations

import pandas as pd
import pytest

from advisor.compare.runs import (
    OpTypeTable,
    Side,
    compare,
    match_findings,
    op_type_deltas,
    op_types_from_frame,
    op_types_from_report,
)
from tests._report_sample import sample_report


def _f(rule: str, ops: list[str], saving: float = 10.0, fid: str | None = None, sev: str = "major") -> dict:
    d = {"kb": rule.split(".")[0], "rule": rule, "title": f"{rule} on {len(ops)} ops", "severity": sev, "ops": ops,
         "evidence": {}, "estimated_saving_us": saving, "recommendation": "", "fix": None}
    if fid:
        d["id"] = fid
    return d


def _side(report: dict) -> Side:
    return Side(report, op_types_from_report(report), "report")


def test_identical_runs() -> None:
    r = sample_report()
    c = compare(_side(r), _side(r))
    assert c["device_time"]["delta_us"] == 0 and c["device_time"]["delta_pct"] == 0
    assert c["score"]["delta"] == 0
    assert not c["findings"]["new"] and not c["findings"]["fixed"]
    assert {x["match"] for x in c["findings"]["unchanged"]} == {"id"}
    assert len(c["findings"]["unchanged"]) == len(r["findings"])
    assert c["regression"]["regressed"] is False
    assert all(x["delta_us"] == 0 for x in c["op_types"])


def test_slower_run_regresses_and_movers_are_ranked() -> None:
    base, new = sample_report(), sample_report(scale=1.1, n_transdata=6, with_mish=False)
    c = compare(_side(base), _side(new), max_regression_pct=2.0)
    t = c["device_time"]
    assert t["metric"] == "device_busy_us"
    assert t["delta_us"] == pytest.approx(t["new_us"] - t["base_us"])
    assert t["delta_pct"] == pytest.approx(100 * (t["new_us"] - t["base_us"]) / t["base_us"], abs=1e-3)
    assert c["regression"]["regressed"] is True and "device time +10.03 %" in c["regression"]["reasons"][0]
    movers = [m["type"] for m in c["op_types"] if m["delta_us"]]
    assert movers == ["Conv2D", "TransData", "Relu"]  # 144, 70, 21.6 µs
    trans = next(m for m in c["op_types"] if m["type"] == "TransData")
    assert (trans["base_count"], trans["new_count"], trans["count_delta"]) == (4, 6, 2)
    assert trans["delta_pct"] == pytest.approx(50.0)
    rules = {r["rule"]: r for r in c["rules"]}
    assert rules["transdata.format-roundtrip"]["saving_delta_us"] == pytest.approx(60.0)
    assert rules["mish-leakyrelu.decomposed-mish"]["new_findings"] == 0
    assert [f["rule"] for f in c["findings"]["fixed"]] == ["mish-leakyrelu.decomposed-mish"]
    # 4 -> 6 TransData ops: same finding (op overlap), not "fixed + new"
    td = next(u for u in c["findings"]["unchanged"] if u["rule"] == "transdata.format-roundtrip")
    assert td["match"] == "overlap" and td["saving_delta_us"] == pytest.approx(60.0)
    # a generous limit does not regress
    assert compare(_side(base), _side(new), max_regression_pct=15)["regression"]["regressed"] is False


def test_faster_run_does_not_regress_and_score_drop_gate() -> None:
    base, new = sample_report(scale=1.1), sample_report()
    c = compare(_side(base), _side(new))
    assert c["device_time"]["delta_us"] < 0 and not c["regression"]["regressed"]
    # score-drop gate: new has more recoverable time relative to its busy time
    worse = sample_report()
    worse["score"] = base["score"] - 5
    c2 = compare(_side(base), _side(worse), max_regression_pct=100, max_score_drop=2)
    assert c2["regression"]["regressed"] and "score -5.0 points" in c2["regression"]["reasons"][0]
    assert not compare(_side(base), _side(worse), max_regression_pct=100)["regression"]["regressed"]


def test_falls_back_to_sum_of_ops_without_busy_time() -> None:
    base, new = sample_report(), sample_report(scale=1.5)
    base["summary"].pop("device_busy_us")
    c = compare(_side(base), _side(new))
    assert c["device_time"]["metric"] == "device_time_us"


def test_match_by_id_then_ops_then_overlap() -> None:
    base = [_f("a.x", ["1", "2"], fid="a.x:1"), _f("b.y", ["3"]), _f("c.z", ["4", "5", "6"]), _f("d.w", ["7"])]
    new = [_f("a.x", ["9"], fid="a.x:1"), _f("b.y", ["3"]), _f("c.z", ["4", "5"]), _f("e.v", ["8"])]
    m = match_findings(base, new)
    assert [(u["rule"], u["match"]) for u in m["unchanged"]] == [("a.x", "id"), ("b.y", "rule+ops"),
                                                                  ("c.z", "overlap")]
    assert [f["rule"] for f in m["fixed"]] == ["d.w"]
    assert [f["rule"] for f in m["new"]] == ["e.v"]


def test_low_overlap_is_new_and_fixed() -> None:
    m = match_findings([_f("a.x", ["1", "2", "3"])], [_f("a.x", ["3", "4", "5"])])
    assert len(m["new"]) == 1 and len(m["fixed"]) == 1 and not m["unchanged"]


def test_duplicate_findings_match_one_to_one() -> None:
    m = match_findings([_f("a.x", ["1"]), _f("a.x", ["1"])], [_f("a.x", ["1"])])
    assert len(m["unchanged"]) == 1 and len(m["fixed"]) == 1


def test_partial_op_type_table_gives_unknown_not_zero() -> None:
    full = op_types_from_frame(pd.DataFrame({"count": [3, 2, 1], "sum": [30.0, 20.0, 5.0]}, index=["A", "B", "C"]))
    partial = OpTypeTable({"A": (3, 33.0)}, 60.0, complete=False)
    rows = {r["type"]: r for r in op_type_deltas(full, partial)}
    assert rows["A"]["delta_us"] == pytest.approx(3.0)
    assert rows["C"]["new_us"] is None and rows["C"]["delta_us"] is None
    rows = {r["type"]: r for r in op_type_deltas(full, OpTypeTable({"A": (3, 33.0)}, 33.0, complete=True))}
    assert rows["C"]["new_us"] == 0 and rows["C"]["delta_us"] == -5.0


def test_saved_report_table_completeness() -> None:
    r = sample_report()
    assert op_types_from_report(r).complete  # 8 types, all in top_op_types
    r["summary"].pop("op_types_detail", None)  # a report from before the key existed
    r["summary"]["op_types"] = 40
    assert not op_types_from_report(r).complete
    r["summary"]["op_types_detail"] = r["summary"]["top_op_types"]
    assert op_types_from_report(r).complete


def test_notes_warn_about_different_workloads() -> None:
    base = sample_report()
    new = sample_report()
    new["summary"]["ops"] = base["summary"]["ops"] * 3
    new["input"]["chip"] = "Ascend910B2"
    notes = compare(_side(base), _side(new))["notes"]
    assert any("op counts differ" in n for n in notes) and any("different chips" in n for n in notes)
