"""The enforcement point's decisions on an injected clock (quotacalc.enforce.gate): the admission order and each
outcome's status and Retry-After, the body the engine gets, fair dispatch by served work, leases, the quota stop,
settlement on every terminal path with its conservation, lease expiry, and the settings file's errors."""

from __future__ import annotations

import json
import math

import pytest
from policy_samples import platform_policy, sample_salts

from quotacalc.admission.bucket import Bucket
from quotacalc.admission.caps import TenantCaps, place
from quotacalc.admission.policies import POLICY_NAMES, make_policy
from quotacalc.admission.state import MemoryBuckets
from quotacalc.enforce.gate import (
    BUCKET,
    COMPLETED,
    DISCONNECT,
    ENGINE_ERROR,
    NEVER_FITS_BUCKET,
    NEVER_FITS_KV,
    QUOTA_STOP,
    SENT,
    TOO_LONG,
    Gate,
    GateSettings,
    Refusal,
    Ticket,
    refusal_record,
)
from quotacalc.enforce.settings import EnforceSettings, check_replicas, read_policy, read_settings
from quotacalc.errors import QuotacalcError


def _gate(policy=None, admission="incremental_lease", lease_tokens=128, settings=None, **tenants):
    """A gate over the sample policy; ``tenants``: field changes by tenant name (rate, depth, caps)."""
    policy = policy or platform_policy()
    changed = tuple(t.model_copy(update=tenants.get(t.name, {})) for t in policy.tenants)
    policy = policy.model_copy(update={"tenants": changed})
    store = MemoryBuckets([Bucket(t.bucket_rate_units_per_s, t.bucket_depth_units, now=0.0) for t in policy.tenants])
    return Gate(policy, sample_salts(policy), make_policy(admission, {"lease_tokens": lease_tokens}), store, settings)


def _tenant(gate: Gate, name: str) -> int:
    index = gate.tenant_index(name)
    assert index is not None
    return index


def test_the_admission_order_and_each_outcomes_status():
    depth = 2000.0
    gate = _gate(globex={"bucket_depth_units": depth, "bucket_rate_units_per_s": 100.0})
    globex = _tenant(gate, "globex")
    tenant = gate.tenants[globex]
    # Too long: a prompt leaving no room for one output token in the tier's context.
    too_long = gate.arrive(globex, tenant.max_context_tokens, None, 0.0, "r1")
    assert isinstance(too_long, Refusal) and (too_long.status, too_long.reason, too_long.retry_after_s) == (
        400,
        TOO_LONG,
        None,
    )
    # Never fits the bucket: the prompt alone is above the depth; waiting would not help, so no Retry-After.
    never = gate.arrive(globex, 6000, 10, 0.0, "r2")
    assert isinstance(never, Refusal) and (never.status, never.reason, never.retry_after_s) == (
        413,
        NEVER_FITS_BUCKET,
        None,
    )
    # Admitted: prompt + W x one lease held.
    first = gate.arrive(globex, 1000, 2000, 0.0, "r3")
    assert isinstance(first, Ticket)
    weights = tenant.weights
    held = weights.request_units(1000, 0, 0) + weights.output * 128
    assert first.hold == pytest.approx(held)
    # The bucket: what is left is short of the next request's units; Retry-After = ceil(deficit / rate).
    level = depth - held
    refused = gate.arrive(globex, 1000, 2000, 0.0, "r4")
    assert isinstance(refused, Refusal) and (refused.status, refused.reason) == (429, BUCKET)
    assert refused.retry_after_s == math.ceil((held - level) / 100.0)
    assert gate.stats[globex].rejects == {TOO_LONG: 1, NEVER_FITS_BUCKET: 1, BUCKET: 1}


