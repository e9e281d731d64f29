"""The command line both flag extractors share: fetch a release wheel (or take one), extract, write the table.

Used by scripts/extract_vllm_flags.py and scripts/extract_sglang_flags.py (run from the repository root; Python puts
a script's own folder on the import path).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path


def main(package: str, label: str, example_version: str, extract: Callable[[Path], dict], doc: str) -> int:
    """Parse --version/--wheel/--out, run ``extract`` on the wheel and write ``{package}_version``, the wheel's
    name and digest and the flags as JSON."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--version", required=True, help=f"{label} release, e.g. {example_version}")
    parser.add_argument("--wheel", type=Path, help="a downloaded wheel (default: pip download it)")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        wheel = args.wheel
        if wheel is None:
            subprocess.run(
                [sys.executable, "-m", "pip", "download", f"{package}=={args.version}", "--no-deps", "-d", scratch],
                check=True,
            )
            wheel = next(Path(scratch).glob(f"{package}-*.whl"))
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        flags = extract(wheel)
    table = {
        f"{package}_version": args.version,
        "wheel": wheel.name,
        "wheel_sha256": digest,
        "extracted_by": f"scripts/extract_{package}_flags.py (ast over the wheel's sources; {label} not installed)",
        "flags": flags,
    }
    args.out.write_text(json.dumps(table, indent=1, sort_keys=False) + "\n", encoding="utf-8")
    print(f"{len(flags)} long flags from {wheel.name} -> {args.out}")
    return 0
