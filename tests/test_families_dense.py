"""Dense-decoder families (Gemma 4, ...) priced against transformers' own counts.

``reference_params_dense_families.json`` holds the parameter counts transformers 5.24 builds on the meta device
for each of these folders of ``tests/data/configs`` (``make_reference_params.count`` on each folder; see
``tests/data/make_reference_params.py``). KV goldens are derived by hand in each test's docstring.
The totals are checked in tests/test_reference_counts.py, with every other test config's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import fixture_arch as _arch

from quotacalc import Deployment, price, resolve
from quotacalc.core.arch import ParamGroup
from quotacalc.core.memory import kv_bytes_per_token, kv_bytes_per_token_per_gpu, window_bytes_per_sequence
from quotacalc.core.replica import replica_model
from quotacalc.core.weights import engine_read, uniform_layout
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.resolve import load_arch

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"
BF16_BYTES = 2


pytestmark = pytest.mark.usefixtures("private_cache")


@pytest.mark.parametrize(
    ("folder", "layer_kinds"),
    [
        # Five sliding layers, then one full, repeated (the last layer is full).
        ("gemma4_31b", {"sliding_attention": 50, "full_attention": 10}),
        ("gemma4_e4b", {"sliding_attention": 35, "full_attention": 7}),
        # Four sliding layers, then one full.
        ("gemma4_e2b", {"sliding_attention": 28, "full_attention": 7}),
        ("gemma4_26b_a4b_text", {"sliding_attention": 25, "full_attention": 5}),
    ],
)
def test_layer_layout(folder, layer_kinds):
    assert _arch(folder).mixer_counts() == layer_kinds


def _write_config(tmp_path: Path, folder: str, edit) -> str:
    config = json.loads((CONFIGS / folder / "config.json").read_text())
    edit(config)
    target = tmp_path / f"{folder}-edited"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(config))
    return str(target)


# --------------------------------------------------------------------------- Gemma 4


def test_gemma4_31b_kv_golden():
    """Gemma 4 31B: full layers have their own heads (global_head_dim 512, 4 KV heads), sliding ones 16 x 256.

    Growing KV per token: 10 full layers x 4 KV heads x (512 K + 512 V) = 40,960 elements -> 81,920 bytes.
    (Full layers have K = V weights, no v_proj, but vLLM caches V beside K all the same.)
    Window KV at 8,192 tokens: 50 sliding layers x 16 x (256 + 256) x 1,024 window tokens
    = 419,430,400 elements -> 838,860,800 bytes.
    At TP 8 the 4 full-layer KV heads are fewer than the ranks: each rank holds one, 10 x 1 x 1,024 x 2 = 20,480.
    """
    arch = _arch("gemma4_31b")
    assert kv_bytes_per_token(arch, BF16_BYTES) == 81_920
    assert window_bytes_per_sequence(arch, BF16_BYTES, 8_192) == 838_860_800
    assert kv_bytes_per_token_per_gpu(arch, BF16_BYTES, tp=8) == 20_480


def test_gemma4_31b_full_layers_have_no_v_proj():
    """A full layer (k_eq_v): q 5,376 x 32 x 512, k 5,376 x 4 x 512, o 32 x 512 x 5,376, q/k norms 2 x 512;
    a sliding layer: q 5,376 x 32 x 256, k and v 5,376 x 16 x 256 each, o, q/k norms 2 x 256."""
    arch = _arch("gemma4_31b")
    full = arch.layers[5].mixer.params()[ParamGroup.ATTENTION]
    sliding = arch.layers[0].mixer.params()[ParamGroup.ATTENTION]
    assert full == 5_376 * 32 * 512 + 5_376 * 4 * 512 + 32 * 512 * 5_376 + 2 * 512
    assert sliding == 5_376 * 32 * 256 + 2 * 5_376 * 16 * 256 + 32 * 256 * 5_376 + 2 * 256


def test_gemma4_e4b_shared_layers_hold_no_kv():
    """Gemma 4 E4B: 42 layers, the last 18 reuse the K/V of layers 0-23, and vLLM gives them no cache.

    Layers 0-23 hold 4 full layers (5, 11, 17, 23) and 20 sliding ones; 2 KV heads each.
    Growing KV per token: 4 x 2 x (512 + 512) = 8,192 elements -> 16,384 bytes (7 full layers without
    sharing would be 28,672). Window KV at 8,192 tokens: 20 x 2 x (256 + 256) x 512 = 10,485,760 elements
    -> 20,971,520 bytes.
    """
    arch = _arch("gemma4_e4b")
    assert kv_bytes_per_token(arch, BF16_BYTES) == 16_384
    assert window_bytes_per_sequence(arch, BF16_BYTES, 8_192) == 20_971_520
    shared = arch.layers[24].mixer
    assert shared.kv_shared and shared.cache_elements_per_token() == 0
    # Only q_proj, o_proj and the query norm: 2 x 2,560 x 8 x 256 + 256.
    assert shared.params()[ParamGroup.ATTENTION] == 2 * 2_560 * 8 * 256 + 256


def test_gemma4_e2b_shared_layers_run_double_wide_mlps():
    """Gemma 4 E2B: 35 layers, the last 20 KV-shared, and those run a 2 x 6,144 = 12,288-wide MLP
    (use_double_wide_mlp). One KV head each.

    Layers 0-14 cache: 3 full (4, 9, 14) x 1 x (512 + 512) = 3,072 elements -> 6,144 bytes per token; 12 sliding
    x 1 x (256 + 256) x 512 window tokens = 3,145,728 elements -> 6,291,456 bytes at 8,192 tokens.
    """
    arch = _arch("gemma4_e2b")
    widths = [layer.feed_forward.intermediate_size for layer in arch.layers]
    assert widths == [6_144] * 15 + [12_288] * 20
    assert kv_bytes_per_token(arch, BF16_BYTES) == 6_144
    assert window_bytes_per_sequence(arch, BF16_BYTES, 8_192) == 6_291_456


def test_gemma4_e2b_shared_layers_read_their_producers_cache_in_decode():
    """A KV-shared layer holds no cache but its attention reads the producing layer's, so a decode step reads
    the KV of all 35 layers while the pool holds that of 15.

    E2B at 8,192 tokens, TP 1, BF16 (layer kinds in the test above): reads 7 full layers x 1 x (512 + 512) x
    8,192 x 2 B = 117,440,512 B plus 28 sliding x 1 x (256 + 256) x 512 x 2 B = 14,680,064 B:
    132,120,576 B a sequence, 16 sequences 2,113,929,216 B. Held: 3 x 2,048 x 8,192 + 12 x 1,024 x 512 =
    56,623,104 B a sequence.
    """
    inputs = resolve(Deployment(model=str(CONFIGS / "gemma4_e2b"), gpu="h100-sxm", tp=1, context=8_192, batch=16))
    read = (7 * 1_024 * 8_192 + 28 * 512 * 512) * BF16_BYTES
    held = (3 * 1_024 * 8_192 + 12 * 512 * 512) * BF16_BYTES
    assert price(inputs).decode_kv_bytes_per_gpu == 16 * read == 2_113_929_216
    model = replica_model(inputs, kv_pool_bytes_per_gpu=1e10)
    assert model.sequence_kv_read_bytes_per_gpu(8_192) == read
    assert model.sequence_kv_bytes_per_gpu(8_192) == held == 56_623_104
    # The shared sliding layers attend over their window too: 28 layers' attention FLOPs, not 12.
    per_window = dict(model.sliding_attention)[512]
    assert per_window == 28 * 2 * 8 * (256 + 256)


def test_gemma4_e4b_per_layer_embeddings_are_gathered_not_read():
    """E4B's per-layer input table: 262,144 rows x 42 layers x 256 = 2,818,572,288 parameters, in the
    embedding group; a decode step gathers its rows, so the engine reads none of it (the main table is
    tied to the head, so that one is read), and no FLOPs are spent on it."""
    arch = _arch("gemma4_e4b")
    assert arch.per_layer_embedding_params == 2_818_572_288
    assert arch.params_by_group()[ParamGroup.EMBEDDING] == 262_144 * 2_560 + 2_818_572_288
    layout = uniform_layout("bf16", 2.0, "bf16", "test")
    assert engine_read(arch, layout).embedding_bytes == 2_818_572_288 * 2
    # Nor does a token multiply it: the active parameters keep only the (tied) vocabulary table.
    assert arch.active_params_by_group()[ParamGroup.EMBEDDING] == 262_144 * 2_560


def test_gemma4_26b_a4b_experts():
    """Gemma 4 26B-A4B: in each of 30 layers a 128-expert block (top 8, 704 wide) beside a 2,112-wide MLP.

    Per layer: routed 128 x 3 x 2,816 x 704 = 761,266,176; the dense MLP, priced as one shared expert,
    3 x 2,816 x 2,112 = 17,842,176; router 2,816 x 128 + 2,816 (input scale) + 128 (per-expert scale)
    = 363,392. Active: 8 routed experts, 47,579,136.
    """
    arch = _arch("gemma4_26b_a4b_text")
    moe = arch.moe_layers()
    assert len(moe) == 30
    assert moe[0].params() == {
        ParamGroup.ROUTER: 363_392,
        ParamGroup.SHARED_EXPERTS: 17_842_176,
        ParamGroup.ROUTED_EXPERTS: 761_266_176,
    }
    assert moe[0].active_params()[ParamGroup.ROUTED_EXPERTS] == 8 * 3 * 2_816 * 704


def test_gemma4_kv_sharing_without_a_producer_fails_in_one_line(tmp_path):
    """Sharing every layer's K/V leaves no layer to compute them."""

    def share_all(config):
        config["text_config"]["num_kv_shared_layers"] = 42

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "gemma4_e4b", share_all))
    message = str(caught.value)
    assert "\n" not in message and "text_config.num_kv_shared_layers" in message


