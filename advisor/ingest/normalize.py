"""Turn a table that already uses canonical column names into a normalized ``ops`` table.

Every reader (CSV, SQLite, timeline) builds a DataFrame with some of ``advisor.model.OPS_COLUMNS`` (plus
``aic_*``/``aiv_*`` metrics) and hands it to :func:`finalize_ops`, which adds what is missing as NaN, fixes
dtypes, derives the unified metrics on split-core chips, and makes repeated strings categorical.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Callable

import numpy as np
import pandas as pd

from advisor.model import (
    OP_METRIC_COLUMNS,
    OP_TASK_COLUMNS,
    OP_TENSOR_COLUMNS,
    OPS_COLUMNS,
    OPS_FULL_PRECISION_COLUMNS,
    OpsProjection,
    store_metric,
)

EAGER_MODEL_ID = 4294967295
"""``Model ID`` written for single-op (eager) mode tasks: not a model, so it becomes NaN."""

_STRING_COLUMNS = ["name", "type", "core", "op_state", *OP_TENSOR_COLUMNS]
_NUMERIC_TASK_COLUMNS = [c for c in OP_TASK_COLUMNS if c != "op_state"]

# unified metric <- (cube-core column, vector-core column); the unified value is taken from the core that
# does that kind of work, falling back to the other one
_SPLIT_METRICS = {
    "mac_ratio": ("aic_mac_ratio", None),
    "vec_ratio": (None, "aiv_vec_ratio"),
    "scalar_ratio": ("aic_scalar_ratio", "aiv_scalar_ratio"),
    "mte1_ratio": ("aic_mte1_ratio", None),
    "mte2_ratio": ("aic_mte2_ratio", "aiv_mte2_ratio"),
    "mte3_ratio": ("aic_mte3_ratio", "aiv_mte3_ratio"),
    "fixpipe_ratio": ("aic_fixpipe_ratio", None),
    "icache_miss_rate": ("aic_icache_miss_rate", "aiv_icache_miss_rate"),
    "total_cycles": ("aic_total_cycles", "aiv_total_cycles"),
    "cube_fops": ("aic_cube_fops", "aiv_cube_fops"),
    "vector_fops": ("aic_vector_fops", "aiv_vector_fops"),
    "main_mem_read_bw": ("aic_main_mem_read_bw", "aiv_main_mem_read_bw"),
    "main_mem_write_bw": ("aic_main_mem_write_bw", "aiv_main_mem_write_bw"),
}

_VECTOR_CORES = {"AI_VECTOR_CORE", "MIX_AIV"}
_PIPE_RATIOS = ("mac_ratio", "vec_ratio", "scalar_ratio", "mte1_ratio", "mte2_ratio", "mte3_ratio", "fixpipe_ratio")
"""The unified pipe ratios: on split-core chips each comes from the side (cube or vector core) that limits the task
(:func:`_busier_side`), so a MIX kernel's pipe evidence is that side's, never the idle side's."""
_SIDE_TIMES = ("aicore_time_us", "aiv_time_us")
_SIDE_COLUMNS = tuple(c for ratio in _PIPE_RATIOS for c in _SPLIT_METRICS[ratio] if c) + _SIDE_TIMES
_DERIVED_FROM = {
    **{unified: tuple(c for c in pair if c) for unified, pair in _SPLIT_METRICS.items()},
    **{ratio: _SIDE_COLUMNS for ratio in _PIPE_RATIOS},
    "aicore_time_us": ("aiv_time_us",),
    "memory_bound": ("mac_ratio", "vec_ratio", "mte2_ratio"),
}
"""What :func:`finalize_ops` derives a column from when the file lacks it."""


def read_projection(projection: OpsProjection) -> OpsProjection:
    """``projection`` plus the columns :func:`finalize_ops` derives the wanted ones from (``memory_bound`` from the
    pipe ratios, which come from their per-core columns): what a reader must read to give the wanted columns."""
    wanted = set()
    todo = [c for c in _DERIVED_FROM if projection.wants(c)]
    while todo:
        col = todo.pop()
        for source in _DERIVED_FROM.get(col, ()):
            if source not in wanted:
                wanted.add(source)
                todo.append(source)
    return projection.plus(wanted)


