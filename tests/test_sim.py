"""quotacalc simulate: checked against analysis (the price's replica budget, M/M/1), determinism, terminal paths."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from quotacalc.admission.policies import POLICY_NAMES
from quotacalc.inputs.scenario import scenario_from_dict
from quotacalc.sim.events import Simulation, build_setup

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "simulate-platform.yaml"

LLAMA_70B = {
    "model": "Llama-3.3-70B-Instruct",
    "gpu": "h100-sxm",
    "tp": 4,
    "weight_dtype": "fp8",
    "kv_pool_tokens": 646503,
}
LLAMA_8B = {"model": "Llama-3.1-8B-Instruct", "gpu": "h100-sxm", "tp": 1}
WIDE_TIER = {
    "name": "open",
    "max_context_tokens": 131072,
    "kv_cap_tokens_per_replica": 10_000_000,
    "max_concurrent_sequences": 100_000,
    "max_output_tokens": 65536,
    "priority": 0,
}


def one_tenant(deployment: dict, workload: dict, **scenario: object) -> dict:
    return {
        "plan": {
            "pools": [{"name": "p", "replicas": 1, "deployment": deployment}],
            "tiers": [WIDE_TIER],
            "tenants": [{"name": "t", "tier": "open", "units_per_s": 1e9}],
        },
        "workload": {"tenants": [{"tenant": "t", **workload}]},
        **scenario,
    }


FIXED_1200_1000 = {
    "prompt_tokens": {"kind": "fixed", "tokens": 1200},
    "output_tokens": {"kind": "fixed", "tokens": 1000},
    "max_tokens": 1000,
}


def test_one_tenant_at_the_budget_price_predicts_is_served():
    """One tenant offering exactly the replica budget `quotacalc price` predicts is served at that rate.

    The worked example's budget is 18,232 units/s (ceiling 0.65 / 35.7 us). Requests of 1,200 prompt
    and 1,000 output tokens cost 1,200 + 3.093 x 1,000 = 4,293 units, so 18,232 units/s is 4.247
    requests/s. Over 4,000 Poisson arrivals the replica must keep up: units served per simulated
    second within 5% of the budget (1.6% is the arrival count's own noise, sqrt(4000)/4000, and the
    final drain adds about one request's lifetime), and requests barely queue.
    """
    setup = build_setup(
        scenario_from_dict(
            one_tenant(
                LLAMA_70B,
                {"arrival": {"kind": "poisson", "rate_rps": 18232.21 / (1200 + 3.093145 * 1000)}, **FIXED_1200_1000},
                requests=4000,
                seed=5,
            )
        )
    )
    budget = setup.pools[0].replica_units_per_s
    assert budget == pytest.approx(18232, rel=1e-3)  # the method's worked example
    result = Simulation(setup, "reserve_capped", "fair").run()
    assert result.completed == 4000
    assert result.goodput_units_per_s == pytest.approx(budget, rel=0.05)
    assert result.queue_wait_mean_s < 1.0


def test_saturated_replica_runs_at_the_cost_model_throughput():
    """Saturated (a deep queue, always 128 sequences), the engine's stepping reproduces the cost model.

    Each request costs its prompt's compute, 1,200 x (2 x active params + attention over ~600 earlier
    tokens) / (TP x peak x MFU), plus 1,000 decode tokens at step_time(128, 1,700) / 128 each: the mean
    decode context is 1,200 + 1,000 / 2 = 1,700, the worked example's operating point. On the roofline
    (docs/method.md §1) that is 35.7 us x 1,200 x 1.01 + 1,000 x 14.1 ms / 128, and the units served per busy
    second times the ceiling is price's budget.
    """
    setup = build_setup(
        scenario_from_dict(
            one_tenant(
                LLAMA_70B,
                {"arrival": {"kind": "poisson", "rate_rps": 20}, **FIXED_1200_1000},  # ~3x what one replica serves
                requests=3000,
                queueing=["deep_priority"],
            )
        )
    )
    simulation = Simulation(setup, "reserve_capped", "deep_priority")
    result = simulation.run()
    replica = simulation.pools[0].replicas[0]
    model = setup.pools[0].model
    assert result.completed == 3000
    # A chunk riding in a decode step adds its FLOPs and its tensor-parallel all-reduce traffic.
    prefill_s = model.prefill_compute_s(1200) + 1200 * model.allreduces_per_step * model.allreduce_s_per_token
    request_s = prefill_s + 1000 * model.step_time_s(128, 1700) / 128
    units_per_request = 1200 + setup.pools[0].output_weight * 1000
    assert result.debited_units / replica.busy_s == pytest.approx(units_per_request / request_s, rel=0.04)


def test_single_server_queue_matches_the_textbook_mean_wait():
    """A single-server queue: Poisson arrivals, one sequence at a time (max_num_seqs 1), FCFS.

    Service is one prefill step of a 1-token prompt (a, the first token) and then N - 1 decode steps
    (b each, at batch 1: the weights' read plus the engine's step overheads; the ~25 tokens of KV
    add 0.05%), with N geometric of mean 50: E[S] = a + 49 b, Var[S] = b^2 x 49 x 50. The textbook
    mean wait is Pollaczek-Khinchine's W_q = lambda E[S^2] / (2 (1 - rho)), which is M/M/1's
    rho / (mu - lambda) when service is exponential (here within a few percent: a is close to b and
    N is nearly memoryless). At rho = 0.5 over 40,000 requests the sample mean is within a few
    percent of it (waits are autocorrelated, so the tolerance is 8%).
    """
    document = one_tenant(
        LLAMA_8B,
        {
            "arrival": {"kind": "poisson", "rate_rps": 1.0},  # replaced below, once a and b are known
            "prompt_tokens": {"kind": "fixed", "tokens": 1},
            "output_tokens": {"kind": "exponential", "mean": 50},
            "max_tokens": 100000,
        },
        requests=40000,
        seed=3,
        policies=["debit_on_completion_forgiving"],
        queueing=["deep_priority"],
        engine={"max_num_seqs": 1},
    )
    model = build_setup(scenario_from_dict(document)).pools[0].model
    a, b = model.prefill_time_s(1, 0), model.step_time_s(1, 26)
    mean_s = a + 49 * b
    second_moment = b * b * 49 * 50 + mean_s * mean_s
    lam = 0.5 / mean_s
    document["workload"]["tenants"][0]["arrival"]["rate_rps"] = lam
    setup = build_setup(scenario_from_dict(document))
    result = Simulation(setup, "debit_on_completion_forgiving", "deep_priority").run()
    expected = lam * second_moment / (2 * (1 - 0.5))
    mm1 = 0.5 / (1 / mean_s - lam)
    assert expected == pytest.approx(mm1, rel=0.05)  # the M/M/1 textbook figure, nearly
    assert result.queue_wait_mean_s == pytest.approx(expected, rel=0.08)


def test_same_seed_same_bytes_and_another_seed_differs(run_cli):
    args = ("simulate", str(EXAMPLE), "--requests", "300", "--json")
    code, first, err = run_cli(*args)
    assert code == 0, err
    code, second, _ = run_cli(*args)
    assert first == second
    code, other, _ = run_cli(*args, "--seed", "8")
    assert code == 0 and other != first


def test_json_shape(run_cli):
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "200", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["command"] == "simulate" and document["schema_version"] == 2 and document["partial"] is False
    runs = document["policies"]
    example = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    assert {(r["policy"], r["queueing"]) for r in runs} == {
        (p, q) for p in example["policies"] for q in example["queueing"]
    }
    required = [
        "policy",
        "admission_rejects",
        "quota_overshoot_units",
        "unused_reservation_unit_s",
        "leaked_reservation_units",
        "preemptions",
        "ttft_p99_s",
        "itl_p99_s",
        "tenants",
    ]
    for run in runs:
        assert all(key in run for key in required)
        assert run["leaked_reservation_units"] == 0
        assert run["tenants"] and all("tenant" in t and "admission_rejects" in t for t in run["tenants"])
        if run["policy"] != "debit_on_completion_forgiving":
            assert run["quota_overshoot_units"] == 0  # reservations are taken before the units are used


def test_table_output(run_cli):
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "100")
    assert code == 0, err
    for needle in ("reserve_max_tokens", "incremental_lease", "deep_priority", "per tenant", "acme"):
        assert needle in out


def test_plot_svg_is_written_and_deterministic(run_cli, tmp_path):
    pytest.importorskip("matplotlib")
    document = yaml.safe_load(EXAMPLE.read_text())
    document.update(policies=["reserve_capped", "incremental_lease"], queueing=["fair"])
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump(document))
    first, second = tmp_path / "a.svg", tmp_path / "b.svg"
    assert run_cli("simulate", str(scenario), "--requests", "50", "--json", "--plot", str(first))[0] == 0
    assert run_cli("simulate", str(scenario), "--requests", "50", "--json", "--plot", str(second))[0] == 0
    assert first.read_text().startswith("<?xml") and first.read_bytes() == second.read_bytes()
    # Every policy's per-tenant TTFT and live KV, and no panel without data.
    from quotacalc.cli.sim_plot import panels
    from quotacalc.sim.events import Simulation, build_setup

    setup = build_setup(scenario_from_dict(document, base=EXAMPLE.parent))
    shown = panels([Simulation(setup, p, "fair").run() for p in ("reserve_capped", "incremental_lease")])
    titles = [title for title, _ in shown]
    assert "TTFT p99 by tenant, s" in titles and any("live KV" in title for title in titles)
    assert all(any(v for values in bars.values() for v in values) for _, bars in shown)
    assert all(len(values) == 2 for _, bars in shown for values in bars.values())
    png = tmp_path / "c.png"
    assert run_cli("simulate", str(scenario), "--requests", "20", "--json", "--plot", str(png))[0] == 0
    assert png.read_bytes().startswith(b"\x89PNG")


def test_plot_without_matplotlib_is_a_clear_error(run_cli, tmp_path, monkeypatch):
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib now raises ImportError
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "20", "--json", "--plot", str(tmp_path / "x.svg"))
    assert out == ""  # checked before simulating: nothing half-printed
    assert code == 1 and "matplotlib" in err and "quotacalc[plot]" in err and "Traceback" not in err
    assert not (tmp_path / "x.svg").exists()


def _terminal_document(**workload_extra: object) -> dict:
    return one_tenant(
        LLAMA_8B,
        {
            "arrival": {"kind": "poisson", "rate_rps": 40},
            "prompt_tokens": {"kind": "lognormal", "median": 800, "sigma": 0.8, "max": 8000},
            "output_tokens": {"kind": "lognormal", "median": 300, "sigma": 1.0, "max": 3000},
            "max_tokens": 1000,
            "cancel_probability": 0.2,
            "cancel_after_s_mean": 2.0,
            "disconnect_probability": 0.2,
            "error_probability": 0.1,
            **workload_extra,
        },
        requests=1500,
        engine={"failure_rate_per_hour": 200, "restart_s": 5, "max_num_seqs": 64},
    )


@pytest.mark.parametrize("policy", POLICY_NAMES)
@pytest.mark.parametrize("queueing", ["fair", "deep_priority"])
def test_every_terminal_path_releases_its_reservation(policy, queueing):
    setup = build_setup(scenario_from_dict(_terminal_document()))
    result = Simulation(setup, policy, queueing).run()
    for reason in ("eos", "length", "cancel", "disconnect", "error", "engine_failure"):
        assert result.terminal.get(reason, 0) > 0, (reason, result.terminal)
    assert result.leaked_reservation_units == 0
    assert result.live_requests == 0
    assert sum(result.terminal.values()) == result.admitted
    # Every unit taken from a bucket (held, streamed or charged at the end) was billed or released.
    taken = result.reserved_units + result.streamed_units + result.charged_units
    assert taken == pytest.approx(result.debited_units + result.released_units, rel=1e-9)
    assert result.engine_output_tokens == result.output_tokens


def test_leases_stop_cleanly_at_the_quota_boundary():
    """A tenant whose bucket runs dry mid-stream: leases end requests with quota_stop and no overshoot,
    debit-on-completion lets them run and overshoots."""
    document = one_tenant(
        LLAMA_8B,
        {
            "arrival": {"kind": "poisson", "rate_rps": 5},
            "prompt_tokens": {"kind": "fixed", "tokens": 100},
            "output_tokens": {"kind": "fixed", "tokens": 2000},
            "max_tokens": 2000,
        },
        requests=200,
        lease_tokens=64,
    )
    document["plan"]["tenants"][0]["units_per_s"] = 2000.0  # far below 5 rps × (100 + W × 2000)
    setup = build_setup(scenario_from_dict(document))
    lease = Simulation(setup, "incremental_lease", "fair").run()
    debit = Simulation(setup, "debit_on_completion_forgiving", "fair").run()
    assert lease.terminal.get("quota_stop", 0) > 0
    assert lease.quota_overshoot_units == 0 and lease.bucket_min_units >= 0
    assert debit.quota_overshoot_units > 0 and debit.bucket_min_units >= 0
    assert lease.leaked_reservation_units == 0


def test_retry_after_is_the_deficit_over_the_refill_rate_rounded_up():
    """Reserving max_tokens of 8,000 at W ≈ 1.56 (Llama 3.1 8B on one H100) needs ~12,500 units; a
    bucket of rate 1,000 units/s and depth 60 s × 1,000 admits a few, then the deficit's refill
    time (rounded up) is every Retry-After."""
    document = one_tenant(
        LLAMA_8B,
        {
            "arrival": {"kind": "poisson", "rate_rps": 50},
            "prompt_tokens": {"kind": "fixed", "tokens": 100},
            "output_tokens": {"kind": "fixed", "tokens": 10},
            "max_tokens": 8000,
        },
        requests=100,
    )
    document["plan"]["tenants"][0]["units_per_s"] = 1000.0
    setup = build_setup(scenario_from_dict(document))
    simulation = Simulation(setup, "reserve_max_tokens", "fair")
    result = simulation.run()
    w = setup.pools[0].output_weight
    needed = 100 + w * 8000
    assert result.admission_rejects > 0
    retries = simulation.counters[0].retry_after_s
    assert all(1 <= r <= -(-needed // 1000) for r in retries)


def test_replay_from_csv_and_jsonl(tmp_path):
    csv = tmp_path / "usage.csv"
    csv.write_text(
        "timestamp,tenant,prompt_tokens,output_tokens\n"
        "2026-01-01T00:00:00Z,t,100,20\n2026-01-01T00:00:01Z,t,200,30\n2026-01-01T00:00:03Z,other,5,5\n"
    )
    jsonl = tmp_path / "usage.jsonl"
    jsonl.write_text('{"timestamp": 10, "tenant": "t", "prompt_tokens": 50, "output_tokens": 7}\n')
    for name, requests, tokens in (("usage.csv", 2, 50), ("usage.jsonl", 1, 7)):
        document = one_tenant(LLAMA_8B, {"arrival": {"kind": "replay", "file": name}}, duration_s=100)
        setup = build_setup(scenario_from_dict(document, base=tmp_path))
        result = Simulation(setup, "reserve_capped", "fair").run()
        assert result.requests == requests and result.output_tokens == tokens


def test_ctrl_c_prints_the_partial_results(run_cli, monkeypatch):
    from quotacalc.sim import events

    original = events.Simulation._arrive
    calls = {"n": 0}

    def interrupted(self, arrival, now):
        calls["n"] += 1
        if calls["n"] == 150:
            raise KeyboardInterrupt
        return original(self, arrival, now)

    monkeypatch.setattr(events.Simulation, "_arrive", interrupted)
    code, out, _ = run_cli("simulate", str(EXAMPLE), "--requests", "300", "--json")
    assert code == 130
    document = json.loads(out)
    assert document["partial"] is True
    [run] = document["policies"]  # the first run stopped; the others never started
    assert run["partial"] is True and run["requests"] == 149


def test_long_prompts_route_to_the_long_context_pool():
    """Prompts above the standard pool's threshold run on the long-context pool, the rest stay."""
    document = one_tenant(
        LLAMA_8B,
        {
            "arrival": {"kind": "poisson", "rate_rps": 2},
            "prompt_tokens": {"kind": "empirical", "values": [1000, 9000]},
            "output_tokens": {"kind": "fixed", "tokens": 20},
            "max_tokens": 100,
        },
        requests=200,
    )
    pools = document["plan"]["pools"]
    pools[0].update(long_context_pool="long", route_above_prompt_tokens=4096)
    pools.append({"name": "long", "role": "long_context", "replicas": 1, "deployment": {**LLAMA_8B, "context": 16384}})
    result = Simulation(build_setup(scenario_from_dict(document)), "reserve_capped", "fair").run()
    standard, long = result.pools
    assert standard.pool == "p" and long.pool == "long"
    assert standard.requests_scheduled + long.requests_scheduled == result.admitted == 200
    assert standard.requests_scheduled > 50 and long.requests_scheduled > 50
    # Prompt tokens computed per pool: 1,000 per request on the standard pool, 9,000 on the long one.
    assert standard.prompt_tokens_computed == 1000 * standard.requests_scheduled
    assert long.prompt_tokens_computed == 9000 * long.requests_scheduled


