"""Errors the CLI turns into one line on stderr and exit code 2 (never a traceback)."""

from __future__ import annotations

from pathlib import Path


def one_line(text: str) -> str:
    """A message as one line: parsers (PyYAML, protobuf) put their context on a second line."""
    return " ".join(str(text).split()) if "\n" in str(text) or "\r" in str(text) else str(text)


class AdvisorError(Exception):
    """Base class of every error reported to the user as one line.

    Errors cross process boundaries (ranks analyzed in worker processes): each subclass pickles as the
    arguments of its ``__init__`` (``__reduce__``), since ``Exception`` would rebuild it from the message alone.
    """

    exit_code = 2

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), self.args)


class InputError(AdvisorError):
    """An input file or directory cannot be used: it names the path and what is wrong."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = one_line(problem)
        super().__init__(f"{self.path}: {self.problem}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.problem))


class RulesError(AdvisorError):
    """A rules file (built-in, --rules, or pyproject [tool.advisor]) is invalid."""

    def __init__(self, path: str | Path, key: str, problem: str) -> None:
        self.path = str(path)
        self.key = key
        self.problem = one_line(problem)
        where = f" at '{key}'" if key else ""
        super().__init__(f"{self.path}{where}: {self.problem}")

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (self.path, self.key, self.problem))


class OutputError(InputError):
    """``-o`` cannot be written safely: it is an input, a directory, a device that is not a stream, or under a
    file."""


class UsageError(AdvisorError):
    """The command line asks for something that cannot be done (unknown KB id, bad option value)."""
