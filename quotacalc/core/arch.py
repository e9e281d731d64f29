"""Model architecture as per-layer specs, each knowing its parameters, FLOPs and cache bytes.

As in vLLM's ``kv_cache_interface``, every kind of token mixer (full attention, sliding-window
attention, MLA and its DeepSeek Sparse Attention, DeepSeek V4's compressed attention, Mamba, Gated DeltaNet and short-convolution state) carries its own cache rule, and every kind of feed-forward block
(dense MLP, mixture of experts) its own parameter rule. A model is a list of layers; figures for
the model are sums over them, so a new architecture is a new spec, not a branch.
"""

import math
from abc import ABC, abstractmethod
from collections import Counter
from enum import Enum
from functools import cached_property
from typing import TYPE_CHECKING, Annotated, Literal, NamedTuple, Union

from pydantic import BaseModel, ConfigDict, Field, NonNegativeInt, PositiveInt, model_serializer


class ParamGroup(str, Enum):
    """Where a parameter lives; quantization and expert routing act per group."""

    EMBEDDING = "embedding"
    LM_HEAD = "lm_head"
    ATTENTION = "attention"
    MLP = "mlp"
    ROUTED_EXPERTS = "routed_experts"
    #: Biases inside routed experts (gpt-oss): no quantization method converts them, so a quantized checkpoint
    #: stores them, and vLLM allocates them, in its 16-bit dtype (Mxfp4MoEMethod.create_weights' w13_bias and
    #: w2_bias are torch.bfloat16 beside uint8 weight blocks and scales, vllm/model_executor/layers/quantization/
    #: mxfp4.py); a group of their own keeps them out of the routed experts' quantized storage.
    ROUTED_EXPERT_BIAS = "routed_expert_bias"
    SHARED_EXPERTS = "shared_experts"
    ROUTER = "router"
    MAMBA = "mamba"
    NORM = "norm"
    VISION = "vision"


