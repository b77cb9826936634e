"""Issue 30, class 1: the files ``advisor fix --atc-config`` writes are built from a saved report, which is untrusted
input. The ATC command runs, in a real bash with a fake ``atc`` on PATH, exactly one command with exactly the intended
argv; aipp.cfg and fusion_switch.cfg hold only lines of their grammar; no line break or control character from the
report reaches a line of its own.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from advisor.cli import main
from advisor.fix.atc_config import build, parse_aipp_text, render_aipp

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE_REPORT = ROOT / "reports" / "example.json"
BASH = shutil.which("bash")
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u061c]")
"""What no generated file may hold (TAB and LF excepted; LF only ends lines)."""
ONE_LINE_BREAKER = re.compile(r"[\x00-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\u061c\u2028\u2029]")
"""What a value from the report may not hold to be written on a line: the above, TAB, LF, the line separators."""
AIPP_LINE = re.compile(r'^(aipp_op \{|\}|  [a-z_0-9]+ : ("[^"\\\x00-\x1f]*"|-?[0-9.e+-]+|true|false|[A-Z0-9_]+|'
                       r"static|dynamic)|#[^\n]*)$")
"""A line of aipp.cfg: the block, one ``field : value`` of the field grammar, or a comment."""

pytestmark = pytest.mark.skipif(BASH is None, reason="bash not installed")

HOSTILE = st.text(st.sampled_from(list("ab;&|$`'\"\\<>(){}#!*?~ \t\n\r\x1b\x00\x07\x85\u202e\u2028=-:,./_")), max_size=30)
"""Shell and config metacharacters, line breaks of every kind, ESC, NUL, a bidi override."""

FUZZ = settings(max_examples=40, deadline=None, derandomize=True,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _report() -> dict:
    return json.loads(EXAMPLE_REPORT.read_text("utf-8"))


def _fake(bin_dir: Path, name: str) -> None:
    """A ``name`` on PATH that appends its argv (JSON, one line per call) to $CALLS."""
    bin_dir.mkdir(exist_ok=True)
    exe = bin_dir / name
    exe.write_text(f"#!{sys.executable}\nimport json, os, sys\n"
                   "with open(os.environ['CALLS'], 'a') as fh:\n"
                   "    fh.write(json.dumps([os.path.basename(sys.argv[0]), *sys.argv[1:]]) + '\\n')\n")
    exe.chmod(0o755)


def run_in_bash(script: str, tmp: Path, shell: str | None = BASH) -> list[list[str]]:
    """Run ``script`` with bash (or ``shell``) in an empty directory whose PATH holds only a fake ``atc`` and
    ``advisor``: any other command fails (stderr), any file it makes shows. Returns the calls of the fakes."""
    work = tmp / "work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir()
    bin_dir = tmp / "bin"
    for name in ("atc", "advisor"):
        _fake(bin_dir, name)
    calls = tmp / "calls.jsonl"
    calls.unlink(missing_ok=True)
    (tmp / "script.sh").write_text(script, encoding="utf-8")
    argv = [BASH, "--noprofile", "--norc"] if shell == BASH else [str(shell)]
    proc = subprocess.run([*argv, str(tmp / "script.sh")], cwd=work, capture_output=True,
                          text=True, env={"PATH": str(bin_dir), "CALLS": str(calls), "HOME": str(work)}, timeout=60)
    assert proc.returncode == 0 and proc.stderr == "", proc.stderr
    assert list(work.iterdir()) == [], "the script made files"
    return [json.loads(line) for line in calls.read_text("utf-8").splitlines()] if calls.exists() else []


def _check_files(files: dict[str, str]) -> None:
    """Every generated file: no control character; each line of its medium's grammar."""
    for name, text in files.items():
        assert not CONTROL.search(text), (name, text)
    lines = files["atc_command.txt"].rstrip("\n").split("\n")
    assert lines[-1].startswith("atc ") and all(line.startswith("# ") for line in lines[:-1]), lines
    if "aipp.cfg" in files:
        for line in files["aipp.cfg"].rstrip("\n").split("\n"):
            assert AIPP_LINE.match(line), line
    if "fusion_switch.cfg" in files:
        switch = json.loads(files["fusion_switch.cfg"])["Switch"]
        for passes in switch.values():
            assert all(re.fullmatch(r"[A-Za-z0-9_]+", k) and v in ("on", "off") for k, v in passes.items()), passes


