"""simulate's admission and fairness defects, each held: fair queueing by served work (VTC), never-admissible
requests, streamed debit carrying debt against the forgiving variant, prefill failures billed to the platform,
the reasons for waits and the warm-up window."""

from __future__ import annotations

import pytest

from quotacalc.inputs.scenario import scenario_from_dict
from quotacalc.sim.events import Simulation, build_setup

LLAMA_8B = {"model": "Llama-3.1-8B-Instruct", "gpu": "h100-sxm", "tp": 1}
#: Llama 3.1 8B on one H100 (``quotacalc price``): the replica's budget in units/s and W, the units of an output
#: token. The fairness scenarios offer each tenant a multiple of the budget, so both stay backlogged.
BUDGET_UNITS_PER_S = 22_678.2
W = 4.8366


def tier(**overrides: object) -> dict:
    return {
        "name": "open",
        "max_context_tokens": 131072,
        "kv_cap_tokens_per_replica": 10_000_000,
        "max_concurrent_sequences": 100_000,
        "max_output_tokens": 65536,
        "priority": 0,
        **overrides,
    }


def two_tenants(output_a: int, output_b: int, *, rate_a=1e8, rate_b=1e8, load=3.0, **scenario: object) -> dict:
    def workload(name: str, output: int) -> dict:
        cost = 500 + W * output
        return {
            "tenant": name,
            "arrival": {"kind": "poisson", "rate_rps": load * BUDGET_UNITS_PER_S / cost},
            "prompt_tokens": {"kind": "fixed", "tokens": 500},
            "output_tokens": {"kind": "fixed", "tokens": output},
            # The same max_tokens for both: admission estimates alike, the work actually served not.
            "max_tokens": 4096,
        }

    return {
        "plan": {
            "pools": [{"name": "p", "replicas": 1, "deployment": LLAMA_8B}],
            "tiers": [tier()],
            "tenants": [
                {"name": "a", "tier": "open", "units_per_s": rate_a},
                {"name": "b", "tier": "open", "units_per_s": rate_b},
            ],
        },
        "workload": {"tenants": [workload("a", output_a), workload("b", output_b)]},
        "duration_s": 150,
        "policies": ["reserve_capped"],
        **scenario,
    }


def test_the_budget_and_w_the_fairness_scenarios_use_are_the_prices():
    setup = build_setup(scenario_from_dict(two_tenants(100, 100)))
    assert setup.pools[0].replica_units_per_s == pytest.approx(BUDGET_UNITS_PER_S, rel=1e-4)
    assert setup.pools[0].output_weight == pytest.approx(W, rel=1e-4)


@pytest.mark.parametrize(
    ("output_a", "output_b", "engine", "rate_a", "share_a"),
    [
        (2000, 50, {}, 1e8, 0.5),  # long outputs against short: 92/8 when counted by admission estimates
        (50, 2000, {}, 1e8, 0.5),
        (2000, 50, {"max_num_seqs": 64}, 1e8, 0.5),  # an engine of 64 sequences: 93/7 by estimates
        (2000, 50, {}, 2e8, 2 / 3),  # weights 2:1
        (50, 2000, {"max_num_seqs": 64}, 2e8, 2 / 3),
    ],
)
def test_fair_queueing_shares_served_work_by_contract_whatever_the_output_lengths(
    output_a, output_b, engine, rate_a, share_a
):
    document = two_tenants(output_a, output_b, rate_a=rate_a, engine=engine)
    result = Simulation(build_setup(scenario_from_dict(document)), "reserve_capped", "fair").run()
    a, b = result.tenants
    # Both backlogged throughout the window: entitled to their weights' shares exactly.
    assert a.weight_share_backlogged == pytest.approx(share_a, abs=0.01)
    assert a.served_share_backlogged == pytest.approx(share_a, abs=0.05)
    assert b.served_share_backlogged == pytest.approx(1 - share_a, abs=0.05)
    assert result.headline.jain_fairness_index > 0.99


def test_a_tenant_held_by_its_own_concurrency_cap_is_not_counted_as_wronged_and_its_waits_say_why():
    document = two_tenants(2000, 50)
    document["plan"]["tiers"] = [tier(), tier(name="capped", max_concurrent_sequences=16)]
    document["plan"]["tenants"][0]["tier"] = "capped"
    result = Simulation(build_setup(scenario_from_dict(document)), "reserve_capped", "fair").run()
    a, b = result.tenants
    assert a.served_share_backlogged < 0.2  # 16 sequences of the engine's 128: its own cap, not the scheduler
    assert result.headline.jain_fairness_index > 0.95
    assert max(a.wait_s_mean, key=a.wait_s_mean.get) == "concurrency_cap"
    assert max(b.wait_s_mean, key=b.wait_s_mean.get) == "gateway_queue"
    assert set(a.wait_s_mean) == {"bucket", "concurrency_cap", "kv_cap", "gateway_queue", "engine_queue"}


