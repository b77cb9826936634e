"""``advisor graph FILE``: JSON and terminal summaries, and bad input as exit code 2 without a traceback."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from click.testing import CliRunner

from advisor.cli import main

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
RESNET101 = (SAMPLES / "Ascend__samples/python/level1_single_api/9_amct/amct_onnx/resnet-101/src/nuq_conf"
             / "resnet-101_quantized.json")
GE_PROTO = (SAMPLES / "Ascend__msprof/hisi/air/test/engines/nneng/st/testcase/graph_optimizer"
            / "ge_proto_00026_afterUBMatch.txt")
DATA = Path(__file__).resolve().parent / "data" / "graph"


def run(*args: str):
    return CliRunner().invoke(main, ["graph", *args])


def test_json_summary_of_the_quirks_file() -> None:
    res = run(str(DATA / "quirks.om.json"), "--format", "json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert (s["nodes"], s["edges"], s["data_edges"], s["control_edges"]) == (11, 9, 8, 1)
    assert s["by_type"]["Data"] == 3 and s["by_type"]["NetOutput"] == 3
    assert s["by_engine"] == {"GE_LOCAL": 7, "AI_CORE": 2, "AI_CPU": 1, "UNKNOWN": 1}
    assert (s["transdata"], s["cast"], s["unresolved_inputs"]) == (1, 1, 1)
    assert s["fusion_passes"] == {"ConvReluFusionPass": 1, "ConvScaleFusionPass": 1}
    assert s["ub_fusion_passes"] == {"TbeConvElemwiseFusionPass": 1}
    # x (NCHW) -> TransData input (NCHW): same; Conv (NC1HWC0) -> Cast input (NC1HWC0): same; none change
    assert s["format_changes"] == {"total": 0, "pairs": []}
    assert s["subgraphs"] == [{"name": "quirks_then", "nodes": 2, "parent": "cond"},
                              {"name": "quirks_else", "nodes": 2, "parent": "cond"}]


@pytest.mark.skipif(not RESNET101.is_file(), reason="../shared/samples not present")
def test_json_summary_counts_match_the_file() -> None:
    doc = json.loads(RESNET101.read_text(encoding="utf-8"))
    ops = doc["graph"][0]["op"]
    res = run(str(RESNET101), "--format", "json")
    assert res.exit_code == 0, res.output
    s = json.loads(res.stdout)
    assert s["nodes"] == len(ops)
    assert s["transdata"] == sum(op["type"] == "TransData" for op in ops)
    assert s["by_type"]["Conv2D"] == sum(op["type"] == "Conv2D" for op in ops)
    assert s["soc_version"] == "Ascend310"
    passes = [a["value"]["s"] for op in ops for a in op.get("attr", []) if a["key"] == "pass_name"]
    assert sum(s["fusion_passes"].values()) == len(passes)
    # every format change counted must be a real producer/consumer layout mismatch
    by_name = {op["name"]: op for op in ops}
    mismatches = 0
    for op in ops:
        slot = 0
        for ref in op.get("input", []):
            src, _, idx = ref.rpartition(":")
            if not ref or idx == "-1":
                continue
            out = by_name[src].get("output_desc", [])[int(idx)]
            ind = op.get("input_desc", [])[slot]
            slot += 1
            if out and ind and out.get("layout") and ind.get("layout") and out["layout"] != ind["layout"]:
                mismatches += 1
    assert s["format_changes"]["total"] == mismatches


@pytest.mark.skipif(not GE_PROTO.is_file(), reason="../shared/samples not present")
def test_terminal_summary_of_a_ge_dump() -> None:
    res = run(str(GE_PROTO))
    assert res.exit_code == 0, res.output
    text = res.stdout
    transdata = len(re.findall(r'^    type: "TransData"$', GE_PROTO.read_text(encoding="utf-8"), re.M))
    assert re.search(rf"TransData\s+{transdata}\b", text)
    for heading in ("Op types", "Engines", "Output formats", "Format changes"):
        assert heading in text


def test_bad_input_exits_2_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "model.json"
    bad.write_text('{"graph": [{"name": "g", "op": [', encoding="utf-8")
    res = run(str(bad))
    assert res.exit_code == 2
    assert "Traceback" not in res.output
    lines = [ln for ln in res.stderr.splitlines() if ln.strip()]
    assert len(lines) == 1 and str(bad) in lines[0] and "invalid JSON" in lines[0]
    res = run(str(tmp_path / "x.csv"))
    assert res.exit_code == 2
