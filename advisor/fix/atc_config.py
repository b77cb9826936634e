"""Turn the ATC-side fixes of an advisor JSON report into files ATC reads, and the command that uses them.

From ``findings[].fix``: ``fusion-switch`` -> ``fusion_switch.cfg`` (ATC ``--fusion_switch_file`` JSON, DOMAIN.md
2.2), ``aipp-config`` -> ``aipp.cfg`` (``--insert_op_conf`` prototext, ``domi.AippOpParams``), ``atc-option`` ->
flags; plus ``atc_command.txt`` with the ``atc`` call that uses them. Findings are taken in rank order, and when two
disagree (a pass both on and off, one flag with two values) the better-ranked one wins and a note says so.

What makes the files run on the user's toolchain:

* the command is the build the OM recorded (``graph.build.atc_cmdline``: model, framework, input shapes,
  soc_version and every other option kept), with the generated files and the added flags swapped in;
* every added option exists in the recorded CANN release (``rules/atc-options.yaml``) -- or, with no recorded
  release, the assumption is written above the command -- and options that only act on dynamic-shape graphs are
  added only to dynamic graphs;
* ``fusion_switch.cfg`` lists only passes of the target release's fusion config (``rules/fusion-passes.yaml``), and
  says (in ``atc_command.txt``) whether it replaces the build's own switch file or was merged with it
  (``--merge-switch``);
* ``aipp.cfg`` keeps the TODO comments of the findings (e.g. normalization constants the graph did not have), and
  when AIPP takes over preprocessing ops that are still in the model, the command builds the model those ops were
  removed from (``advisor fix MODEL --apply aipp-preprocess``): the OM then takes uint8 NHWC images.

The report is untrusted input (a saved file anyone can edit): nothing of it is copied into a file as it stands.
Every value is checked for the place it goes: a shell word is quoted (``escaping.shell``) and never holds a line
break or control character; an ``aipp_op`` field is re-rendered from its parsed value (enum, bool, number in range,
a name without quotes or controls), never copied as text; a fusion pass is a name of letters, digits and ``_`` set
to on or off; a comment is one line with controls made visible. A value that fails is left out with a note.
"""

from __future__ import annotations

import fnmatch
import json
import math
import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from advisor.common import escaping, safeload
from advisor.common.errors import InputError, OutputError

FUSION_FILE, AIPP_FILE, COMMAND_FILE = "fusion_switch.cfg", "aipp.cfg", "atc_command.txt"
SECTIONS = ("GraphFusion", "UBFusion")
MANAGED_FLAGS = ("model", "framework", "output", "soc_version", "fusion_switch_file", "insert_op_conf")
FRAMEWORKS = {".prototxt": 0, ".caffemodel": 0, ".air": 1, ".pb": 3, ".onnx": 5}
_NAME = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_-]{0,127}$")
"""An atc option or a fusion pass: letters, digits, ``_`` (and ``-`` inside an option name)."""
_INT32 = (-(2**31), 2**31 - 1)
_SOC = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
"""A chip name as ``--soc_version`` takes it (``Ascend310P3``); anything else becomes the placeholder."""

# domi.AippOpParams fields (metadef graph/proto/insert_op.proto): name -> kind; "+" marks repeated fields
_AIPP_ENUMS = {
    "aipp_mode": {"static", "dynamic"},
    "input_format": {"YUV420SP_U8", "XRGB8888_U8", "RGB888_U8", "YUV400_U8", "NC1HWC0DI_FP16", "NC1HWC0DI_S8",
                     "ARGB8888_U8", "YUYV_U8", "YUV422SP_U8", "AYUV444_U8", "RAW10", "RAW12", "RAW16", "RAW24",
                     "RGB16", "RGB20", "RGB24", "RGB8_IR", "RGB16_IR", "RGB24_IR"},
}
_AIPP_FIELDS: dict[str, str] = {
    "aipp_mode": "enum", "related_input_rank": "int", "related_input_name": "string", "input_edge_idx": "int+",
    "max_src_image_size": "int", "support_rotation": "bool", "input_format": "enum", "csc_switch": "bool",
    "cpadding_value": "float", "rbuv_swap_switch": "bool", "ax_swap_switch": "bool", "single_line_mode": "bool",
    "src_image_size_w": "int", "src_image_size_h": "int", "crop": "bool", "load_start_pos_w": "int",
    "load_start_pos_h": "int", "crop_size_w": "int", "crop_size_h": "int", "resize": "bool",
    "resize_output_w": "int", "resize_output_h": "int", "padding": "bool", "left_padding_size": "int",
    "right_padding_size": "int", "top_padding_size": "int", "bottom_padding_size": "int",
    **{f"mean_chn_{i}": "int" for i in range(4)}, **{f"min_chn_{i}": "float" for i in range(4)},
    **{f"var_reci_chn_{i}": "float+" for i in range(4)},
    **{f"matrix_r{r}c{c}": "int+" for r in range(3) for c in range(3)},
    **{f"output_bias_{i}": "int+" for i in range(3)}, **{f"input_bias_{i}": "int+" for i in range(3)},
    "raw_rgbir_to_f16_n": "int",
}


