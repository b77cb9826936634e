"""SS928V100 / SS927V100 (SVP ACL) profiling ``JOB*`` directories: per-layer ``op_summary`` CSVs.

File name (SS928V100/SS927V100 Profiling guide):
``op_summary_{device_id}.{model_file_name}.{model_id}.{batch_num}.{input_pic_num}.{current_pic_count}.{icache_miss_rate}.{frequency}.csv``
-- one file per inferred picture; each row is one network layer.

Mapping to the ops table: ``Layer Name`` -> name, ``Layer Type`` -> type, ``Time(us)`` -> duration_us,
``Mac Busy Ratio`` -> mac_ratio, ``Vec Busy Ratio`` -> vec_ratio, ``Memory Bound`` -> memory_bound, every other
column kept as ``soc_*`` (``soc_dld_ratio``, ``soc_ddr_total_bytes``...). All layers run on the AI core
(core ``AI_CORE``); the picture counter becomes ``step``, the file name's model id / device / I-cache miss rate
fill ``model_id`` / ``device_id`` / ``icache_miss_rate``. Where ``Memory Bound`` is absent it is computed with
the guide's formula ``max(Dstr, DLD, WLD) / max(Mac Busy, Vec Ppen)``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

import advisor.ingest.columns as C
from advisor.common.errors import InputError
from advisor.ingest.csvread import read_table
from advisor.ingest.layout import Layout, Match, RankSource
from advisor.ingest.normalize import clean_text, finalize_ops
from advisor.model import Meta, Profile

_FILE = re.compile(
    r"^op_summary_(?P<device>\d+)\.(?P<model>.+?)\.(?P<model_id>\d+)\.(?P<batch>\d+)\.(?P<pics>\d+)"
    r"\.(?P<pic>\d+)\.(?P<icache>\d+(?:\.\d+)?)\.(?P<freq>\d+(?:\.\d+)?)\.csv$"
)
CHIP = "SS928V100/SS927V100"


def find_files(root: Path) -> list[Path]:
    """The SoC op_summary files under ``root`` (any depth), in picture order."""
    if root.is_file():
        return [root]
    files = [p for p in root.rglob("op_summary_*.csv") if p.is_file() and "." in p.stem]
    return sorted(files, key=_order)


def _order(p: Path) -> tuple[str, int, str]:
    m = _FILE.match(p.name)
    return (m.group("model"), int(m.group("pic")), p.name) if m else ("", 0, p.name)


def read(root: Path, meta: Meta) -> Profile:
    """Read every per-picture op_summary of a JOB directory into one ops table."""
    root = Path(root)
    files = find_files(root)
    if not files:
        raise InputError(root, "no SoC op_summary_<device>.<model>.<...>.csv file found")
    frames = [_read_file(p, meta) for p in files]
    meta.source_of("ops", files[-1] if len(files) == 1 else f"{len(files)} SoC op_summary files")
    raw = pd.concat(frames, ignore_index=True) if len(frames) > 1 else frames[0]
    _fill_memory_bound(raw)
    ops = finalize_ops(raw)
    ops["soc_ori_layer_name"] = clean_text(ops["soc_ori_layer_name"]).astype("category")
    if "model_name" in ops.columns:
        ops["model_name"] = clean_text(ops["model_name"]).astype("category")
    meta.chip = meta.chip or CHIP
    meta.framework = meta.framework or "SVP ACL"
    meta.notes.append("SoC (SVP ACL) layer profile: per-layer times, no start times, no tensor shapes; "
                      "soc_* columns keep the SoC-specific ratios and DDR traffic")
    return Profile(ops=ops, meta=meta)


def _read_file(path: Path, meta: Meta) -> pd.DataFrame:
    t = read_table(path, C.SOC_JOB_ALIASES, text=C.SOC_JOB_TEXT, required=["name", "duration_us"], meta=meta)
    meta.notes.extend(t.notes)
    meta.read(path)
    df = t.frame
    for col in C.SOC_JOB_ALIASES:
        if col not in df.columns:
            df[col] = pd.Series(pd.NA, index=df.index, dtype="string") if col in C.SOC_JOB_TEXT else np.nan
    df["core"] = "AI_CORE"
    m = _FILE.match(path.name)
    if m:
        df["device_id"] = float(m.group("device"))
        df["model_id"] = float(m.group("model_id"))
        df["step"] = float(m.group("pic"))
        df["icache_miss_rate"] = float(m.group("icache"))
        df["model_name"] = m.group("model")
        note = (f"{path.name}: model {m.group('model')}, batch {m.group('batch')}, picture {m.group('pic')} of "
                f"{m.group('pics')}, frequency {m.group('freq')}")
        meta.notes.append(note)
    else:
        meta.notes.append(f"{path.name}: file name does not follow op_summary_<device>.<model>.<id>.<batch>."
                          "<pics>.<pic>.<icache>.<freq>.csv; model/picture unknown")
    return df


def _fill_memory_bound(df: pd.DataFrame) -> None:
    """The guide's Memory Bound where the file did not write it."""
    missing = df["memory_bound"].isna().to_numpy()
    if not missing.any():
        return
    load = np.fmax(np.fmax(df["soc_dstr_ratio"].to_numpy(dtype="float64"), df["soc_dld_ratio"].to_numpy(
        dtype="float64")), df["soc_wld_ratio"].to_numpy(dtype="float64"))
    busy = np.fmax(df["mac_ratio"].to_numpy(dtype="float64"), df["soc_vec_ppen_ratio"].to_numpy(dtype="float64"))
    with np.errstate(divide="ignore", invalid="ignore"):
        computed = np.where(busy > 0, load / busy, np.nan)
    df["memory_bound"] = np.where(missing, computed, df["memory_bound"].to_numpy(dtype="float64"))


# ---------------------------------------------------------------------------------------------------------
# the layout this module reads (advisor.ingest.registry)
# ---------------------------------------------------------------------------------------------------------
_SOC_SUMMARY = re.compile(r"^op_summary_\d+\..+\.csv$")
"""An SS928/SS927 per-picture op summary: ``op_summary_<device>.<model>.<...>.csv``."""


def _job_dir(d: Path) -> list[RankSource]:
    """A ``JOB*`` directory of per-picture op summaries (here, or one level down)."""
    if any(_SOC_SUMMARY.match(p.name) for p in d.glob("op_summary_*.csv")) or \
            (d.name.upper().startswith("JOB") and any(d.glob("*/op_summary_*.*.csv"))):
        return [RankSource(d, "soc-job")]
    return []


LAYOUTS = (
    Layout("soc-job", "SoC JOB", "SS928/SS927 SVP ACL: JOB* per-picture op summaries", read,
           in_dir=(Match(80, _job_dir),),
           context=("om-acl", "SS928/SS927 SVP ACL JOB summary: an offline model run through SVP ACL")),
)
