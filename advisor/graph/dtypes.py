"""The data-type numberings found in graph dumps, each in one table.

GE uses two different integer codes for the same types, and mixing them up silently turns a Cast to
float16 into a Cast to int8:

- ``PROTO_DTYPES``: the ``ge.proto.DataType`` enum (ge_ir.proto). Tensor descriptors carry it: by name in
  OM JSON (``"dtype": "DT_FLOAT16"``), by name or number in protobuf text dumps.
- ``CPP_DTYPES``: the C++ ``ge::DataType`` enum (metadef ``inc/external/graph/types.h``). The ``dt`` /
  ``list.dt`` attribute values and integer attributes such as Cast ``dst_type``, ``SrcT``/``DstT`` and the
  ``dtype`` of Const/Variable/AscendDequant carry it (DOMAIN.md 1.3; checked against the descriptors of the
  Cast ops in the collected dumps).
- ONNX ``TensorProto.DataType`` (``elem_type``, Cast ``to``) comes from the onnx package itself.

Names are returned without the ``DT_`` prefix and canonicalized (``FLOAT16``, ``BF16``, ``INT64``...).
"""

from __future__ import annotations

from functools import lru_cache

from advisor.common.util import is_ascii_digits
from advisor.model import canonical_dtype

PROTO_DTYPES: dict[int, str] = {
    0: "UNDEFINED",
    1: "FLOAT",
    2: "FLOAT16",
    3: "INT8",
    4: "UINT8",
    5: "INT16",
    6: "UINT16",
    7: "INT32",
    8: "INT64",
    9: "UINT32",
    10: "UINT64",
    11: "BOOL",
    12: "DOUBLE",
    13: "STRING",
    14: "DUAL_SUB_INT8",
    15: "DUAL_SUB_UINT8",
    16: "COMPLEX64",
    17: "COMPLEX128",
    18: "QINT8",
    19: "QINT16",
    20: "QINT32",
    21: "QUINT8",
    22: "QUINT16",
    23: "RESOURCE",
    24: "STRING_REF",
    25: "DUAL",
    26: "VARIANT",
    27: "BF16",
    28: "INT4",
    29: "UINT1",
    30: "INT2",
    31: "UINT2",
    32: "COMPLEX32",
    33: "HIFLOAT8",
    34: "FLOAT8_E5M2",
    35: "FLOAT8_E4M3FN",
    36: "FLOAT8_E8M0",
    37: "FLOAT6_E3M2",
    38: "FLOAT6_E2M3",
    39: "FLOAT4_E2M1",
    40: "FLOAT4_E1M2",
}
"""``ge.proto.DataType`` (ge_ir.proto, newest torchair copy)."""

CPP_DTYPES: dict[int, str] = {
    0: "FLOAT",
    1: "FLOAT16",
    2: "INT8",
    3: "INT32",
    4: "UINT8",
    6: "INT16",
    7: "UINT16",
    8: "UINT32",
    9: "INT64",
    10: "UINT64",
    11: "DOUBLE",
    12: "BOOL",
    13: "STRING",
    14: "DUAL_SUB_INT8",
    15: "DUAL_SUB_UINT8",
    16: "COMPLEX64",
    17: "COMPLEX128",
    18: "QINT8",
    19: "QINT16",
    20: "QINT32",
    21: "QUINT8",
    22: "QUINT16",
    23: "RESOURCE",
    24: "STRING_REF",
    25: "DUAL",
    26: "VARIANT",
    27: "BF16",
    28: "UNDEFINED",
    29: "INT4",
    30: "UINT1",
    31: "INT2",
    32: "UINT2",
    33: "COMPLEX32",
    34: "HIFLOAT8",
    35: "FLOAT8_E5M2",
    36: "FLOAT8_E4M3FN",
    37: "FLOAT8_E8M0",
    38: "FLOAT6_E3M2",
    39: "FLOAT6_E2M3",
    40: "FLOAT4_E2M1",
    41: "FLOAT4_E1M2",
    42: "HIFLOAT4",
}
"""C++ ``ge::DataType`` (metadef ``types.h``); note the gap at 5 and UNDEFINED = 28."""

CPP_DTYPE_ATTRS = frozenset({"dst_type", "SrcT", "DstT", "dtype"})
"""Integer (``i``) attributes that hold a C++ ``ge::DataType`` number rather than a count or flag."""

ONNX_DTYPE_ATTRS = frozenset({"to", "dtype", "output_dtype"})
"""ONNX attributes holding a ``TensorProto.DataType`` number (Cast ``to``, RandomUniform ``dtype``...)."""


def _unknown(code: int) -> str:
    """A number no table knows (a newer CANN): kept visible rather than guessed."""
    return f"UNKNOWN_{code}"


@lru_cache(maxsize=4096)
def proto_dtype_name(value: object) -> str | None:
    """A descriptor dtype (enum name ``DT_FLOAT16`` or proto number 2) -> ``FLOAT16``; None when unset."""
    if value is None or value == "":
        return None
    if isinstance(value, str):
        text = value.strip()
        if is_ascii_digits(text.removeprefix("-")):
            value = int(text)
        else:
            name = canonical_dtype(text)
            return None if name == "UNDEFINED" else name
    code = int(value)  # type: ignore[call-overload]
    if code == 0:
        return None
    name = PROTO_DTYPES.get(code)
    return canonical_dtype(name) if name else _unknown(code)


@lru_cache(maxsize=4096)
def cpp_dtype_name(value: object) -> str:
    """A C++ ``ge::DataType`` number (``dt`` attr, Cast ``dst_type``) -> ``FLOAT16``."""
    if isinstance(value, str) and not is_ascii_digits(value.strip().removeprefix("-")):
        return canonical_dtype(value)
    code = int(value)  # type: ignore[call-overload]
    name = CPP_DTYPES.get(code)
    return canonical_dtype(name) if name else _unknown(code)


def onnx_dtype_name(value: int) -> str | None:
    """An ONNX ``TensorProto.DataType`` number (``elem_type``, Cast ``to``) -> ``FLOAT16`` (BFLOAT16 -> BF16)."""
    from onnx import TensorProto

    if not value:
        return None
    try:
        return canonical_dtype(TensorProto.DataType.Name(int(value)))
    except ValueError:
        return _unknown(int(value))
