"""Open any supported graph file (or find one inside a profile directory) and read it into a ModelGraph.

- ``*.json``: an ``atc --mode=1`` OM JSON (GE ModelDef) -> ``om_json``; ONNX written as JSON -> ``onnx_model``
- ``ge_proto_*.txt``: GE dump, protobuf text of ``ge.proto.ModelDef`` -> ``ge_text``
- ``ge_onnx_*.pbtxt``: GE dump, protobuf text of ``ge.onnx.ModelProto`` -> ``ge_onnx``
- ``*.onnx``: ONNX model -> ``onnx_model``

Text files are told apart by content, not name (a ``.txt`` holding ONNX text still reads). Anything else --
unknown extension, truncated JSON, syntax error, a JSON that is not a graph -- is an :class:`InputError`.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.common.util import paused_gc
from advisor.graph.model_graph import ModelGraph

GRAPH_SUFFIXES = (".json", ".txt", ".pbtxt", ".prototxt", ".onnx")

_ONNX_TEXT_START = re.compile(r"\A\s*(ir_version|producer_name|producer_version|opset_import|domain|model_version)\s*[:{]")
_ONNX_TEXT_NODE = re.compile(r"^\s*op_type\s*:", re.M)
_GE_TEXT_START = re.compile(r"\A\s*(graph|name|version|custom_version|attr)\s*[:{]")
_GE_PROTO_FILE = re.compile(r"^ge_proto_(\d+)_.*Build\.txt$")
_GE_ONNX_FILE = re.compile(r"^ge_onnx_(\d+)_.*Build\.pbtxt$")
_OM_JSON_SNIFF = re.compile(rb'\A\s*\{\s*"(attr|custom_version|graph|name|version)"\s*:')
_PROFILER_JSON = re.compile(
    r"^(trace_view|msprof|task_time|step_trace|communication|profiler_info|profiler_metadata|info\.json|"
    r"start_info|end_info|sample|hccl|ge_op_execute|ascend_timeline_display|pipeline|cluster|kernel_)"
)
_SKIP_DIRS = {"data", "sqlite", "__pycache__", "log", "logs"}


def load_graph(path: str | Path) -> ModelGraph:
    """Read a graph file; a directory is searched with :func:`find_graph_in_profile`."""
    with paused_gc():
        return _load_graph(Path(path))


def _load_graph(p: Path) -> ModelGraph:
    if not p.exists():
        raise InputError(p, "no such file or directory")
    if p.is_dir():
        found = find_graph_in_profile(p)
        if found is None:
            raise InputError(p, "no graph dump found (looked for *.om.json / OM JSON, ge_proto_*Build.txt, "
                                "ge_onnx_*Build.pbtxt)")
        p = found
    safeload.check_regular(p)
    suffix = p.suffix.lower()
    if suffix == ".json":
        return _load_json(p)
    if suffix in (".txt", ".pbtxt", ".prototxt"):
        return _load_text(p)
    if suffix == ".onnx":
        from advisor.graph.onnx_model import read_onnx_file

        return read_onnx_file(p)
    if suffix == ".om":
        raise InputError(p, "binary OM model: convert it first with `atc --mode=1 --om=model.om --json=model.json`")
    raise InputError(p, f"unknown graph file type '{suffix or p.name}' (expected .json, .txt, .pbtxt or .onnx)")


MAX_GRAPH_OPS = 500_000
"""Most ops an OM JSON graph may hold: the largest real models have a few tens of thousands, and each op costs a few
KB once built (1.5M repeated ops in a 250 MB file went past 6 GiB). A graph beyond it is refused, naming the file."""


def _count_om_ops(raw: bytes) -> int:
    """Ops of an OM JSON document, counted by a streaming parse (constant memory: nothing is kept)."""
    import io

    import ijson

    try:
        return sum(1 for _ in ijson.items(io.BytesIO(raw), "graph.item.op.item"))
    except ijson.JSONError:
        return 0  # malformed: the whole-document parse says where


def _check_op_budget(p: Path, raw: bytes) -> None:
    """Refuse an OM JSON with more than :data:`MAX_GRAPH_OPS` ops before it is parsed whole. Every op has a
    ``"name"``, so a file with fewer of those is under budget without the (slower) exact count."""
    if raw.count(b'"name"') <= MAX_GRAPH_OPS:
        return
    n = _count_om_ops(raw)
    if n > MAX_GRAPH_OPS:
        raise InputError(p, f"holds {n:,} ops, more than the {MAX_GRAPH_OPS:,} a graph may have (the reader's "
                            "memory budget): not read")


def _load_json(p: Path) -> ModelGraph:
    raw = safeload.read_bytes(p, safeload.MAX_BYTES)
    _check_op_budget(p, raw)
    data = safeload.loads_json(raw, p)
    del raw
    from advisor.graph.om_json import is_om_json, read_om_json
    from advisor.graph.onnx_model import is_onnx_json, read_onnx_json

    if is_om_json(data):
        try:
            return read_om_json(data, str(p))
        except (TypeError, ValueError, AttributeError) as e:  # wrong value types where the schema has others
            raise InputError(p, f"malformed OM JSON: {type(e).__name__}: {e}") from None
    if is_onnx_json(data):
        return read_onnx_json(data, str(p))
    kind = type(data).__name__
    keys = ", ".join(list(data)[:5]) if isinstance(data, dict) else ""
    raise InputError(p, f"JSON is not a model graph (expected an atc --mode=1 OM JSON with a 'graph' list, or ONNX "
                        f"JSON with 'node'); found a {kind}" + (f" with keys {keys}" if keys else ""))


def _read_head(p: Path, size: int = 65536) -> str:
    """The start of a text dump, enough to tell which message it holds."""
    try:
        with p.open("rb") as fh:
            head = fh.read(size)
    except OSError as e:
        raise InputError(p, f"cannot read: {e.strerror or e}") from None
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start >= len(head) - 4:  # a multi-byte character cut at the end of the chunk
            return head[: e.start].decode("utf-8")
        raise InputError(p, "not a text graph dump (binary or non-UTF-8 content)") from None


def text_dump_kind(text: str) -> str | None:
    """``ge-onnx-pbtxt`` / ``ge-proto-txt`` for protobuf text of either GE message, else None."""
    if _ONNX_TEXT_START.match(text):
        return "ge-onnx-pbtxt"
    if _GE_TEXT_START.match(text):
        if _ONNX_TEXT_NODE.search(text) and "\n  node {" in text:
            return "ge-onnx-pbtxt"
        return "ge-proto-txt"
    return None


def _load_text(p: Path) -> ModelGraph:
    head = _read_head(p)
    kind = text_dump_kind(head)
    if kind is None:
        first = head.lstrip().split("\n", 1)[0][:60] if head.strip() else "empty file"
        raise InputError(p, f"not a GE graph dump (expected protobuf text starting with 'graph {{' or "
                            f"'ir_version:'; found: {first!r})")
    if kind == "ge-onnx-pbtxt":
        from advisor.graph.ge_onnx import read_ge_onnx

        return read_ge_onnx(p)
    from advisor.graph.ge_text import read_ge_text

    return read_ge_text(p)


def _seq(pattern: re.Pattern[str], name: str) -> int:
    m = pattern.match(name)
    return int(m.group(1)) if m else -1


def looks_like_om_json(path: Path) -> bool:
    """A cheap sniff of a JSON file's first bytes: a GE ModelDef object, not a profiler trace or summary."""
    if path.name.lower().endswith(".om.json"):
        return True
    if _PROFILER_JSON.match(path.name.lower()):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(65536)
    except OSError:
        return False
    if not _OM_JSON_SNIFF.match(head):
        return False
    return b'"key"' in head or b'"op"' in head or b'"graph"' in head


