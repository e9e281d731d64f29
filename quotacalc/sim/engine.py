"""Replicas stepping through their work, with step times from the core's replica model.

A replica runs continuous batching as vLLM does: each step decodes one token of every running
sequence and spends the rest of its token budget (max_num_batched_tokens) on prompt chunks
(chunked prefill, at the prompt-token cost). While no prompt is being prefilled and no sequence
joins or leaves, consecutive decode steps are simulated as one *macro-step* of k steps at the
batch's mid-way context (exact when step time is linear in context), so the cost of a run grows
with the number of requests, not of tokens. A macro-step is cut short when something arrives
that could join the batch, a client cancels, or the replica fails.

KV is a pool of tokens: a sequence holds its prompt (allocated when it is scheduled) plus every
token it has generated. When the next step would not fit, the engine preempts the sequence that
its order ranks last (recompute: it goes back to the queue and prefills prompt + output again).
"""

from __future__ import annotations

import heapq
import math
from typing import TYPE_CHECKING

from quotacalc.sim.hooks import EngineHooks, PoolRuntime
from quotacalc.sim.metrics import bin_index
from quotacalc.sim.request import DECODE, DONE, PREFILL, WAITING, Request

if TYPE_CHECKING:
    from quotacalc.core.replica import ReplicaModel


