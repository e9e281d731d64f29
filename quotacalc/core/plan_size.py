"""Sizing every tenant of a plan at once: the view sales asked for (docs/method.md §1, §6).

Computed from the canonical policy, so ``size`` and the generated files can never disagree.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from quotacalc.core.policy import QuotaPolicy, TenantPolicy
from quotacalc.core.traffic import whole_replicas


class TenantSizeRow(BaseModel):
    """One tenant's load and its cost, shared against dedicated."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    tier: str
    pool: str = Field(description="the tenant's standard pool")
    load_pool: str = Field(
        description="the pool whose replicas carry its load: the long-context pool for traffic whose mean prompt "
        "routes there, else its pool"
    )
    placement: str
    rate_source: str
    units_per_s: float
    replicas: float = Field(
        description="units_per_s / replica_units_per_s of the pool its units are counted in: the long-context "
        "pool for traffic whose mean prompt routes there, else its pool"
    )
    bucket_rate_units_per_s: float
    bucket_depth_units: float
    shared_usd_per_month: float = Field(description="replicas × replica $/month: its share of shared replicas")
    dedicated_replicas: int = Field(description="ceil(replicas), at least 1")
    dedicated_total_usd_per_month: float = Field(
        description="dedicated_replicas × replica $/month: the tenant's whole replicas (size's and the comparison "
        "rows' key for it)"
    )
    dedicated_usd_per_month: float = Field(
        description="the same as dedicated_total_usd_per_month, kept for scripts written before it (elsewhere "
        "this key is one replica's cost)"
    )


class PlanSizeTotals(BaseModel):
    """Totals over the tenants."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    tenants: int
    units_sold_per_s: float
    replicas: float = Field(description="sum of the tenants' replicas (fractional)")
    shared_usd_per_month: float = Field(description="shared tenants' shares of shared replicas")
    dedicated_usd_per_month: float = Field(description="dedicated tenants' whole replicas")
    pools_usd_per_month: float = Field(description="every pool's replicas, used or not")
    oversubscription_ratio: float = Field(
        1.0, description="the plan's measured oversubscription ratio (quotacalc fleet); 1: none measured"
    )
    replicas_at_measured_peak: float = Field(
        0.0,
        description="the replicas of the shared tenants the ratio raises (those of its measured pool, or of every "
        "pool where it names none) / oversubscription_ratio, plus the other tenants' (a pool that serves one tenant "
        "multiplexes nothing): the load the replicas carry at the fleet's measured peak",
    )


class PlanSize(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    tenants: tuple[TenantSizeRow, ...]
    totals: PlanSizeTotals


def load_pool_of(tenant: TenantPolicy) -> str:
    """The pool whose units a tenant's rate is counted in, and whose replicas carry that load (``build_policy`` sets
    it: the long-context pool for a tenant sized on traffic whose mean prompt routes there, else its standard pool;
    a contract says nothing of its share above the threshold, so it stays on its standard pool)."""
    return tenant.load_pool or tenant.pool


def size_plan(policy: QuotaPolicy, *, pool: str | None = None) -> PlanSize:
    """One row per tenant (of ``pool`` when given: its standard pool, or the pool its load is counted on) and the
    totals; a tenant routed to a long-context pool is counted in that pool's replicas (``load_pool``)."""
    pools = {entry.name: entry for entry in policy.pools}
    rows = []
    for tenant in policy.tenants:
        # Its units are that pool's: a long-context pool's replica sells another number of them, at its own price.
        load_pool = pools[load_pool_of(tenant)]
        if pool is not None and pool not in (tenant.pool, load_pool.name):
            continue
        replicas = tenant.bucket_rate_units_per_s / load_pool.replica_units_per_s
        whole = whole_replicas(replicas)
        per_replica = load_pool.usd_per_month / load_pool.replicas
        rows.append(
            TenantSizeRow(
                name=tenant.name,
                tier=tenant.tier,
                pool=tenant.pool,
                load_pool=load_pool.name,
                placement=tenant.placement,
                rate_source=tenant.rate_source,
                units_per_s=tenant.bucket_rate_units_per_s,
                replicas=replicas,
                bucket_rate_units_per_s=tenant.bucket_rate_units_per_s,
                bucket_depth_units=tenant.bucket_depth_units,
                shared_usd_per_month=replicas * per_replica,
                dedicated_replicas=whole,
                dedicated_total_usd_per_month=whole * per_replica,
                dedicated_usd_per_month=whole * per_replica,
            )
        )
    listed = pools_shown(policy, pool)
    measured = policy.oversubscription
    ratio = measured.ratio if measured else 1.0
    raised = [measured is not None and measured.raises(row.load_pool, row.placement) for row in rows]
    totals = PlanSizeTotals(
        tenants=len(rows),
        units_sold_per_s=math.fsum(row.units_per_s for row in rows),
        replicas=math.fsum(row.replicas for row in rows),
        shared_usd_per_month=math.fsum(row.shared_usd_per_month for row in rows if row.placement == "shared"),
        dedicated_usd_per_month=math.fsum(row.dedicated_usd_per_month for row in rows if row.placement == "dedicated"),
        pools_usd_per_month=math.fsum(entry.usd_per_month for entry in policy.pools if entry.name in listed),
        oversubscription_ratio=ratio,
        replicas_at_measured_peak=math.fsum(row.replicas for row, up in zip(rows, raised, strict=True) if up) / ratio
        + math.fsum(row.replicas for row, up in zip(rows, raised, strict=True) if not up),
    )
    return PlanSize(tenants=tuple(rows), totals=totals)


def pools_shown(policy: QuotaPolicy, pool: str | None) -> set[str]:
    """The pools a ``size`` of ``pool`` (every pool when None) is about: the pool asked for, which costs what it
    costs even with no tenant of its own, and the long-context pools its tenants' long prompts go to."""
    if pool is None:
        return {entry.name for entry in policy.pools}
    return {pool} | {
        tenant.long_context_pool for tenant in policy.tenants if tenant.pool == pool and tenant.long_context_pool
    }
