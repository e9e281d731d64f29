"""Envoy AI Gateway + Envoy Gateway: AIGatewayRoutes that price each response in units, and rate limits on them.

Per tenant one AIGatewayRoute rule (tenant header + model) sends its requests to its pool's AIServiceBackend,
and sets ``cache_salt`` and ``priority`` in the request body there, so a client cannot choose them. The route's
``llmRequestCosts`` CEL entry turns the response's token counts into scaled units (an integer, as the gateway
requires: ``internal/llmcostcel/cel.go``), and a BackendTrafficPolicy on the route's HTTPRoute (the AI Gateway
controller creates one with the route's name) charges them to a global rate-limit rule per tenant.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Mapping
from typing import NamedTuple

from quotacalc.core.policy import PoolPolicy, QuotaPolicy, TenantPolicy, UnitWeights
from quotacalc.errors import QuotacalcError
from quotacalc.exporters._text import load_pool_by_tenant, long_context_lines, salt_of, yaml_documents
from quotacalc.exporters.base import Export, ExportOptions, GeneratedFile

AI_GATEWAY_API = "aigateway.envoyproxy.io/v1beta1"
ENVOY_GATEWAY_API = "gateway.envoyproxy.io/v1alpha1"
#: Where the AI Gateway writes llmRequestCosts (fixed by the gateway).
COST_NAMESPACE = "io.envoy.ai_gateway"
#: Header the AI Gateway sets from the request body's model.
MODEL_HEADER = "x-ai-eg-model"
#: The Gateway the routes attach to: an explicit default, edit it where yours is named otherwise.
GATEWAY_NAME = "ai-gateway"
#: CRD maxItems (aigateway.envoyproxy.io_aigatewayroutes.yaml, commit c217da8): rules per route, costs per route.
MAX_RULES_PER_ROUTE = 15
#: CRD maxItems on a rule's matches: a tenant's base model and LoRA adapters, one match each.
MAX_MATCHES_PER_RULE = 128
MAX_COSTS_PER_ROUTE = 36
#: Envoy's rate-limit counters are uint32 (the BackendTrafficPolicy CRD's maximum for limit.requests).
MAX_LIMIT = 4_294_967_295
#: Scales tried for the weights, finest first: milli-units unless the window's limit would overflow uint32.
SCALES = (1000, 100, 10, 1)
#: Finer scales, coarsest first, tried only where a weight rounds off by more than WEIGHT_TOLERANCE in milli-units
#: (a cached weight of 0.0004 is 0 milli-units), while the window's limit still fits uint32 and the tenant's largest
#: request MAX_HITS_ADDEND. That bound also keeps CEL's uint64 far off: the linear terms of a request of the most
#: tokens a plan admits (10^8, core.deployment.MAX_CONTEXT_TOKENS) cost at most 10^8 times the largest request's, 10^17
#: (the prompt-length term is bounded on its own: ``scaled_per_prompt``). Elsewhere milli-units stay, so the keys and limits of such
#: weights do not change.
FINE_SCALES = tuple(10**power for power in range(4, 10))
#: Envoy drops a rate-limit descriptor whose hits addend (the cost read from metadata) exceeds this
#: (``RateLimit.HitsAddend`` in its route API, ``MAX_HITS_ADDEND`` in its rate-limit code): such a response is
#: charged nothing, so the scale keeps a tenant's largest request at or below it.
MAX_HITS_ADDEND = 1_000_000_000
#: Window units of a global rate-limit rule (the BackendTrafficPolicy CRD's limit.unit enum), seconds each, as
#: Envoy's rate limit service counts them (envoyproxy/ratelimit src/utils/utilities.go UnitToDivider, commit
#: f2fb157): fixed windows aligned to multiples of their length since the Unix epoch (src/limiter/cache_key.go), a
#: Month 30 days and a Year 365, not calendar months or years.
WINDOWS = (
    ("Second", 1),
    ("Minute", 60),
    ("Hour", 3600),
    ("Day", 86400),
    ("Week", 7 * 86400),
    ("Month", 30 * 86400),
    ("Year", 365 * 86400),
)
#: A weight rounded to the scale may differ from the policy's by this much before it is reported.
WEIGHT_TOLERANCE = 0.005


def cost_expression(prompt: int, cached: int, output: int, per_prompt: tuple[int, int] | None = None) -> str:
    """The CEL cost in scaled units: uncached prompt, cached prompt and output tokens times integer weights.

    ``input_tokens`` includes the cached ones; the guard keeps the uint subtraction from underflowing, and
    every literal is a uint because CEL has no uint/int arithmetic. ``per_prompt`` = (numerator, denominator):
    each uncached prompt token also costs numerator / denominator scaled units per token of its prompt
    (``UnitWeights.prompt_per_prompt_token``), multiplied out before the one division so little is truncated.
    """
    uncached = "(input_tokens > cached_input_tokens ? input_tokens - cached_input_tokens : 0u)"
    rest = f"cached_input_tokens * {cached}u + output_tokens * {output}u"
    if per_prompt is None or per_prompt[0] == 0:
        return f"{uncached} * {prompt}u + {rest}"
    numerator, denominator = per_prompt
    return f"{uncached} * ({prompt * denominator}u + input_tokens * {numerator}u) / {denominator}u + {rest}"


#: CEL's uint is 64 bits: an uncached prompt of the pool's longest, times its scaled cost before the division,
#: stays below this (a factor 4 of room for prompts the engine admits beyond the pool's figure).
_CEL_UINT_ROOM = 2**62
#: Denominators tried for the prompt-length term, coarsest first: the first whose numerator carries
#: ``_PER_PROMPT_DIGITS`` significant digits is kept (short literals), else the finest that fits.
_PER_PROMPT_DENOMINATORS = tuple(10**power for power in range(13))
_PER_PROMPT_DIGITS = 10_000


class ScaledWeights(NamedTuple):
    """A unit's weights in 1/scale units: what the generated CEL multiplies each token count by."""

    prompt: int
    cached_prompt: int
    output: int


