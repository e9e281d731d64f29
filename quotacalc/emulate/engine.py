"""One emulated replica, pure and on an injected clock: vLLM v1's scheduler over a KV block pool with a prefix cache.

The driver calls :meth:`EngineCore.schedule` with the engine's clock, waits the step time it returns, then calls
:meth:`EngineCore.complete` with the step's end; nothing here sleeps, reads a clock or does I/O.

What it follows of vLLM v1 (``vllm/v1/core/sched/scheduler.py`` and ``kv_cache_manager.py``):

- Each step spends a token budget (``max_num_batched_tokens``): first on the running sequences in order (a decode
  takes one token, a prompt still prefilling takes what is left of the budget: chunked prefill), then, if nothing
  was preempted this step, on waiting sequences while fewer than ``max_num_seqs`` run.
- The waiting queue is first come first served, or with the priority policy ordered by (priority, arrival): lower
  runs first. A sequence that does not get the blocks it needs preempts the running sequence the policy ranks last
  (the last admitted for fcfs, the largest (priority, arrival) for priority); the victim frees its blocks and goes
  back to the queue, to recompute its prompt and output (preemption by recompute).
- KV is a pool of blocks of ``block_tokens``. Freed blocks keep their hash and stay in the prefix cache until they
  are handed out again (least recently freed first); a new sequence's longest chain of cached full blocks (at most
  its prompt less one token, which must be computed to sample) is not prefilled again.

Step times come from the core's replica model (``quotacalc.core.replica.ReplicaModel``), the one ``price`` and
``simulate`` use: decodes at their mean context with the prompt chunks riding in the same step, or a prefill step.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from quotacalc.emulate.tokens import block_hashes, token_count

if TYPE_CHECKING:
    from quotacalc.core.replica import ReplicaModel

WAITING, RUNNING, FINISHED = "waiting", "running", "finished"

#: vLLM's histogram buckets (vllm/v1/metrics/loggers.py), seconds.
TTFT_BUCKETS_S = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0,
    20.0, 40.0, 80.0, 160.0, 640.0, 2560.0,
)  # fmt: skip
ITL_BUCKETS_S = (
    0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0,
)  # fmt: skip
E2E_BUCKETS_S = (
    0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0,
    960.0, 1920.0, 7680.0,
)  # fmt: skip


@dataclass(frozen=True)
class EngineSettings:
    """What one replica runs with: the priced replica model and the engine settings ``generate`` writes."""

    model: ReplicaModel
    block_tokens: int
    num_blocks: int
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    priority_policy: bool


class Histogram:
    """Cumulative bucket counts, their sum and count, as Prometheus keeps a histogram."""

    __slots__ = ("bounds", "count", "counts", "sum")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        self.sum += value
        self.count += 1
        for index, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[index] += 1
                break

    def cumulative(self) -> list[int]:
        total, out = 0, []
        for count in self.counts:
            total += count
            out.append(total)
        return out


@dataclass
class EngineStats:
    """Counters and histograms of one replica, named as vLLM's metrics are."""

    prefix_cache_queries: int = 0
    prefix_cache_hits: int = 0
    preemptions: int = 0
    prompt_tokens: int = 0
    generation_tokens: int = 0
    finished: dict[str, int] = field(default_factory=dict)
    ttft_s: Histogram = field(default_factory=lambda: Histogram(TTFT_BUCKETS_S))
    itl_s: Histogram = field(default_factory=lambda: Histogram(ITL_BUCKETS_S))
    e2e_s: Histogram = field(default_factory=lambda: Histogram(E2E_BUCKETS_S))


