"""The console script. Everything the CLI imports and runs is inside its interrupt guard, so Ctrl-C at any
moment prints one line and exits 130: this module and the packages above it import nothing else first."""

from __future__ import annotations

# _signal is the interpreter's own module, loaded before any of ours: importing ``signal`` (and its enum) here
# could itself be interrupted.
import _signal
import sys

#: Set by the SIGINT handler. Python drops an exception raised where it cannot propagate (a weakref callback,
#: such as the import system's module-lock cleanup, or a finaliser: "Exception ignored in ..."), so a Ctrl-C
#: landing there would otherwise be lost and the command run on to exit 0.
_interrupt_seen = False


def _on_interrupt(signum: int, frame: object) -> None:
    global _interrupt_seen
    _interrupt_seen = True
    raise KeyboardInterrupt


def _quiet_dropped_interrupt(unraisable: object) -> None:
    # The dropped KeyboardInterrupt is ours to report, in one line, once the command returns; anything else Python
    # drops is reported as it always is.
    if getattr(unraisable, "exc_type", None) is KeyboardInterrupt:
        return
    sys.__unraisablehook__(unraisable)  # type: ignore[arg-type]


def main() -> None:
    """Run the CLI; Ctrl-C while it imports its libraries or reports an error is caught here too."""
    try:
        _signal.signal(_signal.SIGINT, _on_interrupt)
        sys.unraisablehook = _quiet_dropped_interrupt
    except ValueError:  # not the main thread (an embedding host): its signals are not ours to handle
        pass
    try:
        from quotacalc.cli.fast import serve

        if serve(sys.argv[1:]):  # a plain `price` runs without building the command line
            _skip_exit_collection()
        else:
            from quotacalc.cli.app import main as run

            run()
    except KeyboardInterrupt:
        _exit_interrupted()
    except SystemExit as done:
        if _interrupt_seen and done.code != 130:  # 130: the CLI has reported the interrupt itself
            _exit_interrupted()
        raise
    except BaseException:
        # An interrupt Python wrapped in another error where the CLI's own handler is not yet in place (a class
        # body's __set_name__ while importing: RuntimeError on 3.11; pydantic_core's Rust initialisation, whose
        # failed import of datetime becomes pyo3's PanicException, a BaseException): the interrupt is the news.
        if _interrupt_seen:
            _exit_interrupted()
        raise
    if _interrupt_seen:
        _exit_interrupted()


def _skip_exit_collection() -> None:
    """A plain price has printed and flushed everything and holds no open file: the collection the interpreter runs
    on exit would only walk the objects its imports built (6% of the call's instructions), so they are frozen out of
    it."""
    import gc

    gc.freeze()


def _exit_interrupted() -> None:
    _ignore_interrupts()  # a second Ctrl-C must not cut the first one's exit short with a traceback
    sys.stderr.write("quotacalc: interrupted\n")
    sys.exit(130)


def _ignore_interrupts() -> None:
    try:  # noqa: SIM105  (contextlib.suppress would be one more import on this path)
        _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    except ValueError:  # not the main thread: signals are not this thread's to handle
        pass
