"""Layout detection: which producer wrote this path, and how many ranks it holds.

Detection looks at names only (cheap, no file is parsed), so it is safe on multi-GB directories -- except for
the few-KB ``info.json.N`` of msprof runs that share a device id, read for their ``rank_id``.

Runs are not ranks: several msprof results of the same device (``PROF_*`` / ``OPPROF_*`` directories whose
``device_N`` is the same or unknown and whose ``info.json`` names one host and no distinct rank ids) -- e.g. a
``PROF_GROUP_<time>/PROF_<AicMetrics>/PROF_*`` folder of re-runs, one per ``--aic-metrics`` set, as the CANN
``msprof_profile_run.sh`` collection script writes it -- become one source whose ``runs`` lists the other runs;
``advisor.ingest.runs`` reads them and merges their metric sets when they profiled the same kernels.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from advisor import safeload
from advisor.errors import InputError

_DEVICE_DIR = re.compile(r"^device_(\d+)$")
_RANK_IN_NAME = re.compile(r"(?:rank[_-]?|_)(\d+)(?:_ascend_(?:pt|ms))?$")
_MS_LEGACY_MARKERS = ("aicore_intermediate_", "framework_raw_", "step_trace_raw_", "hccl_raw_", "aicpu_intermediate_")


@dataclass(frozen=True)
class RankSource:
    """One rank's data: where it is and which reader reads it."""

    root: Path
    layout: str
    rank: int | None = None
    runs: tuple[RankSource, ...] = ()
    """Other runs of the same device (re-runs with other metric sets): read and merged with this one."""


def _has_csv(d: Path, prefix: str) -> bool:
    return any(d.glob(f"{prefix}*.csv"))


def _classify_dir(d: Path) -> list[RankSource]:
    """The rank sources found directly at ``d`` (not in its children), or [] when ``d`` is not a profile."""
    if d.name == "ASCEND_PROFILER_OUTPUT":  # pointed inside a torch_npu/MindSpore dir: analyze the whole dir
        return _classify_dir(d.parent)
    if d.name.startswith("OPPROF_") or any(d.glob("OpBasicInfo*.csv")):
        return _msprof_op_sources(d)
    if d.name.upper().startswith("PROF_GROUP"):
        return group_runs(_search_below(d))
    out_dir = d / "ASCEND_PROFILER_OUTPUT"
    if out_dir.is_dir() or d.name.endswith(("_ascend_pt", "_ascend_ms")):
        is_ms = d.name.endswith("_ascend_ms") or any(out_dir.glob("ascend_mindspore_profiler*.db"))
        has_db = any(out_dir.glob("ascend_pytorch_profiler*.db")) or any(out_dir.glob("ascend_mindspore_profiler*.db"))
        has_text = any((out_dir / n).exists() for n in ("kernel_details.csv", "op_statistic.csv",
                                                         "step_trace_time.csv", "trace_view.json"))
        kind = "mindspore" if is_ms else "torch_npu"
        layout = f"{kind}-text" if has_text or not has_db else f"{kind}-db"
        return [RankSource(d, layout, _rank_from_name(d.name))]

    if (d / "mindstudio_profiler_output").is_dir():
        return [RankSource(d, "msprof-cann7", None)]
    devices = sorted(
        (c for c in d.iterdir() if c.is_dir() and _DEVICE_DIR.match(c.name)),
        key=lambda c: int(_DEVICE_DIR.match(c.name).group(1)),  # type: ignore[union-attr]
    )
    device_with_output = [c for c in devices if (c / "summary").is_dir() or (c / "timeline").is_dir()]
    if device_with_output:
        return [RankSource(c, "msprof-cann6", int(_DEVICE_DIR.match(c.name).group(1)))  # type: ignore[union-attr]
                for c in device_with_output]
    if _DEVICE_DIR.match(d.name) and ((d / "summary").is_dir() or (d / "timeline").is_dir()):
        return [RankSource(d, "msprof-cann6", int(_DEVICE_DIR.match(d.name).group(1)))]  # type: ignore[union-attr]
    if any(d.glob("msprof_*.db")):
        return [RankSource(d, "msprof-db", None)]
    if any(_has_csv(d, m) for m in _MS_LEGACY_MARKERS):
        ids = _legacy_device_ids(d)
        if len(ids) > 1:  # one flat dir can hold several devices' files (e.g. hccl_raw_0.csv, hccl_raw_2.csv)
            return [RankSource(d, "mindspore-legacy", i) for i in ids]
        return [RankSource(d, "mindspore-legacy", None)]
    if d.name.upper().startswith("JOB") or any(d.glob("**/op_summary_*.*.csv")):
        return [RankSource(d, "soc-job", None)]
    if any(_has_csv(d, kind) for kind in ("op_summary", "kernel_details", "op_statistic")):
        return [RankSource(d, "msprof-cann7", None)]
    return []


