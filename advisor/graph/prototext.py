"""Parse a protobuf text file into a message with a real protobuf text parser, fast when possible.

protobuf's Python ``text_format`` parses about 1 MB of text per CPU second, so a large GE dump would take
minutes. When grpcio-tools is installed, its bundled ``protoc --encode`` (the C++ TextFormat parser)
converts the text to binary about ten times faster and the binary is decoded by the C runtime. Small files,
a missing grpcio-tools, or any protoc failure fall back to ``text_format``, which also produces the error
message (line:column) for a file that really is malformed.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import subprocess
import sys
import tempfile
from functools import cache
from pathlib import Path

from google.protobuf import descriptor_pb2, text_format
from google.protobuf.message import DecodeError, Message

from advisor.common import safeload
from advisor.common.errors import InputError

FAST_MIN_BYTES = 4_000_000
"""Below this size the protoc subprocess (about 0.4 s to start) is not worth it."""


@cache
def _protoc_available() -> bool:
    return importlib.util.find_spec("grpc_tools") is not None and not os.environ.get("ADVISOR_NO_PROTOC")


@cache
def _descriptor_set(file_name: str) -> str:
    """A FileDescriptorSet for one generated proto file, written once per process (protoc reads it)."""
    from google.protobuf import descriptor_pool

    fds = descriptor_pb2.FileDescriptorSet()
    descriptor_pool.Default().FindFileByName(file_name).CopyToProto(fds.file.add())
    fd, path = tempfile.mkstemp(prefix="advisor-", suffix=".desc")
    with os.fdopen(fd, "wb") as fh:
        fh.write(fds.SerializeToString())
    atexit.register(_remove, path)
    return path


def _remove(path: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(path)


def _protoc_encode(path: Path, message: Message) -> bytes | None:
    """The file as binary via ``protoc --encode``, or None when protoc is unavailable or rejects it."""
    desc = message.DESCRIPTOR
    try:
        with path.open("rb") as fin:
            res = subprocess.run(
                [sys.executable, "-m", "grpc_tools.protoc", f"--descriptor_set_in={_descriptor_set(desc.file.name)}",
                 f"--encode={desc.full_name}", desc.file.name],
                stdin=fin, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, check=False,
            )
    except OSError:
        return None
    return res.stdout if res.returncode == 0 else None


def parse_text_file(path: Path, message: Message, what: str, fast: bool | None = None) -> None:
    """Fill ``message`` from the text file; a syntax error becomes an InputError naming line and column.

    ``fast``: None decides by file size, True/False force or forbid the protoc path (tests compare both).
    """
    raw = safeload.read_bytes(path, safeload.MAX_BYTES)
    safeload.check_proto_text_depth(path, raw)
    size = len(raw)
    use_protoc = _protoc_available() and (size >= FAST_MIN_BYTES if fast is None else fast)
    if use_protoc:
        data = _protoc_encode(path, message)
        if data is not None:
            try:
                message.ParseFromString(data)
                return
            except DecodeError:
                message.Clear()
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise InputError(path, "not a text graph dump (binary or non-UTF-8 content)") from None
    del raw
    try:
        text_format.Parse(text, message, allow_unknown_field=True)
    except text_format.ParseError as e:
        raise InputError(path, f"not a valid {what}: {str(e).splitlines()[0]}") from None
    except RecursionError:
        raise InputError(path, f"not a valid {what}: nested too deeply") from None
