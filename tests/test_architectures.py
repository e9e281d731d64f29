"""Each architecture family priced right, with expected figures derived by hand in the comments.

Parameter totals for every shipped config are checked against transformers in
``test_reference_params.py``; this file checks what only the per-layer specs know: KV per token,
sliding windows, MLA, state, MoE traffic, TP replication and quantized weights.
"""

from __future__ import annotations

import json

import pytest

from quotacalc import Deployment, expected_distinct_experts, load_arch, price, request_kv, resolve
from quotacalc.core import memory
from quotacalc.core.arch import FullAttention, MLAAttention, SlidingWindowAttention
from quotacalc.core.price import expected_busiest_rank_experts
from quotacalc.errors import QuotacalcError, UnsupportedArchitecture

BF16 = 2


def arch_of(name):
    return load_arch(name)[0]


def priced(**fields):
    return price(resolve(Deployment(**fields)))


# --------------------------------------------------------------------------- dense GQA


def test_gqa_uses_kv_heads_not_attention_heads():
    # Llama 3.1 8B: 32 layers x 2 (K, V) x 8 KV heads x 128 x 2 B = 131,072 (MHA would be 4x that).
    assert memory.kv_bytes_per_token(arch_of("Llama-3.1-8B-Instruct"), BF16) == 32 * 2 * 8 * 128 * 2 == 131_072


def test_tp_above_kv_heads_replicates_a_head_per_rank():
    # Llama 3.1 8B at TP 16: 8 KV heads < 16 ranks, so each rank holds one (replicated) head:
    # 32 layers x 2 x 1 x 128 x 2 B = 16,384 B per GPU, twice the 131,072 / 16 = 8,192 an even split gives.
    arch = arch_of("Llama-3.1-8B-Instruct")
    assert memory.kv_bytes_per_token_per_gpu(arch, BF16, 16) == 32 * 2 * 1 * 128 * 2 == 16_384
    assert memory.kv_bytes_per_token_per_gpu(arch, BF16, 4) == 131_072 / 4


def test_fp8_kv_halves_the_kv():
    bf16 = priced(model="Llama-3.1-8B-Instruct", gpu="h100-sxm")
    fp8 = priced(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", kv_dtype="fp8")
    assert fp8.kv_bytes_per_token == bf16.kv_bytes_per_token / 2
    assert fp8.kv_pool_tokens == pytest.approx(2 * bf16.kv_pool_tokens, abs=1)


def test_prompt_token_at_context_adds_attention_flops():
    # Llama 3.3 70B at 1,700 tokens: a prompt token attends on average (1700 + 1) / 2 = 850.5 earlier
    # tokens; per layer 2 x 64 heads x (128 + 128) x 850.5 FLOPs; x 80 layers = 2,229,534,720.
    result = priced(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8")
    assert result.attention_flops_per_prompt_token == 80 * 2 * 64 * 256 * 850.5 == 2_229_534_720
    assert result.prompt_token_at_context_s == pytest.approx((2 * 70_553_706_496 + 2_229_534_720) / (4 * 1979e12 * 0.5))
    assert result.prompt_token_at_context_s > result.prompt_token_s


# --------------------------------------------------------------------------- sliding window


def test_qwen25_sliding_window_disabled():
    # use_sliding_window false: 28 full layers x 2 x 4 KV heads x 128 x 2 B = 57,344.
    arch = arch_of("Qwen2.5-7B-Instruct")
    assert all(
        isinstance(layer.mixer, FullAttention) and not isinstance(layer.mixer, SlidingWindowAttention)
        for layer in arch.layers
    )
    assert memory.kv_bytes_per_token(arch, BF16) == 28 * 2 * 4 * 128 * 2 == 57_344


def test_gpt_oss_alternating_windows():
    # 36 layers alternate sliding (window 128) and full; 8 KV heads x head_dim 64.
    # Growth at long context: 18 full x 2 x 8 x 64 x 2 B = 36,864 B/token.
    arch = arch_of("gpt-oss-120b")
    assert memory.kv_bytes_per_token(arch, BF16) == 18 * 2 * 8 * 64 * 2 == 36_864
    per_layer_token = 2 * 8 * 64 * 2  # 2,048 B
    # At 100 tokens every layer holds all of them: 36 x 100 x 2,048.
    assert memory.request_kv_bytes(arch, 100, BF16, BF16) == 36 * 100 * per_layer_token
    # At 10,000 tokens sliding layers hold only their 128: 18 x 10,000 x 2,048 + 18 x 128 x 2,048.
    assert (
        memory.request_kv_bytes(arch, 10_000, BF16, BF16) == 18 * 10_000 * per_layer_token + 18 * 128 * per_layer_token
    )


def test_gemma3_pattern_from_transformers_defaults():
    # text_config leaves the pattern out: transformers' default is 5 sliding (window 1024) then 1 full,
    # so 62 layers have 10 full. 16 KV heads x 128: growth 10 x 2 x 16 x 128 x 2 B = 81,920 B/token.
    arch = arch_of("gemma-3-27b-it")
    assert arch.mixer_counts() == {"sliding_attention": 52, "full_attention": 10}
    assert memory.kv_bytes_per_token(arch, BF16) == 10 * 2 * 16 * 128 * 2 == 81_920
    assert {layer.mixer.window_tokens for layer in arch.layers if isinstance(layer.mixer, SlidingWindowAttention)} == {
        1024
    }
    # SigLIP tower + projector as transformers builds them (tests/data/reference_params.json, modules
    # under vision_tower and multi_modal_projector): 423,060,336, idle for text tokens.
    assert arch.vision_params == 423_060_336
    assert arch.active_params() == arch.total_params() - 423_060_336


def _write_config(tmp_path, name, config):
    folder = tmp_path / name
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config))
    return str(folder)


