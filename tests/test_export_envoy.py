"""Envoy AI Gateway exporter: manifests checked against the real CRDs, the cost CEL run by a real CEL engine."""

from __future__ import annotations

import json

import pytest
import yaml
from cel_expr_python import cel
from crd_validation import validate_manifest
from policy_samples import many_tenants_policy, platform_policy, sample_salts, tenant_policy

from quotacalc.core.plan_size import load_pool_of
from quotacalc.exporters import envoy
from quotacalc.exporters.base import ExportOptions

OPTIONS = ExportOptions()
#: The sample's standard pool: the load pool of every hand-built tenant below (its max-model-len 32,768 tokens).
STANDARD = platform_policy().pools[0]

#: The gateway's CEL environment (envoyproxy/ai-gateway internal/llmcostcel/cel.go, commit c217da8).
GATEWAY_CEL = cel.NewEnv(
    variables={
        "model": cel.Type.STRING,
        "backend": cel.Type.STRING,
        "route_name": cel.Type.STRING,
        "input_tokens": cel.Type.UINT,
        "cached_input_tokens": cel.Type.UINT,
        "cache_creation_input_tokens": cel.Type.UINT,
        "output_tokens": cel.Type.UINT,
        "total_tokens": cel.Type.UINT,
        "reasoning_tokens": cel.Type.UINT,
    }
)


def _evaluate(expression: str, input_tokens: int, cached: int, output: int) -> cel.Value:
    return GATEWAY_CEL.compile(expression).eval(
        data={
            "model": "llama-3.3-70b",
            "backend": "standard.default",
            "route_name": "quotacalc-tenants-001",
            "input_tokens": input_tokens,
            "cached_input_tokens": cached,
            "cache_creation_input_tokens": 0,
            "output_tokens": output,
            "total_tokens": input_tokens + output,
            "reasoning_tokens": 0,
        }
    )


def _export(policy=None):
    policy = policy or platform_policy()
    return policy, envoy.export(policy, sample_salts(policy), OPTIONS)


def test_every_manifest_passes_its_crd_schema_and_cel_rules():
    _policy, result = _export()
    kinds = []
    for generated in result.files:
        for manifest in yaml.safe_load_all(generated.text):
            kinds.append(manifest["kind"])
            assert validate_manifest(manifest) == [], (generated.path, manifest["metadata"]["name"])
    assert sorted(set(kinds)) == ["AIGatewayRoute", "AIServiceBackend", "BackendTrafficPolicy"]


def test_the_validator_catches_what_the_api_server_rejects():
    """The checks above can fail: an unknown field, a reserved rule name and a CRD maxItems are each reported."""
    _policy, result = _export()
    route = next(yaml.safe_load_all(next(f.text for f in result.files if f.path.endswith("routes.yaml"))))
    route["spec"]["rules"][0]["name"] = "route-not-found"  # x-kubernetes-validations on rules[]
    route["spec"]["rules"][1]["backendRefs"][0]["weightt"] = 2  # unknown field
    route["spec"]["rules"] = route["spec"]["rules"] * 3  # 24 rules > maxItems 15
    problems = validate_manifest(route)
    assert any("route-not-found is reserved" in problem for problem in problems)
    assert any("'weightt' was unexpected" in problem for problem in problems)
    assert any("is too long" in problem for problem in problems)


def test_cost_expression_gives_the_policys_units_in_milli_units():
    """Hand computation, standard pool (W = 3.09, longest prompt 32,768), premium tier (cached weight 0.1):
    a prompt token adds 2,621,440 x 16,384.5 / 141,107,412,992 / 32,768 = 9.28909e-6 units per token of its
    prompt (policy_samples.prompt_charge), 92,891 / 10^7 milli-units. 2,000 prompt tokens of which 500 cached,
    500 output tokens = 1,500 x (1 + 2,000 x 9.28909e-6) + 500 x 0.1 + 500 x 3.09
    = 1,527.867 + 50 + 1,545 = 3,122.867 units: 3,122,867 milli-units (CEL's uint division truncates)."""
    _policy, result = _export()
    route = next(yaml.safe_load_all(next(f.text for f in result.files if f.path.endswith("routes.yaml"))))
    costs = {cost["metadataKey"]: cost["cel"] for cost in route["spec"]["llmRequestCosts"]}
    premium = costs["quotacalc_units_x1000_p1000_c100_o3090_l92891d10000000"]
    value = _evaluate(premium, 2000, 500, 500)
    assert value.type() == cel.Type.UINT
    assert value.value() == 3_122_867


def test_a_long_prompt_is_charged_its_attention_over_the_prompt():
    """A 100,000-token uncached prompt on the long-context pool (anchored at 131,072 tokens): each of its tokens
    costs 1 + 100,000 x 2,621,440 x 65,536.5 / 141,107,412,992 / 131,072 = 1.9289 units, 192,889 units in all
    where one unit a token charged 100,000 (docs/method.md §1: what kv reports for such a prompt)."""
    policy = platform_policy()
    routed = next(tenant for tenant in policy.tenants if tenant.long_context_weights is not None)
    weights = routed.long_context_weights
    per_prompt = envoy.scaled_per_prompt(weights, 1000, 131072)
    expression = envoy.cost_expression(*envoy.scaled_weights(weights, 1000), per_prompt=per_prompt)
    charged_units = _evaluate(expression, 100_000, 0, 0).value() / 1000
    assert charged_units == pytest.approx(192_888.8, abs=0.5)
    assert weights.request_units(100_000, 0, 0) == pytest.approx(192_888.8, abs=0.5)