def one_tenant(workload: dict, *, units_per_s: float, burst_s: float = 10.0, **scenario: object) -> dict:
    return {
        "plan": {
            "pools": [{"name": "p", "replicas": 1, "deployment": LLAMA_8B}],
            "tiers": [tier(burst_s=burst_s)],
            "tenants": [{"name": "t", "tier": "open", "units_per_s": units_per_s}],
        },
        "workload": {"tenants": [{"tenant": "t", **workload}]},
        **scenario,
    }


def test_a_request_no_full_bucket_holds_is_never_admissible_with_no_retry_after():
    """Reserving max_tokens 8,000 at W 4.84 needs about 38,800 units; a bucket of 1,000 units/s × 10 s holds
    10,000: those requests are never admissible, while the short ones are 429s or admitted."""
    document = one_tenant(
        {
            "arrival": {"kind": "poisson", "rate_rps": 20},
            "prompt_tokens": {"kind": "fixed", "tokens": 100},
            "output_tokens": {"kind": "fixed", "tokens": 10},
            "max_tokens": {"kind": "empirical", "values": [8000, 100]},
        },
        units_per_s=1000.0,
        requests=400,
    )
    setup = build_setup(scenario_from_dict(document))
    simulation = Simulation(setup, "reserve_max_tokens", "fair")
    result = simulation.run()
    never = result.other_rejects["never_admissible"]
    assert 150 < never < 250  # half the requests ask for 8,000
    assert result.admission_rejects > 0 and result.admitted > 0
    assert result.admitted + result.admission_rejects + never == result.requests
    # Retry-After only for the 429s, and never longer than refilling a whole bucket.
    retries = simulation.counters[0].retry_after_s
    assert len(retries) == result.admission_rejects and max(retries) <= 10
    assert result.headline.never_admissible > 0


def test_streamed_debit_holds_a_sustained_over_sender_to_its_contract_and_the_forgiving_policy_does_not():
    """A tenant offering about 3.4x its 2,000 units/s: streamed debit serves at most its contract (rate × time
    + depth) plus the debt still owed at the end; the forgiving variant serves it more than twice that."""
    document = one_tenant(
        {
            "arrival": {"kind": "poisson", "rate_rps": 3},
            "prompt_tokens": {"kind": "fixed", "tokens": 200},
            "output_tokens": {"kind": "lognormal", "median": 400, "sigma": 0.8, "max": 3000},
            "max_tokens": 4000,
        },
        units_per_s=2000.0,
        duration_s=400,
    )
    setup = build_setup(scenario_from_dict(document))
    tenant = setup.tenants[0]
    streamed_sim = Simulation(setup, "streamed_debit", "fair")
    streamed = streamed_sim.run()
    contract = tenant.bucket_rate * streamed.simulated_s + tenant.bucket_depth
    owed = max(0.0, -streamed_sim.buckets[0].level)
    assert streamed.debited_units <= contract + owed + 1e-6
    assert streamed.bucket_min_units < 0  # it did run into debt, and paid it back
    assert streamed.quota_overshoot_units == 0 and streamed.streamed_units > 0
    forgiving = Simulation(setup, "debit_on_completion_forgiving", "fair").run()
    assert forgiving.debited_units > 2 * contract
    assert forgiving.quota_overshoot_units > 0 and forgiving.headline.overshoot_pct_of_contract > 100


def _failing_prefills(billing: str) -> dict:
    """Prompts of 30,000 tokens (about a second of prefill each) on a replica that fails every few seconds."""
    return one_tenant(
        {
            "arrival": {"kind": "poisson", "rate_rps": 1},
            "prompt_tokens": {"kind": "fixed", "tokens": 30000},
            "output_tokens": {"kind": "fixed", "tokens": 20},
            "max_tokens": 20,
        },
        units_per_s=1e8,
        requests=300,
        failed_prefill_billing=billing,
        engine={"failure_rate_per_hour": 1200, "restart_s": 1},
    )


def test_a_request_the_platform_fails_in_prefill_is_not_billed_its_prompt_unless_the_scenario_says_so():
    platform = Simulation(build_setup(scenario_from_dict(_failing_prefills("platform"))), "reserve_capped", "fair")
    tenant = Simulation(build_setup(scenario_from_dict(_failing_prefills("tenant"))), "reserve_capped", "fair")
    by_platform, by_tenant = platform.run(), tenant.run()
    assert by_platform.terminal["engine_failure"] > 0
    # The same seed, the same failures: the only difference is who pays the failed prefills.
    assert by_platform.platform_absorbed_units > 0 and by_tenant.platform_absorbed_units == 0
    assert by_tenant.debited_units - by_platform.debited_units == pytest.approx(
        by_platform.platform_absorbed_units, rel=1e-9
    )
    for result in (by_platform, by_tenant):
        taken = result.reserved_units + result.streamed_units + result.charged_units
        assert taken == pytest.approx(result.debited_units + result.released_units, rel=1e-9)
        assert result.leaked_reservation_units == 0


