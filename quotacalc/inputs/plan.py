"""Reading plan files: the flat plan (one deployment, optionally one ``tenant``) and the platform plan
(pools, tiers, tenants) into ``core.plan.Plan``. Every error names the file and the YAML path
(``tenants[3].tier``) and says how to fix it.

A file with a ``pools`` key is a platform plan; anything else is a flat plan, read as a one-pool plan
whose pool is called ``default``.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from quotacalc.core.deployment import Deployment, QuotaConfig, Traffic
from quotacalc.core.plan import Oversubscription, Plan, PlanTenant, Pool, Tier, reference_problems
from quotacalc.errors import QuotacalcError, UsageError, close_names
from quotacalc.inputs.key_errors import _one_line_validation_error, suggest_key, worded_message
from quotacalc.inputs.measured_pool import check_measured_pool, check_unrecorded_pool, model_max_context
from quotacalc.inputs.origins import ValueOrigin, placed, value_origins

#: The pool a flat plan's deployment becomes.
DEFAULT_POOL = "default"
#: A flat plan's tenant, tier: names used when a flat plan is read as a Plan.
FLAT_TENANT = "tenant"
FLAT_TIER = "default"


class PlanFile(BaseModel):
    """A deployment YAML file: the deployment's fields, and optionally a ``tenant`` section."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    deployment: dict[str, Any]
    tenant: dict[str, Any] | None = None
    #: Replicas of the one pool ``check`` and ``generate`` read the file as (``price``, ``size``, ``kv`` price one).
    replicas: int = 1
    #: Where the plan's fitted values come from (``quotacalc calibrate --write``): a validated
    #: ``core.calibrate.CalibrationProvenance``, typed loosely so that reading a plan without one
    #: does not import the calibration module.
    calibration: Any = None
    #: A platform plan's pool that routes long prompts away: (its name, route_above_prompt_tokens, the long-context
    #: pool); None for a flat plan or a pool that routes nothing.
    long_routing: tuple[str, int, str] | None = None


#: A pool's most replicas (core.plan.Pool's bound), for a flat plan's ``replicas`` key.
MAX_FLAT_REPLICAS = 100_000


#: Deployment keys a platform plan sets per tier instead (one pool serves several tiers): the quota part's.
_TIER_KEYS = tuple(QuotaConfig.model_fields)


def _deployment_keys_model() -> type[BaseModel]:
    """Deployment's keys, every one optional: a pool's ``deployment`` and the plan's defaults (merged, then checked)."""
    fields: dict[str, Any] = {
        name: (field.annotation | None, Field(None, description=field.description))  # type: ignore[operator]
        for name, field in Deployment.model_fields.items()
        if name not in _TIER_KEYS
    }
    return create_model(
        "DeploymentKeys",
        __config__=ConfigDict(defer_build=True, frozen=True, extra="forbid"),
        __doc__="Deployment keys (those of a flat plan); a pool's own keys win over the plan's `deployment` defaults.",
        **fields,
    )


DeploymentKeys = _deployment_keys_model()


class PoolFile(Pool):
    """A pool as written in a plan file: its deployment may leave keys to the plan's ``deployment`` defaults."""

    deployment: DeploymentKeys = Field(  # type: ignore[valid-type]
        default_factory=DeploymentKeys,
        description="how each replica serves its model (the keys of a flat plan); merged over the plan's `deployment`",
    )
    # Typed loosely here (checked as core.calibrate.CalibrationProvenance when read), so that reading a
    # plan without one does not import the calibration module.
    calibration: dict[str, Any] | None = Field(
        None,
        description="written by `quotacalc calibrate --pool NAME --write`: where the pool's fitted values come from",
    )