class Sequence:
    """One request inside the engine."""

    __slots__ = (
        "arrival_s",
        "blocks",
        "cached_tokens",
        "ends_by_length",
        "fail_at_token",
        "finish_reason",
        "first_token_s",
        "hashed_blocks",
        "hashes",
        "id",
        "last_token_s",
        "num_computed",
        "output_tokens",
        "priority",
        "prompt_tokens",
        "scheduled_once",
        "state",
        "target_tokens",
    )

    def __init__(
        self,
        id: int,
        *,
        data: bytes,
        block_tokens: int,
        arrival_s: float,
        target_tokens: int,
        priority: int = 0,
        salt: str | None = None,
        lora: str | None = None,
        fail_at_token: int | None = None,
        ends_by_length: bool = False,
    ) -> None:
        self.id = id
        self.priority = priority
        self.arrival_s = arrival_s
        self.prompt_tokens = token_count(data)
        self.hashes = block_hashes(data, block_tokens, salt=salt, lora=lora)
        self.target_tokens = target_tokens
        self.fail_at_token = fail_at_token
        self.state = WAITING
        self.num_computed = 0
        self.output_tokens = 0
        self.blocks: list[int] = []
        self.cached_tokens = 0
        self.scheduled_once = False
        self.first_token_s: float | None = None
        self.last_token_s: float | None = None
        self.finish_reason: str | None = None
        #: Whether reaching target_tokens is the request's limit (finish reason "length") or its drawn end ("stop").
        self.ends_by_length = ends_by_length
        self.hashed_blocks = 0

    @property
    def num_tokens(self) -> int:
        """Prompt and output so far: the tokens whose KV the sequence needs computed."""
        return self.prompt_tokens + self.output_tokens


