"""Robust, columnar reading of profiler CSVs: only the columns an alias table asks for, strings kept as strings.

Real files carry quirks that a naive ``pd.read_csv`` mangles: timestamps with a trailing TAB (quoted so Excel
keeps precision), shape cells with literal quotes (three quote characters around ``9216,7168;1,7168,4096;;1``), ``N/A`` for "not
collected", a UTF-8 BOM, CRLF line ends, call stacks with newlines inside quoted cells. The pyarrow CSV reader
parses the file in parallel with every wanted column typed as string; numeric columns are then trimmed and cast
in one vectorized pass, so ``"1736413971558972.912\\t"`` becomes a float of microseconds (never rescaled).

Unusable files raise :class:`advisor.common.errors.InputError` with a one-line reason: binary data, undecodable text,
an empty file, missing required columns, rows with too many fields (garbled) or a short last row (truncated).
A short row in the middle of an otherwise sound file -- seen in a real msinsight fixture -- is kept, its
missing trailing cells read as N/A, and reported in ``notes``.
"""

from __future__ import annotations

import codecs
import csv
import io
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pa_csv

import advisor.ingest.timebase as timebase
from advisor.common.errors import InputError
from advisor.common.util import release_memory
from advisor.ingest.columns import (
    TIMESTAMP_COLUMNS,
    Aliases,
    ResolvedHeader,
    clean_header,
    describe_missing,
    header_key,
    resolve_header,
)
from advisor.ingest.normalize import broadcast_constant, to_number
from advisor.model import Meta

NULL_CELLS = ["N/A", ""]
"""Cells that mean "no value" in every Ascend CSV (``NULL`` is a real format name and is kept)."""

_SNIFF_BYTES = 1 << 16
_TRIM_CHARS = " \t\r\n\""
_BLOCK_SIZE = 1 << 22
WHOLE_FILE_BYTES = 1 << 27
"""CSVs up to this size are parsed in one call by pyarrow's multi-threaded reader (~0.2 s less at 200k kernels on 2
cores) and its blocks then converted one by one like a stream's; larger ones stream block by block, so the text
of a 2M-kernel file (0.6 GB) never exists at once."""
MAX_CELL_BYTES = 1 << 24
"""Largest cell the csv module accepts (its default, 128 KiB, is less than a long call stack or shape list)."""
csv.field_size_limit(max(csv.field_size_limit(), MAX_CELL_BYTES))


@dataclass
class CsvTable:
    """A CSV read into canonical columns."""

    path: Path
    frame: pd.DataFrame
    resolved: ResolvedHeader
    notes: list[str] = field(default_factory=list)


def sniff_header(path: Path) -> list[str]:
    """The header row of ``path``, after checking the file is non-empty UTF-8 text."""
    try:
        with open(path, "rb") as fh:
            head = fh.read(_SNIFF_BYTES)
    except IsADirectoryError:
        raise InputError(path, "is a directory, expected a CSV file") from None
    except OSError as e:
        raise InputError(path, f"cannot be read ({e.strerror or e})") from None
    if not head.replace(codecs.BOM_UTF8, b"").strip():
        raise InputError(path, "empty file")
    if b"\x00" in head:
        raise InputError(path, "binary data (NUL bytes), not a CSV text file")
    try:
        text = codecs.getincrementaldecoder("utf-8")().decode(head, final=len(head) < _SNIFF_BYTES)
    except UnicodeDecodeError as e:
        raise InputError(path, f"not UTF-8 text (undecodable byte 0x{head[e.start]:02x} at offset {e.start})") from None
    text = text.lstrip("\ufeff")
    try:
        header = next(csv.reader(io.StringIO(text)))
    except (StopIteration, csv.Error) as e:
        raise InputError(path, f"no CSV header row ({e})") from None
    if not any(h.strip() for h in header):
        raise InputError(path, "the first line is blank, expected a CSV header row")
    return header


