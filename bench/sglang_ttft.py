"""SGLang's first token at one request: intercept and slope per run series (evidence, no model change).

Usage (from the repo root, quotacalc installed):

    python bench/sglang_ttft.py

Reads the SGLang points of tests/data/measurements/ttft.yaml. For each run series (same model, GPU, TP
and release) with two prompt lengths it fits TTFT = a + b x prompt through the mean TTFT at each length
(both the measured means and, where the source gives them, the medians of the notes are shown in
docs/accuracy.md), beside the model's own a and b (bench/accuracy.py's predict_ttft at the same two
lengths) and a per decoder layer. Then it compares three SGLang-only additions to the model's TTFT,
each fitted on the non-held-out SGLang points by the least mean absolute relative error and reported on
the held-out ones: a constant per request, a constant per decoder layer, and one decode step (the
model's own step at one request, no fitted constant). The model is priced at the defaults this evidence was
gathered under (docs/accuracy.md, "SGLang first tokens at one request"): no engine profile, a 5 ms request
overhead, no per-layer prefill cost.
"""

from __future__ import annotations

import statistics
from typing import Any

from accuracy import deployment_of, load, model_of, predict_ttft, resolve

#: The defaults before the SGLang profile and the per-layer prefill cost this evidence led to.
EARLIER = {"engine": "generic", "request_overhead_s": 0.005, "prefill_layer_overhead_s": 0.0, "mixed_prefill": True}


def layers(point: dict[str, Any]) -> int:
    return len(resolve(deployment_of(point)).arch.layers)


def series(points: list[dict[str, Any]]) -> dict[tuple, dict[int, list[dict[str, Any]]]]:
    groups: dict[tuple, dict[int, list[dict[str, Any]]]] = {}
    for point in points:
        key = (point["model"], point["gpu"], point["tp"], point["engine_version"])
        groups.setdefault(key, {}).setdefault(point["prompt_tokens"], []).append(point)
    return groups


def fit_line(lengths: dict[int, float]) -> tuple[float, float] | None:
    if len(lengths) < 2:
        return None
    (x0, y0), (x1, y1) = sorted(lengths.items())[0], sorted(lengths.items())[-1]
    slope = (y1 - y0) / (x1 - x0)
    return y0 - slope * x0, slope


def best_constant(points: list[dict[str, Any]], base: dict[str, float], weight) -> float:
    """The addition c x weight(point) (c on a 0.01 ms grid up to 300 ms) with the least mean absolute relative
    error; ``base`` holds each point's prediction, computed once."""

    def mae(c: float) -> float:
        return statistics.mean(abs(base[p["id"]] + c * weight(p) - p["ttft_s"]) / p["ttft_s"] for p in points)

    return min((step * 1e-5 for step in range(0, 30001)), key=mae)


def mae_pct(points: list[dict[str, Any]], base: dict[str, float], extra) -> float:
    return 100 * statistics.mean(abs(base[p["id"]] + extra(p) - p["ttft_s"]) / p["ttft_s"] for p in points)


def main() -> None:
    points = [p for p in load("ttft.yaml") if p["engine"] == "sglang"]
    # Each prediction resolves the model once: computed here, not inside the fits' loops.
    base = {p["id"]: predict_ttft(p, **EARLIER) for p in points}
    count_of = {p["id"]: layers(p) for p in points}
    step_of = {p["id"]: model_of(p, **EARLIER).step_time_s(1, p["prompt_tokens"]) for p in points}
    print("| series | layers | prompts | measured a (ms) | b (us/token) | a per layer (ms) | model a (ms) | model b |")
    print("|---|---:|---|---:|---:|---:|---:|---:|")
    for (model, gpu, tp, version), by_length in series(points).items():
        count = count_of[next(iter(by_length.values()))[0]["id"]]
        measured = {n: statistics.mean(p["ttft_s"] for p in ps) for n, ps in by_length.items()}
        predicted = {n: base[ps[0]["id"]] for n, ps in by_length.items()}
        prompts = " / ".join(f"{n:,}: {1e3 * t:.1f} ms" for n, t in sorted(measured.items()))
        line, model_line = fit_line(measured), fit_line(predicted)
        if line is None:
            n, t = next(iter(measured.items()))
            excess = t - predicted[n]
            print(
                f"| {model}, {gpu}, TP {tp}, {version} | {count} | {prompts} | (one length; excess over the model "
                f"{1e3 * excess:.1f} ms) | | {1e3 * excess / count:.2f} | {1e3 * predicted[n]:.1f} (at {n}) | |"
            )
            continue
        (a, b), (ma, mb) = line, model_line
        print(
            f"| {model}, {gpu}, TP {tp}, {version} | {count} | {prompts} | {1e3 * a:.1f} | {1e6 * b:.1f} | "
            f"{1e3 * a / count:.2f} | {1e3 * ma:.1f} | {1e6 * mb:.1f} |"
        )
    fit = [p for p in points if not p.get("held_out")]
    held = [p for p in points if p.get("held_out")]
    per_request = best_constant(fit, base, lambda p: 1)
    per_layer = best_constant(fit, base, lambda p: count_of[p["id"]])
    fit_tp8 = [p for p in fit if p["tp"] == 8]
    per_layer_tp8 = best_constant(fit_tp8, base, lambda p: count_of[p["id"]])

    def one_step(p: dict[str, Any]) -> float:
        return step_of[p["id"]]

    def by_layer(p: dict[str, Any]) -> float:
        return per_layer * count_of[p["id"]]

    def by_layer_tp8(p: dict[str, Any]) -> float:
        return per_layer_tp8 * count_of[p["id"]]

    print()
    print("| SGLang addition to the model's TTFT | fitted on | value | fit MAE | held-out MAE |")
    print("|---|---|---:|---:|---:|")
    rows = (
        ("none (the model as it is)", "-", "-", lambda p: 0.0),
        ("a constant per request", f"{len(fit)} points", f"{1e3 * per_request:.2f} ms", lambda p: per_request),
        ("a constant per decoder layer", f"{len(fit)} points", f"{1e3 * per_layer:.2f} ms", by_layer),
        ("one decode step (the model's, no constant)", "-", "-", one_step),
    )
    for label, fitted_on, value, extra in rows:
        print(
            f"| {label} | {fitted_on} | {value} | {mae_pct(fit, base, extra):.1f}% | {mae_pct(held, base, extra):.1f}% |"
        )
    held_tp8 = [p for p in held if p["tp"] == 8]
    print(
        f"| a constant per decoder layer, TP 8 points only | {len(fit_tp8)} points | {1e3 * per_layer_tp8:.2f} ms | "
        f"{mae_pct(fit_tp8, base, by_layer_tp8):.1f}% (TP 8) | {mae_pct(held_tp8, base, by_layer_tp8):.1f}% (TP 8) |"
    )
    print()
    print(
        "| point | set | layers | measured (ms) | model (ms) | + per layer (ms) | + per request (ms) | + one step (ms) |"
    )
    print("|---|---|---:|---:|---:|---:|---:|---:|")
    for p in points:
        model = base[p["id"]]
        print(
            f"| {p['id']} | {'held out' if p.get('held_out') else 'fit'} | {count_of[p['id']]} | {1e3 * p['ttft_s']:.1f} | "
            f"{1e3 * model:.1f} | {1e3 * (model + by_layer(p)):.1f} | {1e3 * (model + per_request):.1f} | "
            f"{1e3 * (model + one_step(p)):.1f} |"
        )


if __name__ == "__main__":
    main()