MISTRAL_V01 = {
    "model_type": "mistral",
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 32000,
    "max_position_embeddings": 32768,
    "sliding_window": 4096,
}


def test_mistral_style_all_sliding(tmp_path):
    # Mistral 7B v0.1: every layer slides over 4,096 tokens. KV stops growing: a 32K request holds
    # 32 layers x 4,096 x 2 x 8 x 128 x 2 B = 536,870,912 B, the same as a 4K one.
    path = _write_config(tmp_path, "mistral-v01", MISTRAL_V01)
    arch = arch_of(path)
    assert memory.kv_bytes_per_token(arch, BF16) == 0
    assert memory.request_kv_bytes(arch, 32_768, BF16, BF16) == 32 * 4096 * 2 * 8 * 128 * 2 == 536_870_912
    assert memory.request_kv_bytes(arch, 4096, BF16, BF16) == 536_870_912
    # With no growing layer the pool is counted in tokens at the deployment's context: a sequence of
    # 8,192 tokens holds 536,870,912 B, 65,536 B per token. Weights: 7,241,732,096 params x 2 B
    # (Mistral 7B v0.1's published count); pool = 0.9 x 85,029,158,912 B - weights - 5.5 GiB
    # = 56,137,198,796.8 B: 856,585 tokens, 104 sequences of 8,192.
    result = priced(model=path, gpu="h100-sxm", context=8192, runtime_reserve_gib=5.5)
    usable = 0.9 * 85_029_158_912 - 2 * 7_241_732_096 - 5.5 * 2**30
    assert result.kv_pool_tokens == int(usable // 65_536) == 856_585
    assert result.max_resident_sequences == int(usable // 536_870_912) == 104


def test_window_at_least_max_context_is_full_attention(tmp_path):
    config = dict(MISTRAL_V01, sliding_window=32768)
    arch = arch_of(_write_config(tmp_path, "wide-window", config))
    assert arch.mixer_counts() == {"full_attention": 32}
    assert any("priced as full attention" in note for note in arch.notes)


def test_unsupported_layer_type_fails_clearly(tmp_path):
    config = dict(MISTRAL_V01, layer_types=["linear_attention"] * 32)
    with pytest.raises(UnsupportedArchitecture, match="linear_attention"):
        arch_of(_write_config(tmp_path, "linear", config))


# --------------------------------------------------------------------------- MLA


def test_deepseek_mla_latent_not_split_by_tp():
    # (kv_lora_rank 512 + qk_rope_head_dim 64) x 61 layers x 2 B = 70,272 B/token, held whole by every rank.
    arch = arch_of("DeepSeek-V3")
    assert all(isinstance(layer.mixer, MLAAttention) for layer in arch.layers)
    assert memory.kv_bytes_per_token(arch, BF16) == (512 + 64) * 61 * 2 == 70_272
    assert memory.kv_bytes_per_token_per_gpu(arch, BF16, 8) == 70_272


def test_deepseek_dense_then_moe_layers():
    # first_k_dense_replace 3: three dense MLPs, then 58 MoE layers of 256 routed + 1 shared expert, top 8.
    arch = arch_of("DeepSeek-V3")
    moe = arch.moe_layers()
    assert len(moe) == 58 and moe[0].num_experts == 256 and moe[0].top_k == 8 and moe[0].num_shared_experts == 1
    # Active parameters (the published figure is 37B activated).
    assert arch.active_params() == pytest.approx(37.5e9, rel=0.01)


# --------------------------------------------------------------------------- MoE


def test_expected_distinct_experts_uniform():
    # One token touches exactly k experts; a huge batch touches all; in between E(1 - (1 - k/E)^B).
    assert expected_distinct_experts(8, 2, 1) == pytest.approx(2)
    assert expected_distinct_experts(8, 2, 10_000) == pytest.approx(8)
    assert expected_distinct_experts(128, 4, 16) == pytest.approx(128 * (1 - (1 - 4 / 128) ** 16))


def test_skew_touches_fewer_experts():
    uniform = expected_distinct_experts(128, 4, 16)
    skewed = expected_distinct_experts(128, 4, 16, skew=1.0)
    assert skewed < uniform
    assert expected_distinct_experts(128, 4, 16, skew=0.0) == uniform


def test_moe_output_weight_moves_with_batch():
    # Mixtral: at batch 1 a step reads 2 of 8 experts per layer, at batch 64 nearly all 8.
    small = priced(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2, batch=1)
    large = priced(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2, batch=64)
    assert small.expert_traffic.expected_experts_touched == pytest.approx(2)
    assert large.expert_traffic.expected_experts_touched == pytest.approx(8 * (1 - 0.75**64))
    # Active params (prefill): 32 x (attention 41,943,040 + 2 experts x 176,160,768 + router 32,768 + norms 8,192)
    # + embeddings 2 x 131,072,000 + final norm 4,096 = 12,879,925,248.
    assert small.active_params == 12_879_925_248
    # Bytes read at batch 1: non-expert + 32 layers x 2 experts x 176,160,768 x 2 B, over TP 2.
    expert_bytes = 176_160_768 * 2
    non_expert = small.weight_bytes - 32 * 8 * expert_bytes
    assert small.decode_weight_bytes_per_gpu == pytest.approx((non_expert + 32 * 2 * expert_bytes) / 2)
    assert small.output_weight != pytest.approx(large.output_weight, rel=0.05)


def test_expert_parallel_waits_for_the_busiest_gpu():
    assert expected_busiest_rank_experts(8, 1, 0.25) == pytest.approx(8 * 0.25)
    assert expected_busiest_rank_experts(8, 4, 1.0) == pytest.approx(2)
    tp_result = priced(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=4, batch=2)
    ep_result = priced(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=4, batch=2, expert_parallel=True)
    assert ep_result.decode_weight_bytes_per_gpu > tp_result.decode_weight_bytes_per_gpu
    with pytest.raises(QuotacalcError, match="expert"):
        priced(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", expert_parallel=True)


# --------------------------------------------------------------------------- hybrid state-space


def test_jamba_state_and_kv():
    # 4 attention layers (period 8, offset 4): 4 x 2 x 8 x 128 x 2 B = 16,384 B/token.
    # 28 Mamba layers, d_inner 2 x 4096: (d_conv 4 - 1) x 8,192 + 8,192 x d_state 16 = 155,648 values
    # each, x 28 x 2 B = 8,716,288 B of state per sequence, whatever its length.
    arch = arch_of("AI21-Jamba-1.5-Mini")
    assert arch.mixer_counts() == {"mamba1": 28, "full_attention": 4}
    assert memory.kv_bytes_per_token(arch, BF16) == 16_384
    assert memory.state_bytes_per_sequence(arch, BF16) == 28 * (3 * 8192 + 8192 * 16) * 2 == 8_716_288
    assert memory.request_kv_bytes(arch, 1000, BF16, BF16) == 1000 * 16_384 + 8_716_288
    replica = priced(model="AI21-Jamba-1.5-Mini", gpu="h100-sxm", tp=2)
    kv = request_kv(replica, 1000)
    assert kv.state_bytes == 8_716_288
    # per GPU: KV heads and Mamba channels both split over TP 2
    assert kv.request_kv_bytes_per_gpu == (1000 * 16_384 + 8_716_288) / 2


# --------------------------------------------------------------------------- quantized checkpoints


def test_deepseek_fp8_checkpoint_layout():
    # quantization_config fp8 with 128x128 blocks: linear layers at 1 B + one fp32 scale per 16,384
    # weights; embeddings, LM head, norms and routers stay bf16.
    result = priced(model="DeepSeek-V3", gpu="h200", tp=8)
    arch = result.inputs.arch
    groups = arch.params_by_group()
    linear = sum(
        count
        for group, count in groups.items()
        if group.value in ("attention", "mlp", "routed_experts", "shared_experts")
    )
    other = arch.total_params() - linear
    assert result.weight_bytes == pytest.approx(linear * (1 + 4 / 16384) + other * 2)
    assert result.compute_dtype == "fp8"


def test_gpt_oss_mxfp4_experts_only():
    # mxfp4 experts (4.25 bits each); attention, router, embeddings, LM head in bf16
    # (modules_to_not_convert), about 65 GB in all: the published checkpoint is ~65 GB.
    result = priced(model="gpt-oss-120b", gpu="h100-sxm")
    groups = result.inputs.arch.params_by_group()
    experts = sum(count for group, count in groups.items() if group.value == "routed_experts")
    assert result.weight_bytes == pytest.approx(experts * 4.25 / 8 + (result.total_params - experts) * 2)
    assert 60e9 < result.weight_bytes < 70e9
    # mxfp4 is weight-only in vLLM: its MoE backends take bf16 activations, Blackwell's default included
    # ("Using FlashInfer MXFP4 BF16 backend for SM100", mxfp4.py get_mxfp4_backend), so a B200's fp4 tensor
    # cores do not run it: bf16 on every GPU, where NVFP4 (W4A4) runs fp4 on Blackwell.
    assert result.compute_dtype == "bf16"
    b200 = priced(model="gpt-oss-120b", gpu="b200")
    assert b200.compute_dtype == "bf16" and b200.peak_flops_per_gpu == 2.25e15  # B200 dense bf16, not fp4's 9e15
    assert priced(model="Llama-3.1-8B-Instruct", gpu="b200", weight_dtype="nvfp4").compute_dtype == "fp4"


def test_explicit_weight_dtype_overrides_the_checkpoint():
    # An explicit dtype applies to every parameter (the method's simplification), scales not counted.
    result = priced(model="DeepSeek-V3", gpu="h200", tp=8, weight_dtype="fp8")
    assert result.weight_bytes == result.total_params * 1


def test_awq_checkpoint(tmp_path):
    config = dict(
        MISTRAL_V01,
        sliding_window=None,
        quantization_config={"quant_method": "awq", "bits": 4, "group_size": 128},
    )
    result = priced(model=_write_config(tmp_path, "awq", config), gpu="h100-sxm")
    groups = result.inputs.arch.params_by_group()
    linear = (
        groups[next(g for g in groups if g.value == "attention")] + groups[next(g for g in groups if g.value == "mlp")]
    )
    # int4 weights + an fp16 scale and a 4-bit zero per 128 weights
    assert result.weight_bytes == pytest.approx(linear * (0.5 + 2.5 / 128) + (result.total_params - linear) * 2)
    assert result.compute_dtype == "bf16"


def test_unknown_quantization_method_fails_clearly(tmp_path):
    config = dict(MISTRAL_V01, quantization_config={"quant_method": "hqq-9000"})
    with pytest.raises(QuotacalcError, match="hqq-9000"):
        priced(model=_write_config(tmp_path, "weird", config), gpu="h100-sxm")


def test_hybrid_pool_counts_state_in_resident_sequences():
    # Jamba at TP 2 in vLLM's hybrid KV cache manager (core/kv_groups.py). Per GPU, an attention layer keeps
    # 16,384 / 4 layers / 2 = 2,048 B a token and a Mamba layer 8,716,288 / 28 layers / 2 = 155,648 B of state:
    # the block is 16 x ceil(155,648 / (16 x 2,048)) = 80 tokens, the page 80 x 2,048 = 163,840 B (state padded
    # to it). 4 attention + 28 Mamba layers: groups of 4 layers, 1 + 7 = 8 groups. A decoding sequence of 1,700
    # tokens holds ceil(1,700 / 80) = 22 attention blocks + 7 state pages = 29 blocks.
    replica = priced(model="AI21-Jamba-1.5-Mini", gpu="h100-sxm", tp=2)
    blocks = int(replica.kv_pool_bytes_per_gpu // 163_840 // 4)
    assert replica.max_resident_sequences == blocks // 29
    # Counting KV alone (22 blocks a sequence instead of 29) would claim ~32% more.
    assert blocks // 22 == pytest.approx(1.32 * replica.max_resident_sequences, rel=0.01)
    # kv_pool_tokens is vLLM 0.21+'s log: blocks / (ceil(262,144 / 80) + 7) x 262,144 (max_model_len, the
    # model's maximum context).
    assert replica.kv_pool_tokens == int(blocks / (3_277 + 7) * 262_144)


def test_qwen3_moe_active_params_by_hand():
    # Qwen3-235B-A22B, per layer: attention q 4096x8192 + k, v 4096x512 each + o 8192x4096 + q/k norms 2x128
    # = 71,303,424; router 128 x 4096 = 524,288; 8 active experts x 3 x 4096 x 1536 = 150,994,944;
    # norms 2 x 4096. 94 layers x 222,830,848 + embeddings 2 x 151,936 x 4096 + final norm 4096
    # = 22,190,763,520 active (the "A22B"), of 235,093,634,560.
    arch = arch_of("Qwen3-235B-A22B")
    per_layer = 71_303_424 + 524_288 + 150_994_944 + 8_192
    assert arch.active_params() == 94 * per_layer + 2 * 151_936 * 4096 + 4096 == 22_190_763_520
    assert arch.total_params() == 235_093_634_560
