"""Where per-rank work runs: in this process, on an embedded Dask ``LocalCluster``, or on an existing Dask cluster.

A cluster profile is thousands of independent rank directories; each is read and analyzed on its own and only a
small per-rank result travels back (see ``docs/cluster.md``). This module knows nothing of profiles: it maps a
picklable job function over jobs, reports progress as ranks done / total, turns a job's failure into a
:class:`RankFailure` (the run goes on) and returns results in job order, so that serial, local-cluster and
remote runs give identical reports.

Workers of the embedded cluster are non-daemonic processes, so a rank's analysis may start subprocesses of its
own (plugin isolation). On a remote cluster the workers must have the same ``advisor`` (and plugins) installed
and see the profile at the same path: it is checked before any work is sent.
"""

from __future__ import annotations

import logging
import os
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from advisor.common.errors import AdvisorError, UsageError

J = TypeVar("J")
R = TypeVar("R")
Progress = Callable[[str], None]

SERIAL, LOCAL, REMOTE = "serial", "local", "remote"
CONNECT_TIMEOUT = 2.0
"""Seconds to reach a ``--scheduler`` and hear it answer, all told: a Dask scheduler on a reachable host answers
its handshake in milliseconds, and a wrong address (nothing listening, a port that accepts TCP but speaks no Dask,
a host that drops packets) must fail with one line well within 5 s of the command starting, not after Dask's
retries (16 s) or never (a silent port: Dask waits for the handshake without a limit)."""


@dataclass(frozen=True)
class RankFailure:
    """A rank whose job failed (unreadable or broken files): reported in ``input.ranks_skipped``, then skipped."""

    index: int
    path: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "reason": self.reason}


@dataclass(frozen=True)
class Outcome(Generic[R]):
    """What one job gave: a result or a failure (exactly one is set)."""

    index: int
    result: R | None = None
    failure: RankFailure | None = None


def guarded(fn: Callable[[J], R], job: J, index: int, path: str) -> Outcome[R]:
    """Run ``fn(job)`` and turn any exception into a :class:`RankFailure` naming the path and the problem.

    Runs on the worker: an exception object never travels (not every exception pickles), its one-line text does.
    """
    try:
        return Outcome(index, result=fn(job))
    except AdvisorError as e:
        reason = str(getattr(e, "problem", None) or e)
        where = str(getattr(e, "path", "") or "")
        if where and where != path:  # name the file inside the rank that is broken
            inside = where.startswith(path.rstrip(os.sep) + os.sep)
            reason = f"{os.path.relpath(where, path) if inside else where}: {reason}"
        return Outcome(index, failure=RankFailure(index, path, reason))
    except Exception as e:  # noqa: BLE001 - one broken rank must not stop a thousand-rank run
        frames = traceback.extract_tb(e.__traceback__)
        where = f" at {os.path.basename(frames[-1].filename)}:{frames[-1].lineno}" if frames else ""
        text = str(e).strip().splitlines()[0] if str(e).strip() else ""
        return Outcome(index, failure=RankFailure(index, path, f"{type(e).__name__}: {text}{where}".strip()))


def plan(n_jobs: int, workers: int | None, scheduler: str | None, parallel_ok: bool = True) -> str:
    """Which executor a run uses: a scheduler address means remote; several jobs, more than one worker and
    jobs that can leave this process mean the embedded local cluster; anything else runs here."""
    if scheduler:
        return REMOTE
    if n_jobs > 1 and parallel_ok and local_workers(n_jobs, workers) > 1:
        return LOCAL
    return SERIAL


def local_workers(n_jobs: int, workers: int | None) -> int:
    """Embedded cluster size: one single-threaded worker process per core (or ``workers``), at most one per job."""
    return max(1, min(n_jobs, workers or os.cpu_count() or 1))


