"""``quotacalc emulate PLAN.yaml``: serve a plan's pools as OpenAI-compatible engines at the priced speed.

Parse, read and price the plan (the same path as ``check`` and ``generate``), then run one server of
``quotacalc.emulate.server`` per pool (or the one ``--pool`` names) until Ctrl-C (exit 130) or SIGTERM (exit 0).
"""

from __future__ import annotations

import errno
import math
import os
import sys
import threading
from typing import Annotated

import typer

from quotacalc.cli.options import whole_number
from quotacalc.errors import QuotacalcError, UsageError


def _whole(text: str | int) -> int:
    """whole_number, given the default as a number when the flag is absent."""
    return text if isinstance(text, int) else whole_number(text)


def _number(text: str | float) -> float:
    if isinstance(text, (int, float)):
        return float(text)
    try:
        value = float(text)
    except ValueError:
        raise typer.BadParameter(f"must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise typer.BadParameter(f"must be a finite number, got {text!r}")
    return value


def emulate_command(
    plan: Annotated[str, typer.Argument(help="plan YAML file (flat or platform)", show_default=False)],
    pool: Annotated[
        str | None,
        typer.Option("--pool", help="the plan's pool to serve (default: every pool, each on its own port)"),
    ] = None,
    host: Annotated[str, typer.Option("--host", help="address to listen on")] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(
            "--port",
            help="port to listen on; several pools take it and the next ones in the plan's order (0: any free "
            "one each, printed)",
            parser=_whole,
        ),
    ] = 8000,
    speed: Annotated[
        float,
        typer.Option("--speed", help="run the engine this many times faster than the priced replica", parser=_number),
    ] = 1.0,
    seed: Annotated[int, typer.Option("--seed", help="seed of the output lengths and faults", parser=_whole)] = 0,
    fail_rate: Annotated[
        float,
        typer.Option("--fail-rate", help="share of requests the replica fails in flight, in [0, 1]", parser=_number),
    ] = 0.0,
    replicas: Annotated[
        int | None,
        typer.Option("--replicas", help="replicas behind the server (default: the pool's)", parser=_whole),
    ] = None,
    scheduling_policy: Annotated[
        str | None,
        typer.Option("--scheduling-policy", help="fcfs or priority (default: the policy generate writes for the pool)"),
    ] = None,
    output_tokens: Annotated[
        float | None,
        typer.Option(
            "--output-tokens",
            help="mean output tokens of a request without ignore_eos (default: the pool's load_output_tokens)",
            parser=_number,
        ),
    ] = None,
):
    """Serve a plan's pools as OpenAI-compatible engines at the priced speed (KV pool, prefix cache, priorities)."""
    _check(port, speed, fail_rate, replicas, scheduling_policy, output_tokens)
    _require_aiohttp()
    servings = _servings(plan, pool, replicas, scheduling_policy, output_tokens)
    if port and port + len(servings) - 1 > 65535:
        raise UsageError(
            f"{len(servings)} pools need ports {port} to {port + len(servings) - 1}, past 65535",
            field="--port",
            fix="choose a lower port, 0 for free ones, or --pool to serve one",
        )
    from quotacalc.cli.streams import print_warnings

    print_warnings(tuple(warning for _, warnings in servings for warning in warnings))
    run([serving for serving, _ in servings], host, port, speed=speed, seed=seed, fail_rate=fail_rate)


def _require_aiohttp() -> None:
    """Fail before pricing, in one line, where the server's library is not installed."""
    try:
        import aiohttp  # noqa: F401
    except ImportError:
        raise QuotacalcError(
            "the emulator's server needs aiohttp, which is not installed", fix="pip install 'quotacalc[emulate]'"
        ) from None


def _check(port, speed, fail_rate, replicas, scheduling_policy, output_tokens) -> None:
    if not 0 <= port <= 65535:
        raise UsageError(f"must be from 0 to 65535, got {port}", field="--port")
    if not 0 < speed <= 10_000:
        raise UsageError(f"must be above 0 and at most 10000, got {speed:g}", field="--speed")
    if not 0 <= fail_rate <= 1:
        raise UsageError(f"must be from 0 to 1, got {fail_rate:g}", field="--fail-rate")
    if replicas is not None and not 1 <= replicas <= 1024:
        raise UsageError(f"must be from 1 to 1024, got {replicas}", field="--replicas")
    if scheduling_policy is not None and scheduling_policy not in ("fcfs", "priority"):
        raise UsageError(f"must be fcfs or priority, got '{scheduling_policy}'", field="--scheduling-policy")
    if output_tokens is not None and not output_tokens >= 1:
        raise UsageError(f"must be at least 1, got {output_tokens:g}", field="--output-tokens")


def _serving(plan_path: str, pool: str | None, replicas, scheduling_policy, output_tokens):
    """The serving settings of the pool named, or of the plan's only pool; (settings, warnings)."""
    servings = _servings(plan_path, pool, replicas, scheduling_policy, output_tokens)
    if len(servings) > 1:
        names = [serving.name for serving, _ in servings]
        raise UsageError(f"the plan has {len(names)} pools ({', '.join(names)})", field="--pool", fix="name one")
    return servings[0]


