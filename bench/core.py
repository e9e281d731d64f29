"""Core benchmark: in-process time to resolve and price each shipped model, and to size a tenant.

Usage (from the repo root, quotacalc installed):

    python bench/core.py [--repeat 50] [--markdown]

What a library user or a CI job pricing many deployments pays per call, after the first call
has warmed the config cache and the imports.
"""

from __future__ import annotations

import argparse
import statistics
import time

from quotacalc import Deployment, Traffic, price, resolve, size_traffic
from quotacalc.catalog.models import shipped_models
from quotacalc.cli.models_doc import reference_price


def _per_call_s(action, repeat: int) -> float:
    samples = []
    for _ in range(repeat):
        start = time.perf_counter()
        action()
        samples.append(time.perf_counter() - start)
    return statistics.median(samples)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    rows = []
    traffic = Traffic(rps=5, prompt_tokens=2000, output_tokens=500)
    for model in shipped_models():
        reference = reference_price(model.name)
        if reference is None:
            continue
        deployment: Deployment = reference.inputs.deployment
        resolve_s = _per_call_s(lambda d=deployment: resolve(d), args.repeat)
        inputs = resolve(deployment)
        price_s = _per_call_s(lambda i=inputs: price(i), args.repeat)
        size_s = _per_call_s(lambda r=reference: size_traffic(r, traffic), args.repeat)
        rows.append((model.name, len(inputs.arch.layers), resolve_s, price_s, size_s))
    if args.markdown:
        print("| model | layers | resolve (config -> arch) | price | size a tenant |")
        print("|---|---:|---:|---:|---:|")
        for name, layers, resolve_s, price_s, size_s in rows:
            print(f"| {name} | {layers} | {resolve_s * 1e3:.2f} ms | {price_s * 1e3:.2f} ms | {size_s * 1e3:.3f} ms |")
        print(f"\nMedian of {args.repeat} calls each, warm cache, in one process.")
    else:
        for name, layers, resolve_s, price_s, size_s in rows:
            print(
                f"{name:24s} {layers:4d} layers  resolve {resolve_s * 1e3:6.2f} ms  price {price_s * 1e3:6.2f} ms  size {size_s * 1e3:6.3f} ms"
            )


if __name__ == "__main__":
    main()
