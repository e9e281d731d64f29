"""Biases and norms of quantized matrices stay in the checkpoint's 16-bit dtype.

A quantization method converts the weight matrices of linear layers; the biases beside them and the norms between
them stay as the checkpoint stores them. gpt-oss-120b's MXFP4 checkpoint keeps each expert's gate_up_proj_bias and
down_proj_bias in BF16, and vLLM allocates them so (Mxfp4MoEMethod.create_weights: w13_bias / w2_bias with
dtype=torch.bfloat16 beside uint8 weight blocks and scales, vllm/model_executor/layers/quantization/mxfp4.py);
DeepSeek-V3's FP8 checkpoint keeps q_a_layernorm and kv_a_layernorm in BF16.
"""

from __future__ import annotations

import pytest

from quotacalc.core.arch import ParamGroup
from quotacalc.core.deployment import Deployment
from quotacalc.core.price import price
from quotacalc.inputs.resolve import resolve

#: MXFP4: half a byte a weight plus one e8m0 scale byte per 32.
MXFP4 = 0.5 + 1 / 32
#: DeepSeek-V3's FP8: one byte plus a float32 scale per 128 x 128 block.
FP8_BLOCK = 1 + 4 / (128 * 128)


@pytest.fixture(scope="module")
def gpt_oss():
    """examples/gpt-oss-120b-h100.yaml: one H100 SXM, TP 1, FP8 KV cache, batch 32, context 2,000."""
    inputs = resolve(Deployment(model="gpt-oss-120b", gpu="h100-sxm", tp=1, kv_dtype="fp8", batch=32, context=2000))
    return inputs, price(inputs)


def test_gpt_oss_expert_splits_into_mxfp4_matrices_and_bf16_biases(gpt_oss):
    """One expert (hidden 2,880, intermediate 2,880, gated): matrices 3 x 2,880 x 2,880 = 24,883,200; biases
    gate_up_proj_bias 2 x 2,880 = 5,760 + down_proj_bias 2,880 = 8,640 (24,891,840 in all, as before)."""
    inputs, _ = gpt_oss
    moe = inputs.arch.moe_layers()[0]
    assert moe.expert_params_by_group() == {
        ParamGroup.ROUTED_EXPERTS: 3 * 2_880 * 2_880,
        ParamGroup.ROUTED_EXPERT_BIAS: 2 * 2_880 + 2_880,
    }
    assert moe.expert_params() == 24_883_200 + 8_640 == 24_891_840
    # Layout: the matrices MXFP4, the biases the checkpoint's BF16 (no quantization method converts them).
    assert inputs.weights.storage(ParamGroup.ROUTED_EXPERTS).bytes_per_param == MXFP4 == 0.53125
    assert inputs.weights.storage(ParamGroup.ROUTED_EXPERT_BIAS).dtype == "bf16"
    assert inputs.weights.storage(ParamGroup.ROUTED_EXPERT_BIAS).bytes_per_param == 2


def test_gpt_oss_expert_bytes_and_weight_bytes_by_hand(gpt_oss):
    """expert_bytes = 24,883,200 x 0.53125 + 8,640 x 2 = 13,219,200 + 17,280 = 13,236,480 B (was 24,891,840 x
    0.53125 = 13,223,790). weight_bytes: 36 layers x 128 experts = 4,608 experts, each 8,640 x (2 - 0.53125) =
    12,690 B more than before: 65,190,340,224 + 4,608 x 12,690 = 65,190,340,224 + 58,475,520 = 65,248,815,744 B.
    Parameter counts do not change (116,829,156,672)."""
    inputs, result = gpt_oss
    assert 24_883_200 * MXFP4 + 8_640 * 2 == 13_236_480
    assert result.expert_traffic is not None
    assert result.expert_traffic.expert_bytes == 13_236_480
    assert 8_640 * (2 - MXFP4) == 12_690
    assert 65_190_340_224 + 36 * 128 * 12_690 == 65_248_815_744
    assert result.weight_bytes == 65_248_815_744
    assert result.total_params == 116_829_156_672
    assert inputs.arch.params_by_group()[ParamGroup.ROUTED_EXPERT_BIAS] == 4_608 * 8_640 == 39_813_120


def test_gpt_oss_kv_pool_shrinks_by_the_bias_bytes(gpt_oss):
    """At TP 1 every extra weight byte leaves the pool: 3,165,665,991.68 - 58,475,520 = 3,107,190,471.68 B.
    Its tokens follow from the pool's bytes through vLLM's hybrid block layout (full and sliding-window groups
    sharing pages; tests/test_kv_groups.py derives that step): 158,480 tokens, was 161,474, the same 1.85% fewer
    (3,107,190,471.68 / 3,165,665,991.68 = 0.98153; 158,480 / 161,474 = 0.98146, whole blocks)."""
    _, result = gpt_oss
    assert result.kv_pool_bytes_per_gpu == pytest.approx(3_165_665_991.68 - 58_475_520, abs=1e-3)
    assert round(result.kv_pool_bytes_per_gpu) == 3_107_190_472
    assert result.kv_pool_tokens == 158_480


def test_deepseek_v3_latent_norms_stay_bf16():
    """61 MLA layers each with q_a_layernorm (q_lora_rank 1,536) and kv_a_layernorm (kv_lora_rank 512): 61 x 2,048
    = 124,928 norm values, counted in the norm group (BF16, 2 B) instead of attention (FP8 with a float32 scale per
    128 x 128 block, 1 + 4/16,384 B): weight_bytes 673,150,420,686.5 + 124,928 x (2 - 1 - 1/4,096) = 673,150,420,686.5
    + 124,897.5 = 673,150,545,584 B. (Scales of partial 128 x 128 blocks, e.g. kv_a_proj_with_mqa's 576 rows = 5
    blocks, are not counted: the audit's 673,150,552,416 counts them.)"""
    inputs = resolve(Deployment(model="DeepSeek-V3", gpu="h200", tp=8))
    mla = inputs.arch.layers[0].mixer
    assert mla.params()[ParamGroup.NORM] == 1_536 + 512
    assert inputs.weights.storage(ParamGroup.NORM).bytes_per_param == 2
    assert inputs.weights.storage(ParamGroup.ATTENTION).bytes_per_param == FP8_BLOCK
    assert 124_928 * (2 - FP8_BLOCK) == 124_897.5
    assert price(inputs).weight_bytes == 673_150_420_686.5 + 124_897.5 == 673_150_545_584
