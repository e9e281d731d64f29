"""The gateway: token buckets in units, per-tenant queues, a weighted fair scheduler, caps (docs/method.md §3).

Fair mode: admitted requests wait in per-tenant queues; a start-time fair queueing scheduler
(weights: the contracted units/s, so tenants share contention in proportion to what they bought)
hands the next request to an engine whose queue has room, within the tenant's concurrency and
resident-KV caps. The engines' queues stay shallow, and their own order (priority) only separates
tiers. Deep mode, for comparison: the gateway forwards every admitted request at once to the
least-loaded engine, whose deep queue runs by priority alone.
"""

from __future__ import annotations

import math
from collections import deque
from typing import TYPE_CHECKING

from quotacalc.sim.request import QUEUED, Request

if TYPE_CHECKING:
    from quotacalc.sim.engine import Replica
    from quotacalc.sim.events import PoolRuntime, Simulation


class Bucket:
    """A token bucket in units, refilled lazily at the contracted rate up to its depth."""

    __slots__ = ("depth", "level", "rate", "updated_s")

    def __init__(self, rate: float, depth: float) -> None:
        self.rate = rate
        self.depth = depth
        self.level = depth
        self.updated_s = 0.0

    def refill(self, now: float) -> float:
        if now > self.updated_s:
            self.level = min(self.depth, self.level + self.rate * (now - self.updated_s))
            self.updated_s = now
        return self.level

    def retry_after_s(self, needed: float) -> int:
        """Seconds until the bucket holds ``needed`` units: ceil(deficit / refill rate)."""
        return math.ceil((needed - self.level) / self.rate)


class Gateway:
    """Per-tenant queues in front of each pool's engines."""

    def __init__(self, sim: Simulation, *, fair: bool, queue_depth: int) -> None:
        self.sim = sim
        self.fair = fair
        self.queue_depth = queue_depth
        tenants = len(sim.tenants)
        self.queues = [[deque() for _ in range(tenants)] for _ in sim.pools]
        self.virtual_time = [0.0] * len(sim.pools)
        self.last_finish = [[0.0] * tenants for _ in sim.pools]
        self.inflight = [0] * tenants
        self.inflight_total = 0
        self.inflight_peak = 0

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
                self.sim.terminal(request, "queue_full", now)
                return
            self._send(request, best, now)
            return
        tenant = self.sim.tenants[request.tenant]
        start = max(self.virtual_time[pool.index], self.last_finish[pool.index][request.tenant])
        request.start_tag = start
        self.last_finish[pool.index][request.tenant] = start + request.cost_units / tenant.bucket_rate
        self.queues[pool.index][request.tenant].append(request)
        self.dispatch(pool, now)

    def _send(self, request: Request, replica: Replica, now: float) -> None:
        self.inflight[request.tenant] += 1
        counters = self.sim.counters[request.tenant]
        counters.concurrent_peak = max(counters.concurrent_peak, self.inflight[request.tenant])
        self.inflight_total += 1
        self.inflight_peak = max(self.inflight_peak, self.inflight_total)
        replica.enqueue(request, now)

    def dispatch(self, pool: PoolRuntime, now: float) -> None:
        """Hand queued requests to engines with room, the smallest start tag first."""
        if not self.fair:
            return
        queues = self.queues[pool.index]
        tenants = self.sim.tenants
        depth = self.queue_depth
        while True:
            open_replicas = [r for r in pool.replicas if r.up and r.n_waiting < depth]
            if not open_replicas:
                return
            best_key = None
            best = None
            for index, queue in enumerate(queues):
                while queue and queue[0].state != QUEUED:
                    queue.popleft()  # cancelled while queued
                if not queue:
                    continue
                request = queue[0]
                tenant = tenants[index]
                if self.inflight[index] >= tenant.tier.max_concurrent_sequences:
                    continue
                cap = tenant.tier.kv_cap_tokens_per_replica
                fits = [r for r in open_replicas if r.gateway_kv[index] + request.kv_estimate <= cap]
                if not fits:
                    continue
                key = (request.start_tag, request.priority, index)
                if best_key is None or key < best_key:
                    best_key, best = key, (request, fits)
            if best is None:
                return
            request, fits = best
            queues[request.tenant].popleft()
            self.virtual_time[pool.index] = request.start_tag
            replica = min(fits, key=lambda r: (r.load(), r.index))
            self._send(request, replica, now)
