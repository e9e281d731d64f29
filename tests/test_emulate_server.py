"""``quotacalc emulate`` over real HTTP on 127.0.0.1: the `openai` client and raw httpx streaming against the
server started as a user starts it (a subprocess of the console script's entry point, on a free port).

Timing runs at --speed 20 and is held to the replica model (``ReplicaModel``, the one price uses) within a
tolerance that covers a shared 2-core machine; speed itself is measured in bench/emulate.py, not here."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack
from pathlib import Path

import pytest

pytest.importorskip("aiohttp")
openai = pytest.importorskip("openai")
httpx = pytest.importorskip("httpx")

ROOT = Path(__file__).resolve().parent.parent
PLAN = str(ROOT / "examples" / "llama-3.3-70b-h100.yaml")
MODEL = "meta-llama/Llama-3.3-70B-Instruct"
SPEED = 20.0
#: One client for the module: httpx's top-level functions build a client (and its TLS context) per call, ~25 ms.
_HTTP = httpx.Client(timeout=30)
#: The deployment of examples/llama-3.3-70b-h100.yaml, with a KV pool, batch or sequence count made small.
SMALL = """\
model: meta-llama/Llama-3.3-70B-Instruct
gpu: h100-sxm
tp: 4
weight_dtype: fp8
kv_dtype: bf16
batch: {batch}
context: 256
max_num_seqs: {seqs}
max_model_len: 640
kv_pool_tokens: {pool}
"""


class Emulator:
    """A running ``quotacalc emulate``; ``url`` once it listens."""

    def __init__(self, *args: str) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", "emulate", *args]
        self.process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
        self.stderr: list[str] = []
        deadline = time.monotonic() + 60
        port = None
        while port is None and time.monotonic() < deadline:
            line = self.process.stderr.readline()
            if not line:
                break
            self.stderr.append(line)
            found = re.search(r"listening on http://127\.0\.0\.1:(\d+)", line)
            port = int(found.group(1)) if found else None
        if port is None:
            self.stop()
            raise AssertionError(f"the emulator did not start: {''.join(self.stderr)}")
        self.port = port
        self.url = f"http://127.0.0.1:{port}"

    def stop(self) -> int:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self.stderr += self.process.stderr.readlines()
        self.process.stderr.close()
        return self.process.returncode

    def metrics(self) -> dict[str, float]:
        """Each metric summed over the replicas (histograms: their _sum and _count)."""
        text = _HTTP.get(self.url + "/metrics", timeout=10).text
        out: dict[str, float] = {}
        for line in text.splitlines():
            if line.startswith("#") or "_bucket" in line:
                continue
            name, value = line.rsplit(" ", 1)
            name = name.split("{", 1)[0]
            out[name] = out.get(name, 0.0) + float(value)
        return out


@pytest.fixture(scope="module")
def server() -> Iterator[Emulator]:
    emulator = Emulator(PLAN, "--port", "0", "--speed", str(SPEED), "--seed", "7")
    yield emulator
    emulator.stop()


@pytest.fixture(scope="module")
def model():
    from quotacalc.cli.emulate import _serving

    serving, _ = _serving(PLAN, None, None, None, None)
    return serving.engine.model


def _client(server: Emulator):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0, timeout=30)


def _stream_times(server: Emulator, body: dict) -> tuple[float, list[float], list[dict]]:
    """Raw SSE over httpx: (time to the first token, the gaps between tokens, the parsed chunks), wall seconds."""
    chunks: list[dict] = []
    times: list[float] = []
    start = time.monotonic()
    with _HTTP.stream("POST", server.url + "/v1/completions", json={**body, "stream": True}, timeout=30) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        for line in response.iter_lines():
            if not line.startswith("data: "):
                continue
            payload = line.removeprefix("data: ")
            if payload == "[DONE]":
                chunks.append({"done": True})
                break
            chunk = json.loads(payload)
            chunks.append(chunk)
            if chunk["choices"] and chunk["choices"][0]["text"]:
                times.append(time.monotonic())
    return times[0] - start, [b - a for a, b in itertools.pairwise(times)], chunks


def test_chat_and_models_as_openai_client_reads_them(server):
    client = _client(server)
    assert [m.id for m in client.models.list().data] == [MODEL]
    reply = client.chat.completions.create(
        model=MODEL, messages=[{"role": "user", "content": "x" * 400}], max_tokens=12, extra_body={"ignore_eos": True}
    )
    assert reply.choices[0].finish_reason == "length"
    assert reply.usage.completion_tokens == 12
    # The chat template adds "<|user|>\n", "\n" and "<|assistant|>\n" (24 bytes) to the 400: 424 bytes, 106 tokens.
    assert reply.usage.prompt_tokens == 106
    assert reply.usage.prompt_tokens_details.cached_tokens == 0


def test_streaming_with_usage_ends_with_a_usage_chunk_and_done(server):
    client = _client(server)
    stream = client.chat.completions.create(
        model=MODEL,
        messages=[{"role": "user", "content": "stream me"}],
        max_completion_tokens=5,
        stream=True,
        stream_options={"include_usage": True},
        extra_body={"min_tokens": 5},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    content = [c for c in chunks if c.choices and c.choices[0].delta.content]
    assert len(content) == 5
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens == 5
    assert content[-1].choices[0].finish_reason == "length"


def test_timing_follows_the_replica_model_at_speed_20(server, model):
    prompt_tokens, output_tokens = 4_000, 300
    prompt = "".join(f"{i:04d}" for i in range(prompt_tokens))  # four bytes a token
    ttft_s, gaps, _ = _stream_times(
        server, {"model": MODEL, "prompt": prompt, "max_tokens": output_tokens, "ignore_eos": True, "cache_salt": "t"}
    )
    assert len(gaps) == output_tokens - 1
    # What price's replica model gives this request alone: ttft_s (request overhead + prefill chunks), then one
    # decode step of a batch of one per token at its context.
    expected_ttft_s = model.ttft_s(prompt_tokens)
    expected_decode_s = sum(model.step_time_s(1, prompt_tokens + k) for k in range(output_tokens - 1))
    # A 2-core machine shared with other work: a loose bound on the first token (a few ms of wall time), a tight
    # one on the run of decode steps (deadlines chain, so late wake-ups do not add up). A single gap is not held
    # to its step here: at speed 20 a step is 0.6 ms, below the event loop's 1 ms timer (bench/emulate.py measures
    # the percentiles at speed 1).
    assert ttft_s * SPEED == pytest.approx(expected_ttft_s, abs=0.05 * SPEED)
    assert sum(gaps) * SPEED == pytest.approx(expected_decode_s, rel=0.15)


def test_same_salt_hits_the_prefix_cache_another_salt_does_not(model):
    # Speed 2, so the prefill a hit skips (16,000 tokens: ReplicaModel.ttft_s gives 0.8 s, 0.4 s of wall time) is
    # far above what a busy machine adds to a request's wall time.
    emulator = Emulator(PLAN, "--port", "0", "--speed", "2")
    prompt = "".join(f"{i % 10_000:04d}" for i in range(16_000))
    block = 16
    full_hit = (16_001 - 1) // block * block  # the 16,001st token ("q") is computed to sample
    assert model.ttft_s(16_001) > 0.7

    def run(salt: str | None) -> tuple[float, int]:
        body = {"model": MODEL, "prompt": prompt + "q", "max_tokens": 1, "stream_options": {"include_usage": True}}
        if salt is not None:
            body["cache_salt"] = salt
        ttft_s, _, chunks = _stream_times(emulator, body)
        usage = next(c["usage"] for c in chunks if c.get("usage"))
        return ttft_s, usage["prompt_tokens_details"]["cached_tokens"]

    try:
        cold_s, cold = run("tenant-a")
        warm_s, warm = run("tenant-a")
        other_s, other = run("tenant-b")
        unsalted_s, unsalted = run(None)
        again_s, again = run(None)
    finally:
        emulator.stop()
    assert (cold, warm, other, unsalted, again) == (0, full_hit, 0, 0, full_hit)
    # A hit leaves one block to prefill: the time to first token drops to a fraction.
    assert warm_s < cold_s / 2 and again_s < unsalted_s / 2
    assert other_s > 2 * warm_s


def _sse(server: Emulator, path: str, body: dict) -> list[dict]:
    with _HTTP.stream("POST", server.url + path, json={**body, "stream": True}, timeout=30) as response:
        assert response.status_code == 200
        payloads = [line.removeprefix("data: ") for line in response.iter_lines() if line.startswith("data: ")]
    assert payloads[-1] == "[DONE]"
    return [json.loads(payload) for payload in payloads[:-1]]


@pytest.mark.parametrize("path", ["/v1/completions", "/v1/chat/completions"])
def test_continuous_usage_stats_puts_the_usage_so_far_in_every_chunk(server, path):
    prompt = {"prompt": "abcd" * 8} if path == "/v1/completions" else {"messages": [{"role": "user", "content": "hi"}]}
    body = {"model": MODEL, **prompt, "max_tokens": 6, "ignore_eos": True}
    chunks = _sse(server, path, {**body, "stream_options": {"include_usage": True, "continuous_usage_stats": True}})
    *steps, last = chunks
    prompt_tokens = last["usage"]["prompt_tokens"]
    tokens = [c for c in steps if (c["choices"][0].get("text") or c["choices"][0].get("delta", {}).get("content"))]
    assert [c["usage"]["completion_tokens"] for c in tokens] == [1, 2, 3, 4, 5, 6]
    assert all(c["usage"]["prompt_tokens"] == prompt_tokens for c in steps)
    assert all(c["usage"]["total_tokens"] == prompt_tokens + c["usage"]["completion_tokens"] for c in steps)
    assert last["choices"] == [] and last["usage"]["completion_tokens"] == 6
    # include_usage defaults to true once stream_options is given (vLLM's StreamOptions).
    alone = _sse(server, path, {**body, "stream_options": {"continuous_usage_stats": True}})
    assert [c["usage"]["completion_tokens"] for c in alone if c["choices"]][-1] == 6
    empty = _sse(server, path, {**body, "stream_options": {}})
    assert empty[-1]["choices"] == [] and empty[-1]["usage"]["completion_tokens"] == 6
    # Without continuous_usage_stats, or with include_usage false (vLLM needs both), only the last chunk has it;
    # without stream_options, none.
    for options in ({"include_usage": True}, {"include_usage": False, "continuous_usage_stats": True}, None):
        plain = _sse(server, path, {**body, **({"stream_options": options} if options is not None else {})})
        assert all("usage" not in c for c in plain if c["choices"])
        assert ("usage" in plain[-1]) == (options == {"include_usage": True})


def test_metrics_parse_as_prometheus_text_with_vllms_names(server):
    """Prometheus's own text parser reads /metrics, and the families a dashboard of vLLM reads are there, with
    vLLM's names and types, counting what a request did."""
    parser = pytest.importorskip("prometheus_client.parser")
    body = {"model": MODEL, "prompt": "abcd" * 64, "max_tokens": 4, "ignore_eos": True}
    for _ in range(2):  # the second one hits the first's cached blocks
        assert _HTTP.post(server.url + "/v1/completions", json=body, timeout=30).status_code == 200
    text = _HTTP.get(server.url + "/metrics", timeout=10).text
    families = {family.name: family for family in parser.text_string_to_metric_families(text)}
    kinds = {name: family.type for name, family in families.items()}
    for name in ("vllm:num_requests_running", "vllm:num_requests_waiting", "vllm:kv_cache_usage_perc"):
        assert kinds[name] == "gauge", name
    # The parser names a counter without its _total suffix, as vLLM's prometheus_client does.
    for name in ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries", "vllm:num_preemptions",
                 "vllm:prompt_tokens", "vllm:generation_tokens", "vllm:request_success"):  # fmt: skip
        assert kinds[name] == "counter", name
    for name in ("vllm:time_to_first_token_seconds", "vllm:inter_token_latency_seconds",
                 "vllm:e2e_request_latency_seconds"):  # fmt: skip
        assert kinds[name] == "histogram", name
        samples = {sample.name: sample for sample in families[name].samples if sample.name.endswith("_count")}
        assert samples[name + "_count"].value >= 2
    hits = sum(s.value for s in families["vllm:prefix_cache_hits"].samples if s.name.endswith("_total"))
    assert hits >= 64 - 16  # the second request's whole blocks of its 64-token prompt


