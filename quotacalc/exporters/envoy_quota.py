"""The envoy target's rate limits as Envoy AI Gateway ``QuotaPolicy`` (``aigateway.envoyproxy.io/v1alpha1``, AI
Gateway 1.1) instead of Envoy Gateway ``BackendTrafficPolicy``: the choice ``--envoy-quota``.

A QuotaPolicy attaches to an AIServiceBackend (a pool), holds the cost expression next to the limits, and keys
a bucket per tenant on its header (``bucketRules[].clientSelectors``). Read in envoyproxy/ai-gateway at c217da8
(``internal/ratelimit/translator/translator.go``, ``internal/extensionserver/quota_ratelimit.go``,
``internal/controller/gateway.go``):
- one ``costExpression`` per model and backend, evaluated like ``llmRequestCosts`` (``llmcostcel``), so every tenant
  charged on a pool must share the pool's charged weights at one scale;
- a ``perModelQuotas[].modelName`` applies only where the route's backendRef sets the same ``modelNameOverride``:
  the routes here set it to the pool's served model name (which a LoRA adapter's name cannot pass);
- ``limit`` is cast to uint32 (``RequestsPerUnit``) without a check, ``duration`` is one of 1s, 1m, 1h, 1d;
- the cost is charged when the stream is done (``ApplyOnStreamDone``), as a hits addend Envoy drops above 1e9;
- in ``Shared`` mode a request passes while any bucket it matches has quota left, so no ``defaultBucket`` is written
  (a limit of 0 writes none): a tenant's own bucket alone decides.

Everything else of the envoy target (backends, routes, salts, priority) is the envoy module's own.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

from quotacalc.core.policy import QuotaPolicy, TenantPolicy
from quotacalc.errors import QuotacalcError
from quotacalc.exporters import envoy
from quotacalc.exporters._text import load_pool_by_tenant, yaml_documents
from quotacalc.exporters.base import Export, ExportOptions, GeneratedFile

QUOTA_API = "aigateway.envoyproxy.io/v1alpha1"
BACKENDTRAFFICPOLICY = "backendtrafficpolicy"
QUOTAPOLICY = "quotapolicy"
#: QuotaPolicy's windows (its CRD's enum on ``duration``), seconds each.
DURATIONS = (("1s", 1), ("1m", 60), ("1h", 3600), ("1d", 86400))
QUOTA_FILE = "envoy/quotapolicies.yaml"
TRAFFIC_POLICY_FILE = "envoy/backendtrafficpolicies.yaml"
ROUTES_FILE = "envoy/aigatewayroutes.yaml"


def duration_for(tenant: TenantPolicy) -> tuple[str, int]:
    """The QuotaPolicy window nearest the bucket's burst on a log scale (the shorter on a tie)."""
    burst_s = tenant.bucket_depth_units / tenant.bucket_rate_units_per_s
    return min(DURATIONS, key=lambda window: (abs(math.log(window[1] / max(burst_s, 1.0))), window[1]))


def limit_for(tenant: TenantPolicy, scale: int) -> int:
    """The tenant's limit per window in 1/scale units (rounded down, at least 1)."""
    return max(math.floor(tenant.bucket_rate_units_per_s * duration_for(tenant)[1] * scale), 1)


def largest_request_cost(tenant: TenantPolicy, expression_weights: tuple[int, int, int], per_prompt) -> int:
    """The scaled cost of the costliest request the tenant's tier admits, by the cost expression's arithmetic: its
    max context all prompt (uncached, or all cached where that weighs more), or its max output and the rest prompt
    (the cost is linear in each count but for the prompt-length term, which grows with the prompt)."""
    prompt_w, cached_w, output_w = expression_weights

    def cost(prompt: int, output: int) -> int:
        uncached = prompt * prompt_w
        if per_prompt is not None and per_prompt[0]:
            numerator, denominator = per_prompt
            uncached = prompt * (prompt_w * denominator + prompt * numerator) // denominator
        return max(uncached, prompt * cached_w) + output * output_w

    output = min(tenant.max_output_tokens, tenant.max_context_tokens)
    return max(cost(tenant.max_context_tokens, 0), cost(tenant.max_context_tokens - output, output))


