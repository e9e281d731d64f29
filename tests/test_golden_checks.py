"""Every plan finding, in full (and the plan's size totals): severity, code, subject, message, fix and figures, worked out by hand.

The policies are built by hand (no plan file, no pricing): one standard pool of 4 replicas selling
10,000 units/s each at the ceiling (40,000 units/s, 100,000 KV tokens per replica, 32,768 tokens of
context, $7,200 per replica-month) and a long-context pool of 2 replicas of 5,000 units/s (W 4.5,
300,000 KV tokens, 131,072 tokens of context). docs/method.md §2-§6 give the rules the findings apply.
"""

from __future__ import annotations

import pytest
from policy_samples import prompt_charge

from quotacalc.core.checks import Finding, check_plan
from quotacalc.core.plan import Oversubscription
from quotacalc.core.plan_size import size_plan
from quotacalc.core.policy import EngineSettings, PoolPolicy, QuotaPolicy, RetryAfter, TenantPolicy, UnitWeights
from quotacalc.core.pricing_warning import PricingWarning
from quotacalc.core.salts import looks_like_salt


def _engine(max_model_len: int) -> EngineSettings:
    return EngineSettings(
        model="m",
        served_model_name="m",
        tensor_parallel_size=4,
        max_model_len=max_model_len,
        max_num_seqs=64,
        max_num_batched_tokens=8192,
        gpu_memory_utilization=0.9,
        kv_cache_dtype="auto",
        enable_prefix_caching=True,
        scheduling_policy="priority",
    )


SHARED = PoolPolicy(
    name="shared",
    role="standard",
    replicas=4,
    gpu="h100-sxm",
    gpus_per_replica=4,
    output_weight=3.0,
    replica_units_per_s=10_000.0,
    capacity_units_per_s=40_000.0,
    kv_pool_tokens=100_000,
    max_context_tokens=32_768,
    long_context_pool="long",
    route_above_prompt_tokens=32_768,
    prompt_length_charge=prompt_charge(32_768),
    usd_per_month=4 * 7_200.0,
    engine=_engine(32_768),
)
LONG = PoolPolicy(
    name="long",
    role="long_context",
    replicas=2,
    gpu="h100-sxm",
    gpus_per_replica=4,
    output_weight=4.5,
    replica_units_per_s=5_000.0,
    capacity_units_per_s=10_000.0,
    kv_pool_tokens=300_000,
    max_context_tokens=131_072,
    prompt_length_charge=prompt_charge(131_072),
    usd_per_month=2 * 7_200.0,
    engine=_engine(131_072),
)


def tenant(
    name: str,
    units_per_s: float = 1_000.0,
    *,
    pool: str = "shared",
    tier: str = "std",
    long: bool = False,
    placement: str = "shared",
    kv_cap: int = 50_000,
    max_context: int = 16_384,
    salted: bool = False,
    lora: tuple[str, ...] = (),
) -> TenantPolicy:
    return TenantPolicy(
        name=name,
        tier=tier,
        pool=pool,
        long_context_pool=("long" if pool == "shared" else f"{pool}-long") if long else None,
        route_above_prompt_tokens=32_768 if long else None,
        placement=placement,
        bucket_rate_units_per_s=units_per_s,
        bucket_depth_units=60 * units_per_s,
        weights=UnitWeights(cached_prompt=0.1, output=3.0),
        kv_cap_tokens_per_replica=kv_cap,
        max_context_tokens=max_context,
        max_output_tokens=4096,
        max_concurrent_sequences=16,
        priority=1,
        retry_after=RetryAfter(bucket_rate_units_per_s=units_per_s, max_s=60),
        cache_isolation="salted" if salted else "shared",
        salt_ref=name if salted else None,
        lora_adapters=lora,
    )


def policy(*tenants: TenantPolicy, pools=(SHARED, LONG), ratio: float | None = None) -> QuotaPolicy:
    return QuotaPolicy(
        tenant_header="x-tenant-id",
        pools=pools,
        tiers=(),
        tenants=tenants,
        oversubscription=Oversubscription(ratio=ratio, source="usage logs") if ratio else None,
    )


def found(result, code: str) -> list[Finding]:
    return [finding for finding in result.findings if finding.code == code]


NO_RATIO = Finding(
    severity="info",
    code="oversubscription",
    subject="oversubscription",
    message="no oversubscription assumed: capacity is checked against units sold one for one",
    fix="measure the ratio (sum of per-tenant peaks / fleet peak) from usage data to sell more",
)
SALTS_UNCHECKED = Finding(
    severity="info",
    code="salts-unchecked",
    subject="tenants",
    message=(
        "no salt secret given: LoRA adapter names were checked against tenant names and a salt's shape only, "
        "not against the salts themselves"
    ),
    fix="set QUOTACALC_SALT_SECRET or pass --salt-secret-file to check the salts",
)


# --------------------------------------------------------------------------- capacity (§5)


def test_a_sound_plan_reports_each_pool_and_what_was_assumed():
    # The long-context pool comes first: the standard pool after it is still checked.
    result = check_plan(policy(tenant("a", 12_000, salted=True), tenant("b", 8_000), pools=(LONG, SHARED)))
    assert result.findings == (
        Finding(
            severity="info",
            code="capacity",
            subject="pools.long",
            # 2 replicas × 5,000 units/s = 10,000, checked like any pool: no tenant is sized on traffic routed here
            # and none routes its long prompts here, so nothing is sold and nothing left uncounted.
            message=(
                "0 of 10,000 units/s sold (0%, 2 replicas at the ceiling): counted, the tenants sized on traffic "
                "whose mean prompt routes here"
            ),
            figures={"units_sold_per_s": 0.0, "capacity_units_per_s": 10_000.0, "ratio": 1.0},
        ),
        Finding(
            severity="info",
            code="capacity",
            subject="pools.shared",
            # 12,000 + 8,000 = 20,000 of 4 × 10,000 = 40,000: 50%.
            message="20,000 of 40,000 units/s sold (50%, 4 replicas at the ceiling)",
            figures={"units_sold_per_s": 20_000.0, "capacity_units_per_s": 40_000.0, "ratio": 1.0},
        ),
        NO_RATIO,
        SALTS_UNCHECKED,
    )
    assert result.count("info") == 4 and result.count("warning") == result.count("error") == 0
    assert result.salts_checked is False and result.reversal_replicas == 2.0


