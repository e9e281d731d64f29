"""The journal beside the records (quotacalc.enforce.journal): a proxy killed with SIGKILL leaves its requests' records
to the next proxy started there. Each kill here is a real SIGKILL of a real process running the plugin (a child
process driving its hooks, or a real LiteLLM proxy), over a real redis-server; the next enforcer is made in this
process (its start-up settles and records what the journal left) or is a real proxy started again."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import shutil
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

redis = pytest.importorskip("redis", reason="the redis client is not installed (extra litellm)")
pytest.importorskip("litellm", reason="the litellm extra is not installed")
if shutil.which("redis-server") is None:
    pytest.skip("redis-server is not installed (apt-get install redis-server)", allow_module_level=True)

from enforce_stack import (  # noqa: E402
    ROOT,
    Emulator,
    Proxy,
    RedisServer,
    edit_policy,
    edit_settings,
    generate,
    in_process_enforcer,
    litellm_executable,
    records,
    wait_until,
)

from quotacalc.core.policy import QuotaPolicy  # noqa: E402

DEPTH = 100_000.0
LEASE_TOKENS = 4

#: A child process that runs the plugin as a proxy would (its hooks, on an event loop, over the same Redis and folder)
#: and SIGKILLs itself at the moment its mode names. argv: folder, Redis URL ('' for state memory), mode.
CHILD = r"""
import asyncio, os, signal, sys
from pathlib import Path

sys.path.insert(0, sys.argv[4])
from enforce_stack import in_process_enforcer
from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices

folder, url, mode = Path(sys.argv[1]), sys.argv[2] or None, sys.argv[3]
enforcer = in_process_enforcer(folder, url)
# Progress lines by tokens and lease renewals only: a loaded machine's pause between two chunks would add one.
enforcer.journal_every_s = 3600.0


def killed(*args, **kwargs):
    os.kill(os.getpid(), signal.SIGKILL)


def body(call_id, stream=True):
    return {"model": "std", "messages": [{"role": "user", "content": "tell me " + call_id}], "max_tokens": 40,
            "stream": stream, "litellm_call_id": call_id,
            "proxy_server_request": {"headers": {"x-tenant-id": "alpha"}}}


async def engine(tokens):
    for _ in range(tokens):
        yield ModelResponseStream(choices=[StreamingChoices(index=0, delta=Delta(content="x"))])
    await asyncio.Event().wait()  # the engine goes on generating: the stream is cut off, never ended


async def stream(call_id, tokens, then=None):
    data = await enforcer.async_pre_call_hook(None, None, body(call_id), "acompletion")
    hook = enforcer.async_post_call_streaming_iterator_hook(None, engine(tokens), data)
    for _ in range(tokens):
        await hook.__anext__()
    return hook


async def main():
    if mode == "landed":  # the settlement lands in Redis; the proxy dies before the record is written
        enforcer.write_record = killed
        hook = await stream("landed", 6)
        await hook.aclose()  # the client leaves: settled as a disconnect
    elif mode == "recorded":  # the record is written; the proxy dies before its done line
        enforcer.journal.finish = killed
        hook = await stream("recorded", 6)
        await hook.aclose()
    elif mode == "cut":  # requests in flight: two streams mid-way, a response not streamed at the engine
        hooks = [await stream("cut-10", 10), await stream("cut-3", 3)]
        await enforcer.async_pre_call_hook(None, None, body("cut-whole", stream=False), "acompletion")
        print("in flight", flush=True)
        killed()
    elif mode == "rotated":  # a journal rewritten while it serves: a stream in flight across rotations, then killed
        enforcer.journal.rotate_bytes = 2000
        long = await stream("across", 1)
        for index in range(8):
            hook = await stream(f"done-{index}", 2)
            await hook.aclose()
        assert long is not None  # still streaming when killed
        killed()


