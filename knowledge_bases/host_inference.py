"""host-inference: host-side waste of an inference application, from what msprof records.

An ACL application's time is not only device work: it copies inputs and outputs, loads the model, executes it and
runs pre/post-processing on the host. msprof records the ACL and runtime APIs (``api_statistic``: count and time
per API) and, with ``--msproftx=on``, the application's own ranges (``msprof_tx``). Set against the device busy
time these show what the host adds: synchronous copies that serialize transfer with compute (``aclrtMemcpy`` is
blocking), execute calls that take longer than the device work they launch, a model loaded inside the loop, and
ranges where the host sleeps or pre-processes while the device idles (one SSD case showed a 5 s sleep and
synchronous copies in msproftx ranges and ACL API timings before any operator work).

Each rule is documented beside its check; thresholds, confidences and API names are in
``rules/host-inference.yaml``. Every saving is device idle time, attributed to the ``(free time)`` pseudo-op (so the
overall KB's free-time symptom folds under the cause that explains it), and together the findings never claim more
than the free time of the rank's time model -- whose window, for an offline-model application, is the app's
msproftx span.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from advisor import hookimpl
from advisor.findings import Finding, Fix, table
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection
from advisor.platform import has_tool
from advisor.toolkit import run_context as rc
from advisor.toolkit.common import pct, severity_for
from advisor.toolkit.free_time import within_free_time
from advisor.toolkit.time import FREE_TIME_KEY, fmt_us, overlap, union

_THRESHOLDS = ("contexts", "severity", "confidence")


class HostInferenceKB(KnowledgeBase):
    id = "host-inference"
    title = "Host-side waste of an inference application (ACL API statistics, msproftx ranges)"
    version = "2.0.0"
    api_version = "1.5"
    requires = ()
    requires_any = ("api", "tx")
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "host-inference"

    def analyze(self, ctx: AnalysisContext) -> Iterable[Finding]:
        """The checks, for inference applications only; their savings together at most the free time."""
        context = rc.context_of(ctx)
        if not rc.applies(ctx, ctx.rules["contexts"]):
            ctx.note(f"host-inference: skipped, {rc.a_run(context)} (host-side work of frameworks is the schedule "
                     "knowledge base's)")
            return []
        return _within_free_time(ctx, list(super().analyze(ctx)))

    @rule(RuleDoc(
        id="host-inference.sync-copy",
        explains={
            "overall.free-time": "synchronous copies stop the inference loop: asynchronous copies overlap them with device work",
        },
        title="Synchronous host-device copies in the inference loop",
        what="Sums the synchronous copy APIs in the API statistics (sync_copy_apis: aclrtMemcpy, else the runtime's "
             "rtMemcpy / MemCopySync -- the outermost layer present, so one copy is counted once) and reports them "
             "from {min_api_us} µs on, with the calls per execute and the per-call cost. Saving: "
             "{sync_copy.recoverable_fraction} of the synchronous copy time, never more than the device busy time "
             "it can hide behind, attributed to the (free time) pseudo-op.",
        why="aclrtMemcpy is blocking: while it runs the host submits nothing and the device waits for the input. "
            "With pinned host buffers (aclrtMallocHost) and aclrtMemcpyAsync on a copy stream the transfer of frame "
            "n+1 overlaps the inference of frame n.",
        how_to_fix="Allocate the input/output host buffers once with aclrtMallocHost (pinned, 64-byte aligned), copy "
                   "with aclrtMemcpyAsync on a dedicated stream and synchronize only before the data is used; feed "
                   "DVPP output buffers to the model directly (no copy); pipeline pre-process / copy / execute / "
                   "post-process on separate threads and streams.",
        thresholds=(*_THRESHOLDS, "sync_copy_apis", "async_copy_apis", "execute_apis", "min_api_us", "sync_copy"),
        needs=("api",),
    ))
    def sync_copy(self, ctx: AnalysisContext) -> list[Finding]:
        api = _api_table(ctx.profile.api)
        return [f for f in [_sync_copy(ctx, api)] if f is not None] if len(api) else []

    @rule(RuleDoc(
        id="host-inference.execute-gap",
        explains={
            "overall.free-time": "the device idles between executions while the application works on the host: overlapping that work removes the gaps",
        },
        title="Execute calls take longer than the device work they launch",
        what="Compares the time of the synchronous execute calls (execute_apis: aclmdlExecute, svp_acl_mdl_execute "
             "return when the inference has finished) with the device busy time of the analyzed window: the "
             "difference is submission, synchronization and input/output handling per call. Reported from "
             "{execute_gap.min_share} of the execute time on. Saving: {execute_gap.recoverable_fraction} of the "
             "difference, attributed to the (free time) pseudo-op.",
        why="Per-call overhead is paid on every frame; at small batch sizes it can rival the device work. The device "
            "is idle while the host prepares the next call.",
        how_to_fix="Overlap calls: aclmdlExecuteAsync on two or more streams (one loaded model instance per "
                   "concurrent stream; a model id must not run on several streams at once), with pre/post-processing "
                   "in other threads; batch frames (a larger static batch, or ATC dynamic batch gears); give the "
                   "model device buffers it can read directly (aclmdlCreateDataset with aclrtMalloc'd buffers, DVPP "
                   "output).",
        thresholds=(*_THRESHOLDS, "execute_apis", "execute_async_apis", "sync_wait_apis", "execute_gap"),
        needs=("api", "ops"),
    ))
    def execute_gap(self, ctx: AnalysisContext) -> list[Finding]:
        api = _api_table(ctx.profile.api)
        return [f for f in [_execute_gap(ctx, api)] if f is not None] if len(api) else []

    @rule(RuleDoc(
        id="host-inference.model-load",
        explains={
            "overall.free-time": "loading the model inside the measured loop idles the device: loading once removes it",
        },
        title="Model loaded more than once",
        what="Counts the model-load APIs (load_apis: aclmdlLoadFromFile*, aclmdlLoadFromMem*) in the API statistics; "
             "more than {max_loads} load(s) with at least {min_api_us} µs of load time is reported. Saving: every "
             "load but the first, attributed to the (free time) pseudo-op.",
        why="Loading parses the OM, allocates memory and copies weights: hundreds of milliseconds. Loading inside the "
            "loop repeats that per frame or per request.",
        how_to_fix="Load each model once at start-up (aclmdlLoadFromFile), keep the model id and its datasets, and "
                   "reuse them for every inference; unload at exit.",
        thresholds=(*_THRESHOLDS, "load_apis", "max_loads", "min_api_us"),
        needs=("api",),
    ))
    def model_load(self, ctx: AnalysisContext) -> list[Finding]:
        api = _api_table(ctx.profile.api)
        return [f for f in [_model_load(ctx, api)] if f is not None] if len(api) else []

    @rule(RuleDoc(
        id="host-inference.tx-range",
        explains={
            "overall.free-time": "the device idles in the application's host-only ranges: moving that work off the loop removes the gaps",
        },
        title="Host-only time in the application's msproftx ranges",
        what="For each msproftx range name (leaf ranges: those containing no other range), the range time minus the "
             "device busy time inside it is host-only time. Ranges whose host-only time reaches {tx.min_share} of "
             "the analyzed window (and {tx.min_host_us} µs) are reported, classed by name (tx.kinds) as idle "
             "(sleep, wait), pre-processing or post-processing. Saving: the kind's share of the host-only time "
             "(tx.recoverable_fraction), attributed to the (free time) pseudo-op.",
        why="While the host sleeps, decodes or post-processes in the inference thread the device waits. A sleep or a "
            "synchronization left in the loop is pure loss; pre/post-processing can run concurrently with "
            "inference.",
        how_to_fix="Remove sleeps and extra synchronization from the loop; move image conversion, resize and "
                   "normalization to DVPP/AIPP; run pre- and post-processing in their own threads with a queue, "
                   "and inference on two streams so the device always has work.",
        thresholds=(*_THRESHOLDS, "tx"),
        needs=("tx",),
    ))
    def tx_ranges(self, ctx: AnalysisContext) -> list[Finding]:
        return _tx_ranges(ctx) if len(ctx.profile.tx) else []


# ---------------------------------------------------------------------------------------------------------
# time (the rank's time model) and the shared cap
# ---------------------------------------------------------------------------------------------------------
def _times(ctx: AnalysisContext) -> tuple[float, float]:
    """(device busy time inside the analyzed window, the window): for an offline-model app the window is its
    msproftx span, so sleeps and host work between inferences are free time (``advisor.timemodel``)."""
    t = ctx.profile.time
    return max(0.0, t.window_us - t.free_us), t.window_us


def _within_free_time(ctx: AnalysisContext, findings: list[Finding]) -> list[Finding]:
    """Every rule's saving is device idle time: together at most the free time of the window."""
    t = ctx.profile.time
    return within_free_time(findings, t.free_us, t.window_us, ctx.rules["severity"])