def test_a_measured_ratio_raises_the_limit():
    result = check_plan(policy(tenant("a", 12_000), tenant("b", 8_000), ratio=1.25))
    # 40,000 × 1.25 = 50,000 units/s may be sold; 20,000 is 40% of it.
    assert [f for f in found(result, "capacity") if f.subject == "pools.shared"] == [
        Finding(
            severity="info",
            code="capacity",
            subject="pools.shared",
            message="20,000 of 50,000 units/s sold (40%, 4 replicas at the ceiling × measured oversubscription 1.25)",
            figures={"units_sold_per_s": 20_000.0, "capacity_units_per_s": 40_000.0, "ratio": 1.25},
        )
    ]
    # The ratio's source stands beside it, in place of "no oversubscription assumed".
    assert found(result, "oversubscription") == [
        Finding(
            severity="info",
            code="oversubscription",
            subject="oversubscription",
            message="measured oversubscription 1.25 (raises the pools of shared tenants): usage logs",
            figures={"ratio": 1.25},
        )
    ]


def test_selling_exactly_the_capacity_is_not_overselling():
    result = check_plan(policy(*(tenant(name, 10_000) for name in "abcd")))
    (capacity,) = [f for f in found(result, "capacity") if f.subject == "pools.shared"]
    assert capacity.severity == "info"
    assert capacity.message == "40,000 of 40,000 units/s sold (100%, 4 replicas at the ceiling)"
    assert found(result, "oversold") == []


def test_an_oversold_pool_says_how_many_replicas_it_needs():
    result = check_plan(policy(*(tenant(name, 10_000) for name in "abcde")))
    # 50,000 / 10,000 = 5 replicas exactly (float noise must not make it 6).
    assert found(result, "oversold") == [
        Finding(
            severity="error",
            code="oversold",
            subject="pools.shared",
            message="50,000 units/s sold, above the capacity of 40,000 units/s (4 replicas × 10,000 at the ceiling)",
            fix="raise replicas to 5, move tenants, or measure an oversubscription ratio",
            figures={"units_sold_per_s": 50_000.0, "capacity_units_per_s": 40_000.0, "ratio": 1.0},
        )
    ]
    # With a measured ratio of 1.25: 60,000 sold > 50,000; 60,000 / (10,000 × 1.25) = 4.8 -> 5 replicas.
    (oversold,) = found(check_plan(policy(*(tenant(name, 10_000) for name in "abcdef"), ratio=1.25)), "oversold")
    assert oversold.message == (
        "60,000 units/s sold, above the capacity of 50,000 units/s "
        "(4 replicas × 10,000 at the ceiling × measured oversubscription 1.25)"
    )
    assert oversold.fix == "raise replicas to 5, move tenants, or measure an oversubscription ratio"


# --------------------------------------------------------------------------- tier limits (§3)


def test_a_kv_cap_above_the_pool_is_said_once_per_tier_and_pool():
    # 150,000 > the standard pool's 100,000 (the long pool's 300,000 holds it); two tenants, one finding.
    result = check_plan(policy(tenant("a", tier="gold", kv_cap=150_000), tenant("b", tier="gold", kv_cap=150_000)))
    assert found(result, "kv-cap") == [
        Finding(
            severity="error",
            code="kv-cap",
            subject="tiers.gold",
            message="KV cap of 150,000 tokens per replica exceeds pool 'shared', whose replicas hold 100,000 tokens of requests at the pool's context",
            fix="lower kv_cap_tokens_per_replica, or serve the tier from a pool with more KV",
            figures={"kv_cap_tokens_per_replica": 150_000.0, "kv_pool_tokens": 100_000.0},
        )
    ]
    # A cap of exactly the pool fits.
    assert found(check_plan(policy(tenant("a", kv_cap=100_000))), "kv-cap") == []


def test_a_kv_cap_is_checked_on_the_long_context_pool_too():
    # 350,000 exceeds both pools (100,000 and 300,000): one finding per pool the tier routes to.
    result = check_plan(policy(tenant("a", tier="gold", long=True, kv_cap=350_000, max_context=100_000)))
    assert [(f.message, f.figures) for f in found(result, "kv-cap")] == [
        (
            "KV cap of 350,000 tokens per replica exceeds pool 'shared', whose replicas hold 100,000 tokens of requests at the pool's context",
            {"kv_cap_tokens_per_replica": 350_000.0, "kv_pool_tokens": 100_000.0},
        ),
        (
            "KV cap of 350,000 tokens per replica exceeds pool 'long', whose replicas hold 300,000 tokens of requests at the pool's context",
            {"kv_cap_tokens_per_replica": 350_000.0, "kv_pool_tokens": 300_000.0},
        ),
    ]


def test_max_context_is_checked_on_the_pool_that_serves_the_long_prompts():
    # 100,000 tokens: above the standard pool's 32,768, within the long pool's 131,072, where they go.
    routed = check_plan(policy(tenant("a", long=True, kv_cap=100_000, max_context=100_000)))
    assert found(routed, "max-context") == []
    # 200,000 tokens: above the long pool too; two tenants of the tier, one finding.
    too_long = [tenant(name, tier="gold", long=True, kv_cap=200_000, max_context=200_000) for name in "ab"]
    assert found(check_plan(policy(*too_long)), "max-context") == [
        Finding(
            severity="error",
            code="max-context",
            subject="tiers.gold",
            message=(
                "max context of 200,000 tokens is above what pool 'long' serves "
                "(131,072 tokens: the model's maximum or the engine's max_model_len, capped by its KV pool)"
            ),
            fix="lower max_context_tokens, or route the tier's long prompts to a pool that serves them",
            figures={"max_context_tokens": 200_000.0, "pool_max_context_tokens": 131_072.0},
        )
    ]
    # Without a long-context route, the standard pool (32,768 tokens) serves all of it.
    (unrouted,) = found(check_plan(policy(tenant("a", max_context=40_000))), "max-context")
    assert unrouted.figures == {"max_context_tokens": 40_000.0, "pool_max_context_tokens": 32_768.0}


