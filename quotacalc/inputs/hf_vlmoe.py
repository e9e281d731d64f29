"""Readers for mixture-of-experts models with a vision tower (and, for Qwen3-Omni, audio), as vLLM serves them:
Qwen3-VL-MoE (``qwen3_vl_moe``), Kimi K2.5 (``kimi_k25``) and Qwen3-Omni's thinker (``qwen3_omni_moe``); and
Xiaomi's MiMo-V2-Flash (``mimo_v2_flash``, text only: hybrid sliding/full attention with experts).

Each text decoder is read by the reader of its text family (Qwen3-MoE's layout, DeepSeek-V3's MLA); the towers
are counted in ``vision_params``, as the other multimodal readers do.
"""

from __future__ import annotations

from quotacalc.core.arch import FullAttention, Layer, ModelArch, MoE, SlidingWindowAttention
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import (
    ConfigView,
    dense_mlp,
    finish_arch,
    layer_kinds,
    read_decoder,
    read_deepseek,
    reads,
    registered_decoder_family,
)
from quotacalc.inputs.hf_moe import mlp_layer_kinds
from quotacalc.inputs.hf_qwen_vl import qwen3_vl_vision_params


def _qwen3_moe_text(text: ConfigView) -> None:
    """The expert sizes a Qwen3-MoE text model must state (a class default would price another model)."""
    for key in ("num_experts", "num_experts_per_tok", "moe_intermediate_size"):
        text.stated_int(key)


@reads("qwen3_vl_moe")
def read_qwen3_vl_moe(view: ConfigView, name: str) -> ModelArch:
    """Qwen3-VL-MoE (``Qwen3VLMoeForConditionalGeneration``): Qwen3-MoE's decoder (per-head q/k norms, experts
    every ``decoder_sparse_step`` layers outside ``mlp_only_layers``, no shared expert) and Qwen3-VL's tower.

    Tied by the wrapper's ``tie_word_embeddings`` (false as published), as transformers builds it; the checkpoint
    holds both the embedding and ``lm_head``.
    """
    text = view.sub("text_config")
    _qwen3_moe_text(text)
    towers = qwen3_vl_vision_params(view.sub("vision_config"))
    arch = read_decoder(text, name, registered_decoder_family("qwen3_moe"), dtype_views=(view,), vision_params=towers)
    tied = view.flag("tie_word_embeddings", False)
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": "qwen3_vl_moe"})


def _tower_size(vision: ConfigView, key: str, legacy: str) -> int:
    """A MoonViT size under its published name (``vt_hidden_size``, which vLLM's ``KimiK25VisionConfig`` maps) or
    transformers' (``hidden_size``); a file stating both, differently, is refused."""
    stated = vision.given_keys is None or vision.prefix + key in vision.given_keys
    if vision.get(legacy) is None:
        return vision.positive_int(key)
    value = vision.positive_int(legacy)
    if stated and vision.get(key) is not None and vision.get(key) != value:
        raise vision.fail(key, f"is {vision.get(key)}, but {legacy} is {value}", f"state one {key}")
    return value


def moonvit_params(vision: ConfigView, text_hidden: int) -> int:
    """Kimi K2.5's MoonViT tower and projector: a biased patch convolution, a learned position grid
    (``init_pos_emb_height`` x ``init_pos_emb_width``; the time table is a fixed sinusoid, a buffer), blocks of
    two LayerNorms (weight and bias), biased q/k/v and output projections and a plain biased MLP, a final
    LayerNorm; then the projector: a LayerNorm over ``mm_hidden_size``, and a two-layer biased MLP from
    ``merge_kernel_size`` patches to the text width."""
    hidden = _tower_size(vision, "hidden_size", "vt_hidden_size")
    inter = _tower_size(vision, "intermediate_size", "vt_intermediate_size")
    depth = _tower_size(vision, "num_hidden_layers", "vt_num_hidden_layers")
    heads = _tower_size(vision, "num_attention_heads", "vt_num_attention_heads")
    if hidden % heads:
        raise vision.fail("vt_num_attention_heads", f"{heads} heads do not divide the tower width {hidden}")
    grid = _tower_size(vision, "pos_emb_height", "init_pos_emb_height") * _tower_size(
        vision, "pos_emb_width", "init_pos_emb_width"
    )
    patch = vision.positive_int("patch_size")
    kernel = vision.get("merge_kernel_size")
    if (
        not isinstance(kernel, list | tuple)
        or len(kernel) != 2
        or any(isinstance(k, bool) or not isinstance(k, int) or k <= 0 for k in kernel)
    ):
        raise vision.fail("merge_kernel_size", f"must be two positive integers, got {kernel!r}")
    embed = 3 * patch * patch * hidden + hidden + grid * hidden
    block = 4 * hidden + 4 * (hidden * hidden + hidden) + hidden * inter + inter + inter * hidden + hidden
    merged = hidden * kernel[0] * kernel[1]
    projector = 2 * vision.positive_int("mm_hidden_size", hidden) + merged * merged + merged
    projector += merged * text_hidden + text_hidden
    return embed + depth * block + 2 * hidden + projector


