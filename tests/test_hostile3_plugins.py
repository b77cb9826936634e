"""Issue 30, item 4: third-party plugins are isolated from import to exit.

One distribution of hostile plugins is ``pip install``-ed once for this module (``tests/hostile3_plugins.py``); one
``advisor analyze`` runs all of them at once, under limits lowered by a ``--rules`` file where the shipped ones
would take minutes (time, memory, answer size; the findings cap is the shipped one). What is asserted is what a
user would check: each attack costs its plugin a ``failed`` status naming the limit, the run goes on with the
built-in findings unchanged, and ``ps`` shows no process any plugin started, after ``analyze``, ``kb list`` and
Ctrl-C alike.
"""

from __future__ import annotations

import csv
import json
import math
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from advisor.config.loader import builtin_rules_dir, load_rules_file
from advisor.engine.isolation import Limits
from tests.hostile import have_samples, mini_tn
from tests.hostile3_plugins import Campaign, kb_id, make_plugins

pytestmark = [
    pytest.mark.skipif(not have_samples(), reason="shared samples not available"),
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process checks read /proc"),
]

MODES = ("witness", "rewrite", "hang", "memory", "flood", "big_answer", "analyze_daemon", "import_daemon",
         "hook_daemon", "rules_clash", "rules_bomb", "rules_broken", "rules_ok")
TIME_LIMIT_S, MEMORY_MB, ANSWER_MB = 8, 700, 2
LIMITS = (f"rules:\n  plugins:\n    kb_time_limit_s: {TIME_LIMIT_S}\n    memory_limit_mb: {MEMORY_MB}\n"
          f"    max_answer_mb: {ANSWER_MB}\n")
SHIPPED = load_rules_file(builtin_rules_dir() / "plugins.yaml")


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile3")


@pytest.fixture(scope="module")
def site(work: Path) -> Path:
    """The hostile plugins, pip-installed into a target folder (put on PYTHONPATH by each Campaign)."""
    return make_plugins(work / "plugins", *MODES)


@pytest.fixture(scope="module")
def tn(work: Path) -> Path:
    return mini_tn(work / "TN")


def _report(rc: int, out: str, err: str) -> dict[str, Any]:
    assert "Traceback" not in err, err
    assert rc == 3, f"exit {rc}: {err}"  # incomplete analysis (plugins failed), never 2: the run went on
    return json.loads(out)


@pytest.fixture(scope="module")
def run(work: Path, site: Path, tn: Path) -> dict[str, Any]:
    """One ``advisor analyze`` with every hostile plugin, and one without any (the baseline)."""
    (work / "limits.yaml").write_text(LIMITS, encoding="utf-8")
    baseline = Campaign(work / "baseline", work / "no-plugins")
    rc, out, err, _ = baseline.run("analyze", tn, "--format", "json", "-q")
    assert rc == 0, err
    campaign = Campaign(work / "analyze", site, HOSTILE3_ANSWER_MB="8")
    rc, out, err, seconds = campaign.run("analyze", tn, "--format", "json", "-q", "--rules", work / "limits.yaml",
                                         timeout=300)
    left = campaign.leftovers()
    campaign.kill_leftovers()
    report = _report(rc, out, err)
    return {"report": report, "baseline": json.loads(baseline.text("stdout.txt")), "seconds": seconds,
            "left": left, "pids": campaign.pids, "bytes": len(out), "err": err}


def _status(report: dict[str, Any], mode: str) -> dict[str, Any]:
    return next(k for k in report["knowledge_bases"] if k["id"] == kb_id(mode))


def _said(report: dict[str, Any], mode: str) -> list[dict[str, Any]]:
    return [f for f in [*report["findings"], *report["notes"]] if f["kb"] == kb_id(mode)]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


def _recorded(pids: Path, tag: str) -> list[int]:
    return [int(p.read_text()) for p in pids.glob(f"{tag}-*")]


# ---------------------------------------------------------------------------------------------------------
# limits a plugin cannot raise
# ---------------------------------------------------------------------------------------------------------
def test_a_plugins_own_time_limit_can_only_lower_the_rules_limit() -> None:
    limits = Limits.of()
    assert limits.kb_time_limit_s == SHIPPED["kb_time_limit_s"]
    assert limits.kb_time_limit(1e9) == SHIPPED["kb_time_limit_s"]  # the attack: trusted, it hung the run
    assert limits.kb_time_limit(float("inf")) == limits.kb_time_limit(math.nan) == SHIPPED["kb_time_limit_s"]
    assert limits.kb_time_limit(-1) == limits.kb_time_limit("soon") == SHIPPED["kb_time_limit_s"]
    assert limits.kb_time_limit(2.5) == 2.5
    assert Limits.of({"kb_time_limit_s": 7}).kb_time_limit(1e9) == 7


def test_a_hanging_plugin_declaring_1e9_seconds_fails_at_the_rules_limit(run: dict[str, Any]) -> None:
    st = _status(run["report"], "hang")
    assert st["status"] == "failed" and st["reason"] == f"ran past its time limit of {TIME_LIMIT_S} s"
    assert TIME_LIMIT_S <= st["seconds"] < TIME_LIMIT_S + 10
    # the hung worker and the child process it started are gone with it
    started = _recorded(run["pids"], "hang") + _recorded(run["pids"], "child")
    assert len(started) >= 2 and not [p for p in started if _alive(p)]


def test_memory_past_the_limit_fails_that_plugin_alone(run: dict[str, Any]) -> None:
    st = _status(run["report"], "memory")
    assert st["status"] == "failed" and "ran out of memory" in st["reason"]
    assert f"{MEMORY_MB:,}" in st["reason"] and "plugins.memory_limit_mb" in st["reason"]
    assert _recorded(run["pids"], "memory")  # it did start touching its 20 GiB


