"""``PricedDeployment``: the one deployment ``price``, ``size`` and ``kv`` price, read once with each value's origin.

A deployment from flags alone is a one-pool plan whose values have origin ``flag`` (a value no flag gave is a
default, named by the flag that would set it); a plan's pool keeps where the plan wrote each value. Warnings and
errors name each value from that record, as ``PricedPlan`` does for a whole plan.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from quotacalc.core.pricing_warning import KeyNamer, PricingWarning
from quotacalc.errors import QuotacalcError, UsageError
from quotacalc.priced.origins import ValueOrigin, key_namer, located, value_origins

if TYPE_CHECKING:
    from quotacalc.core.deployment import Traffic
    from quotacalc.core.kv import RequestKvResult
    from quotacalc.core.price import PriceResult
    from quotacalc.core.traffic import SizeResult
    from quotacalc.inputs.plan import PlanFile


@dataclass(frozen=True)
class PricedDeployment:
    """One deployment priced: from flags, or one pool of a plan file (flags override its keys)."""

    #: The plan file; None for a deployment from flags alone.
    source: str | None
    #: The platform plan's pool priced; None for flags alone or a flat plan (its one pool).
    pool: str | None
    #: Its price; its ``warnings`` worded by origin (its ``pricing_warnings`` the same, as data).
    price: PriceResult
    #: Deployment key -> where its value came from.
    origins: dict[str, ValueOrigin]
    #: What a key the pool sets is written after (``pools.NAME.deployment.``, nothing in a flat plan); None with no
    #: file, where every key is named by its flag.
    own: str | None
    #: Where the pool's deployment sits in the file (``pools[0].deployment``), for an error about no one key.
    within: str | None
    #: The deployment keys (and flat tenant) read from the file: its calibration and long-context routing.
    plan_file: PlanFile | None
    #: The traffic ``size`` sizes (flags over a flat plan's ``tenant:``), with each value's origin.
    traffic: Traffic | None = None
    traffic_origins: dict[str, ValueOrigin] = field(default_factory=dict)

    def key_namer(self) -> KeyNamer:
        """How a message names a deployment key: the flag that gave it, else where the plan writes it."""
        return key_namer(self.origins, self.own)

    def worded(self, warnings: Iterable[PricingWarning]) -> tuple[str, ...]:
        """``warnings``, each key named where its value was set."""
        namer = self.key_namer()
        return tuple(warning.worded(namer) for warning in warnings)

    def located(self, error: QuotacalcError, more: Mapping[str, ValueOrigin] | None = None) -> QuotacalcError:
        """``error`` at the place its value was read (``more``: origins of values beyond the deployment's)."""
        origins = {**self.origins, **self.traffic_origins, **(more or {})}
        return located(error, origins, self.key_namer(), source=self.source, within=self.within)

    def size(self) -> SizeResult:
        """The traffic sized on the deployment; an error names the flag or key that gave its value."""
        from quotacalc.core.traffic import size_traffic

        if self.traffic is None:
            raise ValueError("no traffic to size: read it with traffic_flags")
        try:
            return size_traffic(self.price, self.traffic)
        except QuotacalcError as error:
            raise self.located(error) from None

    def request_kv(self, context_tokens: int, context: ValueOrigin) -> RequestKvResult:
        """One request's KV at ``context_tokens``, which came from ``context`` (kv's own ``--context``)."""
        from quotacalc.core.kv import request_kv

        try:
            return request_kv(self.price, context_tokens)
        except QuotacalcError as error:
            raise self.located(error, {"context": context}) from None


def price_deployment(
    plan: str | None,
    pool: str | None,
    deployment_flags: dict[str, Any],
    *,
    traffic_flags: dict[str, Any] | None = None,
    document: dict[str, Any] | None = None,
) -> PricedDeployment:
    """Read the deployment (a plan's pool, ``pool`` naming it where the plan has several, or flags alone) once,
    recording each value's origin, and price it. ``traffic_flags``: also read the traffic ``size`` sizes.
    ``document``: the plan file's mapping, when it has been read already."""
    from quotacalc.core.deployment import Traffic
    from quotacalc.core.price import price
    from quotacalc.inputs.deployment import build_deployment, build_traffic
    from quotacalc.inputs.resolve import resolve

    if pool is not None and not plan:
        raise UsageError("needs a plan file", field="--pool")
    plan_file = None
    if plan:
        from quotacalc.inputs.plan import deployment_source, read_document

        if document is None:
            document = read_document(plan)
        plan_file = deployment_source(plan, pool, document)
    read = deployment_origins(plan, pool, deployment_flags, document)
    origins, own, within, name, platform = read.origins, read.own, read.within, read.pool, read.platform
    deployment = build_deployment(
        plan_file.deployment if plan_file else {}, deployment_flags, source=plan, origins=origins, within=within
    )
    namer = key_namer(origins, own)
    try:
        replica = price(resolve(deployment))
    except QuotacalcError as error:
        raise read.located(error, source=plan) from None
    replica = replica.model_copy(
        update={"warnings": tuple(warning.worded(namer) for warning in replica.pricing_warnings)}
    )
    traffic = None
    traffic_origins: dict[str, ValueOrigin] = {}
    if traffic_flags is not None:
        section = plan_file.tenant if plan_file else None
        traffic = build_traffic(section, traffic_flags, source=plan)
        # A flat plan's ``tenant:`` section is where its traffic is written; a platform plan sizes flags alone.
        file = plan if plan and not platform else None
        traffic_origins = value_origins(
            Traffic.model_fields, traffic_flags, own=section or {}, source=file, written="tenant.", at="tenant."
        )
    return PricedDeployment(plan, name, replica, origins, own, within, plan_file, traffic, traffic_origins)


@dataclass(frozen=True)
class DeploymentOrigins:
    """Where each value of one deployment came from: flags alone, or a plan's pool with flags over it."""

    #: Deployment key -> its origin.
    origins: dict[str, ValueOrigin]
    #: What a key the pool sets is written after (``pools.NAME.deployment.``, nothing in a flat plan); None with no
    #: file, where every key is named by its flag.
    own: str | None
    #: Where the pool's deployment sits in the file (``pools[0].deployment``); None at the file's top level.
    within: str | None
    #: The platform plan's pool; None for flags alone or a flat plan.
    pool: str | None
    platform: bool

    def key_namer(self) -> KeyNamer:
        return key_namer(self.origins, self.own)

    def located(self, error: QuotacalcError, *, source: str | None) -> QuotacalcError:
        """``error`` at the place its value was read; one about no recorded value is ``source``'s."""
        return located(error, self.origins, self.key_namer(), source=source, within=self.within if source else None)


def deployment_origins(
    plan: str | None, pool: str | None, flags: Mapping[str, Any], document: dict[str, Any] | None
) -> DeploymentOrigins:
    """The origins of the deployment read from ``plan`` (its mapping ``document``, already read and checked by
    ``inputs.plan.deployment_source``) and ``flags``. A platform plan's tier keys (``burst_s``) are not a pool's: a
    value for them comes from the flag, which names them."""
    from quotacalc.core.deployment import Deployment, QuotaConfig

    fields = Deployment.model_fields
    given = {key: value for key, value in flags.items() if value is not None}
    if not plan or document is None:
        return DeploymentOrigins(value_origins(fields, given), None, None, None, False)
    if "pools" not in document:  # a flat plan: its deployment keys are the file's top level
        return DeploymentOrigins(value_origins(fields, given, own=document, source=plan), "", None, None, False)
    from quotacalc.inputs.plan import pool_origins

    names = [str(entry.get("name")) for entry in document["pools"]]
    name = pool if pool is not None else names[0]
    index = names.index(name)
    prefix = f"pools.{name}.deployment."
    origins = pool_origins(document, index, source=plan, flags=given)
    origins.update(value_origins(QuotaConfig.model_fields, given))
    return DeploymentOrigins(origins, prefix, f"pools[{index}].deployment", name, True)
