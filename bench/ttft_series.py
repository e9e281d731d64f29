"""What each TTFT series on an idle replica implies for the request overhead and the prefill MFU.

Usage (from the repo root, quotacalc installed):

    python bench/ttft_series.py

A series is one source's first-token latencies of one deployment (engine and version, model, GPU, TP,
weights) at three or more prompt lengths, at concurrency 1 (tests/data/measurements/ttft.yaml). For each
series it prints the error at the defaults (request overhead 5 ms, MFU 0.5), then the request overhead
and MFU that fit the series' non-held-out points best (grid, mean absolute relative error) and the
errors of every point there (held-out points marked H: predicted, never fitted). Then a model-free
reading of the longest two prompts: the marginal cost per prompt token, and the MFU it implies (the
FLOPs per token of the model at the mean attended length, against the GPU's peak for the weights'
compute dtype). Last, every pair of TTFT points of one harness on two GPUs (same source, engine release,
model, TP, weights and prompt): the measured ratio against the model's. A diagnostic only: nothing here
changes a default.
"""

from __future__ import annotations

import statistics
from typing import Any

from accuracy import deployment_of, load, model_of, predict_ttft, resolve

OVERHEADS_S = [x / 2000 for x in range(0, 41)]  # 0 to 20 ms, 0.5 ms apart
MFUS = [x / 100 for x in range(20, 91, 2)]


def series_key(point: dict[str, Any]) -> tuple:
    return (
        point["source"],
        point["engine"],
        point.get("engine_version"),
        point["model"],
        point["gpu"],
        point["tp"],
        point.get("weight_dtype"),
    )


def series() -> dict[tuple, list[dict[str, Any]]]:
    """Every TTFT series of three or more prompt lengths, its points sorted by prompt length."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for point in load("ttft.yaml"):
        groups.setdefault(series_key(point), []).append(point)
    return {key: sorted(points, key=lambda p: p["prompt_tokens"]) for key, points in groups.items() if len(points) >= 3}


def error(point: dict[str, Any], **overrides: Any) -> float:
    return predict_ttft(point, **overrides) / point["ttft_s"] - 1


def best_fit(points: list[dict[str, Any]]) -> tuple[float, float, float]:
    """(request overhead s, MFU, mean absolute error) that fit the non-held-out points best."""
    fitted = [p for p in points if not p.get("held_out")]
    fits = []
    for mfu in MFUS:
        for overhead in OVERHEADS_S:
            errors = [abs(error(p, mfu=mfu, request_overhead_s=overhead)) for p in fitted]
            fits.append((statistics.mean(errors), overhead, mfu))
    mae, overhead, mfu = min(fits)
    return overhead, mfu, mae


def marginal_mfu(points: list[dict[str, Any]]) -> tuple[float, float]:
    """(seconds per prompt token, implied MFU) between the two longest prompts: the FLOP time of the extra
    tokens at MFU 1 over the measured extra time (the model's FLOP time at the default MFU, scaled back to
    MFU 1)."""
    short, long = points[-2], points[-1]
    model = model_of(long)
    extra_s = long["ttft_s"] - short["ttft_s"]
    flop_time_at_default_s = model.prefill_compute_s(long["prompt_tokens"]) - model.prefill_compute_s(
        short["prompt_tokens"]
    )
    default_mfu = resolve(deployment_of(long)).deployment.mfu
    return extra_s / (long["prompt_tokens"] - short["prompt_tokens"]), flop_time_at_default_s * default_mfu / extra_s


def main() -> None:
    for key, points in series().items():
        source, engine, version, model, gpu, tp, dtype = key
        print(f"{engine} {version}, {model}, {gpu}, TP {tp}, {dtype} ({source}, {len(points)} prompt lengths)")
        overhead, mfu, mae = best_fit(points)
        defaults = [error(p) for p in points]
        fitted = [error(p, mfu=mfu, request_overhead_s=overhead) for p in points]
        print(f"  defaults (5 ms, MFU 0.5): MAE {statistics.mean(abs(e) for e in defaults):.1%}")
        print(
            f"  best fit on the non-held-out points: request overhead {overhead * 1e3:.1f} ms, MFU {mfu:.2f},"
            f" MAE {mae:.1%} (all points {statistics.mean(abs(e) for e in fitted):.1%})"
        )
        for point, at_default, at_fit in zip(points, defaults, fitted, strict=True):
            mark = "H" if point.get("held_out") else " "
            print(
                f"   {mark} {point['prompt_tokens']:6d} tokens  {point['ttft_s'] * 1e3:8.2f} ms"
                f"  defaults {at_default:+7.1%}  fit {at_fit:+7.1%}"
            )
        per_token_s, implied = marginal_mfu(points)
        print(
            f"  longest two prompts: {per_token_s * 1e6:.1f} us a prompt token, MFU {implied:.2f} of the peak"
            " (model-free but for the FLOPs per token)"
        )
    print()
    gpu_pairs()


def gpu_pairs() -> None:
    """Same harness, two GPUs: measured and predicted TTFT ratios (first GPU / second)."""
    groups: dict[tuple, list[dict[str, Any]]] = {}
    for point in load("ttft.yaml"):
        key = (*series_key(point)[:4], point["tp"], point.get("weight_dtype"), point["prompt_tokens"])
        groups.setdefault(key, []).append(point)
    print("Same harness, two GPUs (TTFT ratio first / second; effect = measured / predicted - 1):")
    for points in groups.values():
        for i, first in enumerate(points):
            for second in points[i + 1 :]:
                if first["gpu"] == second["gpu"]:
                    continue
                measured = first["ttft_s"] / second["ttft_s"]
                predicted = predict_ttft(first) / predict_ttft(second)
                print(
                    f"  {first['id']:42s} {second['id']:42s} measured {measured:.3f} model {predicted:.3f}"
                    f" effect {measured / predicted - 1:+.1%}"
                )


if __name__ == "__main__":
    main()
