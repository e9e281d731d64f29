"""Kong (decK, ``_format_version: "3.0"``): costs that express units, and a cost budget per consumer.

One service per pool, whose ``ai-proxy`` prices tokens in units: ``input_cost`` and ``output_cost`` are per 1M
tokens, so 1,000,000 x the weight makes the plugin's cost a count of units. One consumer per tenant. For Kong
Gateway Enterprise (3.14+, the default edition) an ``ai-rate-limiting-advanced`` plugin in its policies form, a
limit with ``tokens_count_strategy: cost``: a sliding window as long as the tenant's burst, holding the bucket's
depth. Kong OSS has no such plugin: its edition gets the OSS ``rate-limiting`` plugin, which counts requests.
Plugin configs are checked in the tests against Kong's own plugin schemas (3.15). The tenant's salt and priority are set server-side by
``request-transformer`` (a client's removed from the body first). Tiers and pools become consumer tags and ACL groups: the decK release
this project validates with (Debian's 1.4.0) predates consumer groups.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from quotacalc.core.policy import PoolPolicy, QuotaPolicy, TenantPolicy
from quotacalc.exporters._text import (
    long_context_lines,
    lora_lines,
    prompt_length_lines,
    salt_of,
    unsent_priority_effect,
    yaml_text,
)
from quotacalc.exporters.base import ENGINE_PORT, Export, ExportOptions, GeneratedFile

#: The Kong editions a file is written for: Enterprise's ai-rate-limiting-advanced limits units; Kong OSS has no
#: token or cost limiter.
ENTERPRISE = "enterprise"
OSS = "oss"
#: ai-proxy costs are per 1M tokens.
TOKENS_PER_COST = 1_000_000
#: The provider name ai-rate-limiting-advanced keys its limits by (vLLM speaks the OpenAI API).
PROVIDER = "openai"
#: The environment variable holding the whole upstream Authorization header value, ``Bearer <the engines'
#: --api-key>``: Kong resolves a secret reference only where it is a field's whole value (``Bearer {vault://...}``
#: is sent as written), and its env vault reads ``vllm-auth-header`` as VLLM_AUTH_HEADER (kong/vaults/env/init.lua:
#: upper-cased, dashes to underscores).
UPSTREAM_AUTH_ENV = "VLLM_AUTH_HEADER"
UPSTREAM_AUTH = "{vault://env/vllm-auth-header}"


def _upstream(pool: PoolPolicy) -> str:
    return f"http://{pool.name}:{ENGINE_PORT}/v1/chat/completions"


def _service(pool: PoolPolicy, weights: tuple[float, float]) -> dict:
    prompt, output = weights
    return {
        "name": pool.name,
        "url": _upstream(pool),
        "tags": ["quotacalc"],
        "routes": [{"name": pool.name, "paths": [f"/pools/{pool.name}/v1/chat/completions"], "strip_path": True}],
        "plugins": [
            {"name": "key-auth", "config": {"key_names": ["apikey"], "hide_credentials": True}},
            {"name": "acl", "config": {"allow": [f"pool-{pool.name}"], "hide_groups_header": True}},
            {
                "name": "ai-proxy",
                "config": {
                    "route_type": "llm/v1/chat",
                    "auth": {"header_name": "Authorization", "header_value": UPSTREAM_AUTH},
                    "model": {
                        "provider": PROVIDER,
                        "name": pool.engine.served_model_name,
                        "options": {
                            "upstream_url": _upstream(pool),
                            "input_cost": round(prompt * TOKENS_PER_COST, 6),
                            "output_cost": round(output * TOKENS_PER_COST, 6),
                        },
                    },
                },
            },
        ],
    }


def window_s(tenant: TenantPolicy) -> int:
    """The sliding window: the bucket's burst in whole seconds (at least 1)."""
    return max(1, round(tenant.bucket_depth_units / tenant.bucket_rate_units_per_s))


#: Body fields a client must not choose: request-transformer removes the client's, then adds the tenant's.
TENANT_BODY_FIELDS = ("cache_salt", "priority")


def _body_rules(tenant: TenantPolicy, salt: str | None, sends_priority: bool) -> dict:
    """The tenant's request-transformer: it removes a client's ``priority`` and ``cache_salt`` from the JSON body,
    then adds the tenant's (``add`` sets a field only where it is absent, and runs after ``remove``:
    transform_json_body in kong/plugins/request-transformer/access.lua). Values are added as JSON strings
    (``"priority": "1"``): vLLM's and SGLang's request models are pydantic models in lax mode, which read "1" as the
    integer 1."""
    added = []
    if salt is not None:
        added.append(f"cache_salt:{salt}")
    if sends_priority:
        added.append(f"priority:{tenant.priority}")
    config: dict = {"remove": {"body": list(TENANT_BODY_FIELDS)}}
    if added:
        config["add"] = {"body": added}
    return {"name": "request-transformer", "config": config}


