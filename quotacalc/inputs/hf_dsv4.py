"""Reader for DeepSeek V4 (``deepseek_v4``: DeepSeek-V4-Flash, DeepSeek-V4-Pro).

transformers 5.24 ``models/deepseek_v4`` derives each layer's attention from the published ``compress_ratios`` (0:
``sliding_attention``, 4: ``compressed_sparse_attention``, 128: ``heavily_compressed_attention``) into
``layer_types``, with ``compress_rates`` giving the ratio of each kind; vLLM (``DeepseekV4Attention`` in
vllm/model_executor/models/deepseek_v4.py @ 023da1fc) reads the ratio per layer and builds the indexer and the
overlapping compressor for a ratio of 4 only. The two agree when CSA compresses by 4 and HCA by 128, as published;
any other ratio is refused. The attention is ``CompressedSparseAttention``.

Every layer is a mixture of experts: ``n_routed_experts`` routed (top ``num_experts_per_tok``) and one shared expert
of ``moe_intermediate_size`` (transformers builds one whatever ``n_shared_experts`` says, vLLM
``n_shared_experts`` of them: a config with another count is refused). The first ``num_hash_layers`` route by a
frozen token-to-expert table (a buffer, not a parameter; vLLM holds it as vocab x top_k int32, not counted); their
gate weights are counted as any router's. Each layer carries two hyper-connection mixers (``hc_mult`` streams:
(2 + n) x n rows over n x hidden, a bias row and 3 scales) and the model a final one (n rows, n biases, a scale),
float32 in the checkpoint and in vLLM (counted here at the checkpoint dtype with the norms). The multi-token-
prediction layer is not built by transformers, so not counted.
"""

from __future__ import annotations

from quotacalc.core.arch import CompressedSparseAttention, Layer, ModelArch, MoE
from quotacalc.inputs.hf_arch import ConfigView, finish_arch, reads
from quotacalc.inputs.hf_moe import _mtp_notes

#: The ratio of each attention kind as vLLM builds it: the indexer and overlapping windows at 4 only.
VLLM_RATIOS = {"sliding_attention": 1, "compressed_sparse_attention": 4, "heavily_compressed_attention": 128}
#: Widths vLLM's DeepSeek V4 kernels take (DeepseekSparseSWABackend head sizes; the compressor's 512 and 128).
VLLM_HEAD_DIM = 512
VLLM_INDEX_HEAD_DIM = 128


def _layer_types(view: ConfigView, layer_count: int) -> list[str]:
    kinds = view.get("layer_types")
    if not isinstance(kinds, list) or len(kinds) != layer_count or any(k not in VLLM_RATIOS for k in kinds):
        raise view.fail(
            "compress_ratios",
            f"must give each of the {layer_count} layers a ratio of 0, 4 or 128",
            "the published list",
        )
    rates = view.get("compress_rates") or {}
    for kind, ratio in VLLM_RATIOS.items():
        if ratio > 1 and rates.get(kind, ratio) != ratio:
            raise view.fail(
                "compress_rates",
                f"compresses {kind} by {rates.get(kind)!r}, but vLLM builds the indexer for a ratio of 4 only and "
                f"reads 128 as heavily compressed attention",
                "4 for compressed_sparse_attention and 128 for heavily_compressed_attention, as published",
            )
    return kinds


def _attention(view: ConfigView, kind: str) -> CompressedSparseAttention:
    head_dim = view.stated_int("head_dim")
    index_head_dim = view.stated_int("index_head_dim")
    for key, value, width in (
        ("head_dim", head_dim, VLLM_HEAD_DIM),
        ("index_head_dim", index_head_dim, VLLM_INDEX_HEAD_DIM),
    ):
        if value != width:
            raise view.fail(key, f"is {value}: vLLM's DeepSeek V4 kernels take {width}", f"{width}, as published")
    rope = view.get("qk_rope_head_dim")
    if rope is None:
        rope = int(head_dim * view.get("partial_rotary_factor", 64 / 512))
    return CompressedSparseAttention(
        hidden_size=view.stated_int("hidden_size"),
        num_heads=view.stated_int("num_attention_heads"),
        head_dim=head_dim,
        qk_rope_head_dim=rope,
        q_lora_rank=view.stated_int("q_lora_rank"),
        o_groups=view.stated_int("o_groups"),
        o_lora_rank=view.stated_int("o_lora_rank"),
        window_tokens=view.stated_int("sliding_window"),
        compress_ratio=VLLM_RATIOS[kind],
        has_indexer=kind == "compressed_sparse_attention",
        index_topk=view.stated_int("index_topk"),
        index_n_heads=view.stated_int("index_n_heads"),
        index_head_dim=index_head_dim,
    )


def _moe(view: ConfigView) -> MoE:
    shared = view.get("n_shared_experts", 1)
    if shared != 1:
        raise view.fail(
            "n_shared_experts",
            f"is {shared!r}: transformers builds one shared expert, vLLM {shared!r} of them",
            "1, as published",
        )
    width = view.stated_int("moe_intermediate_size")
    return MoE(
        hidden_size=view.stated_int("hidden_size"),
        num_experts=view.stated_int("n_routed_experts"),
        top_k=view.stated_int("num_experts_per_tok"),
        expert_intermediate_size=width,
        num_shared_experts=1,
        shared_intermediate_size=width,
    )


@reads("deepseek_v4")
def read_deepseek_v4(view: ConfigView, name: str) -> ModelArch:
    """DeepSeek V4's attention in every layer (window only, CSA or HCA, as ``compress_ratios`` says), experts in
    every layer, and hyper-connections around both."""
    layer_count = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    kv_heads = view.get("num_key_value_heads", 1)
    if kv_heads != 1:
        raise view.fail("num_key_value_heads", f"is {kv_heads!r}: DeepSeek V4 attends one shared KV head", "1")
    streams = view.stated_int("hc_mult")
    mixes = (2 + streams) * streams
    # Per mixer: its projection (mixes x streams·hidden), a bias per mix and 3 scales; two per layer.
    hyper = 2 * (mixes * streams * hidden + mixes + 3)
    kinds = _layer_types(view, layer_count)
    attention = {kind: _attention(view, kind) for kind in set(kinds)}
    moe = _moe(view)
    layers = [
        Layer(mixer=attention[kind], feed_forward=moe, norm_params=2 * hidden, hyper_connection_params=hyper)
        for kind in kinds
    ]
    head = streams * streams * hidden + streams + 1
    notes = _mtp_notes(view)
    notes.append("hyper-connection weights are float32 in the checkpoint, counted at its dtype here")
    notes.append(
        "the compressors' and indexer's kv/gate projections and weights_proj ship in bf16 beside fp8 linears: "
        "priced at the checkpoint's quantized dtype"
    )
    return finish_arch(view, name, layers, notes, final_norm=hidden + head)