def quote(arg: str) -> str:
    """Shell-quote one argument of the generated command (one place, so the shared escaping function of the
    hostile-input work can replace it)."""
    return escaping.shell(arg)


@dataclass
class AtcConfig:
    """The files to write (name -> text), the atc command, and what was merged, skipped or conflicting."""

    files: dict[str, str] = field(default_factory=dict)
    command: str = ""
    notes: list[str] = field(default_factory=list)
    sources: dict[str, list[str]] = field(default_factory=dict)
    rewrites: list[str] = field(default_factory=list)
    first: str = ""
    """The ``advisor fix`` command that builds the model ATC must take (AIPP took over its preprocessing), quoted."""
    assumptions: list[str] = field(default_factory=list)
    """Statements the command rests on that the report could not confirm (CANN release, chip, switch file)."""

    @property
    def empty(self) -> bool:
        return not self.files


@dataclass
class Target:
    """What the files are built for, from the report."""

    cann: str | None
    soc: str | None
    dynamic: bool | None
    cmdline: str
    graph_source: str | None
    context: str
    options: dict[str, str] = field(default_factory=dict)
    """The recorded command line's options that are plain ``--name=value`` (see :func:`_recorded_options`)."""


def load_report(path: Path) -> dict[str, Any]:
    """An advisor JSON report (the ``analyze --format json`` output)."""
    data = safeload.load_json(path)  # bounded, regular files only
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise InputError(path, "not an advisor report: no 'findings' list")
    return data


# ---------------------------------------------------------------------------------------------------------
# rules data: options by CANN release, fusion passes by release
# ---------------------------------------------------------------------------------------------------------
@lru_cache(maxsize=1)
def _options() -> dict[str, Any]:
    from advisor.config.loader import builtin_rules_dir, load_rules_file

    return load_rules_file(builtin_rules_dir() / "atc-options.yaml")["options"]


@lru_cache(maxsize=1)
def _passes() -> dict[str, Any]:
    from advisor.config.loader import builtin_rules_dir, load_rules_file

    return load_rules_file(builtin_rules_dir() / "fusion-passes.yaml")


def _release(version: object) -> tuple[int, int] | None:
    from advisor.platform import cann_release

    return cann_release(version)


def _plain(value: object, what: str, notes: list[str] | None) -> str | None:
    """``value`` when it is a string without line breaks, controls or bidi overrides; else None, with a note when
    it was a string (such a value from a report is never a version, a chip, a path or a tensor name)."""
    if not isinstance(value, str):
        return None
    if escaping.has_controls(value):
        if notes is not None:
            notes.append(f"{what} in the report holds a line break or control character; ignored "
                         f"({escaping.terminal_line(value)[:80]})")
        return None
    return value


def _target(report: dict[str, Any], notes: list[str] | None = None) -> Target:
    inp = report.get("input") if isinstance(report.get("input"), dict) else {}
    graph = report.get("graph") if isinstance(report.get("graph"), dict) else {}
    build = graph.get("build") if isinstance(graph.get("build"), dict) else {}  # type: ignore[union-attr]
    cmdline = build.get("atc_cmdline") if isinstance(build.get("atc_cmdline"), str) else ""
    dynamic = build.get("dynamic_shape") if isinstance(build.get("dynamic_shape"), bool) else None
    chip = _plain(inp.get("chip") or build.get("soc_version"), "the chip", notes)  # type: ignore[union-attr]
    soc = _soc_version(chip)
    if soc is None and chip and chip.strip() and not chip.strip().endswith("-class") and notes is not None:
        notes.append(f"the chip in the report ({escaping.terminal_line(chip)[:60]!r}) is not a --soc_version name; "
                     "ignored")
    return Target(cann=_plain(inp.get("cann_version"), "the CANN version", notes),  # type: ignore[union-attr]
                  soc=soc, dynamic=dynamic, cmdline=cmdline or "",
                  graph_source=_plain(graph.get("source"), "the graph source", notes),  # type: ignore[union-attr]
                  context=str(inp.get("context") or "unknown"),  # type: ignore[union-attr]
                  options=_recorded_options(cmdline or "", notes))


