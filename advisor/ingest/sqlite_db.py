"""SQLite profile exports: msprof ``msprof_*.db``, torch_npu ``ascend_pytorch_profiler_*.db`` (MindSpore
``ascend_mindspore_profiler_*.db``) and the torch_npu ``analysis.db``.

Files are opened read-only (``mode=ro&immutable=1``: works in a read-only directory and never creates a journal)
and only the columns we need are selected. Strings are stored once in ``STRING_IDS``; id columns are decoded to
categoricals, never to one Python string per row.

What is an op row (``Profile.ops``), so that counts can be checked with plain SQL:

* every ``TASK`` row that has a ``COMPUTE_TASK_INFO`` row with the same ``globalTaskId`` (inner join) -- the
  device compute tasks, as ``kernel_details.csv``/``op_summary`` list them. ``core`` is
  ``COMPUTE_TASK_INFO.taskType`` (AI_CORE, AI_VECTOR_CORE, MIX_AIC, DSA_SQE...), not ``TASK.taskType`` (the
  runtime task kind: KERNEL_AIVEC...) -- except at profiler level 0, where the former is ``N/A``: then the core
  comes from the runtime task kind (``advisor.ingest.task_types``), block dims of 0 are read as not collected and
  op types stay unknown;
* plus one row per ``COMMUNICATION_OP`` row (core ``HCCL``, type ``opType``), as ``kernel_details.csv`` lists
  ``hcom_*`` ops. Communication *tasks* (``COMMUNICATION_TASK_INFO``: Notify Wait, Memcpy...) are not op rows;
  they and every other ``TASK`` row (EVENT_RECORD, MEMCPY_ASYNC...) are ``events`` of process
  ``Ascend Hardware`` named by their task type.

Other tables:

* ``TASK_PMU_INFO`` (globalTaskId, name, value) is pivoted to metric columns named as the CSV headers would be
  (``aic_mac_ratio``, ``aiv_vec_ratio``...; ``aic_total_time`` -> ``aicore_time_us``, ``aiv_total_time`` ->
  ``aiv_time_us``, ``*_time`` -> ``*_time_us``). The DB writes those times in ns; the scale is checked
  against the task durations (a time 1000x the duration can only be ns) rather than assumed.
* ``STEP_TIME`` gives each op its ``step`` (the step whose [start, end] holds the op start) and, with
  ``OVERLAP_ANALYSIS`` (type 0 Computing, 1 Communication, 2 Communication(Not Overlapped), 3 Free), the
  ``steps`` table -- unless ``analysis.db`` has ``StepTraceTime``, which is preferred.
* ``CANN_API`` -> ``api`` (count/total/avg/min/max per level and name) and ``events`` (process ``CANN``, named
  like the trace: ``AscendCL@...``, ``Runtime@...``, ``Node@...``, ``Hccl@...``); ``PYTORCH_API`` -> events of
  process ``Python``; ``OVERLAP_ANALYSIS`` -> events of ``Overlap Analysis``; ``MSTX_EVENTS`` -> ``tx``;
  ``MEMORY_RECORD`` -> ``memory`` (bytes -> MiB).
* ``extras["communication_matrix"]``: ``analysis.db`` ``CommAnalyzerMatrix`` (per step x op x link, as
  communication_matrix.json).
* ``comm``: from ``analysis.db`` when present -- one row per (step, op, group, transport) of
  ``CommAnalyzerBandwidth`` (its per-packet-size rows collapsed), carrying the op's ``CommAnalyzerTime``
  elapse/wait/sync/idle times; ``transit_us`` is the transport's transit time; ops without bandwidth rows get one
  row with no transport. Without ``analysis.db``: one row per ``COMMUNICATION_OP`` (elapse and wait only).
* ``META_DATA`` (``ENV_VARIABLES``, versions), ``RANK_DEVICE_MAP``, ``NPU_INFO``, ``SESSION_TIME_INFO`` -> meta.
"""

from __future__ import annotations

import re
import sqlite3
import time
import urllib.parse
from collections.abc import Iterable, Iterator
from contextlib import closing, contextmanager
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from advisor.common import safeload
from advisor.common.errors import InputError
from advisor.ingest.columns import metric_name
from advisor.ingest.event_summary import EventCounter, note_counted, split_events
from advisor.ingest.layout import Find, Layout, Match, RankSource
from advisor.ingest.normalize import finalize_ops
from advisor.ingest.task_types import fill_missing_cores
from advisor.ingest.timebase import us_from_float, us_from_ns
from advisor.ingest.torch_npu import MATRIX_COLUMNS, find_export, split_matrix_op
from advisor.model import (
    API_COLUMNS,
    COMM_COLUMNS,
    EVENTS_COLUMNS,
    MEMORY_COLUMNS,
    STEPS_COLUMNS,
    TX_COLUMNS,
    Meta,
    Profile,
    canonical_format,
    empty_frame,
)

FETCH_ROWS = 500_000
"""Rows converted per chunk when fetching numeric columns (bounds the transient Python objects)."""

OVERLAP_TYPES = {0: "Computing", 1: "Communication", 2: "Communication(Not Overlapped)", 3: "Free"}
"""``OVERLAP_ANALYSIS.type`` codes (checked against analysis.db StepTraceTime on the torch_npu sample)."""

_API_PREFIX = {"acl": "AscendCL", "runtime": "Runtime", "node": "Node", "hccl": "Hccl", "model": "Model"}
"""CANN API level -> the prefix trace_view.json puts before the API name."""
_PYTORCH_CATEGORY = {"op": "cpu_op", "trace": "python_function", "queue": "queue", "mstx": "mstx"}
_ANALYSIS_TABLES = ("StepTraceTime", "CommAnalyzerTime", "CommAnalyzerBandwidth")
_NULL_TEXT = {"NULL", "N/A", "", "NA"}
_MIB = 1024.0 * 1024.0


# ---------------------------------------------------------------------------------------------------------
# connection and small helpers
# ---------------------------------------------------------------------------------------------------------
DB_TIME_BUDGET_S = 600.0
"""Seconds all the queries on one database file may take together. The largest real exports (millions of tasks)
read in well under a minute; a query still running past this is a hostile or damaged file (a view over a
cross join, a join over duplicated keys), stopped by the progress handler and reported as an input error."""
DB_MAX_CELLS = 400_000_000
"""Numeric cells one query may fetch (3.2 GB as float64): the row and memory budget of :func:`_numeric`."""
_PROGRESS_STEPS = 20_000
"""SQLite VM instructions between two looks at the clock (~1 ms of work)."""


class BudgetedConnection(sqlite3.Connection):
    """A connection whose queries stop once :data:`DB_TIME_BUDGET_S` has passed since it was opened."""

    deadline: float = float("inf")
    budget_s: float = DB_TIME_BUDGET_S
    timed_out: bool = False

    def start_budget(self, seconds: float) -> None:
        self.budget_s, self.deadline = seconds, time.monotonic() + seconds
        self.set_progress_handler(self._past_deadline, _PROGRESS_STEPS)

    def _past_deadline(self) -> int:
        if time.monotonic() > self.deadline:
            self.timed_out = True
            return 1  # sqlite3 aborts the statement with OperationalError("interrupted")
        return 0


def read_only_uri(path: Path) -> str:
    """The URI that opens ``path`` read-only and immutable: no journal, no -wal/-shm file is ever created, and a
    read-only directory works."""
    return f"file:{urllib.parse.quote(str(Path(path).resolve()))}?mode=ro&immutable=1"


