"""Write docs/figures.md's table *What every figure means* from the figures' declarations (quotacalc/core/figures.py).

Usage, from the repo root:

    python scripts/build_figures_doc.py            # rewrite the table
    python scripts/build_figures_doc.py --check    # exit 1 if the page's table differs

tests/test_figures.py fails until the page matches the declarations.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from quotacalc.core.figures import figures_markdown
from quotacalc.fileio import write_text_atomic

PAGE = Path(__file__).resolve().parent.parent / "docs" / "figures.md"
#: The table's header line: the table runs from it to the first blank line.
HEADER = "| figure (JSON key) | meaning |"


def with_table(page: str, table: str) -> str:
    """``page`` with its figures table replaced by ``table``."""
    lines = page.splitlines(keepends=True)
    start = next((n for n, line in enumerate(lines) if line.rstrip("\n") == HEADER), None)
    if start is None:
        raise SystemExit(f"{PAGE}: no line {HEADER!r} to start the figures table at")
    end = next((n for n in range(start, len(lines)) if not lines[n].strip()), len(lines))
    return "".join(lines[:start]) + table + "".join(lines[end:])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if the page differs, writing nothing")
    args = parser.parse_args()
    page = PAGE.read_text(encoding="utf-8")
    wanted = with_table(page, figures_markdown())
    if args.check:
        if wanted != page:
            print(f"{PAGE}: the figures table differs from quotacalc/core/figures.py: run {sys.argv[0]}")
            return 1
        return 0
    if wanted != page:
        write_text_atomic(PAGE, wanted)
    return 0


if __name__ == "__main__":
    sys.exit(main())
