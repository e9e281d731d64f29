"""LLaVA-style wrappers, as transformers 5.24 builds them: a decoder under ``text_config`` by its own family, a
vision tower and a projector.

``llava`` (LLaVA 1.5, Pixtral-12B in its transformers layout), ``llava_next`` (LLaVA-NeXT) and ``llava_onevision``
take a CLIP, Pixtral or SigLIP tower and a two-layer projector; ``internvl`` (InternVL3) its InternViT with a
pixel-shuffle projector; ``idefics3`` and ``smolvlm`` (SmolVLM) a SigLIP-like tower with a pixel-shuffle
connector; ``paligemma`` (PaliGemma 1/2) SigLIP with one biased linear. The whole tower is built and counted,
whichever layer the projector reads (``vision_feature_layer``).
"""

from __future__ import annotations

from quotacalc.core.arch import ModelArch
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import ConfigView, read_decoder, reads, text_decoder_family
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


def siglip_tower_params(vision: ConfigView) -> int:
    """SigLIP's vision transformer without its pooling head (Idefics3's tower has the same shapes)."""
    if vision.flag("vision_use_head", True):
        raise UnsupportedArchitecture(
            "a SigLIP pooling head is not counted yet",
            source=vision.source,
            field=vision.prefix + "vision_use_head",
            fix="LLaVA-style models use the tower without it: vision_use_head false",
        )
    return idefics3_vision_params(vision)


#: Vision towers a llava config can name, and how each is counted.
_TOWERS = {
    "clip_vision_model": clip_vision_params,
    "pixtral": pixtral_params,
    "siglip_vision_model": siglip_tower_params,
}


@reads("llava")
def read_llava(view: ConfigView, name: str) -> ModelArch:
    return _read_llava(view, name, image_newline=False)


@reads("llava_next", "llava_onevision")
def read_llava_next(view: ConfigView, name: str) -> ModelArch:
    """LLaVA-NeXT (1.6) and LLaVA-OneVision: LLaVA's layout plus a learned image-newline vector of the text width."""
    return _read_llava(view, name, image_newline=True)


def _read_llava(view: ConfigView, name: str, *, image_newline: bool) -> ModelArch:
    text = view.sub("text_config")
    family = text_decoder_family(view, text)
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
    projector += text_hidden if image_newline else 0
    arch = read_decoder(text, name, family, dtype_views=(view,), vision_params=tower(vision) + projector)
    # transformers ties by the wrapper's flag (default false; llava forwards an older text_config's true).
    tied = view.flag("tie_word_embeddings", False)
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": view.get("model_type")})


def _pair(view: ConfigView, key: str) -> tuple[int, int]:
    """A size given as one integer or as [height, width]."""
    value = view.get(key)
    if isinstance(value, list) and len(value) == 2:
        sub = ConfigView({"h": value[0], "w": value[1]}, view.source, f"{view.prefix}{key}.")
        return sub.positive_int("h"), sub.positive_int("w")
    side = view.positive_int(key)
    return side, side