_OPPROF_DEVICE_DIR = re.compile(r"^device(\d+)$")


def _msprof_op_sources(d: Path) -> list[RankSource]:
    """An ``msprof op`` result: one launch (``OpBasicInfo.csv`` here), several (``<OpName>/<n>/``), one rank per
    ``device<N>/`` (multi-device MC2/LCCL ops), or the simulator's ``simulator/`` tree."""
    if any(d.glob("OpBasicInfo*.csv")) or any(d.glob("*/*/OpBasicInfo*.csv")):
        return [RankSource(d, "msprof-op", None)]
    devices = sorted((int(m.group(1)), c) for c in d.iterdir()
                     if c.is_dir() and (m := _OPPROF_DEVICE_DIR.match(c.name)) and any(c.glob("*/*/OpBasicInfo*.csv")))
    if devices:
        return [RankSource(c, "msprof-op", n) for n, c in devices]
    if (d / "simulator").is_dir():
        return [RankSource(d, "msprof-op-simulator", None)]
    return []


_MS_LEGACY_FILE = re.compile(r"^(?:aicore_intermediate|framework_raw|step_trace_raw|hccl_raw|aicpu_intermediate)_(\d+)")


def _legacy_device_ids(d: Path) -> list[int]:
    """Device ids of a MindSpore 1.x profiler dir, from its file names (``hccl_raw_2.csv`` -> 2)."""
    return sorted({int(m.group(1)) for p in d.glob("*.csv") if (m := _MS_LEGACY_FILE.match(p.name))})


def _rank_from_name(name: str) -> int | None:
    m = _RANK_IN_NAME.search(name)
    return int(m.group(1)) if m else None


def _classify_file(p: Path) -> RankSource:
    name = p.name.lower()
    if name.endswith(".db"):
        if name.startswith("msprof"):
            return RankSource(p, "msprof-db")
        if name.startswith("ascend_mindspore_profiler"):
            return RankSource(p, "mindspore-db")
        return RankSource(p, "torch_npu-db")
    if name.startswith("opbasicinfo") and name.endswith(".csv"):
        return RankSource(p.parent, "msprof-op")
    if name.endswith(".csv"):
        return RankSource(p, "op-summary-csv")
    if name.endswith(".json"):
        return RankSource(p, "trace-json")
    raise InputError(p, "not a profile: expected a profiling directory, an op_summary/kernel_details CSV, "
                        "a msprof/torch_npu .db or a trace JSON")


def detect(path: Path) -> list[RankSource]:
    """Every rank under ``path``: itself, or its children (one level, then two: ``cluster/*/PROF_*``)."""
    if path.is_file():
        return [_classify_file(path)]
    if not path.is_dir():
        raise InputError(path, "not a file or directory")
    try:
        children = sorted(c for c in path.iterdir() if c.is_dir())
        has_files = any(path.iterdir())
    except PermissionError as e:
        raise InputError(path, f"cannot be read ({e.strerror})") from None
    if not has_files:
        raise InputError(path, "directory is empty")

    here = _classify_dir(path)
    if here:
        return here
    found = group_runs(_without_aliases(_search_below(path, children)))
    if not found:
        raise InputError(path, "no recognizable Ascend profile (looked for PROF_*/mindstudio_profiler_output, "
                               "device_N/summary|timeline, *_ascend_pt|*_ascend_ms/ASCEND_PROFILER_OUTPUT, "
                               "msprof_*.db, MindSpore profiler/ CSVs, JOB* summaries, msprof op OPPROF_*)")
    # number ranks that carry no rank of their own by their order
    ranks = [s.rank for s in found]
    if len(found) > 1 and (None in ranks or len(set(ranks)) != len(ranks)):
        found = [RankSource(s.root, s.layout, i, s.runs) for i, s in enumerate(found)]
    return found


