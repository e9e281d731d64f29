"""LiteLLM proxy: a ``config.yaml`` whose per-token costs express units in USD, plus team and key payloads.

Each replica of a pool is one deployment (``--litellm-deployments replica``, the default: model name the pool's, so
a request naming the pool is balanced over them, and ``model_info.id`` ``<pool>-<i>``, which the plugin pins a
placed request to), or each pool is one, reached through its Service (``--litellm-deployments pool``). Every
deployment is priced so that a unit costs what the pool
costs per unit sold at its ceiling: ``usd_per_unit = usd_per_month / (capacity_units_per_s x 720 h)``; so
``input_cost_per_token`` is the prompt weight times that, ``output_cost_per_token`` W times it. Spend in USD is
then units, and a tenant's ``max_budget`` is its contracted units over ``budget_duration``. Without a
database LiteLLM enforces only per-deployment ``tpm`` (``enforce_model_rate_limits``); budgets, keys and
teams need its Postgres, so their payloads are written for its API (``/team/new``, ``/key/generate``).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from decimal import ROUND_FLOOR, Context, Decimal

from quotacalc.core.plan import fill_replica_url
from quotacalc.core.policy import PoolPolicy, QuotaPolicy, TenantPolicy
from quotacalc.errors import QuotacalcError
from quotacalc.exporters._text import (
    json_text,
    load_pool_by_tenant,
    long_context_lines,
    lora_lines,
    prompt_length_lines,
    unsent_priority_effect,
    yaml_text,
)
from quotacalc.exporters.base import ENGINE_PORT, Export, ExportOptions, GeneratedFile

#: Hours in the month of the method's $/month figures (docs/method.md §6: 720 h): used only for a
#: hand-built policy whose pools do not carry their price per unit.
SECONDS_PER_MONTH = 720 * 3600
#: The window a tenant's USD budget resets over (LiteLLM's duration syntax) and its length.
BUDGET_DURATION = "1h"
BUDGET_DURATION_S = 3600
#: How config.yaml reaches a pool's replicas (``--litellm-deployments``): one deployment a replica, at the address the
#: plan gives it (else the StatefulSet default); or one a pool, at the pool's Service, which balances its replicas.
DEPLOYMENTS_REPLICA = "replica"
DEPLOYMENTS_POOL = "pool"
#: Where each replica serves unless the plan says (core.plan.DEFAULT_REPLICA_URL, on ENGINE_PORT): a StatefulSet named
#: after the pool behind a headless Service of the same name gives pod i the DNS name ``<pool>-<i>.<pool>``.
DEFAULT_REPLICA_URL = f"http://{{pool}}-{{replica}}.{{pool}}:{ENGINE_PORT}/v1"


def usd_per_unit(pool: PoolPolicy) -> float:
    """What one unit costs when the pool sells its whole capacity: the policy's own figure (priced with the
    deployment's hours per month), else $/month over units in a 720-hour month."""
    if pool.usd_per_unit is not None:
        return pool.usd_per_unit
    return pool.usd_per_month / (pool.capacity_units_per_s * SECONDS_PER_MONTH)


def _cached_weight(policy: QuotaPolicy, pool: PoolPolicy) -> float:
    """The highest cached-prompt weight of the tenants a pool serves (a deployment has one price)."""
    weights = [t.weights.cached_prompt for t in policy.tenants if t.pool == pool.name]
    weights += [
        t.long_context_weights.cached_prompt
        for t in policy.tenants
        if t.long_context_pool == pool.name and t.long_context_weights
    ]
    return max(weights, default=1.0)


def replica_base_urls(pool: PoolPolicy) -> tuple[str, ...]:
    """Each replica's base URL: the plan's (``replica_url`` or ``replica_urls``), else ``DEFAULT_REPLICA_URL``."""
    if pool.replica_urls is not None:
        return pool.replica_urls
    return tuple(fill_replica_url(DEFAULT_REPLICA_URL, pool.name, index) for index in range(pool.replicas))


def replica_deployment_ids(pool: PoolPolicy) -> list[str]:
    """The ``model_info.id`` of each replica's deployment, in the replicas' order: ``<pool>-<i>``, a StatefulSet's pod
    names. Distinct across pools (``P-i == Q-j`` with ``P != Q`` would put a ``-`` in an index), but equal to a
    pool's name where one pool is named like another's pod (``std`` and ``std-0``): ``deployment_id_clash``."""
    return [f"{pool.name}-{index}" for index in range(pool.replicas)]


