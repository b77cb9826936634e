"""Engine: plugin discovery with load errors captured, ok/skipped/failed statuses, time limits; waivers (score).

Test knowledge bases are registered directly on a Discovery (no dependency on the built-in KBs)."""

from __future__ import annotations

import importlib.metadata
import time
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pandas as pd
import pytest

from advisor import hookimpl
from advisor.common.errors import UsageError
from advisor.config.loader import EffectiveRules, Waiver
from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.ingest.normalize import finalize_ops
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc
from advisor.model import Meta, Profile
from advisor.pipeline import score


def make_profile(names: list[str], durations: list[float]) -> Profile:
    starts = [sum(durations[:i]) for i in range(len(durations))]
    ops = finalize_ops(pd.DataFrame({"name": names, "type": ["MatMul"] * len(names), "core": "AI_CORE",
                                     "start_us": starts, "duration_us": durations}))
    return Profile(ops=ops, meta=Meta(source="mem"))


class SlowOps(KnowledgeBase):
    """Reports every op longer than ``limit_us``; saving = time above it."""

    id = "slow-ops"
    title = "Slow ops"
    version = "1.2.3"
    rules_file = "slow-ops"
    rules = (RuleDoc("slow-ops.long", "Long ops", "finds long ops", "they are slow", "make them faster",
                     thresholds=("limit_us",)),)

    def analyze(self, ctx: AnalysisContext) -> Iterator[Finding]:
        ops = ctx.profile.ops
        long = ops[ops["duration_us"] > ctx.rules["limit_us"]]
        for name, dur in zip(long["name"], long["duration_us"], strict=True):
            yield ctx.finding("slow-ops.long", f"{name} is long", "major", [str(name)], {"us": dur},
                              float(dur) - ctx.rules["limit_us"], "time above limit", "split it")


class NeedsGraph(KnowledgeBase):
    id = "needs-graph"
    title = "Needs a graph"
    requires = ("ops", "graph")

    def analyze(self, ctx: AnalysisContext) -> list[Finding]:
        raise AssertionError("must not run without a graph")


class Broken(KnowledgeBase):
    id = "broken"
    title = "Raises"

    def analyze(self, ctx: AnalysisContext) -> list[Finding]:
        return {}["missing"]  # KeyError


class Sleepy(KnowledgeBase):
    id = "sleepy"
    title = "Too slow"
    time_limit_s = 0.3

    def analyze(self, ctx: AnalysisContext) -> list[Finding]:
        time.sleep(5)
        return []


class YieldsJunk(KnowledgeBase):
    id = "junk"
    title = "Yields a dict"

    def analyze(self, ctx: AnalysisContext) -> list[Finding]:
        return [{"rule": "x"}]  # type: ignore[list-item]


class FutureApi(KnowledgeBase):
    id = "future-api"
    title = "Written for plugin API 2"
    api_version = "2.0"

    def analyze(self, ctx: AnalysisContext) -> list[Finding]:
        return []


class Mutator(KnowledgeBase):
    id = "mutator"
    title = "Changes its rules"
    rules_file = "slow-ops"

    def analyze(self, ctx: AnalysisContext) -> list[Finding]:
        ctx.rules["limit_us"] = 1e9  # type: ignore[index]
        ctx.note("changed my copy of the rules")
        return []


def plugin(*classes: type) -> SimpleNamespace:
    @hookimpl
    def advisor_knowledge_bases() -> list[type]:
        return list(classes)

    return SimpleNamespace(advisor_knowledge_bases=advisor_knowledge_bases)


def rules_with(limit: float = 100.0) -> EffectiveRules:
    eff = EffectiveRules()
    eff.values["slow-ops"] = {"limit_us": limit}
    eff.sources["slow-ops"] = {"limit_us": "test"}
    return eff


def infos_for(*classes: type) -> list[engine.KBInfo]:
    found = engine.find_plugins(entry_points=False)
    found.register(plugin(*classes), name="test-plugin")
    return engine.discover(found)


def test_discover_registers_test_plugin_sorted_by_id() -> None:
    found = engine.find_plugins(entry_points=False)
    found.register(plugin(SlowOps, Broken), name="test-plugin")
    infos = engine.discover(found)
    assert [i.id for i in infos] == ["broken", "slow-ops"]
    assert all(i.plugin == "test-plugin" for i in infos)
    assert found.errors == {}


def test_discovery_keeps_no_state_between_calls() -> None:
    """Each discovery returns its own errors: a broken plugin found once is not reported by the next run."""
    broken = engine.find_plugins(entry_points=False)
    broken.register(plugin(int), name="junk")
    engine.discover(broken)
    assert "not a KnowledgeBase subclass" in broken.errors["junk"]
    assert engine.find_plugins(entry_points=False).errors == {}


