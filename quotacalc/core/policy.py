"""The canonical quota policy: everything a gateway or engine needs to enforce a plan (docs/method.md §3-§6).

quotacalc's own format, and complete: every exporter renders this policy and never reads the plan,
so there is one source of truth for each limit. Salts are not in it (they derive from a secret): a
tenant carries only a reference to its salt, and exporters that inject salts receive them apart.

Units: one unit is the replica time of one uncached prompt token on the tenant's pool; an output
token weighs ``output`` units (the pool's W) and a cached prompt token ``cached_prompt`` units.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from quotacalc.catalog.dtypes import dtype_by_name
from quotacalc.core import memory
from quotacalc.core.deployment import GENERIC_ENGINE, Traffic
from quotacalc.core.deployment import served_model_name as _served_model_name
from quotacalc.core.plan import Oversubscription, Plan, PlanTenant, Pool, Tier, routed_pool
from quotacalc.errors import QuotacalcError

if TYPE_CHECKING:
    from quotacalc.core.price import PriceResult

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
    prompt_per_prompt_token: float = Field(
        0.0,
        ge=0,
        description="units an uncached prompt token adds per token of its prompt (attention over the prompt): a "
        "prompt token of a prompt of L tokens costs prompt + prompt_per_prompt_token × L; the pool's "
        "prompt_length_charge.per_prompt_token",
    )
    cached_prompt: float = Field(description="units per prompt token served from the prefix cache")
    output: float = Field(description="units per output token: the pool's W")

    def request_units(self, prompt_tokens: float, cached_tokens: float, output_tokens: float) -> float:
        """A request's units: its uncached prompt tokens at their cost inside a prompt of ``prompt_tokens``, its
        cached ones at the cached weight, its output tokens at W."""
        uncached = max(prompt_tokens - cached_tokens, 0.0)
        per_prompt_token = self.prompt + self.prompt_per_prompt_token * prompt_tokens
        return uncached * per_prompt_token + cached_tokens * self.cached_prompt + output_tokens * self.output


class PromptLengthCharge(_Frozen):
    """How a pool charges a prompt token for the prompt around it: a straight line in the prompt's length.

    A prompt token attends to the tokens before it, so its replica time, in units, grows with its prompt
    (``prompt_token_units``): for full attention in a straight line, which a gateway can evaluate per request.
    The line runs from 1 unit at no prompt to the exact units at the pool's longest prompt; where layers
    attend to a window, a fixed state or a selection of the prompt, the exact curve bends below its chord's ends
    and ``max_error`` says by how much the line departs from it.
    """

    longest_prompt_tokens: int = Field(description="the pool's longest context, where the line meets the exact cost")
    units_at_longest: float = Field(description="a prompt token's units inside a prompt of longest_prompt_tokens")
    per_prompt_token: float = Field(
        description="(units_at_longest − 1) / longest_prompt_tokens: units a prompt token adds per token of its prompt"
    )
    max_error: float = Field(
        description="largest |line / exact − 1| over prompts of 1 to longest_prompt_tokens tokens (signed: negative "
        "where the line charges less than the exact cost)"
    )
    max_error_at_tokens: int = Field(description="the prompt length of max_error")


class EngineSettings(_Frozen):
    """What one replica's engine is started with (vLLM's long flag names, with underscores)."""

    model: str = Field(description="the model the engine loads (hub id or path)")
    served_model_name: str = Field(description="the model name clients and gateways use")
    tensor_parallel_size: int
    max_model_len: int = Field(description="longest sequence the engine admits, tokens")
    max_num_seqs: int = Field(description="decode batch: sequences scheduled per step")
    max_num_batched_tokens: int = Field(description="tokens per engine step (chunked-prefill budget)")
    gpu_memory_utilization: float
    kv_cache_dtype: str = Field(
        description="auto, bfloat16, fp8, ... (vLLM's spelling); a dtype vLLM has no --kv-cache-dtype choice for "
        "keeps quotacalc's name (int8, int4, fp32, mxfp4): the engine files leave it out and their LIMITS.md says so"
    )
    enable_prefix_caching: bool
    scheduling_policy: Literal["fcfs", "priority"]
    quantization: str | None = Field(
        None,
        description="weight quantization the engine applies at load (--quantization): fp8 where the price's weights "
        "are FP8 and the checkpoint is not quantized; None: the checkpoint's weights as they are",
    )
    checkpoint_weight_dtype: str | None = Field(
        None,
        description="a weight dtype the price assumed that no load-time flag gives (int8, int4, fp4 formats on a "
        "plain checkpoint): the model served must be a checkpoint already quantized to it",
    )
    enable_expert_parallel: bool = Field(
        False,
        description="MoE experts sharded whole across the replica's tensor_parallel_size GPUs, as the price assumed "
        "(the deployment's expert_parallel); False: experts split by tensor parallelism",
    )
    mamba_ssm_cache_dtype: str | None = Field(
        None,
        description="the Mamba / Gated DeltaNet recurrent state dtype the price assumed, where the deployment sets "
        "state_dtype on a model that keeps such a state (vLLM's spelling: bfloat16, float16, float32; a dtype vLLM "
        "has no choice for keeps quotacalc's name); None: the engine's default, the model's",
    )


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
    kv_pool_tokens: int = Field(
        description="KV tokens one replica holds filled with requests of the pool's context (fewer than vLLM's count "
        "at max_model_len where layers hold a window or a fixed state)"
    )
    max_context_tokens: int = Field(
        description="longest context the pool can serve, tokens: the model's maximum, capped by the KV pool"
    )
    long_context_pool: str | None = None
    route_above_prompt_tokens: int | None = None
    prompt_length_charge: PromptLengthCharge = Field(
        description="how a prompt token is charged for its prompt's length on this pool (its weights' "
        "prompt_per_prompt_token)"
    )
    usd_per_replica_month: float | None = Field(None, description="one replica: GPUs × $/GPU-hour × hours/month")
    usd_per_month: float = Field(description="the pool's replicas, used or not")
    usd_per_unit: float | None = Field(None, description="price of one unit at the utilisation ceiling, USD")
    serving_engine: str = Field(
        GENERIC_ENGINE,
        description="the engine profile the pool is priced with ('quotacalc engines'); engine settings are "
        "vLLM's, written for generic pools only",
    )
    engine: EngineSettings
    replica_urls: tuple[str, ...] | None = Field(
        None,
        description="each replica's base URL, one a replica in order, as the plan gives them (its replica_url "
        "filled in, or its replica_urls); None: the plan gives none, and a target that addresses each replica "
        "assumes the StatefulSet default (http://{pool}-{replica}.{pool}:8000/v1)",
    )

    @model_validator(mode="after")
    def _one_url_a_replica(self) -> PoolPolicy:
        if self.replica_urls is not None and len(self.replica_urls) != self.replicas:
            raise ValueError(
                f"replica_urls lists {len(self.replica_urls)} URLs for pool {self.name}'s {self.replicas} replicas: "
                "regenerate the policy from its plan"
            )
        return self


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
    load_pool: str | None = Field(
        None,
        description="the pool whose units its rate is counted in and whose replicas carry its load: the long-context "
        "pool for a tenant sized on traffic whose mean prompt routes there, else its standard pool (None: the "
        "standard pool)",
    )
    placement: Literal["shared", "dedicated"]
    rate_source: Literal["contract", "traffic"] = Field(
        "contract", description="contract: units_per_s as sold; traffic: sized from the tenant's traffic profile"
    )
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


#: Float noise (e.g. 60 s × rate / rate = 60.000000000001) must not add a second to a Retry-After.
_CEIL_TOLERANCE = 1e-9


def _ceil(value: float) -> int:
    return math.ceil(value - _CEIL_TOLERANCE * max(1.0, abs(value)))


def retry_after_s(deficit_units: float, bucket_rate_units_per_s: float) -> int:
    """Seconds until a bucket refilling at ``bucket_rate_units_per_s`` holds ``deficit_units`` more, rounded up."""
    if deficit_units <= 0:
        return 0
    return _ceil(deficit_units / bucket_rate_units_per_s)


def replica_for_tier(replica: PriceResult, tier: Tier) -> PriceResult:
    """A pool's price with the tier's cached-prompt weight and burst, which ``size_traffic`` reads from the deployment."""
    deployment = replica.inputs.deployment.model_copy(
        update={"cached_prompt_weight": tier.cached_prompt_weight, "burst_s": tier.burst_s}
    )
    return replica.model_copy(update={"inputs": replica.inputs.model_copy(update={"deployment": deployment})})


def prompt_token_units(replica: PriceResult, prompt_tokens: float) -> float:
    """A prompt token's units inside a prompt of ``prompt_tokens``: it attends to those before it
    (``core.kv.request_kv``'s prompt_token_units_at_context, without the KV figures it also computes)."""
    if prompt_tokens < 1:
        return 1.0
    active_flops = 2 * replica.active_params
    attention = memory.attention_flops_per_prompt_token(
        replica.inputs.arch, max(1, round(prompt_tokens)), replica.inputs.deployment.tp
    )
    return (active_flops + attention) / active_flops


#: Prompt lengths ``prompt_length_charge`` compares its line with the exact cost at, log-spaced to the longest.
_CHARGE_CHECK_POINTS = 48


def prompt_length_charge(replica: PriceResult, longest_prompt_tokens: int | None = None) -> PromptLengthCharge:
    """The straight-line charge of a prompt token in its prompt's length on ``replica``'s pool, anchored at
    ``longest_prompt_tokens`` (default: ``pool_max_context_tokens``), and its largest departure from the exact
    ``prompt_token_units`` below that."""
    longest = longest_prompt_tokens if longest_prompt_tokens is not None else pool_max_context_tokens(replica)
    longest = max(1, longest)
    at_longest = prompt_token_units(replica, longest)
    slope = (at_longest - 1.0) / longest
    lengths = sorted({max(1, round(longest ** (step / _CHARGE_CHECK_POINTS))) for step in range(_CHARGE_CHECK_POINTS)})
    worst, worst_at = 0.0, longest
    for length in lengths:
        error = (1.0 + slope * length) / prompt_token_units(replica, length) - 1.0
        if abs(error) > abs(worst):
            worst, worst_at = error, length
    return PromptLengthCharge(
        longest_prompt_tokens=longest,
        units_at_longest=at_longest,
        per_prompt_token=slope,
        max_error=worst,
        max_error_at_tokens=worst_at,
    )


def traffic_units_per_s(
    traffic: Traffic, cached_prompt_weight: float, output_weight: float, prompt_units: float = 1.0
) -> float:
    """A traffic profile's load (docs/method.md §1): rps × (uncached prompt × a prompt token's units inside
    its prompt + cached prompt × its weight + W × output).

    ``core.traffic.size_traffic``'s units, without the per-request KV figures it adds (80 layers summed
    per tenant, which a 1,000-tenant plan cannot afford); the tests hold the two equal.
    """
    uncached = traffic.prompt_tokens * (1 - traffic.cached_fraction)
    cached = traffic.prompt_tokens * traffic.cached_fraction
    return traffic.rps * (
        uncached * prompt_units + cached * cached_prompt_weight + output_weight * traffic.output_tokens
    )


def tenant_units_per_s(
    tenant: PlanTenant, tier: Tier, replica: PriceResult, prompt_units: float | None = None
) -> float:
    """A tenant's contracted units/s, or its traffic sized on its pool with its tier's cached-prompt weight.

    ``prompt_units``: ``prompt_token_units(replica, traffic.prompt_tokens)`` when the caller has it.
    """
    if tenant.units_per_s is not None:
        return tenant.units_per_s
    assert tenant.traffic is not None  # a PlanTenant has exactly one of the two
    traffic = tenant.traffic
    if prompt_units is None:
        prompt_units = prompt_token_units(replica, traffic.prompt_tokens)
    return traffic_units_per_s(traffic, tier.cached_prompt_weight, replica.output_weight, prompt_units)


def pool_max_context_tokens(replica: PriceResult) -> int:
    """The longest context a replica serves: the model's maximum or the engine's max_model_len, and never more than
    its KV pool holds."""
    limits = (replica.inputs.arch.max_context_tokens, replica.inputs.deployment.max_model_len, replica.kv_pool_tokens)
    return min(limit for limit in limits if limit)


#: vLLM's --kv-cache-dtype spelling of quotacalc's dtype names; the others (fp32, int8, int4, mxfp4) have none.
_VLLM_KV_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp8": "fp8", "nvfp4": "nvfp4"}
#: A named FP8 format (catalog/dtypes.py's aliases of fp8) as vLLM's --kv-cache-dtype choice.
_FP8_FORMATS = {
    "fp8_e4m3": "fp8_e4m3",
    "e4m3": "fp8_e4m3",
    "float8_e4m3fn": "fp8_e4m3",
    "fp8_e5m2": "fp8_e5m2",
    "e5m2": "fp8_e5m2",
}


#: The --kv-cache-dtype values the engine files may write: those of vLLM 0.33.0's CacheDType
#: (tests/targets/vllm-0.33.0-flags.json) that one of quotacalc's dtypes is. int8_per_token_head and the like are
#: other formats (per-token scales) than the ones quotacalc prices, so int8 is not one of them.
VLLM_KV_CACHE_DTYPES = frozenset({"auto", *_VLLM_KV_DTYPES.values(), *_FP8_FORMATS.values()})
#: vLLM's --mamba-ssm-cache-dtype spelling of quotacalc's dtype names (its choices: auto, bfloat16, float16, float32).
_VLLM_STATE_DTYPES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}
#: The --mamba-ssm-cache-dtype values the engine files may write (vLLM 0.33.0's CacheConfig.mamba_ssm_cache_dtype).
VLLM_MAMBA_SSM_CACHE_DTYPES = frozenset({"auto", *_VLLM_STATE_DTYPES.values()})


