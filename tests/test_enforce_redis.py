"""Bucket levels and leases in a real redis-server (Debian's package; .ci/run installs it), shared by gateways:
the same settlement as in memory, leases that expire and give their units back, keys in one Cluster slot per
tenant; and two real LiteLLM proxies sharing one tenant's bucket, failing closed while Redis is down."""

from __future__ import annotations

import json
import shutil
import time

import pytest
from policy_samples import platform_policy, sample_salts

from quotacalc.admission.policies import POLICY_NAMES, make_policy
from quotacalc.enforce.gate import COMPLETED, DISCONNECT, ENGINE_ERROR, QUOTA_STOP, Gate, GateSettings, Ticket

redis = pytest.importorskip("redis", reason="the redis client is not installed (extra litellm)")
if shutil.which("redis-server") is None:
    pytest.skip("redis-server is not installed (apt-get install redis-server)", allow_module_level=True)

from enforce_stack import (  # noqa: E402
    Emulator,
    Proxy,
    RedisServer,
    edit_policy,
    edit_settings,
    generate,
    in_process_enforcer,
    litellm_executable,
    records,
    stream_chat,
    wait_until,
)

from quotacalc.enforce.redis_store import RedisBuckets  # noqa: E402


@pytest.fixture(scope="module")
def server():
    started = RedisServer()
    try:
        yield started
    finally:
        started.stop()


def _policy(depth: float, rate: float = 1e-9):
    policy = platform_policy()
    tenants = tuple(
        t.model_copy(update={"bucket_depth_units": depth, "bucket_rate_units_per_s": rate}) for t in policy.tenants
    )
    return policy.model_copy(update={"tenants": tenants})


def _gate(server, policy, admission="incremental_lease", prefix="t", ttl=120.0) -> Gate:
    client = redis.Redis.from_url(server.url)
    client.flushdb()
    store = RedisBuckets(client, policy, prefix=prefix, lease_ttl_s=ttl)
    return Gate(policy, sample_salts(policy), make_policy(admission, {}), store, GateSettings(lease_ttl_s=ttl))


@pytest.mark.parametrize("admission", POLICY_NAMES)
@pytest.mark.parametrize(
    ("outcome", "tokens"), [(COMPLETED, 200), (QUOTA_STOP, 130), (ENGINE_ERROR, 0), (DISCONNECT, 3)]
)
def test_settlement_through_redis_leaves_the_bucket_at_depth_less_what_was_billed(server, admission, outcome, tokens):
    depth = 100_000.0
    policy = _policy(depth)
    gate = _gate(server, policy, admission)
    ticket = gate.arrive(0, 500, 300, 0.0, "r1")
    assert isinstance(ticket, Ticket)
    gate.dispatch(ticket.pool, 0.0)
    assert gate.on_tokens(ticket, tokens, 0.0) == tokens
    record = gate.settle(ticket, outcome, 0.0, prompt_tokens=500, cached_tokens=100)
    assert gate.store.level(0, 0.0) == pytest.approx(depth - record["units_debited"], abs=1e-6)
    weights = policy.tenants[0].weights
    expected = weights.output * tokens + (weights.request_units(500, 100, 0) if tokens or outcome == DISCONNECT else 0)
    assert record["units_debited"] == pytest.approx(expected)


def test_a_429s_retry_after_and_the_refill_run_on_the_servers_clock(server):
    policy = _policy(1000.0, rate=100.0)
    gate = _gate(server, policy)
    first = gate.arrive(0, 500, 100, 0.0, "r1")
    assert isinstance(first, Ticket)
    refused = gate.arrive(0, 500, 100, 0.0, "r2")
    assert refused.status == 429
    # The level is 1000 - hold (+ a few ms of refill); the deficit is hold - level.
    assert refused.retry_after_s == pytest.approx((2 * first.hold - 1000) / 100, abs=1)
    # The refill between two reads lies between the server's clock at the first's end and the second's start, and at
    # the first's start and the second's end (a loaded machine stretches the sleep, not the bounds).
    client = redis.Redis.from_url(server.url)

    def server_s() -> float:
        seconds, microseconds = client.time()
        return seconds + microseconds / 1e6

    first_start = server_s()
    before = gate.store.level(0, 0.0)
    first_end = server_s()
    time.sleep(0.3)
    second_start = server_s()
    after = gate.store.level(0, 0.0)
    second_end = server_s()
    assert 100 * (second_start - first_end) - 1e-6 <= after - before <= 100 * (second_end - first_start) + 1e-6
    assert after - before >= 100 * 0.3 * 0.9  # and the refill did run


