"""The peer's known mistakes (PEER.md section 9), each on an input that triggers it: advisor must not repeat them.

Inputs are written here in the real torch_npu layout (``*_ascend_pt/ASCEND_PROFILER_OUTPUT/kernel_details.csv`` with
the upstream header, ``PROF_*/device_0/info.json.0``) and read through ``advisor.ingest`` like any profile.
"""

from __future__ import annotations

import csv
import json
import subprocess
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from advisor import ingest
from advisor.config.loader import builtin_rules_dir, load_effective_rules
from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.ingest.timebase import absolute_ns
from advisor.kb import AnalysisContext, KnowledgeBase
from advisor.knowledge_bases.operator import OperatorKB
from advisor.model import Profile
from advisor.pipeline.analysis import AnalysisOptions, run_analysis
from advisor.platform import resolve_platform
from advisor.toolkit import bound
from advisor.toolkit.cores import core_counts
from tests.test_peer_parity import _kb_infos

SHARED = Path(__file__).resolve().parents[1].parent / "shared"
MAKE_MIN = SHARED / "bench" / "make_min_ascend_pt.py"

# kernel_details.csv header of torch_npu (PEER.md section 5.3, the upstream test file's header plus Device_id)
HEADER = ["Step Id", "Device_id", "Model ID", "Task ID", "Stream ID", "Name", "Type", "OP State", "Accelerator Core",
          "Start Time(us)", "Duration(us)", "Wait Time(us)", "Block Dim", "Mix Block Dim", "HF32 Eligible",
          "Input Shapes", "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types", "Output Formats",
          "Context ID", "aicore_time(us)", "aic_total_cycles", "aic_mac_time(us)", "aic_mac_ratio",
          "aic_scalar_time(us)", "aic_scalar_ratio", "aic_mte1_time(us)", "aic_mte1_ratio", "aic_mte2_time(us)",
          "aic_mte2_ratio", "aic_fixpipe_time(us)", "aic_fixpipe_ratio", "aic_icache_miss_rate", "aiv_time(us)",
          "aiv_total_cycles", "aiv_vec_time(us)", "aiv_vec_ratio", "aiv_scalar_time(us)", "aiv_scalar_ratio",
          "aiv_mte2_time(us)", "aiv_mte2_ratio", "aiv_mte3_time(us)", "aiv_mte3_ratio", "aiv_icache_miss_rate",
          "cube_utilization(%)"]
T0 = 1736413971558000.0


def cube(name: str, op_type: str, start: float, dur: float, blocks: int, mac: float, mte2: float,
         shapes: str = "8192,4096;4096,8192", state: str = "static") -> dict[str, Any]:
    """An AI_CORE matmul row (pipe ratios in the aic_* columns, aiv_* zero as the cube core writes them)."""
    row = _base(name, op_type, "AI_CORE", start, dur, blocks, shapes, "8192,8192", "DT_BF16;DT_BF16", state)
    row.update({"aicore_time(us)": dur, "aic_mac_ratio": mac, "aic_mac_time(us)": dur * mac, "aic_scalar_ratio": 0.1,
                "aic_mte1_ratio": 0.2, "aic_mte2_ratio": mte2, "aic_mte2_time(us)": dur * mte2,
                "aic_fixpipe_ratio": 0.1, "aiv_time(us)": 0, "aiv_vec_ratio": 0, "aiv_scalar_ratio": 0,
                "aiv_mte2_ratio": 0, "aiv_mte3_ratio": 0})
    return row


def vector(name: str, op_type: str, start: float, dur: float, vec: float, mte2: float, mte3: float,
           blocks: int = 48, state: str = "static") -> dict[str, Any]:
    """An AI_VECTOR_CORE row: pipe ratios in aiv_*, the aic_* columns zero (the cube core did nothing)."""
    row = _base(name, op_type, "AI_VECTOR_CORE", start, dur, blocks, "4096,4096;4096,4096", "4096,4096",
                "FLOAT16;FLOAT16", state)
    row.update({"aicore_time(us)": 0, "aic_mac_ratio": 0, "aic_scalar_ratio": 0, "aic_mte1_ratio": 0,
                "aic_mte2_ratio": 0, "aic_fixpipe_ratio": 0, "aiv_time(us)": dur, "aiv_vec_ratio": vec,
                "aiv_scalar_ratio": 0.05, "aiv_mte2_ratio": mte2, "aiv_mte2_time(us)": dur * mte2,
                "aiv_mte3_ratio": mte3, "aiv_mte3_time(us)": dur * mte3})
    return row


