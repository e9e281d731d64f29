"""Every figure is traceable: each explain step's substituted formula, evaluated, gives its value.

``--explain`` prints a formula with its numbers substituted; a reader checks a figure by redoing
that arithmetic. Here the arithmetic is redone for every step of price, size and kv on several
architectures (numbers in the text keep 4 significant digits, so within 0.5%). Steps whose text
describes rather than computes (a dtype mix, a layer count) are listed, and only those.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import pytest

from quotacalc import Deployment, Traffic, price, request_kv, resolve, size_traffic

#: Steps whose ``substituted`` text describes its inputs instead of spelling the arithmetic.
DESCRIPTIVE = {
    "kv_bytes_per_token",  # "80 layers, 81,920 values x 2 B (bf16)"
    "kv_bytes_per_token_per_gpu",  # "327,680 over TP 4"
    "state_bytes_per_sequence",  # "N values x 2 B (bf16)"
    "attention_flops_per_prompt_token",  # "mean over a 1,700-token prompt ..."
    "busiest_rank_experts_touched",  # "E/EP = 4, p = 0.68, EP = 2"
    "request_kv_bytes",  # "5,000 tokens, 131,072 B/token at long context"
    "request_kv_bytes_per_gpu",  # "TP 2"
    "max_load_batch",  # "requests of 1,700 + 128 tokens at their full length"
}

_ANNOTATION = re.compile(r"\(([a-z][^()]*)\)")  # "(bf16)", "(fp8)": a unit or dtype, not arithmetic
_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}\b)")


def evaluate(text: str) -> float:
    expression = _ANNOTATION.sub("", text)
    while _THOUSANDS.search(expression):
        expression = _THOUSANDS.sub("", expression)
    expression = expression.replace("×", "*").replace("−", "-").replace("^", "**").replace("E/EP", "")
    return float(
        eval(
            expression,
            {"__builtins__": {}},
            {"max": max, "min": min, "floor": math.floor, "ceil": math.ceil, "log2": math.log2},
        )
    )


CASES = {
    "llama-70b-fp8-tp4": (dict(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8"), 131_072),
    "llama-measured-pool": (
        dict(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_pool_tokens=646_503),
        2500,
    ),
    "mixtral-ep": (dict(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2, batch=4, expert_parallel=True), 5000),
    "mixtral-skew": (dict(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2, batch=16, expert_skew=1.2), 5000),
    "gpt-oss-windows": (dict(model="gpt-oss-120b", gpu="h100-sxm", kv_dtype="fp8", batch=32, context=2000), 100),
    "jamba-state": (dict(model="AI21-Jamba-1.5-Mini", gpu="h100-sxm", tp=2), 20_000),
    "deepseek-mla": (dict(model="DeepSeek-V3", gpu="h200", tp=8, batch=64, context=4000), 50_000),
    "compute-bound": (dict(model="Qwen3-8B", gpu="h100-sxm", batch=4096, context=16, kv_pool_tokens=200_000), 64),
    # Gemma 4 E4B keeps its per-layer input projections whole on every rank: a dense model whose weights per GPU are
    # more than weights / TP, which the roofline's read and the engine's must each say in their own terms.
    "gemma4-replicated": (
        dict(model=str(Path(__file__).parent / "data" / "configs" / "gemma4_e4b"), gpu="b200", tp=8, batch=16),
        4000,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_substituted_formulas_compute_their_values(case):
    deployment, context = CASES[case]
    replica = price(resolve(Deployment(**deployment)))
    sized = size_traffic(replica, Traffic(rps=3, prompt_tokens=1800, output_tokens=300, cached_fraction=0.25))
    kv = request_kv(replica, context)
    checked = 0
    for step in (*replica.steps, *sized.steps, *kv.steps):
        assert step.substituted.strip(), step.name
        if step.name in DESCRIPTIVE or (step.name == "expected_experts_touched" and "skew=" in step.substituted):
            continue  # a Zipf sum over E experts is described by its parameters
        try:
            value = evaluate(step.substituted)
        except (SyntaxError, NameError, TypeError, ZeroDivisionError) as error:
            pytest.fail(
                f"{step.name}: '{step.substituted}' is not arithmetic ({error}); list it in DESCRIPTIVE if meant"
            )
        assert value == pytest.approx(step.value, rel=0.005, abs=1e-12), (step.name, step.substituted, step.value)
        checked += 1
    assert checked >= 25


def test_every_step_names_a_figure_once_with_a_unit():
    replica = price(resolve(Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8")))
    names = [step.name for step in replica.steps]
    assert len(names) == len(set(names))
    results = replica.model_dump()
    for step in replica.steps:
        assert step.formula.strip() and step.unit is not None, step.name
        # A step that names a result field carries exactly that figure.
        if step.name in results and isinstance(results[step.name], (int, float)):
            assert step.value == pytest.approx(results[step.name]), step.name


def test_the_evaluator_itself():
    assert evaluate("2 × 70,553,706,496 / (4 × 1,979,000,000,000,000 (fp8) × 0.5)") == pytest.approx(
        3.5653e-05, rel=1e-4
    )
    assert evaluate("max(0.0153, 0.0001077)") == 0.0153
    assert evaluate("floor(1 / 0.203)") == 4 and evaluate("8 × (1 − (1 − 2/8)^4)") == pytest.approx(5.46875)
    with pytest.raises((NameError, SyntaxError)):
        evaluate("XX2 × 3XX")