def _kv_cache_dtype(replica: PriceResult) -> str:
    # 'auto' is the checkpoint's dtype; a model whose cache vLLM keeps in another (DeepSeek V4's fp8) names it.
    if replica.inputs.deployment.kv_dtype in (None, "auto") and replica.inputs.kv_dtype.name == (
        replica.inputs.arch.checkpoint_dtype
    ):
        return "auto"
    # quotacalc prices every FP8 format alike (one byte), but the engine must keep the one asked for.
    given = (replica.inputs.deployment.kv_dtype or "").lower()
    if given in _FP8_FORMATS:
        return _FP8_FORMATS[given]
    # A dtype vLLM cannot keep (int8, fp32, ...) stays as quotacalc names it: the policy records what the price
    # assumed, and the engine files, which may only write VLLM_KV_CACHE_DTYPES, leave it out and say so.
    name = replica.inputs.kv_dtype.name
    return _VLLM_KV_DTYPES.get(name, name)


def _mamba_ssm_cache_dtype(replica: PriceResult) -> str | None:
    # Unset or 'auto': the engine's default is the dtype the price assumed (the config's mamba_ssm_dtype, else the
    # checkpoint's), so nothing to write. A model without recurrent state is priced alike whatever the setting.
    if replica.inputs.deployment.state_dtype in (None, "auto") or not replica.inputs.arch.keeps_recurrent_state():
        return None
    name = replica.inputs.state_dtype.name
    return _VLLM_STATE_DTYPES.get(name, name)