def deployment_id_clash(policy: QuotaPolicy) -> tuple[str, str] | None:
    """``(pool, id)`` where a replica deployment's id is another pool's name (LiteLLM's router would take a request
    pinned to that replica for a request to that pool); else None."""
    names = {pool.name for pool in policy.pools}
    for pool in policy.pools:
        for deployment_id in replica_deployment_ids(pool):
            if deployment_id in names:
                return pool.name, deployment_id
    return None


def _clash_problem(pool: str, deployment_id: str) -> tuple[str, str]:
    """``(problem, fix)`` of ``deployment_id_clash``'s answer."""
    return (
        f"pool {pool}'s replica {deployment_id.rsplit('-', 1)[1]} would be deployment '{deployment_id}', which is also "
        f"a pool's name, so LiteLLM would route a request pinned to that replica to pool {deployment_id}",
        "rename that pool (not <pool>-<number> of another pool), or generate with --litellm-deployments pool",
    )


def _deployments(policy: QuotaPolicy, pool: PoolPolicy, deployments: str) -> list[dict]:
    """The pool's model_list entries: one at its Service, or one a replica. Every figure LiteLLM reads per deployment
    is per replica there: ``tpm`` is the pool's split so that the replicas' sum is the pool's (LiteLLM sums a model
    group's tpm for its priority reservation, and ``enforce_model_rate_limits`` checks each deployment's own);
    prices are per token and ``max_input_tokens`` is each engine's own, the same on every replica."""
    unit = usd_per_unit(pool)

    def deployment(api_base: str, deployment_id: str, tpm: int) -> dict:
        return {
            "model_name": pool.name,
            "litellm_params": {
                "model": f"hosted_vllm/{pool.engine.served_model_name}",
                "api_base": api_base,
                "api_key": "os.environ/VLLM_API_KEY",
                "tpm": tpm,
                "input_cost_per_token": float(f"{unit:.6e}"),
                "output_cost_per_token": float(f"{unit * pool.output_weight:.6e}"),
                "cache_read_input_token_cost": float(f"{unit * _cached_weight(policy, pool):.6e}"),
            },
            "model_info": {"id": deployment_id, "max_input_tokens": pool.engine.max_model_len},
        }

    if deployments == DEPLOYMENTS_POOL:
        return [deployment(f"http://{pool.name}:{ENGINE_PORT}/v1", pool.name, _pool_tpm(pool))]
    return [
        deployment(api_base, deployment_id, tpm)
        for api_base, deployment_id, tpm in zip(
            replica_base_urls(pool), replica_deployment_ids(pool), replica_tpms(pool), strict=True
        )
    ]


def _model_list(policy: QuotaPolicy, deployments: str) -> list[dict]:
    return [entry for pool in policy.pools for entry in _deployments(policy, pool, deployments)]


#: Shares are written in ten-thousandths (4 decimals).
SHARE_STEPS = 10_000


def _pool_tpm(pool: PoolPolicy) -> int:
    """The pool's ``tpm``: raw tokens per minute, so a prompt-only load reaches the pool's capacity exactly."""
    return math.floor(pool.capacity_units_per_s * 60)


def replica_tpms(pool: PoolPolicy) -> list[int]:
    """Each replica deployment's ``tpm``: the pool's, split as evenly as whole tokens allow (the first replicas take
    the remainder's tokens), so that they sum to the pool's exactly."""
    total = _pool_tpm(pool)
    share, remainder = divmod(total, pool.replicas)
    return [share + (1 if index < remainder else 0) for index in range(pool.replicas)]


