"""The resident-KV cap per replica through a real LiteLLM proxy running the config ``quotacalc generate --target
litellm`` writes, as written (marker ``litellm_proxy``): a pool of two replicas, each its own ``quotacalc emulate``
on a loopback port the plan names (the pool's ``replica_urls``), each its own deployment in config.yaml and named in
enforce.json's ``replica_deployments`` by generate. Only enforce.json's tenant source, prompt count and queue bound
are set for the test; config.yaml is never touched.

kv's cap is 1,200 tokens a replica and each long request holds about 1,010 (its prompt and 1,000 output tokens):
one fits on a replica, two do not. Two long streams land one on each replica; a third waits in the fair queue and
is refused 429 (``queue_timeout``) without reaching an engine; once one stream ends, requests that do not fit beside
the other go to the replica that stream left, and only there.
"""

from __future__ import annotations

import json
import threading
import time

import httpx
import pytest
import yaml
from enforce_stack import (
    PLAN,
    Emulator,
    Proxy,
    edit_settings,
    free_port,
    generate,
    litellm_executable,
    records,
    wait_until,
)

pytestmark = pytest.mark.litellm_proxy

CAP_TOKENS = 1200
LONG_TOKENS = 1000
#: Half the priced speed: about 15 ms an output token on this replica (as test_enforce_paths.py measured), so a long
#: stream lasts about 15 s, far longer than the queue's bound.
SPEED = "0.5"
QUEUE_WAIT_MAX_S = 2.0


def _plan(ports: tuple[int, int]) -> str:
    urls = ", ".join(f'"http://127.0.0.1:{port}/v1"' for port in ports)
    return PLAN.split("pools:")[0] + (
        "pools:\n"
        "  - name: std\n"
        "    replicas: 2\n"
        "    deployment: {batch: 64, context: 2048}\n"
        f"    replica_urls: [{urls}]\n"
        "tiers:\n"
        f"  - {{name: gold, max_context_tokens: 2048, kv_cap_tokens_per_replica: {CAP_TOKENS},\n"
        "     max_concurrent_sequences: 16, max_output_tokens: 1024, priority: 0, burst_s: 60, cached_prompt_weight: 0.1}\n"
        "tenants:\n"
        "  - {name: kv, tier: gold, pool: std, units_per_s: 20000}\n"
    )


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    directory = tmp_path_factory.mktemp("replicas")
    ports = (free_port(), free_port())
    folder = generate(directory, _plan(ports), "--litellm-tokenizer", "tiktoken")
    config_text = (folder / "config.yaml").read_text(encoding="utf-8")
    config = yaml.safe_load(config_text)
    assert [
        (d["model_name"], d["model_info"]["id"], d["litellm_params"]["api_base"]) for d in config["model_list"]
    ] == [
        ("std", "std-0", f"http://127.0.0.1:{ports[0]}/v1"),
        ("std", "std-1", f"http://127.0.0.1:{ports[1]}/v1"),
    ]
    assert json.loads((folder / "enforce.json").read_text())["replica_deployments"] == {"std": ["std-0", "std-1"]}
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4", queue_wait_max_s=QUEUE_WAIT_MAX_S)
    plan = directory / "plan.yaml"
    engines: dict[str, Emulator] = {}
    proxy = None
    try:
        for index, port in enumerate(ports):
            engines[f"std-{index}"] = Emulator(plan, "--pool", "std", "--replicas", "1", "--speed", SPEED, port=port)
        proxy = Proxy(folder, None)
        # The proxy runs config.yaml as generated.
        assert (folder / "config.yaml").read_text(encoding="utf-8") == config_text
        yield proxy, engines, folder
    finally:
        if proxy is not None:
            proxy.stop()
        for engine in engines.values():
            engine.stop()


def _body(content: str, max_tokens: int, **extra) -> dict:
    return {
        "model": "std",
        "messages": [{"role": "user", "content": content}],
        "max_tokens": max_tokens,
        "ignore_eos": True,
        **extra,
    }


