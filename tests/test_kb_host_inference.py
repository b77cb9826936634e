"""host-inference: ACL API statistics, msproftx ranges and the execute/device gap of inference applications.

The synthetic profile reproduces the SSD case of the worked examples: an ACL application whose loop sleeps
500 ms per frame, copies inputs and outputs with the blocking aclrtMemcpy and pre-processes on the host. It is
written in the msprof CANN >= 7 layout (mindstudio_profiler_output: op_summary, api_statistic, msprof_tx) with the
column headers msprof writes, and read through the real ingest path."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.ingest import load
from advisor.knowledge_bases.host_inference import HostInferenceKB
from advisor.pipeline.analysis import run_analysis
from advisor.testing import load_rules
from tests.scenarios.cases_a import run_kb

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
EXAMPLE = Path(__file__).resolve().parents[1] / "advisor" / "examples" / "ssd_mish_310p"
NEO = SAMPLES / ("neo-pan__ascend-msprof-skill/tests/fixtures/tilelang_design_feedback/candidate_comparability/"
                 "missing_raw_index_candidate/reports/app/PROF_000001_20260605161708478_FRJKORBPFMHQMGLA")

FRAMES = 10
T0 = 1_780_000_000_000_000.0  # an msprof-like absolute host clock (us)
SLEEP_US, PRE_US, POST_US, COPY_US, OPS_PER_FRAME, OP_US = 500_000.0, 8_000.0, 3_000.0, 250.0, 20, 40.0
EXEC_OVERHEAD_US = 200.0
TX_HEADER = ["Device_id", "pid", "tid", "category", "event_type", "payload_type", "payload_value",
             "Start_time(us)", "End_time(us)", "message_type", "message", "domain", "mark_id"]
API_HEADER = ["Device_id", "Level", "API Name", "Time(us)", "Count", "Avg(us)", "Min(us)", "Max(us)", "Variance"]
OPS_HEADER = ["Device_id", "Model ID", "Task ID", "Stream ID", "Op Name", "OP Type", "Task Type",
              "Task Start Time(us)", "Task Duration(us)", "Task Wait Time(us)", "Block Dim", "Input Shapes",
              "Input Data Types", "Input Formats", "Output Shapes", "Output Data Types", "Output Formats"]


def write_sleep_loop_profile(root: Path, sleep_us: float = SLEEP_US, frames: int = FRAMES) -> Path:
    """PROF_*/mindstudio_profiler_output of an ACL inference loop: per frame a 'frame' range holding 'preprocess',
    two aclrtMemcpy H2D, aclmdlExecute (device ops), one aclrtMemcpy D2H, 'postprocess' and a 'sleep' range."""
    prof = root / "PROF_000001_20260101000000000_SLEEPLOOPXXXXXXX"
    out = prof / "mindstudio_profiler_output"
    out.mkdir(parents=True)
    tx_rows, op_rows = [], []
    t = T0
    exec_us = OPS_PER_FRAME * OP_US + EXEC_OVERHEAD_US  # submission + sync per call on top of the device work
    for k in range(frames):
        frame_start = t
        tx_rows.append(["host", 100, 101, "", "Push/Pop", "", "", f"{t:.3f}", f"{t + PRE_US:.3f}", "", "preprocess",
                        "default", ""])
        t += PRE_US + 2 * COPY_US
        for j in range(OPS_PER_FRAME):
            start = t + 30.0 + j * OP_US
            op_rows.append(["0", "1", str(k * OPS_PER_FRAME + j), "2", f"Conv_{j}", "Conv2D", "AI_CORE",
                            f"{start:.3f}", f"{OP_US:.3f}", "0", "8", "1,3,224,224;64,3,7,7", "FLOAT16;FLOAT16",
                            "NC1HWC0;FRACTAL_Z", "1,64,112,112", "FLOAT16", "NC1HWC0"])
        t += exec_us + COPY_US
        tx_rows.append(["host", 100, 101, "", "Push/Pop", "", "", f"{t:.3f}", f"{t + POST_US:.3f}", "", "postprocess",
                        "default", ""])
        t += POST_US
        tx_rows.append(["host", 100, 101, "", "Push/Pop", "", "", f"{t:.3f}", f"{t + sleep_us:.3f}", "", "sleep",
                        "default", ""])
        t += sleep_us
        tx_rows.append(["host", 100, 101, "", "Start/Stop", "", "", f"{frame_start:.3f}", f"{t:.3f}", "", "frame",
                        "default", ""])
    stamp = "20260101000010"
    with (out / f"msprof_tx_{stamp}.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows([TX_HEADER, *tx_rows])
    with (out / f"op_summary_{stamp}.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows([OPS_HEADER, *op_rows])
    api = [["host", "acl", "aclmdlLoadFromFile", "91234.870", "1", "91234.870", "91234.870", "91234.870", "0"],
           ["host", "acl", "aclmdlExecute", f"{exec_us * frames:.3f}", str(frames), f"{exec_us:.3f}",
            f"{exec_us:.3f}", f"{exec_us:.3f}", "0"],
           ["host", "acl", "aclrtMemcpy", f"{COPY_US * 3 * frames:.3f}", str(3 * frames), f"{COPY_US:.3f}",
            f"{COPY_US:.3f}", f"{COPY_US:.3f}", "0"],
           ["host", "runtime", "MemCopySync", f"{COPY_US * 3 * frames - 50:.3f}", str(3 * frames), "0", "0", "0", "0"]]
    with (out / f"api_statistic_{stamp}.csv").open("w", newline="") as fh:
        csv.writer(fh).writerows([API_HEADER, *api])
    dev = prof / "device_0"
    dev.mkdir()
    (dev / "info.json.0").write_text(json.dumps({"DeviceInfo": [{"id": 0, "ai_core_num": 8, "aiv_num": 7,
                                                                  "aic_frequency": "1060"}]}))
    return prof


@pytest.fixture()
def sleep_loop(tmp_path: Path) -> Path:
    return write_sleep_loop_profile(tmp_path)


def test_msprof_tx_is_ingested_row_for_row(sleep_loop: Path) -> None:
    profile = load(sleep_loop)[0]
    raw = list(csv.DictReader((sleep_loop / "mindstudio_profiler_output").glob("msprof_tx_*.csv").__next__().open()))
    assert len(profile.tx) == len(raw) == 4 * FRAMES
    sleeps = profile.tx[profile.tx["name"] == "sleep"]
    assert sleeps["duration_us"].sum() == pytest.approx(SLEEP_US * FRAMES)
    assert profile.meta.context == "om-acl"


def test_sleep_in_the_loop_is_the_top_finding(sleep_loop: Path) -> None:
    result = run_analysis(sleep_loop)
    report = result.report
    window = report["score_detail"]["window_us"]
    # the window is the application's recorded span (msproftx), not the 8 ms of device work
    raw = list(csv.DictReader(next((sleep_loop / "mindstudio_profiler_output").glob("msprof_tx_*.csv")).open()))
    span = max(float(r["End_time(us)"]) for r in raw) - min(float(r["Start_time(us)"]) for r in raw)
    assert window == pytest.approx(span, rel=1e-9)
    top = report["findings"][0]
    assert top["rule"] == "host-inference.tx-range" and top["evidence"]["range"] == "sleep"
    assert top["evidence"]["kind"] == "idle" and top["severity"] == "critical"
    assert top["estimated_saving_us"] == pytest.approx(SLEEP_US * FRAMES)
    assert top["evidence"]["device_busy_inside_us"] == 0.0 and top["evidence"]["device_clock_aligned"] is True
    assert "remove the sleep" in top["recommendation"]
    ranges = {f["evidence"]["range"]: f for f in report["findings"] if f["rule"] == "host-inference.tx-range"}
    assert set(ranges) == {"sleep", "preprocess"}  # 'frame' holds the others; postprocess is below min_share
    assert ranges["preprocess"]["evidence"]["host_only_us"] == pytest.approx(PRE_US * FRAMES)
    assert "AIPP" in ranges["preprocess"]["recommendation"]
    assert report["score"] < 30  # the loop sleeps 98 % of the time (confidence-weighted: 0.8 x the sleep)


def test_sync_copy_and_execute_gap_on_the_synthetic_loop(sleep_loop: Path) -> None:
    profile = load(sleep_loop)[0]
    findings, status = run_kb(HostInferenceKB, profile, None)
    assert status.status == "ok"
    by_rule = {f.rule: f for f in findings}
    copy = by_rule["host-inference.sync-copy"]
    # aclrtMemcpy (the ACL layer) is counted, not also its runtime MemCopySync
    assert copy.evidence["api"] == "aclrtMemcpy" and copy.evidence["calls"] == 3 * FRAMES
    assert copy.evidence["total_us"] == pytest.approx(COPY_US * 3 * FRAMES)
    assert copy.evidence["calls_per_execute"] == 3
    busy = OPS_PER_FRAME * OP_US * FRAMES
    assert copy.estimated_saving_us == pytest.approx(min(0.8 * COPY_US * 3 * FRAMES, busy))
    gap = by_rule["host-inference.execute-gap"]
    assert gap.evidence["gap_us"] == pytest.approx(EXEC_OVERHEAD_US * FRAMES)
    assert gap.evidence["device_busy_per_execute_us"] == pytest.approx(OPS_PER_FRAME * OP_US)
    assert "aclmdlExecuteAsync" in gap.recommendation
    assert "host-inference.model-load" not in by_rule  # one load is normal


def test_example_reports_the_blocking_copies() -> None:
    prof = next(EXAMPLE.glob("PROF_*"))
    findings, _ = run_kb(HostInferenceKB, load(prof)[0], None)
    copy = next(f for f in findings if f.rule == "host-inference.sync-copy")
    raw = next(r for r in csv.DictReader(next((prof / "mindstudio_profiler_output").glob("api_statistic_*")).open())
               if r["API Name"] == "rtMemcpy")
    assert copy.evidence["calls"] == int(raw["Count"]) == 20
    assert copy.evidence["total_us"] == pytest.approx(float(raw["Time(us)"]))


@pytest.mark.skipif(not NEO.is_dir(), reason="../shared/samples not present")
def test_real_msprof_api_statistic_sample() -> None:
    profile = load(NEO)[0]
    # a hand-launched TileLang kernel: host work of a kernel harness is not an inference loop
    findings, status = run_kb(HostInferenceKB, profile, None)
    assert findings == [] and any("kernel-dev" in n for n in status.notes)
    # read as an inference application, its blocking copies are counted from the ACL layer
    profile.meta.context = "om-acl"
    findings, _ = run_kb(HostInferenceKB, profile, None)
    raw = {r["API Name"]: r for r in csv.DictReader(next((NEO / "mindstudio_profiler_output").glob("api_stat*")).open())}
    copy = next(f for f in findings if f.rule == "host-inference.sync-copy")
    assert copy.evidence["calls"] == int(raw["aclrtMemcpy"]["Count"])
    assert copy.evidence["total_us"] == pytest.approx(float(raw["aclrtMemcpy"]["Time(us)"]))
    assert copy.estimated_saving_us <= profile.busy_time_us()


@pytest.mark.skipif(not SAMPLES.is_dir(), reason="../shared/samples not present")
def test_torch_api_statistic_is_left_to_the_framework_rules() -> None:
    profile = load(SAMPLES / "Ascend__msinsight/test/data/pytorch/text/level1/rank0_ascend_pt")[0]
    findings, status = run_kb(HostInferenceKB, profile, None)
    assert findings == [] and any("torch-eager" in n for n in status.notes)


def test_cli_end_to_end_on_the_synthetic_loop(sleep_loop: Path) -> None:
    res = CliRunner().invoke(main, ["analyze", str(sleep_loop), "--format", "json", "-q"])
    assert res.exit_code == 0, res.output
    report = json.loads(res.output)
    assert report["input"]["context"] == "om-acl"
    assert "host-inference.tx-range" in {f["rule"] for f in report["findings"]}
    # 30 synchronous copies: 7.5 ms of a 5.1 s loop that sleeps, 0.1 %: advice listed apart, not ranked
    (copy,) = [n for n in report["notes"] if n["rule"] == "host-inference.sync-copy"]
    assert "0.1" in copy["title"] and "window" in copy["reason"]


def test_cann6_msprof_tx_in_nanoseconds(tmp_path: Path) -> None:
    """CANN 6.x writes msprof_tx.csv without Device_id and with ns time stamps: same offsets as the us variant."""
    from advisor.ingest.msprof import read_tx
    from advisor.model import Meta

    header = ["pid", "tid", "category", "event_type", "payload_type", "payload_value", "Start_time(ns)",
              "End_time(ns)", "message_type", "message"]
    rows = [[1, 2, "", "Push/Pop", "", "", 1_700_000_000_123_456_789, 1_700_000_000_623_456_789, "", "sleep"],
            [1, 2, "", "Mark", "", "", 1_700_000_000_700_000_000, 1_700_000_000_700_000_000, "", "tick"]]
    path = tmp_path / "msprof_tx.csv"
    with path.open("w", newline="") as fh:
        csv.writer(fh).writerows([header, *rows])
    meta = Meta(source=str(tmp_path))
    tx = read_tx(path, meta)
    assert list(tx["name"]) == ["sleep", "tick"]
    assert tx["duration_us"].tolist() == [500_000.0, 0.0]
    assert meta.time_origin_ns == 1_700_000_000_000_000_000
    assert tx["start_us"].iloc[0] == pytest.approx(123_456.789, abs=1e-6)


# ---------------------------------------------------------------------------------------------------------
# roles, the shared free time, advice fitted to the run
# ---------------------------------------------------------------------------------------------------------
def test_every_rule_is_a_cause_on_the_free_time(sleep_loop: Path) -> None:
    from advisor.toolkit.time import FREE_TIME_KEY

    assert {r.role for r in HostInferenceKB.rules} == {"cause"}
    profile = load(sleep_loop)[0]
    findings, _ = run_kb(HostInferenceKB, profile, None)
    assert findings and all(set(f.saving_by_op) == {FREE_TIME_KEY} for f in findings)
    assert sum(f.estimated_saving_us for f in findings) <= profile.time.free_us


def test_the_idle_device_folds_under_the_sleep(sleep_loop: Path) -> None:
    report = run_analysis(sleep_loop).report
    top = report["findings"][0]
    assert top["rule"] == "host-inference.tx-range" and top["evidence"]["range"] == "sleep"
    assert "overall.free-time" in {s["rule"] for s in top["symptoms"]}
    assert "overall.free-time" not in {f["rule"] for f in report["findings"]}


def test_savings_together_within_the_free_time(sleep_loop: Path) -> None:
    from dataclasses import replace

    from advisor.kb import AnalysisContext
    from advisor.knowledge_bases.host_inference import _within_free_time

    profile = load(sleep_loop)[0]
    findings, _ = run_kb(HostInferenceKB, profile, None)
    inflated = [replace(f, estimated_saving_us=f.estimated_saving_us * 10,
                        saving_by_op={k: v * 10 for k, v in f.saving_by_op.items()}) for f in findings]
    ctx = AnalysisContext("host-inference", profile, None, load_rules().for_kb("host-inference"), {})
    capped = _within_free_time(ctx, inflated)
    assert sum(f.estimated_saving_us for f in capped) == pytest.approx(profile.time.free_us)
    assert all("scaled by" in f.basis and sum(f.saving_by_op.values()) == pytest.approx(f.estimated_saving_us)
               for f in capped)


def test_unknown_context_states_the_assumption(sleep_loop: Path) -> None:
    profile = load(sleep_loop)[0]
    profile.meta.context = "unknown"
    findings, _ = run_kb(HostInferenceKB, profile, None)
    assert findings and all(f.recommendation.startswith("The profile does not show how the model runs")
                            for f in findings)


def test_confidences_come_from_the_rules(sleep_loop: Path) -> None:
    conf = load_rules().for_kb("host-inference")["confidence"]
    findings, _ = run_kb(HostInferenceKB, load(sleep_loop)[0], None)
    by = {(f.rule, f.evidence.get("kind")): f.confidence for f in findings}
    assert by[("host-inference.tx-range", "idle")] == conf["tx"]["idle"]
    assert by[("host-inference.sync-copy", None)] == conf["sync_copy"]
