"""Findings about a plan: is it sound to ship (docs/method.md §2-§6)? Pure: the policy carries every figure.

Each finding has a severity (error: the plan cannot be honoured; warning: it can, but the method
advises against it; info: a figure worth seeing), the plan entry it is about, and the numbers behind it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from quotacalc.core.deployment import GENERIC_ENGINE, Traffic
from quotacalc.core.memory import token_budget_below_sequences
from quotacalc.core.plan import MAX_UNITS_PER_S, routed_pool
from quotacalc.core.plan_size import load_pool_of
from quotacalc.core.policy import VLLM_KV_CACHE_DTYPES, PoolPolicy, QuotaPolicy, TenantPolicy
from quotacalc.core.pricing_warning import KeyNamer, PricingWarning, key_words
from quotacalc.core.salts import looks_like_salt, salt_lora_collisions
from quotacalc.core.traffic import bucket_shortfall, whole_replicas
from quotacalc.core.words import plural

Severity = Literal["error", "warning", "info"]
#: Findings are listed errors first, then warnings, then infos.
_SEVERITY_ORDER: tuple[Severity, ...] = ("error", "warning", "info")

#: A tenant whose load exceeds this many replicas triggers the reversal condition (docs/method.md §6).
DEFAULT_REVERSAL_REPLICAS = 2.0


class Finding(BaseModel):
    """One thing ``check`` has to say about the plan."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    severity: Severity
    code: str = Field(description="stable identifier of the kind of finding")
    subject: str = Field(description="the plan entry it is about, e.g. pools.shared or tenants.acme")
    message: str
    fix: str | None = None
    figures: dict[str, float] = Field(default_factory=dict, description="the numbers behind the finding")


