"""Rules are data: load ``<name>.yaml`` rules files, validate them, layer user overrides, collect waivers.

Precedence (later wins): built-in/plugin rules files -> ``[tool.advisor]`` in ``pyproject.toml`` -> ``--rules FILE``.
Every value remembers where it came from, for ``advisor rules show`` and ``advisor explain``.

Override file format (YAML; the same keys under ``[tool.advisor]`` in TOML)::

    rules:
      transdata:            # rules file name (= KB id for built-ins)
        max_count: 4
    chip: Ascend910B1       # use this chip's peaks instead of the detected one
    platform:
      hbm_gbps: 1600        # a value of rules/platforms.yaml's selected chip
    waivers:
      - rule: transdata.count        # rule id, glob allowed
        ops: "trans_TransData_0*"     # op-name glob (default: every op)
        reason: "input layout conversion, unavoidable"

Every layer is validated when loaded: the override file against the format above, each merged rules file again
against its schema. A problem is a :class:`advisor.common.errors.RulesError` naming the file, the key and the problem.
"""

from __future__ import annotations

import fnmatch
import importlib.resources
import json
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

import jsonschema
from jsonschema.exceptions import best_match

from advisor.common import safeload
from advisor.common.errors import InputError, RulesError
from advisor.config import rule_aliases

RULES_SUFFIX = ".yaml"

GATE_PROPERTIES: dict[str, Any] = {
    "fail_under": {"type": "number", "minimum": 0, "maximum": 100},
    "fail_on": {"enum": ["critical", "major", "minor", "info"]},  # advisor.findings.SEVERITIES (tests/test_gate.py)
    "max_regression": {"type": "number", "minimum": 0},
    "max_score_drop": {"type": "number", "minimum": 0},
}
"""The CI gate's keys in ``[tool.advisor]`` beside the rule overrides (``advisor.pipeline.gate`` reads them)."""


BUILTIN_RULES_PACKAGE = "advisor.builtin_rules"
"""The package that holds the built-in rules files (the repository folder ``rules/``, installed under advisor)."""


def builtin_rules_dir() -> Path:
    """The folder of the built-in rules files, found through the installed package (wheel, editable install or
    source checkout alike)."""
    return Path(str(importlib.resources.files(BUILTIN_RULES_PACKAGE)))


@dataclass
class Waiver:
    """Suppress findings of ``rule`` (glob) for ops matching ``ops`` (glob), for a stated reason."""

    rule: str
    ops: str
    reason: str
    source: str
    renamed_to: tuple[str, ...] = ()
    """The current ids of the former rule ids ``rule`` names (``rules/aliases.yaml``): it waives their findings."""

    def matches_rule(self, rule_id: str) -> bool:
        return fnmatch.fnmatchcase(rule_id, self.rule) or rule_id in self.renamed_to

    def matches_op(self, op: str) -> bool:
        return fnmatch.fnmatchcase(op, self.ops)

    def to_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "ops": self.ops, "reason": self.reason, "source": self.source}


def rules_name(name: str) -> str:
    """``transdata.yaml`` or ``transdata`` -> ``transdata`` (KBs may declare either)."""
    return name[: -len(RULES_SUFFIX)] if name.endswith(RULES_SUFFIX) else name