# ---------------------------------------------------------------------------------------------------------
# build
# ---------------------------------------------------------------------------------------------------------
def build(report: dict[str, Any], out_dir: Path, model: str | None = None, merge_switch: Path | None = None
          ) -> AtcConfig:
    """Merge the report's ATC fixes into file texts and the atc command (nothing is written here)."""
    cfg = AtcConfig()
    if escaping.has_controls(Path(out_dir).resolve()):
        raise OutputError(out_dir, "holds a line break or control character: atc_command.txt could not name the "
                                   "generated files on one line (choose another -o)")
    target = _target(report, cfg.notes)
    switches: dict[str, dict[str, str]] = {s: {} for s in SECTIONS}
    owners: dict[tuple[str, str], str] = {}
    aipp_blocks: dict[str, str] = {}  # input key -> text
    flags: dict[str, str] = {}  # option name -> full flag
    model_inputs: dict[str, list[int]] = {}  # input name -> shape once AIPP's preprocessing ops are removed
    for finding in _ranked(report["findings"]):
        fix = finding.get("fix")
        if not isinstance(fix, dict):
            continue
        rule = str(finding.get("rule") or finding.get("title") or "?")
        kind, data = fix.get("kind"), fix.get("data") if isinstance(fix.get("data"), dict) else {}
        if kind == "fusion-switch":
            if _merge_switch(data, switches, owners, rule, cfg.notes):
                _add(cfg.sources, FUSION_FILE, rule)
            _merge_flags(data, flags, rule, cfg.notes)
        elif kind == "aipp-config":
            if _merge_aipp(data, aipp_blocks, rule, cfg.notes):
                _add(cfg.sources, AIPP_FILE, rule)
                _aipp_rewrite(data, cfg, model_inputs)
            _merge_flags(data, flags, rule, cfg.notes)  # e.g. --enable_small_channel=1 with a small-C input
        elif kind == "atc-option":
            if _merge_flags(data, flags, rule, cfg.notes):
                _add(cfg.sources, "flags", rule)
        elif kind == "onnx-rewrite":
            _add_rewrite(fix.get("command"), cfg, rule)
    out_dir = Path(out_dir)
    _check_passes(switches, target, cfg)
    replaced = _switch_origin(switches, target, merge_switch, cfg)
    if any(switches.values()):
        body = {"Switch": {s: dict(sorted(v.items())) for s, v in switches.items() if v}}
        cfg.files[FUSION_FILE] = json.dumps(body, indent=4) + "\n"
    if aipp_blocks:
        cfg.files[AIPP_FILE] = "".join(aipp_blocks.values())
    checked = _check_flags(flags, target, cfg)
    if cfg.files or checked:
        cfg.command = atc_command(report, out_dir, model, cfg.files, checked, cfg.notes, target, model_inputs, cfg)
        header = [_comment(line) for line in [*replaced, *cfg.assumptions]]
        if cfg.first:
            header.append(_comment(f"first: {cfg.first}"))
        cfg.files[COMMAND_FILE] = "\n".join([*header, cfg.command]) + "\n"
    return cfg


def _comment(text: str) -> str:
    """A ``#`` comment line of atc_command.txt: one line whatever the report held (controls made visible), so no
    part of it can become a command of its own."""
    return "# " + escaping.terminal_line(text)


def _add_rewrite(command: object, cfg: AtcConfig, rule: str, first: bool = False) -> None:
    """An ``advisor fix`` command the report suggests: shown to the user, never written into a file."""
    if not isinstance(command, str) or not command:
        return
    if _plain(command, f"{rule}: the suggested rewrite command", cfg.notes) is None or command in cfg.rewrites:
        return
    if first:
        cfg.rewrites.insert(0, command)
    else:
        cfg.rewrites.append(command)


def _add(sources: dict[str, list[str]], key: str, rule: str) -> None:
    if rule not in sources.setdefault(key, []):
        sources[key].append(rule)


def _ranked(findings: list[Any]) -> list[dict[str, Any]]:
    """Findings in rank order (report order when unranked)."""
    items = [f for f in findings if isinstance(f, dict)]
    return sorted(items, key=lambda f: f["rank"] if isinstance(f.get("rank"), int) else 1 << 30)