class FleetMeasurement(BaseModel):
    """Where a measured oversubscription ratio comes from: written by ``quotacalc fleet --write``."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    sources: tuple[str, ...] = Field(min_length=1, description="the log files, or the database table (no password)")
    format: str = Field(description="the log format read (quotacalc, litellm, envoy, csv)")
    pool: str = Field(description="the pool whose load was measured")
    rows_used: int = Field(ge=0, description="requests counted")
    rows_read: int = Field(ge=0, description="rows read, rejected ones included")
    period_start: str = Field(description="the first request's start, RFC 3339 UTC")
    period_end: str = Field(description="the last request's end, RFC 3339 UTC")
    window_s: float = Field(gt=0, description="the window length the peaks were taken over, seconds")
    attribution: str = Field(description="spread: a request's units over its duration; start: at its start")
    measured_on: str = Field(description="the date of the measurement (UTC)")


class OversubscriptionFile(Oversubscription):
    """The plan's ``oversubscription:`` block: the ratio, a line saying where it comes from, and, when
    ``quotacalc fleet --write`` measured it, the measurement."""

    measured: FleetMeasurement | None = Field(None, description="the measurement behind the ratio (quotacalc fleet)")


class PlatformPlanFile(Plan):
    """A platform plan file: pools of replicas, tiers of service, tenants (quotacalc schema)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid", title="quotacalc platform plan")

    deployment: DeploymentKeys | None = Field(  # type: ignore[valid-type]
        None, description="deployment defaults merged under every pool's `deployment`"
    )
    pools: tuple[PoolFile, ...] = Field(min_length=1, description="pools of replicas")
    oversubscription: OversubscriptionFile | None = Field(
        None, description="measured oversubscription; none is assumed when absent"
    )

    @model_validator(mode="after")
    def _references_resolve(self) -> PlatformPlanFile:
        # Not here: _check_references checks them once the pools' deployments are read, naming the file.
        return self


def _optional_keys(model: type[BaseModel], name: str, doc: str, **extra: Any) -> type[BaseModel]:
    """``model``'s keys, every one optional (flags may give the rest), plus ``extra`` fields; unknown keys refused."""
    fields: dict[str, Any] = {
        key: (field.annotation | None, Field(None, description=field.description))  # type: ignore[operator]
        for key, field in model.model_fields.items()
    }
    return create_model(
        name, __config__=ConfigDict(defer_build=True, frozen=True, extra="forbid"), __doc__=doc, **fields, **extra
    )


def _flat_plan_file_model() -> type[BaseModel]:
    """A flat plan file as editors see it: a deployment's keys at the top level, an optional ``tenant``, the
    ``replicas`` check and generate read it with, and the ``calibration`` that calibrate writes."""
    tenant = _optional_keys(Traffic, "FlatTenantKeys", "The tenant price and size read (flags win).")

    return _optional_keys(
        Deployment,
        "FlatPlanFile",
        "A flat plan file: one deployment and optionally one tenant (quotacalc schema).",
        tenant=(tenant | None, Field(None, description="the tenant `size` sizes")),
        replicas=(
            int | None,
            Field(None, ge=1, le=MAX_FLAT_REPLICAS, description="replicas of the one pool check and generate read"),
        ),
        calibration=(
            dict[str, Any] | None,
            Field(None, description="written by `quotacalc calibrate --write`: where the fitted values come from"),
        ),
    )


def plan_json_schema() -> dict[str, Any]:
    """The JSON Schema of a plan file, platform or flat (either validates), for editors and CI linters."""
    from pydantic import TypeAdapter

    # Typed Any: pydantic's TypeForm annotation of TypeAdapter takes no union built at run time.
    either: Any = PlatformPlanFile | _flat_plan_file_model()
    schema = TypeAdapter(either).json_schema()
    return {"title": "quotacalc plan (platform or flat)", **schema}


# --- error paths -------------------------------------------------------------------------------


def yaml_path(loc: tuple[Any, ...]) -> str:
    """pydantic's ``('tenants', 3, 'tier')`` -> ``tenants[3].tier``."""
    text = ""
    for part in loc:
        if isinstance(part, int):
            text += f"[{part}]"
        else:
            text += ("." if text else "") + str(part)
    return text


def _model_at(loc: tuple[Any, ...]) -> type[BaseModel]:
    """The model whose keys are valid at a YAML path (for 'did you mean')."""
    names = [part for part in loc if isinstance(part, str)]
    if not names:
        return PlatformPlanFile
    table: dict[tuple[str, ...], type[BaseModel]] = {
        ("deployment",): Deployment,
        ("pools",): Pool,
        ("pools", "deployment"): Deployment,
        ("tiers",): Tier,
        ("tenants",): PlanTenant,
        ("tenants", "traffic"): Traffic,
        ("oversubscription",): OversubscriptionFile,
        ("oversubscription", "measured"): FleetMeasurement,
    }
    return table.get(tuple(names), PlatformPlanFile)