def test_a_lease_that_expires_gives_its_units_back(server):
    """A gateway that dies mid-request holds nothing past its lease's life: the next script on the tenant's bucket
    returns the hold. Its gateway coming back late to settle does not return it twice."""
    depth = 10_000.0
    policy = _policy(depth)
    gate = _gate(server, policy, ttl=0.5)
    ticket = gate.arrive(0, 100, 1000, 0.0, "dead")
    assert isinstance(ticket, Ticket) and ticket.hold > 0
    assert gate.store.level(0, 0.0) == pytest.approx(depth - ticket.hold, abs=1e-6)
    time.sleep(0.8)
    assert gate.store.level(0, 0.0) == pytest.approx(depth, abs=1e-6)
    gate.dispatch(ticket.pool, 0.0)
    gate.on_tokens(ticket, 0, 0.0)
    record = gate.settle(ticket, ENGINE_ERROR, 0.0)
    assert record["units_debited"] == 0 and gate.store.level(0, 0.0) == pytest.approx(depth, abs=1e-6)


def test_a_tenants_keys_share_one_cluster_slot(server):
    from redis.crc import key_slot

    store = RedisBuckets(redis.Redis.from_url(server.url), platform_policy())
    for keys in store.keys:
        assert len({key_slot(key.encode()) for key in keys}) == 1
    assert len({key_slot(keys[0].encode()) for keys in store.keys}) > 1  # tenants spread over slots


# -- two real proxies --------------------------------------------------------------------------------------------------


@pytest.mark.litellm_proxy
def test_two_proxies_share_one_tenants_bucket_and_fail_closed_while_redis_is_down(tmp_path):
    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    folder = generate(tmp_path)
    edit_policy(folder, beta={"bucket_rate_units_per_s": 1.0, "bucket_depth_units": 500.0})
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4", state="redis")
    redis_server = RedisServer()
    emulator = Emulator(tmp_path / "plan.yaml")
    proxies: list[Proxy] = []
    try:
        env = {"QUOTACALC_REDIS_URL": redis_server.url}
        proxies = [Proxy(folder, emulator.url, env=env), Proxy(folder, emulator.url, env=env)]
        body = {"model": "std", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 60, "ignore_eos": True}
        first = proxies[0].chat("beta", body)
        assert first.status_code == 200, first.text
        # The other proxy sees the same bucket: 500 units less the first request's are short of a second.
        second = proxies[1].chat("beta", body)
        assert second.status_code == 429 and int(second.headers["retry-after"]) > 1, second.text
        assert proxies[1].chat("alpha", body).status_code == 200
        redis_server.stop()
        down = proxies[1].chat("alpha", body)
        assert down.status_code == 503 and down.headers["x-quotacalc-reason"] == "store_down", down.text
        redis_server.start()
        # A fresh server: buckets start full again (no persistence in the test); the store reconnects.
        assert proxies[0].chat("beta", body).status_code == 200
        outcomes = [r["outcome"] for r in records(folder)]
        assert outcomes.count("store_down") == 1 and outcomes.count("bucket") == 1
    finally:
        for proxy in proxies:
            proxy.stop()
        emulator.stop()
        redis_server.stop()