class RequestTokens(NamedTuple):
    """One request's token counts, as the generated CEL reads them from the response's usage."""

    prompt_tokens: int
    cached_tokens: int
    output_tokens: int


class LargestRequest(NamedTuple):
    """The tenant's costliest admissible request and its cost in 1/scale units."""

    request: RequestTokens
    cost: int


class RateWindow(NamedTuple):
    """A fixed window of Envoy's rate limit: its unit and length, the scale its counts are in, and its limit."""

    unit: str
    seconds: int
    scale: int
    limit: int


class ScaleChoice(NamedTuple):
    """``RateWindow``'s figures and what stops a finer scale (``scale_choice``)."""

    unit: str
    seconds: int
    scale: int
    limit: int
    bound: str


def scaled_weights(weights: UnitWeights, scale: int) -> ScaledWeights:
    """Weights in 1/scale units, rounded to the nearest integer."""
    return ScaledWeights(
        round(weights.prompt * scale), round(weights.cached_prompt * scale), round(weights.output * scale)
    )


def scaled_per_prompt(weights: UnitWeights, scale: int, longest_prompt_tokens: int) -> tuple[int, int] | None:
    """(numerator, denominator) of the prompt-length term in 1/scale units: five significant digits where a
    prompt of ``longest_prompt_tokens`` times them fits CEL's uint, else as many as fit; None where the weights
    have no such term or not even a whole denominator fits."""
    if weights.prompt_per_prompt_token <= 0:
        return None
    prompt = round(weights.prompt * scale)
    best = None
    for denominator in _PER_PROMPT_DENOMINATORS:
        numerator = round(weights.prompt_per_prompt_token * scale * denominator)
        if longest_prompt_tokens * (prompt * denominator + longest_prompt_tokens * numerator) >= _CEL_UINT_ROOM:
            break
        best = (numerator, denominator)
        if numerator >= _PER_PROMPT_DIGITS:
            break
    return best


def _nearest_window(tenant: TenantPolicy) -> tuple[str, int]:
    """The window whose length is nearest the bucket's burst on a log scale (the shorter one on a tie)."""
    burst_s = tenant.bucket_depth_units / tenant.bucket_rate_units_per_s
    return min(WINDOWS, key=lambda window: (abs(math.log(window[1] / max(burst_s, 1.0))), window[1]))


def _coarse_window(tenant: TenantPolicy, fits_hits: Callable[[int], bool]) -> RateWindow:
    """(unit, seconds, scale, limit) at the finest of SCALES whose limit fits uint32 in the nearest window and whose
    largest request fits Envoy's hits addend (``fits_hits``; whole units where none does), moving to a shorter
    window only when even the coarsest such scale overflows."""
    start = WINDOWS.index(_nearest_window(tenant))
    scales = [scale for scale in SCALES if fits_hits(scale)] or [SCALES[-1]]
    for unit, seconds in reversed(WINDOWS[: start + 1]):
        for scale in scales:
            limit = math.floor(tenant.bucket_rate_units_per_s * seconds * scale)
            if limit <= MAX_LIMIT:
                return RateWindow(unit, seconds, scale, max(limit, 1))
    return RateWindow("Second", 1, scales[-1], MAX_LIMIT)


