"""Fit the KV pool's runtime reserve on the vLLM start-up logs in tests/data/measurements/kv_pool.yaml.

Usage (from the repo root, quotacalc installed):

    python bench/fit_reserve.py

Only the points not marked held_out are used. Three steps, each printed with its data:

1. The sampler's bytes per logit, from the logs that give vLLM's profiling peak ('peak activation'):
   peak / (min(max_num_seqs, max_num_batched_tokens) × vocabulary), for each kind of top-k/top-p
   sampler the logs ran (the point's sampler_bytes_per_logit: 39 B where it sorts the vocabulary,
   15.4 B where it does not). It is the peak's whole story when the sampler's logits outgrow the
   forward pass's activations, as they do at vLLM's defaults.
2. The non-torch terms, from the vLLM 0.11 logs that give vLLM's 'non-torch memory' directly, in two
   forms: base + c × log2(TP) and base + c × (TP − 1) (the same through TP 2, apart above it). Logs
   of other versions are printed, not fitted (vLLM 0.18 raised its TP-1 figure from 0.13 to 0.25 GiB).
3. The same two terms fitted on every fit point's reserve, measured as memory_utilization × HBM −
   weights − available KV memory (vLLM's weights where the log gives them, else quotacalc's), less the
   modelled profiling peak: least absolute deviations over a grid, so one odd log cannot drag the fit.
   Each form's error on the pools and what it extrapolates to at TP 8 are printed.

The defaults in quotacalc/core/deployment.py come from step 2, checked against step 3 (docs/accuracy.md).

4. SGLang's logs (engine: sglang): SGLang keeps activations and CUDA graphs outside its static fraction, so
   the reserve is fraction × HBM − weights − KV outright; the sglang profile's reserve_base_gib is the mean
   over the TP 1 fit points (engines.yaml). Every SGLang point's pool error at the profile is printed.
"""

from __future__ import annotations

import math
import statistics
import sys
from pathlib import Path
from typing import Any

import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))

from accuracy import DATA, deployment_of

from quotacalc import price, resolve
from quotacalc.core import memory
from quotacalc.core.deployment import GIB

#: The vLLM version whose non-torch memory the defaults model (the fit logs' sampler constant was measured there too).
NON_TORCH_VERSION = "0.11"

FORMS = {"log2(TP)": lambda tp: math.log2(tp), "TP - 1": lambda tp: tp - 1}


def fit_points(engine: str = "generic") -> list[dict[str, Any]]:
    """The fit points of one engine's start-up logs (vLLM's without an engine key)."""
    points = yaml.safe_load((DATA / "kv_pool.yaml").read_text())["points"]
    return [point for point in points if not point.get("held_out") and point.get("engine", "generic") == engine]


def profile(point: dict[str, Any]) -> dict[str, float]:
    """quotacalc's view of a point: weights, budget, KV bytes per token, profiling peak terms (GiB)."""
    inputs = resolve(deployment_of(point))
    result = price(inputs)
    deployment, gpu, arch = inputs.deployment, inputs.gpu, inputs.arch
    reserve = memory.runtime_reserve(arch, deployment, gpu)
    seqs = min(memory.max_num_seqs(deployment, gpu), memory.max_num_batched_tokens(deployment, gpu))
    return {
        "budget": result.memory_utilization * gpu.memory_bytes / GIB,
        "weights": result.weight_bytes_per_gpu / GIB,
        "kv_per_token": memory.kv_bytes_per_token_per_gpu(arch, inputs.kv_dtype.bytes_per_element, deployment.tp),
        "activation": reserve.activation_bytes / GIB,
        "logits": seqs * arch.vocab_size,
        "per_logit": deployment.sampler_bytes_per_logit,
    }


def measured_reserve(point: dict[str, Any], view: dict[str, float]) -> float:
    """memory_utilization × HBM − weights − KV memory, GiB per GPU, from the log."""
    weights = point.get("weights_gib") or view["weights"]
    if point.get("available_kv_gib") is not None:
        kv = point["available_kv_gib"]
    else:
        kv = point["kv_pool_tokens"] * view["kv_per_token"] / GIB
    return view["budget"] - weights - kv


