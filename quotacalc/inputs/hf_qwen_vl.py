"""Vision-language wrappers with a Qwen-VL-style vision tower, as transformers 5.24 builds them: Qwen2-VL
(``qwen2_vl``) and Qwen2.5-VL (``qwen2_5_vl``), Qwen2 decoders, EXAONE 4.5 (``exaone4_5``, an EXAONE 4 decoder, grouped-query vision heads)
and Qwen3-VL (``qwen3_vl``, a Qwen3 decoder; its tower is counted by ``qwen3_vl_vision_params``).

The tower: a 3-D patch convolution (no bias); per block two RMSNorms, a fused biased q/k/v, a biased output
projection and a gated biased MLP; then the patch merger (RMSNorm and a two-layer MLP from
spatial_merge_size² patches to the text width). Its 2-D rotary positions have no weights.
"""

from __future__ import annotations

from quotacalc.core.arch import ModelArch
from quotacalc.inputs.hf_arch import (
    ConfigView,
    DecoderFamily,
    read_decoder,
    reads,
    registered_decoder_family,
    text_decoder_family,
)


def qwen_vl_vision_params(vision: ConfigView) -> int:
    """The vision tower and its patch merger (fewer KV heads than heads where ``num_key_value_heads`` says so)."""
    hidden = vision.positive_int("hidden_size")
    inter = vision.positive_int("intermediate_size")
    heads = vision.positive_int("num_heads")
    kv_heads = vision.positive_int("num_key_value_heads", heads)
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


def qwen2_vl_vision_params(vision: ConfigView) -> int:
    """Qwen2-VL's tower: LayerNorms (weight and bias) instead of RMSNorms, a plain biased MLP of
    ``embed_dim x mlp_ratio``, and a LayerNorm in the patch merger; the width is ``embed_dim``, ``hidden_size``
    the text width it projects to."""
    width = vision.positive_int("embed_dim")
    inter = width * vision.positive_int("mlp_ratio")
    patch = vision.positive_int("patch_size")
    embed = vision.positive_int("in_channels", 3) * vision.positive_int("temporal_patch_size") * patch * patch * width
    block = 4 * width + width * 3 * width + 3 * width + width * width + width
    block += width * inter + inter + inter * width + width
    merged = width * vision.positive_int("spatial_merge_size") ** 2
    out = vision.positive_int("hidden_size")
    merger = 2 * width + merged * merged + merged + merged * out + out
    return embed + vision.positive_int("depth") * block + merger


def qwen3_vl_vision_params(vision: ConfigView) -> int:
    """Qwen3-VL's tower: a biased 3-D patch convolution, a learned position table, blocks with LayerNorms (weight
    and bias), fused biased q/k/v, a biased output projection and a plain biased MLP; the patch merger (LayerNorm
    before the merge) and one DeepStack merger per ``deepstack_visual_indexes`` entry (LayerNorm after it)."""
    hidden = vision.positive_int("hidden_size")
    inter = vision.positive_int("intermediate_size")
    patch = vision.positive_int("patch_size")
    embed = vision.positive_int("in_channels", 3) * vision.positive_int("temporal_patch_size") * patch * patch * hidden
    embed += hidden + vision.positive_int("num_position_embeddings") * hidden
    block = 4 * hidden + hidden * 3 * hidden + 3 * hidden + hidden * hidden + hidden
    block += hidden * inter + inter + inter * hidden + hidden
    merged = hidden * vision.positive_int("spatial_merge_size") ** 2
    out = vision.positive_int("out_hidden_size")
    merger_mlp = merged * merged + merged + merged * out + out
    deepstack = vision.get("deepstack_visual_indexes") or []
    if not isinstance(deepstack, list):
        raise vision.fail("deepstack_visual_indexes", f"must list block indices, got {deepstack!r}")
    mergers = (2 * hidden + merger_mlp) + len(deepstack) * (2 * merged + merger_mlp)
    return embed + vision.positive_int("depth") * block + mergers


def _text_view(view: ConfigView) -> ConfigView:
    """The decoder's sizes: under ``text_config``, or, in the flat files Qwen2.5-VL was published as, at the top
    level (transformers moves them into ``text_config``; errors then name the top-level field the file has)."""
    text = view.sub("text_config")
    if view.given_keys is not None and "text_config" not in view.given_keys:
        return ConfigView(text.config, view.source, view.prefix, view.given_keys)
    return text


def _read_wrapper(
    view: ConfigView, name: str, family: DecoderFamily, text: ConfigView, towers: int | None = None
) -> ModelArch:
    if towers is None:
        towers = qwen_vl_vision_params(view.sub("vision_config"))
    arch = read_decoder(text, name, family, dtype_views=(view,), vision_params=towers)
    # transformers ties by the wrapper's flag (default false; Qwen2.5-VL forwards an older text_config's true).
    tied = view.flag("tie_word_embeddings", False)
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": view.get("model_type")})


@reads("qwen2_5_vl")
def read_qwen2_5_vl(view: ConfigView, name: str) -> ModelArch:
    """Qwen2.5-VL's decoder is Qwen2's: biased q/k/v, unbiased output projection."""
    return _read_wrapper(view, name, registered_decoder_family("qwen2"), _text_view(view))


@reads("qwen2_vl")
def read_qwen2_vl(view: ConfigView, name: str) -> ModelArch:
    """Qwen2-VL: Qwen2's decoder, as Qwen2.5-VL's, with the older LayerNorm tower."""
    towers = qwen2_vl_vision_params(view.sub("vision_config"))
    return _read_wrapper(view, name, registered_decoder_family("qwen2"), _text_view(view), towers)


@reads("exaone4_5")
def read_exaone4_5(view: ConfigView, name: str) -> ModelArch:
    text = view.sub("text_config")
    return _read_wrapper(view, name, text_decoder_family(view, text), text)


@reads("qwen3_vl")
def read_qwen3_vl(view: ConfigView, name: str) -> ModelArch:
    """Qwen3-VL's decoder is Qwen3's (per-head q/k norms); DeepStack adds vision features to early layers, no
    weights of the decoder's own."""
    towers = qwen3_vl_vision_params(view.sub("vision_config"))
    return _read_wrapper(view, name, registered_decoder_family("qwen3"), view.sub("text_config"), towers)