@pytest.mark.litellm_proxy
def test_two_proxies_share_one_tenants_concurrency_cap(tmp_path):
    """A tenant of one sequence at a time sends a stream to each of two proxies at once: the store counts both
    proxies' requests, so one waits in its proxy's queue until the other ends, then is served (in memory each proxy
    would count its own, and the tenant would hold two)."""
    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    folder = generate(tmp_path)
    edit_policy(folder, beta={"max_concurrent_sequences": 1})
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4", state="redis")
    redis_server = RedisServer()
    emulator = Emulator(tmp_path / "plan.yaml")
    proxies: list[Proxy] = []
    try:
        env = {"QUOTACALC_REDIS_URL": redis_server.url}
        proxies = [Proxy(folder, emulator.url, env=env), Proxy(folder, emulator.url, env=env)]
        body = {"model": "std", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 60, "ignore_eos": True,
                "stream": True}  # fmt: skip
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(lambda proxy: stream_chat(proxy, "beta", body), proxies))
        assert [status for status, _ in results] == [200, 200], [proxy.tail() for proxy in proxies]
        first, second = sorted(records(folder), key=lambda r: r["first_token"])
        assert (first["outcome"], second["outcome"]) == ("completed", "completed")
        assert second["start"] < first["end"] <= second["first_token"]
        assert second["dispatched"] >= first["end"]
    finally:
        for proxy in proxies:
            proxy.stop()
        emulator.stop()
        redis_server.stop()


def test_a_request_whose_lease_expired_while_it_waited_is_billed_in_full_at_the_end(server):
    """Its hold went back at expiry; when it goes on to the engine nothing is held any more, and the end charges
    what it received: the bucket ends short by exactly the units billed."""
    depth = 10_000.0
    gate = _gate(server, _policy(depth), ttl=0.5)
    ticket = gate.arrive(0, 100, 1000, 0.0, "slow")
    time.sleep(0.8)
    assert gate.dispatch(ticket.pool, 0.0) == [ticket]
    assert gate.on_tokens(ticket, 5, 0.0) == 5
    record = gate.settle(ticket, COMPLETED, 0.0)
    assert record["units_debited"] > 0
    assert gate.store.level(0, 0.0) == pytest.approx(depth - record["units_debited"], abs=1e-6)


def _settle_while_paused(server, gate: Gate, ticket: Ticket, outcome: str) -> dict:
    """Settle while redis-server is stopped (SIGSTOP) past the client's timeout: the client gives up on the reply,
    then the server goes on and runs the script it had received. Returns the record the gate made meanwhile."""
    import threading

    paused = threading.Thread(target=server.pause, args=(1.0,))
    paused.start()
    try:
        time.sleep(0.2)
        record = gate.settle(ticket, outcome, 0.0)
    finally:
        paused.join()
    redis.Redis.from_url(server.url).ping()  # the server runs again (and has run what it had received)
    return record


@pytest.mark.parametrize("outcome", [COMPLETED, ENGINE_ERROR])
def test_a_settlement_whose_reply_was_lost_after_it_landed_is_recorded_with_what_it_did(server, outcome):
    """A slow Redis (a loaded machine) answers a settlement after the client's timeout: the settlement landed, but the
    gateway saw a failure. Its record must still say what the bucket lost: the gateway sends the same settlement again
    (``confirm``), the store recognises it by the request's id and returns the figures of the one that landed, applying
    nothing twice. The bucket ends short by exactly the units the record debited, and no lease is left."""
    depth = 10_000.0
    policy = _policy(depth)
    client = redis.Redis.from_url(server.url, socket_timeout=0.3)
    client.flushdb()
    store = RedisBuckets(client, policy, prefix="lost", lease_ttl_s=120.0)
    gate = Gate(policy, sample_salts(policy), make_policy("incremental_lease", {}), store, GateSettings())
    # A request settled before: the server has the scripts (a script it lacks would fail there and run nothing).
    earlier = gate.arrive(0, 100, 300, 0.0, "earlier")
    gate.dispatch(earlier.pool, 0.0)
    assert gate.settle(earlier, ENGINE_ERROR, 0.0)["units_debited"] == 0
    ticket = gate.arrive(0, 100, 300, 0.0, "lost-reply")
    assert isinstance(ticket, Ticket)
    gate.dispatch(ticket.pool, 0.0)
    tokens = 5 if outcome == COMPLETED else 0
    assert gate.on_tokens(ticket, tokens, 0.0) == tokens
    record = _settle_while_paused(server, gate, ticket, outcome)
    # The gateway saw the store fail: the record waits for the store to confirm it.
    assert record["store_failed"] and gate.unconfirmed == {"lost-reply": ticket}
    billed = record["units_debited"]
    # It landed: the lease is gone and the bucket is short by what it billed, whatever the gateway saw.
    assert client.hlen(store.keys[0][2]) == 0
    assert store.level(0, 0.0) == pytest.approx(depth - billed, abs=1e-6)
    confirmed = gate.confirm(ticket)
    assert "store_failed" not in confirmed and not gate.unconfirmed
    assert confirmed["units_debited"] == pytest.approx(billed)
    assert store.level(0, 0.0) == pytest.approx(depth - confirmed["units_debited"], abs=1e-6)
    assert confirmed["units_taken"] == pytest.approx(ticket.reserved_units)
    assert confirmed["units_released"] == pytest.approx(ticket.reserved_units - billed)
    assert client.hlen(store.keys[0][2]) == 0
    # Sent once more (a proxy's shutdown settling what was cut off): the same figures, nothing applied twice.
    again = store.settle_lease(0, "lost-reply", billed + 100.0, 0.0, carry_debt=False)
    assert again.billed == pytest.approx(billed) and again.released == pytest.approx(confirmed["units_released"])
    assert store.level(0, 0.0) == pytest.approx(depth - billed, abs=1e-6)


