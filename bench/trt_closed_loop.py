"""Would a TensorRT-LLM scheduler model meet the two-point target on NIM's runs? A diagnostic.

Usage (from the repo root, quotacalc installed):

    python bench/trt_closed_loop.py [--markdown]

What TensorRT-LLM's in-flight batching does, from its source (NVIDIA/TensorRT-LLM):

- cpp/tensorrt_llm/batch_manager/capacityScheduler.cpp (commit 02a10fe), ``GuaranteedNoEvictScheduler``
  (the default capacity policy, docs/source/performance/performance-tuning-guide/useful-runtime-flags.md):
  every request already generating is kept and its KV blocks to completion are reserved; then waiting
  requests are admitted in arrival order while their blocks to completion fit, stopping at the first
  that does not; at most ``max_batch_size`` requests.
- cpp/tensorrt_llm/batch_manager/microBatchScheduler.cpp (commit 0a949d3): each iteration walks the
  admitted requests in order; a generating request costs one token of ``max_num_tokens``, a context
  request its whole prompt (no chunked context) or, with chunked context, what is left after the
  generation tokens (first come first served chunks); the walk stops at the first context that does not
  fit. Context and generation requests run in one forward pass (docs/source/features/
  paged-attention-ifb-scheduler.md, "In-flight Batching").

So with the requests of a closed loop fitting the pool, a new request's prompt enters the very next
iteration whenever it fits ``max_num_tokens`` beside the decodes: the schedule is the one
quotacalc.core.benchmark already simulates (without chunking a prompt is one iteration instead of
several chunks, which moves a TTFT by at most one iteration). NIM 1.8.0's runs were not started with
published engine settings; whether its profiles enable chunked context was not found in NIM's docs
(its 20,000-token prompts run, so either chunking is on or ``max_num_tokens`` is at least 20,000).

This script measures three things on NIM's full sweeps (tests/data/measurements/closed_loop.yaml, runs
whose requests fit the pool; never fitted to):

1. The time a request waits for its first token under load, beyond its idle TTFT, in decode iterations
   of that run: the scheduler above admits it within about one.
2. The ITL under load with the measured TTFT fed in (an oracle: the best any TTFT-under-load model can
   do): Little's law on the closed loop. Each cycle is TTFT + (output − 1) × ITL; a decoding request
   sees 1 + (C − 1) × decode share others decoding with it, and the others' prefills arrive at
   (C − 1) / cycle, each adding ``interleaved_prefill_s``. Also the mixed-iteration roofline (a
   prefill riding in a decode step adds max(memory, decode + prefill compute) − max(memory, decode
   compute): the weights read once for both), alone and with the oracle.
3. tests/test_calibrate_real.py's two-point calibration with calibrate's ITL predictor swapped for the
   oracle model (the fit runs and every predicted run get their own measured TTFT under load).
4. A smooth ridge for a prefill step on an idle replica (the idle TTFT): (compute^k + weight read^k)^(1/k)
   instead of max(), the exponent chosen by the TTFT mean absolute error on ttft.yaml's fit points only,
   then the held-out points' error and the two-point calibration with calibrate's TTFT predictor swapped.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path

# bench/accuracy.py's loaders and deployments, so both scripts read the measurements alike.
sys.path.insert(0, str(Path(__file__).resolve().parent))
import accuracy

from quotacalc import price, resolve
from quotacalc.core.benchmark import closed_loop
from quotacalc.core.replica import ReplicaModel, replica_model

#: Fixed-point iterations of the closed-loop ITL, damped by half (on NIM's runs 80 and 400 agree exactly).
ITERATIONS = 80


def mixed_prefill_s(model: ReplicaModel, batch: float, context: float, prompt: int) -> float:
    """What one prompt's prefill adds to a step of ``batch`` decodes when the weights are read once for both."""
    whole = max(1, round(batch))
    read_s = (
        model.engine_weight_read_bytes_per_gpu(whole) + whole * model.sequence_kv_read_bytes_per_gpu(context)
    ) / model.bandwidth_bytes_per_s
    decode_s = model.decode_compute_s(whole, context)
    compute_s = model.prefill_compute_s(prompt)
    return (
        max(read_s, decode_s + compute_s)
        - max(read_s, decode_s)
        + model.allreduces_per_step * prompt * model.allreduce_s_per_token
    )


