"""Issue 30 (hostile input, round three), plugins: third-party knowledge bases that attack their isolation,
``pip install``-ed (one distribution, ``hostile3-plugins``, with one entry point and package per mode, into a
``--target`` folder put on PYTHONPATH), and the checks a user would make with ``ps`` afterwards.

Every process a hostile plugin starts carries ``HOSTILE3_MARK`` in its environment and writes its pid to
``HOSTILE3_PIDS``; :meth:`Campaign.leftovers` finds the ones still alive, whichever way they escaped.

``python -m tests.hostile3_plugins [CASE...]`` runs the campaign cases against this checkout's advisor and prints
time to fail, peak RSS of the advisor's process tree and leftover processes per case (the numbers of the issue).
"""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

from tests.hostile import REPO, mini_tn

PLUGIN_SOURCE = '''
import glob, os, pickle, subprocess, sys, tempfile, time
from pathlib import Path
from advisor import hookimpl
from advisor.kb import KnowledgeBase, RuleDoc

MODE = "@MODE@"
N = int(os.environ.get("HOSTILE3_N", "1000000"))
GIB = float(os.environ.get("HOSTILE3_GIB", "20"))
ANSWER_MB = int(os.environ.get("HOSTILE3_ANSWER_MB", "512"))


def _record(tag):
    where = os.environ.get("HOSTILE3_PIDS")
    if where:
        Path(where, f"{tag}-{os.getpid()}").write_text(str(os.getpid()))


def _daemon(tag):
    """The classic double fork with setsid: a process outside the plugin's process group and session."""
    pid = os.fork()
    if pid == 0:
        os.setsid()
        if os.fork() == 0:
            _record(tag)
            time.sleep(3600)
        os._exit(0)
    os.waitpid(pid, 0)


def _sleeper(tag):
    """A plain child process in the plugin's own process group."""
    p = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3600)"])
    where = os.environ.get("HOSTILE3_PIDS")
    if where:
        Path(where, f"{tag}-{p.pid}").write_text(str(p.pid))


def _tamper():
    """Rewrite every copy of the rank's data this process can reach: durations x1000, ops renamed."""
    places = glob.glob(os.path.join(tempfile.gettempdir(), "advisor-*", "*"))
    places += [f"/proc/self/fd/{fd}" for fd in os.listdir("/proc/self/fd")]
    done = []
    for p in places:
        try:
            if not os.path.isfile(p):
                continue
            with open(p, "rb") as fh:
                data = pickle.load(fh)
            profile = data[0]
            profile.ops["duration_us"] = profile.ops["duration_us"] * 1000
            profile.ops["name"] = "pwned_" + profile.ops["name"].astype(str)
            blob = pickle.dumps(data)
            with open(p, "r+b") as fh:
                fh.write(blob)
                fh.truncate()
            done.append(p)
        except Exception:
            pass
    return done


if MODE == "import_daemon":
    _daemon("import")
if MODE == "import_hang":
    _record("import")
    time.sleep(3600)


class HostileKB(KnowledgeBase):
    """A knowledge base that attacks its isolation as its mode says."""

    id = "@KBID@"
    title = "Hostile test knowledge base (round three)"
    version = "0.1"
    requires = ("ops",)
    rules = (RuleDoc("@KBID@.rule", "t", "w", "y", "h"),)
    rules_file = "@RULES_FILE@" or None
    time_limit_s = 1e9 if MODE == "hang" else 30.0

    def analyze(self, ctx):
        ops = ctx.profile.ops
        first = [str(ops["name"].iloc[0])]
        evidence = {"sum_us": float(ops["duration_us"].sum()),
                    "pwned": int(ops["name"].astype(str).str.startswith("pwned_").sum())}
        if MODE == "rewrite":
            evidence["rewrote"] = len(_tamper())
        if MODE == "hang":
            _record("hang")
            _sleeper("child")
            time.sleep(3600)
        if MODE == "analyze_daemon":
            _sleeper("child")
            _daemon("analyze")
        if MODE == "memory":
            _record("memory")
            blocks = []
            while len(blocks) * 64 < GIB * 1024:
                blocks.append(b"x" * (64 << 20))
        if MODE == "flood":
            for i in range(N):
                yield ctx.finding("@KBID@.rule", f"finding {i}", "minor", first, {"i": i}, 0.0, "b", "r")
            return
        if MODE == "big_answer":
            evidence["blob"] = "x" * (ANSWER_MB << 20)
        yield ctx.finding("@KBID@.rule", "@KBID@ finding", "minor", first, evidence, 0.0, "basis", "do this")


@hookimpl
def advisor_knowledge_bases():
    if MODE == "hook_daemon":
        _daemon("hook")
    return [HostileKB]


@hookimpl
def advisor_rules_dirs():
    rules = Path(__file__).with_name("rules")
    return [str(rules)] if rules.is_dir() else []
'''

