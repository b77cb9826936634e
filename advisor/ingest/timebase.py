"""Time stamps without loss: every ``*_us`` time stamp of a rank is an offset from one origin per rank.

Profilers write absolute time stamps around 1.7e15 us (wall clock) as decimal text with three decimals
(``"1736405443881410.320\\t"``) or as SQLite ``startNs`` integers. A float64 holding such a value has a
resolution of 0.25 us, so unions of intervals drift from the raw sums (39.25 us of busy time where the file's
durations add up to 39.322). Ingest therefore parses every time stamp exactly, to integer nanoseconds, and stores
``(ns - origin_ns) / 1000`` as float64 microseconds: offsets of a few seconds keep nanosecond resolution.

The origin is the first time stamp any reader of the rank converts, floored to a whole second; it is recorded in
``Meta.time_origin_ns`` so that absolute times (e.g. to line ranks up) are ``origin_ns + offset_us * 1000``.
Offsets before the origin are negative, which is fine.

Sources that are already floats (JSON numbers in msprof CANN <= 7 traces, MindSpore timelines) are converted as
written; their time stamps are small (seconds since boot), where a float64 is exact to the nanosecond.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from advisor.model import Meta

NS_PER_US = 1000
_SECOND_NS = 1_000_000_000
_TRIM = " \t\r\n\""
_DECIMAL = pa.decimal128(30, 3)
_MISSING = np.iinfo(np.int64).min
"""Sentinel for "no time stamp" in int64 nanosecond buffers (a row without ``ts``)."""


def _origin(meta: Meta, ns: np.ndarray, valid: np.ndarray) -> int:
    if meta.time_origin_ns is None:
        first = int(ns[valid][0]) if valid.any() else 0
        meta.time_origin_ns = (first // _SECOND_NS) * _SECOND_NS
    return int(meta.time_origin_ns)


def set_origin(meta: Meta, ns: np.ndarray) -> None:
    """Take the rank's origin from ``ns`` (integer nanoseconds, ``MISSING_NS`` where absent) if none is set yet and
    ``ns`` holds a time stamp: a reader that converts only part of what it reads (events it counts but does not
    keep) fixes the origin the whole would have given."""
    if meta.time_origin_ns is None:
        valid = ns != _MISSING
        if valid.any():
            _origin(meta, ns, valid)


def us_from_ns(meta: Meta, ns: np.ndarray | list[int]) -> np.ndarray:
    """Integer nanoseconds (``MISSING_NS`` or NaN where absent) -> float64 microsecond offsets from the origin."""
    arr = np.asarray(ns)
    if arr.dtype.kind == "f":  # SQLite columns with NULLs come back as floats
        valid = ~np.isnan(arr)
        ints = np.where(valid, arr, 0).astype(np.int64)
    else:
        ints = arr.astype(np.int64, copy=False)
        valid = ints != _MISSING
    out = np.full(len(ints), np.nan)
    if not len(ints):
        return out
    origin = _origin(meta, ints, valid)
    out[valid] = (ints[valid] - origin) / NS_PER_US
    return out


def us_from_text(meta: Meta, values: pa.Array | pa.ChunkedArray) -> np.ndarray:
    """Decimal microsecond text (trailing TABs, quotes, blanks allowed) -> float64 offsets, parsed exactly.

    Cells that are not plain decimals (``N/A``, exponents) are parsed as floats (or NaN) instead.
    """
    text = pc.utf8_trim(values, characters=_TRIM)
    plain = pc.fill_null(pc.match_substring_regex(text, r"^-?\d+(\.\d*)?$"), False)
    exact = pc.cast(pc.if_else(plain, text, pa.scalar(None, pa.string())), _DECIMAL, safe=False)
    ns_dec = pc.multiply(exact, pa.scalar(1000, pa.decimal128(4, 0)))
    ns = pc.cast(ns_dec, pa.int64(), safe=False)
    ints = np.asarray(pc.fill_null(ns, _MISSING).to_numpy(zero_copy_only=False), dtype=np.int64)
    out = us_from_ns(meta, ints)
    rest = ~np.asarray(plain.to_numpy(zero_copy_only=False), dtype=bool)
    if rest.any():  # exponents and the like: as floats, same origin
        floats = pc.cast(pc.if_else(plain, pa.scalar(None, pa.string()), text), pa.float64(), safe=False)
        fl = np.asarray(pc.fill_null(floats, math.nan).to_numpy(zero_copy_only=False), dtype="float64")
        out[rest] = us_from_float(meta, fl[rest])
    return out


def us_from_float(meta: Meta, us: np.ndarray) -> np.ndarray:
    """Microseconds already held as floats -> offsets from the origin (as exact as the source)."""
    arr = np.asarray(us, dtype="float64")
    valid = np.isfinite(arr) & (np.abs(arr) < _LIMIT / NS_PER_US)
    safe = np.where(valid, arr, 0.0)
    whole = np.trunc(safe)
    ns = whole.astype(np.int64) * NS_PER_US + np.round((safe - whole) * NS_PER_US).astype(np.int64)
    ns[~valid] = _MISSING
    return us_from_ns(meta, ns)


def ns_of(value: object) -> int:
    """One trace ``ts`` (a decimal string or a number, microseconds) -> integer nanoseconds, exactly for strings;
    ``MISSING_NS`` when absent or unparsable. Runs once per trace event: keep it cheap."""
    if type(value) is str:
        s = value.strip()
        dot = s.find(".")
        try:
            if dot < 0:
                ns = int(s) * NS_PER_US
                return ns if -_LIMIT < ns < _LIMIT else _MISSING
            frac = s[dot + 1:dot + 4]
            whole = int(s[:dot] or "0")
            part = int(frac.ljust(3, "0")) if frac else 0
            ns = whole * NS_PER_US - part if s.startswith("-") else whole * NS_PER_US + part
            return ns if -_LIMIT < ns < _LIMIT else _MISSING
        except ValueError:
            try:
                return _float_ns(float(s))
            except ValueError:
                return _MISSING
    if type(value) is float or type(value) is int:
        return _float_ns(value)
    return _MISSING


_PLAIN_TS = r"^(?P<neg>-?)(?P<whole>\d{1,16})(?:\.(?P<frac>\d{0,3})\d*)?$"
"""Decimal ``ts`` text: parsed vectorized, with exactly :func:`ns_of`'s result (fractions beyond the nanosecond
are cut, not rounded). Anything else goes through :func:`ns_of` one by one."""
_WHOLE_LIMIT = 2**62 // NS_PER_US
"""Whole microseconds below this give nanoseconds within :data:`_LIMIT` (larger ones: :func:`ns_of` decides)."""
_POW10 = 10 ** np.arange(15, -1, -1, dtype=np.int64)


def ns_of_many(values: list[object]) -> np.ndarray:
    """:func:`ns_of` over a list of trace ``ts`` values, as int64; vectorized for decimal strings (a trace's
    millions of time stamps), element by element for numbers and odd text."""
    n = len(values)
    out = np.full(n, _MISSING, dtype=np.int64)
    if not n:
        return out
    is_str = np.fromiter(map(str.__instancecheck__, values), dtype=bool, count=n)
    idx = np.flatnonzero(is_str)
    if len(idx):
        strs = values if len(idx) == n else [values[i] for i in idx.tolist()]
        done = _fixed_width_ns(strs, out, idx)
        idx = idx[~done]
        if len(idx):
            strs = [values[i] for i in idx.tolist()]
            text = pa.array(strs, type=pa.string())
            parts = pc.extract_regex(text, _PLAIN_TS)
            ok = np.asarray(parts.is_valid().to_numpy(zero_copy_only=False), dtype=bool)
            if ok.any():
                good = parts.filter(pa.array(ok))
                whole = np.asarray(pc.cast(good.field("whole"), pa.int64()).to_numpy(), dtype=np.int64)
                frac = pc.utf8_rpad(good.field("frac"), width=3, padding="0")
                part = np.asarray(pc.cast(frac, pa.int64()).to_numpy(), dtype=np.int64)
                neg = np.asarray(pc.equal(good.field("neg"), "-").to_numpy(zero_copy_only=False), dtype=bool)
                small = whole < _WHOLE_LIMIT
                ns = np.where(small, whole, 0) * NS_PER_US + part
                target = idx[ok]
                out[target[small]] = np.where(neg, -ns, ns)[small]
                ok[np.flatnonzero(ok)[~small]] = False
            idx = idx[~ok]
    for i in np.concatenate([idx, np.flatnonzero(~is_str)]).tolist():
        out[i] = ns_of(values[i])
    return out


def _fixed_width_ns(strs: list[str], out: np.ndarray, idx: np.ndarray) -> np.ndarray:
    """The common case in one pass: every string ``ddd...d.ddd`` of one length (torch_npu, msprof >= 8 traces).
    Fills ``out[idx]`` where a string has that form; returns which did."""
    done = np.zeros(len(strs), dtype=bool)
    try:
        raw = np.array(strs, dtype="S")
    except UnicodeEncodeError:
        return done
    width = raw.dtype.itemsize
    digits = width - 4
    if not 1 <= digits <= 16:
        return done
    m = raw.view(np.uint8).reshape(len(strs), width)
    d = m.astype(np.int64) - 48
    ok = (m[:, digits] == 46) & ((d[:, :digits] >= 0) & (d[:, :digits] <= 9)).all(axis=1) & \
        ((d[:, digits + 1:] >= 0) & (d[:, digits + 1:] <= 9)).all(axis=1)
    if not ok.any():
        return done
    whole = d[:, :digits] @ _POW10[16 - digits:]
    ok &= whole < _WHOLE_LIMIT
    frac = d[:, digits + 1:] @ np.array([100, 10, 1], dtype=np.int64)
    out[idx[ok]] = (whole * NS_PER_US + frac)[ok]
    return ok


_LIMIT = 2**62


def _float_ns(value: float) -> int:
    """Whole and fractional microseconds apart: ``value * 1000`` in float64 would round away up to 256 ns."""
    if value != value or not -_LIMIT < value * NS_PER_US < _LIMIT:  # NaN, inf, or beyond int64
        return _MISSING
    whole = int(value)
    return whole * NS_PER_US + int(round((value - whole) * NS_PER_US))


def absolute_ns(meta: Meta, offsets_us: float | np.ndarray) -> np.ndarray:
    """Offsets from the rank's origin -> absolute integer nanoseconds (as written in the raw files)."""
    arr = np.atleast_1d(np.asarray(offsets_us, dtype="float64"))
    return int(meta.time_origin_ns or 0) + np.round(arr * NS_PER_US).astype(np.int64)


def absolute_us(meta: Meta, offsets_us: float | np.ndarray) -> np.ndarray:
    """Offsets -> absolute microseconds as floats (0.25 us resolution near 1.7e15: for display and lining up
    ranks, not for arithmetic)."""
    return absolute_ns(meta, offsets_us) / NS_PER_US


MISSING_NS = _MISSING

__all__ = ["MISSING_NS", "NS_PER_US", "absolute_ns", "absolute_us", "ns_of", "us_from_float", "us_from_ns",
           "us_from_text"]
