"""Property-based tests (Hypothesis) of the hostile-input mechanisms: the guarded loaders, the CSV reader, the
number sanitizer, the rules loader, the escaping functions and the report writers.

Each property says what must hold for *any* input: a reader returns or raises AdvisorError (never another
exception); what it returns keeps the model's promises; a writer's output carries no control character and no
syntax of its medium that came from the data. ``HYPOTHESIS_PROFILE=long`` runs many more examples.
"""

from __future__ import annotations

import copy
import json
import math
import os
import re
import shlex
import xml.etree.ElementTree as ET
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.common import escaping, safeload
from advisor.common.errors import AdvisorError, InputError, RulesError
from advisor.ingest.sanitize import MAX_DURATION_US, sanitize
from advisor.model import Meta, Profile, empty_frame

settings.register_profile("ci", max_examples=60, deadline=None, derandomize=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.register_profile("long", max_examples=3000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

REPO = Path(__file__).resolve().parents[1]
SAMPLE_REPORT = REPO / "reports" / "example.json"

json_scalars = st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False, allow_infinity=False) | st.text()
json_values = st.recursive(json_scalars, lambda c: st.lists(c, max_size=5) | st.dictionaries(st.text(), c, max_size=5),
                           max_leaves=30)
hostile_text = st.text(alphabet=st.characters(codec="utf-8"), max_size=60) | st.sampled_from([
    "\x1b]0;pwned\x07", "\x1b[31mred", "X[click](javascript:alert(1))", "![i](http://x/y.png)", "<script>x</script>",
    "a|b", "`code`", "*em* _em_", "# heading", "$\\frac{1}{0}$", "]]> &amp;", "\u202eevil", "line\nbreak", "\x00",
    "[bold]markup[/bold]", "'; rm -rf / #", "$(touch x)", "=<x"])


# ---------------------------------------------------------------------------------------------------------
# guarded loading
# ---------------------------------------------------------------------------------------------------------
@given(st.binary(max_size=400))
def test_json_loader_returns_or_raises_input_error(data: bytes) -> None:
    try:
        safeload.loads_json(data, "x.json")
    except InputError as e:
        assert "\n" not in str(e)


@given(json_values)
def test_json_loader_reads_what_json_writes(value: object) -> None:
    assert safeload.loads_json(json.dumps(value)) == value


@given(st.integers(min_value=0, max_value=400), st.sampled_from(["[", "{\"a\":"]))
def test_json_nesting_is_bounded_before_parsing(depth: int, opener: str) -> None:
    close = "]" if opener == "[" else "}"
    text = opener * depth + "1" + close * depth
    if depth > safeload.MAX_DEPTH:
        with pytest.raises(InputError, match="nested"):
            safeload.loads_json(text)
    else:
        safeload.loads_json(text)


@given(st.text(max_size=300))
def test_yaml_loader_returns_or_raises_input_error(text: str) -> None:
    try:
        safeload.loads_yaml(text, "x.yaml")
    except InputError as e:
        assert "\n" not in str(e)


@given(st.text(max_size=300))
def test_toml_loader_returns_or_raises_input_error(text: str) -> None:
    try:
        safeload.loads_toml(text, "pyproject.toml")
    except InputError as e:
        assert "\n" not in str(e)


@given(st.lists(st.sampled_from([b"[", b"]", b"{", b"}", b'"', b"\\", b"x", b","]), max_size=200))
def test_nesting_depth_matches_a_plain_scan(parts: list[bytes]) -> None:
    data = b"".join(parts)
    depth = best = 0
    in_string = escaped = False
    for c in data.decode():
        if in_string:
            if escaped:
                escaped = False
            elif c == "\\":
                escaped = True
            elif c == '"':
                in_string = False
        elif c == '"':
            in_string = True
        elif c in "[{":
            depth += 1
            best = max(best, depth)
        elif c in "]}":
            depth -= 1
    assert safeload.nesting_depth(data) == best


# ---------------------------------------------------------------------------------------------------------
# CSV reader and number sanitizer
# ---------------------------------------------------------------------------------------------------------
cells = st.sampled_from(["1", "2.5", "-3", "inf", "nan", "1e308", "9" * 400, "", "N/A", "abc", '"x,y"', "\t7\t",
                         "1,2", '"', "\x1b"])


@given(header=st.lists(st.sampled_from(["Name", "Type", "Duration(us)", "Start Time(us)", "Accelerator Core",
                                        "Input Shapes", "x", "Duration(us)"]), min_size=1, max_size=6),
       rows=st.lists(st.lists(cells, min_size=0, max_size=7), max_size=8))
@settings(parent=settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci")), max_examples=40)
def test_op_table_csv_reads_or_raises_input_error(tmp_path_factory: pytest.TempPathFactory, header: list[str],
                                                  rows: list[list[str]]) -> None:
    from advisor.ingest import load

    path = tmp_path_factory.mktemp("csv") / "kernel_details.csv"
    path.write_text("\n".join(",".join(r) for r in [header, *rows]) + "\n", encoding="utf-8")
    try:
        profiles = load(path)
    except AdvisorError as e:
        assert "\n" not in str(e)
        return
    for p in profiles:
        d = p.ops["duration_us"].to_numpy(dtype="float64")
        assert not np.isinf(d).any() and not (d < 0).any() and not (d > MAX_DURATION_US).any()


@given(st.lists(st.floats(allow_nan=True, allow_infinity=True) | st.integers(min_value=-10**30, max_value=10**30),
                min_size=1, max_size=30))
def test_sanitizer_leaves_only_finite_non_negative_durations(values: list[float]) -> None:
    floats = np.array([float(v) for v in values], dtype="float64")
    ops = empty_frame(["name", "start_us", "duration_us", "wait_us"]).reindex(range(len(values)))
    ops["name"] = [f"op{i}" for i in range(len(values))]
    ops["duration_us"] = floats
    ops["wait_us"] = floats
    ops["start_us"] = floats
    profile = Profile(ops=ops, meta=Meta(source="mem"))
    sanitize(profile)
    for col in ("duration_us", "wait_us"):
        out = profile.ops[col].to_numpy(dtype="float64")
        ok = np.isnan(out) | ((out >= 0) & (out <= MAX_DURATION_US))
        assert ok.all()
        kept = ~np.isnan(out)
        assert (out[kept] == floats[kept]).all()  # what is kept is unchanged
    assert np.isfinite(profile.ops["start_us"].to_numpy(dtype="float64")[~profile.ops["start_us"].isna()]).all()
    changed = np.isinf(floats) | (floats < 0) | (np.abs(floats) > MAX_DURATION_US)
    assert bool(profile.meta.notes) == bool(changed.any())


# ---------------------------------------------------------------------------------------------------------
# rules loader
# ---------------------------------------------------------------------------------------------------------
rule_values = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20) | \
    st.lists(st.text(max_size=10), max_size=3) | st.sampled_from(["(.+)+Z", "([a-z", "(a*)*b", "^ok$"])


@given(st.sampled_from(["memory", "transdata", "overall", "schedule", "communication", "aicpu"]),
       st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=25), rule_values)
