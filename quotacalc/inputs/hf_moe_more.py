"""Readers for more mixture-of-experts families: OLMoE (``olmoe``), FlexOlmo (``flex_olmo``), DBRX (``dbrx``),
Arcee's AFMoE (``afmoe``, the Trinity models) and Meituan's LongCat-Flash (``longcat_flash``).

Each mirrors the modeling file of transformers 5.24 (``transformers/models/<family>/``) and is checked
against what vLLM builds for it (``vllm/model_executor/models/<family>.py``): where the two would build
different layers from one config, the config is refused with the field that makes them differ.
"""

from __future__ import annotations

from quotacalc.core.arch import (
    DenseMLP,
    FullAttention,
    GatedFullAttention,
    GatedSlidingWindowAttention,
    Layer,
    ModelArch,
    MoE,
    ZeroExpertMoE,
)
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import (
    AttentionTraits,
    ConfigView,
    DecoderFamily,
    attention_sizes,
    dense_mlp,
    finish_arch,
    mla_attention,
    read_decoder,
    reads,
)

# --------------------------------------------------------------------------- OLMoE


def _olmoe_moe(view: ConfigView, index: int) -> MoE:
    """Every layer: ``num_experts`` experts of ``intermediate_size``, top ``num_experts_per_tok``, a router
    without bias, no shared expert. Each must be stated: the class defaults are another model's."""
    return MoE(
        hidden_size=view.stated_int("hidden_size"),
        num_experts=view.stated_int("num_experts"),
        top_k=view.stated_int("num_experts_per_tok"),
        expert_intermediate_size=view.stated_int("intermediate_size"),
    )


#: OLMoE: RMSNorm on queries and keys over the whole projection (hidden and KV heads x head_dim wide), as
#: OLMo 2's; no biases in vLLM's olmoe.py.
_OLMOE = DecoderFamily(attention=AttentionTraits(qk_norm=True, qk_norm_whole=True), feed_forward=_olmoe_moe)


def _head_dim_is_hidden_over_heads(view: ConfigView, hidden: int, heads: int, family: str) -> None:
    """vLLM's model file takes head_dim = hidden / heads whatever the config says; transformers reads a stated
    ``head_dim``: a config whose two differ describes two models."""
    if hidden % heads:
        raise view.fail("num_attention_heads", f"{heads} heads do not divide the hidden size {hidden}")
    head_dim = view.get("head_dim")
    if head_dim is not None and head_dim != hidden // heads:
        raise view.fail(
            "head_dim",
            f"is {head_dim}, but vLLM's {family}.py sizes heads as hidden_size / num_attention_heads = {hidden // heads}",
            "leave head_dim out, or state hidden_size / num_attention_heads",
        )


@reads("olmoe", "flex_olmo")
def read_olmoe(view: ConfigView, name: str) -> ModelArch:
    """AllenAI's OLMoE (``OlmoeForCausalLM``) and FlexOlmo (``FlexOlmoForCausalLM``): full attention with
    whole-projection q/k norms, experts in every layer, two RMSNorms per layer (before attention and MLP in
    OLMoE, after them in FlexOlmo: the same count). vLLM's flex_olmo.py reuses olmoe.py's attention.
    ``clip_qkv`` clamps activations only: no parameter or cache effect."""
    family = view.get("model_type")
    if view.flag("attention_bias"):
        raise UnsupportedArchitecture(
            f"attention biases: transformers builds them, vLLM's {family}.py does not (bias=False)",
            source=view.source,
            field=view.prefix + "attention_bias",
        )
    hidden, heads = view.stated_int("hidden_size"), view.stated_int("num_attention_heads")
    _head_dim_is_hidden_over_heads(view, hidden, heads, family)
    return read_decoder(view, name, _OLMOE)


# --------------------------------------------------------------------------- DBRX


