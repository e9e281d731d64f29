"""The canonical policy and the plan's checks: golden figures from the method (docs/method.md §3, §6, §7),
hand computations shown beside each assertion, and every finding of `quotacalc check`."""

from __future__ import annotations

import copy
import json
import math
from pathlib import Path

import pytest
import yaml
from conftest import METHOD_TENANT_UNITS_PER_S, llama70b_prompt_token_units

from quotacalc.cli.json_out import JSON_SCHEMA_VERSION
from quotacalc.core.plan import Plan, PlanTenant, Pool, Tier
from quotacalc.core.policy import build_policy, retry_after_s

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PLATFORM = EXAMPLES / "platform.yaml"
LLAMA = "meta-llama/Llama-3.3-70B-Instruct"


@pytest.fixture(scope="module")
def worked_example_price():
    """The worked example's replica (docs/method.md §7), priced once."""
    from quotacalc.core.deployment import Deployment
    from quotacalc.core.price import price
    from quotacalc.inputs.resolve import resolve

    deployment = Deployment(
        model=LLAMA, gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="bf16", kv_pool_tokens=646503
    )
    return deployment, price(resolve(deployment))


def tier(name: str = "gold", **overrides) -> Tier:
    values = dict(
        name=name,
        max_context_tokens=131072,
        kv_cap_tokens_per_replica=262144,
        max_concurrent_sequences=64,
        max_output_tokens=8192,
        priority=0,
    )
    return Tier(**{**values, **overrides})


def one_pool_plan(deployment, tenants, tiers=None, replicas: int = 2) -> Plan:
    return Plan(
        pools=(Pool(name="main", deployment=deployment, replicas=replicas),),
        tiers=tuple(tiers or [tier()]),
        tenants=tuple(tenants),
    )


# --- golden figures ---------------------------------------------------------------------------------


def test_bucket_and_retry_after_for_the_methods_tenant(worked_example_price) -> None:
    deployment, replica = worked_example_price
    plan = one_pool_plan(deployment, [PlanTenant(name="t", tier="gold", units_per_s=17725)])
    (tenant,) = build_policy(plan, {"main": replica}).tenants
    # Contracted 17,725 units/s (5 req/s × (2,000 + 3.09 × 500)), burst 60 s of it:
    # 60 × 17,725 = 1,063,500 units of depth.
    assert tenant.bucket_rate_units_per_s == 17725
    assert tenant.bucket_depth_units == 1_063_500
    # The longest Retry-After is a full bucket's refill: 1,063,500 / 17,725 = 60 s exactly (not 61).
    assert tenant.retry_after.max_s == 60
    assert tenant.retry_after.rule == "ceil(deficit_units / bucket_rate_units_per_s)"
    # Weights: prompt 1, cached 0.1 (the tier's default), output W = 3.09 of the pool.
    assert tenant.weights.prompt == 1
    assert tenant.weights.cached_prompt == 0.1
    assert tenant.weights.output == pytest.approx(3.09, abs=0.01)


@pytest.mark.parametrize(
    ("deficit", "rate", "seconds"),
    [
        (3545, 17725, 1),  # one of the tenant's requests (3,545 units) on an empty bucket: 0.2 s -> 1 s
        (17725, 17725, 1),  # exactly one second of refill
        (17726, 17725, 2),  # one unit more: rounded up
        (1_063_500, 17725, 60),  # a full bucket
        (0, 17725, 0),  # no deficit: no wait
        (-5, 17725, 0),
        (0.3 * 3, 0.9, 1),  # 0.8999999999999999 / 0.9: float noise must not round to 0 or 2
    ],
)
def test_retry_after_is_the_refill_time_rounded_up(deficit: float, rate: float, seconds: int) -> None:
    assert retry_after_s(deficit, rate) == seconds


def test_traffic_tenant_is_sized_like_the_method(worked_example_price) -> None:
    deployment, replica = worked_example_price
    traffic = {"rps": 5, "prompt_tokens": 2000, "output_tokens": 500}
    plan = one_pool_plan(deployment, [PlanTenant(name="t", tier="gold", traffic=traffic)])
    (tenant,) = build_policy(plan, {"main": replica}).tenants
    # docs/method.md §7: 17,725 units/s with W rounded to 3.09, once prompt tokens are charged inside their
    # 2,000-token prompt 17,919; 60 s of burst.
    assert tenant.rate_source == "traffic"
    assert tenant.bucket_rate_units_per_s == pytest.approx(METHOD_TENANT_UNITS_PER_S, rel=1e-4)
    assert tenant.bucket_depth_units == pytest.approx(60 * METHOD_TENANT_UNITS_PER_S, rel=1e-4)
    assert tenant.retry_after.max_s == 60


