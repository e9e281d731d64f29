"""Exact parameter, FLOP and state counts of the newest families, read without transformers: DeepSeek sparse
attention (DeepSeek-V3.2), compressed sparse attention (DeepSeek-V4-Flash and -Pro) and Gated DeltaNet
(Qwen3-Next-80B-A3B).

The architectures are the family readers' output for the fixture configs of tests/data/configs (provenance in
SOURCES.md there), kept in tests/data/archs/ by ``scripts/build_test_archs.py``; tests/test_reference_counts.py
rebuilds them from the configs and fails on drift. So these tests run in mutmut's fast selection.

Totals are pinned exactly to transformers 5.24's own count on the meta device (tests/data/reference_params_dsa.json,
reference_params_dsv4.json, reference_params_deltanet_hybrids.json), and checked against the published figures,
rounded to the digits they quote:

* DeepSeek-V3.2: the DeepSeek-V3 architecture plus the lightning indexer (DeepSeek-V3.2-Exp report): "671B total
  parameters with 37B activated for each token" (DeepSeek-V3 technical report, abstract; the 685B of the hub page adds
  the 14B multi-token-prediction module, which no engine builds for serving).
* DeepSeek-V4: "DeepSeek-V4-Pro with 1.6T parameters (49B activated) and DeepSeek-V4-Flash with 284B parameters (13B
  activated)" (DeepSeek-V4 model card).
* Qwen3-Next-80B-A3B: "Number of Parameters: 80B in total and 3B activated", "Number of Parameters (Non-Embedding):
  79B" (Qwen3-Next-80B-A3B model card).

The published active counts leave out the input embedding (a lookup, no FLOPs; as gpt-oss's model card does, see
tests/test_golden_models.py) and Qwen's the LM head too (its "non-embedding" count); quotacalc counts both.
Active counts are derived by hand: the total less the routed experts a token does not run.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotacalc.core.arch import ModelArch, ParamGroup
from quotacalc.core.memory import (
    attention_flops_per_output_token,
    attention_flops_per_prompt_token,
    kv_bytes_per_token,
    state_bytes_per_sequence,
)

ARCHS = Path(__file__).parent / "data" / "archs"
BF16_BYTES = 2


def _arch(folder: str) -> ModelArch:
    return ModelArch.model_validate(json.loads((ARCHS / f"{folder}.json").read_text(encoding="utf-8"))["arch"])


def _expert_params(layers: int, experts: int, hidden: int, intermediate: int) -> int:
    """Gated experts: gate, up and down projections, hidden x intermediate each."""
    return layers * experts * 3 * hidden * intermediate


@pytest.mark.parametrize(
    ("folder", "transformers_total", "idle_experts"),
    [
        # 58 MoE layers (first_k_dense_replace 3 of 61), 256 experts of 2,048, 8 routed: 248 idle.
        ("deepseek_v3_2", 671_877_929_216, _expert_params(58, 248, 7_168, 2_048)),
        # 43 MoE layers, 256 experts of 2,048, 6 routed: 250 idle.
        ("deepseek_v4_flash", 284_332_230_231, _expert_params(43, 250, 4_096, 2_048)),
        # 61 MoE layers, 384 experts of 3,072, 6 routed: 378 idle.
        ("deepseek_v4_pro", 1_572_997_179_491, _expert_params(61, 378, 7_168, 3_072)),
        # 48 MoE layers, 512 experts of 512, 10 routed: 502 idle.
        ("qwen3_next", 79_674_391_296, _expert_params(48, 502, 2_048, 512)),
    ],
)
def test_total_and_active_params(folder, transformers_total, idle_experts):
    arch = _arch(folder)
    assert arch.total_params() == transformers_total
    assert arch.active_params() == transformers_total - idle_experts


#: DeepSeek-V3.2's lightning indexer, 61 layers x (wq_b 8,192 x 1,536 + wk 128 x 7,168 + weights_proj 64 x 7,168
#: + k_norm weight and bias 2 x 128): what it adds to DeepSeek-V3's published 671B.
DSV32_INDEXER = 61 * (8_192 * 1_536 + 128 * 7_168 + 64 * 7_168 + 2 * 128)


@pytest.mark.parametrize(
    ("folder", "published_total", "quoted_unit", "left_out_of_total", "published_active", "left_out_of_active"),
    [
        ("deepseek_v3_2", 671e9, 1e9, DSV32_INDEXER, 37e9, ("embedding",)),
        ("deepseek_v4_flash", 284e9, 1e9, 0, 13e9, ("embedding",)),
        ("deepseek_v4_pro", 1.6e12, 1e11, 0, 49e9, ("embedding",)),
        ("qwen3_next", 80e9, 1e9, 0, 3e9, ("embedding", "lm_head")),
    ],
)
def test_published_figures(
    folder, published_total, quoted_unit, left_out_of_total, published_active, left_out_of_active
):
    """Each published figure is rounded to the last digit it quotes: quotacalc's count is within half of it."""
    arch = _arch(folder)
    assert DSV32_INDEXER == 851_524_864
    assert abs(arch.total_params() - left_out_of_total - published_total) <= quoted_unit / 2
    by_group = arch.active_params_by_group()
    counted_as_published = arch.active_params() - sum(by_group[ParamGroup(group)] for group in left_out_of_active)
    assert abs(counted_as_published - published_active) <= 0.5e9