def test_priority_alone_starves_a_low_tier_that_fair_queueing_serves():
    """docs/method.md §3: a gold tenant oversubscribing one replica (12 req/s x (500 + 4.27 x 300) = 21,400
    units/s against a budget of 20,023, more than the replica runs at a batch of 32), a bronze tenant
    sending 1 req/s well within its contract. With a deep engine queue ordered by priority, bronze
    waits behind every gold request; with fair queueing (weights 40,000 : 3,000) at the gateway over
    a shallow engine queue, bronze gets its share."""

    def tier(name: str, priority: int) -> dict:
        return {**WIDE_TIER, "name": name, "priority": priority, "max_output_tokens": 2048}

    fixed = {"prompt_tokens": {"kind": "fixed", "tokens": 500}}
    document = {
        "plan": {
            "pools": [{"name": "p", "replicas": 1, "deployment": LLAMA_8B}],
            "tiers": [tier("gold", 0), tier("bronze", 2)],
            "tenants": [
                {"name": "big", "tier": "gold", "units_per_s": 40000.0},
                {"name": "small", "tier": "bronze", "units_per_s": 3000.0},
            ],
        },
        "workload": {
            "tenants": [
                {
                    "tenant": "big",
                    "arrival": {"kind": "poisson", "rate_rps": 12},
                    **fixed,
                    "output_tokens": {"kind": "fixed", "tokens": 300},
                    "max_tokens": 300,
                },
                {
                    "tenant": "small",
                    "arrival": {"kind": "poisson", "rate_rps": 1},
                    **fixed,
                    "output_tokens": {"kind": "fixed", "tokens": 100},
                    "max_tokens": 100,
                },
            ]
        },
        "duration_s": 120,
        "seed": 1,
        "engine": {"max_num_seqs": 32},
    }
    setup = build_setup(scenario_from_dict(document))
    fair = {t.tenant: t for t in Simulation(setup, "reserve_capped", "fair").run().tenants}
    deep = {t.tenant: t for t in Simulation(setup, "reserve_capped", "deep_priority").run().tenants}
    assert fair["small"].admission_rejects == deep["small"].admission_rejects == 0
    assert fair["small"].ttft_p99_s < 10
    assert deep["small"].ttft_p99_s > 10 * fair["small"].ttft_p99_s


