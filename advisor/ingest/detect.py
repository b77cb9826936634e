"""Layout detection: which producer wrote this path, how many ranks it holds, and whether they are one job.

Detection looks at names only (cheap, no file is parsed), so it is safe on multi-GB directories -- except for
the few-KB ``info.json.N`` / ``profiler_info_N.json`` / ``start_info`` / ``end_info`` files of a run, read for its
rank id, host, chip and capture time (``advisor.ingest.jobs``).

Below a folder, profiles are found at any depth (``advisor analyze evidence/`` finds
``evidence/<case>/run165/profiler/rank0/rank0_..._ascend_pt``): a breadth-first walk that stops descending at a
directory recognized as a profile, follows a symlinked directory once (a link back to a directory already seen is a
loop: skipped, and the report says so) and is bounded by :data:`MAX_DEPTH` levels and :data:`MAX_DIRS`
directories. Everything found must be one job (``advisor.ingest.jobs``): runs of different chips, layouts or jobs
are refused with one line naming two of them (``detect``), or handed out one job each (``detect_jobs``, the
``--each`` option).

Runs are not ranks: several msprof results of the same device (``PROF_*`` / ``OPPROF_*`` directories whose
``device_N`` is the same or unknown and whose ``info.json`` names one host and no distinct rank ids) -- e.g. a
``PROF_GROUP_<time>/PROF_<AicMetrics>/PROF_*`` folder of re-runs, one per ``--aic-metrics`` set, as the CANN
``msprof_profile_run.sh`` collection script writes it -- become one source whose ``runs`` lists the other runs;
``advisor.ingest.runs`` reads them and merges their metric sets when they profiled the same kernels. Runs of two
``PROF_GROUP_*`` folders (two collection sessions) are not folded together.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from pathlib import Path

from advisor.common import safeload
from advisor.common.errors import InputError

_DEVICE_DIR = re.compile(r"^device_(\d+)$")
_RANK_WORD = re.compile(r"(?:^|[_-])rank[_-]?(\d+)(?:[_-]|$)", re.IGNORECASE)
_RANK_IN_NAME = re.compile(r"_(\d{1,6})(?:_ascend_(?:pt|ms))?$")
"""A trailing number of at most 6 digits (``worker_3_ascend_pt``); torch_npu's default names end in a 14-17 digit
time stamp (``rank0_752_20260925054655567_ascend_pt``), which is no rank."""
_SOC_SUMMARY = re.compile(r"^op_summary_\d+\..+\.csv$")
"""An SS928/SS927 per-picture op summary: ``op_summary_<device>.<model>.<...>.csv`` (``advisor.ingest.soc_job``)."""
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
    if d.name.startswith("OPPROF_") or any(d.glob("OpBasicInfo*.csv")) or _is_msprof_op_jsonl(d) \
            or _msprof_op_devices(d):
        return _msprof_op_sources(d)
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
        ids = legacy_device_ids(d)
        if len(ids) > 1:  # one flat dir can hold several devices' files (e.g. hccl_raw_0.csv, hccl_raw_2.csv)
            return [RankSource(d, "mindspore-legacy", i) for i in ids]
        return [RankSource(d, "mindspore-legacy", None)]
    if any(_SOC_SUMMARY.match(p.name) for p in d.glob("op_summary_*.csv")) or \
            (d.name.upper().startswith("JOB") and any(d.glob("*/op_summary_*.*.csv"))):
        return [RankSource(d, "soc-job", None)]
    if any(_has_csv(d, kind) for kind in ("op_summary", "kernel_details", "op_statistic")):
        return [RankSource(d, "msprof-cann7", None)]
    return []


_OPPROF_DEVICE_DIR = re.compile(r"^device(\d+)$")


def _msprof_op_sources(d: Path) -> list[RankSource]:
    """An ``msprof op`` result: one launch (``OpBasicInfo.csv`` here), several (``<OpName>/<n>/``), one rank per
    ``device<N>/`` (multi-device MC2/LCCL ops), the JSON Lines capture (``summary.jsonl`` / ``HardwareInfo.jsonl``
    beside the metric CSVs), or the simulator's ``simulator/`` tree."""
    if any(d.glob("OpBasicInfo*.csv")) or any(d.glob("*/*/OpBasicInfo*.csv")) or _is_msprof_op_jsonl(d):
        return [RankSource(d, "msprof-op", None)]
    devices = _msprof_op_devices(d)
    if devices:
        return [RankSource(c, "msprof-op", n) for n, c in devices]
    if (d / "simulator").is_dir():
        return [RankSource(d, "msprof-op-simulator", None)]
    return []


