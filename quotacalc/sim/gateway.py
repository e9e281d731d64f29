"""The gateway: per-tenant queues in front of each pool's engines, the work-fair scheduler, the caps (docs/method.md §3).

Fair mode: admitted requests wait in per-tenant queues; the Virtual Token Counter
(``quotacalc.admission.scheduler``, weights: the contracted units/s) hands the next request to an engine
whose queue has room, within the tenant's concurrency and resident-KV caps. Its counters advance by
the work each tenant is served as tokens stream (the simulation calls ``charge``), so tenants share
contention in proportion to what they bought whatever their output lengths. The engines' queues stay
shallow, and their own order (priority) only separates tiers. Deep mode, for comparison: the gateway
forwards every admitted request at once to the least-loaded engine, whose deep queue runs by priority alone.
"""

from __future__ import annotations

from collections import deque

from quotacalc.admission.caps import WAIT_CONCURRENCY, WAIT_KV, InFlight, TenantCaps, fits_kv
from quotacalc.admission.scheduler import VirtualTokenCounter
from quotacalc.sim.engine import Replica
from quotacalc.sim.hooks import GatewayHooks, PoolRuntime
from quotacalc.sim.request import QUEUED, Request

#: Why a request at the head of its tenant's queue is not sent: its turn has not come (or no engine has room).
WAIT_GATEWAY_QUEUE = "gateway_queue"


class Gateway:
    """Per-tenant queues in front of each pool's engines."""

    def __init__(
        self,
        hooks: GatewayHooks,
        pools: list[PoolRuntime],
        caps: list[TenantCaps],
        weights: list[float],
        *,
        fair: bool,
        queue_depth: int,
    ) -> None:
        self.hooks = hooks
        self.pools = pools
        self.caps = caps
        self.fair = fair
        self.queue_depth = queue_depth
        tenants = len(caps)
        self.queues: list[list[deque[Request]]] = [[deque() for _ in range(tenants)] for _ in pools]
        self.schedulers = [VirtualTokenCounter(list(weights)) for _ in pools]
        self.in_flight = InFlight(caps)
        #: Each tenant's count (the tracker's list, read by the simulation's figures).
        self.inflight = self.in_flight.counts
        self.inflight_total = 0
        self.inflight_peak = 0
        #: Why each tenant's head of queue waits on each pool (None: nothing waiting), as of the last dispatch.
        self.blocked: list[list[str | None]] = [[None] * tenants for _ in pools]
        #: Request-seconds each tenant's queued requests have waited at the gateway, by reason, ever.
        self.wait_s: list[dict[str, float]] = [{} for _ in range(tenants)]
        self._since = [[0.0] * tenants for _ in pools]

    def _account(self, pool: int, tenant: int, now: float) -> None:
        """Add the waiting since the last change to the reason the tenant's queue waited for."""
        queue = self.queues[pool][tenant]
        since = self._since[pool]
        if queue:
            reason = self.blocked[pool][tenant] or WAIT_GATEWAY_QUEUE
            waits = self.wait_s[tenant]
            waits[reason] = waits.get(reason, 0.0) + len(queue) * (now - since[tenant])
        since[tenant] = now

    def wait_totals(self, now: float) -> list[dict[str, float]]:
        """Every tenant's gateway waits by reason, up to ``now``."""
        for pool in range(len(self.pools)):
            for tenant in range(len(self.caps)):
                self._account(pool, tenant, now)
        return [dict(waits) for waits in self.wait_s]

    def submit(self, request: Request, now: float) -> None:
        """An admitted request enters the gateway."""
        pool = request.pool
        if not self.fair:
            best = None
            for replica in pool.replicas:
                if (
                    replica.up
                    and replica.n_waiting < self.queue_depth
                    and (best is None or replica.load() < best.load())
                ):
                    best = replica
            if best is None:
                self.hooks.terminal(request, "queue_full", now)
                return
            self._send(request, best, now)
            return
        queue = self.queues[pool.index][request.tenant]
        self._account(pool.index, request.tenant, now)
        if not queue:
            self.schedulers[pool.index].backlog(request.tenant)
        queue.append(request)
        self.dispatch(pool, now)

    def charge(self, pool: int, tenant: int, units: float) -> None:
        """The tenant was served ``units`` on the pool (prompt at dispatch, output as it streams)."""
        if self.fair:
            self.schedulers[pool].charge(tenant, units)

    def _send(self, request: Request, replica: Replica, now: float) -> None:
        request.sent_s = now
        count = self.in_flight.acquire(request.tenant)
        self.inflight_total += 1
        self.inflight_peak = max(self.inflight_peak, self.inflight_total)
        self.hooks.on_sent(request, count)
        replica.enqueue(request, now)

    def release(self, tenant: int) -> None:
        """A request left the engines (any terminal path)."""
        self.in_flight.release(tenant)
        self.inflight_total -= 1

    def dispatch(self, pool: PoolRuntime, now: float) -> None:
        """Hand queued requests to engines with room, the tenant with the smallest virtual counter first."""
        if not self.fair:
            return
        queues = self.queues[pool.index]
        scheduler = self.schedulers[pool.index]
        counters = scheduler.counters
        blocked = self.blocked[pool.index]
        caps = self.caps
        depth = self.queue_depth
        account = self._account
        since = self._since[pool.index]
        while True:
            open_replicas = [r for r in pool.replicas if r.up and r.n_waiting < depth]
            best_key = None
            best = None
            for index, queue in enumerate(queues):
                if queue and queue[0].state != QUEUED:
                    account(pool.index, index, now)
                    while queue and queue[0].state != QUEUED:
                        queue.popleft()  # cancelled while queued
                if not queue:
                    if blocked[index] is not None:
                        blocked[index] = None
                        self.hooks.on_capped(pool.index, index, False)
                    since[index] = now
                    scheduler.drained(index)
                    continue
                request = queue[0]
                tenant_caps = caps[index]
                if self.in_flight.at_cap(index):
                    reason = WAIT_CONCURRENCY
                else:
                    fits = [r for r in open_replicas if fits_kv(tenant_caps, r.gateway_kv[index], request.kv_estimate)]
                    reason = WAIT_GATEWAY_QUEUE if fits or not open_replicas else WAIT_KV
                if reason != blocked[index]:
                    account(pool.index, index, now)
                    blocked[index] = reason
                    self.hooks.on_capped(pool.index, index, reason != WAIT_GATEWAY_QUEUE)
                if reason != WAIT_GATEWAY_QUEUE or not fits:
                    continue
                key = (counters[index], request.priority, index)
                if best_key is None or key < best_key:
                    best_key, best = key, (request, fits)
            if best is None:
                return
            request, fits = best
            queue = queues[request.tenant]
            account(pool.index, request.tenant, now)
            queue.popleft()
            if not queue:
                blocked[request.tenant] = None
                self.hooks.on_capped(pool.index, request.tenant, False)
                scheduler.drained(request.tenant)
            scheduler.charge(request.tenant, request.prompt_units)
            replica = min(fits, key=lambda r: (r.load(), r.index))
            self._send(request, replica, now)
            self.hooks.on_dispatched(request, now)
