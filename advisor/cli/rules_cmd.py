"""``advisor rules show``: the effective rules (defaults, pyproject ``[tool.advisor]``, ``--rules``) and the source
of every value."""

from __future__ import annotations

import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import click

from advisor.common.errors import UsageError
from advisor.common.escaping import terminal
from advisor.config.loader import EffectiveRules
from advisor.engine import kb_engine as engine


@click.group("rules")
def command() -> None:
    """Rules: thresholds and patterns the knowledge bases read (rules/*.yaml plus your overrides)."""


def short_path(text: str) -> str:
    """A path relative to the current directory when it is inside it (keeps a trailing ``[tool.advisor]``)."""
    path, _, rest = text.partition(" [")
    try:
        rel = os.path.relpath(path)
    except ValueError:
        return text
    shown = rel if not rel.startswith("..") else path
    return shown + (f" [{rest}" if rest else "")


def source_label(eff: EffectiveRules, name: str, source: str) -> str:
    return "default" if eff.is_default(name, source) else short_path(source)


def effective_dict(eff: EffectiveRules, names: list[str]) -> dict[str, Any]:
    """The machine-readable form (``--format json|yaml``)."""
    return {
        "layers": ["defaults", *(short_path(x) for x in eff.layers)],
        "rules": {
            name: {"file": str(eff.files[name]), "values": eff.values[name],
                   "sources": {k: source_label(eff, name, s) for k, s in sorted(eff.sources[name].items())}}
            for name in names
        },
        "platform_overrides": {"values": dict(eff.platform_overrides),
                               "source": short_path(eff.platform_override_source)} if eff.platform_overrides else None,
        "waivers": [{**w.to_dict(), "source": short_path(w.source)} for w in eff.waivers],
    }


def leaf_lines(eff: EffectiveRules, name: str, data: Mapping[str, Any], prefix: str = "",
                indent: int = 2) -> list[tuple[str, str]]:
    """``(text, source)`` per line of a YAML-like listing of ``data`` (values of rules file ``name`` under the
    dotted ``prefix``); mapping headers and list items have no source."""
    lines: list[tuple[str, str]] = []
    sources = eff.sources.get(name, {})
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        pad = " " * indent
        if isinstance(value, Mapping) and value:
            lines.append((f"{pad}{key}:", ""))
            lines.extend(leaf_lines(eff, name, value, dotted + ".", indent + 2))
        else:
            text = json.dumps(value, ensure_ascii=False)
            source = source_label(eff, name, sources.get(dotted, ""))
            if isinstance(value, list) and len(text) > 80:
                # long lists one item a line, so patterns and type lists stay readable
                lines.append((f"{pad}{key}:", source))
                lines.extend((f"{pad}  - {json.dumps(item, ensure_ascii=False)}", "") for item in value)
            else:
                lines.append((f"{pad}{key}: {text}", source))
    return lines


def align(lines: list[tuple[str, str]], cap: int = 72) -> list[str]:
    """Put each line's source in a ``# comment`` column."""
    width = min(cap, max((len(text) for text, src in lines if src), default=0))
    return [f"{text.ljust(width)}  # {src}" if src else text for text, src in lines]


def render_terminal(eff: EffectiveRules, names: list[str]) -> str:
    out: list[str] = ["Rules in force: " + " -> ".join(["defaults", *(short_path(x) for x in eff.layers)])
                      + " (later wins)", ""]
    for name in names:
        out.append(f"{name}  ({short_path(str(eff.files[name]))})")
        out.extend(align(leaf_lines(eff, name, eff.values[name])))
        out.append("")
    if eff.platform_overrides:
        out.append(f"platform overrides  ({short_path(eff.platform_override_source)})")
        for key, value in eff.platform_overrides.items():
            out.append(f"  {'chip' if key == 'soc' else key}: {json.dumps(value)}")
        out.append("")
    if eff.waivers:
        out.append("waivers")
        for w in eff.waivers:
            out.append(f"  {w.rule}  ops {w.ops}: {w.reason}  # {short_path(w.source)}")
        out.append("")
    return "\n".join(out).rstrip() + "\n"


@command.command("show")
@click.argument("names", nargs=-1, metavar="[NAME]...")
@click.option("--rules", "rules_file", type=click.Path(path_type=Path, exists=True, dir_okay=False),
              help="YAML override file, as given to advisor analyze --rules.")
@click.option("--format", "fmt", type=click.Choice(["terminal", "json", "yaml"]), default="terminal",
              show_default=True, help="Output format.")
def show_command(names: tuple[str, ...], rules_file: Path | None, fmt: str) -> None:
    """Print the effective rules and where each value came from (default file, pyproject.toml, --rules).

    NAME limits the output to these rules files (e.g. transdata); default: all of them.
    """
    eff = engine.load_rules(rules_file=rules_file)  # as `advisor analyze` would, from this directory
    unknown = [n for n in names if n not in eff.values]
    if unknown:
        raise UsageError(f"unknown rules file '{unknown[0]}' (known: {', '.join(sorted(eff.values))})")
    chosen = list(names) or sorted(eff.values)
    if fmt == "terminal":
        click.echo(terminal(render_terminal(eff, chosen)), nl=False)
        return
    data = effective_dict(eff, chosen)
    if fmt == "json":
        click.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        import yaml

        click.echo(yaml.safe_dump(data, sort_keys=False, allow_unicode=True), nl=False)


def _register_list() -> None:
    from advisor.cli.rules_list import list_command

    command.add_command(list_command)


_register_list()
