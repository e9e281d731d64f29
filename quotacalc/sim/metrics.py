"""What the simulation measures, per tenant, and the results it reports.

Latencies of single events (time to first token) are kept exactly; inter-token latency and
resident KV, which accrue once per token or per step, go into log-spaced histograms (1% wide
bins) so a run of millions of tokens costs a few dictionary updates per engine step.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, Field

#: Histogram bins are 1% wide: a percentile read from one is within 0.5% of the exact value.
_LOG_BASE = math.log(1.01)
_HIST_FLOOR = 1e-6

TERMINAL_REASONS = (
    "eos",
    "length",
    "quota_stop",
    "cancel",
    "disconnect",
    "timeout",
    "error",
    "engine_failure",
    "queue_full",
)
#: Why a request is refused before admission other than a 429: its context does not fit the tier or the pool,
#: its KV estimate is over the tier's per-replica cap, or a full bucket would not hold what the policy asks
#: (never admissible: no Retry-After, since waiting never helps).
OTHER_REJECT_REASONS = ("context", "kv_cap", "never_admissible")


def bin_index(value: float) -> int:
    """The histogram bin of ``value`` (compute once, add to many histograms)."""
    return int(math.log(value / _HIST_FLOOR) / _LOG_BASE) if value > _HIST_FLOOR else 0


class LogHistogram:
    """Weighted samples of a positive quantity in 1%-wide log bins."""

    __slots__ = ("bins", "total")

    def __init__(self) -> None:
        self.bins: dict[int, float] = {}
        self.total = 0.0

    def add(self, value: float, weight: float) -> None:
        self.add_at(bin_index(value), weight)

    def add_at(self, index: int, weight: float) -> None:
        self.bins[index] = self.bins.get(index, 0.0) + weight
        self.total += weight

    def merge(self, other: LogHistogram) -> None:
        for index, weight in other.bins.items():
            self.bins[index] = self.bins.get(index, 0.0) + weight
        self.total += other.total

    def percentile(self, p: float) -> float | None:
        """The value below which ``p`` percent of the weight lies (the bin's geometric centre)."""
        if self.total <= 0:
            return None
        target = p / 100 * self.total
        running = 0.0
        for index in sorted(self.bins):
            running += self.bins[index]
            if running >= target * (1 - 1e-12):
                return _HIST_FLOOR * math.exp((index + 0.5) * _LOG_BASE) if index else 0.0
        return _HIST_FLOOR * math.exp((max(self.bins) + 0.5) * _LOG_BASE)


def exact_percentile(values: list[float], p: float) -> float | None:
    """Nearest-rank percentile of ``values`` (None when empty)."""
    if not values:
        return None
    ordered = sorted(values)
    return ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)]


#: Why a request waited before an engine started it: its tenant's bucket (a 429 and a retry), its tenant's
#: concurrency or resident-KV cap, its turn at the gateway (the fair scheduler, or no engine with room), or the
#: engine's own queue.
WAIT_REASONS = ("bucket", "concurrency_cap", "kv_cap", "gateway_queue", "engine_queue")


@dataclass(slots=True)
class WindowCounters:
    """What one tenant did inside the measured window (after the warm-up, until arrivals stop)."""

    requests: int = 0
    #: Attempts at requests of the window: first sends and clients' retries.
    attempts: int = 0
    admitted: int = 0
    admission_rejects: int = 0
    never_admissible: int = 0
    #: Units its requests would cost if served in full (prompt + W × the tokens they would produce).
    offered_units: float = 0.0
    served_units: float = 0.0
    overshoot_units: float = 0.0
    released_units: float = 0.0
    unused_unit_s_start: float = 0.0
    unused_unit_s_end: float = 0.0
    ttft_s: list[float] = field(default_factory=list)
    itl: LogHistogram = field(default_factory=LogHistogram)
    #: Seconds waited, summed over requests arriving in the window, by reason (WAIT_REASONS).
    wait_s: dict[str, float] = field(default_factory=dict)


