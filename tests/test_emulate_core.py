"""The emulator's pure core, on a hand-driven clock: step times from the priced replica model, the token budget,
vLLM's salted prefix cache, priority order, preemption and freeing KV. No server, no sleeping."""

from __future__ import annotations

import dataclasses

import pytest

from quotacalc.cli.emulate import _serving
from quotacalc.emulate.engine import FINISHED, EngineCore, Sequence
from quotacalc.emulate.tokens import BYTES_PER_TOKEN, block_hashes, ids_token_bytes, text_token_bytes, token_count

PLAN = "examples/llama-3.3-70b-h100.yaml"


@pytest.fixture(scope="module")
def serving():
    serving, _ = _serving(PLAN, None, None, None, None)
    return serving


def _engine(serving, **changes) -> EngineCore:
    return EngineCore(dataclasses.replace(serving.engine, **changes))


def _sequence(
    engine: EngineCore, ident: int, tokens: int, out: int, *, at: float = 0.0, offset: int = 0, **kw
) -> Sequence:
    """A prompt of ``tokens`` four-digit tokens (``offset`` makes another prompt)."""
    data = b"".join(f"{(i * 7919 + offset) % 10_000:04d}".encode() for i in range(tokens))
    return Sequence(ident, data=data, block_tokens=engine.settings.block_tokens, arrival_s=at, target_tokens=out, **kw)


def _run(engine: EngineCore, now: float = 0.0, until=None) -> float:
    """Step until idle (or until ``until()``); the clock at the end."""
    while engine.has_work() and not (until and until()):
        step = engine.schedule(now)
        assert step is not None
        engine.complete(step)
        now = step.start_s + step.duration_s
    return now


def test_tokens_are_four_bytes_each_and_ids_one_each():
    assert token_count(text_token_bytes("abcdefgh")) == 2
    assert token_count(text_token_bytes("abcdefghi")) == 3  # a short last chunk is a token
    assert token_count(ids_token_bytes([1, 2, 3])) == 3
    assert BYTES_PER_TOKEN == 4


def test_block_hashes_chain_salt_first_block_lora_every_block():
    data = bytes(range(256)) * 2  # 128 tokens: 8 blocks of 16
    plain = block_hashes(data, 16, salt=None, lora=None)
    salted = block_hashes(data, 16, salt="a", lora=None)
    lora = block_hashes(data, 16, salt=None, lora="x")
    assert len(plain) == 8
    # The salt enters the first block only, but the chain carries it to every block after.
    assert all(p != s for p, s in zip(plain, salted, strict=True))
    assert all(p != q for p, q in zip(plain, lora, strict=True))
    # Equal prefixes hash alike, and a change in block 3 leaves blocks 0-2 as they were.
    changed = data[: 3 * 64] + b"\xff" + data[3 * 64 + 1 :]
    other = block_hashes(changed, 16, salt=None, lora=None)
    assert other[:3] == plain[:3] and other[3:] != plain[3:]


def test_first_token_takes_the_priced_prefill_and_each_next_the_priced_decode_step(serving):
    engine = _engine(serving)
    model = engine.settings.model
    prompt = 20_000  # above the 8,192-token budget: three chunks
    seq = _sequence(engine, 0, prompt, 4)
    engine.add(seq)
    steps = []
    now = 0.0
    while engine.has_work():
        step = engine.schedule(now)
        steps.append(step)
        engine.complete(step)
        now = step.start_s + step.duration_s
    budget = engine.settings.max_num_batched_tokens
    assert [s.prefill_tokens for s in steps[:3]] == [budget, budget, prompt - 2 * budget]
    # price's time to first token is the request overhead plus these chunks (ReplicaModel.ttft_s).
    first_token_s = steps[2].start_s + steps[2].duration_s
    assert first_token_s == pytest.approx(model.ttft_s(prompt) - model.request_overhead_s, rel=1e-12)
    # Each decode step of a batch of one is ReplicaModel.step_time_s at the tokens computed so far.
    for k, step in enumerate(steps[3:]):
        assert step.decodes == 1
        assert step.duration_s == pytest.approx(model.step_time_s(1, prompt + k), rel=1e-12)
    assert seq.state == FINISHED and seq.output_tokens == 4 and seq.finish_reason == "stop"
    assert engine.pool.usage() == 0.0


def test_a_decode_batch_with_a_prompt_chunk_is_the_mixed_step(serving):
    engine = _engine(serving)
    model = engine.settings.model
    a = _sequence(engine, 0, 100, 50)
    engine.add(a)
    _run(engine, until=lambda: a.output_tokens >= 2)
    b = _sequence(engine, 1, 300, 5, offset=3)
    engine.add(b)
    step = engine.schedule(1.0)
    assert step.decodes == 1 and step.prefill_tokens == 300
    expected = model.mixed_step_time_s(1, a.num_computed, model.prefill_compute_s(300, 0), 300)
    assert step.duration_s == pytest.approx(expected, rel=1e-12)