def test_cost_expression_matches_the_weights_on_many_samples():
    """Units from the policy's float weights vs the CEL integer result: equal within the scale's rounding."""
    policy, result = _export()
    pools = {pool.name: pool for pool in policy.pools}
    routes = list(yaml.safe_load_all(next(f.text for f in result.files if f.path.endswith("routes.yaml"))))
    by_key = {cost["metadataKey"]: cost["cel"] for route in routes for cost in route["spec"]["llmRequestCosts"]}
    samples = [(0, 0, 0), (1, 0, 1), (2000, 500, 500), (32768, 0, 8192), (4000, 4000, 1), (7, 3, 11)]
    for tenant in policy.tenants:
        _unit, _seconds, scale, _limit = envoy.window_for(tenant, pools[tenant.pool])
        weights = envoy.scaled_weights(tenant.weights, scale)
        per_prompt = envoy.scaled_per_prompt(
            tenant.weights, scale, pools[tenant.pool].prompt_length_charge.longest_prompt_tokens
        )
        assert per_prompt is not None
        numerator, denominator = per_prompt
        key = f"quotacalc_units_x{scale}_p{weights[0]}_c{weights[1]}_o{weights[2]}_l{numerator}d{denominator}"
        for prompt, cached, output in samples:
            units = tenant.weights.request_units(prompt, cached, output)
            got = _evaluate(by_key[key], prompt, cached, output).value() / scale
            assert abs(got - units) <= (prompt + output) * 0.5 / scale + 1 / scale + 1e-5 * units


def test_the_prompt_length_term_stays_within_cels_64_bit_integers():
    """A pool whose longest prompt is 10^8 tokens: the finest denominator whose product with such a prompt fits
    below 2^62 (10^4 here: 10^8 x (1,000 x 10^4 + 10^8 x 93) = 9.3 x 10^17; 10^5 would give 9.3 x 10^18), and
    the expression evaluates there without overflowing."""
    policy = platform_policy()
    weights = policy.tenants[0].weights
    assert envoy.scaled_per_prompt(weights, 1000, 10**8) == (93, 10**4)
    expression = envoy.cost_expression(*envoy.scaled_weights(weights, 1000), per_prompt=(93, 10**4))
    value = _evaluate(expression, 10**8, 0, 0)
    assert value.type() == cel.Type.UINT
    assert value.value() == 10**8 * (1000 * 10**4 + 10**8 * 93) // 10**4
    overflowing = envoy.cost_expression(*envoy.scaled_weights(weights, 1000), per_prompt=(92891, 10**7))
    assert _evaluate(overflowing, 10**8, 0, 0).type() == cel.Type.ERROR  # what the bound prevents
    assert envoy.scaled_per_prompt(weights.model_copy(update={"prompt_per_prompt_token": 0.0}), 1000, 10**5) is None


def test_cost_expression_guards_the_uncached_subtraction_and_passes_the_gateways_zero_check():
    for per_prompt in (None, (92891, 10**7)):
        expression = envoy.cost_expression(1000, 100, 3090, per_prompt=per_prompt)
        # The gateway evaluates every expression on all-zero counts at load time (cel.go NewProgram).
        assert _evaluate(expression, 0, 0, 0).value() == 0
        # More cached than input tokens (a malformed usage report) must not underflow the uint subtraction.
        assert _evaluate(expression, 100, 200, 0).value() == 200 * 100
    unguarded = GATEWAY_CEL.compile("input_tokens - cached_input_tokens").eval(
        data={"input_tokens": 100, "cached_input_tokens": 200}
    )
    assert unguarded.type() == cel.Type.ERROR  # what the guard prevents


def test_limits_are_the_bucket_rate_over_the_window_nearest_the_burst():
    """acme: 17,725 units/s, 60 s burst -> Minute: 17,725 x 60 x 1,000 = 1,063,500,000 milli-units.
    wayne (batch, 300 s burst): Minute is nearer 300 s than Hour on a log scale (5x vs 12x):
    6,000 x 60 x 1,000 = 360,000,000."""
    _policy, result = _export()
    rules = next(yaml.safe_load_all(next(f.text for f in result.files if f.path.endswith("policies.yaml"))))
    limits = {
        rule["clientSelectors"][0]["headers"][0]["value"]: rule["limit"]
        for rule in rules["spec"]["rateLimit"]["global"]["rules"]
    }
    assert limits["acme"] == {"requests": 1_063_500_000, "unit": "Minute"}
    assert limits["wayne"] == {"requests": 360_000_000, "unit": "Minute"}


def test_a_limit_that_overflows_envoys_uint32_counter_takes_a_coarser_scale():
    """100,000 units/s x 60 s x 1,000 = 6.0e9 > 4,294,967,295, so 1/100 units: 600,000,000."""
    tenant = tenant_policy("big", platform_policy().tiers[1], 100_000.0)
    assert envoy.window_for(tenant, STANDARD) == ("Minute", 60, 100, 600_000_000)
    assert envoy.scaled_weights(tenant.weights, 100) == (100, 10, 309)


def test_many_tenants_split_into_routes_within_the_crd_limits():
    policy, result = _export(many_tenants_policy(40))
    routes = list(yaml.safe_load_all(next(f.text for f in result.files if f.path.endswith("routes.yaml"))))
    policies = list(yaml.safe_load_all(next(f.text for f in result.files if f.path.endswith("policies.yaml"))))
    assert [len(route["spec"]["rules"]) for route in routes] == [15, 15, 10]
    assert all(len(route["spec"]["llmRequestCosts"]) <= envoy.MAX_COSTS_PER_ROUTE for route in routes)
    assert [p["spec"]["targetRefs"][0]["name"] for p in policies] == [r["metadata"]["name"] for r in routes]
    routed = [rule["name"] for route in routes for rule in route["spec"]["rules"]]
    assert sorted(routed) == sorted(tenant.name for tenant in policy.tenants)
    for manifest in routes + policies:
        assert validate_manifest(manifest) == []