asyncio.run(main())
"""


@pytest.fixture(scope="module")
def server():
    started = RedisServer()
    try:
        yield started
    finally:
        started.stop()


def _folder(tmp_path: Path, state: str = "redis") -> Path:
    folder = generate(tmp_path)
    edit_policy(folder, alpha={"bucket_depth_units": DEPTH, "bucket_rate_units_per_s": 1e-9})
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4", state=state, lease_tokens=LEASE_TOKENS)
    return folder


def _killed_child(folder: Path, url: str, mode: str) -> None:
    script = folder / "child.py"
    script.write_text(CHILD, encoding="utf-8")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "LITELLM_LOCAL_MODEL_COST_MAP": "True", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run(
        [sys.executable, str(script), str(folder), url, mode, str(ROOT / "tests")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == -signal.SIGKILL, done.stderr[-3000:]


def _alpha(folder: Path):
    policy = QuotaPolicy.model_validate_json((folder / "policy.json").read_text(encoding="utf-8"))
    return next(t for t in policy.tenants if t.name == "alpha")


def _store_figures(client, lease_key: str) -> tuple[float, ...]:
    held, released, charged, forgiven, billed, _streamed = (
        float(x) for x in client.hget("quotacalc:{alpha}:settled", lease_key).split()
    )
    return held, released, charged, forgiven, billed


def _journal_lines(folder: Path) -> list[dict]:
    lines = []
    for path in sorted(folder.glob("usage.jsonl.journal*")):
        lines += [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line]
    return lines


def test_a_settlement_that_landed_before_its_record_is_recorded_at_the_next_start_once(server, tmp_path):
    """Killed between the settlement landing in Redis and its record: the next start sends the journaled settlement
    again, the store returns what landed (applying nothing twice), and the record is written with those figures,
    once, even across a further start."""
    folder = _folder(tmp_path)
    client = redis.Redis.from_url(server.url)
    client.flushdb()
    _killed_child(folder, server.url, "landed")
    assert records(folder) == []
    landed = [line for line in _journal_lines(folder) if line["event"] == "settling"]
    assert len(landed) == 1 and landed[0]["outcome"] == "disconnect"
    lease_key = landed[0]["lease_key"]
    held, released, charged, _forgiven, billed = _store_figures(client, lease_key)
    level_after_kill = float(client.hget("quotacalc:{alpha}:bucket", "level"))
    assert level_after_kill == pytest.approx(DEPTH - billed, abs=1e-6)

    in_process_enforcer(folder, server.url).shutdown()
    written = records(folder)
    assert [r["request_id"] for r in written] == ["landed"], written
    record = written[0]
    assert record["outcome"] == "disconnect" and record["output_tokens"] == 6
    assert (record["units_debited"], record["units_released"], record["units_charged"]) == pytest.approx(
        (billed, released, charged)
    )
    assert record["units_taken"] == pytest.approx(held)
    alpha = _alpha(folder)
    assert billed == pytest.approx(
        alpha.weights.request_units(record["prompt_tokens"], 0, 0) + alpha.weights.output * 6
    )
    # Nothing applied twice: the bucket is where the kill left it, and no lease is held.
    assert float(client.hget("quotacalc:{alpha}:bucket", "level")) == pytest.approx(level_after_kill, abs=1e-6)
    assert client.hlen("quotacalc:{alpha}:leases") == 0
    # A further start finds nothing more to write.
    in_process_enforcer(folder, server.url).shutdown()
    assert len(records(folder)) == 1


def test_a_record_written_before_its_done_line_is_not_written_again(server, tmp_path, run_cli):
    """Killed between the record and the journal's done line: the next start finds the record in the records file and
    writes no second one (quotacalc fleet would reject it as a duplicate request id)."""
    folder = _folder(tmp_path)
    redis.Redis.from_url(server.url).flushdb()
    _killed_child(folder, server.url, "recorded")
    assert [r["request_id"] for r in records(folder)] == ["recorded"]
    in_process_enforcer(folder, server.url).shutdown()
    assert [r["request_id"] for r in records(folder)] == ["recorded"]
    assert _fleet_rows(run_cli, folder) == (1, {})


def _fleet_rows(run_cli, folder: Path) -> tuple[int, dict]:
    """What quotacalc fleet makes of the records: the rows it used, and those it rejected by reason."""
    pytest.importorskip("duckdb", reason="the fleet extra is not installed")
    code, out, err = run_cli("fleet", folder / "usage.jsonl", "--plan", folder.parent.parent / "plan.yaml", "--json")
    assert code == 0, err
    document = json.loads(out)
    return document["rows_used"], {k: v for k, v in document["rows_rejected"].items() if v}


def test_requests_cut_off_by_a_kill_are_settled_at_the_next_start_and_every_unit_is_accounted_for(
    server, tmp_path, run_cli
):
    """Two streams mid-way and a response not streamed, at the engine when the proxy is killed: the next start settles
    each (gateway_lost), billed what the journal proves its client received: its prompt and W x the output tokens of
    its last progress line (a lease renewal, or a lease's worth of tokens); the response not streamed, nothing (it had
    not reached its client). Their holds come back now, not at the lease's expiry: the bucket ends at depth less what
    the records bill, and no lease is left."""
    folder = _folder(tmp_path)
    client = redis.Redis.from_url(server.url)
    client.flushdb()
    _killed_child(folder, server.url, "cut")
    assert records(folder) == []
    assert client.hlen("quotacalc:{alpha}:leases") == 3  # held until they expire, by a proxy that is gone
    in_process_enforcer(folder, server.url).shutdown()
    written = {r["request_id"]: r for r in records(folder)}
    assert sorted(written) == ["cut-10", "cut-3", "cut-whole"]
    assert all(r["outcome"] == "gateway_lost" for r in written.values())
    alpha = _alpha(folder)
    # Leases of 4 tokens: the journal's lines came at the first token and at each renewal (tokens 5 and 9), so of 10
    # tokens streamed 9 are proven, of 3 tokens 1.
    for request_id, proven in (("cut-10", 9), ("cut-3", 1)):
        record = written[request_id]
        assert record["output_tokens"] == proven, record
        prompt = alpha.weights.request_units(record["prompt_tokens"], 0, 0)
        assert record["units_debited"] == pytest.approx(prompt + alpha.weights.output * proven)
        assert record["first_token"] is not None and record["dispatched"] is not None
    whole = written["cut-whole"]
    assert whole["output_tokens"] == 0 and whole["units_debited"] == 0 and whole["units_taken"] > 0
    for record in written.values():
        assert record["units_released"] == pytest.approx(record["units_taken"] - record["units_debited"])
    debited = sum(r["units_debited"] for r in written.values())
    assert client.hlen("quotacalc:{alpha}:leases") == 0
    level = float(client.hget("quotacalc:{alpha}:bucket", "level"))
    assert level == pytest.approx(DEPTH - debited, abs=1e-6)
    in_process_enforcer(folder, server.url).shutdown()
    assert len(records(folder)) == 3
    # quotacalc fleet takes each as a request of its own, none rejected (the one not streamed served nothing proven).
    rows, rejected = _fleet_rows(run_cli, folder)
    assert rejected == {} and rows >= 2, (rows, rejected)


def test_a_journal_rewritten_while_serving_keeps_the_request_in_flight_and_drops_those_recorded(server, tmp_path):
    """Past its size the journal is rewritten with its open requests only: the lines of the eight recorded requests
    are gone from it, and the stream in flight across the rewrites is still settled and recorded at the next start."""
    folder = _folder(tmp_path)
    redis.Redis.from_url(server.url).flushdb()
    _killed_child(folder, server.url, "rotated")
    assert sorted(r["request_id"] for r in records(folder)) == [f"done-{index}" for index in range(8)]
    keys = {line["lease_key"].split("/")[0] for line in _journal_lines(folder)}
    assert "across" in keys and len(keys) < 9, keys  # rewritten: some finished requests' lines dropped
    in_process_enforcer(folder, server.url).shutdown()
    written = {r["request_id"]: r for r in records(folder)}
    assert len(written) == len(records(folder)) == 9
    assert written["across"]["outcome"] == "gateway_lost" and written["across"]["output_tokens"] == 1


def test_in_memory_a_killed_proxys_requests_in_flight_are_recorded_at_the_next_start(tmp_path):
    """state memory: the buckets die with the proxy, but the records of its requests in flight do not."""
    folder = _folder(tmp_path, state="memory")
    _killed_child(folder, "", "cut")
    in_process_enforcer(folder).shutdown()
    written = {r["request_id"]: r for r in records(folder)}
    assert sorted(written) == ["cut-10", "cut-3", "cut-whole"]
    assert (written["cut-10"]["output_tokens"], written["cut-3"]["output_tokens"]) == (9, 1)
    assert all(r["outcome"] == "gateway_lost" for r in written.values())


def test_a_corrupt_or_cut_off_journal_line_is_skipped_with_a_warning(server, tmp_path, caplog):
    """A line the kill cut off mid-write, and a corrupt one: each skipped with a warning naming the file and line; the
    other requests are still settled and recorded, and the start does not fail."""
    folder = _folder(tmp_path)
    redis.Redis.from_url(server.url).flushdb()
    _killed_child(folder, server.url, "cut")
    journal = next(folder.glob("usage.jsonl.journal*"))
    lines = journal.read_text(encoding="utf-8").splitlines()
    lines.insert(1, "\x00\x00 not json")
    journal.write_text("\n".join(lines) + '\n{"event":"progress","lease_key":"cut-10/', encoding="utf-8")
    with caplog.at_level(logging.WARNING, logger="quotacalc.enforce"):
        in_process_enforcer(folder, server.url).shutdown()
    warnings = [r.getMessage() for r in caplog.records if "is not a journal line" in r.getMessage()]
    assert len(warnings) == 2 and all(journal.name in w for w in warnings), warnings
    assert sorted(r["request_id"] for r in records(folder)) == ["cut-10", "cut-3", "cut-whole"]


def test_a_journal_whose_request_lacks_its_admission_is_skipped_with_a_warning(server, tmp_path, caplog):
    """A request the journal knows only by a progress line (its admission line lost): not settled from a guess, but
    skipped with a warning naming it (its lease expires in the store); the start goes on."""
    folder = _folder(tmp_path)
    (folder / "usage.jsonl.journal").write_text(
        '{"event":"progress","at":1.0,"lease_key":"orphan/1","output_tokens":5}\n', encoding="utf-8"
    )
    with caplog.at_level(logging.WARNING, logger="quotacalc.enforce"):
        in_process_enforcer(folder, server.url).shutdown()
    assert any("orphan/1" in r.getMessage() and "skipped" in r.getMessage() for r in caplog.records)
    assert records(folder) == []


def test_a_live_proxys_journal_is_never_replayed_by_another(server, tmp_path):
    """Two enforcers sharing one records file (two workers, or two proxies in one folder): each holds its own journal,
    locked, and the second start adopts nothing of the first's requests in flight."""
    import asyncio

    folder = _folder(tmp_path)
    redis.Redis.from_url(server.url).flushdb()
    first = in_process_enforcer(folder, server.url)
    body = {"model": "std", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 8, "stream": True,
            "proxy_server_request": {"headers": {"x-tenant-id": "alpha"}}}  # fmt: skip

    async def admit():
        return await first.async_pre_call_hook(None, None, dict(body), "acompletion")

    data = asyncio.run(admit())
    second = in_process_enforcer(folder, server.url)
    assert first.journal.path != second.journal.path
    assert not second._adopted and records(folder) == []
    second.shutdown()
    assert first._ticket(data) is not None  # still in flight in the first
    first.shutdown()
    assert [r["outcome"] for r in records(folder)] == ["shutdown"]


