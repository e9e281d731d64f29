"""Readers for DeepSeek Sparse Attention models: DeepSeek-V3.2 / V3.2-Exp (``deepseek_v32``) and GLM-5
(``glm_moe_dsa``).

Both are DeepSeek-V3's MLA and experts with a lightning indexer in each attention layer (transformers 5.24
``models/deepseek_v32/modular_deepseek_v32.py`` and ``models/glm_moe_dsa/modular_glm_moe_dsa.py``): the
attention is ``SparseMLAAttention``, which carries the indexer's parameters, its key cache and vLLM's cache
layout. Which layers are dense is ``mlp_layer_types`` (transformers derives it from ``first_k_dense_replace``).
GLM-5's later configs let a layer reuse an earlier layer's top-k (``indexer_types`` "shared"): transformers
builds no indexer there, and vLLM (``DeepseekV2MLAAttention`` in vllm/model_executor/models/deepseek_v2.py @
002d6073) none either, deciding from ``index_topk_pattern``, else ``index_topk_freq`` and
``index_skip_topk_offset``; a config whose two readings disagree is refused. Multi-token-prediction layers are
not built by transformers, so not counted (vLLM gives its MTP layer a full indexer).
"""

from __future__ import annotations

from quotacalc.core.arch import DSA_QUANT_BLOCK, Layer, ModelArch, SparseMLAAttention
from quotacalc.errors import UnsupportedArchitecture
from quotacalc.inputs.hf_arch import ConfigView, dense_mlp, finish_arch, mla_attention, reads
from quotacalc.inputs.hf_moe import _glm_moe, _mtp_notes, mlp_layer_kinds

#: vLLM's defaults where a config states no index sharing (``getattr(config, ..., default)``).
VLLM_INDEX_TOPK_FREQ = 1
VLLM_INDEX_SKIP_TOPK_OFFSET = 2


def vllm_indexer_layers(view: ConfigView, layer_count: int) -> list[bool]:
    """Which layers run their own indexer as vLLM decides it (True) or reuse an earlier one's top-k (False):
    ``index_topk_pattern`` ('S' shares), else every ``index_topk_freq``-th layer from ``index_skip_topk_offset``."""
    pattern = view.get("index_topk_pattern")
    if pattern is not None:
        if not isinstance(pattern, (str, list)):
            raise view.fail("index_topk_pattern", f"must be a string of 'F' and 'S', got {pattern!r}")
        return [not (index < len(pattern) and pattern[index] == "S") for index in range(layer_count)]
    frequency = view.positive_int("index_topk_freq", VLLM_INDEX_TOPK_FREQ)
    offset = view.get("index_skip_topk_offset", VLLM_INDEX_SKIP_TOPK_OFFSET)
    if isinstance(offset, bool) or not isinstance(offset, int):
        raise view.fail("index_skip_topk_offset", f"must be a whole number of layers, got {offset!r}")
    return [max(index - offset + 1, 0) % frequency == 0 for index in range(layer_count)]


def _indexer_layers(view: ConfigView, layer_count: int) -> list[bool]:
    """Which layers hold an indexer, where transformers and vLLM agree; refused where they do not."""
    served = vllm_indexer_layers(view, layer_count)
    built = view.get("indexer_types")
    if built is None:
        # DeepSeek-V3.2: transformers builds an indexer in every layer, whatever the config says of sharing.
        if not all(served):
            key = "index_topk_pattern" if view.get("index_topk_pattern") is not None else "index_topk_freq"
            raise view.fail(
                key,
                f"makes vLLM share the top-k of {served.count(False)} layers, but transformers builds an indexer "
                f"in every {view.get('model_type')} layer",
                "drop the index sharing keys, or use a glm_moe_dsa config",
            )
        return served
    if not isinstance(built, list) or len(built) != layer_count or any(k not in ("full", "shared") for k in built):
        raise view.fail("indexer_types", f"must list 'full' or 'shared' for each of the {layer_count} layers")
    has_indexer = [kind == "full" for kind in built]
    if has_indexer != served:
        first = next(index for index, (a, b) in enumerate(zip(has_indexer, served, strict=True)) if a != b)
        raise view.fail(
            "indexer_types",
            f"layer {first} is '{built[first]}', but vLLM's index_topk_pattern / index_topk_freq / "
            f"index_skip_topk_offset make it {'full' if served[first] else 'shared'}",
            "state the sharing the way vLLM reads it (index_topk_freq and index_skip_topk_offset, or "
            "index_topk_pattern) and let transformers derive indexer_types",
        )
    if not has_indexer[0]:
        raise view.fail("indexer_types", "layer 0 is 'shared', but no earlier layer has an indexer to share")
    return has_indexer


def sparse_mla_attention(view: ConfigView, has_indexer: bool) -> SparseMLAAttention:
    """DeepSeek Sparse Attention as the config states it: MLA (with its query latent) and the lightning indexer."""
    if view.flag("attention_bias"):
        # transformers then biases q_a_proj, kv_a_proj_with_mqa and o_proj, which vLLM's MLA builds without.
        raise UnsupportedArchitecture(
            "MLA with attention_bias is not priced yet", source=view.source, field=view.prefix + "attention_bias"
        )
    q_lora_rank = view.stated_int("q_lora_rank")
    index_head_dim = view.stated_int("index_head_dim")
    if index_head_dim % DSA_QUANT_BLOCK:
        raise view.fail(
            "index_head_dim",
            f"is {index_head_dim}: vLLM's indexer key cache quantizes keys in blocks of {DSA_QUANT_BLOCK}",
            f"a multiple of {DSA_QUANT_BLOCK}",
        )
    mla = mla_attention(view).model_dump(exclude={"kind", "q_lora_rank"})
    return SparseMLAAttention(
        **mla,
        q_lora_rank=q_lora_rank,
        index_topk=view.stated_int("index_topk"),
        index_n_heads=view.stated_int("index_n_heads"),
        index_head_dim=index_head_dim,
        has_indexer=has_indexer,
    )


@reads("deepseek_v32", "glm_moe_dsa")
def read_dsa(view: ConfigView, name: str) -> ModelArch:
    """Sparse MLA in every layer (an indexer of its own, or an earlier layer's top-k); dense or MoE feed-forward
    blocks as ``mlp_layer_types`` says, with DeepSeek's routed and shared experts."""
    layer_count = view.stated_int("num_hidden_layers")
    hidden = view.stated_int("hidden_size")
    kinds = mlp_layer_kinds(view, layer_count)
    frequency = view.get("moe_layer_freq", 1)
    if frequency != 1:
        raise view.fail(
            "moe_layer_freq",
            f"is {frequency!r}: vLLM would place experts every {frequency!r} layers, transformers by mlp_layer_types",
            "1, as the published configs state",
        )
    indexed = _indexer_layers(view, layer_count)
    attention = {flag: sparse_mla_attention(view, flag) for flag in set(indexed)}
    moe, dense = _glm_moe(view), dense_mlp(view)
    layers = [
        Layer(mixer=attention[flag], feed_forward=moe if kind == "sparse" else dense, norm_params=2 * hidden)
        for kind, flag in zip(kinds, indexed, strict=True)
    ]
    notes = _mtp_notes(view)
    if not all(indexed):
        notes.append(f"{indexed.count(False)} of {layer_count} layers reuse an earlier layer's top-k (no indexer)")
    return finish_arch(view, name, layers, notes)
