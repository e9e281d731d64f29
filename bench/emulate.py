"""How well ``quotacalc emulate`` keeps the priced time, and what it holds, on one core.

Usage (from the repo root, with the ``emulate`` extra installed):

    python bench/emulate.py [--markdown] [--quick]

The server runs as a user runs it (``quotacalc emulate``), pinned to CPU 0; the client (aiohttp, in this
process) to CPU 1. Each load fires N streaming completions at once (distinct prompts of 256 tokens, 128
output tokens with ``ignore_eos``: vllm bench serve's random dataset at an infinite request rate) and
records, on the client, each request's time to first token, every gap between tokens and each request's
mean gap. The client writes raw HTTP on connections opened beforehand, so its own cost stays small.

What price gives for that load is the replica model stepping the same requests: the emulator's pure core
run on a virtual clock (its steps are ``ReplicaModel.step_time_s`` and ``mixed_step_time_s``, held to them by
tests/test_emulate_core.py), plus the request overhead in the first token. The table compares the client's
percentiles, times the speed, with those; "keeps time" means p50 within 10% and p99 within 25%.

Memory: the server's resident set (``VmRSS``) idle and with 1,000 streams open, at a speed slow enough that
they all stay open.
"""

from __future__ import annotations

import argparse
import asyncio
import itertools
import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: examples/llama-3.3-70b-h100.yaml's deployment with a decode batch of 1,024 (the engine's max_num_seqs), so
#: every stream of a load runs at once on one replica.
PLAN = """\
model: meta-llama/Llama-3.3-70B-Instruct
gpu: h100-sxm
tp: 4
weight_dtype: fp8
kv_dtype: bf16
batch: 1024
max_num_seqs: 1024
context: 384
kv_pool_tokens: 646503
"""
PROMPT_TOKENS = 256
OUTPUT_TOKENS = 128


def _percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def _prompt(index: int, tokens: int = PROMPT_TOKENS) -> str:
    # Distinct from the first block on, so nothing is served from the prefix cache; four bytes a token.
    return "".join(f"{(index * 7919 + i) % 10_000:04d}" for i in range(tokens))


class Server:
    def __init__(self, plan: str, speed: float) -> None:
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        command = [sys.executable, "-c", "from quotacalc.cli.entry import main; main()", "emulate", plan,
                   "--port", "0", "--speed", str(speed)]  # fmt: skip
        self.process = subprocess.Popen(
            command, stderr=subprocess.PIPE, text=True, env=env, preexec_fn=lambda: os.sched_setaffinity(0, {0})
        )
        for line in self.process.stderr:
            found = re.search(r"listening on (http://\S+)", line)
            if found:
                self.url = found.group(1)
                return
        raise RuntimeError("the emulator did not start")

    def cpu_s(self) -> float:
        """User and system CPU seconds the server has used."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def lag(self) -> tuple[float, float, int]:
        """The server's own view of its timekeeping: the mean and the p99 bucket bound of how late its steps handed
        out their tokens (quotacalc:emulate_step_lag_seconds, wall seconds), and its late steps."""
        from urllib.request import urlopen

        text = urlopen(self.url + "/metrics", timeout=10).read().decode()
        values: dict[str, float] = {}
        buckets: list[tuple[float, float]] = []
        for line in text.splitlines():
            if line.startswith("quotacalc:emulate_step_lag_seconds_bucket"):
                bound = line.split('le="', 1)[1].split('"', 1)[0]
                buckets.append((float(bound), float(line.rsplit(" ", 1)[1])))
            elif line.startswith("quotacalc:"):
                values[line.split("{", 1)[0]] = float(line.rsplit(" ", 1)[1])
        count = values["quotacalc:emulate_step_lag_seconds_count"]
        p99 = next(bound for bound, cumulative in buckets if cumulative >= 0.99 * count)
        mean = values["quotacalc:emulate_step_lag_seconds_sum"] / count
        return mean, p99, int(values["quotacalc:emulate_late_steps_total"])

    def rss_mb(self) -> float:
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        return int(re.search(r"VmRSS:\s+(\d+) kB", status).group(1)) / 1024

    def stop(self) -> None:
        self.process.send_signal(signal.SIGINT)
        self.process.wait(timeout=10)


async def _load(url: str, concurrency: int, output_tokens: int):
    """Every request written at once on a connection opened beforehand (raw HTTP/1.1 over asyncio streams: the
    client's own cost per request and per token is kept far below the server's, so what it measures is the
    server); each request's arrival is the moment its bytes were written."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    connections = [await asyncio.open_connection(host, int(port)) for _ in range(concurrency)]
    requests = []
    for index in range(concurrency):
        body = json.dumps({"prompt": _prompt(index), "max_tokens": output_tokens, "ignore_eos": True,
                           "stream": True}).encode()  # fmt: skip
        head = (f"POST /v1/completions HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
                f"Content-Length: {len(body)}\r\n\r\n").encode()  # fmt: skip
        requests.append(head + body)

    async def read(reader) -> list[float]:
        times = []
        while True:
            line = await reader.readline()
            if not line or line.startswith(b"data: [DONE]"):
                return times
            # A token's chunk has a non-empty text (the filler's words start with a space); no JSON parse.
            if line.startswith(b"data: {") and b'"text":" ' in line:
                times.append(time.monotonic())

    start = time.monotonic()
    arrivals = []
    for (_, writer), request in zip(connections, requests, strict=True):
        arrivals.append(time.monotonic() - start)
        writer.write(request)
    results = await asyncio.gather(*(read(reader) for reader, _ in connections))
    wall_s = time.monotonic() - start
    for _, writer in connections:
        writer.close()
    ttfts = [times[0] - start - arrival for times, arrival in zip(results, arrivals, strict=True)]
    gaps = [b - a for times in results for a, b in itertools.pairwise(times)]
    means = [(times[-1] - times[0]) / (len(times) - 1) for times in results]
    return arrivals, ttfts, gaps, means, wall_s