def _least_share_steps(policy: QuotaPolicy, tiers: int) -> int:
    """The smallest share, in ten-thousandths, a tier with tenants is given: dynamic_rate_limiter_v3 reserves a tier
    ``int(model tpm x share)`` tokens a minute (``_create_priority_based_descriptors``; the model's tpm is its
    group's, the sum over a pool's deployments), so a share must leave every pool at least one; no more than
    ``tiers`` such shares can hold (they sum to at most 1)."""
    smallest_tpm = min((_pool_tpm(pool) for pool in policy.pools), default=SHARE_STEPS)
    return min(max(1, math.ceil(SHARE_STEPS / max(smallest_tpm, 1))), SHARE_STEPS // max(tiers, 1))


def _reservation(policy: QuotaPolicy, pool: str | None) -> tuple[dict[str, float], dict[str, float]]:
    """(shares, raised): each tier's share of the units sold, and the exact share of each tier whose share was
    raised so that LiteLLM reserves it something (see ``priority_reservation``)."""
    load_pools = load_pool_by_tenant(policy)
    tenants = [tenant for tenant in policy.tenants if pool is None or load_pools[tenant.name] == pool]
    sold = sum(tenant.bucket_rate_units_per_s for tenant in tenants)
    exact: dict[str, float] = {}
    for tier in sorted(policy.tiers, key=lambda tier: (tier.priority, tier.name)):
        units = sum(t.bucket_rate_units_per_s for t in tenants if t.tier == tier.name)
        if units > 0:
            exact[tier.name] = units / sold
    least = _least_share_steps(policy, len(exact))
    steps = {tier: round(share * SHARE_STEPS) for tier, share in exact.items()}
    raised = {tier: exact[tier] for tier, step in steps.items() if step < least}
    for tier in raised:
        steps[tier] = least
    # Rounding, or a raised share, can take the sum past 1 (LiteLLM would then scale every share down):
    # the excess comes off the largest shares, which it changes least.
    excess = sum(steps.values()) - SHARE_STEPS
    for tier in sorted(steps, key=lambda tier: (-steps[tier], tier)):
        if excess <= 0:
            break
        taken = min(excess, steps[tier] - least)
        steps[tier] -= taken
        excess -= taken
    return {tier: step / SHARE_STEPS for tier, step in steps.items()}, raised


def priority_reservation(policy: QuotaPolicy, pool: str | None = None) -> dict[str, float]:
    """Each tier's share of the units sold (on ``pool``, or on every pool), in priority order (LiteLLM reserves
    capacity by these shares). A pool's shares count the load it carries: a tenant sized on traffic whose mean
    prompt routes to its long-context pool (``TenantPolicy.load_pool``) counts there, not on its standard
    pool (``core.plan_size.load_pool_of``, as check and size count it).

    Shares are rounded to 4 decimals and sum to at most 1; a tier with tenants never gets 0 (LiteLLM would reserve
    it ``int(tpm x 0) = 0`` tokens, refusing its every request once the model saturates): its share is raised to
    the least that reserves every deployment a token a minute, taken from the largest shares."""
    return _reservation(policy, pool)[0]


def _reservation_lines(policy: QuotaPolicy) -> list[str]:
    """Where one pool's tiers hold other shares than the global setting gives them: LiteLLM applies it per model."""
    overall = priority_reservation(policy)
    lines = []
    for pool in policy.pools:
        own = priority_reservation(policy, pool.name)
        if own and any(abs(own.get(tier, 0.0) - overall.get(tier, 0.0)) > 0.05 for tier in {*overall, *own}):
            shown = ", ".join(f"{tier} {share:g}" for tier, share in own.items())
            lines.append(
                f"priority_reservation is one setting, applied to each model's tpm: it holds every pool's shares "
                f"together, and pool '{pool.name}' sells its tiers otherwise ({shown}), so a saturated '{pool.name}' "
                "reserves capacity by the shares of the others."
            )
    return lines


#: How the proxy enforces the policy: quotacalc's plugin, or LiteLLM's own limiters.
ENFORCE_PLUGIN = "plugin"
ENFORCE_BUILTIN = "builtin"
#: The module the generated config loads the plugin from (written next to config.yaml) and its instance.
PLUGIN_MODULE = "quotacalc_enforce"
PLUGIN_CALLBACK = f"{PLUGIN_MODULE}.enforcer"


#: How the proxy's LiteLLM counts the tokens it counts itself (quotacalc.enforce.tokenizer): never by a download.
TOKENIZER_LOCAL = "local"
TOKENIZER_TIKTOKEN = "tiktoken"


def _tokenizer_settings(tokenizer: str) -> dict:
    """config.yaml's part of ``--litellm-tokenizer``, for either enforcement: LiteLLM counts a stream that ended without
    the engine's usage with a Hugging Face tokenizer it would download inside its event loop (about 23 s of retries
    on a host without internet, every request in flight stalled). ``local``: huggingface_hub reads only the host's
    cache (LiteLLM sets ``environment_variables`` before it loads a tokenizer); ``tiktoken``: no Hugging Face
    tokenizer at all."""
    if tokenizer == TOKENIZER_TIKTOKEN:
        return {"litellm_settings": {"disable_hf_tokenizer_download": True}}
    return {"environment_variables": {"HF_HUB_OFFLINE": "1"}}


def config(
    policy: QuotaPolicy,
    enforce: str = ENFORCE_PLUGIN,
    tokenizer: str = TOKENIZER_LOCAL,
    deployments: str = DEPLOYMENTS_REPLICA,
) -> dict:
    """The proxy's config.yaml: with quotacalc's plugin (``quotacalc.enforce.litellm``) enforcing the whole policy, or
    with LiteLLM's own limiters (``builtin``: budgets, tpm and priority reservation, LIMITS.md says what they lose);
    a deployment per replica or per pool as ``deployments`` says."""
    counting = _tokenizer_settings(tokenizer)
    if enforce == ENFORCE_PLUGIN:
        return {
            "model_list": _model_list(policy, deployments),
            # The plugin refuses a prompt over the tier's context itself; the pre-call checks stay as a second guard.
            "router_settings": {"enable_pre_call_checks": True},
            "litellm_settings": {"callbacks": [PLUGIN_CALLBACK], **counting.get("litellm_settings", {})},
            "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"},
            **(
                {"environment_variables": counting["environment_variables"]}
                if "environment_variables" in counting
                else {}
            ),
        }
    return {
        "model_list": _model_list(policy, deployments),
        # enable_pre_call_checks: without it a deployment's max_input_tokens is never compared with a prompt
        # (Router.async_get_healthy_deployments calls Router._pre_call_checks, which raises
        # ContextWindowExceededError, only where it is set; LiteLLM 1.108).
        "router_settings": {
            "enable_pre_call_checks": True,
            "optional_pre_call_checks": ["enforce_model_rate_limits"],
        },
        "litellm_settings": {
            "callbacks": ["dynamic_rate_limiter_v3"],
            "priority_reservation": priority_reservation(policy),
            **counting.get("litellm_settings", {}),
        },
        "general_settings": {"master_key": "os.environ/LITELLM_MASTER_KEY"},
        **({"environment_variables": counting["environment_variables"]} if "environment_variables" in counting else {}),
    }