@dataclass
class EffectiveRules:
    """The rules in force: values per rules file, the source of each value, and waivers."""

    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: dict[str, dict[str, str]] = field(default_factory=dict)
    """Rules file name -> dotted key of each leaf value -> where it came from (a path, or a path and
    ``[tool.advisor]``)."""
    waivers: list[Waiver] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)
    platform_overrides: dict[str, Any] = field(default_factory=dict)
    platform_override_source: str = ""
    layers: list[str] = field(default_factory=list)
    """Override layers applied, in order (labels as used in ``sources``)."""

    def has(self, name: str) -> bool:
        return rules_name(name) in self.values

    def for_kb(self, name: str | None) -> dict[str, Any]:
        if not name:
            return {}
        return self.values.get(rules_name(name), {})

    def lookup(self, name: str, key: str) -> tuple[Any, str]:
        """Value and source of ``key`` (dotted) in rules file ``name``; KeyError when absent.

        A key holding a mapping reports the source shared by its leaves, or ``"several (...)"``.
        """
        name = rules_name(name)
        value: Any = self.values[name]
        for part in key.split("."):
            if not isinstance(value, Mapping) or part not in value:
                raise KeyError(f"{name}.{key}")
            value = value[part]
        srcs = self.sources.get(name, {})
        if key in srcs:
            return value, srcs[key]
        found = sorted({s for k, s in srcs.items() if k.startswith(key + ".")})
        if len(found) == 1:
            return value, found[0]
        return value, "several (" + ", ".join(found) + ")" if found else ""

    def is_default(self, name: str, source: str) -> bool:
        """True when ``source`` is the rules file itself (no override changed the value)."""
        path = self.files.get(rules_name(name))
        return path is not None and source == str(path)


# ---------------------------------------------------------------------------------------------------------
# validation
# ---------------------------------------------------------------------------------------------------------
def _schema_for(path: Path) -> Path:
    return path.parent / "schema" / f"{path.stem}.schema.json"


def _located(err: jsonschema.ValidationError) -> tuple[str, str]:
    """(dotted key, problem) for one schema error, pointing at the offending key itself where possible."""
    parts = [str(p) for p in err.absolute_path]
    problem = err.message
    if err.validator == "additionalProperties" and isinstance(err.instance, Mapping):
        allowed = sorted((err.schema.get("properties") or {}).keys())
        extra = sorted(k for k in err.instance if k not in allowed)
        if extra:
            parts.append(str(extra[0]))
            problem = "unknown key" + (f" (allowed: {', '.join(allowed)})" if allowed else "")
    elif err.validator == "required" and isinstance(err.instance, Mapping):
        missing = [k for k in err.validator_value if k not in err.instance]
        if missing:
            parts.append(str(missing[0]))
            problem = "required key is missing"
    return ".".join(parts), problem


MAX_PATTERN_CHARS = 1000
"""Longest regex a rules value may hold (the built-in ones are under 100 characters)."""


def regex_problem(pattern: str) -> str | None:
    """Why ``pattern`` cannot be used as a rules regex, or None.

    Knowledge bases match rules regexes against every op and event name with Python's backtracking engine, which
    cannot be interrupted: a pattern with a repeat inside a repeat (``(.+)+Z``, ``(a*)*``) takes exponential time
    on a name that almost matches and would hang the run. Such patterns are refused when the rules are loaded,
    as are patterns that do not compile.
    """
    if len(pattern) > MAX_PATTERN_CHARS:
        return f"regex longer than {MAX_PATTERN_CHARS} characters"
    try:
        re.compile(pattern)
    except (re.error, RecursionError, OverflowError) as e:
        return f"invalid regex ({e})"
    try:
        from re import _parser as sre_parse  # type: ignore[attr-defined]
    except ImportError:  # pragma: no cover - Python 3.10
        import sre_parse  # type: ignore[no-redef]
    nested = _nested_repeat(sre_parse.parse(pattern), sre_parse, inside=False)
    if nested:
        return (f"regex {pattern!r} repeats a repeated group ({nested}): matching can take exponential time; "
                "write it without the nested repeat")
    return None


def _nested_repeat(tree: Any, sre: Any, inside: bool) -> str | None:
    """The first repeat found inside another repeat of more than one iteration, as text, or None."""
    repeats = {sre.MAX_REPEAT, sre.MIN_REPEAT, getattr(sre, "POSSESSIVE_REPEAT", sre.MAX_REPEAT)}
    for op, av in tree:
        if op in repeats:
            lo, hi, sub = av
            unbounded = hi == sre.MAXREPEAT or hi > 100
            if inside and unbounded:
                return "an unbounded repeat inside another repeat"
            found = _nested_repeat(sub, sre, inside or hi > 1)
            if found:
                return found
        elif op == sre.SUBPATTERN:
            found = _nested_repeat(av[-1], sre, inside)
            if found:
                return found
        elif op == sre.BRANCH:
            for branch in av[1]:
                found = _nested_repeat(branch, sre, inside)
                if found:
                    return found
        elif op in (sre.ASSERT, sre.ASSERT_NOT):
            found = _nested_repeat(av[1], sre, inside)
            if found:
                return found
    return None


