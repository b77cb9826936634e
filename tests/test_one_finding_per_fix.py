"""One finding per fix (issue 28, item 3) on the shared samples: findings that share a fix are one, every task is
counted by one finding only, and the expected numbers are computed here from the raw files (csv / json modules),
not from the advisor's tables."""

from __future__ import annotations

import csv
import json
import shutil
from collections import defaultdict
from decimal import Decimal
from pathlib import Path

import pytest

from advisor.pipeline.analysis import run_analysis

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
MSINSIGHT = SAMPLES / "Ascend__msinsight"
ST_RANK0 = MSINSIGHT / "test/st/level2/rank_0_ascend_pt"
EAGER_CNN = [MSINSIGHT / "test/data/pytorch/text/level1/rank0_ascend_pt",
             MSINSIGHT / "test/data/pytorch/text/level2/rank0_ascend_pt"]
SERVER_RANK1 = MSINSIGHT / "server/src/test/test_data/test_rank_1"
MINDINSIGHT = SAMPLES / "mindspore-ai__mindinsight/tests/utils/resource/profiler"

FUSIBLE = "schedule.fusible-ops"
HOST_FRACTION, MTE_FRACTION = 0.5, 0.3  # rules/schedule.yaml fusible.host_saving_fraction / mte_saving_fraction
HOST_BOUND, MTE_BOUND = 0.4, 0.8  # fusible.host_bound_ratio / mte_bound_ratio

needs = pytest.mark.skipif(not MSINSIGHT.is_dir(), reason="../shared/samples not present")


def _report(path: Path) -> dict:
    return run_analysis(path, workers=1).report


def _said(report: dict) -> list[dict]:
    """What the report says: its ranked findings, then its notes (advice whose saving is immaterial here)."""
    return [*report["findings"], *report["notes"]]


def _rule(report: dict, rule: str) -> list[dict]:
    return [f for f in _said(report) if f["rule"] == rule]


