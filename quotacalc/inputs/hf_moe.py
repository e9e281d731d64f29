"""Readers for mixture-of-experts families beyond Mixtral, Qwen-MoE and DeepSeek: GLM-4.5/4.6/4.7
(``glm4_moe``), GLM-4.7-Flash (``glm4_moe_lite``), MiniMax-M2, Llama 4 (text and multimodal),
dots.llm1 (``dots1``), ERNIE 4.5 MoE (``ernie4_5_moe``) and Hunyuan-A13B (``hunyuan_v1_moe``).

Each mirrors the modeling file of transformers 5.24 (``transformers/models/<family>/``): which layers
are dense and which hold experts, and every bias and norm those modules build. Routers' score
correction biases (``e_score_correction_bias``) are buffers there, not parameters, and are not
counted (one float per expert per layer), except ERNIE's, a parameter; multi-token-prediction layers are not built, so not counted.
"""

from __future__ import annotations

from quotacalc.core.arch import ChunkedLocalAttention, DenseMLP, FullAttention, Layer, ModelArch, MoE
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
        **attention_sizes(view), qkv_bias=view.flag("attention_bias"), qk_norm=view.flag("use_qk_norm")
    )
    first_dense = _dense_prefix(view, layer_count)
    moe, dense = _glm_moe(view), dense_mlp(view)
    layers = [
        Layer(mixer=attention, feed_forward=dense if index < first_dense else moe, norm_params=2 * hidden)
        for index in range(layer_count)
    ]
    return finish_arch(view, name, layers, _mtp_notes(view))


# --------------------------------------------------------------------------- GLM-4.7-Flash (MLA)


def mlp_layer_kinds(view: ConfigView, layer_count: int) -> list[str]:
    """Each layer's feed-forward kind ('dense' or 'sparse') as transformers builds it from ``mlp_layer_types``;
    a config whose ``first_k_dense_replace`` (what vLLM reads) disagrees is refused."""
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
    return kinds


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
    kinds = mlp_layer_kinds(view, layer_count)
    mla = mla_attention(view)
    moe, dense = _glm_moe(view), dense_mlp(view)
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
    attention = FullAttention(**attention_sizes(view), qk_norm=True, qk_norm_whole=True)
    moe = MoE(
        hidden_size=hidden,
        num_experts=view.positive_int("num_local_experts"),
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=view.stated_int("intermediate_size"),
    )
    layers = [Layer(mixer=attention, feed_forward=moe, norm_params=2 * hidden) for _ in range(layer_count)]
    return finish_arch(view, name, layers, _mtp_notes(view))


# --------------------------------------------------------------------------- Llama 4


def _llama4_layers(view: ConfigView) -> tuple[list[Layer], list[str]]:
    """Chunked-local or full attention per ``layer_types``; experts with a shared expert on ``moe_layers``,
    a dense MLP of ``intermediate_size_mlp`` elsewhere. The q/k L2 norm has no weights."""
    layer_count = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    bias = view.flag("attention_bias")
    sizes = attention_sizes(view)
    kinds = view.get("layer_types")
    if not isinstance(kinds, list) or len(kinds) != layer_count:
        raise view.fail("layer_types", f"must list one type per layer ({layer_count})")
    chunk = view.get("attention_chunk_size")
    max_context = view.context_tokens()
    notes: list[str] = []
    mixers: dict[str, FullAttention | ChunkedLocalAttention] = {
        "full_attention": FullAttention(**sizes, qkv_bias=bias, o_bias=bias)
    }
    if "chunked_attention" in kinds:
        if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk <= 0:
            raise view.fail("attention_chunk_size", f"must be a positive number of tokens, got {chunk!r}")
        if max_context and chunk >= max_context:
            mixers["chunked_attention"] = mixers["full_attention"]
            notes.append(f"attention chunk {chunk} >= max context {max_context}: those layers priced as full")
        else:
            mixers["chunked_attention"] = ChunkedLocalAttention(**sizes, qkv_bias=bias, o_bias=bias, chunk_tokens=chunk)
    for index, kind in enumerate(kinds):
        if kind not in mixers:
            raise UnsupportedArchitecture(
                f"layer {index} has type '{kind}', which quotacalc cannot price for llama4",
                source=view.source,
                field=view.prefix + "layer_types",
            )
    moe_layers = view.get("moe_layers")
    if not isinstance(moe_layers, list) or any(not isinstance(i, int) or isinstance(i, bool) for i in moe_layers):
        raise view.fail("moe_layers", "must list the indices of the layers that hold experts")
    expert_width = view.stated_int("intermediate_size")
    moe = MoE(
        hidden_size=hidden,
        num_experts=view.positive_int("num_local_experts"),
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=expert_width,
        num_shared_experts=1,
        shared_intermediate_size=expert_width,
    )
    dense = DenseMLP(hidden_size=hidden, intermediate_size=view.positive_int("intermediate_size_mlp"))
    sparse = set(moe_layers)
    layers = [
        Layer(mixer=mixers[kind], feed_forward=moe if index in sparse else dense, norm_params=2 * hidden)
        for index, kind in enumerate(kinds)
    ]
    return layers, notes


