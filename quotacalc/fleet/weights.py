"""The weights each tenant's requests are priced with on the pool measured, taken from the canonical policy (the
``UnitWeights`` every gateway config is generated from), and the tenants' contracts there."""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

from quotacalc.core.plan_size import load_pool_of
from quotacalc.errors import UsageError
from quotacalc.fleet.aggregate import TenantWeights

if TYPE_CHECKING:
    from quotacalc.core.plan import Plan
    from quotacalc.core.policy import PoolPolicy, QuotaPolicy


class PoolWeights(NamedTuple):
    """What fleet prices a measured pool's log rows with."""

    #: The pool the log was measured on.
    pool: PoolPolicy
    #: Each tenant's weights on it, with the prompt bounds routing gives its rows there.
    tenant_weights: tuple[TenantWeights, ...]
    #: Tenant name -> contracted units/s, for the tenants whose load lands on this pool.
    contracts: dict[str, float]
    #: The weights of a row whose tenant is not in the plan.
    default: TenantWeights


def pool_weights(policy: QuotaPolicy, plan: Plan, pool_name: str | None) -> PoolWeights:
    """The measured pool, each tenant's weights and routing bounds on it, contracts, and the default weights."""
    names = [pool.name for pool in policy.pools]
    if pool_name is None:
        standard = [pool.name for pool in policy.pools if pool.role == "standard"]
        if len(standard) != 1:
            raise UsageError(f"the plan has pools {', '.join(names)}", field="--pool", fix="name the pool measured")
        pool_name = standard[0]
    if pool_name not in names:
        raise UsageError(f"no pool '{pool_name}' in the plan", field="--pool", fix=f"pools: {', '.join(names)}")
    pool = next(p for p in policy.pools if p.name == pool_name)
    tenants = []
    contracts = {}
    for tenant in policy.tenants:
        if tenant.pool == pool_name:
            upper = tenant.route_above_prompt_tokens if tenant.long_context_pool else None
            weights = tenant.weights
            tenants.append(
                TenantWeights(
                    tenant.name,
                    weights.prompt,
                    weights.prompt_per_prompt_token,
                    weights.cached_prompt,
                    weights.output,
                    None,
                    upper,
                )
            )
        elif tenant.long_context_pool == pool_name and tenant.long_context_weights is not None:
            weights = tenant.long_context_weights
            tenants.append(
                TenantWeights(
                    tenant.name,
                    weights.prompt,
                    weights.prompt_per_prompt_token,
                    weights.cached_prompt,
                    weights.output,
                    tenant.route_above_prompt_tokens,
                    None,
                )
            )
        if load_pool_of(tenant) == pool_name:
            contracts[tenant.name] = tenant.bucket_rate_units_per_s
    # A tenant in the log but not in the plan: the pool's W and prompt-length charge, the deployment's cached weight.
    deployment = next(p for p in plan.pools if p.name == pool_name).deployment
    above = None
    if pool.role == "long_context":
        feeders = [p.route_above_prompt_tokens for p in policy.pools if p.long_context_pool == pool_name]
        above = min((t for t in feeders if t is not None), default=None)
    default = TenantWeights(
        None,
        1.0,
        pool.prompt_length_charge.per_prompt_token,
        deployment.cached_prompt_weight,
        pool.output_weight,
        above,
        pool.route_above_prompt_tokens if pool.long_context_pool else None,
    )
    return PoolWeights(pool, tuple(tenants), contracts, default)
