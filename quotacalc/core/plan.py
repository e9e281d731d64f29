"""A platform plan: pools of replicas, tiers of service, and the tenants sold onto them (docs/method.md §2-§6).

These are the value types the core computes on; ``quotacalc.inputs.plan`` reads them from YAML and
checks the references between them (a tenant's tier and pool exist, names are unique, routing
thresholds fit a pool's context). Every field states its unit in its name or description.
"""

import math
import string
from collections.abc import Iterator, Sequence
from typing import Annotated, Literal, NamedTuple

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator

from quotacalc.core.deployment import (
    MAX_BURST_S,
    MAX_CONTEXT_TOKENS,
    MAX_POOL_TOKENS,
    Deployment,
    Traffic,
    not_a_flag,
)
from quotacalc.errors import close_names

#: The placeholders a pool's ``replica_url`` template fills in: the pool's name and the replica's index (0, 1, ...).
REPLICA_URL_PLACEHOLDERS = ("pool", "replica")
#: Where a pool's replicas serve unless its plan says otherwise (the litellm target's default): a StatefulSet named
#: after the pool behind a headless Service of the same name, whose pod ``{pool}-{i}`` is ``{pool}-{i}.{pool}`` in
#: DNS, on vLLM's port. Kept here as text, as a plan would write it (the exporters' ENGINE_PORT is the same 8000).
DEFAULT_REPLICA_URL = "http://{pool}-{replica}.{pool}:8000/v1"


def base_url_problem(url: str) -> str | None:
    """Why ``url`` is not an engine's base URL (None when it is): http or https, a host, a valid port."""
    from urllib.parse import urlsplit

    if any(not character.isprintable() or character.isspace() for character in url):
        return f"{url!r} holds a space or a control character"
    try:
        parts = urlsplit(url)
        port = parts.port  # raises on a port that is not a number from 0 to 65535
    except ValueError as error:
        return f"{url!r} is not a URL ({error})"
    if parts.scheme not in ("http", "https") or not parts.hostname:
        return f"{url!r} is not an http(s) URL with a host"
    if port == 0:
        return f"{url!r} names port 0"
    return None


def fill_replica_url(template: str, pool: str, replica: int) -> str:
    """``template`` with ``{pool}`` and ``{replica}`` filled in."""
    return template.format(pool=pool, replica=replica)


def _replica_url_template(value: str) -> str:
    example = f"e.g. {DEFAULT_REPLICA_URL}"
    try:
        names = [name for _, name, _, _ in string.Formatter().parse(value) if name is not None]
    except ValueError as error:
        raise ValueError(
            f"{value!r} is not a template ({error}): write the placeholders as {{pool}} and {{replica}} and any "
            f"other brace doubled, {example}"
        ) from None
    unknown = [name for name in names if name not in REPLICA_URL_PLACEHOLDERS]
    if unknown:
        raise ValueError(
            f"{value!r} has the placeholder {{{unknown[0]}}}: only {{pool}} and {{replica}} are filled in ({example})"
        )
    if "replica" not in names:
        raise ValueError(
            f"{value!r} has no {{replica}}, so every replica would get the same address: put {{replica}} where the "
            f"replica's index (0, 1, ...) goes, {example}"
        )
    try:
        sample = fill_replica_url(value, "pool", 0)
    except (ValueError, TypeError) as error:
        raise ValueError(f"{value!r} cannot be filled in ({error}): {example}") from None
    if (problem := base_url_problem(sample)) is not None:
        raise ValueError(f"filled in, {problem}: {example}")
    return value


def _replica_url_list(value: tuple[str, ...]) -> tuple[str, ...]:
    for url in value:
        if (problem := base_url_problem(url)) is not None:
            raise ValueError(f"{problem}: give each replica's base URL, e.g. http://10.0.0.7:8000/v1")
    repeated = sorted({url for url in value if value.count(url) > 1})
    if repeated:
        raise ValueError(f"names {repeated[0]} more than once: give each replica's own address once")
    return value