class _Holder(threading.Thread):
    """A streamed request that holds its KV on its replica until ``release`` (then its client leaves)."""

    def __init__(self, proxy: Proxy, content: str) -> None:
        super().__init__(daemon=True)
        self.proxy, self.content = proxy, content
        self.streaming = threading.Event()
        self.release = threading.Event()
        self.status: int | None = None

    def run(self) -> None:
        with httpx.stream(
            "POST", self.proxy.url + "/v1/chat/completions", headers=self.proxy.headers("kv"),
            json=_body(self.content, LONG_TOKENS, stream=True), timeout=120,
        ) as response:  # fmt: skip
            self.status = response.status_code
            for line in response.iter_lines():
                if _has_content(line):
                    self.streaming.set()
                if self.release.is_set():
                    break
        self.streaming.set()


def _has_content(line: str) -> bool:
    """Whether one SSE line's delta carries text (the first chunk's role delta has empty content)."""
    if not line.startswith("data: {"):
        return False
    chunk = json.loads(line[len("data: ") :])
    return any((choice.get("delta") or {}).get("content") for choice in chunk.get("choices") or [])


def _seen(engines: dict[str, Emulator]) -> dict[str, list[int]]:
    """The prompt tokens of each request each replica's engine received."""
    return {name: [seen["prompt_tokens"] for seen in engine.received()] for name, engine in engines.items()}


def test_the_kv_cap_holds_on_each_replica_of_the_generated_config(stack):
    proxy, engines, folder = stack
    # Prompts of different lengths (4 UTF-8 bytes a token), so each engine's log tells the requests apart.
    a_content, b_content, c_content, e_content = "a" * 8, "b" * 80, "c" * 160, "e" * 240
    holders = [_Holder(proxy, a_content), _Holder(proxy, b_content)]
    for holder in holders:
        holder.start()
    try:
        for holder in holders:
            assert holder.streaming.wait(60) and holder.status == 200, proxy.tail()
        first = _seen(engines)
        # One long request on each replica: two would pass the cap on one.
        assert sorted(len(seen) for seen in first.values()) == [1, 1], first
        a_replica = min(first, key=lambda name: first[name][0])  # a's prompt is the shortest
        b_replica = next(name for name in first if name != a_replica)

        # A third long request fits on neither replica beside the one there: it waits, then gets the queue's 429.
        started = time.monotonic()
        refused = httpx.post(
            proxy.url + "/v1/chat/completions", json=_body(c_content, LONG_TOKENS), headers=proxy.headers("kv"),
            timeout=60,
        )  # fmt: skip
        waited = time.monotonic() - started
        assert refused.status_code == 429, refused.text
        assert refused.headers["x-quotacalc-reason"] == "queue_timeout"
        assert waited >= QUEUE_WAIT_MAX_S
        assert _seen(engines) == first  # it reached no engine

        # a's client leaves: its replica's room comes back once its settlement is recorded.
        holders[0].release.set()
        holders[0].join(60)
        assert wait_until(lambda: any(r.get("outcome") == "disconnect" for r in records(folder)), 30), records(folder)
        # 200 output tokens beside b's ~1,020 would pass the cap on b's replica: each such request can go only to
        # a's, and does, every time (a balancer left to itself would send about half of them to b's).
        for _ in range(3):
            served = httpx.post(
                proxy.url + "/v1/chat/completions", json=_body(e_content, 200), headers=proxy.headers("kv"), timeout=120
            )
            assert served.status_code == 200, served.text
        after = _seen(engines)
        assert len(after[a_replica]) == 1 + 3 and len(after[b_replica]) == 1, after
        assert min(after[a_replica][1:]) > after[b_replica][0]  # e's prompts, the longest, on a's replica
    finally:
        for holder in holders:
            holder.release.set()
        for holder in holders:
            holder.join(60)
    outcomes = [(r["outcome"], r.get("status")) for r in records(folder)]
    assert outcomes.count(("queue_timeout", 429)) == 1 and ("completed", None) in outcomes, outcomes
