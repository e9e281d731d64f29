"""``quotacalc fleet`` on the usage records quotacalc's plugin writes in a real LiteLLM proxy (marker
``litellm_proxy``): the generated config and plugin in front of ``quotacalc emulate``, a mix of requests (completed,
streamed, a prefix-cache hit, refused with 400, 401, 403, 413 and 429 before the queue, 429 after waiting in it, a
client that disconnects mid-stream), then ``quotacalc fleet RECORDS --format quotacalc --plan PLAN`` on the
plugin's own JSONL.

What must agree: every record of a request that reached an engine is read and none is rejected; each tenant's
units in fleet's report are the sum of its records' ``units_debited`` and the plugin's own
``quotacalc_units_debited_total``; the period runs from the first record's dispatch to the engine to the last one's
end (the records' UTC times). Requests the plugin billed nothing (refused, or timed out in the queue) are no load.

The emulator runs at the priced speed (``--speed 1``) and the pool takes one request at a time
(``inflight_per_replica: 1``), so a request of 1,000 output tokens (seconds of decode) holds it long past the time
another waits in the queue before its 429 (``queue_wait_max_s``: 1 s).
"""

from __future__ import annotations

import datetime as dt
import json
import os
import subprocess
import sys
import threading
import time
from collections import Counter, defaultdict

import httpx
import pytest
from enforce_stack import ROOT, Emulator, Proxy, edit_policy, edit_settings, generate, litellm_executable, records

pytestmark = pytest.mark.litellm_proxy
pytest.importorskip("duckdb")
pytest.importorskip("sqlglot")

#: The tenant the tests exhaust: a 500-unit bucket refilled at 1 unit/s.
TIGHT = {"bucket_rate_units_per_s": 1.0, "bucket_depth_units": 500.0}
QUEUE_WAIT_S = 1.0
#: Outcomes of requests that reached an engine (each is billed what it received).
SERVED = ("completed", "quota_stop", "disconnect")


def _body(content: str = "hello", **extra) -> dict:
    return {"model": "std", "messages": [{"role": "user", "content": content}], **extra}


@pytest.fixture(scope="module")
def served(tmp_path_factory):
    """The stack after the mix of requests: (folder, plan path, the records, the plugin's metrics text)."""
    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    from enforce_stack import PLAN

    directory = tmp_path_factory.mktemp("fleet-proxy")
    folder = generate(directory, PLAN + "  - {name: tight, tier: bronze, pool: std, units_per_s: 2000}\n")
    edit_policy(folder, tight=TIGHT)
    edit_settings(
        folder, tenant_from="header", prompt_tokens="bytes4", inflight_per_replica=1, queue_wait_max_s=QUEUE_WAIT_S
    )
    emulator = Emulator(directory / "plan.yaml", "--speed", "1")
    try:
        proxy = Proxy(folder, emulator.url)
    except BaseException:
        emulator.stop()
        raise
    try:
        sent = _send_the_mix(proxy)
        deadline = time.monotonic() + 30
        while len(records(folder)) < sent and time.monotonic() < deadline:
            time.sleep(0.2)
        logged = records(folder)
        assert len(logged) == sent, (sent, logged, proxy.tail())
        metrics = httpx.get(proxy.url + "/quotacalc/metrics", timeout=10).text
    finally:
        proxy.stop()
        emulator.stop()
    return folder, directory / "plan.yaml", logged, metrics


def _send_the_mix(proxy: Proxy) -> int:
    """Send each kind of request once or twice; returns how many were sent (one record each)."""
    statuses = []
    statuses.append(proxy.chat("alpha", _body(max_tokens=8)).status_code)
    statuses.append(_stream(proxy, "beta", _body(max_tokens=12, ignore_eos=True)))
    # The same long prompt twice on the tenant that shares the prefix cache: the second hits it.
    shared_prompt = "the same document, " * 100
    statuses.append(proxy.chat("gamma", _body(shared_prompt, max_tokens=4)).status_code)
    statuses.append(proxy.chat("gamma", _body(shared_prompt, max_tokens=4)).status_code)
    statuses.append(proxy.chat("tight", _body("abcd" * 2100, max_tokens=5)).status_code)  # over the context: 400
    statuses.append(proxy.chat("tight", _body(max_tokens=200)).status_code)  # above the bucket itself: 413
    statuses.append(proxy.chat("tight", _body(max_tokens=60, ignore_eos=True)).status_code)
    statuses.append(proxy.chat("tight", _body(max_tokens=60, ignore_eos=True)).status_code)  # the bucket: 429
    statuses.append(proxy.chat(None, _body()).status_code)  # no tenant: 401
    statuses.append(proxy.chat("nobody", _body()).status_code)  # not in the policy: 403
    statuses.append(_disconnect_after(proxy, "alpha", 5))
    # One request holds the pool; another waits in the queue past queue_wait_max_s: 429 after queueing.
    holder: list[int] = []
    thread = threading.Thread(
        target=lambda: holder.append(_stream(proxy, "alpha", _body(max_tokens=1000, ignore_eos=True)))
    )
    thread.start()
    time.sleep(0.3)
    statuses.append(proxy.chat("beta", _body(max_tokens=4)).status_code)
    thread.join(timeout=120)
    statuses.extend(holder)
    assert statuses == [200, 200, 200, 200, 400, 413, 200, 429, 401, 403, 0, 429, 200], statuses
    return len(statuses)


