"""Shipped models against figures worked out by hand from their config.json, and published totals.

Published figures: DeepSeek-V3 "671B total parameters with 37B activated for each token"
(DeepSeek-V3 technical report, abstract; the 14B multi-token-prediction module is not in the
671B); Mixtral 8x7B "46.7B total parameters but only uses 12.9B parameters per token" (Mistral
AI, "Mixtral of experts", 2023); gpt-oss-120b "117B total parameters, 5.1B active parameters per
token" (OpenAI gpt-oss model card, 2025, whose table gives 116.83B and 5.13B).
"""

from __future__ import annotations

import pytest

from quotacalc import Deployment, Traffic, load_arch, price, resolve, size_traffic


def arch_of(name):
    return load_arch(name)[0]


@pytest.mark.parametrize(
    ("name", "total", "active"),
    [
        ("DeepSeek-V3", 671e9, 37e9),
        ("Mixtral-8x7B-v0.1", 46.7e9, 12.9e9),
    ],
)
def test_published_totals(name, total, active):
    arch = arch_of(name)
    # Published figures are rounded to the digits they quote.
    assert arch.total_params() == pytest.approx(total, rel=0.01)
    assert arch.active_params() == pytest.approx(active, rel=0.02)


def test_gpt_oss_published_totals():
    # The model card's table: 116.83B total, 5.13B active, the active count leaving out the input
    # embedding (a lookup, 201,088 x 2,880); quotacalc counts it, as the method's Llama example does.
    arch = arch_of("gpt-oss-120b")
    assert arch.total_params() == pytest.approx(116.83e9, rel=1e-3)
    assert arch.active_params() - 201_088 * 2880 == pytest.approx(5.13e9, rel=1e-3)


def test_gpt_oss_sliding_layers_attend_the_window_mean():
    # gpt-oss-120b: 36 layers alternating sliding (window 128) and full; 64 query heads of 64.
    # A prompt of 1,700 tokens: a full layer's token attends (1,700 + 1) / 2 = 850.5 on average;
    # a sliding one (1 + ... + 128 + 1,572 x 128) / 1,700 = 209,472 / 1,700 = 123.22.
    result = price(resolve(Deployment(model="gpt-oss-120b", gpu="h100-sxm", kv_pool_tokens=300_000)))
    per_token = 2 * 64 * (64 + 64)
    windowed = (128 * 129 / 2 + (1700 - 128) * 128) / 1700
    assert windowed == pytest.approx(209_472 / 1700)
    assert result.attention_flops_per_prompt_token == pytest.approx(18 * per_token * 850.5 + 18 * per_token * windowed)
    # An output token at 1,700 attends all 1,700 in full layers, 128 in sliding ones.
    replica_model_flops = 18 * per_token * 1700 + 18 * per_token * 128
    assert result.decode_compute_s == pytest.approx(
        128 * (2 * result.active_params + replica_model_flops) / (1 * 989.5e12 * 0.5 * (0.803 / 0.709))
    )  # MFU 0.5 scaled by the H100's BF16 over FP8 matmul efficiency (catalog/gpus.yaml)


def test_deepseek_mla_attention_flops_include_rope():
    # DeepSeek-V3: 61 MLA layers, 128 heads; QK^T over qk_nope 128 + qk_rope 64, AV over v 128:
    # 2 x 128 x (128 + 64 + 128) = 81,920 FLOPs per attended token per layer; at 1,700 tokens a prompt
    # token attends 850.5 on average.
    result = price(resolve(Deployment(model="DeepSeek-V3", gpu="h200", tp=8)))
    assert result.attention_flops_per_prompt_token == 61 * 81_920 * 850.5


def test_llama_tenant_request_holds_prompt_and_output():
    # The worked example's tenant: 2,000 prompt + 500 output tokens = 2,500 tokens x 327,680 B of KV,
    # 2,500 / 646,503 of the measured pool.
    replica = price(
        resolve(
            Deployment(
                model="Llama-3.3-70B-Instruct",
                gpu="h100-sxm",
                tp=4,
                weight_dtype="fp8",
                kv_dtype="bf16",
                kv_pool_tokens=646_503,
            )
        )
    )
    sized = size_traffic(replica, Traffic(rps=5, prompt_tokens=2000, output_tokens=500))
    assert sized.request_kv_bytes == 2500 * 327_680
    assert sized.request_pool_share == pytest.approx(2500 / 646_503)
    assert sized.dedicated_replicas == 1 and sized.dedicated_total_usd_per_month == 7200
