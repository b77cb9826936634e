"""``advisor kb new``: the generated package, its rules and its own test; end to end in a fresh venv (slow)."""

from __future__ import annotations

import csv
import importlib
import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path
from typing import NamedTuple

import pytest
from click.testing import CliRunner

from advisor import __version__
from advisor.cli import main
from advisor.cli.kb_cmd import installed
from advisor.common.errors import UsageError
from advisor.engine import kb_engine as engine
from advisor.scaffold import create, normalize_name

REPO = Path(__file__).resolve().parents[1]


def test_names_are_normalized_or_refused() -> None:
    for given in ("My_KB", "MyKB", "my kb", "myKb", "my-kb"):
        assert normalize_name(given) == "my-kb", given
    assert normalize_name("HTTPServer2") == "http-server2"
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


def test_new_says_when_it_normalizes_the_name(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["kb", "new", "MyKB", "--dir", str(tmp_path)])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["my-kb"]
    assert res.stderr.startswith("advisor: knowledge-base name 'MyKB' normalized to 'my-kb'")
    assert "Python package my_kb" in res.stderr and "knowledge base 'my-kb'" in res.stdout
    res = CliRunner().invoke(main, ["kb", "new", "other-kb", "--dir", str(tmp_path)])
    assert res.exit_code == 0 and res.stderr == ""  # nothing to say when the name is already an id


def test_kb_list_says_when_a_plugin_rules_file_is_invalid(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`advisor analyze` disables a plugin whose rules file is invalid: `advisor kb list` must not say ok."""
    root = create("bad-rules", tmp_path)
    rules = root / "src" / "bad_rules" / "rules" / "bad-rules.yaml"
    monkeypatch.syspath_prepend(str(root / "src"))
    try:
        plugin = importlib.import_module("bad_rules")
        found = engine.find_plugins(entry_points=False)
        found.register(plugin, name="bad-rules")
        assert {r["id"]: r["status"] for r in installed(found)}["bad-rules"] == "ok"
        rules.write_text(rules.read_text(encoding="utf-8").replace("min_share: 0.02", "min_share: 2"),
                         encoding="utf-8")
        status = {r["id"]: r["status"] for r in installed(found)}["bad-rules"]
        assert status == (f"failed to load: its rules are unusable, the plugin is disabled: {rules} at 'min_share': 2 "
                          "is greater than the maximum of 1")
        rules.unlink()
        found = engine.find_plugins(entry_points=False)  # a disabled plugin stays disabled in its discovery
        found.register(plugin, name="bad-rules")
        status = {r["id"]: r["status"] for r in installed(found)}["bad-rules"]
        assert status == "failed to load: rules file 'bad-rules.yaml' not found in any rules directory"
    finally:
        sys.modules.pop("bad_rules", None)


def test_generated_tests_pass_against_the_source_tree(tmp_path: Path) -> None:
    """The scaffold's own tests (all but the one that needs `pip install`) pass as generated."""
    root = create("hot-ops", tmp_path)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root / "src"), str(REPO)])}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(root / "tests"),
                           "-k", "not installed"], capture_output=True, text=True, env=env, cwd=root, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "3 passed" in proc.stdout


# ---------------------------------------------------------------------------------------------------------
# end to end, as README.md and docs/install.md say: advisor's wheel and the scaffold's wheel installed into a fresh
# venv; `advisor kb list` sees the plugin and `advisor analyze --example` runs its rule (slow-ish: ~30 s)
# ---------------------------------------------------------------------------------------------------------
OWN = re.compile(r"(?i)^(advisor|ascend[_-]advisor|__editable__.*ascend_advisor|knowledge_bases$|rules$)")


class Venv(NamedTuple):
    bindir: Path
    site: Path
    dist: Path  # the wheels: advisor's and the scaffold's
    work: Path  # holds my-kb/, as `advisor kb new my-kb` wrote it
    env: dict[str, str]

    def run(self, *args: str, cwd: Path | None = None, ok: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bindir / args[0]), *args[1:]]
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, env=self.env, cwd=cwd or self.work)
        assert not ok or proc.returncode == 0, f"{' '.join(cmd)} failed:\n{proc.stdout}\n{proc.stderr}"
        return proc