def test_one_request_by_hand():
    """One request alone on a replica, every figure derived by hand.

    Prompt 100, output 10, max_tokens 100 (reserve_capped holds 100 + W x 100 units). The prefill
    step takes prefill_time(100) and yields the first token (TTFT); the other 9 tokens come from one
    macro-step of 9 decode steps at the batch of 1 and the mid-way context 101 + (9 - 1) / 2 = 105.
    Unused reservation: W x 100 held during the prefill, then W x (99, 98, ..., 91) over the 9 steps:
    W x (100 x prefill + 855 x step). At the end it debits P + 10 W and releases 90 W, where P, the prompt's
    units, is 100 x (1 + 100 x q) as the gateway charges it: q, a prompt token's units per token of its prompt on
    Llama 3.1 8B, = 2 x 2 x 32 heads x 128 x 32 layers x 65,536.5 / (2 x 8,030,261,248) / 131,072 = 1.6322e-5
    (the mean key of a 131,072-token prompt over the linear layers' FLOPs, per token of the prompt).
    """
    document = one_tenant(
        LLAMA_8B,
        {
            "arrival": {"kind": "poisson", "rate_rps": 1},
            "prompt_tokens": {"kind": "fixed", "tokens": 100},
            "output_tokens": {"kind": "fixed", "tokens": 10},
            "max_tokens": 100,
        },
        requests=1,
    )
    setup = build_setup(scenario_from_dict(document))
    model, w = setup.pools[0].model, setup.pools[0].output_weight
    per_prompt_token = setup.pools[0].prompt_per_prompt_token
    assert per_prompt_token == pytest.approx(2 * 2 * 32 * 128 * 32 * 65_536.5 / (2 * 8_030_261_248) / 131_072)
    prompt_units = 100 * (1 + 100 * per_prompt_token)
    result = Simulation(setup, "reserve_capped", "fair").run()
    prefill_s, step_s = model.prefill_time_s(100, 0), model.step_time_s(1, 105)
    # TTFT also counts the engine's per-request overhead (API server, tokenizer), outside its steps.
    assert result.ttft_p50_s == pytest.approx(prefill_s + model.request_overhead_s, rel=1e-9)
    assert result.itl_p50_s == pytest.approx(step_s, rel=0.01)  # a 1%-wide histogram bin
    assert result.reserved_units == pytest.approx(prompt_units + w * 100, rel=1e-12)
    assert result.debited_units == pytest.approx(prompt_units + w * 10, rel=1e-12)
    assert result.released_units == pytest.approx(w * 90, rel=1e-12)
    assert result.unused_reservation_unit_s == pytest.approx(w * (100 * prefill_s + 855 * step_s), rel=1e-9)
    assert result.resident_kv_peak_tokens == 110 and result.concurrent_sequences_peak == 1
    assert result.output_tokens == 10
    # Every way to end is a key, 0 when none took it: the one request ended at its stop token.
    assert result.terminal == {
        "eos": 1,
        "length": 0,
        "quota_stop": 0,
        "cancel": 0,
        "disconnect": 0,
        "timeout": 0,
        "error": 0,
        "engine_failure": 0,
        "queue_full": 0,
    }
    assert result.other_rejects == {"context": 0, "kv_cap": 0, "never_admissible": 0}


