"""OLMoE, FlexOlmo, DBRX, LFM2, LFM2-MoE, Apertus, AFMoE (Trinity) and LongCat-Flash priced against transformers' own counts, with cache, state and active-parameter
goldens derived by hand.

``reference_params_olmoe_dbrx_lfm2_longcat.json`` holds the counts transformers 5.24 builds on the meta device for the
folders of ``tests/data/configs`` named in it (``tests/data/make_reference_params.py`` run on a folder
holding only those; the command is in the file's ``generated_by``). The totals are checked in
tests/test_reference_counts.py, with every other test config's; the hand counts below check the same
totals from the published sizes, so a wrong reference would show too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import config_with as _config_with
from conftest import fixture_arch as _arch
from conftest import one_line_error as _one_line_error

from quotacalc.core.arch import (
    DenseMLP,
    FullAttention,
    LearnedActivationMLP,
    MLAAttention,
    ModelArch,
    MoE,
    ParamGroup,
    ShortConvMixer,
    ZeroExpertMoE,
)
from quotacalc.core.kv_groups import CacheKind, hybrid_layout
from quotacalc.core.memory import (
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    state_bytes_per_sequence,
    window_bytes_per_sequence,
)
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.resolve import load_arch

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"
REFERENCE_FILE = json.loads((DATA / "reference_params_olmoe_dbrx_lfm2_longcat.json").read_text(encoding="utf-8"))
REFERENCE = REFERENCE_FILE["models"]
#: Configs whose transformers count holds parameters no checkpoint has (each entry says why).
OVERCOUNTED = REFERENCE_FILE["transformers_overcounts"]
BF16_BYTES = 2


pytestmark = pytest.mark.usefixtures("private_cache")


# --------------------------------------------------------------------------- OLMoE


def test_olmoe_layout_and_kv_by_hand():
    """OLMoE-1B-7B: 16 layers of full attention, experts in every one.

    KV per token: 16 layers x 16 KV heads x (128 K + 128 V), head_dim 2,048 / 16 = 128 -> 65,536 elements
    -> 131,072 bytes in bf16; at TP 8, 2 KV heads per GPU -> 16,384 bytes.
    """
    arch = _arch("olmoe_1b_7b")
    assert arch.mixer_counts() == {"full_attention": 16}
    assert all(isinstance(layer.feed_forward, MoE) for layer in arch.layers)
    assert kv_bytes_per_token(arch, BF16_BYTES) == 131_072
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, 8) == 16_384


def test_olmoe_params_by_hand():
    """Attention per layer: q, k, v, o 4 x 2,048 x 2,048 = 16,777,216, and q/k RMSNorm over the whole
    projection (transformers' q_norm is hidden_size wide, k_norm KV heads x head_dim; vLLM's the same):
    2,048 + 2,048 -> 16,781,312.
    Experts: 64 of 3 x 2,048 x 1,024 = 6,291,456 -> 402,653,184; router 64 x 2,048 = 131,072; norms 4,096.
    Per layer 419,569,664; x 16 = 6,713,114,624. Embedding and untied head 2 x 50,304 x 2,048 = 206,045,184;
    final norm 2,048. Total 6,919,161,856 (transformers' count).
    Active: 8 of 64 experts, 50,331,648 -> per layer 67,248,128; x 16 + 206,045,184 + 2,048 = 1,282,017,280.
    """
    arch = _arch("olmoe_1b_7b")
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 16_781_312}
    assert arch.moe_layers()[0].active_params() == {
        ParamGroup.ROUTER: 131_072,
        ParamGroup.SHARED_EXPERTS: 0,
        ParamGroup.ROUTED_EXPERTS: 50_331_648,
    }
    assert arch.total_params() == 6_919_161_856 == REFERENCE["olmoe_1b_7b"]["total_params"]
    assert arch.active_params() == 1_282_017_280


def test_flex_olmo_params_and_kv_by_hand():
    """FlexOlmo (7 experts of OLMo 2 7B's MLP, top 5): OLMoE's layer with post-norms, the same count.

    Attention per layer 4 x 4,096^2 = 67,108,864 + whole-projection q/k norms 2 x 4,096 -> 67,117,056.
    Experts 7 x 3 x 4,096 x 11,008 = 946,864,128; router 7 x 4,096 = 28,672; norms 8,192. Per layer
    1,014,018,048; x 32 = 32,448,577,536; embedding and untied head 2 x 100,352 x 4,096 = 822,083,584; final
    norm 4,096. Total 33,270,665,216 (transformers' count). Active: 5 experts, 676,331,520 -> per layer
    743,485,440; x 32 + 822,087,680 = 24,613,621,760.
    KV per token: 32 x 32 KV heads x 256 = 262,144 elements -> 524,288 bytes.
    """
    arch = _arch("flex_olmo_7x7b")
    assert arch.mixer_counts() == {"full_attention": 32}
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 67_117_056}
    assert arch.total_params() == 33_270_665_216 == REFERENCE["flex_olmo_7x7b"]["total_params"]
    assert arch.active_params() == 24_613_621_760
    assert kv_bytes_per_token(arch, BF16_BYTES) == 524_288


# --------------------------------------------------------------------------- DBRX


def test_dbrx_layout_and_kv_by_hand():
    """DBRX: 40 layers, 48 heads, 8 KV heads of 6,144 / 48 = 128.

    KV per token: 40 x 8 x 256 = 81,920 elements -> 163,840 bytes; at TP 8 one KV head per GPU -> 20,480 bytes,
    and at TP 16 still one (replicated, as vLLM's dbrx.py does below one head per rank).
    """
    arch = _arch("dbrx_instruct")
    assert arch.mixer_counts() == {"full_attention": 40}
    assert all(isinstance(layer.feed_forward, MoE) for layer in arch.layers)
    assert kv_bytes_per_token(arch, BF16_BYTES) == 163_840
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, 8) == 20_480
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, 16) == 20_480


def test_dbrx_params_by_hand():
    """Fused Wqkv 6,144 x (6,144 + 2 x 8 x 128) = 50,331,648 and out_proj 6,144^2 = 37,748,736, no biases
    -> 88,080,384. Experts: 16 GLUs (w1, v1, w2) of 3 x 6,144 x 10,752 = 198,180,864 -> 3,170,893,824;
    router 16 x 6,144 = 98,304; two weight-only LayerNorms 12,288. Per layer 3,259,084,800; x 40 =
    130,363,392,000. Embedding and untied head 2 x 100,352 x 6,144 = 1,233,125,376; final norm 6,144.
    Total 131,596,523,520 (transformers' count).
    Active: 4 of 16 experts, 792,723,456 -> per layer 880,914,432; x 40 + 1,233,125,376 + 6,144 = 36,469,708,800.
    """
    arch = _arch("dbrx_instruct")
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 88_080_384}
    assert arch.moe_layers()[0].params()[ParamGroup.ROUTED_EXPERTS] == 3_170_893_824
    assert arch.total_params() == 131_596_523_520 == REFERENCE["dbrx_instruct"]["total_params"]
    assert arch.active_params() == 36_469_708_800


# --------------------------------------------------------------------------- LFM2

#: LFM2-1.2B's attention layers (``full_attn_idxs``); the other ten are short convolutions.
LFM2_ATTENTION_LAYERS = [2, 5, 8, 10, 12, 14]


def test_lfm2_layout_from_full_attn_idxs():
    """The config gives ``full_attn_idxs``, not ``layer_types``: transformers derives the list from it."""
    arch = _arch("lfm2_1_2b")
    assert arch.mixer_counts() == {"short_conv": 10, "full_attention": 6}
    assert [i for i, layer in enumerate(arch.layers) if isinstance(layer.mixer, FullAttention)] == (
        LFM2_ATTENTION_LAYERS
    )
    assert all(isinstance(layer.feed_forward, DenseMLP) for layer in arch.layers)


def test_lfm2_params_by_hand():
    """LFM2-1.2B, tied embeddings.

    MLP width: block_ff_dim 12,288 auto-adjusted: int(2 x 12,288 / 3) = 8,192, x 1.0, rounded up to 256 ->
    8,192; SwiGLU 3 x 2,048 x 8,192 = 50,331,648 per layer.
    Short convolution: in_proj 2,048 x 3 x 2,048 = 12,582,912, depthwise conv 2,048 x 3 taps = 6,144,
    out_proj 2,048^2 = 4,194,304, no biases -> 16,783,360.
    Attention: q and o 2 x 2,048^2 = 8,388,608, k and v 2 x 2,048 x 8 x 64 = 2,097,152, per-head q/k norms
    2 x 64 -> 10,485,888.
    Norms 2 x 2,048 per layer. Total: 65,536 x 2,048 = 134,217,728 + 10 x 16,783,360 + 6 x 10,485,888
    + 16 x (50,331,648 + 4,096) + 2,048 = 1,170,340,608 (transformers' count).
    """
    arch = _arch("lfm2_1_2b")
    conv = arch.layers[0].mixer
    assert isinstance(conv, ShortConvMixer)
    assert conv.params() == {ParamGroup.MAMBA: 16_783_360}
    assert arch.layers[2].mixer.params() == {ParamGroup.ATTENTION: 10_485_888}
    assert arch.layers[0].feed_forward.intermediate_size == 8_192
    assert arch.total_params() == 1_170_340_608 == REFERENCE["lfm2_1_2b"]["total_params"]
    assert arch.active_params() == arch.total_params()


def test_lfm2_kv_and_conv_state_by_hand():
    """KV per token: only the 6 attention layers, 8 KV heads x (64 + 64) -> 6 x 1,024 = 6,144 elements ->
    12,288 bytes in bf16.

    State per sequence (vLLM's short_conv_state_shape: (conv_L_cache - 1) x hidden / TP, at the model dtype):
    10 conv layers x 2 x 2,048 = 40,960 elements -> 81,920 bytes; at TP 2 each GPU keeps 1,024 channels:
    10 x 2 x 1,024 x 2 = 40,960 bytes. All of it is conv state: an fp32 --state-dtype (vLLM's
    mamba_ssm_cache_dtype) does not change it.
    """
    arch = _arch("lfm2_1_2b")
    assert kv_bytes_per_token(arch, BF16_BYTES) == 12_288
    assert state_bytes_per_sequence(arch, BF16_BYTES) == 81_920
    assert state_bytes_per_sequence(arch, BF16_BYTES, tp=2) == 40_960
    assert state_bytes_per_sequence(arch, 4) == 81_920


def test_lfm2_hybrid_kv_layout_by_hand():
    """vLLM's hybrid manager at TP 1, bf16.

    A conv layer's state page: 2 x 2,048 x 2 = 8,192 bytes; an attention layer's KV per token 8 x 128 x 2 =
    2,048 bytes. The smallest 16-aligned block whose attention page holds the state: 16 tokens (32,768 bytes
    >= 8,192), so the state page is padded to 32,768. Groups: 6 attention and 10 conv layers; 10 >= 1.5 x 6,
    so groups of 6 layers: 1 attention group + ceil(10 / 6) = 2 conv groups = 3.
    """
    layout = hybrid_layout(_arch("lfm2_1_2b"), BF16_BYTES, BF16_BYTES, 1)
    assert layout is not None
    assert layout.page_bytes == 32_768
    assert layout.group_layers == 6
    assert layout.groups == 3
    kinds = {cache.kind: cache for cache in layout.types}
    assert kinds[CacheKind.STATE].state_bytes == 8_192 and kinds[CacheKind.STATE].layers == 10
    assert kinds[CacheKind.FULL].block_tokens == 16


def test_lfm2_mlp_width_rounds_up_to_block_multiple_of(tmp_path):
    """block_ff_dim 12,000: int(2 x 12,000 / 3) = 8,000, x 1.0, rounded up to a multiple of 256 -> 8,192
    (32 x 256 = 8,192 >= 8,000 > 31 x 256 = 7,936), as both transformers and vLLM size it; without
    auto-adjustment the width is taken as stated."""
    arch, _ = load_arch(_config_with(tmp_path, "lfm2_1_2b", lambda c: c.update(block_ff_dim=12_000)))
    assert arch.layers[0].feed_forward.intermediate_size == 8_192
    unadjusted = lambda c: c.update(block_ff_dim=8_000, block_auto_adjust_ff_dim=False)  # noqa: E731
    plain, _ = load_arch(_config_with(tmp_path / "plain", "lfm2_1_2b", unadjusted))
    assert plain.layers[0].feed_forward.intermediate_size == 8_000


def test_lfm2_moe_params_state_and_layout_by_hand():
    """LFM2-8B-A1B: 24 layers, 6 attention (2, 6, 10, 14, 18, 21), 18 short convolutions; tied embeddings.

    Attention 10,485,888 and conv 16,783,360 per layer, as LFM2-1.2B's (same widths). Layers 0-1 dense:
    3 x 2,048 x 7,168 = 44,040,192 (intermediate_size as stated). Layers 2-23: 32 experts of 3 x 2,048 x 1,792 =
    11,010,048 -> 352,321,536, router 32 x 2,048 = 65,536 (expert_bias a buffer). Norms 4,096 per layer.
    Total: 134,217,728 + 6 x 10,485,888 + 18 x 16,783,360 + 2 x 44,040,192 + 22 x 352,387,072 + 24 x 4,096
    + 2,048 = 8,339,929,856 (transformers' count). Active: 4 experts -> 44,105,728 per MoE layer:
    1,557,740,288.
    State per sequence: 18 x 2 x 2,048 x 2 bytes = 147,456; KV per token 6 x 8 x 128 x 2 = 12,288 bytes.
    Hybrid layout at TP 1: 6 attention and 18 conv layers, 18 >= 1.5 x 6: groups of 6, 1 + 3 = 4.
    """
    arch = _arch("lfm2_8b_a1b")
    assert arch.mixer_counts() == {"short_conv": 18, "full_attention": 6}
    assert [i for i, layer in enumerate(arch.layers) if isinstance(layer.mixer, FullAttention)] == [
        2,
        6,
        10,
        14,
        18,
        21,
    ]
    assert [i for i, layer in enumerate(arch.layers) if isinstance(layer.feed_forward, DenseMLP)] == [0, 1]
    assert arch.total_params() == 8_339_929_856 == REFERENCE["lfm2_8b_a1b"]["total_params"]
    assert arch.active_params() == 1_557_740_288
    assert state_bytes_per_sequence(arch, BF16_BYTES) == 147_456
    assert kv_bytes_per_token(arch, BF16_BYTES) == 12_288
    layout = hybrid_layout(arch, BF16_BYTES, BF16_BYTES, 1)
    assert layout is not None and (layout.group_layers, layout.groups) == (6, 4)


def test_lfm2_short_conv_splits_over_tp_by_channels():
    conv = _arch("lfm2_1_2b").layers[0].mixer
    assert conv.tp_problem(8) is None
    assert conv.tp_problem(3) == "does not divide the 2048 short-convolution channels"
    assert conv.cache_elements_per_token() == 0 and not conv.grows_with_context()


# --------------------------------------------------------------------------- Apertus


def test_apertus_layout_kv_and_params_by_hand():
    """Apertus-8B: 32 layers of full attention, 32 heads, 8 KV heads of 128.

    KV per token: 32 x 8 x 256 = 65,536 elements -> 131,072 bytes in bf16.
    Attention per layer: q and o 2 x 4,096^2 = 33,554,432, k and v 2 x 4,096 x 1,024 = 8,388,608, per-head q/k
    RMSNorm 2 x 128 -> 41,943,296. MLP: up and down 2 x 4,096 x 21,504 = 176,160,768, plus xIELU's alpha_p and
    alpha_n -> 176,160,770. Norms 2 x 4,096. Per layer 218,112,258; x 32 = 6,979,592,256. Embedding and untied
    head 2 x 131,072 x 4,096 = 1,073,741,824; final norm 4,096. Total 8,053,338,176 (transformers' count).
    """
    arch = _arch("apertus_8b")
    assert arch.mixer_counts() == {"full_attention": 32}
    assert all(isinstance(layer.feed_forward, LearnedActivationMLP) for layer in arch.layers)
    assert kv_bytes_per_token(arch, BF16_BYTES) == 131_072
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 41_943_296}
    assert arch.layers[0].feed_forward.params() == {ParamGroup.MLP: 176_160_770}
    assert arch.total_params() == 8_053_338_176 == REFERENCE["apertus_8b"]["total_params"]


def test_apertus_attention_bias_biases_q_k_v_and_o(tmp_path):
    """attention_bias: 4,096 + 1,024 + 1,024 biases on q, k, v and 4,096 on o -> 10,240 more per layer."""
    arch, _ = load_arch(_config_with(tmp_path, "apertus_8b", lambda c: c.update(attention_bias=True)))
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 41_943_296 + 10_240}


# --------------------------------------------------------------------------- AFMoE (Trinity)


def test_afmoe_layout_and_cache_by_hand():
    """Trinity Mini: every fourth layer full attention (8 of 32), the rest a 2,048-token window; 4 KV heads of 128.

    KV per token at long context (full layers only): 8 x 4 x 256 = 8,192 elements -> 16,384 bytes. The 24
    sliding layers hold at most 2,048 tokens: 24 x 4 x 256 x 2,048 x 2 bytes = 100,663,296 bytes per sequence.
    vLLM's hybrid manager: both kinds 2,048 bytes per token per layer, so one 16-token page; 24 >= 1.5 x 8,
    so groups of 8 layers: 1 full + 3 sliding = 4 groups.
    """
    arch = _arch("afmoe_trinity_mini")
    assert arch.mixer_counts() == {"gated_sliding_attention": 24, "gated_attention": 8}
    assert [i for i, layer in enumerate(arch.layers) if layer.mixer.kind == "gated_attention"] == list(range(3, 32, 4))
    assert [i for i, layer in enumerate(arch.layers) if isinstance(layer.feed_forward, DenseMLP)] == [0, 1]
    assert kv_bytes_per_token(arch, BF16_BYTES) == 16_384
    assert window_bytes_per_sequence(arch, BF16_BYTES, 100_000) == 100_663_296
    layout = hybrid_layout(arch, BF16_BYTES, BF16_BYTES, 1)
    assert layout is not None and (layout.group_layers, layout.groups, layout.page_bytes) == (8, 4, 32_768)


def test_afmoe_params_by_hand():
    """Attention per layer: q 2,048 x 32 x 128 = 8,388,608, k and v 2 x 2,048 x 512 = 2,097,152, o 8,388,608,
    the output gate 2,048 x 4,096 = 8,388,608, per-head q/k norms 256 -> 27,263,232; norms 4 x 2,048 = 8,192.
    Layers 0-1 dense: 3 x 2,048 x 6,144 = 37,748,736. Layers 2-31: 128 experts of 3 x 2,048 x 1,024 = 6,291,456
    -> 805,306,368, one shared of the same width 6,291,456, router 128 x 2,048 + expert_bias 128 = 262,272 ->
    811,860,096. Total: 32 x 27,271,424 + 2 x 37,748,736 + 30 x 811,860,096 + 2 x 200,192 x 2,048 (untied)
    + 2,048 = 26,123,974,400 (transformers' count).
    Active: 8 experts 50,331,648 + shared 6,291,456 + router 262,272 = 56,885,376 per MoE layer:
    872,685,568 + 75,497,472 + 30 x 56,885,376 + 819,988,480 = 3,474,732,800.
    """
    arch = _arch("afmoe_trinity_mini")
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 27_263_232}
    assert arch.layers[3].mixer.params() == {ParamGroup.ATTENTION: 27_263_232}
    assert arch.moe_layers()[0].active_params() == {
        ParamGroup.ROUTER: 262_272,
        ParamGroup.SHARED_EXPERTS: 6_291_456,
        ParamGroup.ROUTED_EXPERTS: 50_331_648,
    }
    assert arch.total_params() == 26_123_974_400 == REFERENCE["afmoe_trinity_mini"]["total_params"]
    assert arch.active_params() == 3_474_732_800


# --------------------------------------------------------------------------- LongCat-Flash


def test_longcat_layout_and_mla_cache_by_hand():
    """28 LongCat layers, each priced as (MLA + MLP), (MLA + MLP), (shortcut MoE): 56 MLA sublayers.

    KV per token: 56 x (kv_lora_rank 512 + qk_rope_head_dim 64) = 32,256 elements -> 64,512 bytes, the same on
    every GPU (MLA's latent is not split by heads).
    """
    arch = _arch("longcat_flash_chat")
    assert arch.mixer_counts() == {"mla": 56, "none": 28}
    assert all(isinstance(arch.layers[i].mixer, MLAAttention) for i in range(0, 84, 3))
    assert all(isinstance(arch.layers[i].feed_forward, ZeroExpertMoE) for i in range(2, 84, 3))
    assert kv_bytes_per_token(arch, BF16_BYTES) == 64_512
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, 8) == 64_512


def test_longcat_params_by_hand_and_against_transformers():
    """Per LongCat layer:
    MLA x 2: q_a 6,144 x 1,536 + norm 1,536, q_b 1,536 x 64 x 192, kv_a 6,144 x 576 + norm 512,
    kv_b 512 x 64 x 256, o 64 x 128 x 6,144 -> 90,572,800 each, 181,145,600.
    Dense MLPs x 2: 3 x 6,144 x 12,288 = 226,492,416 each, 452,984,832.
    Experts: 512 x 3 x 6,144 x 2,048 = 19,327,352,832; router over 512 + 256 identity experts 768 x 6,144 =
    4,718,592. Norms 4 x 6,144 = 24,576. Per layer 19,966,226,432; x 28 = 559,054,340,096; embedding and untied
    head 2 x 131,072 x 6,144 = 1,610,612,736; final norm 6,144. Total 560,664,958,976 (the card's 560 B).

    transformers builds gate_up_proj for 768 experts (its by_module shape [768, 4,096, 6,144]) and down_proj for
    512: its total is ours plus 256 x 4,096 x 6,144 x 28 = 180,388,626,432 phantom parameters.
    Active (every one of the 12 slots a real expert, the upper bound): per layer 181,145,600 + 452,984,832 +
    12 x 37,748,736 + 4,718,592 + 24,576 = 1,091,858,432; x 28 + 1,610,618,880 = 32,182,654,976.
    """
    arch = _arch("longcat_flash_chat")
    # Its latent norms (q_lora 1,536 + kv_lora 512 = 2,048) are counted in the norm group: 90,572,800 - 2,048.
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 90_570_752, ParamGroup.NORM: 2_048}
    moe = arch.layers[2].feed_forward
    assert moe.params()[ParamGroup.ROUTER] == 4_718_592
    assert arch.total_params() == 560_664_958_976
    assert arch.active_params() == 32_182_654_976
    reference = OVERCOUNTED["longcat_flash_chat"]
    gate_up = reference["by_module"]["model.layers.*.mlp.experts.gate_up_proj"]
    down = reference["by_module"]["model.layers.*.mlp.experts.down_proj"]
    assert gate_up["shape"] == [768, 4_096, 6_144] and down["shape"][0] == 512
    phantom = 28 * (768 - 512) * 4_096 * 6_144
    assert phantom == 180_388_626_432
    assert arch.total_params() == reference["total_params"] - phantom


# --------------------------------------------------------------------------- every fixture


@pytest.mark.parametrize("folder", sorted({*REFERENCE, *OVERCOUNTED}))
def test_new_layer_kinds_survive_a_spec_round_trip(folder):
    """A shipped model's spec is stored as JSON and read back (inputs/shipped_specs.py): each new kind (short
    convolution, gated sliding attention, learned-activation MLP, zero-expert MoE) must come back as itself."""
    arch = _arch(folder)
    again = ModelArch.model_validate(json.loads(arch.model_dump_json()))
    assert again == arch
    assert [type(layer.mixer) for layer in again.layers] == [type(layer.mixer) for layer in arch.layers]
    assert [type(layer.feed_forward) for layer in again.layers] == [type(layer.feed_forward) for layer in arch.layers]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("folder", "change", "field", "words"),
    [
        # The class default (64 experts) would price another OLMoE.
        ("olmoe_1b_7b", lambda c: c.pop("num_experts"), "num_experts", "missing"),
        # transformers would build biases vLLM's olmoe.py never loads.
        ("olmoe_1b_7b", lambda c: c.pop("intermediate_size"), "intermediate_size", "missing"),
        ("olmoe_1b_7b", lambda c: c.update(attention_bias=True), "attention_bias", "vLLM"),
        ("olmoe_1b_7b", lambda c: c.update(head_dim=64), "head_dim", "hidden_size / num_attention_heads"),
        ("flex_olmo_7x7b", lambda c: c.update(attention_bias=True), "attention_bias", "flex_olmo.py"),
        ("flex_olmo_7x7b", lambda c: c.pop("num_experts_per_tok"), "num_experts_per_tok", "missing"),
        # DbrxAttentionConfig's default is 1 KV head: a config must state its own.
        ("dbrx_instruct", lambda c: c["attn_config"].pop("kv_n_heads"), "attn_config.kv_n_heads", "missing"),
        ("dbrx_instruct", lambda c: c["attn_config"].update(kv_n_heads=7), "attn_config.kv_n_heads", "divide"),
        ("dbrx_instruct", lambda c: c["ffn_config"].pop("moe_num_experts"), "ffn_config.moe_num_experts", "missing"),
        ("dbrx_instruct", lambda c: c["ffn_config"].update(moe_top_k=17), "ffn_config.moe_top_k", "only 16"),
        ("lfm2_1_2b", lambda c: c.update(conv_dim=1024), "conv_dim", "vLLM"),
        ("lfm2_1_2b", lambda c: c.update(layer_types=["conv"] * 15 + ["mamba"]), "layer_types", "'conv'"),
        ("lfm2_1_2b", lambda c: c.pop("block_ff_dim"), "intermediate_size", "missing"),
        ("lfm2_8b_a1b", lambda c: c.pop("num_experts"), "num_experts", "missing"),
        # transformers would build attention for 'short_conv', vLLM a convolution.
        ("lfm2_8b_a1b", lambda c: c["layer_types"].__setitem__(0, "short_conv"), "layer_types", "'conv'"),
        ("lfm2_8b_a1b", lambda c: c.update(head_dim=128), "head_dim", "hidden_size / num_attention_heads"),
        ("apertus_8b", lambda c: c.update(hidden_act="silu"), "hidden_act", "xIELU"),
        ("longcat_flash_chat", lambda c: c.pop("n_routed_experts"), "n_routed_experts", "missing"),
        ("longcat_flash_chat", lambda c: c.pop("expert_ffn_hidden_size"), "expert_ffn_hidden_size", "missing"),
        ("longcat_flash_chat", lambda c: c.update(moe_topk=600), "moe_topk", "only 512"),
        ("longcat_flash_chat", lambda c: c.update(attention_bias=True), "attention_bias", "longcat_flash"),
        ("afmoe_trinity_mini", lambda c: c.update(attention_bias=True), "attention_bias", "afmoe.py"),
        ("afmoe_trinity_mini", lambda c: c.pop("moe_intermediate_size"), "moe_intermediate_size", "missing"),
        ("afmoe_trinity_mini", lambda c: c.update(layer_types=["chunked_attention"] * 32), "layer_types", "sliding"),
        ("afmoe_trinity_mini", lambda c: c.update(num_dense_layers=-1), "num_dense_layers", "whole number"),
        ("apertus_8b", lambda c: c.update(mlp_bias=True), "mlp_bias", "vLLM"),
        ("apertus_8b", lambda c: c.pop("intermediate_size"), "intermediate_size", "missing"),
    ],
)
def test_bad_config_fails_in_one_line(tmp_path, folder, change, field, words):
    message = _one_line_error(_config_with(tmp_path, folder, change))
    assert field in message and words in message


def test_dbrx_published_whole_number_for_a_float_field_is_read_as_that_float(tmp_path):
    """databricks/dbrx-instruct's config.json writes ``"moe_normalize_expert_weights": 1`` in ffn_config, which
    transformers 5.24's strict DbrxFFNConfig refuses as an int for a float field; JSON has one number type, so it
    is read as 1.0, and the model prices exactly as the fixture (which writes 1.0) does. A value that is not a
    number is still refused in one line naming the field."""
    config = json.loads((CONFIGS / "dbrx_instruct" / "config.json").read_text(encoding="utf-8"))
    assert config["ffn_config"]["moe_normalize_expert_weights"] == 1.0
    config["ffn_config"]["moe_normalize_expert_weights"] = 1
    folder = tmp_path / "dbrx"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert load_arch(str(folder))[0].total_params() == _arch("dbrx_instruct").total_params()
    config["ffn_config"]["moe_normalize_expert_weights"] = "one"
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    with pytest.raises(QuotacalcError) as caught:
        load_arch(str(folder))
    assert "\n" not in str(caught.value) and "moe_normalize_expert_weights" in str(caught.value)


@pytest.mark.parametrize("flag", ["attention_bias", "router_bias"])
def test_longcat_with_biases_it_does_not_price_is_refused(tmp_path, flag):
    message = _one_line_error(_config_with(tmp_path, "longcat_flash_chat", lambda c: c.update({flag: True})))
    assert f"{flag} adds biases quotacalc does not price yet for longcat_flash" in message
    assert "config.json" in message
