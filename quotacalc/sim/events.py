"""The event loop: arrivals, engine steps, cancellations, failures, in time order on one heap.

``build_setup`` prices each pool once (the core's price and replica model) and turns the plan's
tenants into buckets; ``Simulation`` then runs one admission policy under one queueing mode.
Everything random comes from ``random.Random`` instances seeded from the scenario's seed, and
nothing reads the clock, so a seed gives the same figures byte for byte.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from quotacalc.admission.bucket import Bucket
from quotacalc.admission.caps import TenantCaps, never_fits
from quotacalc.admission.ledger import NEVER_ADMISSIBLE, REJECTED, Ledger
from quotacalc.admission.policies import AdmissionPolicy, make_policy
from quotacalc.admission.state import MemoryBuckets
from quotacalc.core.memory import token_budget_below_sequences
from quotacalc.core.plan import Plan, Tier
from quotacalc.core.replica import ReplicaModel
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.scenario import ClosedLoop, LoadedScenario
from quotacalc.sim.engine import Replica
from quotacalc.sim.gateway import Gateway
from quotacalc.sim.hooks import PoolRuntime
from quotacalc.sim.metrics import (
    WAIT_REASONS,
    FairShare,
    LogHistogram,
    PolicyRun,
    PoolFigures,
    TenantCounters,
    TenantFigures,
    figures,
    headline_figures,
    jain_index,
)
from quotacalc.sim.request import DECODE, DONE, PREFILL, QUEUED, WAITING, Request
from quotacalc.sim.workload import Arrival, arrivals, tenant_stream

if TYPE_CHECKING:
    from quotacalc.priced import PricedPlan

_ARRIVAL, _STEP, _CANCEL, _FAIL, _RECOVER, _RETRY, _TIMEOUT, _THINK, _SAMPLE = range(9)

#: The columns of ``--trace``: one row per attempt at a request (a client's retry is another attempt), admitted
#: ones by how they ended, refused ones by why (429, gave_up: the client's last 429, never_admissible, context,
#: kv_cap), in the order they ended.
TRACE_COLUMNS = (
    "request",
    "tenant",
    "pool",
    "attempt",
    "arrival_s",
    "admitted_s",
    "first_token_s",
    "end_s",
    "prompt_tokens",
    "cached_tokens",
    "output_tokens",
    "reserved_units",
    "billed_units",
    "released_units",
    "outcome",
    "retry_after_s",
)
#: The columns of ``--timeseries``: each tenant sampled every ``timeseries_interval_s`` of simulated time.
TIMESERIES_COLUMNS = (
    "time_s",
    "tenant",
    "bucket_level_units",
    "gateway_queue",
    "engine_queue",
    "in_flight",
    "served_units",
    "live_kv_tokens",
)


@dataclass(frozen=True)
class TenantRuntime:
    """A tenant's limits, from the canonical policy (``core.policy.build_policy``)."""

    name: str
    tier: Tier
    pool: int
    bucket_rate: float
    bucket_depth: float
    #: Units per output token on each pool (its standard pool's W, its long-context pool's W).
    output_weight_by_pool: dict[int, float]
    cached_prompt_weight: float


@dataclass(frozen=True)
class PoolSpec:
    """What a pool's runtime is built from (shared by every run of a scenario)."""

    name: str
    model: ReplicaModel
    kv_pool_tokens: int
    output_weight: float
    #: Units an uncached prompt token adds per token of its prompt (the policy's prompt-length charge).
    prompt_per_prompt_token: float
    replica_units_per_s: float
    replicas: int
    max_num_seqs: int
    max_num_batched_tokens: int
    route_above_prompt_tokens: int | None
    long_context_pool: int | None


@dataclass(frozen=True)
class SimSetup:
    """A scenario priced: its pools and tenants, ready to simulate under any policy."""

    loaded: LoadedScenario
    pools: tuple[PoolSpec, ...]
    tenants: tuple[TenantRuntime, ...]
    #: Each pool's pricing warnings as ``price`` gives them ("pool 'long': ..."), their flags named as the plan keys
    #: that set them, and where the scenario's engine settings depart from what the price assumed: the figures rest
    #: on them, so the command repeats them.
    warnings: tuple[str, ...] = ()


