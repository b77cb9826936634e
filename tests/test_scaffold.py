"""``advisor kb new``: the generated package, its rules and its own test; end to end in a fresh venv (slow)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor import __version__
from advisor.cli import main
from advisor.errors import UsageError
from advisor.scaffold import create, normalize_name

REPO = Path(__file__).resolve().parents[1]


def test_names_are_normalized_or_refused() -> None:
    assert normalize_name("My_KB") == "my-kb"
    for bad in ("9lives", "a--b", "json", "rules", "über", ""):
        with pytest.raises(UsageError):
            normalize_name(bad)


def test_new_writes_an_installable_package(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["kb", "new", "hot-ops", "--dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    root = tmp_path / "hot-ops"
    files = sorted(str(p.relative_to(root)) for p in root.rglob("*") if p.is_file())
    assert files == [".gitignore", "README.md", "pyproject.toml", "src/hot_ops/__init__.py", "src/hot_ops/kb.py",
                     "src/hot_ops/rules/hot-ops.yaml", "src/hot_ops/rules/schema/hot-ops.schema.json",
                     "tests/test_hot_ops.py"]
    pyproject = (root / "pyproject.toml").read_text(encoding="utf-8")
    assert '[project.entry-points."advisor.knowledge_bases"]\nhot-ops = "hot_ops"' in pyproject
    assert f'"ascend-advisor>={__version__},<' in pyproject
    assert 'hot_ops = ["rules/*.yaml", "rules/schema/*.json"]' in pyproject
    assert "$" not in (root / "src/hot_ops/kb.py").read_text(encoding="utf-8")
    json.loads((root / "src/hot_ops/rules/schema/hot-ops.schema.json").read_text(encoding="utf-8"))
    # a second time into the same place is refused
    res = CliRunner().invoke(main, ["kb", "new", "hot-ops", "--dir", str(tmp_path)])
    assert res.exit_code == 2 and "already exists" in res.output


def test_generated_tests_pass_against_the_source_tree(tmp_path: Path) -> None:
    """The scaffold's own tests (all but the one that needs `pip install`) pass as generated."""
    root = create("hot-ops", tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(REPO)])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests"),
                           "-k", "not installed"], capture_output=True, text=True, env=env, cwd=root, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout


# ---------------------------------------------------------------------------------------------------------
# end to end: fresh venv, pip install advisor, scaffold, pip install the scaffold, its test, kb list, analyze
# ---------------------------------------------------------------------------------------------------------
def _copy_project(dest: Path) -> Path:
    """The files a build needs, so that building never writes into the working tree."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.pyc")
    for name in ("advisor", "knowledge_bases", "rules"):
        shutil.copytree(REPO / name, dest / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, dest / name)
    if not (dest / "README.md").exists():  # pyproject names it as the long description
        (dest / "README.md").write_text("advisor\n", encoding="utf-8")
    return dest


def _run(cmd: list[str], **kwargs: object) -> subprocess.CompletedProcess[str]:
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, **kwargs)  # type: ignore[call-overload]
    assert proc.returncode == 0, f"{' '.join(map(str, cmd))} failed:\n{proc.stdout}\n{proc.stderr}"
    return proc


@pytest.mark.slow
def test_scaffold_end_to_end_in_a_fresh_venv(tmp_path: Path) -> None:
    started = time.perf_counter()
    venv = tmp_path / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    bindir = venv / ("Scripts" if os.name == "nt" else "bin")
    py = bindir / "python"
    # Third-party dependencies (pandas, pyarrow..., and pip/setuptools to install with) come from the environment
    # running this test, through a .pth file, to keep the test fast and offline; advisor itself and the plugin are
    # really built and installed into the new venv.
    site = Path(_run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"]).stdout.strip())
    ours = {sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]}
    (site / "_parent_env.pth").write_text("\n".join(sorted(ours)) + "\n", encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    pip = [str(py), "-m", "pip", "install", "--no-index", "--no-build-isolation", "-q"]

    _run([*pip, str(_copy_project(tmp_path / "advisor-src"))], env=env, cwd=tmp_path)
    where = _run([str(py), "-c", "import advisor; print(advisor.__file__)"], env=env, cwd=tmp_path).stdout
    assert str(venv) in where, "advisor must be imported from the new venv, not the source tree"
    # nothing generic at the top level of site-packages: the built-ins install under advisor's namespace
    installed = {p.name for p in site.iterdir() if not p.name.endswith((".dist-info", ".pth"))}
    assert installed >= {"advisor"} and not installed & {"knowledge_bases", "rules"}, sorted(installed)
    assert (site / "advisor" / "builtin_rules" / "platforms.yaml").is_file()
    explained = _run([str(bindir / "advisor"), "explain", "transdata.count"], env=env, cwd=tmp_path).stdout
    assert explained.startswith("transdata.count: ") and "knowledge base transdata" in explained

    work = tmp_path / "work"
    work.mkdir()
    _run([str(bindir / "advisor"), "kb", "new", "my-kb", "--dir", str(work)], env=env, cwd=work)
    _run([*pip, str(work / "my-kb")], env=env, cwd=work)

    # the scaffold's own test passes, against the installed package
    test = _run([str(py), "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests"], env=env, cwd=work / "my-kb")
    assert "4 passed" in test.stdout

    listed = json.loads(_run([str(bindir / "advisor"), "kb", "list", "--format", "json"], env=env,
                             cwd=work).stdout)
    mine = next(r for r in listed["knowledge_bases"] if r["id"] == "my-kb")
    assert (mine["status"], mine["package"], mine["package_version"]) == ("ok", "my-kb", "0.1.0")
    assert mine["rules_file"] == "my-kb" and mine["rules"] == ["my-kb.long-op"]

    # its rules file is shipped as package data: rules show knows it
    shown = json.loads(_run([str(bindir / "advisor"), "rules", "show", "my-kb", "--format", "json"], env=env,
                            cwd=work).stdout)
    assert shown["rules"]["my-kb"]["values"] == {"max_op_us": 2000, "major_share": 0.05}

    # analyze the built-in example with a threshold low enough that any op is reported
    override = work / "low.yaml"
    override.write_text("rules:\n  my-kb:\n    max_op_us: 0.001\n", encoding="utf-8")
    report = json.loads(_run([str(bindir / "advisor"), "analyze", "--example", "--format", "json", "--rules",
                              str(override), "--quiet"], env=env, cwd=work).stdout)
    assert any(f["kb"] == "my-kb" and f["rule"] == "my-kb.long-op" for f in report["findings"])
    assert time.perf_counter() - started < 180