def run_jobs(fn: Callable[[J], R], jobs: Sequence[J], paths: Sequence[str], *, mode: str = SERIAL,
             workers: int | None = None, scheduler: str | None = None, shared: Any = None,
             progress: Progress | None = None,
             on_outcome: Callable[[Outcome[R]], Outcome[R]] | None = None) -> list[Outcome[R]]:
    """Map ``fn`` over ``jobs`` with the executor ``mode``; outcomes come back in job order.

    ``shared`` is sent to the cluster once (broadcast) and given to every job as ``fn((shared, job))`` on a
    cluster and in this process alike, so the job function is the same everywhere. ``on_outcome``: applied in
    this process to each outcome as it arrives (in arrival order, while other jobs still run), and what it returns
    is kept instead.
    """
    progress = progress or (lambda _text: None)
    total = len(jobs)
    if mode == SERIAL:
        out = []
        for i, job in enumerate(jobs):
            outcome = guarded(fn, (shared, job), i, paths[i])
            out.append(on_outcome(outcome) if on_outcome is not None else outcome)
            progress(f"analyzed ranks {i + 1}/{total}")
        return out
    from distributed import Client

    if mode == LOCAL:
        n = local_workers(total, workers)
        progress(f"starting a local Dask cluster of {n} workers")
        cluster = _local_cluster(n)
        try:
            with Client(cluster) as client:
                return _on_client(client, fn, jobs, paths, shared, progress, on_outcome)
        finally:
            cluster.close()
    if mode == REMOTE:
        client = connect(scheduler or "")
        try:
            check_workers(client)
            return _on_client(client, fn, jobs, paths, shared, progress, on_outcome)
        finally:
            client.close()
    raise ValueError(f"unknown executor mode {mode!r}")


QUIET_CLUSTER = {
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
}
"""Dask's housekeeping, made rarer on the embedded cluster: event-loop lag checks every 20 ms, host monitoring every
0.5 s and each worker's memory checked every 0.1 s cost the client ~60 ms of CPU per second of a run, which is
serial time a 4,096-rank job pays for every second it runs (issue 33). Ranks take seconds; these do not need to
be finer."""


def _local_cluster(n_workers: int) -> Any:
    import dask
    from distributed import LocalCluster

    # non-daemonic workers may start processes of their own (issue 14: plugins run in isolated subprocesses)
    with dask.config.set({"distributed.worker.daemon": False, "distributed.admin.tick.limit": "1h", **QUIET_CLUSTER}):
        return LocalCluster(n_workers=n_workers, threads_per_worker=1, processes=True, host="127.0.0.1",
                            dashboard_address=None, silence_logs=logging.ERROR)


def connect(address: str) -> Any:
    """A client of the Dask scheduler at ``address``; one that cannot be reached or does not answer within
    :data:`CONNECT_TIMEOUT` is a one-line usage error.

    Dask's own timeout covers the TCP connect only: its handshake read has no limit, so a port that accepts and
    stays silent would hang the run. The scheduler is first asked its identity under one deadline here
    (:func:`_probe`); only a scheduler that answered gets a ``Client``."""
    from distributed import Client

    start = time.monotonic()
    try:
        _probe(address, CONNECT_TIMEOUT)
        left = max(0.5, CONNECT_TIMEOUT - (time.monotonic() - start))
        return Client(address, timeout=left, set_as_default=False)
    except Exception as e:  # noqa: BLE001 - whatever a wrong endpoint answers (garbage frames: MemoryError)
        text = str(e).strip().splitlines()[0][:200] if str(e).strip() else ""
        if not isinstance(e, OSError | TimeoutError | ValueError):
            text = f"it does not speak Dask's protocol ({type(e).__name__}{': ' + text if text else ''})"
        raise UsageError(f"cannot reach the Dask scheduler at {address}: {text or type(e).__name__}") from None


async def _refused_fast(address: str) -> None:
    """For a TCP address, one plain connect first: a refused connection (nothing listens there) fails at once,
    where Dask would retry it until its timeout."""
    from distributed.comm.addressing import parse_address, parse_host_port

    scheme, loc = parse_address(address)
    if scheme not in ("tcp", "tls"):
        return
    host, port = parse_host_port(loc)
    import asyncio

    try:
        _, writer = await asyncio.open_connection(host, port)
    except ConnectionRefusedError:
        raise OSError(f"connection refused (nothing listens on {host}:{port})") from None
    writer.close()


