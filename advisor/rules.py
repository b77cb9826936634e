"""Rules are data: load ``<name>.yaml`` rules files, validate them, layer user overrides, apply waivers.

Precedence (later wins): built-in/plugin rules files -> ``[tool.advisor]`` in ``pyproject.toml`` -> ``--rules FILE``.
Every value remembers where it came from, for ``advisor rules show``.

Override file format (YAML; the same keys under ``[tool.advisor]`` in TOML)::

    rules:
      transdata:            # rules file name (= KB id for built-ins)
        max_count: 4
    platform:
      hbm_gbps: 1600        # a value of rules/platforms.yaml's selected chip
    waivers:
      - rule: transdata.count        # rule id, glob allowed
        ops: "trans_TransData_0*"     # op-name glob
        reason: "input layout conversion, unavoidable"
"""

from __future__ import annotations

import fnmatch
import json
import sys
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from advisor.errors import RulesError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib  # type: ignore[no-redef]


def builtin_rules_dir() -> Path:
    import rules as _rules_pkg

    return Path(_rules_pkg.__file__).parent


@dataclass
class Waiver:
    rule: str
    ops: str
    reason: str
    source: str

    def matches_rule(self, rule_id: str) -> bool:
        return fnmatch.fnmatchcase(rule_id, self.rule)

    def matches_op(self, op: str) -> bool:
        return fnmatch.fnmatchcase(op, self.ops)

    def to_dict(self) -> dict[str, str]:
        return {"rule": self.rule, "ops": self.ops, "reason": self.reason, "source": self.source}


@dataclass
class EffectiveRules:
    """The rules in force: values per rules file, the source of each value, and waivers."""

    values: dict[str, dict[str, Any]] = field(default_factory=dict)
    sources: dict[str, dict[str, str]] = field(default_factory=dict)
    waivers: list[Waiver] = field(default_factory=list)
    files: dict[str, Path] = field(default_factory=dict)
    platform_overrides: dict[str, Any] = field(default_factory=dict)
    platform_override_source: str = ""

    def for_kb(self, name: str | None) -> dict[str, Any]:
        if not name:
            return {}
        return self.values.get(name, {})


# ---------------------------------------------------------------------------------------------------------
def _schema_for(path: Path) -> Path:
    return path.parent / "schema" / f"{path.stem}.schema.json"


def _error_key(err: jsonschema.ValidationError) -> str:
    parts = [str(p) for p in err.absolute_path]
    return ".".join(parts)


def _validate(data: Any, schema: Mapping[str, Any], path: Path | str) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    errors = sorted(validator.iter_errors(data), key=lambda e: (len(list(e.absolute_path)), str(e.absolute_path)))
    if errors:
        err = errors[0]
        raise RulesError(path, _error_key(err), err.message)


def load_yaml(path: Path) -> Any:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as e:
        raise RulesError(path, "", f"cannot be read ({e.strerror})") from None
    except UnicodeDecodeError:
        raise RulesError(path, "", "not UTF-8 text") from None
    try:
        return yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else ""
        raise RulesError(path, where, f"invalid YAML ({getattr(e, 'problem', e)})") from None


def load_rules_file(path: Path) -> dict[str, Any]:
    """Read one rules file and validate it against ``schema/<name>.schema.json`` beside it (required)."""
    data = load_yaml(path)
    if not isinstance(data, dict):
        raise RulesError(path, "", "a rules file must be a mapping of names to values")
    schema_path = _schema_for(path)
    if not schema_path.exists():
        raise RulesError(path, "", f"no JSON Schema at {schema_path}")
    try:
        schema = json.loads(schema_path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise RulesError(schema_path, "", f"invalid JSON Schema ({e})") from None
    _validate(data, schema, path)
    return data


def _deep_merge(base: dict[str, Any], over: Mapping[str, Any], sources: dict[str, str], source: str,
                prefix: str = "") -> None:
    for key, value in over.items():
        dotted = f"{prefix}{key}"
        if isinstance(value, Mapping) and isinstance(base.get(key), dict):
            _deep_merge(base[key], value, sources, source, dotted + ".")
        else:
            base[key] = value
            sources[dotted] = source


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
        "chip": {"type": "string"},
        "waivers": {
            "type": "array",
            "items": {
                "type": "object",
                "required": ["rule", "reason"],
                "additionalProperties": False,
                "properties": {
                    "rule": {"type": "string", "minLength": 1},
                    "ops": {"type": "string", "minLength": 1},
                    "reason": {"type": "string", "minLength": 1},
                },
            },
        },
    },
}


def _read_pyproject(path: Path) -> dict[str, Any] | None:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as e:
        raise RulesError(path, "", f"cannot be read ({e})") from None
    except tomllib.TOMLDecodeError as e:
        raise RulesError(path, "", f"invalid TOML ({e})") from None
    section = data.get("tool", {}).get("advisor")
    return section if isinstance(section, dict) else None


def find_pyproject(start: Path) -> Path | None:
    """The nearest ``pyproject.toml`` with a ``[tool.advisor]`` table, from ``start`` upwards."""
    for d in [start, *start.parents]:
        candidate = d / "pyproject.toml"
        if candidate.is_file():
            try:
                if "[tool.advisor" in candidate.read_text(encoding="utf-8", errors="replace"):
                    return candidate
            except OSError:
                return None
    return None


def load_effective_rules(
    rules_dirs: Iterable[Path],
    override_file: Path | None = None,
    pyproject: Path | None = None,
) -> EffectiveRules:
    """Load every rules file in ``rules_dirs``, then apply pyproject and ``--rules`` overrides, re-validating."""
    eff = EffectiveRules()
    for d in rules_dirs:
        for path in sorted(Path(d).glob("*.yaml")):
            name = path.stem
            data = load_rules_file(path)
            eff.values[name] = data
            eff.sources[name] = _leaf_sources(data, str(path))
            eff.files[name] = path

    layers: list[tuple[Path, dict[str, Any]]] = []
    if pyproject is not None:
        section = _read_pyproject(pyproject)
        if section:
            layers.append((pyproject, section))
    if override_file is not None:
        data = load_yaml(override_file)
        if data is None:
            data = {}
        if not isinstance(data, dict):
            raise RulesError(override_file, "", "an override file must be a mapping (rules:, platform:, waivers:)")
        layers.append((override_file, data))

    for path, layer in layers:
        _validate(layer, _OVERRIDE_SCHEMA, path)
        label = f"{path}" if path.name != "pyproject.toml" else f"{path} [tool.advisor]"
        for name, values in layer.get("rules", {}).items():
            if name not in eff.values:
                raise RulesError(path, f"rules.{name}", f"unknown rules file '{name}' (known: "
                                 + ", ".join(sorted(eff.values)) + ")")
            merged = json.loads(json.dumps(eff.values[name]))
            _deep_merge(merged, values, eff.sources[name], label)
            schema = json.loads(_schema_for(eff.files[name]).read_text(encoding="utf-8"))
            try:
                _validate(merged, schema, path)
            except RulesError as e:
                raise RulesError(path, f"rules.{name}.{e.key}".rstrip("."), e.problem) from None
            eff.values[name] = merged
        if "platform" in layer:
            eff.platform_overrides.update(layer["platform"])
            eff.platform_override_source = label
        if "chip" in layer:
            eff.platform_overrides["soc"] = layer["chip"]
            eff.platform_override_source = label
        for w in layer.get("waivers", []):
            eff.waivers.append(Waiver(rule=w["rule"], ops=w.get("ops", "*"), reason=w["reason"], source=label))
    return eff
