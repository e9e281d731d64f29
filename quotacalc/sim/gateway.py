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

from quotacalc.admission.caps import WAIT_CONCURRENCY, WAIT_KV, TenantCaps, at_concurrency_cap, fits_kv
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
        self.inflight = [0] * tenants
        self.inflight_total = 0
        self.inflight_peak = 0
        #: Why each tenant's head of queue waits on each pool (None: nothing waiting), as of the last dispatch.
        self.blocked: list[list[str | None]] = [[None] * tenants for _ in pools]

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
        if not queue:
            self.schedulers[pool.index].backlog(request.tenant)
        queue.append(request)
        self.dispatch(pool, now)

    def charge(self, pool: int, tenant: int, units: float) -> None:
        """The tenant was served ``units`` on the pool (prompt at dispatch, output as it streams)."""
        if self.fair:
            self.schedulers[pool].charge(tenant, units)

    def _send(self, request: Request, replica: Replica, now: float) -> None:
        self.inflight[request.tenant] += 1
        self.inflight_total += 1
        self.inflight_peak = max(self.inflight_peak, self.inflight_total)
        self.hooks.on_sent(request, self.inflight[request.tenant])
        replica.enqueue(request, now)

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
        while True:
            open_replicas = [r for r in pool.replicas if r.up and r.n_waiting < depth]
            best_key = None
            best = None
            for index, queue in enumerate(queues):
                while queue and queue[0].state != QUEUED:
                    queue.popleft()  # cancelled while queued
                if not queue:
                    blocked[index] = None
                    scheduler.drained(index)
                    continue
                request = queue[0]
                tenant_caps = caps[index]
                if at_concurrency_cap(tenant_caps, self.inflight[index]):
                    blocked[index] = WAIT_CONCURRENCY
                    continue
                fits = [r for r in open_replicas if fits_kv(tenant_caps, r.gateway_kv[index], request.kv_estimate)]
                if not fits:
                    blocked[index] = WAIT_KV if open_replicas else WAIT_GATEWAY_QUEUE
                    continue
                blocked[index] = WAIT_GATEWAY_QUEUE
                key = (counters[index], request.priority, index)
                if best_key is None or key < best_key:
                    best_key, best = key, (request, fits)
            if best is None:
                return
            request, fits = best
            queue = queues[request.tenant]
            queue.popleft()
            if not queue:
                blocked[request.tenant] = None
                scheduler.drained(request.tenant)
            scheduler.charge(request.tenant, request.prompt_units)
            replica = min(fits, key=lambda r: (r.load(), r.index))
            self._send(request, replica, now)
            self.hooks.on_dispatched(request, now)
