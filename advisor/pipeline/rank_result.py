"""What one rank's analysis returns (from a Dask worker, or from the static audit of a graph), the compact form the
client keeps of it in a multi-rank run, and the target release every rank's analysis applies before its knowledge
bases run."""

from __future__ import annotations

import pickle
import zlib
from dataclasses import dataclass, field
from typing import Any

from advisor.engine.kb_engine import KBStatus, merge_statuses
from advisor.findings import Finding
from advisor.kb import RankData
from advisor.model import Meta
from advisor.pipeline.rank_summary import RankSummary


@dataclass
class RankResult:
    summary: RankSummary
    findings: list[Finding]
    statuses: list[KBStatus]
    platform: dict[str, Any]


# ---------------------------------------------------------------------------------------------------------
# the compact form of a rank on the client (issue 33: clusters of 4,096 ranks)
# ---------------------------------------------------------------------------------------------------------
SUMMARY_TABLES = ("by_type", "by_core", "steps", "join_ops", "comm", "communication_matrix", "step_time", "transports",
                  "time", "small_extras", "model_summary", "kernels", "available", "groups", "comm_op_names")
"""What a compact :class:`RankSummary` holds pickled: its small tables -- each is a few rows, but a live pandas object
costs 4-13 KB whatever its rows (index, blocks, dtypes), ~70 KB a rank in all, ~14 KB pickled -- and its nested
read-only values (time model, profiler metadata, model summary, groups). Each is rebuilt when read (the report and
the cluster knowledge base read each a few times); ``meta`` stays live (the pipeline adds notes to it)."""

RANK_DATA_TABLES = ("steps", "comm", "communication_matrix", "step_time", "transports", "time", "groups",
                    "comm_op_names")
"""The :class:`advisor.kb.RankData` fields that are :class:`RankSummary` fields of the same name, held pickled."""


def _pickled(name: str) -> property:
    """A table held pickled in the instance's ``_tables`` (name -> bytes), or compressed in ``_ztables`` against the
    shared dictionary ``_zdict`` (:meth:`CompactSummary.squeeze`): rebuilt on each read and not kept, so whoever
    reads it holds it only as long as it needs it; set, it is pickled."""
    def get(self: Any) -> Any:
        state = self.__dict__
        squeezed = state.get("_ztables")
        if squeezed is not None and name in squeezed:
            inflate = zlib.decompressobj(zdict=state["_zdict"])
            return pickle.loads(inflate.decompress(squeezed[name]) + inflate.flush())
        return pickle.loads(state["_tables"][name])

    def put(self: Any, value: Any) -> None:
        self.__dict__.setdefault("_tables", {})[name] = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        self.__dict__.get("_ztables", {}).pop(name, None)

    return property(get, put, doc=f"``{name}``, held pickled")


LIMITS = "_limits"
"""The key of a compact summary's limits (:meth:`CompactSummary.limits`) among its pickled tables."""
_LIMITS = _pickled(LIMITS)

ZDICT_BYTES = 32 * 1024
"""zlib's dictionary window: the most of a shared dictionary it uses."""


def zdict_of(summary: CompactSummary) -> bytes:
    """A compression dictionary from one rank's pickled tables: the other ranks' tables repeat its column names,
    dtypes and class paths, and compressed against it take ~1.5 KB instead of ~17 KB (generated ranks, issue 33)."""
    return b"".join(summary.__dict__["_tables"].values())[-ZDICT_BYTES:]


class CompactSummary(RankSummary):
    """A :class:`RankSummary` whose small tables (:data:`SUMMARY_TABLES`) are held pickled; reads the same."""

    @classmethod
    def of_summary(cls, summary: RankSummary) -> RankSummary:
        if isinstance(summary, CompactSummary):
            return summary
        out = cls.__new__(cls)
        state = dict(vars(summary))
        out.__dict__["_tables"] = {k: pickle.dumps(state.pop(k), protocol=pickle.HIGHEST_PROTOCOL)
                                   for k in SUMMARY_TABLES if k in state}
        out.__dict__.update(state)
        return out

    def rank_data(self) -> RankData:
        """What a cluster-scope knowledge base sees of this rank, its tables read from the pickled ones when read."""
        return CompactRankData.of_summary(self)

    def limits(self) -> Any:
        """What a finding on this rank may claim (:meth:`RankSummary.limits`): computed where the rank was analyzed
        (:func:`compact`, on the worker: ~1 ms a rank of pandas the client no longer spends) and held pickled."""
        state = self.__dict__
        if LIMITS in state.get("_tables", {}) or LIMITS in state.get("_ztables", {}):
            return _LIMITS.fget(self)  # type: ignore[misc]
        return super().limits()

    def squeeze(self, zdict: bytes) -> None:
        """Hold the pickled tables compressed against ``zdict`` (zlib level 1: ~0.5 ms a rank, ~8 µs a read)."""
        state = self.__dict__
        zdict = state.get("_zdict", zdict)  # squeezed before: tables set since join the same dictionary
        squeezed = state.setdefault("_ztables", {})
        for name, raw in state["_tables"].items():
            deflate = zlib.compressobj(1, zdict=zdict)
            squeezed[name] = deflate.compress(raw) + deflate.flush()
        state["_tables"] = {}
        state["_zdict"] = zdict


