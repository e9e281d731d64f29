"""The enforcement point's decisions, pure and on an injected clock: who may go, what the engine is sent,
what each request is billed (docs/enforce.md).

It drives the admission contract simulate drives (``quotacalc.admission``): the policy's ledger over a
``BucketStore`` (in memory, or Redis for several gateways), the tenant's concurrency and resident-KV caps,
and the Virtual Token Counter in front of each pool's engines. A gateway driver (``quotacalc.enforce.litellm``)
calls ``arrive`` with a request body and its prompt length, sends what ``dispatch`` hands it, reports tokens
as they stream (``on_tokens``) and ends every request through ``settle``, exactly once, on every path.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol, runtime_checkable

from quotacalc.admission.caps import TenantCaps, at_concurrency_cap, fitting_replicas, never_fits
from quotacalc.admission.ledger import ADMITTED, NEVER_ADMISSIBLE, Ledger, Settlement
from quotacalc.admission.policies import AdmissionPolicy
from quotacalc.admission.policies.base import UNLIMITED
from quotacalc.admission.scheduler import VirtualTokenCounter
from quotacalc.admission.state import BucketStore
from quotacalc.core.policy import PoolPolicy, QuotaPolicy, TenantPolicy, UnitWeights

#: Body fields a client may not set: the gateway decides them (engine order, cache namespace, routing).
CLIENT_FORBIDDEN_FIELDS = (
    "priority",
    "cache_salt",
    "extra_body",
    "api_base",
    "base_url",
    "model_list",
    "deployment_id",
)

#: Refusal reasons, as the records and the metrics name them.
TOO_LONG = "too_long"
NEVER_FITS_KV = "never_fits_kv"
NEVER_FITS_BUCKET = "never_fits_bucket"
BUCKET = "bucket"
QUEUE_TIMEOUT = "queue_timeout"
UNKNOWN_TENANT = "unknown_tenant"
STORE_DOWN = "store_down"
CALL_ID_IN_USE = "call_id_in_use"

#: Terminal outcomes of an admitted request.
COMPLETED = "completed"
QUOTA_STOP = "quota_stop"
ENGINE_ERROR = "engine_error"
DISCONNECT = "disconnect"
TIMEOUT = "timeout"
SHUTDOWN = "shutdown"
LEASE_EXPIRED = "lease_expired"
#: Outcomes where the client (not the platform) ended a request the engine had started: the prompt is billed.
CLIENT_ENDS = (DISCONNECT, TIMEOUT)

QUEUED = "queued"
SENT = "sent"
#: Sent to the engine while the bucket store was down, under ``redis_failure: open``: nothing held nor billed, no
#: cap counted; its tokens are still counted and recorded at its end, so its load is in the records.
UNMETERED = "unmetered"
DONE = "done"


class CapsClaim(NamedTuple):
    """A request's claim of a place under its tenant's caps in a shared store: its pool, the replicas where it fits
    by this gateway's count (in the order to try them), its KV estimate and the tenant's caps."""

    pool: str
    replicas: list[int]
    kv_tokens: int
    caps: TenantCaps


@runtime_checkable
class SharedCaps(Protocol):
    """The caps several gateways share through their store (``state: redis``): each tenant's concurrency and
    resident-KV caps, counted over every gateway's requests, and each pool's in-flight count, which every gateway
    publishes. A place under a tenant's caps expires with the request's lease unless refreshed with it, so a gateway
    that dies holds none past a lease's life; the request's settlement (``settle_lease``) frees it."""

    #: Set by the gate around an admission that may go to the engine at once: the store claims the place in the
    #: script that takes the units (one round trip), and leaves the replica (or a negative number) in
    #: ``claimed_on_take``.
    claim_on_take: CapsClaim | None
    claimed_on_take: int | None

    def claim_caps(self, tenant: int, lease_key: str, claim: CapsClaim) -> int:
        """The first of the claim's replicas where the request fits under the tenant's caps, else a negative number."""
        ...

    def publish_inflight(self, pool: str, gateway: str, inflight: int) -> int:
        """Publish this gateway's count of sequences in flight on the pool; returns the other gateways' (live) sum."""
        ...


@dataclass(frozen=True)
class Refusal:
    """A request refused before the engine: its HTTP status, reason, one-line message and Retry-After."""

    status: int
    reason: str
    message: str
    retry_after_s: int | None = None
    #: The OpenAI error type and code the body carries.
    kind: str = "invalid_request_error"
    code: str | None = None


@dataclass(eq=False)
class Ticket:
    """One admitted request, from admission to settlement (it is the ledger's ``Lease``)."""

    request_id: str
    tenant: int
    tenant_name: str
    pool: str
    model: str
    prompt_tokens: int
    prompt_units: float
    output_weight: float
    weights: UnitWeights
    client_max_tokens: int
    limit_tokens: int
    kv_estimate: int
    start_s: float
    #: Its key in a shared store (its lease, its settlement): unique to this admission, where ``request_id`` is the
    #: gateway's call id, which a client may set (a settlement kept under a reused id would be taken for a retry).
    lease_key: str = ""
    #: The replica of the pool the gateway placed it on (its resident-KV cap is counted there), once sent.
    replica: int | None = None
    #: The replica its place under the tenant's caps in a shared store was claimed on at admission, where it could go
    #: to the engine at once (``SharedCaps.claim_on_take``); the fair queue then sends it there without a claim.
    claimed_replica: int | None = None
    hold: float = 0.0
    granted: int = 0
    reserved_units: float = 0.0
    state: str = QUEUED
    sent_s: float | None = None
    first_token_s: float | None = None
    end_s: float | None = None
    output_tokens: int = 0
    cached_tokens: int = 0
    #: Output units debited as they streamed (a policy that streams its debit).
    streamed_units: float = 0.0
    lease_expires_s: float = 0.0
    lease_recorded_s: float = 0.0
    #: Whether the response streams (its tokens are counted as they come); else usage arrives at the end only.
    streaming: bool = True
    outcome: str | None = None
    record: dict[str, Any] | None = None


@dataclass(frozen=True)
class GateSettings:
    """The gateway's own settings (each one documented in docs/enforce.md)."""

    #: Sequences in flight per replica of a pool before admitted requests wait in the fair queues
    #: (None: the engine's max_num_seqs, one decode batch, so the engine's own queue stays shallow).
    inflight_per_replica: int | None = None
    #: Longest wait in the fair queue before a 429.
    queue_wait_max_s: float = 30.0
    #: Seconds a lease lives without a token or a renewal; past it the request is settled as expired.
    lease_ttl_s: float = 120.0


@dataclass
class _PoolQueue:
    scheduler: VirtualTokenCounter
    queues: list[deque[Ticket]]
    inflight_bound: int
    #: Each tenant's resident KV estimate (prompt + granted output) on each replica of the pool.
    resident_kv: list[list[int]]
    #: Sequences in flight on each replica, from this gateway.
    replica_inflight: list[int]
    inflight: int = 0
    #: Sequences in flight on the pool from the other gateways, as they last published them in a shared store.
    others_inflight: int = 0
    #: Whether the last dispatch left requests queued because of other gateways' requests (their places under the
    #: caps, or their part of the in-flight bound): nothing here will free those, so the driver asks again shortly.
    held_by_store: bool = False


@dataclass
class TenantStats:
    """A tenant's counters, for the metrics."""

    admitted: int = 0
    rejects: dict[str, int] = field(default_factory=dict)
    units_reserved: float = 0.0
    units_debited: float = 0.0
    units_released: float = 0.0
    queue_wait_s_sum: float = 0.0
    queue_waits: int = 0
    live_sequences: int = 0
    live_kv_tokens: int = 0
    output_tokens: int = 0


class Gate:
    """Admission, rewriting, fair dispatch and settlement for one gateway, over one policy."""

    def __init__(
        self,
        policy: QuotaPolicy,
        salts: Mapping[str, str],
        admission: AdmissionPolicy,
        store: BucketStore,
        settings: GateSettings | None = None,
    ) -> None:
        self.policy = policy
        self.settings = settings or GateSettings()
        self.admission = admission
        self.ledger = Ledger(admission, store)
        self.store = store
        self.tenants: tuple[TenantPolicy, ...] = policy.tenants
        self.index = {tenant.name: i for i, tenant in enumerate(self.tenants)}
        self.pools: dict[str, PoolPolicy] = {pool.name: pool for pool in policy.pools}
        self.salts = {t.name: salts[t.salt_ref] for t in self.tenants if t.salt_ref is not None}
        self.caps = [TenantCaps(t.max_concurrent_sequences, t.kv_cap_tokens_per_replica) for t in self.tenants]
        weights = [t.bucket_rate_units_per_s for t in self.tenants]
        self.queues: dict[str, _PoolQueue] = {}
        for pool in policy.pools:
            per_replica = self.settings.inflight_per_replica or pool.engine.max_num_seqs
            self.queues[pool.name] = _PoolQueue(
                VirtualTokenCounter(list(weights)),
                [deque() for _ in self.tenants],
                max(1, per_replica * pool.replicas),
                [[0] * pool.replicas for _ in self.tenants],
                [0] * pool.replicas,
            )
        self.inflight = [0] * len(self.tenants)
        self.live: dict[str, Ticket] = {}
        #: Settled tickets whose settlement the shared store did not confirm (``confirm`` sends it again).
        self.unconfirmed: dict[str, Ticket] = {}
        self.stats = [TenantStats() for _ in self.tenants]
        # A shared store holds the units each request takes in its lease, with an expiry, so that a gateway that dies
        # holds nothing past it; ``holding_for`` names the request the store's next take is for.
        self._leases_in_store = hasattr(store, "holding_for")
        #: The store that counts the caps over every gateway (None: this gateway alone counts them).
        self.shared: SharedCaps | None = store if isinstance(store, SharedCaps) else None
        #: Called by ``settle`` before the store is asked: (ticket, outcome, now, billed, streamed, retry_after_s,
        #: status), the ticket's fields as its record will carry them. A driver's journal sets it.
        self.on_settling: Callable[..., None] = _not_journaled

    @contextmanager
    def _holding_for(self, request_id: str, claim: CapsClaim | None = None) -> Iterator[None]:
        if not self._leases_in_store:
            yield
            return
        self.store.holding_for = request_id  # type: ignore[attr-defined]
        if claim is not None and self.shared is not None:
            self.shared.claim_on_take = claim
            self.shared.claimed_on_take = None
        try:
            yield
        finally:
            self.store.holding_for = None  # type: ignore[attr-defined]
            if self.shared is not None:
                self.shared.claim_on_take = None

    def _lease(self, ticket: Ticket, now: float) -> None:
        """Extend the lease's life (in a shared store too, with the request's places under the caps, unless the store
        recorded it within a quarter of its life: a take, a claim or a refresh there sets its expiry, and a round trip
        saved is latency saved)."""
        ticket.lease_expires_s = now + self.settings.lease_ttl_s
        if not self._leases_in_store or now - ticket.lease_recorded_s <= self.settings.lease_ttl_s / 4:
            return
        if ticket.hold > 0 or (self.shared is not None and ticket.state == SENT):
            self.store.refresh_lease(ticket.tenant, ticket.lease_key)  # type: ignore[attr-defined]
            ticket.lease_recorded_s = now

    # -- who and what ----------------------------------------------------------------------------

    def tenant_index(self, name: str | None) -> int | None:
        return self.index.get(name) if name else None

    def refuse_unknown(self, name: str | None) -> Refusal:
        said = f"'{name}'" if name else "none"
        return Refusal(
            403 if name else 401,
            UNKNOWN_TENANT,
            f"quotacalc: the request's tenant ({said}) is not in the policy: ask the platform for a key of your tenant",
            kind="authentication_error" if not name else "permission_denied",
            code=UNKNOWN_TENANT,
        )

    def refuse_call_id_in_use(self, tenant: int, request_id: str, *, elsewhere: bool = False) -> Refusal | None:
        """A 409 where a request in flight already has this call id (in the gate, or ``elsewhere`` in its driver's
        state): the client sets it (LiteLLM's x-litellm-call-id), and the gateway's state keys each live request by
        it, so a second would be taken for the first (its tokens billed to it, its settlement ending it)."""
        if request_id not in self.live and not elsewhere:
            return None
        return self.refuse(
            tenant,
            Refusal(
                409,
                CALL_ID_IN_USE,
                "quotacalc: another request in flight has this call id (x-litellm-call-id): send a new id, or none",
                kind="invalid_request_error",
                code=CALL_ID_IN_USE,
            ),
        )

    def refuse(self, tenant: int, refusal: Refusal) -> Refusal:
        rejects = self.stats[tenant].rejects
        rejects[refusal.reason] = rejects.get(refusal.reason, 0) + 1
        return refusal

    # -- admission ---------------------------------------------------------------------------------

    def arrive(
        self,
        tenant: int,
        prompt_tokens: int,
        client_max_tokens: int | None,
        now: float,
        request_id: str,
        lease_key: str | None = None,
    ) -> Refusal | Ticket:
        """Decide on a request: too long (400), never fits (413, no Retry-After), the bucket (429 with
        Retry-After), else admitted with the policy's units held; routed to the long-context pool above the
        threshold. Admitted tickets then wait for ``dispatch``. ``lease_key``: the request's key in a shared store
        (its lease and its settlement), unique to this admission; ``request_id`` where none is given."""
        t = self.tenants[tenant]
        pool = self.pools[t.pool]
        weights = t.weights
        routed = t.long_context_pool is not None and t.route_above_prompt_tokens is not None
        if routed and prompt_tokens > t.route_above_prompt_tokens:  # type: ignore[operator]
            pool = self.pools[t.long_context_pool]  # type: ignore[index]
            weights = t.long_context_weights or weights
        context = min(t.max_context_tokens, pool.engine.max_model_len)
        if prompt_tokens + 1 > context:
            return self.refuse(
                tenant,
                Refusal(
                    400,
                    TOO_LONG,
                    f"quotacalc: the prompt's {prompt_tokens} tokens leave no room for output in tier {t.tier}'s "
                    f"context of {context} tokens: shorten the prompt",
                    code="context_length_exceeded",
                ),
            )
        limit = min(t.max_output_tokens, context - prompt_tokens)
        if client_max_tokens is not None:
            limit = min(limit, client_max_tokens)
        limit = max(1, limit)
        prompt_units = weights.request_units(prompt_tokens, 0, 0)
        ticket = Ticket(
            request_id=request_id,
            tenant=tenant,
            tenant_name=t.name,
            pool=pool.name,
            model=pool.engine.served_model_name,
            prompt_tokens=prompt_tokens,
            prompt_units=prompt_units,
            output_weight=weights.output,
            weights=weights,
            client_max_tokens=client_max_tokens if client_max_tokens is not None else limit,
            limit_tokens=limit,
            kv_estimate=prompt_tokens + limit,
            start_s=now,
            lease_key=lease_key or request_id,
        )
        if never_fits(self.caps[tenant], ticket.kv_estimate):
            return self.refuse(
                tenant,
                Refusal(
                    413,
                    NEVER_FITS_KV,
                    f"quotacalc: the prompt and its output ({ticket.kv_estimate} tokens) exceed tenant {t.name}'s "
                    f"resident-KV cap of {t.kv_cap_tokens_per_replica} tokens; waiting will not help: lower "
                    "max_tokens or shorten the prompt",
                    code="never_fits",
                ),
            )
        claim = self._claim_at_admission(ticket)
        with self._holding_for(ticket.lease_key, claim):
            admission = self.ledger.admit(tenant, ticket, now)
            claimed = None if claim is None or self.shared is None else self.shared.claimed_on_take
            if claimed is not None and claimed >= 0:
                ticket.claimed_replica = claimed
        if admission.outcome == NEVER_ADMISSIBLE:
            return self.refuse(
                tenant,
                Refusal(
                    413,
                    NEVER_FITS_BUCKET,
                    f"quotacalc: the request needs {admission.needed_units:.0f} units and tenant {t.name}'s bucket "
                    f"holds at most {t.bucket_depth_units:.0f}; waiting will not help: lower max_tokens or shorten "
                    "the prompt",
                    code="never_fits",
                ),
            )
        if admission.outcome != ADMITTED:
            return self.refuse(
                tenant,
                Refusal(
                    429,
                    BUCKET,
                    f"quotacalc: tenant {t.name}'s bucket lacks the {admission.needed_units:.0f} units this request "
                    f"needs; retry after {admission.retry_after_s} s",
                    retry_after_s=admission.retry_after_s,
                    kind="rate_limit_error",
                    code="rate_limit_exceeded",
                ),
            )
        ticket.reserved_units = ticket.hold
        ticket.lease_recorded_s = now  # the take recorded the lease with its expiry
        self._lease(ticket, now)
        stats = self.stats[tenant]
        stats.admitted += 1
        stats.units_reserved += ticket.hold
        self.live[request_id] = ticket
        queue = self.queues[pool.name]
        if not queue.queues[tenant]:
            queue.scheduler.backlog(tenant)
        queue.queues[tenant].append(ticket)
        return ticket

    def lease_all(self, ticket: Ticket, now: float) -> int:
        """Lease every output token the request may produce (a response not streamed cannot be stopped at a
        lease boundary): the tokens granted, which the engine's max_tokens is then capped at."""
        while ticket.granted < ticket.limit_tokens:
            before = ticket.hold
            with self._holding_for(ticket.lease_key):
                renewed = self.ledger.renew(ticket.tenant, ticket, now)
            if renewed <= 0:
                break
            self.stats[ticket.tenant].units_reserved += ticket.hold - before
            ticket.reserved_units += ticket.hold - before
        self._lease(ticket, now)
        return min(ticket.granted, ticket.limit_tokens)

    def admit_unmetered(
        self, tenant: int, prompt_tokens: int, now: float, request_id: str, client_max_tokens: int | None = None
    ) -> Ticket:
        """A request let through while the store is down (fail open): sent at once to the tenant's pool, holding
        nothing; ``on_tokens`` counts its tokens and ``settle`` records them with no units. Its body is rewritten as
        a metered one's (``rewrite``): the tier's priority, the tenant's salt, max_tokens at the tier's output cap."""
        t = self.tenants[tenant]
        pool = self.pools[t.pool]
        limit = min(t.max_output_tokens, max(1, min(t.max_context_tokens, pool.engine.max_model_len) - prompt_tokens))
        if client_max_tokens is not None:
            limit = max(1, min(limit, client_max_tokens))
        ticket = Ticket(
            request_id=request_id,
            tenant=tenant,
            tenant_name=t.name,
            pool=pool.name,
            model=pool.engine.served_model_name,
            prompt_tokens=prompt_tokens,
            prompt_units=0.0,
            output_weight=t.weights.output,
            weights=t.weights,
            client_max_tokens=UNLIMITED,
            limit_tokens=limit,
            kv_estimate=0,
            start_s=now,
            granted=UNLIMITED,
            state=UNMETERED,
            sent_s=now,
            lease_expires_s=now + self.settings.lease_ttl_s,
        )
        self.live[request_id] = ticket
        return ticket

    # -- the body the engine gets ------------------------------------------------------------------

    def rewrite(self, ticket: Ticket, body: Mapping[str, Any], *, max_tokens: int | None = None) -> dict[str, Any]:
        """The body without the fields clients may not set, with the tier's priority, the tenant's salt,
        max_tokens capped and the pool as the model."""
        t = self.tenants[ticket.tenant]
        out = {key: value for key, value in body.items() if key not in CLIENT_FORBIDDEN_FIELDS}
        out.pop("max_completion_tokens", None)
        out["model"] = ticket.pool
        pool = self.pools[ticket.pool]
        if pool.engine.scheduling_policy == "priority":
            # vLLM runs the lower value first; tier 0 is the most important.
            out["priority"] = t.priority
        salt = self.salts.get(t.name)
        if salt is not None:
            out["cache_salt"] = salt
        out["max_tokens"] = max_tokens if max_tokens is not None else ticket.limit_tokens
        if out.get("stream"):
            options = dict(out.get("stream_options") or {})
            options["include_usage"] = True
            out["stream_options"] = options
        return out

    # -- fair queueing -----------------------------------------------------------------------------

    def _candidates(self, queue: _PoolQueue) -> list[tuple[tuple[float, int, int], list[int]]]:
        """Each backlogged tenant this gateway may send now, by its place in the fair order (virtual counter, then
        tier priority, then index), with the replicas where its next request fits under its resident-KV cap."""
        candidates = []
        for tenant, waiting in enumerate(queue.queues):
            while waiting and waiting[0].state != QUEUED:
                waiting.popleft()
            if not waiting:
                queue.scheduler.drained(tenant)
                continue
            caps = self.caps[tenant]
            if at_concurrency_cap(caps, self.inflight[tenant]):
                continue
            replicas = fitting_replicas(caps, queue.resident_kv[tenant], queue.replica_inflight, waiting[0].kv_estimate)
            if replicas:
                candidates.append(((queue.scheduler.counter(tenant), self.tenants[tenant].priority, tenant), replicas))
        return candidates

    def _claim_at_admission(self, ticket: Ticket) -> CapsClaim | None:
        """The claim of a place under the tenant's caps to send with the admission's take, where the request may go to
        the engine at once (nothing waits in the pool's queues, the pool is under its bound, and it fits by this
        gateway's count): one round trip instead of two. None in memory, or where it will wait anyway."""
        if self.shared is None:
            return None
        queue = self.queues[ticket.pool]
        if any(queue.queues) or queue.inflight + queue.others_inflight >= queue.inflight_bound:
            return None
        caps = self.caps[ticket.tenant]
        if at_concurrency_cap(caps, self.inflight[ticket.tenant]):
            return None
        replicas = fitting_replicas(caps, queue.resident_kv[ticket.tenant], queue.replica_inflight, ticket.kv_estimate)
        return CapsClaim(ticket.pool, replicas, ticket.kv_estimate, caps) if replicas else None

    def _claim(
        self,
        shared: SharedCaps,
        queue: _PoolQueue,
        candidates: list[tuple[tuple[float, int, int], list[int]]],
        now: float,
    ) -> tuple[Ticket, int] | None:
        """The first tenant in the fair order with a place under its caps, counted over every gateway: (the request
        to send, the replica); None where each is at a cap by other gateways' requests.

        A tenant's request that claimed its place at admission goes first, wherever it waits in the tenant's queue:
        requests that arrive together all find the queue empty and claim at admission, and those that did hold the
        places the one at the head would need. Else the head claims now. A place claimed at admission by a request
        that then waited half a lease's life is claimed again (the claim drops the request's earlier place): it may
        have lapsed in the store meanwhile."""
        for (_, _, tenant), replicas in sorted(candidates):
            waiting = queue.queues[tenant]
            for ticket in waiting:
                if ticket.state == QUEUED and ticket.claimed_replica is not None:
                    if now - ticket.start_s < self.settings.lease_ttl_s / 2:
                        return ticket, ticket.claimed_replica
                    ticket.claimed_replica = None
            head = waiting[0]
            replica = shared.claim_caps(
                tenant, head.lease_key, CapsClaim(head.pool, replicas, head.kv_estimate, self.caps[tenant])
            )
            if replica >= 0:
                return head, replica
        return None

    def dispatch(self, pool_name: str, now: float, *, local_only: bool = False) -> list[Ticket]:
        """Tickets that may go to the pool's engines now, the backlogged tenant with the smallest virtual counter
        first, within the pool's in-flight bound and each tenant's concurrency cap, each placed on a replica where
        the tenant's resident KV leaves room for it under the per-replica cap (``Ticket.replica``). With a shared
        store the caps count every gateway's requests there, and the bound the other gateways' published counts
        (``local_only``: this gateway's requests alone, as when the store is down and its failure policy lets
        requests through)."""
        queue = self.queues[pool_name]
        shared = None if local_only else self.shared
        others = 0 if shared is None else queue.others_inflight
        queue.held_by_store = False
        sent: list[Ticket] = []
        while queue.inflight + others < queue.inflight_bound:
            candidates = self._candidates(queue)
            if not candidates:
                break
            if shared is None:
                (_, _, tenant), replicas = min(candidates)
                replica = replicas[0]
            else:
                claimed = self._claim(shared, queue, candidates, now)
                if claimed is None:
                    queue.held_by_store = True
                    break
                ticket, replica = claimed
                tenant = ticket.tenant
                if ticket.state != QUEUED:  # a driver that ran another dispatch while the claim waited
                    raise RuntimeError(f"Gate.dispatch on pool {pool_name} re-entered while it claimed in the store")
                queue.queues[tenant].remove(ticket)
                queue.queues[tenant].appendleft(ticket)
            ticket = queue.queues[tenant].popleft()
            if not queue.queues[tenant]:
                queue.scheduler.drained(tenant)
            queue.scheduler.charge(tenant, ticket.prompt_units)
            ticket.state = SENT
            ticket.sent_s = now
            ticket.replica = replica
            queue.inflight += 1
            queue.replica_inflight[replica] += 1
            queue.resident_kv[tenant][replica] += ticket.kv_estimate
            self.inflight[tenant] += 1
            stats = self.stats[tenant]
            stats.queue_wait_s_sum += now - ticket.start_s
            stats.queue_waits += 1
            stats.live_sequences += 1
            stats.live_kv_tokens += ticket.kv_estimate
            self._lease(ticket, now)
            sent.append(ticket)
        else:
            queue.held_by_store = others > 0
        return sent

    def others_inflight(self, pool_name: str, count: int) -> None:
        """The other gateways' sequences in flight on the pool, as the shared store has them published."""
        self.queues[pool_name].others_inflight = count

    def held_by_store(self, pool_name: str) -> bool:
        """Whether requests wait on the pool only because of other gateways' requests (the shared store's counts)."""
        queue = self.queues[pool_name]
        return queue.held_by_store and any(queue.queues)

    def overdue(self, now: float) -> list[Ticket]:
        """Queued tickets that waited past the bound (each to be refused with a 429 and settled)."""
        bound = self.settings.queue_wait_max_s
        return [t for t in self.live.values() if t.state == QUEUED and now - t.start_s > bound]

    def queue_refusal(self, ticket: Ticket) -> Refusal:
        retry = max(1, round(self.settings.queue_wait_max_s / 4))
        return self.refuse(
            ticket.tenant,
            Refusal(
                429,
                QUEUE_TIMEOUT,
                f"quotacalc: pool {ticket.pool} is busy and the request waited {self.settings.queue_wait_max_s:g} s "
                f"in tenant {ticket.tenant_name}'s queue; retry after {retry} s",
                retry_after_s=retry,
                kind="rate_limit_error",
                code="queue_timeout",
            ),
        )

    def refuse_waiting(self, ticket: Ticket, now: float) -> tuple[Refusal, dict[str, Any] | None]:
        """A queued request past ``queue_wait_max_s``: its 429 and its record, settled (its hold back) and carrying
        the status and Retry-After as a refusal before the queue does (``refusal_record``)."""
        refusal = self.queue_refusal(ticket)
        record = self.settle(ticket, refusal.reason, now, retry_after_s=refusal.retry_after_s, status=refusal.status)
        return refusal, record

    # -- streaming ---------------------------------------------------------------------------------

    def on_tokens(self, ticket: Ticket, tokens: int, now: float) -> int:
        """``tokens`` more output tokens streamed. Returns how many of them the lease covers: fewer than
        ``tokens`` when the bucket could not extend the lease (a quota stop at the boundary)."""
        if ticket.first_token_s is None and tokens > 0:
            ticket.first_token_s = now
        if ticket.state == UNMETERED:
            ticket.output_tokens += tokens
            ticket.lease_expires_s = now + self.settings.lease_ttl_s
            return tokens
        covered = 0
        renewed_units = 0.0
        for _ in range(tokens):
            if ticket.output_tokens >= ticket.granted and ticket.granted < UNLIMITED:
                before = ticket.hold
                with self._holding_for(ticket.lease_key):
                    extended = self.ledger.renew(ticket.tenant, ticket, now)
                if extended <= 0:
                    break
                renewed = ticket.hold - before
                ticket.reserved_units += renewed
                self.stats[ticket.tenant].units_reserved += renewed
                renewed_units += renewed
            ticket.output_tokens += 1
            covered += 1
        if covered:
            units = ticket.output_weight * covered
            if self.admission.streams:
                # Per chunk, so the store is told the request only where it counts streamed units by request.
                if self._leases_in_store:
                    with self._holding_for(ticket.lease_key):
                        self.ledger.stream(ticket.tenant, units, now)
                else:
                    self.ledger.stream(ticket.tenant, units, now)
                ticket.streamed_units += units
            self.queues[ticket.pool].scheduler.charge(ticket.tenant, units)
            if renewed_units > 0 or now - ticket.lease_recorded_s > self.settings.lease_ttl_s / 4:
                self._lease(ticket, now)
            else:
                ticket.lease_expires_s = now + self.settings.lease_ttl_s
        return covered

    # -- settlement --------------------------------------------------------------------------------

    def billed_units(self, ticket: Ticket, outcome: str) -> float:
        """What the tenant received: its prompt (cached tokens at their weight) once a token came back, or once
        the client itself ended a request the engine had, and W per output token."""
        if ticket.output_tokens > 0 or (outcome in CLIENT_ENDS and ticket.state == SENT):
            prompt = ticket.weights.request_units(ticket.prompt_tokens, ticket.cached_tokens, 0)
            return prompt + ticket.output_weight * ticket.output_tokens
        return 0.0

    def settle(
        self,
        ticket: Ticket,
        outcome: str,
        now: float,
        *,
        prompt_tokens: int | None = None,
        cached_tokens: int | None = None,
        output_tokens: int | None = None,
        retry_after_s: int | None = None,
        status: int | None = None,
    ) -> dict[str, Any] | None:
        """End a request (once; a second call returns None): bill what it received from the engine's usage
        where known, release the rest, free its caps, and return its usage record (with ``status`` where the
        request was refused, as ``refusal_record``'s)."""
        if ticket.state == DONE:
            return None
        was_sent = ticket.state == SENT
        unmetered = ticket.state == UNMETERED
        if prompt_tokens is not None and prompt_tokens > 0:
            ticket.prompt_tokens = prompt_tokens
        if cached_tokens is not None:
            ticket.cached_tokens = min(cached_tokens, ticket.prompt_tokens)
        if output_tokens is not None and output_tokens > ticket.output_tokens:
            # Usage counts tokens the stream did not show one by one (a response not streamed).
            ticket.output_tokens = min(output_tokens, max(ticket.granted, ticket.output_tokens))
        if outcome == LEASE_EXPIRED and not ticket.streaming and was_sent:
            # A response not streamed whose end never came: what it received is unknown, so it is billed all it
            # was granted (its hold), never nothing.
            ticket.output_tokens = max(ticket.output_tokens, min(ticket.granted, ticket.limit_tokens))
        billed = 0.0 if unmetered else self.billed_units(ticket, outcome)
        # Written ahead of the settlement (the driver's journal): a gateway killed before the record is written sends
        # the same settlement again at its next start, and writes the record then.
        self.on_settling(ticket, outcome, now, billed, ticket.streamed_units, retry_after_s, status)
        if unmetered:
            taken, settlement, store_failed = 0.0, Settlement(0.0, 0.0, 0.0, 0.0), False
        else:
            taken, settlement, store_failed = self._settle_units(ticket, billed, now)
        ticket.state = DONE
        ticket.outcome = outcome
        ticket.end_s = now
        self.live.pop(ticket.request_id, None)
        stats = self.stats[ticket.tenant]
        stats.units_debited += billed
        stats.units_released += settlement.released
        stats.output_tokens += ticket.output_tokens
        if was_sent:
            queue = self.queues[ticket.pool]
            queue.inflight -= 1
            self.inflight[ticket.tenant] -= 1
            if ticket.replica is not None:
                queue.replica_inflight[ticket.replica] -= 1
                queue.resident_kv[ticket.tenant][ticket.replica] -= ticket.kv_estimate
            stats.live_sequences -= 1
            stats.live_kv_tokens -= ticket.kv_estimate
        ticket.record = {
            **self.record_fields(ticket, now, unmetered=unmetered),
            "units_taken": taken,
            "units_debited": billed,
            "units_released": settlement.released,
            "units_charged": settlement.charged,
            "units_forgiven": settlement.forgiven,
            "outcome": outcome,
            "retry_after_s": retry_after_s,
        }
        if store_failed:
            ticket.record["store_failed"] = True
        if unmetered:
            ticket.record["unmetered"] = True
        if status is not None:
            ticket.record["status"] = status
        return ticket.record

    @staticmethod
    def record_fields(ticket: Ticket, now: float, *, unmetered: bool) -> dict[str, Any]:
        """A request's usage record up to its settlement's figures (``now``: its end)."""
        return {
            "request_id": ticket.request_id,
            "tenant": ticket.tenant_name,
            "pool": ticket.pool,
            "model": ticket.model,
            "start": ticket.start_s,
            "dispatched": ticket.sent_s,
            "first_token": ticket.first_token_s,
            "end": now,
            "prompt_tokens": ticket.prompt_tokens,
            "cached_tokens": ticket.cached_tokens,
            "output_tokens": ticket.output_tokens,
            "max_tokens": None if unmetered else ticket.limit_tokens,
            "units_reserved": ticket.reserved_units,
        }

    def _settle_units(self, ticket: Ticket, billed: float, now: float) -> tuple[float, Settlement, bool]:
        """The ledger's settlement of a metered request: (units taken, the settlement, whether the store failed)."""
        streamed = ticket.streamed_units
        try:
            if self._leases_in_store:
                return (*self._settle_in_store(ticket, billed, streamed), False)
            taken = ticket.hold + streamed
            return taken, self.ledger.settle(ticket.tenant, ticket, billed, streamed, now), False
        except Exception:  # the store is down or its reply was lost: ``confirm`` sends the same settlement again
            if self._leases_in_store:
                self.unconfirmed[ticket.request_id] = ticket
            return ticket.hold + streamed, Settlement(billed, 0.0, 0.0, 0.0), True

    def _settle_in_store(self, ticket: Ticket, billed: float, streamed: float) -> tuple[float, Settlement]:
        """The ledger's settlement as one atomic, idempotent step of a shared store, on what the store still holds
        for the request: less than the gate's count where the lease expired on the way (its units went back to the
        bucket then), so nothing is returned twice. Returns the units taken and the settlement."""
        done = self.store.settle_lease(  # type: ignore[attr-defined]
            ticket.tenant, ticket.lease_key, billed, streamed, carry_debt=self.admission.carries_debt
        )
        ticket.hold = 0.0
        # What the store counted as streamed: a streamed debit whose reply was lost is in it, not in the ticket's.
        ticket.streamed_units = done.streamed
        return done.held + done.streamed, Settlement(done.billed, done.released, done.charged, done.forgiven)

    def confirm(self, ticket: Ticket) -> dict[str, Any]:
        """Send again a settlement the store did not confirm (it failed, or its reply was lost after it landed): the
        store applies it once, keyed by the request's id, and the record takes the figures of the one that landed.
        Raises while the store still fails; the ticket stays in ``unconfirmed``."""
        record = ticket.record
        assert record is not None and ticket.request_id in self.unconfirmed
        taken, settlement = self._settle_in_store(ticket, record["units_debited"], ticket.streamed_units)
        del self.unconfirmed[ticket.request_id]
        self.stats[ticket.tenant].units_released += settlement.released
        self.stats[ticket.tenant].units_debited += settlement.billed - record["units_debited"]
        record.pop("store_failed", None)
        record.update(
            units_taken=taken,
            units_debited=settlement.billed,
            units_released=settlement.released,
            units_charged=settlement.charged,
            units_forgiven=settlement.forgiven,
        )
        return record

    def expired(self, now: float) -> list[Ticket]:
        """Tickets at the engines whose lease ran out (no token nor renewal within the lease's life); a queued one
        has its own bound (``overdue``)."""
        return [t for t in self.live.values() if t.state in (SENT, UNMETERED) and t.lease_expires_s < now]


def _not_journaled(*settling: Any) -> None:
    return None


def refusal_record(
    refusal: Refusal, tenant: str | None, request_id: str, now: float, prompt_tokens: int | None
) -> dict[str, Any]:
    """The usage record of a request refused before the engine (nothing held, nothing billed)."""
    return {
        "request_id": request_id,
        "tenant": tenant,
        "pool": None,
        "model": None,
        "start": now,
        "dispatched": None,
        "first_token": None,
        "end": now,
        "prompt_tokens": prompt_tokens,
        "cached_tokens": 0,
        "output_tokens": 0,
        "max_tokens": None,
        "units_reserved": 0.0,
        "units_taken": 0.0,
        "units_debited": 0.0,
        "units_released": 0.0,
        "units_charged": 0.0,
        "units_forgiven": 0.0,
        "outcome": refusal.reason,
        "status": refusal.status,
        "retry_after_s": refusal.retry_after_s,
    }