def test_salts_and_priority_are_set_server_side_per_tenant():
    policy, result = _export()
    salts = sample_salts(policy)
    routes_file = next(f for f in result.files if f.path.endswith("routes.yaml"))
    assert routes_file.secret
    assert [f.path for f in result.files if f.secret] == ["envoy/aigatewayroutes.yaml"]
    rules = {rule["name"]: rule for rule in next(yaml.safe_load_all(routes_file.text))["spec"]["rules"]}
    acme = rules["acme"]["backendRefs"][0]["bodyMutation"]["set"]
    assert {"path": "cache_salt", "value": f'"{salts["acme"]}"'} in acme
    assert {"path": "priority", "value": "0"} in acme
    hooli = rules["hooli"]["backendRefs"][0]["bodyMutation"]["set"]  # shared cache: no salt
    assert [entry["path"] for entry in hooli] == ["priority"]
    # LoRA adapters are models the tenant may name.
    models = [match["headers"][1]["value"] for match in rules["acme"]["matches"]]
    assert models == ["llama-3.3-70b", "acme-support-v2"]
    for salt in salts.values():
        assert all(salt not in line for line in result.limits)
        assert all(salt not in f.text for f in result.files if not f.secret)


def test_fcfs_engines_get_no_priority_and_the_limit_says_so():
    policy = platform_policy(scheduling_policy="fcfs")
    result = envoy.export(policy, sample_salts(policy), OPTIONS)
    text = next(f.text for f in result.files if f.path.endswith("routes.yaml"))
    assert "path: priority" not in text
    assert any(line.startswith("Priority: not sent to pools long, standard") for line in result.limits)


def test_limits_name_what_envoy_cannot_express():
    from quotacalc.exporters.limits import limits_markdown

    _policy, result = _export()
    text = limits_markdown(result, OPTIONS)
    for phrase in (
        "**rate**: approximated. Envoy's global rate limit counts fixed windows, not a bucket",
        "**kv_cap**: lost.",
        "**concurrency**: lost. Not expressible with global rate limits",
        "  - Long-context routing: prompts above 32768 tokens",
    ):
        assert phrase in text


def test_deterministic_and_yaml_round_trips():
    policy = platform_policy()
    first = envoy.export(policy, sample_salts(policy), OPTIONS)
    assert first == envoy.export(policy, sample_salts(policy), OPTIONS)
    data = envoy.documents(policy, sample_salts(policy))
    for generated in first.files:
        assert list(yaml.safe_load_all(generated.text)) == data[generated.path]


def test_a_salted_tenant_without_a_salt_is_an_error_not_an_unsalted_route():
    from quotacalc.errors import QuotacalcError
    from quotacalc.exporters import kong

    policy = platform_policy()
    salts = sample_salts(policy)
    del salts["globex"]
    for exporter in (envoy, kong):
        with pytest.raises(QuotacalcError, match="tenant globex is salted but no salt"):
            exporter.export(policy, salts, OPTIONS)


def test_the_crd_check_refuses_what_a_map_list_refuses():
    """headers is a map list keyed by name: the same header twice in one match is refused by the API server, and by
    tests/crd_validation.py (JSON Schema alone would pass it)."""
    _policy, result = _export()
    route = next(
        manifest
        for generated in result.files
        for manifest in yaml.safe_load_all(generated.text)
        if manifest["kind"] == "AIGatewayRoute"
    )
    match = route["spec"]["rules"][0]["matches"][0]
    match["headers"].append(dict(match["headers"][0], value="someone-else"))
    problems = validate_manifest(route)
    assert any("duplicate entries for key {'name': 'x-tenant-id'}" in problem for problem in problems), problems


def test_a_tenant_of_many_adapters_takes_several_rules_within_the_crds_limits():
    """A rule holds 128 model matches (the CRD's maxItems): a tenant with its base model and 300 adapters takes
    ceil(301 / 128) = 3 rules; routes are packed to at most 15 rules, a tenant's rules kept in one route."""
    policy = platform_policy()
    adapters = tuple(f"adapter-{n:03d}" for n in range(300))
    first = policy.tenants[0]
    policy = policy.model_copy(
        update={"tenants": (first.model_copy(update={"lora_adapters": adapters}), *policy.tenants[1:])}
    )
    _policy, result = _export(policy)
    routes = [
        manifest
        for generated in result.files
        for manifest in yaml.safe_load_all(generated.text)
        if manifest["kind"] == "AIGatewayRoute"
    ]
    for route in routes:
        assert validate_manifest(route) == [], route["metadata"]["name"]
        assert len(route["spec"]["rules"]) <= 15
    rules = [rule for route in routes for rule in route["spec"]["rules"] if rule["name"].split(".")[0] == first.name]
    assert [rule["name"] for rule in rules] == [first.name, f"{first.name}.2", f"{first.name}.3"]
    assert [len(rule["matches"]) for rule in rules] == [128, 128, 45]
    models = [
        header["value"]
        for rule in rules
        for match in rule["matches"]
        for header in match["headers"]
        if header["name"] == "x-ai-eg-model"
    ]
    assert models == [policy.pools[0].engine.served_model_name, *adapters]
    # Every rule of the tenant is in one route, whose rate-limit policy is the tenant's one bucket.
    assert len({route["metadata"]["name"] for route in routes for rule in route["spec"]["rules"] if rule in rules}) == 1


