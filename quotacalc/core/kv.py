"""One request's KV at a context length: bytes, per GPU, share of the pool (docs/method.md §2)."""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict

from quotacalc.core import kv_groups, memory
from quotacalc.core.explain import Ledger, Step, fmt
from quotacalc.core.price import PriceResult, _larger_pool_fix
from quotacalc.core.pricing_warning import PricingError, PricingWarning
from quotacalc.errors import QuotacalcError


class RequestKvResult(BaseModel):
    """What one sequence of ``context_tokens`` holds in a replica's KV pool."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    context_tokens: int
    request_kv_bytes: float
    request_kv_bytes_per_gpu: float
    window_kv_bytes: float
    state_bytes: float
    pool_share: float
    requests_resident: int
    requests_to_fill_pool: int
    #: Units one prompt token costs inside a prompt of this length (1 + its attention FLOPs' share).
    prompt_token_units_at_context: float
    #: Units to prefill the whole prompt: what a long-context request costs before its first output token.
    prefill_units: float
    steps: tuple[Step, ...]
    replica: PriceResult

    @property
    def request_warnings(self) -> tuple[PricingWarning, ...]:
        """The request's own warning, as data: one where it is larger than the whole pool."""
        if self.pool_share <= 1:
            return ()
        return (
            PricingWarning(
                field="context",
                problem=f"one request of {self.context_tokens:,} tokens needs {self.pool_share:.0%} of the replica's "
                f"KV pool ({self.replica.kv_pool_tokens:,} tokens): it can never be resident",
                fix=_larger_pool_fix(self.replica.inputs, "a GPU with more memory"),
            ),
        )

    @property
    def pricing_warnings(self) -> tuple[PricingWarning, ...]:
        """The replica's warnings and the request's, as data."""
        return (*self.replica.pricing_warnings, *self.request_warnings)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The replica's warnings and the request's, keys named as flags."""
        return (*self.replica.warnings, *(warning.worded() for warning in self.request_warnings))


def context_limit(replica: PriceResult, context_tokens: int) -> tuple[str, str] | None:
    """What a sequence of ``context_tokens`` exceeds (the model's maximum context, the engine's max_model_len) and
    the fix, a template over keys (``{max_model_len}``, named where its value was set); None when it fits both."""
    arch, max_model_len = replica.inputs.arch, replica.inputs.deployment.max_model_len
    if arch.max_context_tokens and context_tokens > arch.max_context_tokens:
        return (
            f"{arch.name}'s maximum context of {arch.max_context_tokens:,}",
            f"at most {arch.max_context_tokens:,} tokens",
        )
    if max_model_len is not None and context_tokens > max_model_len:
        return (
            f"max_model_len {max_model_len:,} (the engine refuses longer sequences)",
            f"at most {max_model_len:,} tokens, or raise {{max_model_len}}",
        )
    return None


def request_kv(replica: PriceResult, context_tokens: int) -> RequestKvResult:
    """KV (and any state) of one request at ``context_tokens``, against the replica's pool."""
    if not isinstance(replica, PriceResult):
        raise TypeError(f"request_kv() takes the PriceResult of price(), got {type(replica).__name__}")
    inputs = replica.inputs
    arch, tp = inputs.arch, inputs.deployment.tp
    if isinstance(context_tokens, bool) or not isinstance(context_tokens, int) or context_tokens < 1:
        # The core is called without the CLI's parsing too: a request holds at least one whole token.
        raise QuotacalcError(f"must be a whole number of tokens, at least 1, got {context_tokens!r}", field="context")
    limit = context_limit(replica, context_tokens)
    if limit is not None:
        raise PricingError(f"{context_tokens:,} tokens exceed {limit[0]}", field="context", fix=limit[1])
    kv_b, state_b = inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element
    ledger = Ledger()
    total = ledger.record(
        "request_kv_bytes",
        memory.request_kv_bytes(arch, context_tokens, kv_b, state_b),
        formula="Σ_layers cached tokens(context) × values per token × kv_dtype_bytes + state  (= context × kv_bytes_per_token for full attention)",
        substituted=f"{fmt(context_tokens)} tokens, {fmt(replica.kv_bytes_per_token)} B/token at long context",
        unit="B",
        note=memory.cost_rules(arch),
    )
    per_gpu = ledger.record(
        "request_kv_bytes_per_gpu",
        memory.request_kv_bytes_per_gpu(arch, context_tokens, kv_b, state_b, tp),
        formula="the same per TP rank (KV heads split over TP; MLA latent and replicated heads whole)",
        substituted=f"TP {tp}",
        unit="B",
    )
    layout = kv_groups.hybrid_layout(arch, kv_b, state_b, tp)
    if layout is not None:
        # vLLM's hybrid manager hands out whole blocks per group: count them as price's max_resident_sequences
        # does, or kv and price disagree on how many such requests fit (price records the pool's blocks).
        pool_blocks = next(step.value for step in replica.steps if step.name == "kv_pool_blocks")
        blocks = layout.blocks_per_request(context_tokens, 1)
        share = ledger.record(
            "pool_share",
            blocks / pool_blocks,
            formula="blocks one decoding request of this context holds / kv_pool_blocks",
            substituted=f"{fmt(blocks)} / {fmt(pool_blocks)}",
            unit="",
        )
        resident, to_fill = int(pool_blocks // blocks), math.ceil(pool_blocks / blocks) if blocks <= pool_blocks else 0
        resident_rule, fill_rule = ("floor(kv_pool_blocks / request blocks)", "ceil(kv_pool_blocks / request blocks)")
        substitute = f"{fmt(pool_blocks)} / {fmt(blocks)}"
    else:
        share = ledger.record(
            "pool_share",
            per_gpu / replica.kv_pool_bytes_per_gpu,
            formula="request_kv_bytes_per_gpu / kv_pool_bytes_per_gpu  (= context / pool_tokens for full attention)",
            substituted=f"{fmt(per_gpu)} / {fmt(replica.kv_pool_bytes_per_gpu)}",
            unit="",
        )
        resident = math.floor(1 / share) if share > 0 else 0
        # A request larger than the pool never fills it: none is ever resident.
        to_fill = math.ceil(1 / share) if 0 < share <= 1 else 0
        resident_rule, fill_rule = "floor(1 / pool_share)", "ceil(1 / pool_share)"
        substitute = f"1 / {fmt(share)}"
    ledger.record(
        "requests_resident",
        resident,
        formula=resident_rule,
        substituted=f"floor({substitute})",
        unit="requests",
    )
    ledger.record(
        "requests_to_fill_pool",
        to_fill,
        formula=f"{fill_rule}, 0 when one request is larger than the pool",
        substituted=f"ceil({substitute})",
        unit="requests",
    )
    active_flops = 2 * replica.active_params
    attention_flops = memory.attention_flops_per_prompt_token(arch, context_tokens, tp)
    token_units = ledger.record(
        "prompt_token_units_at_context",
        (active_flops + attention_flops) / active_flops,
        formula="(2 × active_params + attention_flops_per_prompt_token(context)) / (2 × active_params)",
        substituted=f"({fmt(active_flops)} + {fmt(attention_flops)}) / {fmt(active_flops)}",
        unit="units",
        note="a prompt token's cost at this context, in units of the parameter-only prompt token",
    )
    prefill = ledger.record(
        "prefill_units",
        context_tokens * token_units,
        formula="context × prompt_token_units_at_context",
        substituted=f"{fmt(context_tokens)} × {fmt(token_units)}",
        unit="units",
    )
    return RequestKvResult(
        context_tokens=context_tokens,
        request_kv_bytes=total,
        request_kv_bytes_per_gpu=per_gpu,
        window_kv_bytes=memory.window_bytes_per_sequence(arch, kv_b, context_tokens),
        state_bytes=memory.state_bytes_per_sequence(arch, state_b),
        pool_share=share,
        requests_resident=resident,
        requests_to_fill_pool=to_fill,
        prompt_token_units_at_context=token_units,
        prefill_units=prefill,
        steps=tuple(ledger.steps),
        replica=replica,
    )