def test_ok_skipped_failed_and_the_others_still_run() -> None:
    infos = infos_for(SlowOps, NeedsGraph, Broken, Sleepy, YieldsJunk, FutureApi)
    profile = make_profile(["a", "b", "c"], [50.0, 250.0, 400.0])
    started = time.perf_counter()
    findings, statuses = engine.run(infos, profile, None, rules_with(100.0), {})
    elapsed = time.perf_counter() - started
    by_id = {s.id: s for s in statuses}

    assert by_id["slow-ops"].status == "ok" and by_id["slow-ops"].findings == 2
    assert sorted(f.ops[0] for f in findings) == ["b", "c"]
    assert {f.kb for f in findings} == {"slow-ops"}
    assert sum(f.estimated_saving_us for f in findings) == pytest.approx(150.0 + 300.0)

    assert by_id["needs-graph"].status == "skipped"
    assert "graph" in by_id["needs-graph"].reason

    assert by_id["broken"].status == "failed"
    assert "KeyError" in by_id["broken"].reason and "test_engine.py" in by_id["broken"].reason

    assert by_id["sleepy"].status == "failed"
    assert "time limit of 0.3 s" in by_id["sleepy"].reason
    assert elapsed < 3.0, "a KB past its time limit must not hold up the run"

    assert by_id["junk"].status == "failed" and "not Finding" in by_id["junk"].reason
    assert by_id["future-api"].status == "failed" and "plugin API 2.0" in by_id["future-api"].reason


def test_global_time_limit_overrides_the_kb_one() -> None:
    infos = infos_for(Sleepy)
    _, statuses = engine.run(infos, make_profile(["a"], [1.0]), None, rules_with(), {}, time_limit_s=0.1)
    assert statuses[0].status == "failed" and "0.1 s" in statuses[0].reason


def test_missing_rules_file_fails_the_kb_with_a_reason() -> None:
    _, statuses = engine.run(infos_for(SlowOps), make_profile(["a"], [1.0]), None, EffectiveRules(), {})
    assert statuses[0].status == "failed"
    assert "rules file 'slow-ops'" in statuses[0].reason


def test_each_kb_gets_its_own_copy_of_the_rules() -> None:
    rules = rules_with(100.0)
    infos = infos_for(Mutator, SlowOps)  # mutator runs first (sorted by id)
    findings, statuses = engine.run(infos, make_profile(["a", "b"], [50.0, 250.0]), None, rules, {})
    assert rules.values["slow-ops"]["limit_us"] == 100.0
    assert [f.ops for f in findings] == [["b"]]
    assert next(s for s in statuses if s.id == "mutator").notes == ["changed my copy of the rules"]


def test_rank_is_stamped_on_findings() -> None:
    profile = make_profile(["a"], [500.0])
    profile.meta.rank = 3
    findings, _ = engine.run(infos_for(SlowOps), profile, None, rules_with(), {})
    assert findings[0].rank == 3


def test_api_versions() -> None:
    assert engine.api_mismatch("1") is None
    assert engine.api_mismatch("1.0") is None
    assert "plugin API 1.9" in (engine.api_mismatch("1.9") or "")
    assert engine.api_mismatch("2") is not None
    assert "not MAJOR" in (engine.api_mismatch("one") or "")


def test_hook_errors_duplicates_and_invalid_classes_are_recorded_not_fatal() -> None:
    class NoId(KnowledgeBase):
        def analyze(self, ctx: AnalysisContext) -> list[Finding]:
            return []

    class BadRequires(SlowOps):
        id = "bad-requires"
        requires = ("opz",)

    class Dup(SlowOps):
        pass

    @hookimpl
    def advisor_knowledge_bases() -> list[type]:
        raise RuntimeError("boom")

    found = engine.find_plugins(entry_points=False)
    found.register(plugin(SlowOps), name="a-good")
    found.register(plugin(Dup, NoId, BadRequires, int), name="b-bad")
    found.register(SimpleNamespace(advisor_knowledge_bases=advisor_knowledge_bases), name="c-raises")
    infos = engine.discover(found)
    assert [i.id for i in infos] == ["slow-ops"]
    assert infos[0].plugin == "a-good"
    errors = found.errors
    assert "already provided by a-good" in errors["b-bad"]
    assert "kebab-case" in errors["b-bad"]
    assert "'opz'" in errors["b-bad"]
    assert "not a KnowledgeBase subclass" in errors["b-bad"]
    assert "raised RuntimeError: boom" in errors["c-raises"]


def test_entry_point_that_fails_to_import_is_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    good = importlib.metadata.EntryPoint("good", "tests.test_engine:GOOD_PLUGIN", engine.ENTRY_POINT_GROUP)
    bad = importlib.metadata.EntryPoint("bad", "no_such_module_xyz", engine.ENTRY_POINT_GROUP)
    twin = importlib.metadata.EntryPoint("good", "tests.test_engine:OTHER_PLUGIN", engine.ENTRY_POINT_GROUP)
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: [bad, good, twin])
    found = engine.find_plugins()
    assert "cannot import no_such_module_xyz" in found.errors["bad"]
    assert "No module named 'no_such_module_xyz'" in found.errors["bad"]
    assert "entry point name 'good' is already used" in found.errors["good (another package)"]
    assert [i.id for i in engine.discover(found)] == ["slow-ops"]


