"""The canonical quota policy: everything a gateway or engine needs to enforce a plan (docs/method.md §3-§6).

quotacalc's own format, and complete: every exporter renders this policy and never reads the plan,
so there is one source of truth for each limit. Salts are not in it (they derive from a secret): a
tenant carries only a reference to its salt, and exporters that inject salts receive them apart.

Units: one unit is the replica time of one uncached prompt token on the tenant's pool; an output
token weighs ``output`` units (the pool's W) and a cached prompt token ``cached_prompt`` units.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from quotacalc.core.plan import Oversubscription, Tier

#: Bumped only when a key is renamed or removed.
POLICY_SCHEMA_VERSION = 1

#: The Retry-After rule every target implements as far as it can: seconds until the bucket holds the
#: request's units again, rounded up.
RETRY_AFTER_RULE = "ceil(deficit_units / bucket_rate_units_per_s)"


class _Frozen(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")


class UnitWeights(_Frozen):
    """Units charged per token of each kind."""

    prompt: float = Field(1.0, description="units per uncached prompt token (1 by definition)")
    cached_prompt: float = Field(description="units per prompt token served from the prefix cache")
    output: float = Field(description="units per output token: the pool's W")


class EngineSettings(_Frozen):
    """What one replica's engine is started with (vLLM's long flag names, with underscores)."""

    model: str = Field(description="the model the engine loads (hub id or path)")
    served_model_name: str = Field(description="the model name clients and gateways use")
    tensor_parallel_size: int
    max_model_len: int = Field(description="longest sequence the engine admits, tokens")
    max_num_seqs: int = Field(description="decode batch: sequences scheduled per step")
    max_num_batched_tokens: int = Field(description="tokens per engine step (chunked-prefill budget)")
    gpu_memory_utilization: float
    kv_cache_dtype: str = Field(description="auto, bfloat16, fp8, ...")
    enable_prefix_caching: bool
    scheduling_policy: Literal["fcfs", "priority"]


class PoolPolicy(_Frozen):
    """A pool's capacity and engine settings."""

    name: str
    role: Literal["standard", "long_context"]
    replicas: int
    gpu: str
    gpus_per_replica: int
    output_weight: float = Field(description="W: units per output token on this pool")
    replica_units_per_s: float = Field(description="units/s one replica sells at the utilisation ceiling")
    capacity_units_per_s: float = Field(description="replicas × replica_units_per_s")
    kv_pool_tokens: int = Field(description="KV tokens one replica holds")
    max_context_tokens: int = Field(description="longest context the pool serves, tokens")
    long_context_pool: str | None = None
    route_above_prompt_tokens: int | None = None
    usd_per_month: float = Field(description="the pool's replicas, used or not")
    engine: EngineSettings


class RetryAfter(_Frozen):
    """How a 429's Retry-After is computed for a tenant."""

    rule: str = Field(RETRY_AFTER_RULE, description="the formula, in the policy's variable names")
    bucket_rate_units_per_s: float
    max_s: int = Field(description="the longest Retry-After: a full bucket's refill time, rounded up")


class TenantPolicy(_Frozen):
    """Everything enforced for one tenant."""

    name: str
    tier: str
    pool: str = Field(description="the standard pool the tenant's requests go to")
    long_context_pool: str | None = Field(None, description="where prompts above the threshold go")
    route_above_prompt_tokens: int | None = None
    placement: Literal["shared", "dedicated"]
    bucket_rate_units_per_s: float = Field(description="token-bucket refill: the contracted units/s")
    bucket_depth_units: float = Field(description="token-bucket depth: burst_s × rate")
    weights: UnitWeights = Field(description="weights on the tenant's standard pool")
    long_context_weights: UnitWeights | None = Field(None, description="weights on its long-context pool")
    kv_cap_tokens_per_replica: int
    max_context_tokens: int
    max_output_tokens: int = Field(description="output reservation cap: the largest max_tokens admitted")
    max_concurrent_sequences: int
    priority: int = Field(description="0 the most important")
    retry_after: RetryAfter
    cache_isolation: Literal["salted", "shared"]
    salt_ref: str | None = Field(None, description="key of the tenant's salt in the salts file; None when shared")
    lora_adapters: tuple[str, ...] = ()


class QuotaPolicy(_Frozen):
    """The canonical policy of a plan."""

    schema_version: int = POLICY_SCHEMA_VERSION
    tenant_header: str
    pools: tuple[PoolPolicy, ...]
    tiers: tuple[Tier, ...]
    tenants: tuple[TenantPolicy, ...]
    public_prefixes: tuple[str, ...] = ()
    oversubscription: Oversubscription | None = None
