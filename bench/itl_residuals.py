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

Part 3: the same harness on two GPUs (same source or CI, model, TP, weights, lengths and concurrency):
for each pair, the measured ratio of the two step times against the model's ratio at the defaults.
The GPU effect (measured ratio / predicted ratio - 1) is what a per-GPU MBU would have to absorb:
positive means the first GPU is slower, relative to the second, than the model's bandwidth and FLOP
ratios say. For low-batch pairs it also finds the step overhead at which one MBU fits both points (a
fixed cost per step, the same on both GPUs, shrinks the faster GPU's apparent advantage): if that
needs an MBU of about 1, no fixed cost explains the pair and the first GPU reads at a lower MBU. The engine is held fixed where the harness is (one build or release on both GPUs); the
vLLM CI pages are different builds of one CI.
"""

from __future__ import annotations

import statistics
from itertools import combinations
from typing import Any

from accuracy import deployment_of, load, measured_decode, predict_decode, resolve


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
        if p["engine"] == "vllm" and p.get("weight_dtype") == "bf16" and not p["source"].startswith("vllm-ci")
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

    print()
    same_harness_pairs()


def harness(point: dict[str, Any]) -> tuple:
    """What must match for two points to be one harness on two GPUs: everything but the GPU (the vLLM CI
    pages are one CI whose per-GPU sources differ only in the GPU's name)."""
    source = "vllm-ci" if point["source"].startswith("vllm-ci") else point["source"]
    load_key = point.get("concurrency", point.get("batch"))
    return (
        source,
        point["engine"],
        point["kind"],
        point["model"],
        point["tp"],
        point.get("weight_dtype"),
        point["prompt_tokens"],
        point["output_tokens"],
        load_key,
    )


def gpu_effects() -> list[tuple[dict[str, Any], dict[str, Any], float, float, float]]:
    """(first point, second point, measured ratio, predicted ratio, GPU effect) for every same-harness pair of
    decode points on two GPUs, the first GPU the one with more memory bandwidth."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for point in load("decode_itl.yaml"):
        groups.setdefault(harness(point), []).append(point)
    out = []
    for points in groups.values():
        for a, b in combinations(points, 2):
            if a["gpu"] == b["gpu"]:
                continue
            if bandwidth(a) < bandwidth(b):
                a, b = b, a
            measured = measured_decode(a) / measured_decode(b)
            predicted = predict_decode(a) / predict_decode(b)
            out.append((a, b, measured, predicted, measured / predicted - 1))
    return out


def bandwidth(point: dict[str, Any]) -> float:
    return resolve(deployment_of(point)).gpu.memory_bandwidth_bytes_per_s


def common_fit(faster: dict[str, Any], slower: dict[str, Any]) -> str:
    """The smallest step overhead (0-8 ms, 0.25 ms steps) at which the MBU matching the faster GPU's point
    reaches the slower GPU's, and that MBU; the faster GPU's matching MBU grows faster with the overhead."""
    for step in range(33):
        overhead = step * 0.00025
        fast, slow = (matching_mbu(p, step_overhead_s=overhead) for p in (faster, slower))
        if fast >= slow:
            if fast > 0.98:
                return f"none below MBU 1 ({overhead * 1e3:.2f} ms: MBU {fast:.2f} / {slow:.2f})"
            return f"{overhead * 1e3:.2f} ms: MBU {fast:.2f} / {slow:.2f}"
    return "none up to 8 ms"


def same_harness_pairs() -> None:
    print("Same harness, two GPUs (GPU effect = measured ratio / predicted ratio - 1; + : the first GPU slower):")
    print(
        f"  {'first point':42s} {'second point':42s} {'bw ratio':>8s} {'measured':>8s} {'model':>7s} {'effect':>7s}"
        "  one MBU for both at step overhead"
    )
    by_pair: dict[tuple[str, str], list[float]] = {}
    for a, b, measured, predicted, effect in gpu_effects():
        ratio = bandwidth(a) / bandwidth(b)
        common = common_fit(a, b) if low_batch(a) and low_batch(b) else "-"
        print(f"  {a['id']:42s} {b['id']:42s} {ratio:8.2f} {measured:8.3f} {predicted:7.3f} {effect:+7.1%}  {common}")
        by_pair.setdefault((a["gpu"], b["gpu"]), []).append(effect)
    for (first, second), effects in sorted(by_pair.items()):
        print(
            f"  {first} vs {second}: {len(effects)} pairs, GPU effect median {statistics.median(effects):+.1%}"
            f" (range {min(effects):+.1%} to {max(effects):+.1%})"
        )


if __name__ == "__main__":
    main()