def _copy_project(dest: Path) -> Path:
    """The files a build needs, so that building never writes into the working tree."""
    ignore = shutil.ignore_patterns("__pycache__", "*.egg-info", "build", "*.pyc")
    for name in ("advisor", "knowledge_bases", "rules"):
        shutil.copytree(REPO / name, dest / name, ignore=ignore)
    for name in ("pyproject.toml", "README.md", "LICENSE"):
        if (REPO / name).exists():
            shutil.copy2(REPO / name, dest / name)
    return dest


def _dependencies_without_advisor(dest: Path) -> Path:
    """A folder of links to this environment's installed packages (pandas, pyarrow..., pip and setuptools to install
    with) but advisor: the new venv takes its dependencies from there, offline and fast, and advisor only from the
    wheel it installs, so pip must accept *that* ascend-advisor for the plugin's dependency."""
    dest.mkdir()
    for site in dict.fromkeys((sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"])):
        for entry in Path(site).iterdir():
            if not OWN.match(entry.name) and not entry.name.endswith(".pth") and not (dest / entry.name).exists():
                (dest / entry.name).symlink_to(entry)
    return dest


def _pip(py: Path, *args: str, env: dict[str, str], cwd: Path) -> None:
    proc = subprocess.run([str(py), "-m", "pip", *args, "--no-index", "--no-build-isolation", "-q",
                           "--disable-pip-version-check"], capture_output=True, text=True, timeout=300, env=env,
                          cwd=cwd)
    assert proc.returncode == 0, f"pip {' '.join(args)} failed:\n{proc.stdout}\n{proc.stderr}"


@pytest.fixture(scope="module")
def venv(tmp_path_factory: pytest.TempPathFactory) -> Venv:
    tmp = tmp_path_factory.mktemp("e2e")
    dist = tmp / "dist"
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PIP_FIND_LINKS")}
    env["PIP_NO_INPUT"] = "1"
    # docs/install.md, "From a built wheel": pip wheel --no-deps . -w dist
    _pip(Path(sys.executable), "wheel", "--no-deps", str(_copy_project(tmp / "advisor-src")), "-w", str(dist),
         env=env, cwd=tmp)
    (wheel,) = dist.glob("ascend_advisor-*.whl")

    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp / "venv")], check=True, timeout=120)
    bindir = tmp / "venv" / ("Scripts" if os.name == "nt" else "bin")
    py = bindir / "python"
    site = Path(subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                               capture_output=True, text=True, check=True).stdout.strip())
    (site / "_dependencies.pth").write_text(f"{_dependencies_without_advisor(tmp / 'deps')}\n", encoding="utf-8")
    _pip(py, "install", "--no-compile", str(wheel), env=env, cwd=tmp)

    work = tmp / "work"
    work.mkdir()
    v = Venv(bindir, site, dist, work, env)
    v.run("advisor", "kb", "new", "my-kb")
    # the scaffold's wheel, installed with its dependency ascend-advisor>=X,<Y satisfied by the installed advisor
    _pip(py, "wheel", "--no-deps", str(work / "my-kb"), "-w", str(dist), env=env, cwd=work)
    (plugin,) = dist.glob("my_kb-*.whl")
    _pip(py, "install", "--no-compile", str(plugin), env=env, cwd=work)
    return v


@pytest.mark.slow
def test_fresh_venv_has_advisor_from_its_wheel_and_the_plugin(venv: Venv) -> None:
    where, version = venv.run("python", "-c", "import advisor; print(advisor.__file__); print(advisor.__version__)"
                              ).stdout.split()
    assert where.startswith(str(venv.site)), "advisor must be imported from the new venv, not the source tree"
    assert version == __version__
    # nothing generic at the top level of site-packages: the built-ins install under advisor's namespace
    installed = {p.name for p in venv.site.iterdir() if not p.name.endswith((".dist-info", ".pth"))}
    assert installed >= {"advisor", "my_kb"} and not installed & {"knowledge_bases", "rules"}, sorted(installed)
    assert (venv.site / "advisor" / "builtin_rules" / "platforms.yaml").is_file()
    assert (venv.site / "my_kb" / "rules" / "schema" / "my-kb.schema.json").is_file()  # package data shipped

    listed = venv.run("advisor", "kb", "list").stdout
    (line,) = [row.split() for row in listed.splitlines() if row.startswith("my-kb ")]
    assert line[:4] == ["my-kb", "0.1.0", "my-kb", "0.1.0"] and line[-1] == "ok", listed
    assert all(row.split()[-1] == "ok" for row in listed.splitlines()[1:]), listed
    explained = venv.run("advisor", "explain", "my-kb").stdout  # docs/plugins.md's quick start
    assert "my-kb.transpose-time" in explained and "0.02" in explained

    # the scaffold's own tests pass against the installed package, the discovery test included
    test = venv.run("python", "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests", cwd=venv.work / "my-kb")
    assert "4 passed" in test.stdout


