"""Mamba-2 hybrids (Nemotron-H, Bamba, Falcon-H1, Granite 4.0-H): layouts and cache goldens by hand.

Their totals against transformers' own counts (``reference_params_hybrid.json``) are in
tests/test_reference_counts.py, with every other test config's.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotacalc.core.arch import ParamGroup
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
        ("nemotron_h", {"mamba2": 24, "full_attention": 4, "none": 24}),
        ("bamba", {"mamba2": 29, "full_attention": 3}),
        # Parallel hybrid: one attention and one Mamba-2 mixer in each of 32 decoder layers.
        ("falcon_h1", {"full_attention": 32, "mamba2": 32}),
        ("granitemoehybrid", {"mamba2": 36, "full_attention": 4}),
    ],
)
def test_layer_layout(folder, layer_kinds):
    arch, _ = load_arch(str(CONFIGS / folder))
    assert arch.mixer_counts() == layer_kinds


def test_bamba_cache_golden():
    """Bamba-9B, bf16 cache, derived by hand.

    KV per token: 3 attention layers x 8 KV heads x (128 K + 128 V) = 6,144 elements -> 12,288 bytes.
    State per sequence, each of 29 Mamba-2 layers (vLLM's layout):
      d_inner = 128 heads x 64 = 8,192; conv_dim = 8,192 + 2 x 1 group x 128 d_state = 8,448
      conv state (d_conv - 1) x conv_dim = 3 x 8,448 = 25,344
      SSM state heads x head_dim x d_state = 128 x 64 x 128 = 1,048,576
      -> 1,073,920 elements x 29 layers = 31,143,680 elements -> 62,287,360 bytes.
    """
    arch, _ = load_arch(str(CONFIGS / "bamba"))
    assert kv_bytes_per_token(arch, BF16_BYTES) == 12_288
    assert state_bytes_per_sequence(arch, BF16_BYTES) == 62_287_360


def test_bamba_state_per_gpu_replicates_the_single_group():
    """Bamba at TP 4: heads split, but its one B/C group is held by every rank (as vLLM does).

    Per layer per GPU: conv (4 - 1) x (8,192 / 4 + 2 x 1 x 128) = 6,912; SSM 128 / 4 x 64 x 128
    = 262,144; 269,056 x 29 layers = 7,802,624 elements -> 15,605,248 bytes (not 62,287,360 / 4).
    """
    arch, _ = load_arch(str(CONFIGS / "bamba"))
    assert state_bytes_per_sequence(arch, BF16_BYTES, tp=4) == 15_605_248


def test_falcon_h1_cache_golden():
    """Falcon-H1-3B: every one of 32 layers holds KV and Mamba-2 state.

    KV per token: 32 x 2 KV heads x 256 = 16,384 elements -> 32,768 bytes.
    State per layer: conv_dim = 4,096 + 2 x 256 = 4,608 -> 3 x 4,608 = 13,824 conv, plus
    32 heads x 128 x 256 = 1,048,576 SSM = 1,062,400; x 32 = 33,996,800 elements -> 67,993,600 bytes.
    """
    arch, _ = load_arch(str(CONFIGS / "falcon_h1"))
    assert kv_bytes_per_token(arch, BF16_BYTES) == 32_768
    assert state_bytes_per_sequence(arch, BF16_BYTES) == 67_993_600


def test_nemotron_h_experts():
    """Nemotron-3-Nano-shaped experts: ReLU² (ungated up/down) routed and shared experts.

    Per MoE layer: 128 experts x 2 x 2,688 x 1,856 = 1,277,165,568 routed; shared 2 x 2,688 x 3,712
    = 19,955,712; router 128 x 2,688 = 344,064. Active per token: 6 routed experts, not 128.
    """
    arch, _ = load_arch(str(CONFIGS / "nemotron_h_moe"))
    moe = arch.moe_layers()
    assert len(moe) == 23 and not moe[0].gated
    assert moe[0].params() == {
        ParamGroup.ROUTER: 344_064,
        ParamGroup.SHARED_EXPERTS: 19_955_712,
        ParamGroup.ROUTED_EXPERTS: 1_277_165_568,
    }
    assert moe[0].active_params()[ParamGroup.ROUTED_EXPERTS] == moe[0].top_k * 2 * 2688 * 1856


def _config_without(tmp_path: Path, folder: str, key: str) -> str:
    config = json.loads((CONFIGS / folder / "config.json").read_text())
    del config[key]
    target = tmp_path / f"{folder}-no-{key}"
    target.mkdir()
    (target / "config.json").write_text(json.dumps(config))
    return str(target)


@pytest.mark.parametrize(
    ("folder", "key"),
    [
        ("bamba", "mamba_n_heads"),
        ("granitemoehybrid", "mamba_d_state"),
        ("falcon_h1", "hidden_size"),
        ("nemotron_h", "hybrid_override_pattern"),
        ("nemotron_h", "ssm_state_size"),
    ],
)
def test_missing_size_fails_in_one_line(tmp_path, folder, key):
    with pytest.raises(QuotacalcError) as caught:
        load_arch(_config_without(tmp_path, folder, key))
    message = str(caught.value)
    assert "\n" not in message
    assert key in message and "missing" in message