def test_cached_weight_and_burst_come_from_the_tier(worked_example_price) -> None:
    deployment, replica = worked_example_price
    cheap = tier("cheap", cached_prompt_weight=0.5, burst_s=30)
    traffic = {"rps": 1, "prompt_tokens": 1000, "output_tokens": 0, "cached_fraction": 0.5}
    plan = one_pool_plan(deployment, [PlanTenant(name="t", tier="cheap", traffic=traffic)], tiers=[cheap])
    (tenant,) = build_policy(plan, {"main": replica}).tenants
    # 500 uncached × u(1000) + 500 cached × 0.5 units per request, 1 req/s; depth 30 s of that.
    per_request = 500 * llama70b_prompt_token_units(1000) + 250
    assert tenant.bucket_rate_units_per_s == pytest.approx(per_request, rel=1e-6)
    assert tenant.bucket_depth_units == pytest.approx(30 * per_request, rel=1e-6)
    assert tenant.weights.cached_prompt == 0.5
    assert tenant.retry_after.max_s == 30


def test_pool_policy_capacity_price_and_engine(worked_example_price) -> None:
    deployment, replica = worked_example_price
    plan = one_pool_plan(deployment, [PlanTenant(name="t", tier="gold", units_per_s=1000)], replicas=3)
    (pool,) = build_policy(plan, {"main": replica}).pools
    assert pool.replica_units_per_s == pytest.approx(18232, rel=1e-3)  # about 18,232 units/s
    assert pool.capacity_units_per_s == pytest.approx(3 * pool.replica_units_per_s)
    assert pool.usd_per_replica_month == 7200  # 4 GPUs × $2.50 × 720 h
    assert pool.usd_per_month == 3 * 7200
    assert pool.kv_pool_tokens == 646503
    engine = pool.engine
    assert engine.tensor_parallel_size == 4
    assert engine.max_num_seqs == 128  # the decode batch; 380 sequences of 1,700 tokens fit the pool
    assert engine.max_model_len == 131072  # the tier's max context = the model's max
    assert engine.kv_cache_dtype == "bfloat16"
    assert engine.enable_prefix_caching is True
    assert engine.scheduling_policy == "fcfs"  # one tier: nothing to prioritise
    assert engine.gpu_memory_utilization == 0.9
    assert engine.max_num_batched_tokens == 8192  # vLLM's default on an H100 (80 GB: 70 GiB or more)


def test_max_num_seqs_capped_by_what_the_pool_holds(worked_example_price) -> None:
    deployment, _ = worked_example_price
    from quotacalc.core.price import price
    from quotacalc.inputs.resolve import resolve

    # 646,503 tokens hold 9 sequences of 65,536 tokens: a batch of 16 cannot be resident.
    long = deployment.model_copy(update={"batch": 16, "context": 65536})
    plan = one_pool_plan(long, [PlanTenant(name="t", tier="gold", units_per_s=10)])
    (pool,) = build_policy(plan, {"main": price(resolve(long))}).pools
    assert pool.engine.max_num_seqs == 646503 // 65536 == 9


def test_example_policy_routing_and_engines() -> None:
    from quotacalc.cli.plan_cmds import load_policy

    _, policy = load_policy(str(PLATFORM))
    pools = {pool.name: pool for pool in policy.pools}
    tenants = {tenant.name: tenant for tenant in policy.tenants}
    # The shared pool takes prompts up to 32,768 tokens plus the largest output cap routed to it
    # (enterprise: 8,192): 40,960; the long pool the largest max context (131,072).
    assert pools["shared"].engine.max_model_len == 32768 + 8192
    assert pools["long"].engine.max_model_len == 131072
    assert pools["acme-dedicated"].engine.max_model_len == 131072
    # Three priorities share the shared pool; acme alone on its own.
    assert pools["shared"].engine.scheduling_policy == "priority"
    assert pools["acme-dedicated"].engine.scheduling_policy == "fcfs"
    assert pools["long"].engine.max_num_seqs == 8
    globex = tenants["globex"]
    assert (globex.pool, globex.long_context_pool, globex.route_above_prompt_tokens) == ("shared", "long", 32768)
    assert globex.long_context_weights is not None
    assert globex.long_context_weights.output == pytest.approx(pools["long"].output_weight)
    assert tenants["acme"].long_context_pool is None and tenants["acme"].long_context_weights is None
    # Salt references for salted tenants only.
    assert tenants["globex"].salt_ref == "globex"
    assert tenants["hooli"].salt_ref is None and tenants["hooli"].cache_isolation == "shared"
    assert tenants["wayne"].priority == 2
    assert tenants["initech"].lora_adapters == ("initech-support-v2",)


