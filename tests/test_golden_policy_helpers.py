"""Small rules of the canonical policy, checked case by case: the model name clients send, the KV
cache dtype an engine is started with, and rounding up that forgives float noise only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from quotacalc.catalog.dtypes import DTYPES
from quotacalc.core.policy import _ceil, _kv_cache_dtype, _served_model_name


@pytest.mark.parametrize(
    ("model", "served"),
    [
        ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.3-70B-Instruct"),  # a hub id, as clients send it
        ("Llama-3.3-70B-Instruct", "Llama-3.3-70B-Instruct"),
        ("/models/llama-70b/", "llama-70b"),  # a path: its last component
        ("/llama", "llama"),
        ("./checkpoints/llama", "llama"),
        ("~/models/qwen", "qwen"),
        ("mnt/models/qwen", "qwen"),  # two slashes cannot be a hub id
    ],
)
def test_served_model_name(model, served):
    assert _served_model_name(model) == served


def _replica(kv_flag, kv_dtype):
    return SimpleNamespace(inputs=SimpleNamespace(deployment=SimpleNamespace(kv_dtype=kv_flag), kv_dtype=kv_dtype))


def test_kv_cache_dtype_in_vllm_names():
    assert _kv_cache_dtype(_replica(None, DTYPES["bf16"])) == "auto"
    assert _kv_cache_dtype(_replica("auto", DTYPES["bf16"])) == "auto"
    assert _kv_cache_dtype(_replica("bf16", DTYPES["bf16"])) == "bfloat16"
    assert _kv_cache_dtype(_replica("fp16", DTYPES["fp16"])) == "float16"
    assert _kv_cache_dtype(_replica("fp8", DTYPES["fp8"])) == "fp8"
    assert _kv_cache_dtype(_replica("fp32", DTYPES["fp32"])) == "fp32"


def test_ceil_forgives_only_float_noise():
    assert _ceil(2.0) == 2 and _ceil(2.0 + 1e-12) == 2 and _ceil(2.000001) == 3
    # The tolerance scales with the value: 1e-9 relative above 1, 1e-9 absolute below.
    assert _ceil(1e6 + 1e-4) == 1_000_000 and _ceil(1e6 + 1e-2) == 1_000_001
    assert _ceil(0.5) == 1 and _ceil(1.5e-9) == 1 and _ceil(0.5e-9) == 0