def test_a_request_above_the_kv_cap_never_fits_and_one_beside_others_waits():
    gate = _gate(globex={"kv_cap_tokens_per_replica": 3000})
    globex = _tenant(gate, "globex")
    pool = gate.pools[gate.tenants[globex].pool]
    never = gate.arrive(globex, 100, 2950, 0.0, "big")
    assert isinstance(never, Refusal) and (never.status, never.reason, never.retry_after_s) == (
        413,
        NEVER_FITS_KV,
        None,
    )
    tickets = [gate.arrive(globex, 100, 2400, 0.0, f"r{i}") for i in range(pool.replicas + 1)]
    assert all(isinstance(t, Ticket) for t in tickets)
    sent = gate.dispatch(pool.name, 0.0)
    # Each holds 2,500 tokens of KV estimate (prompt and granted output): a replica's cap of 3,000 takes one, so the
    # pool takes one a replica, each on its own, although 3,000 x replicas would hold one more over the pool.
    assert len(sent) == pool.replicas < 3000 * pool.replicas // 2500
    assert sorted(t.replica for t in sent) == list(range(pool.replicas))
    assert tickets[-1].state == "queued"
    gate.settle(sent[1], COMPLETED, 1.0)
    assert gate.dispatch(pool.name, 1.0) == [tickets[-1]]
    assert tickets[-1].replica == sent[1].replica


def test_the_kv_cap_is_per_replica_requests_go_where_the_tenant_has_room():
    """Small requests spread over the replicas by the gateway's in-flight load; a large one goes only to a replica
    where the tenant's estimate leaves room for it, and waits while none does."""
    gate = _gate(globex={"kv_cap_tokens_per_replica": 3000, "max_concurrent_sequences": 1000})
    globex = _tenant(gate, "globex")
    pool = gate.pools[gate.tenants[globex].pool]
    assert pool.replicas >= 2
    small = [gate.arrive(globex, 100, 900, 0.0, f"s{i}") for i in range(2 * pool.replicas)]
    sent = gate.dispatch(pool.name, 0.0)
    assert sent == small
    # Two of 1,000 tokens on each replica, one after another round the replicas (the least loaded first).
    assert [t.replica for t in sent] == [*range(pool.replicas), *range(pool.replicas)]
    large = gate.arrive(globex, 100, 1900, 0.0, "large")
    assert isinstance(large, Ticket)
    # 2,000 resident + 2,000 is over 3,000 on every replica, although the pool holds 2,000 x replicas of 3,000 x replicas.
    assert gate.dispatch(pool.name, 0.0) == [] and large.state == "queued"
    gate.settle(small[0], COMPLETED, 1.0)
    # Replica 0 now holds 1,000: the large one fits there and nowhere else.
    assert gate.dispatch(pool.name, 1.0) == [large] and large.replica == 0
    for ticket in [*small[1:], large]:
        gate.settle(ticket, COMPLETED, 2.0)
    queue = gate.queues[pool.name]
    assert queue.resident_kv[globex] == [0] * pool.replicas and queue.replica_inflight == [0] * pool.replicas


def test_placement_takes_the_least_loaded_replica_with_room():
    caps = TenantCaps(max_concurrent_sequences=8, kv_cap_tokens_per_replica=1000)
    assert place(caps, [0, 0, 0], [2, 1, 1], 500) == 1
    assert place(caps, [600, 0, 0], [0, 1, 1], 500) == 1
    assert place(caps, [600, 500, 600], [0, 0, 0], 500) == 1
    assert place(caps, [600, 501, 600], [0, 0, 0], 500) is None
    assert place(caps, [0], [0], 1000) == 0 and place(caps, [0], [0], 1001) is None


def test_the_concurrency_cap_holds_requests_in_the_queue():
    gate = _gate(globex={"max_concurrent_sequences": 2})
    globex = _tenant(gate, "globex")
    pool = gate.tenants[globex].pool
    tickets = [gate.arrive(globex, 10, 10, 0.0, f"r{i}") for i in range(3)]
    assert [t.state for t in gate.dispatch(pool, 0.0)] == [SENT, SENT]
    assert tickets[2].state == "queued"
    gate.settle(tickets[0], COMPLETED, 1.0)
    assert gate.dispatch(pool, 1.0) == [tickets[2]]


