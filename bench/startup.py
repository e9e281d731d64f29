"""Start-up benchmark: wall time of `quotacalc --help` and `quotacalc price` on a shipped model, beside `python -c pass`.

Usage (from the repo root, quotacalc installed):

    python bench/startup.py [--runs 20] [--markdown] [--instructions] [--only TEXT ...]

``--only TEXT`` runs the cases whose label holds TEXT (repeat it for several).

Each command runs once cold (an empty cache directory, as on a fresh machine or a CI container)
and then ``--runs`` times warm (the cache filled), each in a fresh process, as a user runs it.
Shipped models are pre-resolved (quotacalc/catalog/specs), so even their cold call imports no
transformers; the last case prices a copy of a shipped config at a path, which is not shipped,
to show what the transformers import costs the first call on any other config. Reports min, median and 90th
percentile wall seconds; the verdict is the median's against the 0.25 s target, measured beside ``python -c pass``.

Two floors frame quotacalc's own cost: a one-option typer app that validates one pydantic model and
prints a rich table (bench/floor_app.py), and the same deployment priced by the library with typer
imported and no CLI at all (FLOOR_CORE): what ``price --json`` costs above it is the command line's.

``--instructions`` also counts each warm call's instructions under valgrind (callgrind): one run
each, slow, but the same count on a busy machine as on a quiet one, where wall times are not.

The warm runs go round the cases in turn (each case once a round, ``--runs`` rounds), so a busy
machine's load falls on every case alike; each row's ``- pass`` column is its warm median less that
of ``python -c pass`` in the same rounds (with ``--only``, pass is always run for it).

Bytecode: a user's Python caches compiled modules (``__pycache__``); a sandbox that sets
PYTHONDONTWRITEBYTECODE recompiles every module on every call. The benchmark compiles the
package once and unsets that variable for the measured runs, as on a user's machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import platform
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

PRICE = ["price", "--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8"]
FLOOR = [sys.executable, os.path.join(os.path.dirname(os.path.abspath(__file__)), "floor_app.py"), "--value", "2"]
#: The pure core under the CLI's libraries: typer and pydantic imported, the deployment priced, one figure printed.
FLOOR_CORE = [
    sys.executable,
    "-c",
    "import typer\n"
    "from quotacalc import Deployment, price, resolve\n"
    "d = Deployment(model='Llama-3.3-70B-Instruct', gpu='h100-sxm', tp=4, weight_dtype='fp8')\n"
    "print(price(resolve(d)).replica_units_per_s)",
]
LOCAL = ["price", "--model", "{local}", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8"]
#: The method's worked example as the README runs it: a plan file naming a shipped model, with a measured pool.
EXAMPLE = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "examples", "llama-3.3-70b-h100.yaml"
)
PASS = "python -c pass (the interpreter alone)"
CASES = {
    PASS: [sys.executable, "-c", "pass"],
    "quotacalc price examples/llama-3.3-70b-h100.yaml (the worked example)": ["price", EXAMPLE],
    "quotacalc price examples/llama-3.3-70b-h100.yaml --json (the worked example)": ["price", EXAMPLE, "--json"],
    # The plan's own batch given as a flag: the same result, parsed by typer (cli/fast.py leaves numbers to it).
    "quotacalc price examples/llama-3.3-70b-h100.yaml --batch 128 (the worked example, full command line)": [
        "price",
        EXAMPLE,
        "--batch",
        "128",
    ],
    "floor: typer + pydantic + rich, one option (bench/floor_app.py)": FLOOR,
    "floor: typer + pydantic + the core pricing it, no CLI": FLOOR_CORE,
    "quotacalc --help": ["--help"],
    "quotacalc price (shipped model)": PRICE,
    "quotacalc price --json": [*PRICE, "--json"],
    "quotacalc kv --context 131072": ["kv", *PRICE[1:], "--context", "131072"],
    "quotacalc price (config path, not shipped)": LOCAL,
}
#: The start-up target of a price on the worked example: at most 0.25 s, median.
BUDGET_S = 0.25


def _quotacalc() -> list[str]:
    # The console script beside this interpreter: a version manager's shim on PATH (pyenv's is a bash script that
    # runs pyenv) would be timed with it.
    beside = os.path.join(os.path.dirname(sys.executable), "quotacalc")
    found = beside if os.access(beside, os.X_OK) else shutil.which("quotacalc")
    if found is None:
        sys.exit("quotacalc is not installed (pip install -e .)")
    return [found]


def _time(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one run; CPU time (user + system) moves far less with other load."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    subprocess.run(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)


def _instructions(command: list[str], env: dict[str, str]) -> float | None:
    """Millions of instructions of one run under callgrind, or None without valgrind."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        return None
    with tempfile.TemporaryDirectory() as scratch:
        out = os.path.join(scratch, "callgrind.out")
        proc = subprocess.run(
            [valgrind, "--tool=callgrind", f"--callgrind-out-file={out}", *command],
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            check=True,
        )
    counted = re.search(r"Collected : (\d+)", proc.stderr)
    return int(counted.group(1)) / 1e6 if counted else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--only", action="append", default=[], help="run the cases whose label holds this text")
    parser.add_argument("--markdown", action="store_true", help="print a docs/benchmarks.md table")
    parser.add_argument(
        "--instructions", action="store_true", help="also count each warm call's instructions (valgrind, slow)"
    )
    args = parser.parse_args()
    import quotacalc

    subprocess.run([sys.executable, "-m", "compileall", "-q", os.path.dirname(quotacalc.__file__)], check=True)
    base_env = {key: value for key, value in os.environ.items() if key != "PYTHONDONTWRITEBYTECODE"}
    rows = []
    from quotacalc.catalog.models import find_shipped

    cases = {
        label: command
        for label, command in CASES.items()
        if label == PASS or not args.only or any(o in label for o in args.only)
    }
    with contextlib.ExitStack() as stack:
        commands, envs = {}, {}
        for label, arguments in cases.items():
            cache = stack.enter_context(tempfile.TemporaryDirectory())
            envs[label] = {**base_env, "QUOTACALC_CACHE_DIR": cache}
            local = os.path.join(cache, "local-model")
            os.makedirs(local)
            shutil.copy(find_shipped("Llama-3.3-70B-Instruct").config_path, local)
            arguments = [argument.replace("{local}", local) for argument in arguments]
            commands[label] = arguments if arguments[0] == sys.executable else [*_quotacalc(), *arguments]
        colds = {label: _time(commands[label], envs[label]) for label in cases}
        runs: dict[str, list[tuple[float, float]]] = {label: [] for label in cases}
        for _ in range(args.runs):
            for label in cases:
                runs[label].append(_time(commands[label], envs[label]))
        counted = {label: _instructions(commands[label], envs[label]) if args.instructions else None for label in cases}
    for label in cases:
        (cold, cold_cpu), warm = colds[label], sorted(wall for wall, _ in runs[label])
        warm_cpu = min(cpu for _, cpu in runs[label])
        p90 = warm[min(len(warm) - 1, int(0.9 * len(warm)))]
        rows.append((label, cold, warm[0], statistics.median(warm), p90, cold_cpu, warm_cpu, counted[label]))
    floor = next(row[3] for row in rows if row[0] == PASS)
    load = f"load average {os.getloadavg()[0]:.1f} at the end" if hasattr(os, "getloadavg") else ""
    if args.markdown:
        print(
            "| command | cold (empty cache) | warm min | warm median | median - pass | warm p90 | CPU cold "
            f"| CPU warm min | warm instructions | median under {BUDGET_S} s |"
        )
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for label, cold, best, median, p90, cold_cpu, warm_cpu, counted in rows:
            shown = f"{counted:,.0f} M" if counted is not None else "-"
            print(
                f"| `{label}` | {cold:.3f} s | {best:.3f} s | {median:.3f} s | {median - floor:+.3f} s | {p90:.3f} s "
                f"| {cold_cpu:.3f} s | {warm_cpu:.3f} s | {shown} | {'yes' if median <= BUDGET_S else 'NO'} |"
            )
        print(
            f"\n{args.runs} warm runs each; Python {platform.python_version()}, {platform.machine()}, "
            f"{os.cpu_count()} CPUs; {load}."
        )
    else:
        for label, cold, best, median, p90, cold_cpu, warm_cpu, counted in rows:
            shown = f"  {counted:,.0f} M instructions" if counted is not None else ""
            print(
                f"{label:44s} cold {cold:.3f}s (CPU {cold_cpu:.3f}s)  warm min {best:.3f}s  median {median:.3f}s "
                f"({median - floor:+.3f}s against pass)  p90 {p90:.3f}s (CPU min {warm_cpu:.3f}s){shown}"
            )
        print(load)


if __name__ == "__main__":
    main()
