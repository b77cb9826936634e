"""Environment knowledge base: environment variables with a known performance cost.

torch_npu (and MindSpore's profiler) record a set of environment variables in ``profiler_metadata.json``
(``meta.environment``). Some values cost time on every step (synchronous launches, debug logging, a disabled task
queue or allocator cache), others only matter for communication, memory or precision. Each variable, the contexts
it applies to (torch_npu variables only for PyTorch runs), its condition, recommended value and reason live in
``rules/environment.yaml``; settings that slow host dispatch get a saving out of the device's free time, attributed
to the ``(free time)`` pseudo-op so the overall KB's free-time symptom folds under them and the score counts the
idle time once.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from typing import Any

from advisor import hookimpl
from advisor.findings import Finding, Fix
from advisor.kb import AnalysisContext, KnowledgeBase, RuleDoc, rule
from advisor.model import EventSelection, Profile
from advisor.toolkit import run_context as rc
from advisor.toolkit.common import severity_for
from advisor.toolkit.free_time import within_free_time
from advisor.toolkit.time import FREE_TIME_KEY, isin_mask

_KEYS = ("variables", "severity", "confidence")
CATEGORY_TITLES = {
    "debug": "debug setting left on",
    "dispatch": "host dispatch setting",
    "memory": "allocator setting",
    "communication": "HCCL setting",
    "precision": "precision mode setting",
}


def _number(value: str) -> float | None:
    try:
        return float(value)
    except ValueError:
        return None


def matches(value: str, spec: Mapping[str, Any]) -> bool:
    """Whether a recorded value meets the variable's condition (an empty value is 'unset')."""
    text = value.strip()
    if not text:
        return bool(spec.get("unset_matches"))
    if "equals" in spec:
        return text.lower() in {str(v).strip().lower() for v in spec["equals"]}
    if "less_than" in spec:
        num = _number(text)
        return num is not None and num < float(spec["less_than"])
    if "missing_token" in spec:
        token = str(spec["missing_token"]).replace(" ", "").lower()
        return token not in text.replace(" ", "").lower()
    return bool(spec.get("is_set"))


def has_communication(profile: Profile, comm_cores: list[str]) -> bool:
    if len(profile.comm):
        return True
    ops = profile.ops
    return bool(len(ops)) and bool(isin_mask(ops["core"], comm_cores).any())


def dynamic_share(profile: Profile) -> float | None:
    """Share of ops whose OP State is dynamic; None when the profile does not record it."""
    ops = profile.ops
    if not len(ops) or ops["op_state"].isna().all():
        return None
    known = ops["op_state"].notna().to_numpy()
    dynamic = isin_mask(ops["op_state"], ["dynamic", "Dynamic", "DYNAMIC"])
    return float(dynamic[known].mean())


