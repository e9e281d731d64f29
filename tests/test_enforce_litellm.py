"""quotacalc's LiteLLM plugin in a real LiteLLM proxy, loaded from the config ``quotacalc generate --target litellm``
writes, in front of ``quotacalc emulate`` (speed 20) on 127.0.0.1 (marker ``litellm_proxy``; .ci/run runs them).

The tenant comes from the policy's tenant header here (``tenant_from: header``); tests/test_enforce_paths.py takes
it from keys a real proxy authenticates (LiteLLM's custom_auth hook, as its Postgres-backed keys cannot run here:
docs/enforce.md). Prompts are counted by the emulator's rule (``prompt_tokens: bytes4``), so admission and the
engine agree on a prompt's length.
"""

from __future__ import annotations

import contextlib
import json
import math
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import datetime

import pytest
from enforce_stack import (
    SPEED,
    Emulator,
    Proxy,
    edit_policy,
    edit_settings,
    generate,
    litellm_executable,
    records,
    stream_chat,
    wait_until,
)

pytestmark = pytest.mark.litellm_proxy

#: Bucket and caps of the tenants the tests exhaust (the plan's others keep rates no test reaches).
TIGHT = {"bucket_rate_units_per_s": 1.0, "bucket_depth_units": 500.0}
STREAM = {"bucket_rate_units_per_s": 1.0, "bucket_depth_units": 2000.0}
KV = {"kv_cap_tokens_per_replica": 1500}


def _body(content: str = "hello", **extra) -> dict:
    return {"model": "std", "messages": [{"role": "user", "content": content}], **extra}


@contextlib.contextmanager
def _serving(directory, speed: float = SPEED, **tenants):
    """The generated config with the test tenants (``tenants``: policy edits) in a real proxy, before the emulator."""
    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    folder = generate(directory, _plan_with_test_tenants())
    edit_policy(folder, **tenants)
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4")
    emulator = Emulator(directory / "plan.yaml", "--scheduling-policy", "priority", speed=speed)
    try:
        proxy = Proxy(folder, emulator.url)
    except BaseException:
        emulator.stop()
        raise
    try:
        yield proxy, emulator, folder
    finally:
        proxy.stop()
        emulator.stop()


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    with _serving(tmp_path_factory.mktemp("enforce"), tight=TIGHT, streamer=STREAM, kv=KV) as served:
        yield served


def _plan_with_test_tenants() -> str:
    from enforce_stack import PLAN

    return PLAN + (
        "  - {name: tight, tier: bronze, pool: std, units_per_s: 2000}\n"
        "  - {name: streamer, tier: gold, pool: std, units_per_s: 2000}\n"
        "  - {name: kv, tier: gold, pool: std, units_per_s: 2000}\n"
    )


def test_the_tenant_is_the_authenticated_keys_team_or_metadata(tmp_path):
    """tenant_from: key reads LiteLLM's own UserAPIKeyAuth: the key's metadata.tenant, else its team's alias or id;
    a key of no tenant names none (the proxy then answers 401)."""
    import os

    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    from litellm.proxy._types import UserAPIKeyAuth

    from quotacalc.enforce.litellm import QuotacalcEnforcer

    folder = generate(tmp_path)
    edit_settings(folder, records=None)
    enforcer = QuotacalcEnforcer(folder / "enforce.json")
    assert enforcer.tenant_name(UserAPIKeyAuth(team_id="alpha"), {}) == "alpha"
    assert enforcer.tenant_name(UserAPIKeyAuth(team_id="t-1", team_alias="beta"), {}) == "beta"
    assert enforcer.tenant_name(UserAPIKeyAuth(team_id="alpha", metadata={"tenant": "gamma"}), {}) == "gamma"
    assert enforcer.tenant_name(UserAPIKeyAuth(), {}) is None
    # A key whose team the policy lacks names that team (a 403 saying so), never another tenant.
    assert enforcer.tenant_name(UserAPIKeyAuth(team_id="marketing"), {}) == "marketing"
    assert enforcer.tenant_name(UserAPIKeyAuth(team_id="t-9", team_metadata={"tenant": "beta"}), {}) == "beta"
    # A header names no tenant unless the settings say a trusted layer sets it.
    spoofed = {"proxy_server_request": {"headers": {"x-tenant-id": "alpha"}}}
    assert enforcer.tenant_name(UserAPIKeyAuth(), spoofed) is None


