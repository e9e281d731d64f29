"""Read a Hugging Face config (as AutoConfig resolved it) into a ``ModelArch`` of per-layer specs.

Each family's reader is registered for its ``model_type`` values (``inputs.architectures`` looks
them up, after importing this module and ``hf_hybrid``, which both build on the pieces here); what varies inside a family
(biases, norms, layer kinds, which layers are MoE) is read from the config's own fields, so any
config of a supported family is priced, not only the shipped ones.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, NamedTuple, cast

from quotacalc.catalog.dtypes import TORCH_DTYPES
from quotacalc.core.arch import (
    DenseMLP,
    FullAttention,
    Layer,
    Mamba1Mixer,
    MLAAttention,
    ModelArch,
    MoE,
    SlidingWindowAttention,
    TokenMixer,
)
from quotacalc.errors import QuotacalcError, UnsupportedArchitecture

_MISSING = object()

#: torch dtypes a config may state that are no dtype an engine serves unquantized weights in ('auto' lets the loader
#: choose; fp8 names come with a quantization_config): read as no dtype stated.
_OTHER_TORCH_DTYPES = frozenset(
    {"auto", "float64", "double", "float8_e4m3fn", "float8_e5m2", "float8_e4m3fnuz", "float8_e5m2fnuz", "int8", "uint8"}
)


class ConfigView:
    """Typed access to a config dict; every error names the config and the field."""

    def __init__(self, config: dict[str, Any], source: str, prefix: str = "", given_keys: frozenset[str] | None = None):
        self.config = config
        self.source = source
        self.prefix = prefix
        #: Keys the file states; None when unknown (a dict built in code), which trusts every key.
        self.given_keys = given_keys

    def get(self, key: str, default: Any = None) -> Any:
        """A value a reader sizes or times the model with: NaN or infinity in it (or in its items) is refused here,
        as transformers writes them into fields no reader reads (Mamba-2's ``time_step_limit`` is (0.0, inf))."""
        value = self.config.get(key)
        if value is None:
            return default
        self._refuse_non_finite(key, value)
        return value

    def has(self, key: str) -> bool:
        """Whether the config holds ``key`` (a sub-config), without reading what is in it."""
        return self.config.get(key) is not None

    def _refuse_non_finite(self, key: str, value: Any) -> None:
        stack: list[tuple[str, Any]] = [(key, value)]
        while stack:
            field, item = stack.pop()
            if isinstance(item, float) and not math.isfinite(item):
                raise self.fail(field, f"must be a finite number, got {item}", "give the size the model has")
            if isinstance(item, dict):
                stack.extend((f"{field}.{child}", part) for child, part in item.items())
            elif isinstance(item, list):
                stack.extend((f"{field}[{index}]", part) for index, part in enumerate(item))

    def fail(self, key: str, problem: str, fix: str | None = None) -> QuotacalcError:
        return QuotacalcError(problem, source=self.source, field=self.prefix + key, fix=fix)

    def positive_int(self, key: str, default: Any = _MISSING) -> int:
        value = self.config.get(key)
        if value is None:
            if default is _MISSING:
                raise self.fail(key, "missing", "a decoder config needs it to be priced")
            return default
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise self.fail(key, f"must be a positive integer, got {value!r}")
        return value

    def stated_int(self, key: str) -> int:
        """A size the config file must state itself: a class default would silently price another model."""
        if self.given_keys is not None and self.prefix + key not in self.given_keys:
            raise self.fail(key, "missing from the config", "a model config must state its own sizes")
        return self.positive_int(key)

    def _defaulted(self, key: str, notes: list[str] | None) -> None:
        """Note a value the file leaves to transformers' class default (Gemma 3's text config states no vocab_size
        or maximum context: its class's are the model's), so it is shown, not silently priced."""
        if notes is not None and self.given_keys is not None and self.prefix + key not in self.given_keys:
            note = f"{self.prefix}{key} not stated in the config: transformers' default {self.config.get(key)!r} taken"
            if note not in notes:
                notes.append(note)

    def sized_int(self, key: str, notes: list[str] | None) -> int:
        """A size the file states, or its class default, then named in ``notes``."""
        value = self.positive_int(key)
        self._defaulted(key, notes)
        return value

    def context_tokens(self, notes: list[str] | None = None, key: str = "max_position_embeddings") -> int | None:
        """The model's maximum context (None where neither the file nor its class gives one); a class default is
        named in ``notes``, and a value that is no whole number of tokens up to 10^8 is refused at its key."""
        from quotacalc.core.deployment import MAX_CONTEXT_TOKENS

        value = self.config.get(key)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int) or not 0 < value <= MAX_CONTEXT_TOKENS:
            raise self.fail(key, f"must be a whole number of tokens from 1 to {MAX_CONTEXT_TOKENS:,}, got {value!r}")
        self._defaulted(key, notes)
        return value

    def flag(self, key: str, default: bool = False) -> bool:
        return bool(self.get(key, default))

    def refuse_flags(self, keys: tuple[str, ...], message: str) -> None:
        """Refuse the first of ``keys`` that is set: a variant the reader does not price. ``message`` names it as
        ``{flag}``."""
        for key in keys:
            if self.flag(key):
                raise UnsupportedArchitecture(message.format(flag=key), source=self.source, field=self.prefix + key)

    def sub(self, key: str) -> ConfigView:
        value = self.config.get(key)
        if not isinstance(value, dict):
            raise self.fail(key, "missing or not an object")
        return ConfigView(value, self.source, f"{self.prefix}{key}.", self.given_keys)