def connect(path: Path) -> sqlite3.Connection:
    """Open ``path`` read-only and immutable under the time budget; InputError when it is not an SQLite database,
    its schema cannot be read, or it holds views (profiler exports hold only tables, and a view where a table is
    expected can make any query endless)."""
    path = Path(path)
    try:
        con = sqlite3.connect(read_only_uri(path), uri=True, factory=BudgetedConnection)
    except sqlite3.Error as e:
        raise InputError(path, f"cannot be opened as an SQLite database ({e})") from None
    try:
        con.start_budget(DB_TIME_BUDGET_S)
        views = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'view' LIMIT 5")]
    except sqlite3.DatabaseError as e:
        problem = _db_error(con, e) if con.timed_out else f"not an SQLite database or its schema is damaged ({e})"
        con.close()
        raise InputError(path, problem) from None
    if views:
        con.close()
        raise InputError(path, f"holds views ({', '.join(map(repr, views))}) where a profiler database has only "
                               "tables: not read")
    return con


def _db_error(con: sqlite3.Connection | None, e: BaseException) -> str:
    """The one-line problem for an sqlite3 error, naming the time budget when that is what stopped the query."""
    if (con.timed_out if isinstance(con, BudgetedConnection) else str(e) == "interrupted"):
        budget = con.budget_s if isinstance(con, BudgetedConnection) else DB_TIME_BUDGET_S
        return f"a query ran past the {budget:g} s time budget for one database: stopped"
    return f"cannot read the database ({str(e).splitlines()[0] if str(e) else type(e).__name__})"


def table_names(con: sqlite3.Connection) -> set[str]:
    return {r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}


def table_columns(con: sqlite3.Connection, table: str) -> list[str]:
    return [r[1] for r in con.execute(f'PRAGMA table_info("{table}")')]


def _query(con: sqlite3.Connection, sql: str, path: Path) -> pd.DataFrame:
    try:
        return pd.read_sql_query(sql, con)
    except (sqlite3.DatabaseError, pd.errors.DatabaseError) as e:  # type: ignore[attr-defined]
        raise InputError(path, _db_error(con, e)) from None


def _numeric(con: sqlite3.Connection, sql: str, path: Path) -> pd.DataFrame:
    """A query whose columns are all numbers (ids, ns, counts) as float64 columns, fast.

    The sqlite3 module makes one Python object per cell whatever we do; converting the row tuples with
    ``np.array(..., float64)`` chunk by chunk is several times faster than pandas' per-column inference and keeps
    the peak low. NULL becomes NaN. Values are float64: ids and ns stay exact below 2**53, and times (ns since the
    epoch, ~1.7e18) lose only sub-microsecond digits -- compute differences (durations) in SQL.
    """
    try:
        cur = con.execute(sql)
        names = [d[0] for d in cur.description]
        parts, cells = [], 0
        while rows := cur.fetchmany(FETCH_ROWS):
            parts.append(np.array(rows, dtype="float64").reshape(len(rows), len(names)))
            cells += len(rows) * max(len(names), 1)
            if cells > DB_MAX_CELLS:
                raise InputError(path, f"one query returns more than {DB_MAX_CELLS:,} values (the reader's row and "
                                       "memory budget): not read")
    except sqlite3.DatabaseError as e:
        raise InputError(path, _db_error(con, e)) from None
    except (TypeError, ValueError) as e:
        raise InputError(path, f"unexpected non-numeric value in the database ({e})") from None
    arr = np.concatenate(parts) if parts else np.empty((0, len(names)))
    del parts
    return pd.DataFrame({n: np.ascontiguousarray(arr[:, i]) for i, n in enumerate(names)})


def _sorted(df: pd.DataFrame, column: str) -> pd.DataFrame:
    """Rows in time order (a stable numpy sort of the fetched column beats SQL ORDER BY on wide rows)."""
    order = np.argsort(df[column].to_numpy(), kind="stable")
    if (order == np.arange(len(order))).all():
        return df
    return df.take(order).reset_index(drop=True)


def _first(cols: Iterable[str], *candidates: str) -> str | None:
    have = set(cols)
    return next((c for c in candidates if c in have), None)


class StringIds:
    """``STRING_IDS`` decoded once; id columns become categoricals (codes into the distinct strings)."""

    def __init__(self, con: sqlite3.Connection, tables: set[str], path: Path) -> None:
        if "STRING_IDS" in tables:
            df = _query(con, "SELECT id, value FROM STRING_IDS", path)
        else:
            df = pd.DataFrame({"id": pd.Series(dtype="int64"), "value": pd.Series(dtype=object)})
        ids = pd.to_numeric(df["id"], errors="coerce")
        if ids.isna().any() or not np.isfinite(ids.to_numpy(dtype="float64")).all():
            raise InputError(path, f"STRING_IDS has {int((~np.isfinite(ids.to_numpy(dtype='float64'))).sum())} ids "
                                   "that are not integers")
        self._index = pd.Index(ids.to_numpy(dtype="int64"))
        if not self._index.is_unique:
            dup = self._index[self._index.duplicated()]
            raise InputError(path, f"STRING_IDS has {len(dup)} duplicate ids (first: {dup[0]}): which string an id "
                                   "means is ambiguous")
        codes, uniques = pd.factorize(df["value"].astype(object))
        self._codes = codes
        self._categories = pd.Index(uniques)

    def decode(self, ids: pd.Series | np.ndarray) -> pd.Categorical:
        """Ids -> strings (categorical). Unknown or NULL ids become missing."""
        arr = pd.to_numeric(pd.Series(ids), errors="coerce").to_numpy(dtype="float64")
        ok = ~np.isnan(arr)
        pos = np.full(len(arr), -1, dtype="int64")
        if ok.any():
            pos[ok] = self._index.get_indexer(arr[ok].astype("int64"))
        codes = np.where(pos >= 0, self._codes[np.clip(pos, 0, None)] if len(self._codes) else -1, -1)
        return pd.Categorical.from_codes(codes.astype("int64"), categories=self._categories) \
            if len(self._categories) else pd.Categorical([None] * len(arr))


def _enum(con: sqlite3.Connection, tables: set[str], table: str) -> dict[int, str]:
    if table not in tables:
        return {}
    return {int(i): str(n) for i, n in con.execute(f'SELECT id, name FROM "{table}"')}


def _categorical_map(values: pd.Series, mapping: dict[Any, str], fallback_str: bool = True) -> pd.Series:
    """Small-cardinality code -> name, done on the distinct values only."""
    def label(u: Any) -> str | None:
        if u is None or u != u:
            return None
        if u in mapping:
            return mapping[u]
        if not fallback_str:
            return None
        return str(int(u)) if isinstance(u, float) and u.is_integer() else str(u)

    uniq = pd.unique(values.to_numpy())
    lut = {u: label(u) for u in uniq}
    return values.map(lut).astype("category")


def _clean_categories(cat: pd.Categorical, *, formats: bool = False) -> pd.Categorical:
    """Strip quotes, turn NULL/N/A into missing and (formats) drop ``FORMAT_`` prefixes -- per category only."""
    def fix(v: str) -> str | None:
        t = str(v).strip().strip('"').strip()
        if t.upper() in _NULL_TEXT:
            return None
        if formats:
            t = ";".join(canonical_format(p) if p.strip() else "" for p in t.split(";"))
        return t

    cats = list(cat.categories)
    fixed = [fix(c) for c in cats]
    if fixed == cats:
        return cat
    lut = dict(zip(cats, fixed, strict=True))
    return pd.Categorical(pd.Series(cat).map(lut))