def test_gemma4_missing_hidden_size_fails_in_one_line(tmp_path):
    def drop(config):
        del config["text_config"]["hidden_size"]

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "gemma4_31b", drop))
    message = str(caught.value)
    assert "\n" not in message and "text_config.hidden_size" in message and "missing" in message


# --------------------------------------------------------------------------- plain decoders (DecoderFamily)


@pytest.mark.parametrize(
    ("folder", "layer_kinds"),
    [
        ("olmo2_7b", {"full_attention": 32}),
        # Three sliding layers, then one full (Olmo3Config's default pattern, stated in layer_types).
        ("olmo3_7b", {"sliding_attention": 24, "full_attention": 8}),
        ("smollm3_3b", {"full_attention": 36}),
        ("seed_oss_36b", {"full_attention": 64}),
        # "LLLG": three local layers, one global.
        ("exaone4_32b", {"sliding_attention": 48, "full_attention": 16}),
        ("ernie4_5_0p3b", {"full_attention": 18}),
        ("cohere2_7b", {"sliding_attention": 24, "full_attention": 8}),
        ("granitemoe_3b", {"full_attention": 32}),
        # Its window (131,072) is no shorter than its context: full attention, with a note.
        ("phimoe_42b", {"full_attention": 32}),
        ("mistral3_24b", {"full_attention": 40}),
    ],
)
def test_dense_family_layer_layout(folder, layer_kinds):
    assert _arch(folder).mixer_counts() == layer_kinds


