"""Build normalized Profiles and ModelGraphs in memory, for knowledge-base scenario tests.

Scenarios are labeled: each builder returns the objects plus the op names a knowledge base must flag.
Ops are laid out back to back on one stream unless a start time is given.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import networkx as nx
import pandas as pd

from advisor.graph.model_graph import ModelGraph
from advisor.ingest.normalize import finalize_ops
from advisor.model import Meta, Profile


@dataclass
class OpRow:
    name: str
    type: str
    duration_us: float
    core: str = "AI_CORE"
    input_shapes: str = ""
    input_dtypes: str = ""
    input_formats: str = ""
    output_shapes: str = ""
    output_dtypes: str = ""
    output_formats: str = ""
    stream_id: int = 0
    start_us: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)


def make_profile(rows: list[OpRow], chip: str = "Ascend310P3", gap_us: float = 1.0, **meta: Any) -> Profile:
    """A Profile whose ops table holds ``rows`` in order (start times back to back with ``gap_us``)."""
    t = 1_000_000.0
    records = []
    for i, r in enumerate(rows):
        start = r.start_us if r.start_us is not None else t
        t = start + r.duration_us + gap_us
        rec = {
            "name": r.name, "type": r.type, "core": r.core, "start_us": start, "duration_us": r.duration_us,
            "wait_us": 0.0, "stream_id": r.stream_id, "task_id": i, "block_dim": 8.0,
            "input_shapes": r.input_shapes, "input_dtypes": r.input_dtypes, "input_formats": r.input_formats,
            "output_shapes": r.output_shapes, "output_dtypes": r.output_dtypes, "output_formats": r.output_formats,
        }
        rec.update(r.metrics)
        rec.update(r.extra)
        records.append(rec)
    ops = finalize_ops(pd.DataFrame.from_records(records))
    return Profile(ops=ops, meta=Meta(source="<scenario>", layout="scenario", chip=chip, **meta))


def desc(fmt: str = "NCHW", dtype: str = "FLOAT16", shape: list[int] | None = None,
         origin_format: str | None = None, origin_shape: list[int] | None = None) -> dict[str, Any]:
    """A tensor descriptor as ModelGraph nodes carry it."""
    return {"format": fmt, "origin_format": origin_format or fmt, "dtype": dtype, "shape": list(shape or []),
            "origin_shape": list(origin_shape or shape or [])}


class GraphBuilder:
    """Add nodes and data edges in a few calls; produces a ModelGraph like the readers do."""

    def __init__(self, name: str = "scenario", soc: str = "Ascend310P3") -> None:
        self.g = nx.MultiDiGraph()
        self.name = name
        self.attrs: dict[str, Any] = {"soc_version": soc}

    def node(self, name: str, type_: str, *, engine: str = "AI_CORE", inputs: list[dict[str, Any]] | None = None,
             outputs: list[dict[str, Any]] | None = None, original_ops: list[str] | None = None,
             fusion_passes: list[str] | None = None, pass_name_ub: str | None = None,
             attrs: dict[str, Any] | None = None, after: list[str] | str | None = None) -> str:
        """Add a node; ``after`` names its data producers (output 0 of each, in input order)."""
        self.g.add_node(name, type=type_, engine=engine, inputs=list(inputs or []), outputs=list(outputs or []),
                        original_ops=list(original_ops or []), fusion_passes=list(fusion_passes or []),
                        pass_name_ub=pass_name_ub, attrs=dict(attrs or {}), stream_id=0, id=len(self.g),
                        subgraph=self.name)
        producers = [after] if isinstance(after, str) else list(after or [])
        for i, src in enumerate(producers):
            self.g.add_edge(src, name, src_index=0, dst_index=i, kind="data")
        return name

    def chain(self, *specs: tuple[str, str], start_after: str | None = None, **common: Any) -> list[str]:
        """Add ``(name, type)`` nodes each fed by the previous one."""
        names = []
        prev = start_after
        for name, type_ in specs:
            self.node(name, type_, after=prev, **common)
            names.append(name)
            prev = name
        return names

    def build(self) -> ModelGraph:
        return ModelGraph(g=self.g, source="<scenario>", format="om-json", name=self.name, attrs=dict(self.attrs),
                          subgraphs={self.name: list(self.g.nodes)})
