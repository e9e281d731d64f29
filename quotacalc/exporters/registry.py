"""Every config target, declared once: its name, module, options, salting, pre-checks and what it enforces.

``generate``'s ``--target`` choices and help, the target options' flags (``--gie-objectives``, ...), which targets
need the salt secret, ``check``'s per-target findings and ``quotacalc targets``'s table are all read from
``TARGETS`` below; nothing else lists the targets.

Adding a target touches exactly these files:

1. ``quotacalc/exporters/<name>.py``: ``export(policy, salts, options) -> Export`` (pure, see ``base.py``; its notes
   each under a part of ``PARTS``), and, where ``generate`` would refuse a plan, ``prechecks(policy) -> list[Finding]``
   so ``check`` says so first;
2. one ``Target(...)`` entry in ``TARGETS`` here (options, salting, pre-checks, a capability per part, and what an
   option's value changes of them), from which its LIMITS.md is rendered (``limits.py``);
3. ``tests/test_export_<name>.py``, validating the files against the target's own schema or tool;
4. the generated files the repository ships, regenerated with the CLI: the example platform
   (``quotacalc generate examples/platform.yaml --out examples/platform --salt-secret-file examples/platform.secret``,
   checked by ``test_generate.py``) and the table of ``docs/targets.md`` (``quotacalc targets``, checked by
   ``test_target_registry.py``).

The CLI (``cli/app.py``, ``cli/plan_cmds.py``, ``cli/targets.py``) is not edited: it builds every flag, help text and
table from these declarations. A declaration is plain data (the module and functions are named as text), so
listing the targets imports no exporter.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Support = Literal["yes", "partly", "no"]

#: How a target's LIMITS.md words each support.
SUPPORT_WORDS: dict[str, str] = {"yes": "enforced", "partly": "approximated", "no": "lost"}

#: What a target may enforce of the policy, in the order ``quotacalc targets`` shows them.
CAPABILITIES: dict[str, str] = {
    "rate": "each tenant's rate and burst in units (the policy's token bucket)",
    "weights": "the unit weights: prompt, cached prompt and output tokens charged apart",
    "priority": "the tiers' priority, set by the platform and not by the client",
    "salt": "each tenant's cache salt, set by the platform and not by the client",
    "concurrency": "concurrent sequences per tenant",
    "fairness": "fair queueing between the tenants of one priority",
}

#: Every part of the policy a target declares how far it enforces, in LIMITS.md's order: the capabilities
#: ``quotacalc targets`` tabulates, then the rest.
PARTS: dict[str, str] = {
    **CAPABILITIES,
    "admission": "output reserved or leased at admission, so that one request cannot overshoot its tenant's bucket",
    "retry_after": "a 429's Retry-After from the bucket's refill, by the policy's retry_after rule",
    "kv_cap": "each tier's cap on a tenant's resident KV per replica",
    "max_context": "each tier's max context and output reservation cap (max_tokens)",
    "routing": "long prompts sent to the tenant's long-context pool by their size",
    "identity": "the tenant a request is from, set by the platform and not by the client",
    "lora": "the tenants' LoRA adapters, served on their pools",
    "files": "what else must be written or deployed beside these files (nothing, where enforced)",
}


@dataclass(frozen=True)
class Capability:
    """How far a target enforces one of ``PARTS``: in one line how (or why not), and what to do about a gap."""

    support: Support
    how: str
    fix: str = ""


@dataclass(frozen=True)
class TargetOption:
    """A per-run choice of one target: the flag ``--<name with dashes>`` of ``generate``.

    ``choices`` None: a switch (``default`` False); else the flag takes one of ``choices``, ``default`` among them.
    """

    name: str
    help: str
    default: bool | str = False
    choices: tuple[str, ...] | None = None

    @property
    def flag(self) -> str:
        return "--" + self.name.replace("_", "-")


#: Per option, per value: the parts that value changes (``Target.variants``).
Variants = Mapping[str, Mapping[bool | str, Mapping[str, Capability]]]


@dataclass(frozen=True)
class Target:
    """One config target.

    ``salts``: whether its files carry the tenants' cache salts (then ``generate`` needs the salt secret for a plan
    with salted tenants); ``salting`` says in a few words how the salt reaches the engine. ``prechecks``:
    ``"module:function"``, a function of the policy returning ``check`` findings (``core.checks.Finding``) about what
    this target would refuse or lose. ``enforces``: one ``Capability`` per key of ``PARTS``, with the options'
    defaults (what ``quotacalc targets`` shows); ``variants``: what an option's value changes of it (LIMITS.md
    renders the table of the options a run chose: ``capabilities``).
    """

    name: str
    module: str
    summary: str
    salts: bool
    salting: str
    enforces: Mapping[str, Capability]
    options: tuple[TargetOption, ...] = ()
    prechecks: str | None = None
    files: str = ""
    variants: Variants = field(default_factory=dict)

    def capabilities(self, chosen: Any = None) -> dict[str, Capability]:
        """Every part's capability under the options ``chosen`` (an ``ExportOptions``; None: their defaults)."""
        table = dict(self.enforces)
        defaults = {option.name: option.default for option in self.options}
        for option, by_value in self.variants.items():
            value = defaults.get(option) if chosen is None else getattr(chosen, option)
            table.update(by_value.get(value, {}))
        return table


