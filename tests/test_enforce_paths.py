"""The plugin's paths through a real LiteLLM proxy that authenticates keys, in front of three ``quotacalc emulate``
engines on 127.0.0.1: the two replicas of pool ``std``, each its own engine and its own LiteLLM deployment, and the
long-context pool ``long`` (marker ``litellm_proxy``).

- The tenant comes from the authenticated key (``tenant_from: key``, the default). Keys are authenticated by
  LiteLLM's ``general_settings.custom_auth`` hook (tests/litellm_keys_auth.py), which returns the ``UserAPIKeyAuth``
  LiteLLM's own key lookup would build: LiteLLM's virtual keys live in its Postgres through prisma, whose query
  engine binary is fetched from binaries.prisma.sh at first use, which these tests cannot reach (docs/enforce.md).
- A prompt above the pool's threshold reaches the long-context pool's engine; a short one does not.
- A tenant at its concurrency cap waits in the fair queue and is then served; past the bound it gets a 429.
- The resident-KV cap holds per replica: the plugin places each request on a replica and LiteLLM sends it there.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
import yaml
from enforce_stack import PLAN, Emulator, Proxy, edit_policy, edit_settings, generate, litellm_executable, records

pytestmark = pytest.mark.litellm_proxy

HERE = Path(__file__).resolve().parent
#: Pool std routes prompts above 1,024 tokens to pool long; std has two replicas, long one.
PATHS_PLAN = PLAN.split("pools:")[0] + (
    "pools:\n"
    "  - name: std\n"
    "    replicas: 2\n"
    "    deployment: {batch: 64, context: 2048}\n"
    "    long_context_pool: long\n"
    "    route_above_prompt_tokens: 1024\n"
    "  - name: long\n"
    "    role: long_context\n"
    "    replicas: 1\n"
    "    deployment: {batch: 8, context: 8192}\n"
    "tiers:\n"
    "  - {name: gold, max_context_tokens: 8192, kv_cap_tokens_per_replica: 60000, max_concurrent_sequences: 16,\n"
    "     max_output_tokens: 1024, priority: 0, burst_s: 60, cached_prompt_weight: 0.1}\n"
    "tenants:\n"
    "  - {name: alpha, tier: gold, pool: std, units_per_s: 2000}\n"
    "  - {name: beta, tier: gold, pool: std, units_per_s: 2000}\n"
    "  - {name: gamma, tier: gold, pool: std, units_per_s: 2000}\n"
    "  - {name: solo, tier: gold, pool: std, units_per_s: 2000}\n"
    "  - {name: kv, tier: gold, pool: std, units_per_s: 2000}\n"
)
#: The tenant-named keys of tests/litellm_keys_auth.py.
KEY_OF = {
    "alpha": "sk-alpha-team",
    "beta": "sk-beta-alias",
    "gamma": "sk-gamma-metadata",
    "solo": "sk-solo-team-metadata",
}
KEY_OF["kv"] = "sk-kv"
#: A queued request waits this long at most: longer than the streams that end while others wait (2.5 s at most), far
#: shorter than the one that holds solo's only slot (15 s).
QUEUE_WAIT_MAX_S = 6.0
#: Half the priced speed: about 15 ms an output token on this plan's replica (8 ms at speed 1, measured with emulate).
SPEED = "0.5"
#: solo runs one sequence at a time; kv's cap per replica takes one of its 158-token requests, not two.
SOLO = {"max_concurrent_sequences": 1}
KV = {"kv_cap_tokens_per_replica": 300}


def _replicas_config(folder: Path) -> None:
    """The custom auth hook; pool std's two replicas are two deployments as generated, named in enforce.json."""
    path = folder / "config.yaml"
    config = yaml.safe_load(path.read_text(encoding="utf-8"))
    assert [d["model_info"]["id"] for d in config["model_list"]] == ["std-0", "std-1", "long-0"]
    config["general_settings"]["custom_auth"] = "litellm_keys_auth.user_api_key_auth"
    # A stream that ends without usage (the client that leaves the queue test's slot) is counted by LiteLLM with the
    # model's Hugging Face tokenizer, whose download, out of reach here, retries for about 23 s inside the proxy's event
    # loop and stalls every request behind it (LiteLLM 1.108).
    config["litellm_settings"]["disable_hf_tokenizer_download"] = True
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    shutil.copy(HERE / "litellm_keys_auth.py", folder / "litellm_keys_auth.py")
    assert json.loads((folder / "enforce.json").read_text())["replica_deployments"]["std"] == ["std-0", "std-1"]
    edit_settings(folder, prompt_tokens="bytes4", queue_wait_max_s=QUEUE_WAIT_MAX_S)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    if litellm_executable() is None:
        pytest.skip("the litellm CLI is not installed (extra litellm-proxy)")
    directory = tmp_path_factory.mktemp("paths")
    folder = generate(directory, PATHS_PLAN)
    edit_policy(folder, solo=SOLO, kv=KV)
    _replicas_config(folder)
    plan = directory / "plan.yaml"
    engines: dict[str, Emulator] = {}
    proxy = None
    try:
        for name, pool in (("std-0", "std"), ("std-1", "std"), ("long-0", "long")):
            engines[name] = Emulator(plan, "--pool", pool, "--replicas", "1", "--speed", SPEED)
        proxy = Proxy(folder, engines["long-0"].url, engines={name: e.url for name, e in engines.items()})
        yield proxy, engines, folder
    finally:
        if proxy is not None:
            proxy.stop()
        for engine in engines.values():
            engine.stop()


