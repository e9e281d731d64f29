"""DeepSeek Sparse Attention families, DeepSeek-V3.2 (deepseek_v32) and GLM-5 (glm_moe_dsa), priced against
transformers' own counts, with cache, read and FLOP goldens derived by hand from vLLM's layout.

``reference_params_dsa.json`` holds the counts transformers 5.24 builds on the meta device for the folders
``deepseek_v3_2``, ``glm_5`` and ``glm_5_index_share`` (``tests/data/make_reference_params.py`` run on a folder
holding only those; the command is in the file's ``generated_by``). The totals are checked in
tests/test_reference_counts.py, with every other test config's.

vLLM's cache per token per layer (vllm/v1/kv_cache_interface.py @ 001cabc1, MLAAttentionSpec;
vllm/v1/attention/backends/mla/flashmla_sparse.py @ 008a0c31; vllm/model_executor/models/deepseek_v2.py @
002d6073, DeepseekV32IndexerCache), both whole on every TP rank:

* latent, bf16: (kv_lora_rank 512 + qk_rope_head_dim 64) x 2 B = 1,152 B;
* latent, fp8 (fp8_ds_mla): 512 fp8 + 4 float32 scales (one per 128) x 4 B + 64 bf16 rope x 2 B = 656 B;
* indexer key, fp8 whatever the KV dtype: index_head_dim 128 + 128 / 128 x 4 B scale = 132 B.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import config_with as _config_with
from conftest import fixture_arch as _arch
from conftest import one_line_error as _one_line_error

from quotacalc import Deployment, price, resolve
from quotacalc.core import memory
from quotacalc.core.arch import DenseMLP, MoE, ParamGroup, SparseMLAAttention
from quotacalc.core.kv import request_kv
from quotacalc.core.memory import (
    attention_flops_per_output_token,
    attention_flops_per_prompt_token,
    kv_bytes_per_token,
    kv_bytes_per_token_per_gpu,
    request_kv_bytes,
)
from quotacalc.core.replica import replica_model
from quotacalc.errors import QuotacalcError, UnsupportedArchitecture
from quotacalc.inputs.resolve import load_arch

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"
BF16_BYTES, FP8_BYTES = 2, 1

#: Hand-derived bytes per token per layer (module docstring).
LATENT_BF16 = (512 + 64) * 2  # 1,152
LATENT_FP8 = 512 + 512 // 128 * 4 + 64 * 2  # 656, vLLM's fp8_ds_mla
INDEXER_KEY = 128 + 128 // 128 * 4  # 132
#: MLA FLOPs per attended key (2 x heads x (qk_head_dim + v_head_dim)) and the indexer's per scored token
#: (2 x index_n_heads x index_head_dim), DeepSeek-V3.2.
DSV32_MLA_FLOPS = 2 * 128 * ((128 + 64) + 128)  # 81,920
DSV32_SCORING_FLOPS = 2 * 64 * 128  # 16,384


pytestmark = pytest.mark.usefixtures("private_cache")


# --------------------------------------------------------------------------- totals and layouts


@pytest.mark.parametrize("folder", ["deepseek_v3_2", "glm_5", "glm_5_index_share"])
def test_total_matches_transformers(folder):
    reference = json.loads((DATA / "reference_params_dsa.json").read_text(encoding="utf-8"))["models"][folder]
    arch = _arch(folder)
    assert arch.total_params() == reference["total_params"]
    assert arch.tie_word_embeddings is reference["tie_word_embeddings"] is False


@pytest.mark.parametrize(
    ("folder", "layers", "indexers"),
    [("deepseek_v3_2", 61, 61), ("glm_5", 78, 78), ("glm_5_index_share", 78, 21)],
)
def test_layer_layout(folder, layers, indexers):
    """Sparse MLA everywhere, the first three layers dense (first_k_dense_replace 3), experts after."""
    arch = _arch(folder)
    assert arch.mixer_counts() == {"sparse_mla": layers}
    assert [i for i, layer in enumerate(arch.layers) if isinstance(layer.feed_forward, DenseMLP)] == [0, 1, 2]
    assert all(isinstance(layer.feed_forward, MoE) for layer in arch.layers[3:])
    assert sum(layer.mixer.has_indexer for layer in arch.layers) == indexers


def test_glm_index_sharing_follows_vllm_and_transformers():
    """index_topk_freq 4, index_skip_topk_offset 3: a layer runs its own indexer where
    max(i - 3 + 1, 0) % 4 == 0 (vLLM's and transformers' rule): layers 0, 1, 2, then 6, 10, ..., 74."""
    arch = _arch("glm_5_index_share")
    full = [i for i, layer in enumerate(arch.layers) if layer.mixer.has_indexer]
    assert full == [0, 1, 2, *range(6, 78, 4)]
    shared = arch.layers[3].mixer
    assert shared.params()[ParamGroup.ATTENTION] == _arch("glm_5").layers[3].mixer.params()[ParamGroup.ATTENTION] - (
        2048 * 32 * 128 + 6144 * 128 + 2 * 128 + 6144 * 32
    )


def test_indexer_parameters_by_hand():
    """DeepSeek-V3.2's indexer per layer: wq_b 1,536 x 64 x 128 + wk 7,168 x 128 + k_norm 2 x 128 + weights_proj
    7,168 x 64 = 13,959,424 (the shapes of the checkpoint's indexer tensors: [8192, 1536], [128, 7168], [128] x 2,
    [64, 7168]); MLA: q_a 7,168 x 1,536 + 1,536 + q_b 1,536 x 128 x 192 + kv_a 7,168 x 576 + 512 + kv_b
    512 x 128 x 256 + o 128 x 128 x 7,168 = 187,107,328."""
    mixer = _arch("deepseek_v3_2").layers[0].mixer
    indexer = 1_536 * 64 * 128 + 7_168 * 128 + 2 * 128 + 7_168 * 64
    mla = 7_168 * 1_536 + 1_536 + 1_536 * 128 * 192 + 7_168 * 576 + 512 + 512 * 128 * 256 + 128 * 128 * 7_168
    assert (indexer, mla) == (13_959_424, 187_107_328)
    # The latent norms (q_a_layernorm 1,536 + kv_a_layernorm 512 = 2,048) are counted in the norm group, which
    # quantized checkpoints keep 16-bit: attention 187,107,328 - 2,048 + 13,959,424.
    assert mixer.params() == {ParamGroup.ATTENTION: mla - 2_048 + indexer, ParamGroup.NORM: 2_048}


def test_deepseek_v3_2_active_params_by_hand():
    """Embedding and LM head 2 x 129,280 x 7,168; final norm 7,168; 61 layers of attention (201,066,752, the
    test above) and two norms (2 x 7,168); 3 dense MLPs 3 x 7,168 x 18,432; 58 MoE layers of router
    256 x 7,168, one shared expert and the top 8 of 256 routed ones, each 3 x 7,168 x 2,048."""
    expert = 3 * 7_168 * 2_048
    moe_active = 256 * 7_168 + expert + 8 * expert
    active = 2 * 129_280 * 7_168 + 7_168 + 61 * (201_066_752 + 2 * 7_168) + 3 * 3 * 7_168 * 18_432 + 58 * moe_active
    assert _arch("deepseek_v3_2").active_params() == active == 38_403_807_488


# --------------------------------------------------------------------------- KV goldens


@pytest.mark.parametrize(
    ("folder", "bf16", "fp8"),
    [
        # 61 layers, every one with an indexer.
        ("deepseek_v3_2", 61 * (LATENT_BF16 + INDEXER_KEY), 61 * (LATENT_FP8 + INDEXER_KEY)),
        ("glm_5", 78 * (LATENT_BF16 + INDEXER_KEY), 78 * (LATENT_FP8 + INDEXER_KEY)),
        # 21 layers with an indexer key, 57 sharing an earlier layer's top-k and keeping only the latent.
        ("glm_5_index_share", 78 * LATENT_BF16 + 21 * INDEXER_KEY, 78 * LATENT_FP8 + 21 * INDEXER_KEY),
    ],
)
def test_kv_bytes_per_token_bf16_and_fp8(folder, bf16, fp8):
    arch = _arch(folder)
    assert kv_bytes_per_token(arch, BF16_BYTES) == bf16
    assert kv_bytes_per_token(arch, FP8_BYTES) == fp8


def test_kv_bytes_per_layer_are_vllms_page_bytes():
    """1,284 B a token a layer at bf16 (1,152 + 132), 788 at fp8 (656 + 132): not values x dtype (708 values)."""
    mixer = _arch("deepseek_v3_2").layers[0].mixer
    assert mixer.cache_elements_per_token() == 512 + 64 + 128
    assert mixer.cache_bytes_per_token(BF16_BYTES) == 1_284
    assert mixer.cache_bytes_per_token(FP8_BYTES) == 788


def test_tp_keeps_latent_and_indexer_keys_whole():
    """Both caches have one KV head in vLLM (MLAAttentionSpec num_kv_heads=1): every rank holds them whole.
    The indexer's projections are ReplicatedLinear (or disable_tp) there too: replicated with MLA's
    down-projections (q_a 7,168 x 1,536 + 1,536, kv_a 7,168 x 576 + 512)."""
    arch = _arch("deepseek_v3_2")
    for tp in (1, 2, 8):
        assert kv_bytes_per_token_per_gpu(arch, FP8_BYTES, tp) == 61 * 788 == 48_068
    # The two latent norms (1,536 + 512) are replicated too, counted in the norm group.
    down = 7_168 * 1_536 + 7_168 * 576
    assert arch.replicated_params_by_group()[ParamGroup.ATTENTION] == 61 * (down + 13_959_424)
    assert arch.replicated_params_by_group()[ParamGroup.NORM] == 61 * (1_536 + 512)


def test_request_kv_at_128k():
    """A 131,072-token sequence holds every token's latent and indexer key: 131,072 x 61 x 788 B at fp8."""
    assert request_kv_bytes(_arch("deepseek_v3_2"), 131_072, FP8_BYTES, BF16_BYTES) == 131_072 * 48_068