def _msprof_op_devices(d: Path) -> list[tuple[int, Path]]:
    """``(N, device<N>/)`` children of ``d`` holding msprof op launches (``OpBasicInfo.csv`` in it or two levels
    down, or the JSON Lines capture), in device order."""
    return sorted((int(m.group(1)), c) for c in d.iterdir()
                  if c.is_dir() and (m := _OPPROF_DEVICE_DIR.match(c.name))
                  and (any(c.glob("OpBasicInfo*.csv")) or any(c.glob("*/*/OpBasicInfo*.csv"))
                       or _is_msprof_op_jsonl(c)))


def _is_msprof_op_jsonl(d: Path) -> bool:
    """msprof op's JSON Lines capture (``advisor.ingest.msprof_op_jsonl``), by file names only."""
    from advisor.ingest.msprof_op import is_jsonl_capture

    try:
        return is_jsonl_capture(d)
    except OSError:
        return False


_MS_LEGACY_FILE = re.compile(r"^(?:aicore_intermediate|framework_raw|step_trace_raw|hccl_raw|aicpu_intermediate)_(\d+)")


def legacy_device_ids(d: Path) -> list[int]:
    """Device ids of a MindSpore 1.x profiler dir, from its file names (``hccl_raw_2.csv`` -> 2)."""
    return sorted({int(m.group(1)) for p in d.glob("*.csv") if (m := _MS_LEGACY_FILE.match(p.name))})


def _rank_from_name(name: str) -> int | None:
    """``rank0_...`` / ``rank_1_ascend_pt`` / ``test_rank_0`` -> the rank; else a short trailing number."""
    m = _RANK_WORD.search(name) or _RANK_IN_NAME.search(name)
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
    if name in ("summary.jsonl", "hardwareinfo.jsonl") and _is_msprof_op_jsonl(p.parent):
        return RankSource(p.parent, "msprof-op")
    if name.endswith(".npu-rep"):
        raise InputError(p, "a packed msprof op (npu-compute) report: unpack it with 'npu-compute --import "
                            f"{p.name} --export DIR' and analyze the directory it prints")
    if name.endswith(".csv"):
        return RankSource(p, "op-summary-csv")
    if name.endswith(".json"):
        return RankSource(p, "trace-json")
    raise InputError(p, "not a profile: expected a profiling directory, an op_summary/kernel_details CSV, "
                        "a msprof/torch_npu .db or a trace JSON")


MAX_DEPTH = 16
"""Directory levels below the given folder searched for profiles. Real nestings reach 5 (a serving job's
``<evidence>/<case>/run165/profiler/rank0/rank0_*_ascend_pt``, a ``msprof_output/PROF_GROUP_*/PROF_<set>/PROF_*``
collection); 16 leaves room without walking a whole file system given by mistake."""

MAX_DIRS = 50_000
"""Directories looked at below the given folder, at most: a profile tree is read by name only, but a folder of
millions of directories (a dataset, a home directory) is not a profile; the walk stops there and says so."""


@dataclass
class Discovery:
    """What a walk below a folder found: the rank sources (runs of one device folded), and what the walk skipped."""

    sources: list[RankSource]
    notes: list[str] = field(default_factory=list)


def detect(path: Path) -> list[RankSource]:
    """Every rank of the one job under ``path`` (itself, or found at any depth below it). Raises InputError when
    ``path`` holds nothing usable, or runs of several jobs (see ``advisor.ingest.jobs``)."""
    return detect_job(path).sources


def detect_job(path: Path) -> Discovery:
    """:func:`detect` with the walk's notes (symlink loops skipped, bounds reached)."""
    from advisor.ingest.jobs import one_job

    return one_job(path, discover(path))


def detect_jobs(path: Path) -> list[Discovery]:
    """Every job under ``path``, each with its own ranks (``advisor analyze --each``)."""
    from advisor.ingest.jobs import partition

    found = discover(path)
    return [Discovery(number_ranks(job), found.notes) for job in partition(found.sources)]