def _refuse(problem: str, field: str) -> QuotacalcError:
    return QuotacalcError(
        f"{problem}: --envoy-quota {QUOTAPOLICY} cannot express it",
        field=field,
        fix=f"use --envoy-quota {BACKENDTRAFFICPOLICY} (per-tenant costs), the default",
    )


def pool_quotas(policy: QuotaPolicy) -> dict[str, tuple[int, str, list[TenantPolicy]]]:
    """Pool -> (scale, cost expression, tenants charged there), refusing what one expression per pool cannot say."""
    index = {tenant.name: number for number, tenant in enumerate(policy.tenants)}
    pools = {pool.name: pool for pool in policy.pools}
    load_pools = load_pool_by_tenant(policy)
    by_pool: dict[str, list[TenantPolicy]] = {}
    for tenant in policy.tenants:
        if tenant.lora_adapters:
            raise _refuse(
                f"tenant {tenant.name} names LoRA adapters, which the modelNameOverride a QuotaPolicy needs on its "
                "route would rewrite to the base model",
                f"tenants[{index[tenant.name]}].lora_adapters",
            )
        by_pool.setdefault(load_pools[tenant.name], []).append(tenant)
    quotas = {}
    for pool_name, tenants in sorted(by_pool.items()):
        tenants = sorted(tenants, key=lambda tenant: tenant.name)
        charged = {tenant.name: envoy.charged_weights(tenant, pool_name) for tenant in tenants}
        first = tenants[0]
        for tenant in tenants[1:]:
            if charged[tenant.name] != charged[first.name]:
                raise _refuse(
                    f"tenants {first.name} and {tenant.name} are charged on pool {pool_name} at different weights "
                    f"({charged[first.name].model_dump()} and {charged[tenant.name].model_dump()}), and a QuotaPolicy "
                    "has one cost expression per model and backend",
                    f"tenants[{index[tenant.name]}].tier",
                )
        weights = charged[first.name]
        longest = pools[pool_name].prompt_length_charge.longest_prompt_tokens
        for scale in envoy.SCALES:
            scaled = envoy.scaled_weights(weights, scale)
            per_prompt = envoy.scaled_per_prompt(weights, scale, longest)
            fits = all(limit_for(tenant, scale) <= envoy.MAX_LIMIT for tenant in tenants) and all(
                largest_request_cost(tenant, scaled, per_prompt) <= envoy.MAX_HITS_ADDEND for tenant in tenants
            )
            if fits:
                break
        else:
            raise _refuse(
                f"no scale of {envoy.SCALES} keeps pool {pool_name}'s limits within uint32 and its costliest request "
                f"within Envoy's hits addend of {envoy.MAX_HITS_ADDEND:,}",
                f"pools.{pool_name}",
            )
        quotas[pool_name] = (scale, envoy.cost_expression(*scaled, per_prompt=per_prompt), tenants)
    return quotas


def quota_policies(policy: QuotaPolicy) -> list[dict]:
    """A QuotaPolicy per pool that carries tenants: the pool's cost, a bucket per tenant on its header."""
    pools = {pool.name: pool for pool in policy.pools}
    documents = []
    for pool_name, (scale, expression, tenants) in pool_quotas(policy).items():
        rules = [
            {
                "clientSelectors": [
                    {"headers": [{"name": policy.tenant_header, "type": "Exact", "value": tenant.name}]}
                ],
                "quota": {"limit": limit_for(tenant, scale), "duration": duration_for(tenant)[0]},
            }
            for tenant in tenants
        ]
        documents.append(
            {
                "apiVersion": QUOTA_API,
                "kind": "QuotaPolicy",
                "metadata": {"name": f"quotacalc-{pool_name}"},
                "spec": {
                    "targetRefs": [{"group": "aigateway.envoyproxy.io", "kind": "AIServiceBackend", "name": pool_name}],
                    "perModelQuotas": [
                        {
                            "modelName": pools[pool_name].engine.served_model_name,
                            "quota": {"costExpression": expression, "mode": "Shared", "bucketRules": rules},
                        }
                    ],
                },
            }
        )
    return documents


