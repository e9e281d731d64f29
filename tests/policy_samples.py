"""Hand-built canonical policies for the exporter tests: each exporter is tested on a policy stated by hand, not
through build_policy, so a fault in one does not hide in the other.

The standard pool is docs/method.md §7's worked example (Llama 3.3 70B FP8, TP=4 on H100 SXM): W = 3.09,
18,232 units/s per replica at the 0.65 ceiling, 646,503 KV tokens per replica, $7,200 per replica-month.
The long-context pool serves the same model at 128K: its decode step reads more KV per token (mean
context about 16K tokens instead of 1,700), so its W is higher; 4.6 is a stated assumption of this
sample, not a computed figure. Three tiers, eight tenants, one of them dedicated.
"""

from __future__ import annotations

import math

from quotacalc.core.plan import Oversubscription, Tier
from quotacalc.core.policy import (
    EngineSettings,
    PoolPolicy,
    PromptLengthCharge,
    QuotaPolicy,
    RetryAfter,
    TenantPolicy,
    UnitWeights,
)

MODEL = "RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic"
SERVED = "llama-3.3-70b"

TIERS = (
    Tier(
        name="premium",
        max_context_tokens=131072,
        kv_cap_tokens_per_replica=262144,
        max_concurrent_sequences=64,
        max_output_tokens=8192,
        priority=0,
        burst_s=60.0,
        cached_prompt_weight=0.1,
    ),
    Tier(
        name="standard",
        max_context_tokens=32768,
        kv_cap_tokens_per_replica=98304,
        max_concurrent_sequences=32,
        max_output_tokens=4096,
        priority=1,
        burst_s=60.0,
        cached_prompt_weight=0.1,
    ),
    Tier(
        name="batch",
        max_context_tokens=16384,
        kv_cap_tokens_per_replica=32768,
        max_concurrent_sequences=16,
        max_output_tokens=2048,
        priority=2,
        burst_s=300.0,
        cached_prompt_weight=0.25,
    ),
)

REPLICA_UNITS_PER_S = 18232.0
STANDARD_W = 3.09
LONG_W = 4.6

#: Llama 3.3 70B's attention FLOPs per attended key (docs/method.md §2): QK^T and AV at 2 FLOPs a multiply-add,
#: 64 query heads × 128 dims, 80 layers = 2,621,440; a prompt token of a causal prompt of L tokens attends to
#: (L + 1) / 2 keys on average. Its linear layers: 2 × 70,553,706,496 FLOPs a token.
ATTENTION_FLOPS_PER_KEY = 2 * 2 * 64 * 128 * 80
LINEAR_FLOPS_PER_TOKEN = 2 * 70_553_706_496


def prompt_charge(longest_prompt_tokens: int) -> PromptLengthCharge:
    """The straight-line prompt charge of the sample's model, anchored at ``longest_prompt_tokens`` (exact for
    full attention, but for the half key a token attends beyond the line's: below 1e-5 of a unit)."""
    units = 1 + ATTENTION_FLOPS_PER_KEY * (longest_prompt_tokens + 1) / 2 / LINEAR_FLOPS_PER_TOKEN
    return PromptLengthCharge(
        longest_prompt_tokens=longest_prompt_tokens,
        units_at_longest=units,
        per_prompt_token=(units - 1) / longest_prompt_tokens,
        max_error=0.0,
        max_error_at_tokens=longest_prompt_tokens,
    )


STANDARD_CHARGE = prompt_charge(32768)
LONG_CHARGE = prompt_charge(131072)


def _engine(max_model_len: int, max_num_seqs: int, policy: str = "priority") -> EngineSettings:
    return EngineSettings(
        model=MODEL,
        served_model_name=SERVED,
        tensor_parallel_size=4,
        max_model_len=max_model_len,
        max_num_seqs=max_num_seqs,
        max_num_batched_tokens=8192,
        gpu_memory_utilization=0.9,
        kv_cache_dtype="auto",
        enable_prefix_caching=True,
        scheduling_policy=policy,
    )


def _pools(scheduling_policy: str = "priority") -> tuple[PoolPolicy, ...]:
    return (
        PoolPolicy(
            name="standard",
            role="standard",
            replicas=6,
            gpu="H100-SXM",
            gpus_per_replica=4,
            output_weight=STANDARD_W,
            replica_units_per_s=REPLICA_UNITS_PER_S,
            capacity_units_per_s=6 * REPLICA_UNITS_PER_S,
            kv_pool_tokens=646503,
            max_context_tokens=32768,
            long_context_pool="long",
            route_above_prompt_tokens=32768,
            prompt_length_charge=STANDARD_CHARGE,
            usd_per_month=6 * 7200.0,
            engine=_engine(32768, 128, scheduling_policy),
        ),
        PoolPolicy(
            name="long",
            role="long_context",
            replicas=2,
            gpu="H100-SXM",
            gpus_per_replica=4,
            output_weight=LONG_W,
            replica_units_per_s=REPLICA_UNITS_PER_S,
            capacity_units_per_s=2 * REPLICA_UNITS_PER_S,
            kv_pool_tokens=646503,
            max_context_tokens=131072,
            prompt_length_charge=LONG_CHARGE,
            usd_per_month=2 * 7200.0,
            engine=_engine(131072, 16, scheduling_policy),
        ),
    )


