"""Helpers shared by commands: atomic output, progress on stderr."""

from __future__ import annotations

import os
import tempfile
from datetime import datetime
from pathlib import Path


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write via a temporary file in the same directory and rename, so readers never see half a report."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    data = text.encode("utf-8") if isinstance(text, str) else text
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    umask = os.umask(0)
    os.umask(umask)
    os.fchmod(fd, 0o666 & ~umask)  # mkstemp makes 0600; a report should be as readable as any new file
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def output_path(out: Path | str, extension: str, prefix: str = "advisor", now: datetime | None = None) -> Path:
    """``-o`` naming a directory (existing, or ending in /) gets a timestamped file name inside it."""
    text = str(out)
    out = Path(out)  # after str(): Path() drops a trailing slash
    if out.is_dir() or text.endswith(("/", "\\")):
        stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
        return out / f"{prefix}_{stamp}.{extension}"
    return out