def _weights_off(weights: UnitWeights, scale: int) -> bool:
    """Whether a non-zero weight rounded to 1/scale units is off by more than WEIGHT_TOLERANCE of itself."""
    exact = (weights.prompt, weights.cached_prompt, weights.output)
    return any(
        weight and abs(scaled / scale - weight) > WEIGHT_TOLERANCE * weight
        for weight, scaled in zip(exact, scaled_weights(weights, scale), strict=True)
    )


def largest_request_tokens(tenant: TenantPolicy, pool: PoolPolicy) -> tuple[RequestTokens, ...]:
    """(prompt, cached, output) requests among which the tenant's costliest lies: prompt + output within its tier's
    max context and its pool's max-model-len (the engine refuses a longer one, which is then charged nothing), output
    within its tier's max output. A cost grows with prompt and output and is convex along the edge prompt + output =
    the context, and linear in the cached tokens, so its maximum is at the edge's ends, all cached or none."""
    context = min(tenant.max_context_tokens, pool.engine.max_model_len)
    output = min(tenant.max_output_tokens, context)
    prompts = ((context, 0), (context - output, output))
    return tuple(RequestTokens(prompt, cached, out) for prompt, out in prompts for cached in (0, prompt))


def scaled_cost(
    weights: tuple[int, int, int], per_prompt: tuple[int, int] | None, prompt: int, cached: int, output: int
) -> int:
    """What ``cost_expression`` gives for a request, in the same unsigned integer arithmetic (division truncates)."""
    scaled_prompt, scaled_cached, scaled_output = weights
    uncached = max(prompt - cached, 0)
    rest = cached * scaled_cached + output * scaled_output
    if per_prompt is None or per_prompt[0] == 0:
        return uncached * scaled_prompt + rest
    numerator, denominator = per_prompt
    return uncached * (scaled_prompt * denominator + prompt * numerator) // denominator + rest


def largest_request(tenant: TenantPolicy, pool: PoolPolicy, scale: int) -> LargestRequest:
    """The tenant's costliest admissible request ``(prompt, cached, output)`` on its load pool ``pool`` and its cost at
    ``scale``, as the generated CEL computes it."""
    weights = charged_weights(tenant, pool.name)
    scaled = scaled_weights(weights, scale)
    per_prompt = scaled_per_prompt(weights, scale, pool.prompt_length_charge.longest_prompt_tokens)
    costs = {request: scaled_cost(scaled, per_prompt, *request) for request in largest_request_tokens(tenant, pool)}
    request = max(costs, key=lambda request: (costs[request], request))
    return LargestRequest(request, costs[request])


def _fits_hits(tenant: TenantPolicy, pool: PoolPolicy) -> Callable[[int], bool]:
    return lambda scale: largest_request(tenant, pool, scale).cost <= MAX_HITS_ADDEND


def scale_choice(tenant: TenantPolicy, pool: PoolPolicy) -> ScaleChoice:
    """(unit, seconds, scale, limit, bound): ``window_for``'s figures and what stops a finer scale: "uint32" (the
    window's limit would overflow Envoy's counter), "hits" (the tenant's largest request would cost more than
    Envoy's hits addend), "finest" (FINE_SCALES' last) or ""
    (the weights are within WEIGHT_TOLERANCE: no finer scale is needed). ``pool``: the tenant's load pool."""
    fits_hits = _fits_hits(tenant, pool)
    unit, seconds, scale, limit = _coarse_window(tenant, fits_hits)
    weights = charged_weights(tenant, pool.name)

    def off(scale: int) -> bool:
        return _weights_off(weights, scale) or _limit_off(tenant, seconds, scale)

    if not off(scale):
        return ScaleChoice(unit, seconds, scale, limit, "")
    if scale != SCALES[0]:
        finer = SCALES[SCALES.index(scale) - 1]
        return ScaleChoice(unit, seconds, scale, limit, "uint32" if fits_hits(finer) else "hits")
    bound = "finest"
    for finer in FINE_SCALES:
        finer_limit = math.floor(tenant.bucket_rate_units_per_s * seconds * finer)
        if finer_limit > MAX_LIMIT:
            bound = "uint32"
            break
        if not fits_hits(finer):
            bound = "hits"
            break
        scale, limit = finer, max(finer_limit, 1)
        if not off(scale):
            return ScaleChoice(unit, seconds, scale, limit, "")
    return ScaleChoice(unit, seconds, scale, limit, bound)