def test_unknown_tenants_are_refused_never_defaulted(stack):
    proxy, emulator, _ = stack
    before = len(emulator.received())
    missing = proxy.chat(None, _body())
    unknown = proxy.chat("nobody", _body())
    assert missing.status_code == 401 and "quotacalc: the request's tenant (none)" in missing.text
    assert unknown.status_code == 403 and "('nobody') is not in the policy" in unknown.text
    assert "retry-after" not in unknown.headers
    assert len(emulator.received()) == before


def test_the_engine_gets_the_tiers_priority_and_the_tenants_salt_not_the_clients(stack):
    proxy, emulator, folder = stack
    import json

    policy = json.loads((folder / "policy.json").read_text())
    salts = json.loads((folder / "salts.json").read_text())
    tenants = {t["name"]: t for t in policy["tenants"]}
    for name in ("alpha", "beta", "gamma"):
        response = proxy.chat(name, _body(priority=-100, cache_salt="mine", max_tokens=10**6))
        assert response.status_code == 200, response.text
        seen = emulator.received()[-1]
        tenant = tenants[name]
        assert seen["priority"] == tenant["priority"]  # vLLM runs lower first: gold 0, bronze 2
        expected_salt = salts[tenant["salt_ref"]] if tenant["salt_ref"] else None
        assert seen["cache_salt"] == expected_salt  # gamma shares the cache: no salt, and not the client's
        assert seen["max_tokens"] <= tenant["max_output_tokens"]
    assert tenants["alpha"]["priority"] < tenants["beta"]["priority"]


def test_each_admission_outcome_has_its_status_and_retry_after(stack):
    proxy, emulator, folder = stack
    before = len(emulator.received())
    # Too long: over bronze's 2,048-token context (4 bytes a token).
    too_long = proxy.chat("tight", _body("abcd" * 2100, max_tokens=5))
    assert too_long.status_code == 400 and "retry-after" not in too_long.headers, too_long.text
    assert too_long.headers["x-quotacalc-reason"] == "too_long"
    # Never fits: one lease of 128 tokens at W is above the 500-unit bucket; waiting would not help.
    never = proxy.chat("tight", _body(max_tokens=200))
    assert never.status_code == 413 and "retry-after" not in never.headers, never.text
    assert "waiting will not help" in never.text
    assert len(emulator.received()) == before
    # Admitted (ignore_eos: it produces all 60 tokens, so it is billed what it held), then the bucket is short.
    first = proxy.chat("tight", _body(max_tokens=60, ignore_eos=True))
    assert first.status_code == 200, first.text
    started = time.monotonic()
    refused = proxy.chat("tight", _body(max_tokens=60, ignore_eos=True))
    elapsed = time.monotonic() - started
    assert refused.status_code == 429, refused.text
    (held,) = [r["units_debited"] for r in records(folder) if r["tenant"] == "tight" and r["outcome"] == "completed"]
    # The level is 500 - held plus the refill since (1 unit/s): Retry-After = ceil((held - level) / 1).
    deficit = held - (500 - held)
    retry_after = int(refused.headers["retry-after"])
    assert math.ceil(deficit - elapsed - 2) <= retry_after <= math.ceil(deficit), (retry_after, deficit)
    assert f"retry after {retry_after} s" in refused.text
    assert refused.headers["x-quotacalc-reason"] == "bucket"


