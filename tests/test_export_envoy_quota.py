"""--envoy-quota quotapolicy: the envoy target's limits as Envoy AI Gateway QuotaPolicies, validated against the
QuotaPolicy CRD (schema and CEL rules) and read as the gateway reads them (envoyproxy/ai-gateway c217da8)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from cel_expr_python import cel
from crd_validation import validate_manifest
from policy_samples import platform_policy, sample_salts
from test_export_envoy import _evaluate

from quotacalc.errors import EXIT_INVALID_INPUT, EXIT_USAGE, QuotacalcError
from quotacalc.exporters import envoy, envoy_quota
from quotacalc.exporters.base import ExportOptions

QUOTA = ExportOptions(envoy_quota="quotapolicy")
EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def _one_cost_per_pool():
    """The sample platform where QuotaPolicy can say it: no LoRA adapters, and the batch tier's cached weight that
    of the others, so every tenant of the pool is charged the same weights."""
    policy = platform_policy()
    same = policy.tenants[0].weights
    tenants = tuple(tenant.model_copy(update={"lora_adapters": (), "weights": same}) for tenant in policy.tenants)
    return policy.model_copy(update={"tenants": tenants})


def _manifests(result) -> dict[str, list[dict]]:
    return {file.path: [doc for doc in yaml.safe_load_all(file.text) if doc] for file in result.files}


def test_the_default_is_the_envoy_modules_own_files():
    policy = platform_policy()
    salts = sample_salts(policy)
    assert envoy_quota.export(policy, salts, ExportOptions()) == envoy.export(policy, salts, ExportOptions())


def test_quotapolicies_replace_backendtrafficpolicies_and_pass_their_crds():
    policy = _one_cost_per_pool()
    files = _manifests(envoy_quota.export(policy, sample_salts(policy), QUOTA))
    assert sorted(files) == ["envoy/aigatewayroutes.yaml", "envoy/aiservicebackends.yaml", "envoy/quotapolicies.yaml"]
    for path, manifests in files.items():
        for manifest in manifests:
            assert validate_manifest(manifest) == [], (path, manifest["metadata"]["name"])


def test_the_crd_copy_refuses_what_it_should():
    """Its CEL rule on targetRefs, its duration enum: the validator applies them."""
    policy = _one_cost_per_pool()
    (quota, *_) = _manifests(envoy_quota.export(policy, sample_salts(policy), QUOTA))["envoy/quotapolicies.yaml"]
    wrong_kind = {**quota, "spec": {**quota["spec"], "targetRefs": [{"group": "x", "kind": "Service", "name": "s"}]}}
    assert any("AIServiceBackend" in problem for problem in validate_manifest(wrong_kind))
    rules = quota["spec"]["perModelQuotas"][0]["quota"]["bucketRules"]
    week = [{**rules[0], "quota": {"limit": 1, "duration": "1w"}}]
    model = {
        **quota["spec"]["perModelQuotas"][0],
        "quota": {**quota["spec"]["perModelQuotas"][0]["quota"], "bucketRules": week},
    }
    assert validate_manifest({**quota, "spec": {**quota["spec"], "perModelQuotas": [model]}})


def test_every_quota_applies_to_a_route_that_carries_its_model():
    """A perModelQuota applies only where a route's backendRef to a targeted backend sets modelNameOverride to its
    modelName (quota_ratelimit.go): every tenant's rule does, and every tenant has a bucket on the pool it is sent to."""
    policy = _one_cost_per_pool()
    files = _manifests(envoy_quota.export(policy, sample_salts(policy), QUOTA))
    overrides = {
        (ref["name"], ref["modelNameOverride"])
        for route in files["envoy/aigatewayroutes.yaml"]
        for rule in route["spec"]["rules"]
        for ref in rule["backendRefs"]
    }
    assert all("llmRequestCosts" not in route["spec"] for route in files["envoy/aigatewayroutes.yaml"])
    buckets = {}
    for quota in files["envoy/quotapolicies.yaml"]:
        (target,) = quota["spec"]["targetRefs"]
        for per_model in quota["spec"]["perModelQuotas"]:
            assert (target["name"], per_model["modelName"]) in overrides
            assert "defaultBucket" not in per_model["quota"]  # Shared mode: it would admit a spent tenant
            for rule in per_model["quota"]["bucketRules"]:
                (selector,) = rule["clientSelectors"]
                (header,) = selector["headers"]
                assert header["name"] == policy.tenant_header and header["type"] == "Exact"
                buckets[header["value"]] = (target["name"], rule["quota"])
    load_pools = envoy.load_pool_by_tenant(policy)
    assert {name: pool for name, (pool, _) in buckets.items()} == load_pools


