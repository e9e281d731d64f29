"""Errors that reach the user as one line, with an exit code, never a traceback."""

from __future__ import annotations

import os
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


#: The environment variable holding the salt secret (inputs/secret.py reads it). Named here, in the leaf everything
#: imports, so that whatever quotacalc echoes can be checked against the secret.
SALT_SECRET_ENV = "QUOTACALC_SALT_SECRET"
#: The secret is hidden wherever this many of its characters stand in a row, so a shortened or lower-cased echo of it
#: is hidden too.
_SECRET_RUN = 12
#: Shorter secrets are not looked for: they would hide common words (check reads them; generate refuses them).
_SECRET_MIN = 8


def hide_secret(text: str) -> str:
    """``text`` with every run of ``_SECRET_RUN`` characters of the salt secret (any case) replaced by
    ``<salt secret>``: a file that holds the secret, read as the wrong kind of input, is never echoed with it."""
    secret = os.environ.get(SALT_SECRET_ENV, "").strip().lower()
    if len(secret) < _SECRET_MIN:
        return text
    run = min(_SECRET_RUN, len(secret))
    pieces = {secret[start : start + run] for start in range(len(secret) - run + 1)}
    lowered = text.lower()
    hidden = [False] * len(text)
    for start in range(len(text) - run + 1):
        if lowered[start : start + run] in pieces:
            hidden[start : start + run] = [True] * run
    if not any(hidden):
        return text
    parts: list[str] = []
    for index, character in enumerate(text):
        if not hidden[index]:
            parts.append(character)
        elif index == 0 or not hidden[index - 1]:
            parts.append("<salt secret>")
    return "".join(parts)


def printable(text: str, *, limit: int = 2000) -> str:
    """``text`` on one line, safe to echo to a terminal: the salt secret hidden (``hide_secret``), control characters
    (escape sequences) ``?``, runs of whitespace one space, a number of 40 or more digits in scientific notation,
    and anything past ``limit`` characters is cut with ``...``."""
    text = " ".join(
        hide_secret(str(text)).replace("\t", " ").split()
    )  # newlines and tabs: spaces, before they become '?'
    text = _CONTROL.sub("?", text)
    text = _HUGE_NUMBER.sub(_abbreviated, text)
    return text if len(text) <= limit else text[: limit - 3] + "..."