Given = tuple[Support, str] | tuple[Support, str, str]
#: What ``_caps`` says of a part a declaration leaves out.
UNDECLARED = "Not declared by this target"


def _caps(**given: Given) -> dict[str, Capability]:
    """Every part, in ``PARTS``'s order; one not given is ``no``, saying so (a shipped target declares every part)."""
    unknown = set(given) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}: known are {list(PARTS)}")
    return {name: Capability(*given.get(name, ("no", UNDECLARED))) for name in PARTS}


def _changes(**given: Given) -> dict[str, Capability]:
    """The parts an option's value changes (``Target.variants``)."""
    unknown = set(given) - set(PARTS)
    if unknown:
        raise ValueError(f"unknown parts {sorted(unknown)}: known are {list(PARTS)}")
    return {name: Capability(*capability) for name, capability in given.items()}


_NO_SALT = "none: the gateway in front must set cache_salt"
#: What an engine target says of every per-tenant part: an engine file knows no tenants.
_NO_TENANTS = "The engine knows no tenants: the gateway in front enforces it"
_GATEWAY_FIX = "a gateway target in front (envoy, kong or litellm)"
_ENGINE_LORA = "The policy holds no adapter's path, so these files load none"

#: Name -> declaration, in ``generate``'s order (``all``).
TARGETS: dict[str, Target] = {
    target.name: target
    for target in (
        Target(
            name="canonical",
            module="quotacalc.exporters.canonical",
            summary="quotacalc's own policy (YAML, JSON, JSON Schema) and the salts: the whole plan",
            files="canonical/policy.yaml, policy.json, policy.schema.json, salts.json",
            salts=True,
            salting="writes each salted tenant's salt to salts.json (owner-only)",
            enforces=_caps(
                rate=("yes", "The policy itself: bucket rate and depth per tenant"),
                weights=("yes", "Per pool and tier"),
                priority=("yes", "Per tier"),
                salt=("yes", "salts.json by salt_ref"),
                concurrency=("yes", "max_concurrent_sequences per tenant"),
                fairness=("yes", "Stated for an enforcer to apply"),
                admission=("yes", "The admission policy and its output reservation, stated for an enforcer"),
                retry_after=("yes", "The policy's retry_after rule"),
                kv_cap=("yes", "Each tier's resident KV cap per replica"),
                max_context=("yes", "Each tier's max context and output reservation cap"),
                routing=("yes", "Each tenant's long-context pool and the prompt length above which it goes there"),
                identity=("yes", "The policy's tenant header and its tenants"),
                lora=("yes", "Each tenant's adapters"),
                files=("yes", "The whole plan: an enforcer (such as quotacalc's LiteLLM plugin) reads these files"),
            ),
        ),
        Target(
            name="envoy",
            # envoy_quota writes the envoy module's files, with QuotaPolicies where --envoy-quota asks for them.
            module="quotacalc.exporters.envoy_quota",
            summary="Envoy AI Gateway routes with CEL costs in units, Envoy Gateway global rate limits",
            files="envoy/aiservicebackends.yaml, aigatewayroutes.yaml, backendtrafficpolicies.yaml",
            salts=True,
            salting="sets cache_salt in the request body (AIGatewayRoute bodyMutation)",
            prechecks="quotacalc.exporters.envoy:prechecks",
            options=(
                TargetOption(
                    "envoy_quota",
                    "envoy: where the rate limits live: backendtrafficpolicy (Envoy Gateway, a cost per tenant) or "
                    "quotapolicy (AI Gateway 1.1 QuotaPolicy, one cost per pool; see docs/targets.md)",
                    default="backendtrafficpolicy",
                    choices=("backendtrafficpolicy", "quotapolicy"),
                ),
            ),
            enforces=_caps(
                rate=(
                    "partly",
                    "Envoy's global rate limit counts fixed windows, not a bucket: each tenant gets the window nearest "
                    "its burst (rate x window units per window), so up to twice that can pass across a window "
                    "boundary",
                ),
                weights=("yes", "A CEL cost per tenant over prompt, cached and output tokens, in 1/scale units"),
                priority=(
                    "yes",
                    "Each rule's bodyMutation sets the tier's priority (a client's own is removed), on "
                    "AIServiceBackends only: the AI Gateway ignores body mutations on an InferencePool backend",
                ),
                salt=(
                    "yes",
                    "Each rule's bodyMutation sets the tenant's cache_salt (or removes a client's where the tenant has "
                    "none), on AIServiceBackends only: the AI Gateway ignores body mutations on an InferencePool "
                    "backend",
                ),
                concurrency=("no", "Not expressible with global rate limits: no concurrency counter per tenant"),
                fairness=(
                    "no",
                    "The gateway admits or rejects; there are no per-tenant queues drained by a weighted scheduler",
                ),
                admission=(
                    "no",
                    "Charging happens after the response: a request is admitted while the window's count is under the "
                    "limit, so one request may overshoot it; nothing is reserved at admission (no output reservation)",
                ),
                retry_after=(
                    "no",
                    "Envoy answers 429 without the policy's Retry-After; clients learn only that the window is spent",
                ),
                kv_cap=("no", "Not expressible in the gateway: no KV accounting"),
                max_context=(
                    "no",
                    "Not checked at the gateway; the engine's max-model-len is the only bound",
                    "cap max_tokens and the prompt at the tier's in front of the gateway",
                ),
                routing=(
                    "no",
                    "AIGatewayRoute matches headers, not prompt size: a tenant's rules send each of its prompts to one "
                    "pool",
                    "route by prompt size in front of the gateway, or give long prompts a model name of their own "
                    "that a rule sends to the long-context pool",
                ),
                identity=(
                    "partly",
                    "The tenant header is trusted as sent",
                    "an authenticating filter must set it (and strip a client's) in front of these routes",
                ),
                lora=("yes", "A tenant's rules match its base model and its adapters' names"),
                files=(
                    "yes",
                    "AIServiceBackends, AIGatewayRoutes and BackendTrafficPolicies: the gateway's whole part",
                ),
            ),
            variants={
                "envoy_quota": {
                    "quotapolicy": _changes(
                        rate=(
                            "partly",
                            "A QuotaPolicy counts fixed windows of 1s, 1m, 1h or 1d, not a bucket: each tenant gets "
                            "the one nearest its burst, so up to twice its limit can pass across a window boundary",
                        ),
                        weights=(
                            "partly",
                            "One cost expression per pool and model: every tenant charged on a pool pays the same "
                            "weights (the policy's per-tier weights are refused where they differ on one pool)",
                        ),
                        admission=(
                            "no",
                            "QuotaPolicy charges after the response: a request's cost is counted when its stream is "
                            "done, so an admitted request is never stopped, a stream is never cut at the limit, and "
                            "one request may overshoot it; nothing is reserved at admission",
                        ),
                        lora=(
                            "no",
                            "Routes set modelNameOverride to each pool's served model name, as the QuotaPolicy "
                            "requires; a LoRA adapter name would be rewritten, so tenants with adapters are refused",
                            "--envoy-quota backendtrafficpolicy",
                        ),
                        files=(
                            "yes",
                            "AIServiceBackends, AIGatewayRoutes and QuotaPolicies: QuotaPolicy is v1alpha1 (Envoy AI "
                            "Gateway 1.1); its serviceQuota is not wired into Envoy yet and is not used",
                        ),
                    )
                }
            },
        ),
        Target(
            name="kong",
            module="quotacalc.exporters.kong",
            summary="Kong decK file: consumers, ai-proxy per pool, ai-rate-limiting-advanced cost limits",
            files="kong/kong.yaml",
            salts=True,
            salting="request-transformer sets cache_salt in the request body",
            options=(
                TargetOption(
                    "kong_edition",
                    "kong: enterprise (ai-rate-limiting-advanced limits units; Kong Gateway Enterprise only) or oss "
                    "(the OSS rate-limiting plugin, which counts requests; LIMITS.md lists what is lost)",
                    default="enterprise",
                    choices=("enterprise", "oss"),
                ),
            ),
            enforces=_caps(
                rate=(
                    "partly",
                    "ai-rate-limiting-advanced counts a sliding window (the tenant's burst in whole seconds, at least "
                    "1, holding the rate × that window: the bucket depth where burst_s is whole, else a burst up to "
                    "half a second's units more or less, the contracted rate kept), not a bucket refilled "
                    "continuously; counters are per Kong node (strategy local)",
                    "set strategy: cluster or redis for a shared count",
                ),
                weights=(
                    "partly",
                    "Prompt and output costs; Kong's cost has no cached-token term, so cached tokens are charged as "
                    "prompt tokens (weight 1 instead of the tier's cached weight) and cache-heavy tenants hit their "
                    "limit early",
                ),
                priority=(
                    "yes",
                    "Each consumer's request-transformer removes a client's priority and adds its tier's (as a JSON "
                    "string, which vLLM and SGLang read as the integer)",
                ),
                salt=(
                    "yes",
                    "Each consumer's request-transformer removes a client's cache_salt and adds the tenant's",
                ),
                concurrency=("no", "Not expressible with these plugins"),
                fairness=("no", "Kong admits or rejects; no per-tenant queues"),
                admission=(
                    "no",
                    "Charging happens after the response (Kong's known limitation: a cost counts from the next "
                    "request): one request may overshoot, and nothing is reserved at admission",
                ),
                retry_after=("partly", "Kong sends Retry-After from its window, not by the policy's rule"),
                kv_cap=("no", "Not expressible"),
                max_context=("no", "Not enforced; ai-proxy's max_tokens is only a default"),
                routing=(
                    "no",
                    "A tenant calls its pool's path (/pools/<pool>/v1/chat/completions): Kong routes before it "
                    "authenticates, so it cannot pick the pool from the consumer, nor by the prompt's size; the acl "
                    "plugin keeps tenants out of other pools",
                ),
                identity=(
                    "partly",
                    "Consumers, their acl groups and their tiers (consumer tags: Debian's decK 1.4.0, which validates "
                    "this file, predates consumer groups) are written; their credentials are not",
                    "give each consumer a key-auth credential (consumers[].keyauth_credentials)",
                ),
                lora=(
                    "no",
                    "ai-proxy pins each route's model to its pool's base model, so a request cannot name an adapter",
                    "add a route per adapter (its model.name the adapter's)",
                ),
                files=(
                    "partly",
                    "Kong Gateway Enterprise only: ai-rate-limiting-advanced is an Enterprise plugin, so a sync to "
                    "Kong OSS fails",
                    "generate with --kong-edition oss for what Kong OSS can hold",
                ),
            ),
            variants={
                "kong_edition": {
                    "oss": _changes(
                        rate=(
                            "no",
                            "Kong OSS has no token or cost rate limiting (ai-rate-limiting-advanced is "
                            "Enterprise-only), so the tenants' units are not limited: the token bucket and its depth "
                            "are lost; the OSS rate-limiting plugin counts requests per fixed window instead, which "
                            "stops floods of tiny requests and never binds before the units would; counters are per "
                            "Kong node (policy local)",
                            "set policy: redis (or cluster) for a shared count; Kong Gateway Enterprise "
                            "(--kong-edition enterprise) limits units",
                        ),
                        weights=(
                            "no",
                            "Lost with the units: prompt, cached prompt, output (W) and prompt length are not counted",
                        ),
                        files=("yes", "kong.yaml for Kong OSS: every plugin it names ships with Kong OSS"),
                    )
                }
            },
        ),
        Target(
            name="litellm",
            module="quotacalc.exporters.litellm",
            summary="LiteLLM proxy config with quotacalc's plugin (units, leases, caps, fair queueing), teams and keys",
            files="litellm/config.yaml, teams.json, keys.json, quotacalc_enforce.py, enforce.json, policy.json, salts.json",
            salts=True,
            salting="quotacalc's plugin replaces the client's cache_salt with the tenant's (salts.json, owner-only)",
            prechecks="quotacalc.exporters.litellm:prechecks",
            options=(
                TargetOption(
                    "litellm_enforce",
                    "litellm: plugin (quotacalc's plugin enforces the whole policy; docs/enforce.md) or builtin "
                    "(LiteLLM's own budgets, tpm and priority reservation; LIMITS.md lists what is lost)",
                    default="plugin",
                    choices=("plugin", "builtin"),
                ),
                TargetOption(
                    "litellm_tokenizer",
                    "litellm: the tokenizer the proxy counts with where it counts tokens itself (a prompt at "
                    "admission; a stream that ended without the engine's usage): local (a Hugging Face tokenizer from "
                    "the host's cache only, HF_HUB_OFFLINE, else tiktoken) or tiktoken (always); neither downloads "
                    "while the proxy serves, which offline stalls every request for about 23 s (docs/enforce.md)",
                    default="local",
                    choices=("local", "tiktoken"),
                ),
                TargetOption(
                    "litellm_deployments",
                    "litellm: replica (a deployment per replica, at the address the pool's replica_url or "
                    "replica_urls gives, else a StatefulSet's pod http://<pool>-<i>.<pool>:8000/v1: the plugin pins "
                    "each request to the replica it placed it on, so the resident-KV cap holds on each) or pool (a "
                    "deployment per pool, at its Service http://<pool>:8000/v1, which picks the replica: the cap is "
                    "approximated)",
                    default="replica",
                    choices=("replica", "pool"),
                ),
            ),
            # With the plugin (docs/enforce.md); ``variants`` has LiteLLM's own limiters (--litellm-enforce builtin).
            enforces=_caps(
                rate=(
                    "yes",
                    "quotacalc's plugin: a bucket in units refilled continuously, 429 with Retry-After; its state is "
                    "in the proxy's memory by default (one proxy)",
                    "several proxies share buckets, caps and the fair queue's in-flight bound only with state: redis "
                    "in enforce.json",
                ),
                weights=(
                    "yes",
                    "Prompt (with its length charge), cached prompt and output tokens; a prompt is counted at "
                    "admission with the engine model's Hugging Face tokenizer where it is in the proxy host's cache "
                    "(--litellm-tokenizer local; never downloaded), else with tiktoken, which may differ from the "
                    "engine's count; the engine's usage settles the real count",
                    "put the model's tokenizer in the proxy host's Hugging Face cache (docs/enforce.md, the tokenizer)",
                ),
                priority=("yes", "The plugin replaces the client's priority with the tier's"),
                salt=("yes", "The plugin replaces the client's cache_salt with the tenant's"),
                concurrency=(
                    "yes",
                    "The plugin's per-tenant cap (requests wait in the fair queue), counted over every proxy with "
                    "state: redis",
                ),
                fairness=("yes", "The plugin's Virtual Token Counter over served units"),
                admission=(
                    "yes",
                    "The plugin holds the policy's output reservation and leases it: a streamed response is stopped "
                    "at a lease boundary; a response not streamed has its whole output leased at admission "
                    "(max_tokens capped at what the bucket holds)",
                ),
                retry_after=("yes", "The plugin's 429 carries the policy's Retry-After"),
                kv_cap=(
                    "yes",
                    "Per replica: config.yaml has a deployment per replica (model_info.id <pool>-<i>) and "
                    "enforce.json's replica_deployments names them; the plugin places each request on a replica with "
                    "room under the tenant's cap and pins it to that replica's deployment",
                ),
                max_context=(
                    "yes",
                    "The plugin refuses a prompt that leaves no room in the tier's context (400) and caps max_tokens "
                    "at the tier's output cap",
                ),
                routing=(
                    "yes",
                    "The plugin sends a prompt above the tenant's route_above_prompt_tokens to its long-context pool",
                ),
                identity=(
                    "yes",
                    "The plugin takes the tenant from the authenticated LiteLLM key (its or its team's metadata), "
                    "never the body; teams and keys (teams.json, keys.json) need LiteLLM's database (Postgres)",
                    "without the database, authenticate keys with LiteLLM's general_settings.custom_auth (a "
                    "UserAPIKeyAuth naming the key's team or metadata tenant), or set tenant_from: header in "
                    "enforce.json and let a trusted layer in front set the policy's tenant header",
                ),
                lora=(
                    "no",
                    "model_list holds each pool's base model only",
                    "add a model_list entry per adapter (hosted_vllm/<adapter>)",
                ),
                files=("yes", "config.yaml loads the plugin, its settings, the policy and the salts beside it"),
            ),
            # In this order: the builtin limiters' kv_cap (none) wins over either layout's.
            variants={
                "litellm_deployments": {
                    "pool": _changes(
                        kv_cap=(
                            "partly",
                            "Per replica over the pool only: a pool is one deployment at its Service, which picks "
                            "the replica, so the tenant's KV stays within the cap times the replicas and no request "
                            "is above one replica's cap, but one replica may hold more than the cap while another "
                            "holds less",
                            "--litellm-deployments replica (each replica addressable: a StatefulSet, or the pool's "
                            "replica_url or replica_urls in the plan)",
                        ),
                    ),
                },
                "litellm_enforce": {
                    "builtin": _changes(
                        rate=(
                            "partly",
                            "A tenant's limit is a USD budget (max_budget) reset on LiteLLM's schedule and a raw-token "
                            "tpm_limit; neither refills continuously; rpm and rpm_limit are not set: the policy prices "
                            "tokens, not requests",
                            "--litellm-enforce plugin",
                        ),
                        weights=(
                            "partly",
                            "tpm and tpm_limit count raw tokens, not units: an output-heavy load can use up to W times "
                            "its units before they bind; only max_budget (USD) carries the weights, and a deployment "
                            "has one cache_read_input_token_cost, set from the highest cached weight of the tiers on "
                            "its pool, so tiers with a lower weight are overcharged",
                            "--litellm-enforce plugin",
                        ),
                        priority=(
                            "partly",
                            "priority_reservation (dynamic_rate_limiter_v3) is enforced without a LiteLLM licence: a "
                            "tier named in it takes its share from the normalised weights "
                            "(_normalize_priority_weights), which no licence gates; LiteLLM still logs 'PREMIUM "
                            "FEATURE' for each such request (_get_priority_weight, evaluated as a fallback), which "
                            "changes nothing. The engine's priority is not sent per tenant (a deployment's extra_body "
                            "is the same for every tenant)",
                        ),
                        salt=(
                            "no",
                            "LiteLLM has no per-tenant cache_salt injection; salted tenants share the prefix cache "
                            "through it",
                            "--litellm-enforce plugin",
                        ),
                        concurrency=("yes", "Each tenant's key carries max_parallel_requests"),
                        fairness=(
                            "no",
                            "LiteLLM has no per-tenant queues: priority_reservation shares a model between tiers, not "
                            "between a tier's tenants",
                            "--litellm-enforce plugin",
                        ),
                        admission=(
                            "no",
                            "The policy's output reservation and leases are the plugin's; LiteLLM's limiters hold none "
                            "of them",
                            "--litellm-enforce plugin",
                        ),
                        retry_after=("no", "LiteLLM's 429 does not follow the policy's rule"),
                        kv_cap=("no", "Not expressible", "--litellm-enforce plugin"),
                        max_context=(
                            "partly",
                            "Each tier's max context and output reservation cap are not enforced; each deployment's "
                            "max_input_tokens (its engine's max-model-len) is, as router_settings.enable_pre_call_checks "
                            "is set: a longer prompt is refused (ContextWindowExceededError) before it reaches the "
                            "engine",
                        ),
                        routing=(
                            "no",
                            "Clients name the pool as the model (model names are the pool names); LiteLLM does not "
                            "route by prompt size",
                        ),
                        identity=(
                            "partly",
                            "Budgets, teams and keys need LiteLLM's database (Postgres); without it only the "
                            "deployments' tpm is enforced",
                        ),
                        lora=(
                            "no",
                            "model_list holds each pool's base model only and teams may call only their pools, so a "
                            "request cannot name an adapter",
                            "add a model_list entry per adapter (hosted_vllm/<adapter>) and it to the team's models",
                        ),
                        files=("yes", "config.yaml, and teams.json and keys.json to POST to LiteLLM's API"),
                    )
                },
            },
        ),
        Target(
            name="vllm",
            module="quotacalc.exporters.vllm",
            summary="vllm serve --config files per pool: context, batch, KV dtype, prefix caching, priority scheduling",
            files="vllm/<pool>.yaml",
            salts=False,
            salting="takes cache_salt from the request: the gateway sets it",
            enforces=_caps(
                rate=("no", _NO_TENANTS),
                weights=("no", _NO_TENANTS),
                priority=(
                    "partly",
                    "vLLM schedules by the request's priority, which the gateway must set (vLLM trusts whatever the "
                    "request body says)",
                ),
                salt=(
                    "partly",
                    "vLLM hashes the request's cache_salt into its first block, which the gateway must set (vLLM "
                    "trusts whatever the request body says)",
                ),
                concurrency=("no", _NO_TENANTS),
                fairness=(
                    "no",
                    "vLLM orders by priority then arrival (or fcfs); a tenant's share is kept only by the gateway's "
                    "fair queueing",
                ),
                admission=("no", _NO_TENANTS),
                retry_after=("no", _NO_TENANTS),
                kv_cap=("no", _NO_TENANTS),
                max_context=(
                    "partly",
                    "The engine enforces its pool's max-model-len for every tenant, not each tier's max context",
                ),
                routing=("no", "One file per pool: the gateway sends long prompts to the long-context pool"),
                identity=("no", _NO_TENANTS),
                lora=("no", _ENGINE_LORA, "add enable-lora and lora-modules with the adapters' paths"),
                files=("yes", "A vllm serve --config file per pool priced as vLLM"),
            ),
        ),
        Target(
            name="sglang",
            module="quotacalc.exporters.sglang",
            summary="SGLang server config files per pool, with priority scheduling",
            files="sglang/<pool>.yaml",
            salts=False,
            salting="takes cache_salt from the request: the gateway sets it",
            enforces=_caps(
                rate=("no", _NO_TENANTS),
                weights=("no", _NO_TENANTS),
                priority=(
                    "partly",
                    "SGLang schedules by the request's priority (an OpenAI-compatible body field), which the gateway "
                    "must set; a request that reaches the engine without one ranks with the least urgent tier "
                    "(default-priority-value)",
                ),
                salt=(
                    "partly",
                    "SGLang keys its prefix cache by the request's cache_salt (an OpenAI-compatible body field), which "
                    "the gateway must set",
                ),
                concurrency=("no", _NO_TENANTS),
                fairness=(
                    "no",
                    "SGLang orders by priority then arrival; a tenant's share is kept only by the gateway's fair "
                    "queueing",
                ),
                admission=("no", _NO_TENANTS),
                retry_after=("no", _NO_TENANTS),
                kv_cap=("no", _NO_TENANTS),
                max_context=(
                    "partly",
                    "The engine enforces its pool's context-length for every tenant, not each tier's max context",
                ),
                routing=("no", "One file per pool: the gateway sends long prompts to the long-context pool"),
                identity=("no", _NO_TENANTS),
                lora=("no", _ENGINE_LORA, "add enable-lora and lora-paths with the adapters' paths"),
                files=("yes", "An SGLang server config file per pool priced as SGLang"),
            ),
        ),
        Target(
            name="gie",
            module="quotacalc.exporters.gie",
            summary="Gateway API Inference Extension InferencePools (v1); no endpoint picker config",
            files="gie/inferencepools.yaml (and inferenceobjectives.yaml)",
            salts=False,
            salting=_NO_SALT,
            options=(
                TargetOption(
                    "gie_objectives",
                    "gie: also emit InferenceObjective (v1alpha2) per tier, for releases that still ship it",
                ),
            ),
            enforces=_caps(
                rate=(
                    "no",
                    "None: the Inference Extension's flow control queues requests instead of rejecting them",
                    _GATEWAY_FIX,
                ),
                weights=(
                    "no",
                    "None here; an endpoint picker's fairness does not use them either (llm-d's program-aware "
                    "fairness weighs output at a fixed 2x input, not the pool's W, and has no cached-prompt weight)",
                ),
                priority=("partly", "Only with --gie-objectives, on releases that still ship InferenceObjective"),
                salt=("no", "Not injected", "the gateway in front must set cache_salt"),
                concurrency=("no", "Not expressible"),
                fairness=(
                    "no",
                    "Not here: the endpoint picker's config decides it (the llm-d target writes one with per-tenant "
                    "fairness)",
                ),
                admission=("no", "No quota is charged here, so nothing is reserved", _GATEWAY_FIX),
                retry_after=("no", "No quota is charged here", _GATEWAY_FIX),
                kv_cap=("no", "Not expressible"),
                max_context=("no", "Not expressible in an InferencePool; the engine's max-model-len is the only bound"),
                routing=(
                    "no",
                    "Long-context routing by prompt size: not expressible in an InferencePool",
                    "route to each pool from an HTTPRoute or AIGatewayRoute",
                ),
                identity=(
                    "partly",
                    "Tenant identity reaches flow control only through the x-gateway-inference-fairness-id header",
                    "the gateway must set it from the tenant header",
                ),
                lora=("no", "Not here: an engine loads adapters (the vllm and sglang targets say how)"),
                files=(
                    "no",
                    "No endpoint picker is generated; without one, no request reaches these pools through the gateway",
                    "deploy an endpoint picker per pool, such as llm-d's router (its inferencepool Helm chart), with "
                    "its EndpointPickerConfig (the llm-d target writes one with flow control and per-tenant fairness)",
                ),
            ),
            variants={
                "gie_objectives": {
                    False: _changes(
                        priority=(
                            "no",
                            "Priority tiers: not emitted; InferenceObjective was removed from the Inference "
                            "Extension's main branch in 2026",
                            "ask for --gie-objectives where your release still ships v1alpha2",
                        )
                    ),
                    True: _changes(
                        priority=(
                            "partly",
                            "An InferenceObjective (v1alpha2) per tier, picked by the x-gateway-inference-objective "
                            "header, which the gateway must set from the tenant's tier; InferenceObjective was removed "
                            "from the Inference Extension's main branch in 2026 (pull request 2973) and now lives in "
                            "llm-d: these objectives need a release that still ships it",
                        )
                    ),
                }
            },
        ),
        Target(
            name="llm-d",
            module="quotacalc.exporters.llm_d",
            summary="llm-d router: InferenceObjectives per tier, endpoint picker flow control with per-tenant fairness",
            files="llm-d/inferenceobjectives.yaml, endpointpickerconfig.yaml, gateway-headers.yaml",
            salts=False,
            salting=_NO_SALT,
            enforces=_caps(
                rate=(
                    "no",
                    "Token quotas: none. llm-d's flow control queues requests and sheds them (429) when a band is full "
                    "or a request waits past its TTL; it counts no tokens and no units",
                    _GATEWAY_FIX,
                ),
                weights=(
                    "no",
                    "None: round-robin-fairness-policy gives each tenant with queued requests one dispatch per turn, "
                    "whatever the request's size or the tenant's contracted rate: a tenant of long requests gets more "
                    "work per turn, and unit weights (prompt, cached prompt, output) do not enter. llm-d's "
                    "program-aware-fairness counts tokens instead, but at its own fixed weights (output 2x input, "
                    "strategy_las.go), not the pool's W",
                ),
                priority=(
                    "yes",
                    "A flow-control band per tier, chosen by the objective header the gateway sets; the engine's "
                    "priority is not set here: the gateway in front sets priority in the request body",
                ),
                salt=("no", "Not set: the gateway in front sets cache_salt in the request body"),
                concurrency=(
                    "no",
                    "Not expressible: a band's maxRequests bounds a whole tier (it is left at llm-d's default)",
                ),
                fairness=(
                    "partly",
                    "Round robin between a tier's tenants, by turns, not units, and only per endpoint-picker replica: "
                    "each replica queues and round-robins its own requests, so with several replicas of a pool's "
                    "picker a tenant's share is kept within each, not across them. Only between tenants of one tier: "
                    "bands are strict, a higher tier's queued request always dispatches first, so a lower tier can "
                    "wait until its requests are shed at the TTL",
                ),
                admission=("no", "No quota is charged here, so nothing is reserved", _GATEWAY_FIX),
                retry_after=("no", "A 429 here sheds a full band or a request past its TTL; no bucket", _GATEWAY_FIX),
                kv_cap=("no", "Not expressible"),
                max_context=("no", "Not expressible here; the engine's max-model-len is the only bound"),
                routing=(
                    "no",
                    "Long-context routing by prompt size: not expressible here",
                    "route to each pool from an HTTPRoute or AIGatewayRoute",
                ),
                identity=(
                    "partly",
                    "The headers are trusted as sent; the tenant header itself must come from authentication",
                    "the gateway removes the headers from every client request and sets them per tenant "
                    "(gateway-headers.yaml)",
                ),
                lora=("no", "Not here: an engine loads adapters (the vllm and sglang targets say how)"),
                files=(
                    "partly",
                    "InferencePools and the pickers' Deployments are not written",
                    "the gie target writes the InferencePools, and llm-d's charts deploy a picker per pool with this "
                    "config",
                ),
            ),
        ),
    )
}


