"""``advisor explain RULE | KB_ID | score``: a rule's documentation with its effective thresholds, every rule of a
knowledge base, or the score formula."""

from __future__ import annotations

import difflib
import json
import re
import textwrap
from pathlib import Path
from typing import Any

import click

from advisor.cli.rules_cmd import align, leaf_lines, source_label
from advisor.common.errors import UsageError
from advisor.common.escaping import terminal
from advisor.config import rule_aliases, rule_meaning
from advisor.config.loader import EffectiveRules, load_schema, rules_name
from advisor.engine import kb_engine as engine
from advisor.kb import RuleDoc
from advisor.pipeline.hierarchy import mechanisms_of

WIDTH = 100


_RST_LITERAL = re.compile(r"``(.+?)``")
_RST_ROLE = re.compile(r":[a-z]+:`~?([^`]+)`")


def plain_text(text: str) -> str:
    """Docstring reStructuredText as a terminal shows it: ``literal`` and :role:`name` as the bare text, a
    paragraph's closing ``::`` as ``:`` (a lone ``::`` line dropped)."""
    text = _RST_ROLE.sub(r"\1", _RST_LITERAL.sub(r"\1", text))
    lines = []
    for line in text.splitlines():
        if line.strip() == "::":
            continue
        lines.append(re.sub(r"\s*::$", ":", line) if line.rstrip().endswith("::") else line)
    return "\n".join(lines)


def _para(text: str, indent: str = "  ") -> str:
    """Wrap each paragraph of ``text`` (blank-line separated); keep indented/code lines as they are."""
    out: list[str] = []
    for block in textwrap.dedent(plain_text(text)).strip().split("\n\n"):
        lines = block.splitlines()
        if any(ln.startswith(("  ", "\t", "-", "*")) for ln in lines[1:]) or block.lstrip().startswith(("-", "*")):
            out.append("\n".join(indent + ln for ln in lines))
        else:
            out.append(textwrap.fill(" ".join(ln.strip() for ln in lines), WIDTH, initial_indent=indent,
                                     subsequent_indent=indent))
    return "\n\n".join(out)


def thresholds(rule: RuleDoc, info: engine.KBInfo, eff: EffectiveRules | None) -> list[dict[str, Any]]:
    """Each threshold the rule reads, with its effective value, where that value came from and what it means (the
    ``description`` of its key and of the keys under it in the rules file's schema: stated once, there)."""
    out: list[dict[str, Any]] = []
    name = rules_name(info.cls.rules_file) if info.cls.rules_file else None
    for key in rule.thresholds:
        entry: dict[str, Any] = {"key": key, "value": None, "source": ""}
        if eff is None or name is None or not eff.has(name):
            entry["source"] = f"rules file '{name}' not loaded" if name else "the knowledge base has no rules file"
        else:
            try:
                entry["value"] = eff.lookup(name, key)[0]
                entry["meaning"] = rule_meaning.descriptions(load_schema(eff.files[name]), key, entry["value"])
                labels = sorted({source_label(eff, name, src) for k, src in eff.sources.get(name, {}).items()
                                 if k == key or k.startswith(key + ".")})
                entry["source"] = labels[0] if len(labels) == 1 else "several: " + ", ".join(labels)
            except KeyError:
                entry["source"] = f"not set in rules file '{name}'"
        out.append(entry)
    return out


def rule_dict(rule: RuleDoc, info: engine.KBInfo, eff: EffectiveRules | None) -> dict[str, Any]:
    if eff is not None and info.cls.rules_file and eff.has(info.cls.rules_file):
        rule = rule.render(eff.for_kb(info.cls.rules_file))  # the prose cites the values in effect
    return {"id": rule.id, "role": rule.role, "title": rule.title, "kb": info.id, "what": rule.what, "why": rule.why,
            "how_to_fix": rule.how_to_fix, "thresholds": thresholds(rule, info, eff), "needs": list(rule.needs),
            "example": rule.example, "explains": dict(mechanisms_of([rule]).get(rule.id, {}))}