def _base(name: str, op_type: str, core: str, start: float, dur: float, blocks: int, in_shapes: str,
          out_shapes: str, dtypes: str, state: str) -> dict[str, Any]:
    return {"Step Id": 1, "Device_id": 0, "Model ID": 4294967295, "Task ID": int(start), "Stream ID": 2,
            "Name": name, "Type": op_type, "OP State": state, "Accelerator Core": core,
            "Start Time(us)": f"{T0 + start:.3f}\t", "Duration(us)": f"{dur:.3f}", "Wait Time(us)": "0",
            "Block Dim": blocks, "Mix Block Dim": 0, "HF32 Eligible": "NO", "Input Shapes": f'"{in_shapes}"',
            "Input Data Types": dtypes, "Input Formats": "ND;ND", "Output Shapes": f'"{out_shapes}"',
            "Output Data Types": dtypes.split(";")[0], "Output Formats": "ND", "Context ID": "N/A"}


def write_profile(root: Path, rows: Iterable[Mapping[str, Any]], header: list[str] | None = None,
                  rename: Mapping[str, str] | None = None, ai_core_num: int = 24, aiv_num: int = 48) -> Path:
    """A torch_npu ``*_ascend_pt`` dir with kernel_details.csv (columns of ``header``, renamed by ``rename``) and
    the device info.json of a chip with ``ai_core_num`` / ``aiv_num`` cores."""
    header = list(header or HEADER)
    pt = root / "localhost_1_20250101000000000_ascend_pt"
    out = pt / "ASCEND_PROFILER_OUTPUT"
    out.mkdir(parents=True)
    dev = pt / "PROF_000001_20250101000000000_ABCDEFGHIJKLMNOP" / "device_0"
    dev.mkdir(parents=True)
    (dev / "info.json.0").write_text(json.dumps({"DeviceInfo": [{"id": 0, "ai_core_num": ai_core_num,
                                                                 "aiv_num": aiv_num, "aic_frequency": "1800"}]}))
    (pt / "profiler_info_0.json").write_text(json.dumps({"rank_id": 0, "cann_version": "8.0.0"}))
    names = [(rename or {}).get(h, h) for h in header]
    with (out / "kernel_details.csv").open("w", newline="", encoding="utf-8") as f:
        w = csv.writer(f)
        w.writerow(names)
        for r in rows:
            w.writerow([r.get(h, "N/A") for h in header])
    return pt


def run_operator(profile: Profile) -> tuple[list[Finding], engine.KBStatus]:
    rules = load_effective_rules([builtin_rules_dir()])
    platform = resolve_platform(rules, profile.meta.chip)
    findings, statuses = engine.run([engine.KBInfo(OperatorKB, "test", "", "")], profile, None, rules, platform)
    return findings, statuses[0]


def classes(profile: Profile) -> pd.DataFrame:
    """The shared op classification (advisor.toolkit.bound) of a profile, indexed by op name."""
    rules = load_effective_rules([builtin_rules_dir()])
    platform, r = resolve_platform(rules, profile.meta.chip), rules.for_kb("bound")
    counts = core_counts(profile, platform, r["cube_cores"], r["vector_cores"])
    return bound.classify(profile.ops, platform, r, counts).set_index("name")


def by_rule(findings: list[Finding], rule: str) -> list[Finding]:
    return [f for f in findings if f.rule == rule]


# the rows behind the peer's Block Dim / No Bound findings on its minimal fixture (PEER.md section 7)
def rows_min(state: str = "static") -> list[dict[str, Any]]:
    return [
        cube("aclnnMatmul_MatMulCommon_MatMulV2", "MatMulV2", 0, 120.0, 20, mac=0.5, mte2=0.6, state=state),
        cube("aclnnMatmul_MatMulV3Common_MatMulV3", "MatMulV3", 150, 200.0, 24, mac=0.85, mte2=0.5, state=state,
             shapes="8192,4096;4096,8192"),
        cube("Trans_TransData_1", "TransData", 400, 60.0, 7, mac=0.0, mte2=0.55, shapes="64,64,56,56", state=state),
        vector("aclnnMul_MulAiCore_Mul", "Mul", 500, 25.0, vec=0.3, mte2=0.4, mte3=0.1, state=state),
    ]