def read_table(
    path: Path,
    aliases: Aliases,
    *,
    text: Collection[str],
    extra: Callable[[str], str | None] | None = None,
    required: Sequence[str] = (),
    multiline: bool = False,
    meta: Meta | None = None,
) -> CsvTable:
    """Read the columns of ``path`` that ``aliases`` (or ``extra``) name; canonical names not in ``text`` become
    float64, time stamps (:data:`TIMESTAMP_COLUMNS`) offsets from ``meta``'s time origin, parsed exactly. Raises
    InputError when a ``required`` canonical column is absent."""
    header = sniff_header(path)
    resolved = resolve_header(header, aliases, extra=extra)
    missing = [c for c in required if not resolved.has(c)]
    if missing:
        raise InputError(path, f"no {describe_missing(missing, aliases)} column; found: {found_list(header)}")
    frame, notes = read_columns(path, header, resolved.columns, text=text, multiline=multiline, meta=meta)
    return CsvTable(path, frame, resolved, notes)


def check_unique(path: Path, header: Sequence[str], positions: Collection[int]) -> None:
    """Fail when a column we read has a header name that appears twice: which one holds the values is a guess
    (a ``Start Time(us)`` renamed to a second ``Duration(us)`` made every op last 3.8 days)."""
    keys = [header_key(h) for h in header]
    for pos in sorted(set(positions)):
        if pos < len(keys) and keys.count(keys[pos]) > 1:
            where = [i + 1 for i, k in enumerate(keys) if k == keys[pos]]
            raise InputError(path, f"the header names column '{clean_header(header[pos])}' more than once "
                                   f"(columns {', '.join(map(str, where))}): cannot tell which one to read")


def found_list(header: Sequence[str], limit: int = 12) -> str:
    """The first header cells for an error message."""
    cells = [h.replace("\ufeff", "").strip() for h in header]
    shown = ", ".join(f"'{c}'" for c in cells[:limit])
    return shown + (f", ... ({len(cells)} columns)" if len(cells) > limit else "")


def read_columns(
    path: Path,
    header: Sequence[str],
    columns: dict[str, int],
    *,
    text: Collection[str],
    multiline: bool = False,
    meta: Meta | None = None,
    share_constants: bool = False,
) -> tuple[pd.DataFrame, list[str]]:
    """Read the raw columns at ``columns`` (canonical name -> position) into a DataFrame with canonical names.

    With ``meta``, time stamp columns are parsed exactly into offsets from the rank's origin. With
    ``share_constants``, a number column holding one value throughout is that value broadcast (read-only: the ops
    table of a large profile, where it keeps the read's peak ~16 MB per such column per 2M rows lower)."""
    stamps = {c for c in columns if c in TIMESTAMP_COLUMNS and c not in text} if meta is not None else set()
    check_unique(path, header, columns.values())
    names = [f"c{i}" for i in range(len(header))]
    wanted = {canonical: names[pos] for canonical, pos in columns.items()}
    bad_rows: list[tuple[int, int]] = []

    def on_invalid(row: pa_csv.InvalidRow) -> str:
        bad_rows.append((row.expected_columns, row.actual_columns))
        return "skip"

    include = list(dict.fromkeys(wanted.values()))
    # numbers parsed by the CSV reader itself where every cell is a plain number (the common case); a column with
    # TABs, quotes, percent signs... makes the reader fail, and the file is read again as text, trimmed and cast
    users: dict[str, set[str]] = {}
    for canonical, col in wanted.items():
        users.setdefault(col, set()).add(canonical)
    numeric = {col for col, cs in users.items() if not any(c in text or c in stamps for c in cs)}
    for typed in (numeric, set()):
        bad_rows.clear()
        try:
            n_rows, text_chunks, num_chunks = _stream(path, names, include, wanted, text, stamps, typed, meta,
                                                      multiline, on_invalid)
            break
        except pa.ArrowInvalid as e:
            if typed and "conversion error" in str(e):
                continue
            raise InputError(path, _arrow_reason(path, str(e), len(header))) from None

    notes: list[str] = []
    if bad_rows:
        short, widest = _check_ragged(path, len(header))
        if short:
            lines = ", ".join(str(n) for n, _ in short[:5]) + (" ..." if len(short) > 5 else "")
            notes.append(f"{path.name}: {len(short)} row(s) with fewer fields than the header (line {lines}); "
                         "their missing cells are read as N/A and their values may be shifted")
        if widest > len(header):
            notes.append(f"{path.name}: rows end with empty cells beyond the header; ignored")
        names += [f"x{i}" for i in range(len(header), widest)]
        return _read_with_pandas(path, names, wanted, text, stamps, meta), notes

    data: dict[str, object] = {}
    for canonical in wanted:
        if canonical in text:
            # dictionary-encoded: a million-row column repeats a few hundred strings (categorical, not objects);
            # categories in order of first appearance, as one dictionary_encode of the whole column gives them
            chunks = text_chunks.pop(canonical)
            dict_type = pa.dictionary(pa.int32(), pa.string())
            data[canonical] = pa.chunked_array(chunks, type=dict_type).unify_dictionaries().to_pandas()
        else:
            chunks = num_chunks.pop(canonical)
            values = np.concatenate(chunks) if chunks else np.empty(0)
            data[canonical] = broadcast_constant(values) if share_constants else values
        # the block chunks just joined are small heap allocations, the joined column gets its own pages: hand the
        # chunks' space back before the next column, else the heap keeps every freed chunk resident until the end
        # (~0.3 GB at 2M rows)
        del chunks
        release_memory()
    frame = pd.DataFrame(data, index=pd.RangeIndex(n_rows), copy=False)  # no consolidating copy of every column
    return frame, notes


