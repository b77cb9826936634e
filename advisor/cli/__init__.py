"""``advisor`` command line: one module per command, collected here.

Every command turns :class:`advisor.errors.AdvisorError` into one line on stderr and exit code 2.
"""

from __future__ import annotations

import importlib
import sys

import click

from advisor import __version__
from advisor.errors import AdvisorError

# module name -> attribute holding a click command (or list of commands)
_COMMAND_MODULES = (
    "analyze",
    "graph_cmd",
    "kb_cmd",
    "rules_cmd",
    "explain_cmd",
    "fix_cmd",
    "compare_cmd",
    "report_cmd",
)


class AdvisorGroup(click.Group):
    """A click group that reports AdvisorError as one line (exit 2) instead of a traceback."""

    def invoke(self, ctx: click.Context) -> object:
        try:
            return super().invoke(ctx)
        except AdvisorError as e:
            click.echo(f"advisor: error: {e}", err=True)
            sys.exit(e.exit_code)
        except KeyboardInterrupt:
            click.echo("advisor: interrupted", err=True)
            sys.exit(130)


@click.group(cls=AdvisorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="advisor")
def main() -> None:
    """Performance advisor for AI models on Huawei Ascend NPUs.

    Start with:  advisor analyze --example
    """


def _register() -> None:
    for name in _COMMAND_MODULES:
        try:
            module = importlib.import_module(f"advisor.cli.{name}")
        except ModuleNotFoundError as e:
            if e.name == f"advisor.cli.{name}":
                continue  # command not part of this build
            raise
        commands = getattr(module, "commands", None) or [module.command]
        for cmd in commands:
            main.add_command(cmd)


_register()
