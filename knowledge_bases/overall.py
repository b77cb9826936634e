"""Overall knowledge base: where the step time goes, and the biggest bucket first.

A step is compute + uncovered communication + free time (what ``step_trace_time.csv`` and the ``Overlap
Analysis`` timeline record). On real training runs the biggest cost is often not an operator: uncovered
communication or an idle device. This KB splits compute by op category (cube / vector / flash-attention / AI CPU
/ other), uncovered communication into wait / transmit / idle, per step and in total, and reports one finding per
significant bucket with a realistic saving: free time above a target share, and the part of uncovered
communication that overlap or rank balancing can recover.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.intervals import union_length
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc
from advisor.model import Profile
from knowledge_bases._common import pct, severity_for

FREE_TIME_KEY = "(free time)"
"""Pseudo-op the savings of device idle time are attributed to, by this KB and by the environment and memory
KBs, so the score counts recovered idle time once (per-op maximum), not once per finding."""
OTHER_COMM_KEY = "(other communication ops)"
CATEGORIES = ("cube", "vector", "fa", "aicpu", "other")
CATEGORY_TITLES = {"cube": "cube (MatMul/Conv)", "vector": "vector", "fa": "flash attention", "aicpu": "AI CPU",
                   "other": "other"}
OVERLAP_PROCESS = "Overlap Analysis"
COMM_PROCESSES = ("HCCL", "Communication")


def isin_mask(series: pd.Series, values: Iterable[str]) -> np.ndarray:
    """Rows whose value is one of ``values``: decided once per category on categorical columns (fast on
    millions of rows), else by ``isin``."""
    wanted = {str(v) for v in values}
    if isinstance(series.dtype, pd.CategoricalDtype):
        hit = np.array([str(c) in wanted for c in series.cat.categories], dtype=bool)
        codes = series.cat.codes.to_numpy()
        return (codes >= 0) & hit[np.maximum(codes, 0)] if len(hit) else np.zeros(len(series), dtype=bool)
    return series.astype(object).isin(wanted).to_numpy(dtype=bool)


# ---------------------------------------------------------------------------------------------------------
# buckets per step
# ---------------------------------------------------------------------------------------------------------
def step_buckets(profile: Profile, comm_cores: Sequence[str]) -> tuple[pd.DataFrame, str]:
    """Per step: ``computing_us``, ``comm_us`` (not overlapped), ``overlapped_us``, ``free_us``, ``total_us``.

    From step_trace_time.csv when present, else from the ``Overlap Analysis`` timeline events, else from the
    device tasks themselves (unions of compute and communication intervals). Second value: the source.
    """
    st = profile.steps
    if len(st) and st["computing_us"].notna().any():
        df = pd.DataFrame({
            "step": st["step"].to_numpy(dtype="float64"),
            "computing_us": st["computing_us"].fillna(0.0).to_numpy(dtype="float64"),
            "comm_us": st["comm_not_overlapped_us"].fillna(0.0).to_numpy(dtype="float64"),
            "overlapped_us": st["overlapped_us"].fillna(0.0).to_numpy(dtype="float64"),
            "free_us": st["free_us"].fillna(0.0).to_numpy(dtype="float64"),
        })
        df = df.groupby("step", dropna=False, sort=True).sum().reset_index()
        return _with_total(df), "step_trace_time"
    ev = profile.events
    if len(ev):
        oa = ev[isin_mask(ev["process"], [OVERLAP_PROCESS])]
        if len(oa):
            sums = oa.groupby(oa["name"].astype(str))["duration_us"].sum()
            comm_no = float(sums.get("Communication(Not Overlapped)", 0.0))
            comm_all = float(sums.get("Communication", comm_no))
            df = pd.DataFrame({"step": [np.nan], "computing_us": [float(sums.get("Computing", 0.0))],
                               "comm_us": [comm_no], "overlapped_us": [max(0.0, comm_all - comm_no)],
                               "free_us": [float(sums.get("Free", 0.0))]})
            return _with_total(df), "overlap analysis timeline"
    ops = profile.ops
    if not len(ops) or ops["start_us"].notna().sum() == 0:
        return pd.DataFrame(columns=["step", "computing_us", "comm_us", "overlapped_us", "free_us", "total_us"]), ""
    rows = []
    steps = ops["step"].to_numpy(dtype="float64")
    is_comm = isin_mask(ops["core"], comm_cores)
    starts = ops["start_us"].to_numpy(dtype="float64")
    ends = starts + ops["duration_us"].fillna(0.0).to_numpy(dtype="float64")
    keys = np.where(np.isnan(steps), -np.inf, steps)  # tasks without a step id form one bucket
    for key, pos in pd.Series(np.arange(len(keys))).groupby(keys, sort=True).indices.items():
        c = is_comm[pos]
        compute_u = union_length(starts[pos][~c], ends[pos][~c])
        comm_u = union_length(starts[pos][c], ends[pos][c])
        all_u = union_length(starts[pos], ends[pos])
        span = float(np.nanmax(ends[pos]) - np.nanmin(starts[pos]))
        overlapped = max(0.0, compute_u + comm_u - all_u)
        rows.append({"step": np.nan if np.isinf(key) else float(key), "computing_us": compute_u,
                     "comm_us": max(0.0, comm_u - overlapped), "overlapped_us": overlapped,
                     "free_us": max(0.0, span - all_u)})
    return _with_total(pd.DataFrame(rows)), "device tasks"




def _with_total(df: pd.DataFrame) -> pd.DataFrame:
    df["total_us"] = df["computing_us"] + df["comm_us"] + df["free_us"]
    return df


# ---------------------------------------------------------------------------------------------------------
# compute split
# ---------------------------------------------------------------------------------------------------------
def _matcher(patterns: Iterable[str]) -> re.Pattern[str] | None:
    pats = [p for p in patterns if p]
    return re.compile("|".join(f"(?:{p})" for p in pats), re.IGNORECASE) if pats else None


def _classify_labels(labels: Sequence[object], fa: re.Pattern[str] | None,
                     cube: re.Pattern[str] | None) -> tuple[np.ndarray, np.ndarray]:
    is_fa = np.array([bool(fa and isinstance(v, str) and fa.search(v)) for v in labels], dtype=bool)
    is_cube = np.array([bool(cube and isinstance(v, str) and cube.search(v)) for v in labels], dtype=bool)
    return is_fa, is_cube


def op_categories(ops: pd.DataFrame, cats: Mapping[str, Any], comm_cores: Sequence[str]) -> np.ndarray:
    """Category of every row: cube / vector / fa / aicpu / other, or "" for communication tasks.

    The op type decides (matched once per distinct type); rows without a type are matched by name.
    """
    n = len(ops)
    out = np.full(n, "other", dtype=object)
    if not n:
        return out
    fa, cube = _matcher(cats.get("fa") or []), _matcher(cats.get("cube") or [])
    types = ops["type"].astype("category")
    codes = types.cat.codes.to_numpy()
    t_fa, t_cube = _classify_labels(list(types.cat.categories), fa, cube)
    has_type = codes >= 0
    row_fa = np.zeros(n, dtype=bool)
    row_cube = np.zeros(n, dtype=bool)
    row_fa[has_type] = t_fa[codes[has_type]]
    row_cube[has_type] = t_cube[codes[has_type]]
    if (~has_type).any():
        names = ops["name"].astype("category")
        ncodes = names.cat.codes.to_numpy()
        needed = np.unique(ncodes[~has_type & (ncodes >= 0)])
        cats_list = list(names.cat.categories)
        n_fa, n_cube = _classify_labels([cats_list[i] for i in needed], fa, cube)
        lut_fa = np.zeros(len(cats_list), dtype=bool)
        lut_cube = np.zeros(len(cats_list), dtype=bool)
        lut_fa[needed], lut_cube[needed] = n_fa, n_cube
        sel = ~has_type & (ncodes >= 0)
        row_fa[sel] = lut_fa[ncodes[sel]]
        row_cube[sel] = lut_cube[ncodes[sel]]
    core = ops["core"]
    out[isin_mask(core, cats.get("vector_cores") or [])] = "vector"
    out[row_cube] = "cube"
    out[row_fa] = "fa"
    out[isin_mask(core, cats.get("aicpu_cores") or [])] = "aicpu"
    out[isin_mask(core, comm_cores)] = ""
    return out


def compute_split(ops: pd.DataFrame, cats: Mapping[str, Any], comm_cores: Sequence[str]) -> pd.DataFrame:
    """Summed task time per step (index; NaN when unknown) and category (columns)."""
    if not len(ops):
        return pd.DataFrame(columns=list(CATEGORIES), dtype="float64")
    cat = op_categories(ops, cats, comm_cores)
    df = pd.DataFrame({"step": ops["step"].to_numpy(dtype="float64"), "cat": cat,
                       "us": ops["duration_us"].fillna(0.0).to_numpy(dtype="float64")})
    df = df[df["cat"] != ""]
    out = df.pivot_table(index="step", columns="cat", values="us", aggfunc="sum", dropna=False, fill_value=0.0)
    if df["step"].isna().any():
        nan_row = df[df["step"].isna()].groupby("cat")["us"].sum()
        out.loc[np.nan] = nan_row
    return out.reindex(columns=list(CATEGORIES), fill_value=0.0).fillna(0.0)


# ---------------------------------------------------------------------------------------------------------
# communication split
# ---------------------------------------------------------------------------------------------------------
def comm_ops_table(profile: Profile, rules: Mapping[str, Any]) -> tuple[pd.DataFrame, str]:
    """One row per communication op: step, name, elapse_us, wait_us, transit_us, idle_us; and the source.

    communication.json gives the split (wait includes synchronization; idle = elapse - transit - wait). Without
    it the split is estimated from op sizes (HCCL op args ``count`` x ``data_type``); without sizes only the
    elapse is known (wait/transit/idle NaN).
    """
    if len(profile.comm):
        return comm_op_times(profile.comm), "communication.json"
    ops = profile.ops
    mask = isin_mask(ops["core"], rules.get("comm_cores") or []) if len(ops) else []
    if not len(ops) or not np.any(mask):
        return pd.DataFrame(columns=["step", "name", "elapse_us", "wait_us", "transit_us", "idle_us"]), ""
    sub = ops.loc[mask]
    df = pd.DataFrame({"step": sub["step"].to_numpy(dtype="float64"), "name": sub["name"].astype(str).to_numpy(),
                       "elapse_us": sub["duration_us"].fillna(0.0).to_numpy(dtype="float64")})
    df["bytes"] = _comm_bytes(profile, df["name"], rules.get("hccl_dtype_bytes") or {})
    df["kind"] = _comm_kind(sub) if df["bytes"].notna().any() else ""
    est = (rules.get("communication") or {}).get("size_estimate") or {}
    return _split_from_sizes(df, float(est.get("min_bytes", 0)), int(est.get("min_ops", 2)))


def comm_op_times(comm: pd.DataFrame) -> pd.DataFrame:
    """communication.json rows (one per op x transport) -> one row per op: step, name, elapse/wait/transit/idle."""
    keys = [c for c in ("step", "op", "group", "kind", "start_us") if c in comm.columns]
    per = comm.drop_duplicates(subset=keys)
    elapse = per["elapse_us"].to_numpy(dtype="float64")
    transit = per["transit_us"].fillna(0.0).to_numpy(dtype="float64")
    wait = per["wait_us"].fillna(0.0).to_numpy(dtype="float64")
    idle = per["idle_us"].to_numpy(dtype="float64")
    idle = np.where(np.isnan(idle), np.clip(elapse - transit - wait, 0.0, None), idle)
    df = pd.DataFrame({"step": per["step"].to_numpy(dtype="float64"), "name": per["op"].astype(str).to_numpy(),
                       "elapse_us": elapse, "wait_us": wait, "transit_us": transit, "idle_us": idle})
    return df[np.isfinite(df["elapse_us"])].reset_index(drop=True)


def _comm_kind(sub: pd.DataFrame) -> np.ndarray:
    """``hcom_allReduce__868_0_1`` -> ``hcom_allReduce`` (the op type, or the name before ``__``)."""
    types = sub["type"].astype(object)
    from_name = sub["name"].astype(str).str.split("__", n=1).str[0].astype(object)
    return types.where(types.notna() & (types != "") & (types != "N/A"), from_name).to_numpy(dtype=object)


def _comm_bytes(profile: Profile, names: pd.Series, dtype_bytes: Mapping[str, float]) -> np.ndarray:
    """Bytes of each communication op from its HCCL timeline event (``count`` x bytes of ``data_type``)."""
    ev = profile.events
    out = np.full(len(names), np.nan)
    if not len(ev):
        return out
    wanted = set(names)
    sel = isin_mask(ev["process"], COMM_PROCESSES) & isin_mask(ev["name"], wanted)
    sizes: dict[str, float] = {}
    for name, args in zip(ev.loc[sel, "name"].astype(str), ev.loc[sel, "args"], strict=True):
        if not isinstance(args, dict):
            continue
        width = dtype_bytes.get(str(args.get("data_type", "")).upper())
        try:
            count = float(args.get("count"))  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if width:
            sizes[name] = count * float(width)
    if sizes:
        out = names.map(sizes).to_numpy(dtype="float64")
    return out


def _split_from_sizes(df: pd.DataFrame, min_bytes: float, min_ops: int) -> tuple[pd.DataFrame, str]:
    """Expected op time = bytes / best bandwidth of its kind; the excess is waiting (estimate)."""
    df = df.copy()
    df["wait_us"] = np.nan
    df["transit_us"] = np.nan
    df["idle_us"] = np.nan
    sized = df["bytes"].notna() & (df["bytes"] >= min_bytes) & (df["elapse_us"] > 0)
    estimated = False
    for _kind, grp in df[sized].groupby("kind"):
        if len(grp) < min_ops:
            continue
        best = float((grp["bytes"] / grp["elapse_us"]).max())  # bytes per us
        rows = df.index[(df["kind"] == _kind) & df["bytes"].notna()]
        expected = np.minimum(df.loc[rows, "bytes"] / best, df.loc[rows, "elapse_us"])
        df.loc[rows, "transit_us"] = expected
        df.loc[rows, "wait_us"] = df.loc[rows, "elapse_us"] - expected
        df.loc[rows, "idle_us"] = 0.0
        estimated = True
    source = "estimated from op sizes (best bandwidth per op kind)" if estimated else "device tasks (no split)"
    return df[["step", "name", "elapse_us", "wait_us", "transit_us", "idle_us"]], source


# ---------------------------------------------------------------------------------------------------------
# the breakdown
# ---------------------------------------------------------------------------------------------------------
@dataclass
class Breakdown:
    steps: pd.DataFrame
    """Per step: computing/comm/overlapped/free/total, the compute categories, comm_wait/transmit/idle/unsplit."""
    source: str
    comm_source: str
    comm_ops: pd.DataFrame
    """Per communication op: its wait/transit/idle/elapse and the uncovered fraction of its step."""
    split_known: bool = True
    """False when the profile has no per-op data (kernel_details / op_statistic) to split compute with."""

    def total(self, col: str) -> float:
        return float(self.steps[col].sum()) if len(self.steps) else 0.0


def breakdown(profile: Profile, rules: Mapping[str, Any]) -> Breakdown | None:
    """Step buckets with compute and communication split; None when the profile has no timing at all."""
    comm_cores = list(rules.get("comm_cores") or [])
    steps, source = step_buckets(profile, comm_cores)
    if not len(steps) or float(steps["total_us"].sum()) <= 0:
        return None
    steps = steps.copy()
    split = compute_split(_timed_ops(profile), rules.get("compute_categories") or {}, comm_cores)
    per_step = _rows_for(split, steps["step"])
    raw_total = per_step.sum(axis=1).to_numpy()
    scale = np.divide(steps["computing_us"].to_numpy(), raw_total, out=np.zeros(len(steps)), where=raw_total > 0)
    for c in CATEGORIES:
        steps[c + "_us"] = per_step[c].to_numpy() * scale
    no_split = raw_total <= 0
    steps.loc[no_split, "other_us"] = steps.loc[no_split, "computing_us"]

    cops, comm_source = comm_ops_table(profile, rules)
    cops = cops.copy()
    matched = _match_comm_steps(cops["step"], steps["step"])
    everywhere = len(cops) > 0 and not (matched >= 0).any()  # ops without step ids: one split for every step
    split_comm(steps, cops, np.zeros(len(cops), dtype=int) if everywhere else matched, everywhere)
    return Breakdown(steps, source, comm_source, cops, split_known=bool((raw_total > 0).any()))


def split_comm(steps: pd.DataFrame, cops: pd.DataFrame, matched: np.ndarray, everywhere: bool) -> None:
    """Split each step's uncovered communication into wait / transmit / idle / unsplit in proportion to its ops'
    times, and set each op's ``uncovered_frac`` (share of its step's communication that is exposed)."""
    for name in ("wait", "transmit", "idle", "unsplit"):
        steps[f"comm_{name}_us"] = 0.0
    known = cops["wait_us"].notna().to_numpy()
    parts = pd.DataFrame({
        "g": matched, "elapse": cops["elapse_us"].to_numpy(dtype="float64"),
        "wait": cops["wait_us"].fillna(0.0).to_numpy(dtype="float64"),
        "transit": cops["transit_us"].fillna(0.0).to_numpy(dtype="float64"),
        "idle": cops["idle_us"].fillna(0.0).to_numpy(dtype="float64"),
        "unknown": np.where(known, 0.0, cops["elapse_us"].to_numpy(dtype="float64")),
        "known": known.astype(float),
    }).groupby("g").sum()
    u_all = steps["comm_us"].to_numpy(dtype="float64")
    frac_by_group: dict[int, float] = {}
    for i in range(len(steps)):
        g = 0 if everywhere else i
        u = float(u_all[i])
        if u <= 0 or g not in parts.index:
            steps.loc[i, "comm_unsplit_us"] = max(u, 0.0)
            continue
        row = parts.loc[g]
        if not everywhere and row["elapse"] > 0:
            frac_by_group[g] = min(1.0, u / float(row["elapse"]))
        denom = float(row["wait"] + row["transit"] + row["idle"] + row["unknown"])
        if row["known"] > 0 and denom > 0:
            steps.loc[i, "comm_wait_us"] = u * float(row["wait"]) / denom
            steps.loc[i, "comm_transmit_us"] = u * float(row["transit"]) / denom
            steps.loc[i, "comm_idle_us"] = u * float(row["idle"]) / denom
            steps.loc[i, "comm_unsplit_us"] = u * float(row["unknown"]) / denom
        else:
            steps.loc[i, "comm_unsplit_us"] = u
    if everywhere:
        elapse_all = float(cops["elapse_us"].sum())
        frac = min(1.0, float(u_all.sum()) / elapse_all) if elapse_all > 0 else 0.0
        cops["uncovered_frac"] = frac
    else:
        cops["uncovered_frac"] = pd.Series(matched).map(frac_by_group).fillna(0.0).to_numpy()


def _timed_ops(profile: Profile) -> pd.DataFrame:
    """The ops table, or -- when only op_statistic.csv was exported -- one row per (type, core) of it."""
    if len(profile.ops) or not len(profile.op_stats):
        return profile.ops
    st = profile.op_stats
    return pd.DataFrame({"name": st["type"].astype(str), "type": st["type"].astype(str),
                         "core": st["core"].astype(str), "step": np.nan,
                         "duration_us": st["total_us"].to_numpy(dtype="float64")})


def _rows_for(split: pd.DataFrame, steps: pd.Series) -> pd.DataFrame:
    """The compute split row of each bucket step; one bucket for all steps -> the summed split."""
    if not len(split):
        return pd.DataFrame(0.0, index=range(len(steps)), columns=list(CATEGORIES))
    keys = steps.to_numpy(dtype="float64")
    if len(keys) == 1 and (np.isnan(keys[0]) or keys[0] not in set(split.index.dropna())):
        return pd.DataFrame([split.sum(axis=0).to_numpy()], columns=list(CATEGORIES))
    known = split.reindex(keys).fillna(0.0)
    if float(known.to_numpy().sum()) <= 0:  # ops carry no step ids: every step gets the overall mix
        mix = split.sum(axis=0)
        return pd.DataFrame([mix.to_numpy()] * len(keys), columns=list(CATEGORIES))
    return known.reset_index(drop=True)


def _match_comm_steps(op_steps: pd.Series, bucket_steps: pd.Series) -> np.ndarray:
    """Index of the bucket step each communication op belongs to (-1: none)."""
    keys = bucket_steps.to_numpy(dtype="float64")
    s = op_steps.to_numpy(dtype="float64")
    if len(keys) == 1:
        return np.zeros(len(s), dtype=int)
    idx = pd.Index(np.where(np.isnan(keys), -np.inf, keys))
    if not idx.is_unique:
        return np.full(len(s), -1, dtype=int)
    return idx.get_indexer(np.where(np.isnan(s), np.nan, s)).astype(int)


# ---------------------------------------------------------------------------------------------------------
# the knowledge base
# ---------------------------------------------------------------------------------------------------------
class OverallKB(KnowledgeBase):
    id = "overall"
    title = "Step time breakdown"
    version = "1.0.0"
    api_version = "1"
    requires = ()
    requires_any = ("ops", "steps", "timeline")
    rules_file = "overall"
    rules = (
        RuleDoc(
            id="overall.breakdown",
            title="Step time breakdown (compute / uncovered communication / free)",
            what="Splits each step, and the whole profile, into compute (cube, vector, flash attention, AI CPU, "
                 "other, from the ops table by core and op type), uncovered communication (wait, transmit, idle, "
                 "from communication.json or estimated from HCCL op sizes) and free time, from "
                 "step_trace_time.csv, else the Overlap Analysis timeline, else the device tasks. Always reported "
                 "(info, no saving): it is the chart of where the time goes.",
            why="The largest cost of a training step is often not an operator but communication the compute "
                "does not hide, or an idle device; operator-level findings cannot show that.",
            how_to_fix="Start with the largest bucket: see the overall.free-time, overall.uncovered-communication "
                       "and overall.compute findings.",
            thresholds=("compute_categories", "comm_cores", "hccl_dtype_bytes"),
            needs=("steps", "ops", "comm"),
        ),
        RuleDoc(
            id="overall.free-time",
            title="Device idle (free) time",
            what="Fires when free time (no device task running) exceeds min_bucket_share of the step. Saving: "
                 "the free time above free_time.target_share of the step.",
            why="An idle device means the host does not feed it fast enough (op dispatch, Python overhead, "
                "synchronisation such as .item()/.cpu(), data loading) -- a host-bound step; 10-20% free is "
                "moderate, over 20% host-bound.",
            how_to_fix="Raise host throughput: TASK_QUEUE_ENABLE=2 (level-2 dispatch pipeline), "
                       "CPU_AFFINITY_CONF=1 (bind cores), no ASCEND_LAUNCH_BLOCKING, remove per-step host syncs "
                       "(.item(), .cpu(), print of device tensors), more DataLoader workers with pin_memory, fewer "
                       "and larger ops (fused torch_npu ops, graph mode).",
            thresholds=("min_bucket_share", "free_time", "severity"),
            needs=("steps",),
        ),
        RuleDoc(
            id="overall.uncovered-communication",
            title="Communication not hidden by compute",
            what="Fires when uncovered communication exceeds min_bucket_share of the step; splits it into wait "
                 "(waiting for peers: notify wait and synchronization), transmit (data moving) and idle (op in "
                 "flight, neither). Saving: the transmit time overlap can hide behind compute not already "
                 "overlapping (x overlap_efficiency) plus sync_recoverable of the wait and idle time, at most the "
                 "uncovered time above communication.target_share of the step.",
            why="Exposed communication adds directly to the step. Waiting means ranks or pipeline stages reach "
                "the collective at different times (slow rank, stage imbalance, late host launches); transmit "
                "time means communication is serialized with compute.",
            how_to_fix="Wait/idle-dominated: balance the work across ranks and pipeline stages (see the cluster "
                       "findings), remove host stalls before collectives. Transmit-dominated: overlap gradient "
                       "communication with backward (DDP buckets, Megatron --overlap-grad-reduce / "
                       "--overlap-param-gather, DeepSpeed overlap_comm), communicate bf16/fp16 gradients, merge "
                       "small collectives.",
            thresholds=("min_bucket_share", "communication", "severity", "comm_cores"),
            needs=("steps", "comm"),
        ),
        RuleDoc(
            id="overall.compute",
            title="Compute is the largest bucket",
            what="Reports (info, no saving of its own) when compute is the largest bucket of the step, with its "
                 "split into cube, vector, flash attention, AI CPU and other, so the operator findings can be "
                 "read in proportion.",
            why="A compute-bound step is improved by the operator knowledge bases (roofline, AI CPU, fusion); "
                "the split says which ones matter.",
            how_to_fix="Vector-heavy: fuse element-wise chains and norms (torch_npu fused ops), remove casts and "
                       "transposes. Cube-heavy: check cube utilization and shape alignment (roofline findings). "
                       "AI CPU: see the aicpu findings.",
            thresholds=("min_bucket_share", "compute_categories"),
            needs=("steps", "ops"),
        ),
    )

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        rules = ctx.rules
        bd = breakdown(ctx.profile, rules)
        if bd is None:
            ctx.note("overall: skipped, the profile has no step, overlap or device-task timing")
            return []
        total = bd.total("total_us")
        findings = [self._breakdown_finding(ctx, bd, total)]
        min_share = float(rules.get("min_bucket_share", 0.05))
        free = bd.total("free_us")
        if free / total >= min_share:
            findings.append(self._free_finding(ctx, bd, total))
        comm = bd.total("comm_us")
        if comm / total >= min_share:
            findings.append(self._comm_finding(ctx, bd, total))
        compute = bd.total("computing_us")
        if compute / total >= min_share and compute >= max(comm, free):
            if bd.split_known:
                findings.append(self._compute_finding(ctx, bd, total))
            else:
                ctx.note("overall.compute: compute is the largest bucket, but the profile has no per-op data "
                         "(kernel_details.csv / op_statistic.csv) to split it")
        return findings

    # ----------------------------------------------------------------------------------------------------
    def _evidence(self, bd: Breakdown, total: float) -> dict[str, Any]:
        compute, comm, free = bd.total("computing_us"), bd.total("comm_us"), bd.total("free_us")
        return {
            "source": bd.source,
            "communication_split_source": bd.comm_source or "none",
            "steps": int(len(bd.steps)),
            "total_us": total,
            "breakdown": {
                "compute": {"us": compute, "share": compute / total,
                            "split_us": {c: bd.total(c + "_us") for c in CATEGORIES}},
                "uncovered_communication": {"us": comm, "share": comm / total,
                                            "split_us": {c: bd.total(f"comm_{c}_us")
                                                         for c in ("wait", "transmit", "idle", "unsplit")}},
                "free": {"us": free, "share": free / total},
                "overlapped_communication_us": bd.total("overlapped_us"),
            },
            "table": self._step_table(bd),
        }

    @staticmethod
    def _step_table(bd: Breakdown) -> dict[str, Any]:
        cols = ["step", "total_us", "compute_us", "cube_us", "vector_us", "fa_us", "aicpu_us", "other_us",
                "comm_uncovered_us", "comm_wait_us", "comm_transmit_us", "comm_idle_us", "comm_unsplit_us", "free_us"]
        rows = []
        for r in bd.steps.itertuples(index=False):
            step = "all" if np.isnan(r.step) else int(r.step)
            rows.append([step, round(r.total_us, 3), round(r.computing_us, 3), round(r.cube_us, 3),
                         round(r.vector_us, 3), round(r.fa_us, 3), round(r.aicpu_us, 3), round(r.other_us, 3),
                         round(r.comm_us, 3), round(r.comm_wait_us, 3), round(r.comm_transmit_us, 3),
                         round(r.comm_idle_us, 3), round(r.comm_unsplit_us, 3), round(r.free_us, 3)])
        return table(cols, rows)

    def _breakdown_finding(self, ctx: AnalysisContext, bd: Breakdown, total: float) -> Finding:
        parts = sorted([("compute", bd.total("computing_us")), ("uncovered communication", bd.total("comm_us")),
                        ("free", bd.total("free_us"))], key=lambda p: -p[1])
        title = "Step time: " + ", ".join(f"{pct(v / total)} {k}" for k, v in parts)
        n = len(bd.steps)
        return ctx.finding(
            rule="overall.breakdown", title=title, severity="info", ops=[], evidence=self._evidence(bd, total),
            estimated_saving_us=0.0, basis="breakdown only; savings are in the bucket findings",
            recommendation=f"{'Per step' if n > 1 else 'Over the profile'} ({bd.source}), the largest bucket is "
                           f"{parts[0][0]} ({pct(parts[0][1] / total)} of {total / 1000:.1f} ms); start there.",
            confidence=0.9)

    def _free_finding(self, ctx: AnalysisContext, bd: Breakdown, total: float) -> Finding:
        rules = ctx.rules
        free = bd.total("free_us")
        target = float((rules.get("free_time") or {}).get("target_share", 0.1))
        saving = max(0.0, free - target * total)
        share = free / total
        evidence = self._evidence(bd, total)
        evidence.update({"free_us": free, "free_share": share, "target_share": target,
                         "largest_gaps": self._largest_gaps(ctx.profile)})
        level = "host-bound" if share >= 2 * target else "moderately host-bound"
        return ctx.finding(
            rule="overall.free-time",
            title=f"Device idle {pct(share)} of the step ({free / 1000:.1f} ms): {level}",
            severity=severity_for(saving / total, rules.get("severity", {})), ops=[], evidence=evidence,
            estimated_saving_us=saving,
            basis=f"free time above {pct(target)} of the step (free_time.target_share)",
            recommendation="The device waits for the host. Enable the level-2 dispatch pipeline "
                           "(TASK_QUEUE_ENABLE=2) and core binding (CPU_AFFINITY_CONF=1), make sure "
                           "ASCEND_LAUNCH_BLOCKING is unset, remove per-step host synchronisation (.item(), .cpu(), "
                           "printing device tensors), give the DataLoader more workers with pin_memory=True, and "
                           "cut the number of small ops (fused torch_npu ops, graph mode). Check the environment "
                           "and memory findings for settings that slow dispatch.",
            fix=Fix("env", "level-2 task queue and CPU core binding",
                    {"env": {"TASK_QUEUE_ENABLE": "2", "CPU_AFFINITY_CONF": "1"}},
                    "export TASK_QUEUE_ENABLE=2 CPU_AFFINITY_CONF=1"),
            confidence=0.6, saving_by_op={FREE_TIME_KEY: saving})

    @staticmethod
    def _largest_gaps(profile: Profile, n: int = 5) -> dict[str, Any]:
        ev = profile.events
        if not len(ev):
            return table(["start_offset_us", "duration_us"], [])
        in_overlap = isin_mask(ev["process"], [OVERLAP_PROCESS])
        free = ev[in_overlap & isin_mask(ev["name"], ["Free"])]
        if not len(free):
            return table(["start_offset_us", "duration_us"], [])
        origin = float(ev.loc[in_overlap, "start_us"].min())
        top = free.nlargest(n, "duration_us")
        return table(["start_offset_us", "duration_us"],
                     [[round(float(s) - origin, 3), round(float(d), 3)]
                      for s, d in zip(top["start_us"], top["duration_us"], strict=True)])

    def _comm_finding(self, ctx: AnalysisContext, bd: Breakdown, total: float) -> Finding:
        rules = ctx.rules
        cr = rules.get("communication") or {}
        eff = float(cr.get("overlap_efficiency", 0.8))
        sync_rec = float(cr.get("sync_recoverable", 0.5))
        target = float(cr.get("target_share", 0.1))
        st = bd.steps
        room = (st["computing_us"] - st["overlapped_us"]).clip(lower=0.0)
        hideable = float((np.minimum(st["comm_transmit_us"] + st["comm_unsplit_us"], room) * eff).sum())
        sync = sync_rec * (bd.total("comm_wait_us") + bd.total("comm_idle_us"))
        comm = bd.total("comm_us")
        cap = max(0.0, comm - target * total)
        saving = min(cap, hideable + sync)
        parts = {"wait": bd.total("comm_wait_us"), "transmit": bd.total("comm_transmit_us"),
                 "idle": bd.total("comm_idle_us"), "unsplit": bd.total("comm_unsplit_us")}
        known = {k: v for k, v in parts.items() if k != "unsplit" and v > 0}
        dominant = max(known, key=lambda k: known[k]) if known else "unsplit"
        evidence = self._evidence(bd, total)
        evidence.update({"uncovered_us": comm, "uncovered_share": comm / total, "split_us": parts,
                         "dominant": dominant, "hideable_by_overlap_us": hideable, "sync_recoverable_us": sync,
                         "ops_table": self._comm_ops_evidence(bd)})
        ops, by_op = self._comm_attribution(bd, saving, eff, sync_rec, int(cr.get("max_ops", 50)))
        rec, fix = self._comm_advice(dominant, parts, comm)
        title = (f"Uncovered communication {pct(comm / total)} of the step ({comm / 1000:.1f} ms)"
                 + (f", mostly {dominant} ({pct(parts[dominant] / comm)})" if dominant != "unsplit" else ""))
        return ctx.finding(
            rule="overall.uncovered-communication", title=title,
            severity=severity_for(saving / total, rules.get("severity", {})), ops=ops, evidence=evidence,
            estimated_saving_us=saving,
            basis=(f"transmit time hideable behind compute not already overlapping x {eff:g} "
                   f"({hideable / 1000:.2f} ms) + {sync_rec:g} of wait/idle time ({sync / 1000:.2f} ms), capped at "
                   f"the uncovered time above {pct(target)} of the step; split from {bd.comm_source or 'no data'}"),
            recommendation=rec, fix=fix, confidence=0.5 if dominant == "unsplit" else 0.6, saving_by_op=by_op)

    @staticmethod
    def _comm_ops_evidence(bd: Breakdown, limit: int = 15) -> dict[str, Any]:
        c = bd.comm_ops
        cols = ["op", "elapse_us", "wait_us", "transit_us", "idle_us"]
        top = c.nlargest(limit, "elapse_us") if len(c) else c
        out = table(cols, [[r.name, round(r.elapse_us, 3), _r(r.wait_us), _r(r.transit_us), _r(r.idle_us)]
                           for r in top.itertuples(index=False)], limit=limit)
        if len(c) > limit:
            out["more_rows"] = int(len(c) - limit)
        return out

    @staticmethod
    def _comm_attribution(bd: Breakdown, saving: float, eff: float, sync_rec: float,
                          max_ops: int) -> tuple[list[str], dict[str, float]]:
        c = bd.comm_ops
        if not len(c) or saving <= 0:
            return [], ({OTHER_COMM_KEY: saving} if saving > 0 else {})
        frac = c["uncovered_frac"].to_numpy()
        w = c["wait_us"].to_numpy(dtype="float64")
        t = c["transit_us"].to_numpy(dtype="float64")
        d = c["idle_us"].to_numpy(dtype="float64")
        e = c["elapse_us"].to_numpy(dtype="float64")
        weight = np.where(np.isnan(w), eff * e, sync_rec * (np.nan_to_num(w) + np.nan_to_num(d)) + eff * np.nan_to_num(t))
        weight = weight * frac
        per = pd.Series(weight, index=c["name"].to_numpy()).groupby(level=0).sum()
        if float(per.sum()) <= 0:
            return [], {OTHER_COMM_KEY: saving}
        per = per / per.sum() * saving
        per = per.sort_values(ascending=False)
        head, tail = per.iloc[:max_ops], per.iloc[max_ops:]
        by_op = {str(k): float(v) for k, v in head.items() if v > 0}
        if len(tail) and float(tail.sum()) > 0:
            by_op[OTHER_COMM_KEY] = float(tail.sum())
        return list(by_op), by_op

    @staticmethod
    def _comm_advice(dominant: str, parts: Mapping[str, float], comm: float) -> tuple[str, Fix]:
        if dominant in ("wait", "idle"):
            rec = (f"Most uncovered communication is {dominant} time ({pct(parts[dominant] / comm)}): the "
                   "collectives start before their peers are ready, so ranks wait for each other. Balance the work "
                   "across ranks and pipeline stages (see the cluster findings for the slow rank), remove host "
                   "stalls before collectives (synchronisation, data loading on one rank), and keep the number of "
                   "micro-batches high enough to fill the pipeline.")
            fix = Fix("code", "balance ranks / pipeline stages and remove host stalls before collectives",
                      {"snippet": "# Megatron: rebalance layers per pipeline stage, e.g.\n"
                                  "#   --num-layers-per-virtual-pipeline-stage N  (interleaved schedule)\n"
                                  "#   more micro-batches: --global-batch-size / --micro-batch-size\n"
                                  "# remove per-step .item()/.cpu() before the backward pass"})
        else:
            rec = ("Communication runs serialized with compute. " if dominant == "transmit" else
                   "This profile cannot tell waiting from transfer (no communication.json and no HCCL op sizes; "
                   "profile with profiler_level Level1 or higher), so the saving counts only what overlap can "
                   "hide. ")
            rec += ("Overlap gradient communication with the backward pass (DistributedDataParallel buckets with "
                    "gradient_as_bucket_view=True; Megatron --overlap-grad-reduce --overlap-param-gather; DeepSpeed "
                    "\"overlap_comm\": true), communicate bf16/fp16 gradients, and merge many small collectives into "
                    "fewer large ones.")
            fix = Fix("code", "overlap gradient communication with backward",
                      {"snippet": "model = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=25,\n"
                                  "    gradient_as_bucket_view=True)\n"
                                  "# Megatron: --overlap-grad-reduce --overlap-param-gather\n"
                                  "# DeepSpeed: \"zero_optimization\": {\"overlap_comm\": true}"})
        return rec, fix

    def _compute_finding(self, ctx: AnalysisContext, bd: Breakdown, total: float) -> Finding:
        compute = bd.total("computing_us")
        split = {c: bd.total(c + "_us") for c in CATEGORIES}
        lead = max(split, key=lambda c: split[c])
        advice = {
            "vector": "Vector work leads: fuse element-wise chains and norms into torch_npu fused ops "
                      "(npu_rms_norm, npu_swiglu, npu_rotary_mul...), remove redundant Cast/Transpose/TransData.",
            "cube": "Cube (MatMul/Conv) work leads: check cube utilization and shape alignment (roofline "
                    "findings), use fp16/bf16 inputs.",
            "fa": "Flash attention leads: check head dim / sequence alignment and the FA operator findings.",
            "aicpu": "AI CPU tasks lead: move them to AI Core (aicpu findings).",
            "other": "Most compute has no op category (Level0 profiles record no op types); profile with "
                     "profiler_level Level1 to see the split.",
        }[lead]
        evidence = self._evidence(bd, total)
        evidence["compute_split_share"] = {c: (v / compute if compute else 0.0) for c, v in split.items()}
        return ctx.finding(
            rule="overall.compute",
            title=f"Compute is {pct(compute / total)} of the step, led by {CATEGORY_TITLES[lead]} "
                  f"({pct(split[lead] / compute) if compute else '0%'})",
            severity="info", ops=[], evidence=evidence, estimated_saving_us=0.0,
            basis="no saving of its own: the operator knowledge bases estimate per-op savings",
            recommendation=advice, confidence=0.8)


def _r(v: float) -> float | None:
    return None if v is None or (isinstance(v, float) and np.isnan(v)) else round(float(v), 3)


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [OverallKB]