class CheckResult(BaseModel):
    """Every finding, errors first."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    findings: tuple[Finding, ...]
    reversal_replicas: float
    salts_checked: bool

    def count(self, severity: Severity) -> int:
        return sum(1 for finding in self.findings if finding.severity == severity)


def _usd(value: float) -> str:
    return f"${value:,.0f}"


def _capacity(policy: QuotaPolicy) -> list[Finding]:
    findings = []
    measured = policy.oversubscription
    # Each tenant's units go to the pool they are counted in, as size counts them: a tenant sized on traffic whose
    # mean prompt is above its pool's threshold is sized in the long-context pool's units and loads that pool.
    load = {tenant.name: load_pool_of(tenant) for tenant in policy.tenants}
    for pool in policy.pools:
        loading = [t for t in policy.tenants if load[t.name] == pool.name]
        sold = math.fsum(t.bucket_rate_units_per_s for t in loading)
        raised = (
            measured is not None and bool(loading) and all(measured.raises(pool.name, t.placement) for t in loading)
        )
        ratio = measured.ratio if measured is not None and raised else 1.0
        limit = pool.capacity_units_per_s * ratio
        figures = {"units_sold_per_s": sold, "capacity_units_per_s": pool.capacity_units_per_s, "ratio": ratio}
        over = f" × measured oversubscription {ratio:g}" if raised else ""
        scope = ""
        if pool.role == "long_context":
            # A contract, or traffic whose mean prompt stays below the threshold, does not say what share of its units
            # arrives above it: those long prompts load this pool uncounted, and the finding says so.
            uncounted = [
                t.name for t in policy.tenants if t.long_context_pool == pool.name and load[t.name] != pool.name
            ]
            scope = ": counted, the tenants sized on traffic whose mean prompt routes here" + (
                f"; not counted, the long prompts of {_names(uncounted)}, whose share above the threshold the plan "
                "does not say"
                if uncounted
                else ""
            )
        if sold > limit:
            needed = math.ceil(sold / (pool.replica_units_per_s * ratio) - 1e-9)
            findings.append(
                Finding(
                    severity="error",
                    code="oversold",
                    subject=f"pools.{pool.name}",
                    message=(
                        f"{sold:,.0f} units/s sold, above the capacity of {limit:,.0f} units/s "
                        f"({plural(pool.replicas, 'replica')} × {pool.replica_units_per_s:,.0f} at the ceiling{over}){scope}"
                    ),
                    fix=f"raise replicas to {needed}, move tenants, or measure an oversubscription ratio",
                    figures=figures,
                )
            )
        else:
            findings.append(
                Finding(
                    severity="info",
                    code="capacity",
                    subject=f"pools.{pool.name}",
                    message=(
                        f"{sold:,.0f} of {limit:,.0f} units/s sold ({100 * sold / limit:.0f}%, "
                        f"{plural(pool.replicas, 'replica')} at the ceiling{over}){scope}"
                    ),
                    figures=figures,
                )
            )
    if measured is None:
        findings.append(
            Finding(
                severity="info",
                code="oversubscription",
                subject="oversubscription",
                message="no oversubscription assumed: capacity is checked against units sold one for one",
                fix="measure the ratio (sum of per-tenant peaks / fleet peak) from usage data to sell more",
            )
        )
    else:
        # Where the ratio comes from, beside the capacity it raises: a ratio is only as good as its measurement.
        scope = f" (raises pool {measured.pool} only)" if measured.pool else " (raises the pools of shared tenants)"
        findings.append(
            Finding(
                severity="info",
                code="oversubscription",
                subject="oversubscription",
                message=f"measured oversubscription {measured.ratio:g}{scope}: {measured.source}",
                figures={"ratio": measured.ratio},
            )
        )
    return findings


def _names(names: list[str], shown: int = 3) -> str:
    """At most ``shown`` names, and how many more: a 1,000-tenant plan's finding stays one line."""
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def _routing(policy: QuotaPolicy, pools: dict[str, PoolPolicy], flat_plan: bool = False) -> list[Finding]:
    """A standard pool's long prompts must reach the same model: a long-context pool serving another answers them
    with another model."""
    findings = []
    for pool in policy.pools:
        long = pools.get(pool.long_context_pool or "")
        if long is not None and long.engine.served_model_name != pool.engine.served_model_name:
            findings.append(
                Finding(
                    severity="error",
                    code="long-context-model",
                    subject=f"pools.{pool.name}",
                    message=f"routes prompts above {pool.route_above_prompt_tokens:,} tokens to pool '{long.name}', "
                    f"which serves {long.engine.served_model_name}, not {pool.engine.served_model_name}",
                    fix=f"serve {pool.engine.served_model_name} on '{long.name}', or route to a pool that does",
                )
            )
    for pool in policy.pools:
        engine = pool.engine
        if pool.serving_engine == GENERIC_ENGINE and token_budget_below_sequences(
            engine.max_num_batched_tokens, engine.max_num_seqs
        ):
            # vLLM's SchedulerConfig refuses it at start-up: a step could not give every running sequence a token.
            findings.append(
                Finding(
                    severity="error",
                    code="engine-token-budget",
                    subject=f"pools.{pool.name}",
                    message=f"max_num_batched_tokens {engine.max_num_batched_tokens:,} is below max_num_seqs "
                    f"{engine.max_num_seqs:,}: vLLM refuses to start",
                    fix=f"raise {'' if flat_plan else f'pools.{pool.name}.deployment.'}max_num_batched_tokens to "
                    f"at least {engine.max_num_seqs:,}, or lower its max_num_seqs",
                )
            )
        if pool.serving_engine == GENERIC_ENGINE and engine.kv_cache_dtype not in VLLM_KV_CACHE_DTYPES:
            # vLLM refuses a --kv-cache-dtype outside its choices: the vllm target leaves it out, and vLLM's default
            # (the checkpoint's) is not the cache the price sized.
            findings.append(
                Finding(
                    severity="warning",
                    code="engine-kv-cache-dtype",
                    subject=f"pools.{pool.name}",
                    message=f"KV cache dtype {engine.kv_cache_dtype} has no vLLM kv-cache-dtype choice: the vllm "
                    "file leaves it out, so vLLM keeps the checkpoint's dtype and a KV pool of another size than "
                    "priced",
                    fix=f"set {'' if flat_plan else f'pools.{pool.name}.deployment.'}kv_dtype to one vLLM keeps "
                    "(auto, bf16, fp16, fp8, nvfp4)",
                )
            )
    reached = {pool.long_context_pool for pool in policy.pools if pool.long_context_pool}
    for pool in policy.pools:
        if pool.role == "long_context" and pool.name not in reached:
            findings.append(
                Finding(
                    severity="warning",
                    code="unreachable-pool",
                    subject=f"pools.{pool.name}",
                    message=f"a long-context pool no pool routes to: its {plural(pool.replicas, 'replica')} "
                    f"({_usd(pool.usd_per_month)}/month) serve nothing",
                    fix=f"name it as a standard pool's long_context_pool, or remove pool '{pool.name}'",
                )
            )
    for tenant in policy.tenants:
        models = {pools[name].engine.served_model_name for name in _routes(tenant)} | {
            pools[name].engine.model for name in _routes(tenant)
        }
        for adapter in tenant.lora_adapters:
            if adapter in models:
                findings.append(
                    Finding(
                        severity="error",
                        code="lora-is-model",
                        subject=f"tenants.{tenant.name}.lora_adapters",
                        message=f"'{adapter}' is the name of the model its pool serves: the gateway could not tell a "
                        "request for the adapter from one for the base model",
                        fix="give the adapter its own name",
                    )
                )
    return findings