@reads("kimi_k25")
def read_kimi_k25(view: ConfigView, name: str) -> ModelArch:
    """Kimi K2.5 (``KimiK25ForConditionalGeneration``): DeepSeek-V3's decoder (MLA, the first
    ``first_k_dense_replace`` layers dense, routed and shared experts) in ``text_config`` (published as
    ``kimi_k2``, which transformers reads as ``deepseek_v3``), MoonViT and its projector in ``vision_params``.

    vLLM's kimi_k25.py never ties ``lm_head`` (the checkpoint holds both); transformers ties by the wrapper's
    ``tie_word_embeddings``, false as published.
    """
    text = view.sub("text_config")
    if text.get("model_type") not in ("deepseek_v3", "kimi_k2"):
        raise UnsupportedArchitecture(
            f"a kimi_k25 text model of type '{text.get('model_type')}' is not priced yet",
            source=view.source,
            field="text_config.model_type",
            fix="Kimi K2.5's text model is DeepSeek-V3's (kimi_k2)",
        )
    text.stated_int("n_routed_experts")
    towers = moonvit_params(view.sub("vision_config"), text.stated_int("hidden_size"))
    arch = read_deepseek(text, name)
    tied = view.flag("tie_word_embeddings", True)
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": "kimi_k25", "vision_params": towers})


def qwen3_omni_audio_params(audio: ConfigView) -> int:
    """Qwen3-Omni's audio encoder (Whisper-like): three biased 3x3 convolutions downsampling the mel bins by 8, a
    linear ``conv_out`` without bias to ``d_model``, ``encoder_layers`` blocks (biased q/k/v/o, two LayerNorms with
    bias, a plain biased MLP), a final LayerNorm and a two-layer biased projection to ``output_dim``. Its
    sinusoidal positions are a buffer."""
    width = audio.positive_int("d_model")
    inner = audio.positive_int("encoder_ffn_dim")
    channels = audio.positive_int("downsample_hidden_size")
    bins = audio.positive_int("num_mel_bins")
    for _ in range(3):  # each stride-2 convolution halves the mel axis, rounding up
        bins = (bins + 1) // 2
    convs = (9 * channels + channels) + 2 * (9 * channels * channels + channels)
    block = 4 * (width * width + width) + 4 * width + width * inner + inner + inner * width + width
    head = (
        2 * width + width * width + width + width * audio.positive_int("output_dim") + audio.positive_int("output_dim")
    )
    return convs + channels * bins * width + audio.positive_int("encoder_layers") * block + head


@reads("qwen3_omni_moe")
def read_qwen3_omni_moe(view: ConfigView, name: str) -> ModelArch:
    """Qwen3-Omni-MoE as vLLM serves it: the thinker alone (``Qwen3OmniMoeThinkerForConditionalGeneration``,
    which vLLM's registry maps ``Qwen3OmniMoeForConditionalGeneration`` to; its loader skips the ``talker.`` and
    ``code2wav.`` weights). Its decoder is Qwen3-MoE's (per-head q/k norms, no shared expert); its vision tower
    Qwen3-VL's and its audio encoder are counted in ``vision_params``.

    The talker (speech tokens) and code2wav (the vocoder), which transformers builds when
    ``enable_audio_output``, are not counted: vLLM does not load them to serve text.
    """
    thinker = view.sub("thinker_config")
    text = thinker.sub("text_config")
    _qwen3_moe_text(text)
    if text.get("shared_expert_intermediate_size", 0):
        raise UnsupportedArchitecture(
            "a shared expert is built by neither transformers' nor vLLM's Qwen3-Omni thinker",
            source=view.source,
            field=text.prefix + "shared_expert_intermediate_size",
            fix="Qwen3-Omni's thinker states shared_expert_intermediate_size 0",
        )
    towers = qwen3_vl_vision_params(thinker.sub("vision_config")) + qwen3_omni_audio_params(thinker.sub("audio_config"))
    arch = read_decoder(
        text, name, registered_decoder_family("qwen3_moe"), dtype_views=(thinker, view), vision_params=towers
    )
    notes = list(arch.notes)
    if view.flag("enable_audio_output", True):
        notes.append("talker and code2wav (speech output) not counted: vLLM serves the thinker's text only")
    tied = thinker.flag("tie_word_embeddings", False)
    return arch.model_copy(update={"tie_word_embeddings": tied, "model_type": "qwen3_omni_moe", "notes": tuple(notes)})


