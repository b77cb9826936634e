"""Stream the elements of a large top-level JSON array in batches, with bounded memory.

Trace JSON files are one array of small objects, up to several GB. Parsing them token by token (ijson) costs
~6 us per event in Python; here the file is read in blocks, the boundaries of the array's elements are found
with numpy (quotes, escapes and brackets located vectorized, so strings containing brackets are handled), and
each block's complete elements are parsed in one ``orjson.loads`` call. Memory is one block plus the parsed
elements of that block.

Only a top-level array is handled here; callers fall back to a token parser for other shapes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from typing import BinaryIO

import numpy as np
import orjson

BLOCK_BYTES = 1 << 20
"""Parsed, a block's events take ~25x its size as Python objects: 1 MiB keeps that near 25 MB."""
MAX_ELEMENT_BYTES = 256 << 20
"""Largest single element of the array (a trace event is a few hundred bytes): beyond it the file is damaged (an
unclosed string or bracket) and reading on would hold the rest of a multi-GB file in memory."""

_QUOTE, _BACKSLASH = 0x22, 0x5C
_AT_START = re.compile(rb"[ \t\r\n]*")
_AFTER_ELEMENT = re.compile(rb"[ \t\r\n]*,[ \t\r\n]*")
_OPEN = (0x7B, 0x5B)  # { [
_CLOSE = (0x7D, 0x5D)  # } ]


class StreamError(ValueError):
    """The document is not a well-formed array: ``truncated`` tells a cut-short file from other damage."""

    def __init__(self, message: str, offset: int, truncated: bool = False) -> None:
        super().__init__(message)
        self.offset = offset
        self.truncated = truncated

    def __reduce__(self) -> tuple[object, ...]:
        return (type(self), (str(self), self.offset, self.truncated))


def _unescaped_quotes(arr: np.ndarray) -> np.ndarray:
    """Positions of ``"`` that open or close a string (not preceded by an odd run of backslashes)."""
    quotes = np.flatnonzero(arr == _QUOTE)
    if not len(quotes):
        return quotes
    maybe_escaped = quotes[(quotes > 0) & (arr[np.maximum(quotes - 1, 0)] == _BACKSLASH)]
    if not len(maybe_escaped):
        return quotes
    escaped = []
    for q in maybe_escaped.tolist():  # rare: only strings that contain a quote
        run = 0
        i = q - 1
        while i >= 0 and arr[i] == _BACKSLASH:
            run += 1
            i -= 1
        if run % 2:
            escaped.append(q)
    return np.setdiff1d(quotes, np.asarray(escaped, dtype=quotes.dtype), assume_unique=True) if escaped else quotes


def _element_spans(buf: bytes, depth0: int) -> tuple[list[tuple[int, int]], int, int]:
    """Complete depth-``depth0 + 1`` elements of ``buf`` (which starts outside any string at depth ``depth0``).

    Returns (start, end) spans of the complete elements, the offset where the unfinished rest begins, and
    the offset of the enclosing array's closing bracket (-1 when it does not close in this buffer).
    """
    arr = np.frombuffer(buf, dtype=np.uint8)
    quotes = _unescaped_quotes(arr)
    structural = np.flatnonzero(np.isin(arr, (*_OPEN, *_CLOSE)))
    if len(quotes) and len(structural):
        structural = structural[np.searchsorted(quotes, structural) % 2 == 0]
    delta = np.where(np.isin(arr[structural], _OPEN), 1, -1)
    depth_after = depth0 + np.cumsum(delta)
    depth_before = depth_after - delta
    starts = structural[(depth_before == depth0) & (delta == 1)]
    ends = structural[(depth_after == depth0) & (delta == -1)]
    close_at = -1
    if np.any(depth_after < depth0):
        close_at = int(structural[np.argmax(depth_after < depth0)])
        starts, ends = starts[starts < close_at], ends[ends < close_at]
    n = min(len(starts), len(ends))
    spans = list(zip(starts[:n].tolist(), (ends[:n] + 1).tolist(), strict=True))
    rest = spans[-1][1] if spans else 0
    return spans, rest, close_at


Decoder = Callable[[bytes], list[object]]
"""Parses one ``[...]`` chunk of complete elements (``orjson.loads``, or a ``msgspec`` decoder that keeps only
the fields a reader needs); must reject any text that is not valid JSON."""