def hits_problem(tenant: TenantPolicy, pool: PoolPolicy) -> tuple[str, str] | None:
    """``(problem, fix)`` when even whole units leave the tenant's largest request above Envoy's hits addend (such a
    response is charged nothing), else None. ``check`` reports it; the caller names the tenant."""
    (prompt, cached, output), cost = largest_request(tenant, pool, SCALES[-1])
    if cost <= MAX_HITS_ADDEND:
        return None
    return (
        f"its largest request ({prompt:,} prompt tokens, {cached:,} of them cached, {output:,} output tokens on pool "
        f"{pool.name}) costs {cost:,} units, above the {MAX_HITS_ADDEND:,} Envoy charges at most (a larger hits "
        "addend is dropped, so the response is charged nothing), even in whole units",
        "lower the tier's max_context_tokens or max_output_tokens until its largest request costs at most "
        f"{MAX_HITS_ADDEND:,} units, or leave the envoy target out with --target",
    )


def enforced_rate_units_per_s(tenant: TenantPolicy, seconds: int, scale: int) -> float:
    """The rate a window's integer limit enforces: floor(rate x window x scale), at least 1, back in units/s."""
    return max(math.floor(tenant.bucket_rate_units_per_s * seconds * scale), 1) / scale / seconds


def _limit_off(tenant: TenantPolicy, seconds: int, scale: int) -> bool:
    """Whether the window's integer limit enforces a rate off the policy's by more than WEIGHT_TOLERANCE (a limit
    of a few counts, or one raised from 0 to 1, where the rate is tiny against the window and scale)."""
    rate = tenant.bucket_rate_units_per_s
    return abs(enforced_rate_units_per_s(tenant, seconds, scale) - rate) > WEIGHT_TOLERANCE * rate


def window_for(tenant: TenantPolicy, pool: PoolPolicy) -> RateWindow:
    """(unit, seconds, scale, limit): the fixed window nearest the bucket's burst, and its limit in scaled units.

    A window as long as the burst admits about one bucket depth per window; the finest of SCALES whose limit fits
    Envoy's uint32 counter, and at which the tenant's largest request on its load pool ``pool`` costs at most Envoy's
    hits addend, is used, moving to a shorter window only when even whole units overflow; where a weight the tenant
    is charged rounds off in milli-units, a finer scale (FINE_SCALES) as far as the limit and the cost fit.
    """
    choice = scale_choice(tenant, pool)
    return RateWindow(choice.unit, choice.seconds, choice.scale, choice.limit)


def _metadata_key(scale: int, weights: tuple[int, int, int], per_prompt: tuple[int, int] | None) -> str:
    prompt, cached, output = weights
    key = f"quotacalc_units_x{scale}_p{prompt}_c{cached}_o{output}"
    if per_prompt is not None and per_prompt[0]:
        numerator, denominator = per_prompt
        key += f"_l{numerator}d{denominator}"
    return key


def _route_rules(tenant: TenantPolicy, pool: PoolPolicy, header: str, salt: str | None) -> list[dict]:
    """The tenant's route rules: one match per model it may name (the base model and its LoRA adapters), at most
    the CRD's 128 matches a rule, so a tenant of many adapters takes several rules (``acme``, ``acme.2``: a tenant
    name has no dot, so no two rule names meet)."""
    models = (pool.engine.served_model_name, *tenant.lora_adapters)
    matches = [
        {
            "headers": [
                {"type": "Exact", "name": header, "value": tenant.name},
                {"type": "Exact", "name": MODEL_HEADER, "value": model},
            ]
        }
        for model in models
    ]
    # A client's own priority and cache_salt never reach the engine: each is set to the tenant's (set overwrites a
    # top-level field) or, where the tenant has none, removed.
    body: list[dict[str, str]] = []
    removed: list[str] = []
    if salt is not None:
        body.append({"path": "cache_salt", "value": json.dumps(salt)})
    else:
        removed.append("cache_salt")
    if pool.engine.scheduling_policy == "priority":
        body.append({"path": "priority", "value": str(tenant.priority)})
    else:
        removed.append("priority")
    mutation: dict = {}
    if removed:
        mutation["remove"] = removed
    if body:
        mutation["set"] = body
    backend: dict = {"name": pool.name, "bodyMutation": mutation}
    groups = [matches[start : start + MAX_MATCHES_PER_RULE] for start in range(0, len(matches), MAX_MATCHES_PER_RULE)]
    return [
        {"name": tenant.name if number == 1 else f"{tenant.name}.{number}", "matches": group, "backendRefs": [backend]}
        for number, group in enumerate(groups, start=1)
    ]


