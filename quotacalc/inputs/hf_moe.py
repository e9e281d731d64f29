"""Readers for mixture-of-experts families beyond Mixtral, Qwen-MoE and DeepSeek: GLM-4.5/4.6/4.7
(``glm4_moe``), GLM-4.7-Flash (``glm4_moe_lite``) and MiniMax-M2.

Each mirrors the modeling file of transformers 5.24 (``transformers/models/<family>/``): which layers
are dense and which hold experts, and every bias and norm those modules build. Routers' score
correction biases (``e_score_correction_bias``) are buffers there, not parameters, and are not
counted (one float per expert per layer); multi-token-prediction layers are not built, so not counted.
"""

from __future__ import annotations

from quotacalc.core.arch import DenseMLP, FullAttention, Layer, MLAAttention, ModelArch, MoE
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import ConfigView, finish_arch, head_dim_of, reads


def _attention_sizes(view: ConfigView) -> dict[str, int]:
    """Heads and widths every family here states itself (class defaults belong to another model)."""
    hidden = view.stated_int("hidden_size")
    heads = view.stated_int("num_attention_heads")
    head_dim = head_dim_of(view, hidden, heads)
    return dict(
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=view.positive_int("num_key_value_heads", heads),
        head_dim=head_dim,
        v_head_dim=head_dim,
    )


def _mtp_notes(view: ConfigView) -> list[str]:
    if view.get("num_nextn_predict_layers") or view.get("num_mtp_modules"):
        return ["multi-token-prediction layers are not counted (transformers does not build them)"]
    return []


def _dense_prefix(view: ConfigView, layers: int) -> int:
    first_dense = view.get("first_k_dense_replace", 0)
    if isinstance(first_dense, bool) or not isinstance(first_dense, int) or first_dense < 0:
        raise view.fail("first_k_dense_replace", f"must be a whole number of layers, got {first_dense!r}")
    return min(first_dense, layers)


def _glm_moe(view: ConfigView) -> MoE:
    """Routed experts plus ``n_shared_experts`` shared ones of the same width, a router without bias."""
    width = view.positive_int("moe_intermediate_size")
    shared = view.get("n_shared_experts", 0)
    if isinstance(shared, bool) or not isinstance(shared, int) or shared < 0:
        raise view.fail("n_shared_experts", f"must be a whole number of experts, got {shared!r}")
    return MoE(
        hidden_size=view.stated_int("hidden_size"),
        num_experts=view.positive_int("n_routed_experts"),
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=width,
        num_shared_experts=shared,
        shared_intermediate_size=width,
    )


# --------------------------------------------------------------------------- GLM-4.5 / 4.6 / 4.7


@reads("glm4_moe")
def read_glm4_moe(view: ConfigView, name: str) -> ModelArch:
    """GQA attention with q/k/v biases (``attention_bias``; o_proj never biased) and per-head q/k RMSNorm
    when ``use_qk_norm``; the first ``first_k_dense_replace`` layers dense, experts after.

    ``partial_rotary_factor`` only changes which dimensions rotate: no parameter or cache effect.
    """
    layer_count = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    attention = FullAttention(
        **_attention_sizes(view), qkv_bias=view.flag("attention_bias"), qk_norm=view.flag("use_qk_norm")
    )
    first_dense = _dense_prefix(view, layer_count)
    moe, dense = _glm_moe(view), DenseMLP(hidden_size=hidden, intermediate_size=view.positive_int("intermediate_size"))
    layers = [
        Layer(mixer=attention, feed_forward=dense if index < first_dense else moe, norm_params=2 * hidden)
        for index in range(layer_count)
    ]
    return finish_arch(view, name, layers, _mtp_notes(view))


# --------------------------------------------------------------------------- GLM-4.7-Flash (MLA)


