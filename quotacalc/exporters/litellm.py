"""LiteLLM proxy: a ``config.yaml`` whose per-token costs express units in USD, plus team and key payloads.

Each pool is one deployment (its model name is the pool's name) priced so that a unit costs what the pool
costs per unit sold at its ceiling: ``usd_per_unit = usd_per_month / (capacity_units_per_s x 720 h)``; so
``input_cost_per_token`` is the prompt weight times that, ``output_cost_per_token`` W times it. Spend in USD is
then units, and a tenant's ``max_budget`` is its contracted units over ``budget_duration``. Without a
database LiteLLM enforces only per-deployment ``tpm`` (``enforce_model_rate_limits``); budgets, keys and
teams need its Postgres, so their payloads are written for its API (``/team/new``, ``/key/generate``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from quotacalc.core.policy import RETRY_AFTER_RULE, PoolPolicy, QuotaPolicy, TenantPolicy
from quotacalc.exporters._text import (
    json_text,
    load_pools,
    long_context_lines,
    lora_lines,
    prompt_length_lines,
    yaml_text,
)
from quotacalc.exporters.base import ENGINE_PORT, Export, ExportOptions, GeneratedFile

#: Hours in the month of the method's $/month figures (docs/method.md §6: 720 h): used only for a
#: hand-built policy whose pools do not carry their price per unit.
SECONDS_PER_MONTH = 720 * 3600
#: The window a tenant's USD budget resets over (LiteLLM's duration syntax) and its length.
BUDGET_DURATION = "1h"
BUDGET_DURATION_S = 3600
#: vLLM's default port; a Service named after the pool is assumed (edit where yours differs).


def usd_per_unit(pool: PoolPolicy) -> float:
    """What one unit costs when the pool sells its whole capacity: the policy's own figure (priced with the
    deployment's hours per month), else $/month over units in a 720-hour month."""
    if pool.usd_per_unit is not None:
        return pool.usd_per_unit
    return pool.usd_per_month / (pool.capacity_units_per_s * SECONDS_PER_MONTH)


def _cached_weight(policy: QuotaPolicy, pool: PoolPolicy) -> float:
    """The highest cached-prompt weight of the tenants a pool serves (a deployment has one price)."""
    weights = [t.weights.cached_prompt for t in policy.tenants if t.pool == pool.name]
    weights += [
        t.long_context_weights.cached_prompt
        for t in policy.tenants
        if t.long_context_pool == pool.name and t.long_context_weights
    ]
    return max(weights, default=1.0)


def _deployment(policy: QuotaPolicy, pool: PoolPolicy) -> dict:
    unit = usd_per_unit(pool)
    return {
        "model_name": pool.name,
        "litellm_params": {
            "model": f"hosted_vllm/{pool.engine.served_model_name}",
            "api_base": f"http://{pool.name}:{ENGINE_PORT}/v1",
            "api_key": "os.environ/VLLM_API_KEY",
            # Raw tokens per minute: a prompt-only load reaches the pool's capacity in units exactly.
            "tpm": math.floor(pool.capacity_units_per_s * 60),
            "input_cost_per_token": float(f"{unit:.6e}"),
            "output_cost_per_token": float(f"{unit * pool.output_weight:.6e}"),
            "cache_read_input_token_cost": float(f"{unit * _cached_weight(policy, pool):.6e}"),
        },
        "model_info": {"id": pool.name, "max_input_tokens": pool.engine.max_model_len},
    }


def priority_reservation(policy: QuotaPolicy, pool: str | None = None) -> dict[str, float]:
    """Each tier's share of the units sold (on ``pool``, or on every pool), in priority order (LiteLLM reserves
    capacity by these shares). A pool's shares count the load it carries: a tenant sized on traffic whose mean
    prompt routes to its long-context pool (``TenantPolicy.load_pool``) counts there, not on its standard
    pool (``core.plan_size.load_pool``, as check and size count it)."""
    homes = load_pools(policy)
    tenants = [tenant for tenant in policy.tenants if pool is None or homes[tenant.name] == pool]
    sold = sum(tenant.bucket_rate_units_per_s for tenant in tenants)
    shares: dict[str, float] = {}
    for tier in sorted(policy.tiers, key=lambda tier: (tier.priority, tier.name)):
        units = sum(t.bucket_rate_units_per_s for t in tenants if t.tier == tier.name)
        if units > 0:
            shares[tier.name] = round(units / sold, 4)
    return shares


def _reservation_lines(policy: QuotaPolicy) -> list[str]:
    """Where one pool's tiers hold other shares than the global setting gives them: LiteLLM applies it per model."""
    overall = priority_reservation(policy)
    lines = []
    for pool in policy.pools:
        own = priority_reservation(policy, pool.name)
        if own and any(abs(own.get(tier, 0.0) - overall.get(tier, 0.0)) > 0.05 for tier in {*overall, *own}):
            shown = ", ".join(f"{tier} {share:g}" for tier, share in own.items())
            lines.append(
                f"priority_reservation is one setting, applied to each model's tpm: it holds every pool's shares "
                f"together, and pool '{pool.name}' sells its tiers otherwise ({shown}), so a saturated '{pool.name}' "
                "reserves capacity by the shares of the others."
            )
    return lines


def config(policy: QuotaPolicy) -> dict:
    """The proxy's config.yaml."""
    return {
        "model_list": [_deployment(policy, pool) for pool in policy.pools],
        "router_settings": {"optional_pre_call_checks": ["enforce_model_rate_limits"]},
        "litellm_settings": {
            "callbacks": ["dynamic_rate_limiter_v3"],
            "priority_reservation": priority_reservation(policy),
        },
        "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"},
    }