def iter_array_batches(f: BinaryIO, block_bytes: int = BLOCK_BYTES,
                       decode: Decoder = orjson.loads) -> Iterator[list[object]]:
    """Yield the elements of the top-level JSON array in ``f`` (positioned at the ``[``), one block at a time,
    parsed by ``decode`` (see :func:`iter_array_chunks`)."""
    for parsed, _ in iter_array_chunks(f, block_bytes, decode):
        yield parsed


def iter_array_chunks(f: BinaryIO, block_bytes: int = BLOCK_BYTES,
                      decode: Decoder = orjson.loads) -> Iterator[tuple[list[object], bytes]]:
    """Yield (elements, their JSON text) for the top-level JSON array in ``f`` (positioned at the ``[``), one
    block at a time, parsed by ``decode``: the text lets a reader skip work no element of the block needs.

    A block is first cut after its last ``},`` and parsed as it is: a cut that is not between two elements leaves
    an unclosed string or bracket, which any JSON parser rejects, and only then are the element boundaries
    located exactly (vectorized, see :func:`_element_spans`). Raises StreamError when the array is cut short or
    an element is not valid JSON.
    """
    offset = f.tell()
    head = f.read(1)
    if head != b"[":
        raise StreamError("expected a JSON array", offset)
    offset += 1
    carry = b""
    eof = False
    after_element = False  # the next element is due after a comma
    while True:
        block = b"" if eof else f.read(block_bytes)
        eof = eof or len(block) < block_bytes
        buf = carry + block
        if not eof:
            fast = _fast_cut(buf, decode, after_element)
            if fast is not None:
                parsed, rest = fast
                after_element = True
                yield parsed, buf[:rest]
                offset += rest
                carry = buf[rest:]
                continue
        spans, rest, close_at = _element_spans(buf, 1)
        if spans:
            first, last = spans[0][0], spans[-1][1]
            chunk = b"[" + buf[first:last] + b"]"
            try:
                parsed = decode(chunk)
            except Exception:  # noqa: BLE001 - any decoder's error: orjson says where the JSON breaks
                parsed = _reparse(chunk, offset + first)
            if len(parsed) != len(spans):  # something between elements that is not a comma
                raise StreamError("invalid JSON between array elements", offset + first)
            after_element = True
            yield parsed, chunk
        tail = buf[rest:]
        if close_at >= 0:
            after = buf[close_at + 1:] + (b"" if eof else f.read(4096))
            if after.strip(b" \t\r\n"):
                raise StreamError("invalid JSON (unexpected data after the closing ])", offset + close_at + 1)
            return
        if eof:
            if tail.strip(b" \t\r\n,"):
                raise StreamError("file ends inside an unfinished value", offset + len(buf), truncated=True)
            raise StreamError("file ends before the closing ]", offset + len(buf), truncated=True)
        offset += rest
        carry = tail
        if len(carry) > MAX_ELEMENT_BYTES:
            raise StreamError(f"an element longer than {MAX_ELEMENT_BYTES >> 20} MB (unclosed string or bracket?)",
                              offset)


def _fast_cut(buf: bytes, decode: Decoder, after_element: bool) -> tuple[list[object], int] | None:
    """(elements, end offset) of ``buf`` cut after its last ``},``, or None when that cut does not parse.

    ``buf`` starts right after the array's ``[`` or, ``after_element``, right after an element (one comma due)."""
    cut = buf.rfind(b"},")
    if cut < 0:
        return None
    lead = (_AFTER_ELEMENT if after_element else _AT_START).match(buf)
    start = lead.end() if lead else cut
    if start >= cut:
        return None
    try:
        return decode(b"[" + buf[start:cut + 1] + b"]"), cut + 1
    except Exception:  # noqa: BLE001 - a cut inside a string or a nested value: locate the elements exactly
        return None


def _reparse(chunk: bytes, offset: int) -> list[object]:
    """``chunk`` through orjson: its error names the position; JSON that ``decode`` alone refused is returned."""
    try:
        return orjson.loads(chunk)
    except orjson.JSONDecodeError as e:
        raise StreamError(f"invalid JSON ({e.msg})", offset + max(e.pos - 1, 0)) from None