def test_qwen3_next_non_embedding_total():
    arch = _arch("qwen3_next")
    by_group = arch.params_by_group()
    non_embedding = arch.total_params() - by_group[ParamGroup.EMBEDDING] - by_group[ParamGroup.LM_HEAD]
    assert non_embedding == 79_674_391_296 - 2 * 151_936 * 2_048
    assert round(non_embedding / 1e9) == 79


@pytest.mark.parametrize(
    ("folder", "groups"),
    [
        # transformers' by-module counts (reference_params_dsa.json), summed by quotacalc's groups. A DeepSeek-V3.2
        # layer's attention: q_a 1,536 x 7,168 + q_b 24,576 x 1,536 + kv_a 576 x 7,168 + kv_b 32,768 x 512 + o 7,168
        # x 16,384 + the indexer 13,959,424 = 201,064,704; its latent norms (1,536 + 512) are with the layer norms
        # (2 x 7,168) and the final one (7,168) in the norm group.
        (
            "deepseek_v3_2",
            {
                ParamGroup.ATTENTION: 61 * 201_064_704,
                ParamGroup.NORM: 61 * (1_536 + 512 + 2 * 7_168) + 7_168,
                ParamGroup.ROUTER: 106_430_464,
                ParamGroup.SHARED_EXPERTS: 3 * 851_443_712,
                ParamGroup.ROUTED_EXPERTS: _expert_params(58, 256, 7_168, 2_048),
                ParamGroup.MLP: 3 * 396_361_728,
            },
        ),
        (
            "qwen3_next",
            {
                ParamGroup.ATTENTION: 36 * 33_718_464 + 12 * 27_263_488,
                ParamGroup.ROUTER: 48 * 1_050_624,
                ParamGroup.SHARED_EXPERTS: 48 * 3_145_728,
                ParamGroup.ROUTED_EXPERTS: _expert_params(48, 512, 2_048, 512),
            },
        ),
    ],
)
def test_params_by_group(folder, groups):
    assert 1_536 * 7_168 + 24_576 * 1_536 + 576 * 7_168 + 32_768 * 512 + 7_168 * 16_384 + DSV32_INDEXER // 61 == (
        201_064_704
    )
    by_group = _arch(folder).params_by_group()
    for group, count in groups.items():
        assert by_group[group] == count, group


def test_deepseek_v3_2_attention_flops():
    """A decode token attends min(context, 2,048) latents (81,920 FLOPs each: 2 x 128 heads x (192 + 128)) and the
    indexer scores every token (16,384: 2 x 64 heads x 128), in each of the 61 layers. A prompt token at position p
    attends min(p, 2,048) and scores p: over 4,096 positions the means are 1,536.25 and 2,048.5."""
    arch = _arch("deepseek_v3_2")
    assert attention_flops_per_output_token(arch, 1_024) == 61 * (81_920 + 16_384) * 1_024
    assert attention_flops_per_output_token(arch, 131_072) == 61 * (81_920 * 2_048 + 16_384 * 131_072)
    assert attention_flops_per_prompt_token(arch, 4_096) == pytest.approx(
        61 * (81_920 * 1_536.25 + 16_384 * 2_048.5), rel=1e-12
    )


def test_deepseek_v4_flash_attention_flops_and_cache():
    """Flash (tests/test_families_dsv4.py derives these from vLLM's layout): an 8-token prompt costs 27,684,864 FLOPs
    a token, 8 times over at TP 8 (the scoring on every rank, each rank's 8 heads computed as FlashMLA's 64); at
    131,072 tokens an output token attends 2 x 128 + 20 x (128 + 1,024) + 21 x (128 + 512) entries at 131,072 FLOPs
    and scores 21 x 32,768 at 16,384. The cache grows 21 x 179 + 20 x 4.5625 = 3,850.25 B a token (fp8 entries)."""
    arch = _arch("deepseek_v4_flash")
    assert attention_flops_per_prompt_token(arch, 8) == 27_684_864
    assert attention_flops_per_prompt_token(arch, 8, 8) == 8 * 27_684_864
    entries = 2 * 128 + 20 * (128 + 1_024) + 21 * (128 + 512)
    assert attention_flops_per_output_token(arch, 131_072) == 131_072 * entries + 21 * 16_384 * 32_768
    assert kv_bytes_per_token(arch, 1) == 3_850.25


def test_qwen3_next_cache_and_state():
    """12 gated-attention layers x 2 KV heads x (256 + 256) bf16 = 24,576 B a token; 36 Gated DeltaNet layers of
    conv (4 - 1) x 8,192 and recurrent 32 x 128 x 128 elements: 548,864 x 36 x 2 B = 39,518,208 B a sequence, an
    eighth of the heads on each of 8 GPUs (4,939,776 B)."""
    arch = _arch("qwen3_next")
    assert kv_bytes_per_token(arch, BF16_BYTES) == 24_576
    assert state_bytes_per_sequence(arch, BF16_BYTES) == 39_518_208
    assert state_bytes_per_sequence(arch, BF16_BYTES, tp=8) == 4_939_776
