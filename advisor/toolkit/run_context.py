"""Advice for the run, continued: whether a rule applies to the run's context, the note when it does not, the sentence
that states the assumption when the context is unknown, and what the chip and the recorded environment allow.

The execution context and its framework family come from :mod:`advisor.toolkit.advice` (one mapping for every
knowledge base); this module adds what the host-side knowledge bases need on top of it, so that torch_npu settings
reach PyTorch runs only, MindSpore options MindSpore runs, ACL calls offline-model applications, and a
kernel-development capture gets nothing about dispatch.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from advisor.kb import AnalysisContext
from advisor.platform import supports_dtype
from advisor.toolkit.advice import context_of, family  # family: torch / mindspore / om / kernel-dev / unknown

TORCH = "torch"
MINDSPORE = "mindspore"
OM = "om"
"""An offline model (ATC-built ``.om``) run by an ACL application."""
KERNEL = "kernel-dev"
UNKNOWN = "unknown"


def applies(ctx: AnalysisContext, contexts: Iterable[str]) -> bool:
    """Whether the run's context is one of ``contexts`` (a rules-file list)."""
    return context_of(ctx) in set(contexts)


def skip_note(ctx: AnalysisContext, what: str) -> None:
    """Say in the report that ``what`` was not assessed for this context."""
    context = context_of(ctx)
    why = ("a kernel-development capture: idle time between test launches is the harness's, not the kernel's"
           if context == "kernel-dev" else f"it does not apply to {a_run(context)}")
    ctx.note(f"{what}: not assessed, {why}")


def a_run(context: str) -> str:
    """``a torch-eager run`` / ``an om-acl run`` / ``a run of unknown context``."""
    if context == "unknown":
        return "a run of unknown context"
    return f"{'an' if context[:1] in 'aeiou' else 'a'} {context} run"


def unknown_context(ctx: AnalysisContext) -> str:
    """The sentence that states the assumption when the context is unknown ("" otherwise)."""
    if family(ctx) != UNKNOWN:
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


__all__ = ["KERNEL", "MINDSPORE", "OM", "TORCH", "UNKNOWN", "a_run", "applies", "context_of", "env_value", "family",
           "half_dtype", "skip_note", "unknown_context"]
