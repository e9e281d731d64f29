"""Each tenant's requests as a seeded, lazy stream in time order.

One ``random.Random`` per tenant, seeded from the scenario's seed and the tenant's name, so a
tenant's requests do not change when another tenant is added, and every policy compared in one
run sees exactly the same requests (common random numbers: differences are the policies').
Every request draws the same number of random values whatever its fate, for the same reason.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Iterator
from typing import NamedTuple

from quotacalc.inputs.scenario import (
    ClosedLoop,
    Empirical,
    Exponential,
    Fixed,
    Lognormal,
    OnOff,
    Poisson,
    TenantWorkload,
    UsageRow,
)


class Arrival(NamedTuple):
    """One request as the client sends it, with its fate decided in advance."""

    time_s: float
    tenant: int
    prompt_tokens: int
    #: Tokens the model would produce before its stop condition (before max_tokens cuts it).
    output_tokens: int
    client_max_tokens: int
    #: Seconds after arrival at which the client cancels, or None.
    cancel_after_s: float | None
    #: Output token after which the client disconnects, or None.
    disconnect_at_token: int | None
    #: Output token after which the engine returns an error, or None.
    error_at_token: int | None
    #: The closed-loop user that sent it (None: an open arrival process).
    user: int | None = None


class Fate(NamedTuple):
    """What becomes of a request, decided when it is drawn: ``Arrival``'s fields of the same names."""

    client_max_tokens: int
    cancel_after_s: float | None
    disconnect_at_token: int | None
    error_at_token: int | None


def draw_length(distribution: Fixed | Lognormal | Exponential | Empirical, rng: random.Random) -> int:
    """One length from a distribution, at least one token."""
    if isinstance(distribution, Fixed):
        return distribution.tokens
    if isinstance(distribution, Lognormal):
        value = rng.lognormvariate(math.log(distribution.median), distribution.sigma)
        if distribution.max is not None:
            value = min(value, distribution.max)
        return max(1, round(value))
    if isinstance(distribution, Exponential):
        # Geometric on {1, 2, ...} with the given mean: the discrete memoryless length.
        if distribution.mean <= 1:
            return 1
        u = rng.random()
        return 1 + int(math.log1p(-u) / math.log1p(-1 / distribution.mean))
    return distribution.values[int(rng.random() * len(distribution.values))]


def tenant_stream(
    index: int, workload: TenantWorkload, *, seed: int, replay: tuple[UsageRow, ...] | None
) -> Iterator[Arrival]:
    """A tenant's arrivals, forever (or to the end of its replay file)."""
    rng = random.Random(f"{seed}/{workload.tenant}")
    arrival = workload.arrival

    def fate(output: int) -> Fate:
        max_tokens = (
            workload.max_tokens if isinstance(workload.max_tokens, int) else draw_length(workload.max_tokens, rng)
        )
        cancel_u, cancel_delay = rng.random(), rng.expovariate(1 / workload.cancel_after_s_mean)
        disconnect_u, disconnect_v = rng.random(), rng.random()
        error_u, error_v = rng.random(), rng.random()
        return Fate(
            max_tokens,
            cancel_delay if cancel_u < workload.cancel_probability else None,
            1 + int(disconnect_v * max(1, output - 1)) if disconnect_u < workload.disconnect_probability else None,
            int(error_v * output) if error_u < workload.error_probability else None,
        )

    if replay is not None:
        for row in replay:  # the usage file's reader refuses a row of fewer than 1 prompt or output token
            yield Arrival(row.time_s, index, row.prompt_tokens, row.output_tokens, *fate(row.output_tokens))
        return
    time_s = 0.0
    while True:
        if isinstance(arrival, ClosedLoop):
            pass  # a closed loop's requests are timed by the simulation: a user's previous end + its think time
        elif isinstance(arrival, Poisson):
            time_s += rng.expovariate(arrival.rate_rps)
        else:
            assert isinstance(arrival, OnOff)
            time_s += rng.expovariate(arrival.rate_rps)
            period = arrival.on_s + arrival.off_s
            phase = time_s % period
            if phase >= arrival.on_s:  # fell into the silence: the burst resumes at the next period
                time_s += period - phase
        assert workload.prompt_tokens is not None and workload.output_tokens is not None
        prompt = draw_length(workload.prompt_tokens, rng)
        output = draw_length(workload.output_tokens, rng)
        yield Arrival(time_s, index, prompt, output, *fate(output))


def arrivals(
    workloads: tuple[TenantWorkload, ...],
    tenant_index: dict[str, int],
    *,
    seed: int,
    replays: dict[str, tuple[UsageRow, ...]],
    duration_s: float | None,
    requests: int | None,
) -> Iterator[Arrival]:
    """Every tenant's arrivals merged in time order, until the duration or the request count."""
    streams = [
        tenant_stream(tenant_index[w.tenant], w, seed=seed, replay=replays.get(w.tenant))
        for w in workloads
        if not isinstance(w.arrival, ClosedLoop)
    ]
    merged = heapq.merge(*streams, key=lambda item: (item.time_s, item.tenant))
    for count, item in enumerate(merged):
        if requests is not None and count >= requests:
            return
        if duration_s is not None and item.time_s > duration_s:
            return
        yield item
