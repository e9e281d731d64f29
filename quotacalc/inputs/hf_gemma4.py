"""Gemma 4 (``gemma4_text``, and ``gemma4`` with its vision and audio towers) as transformers 5.24 builds it.

What differs from Gemma 3, each read from the config as transformers reads it:

* Full-attention layers have their own head size and KV heads (``global_head_dim``,
  ``num_global_key_value_heads``), which the resolved config carries as ``per_layer_config`` overrides.
* ``attention_k_eq_v``: full layers have no v_proj (values come from the key projection). vLLM still caches
  K and V for them (it loads K into the V slot of its fused qkv_proj, so its weights hold that copy too).
* ``num_kv_shared_layers``: the last layers reuse the K/V of the last earlier layer of their kind; they
  have no K/V projections or key norm, and vLLM gives them no cache (``kv_sharing_target_layer_name``).
  ``use_double_wide_mlp`` doubles their MLP.
* Per-layer input embeddings (``hidden_size_per_layer_input``, the E2B/E4B models): a second embedding
  table, a model-level projection into it, and a gate and projection in every layer.
* ``enable_moe_block`` (26B-A4B): a routed-expert block beside the dense MLP in every layer, priced as an
  MoE whose one shared expert is that MLP; its router has a learned input scale and per-expert scales.
* The value norm has no weight; every layer keeps Gemma 3's four norms (three more with the MoE block).
"""

from __future__ import annotations

from quotacalc.core.arch import DenseMLP, FullAttention, Layer, ModelArch, MoE, SlidingWindowAttention
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import ConfigView, finish_arch, head_dim_of, layer_kinds, reads

#: Per-layer overrides Gemma 4's config sets (on full-attention layers); any other is not priced.
_LAYER_OVERRIDES = frozenset({"head_dim", "num_key_value_heads"})


def _layer_overrides(view: ConfigView, layers: int) -> dict[int, dict[str, int]]:
    """``per_layer_config`` as layer index -> the sizes it overrides (transformers keys it '05', '11', ...)."""
    declared = view.get("per_layer_config") or {}
    if not isinstance(declared, dict):
        raise view.fail("per_layer_config", "must map layer indices to overrides")
    overrides: dict[int, dict[str, int]] = {}
    for key, values in declared.items():
        index = int(key) if isinstance(key, str) and key.isdigit() else key
        if not isinstance(index, int) or not 0 <= index < layers or not isinstance(values, dict):
            raise view.fail(f"per_layer_config.{key}", f"must be a layer index below {layers} mapping to overrides")
        unknown = sorted(set(values) - _LAYER_OVERRIDES)
        if unknown:
            raise UnsupportedArchitecture(
                f"a per-layer override of {', '.join(unknown)} is not priced yet",
                source=view.source,
                field=f"{view.prefix}per_layer_config.{key}",
            )
        sub = ConfigView(values, view.source, f"{view.prefix}per_layer_config.{key}.")
        overrides[index] = {name: sub.positive_int(name) for name in values}
    return overrides


def _shared_from(view: ConfigView, kinds: list[str]) -> int:
    """Index of the first KV-shared layer; each shared layer's kind must have an earlier layer that caches."""
    layers = len(kinds)
    shared = view.get("num_kv_shared_layers", 0)
    if isinstance(shared, bool) or not isinstance(shared, int) or not 0 <= shared < layers:
        raise view.fail(
            "num_kv_shared_layers",
            f"must be an integer from 0 to {layers - 1}, got {shared!r}",
            "some earlier layer must compute the K/V the shared layers reuse",
        )
    first = layers - shared
    producers = set(kinds[:first])
    for index in range(first, layers):
        if kinds[index] not in producers:
            raise view.fail(
                "num_kv_shared_layers",
                f"layer {index} ({kinds[index]}) shares K/V, but no earlier layer of that kind computes them",
            )
    return first


def _gemma4_moe(view: ConfigView, hidden: int, dense_intermediate: int) -> MoE:
    return MoE(
        hidden_size=hidden,
        num_experts=view.positive_int("num_experts"),
        top_k=view.positive_int("top_k_experts"),
        expert_intermediate_size=view.positive_int("moe_intermediate_size"),
        num_shared_experts=1,
        shared_intermediate_size=dense_intermediate,
        router_scales=True,
    )


