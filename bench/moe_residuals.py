"""Does a MoE model's decode residual follow its MoE layers? The evidence docs/accuracy.md gives for the two-point target.

Usage (from the repo root, quotacalc installed):

    python bench/moe_residuals.py

Part 1: every decode point of tests/data/measurements/decode_itl.yaml whose model has MoE layers, at the
defaults: its error, the gap per decode step (measured − predicted, in ms; positive: the engine is
slower than the model) and that gap per MoE layer (us), beside what could carry it: the MoE layers, the
experts and top-k, the width of one expert's slice on one GPU (moe intermediate / TP) and the engine.

Part 2: the candidate term, a fixed time per MoE layer per forward pass added to every step
(``step_overhead_s`` + x × MoE layers): the mean absolute error of the non-held-out MoE points, the
held-out ones (DeepSeek apart) and the held-out DeepSeek points, for x from 0 to 60 us, and the x that
minimises the fit points' error. A diagnostic only: nothing here changes a default. Dense models have no
MoE layers, so their figures cannot move.
"""

from __future__ import annotations

import statistics
from typing import Any

from accuracy import deployment_of, load, measured_decode, predict_decode

from quotacalc import resolve
from quotacalc.core.deployment import Deployment

STEP_OVERHEAD_S = Deployment.model_fields["step_overhead_s"].default


def moe_shape(point: dict[str, Any]) -> tuple[int, int, int, int]:
    """(MoE layers, experts, top-k, expert intermediate width) of the point's model; 0 layers if dense."""
    layers = resolve(deployment_of(point)).arch.moe_layers()
    if not layers:
        return 0, 0, 0, 0
    return len(layers), layers[0].num_experts, layers[0].top_k, layers[0].expert_intermediate_size


def error(point: dict[str, Any], per_moe_layer_s: float = 0.0) -> float:
    layers = moe_shape(point)[0]
    predicted = predict_decode(point, step_overhead_s=STEP_OVERHEAD_S + per_moe_layer_s * layers)
    return predicted / measured_decode(point) - 1


def gap_per_step_s(point: dict[str, Any]) -> float:
    """Measured − predicted time of one decode step (an e2e point's latency spread over its output)."""
    gap = measured_decode(point) - predict_decode(point)
    return gap if point["kind"] == "itl" else gap / point["output_tokens"]


def main() -> None:
    points = [(point, moe_shape(point)) for point in load("decode_itl.yaml")]
    moe = [(point, shape) for point, shape in points if shape[0] > 0]
    print(
        f"{'point':44s} {'set':4s} {'engine':22s} {'GPU':13s} {'TP':>2s} {'C/B':>4s} {'MoE L':>5s} {'E/k':>7s}"
        f" {'w/TP':>5s} {'error':>7s} {'gap ms':>7s} {'us/MoE L':>8s}"
    )
    for point, (layers, experts, top_k, width) in moe:
        gap = gap_per_step_s(point)
        engine = f"{point['engine']} {point.get('engine_version', '?')}"
        print(
            f"{point['id']:44s} {'H' if point.get('held_out') else 'fit':4s} {engine:22s} {point['gpu']:13s}"
            f" {point['tp']:2d} {point.get('concurrency', point.get('batch')):4d} {layers:5d}"
            f" {experts:3d}/{top_k:<3d} {width // point['tp']:5d} {error(point):+7.1%} {gap * 1e3:+7.2f}"
            f" {gap / layers * 1e6:+8.1f}"
        )
    fit = [p for p, _ in moe if not p.get("held_out")]
    held = [p for p, _ in moe if p.get("held_out") and p["model"] != "DeepSeek-V3"]
    deepseek = [p for p, _ in moe if p["model"] == "DeepSeek-V3"]
    print(
        f"\nA fixed time per MoE layer per forward pass (fit: {len(fit)} non-held-out MoE points;"
        f" held out: {len(held)}, DeepSeek apart; DeepSeek: {len(deepseek)}, all held out)"
    )
    print(f"{'x us':>5s} {'fit MAE':>8s} {'fit signed':>10s} {'held MAE':>9s} {'DeepSeek MAE':>12s} {'signed':>7s}")
    scan = []
    for per_layer_us in (0, 2, 4, 6, 8, 10, 12, 15, 20, 30, 45, 60):
        x = per_layer_us * 1e-6
        errors = {
            name: [error(p, x) for p in group] for name, group in (("fit", fit), ("held", held), ("ds", deepseek))
        }
        mae = {name: statistics.mean(abs(e) for e in values) for name, values in errors.items()}
        scan.append((mae["fit"], per_layer_us))
        print(
            f"{per_layer_us:5d} {mae['fit']:8.1%} {statistics.mean(errors['fit']):+10.1%} {mae['held']:9.1%}"
            f" {mae['ds']:12.1%} {statistics.mean(errors['ds']):+7.1%}"
        )
    best_mae, best_us = min(scan)
    print(f"best on the fit points: {best_us} us per MoE layer ({best_mae:.1%} MAE)")


if __name__ == "__main__":
    main()