def discover(path: Path) -> Discovery:
    """Every rank source at or below ``path``, runs of one device folded; InputError when there is none."""
    if path.is_file():
        return Discovery([_classify_file(path)])
    if not path.is_dir():
        raise InputError(path, "not a file or directory")
    try:
        has_files = any(path.iterdir())
    except PermissionError as e:
        raise InputError(path, f"cannot be read ({e.strerror})") from None
    if not has_files:
        raise InputError(path, "directory is empty")
    here = _classify_dir(path)
    if here:
        return Discovery(group_runs(here))
    walked = _walk(path)
    found = group_runs(_without_aliases(walked.sources))
    if not found:
        raise InputError(path, "no recognizable Ascend profile (looked for PROF_*/mindstudio_profiler_output, "
                               "device_N/summary|timeline, *_ascend_pt|*_ascend_ms/ASCEND_PROFILER_OUTPUT, "
                               "msprof_*.db, MindSpore profiler/ CSVs, JOB* summaries, msprof op OPPROF_*)"
                               + (f"; {walked.notes[0]}" if walked.notes else ""))
    return Discovery(found, walked.notes)


def number_ranks(found: list[RankSource]) -> list[RankSource]:
    """Ranks that carry no rank of their own (or the same one) numbered by their order."""
    ranks = [s.rank for s in found]
    if len(found) > 1 and (None in ranks or len(set(ranks)) != len(ranks)):
        return [RankSource(s.root, s.layout, i, s.runs) for i, s in enumerate(found)]
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


def _walk(path: Path) -> Discovery:
    """The sources below ``path``, breadth first, not descending into a directory recognized as a profile; bounded
    by :data:`MAX_DEPTH` and :data:`MAX_DIRS`. Symlinked directories are walked after every real one, so a link to a
    rank is never taken for the rank; one to a directory already seen is skipped (a loop, with a note)."""
    walk = _Walk(path)
    links = walk.run([(path, 0)])
    while links and not walk.stopped:
        link, depth = links.pop(0)
        if walk.enter(link, is_link=True) and walk.look(link):
            links.extend(walk.run([(link, depth)]))
    if walk.too_deep:
        walk.notes.append(f"did not look deeper than {MAX_DEPTH} levels below {path} ({walk.too_deep} "
                          f"folder(s) at that depth not opened, e.g. {walk.too_deep_example})")
    return Discovery(walk.found, walk.notes)


class _Walk:
    """One bounded breadth-first walk: what it found, what it skipped, the directories it has seen."""

    def __init__(self, top: Path) -> None:
        self.top = top
        self.found: list[RankSource] = []
        self.notes: list[str] = []
        self.seen = {_identity(top)}
        self.looked = 0
        self.stopped = False
        self.too_deep = 0
        self.too_deep_example: Path | None = None

    def enter(self, d: Path, is_link: bool) -> bool:
        """Whether ``d`` is walked: not seen before (a link back to a folder above it is a loop: said)."""
        ident = _identity(d)
        if ident is None:
            return False
        if ident in self.seen:
            if is_link and _is_ancestor_link(d):
                self.notes.append(f"{d}: a symlink to a folder above it (a loop), not followed")
            return False
        self.seen.add(ident)
        return True

    def run(self, level: list[tuple[Path, int]]) -> list[tuple[Path, int]]:
        """Walk down from ``level`` through real directories; the symlinked ones met on the way (with their
        depth), for later."""
        links: list[tuple[Path, int]] = []
        while level and not self.stopped:
            below: list[tuple[Path, int]] = []
            for d, depth in level:
                if depth >= MAX_DEPTH:
                    self.too_deep += 1
                    self.too_deep_example = self.too_deep_example or d
                    continue
                for child, is_link in _subdirs(d):
                    if is_link:
                        links.append((child, depth + 1))
                    elif self.enter(child, is_link=False) and self.look(child):
                        below.append((child, depth + 1))
            level = below
        return links

    def look(self, d: Path) -> bool:
        """Classify ``d``: True when it is no profile and is to be walked down."""
        self.looked += 1
        if self.looked > MAX_DIRS:
            if not self.stopped:
                self.notes.append(f"stopped looking for profiles after {MAX_DIRS} directories below {self.top}")
            self.stopped = True
            return False
        try:
            sources = _classify_dir(d)
        except OSError as e:  # an unreadable folder below the one given is not the input's fault
            self.notes.append(f"{d}: not searched ({e.strerror or e})")
            return False
        self.found.extend(sources)
        return not sources