def test_bad_requests_are_openai_shaped_400s(server):
    url = server.url

    def post(path: str, content: bytes | str, status: int = 400) -> dict:
        response = _HTTP.post(url + path, content=content, headers={"content-type": "application/json"}, timeout=10)
        assert response.status_code == status, response.text
        document = response.json()
        assert set(document) == {"error"}  # OpenAI's and current vLLM's envelope
        body = document["error"]
        assert set(body) == {"message", "type", "param", "code"}
        assert body["code"] == status
        return body

    assert post("/v1/chat/completions", b"{not json")["type"] == "BadRequestError"
    assert post("/v1/chat/completions", b"[1, 2]")["type"] == "BadRequestError"
    assert post("/v1/chat/completions", json.dumps({"model": MODEL}))["param"] == "messages"
    assert post("/v1/completions", json.dumps({"prompt": "x", "max_tokens": "ten"}))["param"] == "max_tokens"
    assert post("/v1/completions", json.dumps({"prompt": "x", "max_tokens": 0}))["param"] == "max_tokens"
    assert post("/v1/completions", json.dumps({"prompt": [1, -2]}))["param"] == "prompt"
    empty = post("/v1/completions", json.dumps({"prompt": ""}))
    assert empty["message"] == "Either prompt or prompt_embeds must be provided and non-empty."
    assert post("/v1/chat/completions", json.dumps({"messages": ["hi"]}))["param"] == "messages.0"
    assert post("/v1/completions", b"\xff\xfe")["type"] == "BadRequestError"
    salt = post("/v1/completions", json.dumps({"prompt": "x", "cache_salt": ""}))
    assert salt["message"] == "Parameter 'cache_salt' must be a non-empty string if provided."
    assert salt["param"] == "cache_salt"
    assert post("/v1/completions", json.dumps({"prompt": "x", "cache_salt": 5}))["message"] == salt["message"]
    options = post("/v1/completions", json.dumps({"prompt": "x", "stream_options": {"include_usage": True}}))
    assert options["message"] == "Stream options can only be defined when `stream=True`."
    priority = post("/v1/completions", json.dumps({"prompt": "x", "priority": 2}))
    assert priority["message"] == "Got priority 2 but Priority scheduling is not enabled."
    long = post("/v1/completions", json.dumps({"prompt": "abcd" * 131_072}))
    assert long["message"] == (
        "This model's maximum context length is 131072 tokens. However, your request has 131072 input tokens. "
        "Please reduce the length of the input messages. (parameter=input_tokens, value=131072)"
    )
    assert long["param"] == "input_tokens"
    too_many = post("/v1/completions", json.dumps({"prompt": "abcd", "max_tokens": 131_072}))
    assert too_many["message"] == (
        "'max_tokens' or 'max_completion_tokens' is too large: 131072. This model's maximum context length is "
        "131072 tokens and your request has 1 input tokens (131072 > 131072 - 1). (parameter=max_tokens, "
        "value=131072)"
    )
    assert too_many["param"] == "max_tokens"
    assert post("/v1/completions", json.dumps({"prompt": "x", "model": "nope"}), 404)["type"] == "NotFoundError"
    assert post("/v1/nowhere", b"{}", 404)["type"] == "NotFoundError"
    # The server is still up and serving.
    assert _HTTP.get(url + "/health", timeout=10).status_code == 200


