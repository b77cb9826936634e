"""The schedule knowledge base: one positive and one negative case per rule, advice per execution context, the
host causes sharing the free time, real samples, and scale."""

from __future__ import annotations

import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest

from advisor import ingest
from advisor.config.loader import builtin_rules_dir, load_effective_rules
from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.ingest.normalize import finalize_ops
from advisor.knowledge_bases.overall import OverallKB
from advisor.knowledge_bases.schedule import (
    OTHER_OP,
    THREAD_BREAK,
    ScheduleKB,
    compile_pattern,
    find_sequences,
    op_alphabet,
    related,
)
from advisor.model import API_COLUMNS, EVENTS_COLUMNS, STEPS_COLUMNS, Meta, Profile, empty_frame
from advisor.pipeline import hierarchy
from advisor.platform import resolve_platform
from advisor.toolkit.time import FREE_TIME_KEY
from tests.scenarios.builder import OpRow, make_profile

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
MSINSIGHT = SAMPLES / "Ascend__msinsight" / "test"
RULES = load_effective_rules([builtin_rules_dir()])
CFG = RULES.for_kb("schedule")
T0 = 1_000_000.0


def ev(name: str, start: float, dur: float, process: str = "CANN", category: str | None = None, tid: int = 1,
       args: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"process": process, "name": name, "category": category, "start_us": T0 + start, "duration_us": dur,
            "tid": tid, "args": args}


def profile_with(events: list[dict[str, Any]], ops: list[OpRow] | None = None, window_us: float | None = 1_000_000.0,
                 context: str = "torch-eager", **meta: Any) -> Profile:
    """Events (and ops) of one rank. ``window_us``: a recorded step of that length from just before the first event,
    holding one short device task when no ops are given -- the free time host savings come out of."""
    rows = list(ops or [])
    if window_us is not None and not rows:
        rows = [OpRow("pad", "Add", 10.0, start_us=T0 - 5.0)]
    p = make_profile(rows, context=context, **meta) if rows else Profile(
        ops=finalize_ops(pd.DataFrame()), meta=Meta(source="<scenario>", layout="scenario", context=context, **meta))
    if window_us is not None:
        st = pd.DataFrame({"step": [1.0], "start_us": [T0 - 10.0], "duration_us": [window_us]})
        for c in STEPS_COLUMNS:
            if c not in st.columns:
                st[c] = np.nan
        p.steps = st[[*STEPS_COLUMNS, "start_us", "duration_us"]]
    if events:
        frame = pd.DataFrame(events, columns=EVENTS_COLUMNS)
        for c in ("process", "name", "category"):
            frame[c] = frame[c].astype("category")
        p.events = frame
    return p


def run(profile: Profile) -> tuple[list[Finding], engine.KBStatus]:
    platform = resolve_platform(RULES, profile.meta.chip)
    findings, statuses = engine.run([engine.KBInfo(ScheduleKB, "test", "", "")], profile, None, RULES, platform)
    assert statuses[0].status == "ok", statuses[0].reason
    return findings, statuses[0]


def rules_of(findings: list[Finding]) -> list[str]:
    return sorted(f.rule for f in findings)


def only(findings: list[Finding], rule: str) -> Finding:
    found = [f for f in findings if f.rule == rule]
    assert len(found) == 1, rules_of(findings)
    return found[0]


def step(dur: float = 1_000_000.0) -> dict[str, Any]:
    """The ProfilerStep event torch_npu records (the window itself is the recorded step of ``profile_with``)."""
    return ev("ProfilerStep#1", -10.0, dur, process="Python", category="cpu_op")


# ---------------------------------------------------------------------------------------------------------
# schedule.op-compile
# ---------------------------------------------------------------------------------------------------------
def test_op_compile_from_events() -> None:
    n = CFG["op_compile"]["min_count"]
    f = only(run(profile_with([step()] + [ev("AscendCL@aclopCompileAndExecute", i * 400, 300) for i in range(n)]))[0],
             "schedule.op-compile")
    assert f.evidence["calls"] == n and f.evidence["time_us"] == 300 * n
    assert f.estimated_saving_us == pytest.approx(300 * n * CFG["op_compile"]["saving_fraction"])
    assert "jit_compile=False" in f.fix.data["snippet"]


