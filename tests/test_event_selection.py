"""Events no rule reads are counted per process and name while the trace streams, not kept (issue 18.2, API 1.4).

What a user checks: the same report whether every event is kept or only those the knowledge bases read; the
events that are not kept are all accounted for in ``profile.event_summary`` (count, duration, extent); a plugin
that does not declare what it reads gets every event.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from advisor.engine import kb_engine as engine
from advisor.ingest import detect, read_source
from advisor.ingest.event_summary import EventCounter, split_events
from advisor.kb import KnowledgeBase
from advisor.model import EventSelection
from tests import golden

SAMPLES = golden.SAMPLES
WITH_UNREAD_EVENTS = [
    "Ascend__msinsight/test/data/pytorch/text/level2/rank0_ascend_pt",  # trace_view.json, with_stack
    "Ascend__msinsight/test/data/pytorch/db/level1/rank0_ascend_pt",  # ascend_pytorch_profiler_0.db
    "Ascend__msprof-analyze/test/ut/advisor/timeline_advice/trace_view.json",  # a lone trace
    "hicann__cann-learning-hub/skills/examples/as_strided/docs/perf/profiler_output/trace.json",  # Python frames
]


def _info(cls: type[KnowledgeBase]) -> engine.KBInfo:
    return engine.KBInfo(cls=cls, plugin="test", package="test", package_version="0")


@pytest.fixture(scope="module")
def builtin() -> tuple[list[engine.KBInfo], EventSelection]:
    found = engine.find_plugins()
    infos = engine.discover(found)
    selection = engine.events_projection(infos, engine.load_rules(found))
    assert selection is not None, "every built-in knowledge base declares the events it reads"
    return infos, selection


def _read_both(rel: str, selection: EventSelection) -> tuple[object, object]:
    path = SAMPLES / rel
    if not path.exists():
        pytest.skip(f"shared sample {rel} not present")
    (src,) = detect(Path(path))[:1]
    return read_source(src), read_source(src, None, selection)


@pytest.mark.parametrize("rel", WITH_UNREAD_EVENTS)
def test_every_event_not_kept_is_counted_with_its_duration_and_extent(
        rel: str, builtin: tuple[list[engine.KBInfo], EventSelection]) -> None:
    full, part = _read_both(rel, builtin[1])
    summary = part.event_summary
    assert len(summary), f"{rel}: some events here are read by no rule"
    assert len(part.events) + int(summary["count"].sum()) == len(full.events)
    assert any("counted per name, not kept" in n for n in part.meta.notes)

    # the kept rows are the full read's rows the selection keeps, in order, with the same values
    into = EventCounter()
    kept = split_events(full.events, builtin[1], into)
    counted = into.frame()
    cols = ["process", "name", "category", "start_us", "duration_us", "tid"]
    pd.testing.assert_frame_equal(part.events[cols].astype(object), kept[cols].astype(object))

    # per process and name: the rows of the full read that were not kept
    want = counted.set_index(["process", "name"]).sort_index()
    have = summary.set_index(["process", "name"]).sort_index()
    assert have.index.equals(want.index)
    assert (have["count"] == want["count"]).all()
    np.testing.assert_allclose(have["total_us"], want["total_us"], rtol=1e-12)
    assert (have["first_us"].to_numpy() == want["first_us"].to_numpy()).all()  # exact: the same float operations
    assert (have["last_end_us"].to_numpy() == want["last_end_us"].to_numpy()).all()

    # what the analysis derives from the timeline does not move
    assert part.meta.time_origin_ns == full.meta.time_origin_ns
    assert (part.meta.context, part.meta.context_evidence) == (full.meta.context, full.meta.context_evidence)
    assert part.time.to_dict() == full.time.to_dict()
    assert part.available == full.available


def test_the_summary_counts_what_a_groupby_of_the_dropped_rows_gives() -> None:
    counter = EventCounter()
    counter.add([1, 1, 2], ["a", "a", "b"], np.array([5.0, 1.0, np.nan]), np.array([2.0, np.nan, 3.0]))
    counter.add([1], ["a"], np.array([10.0]), np.array([0.5]))
    out = counter.frame(lambda pid: {1: "Python", 2: "CANN"}[pid]).set_index(["process", "name"])
    assert out.loc[("Python", "a")].tolist() == [3, 2.5, 1.0, 10.5]
    b = out.loc[("CANN", "b")]
    assert b["count"] == 1 and b["total_us"] == 3.0 and np.isnan(b["first_us"]) and np.isnan(b["last_end_us"])


def test_counted_times_pass_the_sanitizer_like_kept_ones() -> None:
    counter = EventCounter()
    counter.add(["CANN"] * 3, ["x"] * 3, np.array([1.0, 2.0, 3.0]), np.array([1.0, 9e307, -4.0]))
    row = counter.frame().iloc[0]
    assert row["count"] == 3 and row["total_us"] == 1.0 and row["last_end_us"] == 3.0
    assert counter.problems == {"duration_us": {"negative": 1, "longer than 1e+11 µs": 1}}


def _keeps(selection: EventSelection, process: object, name: object, category: object) -> bool:
    """Whether an event with these fields is selected: any field's test passes (as the readers apply them)."""
    return any(test(v) for test, v in zip(selection.tests(), (process, name, category), strict=True))