@pytest.mark.parametrize(
    ("folder", "kv_bytes"),
    [
        # Growing KV per token, bf16: full layers x KV heads x (K + V head_dim) x 2 bytes.
        ("olmo2_7b", 32 * 32 * 256 * 2),  # 524,288
        ("olmo3_7b", 8 * 32 * 256 * 2),  # 8 full layers of 32: 131,072
        ("smollm3_3b", 36 * 4 * 256 * 2),  # NoPE layers cache K and V all the same: 73,728
        ("seed_oss_36b", 64 * 8 * 256 * 2),  # 262,144
        ("exaone4_32b", 16 * 8 * 256 * 2),  # 16 global layers: 65,536
        ("ernie4_5_0p3b", 18 * 2 * 256 * 2),  # 18,432
        ("cohere2_7b", 8 * 8 * 256 * 2),  # 8 global layers: 32,768
        ("granitemoe_3b", 32 * 8 * 128 * 2),  # head_dim 1,536 / 24 = 64: 65,536
        ("phimoe_42b", 32 * 8 * 256 * 2),  # 131,072
        ("mistral3_24b", 40 * 8 * 256 * 2),  # 163,840
    ],
)
def test_dense_family_kv_golden(folder, kv_bytes):
    assert kv_bytes_per_token(_arch(folder), BF16_BYTES) == kv_bytes


def test_olmo3_window_kv_golden():
    """OLMo 3 7B at 8,192 tokens: 24 sliding layers x 32 KV heads x (128 + 128) x 4,096 window tokens
    = 805,306,368 elements -> 1,610,612,736 bytes (the 8 full layers' KV is in the per-token figure)."""
    assert window_bytes_per_sequence(_arch("olmo3_7b"), BF16_BYTES, 8_192) == 1_610_612_736


def test_olmo2_qk_norms_span_the_whole_projection():
    """OLMo 2 7B: q_norm over 32 x 128 and k_norm over 32 x 128, not one head_dim each.
    Attention per layer: 4 x 4,096² + 4,096 + 4,096 = 67,117,056."""
    attention = _arch("olmo2_7b").layers[0].mixer.params()[ParamGroup.ATTENTION]
    assert attention == 4 * 4_096**2 + 4_096 + 4_096


def test_cohere2_has_one_norm_per_layer():
    """Command R7B runs attention and MLP in parallel after one weight-only LayerNorm: 4,096 per layer."""
    assert _arch("cohere2_7b").layers[0].norm_params == 4_096


def test_granitemoe_experts():
    """Granite 3.1 3B-A800M: 40 experts of 512 (gated), top 8, router 1,536 x 40 without bias.

    Per layer: routed 40 x 3 x 1,536 x 512 = 94,371,840; active 8 x 3 x 1,536 x 512 = 18,874,368.
    """
    moe = _arch("granitemoe_3b").moe_layers()
    assert len(moe) == 32
    assert moe[0].params() == {
        ParamGroup.ROUTER: 61_440,
        ParamGroup.SHARED_EXPERTS: 0,
        ParamGroup.ROUTED_EXPERTS: 94_371_840,
    }
    assert moe[0].active_params()[ParamGroup.ROUTED_EXPERTS] == 18_874_368


def test_phimoe_layernorm_and_head_biases():
    """Phi-3.5-MoE: LayerNorms with biases (2 x 2 x 4,096 per layer, 2 x 4,096 final), a 32,064-entry bias on
    the LM head, biased q/k/v/o, and 2 of 16 experts (3 x 4,096 x 6,400 each) active per token."""
    arch = _arch("phimoe_42b")
    assert arch.layers[0].norm_params == 16_384 and arch.final_norm_params == 8_192
    assert arch.params_by_group()[ParamGroup.LM_HEAD] == 32_064 * 4_096 + 32_064
    attention = arch.layers[0].mixer.params()[ParamGroup.ATTENTION]
    assert attention == 2 * 4_096 * 4_096 + 2 * 4_096 * 1_024 + 4_096 + 2 * 1_024 + 4_096
    assert arch.moe_layers()[0].active_params()[ParamGroup.ROUTED_EXPERTS] == 2 * 3 * 4_096 * 6_400


