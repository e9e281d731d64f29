"""Atomic file writes: a reader sees the old file or the new one, never half of either."""

from __future__ import annotations

import os
import stat
import tempfile
from pathlib import Path


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