def test_disconnect_mid_stream_frees_its_kv(server):
    body = {"model": MODEL, "prompt": "abcd" * 3000, "max_tokens": 20_000, "ignore_eos": True, "stream": True}
    with _HTTP.stream("POST", server.url + "/v1/completions", json=body, timeout=30) as response:
        lines = response.iter_lines()
        received = 0
        for line in lines:
            received += line.startswith("data: ")
            if received >= 5:
                break
        during = server.metrics()
        assert during["vllm:num_requests_running"] == 1
        assert during["vllm:kv_cache_usage_perc"] > 0
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        after = server.metrics()
        if after["vllm:num_requests_running"] == 0:
            break
        time.sleep(0.05)
    assert after["vllm:num_requests_running"] == 0 and after["vllm:num_requests_waiting"] == 0
    assert after["vllm:kv_cache_usage_perc"] == 0.0
    assert after["vllm:request_success_total"] >= 1


def test_bench_serve_shaped_load_completes(server):
    """vllm bench serve's random dataset: random prompts of a fixed length, fixed outputs (ignore_eos), streaming,
    a bounded concurrency; every request gets all its tokens and a usage chunk."""
    import random

    rng = random.Random(0)
    prompts = ["".join(rng.choice("abcdefghij ") for _ in range(4 * 256)) for _ in range(48)]

    def one(prompt: str) -> tuple[int, int]:
        _, gaps, chunks = _stream_times(
            server,
            {"model": MODEL, "prompt": prompt, "max_tokens": 32, "ignore_eos": True,
             "stream_options": {"include_usage": True}},
        )  # fmt: skip
        usage = next(c["usage"] for c in chunks if c.get("usage"))
        return len(gaps) + 1, usage["completion_tokens"]

    before = server.metrics()["vllm:generation_tokens_total"]
    with ThreadPoolExecutor(16) as pool:
        results = list(pool.map(one, prompts))
    assert results == [(32, 32)] * 48
    assert server.metrics()["vllm:generation_tokens_total"] - before == 48 * 32


