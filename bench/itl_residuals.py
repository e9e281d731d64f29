"""Is the decode residual the GPU or the engine? The evidence docs/accuracy.md gives the lead.

Usage (from the repo root, quotacalc installed):

    python bench/itl_residuals.py

Part 1: every low-batch decode point of tests/data/measurements/decode_itl.yaml (ITL at concurrency
1-4, or a fixed batch of at most 8), where the step is the weights' read: its error at the defaults
and the MBU that would make the model match it, at the default overheads (1.2 ms a step, 10 us a
sequence) and with no overhead at all. Read down the column by GPU and by engine build.

Part 2: one MBU and one step overhead fitted (grid, mean absolute error) on the low-batch BF16 points
of the vLLM releases (0.8.5-0.30.0: L4, A100 40GB, H100, four sources), then the vLLM CI builds'
BF16 dense points at that fit. A diagnostic only: nothing here changes a default.
"""

from __future__ import annotations

import statistics
from typing import Any

from accuracy import load, measured_decode, predict_decode


def low_batch(point: dict[str, Any]) -> bool:
    if point["kind"] == "itl":
        return point["concurrency"] <= 4
    return point["batch"] <= 8


def error(point: dict[str, Any], **overrides: Any) -> float:
    return predict_decode(point, **overrides) / measured_decode(point) - 1


def matching_mbu(point: dict[str, Any], **overrides: Any) -> float:
    """The MBU at which the prediction equals the measurement (bisection; the error falls as MBU rises)."""
    low, high = 0.02, 1.0
    for _ in range(40):
        middle = (low + high) / 2
        if error(point, mbu=middle, **overrides) > 0:
            low = middle
        else:
            high = middle
    return (low + high) / 2


def main() -> None:
    points = [point for point in load("decode_itl.yaml") if low_batch(point)]
    print(f"{'point':40s} {'GPU':14s} {'engine':28s} {'error':>7s} {'MBU @1.2ms':>10s} {'MBU @0':>7s}")
    for point in points:
        engine = f"{point['engine']} {point.get('engine_version', '?')}, {point.get('weight_dtype')}"
        no_overhead = matching_mbu(point, step_overhead_s=0.0, sequence_overhead_s=0.0)
        print(
            f"{point['id']:40s} {point['gpu']:14s} {engine:28s} {error(point):+7.1%}"
            f" {matching_mbu(point):10.3f} {no_overhead:7.3f}"
        )
    releases = [
        p
        for p in points
        if p["engine"] == "vllm" and p["weight_dtype"] == "bf16" and not p["source"].startswith("vllm-ci")
    ]
    fits = []
    for mbu in [x / 100 for x in range(70, 96)]:
        for overhead in [x / 10000 for x in range(0, 31, 2)]:
            errors = [error(p, mbu=mbu, step_overhead_s=overhead) for p in releases]
            fits.append((statistics.mean(abs(e) for e in errors), mbu, overhead, errors))
    mae, mbu, overhead, errors = min(fits, key=lambda fit: fit[0])
    print(
        f"\nvLLM releases, BF16, low batch ({len(releases)} points on {sorted({p['gpu'] for p in releases})}):"
        f" best MBU {mbu:.2f}, step overhead {overhead * 1e3:.1f} ms, MAE {mae:.1%}, worst {max(map(abs, errors)):.1%}"
    )
    for point, e in zip(releases, errors, strict=True):
        print(f"  {point['id']:40s} {point['gpu']:14s} {e:+.1%}")
    ci = [p for p in points if p["source"].startswith("vllm-ci") and "mixtral" not in p["id"].lower()]
    print("vLLM CI builds (dense, BF16) at that fit:")
    for point in ci:
        print(f"  {point['id']:40s} {point['gpu']:14s} {error(point, mbu=mbu, step_overhead_s=overhead):+.1%}")


if __name__ == "__main__":
    main()
