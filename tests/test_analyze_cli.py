"""`advisor analyze` end to end: the built-in example, the JSON contract, bad input, atomic output."""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from advisor.examples import example_graph, example_profile
from advisor.report.json_report import validate

if TYPE_CHECKING:
    from tests.conftest import CliFixture

BUILTIN_KBS = {"transdata", "ub-fusion", "aipp-fusion", "roofline", "aicpu", "mish-leakyrelu"}


def _tree_digest(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(root)).encode())
            h.update(p.read_bytes())
            h.update(str(p.stat().st_mtime_ns).encode())
    return h.hexdigest()


@pytest.fixture(scope="module")
def example_report(cli: CliFixture) -> dict:
    code, out, err = cli("analyze", "--example", "--format", "json", "--quiet")
    assert code == 0, err
    return json.loads(out)


def test_example_report_follows_the_schema(example_report: dict) -> None:
    validate(example_report)
    assert example_report["input"]["layout"] == "msprof-cann7"
    assert example_report["input"]["chip"].startswith("Ascend310P")
    assert example_report["summary"]["ops"] == 760
    assert example_report["graph"]["nodes"] > 100
    assert example_report["graph"]["join"]["matched_time_share"] > 0.99


def test_example_shows_the_problems_it_was_built_with(example_report: dict) -> None:
    statuses = {k["id"]: k["status"] for k in example_report["knowledge_bases"]}
    assert set(statuses) >= BUILTIN_KBS, statuses
    assert all(statuses[k] == "ok" for k in BUILTIN_KBS), example_report["knowledge_bases"]
    kbs = {f["kb"] for f in example_report["findings"]}
    assert {"ub-fusion", "mish-leakyrelu", "aicpu", "transdata", "aipp-fusion"} <= kbs
    flagged = {op for f in example_report["findings"] for op in f["ops"]}
    assert {"Softplus_9", "post/NonZero", "trans_TransData_roundtrip_a", "Cast_0", "BatchNormalization_8"} <= flagged
    assert 0 < example_report["score"] < 90
    savings = [f["estimated_saving_us"] for f in example_report["findings"]]
    assert savings == sorted(savings, reverse=True)


def test_terminal_report_leads_with_the_score(cli: CliFixture) -> None:
    code, out, _ = cli("analyze", "--example", "--quiet")
    assert code == 0
    assert out.lstrip().splitlines()[1].strip("│ ").startswith("Score")
    assert "Findings" in out


def test_fail_under_gates_on_the_score(cli: CliFixture, example_report: dict) -> None:
    code, _, err = cli("analyze", "--example", "--format", "json", "--quiet", "--fail-under", "99")
    assert code == 1 and "below --fail-under" in err
    code, _, _ = cli("analyze", "--example", "--format", "json", "--quiet", "--fail-under", "1")
    assert code == 0


def test_inputs_are_not_modified_and_output_is_written_atomically(cli: CliFixture, tmp_path: Path) -> None:
    before = _tree_digest(example_profile().parent)
    code, _, err = cli("analyze", "--example", "--format", "json", "--quiet", "-o", str(tmp_path) + "/")
    assert code == 0, err
    written = list(tmp_path.iterdir())
    assert len(written) == 1 and written[0].name.startswith("advisor_") and written[0].suffix == ".json"
    validate(json.loads(written[0].read_text()))
    assert _tree_digest(example_profile().parent) == before


def _one_line_error(args: list[str], cwd: Path) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "advisor.cli", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "PYTHONWARNINGS": "ignore"})
    return proc.returncode, proc.stderr


@pytest.mark.parametrize("case", ["missing", "empty_dir", "unrecognized", "binary_csv", "truncated_json",
                                  "no_op_name_column"])
def test_bad_input_gives_one_line_and_exit_2(tmp_path: Path, case: str) -> None:
    target = tmp_path / case
    if case == "empty_dir":
        target.mkdir()
    elif case == "unrecognized":
        target.mkdir()
        (target / "readme.txt").write_text("not a profile")
    elif case == "binary_csv":
        target = tmp_path / "op_summary_0.csv"
        target.write_bytes(b"\x00\x01\x02PK\x03\x04" * 100)
    elif case == "truncated_json":
        target = tmp_path / "trace_view.json"
        target.write_text('[{"ph": "X", "name": "a", "ts": "1.0", "dur": 2, "pid": 1, "tid": 1}, {"ph": "X", "na')
    elif case == "no_op_name_column":
        target = tmp_path / "op_summary_0.csv"
        target.write_text("Foo,Bar\n1,2\n")
    code, err = _one_line_error(["analyze", str(target), "--format", "json"], tmp_path)
    assert code == 2, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert target.name in lines[0]


def test_unknown_knowledge_base_is_a_usage_error(cli: CliFixture) -> None:
    code, _, err = cli("analyze", "--example", "--kb", "no-such-kb", "--quiet")
    assert code == 2 and "no-such-kb" in err


def test_kb_selection(cli: CliFixture, example_report: dict) -> None:
    code, out, _ = cli("analyze", "--example", "--format", "json", "--quiet", "--kb", "aicpu")
    report = json.loads(out)
    assert {k["id"] for k in report["knowledge_bases"]} == {"aicpu"}
    assert {f["kb"] for f in report["findings"]} == {"aicpu"}
    code, out, _ = cli("analyze", "--example", "--format", "json", "--quiet", "--skip-kb", "aicpu")
    assert "aicpu" not in {k["id"] for k in json.loads(out)["knowledge_bases"]}


def test_example_graph_is_found_explicitly() -> None:
    assert example_graph().is_file() and example_profile().is_dir()
