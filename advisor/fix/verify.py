"""Before/after verification with onnxruntime on the CPU: output difference and median latency.

onnxruntime is an optional dependency (advisor's ``verify`` extra) and is imported only when verifying.
"""

from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto

from advisor.common.errors import UsageError

OPT_LEVELS = ("disable", "basic", "extended", "all")
REL_SCALE = 1e-3
"""Relative differences are measured where |ref| > max(atol, REL_SCALE * max|ref| of that output): elements
near zero say nothing about relative error and would dominate the maximum."""


def load_onnxruntime() -> Any:
    """The onnxruntime module, or a one-line error saying how to install it."""
    try:
        import onnxruntime
    except ImportError:
        raise UsageError(
            "--verify needs onnxruntime, which is not installed: pip install onnxruntime (advisor's 'verify' "
            "extra)") from None
    return onnxruntime


@dataclass
class VerifySettings:
    """How rewrites are verified; the defaults are the CLI defaults."""

    runs: int = 20
    warmup: int = 5
    atol: float = 1e-4
    rtol: float = 1e-4
    min_gain_pct: float = 0.0
    seed: int = 0
    shapes: dict[str, list[int]] = field(default_factory=dict)
    opt_level: str = "disable"

    def to_dict(self) -> dict[str, Any]:
        return {"runs": self.runs, "warmup": self.warmup, "atol": self.atol, "rtol": self.rtol,
                "min_gain_pct": self.min_gain_pct, "seed": self.seed, "shapes": self.shapes,
                "ort_optimization": self.opt_level, "provider": "CPUExecutionProvider"}


@dataclass
class Diff:
    """How far a rewritten model's outputs are from the reference ones."""

    max_abs: float
    max_rel: float
    within: bool
    problem: str | None = None


def input_feeds(model: ModelProto, settings: VerifySettings) -> dict[str, np.ndarray]:
    """Random inputs of the model's input shapes and dtypes (dynamic dims: ``--shape`` or 1), fixed seed."""
    rng = np.random.default_rng(settings.seed)
    inits = {t.name for t in model.graph.initializer}
    inputs = [v for v in model.graph.input if v.name not in inits]
    unknown = set(settings.shapes) - {v.name for v in inputs}
    if unknown:
        raise UsageError(f"--shape names an input the model does not have: {', '.join(sorted(unknown))} "
                         f"(inputs: {', '.join(v.name for v in inputs)})")
    feeds: dict[str, np.ndarray] = {}
    for v in inputs:
        if not v.type.HasField("tensor_type"):
            raise UsageError(f"input '{v.name}' is not a tensor; --verify supports tensor inputs only")
        tt = v.type.tensor_type
        dims = _dims(v.name, tt, settings.shapes.get(v.name))
        try:
            dtype = onnx.helper.tensor_dtype_to_np_dtype(tt.elem_type)
        except KeyError:
            raise UsageError(f"input '{v.name}' has an element type --verify cannot generate ({tt.elem_type})") from None
        feeds[v.name] = _random(rng, dims, np.dtype(dtype), v.name)
    return feeds


def _dims(name: str, tt: onnx.TypeProto.Tensor, given: list[int] | None) -> list[int]:
    if not tt.HasField("shape"):
        if given is None:
            raise UsageError(f"input '{name}' has no shape in the model; pass --shape {name}=D0,D1,...")
        return given
    declared = [d.dim_value if d.HasField("dim_value") and d.dim_value > 0 else None for d in tt.shape.dim]
    if given is None:
        return [d if d is not None else 1 for d in declared]
    if len(given) != len(declared):
        raise UsageError(f"--shape {name}: {len(given)} dims given, the model declares rank {len(declared)}")
    for g, d in zip(given, declared, strict=True):
        if d is not None and g != d:
            raise UsageError(f"--shape {name}={','.join(map(str, given))} conflicts with the model's static shape "
                             f"{[x if x is not None else '?' for x in declared]}")
    return given


