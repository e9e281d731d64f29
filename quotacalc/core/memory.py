"""KV cache and state bytes of a model: per token, per request, per GPU."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from quotacalc.catalog.dtypes import dtype_by_name
from quotacalc.core.arch import DenseMLP, ModelArch, MoE
from quotacalc.core.deployment import GIB, VLLM_MEMORY_UTILIZATION, engine_profile

if TYPE_CHECKING:
    from quotacalc.catalog.gpus import GpuSpec
    from quotacalc.core.deployment import Deployment


#: vLLM's device-memory threshold above which 'vllm serve' defaults to a larger token budget per step.
VLLM_LARGE_GPU_BYTES = 70 * GIB


def kv_bytes_per_token(arch: ModelArch, kv_bytes_per_element: float) -> float:
    """KV growth per token of context at long context, whole replica (layers whose cache keeps growing)."""
    return sum(
        n * m.cache_bytes_per_token(kv_bytes_per_element) for m, n in arch.mixer_groups() if m.grows_with_context()
    )


def kv_bytes_per_token_per_gpu(arch: ModelArch, kv_bytes_per_element: float, tp: int) -> float:
    """KV growth per token on one GPU (heads split over TP, replicated below one head per rank; MLA whole)."""
    return sum(
        n * m.cache_bytes_per_token(kv_bytes_per_element, tp) for m, n in arch.mixer_groups() if m.grows_with_context()
    )


def cost_rules(arch: ModelArch) -> str | None:
    """The layer kinds' own rules for their cache, reads and FLOPs where they depart from values x dtype over
    the attended tokens (DeepSeek Sparse Attention), for --explain; None when every layer follows it."""
    rules = dict.fromkeys(rule for mixer, _ in arch.mixer_groups() if (rule := mixer.cost_rule()))
    return "; ".join(rules) or None


def conv_state_bytes_per_element(arch: ModelArch) -> float:
    """Bytes of one conv-state value: the checkpoint's dtype (vLLM's mamba_cache_dtype 'auto', the model dtype),
    whatever dtype the SSM or recurrent state is kept in (mamba_ssm_cache_dtype, quotacalc's --state-dtype)."""
    return dtype_by_name(arch.checkpoint_dtype).bytes_per_element


def state_bytes_per_sequence(arch: ModelArch, state_bytes_per_element: float, tp: int | None = None) -> float:
    """Fixed state (Mamba, Gated DeltaNet: conv + recurrent) one sequence holds, whole replica or per GPU: the SSM
    or recurrent state at the state dtype, the conv state at the checkpoint's dtype."""
    conv = conv_state_bytes_per_element(arch)
    return sum(n * m.state_bytes_per_sequence(state_bytes_per_element, tp, conv) for m, n in arch.mixer_groups())


def state_elements_per_sequence(arch: ModelArch) -> int:
    """Values of fixed state one sequence holds, whole replica (whatever dtype each is kept in)."""
    return sum(n * m.state_elements_per_sequence() for m, n in arch.mixer_groups())


def window_kv_bytes_per_token(arch: ModelArch, kv_bytes_per_element: float) -> float:
    """KV a token costs in the layers that keep only a window of tokens (sliding windows, local chunks), while it is
    inside their window: what kv_bytes_per_token leaves out, since those layers stop growing."""
    return sum(
        n * m.cache_bytes_per_token(kv_bytes_per_element) for m, n in arch.mixer_groups() if not m.grows_with_context()
    )


def window_bytes_per_sequence(arch: ModelArch, kv_bytes_per_element: float, context_tokens: int) -> float:
    """KV held by sliding-window layers for one sequence at a context (at most their windows)."""
    return sum(
        n * m.cache_bytes_per_token(kv_bytes_per_element) * m.cached_tokens(context_tokens)
        for m, n in arch.mixer_groups()
        if not m.grows_with_context()
    )


def request_kv_bytes(
    arch: ModelArch, context_tokens: int, kv_bytes_per_element: float, state_bytes_per_element: float
) -> float:
    """Exact cache bytes one sequence holds at ``context_tokens``: KV of every layer plus any state."""
    kv = sum(
        n * m.cache_bytes_per_token(kv_bytes_per_element) * m.cached_tokens(context_tokens)
        for m, n in arch.mixer_groups()
    )
    return kv + state_bytes_per_sequence(arch, state_bytes_per_element)


def request_kv_bytes_per_gpu(
    arch: ModelArch, context_tokens: int, kv_bytes_per_element: float, state_bytes_per_element: float, tp: int
) -> float:
    """Cache bytes one sequence holds on each GPU of a TP group."""
    kv = sum(
        n * m.cache_bytes_per_token(kv_bytes_per_element, tp) * m.cached_tokens(context_tokens)
        for m, n in arch.mixer_groups()
    )
    return kv + state_bytes_per_sequence(arch, state_bytes_per_element, tp)


def attention_flops_per_prompt_token(arch: ModelArch, context_tokens: int, tp: int = 1) -> float:
    """Mean attention FLOPs (QK^T and AV) of a prompt token in a prompt of ``context_tokens`` (causal), as a replica
    of ``tp`` GPUs spends them (a sparse layer's indexer scores on every rank)."""
    return sum(n * m.prompt_attention_flops_per_token(context_tokens, tp) for m, n in arch.mixer_groups())


def attention_flops_per_output_token(arch: ModelArch, context_tokens: int) -> float:
    """Attention FLOPs of one output token attending a context of ``context_tokens``, at each kind's own FLOPs per
    attended key (MLA's expanded form; the replica model's decode step takes each kind's ``context_terms``, where
    MLA decodes absorbed)."""
    return sum(n * m.attention_flops_per_token(m.attended_tokens(context_tokens)) for m, n in arch.mixer_groups())


# --------------------------------------------------------------------------- engine memory


def vllm_default_max_num_batched_tokens(gpu: GpuSpec) -> int:
    """vLLM's default token budget per step for 'vllm serve' (V1, 0.10-0.11 EngineArgs.get_batch_defaults).

    8,192 on GPUs of 70 GiB or more except A100 (where a large budget cost throughput, vLLM PR
    #17885), 2,048 elsewhere.
    """
    large = gpu.memory_bytes >= VLLM_LARGE_GPU_BYTES and not gpu.id.startswith("a100")
    return 8192 if large else 2048


def vllm_default_max_num_seqs(gpu: GpuSpec) -> int:
    """vLLM's default cap on concurrent sequences for 'vllm serve' (same source and rule as the token budget)."""
    large = gpu.memory_bytes >= VLLM_LARGE_GPU_BYTES and not gpu.id.startswith("a100")
    return 1024 if large else 256


def max_num_seqs(deployment: Deployment, gpu: GpuSpec) -> int:
    """The deployment's cap on concurrent sequences: its own, or vLLM's default for the GPU."""
    return deployment.max_num_seqs if deployment.max_num_seqs is not None else vllm_default_max_num_seqs(gpu)


def token_budget(deployment: Deployment, gpu: GpuSpec) -> tuple[int, str]:
    """(the deployment's token budget per step, where it comes from): its own ('given'), else its engine's
    default for the GPU (SGLang's chunked_prefill_size by the GPU's memory: quotacalc/catalog/engines.yaml), else
    vLLM's."""
    if deployment.max_num_batched_tokens is not None:
        return deployment.max_num_batched_tokens, "given"
    return default_token_budget(deployment.engine, gpu)


def default_token_budget(engine: str, gpu: GpuSpec) -> tuple[int, str]:
    """(an engine's default token budget per step on this GPU, where it comes from): its profile's rule, else
    vLLM's."""
    profile = engine_profile(engine)
    own = None if profile is None else profile.default_max_num_batched_tokens(gpu.memory_bytes)
    if profile is not None and own is not None:
        return own, f"{profile.id} default"
    return vllm_default_max_num_batched_tokens(gpu), "vLLM default"


def token_budget_below_sequences(max_num_batched_tokens: int, max_num_seqs: int) -> bool:
    """vLLM's start-up rule (SchedulerConfig: max_num_batched_tokens must be >= max_num_seqs): a step must be able
    to give every running sequence a token. True where an engine so configured refuses to start."""
    return max_num_batched_tokens < max_num_seqs


def max_num_batched_tokens(deployment: Deployment, gpu: GpuSpec) -> int:
    """The deployment's token budget per step (token_budget without its source)."""
    return token_budget(deployment, gpu)[0]


def memory_utilization(deployment: Deployment, gpu: GpuSpec) -> tuple[float, str]:
    """(the share of GPU memory the engine may use, where it comes from): the deployment's own ('given'), else its
    engine's default: SGLang's mem_fraction_static rule (quotacalc/catalog/engines.yaml), else vLLM's 0.9."""
    if deployment.memory_utilization is not None:
        return deployment.memory_utilization, "given"
    return default_memory_utilization(deployment.engine, gpu, deployment.tp, max_num_batched_tokens(deployment, gpu))


def default_memory_utilization(engine: str, gpu: GpuSpec, tp: int, batched_tokens: int) -> tuple[float, str]:
    """(an engine's default share of GPU memory at this GPU, TP and token budget, where it comes from)."""
    profile = engine_profile(engine)
    rule = None if profile is None else profile.static_memory_fraction
    if profile is None or rule is None:
        return VLLM_MEMORY_UTILIZATION, "vLLM default"
    return rule.default_fraction(gpu.memory_bytes, tp, batched_tokens), f"{profile.id} default"


def sizes_pool_by_static_fraction(engine: str) -> bool:
    """Whether the engine keeps activations and CUDA graphs outside its memory share (SGLang's
    mem_fraction_static), so its KV pool is the share less weights and fixed buffers, not less a profiling peak."""
    profile = engine_profile(engine)
    return profile is not None and profile.static_memory_fraction is not None


def feed_forward_width(arch: ModelArch) -> int:
    """Widest intermediate a token runs through in one layer (MoE: top-k experts plus shared ones)."""
    widths = [0]
    for ffn, _ in arch.feed_forward_groups():
        if isinstance(ffn, DenseMLP):
            widths.append(ffn.intermediate_size)
        elif isinstance(ffn, MoE):
            widths.append(
                ffn.top_k * ffn.expert_intermediate_size + ffn.num_shared_experts * ffn.shared_intermediate_size
            )
    return max(widths)


def activation_bytes_per_token_per_gpu(arch: ModelArch, tp: int) -> float:
    """Peak activation bytes one token of the engine's profiling run holds on one GPU.

    (4 × feed-forward width / TP + 6 × hidden) × 2 B: the gated MLP's up-projection and its output
    (split over TP) and a few hidden-size buffers (replicated). The coefficients reproduce vLLM's
    reported 'activation peak' of 1.20 GiB for Llama 3.1 8B at 8,192 tokens (docs/accuracy.md).
    """
    return (4 * feed_forward_width(arch) / tp + 6 * arch.hidden_size) * 2


def sampler_bytes_per_gpu(arch: ModelArch, deployment: Deployment, gpu: GpuSpec) -> float:
    """Peak bytes of the profiling run's sampler: every dummy request's logits over the vocabulary."""
    requests = min(max_num_seqs(deployment, gpu), max_num_batched_tokens(deployment, gpu))
    return requests * arch.vocab_size * deployment.sampler_bytes_per_logit


class RuntimeReserve(BaseModel):
    """Per-GPU memory outside weights and KV: its terms, in bytes, for --explain."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    base_bytes: float
    #: reserve_per_tp_doubling × log2(TP): NCCL and custom all-reduce buffers.
    tp_comm_bytes: float
    activation_bytes: float
    #: The profiling sampler's peak; it runs after the forward pass, so only the larger of the two counts.
    sampler_bytes: float
    max_num_batched_tokens: int
    #: True when the total was given (runtime_reserve_gib) rather than modelled.
    given: bool
    #: True for an engine that keeps activations outside its memory share (SGLang): no profiling peak here.
    static_fraction: bool = False

    @property
    def total_bytes(self) -> float:
        return self.base_bytes + self.tp_comm_bytes + max(self.activation_bytes, self.sampler_bytes)


def tp_comm_bytes_per_gpu(deployment: Deployment) -> float:
    """Communication buffers per GPU under TP: reserve_per_tp_doubling × log2(TP).

    Logarithmic, not linear in the peers: vLLM 0.11's non-torch memory on H100 is 0.13-0.14 GiB at TP 1
    and 0.54-0.55 GiB at TP 2 (llm-d logs), and a ring all-reduce talks to two neighbours whatever the
    group size, so buffers grow with NCCL's channels and algorithms, not with one set per peer; a term
    linear in TP − 1 fitted on TP 1-4 extrapolates to 8.75 GiB per GPU at TP 8 (bench/fit_reserve.py).
    """
    return deployment.reserve_per_tp_doubling_gib * GIB * math.log2(deployment.tp)


def runtime_reserve(arch: ModelArch, deployment: Deployment, gpu: GpuSpec) -> RuntimeReserve:
    """What the engine keeps per GPU beside weights and KV inside its memory share: non-torch memory (base),
    communication buffers under TP, and the peak of its profiling run: the forward pass's activations at
    max_num_batched_tokens or, if larger, the sampler's logits over the vocabulary. CUDA graphs are not
    in it: vLLM up to 0.11 captures them after sizing the KV pool (docs/accuracy.md). An engine with a static
    fraction (SGLang) keeps activations and graphs outside its share, so only the first two count."""
    tokens = max_num_batched_tokens(deployment, gpu)
    if deployment.runtime_reserve_gib is not None:
        return RuntimeReserve(
            base_bytes=deployment.runtime_reserve_gib * GIB,
            tp_comm_bytes=0.0,
            activation_bytes=0.0,
            sampler_bytes=0.0,
            max_num_batched_tokens=tokens,
            given=True,
        )
    if sizes_pool_by_static_fraction(deployment.engine):
        return RuntimeReserve(
            base_bytes=deployment.reserve_base_gib * GIB,
            tp_comm_bytes=tp_comm_bytes_per_gpu(deployment),
            activation_bytes=0.0,
            sampler_bytes=0.0,
            max_num_batched_tokens=tokens,
            given=False,
            static_fraction=True,
        )
    return RuntimeReserve(
        base_bytes=deployment.reserve_base_gib * GIB,
        tp_comm_bytes=tp_comm_bytes_per_gpu(deployment),
        activation_bytes=tokens * activation_bytes_per_token_per_gpu(arch, deployment.tp),
        sampler_bytes=sampler_bytes_per_gpu(arch, deployment, gpu),
        max_num_batched_tokens=tokens,
        given=False,
    )