def _two_tenants_at_once(tmp_path: Path, replicas: int) -> dict:
    """Tenants a (prompt 100, output 10) and b (prompt 200, output 20), one request each at t = 0."""
    (tmp_path / "usage.csv").write_text("timestamp,tenant,prompt_tokens,output_tokens\n0,a,100,10\n0,b,200,20\n")
    return {
        "plan": {
            "pools": [{"name": "p", "replicas": replicas, "deployment": LLAMA_8B}],
            "tiers": [WIDE_TIER],
            "tenants": [{"name": name, "tier": "open", "units_per_s": 1e9} for name in ("a", "b")],
        },
        "workload": {
            "tenants": [
                {"tenant": name, "arrival": {"kind": "replay", "file": "usage.csv"}, "max_tokens": 100}
                for name in ("a", "b")
            ]
        },
        "duration_s": 100,
    }


@pytest.mark.parametrize("queueing", ["fair", "deep_priority"])
def test_the_runs_kv_peak_is_the_fullest_replicas_every_tenant_counted(tmp_path, queueing):
    """The run's resident KV peak and p99 are one replica's total, all tenants together; a tenant's stay its own.

    One replica: a's prefill step runs alone (b arrives during it; a single step is not cut short) and
    ends with a holding 100 + 1 = 101 tokens. The next step prefills b (200 + its first token) while
    decoding a's second (102 + 201 = 303); then one macro-step of 8 decode steps brings a to its 10th
    token: a 110 + b 201 + 8 = 209, 319 in all, after which a ends and b runs alone to 220. The replica's
    peak is 319: above each tenant's own (110, 220), and not their sum, 330 (they never peak together).
    Its p99 over busy time is 319 too, within the histogram's 1% bin: those 8 steps at batch 2 are far
    more than 1% of the replica's busy time. (Before, the run reported the largest tenant's: 220.)

    Two replicas: the gateway sends b to the idle replica, so each request runs alone; replica peaks
    110 and 220, and the run's is the larger, 220, again not the sum.
    """
    one = Simulation(
        build_setup(scenario_from_dict(_two_tenants_at_once(tmp_path, 1), base=tmp_path)), "reserve_capped", queueing
    ).run()
    assert {t.tenant: t.resident_kv_peak_tokens for t in one.tenants} == {"a": 110, "b": 220}
    assert one.resident_kv_peak_tokens == 110 + 209
    assert one.resident_kv_p99_tokens == pytest.approx(319, rel=0.01)

    simulation = Simulation(
        build_setup(scenario_from_dict(_two_tenants_at_once(tmp_path, 2), base=tmp_path)), "reserve_capped", queueing
    )
    two = simulation.run()
    assert [r.kv_peak_tokens for r in simulation.pools[0].replicas] == [110, 220]
    assert {t.tenant: t.resident_kv_peak_tokens for t in two.tenants} == {"a": 110, "b": 220}
    assert two.resident_kv_peak_tokens == 220
    assert two.resident_kv_p99_tokens == pytest.approx(220, rel=0.01)