def test_a_call_id_a_client_reuses_is_settled_anew_each_time(server):
    """LiteLLM takes a request's call id from the client's x-litellm-call-id header: two requests under one id are two
    leases and two settlements in the store (each admission's own key), so the second is not taken for a retry of the
    first and served free."""
    depth = 10_000.0
    gate = _gate(server, _policy(depth))
    debited = 0.0
    for admission in ("a", "b"):
        ticket = gate.arrive(0, 100, 300, 0.0, "same-id", lease_key=f"same-id/{admission}")
        gate.dispatch(ticket.pool, 0.0)
        assert gate.on_tokens(ticket, 5, 0.0) == 5
        record = gate.settle(ticket, COMPLETED, 0.0)
        assert record["units_debited"] > 0 and "store_failed" not in record
        debited += record["units_debited"]
    assert gate.store.level(0, 0.0) == pytest.approx(depth - debited, abs=1e-6)


def test_a_settlement_that_never_landed_is_applied_once_when_the_store_answers_again(server):
    """The other side of a failed settlement: Redis was down and ran nothing. Confirmed later, after the lease expired
    and its hold went back, the settlement charges what the request received: short by exactly the record's units."""
    depth = 10_000.0
    policy = _policy(depth)
    client = redis.Redis.from_url(server.url, socket_timeout=0.3)
    client.flushdb()
    store = RedisBuckets(client, policy, prefix="down", lease_ttl_s=0.5)
    gate = Gate(
        policy, sample_salts(policy), make_policy("incremental_lease", {}), store, GateSettings(lease_ttl_s=0.5)
    )
    ticket = gate.arrive(0, 100, 300, 0.0, "never-landed")
    gate.dispatch(ticket.pool, 0.0)
    assert gate.on_tokens(ticket, 3, 0.0) == 3
    down = RedisBuckets(redis.Redis(host="127.0.0.1", port=1, socket_timeout=0.3), policy, prefix="down")
    gate.store = gate.ledger.store = down
    record = gate.settle(ticket, COMPLETED, 0.0)
    assert record["store_failed"] and "never-landed" in gate.unconfirmed
    gate.store = gate.ledger.store = store
    time.sleep(0.8)  # the lease expires: its hold is back in the bucket
    assert store.level(0, 0.0) == pytest.approx(depth, abs=1e-6)
    confirmed = gate.confirm(ticket)
    assert confirmed["units_taken"] == 0 and confirmed["units_charged"] == pytest.approx(confirmed["units_debited"])
    assert store.level(0, 0.0) == pytest.approx(depth - confirmed["units_debited"], abs=1e-6)


# -- a Redis that hangs: the event loop goes on ------------------------------------------------------------------------