@reads("dbrx")
def read_dbrx(view: ConfigView, name: str) -> ModelArch:
    """Databricks' DBRX (``DbrxForCausalLM``): GQA through one fused ``Wqkv`` (no biases; ``clip_qkv`` clamps
    activations only), weight-only LayerNorms, and in every layer ``ffn_config.moe_num_experts`` GLU experts
    (w1, v1, w2) of ``ffn_hidden_size``, top ``moe_top_k``, a router without bias.

    The sizes sit under DBRX's own names (``d_model``, ``n_heads``, ``n_layers``, ``attn_config.kv_n_heads``,
    ``ffn_config.*``); each must be stated, since the class defaults are another model's.
    """
    layer_count = view.stated_int("n_layers")
    hidden = view.stated_int("d_model")
    heads = view.stated_int("n_heads")
    attn, ffn = view.sub("attn_config"), view.sub("ffn_config")
    if hidden % heads:
        raise view.fail("n_heads", f"{heads} heads do not divide d_model {hidden}")
    kv_heads = attn.stated_int("kv_n_heads")
    if kv_heads > heads or heads % kv_heads:
        raise attn.fail(
            "kv_n_heads", f"{kv_heads} KV heads must divide the {heads} attention heads", "each KV head serves a group"
        )
    attention = FullAttention(
        hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads, head_dim=hidden // heads, v_head_dim=hidden // heads
    )
    moe = MoE(
        hidden_size=hidden,
        num_experts=ffn.stated_int("moe_num_experts"),
        top_k=ffn.stated_int("moe_top_k"),
        expert_intermediate_size=ffn.stated_int("ffn_hidden_size"),
    )
    layers = [Layer(mixer=attention, feed_forward=moe, norm_params=2 * hidden) for _ in range(layer_count)]
    return finish_arch(view, name, layers, [])


# --------------------------------------------------------------------------- AFMoE (Arcee Trinity)


def _afmoe_attention(view: ConfigView) -> tuple[list[GatedFullAttention | GatedSlidingWindowAttention], list[str]]:
    """Per ``layer_types`` (transformers derives them from ``global_attn_every_n_layers``): full or sliding
    attention, each with per-head q/k RMSNorm and a sigmoid output gate (``gate_proj``, hidden -> heads x
    head_dim); a window at least the model's context is full attention."""
    layer_count = view.stated_int("num_hidden_layers")
    kinds = view.get("layer_types")
    allowed = ("full_attention", "sliding_attention")
    if not isinstance(kinds, list) or len(kinds) != layer_count or any(kind not in allowed for kind in kinds):
        raise view.fail(
            "layer_types", f"must list 'full_attention' or 'sliding_attention' for each of the {layer_count} layers"
        )
    sizes = attention_sizes(view)
    window = view.positive_int("sliding_window") if "sliding_attention" in kinds else None
    max_context = view.context_tokens()
    notes: list[str] = []
    full = GatedFullAttention(**sizes, qk_norm=True)
    sliding: GatedFullAttention | GatedSlidingWindowAttention
    if window is None or (max_context and window >= max_context):
        if window is not None:
            notes.append(f"sliding window {window} >= max context {max_context}: those layers priced as full attention")
        sliding = full
    else:
        sliding = GatedSlidingWindowAttention(**sizes, qk_norm=True, window_tokens=window)
    return [full if kind == "full_attention" else sliding for kind in kinds], notes