def ideal(serving, arrivals_s: list[float], output_tokens: int) -> tuple[list[float], list[float]]:
    """What the replica model gives the same load: the pure core on a virtual clock, each request joining the
    queue at its arrival (engine seconds) plus the request overhead."""
    from quotacalc.emulate.engine import EngineCore, Sequence

    engine = EngineCore(serving.engine)
    block = serving.engine.block_tokens
    pending = sorted((arrival, index) for index, arrival in enumerate(arrivals_s))
    times: dict[int, list[float]] = {index: [] for index in range(len(arrivals_s))}
    now = 0.0
    position = 0
    while position < len(pending) or engine.has_work():
        while position < len(pending) and pending[position][0] + serving.request_overhead_s <= now:
            arrival, index = pending[position]
            engine.add(Sequence(index, data=_prompt(index).encode(), block_tokens=block, arrival_s=arrival,
                                target_tokens=output_tokens))  # fmt: skip
            position += 1
        step = engine.schedule(now) if engine.has_work() else None
        if step is None:
            now = pending[position][0] + serving.request_overhead_s
            continue
        now = step.start_s + step.duration_s
        for sequence in engine.complete(step):
            times[sequence.id].append(now)
    ttfts = [t[0] - arrivals_s[index] for index, t in times.items()]
    gaps = [b - a for t in times.values() for a, b in itertools.pairwise(t)]
    means = [(t[-1] - t[0]) / (len(t) - 1) for t in times.values()]
    return ttfts, gaps, means


