"""Apply rewrites one by one; each is checked (and, with verification, measured) against the model before it,
and kept only when it passes, so one bad rewrite never sinks the others."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
from onnx import ModelProto

from advisor.common.errors import InputError
from advisor.fix.rewrites import Rewrite, get
from advisor.fix.verify import Runner, VerifySettings, compare, input_feeds, time_pair

KEPT, REJECTED, NO_MATCH = "kept", "rejected", "no-match"


@dataclass
class FixOptions:
    """What the user asked for besides the rule list."""

    params: dict[str, dict[str, object]] = field(default_factory=dict)
    accept_all: bool = False
    accept: set[str] = field(default_factory=set)
    verify: VerifySettings | None = None

    def accepts(self, rule: str) -> bool:
        return self.accept_all or rule in self.accept


@dataclass
class StepReport:
    """The outcome of one rewrite."""

    rule: str
    numerics_preserving: bool
    status: str = NO_MATCH
    reason: str = ""
    matches: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    max_abs_diff: float | None = None
    max_rel_diff: float | None = None
    latency_before_ms: float | None = None
    latency_after_ms: float | None = None
    input_map: dict[str, str] = field(default_factory=dict)
    """New model input -> the old model's tensor it stands for (a rewrite that changes the inputs)."""

    @property
    def gain_pct(self) -> float | None:
        b, a = self.latency_before_ms, self.latency_after_ms
        if b is None or a is None or b <= 0:
            return None
        return (b - a) / b * 100.0

    def to_dict(self) -> dict[str, Any]:
        return {
            "rule": self.rule, "status": self.status, "reason": self.reason,
            "numerics_preserving": self.numerics_preserving, "matches": self.matches, "notes": self.notes,
            "max_abs_diff": _num(self.max_abs_diff), "max_rel_diff": _num(self.max_rel_diff),
            "latency_before_ms": _num(self.latency_before_ms), "latency_after_ms": _num(self.latency_after_ms),
            "gain_pct": _num(self.gain_pct),
        }


@dataclass
class FixRun:
    """All steps, the final model, and the end-to-end numbers when verified."""

    model: ModelProto
    steps: list[StepReport]
    notes: list[str] = field(default_factory=list)
    total: StepReport | None = None

    @property
    def kept(self) -> list[StepReport]:
        return [s for s in self.steps if s.status == KEPT]


def _num(v: float | None) -> float | None:
    if v is None or math.isnan(v) or math.isinf(v):
        return None
    return round(float(v), 9) if abs(v) < 1e-3 else round(float(v), 6)


def check(model: ModelProto, full: bool) -> str | None:
    """None when the model is valid (checker with shape inference when ``full``), else the first error line."""
    try:
        onnx.checker.check_model(model, full_check=full)
    except Exception as e:  # noqa: BLE001 - the checker raises several exception types
        return (str(e).strip().splitlines() or [type(e).__name__])[0]
    return None


def run_fix(model: ModelProto, rules: Iterable[str], options: FixOptions, source: str | Path = "model") -> FixRun:
    """Apply ``rules`` in order to ``model``; see the module docstring for the keep/reject protocol."""
    notes: list[str] = []
    full = True
    problem = check(model, full=True)
    if problem:
        basic = check(model, full=False)
        if basic:
            raise InputError(source, f"not a valid ONNX model: {basic}")
        full = False
        notes.append(f"the input model fails the full check ({problem}); rewrites are checked without shape inference")
    verifier = _Verifier(model, options.verify, source) if options.verify else None
    current = model
    steps: list[StepReport] = []
    for rule in rules:
        rewrite = get(rule)
        step = StepReport(rule, rewrite.numerics_preserving)
        steps.append(step)
        candidate = _apply(rewrite, current, options.params.get(rule, {}), step)
        if candidate is None:
            continue
        problem = check(candidate, full)
        if problem:
            step.status, step.reason = REJECTED, f"invalid graph after the rewrite: {problem}"
            continue
        approx_ok = rewrite.numerics_preserving or options.accepts(rule)
        if verifier is not None and not verifier.measure(candidate, step):
            continue
        if not approx_ok:
            diff = "" if step.max_abs_diff is None else f" (max abs diff {step.max_abs_diff:.4g})"
            step.status, step.reason = REJECTED, (
                f"changes the model's function{diff}; pass --accept-approx or --accept {rule} to keep it")
            continue
        if verifier is not None and not verifier.judge(step, rewrite):
            continue
        step.status = KEPT
        if not rewrite.numerics_preserving:
            measured = "" if step.max_abs_diff is None else f", max abs diff {step.max_abs_diff:.4g}"
            step.reason = f"approximation accepted{measured}"
        if verifier is not None:
            verifier.advance()
        current = candidate
    run = FixRun(current, steps, notes)
    if verifier is not None and run.kept:
        run.total = verifier.total()
    return run


def _apply(rewrite: Rewrite, model: ModelProto, params: dict[str, object], step: StepReport) -> ModelProto | None:
    """The rewritten model, or None (step filled in) when nothing was rewritten or the rewrite failed."""
    try:
        result = rewrite.apply(model, params)
    except Exception as e:  # noqa: BLE001 - a failing rewrite is reported, the others still run
        step.status, step.reason = REJECTED, f"the rewrite failed: {type(e).__name__}: {e}"
        return None
    step.matches, step.notes = list(result.matches), list(result.notes)
    step.input_map = dict(result.input_map)
    if not result.changed:
        step.status = NO_MATCH
        step.reason = step.notes[0] if step.notes else "pattern not found"
        step.notes = step.notes[1:]
        return None
    return result.model