def test_admin_fail_fails_requests_in_flight(server):
    body = {"model": MODEL, "prompt": "abcd" * 100, "max_tokens": 50_000, "ignore_eos": True, "stream": True}
    with _HTTP.stream("POST", server.url + "/v1/completions", json=body, timeout=30) as response:
        lines = response.iter_lines()
        next(line for line in lines if line.startswith("data: "))
        failed = _HTTP.post(server.url + "/admin/fail", timeout=10).json()
        assert failed["failed"] >= 1
        rest = [line for line in lines if line.startswith("data: ")]
    error = json.loads(rest[-2].removeprefix("data: "))
    assert error["error"]["type"] == "InternalServerError" and rest[-1] == "data: [DONE]"


def test_admin_fail_takes_a_replica_and_refuses_one_it_does_not_have(server):
    """The server fixture has the plan's one replica: 0 is it, 1 and a non-number are 400s naming replica."""
    url = server.url + "/admin/fail"
    assert _HTTP.post(url, json={"replica": 0}, timeout=10).json() == {"failed": 0}
    for bad in (1, -1, "0", True, 0.5):
        refused = _HTTP.post(url, json={"replica": bad}, timeout=10)
        assert refused.status_code == 400, bad
        assert refused.json()["error"] == {
            "message": "replica must be a whole number from 0 to 0",
            "type": "BadRequestError",
            "param": "replica",
            "code": 400,
        }
    assert _HTTP.post(url, content=b"{nope", timeout=10).json()["error"]["type"] == "BadRequestError"


