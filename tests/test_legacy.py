"""Legacy msadvisor ecosystem knowledge bases run unchanged through advisor.engine.msadvisor_ecosystem.load_ecosystem.

The modules below are written the way the published msadvisor ecosystem modules are: evaluate(data_path, parameter)
with the parameter as a JSON string, sibling imports, print() noise, a JSON string result."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import pandas as pd
import pytest

from advisor.common.errors import InputError
from advisor.config.loader import EffectiveRules, Waiver
from advisor.engine import kb_engine as engine
from advisor.engine.msadvisor_ecosystem import NO_ESTIMATE, load_ecosystem, slug
from advisor.ingest.normalize import finalize_ops
from advisor.model import Meta, Profile
from advisor.pipeline import score

RESULT_HELPERS = '''
import json

class ExtendResult:
    def __init__(self):
        self.type = "0"
        self.extend_title = ""
        self.data_type = []
        self.key = []
        self.value = []

class Result:
    def __init__(self):
        self.class_type = "0"
        self.error_code = "0"
        self.summary = ""
        self.extend_result = []

    def generate(self):
        extend = [{"type": e.type, "extendTitle": e.extend_title, "dataType": e.data_type, "key": e.key,
                   "value": e.value} for e in self.extend_result]
        return json.dumps({"classType": self.class_type, "errorCode": self.error_code, "summary": self.summary,
                           "extendResult": extend}, indent="\\t")
'''

MODEL = '''
import csv
import json
import os

from result_helpers import ExtendResult, Result


def evaluate(data_path, parameter):
    print("noise from a legacy module")
    topk = json.loads(parameter).get("topk", 5)
    with open(os.path.join(data_path, "op_summary.csv")) as fh:
        rows = [r for r in csv.DictReader(fh) if float(r["Task Duration(us)"]) > 100]
    rows.sort(key=lambda r: -float(r["Task Duration(us)"]))
    result = Result()
    result.class_type = "0"
    result.error_code = "0"
    result.summary = "Operators need to be optimized"
    table = ExtendResult()
    table.type = "1"
    table.extend_title = "Slow operators"
    table.key = ["Op Name", "Duration(us)", "advice"]
    table.data_type = ["0", "2", "0"]
    table.value = [[r["Op Name"], r["Task Duration(us)"], "check its tiling"] for r in rows[:topk]]
    result.extend_result.append(table)
    tips = ExtendResult()
    tips.type = "0"
    tips.extend_title = "General advice"
    tips.data_type = ["0"]
    tips.value = ["Use a fused operator", "Keep shapes static"]
    result.extend_result.append(tips)
    source = ExtendResult()
    source.type = "2"
    source.extend_title = "Where"
    source.value = ["model.py line 12"]
    result.extend_result.append(source)
    return result.generate()
'''

OPTIMIZED = '''
import json

def evaluate(data_path, parameter="{}"):
    return json.dumps({"classType": "1", "errorCode": "1", "summary": "All operators are well optimized",
                       "extendResult": []})
'''

CRASH = '''
def evaluate(data_path, parameter):
    raise ValueError("bad data in " + data_path)
'''

QUITTER = '''
import os

def evaluate(data_path, parameter):
    print("Parameter 'cube_fops' is missing, please collect PipeUtilization")
    os._exit(0)
'''

ONE_ARG = '''
import json

def Evaluate(datapath):
    return json.dumps({"classType": "1", "errorCode": "0", "summary": "Environment needs tuning",
                       "extendResult": [{"type": "1", "extendTitle": "Settings", "dataType": ["0", "0"],
                                         "key": ["option", "value"], "value": [["TASK_QUEUE_ENABLE", "1"]]}]})
'''

SLEEPER = '''
import time

def evaluate(data_path, parameter):
    time.sleep(30)
'''


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(textwrap.dedent(text), encoding="utf-8")
    return path


@pytest.fixture()
def ecosystem(tmp_path: Path) -> Path:
    root = tmp_path / "kb"
    write(root / "src" / "model.py", MODEL)
    write(root / "src" / "result_helpers.py", RESULT_HELPERS)
    write(root / "ok" / "optimized.py", OPTIMIZED)
    write(root / "crash" / "crash.py", CRASH)
    write(root / "quit" / "quitter.py", QUITTER)
    write(root / "env" / "runenv.py", ONE_ARG)
    eco = {"model_list": [
        {"model_name": "model", "session_list": [{"python_model_path": "src", "parameter": {"topk": 2}}]},
        {"model_name": "optimized", "session_list": [{"python_model_path": "ok"}]},
        {"model_name": "crash", "session_list": [{"python_model_path": "crash/crash.py"}]},
        {"model_name": "quitter", "session_list": [{"python_model_path": "quit"}]},
        {"model_name": "Run Env", "session_list": [{"python_model_path": "env/runenv.py"}]},
    ]}
    path = root / "ecosystem.json"
    path.write_text(json.dumps(eco), encoding="utf-8")
    return path


@pytest.fixture()
def data_dir(tmp_path: Path) -> Path:
    d = tmp_path / "data"
    d.mkdir()
    (d / "op_summary.csv").write_text("Op Name,OP Type,Task Duration(us)\nconv1,Conv2D,350.5\nrelu1,Relu,20\n"
                                      "matmul7,MatMul,1200.25\nadd3,Add,180\n", encoding="utf-8")
    return d


def profile_for(source: Path) -> Profile:
    ops = finalize_ops(pd.DataFrame({"name": ["conv1"], "type": ["Conv2D"], "core": "AI_CORE", "start_us": [0.0],
                                     "duration_us": [350.5]}))
    return Profile(ops=ops, meta=Meta(source=str(source)))


def run(classes: list[type], source: Path) -> tuple[list, dict[str, engine.KBStatus]]:
    infos = [engine.KBInfo(cls, "ecosystem", "ecosystem.json", "") for cls in classes]
    findings, statuses = engine.run(infos, profile_for(source), None, EffectiveRules(), {})
    return findings, {s.id: s for s in statuses}


def test_one_knowledge_base_per_model(ecosystem: Path) -> None:
    classes = load_ecosystem(ecosystem)
    assert [c.id for c in classes] == ["legacy-model", "legacy-optimized", "legacy-crash", "legacy-quitter",
                                       "legacy-run-env"]
    assert classes[0].rules[0].id == "legacy-model.result"
    assert classes[0].sessions[0][0] == (ecosystem.parent / "src" / "model.py").resolve()
    assert slug("Compute_bound identific") == "compute-bound-identific"


def test_results_become_findings_and_failures_are_isolated(ecosystem: Path, data_dir: Path,
                                                           capfd: pytest.CaptureFixture[str]) -> None:
    findings, status = run(load_ecosystem(ecosystem), data_dir)
    assert status["legacy-model"].status == "ok"
    model = [f for f in findings if f.kb == "legacy-model"]
    assert [f.title for f in model] == ["Slow operators", "General advice", "Where"]
    table = model[0]
    # topk=2 from the session parameter, handed to the module as a JSON string
    assert table.ops == ["matmul7", "conv1"]
    assert table.evidence["table"] == {"columns": ["Op Name", "Duration(us)", "advice"],
                                       "rows": [["matmul7", 1200.25, "check its tiling"],
                                                ["conv1", 350.5, "check its tiling"]]}
    assert table.evidence["scope"] == "op" and table.evidence["summary"] == "Operators need to be optimized"
    assert all(f.severity == "major" and f.estimated_saving_us == 0 and f.basis == NO_ESTIMATE for f in model)
    tips = model[1]
    assert tips.evidence["table"]["rows"] == [["Use a fused operator"], ["Keep shapes static"]]
    assert "Use a fused operator" in tips.recommendation
    assert model[2].evidence["kind"] == "details" and model[2].evidence["table"]["rows"] == [["model.py line 12"]]

    # well optimized: no finding, a note
    assert status["legacy-optimized"].status == "ok" and status["legacy-optimized"].findings == 0
    assert status["legacy-optimized"].notes == ["optimized.py: All operators are well optimized"]

    assert status["legacy-crash"].status == "failed"
    assert "ValueError: bad data in" in status["legacy-crash"].reason

    # os._exit in the module: reported with what it printed, and the process survives
    assert status["legacy-quitter"].status == "failed"
    assert "without returning a result" in status["legacy-quitter"].reason
    assert "cube_fops' is missing" in status["legacy-quitter"].reason

    env = [f for f in findings if f.kb == "legacy-run-env"]
    assert len(env) == 1 and env[0].evidence["scope"] == "model"
    assert env[0].evidence["table"]["rows"] == [["TASK_QUEUE_ENABLE", "1"]]

    # the modules' print() never reaches our stdout (it would corrupt a JSON report)
    assert "noise from a legacy module" not in capfd.readouterr().out


def test_legacy_findings_can_be_waived(ecosystem: Path, data_dir: Path) -> None:
    findings, _ = run(load_ecosystem(ecosystem)[:1], data_dir)
    kept, waived = score.apply_waivers(findings, [Waiver("legacy-model.*", "matmul*", "known", "my.yaml")])
    assert waived[0].ops == ["matmul7"]
    assert next(f for f in kept if f.title == "Slow operators").ops == ["conv1"]


def test_a_module_past_its_time_limit_is_killed(tmp_path: Path, data_dir: Path) -> None:
    write(tmp_path / "slow" / "sleeper.py", SLEEPER)
    eco = tmp_path / "ecosystem.json"
    eco.write_text(json.dumps({"model_list": [{"model_name": "sleeper", "session_list": [
        {"python_model_path": "slow"}]}]}), encoding="utf-8")
    cls = load_ecosystem(eco)[0]
    cls.time_limit_s = 2.0
    _, status = run([cls], data_dir)
    assert status["legacy-sleeper"].status == "failed"
    assert "ran past" in status["legacy-sleeper"].reason


@pytest.mark.parametrize(("content", "problem"), [
    ("{not json", "invalid JSON"),
    ('{"models": []}', "no 'model_list'"),
    ('{"model_list": [{"session_list": []}]}', "has no model_name"),
    ('{"model_list": [{"model_name": "x", "session_list": [{"python_model_path": "nowhere"}]}]}',
     "does not lead to a Python file"),
    ('{"model_list": [{"model_name": "x", "session_list": [{"parameter": 3}]}]}', "parameter is not an object"),
])
def test_bad_ecosystem_files_are_input_errors(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "ecosystem.json"
    path.write_text(content, encoding="utf-8")
    with pytest.raises(InputError, match=problem):
        load_ecosystem(path)
    with pytest.raises(InputError, match="no such file"):
        load_ecosystem(tmp_path / "missing.json")