@pytest.fixture
def hung_redis_url():
    """A socket that accepts connections (the kernel's backlog) and never answers: a Redis that hangs."""
    import socket

    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(64)
    try:
        yield f"redis://127.0.0.1:{listener.getsockname()[1]}/0"
    finally:
        listener.close()


def test_a_hung_redis_fails_each_waiting_request_after_the_timeout_while_the_event_loop_runs_on(hung_redis_url):
    """Five admissions wait on a Redis that never answers, together: each fails with the client's timeout after about
    that long (not one after the other), and meanwhile the event loop serves other work (a ticker every 10 ms)."""
    import asyncio

    from quotacalc.enforce import bridge

    timeout_s = 0.5
    policy = _policy(1e6)
    store = RedisBuckets.from_url(hung_redis_url, policy, timeout_s=timeout_s)
    gate = Gate(policy, sample_salts(policy), make_policy("incremental_lease", {}), store, GateSettings())

    async def scenario():
        gaps: list[float] = []

        async def ticker():
            last = time.perf_counter()
            while True:
                await asyncio.sleep(0.01)
                now = time.perf_counter()
                gaps.append(now - last)
                last = now

        async def admit(index):
            started = time.perf_counter()
            try:
                await bridge.run(gate.arrive, 0, 100, 10, 0.0, f"r{index}")
            except redis.RedisError as error:
                return type(error), time.perf_counter() - started
            return None, time.perf_counter() - started

        ticking = asyncio.create_task(ticker())
        started = time.perf_counter()
        outcomes = await asyncio.gather(*(admit(i) for i in range(5)))
        total = time.perf_counter() - started
        ticking.cancel()
        return outcomes, total, gaps

    outcomes, total_s, gaps = asyncio.run(scenario())
    assert all(kind is redis.TimeoutError for kind, _ in outcomes), outcomes
    assert all(elapsed >= timeout_s * 0.9 for _, elapsed in outcomes), outcomes
    # Together, not one after the other (5 x 0.5 s); the bound leaves room for a loaded machine.
    assert total_s < 3 * timeout_s, total_s
    # The loop was never held for a Redis wait (a blocking client would hold it 0.5 s at a time).
    assert len(gaps) >= 10 and max(gaps) < timeout_s / 2, max(gaps)
    assert not gate.live  # nothing admitted, nothing held


def test_a_blocking_redis_call_on_a_running_event_loop_is_refused_not_run(server):
    """Inside a proxy every store call goes through the bridge; one that does not would block the loop, so it fails
    loudly rather than run blocking."""
    import asyncio

    store = RedisBuckets.from_url(server.url, _policy(1000.0))

    async def call_on_the_loop():
        return store.level(0, 0.0)

    with pytest.raises(RuntimeError, match=r"outside quotacalc\.enforce\.bridge\.run"):
        asyncio.run(call_on_the_loop())
    assert store.level(0, 0.0) == pytest.approx(1000.0)  # no loop running (the proxy stopping): blocking is fine


@pytest.mark.parametrize("admission", ["incremental_lease", "streamed_debit"])
def test_settlement_through_the_async_client_matches_the_blocking_one(server, admission):
    """The same scripts and keys through redis.asyncio: a request's settlement leaves the bucket at depth less what
    was billed, exactly as through the blocking client."""
    import asyncio

    from quotacalc.enforce import bridge

    depth = 100_000.0
    policy = _policy(depth)
    redis.Redis.from_url(server.url).flushdb()
    store = RedisBuckets.from_url(server.url, policy)
    gate = Gate(policy, sample_salts(policy), make_policy(admission, {}), store, GateSettings())

    async def one_request():
        ticket = await bridge.run(gate.arrive, 0, 500, 300, 0.0, "a1")
        assert isinstance(ticket, Ticket)
        await bridge.run(gate.dispatch, ticket.pool, 0.0)
        assert await bridge.run(gate.on_tokens, ticket, 200, 0.0) == 200
        record = await bridge.run(gate.settle, ticket, COMPLETED, 0.0, prompt_tokens=500, cached_tokens=100)
        level = await bridge.run(store.level, 0, 0.0)
        return record, level

    record, level = asyncio.run(one_request())
    weights = policy.tenants[0].weights
    assert record["units_debited"] == pytest.approx(weights.output * 200 + weights.request_units(500, 100, 0))
    assert level == pytest.approx(depth - record["units_debited"], abs=1e-6)
    assert store.keys[0][0].startswith("quotacalc:{")
    assert redis.Redis.from_url(server.url).exists(store.keys[0][0])