def _body(content: str = "hello", **extra) -> dict:
    return {"model": "std", "messages": [{"role": "user", "content": content}], **extra}


def _post(proxy: Proxy, key: str, body: dict, headers: dict | None = None, timeout: float = 60) -> httpx.Response:
    return httpx.post(
        proxy.url + "/v1/chat/completions",
        json=body,
        headers={"Authorization": f"Bearer {key}", **(headers or {})},
        timeout=timeout,
    )


def _received(engines: dict[str, Emulator]) -> dict[str, list[dict]]:
    return {name: engine.received() for name, engine in engines.items()}


def _new(before: dict[str, list[dict]], after: dict[str, list[dict]]) -> dict[str, list[dict]]:
    """What each engine received since ``before`` (it keeps its newest requests, so counts still grow here)."""
    return {name: after[name][len(before[name]) :] for name in after}


def _salt(folder: Path, tenant: str) -> str:
    policy = json.loads((folder / "policy.json").read_text())
    salts = json.loads((folder / "salts.json").read_text())
    (ref,) = [t["salt_ref"] for t in policy["tenants"] if t["name"] == tenant]
    return salts[ref]


def _stream(proxy: Proxy, key: str, body: dict, timeout: float = 60) -> tuple[int, int]:
    """A streamed chat completion: (status, the content chunks received)."""
    tokens = 0
    with httpx.stream(
        "POST", proxy.url + "/v1/chat/completions", json={**body, "stream": True},
        headers={"Authorization": f"Bearer {key}"}, timeout=timeout,
    ) as response:  # fmt: skip
        if response.status_code != 200:
            response.read()
            return response.status_code, 0
        for line in response.iter_lines():
            tokens += _content_chunks(line)
    return 200, tokens


def _content_chunks(line: str) -> int:
    """Choices of one SSE line whose delta carries text (the first chunk's role delta has empty content)."""
    if not line.startswith("data: {"):
        return 0
    chunk = json.loads(line[len("data: ") :])
    return sum(1 for choice in chunk.get("choices") or [] if (choice.get("delta") or {}).get("content"))


def test_the_tenant_is_the_authenticated_keys_team_or_metadata(stack):
    """LiteLLM authenticates each key; the plugin bills the tenant its team or metadata names, and the engine gets
    that tenant's salt, whatever tenant header the client sends."""
    proxy, engines, folder = stack
    for tenant, key in KEY_OF.items():
        if tenant == "kv":
            continue
        before = _received(engines)
        response = _post(
            proxy, key, _body(max_tokens=5), headers={"x-tenant-id": "beta" if tenant != "beta" else "alpha"}
        )
        assert response.status_code == 200, (tenant, response.text)
        (seen,) = [seen for got in _new(before, _received(engines)).values() for seen in got]
        assert seen["cache_salt"] == _salt(folder, tenant), tenant
        assert records(folder)[-1]["tenant"] == tenant


def test_a_key_of_no_tenant_is_refused_never_defaulted(stack):
    proxy, engines, folder = stack
    before = _received(engines)
    written = len(records(folder))
    none = _post(proxy, "sk-no-tenant", _body(), headers={"x-tenant-id": "alpha"})
    assert none.status_code == 401 and "quotacalc: the request's tenant (none)" in none.text, none.text
    unknown = _post(proxy, "sk-marketing", _body())
    assert unknown.status_code == 403 and "('marketing') is not in the policy" in unknown.text, unknown.text
    # A key LiteLLM does not know never reaches the plugin: LiteLLM's own 401.
    invalid = _post(proxy, "sk-forged", _body())
    assert invalid.status_code == 401 and "quotacalc" not in invalid.text, invalid.text
    assert not any(_new(before, _received(engines)).values())
    refused = records(folder)[written:]
    assert [(r["tenant"], r["status"]) for r in refused] == [(None, 401), ("marketing", 403)]