def _stream(path: Path, names: list[str], include: list[str], wanted: dict[str, str], text: Collection[str],
            stamps: Collection[str], typed: Collection[str], meta: Meta | None, multiline: bool,
            on_invalid: Callable[[pa_csv.InvalidRow], str]) -> tuple[int, dict[str, list[pa.Array]], dict[str, list[np.ndarray]]]:
    """One streamed pass over the CSV: ``typed`` raw columns parsed as float64 by the reader, the rest as text.

    Block by block: each block's text cells are converted and dropped before the next is read, so the peak is the
    converted columns plus one block of text, not the whole file as text (up to :data:`WHOLE_FILE_BYTES` the file
    is parsed at once, in parallel, and its blocks converted the same way)."""
    text_chunks: dict[str, list[pa.Array]] = {c: [] for c in wanted if c in text}
    num_chunks: dict[str, list[np.ndarray]] = {c: [] for c in wanted if c not in text}
    n_rows = 0
    options = {
        "read_options": pa_csv.ReadOptions(column_names=names, skip_rows=1, block_size=_BLOCK_SIZE),
        "parse_options": pa_csv.ParseOptions(newlines_in_values=multiline, invalid_row_handler=on_invalid),
        "convert_options": pa_csv.ConvertOptions(
            include_columns=include,
            column_types={c: pa.float64() if c in typed else pa.string() for c in include},
            null_values=NULL_CELLS,
            strings_can_be_null=True,
            quoted_strings_can_be_null=True,
        ),
    }
    small = path.stat().st_size <= WHOLE_FILE_BYTES
    batches = pa_csv.read_csv(path, **options).to_batches() if small else pa_csv.open_csv(path, **options)
    for batch in batches:
        n_rows += batch.num_rows
        for canonical, col in wanted.items():
            arr = batch.column(col)
            if canonical in text:  # dictionary-encoded per block: the raw text of a block is dropped at once
                text_chunks[canonical].append(arr.dictionary_encode())
            elif canonical in stamps:
                num_chunks[canonical].append(timebase.us_from_text(meta, arr))  # type: ignore[arg-type]
            elif col in typed:
                num_chunks[canonical].append(np.array(arr.to_numpy(zero_copy_only=False), dtype="float64"))
            else:
                # copied out of Arrow's pool at once: its allocator keeps freed blocks, so views kept until the
                # end would leave the whole column's Arrow buffers resident beside the final numpy column
                num_chunks[canonical].append(np.array(_to_float64(pa.chunked_array([arr], type=pa.string()))))
    return n_rows, text_chunks, num_chunks


