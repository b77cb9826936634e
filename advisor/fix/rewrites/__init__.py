"""Registry of ONNX rewrites, by stable id (the ``rule`` of an ``onnx-rewrite`` fix in a report)."""

from __future__ import annotations

from advisor.fix.rewrites import (
    aipp_preprocess,
    bn_fold,
    gelu_fuse,
    mish_to_leakyrelu,
    remove_roundtrips,
    swish_fuse,
)
from advisor.fix.rewrites.base import Param, Rewrite, RewriteResult

REWRITES: dict[str, Rewrite] = {
    m.REWRITE.name: m.REWRITE
    for m in (mish_to_leakyrelu, gelu_fuse, swish_fuse, bn_fold, remove_roundtrips, aipp_preprocess)
}


def get(name: str) -> Rewrite:
    """The rewrite called ``name`` (KeyError when unknown)."""
    return REWRITES[name]


def names() -> list[str]:
    return list(REWRITES)


__all__ = ["REWRITES", "Param", "Rewrite", "RewriteResult", "get", "names"]