@pytest.mark.parametrize("name", ["simulate-platform.yaml", "simulate-named-plan.yaml"])
def test_shipped_scenarios_run(run_cli, name):
    code, out, err = run_cli("simulate", str(EXAMPLE.parent / name), "--requests", "150", "--json")
    assert code == 0, err
    runs = json.loads(out)["policies"]
    assert runs and all(run["leaked_reservation_units"] == 0 and run["live_requests"] == 0 for run in runs)


def test_a_narrow_terminal_never_cuts_a_figure(run_cli, monkeypatch):
    """At 60 columns the tables print wider than the terminal rather than cutting a number or a name ('…')."""
    monkeypatch.setenv("COLUMNS", "60")
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "100", "--json")
    assert code == 0, err
    runs = json.loads(out)["policies"]
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "100")
    assert code == 0 and "…" not in out
    for run in runs:
        assert run["policy"] in out and f"{run['requests']:,}" in out


#: simulate takes no deployment flags: price's hint names the keys of the scenario's embedded plan instead
#: (before, it named --batch, --tp and --kv-dtype, flags simulate does not have).
LONG_POOL_WARNING = (
    "pool 'long': a decode batch of 16 at 65,536 tokens does not fit the KV pool, which holds 9 such sequences: "
    "priced at batch 9 (lower plan.pools.long.deployment.batch, raise plan.pools.long.deployment.tp, or use "
    "plan.pools.long.deployment.kv_dtype: fp8)"
)


