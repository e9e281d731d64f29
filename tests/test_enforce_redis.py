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
    litellm_executable,
    records,
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
    before = gate.store.level(0, 0.0)
    time.sleep(0.3)
    assert gate.store.level(0, 0.0) == pytest.approx(before + 30, abs=5)


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
