"""EXAONE 4.5 (``exaone4_5``): an EXAONE 4 decoder under ``text_config`` and a Qwen2.5-VL-like vision tower with
grouped-query attention, as transformers 5.24 builds them."""

from __future__ import annotations

from quotacalc.core.arch import ModelArch
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import ConfigView, decoder_family, read_decoder, reads


def exaone4_5_vision_params(vision: ConfigView) -> int:
    """Patch embedding (a 3-D convolution, no bias); per block two RMSNorms, a fused biased q/k/v with fewer KV
    heads, a biased output projection and a gated biased MLP; then the patch merger (RMSNorm and a two-layer MLP
    from spatial_merge_size² patches to the text width)."""
    hidden = vision.positive_int("hidden_size")
    inter = vision.positive_int("intermediate_size")
    heads = vision.positive_int("num_heads")
    kv_heads = vision.positive_int("num_key_value_heads")
    if hidden % heads:
        raise vision.fail("num_heads", f"does not divide the vision hidden size {hidden}")
    kv_width = kv_heads * (hidden // heads)
    patch = vision.positive_int("patch_size")
    embed = vision.positive_int("in_channels", 3) * vision.positive_int("temporal_patch_size") * patch * patch * hidden
    qkv_out = hidden + 2 * kv_width
    block = 2 * hidden + hidden * qkv_out + qkv_out + hidden * hidden + hidden
    block += 3 * hidden * inter + 2 * inter + hidden
    merged = hidden * vision.positive_int("spatial_merge_size") ** 2
    out = vision.positive_int("out_hidden_size")
    merger = hidden + merged * merged + merged + merged * out + out
    return embed + vision.positive_int("depth") * block + merger


@reads("exaone4_5")
def read_exaone4_5(view: ConfigView, name: str) -> ModelArch:
    text = view.sub("text_config")
    family = decoder_family(text.get("model_type"))
    if family is None:
        raise UnsupportedArchitecture(
            f"an exaone4_5 text model of type '{text.get('model_type')}' is not priced yet",
            source=view.source,
            field="text_config.model_type",
        )
    towers = exaone4_5_vision_params(view.sub("vision_config"))
    arch = read_decoder(text, name, family, dtype_views=(view,), vision_params=towers)
    # transformers ties by the wrapper's flag (default false), whatever text_config says.
    tied = view.flag("tie_word_embeddings", False)
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": "exaone4_5"})
