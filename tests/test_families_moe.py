"""MoE families GLM-4.5/4.6 (glm4_moe), GLM-4.7-Flash (glm4_moe_lite), MiniMax-M2, Llama 4, dots.llm1,
ERNIE 4.5 and Hunyuan-A13B priced against transformers' own counts, with cache and active-parameter goldens derived by hand.

``reference_params_moe_families.json`` holds the counts transformers 5.24 builds on the meta device for
the folders of ``tests/data/configs`` named in it (``tests/data/make_reference_params.py`` run on a
folder holding only those; the command is in the file's ``generated_by``).
The totals are checked in tests/test_reference_counts.py, with every other test config's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import config_with as _config_with
from conftest import fixture_arch as _arch
from conftest import one_line_error as _one_line_error

from quotacalc.core.arch import ChunkedLocalAttention, DenseMLP, MoE, ParamGroup
from quotacalc.core.memory import (
    attention_flops_per_output_token,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    request_kv_bytes,
    window_bytes_per_sequence,
)
from quotacalc.inputs.resolve import load_arch

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"
BF16_BYTES = 2


pytestmark = pytest.mark.usefixtures("private_cache")


# --------------------------------------------------------------------------- totals and layouts


@pytest.mark.parametrize(
    ("folder", "layer_kinds", "dense_layers"),
    [
        ("glm4_5_air", {"full_attention": 46}, [0]),  # first_k_dense_replace 1
        ("glm4_6", {"full_attention": 92}, [0, 1, 2]),  # first_k_dense_replace 3
        ("glm4_7_flash", {"mla": 47}, [0]),
        ("minimax_m2", {"full_attention": 62}, []),
        # Chunked local attention on 3 of every 4 layers (no_rope_layers 1, 1, 1, 0).
        ("llama4_scout", {"chunked_attention": 36, "full_attention": 12}, []),
        # Maverick: experts on every other layer (interleave_moe_layer_step 2), dense MLPs between.
        ("llama4_maverick_text", {"chunked_attention": 36, "full_attention": 12}, list(range(0, 48, 2))),
    ],
)
def test_layer_layout(folder, layer_kinds, dense_layers):
    arch = _arch(folder)
    assert arch.mixer_counts() == layer_kinds
    assert [i for i, layer in enumerate(arch.layers) if isinstance(layer.feed_forward, DenseMLP)] == dense_layers
    assert all(isinstance(layer.feed_forward, (DenseMLP, MoE)) for layer in arch.layers)


def test_llama4_chunked_layers_are_the_rope_layers():
    """Layers 3, 7, 11, ... (no_rope_layers 0) attend over the whole context; the others within a chunk."""
    arch = _arch("llama4_scout")
    full = [i for i, layer in enumerate(arch.layers) if layer.mixer.kind == "full_attention"]
    assert full == list(range(3, 48, 4))
    assert {layer.mixer.chunk_tokens for layer in arch.layers if isinstance(layer.mixer, ChunkedLocalAttention)} == {
        8192
    }


# --------------------------------------------------------------------------- KV goldens


@pytest.mark.parametrize(
    ("folder", "kv_bytes"),
    [
        # 46 layers x 8 KV heads x (128 K + 128 V) = 94,208 elements -> 188,416 bytes.
        ("glm4_5_air", 188_416),
        # 92 layers x 8 KV heads x 256 = 188,416 elements -> 376,832 bytes.
        ("glm4_6", 376_832),
        # MLA: 47 layers x (kv_lora_rank 512 + qk_rope_head_dim 64) = 27,072 elements -> 54,144 bytes.
        ("glm4_7_flash", 54_144),
        # 62 layers x 8 KV heads x 256 = 126,976 elements -> 253,952 bytes.
        ("minimax_m2", 253_952),
        # Only the 12 full-attention layers grow: 12 x 8 x 256 = 24,576 elements -> 49,152 bytes.
        ("llama4_scout", 49_152),
    ],
)
def test_kv_bytes_per_token_golden(folder, kv_bytes):
    assert kv_bytes_per_token(_arch(folder), BF16_BYTES) == kv_bytes


def test_glm_kv_per_gpu_splits_heads():
    """GLM-4.6 at TP 8: one of 8 KV heads per GPU -> 92 x 1 x 256 x 2 bytes = 47,104 bytes per token;
    at TP 16 each GPU still holds one (replicated) head, as vLLM does."""
    arch = _arch("glm4_6")
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, 8) == 47_104
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, 16) == 47_104


def test_llama4_chunked_cache_is_bounded_by_one_chunk():
    """Llama 4 Scout at 100,000 tokens, bf16.

    Chunked layers hold at most one chunk (vLLM's ChunkedLocalAttentionSpec frees past chunks):
    36 layers x 8 KV heads x 256 x 8,192 tokens x 2 bytes = 1,207,959,552 bytes; the 12 full layers
    hold all 100,000 tokens: 49,152 x 100,000 = 4,915,200,000 bytes. Below one chunk, every token:
    at 1,000 tokens 36 x 8 x 256 x 1,000 x 2 = 147,456,000 bytes.
    """
    arch = _arch("llama4_scout")
    assert window_bytes_per_sequence(arch, BF16_BYTES, 100_000) == 1_207_959_552
    assert window_bytes_per_sequence(arch, BF16_BYTES, 1_000) == 147_456_000
    assert request_kv_bytes(arch, 100_000, BF16_BYTES, BF16_BYTES) == 4_915_200_000 + 1_207_959_552


def test_chunked_attention_attends_from_its_chunk_start():
    """Chunk 8,192: the 10,000th token sees tokens 8,193..10,000 = 1,808 of them, not 8,192.

    Mean over a 10,000-token prompt: one full chunk (1 + ... + 8,192 = 33,558,528) and 1,808 tokens
    of the next (1 + ... + 1,808 = 1,635,336): 35,193,864 / 10,000 = 3,519.3864.
    """
    mixer = next(
        layer.mixer for layer in _arch("llama4_scout").layers if isinstance(layer.mixer, ChunkedLocalAttention)
    )
    assert mixer.attended_tokens(10_000) == 1_808
    assert mixer.attended_tokens(8_192) == 8_192
    assert mixer.attended_tokens(8_193) == 1
    assert mixer.cached_tokens(10_000) == 8_192
    assert mixer.mean_prompt_attended_tokens(10_000) == pytest.approx(3_519.3864)
    assert mixer.mean_prompt_attended_tokens(100) == pytest.approx(101 / 2)


def test_llama4_output_token_attention_flops():
    """At 10,000 tokens: 12 full layers attend 10,000 keys, 36 chunked ones 1,808.
    Per key per layer 2 x 40 heads x (128 + 128) = 20,480 FLOPs:
    20,480 x (12 x 10,000 + 36 x 1,808) = 3,790,602,240."""
    assert attention_flops_per_output_token(_arch("llama4_scout"), 10_000) == 3_790_602_240


# --------------------------------------------------------------------------- parameters by hand


def test_glm4_5_air_active_params_by_hand():
    """GLM-4.5-Air, one token.

    Attention per layer: q 4,096 x 12,288 + 12,288 bias; k, v 4,096 x 1,024 + 1,024 each; o 12,288 x 4,096,
    no bias -> 109,066,240; x 46 = 5,017,047,040.
    Layer 0 dense: 3 x 4,096 x 10,944 = 134,479,872.
    45 MoE layers: 8 of 128 experts 8 x 3 x 4,096 x 1,408 = 138,412,032, one shared 17,301,504,
    router 128 x 4,096 = 524,288 -> 156,237,824; x 45 = 7,030,702,080.
    Norms 2 x 4,096 x 46 + 4,096 = 380,928; embeddings and LM head 2 x 151,552 x 4,096 = 1,241,513,984.
    Sum: 13,424,123,904.
    """
    arch = _arch("glm4_5_air")
    moe = arch.moe_layers()[0]
    assert moe.active_params() == {
        ParamGroup.ROUTER: 524_288,
        ParamGroup.SHARED_EXPERTS: 17_301_504,
        ParamGroup.ROUTED_EXPERTS: 138_412_032,
    }
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 109_066_240}
    assert arch.active_params() == 13_424_123_904


def test_glm4_6_qk_norm_adds_two_head_dims():
    """use_qk_norm: per-head RMSNorm on q and k, 128 weights each -> 2 x 128 = 256 per layer more than
    the same attention without it: 5,120 x (12,288 + 2,048) + 12,288 + 2,048 + 12,288 x 5,120 + 256."""
    attention = _arch("glm4_6").layers[0].mixer
    assert attention.qk_norm and attention.qkv_bias and not attention.o_bias
    assert attention.params()[ParamGroup.ATTENTION] == 5120 * 14336 + 14336 + 12288 * 5120 + 256


def test_minimax_m2_per_layer_qk_norm_and_experts():
    """MiniMax-M2's q/k norms span the whole projection: 48 x 128 + 8 x 128 = 7,168 weights per layer.

    Attention: 3,072 x (6,144 + 2 x 1,024) + 6,144 x 3,072 + 7,168 = 44,047,360.
    Experts: 8 of 256, each 3 x 3,072 x 1,536 = 14,155,776 -> 113,246,208 active; router 256 x 3,072 = 786,432;
    no shared expert.
    """
    arch = _arch("minimax_m2")
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 44_047_360}
    moe = arch.moe_layers()[0]
    assert moe.active_params() == {
        ParamGroup.ROUTER: 786_432,
        ParamGroup.SHARED_EXPERTS: 0,
        ParamGroup.ROUTED_EXPERTS: 113_246_208,
    }


def test_llama4_scout_params_by_hand():
    """Llama 4 Scout: 16 experts of 8,192, top 1, and a shared expert in every one of 48 layers.

    Routed: 48 x 16 x 3 x 5,120 x 8,192 = 96,636,764,160; active 1 of 16 -> 6,039,797,760, and the
    shared expert the same again. Router 48 x 16 x 5,120 = 3,932,160.
    Vision tower (hidden 1,408, 34 layers, MLP 5,632, 16 heads, 336 px / 14 px patches):
      patch 3 x 14 x 14 x 1,408 = 827,904; class 1,408; positions (24^2 + 1) x 1,408 = 812,416;
      pre/post LayerNorms 4 x 1,408 = 5,632;
      per layer 4 x (1,408^2 + 1,408) + 2 x 1,408 x 5,632 + 5,632 + 1,408 + 4 x 1,408 = 23,882,240 -> x 34 = 811,996,160;
      adapter 5,632 x 4,096 + 4,096^2 = 39,845,888; projector 4,096 x 5,120 = 20,971,520.
      Sum 871,932,416 (the vision table quoted in SOURCES.md has the same figures per tensor).
    """
    arch = _arch("llama4_scout")
    groups = arch.params_by_group()
    assert groups[ParamGroup.ROUTED_EXPERTS] == 96_636_764_160
    assert groups[ParamGroup.SHARED_EXPERTS] == 6_039_797_760
    assert groups[ParamGroup.ROUTER] == 3_932_160
    assert arch.active_params_by_group()[ParamGroup.ROUTED_EXPERTS] == 6_039_797_760
    assert arch.vision_params == 871_932_416
    assert arch.active_params_by_group()[ParamGroup.VISION] == 0


def test_llama4_maverick_dense_layers_use_intermediate_size_mlp():
    """Maverick's 24 dense layers: 3 x 5,120 x 16,384 = 251,658,240 each; its 24 MoE layers hold 128
    experts of 8,192 (+ a shared one), top 1."""
    arch = _arch("llama4_maverick_text")
    assert arch.layers[0].feed_forward.params() == {ParamGroup.MLP: 251_658_240}
    moe = arch.moe_layers()
    assert len(moe) == 24 and moe[0].num_experts == 128 and moe[0].top_k == 1
    assert moe[0].params()[ParamGroup.SHARED_EXPERTS] == 3 * 5120 * 8192


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("folder", "key"),
    [
        ("glm4_5_air", "n_routed_experts"),  # the class default (128) would price GLM-4.5-Air's experts
        ("glm4_6", "hidden_size"),
        ("glm4_7_flash", "n_routed_experts"),
        ("minimax_m2", "num_local_experts"),
        ("minimax_m2", "num_hidden_layers"),
        ("llama4_maverick_text", "num_local_experts"),
        ("dots1", "n_routed_experts"),
        ("ernie4_5_21b_a3b", "moe_num_experts"),
        ("hunyuan_a13b", "num_experts"),
    ],
)
def test_missing_size_fails_in_one_line(tmp_path, folder, key):
    message = _one_line_error(_config_with(tmp_path, folder, lambda c: c.pop(key)))
    assert key in message and "missing" in message


def test_llama4_text_config_missing_size_names_the_nested_field(tmp_path):
    message = _one_line_error(_config_with(tmp_path, "llama4_scout", lambda c: c["text_config"].pop("hidden_size")))
    assert "text_config.hidden_size" in message and "missing" in message


def test_llama4_heads_not_dividing_names_the_nested_field(tmp_path):
    message = _one_line_error(
        _config_with(tmp_path, "llama4_scout", lambda c: c["text_config"].update(num_key_value_heads=7))
    )
    assert "text_config.num_key_value_heads" in message


def test_glm4_moe_lite_dense_prefix_disagreeing_with_layer_types(tmp_path):
    """transformers builds mlp_layer_types (one dense layer by default), vLLM reads first_k_dense_replace: refused."""
    message = _one_line_error(_config_with(tmp_path, "glm4_7_flash", lambda c: c.update(first_k_dense_replace=3)))
    assert "first_k_dense_replace" in message and "mlp_layer_types" in message


def test_minimax_m2_per_head_qk_norm_is_refused(tmp_path):
    message = _one_line_error(_config_with(tmp_path, "minimax_m2", lambda c: c.update(qk_norm_type="per_head")))
    assert "qk_norm_type" in message


def test_minimax_m2_lightning_layers_are_refused(tmp_path):
    message = _one_line_error(_config_with(tmp_path, "minimax_m2", lambda c: c["attn_type_list"].__setitem__(0, 0)))
    assert "attn_type_list" in message


def test_glm4_moe_negative_dense_prefix(tmp_path):
    message = _one_line_error(_config_with(tmp_path, "glm4_6", lambda c: c.update(first_k_dense_replace=-1)))
    assert "first_k_dense_replace" in message


# --------------------------------------------------------------------------- dots.llm1, ERNIE 4.5, Hunyuan


def test_dots1_layout_cache_and_attention_by_hand():
    """dots.llm1: layer 0 dense, 61 MoE layers; 32 KV heads (no grouping), head_dim 128.

    KV: 62 layers x 32 x (128 + 128) = 507,904 elements -> 1,015,808 bytes per token (bf16).
    Attention per layer: 4 x 4,096 x 4,096 = 67,108,864, plus per-head q/k norms 2 x 128 = 67,109,120.
    Per MoE layer active: 6 of 128 experts 6 x 3 x 4,096 x 1,408 = 103,809,024; two shared 2 x 3 x 4,096 x 1,408
    = 34,603,008; router 128 x 4,096 = 524,288.
    """
    arch = _arch("dots1")
    assert arch.mixer_counts() == {"full_attention": 62}
    assert [i for i, layer in enumerate(arch.layers) if isinstance(layer.feed_forward, DenseMLP)] == [0]
    assert kv_bytes_per_token(arch, BF16_BYTES) == 1_015_808
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 67_109_120}
    assert arch.moe_layers()[0].active_params() == {
        ParamGroup.ROUTER: 524_288,
        ParamGroup.SHARED_EXPERTS: 34_603_008,
        ParamGroup.ROUTED_EXPERTS: 103_809_024,
    }


def test_ernie4_5_moe_layout_cache_and_experts_by_hand():
    """ERNIE-4.5-21B-A3B: layer 0 dense (moe_layer_start_index 1), 27 MoE layers, tied embeddings.

    KV: 28 layers x 4 KV heads x 256 = 28,672 elements -> 57,344 bytes per token (bf16).
    Per MoE layer: router 64 x 2,560 + its e_score_correction_bias, a parameter here, 64 = 163,904;
    two shared experts 2 x 3 x 2,560 x 1,536 = 23,592,960; 6 of 64 routed 6 x 3 x 2,560 x 1,536 = 70,778,880.
    """
    arch = _arch("ernie4_5_21b_a3b")
    assert arch.mixer_counts() == {"full_attention": 28}
    assert [i for i, layer in enumerate(arch.layers) if isinstance(layer.feed_forward, DenseMLP)] == [0]
    assert arch.tie_word_embeddings
    assert kv_bytes_per_token(arch, BF16_BYTES) == 57_344
    assert arch.moe_layers()[0].active_params() == {
        ParamGroup.ROUTER: 163_904,
        ParamGroup.SHARED_EXPERTS: 23_592_960,
        ParamGroup.ROUTED_EXPERTS: 70_778_880,
    }


def test_ernie4_5_moe_biases_are_refused(tmp_path):
    """use_bias biases the LM head too, which is not counted: refused rather than priced short."""
    message = _one_line_error(_config_with(tmp_path, "ernie4_5_21b_a3b", lambda c: c.update(use_bias=True)))
    assert "use_bias" in message


def test_hunyuan_a13b_layout_cache_and_experts_by_hand():
    """Hunyuan-A13B: 64 experts of 3,072 in all 32 layers, top 8, one shared MLP, tied embeddings.

    KV: 32 layers x 8 KV heads x 256 = 65,536 elements -> 131,072 bytes per token (bf16).
    Attention per layer: 4,096 x (4,096 + 2 x 1,024) + 4,096 x 4,096 + q/k norms 2 x 128 = 41,943,296.
    Per layer active: 8 x 3 x 4,096 x 3,072 = 301,989,888 routed; shared 37,748,736; router 64 x 4,096 = 262,144.
    """
    arch = _arch("hunyuan_a13b")
    assert arch.mixer_counts() == {"full_attention": 32}
    assert len(arch.moe_layers()) == 32 and arch.tie_word_embeddings
    assert kv_bytes_per_token(arch, BF16_BYTES) == 131_072
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 41_943_296}
    assert arch.moe_layers()[0].active_params() == {
        ParamGroup.ROUTER: 262_144,
        ParamGroup.SHARED_EXPERTS: 37_748_736,
        ParamGroup.ROUTED_EXPERTS: 301_989_888,
    }


@pytest.mark.parametrize(
    ("change", "field"),
    [
        # vLLM reads moe_intermediate_size per layer; transformers builds experts of intermediate_size.
        (lambda c: c.update(moe_intermediate_size=[1536] * 32), "moe_intermediate_size"),
        (lambda c: c.update(num_shared_expert=[2] * 32), "num_shared_expert"),
        (lambda c: c.update(use_cla=True), "use_cla"),
        (lambda c: c.update(moe_topk=[8] * 31), "moe_topk"),
    ],
)
def test_hunyuan_configs_transformers_and_vllm_read_differently_are_refused(tmp_path, change, field):
    message = _one_line_error(_config_with(tmp_path, "hunyuan_a13b", change))
    assert field in message


def test_llama4_chunk_zero_fails_in_one_line(tmp_path):
    message = _one_line_error(
        _config_with(tmp_path, "llama4_maverick_text", lambda c: c.update(attention_chunk_size=0))
    )
    assert "attention_chunk_size" in message


def test_llama4_chunk_not_below_max_context_is_full_attention(tmp_path):
    """A chunk as long as the whole context bounds nothing: those layers are full attention, and the note says so."""
    path = _config_with(tmp_path, "llama4_maverick_text", lambda c: c.update(max_position_embeddings=8192))
    arch, _ = load_arch(path)
    assert arch.mixer_counts() == {"full_attention": 48}
    assert any("attention chunk 8192" in note for note in arch.notes)


def test_qwen2_moe_counts_its_qkv_biases_as_its_config_sets_them(tmp_path):
    """Qwen1.5-MoE-A2.7B by hand: untied 151,936 x 2,048 table and head; per layer q/k/v/o 4 x 2,048^2 with
    q/k/v biases 3 x 2,048 (Qwen2MoeConfig.qkv_bias, default true), 60 experts x 3 x 2,048 x 1,408, a router
    60 x 2,048, a shared expert 3 x 2,048 x 5,632 and its 2,048-wide gate, two norms; a final norm."""
    hidden, layers = 2_048, 24
    attention = 4 * hidden**2 + 3 * hidden
    moe = 60 * 3 * hidden * 1_408 + 60 * hidden + 3 * hidden * 5_632 + hidden
    total = 2 * 151_936 * hidden + layers * (attention + moe + 2 * hidden) + hidden
    assert _arch("qwen1_5_moe_a2_7b").total_params() == total == 14_315_784_192
    unbiased = _config_with(tmp_path, "qwen1_5_moe_a2_7b", lambda c: c.update(qkv_bias=False))
    assert load_arch(unbiased)[0].total_params() == total - layers * 3 * hidden


@pytest.mark.parametrize("flag", ["attention_bias", "mlp_bias"])
def test_deepseek_with_biases_vllm_never_builds_is_refused(tmp_path, flag):
    config = json.loads((Path(__file__).parent.parent / "models" / "DeepSeek-V3" / "config.json").read_text())
    config[flag] = True
    (tmp_path / "config.json").write_text(json.dumps(config))
    message = _one_line_error(str(tmp_path))
    assert f"DeepSeek MLA with {flag} is not priced yet (vLLM builds no such bias)" in message
    assert flag in message and "config.json" in message