def _sends_priority(tenant: TenantPolicy, pools: Mapping[str, PoolPolicy]) -> bool:
    """Whether every pool the tenant may call schedules by priority (a consumer's one plugin serves them all, and
    vLLM rejects a non-zero priority on an fcfs engine)."""
    names = [tenant.pool] + ([tenant.long_context_pool] if tenant.long_context_pool else [])
    return all(pools[name].engine.scheduling_policy == "priority" for name in names)


def _cost_limit(tenant: TenantPolicy) -> dict:
    """Enterprise's ai-rate-limiting-advanced in its policies form (Kong 3.14+; ``llm_providers`` is deprecated
    there): one policy matching the consumer, the bucket's depth in units (ai-proxy's cost) over a sliding window of
    its burst."""
    window = window_s(tenant)
    return {
        "name": "ai-rate-limiting-advanced",
        "config": {
            "strategy": "local",
            "policies": [
                {
                    "match": [{"type": "consumer", "key": "username", "values": [tenant.name]}],
                    "limits": [
                        {
                            "limit": _round_down(tenant.bucket_rate_units_per_s * window),
                            "window_size": window,
                            "tokens_count_strategy": "cost",
                        }
                    ],
                    "window_type": "sliding",
                }
            ],
        },
    }


#: Kong OSS rate-limiting's windows (its config keys), seconds each.
OSS_WINDOWS = (
    ("second", 1),
    ("minute", 60),
    ("hour", 3600),
    ("day", 86400),
    ("month", 30 * 86400),
    ("year", 365 * 86400),
)


def oss_window(tenant: TenantPolicy) -> tuple[str, int]:
    """The OSS rate-limiting window nearest the tenant's burst on a log scale (the shorter one on a tie)."""
    burst_s = max(tenant.bucket_depth_units / tenant.bucket_rate_units_per_s, 1.0)
    return min(OSS_WINDOWS, key=lambda window: (abs(math.log(window[1] / burst_s)), window[1]))


def _request_limit(tenant: TenantPolicy) -> dict:
    """Kong OSS's rate-limiting counts requests, not tokens: the tenant's units per window as a request count (at
    least 1), which a request producing an output token (at least W >= 1 unit) never passes before its units would."""
    unit, seconds = oss_window(tenant)
    requests = max(1, math.floor(tenant.bucket_rate_units_per_s * seconds))
    return {"name": "rate-limiting", "config": {unit: requests, "limit_by": "consumer", "policy": "local"}}


def _consumer(tenant: TenantPolicy, salt: str | None, sends_priority: bool, edition: str) -> dict:
    plugins: list[dict] = [_cost_limit(tenant) if edition == ENTERPRISE else _request_limit(tenant)]
    pools = [tenant.pool] + ([tenant.long_context_pool] if tenant.long_context_pool else [])
    plugins.append(_body_rules(tenant, salt, sends_priority))
    return {
        "username": tenant.name,
        "custom_id": tenant.name,
        "tags": ["quotacalc", f"tier-{tenant.tier}"],
        "acls": [{"group": f"pool-{pool}"} for pool in pools],
        "plugins": plugins,
    }


def _round_down(value: float) -> float:
    """Limits in units, to 3 decimals, never above the contract."""
    return math.floor(value * 1000) / 1000


def _pool_weights(policy: QuotaPolicy) -> dict[str, tuple[float, float]]:
    """(prompt, output) weights per pool, from the tenants served there (the pool's W)."""
    weights: dict[str, tuple[float, float]] = {}
    for pool in policy.pools:
        weights[pool.name] = (1.0, pool.output_weight)
    for tenant in policy.tenants:
        weights[tenant.pool] = (tenant.weights.prompt, tenant.weights.output)
        if tenant.long_context_pool and tenant.long_context_weights:
            weights[tenant.long_context_pool] = (tenant.long_context_weights.prompt, tenant.long_context_weights.output)
    return weights