def charged_weights(tenant: TenantPolicy, load_pool: str) -> UnitWeights:
    """The weights a tenant's requests are charged at: those of ``load_pool``, the pool its rate is counted in (its
    long-context pool's for a tenant sized on traffic whose mean prompt routes there), so cost and limit share a
    unit."""
    if load_pool != tenant.pool and load_pool == tenant.long_context_pool and tenant.long_context_weights is not None:
        return tenant.long_context_weights
    return tenant.weights


class _RateLimitRule(NamedTuple):
    """A tenant's global rate-limit rule, the metadata key it reads, and the CEL cost expression that fills it."""

    rule: dict
    key: str
    cost_expression: str


def _rate_limit_rule(tenant: TenantPolicy, header: str, load_pool: PoolPolicy) -> _RateLimitRule:
    """The tenant's global rate-limit rule, the metadata key it reads and the CEL cost that fills the key, at the
    weights of ``load_pool``, the pool its rate is counted in."""
    unit, _seconds, scale, limit = window_for(tenant, load_pool)
    charged = charged_weights(tenant, load_pool.name)
    weights = scaled_weights(charged, scale)
    per_prompt = scaled_per_prompt(charged, scale, load_pool.prompt_length_charge.longest_prompt_tokens)
    key = _metadata_key(scale, weights, per_prompt)
    rule = {
        "clientSelectors": [{"headers": [{"type": "Exact", "name": header, "value": tenant.name}]}],
        "limit": {"requests": limit, "unit": unit},
        "cost": {
            "request": {"from": "Number", "number": 0},
            "response": {"from": "Metadata", "metadata": {"namespace": COST_NAMESPACE, "key": key}},
        },
    }
    return _RateLimitRule(rule, key, cost_expression(*weights, per_prompt=per_prompt))


#: The most LoRA adapters one tenant may name: with its base model, one model match each, they fill at most one
#: route's rules (a tenant's rules stay in one route, under its one rate limit).
MAX_LORA_ADAPTERS = MAX_RULES_PER_ROUTE * MAX_MATCHES_PER_RULE - 1


def _rules_for(adapters: int) -> int:
    """Route rules a tenant naming ``adapters`` LoRA adapters takes: one match per model, its base model included."""
    return math.ceil((1 + adapters) / MAX_MATCHES_PER_RULE)


def _rules_of(tenant: TenantPolicy) -> int:
    return _rules_for(len(tenant.lora_adapters))


def lora_adapters_problem(adapters: int) -> tuple[str, str] | None:
    """``(problem, fix)`` when a tenant naming ``adapters`` LoRA adapters cannot be routed by the Envoy target (more
    than ``MAX_LORA_ADAPTERS``: its rules would not fit one AIGatewayRoute), else None. ``check`` can report it
    before ``generate`` refuses; the caller names the tenant and the file."""
    if adapters <= MAX_LORA_ADAPTERS:
        return None
    rules = _rules_for(adapters)
    return (
        f"{adapters:,} LoRA adapters need {rules} Envoy AIGatewayRoute rules of {MAX_MATCHES_PER_RULE} model "
        f"matches (one per adapter and the base model), more than the {MAX_RULES_PER_ROUTE} one route holds",
        f"give the tenant at most {MAX_LORA_ADAPTERS:,} adapters, or leave the envoy target out with --target",
    )


def _chunks(policy: QuotaPolicy) -> list[tuple[TenantPolicy, ...]]:
    """Tenants by name, packed into routes of at most the CRD's 15 rules (a tenant's rules stay in one route: its
    rate limit is one policy on one route). A tenant beyond one route is refused, at its YAML path in the policy
    (``tenants[i]``, the plan's order)."""
    for index, tenant in enumerate(policy.tenants):
        if (problem := lora_adapters_problem(len(tenant.lora_adapters))) is not None:
            message, fix = problem
            raise QuotacalcError(f"tenant {tenant.name}'s {message}", field=f"tenants[{index}].lora_adapters", fix=fix)
    chunks: list[list[TenantPolicy]] = []
    used = MAX_RULES_PER_ROUTE
    for tenant in sorted(policy.tenants, key=lambda tenant: tenant.name):
        rules = _rules_of(tenant)
        if used + rules > MAX_RULES_PER_ROUTE:
            chunks.append([])
            used = 0
        chunks[-1].append(tenant)
        used += rules
    return [tuple(chunk) for chunk in chunks]


