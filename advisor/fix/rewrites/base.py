"""The common interface of an ONNX rewrite: an id, what it does, whether it keeps the numerics, and ``apply``."""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import ClassVar

from onnx import ModelProto


@dataclass(frozen=True)
class Param:
    """A tunable of a rewrite, set with ``--param RULE.NAME=VALUE``."""

    name: str
    kind: type
    default: object
    help: str

    def parse(self, text: str) -> object:
        """Convert the command-line text to the parameter's type (ValueError when it does not fit)."""
        if self.kind is bool:
            low = text.strip().lower()
            if low in ("1", "true", "yes", "on"):
                return True
            if low in ("0", "false", "no", "off"):
                return False
            raise ValueError(f"expected true/false, got {text!r}")
        return self.kind(text)


@dataclass
class RewriteResult:
    """What a rewrite did: the new model, one entry per rewritten match, and notes for the user."""

    model: ModelProto
    matches: list[str]
    notes: list[str] = field(default_factory=list)
    input_map: dict[str, str] = field(default_factory=dict)
    """New model input -> the tensor of the old model it stands for, when a rewrite changes the inputs (``--verify``
    feeds the new model what the old one computed there)."""

    @property
    def changed(self) -> bool:
        return bool(self.matches)


class Rewrite(ABC):
    """One mechanical graph rewrite. ``apply`` never mutates its input and leaves unrelated nodes untouched."""

    name: ClassVar[str]
    description: ClassVar[str]
    numerics_preserving: ClassVar[bool]
    params: ClassVar[tuple[Param, ...]] = ()

    @abstractmethod
    def apply(self, model: ModelProto, params: Mapping[str, object]) -> RewriteResult:
        """Rewrite every match of the pattern in ``model``'s main graph (a copy) and say what was done."""

    def param(self, params: Mapping[str, object], key: str) -> object:
        """The value of parameter ``key``: the given one or the declared default."""
        for p in self.params:
            if p.name == key:
                return params.get(key, p.default)
        raise KeyError(f"{self.name} has no parameter {key!r}")

    def tag(self) -> str:
        """Prefix of the doc_string of every node this rewrite creates."""
        return f"advisor fix {self.name}"