def test_op_compile_below_threshold_and_from_api_statistics() -> None:
    n = CFG["op_compile"]["min_count"]
    events = [step()] + [ev("AscendCL@aclopCompileAndExecute", i * 400, 300) for i in range(n - 1)]
    assert not run(profile_with(events))[0]
    p = profile_with([])
    p.api = pd.DataFrame([["AscendCL", "aclopCompileAndExecute", 50_000.0, 40, 1250.0, 900.0, 2000.0]],
                         columns=API_COLUMNS)
    f = only(run(p)[0], "schedule.op-compile")
    assert f.evidence["source"] == "API statistics" and f.evidence["calls"] == 40


# ---------------------------------------------------------------------------------------------------------
# schedule.sync-stream
# ---------------------------------------------------------------------------------------------------------
def test_sync_after_each_launch() -> None:
    events = [step()]
    for i in range(3):
        events += [ev("Node@launch", i * 100, 10), ev("AscendCL@aclrtSynchronizeStream", i * 100 + 20, 50)]
    p = profile_with(events)
    p.meta.environment = {"ASCEND_LAUNCH_BLOCKING": "1"}
    f = only(run(p)[0], "schedule.sync-stream")
    assert f.evidence["syncs_after_launch"] == 3 and f.evidence["co_occurrence_ratio"] == 1.0
    assert f.fix.kind == "env" and f.fix.data == {"ASCEND_LAUNCH_BLOCKING": "0"}


def test_occasional_sync_is_fine() -> None:
    events = [step()] + [ev("Node@launch", i * 100, 10) for i in range(10)]
    events += [ev("AscendCL@aclrtSynchronizeStream", 1020, 50)]
    # a sync on another thread right after a launch does not pair with it
    events += [ev("Node@launch", 2000, 10, tid=1), ev("AscendCL@aclrtSynchronizeStream", 2015, 50, tid=2)]
    assert not run(profile_with(events))[0]


# ---------------------------------------------------------------------------------------------------------
# schedule.syncbn / schedule.dataloader / schedule.gc
# ---------------------------------------------------------------------------------------------------------
def test_syncbn_count() -> None:
    n = CFG["syncbn"]["min_count"]
    make = [ev("SyncBatchNorm", i * 10, 5, process="Python") for i in range(n)]
    assert only(run(profile_with([step()] + make))[0], "schedule.syncbn").evidence["calls"] == n
    assert not run(profile_with([step()] + make[:-1]))[0]


def test_slow_dataloader() -> None:
    name = "enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__"
    f = only(run(profile_with([step(), ev(name, 0, 25_000, process="Python")]))[0], "schedule.dataloader")
    assert f.estimated_saving_us == pytest.approx(25_000 - CFG["dataloader"]["expected_us"])
    assert "num_workers" in f.fix.data["snippet"] and "main process" in f.recommendation
    assert not run(profile_with([step(), ev(name, 0, 5_000, process="Python")]))[0]


def test_slow_dataloader_from_operator_details_without_trace() -> None:
    p = make_profile([OpRow("a", "Add", 100)])  # kernel_details.csv but no trace_view.json
    p.extras["operator_details"] = pd.DataFrame({
        "name": ["enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", "aten::add"],
        "host_total_us": [40_000.0, 90_000.0], "call_stack": ["main.py(3): train", "x.py(1): f"]})
    f = only(run(p)[0], "schedule.dataloader")
    assert f.evidence["source"] == "operator_details.csv" and f.evidence["iterations"] == 1
    assert "prefetch_factor" in f.fix.data["snippet"]


def test_gc_pauses() -> None:
    f = only(run(profile_with([step(), ev("GC", 0, 5_000, process="Python", category="GC")]))[0], "schedule.gc")
    assert f.evidence["pauses"] == 1 and "gc.freeze()" in f.fix.data["snippet"]
    assert not run(profile_with([step(), ev("GC", 0, 500, process="Python", category="GC")]))[0]


# ---------------------------------------------------------------------------------------------------------
# schedule.conjectured-gc
# ---------------------------------------------------------------------------------------------------------
def _gap_ops(gap: float) -> list[OpRow]:
    return [OpRow("a", "Add", 100, start_us=T0), OpRow("b", "Add", 100, start_us=T0 + 100 + gap)]


def test_conjectured_gc_even_when_gc_is_recorded() -> None:
    gap = 300_000.0
    events = [step(2_000_000), ev("AscendCL@aclrtMemcpy", 150, 10),
              # a recorded GC pause elsewhere (the peer skips the conjecture whenever one exists)
              ev("GC", 800_000, 2_000, process="Python", category="GC")]
    findings = run(profile_with(events, _gap_ops(gap)))[0]
    f = only(findings, "schedule.conjectured-gc")
    assert f.evidence["gaps"] == 1 and f.evidence["gap_time_us"] == pytest.approx(gap)
    assert f.evidence["gc_events_recorded"] is True
    assert "schedule.gc" in rules_of(findings)