def closed_loop_itl_s(
    model: ReplicaModel, concurrency: int, prompt: int, output: int, ttft_s: float | None, mixed: bool = False
) -> float:
    """Mean ITL of a closed loop: steady state (``ttft_s`` None: every other request decodes and prefills once
    per ``output`` steps) or Little's law with the run's TTFT under load."""
    context = prompt + output / 2
    if ttft_s is None:
        prefill = mixed_prefill_s(model, concurrency, context, prompt) if mixed else model.interleaved_prefill_s(prompt)
        return model.step_time_s(concurrency, context) + (concurrency - 1) / output * prefill
    itl = model.loaded_itl_s(concurrency, prompt, output)
    for _ in range(ITERATIONS):
        cycle = ttft_s + (output - 1) * itl
        batch = 1 + (concurrency - 1) * (output - 1) * itl / cycle
        prefill = mixed_prefill_s(model, batch, context, prompt) if mixed else model.interleaved_prefill_s(prompt)
        itl = 0.5 * itl + 0.5 * (model.step_time_s(batch, context) + (concurrency - 1) / cycle * itl * prefill)
    return itl


VARIANTS: dict[str, tuple[bool, bool]] = {
    # name: (measured TTFT fed in, mixed-iteration roofline)
    "steady": (False, False),
    "oracle TTFT": (True, False),
    "mixed step": (False, True),
    "oracle + mixed": (True, True),
}


def nim_runs() -> list[tuple[dict, ReplicaModel]]:
    """NIM's closed-loop runs whose requests fit the pool quotacalc estimates, with their default replica model."""
    out = []
    for point in accuracy.load("closed_loop.yaml"):
        if point["engine"] != "tensorrt-llm":
            continue
        inputs = resolve(accuracy.deployment_of(point))
        priced = price(inputs)
        if point["concurrency"] * (point["prompt_tokens"] + point["output_tokens"]) > priced.kv_pool_tokens:
            continue
        out.append((point, replica_model(inputs, priced.kv_pool_bytes_per_gpu)))
    return out


def idle_ttfts() -> dict[tuple[str, int], float]:
    return {
        (p["model"], p["prompt_tokens"]): p["ttft_s"] for p in accuracy.load("ttft.yaml") if p["source"] == "nim-1.0"
    }


def wait_rows(runs: list[tuple[dict, ReplicaModel]]) -> list[tuple[str, float, float]]:
    """(run, measured wait in iterations, the spread simulation's) for runs with a concurrency-1 TTFT."""
    idle = idle_ttfts()
    rows = []
    for point, model in runs:
        alone = idle.get((point["model"], point["prompt_tokens"]))
        if alone is None:
            continue
        simulated = closed_loop(model, point["concurrency"], point["prompt_tokens"], point["output_tokens"], "spread")
        measured_wait = (point["ttft_s"] - alone) / point["itl_s"]
        simulated_wait = (simulated.mean_ttft_s - model.ttft_s(point["prompt_tokens"])) / simulated.mean_itl_s
        rows.append((point["id"], measured_wait, simulated_wait))
    return rows


def itl_rows(runs: list[tuple[dict, ReplicaModel]]) -> list[tuple[str, int, dict[str, float]]]:
    rows = []
    for point, model in runs:
        errors = {}
        for name, (oracle, mixed) in VARIANTS.items():
            predicted = closed_loop_itl_s(
                model,
                point["concurrency"],
                point["prompt_tokens"],
                point["output_tokens"],
                point["ttft_s"] if oracle else None,
                mixed,
            )
            errors[name] = predicted / point["itl_s"] - 1
        rows.append((point["id"], point["prompt_tokens"], errors))
    return rows


def two_point(
    variant: str, itl_s: Callable[[ReplicaModel, object], float] | None = None
) -> dict[str, tuple[int, int, dict[str, float]]]:
    """tests/test_calibrate_real.py's rule with calibrate's ITL predictor swapped for ``variant`` (or ``itl_s``)."""
    sys.path.insert(0, str(accuracy.ROOT / "tests"))
    import test_calibrate_real as real

    from quotacalc.core import calibrate as calibration

    oracle, mixed = VARIANTS.get(variant, (False, False))
    measured = {
        (p["model"], p["concurrency"], p["prompt_tokens"], p["output_tokens"]): p["ttft_s"]
        for p in accuracy.load("closed_loop.yaml")
    }
    current: dict[str, str] = {}

    def itl(model: ReplicaModel, point) -> float:
        key = (current["model"], point.concurrency, point.prompt_tokens, point.output_tokens)
        ttft = measured[key] if oracle and point.concurrency > 1 else None
        return closed_loop_itl_s(
            model, point.concurrency, round(point.prompt_tokens), round(point.output_tokens), ttft, mixed
        )

    original: Callable = calibration.PREDICTORS["itl_s"]
    calibration.PREDICTORS["itl_s"] = itl_s or itl
    results = {}
    try:
        for name, deployment in real.DEPLOYMENTS.items():
            current["model"] = name
            results[name] = accuracy.two_point_outcome(real, name, deployment)
    finally:
        calibration.PREDICTORS["itl_s"] = original
    return results


