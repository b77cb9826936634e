"""Errors the CLI turns into one line on stderr and exit code 2 (never a traceback)."""

from __future__ import annotations

from pathlib import Path


class AdvisorError(Exception):
    """Base class of every error reported to the user as one line."""

    exit_code = 2


class InputError(AdvisorError):
    """An input file or directory cannot be used: it names the path and what is wrong."""

    def __init__(self, path: str | Path, problem: str) -> None:
        self.path = str(path)
        self.problem = problem
        super().__init__(f"{self.path}: {problem}")


class RulesError(AdvisorError):
    """A rules file (built-in, --rules, or pyproject [tool.advisor]) is invalid."""

    def __init__(self, path: str | Path, key: str, problem: str) -> None:
        self.path = str(path)
        self.key = key
        self.problem = problem
        where = f" at '{key}'" if key else ""
        super().__init__(f"{self.path}{where}: {problem}")


class UsageError(AdvisorError):
    """The command line asks for something that cannot be done (unknown KB id, bad option value)."""
