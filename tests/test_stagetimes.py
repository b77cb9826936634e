"""``ADVISOR_STAGE_TIMES``: the benchmark's view of one run -- seconds per stage and per knowledge base and, on
Linux, the peak resident memory of each stage and of the whole process (``benchmarks/run.py`` prints them)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from advisor.engine.kb_engine import discover, find_plugins


def _run_example(tmp_path: Path) -> dict[str, object]:
    record = tmp_path / "stages.json"
    env = dict(os.environ, ADVISOR_STAGE_TIMES=str(record))
    proc = subprocess.run([sys.executable, "-m", "advisor", "analyze", "--example", "--format", "json", "--quiet",
                           "--output", str(tmp_path / "report.json")], capture_output=True, text=True, env=env,
                          timeout=300)
    assert proc.returncode in (0, 1), proc.stderr  # 1: the example's score is under its gate
    return json.loads(record.read_text())


def test_every_stage_and_knowledge_base_is_timed(tmp_path: Path) -> None:
    stages = _run_example(tmp_path)
    for name in ("read", "model", "knowledge bases", "rank summary", "render"):
        assert isinstance(stages[name], float) and stages[name] >= 0.0, name
    kbs = {info.id for info in discover(find_plugins()) if getattr(info.cls, "scope", "rank") == "rank"}
    assert kbs and {f"kb {k}" for k in kbs} <= set(stages)
    kb_total = sum(float(v) for k, v in stages.items() if k.startswith("kb "))
    assert kb_total <= float(stages["knowledge bases"]) + 0.05  # per-KB times are inside the stage's


@pytest.mark.skipif(not Path("/proc/self/clear_refs").exists(), reason="peak memory per stage needs Linux /proc")
def test_peak_memory_per_stage_and_for_the_process(tmp_path: Path) -> None:
    peaks = _run_example(tmp_path)["peak_mb"]
    assert isinstance(peaks, dict)
    for name in ("read", "knowledge bases", "render"):
        assert 10.0 < peaks[name] < 4096.0, (name, peaks[name])
    # a stage's peak includes its inner stages' (each knowledge base's)
    assert peaks["knowledge bases"] >= max(v for k, v in peaks.items() if k.startswith("kb ")) - 0.5
    assert peaks["process"] >= max(v for k, v in peaks.items() if k != "process")