def _engine(pool: Pool, replica: PriceResult, routed: list[tuple[Tier, int]]) -> EngineSettings:
    """Engine settings that keep the engine's queue shallow: fairness is the gateway's job (docs/method.md §3).

    ``routed``: each tier routed here with the longest sequence it can bring to this pool.
    """
    deployment = pool.deployment
    served = pool_max_context_tokens(replica)
    longest = max((length for _, length in routed), default=served)
    priorities = {tier.priority for tier, _ in routed}
    loaded = deployment.serve_model or replica.inputs.hub_id or deployment.model
    return EngineSettings(
        model=loaded,
        served_model_name=_served_model_name(loaded),
        tensor_parallel_size=deployment.tp,
        max_model_len=min(longest, served),
        # The decode batch the price assumes, no more than the KV pool holds at the mean context (nor the
        # deployment's own max_num_seqs): a deeper engine queue would take the ordering away from the
        # gateway's fair scheduler.
        max_num_seqs=max(
            1,
            min(
                deployment.batch,
                replica.max_resident_sequences,
                deployment.max_num_seqs if deployment.max_num_seqs is not None else deployment.batch,
            ),
        ),
        # The budget the price assumed (its KV reserve grows with it): the deployment's, or its engine's default.
        max_num_batched_tokens=memory.max_num_batched_tokens(deployment, replica.inputs.gpu),
        gpu_memory_utilization=replica.memory_utilization,
        kv_cache_dtype=_kv_cache_dtype(replica),
        enable_prefix_caching=True,
        scheduling_policy="priority" if len(priorities) > 1 else "fcfs",
        **_weight_loading(replica),
        # The price splits the experts whole over the replica's GPUs: without the flag vLLM splits each by TP.
        enable_expert_parallel=deployment.expert_parallel,
        mamba_ssm_cache_dtype=_mamba_ssm_cache_dtype(replica),
    )