def test_a_kv_cap_below_the_max_context_warns_once_per_tier():
    result = check_plan(policy(*(tenant(name, tier="lite", kv_cap=16_384, max_context=32_768) for name in "ab")))
    assert found(result, "kv-cap-below-context") == [
        Finding(
            severity="warning",
            code="kv-cap-below-context",
            subject="tiers.lite",
            message=(
                "KV cap of 16,384 tokens is below the max context of 32,768: "
                "a request at the max context can never be admitted"
            ),
            fix="raise kv_cap_tokens_per_replica to at least max_context_tokens",
        )
    ]
    # A cap of exactly the max context admits a request at the max context.
    assert found(check_plan(policy(tenant("a", kv_cap=32_768, max_context=32_768))), "kv-cap-below-context") == []


# --------------------------------------------------------------------------- placement and reversal (§6)


def test_a_dedicated_tenant_sharing_its_pool_names_the_others():
    result = check_plan(policy(tenant("d", placement="dedicated"), tenant("a"), tenant("b")))
    assert found(result, "dedicated-shared") == [
        Finding(
            severity="error",
            code="dedicated-shared",
            subject="tenants.d",
            message="placement is dedicated, but pool 'shared' also serves a, b",
            fix="give the tenant a pool of its own, or make it shared",
        )
    ]
    # Alone on its pool, a dedicated tenant is fine (and never a reversal, however large).
    alone = check_plan(policy(tenant("d", 30_000, placement="dedicated")))
    assert found(alone, "dedicated-shared") == found(alone, "reversal") == []


def test_a_dedicated_tenant_whose_long_prompts_share_a_long_pool_is_warned():
    dedicated = tenant("d", pool="own", placement="dedicated").model_copy(
        update={"long_context_pool": "long", "route_above_prompt_tokens": 32_768}
    )
    own = SHARED.model_copy(update={"name": "own"})
    pools = (SHARED, own, LONG, LONG.model_copy(update={"name": "own-long"}))
    result = check_plan(policy(dedicated, tenant("a", long=True), tenant("b"), pools=pools))
    assert found(result, "dedicated-long-shared") == [
        Finding(
            severity="warning",
            code="dedicated-long-shared",
            subject="tenants.d",
            message="placement is dedicated, but its prompts above 32,768 tokens route to pool 'long', which a reach "
            "too",
            fix="give pool 'own' a long-context pool of its own, or sell the long prompts as shared",
        )
    ]
    # Its own long pool, or no routing: nothing to say.
    alone = dedicated.model_copy(update={"long_context_pool": "own-long"})
    assert found(check_plan(policy(alone, tenant("a", long=True), pools=pools)), "dedicated-long-shared") == []
    unrouted = dedicated.model_copy(update={"long_context_pool": None, "route_above_prompt_tokens": None})
    assert found(check_plan(policy(unrouted, tenant("a", long=True), pools=pools)), "dedicated-long-shared") == []


def test_a_large_shared_tenant_is_told_what_a_dedicated_pool_costs():
    result = check_plan(policy(tenant("big", 25_000)))
    # 25,000 / 10,000 = 2.5 replicas >= 2; dedicated: 3 replicas × ($28,800 / 4 = $7,200) = $21,600;
    # its share of the shared pool: 2.5 × $7,200 = $18,000.
    assert found(result, "reversal") == [
        Finding(
            severity="warning",
            code="reversal",
            subject="tenants.big",
            message=(
                "load of 2.50 replicas (25,000 units/s) on pool 'shared': sharing buys little multiplexing at this "
                "size; a dedicated pool of 3 replicas costs $21,600/month (its shared share: $18,000/month)"
            ),
            fix="give it a dedicated pool of 3 replicas (placement: dedicated)",
            figures={
                "replicas": 2.5,
                "dedicated_replicas": 3.0,
                "dedicated_usd_per_month": 21_600.0,
                "shared_usd_per_month": 18_000.0,
            },
        )
    ]
    # The threshold is inclusive: 20,000 units/s is 2.0 replicas, and warns; 19,999 does not.
    (at_threshold,) = found(check_plan(policy(tenant("t", 20_000))), "reversal")
    assert at_threshold.figures["dedicated_replicas"] == 2 and at_threshold.figures["shared_usd_per_month"] == 14_400
    assert found(check_plan(policy(tenant("t", 19_999))), "reversal") == []
    assert found(check_plan(policy(tenant("big", 25_000)), reversal_replicas=3.0), "reversal") == []


# --------------------------------------------------------------------------- salts and LoRA names (§4)

SALT_SHAPED = "0123456789abcdef" * 4


def test_looks_like_salt_is_64_lower_case_hex_digits():
    assert looks_like_salt(SALT_SHAPED) is True
    assert looks_like_salt("abc") is False  # hex, but short
    assert looks_like_salt(SALT_SHAPED + "0") is False
    assert looks_like_salt("g" * 64) is False  # 64, but not hex
    assert looks_like_salt("X" * 64) is False
    assert looks_like_salt(SALT_SHAPED.upper()) is False  # HMAC hex digests are lower case