@pytest.mark.parametrize(
    ("remote", "allowed"),
    [("127.0.0.1", True), ("127.0.0.2", True), ("::1", True), ("::ffff:127.0.0.1", True),
     ("192.0.2.2", False), ("::ffff:192.0.2.2", False), ("fd00::2", False), ("", False), (None, False)],
)  # fmt: skip
def test_admin_fail_answers_only_a_loopback_peer(remote, allowed):
    """The handler as aiohttp calls it, with the peer address a socket would give: a remote peer gets a 403 in the
    API's shape and fails nothing, whatever X-Forwarded-For says. (The tests' servers listen on 127.0.0.1 only,
    so the refusal cannot be reached over real HTTP here.)"""
    import asyncio
    from unittest import mock

    from aiohttp.test_utils import make_mocked_request

    from quotacalc.emulate.server import Handlers, from_loopback

    assert from_loopback(remote) is allowed
    if allowed:
        return
    transport = mock.Mock()
    transport.get_extra_info.side_effect = lambda name, default=None: (remote, 8000) if name == "peername" else default
    request = make_mocked_request("POST", "/admin/fail", headers={"X-Forwarded-For": "127.0.0.1"}, transport=transport)
    emulator = mock.Mock()
    response = asyncio.run(Handlers(emulator).fail(request))
    assert response.status == 403
    assert json.loads(response.body)["error"]["type"] == "ForbiddenError"
    emulator.fail.assert_not_called()


@pytest.fixture
def small_plan(tmp_path):
    def write(batch: int, seqs: int, pool: int) -> str:
        path = tmp_path / f"small-{batch}-{seqs}-{pool}.yaml"
        path.write_text(SMALL.format(batch=batch, seqs=seqs, pool=pool))
        return str(path)

    return write


def test_the_body_kongs_request_transformer_sends_is_served(small_plan):
    """Kong's request-transformer can only add strings to a JSON body, so a tenant's tier reaches the engine as
    "priority": "2"; vLLM's request model reads that as 2 (pydantic's lax mode), and so must the emulator, or
    every request of a non-zero tier through the generated Kong file is a 400. A priority that is no whole number
    is still refused, naming it."""
    import yaml
    from policy_samples import platform_policy, sample_salts
    from test_export_kong import _transformed

    from quotacalc.exporters import kong

    policy = platform_policy()
    document = kong.document(policy, sample_salts(policy), "oss")
    consumers = {consumer["username"]: consumer for consumer in yaml.safe_load(yaml.safe_dump(document))["consumers"]}
    (transformer,) = [p for p in consumers["wayne"]["plugins"] if p["name"] == "request-transformer"]
    spoofed = {"model": MODEL, "prompt": "abcd" * 8, "max_tokens": 3, "priority": 0, "cache_salt": "someone-else"}
    sent = _transformed(spoofed, transformer["config"])
    assert sent["priority"] == "2"  # a string, as Kong sends it
    emulator = Emulator(small_plan(64, 4, 4096), "--port", "0", "--speed", "20", "--scheduling-policy", "priority")
    try:
        served = _HTTP.post(emulator.url + "/v1/completions", json=sent, timeout=30)
        assert served.status_code == 200, served.text
        assert served.json()["usage"]["completion_tokens"] >= 1
        for bad in ("high", "1.5", 1.5):
            refused = _HTTP.post(emulator.url + "/v1/completions", json={**sent, "priority": bad}, timeout=30)
            assert refused.status_code == 400 and refused.json()["error"]["param"] == "priority", bad
    finally:
        assert emulator.stop() == 130