@dataclass(slots=True)
class TenantCounters:
    """Everything measured for one tenant in one simulated run."""

    requests: int = 0
    retries: int = 0
    gave_up: int = 0
    admitted: int = 0
    admission_rejects: int = 0
    other_rejects: dict[str, int] = field(default_factory=dict)
    retry_after_s: list[int] = field(default_factory=list)
    terminal: dict[str, int] = field(default_factory=dict)
    reserved_units: float = 0.0
    streamed_units: float = 0.0
    charged_units: float = 0.0
    debited_units: float = 0.0
    released_units: float = 0.0
    platform_absorbed_units: float = 0.0
    leaked_reservation_units: float = 0.0
    quota_overshoot_units: float = 0.0
    overshoot_by_window: dict[int, float] = field(default_factory=dict)
    unused_units: float = 0.0
    unused_since_s: float = 0.0
    unused_reservation_unit_s: float = 0.0
    preemptions: int = 0
    concurrent_peak: int = 0
    ttft_s: list[float] = field(default_factory=list)
    queue_wait_s_sum: float = 0.0
    queue_wait_count: int = 0
    itl: LogHistogram = field(default_factory=LogHistogram)
    resident_kv: LogHistogram = field(default_factory=LogHistogram)
    resident_kv_peak_tokens: int = 0
    prompt_tokens: int = 0
    output_tokens: int = 0
    goodput_units: float = 0.0
    #: Units served so far (prompts as engines start them, W per token as it streams): the --timeseries figure.
    served_units: float = 0.0
    completed: int = 0
    bucket_min_units: float = math.inf
    window: WindowCounters = field(default_factory=WindowCounters)

    def unused_change(self, now: float, delta: float) -> None:
        """Integrate the unused reservation up to ``now``, then change it by ``delta``."""
        self.unused_reservation_unit_s += self.unused_units * (now - self.unused_since_s)
        self.unused_since_s = now
        self.unused_units += delta


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True)


class Figures(_Result):
    """The compared figures, for a tenant or a whole run."""

    requests: int = Field(description="requests that arrived (a client's retries are not new requests)")
    retries: int = Field(description="attempts clients sent again after a 429 or an engine failure")
    gave_up: int = Field(description="requests whose client stopped retrying 429s (its retry limit or timeout)")
    admitted: int
    admission_rejects: int = Field(description="429s: the bucket lacked the units the policy asks for")
    other_rejects: dict[str, int] = Field(
        description="refused before admission, not by the bucket: context, kv_cap (every key, 0 when none)"
    )
    retry_after_max_s: int | None = Field(description="longest Retry-After sent, ceil(deficit / refill rate)")
    terminal: dict[str, int] = Field(
        description="how admitted requests ended: eos, length, quota_stop, cancel, ... (every key, 0 when none)"
    )
    quota_overshoot_units: float = Field(description="units used beyond what the bucket held (the contract)")
    quota_overshoot_units_max_window: float = Field(description="the largest overshoot in one window")
    reserved_units: float = Field(description="units held at admission and by lease renewals")
    streamed_units: float = Field(description="output units taken from the bucket as they streamed (streamed_debit)")
    charged_units: float = Field(description="units taken from the bucket at the end, beyond what was held or streamed")
    debited_units: float = Field(description="units billed: what the tenants received")
    released_units: float = Field(
        description="units given back at the end; reserved + streamed + charged = debited + released"
    )
    platform_absorbed_units: float = Field(
        description="prompt units of requests the platform failed before their first token, not billed"
    )
    unused_reservation_unit_s: float = Field(description="∫ (reserved − used) dt over admitted requests")
    leaked_reservation_units: float = Field(description="held after a terminal path; must be 0")
    preemptions: int
    concurrent_sequences_peak: int = Field(description="most requests in the engines at once (a tenant's: its cap)")
    resident_kv_peak_tokens: int = Field(
        description="most KV tokens resident on one replica at once, every tenant's (a tenant's: its own)"
    )
    resident_kv_p99_tokens: float | None = Field(
        description="p99 of a replica's resident KV over the replicas' busy time (a tenant's: of its own)"
    )
    ttft_p50_s: float | None
    ttft_p99_s: float | None
    itl_p50_s: float | None
    itl_p99_s: float | None
    queue_wait_mean_s: float | None = Field(description="arrival to first scheduled on an engine, mean")
    prompt_tokens: int = Field(description="prompt tokens of admitted requests that reached an engine")
    output_tokens: int = Field(description="output tokens streamed")
    completed: int = Field(description="requests that ended with eos or length")
    goodput_units_per_s: float = Field(description="units of completed requests per simulated second")
    bucket_min_units: float | None = Field(
        description="lowest bucket level seen (below 0 only under a policy that carries debt: the deepest debt)"
    )


