"""vLLM's hybrid KV cache manager, by hand from its code (core/kv_groups.py; vllm-project/vllm at
001cabc1be16a59a70d720ed61a13b678c060a18: v1/core/kv_cache_utils.py, v1/kv_cache_interface.py,
model_executor/models/config.py), and against the start-up logs that print its figures."""

from __future__ import annotations

import pytest

from quotacalc import Deployment, price, resolve
from quotacalc.core.kv_groups import (
    CacheKind,
    CacheType,
    TokenCountRule,
    hybrid_layout,
    kv_group_layout,
)
from quotacalc.core.memory import GIB
from quotacalc.errors import QuotacalcError

QWEN3_NEXT = "tests/data/configs/qwen3_next/config.json"
QWEN3_5_MOE = "tests/data/configs/qwen3_5_moe/config.json"


def layout_of(model: str, tp: int, kv_dtype: str | None = None, state_dtype: str | None = None):
    inputs = resolve(Deployment(model=model, gpu="h100-sxm", tp=tp, kv_dtype=kv_dtype, state_dtype=state_dtype))
    kv_b, state_b = inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element
    return hybrid_layout(inputs.arch, kv_b, state_b, tp)


def test_one_kind_of_cache_is_not_hybrid():
    # Llama: every layer full attention, one group (UniformTypeKVCacheSpecs): the byte arithmetic of core/memory.
    assert layout_of("Llama-3.1-8B-Instruct", 1) is None


def test_gpt_oss_two_groups_and_the_0_10_log():
    # gpt-oss-120b at TP 4: 18 sliding (window 128) + 18 full layers of 8 KV heads / 4 x 64 x 2 (K, V) x 2 B = 512 B
    # a token per GPU: one group of 18 per kind, page 16 x 512 = 8,192 B.
    layout = layout_of("gpt-oss-120b", 4, kv_dtype="bf16")
    assert (layout.group_layers, layout.groups, layout.page_bytes, layout.min_block_tokens) == (18, 2, 8192, 16)
    # vLLM 0.10.1.1's log (kv_pool.yaml vllm-dl-gpt-oss-120b-tp4-a100-80): 45.32 GiB -> floor(45.32 GiB / 8,192 /
    # 18) = 330,010 blocks -> 330,010 // 2 x 16 = 2,640,080 tokens (logged 2,640,144: the GiB is rounded).
    blocks = layout.num_blocks(45.32 * GIB)
    assert blocks == 330_010
    assert layout.logged_tokens(blocks, 16_384, 2048, TokenCountRule.BLOCKS_PER_GROUP) == 2_640_080
    assert layout.logged_tokens(blocks, 16_384, 2048, TokenCountRule.BLOCKS_PER_GROUP) == pytest.approx(
        2_640_144, rel=2e-4
    )
    # A 16,384-token request: ceil(16,384 / 16) = 1,024 full blocks + ceil(min(127 + 2,048, 16,384) / 16) + 1 = 137
    # sliding blocks: the same log's 'Maximum concurrency for 16,384 tokens per request: 284.25x' is 330,010 / 1,161,
    # and vLLM 0.21+ would log int(330,010 / 1,161 x 16,384) tokens.
    assert layout.blocks_per_request(16_384, 2048) == 1024 + 137
    assert round(layout.max_concurrency(blocks, 16_384, 2048), 2) == 284.25
    assert layout.logged_tokens(blocks, 16_384, 2048) == int(330_010 / 1161 * 16_384)


def test_gemma3_pads_the_sliding_layers_to_whole_groups():
    # Gemma 3 27B: 52 sliding + 10 full layers -> groups of 10 (the fewest; 52 is not under 1.5 x 10):
    # ceil(52 / 10) + 1 = 7 groups, the last sliding one padded with 8 empty layers.
    layout = layout_of("gemma-3-27b-it", 1)
    assert (layout.group_layers, layout.groups) == (10, 7)
    # A request of 131,072 tokens with 8,192 batched: 8,192 full blocks + 6 sliding groups x (ceil((1,023 +
    # 8,192) / 16) + 1) = 6 x 577.
    assert layout.blocks_per_request(131_072, 8192) == 8192 + 6 * 577