@pytest.mark.parametrize("flat", [False, True], ids=["platform", "flat"])
def test_a_named_plans_pool_warning_names_the_keys_of_the_plan_file(run_cli, tmp_path, flat):
    """A scenario naming its plan file: the hint names that file's keys, as check and size do. Batch 16 at 65,536
    tokens on a 646,503-token KV pool holds 646,503 // 65,536 = 9 sequences. A platform plan's keys are
    pools.long.deployment.*; a flat plan's, its one pool 'default', are at its top level."""
    document = yaml.safe_load(EXAMPLE.read_text(encoding="utf-8"))
    long_deployment = document["plan"]["pools"][1]["deployment"]
    if flat:
        (tmp_path / "plan.yaml").write_text(
            yaml.safe_dump({**long_deployment, "tenant": {"rps": 1, "prompt_tokens": 1000, "output_tokens": 100}})
        )
        fixed = {"prompt_tokens": {"kind": "fixed", "tokens": 1000}, "output_tokens": {"kind": "fixed", "tokens": 100}}
        workload = {"tenants": [{"tenant": "tenant", "arrival": {"kind": "poisson", "rate_rps": 1}, **fixed}]}
        pool, prefix = "default", ""
    else:
        (tmp_path / "plan.yaml").write_text(yaml.safe_dump(document["plan"]))
        workload = document["workload"]
        pool, prefix = "long", "pools.long.deployment."
    scenario = tmp_path / "scenario.yaml"
    scenario.write_text(yaml.safe_dump({"plan": "plan.yaml", "workload": workload, "requests": 20}))
    code, out, err = run_cli("simulate", scenario, "--json")
    assert code == 0, err
    assert json.loads(out)["warnings"] == [
        f"pool '{pool}': a decode batch of 16 at 65,536 tokens does not fit the KV pool, which holds 9 such "
        f"sequences: priced at batch 9 (lower {prefix}batch, raise {prefix}tp, or use {prefix}kv_dtype: fp8)"
    ]
    assert "--batch" not in err and f"(lower {prefix}batch," in err