def _routes_with_model_override(policy: QuotaPolicy, routes: list[dict]) -> list[dict]:
    """The envoy module's routes, each backendRef naming its pool's served model as ``modelNameOverride`` (the name
    the request already carries: the QuotaPolicy applies only there), and without the per-tenant llmRequestCosts
    that only BackendTrafficPolicy reads (the controller adds the QuotaPolicy's own)."""
    served = {pool.name: pool.engine.served_model_name for pool in policy.pools}
    out = []
    for route in routes:
        spec = {key: value for key, value in route["spec"].items() if key != "llmRequestCosts"}
        spec["rules"] = [
            {
                **rule,
                "backendRefs": [
                    {**ref, "modelNameOverride": served[ref["name"]]} for ref in rule.get("backendRefs", [])
                ],
            }
            for rule in spec["rules"]
        ]
        out.append({**route, "spec": spec})
    return out


#: The envoy target's notes that state BackendTrafficPolicy's mechanism (its windows, counters and route split), by
#: their opening words: a QuotaPolicy has its own (``_limits``), and its capabilities are the registry's variant.
_TRAFFIC_POLICY_LINES = (
    "Routes and their rate-limit policies",
    "Cost weights are integers",
    "Month",
)


def _traffic_policy_line(line: str, policy: QuotaPolicy) -> bool:
    """Whether an envoy note is about BackendTrafficPolicy's windows, counters or scales."""
    if line.startswith(_TRAFFIC_POLICY_LINES):
        return True
    about_a_tenant = line.startswith(tuple(f"{tenant.name}: " for tenant in policy.tenants))
    return about_a_tenant and any(word in line for word in (" window", "charged as", "enforced as"))


def _limits(policy: QuotaPolicy, inherited: tuple[tuple[str, str], ...]) -> tuple[tuple[str, str], ...]:
    notes = [(part, line) for part, line in inherited if not _traffic_policy_line(line, policy)]
    for pool_name, (scale, _expression, tenants) in pool_quotas(policy).items():
        weights = envoy.charged_weights(tenants[0], pool_name)
        exact = (weights.prompt, weights.cached_prompt, weights.output)
        for label, weight, scaled in zip(
            ("prompt", "cached prompt", "output"), exact, envoy.scaled_weights(weights, scale), strict=True
        ):
            if weight and abs(scaled / scale - weight) > envoy.WEIGHT_TOLERANCE * weight:
                notes.append(
                    ("weights", f"Pool {pool_name}: {label} weight {weight:g} is charged as {scaled}/{scale}.")
                )
        for tenant in tenants:
            unit, seconds = duration_for(tenant)
            enforced = limit_for(tenant, scale) / scale / seconds
            rate = tenant.bucket_rate_units_per_s
            if abs(enforced - rate) > envoy.WEIGHT_TOLERANCE * rate:
                notes.append(
                    (
                        "rate",
                        f"{tenant.name}: its rate of {rate:.4g} units/s is enforced as {enforced:.4g} units/s, a whole "
                        f"number of 1/{scale:,} units per {unit} window on pool {pool_name}.",
                    )
                )
    return tuple(notes)


def export(policy: QuotaPolicy, salts: Mapping[str, str], options: ExportOptions) -> Export:
    """The envoy target: its own files, with QuotaPolicies in place of BackendTrafficPolicies where chosen."""
    plain = envoy.export(policy, salts, options)
    if options.envoy_quota != QUOTAPOLICY:
        return plain
    routes = _routes_with_model_override(policy, envoy.documents(policy, salts)[ROUTES_FILE])
    files = []
    for generated in plain.files:
        if generated.path == TRAFFIC_POLICY_FILE:
            continue
        if generated.path == ROUTES_FILE:
            header = "".join(
                line.removeprefix("# ") + "\n" for line in generated.text.splitlines() if line.startswith("#")
            )
            generated = generated.model_copy(update={"text": yaml_documents(routes, header=header.rstrip("\n"))})
        files.append(generated)
    files.append(
        GeneratedFile(
            path=QUOTA_FILE,
            text=yaml_documents(
                quota_policies(policy),
                header="Generated by quotacalc. Per pool: the cost in scaled units and a bucket per tenant; charged "
                "after the response.",
            ),
        )
    )
    return Export(target=plain.target, files=tuple(files), notes=_limits(policy, plain.notes))