BILLION_LAUGHS = textwrap.dedent("""\
    a: &a ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]
    b: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]
    c: &c [*b, *b, *b, *b, *b, *b, *b, *b, *b]
    d: &d [*c, *c, *c, *c, *c, *c, *c, *c, *c]
    e: &e [*d, *d, *d, *d, *d, *d, *d, *d, *d]
    f: &f [*e, *e, *e, *e, *e, *e, *e, *e, *e]
    g: &g [*f, *f, *f, *f, *f, *f, *f, *f, *f]
    h: &h [*g, *g, *g, *g, *g, *g, *g, *g, *g]
    i: &i [*h, *h, *h, *h, *h, *h, *h, *h, *h]
    """)
OPEN_SCHEMA = json.dumps({"$schema": "https://json-schema.org/draft/2020-12/schema", "type": "object"})
RULES = {
    # a rules folder holding a file named like a built-in one
    "rules_clash": {"transdata.yaml": "max_count: 1\n"},
    # a rules file whose aliases expand to 9^9 strings
    "rules_bomb": {"laughs.yaml": BILLION_LAUGHS},
    # a rules file that is not YAML
    "rules_broken": {"broken.yaml": "key: [unclosed\n"},
    # a well-formed rules file of its own, which the KB reads
    "rules_ok": {"hostile3_ok.yaml": "limit: 3\n"},
}


def kb_id(mode: str) -> str:
    return "h3-" + mode.replace("_", "-")


PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"

[project]
name = "hostile3-plugins"
version = "0.1"
requires-python = ">=3.10"

[project.entry-points."advisor.knowledge_bases"]
@ENTRY_POINTS@

[tool.setuptools]
packages = [@PACKAGES@]