def test_every_outcome_key_is_present_and_warnings_are_listed(run_cli):
    """--json keys do not come and go with the traffic: each terminal and reject reason is a count, 0 when none."""
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "50", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert document["warnings"] == [LONG_POOL_WARNING]
    terminal = [
        "eos",
        "length",
        "quota_stop",
        "cancel",
        "disconnect",
        "timeout",
        "error",
        "engine_failure",
        "queue_full",
    ]
    for run in document["policies"]:
        for figures in (run, *run["tenants"]):
            assert list(figures["terminal"]) == terminal
            assert list(figures["other_rejects"]) == ["context", "kv_cap", "never_admissible"]
            assert sum(figures["terminal"].values()) == figures["admitted"]
        # 50 requests with no prompt above 32K and no engine failure within a few seconds: zeros, not missing keys.
        assert run["terminal"]["engine_failure"] == 0 and run["other_rejects"] == {
            "context": 0,
            "kv_cap": 0,
            "never_admissible": 0,
        }


def test_a_pool_runs_at_the_batch_its_price_and_generate_use(run_cli):
    """The example's long pool asks for batch 16 at 65,536 tokens; its KV pool of 646,503 tokens holds
    floor(646,503 / 65,536) = 9 such sequences, so price uses batch 9, generate writes max-num-seqs 9, and the
    simulated engine runs at most 9. The standard pool's batch (128 at its default context) fits: 128."""
    from quotacalc.core.policy import build_policy
    from quotacalc.core.price import price
    from quotacalc.inputs.resolve import resolve
    from quotacalc.inputs.scenario import load_scenario

    loaded = load_scenario(str(EXAMPLE))
    setup = build_setup(loaded)
    assert [(p.name, p.max_num_seqs) for p in setup.pools] == [("standard", 128), ("long", 646503 // 65536)]
    policy = build_policy(loaded.plan, {p.name: price(resolve(p.deployment)) for p in loaded.plan.pools})
    assert [p.engine.max_num_seqs for p in policy.pools] == [p.max_num_seqs for p in setup.pools]
    simulation = Simulation(setup, "reserve_capped", "fair")
    assert [r.max_num_seqs for r in simulation.pools[1].replicas] == [9]
    assert setup.warnings == (LONG_POOL_WARNING,)
    # The command repeats the price's warning on stderr, once, and reports the engine it ran.
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "50", "--json")
    assert code == 0 and err == f"quotacalc: warning: {LONG_POOL_WARNING}\n"
    assert [p["max_num_seqs"] for p in json.loads(out)["pools"]] == [128, 9]
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "50")
    assert code == 0 and err == f"quotacalc: warning: {LONG_POOL_WARNING}\n"


def test_a_scenario_max_num_seqs_above_the_priced_batch_is_run_and_warned():
    document = one_tenant(
        {**LLAMA_70B, "context": 65536, "batch": 16},
        {**FIXED_1200_1000, "arrival": {"kind": "poisson", "rate_rps": 1}},
        requests=10,
        engine={"max_num_seqs": 12},
    )
    setup = build_setup(scenario_from_dict(document))
    assert setup.pools[0].max_num_seqs == 12  # the scenario's what-if is honoured
    assert setup.warnings[1] == (
        "pool 'p': engine.max_num_seqs 12 is above the 9 it is priced at and generate sets as max-num-seqs: "
        "the simulated engine runs more sequences than the price"
    )
    document["engine"] = {"max_num_seqs": 4}  # below the priced batch: a plain setting, no warning of its own
    setup = build_setup(scenario_from_dict(document))
    assert setup.pools[0].max_num_seqs == 4 and len(setup.warnings) == 1


def test_a_pool_steps_with_the_token_budget_its_price_and_generate_use():
    """Without engine.max_num_batched_tokens a pool runs the budget generate writes: the deployment's, else vLLM's
    default on its GPU (8,192 on an H100, 2,048 on an A100: vLLM 0.10's `vllm serve` rule, docs/accuracy.md)."""
    workload = {**FIXED_1200_1000, "arrival": {"kind": "poisson", "rate_rps": 1}}
    budgets = {}
    for gpu in ("h100-sxm", "a100-80gb-sxm"):
        setup = build_setup(scenario_from_dict(one_tenant({**LLAMA_8B, "gpu": gpu}, workload, requests=10)))
        budgets[gpu] = setup.pools[0].max_num_batched_tokens
    assert budgets == {"h100-sxm": 8192, "a100-80gb-sxm": 2048}
    given = one_tenant({**LLAMA_8B, "max_num_batched_tokens": 4096}, workload, requests=10)
    assert build_setup(scenario_from_dict(given)).pools[0].max_num_batched_tokens == 4096
    given["engine"] = {"max_num_batched_tokens": 1024}  # the scenario's what-if wins
    assert build_setup(scenario_from_dict(given)).pools[0].max_num_batched_tokens == 1024


SHORT = {"prompt_tokens": {"kind": "fixed", "tokens": 200}, "output_tokens": {"kind": "fixed", "tokens": 50}}


