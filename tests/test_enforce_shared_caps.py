"""Caps that several gateways share through a real redis-server (``state: redis``): each tenant's concurrency cap and
resident-KV cap per replica, and each pool's in-flight bound, counted over every gateway's requests, so that N proxies
never let a tenant hold N times its cap; places that expire when a gateway dies; and a streamed debit whose reply was
lost, counted once. Two gates over one server stand for two proxies here (the proxies' own test is in
test_enforce_redis.py)."""

from __future__ import annotations

import shutil
import time

import pytest
from policy_samples import platform_policy, sample_salts

from quotacalc.admission.policies import make_policy
from quotacalc.enforce.gate import COMPLETED, QUEUED, SENT, Gate, GateSettings, Ticket

redis = pytest.importorskip("redis", reason="the redis client is not installed (extra litellm)")
if shutil.which("redis-server") is None:
    pytest.skip("redis-server is not installed (apt-get install redis-server)", allow_module_level=True)

from enforce_stack import RedisServer  # noqa: E402

from quotacalc.enforce.redis_store import INFLIGHT_STANDS_S, RedisBuckets, place_life_s  # noqa: E402

#: Tenant 0's caps in these tests, and its pool's replicas.
CONCURRENT = 2
KV_CAP = 1_000
REPLICAS = 2


@pytest.fixture(scope="module")
def server():
    started = RedisServer()
    try:
        yield started
    finally:
        started.stop()


def _policy(*, replicas: int = REPLICAS, concurrent: int = CONCURRENT, kv_cap: int = KV_CAP):
    policy = platform_policy()
    tenants = list(policy.tenants)
    tenants[0] = tenants[0].model_copy(
        update={
            "bucket_depth_units": 1e9,
            "bucket_rate_units_per_s": 1e6,
            "max_concurrent_sequences": concurrent,
            "kv_cap_tokens_per_replica": kv_cap,
        }
    )
    pools = tuple(pool.model_copy(update={"replicas": replicas}) for pool in policy.pools)
    return policy.model_copy(update={"tenants": tuple(tenants), "pools": pools})


#: A place's grace beyond 1.25 leases in these tests (the store's default, PLACE_GRACE_S, covers a proxy's sweeper).
GRACE_S = 0.1


def _gates(server, policy, *, count: int = 2, ttl: float = 120.0, inflight_per_replica: int | None = None):
    """``count`` gates over one Redis database, as ``count`` proxies: each its own client and store."""
    redis.Redis.from_url(server.url).flushdb()
    settings = GateSettings(inflight_per_replica=inflight_per_replica, lease_ttl_s=ttl)
    gates = []
    for _ in range(count):
        client = redis.Redis.from_url(server.url)
        store = RedisBuckets(client, policy, prefix="caps", lease_ttl_s=ttl, place_grace_s=GRACE_S)
        gates.append(Gate(policy, sample_salts(policy), make_policy("incremental_lease", {}), store, settings))
    return gates


def _arrive(gate: Gate, request_id: str, prompt_tokens: int = 100, max_tokens: int = 100, tenant: int = 0) -> Ticket:
    ticket = gate.arrive(tenant, prompt_tokens, max_tokens, time.time(), request_id)
    assert isinstance(ticket, Ticket), ticket
    return ticket


def test_a_tenants_concurrency_cap_counts_every_gateways_requests(server):
    first, second = _gates(server, _policy())
    pool = first.tenants[0].pool
    held = [_arrive(first, f"a{i}") for i in range(CONCURRENT)]
    assert first.dispatch(pool, time.time()) == held
    # The other gateway has none of the tenant's requests in flight, but the store counts the first one's.
    waiting = _arrive(second, "b0")
    assert second.dispatch(pool, time.time()) == []
    assert waiting.state == QUEUED and second.held_by_store(pool)
    # Another tenant is not held by it.
    other = _arrive(second, "other", tenant=1)
    assert second.dispatch(pool, time.time()) == [other]
    first.settle(held[0], COMPLETED, time.time())
    assert second.dispatch(pool, time.time()) == [waiting]
    assert not second.held_by_store(pool)


def test_the_resident_kv_cap_per_replica_counts_every_gateways_requests(server):
    """Each request's estimate is 600 tokens (prompt 100 + max_tokens 500) under a cap of 1,000 a replica: one a
    replica, whichever gateway sent it; a third waits until one ends, then goes where the room is."""
    first, second = _gates(server, _policy(concurrent=10))
    pool = first.tenants[0].pool
    a = _arrive(first, "a", max_tokens=500)
    assert first.dispatch(pool, time.time()) == [a]
    b = _arrive(second, "b", max_tokens=500)
    assert second.dispatch(pool, time.time()) == [b]
    # The second gateway saw no request of its own on a's replica, but the store placed b on the other one.
    assert {a.replica, b.replica} == {0, 1}
    c = _arrive(first, "c", max_tokens=500)
    # The first gateway sees room only on the replica it has nothing on; the store knows b is there.
    assert first.dispatch(pool, time.time()) == [] and first.held_by_store(pool)
    # 400 tokens fit beside a's 600 under the cap: the store places it there, though this gateway never sent a.
    d = _arrive(second, "d", max_tokens=300)
    assert second.dispatch(pool, time.time()) == [d] and d.replica == a.replica
    second.settle(b, COMPLETED, time.time())
    assert first.dispatch(pool, time.time()) == [c] and c.replica == b.replica
    assert not first.held_by_store(pool)