def test_a_tenant_beyond_one_route_of_rules_is_refused():
    from quotacalc.errors import QuotacalcError

    policy = platform_policy()
    first = policy.tenants[0]
    adapters = tuple(f"a{n}" for n in range(15 * 128))  # with the base model: 1,921 matches, 16 rules
    policy = policy.model_copy(update={"tenants": (first.model_copy(update={"lora_adapters": adapters}),)})
    with pytest.raises(QuotacalcError) as refused:
        envoy.export(policy, sample_salts(policy), OPTIONS)
    # The policy's YAML path (the plan's order), so generate can name the plan file's entry.
    assert refused.value.field == "tenants[0].lora_adapters"
    assert refused.value.problem == (
        f"tenant {first.name}'s 1,920 LoRA adapters need 16 Envoy AIGatewayRoute rules of 128 model matches (one per "
        "adapter and the base model), more than the 15 one route holds"
    )
    assert refused.value.fix == "give the tenant at most 1,919 adapters, or leave the envoy target out with --target"


def test_the_adapter_limit_is_a_function_check_can_call():
    """1,919 adapters and the base model fill 15 rules of 128 matches exactly; one more needs a 16th rule."""
    assert envoy.MAX_LORA_ADAPTERS == 1919
    assert envoy.lora_adapters_problem(0) is None and envoy.lora_adapters_problem(1919) is None
    assert envoy.lora_adapters_problem(1920) == (
        "1,920 LoRA adapters need 16 Envoy AIGatewayRoute rules of 128 model matches (one per adapter and the base "
        "model), more than the 15 one route holds",
        "give the tenant at most 1,919 adapters, or leave the envoy target out with --target",
    )
    # The limit is the CRDs': the most adapters allowed still make routes the CRD accepts.
    policy = platform_policy()
    first = policy.tenants[0]
    adapters = tuple(f"a{n}" for n in range(envoy.MAX_LORA_ADAPTERS))
    policy = policy.model_copy(update={"tenants": (first.model_copy(update={"lora_adapters": adapters}),)})
    _policy, result = _export(policy)
    routes = [m for f in result.files for m in yaml.safe_load_all(f.text) if m["kind"] == "AIGatewayRoute"]
    assert [len(route["spec"]["rules"]) for route in routes] == [15]
    assert validate_manifest(routes[0]) == []


def _routed_long(policy, name: str):
    """``policy`` with tenant ``name`` sized in its long-context pool's units, as build_policy sizes a tenant whose
    mean prompt is above its pool's threshold (``TenantPolicy.load_pool``)."""
    tenants = tuple(
        tenant.model_copy(update={"load_pool": tenant.long_context_pool}) if tenant.name == name else tenant
        for tenant in policy.tenants
    )
    return policy.model_copy(update={"tenants": tenants})


def test_a_tenant_sized_on_the_long_context_pool_is_sent_and_charged_there():
    """globex sized on traffic whose mean prompt (50,000 tokens) is above pool standard's 32,768: build_policy
    sizes its rate in pool long's units (W = 4.6), so its rule sends to long and its cost is long's weights; a
    sample of 3,000 prompt tokens (1,200 cached) and 700 output tokens: 1,800 + 1,200 x 0.1 + 700 x 4.6 = 5,140
    units = 5,140,000 milli-units (at standard's W = 3.09 it would be 4,083: the bucket would admit more)."""
    policy = _routed_long(platform_policy(), "globex")
    result = envoy.export(policy, sample_salts(policy), ExportOptions())
    manifests = [m for f in result.files for m in yaml.safe_load_all(f.text)]
    for manifest in manifests:
        assert validate_manifest(manifest) == [], manifest["metadata"]["name"]
    rules = {rule["name"]: rule for m in manifests if m["kind"] == "AIGatewayRoute" for rule in m["spec"]["rules"]}
    assert rules["globex"]["backendRefs"][0]["name"] == "long"
    assert rules["acme"]["backendRefs"][0]["name"] == "standard"  # a contract stays on its standard pool
    costs = {
        c["metadataKey"]: c["cel"]
        for m in manifests
        if m["kind"] == "AIGatewayRoute"
        for c in m["spec"]["llmRequestCosts"]
    }
    (limit,) = [
        rule
        for m in manifests
        if m["kind"] == "BackendTrafficPolicy"
        for rule in m["spec"]["rateLimit"]["global"]["rules"]
        if rule["clientSelectors"][0]["headers"][0]["value"] == "globex"
    ]
    key = limit["cost"]["response"]["metadata"]["key"]
    assert key == "quotacalc_units_x1000_p1000_c100_o4600_l92889d10000000"
    # 1,800 uncached x (1 + 3,000 x 9.28888e-6) + 1,200 x 0.1 + 700 x 4.6 = 1,850.16 + 120 + 3,220 = 5,190.16 units
    assert _evaluate(costs[key], 3000, 1200, 700).value() == 5_190_160
    assert (
        "globex: sized on traffic whose mean prompt routes to pool long, so every request of theirs goes to long and "
        "is charged at long's weights (their rate is in its units); AIGatewayRoute cannot send their short prompts "
        "to their standard pool by size."
    ) in result.limits
    (routing,) = [line for line in result.limits if line.startswith("Long-context routing")]
    assert routing.startswith("Long-context routing: prompts above 32768 tokens from acme (pool standard) ")
    # As a contract, globex stays on its standard pool at its weights.
    contract = platform_policy()
    plain = envoy.documents(contract, sample_salts(contract))
    route_rules = [rule for route in plain["envoy/aigatewayroutes.yaml"] for rule in route["spec"]["rules"]]
    assert next(rule for rule in route_rules if rule["name"] == "globex")["backendRefs"][0]["name"] == "standard"