#: Significant figures a budget keeps (at least; budgets from $0.10 keep every micro-dollar).
BUDGET_FIGURES = 6
#: The fewest tokens a request reserves against a key's tpm_limit in parallel_request_limiter_v3 (1.108): one prompt
#: token and one output token. It refuses a request when the minute's count plus its reservation exceed the limit,
#: so a smaller tpm_limit refuses every request.
LEAST_REQUEST_TOKENS = 2


def budget_usd(units: float, usd_per_unit: float) -> float:
    """A budget of ``units`` in USD, rounded down (never above the contract) to the micro-dollar or to
    ``BUDGET_FIGURES`` significant figures, whichever is finer (the micro-dollar alone cut $0.00000548 to
    $0.000005, 9% short).

    Decimal arithmetic on the product's 12 significant figures, so float noise (15.9524999...) does not cost a
    figure and the JSON shows the same shortest decimal on every machine."""
    usd = Decimal(f"{units * usd_per_unit:.12g}")
    if usd <= 0:
        return 0.0
    quantum = min(Decimal("1e-6"), Decimal(1).scaleb(usd.adjusted() - BUDGET_FIGURES + 1))
    # Digits enough for any float's whole part and its micro-dollars (the default 28 would refuse $10^22).
    return float(usd.quantize(quantum, rounding=ROUND_FLOOR, context=Context(prec=400)))