@pytest.mark.litellm_proxy
@pytest.mark.parametrize("failure", ["closed", "open"])
def test_a_paused_redis_stalls_no_other_request_of_the_proxy_and_its_failure_mode_is_applied_and_counted(
    tmp_path, failure
):
    """redis-server stopped with SIGSTOP (it accepts, never answers): four requests that need it fail after the
    configured timeout, together, with the configured failure mode (503 store_down, or served unmetered); while they
    wait, the proxy answers its health check at once; each failure is counted in the metrics and recorded."""
    import os
    import signal
    import threading

    import httpx

    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    timeout_s = 2.0
    folder = generate(tmp_path)
    edit_settings(
        folder, tenant_from="header", prompt_tokens="bytes4", state="redis", redis_failure=failure,
        redis_timeout_s=timeout_s,
    )  # fmt: skip
    redis_server = RedisServer()
    emulator = Emulator(tmp_path / "plan.yaml")
    proxy = None
    paused = False
    try:
        proxy = Proxy(folder, emulator.url, env={"QUOTACALC_REDIS_URL": redis_server.url})
        body = {"model": "std", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3}
        assert proxy.chat("alpha", body).status_code == 200  # connected, scripts loaded
        os.kill(redis_server.process.pid, signal.SIGSTOP)
        paused = True
        replies: list[tuple[int, str, float]] = []

        def ask() -> None:
            started = time.monotonic()
            reply = proxy.chat("alpha", body, timeout=60)
            reason = reply.headers.get("x-quotacalc-reason", "")
            replies.append((reply.status_code, reason, time.monotonic() - started))

        started = time.monotonic()
        askers = [threading.Thread(target=ask) for _ in range(4)]
        for asker in askers:
            asker.start()
        time.sleep(0.3)  # the four are waiting on Redis now
        health_started = time.monotonic()
        health = httpx.get(proxy.url + "/health/liveliness", timeout=30)
        health_s = time.monotonic() - health_started
        for asker in askers:
            asker.join(timeout=60)
        total_s = time.monotonic() - started
        os.kill(redis_server.process.pid, signal.SIGCONT)
        paused = False
        assert health.status_code == 200 and health_s < timeout_s / 2, health_s
        assert len(replies) == 4, replies
        expected = (503, "store_down") if failure == "closed" else (200, "")
        assert all((status, reason) == expected for status, reason, _ in replies), replies
        # Each waited for the timeout, and the four waited together: a blocking client would have served them one
        # after the other (4 x 2 s), the health check behind them.
        assert all(elapsed >= timeout_s * 0.9 for _, _, elapsed in replies), replies
        assert total_s < 3 * timeout_s, total_s
        metrics = httpx.get(proxy.url + "/quotacalc/metrics", timeout=10).text
        failures = [line for line in metrics.splitlines() if line.startswith("quotacalc_store_failures_total")]
        assert failures and float(failures[0].rsplit(" ", 1)[1]) == 4, failures
        rejects = [line for line in metrics.splitlines() if 'reason="store_down"' in line]
        assert (sum(float(line.rsplit(" ", 1)[1]) for line in rejects) == 4) == (failure == "closed"), rejects
        written = records(folder)
        if failure == "closed":
            assert [r["outcome"] for r in written].count("store_down") == 4, written
        else:  # served unmetered: each recorded at its end with its tokens and no units
            unmetered = [r for r in written if r.get("unmetered")]
            assert len(unmetered) == 4 and all(r["outcome"] == "completed" for r in unmetered), written
        # Redis back: the proxy meters again.
        assert proxy.chat("alpha", body).status_code == 200
    finally:
        if paused:
            os.kill(redis_server.process.pid, signal.SIGCONT)
        if proxy is not None:
            proxy.stop()
        emulator.stop()
        redis_server.stop()