def test_a_settlement_journaled_longer_ago_than_the_store_keeps_settlements_is_not_sent_again(server, tmp_path):
    """A journal left for more than a day (the store keeps a settlement's figures that long): its settlement may have
    landed and been forgotten, and sent again it would be applied twice. Its record is written as the journal has it,
    marked store_failed, and the store is not asked."""
    folder = _folder(tmp_path)
    client = redis.Redis.from_url(server.url)
    client.flushdb()
    then = time.time() - 2 * 86_400
    admitted = {"event": "admitted", "at": then, "lease_key": "old/1", "request_id": "old", "tenant": "alpha",
                "pool": "std", "model": "m", "start": then, "prompt_tokens": 10, "max_tokens": 100,
                "units_reserved": 500.0, "prompt_units": 10.0, "output_weight": 2.0}  # fmt: skip
    settling = {"event": "settling", "at": then + 1, "lease_key": "old/1", "end": then + 1, "output_tokens": 5,
                "outcome": "completed", "billed": 20.0, "streamed": 0.0, "records_at": 0}  # fmt: skip
    (folder / "usage.jsonl.journal").write_text(
        "".join(json.dumps(line) + "\n" for line in (admitted, settling)), encoding="utf-8"
    )
    in_process_enforcer(folder, server.url).shutdown()
    [record] = records(folder)
    assert record["request_id"] == "old" and record["store_failed"] is True and record["units_debited"] == 20.0
    assert not client.exists("quotacalc:{alpha}:settled")


