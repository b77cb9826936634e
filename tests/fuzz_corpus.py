"""The hostile-input mutation corpus: real sample files from ``../shared/samples``, mutated at test time in a tmp dir,
one case per (sample file, mutation), covering every defect class of issue 14.

A case is checked at the layer that reads it (``check_case``): the reader either returns data that keeps the
model's promises (finite, non-negative durations) or raises :class:`advisor.common.errors.AdvisorError`; anything else --
another exception, a hang, a changed input -- is a failure. ``benchmarks/fuzz_long.py`` runs the same corpus (and
more seeds) through the CLI as a user would.
"""

from __future__ import annotations

import csv
import io
import json
import random
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.hostile import OM_JSON, PROF, SAMPLES, copy_tree, db_copy, db_exec, mini_tn

GE_TEXT = SAMPLES / ("hicann__oam-tools/test/st/msaicerr/res/ori_data/complie_path_train/aic_error/"
                     "ge_proto_00056_Build.txt")
TRACE = SAMPLES / ("mindspore-ai__mindinsight/tests/utils/resource/profiler/PROF_000001_20230818142704322_"
                   "COJGGGCANRMICFBC/device_0/timeline/msprof_0_2_1.json")
RULES = Path(__file__).resolve().parents[1] / "rules" / "memory.yaml"

HOSTILE_CELLS = ("inf", "-inf", "nan", "NaN", "1e308", "-1e308", "9" * 400, "-5", "-0.0", "", "N/A", "abc", "0x1f",
                 "\x1b]0;t\x07", "X[click](javascript:alert(1))", "$x$", "a" * 200_000, '"', "1,2", "\n", "\x00")
HOSTILE_JSON = (None, float("nan"), float("inf"), -1, 10**400, "x", [], {}, [None], {"a": None}, True, "\x1b[31m")


@dataclass
class Case:
    """One mutated input: ``target`` is what the reader is given; ``kind`` says which reader."""

    id: str
    defect: int
    """The class (1-13) of issue 14 this mutation exercises."""
    kind: str
    """profile | graph | rules | report"""
    build: Callable[[Path], Path]


# ---------------------------------------------------------------------------------------------------------
# byte-level mutations of one file
# ---------------------------------------------------------------------------------------------------------
def _truncate(frac: float) -> Callable[[bytes, random.Random], bytes]:
    return lambda b, _: b[: int(len(b) * frac)]


def _flip(n: int) -> Callable[[bytes, random.Random], bytes]:
    def f(b: bytes, rnd: random.Random) -> bytes:
        arr = bytearray(b)
        for _ in range(n):
            if arr:
                arr[rnd.randrange(len(arr))] = rnd.randrange(256)
        return bytes(arr)
    return f