def read_gemma4_text(view: ConfigView, name: str, **finish) -> ModelArch:
    """The Gemma 4 decoder: per-kind heads, K=V, KV-shared layers, per-layer inputs, optional MoE block."""
    layers_count = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    heads = view.stated_int("num_attention_heads")
    kv_heads = view.positive_int("num_key_value_heads", heads)
    head_dim = head_dim_of(view, hidden, heads)
    kinds, notes = layer_kinds(view, layers_count)
    overrides = _layer_overrides(view, layers_count)
    first_shared = _shared_from(view, kinds)
    k_eq_v = view.flag("attention_k_eq_v")
    bias = view.flag("attention_bias")
    intermediate = view.stated_int("intermediate_size")
    double_wide = view.flag("use_double_wide_mlp")
    moe_block = view.flag("enable_moe_block")
    per_layer_width = view.get("hidden_size_per_layer_input", 0)
    if per_layer_width:
        per_layer_width = view.positive_int("hidden_size_per_layer_input")
    norms = (7 if moe_block else 4) * hidden + (hidden if per_layer_width else 0)
    if first_shared < layers_count:
        notes.append(
            f"the last {layers_count - first_shared} layers reuse earlier layers' K/V: no cache of their own "
            "(vLLM's KV sharing)"
        )
    if k_eq_v and "full_attention" in kinds:
        notes.append("full layers have no v_proj (K = V) but cache K and V, as vLLM does")
    if moe_block:
        notes.append("the dense MLP beside the experts is priced as one always-active shared expert")
    layers = []
    for sizes in overrides.values():
        layer_kv_heads = sizes.get("num_key_value_heads", kv_heads)
        if layer_kv_heads > heads or heads % layer_kv_heads:
            # transformers derives these overrides from num_global_key_value_heads (on K = V models).
            raise view.fail(
                "num_global_key_value_heads",
                f"{layer_kv_heads} KV heads on the full layers do not divide the {heads} attention heads",
                "each KV head serves a whole group of query heads",
            )
    for index, kind in enumerate(kinds):
        sizes = overrides.get(index, {})
        layer_head_dim = sizes.get("head_dim", head_dim)
        shared = index >= first_shared
        common = dict(
            hidden_size=hidden,
            num_heads=heads,
            num_kv_heads=sizes.get("num_key_value_heads", kv_heads),
            head_dim=layer_head_dim,
            v_head_dim=layer_head_dim,
            qkv_bias=bias,
            o_bias=bias,
            qk_norm=True,
            k_eq_v=k_eq_v and kind == "full_attention",
            kv_shared=shared,
        )
        mixer: FullAttention | SlidingWindowAttention
        if kind == "full_attention":
            mixer = FullAttention(**common)
        elif kind == "sliding_attention":
            mixer = SlidingWindowAttention(**common, window_tokens=view.positive_int("sliding_window"))
        else:
            raise UnsupportedArchitecture(
                f"layer {index} has type '{kind}', which quotacalc cannot price yet",
                source=view.source,
                field=view.prefix + "layer_types",
            )
        layer_intermediate = intermediate * (2 if double_wide and shared else 1)
        feed_forward = (
            _gemma4_moe(view, hidden, layer_intermediate)
            if moe_block
            else DenseMLP(hidden_size=hidden, intermediate_size=layer_intermediate)
        )
        layers.append(
            Layer(
                mixer=mixer,
                feed_forward=feed_forward,
                norm_params=norms,
                per_layer_input_params=2 * hidden * per_layer_width,
            )
        )
    arch = finish_arch(view, name, layers, notes, final_norm=hidden + per_layer_width, tie_default=True, **finish)
    if not per_layer_width:
        return arch
    per_layer_inputs = layers_count * per_layer_width
    table = view.positive_int("vocab_size_per_layer_input") * per_layer_inputs
    note = f"per-layer input embeddings ({table:,} parameters) are gathered per token: stored, not read per step"
    return arch.model_copy(
        update={
            "per_layer_embedding_params": table,
            "per_layer_projection_params": hidden * per_layer_inputs,
            "notes": (*arch.notes, note),
        }
    )


reads("gemma4_text")(read_gemma4_text)


def gemma4_vision_params(vision: ConfigView, text_hidden: int) -> int:
    """Gemma 4's vision encoder (patch embedder, 2-D position table, encoder layers with q/k norms; the pooler
    has no weights) plus the projection into the text model."""
    hidden = vision.positive_int("hidden_size")
    inter = vision.positive_int("intermediate_size")
    layers = vision.positive_int("num_hidden_layers")
    heads = vision.positive_int("num_attention_heads")
    kv_heads = vision.positive_int("num_key_value_heads", heads)
    head_dim = head_dim_of(vision, hidden, heads)
    patch = vision.positive_int("patch_size")
    embedder = 3 * patch * patch * hidden + 2 * vision.positive_int("position_embedding_size") * hidden
    attention = 2 * hidden * heads * head_dim + 2 * hidden * kv_heads * head_dim + 2 * head_dim
    per_layer = attention + 3 * hidden * inter + 4 * hidden
    return embedder + layers * per_layer + hidden * text_hidden


def gemma4_audio_params(audio: ConfigView, text_hidden: int) -> int:
    """Gemma 4's audio encoder (a conformer: two-conv subsampler, then per layer two feed-forward halves,
    chunked attention with a relative-position key projection, a light depthwise conv) plus its projection."""
    hidden = audio.positive_int("hidden_size")
    layers = audio.positive_int("num_hidden_layers")
    heads = audio.positive_int("num_attention_heads")
    channels = audio.get("subsampling_conv_channels")
    if not (
        isinstance(channels, list)
        and len(channels) == 2
        and all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in channels)
    ):
        raise audio.fail("subsampling_conv_channels", f"must list two positive channel counts, got {channels!r}")
    first, second = channels
    subsampler = 9 * first + first + first * second * 9 + second + (first // 4) * second * hidden
    feed_forward = 8 * hidden * hidden + 2 * hidden
    attention = 5 * hidden * hidden + hidden // heads
    light_conv = 3 * hidden * hidden + hidden * audio.positive_int("conv_kernel_size") + 2 * hidden
    per_layer = 2 * feed_forward + attention + light_conv + 3 * hidden
    out = audio.positive_int("output_proj_dims")
    return subsampler + layers * per_layer + hidden * out + out + out * text_hidden


@reads("gemma4")
def read_gemma4(view: ConfigView, name: str) -> ModelArch:
    text = view.sub("text_config")
    text_hidden = text.positive_int("hidden_size")
    towers = 0
    if view.has("vision_config"):
        towers += gemma4_vision_params(view.sub("vision_config"), text_hidden)
    if view.has("audio_config"):
        towers += gemma4_audio_params(view.sub("audio_config"), text_hidden)
    arch = read_gemma4_text(text, name, dtype_views=(view,), vision_params=towers)
    tied = view.flag("tie_word_embeddings", text.flag("tie_word_embeddings", True))
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": "gemma4"})