def _without_aliases(found: list[RankSource]) -> list[RankSource]:
    """A symlink to a rank directory (or two names of one) is the same rank, not a second one."""
    real = {s.root.resolve() for s in found if s.root.resolve() == s.root.absolute()}
    kept: list[RankSource] = []
    for s in found:
        target = s.root.resolve()
        if target != s.root.absolute() and (target in real or any(k.root.resolve() == target for k in kept)):
            continue
        kept.append(s)
    return kept


def _search_below(path: Path, children: list[Path] | None = None) -> list[RankSource]:
    """The sources in ``path``'s children, else in its grandchildren (``cluster/*/PROF_*``)."""
    if children is None:
        children = sorted(c for c in path.iterdir() if c.is_dir())
    found: list[RankSource] = []
    for _ in range(2):
        for c in children:
            found.extend(_classify_dir(c))
        if found:
            break
        children = sorted(g for c in children for g in c.iterdir() if g.is_dir())
    return found


# ---------------------------------------------------------------------------------------------------------
# runs of one device
# ---------------------------------------------------------------------------------------------------------
RUN_LAYOUTS = frozenset({"msprof-cann6", "msprof-cann7", "msprof-db", "msprof-op", "msprof-op-simulator"})
"""Layouts whose directories record no rank of their own: several of them with one device are runs."""


def group_runs(sources: list[RankSource]) -> list[RankSource]:
    """Fold msprof sources that are runs of one device (same or unknown device id, same host, no distinct rank ids
    in their ``info.json``) into one source carrying the others in ``runs``; everything else is returned as it was."""
    by_device: dict[int | None, list[RankSource]] = {}
    for s in sources:
        if s.layout in RUN_LAYOUTS:
            by_device.setdefault(_device_id(s), []).append(s)
    out: list[RankSource] = []
    done: set[int] = set()
    for s in sources:
        if id(s) in done:
            continue
        group = by_device.get(_device_id(s), []) if s.layout in RUN_LAYOUTS else []
        if len(group) < 2:
            out.append(s)
            continue
        done.update(id(g) for g in group)
        infos = [_run_info(g) for g in group]
        rank_ids = [r for r, _ in infos]
        hosts = {h for _, h in infos if h}
        if len(hosts) > 1 or (None not in rank_ids and len(set(rank_ids)) == len(rank_ids)):
            # one device id, but on several hosts or with distinct collective ranks: ranks after all
            out.extend(RankSource(g.root, g.layout, r, g.runs) for g, r in zip(group, rank_ids, strict=True))
            continue
        first, *others = group
        out.append(RankSource(first.root, first.layout, first.rank, tuple(others)))
    return out


def _device_id(src: RankSource) -> int | None:
    """The device a msprof source profiled: its ``device_N`` directory (itself for CANN <= 6, inside the PROF
    directory otherwise), or the ``device<N>`` of a multi-device msprof op result; None when not recorded."""
    if src.layout in ("msprof-cann6", "msprof-op"):
        return src.rank
    root = src.root if src.root.is_dir() else src.root.parent
    ids = {int(m.group(1)) for c in root.iterdir() if c.is_dir() and (m := _DEVICE_DIR.match(c.name))}
    return ids.pop() if len(ids) == 1 else None


def _run_info(src: RankSource) -> tuple[int | None, str | None]:
    """(``rank_id``, ``hostname``) from the run's ``info.json.N`` (msprof writes the collective rank there); None
    for what is absent."""
    root = src.root if src.root.is_dir() else src.root.parent
    infos = [p for p in sorted(root.glob("info.json.*")) or sorted(root.glob("device_*/info.json.*"))
             if not p.name.endswith(".done")]
    if not infos:
        return None, None
    try:
        data = safeload.load_json(infos[0])
    except InputError:
        return None, None
    if not isinstance(data, dict):
        return None, None
    rank = data.get("rank_id")
    host = data.get("hostname")
    return (rank if isinstance(rank, int) and 0 <= rank < 4294967295 else None,
            str(host) if isinstance(host, str) and host else None)
