"""Closed-loop benchmark simulation: the cost of one simulated benchmark point (quotacalc.core.benchmark).

Usage (from the repo root, quotacalc installed):

    python bench/benchmark.py [--repeat 5] [--markdown]

Simulates every run of tests/data/measurements/decode_itl.yaml (kind itl) and closed_loop.yaml
whose requests fit the KV pool (the points bench/accuracy.py --closed-loop compares), from both
starts, and reports the time of one simulated point (best of ``--repeat`` passes), with the
engine steps it stands for and the loop turns it took. A calibration evaluates every point tens
of times per fit and refits once per point (leave-one-out), so the budget is well under 1 ms a point.
The steady-state formula (ReplicaModel.loaded_itl_s) is timed beside it for scale.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import deployment_of, load

from quotacalc import price, resolve
from quotacalc.core.benchmark import closed_loop
from quotacalc.core.replica import replica_model


def points():
    """(id, model, concurrency, prompt, output) of every run the accuracy comparison simulates."""
    runs = [p for p in load("decode_itl.yaml") if p["kind"] == "itl"] + load("closed_loop.yaml")
    out = []
    for point in runs:
        inputs = resolve(deployment_of(point))
        priced = price(inputs)
        if point["concurrency"] * (point["prompt_tokens"] + point["output_tokens"]) > priced.kv_pool_tokens:
            continue
        model = replica_model(inputs, priced.kv_pool_bytes_per_gpu)
        out.append((point["id"], model, point["concurrency"], point["prompt_tokens"], point["output_tokens"]))
    return out


def best_s(call, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        call()
        best = min(best, time.perf_counter() - start)
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    runs = points()
    rows = []
    for start in ("lockstep", "spread"):
        seconds, steps, turns, slowest = [], [], [], ("", 0.0)
        for ident, model, concurrency, prompt, output in runs:
            run = closed_loop(model, concurrency, prompt, output, start)
            took = best_s(lambda: closed_loop(model, concurrency, prompt, output, start), args.repeat)  # noqa: B023
            seconds.append(took)
            steps.append(run.engine_steps)
            turns.append(run.loop_turns)
            if took > slowest[1]:
                slowest = (f"{ident} (C {concurrency})", took)
        rows.append((start, seconds, steps, turns, slowest))
    formula = [
        best_s(lambda: model.loaded_itl_s(concurrency, prompt, output), args.repeat)  # noqa: B023
        for _, model, concurrency, prompt, output in runs
    ]
    if args.markdown:
        print(
            "| start | points | median per point | max per point | slowest | engine steps (median) | loop turns (median) |"
        )
        print("|---|---:|---:|---:|---|---:|---:|")
    for start, seconds, steps, turns, (slowest, _took) in rows:
        cells = [
            start,
            str(len(seconds)),
            f"{statistics.median(seconds) * 1e3:.3f} ms",
            f"{max(seconds) * 1e3:.3f} ms",
            slowest,
            f"{statistics.median(steps):,.0f}",
            f"{statistics.median(turns):,.0f}",
        ]
        print("| " + " | ".join(cells) + " |" if args.markdown else "  ".join(cells))
    scale = f"steady-state formula (loaded_itl_s): median {statistics.median(formula) * 1e6:.1f} us per point"
    print(f"\n{scale}; Python {sys.version.split()[0]}.")


if __name__ == "__main__":
    main()