def tpm_limit(tenant: TenantPolicy) -> int | None:
    """The tenant's raw tokens per minute at its rate, None where that is under ``LEAST_REQUEST_TOKENS`` (a limit
    LiteLLM would enforce by refusing everything: ``max_budget`` is then the tenant's limit)."""
    tokens = math.floor(tenant.bucket_rate_units_per_s * 60)
    return tokens if tokens >= LEAST_REQUEST_TOKENS else None


def _limits_of(policy: QuotaPolicy, tenant: TenantPolicy, load_pool: str) -> dict:
    """A tenant's team and key limits; ``load_pool``: the pool its rate is counted in (its budget is that pool's USD)."""
    pool = next(pool for pool in policy.pools if pool.name == load_pool)
    models = [tenant.pool] + ([tenant.long_context_pool] if tenant.long_context_pool else [])
    limits = {
        "models": models,
        "max_budget": budget_usd(tenant.bucket_rate_units_per_s * BUDGET_DURATION_S, usd_per_unit(pool)),
        "budget_duration": BUDGET_DURATION,
        "tpm_limit": tpm_limit(tenant),
        "max_parallel_requests": tenant.max_concurrent_sequences,
        "metadata": {"priority": tenant.tier, "tenant": tenant.name},
    }
    if limits["tpm_limit"] is None:
        del limits["tpm_limit"]
    return limits


def team_payloads(policy: QuotaPolicy) -> list[dict]:
    """POST /team/new bodies, one team per tenant. A team has no concurrency cap in LiteLLM (NewTeamRequest has no
    max_parallel_requests, and drops it unread): the tenant's one key carries it."""
    load_pools = load_pool_by_tenant(policy)
    teams = []
    for tenant in sorted(policy.tenants, key=lambda t: t.name):
        limits = _limits_of(policy, tenant, load_pools[tenant.name])
        del limits["max_parallel_requests"]
        teams.append({"team_id": tenant.name, "team_alias": tenant.name, **limits})
    return teams


def key_payloads(policy: QuotaPolicy) -> list[dict]:
    """POST /key/generate bodies, one key per tenant in its team (LiteLLM generates the key itself)."""
    load_pools = load_pool_by_tenant(policy)
    return [
        {"key_alias": t.name, "team_id": t.name, **_limits_of(policy, t, load_pools[t.name])}
        for t in sorted(policy.tenants, key=lambda t: t.name)
    ]


_PLUGIN_SOURCE = '''"""Generated by quotacalc: LiteLLM loads the policy's enforcement from here (litellm_settings.callbacks).

quotacalc must be installed with its litellm extra (pip install 'quotacalc[litellm]'); settings: enforce.json.
"""

from pathlib import Path

from quotacalc.enforce.litellm import QuotacalcEnforcer

enforcer = QuotacalcEnforcer(Path(__file__).with_name("enforce.json"))
'''


def plugin_settings(
    tokenizer: str = TOKENIZER_LOCAL, policy: QuotaPolicy | None = None, deployments: str = DEPLOYMENTS_REPLICA
) -> dict:
    """enforce.json: the plugin's settings, each at its documented default (docs/enforce.md) but the tokenizer
    ``--litellm-tokenizer`` chose and, with a deployment a replica, ``replica_deployments``: each pool's replica
    deployment ids, so the plugin pins each request to the replica it placed it on."""
    from quotacalc.enforce.settings import EnforceSettings

    replicas = (
        {pool.name: replica_deployment_ids(pool) for pool in policy.pools}
        if policy is not None and deployments == DEPLOYMENTS_REPLICA
        else {}
    )
    return EnforceSettings(
        policy="policy.json", salts="salts.json", tokenizer=tokenizer, replica_deployments=replicas
    ).model_dump(mode="json")


