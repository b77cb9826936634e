"""Layout detection: which producer wrote this path, how many ranks it holds, and whether they are one job.

What each layout looks like is declared by its reader (``Layout.in_dir`` / ``Layout.as_file``, collected in
:mod:`advisor.ingest.registry`); this module walks the folders and asks the registry's recognizers, in their
detection order, which layout each one is.

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
from pathlib import Path

import advisor.ingest.registry as registry
from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.ingest.jobs import device_id, number_ranks, one_job, partition
from advisor.ingest.layout import Discovery, RankSource


def _classify_dir(d: Path) -> list[RankSource]:
    """The rank sources found directly at ``d`` (not in its children), or [] when ``d`` is not a profile: the first
    of the layouts' directory recognizers (``registry.directory_matches``, in detection order) that finds any."""
    if d.name == "ASCEND_PROFILER_OUTPUT":  # pointed inside a torch_npu/MindSpore dir: analyze the whole dir
        return _classify_dir(d.parent)
    for match in registry.directory_matches():
        found = match.find(d)
        if found:
            return found
    return []


def _classify_file(p: Path) -> RankSource:
    """The layout of a single file given on its own (``registry.file_matches``); InputError for another file."""
    for match in registry.file_matches():
        found = match.find(p)
        if found:
            return found[0]
    if p.name.lower().endswith(".npu-rep"):
        raise InputError(p, "a packed msprof op (npu-compute) report: unpack it with 'npu-compute --import "
                            f"{p.name} --export DIR' and analyze the directory it prints")
    raise InputError(p, "not a profile: expected a profiling directory, an op_summary/kernel_details CSV, "
                        "a msprof/torch_npu .db or a trace JSON")


MAX_DEPTH = 16
"""Directory levels below the given folder searched for profiles. Real nestings reach 5 (a serving job's
``<evidence>/<case>/run165/profiler/rank0/rank0_*_ascend_pt``, a ``msprof_output/PROF_GROUP_*/PROF_<set>/PROF_*``
collection); 16 leaves room without walking a whole file system given by mistake."""

MAX_DIRS = 50_000
"""Directories looked at below the given folder, at most: a profile tree is read by name only, but a folder of
millions of directories (a dataset, a home directory) is not a profile; the walk stops there and says so."""


def detect(path: Path) -> list[RankSource]:
    """Every rank of the one job under ``path`` (itself, or found at any depth below it). Raises InputError when
    ``path`` holds nothing usable, or runs of several jobs (see ``advisor.ingest.jobs``)."""
    return detect_job(path).sources


def detect_job(path: Path) -> Discovery:
    """:func:`detect` with the walk's notes (symlink loops skipped, bounds reached)."""
    return one_job(path, discover(path))


def detect_jobs(path: Path) -> list[Discovery]:
    """Every job under ``path``, each with its own ranks (``advisor analyze --each``)."""
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


def _without_aliases(found: list[RankSource]) -> list[RankSource]:
    """A symlink to a rank directory (or two names of one) is the same rank, not a second one."""
    targets = [s.root.resolve() for s in found]  # each path resolved once: a cluster of thousands of ranks
    real = {t for s, t in zip(found, targets, strict=True) if t == s.root.absolute()}
    kept: list[RankSource] = []
    kept_targets: set[Path] = set()
    for s, target in zip(found, targets, strict=True):
        if target != s.root.absolute() and (target in real or target in kept_targets):
            continue
        kept.append(s)
        kept_targets.add(target)
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
def group_runs(sources: list[RankSource]) -> list[RankSource]:
    """Fold msprof sources that are runs of one device (same device id, or an unknown one where a single device is
    known; same host; no distinct rank ids in their ``info.json``; the same ``PROF_GROUP_*`` session or none) into
    one source carrying the others in ``runs``; everything else is returned as it was."""
    runs = registry.run_layouts()
    keys = _run_keys([s for s in sources if s.layout in runs])
    by_key: dict[tuple[str, int | None], list[RankSource]] = {}
    for s in sources:
        if s.layout in runs:
            by_key.setdefault(keys[id(s)], []).append(s)
    out: list[RankSource] = []
    done: set[int] = set()
    for s in sources:
        if id(s) in done:
            continue
        group = by_key.get(keys[id(s)], []) if s.layout in runs else []
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