def test_a_stream_stops_at_the_quota_with_no_overshoot_and_the_engine_request_ends(stack):
    proxy, emulator, folder = stack
    generated_before = emulator.metric("vllm:generation_tokens_total")
    status, events = stream_chat(proxy, "streamer", _body(max_tokens=1000, ignore_eos=True))
    assert status == 200
    tokens = sum(1 for e in events for c in e.get("choices", []) if (c.get("delta") or {}).get("content"))
    last = [e for e in events if e.get("choices")][-1]
    assert last["choices"][0]["finish_reason"] == "length"
    # The last event says the quota stopped it (LiteLLM passes provider_specific_fields through to the client).
    assert last["provider_specific_fields"] == {"quotacalc_stop": "quota"}
    assert last["choices"][0]["provider_specific_fields"] == {"quotacalc_stop": "quota"}
    (record,) = [r for r in records(folder) if r["tenant"] == "streamer"]
    assert record["outcome"] == "quota_stop" and record["output_tokens"] == tokens
    # 2,000 units of bucket: nothing beyond it was served but the refill over the stream (1 unit/s; a loaded machine
    # streams slower, so the stream's own span bounds it).
    span_s = (datetime.fromisoformat(record["end"]) - datetime.fromisoformat(record["start"])).total_seconds()
    assert record["units_debited"] <= 2000 + STREAM["bucket_rate_units_per_s"] * (span_s + 1), (record, span_s)
    assert tokens < 1000
    # The engine's request ended at the stop: it generated far fewer than the 1,000 tokens asked for.
    assert wait_until(lambda: emulator.metric("vllm:num_requests_running") == 0)
    assert emulator.metric("vllm:generation_tokens_total") - generated_before < 1000


def test_the_kv_cap_holds_a_third_request_until_one_ends(stack):
    proxy, _, folder = stack
    # A 600-token prompt and 1,000 output tokens are above the cap of 1,500 on their own.
    never = proxy.chat("kv", _body("abcd" * 600, max_tokens=1000))
    assert never.status_code == 413 and "resident-KV cap" in never.text
    with ThreadPoolExecutor(3) as pool:
        # Each holds about 10 + 700 tokens of KV estimate: the cap takes two at a time.
        results = list(pool.map(lambda _: stream_chat(proxy, "kv", _body(max_tokens=700, ignore_eos=True)), range(3)))
    assert [status for status, _ in results] == [200, 200, 200]
    spans = sorted((r["first_token"], r["end"]) for r in records(folder) if r["tenant"] == "kv" and r["output_tokens"])
    assert len(spans) == 3
    # At no time three at the engine: the last to start began after the first to end.
    assert spans[2][0] >= min(end for _, end in spans[:2])


def test_usage_records_carry_the_fleet_fields_and_no_prompt_or_salt(stack):
    proxy, _, folder = stack
    response = proxy.chat("alpha", _body("a secret prompt", max_tokens=5))
    assert response.status_code == 200
    text = (folder / "usage.jsonl").read_text()
    assert "a secret prompt" not in text
    import json

    for salt in json.loads((folder / "salts.json").read_text()).values():
        assert salt not in text
    record = records(folder)[-1]
    for key in ("request_id", "tenant", "pool", "model", "start", "dispatched", "first_token", "end", "prompt_tokens",
                "cached_tokens", "output_tokens", "max_tokens", "units_reserved", "units_debited", "units_released",
                "outcome", "retry_after_s"):  # fmt: skip
        assert key in record
    assert record["start"].endswith("+00:00") and record["tenant"] == "alpha"
    # Arrival, dispatch to the engine after the fair queue, first token, end: RFC 3339 text of one zone, in order.
    times = [record[key] for key in ("start", "dispatched", "first_token", "end")]
    assert all(moment.endswith("+00:00") for moment in times) and times == sorted(times), times


def test_metrics_per_tenant(stack):
    proxy, _, _ = stack
    import httpx

    text = httpx.get(proxy.url + "/quotacalc/metrics", timeout=10).text
    assert 'quotacalc_rejects_total{tenant="tight",reason="bucket"}' in text
    assert 'quotacalc_units_debited_total{tenant="alpha"}' in text
    assert 'quotacalc_live_sequences{tenant="alpha"} 0' in text


#: The engine's speed for the disconnect test: a stream of 1,000 tokens takes seconds, as on a real engine. At the
#: module's speed (a token a millisecond) the proxy's event loop is the bottleneck: its stream loop finds the next
#: chunk always ready and never yields to the task that notices the client left, so LiteLLM sees the disconnect only
#: when the stream ends (measured with LiteLLM 1.108.7 and uvicorn 0.55: all 1,000 tokens generated and billed).
DISCONNECT_SPEED = 2.0