#: Exponents of the smooth ridge tried (None: the model's max()).
RIDGE_EXPONENTS: tuple[float | None, ...] = (None, 2.0, 2.5, 3.0, 3.5, 4.0, 6.0)


def smooth_ttft_s(model: ReplicaModel, prompt_tokens: float, exponent: float | None) -> float:
    """ReplicaModel.ttft_s with each idle prefill step's max(FLOP time, weight read) replaced by their
    ``exponent``-norm (compute and memory traffic overlapping imperfectly near the ridge point)."""
    if exponent is None:
        return model.ttft_s(round(prompt_tokens))
    total, done, prompt = model.request_overhead_s, 0, round(prompt_tokens)
    read_s = model.prefill_weight_read_s()
    while done < prompt:
        chunk = min(model.max_num_batched_tokens, prompt - done)
        compute_s = model.prefill_compute_s(chunk, done)
        total += (compute_s**exponent + read_s**exponent) ** (1 / exponent) + model.step_overhead_s
        total += model.allreduce_s(chunk)
        done += chunk
    return total


def ridge_rows() -> list[tuple[float | None, float, float]]:
    """(exponent, TTFT mean absolute error on ttft.yaml's fit points, on its held-out points)."""
    points = [(point, accuracy.model_of(point)) for point in accuracy.load("ttft.yaml")]
    out = []
    for exponent in RIDGE_EXPONENTS:
        errors = {True: [], False: []}
        for point, model in points:
            predicted = smooth_ttft_s(model, point["prompt_tokens"], exponent)
            errors[bool(point.get("held_out"))].append(abs(predicted / point["ttft_s"] - 1))
        out.append((exponent, statistics.mean(errors[False]), statistics.mean(errors[True])))
    return out


def smooth_step_s(model: ReplicaModel, batch: int, context: float, exponent: float | None) -> float:
    """ReplicaModel.step_time_s with the decode step's max(memory, compute) replaced by their ``exponent``-norm."""
    if exponent is None:
        return model.step_time_s(batch, context)
    read_s = (
        model.engine_weight_read_bytes_per_gpu(batch) + batch * model.sequence_kv_read_bytes_per_gpu(context)
    ) / model.bandwidth_bytes_per_s
    compute_s = model.decode_compute_s(batch, context)
    return (
        (read_s**exponent + compute_s**exponent) ** (1 / exponent)
        + model.step_overhead_s
        + batch * model.sequence_overhead_s
        + model.allreduce_s(batch)
    )


def smooth_loaded_itl_s(model: ReplicaModel, concurrency: int, prompt: float, output: float, exponent) -> float:
    """ReplicaModel.loaded_itl_s over smooth_step_s."""
    step = smooth_step_s(model, concurrency, prompt + output / 2, exponent)
    return step + (concurrency - 1) / output * model.interleaved_prefill_s(round(prompt))


def decode_rows(exponent: float | None) -> tuple[float, float]:
    """decode_itl.yaml's ITL mean absolute error (fit, held out) with the smooth decode step, as bench/accuracy.py
    predicts each kind."""
    errors = {True: [], False: []}
    for point in accuracy.load("decode_itl.yaml"):
        model = accuracy.model_of(point)
        prompt, output = point["prompt_tokens"], point["output_tokens"]
        if point["kind"] == "itl":
            predicted = smooth_loaded_itl_s(model, point["concurrency"], prompt, output, exponent)
        else:
            batch = point["batch"]
            step = smooth_step_s(model, batch, prompt + output / 2, exponent)
            predicted = accuracy.batch_prefill_s(model, batch, prompt) + (output - 1) * step
        errors[bool(point.get("held_out"))].append(abs(predicted / accuracy.measured_decode(point) - 1))
    return statistics.mean(errors[False]), statistics.mean(errors[True])