def test_mistral3_vision_tower_by_hand():
    """Mistral 3's Pixtral tower and projector (vision hidden 1,024, 24 layers, MLP 4,096, patch 14; text 5,120).

    Pixtral: patch conv 3 x 14² x 1,024 = 602,112; pre-norm 1,024; per layer 4 x 1,024² + 3 x 1,024 x 4,096
    + 2 x 1,024 = 16,779,264, x 24 = 402,702,336. Projector: norm 1,024; merger (1,024 x 2²) x 1,024 = 4,194,304;
    linear_1 1,024 x 5,120 = 5,242,880; linear_2 5,120² = 26,214,400. Total 438,958,080, idle for text tokens.
    """
    arch = _arch("mistral3_24b")
    assert arch.vision_params == 438_958_080
    assert arch.total_params() - arch.active_params() == 438_958_080


def test_mistral3_top_level_tie_flag_decides(tmp_path):
    """transformers ties the head when the wrapper's tie_word_embeddings (default true) says so; a config that
    unties it gets a separate 131,072 x 5,120 head."""

    def untie(config):
        config["tie_word_embeddings"] = False

    tied = _arch("mistral3_24b")
    untied = load_arch(_write_config(tmp_path, "mistral3_24b", untie))[0]
    assert not untied.tie_word_embeddings
    assert untied.total_params() - tied.total_params() == 131_072 * 5_120


@pytest.mark.parametrize(
    ("folder", "field"),
    [
        ("olmo2_7b", "hidden_size"),
        ("olmo3_7b", "num_hidden_layers"),
        ("smollm3_3b", "num_attention_heads"),
        ("seed_oss_36b", "hidden_size"),
        ("exaone4_32b", "hidden_size"),
        ("ernie4_5_0p3b", "hidden_size"),
        ("cohere2_7b", "num_hidden_layers"),
        ("granitemoe_3b", "num_local_experts"),
        ("phimoe_42b", "num_local_experts"),
        ("mistral3_24b", "text_config.hidden_size"),
    ],
)
def test_dense_family_missing_size_fails_in_one_line(tmp_path, folder, field):
    def drop(config):
        *parents, key = field.split(".")
        target = config
        for parent in parents:
            target = target[parent]
        del target[key]

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, folder, drop))
    message = str(caught.value)
    assert "\n" not in message and field in message and "missing" in message


def test_mistral3_with_an_unpriced_vision_tower_fails_in_one_line(tmp_path):
    def swap(config):
        config["vision_config"] = {"model_type": "siglip_vision_model"}

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "mistral3_24b", swap))
    message = str(caught.value)
    assert "\n" not in message and "vision_config.model_type" in message and "siglip_vision_model" in message


def test_olmo3_layer_types_of_the_wrong_length_fail_in_one_line(tmp_path):
    def shorten(config):
        config["layer_types"] = config["layer_types"][:-1]

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "olmo3_7b", shorten))
    assert "\n" not in str(caught.value) and "layer_types" in str(caught.value)


def test_exaone4_layer_count_against_layer_types_fails_in_one_line(tmp_path):
    """Without num_hidden_layers the class default (32) meets 64 layer_types: transformers' validator refuses it,
    and the line names the field and the cause, not the validator's header."""

    def drop(config):
        del config["num_hidden_layers"]

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "exaone4_32b", drop))
    message = str(caught.value)
    assert "\n" not in message and ": num_hidden_layers: transformers rejects the config" in message
    assert "must be equal to the number of `layer_types` (64)" in message


# --------------------------------------------------------------------------- older dense families


@pytest.mark.parametrize(
    ("folder", "layer_kinds", "kv_bytes"),
    [
        # (layer kinds, growing KV per token in bf16: full layers x KV heads x (K + V head_dim) x 2 bytes)
        ("gemma_7b", {"full_attention": 28}, 28 * 16 * 512 * 2),  # 458,752
        ("glm4_9b", {"full_attention": 40}, 40 * 2 * 256 * 2),  # 40,960
        ("cohere_104b", {"full_attention": 64}, 64 * 8 * 256 * 2),  # 262,144
        # Every layer windowed at 4,096 (sliding_window, no layer_types): nothing grows past the window.
        ("starcoder2_15b", {"sliding_attention": 40}, 0),
        ("olmo_7b", {"full_attention": 32}, 32 * 32 * 256 * 2),  # 524,288
        ("helium_2b", {"full_attention": 28}, 28 * 8 * 256 * 2),  # 114,688
        ("arcee_afm_4p5b", {"full_attention": 36}, 36 * 4 * 256 * 2),  # 73,728
        ("glm_9b", {"full_attention": 40}, 40 * 2 * 256 * 2),  # 40,960
        ("hunyuan_7b", {"full_attention": 32}, 32 * 8 * 256 * 2),  # 131,072
        ("phi_2", {"full_attention": 32}, 32 * 32 * 160 * 2),  # head_dim 2,560 / 32 = 80: 327,680
        ("nemotron_8b", {"full_attention": 32}, 32 * 32 * 256 * 2),  # 524,288
    ],
)
def test_older_dense_family_layout_and_kv(folder, layer_kinds, kv_bytes):
    arch = _arch(folder)
    assert arch.mixer_counts() == layer_kinds
    assert kv_bytes_per_token(arch, BF16_BYTES) == kv_bytes