def _printable_name(value: str) -> str:
    # It travels in HTTP headers, model names and generated files: no control characters (a newline, a NUL, a tab),
    # and no space at either end, which a header value loses.
    if any(not character.isprintable() for character in value) or value != value.strip():
        raise ValueError(f"must not contain control characters or start or end with a space, got {value!r}")
    return value


#: A non-empty identifier (a prefix id).
Identifier = Annotated[str, Field(min_length=1, max_length=256), AfterValidator(_printable_name)]
#: A LoRA adapter's name, as engines load it (vLLM's --lora-modules NAME=PATH) and gateways match it in the model
#: field: no space, '=', quote or comma, which those formats split or quote on.
LORA_NAME_PATTERN = r"^[^\s=,'\"`]{1,256}$"
LoraName = Annotated[str, Field(pattern=LORA_NAME_PATTERN), AfterValidator(_printable_name), AfterValidator(not_a_flag)]

#: The names plan entries use: what a header value, a Kubernetes name and a file name all accept.
NAME_PATTERN = r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$"
#: A pool's name is a Service name too (RFC 1035 label: a letter first).
POOL_NAME_PATTERN = r"^[a-z]([a-z0-9-]{0,61}[a-z0-9])?$"


#: The most units/s one tenant may be sold: a billion (thousands of the largest replicas; a gateway's 32-bit
#: counter holds about 4.3 billion units per window).
MAX_UNITS_PER_S = 1e9
#: The most live sequences a tier may allow a tenant: a million replicas' worth of batches is beyond any fleet, and
#: gateways keep the cap in a 32-bit field.
MAX_CONCURRENT_SEQUENCES = 10**9
#: The largest oversubscription ratio a plan may state: measured ratios are a few; beyond this it is a typo.
MAX_OVERSUBSCRIPTION = 1000.0


def _finite_positive(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"must be a positive finite number, got {value}")
    return value


