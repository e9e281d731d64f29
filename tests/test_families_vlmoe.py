"""Qwen3-VL-MoE, Kimi K2.5, Qwen3-Omni-MoE's thinker and MiMo-V2-Flash priced against transformers' own counts, with cache and active-parameter goldens
derived by hand.

``reference_params_vlmoe.json`` holds the counts transformers 5.24 builds on the meta device for the folders of
``tests/data/configs`` named in it (``tests/data/make_reference_params.py`` run on a folder holding only those;
the command is in the file's ``generated_by``). The totals are checked in tests/test_reference_counts.py with
every other test config's; the hand counts below check the same totals from the published sizes, so a wrong
reference would show too.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import config_with as _config_with
from conftest import fixture_arch as _arch
from conftest import one_line_error as _one_line_error

from quotacalc.catalog.dtypes import DTYPES
from quotacalc.core.arch import DenseMLP, FullAttention, MLAAttention, MoE, ParamGroup, SlidingWindowAttention
from quotacalc.core.memory import kv_bytes_per_token, kv_bytes_per_token_per_gpu, window_bytes_per_sequence
from quotacalc.inputs.quantization import checkpoint_layout
from quotacalc.inputs.resolve import load_arch

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"
REFERENCE_FILE = json.loads((DATA / "reference_params_vlmoe.json").read_text(encoding="utf-8"))
REFERENCE = REFERENCE_FILE["models"]
#: Whole models transformers builds beyond what vLLM loads to serve text (each entry says why).
OVERCOUNTED = REFERENCE_FILE["transformers_overcounts"]
BF16_BYTES = 2


pytestmark = pytest.mark.usefixtures("private_cache")


# --------------------------------------------------------------------------- Qwen3-VL-MoE


def test_qwen3_vl_moe_30b_layout_and_kv_by_hand():
    """Qwen3-VL-30B-A3B: 48 layers of full attention, experts in every one (``decoder_sparse_step`` 1, no
    ``mlp_only_layers``).

    KV per token: 48 layers x 4 KV heads x (128 K + 128 V) = 49,152 elements -> 98,304 bytes in bf16. At TP 8
    (and TP 4) each GPU keeps one KV head (vLLM replicates the 4 heads below one per rank): 48 x 256 x 2 = 24,576.
    """
    arch = _arch("qwen3_vl_moe_30b_a3b")
    assert arch.mixer_counts() == {"full_attention": 48}
    assert all(isinstance(layer.feed_forward, MoE) for layer in arch.layers)
    assert kv_bytes_per_token(arch, BF16_BYTES) == 98_304
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, 8) == 24_576
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, 4) == 24_576


def test_qwen3_vl_moe_30b_params_by_hand():
    """Attention per layer: q 2,048 x 4,096 = 8,388,608, k and v 2 x 2,048 x 512 = 2,097,152, o 8,388,608,
    per-head q/k RMSNorms 2 x 128 -> 18,874,624. Experts 128 x 3 x 2,048 x 768 = 603,979,776, router
    128 x 2,048 = 262,144, norms 4,096: per layer 623,120,640; x 48 = 29,909,790,720. Embedding and untied head
    2 x 151,936 x 2,048 = 622,329,856; final norm 2,048. Text 30,532,122,624.

    Vision tower (Qwen3-VL's, width 1,152, MLP 4,304, 27 blocks): patch convolution 3 x 2 x 16 x 16 x 1,152 +
    1,152 bias = 1,770,624 and a position table 2,304 x 1,152 = 2,654,208; per block two LayerNorms 4,608,
    qkv 1,152 x 3,456 + 3,456, proj 1,152^2 + 1,152, MLP 2 x 1,152 x 4,304 + 4,304 + 1,152 -> 15,239,504,
    x 27 = 411,466,608. Merger MLP from 4 x 1,152 = 4,608: 4,608^2 + 4,608 + 4,608 x 2,048 + 2,048 =
    30,677,504; the main merger's LayerNorm 2,304, three DeepStack mergers' 9,216 each -> 30,679,808 +
    92,060,160. Tower 538,631,408. Total 31,070,754,032: transformers' count, and the published checkpoint's
    (its parameter total, 31,070,754,032, as a public report of the safetensors lists it).

    Active: 8 of 128 experts 37,748,736 -> per layer 56,889,600; x 48 + 622,331,904 = 3,353,032,704.
    """
    arch = _arch("qwen3_vl_moe_30b_a3b")
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 18_874_624}
    assert arch.moe_layers()[0].params()[ParamGroup.ROUTED_EXPERTS] == 603_979_776
    assert arch.vision_params == 538_631_408
    assert arch.total_params() == 31_070_754_032 == REFERENCE["qwen3_vl_moe_30b_a3b"]["total_params"]
    assert arch.active_params() == 3_353_032_704
    assert arch.tie_word_embeddings is False


def test_qwen3_vl_moe_mlp_only_layers_are_dense(tmp_path):
    """``mlp_only_layers`` [0] makes layer 0 a dense MLP of ``intermediate_size`` (3 x 2,048 x 6,144 = 37,748,736)
    in place of its experts and router (603,979,776 + 262,144), as both engines build it."""
    config = json.loads((CONFIGS / "qwen3_vl_moe_30b_a3b" / "config.json").read_text(encoding="utf-8"))
    config["text_config"]["mlp_only_layers"] = [0]
    folder = tmp_path / "qwen3_vl_moe"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    arch = load_arch(str(folder))[0]
    assert isinstance(arch.layers[0].feed_forward, DenseMLP)
    assert arch.total_params() == 31_070_754_032 - 603_979_776 - 262_144 + 37_748_736


def test_qwen3_vl_moe_235b_params_and_kv_by_hand():
    """Qwen3-VL-235B-A22B: hidden 4,096, 64 heads, 4 KV heads of 128, 94 layers, 128 experts of 1,536.

    Attention per layer 2 x 4,096 x 8,192 + 2 x 4,096 x 512 + 256 = 71,303,424; experts 128 x 3 x 4,096 x 1,536
    = 2,415,919,104, router 524,288, norms 8,192: per layer 2,487,755,008; x 94 = 233,849,970,752. Embedding
    and head 2 x 151,936 x 4,096 = 1,244,659,712; final norm 4,096. Tower as the 30B's but projecting to 4,096:
    merger MLP 40,116,736 -> 4,424,832 + 411,466,608 + 40,119,040 + 3 x 40,125,952 = 576,388,336.
    Total 235,670,022,896 (transformers' count, and the published checkpoint's total as a public report lists it).
    Active: 8 experts 150,994,944 -> per layer 222,830,848; x 94 + 1,244,663,808 = 22,190,763,520.
    KV per token: 94 x 4 x 256 = 96,256 elements -> 192,512 bytes.
    """
    arch = _arch("qwen3_vl_moe_235b_a22b")
    assert arch.mixer_counts() == {"full_attention": 94}
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 71_303_424}
    assert arch.vision_params == 576_388_336
    assert arch.total_params() == 235_670_022_896 == REFERENCE["qwen3_vl_moe_235b_a22b"]["total_params"]
    assert arch.active_params() == 22_190_763_520
    assert kv_bytes_per_token(arch, BF16_BYTES) == 192_512


# --------------------------------------------------------------------------- Kimi K2.5


def test_kimi_k25_layout_and_mla_cache_by_hand():
    """Kimi K2.5: 61 MLA layers, the first dense (``first_k_dense_replace`` 1), experts in the other 60.

    vLLM's MLA caches the compressed latent and the shared rope key, kv_lora_rank 512 + qk_rope_head_dim 64 =
    576 elements per layer per token: 61 x 576 = 35,136 -> 70,272 bytes in bf16, the same on every rank at any
    TP (the latent is not split across heads).
    """
    arch = _arch("kimi_k2_5")
    assert arch.mixer_counts() == {"mla": 61}
    assert isinstance(arch.layers[0].feed_forward, DenseMLP)
    assert all(isinstance(layer.feed_forward, MoE) for layer in arch.layers[1:])
    assert all(isinstance(layer.mixer, MLAAttention) for layer in arch.layers)
    assert kv_bytes_per_token(arch, BF16_BYTES) == 70_272
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, 8) == 70_272


def test_kimi_k25_params_by_hand():
    """MLA per layer (hidden 7,168, 64 heads, q_lora 1,536, kv_lora 512, nope 128, rope 64, v 128): q_a
    7,168 x 1,536 = 11,010,048 and its norm 1,536; q_b 1,536 x 64 x 192 = 18,874,368; kv_a 7,168 x 576 =
    4,128,768 and its norm 512; kv_b 512 x 64 x 256 = 8,388,608; o 8,192 x 7,168 = 58,720,256 -> 101,124,096.
    Layer 0: dense MLP 3 x 7,168 x 18,432 = 396,361,728, norms 14,336 -> 497,500,160.
    Layers 1-60: 384 experts of 3 x 7,168 x 2,048 = 44,040,192 -> 16,911,433,728, one shared 44,040,192, router
    384 x 7,168 = 2,752,512 -> 17,059,364,864 per layer with attention and norms; x 60 = 1,023,561,891,840.
    Embedding and untied head 2 x 163,840 x 7,168 = 2,348,810,240; final norm 7,168. Text 1,026,408,209,408.

    MoonViT (width 1,152, MLP 4,304, 27 blocks, patch 14): patch convolution 3 x 14 x 14 x 1,152 + 1,152 =
    678,528; position grid 64 x 64 x 1,152 = 4,718,592; per block two LayerNorms 4,608, q/k/v/o 4 x (1,152^2 +
    1,152) = 5,313,024, MLP 2 x 1,152 x 4,304 + 4,304 + 1,152 = 9,921,872 -> 15,239,504, x 27 = 411,466,608;
    final LayerNorm 2,304. Projector: LayerNorm 2,304, 4,608^2 + 4,608 = 21,238,272, 4,608 x 7,168 + 7,168 =
    33,037,312 -> 54,277,888. Tower 471,143,920 (the shapes a public report of the checkpoint's tensors lists).
    Total 1,026,879,353,328 (transformers' count).

    Active: 8 experts 352,321,536 + shared 44,040,192 + router 2,752,512 -> per MoE layer 500,252,672;
    x 60 + 497,500,160 + 2,348,817,408 = 32,861,477,888.
    """
    arch = _arch("kimi_k2_5")
    # Its latent norms (q_lora 1,536 + kv_lora 512 = 2,048) are counted in the norm group: 101,124,096 - 2,048.
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 101_122_048, ParamGroup.NORM: 2_048}
    assert arch.vision_params == 471_143_920
    assert arch.total_params() == 1_026_879_353_328 == REFERENCE["kimi_k2_5"]["total_params"]
    assert arch.active_params() == 32_861_477_888
    assert arch.tie_word_embeddings is False


def test_kimi_k25_int4_weight_bytes_by_hand():
    """The published checkpoint is compressed-tensors int4 (symmetric, group 32, bf16 scales) on the routed experts
    only (``ignore``: lm_head, attention, shared experts, dense MLP). Routed experts 60 x 16,911,433,728 =
    1,014,686,023,680 parameters at 0.5 + 2 / 32 = 0.5625 B = 570,760,888,320 B; the other 12,193,329,648 at
    2 B = 24,386,659,296 B. Weights 595,147,547,616 B = 554.27 GiB: the checkpoint's tensors as a public report
    of its safetensors sums them (554.27 GB, its weight_shape tensors aside)."""
    arch = _arch("kimi_k2_5")
    config = json.loads((CONFIGS / "kimi_k2_5" / "config.json").read_text(encoding="utf-8"))
    layout = checkpoint_layout(
        config["quantization_config"], DTYPES["bf16"], source="config.json", gpu_supports=lambda dtype: True
    )
    groups = arch.params_by_group()
    assert groups[ParamGroup.ROUTED_EXPERTS] == 1_014_686_023_680
    assert layout.storage(ParamGroup.ROUTED_EXPERTS).bytes_per_param == 0.5625
    for kept in (ParamGroup.ATTENTION, ParamGroup.SHARED_EXPERTS, ParamGroup.MLP, ParamGroup.LM_HEAD):
        assert layout.storage(kept).bytes_per_param == 2
    assert layout.weight_bytes(groups) == 595_147_547_616


def test_kimi_k25_tower_read_under_either_name(tmp_path):
    """The published file names the tower's sizes ``vt_*`` (what vLLM's KimiK25VisionConfig reads), transformers
    5.24 ``hidden_size`` etc.: the same tower either way. A 26-block tower prices 15,239,504 fewer parameters."""
    config = json.loads((CONFIGS / "kimi_k2_5" / "config.json").read_text(encoding="utf-8"))
    vision = config["vision_config"]
    for legacy, canonical in (
        ("vt_hidden_size", "hidden_size"),
        ("vt_intermediate_size", "intermediate_size"),
        ("vt_num_attention_heads", "num_attention_heads"),
        ("vt_num_hidden_layers", "num_hidden_layers"),
        ("init_pos_emb_height", "pos_emb_height"),
        ("init_pos_emb_width", "pos_emb_width"),
    ):
        vision[canonical] = vision.pop(legacy)
    vision["num_hidden_layers"] = 26
    folder = tmp_path / "kimi"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    assert load_arch(str(folder))[0].vision_params == 471_143_920 - 15_239_504


# --------------------------------------------------------------------------- Qwen3-Omni-MoE


def test_qwen3_omni_thinker_layout_and_kv_by_hand():
    """The thinker's decoder: 48 layers of full attention with experts, 4 KV heads of 128, as Qwen3-VL-30B-A3B.

    KV per token: 48 x 4 x 256 = 49,152 elements -> 98,304 bytes in bf16; one KV head per GPU at TP 8 -> 24,576.
    The talker (its own 20-layer decoder) is not loaded by vLLM to serve text, so it holds no cache here.
    """
    arch = _arch("qwen3_omni_moe_30b_a3b")
    assert arch.mixer_counts() == {"full_attention": 48}
    assert all(isinstance(layer.feed_forward, MoE) for layer in arch.layers)
    assert arch.moe_layers()[0].num_shared_experts == 0
    assert kv_bytes_per_token(arch, BF16_BYTES) == 98_304
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, 8) == 24_576


def test_qwen3_omni_thinker_params_by_hand():
    """Text: Qwen3-VL-30B-A3B's decoder (623,120,640 per layer, x 48 = 29,909,790,720) with a vocabulary of
    152,064: embedding and untied head 2 x 152,064 x 2,048 = 622,854,144, final norm 2,048 -> 30,532,646,912.
    Vision tower: Qwen3-VL-30B-A3B's (out 2,048), 538,631,408.
    Audio encoder (d_model 1,280, FFN 5,120, 32 layers, 480 conv channels, 128 mel bins): convolutions 480 x 9 +
    480 = 4,800 and 2 x (480^2 x 9 + 480) = 4,148,160; the mel axis 128 -> 64 -> 32 -> 16, so conv_out
    480 x 16 x 1,280 = 9,830,400; per layer q/k/v/o 4 x (1,280^2 + 1,280) = 6,558,720, two LayerNorms 5,120,
    MLP 1,280 x 5,120 + 5,120 + 5,120 x 1,280 + 1,280 = 13,113,600 -> 19,677,440, x 32 = 629,678,080; ln_post
    2,560, proj1 1,280^2 + 1,280 = 1,639,680, proj2 1,280 x 2,048 + 2,048 = 2,623,488. Audio 647,927,168.
    Thinker 31,719,205,488: transformers' count of Qwen3OmniMoeThinkerForConditionalGeneration.

    transformers' whole Qwen3OmniMoeForConditionalGeneration adds the talker (3,324,596,480) and code2wav
    (216,016,577): 35,259,818,545, the published checkpoint's total; vLLM skips those weights.
    Active: 8 of 128 experts -> 56,889,600 per layer; x 48 + 622,856,192 = 3,353,556,992.
    """
    arch = _arch("qwen3_omni_moe_30b_a3b")
    assert arch.vision_params == 538_631_408 + 647_927_168
    assert arch.total_params() == 31_719_205_488 == REFERENCE["qwen3_omni_moe_30b_a3b"]["total_params"]
    whole = OVERCOUNTED["qwen3_omni_moe_30b_a3b"]
    assert whole["total_params"] == 35_259_818_545 == arch.total_params() + 3_324_596_480 + 216_016_577
    assert whole["by_part"]["thinker"] == arch.total_params()
    assert arch.active_params() == 3_353_556_992
    assert any("talker" in note for note in arch.notes)


def test_qwen3_omni_without_audio_output_prices_the_same_thinker(tmp_path):
    """``enable_audio_output: false`` only stops transformers building the talker and code2wav, which are not
    counted anyway: the same thinker, without the note."""
    config = json.loads((CONFIGS / "qwen3_omni_moe_30b_a3b" / "config.json").read_text(encoding="utf-8"))
    config["enable_audio_output"] = False
    folder = tmp_path / "omni"
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    arch = load_arch(str(folder))[0]
    assert arch.total_params() == 31_719_205_488
    assert not any("talker" in note for note in arch.notes)


# --------------------------------------------------------------------------- MiMo-V2-Flash

#: The published ``hybrid_layer_pattern``'s full-attention layers (0): the first and every sixth.
MIMO_FULL_LAYERS = [0, 5, 11, 17, 23, 29, 35, 41, 47]


def test_mimo_v2_flash_layout_by_hand():
    """48 layers: full attention at 0, 5, 11, ..., 47 (9), sliding-window attention elsewhere (39), window 128
    (``sliding_window_size``, what vLLM gives the layers); a dense MLP at layer 0, experts after."""
    arch = _arch("mimo_v2_flash")
    assert arch.mixer_counts() == {"full_attention": 9, "sliding_attention": 39}
    assert [i for i, layer in enumerate(arch.layers) if isinstance(layer.mixer, FullAttention)] == MIMO_FULL_LAYERS
    assert all(
        layer.mixer.window_tokens == 128 for layer in arch.layers if isinstance(layer.mixer, SlidingWindowAttention)
    )
    assert isinstance(arch.layers[0].feed_forward, DenseMLP)
    assert all(isinstance(layer.feed_forward, MoE) for layer in arch.layers[1:])


def test_mimo_v2_flash_kv_by_hand():
    """K heads of 192 and V heads of 128 are cached at their own widths (vLLM's diff-KV backend): 320 per KV head.

    Growth per token: only the 9 full layers, 4 KV heads each: 9 x 4 x 320 = 11,520 elements -> 23,040 bytes in
    bf16; at TP 8 each GPU keeps one KV head: 9 x 320 x 2 = 5,760 bytes.
    The sliding layers (8 KV heads) hold at most 128 tokens: 39 x 8 x 320 x 128 x 2 = 25,559,040 bytes per
    sequence from a context of 128 on, 39 x 2,560 x 100 x 2 = 19,968,000 at 100 tokens.
    """
    arch = _arch("mimo_v2_flash")
    assert kv_bytes_per_token(arch, BF16_BYTES) == 23_040
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, 8) == 5_760
    assert window_bytes_per_sequence(arch, BF16_BYTES, 100_000) == 25_559_040
    assert window_bytes_per_sequence(arch, BF16_BYTES, 100) == 19_968_000


def test_mimo_v2_flash_params_by_hand():
    """Full attention: q 4,096 x 64 x 192 = 50,331,648, k 4,096 x 4 x 192 = 3,145,728, v 4,096 x 4 x 128 =
    2,097,152, o 64 x 128 x 4,096 = 33,554,432 -> 89,128,960. Sliding: k and v for 8 KV heads (6,291,456 +
    4,194,304) and 64 sinks -> 94,371,904.
    Layer 0: dense MLP 3 x 4,096 x 16,384 = 201,326,592, norms 8,192 -> 290,463,744. Experts 256 x 3 x 4,096 x
    2,048 = 6,442,450,944, router 256 x 4,096 = 1,048,576: 8 full MoE layers 6,532,636,672 each =
    52,261,093,376; 39 sliding 6,537,879,616 each = 254,977,305,024. Embedding and untied head 2 x 152,576 x
    4,096 = 1,249,902,592; final norm 4,096. Total 308,778,768,832 (transformers' count; the model card's 309 B).
    Active: 8 experts 201,326,592 + router -> 291,512,320 per full MoE layer, 296,755,264 per sliding one:
    290,463,744 + 8 x 291,512,320 + 39 x 296,755,264 + 1,249,906,688 = 15,445,924,288 (the card's 15 B).
    """
    arch = _arch("mimo_v2_flash")
    assert arch.layers[0].mixer.params() == {ParamGroup.ATTENTION: 89_128_960}
    assert arch.layers[1].mixer.params() == {ParamGroup.ATTENTION: 94_371_904}
    assert arch.total_params() == 308_778_768_832 == REFERENCE["mimo_v2_flash"]["total_params"]
    assert arch.active_params() == 15_445_924_288
    assert arch.tie_word_embeddings is False


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("folder", "change", "field", "words"),
    [
        # Qwen3VLMoeTextConfig's default (60 experts) would price another model.
        ("qwen3_vl_moe_30b_a3b", lambda c: c["text_config"].pop("num_experts"), "text_config.num_experts", "missing"),
        (
            "qwen3_vl_moe_30b_a3b",
            lambda c: c["text_config"].pop("moe_intermediate_size"),
            "text_config.moe_intermediate_size",
            "missing",
        ),
        (
            "qwen3_vl_moe_30b_a3b",
            lambda c: c["vision_config"].update(deepstack_visual_indexes=3),
            "deepstack_visual_indexes",
            "must be a list",
        ),
        (
            "qwen3_omni_moe_30b_a3b",
            lambda c: c["thinker_config"]["text_config"].pop("num_experts"),
            "thinker_config.text_config.num_experts",
            "missing",
        ),
        (
            "qwen3_omni_moe_30b_a3b",
            lambda c: c["thinker_config"]["text_config"].update(shared_expert_intermediate_size=768),
            "thinker_config.text_config.shared_expert_intermediate_size",
            "neither",
        ),
        (
            "qwen3_omni_moe_30b_a3b",
            lambda c: c["thinker_config"]["audio_config"].update(d_model=0),
            "d_model",
            "positive",
        ),
        ("mimo_v2_flash", lambda c: c.pop("n_routed_experts"), "n_routed_experts", "missing"),
        # vLLM would build 4 KV heads on the sliding layers, transformers 8.
        ("mimo_v2_flash", lambda c: c.update(swa_num_key_value_heads=4), "swa_num_key_value_heads", "builds 8"),
        (
            "mimo_v2_flash",
            lambda c: c["hybrid_layer_pattern"].__setitem__(1, 0),
            "hybrid_layer_pattern",
            "disagrees",
        ),
        ("mimo_v2_flash", lambda c: c.update(moe_layer_freq=[1] * 48), "moe_layer_freq", "disagrees"),
        (
            "mimo_v2_flash",
            lambda c: c.update(add_swa_attention_sink_bias=False),
            "add_swa_attention_sink_bias",
            "sinks",
        ),
        ("kimi_k2_5", lambda c: c["text_config"].pop("n_routed_experts"), "text_config.n_routed_experts", "missing"),
        ("kimi_k2_5", lambda c: c["text_config"].pop("hidden_size"), "text_config.hidden_size", "missing"),
        ("kimi_k2_5", lambda c: c["text_config"].update(model_type="qwen3_moe"), "text_config.model_type", "kimi_k2"),
        (
            "kimi_k2_5",
            lambda c: c["vision_config"].update(merge_kernel_size=[2]),
            "vision_config.merge_kernel_size",
            "two positive integers",
        ),
        (
            "kimi_k2_5",
            lambda c: c["vision_config"].update(hidden_size=1024),
            "vision_config.hidden_size",
            "vt_hidden_size is 1152",
        ),
    ],
)
def test_bad_config_fails_in_one_line(tmp_path, folder, change, field, words):
    message = _one_line_error(_config_with(tmp_path, folder, change))
    assert field in message and words in message