def _routes(tenant: TenantPolicy) -> list[str]:
    return [tenant.pool] + ([tenant.long_context_pool] if tenant.long_context_pool else [])


def _tier_limits(policy: QuotaPolicy, pools: dict[str, PoolPolicy]) -> list[Finding]:
    findings = []
    # Each finding is about a tier (on a pool), not a tenant: said once for all the tier's tenants.
    kv_seen: set[tuple[str, str]] = set()
    context_seen: set[tuple[str, str]] = set()
    cap_seen: set[str] = set()
    for tenant in policy.tenants:
        for pool_name in _routes(tenant):
            pool = pools[pool_name]
            if (key := (tenant.tier, pool_name)) not in kv_seen and tenant.kv_cap_tokens_per_replica > (
                pool.kv_pool_tokens
            ):
                kv_seen.add(key)
                findings.append(
                    Finding(
                        severity="error",
                        code="kv-cap",
                        subject=f"tiers.{tenant.tier}",
                        message=(
                            f"KV cap of {tenant.kv_cap_tokens_per_replica:,} tokens per replica exceeds pool "
                            f"'{pool_name}', whose replicas hold {pool.kv_pool_tokens:,} tokens of requests at the "
                            "pool's context"
                        ),
                        fix="lower kv_cap_tokens_per_replica, or serve the tier from a pool with more KV",
                        figures={
                            "kv_cap_tokens_per_replica": tenant.kv_cap_tokens_per_replica,
                            "kv_pool_tokens": pool.kv_pool_tokens,
                        },
                    )
                )
        served_by = pools[tenant.long_context_pool] if tenant.long_context_pool else pools[tenant.pool]
        if (key := (tenant.tier, served_by.name)) not in context_seen and tenant.max_context_tokens > (
            served_by.max_context_tokens
        ):
            context_seen.add(key)
            findings.append(
                Finding(
                    severity="error",
                    code="max-context",
                    subject=f"tiers.{tenant.tier}",
                    message=(
                        f"max context of {tenant.max_context_tokens:,} tokens is above what pool '{served_by.name}' "
                        f"serves ({served_by.max_context_tokens:,} tokens: the model's maximum or the engine's max_model_len, capped by its KV pool)"
                    ),
                    fix="lower max_context_tokens, or route the tier's long prompts to a pool that serves them",
                    figures={
                        "max_context_tokens": tenant.max_context_tokens,
                        "pool_max_context_tokens": served_by.max_context_tokens,
                    },
                )
            )
        if tenant.tier not in cap_seen and tenant.kv_cap_tokens_per_replica < tenant.max_context_tokens:
            cap_seen.add(tenant.tier)
            findings.append(
                Finding(
                    severity="warning",
                    code="kv-cap-below-context",
                    subject=f"tiers.{tenant.tier}",
                    message=(
                        f"KV cap of {tenant.kv_cap_tokens_per_replica:,} tokens is below the max context of "
                        f"{tenant.max_context_tokens:,}: a request at the max context can never be admitted"
                    ),
                    fix="raise kv_cap_tokens_per_replica to at least max_context_tokens",
                )
            )
    return findings