def _free_finding(ctx: AnalysisContext, **kw: Any) -> Finding:
    """A finding whose saving is device idle time (attributed to the free-time pseudo-op)."""
    _, window = _times(ctx)
    saving = float(kw.pop("estimated_saving_us"))
    return ctx.finding(severity=_severity(saving, window, ctx.rules), ops=[], estimated_saving_us=saving,
                       saving_by_op={FREE_TIME_KEY: saving},
                       recommendation=rc.unknown_context(ctx) + kw.pop("recommendation"), **kw)


# ---------------------------------------------------------------------------------------------------------
# API statistics
# ---------------------------------------------------------------------------------------------------------
def _api_table(api: pd.DataFrame) -> pd.DataFrame:
    """One row per API name: count, total_us, max_us (several files or levels of one name summed)."""
    if not len(api):
        return pd.DataFrame(columns=["count", "total_us", "max_us"])
    df = pd.DataFrame({"name": api["name"].astype(str).to_numpy(),
                       "count": pd.to_numeric(api["count"], errors="coerce").to_numpy(dtype="float64"),
                       "total_us": pd.to_numeric(api["total_us"], errors="coerce").to_numpy(dtype="float64"),
                       "max_us": pd.to_numeric(api["max_us"], errors="coerce").to_numpy(dtype="float64")})
    return df.groupby("name").agg(count=("count", "sum"), total_us=("total_us", "sum"), max_us=("max_us", "max"))


