"""Gateway API Inference Extension: an ``InferencePool`` (v1) per pool; ``InferenceObjective``s only on request.

It generates no endpoint picker: each InferencePool's ``endpointPickerRef`` names a picker Service (``<pool>-epp``)
that the user deploys, an endpoint picker (llm-d's router, e.g. its ``inferencepool`` Helm chart) with its own
config; the llm-d target writes that config, with flow control and per-tenant fairness.

``InferenceObjective`` (``inference.networking.x-k8s.io/v1alpha2``) was removed from the project's main branch in
2026 (pull request 2973) and now lives in llm-d; releases before that still ship it, hence ``--gie-objectives``.
Its priority runs the other way from the policy's: higher is more important there.
"""

from __future__ import annotations

from collections.abc import Mapping

from quotacalc.core.policy import QuotaPolicy
from quotacalc.exporters._text import yaml_documents
from quotacalc.exporters.base import ENGINE_PORT, Export, ExportOptions, GeneratedFile

POOL_API = "inference.networking.k8s.io/v1"
OBJECTIVE_API = "inference.networking.x-k8s.io/v1alpha2"
#: Label the pool's vLLM pods carry; the InferencePool selects them by it.
POOL_LABEL = "quotacalc.io/pool"
#: The endpoint picker's default gRPC port (an explicit default: edit where yours differs).
EPP_PORT = 9002


def objective_priority(policy: QuotaPolicy, priority: int) -> int:
    """The policy's priority (0 the most important) as InferenceObjective's (higher the more important)."""
    lowest = max((tier.priority for tier in policy.tiers), default=0)
    return lowest - priority


#: A Kubernetes Service name's longest (RFC 1035 label): the endpoint picker's Service.
SERVICE_NAME_MAX = 63


def _hashed_picker(pool: str, attempt: int = 0) -> str:
    """'<start of pool>-<hash>-epp', at most 63 characters: the hash of the whole pool name (and of the attempt,
    from the second on), so a name cut short or moved aside stays the pool's own."""
    import hashlib

    key = pool if attempt == 0 else f"{pool}#{attempt}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    return f"{pool[: SERVICE_NAME_MAX - len(digest) - 6].rstrip('-')}-{digest}-epp"


def picker_name(pool: str) -> str:
    """The endpoint picker Service a pool's name alone gives, the usual '<pool>-epp';
    a pool name too long for that (up to 63 characters is legal) keeps its start and gets a hash of the whole, so
    two long names never share a picker. ``picker_names`` moves it where it is another pool's Service."""
    name = f"{pool}-epp"
    return name if len(name) <= SERVICE_NAME_MAX else _hashed_picker(pool)


def picker_names(policy: QuotaPolicy) -> dict[str, str]:
    """Pool -> its endpoint picker's Service, never another pool's Service nor another picker's.

    Every pool's engines are reached at a Service named after the pool (the Envoy, Kong and LiteLLM targets send
    there), and a pool may be named like any Service, so no suffix alone is safe: pool 'a's picker 'a-epp' would be
    pool 'a-epp's Service. Such a picker (and one two pools would share) gets '<pool>-<hash>-epp' instead, hashed again
    in the unlikely case that name is taken too; every other pool keeps '<pool>-epp'."""
    from collections import Counter

    pools = [pool.name for pool in policy.pools]
    plain = {pool: picker_name(pool) for pool in pools}
    shared = Counter(plain.values())
    taken = set(pools)
    names = {pool: name for pool, name in plain.items() if name not in taken and shared[name] == 1}
    taken.update(names.values())
    for pool in pools:
        if pool in names:
            continue
        attempt = 0
        while (name := _hashed_picker(pool, attempt)) in taken:
            attempt += 1
        names[pool] = name
        taken.add(name)
    return {pool: names[pool] for pool in pools}


def objective_names(policy: QuotaPolicy) -> dict[tuple[str, str], str]:
    """(tier, pool) -> its InferenceObjective's name, '<tier>-<pool>'; where two pairs would share one (tier 'gold' on
    pool 'x-y', tier 'gold-x' on pool 'y'), each of those gets a short hash of its pair, so none replaces another."""
    import hashlib
    from collections import Counter

    plain = {(tier.name, pool.name): f"{tier.name}-{pool.name}" for tier in policy.tiers for pool in policy.pools}
    taken = Counter(plain.values())
    return {
        pair: name if taken[name] == 1 else f"{name}-{hashlib.sha256('/'.join(pair).encode()).hexdigest()[:8]}"
        for pair, name in plain.items()
    }


def documents(policy: QuotaPolicy, options: ExportOptions) -> dict[str, list[dict]]:
    """InferencePools, and InferenceObjectives when asked for, by path."""
    pickers = picker_names(policy)
    pools = [
        {
            "apiVersion": POOL_API,
            "kind": "InferencePool",
            "metadata": {"name": pool.name},
            "spec": {
                "selector": {"matchLabels": {POOL_LABEL: pool.name}},
                "targetPorts": [{"number": ENGINE_PORT}],
                "endpointPickerRef": {"name": pickers[pool.name], "port": {"number": EPP_PORT}},
            },
        }
        for pool in policy.pools
    ]
    files = {"gie/inferencepools.yaml": pools}
    if options.gie_objectives:
        names = objective_names(policy)
        files["gie/inferenceobjectives.yaml"] = [
            {
                "apiVersion": OBJECTIVE_API,
                "kind": "InferenceObjective",
                "metadata": {"name": names[tier.name, pool.name]},
                "spec": {"priority": objective_priority(policy, tier.priority), "poolRef": {"name": pool.name}},
            }
            for tier in sorted(policy.tiers, key=lambda tier: (tier.priority, tier.name))
            for pool in policy.pools
        ]
    return files


#: Said at the top of every file: what these manifests leave to the user.
NO_PICKER = (
    "Generated by quotacalc. No endpoint picker is generated: deploy one per pool under the Service each\n"
    "InferencePool's endpointPickerRef names (llm-d's router, e.g. its inferencepool chart; the llm-d target\n"
    "writes its EndpointPickerConfig), and the model servers labelled " + POOL_LABEL + "=<pool>."
)


def export(policy: QuotaPolicy, salts: Mapping[str, str], options: ExportOptions) -> Export:
    """InferencePools (and InferenceObjectives with ``options.gie_objectives``)."""
    files = tuple(
        GeneratedFile(path=path, text=yaml_documents(manifests, header=NO_PICKER))
        for path, manifests in documents(policy, options).items()
    )
    return Export(target="gie", files=files, notes=_limits(policy))


def _limits(policy: QuotaPolicy) -> tuple[tuple[str, str], ...]:
    pickers = picker_names(policy)
    limits = [
        (
            "files",
            "Endpoint picker: each InferencePool's endpointPickerRef names a Service ("
            + ", ".join(f"{pool}: {picker}" for pool, picker in pickers.items())
            + f", port {EPP_PORT}) where you must deploy it.",
        )
    ]
    pools = {pool.name for pool in policy.pools}
    for pool, picker in pickers.items():
        plain = picker_name(pool)
        if picker != plain:
            whose = f"pool {plain}'s own Service" if plain in pools else "another pool's endpoint picker"
            limits.append(
                (
                    "files",
                    f"Pool {pool}'s endpoint picker Service is {picker}, not the usual {plain}, which is {whose}: "
                    f"deploy its endpoint picker under {picker}.",
                )
            )
    return tuple(limits)
