"""A plan's pool as the emulator serves it: the priced replica model and the engine settings ``generate`` writes.

One source for each figure: the step times are ``core.replica.replica_model`` over the pool's price (as
``simulate`` builds its engines), the KV pool is the priced one (``kv_pool_tokens_at_context``, in blocks of the
engine's block size), and ``max_num_seqs``, ``max_num_batched_tokens``, ``max_model_len``, the scheduling policy
and the served model name are the canonical policy's engine settings (``core.policy``), which ``generate`` writes
into the engine files.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from quotacalc.core.kv_groups import VLLM_BLOCK_TOKENS
from quotacalc.core.replica import replica_model
from quotacalc.emulate.engine import EngineSettings

if TYPE_CHECKING:
    from quotacalc.core.policy import QuotaPolicy
    from quotacalc.core.price import PriceResult


@dataclass(frozen=True)
class PoolServing:
    """What the server of one pool needs: its replicas' engine, its names, and the output-length rule."""

    name: str
    served_model_name: str
    lora_adapters: tuple[str, ...]
    replicas: int
    engine: EngineSettings
    kv_pool_tokens: int
    #: Fixed time to first token beside the prefill (API server, tokenizer), engine seconds.
    request_overhead_s: float
    #: Mean of the seeded output-length draw for a request that names no fixed length, tokens.
    mean_output_tokens: float


def pool_serving(
    policy: QuotaPolicy,
    priced: dict[str, PriceResult],
    name: str,
    *,
    replicas: int | None = None,
    scheduling_policy: str | None = None,
    mean_output_tokens: float | None = None,
) -> PoolServing:
    """Build pool ``name``'s serving settings from the canonical policy and the pool's price."""
    pool = next(p for p in policy.pools if p.name == name)
    result = priced[name]
    model = replica_model(result.inputs, result.kv_pool_bytes_per_gpu)
    layout = model.kv_block_layout
    block_tokens = layout.min_block_tokens if layout is not None else VLLM_BLOCK_TOKENS
    kv_pool_tokens = result.kv_pool_tokens_at_context
    engine = pool.engine
    # vLLM refuses to start where one sequence of max_model_len does not fit the pool; the pool here is whole
    # blocks, a few tokens under the priced count, so the longest sequence is what the blocks hold.
    max_model_len = min(engine.max_model_len, kv_pool_tokens // block_tokens * block_tokens)
    policy_name = scheduling_policy or engine.scheduling_policy
    adapters = sorted(
        {
            adapter
            for tenant in policy.tenants
            if name in (tenant.pool, tenant.long_context_pool)
            for adapter in tenant.lora_adapters
        }
    )
    return PoolServing(
        name=name,
        served_model_name=engine.served_model_name,
        lora_adapters=tuple(adapters),
        replicas=replicas if replicas is not None else pool.replicas,
        engine=EngineSettings(
            model=model,
            block_tokens=block_tokens,
            num_blocks=kv_pool_tokens // block_tokens,
            max_num_seqs=engine.max_num_seqs,
            max_num_batched_tokens=engine.max_num_batched_tokens,
            max_model_len=max_model_len,
            priority_policy=policy_name == "priority",
        ),
        kv_pool_tokens=kv_pool_tokens,
        request_overhead_s=model.request_overhead_s,
        mean_output_tokens=mean_output_tokens
        if mean_output_tokens is not None
        else float(result.inputs.deployment.load_output_tokens),
    )