def test_a_salt_shaped_adapter_name_warns_until_tenants_are_salted():
    unsalted = check_plan(policy(tenant("a", lora=(SALT_SHAPED,)), tenant("b")))
    shape = Finding(
        severity="warning",
        code="lora-salt-shape",
        subject="tenants.a",
        message=f"LoRA adapter '{SALT_SHAPED}' has a salt's shape (64 hex digits) and could equal one",
        fix="rename the adapter",
    )
    assert found(unsalted, "lora-salt-shape") == [shape]
    # Nothing is salted: no salts to check, and nothing said about them.
    assert found(unsalted, "salts-unchecked") == []
    salted = check_plan(policy(tenant("a", lora=(SALT_SHAPED,)), tenant("b", salted=True)))
    assert found(salted, "lora-salt-shape") == [shape.model_copy(update={"severity": "error"})]
    assert found(salted, "salts-unchecked") == [SALTS_UNCHECKED]


def test_an_adapter_named_like_a_tenant_warns():
    result = check_plan(policy(tenant("a", lora=("b",)), tenant("b")))
    assert found(result, "lora-tenant-name") == [
        Finding(
            severity="warning",
            code="lora-tenant-name",
            subject="tenants.a",
            message="LoRA adapter 'b' is also a tenant's name (the key of its salt reference)",
            fix="rename the adapter so adapter names and tenant names never mix",
        )
    ]


def test_a_salt_equal_to_an_adapter_name_is_an_error_that_never_shows_the_salt():
    result = check_plan(
        policy(tenant("a", salted=True), tenant("b", lora=(SALT_SHAPED,))),
        salts={"a": SALT_SHAPED},
    )
    assert found(result, "salt-lora") == [
        Finding(
            severity="error",
            code="salt-lora",
            subject="tenants.a",
            message="its cache salt equals a LoRA adapter name of tenant 'b'",
            fix="rename the adapter, or rotate the salt secret",
        )
    ]
    assert result.salts_checked is True and found(result, "salts-unchecked") == []


# --------------------------------------------------------------------------- order


def test_findings_are_errors_then_warnings_then_infos_each_in_plan_order():
    # big: 45,000 units/s, more than the pool's 40,000 (an error) and 4.5 replicas (a reversal warning);
    # the pool's pricing warnings come first in the plan, the capacity error and the infos after them.
    result = check_plan(
        policy(tenant("big", 45_000), pools=(SHARED,)),
        pool_warnings={"shared": ("first pricing warning", "second pricing warning")},
    )
    assert [(f.severity, f.code, f.message if f.code == "pool-price" else "") for f in result.findings] == [
        ("error", "oversold", ""),
        ("warning", "pool-price", "first pricing warning"),
        ("warning", "pool-price", "second pricing warning"),
        ("warning", "reversal", ""),
        ("info", "oversubscription", ""),
    ]
    assert found(result, "pool-price")[0].subject == "pools.shared"
    assert (result.count("error"), result.count("warning"), result.count("info")) == (1, 3, 1)


# --------------------------------------------------------------------------- size: what the pools cost


def test_a_pool_filter_counts_the_pool_and_the_long_context_pools_its_tenants_use():
    one_replica = {"replicas": 1, "capacity_units_per_s": 10_000.0, "usd_per_month": 7_200.0}
    other = SHARED.model_copy(update={"name": "other", "long_context_pool": "other-long", **one_replica})
    other_long = LONG.model_copy(update={"name": "other-long", **one_replica})
    idle = SHARED.model_copy(update={"name": "idle", "long_context_pool": None, **one_replica})
    plan = policy(
        tenant("a", long=True),
        tenant("b", pool="other", long=True),
        pools=(SHARED, LONG, other, other_long, idle),
    )
    # Every pool, used or not: $28,800 + $14,400 + 3 × $7,200.
    assert size_plan(plan).totals.pools_usd_per_month == 64_800
    # The shared pool and the long-context pool its tenant routes to: $28,800 + $14,400.
    shared = size_plan(plan, pool="shared")
    assert [row.name for row in shared.tenants] == ["a"]
    assert shared.totals.pools_usd_per_month == 43_200
    # The other pool and its own long-context pool: 2 × $7,200.
    assert size_plan(plan, pool="other").totals.pools_usd_per_month == 14_400


# --------------------------------------------------------------------------- traffic a tenant is sized on


def _traffic(prompt: float, output: float) -> dict:
    from quotacalc.core.deployment import Traffic

    return Traffic(rps=1.0, prompt_tokens=prompt, output_tokens=output)


def test_traffic_above_its_tiers_context_is_an_error():
    # 16,000 + 500 = 16,500 tokens against the tier's 16,384: the gateway refuses the mean request.
    result = check_plan(policy(tenant("a", max_context=16_384)), traffic={"a": _traffic(16_000, 500)})
    assert found(result, "traffic-over-context") == [
        Finding(
            severity="error",
            code="traffic-over-context",
            subject="tenants.a.traffic",
            message="its mean request of 16,500 tokens (prompt 16,000 + output 500) is above the max context of "
            "tier 'std' (16,384 tokens): the gateway refuses such requests",
            fix="raise tiers.std.max_context_tokens to at least 16,500, or size the traffic the tenant sends",
            figures={"request_tokens": 16_500, "max_context_tokens": 16_384},
        )
    ]
    assert (
        found(
            check_plan(policy(tenant("a", max_context=16_500)), traffic={"a": _traffic(16_000, 500)}),
            "traffic-over-context",
        )
        == []
    )


def test_traffic_the_pool_it_routes_to_cannot_serve_is_an_error():
    # Prompt 30,000 (not above the 32,768 threshold: stays on 'shared', 32,768 tokens of context) + 3,000 output
    # = 33,000 tokens, within the tier's 100,000.
    over = check_plan(
        policy(tenant("a", long=True, max_context=100_000, kv_cap=100_000)), traffic={"a": _traffic(30_000, 3_000)}
    )
    assert [(f.severity, f.subject, f.figures) for f in found(over, "traffic-over-pool")] == [
        (
            "error",
            "tenants.a.traffic",
            {"request_tokens": 33_000, "max_context_tokens": 100_000, "pool_max_context_tokens": 32_768},
        )
    ]
    assert "above what pool 'shared' serves (32,768 tokens" in found(over, "traffic-over-pool")[0].message
    # A prompt above the threshold goes to 'long' (131,072 tokens): served.
    routed = check_plan(
        policy(tenant("a", long=True, max_context=100_000, kv_cap=100_000)), traffic={"a": _traffic(40_000, 3_000)}
    )
    assert found(routed, "traffic-over-pool") == [] and found(routed, "traffic-over-context") == []