def internvit_params(vision: ConfigView) -> int:
    """InternViT: class (and mask) token, a biased patch convolution, an absolute position table; per layer q/k/v
    (biased with ``attention_bias``), a biased output projection, optional whole-width q/k RMSNorms, a biased plain
    MLP, two norms (LayerNorm: weight and bias; RMSNorm: weight) and two layer-scale vectors; a final LayerNorm
    unless it mean-pools."""
    hidden = vision.positive_int("hidden_size")
    inter = vision.positive_int("intermediate_size")
    image_h, image_w = _pair(vision, "image_size")
    patch_h, patch_w = _pair(vision, "patch_size")
    patches = (image_h // patch_h) * (image_w // patch_w)
    embeddings = hidden * (2 if vision.flag("use_mask_token") else 1)
    embeddings += vision.positive_int("num_channels", 3) * patch_h * patch_w * hidden + hidden
    embeddings += (patches + 1) * hidden if vision.flag("use_absolute_position_embeddings", True) else 0
    norm_type = vision.get("norm_type", "layer_norm")
    if norm_type not in ("layer_norm", "rms_norm"):
        raise vision.fail("norm_type", f"must be layer_norm or rms_norm, got {norm_type!r}")
    norm = 2 * hidden if norm_type == "layer_norm" else hidden
    per_layer = 3 * hidden * hidden + (3 * hidden if vision.flag("attention_bias") else 0) + hidden * hidden + hidden
    per_layer += 2 * hidden if vision.flag("use_qk_norm") else 0
    per_layer += hidden * inter + inter + inter * hidden + hidden + 2 * norm + 2 * hidden
    final = 0 if vision.flag("use_mean_pooling", True) else 2 * hidden
    return embeddings + vision.positive_int("num_hidden_layers") * per_layer + final


@reads("internvl")
def read_internvl(view: ConfigView, name: str) -> ModelArch:
    """InternVL (transformers layout): the projector pixel-shuffles (1 / downsample_ratio)² patches into one, then a
    LayerNorm and two biased linears into the text model."""
    text = view.sub("text_config")
    family = text_decoder_family(view, text)
    vision = view.sub("vision_config")
    ratio = view.get("downsample_ratio", 0.5)
    if not isinstance(ratio, (int, float)) or isinstance(ratio, bool) or not 0 < ratio <= 1:
        raise view.fail("downsample_ratio", f"must be a fraction in (0, 1], got {ratio!r}")
    shuffled = vision.positive_int("hidden_size") * int(1 / ratio) ** 2
    text_hidden = text.positive_int("hidden_size")
    projector = 2 * shuffled + shuffled * text_hidden + text_hidden + text_hidden * text_hidden + text_hidden
    arch = read_decoder(text, name, family, dtype_views=(view,), vision_params=internvit_params(vision) + projector)
    # transformers ties by the wrapper's flag, whose default is true here.
    tied = view.flag("tie_word_embeddings", True)
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": "internvl"})


def idefics3_vision_params(vision: ConfigView) -> int:
    """Idefics3/SmolVLM's SigLIP-like tower: a biased patch convolution, a position per patch (no class token);
    per layer biased q/k/v/out projections, two LayerNorms and a biased plain MLP; a post-LayerNorm."""
    hidden = vision.positive_int("hidden_size")
    inter = vision.positive_int("intermediate_size")
    patch = vision.positive_int("patch_size")
    positions = (vision.positive_int("image_size") // patch) ** 2
    embeddings = vision.positive_int("num_channels", 3) * patch * patch * hidden + hidden + positions * hidden
    per_layer = 4 * (hidden * hidden + hidden) + 4 * hidden + hidden * inter + inter + inter * hidden + hidden
    return embeddings + vision.positive_int("num_hidden_layers") * per_layer + 2 * hidden


@reads("idefics3", "smolvlm")
def read_idefics3(view: ConfigView, name: str) -> ModelArch:
    """The connector pixel-shuffles scale_factor² patches into one and projects them, without bias."""
    text = view.sub("text_config")
    family = text_decoder_family(view, text)
    vision = view.sub("vision_config")
    connector = vision.positive_int("hidden_size") * view.positive_int("scale_factor", 2) ** 2
    connector *= text.positive_int("hidden_size")
    arch = read_decoder(
        text, name, family, dtype_views=(view,), vision_params=idefics3_vision_params(vision) + connector
    )
    # transformers ties by the wrapper's flag (default false).
    tied = view.flag("tie_word_embeddings", False)
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": view.get("model_type")})


@reads("paligemma")
def read_paligemma(view: ConfigView, name: str) -> ModelArch:
    """PaliGemma: a Gemma or Gemma 2 decoder, SigLIP without its head, one biased linear to ``projection_dim``."""
    text = view.sub("text_config")
    family = text_decoder_family(view, text)
    vision = view.sub("vision_config")
    projection = view.positive_int("projection_dim")
    projector = vision.positive_int("hidden_size") * projection + projection
    arch = read_decoder(text, name, family, dtype_views=(view,), vision_params=siglip_tower_params(vision) + projector)
    # transformers ties by the wrapper's flag, whose default is true here.
    tied = view.flag("tie_word_embeddings", True)
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": "paligemma"})
