"""Where the chaos run's time goes: the CPU one request costs each process of the enforcement stack.

One real LiteLLM proxy with quotacalc's plugin on a local redis-server (append-only file, as the chaos test keeps it),
before ``quotacalc emulate --fail-rate 0.05``, takes ``--requests`` chat completions of 1 to ``--max-tokens`` output
tokens from ``--clients`` concurrent asyncio clients (httpx.AsyncClient), streamed or not. Reported: how the
requests ended for the clients, requests/s, and each process's CPU milliseconds a request (from /proc/PID/stat,
before and after the load): the proxy, the emulator, redis-server and the client loop.

    python bench/enforce_chaos_cost.py [--requests 400] [--clients 32] [--max-tokens 16] [--no-stream]
        [--appendfsync always|everysec] [--hf-online]

``--hf-online`` starts the proxy without HF_HUB_OFFLINE=1 (as the tests did before): on a machine without network,
LiteLLM then retries the download of a Hugging Face tokenizer for about 23 s inside its event loop on every stream
that ends without usage (here the engine's failures). Linux only (/proc). Needs the litellm extra and redis-server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import enforce_stack  # noqa: E402
from enforce_stack import Emulator, Proxy, RedisServer, edit_policy, edit_settings, generate  # noqa: E402

TENANTS = ("alpha", "beta", "gamma")


def _cpu_s(pid: int) -> float:
    """User and system CPU seconds of a process and of its children it waited for."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


async def _load(proxy: Proxy, requests: int, clients: int, max_tokens: int, stream: bool) -> dict[str, int]:
    endings: dict[str, int] = {}
    rng = random.Random(7)
    plan = [(rng.choice(TENANTS), rng.randint(1, 30), rng.randint(1, max_tokens)) for _ in range(requests)]
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=60, limits=limits) as client:

        async def worker() -> None:
            while plan:
                tenant, words, tokens = plan.pop()
                body = {"model": "std", "messages": [{"role": "user", "content": "chaos " * words}],
                        "max_tokens": tokens, "stream": stream}  # fmt: skip
                url = proxy.url + "/v1/chat/completions"
                try:
                    async with client.stream("POST", url, json=body, headers=proxy.headers(tenant)) as response:
                        async for _ in response.aiter_lines():
                            pass
                        ending = str(response.status_code)
                except httpx.HTTPError as error:
                    ending = type(error).__name__
                endings[ending] = endings.get(ending, 0) + 1

        await asyncio.gather(*(worker() for _ in range(clients)))
    return endings


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=400)
    parser.add_argument("--clients", type=int, default=32)
    parser.add_argument("--max-tokens", type=int, default=16)
    parser.add_argument("--no-stream", action="store_true")
    parser.add_argument("--appendfsync", choices=("always", "everysec"), default="everysec")
    parser.add_argument("--hf-online", action="store_true")
    args = parser.parse_args()
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    if args.hf_online:
        enforce_stack.ENV_BASE.pop("HF_HUB_OFFLINE", None)
    base = Path(tempfile.mkdtemp(prefix="quotacalc-bench-chaos-cost-"))
    folder = generate(base)
    edit_policy(folder, **{name: {"bucket_depth_units": 1e12, "bucket_rate_units_per_s": 1e-9} for name in TENANTS})
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4", state="redis", lease_tokens=4, lease_ttl_s=4.0)
    data = base / "redis"
    data.mkdir()
    redis_server = RedisServer(persist_dir=data, appendfsync=args.appendfsync)
    emulator = Emulator(base / "plan.yaml", "--fail-rate", "0.05", "--seed", "3")
    proxy = None
    try:
        proxy = Proxy(folder, emulator.url, env={"QUOTACALC_REDIS_URL": redis_server.url})
        pids = {"proxy": proxy.process.pid, "emulator": emulator.process.pid, "redis": redis_server.process.pid}
        before = {name: _cpu_s(pid) for name, pid in pids.items()}
        client_before = sum(os.times()[:2])
        started = time.monotonic()
        endings = asyncio.run(_load(proxy, args.requests, args.clients, args.max_tokens, not args.no_stream))
        elapsed_s = time.monotonic() - started
        cpu_ms = {name: (_cpu_s(pid) - before[name]) * 1000 / args.requests for name, pid in pids.items()}
        cpu_ms["client"] = (sum(os.times()[:2]) - client_before) * 1000 / args.requests
    finally:
        if proxy is not None:
            proxy.stop()
        emulator.stop()
        redis_server.stop()
    print(json.dumps({"requests": args.requests, "clients": args.clients, "max_tokens": args.max_tokens,
                      "stream": not args.no_stream, "appendfsync": args.appendfsync, "hf_online": args.hf_online,
                      "endings": endings, "elapsed_s": round(elapsed_s, 1),
                      "requests_per_s": round(args.requests / elapsed_s, 1),
                      "cpu_ms_per_request": {k: round(v, 2) for k, v in cpu_ms.items()},
                      "load_average": os.getloadavg()[0]}))  # fmt: skip


if __name__ == "__main__":
    main()