def test_the_async_client_reconnects_after_a_redis_restart_before_sending_a_script():
    """A pooled connection the restarted server closed is replaced before the next script is sent (not failed on, and
    never a script sent twice): the first script after the restart succeeds."""
    import asyncio

    from quotacalc.enforce import bridge

    restarted = RedisServer()
    try:
        store = RedisBuckets.from_url(restarted.url, _policy(1000.0))

        async def around_a_restart():
            before = await bridge.run(store.level, 0, 0.0)
            await asyncio.to_thread(lambda: (restarted.stop(), restarted.start()))
            await asyncio.sleep(0.2)  # the loop sees the old connection's end
            return before, await bridge.run(store.level, 0, 0.0)

        assert asyncio.run(around_a_restart()) == (pytest.approx(1000.0), pytest.approx(1000.0))
    finally:
        restarted.stop()


def test_a_request_cancelled_during_its_settlement_still_returns_its_hold(server, tmp_path):
    """A client that goes away cancels its request's coroutine, possibly while its settlement waits on Redis: the
    settlement runs to its end regardless, so the bucket is back at depth (nothing was billed) and no lease is left."""
    import asyncio
    import contextlib

    pytest.importorskip("litellm", reason="the litellm extra is not installed")

    folder = generate(tmp_path)
    depth = 100_000.0
    edit_policy(folder, alpha={"bucket_depth_units": depth, "bucket_rate_units_per_s": 1e-9})
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4", state="redis", records=None)
    redis.Redis.from_url(server.url).flushdb()
    enforcer = in_process_enforcer(folder, server.url)
    body = {"model": "std", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "stream": True,
            "proxy_server_request": {"headers": {"x-tenant-id": "alpha"}}}  # fmt: skip

    async def cancelled_settlement():
        data = await enforcer.async_pre_call_hook(None, None, dict(body), "acompletion")
        ticket = enforcer._ticket(data)
        assert ticket is not None and ticket.hold > 0
        # The settlement is on its way to Redis (a slow reply) when the client goes away.
        returning = asyncio.Event()
        settle = enforcer.store._awaited["settle"]

        async def slow_settle(**script):
            returning.set()
            await asyncio.sleep(0.05)
            return await settle(**script)

        enforcer.store._awaited["settle"] = slow_settle
        settling = asyncio.ensure_future(enforcer._settle(ticket, ENGINE_ERROR))  # nothing billed
        await returning.wait()
        settling.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await settling
        for _ in range(200):  # the shielded settlement goes on
            if not enforcer._in_flight:
                break
            await asyncio.sleep(0.01)
        return await bridge_level(enforcer)

    async def bridge_level(enforcer):
        from quotacalc.enforce import bridge

        return await bridge.run(enforcer.store.level, 0, 0.0)

    level = asyncio.run(cancelled_settlement())
    assert level == pytest.approx(depth, abs=1e-6)
    assert redis.Redis.from_url(server.url).hlen(enforcer.store.keys[0][2]) == 0
    assert not enforcer.gate.live


