"""Paths sent to workers resolved are named in the report as the user gave them."""

from __future__ import annotations

from advisor.common.given_paths import PathSpelling, as_given
from advisor.model import Meta, SkippedFile
from advisor.pipeline.executor import Outcome, RankFailure


def test_paths_below_the_sent_root_take_the_given_spelling() -> None:
    s = PathSpelling("/abs/shared/run", "../shared/run")
    assert s.path("/abs/shared/run") == "../shared/run"
    assert s.path("/abs/shared/run/rank_0/kernel_details.csv") == "../shared/run/rank_0/kernel_details.csv"
    assert s.path("/abs/shared/run2/x.csv") == "/abs/shared/run2/x.csv"  # a sibling whose name only starts alike
    assert s.path("/elsewhere/x.csv") == "/elsewhere/x.csv"
    message = "reading /abs/shared/run/a.csv: bad; not /abs/shared/run2"
    assert s.text(message) == "reading ../shared/run/a.csv: bad; not /abs/shared/run2"


def test_a_rank_meta_and_a_failure_are_rewritten() -> None:
    s = PathSpelling("/abs/run/", "run")
    meta = Meta(source="/abs/run/rank_0", files_read=["/abs/run/rank_0/a.csv"],
                files_skipped=[SkippedFile("/abs/run/rank_0/b.json", "unreadable /abs/run/rank_0/b.json")],
                notes=["skipped a symlink loop at /abs/run/rank_0/loop"])
    s.meta(meta)
    assert meta.source == "run/rank_0" and meta.files_read == ["run/rank_0/a.csv"]
    assert meta.files_skipped[0] == SkippedFile("run/rank_0/b.json", "unreadable run/rank_0/b.json")
    assert meta.notes == ["skipped a symlink loop at run/rank_0/loop"]
    failed = as_given(Outcome(1, failure=RankFailure(1, "/abs/run/rank_1", "x.csv: bad")), s)
    assert failed.failure.path == "run/rank_1" and failed.failure.reason == "x.csv: bad"