ArchReader = Callable[[ConfigView, str], ModelArch]
READERS: dict[str, ArchReader] = {}


def reads(*model_types: str) -> Callable[[ArchReader], ArchReader]:
    """Register a reader for these ``model_type`` values."""

    def register(reader: ArchReader) -> ArchReader:
        for model_type in model_types:
            READERS[model_type] = reader
        return reader

    return register


# --------------------------------------------------------------------------- shared pieces


def checkpoint_dtype(view: ConfigView, *fallbacks: ConfigView) -> tuple[str, list[str]]:
    """The dtype an engine serves the checkpoint's unquantized weights in, and a note where that is not the
    config's own. vLLM's dtype 'auto' (config/model.py ``_resolve_auto_dtype``) takes a float32 checkpoint down to
    the platform's preferred 16-bit type, bfloat16 on every GPU quotacalc lists, and reads a config that names no
    dtype as float32, so as bfloat16 too."""
    for candidate in (view, *fallbacks):
        for key in ("dtype", "torch_dtype"):
            value = candidate.get(key)
            known = isinstance(value, str) and (value in TORCH_DTYPES or value in _OTHER_TORCH_DTYPES)
            if value is not None and not known:
                # transformers keeps any value here, and a typo priced as bf16 would go unseen. It reads the file's
                # torch_dtype as dtype: the error names the key the file states.
                given = candidate.given_keys
                stated = "torch_dtype" if given is not None and key not in given and "torch_dtype" in given else key
                raise candidate.fail(
                    stated,
                    f"must name a torch dtype (bfloat16, float16, float32), got {value!r}",
                    "write the checkpoint's dtype as its config.json on the hub gives it",
                )
            if isinstance(value, str) and value in TORCH_DTYPES:
                if TORCH_DTYPES[value] == "fp32":
                    return "bf16", [
                        "the config's dtype is float32: vLLM serves a float32 checkpoint in bfloat16 (dtype auto), "
                        "so it is priced in bf16 (--weight-dtype fp32 --kv-dtype fp32 prices float32)"
                    ]
                return TORCH_DTYPES[value], []
    return "bf16", ["the config names no dtype: unquantized weights assumed bf16"]


def head_dim_of(view: ConfigView, hidden: int, heads: int) -> int:
    """``head_dim`` when stated (Qwen3, gpt-oss, Gemma differ from hidden/heads), else hidden / heads."""
    head_dim = view.positive_int("head_dim", 0)
    if not head_dim:
        if hidden % heads:
            raise view.fail("head_dim", f"missing, and hidden_size {hidden} is not a multiple of {heads} heads")
        head_dim = hidden // heads
    return head_dim


