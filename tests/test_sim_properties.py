"""Invariants of the simulator, property-tested over random small scenarios (hypothesis).

Every run, whatever the policy, queueing mode, arrivals, lengths, cancellations, disconnects,
errors and engine failures:
- every unit taken from a bucket (held, streamed or charged at the end) is billed or released, and nothing is
  left held (leaked == 0);
- no bucket goes negative, except under a policy that carries debt;
- a tenant within its contract (its bucket can cover all it ever asks) is never rejected while
  the pool has room;
- tokens are conserved: the engines produced exactly the tokens the requests streamed, and every
  admitted request ended exactly once;
- the run's resident KV peak (a replica's, every tenant's KV) is at least each tenant's own and at most
  one replica's KV pool.
"""

from __future__ import annotations

import json

import pytest

pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from quotacalc.admission.policies import POLICY_NAMES, make_policy
from quotacalc.inputs.scenario import scenario_from_dict
from quotacalc.sim.events import Simulation, build_setup

DEPLOYMENT = {"model": "Llama-3.1-8B-Instruct", "gpu": "h100-sxm", "tp": 1, "kv_pool_tokens": 60000}


def lengths():
    return st.one_of(
        st.builds(lambda n: {"kind": "fixed", "tokens": n}, st.integers(1, 3000)),
        st.builds(
            lambda m, s: {"kind": "lognormal", "median": m, "sigma": s, "max": 6000},
            st.floats(5, 2000),
            st.floats(0, 1.5),
        ),
        st.builds(lambda m: {"kind": "exponential", "mean": m}, st.floats(1, 500)),
        st.builds(lambda v: {"kind": "empirical", "values": v}, st.lists(st.integers(1, 4000), min_size=1, max_size=5)),
    )


def arrival():
    return st.one_of(
        st.builds(
            lambda users, think: {"kind": "closed_loop", "users": users, "think_s_mean": think},
            st.integers(1, 30),
            st.floats(0.05, 5),
        ),
        st.builds(lambda r: {"kind": "poisson", "rate_rps": r}, st.floats(0.5, 60)),
        st.builds(
            lambda r, on, off: {"kind": "on_off", "rate_rps": r, "on_s": on, "off_s": off},
            st.floats(1, 80),
            st.floats(0.5, 10),
            st.floats(0.5, 20),
        ),
    )


probability = st.sampled_from([0.0, 0.0, 0.05, 0.3])

tenant_workload = st.fixed_dictionaries(
    {
        "arrival": arrival(),
        "prompt_tokens": lengths(),
        "output_tokens": lengths(),
        "max_tokens": st.integers(1, 8000),
        "cached_fraction": st.sampled_from([0.0, 0.5]),
        "cancel_probability": probability,
        "cancel_after_s_mean": st.floats(0.1, 10),
        "disconnect_probability": probability,
        "error_probability": probability,
        "max_retries": st.sampled_from([0, 0, 1, 3]),
        "retry_jitter": st.floats(0, 1),
        "retry_on_engine_failure": st.booleans(),
        "timeout_s": st.sampled_from([None, None, 0.5, 5.0]),
    }
)

tier = st.fixed_dictionaries(
    {
        "max_context_tokens": st.integers(2000, 20000),
        "kv_cap_tokens_per_replica": st.integers(2000, 80000),
        "max_concurrent_sequences": st.integers(1, 64),
        "max_output_tokens": st.integers(1, 2000),
        "priority": st.integers(0, 3),
        "burst_s": st.floats(0.5, 60),
    }
)