class Replica:
    """One engine: its queue, its running batch, its KV pool."""

    def __init__(self, hooks: EngineHooks, pool: PoolRuntime, index: int, *, order: str, tenants: int) -> None:
        self.hooks = hooks
        self.pool = pool
        self.index = index
        self.model: ReplicaModel = pool.model
        self.pool_tokens = pool.kv_pool_tokens
        self.max_num_seqs = pool.max_num_seqs
        self.max_batched_tokens = pool.max_num_batched_tokens
        self.by_priority = order == "priority"
        self.waiting: list[tuple[tuple[int, ...], int, Request]] = []
        self.n_waiting = 0
        #: Each tenant's requests in ``waiting`` (sent here, not yet scheduled, or preempted and queued again).
        self.tenant_waiting = [0] * tenants
        self.prefilling: list[Request] = []
        self.decoding: dict[int, Request] = {}
        self.checkpoints: list[tuple[int, int, Request]] = []
        self.aborts: list[Request] = []
        #: Decode steps run so far: a decoding sequence has generated ``counter - base`` tokens.
        self.counter = 0
        self.kv_prefill = 0
        self.kv_decode_static = 0
        self.tenant_decoding = [0] * tenants
        self.tenant_kv_static = [0] * tenants
        #: The gateway's estimate of each tenant's KV here (prompt + output limit of its live requests).
        self.gateway_kv = [0] * tenants
        self.busy = False
        self.up = True
        self.version = 0
        self.step_start_s = 0.0
        self.step_dt_s = 0.0
        self.step_k = 0
        self.step_chunks: list[tuple[Request, int]] = []
        self.busy_s = 0.0
        #: Most KV tokens resident here at once (every tenant's): the run's peak is the largest replica's.
        self.kv_peak_tokens = 0
        self.failures = 0
        self.scheduled = 0
        self.output_tokens = 0
        self.prompt_tokens_computed = 0

    # -- queue ---------------------------------------------------------------------------------

    def key(self, request: Request) -> tuple[int, ...]:
        return (request.priority, request.id) if self.by_priority else (request.id,)

    def running(self) -> int:
        return len(self.prefilling) + len(self.decoding)

    def load(self) -> int:
        return self.n_waiting + len(self.prefilling) + len(self.decoding)

    def kv_used(self) -> int:
        return self.kv_prefill + self.kv_decode_static + len(self.decoding) * self.counter

    def enqueue(self, request: Request, now: float) -> None:
        """Accept a request into the engine's queue."""
        request.state = WAITING
        request.replica = self
        heapq.heappush(self.waiting, (self.key(request), request.id, request))
        self.n_waiting += 1
        self.tenant_waiting[request.tenant] += 1
        self.gateway_kv[request.tenant] += request.kv_estimate
        if not self.busy:
            self.plan(now)
        elif self.running() < self.max_num_seqs:
            self.interrupt(now)

    def _admit(self, now: float) -> None:
        waiting = self.waiting
        while waiting and self.running() < self.max_num_seqs:
            request = waiting[0][2]
            if request.state != WAITING or request.replica is not self:
                heapq.heappop(waiting)
                continue
            need = request.prompt_tokens + request.generated
            if self.kv_used() + need > self.pool_tokens:
                break  # head-of-line: the engine waits for room rather than skip ahead
            heapq.heappop(waiting)
            self.n_waiting -= 1
            self.tenant_waiting[request.tenant] -= 1
            request.state = PREFILL
            fresh = request.generated == 0 and request.preempted_s is None
            request.prefill_left = max(1, need - request.cached_tokens) if fresh else need
            request.kv_alloc = need
            self.kv_prefill += need
            self.tenant_kv_static[request.tenant] += need
            self.prefilling.append(request)
            if request.first_scheduled_s is None:
                self.scheduled += 1
            self.hooks.on_scheduled(request, now)

    # -- steps ---------------------------------------------------------------------------------

    def plan(self, now: float) -> None:
        """Start the next (macro-)step, or go idle."""
        if not self.up:
            self.busy = False
            return
        self._admit(now)
        n_decode = len(self.decoding)
        room_steps = 1 << 62
        if n_decode:
            free = self.pool_tokens - self.kv_used()
            while free < n_decode and self.running() > 1:
                self._preempt(now)
                n_decode = len(self.decoding)
                free = self.pool_tokens - self.kv_used()
            if n_decode:
                room_steps = max(1, free // n_decode)
        if not self.prefilling and not n_decode:
            self.busy = False
            return
        model = self.model
        chunks: list[tuple[Request, int]] = []
        if self.prefilling and self.max_batched_tokens > n_decode:
            budget = self.max_batched_tokens - n_decode
            prefill_flops = 0.0
            chunk_tokens = 0
            done_weighted = 0.0
            for request in self.prefilling:
                tokens = min(request.prefill_left, budget)
                done = request.kv_alloc - request.prefill_left
                prefill_flops += (
                    tokens * (model.prefill_flops_per_token + model.prefill_attention_flops(done + (tokens + 1) / 2))
                    + model.logits_flops_per_token
                )
                chunk_tokens += tokens
                done_weighted += done * tokens
                chunks.append((request, tokens))
                budget -= tokens
                if budget == 0:
                    break
            if n_decode:
                # The decode half of the step reads the weights and pays the step's overheads; the
                # chunk adds its compute (and its all-reduce traffic, where the model has one).
                context = (self.kv_decode_static + n_decode * self.counter) / n_decode
                dt = model.mixed_step_time_s(n_decode, context, prefill_flops / model.compute_flops_per_s, chunk_tokens)
            else:
                dt = model.prefill_time_s(chunk_tokens, done_weighted / chunk_tokens)
            k = 1
        else:
            checkpoints = self.checkpoints
            while checkpoints and not self._valid(checkpoints[0]):
                heapq.heappop(checkpoints)
            k = max(1, min(room_steps, checkpoints[0][0] - self.counter)) if checkpoints else 1
            context = (self.kv_decode_static + n_decode * self.counter) / n_decode + (k - 1) / 2
            dt = model.step_time_s(n_decode, context)
        self.busy = True
        self.step_start_s = now
        self.step_dt_s = dt
        self.step_k = k
        self.step_chunks = chunks
        self.version += 1
        self.hooks.schedule_step(self, now + k * dt)

    def _valid(self, entry: tuple[int, int, Request]) -> bool:
        request = entry[2]
        return request.state == DECODE and request.replica is self and request.checkpoint == entry[0]

    def interrupt(self, now: float) -> None:
        """Cut a macro-step short after the step in flight, so the batch can change."""
        if self.busy and self.step_k > 1:
            done = max(1, math.ceil((now - self.step_start_s) / self.step_dt_s - 1e-9))
            if done < self.step_k:
                self.step_k = done
                self.version += 1
                self.hooks.schedule_step(self, self.step_start_s + done * self.step_dt_s)

    def on_step(self, now: float, version: int) -> None:
        if version != self.version or not self.busy:
            return
        self._complete(now)
        self.busy = False
        self.hooks.dispatch(self.pool, now)
        if not self.busy:
            self.plan(now)

    def _complete(self, now: float) -> None:
        """Apply the finished (macro-)step: tokens, prefill progress, checkpoints, aborts."""
        k, dt = self.step_k, self.step_dt_s
        hooks = self.hooks
        self.busy_s += k * dt
        n_decode = len(self.decoding)
        if n_decode:
            self.counter += k
            self.output_tokens += k * n_decode
            itl_bin = bin_index(dt)
            for tenant, count in enumerate(self.tenant_decoding):
                if count:
                    hooks.on_decode(tenant, self.pool, count, k, dt, now, itl_bin)
        for request, tokens in self.step_chunks:
            if request.state != PREFILL or request.replica is not self:
                continue
            request.prefill_left -= tokens
            self.prompt_tokens_computed += tokens
            if request.prefill_left == 0:
                self.prefilling.remove(request)
                self.kv_prefill -= request.kv_alloc
                self.tenant_kv_static[request.tenant] -= request.kv_alloc
                request.generated += 1
                self.output_tokens += 1
                hooks.on_prefill_token(request, now)
                request.state = DECODE
                request.base = self.counter - request.generated
                static = request.prompt_tokens - request.base
                self.kv_decode_static += static
                self.tenant_kv_static[request.tenant] += static
                self.tenant_decoding[request.tenant] += 1
                self.decoding[request.id] = request
                self.set_checkpoint(request)
        self.step_chunks = []
        counter = self.counter
        weight_s = k * dt
        for tenant, static in enumerate(self.tenant_kv_static):
            resident = static + self.tenant_decoding[tenant] * counter
            if resident > 0:
                hooks.on_resident_kv(tenant, resident, weight_s)
        # The replica's own total, sampled where each tenant's is (before this step's ends free anything): KV only
        # grows within a step, so its end holds the step's most. Tenants share the pool, so their peaks do not add up
        # to this one unless they coincide, nor does the largest of them stand for it.
        resident = self.kv_used()
        if resident > 0:
            hooks.on_replica_kv(resident, weight_s)
            if resident > self.kv_peak_tokens:
                self.kv_peak_tokens = resident
        checkpoints = self.checkpoints
        while checkpoints and checkpoints[0][0] <= counter:
            entry = heapq.heappop(checkpoints)
            if self._valid(entry):
                hooks.on_checkpoint(entry[2], now)
        if self.aborts:
            aborts, self.aborts = self.aborts, []
            for request in aborts:
                # A cancelled request may have been preempted back to the queue meanwhile.
                if request.state in (WAITING, PREFILL, DECODE) and request.replica is self and request.abort:
                    hooks.terminal(request, request.abort, now)

    def generated(self, request: Request) -> int:
        return self.counter - request.base if request.state == DECODE else request.generated

    def set_checkpoint(self, request: Request) -> None:
        """The decode step at which the request next needs attention: its end, or its lease boundary."""
        request.checkpoint = request.base + min(request.stop_at, request.granted)
        heapq.heappush(self.checkpoints, (request.checkpoint, request.id, request))

    # -- leaving -------------------------------------------------------------------------------

    def release(self, request: Request) -> None:
        """Take a request out of the engine (terminal path), freeing its KV."""
        state = request.state
        tenant = request.tenant
        if state == WAITING:
            self.n_waiting -= 1
            self.tenant_waiting[tenant] -= 1
        elif state == PREFILL:
            self.prefilling.remove(request)
            self.kv_prefill -= request.kv_alloc
            self.tenant_kv_static[tenant] -= request.kv_alloc
        elif state == DECODE:
            request.generated = self.counter - request.base
            del self.decoding[request.id]
            static = request.prompt_tokens - request.base
            self.kv_decode_static -= static
            self.tenant_kv_static[tenant] -= static
            self.tenant_decoding[tenant] -= 1
        self.gateway_kv[tenant] -= request.kv_estimate

    def _preempt(self, now: float) -> None:
        """Evict the running sequence the engine's order ranks last; it recomputes later."""
        candidates = [*self.prefilling, *self.decoding.values()]
        victim = max(candidates, key=self.key)
        estimate = victim.kv_estimate
        self.release(victim)
        self.gateway_kv[victim.tenant] += estimate  # still the gateway's: it is queued here again
        victim.state = WAITING
        victim.preempted_s = now
        heapq.heappush(self.waiting, (self.key(victim), victim.id, victim))
        self.n_waiting += 1
        self.tenant_waiting[victim.tenant] += 1
        self.hooks.on_preempted(victim)

    def fail(self, now: float) -> list[Request]:
        """The engine dies: steps finished before ``now`` count, the one in flight is lost.

        Returns the requests it held, for the simulator to end."""
        if self.busy:
            done = math.floor((now - self.step_start_s) / self.step_dt_s + 1e-9) if self.step_dt_s > 0 else 0
            if done >= 1:
                self.step_k = min(done, self.step_k)
                self._complete(self.step_start_s + self.step_k * self.step_dt_s)
            self.step_chunks = []
        self.version += 1
        self.busy = False
        self.up = False
        self.failures += 1
        lost = [*self.prefilling, *self.decoding.values()]
        lost += [entry[2] for entry in sorted(self.waiting) if entry[2].state == WAITING and entry[2].replica is self]
        self.aborts = []
        return [request for request in lost if request.state != DONE]

    def recover(self) -> None:
        self.up = True
        self.waiting = []
        self.n_waiting = 0
        self.tenant_waiting = [0] * len(self.tenant_waiting)
        self.checkpoints = []