def _first_present(api: pd.DataFrame, names: Sequence[str]) -> str | None:
    return next((n for n in names if n in api.index and api.at[n, "count"] > 0), None)


def _sum(api: pd.DataFrame, names: Sequence[str]) -> tuple[float, float]:
    """(count, total_us) over the names present."""
    sub = api.loc[[n for n in names if n in api.index]]
    return float(sub["count"].sum()), float(sub["total_us"].sum())


def _executes(api: pd.DataFrame, r: Mapping[str, Any]) -> tuple[float, float, str | None]:
    name = _first_present(api, r["execute_apis"]) or _first_present(api, r["execute_async_apis"])
    if name is None:
        return 0.0, 0.0, None
    return float(api.at[name, "count"]), float(api.at[name, "total_us"]), name


def _severity(saving: float, window: float, r: Mapping[str, Any]) -> Any:
    return severity_for(saving / window, r["severity"]) if window > 0 else "info"


def _calls(api: pd.DataFrame, names: Sequence[str]) -> str:
    """How the advice names the app's API family: ``svp_acl_*`` on SVP ACL (SS928/SS927), else AscendCL."""
    return "SVP ACL" if any(n.startswith("svp_") for n in names if n in api.index) else "ACL"


def _batching(ctx: AnalysisContext) -> str:
    return ("a larger static batch, or atc --dynamic_batch_size gears" if has_tool(ctx.platform, "atc")
            else "a larger static batch")


def _svp_note(family: str) -> str:
    return " (on SVP ACL, the svp_acl_* equivalents of these calls)" if family == "SVP ACL" else ""


