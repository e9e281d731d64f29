"""Errors that reach the user as one line, with an exit code, never a traceback."""

from __future__ import annotations

import re

#: Exit code for invalid input: a file or value that parses but cannot be priced.
EXIT_INVALID_INPUT = 1
#: Exit code for usage errors: unknown names, missing or malformed arguments.
EXIT_USAGE = 2


class QuotacalcError(Exception):
    """An error in the user's input, reported as ``source: field: problem (fix)``."""

    exit_code = EXIT_INVALID_INPUT

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None, fix: str | None = None):
        self.problem = message
        self.source = source
        self.field = field
        self.fix = fix
        super().__init__(self.one_line())

    def one_line(self) -> str:
        parts = [part for part in (self.source, self.field) if part]
        text = ": ".join([*parts, self.problem])
        if self.fix:
            text += f" ({self.fix})"
        return printable(text)


class UsageError(QuotacalcError):
    """The command line names something that does not exist or is malformed."""

    exit_code = EXIT_USAGE


class UnsupportedArchitecture(QuotacalcError):
    """A model whose architecture quotacalc cannot price without guessing."""


def close_names(name: str, candidates: list[str], *, n: int = 3, cutoff: float = 0.6) -> list[str]:
    """Candidates close to a mistyped name (difflib is imported only on this error path)."""
    from difflib import get_close_matches

    return get_close_matches(name, candidates, n=n, cutoff=cutoff)


#: C0 and C1 control characters, DEL, and the bidi/format characters that reorder or hide text.
_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u200b-\u200f\u202a-\u202e\u2066-\u2069\ufeff]")


#: A run of 40 or more digits (with thousands separators): a number no input means, shown whole it fills the line.
_HUGE_NUMBER = re.compile(r"(?<![\w.])\d[\d,]{39,}(?![\w.])")


def _abbreviated(match: re.Match[str]) -> str:
    digits = match.group().replace(",", "")
    return f"{digits[0]}.{digits[1:4]}e+{len(digits) - 1} (a {len(digits):,}-digit number)"


def printable(text: str, *, limit: int = 2000) -> str:
    """``text`` on one line, safe to echo to a terminal: control characters (escape sequences) become
    ``?``, runs of whitespace one space, a number of 40 or more digits in scientific notation, and anything past
    ``limit`` characters is cut with ``...``."""
    text = " ".join(str(text).replace("\t", " ").split())  # newlines and tabs: spaces, before they become '?'
    text = _CONTROL.sub("?", text)
    text = _HUGE_NUMBER.sub(_abbreviated, text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
