"""Terminal output at the width the user has (issue 31.5 f): one console factory honouring COLUMNS down to 80
columns, numbers never parted from their units."""

from __future__ import annotations

import re

import pytest

from advisor.cli.console import MIN_WIDTH, PIPED_WIDTH, console_width, make_console
from advisor.fix.rewrites import REWRITES


def test_width_follows_columns_down_to_80(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "100")
    assert console_width() == 100 == make_console().width
    monkeypatch.setenv("COLUMNS", "40")
    assert console_width() == MIN_WIDTH
    monkeypatch.delenv("COLUMNS")
    assert console_width() == PIPED_WIDTH  # pytest's stdout is not a terminal


def test_fix_listing_at_80_columns(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("fix")
    assert code == 0
    lines = out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    for name in REWRITES:
        assert any(line.strip().startswith(name) for line in lines), name
    # the description column is wide enough for sentences: no line of it holds a single short word
    desc = [line[36:].strip() for line in lines[4:] if line[36:].strip()]
    assert sum(len(d.split()) == 1 for d in desc) <= len(desc) // 4, desc


def test_analyze_at_80_columns_keeps_numbers_whole(cli, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "80")
    code, out, _ = cli("analyze", "--example", "--quiet")
    assert code in (0, 1), out
    lines = out.splitlines()
    assert max(len(line.rstrip()) for line in lines) <= 80
    # no line ends in a bare number whose unit starts the next line
    for a, b in zip(lines, lines[1:], strict=False):
        assert not (re.search(r"\d$", a.rstrip(" │")) and re.match(r"\s*│?\s*(ms|µs|s|%|GB|MB)\b", b)), (a, b)
