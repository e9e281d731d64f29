"""vLLM's hybrid KV cache manager: how a GPU's KV memory becomes blocks, groups and the logged pool.

For a model whose layers keep more than one kind of cache (full attention beside sliding-window,
chunked-local or state layers), vLLM v1 (vllm/v1/core/kv_cache_utils.py, kv_cache_interface.py and
model_executor/models/config.py, commit 001cabc1be16a59a70d720ed61a13b678c060a18; docs/accuracy.md
"The KV pool of hybrid models"):

1. gives each kind of layer cache a spec (FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec,
   MambaSpec) and, with state layers, raises the attention block size until one attention page holds at
   least one sequence's state (HybridAttentionMambaModelConfig), padding the state page to match;
2. raises the block size of smaller attention pages so every page has one size
   (unify_kv_cache_spec_page_size);
3. splits the layers into groups of equal size (_get_kv_cache_groups_uniform_page_size): the smallest
   count of one kind, or the largest when it is under 1.5 times the smallest; a kind fills
   ceil(count / group size) groups, the last padded;
4. num_blocks = available // page // layers per group (get_num_blocks), every group drawing from that pool;
5. a request of L tokens takes, per group, ceil(L / block) blocks (full), ceil(min(window − 1 +
   max_num_batched_tokens, L) / block) + 1 (sliding), ceil(min(chunk + max_num_batched_tokens, L) / block)
   (chunked) or one page (state; two with prefix caching's 'align' mode): 'Maximum concurrency' is
   num_blocks over their sum (get_max_concurrency_for_kv_cache_config);
6. logs 'GPU KV cache size' as num_blocks // groups × the smallest block (vLLM 0.10 to 0.20) or, from
   0.21 (PR 40694), int(maximum concurrency × max_model_len).

A model whose layers all keep one kind of cache is one group (UniformTypeKVCacheSpecs) and is not
modelled here: its pool is bytes over bytes per token (core/memory.py).
"""

import math
from enum import Enum
from typing import NamedTuple, cast

from pydantic import BaseModel, ConfigDict

from quotacalc.core import memory
from quotacalc.core.arch import ChunkedLocalAttention, CompressedSparseAttention, MLAAttention, ModelArch
from quotacalc.errors import QuotacalcError

#: vLLM's default CacheConfig.block_size on CUDA, tokens.
VLLM_BLOCK_TOKENS = 16
#: The attention kernels' block alignment HybridAttentionMambaModelConfig raises the block size by
#: (kernel_block_alignment_size: 16 for FlashAttention and FlashInfer at most head sizes, 64 for MLA backends
#: other than CUTLASS MLA's 128; 32 for head size 256 on Blackwell under FlashInfer, not modelled).
ATTENTION_BLOCK_ALIGN_TOKENS = 16
MLA_BLOCK_ALIGN_TOKENS = 64
#: 'Add padding layers' threshold of _get_kv_cache_groups_uniform_page_size.
GROUP_SIZE_MAX_RATIO = 1.5


class CacheKind(str, Enum):
    """The kind of cache a layer keeps: what decides how many blocks a request takes in its group."""

    FULL = "full"
    SLIDING = "sliding"
    CHUNKED = "chunked"
    STATE = "state"


class TokenCountRule(str, Enum):
    """How vLLM turns blocks into its logged 'GPU KV cache size'."""

    #: num_blocks // groups × smallest block (vLLM 0.10 to 0.20).
    BLOCKS_PER_GROUP = "blocks_per_group"
    #: int(maximum concurrency × max_model_len) (vLLM 0.21 and later).
    CONCURRENCY = "concurrency"


class CacheType(BaseModel):
    """Layers that keep the same cache (vLLM's equal KVCacheSpecs), per GPU."""

    model_config = ConfigDict(frozen=True)

    kind: CacheKind
    #: The window (sliding) or chunk (chunked) bound, tokens; None for full attention and state.
    window_tokens: int | None
    #: KV bytes one token adds to one layer of this type on one GPU (0 for state).
    bytes_per_token: float
    #: State bytes one sequence holds in one layer of this type on one GPU (0 for attention).
    state_bytes: float
    layers: int
    #: Tokens per block after alignment (state: the page holds one sequence whatever its length).
    block_tokens: int = VLLM_BLOCK_TOKENS
    #: Multi-head latent attention (MLA): its kernels align blocks to 64 tokens.
    latent: bool = False