[tool.setuptools.package-data]
"*" = ["rules/*.yaml", "rules/schema/*.json"]
"""


def make_plugins(root: Path, *modes: str) -> Path:
    """``pip install`` one distribution with a plugin per mode into ``root/site``: package ``hostile3_<mode>``,
    entry point and knowledge base ``h3-<mode>`` and, for the ``rules_*`` modes, its rules folder. Returns the
    folder to put on PYTHONPATH."""
    src, site = root / "src", root / "site"
    for mode in modes:
        package = src / f"hostile3_{mode}"
        package.mkdir(parents=True)
        rules = RULES.get(mode, {})
        own = next((Path(n).stem for n in rules if mode == "rules_ok"), "")
        source = PLUGIN_SOURCE.replace("@MODE@", mode).replace("@KBID@", kb_id(mode)).replace("@RULES_FILE@", own)
        (package / "__init__.py").write_text(source, encoding="utf-8")
        if rules:
            (package / "rules" / "schema").mkdir(parents=True)
            for name, text in rules.items():
                (package / "rules" / name).write_text(text, encoding="utf-8")
                (package / "rules" / "schema" / f"{Path(name).stem}.schema.json").write_text(OPEN_SCHEMA,
                                                                                              encoding="utf-8")
    entry_points = "\n".join(f'"{kb_id(m)}" = "hostile3_{m}"' for m in modes)
    packages = ", ".join(f'"hostile3_{m}"' for m in modes)
    (src / "pyproject.toml").write_text(PYPROJECT.replace("@ENTRY_POINTS@", entry_points)
                                        .replace("@PACKAGES@", packages), encoding="utf-8")
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-index", "--no-build-isolation", "--no-deps",
                    "--disable-pip-version-check", "-q", "--target", str(site), str(src)],
                   check=True, capture_output=True, cwd=root, timeout=300)
    return site


class Campaign:
    """One hostile run's surroundings: the plugins, a pid folder and the marker every process it starts carries."""

    def __init__(self, root: Path, plugins: Path, **env: str) -> None:
        self.root = root
        self.plugins = plugins
        root.mkdir(parents=True, exist_ok=True)
        self.pids = root / "pids"
        self.pids.mkdir(exist_ok=True)
        self.mark = uuid.uuid4().hex
        self.env = {**os.environ, "COLUMNS": "160", "PYTHONPATH": os.pathsep.join([str(self.plugins), str(REPO)]),
                    "ADVISOR_SELF_CHECK": "0", "HOSTILE3_PIDS": str(self.pids), "HOSTILE3_MARK": self.mark, **env}

    def start(self, *args: object) -> subprocess.Popen[str]:
        """``advisor ARGS`` in its own session (as a shell job would be), output to files."""
        with open(self.root / "stdout.txt", "w", encoding="utf-8") as out, \
                open(self.root / "stderr.txt", "w", encoding="utf-8") as err:
            return subprocess.Popen([sys.executable, "-m", "advisor", *map(str, args)], stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err, text=True, env=self.env, cwd=self.root,
                                    start_new_session=True)

    def run(self, *args: object, timeout: float = 120) -> tuple[int, str, str, float]:
        """(exit code, stdout, stderr, seconds) of ``advisor ARGS``; killed (with its group) past ``timeout``."""
        started = time.monotonic()
        proc = self.start(*args)
        try:
            rc = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
        seconds = time.monotonic() - started
        return rc, *(self.text(n) for n in ("stdout.txt", "stderr.txt")), seconds  # type: ignore[return-value]

    def text(self, name: str) -> str:
        return (self.root / name).read_text(encoding="utf-8")

    def recorded(self) -> list[int]:
        return sorted(int(p.read_text()) for p in self.pids.iterdir() if p.read_text().strip())

    def wait_for(self, tag: str, timeout: float = 60) -> None:
        """Until a process of the plugin wrote a pid file ``tag-*``."""
        deadline = time.monotonic() + timeout
        while not any(self.pids.glob(f"{tag}-*")):
            if time.monotonic() > deadline:
                raise TimeoutError(f"no {tag} process within {timeout} s")
            time.sleep(0.05)

    def leftovers(self, settle_s: float = 3.0) -> list[str]:
        """``pid command`` of every live process carrying this campaign's marker (zombies are dead), after up to
        ``settle_s`` for the ones being killed to go."""
        deadline = time.monotonic() + settle_s
        while True:
            alive = [f"{pid} {cmd}" for pid, cmd in _marked(self.mark)]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.1)

    def kill_leftovers(self) -> None:
        for pid, _ in _marked(self.mark):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _marked(mark: str) -> list[tuple[int, str]]:
    needle = f"HOSTILE3_MARK={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
            with open(f"/proc/{entry}/environ", "rb") as fh:
                env = fh.read()
            with open(f"/proc/{entry}/cmdline", "rb") as fh:
                cmd = fh.read().replace(b"\0", b" ").decode("utf-8", "replace").strip()
        except OSError:
            continue
        if state != b"Z" and needle in env.split(b"\0"):
            found.append((int(entry), cmd[:120]))
    return found


# ---------------------------------------------------------------------------------------------------------
# the campaign: python -m tests.hostile3_plugins [CASE...]
# ---------------------------------------------------------------------------------------------------------
def _peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024


