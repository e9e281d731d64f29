"""A traffic profile on a deployment -> units/s, replicas, token bucket, shared vs dedicated cost (docs/method.md §1, §3, §6)."""

from __future__ import annotations

import math
from typing import NamedTuple

from pydantic import BaseModel, ConfigDict

from quotacalc.core import memory
from quotacalc.core.deployment import Traffic
from quotacalc.core.explain import Ledger, Step, fmt
from quotacalc.core.kv import context_limit, request_kv
from quotacalc.core.price import PriceResult, _larger_pool_fix
from quotacalc.core.pricing_warning import PricingError, PricingWarning
from quotacalc.errors import QuotacalcError


def whole_replicas(replicas: float) -> int:
    """Whole replicas a load of ``replicas`` takes on dedicated hardware: at least one, rounded up, but a
    load a hair above a whole number from floating-point noise (2.0000000001) is not a replica more."""
    return max(1, math.ceil(replicas - 1e-9))


class BucketShortfall(NamedTuple):
    """A token bucket too shallow for a request: the gateway admits a request only when the bucket holds its units."""

    #: check's finding code: bucket-below-any-request or bucket-below-request.
    code: str
    #: The units the bucket must hold: the smallest request (1 + W), or the tenant's mean request.
    needed_units: float
    #: What is wrong, in check's words (``its bucket holds ...``).
    message: str


def bucket_shortfall(
    depth_units: float, output_weight: float, units_per_request: float | None = None
) -> BucketShortfall | None:
    """The one rule for a bucket's depth against a request (docs/method.md §3): below the smallest request (one
    prompt and one output token, 1 + W units) it admits nothing; below a tenant's mean request (``units_per_request``,
    when the tenant is sized on traffic) it rejects every such request. None when the bucket holds them.

    ``size`` warns with it, and ``check``'s bucket findings (core/checks.py) are built from it."""
    smallest = 1 + output_weight
    if depth_units < smallest:
        # The fix must clear the mean request too where there is one, or following it meets the second shortfall.
        return BucketShortfall(
            "bucket-below-any-request",
            max(smallest, units_per_request or 0.0),
            f"its bucket holds {depth_units:,.2f} units, less than the smallest request (one prompt and one output "
            f"token: 1 + {output_weight:.2f} units): the gateway rejects every request",
        )
    if units_per_request is not None and depth_units < units_per_request:
        return BucketShortfall(
            "bucket-below-request",
            units_per_request,
            f"its bucket holds {depth_units:,.1f} units, less than one of its mean requests ({units_per_request:,.1f} "
            "units): the gateway rejects every one",
        )
    return None


class SizeResult(BaseModel):
    """What a traffic profile needs and costs on one deployment."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    units_per_request: float
    units_per_s: float
    replicas: float
    bucket_rate_units_per_s: float
    bucket_depth_units: float
    shared_usd_per_month: float
    dedicated_replicas: int
    dedicated_total_usd_per_month: float
    request_kv_bytes: float
    request_pool_share: float
    steps: tuple[Step, ...]
    traffic: Traffic
    replica: PriceResult

    @property
    def traffic_warnings(self) -> tuple[PricingWarning, ...]:
        """The traffic's own warning, as data: one where its bucket cannot admit its own mean request."""
        shortfall = bucket_shortfall(self.bucket_depth_units, self.replica.output_weight, self.units_per_request)
        if shortfall is None:
            return ()
        rate = self.bucket_rate_units_per_s
        # At 0 units/s (no prompt or output tokens) no burst fills the bucket: the traffic is what to fix.
        fix = (
            f"raise {{burst_s}} to at least {shortfall.needed_units / rate:,.2f} s"
            if rate > 0
            else "the tenant sizes to 0 units/s: give its prompt and output tokens"
        )
        return (PricingWarning(field="burst_s", problem=f"tenant: {shortfall.message}", fix=fix),)

    @property
    def pricing_warnings(self) -> tuple[PricingWarning, ...]:
        """The replica's warnings and the traffic's, as data."""
        return (*self.replica.pricing_warnings, *self.traffic_warnings)

    @property
    def warnings(self) -> tuple[str, ...]:
        """The replica's warnings and the traffic's, keys named as flags."""
        return (*self.replica.warnings, *(warning.worded() for warning in self.traffic_warnings))