# ---------------------------------------------------------------------------------------------------------
# locating files
# ---------------------------------------------------------------------------------------------------------
def _locate(root: Path, layout: str) -> tuple[Path, Path | None]:
    """The main .db and the analysis.db beside it (if any) for a layout root (a directory or the file)."""
    if root.is_file():
        analysis = root.parent / "analysis.db"
        return root, (analysis if analysis.is_file() and analysis != root else None)
    if layout == "msprof-db":
        candidates = sorted(root.glob("msprof_*.db")) or sorted(root.glob("*/msprof_*.db"))
    else:
        out_dir = root / "ASCEND_PROFILER_OUTPUT"
        patterns = ("ascend_pytorch_profiler*.db", "ascend_mindspore_profiler*.db")
        candidates = [p for d in (out_dir, root) if d.is_dir() for pat in patterns for p in sorted(d.glob(pat))]
    if not candidates:
        raise InputError(root, f"no profiler database found for layout {layout} "
                               "(msprof_*.db, ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_*.db)")
    db = candidates[-1]
    analysis = db.parent / "analysis.db"
    return db, (analysis if analysis.is_file() else None)


# ---------------------------------------------------------------------------------------------------------
# the reader
# ---------------------------------------------------------------------------------------------------------
@contextmanager
def _database_errors(path: Path) -> Iterator[None]:
    """Whatever the queries hit in a damaged or foreign database -- a corrupt page, a missing table or column, a
    value of the wrong type -- is one InputError naming the file, never a traceback or a knowledge base's fault."""
    try:
        yield
    except sqlite3.DatabaseError as e:
        raise InputError(path, _db_error(None, e)) from None
    except KeyError as e:
        raise InputError(path, f"unexpected database schema (no column {e})") from None
    except (TypeError, ValueError, OverflowError) as e:
        raise InputError(path, f"unexpected value in the database ({type(e).__name__}: {str(e)[:200]})") from None


def read(root: Path, meta: Meta) -> Profile:
    """Reader-registry entry for layouts msprof-db, torch_npu-db and mindspore-db."""
    db_path, _ = _locate(Path(root), meta.layout)
    with _database_errors(db_path):
        return _read(Path(root), meta)


def _read(root: Path, meta: Meta) -> Profile:
    db_path, analysis_path = _locate(root, meta.layout)
    if meta.layout in ("torch_npu-db", "mindspore-db"):
        meta.framework = meta.framework or ("mindspore" if meta.layout == "mindspore-db" else "pytorch")
        _read_profiler_jsons(root if root.is_dir() else db_path.parent.parent, meta)

    with closing(connect(db_path)) as con:
        tables = table_names(con)
        if "TASK" not in tables:
            if tables & set(_ANALYSIS_TABLES):  # an analysis.db given on its own
                meta.read(db_path)
                steps, comm = _analysis_tables(con, tables, db_path, meta)
                return Profile(ops=finalize_ops(pd.DataFrame()), meta=meta, steps=steps, comm=comm)
            raise InputError(db_path, "no TASK table: not an msprof/torch_npu/MindSpore profiler database")
        meta.read(db_path)
        profile = _read_main(con, tables, db_path, meta)

    if analysis_path is not None:
        try:
            steps, comm = read_analysis_db(analysis_path, meta)
        except InputError as e:
            meta.skip(analysis_path, e.problem)
        else:
            if len(steps):
                profile.steps = steps
                meta.sources["steps"] = f"{analysis_path.name} StepTraceTime"
            if len(comm):
                profile.comm = comm
                meta.sources["comm"] = f"{analysis_path.name} CommAnalyzerTime"
            matrix = read_analysis_matrix(analysis_path, meta)
            if len(matrix):
                profile.extras["communication_matrix"] = matrix
                meta.sources["communication_matrix"] = f"{analysis_path.name} CommAnalyzerMatrix"
    return profile


def read_analysis_matrix(path: Path, meta: Meta) -> pd.DataFrame:
    """``analysis.db`` ``CommAnalyzerMatrix`` as communication_matrix.json reads (``torch_npu.MATRIX_COLUMNS``: one
    row per step x op x link, ``allreduce-top1`` style op keys split into op and ``stat``); empty without the
    table. A damaged table is skipped with its reason (the file's other tables were already read)."""
    path = Path(path)
    try:
        with _database_errors(path), closing(connect(path)) as con:
            if "CommAnalyzerMatrix" not in table_names(con):
                return empty_frame(MATRIX_COLUMNS)
            cols = set(table_columns(con, "CommAnalyzerMatrix"))
            op_name = "op_name" if "op_name" in cols else "NULL"
            raw = _query(con, "SELECT hccl_op_name AS op, group_name AS \"group\", src_rank, dst_rank, "
                              "transport_type AS transport, transit_size, transit_time, bandwidth, step, type AS kind, "
                              f"{op_name} AS op_name FROM CommAnalyzerMatrix", path)
    except InputError as e:
        meta.skip(path, f"CommAnalyzerMatrix not read: {e.problem}")
        return empty_frame(MATRIX_COLUMNS)
    split = [split_matrix_op(str(o)) for o in raw["op"]]
    out = pd.DataFrame({
        "step": _step_number(raw["step"]), "kind": raw["kind"].astype(object),
        "op": [o for o, _ in split], "stat": [st for _, st in split],
        "group": raw["group"].astype(object).where(raw["group"].notna(), None),
        "src_rank": pd.to_numeric(raw["src_rank"], errors="coerce").astype("float64"),
        "dst_rank": pd.to_numeric(raw["dst_rank"], errors="coerce").astype("float64"),
        "transport": raw["transport"].astype(object),
        "size_mb": pd.to_numeric(raw["transit_size"], errors="coerce").astype("float64"),
        "transit_us": pd.to_numeric(raw["transit_time"], errors="coerce").astype("float64") * 1000.0,
        "bandwidth_gbps": pd.to_numeric(raw["bandwidth"], errors="coerce").astype("float64"),
        "op_name": raw["op_name"].astype(object).where(raw["op_name"].notna(), None),
    })
    return out[MATRIX_COLUMNS]


def read_analysis_db(path: Path, meta: Meta) -> tuple[pd.DataFrame, pd.DataFrame]:
    """torch_npu ``analysis.db``: (steps from StepTraceTime, comm from CommAnalyzerTime/Bandwidth)."""
    path = Path(path)
    with _database_errors(path), closing(connect(path)) as con:
        tables = table_names(con)
        if not tables & set(_ANALYSIS_TABLES):
            raise InputError(path, "no StepTraceTime/CommAnalyzer tables: not a torch_npu analysis.db")
        out = _analysis_tables(con, tables, path, meta)
    meta.read(path)
    return out