def test_busy_host_or_explained_gap_is_not_conjectured() -> None:
    gap = 300_000.0
    busy_host = [step(2_000_000)] + [ev("AscendCL@aclnnAdd", 200 + i * 1000, 500) for i in range(290)]
    assert "schedule.conjectured-gc" not in rules_of(run(profile_with(busy_host, _gap_ops(gap)))[0])
    gc_inside = [step(2_000_000), ev("GC", 150, 290_000, process="Python", category="GC")]
    assert "schedule.conjectured-gc" not in rules_of(run(profile_with(gc_inside, _gap_ops(gap)))[0])
    short = [step(2_000_000)]
    assert "schedule.conjectured-gc" not in rules_of(run(profile_with(short, _gap_ops(1_000.0)))[0])


# ---------------------------------------------------------------------------------------------------------
# schedule.affinity-api
# ---------------------------------------------------------------------------------------------------------
def _aten(name: str, start: float, dur: float = 5.0, tid: int = 7, stack: str | None = "train.py(42): forward") \
        -> dict[str, Any]:
    return ev(f"aten::{name}", start, dur, process="Python", category="cpu_op", tid=tid,
              args={"Call stack": stack} if stack else None)


def test_pattern_compiles_tokens() -> None:
    rms = ["pow?", "mean?", "add?", "rsqrt", "mul", "type_as?"]
    rotary = ["chunk|slice", "neg", "cat", "mul{0,2}", "add"]
    abc = op_alphabet([rms, rotary])

    def encode_ops(ops: list[str], abc: dict[str, str]) -> str:  # the text the KB builds from a thread's ops
        return "".join(abc.get(o, OTHER_OP) for o in ops)

    assert len(set(abc.values())) == len(abc) == 10 and not {THREAD_BREAK, OTHER_OP} & set(abc.values())
    pat = compile_pattern(rms, abc)
    assert pat.fullmatch(encode_ops(["pow", "mean", "add", "rsqrt", "mul"], abc))
    assert pat.fullmatch(encode_ops(["rsqrt", "mul", "type_as"], abc))
    assert not pat.fullmatch(encode_ops(["pow", "mean", "add", "mul"], abc))
    assert not pat.search(encode_ops(["rsqrt", "matmul"], abc))  # an op no pattern names matches no token
    assert not pat.search(encode_ops(["rsqrt"], abc) + THREAD_BREAK + encode_ops(["mul"], abc))
    assert compile_pattern(rotary, abc).fullmatch(encode_ops(["slice", "neg", "cat", "add"], abc))
    assert compile_pattern(rotary, abc).fullmatch(encode_ops(["chunk", "neg", "cat", "mul", "mul", "add"], abc))
    with pytest.raises(ValueError):
        op_alphabet([["bad token!"]])


def test_rms_norm_and_optimizer_with_stacks() -> None:
    events = [step()] + [_aten(n, i * 10) for i, n in enumerate(["pow", "mean", "add", "rsqrt", "mul"])]
    events += [ev("Optimizer.step#AdamW.step", 500, 800, process="Python", category="cpu_op",
                  args={"Call stack": "train.py(60): step"})]
    findings = run(profile_with(events))[0]
    apis = {f.evidence["api"]: f for f in findings if f.rule == "schedule.affinity-api"}
    assert set(apis) == {"torch_npu.npu_rms_norm", "torch_npu.optim.NpuFusedAdamW"}
    rms = apis["torch_npu.npu_rms_norm"]
    assert rms.evidence["sequences"] == {"pow-mean-add-rsqrt-mul": 1}
    assert rms.evidence["call_stacks"] == ["train.py(42): forward"] and "train.py(42)" in rms.recommendation
    assert apis["torch_npu.optim.NpuFusedAdamW"].estimated_saving_us == pytest.approx(
        800 * CFG["affinity_api"]["saving_fraction"])