# --------------------------------------------------------------------------- FLOPs and reads


def test_attention_flops_bounded_at_index_topk():
    """A decode token attends min(context, 2,048) keys and the indexer scores all of them: per layer
    81,920 x min(context, 2,048) + 16,384 x context. Past 2,048 only the scoring grows."""
    arch = _arch("deepseek_v3_2")
    short, long = 1_024, 131_072
    assert attention_flops_per_output_token(arch, short) == 61 * (81_920 + 16_384) * short == 6_140_461_056
    assert attention_flops_per_output_token(arch, long) == 61 * (81_920 * 2_048 + 16_384 * long)
    # Doubling a long context adds the scoring only.
    grown = attention_flops_per_output_token(arch, 2 * long) - attention_flops_per_output_token(arch, long)
    assert grown == 61 * DSV32_SCORING_FLOPS * long


def test_prompt_attention_flops_are_the_exact_mean():
    """A prompt token at position p attends min(p, 2,048) keys and scores p: over 4,096 positions the mean
    of min(p, 2,048) is (2,048 x 2,049 / 2 + 2,048 x 2,048) / 4,096 = 1,536.25, of p 2,048.5."""
    arch = _arch("deepseek_v3_2")
    expected = 61 * (DSV32_MLA_FLOPS * 1_536.25 + DSV32_SCORING_FLOPS * 2_048.5)
    assert attention_flops_per_prompt_token(arch, 4_096) == pytest.approx(expected, rel=1e-12)
    # Within index_topk every earlier token is attended: dense MLA plus the scoring.
    assert attention_flops_per_prompt_token(arch, 1_000) == pytest.approx(
        61 * (DSV32_MLA_FLOPS + DSV32_SCORING_FLOPS) * 500.5, rel=1e-12
    )


