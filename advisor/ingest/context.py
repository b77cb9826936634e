"""Execution context: which kind of run produced the profile, so that advice fits what the user runs.

Contexts (``Meta.context``; reported as ``input.context``):

==================== =======================================================================================
``om-acl``           an offline model (``.om`` built by ATC) run through ACL: ``aclmdlExecute``/``aclmdlLoad*``
                     calls, Model-level records, an SVP ACL ``JOB`` summary, or an OM JSON given with ``--graph``
``torch-eager``      torch_npu in eager mode: ``aclnn*`` / ``aclopCompileAndExecute`` launches, Python events,
                     ``profiler_info`` / ``kernel_details.csv`` of a torch_npu export
``torch-graph``      torch_npu graph mode: TorchAir markers (GE) or aclgraph capture/replay APIs
``mindspore-graph``  MindSpore with whole-graph or kernel-by-kernel graph execution (scoped ``...-opN`` names)
``mindspore-pynative`` MindSpore PyNative mode (PyNative markers)
``kernel-dev``       single-kernel development: a short capture of a few hand-launched kernels, no framework
                     metadata, no model id; an operator test program calling only the single-op API of the
                     kernel it captures; or many shapes of one op type (operator benchmarking)
``unknown``          none of the above can be told from the data
==================== =======================================================================================

The signals are data (``rules/context.yaml``, built-in values); the first context whose signals are present wins,
a layout that tells the context by itself (``Layout.context`` in :mod:`advisor.ingest.registry`: an SVP ACL JOB
summary, an msprof op result) right after the graph-mode markers, and ``Meta.context_evidence`` says in one line which signal decided. A model graph refines an undecided profile
(an OM JSON means an offline model) and supplies the CANN version recorded in the OM when the profile has none.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping
from functools import lru_cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pandas as pd

import advisor.ingest.registry as registry
from advisor.model import Meta, Profile

if TYPE_CHECKING:
    from advisor.graph.model_graph import ModelGraph

CONTEXTS = ("om-acl", "torch-eager", "torch-graph", "mindspore-graph", "mindspore-pynative", "kernel-dev", "unknown")

_OPP_CANN = (
    # OM ``opp_version`` of CANN <= 6 (DOMAIN.md 1.2 / FORMATS.md 7): "1.<minor>.*" -> CANN release
    (re.compile(r"^1\.78\."), "5.0 beta"),
    (re.compile(r"^1\.79\."), "5.0.3"),
    (re.compile(r"^1\.80\."), "5.0.4"),
    (re.compile(r"^1\.81\."), "5.1.RC1"),
    (re.compile(r"^1\.82\."), "5.1.RC2"),
    (re.compile(r"^1\.83\."), "6.0.RC1"),
)


@lru_cache(maxsize=1)
def signals() -> Mapping[str, Any]:
    """The built-in ``rules/context.yaml`` (validated against its schema)."""
    from advisor.config.loader import builtin_rules_dir, load_rules_file

    return load_rules_file(builtin_rules_dir() / "context.yaml")


def _layout_context(name: str) -> tuple[str, str] | None:
    """(context, evidence) the layout decides by itself (``Layout.context``: an SVP ACL JOB is an offline model, an
    msprof op result kernel development), None when the data decides."""
    layout = registry.find(name)
    return layout.context if layout else None


def _layout_framework(name: str) -> str | None:
    """``torch_npu`` / ``mindspore`` for a framework's export layout (``Layout.framework``), else None."""
    layout = registry.find(name)
    return layout.framework if layout else None


def _names(series: pd.Series) -> list[str]:
    """Distinct non-empty values of a text column (per category, not per row)."""
    if not len(series):
        return []
    s = series if isinstance(series.dtype, pd.CategoricalDtype) else series.astype("category")
    return [str(v) for v in s.cat.categories if str(v)]


def _event_names(profile: Profile) -> list[str]:
    """Distinct names of the timeline's events, kept or counted, sorted."""
    return sorted(set().union(*(_names(t["name"]) for t in (profile.events, profile.event_summary) if len(t))))


def _api_names(profile: Profile) -> list[str]:
    """API names from api_statistic and from the timeline's event names (CANN layer ``AscendCL@aclmdlExecute`` ->
    aclmdlExecute; device tasks of single-op launches carry their ``aclnn*`` API's name)."""
    names = _names(profile.api["name"]) if "name" in profile.api.columns else []
    names += [n.split("@", 1)[-1] for n in _event_names(profile)]
    return names


def _first(names: Iterable[str], wanted: Iterable[str]) -> str | None:
    want = set(wanted)
    return next((n for n in names if n in want), None)


def _prefixed(names: Iterable[str], prefixes: Iterable[str]) -> str | None:
    pre = tuple(prefixes)
    return next((n for n in names if n.startswith(pre)), None)


def _containing(names: Iterable[str], parts: Iterable[str]) -> str | None:
    parts = list(parts)
    return next((n for n in names if any(p in n for p in parts)), None)