@settings(parent=settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci")), max_examples=40)
def test_rules_override_loads_or_raises_rules_error(tmp_path_factory: pytest.TempPathFactory, name: str, key: str,
                                                    value: object) -> None:
    import yaml

    from advisor.config.loader import builtin_rules_dir, load_effective_rules

    path = tmp_path_factory.mktemp("rules") / "override.yaml"
    path.write_text(yaml.safe_dump({"rules": {name: {key: value}}}), encoding="utf-8")
    try:
        eff = load_effective_rules([builtin_rules_dir()], override_file=path)
    except RulesError as e:
        assert "\n" not in str(e)
        return
    assert isinstance(eff.values[name], dict)


@given(st.text(max_size=40))
def test_rules_regex_check_accepts_only_compilable_patterns(pattern: str) -> None:
    from advisor.config.loader import regex_problem

    problem = regex_problem(pattern)
    if problem is None:
        re.compile(pattern)


# ---------------------------------------------------------------------------------------------------------
# escaping and report writers
# ---------------------------------------------------------------------------------------------------------
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")


@given(hostile_text)
def test_terminal_and_html_escaping_leave_no_controls(text: str) -> None:
    assert not _CONTROL.search(escaping.terminal(text).replace("\n", "").replace("\t", ""))
    assert not _CONTROL.search(escaping.terminal_line(text))
    h = escaping.html(text)
    assert "<" not in h and ">" not in h and not _CONTROL.search(h.replace("\n", "").replace("\t", ""))


@given(hostile_text)
def test_markdown_escaping_leaves_no_link_html_or_pipe(text: str) -> None:
    md = escaping.markdown(text)
    assert "\n" not in md and not _CONTROL.search(md)
    assert "<" not in md and ">" not in md
    assert re.search(r"(?<!\\)[\[\]|]", md) is None  # every bracket and pipe escaped: no link, no table break


@given(st.lists(hostile_text, max_size=6))
def test_shell_command_round_trips(args: list[str]) -> None:
    args = [a.replace("\x00", "") for a in args]
    assert shlex.split(escaping.shell_command(args)) == args


@given(op=hostile_text, title=hostile_text, rec=hostile_text, path=hostile_text, saving=st.floats(0, 1e6))
@settings(parent=settings.get_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci")), max_examples=10)
def test_report_writers_carry_no_raw_hostile_text(op: str, title: str, rec: str, path: str, saving: float) -> None:
    from advisor.report import render

    report = copy.deepcopy(_sample_report())
    f = report["findings"][0]
    f["ops"] = [op, "b"]
    f["title"], f["recommendation"] = title or "t", rec
    f["estimated_saving_us"] = saving
    report["input"]["path"] = path
    report["input"]["notes"] = [rec]
    report["summary"]["top_op_types"][0]["type"] = op
    for fmt in ("terminal", "markdown", "html", "junit", "json"):
        text = render(report, fmt)
        body = text.replace("\n", "").replace("\t", "").replace("\r", "")
        if fmt != "json":
            assert not _CONTROL.search(body), fmt
        if fmt == "junit":
            ET.fromstring(text)
        if fmt == "json":
            assert json.loads(text)["findings"][0]["ops"][0] == op
        if fmt == "markdown":
            stripped = re.sub(r"^(`{3,})[^\n]*\n.*?^\1", "", text, flags=re.S | re.M)
            stripped = re.sub(r"`[^`\n]*`", "", stripped)
            assert "[click](" not in stripped and "<script>" not in stripped


_REPORT: dict | None = None


def _sample_report() -> dict:
    global _REPORT
    if _REPORT is None:
        _REPORT = json.loads(SAMPLE_REPORT.read_text(encoding="utf-8"))
    return _REPORT


# ---------------------------------------------------------------------------------------------------------
# plugin findings coming back from a child process
# ---------------------------------------------------------------------------------------------------------
@given(st.dictionaries(st.sampled_from(["rule", "title", "severity", "ops", "evidence", "estimated_saving_us", "basis",
                                        "recommendation", "fix", "confidence", "saving_by_op", "rank"]),
                       json_values | st.sampled_from(["inf", "nan", "major", "-1"]), max_size=12))
def test_plugin_findings_are_rebuilt_or_refused(d: dict) -> None:
    from advisor.engine.isolation import finding_from_dict
    from advisor.findings import Finding

    try:
        f = finding_from_dict(d, 1000.0)
    except ValueError:
        return
    assert isinstance(f, Finding)
    assert math.isfinite(f.estimated_saving_us) and 0 <= f.estimated_saving_us <= 1000.0 * (1 + 1e-9) + 1e-6
    assert all(isinstance(o, str) for o in f.ops)
    json.dumps(f.to_dict(), allow_nan=False)


def test_frames_of_the_sanitizer_keep_text_columns() -> None:
    ops = pd.DataFrame({"name": ["a", None], "duration_us": [1.0, 2.0], "type": ["X", "Y"]})
    p = Profile(ops=ops, meta=Meta(source="mem"))
    sanitize(p)
    assert list(p.ops["name"]) == ["a"] and "without a name dropped" in p.meta.notes[0]
