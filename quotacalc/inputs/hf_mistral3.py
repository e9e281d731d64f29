"""Mistral 3 (``mistral3``: Mistral Small 3.x, Devstral, Ministral 3): a decoder under ``text_config`` and a
Pixtral vision tower with its projector, as transformers 5.24 builds them."""

from __future__ import annotations

from quotacalc.core.arch import ModelArch
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import ConfigView, read_decoder, reads, text_decoder_family


def pixtral_params(vision: ConfigView) -> int:
    """Pixtral's encoder: a patch convolution (no bias), a pre-norm, then per layer four hidden x hidden
    attention projections, a gated MLP and two RMSNorms (its 2-D rotary positions have no weights)."""
    hidden = vision.positive_int("hidden_size")
    inter = vision.positive_int("intermediate_size")
    patch = vision.positive_int("patch_size")
    channels = vision.positive_int("num_channels", 3)
    per_layer = 4 * hidden * hidden + 3 * hidden * inter + 2 * hidden
    return channels * patch * patch * hidden + hidden + vision.positive_int("num_hidden_layers") * per_layer


def mistral3_projector_params(view: ConfigView, vision_hidden: int, text_hidden: int) -> int:
    """RMSNorm, the patch merger (spatial_merge_size² patches into one), then two linears into the text model."""
    merge = view.positive_int("spatial_merge_size", 2)
    layers = view.get("vision_feature_layer", -1)
    features = len(layers) if isinstance(layers, list) else 1
    bias = view.flag("multimodal_projector_bias")
    linear_1 = vision_hidden * features * text_hidden + (text_hidden if bias else 0)
    linear_2 = text_hidden * text_hidden + (text_hidden if bias else 0)
    return vision_hidden + vision_hidden * merge * merge * vision_hidden + linear_1 + linear_2


@reads("mistral3")
def read_mistral3(view: ConfigView, name: str) -> ModelArch:
    text = view.sub("text_config")
    family = text_decoder_family(view, text)
    vision = view.sub("vision_config")
    if vision.get("model_type") != "pixtral":
        raise UnsupportedArchitecture(
            f"a mistral3 vision tower of type '{vision.get('model_type')}' is not priced yet",
            source=view.source,
            field="vision_config.model_type",
        )
    text_hidden = text.positive_int("hidden_size")
    towers = pixtral_params(vision) + mistral3_projector_params(view, vision.positive_int("hidden_size"), text_hidden)
    arch = read_decoder(text, name, family, dtype_views=(view,), vision_params=towers)
    tied = view.flag("tie_word_embeddings", text.flag("tie_word_embeddings", True))
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": "mistral3"})
