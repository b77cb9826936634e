"""The one guarded way to load a whole JSON, YAML, TOML or protobuf-text document.

Every document that is parsed whole (profiler metadata, ``communication*.json``, ``info.json.N``, OM JSON graphs,
saved reports, rules files, ``pyproject.toml``, GE text dumps) goes through here, so the same bounds hold for all:

- only a regular file is opened (a FIFO or a device would block or never end), and its size is checked first;
- nesting is measured on the raw bytes before any recursive parser sees them (a parser or a later recursive
  walk would otherwise die of ``RecursionError`` on ``[[[[...]]]]``);
- YAML aliases are counted with their expansion (a "billion laughs" file expands to gigabytes);
- numbers a Python parser turns into errors (``Infinity``, 5000-digit integers) become one-line errors or
  ``None``.

Failures are :class:`advisor.common.errors.InputError` naming the file; callers that load rules turn them into
``RulesError``. Streamed trace JSON keeps its own block parser (``advisor.ingest.jsonstream``), with its own bounds.
"""

from __future__ import annotations

import json
import math
import os
import stat
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import yaml

from advisor.common.errors import InputError

MAX_DEPTH = 200
"""Deepest nesting accepted in a JSON/YAML/TOML document. Real profiler metadata, OM JSON graphs, saved reports
and rules stay under 20; 200 leaves room and keeps every recursive walk far from Python's recursion limit."""
MAX_PROTO_TEXT_DEPTH = 100
"""Deepest message nesting in protobuf text, as protobuf's own parsers default to."""
MAX_YAML_NODES = 1_000_000
"""Nodes a YAML document may expand to, aliases counted with their full expansion (rules files hold ~1000)."""
MAX_BYTES = 2 << 30
"""Largest whole-document file read into memory (OM JSON graphs of big models reach a few hundred MB)."""
MAX_SMALL_BYTES = 64 << 20
"""Largest metadata / rules / report file (these are a few KB to a few MB)."""

_QUOTE, _BACKSLASH = 0x22, 0x5C


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def exists(path: str | Path) -> bool:
    """``Path.exists`` that turns an unusable path (longer than NAME_MAX/PATH_MAX, a loop of links) into an
    InputError instead of an OSError."""
    try:
        os.stat(path)
    except (FileNotFoundError, NotADirectoryError):
        return False
    except OSError as e:
        raise InputError(path, f"cannot be used ({e.strerror or e})") from None
    return True


def check_regular(path: str | Path) -> os.stat_result:
    """Stat ``path`` (following links) and fail unless it is a regular file: reading a FIFO or a device as an
    input would block forever or never end."""
    try:
        st = os.stat(path)
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as e:
        raise InputError(path, f"cannot be read ({e.strerror or e})") from None
    if not stat.S_ISREG(st.st_mode):
        raise InputError(path, f"is {_kind(st.st_mode)}, expected a regular file")
    return st