def test_a_long_prompt_is_routed_to_the_long_context_pool_at_its_weights():
    gate = _gate()
    globex = _tenant(gate, "globex")
    tenant = gate.tenants[globex]
    assert tenant.long_context_pool is not None and tenant.route_above_prompt_tokens is not None
    short = gate.arrive(globex, tenant.route_above_prompt_tokens - 100, 10, 0.0, "short")
    long = gate.arrive(globex, tenant.route_above_prompt_tokens + 1, 10, 0.0, "long")
    assert isinstance(short, Ticket) and isinstance(long, Ticket)
    assert short.pool == tenant.pool and long.pool == tenant.long_context_pool
    assert long.output_weight == tenant.long_context_weights.output


def test_the_engine_gets_the_tiers_priority_the_tenants_salt_and_a_capped_max_tokens():
    gate = _gate()
    globex = _tenant(gate, "globex")
    tenant = gate.tenants[globex]
    ticket = gate.arrive(globex, 10, 10**6, 0.0, "r")
    assert isinstance(ticket, Ticket)
    body = {"model": "anything", "messages": [], "priority": -100, "cache_salt": "mine", "max_tokens": 10**6,
            "max_completion_tokens": 10**6, "stream": True, "api_base": "http://elsewhere"}  # fmt: skip
    out = gate.rewrite(ticket, body)
    assert out["priority"] == tenant.priority
    assert out["cache_salt"] == sample_salts(gate.policy)[tenant.salt_ref]
    assert out["max_tokens"] == tenant.max_output_tokens and "max_completion_tokens" not in out
    assert out["model"] == tenant.pool and "api_base" not in out
    assert out["stream_options"] == {"include_usage": True}
    shared = next(i for i, t in enumerate(gate.tenants) if t.salt_ref is None)
    other = gate.arrive(shared, 10, 10, 0.0, "s")
    assert "cache_salt" not in gate.rewrite(other, {"cache_salt": "mine"})


def test_leases_renew_as_tokens_stream_and_stop_at_the_quota_with_no_overshoot():
    depth = 2000.0
    gate = _gate(globex={"bucket_depth_units": depth, "bucket_rate_units_per_s": 1e-9})
    globex = _tenant(gate, "globex")
    ticket = gate.arrive(globex, 10, 1000, 0.0, "r")
    assert isinstance(ticket, Ticket)
    gate.dispatch(ticket.pool, 0.0)
    streamed = 0
    while gate.on_tokens(ticket, 1, 1.0) == 1:
        streamed += 1
    record = gate.settle(ticket, QUOTA_STOP, 2.0)
    weight = ticket.output_weight
    # Whole tokens while the bucket held their units: nothing past the depth.
    assert streamed == int((depth - ticket.prompt_units) / weight)
    assert record["units_debited"] <= depth
    assert record["units_debited"] == pytest.approx(ticket.prompt_units + weight * streamed)


@pytest.mark.parametrize("admission", POLICY_NAMES)
@pytest.mark.parametrize(
    ("outcome", "tokens", "billed_prompt"),
    [(COMPLETED, 40, True), (QUOTA_STOP, 40, True), (ENGINE_ERROR, 0, False), (ENGINE_ERROR, 7, True),
     (DISCONNECT, 0, True), (DISCONNECT, 5, True)],
)  # fmt: skip
def test_settlement_on_every_terminal_path_conserves_units(admission, outcome, tokens, billed_prompt):
    """Every path: the bucket ends at its depth less what was billed (prompt at its weights, W per token received),
    and the record says held + streamed + charged = billed + released."""
    depth = 50_000.0
    gate = _gate(admission=admission, globex={"bucket_depth_units": depth, "bucket_rate_units_per_s": 1e-9})
    globex = _tenant(gate, "globex")
    ticket = gate.arrive(globex, 100, 60, 0.0, "r")
    assert isinstance(ticket, Ticket)
    gate.dispatch(ticket.pool, 0.0)
    assert gate.on_tokens(ticket, tokens, 0.5) == tokens
    record = gate.settle(ticket, outcome, 1.0, prompt_tokens=100, cached_tokens=40)
    weights = gate.tenants[globex].weights
    expected = (weights.request_units(100, 40, 0) if billed_prompt else 0.0) + weights.output * tokens
    assert record["units_debited"] == pytest.approx(expected)
    assert gate.store.level(globex, 1.0) == pytest.approx(depth - expected, abs=1e-6)
    assert record["units_taken"] + record["units_charged"] == pytest.approx(
        record["units_debited"] + record["units_released"]
    )
    assert gate.settle(ticket, outcome, 2.0) is None  # once
    assert gate.inflight[globex] == 0 and not any(gate.queues[ticket.pool].resident_kv[globex])


