"""The numeric replica model: step and prefill times from precomputed coefficients (docs/method.md §1-§2).

``price`` explains a replica at one operating point; the simulator asks the same questions millions
of times at every batch and context, so the coefficients are computed once here and each call is a
few multiplications. The roofline: a decode step reads the weights it touches plus every sequence's
KV, at the effective bandwidth, or computes its tokens at the effective FLOP rate, whichever is
longer; a prefill chunk computes its tokens (parameters plus attention over what came before).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import lru_cache
from typing import TYPE_CHECKING

from quotacalc.core import memory
from quotacalc.core.arch import ParamGroup

if TYPE_CHECKING:
    from quotacalc.core.price import PricingInputs


@dataclass(frozen=True)
class ReplicaModel:
    """Coefficients of one replica; every time is in seconds, every size per GPU."""

    #: 2 × active parameters: FLOPs of one token through the weights.
    flops_per_token: float
    #: Attention FLOPs per token per attended token, summed over the layers whose cache grows.
    attention_flops_per_attended_token: float
    #: (FLOPs per attended token, window) of each sliding-window layer.
    sliding_attention: tuple[tuple[float, int], ...]
    #: TP × peak FLOP/s × MFU.
    compute_flops_per_s: float
    #: Peak HBM bandwidth × MBU, per GPU.
    bandwidth_bytes_per_s: float
    #: KV bytes one token adds on one GPU in the layers whose cache grows.
    kv_bytes_per_token_per_gpu: float
    #: (KV bytes per token per GPU, window) of each sliding-window layer.
    sliding_kv: tuple[tuple[float, int], ...]
    #: Fixed state (Mamba) one sequence holds on one GPU.
    state_bytes_per_sequence_per_gpu: float
    #: Weight bytes on one GPU.
    weight_bytes_per_gpu: float
    #: Weight bytes one decode step reads on one GPU, by batch (MoE: experts touched grow with the batch).
    decode_weight_bytes_per_gpu_at: object
    #: KV pool of one replica, per GPU, bytes.
    kv_pool_bytes_per_gpu: float

    def sequence_kv_bytes_per_gpu(self, context_tokens: float) -> float:
        """Cache bytes one sequence of ``context_tokens`` holds on one GPU (KV and state)."""
        window = sum(per_token * min(context_tokens, size) for per_token, size in self.sliding_kv)
        return self.kv_bytes_per_token_per_gpu * context_tokens + window + self.state_bytes_per_sequence_per_gpu

    def attention_flops(self, attended_tokens: float) -> float:
        """Attention FLOPs of one token attending ``attended_tokens`` earlier tokens."""
        sliding = sum(per_token * min(attended_tokens, size) for per_token, size in self.sliding_attention)
        return self.attention_flops_per_attended_token * attended_tokens + sliding

    def step_time_s(self, batch: int, context_tokens: float) -> float:
        """One decode step of ``batch`` sequences at a mean context of ``context_tokens``."""
        read = self.decode_weight_bytes_per_gpu_at(batch) + batch * self.sequence_kv_bytes_per_gpu(context_tokens)
        memory_s = read / self.bandwidth_bytes_per_s
        compute_s = batch * (self.flops_per_token + self.attention_flops(context_tokens)) / self.compute_flops_per_s
        return max(memory_s, compute_s)

    def prefill_time_s(self, tokens: int, context_tokens: float = 0) -> float:
        """Prefill ``tokens`` new prompt tokens after ``context_tokens`` already cached (one chunk).

        Each new token attends to the cached context plus, on average, half the chunk before it; the
        chunk also reads the weights once, which bounds short chunks.
        """
        mean_attended = context_tokens + (tokens + 1) / 2
        compute_s = tokens * (self.flops_per_token + self.attention_flops(mean_attended)) / self.compute_flops_per_s
        return max(compute_s, self.weight_bytes_per_gpu / self.bandwidth_bytes_per_s)

    def pool_tokens(self, context_tokens: int) -> int:
        """Sequences of ``context_tokens`` the pool holds at once."""
        return int(self.kv_pool_bytes_per_gpu // self.sequence_kv_bytes_per_gpu(context_tokens))


def replica_model(inputs: PricingInputs, kv_pool_bytes_per_gpu: float) -> ReplicaModel:
    """Precompute a replica's coefficients from its resolved inputs."""
    from quotacalc.core.price import expected_busiest_rank_experts, expected_distinct_experts

    arch, gpu, deployment, layout = inputs.arch, inputs.gpu, inputs.deployment, inputs.weights
    tp = deployment.tp
    kv_b, state_b = inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element
    mixers = [layer.mixer for layer in arch.layers if layer.mixer is not None]
    growing = [m for m in mixers if m.grows_with_context()]
    windowed = [m for m in mixers if not m.grows_with_context() and m.cache_elements_per_token() > 0]
    weight_bytes = layout.weight_bytes(arch.params_by_group())
    moe_layers = arch.moe_layers()

    if moe_layers:
        shape = moe_layers[0]
        expert_bytes = shape.expert_params() * layout.storage(ParamGroup.ROUTED_EXPERTS).bytes_per_param
        other_bytes = weight_bytes - len(moe_layers) * shape.num_experts * expert_bytes

        @lru_cache(maxsize=4096)
        def decode_weight_bytes(batch: int) -> float:
            touched = expected_distinct_experts(shape.num_experts, shape.top_k, batch, deployment.expert_skew)
            if deployment.expert_parallel:
                busiest = expected_busiest_rank_experts(shape.num_experts, tp, touched / shape.num_experts)
                return other_bytes / tp + len(moe_layers) * busiest * expert_bytes
            return (other_bytes + len(moe_layers) * touched * expert_bytes) / tp
    else:

        def decode_weight_bytes(batch: int) -> float:
            return weight_bytes / tp

    return ReplicaModel(
        flops_per_token=2 * arch.active_params(),
        attention_flops_per_attended_token=sum(m.attention_flops_per_token(1) for m in growing),
        sliding_attention=tuple((m.attention_flops_per_token(1), m.window_tokens) for m in windowed),
        compute_flops_per_s=tp * gpu.peak_flops_per_s(layout.compute_dtype) * deployment.mfu,
        bandwidth_bytes_per_s=gpu.memory_bandwidth_bytes_per_s * deployment.mbu,
        kv_bytes_per_token_per_gpu=memory.kv_bytes_per_token_per_gpu(arch, kv_b, tp),
        sliding_kv=tuple((m.cache_elements_per_token_per_gpu(tp) * kv_b, m.window_tokens) for m in windowed),
        state_bytes_per_sequence_per_gpu=memory.state_bytes_per_sequence(arch, state_b, tp),
        weight_bytes_per_gpu=weight_bytes / tp,
        decode_weight_bytes_per_gpu_at=decode_weight_bytes,
        kv_pool_bytes_per_gpu=kv_pool_bytes_per_gpu,
    )