# ---------------------------------------------------------------------------------------------------------
# fusion switch
# ---------------------------------------------------------------------------------------------------------
def _merge_switch(data: dict[str, Any], switches: dict[str, dict[str, str]], owners: dict[tuple[str, str], str],
                  rule: str, notes: list[str]) -> bool:
    """Add one finding's pass settings; accepts data {"Switch": {...}} and the bare {"GraphFusion": ...} form."""
    block = data.get("Switch", data)
    used = False
    if not isinstance(block, dict):
        notes.append(f"{rule}: fusion-switch data has no Switch block; skipped")
        return False
    for section, passes in block.items():
        if section not in SECTIONS or not isinstance(passes, dict):
            continue
        for name, value in passes.items():
            value = str(value).strip().lower()
            if not _NAME.match(str(name)):
                notes.append(f"{rule}: {section}.{escaping.terminal_line(name)[:80]} is not a fusion pass name; "
                             "skipped")
                continue
            if value not in ("on", "off"):
                notes.append(f"{rule}: {section}.{name} = {escaping.terminal_line(value)[:40]!r} is not on/off; "
                             "skipped")
                continue
            have = switches[section].get(name)
            if have is not None and have != value:
                notes.append(f"{rule}: {section}.{name} '{value}' conflicts with '{have}' from "
                             f"{owners[(section, name)]}; kept '{have}'")
                continue
            switches[section][name] = value
            owners.setdefault((section, name), rule)
            used = True
    return used


def pass_release(cann: str | None) -> tuple[str, bool]:
    """The release whose fusion config checks the passes, and whether it is the target release itself."""
    releases = sorted(_passes()["releases"], key=lambda r: _release(r) or (0, 0))
    want = _release(cann)
    if want is not None:
        for r in releases:
            if _release(r) == want:
                return r, True
        below = [r for r in releases if (_release(r) or (0, 0)) <= want]
        return (below[-1] if below else releases[0]), False
    return releases[-1], False


def _check_passes(switches: dict[str, dict[str, str]], target: Target, cfg: AtcConfig) -> None:
    """Keep only passes of the target release's fusion config (checked release: see rules/fusion-passes.yaml)."""
    if not any(switches.values()):
        return
    data = _passes()
    release, exact = pass_release(target.cann)
    known = data["releases"][release]
    introduced = data["introduced"]
    want = _release(target.cann)
    for section, passes in switches.items():
        for name in list(passes):
            if name == "ALL":
                continue
            since = introduced.get(name)
            if want is not None and since is not None and want < (_release(since) or (0, 0)):
                del passes[name]
                cfg.notes.append(f"{section}.{name} dropped: it is first in CANN {since}'s fusion config, the target "
                                 f"is CANN {target.cann}")
            elif name not in set(known[section]):
                del passes[name]
                other = next((s for s in SECTIONS if s != section and name in set(known[s])), None)
                cfg.notes.append(f"{section}.{name} dropped: not a {section} pass of CANN {release}'s fusion config"
                                 + (f" (it is a {other} pass)" if other else ""))
    if not exact:
        cfg.assumptions.append(
            f"fusion passes checked against CANN {release}'s fusion config; the target is "
            f"{'CANN ' + target.cann if target.cann else 'an unknown CANN release'}: confirm each pass in "
            "<toolkit>/lib64/plugin/opskernel/fusion_pass/config/fusion_config.json")


