"""A chaos run through two real LiteLLM proxies sharing a real redis-server, before ``quotacalc emulate`` failing
requests: random client disconnects, engine failures, one proxy restart and one Redis restart; then conservation.

Scaled down from the 10,000 requests of the issue to CHAOS_REQUESTS (QUOTACALC_CHAOS_REQUESTS overrides it) so that it
runs in about a minute on a shared two-core machine (and sends nothing new after CHAOS_SECONDS); every path it
exercises is the same at any count.

After the leases' life has passed:
- no units are held any more (every tenant's lease table is empty),
- each tenant's bucket is short by exactly the units its records debited (with refill made negligible), so nothing
  leaked either way,
- each record debits exactly its prompt units (cached tokens at their weight) plus W x the tokens it streamed,
- no tenant was served more than its bucket (its contract here) plus one lease.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytestmark = pytest.mark.litellm_proxy

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
)

CHAOS_REQUESTS = int(os.environ.get("QUOTACALC_CHAOS_REQUESTS", "150"))
#: The run sends no new request after this long (a loaded machine runs fewer); what it sent is checked the same.
CHAOS_SECONDS = float(os.environ.get("QUOTACALC_CHAOS_SECONDS", "300"))
DEPTH = 60_000.0
LEASE_TOKENS = 64
LEASE_TTL_S = 4.0
TENANTS = ("alpha", "beta", "gamma")


def _one(proxy: Proxy, tenant: str, rng: random.Random) -> str:
    body = {
        "model": "std",
        "messages": [{"role": "user", "content": "chaos " * rng.randint(1, 60)}],
        "max_tokens": rng.randint(5, 200),
    }
    headers = proxy.headers(tenant)
    try:
        if rng.random() < 0.3:
            return str(
                httpx.post(proxy.url + "/v1/chat/completions", json=body, headers=headers, timeout=60).status_code
            )
        leave_after = rng.randint(1, 60) if rng.random() < 0.3 else None
        with httpx.stream(
            "POST", proxy.url + "/v1/chat/completions", json={**body, "stream": True}, headers=headers, timeout=60
        ) as response:
            if response.status_code != 200:
                return str(response.status_code)
            seen = 0
            for line in response.iter_lines():
                if '"content"' in line:
                    seen += 1
                    if leave_after is not None and seen >= leave_after:
                        return "left"  # the client disconnects mid-stream
        return "200"
    except httpx.HTTPError as error:
        return type(error).__name__


def test_chaos_conserves_units(tmp_path):
    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    folder = generate(tmp_path)
    # Refill made negligible, so that every unit the bucket lost is accounted for by a record.
    policy = edit_policy(
        folder, **{name: {"bucket_depth_units": DEPTH, "bucket_rate_units_per_s": 1e-9} for name in TENANTS}
    )
    edit_settings(
        folder,
        tenant_from="header",
        prompt_tokens="bytes4",
        state="redis",
        lease_tokens=LEASE_TOKENS,
        lease_ttl_s=LEASE_TTL_S,
        queue_wait_max_s=20,
    )
    data = tmp_path / "redis"
    data.mkdir()
    redis_server = RedisServer(persist_dir=data)
    emulator = Emulator(tmp_path / "plan.yaml", "--fail-rate", "0.05", "--seed", "3")
    proxies: list[Proxy] = []
    outcomes: list[str] = []
    try:
        env = {"QUOTACALC_REDIS_URL": redis_server.url}
        proxies = [Proxy(folder, emulator.url, env=env), Proxy(folder, emulator.url, env=env)]
        rng = random.Random(11)
        plan = [(rng.choice(TENANTS), rng.randrange(2), rng.random()) for _ in range(CHAOS_REQUESTS)]
        lock = threading.Lock()
        done = [0]

        deadline = time.monotonic() + CHAOS_SECONDS

        def run(item: tuple[str, int, float]) -> None:
            tenant, which, seed = item
            late = time.monotonic() > deadline
            result = "not sent" if late else _one(proxies[which], tenant, random.Random(seed))
            with lock:
                outcomes.append(result)
                done[0] += 1

        def chaos() -> None:
            # One proxy restart and one Redis restart, a third and two thirds of the way through.
            while done[0] < CHAOS_REQUESTS // 3:
                time.sleep(0.1)
            proxies[1].stop()
            proxies[1].start()
            while done[0] < 2 * CHAOS_REQUESTS // 3:
                time.sleep(0.1)
            redis_server.stop()
            time.sleep(0.5)
            redis_server.start()

        restarts = threading.Thread(target=chaos)
        restarts.start()
        with ThreadPoolExecutor(12) as pool:
            list(pool.map(run, plan))
        restarts.join(timeout=300)
        text = httpx.get(emulator.url + "/metrics", timeout=10).text
        engine_failures = sum(
            float(line.rsplit(" ", 1)[1])
            for line in text.splitlines()
            if line.startswith("vllm:request_success_total") and 'finished_reason="error"' in line
        )
        time.sleep(LEASE_TTL_S + 2.0)  # every lease's life has passed
        client = redis.Redis.from_url(redis_server.url)
        levels = {}
        from quotacalc.core.policy import QuotaPolicy
        from quotacalc.enforce.redis_store import RedisBuckets

        store = RedisBuckets(client, QuotaPolicy.model_validate(policy))
        for index, tenant in enumerate(store.keys):
            name = tenant[0].split("{")[1].split("}")[0]
            if name in TENANTS:
                levels[name] = store.level(index, 0.0)
                assert client.hlen(tenant[2]) == 0, f"{name} still holds leases"
    finally:
        for proxy in proxies:
            proxy.stop()
        emulator.stop()
        redis_server.stop()
    assert len(outcomes) == CHAOS_REQUESTS
    kinds = {kind: outcomes.count(kind) for kind in set(outcomes)}
    rows = records(folder)
    by_outcome = {}
    for row in rows:
        by_outcome[row["outcome"]] = by_outcome.get(row["outcome"], 0) + 1
    # The run went through the paths it is meant to: completions, disconnects, engine failures, 429s.
    assert kinds.get("200", 0) > 0 and kinds.get("left", 0) > 0, kinds
    # The engine failed requests (LiteLLM retries a failed call before the plugin sees it, so few end engine_error).
    assert engine_failures > 0 and by_outcome.get("disconnect", 0) > 0, (engine_failures, by_outcome)
    tenants = {t["name"]: t for t in policy["tenants"]}
    failed_settlements = [r for r in rows if r.get("store_failed")]
    for name in TENANTS:
        weights = tenants[name]["weights"]
        mine = [r for r in rows if r["tenant"] == name and r.get("pool")]
        debited = 0.0
        for row in mine:
            if row["units_debited"]:
                uncached = max(row["prompt_tokens"] - row["cached_tokens"], 0)
                prompt = (
                    uncached * (weights["prompt"] + weights["prompt_per_prompt_token"] * row["prompt_tokens"])
                    + row["cached_tokens"] * weights["cached_prompt"]
                )
                assert row["units_debited"] == pytest.approx(
                    prompt + weights["output"] * row["output_tokens"], rel=1e-9
                ), row
            if not row.get("store_failed"):
                # What the bucket lacked at the end and the policy forgave was billed but never taken.
                debited += row["units_debited"] - row["units_forgiven"]
        # Nothing leaked: the bucket is short by what the records debited (settlements the store missed returned
        # their holds by expiry, and bill nothing).
        assert DEPTH - levels[name] == pytest.approx(debited, abs=1e-3), (name, levels[name], debited)
        one_lease = 4096 + weights["output"] * LEASE_TOKENS
        assert debited <= DEPTH + one_lease
    print(json.dumps({"clients": kinds, "records": by_outcome, "engine_failures": engine_failures,
                      "store_failed": len(failed_settlements)}))  # fmt: skip
