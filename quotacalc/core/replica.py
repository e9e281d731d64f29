"""The numeric replica model: step, prefill and first-token times from precomputed coefficients.

Everything quotacalc says about time comes from here: ``price`` explains a replica at one operating
point, and the simulator asks the same questions millions of times at every batch and context, so
the coefficients are computed once and each call is a few multiplications (bench/replica.py).

Two layers of time:

- the **roofline** (docs/method.md §1): a decode step reads the weights it touches plus every sequence's
  KV at the effective bandwidth, or computes its tokens at the effective FLOP rate, whichever is
  longer; a prefill chunk computes its tokens (parameters plus attention over what came before) or
  reads the weights once, whichever is longer;
- the **engine**: what a real engine adds to every step beside the roofline: a fixed overhead
  (scheduling, sampling, kernel launches) and, under tensor parallelism, an all-reduce after each block
  (latency plus the step's activations over the GPU interconnect). The engine figures are what a
  user measures as inter-token latency and time to first token (docs/accuracy.md).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from typing import TYPE_CHECKING, Any, cast

from quotacalc.core import kv_groups, memory
from quotacalc.core.arch import ModelArch, MoE, ParamGroup
from quotacalc.core.weights import engine_read, replicated_extra_bytes_per_gpu

if TYPE_CHECKING:
    from quotacalc.core.kv_groups import KvGroupLayout
    from quotacalc.core.pricing_inputs import PricingInputs

#: Bytes of one activation value moved by an all-reduce (engines all-reduce in the 16-bit model dtype).
ACTIVATION_BYTES = 2


def expected_distinct_experts(num_experts: int, top_k: int, batch: int, skew: float = 0.0) -> float:
    """Expected distinct experts a batch of ``batch`` tokens routes to in one layer.

    Uniform routing gives E(1-(1-k/E)^B). With ``skew`` > 0, expert popularity follows a Zipf law
    with that exponent and each expert is picked by a token with probability min(1, k p_i).
    """
    if not 0 < top_k <= num_experts or batch < 0:
        raise ValueError(f"needs 0 < top_k <= num_experts and batch >= 0, got {num_experts}, {top_k}, {batch}")
    if skew == 0:
        return num_experts * (1 - (1 - top_k / num_experts) ** batch)
    weights = [1 / (rank + 1) ** skew for rank in range(num_experts)]
    total = sum(weights)
    return sum(1 - (1 - min(1.0, top_k * weight / total)) ** batch for weight in weights)


def expected_busiest_rank_experts(num_experts: int, ranks: int, touch_probability: float) -> float:
    """Expected touched experts on the busiest of ``ranks`` expert-parallel GPUs.

    Each rank holds E/ranks experts, each touched independently with ``touch_probability``, so a
    rank's count is binomial and the step waits for the largest: E[max] = Σ_m (1 − F(m)^ranks).
    """
    per_rank = num_experts // ranks
    pmf = [
        math.comb(per_rank, m) * touch_probability**m * (1 - touch_probability) ** (per_rank - m)
        for m in range(per_rank + 1)
    ]
    expected_max, cdf = 0.0, 0.0
    for m in range(per_rank):
        cdf += pmf[m]
        expected_max += 1 - min(1.0, cdf) ** ranks
    return expected_max


def _by_window(pairs: list[tuple[int | None, float]]) -> tuple[tuple[int, float], ...]:
    """Coefficients of layers that share a window, summed: one term per distinct window, not per layer (every
    pair is a bounded term's, so every window is a number)."""
    summed: dict[int, float] = {}
    for window, coefficient in pairs:
        key = cast(int, window)
        summed[key] = summed.get(key, 0.0) + coefficient
    return tuple(sorted(summed.items()))


@dataclass(frozen=True, slots=True)
class ReplicaModel:
    """Coefficients of one replica; every time is in seconds, every size per GPU."""

    #: 2 × active parameters: FLOPs of one token through the weights.
    flops_per_token: float
    #: Attention FLOPs per token per attended token, summed over the layers whose cache grows (a sparse layer's
    #: indexer scoring).
    attention_flops_per_attended_token: float
    #: (window, FLOPs per attended token summed over the sliding layers with that window, and the sparse layers'
    #: attention with that index_topk).
    sliding_attention: tuple[tuple[int, float], ...]
    #: TP × peak FLOP/s × MFU × the GPU's MFU scale (its matmul efficiency over the reference's).
    compute_flops_per_s: float
    #: Peak HBM bandwidth × MBU, per GPU.
    bandwidth_bytes_per_s: float
    #: KV bytes one token adds on one GPU in the layers whose cache grows.
    kv_bytes_per_token_per_gpu: float
    #: (window, KV bytes per token per GPU summed over the sliding layers with that window).
    sliding_kv: tuple[tuple[int, float], ...]
    #: Fixed state (Mamba) one sequence holds on one GPU.
    state_bytes_per_sequence_per_gpu: float
    #: Weight bytes on one GPU.
    weight_bytes_per_gpu: float
    #: Weight bytes one decode step reads on one GPU, by batch (MoE: experts touched grow with the batch).
    decode_weight_bytes_per_gpu_at: Callable[[int], float]
    #: KV pool of one replica, per GPU, bytes.
    kv_pool_bytes_per_gpu: float
    #: Fixed time of every engine forward pass beside the roofline: the step's own (scheduling) and layers ×
    #: layer_overhead_s (each layer's kernels' fixed cost).
    step_overhead_s: float
    #: Time each sequence of a decode batch adds to the step (sampling, detokenisation, bookkeeping).
    sequence_overhead_s: float
    #: Tensor-parallel all-reduces in one forward pass (one after each block, two a layer for most models; none at
    #: TP 1).
    allreduces_per_step: int
    #: Latency of one all-reduce.
    allreduce_latency_s: float
    #: Seconds one token's activations add to one all-reduce (ring: 2(TP−1)/TP × hidden × 2 B / link bandwidth).
    allreduce_s_per_token: float
    #: Fixed time to first token beside the prefill (API server, tokenizer, scheduling).
    request_overhead_s: float
    #: The engine's token budget per step: a longer prompt is prefilled in chunks of this size.
    max_num_batched_tokens: int
    #: The engine's cap on concurrent sequences (bounds the full-load batch).
    max_num_seqs: int = 1024
    #: Weight bytes a decode step reads when they do not depend on the batch (dense models), else None.
    fixed_decode_weight_bytes_per_gpu: float | None = None
    #: What an engine's forward pass reads beside the stored weights the roofline counts, per GPU (negative:
    #: fewer): no input embedding table (it gathers the batch's rows) or vision tower, a 16-bit LM head under
    #: a quantized --weight-dtype (weights.engine_read), and the whole of the layers it keeps on every rank
    #: (weights.replicated_extra_bytes_per_gpu). The engine's steps use it, the roofline does not.
    engine_read_delta_bytes_per_gpu: float = 0.0
    #: vLLM's hybrid KV layout (windowed or state layers beside full attention): the pool is counted in its blocks,
    #: as price's max_resident_sequences counts it; None: in bytes.
    kv_block_layout: KvGroupLayout | None = None
    #: What the MoE layers add to every forward pass beside the roofline: Σ over MoE layers of top-k × log2(TP) ×
    #: moe_slot_overhead_s (routing, permutation, narrow expert-GEMM tiles; docs/accuracy.md, "A fixed cost per
    #: routed-expert slot"). 0 for dense models and at TP 1.
    moe_overhead_s: float = 0.0
    #: What a prefill forward pass adds beside the roofline: layers × prefill_layer_overhead_s (small kernels'
    #: fixed cost; an eager engine's launches and rank synchronisation; docs/accuracy.md).
    prefill_overhead_s: float = 0.0
    #: Prefill chunks ride in decode steps (one forward pass for both), so a prompt prefilled among decodes adds
    #: its FLOPs but no prefill pass; False: each prefill is a pass of its own, prefill_overhead_s included.
    mixed_prefill: bool = True
    #: FLOPs of one decode token as an engine computes it: flops_per_token less the input embedding table,
    #: which it gathers (engine_compute). None: flops_per_token.
    engine_flops_per_token: float = None  # type: ignore[assignment]  # a float after __post_init__
    #: FLOPs of one token's logits (2 × vocabulary × hidden): an engine's prefill computes them for a
    #: chunk's last token only, so a prompt token costs engine_flops_per_token less these.
    logits_flops_per_token: float = 0.0
    #: KV bytes a decode step reads per token of context on one GPU in the layers whose cache grows: what they
    #: hold, and what a KV-shared layer (Gemma 4) reads of its producer's cache; a sparse layer's indexer keys
    #: only. None: kv_bytes_per_token_per_gpu.
    kv_read_bytes_per_token_per_gpu: float = None  # type: ignore[assignment]  # a float after __post_init__
    #: The same for the sliding layers, by window, and the latent a sparse layer reads of its index_topk
    #: tokens. None: sliding_kv.
    sliding_kv_read: tuple[tuple[int, float], ...] = None  # type: ignore[assignment]  # set by __post_init__
    #: What a prompt token computes per attended token where it differs from a decode token (MLA: engines prefill
    #: with the latents up-projected, and decode absorbed over the latent). None: attention_flops_per_attended_token.
    prefill_attention_flops_per_attended_token: float = None  # type: ignore[assignment]  # set by __post_init__
    #: The same for the bounded terms, by window. None: sliding_attention.
    prefill_sliding_attention: tuple[tuple[int, float], ...] = None  # type: ignore[assignment]  # set by __post_init__
    # Derived once for the hot path (step_time_s): reciprocals, and the sliding windows' KV and
    # attention coefficients side by side.
    _seconds_per_byte: float = field(init=False, repr=False, compare=False)
    _seconds_per_flop: float = field(init=False, repr=False, compare=False)
    _windows: tuple[tuple[int, float, float], ...] = field(init=False, repr=False, compare=False)
    _per_step_s: float = field(init=False, repr=False, compare=False)
    _per_sequence_s: float = field(init=False, repr=False, compare=False)
    #: What a prompt prefilled among decodes adds beside its FLOPs: its own pass's overhead unless mixed.
    _rider_overhead_s: float = field(init=False, repr=False, compare=False)
    _fixed_engine_read_bytes: float | None = field(init=False, repr=False, compare=False)
    #: FLOPs of one prompt token in an engine's prefill (engine_flops_per_token − logits_flops_per_token).
    prefill_flops_per_token: float = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.engine_flops_per_token is None:
            object.__setattr__(self, "engine_flops_per_token", self.flops_per_token)
        object.__setattr__(self, "prefill_flops_per_token", self.engine_flops_per_token - self.logits_flops_per_token)
        if self.kv_read_bytes_per_token_per_gpu is None:
            object.__setattr__(self, "kv_read_bytes_per_token_per_gpu", self.kv_bytes_per_token_per_gpu)
        if self.sliding_kv_read is None:
            object.__setattr__(self, "sliding_kv_read", self.sliding_kv)
        if self.prefill_attention_flops_per_attended_token is None:
            object.__setattr__(
                self, "prefill_attention_flops_per_attended_token", self.attention_flops_per_attended_token
            )
        if self.prefill_sliding_attention is None:
            object.__setattr__(self, "prefill_sliding_attention", self.sliding_attention)
        kv = dict(self.sliding_kv_read)
        attention = dict(self.sliding_attention)
        windows = tuple((w, kv.get(w, 0.0), attention.get(w, 0.0)) for w in sorted(set(kv) | set(attention)))
        object.__setattr__(self, "_seconds_per_byte", 1 / self.bandwidth_bytes_per_s)
        object.__setattr__(self, "_seconds_per_flop", 1 / self.compute_flops_per_s)
        object.__setattr__(self, "_windows", windows)
        fixed = self.fixed_decode_weight_bytes_per_gpu
        object.__setattr__(
            self, "_fixed_engine_read_bytes", None if fixed is None else fixed + self.engine_read_delta_bytes_per_gpu
        )
        object.__setattr__(
            self,
            "_per_step_s",
            self.step_overhead_s + self.moe_overhead_s + self.allreduces_per_step * self.allreduce_latency_s,
        )
        object.__setattr__(self, "_rider_overhead_s", 0.0 if self.mixed_prefill else self.prefill_overhead_s)
        object.__setattr__(
            self,
            "_per_sequence_s",
            self.sequence_overhead_s + self.allreduces_per_step * self.allreduce_s_per_token,
        )

    # ------------------------------------------------------------------ memory

    def sequence_kv_bytes_per_gpu(self, context_tokens: float) -> float:
        """Cache bytes one sequence of ``context_tokens`` holds on one GPU (KV and state)."""
        total = self.kv_bytes_per_token_per_gpu * context_tokens + self.state_bytes_per_sequence_per_gpu
        for window, per_token in self.sliding_kv:
            total += per_token * (context_tokens if context_tokens < window else window)
        return total

    def sequence_kv_read_bytes_per_gpu(self, context_tokens: float) -> float:
        """Cache bytes one decode step reads for a sequence of ``context_tokens`` on one GPU: what it holds, and
        the KV-shared layers' reads of their producers' caches."""
        total = self.kv_read_bytes_per_token_per_gpu * context_tokens + self.state_bytes_per_sequence_per_gpu
        for window, per_token in self.sliding_kv_read:
            total += per_token * (context_tokens if context_tokens < window else window)
        return total

    def pool_sequences(self, context_tokens: float) -> int:
        """Sequences of ``context_tokens`` the pool holds at once (decoding: one new token a step)."""
        if self.kv_block_layout is not None:
            blocks = self.kv_block_layout.num_blocks(self.kv_pool_bytes_per_gpu)
            return blocks // self.kv_block_layout.blocks_per_request(math.ceil(context_tokens), 1)
        return int(self.kv_pool_bytes_per_gpu // self.sequence_kv_bytes_per_gpu(context_tokens))

    def pool_tokens(self, context_tokens: float) -> int:
        """The earlier name of ``pool_sequences``, kept for callers written against it."""
        return self.pool_sequences(context_tokens)

    # ------------------------------------------------------------------ roofline

    def attention_flops(self, attended_tokens: float) -> float:
        """Attention FLOPs of one decode token attending ``attended_tokens`` earlier tokens."""
        return _attention_flops(self.attention_flops_per_attended_token, self.sliding_attention, attended_tokens)

    def prefill_attention_flops(self, attended_tokens: float) -> float:
        """Attention FLOPs of one prompt token attending ``attended_tokens`` earlier tokens."""
        return _attention_flops(
            self.prefill_attention_flops_per_attended_token, self.prefill_sliding_attention, attended_tokens
        )

    def decode_memory_s(self, batch: int, context_tokens: float) -> float:
        """Time to read the weights a step touches and every sequence's cache."""
        read = self.decode_weight_bytes_per_gpu_at(batch) + batch * self.sequence_kv_read_bytes_per_gpu(context_tokens)
        return read / self.bandwidth_bytes_per_s

    def decode_compute_s(self, batch: int, context_tokens: float) -> float:
        """Time to compute one token for each of ``batch`` sequences."""
        return batch * (self.flops_per_token + self.attention_flops(context_tokens)) / self.compute_flops_per_s

    def roofline_step_time_s(self, batch: int, context_tokens: float) -> float:
        """docs/method.md's decode step: max(memory, compute), no engine overheads."""
        return max(self.decode_memory_s(batch, context_tokens), self.decode_compute_s(batch, context_tokens))

    def prefill_compute_s(self, tokens: float, context_tokens: float = 0) -> float:
        """FLOP time of a prefill chunk of ``tokens`` after ``context_tokens`` cached, as an engine computes it:
        each token attends half the chunk, and only the last one's logits are computed."""
        mean_attended = context_tokens + (tokens + 1) / 2
        flops = tokens * (self.prefill_flops_per_token + self.prefill_attention_flops(mean_attended))
        return (flops + self.logits_flops_per_token) / self.compute_flops_per_s

    def roofline_prefill_time_s(self, tokens: int, context_tokens: float = 0) -> float:
        """One prefill chunk alone: its FLOPs, or one read of the weights, whichever is longer."""
        return max(
            self.prefill_compute_s(tokens, context_tokens), self.weight_bytes_per_gpu / self.bandwidth_bytes_per_s
        )

    # ------------------------------------------------------------------ engine

    def engine_weight_read_bytes_per_gpu(self, batch: int) -> float:
        """Weight bytes one engine step of ``batch`` decodes reads on one GPU (the roofline's, less what it skips)."""
        return self.decode_weight_bytes_per_gpu_at(batch) + self.engine_read_delta_bytes_per_gpu

    def engine_decode_compute_s(self, batch: int, context_tokens: float) -> float:
        """decode_compute_s as an engine computes it: no FLOPs for the embedding table it gathers."""
        return batch * (self.engine_flops_per_token + self.attention_flops(context_tokens)) / self.compute_flops_per_s

    def engine_decode_step_s(self, batch: int, context_tokens: float) -> float:
        """The roofline step over the weights the engine reads and the FLOPs it computes: max(memory, compute),
        no overheads."""
        read = self.engine_weight_read_bytes_per_gpu(batch) + batch * self.sequence_kv_read_bytes_per_gpu(
            context_tokens
        )
        return max(read / self.bandwidth_bytes_per_s, self.engine_decode_compute_s(batch, context_tokens))

    def prefill_weight_read_s(self) -> float:
        """One read of every weight a prefill step touches (all experts), as the engine reads them."""
        return (self.weight_bytes_per_gpu + self.engine_read_delta_bytes_per_gpu) * self._seconds_per_byte

    def allreduce_s(self, tokens: int) -> float:
        """The tensor-parallel all-reduces of one forward pass over ``tokens`` tokens."""
        return self.allreduces_per_step * (self.allreduce_latency_s + tokens * self.allreduce_s_per_token)

    def step_time_s(self, batch: int, context_tokens: float) -> float:
        """One decode step as an engine runs it: engine_decode_step_s + step overhead + all-reduces (the inter-token
        latency).

        The simulator's hot path: the same sums as engine_decode_step_s, inlined.
        """
        weights = self._fixed_engine_read_bytes
        if weights is None:
            weights = self.decode_weight_bytes_per_gpu_at(batch) + self.engine_read_delta_bytes_per_gpu
        kv = self.kv_read_bytes_per_token_per_gpu * context_tokens + self.state_bytes_per_sequence_per_gpu
        attention = self.attention_flops_per_attended_token * context_tokens
        for window, kv_per_token, flops_per_token in self._windows:
            attended = context_tokens if context_tokens < window else window
            kv += kv_per_token * attended
            attention += flops_per_token * attended
        memory_s = (weights + batch * kv) * self._seconds_per_byte
        compute_s = batch * (self.engine_flops_per_token + attention) * self._seconds_per_flop
        return (memory_s if memory_s > compute_s else compute_s) + self._per_step_s + batch * self._per_sequence_s

    def prefill_time_s(self, tokens: float, context_tokens: float = 0) -> float:
        """One prefill chunk of ``tokens`` after ``context_tokens`` cached, as an engine step on an idle replica."""
        return self.mixed_step_time_s(0, 0.0, self.prefill_compute_s(tokens, context_tokens), tokens)

    def mixed_step_time_s(
        self, batch: int, context_tokens: float, prefill_compute_s: float, prefill_tokens: float
    ) -> float:
        """One engine step of ``batch`` decodes (mean context ``context_tokens``) and prefill chunks of
        ``prefill_tokens`` in all, whose FLOP time is ``prefill_compute_s`` (chunked prefill).

        Without decodes it is a prefill step: its FLOPs or one read of the weights, whichever is longer.
        With decodes the chunks ride in the decode step: their FLOPs and all-reduce traffic on top
        (the weights are read once per step anyway), as :meth:`interleaved_prefill_s` charges them.
        """
        if batch == 0:
            read_s = self.prefill_weight_read_s()
            return (
                (prefill_compute_s if prefill_compute_s > read_s else read_s)
                + self.step_overhead_s
                + self.moe_overhead_s
                + self.prefill_overhead_s
                + self.allreduces_per_step * (self.allreduce_latency_s + prefill_tokens * self.allreduce_s_per_token)
            )
        return (
            self.step_time_s(batch, context_tokens)
            + prefill_compute_s
            + (self._rider_overhead_s if prefill_tokens > 0 else 0.0)
            + self.allreduces_per_step * prefill_tokens * self.allreduce_s_per_token
        )

    def ttft_s(self, prompt_tokens: float) -> float:
        """Time to first token of one prompt on an idle replica: request overhead + its prefill chunks."""
        total, done = self.request_overhead_s, 0.0
        while done < prompt_tokens:
            chunk = min(self.max_num_batched_tokens, prompt_tokens - done)
            total += self.prefill_time_s(chunk, done)
            done += chunk
        return total

    def interleaved_prefill_s(self, prompt_tokens: float) -> float:
        """What one prompt's prefill adds to the decode steps it rides in (chunked prefill).

        Its FLOPs and its all-reduce traffic; the weights are read once per step anyway and the step
        overhead is the decode step's, so neither is charged again. An engine that does not mix prefill
        into decode steps runs it as a pass of its own, whose prefill overhead the decodes wait for too.
        """
        return (
            self.prefill_compute_s(prompt_tokens)
            + self._rider_overhead_s
            + self.allreduces_per_step * prompt_tokens * self.allreduce_s_per_token
        )

    def loaded_itl_s(self, concurrency: int, prompt_tokens: float, output_tokens: float) -> float:
        """Mean inter-token latency at a steady ``concurrency`` of requests of these lengths.

        Each decode step of the batch carries, on average, (concurrency − 1) / output of the other
        requests' prefills (a request prefills once per ``output_tokens`` steps); its own prefill is
        before its first token, so it is not in its ITL.
        """
        context = prompt_tokens + output_tokens / 2
        others = (concurrency - 1) / output_tokens
        return self.step_time_s(concurrency, context) + others * self.interleaved_prefill_s(prompt_tokens)

    def max_load_batch(self, prompt_tokens: int, output_tokens: int) -> int:
        """The largest batch of such requests the pool holds at their full length, at most max_num_seqs."""
        return min(self.pool_sequences(prompt_tokens + output_tokens), self.max_num_seqs)

    def max_load_output_tokens_per_s(self, prompt_tokens: int, output_tokens: int) -> float:
        """Output tokens per second at full load, every request's prefill charged to the replica."""
        batch = self.max_load_batch(prompt_tokens, output_tokens)
        if batch <= 0:
            return 0.0
        context = prompt_tokens + output_tokens / 2
        step = self.step_time_s(batch, context) + batch / output_tokens * self.interleaved_prefill_s(prompt_tokens)
        return batch / step


def decode_weight_reader(inputs: PricingInputs) -> Callable[[int], float]:
    """Weight bytes one decode step reads on each GPU, as a function of the batch."""
    arch, deployment, layout = inputs.arch, inputs.deployment, inputs.weights
    tp = deployment.tp
    weight_bytes = layout.weight_bytes(arch.params_by_group())
    moe_layers: list[MoE] = arch.moe_layers()
    if not moe_layers:
        per_gpu = weight_bytes / tp
        return lambda batch: per_gpu
    shape = moe_layers[0]
    expert_bytes = layout.weight_bytes(shape.expert_params_by_group())  # matrices quantized, biases 16-bit
    other_bytes = weight_bytes - len(moe_layers) * shape.num_experts * expert_bytes
    layers = len(moe_layers)

    @lru_cache(maxsize=4096)
    def decode_weight_bytes(batch: int) -> float:
        touched = expected_distinct_experts(shape.num_experts, shape.top_k, batch, deployment.expert_skew)
        if deployment.expert_parallel:
            busiest = expected_busiest_rank_experts(shape.num_experts, tp, touched / shape.num_experts)
            return other_bytes / tp + layers * busiest * expert_bytes
        return (other_bytes + layers * touched * expert_bytes) / tp

    return decode_weight_bytes


def _attention_flops(per_attended_token: float, bounded: tuple[tuple[int, float], ...], attended: float) -> float:
    flops = per_attended_token * attended
    for window, per_token in bounded:
        flops += per_token * (attended if attended < window else window)
    return flops


@dataclass(frozen=True, slots=True)
class EngineCompute:
    """Parameters a text token runs through in an engine, where it differs from docs/method.md's 2 × active."""

    #: One decode token, summed over the replica's ranks: the active parameters less the input embedding table,
    #: whose row is gathered, not multiplied (the LM head stays: every decode token computes its logits; tied,
    #: the table is the head), plus (TP − 1) × the replicated ones, which every rank runs whole.
    params_per_token: int
    #: The LM head (vocabulary × hidden): a prefill chunk computes logits for its last token only (vLLM's
    #: ``logits_indices``; TensorRT-LLM without ``gather_context_logits``), so a prompt token skips it.
    logits_params: int
    #: Active parameters every rank holds whole and runs for every token (MLA's down-projections, routers, a
    #: sparse-attention indexer's projections: ReplicatedLinear in vLLM): each of the other TP − 1 ranks
    #: repeats their FLOPs.
    replicated_params: int = 0
    tp: int = 1

    @property
    def params_per_prompt_token(self) -> int:
        return self.params_per_token - self.logits_params

    @property
    def repeated_params(self) -> int:
        """The replicated parameters' (TP − 1) extra copies in params_per_token."""
        return (self.tp - 1) * self.replicated_params


def engine_compute(arch: ModelArch, tp: int = 1) -> EngineCompute:
    """What a text token multiplies in an engine of ``tp`` ranks (the vision tower is already idle in the active
    parameters; the replicated layers count once per rank)."""
    active = arch.active_params_by_group()
    logits = arch.vocab_size * arch.hidden_size
    vocab_matrices = active[ParamGroup.EMBEDDING] + active[ParamGroup.LM_HEAD]
    replicated = sum(arch.replicated_params_by_group().values())
    return EngineCompute(
        params_per_token=sum(active.values()) - vocab_matrices + logits + (tp - 1) * replicated,
        logits_params=logits,
        replicated_params=replicated,
        tp=tp,
    )


def routed_expert_slots(arch: ModelArch) -> int:
    """Routed-expert slots a token fills in one forward pass: Σ over MoE layers of top-k."""
    return sum(moe.top_k for moe in arch.moe_layers())


def moe_slots(arch: ModelArch, tp: int) -> float:
    """Routed-expert slots of one forward pass, weighted by log2(TP): what moe_slot_overhead_s multiplies.

    The fixed MoE cost the fit points show grows with the TP degree (none at TP 1, where expert GEMMs run whole):
    a form fitted, not derived (docs/accuracy.md, "A fixed cost per routed-expert slot").
    """
    return routed_expert_slots(arch) * math.log2(tp)


def allreduces_per_step(arch: ModelArch, tp: int) -> int:
    """One all-reduce after each block a layer has (its token mixer, its feed-forward block: each ends in a
    row-parallel projection) under TP, so two a layer for most models; none at TP 1. A hybrid whose layers are
    one block each (Nemotron-H's Mamba, attention and MLP layers) has one a layer, and LongCat-Flash's layer
    (priced as two attention + MLP sublayers and the MoE) five."""
    if tp == 1:
        return 0
    return sum(n for _, n in arch.mixer_groups()) + sum(n for _, n in arch.feed_forward_groups())


def allreduce_s_per_token(arch: ModelArch, tp: int, link_bytes_per_s: float) -> float:
    """Seconds one token's hidden state adds to one ring all-reduce: 2(TP−1)/TP × hidden × 2 B / link bandwidth."""
    if tp == 1:
        return 0.0
    return 2 * (tp - 1) / tp * arch.hidden_size * ACTIVATION_BYTES / link_bytes_per_s


def replica_model(inputs: PricingInputs, kv_pool_bytes_per_gpu: float) -> ReplicaModel:
    """Precompute a replica's coefficients from its resolved inputs."""
    arch, gpu, deployment, layout = inputs.arch, inputs.gpu, inputs.deployment, inputs.weights
    tp = deployment.tp
    kv_b, state_b = inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element
    groups = arch.mixer_groups()
    # What each layer's attention reads and computes per token of context: over the whole context, or bounded by
    # a window, a chunk or a sparse layer's index_topk. A KV-shared sliding layer holds no cache but reads and
    # attends like the layer it shares with. Layers alike are summed once, times their count.
    terms = [term.times(n) for m, n in groups for term in m.context_terms(kv_b, tp)]
    unbounded = [term for term in terms if term.bound_tokens is None]
    bounded = [term for term in terms if term.bound_tokens is not None]
    windowed = [(m, n) for m, n in groups if not m.grows_with_context() and m.context_terms(kv_b, tp)]
    weight_bytes = layout.weight_bytes(arch.params_by_group())
    engine_flops = engine_compute(arch, tp)
    return ReplicaModel(
        flops_per_token=2 * arch.active_params(),
        engine_flops_per_token=2 * engine_flops.params_per_token,
        logits_flops_per_token=2 * engine_flops.logits_params,
        attention_flops_per_attended_token=sum(term.flops_per_token for term in unbounded),
        sliding_attention=_by_window([(term.bound_tokens, term.flops_per_token) for term in bounded]),
        prefill_attention_flops_per_attended_token=sum(term.prefill_flops_per_token for term in unbounded),
        prefill_sliding_attention=_by_window([(term.bound_tokens, term.prefill_flops_per_token) for term in bounded]),
        compute_flops_per_s=tp * gpu.peak_flops_per_s(layout.compute_dtype) * deployment.mfu * inputs.mfu_scale,
        bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s * deployment.mbu,
        kv_bytes_per_token_per_gpu=memory.kv_bytes_per_token_per_gpu(arch, kv_b, tp),
        sliding_kv=_by_window(
            [(cast(Any, m).window_tokens, n * m.cache_bytes_per_token(kv_b, tp)) for m, n in windowed]
        ),
        kv_read_bytes_per_token_per_gpu=sum(term.read_bytes_per_token for term in unbounded),
        sliding_kv_read=_by_window([(term.bound_tokens, term.read_bytes_per_token) for term in bounded]),
        state_bytes_per_sequence_per_gpu=memory.state_bytes_per_sequence(arch, state_b, tp),
        weight_bytes_per_gpu=weight_bytes / tp,
        decode_weight_bytes_per_gpu_at=decode_weight_reader(inputs),
        kv_pool_bytes_per_gpu=kv_pool_bytes_per_gpu,
        step_overhead_s=deployment.step_overhead_s + deployment.layer_overhead_s * len(arch.layers),
        moe_overhead_s=deployment.moe_slot_overhead_s * moe_slots(arch, tp),
        prefill_overhead_s=deployment.prefill_layer_overhead_s * len(arch.layers),
        mixed_prefill=deployment.mixed_prefill,
        sequence_overhead_s=deployment.sequence_overhead_s,
        allreduces_per_step=allreduces_per_step(arch, tp),
        allreduce_latency_s=deployment.allreduce_latency_s
        if deployment.allreduce_latency_s is not None
        else gpu.allreduce_latency_s,
        allreduce_s_per_token=allreduce_s_per_token(arch, tp, gpu.interconnect_bandwidth_bytes_per_s),
        request_overhead_s=deployment.request_overhead_s,
        max_num_batched_tokens=memory.max_num_batched_tokens(deployment, gpu),
        max_num_seqs=memory.max_num_seqs(deployment, gpu),
        fixed_decode_weight_bytes_per_gpu=None if arch.moe_layers() else weight_bytes / tp,
        engine_read_delta_bytes_per_gpu=engine_read(arch, layout).delta_bytes / tp
        + replicated_extra_bytes_per_gpu(arch, layout, tp),
        kv_block_layout=kv_groups.hybrid_layout(arch, kv_b, state_b, tp),
    )