class Pool(BaseModel):
    """Replicas of one deployment, serving one role."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    name: str = Field(
        pattern=POOL_NAME_PATTERN,
        description="pool name (lower-case letters, digits, '-'; a letter first: it names the pool's Kubernetes "
        "Service and the hosts the gateways send to)",
    )
    deployment: Deployment = Field(description="how each replica serves its model (the keys of a one-pool plan)")
    replicas: int = Field(ge=1, le=100_000, strict=True, description="replicas in the pool")
    role: Literal["standard", "long_context"] = Field(
        "standard", description="standard, or long_context: the pool that takes prompts above a threshold"
    )
    long_context_pool: str | None = Field(
        None, description="standard pools: the long-context pool that takes this pool's prompts above the threshold"
    )
    route_above_prompt_tokens: int | None = Field(
        None,
        ge=1,
        strict=True,
        description="standard pools: prompts above this many tokens route to long_context_pool (e.g. 32768)",
    )
    replica_url: Annotated[str, AfterValidator(_replica_url_template)] | None = Field(
        None,
        max_length=2048,
        description="where each replica serves (its OpenAI-compatible base URL), as a template: {pool} is the "
        "pool's name, {replica} the replica's index from 0 (the litellm target writes one deployment a replica; "
        f"unset: {DEFAULT_REPLICA_URL}, a StatefulSet behind a headless Service named after the pool)",
    )
    replica_urls: Annotated[tuple[str, ...], AfterValidator(_replica_url_list)] | None = Field(
        None,
        min_length=1,
        max_length=100_000,
        description="each replica's base URL, one a replica in order, where no template fits (instead of replica_url)",
    )

    @model_validator(mode="after")
    def _routing_pairs(self) -> "Pool":
        if self.replica_url is not None and self.replica_urls is not None:
            raise ValueError(
                "replica_url (a template) and replica_urls (a list) say the same thing: give one or neither"
            )
        if (self.long_context_pool is None) != (self.route_above_prompt_tokens is None):
            raise ValueError("long_context_pool and route_above_prompt_tokens go together: give both or neither")
        if self.role == "long_context" and self.long_context_pool is not None:
            raise ValueError(
                "a long_context pool takes the longest prompts itself: long-context pools do not chain "
                "(drop its long_context_pool and route_above_prompt_tokens)"
            )
        return self

    def replica_base_urls(self) -> tuple[str, ...] | None:
        """Each replica's base URL as the plan gives it (``replica_urls``, or ``replica_url`` filled in per
        replica); None where it gives neither (a target then assumes ``DEFAULT_REPLICA_URL``)."""
        if self.replica_urls is not None:
            return self.replica_urls
        if self.replica_url is not None:
            return tuple(fill_replica_url(self.replica_url, self.name, index) for index in range(self.replicas))
        return None


class Tier(BaseModel):
    """A class of service: the limits every tenant of the tier gets."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="tier name")
    max_context_tokens: int = Field(
        ge=1, le=MAX_CONTEXT_TOKENS, strict=True, description="longest prompt + output a request may have"
    )
    kv_cap_tokens_per_replica: int = Field(
        ge=1, le=MAX_POOL_TOKENS, strict=True, description="resident KV a tenant may hold on one replica, tokens"
    )
    max_concurrent_sequences: int = Field(
        ge=1, le=MAX_CONCURRENT_SEQUENCES, strict=True, description="live sequences a tenant may have at once"
    )
    max_output_tokens: int = Field(
        ge=1,
        le=MAX_CONTEXT_TOKENS,
        strict=True,
        description="output reservation cap: the largest max_tokens admitted, tokens",
    )
    priority: int = Field(
        ge=0, le=1000, strict=True, description="scheduling priority, 0 the most important (vLLM: lower runs first)"
    )
    burst_s: float = Field(60.0, strict=True, description="token-bucket depth, seconds of contracted units")
    cached_prompt_weight: float = Field(
        0.1, ge=0, le=1, strict=True, description="units charged per cached prompt token"
    )

    @field_validator("burst_s")
    @classmethod
    def _burst(cls, value: float) -> float:
        value = _finite_positive(value)
        if value > MAX_BURST_S:
            raise ValueError(f"must be at most {MAX_BURST_S:,} s (a year), got {value:g}")
        return value

    @model_validator(mode="after")
    def _output_fits_context(self) -> "Tier":
        if self.max_output_tokens > self.max_context_tokens:
            raise ValueError(
                f"max_output_tokens {self.max_output_tokens} exceeds max_context_tokens {self.max_context_tokens}"
            )
        return self


