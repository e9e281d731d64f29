"""A user's text file read safely: a regular UTF-8 file of bounded size, or a one-line error. Kept apart from the
YAML loader, so that a file whose parse is cached is read without importing PyYAML."""

from __future__ import annotations

from pathlib import Path

from quotacalc.errors import QuotacalcError

#: A deployment, plan or scenario file is a few kB; past this, reading it is a mistake (or an attack).
MAX_TEXT_BYTES = 4 * 2**20


def read_text_file(path: str | Path, *, what: str, limit: int = MAX_TEXT_BYTES) -> str:
    """A regular UTF-8 text file of at most ``limit`` bytes; a FIFO, device or directory, an oversized or
    non-UTF-8 file, or a name the system cannot use, is a one-line error instead of a hang or a traceback."""
    from quotacalc.fileio import open_regular

    source = str(path)
    with open_regular(path, what=what) as handle:
        try:
            data = handle.read(limit + 1)
        except OSError as error:
            raise QuotacalcError(f"cannot read: {error.strerror or error}", source=source) from None
    if len(data) > limit:
        raise QuotacalcError(f"is larger than {limit // 2**20} MiB; a {what} is a few kB", source=source)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as error:
        line = data[: error.start].count(b"\n") + 1
        raise QuotacalcError(
            f"is not UTF-8 text (byte 0x{data[error.start]:02x} on line {line})",
            source=source,
            fix="save the file as UTF-8",
        ) from None
