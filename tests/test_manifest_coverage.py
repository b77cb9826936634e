"""Every profile kind in ../shared/samples/MANIFEST.tsv is ingested by a test; the rest are not profiles.

The row-count walks live in test_manifest_text.py (CSV/JSON text kinds) and test_manifest_db_timeline.py
(SQLite, trace JSON, MindSpore legacy). This file checks nothing fell between them and covers the side files
of a profile directory (metadata, device info, matrices) that carry no op rows.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest

from advisor.ingest import load

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
pytestmark = pytest.mark.skipif(not (SAMPLES / "MANIFEST.tsv").is_file(), reason="../shared/samples not present")

NOT_PROFILES = {
    "aipp.cfg": "ATC AIPP config (read by advisor fix tests, not a profile)",
    "fusion_switch.cfg": "ATC fusion switch config",
    "fusion_config.json": "FE built-in fusion config",
    "proto": "protobuf schema",
    "platform_config.ini": "SoC platform config",
    "msprof.config": "msprof's header grouping file",
    "om.json": "model graph (tests/test_graph_*.py)",
    "ge_proto.txt": "model graph (tests/test_graph_*.py)",
    "ge_onnx.pbtxt": "model graph (tests/test_graph_*.py)",
    "onnx.json": "model graph (tests/test_graph_*.py)",
    "msprof_analyze.cluster_step_trace_time": "the peer's own cluster output, not profiler output",
    "msprof_analyze.cluster_communication": "the peer's own cluster output, not profiler output",
    "msprof_analyze.cluster_communication_matrix": "the peer's own cluster output, not profiler output",
}
SIDE_FILES = {"torch_npu.profiler_info", "torch_npu.profiler_metadata", "torch_npu.communication_matrix",
              "torch_npu.l2_cache", "torch_npu.static_op_mem", "msprof.device_info"}


def _manifest() -> list[dict[str, str]]:
    with (SAMPLES / "MANIFEST.tsv").open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _path(row: dict[str, str]) -> Path:
    return SAMPLES / row["repo"].replace("/", "__") / row["path"]


def test_every_profile_kind_is_walked_by_a_manifest_test() -> None:
    from tests import test_manifest_db_timeline as db
    from tests import test_manifest_text as text

    walked = (text.OP_TABLE_KINDS | set(text.CSV_SPECS) | {"torch_npu.communication"} | db.DB_KINDS
              | db.ANALYSIS_KINDS | db.TRACE_KINDS | db.LEGACY_KINDS)
    kinds = {row["kind"] for row in _manifest()}
    uncovered = kinds - walked - set(NOT_PROFILES) - SIDE_FILES
    assert not uncovered, f"MANIFEST kinds no test ingests: {sorted(uncovered)}"


@pytest.mark.parametrize("kind", sorted(SIDE_FILES))
def test_side_files_land_in_the_profile(kind: str) -> None:
    rows = [r for r in _manifest() if r["kind"] == kind]
    assert rows
    for row in rows:
        path = _path(row)
        root = path.parent.parent if path.parent.name == "ASCEND_PROFILER_OUTPUT" else path.parent
        if kind == "msprof.device_info":
            root = path.parent.parent  # PROF_*/device_N/info.json.N
        profiles = load(root)
        if kind == "msprof.device_info" and not path.name.startswith("info.json"):
            continue  # start_info/end_info hold collection timestamps only
        assert str(path) in {f for p in profiles for f in p.meta.files_read}, (kind, path)
        p = profiles[0]
        if kind == "torch_npu.profiler_metadata":
            env = json.loads(path.read_text(encoding="utf-8")).get("ENV_VARIABLES", {})
            assert {k: str(v) for k, v in env.items()} == {k: str(v) for k, v in p.meta.environment.items()}
        elif kind == "msprof.device_info":
            info = json.loads(path.read_text(encoding="utf-8"))
            assert p.meta.ai_core_num == info["DeviceInfo"][0]["ai_core_num"]
        elif kind == "torch_npu.profiler_info":
            info = json.loads(path.read_text(encoding="utf-8"))
            assert p.meta.rank == int(info.get("rank_id", p.meta.rank))