def test_traffic_output_above_the_tiers_cap_is_a_warning_and_contracts_are_not_checked():
    result = check_plan(policy(tenant("a"), tenant("b")), traffic={"a": _traffic(1_000, 5_000)})
    (finding,) = found(result, "traffic-over-max-output")
    assert (finding.severity, finding.subject, finding.figures) == (
        "warning",
        "tenants.a.traffic",
        {"output_tokens": 5_000, "max_output_tokens": 4_096},
    )
    assert finding.fix == "raise tiers.std.max_output_tokens, or size the traffic the tenant sends"
    assert not [f for f in result.findings if f.subject.startswith("tenants.b")]


def test_long_prompts_routed_to_another_model_are_an_error():
    other = LONG.model_copy(update={"engine": LONG.engine.model_copy(update={"served_model_name": "other"})})
    (finding,) = found(check_plan(policy(tenant("a"), pools=(SHARED, other))), "long-context-model")
    assert finding == Finding(
        severity="error",
        code="long-context-model",
        subject="pools.shared",
        message="routes prompts above 32,768 tokens to pool 'long', which serves other, not m",
        fix="serve m on 'long', or route to a pool that does",
    )
    assert found(check_plan(policy(tenant("a"))), "long-context-model") == []


def test_a_bucket_that_admits_nothing_or_never_the_largest_output():
    # tenant(): a bucket of 60 s × the rate, W 3.0, max_output_tokens 4,096: a reservation of 3 × 4,096 = 12,288 units.
    assert [f for f in check_plan(policy(tenant("a", 1_000.0))).findings if f.code.startswith("bucket")] == []
    (note,) = found(check_plan(policy(tenant("a", 100.0))), "bucket-below-max-output")  # 6,000 units deep
    assert (note.severity, note.subject, note.figures) == (
        "info",
        "tenants.a",
        {"bucket_depth_units": 6_000.0, "reservation_units": 12_288.0},
    )
    # 0.05 units/s × 60 s = 3 units: less than one prompt and one output token (1 + 3 units).
    assert note.fix == "raise the tenant's rate or tiers.std.burst_s, or lower its max_output_tokens"
    (warning,) = found(check_plan(policy(tenant("a", 0.05))), "bucket-below-any-request")
    assert warning.fix == "raise tenants.a.units_per_s or tiers.std.burst_s"
    assert warning.severity == "warning" and warning.figures == {
        "bucket_depth_units": pytest.approx(3.0),
        "smallest_request_units": 4.0,
    }
    assert found(check_plan(policy(tenant("a", 0.05))), "bucket-below-max-output") == []


def test_a_traffic_tenant_whose_bucket_holds_less_than_its_mean_request():
    # 1 req/s sized at 1,000 units/s: a 60 s bucket holds 60,000 units; the mean request costs 1,000. Fine. At a
    # 0.5 s burst (500 units) it does not.
    shallow = tenant("a", 1_000.0).model_copy(update={"bucket_depth_units": 500.0})
    (warning,) = found(check_plan(policy(shallow), traffic={"a": _traffic(500, 100)}), "bucket-below-request")
    assert warning.figures == {"bucket_depth_units": 500.0, "units_per_request": 1_000.0}
    assert warning.fix == "raise tiers.std.burst_s to at least 1.00 s"
    assert (
        found(check_plan(policy(tenant("a", 1_000.0)), traffic={"a": _traffic(500, 100)}), "bucket-below-request") == []
    )


def test_traffic_and_bucket_limits_hold_at_their_boundaries():
    """Each limit admits what is exactly at it: 'above' and 'below' are strict."""
    long_tenant = tenant("a", long=True, max_context=100_000, kv_cap=100_000)
    # A prompt of exactly the threshold stays on 'shared' (routing is for prompts above it): 32,768 + 100 is then
    # above what 'shared' serves. Exactly what 'shared' serves (30,000 + 2,768) is served.
    (over,) = found(check_plan(policy(long_tenant), traffic={"a": _traffic(32_768, 100)}), "traffic-over-pool")
    assert over.message == (
        "its mean request of 32,868 tokens (prompt 32,768 + output 100) is above what pool 'shared' serves "
        "(32,768 tokens: the model's maximum or the engine's max_model_len, capped by its KV pool)"
    )
    assert over.fix == "shorten the requests, or serve the tenant from a pool with more KV"
    assert found(check_plan(policy(long_tenant), traffic={"a": _traffic(30_000, 2_768)}), "traffic-over-pool") == []
    # Exactly the tier's context (16,384) and exactly its output cap (4,096): no finding.
    exact = check_plan(policy(tenant("a")), traffic={"a": _traffic(12_288, 4_096)})
    assert [f.code for f in exact.findings if f.code.startswith("traffic")] == []
    # Two requests a second at 1,000 units/s: 500 units a request, against a 400-unit bucket.
    shallow = tenant("a", 1_000.0).model_copy(update={"bucket_depth_units": 400.0})
    (warning,) = found(check_plan(policy(shallow), traffic={"a": _Tenant(2.0, 500, 100)}), "bucket-below-request")
    assert warning.figures == {"bucket_depth_units": 400.0, "units_per_request": 500.0}
    # From exactly the smallest request (1 + W = 4 units) up to just below the mean request; at the mean request, none;
    # below the smallest, the finding is bucket-below-any-request's alone.
    for depth, warned in ((4.0, True), (500.0, False), (3.0, False)):
        bucket = tenant("a", 1_000.0).model_copy(update={"bucket_depth_units": depth})
        result = check_plan(policy(bucket), traffic={"a": _Tenant(2.0, 500, 100)})
        assert bool(found(result, "bucket-below-request")) is warned, depth
    # A bucket of exactly the smallest request (1 + W = 4 units), or exactly the reservation (3 × 4,096): admitted.
    at_smallest = tenant("a", 1_000.0).model_copy(update={"bucket_depth_units": 4.0})
    assert found(check_plan(policy(at_smallest)), "bucket-below-any-request") == []
    at_reservation = tenant("a", 1_000.0).model_copy(update={"bucket_depth_units": 12_288.0})
    assert found(check_plan(policy(at_reservation)), "bucket-below-max-output") == []


