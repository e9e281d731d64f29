"""Clients that behave as real ones do: retries that honour Retry-After with jitter and a limit, timeouts,
closed-loop users with think time, and a retry on another replica after an engine failure."""

from __future__ import annotations

import pytest

from quotacalc.inputs.scenario import scenario_from_dict
from quotacalc.sim.events import Simulation, build_setup

LLAMA_8B = {"model": "Llama-3.1-8B-Instruct", "gpu": "h100-sxm", "tp": 1}
TIER = {
    "name": "open",
    "max_context_tokens": 131072,
    "kv_cap_tokens_per_replica": 10_000_000,
    "max_concurrent_sequences": 100_000,
    "max_output_tokens": 65536,
    "priority": 0,
    "burst_s": 5,
}


def scenario(workload: dict, *, units_per_s: float = 1e8, replicas: int = 1, **extra: object) -> dict:
    return {
        "plan": {
            "pools": [{"name": "p", "replicas": replicas, "deployment": LLAMA_8B}],
            "tiers": [TIER],
            "tenants": [{"name": "t", "tier": "open", "units_per_s": units_per_s}],
        },
        "workload": {
            "tenants": [
                {
                    "tenant": "t",
                    "prompt_tokens": {"kind": "fixed", "tokens": 500},
                    "output_tokens": {"kind": "fixed", "tokens": 100},
                    "max_tokens": 100,
                    **workload,
                }
            ]
        },
        **extra,
    }


def run(document: dict, policy: str = "reserve_capped", queueing: str = "fair"):
    return Simulation(build_setup(scenario_from_dict(document)), policy, queueing).run()


def test_a_429_costs_the_client_its_retry_after_and_a_limit_ends_the_retries():
    """A tenant offering about 3x its 3,000 units/s (a request costs 500 + 4.84 x 100 = 984 units): clients that
    retry are admitted more often than clients that take the first 429, wait the bucket for it, and give up
    after their limit."""
    offered = {"arrival": {"kind": "poisson", "rate_rps": 9}}
    once = run(scenario(offered, units_per_s=3000, duration_s=200))
    retrying = run(scenario({**offered, "max_retries": 3, "retry_jitter": 0.5}, units_per_s=3000, duration_s=200))
    assert once.retries == 0 and once.gave_up == 0
    assert retrying.retries > 0 and retrying.gave_up > 0
    assert retrying.retries <= 3 * retrying.requests
    # Every attempt ends one way: admitted, a 429, or refused otherwise.
    assert retrying.requests + retrying.retries == (
        retrying.admitted + retrying.admission_rejects + sum(retrying.other_rejects.values())
    )
    # The bucket admits what its rate allows either way; the retrying clients pay for it in waiting.
    (tenant,) = retrying.tenants
    assert tenant.wait_s_mean["bucket"] > 1.0
    assert retrying.ttft_p99_s > once.ttft_p99_s
    assert retrying.gave_up < once.admission_rejects


def test_a_client_abandons_a_request_with_no_first_token_by_its_timeout():
    """Twice what the replica serves: queues grow without bound, and clients give up after 5 s."""
    document = scenario({"arrival": {"kind": "poisson", "rate_rps": 90}, "timeout_s": 5}, duration_s=60)
    result = run(document)
    assert result.terminal["timeout"] > 0
    assert result.leaked_reservation_units == 0 and result.live_requests == 0
    assert result.ttft_p99_s <= 5.0 + 0.1  # no request that waited past its timeout got a first token


def test_closed_loop_users_send_one_request_at_a_time_and_obey_littles_law():
    """20 users thinking 2 s on average, on an idle replica serving each request in about 0.75 s: about
    20 / (2 + 0.75) requests a second (Little's law), never more than 20 at once."""
    document = scenario({"arrival": {"kind": "closed_loop", "users": 20, "think_s_mean": 2.0}}, duration_s=300)
    result = run(document)
    (tenant,) = result.tenants
    assert tenant.concurrent_sequences_peak <= 20
    latency_s = result.ttft_p50_s + 99 * result.itl_p50_s
    expected = 20 / (2.0 + latency_s) * 300
    assert result.requests == pytest.approx(expected, rel=0.08)


def test_a_request_lost_to_an_engine_failure_is_retried_on_a_replica_that_is_up():
    workload = {"arrival": {"kind": "poisson", "rate_rps": 20}}
    engine = {"failure_rate_per_hour": 300, "restart_s": 30}
    lost = run(scenario(workload, replicas=2, requests=3000, engine=engine))
    retried = run(
        scenario(
            {**workload, "max_retries": 2, "retry_on_engine_failure": True}, replicas=2, requests=3000, engine=engine
        )
    )
    assert lost.terminal["engine_failure"] > 0 and retried.retries > 0
    # Each retry is another attempt at a lost request: more requests end well, fewer are lost for good.
    assert retried.completed > lost.completed
    assert retried.terminal["engine_failure"] - retried.retries < lost.terminal["engine_failure"]
    assert retried.leaked_reservation_units == 0 and retried.live_requests == 0


def test_a_retried_request_is_offered_once():
    """Offered load is what the clients want served, not how often they ask: retries do not inflate it."""
    offered = {"arrival": {"kind": "poisson", "rate_rps": 9}}
    once = run(scenario(offered, units_per_s=3000, duration_s=100))
    retrying = run(scenario({**offered, "max_retries": 3}, units_per_s=3000, duration_s=100))
    assert retrying.tenants[0].offered_units_per_s == pytest.approx(once.tenants[0].offered_units_per_s, rel=1e-12)
