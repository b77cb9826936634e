"""``advisor analyze --cann VERSION``: advice for the CANN release the model will be deployed with. The built-in
example records CANN 8.0.0 (no native Mish kernel on the 310P3: LeakyRelu, with its accuracy caveat); for 8.1 the
fix is the native Mish op, and the report says which release the advice targets and which one the input recorded."""

from __future__ import annotations

import json


def _mish(report: dict) -> dict:
    return next(f for f in report["findings"] if f["rule"] == "mish-leakyrelu.mish")


def test_target_release_changes_the_mish_fix(cli) -> None:
    code, out, _ = cli("analyze", "--example", "--format", "json", "-q")
    recorded = json.loads(out)
    assert code == 0 and recorded["input"]["cann_version"] == "8.0.0"
    assert "LeakyRelu" in _mish(recorded)["fix"]["summary"]

    code, out, _ = cli("analyze", "--example", "--format", "json", "-q", "--cann", "8.1.RC1")
    target = json.loads(out)
    assert code == 0 and target["input"]["cann_version"] == "8.1.RC1"
    mish = _mish(target)
    assert "native" in mish["fix"]["summary"] and "no accuracy cost" in mish["recommendation"]
    assert "advice targets CANN 8.1.RC1 (--cann); the input records CANN 8.0.0" in json.dumps(target)