def _Tenant(rps: float, prompt: float, output: float):
    from quotacalc.core.deployment import Traffic

    return Traffic(rps=rps, prompt_tokens=prompt, output_tokens=output)


# --------------------------------------------------------------------------- load routed to the long-context pool


def test_traffic_whose_mean_prompt_routes_long_loads_the_long_context_pool():
    # a: 12,000 units/s sized on a mean prompt of 40,000 tokens, above the threshold of 32,768: units of 'long'
    # (5,000 a replica). b: a contract of 8,000 (its long prompts' share unknown). c: traffic at exactly the threshold,
    # which stays on 'shared' (routing is for prompts above it).
    routed = tenant("a", 12_000, long=True).model_copy(update={"load_pool": "long"})  # as build_policy sizes it
    plan = policy(routed, tenant("b", 8_000, long=True), tenant("c", 1_000, long=True))
    result = check_plan(plan, traffic={"a": _traffic(40_000, 500), "c": _traffic(32_768, 100)})
    # shared: b + c = 9,000 of 40,000 (22.5% -> 22%), without a's 12,000 (21,000 before).
    (shared,) = [f for f in found(result, "capacity") if f.subject == "pools.shared"]
    assert shared.message == "9,000 of 40,000 units/s sold (22%, 4 replicas at the ceiling)"
    assert shared.figures["units_sold_per_s"] == 9_000.0
    # long: a's 12,000 > 2 × 5,000 = 10,000, oversold: 12,000 / 5,000 = 2.4 -> 3 replicas. b and c route their long
    # prompts here in a share the plan does not say: named as not counted.
    assert found(result, "oversold") == [
        Finding(
            severity="error",
            code="oversold",
            subject="pools.long",
            message="12,000 units/s sold, above the capacity of 10,000 units/s (2 replicas × 5,000 at the ceiling): "
            "counted, the tenants sized on traffic whose mean prompt routes here; not counted, the long prompts of "
            "b, c, whose share above the threshold the plan does not say",
            fix="raise replicas to 3, move tenants, or measure an oversubscription ratio",
            figures={"units_sold_per_s": 12_000.0, "capacity_units_per_s": 10_000.0, "ratio": 1.0},
        )
    ]
    # a's load is 2.4 replicas of 'long' (1.2 of 'shared'): past the reversal point, priced at 'long''s replicas:
    # 3 × $7,200 = $21,600 dedicated, 2.4 × $7,200 = $17,280 shared.
    (reversal,) = found(result, "reversal")
    assert reversal.subject == "tenants.a"
    assert reversal.message == (
        "load of 2.40 replicas (12,000 units/s) on pool 'long': sharing buys little multiplexing at this size; a "
        "dedicated pool of 3 replicas costs $21,600/month (its shared share: $17,280/month)"
    )
    # A contract of the same rate (its load on its standard pool) stays on 'shared': 21,000 sold there.
    contracts = policy(tenant("a", 12_000, long=True), tenant("b", 8_000, long=True), tenant("c", 1_000, long=True))
    (contract,) = [f for f in found(check_plan(contracts), "capacity") if f.subject == "pools.shared"]
    assert contract.figures["units_sold_per_s"] == 21_000.0


def test_more_than_three_uncounted_tenants_are_counted_not_listed():
    result = check_plan(policy(*(tenant(name, 100, long=True) for name in "abcde")))
    (long,) = [f for f in found(result, "capacity") if f.subject == "pools.long"]
    assert long.message.endswith(
        "not counted, the long prompts of a, b, c and 2 more, whose share above the threshold the plan does not say"
    )


def test_size_counts_a_tenant_routed_long_in_the_long_pools_replicas():
    plan = policy(tenant("a", 12_000, long=True).model_copy(update={"load_pool": "long"}))
    # In 'long''s units: 12,000 / 5,000 = 2.4 replicas, 2.4 × $7,200 = $17,280, ceil -> 3 × $7,200 = $21,600.
    (row,) = size_plan(plan).tenants
    assert (row.pool, row.replicas, row.shared_usd_per_month, row.dedicated_replicas, row.dedicated_usd_per_month) == (
        "shared",
        pytest.approx(2.4),
        pytest.approx(17_280.0),
        3,
        21_600.0,
    )
    # A contract (or traffic at the threshold) stays on 'shared': 12,000 / 10,000 = 1.2 replicas.
    assert size_plan(policy(tenant("a", 12_000, long=True))).tenants[0].replicas == pytest.approx(1.2)


def _bucket(depth: float, **kwargs) -> TenantPolicy:
    return tenant("a", 1_000.0, long=True, **kwargs).model_copy(update={"bucket_depth_units": depth})