class Oversubscription(BaseModel):
    """A measured ratio of the sum of per-tenant peaks to the fleet's peak, and where it was measured."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    ratio: float = Field(strict=True, description="sum of per-tenant peaks / fleet peak, >= 1")
    # Copied into the policy and every generated file: one printable line, not a document.
    source: Annotated[str, Field(min_length=1, max_length=1000), AfterValidator(_printable_name)] = Field(
        description="where the ratio was measured (usage data, window, date)"
    )
    # Tenants that do not peak together on one pool say nothing of another pool's tenants, and a pool of one
    # dedicated tenant has no one to share its peak with.
    pool: str | None = Field(
        None,
        description="the pool whose load was measured, the only one the ratio raises; absent: every pool's shared "
        "tenants",
    )

    @field_validator("ratio")
    @classmethod
    def _at_least_one(cls, value: float) -> float:
        if not math.isfinite(value) or not 1 <= value <= MAX_OVERSUBSCRIPTION:
            raise ValueError(f"must be a ratio from 1 to {MAX_OVERSUBSCRIPTION:g}, got {value:g}")
        return value

    def raises(self, pool: str, placement: str) -> bool:
        """Whether the ratio raises the capacity behind a tenant of this placement whose load lands on ``pool``."""
        return placement == "shared" and self.pool in (None, pool)


def _each_once(names: tuple[str, ...], what: str) -> tuple[str, ...]:
    repeated = sorted({name for name in names if names.count(name) > 1})
    if repeated:
        raise ValueError(f"names {', '.join(repeated)} more than once: give each {what} once")
    return names


class PlanTenant(BaseModel):
    """A tenant of the platform: its tier, its pool, and either a contract or a traffic profile to size."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    name: str = Field(pattern=NAME_PATTERN, description="tenant id, as the gateway's tenant header carries it")
    tier: str = Field(description="a tier's name")
    pool: str | None = Field(None, description="a standard pool's name; default: the plan's only standard pool")
    units_per_s: float | None = Field(None, strict=True, description="contracted units/s (give this or traffic)")
    traffic: Traffic | None = Field(None, description="a traffic profile to size (rps, prompt/output tokens)")
    placement: Literal["shared", "dedicated"] = Field(
        "shared",
        description="shared replicas, or dedicated: its pool serves this tenant alone (priced as whole replicas)",
    )
    cache_isolation: Literal["salted", "shared"] = Field(
        "salted", description="salted: a per-tenant cache namespace; shared: the common prefix cache"
    )
    lora_adapters: tuple[LoraName, ...] = Field(
        (), description="LoRA adapter names the tenant uses (no space, '=', comma or quote; each once)"
    )

    @field_validator("lora_adapters")
    @classmethod
    def _adapters_once(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        return _each_once(names, "adapter")

    @field_validator("name")
    @classmethod
    def _not_a_reserved_name(cls, value: str) -> str:
        # A tenant names its Envoy AI Gateway route rule, and the gateway's CRD refuses this one (its catch-all's).
        if value in RESERVED_TENANT_NAMES:
            raise ValueError(f"'{value}' is a name the gateway reserves for its own route rule: choose another")
        return value

    @field_validator("units_per_s")
    @classmethod
    def _units(cls, value: float | None) -> float | None:
        if value is not None and _finite_positive(value) > MAX_UNITS_PER_S:
            raise ValueError(f"must be at most {MAX_UNITS_PER_S:,.0f} units/s, got {value:g}")
        return value

    @model_validator(mode="after")
    def _one_contract(self) -> "PlanTenant":
        if (self.units_per_s is None) == (self.traffic is None):
            raise ValueError("give exactly one of units_per_s (a contract) and traffic (a profile to size)")
        return self

    @field_validator("traffic")
    @classmethod
    def _some_traffic(cls, traffic: Traffic | None) -> Traffic | None:
        # Its bucket refills at the traffic's units/s: a profile of no load is a bucket that admits nothing.
        if traffic is not None and (traffic.rps == 0 or traffic.prompt_tokens + traffic.output_tokens == 0):
            raise ValueError("sizes to 0 units/s, a token bucket that admits nothing: give rps and tokens above 0")
        return traffic


#: Headers the gateways route or authenticate on: none can carry the tenant id.
RESERVED_HEADERS = frozenset(
    {
        "x-ai-eg-model",
        # The Gateway API Inference Extension picks a request's InferenceObjective (named tier-pool) from it: it cannot
        # carry tenant ids too.
        "x-gateway-inference-objective",
        "authorization",
        "content-type",
        "content-length",
        "host",
    }
)
#: Headers HTTP itself consumes: hop-by-hop headers (RFC 9110 section 7.6.1, and HTTP/1.1's keep-alive and
#: proxy-connection) that every proxy strips before the gateway's check, and the ones that frame the message
#: (HTTP/2 and HTTP/3 forbid connection-specific ones outright; their pseudo-headers start with ':', which the
#: pattern refuses). A tenant id there never reaches the check, or breaks the request.
HTTP_CONNECTION_HEADERS = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-authenticate",
        "proxy-authorization",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "http2-settings",
        "host",
        "content-length",
    }
)
#: Names no tenant can take: the Envoy AI Gateway's AIGatewayRoute refuses a rule of this name (its CRD's
#: x-kubernetes-validations: "rule name route-not-found is reserved").
RESERVED_TENANT_NAMES = frozenset({"route-not-found"})