def test_a_pools_in_flight_bound_counts_the_other_gateways_published_requests(server):
    """One sequence a replica and one replica: the pool holds one request, whichever gateway sent it. Each gateway
    publishes its count on a tick (not per request); the other's count stands until it is published again or, for a
    gateway that died, until it lapses."""
    first, second = _gates(server, _policy(replicas=1), inflight_per_replica=1)
    pool = first.tenants[0].pool
    a = _arrive(first, "a", tenant=1)
    assert first.dispatch(pool, time.time()) == [a]
    assert first.store.publish_inflight(pool, "first", first.queues[pool].inflight) == 0
    second.others_inflight(pool, second.store.publish_inflight(pool, "second", second.queues[pool].inflight))
    b = _arrive(second, "b", tenant=2)
    assert second.dispatch(pool, time.time()) == []
    assert b.state == QUEUED and second.held_by_store(pool)
    first.settle(a, COMPLETED, time.time())
    first.store.publish_inflight(pool, "first", first.queues[pool].inflight)
    second.others_inflight(pool, second.store.publish_inflight(pool, "second", 0))
    assert second.dispatch(pool, time.time()) == [b]
    # A gateway that stops publishing (it died) stops counting once its count lapses.
    first.store.publish_inflight(pool, "gone", 5)
    second.store.publish_inflight(pool, "second", second.queues[pool].inflight)
    assert first.store.publish_inflight(pool, "first", 0) == 5 + 1
    time.sleep(INFLIGHT_STANDS_S + 0.1)
    second.store.publish_inflight(pool, "second", second.queues[pool].inflight)
    assert first.store.publish_inflight(pool, "first", 0) == 1


def test_an_admission_that_may_go_at_once_claims_its_place_in_the_same_script(server):
    """Nothing waits and the pool has room: the take and the claim are one script, so the request costs the store no
    more round trips than in a single gateway (its take, then its settlement, which frees the place)."""
    (gate,) = _gates(server, _policy(), count=1)
    pool = gate.tenants[0].pool
    client = redis.Redis.from_url(server.url)
    warm = _arrive(gate, "warm")  # loads the scripts
    gate.dispatch(pool, time.time())
    gate.settle(warm, COMPLETED, time.time())
    client.config_resetstat()
    ticket = _arrive(gate, "once")
    assert ticket.claimed_replica is not None
    assert gate.dispatch(pool, time.time()) == [ticket] and ticket.replica == ticket.claimed_replica
    gate.settle(ticket, COMPLETED, time.time())
    stats = client.info("commandstats")
    assert stats["cmdstat_evalsha"]["calls"] == 2, stats
    assert client.hlen(gate.store.keys[0][5]) == 0  # the settlement freed the place


def test_a_gateway_that_dies_holds_its_places_no_longer_than_a_lease(server):
    ttl = 0.6
    first, second = _gates(server, _policy(concurrent=1, replicas=1), ttl=ttl, inflight_per_replica=1)
    pool = first.tenants[0].pool
    a = _arrive(first, "a")
    assert first.dispatch(pool, time.time()) == [a]
    # The first gateway dies with its request in flight: nothing settles it.
    del first
    waiting = _arrive(second, "b")
    assert second.dispatch(pool, time.time()) == []
    time.sleep(place_life_s(ttl, GRACE_S) + 0.1)
    assert second.dispatch(pool, time.time()) == [waiting]


def test_a_place_claimed_at_admission_by_a_request_that_then_waited_is_claimed_again(server):
    """A request that could go at once claimed its place with its admission, then waited (the pool filled): its place
    may lapse in the store meanwhile, and another gateway's request take it. It is claimed again when the queue sends
    it, never sent on a place it no longer holds."""
    ttl = 0.4
    first, second = _gates(server, _policy(concurrent=1), ttl=ttl)
    pool = first.tenants[0].pool
    a = _arrive(first, "a")
    assert a.claimed_replica is not None
    first.others_inflight(pool, first.queues[pool].inflight_bound)  # the other gateways fill the pool
    assert first.dispatch(pool, time.time()) == []
    time.sleep(place_life_s(ttl, GRACE_S) + 0.1)
    b = _arrive(second, "b")
    assert second.dispatch(pool, time.time()) == [b]
    first.others_inflight(pool, 1)
    assert first.dispatch(pool, time.time()) == [] and a.state == QUEUED
    second.settle(b, COMPLETED, time.time())
    assert first.dispatch(pool, time.time()) == [a]