def _validation_error(
    error: ValidationError, *, source: str | None, base: tuple[Any, ...] = (), at: str = ""
) -> QuotacalcError:
    """The first of ``error``'s problems as one line at its YAML path (after ``at``: ``plan.`` in a scenario)."""
    errors = error.errors()
    # A misspelt key is reported as unknown (with its likely spelling), not as the required key it was meant for.
    first = next((entry for entry in errors if entry["type"] == "extra_forbidden"), errors[0])
    loc = base + tuple(first["loc"])
    if first["type"] == "extra_forbidden":
        key = str(loc[-1])
        model = _model_at(loc[:-1])
        known = [name for name in model.model_fields if name not in (_TIER_KEYS if model is Deployment else ())]
        close = suggest_key(key, known)
        fix = f"did you mean '{close}'?" if close else f"known keys: {', '.join(known)}"
        return QuotacalcError(f"unknown key '{key}'", source=source, field=at + yaml_path(loc), fix=fix)
    if first["type"] == "missing":
        return QuotacalcError("is required", source=source, field=at + yaml_path(loc))
    message = worded_message(first)
    if first["type"] == "string_pattern_mismatch" and "lora_adapters" in loc:
        message = (
            f"'{first['input']}' is not a valid adapter name (no space, '=', comma or quote, at most 256 "
            "characters: engines split their adapter lists on them)"
        )
    elif first["type"] == "string_pattern_mismatch":
        # A pool's name is a Kubernetes Service's too: it must start with a letter.
        start = "a letter first, " if loc[:1] == ("pools",) else ""
        message = f"'{first['input']}' is not a valid name ({start}lower-case letters, digits and '-', at most 63)"
    return QuotacalcError(message, source=source, field=at + yaml_path(loc))


def _non_finite(
    value: Any, loc: tuple[Any, ...] = (), seen: set[int] | None = None
) -> tuple[tuple[Any, ...], float] | None:
    """The first NaN or infinity in a YAML document, with its path (pydantic lets them through some fields).

    A mapping or list that aliases reach several times is the same object: walked once, so the walk grows with the
    file, not with what its aliases expand to."""
    if isinstance(value, float) and not math.isfinite(value):
        return loc, value
    if not isinstance(value, (dict, list)):
        return None
    seen = set() if seen is None else seen
    if id(value) in seen:
        return None
    seen.add(id(value))
    items = value.items() if isinstance(value, dict) else enumerate(value)
    for key, item in items:
        if found := _non_finite(item, (*loc, key), seen):
            return found
    return None


# --- reading -------------------------------------------------------------------------------------


def load_plan_file(path: str) -> PlanFile:
    """Read a deployment YAML file strictly: duplicate keys, unknown keys and bad YAML are errors."""
    from quotacalc.inputs.yaml_strict import load_yaml_text, read_text_file  # PyYAML only when a file is given

    text = read_text_file(Path(path), what="deployment YAML")
    return plan_file_from_document(load_yaml_text(text, source=path), path)


def refuse_scenario(document: object, path: str) -> None:
    """A simulate scenario given where a plan goes: say so, not that its first key is unknown to a deployment."""
    if isinstance(document, dict) and "workload" in document and "pools" not in document:
        raise QuotacalcError(
            "is a simulate scenario, not a plan",
            source=path,
            fix=f"run quotacalc simulate {path}; give price, size, check, generate and emulate the plan its plan key "
            "names or holds",
        )