def size_traffic(replica: PriceResult, traffic: Traffic) -> SizeResult:
    """Size a traffic profile's contract: its load in units, its share of replicas, its bucket and cost."""
    deployment = replica.inputs.deployment
    ledger = Ledger()
    if traffic.rps == 0:
        # No requests size to 0 units/s: a bucket that admits nothing, and a contract worth $0 (as a plan refuses it).
        raise QuotacalcError(
            "is 0: the tenant sizes to 0 units/s, a token bucket that admits nothing",
            field="rps",
            fix="give the tenant's requests per second",
        )
    if traffic.prompt_tokens + traffic.output_tokens == 0:
        # Requests of no tokens size to 0 units/s too (a plan's traffic refuses it alike).
        raise QuotacalcError(
            "is 0, and so is output_tokens: the tenant sizes to 0 units/s, a token bucket that admits nothing",
            field="prompt_tokens",
            fix="give the tenant's mean prompt and output tokens per request",
        )
    # One of this tenant's requests at its full length (prompt + output), against the pool: a
    # request that cannot be resident at once is not served at any price.
    request_tokens = max(1, round(traffic.prompt_tokens + traffic.output_tokens))
    limit = context_limit(replica, request_tokens)
    if limit is not None:
        raise PricingError(
            f"one request of {request_tokens:,} tokens (prompt {fmt(traffic.prompt_tokens)} + output "
            f"{fmt(traffic.output_tokens)}) exceeds {limit[0]}",
            field="prompt_tokens",
            fix=f"prompt + output of {limit[1]}",
        )
    request = request_kv(replica, request_tokens)
    if request.pool_share > 1:
        raise PricingError(
            f"one request of {request.context_tokens:,} tokens needs {request.pool_share:.0%} of the replica's KV pool "
            f"({replica.kv_pool_tokens:,} tokens)",
            field="prompt_tokens",
            fix=_larger_pool_fix(replica.inputs, "shorten the tenant's requests", "use a GPU with more memory"),
        )
    # A prompt token costs more inside a long prompt (it attends to those before it): charged at
    # its cost inside this tenant's prompt, as `kv` reports it.
    prompt = request_kv(replica, max(1, round(traffic.prompt_tokens))) if traffic.prompt_tokens >= 1 else None
    token_units = prompt.prompt_token_units_at_context if prompt else 1.0
    ledger.record(
        "prompt_token_units",
        token_units,
        formula="(2 × active_params + attention_flops_per_prompt_token(prompt)) / (2 × active_params)",
        substituted=_prompt_token_terms(replica, traffic.prompt_tokens),
        unit="units",
        note=f"a prompt token's cost inside this tenant's {fmt(traffic.prompt_tokens)}-token prompt",
    )
    uncached = traffic.prompt_tokens * (1 - traffic.cached_fraction)
    cached = traffic.prompt_tokens * traffic.cached_fraction
    units_per_request = ledger.record(
        "units_per_request",
        uncached * token_units
        + cached * deployment.cached_prompt_weight
        + replica.output_weight * traffic.output_tokens,
        formula="prompt × (1 − cached_fraction) × prompt_token_units + prompt × cached_fraction × cached_prompt_weight "
        "+ W × output",
        substituted=f"{fmt(uncached)} × {fmt(token_units)} + {fmt(cached)} × {deployment.cached_prompt_weight} + "
        f"{fmt(replica.output_weight)} × {fmt(traffic.output_tokens)}",
        unit="units",
    )
    if units_per_request == 0:
        # Every prompt token cached at weight 0 and no output: the same bucket that admits nothing as rps 0.
        raise QuotacalcError(
            f"is {traffic.cached_fraction:g} at cached_prompt_weight {deployment.cached_prompt_weight:g} with no output "
            "tokens: every request sizes to 0 units, a token bucket that admits nothing",
            field="cached_fraction",
            fix="give the tenant's uncached prompt or output tokens, or a cached_prompt_weight above 0",
        )
    units_per_s = ledger.record(
        "units_per_s",
        traffic.rps * units_per_request,
        formula="rps × units_per_request",
        substituted=f"{fmt(traffic.rps)} × {fmt(units_per_request)}",
        unit="units/s",
    )
    replicas = ledger.record(
        "replicas",
        units_per_s / replica.replica_units_per_s,
        formula="units_per_s / replica_units_per_s",
        substituted=f"{fmt(units_per_s)} / {fmt(replica.replica_units_per_s)}",
        unit="replicas",
    )
    bucket_rate = ledger.record(
        "bucket_rate_units_per_s",
        units_per_s,
        formula="contracted units/s",
        substituted=f"{fmt(units_per_s)}",
        unit="units/s",
    )
    bucket_depth = ledger.record(
        "bucket_depth_units",
        deployment.burst_s * units_per_s,
        formula="burst_s × bucket_rate_units_per_s",
        substituted=f"{fmt(deployment.burst_s)} × {fmt(units_per_s)}",
        unit="units",
    )
    dedicated_replicas = whole_replicas(replicas)
    # A share of replicas is never more than the whole replicas it rounds up to (1.0000000000000007 replicas from
    # floating-point noise is one replica, and must not cost a hair more than that one dedicated).
    shared_replicas = min(replicas, dedicated_replicas)
    shared_usd = ledger.record(
        "shared_usd_per_month",
        shared_replicas * replica.dedicated_usd_per_month,
        formula="replicas × replica $/month (its share of shared replicas)",
        substituted=f"{fmt(shared_replicas)} × {fmt(replica.dedicated_usd_per_month)}",
        unit="USD",
    )
    dedicated_usd = ledger.record(
        "dedicated_total_usd_per_month",
        dedicated_replicas * replica.dedicated_usd_per_month,
        formula="ceil(replicas) × replica $/month (whole replicas, used or not)",
        substituted=f"{dedicated_replicas} × {fmt(replica.dedicated_usd_per_month)}",
        unit="USD",
    )
    # kv's own share of the pool at prompt + output: bytes, or blocks where the pool is vLLM's hybrid layout.
    kv_share = next(step for step in request.steps if step.name == "pool_share")
    share = ledger.record(
        "request_pool_share",
        request.pool_share,
        formula=f"{kv_share.formula}; the request at prompt + output tokens",
        substituted=kv_share.substituted,
        unit="",
        note="KV one of this tenant's requests holds at its full length",
    )
    return SizeResult(
        units_per_request=units_per_request,
        units_per_s=units_per_s,
        replicas=replicas,
        bucket_rate_units_per_s=bucket_rate,
        bucket_depth_units=bucket_depth,
        shared_usd_per_month=shared_usd,
        dedicated_replicas=dedicated_replicas,
        dedicated_total_usd_per_month=dedicated_usd,
        request_kv_bytes=request.request_kv_bytes,
        request_pool_share=share,
        steps=tuple(ledger.steps),
        traffic=traffic,
        replica=replica,
    )


def _prompt_token_terms(replica: PriceResult, prompt_tokens: float) -> str:
    """prompt_token_units with its numbers: the linear layers' FLOPs and a token's attention inside the prompt."""
    if prompt_tokens < 1:
        return "1"
    linear_flops = 2 * replica.active_params
    attention_flops = memory.attention_flops_per_prompt_token(
        replica.inputs.arch, max(1, round(prompt_tokens)), replica.inputs.deployment.tp
    )
    return f"({fmt(linear_flops)} + {fmt(attention_flops)}) / {fmt(linear_flops)}"
