"""A waiver that names no rule, or waives nothing, is said on stderr and in the report (issue 31.5 g)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest


def test_unknown_and_unused_waivers_are_warned(cli, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    rules = tmp_path / "waivers.yaml"
    rules.write_text("waivers:\n"
                     "  - rule: aicpu.opz\n    reason: a typo\n"
                     "  - rule: aicpu.ops\n    ops: no_such_op_*\n    reason: matches no op\n"
                     "  - rule: precision.int8\n    reason: accuracy first\n", encoding="utf-8")
    code, out, err = cli("analyze", "--example", "--rules", str(rules), "--format", "json", "-q")
    assert code in (0, 1), err
    report = json.loads(out)
    warnings = [line for line in err.splitlines() if line.startswith("advisor: warning: waiver")]
    assert len(warnings) == 2, err
    assert "'aicpu.opz'" in warnings[0] and "names no rule" in warnings[0]
    assert "'aicpu.ops'" in warnings[1] and "matched no finding" in warnings[1]
    notes = report["input"]["notes"]
    assert sum("waiver 'aicpu.opz'" in n for n in notes) == 1 and sum("waiver 'aicpu.ops'" in n for n in notes) == 1
    # the waiver that works is applied and not warned about
    assert [w["rule"] for w in report["waived"]] == ["precision.int8"]
    assert "precision.int8" not in err