def _stream(proxy: Proxy, tenant: str, body: dict) -> int:
    with httpx.stream(
        "POST", proxy.url + "/v1/chat/completions", json={**body, "stream": True}, headers=proxy.headers(tenant),
        timeout=120,
    ) as response:  # fmt: skip
        for _ in response.iter_lines():
            pass
        return response.status_code


def _disconnect_after(proxy: Proxy, tenant: str, tokens: int) -> int:
    """A streamed request whose client goes away after ``tokens`` tokens; 0 (no status to keep)."""
    got = 0
    with httpx.stream(
        "POST", proxy.url + "/v1/chat/completions", headers=proxy.headers(tenant), timeout=60,
        json=_body(max_tokens=400, ignore_eos=True, stream=True),
    ) as response:  # fmt: skip
        for line in response.iter_lines():
            if line.startswith("data: {"):
                chunk = json.loads(line[len("data: ") :])
                got += sum(1 for c in chunk.get("choices") or [] if (c.get("delta") or {}).get("content"))
            if got >= tokens:
                break
    return 0


def _fleet(*args: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", "fleet", *args, "--json"]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _metric(text: str, name: str, tenant: str) -> float:
    prefix = f'{name}{{tenant="{tenant}"}} '
    (line,) = [line for line in text.splitlines() if line.startswith(prefix)]
    return float(line[len(prefix) :])


def test_the_mix_left_each_kind_of_record(served):
    _, _, logged, _ = served
    outcomes = Counter(r["outcome"] for r in logged)
    assert outcomes["completed"] == 6  # alpha twice, beta, gamma twice, tight
    assert outcomes["disconnect"] == 1 and outcomes["queue_timeout"] == 1
    assert {"too_long", "never_fits_bucket", "bucket", "unknown_tenant"} <= set(outcomes)
    (hit,) = [r for r in logged if r["tenant"] == "gamma" and r["cached_tokens"] > 0]
    assert hit["cached_tokens"] < hit["prompt_tokens"]
    (gone,) = [r for r in logged if r["outcome"] == "disconnect"]
    assert 5 <= gone["output_tokens"] < 400 and gone["units_debited"] > 0
    (queued,) = [r for r in logged if r["outcome"] == "queue_timeout"]
    assert queued["prompt_tokens"] > 0 and queued["units_debited"] == 0 and queued["dispatched"] is None
    # The client got a 429 with a Retry-After: the record says so, as a refusal before the queue does.
    assert queued["status"] == 429 and queued["retry_after_s"] >= 1


def test_fleet_reads_every_served_record_and_rejects_none(served):
    folder, plan, logged, _ = served
    document = _fleet(str(folder / "usage.jsonl"), "--format", "quotacalc", "--plan", str(plan), "--window", "1,10")
    load = [r for r in logged if r["outcome"] in SERVED]
    assert document["rows_read"] == len(load) == document["rows_used"]
    assert document["rows_rejected_total"] == 0
    assert document["rows_rejected"] == dict.fromkeys(document["rows_rejected"], 0)
    requests = Counter(r["tenant"] for r in load)
    assert {t["tenant"]: t["requests"] for t in document["tenants"] if t["requests"]} == dict(requests)

    def epoch(text: str) -> float:
        return dt.datetime.fromisoformat(text).timestamp()

    # Each request's load begins when it was dispatched to the engine (its wait in the fair queue is no load).
    assert all(epoch(r["start"]) <= epoch(r["dispatched"]) for r in load)
    assert epoch(document["period_start"]) == pytest.approx(min(epoch(r["dispatched"]) for r in load), abs=1e-3)
    assert epoch(document["period_end"]) == pytest.approx(max(epoch(r["end"]) for r in load), abs=1e-3)


def test_each_tenants_units_are_what_the_plugin_debited(served):
    folder, plan, logged, metrics = served
    document = _fleet(str(folder / "usage.jsonl"), "--format", "quotacalc", "--plan", str(plan), "--window", "1")
    debited: dict[str, float] = defaultdict(float)
    for record in logged:
        if record["tenant"]:
            debited[record["tenant"]] += record["units_debited"]
    measured = {t["tenant"]: t["units"] for t in document["tenants"]}
    for name in ("alpha", "beta", "gamma", "tight"):
        assert debited[name] > 0, name
        assert measured[name] == pytest.approx(debited[name], rel=1e-9), name
        assert _metric(metrics, "quotacalc_units_debited_total", name) == pytest.approx(debited[name], rel=1e-9)
    # Spread over their durations, a tenant's 1 s windows hold all its units: its peak is at least its units over
    # the seconds its requests span, and at most all of them.
    one = next(w for w in document["windows"] if w["window_s"] == 1)
    for figures in one["tenants"]:
        if figures["tenant"] in debited and debited[figures["tenant"]] > 0:
            assert 0 < figures["peak_units_per_s"] <= debited[figures["tenant"]] * (1 + 1e-9)
