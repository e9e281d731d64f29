"""Rebuild the pre-resolved architectures the fast golden tests read (tests/data/archs/), so that those tests price
DeepSeek-V3.2, DeepSeek-V4 and Qwen3-Next without importing transformers.

Usage, from the repo root with quotacalc installed (imports transformers):

    python scripts/build_test_archs.py            # write every file
    python scripts/build_test_archs.py --check    # exit 1 if any file is missing or differs

tests/test_reference_counts.py rebuilds each one from its config and fails on any drift.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
from pathlib import Path

from quotacalc.fileio import write_text_atomic
from quotacalc.inputs.resolve import load_arch

ROOT = Path(__file__).resolve().parent.parent
CONFIGS = ROOT / "tests" / "data" / "configs"
ARCHS = ROOT / "tests" / "data" / "archs"
#: The fixture folders of the families tests/test_golden_sparse_and_delta_families.py pins.
FOLDERS = ("deepseek_v3_2", "deepseek_v4_flash", "deepseek_v4_pro", "qwen3_next")


def arch_text(folder: str) -> str:
    """The file text of a fixture's architecture, with the SHA-256 of the config it was read from."""
    config = CONFIGS / folder / "config.json"
    arch, _ = load_arch(str(config.parent))
    document = {"config_sha256": hashlib.sha256(config.read_bytes()).hexdigest(), "arch": arch.model_dump(mode="json")}
    return json.dumps(document, sort_keys=True, separators=(",", ":")) + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="compare, write nothing")
    args = parser.parse_args()
    expected = {ARCHS / f"{folder}.json": arch_text(folder) for folder in FOLDERS}
    drifted = [p.name for p, text in expected.items() if not p.is_file() or p.read_text(encoding="utf-8") != text]
    if args.check:
        for name in drifted:
            print(f"stale or missing: {name}", file=sys.stderr)
        return 1 if drifted else 0
    for path, text in expected.items():
        write_text_atomic(path, text)
    print(f"wrote {len(expected)} architectures to {ARCHS}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
