"""Simulator benchmark: wall time of one policy run against requests and replicas.

Usage (from the repo root, quotacalc installed):

    python bench/simulate.py [--requests 10000,30000,100000] [--replicas 1,2,4,8] [--markdown]
    python bench/simulate.py --example [--seeds 3] [--markdown]   # the shipped example, every policy

The pool is the method's worked example (Llama 3.3 70B FP8, TP 4, H100); four tenants with
lognormal prompts (median 1,500) and outputs (median 250), cancellations and disconnects, under
reserve_capped with fair queueing. The arrival rate grows with the replicas (5 requests/s per
replica: about 16,700 units/s, 92% of the replica budget) so every row runs the pool at the same utilisation.
The first table varies the requests on 4 replicas; the second the replicas at 30,000 requests.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from quotacalc.inputs.scenario import load_scenario, scenario_from_dict
from quotacalc.sim.events import Simulation, build_setup, busy_fraction

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "simulate-platform.yaml"

DEPLOYMENT = {
    "model": "Llama-3.3-70B-Instruct",
    "gpu": "h100-sxm",
    "tp": 4,
    "weight_dtype": "fp8",
    "kv_pool_tokens": 646503,
}
TIER = {
    "name": "std",
    "max_context_tokens": 32768,
    "kv_cap_tokens_per_replica": 300000,
    "max_concurrent_sequences": 512,
    "max_output_tokens": 4096,
    "priority": 0,
}


def scenario(requests: int, replicas: int, policy: str) -> dict:
    tenants = [f"t{i}" for i in range(4)]
    return {
        "plan": {
            "pools": [{"name": "p", "replicas": replicas, "deployment": DEPLOYMENT}],
            "tiers": [TIER],
            "tenants": [{"name": t, "tier": "std", "units_per_s": 25000 * replicas} for t in tenants],
        },
        "workload": {
            "tenants": [
                {
                    "tenant": t,
                    "arrival": {"kind": "poisson", "rate_rps": 1.25 * replicas},
                    "prompt_tokens": {"kind": "lognormal", "median": 1500, "sigma": 0.8, "max": 30000},
                    "output_tokens": {"kind": "lognormal", "median": 250, "sigma": 1.0, "max": 4000},
                    "max_tokens": 4096,
                    "cancel_probability": 0.02,
                    "disconnect_probability": 0.01,
                }
                for t in tenants
            ]
        },
        "requests": requests,
        "seed": 1,
        "policies": [policy],
    }


def measure(requests: int, replicas: int, policy: str) -> tuple[float, float, float, int, float, int]:
    setup = build_setup(scenario_from_dict(scenario(requests, replicas, policy)))
    start, start_cpu = time.perf_counter(), time.process_time()
    simulation = Simulation(setup, policy, "fair")
    result = simulation.run()
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    steps = sum(r.version for pool in simulation.pools for r in pool.replicas)
    return wall, cpu, result.simulated_s, steps, busy_fraction(simulation), simulation.events


def example(seeds: int, markdown: bool) -> None:
    """The shipped example, every policy under every queueing mode, for each of ``seeds`` seeds (as --seeds runs)."""
    setup = build_setup(load_scenario(str(EXAMPLE)))
    scenario_ = setup.loaded.scenario
    combos = [(p, q) for q in scenario_.queueing for p in scenario_.policies]
    start, start_cpu = time.perf_counter(), time.process_time()
    events = requests = 0
    for offset in range(seeds):
        for policy, queueing in combos:
            simulation = Simulation(setup, policy, queueing, seed=scenario_.seed + offset)
            result = simulation.run()
            events += simulation.events
            requests += result.requests
    wall, cpu = time.perf_counter() - start, time.process_time() - start_cpu
    runs = seeds * len(combos)
    if markdown:
        print("| seeds | runs | requests | events | wall | CPU | events/s (CPU) |")
        print("|---:|---:|---:|---:|---:|---:|---:|")
        print(f"| {seeds} | {runs} | {requests:,} | {events:,} | {wall:.1f} s | {cpu:.1f} s | {events / cpu:,.0f} |")
    else:
        print(
            f"{seeds} seeds, {runs} runs, {requests:,} requests, {events:,} events: {wall:.1f} s wall, {cpu:.1f} s CPU"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", default="10000,30000,100000")
    parser.add_argument("--replicas", default="1,2,4,8")
    parser.add_argument("--policy", default="reserve_capped")
    parser.add_argument("--markdown", action="store_true")
    parser.add_argument("--example", action="store_true", help="time the shipped example, every policy")
    parser.add_argument("--seeds", type=int, default=1, help="with --example: seeds, as simulate --seeds runs")
    args = parser.parse_args()
    if args.example:
        example(args.seeds, args.markdown)
        return
    rows = []
    for requests in (int(n) for n in args.requests.split(",")):
        rows.append((requests, 4, *measure(requests, 4, args.policy)))
    for replicas in (int(n) for n in args.replicas.split(",")):
        if replicas != 4:
            rows.append((30000, replicas, *measure(30000, replicas, args.policy)))
    rows.sort(key=lambda row: (row[1] != 4, row[1], row[0]))
    if args.markdown:
        print(
            "| requests | replicas | wall | CPU | simulated | engine (macro-)steps | events | events/s (CPU) "
            "| CPU µs per request | busy |"
        )
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    for requests, replicas, wall, cpu, simulated, steps, busy, events in rows:
        per_request = cpu / requests * 1e6
        if args.markdown:
            print(
                f"| {requests:,} | {replicas} | {wall:.1f} s | {cpu:.1f} s | {simulated:,.0f} s | {steps:,} | {events:,} "
                f"| {events / cpu:,.0f} | {per_request:.0f} | {busy:.0%} |"
            )
        else:
            print(
                f"{requests:>7,} requests {replicas:>2} replicas  {wall:6.1f} s wall  {cpu:6.1f} s CPU  {simulated:8,.0f} s simulated  "
                f"{steps:>9,} steps  {per_request:5.0f} us/request  busy {busy:.0%}"
            )


if __name__ == "__main__":
    main()