def test_nested_or_split_sequences_do_not_match() -> None:
    # gelu called inside another aten op is its implementation, not user code
    nested = [step(), _aten("linear", 0, dur=100), _aten("gelu", 10, dur=20)]
    assert not run(profile_with(nested))[0]
    # an rms_norm sequence split across two threads is not one sequence
    split = [step()] + [_aten(n, i * 10, tid=1 + i % 2) for i, n in enumerate(["pow", "mean", "add", "rsqrt", "mul"])]
    assert "torch_npu.npu_rms_norm" not in {f.evidence.get("api") for f in run(profile_with(split))[0]}


def test_affinity_stack_from_operator_details() -> None:
    p = profile_with([step(), _aten("gelu", 0, stack=None)])
    p.extras["operator_details"] = pd.DataFrame({"name": ["aten::gelu"], "call_stack": ["model.py(7): mlp;\nrun.py"],
                                                 "host_total_us": [20.0]})
    f = only(run(p)[0], "schedule.affinity-api")
    assert f.evidence["stack_source"] == "operator_details.csv" and "model.py(7)" in f.recommendation


# ---------------------------------------------------------------------------------------------------------
# schedule.fusible-ops
# ---------------------------------------------------------------------------------------------------------
def _vec(name: str, op_type: str, start: float, dur: float, mte2: float = 0.3, core: str = "AI_VECTOR_CORE") -> OpRow:
    return OpRow(name, op_type, dur, core=core, start_us=T0 + start, input_shapes="4096,4096;4096,4096",
                 output_shapes="4096,4096",
                 metrics={"aiv_time_us": dur, "aiv_mte2_ratio": mte2, "aiv_mte3_ratio": 0.05, "aiv_vec_ratio": 0.3})


def test_host_bound_sequence() -> None:
    rows = []
    for i in range(8):  # Add 5 us, 30 us launch gap, Mul 10 us: the device mostly waits
        rows += [_vec(f"add{i}", "Add", i * 200, 5), _vec(f"mul{i}", "Mul", i * 200 + 35, 10)]
    f = only(run(make_profile(rows))[0], "schedule.fusible-ops")
    assert set(f.evidence["sequence"]) == {"Add", "Mul"} and f.evidence["occurrences"] > 5
    assert f.evidence["kernel_over_wall"] < CFG["fusible"]["host_bound_ratio"]
    assert set(f.ops) <= {r.name for r in rows} and f.saving_by_op


def test_mte_bound_sequence_and_breaks() -> None:
    rows = []
    for i in range(8):  # back to back, 90 % of the time moving data
        rows += [_vec(f"add{i}", "Add", i * 40, 20, mte2=0.85), _vec(f"mul{i}", "Mul", i * 40 + 20, 20, mte2=0.85)]
    f = only(run(make_profile(rows))[0], "schedule.fusible-ops")
    assert f.evidence["mte_over_aicore"] > CFG["fusible"]["mte_bound_ratio"]
    # an AI CPU task after every op breaks the sequences: no two kernels follow each other any more
    broken = []
    for i in range(8):
        broken += [_vec(f"add{i}", "Add", i * 80, 20, mte2=0.85), _vec(f"cpu{i}", "NonZero", i * 80 + 20, 10,
                                                                        core="AI_CPU"),
                   _vec(f"mul{i}", "Mul", i * 80 + 40, 20, mte2=0.85), _vec(f"cpu{i}b", "NonZero", i * 80 + 60, 10,
                                                                           core="AI_CPU")]
    assert "schedule.fusible-ops" not in rules_of(run(make_profile(broken))[0])


def _notify(name: str, start: float, dur: float) -> OpRow:
    """A task of a collective as msprof's op summary lists it (CANN 6: its task type in the core column)."""
    return OpRow(name, name, dur, core=name, start_us=T0 + start)


def test_communication_tasks_make_no_sequence_and_break_the_kernels_ones() -> None:
    """The notify waits and records of a collective repeat with gaps like a host-bound kernel sequence (the
    mindinsight profiler sample showed "Host bound sequence repeated 6x: NOTIFY_WAIT -> NOTIFY_RECORD ->
    NOTIFY_RECORD"), but no one can fuse them: they are no sequence, and between two kernels they end a sequence."""
    notify = []
    for i in range(8):
        notify += [_notify("NOTIFY_WAIT", i * 300, 3), _notify("NOTIFY_RECORD", i * 300 + 40, 0.05),
                   _notify("NOTIFY_RECORD", i * 300 + 80, 0.05)]
    assert "schedule.fusible-ops" not in rules_of(run(make_profile(notify))[0])
    kernels = []
    for i in range(8):  # host bound Add -> Mul, as in test_host_bound_sequence
        kernels += [_vec(f"add{i}", "Add", i * 200, 5), _vec(f"mul{i}", "Mul", i * 200 + 35, 10)]
    assert "schedule.fusible-ops" in rules_of(run(make_profile(kernels))[0])
    split = []
    for i in range(8):  # the same kernels with a notify wait after each
        split += [_vec(f"add{i}", "Add", i * 200, 5), _notify("NOTIFY_WAIT", i * 200 + 10, 3),
                  _vec(f"mul{i}", "Mul", i * 200 + 35, 10), _notify("NOTIFY_WAIT", i * 200 + 50, 3)]
    assert "schedule.fusible-ops" not in rules_of(run(make_profile(split))[0])