@pytest.fixture
def paced_stack(tmp_path):
    """The stack's config before an engine at a real engine's pace (``DISCONNECT_SPEED``)."""
    with _serving(tmp_path, speed=DISCONNECT_SPEED) as served:
        yield served


def test_a_client_that_disconnects_mid_stream_is_billed_what_it_received(paced_stack):
    proxy, emulator, folder = paced_stack
    import httpx

    got = 0
    with httpx.stream(
        "POST", proxy.url + "/v1/chat/completions", headers=proxy.headers("alpha"), timeout=30,
        json=_body(max_tokens=1000, ignore_eos=True, stream=True),
    ) as response:  # fmt: skip
        for line in response.iter_lines():
            got += _streamed_tokens(line)
            if got >= 20:
                break
    done = wait_until(lambda: [r for r in records(folder) if r["tenant"] == "alpha" and r["outcome"] == "disconnect"])
    assert done, proxy.tail()
    record = done[-1]
    assert got <= record["output_tokens"] < 1000
    assert record["units_released"] > 0
    # The plugin's record and the engine's abort are two tasks of the proxy: either may come first.
    assert wait_until(lambda: emulator.metric("vllm:num_requests_running") == 0)


def _streamed_tokens(line: str) -> int:
    """Output tokens in one SSE line: choices whose delta carries text (the first chunk's role delta has an empty
    content, which is no token)."""
    if not line.startswith("data: {"):
        return 0
    chunk = json.loads(line[len("data: ") :])
    return sum(1 for choice in chunk.get("choices") or [] if (choice.get("delta") or {}).get("content"))


# -- fairness --------------------------------------------------------------------------------------------------------


def _fair_plan(weights: tuple[int, int]) -> str:
    from enforce_stack import PLAN

    head = PLAN.split("tenants:")[0]
    return head + (
        "tenants:\n"
        f"  - {{name: short, tier: gold, pool: std, units_per_s: {1000 * weights[0]}}}\n"
        f"  - {{name: long, tier: gold, pool: std, units_per_s: {1000 * weights[1]}}}\n"
    )


@pytest.mark.parametrize(("weights", "share"), [((1, 1), 0.5), ((2, 1), 2 / 3)])
def test_backlogged_tenants_are_served_in_proportion_to_their_contracts(tmp_path, weights, share):
    """Two tenants keep 8 streams each waiting; one asks 30 output tokens, the other 240. With one sequence in
    flight at the engine, the served units split by the contracts (50% ± 5%, 67% ± 5%)."""
    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    folder = generate(tmp_path, _fair_plan(weights))
    # Buckets deep enough never to bind: only the scheduler decides who goes.
    edit_policy(folder, short={"bucket_depth_units": 1e9}, long={"bucket_depth_units": 1e9})
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4", inflight_per_replica=1, queue_wait_max_s=120)
    emulator = Emulator(tmp_path / "plan.yaml", "--speed", "5")
    try:
        proxy = Proxy(folder, emulator.url)
        try:
            stop_at = time.monotonic() + 25.0

            def client(tenant: str, tokens: int) -> None:
                while time.monotonic() < stop_at:
                    stream_chat(proxy, tenant, _body(max_tokens=tokens, ignore_eos=True), timeout=120)

            with ThreadPoolExecutor(16) as pool:
                for _ in range(8):
                    pool.submit(client, "short", 30)
                    pool.submit(client, "long", 240)
            served = {"short": 0.0, "long": 0.0}
            ended = sorted(records(folder), key=lambda r: r["end"])
            # The window in which both stayed backlogged: until the first tenant's last request was dispatched.
            last_end = {t: max(r["end"] for r in ended if r["tenant"] == t) for t in served}
            window_end = min(last_end.values())
            for record in ended:
                if record["end"] <= window_end:
                    served[record["tenant"]] += record["units_debited"]
            assert sum(served.values()) > 0
            assert served["short"] / sum(served.values()) == pytest.approx(share, abs=0.05), served
        finally:
            proxy.stop()
    finally:
        emulator.stop()
