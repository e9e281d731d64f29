"""llm-d's router (its endpoint picker): priority per tier and fair queueing per tenant, with flow control.

Writes, for the endpoint picker of every InferencePool (the gie target's, or your own):
- ``InferenceObjective``s (``llm-d.ai/v1alpha2``), one per tier and pool (``spec.poolRef`` names one pool), whose
  ``spec.priority`` is the tier's in llm-d's order: higher is more important, the reverse of the policy's and vLLM's;
- the picker's ``EndpointPickerConfig`` (``llm-d.ai/v1alpha1``) with the ``flowControl`` feature gate, a priority
  band per tier and a per-tenant fairness policy (``round-robin-fairness-policy``) in every band, the tenant read
  from the ``x-llm-d-inference-fairness-id`` header; its scheduling profile is llm-d's own default
  (``loadDefaultConfig`` in ``pkg/epp/config/loader/defaults.go``);
- the header settings a trusted gateway in front must apply: per tenant and pool, the objective and fairness id it
  sets, and the client headers it removes (a client must not choose its priority or its fairness flow).

Names and types are those of ``llm-d/llm-d-router`` (tests/data/llm-d/SOURCES.md). llm-d queues and sheds; it has
no token quota, so a gateway target still enforces the tenants' rates.
"""

from __future__ import annotations

from collections.abc import Mapping

from quotacalc.core.policy import QuotaPolicy
from quotacalc.exporters._text import yaml_documents, yaml_text
from quotacalc.exporters.base import Export, ExportOptions, GeneratedFile
from quotacalc.exporters.gie import objective_names, objective_priority, picker_names

TARGET = "llm-d"
OBJECTIVE_API = "llm-d.ai/v1alpha2"
PICKER_CONFIG_API = "llm-d.ai/v1alpha1"
#: The endpoint picker's feature gate that turns flow control on (``pkg/epp/flowcontrol/config.go``).
FLOW_CONTROL_GATE = "flowControl"
#: Cycles through the band's active flows, one dispatch each: no tenant starves another of its priority.
FAIRNESS_POLICY = "round-robin-fairness-policy"
#: Headers the picker reads (``pkg/epp/metadata/consts.go``): the current name first, then a deprecated alias.
OBJECTIVE_HEADER = "x-llm-d-inference-objective"
FAIRNESS_HEADER = "x-llm-d-inference-fairness-id"
DEPRECATED_HEADERS = ("x-gateway-inference-objective", "x-gateway-inference-fairness-id")
#: llm-d's default scheduling profile: scorer type -> weight (``loadDefaultConfig``), kept so that turning flow
#: control on changes nothing else of where requests go.
DEFAULT_SCORERS = {"queue-scorer": 2.0, "kv-cache-utilization-scorer": 2.0, "prefix-cache-scorer": 3.0}
#: What the picker does with a queued request by default (FlowControlConfig.DefaultRequestTTL's documented default).
DEFAULT_REQUEST_TTL_S = 60


def band_priorities(policy: QuotaPolicy) -> list[int]:
    """One llm-d priority per distinct tier priority, most important first (tiers of one priority share a band)."""
    return sorted({objective_priority(policy, tier.priority) for tier in policy.tiers}, reverse=True)


def objectives(policy: QuotaPolicy) -> list[dict]:
    """An InferenceObjective per tier and pool, most important tier first."""
    names = objective_names(policy)
    return [
        {
            "apiVersion": OBJECTIVE_API,
            "kind": "InferenceObjective",
            "metadata": {"name": names[tier.name, pool.name]},
            "spec": {"priority": objective_priority(policy, tier.priority), "poolRef": {"name": pool.name}},
        }
        for tier in sorted(policy.tiers, key=lambda tier: (tier.priority, tier.name))
        for pool in policy.pools
    ]


