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

TERMINAL_REASONS = ("eos", "length", "quota_stop", "cancel", "disconnect", "error", "engine_failure", "queue_full")
#: Why a request is refused before admission other than a 429: its context does not fit the tier or the pool,
#: or its KV estimate is over the tier's per-replica cap.
OTHER_REJECT_REASONS = ("context", "kv_cap")


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


@dataclass(slots=True)
class TenantCounters:
    """Everything measured for one tenant in one simulated run."""

    requests: int = 0
    admitted: int = 0
    admission_rejects: int = 0
    other_rejects: dict[str, int] = field(default_factory=dict)
    retry_after_s: list[int] = field(default_factory=list)
    terminal: dict[str, int] = field(default_factory=dict)
    reserved_units: float = 0.0
    debited_units: float = 0.0
    released_units: float = 0.0
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
    completed: int = 0
    bucket_min_units: float = math.inf

    def unused_change(self, now: float, delta: float) -> None:
        """Integrate the unused reservation up to ``now``, then change it by ``delta``."""
        self.unused_reservation_unit_s += self.unused_units * (now - self.unused_since_s)
        self.unused_since_s = now
        self.unused_units += delta


class _Result(BaseModel):
    model_config = ConfigDict(frozen=True)


class Figures(_Result):
    """The compared figures, for a tenant or a whole run."""

    requests: int = Field(description="requests that arrived")
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
    reserved_units: float
    debited_units: float
    released_units: float
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
    bucket_min_units: float | None = Field(description="lowest bucket level seen (never negative)")


class TenantFigures(Figures):
    tenant: str
    tier: str
    bucket_rate_units_per_s: float
    bucket_depth_units: float


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
    partial: bool = Field(description="stopped early (Ctrl-C): figures cover what was simulated")
    simulated_s: float
    live_requests: int = Field(description="admitted requests not yet ended (0 unless partial)")
    engine_output_tokens: int = Field(description="tokens the engines produced; equals output_tokens")
    tenants: tuple[TenantFigures, ...]
    pools: tuple[PoolFigures, ...] = ()


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
        "admitted": int(total("admitted")),
        "admission_rejects": int(total("admission_rejects")),
        # Every key every time, 0 when nothing took that path: a consumer reads a count, never tests for a key.
        "other_rejects": {reason: other.get(reason, 0) for reason in OTHER_REJECT_REASONS},
        "retry_after_max_s": max(retry) if retry else None,
        "terminal": {reason: terminal.get(reason, 0) for reason in TERMINAL_REASONS},
        "quota_overshoot_units": total("quota_overshoot_units"),
        "quota_overshoot_units_max_window": max(windows.values(), default=0.0),
        "reserved_units": total("reserved_units"),
        "debited_units": total("debited_units"),
        "released_units": total("released_units"),
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