class Headline(_Result):
    """A run's figures over the measured window (after the warm-up, until arrivals stop), normalised."""

    window_start_s: float | None = Field(description="end of the warm-up (None: the run never left it)")
    window_end_s: float | None = Field(description="when arrivals stopped (or the run did)")
    requests: int = Field(description="requests that arrived in the window")
    admission_reject_share: float | None = Field(
        description="429s / attempts in the window (an attempt: a request's first send or a client's retry)"
    )
    never_admissible: int = Field(description="requests a full bucket would not hold (no Retry-After), in the window")
    contract_units_per_s: float = Field(description="sum of the contracted rates of the tenants that sent requests")
    overshoot_units_per_s: float | None = Field(description="units served beyond the bucket and forgiven, per second")
    overshoot_pct_of_contract: float | None
    unused_reservation_units_per_s: float | None = Field(
        description="units reserved and given back unused at the end, per second"
    )
    unused_reservation_pct_of_contract: float | None
    unused_reservation_units_mean: float | None = Field(
        description="units held but not (yet) used, on average over the window (the quota a reservation idles)"
    )
    tenants_above_contract: tuple[str, ...] = Field(
        description="tenants that offered more units/s in the window than their contract"
    )
    ttft_p99_within_s: float | None = Field(description="TTFT p99 of tenants within their contract")
    ttft_p99_above_s: float | None = Field(description="TTFT p99 of tenants above their contract")
    itl_p99_within_s: float | None
    itl_p99_above_s: float | None
    jain_fairness_index: float | None = Field(
        description="Jain's index of served / entitled units while backlogged, in the window: 1 is fair by weight"
    )


class TenantFigures(Figures):
    tenant: str
    tier: str
    bucket_rate_units_per_s: float
    bucket_depth_units: float
    served_units_backlogged: float = Field(
        description="units served to the tenant while it had a request waiting for an engine"
    )
    served_share_backlogged: float | None = Field(
        description="its share of the units served to backlogged tenants (None when no tenant was backlogged)"
    )
    weight_share_backlogged: float | None = Field(
        description="the share its weight (contracted units/s) entitled it to among the tenants backlogged with it"
    )
    offered_units_per_s: float | None = Field(description="units/s its requests would cost in full, in the window")
    above_contract: bool | None = Field(description="offered more units/s than its contract in the window")
    wait_s_mean: dict[str, float] = Field(
        description="seconds an admitted request of the window waited, on average, by reason: bucket (429s and "
        "retries), concurrency_cap, kv_cap, gateway_queue, engine_queue (every key, 0 when none)"
    )


class PoolFigures(_Result):
    """What one pool's replicas did in a run."""

    pool: str
    requests_scheduled: int = Field(description="requests its engines scheduled (after routing)")
    prompt_tokens_computed: int = Field(description="prompt tokens prefilled, recomputation included")
    output_tokens: int
    busy_fraction: float = Field(description="share of replica time spent stepping")
    replica_failures: int


class PolicyRun(Figures):
    """One policy under one queueing mode."""

    policy: str
    queueing: str
    partial: bool = Field(description="stopped early (Ctrl-C or --max-seconds): figures cover what was simulated")
    stopped_by: str | None = Field(description="interrupted (Ctrl-C, exit 130) or max_seconds; None: ran to the end")
    simulated_s: float
    live_requests: int = Field(description="admitted requests not yet ended (0 unless partial)")
    engine_output_tokens: int = Field(description="tokens the engines produced; equals output_tokens")
    tenants: tuple[TenantFigures, ...]
    pools: tuple[PoolFigures, ...] = ()
    headline: Headline