def plan_file_from_document(document: object, path: str) -> PlanFile:
    """A flat plan's parsed YAML as its deployment keys, tenant and calibration (the file read once)."""
    refuse_scenario(document, path)
    file = Path(path)
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise QuotacalcError("expected a mapping of deployment keys", source=path)
    tenant = document.get("tenant")
    if tenant is not None and not isinstance(tenant, dict):
        raise QuotacalcError("must be a mapping (rps, prompt_tokens, ...)", source=path, field="tenant")
    if tenant:
        # Checked for every command, not only size: a plan file is valid or not whatever reads it. A key it leaves
        # out may come from a flag (size --rps), so only the keys it gives are judged here.
        try:
            Traffic.model_validate({"rps": 1, "prompt_tokens": 1, "output_tokens": 1, **tenant})
        except ValidationError as error:
            raise _one_line_validation_error(error, Traffic, source=path, from_flags=set(), prefix="tenant.") from None
    calibration = document.get("calibration")
    if calibration is not None:
        from quotacalc.core.calibrate import CalibrationProvenance

        try:
            calibration = CalibrationProvenance.model_validate(calibration)
        except ValidationError as error:
            raise calibration_section_error(error, source=path, prefix="calibration.") from None
    replicas = document.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or not 1 <= replicas <= MAX_FLAT_REPLICAS:
        raise QuotacalcError(
            f"must be a whole number of replicas from 1 to {MAX_FLAT_REPLICAS:,}, got {replicas!r}",
            source=path,
            field="replicas",
            fix="the replicas check and generate size the plan's one pool with",
        )
    deployment = {key: value for key, value in document.items() if key not in ("tenant", "calibration", "replicas")}
    if "model" in deployment:
        deployment["model"] = model_beside(deployment["model"], file)
    return PlanFile(deployment=deployment, tenant=tenant, calibration=calibration, replicas=replicas)


def model_beside(model: Any, plan_file: str | Path) -> Any:
    """A plan's relative model path as the path beside the plan file where one is there, wherever the command runs
    from; anything else (a shipped name, a hub id, an absolute path) as written."""
    if not isinstance(model, str) or not model.strip() or Path(model).is_absolute():
        return model  # an empty name is the Deployment's to refuse, not the plan's own folder
    beside = Path(plan_file).parent / model
    try:
        return str(beside) if beside.exists() else model
    except (OSError, ValueError):  # a name too long, a NUL byte: not a file beside the plan
        return model


def read_document(path: str) -> dict[str, Any]:
    """A plan file's YAML mapping, read strictly (duplicate keys and bad YAML are errors)."""
    from quotacalc.inputs.text_file import read_text_file

    # A regular UTF-8 file of bounded size: a FIFO, a device or a huge file is an error, not a hang.
    return document_from_text(read_text_file(Path(path), what="plan"), path)


def document_from_text(text: str, path: str) -> dict[str, Any]:
    """``text`` read as the plan file at ``path`` would be (its errors name ``path``; relative model paths resolve
    beside it): how a plan's new text is read back before it replaces the file."""
    document = _parsed_yaml(text, path)
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise QuotacalcError("expected a mapping (deployment keys, or pools/tiers/tenants)", source=path)
    refuse_scenario(document, path)
    if document and not _names_plan_keys(document):
        # Not a plan at all (a .env read as YAML): its keys are not shown, they may be secrets.
        raise QuotacalcError(
            "names none of a plan's keys (model, gpu, ..., or pools, tiers, tenants): is it a plan file?",
            source=path,
            fix="see quotacalc examples",
        )
    return document


def _names_plan_keys(document: dict[str, Any]) -> bool:
    """Whether ``document`` names any key a plan file may have: a platform plan's or a deployment's answer for
    most files without building the flat plan's model (about 1% of a price call)."""
    common = PlatformPlanFile.model_fields.keys() | Deployment.model_fields.keys()
    return any(key in common for key in document) or not _plan_keys().isdisjoint(document)


def _plan_keys() -> frozenset[str]:
    """Every key a plan file may have at its top level, flat or platform."""
    return frozenset(PlatformPlanFile.model_fields) | frozenset(_flat_plan_file_model().model_fields)


def _parsed_yaml(text: str, path: str) -> Any:
    """The strict YAML parse of ``text``, cached on disk by content: a plan read again is not parsed again, and
    PyYAML is not imported. Only a parse that JSON keeps exactly is cached (no dates, no NaN), so the cached
    document is the parse itself; a file that does not parse is parsed, and refused, every time."""
    import json

    from quotacalc.cache import cache_key, read_entry, write_entry

    # The loader's own file in the key: a change to its rules parses every plan again.
    loader = Path(__file__).with_name("yaml_strict.py").stat()
    key = cache_key(text.encode("utf-8"), f"plan-yaml-{loader.st_size}-{loader.st_mtime_ns}")
    cached = read_entry("plans", key)
    if isinstance(cached, dict) and "document" in cached:
        return cached["document"]
    from quotacalc.inputs.yaml_strict import load_yaml_text

    document = load_yaml_text(text, source=path)
    try:
        kept = json.loads(json.dumps(document, allow_nan=False)) == document
    except (TypeError, ValueError, RecursionError):
        kept = False
    if kept:
        write_entry("plans", key, {"document": document})
    return document


