"""Roofline and operator on labeled transformer scenarios (tests/scenarios/cases_operator.py): each injected
problem is one root cause named on its ops, with a saving within 25 % of what it can realistically recover; a
clean, well-tuned model gets no finding."""

from __future__ import annotations

import pytest

from advisor.knowledge_bases.operator import OperatorKB
from advisor.knowledge_bases.roofline import RooflineKB
from advisor.pipeline import hierarchy
from tests.scenarios import cases_b, cases_operator

ROLES = {r.id: r.role for kb in (RooflineKB, OperatorKB) for r in kb.rules}
MECHANISMS = hierarchy.mechanisms_of(r for kb in (RooflineKB, OperatorKB) for r in kb.rules)



@pytest.mark.parametrize("make", cases_operator.SCENARIOS, ids=lambda f: f.__name__)
def test_each_injected_problem_is_named_on_its_ops(make, rules):
    sc = make()
    findings, statuses = cases_b.run_kbs([RooflineKB, OperatorKB], sc.profile, None, rules, cases_operator.CHIP)
    assert all(s.status == "ok" for s in statuses), [(s.id, s.reason) for s in statuses]
    for kb, ops in sc.expected.items():
        assert cases_b.flagged(findings, kb) == ops, (kb, [f.title for f in findings if f.kb == kb])
    for rule_id, realistic in sc.recoverable.items():
        [f] = [f for f in findings if f.rule == rule_id]
        assert f.estimated_saving_us == pytest.approx(realistic, rel=0.25), (f.estimated_saving_us, realistic)
    # one root cause per injected problem once symptoms fold under causes on the same ops
    causes = [f for f in hierarchy.absorb(findings, ROLES, None, MECHANISMS) if ROLES[f.rule] == "cause"]
    assert len(causes) == (1 if any(sc.expected.values()) else 0), [f.title for f in causes]


def test_clean_tuned_model_scores_full_marks_on_these_knowledge_bases(rules):
    from advisor.pipeline import score

    sc = cases_operator.clean_tuned_model()
    findings, _ = cases_b.run_kbs([RooflineKB, OperatorKB], sc.profile, None, rules, cases_operator.CHIP)
    window = sc.profile.time.window_us
    assert not findings
    assert score.compute(findings, window, ["roofline", "operator"]).score == 100.0
    # and its time is compute, at the roof: the window is nearly all kernel time
    assert sc.profile.time.compute_us >= 0.9 * window
