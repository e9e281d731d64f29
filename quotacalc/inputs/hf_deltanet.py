"""Readers for the delta-rule hybrids: Qwen3-Next, Qwen3.5 (dense and MoE), OLMo Hybrid, Kimi Linear.

Each mirrors the modeling file of transformers 5.24 (``transformers/models/<family>/``). Layers are
Gated DeltaNet linear attention or full attention, as ``layer_types`` lists them (Qwen's configs may
give ``full_attention_interval`` instead, from which transformers derives it). Qwen's full-attention
layers project a sigmoid output gate with the queries (q_proj twice as wide) and RMSNorm queries
and keys; the MoE blocks have a gated shared expert. Multi-token-prediction layers
(``mtp_num_hidden_layers``) are not built by transformers and are not counted.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from quotacalc.core.arch import (
    DenseMLP,
    FullAttention,
    GatedDeltaNetMixer,
    GatedFullAttention,
    KimiDeltaAttentionMixer,
    Layer,
    ModelArch,
    MoE,
)
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import ConfigView, attention_sizes, finish_arch, mla_attention, reads
from quotacalc.inputs.hf_hybrid import block_types

_LINEAR = "linear_attention"
_ATTENTION = "full_attention"


def gated_deltanet(view: ConfigView) -> GatedDeltaNetMixer:
    """The linear-attention mixer; its heads and head sizes set the state, so the file must state them."""
    return GatedDeltaNetMixer(
        hidden_size=view.stated_int("hidden_size"),
        num_k_heads=view.stated_int("linear_num_key_heads"),
        num_v_heads=view.stated_int("linear_num_value_heads"),
        head_k_dim=view.stated_int("linear_key_head_dim"),
        head_v_dim=view.stated_int("linear_value_head_dim"),
        d_conv=view.positive_int("linear_conv_kernel_dim"),
    )


def gated_attention(view: ConfigView) -> GatedFullAttention:
    """Full attention with an output gate in q_proj and q/k RMSNorm; ``attention_bias`` biases q, k, v and o."""
    bias = view.flag("attention_bias")
    return GatedFullAttention(**attention_sizes(view), qkv_bias=bias, o_bias=bias, qk_norm=True)


def _stated_experts(view: ConfigView) -> int:
    """``num_experts`` as the file states it (the class default is another model's), 0 allowed (no experts)."""
    if view.given_keys is not None and view.prefix + "num_experts" not in view.given_keys:
        raise view.fail("num_experts", "missing from the config", "a mixture-of-experts config states its experts")
    experts = view.get("num_experts", 0)
    return 0 if experts == 0 else view.positive_int("num_experts")


def _qwen_gated_moe(view: ConfigView, experts: int) -> MoE:
    """Routed experts plus one shared expert behind a sigmoid gate; transformers builds the gate even when
    ``shared_expert_intermediate_size`` is 0."""
    return MoE(
        hidden_size=view.stated_int("hidden_size"),
        num_experts=experts,
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=view.positive_int("moe_intermediate_size"),
        num_shared_experts=1,
        shared_intermediate_size=view.get("shared_expert_intermediate_size", 0),
        shared_expert_gate=True,
    )


def _dense_mlp(view: ConfigView) -> DenseMLP:
    """A SwiGLU MLP without biases; its width must be stated (the class default is another model's)."""
    return DenseMLP(hidden_size=view.stated_int("hidden_size"), intermediate_size=view.stated_int("intermediate_size"))


def _hybrid_layers(view: ConfigView, feed_forward_of: Callable[[int], DenseMLP | MoE]) -> list[Layer]:
    hidden = view.stated_int("hidden_size")
    types = block_types(view, view.stated_int("num_hidden_layers"), {_LINEAR, _ATTENTION})
    mixers = {_LINEAR: gated_deltanet, _ATTENTION: gated_attention}
    built = {kind: mixers[kind](view) for kind in set(types)}
    return [
        Layer(mixer=built[kind], feed_forward=feed_forward_of(index), norm_params=2 * hidden)
        for index, kind in enumerate(types)
    ]


def _notes(view: ConfigView) -> list[str]:
    notes = []
    if view.get("mtp_num_hidden_layers") or view.get("num_nextn_predict_layers"):
        notes.append("multi-token-prediction layers are not counted (transformers does not build them)")
    ssm_dtype = view.get("mamba_ssm_dtype")
    if ssm_dtype:
        notes.append(
            f"the config asks for a {ssm_dtype} recurrent state (mamba_ssm_dtype): priced so unless --state-dtype "
            "says otherwise, as vLLM keeps it unless --mamba-ssm-cache-dtype does"
        )
    return notes


# --------------------------------------------------------------------------- Qwen3-Next


@reads("qwen3_next")
def read_qwen3_next(view: ConfigView, name: str) -> ModelArch:
    """Gated DeltaNet or gated attention per layer; experts every ``decoder_sparse_step`` layers except
    ``mlp_only_layers``, a dense SwiGLU MLP elsewhere (as Qwen3-MoE)."""
    experts = _stated_experts(view)
    step = view.positive_int("decoder_sparse_step", 1)
    dense_only = set(view.get("mlp_only_layers") or [])
    layer_count = view.stated_int("num_hidden_layers")
    sparse = [bool(experts) and index not in dense_only and (index + 1) % step == 0 for index in range(layer_count)]
    moe = _qwen_gated_moe(view, experts) if any(sparse) else None
    dense = None if all(sparse) else _dense_mlp(view)

    def feed_forward(index: int) -> DenseMLP | MoE:
        return cast(MoE, moe) if sparse[index] else cast(DenseMLP, dense)  # each built where a layer has it

    return finish_arch(view, name, _hybrid_layers(view, feed_forward), _notes(view))


# --------------------------------------------------------------------------- Qwen3.5


def qwen3_5_vision_params(vision: ConfigView) -> int:
    """Qwen3.5's vision tower: a 3-D patch embedding, learned positions, ViT blocks, and the patch merger
    that projects ``spatial_merge_size``² patches into the text model (``out_hidden_size``)."""
    # The tower's sizes must be stated: without a vision_config transformers builds its default tower.
    hidden = vision.stated_int("hidden_size")
    inter = vision.stated_int("intermediate_size")
    depth = vision.stated_int("depth")
    patch = vision.positive_int("patch_size")
    temporal = vision.positive_int("temporal_patch_size")
    channels = vision.positive_int("in_channels")
    merged = hidden * vision.positive_int("spatial_merge_size") ** 2
    patch_embed = channels * temporal * patch * patch * hidden + hidden
    positions = vision.positive_int("num_position_embeddings") * hidden
    # Two LayerNorms, qkv and proj with biases, a two-matrix MLP with biases.
    block = 2 * 2 * hidden + (hidden * 3 * hidden + 3 * hidden) + (hidden * hidden + hidden)
    block += hidden * inter + inter + inter * hidden + hidden
    out = vision.stated_int("out_hidden_size")
    merger = 2 * hidden + merged * merged + merged + merged * out + out
    return patch_embed + positions + depth * block + merger


def _qwen3_5_dense(text: ConfigView) -> Callable[[int], DenseMLP]:
    """Qwen3.5 dense: the same SwiGLU MLP in every layer; experts in its config would be ignored."""
    experts = text.get("num_experts", 0)
    if isinstance(experts, int) and experts > 1:
        raise text.fail(
            "num_experts",
            f"{experts} experts, but Qwen3.5 dense has no experts and would ignore them",
            "use model_type qwen3_5_moe (qwen3_5_moe_text) for the mixture-of-experts model",
        )
    mlp = _dense_mlp(text)
    return lambda index: mlp


def _qwen3_5_moe(text: ConfigView) -> Callable[[int], MoE]:
    """Qwen3.5 MoE: experts and a gated shared expert in every layer."""
    experts = _stated_experts(text)
    if not experts:
        raise text.fail("num_experts", "is 0, but every Qwen3.5-MoE layer routes to experts")
    moe = _qwen_gated_moe(text, experts)
    return lambda index: moe


def _read_qwen3_5(view: ConfigView, name: str, feed_forward_of: Callable[[ConfigView], Callable]) -> ModelArch:
    """The multimodal wrapper: the text model under ``text_config``, the vision tower counted beside it."""
    text = view.sub("text_config")
    vision_params = qwen3_5_vision_params(view.sub("vision_config"))
    layers = _hybrid_layers(text, feed_forward_of(text))
    arch = finish_arch(text, name, layers, _notes(text), dtype_views=(view,), vision_params=vision_params)
    # The wrapper's own tie_word_embeddings is what transformers ties by (its default is False).
    return arch.model_copy(
        update={"tie_word_embeddings": view.flag("tie_word_embeddings"), "model_type": view.get("model_type")}
    )


@reads("qwen3_5")
def read_qwen3_5(view: ConfigView, name: str) -> ModelArch:
    return _read_qwen3_5(view, name, _qwen3_5_dense)


@reads("qwen3_5_moe")
def read_qwen3_5_moe(view: ConfigView, name: str) -> ModelArch:
    return _read_qwen3_5(view, name, _qwen3_5_moe)


@reads("qwen3_5_text")
def read_qwen3_5_text(view: ConfigView, name: str) -> ModelArch:
    """A text-only Qwen3.5 checkpoint (``Qwen3_5ForCausalLM``): no vision tower."""
    return finish_arch(view, name, _hybrid_layers(view, _qwen3_5_dense(view)), _notes(view))


@reads("qwen3_5_moe_text")
def read_qwen3_5_moe_text(view: ConfigView, name: str) -> ModelArch:
    """A text-only Qwen3.5-MoE checkpoint (``Qwen3_5MoeForCausalLM``): no vision tower."""
    return finish_arch(view, name, _hybrid_layers(view, _qwen3_5_moe(view)), _notes(view))


# --------------------------------------------------------------------------- OLMo Hybrid


@reads("olmo_hybrid")
def read_olmo_hybrid(view: ConfigView, name: str) -> ModelArch:
    """Gated DeltaNet or plain attention per ``layer_types``, a SwiGLU MLP in every layer.

    Attention layers norm after attention and after the MLP (OLMo 2's order) and RMSNorm the whole query
    and key projections (heads x head_dim each, not per head), counted with the attention as OLMo 2's are. The linear-attention sizes default to ones transformers derives from the stated hidden size and
    heads (``0.75 x hidden / heads`` key dim, twice that for values), never to another model's.
    """
    hidden = view.stated_int("hidden_size")
    bias = view.flag("attention_bias")
    # OLMo 2's whole-projection q/k norms, counted as OLMo 2's are (hf_arch's qk_norm_whole).
    attention = FullAttention(**attention_sizes(view), qkv_bias=bias, o_bias=bias, qk_norm=True, qk_norm_whole=True)
    deltanet = GatedDeltaNetMixer(
        hidden_size=hidden,
        num_k_heads=view.positive_int("linear_num_key_heads"),
        num_v_heads=view.positive_int("linear_num_value_heads"),
        head_k_dim=view.positive_int("linear_key_head_dim"),
        head_v_dim=view.positive_int("linear_value_head_dim"),
        d_conv=view.positive_int("linear_conv_kernel_dim"),
    )
    mlp = _dense_mlp(view)
    blocks = {
        _LINEAR: Layer(mixer=deltanet, feed_forward=mlp, norm_params=2 * hidden),
        _ATTENTION: Layer(mixer=attention, feed_forward=mlp, norm_params=2 * hidden),
    }
    types = block_types(view, view.stated_int("num_hidden_layers"), {_LINEAR, _ATTENTION})
    return finish_arch(view, name, [blocks[kind] for kind in types], [])


# --------------------------------------------------------------------------- Kimi Linear


def _stated_linear(view: ConfigView, nested: str, key: str) -> int:
    """A Kimi Delta Attention size, stated as ``linear_attn_config.<nested>`` (the published form) or ``key``."""
    section = view.get("linear_attn_config")
    stated = (
        view.given_keys is None
        or view.prefix + key in view.given_keys
        or (isinstance(section, dict) and section.get(nested) is not None)
    )
    if not stated:
        raise view.fail(
            f"linear_attn_config.{nested}", "missing from the config", "a model config must state its own sizes"
        )
    return view.positive_int(key)


def _kimi_layer_kinds(view: ConfigView, layer_count: int) -> tuple[list[str], list[str]]:
    """Each layer's mixer and feed-forward kind, as transformers resolved them from the stated layer lists."""
    section = view.get("linear_attn_config")
    listed = isinstance(section, dict) and section.get("kda_layers") and section.get("full_attn_layers")
    if view.given_keys is not None and "layer_types" not in view.given_keys and not listed:
        # transformers would invent a pattern (MLA every fourth layer) that belongs to no released model.
        raise view.fail(
            "linear_attn_config.full_attn_layers", "missing from the config", "state kda_layers and full_attn_layers"
        )
    mixers = block_types(view, layer_count, {_LINEAR, _ATTENTION})
    ffns = view.get("mlp_layer_types")
    if not isinstance(ffns, list) or len(ffns) != layer_count or not set(ffns) <= {"dense", "sparse"}:
        raise view.fail("mlp_layer_types", f"must list 'dense' or 'sparse' for each of the {layer_count} layers")
    return mixers, ffns


@reads("kimi_linear")
def read_kimi_linear(view: ConfigView, name: str) -> ModelArch:
    """Kimi Delta Attention or MLA per layer; a dense SwiGLU MLP for the first ``first_k_dense_replace`` layers,
    then experts with shared experts (as transformers lists them in ``mlp_layer_types``).

    The MLA layers are DeepSeek's (no query LoRA in the released model), so their cache is the latent plus
    the rope dims per token, as vLLM caches MLA even where Kimi skips the rotation (``mla_use_nope``).
    """
    hidden = view.stated_int("hidden_size")
    layer_count = view.stated_int("num_hidden_layers")
    if view.flag("attention_bias"):
        raise UnsupportedArchitecture(
            "attention_bias also biases Kimi's MLA down-projections, which quotacalc does not count yet",
            source=view.source,
            field=view.prefix + "attention_bias",
        )
    mixers, ffns = _kimi_layer_kinds(view, layer_count)
    built: dict[str, object] = {}
    if _ATTENTION in mixers:
        built[_ATTENTION] = mla_attention(view)
    if _LINEAR in mixers:
        built[_LINEAR] = KimiDeltaAttentionMixer(
            hidden_size=hidden,
            num_heads=_stated_linear(view, "num_heads", "linear_num_heads"),
            head_dim=_stated_linear(view, "head_dim", "linear_head_dim"),
            d_conv=view.positive_int("linear_conv_kernel_dim"),
        )
    if "sparse" in ffns:
        built["sparse"] = _kimi_moe(view)
    if "dense" in ffns:
        built["dense"] = _dense_mlp(view)
    layers = [
        Layer(mixer=built[mixer], feed_forward=built[ffn], norm_params=2 * hidden)
        for mixer, ffn in zip(mixers, ffns, strict=True)
    ]
    notes = []
    if view.get("num_nextn_predict_layers"):
        notes.append("multi-token-prediction layers are not counted (transformers does not build them)")
    if _LINEAR in mixers:
        notes.append(
            "Kimi Delta Attention's recurrent state is held in fp32 whatever the state dtype, as vLLM holds it"
        )
    return finish_arch(view, name, layers, notes)


def _kimi_moe(view: ConfigView) -> MoE:
    """Routed experts and ``n_shared_experts`` shared ones of the same width (one MLP that many times wide)."""
    if view.given_keys is not None and not {"num_experts", "num_local_experts"} & view.given_keys:
        raise view.fail("num_experts", "missing from the config", "a mixture-of-experts config states its experts")
    # transformers reads the released num_shared_experts as n_shared_experts.
    shared = view.get("n_shared_experts", 0)
    width = view.positive_int("moe_intermediate_size")
    return MoE(
        hidden_size=view.stated_int("hidden_size"),
        num_experts=view.positive_int("num_local_experts"),
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=width,
        num_shared_experts=1,
        shared_intermediate_size=width * shared,
    )