def test_billing_by_hand():
    """The rule on each path, on one request: nothing before prefill; the prompt once a token came back or once
    the client itself ended a started prefill; W per token streamed."""
    from quotacalc.sim.request import Request

    simulation = Simulation(build_setup(scenario_from_dict(_failing_prefills("platform"))), "reserve_capped", "fair")
    request = Request(0, 0, 0.0, 100, 0)
    request.prompt_units, request.output_weight = 100.0, 2.0
    assert simulation.billed_units(request, "engine_failure") == 0.0
    request.prefill_started = True
    assert simulation.billed_units(request, "engine_failure") == 0.0
    assert simulation.billed_units(request, "error") == 0.0
    assert simulation.billed_units(request, "cancel") == 100.0
    assert simulation.billed_units(request, "disconnect") == 100.0
    request.generated = 3
    assert simulation.billed_units(request, "engine_failure") == 106.0
    simulation.bill_failed_prefill = True
    request.generated = 0
    assert simulation.billed_units(request, "engine_failure") == 100.0


def test_the_headline_leaves_out_the_warm_up():
    document = two_tenants(200, 200, load=0.5, duration_s=100)
    result = Simulation(build_setup(scenario_from_dict(document)), "reserve_capped", "fair").run()
    headline = result.headline
    assert 10.0 <= headline.window_start_s < 11.0  # the first arrival after 10% of 100 s
    assert 99.0 < headline.window_end_s <= 100.0  # the last arrival
    assert headline.requests < result.requests
    assert headline.tenants_above_contract == ()
    assert headline.ttft_p99_within_s is not None and headline.ttft_p99_above_s is None
    document["warmup_fraction"] = 0.0
    whole = Simulation(build_setup(scenario_from_dict(document)), "reserve_capped", "fair").run()
    assert whole.headline.window_start_s < 0.5 and whole.headline.requests == whole.requests


def test_jains_index():
    from quotacalc.sim.metrics import jain_index

    assert jain_index([1.0, 1.0], [1.0, 1.0]) == 1.0
    assert jain_index([2.0, 0.0], [1.0, 1.0]) == 0.5  # one got everything: 1/n
    assert jain_index([60.0, 40.0], [50.0, 50.0]) == pytest.approx(2.0**2 / (2 * (1.2**2 + 0.8**2)))  # x = 1.2, 0.8
    assert jain_index([0.0, 1000.0], [0.5, 1000.0]) == 1.0  # a tenant entitled to under 1%: left out
    assert jain_index([0.0], [0.0]) is None


def test_policy_options_are_the_declared_ones():
    from quotacalc.errors import QuotacalcError

    document = two_tenants(100, 100, policy_options={"lease_tokens": 7})
    setup = build_setup(scenario_from_dict(document))
    assert Simulation(setup, "incremental_lease", "fair").policy.lease_tokens == 7
    with pytest.raises(QuotacalcError, match=r"policy_options.*unknown option 'lease_size'.*lease_tokens"):
        scenario_from_dict(two_tenants(100, 100, policy_options={"lease_size": 7}))
    with pytest.raises(QuotacalcError, match="given twice"):
        scenario_from_dict(two_tenants(100, 100, policy_options={"lease_tokens": 7}, lease_tokens=9))


def test_a_retired_policy_name_is_refused_with_what_to_name_instead():
    from quotacalc.errors import QuotacalcError

    with pytest.raises(QuotacalcError) as raised:
        scenario_from_dict(two_tenants(100, 100, policies=["debit_on_completion"]))
    line = raised.value.one_line()
    assert "policies[0]" in line and "debit_on_completion_forgiving" in line and "streamed_debit" in line


def test_when_both_tenants_own_caps_bind_the_caps_set_the_split_and_the_waits_say_so():
    """Both tenants capped at 64 sequences on an engine of 128: each holds its 64, and the short-output tenant's
    sequences, more of each step spent on prefill, are served about three quarters of the units. No
    work-conserving scheduler can move that; the fair-share figures do not count a capped tenant as wronged."""
    document = two_tenants(2000, 50)
    document["plan"]["tiers"] = [tier(max_concurrent_sequences=64)]
    simulation = Simulation(build_setup(scenario_from_dict(document)), "reserve_capped", "fair")
    result = simulation.run()
    long_units, short_units = (c.window.served_units for c in simulation.counters)
    assert short_units / (long_units + short_units) == pytest.approx(0.74, abs=0.05)
    for tenant in result.tenants:
        assert max(tenant.wait_s_mean, key=tenant.wait_s_mean.get) == "concurrency_cap"
    assert result.headline.jain_fairness_index > 0.95