def test_starcoder2_window_kv_and_plain_biased_mlp():
    """StarCoder2-15B: a plain MLP with biases (c_fc 6,144 x 24,576 + 24,576, c_proj 24,576 x 6,144 + 6,144),
    LayerNorms with biases (2 x 2 x 6,144 per layer). Window KV at 16,384 tokens: 40 layers x 4 KV heads
    x (128 + 128) x 4,096 = 167,772,160 elements -> 335,544,320 bytes."""
    arch = _arch("starcoder2_15b")
    mlp = arch.layers[0].feed_forward
    assert not mlp.gated and mlp.params()[ParamGroup.MLP] == 2 * 6_144 * 24_576 + 24_576 + 6_144
    assert arch.layers[0].norm_params == 4 * 6_144 and arch.final_norm_params == 2 * 6_144
    assert window_bytes_per_sequence(arch, BF16_BYTES, 16_384) == 335_544_320


def test_starcoder2_as_published_has_its_own_lm_head():
    """bigcode/starcoder2-15b's published config states tie_word_embeddings: false (the fixture without the key
    is the tied variant, counted by transformers in reference_params_dense_families.json): one more matrix of
    vocabulary x hidden = 49,152 x 6,144."""
    tied = json.loads((Path(__file__).parent / "data" / "reference_params_dense_families.json").read_text())
    tied_total = tied["models"]["starcoder2_15b"]["total_params"]
    arch = _arch("starcoder2_15b_published")
    assert not arch.tie_word_embeddings
    assert arch.total_params() == tied_total + 49_152 * 6_144 == 15_957_889_024
    assert arch.params_by_group()[ParamGroup.LM_HEAD] == 49_152 * 6_144


def test_cohere_qk_norms_span_the_whole_projection():
    """Command R+ (use_qk_norm): q_norm over 96 x 128, k_norm over 8 x 128; one LayerNorm weight per layer.
    Attention: q 12,288 x 12,288, k and v 12,288 x 1,024 each, o 12,288 x 12,288, norms 12,288 + 1,024."""
    arch = _arch("cohere_104b")
    attention = arch.layers[0].mixer.params()[ParamGroup.ATTENTION]
    assert attention == 2 * 12_288**2 + 2 * 12_288 * 1_024 + 12_288 + 1_024
    assert arch.layers[0].norm_params == 12_288


def test_olmo_layernorms_have_no_weights():
    arch = _arch("olmo_7b")
    assert arch.layers[0].norm_params == 0 and arch.final_norm_params == 0


@pytest.mark.parametrize(
    ("folder", "field"),
    [
        ("gemma_7b", "hidden_size"),
        ("glm4_9b", "num_attention_heads"),
        ("cohere_104b", "num_hidden_layers"),
        ("starcoder2_15b", "hidden_size"),
        ("olmo_7b", "num_hidden_layers"),
        ("helium_2b", "hidden_size"),
        ("arcee_afm_4p5b", "num_hidden_layers"),
        ("glm_9b", "hidden_size"),
        ("hunyuan_7b", "num_attention_heads"),
        ("phi_2", "hidden_size"),
        ("nemotron_8b", "num_hidden_layers"),
    ],
)
def test_older_dense_family_missing_size_fails_in_one_line(tmp_path, folder, field):
    def drop(config):
        del config[field]

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, folder, drop))
    message = str(caught.value)
    assert "\n" not in message and field in message and "missing" in message


def test_a_dense_family_with_experts_is_refused(tmp_path):
    """A glm4 config carrying 8 experts is a relabelled MoE config: refused, naming the field."""

    def relabel(config):
        config["num_experts"] = 8

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "glm4_9b", relabel))
    message = str(caught.value)
    assert "\n" not in message and "num_experts" in message and "glm4" in message


@pytest.mark.parametrize(
    ("folder", "edit", "field"),
    [
        # Gemma 4 names its top-k top_k_experts, and its full layers' KV heads num_global_key_value_heads.
        ("gemma4_26b_a4b_text", {"top_k_experts": 200}, "top_k_experts"),
        ("gemma4_26b_a4b_text", {"num_global_key_value_heads": 3}, "num_global_key_value_heads"),
        ("granitemoe_3b", {"num_experts_per_tok": 41}, "num_experts_per_tok"),
        # The MoE families' own names for top-k (tests/data/configs, each config's key).
        ("hunyuan_a13b", {"moe_topk": [300] * 32}, "moe_topk"),
        ("ernie4_5_21b_a3b", {"moe_k": 300}, "moe_k"),
        ("kimi_linear", {"num_experts_per_token": 300}, "num_experts_per_token"),
        ("glm4_5_air", {"num_experts_per_tok": 300}, "num_experts_per_tok"),
    ],
)
def test_inconsistent_sizes_name_the_family_field(tmp_path, folder, edit, field):
    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, folder, lambda config: config.update(edit)))
    message = str(caught.value)
    assert "\n" not in message and f": {field}: " in message


def test_phi_biases_by_hand():
    """Phi-2: one LayerNorm (2 x 2,560) per parallel block, a biased plain MLP (2 x 2,560 x 10,240 + 10,240 + 2,560),
    biased q/k/v/dense (4 x 2,560² + 4 x 2,560), a 51,200-entry bias on the LM head."""
    arch = _arch("phi_2")
    layer = arch.layers[0]
    assert layer.norm_params == 5_120 and arch.final_norm_params == 5_120
    assert layer.feed_forward.params()[ParamGroup.MLP] == 2 * 2_560 * 10_240 + 10_240 + 2_560
    assert layer.mixer.params()[ParamGroup.ATTENTION] == 4 * 2_560**2 + 4 * 2_560
    assert arch.params_by_group()[ParamGroup.LM_HEAD] == 51_200 * 2_560 + 51_200