def test_a_million_findings_fail_at_the_shipped_cap_quickly(run: dict[str, Any]) -> None:
    st = _status(run["report"], "flood")
    cap = SHIPPED["max_findings"]
    assert st["status"] == "failed" and f"more than {cap:,} findings" in st["reason"], st
    assert st["seconds"] < 30 and not _said(run["report"], "flood")
    assert run["bytes"] < 5 << 20  # was a 449 MB report


def test_an_answer_past_the_size_cap_fails_that_plugin(run: dict[str, Any]) -> None:
    st = _status(run["report"], "big_answer")
    assert st["status"] == "failed" and f"more than the {ANSWER_MB} MB" in st["reason"], st
    assert "plugins.max_answer_mb" in st["reason"] and not _said(run["report"], "big_answer")


# ---------------------------------------------------------------------------------------------------------
# what a plugin reads is its own
# ---------------------------------------------------------------------------------------------------------
def test_a_plugin_rewriting_what_it_reads_changes_nothing_for_the_others(run: dict[str, Any], tn: Path) -> None:
    report = run["report"]
    assert _status(report, "rewrite")["status"] == _status(report, "witness")["status"] == "ok"
    with open(tn / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", newline="", encoding="utf-8") as fh:
        rows = list(csv.DictReader(fh))
    total = sum(float(r["Duration(us)"]) for r in rows)
    # the rewriter runs first (ids in order), then the witness reads the rank's data: untouched
    (witness,) = _said(report, "witness")
    assert witness["evidence"]["sum_us"] == pytest.approx(total, rel=1e-9)
    assert witness["evidence"]["pwned"] == 0 and witness["ops"] == [rows[0]["Name"]]

    def builtin(rep: dict[str, Any]) -> list[tuple[str, tuple[str, ...], float]]:
        found = [*rep["findings"], *rep["notes"], *(s for f in rep["findings"] for s in f.get("symptoms", []))]
        return sorted({(f["rule"], tuple(f.get("ops", [])), f.get("estimated_saving_us")) for f in found
                       if not f["kb"].startswith("h3-")})

    assert builtin(report) == builtin(run["baseline"])
    assert report["score"] == run["baseline"]["score"]


# ---------------------------------------------------------------------------------------------------------
# rules files
# ---------------------------------------------------------------------------------------------------------
def test_unusable_plugin_rules_disable_that_plugin_not_the_run(run: dict[str, Any]) -> None:
    report = run["report"]
    reasons = {m: _status(report, m)["reason"] for m in ("rules_clash", "rules_bomb", "rules_broken")}
    for mode, reason in reasons.items():
        assert _status(report, mode)["status"] == "failed" and "the plugin is disabled" in reason, reason
        assert not _said(report, mode)
    assert "'transdata'" in reasons["rules_clash"] and "already used by" in reasons["rules_clash"]
    assert "expands to more than" in reasons["rules_bomb"]
    assert "invalid YAML" in reasons["rules_broken"]
    # a plugin with a rules file of its own runs, beside them
    assert _status(report, "rules_ok")["status"] == "ok" and len(_said(report, "rules_ok")) == 1


# ---------------------------------------------------------------------------------------------------------
# no process outlives its plugin
# ---------------------------------------------------------------------------------------------------------
def test_no_process_a_plugin_started_survives_analyze(run: dict[str, Any]) -> None:
    assert run["left"] == []
    for tag in ("import", "hook", "analyze"):  # the double-forked, setsid daemons of import, hook and analyze
        pids = _recorded(run["pids"], tag)
        assert pids, f"no {tag} daemon was started"
        assert not [p for p in pids if _alive(p)], tag
    assert _status(run["report"], "analyze_daemon")["status"] == "ok"


def test_no_process_a_plugin_started_survives_kb_list(work: Path, site: Path) -> None:
    campaign = Campaign(work / "kb-list", site)
    rc, out, err, _ = campaign.run("kb", "list", "--format", "json", timeout=120)
    left = campaign.leftovers()
    campaign.kill_leftovers()
    assert rc == 0 and "Traceback" not in err, err
    rows = {r["id"]: r for r in json.loads(out)["knowledge_bases"]}
    assert rows[kb_id("import_daemon")]["status"] == rows[kb_id("hook_daemon")]["status"] == "ok"
    assert "the plugin is disabled" in rows[kb_id("rules_bomb")]["status"]
    daemons = _recorded(campaign.pids, "import") + _recorded(campaign.pids, "hook")
    assert len(daemons) >= 2 and left == [] and not [p for p in daemons if _alive(p)]


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_interrupting_analyze_leaves_no_plugin_process(work: Path, site: Path, tn: Path, sig: int) -> None:
    """Ctrl-C (SIGINT to advisor) or a kill while a plugin runs at the shipped (300 s) time limit."""
    campaign = Campaign(work / f"signal-{sig}", site)
    started = time.monotonic()
    proc = campaign.start("analyze", tn, "--format", "json", "-q", "--kb", kb_id("hang"))
    try:
        campaign.wait_for("child", timeout=120)
        os.kill(proc.pid, sig)
        rc = proc.wait(timeout=30)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    left = campaign.leftovers()
    campaign.kill_leftovers()
    assert time.monotonic() - started < 60
    if sig == signal.SIGINT:
        assert rc == 130 and campaign.text("stderr.txt").strip() == "advisor: interrupted"
    else:
        assert rc == -signal.SIGTERM
    assert left == []
    started_pids = _recorded(campaign.pids, "hang") + _recorded(campaign.pids, "child")
    assert len(started_pids) >= 2 and not [p for p in started_pids if _alive(p)]
