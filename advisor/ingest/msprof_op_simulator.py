"""``msprof op simulator`` results: ``OPPROF_*/simulator/`` -- an instruction-level simulation of one kernel,
not a measurement on a device.

Layout (msopprof docs, "msOpProf simulator模式性能数据"):

    OPPROF_{timestamp}_XXX/
        dump/                               raw simulation dump (not read)
        simulator/
            core0.veccore0/                 one directory per simulated core: core<N>.veccore<M> (vector) or
                core0.veccore0_instr_exe.csv   core<N>.cubecore<M> (cube)
                core0.veccore0_code_exe.csv
                trace.json                  that core's instruction pipeline
            visualize_data.bin              (not read)
            trace.json                      every core's instruction pipeline (Chrome trace: pid = core, tid = pipe)

With several kernels the CSV names carry a time suffix (``core0.veccore0_instr_exe_<time>.csv``).

What each becomes:

* one op row per simulated kernel. ``name``: the simulator records no kernel name, so the result directory's name
  (``OPPROF_*``) stands for it; ``core``: vector cores only -> AI_VECTOR_CORE, cube cores only -> AI_CORE, both ->
  MIX_AIC; ``block_dim``: the number of distinct ``core<N>``; ``duration_us``: first instruction start to last
  instruction end over every core (the summary ``trace.json``, else the per-core ones); ``aicore_time_us``: the mean
  span of a core of the leading side; per-side pipe ratios (``aic_mac_ratio`` for the CUBE pipe, ``aiv_vec_ratio``
  for VECTOR, ``*_scalar_ratio``, ``*_mte1/2/3_ratio``, ``aic_fixpipe_ratio``): the pipe's busy time (union of its
  instruction events) over the core's span, averaged over the side's cores weighted by their spans.
* trace times are Chrome-trace microseconds; they are checked against ``instr_exe``'s ``running_time(us)``: a trace
  whose instruction time is ~1000x the CSV's is read as nanoseconds (and the notes say so).
* ``*_instr_exe.csv`` (``instr,addr,pipe,call_count,cycles,running_time(us),detail``) rows ->
  ``profile.extras["msprof_op_instructions"]`` with a ``core`` column; ``*_code_exe.csv``
  (``code,call_count,cycles,running_time(us)``) rows -> ``profile.extras["msprof_op_code_lines"]``.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pandas as pd

from advisor.common.errors import InputError
from advisor.common.intervals import union_length
from advisor.ingest.layout import Layout, Match, RankSource
from advisor.ingest.msprof_op import mark_kernel_dev
from advisor.ingest.normalize import finalize_ops
from advisor.ingest.timeline import read_trace
from advisor.model import Meta, Profile

INSTRUCTIONS_EXTRA = "msprof_op_instructions"
CODE_LINES_EXTRA = "msprof_op_code_lines"

PIPE_METRIC = {"VECTOR": "vec", "VEC": "vec", "CUBE": "mac", "MMAD": "mac", "SCALAR": "scalar",
               "SCALARLDST": "scalar", "MTE1": "mte1", "MTE2": "mte2", "MTE3": "mte3", "FIXP": "fixpipe",
               "FIXPIPE": "fixpipe"}
"""Simulator pipe (trace tid / instr_exe ``pipe``) -> the ``*_<pipe>_ratio`` metric it feeds."""

_CORE_DIR = re.compile(r"^core(\d+)\.(veccore|cubecore)(\d+)$")
_CSV_KIND = re.compile(r"^(core\d+\.(?:veccore|cubecore)\d+)_(instr_exe|code_exe)(?:_(\d{14,17}))?\.csv$")


def read(root: Path, meta: Meta) -> Profile:
    """Reader-registry entry for layout ``msprof-op-simulator``: ``root`` is an ``OPPROF_*`` directory."""
    root = Path(root)
    sim = root / "simulator" if (root / "simulator").is_dir() else root
    cores = sorted((c for c in sim.iterdir() if c.is_dir() and _CORE_DIR.match(c.name)), key=lambda c: c.name)
    if not cores:
        raise InputError(sim, "no core<N>.veccore<M> / core<N>.cubecore<M> directories: not an msprof op "
                              "simulator result")
    instructions, code_lines = _read_csvs(cores, meta)
    spans, busy = _trace(sim, cores, meta)
    if not spans:
        raise InputError(sim, "no instruction events in simulator/trace.json or the cores' trace.json: "
                              "no kernel duration can be read")
    scale = _time_scale(busy, instructions, meta)
    spans = {c: (s * scale, e * scale) for c, (s, e) in spans.items()}
    busy = {k: v * scale for k, v in busy.items()}
    row = _op_row(root, spans, busy)
    ops = finalize_ops(pd.DataFrame([row]))
    profile = Profile(ops=ops, meta=meta)
    if len(instructions):
        profile.extras[INSTRUCTIONS_EXTRA] = instructions
    if len(code_lines):
        profile.extras[CODE_LINES_EXTRA] = code_lines
    meta.framework = meta.framework or "msprof op simulator"
    mark_kernel_dev(meta)
    meta.notes.append(f"msprof op simulator: {len(spans)} simulated core(s); times are simulated, not measured on "
                      "a device; the simulator records no kernel name or op type")
    for name in ("visualize_data.bin",):
        if (sim / name).exists():
            meta.skip(sim / name, "MindStudio Insight visualization file, not read")
    if (root / "dump").exists():
        meta.skip(root / "dump", "raw simulator dump, not read")
    return profile


# ---------------------------------------------------------------------------------------------------------
# per-core files
# ---------------------------------------------------------------------------------------------------------
def _read_csvs(cores: list[Path], meta: Meta) -> tuple[pd.DataFrame, pd.DataFrame]:
    instr: list[pd.DataFrame] = []
    code: list[pd.DataFrame] = []
    for core in cores:
        for path in sorted(core.glob("*.csv")):
            m = _CSV_KIND.match(path.name)
            if not m:
                continue
            try:
                df = pd.read_csv(path, dtype=str, keep_default_na=False)
            except (OSError, ValueError, pd.errors.ParserError, UnicodeDecodeError) as e:
                meta.skip(path, f"unreadable CSV ({str(e).splitlines()[0] if str(e) else type(e).__name__})")
                continue
            df.columns = [str(c).strip() for c in df.columns]
            need = ("instr", "pipe", "running_time(us)") if m.group(2) == "instr_exe" else ("code", "running_time(us)")
            if not set(need) <= set(df.columns):
                meta.skip(path, f"no {'/'.join(need)} columns; found: {', '.join(df.columns[:8])}")
                continue
            meta.read(path)
            df.insert(0, "core", core.name)
            df = df.rename(columns={"running_time(us)": "running_time_us"})
            for col in ("call_count", "cycles", "running_time_us"):
                if col in df:
                    df[col] = pd.to_numeric(df[col], errors="coerce")
            (instr if m.group(2) == "instr_exe" else code).append(df)
    cat = lambda frames: pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()  # noqa: E731
    return cat(instr), cat(code)


def _trace(sim: Path, cores: list[Path], meta: Meta) -> tuple[dict[str, tuple[float, float]], dict[tuple[str, str], float]]:
    """Per core: (first start, last end) of its instruction events; per (core, metric pipe): busy time."""
    paths = [sim / "trace.json"] if (sim / "trace.json").is_file() else \
        [c / "trace.json" for c in cores if (c / "trace.json").is_file()]
    names = {c.name for c in cores}
    spans: dict[str, tuple[float, float]] = {}
    busy: dict[tuple[str, str], float] = {}
    for path in paths:
        try:
            events = read_trace(path, meta, device_ops=False).events
        except InputError as e:
            meta.skip(path, e.problem)
            continue
        meta.read(path)
        if not len(events):
            continue
        start = events["start_us"].to_numpy(dtype="float64")
        end = start + np.nan_to_num(events["duration_us"].to_numpy(dtype="float64"))
        core = events["process"].astype(str).to_numpy()
        pipe = np.array([_thread(t) for t in events["tid"].to_numpy(dtype=object)], dtype=object)
        for c in np.unique(core):
            if c not in names and len(paths) == 1:
                continue
            sel = core == c
            key = c if c in names else path.parent.name
            spans[key] = (float(np.nanmin(start[sel])), float(np.nanmax(end[sel])))
            for p in np.unique(pipe[sel]):
                metric = PIPE_METRIC.get(str(p).upper())
                if metric is None:
                    continue
                m = sel & (pipe == p)
                busy[(key, metric)] = busy.get((key, metric), 0.0) + union_length(start[m], end[m])
    return spans, busy


def _thread(tid: object) -> str:
    return str(tid).strip() if tid is not None else ""


def _time_scale(busy: dict[tuple[str, str], float], instructions: pd.DataFrame, meta: Meta) -> float:
    """1.0 when the trace is in microseconds (Chrome trace), 1e-3 when its pipe time is ~1000x the CSV's."""
    if not len(instructions) or not busy:
        return 1.0
    csv_time = float(instructions["running_time_us"].sum(skipna=True))
    trace_time = float(sum(busy.values()))
    if csv_time > 0 and 300.0 < trace_time / csv_time < 3000.0:
        meta.notes.append("simulator trace.json times read as nanoseconds: its pipe time is "
                          f"{trace_time / csv_time:.0f}x the instr_exe running_time(us)")
        return 1e-3
    return 1.0


