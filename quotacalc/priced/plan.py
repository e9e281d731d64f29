"""``PricedPlan``: a plan file read once, its pools priced once, its policy, and each value's origin."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from quotacalc.core.pricing_warning import KeyNamer, PricingWarning
from quotacalc.errors import QuotacalcError
from quotacalc.priced.origins import ValueOrigin, key_namer, located, value_origins

if TYPE_CHECKING:
    from quotacalc.core.plan import Plan
    from quotacalc.core.policy import QuotaPolicy
    from quotacalc.core.price import PriceResult
    from quotacalc.inputs.plan import ReadPlan


@dataclass(frozen=True)
class PricedPlan:
    """One plan, as every plan command takes it."""

    #: The plan file.
    source: str
    #: The file's YAML mapping as read (once).
    document: dict[str, Any]
    #: Whether the file is a platform plan (``pools:``); a flat plan is the one pool ``default``.
    platform: bool
    #: The plan; a flat plan's synthesised tier fitted to what its pool serves.
    plan: Plan
    #: Pool name -> its price (each distinct deployment priced once).
    prices: dict[str, PriceResult]
    #: The canonical policy.
    policy: QuotaPolicy
    #: Pool name -> its pricing warnings as ``price`` words them, keys as flags (only pools that have some).
    warnings: dict[str, tuple[str, ...]]
    #: Pool name -> its pricing warnings as data (only pools that have some): ``worded`` names their keys.
    pricing_warnings: dict[str, tuple[PricingWarning, ...]]
    #: Pool name -> its ``calibration:`` section (a CalibrationProvenance) or None.
    calibrations: dict[str, Any]
    #: Pool name -> (the ``calibrated`` summary or None, why the calibration does not hold or None).
    calibrated: dict[str, Any]
    #: Pool name -> deployment key -> where its value came from.
    origins: dict[str, dict[str, ValueOrigin]]
    #: The deployment flags given (those not None).
    flags: dict[str, Any]
    #: Where the plan sits in its file: ``plan.`` for a scenario's embedded plan, else nothing.
    at: str = ""

    @property
    def flat(self) -> bool:
        return not self.platform

    def inherited_keys(self) -> dict[str, frozenset[str]] | None:
        """Pool name -> the deployment keys it takes from the plan's top-level ``deployment:``; None for a flat plan."""
        if not self.platform:
            return None
        return {
            pool: frozenset(key for key, origin in keys.items() if origin.kind == "inherited")
            for pool, keys in self.origins.items()
        }

    def key_prefix(self, pool: str) -> str:
        """What a pool's own deployment key is written after: ``pools.NAME.deployment.``, or nothing in a flat plan."""
        return f"{self.at}pools.{pool}.deployment." if self.platform else ""

    def plan_field(self, policy_field: str | None) -> str | None:
        """Where the plan writes what a path in its policy names (an exporter's refusal names the policy): the
        policy keeps the plan's tenants in order, so ``tenants[2].lora_adapters`` is the plan's own; a flat plan's
        one tenant is its ``tenant`` key."""
        if policy_field is None:
            return None
        if not self.platform and (
            policy_field == "tenants[0]" or policy_field.startswith(("tenants[0].", "tenants[0]["))
        ):
            return "tenant" + policy_field.removeprefix("tenants[0]")
        return self.at + policy_field

    def key_namer(self, pool: str) -> KeyNamer:
        """How a message names a deployment key of ``pool``: as the flag, when a flag gave it; else as the plan
        writes it. A fix that removes a key the pool inherits names it where it is written (``deployment.KEY``);
        one that sets a key names the pool's own (it changes that pool alone)."""
        return key_namer(self.origins.get(pool, {}), self.key_prefix(pool))

    def worded_warnings(self, pool: str) -> tuple[str, ...]:
        """``pool``'s pricing warnings, each key named where it was set (``key_namer``)."""
        namer = self.key_namer(pool)
        return tuple(warning.worded(namer) for warning in self.pricing_warnings.get(pool, ()))


def _origins(read: ReadPlan, flags: dict[str, Any]) -> dict[str, dict[str, ValueOrigin]]:
    """Pool name -> deployment key -> where its value came from: a flag wins over what the reader recorded (the
    pool's key, or the plan's top-level ``deployment:`` it inherits)."""
    from quotacalc.core.deployment import Deployment
    from quotacalc.inputs.plan import pool_origins

    document = read.document
    result: dict[str, dict[str, ValueOrigin]] = {}
    for index, pool in enumerate(read.plan.pools):
        recorded = read.origins.get(pool.name)
        if recorded is not None:
            given = value_origins(Deployment.model_fields, flags)
            result[pool.name] = {key: given[key] if given[key].kind == "flag" else recorded[key] for key in recorded}
        elif read.platform and _pool_entry(document, index):
            result[pool.name] = pool_origins(document, index, source=read.source, flags=flags, at=read.at)
        elif read.platform:
            result[pool.name] = value_origins(
                Deployment.model_fields,
                flags,
                own={},
                source=read.source,
                written=f"{read.at}pools.{pool.name}.deployment.",
                at=f"{read.at}pools[{index}].deployment.",
            )
        else:
            result[pool.name] = value_origins(Deployment.model_fields, flags, own=document, source=read.source)
    return result


