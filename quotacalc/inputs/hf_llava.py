"""LLaVA-style wrappers (``llava``: LLaVA 1.5, Pixtral-12B in its transformers layout): a decoder under
``text_config`` by its own family, a CLIP or Pixtral vision tower and a two-layer projector, as transformers 5.24
builds them. The whole tower is built and counted, whichever layer the projector reads
(``vision_feature_layer``)."""

from __future__ import annotations

from quotacalc.core.arch import ModelArch
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import ConfigView, decoder_family, read_decoder, reads
from quotacalc.inputs.hf_mistral3 import pixtral_params


def clip_vision_params(vision: ConfigView) -> int:
    """CLIP's vision transformer: class token, patch convolution (no bias), position table (patches + 1), pre- and
    post-LayerNorms; per layer biased q/k/v/out projections, two LayerNorms and a biased plain MLP."""
    hidden = vision.positive_int("hidden_size")
    inter = vision.positive_int("intermediate_size")
    patch = vision.positive_int("patch_size")
    positions = (vision.positive_int("image_size") // patch) ** 2 + 1
    embeddings = hidden + vision.positive_int("num_channels", 3) * patch * patch * hidden + positions * hidden
    per_layer = 4 * (hidden * hidden + hidden) + 4 * hidden + hidden * inter + inter + inter * hidden + hidden
    return embeddings + 2 * hidden + vision.positive_int("num_hidden_layers") * per_layer + 2 * hidden


#: Vision towers a llava config can name, and how each is counted.
_TOWERS = {"clip_vision_model": clip_vision_params, "pixtral": pixtral_params}


@reads("llava")
def read_llava(view: ConfigView, name: str) -> ModelArch:
    text = view.sub("text_config")
    family = decoder_family(text.get("model_type"))
    if family is None:
        raise UnsupportedArchitecture(
            f"a llava text model of type '{text.get('model_type')}' is not priced yet",
            source=view.source,
            field="text_config.model_type",
        )
    vision = view.sub("vision_config")
    tower = _TOWERS.get(vision.get("model_type"))
    if tower is None:
        raise UnsupportedArchitecture(
            f"a llava vision tower of type '{vision.get('model_type')}' is not priced yet",
            source=view.source,
            field="vision_config.model_type",
            fix=f"priced: {', '.join(sorted(_TOWERS))}",
        )
    text_hidden = text.positive_int("hidden_size")
    layers = view.get("vision_feature_layer", -2)
    features = len(layers) if isinstance(layers, list) else 1
    bias = view.flag("multimodal_projector_bias", True)
    projector = vision.positive_int("hidden_size") * features * text_hidden + text_hidden * text_hidden
    projector += 2 * text_hidden if bias else 0
    arch = read_decoder(text, name, family, dtype_views=(view,), vision_params=tower(vision) + projector)
    # transformers ties by the wrapper's flag (default false; it forwards an older text_config's true).
    tied = view.flag("tie_word_embeddings", False)
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": "llava"})
