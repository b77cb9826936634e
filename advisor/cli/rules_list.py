"""``advisor rules list``: every rule id of the installed knowledge bases (core and plugins), with its knowledge
base, the severities it can be given and a one-line summary, like ``ruff rule --all``.

A finding's severity comes from the share of the analyzed window its saving is (``advisor.pipeline.hierarchy.reseverity``):
the thresholds of its knowledge base's ``severity`` levels in its rules file, else those of ``rules/findings.yaml``.
A level whose threshold is above the whole window can never be reached, so the range shown is the one the rules in
force allow; a finding with no measured saving is ``info``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from advisor.common.escaping import terminal
from advisor.common.provenance import CORE_DISTRIBUTION
from advisor.config.loader import EffectiveRules, rules_name
from advisor.engine import kb_engine as engine

_LEVELS = ("critical", "major", "minor")


def severity_range(levels: Mapping[str, Any] | None) -> dict[str, Any]:
    """``{"min": "info", "max": ..., "levels": {severity: share of the window}}`` for a knowledge base's
    ``severity`` levels (None: no levels, the severity the knowledge base itself gives, any)."""
    if not levels:
        return {"min": "info", "max": "critical", "levels": {}}
    reachable = [s for s in _LEVELS if s in levels and float(levels[s]) <= 1.0]
    return {"min": "info", "max": reachable[0] if reachable else "info",
            "levels": {s: float(levels[s]) for s in _LEVELS if s in levels}}


def rule_rows(infos: list[engine.KBInfo], eff: EffectiveRules) -> list[dict[str, Any]]:
    """One row per rule id, sorted by id: the rules of the knowledge bases as :func:`engine.discover` found them."""
    default = eff.for_kb("findings").get("severity")
    rows = []
    for info in infos:
        cls = info.cls
        values = eff.for_kb(cls.rules_file) if cls.rules_file and eff.has(cls.rules_file) else {}
        own = values.get("severity") if isinstance(values.get("severity"), Mapping) else None
        levels_from = (rules_name(cls.rules_file) if own else "findings") if (own or default) else ""
        for rule in cls.rules:
            shown = rule.render(values) if values else rule
            rows.append({"id": rule.id, "kb": info.id, "kb_version": cls.version,
                         "source": "core" if info.package in ("", CORE_DISTRIBUTION) else "plugin",
                         "package": info.package, "role": rule.role,
                         "severity": {**severity_range(own or default), "levels_from": levels_from},
                         "summary": " ".join(shown.title.split())})
    return sorted(rows, key=lambda r: r["id"])


def render_table(rows: list[dict[str, Any]]) -> str:
    """Aligned columns: rule, knowledge base, severities, summary."""
    def sev(r: dict[str, Any]) -> str:
        s = r["severity"]
        return s["min"] if s["min"] == s["max"] else f"{s['min']}..{s['max']}"

    table = [("rule", "knowledge base", "severity", "summary"),
             *((r["id"], r["kb"] + (f" ({r['package']})" if r["source"] == "plugin" else ""), sev(r), r["summary"])
               for r in rows)]
    widths = [max(len(row[i]) for row in table) for i in range(3)]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row[:3], widths, strict=True)) + "  " + row[3]
             for row in table]
    return "\n".join(line.rstrip() for line in lines) + f"\n\n{len(rows)} rules. advisor explain RULE tells more.\n"


@click.command("list")
@click.option("--rules", "rules_file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="YAML override file, as given to advisor analyze --rules (severity levels with it applied).")
@click.option("--format", "fmt", type=click.Choice(["terminal", "json"]), default="terminal", show_default=True,
              help="Output format.")
def list_command(rules_file: Path | None, fmt: str) -> None:
    """List every rule of the installed knowledge bases (core and plugins): id, knowledge base, the severities
    it can reach with the rules in force, and a one-line summary."""
    found = engine.find_plugins()
    infos = engine.discover(found)
    rows = rule_rows(infos, engine.load_rules(found, rules_file))
    if fmt == "json":
        click.echo(json.dumps({"rules": rows}, indent=2, ensure_ascii=False))
    else:
        click.echo(terminal(render_table(rows)), nl=False)