# --- salts ------------------------------------------------------------------------------------------


def test_salt_is_hmac_sha256_of_the_tenant() -> None:
    from quotacalc.core.salts import derive_salt

    # RFC 4231, test case 2: HMAC-SHA256(key "Jefe", "what do ya want for nothing?").
    assert derive_salt(b"Jefe", "what do ya want for nothing?") == (
        "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"
    )


# --- checks ------------------------------------------------------------------------------------------


def platform_document() -> dict:
    return yaml.safe_load(PLATFORM.read_text(encoding="utf-8"))


def run_check(run_cli, tmp_path: Path, document: dict, *extra: str) -> tuple[int, dict]:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    code, out, err = run_cli("check", path, "--json", *extra)
    assert "Traceback" not in err
    return code, json.loads(out)


def codes(document: dict, severity: str | None = None) -> list[str]:
    return [f["code"] for f in document["findings"] if severity is None or f["severity"] == severity]


def test_example_plan_is_sound_with_one_reversal_warning(run_cli, tmp_path: Path) -> None:
    code, document = run_check(run_cli, tmp_path, platform_document())
    assert code == 0 and document["ok"] is True
    assert document["command"] == "check" and document["schema_version"] == JSON_SCHEMA_VERSION
    assert codes(document, "error") == []
    assert codes(document, "warning") == ["reversal"]
    (reversal,) = [f for f in document["findings"] if f["code"] == "reversal"]
    # stark: 40,000 / 18,232 = 2.19 replicas >= 2 -> a dedicated pool of 3 replicas, 3 × $7,200 = $21,600.
    assert reversal["subject"] == "tenants.stark"
    assert reversal["figures"]["replicas"] == pytest.approx(40000 / 18232.2, rel=1e-4)
    assert reversal["figures"]["dedicated_replicas"] == 3
    assert reversal["figures"]["dedicated_usd_per_month"] == 21600
    # The shared pool: sold 17,725 + 40,000 + 12,000 + 2,000 (contracts) + the three sized tenants,
    # against 6 × 18,232 = 109,393 units/s.
    (shared,) = [f for f in document["findings"] if f["subject"] == "pools.shared"]
    assert shared["code"] == "capacity"
    assert shared["figures"]["capacity_units_per_s"] == pytest.approx(6 * 18232.2, rel=1e-4)
    assert "salts-unchecked" in codes(document, "info")
    assert "oversubscription" in codes(document, "info")


def test_strict_turns_warnings_into_errors(run_cli, tmp_path: Path) -> None:
    code, document = run_check(run_cli, tmp_path, platform_document(), "--strict")
    assert code == 1 and document["ok"] is False
    assert codes(document, "error") == ["reversal"]


def test_reversal_threshold_is_a_flag(run_cli, tmp_path: Path) -> None:
    code, document = run_check(run_cli, tmp_path, platform_document(), "--reversal-replicas", "3")
    assert code == 0 and "reversal" not in codes(document)
    code, document = run_check(run_cli, tmp_path, platform_document(), "--reversal-replicas", "0.5")
    # 0.5 replicas = 9,116 units/s: globex (17,725), stark, umbrella (12,000) and cyberdyne (9,712).
    reversed_ = [f["subject"] for f in document["findings"] if f["code"] == "reversal"]
    assert reversed_ == ["tenants.globex", "tenants.stark", "tenants.umbrella", "tenants.cyberdyne"]


