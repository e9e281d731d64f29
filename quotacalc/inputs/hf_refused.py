"""Families transformers reads but quotacalc refuses to price, each with the reason, so a user is told why.

Each was read in transformers 5.24 (``models/<family>/``) and in vLLM's own implementation (vllm-project/vllm
``vllm/models/<family>/``). For each, vLLM and transformers build different models from the same config.json,
and no published config.json was found to say which keys the checkpoint states; and each keeps, as vLLM serves
it, a cache that no layer kind in ``quotacalc.core.arch`` describes. Pricing it with the nearest kind would be a
guess:

* ``glm5_next`` (GLM-5.3-Flash). vLLM reads the file with its own ``Glm5NextTextConfig``
  (vllm/transformers_utils/configs/glm5_next.py @ 39928447), whose defaults are another model: without
  ``layer_types`` every layer is MLA (transformers: Kimi Delta Attention on 3 of every 4), without
  ``index_topk`` there is no indexer (transformers: 2,048), ``first_k_dense_replace`` 0 (transformers: 3 dense
  layers), a vision ``out_hidden_size`` of 4,096 (transformers: 1,536). vLLM builds the indexer on every MLA
  layer (vllm/models/glm5next/nvidia/attention.py @ 6b70ba09), where transformers builds none on layers whose
  ``indexer_types`` is "shared". The indexer's cache is k-pool-compressed, one fp8 key per ``index_kpool``
  tokens (``Glm5NextIndexerCache`` sets ``compress_ratio = index_kpool``), plus a paged tail of the open pool's
  raw keys (nvidia/sparse_indexer.py @ 27911fd9), and needs ``--block-size`` 64 x index_kpool on Hopper; the
  residual is ``hc_mult`` hyper-connection streams (mHC) whose mixing weights vLLM keeps in fp32.
* ``minimax_m3_vl`` (MiniMax-M3). vLLM takes the sparse layers from ``sparse_attention_config``'s
  ``sparse_attention_freq`` and the shared expert from ``n_shared_experts`` x ``intermediate_size``
  (vllm/models/minimax_m3/nvidia/model.py @ 90215894), where transformers takes ``layer_types`` and
  ``shared_intermediate_size``: its default config has no sparse layer in transformers and a shared expert vLLM
  would not build. Sparse layers are block-sparse GQA attention whose lightning indexer caches one index key per
  token in its own dtype (``indexer_kv_dtype``: bf16 or fp8) beside the full KV cache, and whose queries read
  only ``index_topk_blocks`` blocks of ``index_block_size`` tokens per KV head
  (vllm/models/minimax_m3/common/indexer.py @ 545393a3, ``MiniMaxM3IndexerCache``).
* ``qwen4_exp`` (Qwen4-Exp). QSA attention whose indexer keeps a compressed key cache (one key per
  ``indexer_compress_ratio`` tokens) and a per-request circular buffer of raw keys
  (vllm/models/qwen4_exp/common/qsa_cache.py @ d4d0f73e, ``CircularBufferSpec``), hashed n-gram per-layer
  embeddings with convolution and n-gram states of their own, and low-rank hyper-connections.

Their text decoders (``*_text``) are refused for the same reasons.
"""

from __future__ import annotations

_GLM5_NEXT = (
    "vLLM reads GLM-5.3-Flash's config with its own class, whose defaults build another model (no layer_types: "
    "every layer MLA, no KDA), and its sparse-MLA indexer keeps a k-pool-compressed key cache (one fp8 key per "
    "index_kpool tokens plus a tail of raw keys) on every MLA layer, beside hc_mult hyper-connection streams: "
    "quotacalc has no layer kind for either"
)
_MINIMAX_M3 = (
    "vLLM takes MiniMax-M3's sparse layers from sparse_attention_config and its shared expert from "
    "n_shared_experts, where transformers takes layer_types and shared_intermediate_size, and its block-sparse "
    "attention keeps a lightning-indexer key cache (one key per token, in indexer_kv_dtype) beside the KV cache "
    "and reads only index_topk_blocks blocks: quotacalc has no layer kind for it"
)
_QWEN4_EXP = (
    "Qwen4-Exp's QSA attention keeps a compressed index-key cache plus a per-request circular buffer of raw keys, "
    "and its hashed n-gram per-layer embeddings and hyper-connections carry states and weights quotacalc has no "
    "layer kind for"
)

#: model_type -> why quotacalc does not price it (one line, shown to the user).
NOT_PRICED: dict[str, str] = {
    "glm5_next": _GLM5_NEXT,
    "glm5_next_text": _GLM5_NEXT,
    "minimax_m3_vl": _MINIMAX_M3,
    "minimax_m3_vl_text": _MINIMAX_M3,
    "qwen4_exp": _QWEN4_EXP,
    "qwen4_exp_text": _QWEN4_EXP,
}
