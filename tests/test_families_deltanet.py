"""Delta-rule hybrids (Qwen3-Next, Qwen3.5 dense and MoE, OLMo Hybrid, Kimi Linear) priced against transformers' own counts.

``reference_params_deltanet_hybrids.json`` holds the parameter counts transformers 5.24 builds on the meta
device for these folders of ``tests/data/configs`` (see ``tests/data/make_reference_params.py``);
the state goldens follow vLLM's ``MambaStateShapeCalculator.gated_delta_net_state_shape``.
The totals are checked in tests/test_reference_counts.py, with every other test config's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotacalc.core.arch import (
    FullAttention,
    GatedDeltaNetMixer,
    GatedFullAttention,
    KimiDeltaAttentionMixer,
    ParamGroup,
)
from quotacalc.core.memory import kv_bytes_per_token, state_bytes_per_sequence
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.resolve import load_arch

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"
BF16_BYTES = 2


pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.mark.parametrize(
    ("folder", "layer_kinds"),
    [
        # One full-attention layer in every four (full_attention_interval 4).
        ("qwen3_next", {"gated_deltanet": 36, "gated_attention": 12}),
        ("qwen3_5", {"gated_deltanet": 48, "gated_attention": 16}),
        ("qwen3_5_moe", {"gated_deltanet": 30, "gated_attention": 10}),
        ("qwen3_5_moe_text", {"gated_deltanet": 30, "gated_attention": 10}),
        # OLMo Hybrid's attention has no output gate: plain full attention.
        ("olmo_hybrid", {"gated_deltanet": 24, "full_attention": 8}),
        # MLA at the 1-based layers 4, 8, ..., 24 and 27 (linear_attn_config.full_attn_layers).
        ("kimi_linear", {"kda": 20, "mla": 7}),
    ],
)
def test_layer_layout(folder, layer_kinds):
    arch, _ = load_arch(str(CONFIGS / folder))
    assert arch.mixer_counts() == layer_kinds
    # The fourth layer of every four is the attention layer.
    kinds = [layer.mixer.kind for layer in arch.layers]
    linear, attention = list(layer_kinds)
    assert kinds[:4] == [linear] * 3 + [attention]


def test_qwen3_next_cache_golden():
    """Qwen3-Next-80B-A3B, bf16 cache and state, derived by hand.

    KV per token: 12 full-attention layers x 2 KV heads x (256 K + 256 V) = 12,288 elements
    -> 24,576 bytes. The 36 Gated DeltaNet layers hold no KV.
    State per sequence, each Gated DeltaNet layer (vLLM's gated_delta_net_state_shape):
      conv channels 2 x 16 key heads x 128 + 32 value heads x 128 = 8,192
      conv state (4 - 1) x 8,192 = 24,576
      recurrent state 32 value heads x 128 x 128 = 524,288
      -> 548,864 elements x 36 layers = 19,759,104 elements -> 39,518,208 bytes.
    """
    arch, _ = load_arch(str(CONFIGS / "qwen3_next"))
    assert kv_bytes_per_token(arch, BF16_BYTES) == 24_576
    assert state_bytes_per_sequence(arch, BF16_BYTES) == 39_518_208


def test_qwen3_next_state_per_gpu_splits_by_heads():
    """TP 8: each rank holds 2 key heads and 4 value heads of every Gated DeltaNet layer.

    Per layer per GPU: conv (4 - 1) x (2 x 2 x 128 + 4 x 128) = 3,072; recurrent 4 x 128 x 128 = 65,536;
    68,608 x 36 layers = 2,469,888 elements -> 4,939,776 bytes.
    """
    arch, _ = load_arch(str(CONFIGS / "qwen3_next"))
    assert state_bytes_per_sequence(arch, BF16_BYTES, tp=8) == 4_939_776


def test_qwen3_5_cache_golden():
    """Qwen3.5-27B: 48 value heads per Gated DeltaNet layer, 4 KV heads per attention layer.

    KV per token: 16 layers x 4 KV heads x 512 = 32,768 elements -> 65,536 bytes.
    State per layer: conv (4 - 1) x (2 x 16 x 128 + 48 x 128 = 10,240) = 30,720, recurrent
    48 x 128 x 128 = 786,432; 817,152 x 48 layers = 39,223,296 elements -> 78,446,592 bytes.
    """
    arch, _ = load_arch(str(CONFIGS / "qwen3_5"))
    assert kv_bytes_per_token(arch, BF16_BYTES) == 65_536
    assert state_bytes_per_sequence(arch, BF16_BYTES) == 78_446_592


def test_olmo_hybrid_cache_golden():
    """OLMo Hybrid 7B (transformers' defaults): 30 key and value heads, key dim 96, value dim 192.

    KV per token: 8 full-attention layers x 30 KV heads x (128 + 128) = 61,440 elements -> 122,880 bytes.
    State per layer: conv (4 - 1) x (2 x 30 x 96 + 30 x 192 = 11,520) = 34,560, recurrent 30 x 192 x 96
    = 552,960; 587,520 x 24 layers = 14,100,480 elements -> 28,200,960 bytes.
    """
    arch, _ = load_arch(str(CONFIGS / "olmo_hybrid"))
    assert kv_bytes_per_token(arch, BF16_BYTES) == 122_880
    assert state_bytes_per_sequence(arch, BF16_BYTES) == 28_200_960


def test_olmo_hybrid_whole_projection_qk_norms_by_hand():
    """OLMo Hybrid RMSNorms the whole query and key projections (30 x 128 values each): (30 + 30) x 128 = 7,680
    weights in each attention layer, with its attention as OLMo 2's; after attention and after the MLP every layer
    norms 2 x 3,840 = 7,680. Attention: q, k, v, o 4 x 3,840 x 3,840 (30 heads of 128) + 7,680."""
    arch, _ = load_arch(str(CONFIGS / "olmo_hybrid"))
    norms = {layer.mixer.kind: layer.norm_params for layer in arch.layers}
    assert norms == {"gated_deltanet": 7_680, "full_attention": 7_680}
    attention = next(layer.mixer for layer in arch.layers if layer.mixer.kind == "full_attention")
    assert attention.qk_norm and attention.qk_norm_whole
    assert attention.params()[ParamGroup.ATTENTION] == 4 * 3_840 * 3_840 + 7_680


def test_kimi_linear_cache_golden():
    """Kimi-Linear-48B-A3B: 7 MLA layers cache a latent; 20 KDA layers hold state, its recurrent part in fp32.

    KV per token: 7 x (512 latent + 64 rope) = 4,032 elements -> 8,064 bytes at bf16.
    State per KDA layer (vLLM's kda_state_shape and kda_state_dtype): conv (4 - 1) x 3 x 32 heads x 128
    = 36,864 values at the checkpoint's dtype (vLLM's mamba_cache_dtype); recurrent 32 x 128 x 128 = 524,288
    values in fp32: 20 x (36,864 x 2 + 524,288 x 4) = 20 x 2,170,880 = 43,417,600 bytes, whatever the SSM state
    dtype (--state-dtype, vLLM's mamba_ssm_cache_dtype, which kda_state_dtype does not read); TP 4: 8 heads a
    rank, a quarter.
    """
    arch, _ = load_arch(str(CONFIGS / "kimi_linear"))
    assert kv_bytes_per_token(arch, BF16_BYTES) == 8_064
    assert state_bytes_per_sequence(arch, BF16_BYTES) == 43_417_600
    assert state_bytes_per_sequence(arch, 4) == 43_417_600
    assert state_bytes_per_sequence(arch, BF16_BYTES, tp=4) == 43_417_600 / 4


def test_kimi_linear_layers_by_hand():
    """Kimi-Linear-48B-A3B's KDA layer and experts.

    KDA (hidden 2,304, 32 heads of 128 = 4,096 channels): q, k, v 3 x 2,304 x 4,096 = 28,311,552; their convs
    3 x 4,096 x 4 = 49,152; forget gate 2,304 x 128 + 128 x 4,096 + dt_bias 4,096 + A_log 32 = 823,328; beta
    2,304 x 32 = 73,728; output gate 2,304 x 128 + 128 x 4,096 = 819,200; norm 128; o_proj 4,096 x 2,304
    = 9,437,184 -> 39,514,272.
    Experts in layers 2-27: routed 256 x 3 x 2,304 x 1,024 = 1,811,939,328; shared 3 x 2,304 x 1,024
    = 7,077,888; router 256 x 2,304 = 589,824; 8 routed per token: 56,623,104.
    """
    arch, _ = load_arch(str(CONFIGS / "kimi_linear"))
    kda = next(layer.mixer for layer in arch.layers if isinstance(layer.mixer, KimiDeltaAttentionMixer))
    assert kda.params() == {ParamGroup.ATTENTION: 39_514_272}
    moe = arch.moe_layers()
    assert len(moe) == 26 and arch.layers[0].feed_forward.kind == "dense"
    assert moe[0].params() == {
        ParamGroup.ROUTER: 589_824,
        ParamGroup.SHARED_EXPERTS: 7_077_888,
        ParamGroup.ROUTED_EXPERTS: 1_811_939_328,
    }
    assert moe[0].active_params()[ParamGroup.ROUTED_EXPERTS] == 56_623_104


def test_qwen3_next_mixers_by_hand():
    """Per-layer parameters of Qwen3-Next-80B-A3B's two mixers.

    Gated DeltaNet: in_proj_qkvz 2,048 x (2 x 2,048 + 2 x 4,096) = 25,165,824; in_proj_ba 2,048 x 64
    = 131,072; conv1d 8,192 x 4 = 32,768; dt_bias + A_log 64; gated norm 128; out_proj 4,096 x 2,048
    = 8,388,608 -> 33,718,464.
    Gated attention: q_proj 2,048 x (16 x 256 x 2) = 16,777,216; k_proj and v_proj 2,048 x 512 each
    = 2,097,152; o_proj 4,096 x 2,048 = 8,388,608; q/k norms 2 x 256 -> 27,263,488.
    """
    arch, _ = load_arch(str(CONFIGS / "qwen3_next"))
    deltanet = next(layer.mixer for layer in arch.layers if isinstance(layer.mixer, GatedDeltaNetMixer))
    attention = next(layer.mixer for layer in arch.layers if isinstance(layer.mixer, GatedFullAttention))
    assert deltanet.params() == {ParamGroup.ATTENTION: 33_718_464}
    assert attention.params() == {ParamGroup.ATTENTION: 27_263_488}
    # The output gate widens q_proj only: the cache is plain GQA, and the layer's KV grows as full attention's.
    assert attention.cache_elements_per_token() == 2 * (256 + 256)
    assert isinstance(attention, FullAttention) and attention.grows_with_context()


def test_qwen3_next_experts_by_hand():
    """High-sparsity MoE in all 48 layers: 512 experts, 10 routed per token, one gated shared expert.

    Per layer: routed 512 x 3 x 2,048 x 512 = 1,610,612,736; shared 3 x 2,048 x 512 = 3,145,728;
    router 512 x 2,048 + shared-expert gate 2,048 = 1,050,624. Active routed: 10 x 3,145,728 = 31,457,280.
    """
    arch, _ = load_arch(str(CONFIGS / "qwen3_next"))
    moe = arch.moe_layers()
    assert len(moe) == 48
    assert moe[0].params() == {
        ParamGroup.ROUTER: 1_050_624,
        ParamGroup.SHARED_EXPERTS: 3_145_728,
        ParamGroup.ROUTED_EXPERTS: 1_610_612_736,
    }
    assert moe[0].active_params()[ParamGroup.ROUTED_EXPERTS] == 31_457_280


def test_qwen3_5_vision_tower_by_hand():
    """Qwen3.5's vision tower (hidden 1,152, 27 blocks, MLP 4,304, patch 16 x 16 x 2 frames, merge 2 x 2).

    Patch embedding 3 x 2 x 16 x 16 x 1,152 + 1,152 = 1,770,624; positions 2,304 x 1,152 = 2,654,208.
    Each block: 2 LayerNorms 4,608; qkv 1,152 x 3,456 + 3,456 = 3,984,768; proj 1,152^2 + 1,152
    = 1,328,256; MLP 2 x 1,152 x 4,304 + 4,304 + 1,152 = 9,921,872 -> 15,239,504; x 27 = 411,466,608.
    Merger (4 patches: 4,608 wide) into the 5,120-wide text model: LayerNorm 2,304; fc1 4,608^2 + 4,608
    = 21,238,272; fc2 4,608 x 5,120 + 5,120 = 23,598,080 -> 44,838,656. Total 460,730,096.
    """
    arch, _ = load_arch(str(CONFIGS / "qwen3_5"))
    assert arch.vision_params == 460_730_096
    assert arch.active_params_by_group().get(ParamGroup.VISION, 0) == 0


def test_qwen3_5_moe_experts_every_layer():
    """Qwen3.5-35B-A3B: 256 experts of 512 in every one of 40 layers, 8 routed per token.

    Active routed per layer 8 x 3 x 2,048 x 512 = 25,165,824, out of 256 x 3,145,728 = 805,306,368.
    """
    arch, _ = load_arch(str(CONFIGS / "qwen3_5_moe"))
    moe = arch.moe_layers()
    assert len(moe) == 40 and moe[0].num_shared_experts == 1 and moe[0].shared_expert_gate
    assert moe[0].params()[ParamGroup.ROUTED_EXPERTS] == 805_306_368
    assert moe[0].active_params()[ParamGroup.ROUTED_EXPERTS] == 25_165_824


def test_tp_must_divide_the_linear_attention_heads():
    """16 key heads: TP 32 cannot split them (vLLM divides both head counts by TP)."""
    arch, _ = load_arch(str(CONFIGS / "qwen3_next"))
    deltanet = next(layer.mixer for layer in arch.layers if isinstance(layer.mixer, GatedDeltaNetMixer))
    assert deltanet.tp_problem(8) is None
    assert "16 linear-attention key heads" in deltanet.tp_problem(32)


def _edited(tmp_path: Path, folder: str, edit) -> str:
    config = json.loads((CONFIGS / folder / "config.json").read_text())
    edit(config)
    target = tmp_path / f"{folder}-edited"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(config))
    return str(target)


@pytest.mark.parametrize(
    ("folder", "path", "field"),
    [
        ("qwen3_next", ("linear_num_value_heads",), "linear_num_value_heads"),
        ("qwen3_next", ("linear_key_head_dim",), "linear_key_head_dim"),
        ("qwen3_next", ("num_experts",), "num_experts"),
        ("qwen3_5", ("text_config", "linear_num_key_heads"), "text_config.linear_num_key_heads"),
        ("qwen3_5_moe", ("text_config", "num_experts"), "text_config.num_experts"),
        # Without its own sizes transformers would build its default vision tower.
        ("qwen3_5", ("vision_config", "depth"), "vision_config.depth"),
        ("qwen3_5_moe_text", ("linear_value_head_dim",), "linear_value_head_dim"),
        ("olmo_hybrid", ("intermediate_size",), "intermediate_size"),
        ("kimi_linear", ("linear_attn_config", "num_heads"), "linear_attn_config.num_heads"),
        # Without the layer lists transformers would invent an MLA-every-fourth-layer pattern.
        ("kimi_linear", ("linear_attn_config", "full_attn_layers"), "linear_attn_config.full_attn_layers"),
        ("kimi_linear", ("num_experts",), "num_experts"),
    ],
)
def test_missing_size_fails_in_one_line(tmp_path, folder, path, field):
    def drop(config):
        parent = config
        for key in path[:-1]:
            parent = parent[key]
        del parent[path[-1]]

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_edited(tmp_path, folder, drop))
    message = str(caught.value)
    assert "\n" not in message
    assert field in message and "missing" in message


@pytest.mark.parametrize(("folder", "prefix"), [("qwen3_next", ""), ("qwen3_5", "text_config.")])
def test_value_heads_not_a_multiple_of_key_heads_fails(tmp_path, folder, prefix):
    """Each key head serves a whole group of value heads; 16 key heads cannot serve 24."""

    def edit(config):
        (config["text_config"] if prefix else config)["linear_num_value_heads"] = 24

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_edited(tmp_path, folder, edit))
    message = str(caught.value)
    assert "\n" not in message
    assert f"{prefix}linear_num_value_heads" in message and "16 linear-attention key heads" in message


def test_dense_qwen3_5_with_experts_is_refused(tmp_path):
    """Experts in a dense qwen3_5 text config would be ignored by transformers: a relabelled MoE config."""

    def edit(config):
        config["text_config"]["num_experts"] = 256

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_edited(tmp_path, "qwen3_5", edit))
    assert "text_config.num_experts" in str(caught.value) and "qwen3_5_moe" in str(caught.value)


def test_unknown_layer_type_fails_in_one_line(tmp_path):
    def edit(config):
        config["layer_types"][0] = "sliding_attention"

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_edited(tmp_path, "olmo_hybrid", edit))
    message = str(caught.value)
    assert "\n" not in message
    assert "layer_types" in message and "sliding_attention" in message


def test_kimi_attention_bias_is_refused_not_miscounted(tmp_path):
    """attention_bias would bias Kimi's MLA down-projections too, which the MLA spec does not count."""

    def edit(config):
        config["attention_bias"] = True

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_edited(tmp_path, "kimi_linear", edit))
    message = str(caught.value)
    assert "\n" not in message
    assert "attention_bias" in message


@pytest.mark.parametrize(
    ("folder", "flag", "expected"),
    [
        ("qwen3_5_moe", None, "fp32"),  # text_config.mamba_ssm_dtype: float32, as vLLM keeps it
        ("qwen3_5", None, "fp32"),
        ("qwen3_5_moe", "bf16", "bf16"),  # --state-dtype wins, as --mamba-ssm-cache-dtype does in vLLM
        ("qwen3_next", None, "bf16"),  # no mamba_ssm_dtype: the checkpoint's dtype
    ],
)
def test_the_configs_ssm_dtype_is_the_default_state_dtype(folder, flag, expected):
    from quotacalc import Deployment, resolve

    inputs = resolve(Deployment(model=str(CONFIGS / folder), gpu="h100-sxm", tp=4, state_dtype=flag))
    assert inputs.state_dtype.name == expected
