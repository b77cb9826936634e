"""``advisor kb``: list the installed knowledge bases and where they came from; scaffold a new one."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from advisor.cli.console import make_console
from advisor.common.errors import RulesError, UsageError
from advisor.common.escaping import rich_text
from advisor.config.loader import RULES_SUFFIX, builtin_rules_dir, load_rules_file, rules_name
from advisor.engine import kb_engine as engine


@click.group("kb")
def command() -> None:
    """Knowledge bases: list what is installed, scaffold a new one."""


def _requires(requires: list[str], requires_any: list[str]) -> str:
    text = ", ".join(requires)
    if requires_any:
        text = (text + "; " if text else "") + "one of " + ", ".join(requires_any)
    return text


def _rules_status(name: str, dirs: list[Path]) -> str:
    """``ok``, or why the knowledge base's rules file would stop ``advisor analyze``: missing, or invalid against
    its schema (a plugin's file is validated at every analysis; the built-in ones by the test suite)."""
    path = next((d / f"{name}{RULES_SUFFIX}" for d in dirs if (d / f"{name}{RULES_SUFFIX}").is_file()), None)
    if path is None:
        return f"failed to load: rules file '{name}{RULES_SUFFIX}' not found in any rules directory"
    if path.parent.resolve() == builtin_rules_dir().resolve():
        return "ok"
    try:
        load_rules_file(path)
    except RulesError as e:
        where = f" at '{e.key}'" if e.key else ""
        return f"invalid rules: {e.path}{where}: {e.problem}"
    return "ok"


def installed(found: engine.Discovery | None = None) -> list[dict[str, Any]]:
    """One row per knowledge base (and per plugin that failed to load), as ``advisor kb list`` shows them."""
    found = found or engine.find_plugins()
    infos = engine.discover(found)
    dirs = engine.rules_dirs(found)
    rows: list[dict[str, Any]] = []
    for info in infos:
        cls = info.cls
        problem = engine.api_mismatch(cls.api_version)
        status = "ok" if problem is None else f"failed to load: {problem}"
        if problem is None and cls.rules_file:
            status = _rules_status(rules_name(cls.rules_file), dirs)
        rows.append({
            "id": cls.id, "title": cls.title, "version": cls.version, "package": info.package,
            "package_version": info.package_version, "plugin": info.plugin,
            "module": cls.__module__, "api_version": str(cls.api_version),
            "requires": list(cls.requires), "requires_any": list(cls.requires_any),
            "rules_file": rules_name(cls.rules_file) if cls.rules_file else None,
            "rules": [r.id for r in cls.rules],
            "status": status,
        })
    for name, reason in sorted(found.errors.items()):
        package, version = found.package_of(name)
        rows.append({"id": name, "title": "", "version": "", "package": package, "package_version": version,
                     "plugin": name, "module": "", "api_version": "", "requires": [], "requires_any": [],
                     "rules_file": None, "rules": [], "status": f"failed to load: {reason}"})
    return rows


@command.command("list")
@click.option("--format", "fmt", type=click.Choice(["terminal", "json"]), default="terminal", show_default=True,
              help="Output format.")
def list_command(fmt: str) -> None:
    """List installed knowledge bases: id, version, package, required data, status."""
    rows = installed()
    if fmt == "json":
        click.echo(json.dumps({"knowledge_bases": rows}, indent=2))
        return
    from rich.table import Table

    table = Table(show_lines=False, pad_edge=False, box=None, header_style="bold")
    for col in ("id", "version", "package", "requires", "status"):
        table.add_column(col, overflow="fold")
    for r in rows:
        package = " ".join(p for p in (r["package"], r["package_version"]) if p) or "-"
        requires = _requires(r["requires"], r["requires_any"])
        status = r["status"] if r["status"] == "ok" else f"[red]{rich_text(r['status'])}[/red]"
        table.add_row(*(rich_text(c) for c in (r["id"], r["version"] or "-", package, requires or "-")), status)
    console = make_console()
    if not rows:
        console.print("no knowledge bases installed (plugins register in the entry-point group "
                      f"'{engine.ENTRY_POINT_GROUP}')")
        return
    console.print(table)


@command.command("new")
@click.argument("name")
@click.option("--dir", "parent", type=click.Path(path_type=Path, file_okay=False), default=Path("."),
              show_default=True, help="Directory in which to create the NAME/ project folder.")
def new_command(name: str, parent: Path) -> None:
    """Create NAME/: a pip-installable knowledge-base package with one rule, its rules file, a README and a test.

    NAME is the knowledge base id, in kebab-case (e.g. my-kb).
    """
    from advisor import scaffold

    kb_id = scaffold.normalize_name(name)
    if kb_id != name:
        click.echo(f"advisor: knowledge-base name '{name}' normalized to '{kb_id}' (kebab-case id, folder {kb_id}/, "
                   f"Python package {kb_id.replace('-', '_')})", err=True)
    taken = {info.id: info for info in engine.discover()}
    if kb_id in taken:
        info = taken[kb_id]
        raise UsageError(f"a knowledge base '{kb_id}' is already installed (from {info.package or info.plugin}); "
                         "choose another name")
    target = scaffold.create(kb_id, parent)
    values = scaffold.variables(kb_id)
    shown = str(target) if target.is_absolute() or str(target).startswith(".") else f"./{target}"
    click.echo(f"created {shown}/ with knowledge base '{kb_id}' and rule '{values['rule_id']}'")
    click.echo("next:")
    click.echo(f"  pip install -e '{shown}[test]'   # into the environment advisor is installed in (it needs "
               "ascend-advisor, which is not on PyPI)")
    click.echo(f"  pytest {shown}")
    click.echo(f"  advisor kb list                # {kb_id} ... ok")
    click.echo(f"  advisor analyze --example      # the built-in example: {values['rule_id']} reports its transposes")
