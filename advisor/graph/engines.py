"""Which engine runs a graph op: read from the kernel-lib attribute, else inferred from what the op is.

Order of evidence (DOMAIN.md 1.5, 4): ``_ge_attr_op_kernel_lib_name``, then ``_lxfusion_op_kernel_lib_name``
(same values, present on older OMs that lack the first), then ``tvm_magic`` (the kernel binary kind), then
the op type for ops whose engine is fixed by what they are (Data/Const/NetOutput are GE-local, stream and
label ops are runtime ops, Hcom* are collectives, a few types exist only as AI CPU kernels). Otherwise
``UNKNOWN`` -- a Conv2D in a pre-build dump has no engine yet and we do not guess one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

KERNEL_LIB_ENGINES: dict[str, str] = {
    "AIcoreEngine": "AI_CORE",
    "VectorEngine": "AI_VECTOR_CORE",
    "aicpu_ascend_kernel": "AI_CPU",
    "aicpu_tf_kernel": "AI_CPU",
    "DNN_VM_GE_LOCAL_OP_STORE": "GE_LOCAL",
    "DNN_VM_RTS_OP_STORE": "RTS",
    "ops_kernel_info_hccl": "HCCL",
    "DNN_VM_HOST_CPU_OP_STORE": "HOST_CPU",
    "dvpp_ops_kernel": "DVPP",
}
"""``_ge_attr_op_kernel_lib_name`` value -> engine."""

TVM_MAGIC_ENGINES: dict[str, str] = {
    "RT_DEV_BINARY_MAGIC_ELF": "AI_CORE",
    "RT_DEV_BINARY_MAGIC_ELF_AICUBE": "AI_CORE",
    "RT_DEV_BINARY_MAGIC_ELF_AIVEC": "AI_VECTOR_CORE",
    "RT_DEV_BINARY_MAGIC_ELF_AICPU": "AI_CPU",
}
"""``tvm_magic`` (kernel binary kind, rt_kernel headers) -> engine."""

GE_LOCAL_TYPES = frozenset({
    "Data", "RefData", "AippData", "Const", "Constant", "NetOutput", "Variable", "VariableV2", "NoOp",
    "PlaceHolder", "End", "PartitionedCall",
})
RTS_TYPES = frozenset({
    "StreamActive", "StreamSwitch", "StreamSwitchN", "StreamMerge", "Send", "Recv", "SendNotify",
    "RecvNotify", "MemcpyAsync", "MemcpyAddrAsync", "LabelSet", "LabelGoto", "LabelGotoEx", "LabelSwitch",
    "LabelSwitchByIndex", "ModelExit", "EndGraph",
})
HCCL_PREFIXES = ("Hcom",)
AICPU_TYPES = frozenset({
    "Unique", "UniqueWithCounts", "UniqueV2", "NonZero", "NonZeroWithValue", "RandomUniform",
    "RandomUniformInt", "RandomStandardNormal", "TruncatedNormal", "Multinomial", "RandomShuffle",
    "RandomChoiceWithMask", "StatelessRandomUniform", "GetNext", "DynamicGetNext", "StringToNumber",
    "AsString", "LookupTableFind", "LookupTableInsert",
})
"""Types that only exist as AI CPU kernels (no AI Core implementation), so their engine is known without
the kernel-lib attribute -- e.g. Unique in the GE onnx dumps, which drop string attributes."""
HOST_CPU_SUFFIXES = ("HostCpuOp",)


def engine_from_kernel_lib(lib: object) -> str | None:
    """A kernel-lib name -> engine, None when absent or unknown."""
    if not lib or not isinstance(lib, str):
        return None
    return KERNEL_LIB_ENGINES.get(lib)


def engine_from_type(op_type: str) -> str | None:
    """The engine fixed by the op type alone, or None."""
    if op_type in GE_LOCAL_TYPES:
        return "GE_LOCAL"
    if op_type in RTS_TYPES:
        return "RTS"
    if op_type.startswith(HCCL_PREFIXES):
        return "HCCL"
    if op_type in AICPU_TYPES:
        return "AI_CPU"
    if op_type.endswith(HOST_CPU_SUFFIXES):
        return "HOST_CPU"
    return None


def infer_engine(op_type: str, attrs: Mapping[str, Any]) -> str:
    """The engine of one op from its decoded attributes and type (see module doc for the order)."""
    engine = engine_from_kernel_lib(attrs.get("_ge_attr_op_kernel_lib_name")) or engine_from_kernel_lib(
        attrs.get("_lxfusion_op_kernel_lib_name")
    )
    if engine:
        return engine
    magic = attrs.get("tvm_magic")
    if isinstance(magic, str) and magic in TVM_MAGIC_ENGINES:
        return TVM_MAGIC_ENGINES[magic]
    return engine_from_type(op_type) or "UNKNOWN"