def to_number(series: pd.Series) -> pd.Series:
    """Numbers from CSV text: strips trailing TABs/quotes, ``N/A`` and blanks become NaN."""
    if pd.api.types.is_numeric_dtype(series):
        return series.astype("float64")
    s = series.astype("string").str.strip().str.strip('"').str.strip()
    s = s.str.rstrip("%")
    return pd.to_numeric(s, errors="coerce").astype("float64")


_MISSING_TEXT = frozenset(("N/A", "", "NA"))
"""Cell texts that mean "no value" once stripped."""


def clean_text(series: pd.Series) -> pd.Series:
    """Strip whitespace/quotes; ``N/A``/empty become missing.

    Categoricals are cleaned per distinct value (a million-row column has a few hundred), not per row.
    """
    if isinstance(series.dtype, pd.CategoricalDtype):
        codes = series.cat.codes.to_numpy()
        cleaned = clean_text(pd.Series(series.cat.categories.astype(str))).to_numpy(dtype=object)
        values = np.where(codes >= 0, cleaned[np.clip(codes, 0, None)] if len(cleaned) else None, None)
        return pd.Series(values, index=series.index, dtype="string")
    s = series.astype("string").str.strip().str.strip('"').str.strip()
    return s.mask(s.isin(list(_MISSING_TEXT)))


_PLAIN = re.compile(r"[\t\n\r\x20-\x7e]*")


def _clean_plain(names: list[str], case: Callable[[str], str] | None) -> np.ndarray | None:
    """:func:`clean_text` (then ``case``) of a few distinct names in plain Python -- the pandas string methods
    cost tens of microseconds each, whatever the length -- when every name is printable ASCII (where Python's and
    pandas' whitespace and case agree); else None."""
    if not all(_PLAIN.fullmatch(v) for v in names):
        return None
    out = []
    for v in names:
        v = v.strip().strip('"').strip()
        out.append(None if v in _MISSING_TEXT else case(v) if case is not None else v)
    return np.array(out, dtype=object)


def _clean_categorical(series: pd.Series, case: Callable[[str], str] | None) -> pd.Series:
    """:func:`clean_text` (then ``case``) of a categorical column, returned as the categorical that
    ``.astype("category")`` of the cleaned text would give (sorted ``string`` categories), without making the
    per-row text."""
    names = series.cat.categories.astype(str)
    values = _clean_plain(names.tolist(), case)
    if values is None:
        cleaned = clean_text(pd.Series(names, dtype=object))
        if case is not None:
            cleaned = cleaned.str.upper() if case is str.upper else cleaned.str.lower()
        values = cleaned.to_numpy(dtype=object, na_value=None)
    keep = np.array([v is not None for v in values], dtype=bool)
    uniq = sorted(set(values[keep].tolist()))
    position = {v: i for i, v in enumerate(uniq)}
    remap = np.array([position[v] if k else -1 for v, k in zip(values.tolist(), keep.tolist(), strict=True)] + [-1],
                     dtype=np.int32)
    codes = series.cat.codes.to_numpy()
    new_codes = remap[np.where(codes >= 0, codes, len(values))]
    categories = pd.Index(uniq, dtype="string")
    return pd.Series(pd.Categorical.from_codes(new_codes, dtype=pd.CategoricalDtype(categories)), index=series.index)