@reads("glm4_moe_lite")
def read_glm4_moe_lite(view: ConfigView, name: str) -> ModelArch:
    """DeepSeek-V3's MLA and experts under GLM's names; which layers are dense is ``mlp_layer_types``.

    transformers builds from ``mlp_layer_types`` (by default one dense layer, then experts) and ignores
    ``first_k_dense_replace``, which vLLM reads: a config whose two disagree is refused.
    """
    layer_count = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    if view.flag("attention_bias"):
        # transformers then biases q_a_proj and kv_a_proj_with_mqa too, which MLAAttention does not count.
        raise UnsupportedArchitecture(
            "MLA with attention_bias is not priced yet", source=view.source, field=view.prefix + "attention_bias"
        )
    kinds = view.get("mlp_layer_types")
    if not isinstance(kinds, list) or len(kinds) != layer_count or any(k not in ("dense", "sparse") for k in kinds):
        raise view.fail("mlp_layer_types", f"must list 'dense' or 'sparse' for each of the {layer_count} layers")
    dense_prefix = next((index for index, kind in enumerate(kinds) if kind == "sparse"), layer_count)
    stated_first = view.get("first_k_dense_replace")
    if stated_first is not None and (stated_first != dense_prefix or "dense" in kinds[dense_prefix:]):
        raise view.fail(
            "first_k_dense_replace",
            f"is {stated_first}, but mlp_layer_types makes {kinds.count('dense')} layers dense "
            f"(transformers builds mlp_layer_types, vLLM reads first_k_dense_replace)",
            "state mlp_layer_types to match first_k_dense_replace",
        )
    mla = MLAAttention(
        hidden_size=hidden,
        num_heads=view.stated_int("num_attention_heads"),
        q_lora_rank=view.get("q_lora_rank") or None,
        kv_lora_rank=view.positive_int("kv_lora_rank"),
        qk_nope_head_dim=view.positive_int("qk_nope_head_dim"),
        qk_rope_head_dim=view.positive_int("qk_rope_head_dim"),
        v_head_dim=view.positive_int("v_head_dim"),
    )
    moe, dense = _glm_moe(view), DenseMLP(hidden_size=hidden, intermediate_size=view.positive_int("intermediate_size"))
    layers = [
        Layer(mixer=mla, feed_forward=moe if kind == "sparse" else dense, norm_params=2 * hidden) for kind in kinds
    ]
    return finish_arch(view, name, layers, _mtp_notes(view))


# --------------------------------------------------------------------------- MiniMax-M2


@reads("minimax_m2")
def read_minimax_m2(view: ConfigView, name: str) -> ModelArch:
    """Full attention in every layer, q/k RMSNorm over the whole projection (``qk_norm_type: per_layer``),
    and experts of ``intermediate_size`` in every layer, no shared expert, no biases.

    transformers builds the q/k norms whatever ``use_qk_norm`` says, as vLLM's minimax_m2.py does.
    """
    layer_count = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    norm_type = view.get("qk_norm_type", "per_layer")
    if norm_type != "per_layer":
        raise UnsupportedArchitecture(
            f"qk_norm_type '{norm_type}' is not what transformers builds for minimax_m2",
            source=view.source,
            field=view.prefix + "qk_norm_type",
            fix="MiniMax-M2 normalises q and k per layer ('per_layer')",
        )
    attn_types = view.get("attn_type_list")
    if isinstance(attn_types, list) and any(kind != 1 for kind in attn_types):
        # MiniMax-01's lightning (linear) attention layers: a different model, with a state per sequence.
        raise UnsupportedArchitecture(
            "attn_type_list marks lightning-attention layers, which minimax_m2 does not build",
            source=view.source,
            field=view.prefix + "attn_type_list",
        )
    if view.get("shared_intermediate_size", 0):
        raise UnsupportedArchitecture(
            "a shared expert is not built by transformers' minimax_m2",
            source=view.source,
            field=view.prefix + "shared_intermediate_size",
        )
    attention = FullAttention(**_attention_sizes(view), qk_norm_over_heads=True)
    moe = MoE(
        hidden_size=hidden,
        num_experts=view.positive_int("num_local_experts"),
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=view.positive_int("intermediate_size"),
    )
    layers = [Layer(mixer=attention, feed_forward=moe, norm_params=2 * hidden) for _ in range(layer_count)]
    return finish_arch(view, name, layers, _mtp_notes(view))
