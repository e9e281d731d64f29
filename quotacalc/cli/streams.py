"""Output that survives the terminal it lands on: an ASCII stand-in for what its encoding cannot show."""

from __future__ import annotations

import codecs
import io
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