_FORMATS = jsonschema.FormatChecker(formats=())


@_FORMATS.checks("regex", raises=ValueError)
def _check_regex(value: object) -> bool:
    if isinstance(value, str):
        problem = regex_problem(value)
        if problem:
            raise ValueError(problem)
    return True


def _non_finite(data: Any, key: str = "") -> str | None:
    """The dotted key of the first NaN or infinite number in ``data`` (YAML ``.nan``/``.inf``), or None."""
    if isinstance(data, float) and not math.isfinite(data):
        return key or "(top level)"
    if isinstance(data, Mapping):
        for k, v in data.items():
            found = _non_finite(v, f"{key}.{k}" if key else str(k))
            if found:
                return found
    elif isinstance(data, list):
        for i, v in enumerate(data):
            found = _non_finite(v, f"{key}.{i}" if key else str(i))
            if found:
                return found
    return None


def _validate(data: Any, schema: Mapping[str, Any], path: Path | str, prefix: str = "") -> None:
    bad = _non_finite(data)
    if bad is not None:
        raise RulesError(path, ".".join(p for p in (prefix, bad) if p), "not a finite number (.nan / .inf)")
    validator = jsonschema.Draft202012Validator(schema, format_checker=_FORMATS)
    err = best_match(validator.iter_errors(data))
    if err is not None:
        key, problem = _located(err)
        if err.validator == "format" and err.cause is not None:
            problem = str(err.cause)
        raise RulesError(path, ".".join(p for p in (prefix, key) if p), problem)


def load_yaml(path: Path) -> Any:
    """Parse a YAML file (bounded: ``advisor.common.safeload``); unreadable or malformed files are a RulesError."""
    try:
        return safeload.load_yaml(path)
    except InputError as e:
        m = re.match(r"invalid YAML at (line \d+) (.*)$", e.problem)
        if m:
            raise RulesError(path, m.group(1), f"invalid YAML {m.group(2)}") from None
        raise RulesError(path, "", e.problem) from None

_SCHEMA_CACHE: dict[Path, dict[str, Any]] = {}


def load_schema(rules_path: Path) -> dict[str, Any]:
    """The JSON Schema of a rules file (``schema/<name>.schema.json`` beside it); it must exist and be valid."""
    schema_path = _schema_for(rules_path)
    key = schema_path.resolve()
    if key in _SCHEMA_CACHE:
        return _SCHEMA_CACHE[key]
    if not schema_path.exists():
        raise RulesError(rules_path, "", f"no JSON Schema at {schema_path}")
    try:
        schema = safeload.load_json(schema_path)
        # checking a schema against the meta-schema is slow (~0.2 s each); the built-in schemas are checked by
        # the test suite (tests/test_rules.py), plugin schemas here at every load
        if builtin_rules_dir().resolve() not in key.parents:
            jsonschema.Draft202012Validator.check_schema(schema)
    except InputError as e:
        raise RulesError(schema_path, "", e.problem) from None
    except jsonschema.SchemaError as e:
        raise RulesError(schema_path, ".".join(str(p) for p in e.absolute_path), f"invalid JSON Schema ({e.message})") \
            from None
    _SCHEMA_CACHE[key] = schema
    return schema


def load_rules_file(path: Path, validate: bool = True) -> dict[str, Any]:
    """Read one rules file and validate it against ``schema/<name>.schema.json`` beside it (required; ``validate``
    False skips it: see :func:`load_effective_rules`)."""
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise RulesError(path, "", "a rules file must be a mapping of names to values")
    if validate:
        _validate(data, load_schema(path), path)
    return data


