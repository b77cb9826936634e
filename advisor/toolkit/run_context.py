"""The run a piece of advice is for: execution context, framework family, and what the chip allows.

Advice must fit what the user runs (issue 13.3): torch_npu settings only for PyTorch, MindSpore options only for
MindSpore, ACL calls for an offline-model application, nothing about dispatch for a kernel-development capture.
Knowledge bases ask here instead of testing context strings themselves, and say once, in the same words, when the
context is unknown and the advice is general.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from advisor.kb import AnalysisContext
from advisor.platform import supports_dtype

TORCH = "torch"
MINDSPORE = "mindspore"
ACL = "acl"
KERNEL = "kernel"
UNKNOWN = "unknown"

_FAMILY = {"torch-eager": TORCH, "torch-graph": TORCH, "mindspore-graph": MINDSPORE,
           "mindspore-pynative": MINDSPORE, "om-acl": ACL, "kernel-dev": KERNEL}


def context_of(ctx: AnalysisContext) -> str:
    """``profile.meta.context`` (``unknown`` when not detected)."""
    return str(ctx.profile.meta.context or "unknown")


def family(context: str) -> str:
    """``torch`` / ``mindspore`` / ``acl`` / ``kernel`` / ``unknown`` for a context id."""
    return _FAMILY.get(context, UNKNOWN)


def family_of(ctx: AnalysisContext) -> str:
    return family(context_of(ctx))


def applies(ctx: AnalysisContext, contexts: Iterable[str]) -> bool:
    """Whether the run's context is one of ``contexts`` (a rules-file list)."""
    return context_of(ctx) in set(contexts)


def skip_note(ctx: AnalysisContext, what: str) -> None:
    """Say in the report that ``what`` was not assessed for this context."""
    context = context_of(ctx)
    why = ("a kernel-development capture: idle time between test launches is the harness's, not the kernel's"
           if context == "kernel-dev" else f"it does not apply to a {context} run")
    ctx.note(f"{what}: not assessed, {why}")


def unknown_context(ctx: AnalysisContext) -> str:
    """The sentence that states the assumption when the context is unknown ("" otherwise)."""
    if context_of(ctx) != "unknown":
        return ""
    evidence = ctx.profile.meta.context_evidence
    return ("The profile does not show how the model runs (framework or ACL application"
            + (f"; {evidence}" if evidence else "") + "), so this advice is general. ")


def half_dtype(platform: Mapping[str, Any]) -> str:
    """The 16-bit dtype advice may name on this chip: bf16 where the chip has it, else fp16."""
    return "bf16" if supports_dtype(platform, "bf16") else "fp16"


def env_value(ctx: AnalysisContext, var: str) -> str | None:
    """A recorded environment variable (None when the profile does not record it)."""
    env = ctx.profile.meta.environment or {}
    return str(env[var]).strip() if var in env else None


__all__ = ["ACL", "KERNEL", "MINDSPORE", "TORCH", "UNKNOWN", "applies", "context_of", "env_value", "family",
           "family_of", "half_dtype", "skip_note", "unknown_context"]