def names() -> list[str]:
    """The declared targets, in ``generate``'s order."""
    return list(TARGETS)


def get(name: str) -> Target:
    """A declared target (KeyError for a name never declared)."""
    return TARGETS[name]


def options() -> dict[str, tuple[Target, TargetOption]]:
    """Every declared option by name, with the target that declares it (a name is declared once)."""
    found: dict[str, tuple[Target, TargetOption]] = {}
    for target in TARGETS.values():
        for option in target.options:
            if option.name in found:
                raise ValueError(f"option {option.name} is declared by {found[option.name][0].name} and {target.name}")
            found[option.name] = (target, option)
    return found


def option_default(name: str) -> bool | str:
    """A declared option's default; AttributeError for a name no target declares (so ``getattr`` fails as usual)."""
    declared = options().get(name)
    if declared is None:
        raise AttributeError(f"no target declares an option {name!r}")
    return declared[1].default


def option_problem(name: str, value: object) -> str | None:
    """Why ``value`` is not a value of option ``name`` (None when it is)."""
    declared = options().get(name)
    if declared is None:
        return f"no target declares an option {name!r} (declared: {', '.join(options()) or 'none'})"
    option = declared[1]
    if option.choices is None:
        return None if isinstance(value, bool) else f"{option.flag} is a switch, got {value!r}"
    if value not in option.choices:
        return f"{option.flag} takes one of {', '.join(option.choices)}, got {value!r}"
    return None
