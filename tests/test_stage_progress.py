"""Progress names each stage with its counts: the size of the profile read, knowledge base k of n, rank i of n
(issue 31, item 6); nothing is computed or shown without a listener."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from advisor.cli.emit import StderrProgress
from advisor.common import stage_progress
from advisor.examples import example_profile
from advisor.pipeline.analysis import AnalysisOptions, run_analysis

if TYPE_CHECKING:
    from tests.conftest import CliFixture


def _tree_bytes(root: Path) -> tuple[int, int]:
    sizes = [os.path.getsize(os.path.join(d, f)) for d, _, files in os.walk(root) for f in files]
    return sum(sizes), len(sizes)


def test_single_rank_progress_names_the_size_read_and_each_knowledge_base() -> None:
    said: list[str] = []
    report = run_analysis(example_profile(), None, AnalysisOptions(), said.append).report
    size, files = _tree_bytes(example_profile())
    assert f"reading {size / 1e6:,.1f} MB of profile ({files:,} files)" in said
    kbs = [m for m in said if m.startswith("knowledge base ")]
    ran = [k["id"] for k in report["knowledge_bases"] if k["id"] != "cluster"]
    assert kbs == [f"knowledge base {k} of {len(ran)}: {kb}" for k, kb in enumerate(ran, start=1)]
    assert said.index(f"reading {size / 1e6:,.1f} MB of profile ({files:,} files)") < said.index(kbs[0])


def test_ranks_analyzed_here_say_which_rank(tmp_path: Path) -> None:
    from tests.test_cluster_exec import gen_cluster

    gen_cluster.generate(tmp_path, ranks=2, tp=1, pp=1, steps=1, ops=5, seed=1, bubble_stage=None, slow_link=None)
    said: list[str] = []
    run_analysis(tmp_path, None, AnalysisOptions(), said.append, workers=1)
    for rank in (0, 1):
        assert any(re.fullmatch(rf"rank {rank} of 2: reading [\d.,]+ MB of profile \(\d+ files\)", m) for m in said)
        assert any(m.startswith(f"rank {rank} of 2: knowledge base 1 of ") for m in said)
    assert "analyzed ranks 2/2" in said and "cluster knowledge base 1 of 1: cluster" in said


def test_without_a_listener_nothing_is_computed() -> None:
    def boom() -> str:
        raise AssertionError("evaluated without a listener")

    stage_progress.say(boom)
    said: list[str] = []
    with stage_progress.reporting(said.append), stage_progress.within("rank 3 of 4: "):
        stage_progress.say(lambda: "lazy")
    stage_progress.say("after")
    assert said == ["rank 3 of 4: lazy"]


def test_input_size_counts_files_and_stops_at_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(5):
        (tmp_path / f"f{i}").write_bytes(b"x" * (i + 1))
    assert stage_progress.input_size(tmp_path) == (15, 5, True)
    assert stage_progress.input_size(tmp_path / "f4") == (5, 1, True)
    monkeypatch.setattr(stage_progress, "MAX_FILES_COUNTED", 3)
    assert stage_progress.input_size(tmp_path)[1:] == (3, False)
    assert "or more" in stage_progress.reading_message(tmp_path)


def test_progress_only_on_a_terminal(cli: CliFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    rc, out, err = cli("analyze", "--example", "--format", "json")
    assert rc == 0 and err == ""  # stderr is not a terminal: no progress
    monkeypatch.setattr("sys.stderr.isatty", lambda: True, raising=False)
    assert StderrProgress(enabled=True).enabled and not StderrProgress(enabled=False).enabled
