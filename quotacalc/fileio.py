"""Input files read safely (a FIFO, device or odd name is an error, not a hang) and atomic writes: a reader sees
the old file or the new one, never half of either."""

from __future__ import annotations

import errno
import os
import stat
import tempfile
from pathlib import Path
from typing import BinaryIO

from quotacalc.errors import QuotacalcError, UsageError


def open_regular(path: str | Path, *, what: str) -> BinaryIO:
    """A regular file opened for binary reading. A missing file, a FIFO, device or directory, or a name no file can
    have (too long, a NUL byte, a loop of links) is a one-line error naming the path, never a hang or a traceback."""
    source = str(path)
    try:
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever.
        descriptor = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise UsageError("no such file", source=source, fix=f"check the path to the {what}") from None
    except ValueError:  # a NUL byte: no file has such a name
        raise UsageError(
            "is not a file name (it holds a NUL byte)", source=source, fix=f"give the {what}'s path"
        ) from None
    except OSError as error:
        # A path that cannot be reached or opened is the command line's problem (exit 2), as a missing one is; a file
        # read but invalid is the input's (exit 1).
        denied = error.errno in (errno.EACCES, errno.EPERM)
        usage = denied or error.errno in (errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EISDIR)
        raise (UsageError if usage else QuotacalcError)(
            f"cannot read: {error.strerror or error}",
            source=source,
            fix=f"make the {what} readable by this user, or give a copy that is" if denied else None,
        ) from None
    mode = os.fstat(descriptor).st_mode
    if not stat.S_ISREG(mode):
        os.close(descriptor)
        kind = "a directory" if stat.S_ISDIR(mode) else "not a regular file (a FIFO, device or socket)"
        raise UsageError(f"is {kind}", source=source, fix=f"give the path to the {what}")
    return os.fdopen(descriptor, "rb")


def read_regular_bytes(path: str | Path, *, what: str, limit: int) -> bytes:
    """A regular file's bytes (``open_regular``), refused past ``limit`` bytes before more is read."""
    with open_regular(path, what=what) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as error:
            raise QuotacalcError(f"cannot read: {error.strerror or error}", source=str(path)) from None
    if len(data) > limit:
        size = f"{limit // 2**20} MiB" if limit >= 2**20 else f"{limit:,} bytes"
        raise QuotacalcError(f"is larger than {size}; a {what} is not that large", source=str(path))
    return data


def unwritable(error: OSError, place: str | Path, *, field: str, outcome: str = "") -> QuotacalcError:
    """The one-line error for output that could not be written: where (the file the system names, else
    ``place``), why, and a fix that fits (a full disk is not a permissions problem). ``outcome``: what the
    failure left, e.g. "; nothing was changed"."""
    full = error.errno in (errno.ENOSPC, errno.EDQUOT)
    return QuotacalcError(
        f"cannot write there: {error.strerror or error}{outcome}",
        source=str(error.filename or place),
        field=field,
        fix=f"free space on that file system, or choose another {field}"
        if full
        else "choose a directory you can write",
    )


def _default_mode(path: Path) -> int:
    """What a plain ``open(path, "w")`` would leave: an existing file keeps its permissions, a new
    one gets 0o666 less the umask (``mkstemp`` alone would make every file owner-only)."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


def write_bytes_atomic(path: Path, data: bytes, *, mode: int | None = None) -> None:
    """Write ``data`` to ``path`` via a temporary file in the same directory and an atomic rename.

    ``mode``: the file's permissions (e.g. 0o600 for secrets), set before the rename so the file is
    never readable by others, even for a moment; default: an existing file's, else 0o666 less the umask.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    final_mode = _default_mode(path) if mode is None else mode
    descriptor, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(descriptor, final_mode)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(data)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_text_atomic(path: Path, text: str, *, mode: int | None = None) -> None:
    """``write_bytes_atomic`` of ``text`` as UTF-8, newlines as given (the same bytes on every platform)."""
    write_bytes_atomic(path, text.encode("utf-8"), mode=mode)
