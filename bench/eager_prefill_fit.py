"""The eager-prefill engines' per-layer prefill cost: the search that sets SGLang's, and the check of the PyTorch
backend of TensorRT-LLM that borrows it (docs/accuracy.md, *TensorRT-LLM's PyTorch backend: an eager profile*).

Usage (from the repo root, quotacalc installed):

    python bench/eager_prefill_fit.py

For each prefill_layer_overhead_s on a grid (0.5-1.3 ms by 0.1 ms) it prints the sum and mean of the absolute
errors over SGLang's fit points (first tokens and decode ITLs of tests/data/measurements/, held-out points
left out), each priced with the sglang profile (its token budget included) and that value; the smallest sum is the
profile's figure. Then the TensorRT-LLM PyTorch-backend points (engine tensorrt-llm-pytorch), fit and held out, at
the profile's figure beside the generic engine's, which no value was fitted on.
"""

from __future__ import annotations

import statistics

import accuracy

from quotacalc.catalog.engines import load_engine_catalog

GRID_S = tuple(round(0.0005 + 0.0001 * step, 4) for step in range(9))


def points(engine: str, *, held_out: bool | None) -> list[tuple[str, dict]]:
    """(kind, point) of one engine's first tokens and decode ITLs; held_out None: both sets."""
    chosen = []
    for kind, name in (("TTFT", "ttft.yaml"), ("ITL", "decode_itl.yaml")):
        for point in accuracy.load(name):
            if point.get("engine") == engine and (held_out is None or bool(point.get("held_out")) == held_out):
                chosen.append((kind, point))
    return chosen


def error(kind: str, point: dict, **overrides) -> float:
    """Signed relative error of one point priced with these overrides."""
    if kind == "TTFT":
        return accuracy.predict_ttft(point, **overrides) / point["ttft_s"] - 1
    return accuracy.predict_decode(point, **overrides) / accuracy.measured_decode(point) - 1


def main() -> None:
    fit = points("sglang", held_out=False)
    print(f"SGLang fit points: {sum(k == 'TTFT' for k, _ in fit)} first tokens, {sum(k == 'ITL' for k, _ in fit)} ITLs")
    sums = {}
    for layer_s in GRID_S:
        errors = [abs(error(kind, point, prefill_layer_overhead_s=layer_s)) for kind, point in fit]
        sums[layer_s] = sum(errors)
        print(f"  {layer_s * 1e3:.1f} ms a layer: sum {sums[layer_s]:.3f}, mean {statistics.mean(errors):.1%}")
    best = min(sums, key=sums.get)
    shipped = load_engine_catalog().get("sglang").defaults.prefill_layer_overhead_s
    print(f"smallest sum at {best * 1e3:.1f} ms; the sglang profile ships {shipped * 1e3:.1f} ms")
    print("TensorRT-LLM PyTorch backend (tensorrt-llm-pytorch profile; generic engine beside it):")
    for kind, point in points("tensorrt-llm-pytorch", held_out=None):
        profiled = error(kind, point)
        generic = error(kind, point, engine="generic")
        mark = "H" if point.get("held_out") else " "
        print(f"  {kind:4} {mark} {point['id']:45} profile {profiled:+.1%}  generic {generic:+.1%}")


if __name__ == "__main__":
    main()