def kb_dict(info: engine.KBInfo) -> dict[str, Any]:
    cls = info.cls
    return {"id": cls.id, "title": cls.title, "version": cls.version, "package": info.package,
            "package_version": info.package_version, "requires": list(cls.requires),
            "requires_any": list(cls.requires_any),
            "rules_file": rules_name(cls.rules_file) if cls.rules_file else None,
            "doc": (cls.__doc__ or "").strip()}


def render_rule(r: dict[str, Any], kb: dict[str, Any], eff: EffectiveRules | None) -> str:
    package = " ".join(p for p in (kb["package"], kb["package_version"]) if p)
    lines = [f"{r['id']}: {r['title']}",
             f"  knowledge base {kb['id']} {kb['version']}" + (f" ({package})" if package else ""), ""]
    for heading, key in (("What it does", "what"), ("Why it matters", "why"), ("How to fix it", "how_to_fix")):
        lines += [heading, _para(r[key] or "(not documented)"), ""]
    if r["thresholds"]:
        where = f" (rules file {kb['rules_file']})" if kb["rules_file"] else ""
        lines.append(f"Thresholds{where}")
        shown: list[tuple[str, str]] = []
        for t in r["thresholds"]:
            if t["value"] is None or eff is None:
                shown.append((f"  {t['key']}", t["source"]))
            elif isinstance(t["value"], dict) and t["value"]:
                shown.append((f"  {t['key']}:", ""))
                shown.extend(leaf_lines(eff, kb["rules_file"], t["value"], t["key"] + ".", 4))
            else:
                shown.extend(leaf_lines(eff, kb["rules_file"], {t["key"]: t["value"]}, "", 2))
        lines += align(shown, cap=60)
        lines.append("")
        meanings = [(k, text) for t in r["thresholds"] for k, text in (t.get("meaning") or {}).items()]
        if meanings:
            lines.append(f"What they mean (rules/schema/{kb['rules_file']}.schema.json)")
            lines += [textwrap.fill(f"{k}: {text}", WIDTH, initial_indent="  ", subsequent_indent="    ")
                      for k, text in meanings]
            lines.append("")
    if r.get("explains"):
        lines.append("Symptoms its fix removes")
        for symptom, how in r["explains"].items():
            lines += [f"  {symptom}"] + ([_para(how, "    ")] if how else [])
        lines.append("")
    lines += ["Data it needs", "  " + (", ".join(r["needs"]) or "-"), ""]
    if r["example"]:
        lines += ["Example", _para(r["example"]), ""]
    return "\n".join(lines)


def render_kb(kb: dict[str, Any], rules: list[dict[str, Any]], eff: EffectiveRules | None) -> str:
    package = " ".join(p for p in (kb["package"], kb["package_version"]) if p)
    requires = "; ".join(p for p in (", ".join(kb["requires"]),
                                     "one of " + ", ".join(kb["requires_any"]) if kb["requires_any"] else "") if p)
    head = [f"{kb['id']}: {kb['title']}", f"  version {kb['version']}" + (f", package {package}" if package else ""),
            f"  requires: {requires or '-'}", f"  rules file: {kb['rules_file'] or '-'}"]
    if kb["doc"]:
        head += ["", _para(kb["doc"])]
    head += ["", f"{len(rules)} rule(s):", ""]
    body = [render_rule(r, kb, eff) for r in rules]
    return "\n".join(head) + "\n" + "\n".join(body)


def _index(infos: list[engine.KBInfo]) -> tuple[dict[str, tuple[RuleDoc, engine.KBInfo]], dict[str, engine.KBInfo]]:
    rules = {r.id: (r, info) for info in infos for r in info.cls.rules}
    return rules, {info.id: info for info in infos}