def read_bytes(path: str | Path, max_bytes: int = MAX_SMALL_BYTES) -> bytes:
    """The whole content of a regular file of at most ``max_bytes``."""
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))  # a FIFO must not block the open
    except FileNotFoundError:
        raise InputError(path, "no such file") from None
    except OSError as e:
        raise InputError(path, f"cannot be read ({e.strerror or e})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise InputError(path, f"is {_kind(st.st_mode)}, expected a regular file")
        if st.st_size > max_bytes:
            raise InputError(path, f"is {_mb(st.st_size)}, more than the {_mb(max_bytes)} such a file may have")
        try:
            data = fh.read(max_bytes + 1)
        except OSError as e:
            raise InputError(path, f"cannot be read ({e.strerror or e})") from None
    if len(data) > max_bytes:  # grew while we read it
        raise InputError(path, f"is larger than the {_mb(max_bytes)} such a file may have")
    return data


def _mb(n: int) -> str:
    return f"{n / (1 << 20):,.1f} MB" if n >= 1 << 20 else f"{n:,} bytes"


def _text(path: str | Path, data: bytes) -> str:
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text (undecodable byte 0x{data[e.start]:02x} at offset {e.start})") \
            from None


# ---------------------------------------------------------------------------------------------------------
# nesting, measured on the raw bytes
# ---------------------------------------------------------------------------------------------------------
def _string_mask_positions(arr: np.ndarray, quotes: tuple[int, ...]) -> np.ndarray:
    """Positions of the quote characters that open or close a string (not escaped by an odd run of ``\\``)."""
    pos = np.flatnonzero(np.isin(arr, quotes))
    if not len(pos):
        return pos
    maybe = pos[(pos > 0) & (arr[np.maximum(pos - 1, 0)] == _BACKSLASH)]
    if len(maybe):
        escaped = []
        for q in maybe.tolist():  # rare: strings holding a quote
            run, i = 0, q - 1
            while i >= 0 and arr[i] == _BACKSLASH:
                run += 1
                i -= 1
            if run % 2:
                escaped.append(q)
        if escaped:
            pos = np.setdiff1d(pos, np.asarray(escaped, dtype=pos.dtype), assume_unique=True)
    if len(quotes) == 1 or not len(pos):
        return pos
    # two quote kinds ("..." and '...'): a quote inside the other kind's string is text; walk the (few) quotes
    keep, inside = [], 0
    for p in pos.tolist():
        c = int(arr[p])
        if inside == 0:
            inside = c
            keep.append(p)
        elif c == inside:
            inside = 0
            keep.append(p)
    return np.asarray(keep, dtype=pos.dtype)


def nesting_depth(data: bytes, opens: bytes = b"[{", closes: bytes = b"]}", quotes: bytes = b'"') -> int:
    """Deepest bracket nesting in ``data``, brackets inside quoted strings not counted (vectorized: ~0.1 s for
    100 MB). Unbalanced input gives the depth reached; the parser reports the syntax error."""
    arr = np.frombuffer(data, dtype=np.uint8)
    structural = np.flatnonzero(np.isin(arr, tuple(opens) + tuple(closes)))
    if not len(structural):
        return 0
    q = _string_mask_positions(arr, tuple(quotes))
    if len(q):
        structural = structural[np.searchsorted(q, structural) % 2 == 0]
    if not len(structural):
        return 0
    delta = np.where(np.isin(arr[structural], tuple(opens)), 1, -1)
    return int(np.cumsum(delta).max(initial=0))


def _check_depth(path: str | Path, depth: int, limit: int) -> None:
    if depth > limit:
        raise InputError(path, f"nested {depth:,} levels deep, more than the {limit} a real file has")


# ---------------------------------------------------------------------------------------------------------
# JSON
# ---------------------------------------------------------------------------------------------------------
def _non_finite(_: str) -> None:
    return None


def loads_json(data: bytes | str, source: str | Path = "<json>", max_depth: int = MAX_DEPTH) -> Any:
    """Parse a JSON document with the nesting bound. ``NaN``/``Infinity`` (written by Python, not JSON) read as
    None; numbers too large for a float or too long for an int are an error."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    _check_depth(source, nesting_depth(raw), max_depth)
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        first = e
    # orjson refuses what Python's json module writes (NaN, Infinity) and integers beyond 64 bits; the standard
    # parser reads them (nesting is already bounded), and says where a real syntax error is
    try:
        value = json.loads(_text(source, raw), parse_constant=_non_finite)
    except json.JSONDecodeError as e:
        cut = " (truncated: the file ends inside a value)" if e.pos >= len(raw.rstrip()) else ""
        raise InputError(source, f"invalid JSON{cut} at line {e.lineno} column {e.colno}: {e.msg}") from None
    except ValueError as e:  # int('9'*5000): Python limits integer digits
        raise InputError(source, f"invalid JSON number ({str(e).split(':')[0]})") from None
    except RecursionError:
        raise InputError(source, "nested too deeply to be read") from None
    if "infinity" in str(first):
        raise InputError(source, "a number is too large for a double (e.g. 1e400)")
    return value


def load_json(path: str | Path, max_bytes: int = MAX_SMALL_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """:func:`loads_json` of a regular file of at most ``max_bytes``."""
    return loads_json(read_bytes(path, max_bytes), path, max_depth)


# ---------------------------------------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------------------------------------
YAML_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's safe loader is ~10x faster than the pure-Python one; both build plain Python objects only."""


def _check_yaml_events(path: str | Path, text: str, max_depth: int, max_nodes: int) -> None:
    """Walk the event stream (libyaml's parser is iterative) before anything recursive builds the document:
    nesting and the node count with aliases expanded are bounded."""
    stack: list[list[Any]] = []  # [anchor, nodes so far] per open collection
    sizes: dict[str, int] = {}
    total = 0
    for ev in yaml.parse(text, Loader=YAML_LOADER):
        if isinstance(ev, (yaml.MappingStartEvent, yaml.SequenceStartEvent)):
            stack.append([ev.anchor, 1])
            if len(stack) > max_depth:
                raise InputError(path, f"nested more than {max_depth} levels deep")
            continue
        if isinstance(ev, (yaml.MappingEndEvent, yaml.SequenceEndEvent)):
            anchor, n = stack.pop()
            if anchor is not None:
                sizes[anchor] = n
            if stack:
                stack[-1][1] += n
            continue
        if isinstance(ev, yaml.ScalarEvent):
            n = 1
            if ev.anchor is not None:
                sizes[ev.anchor] = 1
        elif isinstance(ev, yaml.AliasEvent):
            n = sizes.get(ev.anchor, 1)
        else:
            continue
        total += n
        if total > max_nodes:
            raise InputError(path, f"expands to more than {max_nodes:,} values (aliases of aliases?)")
        if stack:
            stack[-1][1] += n
            if stack[-1][1] > max_nodes:
                raise InputError(path, f"expands to more than {max_nodes:,} values (aliases of aliases?)")


def loads_yaml(text: str, source: str | Path = "<yaml>", max_depth: int = MAX_DEPTH,
               max_nodes: int = MAX_YAML_NODES) -> Any:
    """Parse YAML with the safe loader, nesting and alias expansion bounded. Errors name the line."""
    try:
        _check_yaml_events(source, text, max_depth, max_nodes)
        return yaml.load(text, Loader=YAML_LOADER)  # noqa: S506 - a safe loader
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = str(getattr(e, "problem", None) or e)
        if "nesting depth" in problem:  # PyYAML >= 6.0.4 bounds nesting itself, before our event check sees it
            raise InputError(source, f"nested too deeply to be read{where} ({problem})") from None
        raise InputError(source, f"invalid YAML{where} ({problem})") from None
    except ValueError as e:  # a 5000-digit integer: Python limits the digits of int()
        raise InputError(source, f"invalid YAML number ({str(e).split(':')[0]})") from None
    except RecursionError:
        raise InputError(source, "nested too deeply to be read") from None


def load_yaml(path: str | Path, max_bytes: int = MAX_SMALL_BYTES, max_depth: int = MAX_DEPTH) -> Any:
    """:func:`loads_yaml` of a regular UTF-8 file of at most ``max_bytes``."""
    return loads_yaml(_text(path, read_bytes(path, max_bytes)), path, max_depth)


# ---------------------------------------------------------------------------------------------------------
# TOML and protobuf text
# ---------------------------------------------------------------------------------------------------------
def loads_toml(text: str, source: str | Path = "<toml>", max_depth: int = MAX_DEPTH) -> dict[str, Any]:
    """Parse TOML (tomllib, or tomli on Python 3.10); nesting beyond ``max_depth`` is an error."""
    try:
        import tomllib  # type: ignore[import-not-found,unused-ignore]
    except ImportError:  # pragma: no cover - Python 3.10
        try:
            import tomli as tomllib  # type: ignore[no-redef,unused-ignore]
        except ImportError:
            raise InputError(source, "reading TOML needs Python 3.11+ or the tomli package") from None
    # quotes of either kind; a bracket inside a string or comment may over-count, which only errs on the safe side
    _check_depth(source, nesting_depth(text.encode("utf-8"), b"[{", b"]}", b"\"'"), max_depth)
    try:
        return tomllib.loads(text)
    except ValueError as e:  # tomllib.TOMLDecodeError is a ValueError
        raise InputError(source, f"invalid TOML ({str(e).splitlines()[0]})") from None
    except RecursionError:
        raise InputError(source, "nested too deeply to be read") from None


def check_proto_text_depth(path: str | Path, data: bytes, max_depth: int = MAX_PROTO_TEXT_DEPTH) -> None:
    """Fail when protobuf text nests messages deeper than protobuf's own limit (its Python parser would raise
    RecursionError first)."""
    _check_depth(path, nesting_depth(data, b"{<[", b"}>]", b"\"'"), max_depth)


def finite(value: Any) -> float | None:
    """``value`` as a finite float, or None (for metadata numbers read from JSON: 1e308 * 10, NaN, '12x')."""
    if isinstance(value, bool):
        return None
    try:
        f = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return f if math.isfinite(f) else None
