"""The aggregation's rows turned into the figures: per window the oversubscription ratio, the fleet's peak and the
replicas it needs at the ceiling, each tenant's peak and p99 against its contract, and the reversal condition.

Everything here works on the few rows the engine returns (one per tenant and window), never on the log.
"""

from __future__ import annotations

import math
from datetime import datetime, timezone
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from quotacalc.fleet.aggregate import REJECT_REASONS


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class TenantWindow(_Frozen):
    """One tenant's load in windows of one size."""

    tenant: str
    peak_units_per_s: float = Field(description="the tenant's busiest window: units in it / window length")
    p99_units_per_s: float = Field(description="nearest-rank 99th percentile over every window of the period")
    contract_units_per_s: float | None = Field(description="the plan's bucket rate for the tenant; None: not in it")
    peak_over_contract: float | None = Field(description="peak / contract (above 1: over contract)")
    over_contract_units_per_s: float | None = Field(description="peak − contract where above it, else 0")
    peak_replicas: float | None = Field(description="peak / one replica's units/s at the ceiling")
    reversal: bool = Field(description="the peak alone needs more than reversal_replicas replicas")


class WindowFigures(_Frozen):
    """The figures at one window length."""

    window_s: float
    windows: int = Field(description="windows of this length in the period")
    fleet_peak_units_per_s: float
    fleet_p99_units_per_s: float
    sum_tenant_peaks_units_per_s: float
    oversubscription_ratio: float = Field(description="sum_tenant_peaks_units_per_s / fleet_peak_units_per_s")
    fleet_peak_replicas: float | None = Field(description="fleet peak / one replica's units/s at the ceiling")
    replicas_at_ceiling: int | None = Field(description="replicas the fleet peak needs at the ceiling, rounded up")
    tenants_over_contract: list[str]
    reversal_tenants: list[str]
    tenants: list[TenantWindow]


class TenantUsage(_Frozen):
    """One tenant's totals over the period."""

    tenant: str
    requests: int
    units: float
    mean_units_per_s: float
    contract_units_per_s: float | None
    requests_with_max_tokens: int
    output_reserved_tokens: float | None = Field(description="sum of max_tokens where the log has it")
    output_served_tokens: float | None = Field(description="output tokens of those same requests")
    output_reserved_over_served: float | None


class FleetReport(_Frozen):
    """What ``quotacalc fleet`` measured."""

    rows_read: int
    rows_used: int
    rows_other_pool: int = Field(description="rows of requests routed to another pool of the plan (not bad)")
    rows_rejected: dict[str, int]
    rows_rejected_total: int
    rows_rejected_fraction: float
    period_start: str | None
    period_end: str | None
    period_s: float
    attribution: str
    replica_units_per_s: float | None
    reversal_replicas: float
    windows: list[WindowFigures]
    tenants: list[TenantUsage]


def iso(seconds: float | None) -> str | None:
    """Epoch seconds as RFC 3339 UTC text, to the millisecond."""
    if seconds is None:
        return None
    moment = datetime.fromtimestamp(seconds, tz=timezone.utc)
    return moment.isoformat(timespec="milliseconds").replace("+00:00", "Z")


