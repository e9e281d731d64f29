"""Reader for Swiss AI's Apertus (``apertus``): a Llama-shaped decoder with per-head q/k RMSNorm and a plain
(up, down) MLP through the xIELU activation, whose two learned scalars per layer are parameters.

Mirrors transformers 5.24's ``models/apertus/modeling_apertus.py`` and vLLM's ``models/apertus.py``.
"""

from __future__ import annotations

from quotacalc.core.arch import LearnedActivationMLP, ModelArch
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import AttentionTraits, ConfigView, DecoderFamily, read_decoder, reads

#: xIELU's learned scalars (``alpha_p``, ``alpha_n``); its ``beta`` and ``eps`` are buffers, not parameters.
XIELU_PARAMS = 2


def _xielu_mlp(view: ConfigView, index: int) -> LearnedActivationMLP:
    return LearnedActivationMLP(
        hidden_size=view.stated_int("hidden_size"),
        # The class default (14,336) is another model's width.
        intermediate_size=view.stated_int("intermediate_size"),
        gated=False,
        activation_params=XIELU_PARAMS,
    )


#: q, k, v and o biased together by ``attention_bias`` (in both engines); q/k norms per head, built whatever
#: the config's ``qk_norm`` says, as both engines build them.
_APERTUS = DecoderFamily(
    attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True),
    feed_forward=_xielu_mlp,
)


@reads("apertus")
def read_apertus(view: ConfigView, name: str) -> ModelArch:
    """Apertus (``ApertusForCausalLM``). vLLM's apertus.py serves xIELU only and biases the MLP when
    ``mlp_bias`` is set, which transformers never builds: configs that differ there are refused."""
    activation = view.get("hidden_act")
    if activation != "xielu":
        raise UnsupportedArchitecture(
            f"hidden_act '{activation}': vLLM's apertus.py serves only xIELU",
            source=view.source,
            field=view.prefix + "hidden_act",
        )
    if view.flag("mlp_bias"):
        raise UnsupportedArchitecture(
            "MLP biases: vLLM's apertus.py builds them, transformers does not",
            source=view.source,
            field=view.prefix + "mlp_bias",
        )
    return read_decoder(view, name, _APERTUS)
