"""Former rule ids (rules/aliases.yaml) keep working where ids are matched: waivers, advisor compare, advisor explain."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.compare.runs import match_findings, rule_deltas
from advisor.config import rule_aliases
from advisor.config.loader import builtin_aliases
from advisor.engine import kb_engine as engine
from advisor.findings import Finding
from advisor.pipeline import score
from advisor.testing import load_rules


@pytest.fixture(scope="module")
def known_rules() -> set[str]:
    return {r.id for info in engine.discover(engine.find_plugins()) for r in info.cls.rules}


def test_every_alias_points_at_rules_that_exist_and_no_current_id_is_an_alias(known_rules: set[str]) -> None:
    aliases = builtin_aliases()
    assert aliases["operator.no-bound"] == ("roofline.no-bound",)  # renamed when the op classification moved
    assert rule_aliases.check(aliases, known_rules) == []


def test_the_alias_check_names_a_dangling_target_and_a_live_former_id(known_rules: set[str]) -> None:
    problems = rule_aliases.check({"roofline.no-bound": ("x.y",), "old.id": ("roofline.gone",)}, known_rules)
    assert problems == ["roofline.no-bound: still the id of a rule, cannot be an alias",
                        "roofline.no-bound: names x.y, which no knowledge base declares",
                        "old.id: names roofline.gone, which no knowledge base declares"]


def _finding(rule: str, ops: list[str], saving: float = 30.0) -> Finding:
    return Finding(rule.split(".")[0], rule, "t", "major", ops, {}, saving, "b", "r")


def test_a_waiver_naming_a_former_id_waives_the_current_rule_and_says_so(known_rules: set[str]) -> None:
    eff = load_rules(override={"waivers": [{"rule": "operator.no-bound", "ops": "MatMul*", "reason": "known"}]})
    (w,) = eff.waivers
    assert w.renamed_to == ("roofline.no-bound",)
    findings = [_finding("roofline.no-bound", ["MatMul_1", "Add_2"]), _finding("roofline.memory-bound", ["MatMul_1"])]
    kept, waived = score.apply_waivers(findings, eff.waivers)
    assert [(x.finding.rule, x.ops) for x in waived] == [("roofline.no-bound", ["MatMul_1"])]
    assert [(f.rule, f.ops) for f in kept] == [("roofline.no-bound", ["Add_2"]), ("roofline.memory-bound", ["MatMul_1"])]
    problems = score.waiver_problems(eff.waivers, waived, [f.rule for f in findings], known_rules)
    assert len(problems) == 1 and "names a former rule id: it waives roofline.no-bound" in problems[0]


def test_a_waiver_glob_over_former_ids_waives_every_rule_they_became() -> None:
    eff = load_rules(override={"waivers": [{"rule": "operator.*-bound", "reason": "known"}]})
    (w,) = eff.waivers
    assert set(w.renamed_to) == {"roofline.no-bound", "roofline.compute-bound", "roofline.memory-bound"}
    assert w.matches_rule("roofline.compute-bound") and not w.matches_rule("roofline.latency-bound")


def test_without_an_alias_a_waiver_of_an_unknown_id_matches_nothing(known_rules: set[str]) -> None:
    eff = load_rules(override={"waivers": [{"rule": "operator.never-was", "reason": "known"}]})
    assert eff.waivers[0].renamed_to == ()
    assert "names no rule" in score.waiver_problems(eff.waivers, [], [], known_rules)[0]


def _f(rule: str, ops: list[str], saving: float = 10.0) -> dict:
    return {"id": f"{rule}:{'-'.join(ops)}", "kb": rule.split(".")[0], "rule": rule, "title": rule,
            "severity": "major", "ops": ops, "estimated_saving_us": saving}


def test_compare_matches_a_baseline_finding_of_a_renamed_rule() -> None:
    base = [_f("operator.no-bound", ["a", "b", "c"], 40.0), _f("operator.cube-bound", ["m1", "m2"], 20.0),
            _f("operator.block-dim", ["x"], 5.0)]
    new = [_f("roofline.no-bound", ["a", "b", "c", "d"], 30.0), _f("roofline.memory-bound", ["m1", "m2"], 25.0),
           _f("operator.block-dim", ["y"], 5.0)]
    m = match_findings(base, new)
    assert {(u["rule"], u.get("base_rule"), u["match"]) for u in m["unchanged"]} == {
        ("roofline.no-bound", "operator.no-bound", "overlap"), ("roofline.memory-bound", "operator.cube-bound", "rule+ops")}
    assert [f["rule"] for f in m["fixed"]] == ["operator.block-dim"] and [f["rule"] for f in m["new"]] == \
        ["operator.block-dim"]
    # without the alias table the renamed rule's findings read as fixed and new
    plain = match_findings(base, new, aliases={})
    assert len(plain["unchanged"]) == 0 and len(plain["fixed"]) == 3


def test_compare_counts_a_renamed_rule_under_its_current_id() -> None:
    rows = {r["rule"]: r for r in rule_deltas([_f("operator.no-bound", ["a"], 40.0)], [_f("roofline.no-bound", ["a"], 30.0)])}
    assert set(rows) == {"roofline.no-bound"}
    assert rows["roofline.no-bound"]["kb"] == "roofline"
    assert (rows["roofline.no-bound"]["base_findings"], rows["roofline.no-bound"]["saving_delta_us"]) == (1, -10.0)
    # a split rule has no single current id: it keeps its own row
    split = {r["rule"] for r in rule_deltas([_f("operator.cube-bound", ["m"])], [_f("roofline.memory-bound", ["m"])])}
    assert split == {"operator.cube-bound", "roofline.memory-bound"}


def test_explain_a_former_id_shows_the_current_rule_and_says_it_was_renamed() -> None:
    res = CliRunner().invoke(main, ["explain", "operator.no-bound"])
    assert res.exit_code == 0, res.output
    first, _, rest = res.output.partition("\n")
    assert first.startswith("operator.no-bound was renamed: it is now roofline.no-bound")
    assert rest.lstrip().startswith("roofline.no-bound: Heavy ops with no clear bound")
    res = CliRunner().invoke(main, ["explain", "operator.cube-bound", "--format", "json"])
    data = json.loads(res.output)
    assert data["renamed"]["to"] == ["roofline.compute-bound", "roofline.memory-bound"]
    assert [r["id"] for r in data["rules"]] == ["roofline.compute-bound", "roofline.memory-bound"]


def test_explain_an_unknown_id_is_still_a_usage_error() -> None:
    res = CliRunner().invoke(main, ["explain", "operator.never-was"])
    assert res.exit_code == 2 and "no rule or knowledge base 'operator.never-was'" in res.output


def test_a_pyproject_waiver_naming_a_former_id_resolves_too(tmp_path) -> None:
    from advisor.config.loader import builtin_rules_dir, load_effective_rules

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[[tool.advisor.waivers]]\nrule = "operator.vector-bound"\nreason = "known"\n', "utf-8")
    (w,) = load_effective_rules([builtin_rules_dir()], pyproject=pyproject).waivers
    assert w.renamed_to == ("roofline.memory-bound", "roofline.no-bound")
    assert w.matches_rule("roofline.no-bound") and not w.matches_rule("roofline.compute-bound")