def picker_config(policy: QuotaPolicy) -> dict:
    """The EndpointPickerConfig: flow control on, a band per tier, round-robin fairness between tenants in each."""
    band = {"fairnessPolicyRef": FAIRNESS_POLICY}
    return {
        "apiVersion": PICKER_CONFIG_API,
        "kind": "EndpointPickerConfig",
        "featureGates": [FLOW_CONTROL_GATE],
        "plugins": [{"type": FAIRNESS_POLICY}, *({"type": scorer} for scorer in DEFAULT_SCORERS)],
        "schedulingProfiles": [
            {
                "name": "default",
                "plugins": [{"pluginRef": scorer, "weight": weight} for scorer, weight in DEFAULT_SCORERS.items()],
            }
        ],
        "flowControl": {
            # A priority no tier has (a client's objective header the gateway failed to remove) is still fair.
            "defaultPriorityBand": dict(band),
            "priorityBands": [{"priority": priority, **band} for priority in band_priorities(policy)],
        },
    }


def gateway_headers(policy: QuotaPolicy) -> dict:
    """What the gateway in front sets per tenant (matched on the tenant header) and pool, and what it removes."""
    names = objective_names(policy)
    tiers = {tier.name: tier for tier in policy.tiers}
    tenants = []
    for tenant in sorted(policy.tenants, key=lambda tenant: tenant.name):
        pools = [tenant.pool] + ([tenant.long_context_pool] if tenant.long_context_pool else [])
        tenants.append(
            {
                "tenant": tenant.name,
                "tier": tenant.tier,
                "priority": objective_priority(policy, tiers[tenant.tier].priority),
                "pools": [
                    {"pool": pool, "set": {OBJECTIVE_HEADER: names[tenant.tier, pool], FAIRNESS_HEADER: tenant.name}}
                    for pool in pools
                ],
            }
        )
    return {
        "tenantHeader": policy.tenant_header,
        "removeFromClient": [OBJECTIVE_HEADER, FAIRNESS_HEADER, *DEPRECATED_HEADERS],
        "tenants": tenants,
    }


def export(policy: QuotaPolicy, salts: Mapping[str, str], options: ExportOptions) -> Export:
    """InferenceObjectives, the EndpointPickerConfig and the gateway's header settings."""
    pickers = ", ".join(sorted(set(picker_names(policy).values())))
    files = (
        GeneratedFile(
            path=f"{TARGET}/inferenceobjectives.yaml",
            text=yaml_documents(
                objectives(policy),
                header="Generated by quotacalc. llm-d InferenceObjectives: one per tier and pool, priority higher = "
                "more important.",
            ),
        ),
        GeneratedFile(
            path=f"{TARGET}/endpointpickerconfig.yaml",
            text=yaml_text(
                picker_config(policy),
                header="Generated by quotacalc. The endpoint picker's config (not a Kubernetes object): give it to "
                f"every pool's picker ({pickers}), e.g. through llm-d's inferencepool chart.",
            ),
        ),
        GeneratedFile(
            path=f"{TARGET}/gateway-headers.yaml",
            text=yaml_text(
                gateway_headers(policy),
                header="Generated by quotacalc. Not a Kubernetes object: the headers the trusted gateway in front of "
                "the pickers must set\nper tenant (matched on tenantHeader, itself set by authentication) and pool, "
                "after removing removeFromClient\nfrom the client's request, so no client picks its own priority or "
                "fairness flow.",
            ),
        ),
    )
    return Export(target=TARGET, files=files, notes=_limits(policy))


def _limits(policy: QuotaPolicy) -> tuple[tuple[str, str], ...]:
    tiers = sorted(policy.tiers, key=lambda tier: (tier.priority, tier.name))
    least = tiers[-1].name if tiers else "the least important tier"
    return (
        ("rate", f"A request's TTL in the queue is {DEFAULT_REQUEST_TTL_S} s by default."),
        (
            "priority",
            f"A request without {OBJECTIVE_HEADER} gets priority 0, the band of {least} (the least important tier); "
            f"one without {FAIRNESS_HEADER} joins the shared flow 'default-flow'.",
        ),
        (
            "identity",
            f"The gateway must remove {', '.join([OBJECTIVE_HEADER, FAIRNESS_HEADER, *DEPRECATED_HEADERS])} from every "
            "client request and set them per tenant (gateway-headers.yaml).",
        ),
    )
