"""Issue 30, class 5: a saved report is untrusted input. ``advisor report`` and ``advisor compare`` check it against
the report schema (one line naming the file and the failing path, exit 2), and every string of it is escaped for the
medium it reaches: rendered Markdown holds no element, link or image from the report; HTML no tag or attribute from
it; terminal and JSON output no ESC, C1 or bidi control.

The hostile report is the example report with a payload appended to every free-text string the schema allows
(about 1,400 of them), so a writer that forgets one field shows here.
"""

from __future__ import annotations

import copy
import json
import re
from html.parser import HTMLParser
from pathlib import Path

import jsonschema
import pytest
from click.testing import CliRunner
from hypothesis import given, settings
from hypothesis import strategies as st
from markdown_it import MarkdownIt

from advisor.cli import main
from advisor.common import escaping
from advisor.report.json_report import schema

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_REPORT = ROOT / "reports" / "example.json"
PAYLOAD = ("<img src=http://x>[a](javascript:alert(1))![x](http://track)<script>alert(2)</script>"
           "\x1b[31m\x1b]8;;http://osc\x07\u202eRLO\u2066\u200f https://evil.example www.evil.example a@b.co\x9b2J")
RAW_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u061c]")
"""ESC, the other C0/C1 controls (TAB and LF aside) and the bidi controls: none may reach any output."""
MARKDOWN = MarkdownIt("commonmark", {"html": True}).enable(["table", "strikethrough"])
"""A CommonMark renderer with raw HTML on, as GitHub reads a pull-request comment (its autolinks are stopped by
``escaping.markdown`` and checked apart)."""


def _string_leaves(value: object, path: tuple = ()):
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        return
    for key, child in items:
        if isinstance(child, str):
            yield value, key, (*path, key)
        else:
            yield from _string_leaves(child, (*path, key))


def _failing_leaves(error: jsonschema.ValidationError) -> list[jsonschema.ValidationError]:
    return [error] if not error.context else [x for c in error.context for x in _failing_leaves(c)]


def hostile_report() -> dict:
    """The example report with PAYLOAD appended to every string, except where the schema needs the original
    (enums, patterns): those are put back until the report validates."""
    report = copy.deepcopy(json.loads(EXAMPLE_REPORT.read_text("utf-8")))
    original = {}
    for parent, key, path in list(_string_leaves(report)):
        original[path] = parent[key]
        parent[key] += PAYLOAD
    validator = jsonschema.Draft202012Validator(schema())
    for _ in range(10):
        errors = [leaf for e in validator.iter_errors(report) for leaf in _failing_leaves(e)]
        if not errors:
            return report
        for e in errors:
            path = tuple(e.absolute_path)
            if path in original:
                node = report
                for p in path[:-1]:
                    node = node[p]
                node[path[-1]] = original[path]
    raise AssertionError("the hostile report does not validate")


