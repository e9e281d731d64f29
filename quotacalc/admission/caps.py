"""Per-tenant caps at the gateway: sequences in flight, and resident KV on each replica (docs/method.md §3).

A request whose own KV estimate (prompt + the output it may produce) is above the tier's per-replica cap
could never be placed: it is refused at once. Otherwise it waits while the tenant is at its concurrency cap, or
while no replica of its pool has room for it beside the tenant's estimate already there (``place``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

#: Why an admitted request waits at the gateway rather than going to an engine.
WAIT_CONCURRENCY = "concurrency_cap"
WAIT_KV = "kv_cap"


class TenantCaps(NamedTuple):
    max_concurrent_sequences: int
    kv_cap_tokens_per_replica: int


def never_fits(caps: TenantCaps, kv_estimate: int) -> bool:
    """Whether the request alone is above the tenant's per-replica KV cap."""
    return kv_estimate > caps.kv_cap_tokens_per_replica


def at_concurrency_cap(caps: TenantCaps, in_flight: int) -> bool:
    return in_flight >= caps.max_concurrent_sequences


def fits_kv(caps: TenantCaps, resident_estimate: int, kv_estimate: int) -> bool:
    """Whether the request fits under the cap beside the tenant's estimate already on a replica."""
    return resident_estimate + kv_estimate <= caps.kv_cap_tokens_per_replica


def fitting_replicas(
    caps: TenantCaps, resident_by_replica: Sequence[int], load_by_replica: Sequence[int], kv_estimate: int
) -> list[int]:
    """The replicas where a request fits under the cap beside the tenant's estimate already there, least loaded (then
    lowest index) first: where simulate's gateway places it, and the order a shared store tries them in."""
    fitting = [r for r, resident in enumerate(resident_by_replica) if fits_kv(caps, resident, kv_estimate)]
    fitting.sort(key=lambda replica: (load_by_replica[replica], replica))
    return fitting


def place(
    caps: TenantCaps, resident_by_replica: Sequence[int], load_by_replica: Sequence[int], kv_estimate: int
) -> int | None:
    """The replica a request goes to (the first of ``fitting_replicas``); None while none has room."""
    fitting = fitting_replicas(caps, resident_by_replica, load_by_replica, kv_estimate)
    return fitting[0] if fitting else None


class InFlight:
    """Each tenant's sequences in flight against its concurrency cap (this process's count; a gateway of several
    proxies keeps the same count in its shared store)."""

    __slots__ = ("caps", "counts")

    def __init__(self, caps: list[TenantCaps]) -> None:
        self.caps = caps
        self.counts = [0] * len(caps)

    def at_cap(self, tenant: int) -> bool:
        return at_concurrency_cap(self.caps[tenant], self.counts[tenant])

    def acquire(self, tenant: int) -> int:
        """One more in flight; returns the tenant's count."""
        self.counts[tenant] += 1
        return self.counts[tenant]

    def release(self, tenant: int) -> None:
        self.counts[tenant] -= 1
