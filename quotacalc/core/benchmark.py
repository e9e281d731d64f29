"""A closed-loop benchmark run as the engine schedules it: what a benchmark client measures.

Benchmark clients (NIM's genai-perf, ``vllm bench serve --max-concurrency``, GuideLLM's concurrent
mode) keep ``concurrency`` requests in flight with fixed prompt and output lengths: when one finishes,
the client sends the next at once. The engine (vLLM-style continuous batching with chunked prefill)
runs steps; each step takes every running decode (one token each) and then prefill chunks, first
come first served, up to ``max_num_batched_tokens`` tokens in all, and at most ``max_num_seqs``
sequences. A step's time is the replica model's (:meth:`ReplicaModel.mixed_step_time_s`). A
request's first token comes with the step that finishes its prefill; its inter-token latency is the
rest of its run over its other tokens.

Two starts, two regimes:

- ``lockstep``: every client sends its first request at once. With fixed lengths the requests stay
  in lock-step (prefilled together, finishing together) as long as their prompts fit one step's
  token budget: the others' prefills land in the time to first token, none between the tokens.
- ``spread``: the clients' requests start spread evenly over one request's output, as a run's
  requests end up once timing jitter has pulled them apart: every prefill rides in the others'
  decode steps, about (C − 1) / output of a prefill per step (:meth:`ReplicaModel.loaded_itl_s`).

The simulation is exact step by step but cheap: requests that start in the same step stay identical
and are one cohort; all requests have one output length, so the decoding cohorts finish in the order
they started (a queue), and the steps where nothing but the decodes' context changes are advanced
together at the span's mean context (exact while the step stays on one side of the roofline, where
its time is linear in context). A run costs a few loop turns per request (bench/benchmark.py).

Pure: no I/O.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

from quotacalc.errors import QuotacalcError

if TYPE_CHECKING:
    from quotacalc.core.replica import ReplicaModel

#: Each client's requests simulated: the first is a warm-up (the start is not a steady state) and
#: not measured; the others are.
CYCLES = 3

Start = Literal["lockstep", "spread"]


@dataclass(frozen=True, slots=True)
class ClosedLoopRun:
    """The mean figures a benchmark client reports for a closed-loop run, and the run's shape."""

    concurrency: int
    prompt_tokens: int
    output_tokens: int
    start: Start
    #: Mean time to first token: request overhead + waiting + the steps up to the end of its prefill.
    mean_ttft_s: float
    #: Mean inter-token latency (first token to last, over output − 1 gaps); None with one output token.
    mean_itl_s: float | None
    #: Requests averaged (every client's requests after its first).
    requests_measured: int
    #: Engine steps simulated, and the loop turns they took (spans of identical steps are one turn).
    engine_steps: int
    loop_turns: int
    #: The most cohorts (groups of identical requests) in flight at once: 1 is a lock-step run.
    max_cohorts: int