def test_group_size_is_the_larger_count_when_close():
    # 12 sliding + 13 full (vLLM's own example, gpt-oss-20b + eagle): 13 < 1.5 x 12, so groups of 13, 2 groups.
    types = [
        CacheType(kind=CacheKind.SLIDING, window_tokens=128, bytes_per_token=512, state_bytes=0, layers=12),
        CacheType(kind=CacheKind.FULL, window_tokens=None, bytes_per_token=512, state_bytes=0, layers=13),
    ]
    layout = kv_group_layout(types)
    assert (layout.group_layers, layout.groups) == (13, 2)


def test_smaller_attention_pages_raise_their_block():
    # Gemma 4 31B: sliding layers 16 KV heads x 256 x 2 x 2 B = 16,384 B a token, full layers 4 x 512 x 2 x 2 B
    # = 8,192 B: the page is 16 x 16,384 B and the full layers' block doubles to 32 (unify_kv_cache_spec_page_size).
    layout = layout_of("tests/data/configs/gemma4_31b/config.json", 1)
    blocks = {cache.kind: cache.block_tokens for cache in layout.types}
    assert blocks == {CacheKind.SLIDING: 16, CacheKind.FULL: 32}
    assert layout.page_bytes == 16 * 16_384
    assert layout.min_block_tokens == 16


def test_pages_that_do_not_divide_fail_clearly():
    types = [
        CacheType(kind=CacheKind.SLIDING, window_tokens=128, bytes_per_token=768, state_bytes=0, layers=4),
        CacheType(kind=CacheKind.FULL, window_tokens=None, bytes_per_token=512, state_bytes=0, layers=4),
    ]
    with pytest.raises(QuotacalcError, match="one page size"):
        kv_group_layout(types)


def test_qwen3_next_state_sets_the_block_and_the_0_11_log():
    # vllm-project/vllm#26646 (Qwen3-Next-80B-A3B, TP 2, --kv-cache-dtype fp8_e5m2, --dtype float16, max_model_len
    # 215,040): per GPU an attention layer keeps 1 KV head x 256 x 2 x 1 B = 512 B a token and a Gated DeltaNet layer
    # 3 x (2 x 8 x 128 + 16 x 128) x 2 B + 16 x 128 x 128 x 2 B = 548,864 B of state. The block is
    # 16 x ceil(548,864 / (16 x 512)) = 1,072 tokens (page 548,864 B, no padding). 12 attention + 36 linear layers:
    # groups of 12, 1 + 3 = 4 groups.
    layout = layout_of(QWEN3_NEXT, 2, kv_dtype="fp8", state_dtype="fp16")
    assert (layout.min_block_tokens, layout.page_bytes, layout.group_layers, layout.groups) == (1072, 548_864, 12, 4)
    # Its log: 'GPU KV cache size: 90,048 tokens' (= 84 x 1,072: 336 to 339 blocks) and 'Maximum concurrency for
    # 215,040 tokens per request: 1.66x' (blocks / (ceil(215,040 / 1,072) + 3 state pages) = blocks / 204).
    for blocks in (338, 339):
        assert layout.logged_tokens(blocks, 215_040, 8192, TokenCountRule.BLOCKS_PER_GROUP) == 90_048
        assert round(layout.max_concurrency(blocks, 215_040, 8192), 2) == pytest.approx(1.66, abs=0.006)


def test_mla_aligns_the_state_block_to_64():
    # Kimi Linear: MLA keeps 576 values x 2 B = 1,152 B a token per layer, a KDA layer 2,170,880 B of state; MLA
    # kernels align blocks to 64: 64 x ceil(2,170,880 / (64 x 1,152)) = 64 x 30 = 1,920 tokens.
    layout = layout_of("tests/data/configs/kimi_linear/config.json", 1)
    assert layout.min_block_tokens == 1920


