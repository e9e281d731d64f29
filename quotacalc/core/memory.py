"""KV cache and state bytes of a model: per token, per request, per GPU."""

from __future__ import annotations

from quotacalc.core.arch import ModelArch


def _mixers(arch: ModelArch):
    return [layer.mixer for layer in arch.layers if layer.mixer is not None]


def kv_bytes_per_token(arch: ModelArch, kv_bytes_per_element: float) -> float:
    """KV growth per token of context at long context, whole replica (layers whose cache keeps growing)."""
    return sum(m.cache_elements_per_token() for m in _mixers(arch) if m.grows_with_context()) * kv_bytes_per_element


def kv_bytes_per_token_per_gpu(arch: ModelArch, kv_bytes_per_element: float, tp: int) -> float:
    """KV growth per token on one GPU (heads split over TP, replicated below one head per rank; MLA whole)."""
    return (
        sum(m.cache_elements_per_token_per_gpu(tp) for m in _mixers(arch) if m.grows_with_context())
        * kv_bytes_per_element
    )


def state_bytes_per_sequence(arch: ModelArch, state_bytes_per_element: float, tp: int | None = None) -> float:
    """Fixed state (Mamba conv + SSM) one sequence holds, whole replica or per GPU."""
    if tp is None:
        return sum(m.state_elements_per_sequence() for m in _mixers(arch)) * state_bytes_per_element
    return sum(m.state_elements_per_sequence_per_gpu(tp) for m in _mixers(arch)) * state_bytes_per_element


def window_bytes_per_sequence(arch: ModelArch, kv_bytes_per_element: float, context_tokens: int) -> float:
    """KV held by sliding-window layers for one sequence at a context (at most their windows)."""
    return (
        sum(
            m.cache_elements_per_token() * m.cached_tokens(context_tokens)
            for m in _mixers(arch)
            if not m.grows_with_context()
        )
        * kv_bytes_per_element
    )


def request_kv_bytes(
    arch: ModelArch, context_tokens: int, kv_bytes_per_element: float, state_bytes_per_element: float
) -> float:
    """Exact cache bytes one sequence holds at ``context_tokens``: KV of every layer plus any state."""
    kv = sum(m.cache_elements_per_token() * m.cached_tokens(context_tokens) for m in _mixers(arch))
    return kv * kv_bytes_per_element + state_bytes_per_sequence(arch, state_bytes_per_element)


def request_kv_bytes_per_gpu(
    arch: ModelArch, context_tokens: int, kv_bytes_per_element: float, state_bytes_per_element: float, tp: int
) -> float:
    """Cache bytes one sequence holds on each GPU of a TP group."""
    kv = sum(m.cache_elements_per_token_per_gpu(tp) * m.cached_tokens(context_tokens) for m in _mixers(arch))
    return kv * kv_bytes_per_element + state_bytes_per_sequence(arch, state_bytes_per_element, tp)


def attention_flops_per_prompt_token(arch: ModelArch, context_tokens: int) -> float:
    """Mean attention FLOPs (QK^T and AV) of a prompt token in a prompt of ``context_tokens`` (causal)."""
    return sum(m.attention_flops_per_token(m.mean_prompt_attended_tokens(context_tokens)) for m in _mixers(arch))


def attention_flops_per_output_token(arch: ModelArch, context_tokens: int) -> float:
    """Attention FLOPs of one output token attending a context of ``context_tokens``."""
    return sum(m.attention_flops_per_token(m.attended_tokens(context_tokens)) for m in _mixers(arch))