def attention_sizes(view: ConfigView) -> dict[str, int]:
    """Heads and widths of a head attention block as the config states them (keyword arguments of its spec)."""
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


def mla_attention(view: ConfigView, *, o_bias: bool = False) -> MLAAttention:
    """DeepSeek's multi-head latent attention as the config states it (no query LoRA when q_lora_rank is unset)."""
    return MLAAttention(
        hidden_size=view.stated_int("hidden_size"),
        num_heads=view.stated_int("num_attention_heads"),
        q_lora_rank=view.get("q_lora_rank") or None,
        kv_lora_rank=view.positive_int("kv_lora_rank"),
        qk_nope_head_dim=view.positive_int("qk_nope_head_dim"),
        qk_rope_head_dim=view.positive_int("qk_rope_head_dim"),
        v_head_dim=view.positive_int("v_head_dim"),
        o_bias=o_bias,
    )


class CommonSizes(NamedTuple):
    """The sizes every decoder config states (the KV heads default to the attention heads)."""

    layers: int
    hidden_size: int
    heads: int
    kv_heads: int
    head_dim: int


def _common_sizes(view: ConfigView) -> CommonSizes:
    layers = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    heads = view.stated_int("num_attention_heads")
    kv_heads = view.positive_int("num_key_value_heads", heads)
    return CommonSizes(layers, hidden, heads, kv_heads, head_dim_of(view, hidden, heads))


def _bias(view: ConfigView, setting: bool | str) -> bool:
    return view.flag(setting) if isinstance(setting, str) else setting


def layer_kinds(view: ConfigView, layers: int) -> tuple[list[str], list[str]]:
    """Each layer's attention kind, the way transformers derives it, and the notes it implies."""
    declared = view.get("layer_types")
    if declared is not None:
        if not isinstance(declared, list) or len(declared) != layers:
            raise view.fail("layer_types", f"must list one type per layer ({layers})")
        return list(declared), []
    window = view.get("sliding_window")
    pattern = view.get("sliding_window_pattern") or view.get("_sliding_window_pattern")
    if window and pattern:
        return ["full_attention" if (i + 1) % pattern == 0 else "sliding_attention" for i in range(layers)], []
    if window and view.get("use_sliding_window", True):
        return ["sliding_attention"] * layers, []
    return ["full_attention"] * layers, []


@dataclass(frozen=True)
class AttentionTraits:
    """What a family's attention block has beyond Q, K, V and O (a config field name or a constant)."""

    qkv_bias: bool | str = False
    o_bias: bool | str = False
    qk_norm: bool | str = False
    #: Query and key norms over the whole projection, not per head (OLMo 2/3).
    qk_norm_whole: bool = False
    sinks: bool = False


def attention_mixers(view: ConfigView, traits: AttentionTraits, notes: list[str]) -> list[TokenMixer]:
    """One attention spec per layer, full or sliding as the config declares."""
    layers, hidden, heads, kv_heads, head_dim = _common_sizes(view)
    kinds, kind_notes = layer_kinds(view, layers)
    notes.extend(kind_notes)
    common = dict(
        hidden_size=hidden,
        num_heads=heads,
        num_kv_heads=kv_heads,
        head_dim=head_dim,
        v_head_dim=head_dim,
        qkv_bias=_bias(view, traits.qkv_bias),
        o_bias=_bias(view, traits.o_bias),
        qk_norm=_bias(view, traits.qk_norm),
        qk_norm_whole=traits.qk_norm_whole,
        sinks=traits.sinks,
    )
    window = view.get("sliding_window")
    max_context = view.context_tokens()
    mixers: list[TokenMixer] = []
    for index, kind in enumerate(kinds):
        if kind == "full_attention":
            mixers.append(FullAttention(**common))
        elif kind == "sliding_attention":
            if not window:
                raise view.fail("sliding_window", f"layer {index} is sliding_attention but no window is set")
            if max_context and window >= max_context:
                mixers.append(FullAttention(**common))
                note = f"sliding window {window} >= max context {max_context}: those layers priced as full attention"
                if note not in notes:
                    notes.append(note)
            else:
                mixers.append(SlidingWindowAttention(**common, window_tokens=window))
        else:
            raise UnsupportedArchitecture(
                f"layer {index} has type '{kind}', which quotacalc cannot price yet",
                source=view.source,
                field=view.prefix + "layer_types",
            )
    return mixers


