"""Rebuild the shipped models' pre-resolved specs (quotacalc/catalog/specs/) and the catalogs' JSON twins.

Usage, from the repo root with quotacalc installed (imports transformers):

    python scripts/build_specs.py            # write every spec
    python scripts/build_specs.py --check    # exit 1 if any spec is missing or differs

Run it after adding or changing a shipped model, or upgrading transformers;
tests/test_shipped_specs.py fails until you do.
"""

from __future__ import annotations

import argparse
import sys

from quotacalc.catalog.entries import preparsed_twin
from quotacalc.catalog.models import shipped_models, shipped_specs_dir
from quotacalc.fileio import write_text_atomic
from quotacalc.inputs.shipped_specs import (
    build_spec_document,
    build_twin_document,
    shipped_yaml_files,
    spec_path,
    spec_text,
    twin_text,
)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args()
    expected = {spec_path(model): spec_text(build_spec_document(model)) for model in shipped_models()}
    # The shipped YAML catalogs' pre-parsed twins: the first call on a fresh machine skips PyYAML.
    expected |= {preparsed_twin(path): twin_text(build_twin_document(path)) for path in shipped_yaml_files()}
    stale = sorted(p.name for p in shipped_specs_dir().glob("*.json") if p not in expected)
    drifted = [p.name for p, text in expected.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for name in drifted + stale:
            print(f"stale or missing: {name}", file=sys.stderr)
        return 1 if drifted or stale else 0
    for path, text in expected.items():
        write_text_atomic(path, text)
        path.chmod(0o644)  # package data, readable by every user of an installed copy
    for name in stale:
        (shipped_specs_dir() / name).unlink()
    print(f"wrote {len(expected)} specs to {shipped_specs_dir()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