def test_a_selection_matches_whole_names_processes_or_categories() -> None:
    sel = EventSelection(names=(r"aten::.*", "(?i:syncbatchnorm)"), processes=("CANN",)) | \
        EventSelection(categories=("GC",))

    def keeps(process: object, name: object, category: object) -> bool:
        return _keeps(sel, process, name, category)

    assert keeps("Python", "aten::add", "cpu_op")
    assert keeps("Python", "SyncBatchNorm", None)
    assert keeps("CANN", "Runtime@x", None)
    assert keeps("Python", "GC", "GC")
    assert not keeps("Python", "xaten::add", "python_function")  # a full match, not a search
    assert not keeps("CANNx", "torch/nn/modules/module.py(1501): _call_impl", None)
    assert not keeps(None, 3, float("nan"))  # values that are not text match nothing


def test_every_event_is_kept_unless_every_knowledge_base_declares_what_it_reads(
        builtin: tuple[list[engine.KBInfo], EventSelection]) -> None:
    rules = engine.load_rules(engine.find_plugins())

    class Silent(KnowledgeBase):  # written before API 1.4
        id = "silent"

    class Broken(KnowledgeBase):
        id = "broken"
        events_read = staticmethod(lambda rules: rules["no such key"])

    class Reads(KnowledgeBase):
        id = "reads"
        events_read = EventSelection(names=("Hccl@.*",))

    assert engine.events_projection([_info(Silent)], rules) is None
    assert engine.events_projection([_info(Broken)], rules) is None
    assert engine.events_projection([*builtin[0], _info(Silent)], rules) is None
    with_plugin = engine.events_projection([*builtin[0], _info(Reads)], rules)
    assert with_plugin is not None and "Hccl@.*" in with_plugin.names
    # the time model's own events are always selected
    assert _keeps(engine.events_projection([], rules), "Overlap Analysis", "Free", None)


@pytest.fixture
def every_event_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    """The analysis keeps every event, as before events were selected (and as with a plugin of API < 1.4)."""
    monkeypatch.setattr(engine, "events_projection", lambda infos, rules: None)


@pytest.mark.parametrize("name", [n for n in golden.committed() if n != golden.EXAMPLE])
def test_reports_are_the_same_with_every_event_kept(name: str, every_event_kept: None) -> None:
    """A rule reading an event its knowledge base does not declare would see it only here: its finding changes."""
    diff = golden.changes(name, lines=40)
    if diff:
        pytest.fail(f"{name}: a rule reads events its knowledge base's events_read does not select\n{diff}")


def test_events_read_before_their_process_is_named_are_selected_once_it_is(tmp_path: Path) -> None:
    from advisor.ingest.timeline import read_trace
    from advisor.model import Meta

    trace = tmp_path / "trace_view.json"
    trace.write_text(
        '[{"ph":"X","pid":5,"tid":1,"name":"model.py(3): forward","cat":"python_function","ts":"10.000","dur":4},'
        '{"ph":"X","pid":5,"tid":1,"name":"aten::add","cat":"cpu_op","ts":"11.000","dur":2},'
        '{"ph":"X","pid":7,"tid":1,"name":"Free","ts":"20.000","dur":5},'
        '{"ph":"M","pid":5,"name":"process_name","args":{"name":"Python"}},'
        '{"ph":"M","pid":7,"name":"process_name","args":{"name":"Overlap Analysis"}},'
        '{"ph":"X","pid":5,"tid":1,"name":"model.py(3): forward","cat":"python_function","ts":"30.000","dur":1}]')
    tables = read_trace(trace, Meta(), device_ops=False,
                        select=EventSelection(names=(r"aten::.*",), processes=("Overlap Analysis",)))
    assert tables.events["name"].astype(str).tolist() == ["aten::add", "Free"]
    (row,) = tables.event_summary.itertuples()
    assert (row.process, row.name, row.count, row.total_us, row.first_us, row.last_end_us) == \
        ("Python", "model.py(3): forward", 2, 5.0, 10.0, 31.0)
