"""Parity with the peer, msprof-analyze 26.2.0 ``advisor``: advisor must report everything the peer reports.

The peer's findings were recorded once per input (``tests/data/peer/*.json``: finding titles, descriptions and the
first rows of each detail sheet; how they were produced is in each file's ``command``) -- the peer is not run
here. For every peer finding the test names the advisor rules that cover it and, where the peer lists ops,
checks that advisor names those ops too. Where the peer is wrong, ``PEER_WRONG`` says why and the test asserts
advisor does *not* repeat the mistake.

Inputs: the minimal profile of ``../shared/bench/make_min_ascend_pt.py`` (the peer's 19 findings, PEER.md section
7) and every ``*_ascend_pt`` directory under ``../shared/samples``.
"""

from __future__ import annotations

import fnmatch
import importlib
import json
import re
import subprocess
import sys
from functools import cache
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from advisor.engine import kb_engine as engine
from advisor.pipeline.analysis import AnalysisOptions, AnalysisResult, run_analysis

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared"
SAMPLES = SHARED / "samples"
MAKE_MIN = SHARED / "bench" / "make_min_ascend_pt.py"
PEER_DATA = Path(__file__).parent / "data" / "peer"

# Knowledge-base modules of this repository. They are run even before pyproject.toml registers them, so the
# test does not depend on the installed entry points; a module that does not exist yet makes its rows fail.
KB_MODULES = ("aicpu", "transdata", "roofline", "ub_fusion", "aipp_fusion", "mish_leakyrelu", "operator", "schedule",
              "environment", "overall", "memory", "communication", "cluster")

# peer finding title -> advisor rule ids (globs) that cover it
COVERAGE: dict[str, tuple[str, ...]] = {
    "Environment Variable Issues": ("environment.*",),
    # the peer's Overall Summary (compute / communication / free split) is the report's `time` object: every report
    # opens with it (checked in check_covered); advisor's overall.* findings are only the buckets that cost time
    "Overall Summary": (),
    "Memory Operator Issues": ("memory.*",),
    "Byte Alignment Analysis": ("communication.byte-alignment",),
    "Bandwidth Contention Analysis": ("communication.bandwidth-contention",),
    "Packet Analysis": ("communication.small-packets",),
    "Communication Retransmission Analysis": ("communication.rdma-retransmission",),
    "slow rank": ("cluster.slow-rank", "cluster.spread"),
    "slow link": ("cluster.slow-link",),
    # the peer's bound classes are views of advisor's one op classification (advisor.toolkit.bound), reported by
    # the roofline knowledge base; the shape affinities are operator causes
    "Cube Operator Perf Analysis": ("operator.cube-affinity", "roofline.*"),
    "FA Operator Perf Analysis": ("operator.fa-affinity", "roofline.*"),
    "Vector Operator Perf Analysis": ("roofline.*",),
    "AI Core Frequency Issues": ("operator.ai-core-freq",),
    "Block Dim Issues": ("operator.block-dim",),
    "Operator No Bound Issues": ("roofline.*",),
    "Operator Dynamic Shape Issues": ("operator.dynamic-shape",),
    "AICPU Issues": ("aicpu.ops",),
    "Fusible Operator Analysis": ("schedule.fusible-ops",),
    # the peer titles its conjectured-GC finding "GC Analysis" too (description "Nearly no host tasks within ...")
    "GC Analysis": ("schedule.gc", "schedule.conjectured-gc"),
    "Slow Dataloader Issues": ("schedule.dataloader",),
    "Affinity API Issues": ("schedule.affinity-api",),
    "Synchronize Stream Issues": ("schedule.sync-stream",),
    "Operator Dispatch Issues": ("schedule.op-compile",),
    "SyncBatchNorm Issues": ("schedule.syncbn",),
}

# Where the peer is wrong: (peer data file stem, peer finding title) -> why. The test asserts advisor does not
# make the same claim (no finding of the covering rules) and, where stated, says so in the notes instead.
PEER_WRONG: dict[tuple[str, str], str] = {
    ("data__pytorch__text__level0__rank0_ascend_pt", "Operator Dynamic Shape Issues"):
        "kernel_details.csv has no OP State column; the peer then counts every op as dynamic (PEER.md section 9, "
        "bug 2). advisor says the state is unknown in the notes.",
    ("data__pytorch__text__level0__rank1_ascend_pt", "Operator Dynamic Shape Issues"):
        "same: no OP State column (PEER.md bug 2).",
    # torch_npu eager mode: OP State 'dynamic' is what its binary kernels (jit_compile=False, the setting the peer
    # itself recommends) look like; one recorded step cannot show shapes varying. advisor says so in the notes.
    ("data__pytorch__text__level1__rank0_ascend_pt", "Operator Dynamic Shape Issues"):
        "torch_npu eager binary kernels are dynamic-shape by design; no step shows shapes varying",
    ("data__pytorch__text__level2__rank0_ascend_pt", "Operator Dynamic Shape Issues"):
        "torch_npu eager binary kernels are dynamic-shape by design; no step shows shapes varying",
    ("data__pytorch__text__level2__rank1_ascend_pt", "Operator Dynamic Shape Issues"):
        "torch_npu eager binary kernels are dynamic-shape by design; no step shows shapes varying",
    ("st__level2__rank_0_ascend_pt", "Operator Dynamic Shape Issues"):
        "torch_npu eager binary kernels are dynamic-shape by design; no step shows shapes varying",
}