# name, tier, units/s, placement, cache isolation, LoRA adapters
_TENANTS = (
    ("acme", "premium", 17725.0, "dedicated", "salted", ("acme-support-v2",)),
    ("globex", "premium", 9000.0, "shared", "salted", ()),
    ("initech", "standard", 4000.0, "shared", "salted", ("initech-sql",)),
    ("umbrella", "standard", 3500.0, "shared", "salted", ()),
    ("hooli", "standard", 2500.0, "shared", "shared", ()),
    ("stark", "standard", 1800.0, "shared", "salted", ()),
    ("wayne", "batch", 6000.0, "shared", "salted", ()),
    ("wonka", "batch", 750.5, "shared", "shared", ()),
)


def tenant_policy(
    name: str,
    tier: Tier,
    units_per_s: float,
    placement: str = "shared",
    cache_isolation: str = "salted",
    lora_adapters: tuple[str, ...] = (),
    long_context: bool = True,
) -> TenantPolicy:
    """One tenant's policy as build_policy is specified to make it."""
    depth = tier.burst_s * units_per_s
    weights = UnitWeights(
        prompt=1.0,
        prompt_per_prompt_token=STANDARD_CHARGE.per_prompt_token,
        cached_prompt=tier.cached_prompt_weight,
        output=STANDARD_W,
    )
    routed = long_context and tier.max_context_tokens > 32768
    return TenantPolicy(
        name=name,
        tier=tier.name,
        pool="standard",
        long_context_pool="long" if routed else None,
        route_above_prompt_tokens=32768 if routed else None,
        placement=placement,
        bucket_rate_units_per_s=units_per_s,
        bucket_depth_units=depth,
        weights=weights,
        long_context_weights=UnitWeights(
            prompt=1.0,
            prompt_per_prompt_token=LONG_CHARGE.per_prompt_token,
            cached_prompt=tier.cached_prompt_weight,
            output=LONG_W,
        )
        if routed
        else None,
        kv_cap_tokens_per_replica=tier.kv_cap_tokens_per_replica,
        max_context_tokens=tier.max_context_tokens,
        max_output_tokens=tier.max_output_tokens,
        max_concurrent_sequences=tier.max_concurrent_sequences,
        priority=tier.priority,
        retry_after=RetryAfter(bucket_rate_units_per_s=units_per_s, max_s=math.ceil(tier.burst_s)),
        cache_isolation=cache_isolation,
        salt_ref=name if cache_isolation == "salted" else None,
        lora_adapters=lora_adapters,
    )


def platform_policy(scheduling_policy: str = "priority") -> QuotaPolicy:
    """Three tiers, eight tenants, a standard and a long-context pool."""
    tiers = {tier.name: tier for tier in TIERS}
    tenants = tuple(
        tenant_policy(name, tiers[tier], rate, placement, isolation, adapters)
        for name, tier, rate, placement, isolation, adapters in _TENANTS
    )
    return QuotaPolicy(
        tenant_header="x-tenant-id",
        pools=_pools(scheduling_policy),
        tiers=TIERS,
        tenants=tenants,
        public_prefixes=("platform-system-prompt-v3",),
        oversubscription=Oversubscription(ratio=1.4, source="sample: sum of per-tenant p99 peaks over fleet peak"),
    )


def many_tenants_policy(count: int) -> QuotaPolicy:
    """``count`` standard-tier tenants: enough to split routes (15 rules each) and rule lists."""
    tier = TIERS[1]
    tenants = tuple(
        tenant_policy(f"tenant-{index:04d}", tier, 100.0 + index, cache_isolation="salted") for index in range(count)
    )
    return QuotaPolicy(tenant_header="x-tenant-id", pools=_pools(), tiers=TIERS, tenants=tenants)


def sample_salts(policy: QuotaPolicy) -> dict[str, str]:
    """Stand-in salts (64 hex characters, as HMAC-SHA256 gives) keyed by salt_ref."""
    import hashlib

    return {
        tenant.salt_ref: hashlib.sha256(f"sample-secret/{tenant.salt_ref}".encode()).hexdigest()
        for tenant in policy.tenants
        if tenant.salt_ref is not None
    }