class Plan(BaseModel):
    """A platform plan. A one-pool plan (a flat plan file) is a Plan with one pool and at most one tenant."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    pools: tuple[Pool, ...] = Field(min_length=1, description="pools of replicas")
    tiers: tuple[Tier, ...] = Field((), description="tiers of service")
    tenants: tuple[PlanTenant, ...] = Field((), description="tenants")
    public_prefixes: tuple[Identifier, ...] = Field(
        (), description="platform-owned public prefixes (ids), never salted, shared by every tenant"
    )
    oversubscription: Oversubscription | None = Field(
        None, description="measured oversubscription; none is assumed when absent"
    )
    tenant_header: str = Field(
        "x-tenant-id",
        pattern=r"^[a-z0-9][a-z0-9-]{0,63}$",
        description="request header that carries the tenant id (lower-case, as HTTP/2 sends it)",
    )

    @field_validator("public_prefixes")
    @classmethod
    def _prefixes_once(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        # A repeated id would be a duplicate entry in the gateways' match lists (decK refuses one).
        return _each_once(names, "prefix id")

    @field_validator("tenant_header")
    @classmethod
    def _not_a_header_the_gateways_use(cls, value: str) -> str:
        # Envoy AI Gateway routes on its model header, and every target reads these: a tenant id there would be
        # matched twice in one route (the API server refuses) or break the request.
        if value in RESERVED_HEADERS:
            raise ValueError(f"'{value}' is a header the gateway itself uses: choose another, e.g. x-tenant-id")
        if value in HTTP_CONNECTION_HEADERS:
            raise ValueError(
                f"'{value}' is a header HTTP consumes between hops (proxies strip or reserve it), so the tenant id "
                "would never reach the gateway's check: choose another, e.g. x-tenant-id"
            )
        return value

    @model_validator(mode="after")
    def _references_resolve(self) -> "Plan":
        # A plan built in code gets the checks a plan file gets (quotacalc.inputs.plan names the file beside them).
        for problem in reference_problems(self.pools, self.tiers, self.tenants):
            raise ValueError(problem.one_line())
        return self

    def pool(self, name: str) -> Pool:
        """The pool called ``name`` (references are checked when the plan is built)."""
        return next(pool for pool in self.pools if pool.name == name)

    def tier(self, name: str) -> Tier:
        """The tier called ``name``."""
        return next(tier for tier in self.tiers if tier.name == name)

    def standard_pool_of(self, tenant: PlanTenant) -> Pool:
        """The standard pool a tenant's requests go to below the long-context threshold."""
        if tenant.pool is not None:
            return self.pool(tenant.pool)
        return next(pool for pool in self.pools if pool.role == "standard")


def routed_pool(pool: str, long_context_pool: str | None, route_above_prompt_tokens: int | None, prompt: float) -> str:
    """The pool a prompt of ``prompt`` tokens is served by, from the standard pool ``pool``: its long-context pool
    when it routes and the prompt is above the threshold (a prompt of exactly the threshold stays), as the gateway
    routes a request and as a tenant sized on traffic is sized on its mean prompt (docs/method.md §2)."""
    if long_context_pool is not None and route_above_prompt_tokens is not None and prompt > route_above_prompt_tokens:
        return long_context_pool
    return pool


class ReferenceProblem(NamedTuple):
    """A reference between plan entries that does not resolve: where (a YAML path), what, and the fix."""

    field: str
    problem: str
    fix: str

    def one_line(self) -> str:
        return f"{self.field}: {self.problem} ({self.fix})"


def _unknown(kind: str, name: str, known: list[str], field: str) -> ReferenceProblem:
    close = close_names(name, known, n=1)
    if close:
        fix = f"did you mean '{close[0]}'?"
    else:
        fix = f"{kind}s: {', '.join(known)}" if known else f"the plan has no {kind}s"
    return ReferenceProblem(field, f"unknown {kind} '{name}'", fix)