def two_point_ridge(
    exponent: float | None, itl_variant: str, decode_too: bool = False
) -> dict[str, tuple[int, int, dict[str, float]]]:
    """two_point(itl_variant) with calibrate's TTFT at concurrency 1 from smooth_ttft_s (and, ``decode_too``,
    its steady ITL from smooth_loaded_itl_s)."""
    from quotacalc.core import calibrate as calibration

    original: Callable = calibration.PREDICTORS["ttft_s"]

    def ttft(model: ReplicaModel, point) -> float:
        if point.concurrency == 1:
            return smooth_ttft_s(model, point.prompt_tokens, exponent)
        return original(model, point)

    def itl(model: ReplicaModel, point) -> float:
        return smooth_loaded_itl_s(model, point.concurrency, point.prompt_tokens, point.output_tokens, exponent)

    calibration.PREDICTORS["ttft_s"] = ttft
    try:
        return two_point(itl_variant, itl if decode_too else None)
    finally:
        calibration.PREDICTORS["ttft_s"] = original


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    runs = nim_runs()

    waits = wait_rows(runs)
    print("Wait for the first token beyond the idle TTFT, in decode iterations of the run")
    if args.markdown:
        print("\n| run | measured | TensorRT-LLM-style schedule (spread simulation) |\n|---|---:|---:|")
    for ident, measured_wait, simulated_wait in waits:
        if args.markdown:
            print(f"| {ident} | {measured_wait:.1f} | {simulated_wait:.1f} |")
        else:
            print(f"{ident:30s} measured {measured_wait:6.1f}  schedule {simulated_wait:5.1f}")
    print()

    rows = itl_rows(runs)
    groups = {
        "prompts < 5,000 tokens": lambda r: r[1] < 5000,
        "prompts >= 5,000 tokens": lambda r: r[1] >= 5000,
        "all": lambda r: True,
    }
    print("ITL mean absolute error, NIM closed-loop runs that fit the pool (defaults)")
    if args.markdown:
        print("\n| runs | n | " + " | ".join(VARIANTS) + " |\n|---|---:|" + "---:|" * len(VARIANTS))
    for label, chosen in groups.items():
        selected = [r for r in rows if chosen(r)]
        cells = [f"{statistics.mean(abs(r[2][v]) for r in selected):.1%}" for v in VARIANTS]
        if args.markdown:
            print(f"| {label} | {len(selected)} | " + " | ".join(cells) + " |")
        else:
            print(
                f"{label:26s} n={len(selected):3d}  "
                + "  ".join(f"{v} {c}" for v, c in zip(VARIANTS, cells, strict=True))
            )
    if not args.markdown:
        for ident, _, errors in rows:
            print(f"  {ident:30s} " + "  ".join(f"{v} {e:+.1%}" for v, e in errors.items()))
    print()

    print("Two-point calibration (tests/test_calibrate_real.py's rule), other points within 5%")
    if args.markdown:
        print("\n| ITL model | deployment | within 5% | misses |\n|---|---|---:|---|")
    for variant in VARIANTS:
        for name, (within, total, misses) in two_point(variant).items():
            listed = ", ".join(f"{ident} {error:+.1%}" for ident, error in misses.items())
            if args.markdown:
                print(f"| {variant} | {name} | {within} of {total} | {listed} |")
            else:
                print(f"{variant:15s} {name:24s} {within}/{total}: {listed}")
    print()

    ridges = ridge_rows()
    best = min(ridges, key=lambda row: row[1])[0]
    print(
        f"Smooth ridge for an idle prefill step: TTFT mean absolute error (ttft.yaml); best on fit points: k = {best}"
    )
    if args.markdown:
        print("\n| exponent k | fit | held out |\n|---|---:|---:|")
    for exponent, fit_error, held_error in ridges:
        label = "max() (today)" if exponent is None else f"{exponent:g}"
        if args.markdown:
            print(f"| {label} | {fit_error:.1%} | {held_error:.1%} |")
        else:
            print(f"k {label:14s} fit {fit_error:.1%}  held out {held_error:.1%}")
    print()
    fit_itl, held_itl = decode_rows(best)
    today_fit, today_held = decode_rows(None)
    print(
        f"(the same exponent in the decode step too: decode_itl.yaml ITL mean absolute error fit {today_fit:.2%} -> "
        f"{fit_itl:.2%}, held out {today_held:.2%} -> {held_itl:.2%})"
    )
    print(f"Two-point calibration with the smooth ridge (k = {best}) in calibrate's TTFT")
    if args.markdown:
        print("\n| ITL model | deployment | within 5% | misses |\n|---|---|---:|---|")
    for variant, decode_too in (("steady", False), ("oracle TTFT", False), ("steady, smooth decode too", True)):
        for name, (within, total, misses) in two_point_ridge(best, variant, decode_too).items():
            listed = ", ".join(f"{ident} {error:+.1%}" for ident, error in misses.items())
            if args.markdown:
                print(f"| {variant} | {name} | {within} of {total} | {listed} |")
            else:
                print(f"{variant:15s} {name:24s} {within}/{total}: {listed}")


if __name__ == "__main__":
    main()
