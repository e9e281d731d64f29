"""Output that survives the terminal it lands on: an ASCII stand-in for what its encoding cannot show."""

from __future__ import annotations

import codecs
import io
import os
import stat
import sys

#: What the tables and messages print beyond ASCII, and the ASCII they fall back to.
_ASCII = {
    "×": "x",
    "µ": "u",
    "→": "->",
    "←": "<-",
    "≥": ">=",
    "≤": "<=",
    "≈": "~",
    "²": "^2",
    "³": "^3",
    "·": ".",
    "…": "...",
    "—": "-",
    "−": "-",
    "§": "section ",
    "∫": "integral ",
    "∝": "~",
    "–": "-",
    "‘": "'",
    "’": "'",
    "“": '"',
    "”": '"',
    "Σ": "sum",
    "√": "sqrt",
}

ERROR_HANDLER = "quotacalc-ascii"


def _ascii_fallback(error: UnicodeError) -> tuple[str, int]:
    if not isinstance(error, UnicodeEncodeError):
        raise error
    text = error.object[error.start : error.end]
    return "".join(_ASCII.get(char, "?") for char in text), error.end


codecs.register_error(ERROR_HANDLER, _ascii_fallback)


def fit_output_encoding() -> None:
    """Where stdout or stderr cannot encode what quotacalc prints (``PYTHONIOENCODING=ascii``, a C locale),
    write ASCII stand-ins (× as x, µ as u) instead of failing with UnicodeEncodeError."""
    for stream in (sys.stdout, sys.stderr):
        if not isinstance(stream, io.TextIOWrapper):
            continue
        try:
            "".join(_ASCII).encode(stream.encoding or "ascii")
        except (UnicodeEncodeError, LookupError):
            stream.reconfigure(errors=ERROR_HANDLER)


class _ReaderMayLeave(io.RawIOBase):
    """A pipe's write end whose reader may close it early (``| head -1``): what the reader no longer takes is
    dropped, so the command runs to its end and exits with its own verdict, not with the race between its last
    write and the reader's exit."""

    def __init__(self, descriptor: int) -> None:
        super().__init__()
        self._descriptor = descriptor
        self.reader_left = False

    def writable(self) -> bool:
        return True

    def fileno(self) -> int:
        return self._descriptor

    def isatty(self) -> bool:
        return False

    def write(self, data) -> int:  # type: ignore[override]
        if self.reader_left:
            return len(data)
        try:
            return os.write(self._descriptor, data)
        except BrokenPipeError:
            self.reader_left = True
            return len(data)

    def close(self) -> None:  # the descriptor stays the interpreter's to close
        self.flush()
        super().close()


def outlive_closed_pipes() -> None:
    """Where stdout or stderr is a pipe, a reader that closes it early no longer changes the exit code: the rest
    of the output is dropped and the command exits as it would have (README, Errors). Other streams (a file, a
    terminal, a test's capture) are left as they are."""
    for name in ("stdout", "stderr"):
        stream = getattr(sys, name)
        if type(stream) is not io.TextIOWrapper:
            continue
        try:
            descriptor = stream.fileno()
            if not stat.S_ISFIFO(os.fstat(descriptor).st_mode):
                continue
            stream.flush()
        except (OSError, ValueError):
            continue
        replacement = io.TextIOWrapper(
            io.BufferedWriter(_ReaderMayLeave(descriptor)),
            encoding=stream.encoding,
            errors=stream.errors,
            line_buffering=stream.line_buffering,
            write_through=stream.write_through,
        )
        setattr(sys, name, replacement)


def fail_under_strict(warnings: tuple[str, ...] | list[str], *, strict: bool, nothing: str = "printed") -> None:
    """Under --strict, any warning fails the run: the warnings on stderr and one error line, raised before the
    command prints or writes its result, so a CI job never keeps the output of a failed run."""
    if not (strict and warnings):
        return
    from quotacalc.errors import QuotacalcError

    print_warnings(warnings)
    raise QuotacalcError(
        f"{len(warnings)} warning(s) under --strict",
        field="--strict",
        fix=f"see the warnings above; nothing was {nothing}",
    )


def print_warnings(warnings: tuple[str, ...] | list[str]) -> None:
    """Warnings go to stderr, one line each, so a pipe of the table or the JSON carries only the result."""
    from quotacalc.errors import printable

    for warning in warnings:
        sys.stderr.write(f"quotacalc: warning: {printable(warning)}\n")