def test_qwen3_5_moe_against_the_0_24_log():
    # noonghunna/club-3090#612 (Qwen3.6-35B-A3B, the Qwen3.5-35B-A3B sizes: 10 attention + 30 Gated DeltaNet
    # layers; vLLM 0.24.0, fp8 KV, prefix caching on, max_model_len 131,072, 8,192 batched): 'Available KV cache
    # memory: 5.98 GiB', 'GPU KV cache size: 567,978 tokens', 'Maximum concurrency ... 4.33x'. A linear layer keeps
    # its conv state at bf16 (3 x 8,192 x 2 B) and its recurrent state at fp32 (the config's mamba_ssm_dtype:
    # 32 x 128 x 128 x 4 B): 2,146,304 B, so the block is 16 x ceil(2,146,304 / (16 x 1,024)) = 2,096 tokens and
    # floor(5.98 GiB / 2,146,304 / 10) = 299 blocks; a request takes ceil(131,072 / 2,096) = 63 attention blocks +
    # 3 x 2 state pages ('align' mode): int(299 / 69 x 131,072) = 567,978 tokens and 4.33x, as logged.
    layout = layout_of(QWEN3_5_MOE, 1, kv_dtype="fp8", state_dtype="fp32")
    assert (layout.min_block_tokens, layout.page_bytes, layout.groups) == (2096, 2_146_304, 4)
    blocks = layout.num_blocks(5.98 * GIB)
    assert blocks == 299
    assert layout.logged_tokens(blocks, 131_072, 8192, state_pages=2) == int(299 / 69 * 131_072) == 567_978
    assert round(layout.max_concurrency(blocks, 131_072, 8192, state_pages=2), 2) == 4.33