def traffic_findings(policy: QuotaPolicy, traffic: Mapping[str, Traffic]) -> list[Finding]:
    """Tenants sized on traffic whose mean request cannot be served: above its tier's max context (the gateway
    refuses it) or above what the pool it routes to serves (the model's maximum, max_model_len, the KV pool);
    and a mean output above the tier's output cap. A price for such traffic would be a price for the impossible.

    ``traffic``: tenant name -> the traffic profile it was sized on (tenants on a contract have none)."""
    findings = []
    pools = {pool.name: pool for pool in policy.pools}
    for entry in policy.tenants:
        profile = traffic.get(entry.name)
        if profile is None:
            continue
        prompt, output = profile.prompt_tokens, profile.output_tokens
        request = round(prompt + output)
        subject = f"tenants.{entry.name}.traffic"
        shape = f"mean request of {request:,} tokens (prompt {prompt:,.0f} + output {output:,.0f})"
        served_by = pools[routed_pool(entry.pool, entry.long_context_pool, entry.route_above_prompt_tokens, prompt)]
        figures = {"request_tokens": request, "max_context_tokens": entry.max_context_tokens}
        if request > entry.max_context_tokens:
            findings.append(
                Finding(
                    severity="error",
                    code="traffic-over-context",
                    subject=subject,
                    message=f"its {shape} is above the max context of tier '{entry.tier}' ({entry.max_context_tokens:,} "
                    "tokens): the gateway refuses such requests",
                    fix=f"raise tiers.{entry.tier}.max_context_tokens to at least {request:,}, or size the traffic "
                    "the tenant sends",
                    figures=figures,
                )
            )
        elif request > served_by.max_context_tokens:
            findings.append(
                Finding(
                    severity="error",
                    code="traffic-over-pool",
                    subject=subject,
                    message=f"its {shape} is above what pool '{served_by.name}' serves ({served_by.max_context_tokens:,} "
                    "tokens: the model's maximum or the engine's max_model_len, capped by its KV pool)",
                    fix="shorten the requests, or serve the tenant from a pool with more KV",
                    figures={**figures, "pool_max_context_tokens": served_by.max_context_tokens},
                )
            )
        if entry.bucket_rate_units_per_s > MAX_UNITS_PER_S:
            findings.append(
                Finding(
                    severity="error",
                    code="traffic-too-large",
                    subject=subject,
                    message=f"sizes to {entry.bucket_rate_units_per_s:,.0f} units/s, more than the "
                    f"{MAX_UNITS_PER_S:,.0f} a tenant may be sold (a gateway's counters cannot hold its limits)",
                    fix="check rps and the token counts, or split the traffic across tenants",
                    figures={"units_per_s": entry.bucket_rate_units_per_s, "max_units_per_s": MAX_UNITS_PER_S},
                )
            )
        per_request = entry.bucket_rate_units_per_s / profile.rps
        shortfall = bucket_shortfall(entry.bucket_depth_units, entry.weights.output, per_request)
        # (A bucket below even the smallest request is _buckets' finding.)
        if shortfall is not None and shortfall.code == "bucket-below-request":
            findings.append(
                Finding(
                    severity="warning",
                    code=shortfall.code,
                    subject=f"tenants.{entry.name}",
                    message=shortfall.message,
                    fix=f"raise tiers.{entry.tier}.burst_s to at least {per_request / entry.bucket_rate_units_per_s:,.2f} s",
                    figures={"bucket_depth_units": entry.bucket_depth_units, "units_per_request": per_request},
                )
            )
        if output > entry.max_output_tokens:
            findings.append(
                Finding(
                    severity="warning",
                    code="traffic-over-max-output",
                    subject=subject,
                    message=f"its mean output of {output:,.0f} tokens is above the max_output_tokens of tier '{entry.tier}' "
                    f"({entry.max_output_tokens:,}): the gateway caps or refuses such requests",
                    fix=f"raise tiers.{entry.tier}.max_output_tokens, or size the traffic the tenant sends",
                    figures={"output_tokens": output, "max_output_tokens": entry.max_output_tokens},
                )
            )
    return findings