def test_prefix_cache_hits_the_same_salt_and_misses_another(serving):
    engine = _engine(serving)
    block = engine.settings.block_tokens
    prompt = 1_000
    full_hit = (prompt - 1) // block * block  # the last token is always computed, so 992 of 1,000

    def cached(ident: int, salt: str | None, lora: str | None = None) -> int:
        seq = _sequence(engine, ident, prompt, 1, salt=salt, lora=lora)
        engine.add(seq)
        _run(engine)
        return seq.cached_tokens

    assert cached(0, None) == 0
    assert cached(1, None) == full_hit
    assert cached(2, "tenant-a") == 0
    assert cached(3, "tenant-a") == full_hit
    assert cached(4, "tenant-b") == 0
    assert cached(5, None, lora="adapter") == 0
    assert engine.stats.prefix_cache_hits == 2 * full_hit
    # A cached prefix skips its prefill: the second request's first step computes 8 tokens, not 1,000.
    seq = _sequence(engine, 6, prompt, 1)
    engine.add(seq)
    assert engine.schedule(0.0).prefill_tokens == prompt - full_hit


def test_priority_policy_runs_lower_first_fcfs_runs_arrival_order(serving):
    for priority_policy, expected in ((True, [0, 2, 1]), (False, [0, 1, 2])):
        engine = _engine(serving, max_num_seqs=1, priority_policy=priority_policy)
        prio = {0: 0, 1: 10, 2: 1} if priority_policy else {0: 0, 1: 0, 2: 0}
        seqs = [_sequence(engine, i, 50, 3, at=float(i), priority=prio[i], offset=i) for i in range(3)]
        for seq in seqs:
            engine.add(seq)
        finished = []
        now = 0.0
        while engine.has_work():
            step = engine.schedule(now)
            for seq in engine.complete(step):
                if seq.state == FINISHED:
                    finished.append(seq.id)
            now = step.start_s + step.duration_s
        assert finished == expected


def test_a_full_pool_preempts_the_last_and_recomputes(serving):
    engine = _engine(serving, num_blocks=40)  # 640 tokens: four sequences of 100 + 200 do not fit at once
    seqs = [_sequence(engine, i, 100, 200, at=float(i), offset=i) for i in range(4)]
    for seq in seqs:
        engine.add(seq)
    peak = 0
    now = 0.0
    while engine.has_work():
        step = engine.schedule(now)
        peak = max(peak, sum(len(s.blocks) for s in engine.running))
        engine.complete(step)
        now = step.start_s + step.duration_s
    assert engine.stats.preemptions > 0
    assert peak <= 40
    assert all(s.output_tokens == 200 and s.state == FINISHED for s in seqs)
    assert engine.pool.usage() == 0.0
    assert engine.stats.generation_tokens == 800


def test_priority_preemption_evicts_the_largest_priority(serving):
    engine = _engine(serving, num_blocks=20, priority_policy=True)
    low = _sequence(engine, 0, 100, 150, at=0.0, priority=5)
    high = _sequence(engine, 1, 100, 150, at=1.0, priority=0, offset=1)
    engine.add(low)
    engine.add(high)
    evicted = []
    now = 0.0
    while engine.has_work() and not evicted:
        before = set(engine.running)
        step = engine.schedule(now)
        evicted = [s.id for s in before if s not in engine.running and s.state != FINISHED]
        engine.complete(step)
        now = step.start_s + step.duration_s
    assert evicted == [0]


def test_abort_frees_blocks_at_once(serving):
    engine = _engine(serving)
    seq = _sequence(engine, 0, 500, 1000)
    engine.add(seq)
    _run(engine, until=lambda: seq.output_tokens >= 3)
    assert engine.pool.usage() > 0
    engine.abort(seq)
    assert engine.pool.usage() == 0.0 and not engine.running and not engine.has_work()
    assert engine.stats.finished == {"abort": 1}


def test_fail_all_ends_every_sequence_in_flight(serving):
    engine = _engine(serving, max_num_seqs=1)
    seqs = [_sequence(engine, i, 50, 100, at=float(i), offset=i) for i in range(3)]
    for seq in seqs:
        engine.add(seq)
    engine.complete(engine.schedule(0.0))
    assert len(engine.fail_all()) == 3
    assert all(s.finish_reason == "error" for s in seqs) and not engine.has_work()
    assert engine.pool.usage() == 0.0
