"""Operator-level advice fitted to the run: what tuning, fusing or batching looks like in this execution context.

The same problem has a different fix per flow (``profile.meta.context``): an offline model is rebuilt by ATC and
tuned by the ``aoe`` command line, a torchair graph by ``AOE_MODE``, a MindSpore job through its context, a torch
eager job through ``torch_npu`` (and only for static-shape operators), a kernel under development by its own
tiling; a SoC toolchain has no AOE at all (``advisor.platform.has_tool``). These helpers return the sentence and
the typed fix for one context, or None where the flow has no such thing, so a knowledge base never names a tool,
API or dtype that does not apply to the run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from advisor.findings import Fix
from advisor.kb import AnalysisContext
from advisor.platform import has_tool, short_dtype, supports_dtype
from advisor.toolkit.advice import context_of, family
from advisor.toolkit.graph_patterns import atc_cmdline, atc_option

MAX_FIX_OPS = 50
"""Ops listed in a fix's data (the finding names them all)."""


@dataclass(frozen=True)
class Advice:
    text: str
    """One or two sentences, starting with a capital, ending with a period."""
    fix: Fix | None = None


def operator_tuning(ctx: AnalysisContext, ops: Sequence[str], dynamic: bool = False) -> Advice | None:
    """AOE operator tuning of ``ops`` the way this run's flow has it, or None where it has none: a toolchain
    without AOE (SoC), a kernel under development (its author tunes the tiling), or torch eager ops that are all
    dynamic-shape (AOE tunes static operators only there). ``dynamic``: every one of ``ops`` runs a dynamic-shape
    kernel."""
    if not has_tool(ctx.platform, "aoe"):
        return None
    names = list(ops)[:MAX_FIX_OPS]
    flow = context_of(ctx)
    if flow == "om-acl" or (flow == "unknown" and family(ctx) == "om"):
        cmd = atc_cmdline(ctx.graph)
        framework = atc_option(cmd, "framework") or "<n>"
        model = atc_option(cmd, "model") or "<the model given to atc>"
        command = f"aoe --framework={framework} --model={model} --job_type=2"
        return Advice(f"Tune them with AOE operator tuning of the model ({command}, with the other options of "
                      "its atc build); ATC then builds the model with the tuned repository.",
                      Fix("config", "AOE operator tuning of the model", {"tool": "aoe", "job_type": 2, "ops": names},
                          command))
    if flow == "torch-graph":
        return Advice("Tune them with AOE operator tuning in the torchair run (AOE_MODE=2 in its environment).",
                      Fix("env", "AOE operator tuning of the torchair graph", {"AOE_MODE": "2", "ops": names},
                          "export AOE_MODE=2"))
    if flow == "torch-eager":
        if dynamic:
            return None
        return Advice("Tune them with AOE operator tuning: torch_npu.npu.set_aoe(dump_path) (beta) dumps their "
                      "graphs during a step, then AOE tunes the dump offline (--job_type=2).",
                      Fix("code", "dump the operators for AOE operator tuning (static-shape operators only)",
                          {"snippet": 'torch_npu.npu.set_aoe("./aoe_dump")  # before the step to tune', "ops": names}))
    if family(ctx) == "mindspore":
        return Advice("Tune them with AOE operator tuning in the MindSpore run "
                      '(mindspore.device_context.ascend.op_tuning.aoe_tune_mode("online") in MindSpore 2.5 and '
                      'later, set_context(aoe_tune_mode="online") before).',
                      Fix("code", "AOE operator tuning of the MindSpore graph",
                          {"snippet": 'mindspore.device_context.ascend.op_tuning.aoe_tune_mode("online")',
                           "ops": names}))
    if flow == "kernel-dev":
        return None
    return Advice("Tune them with AOE operator tuning in the flow that built them (aoe --job_type=2 for an ATC "
                  "model, AOE_MODE=2 for a framework graph).")


def fuse(ctx: AnalysisContext) -> str:
    """How ops get fused with their neighbours in this flow (a sentence fragment, no period)."""
    return {
        "om-acl": "let ATC fuse them with their neighbours (UB fusion; the ub-fusion findings say which fusions "
                  "are off)",
        "torch-eager": "fuse them with their neighbours: a torch_npu fused operator for the pattern, or graph mode "
                       "(torchair) so the graph compiler fuses them",
        "torch-graph": "check why the graph compiler leaves them unfused (fusion switches, dynamic shapes)",
        "mindspore-graph": "let the graph fuse them (graph-kernel fusion: jit_level O1)",
        "mindspore-pynative": "run the step in graph mode (mindspore.jit) so the graph compiler fuses them",
        "kernel-dev": "keep the intermediates in UB: one kernel for the chain instead of one per op",
    }.get(context_of(ctx), "fuse them with their neighbours")


def more_work_per_kernel(ctx: AnalysisContext) -> str:
    """How to give each launched kernel more work in this flow (a sentence fragment, no period)."""
    return {
        "om-acl": "build the model for a larger batch (atc --input_shape with a bigger N, or --dynamic_batch_size "
                  "gears) and let ATC fuse the small ops",
        "torch-eager": "a larger batch, fused torch_npu operators, or graph mode (torchair) so small ops fuse",
        "torch-graph": "a larger batch, and fewer graph breaks so small ops fuse",
        "mindspore-graph": "a larger batch and graph-kernel fusion (jit_level O1)",
        "mindspore-pynative": "a larger batch, and graph mode (mindspore.jit) for the step",
        "kernel-dev": "a larger problem per launch: the kernel's fixed cost (launch, head and tail) dominates",
    }.get(context_of(ctx), "a larger batch and fused small ops")


def smaller_dtype(ctx: AnalysisContext, dtype: str) -> str:
    """The 16-bit dtypes this chip offers instead of ``dtype`` (``fp16`` / ``fp16 or bf16``), ``""`` when the op
    is not 32-bit or the chip has none."""
    if short_dtype(dtype) not in ("fp32", "int32"):
        return ""
    have = [d for d in ("fp16", "bf16") if supports_dtype(ctx.platform, d)]
    return " or ".join(have)


__all__ = ["MAX_FIX_OPS", "Advice", "fuse", "more_work_per_kernel", "operator_tuning", "smaller_dtype"]