def bucket_warnings(policy: QuotaPolicy) -> list[Finding]:
    """``check``'s warnings about buckets that admit no request (on a tenant's pool or on its long-context pool), for
    ``size`` of a plan to give as ``size`` of one tenant does."""
    pools = {pool.name: pool for pool in policy.pools}
    return [finding for finding in _buckets(policy, pools) if finding.severity == "warning"]


def _rate_key(tenant: TenantPolicy) -> str:
    """The plan key that sets a tenant's rate: a contract's units_per_s, or a profile's requests per second."""
    if tenant.rate_source == "traffic":
        return f"tenants.{tenant.name}.traffic.rps"
    return f"tenants.{tenant.name}.units_per_s"


def _buckets(policy: QuotaPolicy, pools: dict[str, PoolPolicy]) -> list[Finding]:
    """A bucket shallower than the smallest request (one prompt and one output token) admits nothing: a warning. One
    shallower than the reservation of a request for the tier's max_output_tokens (the gateway reserves W × max_tokens
    before the request runs) never admits such a request: a note, since most requests ask for less.

    A tenant whose pool routes long prompts is checked on the long-context pool too, in its units (its W): the
    smallest request routed there is a prompt one token above the threshold and one output token, and the largest
    reservation the tier allows there is its longest request, a prompt of max_context − max_output tokens reserving
    max_output (docs/method.md §3, §5)."""
    findings = []
    for tenant in policy.tenants:
        reservation = tenant.weights.output * tenant.max_output_tokens
        depth = tenant.bucket_depth_units
        shortfall = bucket_shortfall(depth, tenant.weights.output)
        if shortfall is not None:
            findings.append(
                Finding(
                    severity="warning",
                    code=shortfall.code,
                    subject=f"tenants.{tenant.name}",
                    message=shortfall.message,
                    fix=f"raise {_rate_key(tenant)} or tiers.{tenant.tier}.burst_s",
                    figures={"bucket_depth_units": depth, "smallest_request_units": shortfall.needed_units},
                )
            )
            continue  # nothing is admitted: what a long prompt would need adds nothing
        if depth < reservation:
            findings.append(
                Finding(
                    severity="info",
                    code="bucket-below-max-output",
                    subject=f"tenants.{tenant.name}",
                    message=f"its bucket holds {depth:,.0f} units, less than the reservation of a request for the "
                    f"{tenant.max_output_tokens:,} output tokens tier '{tenant.tier}' allows ({tenant.weights.output:.2f}"
                    f" × {tenant.max_output_tokens:,} = {reservation:,.0f} units): such a request is never admitted",
                    fix=f"raise the tenant's rate or tiers.{tenant.tier}.burst_s, or lower its max_output_tokens",
                    figures={"bucket_depth_units": depth, "reservation_units": reservation},
                )
            )
        findings += _long_context_bucket(tenant, pools)
    return findings