@st.composite
def scenarios(draw):
    count = draw(st.integers(1, 3))
    tiers, tenants, workloads = [], [], []
    for index in range(count):
        tiers.append({"name": f"tier{index}", **draw(tier)})
        tenants.append({"name": f"t{index}", "tier": f"tier{index}", "units_per_s": draw(st.floats(50, 50000))})
        workloads.append({"tenant": f"t{index}", **draw(tenant_workload)})
    # One more tenant within its contract: its bucket covers every request it will ever send.
    tiers.append(
        {
            "name": "contract",
            "max_context_tokens": 20000,
            "kv_cap_tokens_per_replica": 60000,
            "max_concurrent_sequences": 1000,
            "max_output_tokens": 500,
            "priority": draw(st.integers(0, 3)),
        }
    )
    tenants.append({"name": "within", "tier": "contract", "units_per_s": 1e9})
    workloads.append(
        {
            "tenant": "within",
            "arrival": {"kind": "poisson", "rate_rps": draw(st.floats(0.5, 10))},
            "prompt_tokens": {"kind": "lognormal", "median": 300, "sigma": 0.5, "max": 2000},
            "output_tokens": {"kind": "lognormal", "median": 100, "sigma": 0.8, "max": 500},
            "max_tokens": 500,
        }
    )
    return {
        "plan": {
            "pools": [{"name": "p", "replicas": draw(st.integers(1, 3)), "deployment": DEPLOYMENT}],
            "tiers": tiers,
            "tenants": tenants,
        },
        "workload": {"tenants": workloads},
        "requests": draw(st.integers(1, 120)),
        "seed": draw(st.integers(0, 2**31)),
        "lease_tokens": draw(st.integers(1, 300)),
        "engine": {
            "order": draw(st.sampled_from(["fcfs", "priority"])),
            "queue_depth": draw(st.integers(1, 4)),
            "max_num_seqs": draw(st.integers(1, 48)),
            "max_num_batched_tokens": draw(st.integers(256, 8192)),
            "failure_rate_per_hour": draw(st.sampled_from([0.0, 0.0, 500.0])),
            "restart_s": draw(st.floats(0, 5)),
        },
    }


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(scenarios(), st.sampled_from(POLICY_NAMES), st.sampled_from(["fair", "deep_priority"]))
def test_invariants(document, policy, queueing):
    setup = build_setup(scenario_from_dict(document))
    simulation = Simulation(setup, policy, queueing)
    result = simulation.run()

    assert result.live_requests == 0
    assert result.leaked_reservation_units == 0
    json.dumps(result.model_dump(mode="json"), allow_nan=False)  # --json stays strict: no NaN or Infinity
    debt = make_policy(policy).carries_debt
    for tenant in result.tenants:
        assert tenant.leaked_reservation_units == 0
        assert debt or tenant.bucket_min_units is None or tenant.bucket_min_units >= 0
        taken = tenant.reserved_units + tenant.streamed_units + tenant.charged_units
        assert taken == pytest.approx(tenant.debited_units + tenant.released_units, rel=1e-9, abs=1e-6)
        if policy != "debit_on_completion_forgiving":
            assert tenant.quota_overshoot_units == 0
        assert sum(tenant.terminal.values()) == tenant.admitted
        # Every attempt (a first send or a client's retry) ends one way.
        attempts = tenant.requests + tenant.retries
        assert tenant.admitted + tenant.admission_rejects + sum(tenant.other_rejects.values()) == attempts
        if queueing == "fair":  # the gateway's caps hold (deep_priority forwards without them)
            tier = next(t.tier for t in setup.tenants if t.name == tenant.tenant)
            assert tenant.concurrent_sequences_peak <= tier.max_concurrent_sequences
            assert tenant.resident_kv_peak_tokens <= tier.kv_cap_tokens_per_replica
    for bucket in simulation.buckets:
        assert debt or bucket.level >= 0
    # The run's KV peak is a replica's total: at least any tenant's share of one, at most what one replica holds.
    assert max((t.resident_kv_peak_tokens for t in result.tenants), default=0) <= result.resident_kv_peak_tokens
    assert result.resident_kv_peak_tokens <= max(pool.kv_pool_tokens for pool in setup.pools)
    # Tokens conserved: what the engines produced is what the requests streamed.
    assert result.engine_output_tokens == result.output_tokens
    # Within its contract, while the pool has room (no context, KV-cap or queue limit reached): never rejected.
    within = next((t for t in result.tenants if t.tenant == "within"), None)
    if within is not None:
        assert within.admission_rejects == 0
        assert within.other_rejects == {"context": 0, "kv_cap": 0, "never_admissible": 0}