def read_switch_file(path: Path) -> dict[str, dict[str, str]]:
    """A user's fusion switch file: the JSON form ({"Switch": {...}}) or the legacy ``Pass:off`` line form."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as e:
        raise InputError(path, f"cannot read the fusion switch file ({e.strerror or e})") from None
    out: dict[str, dict[str, str]] = {s: {} for s in SECTIONS}
    try:
        data = json.loads(text)
    except (json.JSONDecodeError, RecursionError):
        data = None
    if isinstance(data, dict):
        block = data.get("Switch", data)
        for section in SECTIONS:
            for name, value in (block.get(section) or {}).items():
                out[section][str(name)] = str(value).strip().lower()
        return out
    for line in text.splitlines():
        m = re.match(r"^\s*([A-Za-z0-9_]+)\s*:\s*(on|off)\s*$", line, re.I)
        if m:
            # the legacy form does not say graph or UB fusion: UB passes are Tbe*/*UbFusion* by convention
            section = "UBFusion" if re.match(r"(?i)a?tbe|.*ub", m.group(1)) else "GraphFusion"
            out[section][m.group(1)] = m.group(2).lower()
        elif line.strip() and not line.strip().startswith("#"):
            raise InputError(path, f"not a fusion switch file (line {line.strip()[:40]!r})")
    return out


def _switch_origin(switches: dict[str, dict[str, str]], target: Target, merge_switch: Path | None,
                   cfg: AtcConfig) -> list[str]:
    """Merge with the user's switch file when given; otherwise say that ours replaces the build's own."""
    recorded = target.options.get("fusion_switch_file")
    if not any(switches.values()):
        return []
    if merge_switch is not None:
        user = read_switch_file(merge_switch)
        for section in SECTIONS:
            for name, value in user[section].items():
                if not _NAME.match(name) or value not in ("on", "off"):
                    cfg.notes.append(f"{merge_switch}: {section}.{escaping.terminal_line(name)[:80]} = "
                                     f"{escaping.terminal_line(value)[:20]!r} is not a pass set to on/off; left out")
                    continue
                switches[section].setdefault(name, value)  # ours win where both set a pass
        return [f"fusion_switch.cfg = {merge_switch} merged with the advised passes: its settings are kept, the "
                "advised passes are 'on' (a pass setting overrides \"ALL\": \"off\")"]
    if recorded:
        return [f"fusion_switch.cfg REPLACES {recorded}, the switch file of the original build: passes it switched "
                "off (including \"ALL\": \"off\") are back at their defaults; run advisor fix --atc-config ... "
                f"--merge-switch {recorded} to keep its other settings"]
    return ["fusion_switch.cfg holds only the advised passes; every other pass keeps its default"]


# ---------------------------------------------------------------------------------------------------------
# flags
# ---------------------------------------------------------------------------------------------------------
def _merge_flags(data: dict[str, Any], flags: dict[str, str], rule: str, notes: list[str]) -> bool:
    """Add one finding's ``flags`` (or single ``flag``); the first value of an option wins."""
    raw = data.get("flags", [])
    if isinstance(raw, str):
        raw = [raw]
    if isinstance(data.get("flag"), str):
        raw = [*raw, data["flag"]]
    used = False
    for flag in raw:
        flag = str(flag).strip()
        m = re.match(r"^--([A-Za-z0-9_]+)(?:=(.*))?$", flag)
        if not m or escaping.has_controls(flag):
            notes.append(f"{rule}: '{escaping.terminal_line(flag)[:80]}' is not an atc option (--name=value); skipped")
            continue
        name = m.group(1)
        if name in ("fusion_switch_file", "insert_op_conf"):
            continue  # the generated command points at the generated files
        if name in MANAGED_FLAGS:
            notes.append(f"{rule}: --{name} is set by the generated command; '{flag}' skipped")
            continue
        if name in flags and flags[name] != flag:
            notes.append(f"{rule}: '{flag}' conflicts with '{flags[name]}'; kept the first")
            continue
        flags[name] = flag
        used = True
    return used


def _soc_match(soc: str | None, globs: list[str]) -> bool:
    return bool(soc) and any(fnmatch.fnmatchcase(str(soc).upper(), g.upper()) for g in globs)


def _check_flags(flags: dict[str, str], target: Target, cfg: AtcConfig) -> list[str]:
    """The added flags that exist for the target release and SoC and apply to this graph."""
    options = _options()
    have = _release(target.cann)
    kept: list[str] = []
    assumed: list[str] = []
    recorded = target.options
    for name, flag in flags.items():
        spec = options.get(name)
        value = flag.partition("=")[2]
        if spec is None:
            cfg.notes.append(f"{flag}: not an option advisor knows the CANN release of; kept as the finding gave it")
            kept.append(flag)
            continue
        since = str((spec.get("values") or {}).get(value, spec["since"]))
        if spec.get("dynamic_only") and target.dynamic is not True:
            cfg.notes.append(f"{flag} dropped: it acts on dynamic-shape graphs only, and this graph is "
                             + ("static" if target.dynamic is False else "not known to be dynamic"))
            continue
        if spec.get("socs") and not _soc_match(target.soc, spec["socs"]):
            cfg.notes.append(f"{flag} dropped: {target.soc or 'the chip'} is not one of {', '.join(spec['socs'])}")
            continue
        if spec.get("not_socs") and _soc_match(target.soc, spec["not_socs"]):
            cfg.notes.append(f"{flag} dropped: not available on {target.soc}")
            continue
        clash = [o for o in spec.get("exclusive_with") or [] if o in recorded]
        if clash:
            cfg.notes.append(f"{flag} dropped: the build uses --{clash[0]}, which excludes --{name}")
            continue
        if have is None:
            assumed.append(f"{flag} (CANN >= {since})")
        elif have < (_release(since) or (0, 0)):
            cfg.notes.append(f"{flag} dropped: CANN {target.cann} predates it (first in {since})")
            continue
        kept.append(flag)
    if assumed:
        cfg.assumptions.append("the CANN release of the build is unknown; these options assume: " + ", ".join(assumed))
    return kept