def test_cached_prompt_tokens_are_refunded_to_their_weight():
    gate = _gate(globex={"bucket_depth_units": 50_000.0, "bucket_rate_units_per_s": 1e-9})
    globex = _tenant(gate, "globex")
    ticket = gate.arrive(globex, 1000, 10, 0.0, "r")
    gate.dispatch(ticket.pool, 0.0)
    gate.on_tokens(ticket, 10, 0.1)
    held_prompt = ticket.prompt_units
    record = gate.settle(ticket, COMPLETED, 0.2, prompt_tokens=1000, cached_tokens=800)
    weights = gate.tenants[globex].weights
    assert record["units_debited"] == pytest.approx(weights.request_units(1000, 800, 10))
    assert record["units_debited"] < held_prompt  # the cached tokens came back


def test_a_lease_that_is_not_renewed_expires():
    gate = _gate(settings=GateSettings(lease_ttl_s=5.0))
    globex = _tenant(gate, "globex")
    ticket = gate.arrive(globex, 10, 10, 0.0, "r")
    gate.dispatch(ticket.pool, 0.0)
    gate.on_tokens(ticket, 3, 1.0)
    assert gate.expired(5.5) == []
    assert gate.expired(6.5) == [ticket]


def _backlogged_shares(gate: Gate, a: int, b: int, outputs: tuple[int, int], steps: int) -> tuple[float, float]:
    """Two tenants always backlogged on one pool; each step every request in flight streams a token. Returns the
    units each was served."""
    pool = gate.tenants[a].pool
    served = {a: 0.0, b: 0.0}
    n = 0
    for tenant in (a, b):
        for _ in range(30):
            gate.arrive(tenant, 10, 1000, 0.0, f"r{n}")
            n += 1
    live: list[Ticket] = []
    for step in range(steps):
        now = float(step)
        live += gate.dispatch(pool, now)
        for ticket in list(live):
            gate.on_tokens(ticket, 1, now)
            served[ticket.tenant] += ticket.output_weight
            if ticket.output_tokens >= outputs[0 if ticket.tenant == a else 1]:
                served[ticket.tenant] += ticket.prompt_units
                gate.settle(ticket, COMPLETED, now)
                live.remove(ticket)
                gate.arrive(ticket.tenant, 10, 1000, now, f"r{n}")
                n += 1
    return served[a], served[b]


@pytest.mark.parametrize(("rates", "share"), [((1e6, 1e6), 0.5), ((2e6, 1e6), 2 / 3)])
def test_fair_dispatch_serves_backlogged_tenants_in_proportion_to_their_contracts(rates, share):
    """Outputs of 20 and 200 tokens: the Virtual Token Counter serves units in proportion to the contracts."""
    policy = platform_policy()
    names = [t.name for t in policy.tenants if t.pool == policy.tenants[0].pool][:2]
    gate = _gate(
        settings=GateSettings(inflight_per_replica=1),
        **{
            name: {"bucket_rate_units_per_s": rate, "bucket_depth_units": 1e9}
            for name, rate in zip(names, rates, strict=True)
        },
    )
    a, b = _tenant(gate, names[0]), _tenant(gate, names[1])
    served_a, served_b = _backlogged_shares(gate, a, b, (20, 200), 20_000)
    assert served_a / (served_a + served_b) == pytest.approx(share, abs=0.05)


