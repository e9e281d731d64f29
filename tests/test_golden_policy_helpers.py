"""Small rules of the canonical policy, checked case by case: the model name clients send, the KV
cache dtype an engine is started with, and rounding up that forgives float noise only."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from quotacalc.catalog.dtypes import DTYPES
from quotacalc.core.policy import _ceil, _engine, _kv_cache_dtype, _served_model_name, pool_max_context_tokens


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


def _replica(kv_flag, kv_dtype, checkpoint="bf16"):
    return SimpleNamespace(
        inputs=SimpleNamespace(
            deployment=SimpleNamespace(kv_dtype=kv_flag),
            kv_dtype=kv_dtype,
            arch=SimpleNamespace(checkpoint_dtype=checkpoint),
        )
    )


def test_kv_cache_dtype_in_vllm_names():
    assert _kv_cache_dtype(_replica(None, DTYPES["bf16"])) == "auto"
    assert _kv_cache_dtype(_replica("auto", DTYPES["bf16"])) == "auto"
    assert _kv_cache_dtype(_replica("bf16", DTYPES["bf16"])) == "bfloat16"
    assert _kv_cache_dtype(_replica("fp16", DTYPES["fp16"])) == "float16"
    assert _kv_cache_dtype(_replica("fp8", DTYPES["fp8"])) == "fp8"
    assert _kv_cache_dtype(_replica("fp32", DTYPES["fp32"])) == "fp32"
    # No --kv-dtype, but the model's cache is kept in another dtype than the checkpoint's (DeepSeek V4's fp8):
    # vLLM's 'auto' would mean the checkpoint's, so the setting names it.
    assert _kv_cache_dtype(_replica(None, DTYPES["fp8"], checkpoint="bf16")) == "fp8"
    # A named FP8 format is priced as FP8 (one byte) but kept: vLLM's 'fp8' alone means e4m3.
    for given, written in (
        ("fp8_e5m2", "fp8_e5m2"),
        ("E5M2", "fp8_e5m2"),
        ("fp8_e4m3", "fp8_e4m3"),
        ("e4m3", "fp8_e4m3"),
    ):
        assert _kv_cache_dtype(_replica(given, DTYPES["fp8"])) == written


def test_an_e5m2_cache_reaches_both_engines_files():
    from quotacalc.exporters.sglang import KV_CACHE_DTYPES

    # SGLang's choices take vLLM's name of the format as they are.
    assert KV_CACHE_DTYPES["fp8_e5m2"] == "fp8_e5m2" and KV_CACHE_DTYPES["fp8_e4m3"] == "fp8_e4m3"


def test_ceil_forgives_only_float_noise():
    assert _ceil(2.0) == 2 and _ceil(2.0 + 1e-12) == 2 and _ceil(2.000001) == 3
    # The tolerance scales with the value: 1e-9 relative above 1, 1e-9 absolute below.
    assert _ceil(1e6 + 1e-4) == 1_000_000 and _ceil(1e6 + 1e-2) == 1_000_001
    assert _ceil(0.5) == 1 and _ceil(1.5e-9) == 1 and _ceil(0.5e-9) == 0


def _pool_and_replica(*, model_max, pool_tokens, resident, batch=64, max_num_seqs=None, max_model_len=None):
    deployment = SimpleNamespace(
        model="org/model",
        serve_model=None,
        tp=2,
        batch=batch,
        max_num_seqs=max_num_seqs,
        max_model_len=max_model_len,
        max_num_batched_tokens=4096,
        memory_utilization=0.9,
        kv_dtype=None,
        weight_dtype=None,
        expert_parallel=False,
        state_dtype=None,
    )
    replica = SimpleNamespace(
        inputs=SimpleNamespace(
            arch=SimpleNamespace(max_context_tokens=model_max, checkpoint_dtype="bf16"),
            deployment=deployment,
            gpu=None,
            kv_dtype=SimpleNamespace(name="bf16"),
            checkpoint_quantization=None,
            hub_id=None,
        ),
        kv_pool_tokens=pool_tokens,
        max_resident_sequences=resident,
        memory_utilization=0.9,
    )
    return SimpleNamespace(deployment=deployment), replica


def test_pool_max_context_is_the_model_maximum_within_the_pool():
    _, replica = _pool_and_replica(model_max=131_072, pool_tokens=40_000, resident=8)
    assert pool_max_context_tokens(replica) == 40_000  # the pool holds less than the model allows
    _, replica = _pool_and_replica(model_max=8_192, pool_tokens=40_000, resident=8)
    assert pool_max_context_tokens(replica) == 8_192
    # A config that states no maximum: the pool is the only limit.
    _, replica = _pool_and_replica(model_max=None, pool_tokens=40_000, resident=8)
    assert pool_max_context_tokens(replica) == 40_000
    # The engine's --max-model-len, below both, is the limit.
    _, replica = _pool_and_replica(model_max=131_072, pool_tokens=40_000, resident=8, max_model_len=32_768)
    assert pool_max_context_tokens(replica) == 32_768


def test_engine_batch_is_the_priced_batch_within_the_pool_and_never_zero():
    # The pool holds one sequence at the mean context: the engine runs one, not the priced 64.
    pool, replica = _pool_and_replica(model_max=8_192, pool_tokens=9_000, resident=1)
    engine = _engine(pool, replica, [])
    assert engine.max_num_seqs == 1
    assert engine.max_model_len == 8_192 and engine.max_num_batched_tokens == 4096
    # None resident (a context longer than the pool at the mean): still one sequence, not zero.
    pool, replica = _pool_and_replica(model_max=8_192, pool_tokens=9_000, resident=0)
    assert _engine(pool, replica, []).max_num_seqs == 1
    # The deployment's own max_num_seqs caps it too.
    pool, replica = _pool_and_replica(model_max=8_192, pool_tokens=900_000, resident=300, max_num_seqs=32)
    assert _engine(pool, replica, []).max_num_seqs == 32


@pytest.mark.parametrize(
    ("weight_dtype", "checkpoint_quantization", "loading"),
    [
        (None, None, {}),  # the checkpoint's weights as they are
        ("bf16", None, {}),
        ("fp16", None, {}),  # a 16-bit cast is the engine's --dtype, not a quantization
        ("fp32", None, {}),
        ("fp8", None, {"quantization": "fp8"}),  # vLLM's and SGLang's online FP8 quantize a bf16 checkpoint at load
        ("float8_e4m3fn", None, {"quantization": "fp8"}),
        ("fp8", "compressed-tensors", {}),  # a quantized checkpoint: the engine reads its own method
        ("int4", None, {"checkpoint_weight_dtype": "int4"}),  # no load flag makes AWQ/GPTQ weights
        ("nvfp4", None, {"checkpoint_weight_dtype": "nvfp4"}),
        ("int4", "awq", {}),
        ("fp8", "mxfp4", {"checkpoint_weight_dtype": "fp8"}),  # gpt-oss loads MXFP4 whatever the price assumed
        ("mxfp4", "mxfp4", {}),
    ],
)
def test_how_the_engine_gets_the_priced_weights(weight_dtype, checkpoint_quantization, loading):
    from quotacalc.core.policy import _weight_loading

    _, replica = _pool_and_replica(model_max=8_192, pool_tokens=9_000, resident=1)
    replica.inputs.deployment.weight_dtype = weight_dtype
    replica.inputs.checkpoint_quantization = checkpoint_quantization
    assert _weight_loading(replica) == loading


def test_a_16_bit_cast_of_a_16_bit_checkpoint_is_no_quantization():
    from quotacalc.core.policy import _weight_loading

    _, replica = _pool_and_replica(model_max=8_192, pool_tokens=9_000, resident=1)
    replica.inputs.arch.checkpoint_dtype = "fp16"
    replica.inputs.deployment.weight_dtype = "bf16"
    assert _weight_loading(replica) == {}