def test_phi_qk_layernorm_is_refused_not_ignored(tmp_path):
    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "phi_2", lambda config: config.update(qk_layernorm=True)))
    message = str(caught.value)
    assert "\n" not in message and ": qk_layernorm: " in message and "not price" in message


def test_nemotron_layernorm1p_biases_and_plain_mlp():
    """Nemotron: LayerNorm1P has a weight and a bias (2 x 2 x 4,096 per layer, 2 x 4,096 final); the ReLU² MLP is
    plain, up and down only (2 x 4,096 x 16,384)."""
    arch = _arch("nemotron_8b")
    assert arch.layers[0].norm_params == 16_384 and arch.final_norm_params == 8_192
    assert arch.layers[0].feed_forward.params()[ParamGroup.MLP] == 2 * 4_096 * 16_384


def test_gemma4_replicated_per_layer_gates_are_named_in_explain():
    """E4B at TP 8: the per-layer input gate and projection (2 x 2,560 x 256 a layer, x 42 = 55,050,240 params,
    110,100,480 B in bf16) are ReplicatedLinear in vLLM, whole on every rank: + 7/8 of them, 96,337,920 B."""
    result = price(resolve(Deployment(model=str(CONFIGS / "gemma4_e4b"), gpu="h100-sxm", tp=8)))
    step = {step.name: step for step in result.steps}["weight_bytes_per_gpu"]
    assert step.substituted.endswith(" / 8 + 96,337,920 + 0")
    assert step.note.startswith("110,100,480 B of layers the engine keeps whole on every rank")
    assert "Gemma 4's per-layer input gates and projections" in step.note


# --------------------------------------------------------------------------- Qwen2.5-VL-style towers (Qwen2.5-VL, EXAONE 4.5)


def test_exaone4_5_layout_kv_and_vision_by_hand():
    """EXAONE 4.5 at a public test's reduced depth: 4 text layers "LLLG", 2 vision blocks.

    KV per token: 1 global layer x 8 KV heads x (128 + 128) x 2 B = 4,096 B.
    Vision (hidden 2,048, 32 heads of 64, 8 KV heads, MLP 5,120, patch 14, temporal 2, merge 2, out 5,120):
    patch 3 x 2 x 14² x 2,048 = 2,408,448; per block norms 4,096 + q/k/v 2,048 x 3,072 + 3,072 + proj 2,048²
    + 2,048 + MLP 3 x 2,048 x 5,120 + 2 x 5,120 + 2,048 = 41,964,544, x 2 = 83,929,088; merger 2,048
    + 8,192² + 8,192 + 8,192 x 5,120 + 5,120 = 109,067,264. Total 195,404,800.
    """
    arch = _arch("exaone4_5_reduced")
    assert arch.mixer_counts() == {"sliding_attention": 3, "full_attention": 1}
    assert kv_bytes_per_token(arch, BF16_BYTES) == 4_096
    assert arch.vision_params == 195_404_800


def test_exaone4_5_ties_by_the_wrappers_flag(tmp_path):
    """transformers ties the head by the wrapper's tie_word_embeddings (default false), not text_config's:
    a top-level true drops the 153,600 x 5,120 head (2,916,506,624 on the meta device, checked by hand here)."""
    tied = load_arch(_write_config(tmp_path, "exaone4_5_reduced", lambda c: c.update(tie_word_embeddings=True)))[0]
    assert tied.total_params() == 3_702_938_624 - 153_600 * 5_120


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda config: config["text_config"].pop("hidden_size"), "text_config.hidden_size"),
        (lambda config: config["vision_config"].update(num_heads=30), "vision_config.num_heads"),
    ],
)
def test_exaone4_5_bad_sizes_fail_in_one_line(tmp_path, edit, field):
    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "exaone4_5_reduced", edit))
    message = str(caught.value)
    assert "\n" not in message and f": {field}: " in message


def test_qwen2_5_vl_layout_kv_and_vision_by_hand():
    """Qwen2.5-VL-7B, a flat published config (transformers moves the text sizes into text_config).

    KV per token: 28 layers x 4 KV heads x (128 + 128) x 2 B = 57,344 B (use_sliding_window false: all full).
    Vision (hidden 1,280, 16 heads, MLP 3,420, 32 blocks, out 3,584): patch 3 x 2 x 14² x 1,280 = 1,505,280;
    per block norms 2,560 + q/k/v 1,280 x 3,840 + 3,840 + proj 1,280² + 1,280 + MLP 3 x 1,280 x 3,420 + 2 x 3,420
    + 1,280 = 19,702,200, x 32 = 630,470,400; merger 1,280 + 5,120² + 5,120 + 5,120 x 3,584 + 3,584 = 44,574,464.
    Total 676,550,144.
    """
    arch = _arch("qwen2_5_vl_7b")
    assert arch.mixer_counts() == {"full_attention": 28}
    assert kv_bytes_per_token(arch, BF16_BYTES) == 57_344
    assert arch.vision_params == 676_550_144