def test_compute_bound_sequence_is_not_fusible() -> None:
    rows = []
    for i in range(8):
        rows += [_vec(f"add{i}", "Add", i * 40, 20, mte2=0.1), _vec(f"mul{i}", "Mul", i * 40 + 20, 20, mte2=0.1)]
    assert "schedule.fusible-ops" not in rules_of(run(make_profile(rows))[0])


def test_find_sequences_counts_non_overlapping_occurrences() -> None:
    rows = [_vec(f"add{i}", "Add", i * 100, 5) for i in range(12)]  # Add Add Add ... with launch gaps
    opportunities = find_sequences(make_profile(rows).ops, CFG["fusible"], window_us=1200.0)
    two = [s for o in opportunities for s in o.sequences if s.length == 2]
    assert two and len(two[0].positions) == 6  # (0,1) (2,3) ... not 11 overlapping windows


# ---------------------------------------------------------------------------------------------------------
# host savings are capped at the device idle time
# ---------------------------------------------------------------------------------------------------------
def test_host_savings_capped_at_idle_time() -> None:
    ops = [OpRow("a", "Add", 900, start_us=T0), OpRow("b", "Add", 50, start_us=T0 + 950)]
    events = [ev("GC", 0, 60_000, process="Python", category="GC"),
              ev("enumerate(DataLoader)#_MultiProcessingDataLoaderIter.__next__", 0, 80_000, process="Python")]
    findings = run(profile_with(events, ops, window_us=None))[0]
    # window = span of the ops (1000 us), busy 950 us: at most 50 us of host time can be recovered
    assert sum(f.estimated_saving_us for f in findings) == pytest.approx(50.0)
    assert all("scaled" in f.basis and set(f.saving_by_op) == {FREE_TIME_KEY} for f in findings)


def test_host_causes_absorb_the_idle_device() -> None:
    """overall.free-time (a symptom) folds under the host cause whose fix removes most of it (a 950 ms GC pause in
    a 1 s step); a cause that removes a small part of it (a 60 ms pause) leaves the idle device a finding of its
    own -- never both."""
    docs = [r for k in (ScheduleKB, OverallKB) for r in k.rules]
    roles, mechanisms = {r.id: r.role for r in docs}, hierarchy.mechanisms_of(docs)
    for pause, folded in ((950_000, True), (60_000, False)):
        p = profile_with([ev("GC", 0, pause, process="Python", category="GC")])
        platform = resolve_platform(RULES, p.meta.chip)
        findings, _ = engine.run([engine.KBInfo(k, "test", "", "") for k in (ScheduleKB, OverallKB)], p, None,
                                 RULES, platform)
        top = hierarchy.absorb(findings, roles, None, mechanisms)
        gc = next(f for f in top if f.rule == "schedule.gc")
        assert gc.estimated_saving_us <= p.time.free_us
        if folded:
            assert [f.rule for f in top] == ["schedule.gc"] and [x["rule"] for x in gc.symptoms] == \
                ["overall.free-time"]
            assert gc.symptoms[0]["mechanism"]
        else:
            assert sorted(f.rule for f in top) == ["overall.free-time", "schedule.gc"] and not gc.symptoms


# ---------------------------------------------------------------------------------------------------------
# advice fitted to the run
# ---------------------------------------------------------------------------------------------------------
def _compiles() -> list[dict[str, Any]]:
    return [ev("AscendCL@aclopCompileAndExecute", i * 400, 300) for i in range(CFG["op_compile"]["min_count"])]