def documents(policy: QuotaPolicy, salts: Mapping[str, str]) -> dict[str, list[dict]]:
    """The manifests of each file, by path: AIServiceBackends, AIGatewayRoutes, BackendTrafficPolicies.

    A tenant's rule sends to the pool its rate is counted in (``TenantPolicy.load_pool``: a tenant sized on traffic
    whose mean prompt routes to its long-context pool is sized there) and charges that pool's weights."""
    pools = {pool.name: pool for pool in policy.pools}
    load_pools = load_pool_by_tenant(policy)
    header = policy.tenant_header
    routes: list[dict] = []
    traffic_policies: list[dict] = []
    for index, chunk in enumerate(_chunks(policy), start=1):
        name = f"quotacalc-tenants-{index:03d}"
        rules, limit_rules, costs = [], [], {}
        for tenant in chunk:
            salt = salt_of(tenant, salts)
            load_pool = load_pools[tenant.name]
            rules += _route_rules(tenant, pools[load_pool], header, salt)
            rule, key, cel = _rate_limit_rule(tenant, header, pools[load_pool])
            limit_rules.append(rule)
            costs[key] = {"metadataKey": key, "type": "CEL", "cel": cel}
        routes.append(
            {
                "apiVersion": AI_GATEWAY_API,
                "kind": "AIGatewayRoute",
                "metadata": {"name": name},
                "spec": {
                    "parentRefs": [{"name": GATEWAY_NAME, "kind": "Gateway", "group": "gateway.networking.k8s.io"}],
                    "rules": rules,
                    "llmRequestCosts": list(costs.values()),
                },
            }
        )
        traffic_policies.append(
            {
                "apiVersion": ENVOY_GATEWAY_API,
                "kind": "BackendTrafficPolicy",
                "metadata": {"name": name},
                "spec": {
                    "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": name}],
                    "rateLimit": {"type": "Global", "global": {"rules": limit_rules}},
                },
            }
        )
    backends = [
        {
            "apiVersion": AI_GATEWAY_API,
            "kind": "AIServiceBackend",
            "metadata": {"name": pool.name},
            "spec": {
                "schema": {"name": "OpenAI"},
                "backendRef": {"name": pool.name, "kind": "Backend", "group": "gateway.envoyproxy.io"},
            },
        }
        for pool in policy.pools
    ]
    return {
        "envoy/aiservicebackends.yaml": backends,
        "envoy/aigatewayroutes.yaml": routes,
        "envoy/backendtrafficpolicies.yaml": traffic_policies,
    }


_HEADERS = {
    "envoy/aiservicebackends.yaml": "Generated by quotacalc. One AIServiceBackend per pool; the Backend of the same name (its endpoints) is yours.",
    "envoy/aigatewayroutes.yaml": "Generated by quotacalc. Holds the tenants' cache salts: restrict read access.",
    "envoy/backendtrafficpolicies.yaml": "Generated by quotacalc. Limits in scaled units (see llmRequestCosts) per fixed window.",
}


def export(policy: QuotaPolicy, salts: Mapping[str, str], options: ExportOptions) -> Export:
    """AIServiceBackends, AIGatewayRoutes and BackendTrafficPolicies for the policy's tenants."""
    salted = any(tenant.salt_ref is not None for tenant in policy.tenants)
    files = tuple(
        GeneratedFile(
            path=path,
            text=yaml_documents(manifests, header=_HEADERS[path]),
            secret=salted and path == "envoy/aigatewayroutes.yaml",
        )
        for path, manifests in documents(policy, salts).items()
    )
    return Export(target="envoy", files=files, notes=_limits(policy, salted))


#: Why a weight is still off after ``scale_choice``, by the bound that stopped a finer scale.
_BOUNDS = {
    "uint32": "a finer scale would take the window's limit past Envoy's uint32 counter",
    "hits": f"a finer scale would take its largest request's cost past the {MAX_HITS_ADDEND:,} Envoy charges at most",
    "finest": f"1/{FINE_SCALES[-1]:,} units is the finest scale written",
}