def finish_arch(
    view: ConfigView,
    name: str,
    layers: list[Layer],
    notes: list[str],
    *,
    dtype_views: tuple[ConfigView, ...] = (),
    tie_default: bool = False,
    vision_params: int = 0,
    final_norm: int | None = None,
) -> ModelArch:
    dtype, dtype_notes = checkpoint_dtype(view, *dtype_views)
    hidden = view.positive_int("hidden_size")
    return ModelArch(
        name=name,
        model_type=view.get("model_type"),
        hidden_size=hidden,
        vocab_size=view.sized_int("vocab_size", notes),
        tie_word_embeddings=view.flag("tie_word_embeddings", tie_default),
        layers=tuple(layers),
        final_norm_params=hidden if final_norm is None else final_norm,
        vision_params=vision_params,
        checkpoint_dtype=dtype,
        max_context_tokens=view.context_tokens(notes),
        notes=tuple(notes + dtype_notes),
    )


# --------------------------------------------------------------------------- decoder families


#: A family's feed-forward block of a layer, by the layer's index.
FeedForwardOf = Callable[[ConfigView, int], DenseMLP | MoE]


@dataclass(frozen=True)
class DecoderFamily:
    """A transformer decoder family: attention traits, norms per layer, and how its MLPs are laid out."""

    attention: AttentionTraits = AttentionTraits()
    #: Norm weights per layer, in hidden sizes (a LayerNorm with a bias counts two).
    norms_per_layer: int = 2
    #: The final norm, in hidden sizes.
    final_norms: int = 1
    mlp_bias: bool | str = False
    #: Gated MLP (gate, up, down) or plain (up, down: StarCoder2's c_fc and c_proj).
    mlp_gated: bool = True
    #: A bias on the LM head (a config field name or a constant).
    lm_head_bias: bool | str = False
    #: Config flags that build layers this family's spec does not price (refused when set, never ignored).
    unpriced_flags: tuple[str, ...] = ()
    #: Reads the feed-forward block of layer ``index`` (dense unless the family says otherwise).
    feed_forward: FeedForwardOf | None = None


def dense_mlp(view: ConfigView, bias: bool = False, gated: bool = True) -> DenseMLP:
    return DenseMLP(
        hidden_size=view.positive_int("hidden_size"),
        intermediate_size=view.stated_int("intermediate_size"),
        gated=gated,
        bias=bias,
    )


def read_decoder(view: ConfigView, name: str, family: DecoderFamily, **finish: Any) -> ModelArch:
    for flag in family.unpriced_flags:
        if view.flag(flag):
            raise UnsupportedArchitecture(
                f"{flag} adds layers quotacalc does not price yet", source=view.source, field=view.prefix + flag
            )
    notes: list[str] = []
    mixers = attention_mixers(view, family.attention, notes)
    norm_params = family.norms_per_layer * view.positive_int("hidden_size")
    shared_mlp = (
        dense_mlp(view, _bias(view, family.mlp_bias), family.mlp_gated) if family.feed_forward is None else None
    )
    layers = [
        Layer(
            mixer=mixer,
            feed_forward=shared_mlp or cast(FeedForwardOf, family.feed_forward)(view, index),
            norm_params=norm_params,
        )
        for index, mixer in enumerate(mixers)
    ]
    if family.final_norms != 1:
        finish.setdefault("final_norm", family.final_norms * view.positive_int("hidden_size"))
    arch = finish_arch(view, name, layers, notes, **finish)
    return arch.model_copy(update={"lm_head_bias": True}) if _bias(view, family.lm_head_bias) else arch