def test_priority_order_under_contention(small_plan):
    # Speed 2: a step of a batch of one is 6 ms of wall time, so the 20 tokens of one request end 120 ms before
    # the next one's, far more than a client thread's scheduling jitter.
    emulator = Emulator(small_plan(1, 1, 4096), "--port", "0", "--speed", "2", "--scheduling-policy", "priority")
    try:
        client = _client(emulator)
        finished: list[str] = []

        def send(name: str, priority: int, tokens: int) -> None:
            client.completions.create(model=MODEL, prompt=name * 40, max_tokens=tokens,
                                      extra_body={"ignore_eos": True, "priority": priority})  # fmt: skip
            finished.append(name)

        with ThreadPoolExecutor(3) as pool:
            blocker = pool.submit(send, "b", 5, 100)
            deadline = time.monotonic() + 10
            while emulator.metrics()["vllm:num_requests_running"] < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            late_low = pool.submit(send, "l", 9, 20)
            while emulator.metrics()["vllm:num_requests_waiting"] < 1 and time.monotonic() < deadline:
                time.sleep(0.01)
            later_high = pool.submit(send, "h", 0, 20)
            while emulator.metrics()["vllm:num_requests_waiting"] < 2 and time.monotonic() < deadline:
                time.sleep(0.01)
            # Both wait behind the blocker (max_num_seqs 1), the low one queued first.
            assert emulator.metrics()["vllm:num_requests_running"] == 1
            for future in (blocker, late_low, later_high):
                future.result()
        # The blocker finishes, then the high priority that arrived last, then the low one.
        assert finished == ["b", "h", "l"]
    finally:
        assert emulator.stop() == 130


def test_a_full_kv_pool_preempts_and_every_request_completes(small_plan):
    emulator = Emulator(small_plan(2, 2, 640), "--port", "0", "--speed", "20")
    try:
        client = _client(emulator)

        def send(index: int) -> int:
            reply = client.completions.create(model=MODEL, prompt=f"{index:04d}" * 100, max_tokens=300,
                                              extra_body={"ignore_eos": True})  # fmt: skip
            return reply.usage.completion_tokens

        with ThreadPoolExecutor(2) as pool:
            assert list(pool.map(send, range(2))) == [300, 300]
        metrics = emulator.metrics()
        # Two sequences of 100 + 300 tokens need 50 blocks; the pool has 40.
        assert 'num_gpu_blocks="40"' in _HTTP.get(emulator.url + "/metrics").text
        assert metrics["vllm:num_preemptions_total"] >= 1
        assert metrics["vllm:kv_cache_usage_perc"] == 0.0
    finally:
        emulator.stop()


def test_fail_rate_one_fails_every_request(small_plan):
    emulator = Emulator(small_plan(2, 2, 640), "--port", "0", "--speed", "20", "--fail-rate", "1")
    try:
        response = _HTTP.post(emulator.url + "/v1/completions", json={"prompt": "x", "max_tokens": 5}, timeout=10)
        assert response.status_code == 500 and response.json()["error"]["type"] == "InternalServerError"
    finally:
        emulator.stop()


def test_ctrl_c_with_open_streams_exits_130_within_2_s(small_plan):
    emulator = Emulator(small_plan(2, 2, 640), "--port", "0", "--speed", "1")
    body = {"prompt": "abcd", "max_tokens": 600, "ignore_eos": True, "stream": True}
    with _HTTP.stream("POST", emulator.url + "/v1/completions", json=body, timeout=30) as response:
        next(line for line in response.iter_lines() if line.startswith("data: "))
        start = time.monotonic()
        code = emulator.stop()
        elapsed = time.monotonic() - start
    assert code == 130 and elapsed < 2.0
    assert emulator.stderr[-1] == "quotacalc: interrupted\n"


