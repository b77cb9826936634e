"""Advice fitted to the run: which framework the execution context belongs to, the advice text a rules file keeps
per framework, and whether an ATC option exists for the run's CANN release and chip.

A fix must be one the user can apply to what they run (``profile.meta.context``, :mod:`advisor.ingest.context`):
a torch_npu API only for torch runs, a MindSpore API only for MindSpore, an ``atc`` option only where ATC builds
the model. Rules files keep such texts as a mapping ``{default: ..., torch: ..., mindspore: ..., om: ...}`` and
:func:`for_run` picks the one for the run's family.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

from advisor.kb import AnalysisContext
from advisor.platform import cann_release, is_assumed, native_kernel

FAMILY_OF = {"torch-eager": "torch", "torch-graph": "torch", "mindspore-graph": "mindspore",
             "mindspore-pynative": "mindspore", "om-acl": "om", "kernel-dev": "kernel-dev", "unknown": "unknown"}
"""Execution context -> the family whose APIs and tools its advice may name."""
OP_BY_OP_CONTEXTS = ("torch-eager", "mindspore-pynative")
"""Contexts that launch the op-by-op (aclnn) kernels, whose op set differs from ATC's per chip."""


def context_of(ctx: AnalysisContext) -> str:
    """The run's execution context (``unknown`` when ingest could not tell)."""
    return str(ctx.profile.meta.context or "unknown")


def family(ctx: AnalysisContext) -> str:
    """``torch``, ``mindspore``, ``om`` (an offline model built by ATC), ``kernel-dev`` or ``unknown``. A graph
    that records its ``atc`` command line makes an undecided run an offline model."""
    fam = FAMILY_OF.get(context_of(ctx), "unknown")
    if fam == "unknown" and ctx.graph is not None and ctx.graph.attrs.get("atc_cmdline"):
        return "om"
    return fam


def for_run(texts: Mapping[str, Any] | None, fam: str) -> Any:
    """The entry of ``texts`` for family ``fam``, else its ``default``; None when it has neither."""
    if not texts:
        return None
    return texts[fam] if fam in texts else texts.get("default")


@lru_cache(maxsize=1)
def _atc_options() -> Mapping[str, Any]:
    from advisor.config.loader import builtin_rules_dir, load_rules_file

    return load_rules_file(builtin_rules_dir() / "atc-options.yaml")["options"]


def _soc_in(soc: str | None, globs: Any) -> bool:
    return bool(soc) and any(fnmatch.fnmatchcase(str(soc).upper(), str(g).upper()) for g in globs or ())


def atc_option_fits(option: str, cann_version: object, soc: str | None, dynamic: bool | None
                    ) -> tuple[bool | None, str]:
    """Whether ``atc --<option>`` applies to this run (``rules/atc-options.yaml``: first CANN release, SoCs,
    dynamic-shape only). True: it does; False: it does not, and why; None: the CANN release is unknown, and the
    assumption to state."""
    spec = _atc_options().get(option)
    if spec is None:
        return None, f"--{option} is not in advisor's ATC option table"
    if spec.get("dynamic_only") and dynamic is False:
        return False, f"--{option} acts only on dynamic-shape graphs"
    if _soc_in(soc, spec.get("not_socs")) or (spec.get("socs") and soc and not _soc_in(soc, spec.get("socs"))):
        return False, f"--{option} is not available on {soc}"
    since = str(spec["since"])
    need, have = cann_release(since), cann_release(cann_version)
    if have is None:
        return None, f"--{option} needs CANN {since} or later (the CANN version of this run is unknown)"
    if need is not None and have < need:
        return False, f"CANN {cann_version} predates --{option} (CANN {since})"
    return True, ""


def native_kernel_for_run(ctx: AnalysisContext, op: str, aclnn_socs: Any, soc: str | None
                          ) -> tuple[bool | None, str]:
    """Whether the kernels this run uses have a native ``op`` on its chip, and why.

    Eager runs (:data:`OP_BY_OP_CONTEXTS`) use the aclnn kernels: ``aclnn_socs`` (SoC globs) says where those have
    it. Offline and graph-mode models use the ATC op set of the chip at the run's CANN release
    (``rules/platforms.yaml`` ``native_ops``, :func:`advisor.platform.native_kernel`: None when the release is
    unknown); ``aclnn_socs`` stands in when the chip's op set is not known. None without a detected SoC.
    """
    if soc is None:
        return None, "SoC not detected"
    context = context_of(ctx)
    if context in OP_BY_OP_CONTEXTS:
        has = _soc_in(soc, aclnn_socs)
        return has, (f"the op-by-op (aclnn) kernels of a {context} run {'have' if has else 'have no'} a native "
                     f"{op} on {soc}")
    platform = ctx.platform
    table = platform.get("native_ops")
    if table is not None and not is_assumed(platform) and (op in table or not table):
        return native_kernel(platform, op, ctx.profile.meta.cann_version)
    has = _soc_in(soc, aclnn_socs)
    return has, f"{soc} {'has' if has else 'has no'} native {op} kernel (rules native_socs)"


def native_since(ctx: AnalysisContext, op: str) -> str | None:
    """The first CANN release whose ATC op set has ``op`` for the run's chip (``rules/platforms.yaml``)."""
    entry = (ctx.platform.get("native_ops") or {}).get(op)
    return str(entry["since_cann"]) if entry else None


__all__ = ["FAMILY_OF", "OP_BY_OP_CONTEXTS", "atc_option_fits", "context_of", "family", "for_run",
           "native_kernel_for_run", "native_since"]
