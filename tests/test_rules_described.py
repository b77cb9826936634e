"""Each rules value is described once: the ``description`` of its key in the rules file's JSON Schema says what it
means; ``advisor explain`` shows that text (not a copy of it), the YAML comments give sources and reasons without
repeating it, and no rules file cites a document the repository does not hold."""

from __future__ import annotations

import difflib
import json
import re
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from advisor.cli import main
from advisor.config import rule_meaning
from advisor.config.loader import builtin_rules_dir
from advisor.engine import kb_engine as engine

RULES = builtin_rules_dir()
REPO = Path(__file__).resolve().parents[1]
FILES = sorted(p.stem for p in RULES.glob("*.yaml"))


def _schema(name: str) -> dict:
    return json.loads((RULES / "schema" / f"{name}.schema.json").read_text("utf-8"))


def _values(name: str) -> dict:
    return yaml.safe_load((RULES / f"{name}.yaml").read_text("utf-8"))


@pytest.mark.parametrize("name", FILES)
def test_every_number_of_a_rules_file_has_its_meaning_in_the_schema(name: str) -> None:
    """Thresholds, confidences, ratios and counts: each key (or the mapping that holds it, as ``severity`` holds its
    levels) has a description."""
    assert rule_meaning.undescribed(_schema(name), _values(name)) == []


def test_the_check_sees_an_undescribed_number() -> None:
    schema = {"properties": {"severity": {"description": "levels", "properties": {"major": {}}},
                             "min_us": {"type": "number"}, "ratio": {"$ref": "#/$defs/f", "description": "share"}},
              "$defs": {"f": {"type": "number"}}}
    assert rule_meaning.undescribed(schema, {"severity": {"major": 0.1}, "min_us": 5, "ratio": 0.5}) == ["min_us"]


def _rules() -> list:
    return [(info, r) for info in engine.discover(engine.find_plugins()) for r in info.cls.rules]


def test_every_threshold_a_rule_names_is_a_key_of_its_schema() -> None:
    missing = [(r.id, key) for info, r in _rules() if info.cls.rules_file for key in r.thresholds
               if rule_meaning.schema_of(_schema(info.cls.rules_file), key) is None]
    assert missing == []


def _commented_keys(text: str) -> list[tuple[str, str]]:
    """(dotted key, its comment) for each key of a YAML file: the comment lines right above it (at its indent) and
    the one at the end of its line."""
    out: list[tuple[str, str]] = []
    stack: list[tuple[int, str]] = []
    above: list[str] = []
    for line in text.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            above.append(stripped.lstrip("# "))
            continue
        m = re.match(r"^(\s*)([A-Za-z0-9_\"'.*-]+):(.*)$", line)
        if not m:
            above = []
            continue
        indent, key, rest = len(m.group(1)), m.group(2).strip("\"'"), m.group(3)
        while stack and stack[-1][0] >= indent:
            stack.pop()
        dotted = ".".join([k for _, k in stack] + [key])
        inline = rest.split(" #", 1)[1].strip() if " #" in rest else ""
        out.append((dotted, " ".join([*above, inline]).strip()))
        stack.append((indent, key))
        above = []
    return out


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


@pytest.mark.parametrize("name", FILES)
def test_no_yaml_comment_repeats_the_schema_description(name: str) -> None:
    schema = _schema(name)
    repeated = []
    for dotted, comment in _commented_keys((RULES / f"{name}.yaml").read_text("utf-8")):
        described = rule_meaning.description(schema, dotted)
        if comment and described:
            a, b = _words(comment), _words(described)
            if difflib.SequenceMatcher(None, a, b).ratio() >= 0.8 or len(b) > 40 and b in a:
                repeated.append((dotted, comment))
    assert repeated == []


def test_the_comment_reader_sees_above_and_inline_comments() -> None:
    text = "# top\nsection:\n  # what a is\n  a: 1   # unit\n  b: 2\nc: [x]\n"
    assert _commented_keys(text) == [("section", "top"), ("section.a", "what a is unit"), ("section.b", ""),
                                     ("c", "")]


OUTSIDE = re.compile(r"(?<!\.)\.\./|\b(?:DOMAIN|PEER|DESIGN|FORMATS|STYLE)\.md\b|\bshared/")
CITED = re.compile(r"\b((?:docs|tests|advisor|knowledge_bases|rules)/[A-Za-z0-9_./<>-]+\.(?:md|py|yaml|json|txt))\b")


@pytest.mark.parametrize("path", sorted([*RULES.glob("*.yaml"), *(RULES / "schema").glob("*.json")]),
                         ids=lambda p: p.name)
def test_no_rules_file_cites_a_document_outside_the_repository(path: Path) -> None:
    text = path.read_text("utf-8")
    assert OUTSIDE.findall(text) == []
    missing = [c for c in CITED.findall(text) if "<" not in c and not (REPO / c).exists()]
    assert missing == []


def test_explain_shows_the_schema_description_of_each_threshold() -> None:
    res = CliRunner().invoke(main, ["explain", "cluster.comm-bottleneck", "--format", "json"])
    (threshold,) = [t for t in json.loads(res.output)["rules"][0]["thresholds"] if t["key"] == "bottleneck"]
    schema = _schema("cluster")["properties"]["bottleneck"]["properties"]
    assert threshold["meaning"]["bottleneck.max_findings"] == schema["max_findings"]["description"]
    text = CliRunner().invoke(main, ["explain", "cluster.comm-bottleneck"]).output
    assert "What they mean (rules/schema/cluster.schema.json)" in text
    assert "bottleneck.tie_us: ... or within this many microseconds." in text