def _charged_tier(cached_prompt_weight: float):
    """The sample's standard tier (burst 60 s, prompts up to 32,768 tokens: none routed long) at another cached
    weight."""
    return platform_policy().tiers[1].model_copy(update={"cached_prompt_weight": cached_prompt_weight})


def _rule_of(result, name: str) -> dict:
    return next(
        rule
        for generated in result.files
        for manifest in yaml.safe_load_all(generated.text)
        if manifest["kind"] == "BackendTrafficPolicy"
        for rule in manifest["spec"]["rateLimit"]["global"]["rules"]
        if rule["clientSelectors"][0]["headers"][0]["value"] == name
    )


def test_a_weight_that_rounds_off_in_milli_units_takes_a_finer_scale():
    """Cached weight 0.0004 at 100 units/s, 60 s burst: 0.4 milli-units rounds to 0 (every cached token free),
    and the Minute's limit at 1/10^4 units, 100 x 60 x 10^4 = 60,000,000, fits uint32: weights (10,000, 4, 30,900),
    the prompt-length term 9.28909e-6 x 10^4 = 0.0928909 a token: 92,891 / 10^6 (five figures). A request of 2,000
    prompt tokens (1,000 cached) and 500 output: 1,000 x (1 + 2,000 x 9.2891e-6) + 1,000 x 0.0004 + 500 x 3.09 =
    1,018.5782 + 0.4 + 1,545 = 2,563.9782 units, 25,639,782 at 1/10^4; 2,000 cached tokens alone cost 0.8 units
    (8,000), not 0. Weight 0.00004 at 500 units/s would need 10^5 (4), whose limit 500 x 60 x 10^5 = 3 x 10^9
    fits, but whose largest request, a 32,768-token prompt (the pool's max-model-len), would cost 32,768 x (1 +
    32,768 x 9.28888e-6) x 10^5 = 4.27 x 10^9, past the 10^9 Envoy charges at most: 10^4 stays, and LIMITS.md says
    the weight rounds to 0/10000 and why."""
    policy = platform_policy()
    fine = tenant_policy("fine", _charged_tier(0.0004), 100.0)
    finer = tenant_policy("finer", _charged_tier(0.00004), 500.0)
    assert envoy.window_for(fine, STANDARD) == ("Minute", 60, 10_000, 60_000_000)
    assert envoy.scale_choice(finer, STANDARD) == ("Minute", 60, 10_000, 300_000_000, "hits")
    policy = policy.model_copy(update={"tenants": (fine, finer)})
    result = envoy.export(policy, sample_salts(policy), OPTIONS)
    for generated in result.files:
        for manifest in yaml.safe_load_all(generated.text):
            assert validate_manifest(manifest) == [], manifest["metadata"]["name"]
    rule = _rule_of(result, "fine")
    assert rule["limit"] == {"requests": 60_000_000, "unit": "Minute"}
    key = rule["cost"]["response"]["metadata"]["key"]
    assert key == "quotacalc_units_x10000_p10000_c4_o30900_l92891d1000000"
    route = next(yaml.safe_load_all(next(f.text for f in result.files if f.path.endswith("routes.yaml"))))
    cel_text = next(cost["cel"] for cost in route["spec"]["llmRequestCosts"] if cost["metadataKey"] == key)
    assert _evaluate(cel_text, 2000, 1000, 500).value() == 25_639_782
    assert _evaluate(cel_text, 2000, 2000, 0).value() == 8_000
    assert not any(line.startswith("fine:") and "is charged as" in line for line in result.limits)
    assert (
        "finer: cached prompt weight 4e-05 is charged as 0/10000 (a finer scale would take its largest request's cost "
        "past the 1,000,000,000 Envoy charges at most)."
    ) in result.limits