def test_op_compile_advice_per_context() -> None:
    torch = only(run(profile_with(_compiles()))[0], "schedule.op-compile")
    assert "jit_compile=False" in torch.recommendation
    acl = only(run(profile_with(_compiles(), context="om-acl"))[0], "schedule.op-compile")
    assert "atc --singleop" in acl.recommendation and "aclopExecuteV2" in acl.recommendation
    ms = only(run(profile_with(_compiles(), context="mindspore-pynative"))[0], "schedule.op-compile")
    assert "ACL_OP_COMPILER_CACHE_MODE=enable" in ms.recommendation
    for f in (acl, ms):
        assert "torch" not in f.recommendation + str(f.fix.data)


def _syncs() -> list[dict[str, Any]]:
    events = []
    for i in range(3):
        events += [ev("Node@launch", i * 100, 10), ev("AscendCL@aclrtSynchronizeStream", i * 100 + 20, 50)]
    return events


def test_sync_advice_per_context() -> None:
    ms = only(run(profile_with(_syncs(), context="mindspore-graph"))[0], "schedule.sync-stream")
    assert "pynative_synchronize" in ms.recommendation and "ASCEND_LAUNCH_BLOCKING" not in ms.recommendation
    acl = only(run(profile_with(_syncs(), context="om-acl"))[0], "schedule.sync-stream")
    assert "aclrtSynchronizeStream once" in acl.recommendation and ".item()" not in acl.recommendation


def test_pytorch_only_rules_stay_quiet_elsewhere() -> None:
    events = [ev("enumerate(DataLoader)#_SingleProcessDataLoaderIter.__next__", 0, 25_000, process="Python"),
              *[_aten(n, 100 + i * 10) for i, n in enumerate(["pow", "mean", "add", "rsqrt", "mul"])]]
    assert {f.rule for f in run(profile_with(events))[0]} == {"schedule.dataloader", "schedule.affinity-api"}
    for context in ("om-acl", "mindspore-graph"):
        findings, status = run(profile_with(events, context=context))
        assert not findings, context
        assert any("schedule.dataloader" in n and "schedule.affinity-api" in n for n in status.notes)


def test_kernel_development_gets_no_schedule_advice() -> None:
    rows = []
    for i in range(8):
        rows += [_vec(f"add{i}", "Add", i * 200, 5), _vec(f"mul{i}", "Mul", i * 200 + 35, 10)]
    findings, status = run(profile_with(_compiles() + _syncs(), rows, context="kernel-dev"))
    assert findings == []
    assert any("kernel-development" in n for n in status.notes)


def test_same_pattern_in_several_shapes_is_one_finding() -> None:
    rows = []
    for i in range(14):  # the same Add -> Mul pattern in two shapes, 7 times each, host bound
        shape = "4096,4096" if i < 7 else "1024,1024"
        rows += [OpRow(f"add{i}", "Add", 5, core="AI_VECTOR_CORE", start_us=T0 + i * 200, input_shapes=shape,
                       output_shapes=shape),
                 OpRow(f"mul{i}", "Mul", 10, core="AI_VECTOR_CORE", start_us=T0 + i * 200 + 35, input_shapes=shape,
                       output_shapes=shape)]
    findings = [f for f in run(make_profile(rows, context="torch-eager"))[0] if f.rule == "schedule.fusible-ops"]
    titles = [f.title for f in findings]
    assert len(titles) == len(set(titles)) and len(findings) == 1
    f = findings[0]
    # host bound: the launch gaps are free time, attributed to the free-time pseudo-op; the ops are named
    assert set(f.saving_by_op) == {FREE_TIME_KEY} and set(f.ops) <= {r.name for r in rows}


def test_fusible_sequence_folds_under_the_cause_on_its_ops() -> None:
    rows = []
    for i in range(8):  # back to back, 90 % of the time moving data: MTE bound
        rows += [_vec(f"add{i}", "Add", i * 40, 20, mte2=0.85), _vec(f"mul{i}", "Mul", i * 40 + 20, 20, mte2=0.85)]
    (sym,) = run(make_profile(rows, context="torch-eager"))[0]
    assert ScheduleKB.rule("schedule.fusible-ops").role == "symptom"
    assert FREE_TIME_KEY not in sym.saving_by_op and sum(sym.saving_by_op.values()) == pytest.approx(
        sym.estimated_saving_us)
    cause = Finding("ub-fusion", "ub-fusion.unfused-chain", "chain", "major", list(sym.ops), {}, 100.0, "b", "r")
    (out,) = hierarchy.absorb([sym, cause], {"schedule.fusible-ops": "symptom"}, None,
                              {"ub-fusion.unfused-chain": {"schedule.fusible-ops": "the fused chain"}})
    assert out.rule == "ub-fusion.unfused-chain" and out.symptoms[0]["rule"] == "schedule.fusible-ops"