# Environment variables the peer flags where the value is in fact fine: variable -> why.
ENV_PEER_WRONG: dict[str, str] = {
    "ACLNN_CACHE_LIMIT": "the peer flags it when unset, but unset means the default of 10000 entries, which is "
                         "what its own rule asks for",
}

# Environment variables that only matter for dynamic-shape ops (the peer flags them whatever the ops are): advisor
# flags them when dynamic ops exist, says in the notes that they were not assessed when the profile has no OP
# State column, and stays quiet when every op is static.
ENV_NEEDS_DYNAMIC = ("HOST_CACHE_CAPACITY",)

# Ops the peer lists that advisor rightly leaves out: (data file stem, peer finding title, op) -> why. The test
# asserts advisor does not name them in the covering findings.
KEY_OP_WRONG: dict[tuple[str, str, str], str] = {
    ("min_fixture", "Operator No Bound Issues", "aclnnAdd_AddAiCore_Add"):
        "5 us tasks: advisor reports an op when its longest task exceeds no_bound.min_duration_us (20 us, the "
        "threshold the peer itself uses to raise the finding); shorter tasks are launch-latency bound and tuning "
        "does not shorten them",
    ("data__pytorch__db__level1__rank0_ascend_pt", "Operator No Bound Issues",
     "aclnnForeachAddListV2_ForeachAddListV2_ForeachAddList"):
        "aiv_mte2_ratio 0.97-0.99: the op is MTE2 bound. The peer reads the cube column aic_mte2_ratio (0) for this "
        "vector op (PEER.md section 9, bug 5)",
    ("data__pytorch__db__level1__rank0_ascend_pt", "Operator No Bound Issues",
     "aclnnForeachMulScalarV2_ForeachMulScalarV2_ForeachMulScalar"):
        "aiv_mte2_ratio 0.91: MTE2 bound; the peer reads aic_mte2_ratio (bug 5)",
}


def _kb_infos() -> list[engine.KBInfo]:
    known = {i.id for i in engine.discover()}
    extra = []
    for name in KB_MODULES:
        try:
            module = importlib.import_module(f"advisor.knowledge_bases.{name}")
        except ImportError:
            continue
        for cls in module.advisor_knowledge_bases():
            if cls.id not in known:
                known.add(cls.id)
                extra.append(engine.KBInfo(cls, name, "", ""))
    return extra


@cache
def analyze(path: str) -> AnalysisResult:
    return run_analysis(Path(path), options=AnalysisOptions(extra_kbs=_kb_infos()))


