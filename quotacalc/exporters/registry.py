"""Every config target, declared once: its name, module, options, salting, pre-checks and what it enforces.

``generate``'s ``--target`` choices and help, the target options' flags (``--gie-objectives``, ...), which targets
need the salt secret, ``check``'s per-target findings and ``quotacalc targets``'s table are all read from
``TARGETS`` below; nothing else lists the targets.

Adding a target touches exactly these files:

1. ``quotacalc/exporters/<name>.py``: ``export(policy, salts, options) -> Export`` (pure, see ``base.py``), and,
   where ``generate`` would refuse a plan, ``prechecks(policy) -> list[Finding]`` so ``check`` says so first;
2. one ``Target(...)`` entry in ``TARGETS`` here (options, salting, pre-checks, capabilities);
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
from dataclasses import dataclass
from typing import Literal

Support = Literal["yes", "partly", "no"]

#: What a target may enforce of the policy, in the order ``quotacalc targets`` shows them.
CAPABILITIES: dict[str, str] = {
    "rate": "each tenant's rate and burst in units (the policy's token bucket)",
    "weights": "the unit weights: prompt, cached prompt and output tokens charged apart",
    "priority": "the tiers' priority, set by the platform and not by the client",
    "salt": "each tenant's cache salt, set by the platform and not by the client",
    "concurrency": "concurrent sequences per tenant",
    "fairness": "fair queueing between the tenants of one priority",
}


@dataclass(frozen=True)
class Capability:
    """How far a target enforces one of ``CAPABILITIES``, and in one line how (or why not)."""

    support: Support
    how: str


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


@dataclass(frozen=True)
class Target:
    """One config target.

    ``salts``: whether its files carry the tenants' cache salts (then ``generate`` needs the salt secret for a plan
    with salted tenants); ``salting`` says in a few words how the salt reaches the engine. ``prechecks``:
    ``"module:function"``, a function of the policy returning ``check`` findings (``core.checks.Finding``) about what
    this target would refuse or lose. ``enforces``: one ``Capability`` per key of ``CAPABILITIES``.
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


def _caps(**given: tuple[Support, str]) -> dict[str, Capability]:
    """Every capability, in ``CAPABILITIES``'s order; one not given is ``no``."""
    unknown = set(given) - set(CAPABILITIES)
    if unknown:
        raise ValueError(f"unknown capabilities {sorted(unknown)}: known are {list(CAPABILITIES)}")
    return {name: Capability(*given.get(name, ("no", "not expressible"))) for name in CAPABILITIES}


_NO_SALT = "none: the gateway in front must set cache_salt"

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
                rate=("yes", "the policy itself: bucket rate and depth per tenant"),
                weights=("yes", "per pool and tier"),
                priority=("yes", "per tier"),
                salt=("yes", "salts.json by salt_ref"),
                concurrency=("yes", "max_concurrent_sequences per tenant"),
                fairness=("yes", "stated for an enforcer to apply"),
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
                rate=("partly", "fixed windows of units, charged after the response"),
                weights=("yes", "a CEL cost per tenant over prompt, cached and output tokens"),
                priority=("yes", "bodyMutation sets the tier's priority on priority-scheduling pools"),
                salt=("yes", "bodyMutation"),
            ),
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
                rate=("partly", "sliding windows of cost, charged after the response"),
                weights=("partly", "prompt and output costs; no cached-token term"),
                priority=("yes", "request-transformer replaces the client's priority with the tier's"),
                salt=("yes", "request-transformer replaces the client's cache_salt with the tenant's"),
            ),
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
            ),
            enforces=_caps(
                rate=("yes", "quotacalc's plugin: a bucket in units refilled continuously, 429 with Retry-After"),
                weights=("yes", "prompt (with its length charge), cached prompt and output tokens"),
                priority=("yes", "the plugin replaces the client's priority with the tier's"),
                salt=("yes", "the plugin replaces the client's cache_salt with the tenant's"),
                concurrency=("yes", "the plugin's per-tenant cap (requests wait in the fair queue)"),
                fairness=("yes", "the plugin's Virtual Token Counter over served units"),
            ),
        ),
        Target(
            name="vllm",
            module="quotacalc.exporters.vllm",
            summary="vllm serve --config files per pool: context, batch, KV dtype, prefix caching, priority scheduling",
            files="vllm/<pool>.yaml",
            salts=False,
            salting="takes cache_salt from the request: the gateway sets it",
            enforces=_caps(
                priority=("partly", "schedules by the request's priority, which the gateway must set"),
                salt=("partly", "hashes the request's cache_salt, which the gateway must set"),
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
                priority=("partly", "schedules by the request's priority, which the gateway must set"),
                salt=("partly", "hashes the request's cache_salt, which the gateway must set"),
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
                priority=("partly", "only with --gie-objectives, on releases that still ship InferenceObjective"),
            ),
        ),
        Target(
            name="llm-d",
            module="quotacalc.exporters.llm_d",
            summary="llm-d router: InferenceObjectives per tier, endpoint picker flow control with per-tenant fairness",
            files="llm-d/inferenceobjectives.yaml, endpointpickerconfig.yaml, gateway-headers.yaml",
            salts=False,
            salting=_NO_SALT,
            enforces=_caps(
                priority=("yes", "a flow-control band per tier, chosen by the objective header the gateway sets"),
                fairness=("partly", "round robin between a tier's tenants, per picker replica, by turns not units"),
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