# -- a real proxy killed ---------------------------------------------------------------------------------------------


@pytest.mark.litellm_proxy
def test_a_proxy_killed_mid_stream_leaves_every_request_one_record_and_every_unit_accounted_for(tmp_path):
    """A real proxy on Redis with three slow streams and a response not streamed in flight is SIGKILLed; a new proxy
    started on the same folder writes each request's record, once (gateway_lost, billed what its journal proves its
    client received: never more than the client got), and the bucket ends at depth less what the records bill, with no
    lease left."""
    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    import httpx

    folder = generate(tmp_path)
    edit_policy(folder, alpha={"bucket_depth_units": DEPTH, "bucket_rate_units_per_s": 1e-9})
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4", state="redis", lease_tokens=8)
    redis_server = RedisServer()
    # Slow: a token every few tens of milliseconds, so the streams are mid-way when the proxy is killed.
    emulator = Emulator(tmp_path / "plan.yaml", "--speed", "0.5")
    env = {"QUOTACALC_REDIS_URL": redis_server.url}
    proxy = restarted = None
    received: dict[str, int] = {}
    try:
        proxy = Proxy(folder, emulator.url, env=env)
        body = {"model": "std", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 400, "ignore_eos": True}

        def stream(call_id: str) -> None:
            received[call_id] = 0
            headers = {**proxy.headers("alpha"), "x-litellm-call-id": call_id}
            try:
                with httpx.stream("POST", proxy.url + "/v1/chat/completions", json={**body, "stream": True},
                                  headers=headers, timeout=60) as response:  # fmt: skip
                    for line in response.iter_lines():
                        if line.startswith("data: {"):
                            event = json.loads(line.removeprefix("data: "))
                            if any((c.get("delta") or {}).get("content") for c in event.get("choices") or []):
                                received[call_id] += 1
            except httpx.HTTPError:
                pass  # cut by the kill

        def whole(call_id: str) -> None:
            headers = {**proxy.headers("alpha"), "x-litellm-call-id": call_id}
            with contextlib.suppress(httpx.HTTPError):  # cut by the kill
                httpx.post(proxy.url + "/v1/chat/completions", json=body, headers=headers, timeout=60)

        clients = [threading.Thread(target=stream, args=(f"stream-{i}",)) for i in range(3)]
        clients.append(threading.Thread(target=whole, args=("whole",)))
        for client in clients:
            client.start()
        assert wait_until(lambda: len(received) == 3 and min(received.values()) >= 20, timeout_s=60), received
        proxy.stop(signal.SIGKILL)
        for client in clients:
            client.join(timeout=30)
        assert records(folder) == [], records(folder)
        store = redis.Redis.from_url(redis_server.url)
        assert store.hlen("quotacalc:{alpha}:leases") == 4  # the dead proxy's holds, until they expire

        restarted = Proxy(folder, emulator.url, env=env)
        assert wait_until(lambda: len(records(folder)) >= 4, timeout_s=30), restarted.tail()
        after = restarted.chat("alpha", {**body, "max_tokens": 5})
        assert after.status_code == 200, after.text
        assert wait_until(lambda: len(records(folder)) >= 5, timeout_s=30), restarted.tail()
    finally:
        for started in (proxy, restarted):
            if started is not None:
                started.stop()
        emulator.stop()
    try:
        _check_after_kill(folder, redis_server.url, received)
    finally:
        redis_server.stop()