def detect(profile: Profile) -> tuple[str, str]:
    """(context, evidence) of one rank's profile; see the module doc for the order of decisions."""
    s = signals()
    meta = profile.meta
    apis = _api_names(profile)
    event_names = _event_names(profile)
    processes = {p for table in (profile.events, profile.event_summary) if len(table) for p in _names(table["process"])}
    ops = profile.ops
    op_names = _names(ops["name"]) if len(ops) else []

    if hit := _first(apis, s["aclgraph_apis"]):
        return "torch-graph", f"aclgraph capture/replay API {hit} (torch_npu graph mode)"
    if hit := _containing(event_names, s["torchair_markers"]):
        return "torch-graph", f"TorchAir graph-mode marker '{hit}' in the trace"
    if decided := _layout_context(meta.layout):
        return decided
    if hit := _first(apis, s["om_acl_apis"]):
        return "om-acl", f"ACL model API {hit} in the API records: an offline model run through ACL"

    framework = _layout_framework(meta.layout)
    if framework == "mindspore" or str(meta.framework or "").lower().startswith("mindspore"):
        return _mindspore(profile, s, event_names, op_names)
    torch = framework == "torch_npu" or meta.torch_npu_version or "Python" in processes
    if torch:
        why = (f"torch_npu {meta.torch_npu_version} profiler export" if meta.torch_npu_version
               else f"{meta.layout} layout" if framework == "torch_npu" else "Python events in the trace")
        if not apis and not event_names:  # nothing in which a graph-mode marker could have shown
            return "torch-eager", (f"{why} with no trace or API records to show TorchAir or aclgraph markers: eager "
                                   "mode (torch_npu's default) assumed")
        return "torch-eager", f"{why}, no TorchAir or aclgraph markers: eager mode"

    rx = re.compile(s["mindspore_name_regex"])
    if hit := next((n for n in op_names if rx.match(n)), None):
        return _mindspore(profile, s, event_names, op_names, f"MindSpore scoped op name '{_short(hit)}'")

    return _without_framework(profile, s, apis, op_names)


def _without_framework(profile: Profile, s: Mapping[str, Any], apis: list[str], op_names: list[str]
                       ) -> tuple[str, str]:
    """The context of a profile with no framework metadata: kernel development, eager ops, an offline model."""
    meta, ops = profile.meta, profile.ops
    kd = s["kernel_dev"]
    op_api = _prefixed(apis, s["eager_api_prefixes"])
    launch = _first(apis, s["kernel_launch_apis"])
    model_ids = bool(len(ops)) and bool(ops["model_id"].notna().any())
    if launch and not op_api and not model_ids:
        return "kernel-dev", (f"kernels launched through the runtime ({launch}) with no op or model API: "
                              "hand-launched kernels (kernel development)")
    if "kernel_details" in Path(str(meta.source)).name.lower():
        if hit := _prefixed(op_names, ("aclnn",)):
            return "torch-eager", (f"a torch_npu kernel_details.csv with aclnn kernels ('{_short(hit)}'): eager "
                                   "op execution")
        return "unknown", ("a lone kernel_details.csv (torch_npu or MindSpore export) without its profiler_info: "
                           "framework and mode cannot be told")
    capture = bool(len(ops)) and not model_ids and _kernel_capture(ops, op_names)
    short = len(ops) <= int(kd["max_tasks"]) and len(op_names) <= int(kd["max_kernel_names"])
    if capture and not op_api:
        types = _names(ops["type"]) if "type" in ops.columns else []
        if short:
            return "kernel-dev", (f"a capture of {len(ops)} device task(s) of {len(op_names)} kernel(s) with no "
                                  "framework metadata, model id, step, communication or model API: kernel "
                                  "development")
        if len(types) == 1 and len(ops) >= int(kd["single_type_min_tasks"]):
            return "kernel-dev", (f"{len(ops)} measurements of one op type ({types[0]}) over many shapes: "
                                  "single-operator benchmarking")
    # an operator test app (AscendC aclnn invocation): its only op APIs are those of the kernel under test, and the
    # profiled process (info.json pid_name), when recorded, is a native program rather than a Python interpreter
    app = meta.application
    native = bool(app) and not any(fnmatch.fnmatchcase(str(app).lower(), p) for p in s["python_programs"])
    if op_api and capture and short and (native or not app) and (own := _own_op_api(apis, ops, s)):
        by = f"the native program '{app}'" if native else "the application"
        return "kernel-dev", (f"{by} calls only the single-op API of the kernel it captures ({own}): {len(ops)} "
                              f"device task(s) of {len(op_names)} kernel(s), no framework metadata, model id or "
                              "step: an operator test (kernel development)")
    if op_api and native:
        return "unknown", (f"single-op API {op_api} called by the native program '{app}', not a Python framework: "
                           "the execution context cannot be told")
    if op_api:
        return "torch-eager", f"single-op launch API {op_api} without framework metadata (eager op execution)"
    if hit := _prefixed(op_names, ("aclnn",)):
        return "torch-eager", f"aclnn kernel names ('{_short(hit)}') without framework metadata (eager op execution)"
    if model_ids:
        return "om-acl", ("device tasks carry a model id (graph execution) and no framework markers: assumed an "
                          "offline model run through ACL")
    return "unknown", "no API records, framework metadata or model ids tell the execution context"


