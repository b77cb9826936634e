"""The public plugin kit (``advisor.testing``) and the checked parts of the plugin contract (``Fix.kind``).

A plugin author's test relies on these: a profile built from rows looks like an ingested one, ``run_kb`` runs a
knowledge base exactly as ``advisor analyze`` does (rules validated, platform resolved, status checked), and the
helpers fail with a message that says what was found instead.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

import advisor
from advisor.common.errors import RulesError
from advisor.findings import FIX_KINDS, Finding, Fix
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.testing import (
    finding,
    findings_of,
    installed,
    load_rules,
    make_profile,
    no_finding,
    rank_data,
    run_kb,
)

LONG = RuleDoc(id="demo-long.long-op", title="Ops longer than {max_op_us} us", what="w", why="y", how_to_fix="h",
               thresholds=("max_op_us",))


class LongOps(KnowledgeBase):
    """A knowledge base reading a threshold from a rules file of its own: the built-in ``overall`` file cannot
    hold ``max_op_us``, so the tests give it one through ``rules=``."""

    id = "demo-long"
    version = "0.1.0"
    api_version = "1.1"
    rules_file = "demo-long"

    @rule(LONG)
    def long_ops(self, ctx: AnalysisContext) -> Iterator[Finding]:
        limit = float(ctx.rules["max_op_us"])
        ops = ctx.profile.ops
        hit = ops[ops["duration_us"] > limit]
        if len(hit):
            doc = self.rule(LONG.id).render(ctx.rules)
            yield ctx.finding(LONG.id, doc.title, "minor", [str(n) for n in hit["name"]], {},
                              float((hit["duration_us"] - limit).sum()), "time above the limit", doc.how_to_fix)


class BadFix(KnowledgeBase):
    id = "bad-fix"
    api_version = "1.1"

    @rule(RuleDoc(id="bad-fix.x", title="t", what="w", why="y", how_to_fix="h"))
    def check(self, ctx: AnalysisContext) -> Iterator[Finding]:
        yield ctx.finding("bad-fix.x", "t", "minor", [], {}, 0.0, "b", "r", fix=Fix("script", "run it"))


class ClusterCount(KnowledgeBase):
    id = "cluster-count"
    api_version = "1.1"
    scope = "cluster"
    requires = ("cluster",)

    @rule(RuleDoc(id="cluster-count.ranks", title="t", what="w", why="y", how_to_fix="h"))
    def count(self, ctx: AnalysisContext) -> Iterator[Finding]:
        ranks = ctx.cluster or []
        busy = {r.rank: r.busy_us for r in ranks}
        yield ctx.finding("cluster-count.ranks", f"{len(ranks)} ranks", "info", [], {"busy_us": busy}, 0.0, "b",
                          "r")


@pytest.fixture
def rules_dir(tmp_path):  # type: ignore[no-untyped-def]
    d = tmp_path / "rules"
    (d / "schema").mkdir(parents=True)
    (d / "demo-long.yaml").write_text("max_op_us: 100\n", encoding="utf-8")
    schema = {"type": "object", "required": ["max_op_us"], "additionalProperties": False,
              "properties": {"max_op_us": {"type": "number", "exclusiveMinimum": 0}}}
    (d / "schema" / "demo-long.schema.json").write_text(json.dumps(schema), encoding="utf-8")
    return d


def test_make_profile_lays_rows_back_to_back_and_completes_the_table() -> None:
    p = make_profile([{"name": "a", "type": "MatMul", "duration_us": 10.0},
                      {"name": "b", "type": "Add", "duration_us": 5.0, "core": "AI_VECTOR_CORE"}],
                     chip="Ascend910B2", context="torch-eager", rank=3)
    assert list(p.ops["start_us"]) == [0.0, 11.0]
    assert list(p.ops["core"].astype(str)) == ["AI_CORE", "AI_VECTOR_CORE"]
    assert p.ops["mac_ratio"].isna().all()  # an absent metric is NaN, never 0
    assert (p.meta.chip, p.meta.context, p.meta.rank) == ("Ascend910B2", "torch-eager", 3)
    assert p.time.window_us == pytest.approx(16.0)  # the device's active span: no step recorded
    with pytest.raises(ValueError, match="unknown table 'opz'"):
        make_profile([], tables={"opz": []})


def test_run_kb_uses_the_rules_file_and_an_override_changes_the_prose(rules_dir) -> None:  # type: ignore[no-untyped-def]
    profile = make_profile([{"name": "slow", "type": "MatMul", "duration_us": 150.0},
                            {"name": "fast", "type": "Add", "duration_us": 60.0}])
    findings, _ = run_kb(LongOps, profile, rules=rules_dir)
    f = finding(findings, LONG.id)
    assert f.ops == ["slow"] and f.estimated_saving_us == pytest.approx(50.0) and f.kb == "demo-long"
    assert f.title == "Ops longer than 100 us"
    findings, _ = run_kb(LongOps, profile, rules=rules_dir, override={"max_op_us": 50})
    f = finding(findings, LONG.id)
    assert f.ops == ["slow", "fast"] and f.title == "Ops longer than 50 us"
    with pytest.raises(RulesError):  # overrides are validated against the schema, as a user's are
        run_kb(LongOps, profile, rules=rules_dir, override={"max_op_us": -1})


def test_load_rules_takes_an_override_file_or_its_content(rules_dir, tmp_path: Path) -> None:  # type: ignore[no-untyped-def]
    layer = {"rules": {"demo-long": {"max_op_us": 40}}, "chip": "Ascend910B2"}
    as_data = load_rules(rules_dir, override=layer)
    (tmp_path / "over.yaml").write_text(json.dumps(layer), encoding="utf-8")  # JSON is YAML
    as_file = load_rules(rules_dir, override=tmp_path / "over.yaml")
    for eff in (as_data, as_file):
        assert eff.for_kb("demo-long")["max_op_us"] == 40 and eff.platform_overrides["soc"] == "Ascend910B2"
        assert eff.for_kb("overall") == load_rules().for_kb("overall")
    with pytest.raises(RulesError, match="max_op_us"):  # validated against the KB's schema, as a user's file is
        load_rules(rules_dir, override={"rules": {"demo-long": {"max_op_us": -1}}})
    with pytest.raises(RulesError, match="unknown rules file"):
        load_rules(override={"rules": {"demo-long": {"max_op_us": 40}}})


def test_run_kb_reports_the_status_it_did_not_expect(rules_dir) -> None:  # type: ignore[no-untyped-def]
    empty = make_profile([])
    with pytest.raises(AssertionError, match=r"demo-long skipped: needs ops .*\(expected ok\)"):
        run_kb(LongOps, empty, rules=rules_dir)
    assert run_kb(LongOps, empty, rules=rules_dir, expect="skipped") == ([], [])
    with pytest.raises(AssertionError, match="rules file 'demo-long' was not found"):
        run_kb(LongOps, make_profile([{"name": "a", "type": "Add", "duration_us": 1.0}]))


def test_finding_helpers_say_what_was_found() -> None:
    fs = [Finding("k", "k.a", "t1", "minor", [], {}, 1.0, "b", "r"),
          Finding("k", "k.a", "t2", "minor", [], {}, 1.0, "b", "r")]
    assert len(findings_of(fs, "k.a")) == 2
    with pytest.raises(AssertionError, match=r"expected one finding of k.a, got 2 \(rules found: k.a\)"):
        finding(fs, "k.a")
    with pytest.raises(AssertionError, match=r"got 0 \(rules found: k.a\)"):
        finding(fs, "k.b")
    no_finding(fs, "k.b")
    with pytest.raises(AssertionError, match="t1; t2"):
        no_finding(fs, "k.a")


def test_cluster_scope_kb_gets_one_rank_data_per_rank() -> None:
    ranks = [rank_data(make_profile([{"name": "mm", "type": "MatMul", "duration_us": d}], rank=r))
             for r, d in ((0, 100.0), (1, 250.0))]
    assert [r.rank for r in ranks] == [0, 1] and ranks[1].time.window_us == pytest.approx(250.0)
    findings, _ = run_kb(ClusterCount, cluster=ranks)
    assert finding(findings, "cluster-count.ranks").evidence["busy_us"] == {0: 100.0, 1: 250.0}


def test_fix_kind_is_checked_in_code_and_in_the_report_schema() -> None:
    with pytest.raises(ValueError, match="fix kind 'script' is not one of fusion-switch"):
        Fix("script", "run it")
    schema = json.loads((Path(advisor.__file__).parent / "schemas" / "report.schema.json").read_text("utf-8"))
    assert tuple(_enum_of_fix_kind(schema)) == FIX_KINDS
    # a knowledge base that makes an undocumented Fix fails with the reason; the others are not affected
    with pytest.raises(AssertionError, match="bad-fix failed: raised ValueError: fix kind 'script'"):
        run_kb(BadFix, make_profile([{"name": "a", "type": "Add", "duration_us": 1.0}]))


def _enum_of_fix_kind(node: object) -> list[str]:
    """The ``enum`` of the report schema's ``fix.kind``, wherever the schema defines it."""
    if isinstance(node, dict):
        fix = node.get("properties", {}).get("fix") if isinstance(node.get("properties"), dict) else None
        if isinstance(fix, dict):
            for option in fix.get("oneOf", []):
                kind = option.get("properties", {}).get("kind", {})
                if "enum" in kind:
                    return list(kind["enum"])
        for v in node.values():
            found = _enum_of_fix_kind(v)
            if found:
                return found
    if isinstance(node, list):
        for v in node:
            found = _enum_of_fix_kind(v)
            if found:
                return found
    return []


def test_installed_lists_the_built_in_knowledge_bases_as_kb_list_does() -> None:
    found = installed()
    assert found["transdata"] == "ok" and found["cluster"] == "ok"
    assert all(status == "ok" or status.startswith("failed to load: ") for status in found.values())