def test_decode_reads_selected_latents_and_every_indexer_key():
    """DeepSeek-V3.2 at 32,768 tokens, TP 8, fp8 KV: a decode step reads, per sequence and GPU, 61 x (2,048 x
    656 + 32,768 x 132) = 345,800,704 B (the top-k tokens' latent and every token's indexer key), while it
    holds 61 x 32,768 x 788 = 1,575,092,224 B."""
    inputs = resolve(
        Deployment(model=str(CONFIGS / "deepseek_v3_2"), gpu="h200", tp=8, context=32_768, batch=4, kv_dtype="fp8")
    )
    model = replica_model(inputs, kv_pool_bytes_per_gpu=1e11)
    read = 61 * (2_048 * LATENT_FP8 + 32_768 * INDEXER_KEY)
    assert model.sequence_kv_read_bytes_per_gpu(32_768) == read == 345_800_704
    assert model.sequence_kv_bytes_per_gpu(32_768) == 61 * 32_768 * 788 == 1_575_092_224
    # Below index_topk the step reads all it holds.
    assert model.sequence_kv_read_bytes_per_gpu(1_000) == model.sequence_kv_bytes_per_gpu(1_000) == 61 * 1_000 * 788
    # The model's attention FLOPs: bounded MLA (2 x 128 heads x (192 + 128) = 81,920 a key, 2,048 keys) and the
    # growing scoring (2 x 64 x 128 = 16,384 an earlier token), once. The replica's decode step: the sparse kernel
    # attends absorbed, each head over the latent (2 x 128 x (512 + 64 + 512) = 278,528 a key), and vLLM runs the
    # indexer whole on each of the 8 ranks, so its scoring costs 8 times that in GPU time.
    assert attention_flops_per_output_token(inputs.arch, 32_768) == 61 * (81_920 * 2_048 + 16_384 * 32_768)
    assert model.attention_flops(32_768) == 61 * (278_528 * 2_048 + 8 * 16_384 * 32_768) == 296_788_951_040
    assert price(inputs).decode_kv_bytes_per_gpu == 4 * read