def test_the_settings_file_errors_name_the_file_and_field(tmp_path):
    path = tmp_path / "enforce.json"
    path.write_text(json.dumps({"admission_policy": "nope"}), encoding="utf-8")
    with pytest.raises(QuotacalcError, match=r"enforce.json: admission_policy: unknown admission policy 'nope'"):
        read_settings(path)
    path.write_text(json.dumps({"lease_tokens": 0}), encoding="utf-8")
    with pytest.raises(QuotacalcError, match=r"enforce.json: lease_tokens: Input should be greater than or equal"):
        read_settings(path)
    path.write_text("{", encoding="utf-8")
    with pytest.raises(QuotacalcError, match=r"enforce.json: not JSON"):
        read_settings(path)
    path.write_text(json.dumps({"state": "etcd"}), encoding="utf-8")
    with pytest.raises(QuotacalcError, match=r"enforce.json: state: "):
        read_settings(path)


def test_replica_deployments_name_each_replica_of_a_pool_once(tmp_path):
    policy = platform_policy()
    pool = policy.pools[0]
    path = tmp_path / "enforce.json"
    ids = [f"{pool.name}-{i}" for i in range(pool.replicas)]
    check_replicas(EnforceSettings(replica_deployments={pool.name: ids}), policy, path)
    for given, said in (
        ({"nowhere": ids}, r"enforce.json: replica_deployments.nowhere: no pool 'nowhere' in the policy \(name one of "),
        ({pool.name: ids[:-1]}, rf"replica_deployments.{pool.name}: {pool.replicas - 1} deployment ids .* of "
         rf"{pool.replicas} replicas \(list the model_info.id of each"),
        ({pool.name: [ids[0]] * pool.replicas}, rf"\({1} distinct\) for pool '{pool.name}'"),
    ):  # fmt: skip
        with pytest.raises(QuotacalcError, match=said):
            check_replicas(EnforceSettings(replica_deployments=given), policy, path)
    path.write_text(json.dumps({"replica_deployments": {pool.name: "one-id"}}), encoding="utf-8")
    with pytest.raises(
        QuotacalcError, match=rf"enforce.json: replica_deployments.{pool.name}: Input should be a valid list"
    ):
        read_settings(path)


def test_a_salted_tenant_without_its_salt_is_refused_not_served_unsalted(tmp_path):
    policy = platform_policy()
    (tmp_path / "policy.json").write_text(policy.model_dump_json(), encoding="utf-8")
    (tmp_path / "salts.json").write_text("{}", encoding="utf-8")
    settings = EnforceSettings(policy="policy.json", salts="salts.json")
    with pytest.raises(QuotacalcError, match=r"salts.json: .*is salted but the salts file has no salt for it"):
        read_policy(settings, tmp_path)
    (tmp_path / "salts.json").write_text(json.dumps(sample_salts(policy)), encoding="utf-8")
    read_back, salts = read_policy(settings, tmp_path)
    assert read_back == policy and salts == sample_salts(policy)


def test_a_request_that_waits_past_the_bound_gets_a_429_and_its_hold_back():
    gate = _gate(
        settings=GateSettings(queue_wait_max_s=8.0),
        globex={"max_concurrent_sequences": 1, "bucket_depth_units": 50_000.0, "bucket_rate_units_per_s": 1e-9},
    )
    globex = _tenant(gate, "globex")
    first = gate.arrive(globex, 10, 10, 0.0, "first")
    waiting = gate.arrive(globex, 10, 10, 0.0, "waiting")
    gate.dispatch(first.pool, 0.0)
    assert gate.overdue(8.0) == [] and gate.overdue(8.5) == [waiting]
    refusal, record = gate.refuse_waiting(waiting, 8.5)
    # Retry-After: queue_wait_max_s / 4, rounded (docs/enforce.md).
    assert (refusal.status, refusal.reason, refusal.retry_after_s) == (429, "queue_timeout", 2)
    assert record["units_debited"] == 0 and record["units_released"] == pytest.approx(waiting.reserved_units)
    # The record says what the client got, as a refusal before the queue says it, with the same keys.
    assert (record["status"], record["outcome"], record["retry_after_s"]) == (429, "queue_timeout", 2)
    assert record["dispatched"] is None and record["start"] == 0.0 and record["end"] == 8.5
    assert set(refusal_record(refusal, "globex", "x", 8.5, 10)) <= set(record)
    assert gate.store.level(globex, 8.5) == pytest.approx(50_000.0 - first.hold)
    assert gate.stats[globex].rejects == {"queue_timeout": 1}


