"""``quotacalc price`` on a plan file or text flags, run without building the command line.

Building it (importing typer, turning ``price``'s 46 parameters into click options, parsing) cost about a tenth of
the call. A command line this module recognises in full (``parse_plain_price``) is handed to the same function the
``price`` command calls (cli/pricing.py), and ends as the command line ends (cli/outcome.py, and typer's own handling
around a command: ``run_as_typer_runs``). Anything else, and anything it is not sure of, goes to the full command
line: a help, an unknown or repeated option, ``--opt=value``, a value that looks like an option, a number or switch
of the deployment (typer coerces and checks those), shell completion, ``QUOTACALC_DEBUG`` (a traceback shows typer's
frames). tests/test_fast_price.py holds both paths to the same bytes, errors and exit codes, and this module's
options to the built command's.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable
from typing import Any

COMMAND = "price"
#: ``price``'s own switches (cli/app.py's ``price_command``) by flag: the argument each sets to True.
SWITCHES = {"--json": "as_json", "--explain": "explain", "--strict": "strict"}
#: ``price``'s own arguments when not given on the command line.
DEFAULTS: dict[str, Any] = {
    "plan": None,
    "as_json": False,
    "explain": False,
    "output_format": "table",
    "pool": None,
    "strict": False,
}


def text_options() -> dict[str, str]:
    """The deployment options typer passes on as text, by flag: their field names (cli/options.py, the same call
    as cli/app.py's). Numbers and switches are left to typer, which checks them."""
    from quotacalc.cli.options import option_fields
    from quotacalc.cli.pricing import COMPARABLE
    from quotacalc.core.deployment import Deployment

    return {option.flag: option.name for option in option_fields(Deployment, **COMPARABLE) if option.kind is str}


def deployment_option_names() -> list[str]:
    """Every deployment option's field name, in the order cli/app.py's ``price`` passes them."""
    from quotacalc.cli.options import option_fields
    from quotacalc.cli.pricing import COMPARABLE
    from quotacalc.core.deployment import Deployment

    return [option.name for option in option_fields(Deployment, **COMPARABLE)]


def _plain_environment() -> bool:
    if os.environ.get("QUOTACALC_DEBUG"):
        return False
    # click's shell completion (``_QUOTACALC_COMPLETE``, named after the program): typer answers it, not the command.
    return not any(name.startswith("_") and name.endswith("_COMPLETE") for name in os.environ)


def parse_plain_price(args: list[str]) -> dict[str, Any] | None:
    """``run_price``'s arguments for ``quotacalc ARGS`` as typer parses them, or None where the full command line
    must parse them: ``price`` with at most one plan file, ``--json``, ``--explain``, ``--strict`` and text-valued
    deployment flags (``--model NAME``, ``--gpu h100-sxm,b200``, ``--tp 4``), each at most once."""
    if not args or args[0] != COMMAND or not _plain_environment():
        return None
    try:
        for arg in args:
            arg.encode("utf-8")  # an undecodable byte (a surrogate escape): typer's coercion judges it
    except UnicodeEncodeError:
        return None
    arguments = dict(DEFAULTS)
    flags: dict[str, str] = {}
    texts: dict[str, str] | None = None
    rest = args[1:]
    index = 0
    while index < len(rest):
        token = rest[index]
        index += 1
        if not token.startswith("-"):
            if arguments["plan"] is not None:
                return None  # a second argument: typer's error
            arguments["plan"] = token
            continue
        if token in SWITCHES:
            if arguments[SWITCHES[token]]:
                return None
            arguments[SWITCHES[token]] = True
            continue
        if not token.startswith("--") or token in ("--", "--help"):
            return None
        if texts is None:
            texts = text_options()
        name = texts.get(token)
        if name is None or name in flags or index >= len(rest) or rest[index].startswith("-"):
            return None
        flags[name] = rest[index]
        index += 1
    arguments["deployment_flags"] = {name: flags.get(name) for name in deployment_option_names()}
    return arguments


def run_as_typer_runs(command: Callable[[], Any]) -> Any:
    """Call ``command`` as typer's ``_main`` (0.29) calls one, not standalone: its value is returned; Ctrl-C
    returns 130, end of input aborts, a closed pipe exits 1, a ``typer.Exit`` returns its code."""
    import errno

    try:
        return command()
    except EOFError as error:
        from typer._click import echo
        from typer.exceptions import Abort

        echo(file=sys.stderr)
        raise Abort() from error
    except KeyboardInterrupt:
        return 130
    except OSError as error:
        if error.errno != errno.EPIPE:
            raise
        from typer._click.utils import PacifyFlushWrapper

        sys.stdout = PacifyFlushWrapper(sys.stdout)  # type: ignore[assignment]
        sys.stderr = PacifyFlushWrapper(sys.stderr)  # type: ignore[assignment]
        sys.exit(1)
    except Exception as error:
        # Only a command that imported typer can raise its Exit.
        exceptions = sys.modules.get("typer.exceptions")
        if exceptions is not None and isinstance(error, exceptions.Exit):
            return error.exit_code
        raise


def serve(args: list[str]) -> bool:
    """Run ``quotacalc ARGS`` here if it is a plain ``price``; False, having done nothing, if it is not."""
    import gc

    # The call imports and builds thousands of objects and ends: the collector's passes over them find nothing to
    # free that the process's exit would not (3% of the call's instructions).
    collecting = gc.isenabled()
    gc.disable()
    try:
        arguments = parse_plain_price(args)
        if arguments is None:
            return False
        from quotacalc.cli.outcome import report_outcome
        from quotacalc.cli.pricing import run_price

        report_outcome(lambda: run_as_typer_runs(lambda: run_price(**arguments)))
        return True
    finally:
        if collecting:
            gc.enable()