def build_setup(loaded: LoadedScenario) -> SimSetup:
    """Price every pool with the core's cost model; take each tenant's bucket and weights from the policy."""
    from quotacalc.core.replica import replica_model

    priced = _priced(loaded)
    plan: Plan = priced.plan
    policy = priced.policy
    prices = priced.prices
    inputs_by_pool = {name: result.inputs for name, result in prices.items()}
    engine = loaded.scenario.engine
    names = [pool.name for pool in plan.pools]
    # simulate takes no deployment flags: price's hints (--batch, --tp) name the plan keys that set them.
    warnings = [
        f"pool '{pool.name}': {warning.worded(priced.key_namer(pool.name))}"
        for pool in plan.pools
        for warning in prices[pool.name].pricing_warnings
    ]
    generated_seqs = {pool.name: pool.engine.max_num_seqs for pool in policy.pools}
    charges = {pool.name: pool.prompt_length_charge.per_prompt_token for pool in policy.pools}
    # The token budget the price assumed and generate writes (its KV reserve grows with it).
    generated_tokens = {pool.name: pool.engine.max_num_batched_tokens for pool in policy.pools}
    specs = []
    for pool in plan.pools:
        result = prices[pool.name]
        # The engine runs the max-num-seqs generate writes for it (core/policy.py _engine): the batch the price
        # used, min(batch, what the KV pool holds at the context, the deployment's max_num_seqs). A larger one
        # would serve more than the price sells and than the deployed engine runs.
        generated = generated_seqs[pool.name]
        if engine.max_num_seqs is not None and engine.max_num_seqs > generated:
            warnings.append(
                f"pool '{pool.name}': engine.max_num_seqs {engine.max_num_seqs} is above the {generated} it is "
                "priced at and generate sets as max-num-seqs: the simulated engine runs more sequences than the price"
            )
        specs.append(
            PoolSpec(
                name=pool.name,
                model=replica_model(inputs_by_pool[pool.name], result.kv_pool_bytes_per_gpu),
                # Tokens at the pool's context: exact for full attention; with windowed or state layers a
                # longer request is charged more than it holds, a shorter one less.
                kv_pool_tokens=result.kv_pool_tokens_at_context,
                output_weight=result.output_weight,
                prompt_per_prompt_token=charges[pool.name],
                replica_units_per_s=result.replica_units_per_s,
                replicas=pool.replicas,
                max_num_seqs=engine.max_num_seqs or generated,
                max_num_batched_tokens=engine.max_num_batched_tokens or generated_tokens[pool.name],
                route_above_prompt_tokens=pool.route_above_prompt_tokens,
                long_context_pool=names.index(pool.long_context_pool) if pool.long_context_pool else None,
            )
        )
    _check_token_budgets(loaded, specs)
    tenants = []
    for tenant in policy.tenants:
        weights = {names.index(tenant.pool): tenant.weights.output}
        if tenant.long_context_pool is not None and tenant.long_context_weights is not None:
            weights[names.index(tenant.long_context_pool)] = tenant.long_context_weights.output
        tenants.append(
            TenantRuntime(
                name=tenant.name,
                tier=plan.tier(tenant.tier),
                pool=names.index(tenant.pool),
                bucket_rate=tenant.bucket_rate_units_per_s,
                bucket_depth=tenant.bucket_depth_units,
                output_weight_by_pool=weights,
                cached_prompt_weight=tenant.weights.cached_prompt,
            )
        )
    return SimSetup(loaded=loaded, pools=tuple(specs), tenants=tuple(tenants), warnings=tuple(warnings))


def _priced(loaded: LoadedScenario) -> PricedPlan:
    """The scenario's plan priced once, as the plan commands price it: a named plan file as read with the scenario;
    an embedded plan, whose errors already name the scenario's ``plan.`` keys, as its pools."""
    from quotacalc.inputs.plan import ReadPlan
    from quotacalc.priced import price_read_plan

    read = loaded.plan_read
    if read is None:
        embedded = loaded.scenario.plan if isinstance(loaded.scenario.plan, dict) else {}
        sections = {pool.name: None for pool in loaded.plan.pools}
        read = ReadPlan(loaded.source, embedded, loaded.plan, True, sections, at="plan.")
    return price_read_plan(read)


def _check_token_budgets(loaded: LoadedScenario, specs: list[PoolSpec]) -> None:
    """Refuse an engine that steps fewer tokens than it runs sequences, as vLLM does at start-up.

    vLLM's SchedulerConfig refuses max_num_batched_tokens < max_num_seqs ("must be greater than or equal to
    max_num_seqs"): a step could not give each running sequence its one decode token. The simulator would run it
    anyway, a few sequences a step, at latencies no deployment shows.
    """
    engine = loaded.scenario.engine
    short = [spec for spec in specs if token_budget_below_sequences(spec.max_num_batched_tokens, spec.max_num_seqs)]
    if not short:
        return
    spec = max(short, key=lambda s: s.max_num_seqs)
    seqs, tokens = spec.max_num_seqs, spec.max_num_batched_tokens
    refusal = "vLLM refuses to start with max_num_batched_tokens below max_num_seqs"
    if engine.max_num_batched_tokens is not None:
        needed = max(s.max_num_seqs for s in short)
        raise QuotacalcError(
            f"{tokens:,} is below the {seqs:,} sequences pool '{spec.name}' runs a step (max_num_seqs): {refusal}",
            source=loaded.source,
            field="engine.max_num_batched_tokens",
            fix=f"raise it to at least {needed:,}"
            + (", or lower engine.max_num_seqs" if engine.max_num_seqs is not None else ""),
        )
    if engine.max_num_seqs is not None:
        allowed = min(s.max_num_batched_tokens for s in short)
        raise QuotacalcError(
            f"{seqs:,} is above the {tokens:,} tokens pool '{spec.name}' steps (max_num_batched_tokens): {refusal}",
            source=loaded.source,
            field="engine.max_num_seqs",
            fix=f"lower it to at most {allowed:,}, or raise engine.max_num_batched_tokens",
        )
    # Neither is the scenario's: the plan's deployment sets a token budget below the batch it is priced at.
    index = [pool.name for pool in loaded.plan.pools].index(spec.name)
    raise QuotacalcError(
        f"pool '{spec.name}': its token budget a step (max_num_batched_tokens), {tokens:,}, is below the {seqs:,} "
        f"sequences it runs a step (max_num_seqs): {refusal}",
        source=loaded.source,
        field="plan" if isinstance(loaded.scenario.plan, str) else f"plan.pools[{index}].deployment",
        fix=f"raise the deployment's max_num_batched_tokens to at least {seqs:,}, or lower its max_num_seqs or batch; "
        "or set engine.max_num_batched_tokens in the scenario",
    )