@pytest.fixture(scope="module")
def saved(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("hostile") / "report.json"
    report = hostile_report()
    assert sum(PAYLOAD in parent[key] for parent, key, _ in _string_leaves(report)) > 1000
    path.write_text(json.dumps(report), "utf-8")
    return path


class _Elements(HTMLParser):
    """Every start tag with its attributes, of an HTML document or of rendered Markdown."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, list[tuple[str, str | None]]]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, attrs))


def _elements(html_text: str) -> list[tuple[str, list[tuple[str, str | None]]]]:
    parser = _Elements()
    parser.feed(html_text)
    return parser.tags


def _assert_no_element_from_input(html_text: str) -> None:
    tags = _elements(html_text)
    assert not [t for t, _ in tags if t in ("img", "iframe", "object", "embed")]
    # links: only advisor's own, to a place in the document (``#finding-3``)
    assert all(re.fullmatch(r"#[\w-]+", dict(a).get("href") or "") for t, a in tags if t == "a")
    scripts = [attrs for t, attrs in tags if t == "script"]
    assert all(not dict(a).get("src") for a in scripts)
    # attributes that load, link or run: none carries the payload (text attributes hold it escaped, inert)
    active = [v or "" for _, attrs in tags for k, v in attrs
              if k in ("href", "src", "action", "formaction", "xlink:href", "style") or k.startswith("on")]
    assert not [v for v in active if re.search(r"javascript:|http://x|track|osc|evil", v)]
    assert "alert(2)</script>" not in html_text


def _outside_code(markdown_text: str) -> str:
    """The Markdown with fenced blocks, code spans and ``<summary>`` lines (an HTML block, HTML-escaped, where
    Markdown is not parsed) removed: their content is literal text."""
    text = re.sub(r"^(`{3,})[^\n]*\n.*?^\1", "", markdown_text, flags=re.S | re.M)
    text = re.sub(r"^<details><summary>.*</summary>$", "", text, flags=re.M)
    return re.sub(r"`[^`\n]*`", "", text)


def _report(saved: Path, fmt: str) -> str:
    result = CliRunner().invoke(main, ["report", str(saved), "--format", fmt])
    assert result.exit_code == 0, result.output
    return result.stdout


# ---------------------------------------------------------------------------------------------------------
# advisor report
# ---------------------------------------------------------------------------------------------------------
def test_markdown_of_a_hostile_report_has_no_html_link_image_or_control(saved: Path) -> None:
    text = _report(saved, "markdown")
    assert not RAW_CONTROL.search(text)
    rendered = MARKDOWN.render(text)
    _assert_no_element_from_input(rendered)
    prose = _outside_code(text)
    for raw in ("<img", "<script", "](", "![x]", "https://evil", "www.evil", "a@b.co"):
        assert raw not in prose, raw
    # the payload is still there to read, as text
    assert "javascript:alert(1)" in rendered and "\\x1b[31m" in rendered and "\\u202eRLO" in rendered


def test_html_of_a_hostile_report_has_no_tag_or_attribute_from_it(saved: Path) -> None:
    text = _report(saved, "html")
    assert not RAW_CONTROL.search(text)
    _assert_no_element_from_input(text)
    assert "&lt;img src=http://x&gt;" in text


def test_terminal_output_of_a_hostile_report_has_no_escape_or_bidi(saved: Path) -> None:
    text = _report(saved, "terminal")
    assert not RAW_CONTROL.search(text)
    assert "\\x1b[31m" in text and "\\u202e" in text  # shown, not obeyed


def test_json_and_junit_of_a_hostile_report_carry_no_raw_control(saved: Path) -> None:
    text = _report(saved, "json")
    assert not RAW_CONTROL.search(text)
    assert json.loads(text) == json.loads(saved.read_text("utf-8"))  # the data itself is kept exactly
    junit = _report(saved, "junit")
    assert not RAW_CONTROL.search(junit)
    tags = {t for t, _ in _elements(junit)}  # the payload is attribute and text data, never an element
    assert tags <= {"testsuites", "testsuite", "testcase", "failure", "skipped", "properties", "property",
                    "system-out", "system-err", "error"}, tags


# ---------------------------------------------------------------------------------------------------------
# advisor compare
# ---------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("fmt", ["markdown", "terminal", "json"])
def test_compare_of_hostile_reports_is_inert(saved: Path, fmt: str) -> None:
    result = CliRunner().invoke(main, ["compare", str(saved), str(saved), "--format", fmt])
    assert result.exit_code == 0, result.output
    text = result.stdout
    assert not RAW_CONTROL.search(text) and not RAW_CONTROL.search(result.stderr)
    if fmt == "markdown":
        _assert_no_element_from_input(MARKDOWN.render(text))
        prose = _outside_code(text)
        assert not [raw for raw in ("<img", "](", "https://evil") if raw in prose]
    if fmt == "json":
        assert json.loads(text)["base"]["path"].endswith(PAYLOAD)


# ---------------------------------------------------------------------------------------------------------
# schema validation: one line, the file and the failing path, exit 2
# ---------------------------------------------------------------------------------------------------------
def _broken(tmp_path: Path, edit) -> Path:
    report = json.loads(EXAMPLE_REPORT.read_text("utf-8"))
    edit(report)
    path = tmp_path / "broken\u202e.json"
    path.write_text(json.dumps(report), "utf-8")
    return path


@pytest.mark.parametrize("edit, where", [
    (lambda r: r["findings"][2].update(severity="major\n<img src=x>\x1b[2J" + "x" * 5000), "findings/2/severity"),
    (lambda r: r["summary"].update(device_time_us="12\nrm -rf /"), "summary/device_time_us"),
    (lambda r: r["findings"][0].pop("rule"), "findings/0"),
])
@pytest.mark.parametrize("command", ["report", "compare"])
def test_a_report_off_the_schema_is_refused_in_one_line(tmp_path: Path, edit, where: str, command: str) -> None:
    path = _broken(tmp_path, edit)
    args = ["report", str(path)] if command == "report" else ["compare", str(EXAMPLE_REPORT), str(path)]
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2
    err = result.stderr
    assert err.count("\n") == 1 and len(err) < 800, err
    assert "broken\\u202e.json" in err and f"invalid at {where}" in err
    assert not RAW_CONTROL.search(err) and "Traceback" not in err
    assert result.stdout == ""


# ---------------------------------------------------------------------------------------------------------
# the Markdown escape on arbitrary text
# ---------------------------------------------------------------------------------------------------------
_PIECES = st.sampled_from([*"ab_*[]()!<>&|`~#\\:/.@= \t\n\r\x1b\x9b\u202e\u2066\u200f\u2028w",
                           "http", "www.", "javascript:", "&amp;", "&#60;", "<img ", "](", "![", "mailto:"])
MARKDOWNISH = st.one_of(st.text(max_size=60), st.lists(_PIECES, max_size=30).map("".join))
"""Arbitrary text, and text made of the pieces of Markdown and HTML syntax."""


@settings(max_examples=300, deadline=None)
@given(MARKDOWNISH)
def test_escaped_markdown_has_no_link_tag_escape_or_bidi(text: str) -> None:
    md = escaping.markdown(text)
    assert "](" not in md and "<" not in md and "\n" not in md
    assert not RAW_CONTROL.search(md)
    rendered = MARKDOWN.renderInline(md)
    # no element but a code span the text itself wrote with plain content: no emphasis, link, image or HTML
    assert {t for t, _ in _elements(rendered)} <= {"code"}
    for content in re.findall(r"<code>(.*?)</code>", rendered):
        assert re.fullmatch(r"[^<>&|`\[\]\\]+", content) and content in text
    assert "<a" not in MARKDOWN.render(f"| x |\n|---|\n| {md} |\n")