def _long_context_bucket(tenant: TenantPolicy, pools: dict[str, PoolPolicy]) -> list[Finding]:
    """``_buckets``' findings for the requests a tenant's pool routes to its long-context pool."""
    threshold, long_pool = tenant.route_above_prompt_tokens, tenant.long_context_pool
    if long_pool is None or threshold is None:
        return []
    shortest_prompt = threshold + 1  # a prompt of exactly the threshold stays on the standard pool
    if shortest_prompt + 1 > tenant.max_context_tokens:
        return []  # the tier admits no prompt above the threshold with an output token: nothing is routed there
    # The W the gateway charges there (build_policy gives every routed tenant the long pool's weights).
    weights = tenant.long_context_weights
    w = weights.output if weights is not None else pools[long_pool].output_weight
    depth = tenant.bucket_depth_units
    subject, tier = f"tenants.{tenant.name}", tenant.tier
    # A prompt token is one unit on every pool, counted uncached: the gateway cannot count on a cache hit at admission.
    smallest = shortest_prompt + w
    if depth < smallest:
        return [
            Finding(
                severity="warning",
                code="bucket-below-any-request",
                subject=subject,
                message=f"its bucket holds {depth:,.0f} units, less than the smallest request routed to pool "
                f"'{long_pool}' (a prompt of {shortest_prompt:,} tokens, above the threshold of {threshold:,}, and one "
                f"output token at W {w:.2f}: {smallest:,.0f} units): the gateway rejects every prompt above "
                f"{threshold:,} tokens that tier '{tier}' allows",
                fix=f"raise {_rate_key(tenant)} or tiers.{tier}.burst_s, or lower tiers.{tier}.max_context_tokens "
                f"to {threshold:,} to keep its prompts on pool '{tenant.pool}'",
                figures={"bucket_depth_units": depth, "smallest_request_units": smallest},
            )
        ]
    # The tier's longest request routed there, reserving its whole output: the largest hold it allows on that pool.
    output = min(tenant.max_output_tokens, tenant.max_context_tokens - shortest_prompt)
    prompt = tenant.max_context_tokens - output
    reservation = prompt + w * output
    if depth >= reservation:
        return []
    return [
        Finding(
            severity="info",
            code="bucket-below-max-output",
            subject=subject,
            message=f"its bucket holds {depth:,.0f} units, less than the reservation of the longest request tier "
            f"'{tier}' allows, routed to pool '{long_pool}' (a prompt of {prompt:,} tokens and {output:,} output tokens "
            f"reserved at W {w:.2f}: {prompt:,} + {w:.2f} × {output:,} = {reservation:,.0f} units): such a request is "
            "never admitted",
            fix=f"raise the tenant's rate or tiers.{tier}.burst_s, or lower its max_output_tokens or max_context_tokens",
            figures={"bucket_depth_units": depth, "reservation_units": reservation},
        )
    ]


def _placement(policy: QuotaPolicy, pools: dict[str, PoolPolicy], reversal_replicas: float) -> list[Finding]:
    findings = []
    for tenant in policy.tenants:
        # Its load is on the pool its units are counted in (a long-context pool's replicas sell other units).
        load = pools[load_pool_of(tenant)]
        replicas = tenant.bucket_rate_units_per_s / load.replica_units_per_s
        if tenant.placement == "dedicated":
            others = [t.name for t in policy.tenants if t.pool == tenant.pool and t.name != tenant.name]
            if others:
                findings.append(
                    Finding(
                        severity="error",
                        code="dedicated-shared",
                        subject=f"tenants.{tenant.name}",
                        message=f"placement is dedicated, but pool '{tenant.pool}' also serves {', '.join(others)}",
                        fix="give the tenant a pool of its own, or make it shared",
                    )
                )
            findings += _dedicated_long_shared(policy, tenant)
            continue
        if replicas >= reversal_replicas:
            whole = whole_replicas(replicas)
            per_replica = load.usd_per_month / load.replicas
            cost = whole * per_replica
            findings.append(
                Finding(
                    severity="warning",
                    code="reversal",
                    subject=f"tenants.{tenant.name}",
                    message=(
                        f"load of {replicas:.2f} replicas ({tenant.bucket_rate_units_per_s:,.0f} units/s) on pool "
                        f"'{load.name}': sharing buys little multiplexing at this size; a dedicated pool of {whole} "
                        f"replicas costs {_usd(cost)}/month (its shared share: "
                        f"{_usd(replicas * per_replica)}/month)"
                    ),
                    fix=f"give it a dedicated pool of {plural(whole, 'replica')} (placement: dedicated)",
                    figures={
                        "replicas": replicas,
                        "dedicated_replicas": whole,
                        "dedicated_usd_per_month": cost,
                        "shared_usd_per_month": replicas * per_replica,
                    },
                )
            )
    return findings


def _dedicated_long_shared(policy: QuotaPolicy, tenant: TenantPolicy) -> list[Finding]:
    """A dedicated tenant whose long prompts route to a long-context pool other tenants' prompts reach too: its
    long requests queue beside theirs, which the dedicated price does not say."""
    if tenant.long_context_pool is None:
        return []
    others = [
        other.name
        for other in policy.tenants
        if other.long_context_pool == tenant.long_context_pool and other.name != tenant.name
    ]
    if not others:
        return []
    return [
        Finding(
            severity="warning",
            code="dedicated-long-shared",
            subject=f"tenants.{tenant.name}",
            message=f"placement is dedicated, but its prompts above {tenant.route_above_prompt_tokens:,} tokens route "
            f"to pool '{tenant.long_context_pool}', which {_names(others)} reach too",
            fix=f"give pool '{tenant.pool}' a long-context pool of its own, or sell the long prompts as shared",
        )
    ]


