"""Readers for the Mamba-2 hybrid families: Nemotron-H, Bamba, Falcon-H1 and Granite 4.0-H.

Each mirrors the modeling file of transformers 5.24 (``transformers/models/<family>/``): which
layers hold Mamba-2, attention, an MLP or experts, and every bias and norm those modules build.
Buffers (Falcon-H1's muP vector, Nemotron-H's router score-correction bias) are not parameters
and are not counted; muP multipliers are plain floats.
"""

from __future__ import annotations

from dataclasses import dataclass

from quotacalc.core.arch import DenseMLP, FullAttention, Layer, Mamba2Mixer, ModelArch, MoE
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import ConfigView, attention_sizes, finish_arch, reads

#: transformers' layer-type names (after its remap of the legacy "mamba"/"attention").
_MAMBA = "linear_attention"
_ATTENTION = "full_attention"


@dataclass(frozen=True)
class Mamba2Fields:
    """Where a family's config keeps its Mamba-2 sizes and flags."""

    num_heads: str = "mamba_n_heads"
    head_dim: str = "mamba_d_head"
    d_state: str = "mamba_d_state"
    n_groups: str = "mamba_n_groups"
    d_conv: str = "mamba_d_conv"
    conv_bias: str = "mamba_conv_bias"
    proj_bias: str = "mamba_proj_bias"


#: Bamba, Falcon-H1 and Granite 4.0-H spell them ``mamba_*``.
_MAMBA_PREFIXED = Mamba2Fields()
_NEMOTRON_FIELDS = Mamba2Fields(
    num_heads="mamba_num_heads",
    head_dim="mamba_head_dim",
    d_state="ssm_state_size",
    n_groups="n_groups",
    d_conv="conv_kernel",
    conv_bias="use_conv_bias",
    # NemotronHMamba2Mixer biases in_proj/out_proj with ``use_bias``; ``mamba_proj_bias`` is ignored.
    proj_bias="use_bias",
)


def mamba2_mixer(view: ConfigView, fields: Mamba2Fields, **overrides: bool) -> Mamba2Mixer:
    """A Mamba-2 mixer; head count and state size must be stated (class defaults belong to other models)."""
    return Mamba2Mixer(
        hidden_size=view.stated_int("hidden_size"),
        num_heads=view.stated_int(fields.num_heads),
        head_dim=view.positive_int(fields.head_dim),
        n_groups=view.positive_int(fields.n_groups),
        d_state=view.stated_int(fields.d_state),
        d_conv=view.positive_int(fields.d_conv),
        conv_bias=view.flag(fields.conv_bias, True),
        proj_bias=view.flag(fields.proj_bias),
        **overrides,
    )


def hybrid_attention(view: ConfigView, bias: bool) -> FullAttention:
    """Full attention as these families build it: head_dim stated or hidden/heads, one bias flag for q, k, v, o."""
    return FullAttention(**attention_sizes(view), qkv_bias=bias, o_bias=bias)


def block_types(view: ConfigView, layers: int, allowed: set[str]) -> list[str]:
    """Each layer's block type as the resolved config lists it (``layer_types``), checked against ``allowed``."""
    types = view.get("layer_types")
    if not isinstance(types, list) or len(types) != layers:
        raise view.fail("layer_types", f"must list one type per layer ({layers})")
    for index, kind in enumerate(types):
        if kind not in allowed:
            raise UnsupportedArchitecture(
                f"layer {index} has type '{kind}', which quotacalc cannot price for {view.get('model_type')}",
                source=view.source,
                field=view.prefix + "layer_types",
                fix=f"expected one of {', '.join(sorted(allowed))}",
            )
    return types


def gated_mlp(view: ConfigView, intermediate_key: str = "intermediate_size") -> DenseMLP:
    return DenseMLP(
        hidden_size=view.stated_int("hidden_size"),
        intermediate_size=view.positive_int(intermediate_key),
        bias=view.flag("mlp_bias"),
    )


# --------------------------------------------------------------------------- Nemotron-H


@reads("nemotron_h")
def read_nemotron_h(view: ConfigView, name: str) -> ModelArch:
    """One mixer per block (Mamba-2, attention, ReLU² MLP or experts) behind a single RMSNorm."""
    pattern_keys = ("hybrid_override_pattern", "layers_block_type", "layer_types")
    if view.given_keys is not None and not any(key in view.given_keys for key in pattern_keys):
        # transformers would invent a 4-block default ("M E * -"), and the layer count comes from the pattern.
        raise view.fail("hybrid_override_pattern", "missing from the config", "state the layer pattern")
    layer_count = len(view.get("layer_types") or [])
    hidden = view.stated_int("hidden_size")
    notes: list[str] = []
    stated_layers = view.get("num_hidden_layers")
    if stated_layers and stated_layers != layer_count:
        notes.append(f"num_hidden_layers {stated_layers} ignored: the pattern has {layer_count} blocks")
    types = block_types(view, layer_count, {_MAMBA, _ATTENTION, "mlp", "moe"})
    if _ATTENTION in types:
        _check_nemotron_head_dim(view)
    blocks = {
        _MAMBA: lambda: Layer(mixer=mamba2_mixer(view, _NEMOTRON_FIELDS), feed_forward=None, norm_params=hidden),
        # NemotronHAttention builds q, k, v, o without bias whatever ``attention_bias`` says.
        _ATTENTION: lambda: Layer(mixer=hybrid_attention(view, bias=False), feed_forward=None, norm_params=hidden),
        # ReLU² experts and shared expert (plain up/down), optionally run at moe_latent_size.
        "moe": lambda: Layer(mixer=None, feed_forward=_nemotron_moe(view), norm_params=hidden),
        "mlp": lambda: Layer(
            mixer=None,
            feed_forward=DenseMLP(
                hidden_size=hidden,
                intermediate_size=view.stated_int("intermediate_size"),
                gated=False,
                bias=view.flag("mlp_bias"),
            ),
            norm_params=hidden,
        ),
    }
    built = {kind: blocks[kind]() for kind in set(types)}
    if view.get("num_nextn_predict_layers"):
        notes.append("multi-token-prediction layers are not counted (transformers does not build them)")
    if view.given_keys is not None and "mamba_ssm_cache_dtype" in view.given_keys:
        notes.append(
            f"the config asks for a {view.get('mamba_ssm_cache_dtype')} SSM cache (mamba_ssm_cache_dtype): "
            "set the state dtype to match if the server honours it"
        )
    return finish_arch(view, name, [built[kind] for kind in types], notes)


