"""The 2026 families GLM-5.3-Flash (glm5_next), MiniMax-M3 (minimax_m3_vl) and Qwen4-Exp (qwen4_exp): refused in
one line that says why, never priced with the nearest layer kind.

Each keeps, as vLLM serves it, a cache that no quotacalc layer kind describes (quotacalc/inputs/hf_refused.py has
the vLLM sources): GLM-5.3-Flash's indexer a k-pool-compressed key cache on every MLA layer plus a tail of raw keys,
MiniMax-M3's block-sparse attention an indexer key cache beside the KV cache, Qwen4-Exp's QSA a compressed key
cache plus a per-request circular buffer, and hashed n-gram per-layer embeddings with states of their own.

The configs under tests/data/refused/ are transformers 5.24's config-class defaults, written out
(``Glm5NextConfig().to_dict()`` etc.; tests/data/configs/SOURCES.md): no published config.json was found.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotacalc.errors import EXIT_INVALID_INPUT, UnsupportedArchitecture
from quotacalc.inputs.architectures import read_arch, supported_model_types
from quotacalc.inputs.resolve import load_arch

REFUSED = Path(__file__).parent / "data" / "refused"

#: model_type -> words its refusal must carry (the feature quotacalc cannot price).
WHY = {
    "glm5_next": ("k-pool-compressed key cache", "hyper-connection"),
    "glm5_next_text": ("k-pool-compressed key cache", "hyper-connection"),
    "minimax_m3_vl": ("block-sparse attention", "lightning-indexer key cache"),
    "minimax_m3_vl_text": ("block-sparse attention", "lightning-indexer key cache"),
    "qwen4_exp": ("circular buffer", "n-gram per-layer embeddings"),
    "qwen4_exp_text": ("circular buffer", "n-gram per-layer embeddings"),
}


pytestmark = pytest.mark.usefixtures("private_cache")


def test_every_fixture_is_the_family_its_folder_names():
    folders = {path.name for path in REFUSED.iterdir() if (path / "config.json").is_file()}
    assert folders == set(WHY)
    for folder in folders:
        assert json.loads((REFUSED / folder / "config.json").read_text(encoding="utf-8"))["model_type"] == folder


@pytest.mark.parametrize("model_type", sorted(WHY))
def test_family_is_refused_in_one_line_saying_why(model_type):
    with pytest.raises(UnsupportedArchitecture) as caught:
        load_arch(str(REFUSED / model_type))
    error = caught.value
    assert "\n" not in str(error)
    assert error.field == "model_type"
    assert f"model_type '{model_type}' is not priced:" in str(error)
    for words in WHY[model_type]:
        assert words in str(error)
    # Refused, so not listed as read.
    assert model_type not in supported_model_types()


@pytest.mark.parametrize("model_type", ["glm5_next", "minimax_m3_vl_text", "qwen4_exp"])
def test_cli_prints_the_refusal_as_one_line_and_exits_1(run_cli, model_type):
    code, out, err = run_cli("price", "--model", str(REFUSED / model_type), "--gpu", "h100-sxm", "--tp", "8")
    assert code == EXIT_INVALID_INPUT and out == "" and "Traceback" not in err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("quotacalc: error: ")
    assert f"{model_type}/config.json: model_type: model_type '{model_type}' is not priced:" in lines[0]


def test_a_minimal_config_of_a_refused_family_is_refused_the_same_way(tmp_path):
    """The refusal does not depend on the sizes a config states: a bare model_type gets it too."""
    (tmp_path / "config.json").write_text(json.dumps({"model_type": "qwen4_exp_text"}), encoding="utf-8")
    with pytest.raises(UnsupportedArchitecture) as caught:
        load_arch(str(tmp_path))
    assert "QSA attention" in str(caught.value)


def test_an_unpriced_family_without_a_known_reason_keeps_the_generic_message():
    with pytest.raises(UnsupportedArchitecture) as caught:
        read_arch({"model_type": "bert"}, name="bert", source="config.json")
    assert "model_type 'bert' is not priced yet" in str(caught.value)
    assert caught.value.fix is not None and "supported: " in caught.value.fix
