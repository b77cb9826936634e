"""Helpers of the hostile-input tests: copies of real samples to mutate, a CLI runner that checks the promises,
and a third-party knowledge-base plugin that misbehaves on demand.

Nothing is ever written into ``../shared``: every mutation works on a copy in a pytest tmp dir.
"""

from __future__ import annotations

import atexit
import csv
import hashlib
import io
import json
import os
import shutil
import sqlite3
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SAMPLES = REPO.parent / "shared" / "samples"
TN = SAMPLES / "Ascend__msinsight/test/data/pytorch/text/level2/rank0_ascend_pt"
"""The issue's TN: a torch_npu text profile (kernel_details, trace_view, communication, profiler_info...)."""
TDB = SAMPLES / "Ascend__msinsight/test/data/pytorch/db/level1/rank0_ascend_pt"
PROF = SAMPLES / ("hicann__cann-learning-hub/tutorials/ascendc_operator_development_V2/06_advanced_features/src/"
                  "06.04_super_kernel/performance_case/profiling-sk/PROF_000001_20260831222700438_02482130MJQJQRAN")
OM_JSON = REPO / "advisor/examples/ssd_mish_310p/ssd_mish_310p.om.json"


def have_samples() -> bool:
    return TN.is_dir()


def copy_tree(src: Path, dest: Path) -> Path:
    """A writable copy of a (read-only) sample directory."""
    shutil.copytree(src, dest)
    for dirpath, _, files in os.walk(dest):
        os.chmod(dirpath, 0o755)
        for f in files:
            os.chmod(os.path.join(dirpath, f), 0o644)
    return dest


_CACHE: dict[tuple[int, int], Path] = {}


def mini_tn(dest: Path, rows: int = 40, events: int = 400) -> Path:
    """TN cut to its first ``rows`` CSV rows and ``events`` trace events: the same layout and quirks, fast to read.
    Built once per process (in a temporary cache) and copied."""
    key = (rows, events)
    if key not in _CACHE:
        cache = Path(tempfile.mkdtemp(prefix="advisor-mini-tn-"))
        atexit.register(shutil.rmtree, cache, True)
        _CACHE[key] = _build_mini_tn(cache / "rank0_ascend_pt", rows, events)
    return copy_tree(_CACHE[key], dest)


def _build_mini_tn(dest: Path, rows: int, events: int) -> Path:
    d = copy_tree(TN, dest)
    out = d / "ASCEND_PROFILER_OUTPUT"
    for p in out.glob("*.csv"):
        lines = p.read_text(encoding="utf-8-sig").splitlines(True)
        p.write_text("".join(lines[: rows + 1]), encoding="utf-8")
    trace = out / "trace_view.json"
    ev = json.loads(trace.read_text(encoding="utf-8"))
    kept = [e for e in ev if e.get("ph") == "M"] + [e for e in ev if e.get("ph") != "M"][:events]
    trace.write_text(json.dumps(kept), encoding="utf-8")
    return d


def set_cell(path: Path, column: str, value: str, row: int = 0) -> None:
    """Put ``value`` into ``column`` of data row ``row`` of a CSV file."""
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
    rows[1 + row][rows[0].index(column)] = value
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    path.write_text(buf.getvalue(), encoding="utf-8")


def drop_columns(path: Path, *columns: str) -> None:
    rows = list(csv.reader(io.StringIO(path.read_text(encoding="utf-8-sig"))))
    keep = [i for i, h in enumerate(rows[0]) if h not in columns]
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows([[r[i] for i in keep if i < len(r)] for r in rows])
    path.write_text(buf.getvalue(), encoding="utf-8")


def db_copy(dest: Path) -> Path:
    """A writable copy of the torch_npu SQLite sample with its WAL folded in (the reader opens it immutable)."""
    d = copy_tree(TDB, dest)
    for db in (d / "ASCEND_PROFILER_OUTPUT").glob("*.db"):
        con = sqlite3.connect(db)
        con.execute("PRAGMA journal_mode=DELETE")
        con.commit()
        con.close()
    return d


def db_exec(db: Path, *sql: str) -> None:
    con = sqlite3.connect(db)
    for s in sql:
        con.execute(s)
    con.commit()
    con.close()


def tree_hash(*paths: Path) -> dict[str, str]:
    """sha256 of every file under ``paths``: inputs must come out of a run byte for byte unchanged."""
    out: dict[str, str] = {}
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file())
        for f in files:
            out[str(f)] = hashlib.sha256(f.read_bytes()).hexdigest()
    return out