def _unrouted(policy: QuotaPolicy, pool: str, long_pool: str, names: list[str]) -> str:
    """What becomes of the long prompts of tenants whose every rule sends to their standard pool ``pool``: its
    engine refuses what is longer than its max-model-len, so those beyond it are refused, not served long."""
    pools = {entry.name: entry for entry in policy.pools}
    tenants = {tenant.name: tenant for tenant in policy.tenants}
    max_model_len = pools[pool].engine.max_model_len
    refused = [name for name in names if tenants[name].max_context_tokens > max_model_len]
    said = "AIGatewayRoute matches headers, not prompt size, so their rules send every prompt to pool " + pool
    if not refused:
        return (
            f"{said}, whose engine admits their longest (its max-model-len is {max_model_len:,} tokens): they are "
            f"served there, charged at {pool}'s weights."
        )
    served = [name for name in names if name not in refused]
    who = "they cannot" if not served else f"{', '.join(refused)} cannot"
    fit = f" ({', '.join(served)}: their longest fit, served there at {pool}'s weights)" if served else ""
    return (
        f"{said}, whose engine refuses prompts beyond its max-model-len ({max_model_len:,} tokens): {who} "
        f"reach pool {long_pool} through this target{fit}. To serve them, route by prompt size in front of the gateway, "
        f"or give them a model name of their own that a rule sends to {long_pool} (modelNameOverride to its served "
        f"model), charged at {long_pool}'s weights."
    )


def _beyond_tier(tenant: TenantPolicy, pool: PoolPolicy, scale: int) -> str | None:
    """What Envoy charges a request beyond the tenant's tier caps, which it does not check, where the engine's
    max-model-len admits one costing more than the hits addend at the tenant's scale."""
    weights = charged_weights(tenant, pool.name)
    scaled = scaled_weights(weights, scale)
    per_prompt = scaled_per_prompt(weights, scale, pool.prompt_length_charge.longest_prompt_tokens)
    context = pool.engine.max_model_len
    cost = max(
        scaled_cost(scaled, per_prompt, *request)
        for request in ((context, 0, 0), (context, context, 0), (0, 0, context))
    )
    if cost <= MAX_HITS_ADDEND:
        return None
    return (
        f"{tenant.name}: a request beyond its tier's max context or max output (not checked at the gateway) can cost "
        f"up to {cost:,} 1/{scale:,} units within pool {pool.name}'s max-model-len ({context:,} tokens); above "
        f"{MAX_HITS_ADDEND:,} Envoy charges it nothing. Cap max_tokens and the prompt at the tier's in front of the "
        "gateway."
    )