def finalize_ops(df: pd.DataFrame, *, categorical: bool = True, share_missing: bool = False) -> pd.DataFrame:
    """Complete and type a canonical-named ops table (see module doc). Returns a new frame.

    ``share_missing``: a number column the table lacks is one NaN broadcast, not n (readers of large tables:
    read-only until :func:`share_constant_columns` pins the frame that leaves ingest)."""
    df = df.copy() if not df.columns.is_unique else df
    n = len(df)
    for col in OPS_COLUMNS:
        if col not in df.columns:
            nan = _nan_column(n) if share_missing else np.full(n, np.nan)
            df[col] = pd.Series(nan, index=df.index, copy=False) if col not in _STRING_COLUMNS \
                else pd.Series(pd.NA, index=df.index, dtype="string")

    for col in _STRING_COLUMNS:
        case = str.upper if col == "core" else str.lower if col == "op_state" else None
        if categorical and isinstance(df[col].dtype, pd.CategoricalDtype):
            df[col] = _clean_categorical(df[col], case)  # per distinct value: a million rows, a few hundred names
        else:
            df[col] = clean_text(df[col])
            if case is str.upper:
                df[col] = df[col].str.upper()
            elif case is str.lower:
                df[col] = df[col].str.lower()

    for col in ["start_us", "duration_us", "wait_us", *_NUMERIC_TASK_COLUMNS]:
        df[col] = to_number(df[col])
    eager = df["model_id"] == EAGER_MODEL_ID
    if eager.any():  # (a write into a column read as one shared value would fail)
        df["model_id"] = df["model_id"].mask(eager)

    prefixed = [c for c in df.columns if c.startswith(("aic_", "aiv_"))]
    for col in [*OP_METRIC_COLUMNS, *prefixed]:
        df[col] = to_number(df[col])

    _derive_unified_metrics(df)

    if categorical:
        for col in ["name", "type", "core", "op_state", *OP_TENSOR_COLUMNS]:
            df[col] = df[col].astype("category")
    return df.reset_index(drop=True)


def share_constant_columns(df: pd.DataFrame) -> pd.DataFrame:
    """``df`` with every float column that holds one value throughout (all NaN: a metric this profile did not
    collect; all 0: ``wait_us`` of a run without waits) stored as that value broadcast (:func:`broadcast_constant`).

    A broadcast array is read-only; each such column is also held by a small Series pinned for as long as ``df``
    lives, so pandas' copy-on-write sees a second reference and copies the column before any in-place write
    (``df.loc[i, col] = v``) instead of failing."""
    if len(df) < 2:
        return df
    pins = []
    for col in df.columns:
        if df[col].dtype != np.float64:
            continue
        values = broadcast_constant(df[col].to_numpy())
        if values.strides == (0,):
            pinned = pd.Series(values, index=df.index, copy=False)
            df[col] = pinned
            pins.append(pinned)
    if pins:
        _PINNED[id(df)] = pins
        weakref.finalize(df, _PINNED.pop, id(df), None)
    return df


def store_metrics(df: pd.DataFrame, projection: OpsProjection | None) -> pd.DataFrame:
    """``df`` with its metric columns (every float64 column but ``OPS_FULL_PRECISION_COLUMNS``) stored at the
    precision the file wrote them (:func:`advisor.model.store_metric`: float32 where that is exact) -- when the
    run's ``projection`` says every knowledge base reads them with ``metric_values``; else ``df`` as it is."""
    if projection is None or not projection.metrics_at_precision:
        return df
    for col in df.columns:
        if col in OPS_FULL_PRECISION_COLUMNS or df[col].dtype != np.float64:
            continue
        values = df[col].to_numpy()
        stored = store_metric(values)
        if stored is not values:
            df[col] = pd.Series(stored, index=df.index, copy=False)
    return df


def broadcast_constant(values: np.ndarray) -> np.ndarray:
    """``values`` as one value broadcast (8 bytes, not 8 per row: 16 MB per column at 2M kernels) when it is a
    float64 array holding that value in every row, else ``values`` itself. Read-only: see
    :func:`share_constant_columns` for the frame that readers hand on."""
    if values.dtype != np.float64 or len(values) < 2 or values.strides == (0,):
        return values
    first = values[0]
    same = np.isnan(values).all() if first != first else bool((values == first).all())
    return np.broadcast_to(values[:1].copy(), values.shape) if same else values


def _nan_column(n: int) -> np.ndarray:
    """A column of ``n`` NaN as one shared value (a metric the file does not have)."""
    return np.broadcast_to(np.array([np.nan]), (n,))


