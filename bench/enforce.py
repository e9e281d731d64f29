"""The latency quotacalc's LiteLLM plugin adds to a request, side by side in one run, and the requests/s a proxy holds.

Four real LiteLLM proxies before one ``quotacalc emulate`` (fast: ``--speed 1000``, one output token, so the engine's
time is small and the same for all): the generated config without any callback, with LiteLLM's own limiters
(``--litellm-enforce builtin``: dynamic_rate_limiter_v3 and enforce_model_rate_limits), with the plugin in memory, and
with the plugin on a local redis-server. Requests go round-robin to the four, one at a time, so each sees the same
machine load; the overhead is each proxy's p50/p99 minus the bare proxy's. Every proxy also runs LiteLLM's per-key
parallel request limiter (always loaded; the master key has no limits). The plugin's own time in those same requests
is read from its ``quotacalc_plugin_seconds`` histogram (wall time inside its hooks, Redis round trips included).
Then each proxy takes ``--clients`` concurrent clients for ``--seconds`` and its requests/s is counted. Last, the
gate's own work per request in this process, without HTTP. The machine's load average is printed with the figures.

    python bench/enforce.py [--requests 200] [--clients 16] [--seconds 5]     # about 2 minutes
    python bench/enforce.py --long                                          # 2000 requests, 30 s each

Needs the litellm extra and Debian's redis-server (the Redis column is left out without it).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import yaml

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

from enforce_stack import Emulator, Proxy, RedisServer, edit_policy, edit_settings, generate  # noqa: E402


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def _throughput(proxy: Proxy, body: dict, clients: int, seconds: float) -> float:
    """Successful requests per second ``clients`` concurrent clients get from ``proxy`` over ``seconds``."""
    count = [0]
    lock = threading.Lock()
    stop_at = time.monotonic() + seconds

    def client() -> None:
        with httpx.Client(timeout=60) as http:
            while time.monotonic() < stop_at:
                reply = http.post(proxy.url + "/v1/chat/completions", json=body, headers=proxy.headers("alpha"))
                if reply.status_code == 200:
                    with lock:
                        count[0] += 1

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return count[0] / seconds


def _histogram_quantile(text: str, name: str, hook: str, before: dict[float, float], q: float) -> float:
    """The ``q`` quantile (ms) of the requests a Prometheus histogram counted since ``before`` (its cumulative counts
    then), interpolated linearly inside the bucket that holds it, as Prometheus's histogram_quantile does."""
    counts = _histogram_counts(text, name, hook)
    bounds = sorted(counts)
    delta = [counts[b] - before.get(b, 0.0) for b in bounds]
    total = delta[-1]
    if total <= 0:
        return float("nan")
    rank = q * total
    lower_bound, lower_count = 0.0, 0.0
    for bound, count in zip(bounds, delta, strict=True):
        if count >= rank:
            if bound == float("inf"):
                return lower_bound * 1000
            inside = (rank - lower_count) / max(count - lower_count, 1e-12)
            return (lower_bound + (bound - lower_bound) * inside) * 1000
        lower_bound, lower_count = bound, count
    return float("nan")


def _histogram_counts(text: str, name: str, hook: str) -> dict[float, float]:
    counts: dict[float, float] = {}
    prefix = f'{name}_bucket{{hook="{hook}",le="'
    for line in text.splitlines():
        if line.startswith(prefix):
            le, value = line[len(prefix) :].split('"} ')
            counts[float(le)] = float(value)
    return counts