def is_platform(document: dict[str, Any]) -> bool:
    """A platform plan has pools; a flat plan is deployment keys and an optional tenant."""
    return "pools" in document


def _merged_deployment(document: dict[str, Any], index: int, path: str) -> dict[str, Any]:
    defaults = document.get("deployment") or {}
    own = document["pools"][index].get("deployment") or {}
    merged = {**defaults, **own}
    if "model" in merged:
        merged["model"] = model_beside(merged["model"], path)
    return merged


def _pool_names(document: dict[str, Any]) -> list[str]:
    return [str(pool.get("name")) for pool in document.get("pools") or [] if isinstance(pool, dict)]


def deployment_source(path: str, pool: str | None, document: dict[str, Any] | None = None) -> PlanFile:
    """The deployment keys (and flat tenant) ``price``, ``size`` and ``kv`` read from a plan file (``document``:
    the file as already read, if it was).

    Flat plans as before; a platform plan gives the named pool's deployment merged over the defaults
    (``--pool`` may be left out when the plan has one pool).
    """
    if document is None:
        document = read_document(path)
    if not is_platform(document):
        if pool not in (None, DEFAULT_POOL):
            raise UsageError(
                f"a flat plan has one pool, '{DEFAULT_POOL}'", source=path, field="--pool", fix="drop --pool"
            )

        return plan_file_from_document(document, path)
    file = _validate_file(document, path)
    names = [pool_file.name for pool_file in file.pools]
    if pool is None:
        if len(names) > 1:
            raise UsageError(
                f"the plan has {len(names)} pools", source=path, field="--pool", fix=f"name one of: {', '.join(names)}"
            )
        pool = names[0]
    if pool not in names:
        close = close_names(pool, names, n=1)
        hint = f"did you mean '{close[0]}'?" if close else f"pools: {', '.join(names)}"
        raise UsageError(f"no pool '{pool}' in the plan", source=path, field="--pool", fix=hint)
    index = names.index(pool)
    values = _merged_deployment(document, index, path)
    entry = file.pools[index]
    routing = None
    if entry.route_above_prompt_tokens is not None and entry.long_context_pool is not None:
        routing = (pool, entry.route_above_prompt_tokens, entry.long_context_pool)
    return PlanFile(
        deployment=values, tenant=None, calibration=pool_calibration(file, index, path), long_routing=routing
    )


def pool_calibration(file: PlatformPlanFile, index: int, path: str) -> Any:
    """The ``calibration:`` section of pool ``index``, validated (a CalibrationProvenance), or None."""
    section = file.pools[index].calibration
    if section is None:
        return None
    from quotacalc.core.calibrate import CalibrationProvenance

    try:
        return CalibrationProvenance.model_validate(section)
    except ValidationError as error:
        raise calibration_section_error(
            error, source=path, prefix=f"pools[{index}].calibration.", pool=file.pools[index].name
        ) from None


def calibration_section_error(
    error: ValidationError, *, source: str, prefix: str, pool: str | None = None
) -> QuotacalcError:
    """A ``calibration:`` section that is not as ``calibrate --write`` wrote it, as one line (exit 1).

    No flag gives a key of it, and hand-filling one would forge the provenance: the fix is to drop the section or
    write it again. ``prefix`` is the section's YAML path and a dot; ``pool`` the pool's name in a platform plan."""
    from quotacalc.core.calibrate import CalibrationProvenance
    from quotacalc.inputs.key_errors import _WANTED, _one_line_validation_error, _problem

    errors = error.errors()
    if any(entry["type"] == "extra_forbidden" for entry in errors):
        # A misspelt key: named with its likely spelling (which is the fix).
        return _one_line_validation_error(error, CalibrationProvenance, source=source, from_flags=set(), prefix=prefix)
    first = errors[0]
    # 'must be a string, got 1' for a value of the wrong type; 'is required', 'must be a list' ... for the rest.
    problem = _problem(first)[0] if first["type"] in _WANTED else _validation_error(error, source=source).problem
    field = prefix + yaml_path(tuple(first["loc"])) if first["loc"] else prefix.removesuffix(".")
    command = f"quotacalc calibrate --pool {pool} --write {source}" if pool else f"quotacalc calibrate --write {source}"
    return QuotacalcError(
        problem, source=source, field=field, fix=f"delete the calibration section, or re-run {command}"
    )