def _hub_pattern(view: ConfigView, key: str, layers: int, names: tuple[str, str], built: list[str]) -> None:
    """A published 0/1 list (what vLLM reads) must agree with the per-layer kinds transformers builds."""
    pattern = view.get(key)
    if pattern is None:
        return
    if not isinstance(pattern, list) or len(pattern) != layers or any(p not in (0, 1) for p in pattern):
        raise view.fail(key, f"must list 0 or 1 for each of the {layers} layers")
    if [names[p] for p in pattern] != built:
        raise view.fail(
            key,
            "disagrees with the layer kinds transformers builds (vLLM reads this list, transformers its own)",
            "state layer_types / mlp_layer_types to match it",
        )


@reads("mimo_v2_flash")
def read_mimo_v2_flash(view: ConfigView, name: str) -> ModelArch:
    """MiMo-V2-Flash (``MiMoV2FlashForCausalLM``): full attention on the layers ``layer_types`` (vLLM:
    ``hybrid_layer_pattern`` 0) names, sliding-window attention with twice the KV heads and per-head sinks on the
    rest; q/k heads of ``head_dim``, values of ``v_head_dim`` (cached at their own widths); one dense layer, then
    experts without a shared one (``mlp_layer_types``; vLLM: ``moe_layer_freq``).

    The window is ``sliding_window_size``, what vLLM gives its sliding layers (transformers attends one token
    more). Configs where the two engines would build different layers (the published ``swa_*`` sizes or 0/1 lists
    against transformers' derivation, no sliding-layer sinks) are refused. The router's score-correction bias is a
    buffer in transformers and is not counted; multi-token-prediction layers are built by neither engine's main
    model (vLLM skips their weights).
    """
    layer_count = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    heads = view.stated_int("num_attention_heads")
    kv_heads = view.stated_int("num_key_value_heads")
    head_dim, v_head_dim = view.positive_int("head_dim"), view.positive_int("v_head_dim")
    kinds, notes = layer_kinds(view, layer_count)
    if any(kind not in ("full_attention", "sliding_attention") for kind in kinds):
        raise view.fail("layer_types", "must name full_attention or sliding_attention for each layer")
    _hub_pattern(view, "hybrid_layer_pattern", layer_count, ("full_attention", "sliding_attention"), kinds)
    mlp_kinds = mlp_layer_kinds(view, layer_count)
    _hub_pattern(view, "moe_layer_freq", layer_count, ("dense", "sparse"), mlp_kinds)
    for key, built in (
        ("swa_num_attention_heads", heads),
        ("swa_num_key_value_heads", 2 * kv_heads),
        ("swa_head_dim", head_dim),
        ("swa_v_head_dim", v_head_dim),
    ):
        if view.get(key) is not None and view.get(key) != built:
            raise view.fail(key, f"is {view.get(key)}, but transformers builds {built} for the sliding layers")
    if not view.flag("add_swa_attention_sink_bias", True):
        raise view.fail("add_swa_attention_sink_bias", "is false, but transformers builds sinks on every sliding layer")
    common = dict(
        hidden_size=hidden,
        num_heads=heads,
        head_dim=head_dim,
        v_head_dim=v_head_dim,
        qkv_bias=view.flag("attention_bias"),
    )
    full = FullAttention(**common, num_kv_heads=kv_heads)
    window = view.get("sliding_window_size") or view.positive_int("sliding_window")
    if isinstance(window, bool) or not isinstance(window, int) or window <= 0:
        raise view.fail("sliding_window_size", f"must be a positive number of tokens, got {window!r}")
    sliding = SlidingWindowAttention(**common, num_kv_heads=2 * kv_heads, sinks=True, window_tokens=window)
    moe = MoE(
        hidden_size=hidden,
        num_experts=view.stated_int("n_routed_experts"),
        top_k=view.positive_int("num_experts_per_tok"),
        expert_intermediate_size=view.positive_int("moe_intermediate_size"),
    )
    dense = dense_mlp(view)
    layers = [
        Layer(
            mixer=full if kind == "full_attention" else sliding,
            feed_forward=moe if mlp_kind == "sparse" else dense,
            norm_params=2 * hidden,
        )
        for kind, mlp_kind in zip(kinds, mlp_kinds, strict=True)
    ]
    if view.get("num_nextn_predict_layers"):
        notes.append("multi-token-prediction layers are not counted (vLLM loads them only as a draft model)")
    return finish_arch(view, name, layers, notes)