class EnvironmentKB(KnowledgeBase):
    id = "environment"
    title = "Environment variables"
    version = "2.0.0"
    api_version = "1.5"
    requires = ("meta",)
    ops_columns = ()
    events_read = EventSelection()
    rules_file = "environment"

    @rule(RuleDoc(
        id="environment.debug",
        explains={
            "overall.free-time": "debug settings serialize dispatch (synchronous launches, extra checks): unsetting them removes the idle time they add",
        },
        title="Debug settings left on",
        what="Flags debug settings recorded in the profile: ASCEND_LAUNCH_BLOCKING set (synchronous launches; "
             "PyTorch runs), ASCEND_GLOBAL_LOG_LEVEL below {variables.ASCEND_GLOBAL_LOG_LEVEL.less_than} "
             "(debug/info logging), ASCEND_SLOG_PRINT_TO_STDOUT=1, ASCEND_GLOBAL_EVENT_ENABLE=1. Saving: the "
             "variable's free_time_fraction of the device's free time.",
        why="They add host work to every op launch (or make every launch wait for the device), which shows as "
            "device idle time.",
        how_to_fix="Unset ASCEND_LAUNCH_BLOCKING, set ASCEND_GLOBAL_LOG_LEVEL={variables.ASCEND_GLOBAL_LOG_LEVEL."
                   "set_to}, keep logs in files (ASCEND_SLOG_PRINT_TO_STDOUT=0) and event logging off, outside "
                   "debugging sessions.",
        thresholds=_KEYS, needs=("meta", "steps"),
    ))
    @rule(RuleDoc(
        id="environment.dispatch",
        explains={
            "overall.free-time": "dispatch settings (task queue, core binding) pipeline the host's launches: the idle gaps they shorten go",
        },
        title="Host dispatch settings",
        what="Flags, on PyTorch runs, TASK_QUEUE_ENABLE=0, ACLNN_CACHE_LIMIT below "
             "{variables.ACLNN_CACHE_LIMIT.less_than}, HOST_CACHE_CAPACITY unset or 0 when at least "
             "{dynamic_shape_share} of the ops are dynamic; on any run ACL_OP_COMPILER_CACHE_MODE disable/force. "
             "Saving: the variable's free_time_fraction of the free time.",
        why="Each makes the host recompute or serialize work it could cache or pipeline, so the device waits.",
        how_to_fix="TASK_QUEUE_ENABLE={variables.TASK_QUEUE_ENABLE.set_to}, ACLNN_CACHE_LIMIT at least "
                   "{variables.ACLNN_CACHE_LIMIT.less_than}, HOST_CACHE_CAPACITY="
                   "{variables.HOST_CACHE_CAPACITY.set_to} for dynamic shapes, ACL_OP_COMPILER_CACHE_MODE="
                   "{variables.ACL_OP_COMPILER_CACHE_MODE.set_to}.",
        thresholds=(*_KEYS, "dynamic_shape_share"), needs=("meta", "steps", "ops"),
    ))
    @rule(RuleDoc(
        id="environment.memory",
        title="Allocator settings",
        what="On PyTorch runs, flags PYTORCH_NO_NPU_MEMORY_CACHING=1 (saving: its free_time_fraction of the free "
             "time) and PYTORCH_NPU_ALLOC_CONF without expandable_segments:True (a hint, no saving of its own).",
        why="Without the caching allocator every allocation calls the device runtime; without expandable segments "
            "the cache fragments, peak memory rises and the allocator falls back to freeing and reallocating "
            "device memory.",
        how_to_fix="Unset PYTORCH_NO_NPU_MEMORY_CACHING; export PYTORCH_NPU_ALLOC_CONF=expandable_segments:True.",
        thresholds=_KEYS, needs=("meta",),
    ))
    @rule(RuleDoc(
        id="environment.communication",
        title="HCCL settings",
        what="On profiles with communication, flags HCCL_ALGO set, HCCL_BUFFSIZE below "
             "{variables.HCCL_BUFFSIZE.less_than} MB, HCCL_DETERMINISTIC=true, HCCL_OP_EXPANSION_MODE=AI_CPU "
             "(communication not profiled), HCCL_RDMA_TC / HCCL_RDMA_SL set (must match the network's QoS). "
             "Hints, no saving.",
        why="They override HCCL's topology-aware choices or restrict it; a wrong value lowers bandwidth.",
        how_to_fix="Unset them unless a benchmark on this cluster shows a gain; set the RDMA values from the "
                   "switch/NIC configuration.",
        thresholds=_KEYS, needs=("meta", "comm"),
    ))
    @rule(RuleDoc(
        id="environment.precision",
        title="Precision mode settings",
        what="Flags INF_NAN_MODE_ENABLE=0 (saturation mode) on A2/A3 chips "
             "({variables.INF_NAN_MODE_ENABLE.only_if.socs}).",
        why="Saturation mode is kept on A2/A3 only for compatibility and is not developed further.",
        how_to_fix="Keep INF_NAN_MODE_ENABLE={variables.INF_NAN_MODE_ENABLE.set_to} (the default).",
        thresholds=_KEYS, needs=("meta",),
    ))
    def variables(self, ctx: AnalysisContext) -> list[Finding]:
        """One finding per recorded variable whose value costs time (or is worth a hint) in this run."""
        env = ctx.profile.meta.environment
        if not env:
            ctx.note("environment: skipped, the profile records no environment variables "
                     "(profiler_metadata.json ENV_VARIABLES)")
            return []
        findings: list[Finding] = []
        for var, spec in ctx.rules["variables"].items():
            if var not in env or not matches(env[var], spec):
                continue
            if not rc.applies(ctx, spec["contexts"]):
                ctx.note(f"environment: {var}={env[var]!r} not assessed, it does not apply to "
                         f"{rc.a_run(rc.context_of(ctx))}")
                continue
            gate = self._gate(ctx, spec)
            if gate is not None:
                if gate:
                    ctx.note(f"environment: {var}={env[var]!r} not assessed ({gate})")
                continue
            findings.append(self._finding(ctx, var, env[var], spec))
        t = ctx.profile.time  # settings that slow dispatch share the free time: together at most all of it
        return within_free_time(findings, t.free_us, t.window_us, ctx.rules["severity"])

    @staticmethod
    def _gate(ctx: AnalysisContext, spec: Mapping[str, Any]) -> str | None:
        """None when the variable applies to this profile; a reason (or "" to stay silent) when it does not."""
        only = spec.get("only_if")
        if only is None:
            return None
        if only == "communication":
            return None if has_communication(ctx.profile, ctx.rules["comm_cores"]) else ""
        if only == "dynamic_shape":
            share = dynamic_share(ctx.profile)
            if share is None:
                return "the profile does not record OP State"
            return None if share >= float(ctx.rules["dynamic_shape_share"]) else ""
        if isinstance(only, Mapping) and only.get("socs"):
            chip = ctx.profile.meta.chip
            if not chip:
                return "the chip is unknown"
            return None if any(fnmatch.fnmatch(chip.lower(), p.lower()) for p in only["socs"]) else ""
        return None

    @staticmethod
    def _finding(ctx: AnalysisContext, var: str, value: str, spec: Mapping[str, Any]) -> Finding:
        t = ctx.profile.time
        free, total = t.free_us, t.window_us
        override = (spec.get("by_value") or {}).get(value.strip(), {})
        fraction = float(override.get("free_time_fraction", spec["free_time_fraction"]))
        saving = fraction * free
        base = override.get("severity", spec["severity"])
        severity = severity_for(saving / total, ctx.rules["severity"]) if saving > 0 and total > 0 else base
        category = str(spec["category"])
        shown = value if value.strip() else "(unset)"
        recommended = str(spec["recommended"])
        if saving > 0:
            basis = f"{fraction:g} of the device's free time ({free / 1000:.2f} ms; free_time_fraction)"
        elif fraction > 0:
            basis = "no free time measured in this profile: nothing to recover"
        else:
            basis = "no time estimate: the cost depends on memory, network or precision, not on this profile's timing"
        conf = ctx.rules["confidence"]
        return ctx.finding(
            rule=f"environment.{category}",
            title=f"{var}={shown}: {CATEGORY_TITLES.get(category, category)}",
            severity=severity, ops=[],
            evidence={"variable": var, "value": value, "recommended": recommended, "condition": _condition(spec),
                      "contexts": list(spec["contexts"]), "free_us": free, "window_us": total,
                      "free_time_fraction": fraction,
                      "recorded": dict(sorted(ctx.profile.meta.environment.items()))},
            estimated_saving_us=saving, basis=basis,
            recommendation=rc.unknown_context(ctx) + f"Set {var} to {recommended}. {spec['why']}",
            fix=_fix(var, spec), confidence=float(conf["with_saving" if saving > 0 else "hint"]),
            saving_by_op={FREE_TIME_KEY: saving} if saving > 0 else None)


def _fix(var: str, spec: Mapping[str, Any]) -> Fix:
    """``set_to``: a value to export, None to unset; absent: configure by hand (e.g. match the network)."""
    if "set_to" not in spec:
        return Fix("config", f"{var}: {spec['recommended']}", {"variable": var})
    value = spec["set_to"]
    if value is None:
        return Fix("env", f"unset {var}", {"unset": [var]}, f"unset {var}")
    return Fix("env", f"{var}={value}", {"env": {var: str(value)}}, f"export {var}={value}")


def _condition(spec: Mapping[str, Any]) -> str:
    for key in ("equals", "less_than", "missing_token", "is_set"):
        if key in spec:
            value = spec[key]
            text = {"equals": f"one of {value}", "less_than": f"below {value}",
                    "missing_token": f"without {value!r}", "is_set": "set"}[key]
            return text + (" or unset" if spec.get("unset_matches") else "")
    return ""


@hookimpl
def advisor_knowledge_bases() -> list[type[KnowledgeBase]]:
    return [EnvironmentKB]
