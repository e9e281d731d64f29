"""Readers for the Gated DeltaNet hybrids: Qwen3-Next.

Each mirrors the modeling file of transformers 5.24 (``transformers/models/<family>/``). Layers are
Gated DeltaNet linear attention or gated full attention, as ``layer_types`` lists them (transformers
derives it from ``full_attention_interval`` when the file does not list it). The full-attention
layers project a sigmoid output gate with the queries (q_proj twice as wide) and RMSNorm queries
and keys; the MoE blocks have a gated shared expert. Multi-token-prediction layers
(``mtp_num_hidden_layers``) are not built by transformers and are not counted.
"""

from __future__ import annotations

from collections.abc import Callable

from quotacalc.core.arch import DenseMLP, GatedDeltaNetMixer, GatedFullAttention, Layer, ModelArch, MoE
from quotacalc.inputs.hf_arch import ConfigView, finish_arch, head_dim_of, reads
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
    hidden = view.stated_int("hidden_size")
    heads = view.stated_int("num_attention_heads")
    head_dim = head_dim_of(view, hidden, heads)
    bias = view.flag("attention_bias")
    return GatedFullAttention(
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=view.positive_int("num_key_value_heads", heads),
        head_dim=head_dim,
        v_head_dim=head_dim,
        qkv_bias=bias,
        o_bias=bias,
        qk_norm=True,
    )


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
            f"the config asks for a {ssm_dtype} recurrent state (mamba_ssm_dtype): "
            "set --state-dtype to match if the server honours it"
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
        return moe if sparse[index] else dense

    return finish_arch(view, name, _hybrid_layers(view, feed_forward), _notes(view))