def run(*args: object, env: dict[str, str] | None = None, cwd: Path | None = None,
        timeout: float = 300) -> tuple[int, str, str]:
    """``advisor ARGS`` in a subprocess: (exit code, stdout, stderr)."""
    full_env = {**os.environ, "COLUMNS": "160", **(env or {})}
    proc = subprocess.run([sys.executable, "-m", "advisor", *map(str, args)], capture_output=True, text=True,
                          env=full_env, cwd=cwd, timeout=timeout, stdin=subprocess.DEVNULL)
    return proc.returncode, proc.stdout, proc.stderr


def assert_input_error(rc: int, err: str, *expected: str, code: int = 2) -> str:
    """Exit ``code`` with exactly one line on stderr naming the problem, no traceback."""
    assert "Traceback" not in err, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert rc == code, f"exit {rc}, expected {code}: {err}"
    assert len(lines) == 1, f"expected one stderr line, got {len(lines)}:\n{err}"
    for e in expected:
        assert e in lines[0], f"{e!r} not in {lines[0]!r}"
    return lines[0]


def assert_report(rc: int, out: str, err: str, codes: tuple[int, ...] = (0,)) -> dict:
    """A complete JSON report on stdout, no traceback."""
    assert "Traceback" not in err, err
    assert rc in codes, f"exit {rc}: {err}"
    return json.loads(out)


# ---------------------------------------------------------------------------------------------------------
# a third-party plugin, installed by a dist-info directory on PYTHONPATH
# ---------------------------------------------------------------------------------------------------------
PLUGIN_SOURCE = '''
import os, sys, threading, time
from advisor import hookimpl
from advisor.kb import KnowledgeBase, RuleDoc

MODE = "@MODE@"
if MODE == "import_exit":
    sys.exit(0)
if MODE == "import_sleep":
    time.sleep(3600)
if MODE == "import_print":
    print("garbage printed at import")


class HostileKB(KnowledgeBase):
    """A knowledge base that misbehaves as HOSTILE_MODE says."""

    id = "hostile-@KBID@"
    title = "Hostile test knowledge base"
    version = "0.1"
    requires = ("ops",)
    time_limit_s = 4.0
    rules = (RuleDoc("hostile-@KBID@.rule", "t", "w", "y", "h"),)

    def analyze(self, ctx):
        m = MODE
        if m == "analyze_exit":
            sys.exit(0)
        if m == "analyze_os_exit":
            os._exit(0)
        if m == "analyze_sleep":
            time.sleep(3600)
        if m == "thread":
            threading.Thread(target=time.sleep, args=(3600,)).start()
        if m == "print":
            print('{"not": "the report"}')
        if m == "chdir":
            os.chdir("/")
        if m == "mutate_ops":
            ctx.profile.ops.drop(ctx.profile.ops.index, inplace=True)
            return
        if m == "yield_none":
            yield None
            return
        saving = {"inf_saving": float("inf"), "huge_saving": 1e308}.get(m, 1.0)
        ops = [1, 2] if m == "nonstring_ops" else [str(ctx.profile.ops["name"].iloc[0])]
        evidence = {"x": 1}
        if m == "circular":
            evidence["self"] = evidence
        f = ctx.finding("hostile-@KBID@.rule", "hostile finding", "minor", ops, evidence, saving, "basis", "do this")
        yield f
        if m == "mutate_severity":
            f.severity = "bogus"


@hookimpl
def advisor_knowledge_bases():
    if MODE == "hook_exit":
        sys.exit(3)
    if MODE == "hook_sleep":
        time.sleep(3600)
    return [HostileKB]
'''


def make_plugins(root: Path, *modes: str) -> Path:
    """Install one hostile plugin per mode under ``root`` (module ``hostile_<mode>`` + a dist-info with its entry
    point ``hostile-<mode>``, knowledge base ``hostile-<mode>``); returns the dir to put on PYTHONPATH."""
    root.mkdir(parents=True, exist_ok=True)
    for mode in modes:
        module, kb_id = f"hostile_{mode}", mode.replace("_", "-")
        (root / f"{module}.py").write_text(PLUGIN_SOURCE.replace("@MODE@", mode).replace("@KBID@", kb_id),
                                           encoding="utf-8")
        info = root / f"{module}-0.1.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {module}\nVersion: 0.1\n", encoding="utf-8")
        (info / "entry_points.txt").write_text(f"[advisor.knowledge_bases]\nhostile-{kb_id} = {module}\n",
                                               encoding="utf-8")
    return root


def plugin_env(plugin_dir: Path, **extra: str) -> dict[str, str]:
    path = os.pathsep.join([str(plugin_dir), str(REPO)])
    # the hostile plugins' own findings (a shared title, an absurd saving) are theirs to answer for, not advisor's
    # self-check's: what these tests assert is that advisor bounds and reports them
    return {"PYTHONPATH": path, "ADVISOR_PLUGIN_LOAD_TIMEOUT": "4", "ADVISOR_SELF_CHECK": "0", **extra}