def _set_origin(con: sqlite3.Connection, path: Path, meta: Meta) -> None:
    """Fix the rank's time origin from the first device task, so every query can select ``startNs - origin``:
    small integers that float64 holds exactly (absolute ns near 1.7e18 would lose 256 ns)."""
    if meta.time_origin_ns is not None:
        return
    try:
        row = con.execute("SELECT MIN(startNs) FROM TASK").fetchone()
    except sqlite3.DatabaseError as e:
        raise InputError(path, _db_error(con, e)) from None
    first = row[0] if row and isinstance(row[0], int) else 0
    meta.time_origin_ns = (first // 1_000_000_000) * 1_000_000_000


def _rel(meta: Meta, column: str) -> str:
    """SQL for a time stamp column as ns since the rank's origin (see :func:`_set_origin`)."""
    return f"({column} - {int(meta.time_origin_ns or 0)})"


def _read_main(con: sqlite3.Connection, tables: set[str], path: Path, meta: Meta) -> Profile:
    strings = StringIds(con, tables, path)
    _set_origin(con, path, meta)
    step_ranges = _step_ranges(con, tables, path, meta)
    _read_db_meta(con, tables, meta)

    ops = _compute_ops(con, tables, strings, step_ranges, path, meta)
    comm_ops = _communication_ops(con, tables, strings, step_ranges, path, meta)
    if len(comm_ops):
        ops = pd.concat([ops, comm_ops], ignore_index=True)
        ops = ops.sort_values("start_us", kind="stable", ignore_index=True)
    ops = finalize_ops(ops)

    events, event_summary = _events(con, tables, strings, path, meta)
    meta.source_of("ops", f"{path.name} TASK + COMPUTE_TASK_INFO")
    meta.source_of("events", path)
    if len(comm_ops):
        meta.source_of("comm", f"{path.name} COMMUNICATION_OP")
    profile = Profile(
        ops=ops,
        meta=meta,
        api=_api(con, tables, strings, path),
        steps=_steps_from_overlap(con, tables, step_ranges, path, meta),
        events=events,
        event_summary=event_summary,
        comm=_comm_from_ops(comm_ops),
        memory=_memory(con, tables, strings, path, meta),
        tx=_tx(con, tables, strings, path, meta),
    )
    if len(profile.steps):
        meta.source_of("steps", f"{path.name} OVERLAP_ANALYSIS in STEP_TIME")
    session = _session(con, tables, meta)
    if session:
        profile.extras["session"] = session
        profile.tx = _inside_session(profile.tx, session, path, meta)
    return profile


SESSION_SLACK_US = 1e6
"""Rows may start this long before the session's recorded start or end after its end (clock rounding, ranges opened
just before the profiler started) and still belong to the capture."""


def _inside_session(tx: pd.DataFrame, session: dict[str, float], path: Path, meta: Meta) -> pd.DataFrame:
    """msproftx ranges of this capture: ranges far outside ``SESSION_TIME_INFO`` come from another capture (a
    database assembled from several exports) and would stretch the capture over days."""
    if not len(tx):
        return tx
    start = tx["start_us"].to_numpy(dtype="float64")
    end = start + np.nan_to_num(tx["duration_us"].to_numpy(dtype="float64"))
    inside = (end >= session["start_us"] - SESSION_SLACK_US) & (start <= session["end_us"] + SESSION_SLACK_US)
    if inside.all():
        return tx
    meta.skip(f"{path}:MSTX_EVENTS", f"{int((~inside).sum())} of {len(tx)} msproftx ranges lie outside the session's "
                                     "time (SESSION_TIME_INFO): another capture's, not read")
    return tx[inside].reset_index(drop=True)


# ---------------------------------------------------------------------------------------------------------
# ops
# ---------------------------------------------------------------------------------------------------------
_TENSOR_COLUMNS = {
    "inputShapes": "input_shapes",
    "inputDataTypes": "input_dtypes",
    "inputFormats": "input_formats",
    "outputShapes": "output_shapes",
    "outputDataTypes": "output_dtypes",
    "outputFormats": "output_formats",
}


def _unique_task_ids(con: sqlite3.Connection, path: Path) -> None:
    """The op join is on ``globalTaskId``: a key repeated in both tables would multiply the rows (n x m of them)
    instead of pairing them, so a repeated key is a damaged file."""
    for table in ("TASK", "COMPUTE_TASK_INFO"):
        repeated = con.execute(f"SELECT COUNT(*) - COUNT(DISTINCT globalTaskId) FROM {table}").fetchone()[0]
        if repeated:
            raise InputError(path, f"{table} repeats globalTaskId {repeated:,} times: its rows cannot be paired "
                                   "with their tasks")


def _compute_ops_query(con: sqlite3.Connection, meta: Meta) -> tuple[str, list[str]]:
    """The SELECT of compute tasks joined with their runtime tasks, over the columns this database has, and the
    output columns that hold string ids."""
    ccols = table_columns(con, "COMPUTE_TASK_INFO")
    tcols = table_columns(con, "TASK")
    select = ["t.globalTaskId AS gid", f"{_rel(meta, 't.startNs')} AS start_ns", "(t.endNs - t.startNs) AS dur_ns"]
    for src, dst in (("deviceId", "device_id"), ("streamId", "stream_id"), ("taskId", "task_id"),
                     ("modelId", "model_id"), ("contextId", "context_id"), ("taskType", "task_kind")):
        if src in tcols:
            select.append(f"t.{src} AS {dst}")
    string_cols: list[str] = []
    for src, dst in (("name", "name"), ("opType", "type"), ("taskType", "core"), ("opState", "op_state"),
                     *_TENSOR_COLUMNS.items()):
        if src in ccols:
            select.append(f"c.{src} AS {dst}")
            string_cols.append(dst)
    for dst, candidates in (("block_dim", ("blockDim", "blockNum", "block_dim")),
                            ("mix_block_dim", ("mixBlockDim", "mixBlockNum", "mix_block_dim")),
                            ("wait_ns", ("waitNs",))):
        src = _first(ccols, *candidates)
        if src:
            select.append(f"c.{src} AS {dst}")
    sql = f"SELECT {', '.join(select)} FROM COMPUTE_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId"
    return sql, string_cols


def _compute_ops(con: sqlite3.Connection, tables: set[str], strings: StringIds, step_ranges: pd.DataFrame,
                 path: Path, meta: Meta) -> pd.DataFrame:
    if "COMPUTE_TASK_INFO" not in tables:
        meta.notes.append(f"{path.name}: no COMPUTE_TASK_INFO table, no compute ops")
        return pd.DataFrame()
    _unique_task_ids(con, path)
    sql, string_cols = _compute_ops_query(con, meta)
    raw = _sorted(_numeric(con, sql, path), "start_ns")  # sorting here is ~5x cheaper than ORDER BY
    n = len(raw)
    df = pd.DataFrame(index=pd.RangeIndex(n))
    for dst in string_cols:
        cat = strings.decode(raw[dst])
        df[dst] = _clean_categories(cat, formats=dst.endswith("_formats"))
    start_ns = raw["start_ns"]
    df["start_us"] = start_ns.to_numpy(dtype="float64") / 1000.0
    df["duration_us"] = raw["dur_ns"].to_numpy(dtype="float64") / 1000.0
    if "wait_ns" in raw:
        df["wait_us"] = pd.to_numeric(raw["wait_ns"], errors="coerce").to_numpy(dtype="float64") / 1000.0
    for col in ("device_id", "stream_id", "task_id", "model_id", "context_id", "block_dim", "mix_block_dim"):
        if col in raw:
            df[col] = pd.to_numeric(raw[col], errors="coerce").astype("float64")
    if "context_id" in df:  # 4294967295 = "no context"
        df.loc[df["context_id"] == 4294967295, "context_id"] = np.nan
    if "task_kind" in raw:
        _level0_cores(df, strings.decode(raw["task_kind"]), path, meta)
    df["step"] = _assign_steps(start_ns.to_numpy(dtype="float64"), step_ranges)
    if "TASK_PMU_INFO" in tables and n:
        metrics = _pmu_metrics(con, strings, raw["gid"].to_numpy(dtype="int64"),
                               df["duration_us"].to_numpy(dtype="float64"), path, meta)
        for col, values in metrics.items():
            df[col] = values
    return df


def _level0_cores(df: pd.DataFrame, task_kind: pd.Categorical, path: Path, meta: Meta) -> None:
    """Profiler level 0 records no op task type (``COMPUTE_TASK_INFO.taskType`` is N/A) and writes block dim 0:
    take the core from the runtime task type (``TASK.taskType``, see ``advisor.ingest.task_types``) so compute
    time is not lost, and read block dims of 0 there as "not collected". Op types stay unknown."""
    core = df["core"] if "core" in df else pd.Series(None, index=df.index, dtype=object)
    filled, missing = fill_missing_cores(core, task_kind)
    if not missing.any():
        return
    df["core"] = pd.Categorical(filled)
    for col in ("block_dim", "mix_block_dim"):
        if col in df:
            df.loc[missing & (df[col].to_numpy() == 0), col] = np.nan
    kinds = pd.Series(task_kind)[missing].astype(object).fillna("none").value_counts()
    unresolved = int(pd.isna(filled[missing]).sum())
    meta.notes.append(
        f"{path.name}: {int(missing.sum())} compute tasks have no task type in COMPUTE_TASK_INFO (profiler level 0): "
        "core taken from TASK.taskType (" + ", ".join(f"{k} {v}" for k, v in kinds.items()) + ")"
        + (f"; {unresolved} left without a core" if unresolved else "")
        + "; op types are not recorded at this level")


def _pmu_column(raw: str) -> tuple[str, bool]:
    """PMU metric name -> (canonical column, is a time). ``aic_total_time`` -> (``aicore_time_us``, True)."""
    name = str(raw).strip()
    mapped = metric_name(name)
    if mapped and mapped != name.lower():  # already carries a unit, e.g. "aic_mac_time(us)"
        return mapped, False
    key = name.lower()
    m = re.fullmatch(r"(aic_|aiv_)?total_time", key)
    if m:
        return ("aiv_time_us" if m.group(1) == "aiv_" else "aicore_time_us"), True
    if key.endswith("_time"):
        return key + "_us", True
    return key, False


def _pmu_metrics(con: sqlite3.Connection, strings: StringIds, gids: np.ndarray, durations_us: np.ndarray,
                 path: Path, meta: Meta) -> dict[str, np.ndarray]:
    """Pivot TASK_PMU_INFO (one row per task and metric) into one float column per metric."""
    uniq_gids, inverse = np.unique(gids, return_inverse=True)
    name_ids = [r[0] for r in con.execute("SELECT DISTINCT name FROM TASK_PMU_INFO") if r[0] is not None]
    if not name_ids:
        return {}
    raw_names = [str(v) if v is not None else str(i) for i, v in
                 zip(name_ids, strings.decode(pd.Series(name_ids)).astype(object), strict=True)]
    columns: list[str] = []
    is_time: list[bool] = []
    col_of_id: dict[int, int] = {}
    for nid, raw in zip(name_ids, raw_names, strict=True):
        col, timed = _pmu_column(raw)
        if col not in columns:
            columns.append(col)
            is_time.append(timed)
        col_of_id[int(nid)] = columns.index(col)
    # pivot in SQL: one row per task instead of one per task and metric (3-30x fewer Python objects)
    cases = ", ".join(f"MAX(CASE WHEN name = {int(nid)} THEN value END) AS m{k}" for k, nid in enumerate(name_ids))
    try:
        pivot = _numeric(con, f"SELECT globalTaskId AS gid, {cases} FROM TASK_PMU_INFO GROUP BY globalTaskId", path)
    except InputError as e:
        meta.skip(path, f"TASK_PMU_INFO not read: {e.problem}")
        return {}
    matrix = np.full((len(uniq_gids), len(columns)), np.nan)
    g = pivot["gid"].to_numpy()
    row = np.searchsorted(uniq_gids, g)
    ok = row < len(uniq_gids)
    ok[ok] = uniq_gids[row[ok]] == g[ok]
    for k, nid in enumerate(name_ids):
        values = pivot[f"m{k}"].to_numpy()
        j = col_of_id[int(nid)]
        target = matrix[:, j]
        sel = ok & ~np.isnan(values)
        target[row[sel]] = values[sel]
    del pivot
    per_op = matrix[inverse]
    out: dict[str, np.ndarray] = {}
    scale = _time_scale(per_op, columns, durations_us)
    for j, col in enumerate(columns):
        values = per_op[:, j]
        out[col] = values * scale if is_time[j] else values
    return out


def _time_scale(per_op: np.ndarray, columns: list[str], durations_us: np.ndarray) -> float:
    """ns -> us factor for PMU times: a total core time ~1000x the task duration can only be ns."""
    for col in ("aicore_time_us", "aiv_time_us"):
        if col not in columns:
            continue
        v = per_op[:, columns.index(col)]
        ok = (v > 0) & (durations_us > 0)
        if ok.sum() >= 1:
            ratio = float(np.median(v[ok] / durations_us[ok]))
            return 1e-3 if ratio > 30.0 else 1.0
    return 1e-3


def _communication_ops(con: sqlite3.Connection, tables: set[str], strings: StringIds, step_ranges: pd.DataFrame,
                       path: Path, meta: Meta) -> pd.DataFrame:
    """COMMUNICATION_OP rows as ops (core HCCL) -- keeps group/wait for the comm table too."""
    if "COMMUNICATION_OP" not in tables:
        return pd.DataFrame()
    cols = table_columns(con, "COMMUNICATION_OP")
    select = [f"{_rel(meta, 'startNs')} AS start_ns", "(endNs - startNs) AS dur_ns"]
    for src, dst in (("opName", "name"), ("opType", "type"), ("groupName", "group_name"), ("waitNs", "wait_ns")):
        if src in cols:
            select.append(f"{src} AS {dst}")
    raw = _sorted(_numeric(con, f"SELECT {', '.join(select)} FROM COMMUNICATION_OP", path), "start_ns")
    if not len(raw):
        return pd.DataFrame()
    df = pd.DataFrame(index=pd.RangeIndex(len(raw)))
    for src, col in (("name", "name"), ("type", "type"), ("group_name", "group")):
        if src in raw:
            df[col] = _clean_categories(strings.decode(raw[src]))
    df["core"] = "HCCL"
    start_ns = raw["start_ns"].to_numpy(dtype="float64")
    df["start_us"] = start_ns / 1000.0
    df["duration_us"] = raw["dur_ns"].to_numpy(dtype="float64") / 1000.0
    if "wait_ns" in raw:
        df["wait_us"] = pd.to_numeric(raw["wait_ns"], errors="coerce").to_numpy(dtype="float64") / 1000.0
    df["step"] = _assign_steps(start_ns, step_ranges)
    return df


def _comm_from_ops(comm_ops: pd.DataFrame) -> pd.DataFrame:
    if not len(comm_ops):
        return empty_frame(COMM_COLUMNS)
    out = pd.DataFrame({
        "step": comm_ops["step"].to_numpy(dtype="float64"),
        "op": comm_ops["name"].astype(object) if "name" in comm_ops else None,
        "group": comm_ops["group"].astype(object) if "group" in comm_ops else None,
        "elapse_us": comm_ops["duration_us"].to_numpy(dtype="float64"),
        "wait_us": comm_ops["wait_us"].to_numpy(dtype="float64") if "wait_us" in comm_ops else np.nan,
        "start_us": comm_ops["start_us"].to_numpy(dtype="float64"),
    })
    for col in COMM_COLUMNS:
        if col not in out:
            out[col] = np.nan
    return out[[*COMM_COLUMNS, "start_us"]]


# ---------------------------------------------------------------------------------------------------------
# steps
# ---------------------------------------------------------------------------------------------------------
def _step_ranges(con: sqlite3.Connection, tables: set[str], path: Path, meta: Meta) -> pd.DataFrame:
    """STEP_TIME ranges in ns since the rank's origin."""
    if "STEP_TIME" not in tables:
        return pd.DataFrame({"id": [], "start": [], "end": []})
    df = _numeric(con, f"SELECT id, {_rel(meta, 'startNs')} AS start, {_rel(meta, 'endNs')} AS \"end\" "
                       "FROM STEP_TIME ORDER BY startNs", path)
    return df.dropna()


def _assign_steps(start_ns: np.ndarray, ranges: pd.DataFrame) -> np.ndarray:
    """Step id of the range holding each start (NaN outside every step)."""
    out = np.full(len(start_ns), np.nan)
    if not len(ranges) or not len(start_ns):
        return out
    starts = ranges["start"].to_numpy()
    ends = ranges["end"].to_numpy()
    idx = np.searchsorted(starts, start_ns, side="right") - 1
    ok = idx >= 0
    ok[ok] = start_ns[ok] <= ends[idx[ok]]
    out[ok] = ranges["id"].to_numpy()[idx[ok]]
    return out


def _steps_from_overlap(con: sqlite3.Connection, tables: set[str], ranges: pd.DataFrame, path: Path,
                        meta: Meta) -> pd.DataFrame:
    """Per-step computing/communication/free from OVERLAP_ANALYSIS inside STEP_TIME ranges."""
    if not len(ranges) or "OVERLAP_ANALYSIS" not in tables:
        return empty_frame(STEPS_COLUMNS)
    ov = _numeric(con, f"SELECT {_rel(meta, 'startNs')} AS startNs, endNs - startNs AS dur_ns, type "
                       "FROM OVERLAP_ANALYSIS", path)
    step = _assign_steps(ov["startNs"].to_numpy(), ranges)
    ov["dur_us"] = ov["dur_ns"].to_numpy() / 1000.0
    ov["step"] = step
    sums = ov.dropna(subset=["step"]).pivot_table(index="step", columns="type", values="dur_us", aggfunc="sum")
    out = pd.DataFrame({"step": ranges["id"].to_numpy()})
    out = out.set_index("step")
    for code, col in ((0, "computing_us"), (1, "communication_us"), (2, "comm_not_overlapped_us"), (3, "free_us")):
        out[col] = sums[code].reindex(out.index).fillna(0.0) if code in sums.columns else 0.0
    out["overlapped_us"] = out["communication_us"] - out["comm_not_overlapped_us"]
    out["start_us"] = ranges["start"].to_numpy() / 1000.0
    out["duration_us"] = (ranges["end"] - ranges["start"]).to_numpy() / 1000.0
    out = out.reset_index()
    for col in STEPS_COLUMNS:
        if col not in out:
            out[col] = np.nan
    return out[[*STEPS_COLUMNS, "start_us", "duration_us"]].astype("float64")


_STEP_TRACE_DB = {
    "computing": "computing_us",
    "communication_not_overlapped": "comm_not_overlapped_us",
    "overlapped": "overlapped_us",
    "communication": "communication_us",
    "free": "free_us",
    "stage": "stage_us",
    "bubble": "bubble_us",
    "communication_not_overlapped_and_exclude_receive": "comm_not_overlapped_exclude_receive_us",
    "preparing": "preparing_us",
    "deviceId": "device_id",
}


def _step_number(values: pd.Series) -> pd.Series:
    """``"50"`` / ``"step50"`` -> 50.0."""
    text = values.astype(str).str.extract(r"(-?\d+)\s*$")[0]
    return pd.to_numeric(text, errors="coerce").astype("float64")


def _analysis_tables(con: sqlite3.Connection, tables: set[str], path: Path,
                     meta: Meta) -> tuple[pd.DataFrame, pd.DataFrame]:
    steps = empty_frame(STEPS_COLUMNS)
    if "StepTraceTime" in tables:
        raw = _query(con, "SELECT * FROM StepTraceTime", path)
        steps = pd.DataFrame({"step": _step_number(raw["step"])})
        for src, dst in _STEP_TRACE_DB.items():
            if src in raw:
                steps[dst] = pd.to_numeric(raw[src], errors="coerce").astype("float64")
        for col in STEPS_COLUMNS:
            if col not in steps:
                steps[col] = np.nan
    comm = _analysis_comm(con, tables, path, meta)
    return steps, comm


COMM_EXTRA_COLUMNS = ["kind", "start_us", "wait_ratio", "sync_ratio", "transport_transit_us"]
"""Beyond ``COMM_COLUMNS`` (as the communication.json reader writes them): p2p/collective, op start, wait and
sync ratios, and the transport's own transit time (``transit_us`` is the op's)."""


def _analysis_comm(con: sqlite3.Connection, tables: set[str], path: Path, meta: Meta) -> pd.DataFrame:
    keys = ["step", "op", "group"]
    if not {"CommAnalyzerTime", "CommAnalyzerBandwidth"} & tables:
        return empty_frame(COMM_COLUMNS)
    if "CommAnalyzerTime" in tables:
        t = _query(con, "SELECT hccl_op_name AS op, group_name AS \"group\", step, type AS kind, start_timestamp, "
                        "elapse_time, transit_time, wait_time, synchronization_time, idle_time "
                        "FROM CommAnalyzerTime", path)
        t = t.drop_duplicates(keys)
    else:
        t = pd.DataFrame(columns=[*keys, "kind", "start_timestamp", "elapse_time", "transit_time", "wait_time",
                                  "synchronization_time", "idle_time"])
    if "CommAnalyzerBandwidth" in tables:
        b = _query(con, "SELECT hccl_op_name AS op, group_name AS \"group\", step, type AS bw_kind, "
                        "transport_type AS transport, transit_size, transit_time AS bw_transit_time, bandwidth, "
                        "large_packet_ratio FROM CommAnalyzerBandwidth", path)
        b = b.drop_duplicates([*keys, "transport"])  # the file repeats a transport once per packet-size bucket
    else:
        b = pd.DataFrame(columns=[*keys, "bw_kind", "transport", "transit_size", "bw_transit_time", "bandwidth",
                                  "large_packet_ratio"])
    for frame in (t, b):
        frame["op"] = frame["op"].astype(object)
        frame["group"] = frame["group"].astype(object).where(frame["group"].notna(), None)
        frame["group"] = frame["group"].map(lambda g: None if g is None else str(g))
        frame["step"] = frame["step"].astype(str)
    merged = t.merge(b, on=keys, how="outer")

    def num(col: str) -> pd.Series:
        return pd.to_numeric(merged[col], errors="coerce").astype("float64")

    elapse, wait, sync = num("elapse_time"), num("wait_time"), num("synchronization_time")
    with np.errstate(divide="ignore", invalid="ignore"):
        wait_ratio = (wait / (wait + num("transit_time"))).where(wait.notna())
        sync_ratio = (sync / (sync + num("transit_time"))).where(sync.notna())
    out = pd.DataFrame({
        "step": _step_number(merged["step"]),
        "op": merged["op"],
        "group": merged["group"],
        "elapse_us": elapse * 1000.0,
        "transit_us": num("transit_time") * 1000.0,
        "wait_us": wait * 1000.0,
        "sync_us": sync * 1000.0,
        "idle_us": num("idle_time") * 1000.0,
        "transport": merged["transport"],
        "size_mb": num("transit_size"),
        "bandwidth_gbps": num("bandwidth"),
        "large_packet_ratio": num("large_packet_ratio"),
        "kind": merged["kind"].fillna(merged["bw_kind"]),
        "start_us": us_from_float(meta, num("start_timestamp").to_numpy()),
        "wait_ratio": wait_ratio,
        "sync_ratio": sync_ratio,
        "transport_transit_us": num("bw_transit_time") * 1000.0,
    })
    out = out.sort_values(["step", "op", "transport"], kind="stable", ignore_index=True)
    for col in ("op", "group", "transport", "kind"):
        out[col] = out[col].astype("category")
    return out


# ---------------------------------------------------------------------------------------------------------
# api, events, tx, memory
# ---------------------------------------------------------------------------------------------------------
def _api(con: sqlite3.Connection, tables: set[str], strings: StringIds, path: Path) -> pd.DataFrame:
    if "CANN_API" not in tables:
        return empty_frame(API_COLUMNS)
    raw = _numeric(con, "SELECT type, name, COUNT(*) AS count, SUM(endNs - startNs) AS total, "
                        "MIN(endNs - startNs) AS mn, MAX(endNs - startNs) AS mx FROM CANN_API GROUP BY type, name",
                   path)
    levels = _enum(con, tables, "ENUM_API_TYPE")
    out = pd.DataFrame({
        "level": _categorical_map(raw["type"], levels).astype(object),
        "name": pd.Series(strings.decode(raw["name"])).astype(object),
        "total_us": raw["total"].to_numpy(dtype="float64") / 1000.0,
        "count": raw["count"].to_numpy(dtype="float64"),
        "min_us": raw["mn"].to_numpy(dtype="float64") / 1000.0,
        "max_us": raw["mx"].to_numpy(dtype="float64") / 1000.0,
    })
    out["avg_us"] = out["total_us"] / out["count"]
    return out[API_COLUMNS].sort_values("total_us", ascending=False, ignore_index=True)


def _events(con: sqlite3.Connection, tables: set[str], strings: StringIds, path: Path,
            meta: Meta) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(the events the analysis reads, the others counted per process and name): ``Meta.events_read``."""
    frames: list[pd.DataFrame] = []
    levels = _enum(con, tables, "ENUM_API_TYPE")
    if "CANN_API" in tables:
        raw = _sorted(_numeric(con, f"SELECT {_rel(meta, 'startNs')} AS startNs, endNs - startNs AS dur, type, "
                                    "globalTid & 4294967295 AS tid, name FROM CANN_API", path), "startNs")
        level = _categorical_map(raw["type"], levels)
        names = pd.Series(strings.decode(raw["name"]))
        prefix = level.map(lambda lv: _API_PREFIX.get(str(lv))).astype(object)
        full = (prefix.fillna("") + np.where(prefix.notna(), "@", "") + names.astype(str)).astype("category")
        frames.append(_event_frame("CANN", full, level.astype(object), raw, meta))
    if "PYTORCH_API" in tables:
        raw = _numeric(con, f"SELECT {_rel(meta, 'CAST(startNs AS INTEGER)')} AS startNs, "
                            "CAST(endNs AS INTEGER) - CAST(startNs AS INTEGER) AS dur, type, "
                            "globalTid & 4294967295 AS tid, name FROM PYTORCH_API", path)
        raw = _sorted(raw, "startNs")
        level = _categorical_map(raw["type"], levels).astype(object)
        category = level.map(lambda lv: _PYTORCH_CATEGORY.get(lv, lv))
        frames.append(_event_frame("Python", pd.Series(strings.decode(raw["name"])), category, raw, meta))
    if "OVERLAP_ANALYSIS" in tables:
        raw = _sorted(_numeric(con, f"SELECT {_rel(meta, 'startNs')} AS startNs, endNs - startNs AS dur, type, "
                                    "type AS tid FROM OVERLAP_ANALYSIS", path), "startNs")
        frames.append(_event_frame("Overlap Analysis", _categorical_map(raw["type"], OVERLAP_TYPES), None, raw, meta))
    if "TASK" in tables:
        cond = "WHERE globalTaskId NOT IN (SELECT globalTaskId FROM COMPUTE_TASK_INFO)" \
            if "COMPUTE_TASK_INFO" in tables else ""
        raw = _sorted(_numeric(con, f"SELECT {_rel(meta, 'startNs')} AS startNs, endNs - startNs AS dur, taskType, "
                                    f"streamId AS tid FROM TASK {cond}", path), "startNs")
        frames.append(_event_frame("Ascend Hardware", pd.Series(strings.decode(raw["taskType"])), "device_task",
                                   raw, meta))
    frames += _hccl_events(con, tables, strings, path, meta)
    if "GC_RECORD" in tables and {"startNs", "endNs"} <= set(table_columns(con, "GC_RECORD")):
        raw = _numeric(con, f"SELECT {_rel(meta, 'startNs')} AS startNs, endNs - startNs AS dur, NULL AS tid "
                            "FROM GC_RECORD", path)
        frames.append(_event_frame("Python", pd.Series(["GC"] * len(raw)), "GC", raw, meta))
    counted = EventCounter()
    frames = [kept for f in frames if len(f) and len(kept := split_events(f, meta.events_read, counted))]
    summary = counted.frame()
    note_counted(meta, path.name, counted, summary)
    if not frames:
        return empty_frame(EVENTS_COLUMNS), summary
    events = pd.concat(frames, ignore_index=True)
    for col in ("process", "name", "category"):
        events[col] = events[col].astype(object).astype("category")
    events["tid"] = events["tid"].astype("category")
    return events[EVENTS_COLUMNS], summary


_HCCL_TASK_ARGS = (("size", "size(Byte)"), ("srcRank", "src rank"), ("dstRank", "dst rank"))


def _hccl_events(con: sqlite3.Connection, tables: set[str], strings: StringIds, path: Path,
                 meta: Meta) -> list[pd.DataFrame]:
    """Process ``HCCL`` events as the trace has them: one per ``COMMUNICATION_OP`` (named by the op) and one per
    ``COMMUNICATION_TASK_INFO`` task (timed by its ``TASK`` row) with args ``size(Byte)``, ``transport type``,
    ``link type``, ``src rank``, ``dst rank``, ``group`` (its communication group's name). The tasks stay ``Ascend
    Hardware`` events too (additive)."""
    frames: list[pd.DataFrame] = []
    if "COMMUNICATION_OP" in tables and {"opName", "startNs", "endNs"} <= set(table_columns(con, "COMMUNICATION_OP")):
        raw = _sorted(_numeric(con, f"SELECT {_rel(meta, 'startNs')} AS startNs, endNs - startNs AS dur, opName, "
                                    "0 AS tid FROM COMMUNICATION_OP", path), "startNs")
        frames.append(_event_frame("HCCL", pd.Series(strings.decode(raw["opName"])), None, raw, meta))
    if "COMMUNICATION_TASK_INFO" not in tables or "TASK" not in tables:
        return frames
    cols = set(table_columns(con, "COMMUNICATION_TASK_INFO"))
    if not {"globalTaskId", "taskType"} <= cols:
        return frames
    extra = [c for c, _ in _HCCL_TASK_ARGS if c in cols] + [c for c in ("transportType", "linkType", "groupName")
                                                            if c in cols]
    select = ", ".join([f"c.{c}" for c in extra] + ["c.taskType AS task_type"])
    raw = _sorted(_numeric(con, f"SELECT {_rel(meta, 't.startNs')} AS startNs, t.endNs - t.startNs AS dur, "
                                f"c.planeId + 1 AS tid, {select} "
                                f"FROM COMMUNICATION_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId"
                           if "planeId" in cols else
                           f"SELECT {_rel(meta, 't.startNs')} AS startNs, t.endNs - t.startNs AS dur, 1 AS tid, {select} "
                           f"FROM COMMUNICATION_TASK_INFO c JOIN TASK t ON t.globalTaskId = c.globalTaskId", path),
                  "startNs")
    if not len(raw):
        return frames
    args: dict[str, list[Any]] = {}
    for col, key in _HCCL_TASK_ARGS:
        if col in raw:
            args[key] = [None if v != v else int(v) for v in raw[col].to_numpy(dtype="float64")]
    for col, key, enum in (("transportType", "transport type", "ENUM_HCCL_TRANSPORT_TYPE"),
                           ("linkType", "link type", "ENUM_HCCL_LINK_TYPE")):
        if col in raw:
            args[key] = list(_categorical_map(raw[col], _enum(con, tables, enum)).astype(object))
    if "groupName" in raw:
        args["group"] = list(pd.Series(_clean_categories(strings.decode(raw["groupName"]))).astype(object))
    frame = _event_frame("HCCL", pd.Series(strings.decode(raw["task_type"])), None, raw, meta)
    keys = list(args)
    frame["args"] = [dict(zip(keys, vals, strict=True)) for vals in zip(*(args[k] for k in keys), strict=True)] \
        if keys else [None] * len(frame)
    frames.append(frame)
    return frames


def _event_frame(process: str, names: Any, category: Any, raw: pd.DataFrame, meta: Meta) -> pd.DataFrame:
    """``raw``: startNs (ns since the rank's origin), dur (ns) and tid columns of a numeric query."""
    n = len(raw)
    return pd.DataFrame({
        "process": [process] * n,
        "name": np.asarray(names, dtype=object),
        "category": np.asarray(category, dtype=object) if not isinstance(category, str | type(None))
        else [category] * n,
        "start_us": raw["startNs"].to_numpy() / 1000.0,
        "duration_us": raw["dur"].to_numpy() / 1000.0,
        "tid": raw["tid"].to_numpy(),
        "args": [None] * n,
    })


def _tx(con: sqlite3.Connection, tables: set[str], strings: StringIds, path: Path, meta: Meta) -> pd.DataFrame:
    if "MSTX_EVENTS" not in tables:
        return empty_frame(TX_COLUMNS)
    raw = _sorted(_numeric(con, f"SELECT {_rel(meta, 'startNs')} AS startNs, endNs - startNs AS dur, eventType, "
                                "message FROM MSTX_EVENTS", path), "startNs")
    kinds = _enum(con, tables, "ENUM_MSTX_EVENT_TYPE")
    return pd.DataFrame({
        "name": pd.Series(strings.decode(raw["message"])).astype(object),
        "start_us": raw["startNs"].to_numpy() / 1000.0,
        "duration_us": raw["dur"].to_numpy() / 1000.0,
        "category": _categorical_map(raw["eventType"], kinds).astype(object),
    })


def _memory(con: sqlite3.Connection, tables: set[str], strings: StringIds, path: Path, meta: Meta) -> pd.DataFrame:
    if "MEMORY_RECORD" not in tables:
        return empty_frame(MEMORY_COLUMNS)
    raw = _numeric(con, f"SELECT component, {_rel(meta, 'timestamp')} AS timestamp, totalAllocated, totalReserved, "
                        "totalActive "
                        "FROM MEMORY_RECORD", path)
    raw = _sorted(raw, "timestamp")
    return pd.DataFrame({
        "component": pd.Series(strings.decode(raw["component"])).astype(object),
        "timestamp_us": raw["timestamp"].to_numpy(dtype="float64") / 1000.0,
        "allocated_mb": pd.to_numeric(raw["totalAllocated"], errors="coerce").to_numpy(dtype="float64") / _MIB,
        "reserved_mb": pd.to_numeric(raw["totalReserved"], errors="coerce").to_numpy(dtype="float64") / _MIB,
        "active_mb": pd.to_numeric(raw["totalActive"], errors="coerce").to_numpy(dtype="float64") / _MIB,
    })


# ---------------------------------------------------------------------------------------------------------
# meta
# ---------------------------------------------------------------------------------------------------------
def _session(con: sqlite3.Connection, tables: set[str], meta: Meta) -> dict[str, float]:
    if "SESSION_TIME_INFO" not in tables:
        return {}
    cols = table_columns(con, "SESSION_TIME_INFO")
    if not {"startTimeNs", "endTimeNs"} <= set(cols):
        return {}
    row = con.execute("SELECT startTimeNs, endTimeNs FROM SESSION_TIME_INFO LIMIT 1").fetchone()
    if not row or row[0] is None or row[1] is None:
        return {}
    start, end = us_from_ns(meta, np.array([row[0], row[1]], dtype=np.int64))
    return {"start_us": float(start), "end_us": float(end), "duration_us": (row[1] - row[0]) / 1000.0}


def _read_db_meta(con: sqlite3.Connection, tables: set[str], meta: Meta) -> None:
    if "META_DATA" in tables:
        for name, value in con.execute("SELECT name, value FROM META_DATA"):
            key = str(name)
            low = key.lower()
            if key == "ENV_VARIABLES":
                try:
                    env = safeload.loads_json(value, "META_DATA.ENV_VARIABLES") if value else {}
                except (TypeError, InputError):
                    env = {}
                if isinstance(env, dict):
                    meta.environment.update({str(k): str(v) for k, v in env.items()})
            elif "version" in low:
                if "cann" in low:
                    meta.cann_version = meta.cann_version or str(value)
                elif "torch_npu" in low or "pta" in low:
                    meta.torch_npu_version = meta.torch_npu_version or str(value)
                elif key == "SCHEMA_VERSION":
                    meta.notes.append(f"database schema version {value}")
    if meta.rank is None and "RANK_DEVICE_MAP" in tables:
        row = con.execute("SELECT rankId FROM RANK_DEVICE_MAP LIMIT 1").fetchone()
        if row and row[0] is not None and int(row[0]) >= 0 and int(row[0]) != 4294967295:
            meta.rank = int(row[0])
    if meta.chip is None and "NPU_INFO" in tables:
        row = con.execute("SELECT name FROM NPU_INFO WHERE name IS NOT NULL LIMIT 1").fetchone()
        if row and row[0]:
            meta.chip = str(row[0])


def _read_profiler_jsons(pt_dir: Path, meta: Meta) -> None:
    """Rank/config from ``profiler_info_*.json`` and env vars from ``profiler_metadata.json`` beside the db."""
    if not pt_dir.is_dir():
        return
    for info in sorted(pt_dir.glob("profiler_info*.json"))[:1]:
        try:
            data = safeload.load_json(info)
        except InputError as e:
            meta.skip(info, e.problem)
            continue
        meta.read(info)
        if isinstance(data, dict):
            rank = pd.to_numeric(pd.Series([data.get("rank_id")]), errors="coerce").iloc[0]
            if meta.rank is None and rank == rank and rank >= 0:
                meta.rank = int(rank)
            if isinstance(data.get("config"), dict):
                meta.config = data["config"]
            for key, attr in (("torch_npu_version", "torch_npu_version"), ("cann_version", "cann_version"),
                              ("ms_version", "framework")):
                if isinstance(data.get(key), str) and getattr(meta, attr) in (None, "pytorch", "mindspore"):
                    setattr(meta, attr, data[key] if attr != "framework" else f"mindspore {data[key]}")
    md = pt_dir / "profiler_metadata.json"
    if md.is_file():
        try:
            data = safeload.load_json(md)
        except InputError as e:
            meta.skip(md, e.problem)
            return
        meta.read(md)
        env = data.get("ENV_VARIABLES") if isinstance(data, dict) else None
        if isinstance(env, dict):
            meta.environment.update({str(k): str(v) for k, v in env.items()})



# ---------------------------------------------------------------------------------------------------------
# the layouts this module reads (advisor.ingest.registry)
# ---------------------------------------------------------------------------------------------------------
def _msprof_db_dir(d: Path) -> list[RankSource]:
    return [RankSource(d, "msprof-db")] if any(d.glob("msprof_*.db")) else []


def _db_file(prefix: str, layout: str) -> Find:
    """A lone ``.db`` file named ``<prefix>*`` (any name when ``prefix`` is empty) is ``layout``."""

    def find(p: Path) -> list[RankSource]:
        name = p.name.lower()
        return [RankSource(p, layout)] if name.endswith(".db") and name.startswith(prefix) else []

    return find


LAYOUTS = (
    Layout("msprof-db", "msprof", "msprof SQLite export: msprof_*.db", read,
           in_dir=(Match(60, _msprof_db_dir),), as_file=(Match(10, _db_file("msprof", "msprof-db")),), runs=True),
    Layout("torch_npu-db", "torch_npu", "torch_npu: *_ascend_pt/ASCEND_PROFILER_OUTPUT/ascend_pytorch_profiler_*.db",
           read, in_dir=(Match(31, find_export("torch_npu-db")),),
           as_file=(Match(19, _db_file("", "torch_npu-db")),), framework="torch_npu"),
    Layout("mindspore-db", "MindSpore", "MindSpore 2.x: *_ascend_ms/ASCEND_PROFILER_OUTPUT/"
           "ascend_mindspore_profiler_*.db", read, in_dir=(Match(33, find_export("mindspore-db")),),
           as_file=(Match(11, _db_file("ascend_mindspore_profiler", "mindspore-db")),), framework="mindspore"),
)


__all__ = ["connect", "read", "read_analysis_db", "read_analysis_matrix", "table_columns", "table_names"]
