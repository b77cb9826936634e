"""aipp-preprocess: remove the input preprocessing that static AIPP performs, so ATC's AIPP does it once.

What it does, on the main graph, for each model input: follows the input through the ops AIPP takes over -- a
``Cast`` (uint8 -> float), a ``Transpose`` NHWC -> NCHW and per-channel affine ops (``Sub``/``Add``/``Mul``/``Div``
by a constant of one value per channel or one value) -- as long as each intermediate tensor has no other reader,
and removes them. The model input keeps its name and becomes the float NCHW tensor those ops produced; its
readers read it directly. Channel swaps (Gather, Split+Concat, Slice) stop the walk: set ``rbuv_swap_switch`` in
the AIPP config instead.

Why: with ``atc --insert_op_conf=aipp.cfg`` the OM takes the uint8 NHWC image and AIPP converts, normalizes and
reorders it inside the first convolution (TbeAippConv* fusion). Built from the original model, the OM would
convert and normalize twice. The ``aipp.cfg`` of ``advisor analyze --graph model.onnx`` carries the constants of
the removed ops (``mean_chn``/``min_chn``/``var_reci_chn``).

Numerics: preserving for the part that stays -- ``--verify`` feeds the rewritten model the tensor the original
computes at that point and compares the outputs (difference 0). The model's input changes meaning (it is the
normalized tensor); the report says so.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import onnx
from onnx import ModelProto, NodeProto
from onnx import TensorProto as T

from advisor.fix.onnx_graph import GraphEditor, GraphIndex, copy_model, describe, is_op, label
from advisor.fix.rewrites.base import Param, Rewrite, RewriteResult

_AFFINE = ("Sub", "Add", "Mul", "Div")
_NHWC_TO_NCHW = [0, 3, 1, 2]


class AippPreprocess(Rewrite):
    name = "aipp-preprocess"
    description = "remove input Cast / NHWC->NCHW Transpose / per-channel normalization that static AIPP performs"
    numerics_preserving = True
    params = (Param("max_channels", int, 4, "an image input has at most this many channels"),)

    def apply(self, model: ModelProto, params: Mapping[str, object]) -> RewriteResult:
        model = copy_model(model)
        index = GraphIndex(model)
        editor = GraphEditor(index)
        max_c = int(self.param(params, "max_channels"))  # type: ignore[call-overload]
        matches: list[str] = []
        notes: list[str] = []
        input_map: dict[str, str] = {}
        new_types: dict[str, tuple[int, list[int | None]]] = {}
        inits = set(index.initializers)
        for inp in [v.name for v in model.graph.input if v.name not in inits]:
            chain, why = self._chain(index, inp, max_c)
            if not chain:
                if why:
                    notes.append(f"input '{inp}': {why}")
                continue
            last = chain[-1].output[0]
            elem = index.elem_type(last)
            shape = index.shape(last)
            if elem is None or shape is None:
                notes.append(f"input '{inp}': the type of {label(chain[-1])}'s output is unknown; left alone")
                continue
            editor.remove(chain, {last: inp})
            input_map[inp] = last
            new_types[inp] = (elem, shape)
            matches.append(label(chain[-1]))
            notes.append(f"input '{inp}': removed {describe(chain)}; the input is now the {T.DataType.Name(elem)} "
                         f"tensor {shape} they produced (AIPP does the conversion; the OM takes uint8 NHWC)")
        if not matches:
            return RewriteResult(model, [], notes or ["no preprocessing AIPP can take over after a model input"])
        out = editor.apply()
        for v in out.graph.input:
            if v.name in new_types:
                elem, shape = new_types[v.name]
                v.CopyFrom(onnx.helper.make_tensor_value_info(v.name, elem, [d if d is not None else "N"
                                                                             for d in shape]))
        return RewriteResult(out, matches, notes, input_map=input_map)

    def _chain(self, index: GraphIndex, inp: str, max_c: int) -> tuple[list[NodeProto], str]:
        """The absorbable ops after ``inp``, in order (empty with the reason when there are none)."""
        chain: list[NodeProto] = []
        tensor = inp
        shape = index.shape(inp) or []
        if len(shape) != 4:
            return [], ""
        nhwc = shape[3] is not None and 0 < shape[3] <= max_c and (shape[1] is None or shape[1] > max_c)
        channels = shape[3] if nhwc else shape[1]
        if channels is None or channels > max_c:
            return [], ""
        while True:
            node = index.sole_consumer(tensor)
            if node is None:
                break
            if is_op(node, "Cast"):
                if chain or index.elem_type(tensor) not in (T.UINT8, T.INT8, T.FLOAT16, T.FLOAT):
                    break
            elif is_op(node, "Transpose"):
                perm = [int(p) for p in next((a.ints for a in node.attribute if a.name == "perm"), [])]
                if not nhwc or perm != _NHWC_TO_NCHW:
                    break
                nhwc = False
            elif node.op_type in _AFFINE and len(node.input) == 2:
                if not _affine_ok(index, node, tensor, channels, nhwc):
                    break
            else:
                break
            chain.append(node)
            tensor = node.output[0]
        if nhwc:
            # AIPP writes NCHW-ordered data for the convolution: a chain that never reaches NCHW is not AIPP's
            return [], "the preprocessing never reaches the NCHW layout AIPP writes"
        if not chain or not any(n.op_type in _AFFINE or is_op(n, "Cast") for n in chain):
            return [], ""
        return chain, ""


def _affine_ok(index: GraphIndex, node: NodeProto, tensor: str, channels: int, nhwc: bool) -> bool:
    """An Add/Sub/Mul/Div of ``tensor`` by a constant AIPP can take over: a scalar or one value per channel, x - c
    or x / c (not c - x, c / x: not of AIPP's form (x - mean - min) * var_reci), no division by zero."""
    other = index.other_input(node, tensor)
    value = index.constant(other) if other else None
    if value is None or value.dtype.kind not in "fiu":
        return False
    if node.op_type in ("Sub", "Div") and node.input[0] != tensor:
        return False
    if value.size != 1 and not (value.size == channels and _per_channel(value, nhwc)):
        return False
    return not (node.op_type == "Div" and (value == 0).any())


def _per_channel(value: np.ndarray, nhwc: bool) -> bool:
    """One value per channel broadcasting along the channel axis: (1,C,1,1) / (C,1,1) in NCHW, (C,) / (1,1,1,C) /
    (1,1,C) in NHWC."""
    dims = [int(d) for d in value.shape]
    if nhwc:
        return all(d == 1 for d in dims[:-1])
    if len(dims) == 4:
        return dims[0] == 1 and dims[2] == 1 and dims[3] == 1
    if len(dims) == 3:
        return dims[1] == 1 and dims[2] == 1
    return False


REWRITE = AippPreprocess()