@reads("llama4_text")
def read_llama4_text(view: ConfigView, name: str) -> ModelArch:
    """Llama 4's language model alone (``Llama4ForCausalLM``)."""
    layers, notes = _llama4_layers(view)
    return finish_arch(view, name, layers, notes)


def llama4_vision_params(vision: ConfigView, text_hidden: int) -> int:
    """Llama 4's vision tower (unfold patch embedding, class and position embeddings, LayerNorm encoder,
    pixel-shuffle MLP adapter) plus the projector into the text model."""
    hidden = vision.stated_int("hidden_size")
    heads = vision.positive_int("num_attention_heads")
    inner = vision.positive_int("intermediate_size")
    layers = vision.stated_int("num_hidden_layers")
    patch = vision.positive_int("patch_size")
    channels = vision.positive_int("num_channels", 3)
    if hidden % heads:
        raise vision.fail("num_attention_heads", f"{heads} heads do not divide the hidden size {hidden}")
    positions = (vision.positive_int("image_size") // patch) ** 2 + 1  # patches and the class token
    embeddings = channels * patch * patch * hidden + hidden + positions * hidden + 2 * 2 * hidden
    attention = 4 * (hidden * hidden + hidden)  # q, k, v, o, all biased; heads x head_dim = hidden
    mlp = hidden * inner + inner + inner * hidden + hidden
    per_layer = attention + mlp + 2 * 2 * hidden
    adapter = inner * vision.positive_int("projector_input_dim") + vision.positive_int("projector_output_dim") ** 2
    projector = vision.positive_int("vision_output_dim") * text_hidden
    return embeddings + layers * per_layer + adapter + projector


@reads("llama4")
def read_llama4(view: ConfigView, name: str) -> ModelArch:
    """Llama 4 Scout / Maverick as published (``Llama4ForConditionalGeneration``): the text model in
    ``text_config``, the vision tower and projector counted in ``vision_params``."""
    text = view.sub("text_config")
    layers, notes = _llama4_layers(text)
    vision_params = llama4_vision_params(view.sub("vision_config"), text.stated_int("hidden_size"))
    arch = finish_arch(text, name, layers, notes, dtype_views=(view,), vision_params=vision_params)
    tied = view.flag("tie_word_embeddings", text.flag("tie_word_embeddings"))
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": "llama4"})


# --------------------------------------------------------------------------- dots.llm1


def _dots1_feed_forward(view: ConfigView, index: int) -> DenseMLP | MoE:
    if index < _dense_prefix(view, view.stated_int("num_hidden_layers")):
        return dense_mlp(view)
    return _glm_moe(view)


#: dots.llm1: GLM-4.5's layout (dense first layers, routed + shared experts) with q/k/v/o all biased by
#: ``attention_bias`` and per-head q/k RMSNorm always; full or sliding layers as ``layer_types`` resolves.
_DOTS1 = DecoderFamily(
    attention=AttentionTraits(qkv_bias="attention_bias", o_bias="attention_bias", qk_norm=True),
    feed_forward=_dots1_feed_forward,
)


@reads("dots1")
def read_dots1(view: ConfigView, name: str) -> ModelArch:
    """rednote-hilab's dots.llm1 (``Dots1ForCausalLM``)."""
    return read_decoder(view, name, _DOTS1)


# --------------------------------------------------------------------------- ERNIE 4.5 MoE


def _ernie_feed_forward(view: ConfigView, index: int) -> DenseMLP | MoE:
    """Experts on every ``moe_layer_interval``-th layer from ``moe_layer_start_index`` to ``moe_layer_end_index``
    (the last layer when -1); the router's ``e_score_correction_bias`` is a parameter here (one per expert),
    counted as a router bias; ``moe_num_shared_experts`` shared experts of the experts' width."""
    interval = view.positive_int("moe_layer_interval", 1)
    start = view.get("moe_layer_start_index", 0)
    end = view.get("moe_layer_end_index", -1)
    end = view.stated_int("num_hidden_layers") - 1 if end == -1 else end
    if not ((index + 1) % interval == 0 and start <= index <= end):
        return dense_mlp(view)
    width = view.positive_int("moe_intermediate_size")
    shared = view.get("moe_num_shared_experts", 0)
    return MoE(
        hidden_size=view.stated_int("hidden_size"),
        num_experts=view.positive_int("moe_num_experts"),
        top_k=view.positive_int("moe_k"),
        expert_intermediate_size=width,
        router_bias=True,
        num_shared_experts=shared,
        shared_intermediate_size=width,
    )


_ERNIE = DecoderFamily(feed_forward=_ernie_feed_forward)


@reads("ernie4_5_moe")
def read_ernie4_5_moe(view: ConfigView, name: str) -> ModelArch:
    """Baidu's ERNIE 4.5 MoE (``Ernie4_5_MoeForCausalLM``): GQA without biases, experts on a layer range."""
    if view.flag("use_bias"):
        # transformers then biases the LM head too (vocabulary-sized), which ModelArch does not count.
        raise UnsupportedArchitecture(
            "use_bias (biases on every projection and the LM head) is not priced yet",
            source=view.source,
            field=view.prefix + "use_bias",
        )
    return read_decoder(view, name, _ERNIE, tie_default=True)


# --------------------------------------------------------------------------- Hunyuan (A13B)


def _per_layer(view: ConfigView, key: str, layers: int, default: int) -> list[int]:
    """An int for every layer, or a list with one per layer (Hunyuan states several sizes per layer)."""
    value = view.get(key, default)
    values = value if isinstance(value, list) else [value] * layers
    if len(values) != layers or any(isinstance(v, bool) or not isinstance(v, int) or v <= 0 for v in values):
        raise view.fail(key, f"must be a positive integer or a list of one per layer ({layers})")
    return values


@reads("hunyuan_v1_moe")
def read_hunyuan_v1_moe(view: ConfigView, name: str) -> ModelArch:
    """Tencent's Hunyuan MoE (``HunYuanMoEV1ForCausalLM``): GQA with per-head q/k RMSNorm (built whatever
    ``use_qk_norm`` says) and ``attention_bias`` on q, k, v and o; in every layer ``num_experts`` experts of
    ``intermediate_size`` (top ``moe_topk``, per layer if a list) beside one shared MLP of the same width.

    transformers builds experts of ``intermediate_size`` and one shared MLP, where vLLM reads
    ``moe_intermediate_size`` and ``num_shared_expert`` per layer, and it has no cross-layer KV sharing
    (``use_cla``): configs where the two would differ are refused.
    """
    layer_count = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    if view.flag("use_cla"):
        raise UnsupportedArchitecture(
            "cross-layer attention (KV shared between layers) is not priced yet",
            source=view.source,
            field=view.prefix + "use_cla",
        )
    width = view.stated_int("intermediate_size")
    if any(size != width for size in _per_layer(view, "moe_intermediate_size", layer_count, width)):
        raise view.fail(
            "moe_intermediate_size",
            f"differs from intermediate_size {width}: transformers builds experts of intermediate_size, vLLM of this",
            "state the same width in both",
        )
    if any(count != 1 for count in _per_layer(view, "num_shared_expert", layer_count, 1)):
        raise view.fail("num_shared_expert", "must be 1 in every layer: transformers builds one shared MLP")
    experts = view.get("num_experts")
    if isinstance(experts, bool) or not isinstance(experts, int) or experts <= 0:
        raise view.fail("num_experts", f"must be one positive number of experts for every layer, got {experts!r}")
    attention = FullAttention(
        **attention_sizes(view),
        qkv_bias=view.flag("attention_bias"),
        o_bias=view.flag("attention_bias"),
        qk_norm=True,
    )
    layers = [
        Layer(
            mixer=attention,
            feed_forward=MoE(
                hidden_size=hidden,
                num_experts=experts,
                top_k=top_k,
                expert_intermediate_size=width,
                num_shared_experts=1,
                shared_intermediate_size=width,
            ),
            norm_params=2 * hidden,
        )
        for top_k in _per_layer(view, "moe_topk", layer_count, 1)
    ]
    return finish_arch(view, name, layers, [])