def _example_transposes() -> tuple[float, float]:
    """From the example's op_summary CSV itself: the AI Core time of its transposes, and of every AI Core task."""
    (csv_path,) = (REPO / "advisor" / "examples").glob("*/PROF_*/mindstudio_profiler_output/op_summary_*.csv")
    with csv_path.open(encoding="utf-8", newline="") as fh:
        rows = [r for r in csv.DictReader(fh) if r["Task Type"] == "AI_CORE"]
    transposes = sum(float(r["Task Duration(us)"]) for r in rows if r["OP Type"] in ("Transpose", "TransposeD"))
    return transposes, sum(float(r["Task Duration(us)"]) for r in rows)


@pytest.mark.slow
def test_the_sample_rule_fires_on_the_example_and_moves_the_score_by_its_own_time(venv: Venv) -> None:
    report = json.loads(venv.run("advisor", "analyze", "--example", "--format", "json", "--quiet").stdout)
    (mine,) = [f for f in report["findings"] if f["kb"] == "my-kb"]
    window = report["time"]["window_us"]
    transposes_us, ai_core_us = _example_transposes()
    assert mine["rule"] == "my-kb.transpose-time" and mine["severity"] == "minor"
    assert mine["estimated_saving_us"] == pytest.approx(transposes_us, abs=0.01)
    assert mine["evidence"]["share_of_ai_core_time"] == pytest.approx(transposes_us / ai_core_us, abs=1e-4)
    assert all(op.startswith("Transpose_") for op in mine["ops"])
    # installing the plugin costs the score at most the transposes' share of the analyzed time (weighted by the
    # finding's confidence, as the score counts every saving: advisor explain score)
    at_most = 100 * mine["confidence"] * transposes_us / window
    assert report["score_detail"]["by_kb"]["my-kb"] == pytest.approx(100 - at_most, abs=0.05)
    without = json.loads(venv.run("advisor", "analyze", "--example", "--format", "json", "--quiet", "--skip-kb",
                                  "my-kb").stdout)
    assert 0 < without["score"] - report["score"] <= at_most + 0.05


@pytest.mark.slow
def test_a_broken_plugin_is_reported_at_its_own_line(venv: Venv) -> None:
    kb_py = venv.site / "my_kb" / "kb.py"
    rules_yaml = venv.site / "my_kb" / "rules" / "my-kb.yaml"
    source, rules_text = kb_py.read_text(encoding="utf-8"), rules_yaml.read_text(encoding="utf-8")
    try:
        # a column the profile does not have: the KeyError is raised deep inside pandas
        kb_py.write_text(source.replace('ops["core"].isin', 'ops["no_such_column"].isin'), encoding="utf-8")
        line = next(i for i, text in enumerate(kb_py.read_text(encoding="utf-8").splitlines(), 1)
                    if "no_such_column" in text)
        proc = venv.run("advisor", "analyze", "--example", "--quiet", "--kb", "my-kb", ok=False)
        assert proc.returncode == 3
        assert f"my-kb (raised KeyError: 'no_such_column' at my_kb/kb.py:{line})" in proc.stderr
        kb_py.write_text(source, encoding="utf-8")

        # an invalid rules file disables the plugin (asked for by --kb: exit 2): `advisor kb list` says so, not "ok"
        rules_yaml.write_text(rules_text.replace("min_share: 0.02", "min_share: -1"), encoding="utf-8")
        assert venv.run("advisor", "analyze", "--example", "--quiet", "--kb", "my-kb", ok=False).returncode == 2
        rows = json.loads(venv.run("advisor", "kb", "list", "--format", "json").stdout)["knowledge_bases"]
        status = next(r["status"] for r in rows if r["id"] == "my-kb")
        assert status.startswith(f"failed to load: its rules are unusable, the plugin is disabled: {rules_yaml} at "
                                 "'min_share': ")
    finally:
        kb_py.write_text(source, encoding="utf-8")
        rules_yaml.write_text(rules_text, encoding="utf-8")