def _explain_renamed(old: str, current: list[str], rules: dict[str, tuple[RuleDoc, engine.KBInfo]],
                     eff: EffectiveRules, fmt: str) -> None:
    """A former rule id (rules/aliases.yaml): says what replaced it, then explains the current rule(s)."""
    said = (f"{old} was renamed: it is now {current[0]}" if len(current) == 1 else
            f"{old} was split: its findings are now reported by {', '.join(current)}")
    said += " (rules/aliases.yaml; waivers and advisor compare accept the former id)"
    docs = [(rule_dict(rules[r][0], rules[r][1], eff), kb_dict(rules[r][1])) for r in current]
    if fmt == "json":
        click.echo(json.dumps({"topic": "rule", "renamed": {"from": old, "to": current, "note": said},
                               "knowledge_base": docs[0][1], "rules": [r for r, _ in docs]},
                              indent=2, ensure_ascii=False))
        return
    click.echo(terminal("\n\n".join([said, *(render_rule(r, kb, eff).rstrip() for r, kb in docs)])))


@click.command("explain")
@click.argument("topic", metavar="RULE|KB_ID|score")
@click.option("--rules", "rules_file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="YAML override file, as given to advisor analyze --rules (thresholds are shown with it applied).")
@click.option("--ecosystem", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="A MindStudio ecosystem.json whose legacy knowledge bases to include.")
@click.option("--format", "fmt", type=click.Choice(["terminal", "json"]), default="terminal", show_default=True,
              help="Output format.")
def command(topic: str, rules_file: Path | None, ecosystem: Path | None, fmt: str) -> None:
    """Explain a rule (what it detects, why it matters, how to fix it, its thresholds and their effective values),
    every rule of a knowledge base, or the score formula (advisor explain score)."""
    if topic == "score":
        from advisor.pipeline.score import FORMULA

        text = textwrap.dedent(FORMULA).strip()
        click.echo(json.dumps({"topic": "score", "formula": text}, indent=2) if fmt == "json" else plain_text(text))
        return
    found = engine.find_plugins()
    infos = engine.discover(found)
    if ecosystem is not None:
        from advisor.engine.msadvisor_ecosystem import load_ecosystem

        infos += [engine.KBInfo(cls, "ecosystem", str(ecosystem), "") for cls in load_ecosystem(ecosystem)]
    rules, kbs = _index(infos)
    eff = engine.load_rules(found, rules_file)
    renamed = [r for r in rule_aliases.current_ids(topic, rule_aliases.from_values(
        eff.values.get(rule_aliases.ALIASES_FILE))) if r in rules] if topic not in rules else []
    if renamed:
        _explain_renamed(topic, renamed, rules, eff, fmt)
        return
    if topic not in rules and topic not in kbs:
        choices = sorted([*rules, *kbs, "score"])
        close = difflib.get_close_matches(topic, choices, n=3, cutoff=0.5)
        hint = f"; did you mean {' or '.join(close)}?" if close else \
            f" (known: {', '.join(sorted(kbs)) or 'no knowledge base installed'}, or 'score')"
        raise UsageError(f"no rule or knowledge base '{topic}'{hint}")
    if topic in rules:
        rule, info = rules[topic]
        r, kb = rule_dict(rule, info, eff), kb_dict(info)
        click.echo(json.dumps({"topic": "rule", "knowledge_base": kb, "rules": [r]}, indent=2, ensure_ascii=False)
                   if fmt == "json" else terminal(render_rule(r, kb, eff).rstrip()))
        return
    info = kbs[topic]
    kb = kb_dict(info)
    rs = [rule_dict(rule, info, eff) for rule in info.cls.rules]
    click.echo(json.dumps({"topic": "knowledge_base", "knowledge_base": kb, "rules": rs}, indent=2,
                          ensure_ascii=False) if fmt == "json" else terminal(render_kb(kb, rs, eff).rstrip()))