# ---------------------------------------------------------------------------------------------------------
# AIPP
# ---------------------------------------------------------------------------------------------------------
def _merge_aipp(data: dict[str, Any], blocks: dict[str, str], rule: str, notes: list[str]) -> bool:
    """Add one ``aipp_op`` block (one per model input; the first block for an input wins), with the comments
    (TODOs) of the finding's text kept above it. A finding that gives only text has it parsed and rendered again
    field by field: no line of the report's text reaches aipp.cfg as it stands."""
    params = data.get("aipp_op")
    text_in = data.get("text") if isinstance(data.get("text"), str) else ""
    comments = "".join(f"{escaping.terminal_line(line.strip())}\n" for line in text_in.splitlines()
                       if line.strip().startswith("#"))
    if isinstance(params, dict) and params:
        parsed = [params]
    elif "aipp_op" in text_in:
        parsed = parse_aipp_text(text_in, rule, notes)
    else:
        notes.append(f"{rule}: aipp-config fix has neither aipp_op parameters nor aipp_op text; skipped")
        return False
    used = False
    for block in parsed:
        text = render_aipp(block, rule, notes)
        key = _aipp_key(block)
        if key in blocks:
            if blocks[key] != comments + text:
                notes.append(f"{rule}: a different AIPP config for input {escaping.terminal_line(key)[:60]} came "
                             "from a better-ranked finding; skipped")
            continue
        blocks[key] = comments + text
        comments = ""  # the finding's comments head its first block
        used = True
    return used


def _aipp_key(params: dict[str, Any]) -> str:
    """The model input an ``aipp_op`` block is for (its name, else its rank; rank 0 when it says neither)."""
    value = params.get("related_input_name", params.get("related_input_rank", 0))
    return str(value[0] if isinstance(value, list) and value else value)


_AIPP_BLOCK = re.compile(r"aipp_op\s*\{([^{}]*)\}")
_AIPP_FIELD = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)\s*:\s*("(?:[^"\\\n]|\\.)*"|[^\s"{}#]+)')
_AIPP_COMMENT = re.compile(r"#[^\n]*")


def parse_aipp_text(text: str, rule: str = "", notes: list[str] | None = None) -> list[dict[str, Any]]:
    """The ``aipp_op { field : value ... }`` blocks of a protobuf text (``--insert_op_conf``), as field -> value
    (a list for a repeated field). A quoted value is unquoted; anything else in a block is left out with a note."""
    notes = notes if notes is not None else []
    blocks = []
    for m in _AIPP_BLOCK.finditer(text):
        body = _AIPP_COMMENT.sub(" ", m.group(1))
        params: dict[str, Any] = {}
        for f in _AIPP_FIELD.finditer(body):
            key, raw = f.group(1), f.group(2)
            value: Any = raw[1:-1] if raw.startswith('"') else raw
            params[key] = [*params[key], value] if isinstance(params.get(key), list) else (
                [params[key], value] if key in params else value)
        rest = _AIPP_FIELD.sub(" ", body).strip()
        if rest:
            notes.append(f"{rule}: aipp_op text not of the form 'field : value' left out: "
                         f"{escaping.terminal_line(rest)[:60]!r}")
        blocks.append(params)
    return blocks


def _aipp_rewrite(data: dict[str, Any], cfg: AtcConfig, model_inputs: dict[str, list[int]]) -> None:
    """AIPP does the preprocessing: the model handed to ATC must not do it again."""
    rewrite = data.get("model_rewrite")
    if not isinstance(rewrite, dict):
        return
    _add_rewrite(rewrite.get("command"), cfg, "aipp-preprocess", first=True)
    name, shape = rewrite.get("input"), rewrite.get("input_shape")
    if (isinstance(name, str) and _plain(name, "the AIPP input name", cfg.notes) is not None
            and ":" not in name and ";" not in name and isinstance(shape, list)
            and all(isinstance(d, int) and not isinstance(d, bool) for d in shape)):
        model_inputs[name] = shape


