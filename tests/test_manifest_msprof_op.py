"""Every msprof op (``OPPROF_*``) sample listed in ../shared/samples/MANIFEST.tsv is read whole by
advisor/ingest/msprof_op.py: ``OpBasicInfo.csv`` gives the kernel's op row (name, kernel mode, duration, block dims,
clocks); each per-block metric CSV gives one row per (``block_id``, ``sub_block_id``) in
``profile.extras["msprof_op_blocks"]`` with every metric column under its normalized name and the raw value; and the
per-op figures the rules read are the aggregates of those rows. Every expected value is parsed here with ``csv``."""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from functools import cache
from pathlib import Path

import pytest

from advisor.ingest import load
from advisor.ingest.msprof_op import BLOCKS_EXTRA
from advisor.model import Profile

SAMPLES = Path(__file__).resolve().parents[1].parent / "shared" / "samples"
MANIFEST = SAMPLES / "MANIFEST.tsv"

METRIC_FILES = {
    "msprof_op.pipe_utilization": "PipeUtilization",
    "msprof_op.arithmetic_utilization": "ArithmeticUtilization",
    "msprof_op.memory": "Memory",
    "msprof_op.memory_l0": "MemoryL0",
    "msprof_op.memory_ub": "MemoryUB",
    "msprof_op.l2cache": "L2Cache",
    "msprof_op.resource_conflict_ratio": "ResourceConflictRatio",
}
MSPROF_OP_KINDS = {"msprof_op.op_basic_info", *METRIC_FILES}

# OpBasicInfo "Op Type" is the kernel mode; the core the op row gets, and the side (sub-block prefix) that leads
CORE = {"vector": "AI_VECTOR_CORE", "mix": "MIX_AIC", "cube": "AI_CORE"}
LEAD = {"vector": "aiv", "mix": "aic", "cube": "aic"}

# The normalized metric names (FORMATS.md section 12 headers -> the op_summary vocabulary of docs/model.md):
# lower case, units as suffixes, "(estimate)" kept, and the four msprof op spellings op_summary names otherwise.
UNITS = {"(us)": "_us", "(gb/s)": "", "(%)": "", "(kb)": "_kb"}
RENAMES = {"aic_time_us": "aicore_time_us", "aic_cube_time_us": "aic_mac_time_us", "aic_cube_ratio": "aic_mac_ratio",
           "aiv_vec_fops": "aiv_vector_fops"}


def canonical(header: str) -> str:
    name = header.strip().lower()
    estimate = name.endswith("(estimate)")
    name = name.removesuffix("(estimate)")
    for unit, suffix in UNITS.items():
        if name.endswith(unit):
            name = name[: -len(unit)] + suffix
    name = RENAMES.get(name, name)
    return name + "_estimate" if estimate else name


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
    with open(MANIFEST, encoding="utf-8", newline="") as fh:
        return [Entry(r["kind"], SAMPLES / r["repo"].replace("/", "__") / r["path"], r["rows"])
                for r in csv.DictReader(fh, delimiter="\t") if r["kind"] in kinds]


def _params(kinds: set[str]) -> list[object]:
    entries = _entries(kinds)
    if not entries:
        return [pytest.param(None, marks=pytest.mark.skip(reason="../shared/samples not present"))]
    return [pytest.param(e, id=e.id) for e in entries]


def _rows(path: Path) -> list[dict[str, str]]:
    """The CSV's rows; the empty column of the trailing comma every msprof op line ends with is dropped."""
    with open(path, encoding="utf-8-sig", newline="") as fh:
        return [{k.strip(): v.strip() for k, v in r.items() if k and k.strip()} for r in csv.DictReader(fh)]


def _f(text: str) -> float:
    return math.nan if text in ("NA", "N/A", "") else float(text)


@cache
def _profile(directory: Path) -> Profile:
    [profile] = load(directory)
    return profile


def _basic(directory: Path) -> dict[str, str]:
    [basic] = _rows(directory / "OpBasicInfo.csv")
    return basic