def test_a_weight_still_off_says_what_stopped_a_finer_scale():
    """Each reason is true of its tenant. 0.0004 at 10,000 units/s: 10^4 would make the Minute's limit 10,000 x
    60 x 10^4 = 6 x 10^9 > 4,294,967,295, so milli-units stay (600,000,000). A weight of 10^-12 at 0.001 units/s
    rounds to 0 at every scale: on the standard tier (32,768 tokens, 4,096 of output) with W 100 its largest request,
    28,672 prompt tokens and 4,096 output, costs 28,672 x (1 + 28,672 x 92,891 / 10^10) + 409,600 = 445,908.4 units,
    4.5 x 10^8 at 10^3 (CEL's truncating division: 445,908,416) and past 10^9 at 10^4, so 10^3 stays; a tier of one prompt token, no output and no prompt-length
    term costs 1 unit at most, so the scales run to 10^9, the finest written."""
    capped = tenant_policy("capped", _charged_tier(0.0004), 10_000.0)
    base = tenant_policy("x", _charged_tier(0.1), 0.001)
    hits_bound = base.model_copy(
        update={
            "name": "hitsbound",
            "weights": base.weights.model_copy(update={"cached_prompt": 1e-12, "output": 100.0}),
        }
    )
    finest = base.model_copy(
        update={
            "name": "finest",
            "max_context_tokens": 1,
            "max_output_tokens": 0,
            "weights": base.weights.model_copy(update={"cached_prompt": 1e-12, "prompt_per_prompt_token": 0.0}),
        }
    )
    assert envoy.scale_choice(capped, STANDARD) == ("Minute", 60, 1000, 600_000_000, "uint32")
    assert envoy.scale_choice(hits_bound, STANDARD)[2:] == (1000, 60, "hits")
    assert envoy.largest_request(hits_bound, STANDARD, 1000) == ((28_672, 0, 4_096), 445_908_416)
    assert envoy.scale_choice(finest, STANDARD)[2:] == (10**9, 60_000_000, "finest")
    policy = platform_policy()
    policy = policy.model_copy(update={"tenants": (capped, hits_bound, finest)})
    limits = envoy.export(policy, sample_salts(policy), OPTIONS).limits
    assert (
        "capped: cached prompt weight 0.0004 is charged as 0/1000 (a finer scale would take the window's limit past "
        "Envoy's uint32 counter)."
    ) in limits
    assert (
        "hitsbound: cached prompt weight 1e-12 is charged as 0/1000 (a finer scale would take its largest request's "
        "cost past the 1,000,000,000 Envoy charges at most)."
    ) in limits
    assert (
        "finest: cached prompt weight 1e-12 is charged as 0/1000000000 (1/1,000,000,000 units is the finest scale "
        "written)."
    ) in limits
    assert not any("coarse scale" in line for line in limits)


def test_long_bursts_get_week_month_and_year_windows():
    """The CRD's limit.unit enum runs to Year; Envoy's rate limit service counts a Week as 604,800 s, a Month as
    30 days (2,592,000 s) and a Year as 365 (31,536,000 s) (envoyproxy/ratelimit UnitToDivider). Nearest on a
    log scale: Day and Week meet at sqrt(86,400 x 604,800) = 228,592 s. At 1 unit/s a Week holds 604,800,000
    milli-units, a Month 2,592,000,000; a Year's 3.15 x 10^10 overflows uint32, so 1/100 units: 3,153,600,000. At
    1,000 units/s a Year overflows even in whole units (3.15 x 10^10), so the Month (2,592,000,000 units)."""

    def burst(seconds: float, rate: float = 1.0):
        tenant = tenant_policy(f"b{int(seconds)}r{int(rate)}", platform_policy().tiers[1], rate)
        return tenant.model_copy(update={"bucket_depth_units": rate * seconds})

    assert envoy.window_for(burst(228_592), STANDARD) == ("Day", 86_400, 1000, 86_400_000)
    assert envoy.window_for(burst(228_593), STANDARD) == ("Week", 604_800, 1000, 604_800_000)
    assert envoy.window_for(burst(30 * 86_400), STANDARD) == ("Month", 2_592_000, 1000, 2_592_000_000)
    assert envoy.window_for(burst(365 * 86_400), STANDARD) == ("Year", 31_536_000, 100, 3_153_600_000)
    squeezed = burst(365 * 86_400, 1000.0)
    assert envoy.window_for(squeezed, STANDARD) == ("Month", 2_592_000, 1, 2_592_000_000)
    policy = platform_policy()
    tenants = (burst(7 * 86_400), burst(365 * 86_400), squeezed, policy.tenants[0])
    policy = policy.model_copy(update={"tenants": tenants})
    result = envoy.export(policy, sample_salts(policy), OPTIONS)
    units = set()
    for generated in result.files:
        for manifest in yaml.safe_load_all(generated.text):
            assert validate_manifest(manifest) == [], manifest["metadata"]["name"]
            if manifest["kind"] == "BackendTrafficPolicy":
                units |= {rule["limit"]["unit"] for rule in manifest["spec"]["rateLimit"]["global"]["rules"]}
    assert units == {"Minute", "Week", "Month", "Year"}
    assert (
        "b31536000r1000: its burst is nearest a Year window, whose limit would overflow Envoy's uint32 counter even "
        "in whole units, so it gets a Month window: at most rate x 2,592,000 s pass at once, less than its bucket's "
        "depth."
    ) in result.limits
    assert (
        "Month and Year windows are Envoy's rate limit service's fixed 30 and 365 days (a Month, a Year), counted "
        "from the Unix epoch, not calendar months or years."
    ) in result.limits
    # The sample's tenants keep the window nearest their burst, and nothing more is said.
    assert not any("window, whose limit would overflow" in line for line in _export()[1].limits)


def test_long_prompts_on_a_standard_pool_that_refuses_them_are_said_to_be_refused():
    """Every rule of acme and globex (premium, prompts up to 131,072 tokens) sends to pool standard, whose vLLM
    max-model-len is 32,768: their longer prompts are refused there, not served long. At 65,536 with globex's
    context 65,536, only acme is; at 131,072 both are served on standard at its weights."""
    policy = platform_policy()

    def routing(policy) -> str:
        (line,) = [line for line in envoy.export(policy, sample_salts(policy), OPTIONS).limits if "routing" in line]
        return line

    assert routing(policy) == (
        "Long-context routing: prompts above 32768 tokens from acme, globex (pool standard) are not routed to pool "
        "long by their size; AIGatewayRoute matches headers, not prompt size, so their rules send every prompt to "
        "pool standard, whose engine refuses prompts beyond its max-model-len (32,768 tokens): they cannot reach "
        "pool long through this target. To serve them, route by prompt size in front of the gateway, or give them "
        "a model name of their own that a rule sends to long (modelNameOverride to its served model), charged at "
        "long's weights."
    )

    def with_len(max_model_len: int, globex_context: int):
        standard = policy.pools[0]
        standard = standard.model_copy(
            update={"engine": standard.engine.model_copy(update={"max_model_len": max_model_len})}
        )
        tenants = tuple(
            t.model_copy(update={"max_context_tokens": globex_context}) if t.name == "globex" else t
            for t in policy.tenants
        )
        return policy.model_copy(update={"pools": (standard, *policy.pools[1:]), "tenants": tenants})

    assert (
        "65,536 tokens): acme cannot reach pool long through this target (globex: their longest fit, served there "
        "at standard's weights). To serve them,"
    ) in routing(with_len(65_536, 65_536))
    assert routing(with_len(131_072, 131_072)).endswith(
        "pool standard, whose engine admits their longest (its max-model-len is 131,072 tokens): they are served "
        "there, charged at standard's weights."
    )


