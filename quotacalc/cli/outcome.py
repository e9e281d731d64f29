"""How a command line run ends: its errors as one line and an exit code, never a traceback for bad input.

Typer-free, so cli/fast.py's price ends exactly as the full command line does (cli/app.py's ``main``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Callable
from typing import Any, NoReturn

from quotacalc.errors import QuotacalcError


def _fail(message: str, code: int) -> NoReturn:
    from quotacalc.errors import printable

    sys.stderr.write(f"quotacalc: {printable(message)}\n")
    sys.exit(code)


def _interrupted() -> NoReturn:
    # 128 + SIGINT, as shells report it: an interrupted CI job must never look green.
    _fail("interrupted", 130)


def report_outcome(run: Callable[[], Any]) -> None:
    """Run a command line (``run``: the typer app, or cli/fast.py's price) and end the process as the CLI does:
    one-line errors with exit codes, never a traceback for bad input. ``run`` returns what typer returns when not
    standalone: the command's value, or the exit code of a ``typer.Exit``."""
    try:
        from quotacalc.cli.streams import fit_output_encoding, outlive_closed_pipes

        outlive_closed_pipes()
        fit_output_encoding()
        code = run()
        # Output still buffered fails here, where it is reported, not in the interpreter's exit (exit 120).
        sys.stdout.flush()
    except QuotacalcError as error:
        _fail(f"error: {error.one_line()}", error.exit_code)
    except KeyboardInterrupt:
        _interrupted()
    except Exception as error:
        if _raised_by_interrupt(error):  # Ctrl-C inside a hook Python wraps (3.11's __set_name__: RuntimeError)
            _interrupted()
        if type(error).__name__ == "NoArgsIsHelpError":  # `quotacalc` alone: the help, as asked for
            sys.stdout.write(error.format_message().rstrip() + "\n")
            sys.exit(error.exit_code)
        # Command-line parse errors (typer's click): duck-typed, since typer vendors its own click.
        if hasattr(error, "format_message") and isinstance(getattr(error, "exit_code", None), int):
            message = " ".join(error.format_message().split())
            if message:  # empty when the help was printed instead (no arguments)
                command = getattr(getattr(error, "ctx", None), "command_path", "quotacalc")
                hint = f" (see '{command} --help')" if error.exit_code == 2 else ""
                _fail(f"error: {message}{hint}", error.exit_code)
            sys.exit(error.exit_code)
        if type(error).__name__ == "Abort":
            _interrupted()
        if os.environ.get("QUOTACALC_DEBUG"):
            raise
        if (hostile := _input_error(error)) is not None:
            _fail(f"error: {hostile}", 1)
        if (unwritable := _output_error(error)) is not None:
            _fail(f"error: {unwritable}", 1)
        _fail(f"internal error: {type(error).__name__}: {error} (set QUOTACALC_DEBUG=1 for a traceback)", 3)
    if code == 130:  # typer turns Ctrl-C inside a command into Exit(130), returned when not standalone
        _interrupted()
    if isinstance(code, int) and code:
        sys.exit(code)


def _output_error(error: Exception) -> str | None:
    """Output that cannot be written (stdout on a full disk, a quota, a failing device): the place and the fix,
    not 'internal error'. What stdout still holds is dropped, so the exit does not raise the same error again."""
    import errno

    if not isinstance(error, OSError) or error.errno not in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO):
        return None
    with contextlib.suppress(OSError, ValueError):
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115  (replaces the stream for the rest of the process)
    where = error.filename or "the output"
    return f"{where}: cannot write: {error.strerror or error} (free space there, or send the output elsewhere)"


def _raised_by_interrupt(error: BaseException) -> bool:
    """Whether a KeyboardInterrupt is in the error's chain of causes."""
    seen: set[int] = set()
    current: BaseException | None = error
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def _input_error(error: Exception) -> str | None:
    """A last net for input that slipped past validation: say what was wrong with it, not 'internal error'."""
    from pydantic import ValidationError

    if isinstance(error, ValidationError):
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"])
        return f"{field}: {first['msg']}" if field else first["msg"]
    if isinstance(error, OverflowError):
        return f"a number in the input is out of range ({error})"
    return None