def test_a_record_says_when_its_request_was_dispatched_after_its_wait_in_the_queue():
    gate = _gate(globex={"max_concurrent_sequences": 1})
    globex = _tenant(gate, "globex")
    first = gate.arrive(globex, 10, 10, 0.0, "first")
    second = gate.arrive(globex, 10, 10, 1.0, "second")
    assert gate.dispatch(first.pool, 1.5) == [first]
    gate.on_tokens(first, 10, 3.0)
    assert gate.settle(first, COMPLETED, 4.0)["dispatched"] == 1.5
    # The settlement freed the tenant's one slot: the second goes now, 3 s after it arrived.
    assert gate.dispatch(second.pool, 4.0) == [second]
    gate.on_tokens(second, 10, 5.0)
    record = gate.settle(second, COMPLETED, 6.0)
    assert (record["start"], record["dispatched"], record["first_token"], record["end"]) == (1.0, 4.0, 5.0, 6.0)


def test_a_request_let_through_unmetered_is_recorded_at_its_end_with_its_tokens_and_no_units():
    """Fail open (the store down): nothing is held, billed or capped, but the record at the end carries the tokens
    the engine served, so fleet sees the load."""
    gate = _gate(globex={"max_concurrent_sequences": 1})
    globex = _tenant(gate, "globex")
    level = gate.store.level(globex, 0.0)
    ticket = gate.admit_unmetered(globex, 40, 0.0, "open")
    assert gate.live["open"] is ticket and gate.expired(1.0) == []
    # Uncapped and unheld: every token is covered, and a metered request of the tenant still goes at once.
    assert gate.on_tokens(ticket, 500, 2.0) == 500
    metered = gate.arrive(globex, 10, 10, 2.0, "metered")
    assert gate.dispatch(metered.pool, 2.0) == [metered]
    record = gate.settle(ticket, COMPLETED, 3.0, prompt_tokens=42, cached_tokens=8, output_tokens=501)
    assert record["unmetered"] is True and "status" not in record and record["outcome"] == COMPLETED
    assert (record["prompt_tokens"], record["cached_tokens"], record["output_tokens"]) == (42, 8, 501)
    assert (record["start"], record["dispatched"], record["first_token"], record["end"]) == (0.0, 0.0, 2.0, 3.0)
    units = [value for key, value in record.items() if key.startswith("units_")]
    assert units and all(value == 0 for value in units)
    assert gate.store.level(globex, 0.0) == pytest.approx(level - metered.hold)
    assert gate.settle(ticket, COMPLETED, 3.0) is None and "open" not in gate.live


def test_an_unmetered_request_whose_end_never_came_is_recorded_when_its_lease_expires():
    gate = _gate(settings=GateSettings(lease_ttl_s=5.0))
    globex = _tenant(gate, "globex")
    ticket = gate.admit_unmetered(globex, 40, 0.0, "open")
    gate.on_tokens(ticket, 3, 1.0)
    assert gate.expired(5.5) == [] and gate.expired(6.5) == [ticket]
    record = gate.settle(ticket, "lease_expired", 6.5)
    assert record["output_tokens"] == 3 and record["units_debited"] == 0 and record["unmetered"] is True


def test_a_response_not_streamed_whose_lease_expires_is_billed_what_it_was_granted():
    gate = _gate(settings=GateSettings(lease_ttl_s=5.0))
    globex = _tenant(gate, "globex")
    ticket = gate.arrive(globex, 10, 300, 0.0, "r")
    ticket.streaming = False
    gate.dispatch(ticket.pool, 0.0)
    granted = gate.lease_all(ticket, 0.0)
    assert gate.expired(6.0) == [ticket]
    record = gate.settle(ticket, "lease_expired", 6.0)
    weights = gate.tenants[globex].weights
    assert record["output_tokens"] == granted == 300
    assert record["units_debited"] == pytest.approx(weights.request_units(10, 0, 0) + weights.output * 300)
    assert record["units_released"] == pytest.approx(0.0, abs=1e-9)