def _local_experts_moe(view: ConfigView, index: int, *, biased: bool = False) -> MoE:
    """Every layer MoE over ``num_local_experts`` of ``intermediate_size`` (Mixtral; gpt-oss with biases)."""
    return MoE(
        hidden_size=view.positive_int("hidden_size"),
        num_experts=view.positive_int("num_local_experts"),
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=view.stated_int("intermediate_size"),
        expert_bias=biased,
        router_bias=biased,
    )


def _qwen_moe(view: ConfigView, index: int) -> DenseMLP | MoE:
    """Qwen2/3-MoE: experts every ``decoder_sparse_step`` layers, except ``mlp_only_layers``."""
    step = view.positive_int("decoder_sparse_step", 1)
    sparse = (
        index not in (view.get("mlp_only_layers") or []) and view.get("num_experts", 0) > 0 and (index + 1) % step == 0
    )
    if not sparse:
        return dense_mlp(view)
    shared_size = view.get("shared_expert_intermediate_size", 0)
    return MoE(
        hidden_size=view.positive_int("hidden_size"),
        num_experts=view.positive_int("num_experts"),
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=view.positive_int("moe_intermediate_size"),
        num_shared_experts=1 if shared_size else 0,
        shared_intermediate_size=shared_size,
        shared_expert_gate=bool(shared_size),
    )


_DECODERS: dict[tuple[str, ...], DecoderFamily] = {
    ("llama", "mistral", "granite"): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias"), mlp_bias="mlp_bias"
    ),
    ("qwen2",): DecoderFamily(attention=AttentionTraits(qkv_bias=True)),
    ("qwen3",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True)
    ),
    ("phi3",): DecoderFamily(),
    ("mixtral",): DecoderFamily(feed_forward=_local_experts_moe),
    # Qwen2MoeConfig.qkv_bias (default true) sets the q/k/v biases.
    ("qwen2_moe",): DecoderFamily(attention=AttentionTraits(qkv_bias="qkv_bias"), feed_forward=_qwen_moe),
    ("qwen3_moe",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True),
        feed_forward=_qwen_moe,
    ),
    ("gpt_oss",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias", sinks=True),
        feed_forward=partial(_local_experts_moe, biased=True),
    ),
    ("gemma2",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias"), norms_per_layer=4
    ),
    ("gemma3_text",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True), norms_per_layer=4
    ),
    # Dense families read like the above. OLMo 2/3 and EXAONE 4 norm each block's output
    # (post-attention and post-MLP norms, none before); OLMo 3 and EXAONE 4 take sliding layers from layer_types.
    ("olmo2", "olmo3"): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True, qk_norm_whole=True)
    ),
    # SmolLM3's NoPE layers (no_rope_layers) change no parameter and no cache.
    ("smollm3",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias"), mlp_bias="mlp_bias"
    ),
    ("seed_oss",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_out_bias"), mlp_bias="mlp_bias"
    ),
    ("exaone4",): DecoderFamily(attention=AttentionTraits(qk_norm=True)),
    ("ernie4_5",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="use_bias", o_bias="use_bias"), mlp_bias="use_bias"
    ),
    # Command R7B / A: attention and MLP in parallel after one LayerNorm (weight only) per layer.
    ("cohere2",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias"), norms_per_layer=1
    ),
    ("ministral3",): DecoderFamily(),
    ("gemma",): DecoderFamily(attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias")),
    ("helium",): DecoderFamily(attention=AttentionTraits(qkv_bias="attention_bias"), mlp_bias="mlp_bias"),
    # GLM-4 (0414): biased q/k/v only, and norms after attention and MLP beside the usual two (four per layer).
    ("glm4",): DecoderFamily(attention=AttentionTraits(qkv_bias="attention_bias"), norms_per_layer=4),
    # Command R / R+: one weight-only LayerNorm per parallel block; use_qk_norm norms over the whole projection.
    ("cohere",): DecoderFamily(
        attention=AttentionTraits(
            qkv_bias="attention_bias", o_bias="attention_bias", qk_norm="use_qk_norm", qk_norm_whole=True
        ),
        norms_per_layer=1,
    ),
    # StarCoder2: LayerNorms with biases, a plain (ungated) MLP, use_bias on every projection.
    ("starcoder2",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="use_bias", o_bias="use_bias"),
        norms_per_layer=4,
        final_norms=2,
        mlp_bias="use_bias",
        mlp_gated=False,
    ),
    # AFM (Arcee): a plain ReLU² MLP.
    ("arcee",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias"),
        mlp_bias="mlp_bias",
        mlp_gated=False,
    ),
    ("glm",): DecoderFamily(attention=AttentionTraits(qkv_bias="attention_bias")),
    ("hunyuan_v1_dense",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True)
    ),
    # Phi-1/1.5/2: one LayerNorm (weight and bias) per parallel block, biases everywhere, a plain MLP, a biased head.
    ("phi",): DecoderFamily(
        attention=AttentionTraits(qkv_bias=True, o_bias=True),
        norms_per_layer=2,
        final_norms=2,
        mlp_bias=True,
        mlp_gated=False,
        lm_head_bias=True,
        unpriced_flags=("qk_layernorm",),
    ),
    # Nemotron (3/4, Minitron): LayerNorm1P with biases, a plain ReLU² MLP.
    ("nemotron",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias"),
        norms_per_layer=4,
        final_norms=2,
        mlp_bias="mlp_bias",
        mlp_gated=False,
    ),
    # OLMo 1: LayerNorms without weights.
    ("olmo",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias"), norms_per_layer=0, final_norms=0
    ),
    ("granitemoe",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias"),
        feed_forward=_local_experts_moe,
    ),
    # Phi-3.5-MoE: LayerNorms with biases (two weights each), and a bias on the LM head.
    ("phimoe",): DecoderFamily(
        attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias"),
        norms_per_layer=4,
        final_norms=2,
        feed_forward=_local_experts_moe,
        lm_head_bias="lm_head_bias",
    ),
}