def test_limits_are_the_rate_over_the_window_nearest_the_burst_within_uint32():
    policy = _one_cost_per_pool()
    for pool, (scale, _expression, tenants) in envoy_quota.pool_quotas(policy).items():
        for tenant in tenants:
            duration, seconds = envoy_quota.duration_for(tenant)
            limit = envoy_quota.limit_for(tenant, scale)
            assert limit <= envoy.MAX_LIMIT
            burst_s = tenant.bucket_depth_units / tenant.bucket_rate_units_per_s
            assert duration in {"1s", "1m", "1h", "1d"}
            # nearest on a log scale: no other window is closer to the burst
            assert all(abs(_log(seconds / burst_s)) <= abs(_log(other / burst_s)) for _, other in envoy_quota.DURATIONS)
            assert limit / scale / seconds == pytest.approx(tenant.bucket_rate_units_per_s, rel=1e-3), pool


def _log(value: float) -> float:
    import math

    return math.log(value)


def test_the_costliest_request_is_charged_within_envoys_hits_addend():
    """Each tenant's largest admissible request (max context, its max output) evaluated in the gateway's CEL: a uint
    at most 1e9, so Envoy does not drop it as free; and the expression charges the policy's units."""
    policy = _one_cost_per_pool()
    for pool, (scale, expression, tenants) in envoy_quota.pool_quotas(policy).items():
        for tenant in tenants:
            output = tenant.max_output_tokens
            for prompt, out in ((tenant.max_context_tokens, 0), (tenant.max_context_tokens - output, output)):
                value = _evaluate(expression, prompt, 0, out)
                assert value.type() == cel.Type.UINT
                assert value.value() <= envoy.MAX_HITS_ADDEND, (pool, tenant.name, prompt, out)
        weights = envoy.charged_weights(tenants[0], pool)
        units = _evaluate(expression, 1000, 200, 300).value() / scale
        plain = 800 * weights.prompt + 200 * weights.cached_prompt + 300 * weights.output
        assert units == pytest.approx(plain, rel=0.02)  # the prompt-length term adds its share on 800 tokens


def test_what_one_cost_per_pool_cannot_say_is_refused():
    policy = platform_policy()  # the batch tier's cached weight differs, and two tenants name adapters
    with pytest.raises(QuotacalcError, match="names LoRA adapters") as caught:
        envoy_quota.export(policy, sample_salts(policy), QUOTA)
    assert caught.value.field.endswith(".lora_adapters")
    no_adapters = policy.model_copy(
        update={"tenants": tuple(t.model_copy(update={"lora_adapters": ()}) for t in policy.tenants)}
    )
    with pytest.raises(QuotacalcError, match="charged on pool standard at different weights") as caught:
        envoy_quota.export(no_adapters, sample_salts(no_adapters), QUOTA)
    assert "--envoy-quota backendtrafficpolicy" in caught.value.fix


def test_limits_say_it_charges_after_the_response_and_never_stops_a_stream():
    policy = _one_cost_per_pool()
    from quotacalc.exporters.limits import limit_lines

    limits = limit_lines(envoy_quota.export(policy, sample_salts(policy), QUOTA), QUOTA)
    assert any("an admitted request is never stopped, a stream is never cut" in line for line in limits)
    assert any(
        line.startswith("**rate**: approximated. A QuotaPolicy counts fixed windows of 1s, 1m, 1h or 1d")
        for line in limits
    )
    # BackendTrafficPolicy's own mechanism lines are gone; the gateway's general ones stay.
    assert not any("Envoy's global rate limit" in line or "split at" in line for line in limits)
    assert sum("after the response" in line for line in limits) == 1
    assert any(line.startswith("**kv_cap**: lost.") for line in limits)


def test_the_cli_takes_the_option_through_the_declaration(run_cli, tmp_path: Path, monkeypatch):
    monkeypatch.setenv("QUOTACALC_SALT_SECRET", "test-secret-not-for-production")
    code, _, err = run_cli(
        "generate", EXAMPLES / "platform.yaml", "--out", tmp_path, "--target", "envoy", "--envoy-quota", "quotapolicy"
    )
    # The shipped example names LoRA adapters: refused in one line, nothing written.
    assert code == EXIT_INVALID_INPUT, err
    (line,) = err.strip().splitlines()
    assert "lora_adapters" in line and "--envoy-quota quotapolicy cannot express it; nothing was written" in line
    assert not tmp_path.exists() or not any(tmp_path.iterdir())
    code, _, err = run_cli("generate", EXAMPLES / "platform.yaml", "--out", tmp_path, "--envoy-quota", "quota")
    assert code == EXIT_USAGE and "--envoy-quota: must be one of backendtrafficpolicy, quotapolicy" in err