# ---------------------------------------------------------------------------------------------------------
# real samples
# ---------------------------------------------------------------------------------------------------------
def test_sample_trace_with_sgd_optimizer() -> None:
    path = MSINSIGHT / "data" / "pytorch" / "text" / "level2" / "rank0_ascend_pt"
    if not path.is_dir():
        pytest.skip("../shared/samples is not available")
    findings, _ = run(ingest.load(path)[0])
    f = only(findings, "schedule.affinity-api")
    assert f.evidence["api"] == "torch_npu.optim.NpuFusedSGD"
    assert any("optimizer.py" in s for s in f.evidence["call_stacks"])


def test_sample_kernel_details_only_runs_fusible_and_notes_the_rest() -> None:
    path = MSINSIGHT / "st" / "level2" / "rank_0_ascend_pt"
    if not path.is_dir():
        pytest.skip("../shared/samples is not available")
    findings, status = run(ingest.load(path)[0])
    assert {f.rule for f in findings} == {"schedule.fusible-ops"}
    assert len(findings) <= CFG["fusible"]["top_num"]
    assert any("no trace events" in n for n in status.notes)


# ---------------------------------------------------------------------------------------------------------
# scale
# ---------------------------------------------------------------------------------------------------------
def test_large_profile_in_seconds() -> None:
    n_ops, n_layers = 200_000, 12_500
    rng = np.random.default_rng(1)
    layer = np.array(["MatMulV2", "Add", "Mul", "Gelu", "LayerNormV3", "Cast", "SoftmaxV2", "Transpose",
                      "MatMulV3", "Add", "Mul", "TransData", "ReduceMean", "Pow", "Sqrt", "RealDiv"])
    types = np.tile(layer, n_ops // len(layer))
    dur = rng.uniform(5, 50, n_ops)
    start = T0 + np.cumsum(dur + rng.uniform(30, 80, n_ops))  # launch gaps: host bound
    ops = pd.DataFrame({"name": types, "type": types, "core": "AI_VECTOR_CORE", "start_us": start,
                        "duration_us": dur, "input_shapes": "4096,4096", "output_shapes": "4096,4096",
                        "aiv_time_us": dur, "aiv_mte2_ratio": rng.uniform(0.3, 0.9, n_ops),
                        "aiv_mte3_ratio": 0.1})
    aten = np.tile(np.array(["aten::pow", "aten::mean", "aten::add", "aten::rsqrt", "aten::mul", "aten::gelu",
                             "aten::linear", "aten::softmax"]), n_layers * 2)
    m = len(aten)
    hs = T0 + np.arange(m) * 40.0
    events = pd.DataFrame({"process": "Python", "name": aten, "category": "cpu_op", "start_us": hs,
                           "duration_us": 10.0, "tid": 1, "args": [{"Call stack": "m.py(1): f"}] * m})
    launches = pd.DataFrame({"process": "CANN", "name": "Node@launch", "category": None, "start_us": hs + 15,
                             "duration_us": 3.0, "tid": 1, "args": None})
    frame = pd.concat([events, launches], ignore_index=True)
    for c in ("process", "name", "category"):
        frame[c] = frame[c].astype("category")
    profile = Profile(ops=finalize_ops(ops), meta=Meta(layout="scenario", context="torch-eager"), events=frame,
                      api=empty_frame(API_COLUMNS))
    t = time.perf_counter()
    findings, _ = run(profile)
    elapsed = time.perf_counter() - t
    assert {"schedule.affinity-api", "schedule.fusible-ops"} <= {f.rule for f in findings}
    assert elapsed < 60, f"schedule KB took {elapsed:.1f} s on {n_ops} ops and {len(frame)} events"


def test_findings_contract_on_the_peer_fixture(minimal: Path) -> None:
    """Every finding names its ops or events and carries a saving with its basis and a fix."""
    findings, _ = run(ingest.load(minimal)[0])
    assert {f.rule for f in findings} == {r.id for r in ScheduleKB.rules} - {"schedule.conjectured-gc"}
    for f in findings:
        assert f.ops or f.evidence.get("events"), f.rule
        assert f.estimated_saving_us > 0 and f.basis and f.fix is not None and f.recommendation, f.rule
        assert not f.saving_by_op or sum(f.saving_by_op.values()) == pytest.approx(f.estimated_saving_us)


# ---------------------------------------------------------------------------------------------------------
# schedule.fusible-ops: one finding per fusion opportunity
# ---------------------------------------------------------------------------------------------------------
def test_related_patterns() -> None:
    assert related(("A", "B", "C"), ("A", "B", "C")) == "same"
    assert related(("A", "B", "C"), ("B", "C", "A")) == "rotation"  # the same loop entered at another op
    assert related(("B", "C"), ("A", "B", "C", "D")) == "sub-sequence"
    assert related(("A", "B", "C", "D"), ("B", "C")) == "sub-sequence"
    assert related(("A", "C"), ("A", "B", "C")) is None  # not contiguous
    assert related(("D", "A"), ("A", "B", "C", "D")) is None  # across the end: only a rotation of equal length
    assert related(("A", "B"), ("B", "A", "C")) is None


def _chain_and_part(gap: float = 30.0) -> list[OpRow]:
    """A host-bound chain A..F repeated 8 times (an AI CPU task after each, so its rotations do not repeat), then
    its part C -> D -> E repeated 8 times elsewhere on tensors of another shape (between unique ops) -- as the RoPE
    of the shared sample runs Mul -> Cast -> Sin -> Mul -> Cast -> RotaryPositionEmbedding once for q (16 heads)
    before the longer chain that holds the same ops for k (8 heads)."""
    rows, t = [], 0.0
    for i in range(8):
        for k in "ABCDEF":
            rows.append(_vec(f"{k.lower()}{i}", k, t, 5))
            t += 5 + gap
        rows.append(_vec(f"cpu{i}", "NonZero", t, 5, core="AI_CPU"))
        t += 5 + gap
    for i in range(8):
        rows.append(_vec(f"x{i}", f"Unique{i}", t, 5))
        t += 5 + gap
        for k in "CDE":
            rows.append(replace(_vec(f"{k.lower()}p{i}", k, t, 5), input_shapes="16,128", output_shapes="16,128"))
            t += 5 + gap
    return rows


def test_a_sequence_and_its_part_elsewhere_are_one_finding() -> None:
    rows = _chain_and_part()
    p = make_profile(rows, context="torch-eager")
    findings = [f for f in run(p)[0] if f.rule == "schedule.fusible-ops"]
    assert len(findings) == 1
    (f,) = findings
    assert f.evidence["sequence"] == list("ABCDEF") and f.evidence["occurrences"] == 8
    assert f.evidence["parts"] == [{"sequence": list("CDE"), "relation": "sub-sequence", "occurrences": 8}]
    assert f.title.startswith("Host bound sequence repeated 8x (and 8x in part): A -> B")
    # every task once: 8 x 6 + 8 x 3; the saving is half the gaps inside the 16 occurrences (no MTE saving)
    assert f.evidence["tasks"] == 8 * 6 + 8 * 3
    gaps = 8 * 5 * 30.0 + 8 * 2 * 30.0
    assert f.estimated_saving_us == pytest.approx(CFG["fusible"]["host_saving_fraction"] * gaps)
    # the part does not use up an opportunity: with room for one, the chain and its part are still reported
    one = find_sequences(p.ops, {**CFG["fusible"], "top_num": 1}, p.time.window_us)
    assert [[s.labels for s in o.sequences] for o in one] == [[tuple("ABCDEF"), tuple("CDE")]]


def test_sequences_sharing_tasks_are_one_opportunity_counted_once() -> None:
    """With fusible.max_overlap above 0 a sequence may share tasks with a better one: it is then part of that one's
    opportunity, its figures counted for the tasks no better sequence holds, and no task is in two opportunities."""
    p = make_profile(_chain_and_part(), context="torch-eager")
    cfg = {**CFG["fusible"], "max_overlap": 0.5, "max_length": 4}
    opportunities = find_sequences(p.ops, cfg, p.time.window_us)
    tasks = [set().union(*({int(q) + j for q in s.positions for j in range(s.length)} for s in o.sequences))
             for o in opportunities]
    assert all(not (a & b) for i, a in enumerate(tasks) for b in tasks[i + 1:])
    for o in opportunities:
        held = len(set().union(*({int(q) + j for q in s.positions for j in range(s.length)} for s in o.sequences)))
        counted = sum(w * len(s.positions) * s.length for s, w in zip(o.sequences, o.weights, strict=True))
        assert counted == pytest.approx(held)