def test_a_tiny_rate_takes_a_finer_scale_rather_than_rounding_up_to_one_count():
    """0.0001 units/s over a 1 s window is 0.1 milli-units: floor gives 0, and the window's limit of at least 1 count
    enforced 0.001 units/s, ten times the policy. A finer scale counts it exactly: 1 at 1/10,000 units. The tier's
    requests are short (4,096 tokens, 1,024 of output: at most 3,072 x (1 + 3,072 x 9.2889e-6) + 1,024 x 3.09 =
    6,323.7 units), so scales to 10^5 keep them within the 10^9 Envoy charges at most."""
    tier = (
        platform_policy()
        .tiers[1]
        .model_copy(update={"burst_s": 0.5, "max_context_tokens": 4096, "max_output_tokens": 1024})
    )
    tiny = tenant_policy("micro", tier, 0.0001)
    unit, seconds, scale, limit = envoy.window_for(tiny, STANDARD)
    assert (unit, seconds, scale, limit) == ("Second", 1, 10_000, 1)
    assert envoy.enforced_rate_units_per_s(tiny, seconds, scale) == pytest.approx(0.0001)
    # 0.00037 units/s: 3 counts at 1/10,000 units are 19% off; 37 at 1/100,000 are exact.
    odd = tenant_policy("odd", tier, 0.00037)
    _, seconds, scale, limit = envoy.window_for(odd, STANDARD)
    assert (scale, limit) == (100_000, 37)
    # A rate every scale counts well keeps milli-units (its keys and limits do not move).
    assert envoy.window_for(tenant_policy("usual", tier, 1000.0), STANDARD)[2] == 1000


def test_a_rate_no_scale_counts_within_tolerance_is_stated_in_limits():
    """1e-13 units/s over a 1 s window is 1e-9 counts at 1/10^4 units, and a finer scale would take the tier's
    largest request (28,672 prompt tokens and 4,096 output: 48,965 units) past the 10^9 Envoy charges at most: the
    limit of one count enforces 10^9 times the policy, and LIMITS.md says so and why."""
    policy = platform_policy()
    tier = policy.tiers[1].model_copy(update={"burst_s": 0.5})
    tiny = tenant_policy("micro", tier, 1e-13)
    assert envoy.window_for(tiny, STANDARD) == ("Second", 1, 10**4, 1)
    alone = policy.model_copy(update={"tenants": (tiny,)})
    result = envoy.export(alone, sample_salts(alone), OPTIONS)
    (line,) = [line for line in result.limits if line.startswith("micro: its rate")]
    assert line == (
        "micro: its rate of 1e-13 units/s is enforced as 0.0001 units/s, a whole number of 1/10,000 units per "
        "Second window (a finer scale would take its largest request's cost past the 1,000,000,000 Envoy charges at "
        "most)."
    )


def _with_output_weight(policy, output_weight: float):
    """The policy with every tenant's output weight (its pools' W) at ``output_weight``."""

    def heavier(weights):
        return None if weights is None else weights.model_copy(update={"output": output_weight})

    tenants = tuple(
        tenant.model_copy(
            update={"weights": heavier(tenant.weights), "long_context_weights": heavier(tenant.long_context_weights)}
        )
        for tenant in policy.tenants
    )
    return policy.model_copy(update={"tenants": tenants})


def _largest_charged(policy, result) -> dict[str, tuple[int, int, float]]:
    """Per tenant: (the most its CEL charges any admissible request, the scale, the policy's units of that request
    times the scale). Admissible: prompt + output within its tier's max context and its pool's max-model-len (the
    engine refuses longer ones, which then cost nothing), output within its tier's max output; searched on a grid
    of output lengths, with no prompt token cached or all of them."""
    pools = {pool.name: pool for pool in policy.pools}
    routes = [d for f in result.files if f.path.endswith("routes.yaml") for d in yaml.safe_load_all(f.text)]
    costs = {cost["metadataKey"]: cost["cel"] for route in routes for cost in route["spec"]["llmRequestCosts"]}
    found = {}
    for tenant in policy.tenants:
        rule = _rule_of(result, tenant.name)
        key = rule["cost"]["response"]["metadata"]["key"]
        scale = int(key.split("_x")[1].split("_")[0])
        pool = pools[load_pool_of(tenant)]
        context = min(tenant.max_context_tokens, pool.engine.max_model_len)
        longest_output = min(tenant.max_output_tokens, context)
        best = (-1, 0.0)
        for step in range(17):
            output = longest_output * step // 16
            prompt = context - output
            for cached in (0, prompt):
                charged = _evaluate(costs[key], prompt, cached, output)
                assert charged.type() == cel.Type.UINT
                weights = tenant.long_context_weights if pool.name != tenant.pool else tenant.weights
                best = max(best, (charged.value(), weights.request_units(prompt, cached, output) * scale))
        found[tenant.name] = (best[0], scale, best[1])
    return found