class FairShare:
    """Units served to each tenant while it is backlogged, against what its weight entitled it to.

    A tenant is backlogged on a pool while it has an admitted request there that no engine has started and
    that its own concurrency or KV cap does not hold back (a tenant at its own cap cannot take more, so it is
    entitled to nothing more). Each unit served to a backlogged tenant is shared out among the tenants
    backlogged at that moment in proportion to their weights: that is their entitlement. A fair scheduler
    serves each what it is entitled to; two tenants backlogged throughout are entitled to their weights' shares.
    """

    __slots__ = ("backlog_weight", "capped", "eligible", "entitled", "gauge", "served", "start", "waiting", "weights")

    def __init__(self, pools: int, weights: list[float]) -> None:
        tenants = len(weights)
        self.weights = weights
        self.waiting = [[0] * tenants for _ in range(pools)]
        self.capped = [[False] * tenants for _ in range(pools)]
        self.eligible = [[False] * tenants for _ in range(pools)]
        #: Units served per unit of backlogged weight, per pool, ever rising.
        self.gauge = [0.0] * pools
        self.backlog_weight = [0.0] * pools
        self.start = [[0.0] * tenants for _ in range(pools)]
        self.entitled = [[0.0] * tenants for _ in range(pools)]
        self.served = [[0.0] * tenants for _ in range(pools)]

    def _update(self, pool: int, tenant: int) -> None:
        now_eligible = self.waiting[pool][tenant] > 0 and not self.capped[pool][tenant]
        eligible = self.eligible[pool]
        if now_eligible == eligible[tenant]:
            return
        eligible[tenant] = now_eligible
        weight = self.weights[tenant]
        if now_eligible:
            self.start[pool][tenant] = self.gauge[pool]
            self.backlog_weight[pool] += weight
        else:
            self.entitled[pool][tenant] += weight * (self.gauge[pool] - self.start[pool][tenant])
            # Exactly zero when none is left, not what rounding leaves of the sum.
            self.backlog_weight[pool] = self.backlog_weight[pool] - weight if any(eligible) else 0.0

    def arrive(self, pool: int, tenant: int) -> None:
        self.waiting[pool][tenant] += 1
        if self.waiting[pool][tenant] == 1:
            self._update(pool, tenant)

    def leave(self, pool: int, tenant: int) -> None:
        self.waiting[pool][tenant] -= 1
        if self.waiting[pool][tenant] == 0:
            self._update(pool, tenant)

    def cap(self, pool: int, tenant: int, capped: bool) -> None:
        """The tenant's own cap holds its queue back (or no longer does)."""
        if self.capped[pool][tenant] != capped:
            self.capped[pool][tenant] = capped
            self._update(pool, tenant)

    def serve(self, pool: int, tenant: int, units: float) -> None:
        if self.eligible[pool][tenant]:
            self.served[pool][tenant] += units
            self.gauge[pool] += units / self.backlog_weight[pool]

    def totals(self) -> tuple[list[float], list[float]]:
        """(served, entitled) per tenant over every pool, the backlogs still open counted to now."""
        tenants = len(self.weights)
        served = [sum(pool[t] for pool in self.served) for t in range(tenants)]
        entitled = [0.0] * tenants
        for pool, rows in enumerate(self.entitled):
            for t in range(tenants):
                entitled[t] += rows[t]
                if self.eligible[pool][t]:
                    entitled[t] += self.weights[t] * (self.gauge[pool] - self.start[pool][t])
        return served, entitled


#: A tenant entitled to less than this share of the backlogged work is left out of Jain's index: the ratio of a
#: handful of requests' units is noise, and the index weighs every tenant alike.
JAIN_MIN_ENTITLED_SHARE = 0.01


def jain_index(served: list[float], entitled: list[float]) -> float | None:
    """Jain's fairness index (Jain, Chiu and Hawe, 1984) of served / entitled over the tenants entitled to a share
    of at least JAIN_MIN_ENTITLED_SHARE: (Σx)² / (n Σx²), 1 when each got its entitlement, 1/n when one got all."""
    total = sum(entitled)
    ratios = [s / e for s, e in zip(served, entitled, strict=True) if e > 0 and e >= JAIN_MIN_ENTITLED_SHARE * total]
    if not ratios:
        return None
    squares = sum(x * x for x in ratios)
    return sum(ratios) ** 2 / (len(ratios) * squares) if squares > 0 else None