def _sync_copy(ctx: AnalysisContext, api: pd.DataFrame) -> Finding | None:
    r = ctx.rules
    name = _first_present(api, r["sync_copy_apis"])
    if name is None:
        return None
    count, total, worst = float(api.at[name, "count"]), float(api.at[name, "total_us"]), float(api.at[name, "max_us"])
    if total < float(r["min_api_us"]):
        return None
    busy, window = _times(ctx)
    executes, _, exec_api = _executes(api, r)
    frac = float(r["sync_copy"]["recoverable_fraction"])
    saving = min(total * frac, busy) if busy > 0 else total * frac
    async_n, async_us = _sum(api, r["async_copy_apis"])
    per_exec = count / executes if executes else None
    rows = [[n, int(api.at[n, "count"]), round(float(api.at[n, "total_us"]), 3),
             round(float(api.at[n, "total_us"]) / max(float(api.at[n, "count"]), 1.0), 3)]
            for n in [*r["sync_copy_apis"], *r["async_copy_apis"], *r["execute_apis"]] if n in api.index]
    family = _calls(api, [name])
    return _free_finding(
        ctx, rule="host-inference.sync-copy",
        title=f"{int(count)} synchronous copies ({name}): {fmt_us(total)} ({pct(total / window) if window else '-'} of "
              "the analyzed time)",
        evidence={"api": name, "calls": int(count), "total_us": total, "avg_us": total / max(count, 1.0),
                  "max_us": worst, "calls_per_execute": round(per_exec, 3) if per_exec else None,
                  "execute_api": exec_api, "async_copy_calls": int(async_n), "async_copy_us": async_us,
                  "device_busy_us": busy, "window_us": window, "source": "api_statistic",
                  "table": table(["api", "calls", "total_us", "avg_us"], rows)},
        estimated_saving_us=saving,
        basis=(f"{frac:.0%} (sync_copy.recoverable_fraction) of the {name} time, which async copies on a copy "
               "stream overlap with device work; at most the device busy time"),
        recommendation=(
            f"{name} runs {int(count)} times ({total / max(count, 1.0):.1f} µs per call"
            + (f", {per_exec:g} per {exec_api} call" if per_exec else "")
            + "), blocking the host while the device waits. Allocate input/output buffers once with "
              "aclrtMallocHost (pinned), copy with aclrtMemcpyAsync on a separate stream and synchronize just "
              "before the data is used, so the copy of the next frame overlaps the current inference; where the "
              f"input comes from DVPP, pass its device buffer to the model without a copy{_svp_note(family)}."),
        fix=Fix("code", "pinned buffers + aclrtMemcpyAsync on a copy stream, overlapped with inference",
                {"snippet": "aclrtMallocHost(&host_in, size);            // once, at start-up\n"
                            "aclrtMemcpyAsync(dev_in, size, host_in, size, ACL_MEMCPY_HOST_TO_DEVICE, copy_stream);\n"
                            "aclrtSynchronizeStream(copy_stream);         // just before aclmdlExecuteAsync"}),
        confidence=float(r["confidence"]["sync_copy"]),
    )


def _execute_gap(ctx: AnalysisContext, api: pd.DataFrame) -> Finding | None:
    r = ctx.rules
    name = _first_present(api, r["execute_apis"])
    busy, _ = _times(ctx)
    if name is None or busy <= 0:
        return None
    count, total = float(api.at[name, "count"]), float(api.at[name, "total_us"])
    gap = total - busy
    share = gap / total if total > 0 else 0.0
    if gap <= 0 or share < float(r["execute_gap"]["min_share"]):
        return None
    frac = float(r["execute_gap"]["recoverable_fraction"])
    waits_n, waits_us = _sum(api, r["sync_wait_apis"])
    family = _calls(api, [name])
    return _free_finding(
        ctx, rule="host-inference.execute-gap",
        title=f"{name} takes {fmt_us(gap)} more than the device work it launches ({pct(share)} of its time)",
        evidence={"api": name, "calls": int(count), "execute_us": total, "avg_execute_us": total / max(count, 1.0),
                  "device_busy_us": busy, "device_busy_per_execute_us": busy / max(count, 1.0), "gap_us": gap,
                  "gap_share": share, "sync_wait_calls": int(waits_n), "sync_wait_us": waits_us,
                  "source": "api_statistic + the time model's device busy time"},
        estimated_saving_us=gap * frac,
        basis=(f"{frac:.0%} (execute_gap.recoverable_fraction) of the {name} time not covered by device tasks "
               "(execute time minus device busy time), which overlapping calls and batching hide"),
        recommendation=(
            f"Each {name} call takes {total / max(count, 1.0):.1f} µs on the host for "
            f"{busy / max(count, 1.0):.1f} µs of device work: the rest is per-call submission, synchronization "
            "and input/output handling, and the device idles in between. Run aclmdlExecuteAsync on two or more "
            "streams (one loaded model instance per concurrent stream) with pre/post-processing in other threads, "
            f"batch frames ({_batching(ctx)}), and pass device buffers the model reads directly{_svp_note(family)}."),
        fix=Fix("code", "pipeline inference: aclmdlExecuteAsync on several streams, batching",
                {"snippet": "aclmdlExecuteAsync(model_id[k], in[k], out[k], stream[k]);  // k = frame % n_streams\n"
                            "aclrtSynchronizeStream(stream[(k + 1) % n_streams]);       // collect the older frame"}),
        confidence=float(r["confidence"]["execute_gap"]),
    )