class CompactRankData(RankData):
    """A :class:`advisor.kb.RankData` whose tables are read from a :class:`CompactSummary`'s pickled ones."""

    @classmethod
    def of_summary(cls, summary: CompactSummary) -> RankData:
        out = cls.__new__(cls)
        state = summary.__dict__
        out.__dict__.update(rank=summary.meta.rank, meta=summary.meta, busy_us=summary.busy_us,
                            device_time_us=summary.device_time_us)
        out.__dict__["_tables"] = {k: state["_tables"][k] for k in RANK_DATA_TABLES if k in state["_tables"]}
        if state.get("_ztables"):
            out.__dict__["_ztables"] = {k: state["_ztables"][k] for k in RANK_DATA_TABLES if k in state["_ztables"]}
            out.__dict__["_zdict"] = state["_zdict"]
        return out


def compact(result: RankResult) -> RankResult:
    """``result`` with its summary compact (:class:`CompactSummary`): on the worker, so the client receives and
    holds the small tables as bytes."""
    summary = CompactSummary.of_summary(result.summary)
    if summary is not result.summary:
        summary.__dict__["_tables"][LIMITS] = pickle.dumps(result.summary.limits(), protocol=pickle.HIGHEST_PROTOCOL)
    return RankResult(summary, result.findings, result.statuses, result.platform)


for _name in SUMMARY_TABLES:  # properties: they take precedence over the dataclasses' class-level defaults
    setattr(CompactSummary, _name, _pickled(_name))
for _name in RANK_DATA_TABLES:
    setattr(CompactRankData, _name, _pickled(_name))


SHARED_META = ("ops_columns", "events_read", "time_rules", "config")
"""Meta fields every rank of a run has alike (what the analysis reads, its time rules, the profiler's config):
held once on the client."""


@dataclass
class Received:
    """What the client keeps of the ranks as they arrive (issue 33): each rank's summary compact (its tables
    compressed against the first rank's, :func:`zdict_of`), the values every
    rank has alike (platform, shared meta fields) held once, and the knowledge bases' statuses merged in rank
    order as soon as the ranks before have arrived, so the ranks' own lists are dropped."""

    statuses: list[KBStatus] = field(default_factory=list)
    _pending: dict[int, list[KBStatus]] = field(default_factory=dict)
    _next: int = 0
    _shared: dict[str, Any] = field(default_factory=dict)
    _strings: dict[str, str] = field(default_factory=dict)
    _zdict: bytes | None = None

    def take(self, index: int, result: RankResult | None) -> RankResult | None:
        """Keep job ``index``'s result (None: the rank failed) compact; returns what to hold."""
        self._pending[index] = result.statuses if result is not None else []
        while self._next in self._pending:
            got = self._pending.pop(self._next)
            if got:
                self.statuses = merge_statuses([self.statuses, got] if self.statuses else [got])
            self._next += 1
        if result is None:
            return None
        summary = CompactSummary.of_summary(result.summary)
        if self._zdict is None and summary.__dict__["_tables"]:
            self._zdict = zdict_of(summary)
        if self._zdict is not None:
            summary.squeeze(self._zdict)
        self._share_meta(summary.meta)
        for f in result.findings:
            self._share_finding(f)
        platform = {k: self._shared_value(f"platform.{k}", v) for k, v in result.platform.items()}
        return RankResult(summary, result.findings, [], platform)

    def _shared_value(self, key: str, value: Any) -> Any:
        """``value``, or the equal one an earlier rank gave (compared pickled: a NaN in it still compares equal)."""
        try:
            mine = pickle.dumps(value, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - a value that does not pickle is simply not shared
            return value
        seen = self._shared.setdefault(key, (mine, value))
        return seen[1] if seen[0] == mine else value

    def _share_finding(self, f: Finding) -> None:
        """The finding's strings held once over the ranks (its ops, the op names of its tables, its texts: the
        ranks of one model name the same ops and say the same things)."""
        f.kb, f.rule, f.title, f.basis, f.recommendation = (self._string(f.kb), self._string(f.rule),
                                                             self._string(f.title), self._string(f.basis),
                                                             self._string(f.recommendation))
        f.ops = [self._string(o) for o in f.ops]
        f.saving_by_op = {self._string(k): v for k, v in f.saving_by_op.items()}
        f.evidence = self._strings_in(f.evidence)
        if f.fix is not None:
            f.fix.summary = self._string(f.fix.summary)
            f.fix.data = self._strings_in(f.fix.data)

    def _string(self, text: Any) -> Any:
        return self._strings.setdefault(text, text) if type(text) is str else text

    def _strings_in(self, value: Any) -> Any:
        """``value`` (dicts, lists and tuples of plain values) with its strings held once."""
        if type(value) is str:
            return self._strings.setdefault(value, value)
        if type(value) is dict:
            return {self._string(k): self._strings_in(v) for k, v in value.items()}
        if type(value) is list:
            return [self._strings_in(v) for v in value]
        if type(value) is tuple:
            return tuple(self._strings_in(v) for v in value)
        return value

    def _share_meta(self, meta: Meta) -> None:
        for name in SHARED_META:
            value = getattr(meta, name, None)
            if value is not None:
                setattr(meta, name, self._shared_value(f"meta.{name}", value))



def target_cann(meta: Meta, cann: str | None) -> None:
    """``--cann``: the release the advice is for (a model profiled on 8.0 and deployed on 8.1 gets 8.1's native
    kernels and ATC options); the recorded one stays in the notes."""
    if not cann:
        return
    recorded = meta.cann_version
    meta.cann_version = cann
    meta.notes.append(f"advice targets CANN {cann} (--cann)" + (f"; the input records CANN {recorded}"
                                                                 if recorded and recorded != cann else ""))


__all__ = ["CompactRankData", "CompactSummary", "RankResult", "Received", "compact", "target_cann"]