def find_graph_in_profile(profile_root: str | Path, max_depth: int = 8) -> Path | None:
    """A graph dump saved inside a profile directory, or None.

    Preference: an OM JSON (the deployed model), then the last ``ge_proto_*Build.txt`` (highest sequence
    number: the final built graph, as msprof-analyze picks it), then the last ``ge_onnx_*Build.pbtxt``.
    Raw-data folders (``data/``) are not searched.
    """
    root = Path(profile_root)
    if root.is_file():
        return root if root.suffix.lower() in GRAPH_SUFFIXES else None
    om: list[Path] = []
    ge_proto: list[Path] = []
    ge_onnx: list[Path] = []
    base_depth = len(root.parts)
    for dirpath, dirnames, filenames in os.walk(root):
        depth = len(Path(dirpath).parts) - base_depth
        dirnames[:] = sorted(d for d in dirnames if d.lower() not in _SKIP_DIRS and not d.startswith(".")
                             and depth < max_depth)
        for f in sorted(filenames):
            path = Path(dirpath) / f
            if not path.is_file():
                continue  # a FIFO or device with a graph's name would block the sniff
            if _GE_PROTO_FILE.match(f):
                ge_proto.append(path)
            elif _GE_ONNX_FILE.match(f):
                ge_onnx.append(path)
            elif f.lower().endswith(".json") and looks_like_om_json(path):
                om.append(path)
    if om:
        return om[0]
    if ge_proto:
        return max(ge_proto, key=lambda q: (_seq(_GE_PROTO_FILE, q.name), str(q)))
    if ge_onnx:
        return max(ge_onnx, key=lambda q: (_seq(_GE_ONNX_FILE, q.name), str(q)))
    return None