def headline_figures(
    windows: list[WindowCounters],
    *,
    rates: list[float],
    names: list[str],
    above: list[bool | None],
    window: tuple[float | None, float | None],
    jain: float | None,
) -> Headline:
    """The run's normalised figures over the measured window."""
    start, end = window
    span = end - start if start is not None and end is not None and end > start else None
    senders = [i for i, w in enumerate(windows) if w.requests]
    contract = sum(rates[i] for i in senders)
    requests = sum(w.requests for w in windows)
    attempts = sum(w.attempts for w in windows)

    def per_s(total: float) -> float | None:
        return total / span if span else None

    def pct(rate: float | None) -> float | None:
        return 100 * rate / contract if rate is not None and contract > 0 else None

    def pooled(flag: bool) -> tuple[float | None, float | None]:
        chosen = [windows[i] for i in senders if above[i] is flag]
        itl = LogHistogram()
        for w in chosen:
            itl.merge(w.itl)
        return exact_percentile([t for w in chosen for t in w.ttft_s], 99), itl.percentile(99)

    overshoot = per_s(sum(w.overshoot_units for w in windows))
    unused = per_s(sum(w.released_units for w in windows))
    held_idle = per_s(sum(w.unused_unit_s_end - w.unused_unit_s_start for w in windows))
    ttft_within, itl_within = pooled(False)
    ttft_above, itl_above = pooled(True)
    return Headline(
        window_start_s=start,
        window_end_s=end,
        requests=requests,
        admission_reject_share=sum(w.admission_rejects for w in windows) / attempts if attempts else None,
        never_admissible=sum(w.never_admissible for w in windows),
        contract_units_per_s=contract,
        overshoot_units_per_s=overshoot,
        overshoot_pct_of_contract=pct(overshoot),
        unused_reservation_units_per_s=unused,
        unused_reservation_pct_of_contract=pct(unused),
        unused_reservation_units_mean=held_idle,
        tenants_above_contract=tuple(names[i] for i in senders if above[i]),
        ttft_p99_within_s=ttft_within,
        ttft_p99_above_s=ttft_above,
        itl_p99_within_s=itl_within,
        itl_p99_above_s=itl_above,
        jain_fairness_index=jain,
    )


def figures(counters: list[TenantCounters], *, simulated_s: float) -> dict[str, object]:
    """Aggregate tenants' counters into the compared figures."""

    def total(name: str) -> float:
        return sum(getattr(c, name) for c in counters)

    def merged(name: str) -> LogHistogram:
        histogram = LogHistogram()
        for c in counters:
            histogram.merge(getattr(c, name))
        return histogram

    other: dict[str, int] = {}
    terminal: dict[str, int] = {}
    windows: dict[int, float] = {}
    for c in counters:
        for key, value in c.other_rejects.items():
            other[key] = other.get(key, 0) + value
        for key, value in c.terminal.items():
            terminal[key] = terminal.get(key, 0) + value
        for key, value in c.overshoot_by_window.items():
            windows[key] = windows.get(key, 0.0) + value
    ttft = [t for c in counters for t in c.ttft_s]
    retry = [r for c in counters for r in c.retry_after_s]
    itl, kv = merged("itl"), merged("resident_kv")
    waits = int(total("queue_wait_count"))
    bucket_min = min((c.bucket_min_units for c in counters), default=math.inf)
    return {
        "requests": int(total("requests")),
        "retries": int(total("retries")),
        "gave_up": int(total("gave_up")),
        "admitted": int(total("admitted")),
        "admission_rejects": int(total("admission_rejects")),
        # Every key every time, 0 when nothing took that path: a consumer reads a count, never tests for a key.
        "other_rejects": {reason: other.get(reason, 0) for reason in OTHER_REJECT_REASONS},
        "retry_after_max_s": max(retry) if retry else None,
        "terminal": {reason: terminal.get(reason, 0) for reason in TERMINAL_REASONS},
        "quota_overshoot_units": total("quota_overshoot_units"),
        "quota_overshoot_units_max_window": max(windows.values(), default=0.0),
        "reserved_units": total("reserved_units"),
        "streamed_units": total("streamed_units"),
        "charged_units": total("charged_units"),
        "debited_units": total("debited_units"),
        "released_units": total("released_units"),
        "platform_absorbed_units": total("platform_absorbed_units"),
        "unused_reservation_unit_s": total("unused_reservation_unit_s"),
        "leaked_reservation_units": total("leaked_reservation_units"),
        "preemptions": int(total("preemptions")),
        # One tenant's peaks and KV p99; for a whole run the caller passes the pool-wide figures instead (the
        # largest tenant's peak is not the replica's: tenants share it).
        "concurrent_sequences_peak": max((c.concurrent_peak for c in counters), default=0),
        "resident_kv_peak_tokens": max((c.resident_kv_peak_tokens for c in counters), default=0),
        "resident_kv_p99_tokens": kv.percentile(99),
        "ttft_p50_s": exact_percentile(ttft, 50),
        "ttft_p99_s": exact_percentile(ttft, 99),
        "itl_p50_s": itl.percentile(50),
        "itl_p99_s": itl.percentile(99),
        "queue_wait_mean_s": total("queue_wait_s_sum") / waits if waits else None,
        "prompt_tokens": int(total("prompt_tokens")),
        "output_tokens": int(total("output_tokens")),
        "completed": int(total("completed")),
        "goodput_units_per_s": total("goodput_units") / simulated_s if simulated_s > 0 else 0.0,
        "bucket_min_units": None if math.isinf(bucket_min) else bucket_min,
    }