class BlockPool:
    """KV blocks with reference counts and vLLM's prefix cache: hash -> block, evicted least recently freed first."""

    def __init__(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks
        self.ref = [0] * num_blocks
        self.block_hash: list[bytes | None] = [None] * num_blocks
        self.cached: dict[bytes, int] = {}
        #: Blocks no sequence holds, in the order they are handed out (hashed ones still serve cache hits).
        self.free: OrderedDict[int, None] = OrderedDict((block, None) for block in range(num_blocks))

    def free_blocks(self) -> int:
        return len(self.free)

    def usage(self) -> float:
        """Share of blocks held by sequences: vLLM's kv_cache_usage_perc (a cached block nobody holds is free)."""
        return 1.0 - len(self.free) / self.num_blocks if self.num_blocks else 0.0

    def longest_hit(self, hashes: list[bytes], max_blocks: int) -> list[int]:
        """The cached blocks of the longest prefix of ``hashes`` (at most ``max_blocks``)."""
        hit: list[int] = []
        for block_hash in hashes[:max_blocks]:
            block = self.cached.get(block_hash)
            if block is None:
                break
            hit.append(block)
        return hit

    def allocate(self, sequence: Sequence, hit: list[int], tokens: int, block_tokens: int) -> bool:
        """Give ``sequence`` the ``hit`` blocks and new ones up to ``tokens``; False (and nothing done) if short."""
        needed = -(-tokens // block_tokens) - len(sequence.blocks) - len(hit)
        evictable_hits = sum(1 for block in hit if self.ref[block] == 0)
        if needed > len(self.free) - evictable_hits:
            return False
        for block in hit:
            if self.ref[block] == 0:
                del self.free[block]
            self.ref[block] += 1
        sequence.blocks.extend(hit)
        for _ in range(max(0, needed)):
            block, _ = self.free.popitem(last=False)
            old = self.block_hash[block]
            if old is not None:
                if self.cached.get(old) == block:
                    del self.cached[old]
                self.block_hash[block] = None
            self.ref[block] = 1
            sequence.blocks.append(block)
        return True

    def cache_full_blocks(self, sequence: Sequence, block_tokens: int) -> None:
        """Register the sequence's fully computed prompt blocks under their hashes."""
        full = min(sequence.num_computed // block_tokens, len(sequence.hashes))
        for index in range(sequence.hashed_blocks, full):
            block = sequence.blocks[index]
            if self.block_hash[block] is None:
                block_hash = sequence.hashes[index]
                self.block_hash[block] = block_hash
                self.cached.setdefault(block_hash, block)
        sequence.hashed_blocks = max(sequence.hashed_blocks, full)

    def release(self, sequence: Sequence) -> None:
        """Drop the sequence's hold on its blocks; the tail goes first to the eviction order, as vLLM frees them."""
        for block in reversed(sequence.blocks):
            self.ref[block] -= 1
            if self.ref[block] == 0:
                self.free[block] = None
        sequence.blocks = []
        sequence.hashed_blocks = 0


@dataclass
class Step:
    """A step planned: each sequence with the tokens it computes, and how long the step takes (engine seconds)."""

    start_s: float
    duration_s: float
    chunks: list[tuple[Sequence, int]]
    decodes: int
    prefill_tokens: int


class EngineCore:
    """One replica's scheduler and KV pool."""

    def __init__(self, settings: EngineSettings) -> None:
        self.settings = settings
        self.pool = BlockPool(settings.num_blocks)
        self.running: list[Sequence] = []
        self.waiting: list[tuple[tuple[int, float, int], Sequence]] = []
        self.n_waiting = 0
        self.stats = EngineStats()

    # -- in and out -----------------------------------------------------------------------------

    def add(self, sequence: Sequence) -> None:
        """Queue a request (its arrival_s says where it stands among equals)."""
        sequence.state = WAITING
        heapq.heappush(self.waiting, (self._key(sequence), sequence))
        self.n_waiting += 1

    def abort(self, sequence: Sequence, reason: str = "abort") -> None:
        """Take a sequence out at once (a client gone, a fault), freeing its blocks."""
        if sequence.state == FINISHED:
            return
        if sequence.state == WAITING:
            self.n_waiting -= 1  # its heap entry is skipped when reached
        else:
            self.running.remove(sequence)
        self.pool.release(sequence)
        sequence.state = FINISHED
        sequence.finish_reason = reason
        self.stats.finished[reason] = self.stats.finished.get(reason, 0) + 1

    def has_work(self) -> bool:
        return bool(self.running) or self.n_waiting > 0

    def _key(self, sequence: Sequence) -> tuple[int, float, int]:
        priority = sequence.priority if self.settings.priority_policy else 0
        return (priority, sequence.arrival_s, sequence.id)

    # -- a step ---------------------------------------------------------------------------------

    def schedule(self, now_s: float) -> Step | None:
        """Plan the next step at ``now_s``; None when there is nothing to run."""
        settings = self.settings
        block = settings.block_tokens
        budget = settings.max_num_batched_tokens
        scheduled: dict[Sequence, int] = {}
        preempted = False
        index = 0
        running = self.running
        while index < len(running) and budget > 0:
            sequence = running[index]
            tokens = min(sequence.num_tokens - sequence.num_computed, budget)
            placed = True
            while not self.pool.allocate(sequence, [], sequence.num_computed + tokens, block):
                victim = self._victim()
                where = running.index(victim)
                running.pop(where)
                if victim in scheduled:
                    budget += scheduled.pop(victim)
                self._preempt(victim)
                preempted = True
                if where < index:
                    index -= 1
                if victim is sequence:
                    placed = False
                    break
            if placed:
                scheduled[sequence] = tokens
                budget -= tokens
                index += 1
        if not preempted:
            budget = self._admit(scheduled, budget)
        if not scheduled:
            return None
        return self._timed(scheduled, now_s)

    def _admit(self, scheduled: dict[Sequence, int], budget: int) -> int:
        settings = self.settings
        block = settings.block_tokens
        waiting = self.waiting
        while waiting and budget > 0 and len(self.running) < settings.max_num_seqs:
            sequence = waiting[0][1]
            if sequence.state != WAITING:
                heapq.heappop(waiting)
                continue
            # At most the prompt less one token is served from the cache: the last one is computed to sample.
            hit = self.pool.longest_hit(sequence.hashes, (sequence.num_tokens - 1) // block)
            cached = len(hit) * block
            tokens = min(sequence.num_tokens - cached, budget)
            if not self.pool.allocate(sequence, hit, cached + tokens, block):
                break  # head of line: the engine waits for room rather than skip ahead
            heapq.heappop(waiting)
            self.n_waiting -= 1
            self.stats.prefix_cache_queries += sequence.num_tokens
            self.stats.prefix_cache_hits += cached
            if not sequence.scheduled_once:
                sequence.scheduled_once = True
                sequence.cached_tokens = cached
                self.stats.prompt_tokens += sequence.prompt_tokens
            sequence.num_computed = cached
            sequence.state = RUNNING
            self.running.append(sequence)
            scheduled[sequence] = tokens
            budget -= tokens
        return budget

    def _victim(self) -> Sequence:
        if self.settings.priority_policy:
            return max(self.running, key=self._key)
        return self.running[-1]

    def _preempt(self, sequence: Sequence) -> None:
        self.pool.release(sequence)
        sequence.num_computed = 0
        sequence.state = WAITING
        heapq.heappush(self.waiting, (self._key(sequence), sequence))
        self.n_waiting += 1
        self.stats.preemptions += 1

    def _timed(self, scheduled: dict[Sequence, int], now_s: float) -> Step:
        """The step's time from the replica model: decodes at their mean context, prompt chunks riding along."""
        model = self.settings.model
        decodes = 0
        decode_context = 0
        prefill_tokens = 0
        prefill_compute_s = 0.0
        for sequence, tokens in scheduled.items():
            if sequence.output_tokens > 0 and tokens == 1 and sequence.num_computed + 1 == sequence.num_tokens:
                decodes += 1
                decode_context += sequence.num_computed
            else:
                prefill_tokens += tokens
                prefill_compute_s += model.prefill_compute_s(tokens, sequence.num_computed)
        if decodes:
            duration = model.mixed_step_time_s(decodes, decode_context / decodes, prefill_compute_s, prefill_tokens)
        else:
            duration = model.mixed_step_time_s(0, 0.0, prefill_compute_s, prefill_tokens)
        return Step(now_s, duration, list(scheduled.items()), decodes, prefill_tokens)

    def complete(self, step: Step) -> list[Sequence]:
        """Apply a step at its end: prefill progress, one token for each sequence that reached its end, and
        the sequences that finish. Returns every sequence that got a token (finished ones say why)."""
        now_s = step.start_s + step.duration_s
        block = self.settings.block_tokens
        stats = self.stats
        out: list[Sequence] = []
        for sequence, tokens in step.chunks:
            if sequence.state != RUNNING:
                continue  # aborted while the step ran
            sequence.num_computed += tokens
            self.pool.cache_full_blocks(sequence, block)
            if sequence.num_computed < sequence.num_tokens:
                continue
            sequence.output_tokens += 1
            stats.generation_tokens += 1
            if sequence.first_token_s is None:
                sequence.first_token_s = now_s
                stats.ttft_s.observe(now_s - sequence.arrival_s)
            elif sequence.last_token_s is not None:
                stats.itl_s.observe(now_s - sequence.last_token_s)
            sequence.last_token_s = now_s
            if sequence.fail_at_token is not None and sequence.output_tokens >= sequence.fail_at_token:
                self.abort(sequence, "error")
            elif sequence.output_tokens >= sequence.target_tokens:
                self._finish(sequence, now_s)
            out.append(sequence)
        return out

    def _finish(self, sequence: Sequence, now_s: float) -> None:
        reason = "length" if sequence.ends_by_length else "stop"
        self.running.remove(sequence)
        self.pool.release(sequence)
        sequence.state = FINISHED
        sequence.finish_reason = reason
        self.stats.finished[reason] = self.stats.finished.get(reason, 0) + 1
        self.stats.e2e_s.observe(now_s - sequence.arrival_s)

    def fail_all(self) -> list[Sequence]:
        """A fault: every sequence in flight ends with an error; returns them."""
        failed = [*self.running, *(entry[1] for entry in self.waiting if entry[1].state == WAITING)]
        for sequence in failed:
            self.abort(sequence, "error")
        self.waiting = []
        return failed
