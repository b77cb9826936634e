"""``advisor`` command line: one module per command, collected here.

Every command turns :class:`advisor.common.errors.AdvisorError` into one line on stderr and exit code 2; so are usage
errors, OS errors on a path and input nested too deeply to parse. Whatever else escapes is a bug of advisor: one
line, exit code 4 (``ADVISOR_TRACEBACK=1`` shows the traceback). Nothing prints a traceback on any input.

May import every stage; nothing imports the CLI.
"""

from __future__ import annotations

import atexit
import errno
import importlib
import os
import sys
import threading
import traceback
import warnings

import click

from advisor import __version__
from advisor.common.errors import AdvisorError
from advisor.common.escaping import terminal_line

EXIT_INTERNAL_ERROR = 4
"""An unexpected exception: a bug in advisor, not a property of the input."""


def _fail(message: str, code: int) -> None:
    click.echo(f"advisor: {terminal_line(message)}", err=True)
    sys.exit(code)


def _exit(code: int) -> None:
    """End the process with ``code`` once the report is out, without the interpreter's teardown: freeing the
    millions of objects of a large profile one by one takes seconds nobody waits for. Output is flushed and exit
    handlers run first; inside a test runner (stdout not a real file) or with other threads still working, this is
    an ordinary ``sys.exit``."""
    try:
        sys.stdout.flush()
        sys.stderr.flush()
        sys.stdout.fileno()
    except (OSError, ValueError, AttributeError):  # io.UnsupportedOperation is an OSError
        sys.exit(code)
    others = [t for t in threading.enumerate() if t is not threading.main_thread() and not t.daemon]
    if others or os.environ.get("ADVISOR_SLOW_EXIT"):
        sys.exit(code)
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
        sys.stderr.flush()
    except (OSError, ValueError):
        pass
    os._exit(code)


def _os_error_line(e: OSError) -> str:
    where = e.filename if e.filename is not None else ""
    what = e.strerror or str(e)
    return f"error: {where}: {what}" if where != "" else f"error: {what}"

# command name -> module of advisor.cli whose ``command`` it is; imported when the command runs (or for --help),
# so that ``advisor analyze`` does not load what ``advisor fix`` needs
_COMMAND_MODULES = {
    "analyze": "analyze",
    "graph": "graph_cmd",
    "kb": "kb_cmd",
    "rules": "rules_cmd",
    "explain": "explain_cmd",
    "fix": "fix_cmd",
    "compare": "compare_cmd",
    "report": "report_cmd",
}


class AdvisorGroup(click.Group):
    """A click group that reports AdvisorError as one line (exit 2) instead of a traceback, and imports a
    command's module only when that command is asked for."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *_COMMAND_MODULES})

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name not in self.commands and cmd_name in _COMMAND_MODULES:
            try:
                module = importlib.import_module(f"advisor.cli.{_COMMAND_MODULES[cmd_name]}")
            except ModuleNotFoundError as e:
                if e.name == f"advisor.cli.{_COMMAND_MODULES[cmd_name]}":
                    return None  # command not part of this build
                raise
            self.add_command(module.command, cmd_name)
        return super().get_command(ctx, cmd_name)

    def main(self, *args: object, standalone_mode: bool = True, **kwargs: object) -> object:
        if not standalone_mode:
            return super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[arg-type]
        try:
            rv = super().main(*args, standalone_mode=False, **kwargs)  # type: ignore[arg-type]
        except SystemExit as e:  # a command's own exit code (1: findings at or above --fail-on...)
            _exit(e.code if isinstance(e.code, int) else 0 if e.code is None else 1)
            raise
        except click.UsageError as e:
            hint = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
            _fail(f"error: {e.format_message()}{hint}", 2)
        except click.ClickException as e:
            _fail(f"error: {e.format_message()}", e.exit_code)
        except click.exceptions.Abort:
            _fail("interrupted", 130)
        _exit(rv if isinstance(rv, int) else 0)

    def invoke(self, ctx: click.Context) -> object:
        # numpy/pandas warnings (empty slices, NaN comparisons) are not the user's business on a successful run;
        # the environment carries the filter to rank worker processes and plugin children
        warnings.simplefilter("ignore", RuntimeWarning)
        os.environ["PYTHONWARNINGS"] = ",".join(filter(None, [os.environ.get("PYTHONWARNINGS"),
                                                              "ignore::RuntimeWarning"]))
        try:
            return super().invoke(ctx)
        except AdvisorError as e:
            _fail(f"error: {e}", e.exit_code)
        except (click.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise
        except KeyboardInterrupt:
            _fail("interrupted", 130)
        except BrokenPipeError:
            # the reader of stdout went away (``| head``): stop quietly, as cat does
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            sys.exit(141)
        except OSError as e:
            if e.errno == errno.ENOSPC:
                _fail(f"error: {e.filename or 'output'}: no space left on device", 2)
            _fail(_os_error_line(e), 2)
        except RecursionError:
            _fail("error: input nested too deeply to be read", 2)
        except MemoryError:
            _fail("error: out of memory while reading the input", 2)
        except Exception as e:  # noqa: BLE001 - the last line of defence: one line, never a traceback
            if os.environ.get("ADVISOR_TRACEBACK"):
                traceback.print_exc()
            _fail(f"internal error (a bug in advisor; ADVISOR_TRACEBACK=1 shows where): {type(e).__name__}: {e}",
                  EXIT_INTERNAL_ERROR)
        return None


def _print_version(ctx: click.Context, _param: click.Parameter, value: bool) -> None:
    """``advisor --version``: advisor's version and the plugin API it offers (what a plugin must target)."""
    if not value or ctx.resilient_parsing:
        return
    from advisor.hookspecs import API_VERSION

    click.echo(f"advisor, version {__version__}, plugin API {API_VERSION}")
    ctx.exit()


@click.group(cls=AdvisorGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help="Show the version and the plugin API version, then exit.")
def main() -> None:
    """Performance advisor for AI models on Huawei Ascend NPUs.

    Start with:  advisor analyze --example
    """