@pytest.fixture(scope="module")
def min_profile(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not MAKE_MIN.is_file():
        pytest.skip("../shared/bench/make_min_ascend_pt.py is not available")
    out = tmp_path_factory.mktemp("peer_min")
    subprocess.run([sys.executable, str(MAKE_MIN), str(out)], check=True, capture_output=True)
    (pt,) = out.glob("*_ascend_pt")
    return pt


def _peer(stem: str) -> dict[str, Any]:
    return json.loads((PEER_DATA / f"{stem}.json").read_text(encoding="utf-8"))


def _matching(result: AnalysisResult, patterns: tuple[str, ...]) -> list[Any]:
    """Findings of the covering rules, and symptoms of the covering rules that a root cause absorbed (the report
    lists those under their cause, with their ops and evidence)."""
    def hit(rule: str) -> bool:
        return any(fnmatch.fnmatchcase(rule, p) for p in patterns)

    out: list[Any] = []
    for f in result.findings:
        if hit(f.rule):
            out.append(f)
        out += [SimpleNamespace(rule=s["rule"], title=s["title"], ops=s["ops"], evidence=s["evidence"])
                for s in f.symptoms if hit(s["rule"])]
    # the report's notes say it too: advice with no (or an immaterial) measured saving, listed apart
    out += [SimpleNamespace(rule=n["rule"], title=n["title"], ops=n.get("ops", []), evidence={})
            for n in result.report.get("notes", []) if hit(n["rule"]) or any(hit(r) for r in n.get("symptoms", []))]
    return out


def _named_in(findings: list[Any]) -> set[str]:
    """Every op name the findings name: their ops and the first column of their evidence tables."""
    names: set[str] = set()
    for f in findings:
        names.update(f.ops)
        tab = f.evidence.get("table") if isinstance(f.evidence, dict) else None
        if isinstance(tab, dict):
            names.update(str(r[0]) for r in tab.get("rows", []) if r)
    return names


def key_ops(item: dict[str, Any]) -> list[str]:
    """The op names a peer finding lists in its detail sheet (none for findings about settings or events)."""
    detail = item.get("detail") or {}
    cols, rows = detail.get("columns") or [], detail.get("rows") or []
    if cols == ["Type", "Description"]:  # AI Core performance: "<op> Op shape: ..." lines
        return sorted({str(r[1]).split(" Op shape", 1)[0] for r in rows if " Op shape" in str(r[1])})
    for col in ("op_name", "Operator name"):
        if col in cols:
            i = cols.index(col)
            return sorted({str(r[i]) for r in rows})
    return []


# The peer's bound classes: advisor answers them with its one op classification (advisor.toolkit.bound). Every
# op the peer lists gets a verdict: named in a finding, at (or near) its roof -- nothing for tuning to recover,
# which the peer's "room for optimization" ignores -- or too light for the roofline to report (not among the ops
# covering its heavy_coverage of compute time, or recovering less than its min_saving_us).
BOUND_VIEWS = ("Cube Operator Perf Analysis", "FA Operator Perf Analysis", "Vector Operator Perf Analysis",
               "Operator No Bound Issues")


@cache
def _verdicts(source: str) -> dict[str, str]:
    """Op name -> why the roofline does not report it (``at its roof`` / ``light``), from the classification
    the analysis of ``source`` used."""
    from advisor import ingest
    from advisor.knowledge_bases.roofline import heavy_ops
    from advisor.toolkit import bound

    result = analyze(source)
    profile = ingest.load(Path(source))[0]
    b = bound.for_profile(profile, result.platform, result.rules.for_kb("bound"))
    heavy = set(heavy_ops(b, result.rules.for_kb("roofline"))["name"])
    light = float(result.rules.for_kb("roofline")["min_saving_us"])
    out = {}
    for row in b.itertuples(index=False):
        if row.at_roof:
            out[str(row.name)] = "at its roof"
        elif row.name not in heavy or row.recoverable_us < light:
            out[str(row.name)] = "light"
    return out


def check_covered(stem: str, result: AnalysisResult, item: dict[str, Any], source: str = "") -> None:
    title = item["title"]
    assert title in COVERAGE, f"no advisor rule is mapped to the peer finding {title!r}"
    if title == "Overall Summary":  # the report's time split, not a finding
        t = result.report["time"]
        assert t["window_us"] > 0 and t["steps"], f"{stem}: the report has no time split"
        assert t["compute_us"] + t["uncovered_communication_us"] + t["free_us"] == pytest.approx(t["window_us"],
                                                                                                 rel=1e-3)
        return
    found = _matching(result, COVERAGE[title])
    if title == "Environment Variable Issues":  # judged variable by variable
        check_env(result, item, found)
        return
    wrong = PEER_WRONG.get((stem, title))
    if wrong:
        assert not found, f"{stem}: advisor repeats the peer's mistake ({wrong}): {[f.title for f in found]}"
        return
    assert found, f"{stem}: peer reports {title!r}; advisor has no {COVERAGE[title]} finding " \
                  f"(advisor found {sorted({f.rule for f in result.findings})})"
    named = _named_in(found)
    wrong_ops = {op for (s, t, op) in KEY_OP_WRONG if (s, t) == (stem, title)}
    repeated = sorted(wrong_ops & named)
    assert not repeated, f"{stem}: {title}: advisor repeats the peer's mistake on {repeated}: " \
                         f"{[KEY_OP_WRONG[(stem, title, op)] for op in repeated]}"
    missing = [op for op in key_ops(item) if op not in named and op not in wrong_ops]
    if title in BOUND_VIEWS and source:
        verdicts = _verdicts(source)
        missing = [op for op in missing if op not in verdicts]
    assert not missing, f"{stem}: {title}: advisor does not name {missing} (it names {sorted(named)[:20]})"
    if title == "Affinity API Issues":
        apis = {str(f.evidence.get("api") or f.title.split(" ", 1)[0]) for f in found}  # notes: the title names it
        wanted = {str(r[0]) for r in item["detail"]["rows"]}
        assert wanted <= apis, f"{stem}: peer suggests {sorted(wanted - apis)}, advisor does not"


def check_env(result: AnalysisResult, item: dict[str, Any], found: list[Any]) -> None:
    flagged = {str(f.evidence.get("variable") or f.title.split("=", 1)[0]) for f in found}
    notes = " ".join(n for s in result.statuses for n in s.notes)
    for row in item["detail"]["rows"]:
        var = str(row[0])
        if var in ENV_PEER_WRONG:
            assert var not in flagged, f"advisor repeats the peer's mistake on {var}: {ENV_PEER_WRONG[var]}"
            continue
        if var in flagged:
            continue
        assert var in ENV_NEEDS_DYNAMIC, f"peer flags {var}; advisor does not"
        dynamic = bool(_matching(result, ("operator.dynamic-shape",)))
        unknown = "no OP State column" in notes
        assert (unknown and var in notes) or not (dynamic or unknown), \
            f"peer flags {var}: advisor must flag it when ops are dynamic, or note it when the op state is unknown"


# ---------------------------------------------------------------------------------------------------------
# (1) the minimal profile: the peer's 19 findings
# ---------------------------------------------------------------------------------------------------------
MIN_PEER = _peer("min_fixture") if (PEER_DATA / "min_fixture.json").is_file() else {"findings": []}


def test_min_fixture_peer_data_has_19_findings() -> None:
    assert len(MIN_PEER["findings"]) == 19
    assert all(item["title"] in COVERAGE for item in MIN_PEER["findings"])


@pytest.mark.parametrize("item", MIN_PEER["findings"], ids=[i["title"] for i in MIN_PEER["findings"]])
def test_min_fixture_covers_peer_finding(min_profile: Path, item: dict[str, Any]) -> None:
    check_covered("min_fixture", analyze(str(min_profile)), item, str(min_profile))


def test_min_fixture_ranked_by_saving(min_profile: Path) -> None:
    result = analyze(str(min_profile))
    savings = [f.estimated_saving_us for f in result.findings]
    assert savings == sorted(savings, reverse=True)
    # the host stalls lead (the peer lists the 25 ms DataLoader stall 15th of 19): the step (ProfilerStep#1) holds
    # 38.7 ms of free time -- synchronous launches (ASCEND_LAUNCH_BLOCKING=1) and the DataLoader claim the most of
    # it, and the idle device folds under the host cause that claims the most
    free = result.report["time"]["free_us"]
    assert {"environment.debug", "schedule.dataloader"} == {f.rule for f in result.findings[:2]}
    schedule = [f for f in result.findings if f.kb == "schedule"]
    assert schedule[0].rule == "schedule.dataloader"
    assert sum(f.estimated_saving_us for f in schedule if "(free time)" in f.saving_by_op) <= free + 1e-6
    assert "overall.free-time" in {s["rule"] for s in result.findings[0].symptoms}


# ---------------------------------------------------------------------------------------------------------
# (2) every *_ascend_pt sample: the peer's recorded findings
# ---------------------------------------------------------------------------------------------------------
def _sample_cases() -> list[tuple[str, dict[str, Any]]]:
    cases = []
    for path in sorted(PEER_DATA.glob("*.json")):
        if path.stem == "min_fixture":
            continue
        data = json.loads(path.read_text(encoding="utf-8"))
        for item in data["findings"]:
            cases.append((path.stem, item))
    return cases


SAMPLE_CASES = _sample_cases()


def test_every_sample_has_peer_data() -> None:
    if not SAMPLES.is_dir():
        pytest.skip("../shared/samples is not available")
    dirs = sorted(p for p in SAMPLES.rglob("*_ascend_pt") if p.is_dir())
    assert dirs, "no *_ascend_pt sample"
    recorded = {_peer(p.stem)["sample"] for p in PEER_DATA.glob("*.json") if p.stem != "min_fixture"}
    assert {str(d.relative_to(SAMPLES)) for d in dirs} == recorded


@pytest.mark.parametrize(("stem", "item"), SAMPLE_CASES, ids=[f"{s}:{i['title']}" for s, i in SAMPLE_CASES])
def test_sample_covers_peer_finding(stem: str, item: dict[str, Any]) -> None:
    sample = SAMPLES / _peer(stem)["sample"]
    if not sample.is_dir():
        pytest.skip(f"{sample} is not available")
    check_covered(stem, analyze(str(sample)), item, str(sample))


@pytest.mark.parametrize("key", sorted(PEER_WRONG), ids=[f"{s}:{t}" for s, t in sorted(PEER_WRONG)])
def test_peer_mistake_is_explained_in_notes(key: tuple[str, str]) -> None:
    stem, title = key
    sample = SAMPLES / _peer(stem)["sample"]
    if not sample.is_dir():
        pytest.skip(f"{sample} is not available")
    result = analyze(str(sample))
    notes = " ".join(n for s in result.statuses for n in s.notes)
    if title == "Operator Dynamic Shape Issues":
        assert re.search(r"no OP State column|binary kernels \(jit_compile=False\)", notes), notes
