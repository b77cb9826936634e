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
NOT_READ = {
    "msprof.sample_config": "device_N/sample.json, msprof's collection settings: its application is info.json's "
                            "pid_name (read), its metric set shows in op_summary's columns",
    "msprof.prof_rule_json": "prof_rule_*.json, msprof's own rule verdicts on ops advisor reads and judges itself",
}
"""Files of a profile directory that carry nothing a rule needs: the reader lists them as skipped, with the reason."""


def _manifest() -> list[dict[str, str]]:
    with (SAMPLES / "MANIFEST.tsv").open(encoding="utf-8", newline="") as fh:
        return list(csv.DictReader(fh, delimiter="\t"))


def _path(row: dict[str, str]) -> Path:
    return SAMPLES / row["repo"].replace("/", "__") / row["path"]


def test_every_profile_kind_is_walked_by_a_manifest_test() -> None:
    from tests import test_manifest_db_timeline as db
    from tests import test_manifest_msprof_op as op
    from tests import test_manifest_text as text

    walked = (text.OP_TABLE_KINDS | set(text.CSV_SPECS) | {"torch_npu.communication"} | db.DB_KINDS
              | db.ANALYSIS_KINDS | db.TRACE_KINDS | db.LEGACY_KINDS | op.MSPROF_OP_KINDS)
    kinds = {row["kind"] for row in _manifest()}
    uncovered = kinds - walked - set(NOT_PROFILES) - SIDE_FILES - set(NOT_READ)
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


# the op_summary columns (as written) of each msprof --aic-metrics set, and the pipe ratios the rules read them as
# (DOMAIN.md 5.2: PipelineExecuteUtilization is the pipe set of the Atlas 200/500 A2 inference chips)
METRIC_SET_COLUMNS = {"PipelineExecuteUtilization": {f"{p}_exe_ratio": f"{p}_ratio"
                                                     for p in ("vec", "mac", "scalar", "mte1", "mte2", "mte3")}}


@pytest.mark.parametrize("kind", sorted(NOT_READ))
def test_files_not_read_are_listed_as_skipped_with_a_reason(kind: str) -> None:
    rows = [r for r in _manifest() if r["kind"] == kind]
    assert rows
    for row in rows:
        path = _path(row)
        root = next(p for p in path.parents if p.name.startswith("PROF_"))
        [profile] = load(root)
        meta = profile.meta
        reasons = [s.reason for s in meta.files_skipped if s.path == str(path)]
        assert len(reasons) == 1 and len(reasons[0]) > 20, (path, reasons)
        assert str(path) not in meta.files_read
        data = json.loads(path.read_text(encoding="utf-8"))
        if kind == "msprof.sample_config":
            # what it would add is there already: the application (from info.json) and the metric set's columns
            assert data["app"] == meta.application and meta.application in meta.context_evidence
            [summary] = root.glob("mindstudio_profiler_output/op_summary_*.csv")
            with summary.open(encoding="utf-8", newline="") as fh:
                raw = list(csv.DictReader(fh))
            assert len(raw) == len(profile.ops)
            for header, column in METRIC_SET_COLUMNS[data["ai_core_metrics"]].items():
                got = profile.ops[column].astype(float).tolist()
                assert got == pytest.approx([float(r[header]) for r in raw]), (header, column)
        else:
            # msprof's verdicts name ops advisor has read (and judges with its own rules)
            named = {op for section in data["data"].values() for rule in section for result in rule["result"]
                     for op in result.get("Tuning Data", [])}
            assert named <= set(profile.ops["name"].astype(str)), named
