"""quotacalc's decode step beside the kernel floor bench/kernel_floor.py measured (bench/data/kernel_floor_h200.json).

Usage (from the repo root, quotacalc installed; no GPU needed):

    python bench/kernel_floor_compare.py [--markdown] [--data bench/data/kernel_floor_h200.json]

For every measured step it prints the floor (plain kernels under a CUDA graph: no scheduler, sampler or
all-reduce), quotacalc's roofline step at the default MBU (``engine_decode_step_s``: the weights and KV an
engine reads over MBU x the GPU's bandwidth) and quotacalc's engine step less its all-reduces (the floor ran on
one GPU): the step overhead and each sequence's overhead included. Then a least-squares fit of the floor's
batch-1 steps to bytes / bandwidth + layers x a per-layer cost, the decomposition docs/accuracy.md discusses.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from quotacalc import Deployment, price, resolve
from quotacalc.core.replica import replica_model

DATA = Path(__file__).resolve().parent / "data" / "kernel_floor_h200.json"
MODELS = {"llama-3.1-8b": "Llama-3.1-8B-Instruct", "llama-3.3-70b": "Llama-3.3-70B-Instruct"}


def quotacalc_steps(row: dict) -> tuple[float, float]:
    """(roofline step, engine step less all-reduces), seconds, for one measured configuration on an H200."""
    deployment = Deployment(
        model=MODELS[row["model"]],
        gpu="h200",
        tp=row["tp"],
        weight_dtype=None if row["weight_dtype"] == "bf16" else row["weight_dtype"],
        kv_dtype="bf16",
        batch=row["batch"],
        context=row["context"],
    )
    inputs = resolve(deployment)
    model = replica_model(inputs, price(inputs).kv_pool_bytes_per_gpu)
    roofline = model.engine_decode_step_s(row["batch"], row["context"])
    engine = model.step_time_s(row["batch"], row["context"]) - model.allreduce_s(row["batch"])
    return roofline, engine


def per_layer_fit(rows: list[dict]) -> tuple[float, float]:
    """(bytes per second, seconds per layer) of step = bytes / bandwidth + layers x per-layer cost, least squares
    over the batch-1 steps at 1,024 tokens (weights are nearly all their bytes; at 8,192 tokens PyTorch's
    attention, which does not split a sequence's KV over the GPU, is slow at batch 1)."""
    ones = [row for row in rows if row["batch"] == 1 and row["context"] == 1024]
    # Two unknowns, no intercept: solve the 2x2 normal equations by hand (no numpy in quotacalc's install).
    xs = [((row["weight_bytes"] + row["kv_bytes"]), row["layers"]) for row in ones]
    ys = [row["step_ms"] / 1e3 for row in ones]
    s_bb = sum(b * b for b, _ in xs)
    s_bl = sum(b * layers for b, layers in xs)
    s_ll = sum(layers * layers for _, layers in xs)
    s_by = sum(b * y for (b, _), y in zip(xs, ys, strict=True))
    s_ly = sum(layers * y for (_, layers), y in zip(xs, ys, strict=True))
    det = s_bb * s_ll - s_bl * s_bl
    seconds_per_byte = (s_by * s_ll - s_ly * s_bl) / det
    seconds_per_layer = (s_bb * s_ly - s_bl * s_by) / det
    return 1 / seconds_per_byte, seconds_per_layer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA)
    parser.add_argument("--markdown", action="store_true")
    args = parser.parse_args()
    try:
        data = json.loads(args.data.read_text())
    except (OSError, ValueError) as error:
        parser.error(f"--data {args.data}: {error}; give a run of bench/kernel_floor.py")
    rows = data["decode"]
    header = ("model", "TP", "weights", "batch", "context", "floor ms", "roofline ms", "engine ms", "engine/floor")
    lines = []
    for row in rows:
        roofline, engine = quotacalc_steps(row)
        lines.append(
            (
                row["model"],
                str(row["tp"]),
                row["weight_dtype"],
                str(row["batch"]),
                str(row["context"]),
                f"{row['step_ms']:.2f}",
                f"{roofline * 1e3:.2f}",
                f"{engine * 1e3:.2f}",
                f"{engine / (row['step_ms'] / 1e3):.2f}",
            )
        )
    bandwidth, per_layer = per_layer_fit(rows)
    fit = (
        f"batch-1 steps at 1,024 tokens fitted to bytes / bandwidth + layers x cost: {bandwidth / 1e12:.2f} TB/s "
        f"({bandwidth / 4.8e12:.0%} of the H200's 4.8 TB/s) and {per_layer * 1e6:.0f} us a layer"
    )
    if args.markdown:
        print("| " + " | ".join(header) + " |")
        print("|" + "---|" * 5 + "---:|" * 4)
        for line in lines:
            print("| " + " | ".join(line) + " |")
        print(f"\n{data['device']}, PyTorch {data['torch']}, CUDA {data['cuda']}: {fit}.")
        return
    print(f"{data['device']}: plain read {data['stream']['read_bytes_per_s'] / 1e12:.2f} TB/s")
    for line in lines:
        print("  ".join(f"{cell:>12}" for cell in line))
    print(fit)


if __name__ == "__main__":
    main()