def _validate_file(document: dict[str, Any], path: str, at: str = "") -> PlatformPlanFile:
    """The platform plan file validated; an error names its YAML path, after ``at`` (``plan.`` in a scenario)."""
    if found := _non_finite(document):
        loc, value = found
        raise QuotacalcError(f"must be a finite number, got {value}", source=path, field=at + yaml_path(loc))
    pools = document.get("pools")
    sections = [("deployment", document.get("deployment"))] + [
        (f"pools[{index}].deployment", pool.get("deployment") if isinstance(pool, dict) else None)
        for index, pool in enumerate(pools if isinstance(pools, list) else [])
    ]
    for where, section in sections:
        for tier_key in _TIER_KEYS:
            if isinstance(section, dict) and tier_key in section:
                raise _tier_key_error(path, f"{at}{where}.{tier_key}")
    try:
        return PlatformPlanFile.model_validate(document)
    except ValidationError as error:
        raise _validation_error(error, source=path, at=at) from None


def _tier_key_error(path: str, field: str) -> QuotacalcError:
    key = field.rsplit(".", 1)[-1]
    return QuotacalcError(
        "is a tier setting in a platform plan (one pool serves several tiers)",
        source=path,
        field=field,
        fix=f"set {key} on each tier",
    )


def pool_origins(
    document: dict[str, Any], index: int, *, source: str, flags: Mapping[str, Any] | None = None, at: str = ""
) -> dict[str, ValueOrigin]:
    """Where each deployment value of pool ``index`` of a platform plan comes from, recorded from the document as
    read: a flag (``flags``), the pool's own key, or the plan's top-level ``deployment:`` it inherits; ``at``, where
    the plan sits in the file (``plan.``: a scenario's embedded plan)."""
    entry = document["pools"][index]
    return value_origins(
        Deployment.model_fields,
        flags or {},
        own=entry.get("deployment") or {},
        inherited=document.get("deployment") or {},
        source=source,
        written=f"{at}pools.{entry.get('name')}.deployment.",
        at=f"{at}pools[{index}].deployment.",
        inherited_written=f"{at}deployment.",
    )


def _check_references(
    plan: PlatformPlanFile, pools: list[Pool], path: str, origins: dict[str, dict[str, ValueOrigin]], at: str = ""
) -> None:
    """References between entries (``reference_problems``), then what needs the models: each pool's model resolves,
    and a routing threshold is below the context both its pools serve. ``origins``: pool name -> where each of its
    deployment values was read, where an error about one is placed."""
    for problem in reference_problems(pools, plan.tiers, plan.tenants):
        field = at + problem.field if problem.field else at.removesuffix(".") or None
        raise QuotacalcError(problem.problem, source=path, field=field, fix=problem.fix)
    measured_pool = plan.oversubscription.pool if plan.oversubscription else None
    if measured_pool is not None and measured_pool not in {pool.name for pool in pools}:
        raise QuotacalcError(
            f"names pool '{measured_pool}', which the plan does not have",
            source=path,
            field=f"{at}oversubscription.pool",
            fix=f"name one of {', '.join(pool.name for pool in pools)}, or measure again (quotacalc fleet --write)",
        )
    for index, pool in enumerate(pools):
        try:
            _context_limit(pool)  # the model resolves: an unknown model is named here, with its pool
        except QuotacalcError as error:
            raise placed(error, origins[pool.name], source=path, within=f"{at}pools[{index}].deployment") from None
    by_name = {pool.name: pool for pool in pools}
    for index, pool in enumerate(pools):
        if pool.long_context_pool is None or pool.route_above_prompt_tokens is None:
            continue
        threshold = pool.route_above_prompt_tokens
        for serving in (pool, by_name[pool.long_context_pool]):
            limit = _context_limit(serving)
            if limit is not None and threshold >= limit:
                raise QuotacalcError(
                    f"{threshold} is not below the longest context pool '{serving.name}' serves ({limit} tokens)",
                    source=path,
                    field=f"{at}pools[{index}].route_above_prompt_tokens",
                    fix="route above a prompt length both pools serve",
                )


