"""The console script. The CLI's imports run inside the interrupt guard, so Ctrl-C at any moment exits 130."""

from __future__ import annotations

import sys


def main() -> None:
    try:
        from quotacalc.cli.app import main as run
    except KeyboardInterrupt:
        sys.stderr.write("quotacalc: interrupted\n")
        sys.exit(130)
    run()
