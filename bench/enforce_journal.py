"""What the journal (quotacalc.enforce.journal) adds to the plugin's own time per request, in process.

Two enforcers over the same generated config, one with ``journal: true`` (the default) and one with ``journal: false``,
each driven through its real hooks as LiteLLM drives them: the pre-call hook (admission, the fair queue, the rewrite),
the streaming hook over ``--tokens`` chunks of LiteLLM's own chunk type (a lease renewed every ``--lease-tokens``) and
the settlement at the stream's end; requests alternate between the two, so both see the same machine. State memory,
or ``--redis`` for a local redis-server (Debian's), through the asyncio client as in the proxy. Prints p50/p99 (ms) of
each, the p50/p99 of the difference within each pair of requests, and the journal's bytes per request.

    python bench/enforce_journal.py [--requests 2000] [--tokens 300] [--lease-tokens 128] [--redis]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

from enforce_stack import RedisServer, edit_policy, edit_settings, generate, in_process_enforcer  # noqa: E402


def _quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=2000, help="requests per enforcer")
    parser.add_argument("--tokens", type=int, default=300, help="streamed tokens per request")
    parser.add_argument("--lease-tokens", type=int, default=128, help="output tokens per lease")
    parser.add_argument("--redis", action="store_true", help="state redis on a local redis-server")
    args = parser.parse_args()
    from litellm.types.utils import Delta, ModelResponseStream, StreamingChoices

    redis_server = RedisServer() if args.redis else None
    try:
        with tempfile.TemporaryDirectory() as scratch:
            enforcers = {}
            for journal in (True, False):
                place = Path(scratch) / ("journal" if journal else "none")
                place.mkdir()
                folder = generate(place)
                edit_policy(folder, alpha={"bucket_depth_units": 1e15, "bucket_rate_units_per_s": 1e12})
                edit_settings(
                    folder, tenant_from="header", prompt_tokens="bytes4", journal=journal,
                    state="redis" if args.redis else "memory", lease_tokens=args.lease_tokens,
                    inflight_per_replica=10**6,
                )  # fmt: skip
                enforcers[journal] = in_process_enforcer(folder, redis_server.url if redis_server else None)
            body = {"model": "std", "messages": [{"role": "user", "content": "hello"}], "max_tokens": 1000,
                    "stream": True, "proxy_server_request": {"headers": {"x-tenant-id": "alpha"}}}  # fmt: skip
            chunk = ModelResponseStream(choices=[StreamingChoices(index=0, delta=Delta(content="x"))])

            async def engine():
                for _ in range(args.tokens):
                    yield chunk

            async def one(enforcer) -> float:
                started = time.perf_counter()
                data = await enforcer.async_pre_call_hook(None, None, dict(body), "acompletion")
                async for _ in enforcer.async_post_call_streaming_iterator_hook(None, engine(), data):
                    pass
                return (time.perf_counter() - started) * 1000

            async def measure() -> dict[bool, list[float]]:
                costs: dict[bool, list[float]] = {True: [], False: []}
                for index in range(args.requests):
                    # Each first in turn: the second of a pair runs on warmer caches.
                    for journal in (True, False) if index % 2 else (False, True):
                        costs[journal].append(await one(enforcers[journal]))
                return costs

            costs = asyncio.run(measure())
            journal = enforcers[True].journal
            written = journal.appended if journal is not None else 0
            figures = {
                ("journal" if on else "no journal"): {
                    "p50_ms": round(statistics.median(values), 4),
                    "p99_ms": round(_quantile(values, 0.99), 4),
                }
                for on, values in costs.items()
            }
            added = [on - off for on, off in zip(costs[True], costs[False], strict=True)]
            figures["added_per_request_ms"] = {
                "p50": round(statistics.median(added), 4),
                "p99": round(_quantile(added, 0.99), 4),
            }
            figures["journal_bytes_per_request"] = round(written / args.requests, 1) if written else None
            print(json.dumps(figures, indent=1))
            for enforcer in enforcers.values():
                enforcer.shutdown()
    finally:
        if redis_server is not None:
            redis_server.stop()


if __name__ == "__main__":
    main()