#: Weight dtypes an engine quantizes a plain (bf16/fp16) checkpoint to at load, and the --quantization that does it
#: (vLLM's and SGLang's online FP8: per-tensor scales computed when the weights load).
_ONLINE_QUANTIZATION = {"fp8": "fp8"}


def _weight_loading(replica: PriceResult) -> dict[str, str]:
    """How the engine gets the weights the price assumed: nothing for the checkpoint's own (or its quantization),
    ``quantization`` where a load-time flag quantizes them, else the dtype the served checkpoint must already have."""
    inputs = replica.inputs
    requested = inputs.deployment.weight_dtype
    if requested is None:
        return {}
    name = dtype_by_name(requested).name
    if inputs.checkpoint_quantization is not None:
        # A quantized checkpoint loads in its own format: a price in another (gpt-oss's MXFP4 priced at FP8) holds
        # only for a checkpoint quantized to it. A method that names no one format (compressed-tensors) is trusted.
        try:
            own = dtype_by_name(inputs.checkpoint_quantization).name
        except QuotacalcError:
            return {}
        return {} if own == name else {"checkpoint_weight_dtype": name}
    if name in (inputs.arch.checkpoint_dtype, "bf16", "fp16", "fp32"):
        return {}  # the checkpoint's own precision (a 16-bit cast is the engine's --dtype, not a quantization)
    if name in _ONLINE_QUANTIZATION:
        return {"quantization": _ONLINE_QUANTIZATION[name]}
    return {"checkpoint_weight_dtype": name}