def test_a_bucket_is_checked_against_the_requests_routed_to_the_long_context_pool():
    # Tier: max context 100,000, max output 4,096; 'long' has W 4.5. The smallest request routed there: a prompt of
    # 32,769 tokens (one above the threshold) and one output token, 32,769 + 4.5 = 32,773.5 units. The longest
    # request reserving its whole output: 100,000 − 4,096 = 95,904 prompt tokens + 4.5 × 4,096 = 18,432: 114,336.
    # On 'shared' (W 3) the reservation is 3 × 4,096 = 12,288, below every depth here but the last.
    shallow = check_plan(policy(_bucket(20_000.0, max_context=100_000, kv_cap=100_000)))
    assert [f for f in shallow.findings if f.code.startswith("bucket")] == [
        Finding(
            severity="warning",
            code="bucket-below-any-request",
            subject="tenants.a",
            message="its bucket holds 20,000 units, less than the smallest request routed to pool 'long' (a prompt of "
            "32,769 tokens, above the threshold of 32,768, and one output token at W 4.50: 32,774 units): the gateway "
            "rejects every prompt above 32,768 tokens that tier 'std' allows",
            fix="raise tenants.a.units_per_s or tiers.std.burst_s, or lower tiers.std.max_context_tokens to 32,768 "
            "to keep its prompts on pool 'shared'",
            figures={"bucket_depth_units": 20_000.0, "smallest_request_units": 32_773.5},
        )
    ]
    deeper = check_plan(policy(_bucket(100_000.0, max_context=100_000, kv_cap=100_000)))
    assert [f for f in deeper.findings if f.code.startswith("bucket")] == [
        Finding(
            severity="info",
            code="bucket-below-max-output",
            subject="tenants.a",
            message="its bucket holds 100,000 units, less than the reservation of the longest request tier 'std' "
            "allows, routed to pool 'long' (a prompt of 95,904 tokens and 4,096 output tokens reserved at W 4.50: "
            "95,904 + 4.50 × 4,096 = 114,336 units): such a request is never admitted",
            fix="raise the tenant's rate or tiers.std.burst_s, or lower its max_output_tokens or max_context_tokens",
            figures={"bucket_depth_units": 100_000.0, "reservation_units": 114_336.0},
        )
    ]
    # Exactly the reservation is admitted; so is exactly the smallest long request (then only the note).
    at = check_plan(policy(_bucket(114_336.0, max_context=100_000, kv_cap=100_000)))
    assert [f.code for f in at.findings if f.code.startswith("bucket")] == []
    smallest = check_plan(policy(_bucket(32_773.5, max_context=100_000, kv_cap=100_000)))
    assert [f.severity for f in smallest.findings if f.code.startswith("bucket")] == ["info"]
    # 8,000 units: below the reservation on 'shared' (12,288, a note) and below the smallest request routed to
    # 'long' (32,773.5, a warning): both, the warning first.
    both = check_plan(policy(_bucket(8_000.0, max_context=100_000, kv_cap=100_000)))
    assert [(f.severity, f.code) for f in both.findings if f.code.startswith("bucket")] == [
        ("warning", "bucket-below-any-request"),
        ("info", "bucket-below-max-output"),
    ]
    # Below even the standard pool's smallest request (1 + 3 = 4 units): that warning alone.
    nothing = check_plan(policy(_bucket(3.0, max_context=100_000, kv_cap=100_000)))
    assert [f.figures for f in nothing.findings if f.code.startswith("bucket")] == [
        {"bucket_depth_units": 3.0, "smallest_request_units": 4.0}
    ]


def test_the_long_context_reservation_uses_the_tenants_long_weights_and_the_context_left():
    # Max context 34,000: above the threshold only 34,000 − 32,769 = 1,231 tokens are left for output, fewer than
    # max_output 4,096. The longest such request: 32,769 prompt + 1,231 output. With the tenant's long-context W of 6
    # (what its gateway charges): 32,769 + 6 × 1,231 = 40,155 units.
    weighted = _bucket(40_000.0, max_context=34_000, kv_cap=100_000).model_copy(
        update={"long_context_weights": UnitWeights(cached_prompt=0.1, output=6.0)}
    )
    (note,) = [f for f in check_plan(policy(weighted)).findings if f.code.startswith("bucket")]
    assert note.code == "bucket-below-max-output"
    assert note.figures == {"bucket_depth_units": 40_000.0, "reservation_units": 40_155.0}
    assert "(a prompt of 32,769 tokens and 1,231 output tokens reserved at W 6.00" in note.message
    # A tier whose context leaves no room above the threshold (32,769: the prompt alone fills it) routes nothing.
    unrouted = check_plan(policy(_bucket(20_000.0, max_context=32_769, kv_cap=100_000)))
    assert [f.code for f in unrouted.findings if f.code.startswith("bucket")] == []
    # One token more (32,770) holds the shortest routed prompt and one output token: that request is checked.
    routed = check_plan(policy(_bucket(20_000.0, max_context=32_770, kv_cap=100_000)))
    assert [f.code for f in routed.findings if f.code.startswith("bucket")] == ["bucket-below-any-request"]


# --------------------------------------------------------------------------- pricing warnings name plan keys


PRICE_WARNING = PricingWarning(
    field="batch",
    problem="a decode batch of 16 at 65,536 tokens does not fit the KV pool, which holds 9 such sequences: priced at "
    "batch 9",
    fix="lower {batch}, or raise {tp} or use {kv_dtype=fp8}",
)


def test_a_pools_pricing_warning_names_the_plan_keys_not_flags():
    # price says it with flags; check names the pool's keys.
    assert PRICE_WARNING.worded() == (
        "a decode batch of 16 at 65,536 tokens does not fit the KV pool, which holds 9 such sequences: priced at batch 9 "
        "(lower --batch, or raise --tp or use --kv-dtype fp8)"
    )
    result = check_plan(policy(tenant("a")), pool_warnings={"long": (PRICE_WARNING,)})
    assert found(result, "pool-price") == [
        Finding(
            severity="warning",
            code="pool-price",
            subject="pools.long",
            message="a decode batch of 16 at 65,536 tokens does not fit the KV pool, which holds 9 such sequences: "
            "priced at batch 9",
            fix="lower pools.long.deployment.batch, or raise pools.long.deployment.tp or use "
            "pools.long.deployment.kv_dtype: fp8",
        )
    ]
    # A flat plan's deployment keys are its top level.
    (flat,) = found(
        check_plan(policy(tenant("a")), pool_warnings={"default": (PRICE_WARNING,)}, flat_plan=True), "pool-price"
    )
    assert flat.fix == "lower batch, or raise tp or use kv_dtype: fp8"
    load = PricingWarning(
        field="load_prompt_tokens",
        problem="no request of the full-load workload (200,000 + 500 tokens) fits the KV pool: "
        "max_load_output_tokens_per_s is 0",
        fix="shorten {load_prompt_tokens} / {load_output_tokens}, or raise {tp}",
    )
    (finding,) = found(check_plan(policy(tenant("a")), pool_warnings={"shared": (load,)}), "pool-price")
    assert finding.fix == (
        "shorten pools.shared.deployment.load_prompt_tokens / pools.shared.deployment.load_output_tokens, "
        "or raise pools.shared.deployment.tp"
    )
    assert "--" not in finding.message + finding.fix


