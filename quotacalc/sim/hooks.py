"""What the engines and the gateway tell the simulation, and the pool they run in.

The replicas and the gateway receive these (a ``PoolRuntime`` and an object with the hooks), not the
simulation itself, so the simulator's modules import downward only: ``events`` -> ``gateway`` ->
``engine`` -> ``hooks``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from quotacalc.core.replica import ReplicaModel
from quotacalc.sim.request import Request


@dataclass
class PoolRuntime:
    """A pool as the simulator sees it: priced once, with its replicas."""

    index: int
    name: str
    model: ReplicaModel
    kv_pool_tokens: int
    output_weight: float
    prompt_per_prompt_token: float
    replica_units_per_s: float
    replica_count: int
    max_num_seqs: int
    max_num_batched_tokens: int
    route_above_prompt_tokens: int | None
    long_context_pool: int | None
    #: The pool's replicas (``quotacalc.sim.engine.Replica``).
    replicas: list[Any] = field(default_factory=list)


class EngineHooks(Protocol):
    """What a replica reports as it steps, and the two things it asks for (a step scheduled, the gateway's next)."""

    def schedule_step(self, replica: Any, time_s: float) -> None: ...

    def dispatch(self, pool: PoolRuntime, now: float) -> None: ...

    def on_scheduled(self, request: Request, now: float) -> None: ...

    def on_decode(
        self, tenant: int, pool: PoolRuntime, count: int, steps: int, dt: float, now: float, itl_bin: int
    ) -> None: ...

    def on_prefill_token(self, request: Request, now: float) -> None: ...

    def on_resident_kv(self, tenant: int, tokens: int, weight_s: float) -> None: ...

    def on_replica_kv(self, tokens: int, weight_s: float) -> None: ...

    def on_preempted(self, request: Request) -> None: ...

    def on_checkpoint(self, request: Request, now: float) -> None: ...

    def terminal(self, request: Request, reason: str, now: float) -> None: ...


class GatewayHooks(Protocol):
    """What the gateway reports: a request sent to an engine, one refused at the gateway."""

    def on_sent(self, request: Request, in_flight: int) -> None: ...

    def on_dispatched(self, request: Request, now: float) -> None: ...

    def on_capped(self, pool: int, tenant: int, capped: bool) -> None:
        """The tenant's own concurrency or KV cap now holds its queue back (or no longer does)."""
        ...

    def terminal(self, request: Request, reason: str, now: float) -> None: ...