def test_a_call_id_in_flight_is_refused_409_not_taken_for_the_first():
    """The client sets the call id (LiteLLM's x-litellm-call-id) and the gate keys each live request by it: a second
    request with the id of one in flight is refused, and the first goes on untouched; once it ends, the id is free."""
    gate = _gate()
    globex = _tenant(gate, "globex")
    first = gate.arrive(globex, 100, 10, 0.0, "same")
    assert isinstance(first, Ticket)
    refusal = gate.refuse_call_id_in_use(globex, "same")
    assert refusal is not None and refusal.status == 409 and refusal.retry_after_s is None
    assert gate.stats[globex].rejects == {refusal.reason: 1}
    assert gate.live["same"] is first
    assert gate.refuse_call_id_in_use(globex, "other") is None
    assert gate.refuse_call_id_in_use(globex, "other", elsewhere=True) is not None  # the driver's own state
    gate.dispatch(first.pool, 0.0)
    gate.settle(first, COMPLETED, 1.0, prompt_tokens=100, output_tokens=10)
    assert gate.refuse_call_id_in_use(globex, "same") is None


def test_the_plugin_refuses_a_second_request_with_a_call_id_in_flight(tmp_path):
    """In the plugin, with state in memory: the second pre-call with the call id of a live stream gets the 409 and a
    refusal record, and the first stream's ticket is the one still found by that id."""
    import asyncio

    pytest.importorskip("litellm", reason="the litellm extra is not installed")
    from enforce_stack import edit_settings, generate, in_process_enforcer
    from fastapi import HTTPException

    folder = generate(tmp_path)
    edit_settings(folder, tenant_from="header", prompt_tokens="bytes4")
    enforcer = in_process_enforcer(folder)
    body = {"model": "std", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50, "stream": True,
            "litellm_call_id": "client-chosen", "proxy_server_request": {"headers": {"x-tenant-id": "alpha"}}}  # fmt: skip

    spent_first: list[float] = []

    async def twice():
        data = await enforcer.async_pre_call_hook(None, None, dict(body), "acompletion")
        first = enforcer._ticket(data)
        spent_first.extend(enforcer._spent_s["client-chosen"])
        with pytest.raises(HTTPException) as refused:
            await enforcer.async_pre_call_hook(None, None, dict(body), "acompletion")
        return first, refused.value

    first, refused = asyncio.run(twice())
    assert first is not None and enforcer.gate.live["client-chosen"] is first
    # The refused duplicate's time counts in the hook's histogram, not in the first request's own total.
    assert sum(enforcer.plugin_seconds["pre_call"].counts) == 2
    assert enforcer._spent_s["client-chosen"][0] == pytest.approx(spent_first[0])
    assert refused.status_code == 409 and refused.headers["x-quotacalc-reason"] == "call_id_in_use"
    lines = [json.loads(line) for line in (folder / "usage.jsonl").read_text(encoding="utf-8").splitlines()]
    assert [(r["request_id"], r["status"]) for r in lines] == [("client-chosen", 409)]


def test_a_request_let_through_unmetered_is_still_rewritten_as_its_tier_says():
    """Failing open skips the units, not the policy: the client's priority and cache salt are replaced by the tier's
    and the tenant's, and max_tokens is capped at the tier's output cap (the room its context leaves)."""
    gate = _gate()
    globex = _tenant(gate, "globex")
    tenant = gate.tenants[globex]
    assert tenant.name in gate.salts  # a salted tenant: failing open must not share its cache namespace
    ticket = gate.admit_unmetered(globex, 40, 0.0, "open", client_max_tokens=10**6)
    body = gate.rewrite(ticket, {"model": "x", "priority": -100, "cache_salt": "mine", "max_tokens": 10**6})
    assert body["cache_salt"] == gate.salts[tenant.name]
    pool = gate.pools[ticket.pool]
    assert body.get("priority") == (tenant.priority if pool.engine.scheduling_policy == "priority" else None)
    context = min(tenant.max_context_tokens, pool.engine.max_model_len)
    assert body["max_tokens"] == min(tenant.max_output_tokens, context - 40)
    asked = gate.admit_unmetered(globex, 40, 0.0, "small", client_max_tokens=7)
    assert gate.rewrite(asked, {"model": "x"})["max_tokens"] == 7
