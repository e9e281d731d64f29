"""A model config must state the layer sizes it is priced by: a key it leaves out would take transformers' class
default (Llama's intermediate_size 11,008) and price another model. The vocabulary and the maximum context may come
from the class (Gemma 3's published config relies on it), and are then named in the model's notes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotacalc.inputs.resolve import load_arch

MODELS = Path(__file__).resolve().parent.parent / "models"


def _changed(tmp_path: Path, model: str, change) -> str:
    config = json.loads((MODELS / model / "config.json").read_text(encoding="utf-8"))
    change(config)
    folder = tmp_path / model
    folder.mkdir()
    (folder / "config.json").write_text(json.dumps(config), encoding="utf-8")
    return str(folder)


def _error(path: str) -> str:
    from quotacalc.errors import QuotacalcError

    with pytest.raises(QuotacalcError) as caught:
        load_arch(path)
    message = str(caught.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize(
    ("model", "key"),
    [
        ("Llama-3.1-8B-Instruct", "intermediate_size"),  # was priced 6.72B parameters instead of 8.03B
        ("Mixtral-8x7B-v0.1", "intermediate_size"),  # the experts' width
    ],
)
def test_a_layer_size_left_out_of_the_config_is_refused_at_its_key(tmp_path, model, key) -> None:
    message = _error(_changed(tmp_path, model, lambda config: config.pop(key)))
    assert f"{key}: missing from the config (a model config must state its own sizes)" in message


def test_a_class_default_is_named_not_silently_priced(tmp_path) -> None:
    """Gemma 3's published config states no vocab_size and no max_position_embeddings in its text_config: its
    class's (262,208 and 131,072) are the model's, so they are taken, and named in the model's notes. A Llama
    config stripped of them takes LlamaConfig's 32,000 and 2,048, named the same way."""
    arch = load_arch(str(MODELS / "gemma-3-27b-it"))[0]
    assert arch.vocab_size == 262_208 and arch.max_context_tokens == 131_072
    assert "text_config.vocab_size not stated in the config: transformers' default 262208 taken" in arch.notes
    assert "text_config.max_position_embeddings not stated in the config: transformers' default 131072 taken" in (
        arch.notes
    )
    assert not [note for note in load_arch(str(MODELS / "Llama-3.1-8B-Instruct"))[0].notes if "not stated" in note]

    def strip(config):
        config.pop("vocab_size")
        config.pop("max_position_embeddings")

    stripped = load_arch(_changed(tmp_path, "Llama-3.1-8B-Instruct", strip))[0]
    assert stripped.vocab_size == 32_000 and stripped.max_context_tokens == 2_048
    assert sum("not stated in the config" in note for note in stripped.notes) == 2


@pytest.mark.parametrize("value", [0, -5, 10**12, 1.5, "long"])
def test_a_maximum_context_that_is_no_token_count_is_refused_by_its_key(tmp_path, value) -> None:
    path = _changed(tmp_path, "Llama-3.1-8B-Instruct", lambda config: config.update(max_position_embeddings=value))
    message = _error(path)
    assert "max_position_embeddings: " in message and "max_context_tokens" not in message