def _gate_cost(folder: Path, store_url: str | None, requests: int, tokens: int) -> dict[str, float]:
    """The plugin's own work per request, in process without HTTP: admission, dispatch, the rewrite, ``tokens``
    streamed tokens (a lease renewal every 128) and settlement; p50 and p99 in ms over ``requests`` requests. With
    Redis, through the asyncio client and the bridge, as inside the proxy."""
    import asyncio

    from quotacalc.admission.bucket import Bucket
    from quotacalc.admission.state import MemoryBuckets
    from quotacalc.enforce import bridge
    from quotacalc.enforce.gate import COMPLETED, Gate, GateSettings, Ticket
    from quotacalc.enforce.settings import read_policy, read_settings

    settings = read_settings(folder / "enforce.json")
    policy, salts = read_policy(settings, folder)
    if store_url is None:
        store = MemoryBuckets([Bucket(t.bucket_rate_units_per_s, t.bucket_depth_units) for t in policy.tenants])
    else:
        from quotacalc.enforce.redis_store import RedisBuckets

        store = RedisBuckets.from_url(store_url, policy)
    gate = Gate(policy, salts, settings.admission(), store, GateSettings(inflight_per_replica=10**6))
    body = {"model": "std", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 1000, "stream": True}

    def one(index: int) -> None:
        now = time.time()
        ticket = gate.arrive(0, 10, 1000, now, f"r{index}")
        assert isinstance(ticket, Ticket)
        gate.dispatch(ticket.pool, now)
        gate.rewrite(ticket, body)
        for _ in range(tokens):
            gate.on_tokens(ticket, 1, now)
        gate.settle(ticket, COMPLETED, now)

    async def measure() -> list[float]:
        costs = []
        for index in range(requests):
            started = time.perf_counter()
            if store_url is None:
                one(index)
            else:
                await bridge.run(one, index)
            costs.append((time.perf_counter() - started) * 1000)
        return costs

    costs = asyncio.run(measure())
    return {"p50_ms": statistics.median(costs), "p99_ms": _quantile(costs, 0.99)}


def _metrics(proxy: Proxy) -> str:
    return httpx.get(proxy.url + "/quotacalc/metrics", headers=proxy.headers(None), timeout=30).text