def test_explain_states_the_sparse_rule():
    result = price(resolve(Deployment(model=str(CONFIGS / "deepseek_v3_2"), gpu="h200", tp=8)))
    notes = {step.name: step.note or "" for step in result.steps}
    assert "index_topk 2,048" in notes["kv_bytes_per_token"] and "132 B" in notes["kv_bytes_per_token"]
    assert "fp8_ds_mla" in notes["decode_kv_bytes_per_gpu"]
    assert "2 x 64 x 128" in notes["attention_flops_per_prompt_token"]


# --------------------------------------------------------------------------- bad input


@pytest.mark.parametrize(
    ("folder", "key"),
    [
        # transformers' defaults (2,048, 64 or 32, 128) would price another model's indexer silently.
        ("deepseek_v3_2", "index_topk"),
        ("deepseek_v3_2", "index_n_heads"),
        ("glm_5", "index_head_dim"),
        ("glm_5", "q_lora_rank"),
        ("deepseek_v3_2", "n_routed_experts"),
        ("glm_5", "n_routed_experts"),
    ],
)
def test_missing_size_fails_in_one_line(tmp_path, folder, key):
    message = _one_line_error(_config_with(tmp_path, folder, lambda c: c.pop(key)))
    assert key in message and "missing" in message


def test_deepseek_v32_index_sharing_is_refused(tmp_path):
    """vLLM would skip the indexer on 3 of every 4 layers, transformers builds one in each: refused."""
    message = _one_line_error(_config_with(tmp_path, "deepseek_v3_2", lambda c: c.update(index_topk_freq=4)))
    assert "index_topk_freq" in message and "transformers builds an indexer" in message