def export(policy: QuotaPolicy, salts: Mapping[str, str], options: ExportOptions) -> Export:
    """litellm/config.yaml, teams.json and keys.json; with the plugin also its module, enforce.json, the policy and
    (owner-only) the salts it reads, in the canonical target's format."""
    enforce = options.litellm_enforce
    deployments = options.litellm_deployments
    if deployments == DEPLOYMENTS_REPLICA and (clash := deployment_id_clash(policy)) is not None:
        pool, deployment_id = clash
        message, fix = _clash_problem(pool, deployment_id)
        raise QuotacalcError(
            message, field=f"pools[{[other.name for other in policy.pools].index(deployment_id)}].name", fix=fix
        )
    files = [
        GeneratedFile(
            path="litellm/config.yaml",
            text=yaml_text(
                config(policy, enforce, options.litellm_tokenizer, deployments),
                header="Generated by quotacalc: litellm --config config.yaml",
            ),
        ),
        GeneratedFile(path="litellm/teams.json", text=json_text(team_payloads(policy))),
        GeneratedFile(path="litellm/keys.json", text=json_text(key_payloads(policy))),
    ]
    if enforce == ENFORCE_PLUGIN:
        from quotacalc.exporters import canonical

        canonical_files = {f.path.split("/", 1)[1]: f for f in canonical.export(policy, salts, options).files}
        files.append(GeneratedFile(path=f"litellm/{PLUGIN_MODULE}.py", text=_PLUGIN_SOURCE))
        files.append(
            GeneratedFile(
                path="litellm/enforce.json",
                text=json_text(plugin_settings(options.litellm_tokenizer, policy, deployments)),
            )
        )
        files.append(GeneratedFile(path="litellm/policy.json", text=canonical_files["policy.json"].text))
        if "salts.json" in canonical_files:
            files.append(GeneratedFile(path="litellm/salts.json", text=canonical_files["salts.json"].text, secret=True))
        return Export(target="litellm", files=tuple(files), notes=_plugin_limits(policy, deployments))
    return Export(
        target="litellm", files=tuple(files), notes=_limits(policy) + tuple(_address_notes(policy, deployments))
    )


def _address_notes(policy: QuotaPolicy, deployments: str) -> list[tuple[str, str]]:
    """Where config.yaml assumes the replicas serve: the pools whose plan gives no address."""
    defaulted = [pool.name for pool in policy.pools if pool.replica_urls is None]
    if not defaulted or deployments != DEPLOYMENTS_REPLICA:
        return []
    return [
        (
            "files",
            f"Pool{'s' if len(defaulted) > 1 else ''} {', '.join(defaulted)}: each replica is addressed as a "
            f"StatefulSet's pod behind a headless Service named after its pool ({DEFAULT_REPLICA_URL}); give the "
            "pool's replica_url (a template) or replica_urls in the plan where yours serve elsewhere.",
        )
    ]


def _plugin_limits(policy: QuotaPolicy, deployments: str) -> tuple[tuple[str, str], ...]:
    """What this plan adds to the plugin's declared capabilities (docs/enforce.md)."""
    notes: list[tuple[str, str]] = []
    shared = [pool.name for pool in policy.pools if pool.replicas > 1]
    if shared and deployments == DEPLOYMENTS_POOL:
        notes.append(
            (
                "kv_cap",
                f"Pool{'s' if len(shared) > 1 else ''} {', '.join(shared)}: config.yaml reaches each through one "
                "api_base, so one replica may hold more than a tenant's cap while another holds less.",
            )
        )
    notes += _address_notes(policy, deployments)
    notes += [
        ("lora", line)
        for line in lora_lines(
            policy,
            "not served through this proxy until model_list has an entry per adapter.",
        )
    ]
    return tuple(notes)


def client_fields_problem(policy: QuotaPolicy) -> tuple[str, str] | None:
    """``(problem, fix)`` where the policy relies on the engine's ``priority`` or ``cache_salt`` (a pool schedules
    tiers of different priorities, or a tenant is salted), which LiteLLM forwards from the client's body (unknown
    body keys go to an OpenAI-compatible backend through extra_body) and this config cannot strip or set; else
    None. ``check`` reports it; LIMITS.md says it."""
    scheduled = any(pool.engine.scheduling_policy == "priority" for pool in policy.pools)
    ranked = scheduled and len({tier.priority for tier in policy.tiers}) > 1
    salted = any(tenant.salt_ref is not None for tenant in policy.tenants)
    if not (ranked or salted):
        return None
    fields = " and ".join(name for name, used in (("priority", ranked), ("cache_salt", salted)) if used)
    return (
        f"clients set their own {fields} through the litellm target's builtin limiters (--litellm-enforce builtin): "
        f"LiteLLM forwards a client's {fields} to the "
        "engine and cannot strip or set them per tenant, so a tenant can outrank a more urgent tier or choose its "
        "cache namespace",
        "put a gateway that sets them in front of LiteLLM: quotacalc's plugin (the default --litellm-enforce plugin), "
        "or the envoy or kong target",
    )