BYTE_MUTATIONS: dict[str, tuple[int, Callable[[bytes, random.Random], bytes]]] = {
    "truncate-quarter": (13, _truncate(0.25)),
    "truncate-half": (13, _truncate(0.5)),
    "truncate-last-byte": (13, lambda b, _: b[:-1]),
    "empty": (5, lambda b, _: b""),
    "flip-1": (13, _flip(1)),
    "flip-64": (13, _flip(64)),
    "nul-bytes": (13, lambda b, _: b[: len(b) // 3] + b"\x00" * 64 + b[len(b) // 3:]),
    "utf16": (13, lambda b, _: b.decode("utf-8", "replace").encode("utf-16")),
    "latin1-garbage": (13, lambda b, _: b.replace(b"a", b"\xe9", 50)),
    "crlf": (13, lambda b, _: b.replace(b"\n", b"\r\n")),
    "bom": (13, lambda b, _: b"\xef\xbb\xbf" + b),
    "doubled": (13, lambda b, _: b + b),
}


def _json_mutations() -> dict[str, tuple[int, Callable[[bytes, random.Random], bytes]]]:
    deep = b"[" * 10000 + b"]" * 10000
    return {
        "deep-array": (1, lambda b, _: deep),
        "deep-wrapped": (1, lambda b, _: b'{"a": ' + deep + b', "b": ' + b + b"}"),
        "infinity": (3, lambda b, _: b.replace(b": 0", b": Infinity", 5).replace(b":0", b":-Infinity", 5)),
        "huge-number": (3, lambda b, _: b.replace(b": 1", b": 1" + b"0" * 400, 5).replace(b":1", b":1e999", 5)),
        "nulls": (7, lambda b, _: _json_replace(b, None)),
        "wrong-types": (7, lambda b, _: _json_replace(b, [None])),
        "top-level-null": (7, lambda b, _: b"null"),
        "top-level-list": (7, lambda b, _: b"[" + b + b"]"),
        "object-empty": (5, lambda b, _: b"{}"),
    }


def _json_replace(b: bytes, value: object) -> bytes:
    """Every scalar of the document (when it parses) replaced by ``value`` at the first two levels."""
    try:
        doc = json.loads(b.decode("utf-8"))
    except (ValueError, UnicodeDecodeError):
        return b

    def walk(v: object, depth: int) -> object:
        if isinstance(v, dict):
            return {k: walk(x, depth + 1) for k, x in v.items()}
        if isinstance(v, list):
            return [walk(x, depth + 1) for x in v[:50]]
        return value if depth <= 3 else v

    return json.dumps(walk(doc, 0)).encode("utf-8")


# ---------------------------------------------------------------------------------------------------------
# CSV mutations (header and cells)
# ---------------------------------------------------------------------------------------------------------
def _csv_rows(b: bytes) -> list[list[str]]:
    return list(csv.reader(io.StringIO(b.decode("utf-8-sig", "replace"))))


def _csv_bytes(rows: list[list[str]]) -> bytes:
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(rows)
    return buf.getvalue().encode("utf-8")


def _cell_mutation(column: str, value: str) -> Callable[[bytes, random.Random], bytes]:
    def f(b: bytes, rnd: random.Random) -> bytes:
        rows = _csv_rows(b)
        if not rows or column not in rows[0] or len(rows) < 2:
            return b
        i = rows[0].index(column)
        for r in rnd.sample(range(1, len(rows)), min(3, len(rows) - 1)):
            if i < len(rows[r]):
                rows[r][i] = value
        return _csv_bytes(rows)
    return f


def _header_mutation(op: str) -> Callable[[bytes, random.Random], bytes]:
    def f(b: bytes, rnd: random.Random) -> bytes:
        rows = _csv_rows(b)
        if not rows:
            return b
        h = rows[0]
        if op == "duplicate" and "Duration(us)" in h:
            for name in ("Start Time(us)", "Task Start Time(us)", "Name", "Op Name"):
                if name in h:
                    h[h.index(name)] = "Duration(us)"
                    break
        elif op == "drop-required":
            keep = [i for i, c in enumerate(h) if c not in ("Name", "Op Name", "Duration(us)", "Task Duration(us)",
                                                          "OP Type", "Type", "Total Time(us)")]
            rows = [[r[i] for i in keep if i < len(r)] for r in rows]
        elif op == "blank":
            rows[0] = [""] * len(h)
        elif op == "shuffle":
            order = list(range(len(h)))
            rnd.shuffle(order)
            rows = [[r[i] if i < len(r) else "" for i in order] for r in rows]
        elif op == "extra-fields":
            rows = [rows[0]] + [r + ["x", "y"] for r in rows[1:]]
        elif op == "short-rows":
            rows = [rows[0]] + [r[: len(r) // 2] for r in rows[1:]]
        return _csv_bytes(rows)
    return f


def _csv_mutations(numeric: str, text: str) -> dict[str, tuple[int, Callable[[bytes, random.Random], bytes]]]:
    out: dict[str, tuple[int, Callable[[bytes, random.Random], bytes]]] = {}
    for j, v in enumerate(HOSTILE_CELLS):
        out[f"num-cell-{j}"] = (3 if j < 9 else 13, _cell_mutation(numeric, v))
        out[f"text-cell-{j}"] = (9 if j in (13, 14, 15) else 13, _cell_mutation(text, v))
    for op, defect in (("duplicate", 4), ("drop-required", 5), ("blank", 5), ("shuffle", 13), ("extra-fields", 13),
                       ("short-rows", 13)):
        out[f"header-{op}"] = (defect, _header_mutation(op))
    return out


# ---------------------------------------------------------------------------------------------------------
# the corpus
# ---------------------------------------------------------------------------------------------------------
def _file_case(cid: str, defect: int, kind: str, base: Callable[[Path], Path], rel: str,
               mutate: Callable[[bytes, random.Random], bytes], seed: int, target_rel: str | None = None) -> Case:
    def build(tmp: Path) -> Path:
        root = base(tmp)
        f = root / rel if rel else root
        f.write_bytes(mutate(f.read_bytes(), random.Random(f"{cid}:{seed}")))
        return root / target_rel if target_rel is not None else root
    return Case(cid, defect, kind, build)


def _copy_file(src: Path, name: str) -> Callable[[Path], Path]:
    def base(tmp: Path) -> Path:
        dest = tmp / "in" / name
        dest.parent.mkdir(parents=True)
        shutil.copy(src, dest)
        dest.chmod(0o644)
        return dest
    return base


def corpus(seeds: tuple[int, ...] = (0,)) -> Iterator[Case]:
    """Every case, deterministic for the seeds."""
    tn: Callable[[Path], Path] = lambda tmp: mini_tn(tmp / "rank0_ascend_pt", rows=30, events=200)  # noqa: E731
    prof: Callable[[Path], Path] = lambda tmp: copy_tree(PROF, tmp / "PROF_000001")  # noqa: E731
    out = "ASCEND_PROFILER_OUTPUT/"
    files = [
        ("tn-kernel", tn, out + "kernel_details.csv", _csv_mutations("Duration(us)", "Name")),
        ("tn-opstat", tn, out + "op_statistic.csv", _csv_mutations("Total Time(us)", "OP Type")),
        ("tn-steps", tn, out + "step_trace_time.csv", _csv_mutations("Computing", "Step")),
        ("tn-trace", tn, out + "trace_view.json", {**BYTE_MUTATIONS, **_json_mutations()}),
        ("tn-comm", tn, out + "communication.json", _json_mutations()),
        ("tn-matrix", tn, out + "communication_matrix.json", _json_mutations()),
        ("tn-info", tn, "profiler_info_0.json", _json_mutations()),
        ("tn-metadata", tn, "profiler_metadata.json", _json_mutations()),
        ("prof-summary", prof, "mindstudio_profiler_output/op_summary_20260831222806.csv",
         {**BYTE_MUTATIONS, **_csv_mutations("Task Duration(us)", "Op Name")}),
    ]
    for seed in seeds:
        for name, base, rel, mutations in files:
            for mname, (defect, fn) in mutations.items():
                yield _file_case(f"{name}:{mname}:{seed}", defect, "profile", base, rel, fn, seed)
        for mname, (defect, fn) in BYTE_MUTATIONS.items():
            yield _file_case(f"tn-kernel:{mname}:{seed}", defect, "profile", tn, out + "kernel_details.csv", fn, seed)
        lone_trace = _copy_file(TRACE, "msprof_0.json")
        for mname, (defect, fn) in {**BYTE_MUTATIONS, **_json_mutations()}.items():
            yield _file_case(f"trace-json:{mname}:{seed}", defect, "profile", lone_trace, "", fn, seed)
        om = _copy_file(OM_JSON, "model.om.json")
        for mname, (defect, fn) in {**BYTE_MUTATIONS, **_json_mutations()}.items():
            yield _file_case(f"om-json:{mname}:{seed}", defect, "graph", om, "", fn, seed)
        if GE_TEXT.is_file():
            ge = _copy_file(GE_TEXT, "ge_proto_00056_Build.txt")
            deep = {"deep-braces": (1, lambda b, _: b"graph {\n" + b"attr { value { " * 1500 + b"}}" * 1500 + b"}\n")}
            for mname, (defect, fn) in {**BYTE_MUTATIONS, **deep}.items():
                yield _file_case(f"ge-text:{mname}:{seed}", defect, "graph", ge, "", fn, seed)
        rules = _copy_file(RULES, "override.yaml")
        for mname, (defect, fn) in {**BYTE_MUTATIONS, **_yaml_mutations()}.items():
            yield _file_case(f"rules:{mname}:{seed}", defect, "rules", rules, "", fn, seed)
        report = _copy_file(Path(__file__).resolve().parents[1] / "reports" / "example.json", "saved.json")
        for mname, (defect, fn) in {**BYTE_MUTATIONS, **_json_mutations()}.items():
            yield _file_case(f"report:{mname}:{seed}", defect, "report", report, "", fn, seed)
    yield from _db_cases()
    yield from _tree_cases()


def _yaml_mutations() -> dict[str, tuple[int, Callable[[bytes, random.Random], bytes]]]:
    def override(body: str) -> Callable[[bytes, random.Random], bytes]:
        return lambda b, _: body.encode("utf-8")
    bomb = "rules:\n  memory:\n    a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
        f"    {c}: &{c} [{', '.join([f'*{p}'] * 9)}]\n" for p, c in zip("abcdefgh", "bcdefghi", strict=True))
    return {
        "as-override": (11, lambda b, _: b"rules:\n  memory:\n" + b"".join(b"    " + ln + b"\n"
                                                                           for ln in b.splitlines())),
        "redos": (11, override("rules:\n  memory:\n    event_patterns: ['(.+)+Z']\n")),
        "bad-regex": (11, override("rules:\n  memory:\n    event_patterns: ['([a-z']\n")),
        "bomb": (11, override(bomb)),
        "long-int": (11, override("rules:\n  transdata:\n    max_count: " + "9" * 5000 + "\n")),
        "nan": (11, override("rules:\n  memory:\n    min_total_us: .nan\n")),
        "inf": (11, override("rules:\n  memory:\n    recoverable_fraction: .inf\n")),
        "deep": (1, override("rules:\n  memory: " + "[" * 20000 + "]" * 20000 + "\n")),
        "object-tag": (11, override("rules: !!python/object/apply:os.system ['true']\n")),
        "wrong-type": (11, override("rules:\n  memory: [1, 2]\n")),
        "unknown-file": (11, override("rules:\n  nope: {a: 1}\n")),
    }


def _db_cases() -> Iterator[Case]:
    db = "ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_0.db"
    ana = "ASCEND_PROFILER_OUTPUT/analysis.db"
    sqls = {
        "null-op-name": (6, db, "UPDATE COMMUNICATION_OP SET opName = NULL"),
        "null-end": (6, db, "UPDATE TASK SET endNs = NULL WHERE rowid % 3 = 0"),
        "text-end": (6, db, "UPDATE TASK SET endNs = 'abc' WHERE rowid % 5 = 0"),
        "drop-end": (6, db, "ALTER TABLE TASK DROP COLUMN endNs"),
        "drop-task": (6, db, "DROP TABLE TASK"),
        "end-9e307": (3, db, "UPDATE TASK SET endNs = 9e307 WHERE rowid = 1"),
        "negative-duration": (3, db, "UPDATE TASK SET endNs = startNs - 1000 WHERE rowid % 2 = 0"),
        "wrong-analysis": (6, ana, "DROP TABLE StepTraceTime"),
        "analysis-null": (6, ana, "UPDATE CommAnalyzerBandwidth SET bandwidth = NULL, transit_size = NULL"),
    }
    for name, (defect, rel, sql) in sqls.items():
        def build(tmp: Path, rel: str = rel, sql: str = sql) -> Path:
            d = db_copy(tmp / "rank0_ascend_pt")
            db_exec(d / rel, sql)
            return d
        yield Case(f"db:{name}", defect, "profile", build)

    def corrupt(tmp: Path) -> Path:
        d = db_copy(tmp / "rank0_ascend_pt")
        p = d / db
        data = bytearray(p.read_bytes())
        for off in range(8192, len(data), 65536):
            data[off:off + 512] = bytes(range(256)) * 2
        p.write_bytes(bytes(data))
        return d
    yield Case("db:corrupt-pages", 6, "profile", corrupt)


def _tree_cases() -> Iterator[Case]:
    """Directory-level damage: empty ranks, FIFOs, symlinked ranks, NAME_MAX paths."""
    def empty_rank(tmp: Path) -> Path:
        root = tmp / "cluster"
        mini_tn(root / "rank0_ascend_pt", rows=20, events=100)
        (root / "rank1_ascend_pt" / "ASCEND_PROFILER_OUTPUT").mkdir(parents=True)
        return root

    def fifo(tmp: Path) -> Path:
        import os

        d = mini_tn(tmp / "rank0_ascend_pt", rows=20, events=100)
        (d / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv").unlink()
        os.mkfifo(d / "ASCEND_PROFILER_OUTPUT" / "op_statistic.csv")
        return d

    def symlinked(tmp: Path) -> Path:
        root = tmp / "cluster"
        mini_tn(root / "rank0_ascend_pt", rows=20, events=100)
        (root / "rank1_ascend_pt").symlink_to(root / "rank0_ascend_pt")
        return root

    def long_name(tmp: Path) -> Path:
        return tmp / ("n" * 300)

    def no_summary(tmp: Path) -> Path:
        d = copy_tree(PROF, tmp / "PROF_000001")
        for f in (d / "mindstudio_profiler_output").glob("op_summary*"):
            f.unlink()
        return d

    yield Case("tree:empty-rank", 2, "profile", empty_rank)
    yield Case("tree:fifo", 13, "profile", fifo)
    yield Case("tree:symlinked-rank", 13, "profile", symlinked)
    yield Case("tree:name-max", 7, "profile", long_name)
    yield Case("tree:no-op-summary", 5, "profile", no_summary)
