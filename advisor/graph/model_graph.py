"""The normalized model graph, whatever it was read from.

``ModelGraph.g`` is a ``networkx.MultiDiGraph`` whose node keys are op names. Node attributes:

- ``type``: op type (``Conv2D``, ``TransData``...; ONNX op types for .onnx input)
- ``engine``: ``AI_CORE``, ``AI_VECTOR_CORE``, ``AI_CPU``, ``GE_LOCAL``, ``RTS``, ``HCCL``, ``HOST_CPU``,
  ``DVPP`` or ``UNKNOWN`` (from ``_ge_attr_op_kernel_lib_name``, else inferred from the type)
- ``inputs`` / ``outputs``: lists of tensor descriptors ``{"format", "origin_format", "dtype", "shape",
  "origin_shape"}`` (dtype as ``DT_*`` name without prefix, e.g. ``FLOAT16``; shapes as lists of ints)
- ``original_ops``: framework op names merged into this op (``_datadump_original_op_names``)
- ``fusion_passes``: graph-fusion passes (``pass_name``) and ``pass_name_ub`` (UB fusion pass or None)
- ``attrs``: remaining attributes decoded to plain Python values
- ``stream_id``, ``id``, ``subgraph`` (name of the (sub)graph holding the node)
- ``called_subgraphs`` (only on nodes that run subgraphs: PartitionedCall, If/While/Case...): their names

Node keys are op names; an op name that repeats in another subgraph is keyed ``<subgraph>/<name>``.
Dtypes in ``attrs`` that GE stores as integers (``dt`` values, Cast ``dst_type``, ``SrcT``/``DstT``) are
decoded to names with the right numbering (see ``advisor.graph.dtypes``).

Edge attributes: ``src_index``, ``dst_index`` (ints), ``kind`` = ``data`` or ``control``.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from advisor.common.util import lazy_module

nx = lazy_module("networkx")  # imported when a graph is analyzed


BUILD_ATTRS = ("soc_version", "atc_cmdline", "opp_version", "atc_version", "framework_type")
DYNAMIC_ATC_OPTIONS = ("dynamic_batch_size", "dynamic_image_size", "dynamic_dims", "input_shape_range")


@dataclass
class ModelGraph:
    g: nx.MultiDiGraph
    source: str
    format: str
    """om-json, ge-proto-txt, ge-onnx-pbtxt, onnx"""
    name: str = ""
    attrs: dict[str, Any] = field(default_factory=dict)
    """Model-level attributes (soc_version, atc_cmdline, opp_version...)."""
    subgraphs: dict[str, list[str]] = field(default_factory=dict)
    """Subgraph name -> node names; the root graph is under its own name."""
    root_graph: str = ""
    """Name of the root graph (``graph[0]`` of a GE ModelDef)."""
    subgraph_parents: dict[str, str] = field(default_factory=dict)
    """Subgraph name -> node that runs it, where the dump links them."""
    graph_attrs: dict[str, dict[str, Any]] = field(default_factory=dict)
    """(Sub)graph name -> its GraphDef attributes."""

    @property
    def soc_version(self) -> str | None:
        v = self.attrs.get("soc_version")
        return str(v) if v else None

    def nodes_of_type(self, *types: str) -> Iterator[str]:
        wanted = set(types)
        for n, data in self.g.nodes(data=True):
            if data.get("type") in wanted:
                yield n

    def node(self, name: str) -> dict[str, Any]:
        return self.g.nodes[name]

    def data_successors(self, name: str) -> list[str]:
        return [v for _, v, d in self.g.out_edges(name, data=True) if d.get("kind") == "data"]

    def data_predecessors(self, name: str) -> list[str]:
        return [u for u, _, d in self.g.in_edges(name, data=True) if d.get("kind") == "data"]

    def summary(self) -> dict[str, Any]:
        out: dict[str, Any] = {"source": self.source, "format": self.format, "nodes": self.g.number_of_nodes(),
                               "edges": self.g.number_of_edges()}
        build = self.build_info()
        if build:
            out["build"] = build
        return out

    def build_info(self) -> dict[str, Any]:
        """How the model was built and what it takes: the OM's build attributes (``atc_cmdline``, ``soc_version``,
        ``opp_version``, ``atc_version``, ``framework_type``), its inputs, and whether its shapes are dynamic.
        ``advisor fix --atc-config`` rebuilds the atc command from it."""
        out: dict[str, Any] = {}
        for key in BUILD_ATTRS:
            value = self.attrs.get(key)
            if isinstance(value, dict):
                value = value.get("s")
            if value not in (None, ""):
                out[key] = str(value)
        inputs = []
        for n, d in self.g.nodes(data=True):
            if d.get("type") in ("Data", "RefData", "AippData") and d.get("subgraph") in (None, "", self.root_graph):
                desc = (d.get("outputs") or [{}])[0] or {}
                inputs.append({"name": n, "dtype": desc.get("dtype"), "shape": desc.get("origin_shape") or
                               desc.get("shape"), "format": desc.get("origin_format") or desc.get("format")})
        if inputs:
            out["inputs"] = sorted(inputs, key=lambda i: str(i["name"]))[:16]
        out["dynamic_shape"] = self.dynamic_shape()
        return out

    def dynamic_shape(self) -> bool:
        """Dynamic shapes: an input with a -1/-2 dim, an unknown-shape op attribute, or a dynamic atc option."""
        cmd = str(self.attrs.get("atc_cmdline") or "")
        if any(f"--{opt}" in cmd for opt in DYNAMIC_ATC_OPTIONS):
            return True
        for _, d in self.g.nodes(data=True):
            attrs = d.get("attrs") or {}
            if any(attrs.get(k) for k in ("_is_unknown_shape", "_force_unknown_shape")):
                return True
            if d.get("type") in ("Data", "RefData"):
                for desc in d.get("outputs") or []:
                    if desc and any(isinstance(x, int) and x < 0 for x in (desc.get("shape") or [])):
                        return True
        return False