def test_glm_indexer_types_stated_as_vllm_reads_them_are_accepted(tmp_path):
    """GLM-5.2's configs state indexer_types beside index_topk_freq and index_skip_topk_offset: where the two
    agree the model is the one transformers derives."""
    kinds = ["full" if i < 3 or (i - 2) % 4 == 0 else "shared" for i in range(78)]
    arch, _ = load_arch(_config_with(tmp_path, "glm_5_index_share", lambda c: c.update(indexer_types=kinds)))
    assert arch == _arch("glm_5_index_share").model_copy(update={"name": arch.name})
    assert "reusing an earlier layer's top-k keep no indexer key" in memory.cost_rules(arch)


def test_glm_indexer_types_vllm_does_not_read_are_refused(tmp_path):
    """indexer_types stated without vLLM's index_topk_freq: transformers shares, vLLM would not."""
    kinds = ["full"] * 3 + ["shared"] + ["full"] * 74
    message = _one_line_error(_config_with(tmp_path, "glm_5", lambda c: c.update(indexer_types=kinds)))
    assert "indexer_types" in message and "layer 3" in message


def test_glm_indexer_key_width_vllm_cannot_quantize_is_refused(tmp_path):
    message = _one_line_error(_config_with(tmp_path, "glm_5", lambda c: c.update(index_head_dim=96)))
    assert "index_head_dim" in message and "128" in message


def test_attention_bias_is_refused_not_miscounted(tmp_path):
    message = _one_line_error(
        _config_with(tmp_path, "glm_5", lambda c: c.update(attention_bias=True)), UnsupportedArchitecture
    )
    assert "attention_bias" in message


@pytest.mark.parametrize("kv_dtype", ["nvfp4", "fp32", "int8"])
def test_kv_dtype_vllms_sparse_kernels_do_not_keep_is_refused(kv_dtype):
    """FlashMLASparseBackend keeps the latent in bf16 or fp8_ds_mla (nvfp4_ds_mla, SM100 only, is not priced)."""
    deployment = Deployment(model=str(CONFIGS / "glm_5"), gpu="h200", tp=8, kv_dtype=kv_dtype)
    with pytest.raises(QuotacalcError) as caught:
        resolve(deployment)
    assert caught.value.field == "kv_dtype" and "bf16 or fp8" in str(caught.value)


def test_sparse_layer_without_query_latent_cannot_be_built():
    """The indexer reads the query latent: a sparse layer always has one."""
    with pytest.raises(ValueError):
        SparseMLAAttention(
            hidden_size=64,
            num_heads=4,
            q_lora_rank=None,
            kv_lora_rank=512,
            qk_nope_head_dim=16,
            qk_rope_head_dim=64,
            v_head_dim=16,
            index_topk=8,
            index_n_heads=2,
            index_head_dim=128,
        )


def test_a_prompt_tokens_units_count_the_indexer_on_every_rank():
    """A 32,768-token prompt: each token scores (p + 1) / 2 = 16,384.5 earlier tokens on average, at 16,384 FLOPs
    each in each of 61 layers; at TP 8 every rank does that scoring whole, 7 more times than at TP 1. The bounded
    MLA part is the same at any TP."""
    arch = load_arch(str(CONFIGS / "deepseek_v3_2"))[0]
    extra = attention_flops_per_prompt_token(arch, 32_768, 8) - attention_flops_per_prompt_token(arch, 32_768, 1)
    assert extra == pytest.approx(7 * 61 * 16_384 * 16_384.5)
    tp8 = request_kv(price(resolve(Deployment(model=str(CONFIGS / "deepseek_v3_2"), gpu="h200", tp=8))), 32_768)
    per_token = 2 * tp8.replica.active_params
    assert tp8.prompt_token_units_at_context == pytest.approx(
        (per_token + attention_flops_per_prompt_token(arch, 32_768, 8)) / per_token
    )


def test_explain_names_the_indexers_among_the_layers_kept_whole():
    result = price(resolve(Deployment(model=str(CONFIGS / "deepseek_v3_2"), gpu="h200", tp=8)))
    (step,) = [step for step in result.steps if step.name == "weight_bytes_per_gpu"]
    assert "sparse attention's indexers" in step.note
