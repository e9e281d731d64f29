"""The console script. Everything the CLI imports and runs is inside its interrupt guard, so Ctrl-C at any
moment prints one line and exits 130: this module and the packages above it import nothing else first."""

from __future__ import annotations

import sys


def main() -> None:
    """Run the CLI; Ctrl-C while it imports its libraries or reports an error is caught here too."""
    try:
        from quotacalc.cli.app import main as run

        run()
    except KeyboardInterrupt:
        _ignore_interrupts()  # a second Ctrl-C must not cut the first one's exit short with a traceback
        sys.stderr.write("quotacalc: interrupted\n")
        sys.exit(130)


def _ignore_interrupts() -> None:
    # _signal is the interpreter's own module, loaded before any of ours: importing ``signal`` (and its enum)
    # here could itself be interrupted.
    import _signal

    try:  # noqa: SIM105  (contextlib.suppress would be one more import on this path)
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    except ValueError:  # not the main thread: signals are not this thread's to handle
        pass