def _configure(base: Path, name: str, kind: str) -> Path:
    """A copy of the generated litellm folder set up as ``kind``: bare, builtin, plugin or redis."""
    folder = base / name
    shutil.copytree(base / "out" / "litellm", folder)
    config = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    if kind == "bare":
        config["litellm_settings"] = {}
    elif kind == "builtin":
        config["litellm_settings"] = {"callbacks": ["dynamic_rate_limiter_v3"], "priority_reservation": {"gold": 1.0}}
        config["router_settings"]["optional_pre_call_checks"] = ["enforce_model_rate_limits"]
    (folder / "config.yaml").write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    edit_settings(
        folder,
        tenant_from="header",
        prompt_tokens="bytes4",
        records=None,
        state="redis" if kind == "redis" else "memory",
    )
    return folder


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--requests", type=int, default=200, help="sequential requests per proxy")
    parser.add_argument("--clients", type=int, default=16, help="concurrent clients in the throughput run")
    parser.add_argument("--seconds", type=float, default=5.0, help="length of each proxy's throughput run")
    parser.add_argument("--tokens", type=int, default=300, help="streamed tokens per request in the gate's own cost")
    parser.add_argument("--long", action="store_true", help="the long run: 2000 requests per proxy, 30 s each")
    parser.add_argument("--json", action="store_true", help="print the figures as JSON")
    args = parser.parse_args()
    if args.long:
        args.requests, args.seconds = max(args.requests, 2000), max(args.seconds, 30.0)
    load_before = os.getloadavg()
    base = Path(tempfile.mkdtemp(prefix="quotacalc-bench-enforce-"))
    # Deep buckets: the benchmark measures the plugin's work, not its refusals.
    folder = generate(base)
    deep = {"bucket_depth_units": 1e12, "bucket_rate_units_per_s": 1e9}
    edit_policy(folder, alpha=deep, beta=deep, gamma=deep)
    kinds = ["bare", "builtin", "plugin"] + (["redis"] if shutil.which("redis-server") else [])
    redis_server = RedisServer() if "redis" in kinds else None
    emulator = Emulator(base / "plan.yaml", "--speed", "1000")
    proxies: dict[str, Proxy] = {}
    try:
        env = {"QUOTACALC_REDIS_URL": redis_server.url} if redis_server else {}
        for kind in kinds:
            proxies[kind] = Proxy(_configure(base, kind, kind), emulator.url, env=env)
        body = {"model": "std", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 1}
        clients = {kind: httpx.Client(timeout=30) for kind in kinds}
        latencies: dict[str, list[float]] = {kind: [] for kind in kinds}
        for _ in range(20):  # warm-up
            for kind in kinds:
                clients[kind].post(
                    proxies[kind].url + "/v1/chat/completions", json=body, headers=proxies[kind].headers("alpha")
                )
        plugin_kinds = [kind for kind in kinds if kind in ("plugin", "redis")]
        metric = "quotacalc_plugin_seconds"
        hooks = ("request", "request_cpu", "pre_call", "settle")
        before = {
            (kind, hook): _histogram_counts(_metrics(proxies[kind]), metric, hook)
            for kind in plugin_kinds
            for hook in hooks
        }
        for _ in range(args.requests):
            for kind in kinds:
                started = time.perf_counter()
                response = clients[kind].post(
                    proxies[kind].url + "/v1/chat/completions", json=body, headers=proxies[kind].headers("alpha")
                )
                latencies[kind].append((time.perf_counter() - started) * 1000)
                assert response.status_code == 200, (kind, response.text[:300])
        inside: dict[str, dict[str, float]] = {}
        for kind in plugin_kinds:
            text = _metrics(proxies[kind])
            inside[kind] = {
                f"{hook}_{name}_ms": _histogram_quantile(text, metric, hook, before[(kind, hook)], q)
                for hook in hooks
                for name, q in (("p50", 0.5), ("p99", 0.99))
            }
        load_sequential = os.getloadavg()
        throughput = {kind: _throughput(proxies[kind], body, args.clients, args.seconds) for kind in kinds}
        gate_costs = {"memory": _gate_cost(base / "plugin", None, 5000, args.tokens)}
        if redis_server is not None:
            gate_costs["redis"] = _gate_cost(base / "redis", redis_server.url, 1000, args.tokens)
    finally:
        for proxy in proxies.values():
            proxy.stop()
        emulator.stop()
        if redis_server:
            redis_server.stop()
        shutil.rmtree(base, ignore_errors=True)
    load_after = os.getloadavg()
    load = {
        "cpus": os.cpu_count(),
        "load_average_1min": {"start": load_before[0], "after_sequential": load_sequential[0], "end": load_after[0]},
    }
    bare = latencies["bare"]
    figures = {
        kind: {
            "p50_ms": statistics.median(values),
            "p99_ms": _quantile(values, 0.99),
            "added_p50_ms": statistics.median(values) - statistics.median(bare),
            "added_p99_ms": _quantile(values, 0.99) - _quantile(bare, 0.99),
            "requests_per_s": throughput[kind],
        }
        for kind, values in latencies.items()
    }
    if args.json:
        print(
            json.dumps(
                {
                    "requests": args.requests,
                    "clients": args.clients,
                    "seconds": args.seconds,
                    "machine": load,
                    "figures": figures,
                    "plugin_inside_proxy": inside,
                    "gate_in_process": gate_costs,
                },
                indent=2,
            )
        )
        return
    print(
        f"{args.requests} sequential requests per proxy (round-robin), then {args.clients} clients for {args.seconds:g} s each\n"
    )
    print("| proxy | p50 ms | p99 ms | added p50 ms | added p99 ms | requests/s |")
    print("|---|---|---|---|---|---|")
    names = {
        "bare": "no callback",
        "builtin": "LiteLLM's limiters",
        "plugin": "quotacalc plugin, memory",
        "redis": "quotacalc plugin, Redis",
    }
    for kind, row in figures.items():
        print(
            f"| {names[kind]} | {row['p50_ms']:.2f} | {row['p99_ms']:.2f} | {row['added_p50_ms']:+.2f} | {row['added_p99_ms']:+.2f} | {row['requests_per_s']:.1f} |"
        )
    print(
        f"\nMachine: {load['cpus']} CPUs, load average (1 min) {load_before[0]:.2f} at the start, "
        f"{load_sequential[0]:.2f} after the sequential run, {load_after[0]:.2f} at the end"
    )
    print("\nThe plugin's own time inside the proxy, in the same sequential requests (its histogram, interpolated):\n")
    print(
        "| proxy | request p50 ms | request p99 ms | its CPU p50 ms | its CPU p99 ms | pre-call p50 ms | pre-call p99 ms | settle p50 ms | settle p99 ms |"
    )
    print("|---|---|---|---|---|---|---|---|---|")
    for kind, row in inside.items():
        cells = " | ".join(f"{row[f'{h}_{n}_ms']:.3f}" for h in hooks for n in ("p50", "p99"))
        print(f"| {names[kind]} | {cells} |")
    print(f"\nThe gate's own work per request ({args.tokens} streamed tokens, in process, no HTTP):\n")
    print("| state | p50 ms | p99 ms |")
    print("|---|---|---|")
    for state, row in gate_costs.items():
        print(f"| {state} | {row['p50_ms']:.3f} | {row['p99_ms']:.3f} |")


if __name__ == "__main__":
    main()
