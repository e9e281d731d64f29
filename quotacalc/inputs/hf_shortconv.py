"""Readers for Liquid AI's LFM2 (``lfm2``) and LFM2-MoE (``lfm2_moe``): gated short-convolution layers beside
grouped-query attention.

Mirror transformers 5.24's ``models/lfm2/modeling_lfm2.py`` and ``models/lfm2_moe/modeling_lfm2_moe.py`` and
vLLM's ``models/lfm2.py`` and ``models/lfm2_moe.py`` (with ``layers/mamba/short_conv.py``): each layer is a
``conv`` or a ``full_attention`` block as ``layer_types`` lists them (for LFM2 transformers derives the list
from ``full_attn_idxs`` when a config gives that instead), then a SwiGLU MLP (LFM2) or, after the first
``num_dense_layers``, experts (LFM2-MoE); two RMSNorms per layer and a final one (``embedding_norm``, applied
after the last layer).
"""

from __future__ import annotations

from quotacalc.core.arch import DenseMLP, FullAttention, Layer, ModelArch, MoE, ShortConvMixer
from quotacalc.inputs.hf_arch import ConfigView, attention_sizes, finish_arch, reads

_CONV = "conv"
_ATTENTION = "full_attention"


def _lfm2_mlp_width(view: ConfigView) -> int:
    """The MLP width both engines build from ``intermediate_size`` (``block_ff_dim`` in older configs).

    With ``block_auto_adjust_ff_dim``: two thirds of it, times ``block_ffn_dim_multiplier``, rounded up to
    ``block_multiple_of`` (transformers rounds only when a multiplier is set, vLLM always; transformers 5.24's
    config class refuses an unset one, so the two agree).
    """
    stated = ("intermediate_size", "block_ff_dim")
    if view.given_keys is not None and not any(view.prefix + key in view.given_keys for key in stated):
        raise view.fail("intermediate_size", "missing from the config", "a model config must state its own sizes")
    width = view.positive_int("intermediate_size")
    if not view.flag("block_auto_adjust_ff_dim", True):
        return width
    width = int(2 * width / 3)
    multiple = view.positive_int("block_multiple_of", 256)
    multiplier = view.get("block_ffn_dim_multiplier", 1.0)
    width = int(multiplier * width)
    return multiple * -(-width // multiple)


def _lfm2_mixers(view: ConfigView) -> list[FullAttention | ShortConvMixer]:
    """One mixer per ``layer_types`` entry: a short convolution over the hidden channels, or GQA with per-head
    q/k RMSNorm. transformers builds attention for any type but ``conv``, vLLM for ``full_attention`` only, and
    vLLM sizes heads as hidden / heads: configs where the two would differ are refused."""
    layer_count = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    heads = view.stated_int("num_attention_heads")
    sizes = attention_sizes(view)
    if sizes["head_dim"] * heads != hidden:
        raise view.fail(
            "head_dim", f"is {sizes['head_dim']}, but vLLM sizes LFM2 heads as hidden_size / num_attention_heads"
        )
    kinds = view.get("layer_types")
    if not isinstance(kinds, list) or len(kinds) != layer_count or any(k not in (_CONV, _ATTENTION) for k in kinds):
        raise view.fail("layer_types", f"must list 'conv' or 'full_attention' for each of the {layer_count} layers")
    mixers: dict[str, FullAttention | ShortConvMixer] = {
        _ATTENTION: FullAttention(**sizes, qk_norm=True),
        _CONV: ShortConvMixer(
            hidden_size=hidden, d_conv=view.positive_int("conv_L_cache"), bias=view.flag("conv_bias")
        ),
    }
    return [mixers[kind] for kind in kinds]


@reads("lfm2")
def read_lfm2(view: ConfigView, name: str) -> ModelArch:
    """LFM2 (``Lfm2ForCausalLM``): ``conv`` layers hold a short-convolution state per sequence, ``full_attention``
    layers a KV cache with per-head q/k RMSNorm; no biases but the convolution's (``conv_bias``).

    vLLM builds the convolution ``conv_dim`` wide and the MLP ``block_dim`` wide, transformers both at
    ``hidden_size``: configs where those differ are refused.
    """
    hidden = view.stated_int("hidden_size")
    for key in ("conv_dim", "block_dim"):
        stated = view.get(key)
        if stated is not None and stated != hidden:
            raise view.fail(
                key,
                f"is {stated}, but hidden_size is {hidden}: transformers builds the layer at hidden_size, vLLM at {key}",
                "state the same width in both",
            )
    mlp = DenseMLP(hidden_size=hidden, intermediate_size=_lfm2_mlp_width(view))
    layers = [Layer(mixer=mixer, feed_forward=mlp, norm_params=2 * hidden) for mixer in _lfm2_mixers(view)]
    return finish_arch(view, name, layers, [], tie_default=True)


@reads("lfm2_moe")
def read_lfm2_moe(view: ConfigView, name: str) -> ModelArch:
    """LFM2-MoE (``Lfm2MoeForCausalLM``, LFM2-8B-A1B): LFM2's layers, with a dense SwiGLU MLP of
    ``intermediate_size`` (as stated, no auto-adjustment) in the first ``num_dense_layers`` and, after them,
    ``num_experts`` experts of ``moe_intermediate_size``, top ``num_experts_per_tok``, a router without bias
    and no shared expert. Its ``expert_bias`` is a buffer in transformers and is not counted.
    """
    hidden = view.stated_int("hidden_size")
    dense_layers = view.get("num_dense_layers", 0)
    if isinstance(dense_layers, bool) or not isinstance(dense_layers, int) or dense_layers < 0:
        raise view.fail("num_dense_layers", f"must be a whole number of layers, got {dense_layers!r}")
    dense = DenseMLP(hidden_size=hidden, intermediate_size=view.stated_int("intermediate_size"))
    moe = MoE(
        hidden_size=hidden,
        num_experts=view.stated_int("num_experts"),
        top_k=view.stated_int("num_experts_per_tok"),
        expert_intermediate_size=view.stated_int("moe_intermediate_size"),
    )
    layers = [
        Layer(mixer=mixer, feed_forward=dense if index < dense_layers else moe, norm_params=2 * hidden)
        for index, mixer in enumerate(_lfm2_mixers(view))
    ]
    return finish_arch(view, name, layers, [], tie_default=True)