def render_aipp(params: dict[str, Any], rule: str = "", notes: list[str] | None = None) -> str:
    """``aipp_op {\\n  key : value\\n}`` in domi.AippOpParams field order as given; unknown fields are dropped."""
    notes = notes if notes is not None else []
    lines = []
    for key, value in params.items():
        kind = _AIPP_FIELDS.get(key)
        if kind is None:
            notes.append(f"{rule}: '{key}' is not an aipp_op field; skipped")
            continue
        values = value if isinstance(value, list) else [value]
        if not kind.endswith("+") and len(values) != 1:
            notes.append(f"{rule}: aipp_op.{key} takes one value; skipped")
            continue
        for v in values:
            text = _aipp_value(kind.rstrip("+"), key, v)
            if text is None:
                notes.append(f"{rule}: aipp_op.{key} = {v!r} does not fit the field; skipped")
                continue
            lines.append(f"  {key} : {text}")
    return "aipp_op {\n" + "\n".join(lines) + "\n}\n"


def _aipp_value(kind: str, key: str, v: Any) -> str | None:
    """The value as protobuf text for a field of ``kind``, or None when it does not fit the field's grammar."""
    if kind == "bool":
        if isinstance(v, bool):
            return "true" if v else "false"
        low = str(v).strip().lower()
        return low if low in ("true", "false") else None
    if kind == "enum":
        return str(v) if str(v) in _AIPP_ENUMS[key] else None
    if kind == "string":
        # a tensor name: the quotes of the text format hold it as long as it holds no quote, backslash or control
        text = str(v)
        if not text or len(text) > 256 or '"' in text or "\\" in text or escaping.has_controls(text):
            return None
        return f'"{text}"'
    if isinstance(v, str) and not re.fullmatch(r"\s*[-+]?(\d+\.?\d*|\.\d+)([eE][-+]?\d+)?\s*", v):
        return None  # "nan", "inf", "1_0", hex: not a protobuf text number
    try:
        num = float(v)
    except (TypeError, ValueError, OverflowError):
        return None
    if not math.isfinite(num):
        return None
    if kind == "int":
        if num != int(num) or not _INT32[0] <= num <= _INT32[1]:
            return None
        return str(int(num))
    return repr(num) if num != int(num) else str(int(num))


# ---------------------------------------------------------------------------------------------------------
# the atc command
# ---------------------------------------------------------------------------------------------------------
def _split(cmdline: str) -> list[str]:
    try:
        return shlex.split(cmdline)
    except ValueError:
        return cmdline.split()


def _options_in(cmdline: str) -> dict[str, str]:
    """``--name=value`` / ``--name value`` options of a command line (name -> value, "" for a bare flag)."""
    out: dict[str, str] = {}
    parts = _split(cmdline)
    for i, part in enumerate(parts):
        if not part.startswith("-"):
            continue
        key, sep, val = part.lstrip("-").partition("=")
        if not sep and i + 1 < len(parts) and not parts[i + 1].startswith("-"):
            val = parts[i + 1]
        out.setdefault(key, val)
    return out


def _recorded_options(cmdline: str, notes: list[str] | None) -> dict[str, str]:
    """The options of the OM's recorded atc command line that are plain ``--name=value``: a name of letters,
    digits, ``_`` and ``-``, a value without line breaks or controls. Others are left out with a note."""
    out: dict[str, str] = {}
    for name, value in _options_in(cmdline).items():
        if _NAME.match(name) and not escaping.has_controls(value):
            out[name] = value
        elif notes is not None:
            notes.append(f"the recorded atc option {escaping.terminal_line(name)[:60]!r} is not a plain --name=value "
                         "(odd name, line break or control character); left out of the command")
    return out


def _with_input_shapes(value: str, new: dict[str, list[int]]) -> str:
    """``--input_shape`` with the inputs AIPP now feeds replaced by their shapes in the rewritten model."""
    parts = []
    seen = set()
    for item in value.split(";"):
        name, sep, _ = item.rpartition(":")
        if sep and name in new:
            parts.append(f"{name}:{','.join(str(d) for d in new[name])}")
            seen.add(name)
        elif item:
            parts.append(item)
    parts += [f"{n}:{','.join(str(d) for d in s)}" for n, s in new.items() if n not in seen]
    return ";".join(parts)


