"""Turn the ATC-side fixes of an advisor JSON report into files ATC reads.

From ``findings[].fix``: ``fusion-switch`` -> ``fusion_switch.cfg`` (ATC ``--fusion_switch_file`` JSON, DOMAIN.md
2.2), ``aipp-config`` -> ``aipp.cfg`` (``--insert_op_conf`` prototext, ``domi.AippOpParams``), ``atc-option`` ->
flags; plus ``atc_command.txt`` with the ``atc`` call that uses them. Findings are taken in rank order, and when two
disagree (a pass both on and off, one flag with two values) the better-ranked one wins and a note says so.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from advisor.errors import InputError

FUSION_FILE, AIPP_FILE, COMMAND_FILE = "fusion_switch.cfg", "aipp.cfg", "atc_command.txt"
SECTIONS = ("GraphFusion", "UBFusion")
MANAGED_FLAGS = ("model", "framework", "output", "soc_version", "fusion_switch_file", "insert_op_conf")
FRAMEWORKS = {".prototxt": 0, ".caffemodel": 0, ".air": 1, ".pb": 3, ".onnx": 5}

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


@dataclass
class AtcConfig:
    """The files to write (name -> text), the atc command, and what was merged, skipped or conflicting."""

    files: dict[str, str] = field(default_factory=dict)
    command: str = ""
    notes: list[str] = field(default_factory=list)
    sources: dict[str, list[str]] = field(default_factory=dict)
    rewrites: list[str] = field(default_factory=list)

    @property
    def empty(self) -> bool:
        return not self.files


def load_report(path: Path) -> dict[str, Any]:
    """An advisor JSON report (the ``analyze --format json`` output)."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except IsADirectoryError:
        raise InputError(path, "is a directory, expected an advisor JSON report") from None
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(path, f"not a JSON report ({e})") from None
    if not isinstance(data, dict) or not isinstance(data.get("findings"), list):
        raise InputError(path, "not an advisor report: no 'findings' list")
    return data


def build(report: dict[str, Any], out_dir: Path, model: str | None = None) -> AtcConfig:
    """Merge the report's ATC fixes into file texts and the atc command (nothing is written here)."""
    cfg = AtcConfig()
    switches: dict[str, dict[str, str]] = {s: {} for s in SECTIONS}
    owners: dict[tuple[str, str], str] = {}
    aipp_blocks: dict[str, str] = {}  # input key -> text
    flags: dict[str, str] = {}  # option name -> full flag
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
            _merge_flags(data, flags, rule, cfg.notes)  # e.g. --enable_small_channel=1 with a small-C input
        elif kind == "atc-option":
            if _merge_flags(data, flags, rule, cfg.notes):
                _add(cfg.sources, "flags", rule)
        elif kind == "onnx-rewrite" and fix.get("command") and str(fix["command"]) not in cfg.rewrites:
            cfg.rewrites.append(str(fix["command"]))
    out_dir = Path(out_dir)
    if any(switches.values()):
        body = {"Switch": {s: dict(sorted(v.items())) for s, v in switches.items() if v}}
        cfg.files[FUSION_FILE] = json.dumps(body, indent=4) + "\n"
    if aipp_blocks:
        cfg.files[AIPP_FILE] = "".join(aipp_blocks.values())
    if cfg.files or flags:
        cfg.command = atc_command(report, out_dir, model, cfg.files, list(flags.values()), cfg.notes)
        cfg.files[COMMAND_FILE] = cfg.command + "\n"
    return cfg


def _add(sources: dict[str, list[str]], key: str, rule: str) -> None:
    if rule not in sources.setdefault(key, []):
        sources[key].append(rule)


def _ranked(findings: list[Any]) -> list[dict[str, Any]]:
    """Findings in rank order (report order when unranked)."""
    items = [f for f in findings if isinstance(f, dict)]
    return sorted(items, key=lambda f: f["rank"] if isinstance(f.get("rank"), int) else 1 << 30)


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
            if value not in ("on", "off"):
                notes.append(f"{rule}: {section}.{name} = {value!r} is not on/off; skipped")
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
        if not m:
            notes.append(f"{rule}: '{flag}' is not an atc option (--name=value); skipped")
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