def _identity(d: Path) -> tuple[int, int] | None:
    try:
        st = os.stat(d)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _subdirs(d: Path) -> list[tuple[Path, bool]]:
    """``d``'s subdirectories by name, each with whether it is a symlink."""
    try:
        entries = sorted(os.scandir(d), key=lambda e: e.name)
    except OSError:
        return []
    out: list[tuple[Path, bool]] = []
    for e in entries:
        try:
            if e.is_dir():
                out.append((Path(e.path), e.is_symlink()))
        except OSError:
            continue
    return out


def _is_ancestor_link(link: Path) -> bool:
    target = link.resolve()
    return target == link.parent.resolve() or target in link.parent.resolve().parents


# ---------------------------------------------------------------------------------------------------------
# runs of one device
# ---------------------------------------------------------------------------------------------------------
RUN_LAYOUTS = frozenset({"msprof-cann6", "msprof-cann7", "msprof-db", "msprof-op", "msprof-op-simulator"})
"""Layouts whose directories record no rank of their own: several of them with one device are runs."""


def group_runs(sources: list[RankSource]) -> list[RankSource]:
    """Fold msprof sources that are runs of one device (same device id, or an unknown one where a single device is
    known; same host; no distinct rank ids in their ``info.json``; the same ``PROF_GROUP_*`` session or none) into
    one source carrying the others in ``runs``; everything else is returned as it was."""
    keys = _run_keys([s for s in sources if s.layout in RUN_LAYOUTS])
    by_key: dict[tuple[str, int | None], list[RankSource]] = {}
    for s in sources:
        if s.layout in RUN_LAYOUTS:
            by_key.setdefault(keys[id(s)], []).append(s)
    out: list[RankSource] = []
    done: set[int] = set()
    for s in sources:
        if id(s) in done:
            continue
        group = by_key.get(keys[id(s)], []) if s.layout in RUN_LAYOUTS else []
        if len(group) < 2:
            out.append(s)
            continue
        done.update(id(g) for g in group)
        out.extend(_fold(group))
    return out


def _run_keys(sources: list[RankSource]) -> dict[int, tuple[str, int | None]]:
    """(collection session, device) of each msprof source: the ``PROF_GROUP_*`` folder it is in ("" when none) and
    its device id -- an unknown device (a PROF holding only its exports) is the session's one known device, when
    there is exactly one."""
    raw = {id(s): (_session(s.root), device_id(s)) for s in sources}
    known: dict[str, set[int]] = {}
    for session, device in raw.values():
        if device is not None:
            known.setdefault(session, set()).add(device)
    out: dict[int, tuple[str, int | None]] = {}
    for key, (session, device) in raw.items():
        devices = known.get(session, set())
        out[key] = (session, next(iter(devices)) if device is None and len(devices) == 1 else device)
    return out


def _session(root: Path) -> str:
    """The ``PROF_GROUP_*`` folder ``root`` is in (its path), "" when none: runs of two sessions are not folded."""
    for parent in (root, *root.parents):
        if parent.name.upper().startswith("PROF_GROUP"):
            return str(parent)
    return ""


def _fold(group: list[RankSource]) -> list[RankSource]:
    """Sources of one (session, device): one source with the others as runs, or ranks after all when they are on
    several hosts or carry distinct collective rank ids."""
    infos = [_run_info(g) for g in group]
    rank_ids = [r for r, _ in infos]
    hosts = {h for _, h in infos if h}
    if len(hosts) > 1 or (None not in rank_ids and len(set(rank_ids)) == len(rank_ids)):
        return [RankSource(g.root, g.layout, r, g.runs) for g, r in zip(group, rank_ids, strict=True)]
    first, *others = group
    runs = [RankSource(m.root, m.layout, m.rank) for g in others for m in (g, *g.runs)]
    return [RankSource(first.root, first.layout, first.rank, (*first.runs, *runs))]


def device_id(src: RankSource) -> int | None:
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