def _own_op_api(apis: list[str], ops: pd.DataFrame, s: Mapping[str, Any]) -> str | None:
    """The single-op API of a captured kernel when every aclnn API of the profile is one of the captured op types'
    own (``aclnn<OpType>`` and its ``GetWorkspaceSize``/``Tiling`` companions); None otherwise."""
    types = set(_names(ops["type"])) if "type" in ops.columns else set()
    op_apis = {a for a in apis if a.startswith(tuple(s["eager_api_prefixes"]))}
    if not types or not op_apis:
        return None
    suffixes = tuple(s["op_api_suffixes"])

    def op_of(api: str) -> str | None:
        base = api.removeprefix("aclnn") if api.startswith("aclnn") else ""
        candidates = (base, *(base.removesuffix(x) for x in suffixes if base.endswith(x)))
        return next((c for c in candidates if c and c in types), None)

    if any(op_of(a) is None for a in op_apis):
        return None
    return min(op_apis, key=lambda a: (a.removeprefix("aclnn") not in types, a))


def _kernel_capture(ops: pd.DataFrame, op_names: list[str]) -> bool:
    """Nothing a framework run would have: no step ids, no communication tasks, no GE-inserted conversions."""
    if "step" in ops.columns and ops["step"].notna().any():
        return False
    cores = set(_names(ops["core"])) if "core" in ops.columns else set()
    if cores & {"HCCL", "COMMUNICATION"}:
        return False
    return not any(n.startswith("trans_") for n in op_names)


def _mindspore(profile: Profile, s: Mapping[str, Any], event_names: list[str], op_names: list[str],
               why: str | None = None) -> tuple[str, str]:
    meta = profile.meta
    why = why or (f"{meta.framework} profile" if meta.framework else f"{meta.layout} layout")
    config_values = [str(v) for v in _flatten(meta.config)]
    marker = _containing(event_names + config_values, s["mindspore_pynative_markers"])
    if marker:
        return "mindspore-pynative", f"{why}; PyNative marker '{_short(marker)}'"
    rx = re.compile(s["mindspore_name_regex"])
    if any(rx.match(n) for n in op_names[:2000]):
        return "mindspore-graph", f"{why}; scoped graph op names (...-opN): graph mode"
    return "mindspore-graph", f"{why}; no PyNative markers: graph mode assumed"


def _flatten(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _flatten(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _flatten(v)
    else:
        yield value


def _short(text: str, width: int = 60) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def apply(profile: Profile) -> None:
    """Set ``meta.context`` and ``meta.context_evidence`` from the profile (called once at ingest)."""
    profile.meta.context, profile.meta.context_evidence = detect(profile)


def cann_from_graph(graph: ModelGraph) -> str | None:
    """The CANN release an OM was built with, from its ``opp_version`` / ``atc_version`` attributes."""
    for key in ("opp_version", "atc_version"):
        raw = graph.attrs.get(key)
        if isinstance(raw, Mapping):
            raw = raw.get("s")
        if not raw:
            continue
        text = str(raw).strip()
        for rx, release in _OPP_CANN:
            if rx.match(text):
                return release
        m = re.match(r"^(\d+)\.(\d+)(?:\.(RC\d+|\d+|alpha\d+|beta\d+))?", text, re.I)
        if m and int(m.group(1)) >= 5:
            return text
    return None


def refine_with_graph(meta: Meta, graph: ModelGraph | None) -> None:
    """What the model graph adds: an OM JSON (or an ONNX model audited for ATC) is an offline model; the OM's
    recorded CANN version fills a profile that has none."""
    if graph is None:
        return
    cann = cann_from_graph(graph)
    if cann and not _specific(meta.cann_version):
        meta.cann_version = cann
        meta.notes.append(f"CANN {cann} taken from the model graph ({graph.format} opp_version/atc_version)")
    offline = graph.format == "om-json" or (graph.format == "onnx" and meta.layout == "static-audit")
    what = ("OM JSON (atc --mode=1) model graph" if graph.format == "om-json"
            else "ONNX model audited for ATC conversion")
    if not offline:
        return
    if meta.context in (None, "", "unknown"):
        meta.context, meta.context_evidence = "om-acl", f"{what}: an offline model deployed through ATC and ACL"
    elif meta.context == "om-acl":
        meta.context_evidence = f"{meta.context_evidence}; {what}"
    else:
        meta.notes.append(f"the model graph is an {what}, but the profile says {meta.context} "
                          f"({meta.context_evidence}); the profile's context is kept")


def _specific(version: str | None) -> bool:
    """A version with at least major.minor (``8.x (header V3)`` is only a family)."""
    return bool(version and re.match(r"^\d+\.\d+", str(version)))


__all__ = ["CONTEXTS", "apply", "cann_from_graph", "detect", "refine_with_graph"]
