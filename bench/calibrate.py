"""Calibration benchmark: how long the fit takes, and how well two points predict the rest.

Usage (from the repo root, quotacalc installed):

    python bench/calibrate.py [--runs 5] [--markdown]

Times ``quotacalc.core.calibrate.calibrate`` (the fit plus one leave-one-out fit per point) on the
shipped examples, in-process, after one warm-up call (imports, config resolution and scipy's
first use are not the fit's cost). Then, on the NIM measurements of Llama 3.3 70B FP8 on 2x H100
(examples/calibration/nim-llama-3.3-70b-h100-tp2.csv, cited in the file), calibrates on every pair
of runs and reports how far the other points land: the two-point target is 5% (docs/accuracy.md).
"""

from __future__ import annotations

import argparse
import itertools
import platform
import statistics
import sys
import time
from pathlib import Path

from quotacalc.core.calibrate import calibrate, predictions
from quotacalc.core.deployment import Deployment
from quotacalc.inputs.benchmarks import read_benchmark
from quotacalc.inputs.resolve import resolve

EXAMPLES = Path(__file__).parent.parent / "examples" / "calibration"
CASES = {
    "synthetic, 6 runs (TTFT + ITL), Llama 3.3 70B FP8 TP 4 H100": (
        EXAMPLES / "synthetic-llama-3.3-70b-h100-tp4.csv",
        Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="bf16"),
    ),
    "NIM, 13 runs (5 TTFT + 13 ITL), Llama 3.3 70B FP8 TP 2 H100": (
        EXAMPLES / "nim-llama-3.3-70b-h100-tp2.csv",
        Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=2, weight_dtype="fp8", kv_dtype="fp8"),
    ),
}


def time_fits(runs: int) -> list[tuple[str, int, float, float]]:
    rows = []
    for name, (path, deployment) in CASES.items():
        inputs = resolve(deployment)
        points, _ = read_benchmark(str(path))
        calibrate(inputs, points)  # warm-up
        seconds = []
        for _ in range(runs):
            start = time.perf_counter()
            calibrate(inputs, points)
            seconds.append(time.perf_counter() - start)
        rows.append((name, len(points), min(seconds), statistics.median(seconds)))
    return rows


def two_point_errors() -> list[tuple[str, float, float, str]]:
    """Calibrate on each pair of NIM runs; the other points' RMS and largest error, worst pairs first."""
    path, deployment = CASES["NIM, 13 runs (5 TTFT + 13 ITL), Llama 3.3 70B FP8 TP 2 H100"]
    inputs = resolve(deployment)
    points, _ = read_benchmark(str(path))
    out = []
    for pair in itertools.combinations(range(len(points)), 2):
        result = calibrate(inputs, [points[n] for n in pair])
        values = {parameter.name: parameter.after for parameter in result.parameters}
        others = [point for n, point in enumerate(points) if n not in pair]
        predicted = predictions(inputs, values, others)
        measured = [value for point in others for value in point.measured().values()]
        labels = [
            f"{q[:-2].upper()} c{p.concurrency} {p.prompt_tokens:g}/{p.output_tokens:g}"
            for p in others
            for q in p.measured()
        ]
        errors = [p / m - 1 for p, m in zip(predicted, measured, strict=True)]
        worst = max(range(len(errors)), key=lambda n: abs(errors[n]))
        rms = (sum(e * e for e in errors) / len(errors)) ** 0.5
        train = " + ".join(
            f"c{points[n].concurrency} {points[n].prompt_tokens:g}/{points[n].output_tokens:g}" for n in pair
        )
        out.append((train, rms, errors[worst], labels[worst]))
    return sorted(out, key=lambda row: abs(row[2]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    timings = time_fits(args.runs)
    accuracy = two_point_errors()
    if args.markdown:
        print("| benchmark file | points | fit + leave-one-out, min | median |\n|---|---:|---:|---:|")
        for name, count, low, median in timings:
            print(f"| {name} | {count} | {low * 1e3:.0f} ms | {median * 1e3:.0f} ms |")
        print(f"\n{args.runs} runs each; Python {platform.python_version()}, {platform.machine()}.\n")
        within = sum(abs(worst) <= 0.05 for _, _, worst, _ in accuracy)
        print(f"{len(accuracy)} pairs of runs; pairs whose other points all land within 5%: {within}.\n")
        print("| calibrated on | RMS error of the other points | worst | at |\n|---|---:|---:|---|")
        for train, rms, worst, label in accuracy[:5] + accuracy[-5:]:
            print(f"| {train} | {rms:.1%} | {worst:+.1%} | {label} |")
    else:
        for name, count, low, median in timings:
            print(f"{name}: {count} points, fit + leave-one-out min {low * 1e3:.0f} ms, median {median * 1e3:.0f} ms")
        for train, rms, worst, label in accuracy[:5] + accuracy[-5:]:
            print(f"calibrated on {train}: others RMS {rms:.1%}, worst {worst:+.1%} ({label})")


if __name__ == "__main__":
    sys.exit(main())