def _limits_of(policy: QuotaPolicy, tenant: TenantPolicy, home: str) -> dict:
    """A tenant's team and key limits; ``home``: the pool its rate is counted in (its budget is that pool's USD)."""
    pool = next(pool for pool in policy.pools if pool.name == home)
    models = [tenant.pool] + ([tenant.long_context_pool] if tenant.long_context_pool else [])
    return {
        "models": models,
        "max_budget": math.floor(tenant.bucket_rate_units_per_s * BUDGET_DURATION_S * usd_per_unit(pool) * 1e6) / 1e6,
        "budget_duration": BUDGET_DURATION,
        "tpm_limit": math.floor(tenant.bucket_rate_units_per_s * 60),
        "max_parallel_requests": tenant.max_concurrent_sequences,
        "metadata": {"priority": tenant.tier, "tenant": tenant.name},
    }


def team_payloads(policy: QuotaPolicy) -> list[dict]:
    """POST /team/new bodies, one team per tenant. A team has no concurrency cap in LiteLLM (NewTeamRequest has no
    max_parallel_requests, and drops it unread): the tenant's one key carries it."""
    homes = load_pools(policy)
    teams = []
    for tenant in sorted(policy.tenants, key=lambda t: t.name):
        limits = _limits_of(policy, tenant, homes[tenant.name])
        del limits["max_parallel_requests"]
        teams.append({"team_id": tenant.name, "team_alias": tenant.name, **limits})
    return teams


def key_payloads(policy: QuotaPolicy) -> list[dict]:
    """POST /key/generate bodies, one key per tenant in its team (LiteLLM generates the key itself)."""
    homes = load_pools(policy)
    return [
        {"key_alias": t.name, "team_id": t.name, **_limits_of(policy, t, homes[t.name])}
        for t in sorted(policy.tenants, key=lambda t: t.name)
    ]


def export(policy: QuotaPolicy, salts: Mapping[str, str], options: ExportOptions) -> Export:
    """litellm/config.yaml, litellm/teams.json and litellm/keys.json (no salts: LiteLLM cannot inject them)."""
    files = (
        GeneratedFile(
            path="litellm/config.yaml",
            text=yaml_text(config(policy), header="Generated by quotacalc: litellm --config config.yaml"),
        ),
        GeneratedFile(path="litellm/teams.json", text=json_text(team_payloads(policy))),
        GeneratedFile(path="litellm/keys.json", text=json_text(key_payloads(policy))),
    )
    return Export(target="litellm", files=files, limits=_limits(policy))


def _limits(policy: QuotaPolicy) -> tuple[str, ...]:
    limits = [
        "Token bucket: a tenant's limit is a USD budget (max_budget, its units over "
        f"{BUDGET_DURATION}) reset on LiteLLM's schedule, and a raw-token tpm_limit; neither refills continuously.",
        "tpm and tpm_limit count raw tokens, not units: an output-heavy load can use up to W times its units before "
        "they bind; only max_budget (USD) carries the weights.",
        "Budgets, teams and keys need LiteLLM's database (Postgres); without it only the deployments' tpm is enforced.",
        "rpm and rpm_limit are not set: the policy prices tokens, not requests.",
        "Cached prompt tokens: a deployment has one cache_read_input_token_cost, set from the highest cached weight "
        "of the tiers on its pool; tiers with a lower weight are overcharged.",
        "priority_reservation (dynamic_rate_limiter_v3) is a LiteLLM Enterprise feature (LITELLM_LICENSE); without it "
        "every key shares the default pool.",
        "Cache salts: LiteLLM has no per-tenant cache_salt injection; salted tenants share the prefix cache through it.",
        "Engine priority: not sent to vLLM per tenant (a deployment's extra_body is the same for every tenant).",
        "Resident KV cap per tenant per replica: not expressible.",
        "Max context per tier and output reservation cap: not enforced (max_input_tokens is per deployment).",
        f"Retry-After: LiteLLM's 429 does not follow the policy's rule ({RETRY_AFTER_RULE}).",
        "Clients name the pool as the model (model names are the pool names); LiteLLM does not route by prompt size.",
    ]
    limits += _reservation_lines(policy)
    limits += prompt_length_lines(
        policy,
        "a long prompt spends less budget than its cost, and a tenant sized on long prompts gets more than it was sized for.",
    )
    limits += long_context_lines(
        policy,
        "such a tenant must request the long-context pool as its model; its budget is priced at the USD per unit of "
        "the pool its rate is counted in.",
    )
    homes = load_pools(policy)
    moved = sorted((home, tenant.name) for tenant in policy.tenants if (home := homes[tenant.name]) != tenant.pool)
    for home in sorted({home for home, _ in moved}):
        names = ", ".join(name for pool, name in moved if pool == home)
        limits.append(
            f"{names}: sized on traffic whose mean prompt routes to pool {home}, so the rate, the budget (at "
            f"{home}'s USD per unit) and the tier shares are counted on {home}; a request to another pool spends "
            "that budget at that pool's price."
        )
    limits += lora_lines(
        policy,
        "model_list holds each pool's base model only and teams may call only their pools, so a request cannot "
        "name an adapter; add a model_list entry per adapter (hosted_vllm/<adapter>) and it to the team's models.",
    )
    return tuple(limits)