#: Student's t at 0.975 by degrees of freedom (any statistics table, e.g. NIST/SEMATECH e-Handbook 1.3.6.7.2);
#: between rows the smaller df's (wider) value is used, past the last the normal 1.960.
_T_975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228,
          11: 2.201, 12: 2.179, 13: 2.160, 14: 2.145, 15: 2.131, 16: 2.120, 17: 2.110, 18: 2.101, 19: 2.093,
          20: 2.086, 25: 2.060, 30: 2.042, 40: 2.021, 60: 2.000, 120: 1.980}  # fmt: skip

#: The headline figures --seeds summarises.
HEADLINE_FIGURES = (
    "admission_reject_share",
    "never_admissible",
    "overshoot_units_per_s",
    "overshoot_pct_of_contract",
    "unused_reservation_units_per_s",
    "unused_reservation_pct_of_contract",
    "ttft_p99_within_s",
    "ttft_p99_above_s",
    "itl_p99_within_s",
    "itl_p99_above_s",
    "jain_fairness_index",
)


class Interval(_Result):
    """A figure over seeds: its mean and a 95% confidence interval for the mean (Student's t)."""

    n: int = Field(description="seeds that gave the figure (a percentile of an empty group gives none)")
    mean: float | None
    ci95_low: float | None
    ci95_high: float | None


def t_975(df: int) -> float:
    """Student's t quantile at 0.975 with ``df`` degrees of freedom (conservative between table rows)."""
    return _T_975[max(k for k in _T_975 if k <= df)] if df <= 120 else 1.960


def interval(values: list[float]) -> Interval:
    """Mean and 95% interval of ``values`` (one value: the mean, no interval). Every headline figure is at least
    0, so the interval is clipped there (a t interval of a few skewed values can reach below)."""
    n = len(values)
    if n == 0:
        return Interval(n=0, mean=None, ci95_low=None, ci95_high=None)
    mean = sum(values) / n
    if n == 1:
        return Interval(n=1, mean=mean, ci95_low=None, ci95_high=None)
    variance = sum((v - mean) ** 2 for v in values) / (n - 1)
    half = t_975(n - 1) * math.sqrt(variance / n)
    return Interval(n=n, mean=mean, ci95_low=max(0.0, mean - half), ci95_high=mean + half)


def seed_summary(headlines: list[Headline]) -> dict[str, Interval]:
    """Each headline figure over the seeds' runs of one policy and queueing mode."""
    summary = {}
    for name in HEADLINE_FIGURES:
        values = [getattr(h, name) for h in headlines]
        summary[name] = interval([float(v) for v in values if v is not None])
    return summary