# ---------------------------------------------------------------------------------------------------------
# layering
# ---------------------------------------------------------------------------------------------------------
def _deep_merge(base: dict[str, Any], over: Mapping[str, Any], sources: dict[str, str], source: str,
                prefix: str = "") -> None:
    for key, value in over.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value, sources, source, dotted + ".")
        else:
            for old in [k for k in sources if k.startswith(dotted + ".")]:
                del sources[old]
            base[key] = json.loads(json.dumps(value))
            sources.update(_leaf_sources({key: value}, source, prefix))


def _leaf_sources(data: Mapping[str, Any], source: str, prefix: str = "") -> dict[str, str]:
    out: dict[str, str] = {}
    for key, value in data.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and value:
            out.update(_leaf_sources(value, source, dotted + "."))
        else:
            out[dotted] = source
    return out


_OVERRIDE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "additionalProperties": False,
    "properties": {
        "rules": {"type": "object", "additionalProperties": {"type": "object"}},
        "platform": {"type": "object"},
        "chip": {"type": "string", "minLength": 1},
        "waivers": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["rule", "reason"],
                "additionalProperties": False,
                "properties": {
                    "rule": {"type": "string", "minLength": 1},
                    "ops": {"type": "string", "minLength": 1},
                    "reason": {"type": "string", "minLength": 1, "pattern": r"\S"},
                },
            },
        },
    },
}


_PYPROJECT_SCHEMA: dict[str, Any] = {
    **_OVERRIDE_SCHEMA, "properties": {**_OVERRIDE_SCHEMA["properties"], **GATE_PROPERTIES}}
"""``[tool.advisor]``: the override format plus the CI gate's settings (``advisor.pipeline.gate``: fail_under, fail_on,
max_regression, max_score_drop), which belong to the project rather than to a rules file."""


def validate_pyproject_section(path: Path) -> dict[str, Any]:
    """The ``[tool.advisor]`` table of ``path``, validated (empty when it has none)."""
    section = _read_pyproject(Path(path)) or {}
    _validate(section, _PYPROJECT_SCHEMA, Path(path), "tool.advisor")
    return section


