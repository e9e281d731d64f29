"""Sizing every tenant of a plan at once: the view sales asked for (docs/method.md §1, §6).

Computed from the canonical policy, so ``size`` and the generated files can never disagree.
"""

from __future__ import annotations

import math

from pydantic import BaseModel, ConfigDict, Field

from quotacalc.core.policy import QuotaPolicy
from quotacalc.core.tenant import whole_replicas


class TenantSizeRow(BaseModel):
    """One tenant's load and its cost, shared against dedicated."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    tier: str
    pool: str
    placement: str
    rate_source: str
    units_per_s: float
    replicas: float = Field(description="units_per_s / replica_units_per_s of its pool")
    bucket_rate_units_per_s: float
    bucket_depth_units: float
    shared_usd_per_month: float = Field(description="replicas × replica $/month: its share of shared replicas")
    dedicated_replicas: int = Field(description="ceil(replicas), at least 1")
    dedicated_usd_per_month: float = Field(description="dedicated_replicas × replica $/month")


class PlanSizeTotals(BaseModel):
    """Totals over the tenants."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    tenants: int
    units_sold_per_s: float
    replicas: float = Field(description="sum of the tenants' replicas (fractional)")
    shared_usd_per_month: float = Field(description="shared tenants' shares of shared replicas")
    dedicated_usd_per_month: float = Field(description="dedicated tenants' whole replicas")
    pools_usd_per_month: float = Field(description="every pool's replicas, used or not")


class PlanSize(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    tenants: tuple[TenantSizeRow, ...]
    totals: PlanSizeTotals


def size_plan(policy: QuotaPolicy, *, pool: str | None = None) -> PlanSize:
    """One row per tenant (of ``pool`` when given) and the totals."""
    pools = {entry.name: entry for entry in policy.pools}
    rows = []
    for tenant in policy.tenants:
        if pool is not None and tenant.pool != pool:
            continue
        home = pools[tenant.pool]
        replicas = tenant.bucket_rate_units_per_s / home.replica_units_per_s
        whole = whole_replicas(replicas)
        per_replica = home.usd_per_month / home.replicas
        rows.append(
            TenantSizeRow(
                name=tenant.name,
                tier=tenant.tier,
                pool=tenant.pool,
                placement=tenant.placement,
                rate_source=tenant.rate_source,
                units_per_s=tenant.bucket_rate_units_per_s,
                replicas=replicas,
                bucket_rate_units_per_s=tenant.bucket_rate_units_per_s,
                bucket_depth_units=tenant.bucket_depth_units,
                shared_usd_per_month=replicas * per_replica,
                dedicated_replicas=whole,
                dedicated_usd_per_month=whole * per_replica,
            )
        )
    # The pool asked for costs what it costs even with no tenant of its own (a long-context pool).
    listed = (
        {row.pool for row in rows}
        | ({pool} if pool is not None else set())
        | {
            entry.long_context_pool
            for entry in policy.tenants
            if entry.long_context_pool and entry.pool in {r.pool for r in rows}
        }
    )
    totals = PlanSizeTotals(
        tenants=len(rows),
        units_sold_per_s=math.fsum(row.units_per_s for row in rows),
        replicas=math.fsum(row.replicas for row in rows),
        shared_usd_per_month=math.fsum(row.shared_usd_per_month for row in rows if row.placement == "shared"),
        dedicated_usd_per_month=math.fsum(row.dedicated_usd_per_month for row in rows if row.placement == "dedicated"),
        pools_usd_per_month=math.fsum(
            entry.usd_per_month for entry in policy.pools if pool is None or entry.name in listed
        ),
    )
    return PlanSize(tenants=tuple(rows), totals=totals)
