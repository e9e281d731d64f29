"""Replica model benchmark: time of one ReplicaModel.step_time_s / prefill_time_s call per shipped model.

Usage (from the repo root, quotacalc installed):

    python bench/replica.py [--calls 20000] [--markdown]

The simulator calls these millions of times; the budget is 5 us a call. Calls vary batch and
context so that no cache hides the arithmetic (the MoE expert count is cached per batch, as in a
simulation, which revisits the same batches).
"""

from __future__ import annotations

import argparse
import time

from quotacalc import price, resolve
from quotacalc.catalog.models import shipped_models
from quotacalc.cli.models_doc import reference_price
from quotacalc.core.replica import replica_model


def _per_call_s(function, arguments: list[tuple[int, float]]) -> float:
    best = float("inf")
    for _ in range(3):
        start = time.perf_counter()
        for first, second in arguments:
            function(first, second)
        best = min(best, (time.perf_counter() - start) / len(arguments))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    decode_args = [(1 + i % 256, 100.0 + (i * 37) % 30000) for i in range(args.calls)]
    prefill_args = [(1 + (i * 13) % 8192, float((i * 53) % 30000)) for i in range(args.calls)]
    rows = []
    for shipped in shipped_models():
        reference = reference_price(shipped.name)
        if reference is None:
            continue
        inputs = resolve(reference.inputs.deployment)
        model = replica_model(inputs, price(inputs).kv_pool_bytes_per_gpu)
        for batch, _ in decode_args[:300]:
            model.step_time_s(batch, 1000.0)  # warm the per-batch expert cache, as a simulation would
        rows.append(
            (shipped.name, _per_call_s(model.step_time_s, decode_args), _per_call_s(model.prefill_time_s, prefill_args))
        )
    if args.markdown:
        print("| model | step_time_s | prefill_time_s |")
        print("|---|---:|---:|")
        for name, step, prefill in rows:
            print(f"| {name} | {step * 1e6:.2f} us | {prefill * 1e6:.2f} us |")
        print(f"\nBest of 3 passes over {args.calls} calls each, varied batch and context, in one process.")
    else:
        for name, step, prefill in rows:
            print(f"{name:24s} step_time_s {step * 1e6:5.2f} us  prefill_time_s {prefill * 1e6:5.2f} us")


if __name__ == "__main__":
    main()