@pytest.mark.litellm_proxy
def test_fail_open_serves_unmetered_and_records_each_requests_tokens_at_its_end(tmp_path, run_cli):
    """redis_failure: open while Redis is down: requests are served, nothing held or billed, and each one's record is
    written when it ends, with the tokens the engine served and no units (not a refusal's status), so quotacalc fleet
    counts its load."""
    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    from enforce_stack import stream_chat

    folder = generate(tmp_path)
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4", state="redis", redis_failure="open")
    redis_server = RedisServer()
    emulator = Emulator(tmp_path / "plan.yaml")
    proxy = None
    try:
        proxy = Proxy(folder, emulator.url, env={"QUOTACALC_REDIS_URL": redis_server.url})
        redis_server.stop()
        body = {"model": "std", "messages": [{"role": "user", "content": "hi"}], "ignore_eos": True}
        status, events = stream_chat(proxy, "alpha", {**body, "max_tokens": 20})
        assert status == 200, events
        streamed = sum(1 for e in events for c in e.get("choices") or [] if (c.get("delta") or {}).get("content"))
        answer = proxy.chat("alpha", {**body, "max_tokens": 10})
        assert answer.status_code == 200, answer.text
        served = answer.json()["usage"]["completion_tokens"]
        written = wait_until(lambda: len(records(folder)) >= 2)
        assert written, proxy.tail()
    finally:
        if proxy is not None:
            proxy.stop()
        emulator.stop()
        redis_server.stop()
    lines = records(folder)
    assert len(lines) == 2, lines
    assert sorted(r["output_tokens"] for r in lines) == sorted([streamed, served]) == [10, 20]
    for record in lines:
        assert record["unmetered"] is True and "status" not in record and record["outcome"] == "completed", record
        assert all(record[key] == 0 for key in record if key.startswith("units_")), record
        assert record["prompt_tokens"] > 0 and record["start"] <= record["dispatched"] <= record["first_token"]
    code, out, err = run_cli("fleet", folder / "usage.jsonl", "--plan", tmp_path / "plan.yaml", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["rows_used"] == 2
    alpha = next(t for t in document["tenants"] if t["tenant"] == "alpha")
    assert alpha["requests"] == 2 and alpha["units"] > 0


def test_the_proxy_writes_a_lost_settlements_record_once_the_store_confirms_it(server, tmp_path):
    """In the plugin: a settlement whose reply came later than redis_timeout_s is not written as failed; the sweeper
    sends it again, and the one record written carries the figures the store applied."""
    import asyncio

    pytest.importorskip("litellm", reason="the litellm extra is not installed")

    folder = generate(tmp_path)
    depth = 100_000.0
    edit_policy(folder, alpha={"bucket_depth_units": depth, "bucket_rate_units_per_s": 1e-9})
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4", state="redis", redis_timeout_s=0.3)
    redis.Redis.from_url(server.url).flushdb()
    enforcer = in_process_enforcer(folder, server.url)
    body = {"model": "std", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "stream": True,
            "proxy_server_request": {"headers": {"x-tenant-id": "alpha"}}}  # fmt: skip

    async def lost_then_confirmed():
        # One request settled first: the server has the settlement's script (one it lacked would run nothing).
        first = enforcer._ticket(await enforcer.async_pre_call_hook(None, None, dict(body), "acompletion"))
        await enforcer._settle(first, DISCONNECT)
        ticket = enforcer._ticket(await enforcer.async_pre_call_hook(None, None, dict(body), "acompletion"))
        assert ticket is not None and ticket.hold > 0
        await enforcer._ticket_call(ticket, enforcer.gate.on_tokens, 3, time.time())
        paused = asyncio.ensure_future(asyncio.to_thread(server.pause, 1.0))
        await asyncio.sleep(0.2)
        await enforcer._settle(ticket, COMPLETED)
        await paused
        unwritten = [r for r in records(folder) if r["request_id"] == ticket.request_id]
        assert ticket.request_id in enforcer.gate.unconfirmed and not unwritten
        enforcer._start_background()  # the sweeper
        for _ in range(50):
            if not enforcer.gate.unconfirmed:
                break
            await asyncio.sleep(0.1)
        return ticket.request_id, ticket.lease_key

    request_id, lease_key = asyncio.run(lost_then_confirmed())
    written = [r for r in records(folder) if r["request_id"] == request_id]
    assert len(written) == 1 and "store_failed" not in written[0], written
    record = written[0]
    assert record["units_debited"] > 0
    client = redis.Redis.from_url(server.url)
    store = enforcer.store
    held, released, charged, forgiven, billed, _streamed = (
        float(x) for x in client.hget(store.keys[0][3], lease_key).split()
    )
    assert (held, billed, released, charged, forgiven) == pytest.approx(
        (record["units_taken"], record["units_debited"], record["units_released"], record["units_charged"], 0.0)
    )
    # The first request billed its prompt (a disconnect at the engine); the bucket lost exactly the two records' units.
    debited = sum(r["units_debited"] for r in records(folder) if r.get("pool"))
    assert store.level(0, 0.0) == pytest.approx(depth - debited, abs=1e-6)
    assert client.hlen(store.keys[0][2]) == 0
