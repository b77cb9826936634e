"""Every real text-profile sample listed in ../shared/samples/MANIFEST.tsv is ingested whole: the normalized
table has exactly as many rows as the raw file (counted here independently with ``csv`` / ``json``) and sampled
cells match the raw ones."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from functools import cache
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from advisor.common.errors import InputError
from advisor.ingest import load, read_source
from advisor.ingest.columns import TIMESTAMP_COLUMNS
from advisor.ingest.detect import RankSource
from advisor.ingest.timebase import absolute_ns
from advisor.model import Meta, Profile

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
MANIFEST = SAMPLES / "MANIFEST.tsv"


@dataclass(frozen=True)
class Entry:
    kind: str
    path: Path
    rows: str

    @property
    def id(self) -> str:
        return f"{self.kind}:{self.path.relative_to(SAMPLES)}"


def _entries(kinds: set[str]) -> list[Entry]:
    if not MANIFEST.is_file():
        return []
    out = []
    with open(MANIFEST, encoding="utf-8", newline="") as fh:
        for row in csv.DictReader(fh, delimiter="\t"):
            if row["kind"] in kinds:
                out.append(Entry(row["kind"], SAMPLES / row["repo"].replace("/", "__") / row["path"], row["rows"]))
    return out


def _raw(path: Path) -> tuple[list[str], list[list[str]]]:
    with open(path, encoding="utf-8-sig", newline="") as fh:
        rows = [r for r in csv.reader(fh) if r]
    return [h.strip() for h in rows[0]], rows[1:]


def _cell(raw: str) -> str | None:
    text = raw.strip().strip('"').strip()
    return None if text in ("", "N/A") else text


def _number(raw: str) -> float:
    text = _cell(raw)
    return math.nan if text is None else float(text.rstrip("%"))


@cache
def _profile(directory: Path, layout: str) -> Profile:
    """The profile of the directory holding a sample (read once per directory)."""
    try:
        profiles = load(directory)
    except InputError:  # a bare directory of statistics only (no op table): read it with the layout's reader
        return read_source(RankSource(directory, layout))
    assert len(profiles) == 1, directory
    return profiles[0]


def _torch_dir(path: Path) -> Path:
    return path.parent.parent if path.parent.name == "ASCEND_PROFILER_OUTPUT" else path.parent


def _sample_rows(rows: list[list[str]], width: int) -> list[int]:
    """First, middle and last rows that have the header's width (a known-short real row is not compared)."""
    full = [i for i, r in enumerate(rows) if len(r) == width]
    return sorted({full[0], full[len(full) // 2], full[-1]}) if full else []


def _exact_ns(raw: str) -> int | None:
    text = _cell(raw)
    return None if text is None else int(Decimal(text) * 1000)


def _check_cells(table: pd.DataFrame, header: list[str], rows: list[list[str]],
                 checks: dict[str, tuple[str, ...]], scale: dict[str, float] | None = None,
                 meta: Meta | None = None) -> None:
    """Compare canonical columns to the first raw header spelling present, on sampled rows. Time stamps must come
    back exactly (to the nanosecond) from the rank's origin plus the stored offset."""
    assert len(table) == len(rows)
    for canonical, spellings in checks.items():
        pos = next((header.index(s) for s in spellings if s in header), None)
        if pos is None:
            continue
        for i in _sample_rows(rows, len(header)):
            got = table[canonical].iloc[i]
            raw = rows[i][pos]
            if canonical in TIMESTAMP_COLUMNS and meta is not None:
                want_ns = _exact_ns(raw)
                # exact to the ns; a stamp far from the origin (a fixture stitched from two captures) keeps
                # float64's relative resolution of its offset
                slack = max(1, int(abs(got) * 1000 * 2.0**-51))
                assert (want_ns is None and math.isnan(got)) or abs(int(absolute_ns(meta, got)[0]) - want_ns) <= slack, \
                    (canonical, i, raw, got)
            elif pd.api.types.is_numeric_dtype(table[canonical]):
                want = _number(raw) * (scale or {}).get(canonical, 1.0)
                assert (math.isnan(got) and math.isnan(want)) or got == pytest.approx(want, rel=1e-9, abs=1e-9), \
                    (canonical, i, raw, got)
            else:
                want = _cell(raw)
                if canonical == "core" and want is not None:
                    want = want.upper()
                assert (pd.isna(got) and want is None) or str(got) == want, (canonical, i, raw, got)


OP_TABLE_KINDS = {"msprof.op_summary", "derived.op_summary_subset", "torch_npu.kernel_details"}
OP_CHECKS = {
    "name": ("Op Name", "Name"),
    "type": ("OP Type", "Type"),
    "core": ("Task Type", "Accelerator Core"),
    "duration_us": ("Task Duration(us)", "Duration(us)"),
    "start_us": ("Task Start Time(us)", "Start Time(us)"),
    "block_dim": ("Block Dim", "Block Num"),
    "aicore_time_us": ("aicore_time(us)",),
    "aiv_time_us": ("aiv_time(us)",),
    "input_shapes": ("Input Shapes",),
}


@pytest.mark.parametrize("entry", _entries(OP_TABLE_KINDS), ids=lambda e: e.id)
def test_op_tables_load_every_row(entry: Entry) -> None:
    header, rows = _raw(entry.path)
    (profile,) = load(entry.path)
    assert entry.rows in ("", str(len(rows)))
    checks = dict(OP_CHECKS)
    if entry.kind == "derived.op_summary_subset":  # no name/type/duration columns: derived from the file
        checks = {"aicore_time_us": ("aicore_time(us)",), "block_dim": ("Block Dim",),
                  "duration_us": ("aicore_time(us)",), "input_shapes": ("Input Shapes",)}
    _check_cells(profile.ops, header, rows, checks, meta=profile.meta)


@dataclass(frozen=True)
class TableSpec:
    layout: str
    table: Callable[[Profile], pd.DataFrame]
    checks: dict[str, tuple[str, ...]]
    scale: dict[str, float] | None = None


_STATS = {"type": ("OP Type",), "core": ("Core Type",), "count": ("Count",), "total_us": ("Total Time(us)",),
          "max_us": ("Max Time(us)",), "ratio": ("Ratio(%)",)}
_API = {"level": ("Level",), "name": ("API Name",), "total_us": ("Time(us)",), "count": ("Count",),
        "avg_us": ("Avg(us)",)}
CSV_SPECS: dict[str, TableSpec] = {
    "msprof.op_statistic": TableSpec("msprof-cann7", lambda p: p.op_stats, _STATS, {"ratio": 0.01}),
    "torch_npu.op_statistic": TableSpec("torch_npu-text", lambda p: p.op_stats, _STATS, {"ratio": 0.01}),
    "msprof.api_statistic": TableSpec("msprof-cann7", lambda p: p.api, _API),
    "torch_npu.api_statistic": TableSpec("torch_npu-text", lambda p: p.api, _API),
    "msprof.task_time": TableSpec("msprof-cann7", lambda p: p.extras["task_time"], {
        "name": ("kernel_name",), "core": ("kernel_type",), "duration_us": ("task_time(us)",),
        "start_us": ("task_start(us)",), "task_id": ("task_id",)}),
    "torch_npu.step_trace_time": TableSpec("torch_npu-text", lambda p: p.steps, {
        "step": ("Step",), "computing_us": ("Computing",), "free_us": ("Free",),
        "comm_not_overlapped_us": ("Communication(Not Overlapped)",), "preparing_us": ("Preparing",)}),
    "torch_npu.memory_record": TableSpec("torch_npu-text", lambda p: p.memory, {
        "component": ("Component",), "timestamp_us": ("Timestamp(us)",), "reserved_mb": ("Total Reserved(MB)",),
        "allocated_mb": ("Total Allocated(MB)",), "active_mb": ("Total Active(MB)",)}),
    "torch_npu.operator_details": TableSpec("torch_npu-text", lambda p: p.extras["operator_details"], {
        "name": ("Name",), "host_total_us": ("Host Total Duration(us)",),
        "device_total_us": ("Device Total Duration(us)",)}),
    "torch_npu.l2_cache": TableSpec("torch_npu-text", lambda p: p.extras["l2_cache"], {
        "name": ("Op Name",), "hit_rate": ("Hit Rate",), "victim_rate": ("Victim Rate",), "task_id": ("Task Id",)}),
    "torch_npu.operator_memory": TableSpec("torch_npu-text", lambda p: p.extras["operator_memory"], {
        "name": ("Name",), "size_kb": ("Size(KB)",), "duration_us": ("Duration(us)",)}),
    "torch_npu.npu_module_mem": TableSpec("torch_npu-text", lambda p: p.extras["npu_module_mem"], {
        "component": ("Component",), "reserved_mb": ("Total Reserved(MB)",), "timestamp_us": ("Timestamp(us)",)}),
}


def _holder(entry: Entry, layout: str) -> Path:
    return _torch_dir(entry.path) if layout == "torch_npu-text" else entry.path.parent


@pytest.mark.parametrize("entry", _entries(set(CSV_SPECS)), ids=lambda e: e.id)
def test_summary_tables_load_every_row(entry: Entry) -> None:
    spec = CSV_SPECS[entry.kind]
    header, rows = _raw(entry.path)
    profile = _profile(_holder(entry, spec.layout), spec.layout)
    assert entry.rows in ("", str(len(rows)))
    assert str(entry.path) in profile.meta.files_read
    _check_cells(spec.table(profile), header, rows, spec.checks, spec.scale, meta=profile.meta)


def _comm_ops(data: dict[str, Any]) -> list[tuple[str, str, str, dict[str, Any]]]:
    return [(step, kind, op, info) for step, kinds in data.items() for kind, ops in kinds.items()
            for op, info in ops.items() if op != "Total Op Info"]


@pytest.mark.parametrize("entry", _entries({"torch_npu.communication"}), ids=lambda e: e.id)
def test_communication_rows_per_op_and_transport(entry: Entry) -> None:
    with open(entry.path, encoding="utf-8") as fh:
        data = json.load(fh)
    ops = _comm_ops(data)
    expected = sum(max(1, len(info.get("Communication Bandwidth Info") or {})) for *_, info in ops)
    comm = _profile(_torch_dir(entry.path), "torch_npu-text").comm
    assert len(comm) == expected
    assert "Total Op Info" not in set(comm["op"].astype(str))
    for step, kind, op_key, info in (ops[0], ops[-1]):
        op, _, group = op_key.partition("@")
        rows = comm[(comm["op"] == op) & (comm["group"] == group) & (comm["kind"] == kind)]
        rows = rows[rows["step"] == float(step.removeprefix("step"))]
        bandwidth = info["Communication Bandwidth Info"]
        assert list(rows["transport"]) == list(bandwidth)
        assert rows["elapse_us"].iloc[0] == pytest.approx(info["Communication Time Info"]["Elapse Time(ms)"] * 1000)
        for transport, b in bandwidth.items():
            row = rows[rows["transport"] == transport].iloc[0]
            assert row["size_mb"] == pytest.approx(b["Transit Size(MB)"])
            assert row["bandwidth_gbps"] == pytest.approx(b["Bandwidth(GB/s)"])


@pytest.mark.parametrize("entry", _entries({"torch_npu.communication_matrix"}), ids=lambda e: e.id)
def test_communication_matrix_rows_per_link(entry: Entry) -> None:
    with open(entry.path, encoding="utf-8") as fh:
        data = json.load(fh)
    ops = _comm_ops(data)
    matrix = _profile(_torch_dir(entry.path), "torch_npu-text").extras["communication_matrix"]
    assert len(matrix) == sum(len(links) for *_, links in ops)
    step, kind, op_key, links = ops[-1]
    link, v = next(iter(links.items()))
    src, dst = (float(x) for x in link.split("-"))
    row = matrix[(matrix["src_rank"] == src) & (matrix["dst_rank"] == dst) & (matrix["kind"] == kind)
                 & (matrix["group"] == op_key.partition("@")[2])]
    assert any(r == pytest.approx(v["Transit Size(MB)"]) for r in row["size_mb"])
    assert v["Transport Type"] in set(row["transport"])


@pytest.mark.parametrize("entry", _entries({"torch_npu.profiler_info"}), ids=lambda e: e.id)
def test_profiler_info_fills_meta(entry: Entry) -> None:
    with open(entry.path, encoding="utf-8") as fh:
        info = json.load(fh)
    meta = _profile(entry.path.parent, "torch_npu-text").meta
    assert meta.rank == int(info["rank_id"])
    assert meta.config == info["config"]
    assert meta.torch_npu_version == info.get("torch_npu_version")
    if info.get("cann_version"):
        assert meta.cann_version == info["cann_version"]


@pytest.mark.parametrize("entry", _entries({"torch_npu.profiler_metadata"}), ids=lambda e: e.id)
def test_profiler_metadata_fills_environment(entry: Entry) -> None:
    with open(entry.path, encoding="utf-8") as fh:
        data = json.load(fh)
    meta = _profile(entry.path.parent, "torch_npu-text").meta
    assert meta.environment == {k: str(v) for k, v in data["ENV_VARIABLES"].items()}


@pytest.mark.parametrize("entry", [e for e in _entries({"msprof.device_info"}) if e.path.name.startswith("info.json")],
                         ids=lambda e: e.id)
def test_device_info_fills_core_counts(entry: Entry) -> None:
    with open(entry.path, encoding="utf-8") as fh:
        device = json.load(fh)["DeviceInfo"][0]
    layout = "msprof-cann7" if (entry.path.parents[1] / "mindstudio_profiler_output").is_dir() else "msprof-cann6"
    root = entry.path.parents[1] if layout == "msprof-cann7" else entry.path.parent
    meta = _profile(root, layout).meta
    assert meta.ai_core_num == device["ai_core_num"] and meta.aiv_num == device["aiv_num"]
    # the chips these counts are (platform_config ini values, DOMAIN.md 9.B.1): 32 AI cores and no vector cores at
    # 1000 MHz is a 910A; 1 AI core + 1 vector core (at 1250 MHz, nearest 310B1's 1224 MHz) a 310B
    expected = {(32, 0): "Ascend910A", (1, 1): "Ascend310B1"}[(device["ai_core_num"], device["aiv_num"])]
    assert meta.chip == expected
    assert meta.hardware is not None and meta.hardware.clock_mhz == float(device["aic_frequency"])


@pytest.mark.parametrize("entry", _entries({"msprof.task_time_json"}), ids=lambda e: e.id)
def test_timeline_only_device_dir_takes_ops_from_task_time_json(entry: Entry) -> None:
    with open(entry.path, encoding="utf-8") as fh:
        events = json.load(fh)
    hardware = {e["pid"] for e in events if e.get("ph") == "M" and e.get("name") == "process_name"
                and e["args"]["name"] == "Ascend Hardware"}
    tasks = [e for e in events if e.get("ph") == "X" and e["pid"] in hardware]
    profile = _profile(entry.path.parent.parent.parent, "msprof-cann6")
    assert len(profile.ops) == len(tasks)
    names = {e["name"] for e in tasks}
    assert set(profile.ops["name"].astype(str)) == names
    assert profile.ops["duration_us"].sum() == pytest.approx(sum(float(e["dur"]) for e in tasks))


def test_manifest_is_present_or_skipped() -> None:
    if not MANIFEST.is_file():
        pytest.skip("../shared/samples not present")
    kinds = {e.kind for e in _entries(OP_TABLE_KINDS | set(CSV_SPECS) | {"torch_npu.communication"})}
    assert {"msprof.op_summary", "torch_npu.kernel_details", "torch_npu.op_statistic"} <= kinds