def _limits(policy: QuotaPolicy) -> tuple[tuple[str, str], ...]:
    limits = [
        (
            "rate",
            f"max_budget holds a tenant's units over {BUDGET_DURATION} (budget_duration), priced at the USD per unit "
            "of the pool its rate is counted in.",
        ),
        ("priority", "Engine priority: not sent per tenant; " + unsent_priority_effect(policy)),
    ]
    if (problem := client_fields_problem(policy)) is not None:
        message, fix = problem
        limits.append(("priority", f"Clients set their own priority and cache_salt: {message}; {fix}."))
    limits += [("priority", line) for line in _reservation_lines(policy)]
    shares, raised = _reservation(policy, None)
    for tier, exact in raised.items():
        limits.append(
            (
                "priority",
                f"priority_reservation: tier {tier} sells {exact:.2g} of the units, which rounds to less than LiteLLM "
                f"reserves a token a minute of (int(tpm x share)); its share is raised to {shares[tier]:g}, taken from "
                "the largest shares, so it is not refused every request once a model saturates.",
            )
        )
    unlimited = sorted(tenant.name for tenant in policy.tenants if tpm_limit(tenant) is None)
    if unlimited:
        limits.append(
            (
                "rate",
                f"tpm_limit is left out for {', '.join(unlimited)}: their rate is under {LEAST_REQUEST_TOKENS} tokens a "
                "minute, and LiteLLM refuses a request whose reserved tokens (one prompt and one output token at the "
                "least) would pass a key's tpm_limit, so such a limit would refuse every request; max_budget (and "
                "max_parallel_requests) limit them.",
            )
        )
    limits += [
        ("weights", line)
        for line in prompt_length_lines(
            policy,
            "a long prompt spends less budget than its cost, and a tenant sized on long prompts gets more than it was "
            "sized for.",
        )
    ]
    limits += [
        ("routing", line)
        for line in long_context_lines(
            policy,
            "such a tenant must request the long-context pool as its model; its budget is priced at the USD per unit "
            "of the pool its rate is counted in.",
        )
    ]
    load_pools = load_pool_by_tenant(policy)
    moved = sorted(
        (load_pool, tenant.name) for tenant in policy.tenants if (load_pool := load_pools[tenant.name]) != tenant.pool
    )
    for load_pool in sorted({load_pool for load_pool, _ in moved}):
        names = ", ".join(name for pool, name in moved if pool == load_pool)
        limits.append(
            (
                "routing",
                f"{names}: sized on traffic whose mean prompt routes to pool {load_pool}, so the rate, the budget (at "
                f"{load_pool}'s USD per unit) and the tier shares are counted on {load_pool}; a request to another pool spends "
                "that budget at that pool's price.",
            )
        )
    limits += [
        ("lora", line)
        for line in lora_lines(
            policy,
            "not served through this proxy until model_list and the teams' models name each adapter.",
        )
    ]
    return tuple(limits)


def prechecks(policy: QuotaPolicy) -> list:
    """``check``'s findings of what this target loses or refuses (``registry.TARGETS``). Clients' own priority and
    cache_salt: a note, not a warning, as they pass through for nearly every plan, and a warning would fail every plan
    under --strict whether or not the litellm target is used or a gateway that sets the fields stands in front of it.
    A replica deployment id that is another pool's name: a warning, as generate refuses the target."""
    from quotacalc.core.checks import Finding

    found = []
    problem = client_fields_problem(policy)
    if problem is not None:
        found.append(
            Finding(
                severity="info",
                code="litellm-client-fields",
                subject="targets.litellm",
                message=problem[0],
                fix=problem[1],
            )
        )
    # A warning, as envoy's refusals are: the other targets, and this one with --litellm-deployments pool, still
    # generate.
    if (clash := deployment_id_clash(policy)) is not None:
        message, fix = _clash_problem(*clash)
        found.append(
            Finding(
                severity="warning",
                code="litellm-replica-id",
                subject=f"pools.{clash[1]}",
                message=f"{message}: generate refuses the litellm target",
                fix=fix,
            )
        )
    return found