def _nemotron_moe(view: ConfigView) -> MoE:
    shared = view.get("n_shared_experts", 0)
    return MoE(
        hidden_size=view.stated_int("hidden_size"),
        num_experts=view.positive_int("n_routed_experts"),
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=view.positive_int("moe_intermediate_size"),
        gated=False,
        num_shared_experts=shared,
        shared_intermediate_size=view.positive_int("moe_shared_expert_intermediate_size") if shared else 0,
        expert_width=view.get("moe_latent_size") or None,
        latent_projection_bias=view.flag("mlp_bias"),
    )


def _check_nemotron_head_dim(view: ConfigView) -> None:
    """Older Nemotron-H files spell the head size ``attention_head_dim``, which transformers ignores."""
    legacy = view.get("attention_head_dim")
    head_dim = view.positive_int("head_dim", 0)
    if legacy and head_dim and legacy != head_dim:
        raise view.fail(
            "head_dim",
            f"is {head_dim} but attention_head_dim says {legacy}; transformers builds head_dim",
            "state head_dim to match the checkpoint",
        )


# --------------------------------------------------------------------------- Bamba


def _mixer_per_layer_hybrid(view: ConfigView, name: str, feed_forward: DenseMLP | MoE) -> ModelArch:
    """Mamba-2 or attention per layer, the same feed-forward block and two RMSNorms in every layer."""
    hidden = view.stated_int("hidden_size")
    types = block_types(view, view.stated_int("num_hidden_layers"), {_MAMBA, _ATTENTION})
    mixers = {
        _MAMBA: lambda: mamba2_mixer(view, _MAMBA_PREFIXED),
        _ATTENTION: lambda: hybrid_attention(view, bias=view.flag("attention_bias")),
    }
    built = {kind: mixers[kind]() for kind in set(types)}
    layers = [Layer(mixer=built[kind], feed_forward=feed_forward, norm_params=2 * hidden) for kind in types]
    return finish_arch(view, name, layers, [])


@reads("bamba")
def read_bamba(view: ConfigView, name: str) -> ModelArch:
    """Attention on ``attn_layer_indices``, Mamba-2 elsewhere; a SwiGLU MLP in every layer."""
    return _mixer_per_layer_hybrid(view, name, gated_mlp(view))


# --------------------------------------------------------------------------- Falcon-H1


@reads("falcon_h1")
def read_falcon_h1(view: ConfigView, name: str) -> ModelArch:
    """Attention and Mamba-2 side by side in every layer, then a SwiGLU MLP.

    A ``Layer`` holds one mixer, so each decoder layer is priced as two: attention behind
    ``input_layernorm``, then Mamba-2 and the MLP behind ``pre_ff_layernorm``. Sums (parameters,
    KV, state, FLOPs) are exact; only the layer count shown doubles.
    """
    hidden = view.stated_int("hidden_size")
    layer_count = view.stated_int("num_hidden_layers")
    attention = hybrid_attention(view, bias=view.flag("attention_bias"))
    mamba = mamba2_mixer(
        view,
        _MAMBA_PREFIXED,
        # in_proj follows mamba_proj_bias, out_proj follows projectors_bias.
        out_proj_bias=view.flag("projectors_bias"),
        gated_norm=view.flag("mamba_rms_norm"),
    )
    mlp = gated_mlp(view)
    layers = []
    for _ in range(layer_count):
        layers.append(Layer(mixer=attention, feed_forward=None, norm_params=hidden))
        layers.append(Layer(mixer=mamba, feed_forward=mlp, norm_params=hidden))
    notes = [
        f"each of the {layer_count} decoder layers runs attention and Mamba-2 in parallel: "
        f"priced as {2 * layer_count} layers (attention; Mamba-2 + MLP), sums exact"
    ]
    return finish_arch(view, name, layers, notes)


# --------------------------------------------------------------------------- Granite 4.0-H


@reads("granitemoehybrid")
def read_granitemoehybrid(view: ConfigView, name: str) -> ModelArch:
    """Mamba-2 or attention per ``layer_types``; every layer has a shared SwiGLU MLP, plus experts if any."""
    return _mixer_per_layer_hybrid(view, name, _granite_feed_forward(view))


def _granite_feed_forward(view: ConfigView) -> DenseMLP | MoE:
    """``num_local_experts`` 0 leaves only the shared MLP (Granite 4.0-H-1B/Micro); experts and router carry no bias."""
    if not view.get("num_local_experts", 0):
        return gated_mlp(view, "shared_intermediate_size")
    return MoE(
        hidden_size=view.stated_int("hidden_size"),
        num_experts=view.positive_int("num_local_experts"),
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=view.stated_int("intermediate_size"),
        num_shared_experts=1,
        shared_intermediate_size=view.positive_int("shared_intermediate_size"),
    )