def _context_limit(pool: Pool) -> int | None:
    """The longest context a pool serves, as far as the plan file can tell: the model's max, a measured pool, the
    engine's max_model_len."""
    deployment = pool.deployment
    limits = [
        value
        for value in (model_max_context(deployment.model), deployment.kv_pool_tokens, deployment.max_model_len)
        if value
    ]
    return min(limits) if limits else None


def read_platform_plan(document: dict[str, Any], path: str, at: str = "") -> Plan:
    """A platform plan document -> Plan, every reference checked; ``at``: where the plan sits in the file at
    ``path`` (``plan.``: a scenario's embedded plan), which every error's YAML path starts with."""
    return _read_platform(document, path, at).plan


class _PlatformRead(NamedTuple):
    """A platform plan as read: the plan, its file as validated, and where each pool's deployment values were read."""

    plan: Plan
    file: PlatformPlanFile
    #: Pool name -> deployment key -> its origin.
    origins: dict[str, dict[str, ValueOrigin]]


def _read_platform(document: dict[str, Any], path: str, at: str = "") -> _PlatformRead:
    """A platform plan document read, every value's origin recorded and every reference checked."""
    file = _validate_file(document, path, at)
    pools = []
    origins: dict[str, dict[str, ValueOrigin]] = {}
    for index, pool_file in enumerate(file.pools):
        values = _merged_deployment(document, index, path)
        recorded = origins[pool_file.name] = pool_origins(document, index, source=path, at=at)
        within = f"{at}pools[{index}].deployment"
        try:
            deployment = Deployment.model_validate(values)
        except ValidationError as error:
            # Worded for the bare key, then placed where its value was read (the pool's key, or the one it inherits).
            problem = _validation_error(error, source=None)
            if problem.problem == "is required":
                problem.fix = "give it in the pool's deployment or in the plan's top-level deployment"
            raise placed(problem, recorded, source=path, within=within) from None
        try:
            check_measured_pool(deployment, source=None)
            # The plan's pool without a record holds for the plan's deployment, not for a pool that changes it.
            check_unrecorded_pool(document.get("deployment") or {}, deployment, source=None)
        except QuotacalcError as error:
            raise placed(error, recorded, source=path, within=within) from None
        pools.append(
            Pool.model_validate(
                {**pool_file.model_dump(exclude={"deployment", "calibration"}), "deployment": deployment}
            )
        )
    _check_references(file, pools, path, origins, at)
    plan = Plan(
        pools=tuple(pools),
        tiers=file.tiers,
        tenants=file.tenants,
        public_prefixes=file.public_prefixes,
        oversubscription=(
            Oversubscription(
                ratio=file.oversubscription.ratio,
                source=file.oversubscription.source,
                pool=file.oversubscription.pool,
            )
            if file.oversubscription
            else None
        ),
        tenant_header=file.tenant_header,
    )
    return _PlatformRead(plan, file, origins)


def flat_plan(flat: PlanFile, path: str) -> Plan:
    """A flat plan as a one-pool Plan: pool ``default`` of its ``replicas`` (one unless the file says); its
    tenant (if any) is ``tenant``.

    The tenant's tier is synthesised from the deployment (documented in docs/plans.md): the model's max
    context capped by max_model_len (and, once the pool is priced, by its KV: ``fit_flat_tier``), a KV cap of one
    such sequence, the decode batch as its concurrency, the deployment's burst and cached weight, priority 0; its
    cache is shared (no secret needed).
    """
    from quotacalc.inputs.deployment import build_deployment, build_traffic

    deployment = build_deployment(flat.deployment, {}, source=path)
    pool = Pool(name=DEFAULT_POOL, deployment=deployment, replicas=flat.replicas)
    if flat.tenant is None:
        return Plan(pools=(pool,))
    tenant = build_traffic(flat.tenant, {}, source=path)
    # The engine admits no longer sequence than its max_model_len (what the pool's KV holds is fitted once priced).
    limits = [limit for limit in (model_max_context(deployment.model), deployment.max_model_len) if limit]
    max_context = min(limits) if limits else deployment.context
    tier = Tier(
        name=FLAT_TIER,
        max_context_tokens=max_context,
        kv_cap_tokens_per_replica=max_context,
        max_concurrent_sequences=deployment.batch,
        max_output_tokens=max_context,
        priority=0,
        burst_s=deployment.burst_s,
        cached_prompt_weight=deployment.cached_prompt_weight,
    )
    return Plan(
        pools=(pool,),
        tiers=(tier,),
        tenants=(_flat_tenant(tenant, path),),
    )


