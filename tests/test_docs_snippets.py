"""Every code snippet of README.md and docs/*.md runs as written.

What runs, per fenced block:

- ``python`` blocks are executed, each in a fresh namespace, in a scratch folder holding the package that
  ``advisor kb new my-kb`` writes (importable as ``my_kb``, as after ``pip install ./my-kb``); then every
  ``test_*`` function the block defines is called, as pytest would.
- shell blocks (``bash``, ``sh``, ``shell``, ``console`` or no language) run their ``advisor ...`` commands (also
  after ``$ `` and between ``&&``), in that scratch folder, and each must exit 0. The other commands -- ``pip``,
  ``git``, ``python -m venv``, ``pytest`` -- install and test: CI does that (.ci/run) and
  tests/test_scaffold.py does it in a fresh virtual environment.
- any other language (``yaml``, ``toml``, ``json``, ``text``) is data or output and does not run.

Markers, an HTML comment (invisible on the rendered page) on the line right before the opening fence:

- ``<!-- docs-test: skip REASON -->``: the block is not run; REASON says why (placeholders for the user's own
  files, a transcript, steps another test runs). A skip marker on a block with nothing to run is an error.
- ``<!-- docs-test: file NAME -->``: the block is the content of file NAME in the scratch folder, written before
  any block of that page runs (``my.yaml`` of docs/rules.md).
- ``<!-- docs-test: given NAME -->``: the block uses NAME, which this test provides (:data:`GIVEN`).
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import NamedTuple

import pytest
from click.testing import CliRunner

from advisor.cli import main
from advisor.scaffold import create

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
SHELL = {"bash", "sh", "shell", "console", ""}
FENCE = re.compile(r"^```(\w*)[^\n]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"<!--\s*docs-test:\s*(\w+)\s*(.*?)\s*-->\s*$")


def _onnx_model(path: Path) -> None:
    import onnx

    from tests.test_fix_models import conv_bn

    onnx.save(conv_bn(), str(path))


GIVEN: dict[str, Callable[[Path], None]] = {"m.onnx": _onnx_model}
"""Files a snippet may name with ``docs-test: given``: a Conv + BatchNormalization model as ``m.onnx``."""


class Block(NamedTuple):
    page: Path
    line: int
    lang: str
    code: str
    marker: str  # "", "skip", "file" or "given"
    argument: str

    @property
    def where(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    text = page.read_text(encoding="utf-8")
    found = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = text[:m.start()].rstrip("\n").rsplit("\n", 1)[-1]
        marker = MARKER.match(before.strip())
        kind, argument = (marker.group(1), marker.group(2)) if marker else ("", "")
        found.append(Block(page, line, m.group(1).lower(), m.group(2), kind, argument))
    return found


def advisor_commands(code: str) -> list[list[str]]:
    """The ``advisor`` commands of a shell block, as argument lists (comments dropped)."""
    commands = []
    for raw in code.replace("\\\n", " ").splitlines():
        line = raw.strip().removeprefix("$ ")
        for part in line.split("&&"):
            words = shlex.split(part, comments=True)
            if words and words[0] == "advisor":
                commands.append(words[1:])
    return commands


def runnable(block: Block) -> bool:
    if block.lang == "python":
        return True
    return block.lang in SHELL and bool(advisor_commands(block.code))


ALL = [b for page in PAGES for b in blocks(page)]


def test_markers_are_known_and_used_where_they_mean_something() -> None:
    assert len(PAGES) >= 7 and any(runnable(b) for b in ALL)
    for b in ALL:
        assert b.marker in ("", "skip", "file", "given"), f"{b.where}: unknown docs-test marker {b.marker!r}"
        if b.marker == "skip":
            assert b.argument, f"{b.where}: a skip marker says why"
            assert runnable(b), f"{b.where}: skip marker on a block with nothing to run"
        if b.marker == "given":
            assert b.argument in GIVEN, f"{b.where}: nothing provides {b.argument}"


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``my-kb/`` as ``advisor kb new my-kb`` writes it."""
    folder = tmp_path_factory.mktemp("docs")
    create("my-kb", folder)
    return folder


def _page_folder(scratch: Path, page: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    folder = scratch / page.stem
    folder.mkdir(exist_ok=True)
    for b in blocks(page):
        if b.marker == "file":
            (folder / b.argument).write_text(b.code, encoding="utf-8")
    monkeypatch.chdir(folder)
    return folder


def _run_python(block: Block, folder: Path, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    if block.marker == "given":
        GIVEN[block.argument](folder / block.argument)
    monkeypatch.syspath_prepend(str(scratch / "my-kb" / "src"))
    loaded = set(sys.modules)
    namespace: dict[str, object] = {"__name__": f"docs_snippet_{block.page.stem}_{block.line}",
                                    "__file__": str(folder / "snippet.py")}  # as a module of that folder
    try:
        exec(compile(block.code, block.where, "exec"), namespace)  # noqa: S102 - the documentation's own code
        for name, value in list(namespace.items()):
            if name.startswith("test_") and callable(value):
                value()
    finally:
        for name in set(sys.modules) - loaded:
            if name.split(".")[0] == "my_kb":
                del sys.modules[name]


RUN = [pytest.param(b, id=b.where) for b in ALL if runnable(b) and b.marker != "skip"]


@pytest.mark.parametrize("block", RUN)
def test_snippet_runs(block: Block, scratch: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = _page_folder(scratch, block.page, monkeypatch)
    if block.lang == "python":
        _run_python(block, folder, scratch, monkeypatch)
        return
    for args in advisor_commands(block.code):
        result = CliRunner().invoke(main, args, catch_exceptions=False)
        assert result.exit_code == 0, f"{block.where}: advisor {shlex.join(args)} exited {result.exit_code}:\n" \
                                      f"{result.stdout[-2000:]}\n{result.stderr[-2000:]}"


def test_the_snippets_cover_every_page_with_code() -> None:
    """Each page with a runnable block has at least one that runs: skipping a whole page needs a reason per block."""
    pages = {b.page for b in ALL if runnable(b)}
    ran = {b.page for b in ALL if runnable(b) and b.marker != "skip"}
    skipped_only = {p.name for p in pages - ran}
    assert skipped_only <= {"cluster.md"}, skipped_only  # cluster.md's commands all need a job folder or a cluster