def atc_command(report: dict[str, Any], out_dir: Path, model: str | None, files: dict[str, str], flags: list[str],
                notes: list[str], target: Target | None = None, model_inputs: dict[str, list[int]] | None = None,
                cfg: AtcConfig | None = None) -> str:
    """``atc ...``: the recorded build (model, framework, input shapes, soc_version, its options) with the generated
    files and the checked flags; a template with placeholders when the OM recorded no command line."""
    target = target or _target(report, notes)
    model_inputs = model_inputs or {}
    recorded = target.options
    model_arg = _plain(model, "the model path", notes) or recorded.get("model") or _model_from_report(report, target)
    if model_arg and model_inputs:
        model_arg = _aipp_model(model_arg, notes, cfg)
    if not model_arg:
        notes.append("no model in the report or on the command line: replace <model.onnx> in the command")
    model_arg = model_arg or "<model.onnx>"
    stem = Path(recorded["output"]).name if recorded.get("output") else (
        Path(model_arg).stem if not model_arg.startswith("<") else "model")
    soc = target.soc or _soc_version(recorded.get("soc_version"))
    if soc is None:
        notes.append("the report names no chip: replace <soc_version> (e.g. Ascend310P3) in the command")
    framework = recorded.get("framework") or str(FRAMEWORKS.get(Path(model_arg).suffix.lower(), 5))
    args: dict[str, str] = {"model": model_arg, "framework": framework, "output": str(out_dir.resolve() / stem),
                            "soc_version": soc or "<soc_version>"}
    skip = {"model", "framework", "output", "soc_version", "mode"}
    for name, value in recorded.items():
        if name in skip or name in args:
            continue
        if name == "fusion_switch_file" and FUSION_FILE in files:
            continue
        if name == "insert_op_conf" and AIPP_FILE in files:
            continue
        args[name] = value
    if "input_shape" in args and model_inputs:
        args["input_shape"] = _with_input_shapes(args["input_shape"], model_inputs)
    elif model_inputs and not target.cmdline:
        args["input_shape"] = _with_input_shapes("", model_inputs)
    if FUSION_FILE in files:
        args["fusion_switch_file"] = str(out_dir.resolve() / FUSION_FILE)
    if AIPP_FILE in files:
        args["insert_op_conf"] = str(out_dir.resolve() / AIPP_FILE)
    for flag in flags:
        name, _, value = flag[2:].partition("=")
        if name in args and args[name] != value:
            notes.append(f"--{name}={args[name]} of the original build replaced by {flag}")
        args[name] = value
    if not target.cmdline and cfg is not None:
        cfg.assumptions.append("the model graph recorded no atc command line: model, framework and input shapes "
                               "are placeholders or guesses; check them")
    return " ".join(["atc", *(quote(f"--{k}={v}") if v != "" else quote(f"--{k}") for k, v in args.items())])


def _aipp_model(model: str, notes: list[str], cfg: AtcConfig | None) -> str:
    """The model ATC builds once AIPP took over the preprocessing ops, and the quoted command that makes it."""
    rewritten = str(Path(model).with_name(Path(model).stem + ".aipp.onnx"))
    first = escaping.shell_command(["advisor", "fix", model, "--apply", "aipp-preprocess", "-o", rewritten])
    notes.append(f"AIPP takes over the preprocessing ops: build {rewritten} ({first}) instead of the original, "
                 "and feed the OM uint8 NHWC images")
    if cfg is not None:
        cfg.first = first
    return rewritten


def _model_from_report(report: dict[str, Any], target: Target) -> str | None:
    inp = report.get("input") if isinstance(report.get("input"), dict) else {}
    meta = report.get("meta") if isinstance(report.get("meta"), dict) else {}
    for cand in (inp.get("model"), meta.get("model"), target.graph_source):  # type: ignore[union-attr]
        if isinstance(cand, str) and not escaping.has_controls(cand) and Path(cand).suffix.lower() in FRAMEWORKS:
            return cand
    return None


def _soc_version(chip: object) -> str | None:
    """``Ascend310P3`` from 'Ascend310P3' or '310P3'; None when unknown or only a family ('Ascend910B-class')."""
    if not isinstance(chip, str) or not chip.strip():
        return None
    chip = chip.strip()
    if chip.endswith("-class") or not _SOC.match(chip):
        return None
    if re.match(r"^\d{3}", chip):
        return f"Ascend{chip}"
    return chip
