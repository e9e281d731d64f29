"""MoE families GLM-4.5/4.6 (glm4_moe), GLM-4.7-Flash (glm4_moe_lite) and MiniMax-M2 priced
against transformers' own counts, with cache and active-parameter goldens derived by hand.

``reference_params_archmoe.json`` holds the counts transformers 5.24 builds on the meta device for
the folders of ``tests/data/configs`` named in it (``tests/data/make_reference_params.py`` run on a
folder holding only those; the command is in the file's ``generated_by``).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotacalc.core.arch import DenseMLP, MoE, ParamGroup
from quotacalc.core.memory import kv_bytes_per_token, kv_bytes_per_token_per_gpu
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.resolve import load_arch

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"
REFERENCE = json.loads((DATA / "reference_params_archmoe.json").read_text())["models"]
BF16_BYTES = 2


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("QUOTACALC_CACHE_DIR", str(tmp_path / "cache"))


def _arch(folder: str):
    arch, _ = load_arch(str(CONFIGS / folder))
    return arch


# --------------------------------------------------------------------------- totals and layouts


@pytest.mark.parametrize("folder", sorted(REFERENCE))
def test_total_params_match_transformers(folder):
    arch = _arch(folder)
    assert arch.total_params() == REFERENCE[folder]["total_params"]
    assert arch.tie_word_embeddings == REFERENCE[folder]["tie_word_embeddings"]


@pytest.mark.parametrize(
    ("folder", "layer_kinds", "dense_layers"),
    [
        ("glm4_5_air", {"full_attention": 46}, [0]),  # first_k_dense_replace 1
        ("glm4_6", {"full_attention": 92}, [0, 1, 2]),  # first_k_dense_replace 3
        ("glm4_7_flash", {"mla": 47}, [0]),
        ("minimax_m2", {"full_attention": 62}, []),
    ],
)
def test_layer_layout(folder, layer_kinds, dense_layers):
    arch = _arch(folder)
    assert arch.mixer_counts() == layer_kinds
    assert [i for i, layer in enumerate(arch.layers) if isinstance(layer.feed_forward, DenseMLP)] == dense_layers
    assert all(isinstance(layer.feed_forward, (DenseMLP, MoE)) for layer in arch.layers)


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


# --------------------------------------------------------------------------- bad input


def _config_with(tmp_path: Path, folder: str, change) -> str:
    config = json.loads((CONFIGS / folder / "config.json").read_text())
    change(config)
    target = tmp_path / f"{folder}-changed"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(config))
    return str(target)


def _one_line_error(path: str) -> str:
    with pytest.raises(QuotacalcError) as caught:
        load_arch(path)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("folder", "key"),
    [
        ("glm4_5_air", "n_routed_experts"),  # the class default (128) would price GLM-4.5-Air's experts
        ("glm4_6", "hidden_size"),
        ("glm4_7_flash", "n_routed_experts"),
        ("minimax_m2", "num_local_experts"),
        ("minimax_m2", "num_hidden_layers"),
    ],
)
def test_missing_size_fails_in_one_line(tmp_path, folder, key):
    message = _one_line_error(_config_with(tmp_path, folder, lambda c: c.pop(key)))
    assert key in message and "missing" in message


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