def closed_loop(
    model: ReplicaModel,
    concurrency: int,
    prompt_tokens: float,
    output_tokens: float,
    start: Start = "lockstep",
    cycles: int = CYCLES,
) -> ClosedLoopRun:
    """Simulate ``concurrency`` clients each sending ``cycles`` requests of these lengths back to back.

    Mean lengths are rounded to whole tokens (at least one each). The KV pool is not checked: a run
    the pool cannot hold queues or preempts in the engine, which no mean figure here describes.
    """
    if concurrency < 1:
        raise QuotacalcError(
            f"concurrency {concurrency}: a run has at least one request in flight", field="concurrency"
        )
    if cycles < 2:
        raise QuotacalcError(
            f"{cycles} request(s) per client: the first is a warm-up, so at least 2", field="cycles", fix="cycles >= 2"
        )
    prompt = max(1, round(prompt_tokens))
    output = max(1, round(output_tokens))
    budget_per_step = model.max_num_batched_tokens
    max_seqs = model.max_num_seqs
    # Waiting or prefilling cohorts, first come first served: [requests, prompt tokens done, sent at, cycle].
    pending: deque[list] = deque()
    # Decoding cohorts, oldest first: [requests, step of their first token, sent at, first token at, cycle].
    # A cohort whose first token came with step s has s' - s + 1 tokens after step s'.
    decoding: deque[list] = deque()
    decoding_requests = 0
    first_steps_sum = 0  # Σ requests × first-token step over the decoding cohorts
    part_prefilled = 0  # requests whose prompt is part-prefilled: they hold a sequence slot
    if start == "lockstep":
        pending.append([concurrency, 0, 0.0, 0])
    else:
        # Client i is (O − 1) i / C tokens into its first request's output (the oldest first).
        for client in reversed(range(concurrency)):
            generated = 1 + (output - 1) * client // concurrency
            if decoding and decoding[-1][1] == 1 - generated:
                decoding[-1][0] += 1
            else:
                decoding.append([1, 1 - generated, 0.0, 0.0, 0])
            decoding_requests += 1
            first_steps_sum += 1 - generated
    target = concurrency * (cycles - 1)
    now = 0.0
    ttft_sum = itl_sum = 0.0
    measured = steps = turns = max_cohorts = 0
    while measured < target:
        turns += 1
        cohorts = len(pending) + len(decoding)
        if cohorts > max_cohorts:
            max_cohorts = cohorts
        # Mean context of the decodes in the next step: prompt + tokens generated so far.
        context = prompt + steps + 1 - first_steps_sum / decoding_requests if decoding_requests else 0.0
        budget = budget_per_step - decoding_requests
        slots = max_seqs - decoding_requests - part_prefilled
        if budget > 0 and pending and (pending[0][1] > 0 or slots > 0):
            compute_s = 0.0
            tokens = 0
            finished_prefill: list[list] = []
            # First come first served: the head cohorts take the budget; the rest wait, untouched.
            while budget > 0 and pending:
                cohort = pending[0]
                requests, done, sent, cycle = cohort
                admitted = requests if done > 0 else min(requests, slots)
                if admitted <= 0:
                    break
                left = prompt - done
                whole = min(admitted, budget // left)
                if whole:
                    compute_s += whole * model.prefill_compute_s(left, done)
                    tokens += whole * left
                    budget -= whole * left
                    finished_prefill.append([whole, 0, sent, 0.0, cycle])
                    if done:
                        part_prefilled -= whole
                    else:
                        slots -= whole
                    requests -= whole
                    if not requests:
                        pending.popleft()
                        continue
                    cohort[0] = requests
                if budget > 0 and whole < admitted:
                    # One request takes what is left of the budget: a chunk of its prompt.
                    compute_s += model.prefill_compute_s(budget, done)
                    tokens += budget
                    if requests == 1:
                        cohort[1] = done + budget
                    else:
                        cohort[0] = requests - 1
                        pending.appendleft([1, done + budget, sent, cycle])
                    if not done:
                        slots -= 1
                        part_prefilled += 1
                    budget = 0
                break
            now += model.mixed_step_time_s(decoding_requests, context, compute_s, tokens)
            steps += 1
            for cohort in finished_prefill:
                cohort[1], cohort[3] = steps, now
                decoding.append(cohort)
                decoding_requests += cohort[0]
                first_steps_sum += cohort[0] * steps
        else:
            # Only decodes run until the oldest cohort's last token: one span of identical steps.
            span = decoding[0][1] + output - 1 - steps
            now += span * model.step_time_s(decoding_requests, context + (span - 1) / 2)
            steps += span
        # Requests whose last token came with this step end; their clients send the next at once.
        while decoding and decoding[0][1] + output - 1 <= steps:
            requests, first_step, sent, first, cycle = decoding.popleft()
            decoding_requests -= requests
            first_steps_sum -= requests * first_step
            if 1 <= cycle < cycles:
                measured += requests
                ttft_sum += requests * (first - sent)
                if output > 1:
                    itl_sum += requests * (now - first) / (output - 1)
            pending.append([requests, 0, now, cycle + 1])
    return ClosedLoopRun(
        concurrency=concurrency,
        prompt_tokens=prompt,
        output_tokens=output,
        start=start,
        mean_ttft_s=model.request_overhead_s + ttft_sum / measured,
        mean_itl_s=itl_sum / measured if output > 1 else None,
        requests_measured=measured,
        engine_steps=steps,
        loop_turns=turns,
        max_cohorts=max_cohorts,
    )