def _read_pyproject(path: Path) -> dict[str, Any] | None:
    try:
        data = safeload.loads_toml(safeload.read_bytes(path).decode("utf-8"), path)
    except InputError as e:
        raise RulesError(path, "", e.problem) from None
    except UnicodeDecodeError:
        raise RulesError(path, "", "not UTF-8 text") from None
    tool = data.get("tool")
    section = tool.get("advisor") if isinstance(tool, dict) else None
    return section if isinstance(section, dict) else None


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.advisor]`` table, from ``start`` upwards.

    Files that do not mention ``tool.advisor`` are skipped without being parsed; one that does but is not valid
    TOML is an error (the user meant it to be read).
    """
    start = Path(start).resolve()
    for d in [start, *start.parents]:
        candidate = d / "pyproject.toml"
        if not candidate.is_file():
            continue
        try:
            text = safeload.read_bytes(candidate).decode("utf-8", errors="replace")
        except InputError:
            continue
        if "advisor" not in text or "tool" not in text:
            continue
        if _read_pyproject(candidate) is not None:
            return candidate
    return None


def _layer_label(path: Path) -> str:
    return f"{path} [tool.advisor]" if path.name == "pyproject.toml" else str(path)


def _platform_entry_schema(eff: EffectiveRules) -> dict[str, Any] | None:
    """The schema of one chip entry of ``platforms.yaml`` (to validate ``platform:`` overrides), if known."""
    path = eff.files.get("platforms")
    if path is None:
        return None
    entry = load_schema(path).get("properties", {}).get("chips", {}).get("additionalProperties")
    if not isinstance(entry, dict):
        return None
    return {k: v for k, v in entry.items() if k != "required"}


def load_effective_rules(
    rules_dirs: Iterable[Path],
    override_file: Path | None = None,
    pyproject: Path | None = None,
) -> EffectiveRules:
    """Load every rules file in ``rules_dirs``, then apply pyproject and ``--rules`` overrides, re-validating."""
    eff = EffectiveRules()
    builtin = builtin_rules_dir().resolve()
    for d in rules_dirs:
        # the built-in files are validated by the test suite (tests/test_rules.py), as their schemas are: ~0.15 s
        # of jsonschema at every start; a plugin's files here at every load, overrides below on the merged values
        shipped = Path(d).resolve() == builtin
        for path in sorted(Path(d).glob(f"*{RULES_SUFFIX}")):
            name = path.stem
            if name in eff.files and eff.files[name].resolve() != path.resolve():
                raise RulesError(path, "", f"rules file name '{name}' is already used by {eff.files[name]}")
            data = load_rules_file(path, validate=not shipped)
            eff.values[name] = data
            eff.sources[name] = _leaf_sources(data, str(path))
            eff.files[name] = path

    layers: list[tuple[Path, dict[str, Any], str]] = []
    if pyproject is not None:
        section = _read_pyproject(Path(pyproject))
        if section:
            layers.append((Path(pyproject), section, "tool.advisor"))
    if override_file is not None:
        data = load_yaml(Path(override_file))
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise RulesError(override_file, "", "an override file must be a mapping (rules:, chip:, platform:, "
                                                "waivers:)")
        layers.append((Path(override_file), data, ""))

    for path, layer, prefix in layers:
        _apply_layer(eff, path, layer, prefix)
    return eff


@lru_cache(maxsize=1)
def builtin_aliases() -> Mapping[str, tuple[str, ...]]:
    """The built-in alias table of former rule ids (``rules/aliases.yaml``, validated against its schema)."""
    return rule_aliases.from_values(load_rules_file(builtin_rules_dir() / f"{rule_aliases.ALIASES_FILE}.yaml"))


def _resolve_renamed(eff: EffectiveRules) -> None:
    """Point each waiver that names a former rule id at the rule(s) that replaced it (``rules/aliases.yaml``)."""
    aliases = rule_aliases.from_values(eff.values.get(rule_aliases.ALIASES_FILE))
    for w in eff.waivers:
        w.renamed_to = rule_aliases.renamed_to(w.rule, aliases)


def apply_override(eff: EffectiveRules, layer: Mapping[str, Any], source: str) -> None:
    """Apply one override layer given as data (``rules:``, ``chip:``, ``platform:``, ``waivers:``, as in a
    ``--rules`` file), validated like a file; ``source`` labels the values it sets (``advisor.testing``)."""
    _apply_layer(eff, Path(source), dict(layer), "")


def _apply_layer(eff: EffectiveRules, path: Path, layer: dict[str, Any], prefix: str) -> None:
    _validate(layer, _PYPROJECT_SCHEMA if prefix == "tool.advisor" else _OVERRIDE_SCHEMA, path, prefix)
    label = _layer_label(path)
    eff.layers.append(label)

    def key(*parts: str) -> str:
        return ".".join(p for p in (prefix, *parts) if p)

    for name, values in layer.get("rules", {}).items():
        if name not in eff.values:
            raise RulesError(path, key("rules", name), "unknown rules file (known: "
                             + ", ".join(sorted(eff.values)) + ")")
        merged = json.loads(json.dumps(eff.values[name]))
        sources = dict(eff.sources[name])
        _deep_merge(merged, values, sources, label)
        _validate(merged, load_schema(eff.files[name]), path, key("rules", name))
        eff.values[name] = merged
        eff.sources[name] = sources
    if "platform" in layer:
        schema = _platform_entry_schema(eff)
        if schema is not None:
            _validate(layer["platform"], schema, path, key("platform"))
        eff.platform_overrides.update(layer["platform"])
        eff.platform_override_source = label
    if "chip" in layer:
        eff.platform_overrides["soc"] = layer["chip"]
        eff.platform_override_source = label
    for w in layer.get("waivers", []):
        eff.waivers.append(Waiver(rule=w["rule"], ops=w.get("ops", "*"), reason=w["reason"].strip(), source=label))
    _resolve_renamed(eff)