def test_a_replica_down_for_a_year_costs_no_events_while_it_is_down():
    """A failed replica draws its next failure when it is back up (failures are memoryless). Before, each failure
    due while it was down was an event of its own: a restart of a year at one failure a second was 31 million
    events, a run that never ended."""
    document = one_tenant(
        LLAMA_8B,
        {"arrival": {"kind": "poisson", "rate_rps": 2}, **SHORT},
        requests=200,
        engine={"failure_rate_per_hour": 3600, "restart_s": 31_622_400},
    )
    simulation = Simulation(build_setup(scenario_from_dict(document)), "reserve_capped", "fair")
    push = simulation._push
    events = []

    def counted(time_s: float, kind: int, payload: object, version: int = 0) -> None:
        events.append(kind)
        assert len(events) < 100_000, "a down replica keeps scheduling failures"
        push(time_s, kind, payload, version)

    simulation._push = counted  # type: ignore[method-assign]
    result = simulation.run()
    assert result.live_requests == 0 and sum(result.terminal.values()) == result.admitted == 200
    assert result.terminal["engine_failure"] > 0 and result.simulated_s > 31_622_400  # it waited out a restart


def test_failures_come_at_their_rate_while_a_replica_is_up():
    """At 360 failures an hour (one every 10 s of uptime) and 10 s restarts, a replica fails about once every
    20 s: 100 times in 2,000 s (Poisson: within 30%, three standard deviations)."""
    document = one_tenant(
        LLAMA_8B,
        {"arrival": {"kind": "poisson", "rate_rps": 0.2}, **SHORT},
        duration_s=2000,
        engine={"failure_rate_per_hour": 360, "restart_s": 10},
    )
    simulation = Simulation(build_setup(scenario_from_dict(document)), "reserve_capped", "fair")
    result = simulation.run()
    failures = result.pools[0].replica_failures
    assert 70 <= failures * 2000 / result.simulated_s <= 130, (failures, result.simulated_s)


def test_replay_reads_a_spreadsheets_csv(tmp_path):
    """A byte-order mark and a space after each comma (as docs/simulate.md writes the columns) are no error."""
    (tmp_path / "usage.csv").write_text(
        "\ufefftimestamp, tenant, prompt_tokens, output_tokens\n0, t, 100, 20\n\n1.5, t, 200, 30\n", encoding="utf-8"
    )
    document = one_tenant(LLAMA_8B, {"arrival": {"kind": "replay", "file": "usage.csv"}}, duration_s=100)
    loaded = scenario_from_dict(document, base=tmp_path)
    assert [(r.time_s, r.prompt_tokens, r.output_tokens) for r in loaded.replays["t"]] == [(0, 100, 20), (1.5, 200, 30)]
    result = Simulation(build_setup(loaded), "reserve_capped", "fair").run()
    assert result.requests == 2 and result.output_tokens == 50


@pytest.mark.parametrize("where", ["missing/x.svg", "a-folder.svg"])
def test_a_plot_that_cannot_be_written_is_refused_before_simulating(run_cli, tmp_path, where):
    pytest.importorskip("matplotlib")
    (tmp_path / "a-folder.svg").mkdir()
    target = tmp_path / where
    code, out, err = run_cli("simulate", str(EXAMPLE), "--requests", "20", "--json", "--plot", str(target))
    assert (code, out) == (2, "")  # nothing simulated, nothing printed
    assert err.startswith(f"quotacalc: error: {target}: --plot: is ")


def test_the_shipped_scenarios_show_every_path(run_cli):
    """What the examples are for: each path shows in their output. The platform example preempts, loses requests
    to engine failures, stops quotas and routes long prompts to the long-context pool; the named plan's wayne asks
    a third of the time for max_tokens 20,000, whose hold under reserve_max_tokens (20,000 x W, its prompt on top)
    is more than its full bucket (2,000 units/s x the starter tier's 30 s), so it is never admissible there, while
    reserve_capped holds the tier's 2,048 output tokens at most and admits it."""
    code, out, err = run_cli("simulate", str(EXAMPLE), "--json")
    assert code == 0, err
    runs = json.loads(out)["policies"]
    assert max(run["preemptions"] for run in runs) > 0
    assert max(run["terminal"]["engine_failure"] for run in runs) > 0
    assert max(run["terminal"]["quota_stop"] for run in runs) > 0
    assert max(next(p for p in run["pools"] if p["pool"] == "long")["requests_scheduled"] for run in runs) > 0

    code, out, err = run_cli("simulate", str(EXAMPLE.parent / "simulate-named-plan.yaml"), "--json")
    assert code == 0, err
    document = json.loads(out)
    shared = next(p for p in document["pools"] if p["pool"] == "shared")
    assert 20_000 * shared["output_weight"] > 2_000 * 30
    for run in document["policies"]:
        never = {t["tenant"]: t["other_rejects"]["never_admissible"] for t in run["tenants"]}
        if run["policy"] == "reserve_max_tokens":
            assert never.pop("wayne") > 0
        assert set(never.values()) == {0}, (run["policy"], never)