class KvGroupLayout(BaseModel):
    """How vLLM lays a hybrid model's KV cache out on one GPU."""

    model_config = ConfigDict(frozen=True)

    types: tuple[CacheType, ...]
    #: Layers in each group (one layer of every group shares a tensor).
    group_layers: int
    #: KV cache groups, padding included.
    groups: int
    #: Bytes of one block of one layer, the same for every group.
    page_bytes: float

    def groups_of(self, cache: CacheType) -> int:
        return math.ceil(cache.layers / self.group_layers)

    @property
    def min_block_tokens(self) -> int:
        return min(cache.block_tokens for cache in self.types if cache.kind is not CacheKind.STATE)

    @property
    def bytes_per_block(self) -> float:
        """Memory of one block id: one page in each layer of a group."""
        return self.page_bytes * self.group_layers

    def num_blocks(self, available_bytes: float) -> int:
        """get_num_blocks: available // page // layers per group."""
        return max(int(available_bytes // self.page_bytes // self.group_layers), 0)

    def blocks_per_request(self, max_model_len: int, max_num_batched_tokens: int, state_pages: int = 1) -> int:
        """Blocks one request of ``max_model_len`` tokens may take across every group."""
        total = 0
        for cache in self.types:
            block = cache.block_tokens
            if cache.kind is CacheKind.FULL:
                per_group = math.ceil(max_model_len / block)
            elif cache.kind is CacheKind.SLIDING:
                window = cast(int, cache.window_tokens)  # a sliding or chunked cache states its window
                per_group = math.ceil(min(window - 1 + max_num_batched_tokens, max_model_len) / block) + 1
            elif cache.kind is CacheKind.CHUNKED:
                window = cast(int, cache.window_tokens)
                per_group = math.ceil(min(window + max_num_batched_tokens, max_model_len) / block)
            else:
                per_group = state_pages
            total += self.groups_of(cache) * per_group
        return total

    def max_concurrency(
        self, num_blocks: int, max_model_len: int, max_num_batched_tokens: int, state_pages: int = 1
    ) -> float:
        """vLLM's 'Maximum concurrency for max_model_len tokens per request'."""
        return num_blocks / self.blocks_per_request(max_model_len, max_num_batched_tokens, state_pages)

    def logged_tokens(
        self,
        num_blocks: int,
        max_model_len: int,
        max_num_batched_tokens: int,
        rule: TokenCountRule = TokenCountRule.CONCURRENCY,
        state_pages: int = 1,
    ) -> int:
        """vLLM's 'GPU KV cache size: N tokens' for this layout (_report_kv_cache_config)."""
        if rule is TokenCountRule.BLOCKS_PER_GROUP:
            return num_blocks // self.groups * self.min_block_tokens
        return int(self.max_concurrency(num_blocks, max_model_len, max_num_batched_tokens, state_pages) * max_model_len)

    def blocks_for_logged_tokens(
        self, tokens: float, max_model_len: int, max_num_batched_tokens: int, state_pages: int = 1
    ) -> int:
        """The fewest blocks whose logged count (the concurrency rule) is ``tokens``: a measured pool back in blocks."""
        per_request = self.blocks_per_request(max_model_len, max_num_batched_tokens, state_pages)
        return math.ceil(tokens * per_request / max_model_len)


class _CacheKey(NamedTuple):
    """What groups layers into one cache type: layers whose keys are equal share it."""

    kind: CacheKind
    window_tokens: int | None
    bytes_per_token: float
    state_bytes: float
    latent: bool


def _cache_type_key(arch_mixer, kv_bytes: float, state_bytes: float, conv_bytes: float, tp: int) -> _CacheKey | None:
    """One layer's cache on one GPU (kind, window, bytes per token, state bytes, whether a latent), or None if it
    keeps no cache."""
    per_token = arch_mixer.cache_bytes_per_token(kv_bytes, tp)
    state = arch_mixer.state_bytes_per_sequence(state_bytes, tp, conv_bytes)
    latent = isinstance(arch_mixer, MLAAttention)
    if per_token > 0 and arch_mixer.grows_with_context():
        return _CacheKey(CacheKind.FULL, None, per_token, 0.0, latent)
    if per_token > 0:
        kind = CacheKind.CHUNKED if isinstance(arch_mixer, ChunkedLocalAttention) else CacheKind.SLIDING
        return _CacheKey(kind, arch_mixer.window_tokens, per_token, 0.0, latent)
    if state > 0:
        return _CacheKey(CacheKind.STATE, None, 0.0, state, False)
    return None


def cache_types(
    arch: ModelArch, kv_bytes_per_element: float, state_bytes_per_element: float, tp: int
) -> list[CacheType]:
    """The model's layers grouped by the cache they keep on one GPU, in layer order of first appearance."""
    counts: dict[_CacheKey, int] = {}
    conv_bytes = memory.conv_state_bytes_per_element(arch)
    for mixer, layers in arch.mixer_groups():
        key = _cache_type_key(mixer, kv_bytes_per_element, state_bytes_per_element, conv_bytes, tp)
        if key is not None:
            counts[key] = counts.get(key, 0) + layers
    return [CacheType(**key._asdict(), layers=n) for key, n in counts.items()]


def is_hybrid(types: list[CacheType]) -> bool:
    """Whether vLLM's hybrid manager lays the cache out: layers of more than one kind (or window).

    Layers of one kind with different sizes (full attention of two head sizes) are one group
    (UniformTypeKVCacheSpecs), as are a model's layers of one window."""
    return len({(cache.kind, cache.window_tokens) for cache in types}) > 1


def state_block_tokens(types: list[CacheType]) -> int:
    """The attention block size vLLM sets so that one attention page holds a state page
    (HybridAttentionMambaModelConfig, no prefix caching or its 'align' mode): the smallest multiple of the
    kernel alignment whose page of the full-attention layers is at least the largest state."""
    state = max((cache.state_bytes for cache in types if cache.kind is CacheKind.STATE), default=0.0)
    attention = [cache for cache in types if cache.kind is CacheKind.FULL] or [
        cache for cache in types if cache.kind is not CacheKind.STATE
    ]
    if state == 0 or not attention:
        return VLLM_BLOCK_TOKENS
    per_token = attention[0].bytes_per_token
    align = block_align_tokens(types)
    return max(VLLM_BLOCK_TOKENS, align * math.ceil(state / (align * per_token)))


def block_align_tokens(types: list[CacheType]) -> int:
    """The kernel block alignment of the model's attention (64 for MLA, else 16)."""
    attention = [cache for cache in types if cache.kind is CacheKind.FULL]
    return MLA_BLOCK_ALIGN_TOKENS if attention and attention[0].latent else ATTENTION_BLOCK_ALIGN_TOKENS


def kv_group_layout(types: list[CacheType]) -> KvGroupLayout:
    """vLLM's groups, block sizes and page of a hybrid model's cache types (steps 1-3 of the module doc)."""
    block = state_block_tokens(types)
    attention_pages = [block * cache.bytes_per_token for cache in types if cache.kind is not CacheKind.STATE]
    page = max(attention_pages) if attention_pages else max(cache.state_bytes for cache in types)
    sized = []
    for cache in types:
        if cache.kind is CacheKind.STATE:
            sized.append(cache.model_copy(update={"block_tokens": block}))
            continue
        ratio = page / (block * cache.bytes_per_token)
        if abs(ratio - round(ratio)) > 1e-9:
            raise QuotacalcError(
                "vLLM cannot give this model's attention layers one page size: "
                f"{fmt_bytes(page)} is not a multiple of {fmt_bytes(block * cache.bytes_per_token)}",
                field="model",
                fix="price it with a measured --kv-pool-tokens",
            )
        sized.append(cache.model_copy(update={"block_tokens": block * round(ratio)}))
    counts = [cache.layers for cache in sized]
    group_layers = max(counts) if max(counts) < min(counts) * GROUP_SIZE_MAX_RATIO else min(counts)
    groups = sum(math.ceil(n / group_layers) for n in counts)
    return KvGroupLayout(types=tuple(sized), group_layers=group_layers, groups=groups, page_bytes=page)


def fmt_bytes(value: float) -> str:
    return f"{value:,.0f} B"


def hybrid_layout(
    arch: ModelArch, kv_bytes_per_element: float, state_bytes_per_element: float, tp: int
) -> KvGroupLayout | None:
    """The layout vLLM's hybrid manager gives the model on one GPU, or None if its layers keep one kind of cache."""
    if any(isinstance(layer.mixer, CompressedSparseAttention) for layer in arch.layers):
        # DeepSeek V4's window, compressed, indexer and compressor-state groups share pages by rules of their own
        # (vLLM's DeepSeek V4 specs): not this generic layout. Its pool is priced by bytes, growth plus fixed state.
        return None
    types = cache_types(arch, kv_bytes_per_element, state_bytes_per_element, tp)
    return kv_group_layout(types) if is_hybrid(types) else None
