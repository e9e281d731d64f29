"""The calibration target on real runs: "calibrated on two points of a deployment, its other points within 5%".

The measurements are NVIDIA NIM's published runs (tests/data/measurements/decode_itl.yaml and ttft.yaml,
each with its source). The two points are chosen by a rule fixed before looking at the errors, the one a
user sweeping concurrency would run, never the best pair found by search:

- the workload shape (prompt/output lengths) whose highest-concurrency run is the highest among the
  deployment's fit points (held-out points are never fitted);
- its concurrency-1 run (ITL, and the TTFT of that prompt length) and that highest-concurrency run (ITL);
- ``calibrate``'s default parameters (what the two runs determine).

Every other point of the deployment, fit and held out, is then predicted. The target is met where it is
(asserted within 5%); where it is not, the misses are the ones docs/accuracy.md ("Calibrated on two
points") lists, each within the bound stated there, so a change to the model that moves them fails here
and the page is updated with it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
import yaml

from quotacalc.core.calibrate import BenchmarkPoint, calibrate, predictions
from quotacalc.core.deployment import Deployment

# bench/two_point.py: the rule on every measured deployment, and how a measurement becomes a calibrate run.
sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
import two_point

DATA = Path(__file__).parent / "data" / "measurements"
TARGET = 0.05
#: docs/accuracy.md's misses: point id -> the largest |error| the page states for it.
KNOWN_MISSES = {
    "Llama-3.3-70B-Instruct": {
        "nim-70b-tp2-200-200-c50": 0.07,
        "nim-70b-tp2-ttft-5000": 0.13,
        "nim-70b-tp2-ttft-20000": 0.15,
    },
    "Llama-3.1-8B-Instruct": {
        "nim-8b-tp1-1000-1000-c25": 0.065,
        "nim-8b-tp1-5000-500-c5": 0.11,
        "nim-8b-tp1-ttft-1000": 0.12,
        "nim-8b-tp1-ttft-5000": 0.09,
    },
}
DEPLOYMENTS = {
    "Llama-3.3-70B-Instruct": Deployment(
        model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=2, weight_dtype="fp8", kv_dtype="fp8"
    ),
    "Llama-3.1-8B-Instruct": Deployment(
        model="Llama-3.1-8B-Instruct", gpu="h100-sxm", tp=1, weight_dtype="fp8", kv_dtype="fp8"
    ),
}


def _points(model: str) -> list[tuple[str, bool, BenchmarkPoint]]:
    """(id, held out, point) for every NIM ITL and TTFT measurement of ``model``."""
    itl = yaml.safe_load((DATA / "decode_itl.yaml").read_text(encoding="utf-8"))["points"]
    ttft = yaml.safe_load((DATA / "ttft.yaml").read_text(encoding="utf-8"))["points"]
    out = []
    for entry in itl:
        if entry["model"] == model and entry["kind"] == "itl" and entry["source"] == "nim-1.0":
            out.append((entry["id"], entry.get("held_out", False), two_point.benchmark_point(entry)))
    for entry in ttft:
        if entry["model"] == model and entry["source"] == "nim-1.0":
            point = two_point.benchmark_point({**entry, "kind": "ttft"})
            out.append((entry["id"], entry.get("held_out", False), point))
    return out


def two_point_rule(points: list[tuple[str, bool, BenchmarkPoint]]) -> tuple[list[str], list[BenchmarkPoint]]:
    """The module docstring's rule: the ids used and the two runs to calibrate on."""
    fit_itl = [(ident, point) for ident, held_out, point in points if not held_out and point.itl_s is not None]
    high_id, high = max(fit_itl, key=lambda item: item[1].concurrency)
    low_id, low = next(
        (ident, point)
        for ident, point in fit_itl
        if point.concurrency == 1
        and (point.prompt_tokens, point.output_tokens) == (high.prompt_tokens, high.output_tokens)
    )
    ttft_id, ttft = next(
        (ident, point)
        for ident, held_out, point in points
        if not held_out and point.ttft_s is not None and point.prompt_tokens == high.prompt_tokens
    )
    return [low_id, high_id, ttft_id], [low.model_copy(update={"ttft_s": ttft.ttft_s}), high]