# ---------------------------------------------------------------------------------------------------------
# the campaign's cases, through the CLI
# ---------------------------------------------------------------------------------------------------------
def test_newline_in_cann_version_and_recorded_command_runs_no_second_command(tmp_path: Path) -> None:
    report = _report()
    report["input"]["cann_version"] = "8.0.0\ntouch pwned_cann"
    build_ = report["graph"]["build"]
    build_["atc_cmdline"] = build_["atc_cmdline"].replace(
        "--fusion_switch_file=fusion_switch.cfg", "'--fusion_switch_file=a\ntouch pwned_cmd'")
    build_["atc_cmdline"] += " '--log=error\n$(touch pwned_sub)' --op_debug_level=0"
    (tmp_path / "r.json").write_text(json.dumps(report), "utf-8")
    out = tmp_path / "atc"
    result = CliRunner().invoke(main, ["fix", "--atc-config", str(tmp_path / "r.json"), "-o", str(out)],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    files = {p.name: p.read_text("utf-8") for p in out.iterdir()}
    _check_files(files)
    calls = run_in_bash(files["atc_command.txt"], tmp_path)
    if shutil.which("sh"):  # `sh atc_command.txt`, as a user runs it: the same single call
        assert run_in_bash(files["atc_command.txt"], tmp_path, shutil.which("sh")) == calls
    resolved = out.resolve()
    # the recorded build, the generated files, the added flag: nothing of the two poisoned options
    assert calls == [["atc", "--model=ssd_mish.aipp.onnx", "--framework=5", f"--output={resolved / 'ssd_mish_310p'}",
                      "--soc_version=Ascend310P3", "--input_shape=images:1,3,300,300", "--op_debug_level=0",
                      f"--fusion_switch_file={resolved / 'fusion_switch.cfg'}",
                      f"--insert_op_conf={resolved / 'aipp.cfg'}", "--enable_small_channel=1"]]
    assert "CANN version in the report holds a line break" in result.output
    assert "'fusion_switch_file' is not a plain --name=value" in result.output
    # stdout: one line per note, the newline shown, never acted on
    assert "\x1b" not in result.output and "\ntouch" not in result.output


def test_the_first_command_in_the_file_is_the_quoted_rewrite(tmp_path: Path) -> None:
    """``# first: advisor fix ...`` is rebuilt from the model path (quoted), not copied from the report."""
    report = _report()
    for f in report["findings"]:
        rewrite = ((f.get("fix") or {}).get("data") or {}).get("model_rewrite")
        if rewrite:
            rewrite["command"] = "advisor fix x.onnx\ntouch pwned"
    cfg = build(report, tmp_path, model="my model;$(id).onnx")
    first = next(line for line in cfg.files["atc_command.txt"].splitlines() if line.startswith("# first: "))
    calls = run_in_bash(first[len("# first: "):] + "\n", tmp_path)
    assert calls == [["advisor", "fix", "my model;$(id).onnx", "--apply", "aipp-preprocess", "-o",
                      "my model;$(id).aipp.onnx"]]
    assert calls[0][2] in shlex.split(cfg.command)[1][len("--model="):] or "--model=my model;$(id).aipp.onnx" in \
        shlex.split(cfg.command)
    assert all("\ntouch" not in r for r in cfg.rewrites)


def test_aipp_text_from_the_report_is_parsed_and_rendered_again(tmp_path: Path, insert_op_pb2) -> None:
    from google.protobuf import text_format

    text = ('# TODO constants\x1b[31m\n# note\u2028touch pwned\naipp_op {\n  aipp_mode : static\n'
            '  related_input_name : "in\\"put"\n  input_format : YUV400_U8 crop: true\n  src_image_size_w : 1e400\n'
            '}\ntouch pwned\naipp_op { related_input_rank : 1 input_format : "RGB888_U8" mean_chn_0 : 10 junk }\n')
    report = _report()
    for f in report["findings"]:
        if (f.get("fix") or {}).get("kind") == "aipp-config":
            f["fix"]["data"] = {"text": text}
    cfg = build(report, tmp_path)
    aipp = cfg.files["aipp.cfg"]
    assert aipp == ("# TODO constants\\x1b[31m\n# note\naipp_op {\n  aipp_mode : static\n  input_format : YUV400_U8\n"
                    "  crop : true\n}\naipp_op {\n  related_input_rank : 1\n  input_format : RGB888_U8\n"
                    "  mean_chn_0 : 10\n}\n")
    msg = text_format.Parse(aipp, insert_op_pb2.InsertNewOps())
    assert [op.related_input_rank for op in msg.aipp_op] == [0, 1]
    assert "touch" not in aipp
    notes = " ".join(cfg.notes)
    assert "related_input_name" in notes and "src_image_size_w" in notes and "junk" in notes


def test_merge_switch_file_names_are_checked(tmp_path: Path) -> None:
    user = tmp_path / "switch.cfg"
    user.write_text(json.dumps({"Switch": {"GraphFusion": {"ALL": "off", "Evil\nPass": "off", "X": "maybe"}}}))
    cfg = build(_report(), tmp_path / "out", merge_switch=user)
    switch = json.loads(cfg.files["fusion_switch.cfg"])["Switch"]
    assert switch["GraphFusion"]["ALL"] == "off" and "X" not in switch["GraphFusion"]
    assert not any("Evil" in k for k in switch["GraphFusion"])
    assert sum("left out" in n for n in cfg.notes) == 2


def test_output_folder_with_a_newline_is_refused(tmp_path: Path) -> None:
    (tmp_path / "r.json").write_text(EXAMPLE_REPORT.read_text("utf-8"), "utf-8")
    result = CliRunner().invoke(main, ["fix", "--atc-config", str(tmp_path / "r.json"), "-o",
                                       str(tmp_path / "a\ntouch x")])
    assert result.exit_code == 2 and result.stderr.count("\n") == 1 and "line break" in result.stderr
    assert not (tmp_path / "a\ntouch x").exists()


def test_aipp_numbers_outside_the_field_grammar_are_dropped() -> None:
    notes: list[str] = []
    text = render_aipp({"src_image_size_w": "nan", "src_image_size_h": float("inf"), "mean_chn_0": 2**40,
                        "var_reci_chn_0": "0x10", "min_chn_0": "1_0", "crop": "true\n", "load_start_pos_w": 8},
                       "r", notes)
    assert text == "aipp_op {\n  crop : true\n  load_start_pos_w : 8\n}\n"
    assert len(notes) == 5
    assert parse_aipp_text("aipp_op { a : 1 }\naipp_op { b : \"x\" }") == [{"a": "1"}, {"b": "x"}]


# ---------------------------------------------------------------------------------------------------------
# properties: whatever the report holds, one command with the argv shlex reads, files of their grammar
# ---------------------------------------------------------------------------------------------------------
@FUZZ
@given(cann=HOSTILE, chip=HOSTILE, value=HOSTILE, flag=HOSTILE, name=HOSTILE, comment=HOSTILE, model=HOSTILE)
def test_generated_atc_command_runs_exactly_one_command(tmp_path_factory: pytest.TempPathFactory, cann: str,
                                                         chip: str, value: str, flag: str, name: str, comment: str,
                                                         model: str) -> None:
    tmp = tmp_path_factory.mktemp("atc")
    report = _report()
    report["input"]["cann_version"] = cann
    report["input"]["chip"] = "Ascend310P3" + chip
    build_ = report["graph"]["build"]
    build_["atc_cmdline"] = (build_["atc_cmdline"] + " " + shlex.quote(f"--op_select_implmode={value}")
                             + " " + shlex.quote(f"--{name}=1"))
    for f in report["findings"]:
        fix = f.get("fix") or {}
        if fix.get("kind") == "aipp-config":
            fix["data"]["aipp_op"]["related_input_name"] = name
            fix["data"]["text"] = f"# {comment}\n" + fix["data"]["text"]
        if fix.get("kind") == "fusion-switch":
            fix["data"].setdefault("flags", []).append(f"--log={flag}")
            fix["data"]["Switch"]["GraphFusion"] = {name: "on"}
    cfg = build(report, tmp / "out", model=model + ".onnx" if model else None)
    _check_files(cfg.files)
    calls = run_in_bash(cfg.files["atc_command.txt"], tmp)
    assert len(calls) == 1 and calls[0] == shlex.split(cfg.command)
    args = calls[0][1:]
    assert all(a.startswith("--") and not CONTROL.search(a) for a in args)
    soc = next(a for a in args if a.startswith("--soc_version="))
    chip_name = ("Ascend310P3" + chip).strip()
    # a chip that is no soc_version name gives way to the one the OM recorded
    assert soc == "--soc_version=" + (chip_name if re.fullmatch(r"[A-Za-z0-9_.-]+", chip_name) else "Ascend310P3")
    if value and not ONE_LINE_BREAKER.search(value):
        assert f"--op_select_implmode={value}" in args
    if cfg.first:
        (first,) = run_in_bash(cfg.first + "\n", tmp)
        assert first[:2] == ["advisor", "fix"] and first[3:5] == ["--apply", "aipp-preprocess"]
        assert f"--model={first[-1]}" in args  # ATC builds what the rewrite writes
