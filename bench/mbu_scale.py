"""Would a per-GPU memory-bandwidth scale help? (evidence for docs/accuracy.md; no model change)

Usage (from the repo root, quotacalc installed):

    python bench/mbu_scale.py

MFU is scaled per GPU by a measured matmul efficiency (``mfu_scale``). The same for memory would make the
decode read run at peak × MBU × (the GPU's measured share of its datasheet bandwidth / the H100 SXM's).
This script applies such a scale, from each public measurement table below, to every ITL and TTFT point of
``tests/data/measurements/`` (as an MBU override per point: 0.75 × scale, which is the same bandwidth) and
prints the fit-set and held-out mean absolute errors, overall and per GPU, beside the current defaults'. The MI300X's
all-reduce latency (36 us) was fitted at scale 1 on AMD's TP 8 table; with the MI300X scaled it is refitted
the same way (grid of 1 us on that table's non-held-out points), or the scale would be charged for a
latency fitted without it.
"""

from __future__ import annotations

import statistics
from typing import Any

from accuracy import load, measured_decode, predict_decode, predict_ttft

from quotacalc import resolve
from quotacalc.core.deployment import Deployment

#: Achieved share of the datasheet bandwidth, per catalog GPU, and where it was read (docs/accuracy.md,
#: *Memory bandwidth across GPUs*, quotes each figure).
BABELSTREAM_DOT = {
    # Azure/AI-benchmarking-guide@8fd0c6e1, Azure_Results/ND_*_results.md, 'HBM Bandwidth' (BabelStream, CUDA;
    # the MI300X's, HIP, from the fork samuel-bohman/AI-benchmarking-guide@2b25b696): Dot, a read-only kernel, TB/s.
    "h100-sxm": 3.18 / 3.35,
    "h200": 4.48 / 4.8,
    "a100-80gb-sxm": 1.75 / 2.039,
    "mi300x": 4.0 / 5.3,
}
#: ProjectPhysX/FluidX3D@8986874e README, single-GPU table, FP32/FP32 MLUPs/s: 153 B a cell update (read and
#: write), over the catalog's datasheet bandwidth.
FLUIDX3D = {
    "h100-sxm": 17602 * 153 / 3350e3,
    "h200": 23056 * 153 / 4800e3,
    "b200": 42152 * 153 / 7700e3,
    "h100-pcie": 11128 * 153 / 2000e3,
    "a100-80gb-sxm": 10228 * 153 / 2039e3,
    "a100-40gb-sxm": 8522 * 153 / 1555e3,
    "l40s": 3788 * 153 / 864e3,
    "l4": 1490 * 153 / 300e3,
    "mi300x": 22867 * 153 / 5300e3,
}
REFERENCE = "h100-sxm"
MI300X_TABLE = "rocm-vllm-mi300x-tp8"


def scales(shares: dict[str, float], only: tuple[str, ...] = ()) -> dict[str, float]:
    return {gpu: share / shares[REFERENCE] for gpu, share in shares.items() if not only or gpu in only}


def overrides(point: dict[str, Any], scale: dict[str, float], mi300x_latency_s: float | None) -> dict[str, Any]:
    # Deployment() rather than resolve(): MBU is a deployment field, and its default is what a point runs at.
    result: dict[str, Any] = {}
    if point["gpu"] in scale:
        result["mbu"] = Deployment.model_fields["mbu"].default * scale[point["gpu"]]
    if point["gpu"] == "mi300x" and mi300x_latency_s is not None:
        result["allreduce_latency_s"] = mi300x_latency_s
    return result


def errors(scale: dict[str, float], mi300x_latency_s: float | None) -> list[tuple[str, str, bool, float]]:
    """(group, GPU, held out, relative error) for every ITL and TTFT point."""
    out = []
    for point in load("decode_itl.yaml"):
        predicted = predict_decode(point, **overrides(point, scale, mi300x_latency_s))
        out.append(("ITL", point["gpu"], bool(point.get("held_out")), predicted / measured_decode(point) - 1))
    for point in load("ttft.yaml"):
        predicted = predict_ttft(point, **overrides(point, scale, mi300x_latency_s))
        out.append(("TTFT", point["gpu"], bool(point.get("held_out")), predicted / point["ttft_s"] - 1))
    return out


def refit_mi300x_latency(scale: dict[str, float]) -> float:
    """The MI300X all-reduce latency, 1 us grid over 10-60 us, minimising the decode MAE on the AMD table's
    non-held-out points at this scale (how the catalog's 36 us was fitted at scale 1)."""
    points = [p for p in load("decode_itl.yaml") if p.get("source") == MI300X_TABLE and not p.get("held_out")]

    def mae(latency_s: float) -> float:
        return statistics.mean(
            abs(predict_decode(p, **overrides(p, scale, latency_s)) / measured_decode(p) - 1) for p in points
        )

    return min((us * 1e-6 for us in range(10, 61)), key=mae)


def mean_abs(rows: list[tuple[str, str, bool, float]], group: str, held: bool, gpu: str | None = None) -> str:
    chosen = [abs(e) for g, row_gpu, h, e in rows if g == group and h == held and gpu in (None, row_gpu)]
    return f"{statistics.mean(chosen):6.2%} ({len(chosen):2d})" if chosen else f"{'-':>11s}"


def main() -> None:
    catalog_latency_s = resolve(Deployment(model="Llama-3.3-70B-Instruct", gpu="mi300x", tp=8)).gpu.allreduce_latency_s
    variants: list[tuple[str, dict[str, float]]] = [
        ("today (scale 1)", {}),
        ("BabelStream Dot", scales(BABELSTREAM_DOT)),
        ("FluidX3D", scales(FLUIDX3D)),
        ("FluidX3D, H200 only", scales(FLUIDX3D, only=("h200",))),
    ]
    results = []
    for name, scale in variants:
        latency_s = refit_mi300x_latency(scale) if "mi300x" in scale else None
        results.append((name, scale, latency_s, errors(scale, latency_s)))
    for name, scale, latency_s, _ in results:
        shown = ", ".join(f"{gpu} {value:.3f}" for gpu, value in sorted(scale.items()) if gpu != REFERENCE)
        latency = (
            f"; MI300X all-reduce {latency_s * 1e6:.0f} us (was {catalog_latency_s * 1e6:.0f})" if latency_s else ""
        )
        print(f"{name}: {shown or 'no scale'}{latency}")
    print()
    header = f"{'':22s}" + "".join(f"{name:>28s}" for name, *_ in results)
    print(header)
    for group in ("ITL", "TTFT"):
        for held, label in ((False, "fit"), (True, "held out")):
            line = "".join(f"{mean_abs(rows, group, held):>28s}" for *_, rows in results)
            print(f"{group + ' ' + label:22s}{line}")
    print("\nper GPU (fit set / held out)")
    gpus = sorted({gpu for *_, rows in results for _, gpu, _, _ in rows})
    for group in ("ITL", "TTFT"):
        for gpu in gpus:
            cells = [
                f"{mean_abs(rows, group, False, gpu)} / {mean_abs(rows, group, True, gpu)}" for *_, rows in results
            ]
            print(f"{group:5s}{gpu:17s}" + "".join(f"{cell:>28s}" for cell in cells))


if __name__ == "__main__":
    main()
