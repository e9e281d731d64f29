"""Start-up benchmark: wall time of `quotacalc --help` and `quotacalc price` on a shipped model.

Usage (from the repo root, quotacalc installed):

    python bench/startup.py [--runs 20] [--markdown]

Each command runs once cold (an empty cache directory: transformers is imported to read the
config) and then ``--runs`` times warm (the cache filled), each in a fresh process, as a user
runs it. Reports min, median and 90th percentile wall seconds.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PRICE = ["price", "--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8"]
CASES = {
    "quotacalc --help": ["--help"],
    "quotacalc price (shipped model)": PRICE,
    "quotacalc price --json": [*PRICE, "--json"],
    "quotacalc kv --context 131072": ["kv", *PRICE[1:], "--context", "131072"],
}
BUDGET_S = 0.3


def _quotacalc() -> list[str]:
    found = shutil.which("quotacalc")
    if found is None:
        sys.exit("quotacalc is not installed (pip install -e .)")
    return [found]


def _time(command: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--markdown", action="store_true", help="print a docs/benchmarks.md table")
    args = parser.parse_args()
    rows = []
    for label, arguments in CASES.items():
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "QUOTACALC_CACHE_DIR": cache}
            command = [*_quotacalc(), *arguments]
            cold = _time(command, env)
            warm = sorted(_time(command, env) for _ in range(args.runs))
        p90 = warm[min(len(warm) - 1, int(0.9 * len(warm)))]
        rows.append((label, cold, warm[0], statistics.median(warm), p90))
    if args.markdown:
        print(f"| command | cold (empty cache) | warm min | warm median | warm p90 | under {BUDGET_S} s |")
        print("|---|---:|---:|---:|---:|---|")
        for label, cold, best, median, p90 in rows:
            print(
                f"| `{label}` | {cold:.3f} s | {best:.3f} s | {median:.3f} s | {p90:.3f} s | {'yes' if median < BUDGET_S else 'NO'} |"
            )
        print(
            f"\n{args.runs} warm runs each; Python {platform.python_version()}, {platform.machine()}, {os.cpu_count()} CPUs."
        )
    else:
        for label, cold, best, median, p90 in rows:
            print(f"{label:36s} cold {cold:.3f}s  warm min {best:.3f}s  median {median:.3f}s  p90 {p90:.3f}s")


if __name__ == "__main__":
    main()