def _merge_aipp(data: dict[str, Any], blocks: dict[str, str], rule: str, notes: list[str]) -> bool:
    """Add one ``aipp_op`` block (one per model input; the first block for an input wins)."""
    params = data.get("aipp_op")
    if isinstance(params, dict) and params:
        text = render_aipp(params, rule, notes)
        key = str(params.get("related_input_name", params.get("related_input_rank", 0)))
    elif isinstance(data.get("text"), str) and "aipp_op" in data["text"]:
        text = data["text"].strip() + "\n"
        m = re.search(r"related_input_(?:rank|name)\s*:\s*\"?([^\s\"]+)", text)
        key = m.group(1) if m else "0"
    else:
        notes.append(f"{rule}: aipp-config fix has neither aipp_op parameters nor aipp_op text; skipped")
        return False
    if key in blocks:
        if blocks[key] != text:
            notes.append(f"{rule}: a different AIPP config for input {key} came from a better-ranked finding; skipped")
        return False
    blocks[key] = text
    return True


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
    if kind == "bool":
        if isinstance(v, bool):
            return "true" if v else "false"
        low = str(v).strip().lower()
        return low if low in ("true", "false") else None
    if kind == "enum":
        return str(v) if str(v) in _AIPP_ENUMS[key] else None
    if kind == "string":
        return json.dumps(str(v))
    try:
        num = float(v)
    except (TypeError, ValueError):
        return None
    if kind == "int":
        return str(int(num)) if num == int(num) else None
    return repr(num) if num != int(num) else str(int(num))


def atc_command(report: dict[str, Any], out_dir: Path, model: str | None, files: dict[str, str], flags: list[str],
                notes: list[str]) -> str:
    """``atc --model=... --framework=... --output=... --soc_version=... --fusion_switch_file=... ...``."""
    inp = report.get("input") if isinstance(report.get("input"), dict) else {}
    meta = report.get("meta") if isinstance(report.get("meta"), dict) else {}
    graph = report.get("graph") if isinstance(report.get("graph"), dict) else {}
    if model is None:
        for cand in (inp.get("model"), meta.get("model"), graph.get("source")):  # type: ignore[union-attr]
            if isinstance(cand, str) and Path(cand).suffix.lower() in FRAMEWORKS:
                model = cand
                break
    if model is None:
        notes.append("no model in the report or on the command line: replace <model.onnx> in the command")
    model_arg = model or "<model.onnx>"
    framework = FRAMEWORKS.get(Path(model_arg).suffix.lower(), 5)
    output = str(out_dir.resolve() / (Path(model).stem if model else "model"))
    chip = inp.get("chip") or meta.get("chip")  # type: ignore[union-attr]
    soc = _soc_version(chip)
    if soc is None:
        notes.append("the report names no chip: replace <soc_version> (e.g. Ascend310P3) in the command")
    args = ["atc", f"--model={model_arg}", f"--framework={framework}", f"--output={output}",
            f"--soc_version={soc or '<soc_version>'}"]
    if FUSION_FILE in files:
        args.append(f"--fusion_switch_file={out_dir.resolve() / FUSION_FILE}")
    if AIPP_FILE in files:
        args.append(f"--insert_op_conf={out_dir.resolve() / AIPP_FILE}")
    args += flags
    return " ".join(a if a.startswith("<") or "=<" in a else shlex.quote(a) for a in args)


def _soc_version(chip: object) -> str | None:
    """``Ascend310P3`` from 'Ascend310P3' or '310P3'; None when unknown."""
    if not isinstance(chip, str) or not chip.strip():
        return None
    chip = chip.strip()
    if re.match(r"^\d{3}", chip):
        return f"Ascend{chip}"
    return chip