@pytest.mark.parametrize("model", list(DEPLOYMENTS))
def test_two_runs_predict_the_deployments_other_points(model):
    from quotacalc.inputs.resolve import resolve

    inputs = resolve(DEPLOYMENTS[model])
    points = _points(model)
    used, runs = two_point_rule(points)
    # The rule picks, for both deployments, a sweep's first and last run of one workload.
    assert runs[0].concurrency == 1 and runs[1].concurrency > 1 and runs[0].ttft_s is not None
    result = calibrate(inputs, runs)
    values = {parameter.name: parameter.after for parameter in result.parameters}
    others = [(ident, point) for ident, _, point in points if ident not in used]
    predicted = predictions(inputs, values, [point for _, point in others])
    errors = {
        ident: value / next(iter(point.measured().values())) - 1
        for (ident, point), value in zip(others, predicted, strict=True)
    }
    misses = {ident for ident, error in errors.items() if abs(error) > TARGET}
    assert misses == set(KNOWN_MISSES[model]), {ident: f"{errors[ident]:+.1%}" for ident in misses}
    for ident, bound in KNOWN_MISSES[model].items():
        assert abs(errors[ident]) <= bound, (ident, errors[ident])
    # Within the target: the rest, most of the deployment's points.
    assert len(errors) - len(misses) >= len(errors) // 2


#: bench/two_point.py's table in docs/accuracy.md ("Two points on every measured deployment"): deployment ->
#: (other points within 5% calibrated, other points, the worst calibrated |error| the page states, rounded up).
EVERY_DEPLOYMENT = {
    "nim-1.0: Llama-3.3-70B-Instruct on 2x h100-sxm (fp8/fp8)": (10, 15, 0.13),
    "nim-1.0: Llama-3.1-8B-Instruct on 1x h100-sxm (fp8/fp8)": (8, 12, 0.12),
    "inference-bench: Qwen2.5-7B-Instruct on 1x l4 (bf16/bf16)": (4, 4, 0.02),
    "inference-bench: Qwen2.5-7B-Instruct on 1x a100-40gb-sxm (bf16/bf16)": (1, 1, 0.04),
    "silybench-h100: Qwen3-8B on 1x h100-sxm (bf16/bf16)": (4, 4, 0.03),
    "silybench-h100: Qwen3-8B on 1x h100-sxm (fp8/bf16)": (2, 5, 0.29),
    "trtllm-5929-h200: DeepSeek-V3 on 8x h200 (fp8/bf16)": (0, 2, 0.47),
    "inferencex-870-h200: DeepSeek-V3 on 8x h200 (fp8/bf16)": (2, 2, 0.04),
    "inferencex-828-h100: gpt-oss-120b on 8x h100-sxm (auto/bf16)": (7, 9, 0.08),
    "inferencex-828-h100: gpt-oss-120b on 4x h100-sxm (auto/bf16)": (1, 4, 0.40),
    "inferencex-app-fixture: DeepSeek-V3 on 8x b200 (fp8/bf16)": (2, 3, 0.09),
    "inferencex-app-fixture: DeepSeek-V3 on 8x h200 (fp8/bf16)": (6, 13, 0.11),
    "sglcb-qwen3-b200: Qwen3-235B-A22B on 8x b200 (bf16/bf16)": (4, 9, 0.18),
    "gpustack-qwen3-8b-h100: Qwen3-8B on 1x h100-sxm (bf16/bf16)": (2, 2, 0.02),
}
#: Deployments whose points hold one workload at one concurrency: no pair to calibrate on.
NO_PAIR = {
    "sglcb-dsr1-b200: DeepSeek-V3 on 8x b200 (fp8/bf16)",
    "sglcb-dsv31-mi300x: DeepSeek-V3 on 8x mi300x (fp8/bf16)",
}


def test_two_runs_on_every_measured_deployment_as_the_page_states():
    """The same question asked of every deployment with four or more measured points, by bench/two_point.py's
    rule: the dense vLLM deployments meet the target (every other point within 5%); NIM's, the MoE ones on vLLM,
    SGLang and TensorRT-LLM's PyTorch backend, and vLLM's blockwise-FP8 first tokens do not, as the page says."""
    results = dict(two_point.outcomes(min_points=4))
    assert {label for label, outcome in results.items() if outcome is None} == NO_PAIR
    got = {label: (outcome.within, len(outcome.errors)) for label, outcome in results.items() if outcome is not None}
    assert got == {label: (within, n) for label, (within, n, _) in EVERY_DEPLOYMENT.items()}
    for label, (_, _, bound) in EVERY_DEPLOYMENT.items():
        worst = max(abs(after) for _, after in results[label].errors.values())
        assert worst <= bound, (label, worst)
    # Where the model's shape is the engine's (dense models on vLLM), two runs do what the issue asks.
    dense_vllm = [label for label in EVERY_DEPLOYMENT if results[label].engine == "vllm" and "gpt-oss" not in label]
    met = [label for label in dense_vllm if results[label].within == len(results[label].errors)]
    assert set(dense_vllm) - set(met) == {"silybench-h100: Qwen3-8B on 1x h100-sxm (fp8/bf16)"}