def _limits(policy: QuotaPolicy, salted: bool) -> tuple[tuple[str, str], ...]:
    pools = {pool.name: pool for pool in policy.pools}
    load_pools = load_pool_by_tenant(policy)
    moved = {
        tenant.name: load_pools[tenant.name] for tenant in policy.tenants if load_pools[tenant.name] != tenant.pool
    }
    limits: list[tuple[str, str]] = [
        (
            "weights",
            f"Cost weights are integers in 1/scale units; rounding below {WEIGHT_TOLERANCE:.1%} of a weight is not "
            "reported.",
        ),
        (
            "weights",
            f"Envoy drops a cost above {MAX_HITS_ADDEND:,} (its hits addend's bound), charging such a response nothing: "
            "each tenant's scale keeps the cost of its largest request (its tier's max context and max output, within "
            "its pool's max-model-len) at or below it.",
        ),
        (
            "files",
            f"Routes and their rate-limit policies are split at {MAX_RULES_PER_ROUTE} rules (the CRD's maxItems on "
            f"rules); a tenant takes one rule per {MAX_MATCHES_PER_RULE} models it may name (the base model and its "
            "LoRA adapters).",
        ),
    ]
    limits += [
        ("routing", line)
        for line in long_context_lines(
            policy, lambda pool, long_pool, names: _unrouted(policy, pool, long_pool, names), skip=moved
        )
    ]
    for load_pool in sorted(set(moved.values())):
        names = ", ".join(sorted(name for name, pool in moved.items() if pool == load_pool))
        limits.append(
            (
                "routing",
                f"{names}: sized on traffic whose mean prompt routes to pool {load_pool}, so every request of theirs goes to "
                f"{load_pool} and is charged at {load_pool}'s weights (their rate is in its units); AIGatewayRoute cannot send "
                "their short prompts to their standard pool by size.",
            )
        )
    for tenant in policy.tenants:
        load_pool = pools[load_pools[tenant.name]]
        unit, seconds, scale, _limit, bound = scale_choice(tenant, load_pool)
        if (problem := hits_problem(tenant, load_pool)) is not None:
            message, fix = problem
            limits.append(("weights", f"{tenant.name}: {message}: such a response is free; {fix}."))
        elif (beyond := _beyond_tier(tenant, load_pool, scale)) is not None:
            limits.append(("weights", beyond))
        nearest, nearest_s = _nearest_window(tenant)
        if seconds < nearest_s:
            limits.append(
                (
                    "rate",
                    f"{tenant.name}: its burst is nearest a {nearest} window, whose limit would overflow Envoy's uint32 "
                    f"counter even in whole units, so it gets a {unit} window: at most rate x {seconds:,} s pass at once, "
                    "less than its bucket's depth.",
                )
            )
        if _limit_off(tenant, seconds, scale):
            limits.append(
                (
                    "rate",
                    f"{tenant.name}: its rate of {tenant.bucket_rate_units_per_s:.4g} units/s is enforced as "
                    f"{enforced_rate_units_per_s(tenant, seconds, scale):.4g} units/s, a whole number of 1/{scale:,} units "
                    f"per {unit} window ({_BOUNDS[bound or 'finest']}).",
                )
            )
        charged = charged_weights(tenant, load_pools[tenant.name])
        exact = (charged.prompt, charged.cached_prompt, charged.output)
        for label, weight, scaled in zip(
            ("prompt", "cached prompt", "output"), exact, scaled_weights(charged, scale), strict=True
        ):
            if weight and abs(scaled / scale - weight) > WEIGHT_TOLERANCE * weight:
                limits.append(
                    (
                        "weights",
                        f"{tenant.name}: {label} weight {weight:g} is charged as {scaled}/{scale} ({_BOUNDS[bound]}).",
                    )
                )
        per_token = charged.prompt_per_prompt_token
        per_prompt = scaled_per_prompt(
            charged, scale, pools[load_pools[tenant.name]].prompt_length_charge.longest_prompt_tokens
        )
        charged_per_token = per_prompt[0] / per_prompt[1] / scale if per_prompt else 0.0
        if per_token and abs(charged_per_token - per_token) > WEIGHT_TOLERANCE * per_token:
            limits.append(
                (
                    "weights",
                    f"{tenant.name}: a prompt token's {per_token:.4g} units per token of its prompt are charged as "
                    f"{charged_per_token:.4g} (CEL's 64-bit integers at the window's scale).",
                )
            )
    long_windows = sorted(
        {
            unit
            for tenant in policy.tenants
            if (unit := window_for(tenant, pools[load_pools[tenant.name]]).unit) in ("Month", "Year")
        },
        key=lambda unit: dict(WINDOWS)[unit],
    )
    if long_windows:
        limits.append(
            (
                "rate",
                f"{' and '.join(long_windows)} windows are Envoy's rate limit service's fixed 30 and 365 days "
                "(a Month, a Year), counted from the Unix epoch, not calendar months or years.",
            )
        )
    if any(pool.engine.scheduling_policy != "priority" for pool in pools.values()):
        fcfs = sorted(pool.name for pool in pools.values() if pool.engine.scheduling_policy != "priority")
        limits.append(
            (
                "priority",
                f"Priority: not sent to pools {', '.join(fcfs)}, whose engines schedule fcfs (vLLM rejects a non-zero "
                "priority there); a client's own priority is removed.",
            )
        )
    if salted:
        limits.append(
            (
                "salt",
                "Cache salts are written into the AIGatewayRoutes' bodyMutation (not a Kubernetes Secret): restrict who can read AIGatewayRoutes.",
            )
        )
    if policy.public_prefixes:
        limits.append(
            (
                "salt",
                "Public prefixes: a salt covers the whole request (vLLM hashes it into the first block), so salted tenants do not share the platform's public prefixes.",
            )
        )
    return tuple(limits)


def prechecks(policy: QuotaPolicy) -> list:
    """``check``'s findings of what this target refuses or loses (``registry.TARGETS``), warnings, since the other
    targets still generate: a tenant whose largest request costs more hits than Envoy counts (it is charged nothing),
    and a tenant with more LoRA adapters than one route's rules hold."""
    from quotacalc.core.checks import Finding
    from quotacalc.core.plan_size import load_pool_of

    pools = {pool.name: pool for pool in policy.pools}
    found = []
    for tenant in policy.tenants:
        if (problem := hits_problem(tenant, pools[load_pool_of(tenant)])) is not None:
            found.append(
                Finding(
                    severity="warning",
                    code="envoy-hits-addend",
                    subject=f"tenants.{tenant.name}",
                    message=f"{problem[0]}: the envoy target charges such a response nothing",
                    fix=problem[1],
                )
            )
        if (problem := lora_adapters_problem(len(tenant.lora_adapters))) is not None:
            found.append(
                Finding(
                    severity="warning",
                    code="envoy-lora-adapters",
                    subject=f"tenants.{tenant.name}.lora_adapters",
                    message=f"{problem[0]}: generate refuses the envoy target",
                    fix=problem[1],
                )
            )
    return found