def decoder_family(model_type: object) -> DecoderFamily | None:
    """The plain decoder family registered for ``model_type`` (for a multimodal wrapper's text model), or None."""
    return next((family for types, family in _DECODERS.items() if model_type in types), None)


def registered_decoder_family(model_type: str) -> DecoderFamily:
    """The plain decoder family a wrapper's reader names by its model_type (one registered here)."""
    family = decoder_family(model_type)
    if family is None:
        raise LookupError(f"no decoder family is registered for {model_type!r}")
    return family


def text_decoder_family(view: ConfigView, text: ConfigView) -> DecoderFamily:
    """The plain decoder family of a multimodal wrapper's text model, or a one-line refusal naming
    ``text_config.model_type``."""
    family = decoder_family(text.get("model_type"))
    if family is None:
        raise UnsupportedArchitecture(
            f"a {view.get('model_type')} text model of type '{text.get('model_type')}' is not priced yet",
            source=view.source,
            field="text_config.model_type",
        )
    return family


def _register_decoders() -> None:
    for model_types, family in _DECODERS.items():
        reads(*model_types)(partial(read_decoder, family=family))


_register_decoders()


# --------------------------------------------------------------------------- multimodal (Gemma 3)


def siglip_params(vision: ConfigView, text_hidden: int) -> int:
    """SigLIP vision tower (no pooling head) plus Gemma 3's projector into the text model."""
    hidden = vision.positive_int("hidden_size")
    inter = vision.positive_int("intermediate_size")
    layers = vision.positive_int("num_hidden_layers")
    patch = vision.positive_int("patch_size")
    channels = vision.positive_int("num_channels", 3)
    positions = (vision.positive_int("image_size") // patch) ** 2
    embeddings = hidden * channels * patch * patch + hidden + positions * hidden
    per_layer = 4 * (hidden * hidden + hidden) + 2 * 2 * hidden + hidden * inter + inter + inter * hidden + hidden
    post_norm = 2 * hidden
    if vision.flag("vision_use_head"):
        raise UnsupportedArchitecture(
            "a SigLIP pooling head is not counted yet", source=vision.source, field=vision.prefix + "vision_use_head"
        )
    projector = hidden * text_hidden + hidden
    return embeddings + layers * per_layer + post_norm + projector


@reads("gemma3")
def read_gemma3(view: ConfigView, name: str) -> ModelArch:
    text = view.sub("text_config")
    text_hidden = text.positive_int("hidden_size")
    vision_params = siglip_params(view.sub("vision_config"), text_hidden)
    family = _DECODERS[("gemma3_text",)]
    arch = read_decoder(text, name, family, dtype_views=(view,), tie_default=True, vision_params=vision_params)
    tied = view.flag("tie_word_embeddings", text.flag("tie_word_embeddings", True))
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": "gemma3"})


# --------------------------------------------------------------------------- DeepSeek MLA


@reads("deepseek_v2", "deepseek_v3")
def read_deepseek(view: ConfigView, name: str) -> ModelArch:
    """MLA attention; the first ``first_k_dense_replace`` layers dense, then MoE every ``moe_layer_freq``."""
    layers_count = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    # transformers then biases q_a_proj and kv_a_proj_with_mqa (or the dense and shared MLPs), which vLLM's
    # DeepseekV2 model never builds: no checkpoint vLLM serves has them, and no count would match both.
    view.refuse_flags(
        ("attention_bias", "mlp_bias"), "DeepSeek MLA with {flag} is not priced yet (vLLM builds no such bias)"
    )
    mla = mla_attention(view)
    first_dense = view.get("first_k_dense_replace", 0)
    frequency = view.positive_int("moe_layer_freq", 1)
    moe = MoE(
        hidden_size=hidden,
        num_experts=view.positive_int("n_routed_experts"),
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=view.positive_int("moe_intermediate_size"),
        num_shared_experts=view.get("n_shared_experts", 0),
        shared_intermediate_size=view.positive_int("moe_intermediate_size"),
    )
    dense = dense_mlp(view)
    layers = [
        Layer(
            mixer=mla,
            feed_forward=moe if index >= first_dense and index % frequency == 0 else dense,
            norm_params=2 * hidden,
        )
        for index in range(layers_count)
    ]
    notes = []
    if view.get("num_nextn_predict_layers"):
        notes.append("multi-token-prediction layers are not counted (transformers does not build them)")
    return finish_arch(view, name, layers, notes)


# --------------------------------------------------------------------------- hybrid state-space


@reads("jamba")
def read_jamba(view: ConfigView, name: str) -> ModelArch:
    """Attention every ``attn_layer_period`` layers from ``attn_layer_offset``, Mamba elsewhere; experts likewise."""
    layers_count, hidden, heads, kv_heads, head_dim = _common_sizes(view)
    attn_period = view.positive_int("attn_layer_period")
    attn_offset = view.get("attn_layer_offset", 0)
    expert_period = view.positive_int("expert_layer_period", 1)
    expert_offset = view.get("expert_layer_offset", 0)
    d_inner = view.positive_int("mamba_expand") * hidden
    dt_rank = view.get("mamba_dt_rank", "auto")
    mamba = Mamba1Mixer(
        hidden_size=hidden,
        d_inner=d_inner,
        d_state=view.positive_int("mamba_d_state"),
        d_conv=view.positive_int("mamba_d_conv"),
        dt_rank=math.ceil(hidden / 16) if dt_rank == "auto" else dt_rank,
        conv_bias=view.flag("mamba_conv_bias", True),
        proj_bias=view.flag("mamba_proj_bias"),
        inner_norms=True,
    )
    attention = FullAttention(
        hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim
    )
    num_experts = view.get("num_experts", 1)
    moe = MoE(
        hidden_size=hidden,
        num_experts=num_experts,
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=view.stated_int("intermediate_size"),
    )
    dense = dense_mlp(view)
    layers = []
    for index in range(layers_count):
        mixer = attention if index % attn_period == attn_offset else mamba
        is_expert = num_experts > 1 and index % expert_period == expert_offset
        layers.append(Layer(mixer=mixer, feed_forward=moe if is_expert else dense, norm_params=2 * hidden))
    return finish_arch(view, name, layers, [])