@pytest.mark.parametrize("output_weight", [None, 30.0, 150.0])
def test_every_tenants_largest_request_is_charged_within_envoys_hits_addend(output_weight):
    """Envoy drops a hits addend above 10^9, so a costlier response would be free. For every tenant, the generated CEL
    run on its largest admissible requests stays within 10^9 and gives the policy's units at the rule's scale (within
    the integer weights' rounding). At W 150 a premium tenant's largest request on pool standard, 24,576 prompt
    tokens and 8,192 output, costs 24,576 x (1 + 24,576 x 9.2889e-6) + 8,192 x 150 = 1,258,986 units: 1.26 x 10^9
    milli-units, so 1/100 units."""
    policy = platform_policy()
    if output_weight is not None:
        policy = _with_output_weight(policy, output_weight)
    result = envoy.export(policy, sample_salts(policy), OPTIONS)
    for name, (charged, _scale, units) in _largest_charged(policy, result).items():
        assert charged <= envoy.MAX_HITS_ADDEND, name
        assert charged == pytest.approx(units, rel=1e-4, abs=10), name
    scales = {name: scale for name, (_charged, scale, _units) in _largest_charged(policy, result).items()}
    if output_weight == 150.0:
        assert scales["globex"] == 100
    else:
        assert set(scales.values()) == {1000}
    for generated in result.files:
        for manifest in yaml.safe_load_all(generated.text):
            assert validate_manifest(manifest) == [], manifest["metadata"]["name"]


def test_a_request_no_scale_keeps_within_the_hits_addend_is_stated_and_checked():
    """At W 300,000 a standard-tier request of 28,672 prompt and 4,096 output tokens costs 28,672 x (1 + 28,672 x
    9.2889e-6) + 4,096 x 300,000 = 1,228,836,308 units even in
    whole units: LIMITS.md says such a response is free and how to fix it, and check (hits_problem) warns."""
    policy = _with_output_weight(platform_policy(), 300_000.0)
    tenant = next(tenant for tenant in policy.tenants if tenant.name == "hooli")
    problem = envoy.hits_problem(tenant, STANDARD)
    assert problem is not None
    message, fix = problem
    assert message.startswith(
        "its largest request (28,672 prompt tokens, 0 of them cached, 4,096 output tokens on pool standard) costs "
        "1,228,836,"
    )
    assert "max_output_tokens" in fix
    assert envoy.hits_problem(platform_policy().tenants[4], STANDARD) is None
    limits = envoy.export(policy, sample_salts(policy), OPTIONS).limits
    assert any(line.startswith("hooli: its largest request") and "such a response is free" in line for line in limits)
    from quotacalc.cli.plan_cmds import _with_target_limits
    from quotacalc.core.checks import CheckResult

    checked = _with_target_limits(CheckResult(findings=(), reversal_replicas=2.0, salts_checked=False), policy)
    warned = {finding.subject for finding in checked.findings if finding.code == "envoy-hits-addend"}
    # The batch tier's largest, 2,048 output tokens, costs 2,048 x 300,000 = 6.1 x 10^8 units: within.
    assert warned == {f"tenants.{tenant.name}" for tenant in policy.tenants if tenant.tier != "batch"}
    hits = [finding for finding in checked.findings if finding.code == "envoy-hits-addend"]
    assert all(finding.severity == "warning" and finding.fix for finding in hits)


def _mutated(body: dict, mutation: dict) -> dict:
    """A request body after an AIServiceBackend's bodyMutation, as the AIGatewayRoute CRD documents it: ``remove``
    drops top-level fields, ``set`` overwrites or adds a top-level field with its value as JSON."""
    result = {key: value for key, value in body.items() if key not in mutation.get("remove", [])}
    for field in mutation.get("set", []):
        result[field["path"]] = json.loads(field["value"])
    return result


@pytest.mark.parametrize("scheduling_policy", ["priority", "fcfs"])
def test_a_clients_own_priority_and_cache_salt_never_reach_the_engine(scheduling_policy):
    """A starter tenant that sends priority 0 and another tenant's salt: every tenant's rule sends the engine its own
    tier's priority (none on fcfs pools, where vLLM rejects a non-zero one) and its own salt (none where its cache is
    shared), whatever the client sent."""
    policy = platform_policy(scheduling_policy=scheduling_policy)
    salts = sample_salts(policy)
    result = envoy.export(policy, salts, OPTIONS)
    routes = [d for f in result.files if f.path.endswith("routes.yaml") for d in yaml.safe_load_all(f.text)]
    rules = {rule["name"]: rule for route in routes for rule in route["spec"]["rules"]}
    spoofed = {"model": "llama-3.3-70b", "messages": [], "priority": -100, "cache_salt": salts["acme"]}
    for tenant in policy.tenants:
        (backend,) = rules[tenant.name]["backendRefs"]
        sent = _mutated(spoofed, backend["bodyMutation"])
        assert sent.get("cache_salt") == (salts[tenant.salt_ref] if tenant.salt_ref else None), tenant.name
        assert sent.get("priority") == (tenant.priority if scheduling_policy == "priority" else None), tenant.name
        assert sent["messages"] == [] and sent["model"] == "llama-3.3-70b"
    for generated in result.files:
        for manifest in yaml.safe_load_all(generated.text):
            assert validate_manifest(manifest) == [], manifest["metadata"]["name"]