class _Verifier:
    """Keeps the reference session and outputs of the current model between steps."""

    def __init__(self, model: ModelProto, settings: VerifySettings, source: str | Path) -> None:
        self.settings = settings
        self.feeds = self.origin_feeds = input_feeds(model, settings)
        self.ref_model = model
        try:
            self.origin = self.ref = Runner(model, settings.opt_level)
            self.origin_out = self.ref_out = self.ref.run(self.feeds)
        except Exception as e:  # noqa: BLE001 - onnxruntime raises its own exception types
            if type(e).__module__.startswith("advisor"):
                raise
            raise InputError(source, f"onnxruntime cannot run the input model: {_first_line(e)}") from None
        self._pending: tuple[Runner, dict] | None = None

    def measure(self, candidate: ModelProto, step: StepReport) -> bool:
        """Run the candidate: fill diff and latency; False (step rejected) when onnxruntime cannot run it."""
        try:
            feeds = self._mapped_feeds(step.input_map) if step.input_map else self.feeds
            runner = Runner(candidate, self.settings.opt_level)
            out = runner.run(feeds)
        except Exception as e:  # noqa: BLE001
            step.status, step.reason = REJECTED, f"onnxruntime cannot run the rewritten model: {_first_line(e)}"
            return False
        diff = compare(self.ref_out, out, self.settings.atol, self.settings.rtol)
        step.max_abs_diff, step.max_rel_diff = diff.max_abs, diff.max_rel
        step.latency_before_ms, step.latency_after_ms = time_pair(
            self.ref, runner, self.feeds, self.settings.runs, self.settings.warmup, feeds_b=feeds)
        self._pending = (runner, out, feeds, candidate)
        self._diff = diff
        return True

    def _mapped_feeds(self, input_map: dict[str, str]) -> dict[str, np.ndarray]:
        """Inputs of a model whose inputs moved: what the reference model computes at the tensors they stand for."""
        probe = onnx.ModelProto()
        probe.CopyFrom(self.ref_model)
        inferred = {v.name: v for v in onnx.shape_inference.infer_shapes(probe, strict_mode=False).graph.value_info}
        known = {o.name for o in probe.graph.output}
        for old in input_map.values():
            if old in known or old in self.feeds:
                continue
            if old not in inferred:
                raise ValueError(f"cannot type tensor '{old}' of the original model to feed the rewritten one")
            probe.graph.output.append(inferred[old])
        values = Runner(probe, "disable").run(self.feeds)
        feeds = {k: v for k, v in self.feeds.items() if k not in input_map}
        for new, old in input_map.items():
            feeds[new] = self.feeds[old] if old in self.feeds else values[old]
        return feeds

    def judge(self, step: StepReport, rewrite: Rewrite) -> bool:
        """Numerics within tolerance (for numerics-preserving rewrites) and gain at least --min-gain."""
        s, diff = self.settings, self._diff
        if diff.problem:
            step.status, step.reason = REJECTED, diff.problem
            return False
        if rewrite.numerics_preserving and not diff.within:
            step.status, step.reason = REJECTED, (
                f"outputs differ beyond tolerance (max abs {diff.max_abs:.3g}, max rel {diff.max_rel:.3g}; "
                f"atol {s.atol:g}, rtol {s.rtol:g})")
            return False
        gain = step.gain_pct
        if gain is not None and gain < s.min_gain_pct:
            step.status, step.reason = REJECTED, f"latency gain {gain:+.1f}% is below --min-gain {s.min_gain_pct:g}%"
            return False
        return True

    def advance(self) -> None:
        """The candidate just measured becomes the reference for the next rewrite."""
        assert self._pending is not None
        self.ref, self.ref_out, self.feeds, self.ref_model = self._pending
        self._pending = None

    def total(self) -> StepReport:
        """Original vs final model: end-to-end difference and latency."""
        total = StepReport("total", numerics_preserving=False, status="")
        diff = compare(self.origin_out, self.ref_out, self.settings.atol, self.settings.rtol)
        total.max_abs_diff, total.max_rel_diff = diff.max_abs, diff.max_rel
        total.latency_before_ms, total.latency_after_ms = time_pair(
            self.origin, self.ref, self.origin_feeds, self.settings.runs, self.settings.warmup, feeds_b=self.feeds)
        return total


def _first_line(e: BaseException) -> str:
    text = str(e).strip()
    return (text.splitlines() or [type(e).__name__])[0][:300]


def scan(model: ModelProto, rules: Iterable[str], params: dict[str, dict[str, object]]) -> list[StepReport]:
    """What each rewrite would change, without keeping anything (``advisor fix MODEL`` without ``--apply``)."""
    steps = []
    for rule in rules:
        rewrite = get(rule)
        step = StepReport(rule, rewrite.numerics_preserving)
        if _apply(rewrite, model, params.get(rule, {}), step) is not None:
            step.status, step.reason = "found", ""
        steps.append(step)
    return steps