def test_qwen2_5_vl_flat_config_errors_name_the_top_level_field(tmp_path):
    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "qwen2_5_vl_7b", lambda config: config.pop("num_hidden_layers")))
    message = str(caught.value)
    assert "\n" not in message and ": num_hidden_layers: missing" in message


def test_qwen3_vl_layout_kv_and_vision_by_hand():
    """Qwen3-VL-8B: a Qwen3 decoder (36 layers, 8 KV heads of 128: 36 x 8 x 256 x 2 B = 147,456 B a token).

    Vision (hidden 1,152, MLP 4,304, patch 16, 27 blocks, out 4,096, DeepStack at 8/16/24): patch conv
    3 x 2 x 16² x 1,152 + 1,152 and position table 2,304 x 1,152: 4,424,832; per block LayerNorms 4,608 + q/k/v
    1,152 x 3,456 + 3,456 + proj 1,152² + 1,152 + MLP 2 x 1,152 x 4,304 + 4,304 + 1,152 = 15,239,504, x 27
    = 411,466,608; merger 2 x 1,152 + 4,608² + 4,608 + 4,608 x 4,096 + 4,096 = 40,119,040; three DeepStack
    mergers, their LayerNorm over 4,608: 3 x 40,125,952 = 120,377,856. Total 576,388,336.
    """
    arch = _arch("qwen3_vl_8b")
    assert arch.mixer_counts() == {"full_attention": 36}
    assert kv_bytes_per_token(arch, BF16_BYTES) == 147_456
    assert arch.vision_params == 576_388_336


def test_qwen3_vl_bad_deepstack_list_fails_in_one_line(tmp_path):
    def edit(config):
        config["vision_config"]["deepstack_visual_indexes"] = 8

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "qwen3_vl_8b", edit))
    message = str(caught.value)
    assert "\n" not in message and "deepstack_visual_indexes" in message


def test_qwen2_vl_layout_kv_and_vision_by_hand():
    """Qwen2-VL-7B (flat config): the Qwen2.5-VL-7B decoder (57,344 B of KV a token) with the older tower.

    Vision (embed_dim 1,280, MLP 4 x 1,280 = 5,120, 32 blocks, out 3,584): patch 3 x 2 x 14² x 1,280 = 1,505,280;
    per block LayerNorms 5,120 + q/k/v 1,280 x 3,840 + 3,840 + proj 1,280² + 1,280 + MLP 2 x 1,280 x 5,120 + 5,120
    + 1,280 = 19,677,440, x 32 = 629,678,080; merger 2,560 + 5,120² + 5,120 + 5,120 x 3,584 + 3,584 = 44,575,744.
    Total 675,759,104.
    """
    arch = _arch("qwen2_vl_7b")
    assert arch.mixer_counts() == {"full_attention": 28}
    assert kv_bytes_per_token(arch, BF16_BYTES) == 57_344
    assert arch.vision_params == 675_759_104


def test_qwen2_vl_missing_vision_width_fails_in_one_line(tmp_path):
    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "qwen2_vl_7b", lambda config: config["vision_config"].update(mlp_ratio=0)))
    message = str(caught.value)
    assert "\n" not in message and "mlp_ratio" in message


# --------------------------------------------------------------------------- LLaVA-style wrappers


def test_llava_clip_tower_by_hand():
    """LLaVA 1.5 7B: CLIP ViT-L/14-336 (hidden 1,024, MLP 4,096, 24 layers, 577 positions) and a biased projector.

    Embeddings: class 1,024 + patch 3 x 14² x 1,024 + positions 577 x 1,024 = 1,193,984; pre- and post-LayerNorm
    2 x 2,048; per layer 4 x (1,024² + 1,024) + 4 x 1,024 + 2 x 1,024 x 4,096 + 4,096 + 1,024 = 12,596,224, x 24
    = 302,309,376. Projector 1,024 x 4,096 + 4,096² + 2 x 4,096 = 20,979,712. Total 324,487,168. KV: 32 layers x 32
    heads x 256 x 2 B = 524,288 B a token.
    """
    arch = _arch("llava_1_5_7b")
    assert arch.vision_params == 324_487_168
    assert kv_bytes_per_token(arch, BF16_BYTES) == 524_288


def test_llava_pixtral_tower_by_hand():
    """Pixtral-12B (transformers' llava layout): Pixtral (hidden 1,024, 24 layers, patch 16): 3 x 16² x 1,024
    + 1,024 + 24 x 16,779,264 = 403,489,792; projector 1,024 x 5,120 + 5,120² + 2 x 5,120 = 31,467,520.
    KV: 40 layers x 8 KV heads x 256 x 2 B = 163,840 B a token."""
    arch = _arch("pixtral_12b")
    assert arch.vision_params == 434_957_312
    assert kv_bytes_per_token(arch, BF16_BYTES) == 163_840


def test_llava_with_an_unpriced_tower_fails_in_one_line(tmp_path):
    def swap(config):
        config["vision_config"] = {"model_type": "vit"}

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "llava_1_5_7b", swap))
    message = str(caught.value)
    assert "\n" not in message and ": vision_config.model_type: " in message and "'vit'" in message
    assert "priced: clip_vision_model, pixtral, siglip_vision_model" in message