def test_a_live_requests_places_are_kept_past_a_lease_while_its_tokens_stream(server):
    """Its places are refreshed with its lease as tokens come: a stream longer than a lease's life keeps them."""
    ttl = 0.8
    first, second = _gates(server, _policy(concurrent=1), ttl=ttl)
    pool = first.tenants[0].pool
    a = _arrive(first, "a", max_tokens=800)
    assert first.dispatch(pool, time.time()) == [a]
    b = _arrive(second, "b")
    for _ in range(round(2 * place_life_s(ttl, GRACE_S) / (ttl / 4))):
        time.sleep(ttl / 4)
        assert first.on_tokens(a, 1, time.time()) == 1
        assert second.dispatch(pool, time.time()) == []
    assert a.state == SENT and b.state == QUEUED
    first.settle(a, COMPLETED, time.time())
    assert second.dispatch(pool, time.time()) == [b]


def test_a_streamed_debit_whose_reply_was_lost_is_counted_once(server):
    """streamed_debit takes output units as they stream. A debit that lands after the client's timeout is a failure
    to the gateway, yet the store took the units: the settlement uses the store's own count of what the request
    streamed, so the bucket ends short by exactly the units billed, never by them twice."""
    policy = _policy()
    depth = policy.tenants[0].bucket_depth_units
    redis.Redis.from_url(server.url).flushdb()
    client = redis.Redis.from_url(server.url, socket_timeout=0.3)
    store = RedisBuckets(client, policy, prefix="streamed", lease_ttl_s=120.0)
    # No refill, so the level shows every unit taken.
    store.rates[0] = 1e-9
    gate = Gate(policy, sample_salts(policy), make_policy("streamed_debit", {}), store, GateSettings())
    ticket = _arrive(gate, "s", max_tokens=50)
    gate.dispatch(ticket.pool, time.time())
    assert gate.on_tokens(ticket, 3, time.time()) == 3
    import threading

    paused = threading.Thread(target=server.pause, args=(1.0,))
    paused.start()
    try:
        time.sleep(0.2)
        with pytest.raises(redis.exceptions.TimeoutError):
            gate.on_tokens(ticket, 2, time.time())
    finally:
        paused.join()
    # The gateway counted the two tokens (they reached the client) but not their debit, which landed.
    assert ticket.output_tokens == 5
    assert ticket.streamed_units == pytest.approx(3 * ticket.output_weight)
    record = gate.settle(ticket, COMPLETED, time.time())
    billed = record["units_debited"]
    assert billed == pytest.approx(ticket.prompt_units + 5 * ticket.output_weight)
    assert record["units_taken"] == pytest.approx(record["units_reserved"] + 5 * ticket.output_weight)
    assert store.level(0, 0.0) == pytest.approx(depth - billed, rel=1e-12)


def test_the_plugin_never_sends_more_of_a_tenants_requests_than_its_cap_while_dispatches_await_claims(server, tmp_path):
    """In the plugin, each dispatch awaits its claims on Redis, and requests arrive meanwhile, each asking for a
    dispatch: one dispatch runs on a pool at a time (another would pick the same head request, and send the one
    behind it on that claim). Twenty requests of a tenant of four sequences at once: four at the engine, the rest wait."""
    import asyncio

    pytest.importorskip("litellm", reason="the litellm extra is not installed")
    from enforce_stack import edit_policy, edit_settings, generate, in_process_enforcer

    cap = 4
    folder = generate(tmp_path)
    edit_policy(folder, alpha={"max_concurrent_sequences": cap, "bucket_depth_units": 1e9})
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4", state="redis", records=None)
    redis.Redis.from_url(server.url).flushdb()
    enforcer = in_process_enforcer(folder, server.url)
    body = {"model": "std", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 20, "stream": True,
            "proxy_server_request": {"headers": {"x-tenant-id": "alpha"}}}  # fmt: skip

    async def crowd() -> tuple[int, int, int]:
        calls = [
            asyncio.ensure_future(enforcer.async_pre_call_hook(None, None, dict(body), "acompletion"))
            for _ in range(20)
        ]
        most_sent = 0
        deadline = time.monotonic() + 20
        # Until every request has arrived and the queue has sent what it may; the most ever at the engine meanwhile.
        while time.monotonic() < deadline:
            await asyncio.sleep(0.01)
            sent = sum(1 for t in enforcer.gate.live.values() if t.state == SENT)
            most_sent = max(most_sent, sent)
            if len(enforcer.gate.live) == len(calls) and sent == cap:
                break
        await asyncio.sleep(0.3)  # the ticker pumps again meanwhile: nothing more goes
        most_sent = max(most_sent, sum(1 for t in enforcer.gate.live.values() if t.state == SENT))
        in_store = redis.Redis.from_url(server.url).hlen(enforcer.store.keys[0][5])
        failures = enforcer.store_failures  # a dispatch that ran into another fails (the gate refuses re-entry)
        for call in calls:
            call.cancel()
        await asyncio.gather(*calls, return_exceptions=True)
        return most_sent, in_store, failures

    most_sent, in_store, failures = asyncio.run(crowd())
    assert (most_sent, in_store, failures) == (cap, cap, 0)