def document(policy: QuotaPolicy, salts: Mapping[str, str], edition: str = ENTERPRISE) -> dict:
    """The decK state file, for Kong Gateway Enterprise or Kong OSS (``edition``)."""
    weights = _pool_weights(policy)
    pools = {pool.name: pool for pool in policy.pools}
    consumers = [
        _consumer(tenant, salt_of(tenant, salts), _sends_priority(tenant, pools), edition)
        for tenant in sorted(policy.tenants, key=lambda tenant: tenant.name)
    ]
    return {
        "_format_version": "3.0",
        "services": [_service(pool, weights[pool.name]) for pool in policy.pools],
        "consumers": consumers,
    }


def export(policy: QuotaPolicy, salts: Mapping[str, str], options: ExportOptions) -> Export:
    """kong/kong.yaml, a decK state file (holds the salts when any tenant is salted)."""
    salted = any(tenant.salt_ref is not None for tenant in policy.tenants)
    edition = options.kong_edition
    needs = (
        "Needs Kong Gateway Enterprise 3.14 or later: ai-rate-limiting-advanced is an Enterprise plugin (Kong OSS "
        "refuses the sync); generate with --kong-edition oss for Kong OSS."
        if edition == ENTERPRISE
        else "For Kong OSS: no token or cost limiter (ai-rate-limiting-advanced is Enterprise-only); rate-limiting "
        "counts requests. kong/LIMITS.md lists what is lost."
    )
    header = (
        "Generated by quotacalc: deck gateway sync kong/kong.yaml.\n"
        f"{needs}\n"
        f"Kong reads the engines' Authorization header from {UPSTREAM_AUTH_ENV}: export {UPSTREAM_AUTH_ENV}=\"Bearer "
        '<the engines\' --api-key>" in Kong\'s environment (the whole header value, "Bearer " included).'
    )
    if salted:
        header += "\nHolds the tenants' cache salts: keep it out of logs and repositories anyone can read."
    text = yaml_text(document(policy, salts, edition), header=header)
    return Export(
        target="kong",
        files=(GeneratedFile(path="kong/kong.yaml", text=text, secret=salted),),
        notes=_limits(policy, edition),
    )


def _edition_limits(policy: QuotaPolicy, edition: str) -> list[tuple[str, str]]:
    """What the edition's limiter writes beyond its declared capabilities: the OSS windows per tenant."""
    if edition == ENTERPRISE:
        return []
    windows = "; ".join(
        f"{tenant.name} {max(1, math.floor(tenant.bucket_rate_units_per_s * oss_window(tenant)[1])):,} a "
        f"{oss_window(tenant)[0]}"
        for tenant in sorted(policy.tenants, key=lambda tenant: tenant.name)
    )
    return [
        (
            "rate",
            "What is written instead: the OSS rate-limiting plugin counts requests per fixed window (the one nearest "
            f"each tenant's burst), at the tenant's units per window as a request count ({windows}); a request with an "
            "output token costs at least one unit (W >= 1), so this bound stops floods of tiny requests and never "
            "binds before the units would.",
        )
    ]


def _limits(policy: QuotaPolicy, edition: str = ENTERPRISE) -> tuple[tuple[str, str], ...]:
    limits = [
        *_edition_limits(policy, edition),
        (
            "files",
            f"Upstream key: ai-proxy sends {UPSTREAM_AUTH} as the engines' Authorization header; Kong resolves it from "
            f"the environment variable {UPSTREAM_AUTH_ENV}, which must hold the whole value, \"Bearer <the engines' "
            '--api-key>" (Kong resolves a reference only where it is the whole field).',
        ),
    ]
    pools = {pool.name: pool for pool in policy.pools}
    unsent = sorted(tenant.name for tenant in policy.tenants if not _sends_priority(tenant, pools))
    if unsent:
        limits.append(
            (
                "priority",
                f"Priority: not sent for {', '.join(unsent)}, a pool of theirs schedules fcfs (vLLM rejects a non-zero "
                "priority there; a client's is removed); " + unsent_priority_effect(policy, unsent),
            )
        )
    limits += [
        ("weights", line)
        for line in prompt_length_lines(
            policy,
            "a long prompt passes at less than its cost, and a tenant sized on long prompts gets more than it was "
            "sized for.",
        )
    ]
    limits += [
        ("routing", line)
        for line in long_context_lines(policy, "such a tenant must call the long-context pool's path itself.")
    ]
    limits += [
        ("lora", line)
        for line in lora_lines(
            policy,
            "not served through these routes until a route per adapter names it.",
        )
    ]
    if any(tenant.salt_ref is not None for tenant in policy.tenants) and policy.public_prefixes:
        limits.append(
            (
                "salt",
                "Public prefixes: a salt covers the whole request, so salted tenants do not share the platform's public prefixes.",
            )
        )
    return tuple(limits)