def _pool_entry(document: dict[str, Any], index: int) -> dict[str, Any]:
    """Pool ``index``'s mapping in the plan as read (empty where the caller has no document)."""
    pools = document.get("pools") or []
    return pools[index] if index < len(pools) and isinstance(pools[index], dict) else {}


def price_pools(
    plan: Plan,
    deployment_flags: dict[str, Any] | None = None,
    *,
    source: str,
    platform: bool = True,
    document: dict[str, Any] | None = None,
    at: str = "",
    origins: dict[str, dict[str, ValueOrigin]] | None = None,
) -> dict[str, PriceResult]:
    """Each pool's price (resolve + core price), each distinct deployment priced once; flags, when given, override
    every pool's deployment. ``origins``: pool name -> where each of its values came from, which a refusal names
    (without them, as read from ``document``, the plan file as read; ``at``: where the plan sits in that file,
    ``plan.`` in a scenario)."""
    from quotacalc.core.price import price
    from quotacalc.inputs.deployment import build_deployment
    from quotacalc.inputs.plan import ReadPlan
    from quotacalc.inputs.resolve import resolve

    if origins is None:
        origins = _origins(ReadPlan(source, document or {}, plan, platform, {}, at), deployment_flags or {})

    priced: dict[Any, PriceResult] = {}
    result = {}
    for index, pool in enumerate(plan.pools):
        deployment = pool.deployment
        if deployment_flags and any(value is not None for value in deployment_flags.values()):
            deployment = build_deployment(deployment.model_dump(), deployment_flags, source=source)
        if deployment not in priced:
            try:
                priced[deployment] = price(resolve(deployment))
            except QuotacalcError as error:
                # Named at the value's origin: a flag's error is the flag's, whichever pool took it first.
                own = f"{at}pools.{pool.name}.deployment." if platform else ""
                within = f"{at}pools[{index}].deployment" if platform else None
                namer = key_namer(origins[pool.name], own)
                raise located(error, origins[pool.name], namer, source=source, within=within) from None
        result[pool.name] = priced[deployment]
    return result


def price_plan(path: str, deployment_flags: dict[str, Any] | None = None) -> PricedPlan:
    """Read the plan file at ``path`` once and price it (``deployment_flags`` override every pool's deployment)."""
    from quotacalc.inputs.plan import read_plan

    return price_read_plan(read_plan(path), deployment_flags)


def price_read_plan(read: ReadPlan, deployment_flags: dict[str, Any] | None = None) -> PricedPlan:
    """A plan already read, priced: pools, policy, warnings, calibration and origins."""
    from quotacalc.core.policy import build_policy

    flags = {key: value for key, value in (deployment_flags or {}).items() if value is not None}
    plan = read.plan
    origins = _origins(read, flags)
    prices = price_pools(
        plan, flags, source=read.source, platform=read.platform, document=read.document, at=read.at, origins=origins
    )
    if not read.platform:
        from quotacalc.core.policy import pool_max_context_tokens
        from quotacalc.inputs.plan import fit_flat_tier

        (replica,) = prices.values()  # a flat plan is one pool
        plan = fit_flat_tier(plan, pool_max_context_tokens(replica), replica.kv_pool_tokens_at_context)
    pool_warnings = {
        name: (*replica.pricing_warnings, *_local_model_warning(replica)) for name, replica in prices.items()
    }
    calibrated: dict[str, Any] = {name: (None, None) for name in prices}
    if any(section is not None for section in read.calibrations.values()):
        from quotacalc.core.calibrate import calibration_status

        for name, replica in prices.items():
            calibrated[name] = calibration_status(read.calibrations.get(name), replica.inputs)
    return PricedPlan(
        source=read.source,
        document=read.document,
        platform=read.platform,
        plan=plan,
        prices=prices,
        policy=build_policy(plan, prices),
        warnings={name: tuple(line.worded() for line in lines) for name, lines in pool_warnings.items() if lines},
        pricing_warnings={name: lines for name, lines in pool_warnings.items() if lines},
        calibrations=read.calibrations,
        calibrated=calibrated,
        origins=origins,
        flags=flags,
        at=read.at,
    )


def _local_model_warning(replica: Any) -> tuple[PricingWarning, ...]:
    """A pool priced from a local config whose engine files would load that path: say where to name the real one."""
    deployment = replica.inputs.deployment
    if not replica.inputs.local_model or deployment.serve_model is not None:
        return ()
    return (
        PricingWarning(
            field="serve_model",
            problem=f"the model is the local config '{deployment.model}', which the engine files load as their "
            "model: set the deployment's serve_model to its hub id or the weights' path on the engine's host",
        ),
    )
