"""The one output-path guard and the one atomic writer.

Everything that writes a file (the commands analyze, report, compare, fix, fix --atc-config, kb new; the example
regeneration; a plugin child's result) writes with :func:`write_atomic`; the commands pick their target with
:func:`output_target`, so that ``-o``

- never writes onto an input: not a path given as input, not a file the analysis read (``files_read``, the graph
  attached from inside the profile), not a file an input pulls in (an ONNX model's external-data files), by
  resolved path and by device and inode (a hard link or a symlink to it);
- never puts a default location inside an input folder (``reports/`` while the working directory is inside the
  profile): only an explicit ``-o`` writes into an input folder, since a file left there would be read by the
  next analysis of that folder;
- never replaces a symlink (the file it points to gets the new content) or a device node: a character device
  or a FIFO (``/dev/null``, ``/dev/stdout``) is written in place, anything else that is not a regular file is
  refused;
- creates missing parent directories, or fails with one line when a parent is a file;
- is absolute before any analysis runs, so nothing that changes the working directory moves it.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path

from advisor.common.errors import OutputError


def _is_stream(mode: int) -> bool:
    return stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write via a temporary file in the same directory and rename, so readers never see half a report.

    A symlink keeps being a symlink (its target is replaced); a character device or FIFO is written in place.
    """
    path = Path(path)
    data = text.encode("utf-8") if isinstance(text, str) else text
    try:
        st = os.stat(path)
    except FileNotFoundError:
        st = None
    except NotADirectoryError:
        raise OutputError(path, "cannot be written: a parent is not a directory") from None
    if st is not None and _is_stream(st.st_mode):
        with open(path, "wb") as fh:
            fh.write(data)
        return
    if st is not None and not stat.S_ISREG(st.st_mode):
        raise OutputError(path, "exists and is not a regular file")
    if path.is_symlink():
        path = Path(os.path.realpath(path))
    _make_parents(path)
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


def _make_parents(path: Path) -> None:
    """Create the missing parents of ``path``; a parent that exists but is not a directory is an OutputError."""
    for parent in [path.parent, *path.parent.parents]:
        if parent.exists():
            if not parent.is_dir():
                raise OutputError(path, f"cannot be written: {parent} is not a directory")
            break
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError):
        raise OutputError(path, "cannot be written: a parent is not a directory") from None


def output_path(out: Path | str, extension: str, prefix: str = "advisor", now: datetime | None = None) -> Path:
    """``-o`` naming a directory (existing, or ending in /) gets a timestamped file name inside it."""
    text = str(out)
    out = Path(out)  # after str(): Path() drops a trailing slash
    if out.is_dir() or text.endswith(("/", "\\")):
        stamp = (now or datetime.now()).strftime("%Y%m%d-%H%M%S")
        return out / f"{prefix}_{stamp}.{extension}"
    return out


def output_target(out: Path | str, extension: str | None, inputs: Iterable[Path | str | None],
                  prefix: str = "advisor") -> Path:
    """The absolute file ``-o`` names (a directory gets a timestamped name when ``extension`` is given), checked
    against ``inputs`` (files or directories; None entries ignored). Raises OutputError."""
    target = output_path(out, extension, prefix) if extension is not None else Path(out)
    target = Path(os.path.abspath(target))
    check_output(target, inputs)
    return target


def check_outside_inputs(default: Path, inputs: Iterable[Path | str | None]) -> None:
    """Refuse a default output location (a file or folder, existing or not) that lies inside an input folder:
    what advisor writes there uninvited would be read as part of that profile next time."""
    real = Path(os.path.realpath(default))
    for given in inputs:
        if given is None or not os.path.isdir(given):
            continue
        folder = Path(os.path.realpath(given))
        if real == folder or folder in real.parents:
            raise OutputError(default, f"the default output location is inside the input folder {given}; "
                                       "reports go there only when asked (give -o)")


def check_output(target: Path, inputs: Iterable[Path | str | None]) -> None:
    """Refuse a target that is (or would replace) an input, a directory or a non-stream special file."""
    target = Path(os.path.abspath(target))
    st = _target_stat(target)
    if st is not None and _is_stream(st.st_mode):
        return  # /dev/null, /dev/stdout, a pipe: written in place, never replaced
    real = Path(os.path.realpath(target))
    for given in inputs:
        if given is not None and _is_same_file(real, st, Path(os.path.realpath(given))):
            raise OutputError(target, f"is the input {given}; inputs are never overwritten (choose another -o)")


def _target_stat(target: Path) -> os.stat_result | None:
    """The stat of what writing ``target`` would replace (None: nothing yet); OutputError when it cannot be one."""
    try:
        st = os.stat(target)  # follows a symlink: what would be written is its target
    except (FileNotFoundError, NotADirectoryError):
        st = None
    except OSError as e:
        raise OutputError(target, f"cannot be written ({e.strerror or e})") from None
    if st is None:
        for parent in target.parents:
            if parent.exists():
                if not parent.is_dir():
                    raise OutputError(target, f"cannot be written: {parent} is not a directory")
                break
        return None
    if stat.S_ISDIR(st.st_mode):
        raise OutputError(target, "is a directory")
    if not stat.S_ISREG(st.st_mode) and not _is_stream(st.st_mode):
        raise OutputError(target, "exists and is not a regular file, a character device or a FIFO")
    return st


def _is_same_file(real: Path, st: os.stat_result | None, inp: Path) -> bool:
    """Whether the resolved target ``real`` (stat ``st``) is the input file ``inp``: by path, or by device and
    inode (a hard link). Directories and missing inputs are never the same file."""
    if not inp.exists() or inp.is_dir():
        return False
    if real == inp:
        return True
    if st is None:
        return False
    ist = os.stat(inp)
    return (ist.st_dev, ist.st_ino) == (st.st_dev, st.st_ino)