def _check_after_kill(folder: Path, redis_url: str, received: dict[str, int]) -> None:
    """Each request killed in flight has one record, billed at most what its client received, and the bucket is short
    by exactly what the records bill, each record carrying the figures its settlement applied."""
    written = records(folder)
    by_id: dict[str, list[dict]] = {}
    for record in written:
        by_id.setdefault(record["request_id"], []).append(record)
    assert {key: len(value) for key, value in by_id.items() if key in received or key == "whole"} == {
        "stream-0": 1, "stream-1": 1, "stream-2": 1, "whole": 1,
    }, written  # fmt: skip
    alpha = _alpha(folder)
    for call_id, count in received.items():
        record = by_id[call_id][0]
        assert record["outcome"] == "gateway_lost", record
        # Proven: its last progress line's tokens, at most one lease (8) or a second's tokens before the kill.
        assert 0 < record["output_tokens"] <= count, (record, count)
        prompt = alpha.weights.request_units(record["prompt_tokens"], 0, 0)
        assert record["units_debited"] == pytest.approx(prompt + alpha.weights.output * record["output_tokens"])
    assert by_id["whole"][0]["outcome"] == "gateway_lost" and by_id["whole"][0]["units_debited"] == 0
    store = redis.Redis.from_url(redis_url)
    assert store.hlen("quotacalc:{alpha}:leases") == 0
    debited = sum(r["units_debited"] - r["units_forgiven"] for r in written)
    level = float(store.hget("quotacalc:{alpha}:bucket", "level"))
    assert level == pytest.approx(DEPTH - debited, abs=1e-6)
    lease_keys = [k.decode() for k in store.hkeys("quotacalc:{alpha}:settled")]
    for record in written:  # each record carries the figures its settlement applied in the store
        keys = [k for k in lease_keys if k.startswith(record["request_id"] + "/")]
        assert len(keys) == 1, (record, lease_keys)
        _held, released, charged, _forgiven, billed = _store_figures(store, keys[0])
        assert (billed, released, charged) == pytest.approx(
            (record["units_debited"], record["units_released"], record["units_charged"])
        )
