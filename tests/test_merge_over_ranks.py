"""One finding per cause over the ranks of a job (advisor.pipeline.hierarchy.merge_ranks): 16 ranks that each show
"uncovered communication 62.8 %" .. "63.3 %" are one finding, listed with their ranks; findings that name
different ranks, or say different things, stay apart."""

from __future__ import annotations

from advisor.findings import Finding
from advisor.pipeline.hierarchy import merge_ranks


def _f(rule: str, title: str, rank: int, saving: float, advice: str | None = None) -> Finding:
    return Finding(kb=rule.split(".")[0], rule=rule, title=title, severity="major", ops=[f"op{rank}"],
                   evidence={}, estimated_saving_us=saving, basis="measured",
                   recommendation=advice or f"advice for {title}", rank=rank)


def test_same_cause_with_different_figures_is_one_finding_over_its_ranks() -> None:
    found = [_f("overall.uncovered-communication", f"Uncovered communication {62.8 + r / 10:.1f}% of the analyzed "
                f"time ({17.6 + r / 100:.2f} ms), mostly wait ({69.8 + r / 10:.1f}%)", r, 1000.0 + r)
             for r in range(4)]
    (merged,) = merge_ranks(found)
    assert merged.ranks == [0, 1, 2, 3] and merged.rank is None
    assert merged.estimated_saving_us == sum(f.estimated_saving_us for f in found)
    assert merged.title == found[3].title  # the largest rank's figures
    assert set(merged.evidence["by_rank"]) == {"0", "1", "2", "3"}


def test_different_words_or_different_named_ranks_stay_apart() -> None:
    found = [_f("overall.uncovered-communication", "Uncovered communication 63.0% (17.69 ms), mostly wait (69.9%)",
                0, 10.0),
             _f("overall.uncovered-communication", "Uncovered communication 62.5% (17.57 ms), mostly transmit "
                "(59.5%)", 1, 10.0),
             _f("cluster.comm-bottleneck", "rank 2 arrives last at 5 collectives", 2, 0.0),
             _f("cluster.comm-bottleneck", "rank 3 arrives last at 10 collectives", 3, 0.0),
             _f("aicpu.ops", "1 AI CPU op(s): Conv_33", 0, 5.0),
             _f("aicpu.ops", "1 AI CPU op(s): Conv_34", 1, 5.0)]
    assert len(merge_ranks(found)) == 6


def test_findings_of_one_input_are_never_merged_and_an_input_without_rank_id_is_merged() -> None:
    one_rank = [_f("schedule.fusible-ops", "Host bound sequence repeated 12x: A -> B", 0, 5.0),
                _f("schedule.fusible-ops", "Host bound sequence repeated 27x: A -> B", 0, 7.0)]
    assert len(merge_ranks(one_rank)) == 2
    unnamed = _f("aicpu.ops", "2 AI CPU op(s): 64-bit integer tensors", 0, 130.5)
    (merged,) = merge_ranks([unnamed, Finding(**{**unnamed.__dict__, "rank": None})])
    assert merged.ranks == [0] and merged.estimated_saving_us == 261.0


def test_a_cluster_cause_takes_the_waiting_it_explains_out_of_the_per_rank_finding() -> None:
    """Stage 1 computes 100 us more per step: the 4 ranks' waiting in collectives is that cause, counted once."""
    from advisor.pipeline.hierarchy import explain_waiting

    waits = [Finding(kb="overall", rule="overall.uncovered-communication", title="Uncovered communication 50%",
                     severity="critical", ops=[f"allreduce{r}"], evidence={"sync_recoverable_us": 150.0},
                     estimated_saving_us=200.0, basis="measured", recommendation="balance", rank=r)
             for r in range(4)]
    (merged,) = merge_ranks(waits)
    stage = Finding(kb="cluster", rule="cluster.stage-imbalance", title="Pipeline stage 1 computes more",
                    severity="major", ops=[], evidence={}, estimated_saving_us=400.0, basis="x 4 ranks",
                    recommendation="move layers")
    out = {f.rule: f for f in explain_waiting([merged, stage], {"cluster.stage-imbalance":
                                                                ("overall.uncovered-communication",)})}
    # the whole waiting part (3 x 4 x 150 us... of 800 us: 600 us) goes under the cause, whatever the cause's own
    # saving; what is not waiting (transfers to hide) stays a finding
    assert out["overall.uncovered-communication"].estimated_saving_us == 800.0 - 600.0
    (sym,) = out["cluster.stage-imbalance"].symptoms
    assert sym["rule"] == "overall.uncovered-communication" and sym["explained_us"] == 600.0
    assert out["cluster.stage-imbalance"].estimated_saving_us == 400.0  # the cause keeps its own saving
    big = {f.rule: f for f in explain_waiting([merged, Finding(**{**stage.__dict__, "estimated_saving_us": 2000.0})],
                                              {"cluster.stage-imbalance": ("overall.uncovered-communication",)})}
    assert big["cluster.stage-imbalance"].symptoms[0]["explained_us"] == 600.0
    assert big["overall.uncovered-communication"].estimated_saving_us == 200.0


def test_ranks_whose_titles_differ_in_a_word_but_share_the_advice_are_one_finding() -> None:
    advice = "The device waits for the host 20.2% of the time: find what the host does between device tasks."
    found = [_f("overall.free-time", "Device idle 20.2% of the analyzed time (26.68 ms): host-bound", 0, 13484.0,
                advice),
             _f("overall.free-time", "Device idle 18.8% of the analyzed time (25.74 ms): moderately host-bound", 1,
                12086.0, advice.replace("20.2", "18.8"))]
    (merged,) = merge_ranks(found)
    assert merged.ranks == [0, 1] and merged.estimated_saving_us == 13484.0 + 12086.0


def test_two_cluster_causes_never_explain_more_waiting_than_there_is() -> None:
    from advisor.pipeline.hierarchy import explain_waiting

    wait = Finding(kb="overall", rule="overall.uncovered-communication", title="Uncovered communication 50%",
                   severity="critical", ops=["allreduce"], evidence={"sync_recoverable_us": 600.0},
                   estimated_saving_us=800.0, basis="measured", recommendation="balance", rank=0)
    causes = [Finding(kb="cluster", rule=rule, title=rule, severity="major", ops=[], evidence={},
                      estimated_saving_us=400.0, basis="b", recommendation="r")
              for rule in ("cluster.stage-imbalance", "cluster.slow-rank")]
    explains = {c.rule: ("overall.uncovered-communication",) for c in causes}
    out = {f.rule: f for f in explain_waiting([wait, *causes], explains)}
    moved = [(c.rule, s["explained_us"]) for c in causes for s in out[c.rule].symptoms]
    # the waiting, not the 800 us the two causes could claim, under one cause (the first of two equal ones)
    assert moved == [("cluster.stage-imbalance", 600.0)]
    assert out["overall.uncovered-communication"].estimated_saving_us == 200.0
    assert set(out["overall.uncovered-communication"].evidence["explained_by"]) == {"cluster.stage-imbalance"}