def _salts(policy: QuotaPolicy, salts: Mapping[str, str] | None) -> list[Finding]:
    findings = []
    tenant_names = {tenant.name for tenant in policy.tenants}
    salted = [tenant for tenant in policy.tenants if tenant.salt_ref]
    for tenant in policy.tenants:
        for adapter in tenant.lora_adapters:
            if looks_like_salt(adapter):
                findings.append(
                    Finding(
                        severity="error" if salted else "warning",
                        code="lora-salt-shape",
                        subject=f"tenants.{tenant.name}",
                        message=f"LoRA adapter '{adapter}' has a salt's shape (64 hex digits) and could equal one",
                        fix="rename the adapter",
                    )
                )
            elif adapter in tenant_names:
                findings.append(
                    Finding(
                        severity="warning",
                        code="lora-tenant-name",
                        subject=f"tenants.{tenant.name}",
                        message=f"LoRA adapter '{adapter}' is also a tenant's name (the key of its salt reference)",
                        fix="rename the adapter so adapter names and tenant names never mix",
                    )
                )
    if salts is not None:
        for salted_tenant, owner in salt_lora_collisions(policy, dict(salts)):
            findings.append(
                Finding(
                    severity="error",
                    code="salt-lora",
                    subject=f"tenants.{salted_tenant}",
                    message=f"its cache salt equals a LoRA adapter name of tenant '{owner}'",
                    fix="rename the adapter, or rotate the salt secret",
                )
            )
    elif salted:
        findings.append(
            Finding(
                severity="info",
                code="salts-unchecked",
                subject="tenants",
                message=(
                    "no salt secret given: LoRA adapter names were checked against tenant names and a salt's shape "
                    "only, not against the salts themselves"
                ),
                fix="set QUOTACALC_SALT_SECRET or pass --salt-secret-file to check the salts",
            )
        )
    return findings


def _pool_price(name: str, warning: PricingWarning | str, key_name: KeyNamer) -> Finding:
    """A pool's pricing warning as a finding: its problem, and its fix with each key named by ``key_name`` (where
    the plan sets it). A warning given as text is its message alone."""
    if isinstance(warning, str):
        return Finding(severity="warning", code="pool-price", subject=f"pools.{name}", message=warning)
    return Finding(
        severity="warning",
        code="pool-price",
        subject=f"pools.{name}",
        message=warning.problem,
        fix=warning.worded_fix(key_name) or None,
    )


#: The deployment keys a calibration's runs cover, and the ``covers`` range each is judged against.
_COVERED_KEYS = (("batch", "concurrency"), ("context", "context_tokens"))