def _probe(address: str, timeout: float) -> None:
    """Connect to ``address``, do Dask's handshake and ask the scheduler's identity, all within ``timeout``
    seconds (in a private event loop: nothing is left running). Raises TimeoutError or OSError."""
    import asyncio

    from distributed.comm import connect as dask_connect
    from distributed.security import Security

    async def ask() -> None:
        await _refused_fast(address)
        comm = await dask_connect(address, timeout=timeout, **Security().get_connection_args("client"))
        try:
            await comm.write({"op": "identity", "reply": True})
            answer = await comm.read()
        finally:
            comm.abort()
        if not isinstance(answer, dict) or "address" not in answer:
            raise OSError(f"no Dask scheduler answers there (got {type(answer).__name__})")

    async def bounded() -> None:
        try:
            await asyncio.wait_for(ask(), timeout)
        except asyncio.TimeoutError:
            raise TimeoutError(f"no answer within {timeout:g} s") from None

    asyncio.run(bounded())


def _worker_versions() -> dict[str, str]:
    from advisor import __version__

    return {"advisor": __version__}


def check_workers(client: Any) -> None:
    """Refuse a cluster with no workers, or with workers whose ``advisor`` differs from this one's."""
    from advisor import __version__

    info = client.scheduler_info()
    if not info.get("workers"):
        client.wait_for_workers(1, timeout=30)
    versions = client.run(_worker_versions)
    wrong = {w: v["advisor"] for w, v in versions.items() if v.get("advisor") != __version__}
    if wrong:
        worker, version = next(iter(wrong.items()))
        raise UsageError(f"Dask worker {worker} runs advisor {version}, this client {__version__}: install the "
                         f"same advisor version on every worker")


def chunk_size(n_jobs: int, n_workers: int) -> int:
    """Jobs per Dask task: about :data:`CHUNKS_PER_WORKER` tasks per worker, at most :data:`MAX_CHUNK` jobs each.

    A task costs the scheduler, the worker and the client a few milliseconds of bookkeeping whatever it does; a
    small rank costs little more (issue 33), so ranks travel in chunks. Several chunks per worker keep the workers
    evenly loaded when ranks differ in size, and progress moving."""
    return max(1, min(MAX_CHUNK, n_jobs // max(1, n_workers * CHUNKS_PER_WORKER)))


CHUNKS_PER_WORKER = 8
MAX_CHUNK = 16


def _on_client(client: Any, fn: Callable[[J], R], jobs: Sequence[J], paths: Sequence[str], shared: Any,
               progress: Progress, on_outcome: Callable[[Outcome[R]], Outcome[R]] | None = None
               ) -> list[Outcome[R]]:
    from distributed import as_completed

    total = len(jobs)
    shared_f = client.scatter(shared, broadcast=True, hash=False) if shared is not None else None
    workers = sum((client.nthreads() or {}).values()) or 1
    size = chunk_size(total, workers)
    starts = list(range(0, total, size))
    futures = {client.submit(_run_chunk, fn, shared_f, list(jobs[i:i + size]), i, list(paths[i:i + size]),
                             key=f"advisor-ranks-{i}-{id(jobs)}", pure=False): i for i in starts}
    out: list[Outcome[R] | None] = [None] * total
    done = 0
    for future in as_completed(list(futures), loop=client.loop):
        first = futures[future]
        try:
            outcomes = future.result()
        except Exception as e:  # noqa: BLE001 - a worker lost mid-job: its ranks are reported, the run goes on
            outcomes = [Outcome(i, failure=RankFailure(i, paths[i], f"worker failed: {type(e).__name__}: {e}"))
                        for i in range(first, min(total, first + size))]
        for outcome in outcomes:
            out[outcome.index] = on_outcome(outcome) if on_outcome is not None else outcome
        future.release()  # the worker may drop the result now: the client holds the only copy
        done += len(outcomes)
        progress(f"analyzed ranks {done}/{total}")
    return [o for o in out if o is not None]


def _run_chunk(fn: Callable[[Any], R], shared: Any, jobs: list[Any], first: int, paths: list[str]
               ) -> list[Outcome[R]]:
    """Jobs ``first``, ``first + 1``, ... on a worker, each guarded on its own (one broken rank fails alone)."""
    return [guarded(fn, (shared, job), first + k, path) for k, (job, path) in enumerate(zip(jobs, paths, strict=True))]