def _weights(tier: Tier, replica: PriceResult, charge: PromptLengthCharge) -> UnitWeights:
    return UnitWeights(
        prompt_per_prompt_token=charge.per_prompt_token,
        cached_prompt=tier.cached_prompt_weight,
        output=replica.output_weight,
    )


def build_policy(plan: Plan, priced_pools: Mapping[str, PriceResult]) -> QuotaPolicy:
    """The canonical policy of a plan, given each pool's price (``priced_pools[pool.name]``).

    Pure: the caller prices the pools (resolve + ``core.price.price``). Sound plans only in spirit:
    an unsound plan (oversold, caps a pool cannot honour) still gets a policy; ``core.checks`` says why
    it should not ship.
    """
    tenants: list[TenantPolicy] = []
    routed: dict[str, list[tuple[Tier, int]]] = {pool.name: [] for pool in plan.pools}
    # Tenants of a pool often share prompt sizes: one attention sum (over every layer) per size.
    prompt_units: dict[tuple[str, int], float] = {}
    charges = {pool.name: prompt_length_charge(priced_pools[pool.name]) for pool in plan.pools}
    for tenant in plan.tenants:
        tier = plan.tier(tenant.tier)
        pool = plan.standard_pool_of(tenant)
        replica = priced_pools[pool.name]
        units = None
        load_pool = pool.name
        if tenant.traffic is not None:
            prompt = tenant.traffic.prompt_tokens
            # A mean request routed to the long-context pool is sized in units there, as it is charged.
            load_pool = routed_pool(pool.name, pool.long_context_pool, pool.route_above_prompt_tokens, prompt)
            key = (load_pool, round(prompt) if prompt >= 1 else -1)  # below one token: no attention term
            if key not in prompt_units:
                prompt_units[key] = prompt_token_units(priced_pools[load_pool], tenant.traffic.prompt_tokens)
            units = prompt_units[key]
        rate = tenant_units_per_s(tenant, tier, priced_pools[load_pool], units)
        depth = tier.burst_s * rate
        threshold = pool.route_above_prompt_tokens
        long_pool = pool.long_context_pool
        if threshold is not None and tier.max_context_tokens <= threshold:
            # The tier admits no prompt above the threshold: none of the tenant's requests goes long.
            threshold, long_pool = None, None
        if long_pool is not None and threshold is not None:
            routed[pool.name].append((tier, min(tier.max_context_tokens, threshold + tier.max_output_tokens)))
            routed[long_pool].append((tier, tier.max_context_tokens))
        else:
            routed[pool.name].append((tier, tier.max_context_tokens))
        tenants.append(
            TenantPolicy(
                name=tenant.name,
                tier=tier.name,
                pool=pool.name,
                long_context_pool=long_pool,
                route_above_prompt_tokens=threshold,
                load_pool=load_pool,
                placement=tenant.placement,
                rate_source="contract" if tenant.units_per_s is not None else "traffic",
                bucket_rate_units_per_s=rate,
                bucket_depth_units=depth,
                weights=_weights(tier, replica, charges[pool.name]),
                long_context_weights=_weights(tier, priced_pools[long_pool], charges[long_pool]) if long_pool else None,
                kv_cap_tokens_per_replica=tier.kv_cap_tokens_per_replica,
                max_context_tokens=tier.max_context_tokens,
                max_output_tokens=tier.max_output_tokens,
                max_concurrent_sequences=tier.max_concurrent_sequences,
                priority=tier.priority,
                retry_after=RetryAfter(bucket_rate_units_per_s=rate, max_s=retry_after_s(depth, rate)),
                cache_isolation=tenant.cache_isolation,
                salt_ref=tenant.name if tenant.cache_isolation == "salted" else None,
                lora_adapters=tenant.lora_adapters,
            )
        )
    pools = []
    for pool in plan.pools:
        replica = priced_pools[pool.name]
        pools.append(
            PoolPolicy(
                name=pool.name,
                role=pool.role,
                replicas=pool.replicas,
                gpu=pool.deployment.gpu,
                gpus_per_replica=pool.deployment.tp,
                output_weight=replica.output_weight,
                replica_units_per_s=replica.replica_units_per_s,
                capacity_units_per_s=pool.replicas * replica.replica_units_per_s,
                kv_pool_tokens=replica.kv_pool_tokens_at_context,
                max_context_tokens=pool_max_context_tokens(replica),
                long_context_pool=pool.long_context_pool,
                route_above_prompt_tokens=pool.route_above_prompt_tokens,
                prompt_length_charge=charges[pool.name],
                usd_per_replica_month=replica.dedicated_usd_per_month,
                usd_per_month=pool.replicas * replica.dedicated_usd_per_month,
                usd_per_unit=replica.usd_per_unit,
                serving_engine=pool.deployment.engine,
                engine=_engine(pool, replica, routed[pool.name]),
                replica_urls=pool.replica_base_urls(),
            )
        )
    return QuotaPolicy(
        tenant_header=plan.tenant_header,
        pools=tuple(pools),
        tiers=plan.tiers,
        tenants=tuple(tenants),
        public_prefixes=plan.public_prefixes,
        oversubscription=plan.oversubscription,
    )