def main() -> None:
    points = fit_points()
    views = {point["id"]: profile(point) for point in points}

    print("1. sampler bytes per logit (profiling peak / (sequences × vocabulary)), by the sampler each log ran")
    per_logit: dict[float, list[float]] = {}
    for point in points:
        if point.get("torch_peak_gib") is None:
            continue
        view = views[point["id"]]
        value = point["torch_peak_gib"] * GIB / view["logits"]
        per_logit.setdefault(view["per_logit"], []).append(value)
        print(f"   {point['id']:40s} peak {point['torch_peak_gib']:5.2f} GiB  {value:5.1f} B/logit")
    for modelled, values in sorted(per_logit.items(), reverse=True):
        print(f"   mean {statistics.mean(values):.1f} B/logit over {len(values)} logs (quotacalc: {modelled:g})")

    print("2. non-torch memory by TP (vLLM's own figure; the vLLM 0.11 logs are fitted)")
    logged = []
    for point in points:
        if point.get("non_torch_gib") is None:
            continue
        fitted = str(point.get("vllm_version", "")).startswith(NON_TORCH_VERSION)
        print(
            f"   TP {point['tp']}: {point['non_torch_gib']:.2f} GiB  (vLLM {point.get('vllm_version')}{'' if fitted else ', not fitted'})"
        )
        if fitted:
            logged.append((point["tp"], point["non_torch_gib"]))
    base = statistics.mean(value for tp, value in logged if tp == 1)
    above = [(tp, value) for tp, value in logged if tp > 1]
    for name, f in FORMS.items():
        slope = statistics.mean((value - base) / f(tp) for tp, value in above)
        print(
            f"   base {base:.3f} + {slope:.3f} × {name}: TP 4 {base + slope * f(4):.2f}, TP 8 {base + slope * f(8):.2f} GiB"
        )

    print("3. base and TP terms fitted on the pools (least absolute deviation of the reserve, GiB)")
    rows = []
    for point in points:
        view = views[point["id"]]
        peak = max(view["activation"], view["logits"] * view["per_logit"] / GIB)
        reserve = measured_reserve(point, view)
        kv = view["budget"] - (point.get("weights_gib") or view["weights"]) - reserve
        rows.append((point, reserve - peak, kv))
        print(f"   {point['id']:40s} TP {point['tp']}  reserve {reserve:5.2f}  less peak {reserve - peak:5.2f} GiB")
    for name, f in FORMS.items():
        best = None
        for base_step in range(0, 101):
            for slope_step in range(0, 301):
                b, c = base_step / 100, slope_step / 100
                loss = sum(abs(rest - b - c * f(point["tp"])) for point, rest, _ in rows)
                if best is None or loss < best[0]:
                    best = (loss, b, c)
        _, b, c = best
        errors = [abs((rest - b - c * f(point["tp"])) / kv) for point, rest, kv in rows]
        print(
            f"   {name:8s}: base {b:.2f} + {c:.2f} × {name}; pool median abs error {statistics.median(errors):.1%}, "
            f"max {max(errors):.1%}; TP 8 term {b + c * f(8):.2f} GiB"
        )
        # The TP 1-2 logs fix both terms; only the TP 4 points can tell the forms apart.
        for point, rest, kv in rows:
            if point["tp"] > 2:
                print(f"      {point['id']:37s} pool error {(rest - b - c * f(point['tp'])) / kv:+.1%}")

    print("4. SGLang: reserve = mem_fraction_static × HBM − weights − KV (GiB per GPU), TP 1 fit points averaged")
    implied = []
    for point in fit_points("sglang"):
        view = profile(point)
        reserve = measured_reserve(point, view)
        print(f"   {point['id']:40s} TP {point['tp']}  reserve {reserve:5.2f} GiB")
        if point["tp"] == 1:
            implied.append(reserve)
    print(f"   mean over TP 1: {statistics.mean(implied):.2f} GiB (the sglang profile's reserve_base_gib)")
    every = [p for p in yaml.safe_load((DATA / "kv_pool.yaml").read_text())["points"] if p.get("engine") == "sglang"]
    for point in every:
        result = price(resolve(deployment_of(point)))
        held = " (held out)" if point.get("held_out") else ""
        print(f"   {point['id']:40s} pool {result.kv_pool_tokens / point['kv_pool_tokens'] - 1:+.1%}{held}")


if __name__ == "__main__":
    main()
