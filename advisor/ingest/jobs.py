"""What "one job" means: the rank sources found below a folder are one job only when the data says they are.

A folder may hold the ranks of one training job, the re-runs of one device -- or runs that have nothing to do with
each other: an msprof PROF of a 310P3 inference app beside a torch_npu rank of a 910B training job, the same
serving case profiled in ten loops (``<case>/run<N>/profiler/rank0/...``). Merged, those give a "job" whose ranks
are compared with each other, whose window is their sum and whose chip is the first one's. So sources are split
into jobs by what each records about itself (read cheaply: a few small JSON files per source, never a table):

* the layout family (msprof, torch_npu, MindSpore 2.x, MindSpore 1.x, SoC JOB, a lone trace): one job is written by
  one profiler;
* the chip: the core counts and clock of ``info.json.N`` (in a PROF, or in the ``PROF_*`` of a torch_npu rank);
* the world size a rank records (``profiler_metadata.json`` ``distributed_args.world_size``);
* the capture's time range (``profiler_info_N.json`` start and end, msprof ``start_info`` / ``end_info``): ranks of
  one job are captured together, so their ranges overlap (within :data:`MAX_RANK_SKEW_S`); runs folded as one
  device's re-runs span all of theirs;
* the rank id (``profiler_info`` / ``info.json`` ``rank_id``, else the host and device): one job has each rank once.

Sources that record nothing of a criterion are not split by it (a lone CSV has no time range). ``detect`` refuses
more than one job with one line naming two of them and why; ``detect_jobs`` (``advisor analyze --each``) returns
them all.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import advisor.ingest.registry as registry
from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.common.util import is_ascii_digits
from advisor.ingest.layout import Discovery, RankSource
from advisor.ingest.mindspore_legacy import legacy_device_ids
from advisor.ingest.msprof import info_json_files, parse_device_info

_DEVICE_DIR = re.compile(r"^device_(\d+)$")

MAX_RANK_SKEW_S = 60.0
"""Seconds by which the capture ranges of two ranks of one job may miss each other and still count as overlapping:
ranks stop at the same step (collectives synchronize them) but on hosts whose clocks differ by up to a second or
so, and a range known only by its end is a point. Separate runs of one script are minutes apart and, more often,
carry the same rank id."""


@dataclass(frozen=True)
class RunIdentity:
    """What one rank source records about the job it belongs to (None: not recorded)."""

    family: str
    chip: tuple[int | None, int | None, float | None] | None
    """(AI cores, vector cores, clock MHz) from info.json."""
    rank: object | None
    """The rank id; for msprof runs (host, rank id or device): a multi-node job may profile device 0 of each node,
    and RANK_ID is the job's to set, not msprof's."""
    world_size: int | None
    start_ns: int | None
    end_ns: int | None

    def describe_chip(self) -> str:
        if self.chip is None:
            return "chip not recorded"
        aic, aiv, mhz = self.chip
        return f"{aic} AI cores, {aiv} vector cores" + (f", {mhz:g} MHz" if mhz else "")


# ---------------------------------------------------------------------------------------------------------
# one job, or several
# ---------------------------------------------------------------------------------------------------------
def one_job(path: Path, found: Discovery) -> Discovery:
    """``found`` when its sources are one job (ranks numbered); InputError naming two runs of different jobs and
    why, otherwise."""
    ids = {id(s): identify(s) for s in found.sources}
    jobs = _split(found.sources, ids)
    if len(jobs) == 1:
        return Discovery(number_ranks(jobs[0]), found.notes)
    a, b = jobs[0][0], jobs[1][0]
    raise InputError(path, f"holds {len(jobs)} separate runs, not one job: {_rel(a.root, path)} and "
                           f"{_rel(b.root, path)} ({_why(ids[id(a)], ids[id(b)])}); analyze one of them, or each "
                           f"on its own with --each")


def partition(sources: list[RankSource]) -> list[list[RankSource]]:
    """``sources`` split into jobs (see the module doc), in the order they were found."""
    ids = {id(s): identify(s) for s in sources}
    return _split(sources, ids)


def _split(sources: list[RankSource], ids: dict[int, RunIdentity]) -> list[list[RankSource]]:
    jobs: list[list[RankSource]] = [list(sources)]
    for key in (_family_key, _chip_key, _world_key):
        jobs = [part for job in jobs for part in _by_key(job, lambda s, k=key: k(ids[id(s)]))]
    jobs = [part for job in jobs for part in _by_time(job, ids)]
    return [part for job in jobs for part in _by_rank(job, ids)]


def _family_key(i: RunIdentity) -> object:
    return i.family


def _chip_key(i: RunIdentity) -> object:
    return i.chip


def _world_key(i: RunIdentity) -> object:
    return i.world_size


def _by_key(job: list[RankSource], key: Callable[[RankSource], object]) -> list[list[RankSource]]:
    """``job`` split by ``key``; sources whose key is None join the only keyed group (or stay together when there
    is none), and are a group of their own when there are several."""
    groups: dict[object, list[RankSource]] = {}
    unknown: list[RankSource] = []
    for s in job:
        k = key(s)
        (unknown if k is None else groups.setdefault(k, [])).append(s)
    parts = list(groups.values())
    if not parts:
        return [unknown]
    if len(parts) == 1:
        at = {id(s): i for i, s in enumerate(job)}  # job.index would compare paths: quadratic in the ranks
        return [sorted(parts[0] + unknown, key=lambda s: at[id(s)])]
    return parts + ([unknown] if unknown else [])


def _by_time(job: list[RankSource], ids: dict[int, RunIdentity]) -> list[list[RankSource]]:
    """``job`` split into groups whose capture ranges overlap (chained, within :data:`MAX_RANK_SKEW_S`)."""
    timed = sorted((s for s in job if ids[id(s)].end_ns is not None), key=lambda s: _range(ids[id(s)])[0])
    if len(timed) < 2:
        return [job]
    slack = int(MAX_RANK_SKEW_S * 1e9)
    parts: list[list[RankSource]] = [[timed[0]]]
    end = _range(ids[id(timed[0])])[1]
    for s in timed[1:]:
        start, stop = _range(ids[id(s)])
        if start > end + slack:
            parts.append([])
        parts[-1].append(s)
        end = max(end, stop)
    if len(parts) == 1:
        return [job]
    untimed = [s for s in job if ids[id(s)].end_ns is None]
    return [sorted(p, key=job.index) for p in parts] + ([untimed] if untimed else [])


def _range(i: RunIdentity) -> tuple[int, int]:
    end = int(i.end_ns or 0)
    return (int(i.start_ns) if i.start_ns is not None else end, end)


def _by_rank(job: list[RankSource], ids: dict[int, RunIdentity]) -> list[list[RankSource]]:
    """``job`` split so that no rank id appears twice in one part (a second rank 0 starts another job)."""
    parts: list[list[RankSource]] = []
    taken: list[set[object]] = []
    for s in job:
        rank = ids[id(s)].rank
        slot = next((i for i, t in enumerate(taken) if rank is None or rank not in t), None)
        if slot is None:
            parts.append([])
            taken.append(set())
            slot = len(parts) - 1
        parts[slot].append(s)
        if rank is not None:
            taken[slot].add(rank)
    return parts


def _why(a: RunIdentity, b: RunIdentity) -> str:
    """Why two runs are not one job, in words."""
    if a.family != b.family:
        return f"written by different profilers: {a.family} and {b.family}"
    if a.chip != b.chip and a.chip is not None and b.chip is not None:
        return f"different chips: {a.describe_chip()} and {b.describe_chip()}"
    if a.world_size != b.world_size and a.world_size and b.world_size:
        return f"different world sizes: {a.world_size} and {b.world_size}"
    if a.end_ns is not None and b.end_ns is not None:
        (s1, e1), (s2, e2) = _range(a), _range(b)
        gap = max(s2 - e1, s1 - e2) / 1e9
        if gap > MAX_RANK_SKEW_S:
            return f"captured {_duration(gap)} apart"
    if a.rank is not None and a.rank == b.rank:
        return f"both are rank {_rank_text(a.rank)}"
    return "they do not record belonging to one job"


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    if seconds < 172800:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 86400:.0f} days"


def _rank_text(rank: object) -> str:
    if isinstance(rank, tuple):
        host, device = rank
        what = device if isinstance(device, str) else f"device {device}"
        return what + (f" on {host}" if host else "")
    return str(rank)


def _rel(root: Path, base: Path) -> str:
    try:
        rel = root.resolve().relative_to(base.resolve())
    except ValueError:
        return str(root)
    return str(rel) if str(rel) != "." else root.name


def number_ranks(found: list[RankSource]) -> list[RankSource]:
    """Ranks that carry no rank of their own (or the same one) numbered by their order."""
    ranks = [s.rank for s in found]
    if len(found) > 1 and (None in ranks or len(set(ranks)) != len(ranks)):
        return [RankSource(s.root, s.layout, i, s.runs) for i, s in enumerate(found)]
    return found


# ---------------------------------------------------------------------------------------------------------
# what a source records about itself (small JSON files only)
# ---------------------------------------------------------------------------------------------------------
def identify(src: RankSource) -> RunIdentity:
    """The :class:`RunIdentity` of ``src`` (and of its runs, for a device's re-runs: their time ranges joined)."""
    known = registry.find(src.layout)
    family = known.family if known else src.layout
    root = src.root if src.root.is_dir() else src.root.parent
    if family in ("torch_npu", "MindSpore"):
        return _framework_identity(family, root, src.rank)
    if family == "msprof" and src.layout != "op-summary-csv":
        return _msprof_identity(src)
    if src.layout == "mindspore-legacy" and src.rank is None:  # one device's files: its id is in their names
        ids = legacy_device_ids(root)
        return RunIdentity(family, None, (None, ids[0]) if len(ids) == 1 else None, None, None, None)
    return RunIdentity(family, None, src.rank, None, None, None)


def _framework_identity(family: str, root: Path, name_rank: int | None) -> RunIdentity:
    """A torch_npu / MindSpore rank: ``profiler_info_N.json`` (rank id, capture range), ``profiler_metadata.json``
    (world size), the info.json of its ``PROF_*`` (chip)."""
    info = _first_json(root.glob("profiler_info*.json"))
    rank = _rank_id(info.get("rank_id")) if info else None
    start, end = _profiler_range(info)
    meta = _first_json([root / "profiler_metadata.json"])
    args = meta.get("distributed_args") if isinstance(meta.get("distributed_args"), dict) else {}
    world = _rank_id(args.get("world_size"))
    chip, _, _ = _info_json(root)
    return RunIdentity(family, chip, rank if rank is not None else name_rank, world or None, start, end)


def _msprof_identity(src: RankSource) -> RunIdentity:
    """An msprof PROF (or a device's re-runs): info.json (chip, rank id, host) and start_info / end_info (range)."""
    members = [src, *src.runs]
    chip, rank, host = _info_json(_dir(src.root))
    starts, ends = [], []
    for m in members:
        start, end = _msprof_range(_dir(m.root))
        if end is not None:
            ends.append(end)
            starts.append(start if start is not None else end)
    key: object | None = (host, f"rank {rank}" if rank is not None else _device_of(src))
    if key == (None, None):
        key = None
    return RunIdentity("msprof", chip, key, None, min(starts) if starts else None, max(ends) if ends else None)


def _dir(root: Path) -> Path:
    return root if root.is_dir() else root.parent


def _device_of(src: RankSource) -> int | None:
    try:
        return device_id(src)
    except OSError:
        return None


def device_id(src: RankSource) -> int | None:
    """The device a msprof source profiled: its ``device_N`` directory (itself for CANN <= 6, inside the PROF
    directory otherwise), or the ``device<N>`` of a multi-device msprof op result; None when not recorded."""
    if src.layout in ("msprof-cann6", "msprof-op"):
        return src.rank
    root = src.root if src.root.is_dir() else src.root.parent
    ids = {int(m.group(1)) for c in root.iterdir() if c.is_dir() and (m := _DEVICE_DIR.match(c.name))}
    return ids.pop() if len(ids) == 1 else None


def _info_json(root: Path) -> tuple[tuple[int | None, int | None, float | None] | None, object | None, str | None]:
    """(chip counts, rank id, host) from the first ``info.json.N`` of a run; Nones when absent or unreadable."""
    files = info_json_files(root)
    if not files:
        return None, None, None
    try:
        info = parse_device_info(files[0])
    except InputError:
        return None, None, None
    chip = (info.ai_core_num, info.aiv_num, info.aic_frequency) if info.ai_core_num else None
    return chip, info.extra.get("rank_id"), info.extra.get("hostname")  # type: ignore[return-value]


def _first_json(paths: Iterable[Path]) -> dict[str, Any]:
    for p in sorted(paths):
        if not p.is_file():
            continue
        try:
            data = safeload.load_json(p)
        except InputError:
            continue
        if isinstance(data, dict):
            return data
    return {}


def _rank_id(value: object) -> int | None:
    """A rank id or size written as an int or a digit string ("0"); None for -1, absent or anything else."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < 4294967295 else None
    if isinstance(value, str) and is_ascii_digits(value.strip()):
        return _rank_id(int(value.strip()))
    return None


def _profiler_range(info: dict[str, Any]) -> tuple[int | None, int | None]:
    """(start, end) in ns since the epoch from ``profiler_info``: ``end_info.collectionTimeEnd``, and the start as
    that end minus the monotonic span ``end_info.MonotonicTimeEnd - start_info.start_monotonic`` (both ns)."""
    end_info = info.get("end_info") if isinstance(info.get("end_info"), dict) else {}
    start_info = info.get("start_info") if isinstance(info.get("start_info"), dict) else {}
    end = _ns(end_info.get("collectionTimeEnd"))
    if end is None:
        return None, None
    mono_end, mono_start = _ns(end_info.get("MonotonicTimeEnd")), _ns(start_info.get("start_monotonic"))
    if mono_end is not None and mono_start is not None and mono_end - mono_start >= 0:
        return end - (mono_end - mono_start), end
    return None, end


def _msprof_range(root: Path) -> tuple[int | None, int | None]:
    """(start, end) in ns since the epoch from msprof's ``start_info.N`` / ``end_info.N`` (``collectionTimeBegin``
    / ``collectionTimeEnd`` in us) of the run's device or host directory."""
    def first(kind: str, key: str) -> int | None:
        for pattern in (f"{kind}.*", f"device_*/{kind}.*", f"host/{kind}*"):
            for p in sorted(root.glob(pattern)):
                if p.name.endswith(".done"):
                    continue
                us = _ns(_first_json([p]).get(key))
                if us is not None:
                    return us * 1000
        return None

    return first("start_info", "collectionTimeBegin"), first("end_info", "collectionTimeEnd")


def _ns(value: object) -> int | None:
    """A non-negative integer time stamp written as a number or a digit string; None otherwise."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if value >= 0 else None
    if isinstance(value, str) and is_ascii_digits(value.strip()):
        return int(value.strip())
    return None


__all__ = ["MAX_RANK_SKEW_S", "RunIdentity", "device_id", "identify", "number_ranks", "one_job", "partition"]