def _random(rng: np.random.Generator, dims: list[int], dtype: np.dtype, name: str) -> np.ndarray:
    if dtype.kind == "f":
        return rng.standard_normal(dims).astype(dtype)
    if dtype.kind in "iu":
        return rng.integers(0, 8, size=dims).astype(dtype)
    if dtype.kind == "b":
        return rng.random(dims) < 0.5
    raise UsageError(f"input '{name}' has dtype {dtype}; --verify generates numeric and bool inputs only")


class Runner:
    """One onnxruntime CPU session over a model; the output names are the model's."""

    def __init__(self, model: ModelProto, opt_level: str) -> None:
        ort = load_onnxruntime()
        opts = ort.SessionOptions()
        opts.graph_optimization_level = {
            "disable": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "extended": ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[opt_level]
        opts.log_severity_level = 3
        self.session = ort.InferenceSession(model.SerializeToString(), opts, providers=["CPUExecutionProvider"])
        self.output_names = [o.name for o in self.session.get_outputs()]

    def run(self, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        return dict(zip(self.output_names, self.session.run(None, feeds), strict=True))


def compare(ref: dict[str, np.ndarray], new: dict[str, np.ndarray], atol: float, rtol: float) -> Diff:
    """Max absolute and relative difference over all outputs; ``within`` when |new-ref| <= atol + rtol*|ref|."""
    if set(ref) != set(new):
        return Diff(float("nan"), float("nan"), False, f"outputs changed: {sorted(ref)} -> {sorted(new)}")
    max_abs = max_rel = 0.0
    within = True
    for name, a in ref.items():
        b = new[name]
        if a.shape != b.shape:
            return Diff(float("nan"), float("nan"), False, f"output '{name}' shape changed {a.shape} -> {b.shape}")
        if a.dtype.kind not in "fiub" or b.dtype.kind not in "fiub":
            if not np.array_equal(a, b):
                return Diff(float("nan"), float("nan"), False, f"output '{name}' differs")
            continue
        if a.size == 0:
            continue
        a64, b64 = a.astype(np.float64), b.astype(np.float64)
        nan_a, nan_b = np.isnan(a64), np.isnan(b64)
        if (nan_a != nan_b).any():
            return Diff(float("nan"), float("nan"), False, f"output '{name}' has NaN where the reference has none")
        d = np.abs(np.where(nan_a, 0.0, a64 - b64))
        mag = np.abs(np.where(nan_a, 0.0, a64))
        max_abs = max(max_abs, float(d.max()))
        big = mag > max(atol, REL_SCALE * float(mag.max()))
        if big.any():
            max_rel = max(max_rel, float((d[big] / mag[big]).max()))
        within = within and bool((d <= atol + rtol * mag).all())
    return Diff(max_abs, max_rel, within)


def time_pair(a: Runner, b: Runner, feeds: dict[str, np.ndarray], runs: int, warmup: int,
              feeds_b: dict[str, np.ndarray] | None = None) -> tuple[float, float]:
    """Median latency (ms) of two sessions, runs interleaved so drift and noise hit both alike (``feeds_b``: the
    second session's inputs when a rewrite changed them)."""
    fb = feeds if feeds_b is None else feeds_b
    inputs = {id(a): feeds, id(b): fb}
    for _ in range(max(0, warmup)):
        a.session.run(None, feeds)
        b.session.run(None, fb)
    ta: list[float] = []
    tb: list[float] = []
    for i in range(max(1, runs)):
        first, second = (a, b) if i % 2 == 0 else (b, a)
        t0 = time.perf_counter()
        first.session.run(None, inputs[id(first)])
        t1 = time.perf_counter()
        second.session.run(None, inputs[id(second)])
        t2 = time.perf_counter()
        (ta if first is a else tb).append(t1 - t0)
        (tb if first is a else ta).append(t2 - t1)
    return statistics.median(ta) * 1e3, statistics.median(tb) * 1e3