GOOD_PLUGIN = plugin(SlowOps)
OTHER_PLUGIN = plugin(Broken)
UNMARKED_PLUGIN = SimpleNamespace(advisor_knowledge_bases=lambda: [Broken])
NO_HOOKS_PLUGIN = SimpleNamespace(something_else=lambda: None)


def test_entry_points_with_unmarked_or_missing_hooks_are_recorded(monkeypatch: pytest.MonkeyPatch) -> None:
    eps = [importlib.metadata.EntryPoint(name, f"tests.test_engine:{attr}", engine.ENTRY_POINT_GROUP)
           for name, attr in (("unmarked", "UNMARKED_PLUGIN"), ("nohooks", "NO_HOOKS_PLUGIN"))]
    monkeypatch.setattr(importlib.metadata, "entry_points", lambda group=None: eps)
    found = engine.find_plugins()
    assert "advisor_knowledge_bases is not marked with @hookimpl" in found.errors["unmarked"]
    assert "implements none of the advisor hooks" in found.errors["nohooks"]
    assert engine.discover(found) == []


def test_rules_dirs_from_plugins(tmp_path: Path) -> None:
    @hookimpl
    def advisor_rules_dirs() -> list[str]:
        return [str(tmp_path), str(tmp_path / "missing")]

    found = engine.find_plugins(entry_points=False)
    found.register(SimpleNamespace(advisor_rules_dirs=advisor_rules_dirs), name="dirs")
    dirs = engine.rules_dirs(found)
    assert dirs[1:] == [tmp_path]
    assert dirs[0].name == "rules"
    assert "not a directory" in found.errors["dirs"]


def test_select_only_skip_and_unknown_ids() -> None:
    infos = infos_for(SlowOps, Broken, Sleepy)
    assert [i.id for i in engine.select(infos, only=["broken"])] == ["broken"]
    assert [i.id for i in engine.select(infos, skip=["broken"])] == ["sleepy", "slow-ops"]
    with pytest.raises(UsageError, match="unknown knowledge base 'nope'"):
        engine.select(infos, only=["nope"])


# ---------------------------------------------------------------------------------------------------------
# waivers
# ---------------------------------------------------------------------------------------------------------
def finding(rule: str, ops: list[str], saving: float, by_op: dict[str, float] | None = None) -> Finding:
    return Finding("kb", rule, "t", "major", ops, {}, saving, "b", "r", saving_by_op=dict(by_op or {}))


def waiver(rule: str, ops: str = "*") -> Waiver:
    return Waiver(rule, ops, "known", "my.yaml")


def test_waiver_removes_a_finding_whose_ops_are_all_waived() -> None:
    f = finding("transdata.count", ["trans_TransData_01", "trans_TransData_02"], 40.0)
    kept, waived = score.apply_waivers([f], [waiver("transdata.*", "trans_TransData_0*")])
    assert kept == []
    assert len(waived) == 1
    d = waived[0].to_dict()
    assert d["ops"] == ["trans_TransData_01", "trans_TransData_02"]
    assert d["estimated_saving_us"] == 40.0
    assert d["waiver"] == {"rule": "transdata.*", "ops": "trans_TransData_0*", "reason": "known",
                           "source": "my.yaml"}


def test_partial_waiver_keeps_the_rest_with_its_share_of_the_saving() -> None:
    f = finding("r.x", ["a1", "b1", "b2"], 100.0, {"a1": 70.0, "b1": 20.0, "b2": 10.0})
    kept, waived = score.apply_waivers([f], [waiver("r.x", "a*")])
    assert [k.ops for k in kept] == [["b1", "b2"]]
    assert kept[0].estimated_saving_us == pytest.approx(30.0)
    assert kept[0].saving_by_op == {"b1": 20.0, "b2": 10.0}
    assert waived[0].ops == ["a1"] and waived[0].to_dict()["estimated_saving_us"] == pytest.approx(70.0)
    # the input finding is untouched
    assert f.ops == ["a1", "b1", "b2"] and f.estimated_saving_us == 100.0


def test_even_split_without_saving_by_op_and_one_entry_per_waiver() -> None:
    f = finding("r.x", ["a1", "b1", "c1", "d1"], 40.0)
    kept, waived = score.apply_waivers([f], [waiver("r.*", "a*"), waiver("r.x", "b*")])
    assert kept[0].ops == ["c1", "d1"] and kept[0].estimated_saving_us == pytest.approx(20.0)
    assert [(w.waiver.ops, w.ops, w.saving_us) for w in waived] == [("a*", ["a1"], 10.0), ("b*", ["b1"], 10.0)]


def test_findings_without_ops_are_waived_only_for_all_ops() -> None:
    f = finding("r.global", [], 5.0)
    kept, waived = score.apply_waivers([f], [waiver("r.global", "x*")])
    assert kept == [f] and waived == []
    kept, waived = score.apply_waivers([f], [waiver("r.global")])
    assert kept == [] and waived[0].to_dict()["ops"] == []


def test_other_rules_are_not_waived() -> None:
    f = finding("other.rule", ["a"], 1.0)
    kept, waived = score.apply_waivers([f], [waiver("transdata.*")])
    assert kept == [f] and waived == []