def fit_flat_tier(plan: Plan, served_tokens: int, held_tokens: int) -> Plan:
    """A flat plan's synthesised tier within what its pool serves: ``served_tokens`` the longest sequence (the
    model's maximum, capped by max_model_len and the KV pool), ``held_tokens`` the KV a replica holds of requests at
    the pool's context. The file has no tier to fix, so the tier takes the pool's limits, as ``price`` and ``size``
    of the same file do."""
    tier = next((tier for tier in plan.tiers if tier.name == FLAT_TIER), None)
    if tier is None:
        return plan
    # The KV cap counts a window model's tokens at the pool's context: a longer max context than it would never be
    # admitted, so the tier's context is the smaller of the two.
    longest = min(tier.max_context_tokens, served_tokens, held_tokens)
    fitted = tier.model_copy(
        update={
            "max_context_tokens": longest,
            "kv_cap_tokens_per_replica": min(tier.kv_cap_tokens_per_replica, longest),
            "max_output_tokens": min(tier.max_output_tokens, longest),
        }
    )
    if fitted == tier:
        return plan
    return plan.model_copy(update={"tiers": tuple(fitted if entry is tier else entry for entry in plan.tiers)})


def _flat_tenant(traffic: Traffic, path: str) -> PlanTenant:
    """A flat plan's tenant as the one-pool plan's; an error names the file's ``tenant`` section."""
    try:
        return PlanTenant(name=FLAT_TENANT, tier=FLAT_TIER, traffic=traffic, cache_isolation="shared")
    except ValidationError as error:
        message = error.errors()[0]["msg"].removeprefix("Value error, ")
        raise QuotacalcError(message, source=path, field="tenant") from None


@dataclass(frozen=True)
class ReadPlan:
    """A plan file read once: its YAML mapping as written, the Plan it reads as (a flat plan as one pool,
    ``default``), and each pool's ``calibration:`` section (a CalibrationProvenance or None)."""

    source: str
    document: dict[str, Any]
    plan: Plan
    platform: bool
    calibrations: dict[str, Any]
    #: Where the plan sits in its file: ``plan.`` for a scenario's embedded plan, else nothing.
    at: str = ""
    #: Pool name -> deployment key -> where its value was read (no flags yet); empty where the reader kept none.
    origins: dict[str, dict[str, ValueOrigin]] = dataclasses.field(default_factory=dict)


def read_plan(path: str, document: dict[str, Any] | None = None) -> ReadPlan:
    """Any plan file as a ``ReadPlan``; ``document``, the file's mapping when it has been read already."""
    if document is None:
        document = read_document(path)
    if is_platform(document):
        plan, file, origins = _read_platform(document, path)
        sections = {pool.name: pool_calibration(file, index, path) for index, pool in enumerate(file.pools)}
        return ReadPlan(path, document, plan, True, sections, origins=origins)
    flat = plan_file_from_document(document, path)
    recorded = value_origins(Deployment.model_fields, {}, own=document, source=path)
    return ReadPlan(
        path, document, flat_plan(flat, path), False, {DEFAULT_POOL: flat.calibration}, origins={DEFAULT_POOL: recorded}
    )


def load_plan(path: str) -> tuple[Plan, bool]:
    """Any plan file as a Plan, and whether it was a platform plan."""
    read = read_plan(path)
    return read.plan, read.platform


def is_platform_file(path: str) -> bool:
    """Whether a plan file is a platform plan (has ``pools``)."""
    return is_platform(read_document(path))