def _case(name: str, work: Path, modes: tuple[str, ...], args: tuple[object, ...], env: dict[str, str],
          timeout: float, signal_after: tuple[str, int] | None = None) -> dict[str, object]:
    """Run one case in a fresh process, so its peak RSS is this case's alone."""
    code = f"""
import json, sys, time, signal, os
from pathlib import Path
from tests.hostile3_plugins import Campaign, _peak_rss_mb
from tests.hostile3_plugins import make_plugins
c = Campaign(Path({str(work)!r}), make_plugins(Path({str(work)!r}) / "plugins", *{modes!r}), **{env!r})
args = [a.replace("@TN@", {str(work / 'TN')!r}) for a in {tuple(map(str, args))!r}]
if {signal_after!r}:
    tag, sig = {signal_after!r}
    t0 = time.monotonic()
    p = c.start(*args)
    c.wait_for(tag)
    os.kill(p.pid, sig)
    try:
        rc = p.wait({timeout})
    except Exception:
        os.killpg(p.pid, 9); rc = p.wait()
    secs = time.monotonic() - t0
    out, err = (Path({str(work)!r}) / "stdout.txt").read_text(), (Path({str(work)!r}) / "stderr.txt").read_text()
else:
    rc, out, err, secs = c.run(*args, timeout={timeout})
left = c.leftovers()
c.kill_leftovers()
report = {{}}
try:
    report = json.loads(out)
except ValueError:
    pass
st = [k for k in report.get("knowledge_bases", []) if k["id"].startswith("h3-")]
seen = {{f["kb"]: f["evidence"] for f in report.get("findings", []) + report.get("notes", [])
        if f["kb"] in ("h3-witness", "h3-rewrite")}}
print(json.dumps({{"rc": rc, "seconds": round(secs, 1), "peak_rss_mb": round(_peak_rss_mb()),
                  "stdout_mb": round(len(out) / 2**20, 1), "leftovers": len(left), "left": left[:3],
                  "statuses": [(k["id"], k["status"], k.get("reason", "")[:150]) for k in st],
                  "findings": sum(k.get("findings", 0) for k in st), "evidence": seen,
                  "stderr": err.strip().splitlines()[-1:]}}))
"""
    work.mkdir(parents=True)
    mini_tn(work / "TN")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO,
                          timeout=timeout + 120)
    try:
        return {"case": name, **json.loads(proc.stdout.strip().splitlines()[-1])}
    except (ValueError, IndexError):
        return {"case": name, "error": proc.stderr[-500:]}


CASES: dict[str, tuple[tuple[str, ...], tuple[object, ...], dict[str, str], float, tuple[str, int] | None]] = {
    "rewrite": (("witness", "rewrite"), ("analyze", "@TN@", "--format", "json", "-q"), {}, 120, None),
    "hang_1e9": (("hang",), ("analyze", "@TN@", "--format", "json", "-q"), {}, 200, None),
    "memory_20g": (("memory",), ("analyze", "@TN@", "--format", "json", "-q"), {"HOSTILE3_GIB": "20"}, 200, None),
    "flood_1e6": (("flood",), ("analyze", "@TN@", "--format", "json", "-q"), {}, 400, None),
    "big_answer": (("big_answer",), ("analyze", "@TN@", "--format", "json", "-q"), {"HOSTILE3_ANSWER_MB": "512"}, 200,
                   None),
    "ctrl_c": (("hang",), ("analyze", "@TN@", "--format", "json", "-q"), {}, 60, ("hang", int(signal.SIGINT))),
    "sigterm": (("hang",), ("analyze", "@TN@", "--format", "json", "-q"), {}, 60, ("hang", int(signal.SIGTERM))),
    "daemon_analyze": (("analyze_daemon",), ("analyze", "@TN@", "--format", "json", "-q"), {}, 120, None),
    "daemon_kb_list": (("import_daemon", "hook_daemon"), ("kb", "list", "--format", "json"), {}, 120, None),
    "rules_clash": (("rules_clash", "rules_bomb", "rules_broken"), ("analyze", "@TN@", "--format", "json", "-q"), {},
                    120, None),
}


def main(argv: list[str]) -> None:
    import tempfile

    names = argv or list(CASES)
    with tempfile.TemporaryDirectory(prefix="hostile3-") as tmp:
        for name in names:
            modes, args, env, timeout, sig = CASES[name]
            print(json.dumps(_case(name, Path(tmp) / name, modes, args, env, timeout, sig)), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
