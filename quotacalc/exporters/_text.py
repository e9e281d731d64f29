"""YAML documents and JSON text for the target exporters: deterministic, insertion order kept, no timestamps."""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

from quotacalc.core.deployment import GENERIC_ENGINE
from quotacalc.core.policy import QuotaPolicy, TenantPolicy
from quotacalc.errors import QuotacalcError
from quotacalc.exporters.yaml_text import dump_yaml


def yaml_text(data: Any, header: str = "") -> str:
    """One YAML document; ``header`` lines become comments at the top."""
    return _comment(header) + dump_yaml(data)


def yaml_documents(documents: Iterable[Mapping[str, Any]], header: str = "") -> str:
    """Several YAML documents separated by ``---`` (how Kubernetes manifests are applied together)."""
    return _comment(header) + "---\n".join(dump_yaml(dict(document)) for document in documents)


def json_text(data: Any) -> str:
    """Strict, indented JSON (no NaN or Infinity) with a trailing newline."""
    return json.dumps(data, indent=2, allow_nan=False, ensure_ascii=False) + "\n"


def _comment(header: str) -> str:
    return "".join(f"# {line}\n" if line else "#\n" for line in header.splitlines())


def long_context_lines(
    policy: QuotaPolicy,
    consequence: str | Callable[[str, str, list[str]], str],
    skip: Collection[str] = (),
) -> list[str]:
    """One limits line per standard pool whose long prompts a target cannot route by size (tenants named, but
    those in ``skip``: a target that says otherwise what becomes of them). ``consequence``: the same text for every
    line, or a function of (standard pool, long-context pool, tenant names) where it depends on the pools."""
    groups: dict[tuple[str, str, int], list[str]] = {}
    for tenant in policy.tenants:
        if tenant.name in skip:
            continue
        if tenant.long_context_pool is not None and tenant.route_above_prompt_tokens is not None:
            key = (tenant.pool, tenant.long_context_pool, tenant.route_above_prompt_tokens)
            groups.setdefault(key, []).append(tenant.name)
    lines = []
    for (pool, long_pool, threshold), names in sorted(groups.items()):
        names = sorted(names)
        said = consequence if isinstance(consequence, str) else consequence(pool, long_pool, names)
        lines.append(
            f"Long-context routing: prompts above {threshold} tokens from {', '.join(names)} (pool {pool}) "
            f"are not routed to pool {long_pool} by their size; {said}"
        )
    return lines


def unsent_priority_effect(policy: QuotaPolicy, tenants: Collection[str] | None = None) -> str:
    """What becomes of the tiers' order where a target sends no ``priority``: each engine's default for a request
    without one (vLLM: 0, ``priority`` in its OpenAI request models, lower runs first; SGLang: the
    ``default-priority-value`` the sglang target writes, the least urgent tier's), on the pools whose engine
    schedules by priority. ``tenants``: where only these go without one, only the pools they may call count."""
    by_priority = sorted(policy.tiers, key=lambda tier: (tier.priority, tier.name))
    scheduled = [pool for pool in policy.pools if pool.engine.scheduling_policy == "priority"]
    who = "every tenant of this target"
    if tenants is not None and by_priority and scheduled:
        reached = {
            name
            for tenant in policy.tenants
            if tenant.name in tenants
            for name in (tenant.pool, tenant.long_context_pool)
            if name is not None
        }
        scheduled = [pool for pool in scheduled if pool.name in reached]
        if not scheduled:
            return "none of their pools' engines schedules by priority, so no tier's order is lost."
        who = "each of them"
    if not by_priority or not scheduled:
        return "no pool's engine schedules by priority, so no tier's order is lost."
    top, least = by_priority[0], by_priority[-1]
    urgent = "/".join(tier.name for tier in by_priority if tier.priority == top.priority)
    said = []
    vllm = sorted(pool.name for pool in scheduled if pool.serving_engine == GENERIC_ENGINE)
    if vllm:
        # Tier priorities are at least 0 (plan.Tier), so vLLM's default is never behind a tier.
        rank = (
            f"the most urgent tier's ({urgent}): {who} runs as urgently as {urgent} there, whatever its tier"
            if top.priority == 0
            else f"ahead of every tier (the most urgent, {top.name}, is {top.priority}): {who} runs before any "
            "request sent with a tier's priority, whatever its tier"
        )
        said.append(
            f"on pools {', '.join(vllm)}, whose vLLM schedules by priority, a request without one takes vLLM's "
            f"default priority 0 (lower runs first), {rank}"
        )
    # "sglang": exporters.sglang.SGLANG_ENGINE, not imported (that module imports this one).
    sglang = sorted(pool.name for pool in scheduled if pool.serving_engine == "sglang")
    if sglang:
        said.append(
            f"on pools {', '.join(sglang)}, whose SGLang schedules by priority, a request without one takes "
            f"default-priority-value {least.priority}, the least urgent tier's ({least.name}): {who} runs as "
            f"{least.name} there, whatever its tier"
        )
    other = sorted(
        f"{pool.name} ({pool.serving_engine})"
        for pool in scheduled
        if pool.serving_engine not in (GENERIC_ENGINE, "sglang")
    )
    if other:
        said.append(f"on pools {', '.join(other)}, the engine's rank for a request without one is not checked")
    return "; ".join(said) + "."


def prompt_length_lines(policy: QuotaPolicy, consequence: str) -> list[str]:
    """One limits line where a target charges a prompt token the same whatever its prompt's length, naming each
    pool's cost at its longest prompt (the policy's ``prompt_length_charge``)."""
    charged = [pool for pool in policy.pools if pool.prompt_length_charge.per_prompt_token > 0]
    if not charged:
        return []
    costs = "; ".join(
        f"pool {pool.name}: {pool.prompt_length_charge.units_at_longest:.3g} units a token at "
        f"{pool.prompt_length_charge.longest_prompt_tokens:,} tokens"
        for pool in charged
    )
    return [
        "Prompt length: a prompt token is charged its weight whatever its prompt's length, where the policy adds "
        f"prompt_per_prompt_token units per token of the prompt (attention over it: {costs}); {consequence}"
    ]


def lora_lines(policy: QuotaPolicy, consequence: str) -> list[str]:
    """One limits line for the tenants' LoRA adapters where a gateway target pins each pool's base model."""
    adapters = {tenant.name: tenant.lora_adapters for tenant in policy.tenants if tenant.lora_adapters}
    if not adapters:
        return []
    listed = "; ".join(f"{name}: {', '.join(names)}" for name, names in sorted(adapters.items()))
    return [f"LoRA adapters ({listed}): {consequence}"]


def load_pool_by_tenant(policy: QuotaPolicy) -> dict[str, str]:
    """Tenant name -> the pool its rate is counted in and whose replicas carry its load (``TenantPolicy.load_pool``,
    as check and size count it)."""
    from quotacalc.core.plan_size import load_pool_of

    return {tenant.name: load_pool_of(tenant) for tenant in policy.tenants}


def salt_of(tenant: TenantPolicy, salts: Mapping[str, str]) -> str | None:
    """The tenant's salt, None when its cache is shared; a salted tenant without one is an error, never unsalted."""
    if tenant.salt_ref is None:
        return None
    salt = salts.get(tenant.salt_ref)
    if not salt:
        raise QuotacalcError(
            f"tenant {tenant.name} is salted but no salt was derived for it",
            field=f"tenants.{tenant.name}.salt_ref",
            fix="give the salt secret (QUOTACALC_SALT_SECRET or --salt-secret-file)",
        )
    return salt