def keeps_time(measured: list[float], expected: list[float], speed: float) -> tuple[float, float, float, float, bool]:
    p50, p99 = _percentile(measured, 0.5) * speed, _percentile(measured, 0.99) * speed
    e50, e99 = _percentile(expected, 0.5), _percentile(expected, 0.99)
    ok = abs(p50 / e50 - 1) <= 0.10 and abs(p99 / e99 - 1) <= 0.25
    return p50, p99, e50, e99, ok


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--quick", action="store_true", help="fewer points")
    args = parser.parse_args()
    os.sched_setaffinity(0, {1})
    from quotacalc.cli.emulate import _serving

    with tempfile.TemporaryDirectory() as folder:
        plan = str(Path(folder) / "bench.yaml")
        Path(plan).write_text(PLAN)
        serving, _ = _serving(plan, None, None, None, None)
        points = [(1.0, 256)] if args.quick else [(1.0, 64), (1.0, 256), (1.0, 512), (2.0, 256), (4.0, 256),
                                                  (8.0, 256)]  # fmt: skip
        rows = []
        for speed, concurrency in points:
            server = Server(plan, speed)
            try:
                cpu_before = server.cpu_s()
                arrivals, ttfts, gaps, means, wall_s = asyncio.run(_load(server.url, concurrency, OUTPUT_TOKENS))
                cpu_share = (server.cpu_s() - cpu_before) / wall_s  # warm-up included: an upper bound
                lag_mean, lag_p99, late = server.lag()
            finally:
                server.stop()
            expected_ttft, expected_itl, expected_means = ideal(serving, [a * speed for a in arrivals], OUTPUT_TOKENS)
            ttft = keeps_time(ttfts, expected_ttft, speed)
            itl = keeps_time(gaps, expected_itl, speed)
            mean_itl = keeps_time(means, expected_means, speed)
            tokens_per_s = concurrency * OUTPUT_TOKENS / wall_s
            rows.append((speed, concurrency, ttft, itl, mean_itl, tokens_per_s, cpu_share, lag_mean, lag_p99, late))
            print(f"speed {speed:g} streams {concurrency}: TTFT p50 {ttft[0] * 1e3:.1f}/{ttft[2] * 1e3:.1f} ms "
                  f"p99 {ttft[1] * 1e3:.1f}/{ttft[3] * 1e3:.1f} ms; ITL p50 {itl[0] * 1e3:.2f}/{itl[2] * 1e3:.2f} ms "
                  f"p99 {itl[1] * 1e3:.2f}/{itl[3] * 1e3:.2f} ms; {tokens_per_s:,.0f} tokens/s wall; "
                  f"request mean ITL p50 {mean_itl[0] * 1e3:.2f}/{mean_itl[2] * 1e3:.2f} ms "
                  f"p99 {mean_itl[1] * 1e3:.2f}/{mean_itl[3] * 1e3:.2f} ms; server CPU {cpu_share:.0%}; step lag mean {lag_mean * 1e3:.1f} ms, "
                  f"p99 <= {lag_p99 * 1e3:g} ms; late steps {late}; "
                  f"keeps time: {ttft[4] and itl[4]}", file=sys.stderr)  # fmt: skip
        memory = None if args.quick else _memory(plan)
    if args.markdown:
        print("| speed | streams | TTFT p50 measured / priced | TTFT p99 | ITL p50 measured / priced | ITL p99 "
              "| a request's mean ITL p50, p99 | tokens/s (wall) | server CPU | step lag mean, p99 | keeps time |")  # fmt: skip
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|")
        for speed, concurrency, ttft, itl, mean_itl, tokens_per_s, cpu_share, lag_mean, lag_p99, late in rows:
            print(f"| {speed:g} | {concurrency:,} | {ttft[0] * 1e3:.0f} / {ttft[2] * 1e3:.0f} ms "
                  f"| {ttft[1] * 1e3:.0f} / {ttft[3] * 1e3:.0f} ms | {itl[0] * 1e3:.1f} / {itl[2] * 1e3:.1f} ms "
                  f"| {itl[1] * 1e3:.1f} / {itl[3] * 1e3:.1f} ms "
                  f"| {mean_itl[0] * 1e3:.1f} / {mean_itl[2] * 1e3:.1f}, {mean_itl[1] * 1e3:.1f} / {mean_itl[3] * 1e3:.1f} ms "
                  f"| {tokens_per_s:,.0f} | {cpu_share:.0%} | {lag_mean * 1e3:.1f}, <= {lag_p99 * 1e3:g} ms "
                  f"{'(' + format(late, ',') + ' late) ' if late else ''}"
                  f"| {'yes' if ttft[4] and itl[4] else 'no'} |")  # fmt: skip
        if memory is not None:
            print(f"\nMemory (VmRSS): {memory[0]:.0f} MB idle, {memory[1]:.0f} MB with 1,000 streams open "
                  f"({(memory[1] - memory[0]) * 1024 / 1000:.0f} kB a stream).")  # fmt: skip


def _memory(plan: str, streams: int = 1000) -> tuple[float, float]:
    """The server's RSS idle, and with ``streams`` streams open, each past its first token and still read."""
    server = Server(plan, 0.2)
    try:
        idle = server.rss_mb()

        async def hold() -> float:
            import aiohttp

            opened = 0
            all_open = asyncio.Event()
            release = asyncio.Event()

            async def keep(session, index: int) -> None:
                nonlocal opened
                body = {"prompt": _prompt(index, 16), "max_tokens": 100_000, "ignore_eos": True, "stream": True}
                async with session.post(server.url + "/v1/completions", json=body) as response:
                    first = True
                    async for line in response.content:
                        if first and line.startswith(b"data: {"):
                            first = False
                            opened += 1
                            if opened == streams:
                                all_open.set()
                        if release.is_set():
                            return

            connector = aiohttp.TCPConnector(limit=0)
            async with aiohttp.ClientSession(connector=connector, timeout=aiohttp.ClientTimeout(total=600)) as session:
                tasks = [asyncio.ensure_future(keep(session, i)) for i in range(streams)]
                await asyncio.wait_for(all_open.wait(), timeout=300)
                await asyncio.sleep(2)
                loaded = server.rss_mb()
                release.set()
                for task in tasks:
                    task.cancel()
                await asyncio.gather(*tasks, return_exceptions=True)
                return loaded

        loaded = asyncio.run(hold())
    finally:
        server.stop()
    return idle, loaded


if __name__ == "__main__":
    main()