def _duplicate_names(names: list[str], section: str) -> Iterator[ReferenceProblem]:
    seen: dict[str, int] = {}
    for index, name in enumerate(names):
        if name in seen:
            yield ReferenceProblem(
                f"{section}[{index}].name",
                f"duplicate name '{name}' (also {section}[{seen[name]}])",
                "give each a unique name",
            )
        seen.setdefault(name, index)


def _replica_address_problems(pool: Pool, at: str) -> Iterator[ReferenceProblem]:
    """A pool's replica addresses, where the plan gives them: one a replica, none twice."""
    if pool.replica_urls is not None and len(pool.replica_urls) != pool.replicas:
        yield ReferenceProblem(
            f"{at}.replica_urls",
            f"lists {len(pool.replica_urls)} URLs for the pool's {pool.replicas} replicas",
            f"give one base URL a replica, {pool.replicas} in order, or a template as replica_url "
            f"(e.g. {DEFAULT_REPLICA_URL})",
        )
    elif pool.replica_url is not None:
        urls = pool.replica_base_urls() or ()
        problems = [problem for url in urls if (problem := base_url_problem(url)) is not None]
        if problems:
            yield ReferenceProblem(
                f"{at}.replica_url", f"filled in for pool '{pool.name}', {problems[0]}", "fix the template"
            )
        elif len(set(urls)) != len(urls):
            yield ReferenceProblem(
                f"{at}.replica_url",
                f"gives two of pool '{pool.name}''s {pool.replicas} replicas the same address",
                "write {replica} without a format that rounds it (e.g. {replica}, not {replica:.0e})",
            )


def reference_problems(
    pools: Sequence[Pool], tiers: Sequence[Tier], tenants: Sequence[PlanTenant]
) -> Iterator[ReferenceProblem]:
    """Each reference between a plan's entries that does not resolve, in the plan's order: names unique, a standard
    pool, long-context pools that exist and are long-context, tenants' tiers and pools. (What needs the models
    resolved, routing thresholds against the context a pool serves, is checked where the plan is read.)"""
    yield from _duplicate_names([pool.name for pool in pools], "pools")
    yield from _duplicate_names([tier.name for tier in tiers], "tiers")
    yield from _duplicate_names([tenant.name for tenant in tenants], "tenants")
    by_name = {pool.name: pool for pool in pools}
    standard = [pool.name for pool in pools if pool.role == "standard"]
    long_context = [pool.name for pool in pools if pool.role == "long_context"]
    if not standard:
        yield ReferenceProblem(
            "pools",
            "no standard pool: tenants' requests need one below the routing threshold",
            "set role: standard on at least one pool",
        )
    for index, pool in enumerate(pools):
        if pool.long_context_pool is None:
            continue
        field = f"pools[{index}].long_context_pool"
        target = by_name.get(pool.long_context_pool)
        if target is None:
            yield _unknown("pool", pool.long_context_pool, list(by_name), field)
        elif target.role != "long_context":
            yield ReferenceProblem(
                field,
                f"pool '{target.name}' is not a long-context pool (role: {target.role})",
                f"set role: long_context on it, or name one of: {', '.join(long_context) or 'none'}",
            )
    for index, pool in enumerate(pools):
        yield from _replica_address_problems(pool, f"pools[{index}]")
    tier_names = [tier.name for tier in tiers]
    for index, tenant in enumerate(tenants):
        if tenant.tier not in tier_names:
            yield _unknown("tier", tenant.tier, tier_names, f"tenants[{index}].tier")
        field = f"tenants[{index}].pool"
        if tenant.pool is None:
            if len(standard) > 1:
                yield ReferenceProblem(
                    field, f"the plan has {len(standard)} standard pools", f"name one of: {', '.join(standard)}"
                )
        elif tenant.pool not in by_name:
            yield _unknown("pool", tenant.pool, list(by_name), field)
        elif by_name[tenant.pool].role != "standard":
            yield ReferenceProblem(
                field,
                f"pool '{tenant.pool}' is a long-context pool: tenants name their standard pool",
                f"name one of: {', '.join(standard)} (long prompts route by the pool's threshold)",
            )