_PINNED: dict[int, list[pd.Series]] = {}
"""The pins of :func:`share_constant_columns`, by ``id`` of their frame (dropped when it is collected)."""


def _busier_side(df: pd.DataFrame, is_vector: np.ndarray) -> np.ndarray:
    """Per task of a split-core chip, whether its vector side (``aiv_*``) limits it rather than its cube side
    (``aic_*``): the side whose busiest pipe (scalar included) spends the longer time -- the side's time x its
    largest pipe ratio, or the ratio alone where a side's time is not recorded. A side without any ratio loses; a
    tie (both idle) goes to the task type's own side (AI_VECTOR_CORE / MIX_AIV: vector)."""
    n = len(df)

    def busiest(side: str) -> np.ndarray:
        cols = [_SPLIT_METRICS[r][0 if side == "aic" else 1] for r in _PIPE_RATIOS]
        top = np.full(n, np.nan)
        for c in cols:  # one column at a time: no (pipes x tasks) stack of a 2M-task table
            if c and c in df.columns:
                top = np.fmax(top, df[c].to_numpy(dtype="float64"))
        return top

    def busy(side: str, time_col: str) -> np.ndarray:
        top = busiest(side)
        t = df[time_col].to_numpy(dtype="float64") if time_col in df.columns else np.full(n, np.nan)
        return np.where(np.isfinite(t), t * top, top)

    a, v = busy("aic", "aicore_time_us"), busy("aiv", "aiv_time_us")
    both_timed = np.isfinite(a) & np.isfinite(v)
    if "aicore_time_us" in df.columns and "aiv_time_us" in df.columns:  # compare like with like
        ta, tv = df["aicore_time_us"].to_numpy(dtype="float64"), df["aiv_time_us"].to_numpy(dtype="float64")
        mixed = both_timed & (np.isfinite(ta) != np.isfinite(tv))
        a, v = np.where(mixed, busiest("aic"), a), np.where(mixed, busiest("aiv"), v)
    out = np.where(np.isfinite(a) & np.isfinite(v), np.where(v == a, is_vector, v > a),
                   np.where(np.isfinite(v), True, np.where(np.isfinite(a), False, is_vector)))
    return out.astype(bool)


def _derive_unified_metrics(df: pd.DataFrame) -> None:
    if not len(df):
        return
    is_vector = df["core"].isin(_VECTOR_CORES).to_numpy()
    vector_side: np.ndarray | None = None
    for unified, (aic, aiv) in _SPLIT_METRICS.items():
        have_aic = aic is not None and aic in df.columns
        have_aiv = aiv is not None and aiv in df.columns
        if not (have_aic or have_aiv):
            continue
        current = df[unified].to_numpy(dtype="float64")
        if not np.isnan(current).all():
            continue  # unprefixed column present (310/310P/910A): keep it
        a = df[aic].to_numpy(dtype="float64") if have_aic else np.full(len(df), np.nan)
        v = df[aiv].to_numpy(dtype="float64") if have_aiv else np.full(len(df), np.nan)
        if unified in _PIPE_RATIOS:  # the limiting side's pipes: a MIX kernel is judged on its busier side
            if vector_side is None:
                vector_side = _busier_side(df, is_vector)
            df[unified] = np.where(vector_side, v, a)
            continue
        primary = np.where(is_vector, v, a)
        secondary = np.where(is_vector, a, v)
        df[unified] = np.where(np.isnan(primary), secondary, primary)

    if df["aicore_time_us"].isna().all() and "aiv_time_us" in df.columns:
        df["aicore_time_us"] = df["aiv_time_us"]
    # memory_bound = mte2 / max(mac, vec) (msprof's definition) where the file did not carry it
    if df["memory_bound"].isna().all():
        denom = np.fmax(df["mac_ratio"].to_numpy(dtype="float64"), df["vec_ratio"].to_numpy(dtype="float64"))
        mte2 = df["mte2_ratio"].to_numpy(dtype="float64")
        with np.errstate(divide="ignore", invalid="ignore"):
            mb = np.where(denom > 0, mte2 / denom, np.nan)
        df["memory_bound"] = mb