def _to_float64(arr: pa.ChunkedArray) -> np.ndarray:
    """Trim TABs/quotes/blanks and cast to float64; odd cells (``12%``, ``-``) go through the slower pandas path."""
    trimmed = pc.utf8_trim(arr, characters=_TRIM_CHARS)
    try:
        return pc.cast(trimmed, pa.float64()).to_numpy()
    except (pa.ArrowInvalid, pa.ArrowNotImplementedError):
        return to_number(pd.Series(trimmed.to_pandas(), dtype="string")).to_numpy(dtype="float64")


def _read_with_pandas(path: Path, names: list[str], wanted: dict[str, str], text: Collection[str],
                      stamps: Collection[str] = (), meta: Meta | None = None) -> pd.DataFrame:
    """Slow path for files with short rows: pandas' C parser pads them with missing cells."""
    include = list(dict.fromkeys(wanted.values()))
    raw = pd.read_csv(
        path,
        engine="c",
        header=None,
        skiprows=1,
        names=names,
        usecols=include,
        dtype=str,
        keep_default_na=False,
        na_values=NULL_CELLS,
        encoding="utf-8-sig",
        skip_blank_lines=True,
    )
    data: dict[str, object] = {}
    for canonical, col in wanted.items():
        if canonical in text:
            data[canonical] = raw[col]
        elif canonical in stamps and meta is not None:
            data[canonical] = timebase.us_from_text(meta, pa.array(raw[col].to_numpy(dtype=object), type=pa.string()))
        else:
            data[canonical] = to_number(raw[col]).to_numpy()
    return pd.DataFrame(data).reset_index(drop=True)


def _scan_rows(path: Path, width: int) -> list[tuple[int, int, bool]]:
    """(physical line where the record ends, number of fields, cells beyond ``width`` all blank) for every data
    record -- error path only."""
    out: list[tuple[int, int, bool]] = []
    with open(path, encoding="utf-8-sig", errors="replace", newline="") as fh:
        reader = csv.reader(fh)
        next(reader, None)
        for record in reader:
            if record:
                out.append((reader.line_num, len(record), not any(c.strip() for c in record[width:])))
    return out


def _check_ragged(path: Path, width: int) -> tuple[list[tuple[int, int]], int]:
    """Raise for garbled (extra non-empty fields) or truncated (short last row) files; return the short
    mid-file rows and the widest row (trailing empty cells beyond the header are tolerated)."""
    try:
        rows = _scan_rows(path, width)
    except csv.Error as e:
        raise InputError(path, f"garbled CSV ({e})") from None
    for line, n, blank_tail in rows:
        if n > width and not blank_tail:
            raise InputError(path, f"garbled row at line {line}: {n} fields where the header has {width}")
    if rows and rows[-1][1] < width:
        line, n, _ = rows[-1]
        raise InputError(path, f"truncated: the last row (line {line}) has {n} of {width} fields")
    short = [(line, n) for line, n, _ in rows if n < width]
    return short, max([width, *(n for _, n, _ in rows)])


def _arrow_reason(path: Path, message: str, width: int) -> str:
    """A one-line reason for a pyarrow parse failure, with the line number where the csv module finds it."""
    first = message.strip().splitlines()[0] if message.strip() else "unreadable"
    if "UTF8" in first or "utf8" in first.lower():
        return "not UTF-8 text (invalid byte sequence in the data rows)"
    try:
        _check_ragged(path, width)
    except InputError as e:
        return e.problem
    with open(path, "rb") as fh:
        data = fh.read()
    if b"\x00" in data:
        return "binary data (NUL bytes), not a CSV text file"
    if data.count(b'"') % 2:
        return "truncated or garbled: a quoted cell is never closed"
    return f"garbled CSV ({first})"
