"""A prefill that runs faster while the GPU boosts? The term docs/accuracy.md tried and did not adopt.

Usage (from the repo root, quotacalc installed):

    python bench/clock_boost.py

The term: a prefill from an idle GPU runs at ``boost`` × the sustained (power-limited) rate for its first
``window_s`` seconds of compute, then at the sustained rate. It is applied here by patching ``ReplicaModel``
for the run only (the shipped model has no such term): the first token's chunks are charged their boosted wall
time, the prefills that decode steps carry run at the boosted rate where ``interleaved`` is set, and
calibrate's test of a compute-bound first token uses the boosted time. ``back_to_back`` exempts the points
measured on the engine alone (gptSessionBenchmark's context loops, ``engine_only``), whose prefills run back to
back at the sustained clock. For each variant it prints the ITL and TTFT mean absolute error on the fit and
held-out points (bench/accuracy.py's sets) and the two-point calibration's count within 5%
(tests/test_calibrate_real.py's rule).
"""

from __future__ import annotations

import contextlib
import statistics
import sys
from collections.abc import Iterator
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))
import accuracy

from quotacalc.core import calibrate as calibration
from quotacalc.core.replica import ReplicaModel

#: (label, boost, window_s, interleaved prefills boosted, back-to-back loops exempt, MFU or None for the default)
VARIANTS = [
    ("today", 1.0, 0.0, False, False, None),
    ("b 1.2, w 35 ms, MFU 0.5", 1.2, 0.035, True, False, 0.5),
    ("the same, interleaved at the sustained rate", 1.2, 0.035, False, False, 0.5),
    ("b 1.2, w 35 ms, no boost on back-to-back loops", 1.2, 0.035, True, True, 0.5),
    ("b 1.15, no boost on back-to-back loops", 1.15, 0.035, True, True, 0.5),
    ("b 1.1, no boost on back-to-back loops", 1.1, 0.035, True, True, 0.5),
]


def boosted_s(sustained_s: float, boost: float, window_s: float) -> float:
    """Wall time of ``sustained_s`` seconds of compute (at the sustained rate) started on an idle GPU."""
    if sustained_s <= boost * window_s:
        return sustained_s / boost
    return window_s + sustained_s - boost * window_s


@contextlib.contextmanager
def boosting(boost: float, window_s: float, interleaved: bool) -> Iterator[dict[str, bool]]:
    """Patch the term in; the yielded switch turns it off (a back-to-back point)."""
    switch = {"on": True}
    ttft_s, interleaved_s, compute_bound = (
        ReplicaModel.ttft_s,
        ReplicaModel.interleaved_prefill_s,
        calibration._any_compute_bound_prefill,
    )

    def boosted_ttft_s(self: ReplicaModel, prompt_tokens: int) -> float:
        if not switch["on"]:
            return ttft_s(self, prompt_tokens)
        total, done, busy_s = self.request_overhead_s, 0, 0.0
        while done < prompt_tokens:
            chunk = min(self.max_num_batched_tokens, prompt_tokens - done)
            compute_s = self.prefill_compute_s(chunk, done)
            wall_s = boosted_s(busy_s + compute_s, boost, window_s) - boosted_s(busy_s, boost, window_s)
            busy_s += compute_s
            total += self.mixed_step_time_s(0, 0.0, wall_s, chunk)
            done += chunk
        return total

    def boosted_interleaved_s(self: ReplicaModel, prompt_tokens: int) -> float:
        extra_s = self.prefill_compute_s(prompt_tokens) * (1 - 1 / boost) if interleaved and switch["on"] else 0.0
        return interleaved_s(self, prompt_tokens) - extra_s

    def boosted_compute_bound(inputs, prompt_lengths) -> bool:
        from quotacalc.core.replica import replica_model

        model = replica_model(inputs, 0.0)
        read_s = model.weight_bytes_per_gpu / model.bandwidth_bytes_per_s
        return any(
            boosted_s(model.prefill_compute_s(min(int(length), model.max_num_batched_tokens)), boost, window_s) > read_s
            for length in prompt_lengths
        )

    ReplicaModel.ttft_s = boosted_ttft_s
    ReplicaModel.interleaved_prefill_s = boosted_interleaved_s
    calibration._any_compute_bound_prefill = boosted_compute_bound
    try:
        yield switch
    finally:
        ReplicaModel.ttft_s, ReplicaModel.interleaved_prefill_s = ttft_s, interleaved_s
        calibration._any_compute_bound_prefill = compute_bound


def mean_errors(switch: dict[str, bool], back_to_back: bool, overrides: dict) -> dict[tuple[str, bool], float]:
    errors: dict[tuple[str, bool], list[float]] = {}
    for point in accuracy.load("decode_itl.yaml"):
        error = accuracy.predict_decode(point, **overrides) / accuracy.measured_decode(point) - 1
        errors.setdefault(("ITL", bool(point.get("held_out"))), []).append(abs(error))
    for point in accuracy.load("ttft.yaml"):
        switch["on"] = not (back_to_back and point.get("engine_only"))
        error = accuracy.predict_ttft(point, **overrides) / point["ttft_s"] - 1
        switch["on"] = True
        errors.setdefault(("TTFT", bool(point.get("held_out"))), []).append(abs(error))
    return {key: statistics.mean(values) for key, values in errors.items()}


def two_points(overrides: dict) -> str:
    sys.path.insert(0, str(accuracy.ROOT / "tests"))
    import test_calibrate_real as real

    counts = []
    for model_name, deployment in real.DEPLOYMENTS.items():
        within, total, _ = accuracy.two_point_outcome(real, model_name, deployment.model_copy(update=overrides))
        counts.append(f"{within} of {total}")
    return " / ".join(counts)


def main() -> None:
    print("| variant | ITL MAE fit / held out | TTFT MAE fit / held out | two points within 5% (70B / 8B) |")
    print("|---|---:|---:|---:|")
    for label, boost, window_s, interleaved, back_to_back, mfu in VARIANTS:
        overrides = {} if mfu is None else {"mfu": mfu}
        with boosting(boost, window_s, interleaved) as switch:
            errors = mean_errors(switch, back_to_back, overrides)
            count = two_points(overrides)
        print(
            f"| {label} | {errors['ITL', False]:.2%} / {errors['ITL', True]:.2%} | "
            f"{errors['TTFT', False]:.2%} / {errors['TTFT', True]:.2%} | {count} |"
        )


if __name__ == "__main__":
    main()
