"""A failing plugin is reported at its own file and line, not at the library frame that raised."""

from __future__ import annotations

import importlib
import textwrap
from pathlib import Path

import pytest

from advisor.engine.plugin_location import where
from advisor.testing import make_profile, run_kb

KB_SOURCE = '''
from advisor.kb import KnowledgeBase, RuleDoc, rule


def helper(ops):
    return ops["no_such_column"].sum()  # raises KeyError inside pandas


class Broken(KnowledgeBase):
    id = "broken-kb"
    title = "Broken"
    version = "0.1.0"
    api_version = "1"
    requires = ("ops",)

    @rule(RuleDoc(id="broken-kb.rule", title="t", what="w", why="y", how_to_fix="f"))
    def check(self, ctx):
        yield from []
        helper(ctx.profile.ops)
'''


@pytest.fixture
def broken_package(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    package = tmp_path / "broken_pkg"
    package.mkdir()
    (package / "__init__.py").write_text("", encoding="utf-8")
    (package / "kb.py").write_text(textwrap.dedent(KB_SOURCE), encoding="utf-8")
    monkeypatch.syspath_prepend(str(tmp_path))
    return package / "kb.py"


def _line_of(path: Path, text: str) -> int:
    return next(i for i, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1) if text in line)


def test_the_last_frame_inside_the_plugin_package_is_named(broken_package: Path) -> None:
    module = importlib.import_module("broken_pkg.kb")
    with pytest.raises(KeyError) as raised:
        module.helper(make_profile([{"name": "a", "type": "Add", "duration_us": 1.0}]).ops)
    assert raised.traceback[-1].path.name != "kb.py"  # pandas raised it
    line = _line_of(broken_package, 'ops["no_such_column"]')
    assert where(raised.value, "broken_pkg.kb") == f" at broken_pkg/kb.py:{line}"
    assert where(raised.value, "broken_pkg") == f" at broken_pkg/kb.py:{line}"
    # without knowing the plugin: the innermost frame, as before
    assert where(raised.value).startswith(f" at {Path(raised.traceback[-1].path).name}:")


def test_a_knowledge_base_failing_in_the_engine_names_its_line(broken_package: Path) -> None:
    cls = importlib.import_module("broken_pkg.kb").Broken
    profile = make_profile([{"name": "a", "type": "Add", "duration_us": 1.0}])
    line = _line_of(broken_package, 'ops["no_such_column"]')
    with pytest.raises(AssertionError, match=rf"raised KeyError: 'no_such_column' at broken_pkg/kb\.py:{line}\b"):
        run_kb(cls, profile)
