"""The checked-in example (examples/platform): its Envoy costs run in the gateway's CEL environment, its secrets.

test_generate's drift check holds these files equal to what the plan generates; test_example_platform runs
the CRDs, deck and the vLLM flag table over them.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from test_export_envoy import GATEWAY_CEL

from quotacalc.core.plan_size import load_pool_of
from quotacalc.core.policy import QuotaPolicy
from quotacalc.exporters import envoy

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "examples" / "platform"


def _documents(relative: str) -> list[dict]:
    return list(yaml.safe_load_all((OUT / relative).read_text(encoding="utf-8")))


def test_the_examples_cost_expressions_give_the_policys_units():
    """For every tenant of the real plan, its rate-limit rule's cost key names a CEL expression that, run in the
    gateway's environment on a sample request, gives the units the policy's weights give (within rounding)."""
    # The checked-in canonical policy: test_generate holds it equal to what the plan builds.
    policy = QuotaPolicy.model_validate_json((OUT / "canonical" / "policy.json").read_text(encoding="utf-8"))
    routes = _documents("envoy/aigatewayroutes.yaml")
    costs = {cost["metadataKey"]: cost["cel"] for route in routes for cost in route["spec"]["llmRequestCosts"]}
    rules = {
        rule["clientSelectors"][0]["headers"][0]["value"]: rule
        for document in _documents("envoy/backendtrafficpolicies.yaml")
        for rule in document["spec"]["rateLimit"]["global"]["rules"]
    }
    assert sorted(rules) == sorted(tenant.name for tenant in policy.tenants)
    pools = {pool.name: pool for pool in policy.pools}
    prompt, cached, output = 3000, 1200, 700
    for tenant in policy.tenants:
        rule = rules[tenant.name]
        _unit, seconds, scale, limit = envoy.window_for(tenant, pools[load_pool_of(tenant)])
        assert rule["limit"]["requests"] == limit
        assert limit == pytest.approx(tenant.bucket_rate_units_per_s * seconds * scale, abs=1)
        expression = costs[rule["cost"]["response"]["metadata"]["key"]]
        value = (
            GATEWAY_CEL.compile(expression)
            .eval(
                data={
                    "model": "m",
                    "backend": "b",
                    "route_name": "r",
                    "input_tokens": prompt,
                    "cached_input_tokens": cached,
                    "cache_creation_input_tokens": 0,
                    "output_tokens": output,
                    "total_tokens": prompt + output,
                    "reasoning_tokens": 0,
                }
            )
            .value()
        )
        units = tenant.weights.request_units(prompt, cached, output)
        assert value / scale == pytest.approx(units, abs=(prompt + output) * 0.5 / scale + 1 / scale)


def test_salt_holding_files_are_marked_secret_in_the_manifest():
    """Files written 0600 are those the manifest marks secret: the salts, and the gateway files holding them."""
    files = json.loads((OUT / ".quotacalc-manifest.json").read_text(encoding="utf-8"))["files"]
    secret = sorted(path for path, entry in files.items() if entry["secret"])
    assert secret == [
        "canonical/salts.json",
        "envoy/aigatewayroutes.yaml",
        "kong/kong.yaml",
        "litellm/salts.json",
    ]


def test_the_examples_largest_requests_are_charged_within_envoys_hits_addend():
    """Envoy charges nothing for a cost above 10^9: for every tenant of the real plan, its rule's CEL run on its
    largest admissible requests (prompt + output within its tier's max context and its pool's max-model-len, output
    within its tier's max output; no prompt token cached or all) stays within 10^9 and gives the policy's units."""
    policy = QuotaPolicy.model_validate_json((OUT / "canonical" / "policy.json").read_text(encoding="utf-8"))
    pools = {pool.name: pool for pool in policy.pools}
    routes = _documents("envoy/aigatewayroutes.yaml")
    costs = {cost["metadataKey"]: cost["cel"] for route in routes for cost in route["spec"]["llmRequestCosts"]}
    rules = {
        rule["clientSelectors"][0]["headers"][0]["value"]: rule
        for document in _documents("envoy/backendtrafficpolicies.yaml")
        for rule in document["spec"]["rateLimit"]["global"]["rules"]
    }
    for tenant in policy.tenants:
        pool = pools[load_pool_of(tenant)]
        weights = envoy.charged_weights(tenant, pool.name)
        scale = envoy.window_for(tenant, pool)[2]
        program = GATEWAY_CEL.compile(costs[rules[tenant.name]["cost"]["response"]["metadata"]["key"]])
        context = min(tenant.max_context_tokens, pool.engine.max_model_len)
        for output in (0, min(tenant.max_output_tokens, context)):
            prompt = context - output
            for cached in (0, prompt):
                charged = program.eval(
                    data={
                        "model": "m",
                        "backend": "b",
                        "route_name": "r",
                        "input_tokens": prompt,
                        "cached_input_tokens": cached,
                        "cache_creation_input_tokens": 0,
                        "output_tokens": output,
                        "total_tokens": prompt + output,
                        "reasoning_tokens": 0,
                    }
                ).value()
                assert charged <= envoy.MAX_HITS_ADDEND, tenant.name
                assert charged == pytest.approx(weights.request_units(prompt, cached, output) * scale, rel=1e-4)