def test_a_port_in_use_is_one_line_and_exit_1(server):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", "emulate", PLAN,
               "--port", str(server.port)]  # fmt: skip
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=60, cwd=ROOT)
    assert done.returncode == 1
    assert done.stderr == (
        f"quotacalc: error: --port: 127.0.0.1:{server.port} is already in use "
        "(choose another port, or stop what is on it)\n"
    )


PLATFORM = str(ROOT / "examples" / "platform.yaml")


def _start_pools(*args: str) -> tuple[subprocess.Popen, dict[str, int]]:
    """``quotacalc emulate`` on the platform plan: the process and each pool's port, read from its lines."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    command = [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", "emulate", PLATFORM, *args]
    process = subprocess.Popen(command, stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT)
    ports: dict[str, int] = {}
    pool = None
    deadline = time.monotonic() + 90
    while len(ports) < 3 and time.monotonic() < deadline:
        line = process.stderr.readline()
        if not line:
            break
        if found := re.search(r"pool '([^']+)' as", line):
            pool = found.group(1)
        elif found := re.search(r"listening on http://127\.0\.0\.1:(\d+)", line):
            ports[pool] = int(found.group(1))
    return process, ports


def test_a_plan_with_several_pools_serves_each_on_its_own_port():
    """Without --pool, one server per pool: each answers with its own pool's engine (its max_model_len, as
    _serving builds it for that pool alone), and Ctrl-C stops them all with 130."""
    from quotacalc.cli.emulate import _serving

    process, ports = _start_pools("--port", "0", "--speed", "20")
    try:
        assert set(ports) == {"shared", "long", "acme-dedicated"}, ports
        assert len(set(ports.values())) == 3
        for pool, port in ports.items():
            url = f"http://127.0.0.1:{port}"
            serving, _ = _serving(PLATFORM, pool, None, None, None)
            (card,) = [m for m in _HTTP.get(url + "/v1/models").json()["data"] if m["parent"] is None]
            assert card["max_model_len"] == serving.engine.max_model_len, pool
            body = {"model": card["id"], "prompt": "abcd", "max_tokens": 2, "ignore_eos": True}
            assert _HTTP.post(url + "/v1/completions", json=body).json()["usage"]["completion_tokens"] == 2
        # A stream open on each pool while Ctrl-C stops them all.
        long_body = {"prompt": "abcd", "max_tokens": 5000, "ignore_eos": True, "stream": True}
        with ExitStack() as streams:
            for port in ports.values():
                url = f"http://127.0.0.1:{port}/v1/completions"
                response = streams.enter_context(_HTTP.stream("POST", url, json=long_body, timeout=30))
                next(line for line in response.iter_lines() if line.startswith("data: "))
            start = time.monotonic()
            process.send_signal(signal.SIGINT)
            code = process.wait(timeout=10)
            elapsed = time.monotonic() - start
        assert code == 130 and elapsed < 2.0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
        process.stderr.close()


def test_a_pool_whose_port_is_taken_stops_every_pool_in_one_line():
    """--port P gives the pools P, P+1, P+2 in the plan's order; the second one's port taken: one line naming it
    and its pool, exit 1, and the first pool's port is free again."""
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        second = taken.getsockname()[1]
        first = second - 1
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", first))
            except OSError:
                pytest.skip(f"port {first} is in use on this machine")
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", "emulate", PLATFORM,
                   "--port", str(first)]  # fmt: skip
        done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=90, cwd=ROOT)
    assert done.returncode == 1, done.stderr
    assert done.stderr.splitlines()[-1] == (
        f"quotacalc: error: --port: 127.0.0.1:{second} (pool 'long') is already in use "
        "(choose another port, or stop what is on it)"
    )
    with socket.socket() as again:
        again.bind(("127.0.0.1", first))  # the shared pool's server closed


def test_seed_makes_output_lengths_reproducible(small_plan):
    plan = small_plan(2, 2, 640)

    def lengths(seed: int) -> list[int]:
        emulator = Emulator(plan, "--port", "0", "--speed", "20", "--seed", str(seed), "--output-tokens", "20")
        try:
            replies = [
                _HTTP.post(emulator.url + "/v1/completions", json={"prompt": "x", "max_tokens": 200}).json()
                for _ in range(8)
            ]
        finally:
            emulator.stop()
        return [reply["usage"]["completion_tokens"] for reply in replies]

    first, again, other = lengths(1), lengths(1), lengths(2)
    assert first == again and first != other
    assert all(1 <= n <= 200 for n in first + other)