def calibration_findings(
    calibrated: Mapping[str, tuple[Mapping[str, object] | None, str | None]],
    priced: Mapping[str, Mapping[str, int]],
    *,
    flat_plan: bool = False,
    plan: str = "PLAN",
) -> list[Finding]:
    """Where a pool's calibration (``calibrate --write``) does not hold, or holds only by extrapolation, as warnings.

    ``calibrated``: pool name -> (the ``calibrated`` summary or None, why it does not hold or None), as
    ``core.calibrate.calibration_status`` gives them; ``priced``: pool name -> the ``batch`` and ``context`` it is
    priced at. A warning, so that ``--strict`` fails on it as ``size --strict`` does: figures fitted at concurrency
    1-64 say little about batch 128. The fix names the plan keys (a flat plan's are at its top level) and the
    calibrate command that writes ``plan`` (its path) again."""
    findings = []
    for name, (summary, note) in calibrated.items():
        if not note:
            continue
        prefix = "" if flat_plan else f"pools.{name}.deployment."
        pool_flag = "" if flat_plan else f" --pool {name}"
        rerun = f"re-run quotacalc calibrate {plan}{pool_flag} --bench RUNS --write {plan}"
        if summary is None:
            findings.append(
                Finding(
                    severity="warning",
                    code="calibration-not-held",
                    subject=f"pools.{name}",
                    message=note,
                    fix=f"{rerun} on runs of the deployment the plan now sets, or set "
                    f"{'the deployment keys' if flat_plan else f'pools.{name}.deployment'} back to what the "
                    f"{prefix.removesuffix('deployment.')}calibration section records",
                )
            )
            continue
        # Calibrated, but priced outside what the runs covered (extrapolation_note's wording, its hint cut off).
        message, opening, hint = note.rpartition(" (")
        if not (opening and hint.endswith(")")):
            message, hint = note, ""
        covers = summary.get("covers")
        figures: dict[str, float] = {}
        outside = []
        if isinstance(covers, Mapping):
            for key, covered in _COVERED_KEYS:
                low, high = covers[covered]
                value = priced[name][key]
                if not low <= value <= high:
                    figures |= {key: value, f"runs_{covered}_low": low, f"runs_{covered}_high": high}
                    outside.append((key, value, low, high))
        fix = hint[:-1] if hint else None
        if outside:
            runs = " and ".join(f"{key} {value:,}" for key, value, _, _ in outside)
            keys = " and ".join(f"{prefix}{key} within {low:,}-{high:,}" for key, _, low, high in outside)
            fix = f"{rerun} on runs that cover {runs}, or set {keys}"
        findings.append(
            Finding(
                severity="warning",
                code="calibration-extrapolated",
                subject=f"pools.{name}",
                message=message,
                fix=fix,
                figures=figures,
            )
        )
    return findings


def _no_tenants(policy: QuotaPolicy, flat_plan: bool) -> list[Finding]:
    """A platform plan of no tenant: its generated gateways admit nobody (a flat plan prices one deployment)."""
    if policy.tenants or flat_plan:
        return []
    return [
        Finding(
            severity="warning",
            code="no-tenants",
            subject="tenants",
            message=f"the plan sells its {plural(len(policy.pools), 'pool')} to no tenant: the generated gateways "
            "admit no request",
            fix="add the tenants (name, tier, pool, units_per_s or traffic)",
        )
    ]


def check_plan(
    policy: QuotaPolicy,
    *,
    salts: Mapping[str, str] | None = None,
    reversal_replicas: float = DEFAULT_REVERSAL_REPLICAS,
    pool_warnings: Mapping[str, Sequence[PricingWarning | str]] | None = None,
    traffic: Mapping[str, Traffic] | None = None,
    flat_plan: bool = False,
    key_names: Mapping[str, KeyNamer] | None = None,
) -> CheckResult:
    """Every finding about a plan's policy; ``salts`` (salt_ref -> salt) when the secret is known;
    ``pool_warnings``: each pool's pricing warnings (``PriceResult.pricing_warnings``);
    ``traffic``: the traffic profile each tenant sized on traffic was sized with (``traffic_findings``);
    ``key_names``: pool name -> how its warnings' fixes name a deployment key (where the plan sets it: the
    ``priced`` layer knows); without one, the pool's own key, ``pools.NAME.deployment.KEY`` (a flat plan's,
    ``flat_plan``, its top-level ``KEY``)."""
    if not (reversal_replicas > 0 and math.isfinite(reversal_replicas)):
        raise ValueError(f"reversal_replicas must be a positive finite number of replicas, got {reversal_replicas}")
    pools = {pool.name: pool for pool in policy.pools}
    traffic = traffic or {}
    findings = [
        *_no_tenants(policy, flat_plan),
        *(
            _pool_price(
                name,
                warning,
                (key_names or {}).get(name) or key_words("" if flat_plan else f"pools.{name}.deployment."),
            )
            for name, warnings in (pool_warnings or {}).items()
            for warning in warnings
        ),
        *_capacity(policy),
        *_routing(policy, pools, flat_plan),
        *_tier_limits(policy, pools),
        *traffic_findings(policy, traffic),
        *_buckets(policy, pools),
        *_placement(policy, pools, reversal_replicas),
        *_salts(policy, salts),
    ]
    # A stable sort: within a severity, findings keep the plan's order.
    findings.sort(key=lambda finding: _SEVERITY_ORDER.index(finding.severity))
    return CheckResult(findings=tuple(findings), reversal_replicas=reversal_replicas, salts_checked=salts is not None)