class Simulation:
    """One admission policy under one queueing mode, over the scenario's whole workload.

    It drives the admission contract (``quotacalc.admission``) on simulated time: the ledger holds, renews,
    streams and settles units in the tenants' buckets, and the gateway's scheduler is charged the work each
    tenant is served. The replicas and the gateway call back through ``EngineHooks`` and ``GatewayHooks``.
    """

    def __init__(
        self,
        setup: SimSetup,
        policy_name: str,
        queueing: str,
        *,
        trace: bool = False,
        timeseries_interval_s: float | None = None,
        seed: int | None = None,
    ) -> None:
        scenario = setup.loaded.scenario
        #: The run's seed: the scenario's, or one of --seeds.
        self.seed = scenario.seed if seed is None else seed
        self.setup = setup
        self.scenario = scenario
        self.policy: AdmissionPolicy = make_policy(policy_name, scenario.options())
        self.queueing = queueing
        self.tenants = setup.tenants
        self.counters = [TenantCounters() for _ in setup.tenants]
        #: Each replica's total resident KV (all tenants), weighted by its busy time: the run's p99, not a tenant's.
        self.replica_kv = LogHistogram()
        self.buckets = [Bucket(t.bucket_rate, t.bucket_depth) for t in setup.tenants]
        self.ledger = Ledger(self.policy, MemoryBuckets(self.buckets))
        self.streams = self.policy.streams
        self.reserves = self.policy.reserves
        self.bill_failed_prefill = scenario.failed_prefill_billing == "tenant"
        self.holders: list[dict[int, Request]] = [{} for _ in setup.tenants]
        self.pools = [
            PoolRuntime(
                index=i,
                name=spec.name,
                model=spec.model,
                kv_pool_tokens=spec.kv_pool_tokens,
                output_weight=spec.output_weight,
                prompt_per_prompt_token=spec.prompt_per_prompt_token,
                replica_units_per_s=spec.replica_units_per_s,
                replica_count=spec.replicas,
                max_num_seqs=spec.max_num_seqs,
                max_num_batched_tokens=spec.max_num_batched_tokens,
                route_above_prompt_tokens=spec.route_above_prompt_tokens,
                long_context_pool=spec.long_context_pool,
            )
            for i, spec in enumerate(setup.pools)
        ]
        fair = queueing == "fair"
        engine = scenario.engine
        order = engine.order if fair else "priority"
        for pool in self.pools:
            pool.replicas = [
                Replica(self, pool, i, order=order, tenants=len(self.tenants)) for i in range(pool.replica_count)
            ]
        self.caps = [
            TenantCaps(t.tier.max_concurrent_sequences, t.tier.kv_cap_tokens_per_replica) for t in self.tenants
        ]
        weights = [t.bucket_rate for t in self.tenants]
        self.gateway = Gateway(
            self,
            self.pools,
            self.caps,
            weights,
            fair=fair,
            queue_depth=engine.queue_depth if fair else engine.deep_queue_depth,
        )
        self.fair_share = FairShare(len(self.pools), weights)
        #: The measured window: from the end of the warm-up until arrivals stop.
        self.measuring = False
        self.window_start_s: float | None = None
        self.window_end_s: float | None = None
        fraction = scenario.warmup_fraction
        self._warmup_until_s = fraction * scenario.duration_s if scenario.duration_s is not None else None
        self._warmup_requests = math.ceil(fraction * (scenario.requests or 0))
        self._arrived = 0
        self._gateway_waits_start: list[dict[str, float]] = []
        # Clients: retries after a 429 or an engine failure, timeouts, closed-loop users.
        by_tenant = {w.tenant: w for w in scenario.workload.tenants}
        workloads = [by_tenant.get(t.name) for t in self.tenants]
        self.max_retries = [w.max_retries if w else 0 for w in workloads]
        self.retry_jitter = [w.retry_jitter if w else 0.0 for w in workloads]
        self.retry_on_failure = [bool(w and w.retry_on_engine_failure) for w in workloads]
        self.timeout_s = [w.timeout_s if w else None for w in workloads]
        self.client_rng = random.Random(f"{self.seed}/clients")
        self.closed_loops = [
            (w, random.Random(f"{self.seed}/{w.tenant}/think"))
            if w is not None and isinstance(w.arrival, ClosedLoop)
            else None
            for w in workloads
        ]
        self._closed_streams: list[Iterator[Arrival] | None] = [None] * len(self.tenants)
        self._closed_active = 0
        self._open_alive = False
        self._pending_retries = 0
        #: Events the loop processed (arrivals, engine steps, cancellations, failures, ...): the benchmark's figure.
        self.events = 0
        #: Rows of --trace and --timeseries (TRACE_COLUMNS, TIMESERIES_COLUMNS), kept only when asked for.
        self.trace: list[tuple[object, ...]] | None = [] if trace else None
        self.timeseries: list[tuple[object, ...]] | None = [] if timeseries_interval_s else None
        self.timeseries_interval_s = timeseries_interval_s
        self.heap: list[tuple[float, int, int, object, int]] = []
        self.sequence = 0
        self.now = 0.0
        self.live = 0
        self.next_id = 0
        self.window_s = scenario.window_s
        self.tenant_index = {t.name: i for i, t in enumerate(self.tenants)}
        fractions = {w.tenant: w.cached_fraction for w in scenario.workload.tenants}
        self.cached_fraction = [fractions.get(t.name, 0.0) for t in self.tenants]
        self.request_overhead_s = [getattr(pool.model, "request_overhead_s", 0.0) for pool in self.pools]
        #: Units per output token of each tenant on each pool.
        self.output_weights = [
            [t.output_weight_by_pool.get(p.index, p.output_weight) for p in self.pools] for t in self.tenants
        ]

    # -- scheduling --------------------------------------------------------------------------

    def _push(self, time_s: float, kind: int, payload: object, version: int = 0) -> None:
        self.sequence += 1
        heapq.heappush(self.heap, (time_s, self.sequence, kind, payload, version))

    def schedule_step(self, replica: Replica, time_s: float) -> None:
        self._push(time_s, _STEP, replica, replica.version)

    def dispatch(self, pool: PoolRuntime, now: float) -> None:
        self.gateway.dispatch(pool, now)

    def run(
        self, progress: Callable[[float], None] | None = None, should_stop: Callable[[], bool] | None = None
    ) -> PolicyRun:
        """Simulate until every admitted request has ended; Ctrl-C returns what was simulated so far, and so does
        ``should_stop`` (asked every few thousand events; the caller's wall clock, never read here)."""
        scenario = self.scenario
        loaded = self.setup.loaded
        stream = arrivals(
            scenario.workload.tenants,
            self.tenant_index,
            seed=self.seed,
            replays=loaded.replays,
            duration_s=scenario.duration_s,
            requests=scenario.requests,
        )
        first = next(stream, None)
        if first is not None:
            self._push(first.time_s, _ARRIVAL, first)
        self._open_alive = first is not None
        self._start_closed_loops()
        failure_rng = random.Random(f"{self.seed}/failures")
        rate_per_s = scenario.engine.failure_rate_per_hour / 3600
        if rate_per_s > 0:
            for pool in self.pools:
                for replica in pool.replicas:
                    self._push(failure_rng.expovariate(rate_per_s), _FAIL, replica)
        if self.timeseries is not None:
            self._push(0.0, _SAMPLE, None)
        partial = False
        stopped_by: str | None = None
        processed = 0
        target_requests = scenario.requests
        target_s = scenario.duration_s
        heap = self.heap
        try:
            while heap:
                time_s, _, kind, payload, version = heapq.heappop(heap)
                self.now = time_s
                if kind == _STEP:
                    payload.on_step(time_s, version)  # type: ignore[attr-defined]
                elif kind == _ARRIVAL:
                    self._arrive(payload, time_s)  # type: ignore[arg-type]
                    following = next(stream, None)
                    if following is None:
                        self._open_alive = False
                        self._arrivals_may_have_stopped(time_s)
                    else:
                        self._push(following.time_s, _ARRIVAL, following)
                elif kind == _THINK:
                    self._arrive(payload, time_s)  # type: ignore[arg-type]
                elif kind == _RETRY:
                    self._pending_retries -= 1
                    self._attempt(*payload, now=time_s)  # type: ignore[misc]
                elif kind == _CANCEL:
                    self._cancel(payload, time_s)  # type: ignore[arg-type]
                elif kind == _TIMEOUT:
                    if payload.first_token_s is None:  # type: ignore[attr-defined]
                        self._cancel(payload, time_s, "timeout")  # type: ignore[arg-type]
                elif kind == _SAMPLE:
                    self._sample(time_s)
                    if self._arrivals_pending() or self.live:
                        self._push(time_s + self.timeseries_interval_s, _SAMPLE, None)  # type: ignore[operator]
                elif kind == _FAIL:
                    if not self._arrivals_pending() and self.live == 0:
                        continue
                    # The next failure is drawn when the replica is back up (failures are memoryless): a replica
                    # that is down does not fail again, and its downtime costs no events however long it is.
                    self._fail(payload, time_s)  # type: ignore[arg-type]
                else:
                    payload.recover()  # type: ignore[attr-defined]
                    self.gateway.dispatch(payload.pool, time_s)  # type: ignore[attr-defined]
                    self._push(time_s + failure_rng.expovariate(rate_per_s), _FAIL, payload)
                if self.live == 0 and not self._arrivals_pending():
                    break
                processed += 1
                if processed % 8192 == 0:
                    if progress is not None:
                        done = 0.0
                        if target_requests:
                            done = self._arrived / target_requests
                        if target_s:
                            done = max(done, time_s / target_s)
                        progress(min(done, 1.0))
                    if should_stop is not None and should_stop():
                        partial, stopped_by = True, "max_seconds"
                        break
        except KeyboardInterrupt:
            partial, stopped_by = True, "interrupted"
        self.events = processed
        return self._result(partial, stopped_by)

    def _sample(self, now: float) -> None:
        """One --timeseries row per tenant that has sent anything."""
        gateway = self.gateway
        for index, counters in enumerate(self.counters):
            if not counters.requests:
                continue
            kv = 0
            engine_queue = 0
            for pool in self.pools:
                for replica in pool.replicas:
                    kv += replica.tenant_kv_static[index] + replica.tenant_decoding[index] * replica.counter
                    engine_queue += replica.tenant_waiting[index]
            self.timeseries.append(  # type: ignore[union-attr]
                (
                    now,
                    self.tenants[index].name,
                    self.buckets[index].refill(now),
                    sum(len(queues[index]) for queues in gateway.queues),
                    engine_queue,
                    gateway.inflight[index],
                    counters.served_units,
                    kv,
                )
            )

    def _trace_refusal(self, arrival: Arrival, attempt: int, first_s: float, now: float, outcome: str, retry_after):
        if self.trace is not None:
            self.trace.append(
                (None, self.tenants[arrival.tenant].name, None, attempt, first_s, None, None, now,
                 arrival.prompt_tokens, None, 0, 0.0, 0.0, 0.0, outcome, retry_after)
            )  # fmt: skip

    # -- arrivals and admission --------------------------------------------------------------

    def _open_window(self, now: float) -> None:
        """The warm-up is over: start the window the headline figures cover."""
        self.measuring = True
        self.window_start_s = now
        for counters in self.counters:
            counters.unused_change(now, 0.0)
            counters.window.unused_unit_s_start = counters.unused_reservation_unit_s
        self._gateway_waits_start = self.gateway.wait_totals(now)

    def _close_window(self, now: float) -> None:
        """Arrivals stopped (or the run did): the window ends; the run goes on until every request ends."""
        if not self.measuring:
            return
        self.measuring = False
        self.window_end_s = now
        ends = self.gateway.wait_totals(now)
        for counters, start, end in zip(self.counters, self._gateway_waits_start, ends, strict=True):
            counters.unused_change(now, 0.0)
            window = counters.window
            window.unused_unit_s_end = counters.unused_reservation_unit_s
            for reason, seconds in end.items():
                window.wait_s[reason] = window.wait_s.get(reason, 0.0) + seconds - start.get(reason, 0.0)

    def _arrivals_pending(self) -> bool:
        """Whether a request may still arrive: the open stream, a closed-loop user, or a client's retry."""
        return self._open_alive or self._closed_active > 0 or self._pending_retries > 0

    def _arrivals_may_have_stopped(self, now: float) -> None:
        if not self._open_alive and self._closed_active == 0:
            self._close_window(now)

    def _start_closed_loops(self) -> None:
        """Each closed-loop user sends its first request after a think time."""
        for index, loop in enumerate(self.closed_loops):
            if loop is None:
                continue
            workload, _ = loop
            self._closed_streams[index] = tenant_stream(index, workload, seed=self.seed, replay=None)
            for user in range(workload.arrival.users):  # type: ignore[union-attr]
                self._closed_active += 1
                self._user_next(index, user, 0.0)

    def _user_next(self, tenant: int, user: int | None, now: float) -> None:
        """A closed-loop user's request ended (or was refused): it thinks, then sends the next, until the run stops."""
        if user is None:
            return
        workload, rng = self.closed_loops[tenant]  # type: ignore[misc]
        at = now + rng.expovariate(1 / workload.arrival.think_s_mean)  # type: ignore[union-attr]
        scenario = self.scenario
        if (scenario.duration_s is not None and at > scenario.duration_s) or (
            scenario.requests is not None and self._arrived >= scenario.requests
        ):
            self._closed_active -= 1
            self._arrivals_may_have_stopped(now)
            return
        following = next(self._closed_streams[tenant])  # type: ignore[arg-type]
        self._push(at, _THINK, following._replace(time_s=at, user=user))

    def _arrive(self, arrival: Arrival, now: float) -> None:
        """A client sends a request for the first time."""
        self._attempt(arrival, 0, now, 0.0, now=now)

    def _attempt(self, arrival: Arrival, attempt: int, first_s: float, bucket_wait_s: float, *, now: float) -> None:
        """One attempt at a request: the first, or a client's retry after a 429 or an engine failure."""
        index = arrival.tenant
        counters = self.counters[index]
        window = counters.window
        if attempt == 0:
            if self.window_start_s is None and (
                now >= self._warmup_until_s
                if self._warmup_until_s is not None
                else self._arrived >= self._warmup_requests
            ):
                self._open_window(now)
            self._arrived += 1
            counters.requests += 1
            if self.measuring:
                window.requests += 1
        else:
            counters.retries += 1
        measuring = self.measuring
        if measuring:
            window.attempts += 1
        tenant = self.tenants[index]
        tier = tenant.tier
        prompt = arrival.prompt_tokens
        pool = self.pools[tenant.pool]
        if pool.route_above_prompt_tokens is not None and prompt > pool.route_above_prompt_tokens:
            pool = self.pools[pool.long_context_pool]  # type: ignore[index]
        if prompt + 1 > tier.max_context_tokens or prompt + 1 > pool.kv_pool_tokens:
            counters.other_rejects["context"] = counters.other_rejects.get("context", 0) + 1
            self._trace_refusal(arrival, attempt, first_s, now, "context", None)
            self._user_next(index, arrival.user, now)
            return
        cached = round(prompt * self.cached_fraction[index])
        # Latencies run from the client's first send: a retry's wait is the client's too.
        request = Request(self.next_id, index, first_s, prompt, cached)
        request.arrival = arrival
        request.attempt = attempt
        request.bucket_wait_s = bucket_wait_s
        request.admitted_s = now
        self.next_id += 1
        request.pool = pool
        request.priority = tier.priority
        request.output_weight = self.output_weights[index][pool.index]
        # As the gateway charges it: each uncached prompt token at its cost inside its prompt, on the pool it runs on.
        uncached_units = (prompt - cached) * (1.0 + pool.prompt_per_prompt_token * prompt)
        request.prompt_units = uncached_units + cached * tenant.cached_prompt_weight
        request.client_max_tokens = arrival.client_max_tokens
        limit = min(
            arrival.client_max_tokens,
            tier.max_output_tokens,
            tier.max_context_tokens - prompt,
            pool.kv_pool_tokens - prompt,
        )
        request.limit_tokens = max(1, limit)
        ends = [(arrival.output_tokens, 0, "eos"), (request.limit_tokens, 1, "length")]
        if arrival.disconnect_at_token is not None:
            ends.append((arrival.disconnect_at_token, 2, "disconnect"))
        if arrival.error_at_token is not None:
            ends.append((max(1, arrival.error_at_token), 3, "error"))
        request.stop_at, _, request.stop_reason = min(ends)
        request.kv_estimate = prompt + request.limit_tokens
        if measuring:
            request.measured = True
            if attempt == 0:  # a retry offers the same work again, not more
                window.offered_units += request.prompt_units + request.output_weight * request.stop_at
        if self.gateway.fair and never_fits(self.caps[index], request.kv_estimate):
            counters.other_rejects["kv_cap"] = counters.other_rejects.get("kv_cap", 0) + 1
            self._trace_refusal(arrival, attempt, first_s, now, "kv_cap", None)
            self._user_next(index, arrival.user, now)
            return
        admission = self.ledger.admit(index, request, now)
        if admission.outcome == NEVER_ADMISSIBLE:
            # A full bucket would not hold it: no Retry-After, since waiting never helps.
            counters.other_rejects[NEVER_ADMISSIBLE] = counters.other_rejects.get(NEVER_ADMISSIBLE, 0) + 1
            if measuring:
                window.never_admissible += 1
            self._trace_refusal(arrival, attempt, first_s, now, NEVER_ADMISSIBLE, None)
            self._user_next(index, arrival.user, now)
            return
        if admission.outcome == REJECTED:
            counters.admission_rejects += 1
            if measuring:
                window.admission_rejects += 1
            retry_after = admission.retry_after_s
            counters.retry_after_s.append(retry_after)  # type: ignore[arg-type]
            if attempt < self.max_retries[index]:
                # The client honours Retry-After, with jitter so that refused clients do not return in step.
                delay = retry_after * (1 + self.retry_jitter[index] * self.client_rng.random())  # type: ignore[operator]
                timeout = self.timeout_s[index]
                if timeout is None or now + delay - first_s <= timeout:
                    self._trace_refusal(arrival, attempt, first_s, now, "429", retry_after)
                    self._pending_retries += 1
                    self._push(now + delay, _RETRY, (arrival, attempt + 1, first_s, bucket_wait_s + delay))
                    return
            if self.max_retries[index]:
                counters.gave_up += 1
            self._trace_refusal(
                arrival, attempt, first_s, now, "gave_up" if self.max_retries[index] else "429", retry_after
            )
            self._user_next(index, arrival.user, now)
            return
        hold = admission.hold_units
        bucket = self.buckets[index]
        if hold > 0:
            counters.reserved_units += hold
            self.holders[index][request.id] = request
            counters.unused_change(now, hold - request.prompt_units)
        counters.bucket_min_units = min(counters.bucket_min_units, bucket.level)
        counters.admitted += 1
        if measuring:
            window.admitted += 1
            if request.bucket_wait_s:
                window.wait_s["bucket"] = window.wait_s.get("bucket", 0.0) + request.bucket_wait_s
        self.live += 1
        if arrival.cancel_after_s is not None:
            self._push(now + arrival.cancel_after_s, _CANCEL, request)
        timeout = self.timeout_s[index]
        if timeout is not None:
            self._push(first_s + timeout, _TIMEOUT, request)
        self.fair_share.arrive(pool.index, index)
        self.gateway.submit(request, now)

    # -- callbacks from the gateway ----------------------------------------------------------

    def on_sent(self, request: Request, in_flight: int) -> None:
        counters = self.counters[request.tenant]
        if in_flight > counters.concurrent_peak:
            counters.concurrent_peak = in_flight

    def on_dispatched(self, request: Request, now: float) -> None:
        """A request left its tenant's queue at the gateway for an engine."""

    def on_capped(self, pool: int, tenant: int, capped: bool) -> None:
        self.fair_share.cap(pool, tenant, capped)

    # -- callbacks from the engines ---------------------------------------------------------

    def on_scheduled(self, request: Request, now: float) -> None:
        if request.first_scheduled_s is None:
            request.first_scheduled_s = now
            counters = self.counters[request.tenant]
            counters.queue_wait_s_sum += now - request.arrival_s
            counters.queue_wait_count += 1
            if request.measured:
                window = counters.window
                window.wait_s["engine_queue"] = window.wait_s.get("engine_queue", 0.0) + now - request.sent_s
            # Its prompt is the first work the tenant is served: counted while it still waited, then it leaves.
            self._served(request.pool.index, request.tenant, request.prompt_units)
            self.fair_share.leave(request.pool.index, request.tenant)
        if not request.prefill_started:
            request.prefill_started = True
            self.counters[request.tenant].prompt_tokens += request.prompt_tokens

    def on_decode(
        self, tenant: int, pool: PoolRuntime, count: int, steps: int, dt: float, now: float, itl_bin: int
    ) -> None:
        """``count`` of a tenant's sequences each streamed ``steps`` tokens, one every ``dt`` seconds."""
        # Called once per tenant per engine step: the simulator's innermost path, so the work is inlined.
        counters = self.counters[tenant]
        tokens = steps * count
        counters.itl.add_at(itl_bin, tokens)
        counters.output_tokens += tokens
        w = self.output_weights[tenant][pool.index]
        units = w * tokens
        counters.served_units += units
        gateway = self.gateway
        if gateway.fair:
            gateway.schedulers[pool.index].charge(tenant, units)
        if self.measuring:
            window = counters.window
            window.itl.add_at(itl_bin, tokens)
            window.served_units += units
            self.fair_share.serve(pool.index, tenant, units)
        if self.streams:
            self._stream(tenant, units, now)
        if self.reserves:
            counters.unused_change(now, -w * tokens)
            # Tokens arrive at the end of each step, not all at the end of the macro-step.
            counters.unused_reservation_unit_s -= w * count * dt * steps * (steps - 1) / 2

    def _served(self, pool: int, tenant: int, units: float) -> None:
        """Work served to a tenant inside the window: its fair share, and its served units."""
        counters = self.counters[tenant]
        counters.served_units += units
        if self.measuring:
            self.fair_share.serve(pool, tenant, units)
            counters.window.served_units += units

    def _stream(self, tenant: int, units: float, now: float) -> None:
        """Debit streamed output from the bucket as it arrives (policies that debit in real time)."""
        self.ledger.stream(tenant, units, now)
        counters = self.counters[tenant]
        counters.streamed_units += units
        level = self.buckets[tenant].level
        if level < counters.bucket_min_units:
            counters.bucket_min_units = level

    def on_prefill_token(self, request: Request, now: float) -> None:
        """The step that finished a request's prefill also sampled its next token."""
        counters = self.counters[request.tenant]
        if request.first_token_s is None:
            request.first_token_s = now
            # Plus what the engine spends on a request outside its steps (API server, tokenizer),
            # where the replica model has such a figure.
            ttft = now - request.arrival_s + self.request_overhead_s[request.pool.index]
            counters.ttft_s.append(ttft)
            if request.measured:
                counters.window.ttft_s.append(ttft)
        elif request.preempted_s is not None:
            counters.itl.add(now - request.preempted_s, 1)
            if self.measuring:
                counters.window.itl.add(now - request.preempted_s, 1)
        counters.output_tokens += 1
        w = request.output_weight
        self.gateway.charge(request.pool.index, request.tenant, w)
        self._served(request.pool.index, request.tenant, w)
        if self.streams:
            self._stream(request.tenant, w, now)
        if self.policy.reserves:
            counters.unused_change(now, -w)

    def on_resident_kv(self, tenant: int, tokens: int, weight_s: float) -> None:
        counters = self.counters[tenant]
        counters.resident_kv.add(tokens, weight_s)
        if tokens > counters.resident_kv_peak_tokens:
            counters.resident_kv_peak_tokens = tokens

    def on_replica_kv(self, tokens: int, weight_s: float) -> None:
        self.replica_kv.add(tokens, weight_s)

    def on_preempted(self, request: Request) -> None:
        self.counters[request.tenant].preemptions += 1

    def on_checkpoint(self, request: Request, now: float) -> None:
        """A decoding request reached its end or its lease boundary."""
        replica = request.replica
        generated = replica.counter - request.base
        if generated >= request.stop_at:
            self.terminal(request, request.stop_reason, now)
            return
        held = request.hold
        if self.ledger.renew(request.tenant, request, now) <= 0:
            self.terminal(request, "quota_stop", now)
            return
        units = request.hold - held
        counters = self.counters[request.tenant]
        counters.bucket_min_units = min(counters.bucket_min_units, self.buckets[request.tenant].level)
        counters.reserved_units += units
        counters.unused_change(now, units)
        replica.set_checkpoint(request)

    # -- terminal paths ----------------------------------------------------------------------

    def billed_units(self, request: Request, reason: str) -> float:
        """What the tenant received: its prompt once a token came back (or once the client itself ended a
        request in prefill), and W per token streamed. A request the platform fails before its first token
        costs the tenant nothing unless the scenario bills it (``failed_prefill_billing: tenant``)."""
        generated = request.generated
        if generated > 0:
            return request.prompt_units + request.output_weight * generated
        if not request.prefill_started:
            return 0.0
        if reason in _CLIENT_ENDS or self.bill_failed_prefill:
            return request.prompt_units
        return 0.0

    def terminal(self, request: Request, reason: str, now: float) -> None:
        """End a request: settle its units (bill what it received, release or charge the rest) on every path."""
        state = request.state
        if state == DONE:
            return
        index = request.tenant
        counters = self.counters[index]
        if state in (WAITING, PREFILL, DECODE):
            request.replica.release(request)
            self.gateway.release(index)
        if request.first_scheduled_s is None:
            self.fair_share.leave(request.pool.index, index)
        request.state = DONE
        self.live -= 1
        generated = request.generated
        billed = self.billed_units(request, reason)
        if request.prefill_started and billed == 0.0 and generated == 0:
            counters.platform_absorbed_units += request.prompt_units
        held = request.hold
        streamed = request.output_weight * generated if self.streams else 0.0
        settlement = self.ledger.settle(index, request, billed, streamed, now)
        counters.debited_units += settlement.billed
        if self.trace is not None:
            self.trace.append(
                (request.id, self.tenants[index].name, request.pool.name, request.attempt, request.arrival_s,
                 request.admitted_s, request.first_token_s, now, request.prompt_tokens, request.cached_tokens,
                 generated, held, billed, settlement.released, reason, None)
            )  # fmt: skip
        counters.released_units += settlement.released
        counters.charged_units += settlement.charged
        if request.measured:
            counters.window.released_units += settlement.released
        if settlement.forgiven > 0:
            over = settlement.forgiven
            counters.quota_overshoot_units += over
            window = int(now / self.window_s)
            counters.overshoot_by_window[window] = counters.overshoot_by_window.get(window, 0.0) + over
            if self.measuring:
                counters.window.overshoot_units += over
        if held > 0:
            if self.policy.reserves:
                counters.unused_change(now, -(held - request.prompt_units - request.output_weight * generated))
            del self.holders[index][request.id]
        counters.bucket_min_units = min(counters.bucket_min_units, self.buckets[index].level)
        counters.terminal[reason] = counters.terminal.get(reason, 0) + 1
        arrival = request.arrival
        if (
            reason == "engine_failure"
            and self.retry_on_failure[index]
            and request.attempt < self.max_retries[index]
            and arrival is not None
        ):
            # The client sends it again at once; the gateway places it on a replica that is up.
            self._pending_retries += 1
            self._push(now, _RETRY, (arrival, request.attempt + 1, request.arrival_s, request.bucket_wait_s))
        elif arrival is not None:
            self._user_next(index, arrival.user, now)
        if reason in ("eos", "length"):
            counters.completed += 1
            counters.goodput_units += billed
        if state in (QUEUED, WAITING) and self.gateway.fair:
            self.gateway.dispatch(request.pool, now)

    def _cancel(self, request: Request, now: float, reason: str = "cancel") -> None:
        if request.state in (QUEUED, WAITING):
            self.terminal(request, reason, now)
        elif request.state in (PREFILL, DECODE):
            request.abort = reason
            request.replica.aborts.append(request)
            request.replica.interrupt(now)

    def _fail(self, replica: Replica, now: float) -> None:
        if not replica.up:
            return
        for request in replica.fail(now):
            self.terminal(request, "engine_failure", now)
        self._push(now + self.scenario.engine.restart_s, _RECOVER, replica)

    # -- results -----------------------------------------------------------------------------

    def _result(self, partial: bool, stopped_by: str | None = None) -> PolicyRun:
        now = self.now
        self._close_window(now)
        for counters in self.counters:
            counters.unused_change(now, 0.0)
        for index, holders in enumerate(self.holders):
            # A request still holding units after it ended is a leak; so is any request left
            # holding when the run ran to completion (every request should have ended).
            leaked = sum(r.hold for r in holders.values() if r.state == DONE or not partial)
            self.counters[index].leaked_reservation_units = leaked
        served, entitled = self.fair_share.totals()
        served_sum, entitled_sum = sum(served), sum(entitled)
        start, end = self.window_start_s, self.window_end_s
        window_s = end - start if start is not None and end is not None and end > start else None
        offered = [c.window.offered_units / window_s if window_s else None for c in self.counters]
        above = [
            None if rate is None else rate > tenant.bucket_rate
            for rate, tenant in zip(offered, self.tenants, strict=True)
        ]
        tenants = tuple(
            TenantFigures(
                tenant=tenant.name,
                tier=tenant.tier.name,
                bucket_rate_units_per_s=tenant.bucket_rate,
                bucket_depth_units=tenant.bucket_depth,
                served_units_backlogged=served[index],
                served_share_backlogged=served[index] / served_sum if served_sum > 0 else None,
                weight_share_backlogged=entitled[index] / entitled_sum if entitled_sum > 0 else None,
                offered_units_per_s=offered[index],
                above_contract=above[index],
                wait_s_mean={
                    reason: counters.window.wait_s.get(reason, 0.0) / counters.window.admitted
                    if counters.window.admitted
                    else 0.0
                    for reason in WAIT_REASONS
                },
                **figures([counters], simulated_s=now),
            )
            for index, (tenant, counters) in enumerate(zip(self.tenants, self.counters, strict=True))
            if counters.requests
        )
        headline = headline_figures(
            [c.window for c in self.counters],
            rates=[t.bucket_rate for t in self.tenants],
            names=[t.name for t in self.tenants],
            above=above,
            window=(start, end),
            jain=jain_index(served, entitled),
        )
        engine_tokens = sum(r.output_tokens for pool in self.pools for r in pool.replicas)
        pools = tuple(
            PoolFigures(
                pool=pool.name,
                requests_scheduled=sum(r.scheduled for r in pool.replicas),
                prompt_tokens_computed=sum(r.prompt_tokens_computed for r in pool.replicas),
                output_tokens=sum(r.output_tokens for r in pool.replicas),
                busy_fraction=sum(r.busy_s for r in pool.replicas) / (len(pool.replicas) * now) if now > 0 else 0.0,
                replica_failures=sum(r.failures for r in pool.replicas),
            )
            for pool in self.pools
        )
        return PolicyRun(
            policy=self.policy.name,
            queueing=self.queueing,
            partial=partial,
            stopped_by=stopped_by,
            simulated_s=now,
            live_requests=self.live,
            engine_output_tokens=engine_tokens,
            tenants=tenants,
            pools=pools,
            headline=headline,
            **{
                **figures(self.counters, simulated_s=now),
                # Pool-wide figures, not the largest tenant's: sequences in flight, and KV on the fullest replica.
                "concurrent_sequences_peak": self.gateway.inflight_peak,
                "resident_kv_peak_tokens": max(
                    (r.kv_peak_tokens for pool in self.pools for r in pool.replicas), default=0
                ),
                "resident_kv_p99_tokens": self.replica_kv.percentile(99),
            },
        )


#: Ends the client chose: a prompt it had the engine start on is its cost, even with no token back yet.
_CLIENT_ENDS = frozenset(("cancel", "disconnect"))


def busy_fraction(simulation: Simulation) -> float:
    """Share of replica time spent stepping, over the whole pool set."""
    replicas = [r for pool in simulation.pools for r in pool.replicas]
    if simulation.now <= 0:
        return 0.0
    return sum(r.busy_s for r in replicas) / (len(replicas) * simulation.now)


__all__ = ["SimSetup", "Simulation", "build_setup", "busy_fraction"]