def build_report(
    rows: list[tuple[Any, ...]],
    *,
    contracts: dict[str, float],
    replica_units_per_s: float | None,
    reversal_replicas: float,
    attribution: str,
) -> FleetReport:
    """The report of the aggregation's ``rows`` (kind, window_s, tenant, label, a, b, c, d, e)."""
    read = 0
    rejected = dict.fromkeys(REJECT_REASONS, 0)
    other_pool = 0
    usage: dict[str, tuple[float, ...]] = {}
    period = (None, None)
    tenant_rows: dict[float, dict[str, tuple[float, float]]] = {}
    fleet_rows: dict[float, tuple[float, float, int]] = {}
    for kind, window_s, tenant, label, a, b, c, d, e in rows:
        if kind == "rows":  # one row per reason; the rows used have none
            read += int(a)
            if label is not None:
                rejected[label] = rejected.get(label, 0) + int(a)
        elif kind == "other_pool":
            other_pool = int(a or 0)
        elif kind == "usage":
            usage[tenant] = (a, b, c, d, e)
        elif kind == "period":
            period = (a, b)
        elif kind == "tenant":
            tenant_rows.setdefault(float(window_s), {})[tenant] = (float(a), float(b))
        elif kind == "fleet":
            fleet_rows[float(window_s)] = (float(a), float(b), int(c))
    rejected_total = sum(rejected.values())
    used = sum(int(values[1]) for values in usage.values())
    start, end = period
    period_s = (end - start) if start is not None and end is not None else 0.0
    names = sorted(set(usage) | set(contracts))
    windows = []
    for window_s in sorted(fleet_rows):
        fleet_peak, fleet_p99, count = fleet_rows[window_s]
        per_tenant = tenant_rows.get(window_s, {})
        tenants = []
        for name in names:
            peak, p99 = per_tenant.get(name, (0.0, 0.0))
            peak, p99 = max(peak, 0.0), max(p99, 0.0)  # a running sum of rates can end a hair below zero
            contract = contracts.get(name)
            replicas = peak / replica_units_per_s if replica_units_per_s else None
            tenants.append(
                TenantWindow(
                    tenant=name,
                    peak_units_per_s=peak,
                    p99_units_per_s=p99,
                    contract_units_per_s=contract,
                    peak_over_contract=peak / contract if contract else None,
                    over_contract_units_per_s=max(peak - contract, 0.0) if contract is not None else None,
                    peak_replicas=replicas,
                    reversal=replicas is not None and replicas > reversal_replicas,
                )
            )
        total = math.fsum(t.peak_units_per_s for t in tenants)
        fleet_replicas = fleet_peak / replica_units_per_s if replica_units_per_s else None
        windows.append(
            WindowFigures(
                window_s=window_s,
                windows=count,
                fleet_peak_units_per_s=fleet_peak,
                fleet_p99_units_per_s=max(fleet_p99, 0.0),
                sum_tenant_peaks_units_per_s=total,
                # The fleet's load is the sum of the tenants' at every instant: the ratio is at least 1.
                oversubscription_ratio=max(total / fleet_peak, 1.0) if fleet_peak > 0 else 1.0,
                fleet_peak_replicas=fleet_replicas,
                replicas_at_ceiling=math.ceil(fleet_replicas - 1e-9) if fleet_replicas is not None else None,
                tenants_over_contract=[
                    t.tenant
                    for t in tenants
                    if t.contract_units_per_s is not None and t.peak_units_per_s > t.contract_units_per_s
                ],
                reversal_tenants=[t.tenant for t in tenants if t.reversal],
                tenants=tenants,
            )
        )
    tenant_usage = []
    for name in names:
        units, requests, reserved, served, with_max = usage.get(name, (0.0, 0.0, None, None, 0.0))
        tenant_usage.append(
            TenantUsage(
                tenant=name,
                requests=int(requests or 0),
                units=float(units or 0.0),
                mean_units_per_s=float(units or 0.0) / period_s if period_s > 0 else 0.0,
                contract_units_per_s=contracts.get(name),
                requests_with_max_tokens=int(with_max or 0),
                output_reserved_tokens=reserved,
                output_served_tokens=served,
                output_reserved_over_served=reserved / served if reserved is not None and served else None,
            )
        )
    return FleetReport(
        rows_read=read,
        rows_used=used,
        rows_other_pool=other_pool,
        rows_rejected=rejected,
        rows_rejected_total=rejected_total,
        rows_rejected_fraction=rejected_total / read if read else 0.0,
        period_start=iso(start),
        period_end=iso(end),
        period_s=period_s,
        attribution=attribution,
        replica_units_per_s=replica_units_per_s,
        reversal_replicas=reversal_replicas,
        windows=windows,
        tenants=tenant_usage,
    )


def conservative_window(report: FleetReport) -> WindowFigures:
    """The window whose ratio is the smallest: the one that claims the least multiplexing."""
    return min(report.windows, key=lambda figures: (figures.oversubscription_ratio, figures.window_s))
