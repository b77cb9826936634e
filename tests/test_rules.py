"""Rules as data: schema validation at load, one-line errors, override layers with sources, waivers, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from click.testing import CliRunner

from advisor.cli import main
from advisor.common.errors import RulesError
from advisor.config.loader import builtin_rules_dir, find_pyproject, load_effective_rules, load_rules_file

SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "additionalProperties": False,
    "required": ["max_count", "severity"],
    "properties": {
        "max_count": {"type": "integer", "minimum": 0},
        "op_types": {"type": "array", "items": {"type": "string"}},
        "severity": {
            "type": "object",
            "additionalProperties": False,
            "properties": {"major": {"type": "number", "minimum": 0, "maximum": 1},
                           "minor": {"type": "number", "minimum": 0, "maximum": 1}},
        },
    },
}
DEFAULTS = "max_count: 2\nop_types: [TransData]\nseverity:\n  major: 0.05\n  minor: 0.01\n"


def rules_dir(root: Path, name: str = "demo", text: str = DEFAULTS, schema: dict | None = None) -> Path:
    d = root / "rules"
    (d / "schema").mkdir(parents=True, exist_ok=True)
    (d / f"{name}.yaml").write_text(text, encoding="utf-8")
    (d / "schema" / f"{name}.schema.json").write_text(json.dumps(schema or SCHEMA), encoding="utf-8")
    return d


def error_of(fn, *args, **kwargs) -> RulesError:  # type: ignore[no-untyped-def]
    with pytest.raises(RulesError) as info:
        fn(*args, **kwargs)
    return info.value


def test_builtin_rules_files_all_validate() -> None:
    # the run-time load skips validating the shipped files (this test is where they are checked)
    eff = load_effective_rules([builtin_rules_dir()])
    assert "platforms" in eff.values
    for name, path in eff.files.items():
        assert path.name == f"{name}.yaml"
        assert load_rules_file(path) == eff.values[name]


def test_a_plugin_rules_dir_is_validated_at_load(tmp_path: Path) -> None:
    d = rules_dir(tmp_path, text="max_count: many\nseverity: {}\n")
    err = error_of(load_effective_rules, [builtin_rules_dir(), d])
    assert err.key == "max_count" and "is not of type 'integer'" in err.problem


@pytest.mark.parametrize(("text", "key", "problem"), [
    ("max_count: many\nseverity: {}\n", "max_count", "is not of type 'integer'"),
    ("max_count: 2\nseverity: {major: 1.5}\n", "severity.major", "greater than the maximum of 1"),
    ("max_count: 2\nmax_cont: 3\nseverity: {}\n", "max_cont", "unknown key (allowed: max_count, op_types, severity)"),
    ("severity: {}\n", "max_count", "required key is missing"),
    ("max_count: 2\nop_types: [TransData, 3]\nseverity: {}\n", "op_types.1", "is not of type 'string'"),
])
def test_invalid_file_is_one_line_naming_file_key_and_problem(tmp_path: Path, text: str, key: str,
                                                              problem: str) -> None:
    d = rules_dir(tmp_path, text=text)
    err = error_of(load_rules_file, d / "demo.yaml")
    assert err.key == key
    assert problem in err.problem
    message = str(err)
    assert "\n" not in message
    assert message.startswith(str(d / "demo.yaml")) and f"'{key}'" in message


def test_yaml_syntax_error_names_the_line(tmp_path: Path) -> None:
    d = rules_dir(tmp_path, text="max_count: 2\nseverity: [\n  major: 1\n")
    err = error_of(load_rules_file, d / "demo.yaml")
    assert err.key.startswith("line ") and "invalid YAML" in err.problem


def test_missing_or_broken_schema(tmp_path: Path) -> None:
    d = rules_dir(tmp_path)
    (d / "other.yaml").write_text("a: 1\n", encoding="utf-8")
    assert "no JSON Schema" in error_of(load_effective_rules, [d]).problem
    (d / "schema" / "other.schema.json").write_text('{"type": "objekt"}', encoding="utf-8")
    assert "invalid JSON Schema" in error_of(load_effective_rules, [d]).problem


def test_same_rules_file_name_in_two_dirs_is_an_error(tmp_path: Path) -> None:
    a = rules_dir(tmp_path / "a")
    b = rules_dir(tmp_path / "b")
    err = error_of(load_effective_rules, [a, b])
    assert "already used by" in err.problem and err.path == str(b / "demo.yaml")


def test_layers_pyproject_then_rules_file_with_sources(tmp_path: Path) -> None:
    d = rules_dir(tmp_path)
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.advisor.rules.demo]\nmax_count = 3\nseverity = {major = 0.2}\n'
                         '[[tool.advisor.waivers]]\nrule = "demo.*"\nops = "trans_*"\nreason = "input layout"\n',
                         encoding="utf-8")
    override = tmp_path / "my.yaml"
    override.write_text("rules:\n  demo:\n    max_count: 5\n    op_types: [TransData, Transpose]\n"
                        "platform:\n  hbm_gbps: 1000\nwaivers:\n  - rule: demo.count\n    reason: expected\n",
                        encoding="utf-8")
    eff = load_effective_rules([d], override_file=override, pyproject=pyproject)
    assert eff.values["demo"] == {"max_count": 5, "op_types": ["TransData", "Transpose"],
                                  "severity": {"major": 0.2, "minor": 0.01}}
    src = eff.sources["demo"]
    assert src["max_count"] == str(override)
    assert src["severity.major"] == f"{pyproject} [tool.advisor]"
    assert src["severity.minor"] == str(d / "demo.yaml")
    assert eff.lookup("demo", "severity")[1].startswith("several")
    assert eff.lookup("demo", "max_count") == (5, str(override))
    assert [(w.rule, w.ops, w.reason) for w in eff.waivers] == [("demo.*", "trans_*", "input layout"),
                                                                 ("demo.count", "*", "expected")]
    assert eff.platform_overrides == {"hbm_gbps": 1000}
    assert eff.layers == [f"{pyproject} [tool.advisor]", str(override)]
    # the defaults are untouched by the layers
    assert load_rules_file(d / "demo.yaml")["max_count"] == 2


def test_invalid_override_values_name_the_override_file_and_key(tmp_path: Path) -> None:
    d = rules_dir(tmp_path)
    override = tmp_path / "my.yaml"
    override.write_text("rules:\n  demo:\n    severity: {major: -1}\n", encoding="utf-8")
    err = error_of(load_effective_rules, [d], override_file=override)
    assert (err.path, err.key) == (str(override), "rules.demo.severity.major")

    override.write_text("rules:\n  dmeo:\n    max_count: 1\n", encoding="utf-8")
    err = error_of(load_effective_rules, [d], override_file=override)
    assert err.key == "rules.dmeo" and "unknown rules file" in err.problem

    override.write_text("waivers:\n  - rule: demo.count\n", encoding="utf-8")
    err = error_of(load_effective_rules, [d], override_file=override)
    assert err.key == "waivers.0.reason" and err.problem == "required key is missing"

    override.write_text("rulez: {}\n", encoding="utf-8")
    assert error_of(load_effective_rules, [d], override_file=override).key == "rulez"

    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text("[tool.advisor.rules.demo]\nmax_count = -1\n", encoding="utf-8")
    err = error_of(load_effective_rules, [d], pyproject=pyproject)
    assert err.key == "tool.advisor.rules.demo.max_count"


def test_platform_overrides_are_validated_against_the_chip_schema(tmp_path: Path) -> None:
    override = tmp_path / "my.yaml"
    override.write_text("platform:\n  hbm_gbps: fast\n", encoding="utf-8")
    err = error_of(load_effective_rules, [builtin_rules_dir()], override_file=override)
    assert err.key == "platform.hbm_gbps"


def test_find_pyproject_takes_the_nearest_with_tool_advisor(tmp_path: Path) -> None:
    (tmp_path / "pyproject.toml").write_text("[tool.advisor.rules.demo]\nmax_count = 1\n", encoding="utf-8")
    inner = tmp_path / "proj" / "sub"
    inner.mkdir(parents=True)
    (tmp_path / "proj" / "pyproject.toml").write_text("[project]\nname = 'x'\n# advisor tool\n", encoding="utf-8")
    assert find_pyproject(inner) == tmp_path / "pyproject.toml"
    (tmp_path / "proj" / "pyproject.toml").write_text("[tool.advisor]\nchip = 'Ascend310P3'\n", encoding="utf-8")
    assert find_pyproject(inner) == tmp_path / "proj" / "pyproject.toml"


def test_find_pyproject_none_and_broken_toml(tmp_path: Path) -> None:
    found = find_pyproject(tmp_path)
    assert found is None or not found.is_relative_to(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.advisor\nchip = 1\n", encoding="utf-8")
    assert "invalid TOML" in error_of(find_pyproject, tmp_path).problem


# ---------------------------------------------------------------------------------------------------------
# advisor rules show
# ---------------------------------------------------------------------------------------------------------
def test_rules_show_json_yaml_and_terminal_with_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.advisor]\nchip = 'Ascend310P3'\n", encoding="utf-8")
    override = tmp_path / "my.yaml"
    override.write_text("platform:\n  hbm_gbps: 1000\nwaivers:\n  - rule: transdata.*\n    reason: known\n",
                        encoding="utf-8")
    runner = CliRunner()
    res = runner.invoke(main, ["rules", "show", "platforms", "--rules", str(override), "--format", "json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert list(data["rules"]) == ["platforms"]
    assert data["rules"]["platforms"]["sources"]["chips.Ascend310P3.hbm_gbps"] == "default"
    assert data["platform_overrides"] == {"values": {"hbm_gbps": 1000, "soc": "Ascend310P3"}, "source": "my.yaml"}
    assert data["waivers"][0]["reason"] == "known"
    assert data["layers"] == ["defaults", "pyproject.toml [tool.advisor]", "my.yaml"]

    res = runner.invoke(main, ["rules", "show", "platforms", "--format", "yaml"])
    assert res.exit_code == 0
    assert yaml.safe_load(res.output)["rules"]["platforms"]["values"]["default"]

    res = runner.invoke(main, ["rules", "show", "platforms", "--rules", str(override)])
    assert res.exit_code == 0
    assert "# default" in res.output
    assert "hbm_gbps: 1000" in res.output and "transdata.*  ops *: known" in res.output


def test_rules_show_errors_exit_2_with_one_line(tmp_path: Path) -> None:
    override = tmp_path / "bad.yaml"
    override.write_text("rules:\n  platforms:\n    default: 3\n", encoding="utf-8")
    res = CliRunner().invoke(main, ["rules", "show", "--rules", str(override)])
    assert res.exit_code == 2
    line = res.output.strip()
    assert "\n" not in line
    assert f"{override} at 'rules.platforms.default'" in line and "is not of type 'string'" in line
    res = CliRunner().invoke(main, ["rules", "show", "nosuchfile"])
    assert res.exit_code == 2 and "unknown rules file 'nosuchfile'" in res.output


def test_every_builtin_schema_is_a_valid_json_schema() -> None:
    """Built-in schemas skip the meta-schema check at load time (it is slow); this test does it instead."""
    import json

    import jsonschema

    from advisor.config.loader import builtin_rules_dir

    schemas = sorted((builtin_rules_dir() / "schema").glob("*.schema.json"))
    assert schemas
    for path in schemas:
        jsonschema.Draft202012Validator.check_schema(json.loads(path.read_text(encoding="utf-8")))
    names = {p.name.removesuffix(".schema.json") for p in schemas}
    assert {p.stem for p in builtin_rules_dir().glob("*.yaml")} <= names
