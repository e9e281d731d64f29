"""The work-fair scheduler: the Virtual Token Counter (Sheng et al., "Fairness in Serving Large Language
Models", OSDI 2024).

Each tenant has a counter of the units it has been served, divided by its weight (its contracted
units/s). The next request to leave the gateway is the backlogged tenant's with the smallest counter.
Counters advance by work actually served: a request's prompt units when it is dispatched, and W per
output token as tokens stream, never by an admission estimate, so a tenant of long outputs is not
served more because its requests looked short. A tenant that becomes backlogged again is lifted to the
smallest counter of those backlogged (or to where the last one to leave stood), so idling banks no
credit. Over any interval in which tenants stay backlogged, each is served in proportion to its
weight, within one request's work.
"""

from __future__ import annotations


class VirtualTokenCounter:
    """Counters for one pool's tenants, indexed by tenant."""

    __slots__ = ("backlogged", "counters", "last_left", "weights")

    def __init__(self, weights: list[float]) -> None:
        self.weights = [w if w > 0 else 1e-12 for w in weights]
        self.counters = [0.0] * len(weights)
        self.backlogged = [False] * len(weights)
        self.last_left = 0.0

    def backlog(self, tenant: int) -> None:
        """The tenant now has a request waiting (it had none)."""
        if self.backlogged[tenant]:
            return
        others = [c for i, (c, b) in enumerate(zip(self.counters, self.backlogged, strict=True)) if b and i != tenant]
        floor = min(others) if others else self.last_left
        if self.counters[tenant] < floor:
            self.counters[tenant] = floor
        self.backlogged[tenant] = True

    def drained(self, tenant: int) -> None:
        """The tenant has no request waiting any more."""
        if self.backlogged[tenant]:
            self.backlogged[tenant] = False
            self.last_left = self.counters[tenant]

    def charge(self, tenant: int, units: float) -> None:
        """The tenant was served ``units``."""
        self.counters[tenant] += units / self.weights[tenant]

    def counter(self, tenant: int) -> float:
        return self.counters[tenant]