# ---------------------------------------------------------------------------------------------------------
# bug 2: a missing OP State column is not "every op is dynamic"
# ---------------------------------------------------------------------------------------------------------
def test_missing_op_state_gives_a_note_not_a_dynamic_finding(tmp_path: Path) -> None:
    header = [h for h in HEADER if h != "OP State"]
    profile = ingest.load(write_profile(tmp_path, rows_min(), header))[0]
    assert profile.ops["op_state"].isna().all()
    findings, status = run_operator(profile)
    assert status.status == "ok"
    assert not by_rule(findings, "operator.dynamic-shape")
    assert any("no OP State column" in n and "not assumed dynamic" in n for n in status.notes), status.notes
    # the other checks still run (the peer suppresses Block Dim and No Bound behind its false finding): block dim,
    # and the classification of every op (no clear bound for those whose pipes are all unsaturated, memory bound
    # where the MTE2 pipe out-works the compute pipes: msprof's Memory Bound 0.4 / 0.3 above 1)
    assert set(by_rule(findings, "operator.block-dim")[0].ops) == {"aclnnMatmul_MatMulCommon_MatMulV2",
                                                                   "Trans_TransData_1"}
    assert classes(profile).loc[["Trans_TransData_1", "aclnnMul_MulAiCore_Mul"], "bound"].tolist() == \
        ["none", "memory"]


def test_op_state_dynamic_is_reported(tmp_path: Path) -> None:
    profile = ingest.load(write_profile(tmp_path, rows_min(state="dynamic")))[0]
    # torch_npu eager: dynamic-shape kernels are its binary kernels (one step cannot show shapes varying)
    assert profile.meta.context == "torch-eager"
    findings, status = run_operator(profile)
    assert not by_rule(findings, "operator.dynamic-shape")
    assert any("binary kernels" in n for n in status.notes)
    # the same kernels in a graph (torchair) are a choice the graph could make static
    profile.meta.context = "torch-graph"
    findings, status = run_operator(profile)
    (dyn,) = by_rule(findings, "operator.dynamic-shape")
    assert dyn.evidence["all_dynamic"] is True and dyn.evidence["dynamic_tasks"] == 4
    assert not any("OP State" in n for n in status.notes)
    # block dim and the classification are not suppressed by dynamic shapes either
    assert by_rule(findings, "operator.block-dim")
    assert classes(profile).loc[["Trans_TransData_1", "aclnnMul_MulAiCore_Mul"], "bound"].tolist() == \
        ["none", "memory"]


# ---------------------------------------------------------------------------------------------------------
# bug 3: the newer "Block Num" header
# ---------------------------------------------------------------------------------------------------------
def test_block_num_header_still_checked(tmp_path: Path) -> None:
    dim = ingest.load(write_profile(tmp_path / "dim", rows_min()))[0]
    num = ingest.load(write_profile(tmp_path / "num", rows_min(),
                                    rename={"Block Dim": "Block Num", "Mix Block Dim": "Mix Block Num"}))[0]
    assert num.ops["block_dim"].tolist() == [20.0, 24.0, 7.0, 48.0]
    (a,) = by_rule(run_operator(dim)[0], "operator.block-dim")
    (b,) = by_rule(run_operator(num)[0], "operator.block-dim")
    assert b.ops == a.ops == ["Trans_TransData_1", "aclnnMatmul_MatMulCommon_MatMulV2"]
    assert b.estimated_saving_us == pytest.approx(a.estimated_saving_us)
    # 7 of 24 cores for 60 us and 20 of 24 for 120 us, times the realism factor of the rules file, each at most
    # the time the shared classification says the op can recover
    realism = load_effective_rules([builtin_rules_dir()]).for_kb("operator")["block_dim"]["realism"]
    limit = classes(dim)["recoverable_us"]
    assert b.estimated_saving_us == pytest.approx(min(60 * 17 / 24 * realism, limit["Trans_TransData_1"])
                                                  + min(120 * 4 / 24 * realism,
                                                        limit["aclnnMatmul_MatMulCommon_MatMulV2"]))


# ---------------------------------------------------------------------------------------------------------
# bug 4: every op is classified, not only the first row decides whether the check runs
# ---------------------------------------------------------------------------------------------------------
def test_bound_op_in_first_row_does_not_hide_unbound_ops(tmp_path: Path) -> None:
    rows = rows_min()
    rows.insert(0, rows.pop(1))  # the mac-bound MatMulV3 first
    profile = ingest.load(write_profile(tmp_path, rows))[0]
    assert profile.ops["name"].iloc[0] == "aclnnMatmul_MatMulV3Common_MatMulV3"
    b = classes(profile)
    assert (b.loc["aclnnMatmul_MatMulV3Common_MatMulV3", "bound"], b.loc["aclnnMatmul_MatMulV3Common_MatMulV3",
                                                                         "at_roof"]) == ("compute", True)
    # the others are below their roof with no pipe saturated: no clear bound, or memory bound where the MTE2 pipe
    # out-works the compute pipes (msprof's Memory Bound above 1)
    below = {"aclnnMatmul_MatMulCommon_MatMulV2": "memory", "Trans_TransData_1": "none",
             "aclnnMul_MulAiCore_Mul": "memory"}
    assert b.loc[list(below), "bound"].to_dict() == below
    assert (b.loc[list(below), "recoverable_us"] > 0).all()