def test_traffic_that_sizes_beyond_what_a_tenant_may_be_sold_is_an_error():
    from quotacalc.core.deployment import Traffic

    huge = tenant("a", 2e9)
    traffic = {"a": Traffic(rps=1e6, prompt_tokens=1000, output_tokens=100)}
    (finding,) = found(check_plan(policy(huge), traffic=traffic), "traffic-too-large")
    assert (finding.severity, finding.subject) == ("error", "tenants.a.traffic")
    assert finding.message == (
        "sizes to 2,000,000,000 units/s, more than the 1,000,000,000 a tenant may be sold (a gateway's counters "
        "cannot hold its limits)"
    )
    # At the bound it may be sold.
    assert found(check_plan(policy(tenant("a", 1e9)), traffic=traffic), "traffic-too-large") == []


def test_a_long_context_pool_no_pool_routes_to_is_a_warning():
    unrouted = SHARED.model_copy(update={"long_context_pool": None, "route_above_prompt_tokens": None})
    (finding,) = found(check_plan(policy(tenant("a"), pools=(unrouted, LONG))), "unreachable-pool")
    assert (finding.severity, finding.subject) == ("warning", "pools.long")
    # 2 replicas × $7,200.
    assert finding.message == "a long-context pool no pool routes to: its 2 replicas ($14,400/month) serve nothing"
    assert found(check_plan(policy(tenant("a"))), "unreachable-pool") == []


def test_a_platform_plan_of_no_tenant_is_a_warning_a_flat_one_is_not():
    (finding,) = found(check_plan(policy()), "no-tenants")
    assert finding.severity == "warning"
    assert finding.message == "the plan sells its 2 pools to no tenant: the generated gateways admit no request"
    assert found(check_plan(policy(), flat_plan=True), "no-tenants") == []


def test_an_adapter_named_as_the_served_model_is_an_error():
    (finding,) = found(check_plan(policy(tenant("a", lora=("m", "a-v1")))), "lora-is-model")
    assert (finding.severity, finding.subject) == ("error", "tenants.a.lora_adapters")
    assert finding.message.startswith("'m' is the name of the model its pool serves")
    assert found(check_plan(policy(tenant("a", lora=("a-v1",)))), "lora-is-model") == []


def test_a_vllm_pool_stepping_fewer_tokens_than_sequences_is_an_error():
    # vLLM's SchedulerConfig refuses max_num_batched_tokens < max_num_seqs at start-up.
    tight = SHARED.model_copy(update={"engine": _engine(32_768).model_copy(update={"max_num_batched_tokens": 32})})
    (finding,) = found(check_plan(policy(tenant("a"), pools=(tight, LONG))), "engine-token-budget")
    assert (finding.severity, finding.subject) == ("error", "pools.shared")
    assert finding.message == "max_num_batched_tokens 32 is below max_num_seqs 64: vLLM refuses to start"
    # Equal is what vLLM accepts; an SGLang pool has no such rule.
    equal = SHARED.model_copy(update={"engine": _engine(32_768).model_copy(update={"max_num_batched_tokens": 64})})
    assert found(check_plan(policy(tenant("a"), pools=(equal, LONG))), "engine-token-budget") == []
    sglang = tight.model_copy(update={"serving_engine": "sglang"})
    assert found(check_plan(policy(tenant("a"), pools=(sglang, LONG))), "engine-token-budget") == []


def test_a_fix_names_a_removed_inherited_key_where_it_is_written_and_a_set_one_on_the_pool(tmp_path):
    """A fix that removes a key the pool inherits names the top-level deployment.KEY; one that sets a key names the
    pool's own key (it changes that pool alone); a key the pool sets itself is always the pool's; a key a flag gave
    is the flag."""
    from quotacalc.priced import price_plan

    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "deployment: {model: meta-llama/Llama-3.3-70B-Instruct, gpu: h100-sxm, tp: 4, state_dtype: fp32}\n"
        "pools:\n"
        "  - {name: long, replicas: 1, deployment: {batch: 8, context: 4096, kv_dtype: bf16}}\n"
        "tiers: [{name: t, max_context_tokens: 4096, kv_cap_tokens_per_replica: 8192, max_concurrent_sequences: 8,\n"
        "         max_output_tokens: 1024, priority: 0, burst_s: 10, cached_prompt_weight: 0.1}]\n"
        "tenants: [{name: a, tier: t, pool: long, units_per_s: 100}]\n"
    )
    namer = price_plan(str(plan)).key_namer("long")
    remove = PricingWarning(field="state_dtype", problem="p", fix="remove {state_dtype}")
    assert remove.worded_fix(namer) == "remove deployment.state_dtype"
    assert PricingWarning(field="tp", problem="p", fix="raise {tp}, or use {kv_dtype=fp8}").worded_fix(namer) == (
        "raise pools.long.deployment.tp, or use pools.long.deployment.kv_dtype: fp8"
    )
    assert remove.worded_fix(price_plan(str(plan), {"state_dtype": "bf16"}).key_namer("long")) == (
        "remove --state-dtype"
    )
    flat = tmp_path / "flat.yaml"
    flat.write_text("model: meta-llama/Llama-3.3-70B-Instruct\ngpu: h100-sxm\ntp: 4\nbatch: 8\n")
    # A flat plan's keys are at its top level.
    assert (
        PricingWarning(field="batch", problem="p", fix="lower {batch}").worded_fix(
            price_plan(str(flat)).key_namer("default")
        )
        == "lower batch"
    )