def test_price_reports_the_hybrid_pool_and_keeps_dense_models():
    # gpt-oss-120b at TP 2 on H100: kv_pool_tokens is vLLM 0.21+'s log at max_model_len 131,072 and the default
    # 8,192 batched tokens: blocks / (8,192 full + 521 sliding) x 131,072.
    replica = price(resolve(Deployment(model="gpt-oss-120b", gpu="h100-sxm", tp=2)))
    steps = {step.name: step.value for step in replica.steps}
    blocks = steps["kv_pool_blocks"]
    assert blocks == int(replica.kv_pool_bytes_per_gpu // 16_384 // 18)
    assert steps["kv_blocks_per_request"] == 8192 + 521
    assert replica.kv_pool_tokens == int(blocks / 8713 * 131_072)
    # A decoding sequence of 1,700 tokens: ceil(1,700 / 16) = 107 full blocks + ceil(128 / 16) + 1 = 9 sliding.
    assert replica.max_resident_sequences == blocks // (107 + 9)
    # A dense model keeps bytes over bytes per token.
    dense = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm")))
    assert "kv_pool_blocks" not in {step.name for step in dense.steps}
    assert dense.kv_pool_tokens == int(dense.kv_pool_bytes_per_gpu // dense.kv_bytes_per_token_per_gpu)


def test_measured_hybrid_pool_goes_back_to_blocks():
    # --kv-pool-tokens 1,000,000 for gpt-oss-120b at TP 2: ceil(1,000,000 x 8,713 / 131,072) = 66,475 blocks of
    # 18 layers x 16,384 B.
    replica = price(resolve(Deployment(model="gpt-oss-120b", gpu="h100-sxm", tp=2, kv_pool_tokens=1_000_000)))
    assert replica.kv_pool_tokens == 1_000_000
    assert replica.kv_pool_bytes_per_gpu == 66_475 * 18 * 16_384


def test_calibrate_reads_a_hybrid_log_in_blocks():
    from quotacalc.core.calibrate import KvPoolReading, kv_pool_fit

    # gpt-oss-120b at TP 2 on H100: 34 GiB of KV is floor(34 GiB / 16,384 / 18) = 123,790 blocks, which vLLM
    # 0.21+ logs as int(123,790 / 8,713 x 131,072) tokens. Read back, those tokens are ceil(tokens x 8,713 /
    # 131,072) = 123,790 blocks = 123,790 x 18 x 16,384 B, 65,536 B under 34 GiB: the same reserve as the GiB.
    inputs = resolve(Deployment(model="gpt-oss-120b", gpu="h100-sxm", tp=2))
    tokens = int(123_790 / 8713 * 131_072)
    from_gib = kv_pool_fit(inputs, KvPoolReading(source="serve.log", available_kv_gib=34.0))
    from_tokens = kv_pool_fit(inputs, KvPoolReading(source="serve.log", kv_pool_tokens=tokens))
    assert from_tokens.runtime_reserve_gib == pytest.approx(from_gib.runtime_reserve_gib + 65_536 / GIB, abs=1e-3)
    both = kv_pool_fit(inputs, KvPoolReading(source="serve.log", available_kv_gib=34.0, kv_pool_tokens=tokens))
    assert both.mismatch is None
    # vLLM 0.10-0.20 logged 123,790 // 2 x 16 tokens for the same pool: about half, which the check flags.
    older = KvPoolReading(source="serve.log", available_kv_gib=34.0, kv_pool_tokens=123_790 // 2 * 16)
    assert kv_pool_fit(inputs, older).mismatch is not None


def test_a_hybrid_model_that_leaves_no_pool_fails_on_tp():
    # Qwen3-Next's 80B bf16 weights (159 GB) leave no KV memory on one H200: the same error as a dense model's.
    with pytest.raises(QuotacalcError, match="does not fit") as error:
        price(resolve(Deployment(model=QWEN3_NEXT, gpu="h200", tp=1)))
    assert error.value.field == "tp"


def test_llama4_chunked_layers_reserve_a_chunk_and_a_step():
    # Llama 4 Scout at TP 8: 36 chunked (8,192) + 12 full layers of 1 KV head x 128 x 2 x 2 B = 512 B a token per
    # GPU -> groups of 12, 3 + 1 = 4 groups. A request of 262,144 tokens (max_model_len) with 8,192 batched:
    # 16,384 full blocks + 3 x ceil(min(8,192 + 8,192, 262,144) / 16) = 3 x 1,024 chunked blocks.
    layout = layout_of("tests/data/configs/llama4_scout/config.json", 8)
    assert (layout.group_layers, layout.groups, layout.page_bytes) == (12, 4, 16 * 512)
    assert layout.blocks_per_request(262_144, 8192) == 16_384 + 3 * 1024
    # Decoding at 1,700 tokens a chunked group holds ceil(min(8,192 + 1, 1,700) / 16) = 107 blocks, as a full one.
    assert layout.blocks_per_request(1700, 1) == 107 + 3 * 107


def test_distinct_mixers_that_keep_the_same_cache_count_as_one_kind():
    """Two full-attention mixers that differ only in their query heads keep the same KV per token: one cache type,
    its layers the sum of both (3 + 2), beside the sliding layers' own; the layer order of first appearance kept."""
    from quotacalc.core.arch import DenseMLP, FullAttention, Layer, ModelArch, SlidingWindowAttention
    from quotacalc.core.kv_groups import CacheKind, cache_types

    narrow = FullAttention(hidden_size=1024, num_heads=8, num_kv_heads=2, head_dim=128, v_head_dim=128)
    wide = FullAttention(hidden_size=1024, num_heads=16, num_kv_heads=2, head_dim=128, v_head_dim=128)
    sliding = SlidingWindowAttention(**narrow.model_dump(exclude={"kind"}), window_tokens=1024)
    ffn = DenseMLP(hidden_size=1024, intermediate_size=4096)
    mixers = (narrow, sliding, wide, narrow, wide, narrow)
    arch = ModelArch(
        name="toy",
        model_type="toy",
        hidden_size=1024,
        vocab_size=32_000,
        tie_word_embeddings=True,
        layers=tuple(Layer(mixer=mixer, feed_forward=ffn, norm_params=2048) for mixer in mixers),
        final_norm_params=1024,
    )
    assert [count for _, count in arch.mixer_groups()] == [3, 1, 2]
    types = cache_types(arch, 2.0, 2.0, 1)
    # 2 KV heads x 128 x (K and V) x 2 B = 1,024 B a token in every attention layer.
    assert [(t.kind, t.window_tokens, t.bytes_per_token, t.layers) for t in types] == [
        (CacheKind.FULL, None, 1024.0, 5),
        (CacheKind.SLIDING, 1024, 1024.0, 1),
    ]