def _kernels(path: Path) -> list[dict]:
    """kernel_details.csv rows in start order (the file's order among equal starts), each with ``start``: its start
    in us after the first one's (decimal arithmetic: an absolute time stamp in us has more digits than a float)."""
    with open(path / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    t0 = min(Decimal(r["Start Time(us)"].strip()) for r in rows)
    for r in rows:
        r["start"] = float(Decimal(r["Start Time(us)"].strip()) - t0)
    return sorted(rows, key=lambda r: r["start"])


def _num(row: dict[str, str], col: str) -> float:
    try:
        return float(row.get(col, "") or 0.0)
    except ValueError:
        return 0.0


# ---------------------------------------------------------------------------------------------------------
# schedule.fusible-ops: a sequence and its parts are one finding
# ---------------------------------------------------------------------------------------------------------
def _occurrences(rows: list[dict[str, str]], pattern: tuple[str, ...], taken: set[int]) -> dict[tuple, list[int]]:
    """Non-overlapping occurrences (left to right) of the op types ``pattern`` on tasks not ``taken``, per key
    (type and shapes of each op, what the rule hashes)."""
    n = len(pattern)
    out: dict[tuple, list[int]] = defaultdict(list)
    free: dict[tuple, int] = defaultdict(int)
    for i in range(len(rows) - n + 1):
        window = rows[i:i + n]
        if tuple(r["Type"] for r in window) != pattern or any(i + j in taken for j in range(n)):
            continue
        key = tuple((r["Type"], r["Input Shapes"], r["Output Shapes"]) for r in window)
        if i >= free[key]:
            out[key].append(i)
            free[key] = i + n
    return out


def _saving(rows: list[dict[str, str]], starts: list[int], n: int) -> float:
    """The rule's saving of one sequence, from the raw columns: half the gaps inside its occurrences when host bound,
    0.3 of its kernels' time when MTE bound (no op of the RoPE chain is in fusible.no_saving_types)."""
    span = dur = mte = aic = 0.0
    for i in starts:
        tasks = rows[i:i + n]
        span += max(r["start"] + _num(r, "Duration(us)") for r in tasks) - tasks[0]["start"]
        dur += sum(_num(r, "Duration(us)") for r in tasks)
        mte += sum(max(_num(r, "aic_mte2_time(us)"), _num(r, "aiv_mte2_time(us)"))
                   + max(_num(r, "aic_fixpipe_time(us)"), _num(r, "aiv_mte3_time(us)")) for r in tasks)
        aic += sum(_num(r, "aicore_time(us)") for r in tasks)
    host_bound = dur / span < HOST_BOUND
    mte_bound = mte > MTE_BOUND * aic  # no AI Core time (vector kernels): MTE bound when they move data at all
    return (HOST_FRACTION * max(0.0, span - dur) if host_bound else 0.0) + (MTE_FRACTION * dur if mte_bound else 0.0)


@needs
def test_the_rope_chain_is_one_finding_counted_over_the_union_of_its_tasks() -> None:
    """Between the QKV projection and the attention each layer runs the q/k norms and the RoPE of q (Slice ->
    RmsNorm -> Slice -> RmsNorm -> Cos -> Mul -> Cast -> Sin -> Mul -> Cast -> RotaryPositionEmbedding), then the
    RoPE of k (TensorMove -> Cos -> ... -> RotaryPositionEmbedding -> TensorMove -> Slice): 21 ops no matmul breaks,
    longer than fusible.max_length. The report held its pieces as findings (and, before matmuls broke sequences,
    windows reaching across them: SwiGlu -> MatMulV3 -> Add -> RmsNorm ...). One chain, one opportunity, one fix."""
    report = _report(ST_RANK0)
    rope = [f for f in _rule(report, FUSIBLE) if "RotaryPositionEmbedding" in f["evidence"]["sequence"]
            or any("Sin" in p["sequence"] for p in f["evidence"]["parts"])]
    forward = [f for f in rope if "RotaryPositionEmbeddingGrad" not in f["evidence"]["sequence"]]
    assert len(forward) == 1
    (f,) = forward
    lead = ("TensorMove", "Cos", "Mul", "Cast", "Sin", "Mul", "Cast", "RotaryPositionEmbedding", "TensorMove", "Slice")
    part = ("Slice", "RmsNorm", "Slice", "RmsNorm", "Cos", "Mul", "Cast", "Sin", "Mul", "Cast")
    assert tuple(f["evidence"]["sequence"]) == lead
    assert f["evidence"]["parts"] == [{"sequence": list(part), "relation": "continuation", "occurrences": 28}]
    assert f["title"].startswith("Host bound and MTE bound sequence repeated 28x (and 28x in part): TensorMove")
    rows = _kernels(ST_RANK0)
    [full] = [v for v in _occurrences(rows, lead, set()).values() if len(v) == f["evidence"]["occurrences"]]
    taken = {i + j for i in full for j in range(len(lead))}
    [parts] = [v for v in _occurrences(rows, part, taken).values() if len(v) > 5]
    assert (len(full), len(parts)) == (28, 28)
    # each part ends one op (the q RotaryPositionEmbedding) before an occurrence of the lead starts
    assert {i + len(part) + 1 for i in parts} == set(full)
    # every task once: 28 x 10 + 28 x 10, and the saving is the two sequences' (their tasks are disjoint)
    assert f["evidence"]["tasks"] == len(taken | {i + j for i in parts for j in range(len(part))}) == 560
    assert "scaled" not in f["basis"]
    expected = _saving(rows, full, len(lead)) + _saving(rows, parts, len(part))
    assert f["estimated_saving_us"] == pytest.approx(expected, rel=1e-6)
    # and never more than the time it claims: the gaps inside the occurrences plus its kernels' time
    assert f["estimated_saving_us"] <= f["evidence"]["wall_us"]
    # no fusible finding reaches across a matmul
    assert not any({"MatMulV3", "MatMul"} & set(g["evidence"]["sequence"]) for g in _rule(report, FUSIBLE))


def _related(a: list[str], b: list[str]) -> bool:
    """Rotation or contiguous sub-sequence, written out here (not the advisor's)."""
    short, long_ = sorted((tuple(a), tuple(b)), key=len)
    hay = long_ + long_[:-1] if len(short) == len(long_) else long_
    return any(hay[i:i + len(short)] == short for i in range(len(hay) - len(short) + 1))


@needs
@pytest.mark.parametrize("path", [ST_RANK0, MSINSIGHT / "server/src/test/test_data/test_rank_1",
                                  SAMPLES / "Ascend__msprof-analyze/test/ut/advisor/advisor_backend/compute_advice/"
                                            "kernel_details.csv"], ids=lambda p: p.parent.name + "/" + p.name)
def test_no_fusible_finding_is_a_rotation_or_sub_sequence_of_another(path: Path) -> None:
    if not path.exists():
        pytest.skip(f"{path} not present")
    seqs = [f["evidence"]["sequence"] for f in _rule(_report(path), FUSIBLE)]
    assert not [(a, b) for i, a in enumerate(seqs) for b in seqs[i + 1:] if _related(a, b)]
    # nor a loop named twice over: "NonZero -> StridedSliceD -> StridedSliceD -> Greater -> MemSet -> NonZero ->
    # ... -> MemSet repeated 12x" is the five-op loop repeated 24x
    doubled = [s for s in seqs for p in range(1, len(s)) if len(s) % p == 0 and s[:p] * (len(s) // p) == s]
    assert not doubled


def _comm_tasks(prof: Path) -> tuple[set[str], set[str]]:
    """Names and task types of the tasks msprof's task_time timeline records as communication or runtime tasks
    (CANN 6: the collective's notify waits and records, reduces, copies; event records)."""
    names, types = set(), set()
    for path in prof.glob("device_*/timeline/task_time_*.json"):
        for e in json.loads(path.read_text("utf-8")):
            kind = (e.get("args") or {}).get("Task Type") if isinstance(e, dict) else None
            if e.get("ph") == "X" and kind and kind not in ("AI_CORE", "AI_VECTOR_CORE", "AI_CPU", "MIX_AIC",
                                                           "MIX_AIV"):
                names.add(str(e["name"]))
                types.add(str(kind))
    return names, types


@pytest.mark.skipif(not MINDINSIGHT.is_dir(), reason="../shared/samples not present")
@pytest.mark.parametrize("prof", sorted(MINDINSIGHT.glob("PROF_*")) if MINDINSIGHT.is_dir() else [],
                         ids=lambda p: p.name)
def test_no_fusible_finding_holds_a_communication_task(prof: Path) -> None:
    """The report showed 'Host bound sequence repeated 6x: NOTIFY_WAIT -> NOTIFY_RECORD -> NOTIFY_RECORD': HCCL
    notify tasks are no kernels anyone can fuse."""
    names, types = _comm_tasks(prof)
    assert {"NOTIFY_WAIT", "NOTIFY_RECORD"} <= types  # the sample does hold them
    for f in _rule(_report(prof), FUSIBLE):
        assert not set(f["ops"]) & names and not set(f["evidence"]["sequence"]) & (names | types), f["title"]


# ---------------------------------------------------------------------------------------------------------
# transdata: one finding per forcing cause and fix
# ---------------------------------------------------------------------------------------------------------
def _fmt(cell: str) -> str:
    return cell.split(";")[0].split(":")[0].strip()


def _shape(cell: str) -> str:
    return cell.strip('"').split(";")[0]


def _eager_conversions(rows: list[dict[str, str]]) -> tuple[float, int, int]:
    """What graph mode removes, read off the stream as an Ascend engineer would: each conversion out of NC1HWC0 into
    NCHW that comes straight back (nothing, or a Relu, between it and the NCHW -> NC1HWC0 conversion of the same
    tensor) is a round trip -- both conversions go when the private shapes agree, else the cheaper one (another
    C0 stays one direct conversion) -- and one feeding a ReluGrad in NCHW goes. (saving, round trips, exits)."""
    total, trips, exits = 0.0, 0, 0

    def is_conv(r: dict[str, str], src: str, dst: str) -> bool:
        return r["Type"] == "TransData" and _fmt(r["Input Formats"]).startswith(src) \
            and _fmt(r["Output Formats"]).startswith(dst)

    for i, r in enumerate(rows):
        if not is_conv(r, "NC1HWC0", "NCHW"):
            continue
        j = i + 1
        if j < len(rows) and rows[j]["Type"] == "Relu":
            j += 1
        back = rows[j] if j < len(rows) else None
        if back is not None and is_conv(back, "NCHW", "NC1HWC0") and _shape(back["Input Shapes"]) == _shape(
                r["Output Shapes"]):
            a, b = _num(r, "Duration(us)"), _num(back, "Duration(us)")
            total += a + b if _shape(r["Input Shapes"]) == _shape(back["Output Shapes"]) else min(a, b)
            trips += 1
        elif i + 1 < len(rows) and rows[i + 1]["Type"] == "ReluGrad" and _fmt(rows[i + 1]["Input Formats"]) == "NCHW":
            total += _num(r, "Duration(us)")
            exits += 1
    return total, trips, exits


@needs
@pytest.mark.parametrize("path", EAGER_CNN, ids=lambda p: p.parent.name)
def test_eager_conversions_are_one_finding_named_after_their_cause(path: Path) -> None:
    """AlexNet in torch_npu eager mode: the report gave '4 format round trip(s) that cancel', '5 format round
    trip(s) around Relu' and '3 TransData forced by ReluGrad', each with the same fix (graph mode). They are one
    cause -- eager ops return plain NCHW between private-format ops -- and one finding, each conversion counted
    once."""
    report = _report(path)
    transdata = [f for f in _said(report) if f["kb"] == "transdata"]
    assert [f["rule"] for f in transdata] == ["transdata.format-policy"]
    (f,) = transdata
    assert "eager mode" in f["title"] and f["fix"]["summary"].startswith("compile the model with torchair")
    rows = [r for r in _kernels(path) if r["Stream ID"] == "2"]  # the compute stream
    saving, trips, exits = _eager_conversions(rows)
    assert (trips, exits) == (11, 3)  # 7 in the forward pass, 4 in the backward; 3 exits into ReluGrad
    assert f["estimated_saving_us"] == pytest.approx(saving, abs=1e-3)
    assert f["evidence"]["sites"] == exits


# ---------------------------------------------------------------------------------------------------------
# communication.small-packets: one finding whatever the transports
# ---------------------------------------------------------------------------------------------------------
@needs
def test_small_packets_of_two_transports_are_one_finding() -> None:
    """Small SDMA and small RDMA transfers are merged the same way (larger buckets): one finding, whose title gives
    both counts, read here from communication.json."""
    comm = json.loads((SERVER_RANK1 / "ASCEND_PROFILER_OUTPUT" / "communication.json").read_text("utf-8"))
    sizes: dict[str, list[tuple[str, float]]] = defaultdict(list)
    for step in comm.values():
        for ops in step.values():
            for op, info in ops.items():
                if op == "Total Op Info":
                    continue
                for transport, bw in info["Communication Bandwidth Info"].items():
                    if bw.get("Transit Size(MB)", 0) > 0:
                        sizes[transport].append((op.split("@")[0], float(bw["Transit Size(MB)"])))
    limits = {"SDMA": 16.0, "RDMA": 1.0}  # rules/communication.yaml small_packets.min_size_mb
    small = {t: [op for op, mb in sizes[t] if mb < limits[t]] for t in limits}
    report = _report(SERVER_RANK1)
    (f,) = _rule(report, "communication.small-packets")
    for t in limits:
        assert f"{len(small[t])} of {len(sizes[t])} ops" in f["title"]
    assert (len(small["SDMA"]), len(small["RDMA"])) == (7, 1)
    assert {x["transport"] for x in f["evidence"]["transports"]} == {"SDMA", "RDMA"}
    assert set(f["ops"]) <= set(small["SDMA"]) | set(small["RDMA"])
    assert "hcom_allGather__822_4" in f["ops"]  # small on both transports: one op, one finding


# ---------------------------------------------------------------------------------------------------------
# one cause over the ranks: findings of one rule with one fix on the same ops are one
# ---------------------------------------------------------------------------------------------------------
@needs
def test_waiting_ranks_are_one_uncovered_communication_finding() -> None:
    """AlexNet level2, two ranks: rank 0's uncovered communication is mostly wait, rank 1's mostly idle -- both
    'peers not ready', with the same fix (balance the ranks) on the same collectives. The cluster report held two
    findings; it holds one over both ranks, whose saving is the two ranks' less the waiting the late peer (rank 5,
    outside the job's profile) explains."""
    job = MSINSIGHT / "test/data/pytorch/text/level2"
    (f,) = _rule(_report(job), "overall.uncovered-communication")
    assert f["ranks"] == [0, 1] and "waiting for peers" in f["title"]
    explained = sum((f["evidence"].get("explained_by") or {}).values())
    assert f["estimated_saving_us"] == pytest.approx(
        sum(f["evidence"]["by_rank"][r]["estimated_saving_us"] for r in ("0", "1")) - explained, abs=1e-2)
    for rank in ("0", "1"):
        shares = json.loads((job / f"rank{rank}_ascend_pt" / "ASCEND_PROFILER_OUTPUT" / "communication.json")
                            .read_text("utf-8"))
        wait = idle = transit = 0.0
        for step in shares.values():
            for ops in step.values():
                for op, info in ops.items():
                    if op != "Total Op Info":
                        t = info["Communication Time Info"]
                        wait, idle, transit = wait + t["Wait Time(ms)"], idle + t["Idle Time(ms)"], \
                            transit + t["Transit Time(ms)"]
        assert wait + idle > transit  # each rank waits for its peers more than it transfers


def _finding(rule: str, ops: list[str], rank: int | None = 0, fix: str | None = "merge", **evidence: object) -> dict:
    return {"rule": rule, "kb": rule.split(".")[0], "title": f"{rule} on {ops} rank {rank} {evidence}",
            "severity": "info", "ops": ops, "estimated_saving_us": 0.0, "evidence": evidence, "rank": rank,
            "fix": {"kind": "code", "summary": fix} if fix else None}


def test_the_report_invariant_one_finding_per_op_per_rule() -> None:
    """advisor.pipeline.consistency (what ADVISOR_SELF_CHECK=1 refuses to write) holds the rule on any report."""
    from advisor.pipeline.consistency import problems

    def broken(*findings: dict) -> list[str]:
        return [p for p in problems({"findings": list(findings), "score": 50}) if "named by" in p or " are one" in p]

    assert broken(_finding("r.x", ["a", "b"]), _finding("r.x", ["b"]))  # one op, two findings, one rank
    assert broken(_finding("r.x", ["a"], rank=0), _finding("r.x", ["a"], rank=1))  # same fix on two ranks
    assert not broken(_finding("r.x", ["a"], rank=0), _finding("r.x", ["a"], rank=1, fix="other"))
    assert not broken(_finding("r.x", ["a"]), _finding("r.y", ["a"]))  # two rules may name one op
    seq = "schedule.fusible-ops"
    assert broken(_finding(seq, ["m"], sequence=["A", "B", "C", "D"]), _finding(seq, ["n"], sequence=["B", "C"]))
    assert broken(_finding(seq, ["m"], sequence=["A", "B", "C"]), _finding(seq, ["n"], sequence=["C", "A", "B"]))
    # the forward and the backward chain launch one Add kernel name, in two unrelated sequences: two findings
    assert not broken(_finding(seq, ["add", "mm"], sequence=["SwiGlu", "MatMulV3", "Add"]),
                      _finding(seq, ["add", "mm"], sequence=["Add", "SwiGluGrad", "MatMulV3"]))


@needs
def test_small_packets_of_two_ranks_on_other_transports_are_one_finding(tmp_path: Path) -> None:
    """The server test job (its two torch_npu ranks, without the msprof runs beside them): rank 0's small transfers
    are RDMA only, rank 1's SDMA and RDMA; one fix, one finding over both ranks, naming hcom_allGather__822_4 once
    (small on RDMA on both ranks)."""
    for rank in ("test_rank_0", "test_rank_1"):
        shutil.copytree(MSINSIGHT / "server/src/test/test_data" / rank, tmp_path / rank)
    report = _report(tmp_path)
    (f,) = _rule(report, "communication.small-packets")
    assert f["ranks"] == [0, 1] and "hcom_allGather__822_4" in f["ops"]
    assert set(f["evidence"]["by_rank"]) == {"0", "1"}
