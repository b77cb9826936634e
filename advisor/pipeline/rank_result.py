"""What one rank's analysis returns (from a Dask worker, or from the static audit of a graph), and the target
release every rank's analysis applies before its knowledge bases run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from advisor.engine.kb_engine import KBStatus
from advisor.findings import Finding
from advisor.model import Meta
from advisor.pipeline.rank_summary import RankSummary


@dataclass
class RankResult:
    summary: RankSummary
    findings: list[Finding]
    statuses: list[KBStatus]
    platform: dict[str, Any]


def target_cann(meta: Meta, cann: str | None) -> None:
    """``--cann``: the release the advice is for (a model profiled on 8.0 and deployed on 8.1 gets 8.1's native
    kernels and ATC options); the recorded one stays in the notes."""
    if not cann:
        return
    recorded = meta.cann_version
    meta.cann_version = cann
    meta.notes.append(f"advice targets CANN {cann} (--cann)" + (f"; the input records CANN {recorded}"
                                                                 if recorded and recorded != cann else ""))


__all__ = ["RankResult", "target_cann"]