# ---------------------------------------------------------------------------------------------------------
# bug 5: vector ops' pipe ratios come from the aiv_* columns
# ---------------------------------------------------------------------------------------------------------
def test_vector_mte2_ratio_read_from_aiv_columns(tmp_path: Path) -> None:
    rows = [vector("aclnnAdd_AddAiCore_Add", "Add", 0, 100.0, vec=0.05, mte2=0.95, mte3=0.3),
            vector("aclnnMul_MulAiCore_Mul", "Mul", 200, 100.0, vec=0.3, mte2=0.4, mte3=0.2)]
    profile = ingest.load(write_profile(tmp_path, rows))[0]
    # the cube columns of the Add row are 0: a lookup that tries aic_ first sees no MTE2 work at all
    assert profile.ops.loc[0, "aic_mte2_ratio"] == 0.0
    b = classes(profile)
    add, mul = b.loc["aclnnAdd_AddAiCore_Add"], b.loc["aclnnMul_MulAiCore_Mul"]
    assert (add["pipe"], add["pipe_ratio"], add["saturated"]) == ("mte2", 0.95, "mte2 0.95")
    assert (add["bound"], add["at_roof"]) == ("memory", True)  # MTE2 bound: nothing for tuning to recover
    assert (mul["pipe"], mul["pipe_ratio"]) == ("mte2", 0.4)


# ---------------------------------------------------------------------------------------------------------
# bug 6: each pipe ratio is compared with its own saturation
# ---------------------------------------------------------------------------------------------------------
def test_each_pipe_has_its_own_saturation(tmp_path: Path) -> None:
    rules = load_effective_rules([builtin_rules_dir()]).for_kb("bound")["pipe_saturation"]
    assert rules["fixpipe"] < rules["mac"]  # FA's fixpipe is saturated earlier than the cube (msprof-analyze)
    between = (rules["fixpipe"] + rules["mac"]) / 2
    rows = [cube("mm_mac", "MatMulV2", 0, 500.0, 24, mac=between, mte2=0.3),
            cube("mm_fix", "MatMulV2", 600, 500.0, 24, mac=0.3, mte2=0.3)]
    rows[1]["aic_fixpipe_ratio"] = between
    profile = ingest.load(write_profile(tmp_path, rows))[0]
    b = classes(profile)
    assert b.loc["mm_fix", "saturated"] == f"fixpipe {between:.2f}"  # above fixpipe's own threshold
    assert b.loc["mm_mac", "saturated"] == ""  # the same ratio on the mac pipe is below mac's


# ---------------------------------------------------------------------------------------------------------
# bug 11: purely numeric start times are microseconds too (no x1000 without the trailing TAB)
# ---------------------------------------------------------------------------------------------------------
def test_start_time_without_trailing_tab_keeps_its_unit(tmp_path: Path) -> None:
    tabbed = rows_min()
    plain = [dict(r, **{"Start Time(us)": r["Start Time(us)"].rstrip("\t")}) for r in rows_min()]
    assert all(not r["Start Time(us)"].endswith("\t") for r in plain)
    a = ingest.load(write_profile(tmp_path / "tab", tabbed))[0]
    b = ingest.load(write_profile(tmp_path / "plain", plain))[0]
    assert b.ops["start_us"].tolist() == a.ops["start_us"].tolist()
    assert absolute_ns(b.meta, b.ops["start_us"].iloc[0])[0] == int(T0) * 1000 + round((T0 % 1) * 1000)
    assert b.ops["start_us"].iloc[1] - b.ops["start_us"].iloc[0] == pytest.approx(150.0, abs=1e-3)
    assert b.busy_time_us() == pytest.approx(a.busy_time_us())


# ---------------------------------------------------------------------------------------------------------
# bugs 10 and 12: communication.json without (and with) its "Total Op Info" aggregate
# ---------------------------------------------------------------------------------------------------------
@pytest.fixture()
def min_fixture(tmp_path: Path) -> Path:
    if not MAKE_MIN.is_file():
        pytest.skip("../shared/bench/make_min_ascend_pt.py is not available")
    subprocess.run([sys.executable, str(MAKE_MIN), str(tmp_path)], check=True, capture_output=True)
    (pt,) = tmp_path.glob("*_ascend_pt")
    return pt