@reads("afmoe")
def read_afmoe(view: ConfigView, name: str) -> ModelArch:
    """Arcee's AFMoE (``AfmoeForCausalLM``, Trinity Nano/Mini/Large): gated GQA, full or sliding per layer; four
    RMSNorms per layer (before and after attention and MLP); the first ``num_dense_layers`` layers dense
    (``intermediate_size``), then ``num_experts`` experts of ``moe_intermediate_size`` beside
    ``num_shared_experts`` shared ones (one MLP that many times as wide, the same count).

    The router's ``expert_bias`` is a parameter in both engines (one float per expert), counted as a router
    bias. vLLM's afmoe.py builds no attention biases and serves only silu: configs that differ are refused.
    """
    if view.flag("attention_bias"):
        raise UnsupportedArchitecture(
            "attention biases: transformers builds them, vLLM's afmoe.py does not (bias=False)",
            source=view.source,
            field=view.prefix + "attention_bias",
        )
    if view.get("hidden_act") != "silu":
        raise UnsupportedArchitecture(
            f"hidden_act '{view.get('hidden_act')}': vLLM's afmoe.py serves only silu",
            source=view.source,
            field=view.prefix + "hidden_act",
        )
    hidden = view.stated_int("hidden_size")
    mixers, notes = _afmoe_attention(view)
    dense_layers = view.get("num_dense_layers", 0)
    if isinstance(dense_layers, bool) or not isinstance(dense_layers, int) or dense_layers < 0:
        raise view.fail("num_dense_layers", f"must be a whole number of layers, got {dense_layers!r}")
    shared = view.get("num_shared_experts", 0)
    if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
        raise view.fail("num_shared_experts", f"must be a whole number of experts, got {shared!r}")
    width = view.stated_int("moe_intermediate_size")
    moe = MoE(
        hidden_size=hidden,
        num_experts=view.stated_int("num_experts"),
        top_k=view.stated_int("num_experts_per_tok"),
        expert_intermediate_size=width,
        router_bias=True,
        num_shared_experts=shared,
        shared_intermediate_size=width,
    )
    dense: DenseMLP = dense_mlp(view)
    layers = [
        Layer(mixer=mixer, feed_forward=dense if index < dense_layers else moe, norm_params=4 * hidden)
        for index, mixer in enumerate(mixers)
    ]
    return finish_arch(view, name, layers, notes)


# --------------------------------------------------------------------------- LongCat-Flash


@reads("longcat_flash")
def read_longcat_flash(view: ConfigView, name: str) -> ModelArch:
    """Meituan's LongCat-Flash (``LongcatFlashForCausalLM``): each of ``num_layers`` layers holds two MLA
    attention sublayers, each followed by a dense MLP of ``ffn_hidden_size``, and a shortcut MoE beside them:
    ``n_routed_experts`` experts of ``expert_ffn_hidden_size`` and ``zero_expert_num`` identity experts, top
    ``moe_topk``, the router scoring both. Priced as three layers each (attention + MLP twice, then the MoE
    alone), so the cache holds 2 x ``num_layers`` MLA latents per token, as vLLM's longcat_flash.py allocates.

    transformers 5.24 sizes the experts' fused gate/up projection for routed + identity experts (its
    down projection for routed experts only); the checkpoint and vLLM hold routed experts only, so that is
    what is counted (tests/test_families_olmoe_dbrx_lfm2_longcat.py checks the difference against transformers' own count).
    The router's score correction bias is a buffer in transformers and is not counted.
    """
    layer_count = view.stated_int("num_layers")
    hidden = view.stated_int("hidden_size")
    view.refuse_flags(
        ("attention_bias", "router_bias"), "{flag} adds biases quotacalc does not price yet for longcat_flash"
    )
    mla = mla_attention(view)
    dense = DenseMLP(hidden_size=hidden, intermediate_size=view.stated_int("ffn_hidden_size"))
    zero_experts = view.get("zero_expert_num", 0)
    if isinstance(zero_experts, bool) or not isinstance(zero_experts, int) or zero_experts < 0:
        raise view.fail("zero_expert_num", f"must be a whole number of experts, got {zero_experts!r}")
    routed = dict(
        hidden_size=hidden,
        num_experts=view.stated_int("n_routed_experts"),
        top_k=view.stated_int("moe_topk"),
        expert_intermediate_size=view.stated_int("expert_ffn_hidden_size"),
    )
    moe = ZeroExpertMoE(**routed, zero_experts=zero_experts) if zero_experts else MoE(**routed)
    sublayer = Layer(mixer=mla, feed_forward=dense, norm_params=2 * hidden)
    shortcut = Layer(mixer=None, feed_forward=moe, norm_params=0)
    layers = [layer for _ in range(layer_count) for layer in (sublayer, sublayer, shortcut)]
    notes = [
        f"each of the {layer_count} LongCat layers is priced as three: two MLA + MLP sublayers and the shortcut MoE",
    ]
    if zero_experts:
        notes.append(
            f"active parameters count all {routed['top_k']} routed slots as real experts, an upper bound: "
            f"{zero_experts} identity experts take some of them and compute nothing"
        )
    return finish_arch(view, name, layers, notes)