def test_internvl_tower_and_projector_by_hand():
    """InternVL3-8B: InternViT-300M (hidden 1,024, MLP 4,096, 24 layers, 448² image in 14² patches: 1,024 patches).

    Embeddings: class 1,024 + biased patch conv 3 x 14² x 1,024 + 1,024 + positions 1,025 x 1,024 = 1,653,760.
    Per layer: q/k/v 3 x 1,024² + 3 x 1,024 (attention_bias) + output 1,024² + 1,024 + MLP 2 x 1,024 x 4,096
    + 4,096 + 1,024 + two LayerNorms 4,096 + two layer scales 2,048 = 12,598,272, x 24 = 302,358,528; mean pooling,
    no final norm. Projector over 2² shuffled patches (4,096 wide): LayerNorm 8,192 + 4,096 x 3,584 + 3,584
    + 3,584² + 3,584 = 27,540,480. Total 331,552,768.
    """
    arch = _arch("internvl3_8b")
    assert arch.vision_params == 331_552_768
    assert kv_bytes_per_token(arch, BF16_BYTES) == 28 * 4 * 256 * 2


@pytest.mark.parametrize(
    ("edit", "field"),
    [
        (lambda config: config.update(downsample_ratio=0), "downsample_ratio"),
        (lambda config: config["vision_config"].update(norm_type="batch_norm"), "vision_config.norm_type"),
    ],
)
def test_internvl_bad_values_fail_in_one_line(tmp_path, edit, field):
    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "internvl3_8b", edit))
    message = str(caught.value)
    assert "\n" not in message and field in message


def test_idefics3_tower_and_connector_by_hand():
    """SmolVLM-Instruct (idefics3): a SigLIP-so400m-like tower (hidden 1,152, MLP 4,304, 27 layers, 384² images in
    14² patches: 729 positions, no class token) and a bias-free connector over 3² shuffled patches.

    Embeddings: 3 x 14² x 1,152 + 1,152 + 729 x 1,152 = 1,518,336; per layer 4 x (1,152² + 1,152) + 4 x 1,152
    + 2 x 1,152 x 4,304 + 4,304 + 1,152 = 15,239,504, x 27 = 411,466,608; post-LayerNorm 2,304. Connector
    1,152 x 9 x 2,048 = 21,233,664. Total 434,220,912.
    """
    arch = _arch("smolvlm_2b")
    assert arch.vision_params == 434_220_912
    # KV: 24 layers x 32 KV heads x (64 + 64) x 2 B = 196,608 B a token.
    assert kv_bytes_per_token(arch, BF16_BYTES) == 196_608


def test_idefics3_with_an_unpriced_text_model_fails_in_one_line(tmp_path):
    def swap(config):
        config["text_config"] = {"model_type": "gpt2", "n_embd": 2048, "n_layer": 24, "n_head": 32}

    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "smolvlm_2b", swap))
    message = str(caught.value)
    assert "\n" not in message and ": text_config.model_type: " in message and "gpt2" in message


def test_llava_next_adds_the_image_newline():
    """LLaVA-NeXT (Mistral 7B): LLaVA 1.5's CLIP tower and projector (324,487,168 at a 4,096-wide text model) plus
    a 4,096-wide image-newline vector: 324,491,264. KV: 32 layers x 8 KV heads x 256 x 2 B = 131,072 B a token."""
    arch = _arch("llava_next_mistral_7b")
    assert arch.vision_params == 324_487_168 + 4_096
    assert kv_bytes_per_token(arch, BF16_BYTES) == 131_072


def test_llava_onevision_siglip_tower_by_hand():
    """LLaVA-OneVision (Qwen2 7B): SigLIP-so400m without its head (26 layers: 1,518,336 + 26 x 15,239,504 + 2,304
    = 397,747,744), the biased projector 1,152 x 3,584 + 3,584² + 2 x 3,584 = 16,980,992 and the 3,584-wide
    image-newline vector: 414,732,320."""
    assert _arch("llava_onevision_7b").vision_params == 414_732_320


def test_llava_siglip_pooling_head_is_refused(tmp_path):
    with pytest.raises(QuotacalcError) as caught:
        load_arch(
            _write_config(tmp_path, "llava_onevision_7b", lambda config: config["vision_config"].pop("vision_use_head"))
        )
    message = str(caught.value)
    assert "\n" not in message and ": vision_config.vision_use_head: " in message


def test_paligemma_tower_projector_and_kv_by_hand():
    """PaliGemma 2 3B: SigLIP at 224² (256 positions) without its head: 677,376 + 1,152 + 256 x 1,152 = 973,440
    embeddings + 27 x 15,239,504 + 2,304 = 412,442,352; one biased linear 1,152 x 2,304 + 2,304 = 2,656,512.
    The Gemma 2 decoder alternates windowed and full layers: 13 full x 4 KV heads x 512 x 2 B = 53,248 B a token."""
    arch = _arch("paligemma2_3b")
    assert arch.vision_params == 415_098_864
    assert arch.mixer_counts() == {"sliding_attention": 13, "full_attention": 13}
    assert kv_bytes_per_token(arch, BF16_BYTES) == 53_248


def test_paligemma_bad_projection_dim_fails_in_one_line(tmp_path):
    with pytest.raises(QuotacalcError) as caught:
        load_arch(_write_config(tmp_path, "paligemma2_3b", lambda config: config.update(projection_dim=-1)))
    message = str(caught.value)
    assert "\n" not in message and "projection_dim" in message