def test_communication_json_without_totals(min_fixture: Path) -> None:
    comm = min_fixture / "ASCEND_PROFILER_OUTPUT" / "communication.json"
    data = json.loads(comm.read_text())
    with_totals = ingest.load(min_fixture)[0].comm
    # the aggregate is not an op (the peer counts it as one in its packet analysis)
    assert "Total Op Info" not in set(with_totals["op"].astype(str))
    for groups in data.values():
        for ops in groups.values():
            ops.pop("Total Op Info", None)
    comm.write_text(json.dumps(data))
    profile = ingest.load(min_fixture)[0]
    assert len(profile.comm) == len(with_totals) == 8  # 4 allReduce ops x (SDMA, RDMA)
    result = run_analysis(min_fixture, options=AnalysisOptions(extra_kbs=_kb_infos()))
    status = {s.id: s for s in result.statuses}
    assert not [(s.id, s.reason) for s in status.values() if s.status == "failed"]
    # the peer's Overall Summary crashes here; advisor's overall breakdown still runs
    assert "overall" in status and status["overall"].status == "ok" and status["overall"].findings


# ---------------------------------------------------------------------------------------------------------
# bug 13: a failing analyzer is reported, and the others still run
# ---------------------------------------------------------------------------------------------------------
class BrokenKB(KnowledgeBase):
    id = "broken"
    title = "raises on purpose"
    version = "0.0.1"
    api_version = "1"
    requires = ("ops",)
    rules_file = None

    def analyze(self, ctx: AnalysisContext) -> list[Finding]:
        raise ZeroDivisionError("injected failure")


def test_failing_kb_reported_and_others_run(tmp_path: Path) -> None:
    profile = ingest.load(write_profile(tmp_path, rows_min()))[0]
    rules = load_effective_rules([builtin_rules_dir()])
    platform = resolve_platform(rules, profile.meta.chip)
    infos = [engine.KBInfo(BrokenKB, "test", "", ""), engine.KBInfo(OperatorKB, "test", "", "")]
    findings, statuses = engine.run(infos, profile, None, rules, platform)
    status = {s.id: s for s in statuses}
    assert status["broken"].status == "failed"
    assert "ZeroDivisionError: injected failure" in status["broken"].reason
    assert "test_peer_mistakes.py" in status["broken"].reason  # where it broke
    assert status["operator"].status == "ok" and by_rule(findings, "operator.block-dim")


def test_failing_kb_in_json_and_terminal(tmp_path: Path) -> None:
    from advisor.report.terminal import render_text

    pt = write_profile(tmp_path, rows_min())
    # the operator knowledge base is a built-in (discovered): only the broken one is added
    result = run_analysis(pt, options=AnalysisOptions(extra_kbs=[engine.KBInfo(BrokenKB, "test", "", "")]))
    kbs = {k["id"]: k for k in json.loads(json.dumps(result.report))["knowledge_bases"]}
    assert kbs["broken"]["status"] == "failed" and "injected failure" in kbs["broken"]["reason"]
    assert kbs["operator"]["status"] == "ok" and kbs["operator"]["findings"] > 0
    assert any(f["rule"] == "operator.block-dim" for f in result.report["findings"])
    text = render_text(result.report, width=200)
    line = next(ln for ln in text.splitlines() if "broken" in ln)
    assert "failed" in line and "injected failure" in line


def test_failing_kb_cli_still_writes_the_report(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from click.testing import CliRunner

    from advisor.cli import main

    pt = write_profile(tmp_path, rows_min())
    real = engine.discover
    extra = [engine.KBInfo(OperatorKB, "test", "", ""), engine.KBInfo(BrokenKB, "test", "", "")]

    def discover(pm: Any = None) -> list[engine.KBInfo]:
        found = real(pm)
        return [*found, *(i for i in extra if i.id not in {f.id for f in found})]

    monkeypatch.setattr(engine, "discover", discover)
    res = CliRunner().invoke(main, ["analyze", str(pt), "--format", "json", "--quiet"])
    # not 2 (a knowledge base's bug is not bad input) and not 0 (the peer's mistake): 3, incomplete analysis
    assert res.exit_code == 3, res.output
    assert "knowledge base(s) failed: broken" in res.stderr
    report = json.loads(res.stdout)
    kbs = {k["id"]: k for k in report["knowledge_bases"]}
    assert kbs["broken"]["status"] == "failed"
    assert report["findings"], "the other knowledge bases' findings are still reported"