def _servings(plan_path: str, pool: str | None, replicas, scheduling_policy, output_tokens):
    """Read and price the plan as check and generate do, and build the serving settings of the pool named, or of
    every pool in the plan's order: a list of (settings, warnings)."""
    from quotacalc.emulate.pool import pool_serving
    from quotacalc.errors import close_names
    from quotacalc.inputs.plan import read_plan
    from quotacalc.priced import price_read_plan

    read = read_plan(plan_path)
    names = [p.name for p in read.plan.pools]
    if pool is not None and pool not in names:
        near = close_names(pool, names)
        hint = f"did you mean {', '.join(near)}?" if near else f"one of {', '.join(names)}"
        raise UsageError(f"no pool '{pool}' in {plan_path}", field="--pool", fix=hint)
    planned = price_read_plan(read)
    priced, policy = planned.prices, planned.policy
    chosen = [pool] if pool is not None else names
    return [
        (
            pool_serving(
                policy,
                priced,
                name,
                replicas=replicas,
                scheduling_policy=scheduling_policy,
                mean_output_tokens=output_tokens,
            ),
            # emulate takes no deployment flags: each key is named where the plan sets it.
            tuple(
                f"pool '{name}': {warning.worded(planned.key_namer(name))}" for warning in priced[name].pricing_warnings
            ),
        )
        for name in chosen
    ]


def run(servings, host: str, port: int, *, speed: float, seed: int, fail_rate: float) -> None:
    """Serve each pool on its own port (``port`` and the next ones; 0: a free one each) until Ctrl-C
    (KeyboardInterrupt: the CLI exits 130) or SIGTERM; a pool that cannot listen stops them all."""
    import asyncio
    import signal

    from quotacalc.core.words import plural
    from quotacalc.emulate.server import ServerOptions, serve

    options = ServerOptions(speed=speed, seed=seed, fail_rate=fail_rate)

    def ready_for(serving):
        engine = serving.engine

        def ready(bound: int) -> None:
            sys.stderr.write(
                f"quotacalc emulate: pool '{serving.name}' as '{serving.served_model_name}': "
                f"{plural(serving.replicas, 'replica')}, KV pool {engine.num_blocks * engine.block_tokens:,} tokens "
                f"({engine.num_blocks:,} blocks of {engine.block_tokens}), max_num_seqs {engine.max_num_seqs}, "
                f"max_num_batched_tokens {engine.max_num_batched_tokens:,}, "
                f"{'priority' if engine.priority_policy else 'fcfs'}, speed {speed:g}\n"
            )
            sys.stderr.write(f"quotacalc emulate: listening on http://{_url_host(host)}:{bound}\n")
            sys.stderr.flush()

        return ready

    async def one(serving, pool_port: int, stop: asyncio.Event) -> None:
        try:
            await serve(serving, options, host, pool_port, ready=ready_for(serving), stop=stop)
        except OSError as error:
            where = f"{host}:{pool_port}" + (f" (pool '{serving.name}')" if len(servings) > 1 else "")
            if error.errno == errno.EADDRINUSE:
                raise QuotacalcError(
                    f"{where} is already in use", field="--port", fix="choose another port, or stop what is on it"
                ) from None
            raise QuotacalcError(f"cannot listen on {where}: {error.strerror or error}", field="--host") from None

    async def main() -> None:
        stop = asyncio.Event()
        interrupted = False

        def on_interrupt() -> None:
            nonlocal interrupted
            interrupted = True
            stop.set()
            # Ctrl-C ends the process within 2 s whatever an open connection's handler is doing: the pools close
            # as on SIGTERM, and a close that outlasts the bound is cut short.
            watchdog = threading.Timer(INTERRUPT_BOUND_S, _exit_interrupted)
            watchdog.daemon = True
            watchdog.start()

        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, on_interrupt)
        tasks = [
            asyncio.ensure_future(one(serving, port + index if port else 0, stop))
            for index, serving in enumerate(servings)
        ]
        done, pending = await asyncio.wait(tasks, return_when=asyncio.FIRST_EXCEPTION)
        failed = [task for task in done if task.exception() is not None]
        if failed:
            stop.set()  # the pools already listening close too
            await asyncio.gather(*pending, return_exceptions=True)
            raise failed[0].exception()
        if interrupted:
            raise KeyboardInterrupt  # the CLI's own interrupted line and exit 130

    asyncio.run(main())


#: How long the pools may take to close after Ctrl-C before the process exits anyway (under the 2 s a user waits).
INTERRUPT_BOUND_S = 1.5


def _exit_interrupted() -> None:
    sys.stderr.write("quotacalc: interrupted\n")
    sys.stderr.flush()
    os._exit(130)


def _url_host(host: str) -> str:
    return f"[{host}]" if ":" in host else host