def _model_load(ctx: AnalysisContext, api: pd.DataFrame) -> Finding | None:
    r = ctx.rules
    present = [n for n in r["load_apis"] if n in api.index]
    count, total = _sum(api, present)
    if count <= int(r["max_loads"]) or total < float(r["min_api_us"]):
        return None
    _, window = _times(ctx)
    rows = [[n, int(api.at[n, "count"]), round(float(api.at[n, "total_us"]), 3)] for n in present]
    return _free_finding(
        ctx, rule="host-inference.model-load",
        title=f"Model loaded {int(count)} times: {fmt_us(total)}",
        evidence={"loads": int(count), "load_us": total, "max_loads": int(r["max_loads"]), "source": "api_statistic",
                  "table": table(["api", "calls", "total_us"], rows)},
        estimated_saving_us=min(total * (count - 1) / count, window),
        basis="every load but the first: load time x (loads - 1) / loads",
        recommendation=(f"The model is loaded {int(count)} times ({total / count:.1f} µs each). Load it once at "
                        "start-up, keep the model id and its input/output datasets, and reuse them for every "
                        f"inference{_svp_note(_calls(api, present))}."),
        fix=Fix("code", "load the model once and reuse the model id",
                {"snippet": "aclmdlLoadFromFile(om_path, &model_id);  // once, before the loop"}),
        confidence=float(r["confidence"]["model_load"]),
    )


# ---------------------------------------------------------------------------------------------------------
# msproftx ranges
# ---------------------------------------------------------------------------------------------------------
def _leaves(start: np.ndarray, end: np.ndarray) -> np.ndarray:
    """Ranges that contain no other range (nesting: a loop range holding its sleep and pre-process ranges)."""
    order = np.lexsort((-end, start))
    s, e = start[order], end[order]
    leaf = np.ones(len(s), dtype=bool)
    # a range is a parent when the next range (by start) starts inside it and ends no later than it
    nxt_start, nxt_end = s[1:], e[1:]
    parent = (nxt_start >= s[:-1]) & (nxt_end <= e[:-1]) & ((nxt_start > s[:-1]) | (nxt_end < e[:-1]))
    leaf[:-1] &= ~parent
    out = np.empty(len(s), dtype=bool)
    out[order] = leaf
    return out


def _kind(name: str, kinds: Mapping[str, str]) -> str:
    for kind in ("idle", "preprocess", "postprocess"):
        if re.search(kinds[kind], name):
            return kind
    return "other"


_TX_ADVICE = {
    "idle": ("the host sleeps or waits in the loop while the device has nothing to do: remove the sleep / extra "
             "synchronization, or move the wait out of the inference thread", "remove the sleep/wait from the "
             "inference loop"),
    "preprocess": ("pre-processing runs on the host while the device waits: move colour conversion, resize and "
                   "normalization to DVPP / static AIPP (atc --insert_op_conf), and run what remains in its own "
                   "thread with a queue so frame n+1 is prepared during inference of frame n",
                   "AIPP/DVPP pre-processing; pre-process in a separate thread"),
    "postprocess": ("post-processing runs on the host while the device waits: run it in its own thread with a "
                    "queue (pipelined with the next inference), and move NMS/decoding into the model where the SoC "
                    "has the op", "post-process in a separate thread, pipelined with inference"),
    "other": ("host work with the device idle: pipeline it with inference (separate threads and streams) or "
              "shorten it", "pipeline host work with inference"),
}