def test_oversold_pool_is_an_error_and_a_measured_ratio_lifts_it(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    document["tenants"][1]["units_per_s"] = 60000  # stark: sold now 109,801 > 109,393
    code, result = run_check(run_cli, tmp_path, document)
    assert code == 1
    (oversold,) = [f for f in result["findings"] if f["code"] == "oversold"]
    assert oversold["subject"] == "pools.shared"
    assert oversold["figures"]["units_sold_per_s"] > oversold["figures"]["capacity_units_per_s"]
    assert "raise replicas to 7" in oversold["fix"]  # ceil(109,801 / 18,232) = 7
    document["oversubscription"] = {"ratio": 1.2, "source": "usage logs, October 2026"}
    code, result = run_check(run_cli, tmp_path, document)
    assert code == 0 and "oversold" not in codes(result)


def test_kv_cap_a_pool_cannot_honour(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    document["tiers"][0]["kv_cap_tokens_per_replica"] = 700000  # the pools hold 646,503 tokens
    code, result = run_check(run_cli, tmp_path, document)
    assert code == 1
    kv = [f for f in result["findings"] if f["code"] == "kv-cap"]
    assert {f["subject"] for f in kv} == {"tiers.enterprise"}
    assert kv[0]["figures"] == {"kv_cap_tokens_per_replica": 700000, "kv_pool_tokens": 646503}


def test_max_context_above_what_the_pool_serves(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    # Llama 3.3 serves 131,072 tokens (max_position_embeddings).
    document["tiers"][0]["max_context_tokens"] = 200000
    document["tiers"][0]["kv_cap_tokens_per_replica"] = 200000
    code, result = run_check(run_cli, tmp_path, document)
    assert code == 1
    context = [f for f in result["findings"] if f["code"] == "max-context"]
    assert context and all(f["figures"]["pool_max_context_tokens"] == 131072 for f in context)


def test_kv_cap_below_max_context_warns(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    document["tiers"][2]["kv_cap_tokens_per_replica"] = 16384  # starter's max context is 32,768
    code, result = run_check(run_cli, tmp_path, document)
    assert code == 0
    assert "kv-cap-below-context" in codes(result, "warning")


def test_dedicated_tenant_sharing_its_pool_is_an_error(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    document["tenants"][0]["pool"] = "acme-dedicated"
    code, result = run_check(run_cli, tmp_path, document)
    assert code == 1
    (finding,) = [f for f in result["findings"] if f["code"] == "dedicated-shared"]
    assert finding["subject"] == "tenants.acme" and "globex" in finding["message"]


def test_lora_names_checked_without_a_secret(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    document["tenants"][3]["lora_adapters"] = ["globex", "a" * 64]
    code, result = run_check(run_cli, tmp_path, document)
    assert code == 1  # a salt-shaped adapter name can equal a salt: an error while tenants are salted
    assert "lora-salt-shape" in codes(result, "error")
    assert "lora-tenant-name" in codes(result, "warning")
    assert result["salts_checked"] is False


def test_salt_colliding_with_a_lora_name_is_an_error(run_cli, tmp_path: Path, monkeypatch) -> None:
    from quotacalc.core.salts import derive_salt

    monkeypatch.setenv("QUOTACALC_SALT_SECRET", "s3cret-of-16-bytes")
    document = platform_document()
    salt = derive_salt(b"s3cret-of-16-bytes", "globex")
    document["tenants"][3]["lora_adapters"] = [salt]
    code, out, err = run_cli("check", _write(tmp_path, document), "--json")
    result = json.loads(out)
    assert code == 1 and result["salts_checked"] is True
    (collision,) = [f for f in result["findings"] if f["code"] == "salt-lora"]
    assert collision["subject"] == "tenants.globex" and "initech" in collision["message"]
    assert salt not in collision["message"]
    # The salt only shows where the test put it: in the plan's adapter names, never elsewhere.
    outside = copy.deepcopy(result)
    outside["findings"] = [f for f in outside["findings"] if f["code"] != "lora-salt-shape"]
    assert salt not in json.dumps(outside) and salt not in err


def _write(tmp_path: Path, document: dict) -> Path:
    path = tmp_path / "plan.yaml"
    path.write_text(yaml.safe_dump(document, sort_keys=False), encoding="utf-8")
    return path


def test_check_table_output(run_cli) -> None:
    code, out, _ = run_cli("check", PLATFORM)
    assert code == 0
    # The notes: capacity of each of 3 pools, oversubscription, salts unchecked, litellm-client-fields.
    assert "sound: 0 errors, 1 warning, 6 notes" in " ".join(out.split())


def test_check_on_a_flat_plan(run_cli) -> None:
    code, out, _ = run_cli("check", EXAMPLES / "llama-3.3-70b-h100.yaml", "--json")
    assert code == 0
    result = json.loads(out)
    # One tenant of 17,9xx units/s on one replica of 18,232: 98% sold, sound.
    (capacity,) = [f for f in result["findings"] if f["code"] == "capacity"]
    assert capacity["figures"]["units_sold_per_s"] == pytest.approx(METHOD_TENANT_UNITS_PER_S, rel=1e-4)
    assert math.isclose(capacity["figures"]["capacity_units_per_s"], 18232.2, rel_tol=1e-4)


@pytest.mark.parametrize(
    "traffic",
    [
        {"rps": 5, "prompt_tokens": 2000, "output_tokens": 500},
        {"rps": 0.3, "prompt_tokens": 12000, "output_tokens": 40, "cached_fraction": 0.8},
        {"rps": 2, "prompt_tokens": 0, "output_tokens": 900, "cached_fraction": 1.0},
    ],
)
def test_policy_units_equal_size_tenants(worked_example_price, traffic) -> None:
    """The policy's fast sizing and `quotacalc size`'s (core.traffic.size_traffic) are one formula."""
    from quotacalc.core.deployment import Traffic
    from quotacalc.core.policy import replica_for_tier, tenant_units_per_s
    from quotacalc.core.traffic import size_traffic

    _, replica = worked_example_price
    gold = tier(cached_prompt_weight=0.25, burst_s=45)
    tenant = PlanTenant(name="t", tier="gold", traffic=traffic)
    sized = size_traffic(replica_for_tier(replica, gold), Traffic(**traffic))
    assert tenant_units_per_s(tenant, gold, replica) == pytest.approx(sized.units_per_s, rel=1e-12)
    assert gold.burst_s * sized.units_per_s == pytest.approx(sized.bucket_depth_units, rel=1e-12)


def test_pricing_warnings_of_a_pool_are_findings(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    # 646,503 tokens of KV hold 9 sequences of 65,536 tokens (646,503 // 65,536): a batch of 16 cannot be
    # resident, and price says so; check passes the warning on, naming the pool.
    document["pools"][1]["deployment"].update(batch=16)
    code, result = run_check(run_cli, tmp_path, document)
    assert code == 0
    (price_warning,) = [f for f in result["findings"] if f["code"] == "pool-price"]
    assert price_warning["subject"] == "pools.long" and "holds 9 such sequences" in price_warning["message"]
    code, result = run_check(run_cli, tmp_path, document, "--strict")
    assert code == 1 and "pool-price" in codes(result, "error")


def test_a_pool_that_cannot_hold_one_sequence_is_a_one_line_error(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    # One H100 per long-context replica: 70.6 GB of FP8 weights leave about 200 tokens of KV (estimated).
    document["pools"][1]["deployment"].update(tp=1, kv_pool_tokens=None)
    path = _write(tmp_path, document)
    code, out, err = run_cli("check", path)
    assert code == 1 and out == ""
    assert err.startswith(f"quotacalc: error: {path}: pools[1].deployment.context: one sequence of 65,536 tokens")


def test_engine_token_budget_is_the_one_the_price_assumed(run_cli, tmp_path: Path) -> None:
    from quotacalc.cli.plan_cmds import load_policy

    document = platform_document()
    document["pools"][1]["deployment"]["max_num_batched_tokens"] = 16384
    document["pools"][1]["deployment"]["kv_pool_tokens"] = None  # estimate it: the reserve grows with the budget
    _, policy = load_policy(str(_write(tmp_path, document)))
    pools = {pool.name: pool for pool in policy.pools}
    assert pools["long"].engine.max_num_batched_tokens == 16384
    assert pools["shared"].engine.max_num_batched_tokens == 8192


def test_measured_pool_on_another_deployment_names_the_pool(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    document["deployment"]["kv_pool_measured_with"] = {
        "gpu": "h100-sxm",
        "tp": 4,
        "weight_dtype": "fp8",
        "kv_dtype": "bf16",
    }
    document["pools"][1]["deployment"]["tp"] = 8
    path = _write(tmp_path, document)
    code, out, err = run_cli("check", path)
    assert code == 1 and out == ""
    assert err.startswith(
        f"quotacalc: error: {path}: pools[1].deployment.kv_pool_tokens (inherited from deployment.kv_pool_tokens): "
        "the measured pool of 646,503 tokens was measured on another deployment (tp 4 -> 8)"
    ), err


def test_engine_max_num_seqs_never_above_the_deployments_own(tmp_path: Path) -> None:
    from quotacalc.cli.plan_cmds import load_policy

    document = platform_document()
    document["pools"][0]["deployment"]["max_num_seqs"] = 64  # below the decode batch of 128
    _, policy = load_policy(str(_write(tmp_path, document)))
    pools = {pool.name: pool for pool in policy.pools}
    assert pools["shared"].engine.max_num_seqs == 64
    assert pools["acme-dedicated"].engine.max_num_seqs == 128


# --- build_policy: what passes through, and the sizes it caches -------------------------------------


def _routed_pools(deployment) -> tuple[Pool, Pool]:
    """Pool main routing prompts above 32,768 tokens to pool long, both of ``deployment``."""
    return (
        Pool(name="main", deployment=deployment, replicas=2, long_context_pool="long", route_above_prompt_tokens=32768),
        Pool(name="long", role="long_context", deployment=deployment, replicas=1),
    )


def test_pools_carry_their_routes_and_engine_settings(worked_example_price) -> None:
    deployment, replica = worked_example_price
    plan = Plan(
        pools=(
            *_routed_pools(deployment),
            Pool(name="spare", deployment=deployment.model_copy(update={"max_num_seqs": 512}), replicas=1),
        ),
        tiers=(tier("gold", priority=0), tier("silver", priority=1)),
        tenants=(
            PlanTenant(name="a", tier="gold", pool="main", units_per_s=1000),
            PlanTenant(name="b", tier="silver", pool="main", units_per_s=1000),
        ),
        public_prefixes=("system-prompt-v1",),
    )
    policy = build_policy(plan, {"main": replica, "long": replica, "spare": replica})
    pools = {pool.name: pool for pool in policy.pools}
    assert (pools["main"].long_context_pool, pools["main"].route_above_prompt_tokens) == ("long", 32768)
    assert (pools["long"].long_context_pool, pools["long"].route_above_prompt_tokens) == (None, None)
    assert all(pool.usd_per_unit == replica.usd_per_unit for pool in policy.pools)
    assert policy.public_prefixes == ("system-prompt-v1",)
    # Two tiers of different priority on a pool: the engine orders by priority; a pool no tier routes to
    # has one priority or none, first come first served.
    assert pools["main"].engine.scheduling_policy == pools["long"].engine.scheduling_policy == "priority"
    assert pools["spare"].engine.scheduling_policy == "fcfs"
    # No tier routes to "spare": it serves what it can, the model's 131,072 tokens (its pool holds 646,503).
    assert pools["spare"].engine.max_model_len == 131072
    # Its engine's own max_num_seqs (512) is above the decode batch (128): the batch the price assumed
    # (646,503 / 1,700 = 380 sequences resident) bounds it.
    assert pools["spare"].engine.max_num_seqs == 128
    # Tenants: a contract is a contract; each tenant routes with its pool.
    assert {tenant.rate_source for tenant in policy.tenants} == {"contract"}
    assert {(t.long_context_pool, t.route_above_prompt_tokens) for t in policy.tenants} == {("long", 32768)}


def test_prompt_units_are_cached_per_rounded_prompt_but_never_across_one_token(worked_example_price) -> None:
    from quotacalc.core.policy import prompt_token_units

    deployment, replica = worked_example_price
    at_one = prompt_token_units(replica, 1)
    # A one-token prompt attends to itself: above 1 unit, below a two-token prompt's.
    assert 1 < at_one < prompt_token_units(replica, 2)
    assert prompt_token_units(replica, 0.5) == prompt_token_units(replica, 0) == 1.0

    def traffic_tenant(name: str, prompt_tokens: float) -> PlanTenant:
        return PlanTenant(
            name=name, tier="gold", traffic={"rps": 1, "prompt_tokens": prompt_tokens, "output_tokens": 0}
        )

    # In either order, a prompt under one token is charged 1 unit per token, and a 1-token prompt its own cost:
    # 1 req/s × 0.6 tokens × 1 unit = 0.6 units/s; 1 req/s × 1 token × at_one.
    for order in (("one", "part"), ("part", "one")):
        tenants = [traffic_tenant(name, 1 if name == "one" else 0.6) for name in order]
        rates = {
            t.name: t.bucket_rate_units_per_s
            for t in build_policy(one_pool_plan(deployment, tenants), {"main": replica}).tenants
        }
        assert rates == {"one": at_one, "part": pytest.approx(0.6, rel=1e-12)}, order


def test_traffic_units_default_to_one_unit_per_prompt_token() -> None:
    from quotacalc.core.deployment import Traffic
    from quotacalc.core.policy import traffic_units_per_s

    # 2 req/s × (100 prompt × (1 − 0.2) × 1 + 100 × 0.2 × 0.1 + 3 × 10 output) = 2 × (80 + 2 + 30) = 224.
    traffic = Traffic(rps=2, prompt_tokens=100, output_tokens=10, cached_fraction=0.2)
    assert traffic_units_per_s(traffic, 0.1, 3.0) == pytest.approx(224, rel=1e-12)


@pytest.mark.parametrize(
    ("model", "served"),
    [
        ("meta-llama/Llama-3.3-70B-Instruct", "meta-llama/Llama-3.3-70B-Instruct"),  # a hub id, as clients send it
        ("/models/llama-70b/", "llama-70b"),
        ("./llama-70b", "llama-70b"),
        ("~/llama-70b", "llama-70b"),
        ("models/org/Phi-X", "Phi-X"),  # the last component, whatever it ends with
        (".llama", ".llama"),
    ],
)
def test_served_model_name_of_a_path_is_its_last_component(model: str, served: str) -> None:
    from quotacalc.core.policy import _served_model_name

    assert _served_model_name(model) == served


@pytest.mark.parametrize(
    ("key", "value", "problem"),
    [("gpu", "h100x", "unknown GPU 'h100x'"), ("tp", 3, "3 does not divide the 64 attention heads")],
)
def test_a_bad_default_names_where_the_pool_inherits_it(run_cli, tmp_path: Path, key, value, problem) -> None:
    document = platform_document()
    document["deployment"][key] = value
    document["deployment"].pop("kv_pool_tokens", None)  # measured at TP 4: its own error would come first
    for pool in document["pools"]:
        (pool.get("deployment") or {}).pop(key, None)
    path = _write(tmp_path, document)
    code, out, err = run_cli("check", path)
    assert code in (1, 2) and out == ""
    assert err.startswith(
        f"quotacalc: error: {path}: pools[0].deployment.{key} (inherited from deployment.{key}): {problem}"
    ), err


def test_check_warns_where_envoy_cannot_route_a_tenants_adapters(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    document["tenants"][0]["lora_adapters"] = [f"a-{number}" for number in range(2000)]
    path = _write(tmp_path, document)
    code, out, err = run_cli("check", path, "--json")
    assert code == 0, err
    (finding,) = [f for f in json.loads(out)["findings"] if f["code"] == "envoy-lora-adapters"]
    assert finding["severity"] == "warning" and finding["message"].endswith("generate refuses the envoy target")
    assert finding["message"].startswith("2,000 LoRA adapters need 16 Envoy AIGatewayRoute rules")
    assert run_cli("check", path, "--strict")[0] == 1


def test_size_names_a_pools_pricing_fix_as_the_plan_key_unless_a_flag_set_it(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    # acme's pool (batch 128 at 1,700 tokens: 217,600 tokens of KV) given a pool of 150,000 tokens.
    document["pools"][2]["deployment"]["kv_pool_tokens"] = 150_000
    path = _write(tmp_path, document)
    _, _, err = run_cli("size", path)
    assert "(lower pools.acme-dedicated.deployment.batch, raise pools.acme-dedicated.deployment.tp" in err, err
    _, _, err = run_cli("size", path, "--batch", "200")
    assert "(lower --batch" in err, err


@pytest.mark.parametrize(("prompt", "load"), [(32_769, "long"), (32_768, "main")])
def test_build_policy_counts_traffic_routed_long_on_the_long_pool(worked_example_price, prompt, load) -> None:
    """A tenant sized on traffic whose mean prompt is above its pool's threshold is sized in the long-context pool's
    units, and its policy says so (load_pool); at the threshold it stays (routing is for prompts above it)."""
    from quotacalc.core.deployment import Traffic
    from quotacalc.core.plan_size import load_pool_of

    deployment, replica = worked_example_price
    plan = Plan(
        pools=(*_routed_pools(deployment),),
        tiers=(tier("gold", priority=0).model_copy(update={"max_context_tokens": 131072}),),
        tenants=(
            PlanTenant(name="t", tier="gold", traffic=Traffic(rps=0.1, prompt_tokens=prompt, output_tokens=100)),
            PlanTenant(name="c", tier="gold", units_per_s=1000),
        ),
    )
    policy = build_policy(plan, {"main": replica, "long": replica})
    routed, contract = policy.tenants
    assert routed.load_pool == load_pool_of(routed) == load
    assert contract.load_pool == load_pool_of(contract) == "main"


@pytest.mark.parametrize("value", ["0", "-1", "nan", "inf", "1e308"])
def test_a_reversal_threshold_that_is_no_replica_count_is_refused(run_cli, value) -> None:
    code, out, err = run_cli("check", str(PLATFORM), "--reversal-replicas", value)
    assert code == 1 and out == "" and err.count("\n") == 1
    assert err.startswith(
        "quotacalc: error: --reversal-replicas: must be a number of replicas above 0 and at most 100,000"
    )


def test_size_of_a_plan_under_strict_prints_nothing_when_it_warns(run_cli, tmp_path: Path) -> None:
    document = platform_document()
    document["pools"][2]["deployment"]["kv_pool_tokens"] = 150_000  # acme's pool cannot hold its batch: a warning
    path = _write(tmp_path, document)
    code, out, err = run_cli("size", path, "--json", "--strict")
    assert code == 1 and out == "", out
    assert err.splitlines()[-1].endswith("(see the warnings above; nothing was printed)")


# --- the prompt-length charge: what a gateway charges a prompt token, by its prompt's length -------------


def test_the_prompt_charge_is_the_methods_line_for_full_attention(worked_example_price) -> None:
    """Llama 3.3 70B (full attention, 131,072 tokens): the line from 1 unit to the exact cost of a token of a
    131,072-token prompt, 1 + 80 x 2 x 64 x 256 x 65,536.5 / 141,107,412,992 = 2.2175 units (conftest's hand
    formula; kv's 2.22 at 131,072), has slope 1.2175 / 131,072 = 9.2889e-6 units per token of the prompt, and is
    the exact cost at every length but for the half key the mean attends beyond (L + 1) / 2 against L / 2."""
    from quotacalc.core.policy import prompt_length_charge

    deployment, replica = worked_example_price
    charge = prompt_length_charge(replica)
    assert charge.longest_prompt_tokens == 131072
    assert charge.units_at_longest == pytest.approx(llama70b_prompt_token_units(131072), rel=1e-12)
    assert charge.per_prompt_token == pytest.approx((llama70b_prompt_token_units(131072) - 1) / 131072, rel=1e-12)
    assert charge.per_prompt_token == pytest.approx(9.2889e-6, rel=1e-4)
    assert abs(charge.max_error) < 1e-5
    (tenant,) = build_policy(
        one_pool_plan(deployment, [PlanTenant(name="t", tier="gold", units_per_s=1)]), {"main": replica}
    ).tenants
    assert tenant.weights.prompt_per_prompt_token == charge.per_prompt_token
    # A 100,000-token prompt, 20,000 of it cached, 300 output tokens: 80,000 x (1 + 100,000 x 9.2889e-6)
    # + 20,000 x 0.1 + 300 x W.
    expected = 80_000 * llama70b_prompt_token_units(100_000) + 20_000 * 0.1 + 300 * replica.output_weight
    assert tenant.weights.request_units(100_000, 20_000, 300) == pytest.approx(expected, rel=1e-5)


def test_a_sliding_window_model_bends_below_the_line_and_says_by_how_much() -> None:
    """Gemma 3 27B: five of six layers attend a 1,024-token window, so a token's cost rises fast up to the window
    and then only with its full-attention layers: the exact curve is concave, the line from 1 to its end runs
    below it in between. At 1,024 tokens, by hand from the layers' FLOPs, the line charges less than the exact
    cost; max_error is that largest shortfall (negative), and the line meets the exact cost at the longest."""
    from quotacalc.core.deployment import Deployment
    from quotacalc.core.policy import prompt_length_charge, prompt_token_units
    from quotacalc.core.price import price
    from quotacalc.inputs.resolve import resolve

    replica = price(resolve(Deployment(model="gemma-3-27b-it", gpu="h100-sxm", tp=1)))
    charge = prompt_length_charge(replica)
    assert prompt_token_units(replica, charge.longest_prompt_tokens) == charge.units_at_longest
    line_at_window = 1 + charge.per_prompt_token * 1024
    assert line_at_window < prompt_token_units(replica, 1024)
    assert charge.max_error < 0
    assert charge.max_error <= line_at_window / prompt_token_units(replica, 1024) - 1
    assert charge.max_error == pytest.approx(
        (1 + charge.per_prompt_token * charge.max_error_at_tokens)
        / prompt_token_units(replica, charge.max_error_at_tokens)
        - 1
    )


def test_gateways_charge_a_traffic_tenant_what_its_bucket_was_sized_on() -> None:
    """At its declared shape (prompt, cached share, output) a traffic tenant's requests are charged, by its
    weights, the units/s its bucket refills at, within its pool's line error: size and enforcement agree."""
    from quotacalc.cli.plan_cmds import load_policy

    plan, policy = load_policy(str(PLATFORM))
    pools = {pool.name: pool for pool in policy.pools}
    checked = 0
    for declared, tenant in zip(plan.tenants, policy.tenants, strict=True):
        if declared.traffic is None:
            continue
        traffic = declared.traffic
        weights = tenant.long_context_weights if tenant.load_pool != tenant.pool else tenant.weights
        cached = traffic.prompt_tokens * traffic.cached_fraction
        charged = traffic.rps * weights.request_units(traffic.prompt_tokens, cached, traffic.output_tokens)
        error = abs(pools[tenant.load_pool].prompt_length_charge.max_error) + 1e-6
        assert charged == pytest.approx(tenant.bucket_rate_units_per_s, rel=error), tenant.name
        checked += 1
    assert checked >= 3