def test_a_platform_pool_serves_its_lora_adapters_and_priorities():
    emulator = Emulator(str(ROOT / "examples" / "platform.yaml"), "--pool", "shared", "--replicas", "1",
                        "--port", "0", "--speed", "20")  # fmt: skip
    try:
        models = _HTTP.get(emulator.url + "/v1/models").json()["data"]
        assert [(m["id"], m["parent"]) for m in models] == [(MODEL, None), ("initech-support-v2", MODEL)]
        client = _client(emulator)
        prompt = "abcd" * 200

        def cached(model: str) -> int:
            reply = client.completions.create(model=model, prompt=prompt, max_tokens=1, extra_body={"priority": 2})
            return reply.usage.prompt_tokens_details.cached_tokens

        # The pool's tiers have several priorities, so generate sets the priority policy and priority is accepted;
        # the adapter is in every block's hash, so the base model's cached prefix is not the adapter's.
        assert (cached(MODEL), cached("initech-support-v2"), cached("initech-support-v2")) == (0, 0, 192)
    finally:
        emulator.stop()


def test_a_slow_reader_gets_every_token_and_its_kv_is_freed(server):
    body = {"model": MODEL, "prompt": "abcd" * 50, "max_tokens": 200, "ignore_eos": True, "stream": True}
    with _HTTP.stream("POST", server.url + "/v1/completions", json=body) as response:
        time.sleep(1.0)  # reads nothing while the replica runs the whole request (200 steps: 0.12 s at speed 20)
        assert server.metrics()["vllm:kv_cache_usage_perc"] == 0.0
        lines = [line for line in response.iter_lines() if line.startswith("data: ")]
    assert len(lines) == 201 and lines[-1] == "data: [DONE]"
    assert json.loads(lines[-2].removeprefix("data: "))["choices"][0]["finish_reason"] == "length"


def test_requests_spread_over_replicas_and_sigterm_exits_0(small_plan):
    emulator = Emulator(small_plan(2, 2, 640), "--port", "0", "--speed", "1", "--replicas", "2")
    try:
        body = {"prompt": "abcd" * 10, "max_tokens": 300, "ignore_eos": True, "stream": True}
        # Each stream's line iterator is kept: dropping it would close the stream (a disconnect).
        with _HTTP.stream("POST", emulator.url + "/v1/completions", json=body) as first:
            first_lines = first.iter_lines()
            next(line for line in first_lines if line.startswith("data: "))
            with _HTTP.stream("POST", emulator.url + "/v1/completions", json=body) as second:
                second_lines = second.iter_lines()
                next(line for line in second_lines if line.startswith("data: "))
                text = _HTTP.get(emulator.url + "/metrics").text
        running = re.findall(r'vllm:num_requests_running\{model_name="[^"]+",engine="(\d)"\} (\d+)', text)
        assert running == [("0", "1"), ("1", "1")]
    finally:
        emulator.process.send_signal(signal.SIGTERM)
        assert emulator.process.wait(timeout=10) == 0
        emulator.stop()


_STUCK_POOL = """
import asyncio, sys
import quotacalc.emulate.server as server

async def stuck(serving, options, host, port, *, ready=None, stop=None):
    ready(port)
    while True:  # a pool whose close never ends: it ignores both the stop event and cancellation
        try:
            await asyncio.sleep(3600)
        except asyncio.CancelledError:
            pass

server.serve = stuck
from quotacalc.cli.entry import main
sys.argv = ["quotacalc", "emulate", sys.argv[1], "--port", "0"]
main()
"""


def test_ctrl_c_ends_the_process_within_2_s_even_when_a_pool_never_closes():
    """The bound on Ctrl-C holds whatever a pool's close does: past INTERRUPT_BOUND_S the process exits 130 with
    the interrupted line, rather than waiting on the pool for ever."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    process = subprocess.Popen(
        [sys.executable, "-c", _STUCK_POOL, PLAN], stderr=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline:
            line = process.stderr.readline()
            if not line or "listening on" in line:
                break
        assert "listening on" in line, line
        start = time.monotonic()
        process.send_signal(signal.SIGINT)
        code = process.wait(timeout=10)
        elapsed = time.monotonic() - start
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    assert code == 130 and elapsed < 2.0
    assert process.stderr.read().splitlines()[-1] == "quotacalc: interrupted"