def _tx_advice(ctx: AnalysisContext, kind: str) -> tuple[str, str]:
    advice, summary = _TX_ADVICE[kind]
    if kind == "preprocess" and not has_tool(ctx.platform, "atc"):
        advice = advice.replace(" / static AIPP (atc --insert_op_conf)", "")
    return advice, summary


def _tx_ranges(ctx: AnalysisContext) -> list[Finding]:
    r = ctx.rules
    _, window = _times(ctx)
    t = r["tx"]
    tx = ctx.profile.tx
    start = tx["start_us"].to_numpy(dtype="float64")
    dur = tx["duration_us"].to_numpy(dtype="float64")
    ok = np.isfinite(start) & np.isfinite(dur) & (dur > 0)
    if not ok.any() or window <= 0:
        return []
    names = tx["name"].astype(str).to_numpy()[ok]
    s, e = start[ok], start[ok] + dur[ok]
    leaf = _leaves(s, e)
    ops = ctx.profile.ops
    bs, be = union(ops["start_us"].to_numpy(dtype="float64"),
                   (ops["start_us"] + ops["duration_us"]).to_numpy(dtype="float64")) if len(ops) else \
        (np.zeros(0), np.zeros(0))
    aligned = len(bs) > 0 and bool(((bs < e.max()) & (be > s.min())).any())
    inside = overlap(bs, be, s, e) if aligned else np.zeros(len(s))
    df = pd.DataFrame({"name": names[leaf], "dur": (e - s)[leaf], "device": inside[leaf]})
    per = df.groupby("name", sort=False).agg(calls=("dur", "size"), total_us=("dur", "sum"), max_us=("dur", "max"),
                                             device_us=("device", "sum"))
    per["host_us"] = (per["total_us"] - per["device_us"]).clip(lower=0.0)
    per = per.sort_values("host_us", ascending=False)
    out: list[Finding] = []
    for name, row in per.iterrows():
        host = float(row["host_us"])
        if host < float(t["min_host_us"]) or host / window < float(t["min_share"]):
            continue
        kind = _kind(str(name), t["kinds"])
        frac = float(t["recoverable_fraction"][kind])
        saving = min(host * frac, window)
        advice, summary = _tx_advice(ctx, kind)
        out.append(_free_finding(
            ctx, rule="host-inference.tx-range",
            title=f"msproftx range '{name}': {fmt_us(host)} of host-only time ({pct(host / window)} of the analyzed "
                  f"time, {kind})",
            evidence={"range": str(name), "kind": kind, "calls": int(row["calls"]), "total_us": float(row["total_us"]),
                      "max_us": float(row["max_us"]), "device_busy_inside_us": float(row["device_us"]),
                      "host_only_us": host, "window_us": window, "source": "msprof_tx",
                      "device_clock_aligned": aligned,
                      "table": table(["range", "calls", "total_us", "device_busy_inside_us", "host_only_us", "kind"],
                                     [[str(n), int(v["calls"]), round(float(v["total_us"]), 3),
                                       round(float(v["device_us"]), 3), round(float(v["host_us"]), 3),
                                       _kind(str(n), t["kinds"])] for n, v in per.head(10).iterrows()])},
            estimated_saving_us=saving,
            basis=(f"{frac:.0%} (tx.recoverable_fraction.{kind}) of the range time minus the device busy time "
                   "inside it" + ("" if aligned else " (device tasks not on the range's clock: taken as 0)")),
            recommendation=(f"Range '{name}' ({int(row['calls'])} call(s), {float(row['total_us']) / 1e3:.1f} ms, "
                            f"{float(row['device_us']) / 1e3:.1f} ms of it with the device busy): {advice}."),
            fix=Fix("code", summary, {"range": str(name), "kind": kind}),
            confidence=float(r["confidence"]["tx"][kind]),
        ))
    return out


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [HostInferenceKB]
