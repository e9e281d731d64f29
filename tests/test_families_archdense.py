"""Dense-decoder families (Gemma 4, ...) priced against transformers' own counts.

``reference_params_archdense.json`` holds the parameter counts transformers 5.24 builds on the meta device
for each of these folders of ``tests/data/configs`` (``make_reference_params.count`` on each folder; see
``tests/data/make_reference_params.py``). KV goldens are derived by hand in each test's docstring.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotacalc.core.arch import ParamGroup
from quotacalc.core.memory import kv_bytes_per_token, kv_bytes_per_token_per_gpu, window_bytes_per_sequence
from quotacalc.core.weights import engine_read, uniform_layout
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.resolve import load_arch

DATA = Path(__file__).parent / "data"
CONFIGS = DATA / "configs"
REFERENCE = json.loads((DATA / "reference_params_archdense.json").read_text())["models"]
BF16_BYTES = 2


@pytest.fixture(autouse=True)
def _private_cache(monkeypatch, tmp_path):
    monkeypatch.setenv("QUOTACALC_CACHE_DIR", str(tmp_path / "cache"))


def _arch(folder: str):
    return load_arch(str(CONFIGS / folder))[0]


@pytest.mark.parametrize("folder", sorted(REFERENCE))
def test_total_params_match_transformers(folder):
    arch = _arch(folder)
    assert arch.total_params() == REFERENCE[folder]["total_params"]
    assert arch.tie_word_embeddings == REFERENCE[folder]["tie_word_embeddings"]


@pytest.mark.parametrize(
    ("folder", "layer_kinds"),
    [
        # Five sliding layers, then one full, repeated (the last layer is full).
        ("gemma4_31b", {"sliding_attention": 50, "full_attention": 10}),
        ("gemma4_e4b", {"sliding_attention": 35, "full_attention": 7}),
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