# ---------------------------------------------------------------------------------------------------------
# the op row
# ---------------------------------------------------------------------------------------------------------
def _op_row(root: Path, spans: dict[str, tuple[float, float]], busy: dict[tuple[str, str], float]) -> dict[str, object]:
    sides = {c: ("aiv" if "veccore" in c else "aic") for c in spans}
    has = set(sides.values())
    core = "MIX_AIC" if has == {"aic", "aiv"} else ("AI_VECTOR_CORE" if has == {"aiv"} else "AI_CORE")
    blocks = {m.group(1) for c in spans if (m := _CORE_DIR.match(c))}
    first = min(s for s, _ in spans.values())
    last = max(e for _, e in spans.values())
    row: dict[str, object] = {"name": root.name, "core": core, "duration_us": last - first,
                              "block_dim": float(len(blocks)) if blocks else np.nan}
    for side in ("aic", "aiv"):
        members = [c for c in spans if sides[c] == side]
        if not members:
            continue
        widths = np.array([spans[c][1] - spans[c][0] for c in members])
        row[f"{side}_time_us" if side == "aiv" else "aic_span_us"] = float(widths.mean())
        for metric in sorted({m for (c, m) in busy if c in members}):
            ratios = np.array([busy.get((c, metric), 0.0) / w if w > 0 else np.nan for c, w in zip(members, widths,
                                                                                                       strict=True)])
            ok = np.isfinite(ratios)
            if ok.any() and widths[ok].sum() > 0:
                row[f"{side}_{metric}_ratio"] = float(np.sum(ratios[ok] * widths[ok]) / widths[ok].sum())
    lead = "aiv_time_us" if core == "AI_VECTOR_CORE" else "aic_span_us"
    row["aicore_time_us"] = row.get(lead, row.get("aiv_time_us", np.nan))
    row.pop("aic_span_us", None)
    return row



# ---------------------------------------------------------------------------------------------------------
# the layout this module reads (advisor.ingest.registry)
# ---------------------------------------------------------------------------------------------------------
def _simulator_dir(d: Path) -> list[RankSource]:
    """An ``OPPROF_*`` directory holding ``simulator/`` (tried after msprof op's on-board results)."""
    return [RankSource(d, "msprof-op-simulator")] if d.name.startswith("OPPROF_") and (d / "simulator").is_dir() else []


LAYOUTS = (
    Layout("msprof-op-simulator", "msprof", "msprof op simulator: OPPROF_*/simulator/", read,
           in_dir=(Match(20, _simulator_dir),), runs=True),
)


__all__ = ["CODE_LINES_EXTRA", "INSTRUCTIONS_EXTRA", "PIPE_METRIC", "read"]