def _same(got: float, want: float) -> bool:
    return (math.isnan(want) and math.isnan(got)) or got == pytest.approx(want, rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("entry", _params({"msprof_op.op_basic_info"}))
def test_op_basic_info_is_the_op_row(entry: Entry) -> None:
    raw = _rows(entry.path)
    assert entry.rows == str(len(raw)) == "1"
    basic = raw[0]
    profile = _profile(entry.path.parent)
    assert profile.meta.layout == "msprof-op" and profile.meta.context == "kernel-dev"
    assert str(entry.path) in profile.meta.files_read
    [op] = [r for _, r in profile.ops.iterrows()]
    assert op["name"] == basic["Op Name"]
    assert op["kernel_mode"] == basic["Op Type"] and op["core"] == CORE[basic["Op Type"]]
    assert op["duration_us"] == float(basic["Task Duration(us)"])
    assert op["block_dim"] == float(basic["Block Dim"])
    for column, header in (("mix_block_dim", "Mix Block Dim"), ("device_id", "Device Id"),
                           ("current_freq_mhz", "Current Freq"), ("rated_freq_mhz", "Rated Freq")):
        assert _same(float(op[column]), _f(basic[header])), (column, basic[header], op[column])
    assert profile.ops["type"].isna().all() and profile.ops["start_us"].isna().all()  # none recorded: none invented
    # the report's device time is the kernel's Task Duration
    assert profile.time.to_dict()["window_us"] == pytest.approx(float(basic["Task Duration(us)"]))


@pytest.mark.parametrize("entry", _params(set(METRIC_FILES)))
def test_metric_csv_rows_per_block_with_normalized_columns(entry: Entry) -> None:
    raw = _rows(entry.path)
    assert entry.rows == str(len(raw))
    profile = _profile(entry.path.parent)
    assert str(entry.path) in profile.meta.files_read
    assert METRIC_FILES[entry.kind] in profile.meta.config["aic_metrics"]
    blocks = profile.extras[BLOCKS_EXTRA]
    # one row per (block_id, sub_block_id), the side from the sub-block (cube0 -> aic, vector0/1 -> aiv)
    assert len(blocks) == len(raw)
    keys = list(zip(blocks["block_id"].astype(float), blocks["sub_block_id"].astype(str), strict=True))
    assert sorted(keys) == sorted((float(r["block_id"]), r["sub_block_id"]) for r in raw)
    at = {k: i for i, k in enumerate(keys)}
    for r in raw:
        i = at[(float(r["block_id"]), r["sub_block_id"])]
        assert blocks["side"].iloc[i] == ("aiv" if r["sub_block_id"].startswith("vector") else "aic")
        assert blocks["name"].iloc[i] == _basic(entry.path.parent)["Op Name"]
    # every metric column, under its normalized name, with the raw value in every row
    headers = [h for h in raw[0] if h not in ("block_id", "sub_block_id")]
    assert headers
    missing = [h for h in headers if canonical(h) not in blocks.columns]
    assert not missing, f"metric columns not read (or named otherwise): {missing}"
    for h in headers:
        column = blocks[canonical(h)]
        for r in raw:
            got = float(column.iloc[at[(float(r["block_id"]), r["sub_block_id"])]])
            assert _same(got, _f(r[h])), (h, r["block_id"], r["sub_block_id"], r[h], got)


# ---------------------------------------------------------------------------------------------------------
# the per-op figures the rules read, from the per-block rows
# ---------------------------------------------------------------------------------------------------------
def _side(raw: list[dict[str, str]], side: str) -> list[dict[str, str]]:
    prefix = "vector" if side == "aiv" else "cube"
    return [r for r in raw if r["sub_block_id"].startswith(prefix)]


def _mean(values: list[float]) -> float:
    values = [v for v in values if not math.isnan(v)]
    return sum(values) / len(values) if values else math.nan


def _weighted(rows: list[dict[str, str]], column: str, side: str) -> float:
    pairs = [(_f(r[column]), _f(r[f"{side}_total_cycles"])) for r in rows if not math.isnan(_f(r[column]))]
    return sum(v * w for v, w in pairs) / sum(w for _, w in pairs) if pairs else math.nan


def _side_time(raw: list[dict[str, str]], side: str) -> float:
    return _mean([_f(r[f"{side}_time(us)"]) for r in _side(raw, side)])


@pytest.mark.parametrize("entry", _params(set(METRIC_FILES)))
def test_per_op_figures_aggregate_the_blocks(entry: Entry) -> None:
    raw = _rows(entry.path)
    basic = _basic(entry.path.parent)
    op = _profile(entry.path.parent).ops.iloc[0]
    lead = LEAD[basic["Op Type"]]
    duration = float(basic["Task Duration(us)"])
    kind = entry.kind
    if kind == "msprof_op.pipe_utilization":
        # the kernel's core time is the mean over the leading side's cores, as op_summary's aicore_time; the pipe
        # ratios are the leading side's, weighted by each core's cycles (Cummin: scalar-bound vector kernel; the
        # ChunkScaledDotKkt MIX kernel: scalar-bound cube side)
        assert op["aicore_time_us"] == pytest.approx(_side_time(raw, lead), rel=1e-9)
        assert _same(op["scalar_ratio"], _weighted(_side(raw, lead), f"{lead}_scalar_ratio", lead))
        assert _same(op["mte2_ratio"], _weighted(_side(raw, lead), f"{lead}_mte2_ratio", lead))
        assert op["aicore_time_us"] <= duration
    elif kind == "msprof_op.arithmetic_utilization":  # FLOPs are totals over the cores
        vec = [_f(r["aiv_vec_fops"]) for r in _side(raw, "aiv")]
        assert op["vector_fops"] == sum(vec)
        cube = [_f(r["aic_cube_fops"]) for r in _side(raw, "aic")]
        assert _same(float(op.get("cube_fops", math.nan)), sum(cube) if cube else math.nan)
    elif kind == "msprof_op.memory":
        # bandwidth x core time = the bytes every core moved to and from main memory (what the roofline reads)
        moved = sum(_f(r["read_main_memory_datas(KB)"]) + _f(r["write_main_memory_datas(KB)"]) for r in raw) * 1024
        got = (op["main_mem_read_bw"] + op["main_mem_write_bw"]) * op["aicore_time_us"] * 1e3
        assert got == pytest.approx(moved, rel=1e-9)
    elif kind in ("msprof_op.memory_l0", "msprof_op.memory_ub"):
        # a per-core bandwidth (GiB/s over the Task Duration) -> bytes -> GB/s over the side's mean core time
        for h in (h for h in raw[0] if h.endswith("(GB/s)")):
            side = h[:3]
            values = [_f(r[h]) for r in _side(raw, side) if not math.isnan(_f(r[h]))]
            got = float(op.get(canonical(h), math.nan))
            if not values:
                assert math.isnan(got), h
                continue
            moved = sum(values) * 2**30 * duration * 1e-6
            assert got * _side_time(raw, side) * 1e3 == pytest.approx(moved, rel=1e-9), h
    elif kind == "msprof_op.l2cache":  # hit rates weighted by each core's cycles, per side
        for side in ("aic", "aiv"):
            want = _weighted(_side(raw, side), f"{side}_total_hit_rate(%)", side)
            assert _same(float(op.get(f"{side}_total_hit_rate", math.nan)), want), side
    elif kind == "msprof_op.resource_conflict_ratio":  # conflict and wait ratios weighted by cycles, per side
        for h in (h for h in raw[0] if h.endswith("_ratio")):
            side = h[:3]
            want = _weighted(_side(raw, side), h, side)
            assert _same(float(op.get(canonical(h), math.nan)), want), h
    else:
        pytest.fail(f"no per-op check for {kind}")


def test_manifest_lists_every_msprof_op_kind_or_skips() -> None:
    if not MANIFEST.is_file():
        pytest.skip("../shared/samples not present")
    assert {e.kind for e in _entries(MSPROF_OP_KINDS)} == MSPROF_OP_KINDS