class _Spec(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")


def kv_heads_per_rank(kv_heads: int, tp: int) -> int:
    """KV heads one TP rank holds; when heads < TP each rank holds a replicated head, as vLLM does."""
    return max(1, kv_heads // tp)


def mean_attended_tokens(context_tokens: int, window_tokens: int | None = None) -> float:
    """Mean number of earlier tokens a prompt token attends to, over positions 1..context (causal)."""
    if window_tokens is None or context_tokens <= window_tokens:
        return (context_tokens + 1) / 2
    inside = window_tokens * (window_tokens + 1) / 2
    return (inside + (context_tokens - window_tokens) * window_tokens) / context_tokens


# --------------------------------------------------------------------------- token mixers


class ContextTerm(NamedTuple):
    """One part of what a token's attention costs per token of context on one GPU: a decode token reads
    ``read_bytes_per_token`` and computes ``flops_per_token`` for each of min(context, ``bound_tokens``) earlier
    tokens (every earlier token when ``bound_tokens`` is None); a prompt token computes
    ``prompt_flops_per_token`` for each (None: the same as a decode token; MLA prefills in another form than it
    decodes). The replica model sums a layer's terms."""

    bound_tokens: int | None
    read_bytes_per_token: float
    flops_per_token: float
    prompt_flops_per_token: float | None = None

    @property
    def prefill_flops_per_token(self) -> float:
        return self.flops_per_token if self.prompt_flops_per_token is None else self.prompt_flops_per_token

    def times(self, layers: int) -> "ContextTerm":
        """The same term for ``layers`` layers alike."""
        if layers == 1:
            return self
        prompt = None if self.prompt_flops_per_token is None else layers * self.prompt_flops_per_token
        return ContextTerm(self.bound_tokens, layers * self.read_bytes_per_token, layers * self.flops_per_token, prompt)


class TokenMixer(_Spec, ABC):
    """The interface every token mixer declares (as vLLM's ``KVCacheSpec`` does for its cache kinds).

    Callers (``memory``, ``price``, ``replica``) use only these methods; a new kind of layer is a new
    subclass, and one that forgets a method cannot be instantiated.
    """

    kind: str

    @abstractmethod
    def params(self) -> dict[ParamGroup, int]:
        """Parameters of this mixer, by group."""

    @abstractmethod
    def cache_elements_per_token(self) -> int:
        """Values cached per token of context, whole replica (0 for state-space layers)."""

    @abstractmethod
    def cache_elements_per_token_per_gpu(self, tp: int) -> int:
        """Values cached per token on one of ``tp`` GPUs."""

    def read_elements_per_token_per_gpu(self, tp: int) -> int:
        """Values one decode step reads per token of context on one of ``tp`` GPUs: by default the cache this
        layer holds."""
        return self.cache_elements_per_token_per_gpu(tp)

    def cache_bytes_per_token(self, kv_bytes_per_element: float, tp: int | None = None) -> float:
        """Bytes cached per token of context, whole replica (``tp`` None) or on one of ``tp`` GPUs, at a KV dtype of
        ``kv_bytes_per_element``: by default the values times their bytes; a kind whose engine lays its cache out
        otherwise (DeepSeek Sparse Attention) says so."""
        elements = self.cache_elements_per_token() if tp is None else self.cache_elements_per_token_per_gpu(tp)
        return elements * kv_bytes_per_element

    def context_terms(self, kv_bytes_per_element: float, tp: int) -> tuple[ContextTerm, ...]:
        """What a token's attention reads and computes per token of context on one of ``tp`` GPUs, as
        ``ContextTerm``s: by default one over the whole context for a growing cache, none for fixed state."""
        if not self.grows_with_context():
            return ()
        read = self.read_elements_per_token_per_gpu(tp) * kv_bytes_per_element
        return (ContextTerm(None, read, self.attention_flops_per_token(1)),)

    def prompt_attention_flops_per_token(self, context_tokens: int, tp: int = 1) -> float:
        """Mean attention FLOPs of a prompt token over a causal prompt of ``context_tokens``, as a replica of ``tp``
        GPUs spends them (work every rank repeats counts ``tp`` times; none by default)."""
        return self.attention_flops_per_token(self.mean_prompt_attended_tokens(context_tokens))

    def cost_rule(self) -> str | None:
        """A line for --explain where this kind's cache, reads or FLOPs depart from values x dtype over the
        attended tokens (None: they do not)."""
        return None

    def kv_dtype_problem(self, kv_dtype: str) -> str | None:
        """Why an engine cannot keep this kind's cache in ``kv_dtype`` (a catalog name), or None."""
        return None

    def served_kv_dtype(self) -> str | None:
        """The KV dtype an engine keeps this kind's cache in whatever the checkpoint's (a catalog name), or None
        where the checkpoint's dtype is the default."""
        return None

    def replicated_label(self) -> str | None:
        """What of this kind the engine keeps whole on every rank beside MLA's down-projections, for --explain."""
        return None

    def state_layout_rule(self) -> str | None:
        """For --explain: the fixed layout this kind keeps its state in whatever the state dtype, or None where the
        state is values x the state dtype (and the conv state at the checkpoint's)."""
        return None

    @abstractmethod
    def cached_tokens(self, context_tokens: int) -> int:
        """Tokens of KV this layer holds for one sequence at ``context_tokens``."""

    @abstractmethod
    def grows_with_context(self) -> bool:
        """Whether the cache keeps growing with every token (full attention, MLA)."""

    @abstractmethod
    def state_elements_per_sequence(self) -> int:
        """Fixed state one sequence holds, whatever its length (Mamba conv + SSM state)."""

    @abstractmethod
    def state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        """The same on one of ``tp`` GPUs."""

    def conv_state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        """The short-convolution part of that state on one of ``tp`` GPUs (none by default)."""
        return 0

    def state_bytes_per_sequence(
        self, state_bytes_per_element: float, tp: int | None = None, conv_bytes_per_element: float | None = None
    ) -> float:
        """Bytes of that fixed state, whole replica (``tp`` None) or on one of ``tp`` GPUs: the SSM or recurrent
        state at the state dtype and the conv state at ``conv_bytes_per_element`` (vLLM's mamba_ssm_cache_dtype
        and mamba_cache_dtype; the state dtype for both if None), unless the kind keeps part at a fixed dtype."""
        elements = self.state_elements_per_sequence() if tp is None else self.state_elements_per_sequence_per_gpu(tp)
        conv = self.conv_state_elements_per_sequence_per_gpu(tp or 1)
        conv_bytes = state_bytes_per_element if conv_bytes_per_element is None else conv_bytes_per_element
        return conv * conv_bytes + (elements - conv) * state_bytes_per_element

    @abstractmethod
    def attention_flops_per_token(self, attended_tokens: float) -> float:
        """FLOPs of QK^T and AV for one query attending ``attended_tokens`` keys."""

    def replicated_params(self) -> dict[ParamGroup, int]:
        """Parameters every tensor-parallel rank holds whole instead of a 1/TP share (none by default)."""
        return {}

    @abstractmethod
    def attended_tokens(self, context_tokens: int) -> int:
        """Keys an output token attends to at ``context_tokens``."""

    @abstractmethod
    def mean_prompt_attended_tokens(self, context_tokens: int) -> float:
        """Mean keys a prompt token attends to, over a causal prompt of ``context_tokens``."""

    @abstractmethod
    def tp_problem(self, tp: int) -> str | None:
        """Why ``tp`` cannot split this layer evenly, or None."""


class _NoState:
    """Attention holds KV per token and no fixed state (a mixin for TokenMixer subclasses)."""

    def state_elements_per_sequence(self) -> int:
        return 0

    def state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        return 0


class _HeadAttention(_NoState, TokenMixer):
    """Multi-head / grouped-query attention: the shapes, parameters and per-token costs that full and
    sliding-window attention share. How many tokens it caches and attends is each sibling's rule."""

    hidden_size: PositiveInt
    num_heads: PositiveInt
    num_kv_heads: PositiveInt
    head_dim: PositiveInt
    v_head_dim: PositiveInt
    qkv_bias: bool = False
    o_bias: bool = False
    #: RMSNorm on queries and keys (Qwen3, Gemma 3): head_dim weights each.
    qk_norm: bool = False
    #: The query and key norms span the whole projection (OLMo 2/3, MiniMax-M2's ``qk_norm_type: per_layer``):
    #: heads x head_dim and KV heads x head_dim.
    qk_norm_whole: bool = False
    #: Learned per-head attention sinks (gpt-oss).
    sinks: bool = False
    #: Values read through the key projection, no v_proj (Gemma 4's ``attention_k_eq_v`` full layers). The
    #: cache still holds K and V: V is the key before its norm and rotation (vLLM loads K into the V slot).
    k_eq_v: bool = False
    #: Reads the K and V an earlier layer of its kind cached (Gemma 4's ``num_kv_shared_layers``): no K/V
    #: projections or key norm of its own, and no cache (vLLM's ``kv_sharing_target_layer_name``).
    kv_shared: bool = False

    def params(self) -> dict[ParamGroup, int]:
        q_out = self.num_heads * self.head_dim
        k_out = 0 if self.kv_shared else self.num_kv_heads * self.head_dim
        v_out = 0 if self.kv_shared or self.k_eq_v else self.num_kv_heads * self.v_head_dim
        count = self.hidden_size * (q_out + k_out + v_out) + self.num_heads * self.v_head_dim * self.hidden_size
        count += (q_out + k_out + v_out) if self.qkv_bias else 0
        count += self.hidden_size if self.o_bias else 0
        if self.qk_norm and self.qk_norm_whole:
            count += q_out + k_out
        elif self.qk_norm:
            count += self.head_dim if self.kv_shared else 2 * self.head_dim
        count += self.num_heads if self.sinks else 0
        return {ParamGroup.ATTENTION: count}

    def cache_elements_per_token(self) -> int:
        return 0 if self.kv_shared else self.num_kv_heads * (self.head_dim + self.v_head_dim)

    def cache_elements_per_token_per_gpu(self, tp: int) -> int:
        return 0 if self.kv_shared else self.read_elements_per_token_per_gpu(tp)

    def read_elements_per_token_per_gpu(self, tp: int) -> int:
        # A KV-shared layer holds no cache, but its attention reads the producing layer's, of the same shape.
        return kv_heads_per_rank(self.num_kv_heads, tp) * (self.head_dim + self.v_head_dim)

    def attention_flops_per_token(self, attended_tokens: float) -> float:
        return 2 * self.num_heads * (self.head_dim + self.v_head_dim) * attended_tokens

    def tp_problem(self, tp: int) -> str | None:
        if self.num_heads % tp:
            return f"does not divide the {self.num_heads} attention heads"
        if self.num_kv_heads >= tp and self.num_kv_heads % tp:
            return f"does not divide the {self.num_kv_heads} KV heads"
        if self.num_kv_heads < tp and tp % self.num_kv_heads:
            return f"is not a multiple of the {self.num_kv_heads} KV heads"
        return None


class _GrowingCache:
    """The cache rule of attention over the whole context: it grows with every token (a mixin)."""

    def cached_tokens(self, context_tokens: int) -> int:
        return context_tokens

    def grows_with_context(self) -> bool:
        return True

    def attended_tokens(self, context_tokens: int) -> int:
        return context_tokens

    def mean_prompt_attended_tokens(self, context_tokens: int) -> float:
        return mean_attended_tokens(context_tokens)


class FullAttention(_GrowingCache, _HeadAttention):
    """Multi-head / grouped-query attention whose KV grows with every token of context."""

    kind: Literal["full_attention"] = "full_attention"


class GatedFullAttention(FullAttention):
    """Full attention with a sigmoid gate on its output, projected with the queries (Qwen3-Next, Qwen3.5).

    q_proj is twice as wide (queries and gate); the cache and the attention FLOPs are full attention's.
    """

    kind: Literal["gated_attention"] = "gated_attention"  # type: ignore[assignment]

    def params(self) -> dict[ParamGroup, int]:
        gate = self.hidden_size * self.num_heads * self.head_dim
        gate += self.num_heads * self.head_dim if self.qkv_bias else 0
        return {ParamGroup.ATTENTION: super().params()[ParamGroup.ATTENTION] + gate}


class _BoundedAttention:
    """Attention over at most ``window_tokens`` earlier tokens: a decode step's reads and FLOPs stop growing
    there (a mixin for the sliding and chunked siblings)."""

    if TYPE_CHECKING:  # what the attention class it is mixed into gives it

        @property
        def window_tokens(self) -> int: ...

        def read_elements_per_token_per_gpu(self, tp: int) -> int: ...

        def attention_flops_per_token(self, attended_tokens: float) -> float: ...

    def context_terms(self, kv_bytes_per_element: float, tp: int) -> tuple[ContextTerm, ...]:
        read = self.read_elements_per_token_per_gpu(tp) * kv_bytes_per_element
        return (ContextTerm(self.window_tokens, read, self.attention_flops_per_token(1)),)


class SlidingWindowAttention(_BoundedAttention, _HeadAttention):
    """Attention over the last ``window_tokens`` only: its KV stops growing at the window.

    A sibling of ``FullAttention`` (both are ``_HeadAttention``), not a subclass: code that asks
    ``isinstance(m, FullAttention)`` never mistakes a window for a growing cache.
    """

    kind: Literal["sliding_attention"] = "sliding_attention"
    window_tokens: PositiveInt

    def cached_tokens(self, context_tokens: int) -> int:
        return min(context_tokens, self.window_tokens)

    def grows_with_context(self) -> bool:
        return False

    def attended_tokens(self, context_tokens: int) -> int:
        return min(context_tokens, self.window_tokens)

    def mean_prompt_attended_tokens(self, context_tokens: int) -> float:
        return mean_attended_tokens(context_tokens, self.window_tokens)


class GatedSlidingWindowAttention(SlidingWindowAttention):
    """Sliding-window attention with a sigmoid gate on its output from a projection of its own (AFMoE's
    ``gate_proj``: hidden -> heads x head_dim, no bias). The cache and attention FLOPs are the window's."""

    kind: Literal["gated_sliding_attention"] = "gated_sliding_attention"  # type: ignore[assignment]

    def params(self) -> dict[ParamGroup, int]:
        gate = self.hidden_size * self.num_heads * self.head_dim
        return {ParamGroup.ATTENTION: super().params()[ParamGroup.ATTENTION] + gate}


class ChunkedLocalAttention(_BoundedAttention, _HeadAttention):
    """Attention inside fixed chunks of ``chunk_tokens`` (Llama 4's ``attention_chunk_size``): a token
    attends only to the earlier tokens of its own chunk.

    vLLM gives these layers a ``ChunkedLocalAttentionSpec``, which frees the blocks of past chunks, so
    a sequence holds at most one chunk of KV per layer: priced as a window whose bound is the chunk
    (``window_tokens``, what the replica model's windowed layers read). The cache bound is the worst
    point of each chunk; attention is counted exactly, from the start of the token's chunk.
    """

    kind: Literal["chunked_attention"] = "chunked_attention"
    chunk_tokens: PositiveInt

    @property
    def window_tokens(self) -> int:
        """The most tokens one sequence holds in this layer: one chunk."""
        return self.chunk_tokens

    def cached_tokens(self, context_tokens: int) -> int:
        return min(context_tokens, self.chunk_tokens)

    def grows_with_context(self) -> bool:
        return False

    def attended_tokens(self, context_tokens: int) -> int:
        # The token at position n (1-based) sees positions from its chunk's start to itself.
        return (context_tokens - 1) % self.chunk_tokens + 1 if context_tokens > 0 else 0

    def mean_prompt_attended_tokens(self, context_tokens: int) -> float:
        if context_tokens <= 0:
            return 0.0
        full_chunks, rest = divmod(context_tokens, self.chunk_tokens)
        total = full_chunks * self.chunk_tokens * (self.chunk_tokens + 1) / 2 + rest * (rest + 1) / 2
        return total / context_tokens


class MLAAttention(_GrowingCache, _NoState, TokenMixer):
    """Multi-head latent attention (DeepSeek-V2/V3): one compressed latent per token per layer.

    The cache holds ``kv_lora_rank + qk_rope_head_dim`` values per token, and every TP rank holds
    the whole latent (it is not split by heads).
    """

    kind: Literal["mla"] = "mla"
    hidden_size: PositiveInt
    num_heads: PositiveInt
    q_lora_rank: PositiveInt | None
    kv_lora_rank: PositiveInt
    qk_nope_head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    v_head_dim: PositiveInt
    o_bias: bool = False

    def _latent_norm_params(self) -> int:
        """The RMSNorms on the query and KV latents (q_a_layernorm, kv_a_layernorm): norms, in the norm group,
        which quantized checkpoints keep in their 16-bit dtype (DeepSeek-V3's fp8 checkpoint stores both in bf16)."""
        return (self.q_lora_rank or 0) + self.kv_lora_rank

    def params(self) -> dict[ParamGroup, int]:
        qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        if self.q_lora_rank:
            q_count = self.hidden_size * self.q_lora_rank + self.q_lora_rank * self.num_heads * qk_head_dim
        else:
            q_count = self.hidden_size * self.num_heads * qk_head_dim
        kv_down = self.hidden_size * (self.kv_lora_rank + self.qk_rope_head_dim)
        kv_up = self.kv_lora_rank * self.num_heads * (self.qk_nope_head_dim + self.v_head_dim)
        out = self.num_heads * self.v_head_dim * self.hidden_size + (self.hidden_size if self.o_bias else 0)
        return {ParamGroup.ATTENTION: q_count + kv_down + kv_up + out, ParamGroup.NORM: self._latent_norm_params()}

    def cache_elements_per_token(self) -> int:
        return self.kv_lora_rank + self.qk_rope_head_dim

    def cache_elements_per_token_per_gpu(self, tp: int) -> int:
        return self.cache_elements_per_token()

    def replicated_params(self) -> dict[ParamGroup, int]:
        # The down-projections to the query and KV latents and their norms: ReplicatedLinear in vLLM's
        # and SGLang's deepseek_v2.py (q_a_proj, kv_a_proj_with_mqa, or their fused form), not split by heads.
        q_down = self.hidden_size * self.q_lora_rank if self.q_lora_rank else 0
        kv_down = self.hidden_size * (self.kv_lora_rank + self.qk_rope_head_dim)
        return {ParamGroup.ATTENTION: q_down + kv_down, ParamGroup.NORM: self._latent_norm_params()}

    def attention_flops_per_token(self, attended_tokens: float) -> float:
        # Queries and keys carry the rope dimensions too: QK^T runs over nope + rope per head. This is the form
        # engines prefill in (the latents up-projected to per-head keys and values).
        qk_head_dim = self.qk_nope_head_dim + self.qk_rope_head_dim
        return 2 * self.num_heads * (qk_head_dim + self.v_head_dim) * attended_tokens

    def decode_flops_per_attended_token(self) -> float:
        """FLOPs of one decode query per cached latent, as engines decode MLA: absorbed, the key up-projection
        folded into the query and the value up-projection applied after, so each head attends the latent itself,
        QK^T over kv_lora_rank + rope and AV over kv_lora_rank (vLLM's MLA decode backends, FlashMLA; SGLang's
        and TensorRT-LLM's the same): 2 x heads x (576 + 512) at DeepSeek-V3's sizes, 3.4x the expanded form."""
        return 2 * self.num_heads * (self.kv_lora_rank + self.qk_rope_head_dim + self.kv_lora_rank)

    def context_terms(self, kv_bytes_per_element: float, tp: int) -> tuple[ContextTerm, ...]:
        read = self.read_elements_per_token_per_gpu(tp) * kv_bytes_per_element
        return (ContextTerm(None, read, self.decode_flops_per_attended_token(), self.attention_flops_per_token(1)),)

    def tp_problem(self, tp: int) -> str | None:
        return f"does not divide the {self.num_heads} attention heads" if self.num_heads % tp else None


#: Elements per scale of vLLM's block-quantized fp8 caches for DeepSeek Sparse Attention: fp8_ds_mla keeps one
#: float32 scale per 128 latent values, the indexer key cache one per 128 key values (``quant_block_size``).
DSA_QUANT_BLOCK = 128
DSA_SCALE_BYTES = 4


class SparseMLAAttention(MLAAttention):
    """DeepSeek Sparse Attention (DeepSeek-V3.2, GLM-5): MLA whose queries attend only the ``index_topk`` earlier
    tokens a lightning indexer picks.

    The indexer (transformers 5.24 ``models/deepseek_v32/modular_deepseek_v32.py``, ``DeepseekV32Indexer``) has
    ``wq_b`` (q_lora_rank -> index_n_heads x index_head_dim), ``wk`` (hidden -> index_head_dim), ``k_norm`` (a
    LayerNorm: weight and bias) and ``weights_proj`` (hidden -> index_n_heads), none biased; vLLM keeps all of
    them whole on every TP rank (``Indexer`` in vllm/model_executor/models/deepseek_v2.py @ 002d6073: "no tensor
    parallel, just replicated"). A layer that reuses an earlier layer's top-k (GLM-5's ``indexer_types``
    "shared", vLLM's ``skip_topk``) has no indexer, no indexer cache and no scoring of its own (``has_indexer``).

    Cache per token per layer, as vLLM allocates it (both whole on every rank; vLLM gives them one KV cache group,
    ``UniformTypeKVCacheSpecs``: one block table, each layer's page its own size, vllm/v1/kv_cache_interface.py @
    001cabc1):

    * the latent: ``kv_lora_rank + qk_rope_head_dim`` values x the KV dtype (bf16: 576 x 2 = 1,152 B), or, at a
      one-byte (fp8) KV dtype, vLLM's ``fp8_ds_mla`` layout: kv_lora_rank fp8 values, one float32 scale per 128
      of them and the rope part in bf16 (512 + 16 + 128 = 656 B; vllm/v1/attention/backends/mla/flashmla_sparse.py
      @ 008a0c31, ``MLAAttentionSpec.real_page_size_bytes``). vLLM turns a --kv-cache-dtype fp8 into fp8_ds_mla
      for these models (vllm/model_executor/models/config.py @ 1936cf38, ``DeepseekV32ForCausalLM``); 'auto'
      stays bf16 there (vLLM 0.11's @ 0144dd5b made 'auto' fp8_ds_mla too);
    * the indexer's keys, in fp8 whatever the KV dtype: index_head_dim bytes plus a float32 scale per 128
      (128 + 4 = 132 B; ``DeepseekV32IndexerCache``, uint8, ``head_dim + head_dim // quant_block_size * 4``).

    Decode reads, per sequence per step on one GPU: min(context, index_topk) x the latent bytes (the selected
    keys) + context x the indexer key bytes (the indexer scores every earlier token).

    FLOPs per query: MLA's per attended key (2 x heads x (qk_head_dim + v_head_dim) for a prompt token, the absorbed
    2 x heads x (kv_lora_rank + rope + kv_lora_rank) for a decode step, as ``MLAAttention``) over
    min(attended, index_topk) keys, plus the indexer's scoring, 2 x index_n_heads x index_head_dim per earlier
    token (its per-head weighting, 2 x index_n_heads more, is left out as softmax is for attention). A prompt token
    at position p attends min(p, index_topk) keys and scores p. vLLM runs the whole indexer on every rank (its
    heads are not split), so on a replica of TP GPUs the scoring costs TP times its FLOPs in GPU time: the replica
    model and the prompt token's units count it so (``context_terms``, ``prompt_attention_flops_per_token``); at
    long prompts it is most of a rank's work. The replicated projections' FLOPs (per token, not per earlier token)
    count once per rank through ``replicated_params`` (``replica.engine_compute``).
    """

    kind: Literal["sparse_mla"] = "sparse_mla"  # type: ignore[assignment]
    #: The indexer's query projection reads the query latent: sparse MLA always has one.
    q_lora_rank: PositiveInt
    index_topk: PositiveInt
    index_n_heads: PositiveInt
    index_head_dim: PositiveInt
    #: False where the layer reuses an earlier layer's top-k (GLM-5's "shared" indexer_types).
    has_indexer: bool = True

    def _indexer_params(self) -> int:
        if not self.has_indexer:
            return 0
        heads, dim = self.index_n_heads, self.index_head_dim
        return self.q_lora_rank * heads * dim + self.hidden_size * dim + 2 * dim + self.hidden_size * heads

    def params(self) -> dict[ParamGroup, int]:
        return _add(super().params(), {ParamGroup.ATTENTION: self._indexer_params()})

    def replicated_params(self) -> dict[ParamGroup, int]:
        return _add(super().replicated_params(), {ParamGroup.ATTENTION: self._indexer_params()})

    def cache_elements_per_token(self) -> int:
        # Values, whatever their bytes: the latent and the indexer's key (cache_bytes_per_token has the layout).
        return self.kv_lora_rank + self.qk_rope_head_dim + (self.index_head_dim if self.has_indexer else 0)

    def latent_bytes_per_token(self, kv_bytes_per_element: float) -> float:
        """Bytes of one token's latent: values x the KV dtype, or vLLM's fp8_ds_mla layout at one byte."""
        if kv_bytes_per_element == 1:
            scales = self.kv_lora_rank // DSA_QUANT_BLOCK * DSA_SCALE_BYTES
            return self.kv_lora_rank + scales + self.qk_rope_head_dim * 2
        return (self.kv_lora_rank + self.qk_rope_head_dim) * kv_bytes_per_element

    def indexer_bytes_per_token(self) -> int:
        """Bytes of one token's indexer key: fp8 values and a float32 scale per 128, whatever the KV dtype."""
        if not self.has_indexer:
            return 0
        return self.index_head_dim + self.index_head_dim // DSA_QUANT_BLOCK * DSA_SCALE_BYTES

    def cache_bytes_per_token(self, kv_bytes_per_element: float, tp: int | None = None) -> float:
        # Both caches are whole on every rank: the same bytes per GPU as for the replica.
        return self.latent_bytes_per_token(kv_bytes_per_element) + self.indexer_bytes_per_token()

    def scoring_flops_per_token(self) -> float:
        """The indexer's FLOPs per earlier token it scores (0 on a layer that shares another's top-k)."""
        return 2 * self.index_n_heads * self.index_head_dim if self.has_indexer else 0.0

    def attention_flops_per_token(self, attended_tokens: float) -> float:
        selected = min(attended_tokens, self.index_topk)
        return super().attention_flops_per_token(selected) + self.scoring_flops_per_token() * attended_tokens

    def prompt_attention_flops_per_token(self, context_tokens: int, tp: int = 1) -> float:
        # Exact over positions 1..context: the mean of min(p, index_topk), not the min of the mean. Every rank
        # scores every earlier token (the indexer is replicated): tp times the scoring.
        selected = mean_attended_tokens(context_tokens, self.index_topk)
        scored = mean_attended_tokens(context_tokens)
        return super().attention_flops_per_token(selected) + tp * self.scoring_flops_per_token() * scored

    def context_terms(self, kv_bytes_per_element: float, tp: int) -> tuple[ContextTerm, ...]:
        selected = ContextTerm(
            self.index_topk,
            self.latent_bytes_per_token(kv_bytes_per_element),
            self.decode_flops_per_attended_token(),
            super().attention_flops_per_token(1),
        )
        if not self.has_indexer:
            return (selected,)
        # Replica FLOPs: every one of the tp ranks scores every earlier token.
        return (ContextTerm(None, self.indexer_bytes_per_token(), tp * self.scoring_flops_per_token()), selected)

    def kv_dtype_problem(self, kv_dtype: str) -> str | None:
        # FlashMLASparseBackend.supported_kv_cache_dtypes (flashmla_sparse.py @ 008a0c31): auto/bfloat16, fp8 (as
        # fp8_ds_mla) and nvfp4_ds_mla, SM100 only, whose 352 B layout is not priced here.
        if kv_dtype in ("bf16", "fp8"):
            return None
        return f"vLLM's sparse MLA kernels keep this cache in bf16 or fp8 (fp8_ds_mla), not {kv_dtype}"

    def replicated_label(self) -> str | None:
        return "sparse attention's indexers" if self.has_indexer else None

    def cost_rule(self) -> str:
        if not self.has_indexer:
            return "layers reusing an earlier layer's top-k keep no indexer key and score nothing"
        return (
            f"DeepSeek Sparse Attention: a query attends, and a decode step reads the latent of, at most index_topk "
            f"{self.index_topk:,} tokens (an fp8 KV dtype keeps the latent in vLLM's fp8_ds_mla layout, "
            f"{self.latent_bytes_per_token(1):.0f} B a token); its indexer caches and reads a "
            f"{self.indexer_bytes_per_token()} B fp8 key of every token and scores each at 2 x {self.index_n_heads} "
            f"x {self.index_head_dim} FLOPs on every TP rank (vLLM replicates the indexer: TP x those FLOPs a replica)"
        )


#: vLLM's fp8_ds_mla entry for DeepSeek V4 (``head_bytes`` in vllm/model_executor/layers/deepseek_v4_attention.py @
#: 0a291a2e): the nope part in fp8, one UE8M0 scale byte per 64 of it, the rope part in bf16 and one pad byte.
DSV4_SCALE_BLOCK = 64
#: The indexer key vLLM's DeepSeek V4 compressor writes: index_head_dim fp8 values and one float32 scale
#: (``_scale_dim = 4``, vllm/model_executor/layers/deepseek_compressor.py @ 0de10a27; ``DeepseekV4IndexerCache``'s
#: "same layout as V3.2: 128 fp8 + 4 fp32 scale = 132", deepseek_v4_attention.py @ 0a291a2e).
DSV4_INDEXER_SCALE_BYTES = 4
#: The compressor's running state is float32 (``CompressorStateCache``, same file).
DSV4_STATE_BYTES = 4
#: Query heads FlashMLA's sparse kernels take per rank; vLLM pads a rank's heads up to the first that fits.
FLASHMLA_HEAD_TILES = (64, 128)


def _sum_floor(context_tokens: int, ratio: int, cap: int | None = None) -> int:
    """Σ_{p=1..context} min(floor(p / ratio), cap): the compressed entries each prompt position sees."""
    if context_tokens <= 0:
        return 0
    limit = context_tokens if cap is None else min(context_tokens, cap * ratio - 1)
    whole, rest = divmod(limit, ratio)
    total = ratio * whole * (whole - 1) // 2 + whole * (rest + 1)
    return total + (cap * (context_tokens - limit) if cap is not None else 0)


class CompressedSparseAttention(_GrowingCache, _NoState, TokenMixer):
    """DeepSeek V4's attention (transformers 5.24 ``models/deepseek_v4``, vLLM ``DeepseekV4Attention``): shared-KV
    multi-query attention over one 512-wide head per token (K = V), every layer attending a sliding window of the
    last ``window_tokens`` tokens, and a compressed long-range part: ``compress_ratio`` 1 has none
    (``sliding_attention``), 4 is compressed sparse attention (CSA: one entry per 4 tokens from overlapping windows
    of 8, of which a lightning indexer picks ``index_topk``), 128 heavily compressed attention (HCA: one entry per
    128 tokens, all attended).

    Parameters (transformers' ``DeepseekV4Attention``): q_a_proj (hidden -> q_lora) and its norm, q_b_proj (q_lora ->
    heads x head_dim), kv_proj (hidden -> head_dim) and its norm, a grouped output projection o_a_proj (heads x
    head_dim / o_groups -> o_lora per group) and o_b_proj (o_groups x o_lora -> hidden), a sink per head; a CSA
    compressor kv_proj and gate_proj (hidden -> 2 x head_dim), position_bias (4 x 2 x head_dim), kv_norm, and its
    indexer (the same compressor at index_head_dim, q_b_proj q_lora -> index heads x index_head_dim, weights_proj
    hidden -> index heads); an HCA compressor at 1 x head_dim with a 128-row position_bias. vLLM keeps q_a/kv_proj,
    the compressors and the indexer whole on every TP rank (``disable_tp``; the indexer's wq_b and weights_proj are
    ReplicatedLinear, "no tensor parallel, just replicated", deepseek_v4_attention.py @ 0a291a2e) and splits the
    heads (wq_b, wo_a by groups, wo_b, the sinks). vLLM's indexer also builds a ``k_norm`` LayerNorm (256 values)
    the checkpoint and transformers do not have: not counted.

    Cache per layer, as vLLM allocates it (fp8 only: ``DeepseekV4MLAAttention`` asserts an fp8 KV dtype and turns it
    into fp8_ds_mla), every part whole on every rank:

    * the window: ``window_tokens`` entries of (head_dim − rope) fp8 + (head_dim − rope) / 64 scale bytes + 1 pad
      + rope x 2 B (448 + 7 + 1 + 128 = 584 B; ``DeepseekV4SWACache``, SlidingWindowMLASpec, sparse_swa.py @
      03dc5649), a fixed amount per sequence once the context passes the window;
    * the compressed entries, 584 B each, one per ``compress_ratio`` tokens (MLAAttentionSpec with compress_ratio);
    * CSA's indexer keys: index_head_dim fp8 + a float32 scale (128 + 4 = 132 B) per compressed entry;
    * the compressor state, float32, a sliding window of (1 + overlap) x ratio tokens of 2 x (1 + overlap) x width
      values (kv and score; ``CompressorStateCache``): CSA 8 x 2,048 x 4 B = 64 KiB plus its indexer's 8 x 512 x 4 B
      = 16 KiB, HCA 128 x 1,024 x 4 B = 512 KiB per sequence.

    Priced as growth per token (compressed entries and indexer keys / ratio) plus a fixed state per sequence (the
    window and the compressor state; below the window's length that counts the whole window, up to 74,752 B a layer
    more than a short sequence holds). A decode step reads the selected (CSA) or all (HCA) compressed entries, every
    indexer key, and, as the replica model reads any fixed state, the whole state: the window, and the compressor
    state though a step touches only the slots of its open window (an over-read of up to 12 MiB a sequence on
    V4-Flash, most of it HCA's). Not counted: vLLM's rounding of each page up to a multiple of 576 B and its
    page-size unification across its cache groups (the per-group block layout is not modelled), and tokens not yet
    closed into an entry (under one ratio).

    FLOPs per query: 2 x heads x (head_dim + head_dim) per attended entry (QK^T over 512, AV over 512) for
    min(context, window) window entries plus the compressed entries it attends (HCA: all floor(context / 128); CSA:
    min(floor(context / 4), index_topk)); CSA's indexer scores every compressed entry at 2 x index heads x
    index_head_dim, on every TP rank (replicated, as ``SparseMLAAttention``). vLLM pads each rank's query heads to
    FlashMLA's 64 or 128 (``padded_heads``; ``F.pad(q, ...)`` before the sparse kernel, deepseek_v4_attention.py @
    0a291a2e), and the kernel computes the padded heads too: a replica of TP GPUs spends TP x padded heads' worth of
    the per-entry FLOPs (V4-Flash at TP 8: 8 heads a rank padded to 64, 8 times the model's), which the replica model
    and a prompt token's units count; ``attention_flops_per_token`` stays the model's own FLOPs.
    """

    kind: Literal["deepseek_v4_attention"] = "deepseek_v4_attention"
    hidden_size: PositiveInt
    num_heads: PositiveInt
    head_dim: PositiveInt
    qk_rope_head_dim: PositiveInt
    q_lora_rank: PositiveInt
    o_groups: PositiveInt
    o_lora_rank: PositiveInt
    window_tokens: PositiveInt
    #: 1: sliding window only; 4: CSA (with the indexer); 128: HCA.
    compress_ratio: PositiveInt = 1
    #: CSA: overlapping compressor windows and a lightning indexer.
    has_indexer: bool = False
    index_topk: NonNegativeInt = 0
    index_n_heads: NonNegativeInt = 0
    index_head_dim: NonNegativeInt = 0

    @property
    def compressed(self) -> bool:
        return self.compress_ratio > 1

    def _compressor_params(self, width: int) -> int:
        # kv_proj and gate_proj (hidden -> coff x width), position_bias (ratio x coff x width), kv_norm (width).
        coff = 2 if self.has_indexer else 1
        return 2 * self.hidden_size * coff * width + self.compress_ratio * coff * width + width

    def _replicated(self) -> int:
        q_down = self.hidden_size * self.q_lora_rank + self.q_lora_rank
        kv = self.hidden_size * self.head_dim + self.head_dim
        extra = self._compressor_params(self.head_dim) if self.compressed else 0
        if self.has_indexer:
            heads, dim = self.index_n_heads, self.index_head_dim
            extra += self._compressor_params(dim) + self.q_lora_rank * heads * dim + self.hidden_size * heads
        return q_down + kv + extra

    def params(self) -> dict[ParamGroup, int]:
        width = self.num_heads * self.head_dim
        split = (
            self.q_lora_rank * width + self.o_lora_rank * width + self.o_groups * self.o_lora_rank * self.hidden_size
        )
        return {ParamGroup.ATTENTION: self._replicated() + split + self.num_heads}

    def replicated_params(self) -> dict[ParamGroup, int]:
        return {ParamGroup.ATTENTION: self._replicated()}

    def entry_bytes(self) -> int:
        """Bytes of one cached entry (window or compressed) in vLLM's fp8_ds_mla layout for V4."""
        nope = self.head_dim - self.qk_rope_head_dim
        return nope + nope // DSV4_SCALE_BLOCK + 1 + 2 * self.qk_rope_head_dim

    def indexer_key_bytes(self) -> int:
        """Bytes of one compressed entry's indexer key (CSA), 0 without an indexer."""
        return self.index_head_dim + DSV4_INDEXER_SCALE_BYTES if self.has_indexer else 0

    def cache_elements_per_token(self) -> int:
        # Values that grow with the context, per compressed entry (the window and state are fixed per sequence).
        return (self.head_dim + (self.index_head_dim if self.has_indexer else 0)) if self.compressed else 0

    def cache_elements_per_token_per_gpu(self, tp: int) -> int:
        return self.cache_elements_per_token()

    def cache_bytes_per_token(self, kv_bytes_per_element: float, tp: int | None = None) -> float:
        if not self.compressed:
            return 0.0
        return (self.entry_bytes() + self.indexer_key_bytes()) / self.compress_ratio

    def window_bytes(self) -> int:
        """The sliding window's cache per sequence once the context passes it."""
        return self.window_tokens * self.entry_bytes()

    def _state_values(self) -> int:
        if not self.compressed:
            return 0
        coff = 2 if self.has_indexer else 1
        values = coff * self.compress_ratio * 2 * coff * self.head_dim
        if self.has_indexer:
            values += coff * self.compress_ratio * 2 * coff * self.index_head_dim
        return values

    def compressor_state_bytes(self) -> int:
        """The compressor's float32 state per sequence (and its indexer's, for CSA)."""
        return self._state_values() * DSV4_STATE_BYTES

    def state_elements_per_sequence(self) -> int:
        return self.window_tokens * self.head_dim + self._state_values()

    def state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        return self.state_elements_per_sequence()

    def state_bytes_per_sequence(
        self, state_bytes_per_element: float, tp: int | None = None, conv_bytes_per_element: float | None = None
    ) -> float:
        # Fixed layouts whatever the state dtype: the fp8_ds_mla window and the float32 compressor state.
        return self.window_bytes() + self.compressor_state_bytes()

    # Every V4 layer is priced as a growing cache (_GrowingCache: 0 B a token for a window-only layer) plus fixed
    # state: its window is in the state, never a sliding layer's KV as well.

    def _entry_flops(self) -> float:
        # QK^T over head_dim and AV over head_dim (K = V), per attended entry, every head.
        return 2 * self.num_heads * (self.head_dim + self.head_dim)

    def padded_heads_per_rank(self, tp: int) -> int:
        """Query heads FlashMLA computes on one of ``tp`` ranks: the rank's heads padded to 64 or 128."""
        local = self.num_heads // tp
        return next((tile for tile in FLASHMLA_HEAD_TILES if local <= tile), local)

    def _replica_entry_flops(self, tp: int) -> float:
        # What a replica of tp GPUs spends per attended entry: every rank's padded heads.
        return 2 * tp * self.padded_heads_per_rank(tp) * (self.head_dim + self.head_dim)

    def scoring_flops_per_entry(self) -> float:
        """The indexer's FLOPs per compressed entry it scores (CSA), 0 without an indexer."""
        return 2 * self.index_n_heads * self.index_head_dim if self.has_indexer else 0.0

    def _attended_entries(self, context_tokens: float) -> float:
        window = min(context_tokens, self.window_tokens)
        if not self.compressed:
            return window
        entries = context_tokens // self.compress_ratio
        return window + (min(entries, self.index_topk) if self.has_indexer else entries)

    def attention_flops_per_token(self, attended_tokens: float) -> float:
        scored = attended_tokens // self.compress_ratio if self.has_indexer else 0
        return self._entry_flops() * self._attended_entries(attended_tokens) + self.scoring_flops_per_entry() * scored

    def prompt_attention_flops_per_token(self, context_tokens: int, tp: int = 1) -> float:
        # Exact over positions 1..context: the mean of each position's window and compressed entries. Every rank
        # scores every compressed entry (the indexer is replicated): tp times the scoring; and attends with its
        # heads padded to FlashMLA's tile.
        if context_tokens <= 0:
            return 0.0
        window = mean_attended_tokens(context_tokens, self.window_tokens)
        attended = scored = 0.0
        if self.compressed:
            cap = self.index_topk if self.has_indexer else None
            attended = _sum_floor(context_tokens, self.compress_ratio, cap) / context_tokens
            scored = _sum_floor(context_tokens, self.compress_ratio) / context_tokens if self.has_indexer else 0.0
        return self._replica_entry_flops(tp) * (window + attended) + tp * self.scoring_flops_per_entry() * scored

    def context_terms(self, kv_bytes_per_element: float, tp: int) -> tuple[ContextTerm, ...]:
        entry, flops = self.entry_bytes(), self._replica_entry_flops(tp)
        # The window's bytes are in the fixed state, which the replica model reads whole every step: its term
        # carries the FLOPs only, so the window is not read twice.
        terms = [ContextTerm(self.window_tokens, 0.0, flops)]
        if not self.compressed:
            return tuple(terms)
        ratio = self.compress_ratio
        if not self.has_indexer:
            return (*terms, ContextTerm(None, entry / ratio, flops / ratio))
        # The selected entries cover at most index_topk x ratio tokens; the indexer reads and scores every entry,
        # on every one of the tp ranks.
        selected = ContextTerm(self.index_topk * ratio, entry / ratio, flops / ratio)
        scoring = ContextTerm(None, self.indexer_key_bytes() / ratio, tp * self.scoring_flops_per_entry() / ratio)
        return (*terms, scoring, selected)

    def kv_dtype_problem(self, kv_dtype: str) -> str | None:
        if kv_dtype == "fp8":
            return None
        return f"vLLM serves DeepSeek V4 with an fp8 KV cache only (fp8_ds_mla), not {kv_dtype}"

    def served_kv_dtype(self) -> str | None:
        # The only dtype vLLM keeps V4's cache in: the default, so that the model prices without --kv-dtype.
        return "fp8"

    def state_layout_rule(self) -> str | None:
        return "each layer's window in fp8_ds_mla entries and its compressor state in float32 (DeepSeek V4, whatever the state dtype)"

    def replicated_label(self) -> str | None:
        return "DeepSeek V4's compressors and indexers"

    def cost_rule(self) -> str:
        return (
            f"DeepSeek V4 attention: every layer caches a {self.window_tokens}-token window of {self.entry_bytes()} B "
            f"fp8_ds_mla entries and its compressor's float32 state (fixed per sequence); a CSA layer grows by a "
            f"{self.entry_bytes()} B entry and a {self.index_head_dim + DSV4_INDEXER_SCALE_BYTES} B indexer key per 4 "
            f"tokens, an HCA layer by one entry per 128; a query attends the window, index_topk {self.index_topk:,} "
            f"CSA entries or every HCA entry, and the indexer scores every CSA entry on every TP rank; each rank's "
            f"query heads are padded to FlashMLA's 64 or 128 and computed so (vLLM's 576 B page rounding is not "
            f"counted)"
        )

    def tp_problem(self, tp: int) -> str | None:
        if self.num_heads % tp:
            return f"does not divide the {self.num_heads} attention heads"
        if self.o_groups % tp:
            return f"does not divide the {self.o_groups} output-projection groups"
        if self.num_heads // tp > FLASHMLA_HEAD_TILES[-1]:
            return f"leaves {self.num_heads // tp} heads a rank, more than vLLM's FlashMLA kernels take (128)"
        return None


class _StateSpace(TokenMixer):
    """Shared behaviour of state-space mixers: a fixed state per sequence, no per-token KV."""

    def cache_elements_per_token(self) -> int:
        return 0

    def cache_elements_per_token_per_gpu(self, tp: int) -> int:
        return 0

    def cached_tokens(self, context_tokens: int) -> int:
        return 0

    def grows_with_context(self) -> bool:
        return False

    def attention_flops_per_token(self, attended_tokens: float) -> float:
        return 0.0

    def attended_tokens(self, context_tokens: int) -> int:
        return 0

    def mean_prompt_attended_tokens(self, context_tokens: int) -> float:
        return 0.0

    def state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        return math.ceil(self.state_elements_per_sequence() / tp)


class Mamba1Mixer(_StateSpace):
    """Mamba (selective SSM, as in Jamba): conv state and SSM state per sequence."""

    kind: Literal["mamba1"] = "mamba1"
    hidden_size: PositiveInt
    d_inner: PositiveInt
    d_state: PositiveInt
    d_conv: PositiveInt
    dt_rank: PositiveInt
    conv_bias: bool = True
    proj_bias: bool = False
    #: RMSNorms on dt, B and C (Jamba).
    inner_norms: bool = False

    def params(self) -> dict[ParamGroup, int]:
        count = self.hidden_size * 2 * self.d_inner + (2 * self.d_inner if self.proj_bias else 0)
        count += self.d_inner * self.d_conv + (self.d_inner if self.conv_bias else 0)
        count += self.d_inner * (self.dt_rank + 2 * self.d_state)
        count += self.dt_rank * self.d_inner + self.d_inner
        count += self.d_inner * self.d_state + self.d_inner
        count += self.d_inner * self.hidden_size + (self.hidden_size if self.proj_bias else 0)
        count += (self.dt_rank + 2 * self.d_state) if self.inner_norms else 0
        return {ParamGroup.MAMBA: count}

    def state_elements_per_sequence(self) -> int:
        # vLLM keeps d_conv - 1 past inputs per channel, and a d_state vector per channel.
        return (self.d_conv - 1) * self.d_inner + self.d_inner * self.d_state

    def conv_state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        return (self.d_conv - 1) * math.ceil(self.d_inner / tp)

    def tp_problem(self, tp: int) -> str | None:
        return f"does not divide the Mamba inner size {self.d_inner}" if self.d_inner % tp else None


class Mamba2Mixer(_StateSpace):
    """Mamba-2 (Nemotron-H, Bamba, Falcon-H1, Granite 4): multi-head SSM state per sequence."""

    kind: Literal["mamba2"] = "mamba2"
    hidden_size: PositiveInt
    num_heads: PositiveInt
    head_dim: PositiveInt
    n_groups: PositiveInt
    d_state: PositiveInt
    d_conv: PositiveInt
    conv_bias: bool = True
    proj_bias: bool = False
    #: Bias on out_proj when it differs from in_proj's (Falcon-H1's ``projectors_bias``); None follows ``proj_bias``.
    out_proj_bias: bool | None = None
    #: Gated RMSNorm before out_proj (Falcon-H1 has it only with ``mamba_rms_norm``).
    gated_norm: bool = True

    @property
    def d_inner(self) -> int:
        return self.num_heads * self.head_dim

    @property
    def conv_dim(self) -> int:
        return self.d_inner + 2 * self.n_groups * self.d_state

    def params(self) -> dict[ParamGroup, int]:
        in_proj_out = 2 * self.d_inner + 2 * self.n_groups * self.d_state + self.num_heads
        count = self.hidden_size * in_proj_out + (in_proj_out if self.proj_bias else 0)
        count += self.conv_dim * self.d_conv + (self.conv_dim if self.conv_bias else 0)
        count += 3 * self.num_heads  # dt_bias, A_log, D
        count += self.d_inner if self.gated_norm else 0
        out_bias = self.proj_bias if self.out_proj_bias is None else self.out_proj_bias
        count += self.d_inner * self.hidden_size + (self.hidden_size if out_bias else 0)
        return {ParamGroup.MAMBA: count}

    def state_elements_per_sequence(self) -> int:
        return (self.d_conv - 1) * self.conv_dim + self.num_heads * self.head_dim * self.d_state

    def state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        # Heads split over TP; B and C groups too, but below one group per rank each rank keeps a
        # replicated group (as vLLM does), like KV heads.
        return self.conv_state_elements_per_sequence_per_gpu(tp) + (self.num_heads // tp) * self.head_dim * self.d_state

    def conv_state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        groups_per_rank = max(1, self.n_groups // tp)
        return (self.d_conv - 1) * (self.d_inner // tp + 2 * groups_per_rank * self.d_state)

    def tp_problem(self, tp: int) -> str | None:
        return f"does not divide the {self.num_heads} Mamba heads" if self.num_heads % tp else None


class GatedDeltaNetMixer(_StateSpace):
    """Gated DeltaNet linear attention (Qwen3-Next, Qwen3.5): a fixed matrix state per value head.

    Per sequence vLLM keeps, as ``MambaStateShapeCalculator.gated_delta_net_state_shape`` sizes it,
    a short-conv state of ``d_conv - 1`` past inputs over the q, k and v channels
    (``2 * num_k_heads * head_k_dim + num_v_heads * head_v_dim``) and a recurrent state of
    ``num_v_heads x head_v_dim x head_k_dim``; both split over TP by heads, nothing grows with context.
    Its parameters sit in the attention group: checkpoints name the module ``linear_attn``, and
    quantization configs name it so. As for Mamba, the state update's own FLOPs (a few per state
    value per token, independent of context) are not counted; the projections are, as parameters.
    """

    kind: Literal["gated_deltanet"] = "gated_deltanet"
    hidden_size: PositiveInt
    num_k_heads: PositiveInt
    num_v_heads: PositiveInt
    head_k_dim: PositiveInt
    head_v_dim: PositiveInt
    d_conv: PositiveInt

    @property
    def key_dim(self) -> int:
        return self.num_k_heads * self.head_k_dim

    @property
    def value_dim(self) -> int:
        return self.num_v_heads * self.head_v_dim

    @property
    def conv_dim(self) -> int:
        return 2 * self.key_dim + self.value_dim

    def params(self) -> dict[ParamGroup, int]:
        # q, k, v, the output gate z, and per value head beta and the decay a (fused or split, the same count).
        count = self.hidden_size * (2 * self.key_dim + 2 * self.value_dim + 2 * self.num_v_heads)
        count += self.conv_dim * self.d_conv  # depthwise short conv, no bias
        count += 2 * self.num_v_heads  # dt_bias, A_log
        count += self.head_v_dim  # gated RMSNorm, shared by the value heads
        count += self.value_dim * self.hidden_size
        return {ParamGroup.ATTENTION: count}

    def state_elements_per_sequence(self) -> int:
        return (self.d_conv - 1) * self.conv_dim + self.num_v_heads * self.head_v_dim * self.head_k_dim

    def state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        return self.conv_state_elements_per_sequence_per_gpu(tp) + (
            (self.num_v_heads // tp) * self.head_v_dim * self.head_k_dim
        )

    def conv_state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        conv_per_rank = (2 * (self.num_k_heads // tp) * self.head_k_dim) + (self.num_v_heads // tp) * self.head_v_dim
        return (self.d_conv - 1) * conv_per_rank

    def tp_problem(self, tp: int) -> str | None:
        if self.num_k_heads % tp:
            return f"does not divide the {self.num_k_heads} linear-attention key heads"
        if self.num_v_heads % tp:
            return f"does not divide the {self.num_v_heads} linear-attention value heads"
        return None


#: vLLM keeps Kimi Delta Attention's recurrent state in fp32 whatever the cache dtype (``kda_state_dtype``).
KDA_RECURRENT_STATE_BYTES = 4


class KimiDeltaAttentionMixer(_StateSpace):
    """Kimi Delta Attention (Kimi Linear): a gated delta rule with a decay per channel, not per head.

    q, k and v have ``num_heads x head_dim`` channels each, behind short convolutions; the forget gate
    and the output gate are low-rank (hidden -> head_dim -> channels). Per sequence vLLM keeps, as
    ``MambaStateShapeCalculator.kda_state_shape`` sizes it, ``d_conv - 1`` past inputs of the q, k, v
    channels at the state dtype and a ``num_heads x head_dim x head_dim`` recurrent state in fp32,
    both split over TP by heads. Parameters in the attention group, as for Gated DeltaNet.
    """

    kind: Literal["kda"] = "kda"
    hidden_size: PositiveInt
    num_heads: PositiveInt
    head_dim: PositiveInt
    d_conv: PositiveInt

    @property
    def channels(self) -> int:
        return self.num_heads * self.head_dim

    def params(self) -> dict[ParamGroup, int]:
        channels, head_dim, hidden = self.channels, self.head_dim, self.hidden_size
        count = 3 * hidden * channels  # q, k, v
        count += 3 * channels * self.d_conv  # their short convolutions, no bias
        count += hidden * head_dim + head_dim * channels + channels + self.num_heads  # forget gate, dt_bias, A_log
        count += hidden * self.num_heads  # beta
        count += hidden * head_dim + head_dim * channels  # output gate
        count += head_dim  # gated RMSNorm, shared by the heads
        count += channels * hidden
        return {ParamGroup.ATTENTION: count}

    def _conv_elements(self, tp: int) -> int:
        return (self.d_conv - 1) * 3 * (self.num_heads // tp) * self.head_dim

    def _recurrent_elements(self, tp: int) -> int:
        return (self.num_heads // tp) * self.head_dim * self.head_dim

    def state_elements_per_sequence(self) -> int:
        return self._conv_elements(1) + self._recurrent_elements(1)

    def state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        return self._conv_elements(tp) + self._recurrent_elements(tp)

    def conv_state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        return self._conv_elements(tp)

    def state_bytes_per_sequence(
        self, state_bytes_per_element: float, tp: int | None = None, conv_bytes_per_element: float | None = None
    ) -> float:
        ranks = tp or 1
        conv_bytes = state_bytes_per_element if conv_bytes_per_element is None else conv_bytes_per_element
        return self._conv_elements(ranks) * conv_bytes + self._recurrent_elements(ranks) * KDA_RECURRENT_STATE_BYTES

    def tp_problem(self, tp: int) -> str | None:
        return f"does not divide the {self.num_heads} linear-attention heads" if self.num_heads % tp else None


class ShortConvMixer(_StateSpace):
    """A gated short convolution (Liquid's LFM2 ``conv`` layers): in_proj to three hidden-wide streams B, C
    and x, a depthwise causal convolution of ``d_conv`` taps over B·x, C times its output, out_proj.

    Per sequence vLLM keeps only the convolution's last ``d_conv - 1`` inputs over the hidden channels
    (``MambaStateShapeCalculator.short_conv_state_shape``: ``(d_conv - 1, hidden / TP)``), at
    ``mamba_cache_dtype`` (the model dtype by default, ``short_conv_state_dtype``): the whole state is conv
    state, none of it an SSM state. Parameters in the Mamba group: vLLM builds the layer as a ``MambaBase``
    and quantizes its projections like other linear layers.
    """

    kind: Literal["short_conv"] = "short_conv"
    hidden_size: PositiveInt
    d_conv: PositiveInt
    #: Biases on in_proj, the convolution and out_proj (``conv_bias``).
    bias: bool = False

    def params(self) -> dict[ParamGroup, int]:
        hidden = self.hidden_size
        count = hidden * 3 * hidden + hidden * self.d_conv + hidden * hidden
        count += (3 * hidden + hidden + hidden) if self.bias else 0
        return {ParamGroup.MAMBA: count}

    def state_elements_per_sequence(self) -> int:
        return (self.d_conv - 1) * self.hidden_size

    def state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        return self.conv_state_elements_per_sequence_per_gpu(tp)

    def conv_state_elements_per_sequence_per_gpu(self, tp: int) -> int:
        return (self.d_conv - 1) * (self.hidden_size // tp)

    def tp_problem(self, tp: int) -> str | None:
        return f"does not divide the {self.hidden_size} short-convolution channels" if self.hidden_size % tp else None


Mixer = Annotated[
    Union[
        FullAttention,
        GatedFullAttention,
        SlidingWindowAttention,
        ChunkedLocalAttention,
        MLAAttention,
        SparseMLAAttention,
        CompressedSparseAttention,
        Mamba1Mixer,
        Mamba2Mixer,
        GatedDeltaNetMixer,
        KimiDeltaAttentionMixer,
        ShortConvMixer,
        GatedSlidingWindowAttention,
    ],
    Field(discriminator="kind"),
]


# --------------------------------------------------------------------------- feed-forward blocks


class FeedForwardBlock(_Spec, ABC):
    """The interface every feed-forward block declares."""

    kind: str

    @abstractmethod
    def params(self) -> dict[ParamGroup, int]:
        """Every parameter of the block, by group."""

    @abstractmethod
    def active_params(self) -> dict[ParamGroup, int]:
        """Parameters one token runs through (routed experts at top-k)."""

    @abstractmethod
    def tp_problem(self, tp: int) -> str | None:
        """Why ``tp`` cannot split this block evenly, or None."""

    def replicated_params(self) -> dict[ParamGroup, int]:
        """Parameters every tensor-parallel rank holds whole instead of a 1/TP share (none by default)."""
        return {}


class DenseMLP(FeedForwardBlock):
    """A feed-forward block every token runs through."""

    kind: Literal["dense"] = "dense"
    hidden_size: PositiveInt
    intermediate_size: PositiveInt
    #: Gated (SwiGLU/GeGLU: gate, up, down) or plain (up, down).
    gated: bool = True
    bias: bool = False

    def params(self) -> dict[ParamGroup, int]:
        matrices = 3 if self.gated else 2
        count = matrices * self.hidden_size * self.intermediate_size
        if self.bias:
            count += (matrices - 1) * self.intermediate_size + self.hidden_size
        return {ParamGroup.MLP: count}

    def active_params(self) -> dict[ParamGroup, int]:
        return self.params()

    def tp_problem(self, tp: int) -> str | None:
        return None


class LearnedActivationMLP(DenseMLP):
    """A dense MLP whose activation carries learned scalars of its own (Apertus' xIELU: ``alpha_p`` and
    ``alpha_n`` in every layer), counted with the MLP."""

    kind: Literal["dense_learned_activation"] = "dense_learned_activation"  # type: ignore[assignment]
    activation_params: PositiveInt

    def params(self) -> dict[ParamGroup, int]:
        return {ParamGroup.MLP: super().params()[ParamGroup.MLP] + self.activation_params}


class MoE(FeedForwardBlock):
    """A mixture of experts: a router picks ``top_k`` of ``num_experts`` per token; shared experts always run."""

    kind: Literal["moe"] = "moe"
    hidden_size: PositiveInt
    num_experts: PositiveInt
    top_k: PositiveInt
    expert_intermediate_size: PositiveInt
    gated: bool = True
    #: Biases inside each expert (gpt-oss).
    expert_bias: bool = False
    router_bias: bool = False
    num_shared_experts: NonNegativeInt = 0
    shared_intermediate_size: NonNegativeInt = 0
    #: Sigmoid gate on the shared expert's output (Qwen2-MoE).
    shared_expert_gate: bool = False
    #: A learned scale on the router's input (hidden) and on each expert's weight (Gemma 4's router).
    router_scales: bool = False
    #: Width the routed experts run at when it differs from the model's (Nemotron-H's
    #: ``moe_latent_size``): always-active projections go down to it and back.
    expert_width: PositiveInt | None = None
    latent_projection_bias: bool = False

    def expert_params_by_group(self) -> dict[ParamGroup, int]:
        """One routed expert's parameters by group: its matrices, and any biases (gpt-oss: gate_up_proj_bias,
        2 x intermediate, and down_proj_bias, width), which stay 16-bit where the matrices are quantized."""
        matrices = 3 if self.gated else 2
        width = self.expert_width or self.hidden_size
        by_group = {ParamGroup.ROUTED_EXPERTS: matrices * width * self.expert_intermediate_size}
        if self.expert_bias:
            by_group[ParamGroup.ROUTED_EXPERT_BIAS] = (matrices - 1) * self.expert_intermediate_size + width
        return by_group

    def expert_params(self) -> int:
        return sum(self.expert_params_by_group().values())

    def _routed_params(self, experts: int) -> dict[ParamGroup, int]:
        return {group: experts * count for group, count in self.expert_params_by_group().items()}

    def _fixed_params(self) -> dict[ParamGroup, int]:
        router = self.hidden_size * self.num_experts
        router += self.num_experts if self.router_bias else 0
        router += self.hidden_size if self.shared_expert_gate else 0
        router += (self.hidden_size + self.num_experts) if self.router_scales else 0
        # Shared experts have the same MLP shape as the routed ones (gated or plain).
        matrices = 3 if self.gated else 2
        shared = matrices * self.hidden_size * self.shared_intermediate_size * self.num_shared_experts
        fixed = {ParamGroup.ROUTER: router, ParamGroup.SHARED_EXPERTS: shared}
        if self.expert_width:
            latent = 2 * self.hidden_size * self.expert_width
            latent += (self.expert_width + self.hidden_size) if self.latent_projection_bias else 0
            fixed[ParamGroup.MLP] = latent
        return fixed

    def params(self) -> dict[ParamGroup, int]:
        return {**self._fixed_params(), **self._routed_params(self.num_experts)}

    def active_params(self) -> dict[ParamGroup, int]:
        return {**self._fixed_params(), **self._routed_params(self.top_k)}

    def replicated_params(self) -> dict[ParamGroup, int]:
        # The router (and a shared-expert gate): ReplicatedLinear in vLLM's and SGLang's MoE models.
        return {ParamGroup.ROUTER: self._fixed_params()[ParamGroup.ROUTER]}

    def tp_problem(self, tp: int) -> str | None:
        return None


class ZeroExpertMoE(MoE):
    """Mixture of experts whose router also picks among ``zero_experts`` identity experts (LongCat-Flash's
    zero-computation experts): they have a router column each but no weights, and a token routed to one
    computes nothing there. Active parameters count all ``top_k`` slots as real experts, an upper bound (how
    many slots go to identity experts depends on the trained router)."""

    kind: Literal["moe_zero_experts"] = "moe_zero_experts"  # type: ignore[assignment]
    zero_experts: PositiveInt

    def _fixed_params(self) -> dict[ParamGroup, int]:
        fixed = super()._fixed_params()
        return {**fixed, ParamGroup.ROUTER: fixed[ParamGroup.ROUTER] + self.hidden_size * self.zero_experts}


FeedForward = Annotated[Union[DenseMLP, MoE, LearnedActivationMLP, ZeroExpertMoE], Field(discriminator="kind")]


# --------------------------------------------------------------------------- model


class Layer(_Spec):
    """One decoder layer: a token mixer and a feed-forward block (either may be absent), and its norms."""

    mixer: Mixer | None
    feed_forward: FeedForward | None
    norm_params: NonNegativeInt
    #: The gate and projection that add this layer's slice of the per-layer input embedding (Gemma 3n/4);
    #: ReplicatedLinear in vLLM, so every TP rank holds them whole.
    per_layer_input_params: NonNegativeInt = 0
    #: DeepSeek V4's hyper-connection mixing weights around the mixer and the feed-forward block (float32 in vLLM,
    #: whole on every TP rank): counted with the norms.
    hyper_connection_params: NonNegativeInt = 0

    @model_serializer(mode="wrap")
    def _omit_absent_hyper_connections(self, handler):
        # Only DeepSeek V4 has them: other layers' documents (the shipped specs) stay as they were.
        document = handler(self)
        if not self.hyper_connection_params and isinstance(document, dict):
            document.pop("hyper_connection_params", None)
        return document

    def _own_params(self) -> dict[ParamGroup, int]:
        own = {ParamGroup.NORM: self.norm_params + self.hyper_connection_params}
        return {**own, ParamGroup.MLP: self.per_layer_input_params} if self.per_layer_input_params else own

    def params(self) -> dict[ParamGroup, int]:
        mixer = self.mixer.params() if self.mixer else {}
        ffn = self.feed_forward.params() if self.feed_forward else {}
        return _add(mixer, ffn, self._own_params())

    def active_params(self) -> dict[ParamGroup, int]:
        mixer = self.mixer.params() if self.mixer else {}
        ffn = self.feed_forward.active_params() if self.feed_forward else {}
        return _add(mixer, ffn, self._own_params())

    def replicated_params(self) -> dict[ParamGroup, int]:
        mixer = self.mixer.replicated_params() if self.mixer else {}
        ffn = self.feed_forward.replicated_params() if self.feed_forward else {}
        own = {ParamGroup.MLP: self.per_layer_input_params} if self.per_layer_input_params else {}
        hyper = {ParamGroup.NORM: self.hyper_connection_params} if self.hyper_connection_params else {}
        return _add(mixer, ffn, own, hyper)


def _add(*parts: dict[ParamGroup, int]) -> dict[ParamGroup, int]:
    total: dict[ParamGroup, int] = {}
    for part in parts:
        for group, count in part.items():
            total[group] = total.get(group, 0) + count
    return total


class ModelArch(_Spec):
    """A model as priced: layers plus embeddings, head, final norm and any vision tower."""

    name: str
    model_type: str
    hidden_size: PositiveInt
    vocab_size: PositiveInt
    tie_word_embeddings: bool
    layers: tuple[Layer, ...] = Field(min_length=1)
    final_norm_params: NonNegativeInt
    #: A bias on the LM head's logits (Phi-3.5-MoE's ``lm_head_bias``): one per vocabulary entry.
    lm_head_bias: bool = False
    #: Whole vision tower plus projector, for multimodal models (runs on image tokens only); audio towers too.
    vision_params: NonNegativeInt = 0
    #: Per-layer input embeddings (Gemma 3n/4 "PLE"): a second table, ``vocab_size_per_layer_input`` rows of
    #: layers x per-layer width, gathered per token like the input embedding (so in the embedding group).
    per_layer_embedding_params: NonNegativeInt = 0
    #: The model-level projection of the hidden state into every layer's per-layer input, and its norm.
    per_layer_projection_params: NonNegativeInt = 0
    #: Checkpoint dtype of unquantized weights (``torch_dtype``/``dtype`` in the config).
    checkpoint_dtype: str = "bf16"
    max_context_tokens: PositiveInt | None = None
    #: Assumptions the reader made about this config, surfaced in ``--explain``.
    notes: tuple[str, ...] = ()

    def _outer_params(self) -> dict[ParamGroup, int]:
        embedding = self.vocab_size * self.hidden_size
        outer = {
            ParamGroup.EMBEDDING: embedding + self.per_layer_embedding_params,
            ParamGroup.LM_HEAD: (0 if self.tie_word_embeddings else embedding)
            + (self.vocab_size if self.lm_head_bias else 0),
            ParamGroup.NORM: self.final_norm_params,
            ParamGroup.VISION: self.vision_params,
        }
        return _add(
            outer, {ParamGroup.MLP: self.per_layer_projection_params} if self.per_layer_projection_params else {}
        )

    # A frozen model's sums never change: compute them once (cached_property writes __dict__ directly).
    @cached_property
    def _params_by_group(self) -> dict[ParamGroup, int]:
        return _add(self._outer_params(), *(layer.params() for layer in self.layers))

    @cached_property
    def _active_params_by_group(self) -> dict[ParamGroup, int]:
        # A per-layer input embedding is gathered, never multiplied: no FLOPs, unlike a (tied) vocabulary table.
        outer = _add(
            {**self._outer_params(), ParamGroup.VISION: 0}, {ParamGroup.EMBEDDING: -self.per_layer_embedding_params}
        )
        return _add(outer, *(layer.active_params() for layer in self.layers))

    def params_by_group(self) -> dict[ParamGroup, int]:
        """Every parameter, by group (tied embeddings counted once)."""
        return dict(self._params_by_group)

    def active_params_by_group(self) -> dict[ParamGroup, int]:
        """Parameters one text token runs through: routed experts at top-k; the vision tower and any per-layer
        input embedding (gathered, not multiplied) idle."""
        return dict(self._active_params_by_group)

    @cached_property
    def _replicated_params_by_group(self) -> dict[ParamGroup, int]:
        return _add(*(layer.replicated_params() for layer in self.layers))

    # Counter keeps first-appearance order: groups come out in layer order.
    @cached_property
    def _mixer_groups(self) -> tuple[tuple[TokenMixer, int], ...]:
        return tuple(Counter(layer.mixer for layer in self.layers if layer.mixer is not None).items())

    def mixer_groups(self) -> tuple[tuple[TokenMixer, int], ...]:
        """Each distinct token mixer and how many layers have it, in order of first appearance: a sum over the
        layers' mixers is a sum over these, each times its count (most models repeat one or two kinds)."""
        return self._mixer_groups

    def replicated_params_by_group(self) -> dict[ParamGroup, int]:
        """Parameters an engine keeps whole on every tensor-parallel rank (MLA's latent down-projections,
        MoE routers): under TP each GPU holds them in full, not a 1/TP share."""
        return dict(self._replicated_params_by_group)

    def total_params(self) -> int:
        return sum(self.params_by_group().values())

    def active_params(self) -> int:
        return sum(self.active_params_by_group().values())

    @cached_property
    def _moe_layers(self) -> tuple[MoE, ...]:
        return tuple(layer.feed_forward for layer in self.layers if isinstance(layer.feed_forward, MoE))

    @cached_property
    def _feed_forward_groups(self) -> tuple[tuple[FeedForwardBlock, int], ...]:
        return tuple(Counter(layer.feed_forward for layer in self.layers if layer.feed_forward is not None).items())

    def moe_layers(self) -> list[MoE]:
        return list(self._moe_layers)

    def keeps_recurrent_state(self) -> bool:
        """Whether a layer keeps a fixed state per sequence (Mamba, DeltaNet, short convolution): what a state dtype
        changes."""
        return any(layer.mixer is not None and layer.mixer.state_elements_per_sequence() > 0 for layer in self.layers)

    def feed_forward_groups(self) -> tuple[tuple[FeedForwardBlock, int], ...]:
        """Each distinct feed-forward block and how many layers have it (as ``mixer_groups``)."""
        return self._feed_forward_groups

    def mixer_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for layer in self.layers:
            kind = layer.mixer.kind if layer.mixer else "none"
            counts[kind] = counts.get(kind, 0) + 1
        return counts
