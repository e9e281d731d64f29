"""MFU across GPUs and dtypes: the GPU catalog's measured matmul efficiency scales the stated MFU.

Golden figures are the catalog's cited MAMF table (stas00/ml-engineering, 'Maximum Achievable Matmul FLOPS
comparison table'): A100 SXM BF16 271.2 of 312 TFLOPS (86.9%), H100 SXM BF16 794.5 of 989 (80.3%) and FP8
1,402.6 of 1,979 (70.9%), MI300X BF16 668.4 of 1,300 (51.4%). MFU is stated on the H100 SXM at FP8.
"""

from __future__ import annotations

import copy

import pytest

from quotacalc import Deployment, price, resolve
from quotacalc.catalog.entries import load_shipped_yaml
from quotacalc.catalog.gpus import load_gpu_catalog, parse_catalog
from quotacalc.errors import QuotacalcError

LLAMA8_ACTIVE = 8_030_261_248  # transformers' count of Llama 3.1 8B (tests/data/reference_params.json)


def _scale(gpu: str, dtype: str) -> float:
    catalog = load_gpu_catalog()
    return catalog.mfu_scale(catalog.get(gpu), dtype)


@pytest.mark.parametrize(
    ("gpu", "dtype", "expected"),
    [
        ("h100-sxm", "fp8", 1.0),  # the reference: the method's worked example does not move
        ("h100-sxm", "bf16", 0.803 / 0.709),
        ("h200", "fp8", 0.734 / 0.709),
        ("a100-80gb-sxm", "bf16", 0.869 / 0.709),
        ("a100-40gb-sxm", "fp16", 0.869 / 0.709),
        ("mi300x", "bf16", 0.514 / 0.709),
        ("l40s", "fp8", 1.0),  # no measurement: the stated MFU as it is
        ("h100-sxm", "int8", 1.0),
    ],
)
def test_the_scale_is_the_gpus_matmul_efficiency_over_the_references(gpu, dtype, expected):
    assert _scale(gpu, dtype) == pytest.approx(expected, rel=1e-12)


def test_an_a100s_prompt_token_runs_at_its_scaled_mfu_by_hand():
    # Llama 3.1 8B BF16 on one A100 80GB: 2 x 8,030,261,248 FLOPs / (312e12 x 0.5 x 0.869 / 0.709).
    result = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="a100-80gb-sxm")))
    assert result.mfu_scale == pytest.approx(0.869 / 0.709)
    assert result.prompt_token_s == pytest.approx(2 * LLAMA8_ACTIVE / (312e12 * 0.5 * 0.869 / 0.709), rel=1e-12)


def test_the_reference_keeps_the_method_example():
    # docs/method.md's worked example: Llama 3.3 70B FP8, TP 4 on H100: 2 x 70,553,706,496 / (4 x 1,979e12 x 0.5).
    result = price(
        resolve(Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="bf16"))
    )
    assert result.mfu_scale == 1.0
    assert result.prompt_token_s == pytest.approx(2 * 70_553_706_496 / (4 * 1979e12 * 0.5), rel=1e-12)


@pytest.mark.parametrize(
    ("gpu", "substituted", "value"),
    [("a100-80gb-sxm", "0.869 / 0.709", 0.869 / 0.709), ("l40s", "1", 1.0)],
)
def test_the_explain_step_shows_the_ratio_or_one(gpu, substituted, value):
    # The L40S has no measured matmul efficiency: the step says 1, and why.
    result = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu=gpu)))
    step = next(step for step in result.steps if step.name == "mfu_scale")
    assert step.substituted == substituted
    assert step.value == pytest.approx(value)
    assert ("no measured bf16 matmul efficiency" in step.note) == (gpu == "l40s")


def test_an_explicit_mfu_is_scaled_too():
    # --mfu is in the reference's units on every GPU: doubling it halves the A100's prompt-token time exactly.
    base = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="a100-80gb-sxm", mfu=0.4)))
    double = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="a100-80gb-sxm", mfu=0.8)))
    assert base.prompt_token_s == pytest.approx(2 * double.prompt_token_s, rel=1e-12)
    assert base.prompt_token_s == pytest.approx(2 * LLAMA8_ACTIVE / (312e12 * 0.4 * 0.869 / 0.709), rel=1e-12)


def _shipped() -> dict:
    from pathlib import Path

    import quotacalc.catalog.gpus as gpus

    return copy.deepcopy(load_shipped_yaml(Path(gpus.__file__).with_name(gpus.CATALOG_FILE)))


def _break(document: dict, change) -> dict:
    change(document)
    return document


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (lambda d: d["gpus"]["a100-80gb-sxm"]["matmul_efficiency"].update(bf16=1.3), "share of the peak in (0, 1]"),
        (lambda d: d["gpus"]["a100-80gb-sxm"]["matmul_efficiency"].update(bf16=0), "share of the peak in (0, 1]"),
        (lambda d: d["gpus"]["a100-80gb-sxm"]["matmul_efficiency"].update(fp8=0.7), "no dense_tflops for fp8"),
        (lambda d: d["gpus"]["a100-80gb-sxm"]["sources"].pop("matmul_efficiency"), "needs sources.matmul_efficiency"),
        (lambda d: d.pop("mfu_reference"), "mfu_reference"),
        (lambda d: d["mfu_reference"].update(gpu="h999"), "h999 has no matmul_efficiency"),
        (lambda d: d["mfu_reference"].update(dtype="int8"), "no matmul_efficiency for int8"),
        (lambda d: d["mfu_reference"].pop("dtype"), "must hold gpu and dtype"),
    ],
)
def test_a_bad_catalog_names_its_field(change, expected):
    with pytest.raises(QuotacalcError) as raised:
        parse_catalog(_break(_shipped(), change), "gpus.yaml")
    assert expected in str(raised.value)
    assert "gpus.yaml" in str(raised.value)