def test_a_prompt_above_the_threshold_reaches_the_long_context_pool(stack):
    proxy, engines, folder = stack
    # 4 bytes a token: 1,200 tokens of content are above std's 1,024-token threshold; 100 are not.
    for content_tokens, engine in ((1200, "long"), (100, "std")):
        before = _received(engines)
        response = _post(proxy, KEY_OF["alpha"], _body("abcd" * content_tokens, max_tokens=5))
        assert response.status_code == 200, response.text
        got = _new(before, _received(engines))
        reached = [name for name, seen in got.items() if seen]
        assert len(reached) == 1 and reached[0].startswith(engine), got
        (seen,) = got[reached[0]]
        assert (seen["prompt_tokens"] > 1024) == (engine == "long")
        assert records(folder)[-1]["pool"] == engine


def test_a_tenant_at_its_concurrency_cap_waits_in_the_queue_then_is_served(stack):
    proxy, _, folder = stack
    written = len(records(folder))
    with ThreadPoolExecutor(2) as pool:
        results = list(
            pool.map(lambda _: _stream(proxy, KEY_OF["solo"], _body(max_tokens=60, ignore_eos=True)), range(2))
        )
    assert [status for status, _ in results] == [200, 200]
    assert [tokens for _, tokens in results] == [60, 60]
    first, second = sorted(records(folder)[written:], key=lambda r: r["first_token"])
    assert (first["outcome"], second["outcome"]) == ("completed", "completed")
    # One at a time: the second's first token came after the first ended, though both arrived together.
    assert second["first_token"] >= first["end"]
    assert second["start"] < first["end"]


def test_a_tenant_that_waits_past_the_bound_gets_a_429_with_retry_after(stack):
    proxy, engines, folder = stack
    holding = threading.Event()
    release = threading.Event()

    def hold_the_slot() -> None:
        with httpx.stream(
            "POST", proxy.url + "/v1/chat/completions", headers={"Authorization": f"Bearer {KEY_OF['solo']}"},
            json=_body(max_tokens=1000, ignore_eos=True, stream=True), timeout=60,
        ) as response:  # fmt: skip
            for line in response.iter_lines():
                if _content_chunks(line):
                    holding.set()
                if release.is_set():
                    break

    holder = threading.Thread(target=hold_the_slot)
    holder.start()
    try:
        assert holding.wait(30), proxy.tail()
        before = _received(engines)
        started = time.monotonic()
        waited = _post(proxy, KEY_OF["solo"], _body(max_tokens=5))
        elapsed = time.monotonic() - started
    finally:
        release.set()
        holder.join(60)
    assert waited.status_code == 429, waited.text
    assert waited.headers["x-quotacalc-reason"] == "queue_timeout"
    # Retry-After is a quarter of the queue's bound, at least 1 s (Gate.queue_refusal).
    assert waited.headers["retry-after"] == str(max(1, round(QUEUE_WAIT_MAX_S / 4)))
    assert elapsed >= QUEUE_WAIT_MAX_S
    assert not any(_new(before, _received(engines)).values())
    (record,) = [r for r in records(folder) if r["tenant"] == "solo" and r["outcome"] == "queue_timeout"]
    assert record["units_debited"] == 0 and record["units_released"] == pytest.approx(record["units_taken"])
    # The record says what the client got: the 429 and its Retry-After.
    assert (record["status"], str(record["retry_after_s"])) == (429, waited.headers["retry-after"])


def test_the_kv_cap_holds_on_each_replica(stack):
    """kv's cap is 300 tokens a replica; each request holds 158 (an 8-token prompt + max_tokens 150). Over the pool
    (600) three would run at once; per replica one runs on each, and the third waits for one to end."""
    proxy, engines, folder = stack
    before = _received(engines)
    written = len(records(folder))
    with ThreadPoolExecutor(3) as pool:
        results = list(
            pool.map(lambda _: _stream(proxy, KEY_OF["kv"], _body(max_tokens=150, ignore_eos=True)), range(3))
        )
    assert [status for status, _ in results] == [200, 200, 200]
    got = _new(before, _received(engines))
    salt = _salt(folder, "kv")
    per_replica = {name: sum(seen["cache_salt"] == salt for seen in got[name]) for name in ("std-0", "std-1")}
    # Both replicas served kv: the plugin sent each request to the replica it placed it on.
    assert sorted(per_replica.values()) == [1, 2], per_replica
    spans = sorted((r["first_token"], r["end"]) for r in records(folder)[written:])
    assert len(spans) == 3
    # Never three at once: the last to start began after the first to end.
    assert spans[2][0] >= min(end for _, end in spans[:2])
    # And two at once, one a replica (both first tokens before either end).
    assert spans[1][0] < min(end for _, end in spans[:2])
