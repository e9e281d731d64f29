"""Loading a deployment and a tenant from a YAML file and/or flags into the core's typed values."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from quotacalc.core.deployment import Deployment, Tenant, digit_count
from quotacalc.errors import QuotacalcError, UsageError, close_names


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

#: Names other tools use for a field (vLLM's flags, common spellings), for "did you mean".
KEY_SYNONYMS = {
    "tensor_parallel": "tp",
    "tensor_parallel_size": "tp",
    "tensor_parallelism": "tp",
    "tp_size": "tp",
    "enable_expert_parallel": "expert_parallel",
    "max_num_seqs": "batch",
    "batch_size": "batch",
    "context_length": "context",
    "kv_cache_dtype": "kv_dtype",
    "dtype": "weight_dtype",
    "gpu_memory_utilization": "memory_utilization",
    "num_gpu_blocks": "kv_pool_tokens",
    "price_per_gpu_hour": "gpu_hour_usd",
}


def suggest_key(key: str, known: list[str]) -> str | None:
    """The known key a mistyped one most likely meant, synonyms included."""
    candidates = {name: name for name in known}
    candidates.update({synonym: target for synonym, target in KEY_SYNONYMS.items() if target in known})
    close = close_names(key.lower(), list(candidates), n=1, cutoff=0.6)
    return candidates[close[0]] if close else None


def flag_name(field: str) -> str:
    """A field's flag spelling, for errors about values that came from the command line."""
    return "--" + field.replace("_", "-")


def _nested_model(model: type[BaseModel], loc: tuple[Any, ...]) -> type[BaseModel]:
    """The model whose keys are valid at ``loc`` inside ``model`` (``model`` itself where the path leads to none)."""
    import typing

    current = model
    for part in loc:
        field = current.model_fields.get(part) if isinstance(part, str) else None
        if field is None:
            return model
        candidates = [field.annotation, *typing.get_args(field.annotation)]
        nested = next((c for c in candidates if isinstance(c, type) and issubclass(c, BaseModel)), None)
        if nested is None:
            return model
        current = nested
    return current


def _one_line_validation_error(
    error: ValidationError, model: type[BaseModel], *, source: str | None, from_flags: set[str], prefix: str = ""
) -> QuotacalcError:
    errors = error.errors()
    # A misspelt key is reported as unknown (with its likely spelling), not as the required key it was meant for.
    first = next((entry for entry in errors if entry["type"] == "extra_forbidden"), errors[0])
    field = ".".join(str(part) for part in first["loc"]) or "?"
    if first["type"] == "extra_forbidden":
        # A key inside a section (kv_pool_measured_with.foo) is judged against that section's keys.
        section = _nested_model(model, tuple(first["loc"][:-1]))
        key = str(first["loc"][-1]) if section is not model else field
        close = suggest_key(key, list(section.model_fields))
        fix = f"did you mean '{close}'?" if close else f"known keys: {', '.join(section.model_fields)}"
        return QuotacalcError(f"unknown key '{field}'", source=source, field=prefix + field, fix=fix)
    if first["type"] == "missing":
        return UsageError(
            "is required",
            source=source,
            field=flag_name(field) if not source else prefix + field,
            fix="give it in the file or as a flag",
        )
    message, fix = _problem(first)
    where = flag_name(field) if field in from_flags else prefix + field
    # An unknown name, or an empty one, is a usage error (exit 2), as an unknown GPU or model is.
    kind = UsageError if message.startswith("unknown ") or message == "must not be empty" else QuotacalcError
    return kind(message, source=None if field in from_flags else source, field=where, fix=fix)


#: pydantic's error types for a value of the wrong type, and what the value must be.
_WANTED = {
    "int_type": "an integer",
    "int_from_float": "an integer",
    "int_parsing": "an integer",
    "float_type": "a number",
    "float_parsing": "a number",
    "finite_number": "a finite number",
    "bool_type": "true or false",
    "bool_parsing": "true or false",
    "string_type": "a string",
}


def worded_message(error: Any) -> str:
    """One pydantic error entry in the house's words: 'must be a mapping', 'must be at most 1, got 1.5', never
    'Input should be ...' or a class name."""
    message = error["msg"].removeprefix("Value error, ")
    if error["type"] in ("tuple_type", "list_type"):
        return "must be a list"
    if error["type"] == "too_short":
        return f"must list at least {error.get('ctx', {}).get('min_length', 1)}"
    if error["type"] in ("model_type", "dict_type", "model_attributes_type"):
        return "must be a mapping"
    if message.startswith("Input should be"):
        value = error.get("input")
        shown = f", got {value!r}" if isinstance(value, (int, float, str, bool)) or value is None else ""
        return "must be" + message.removeprefix("Input should be") + shown
    return message


def _problem(error: Any) -> tuple[str, str | None]:
    """A validation error as 'must be ..., got ...' and a fix, for one line."""
    wanted = _WANTED.get(error["type"])
    if wanted is None:
        return worded_message(error), None
    value = error.get("input")
    if isinstance(value, int) and not isinstance(value, bool) and value > 10**20:
        # A whole number beyond a float's range (YAML's 1e400): its size is the problem, not its type.
        return f"must be a finite number, got a {digit_count(value)}-digit number", "give a realistic value"
    shown = repr(value) if len(repr(value)) <= 60 else f"a {type(value).__name__}"
    fix = None
    if isinstance(value, bool) and wanted != "true or false":
        fix = "YAML reads yes/no/on/off as true/false; write the number"
    elif isinstance(value, str) and wanted != "a string":
        fix = "write the number without quotes"
    elif isinstance(value, float) and wanted == "an integer":
        fix = "a count is a whole number"
    return f"must be {wanted}, got {shown}", fix


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
            Tenant.model_validate({"rps": 1, "prompt_tokens": 1, "output_tokens": 1, **tenant})
        except ValidationError as error:
            raise _one_line_validation_error(error, Tenant, source=path, from_flags=set(), prefix="tenant.") from None
    calibration = document.get("calibration")
    if calibration is not None:
        from quotacalc.core.calibrate import CalibrationProvenance

        try:
            calibration = CalibrationProvenance.model_validate(calibration)
        except ValidationError as error:
            from quotacalc.inputs.plan import calibration_section_error  # plan imports this module: import here

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


def build_deployment(
    file_values: dict[str, Any], flag_values: dict[str, Any], *, source: str | None, check_pool: bool = True
) -> Deployment:
    """Flags override the file; errors name the flag or the file's key.

    A measured ``kv_pool_tokens`` from the file holds only for the deployment it was measured on
    (``kv_pool_measured_with``): a run that differs is an error naming what changed, unless the
    pool itself is given on the command line.
    """
    given = {key: value for key, value in flag_values.items() if value is not None}
    try:
        deployment = Deployment.model_validate({**file_values, **given})
    except ValidationError as error:
        raise _one_line_validation_error(error, Deployment, source=source, from_flags=set(given)) from None
    try:
        if "kv_pool_tokens" in given:
            if measured_pool_mismatch(deployment) is not None:
                # The pool on the command line is this deployment's: the file's record of another one no longer
                # applies.
                deployment = deployment.model_copy(update={"kv_pool_measured_with": None})
        elif check_pool:  # (a comparison checks each deployment in its own row)
            check_measured_pool(deployment, source=source)
            check_unrecorded_pool(file_values, deployment, source=source)
    except QuotacalcError as error:
        # A value read while comparing with the record (an unknown dtype): the flag that gave it, else the file.
        if error.source is None and error.field is not None:
            if error.field in given:
                error.field = "--" + error.field.replace("_", "-")
            else:
                error.source = source
        raise
    return deployment


def _gpu_id(name: str) -> str:
    from quotacalc.catalog.gpus import load_gpu_catalog

    return load_gpu_catalog().get(name).id


def _batched_tokens(tokens: int | None, gpu: str, engine: str) -> int:
    """A token budget as the engine runs it: the given one, or the engine's default on that GPU."""
    from quotacalc.catalog.gpus import load_gpu_catalog
    from quotacalc.core.memory import default_token_budget

    return tokens if tokens is not None else default_token_budget(engine, load_gpu_catalog().get(gpu))[0]


def _memory_share(utilization: float | None, gpu: str, tp: int, tokens: int | None, engine: str) -> float:
    """A memory share as the engine runs it: the given one, or the engine's default at that GPU, TP and budget."""
    from quotacalc.catalog.gpus import load_gpu_catalog
    from quotacalc.core.memory import default_memory_utilization

    if utilization is not None:
        return utilization
    spec = load_gpu_catalog().get(gpu)
    return default_memory_utilization(engine, spec, tp, _batched_tokens(tokens, gpu, engine))[0]


def _dtype_name(name: str | None, field: str) -> str | None:
    from quotacalc.catalog.dtypes import dtype_by_name

    return None if name in (None, "auto") else dtype_by_name(name, field=field).name


@cache
def _checkpoint(model: str) -> tuple[str, bool]:
    """A model's checkpoint dtype and whether its checkpoint is quantized (read once per model)."""
    from quotacalc.inputs.resolve import load_arch

    arch, resolved = load_arch(model)
    text = resolved.config.get("text_config")
    quantized = any(
        isinstance(section, dict) and isinstance(section.get("quantization_config"), dict)
        for section in (resolved.config, text)
    )
    return arch.checkpoint_dtype, quantized


def _dtype_as_run(name: str | None, model: str, *, weights: bool, field: str) -> str:
    """A dtype as the engine runs it: unset, 'auto' and the checkpoint's own dtype are one (a quantized checkpoint's
    weights are its own whatever 16-bit dtype is named)."""
    checkpoint, quantized = _checkpoint(model)
    own = f"{checkpoint} (the checkpoint's)"
    resolved = _dtype_name(name, field)
    if resolved is None or (resolved == checkpoint and not (weights and quantized)):
        return own
    return resolved


@cache
def _state_dtype_default(model: str) -> str | None:
    """The dtype the engine keeps a model's recurrent state in unless told otherwise, or None where the model keeps
    no such state (nothing a state dtype changes)."""
    from quotacalc.inputs.resolve import config_state_dtype, load_arch

    arch, resolved = load_arch(model)
    if not arch.keeps_recurrent_state():
        return None
    configured = config_state_dtype(resolved.config)
    return configured.name if configured is not None else arch.checkpoint_dtype


@cache
def _has_experts(model: str) -> bool:
    from quotacalc.inputs.resolve import load_arch

    return bool(load_arch(model)[0].moe_layers())


def state_dtype_as_run(name: str | None, model: str, field: str = "state_dtype") -> str | None:
    """A state dtype as the engine keeps it (unset, 'auto' and the model's default are one), or None for a model
    without recurrent state."""
    default = _state_dtype_default(model)
    if default is None:
        return None
    resolved = _dtype_name(name, field)
    return f"{default} (the model's)" if resolved in (None, default) else resolved


def model_key(reference: str) -> str:
    """A model reference as a name to compare, without reading it: the last part of a hub id or path, no
    config.json, case folded (meta-llama/Llama-3.3-70B-Instruct and Llama-3.3-70B-Instruct are the same)."""
    parts = [part for part in reference.replace("\\", "/").split("/") if part]
    if parts and parts[-1].lower() == "config.json":
        parts = parts[:-1]
    return parts[-1].casefold() if parts else reference.casefold()


@cache
def model_max_context(model: str) -> int | None:
    """The longest context a model's config allows (None where it states none); read once per model."""
    from quotacalc.inputs.resolve import load_arch

    return load_arch(model)[0].max_context_tokens


#: Where a measured pool's record sits in a deployment: an error in it names the key there.
MEASURED_PREFIX = "kv_pool_measured_with."


def _pool_inputs_as_run(source: Any, model: str, engine: str, prefix: str = "") -> dict[str, Any]:
    """What a pool depends on, as the engine runs it, of a deployment or a record of one (they share these fields):
    the GPU's catalog id, TP, dtypes (unset is the checkpoint's), the memory share and token budget (unset: the
    engine's default on that GPU)."""
    return {
        "gpu": _gpu_id(source.gpu),
        "tp": source.tp,
        "weight_dtype": _dtype_as_run(source.weight_dtype, model, weights=True, field=f"{prefix}weight_dtype"),
        "kv_dtype": _dtype_as_run(source.kv_dtype, model, weights=False, field=f"{prefix}kv_dtype"),
        "memory_utilization": _memory_share(
            source.memory_utilization, source.gpu, source.tp, source.max_num_batched_tokens, engine
        ),
        "max_num_batched_tokens": _batched_tokens(source.max_num_batched_tokens, source.gpu, engine),
    }


def measured_pool_mismatch(deployment: Deployment) -> str | None:
    """Why a measured pool does not hold for this deployment (what changed since it was measured), or None."""
    measured = deployment.kv_pool_measured_with
    if deployment.kv_pool_tokens is None or measured is None:
        return None
    model = deployment.model
    now = _pool_inputs_as_run(deployment, model, deployment.engine)
    # A record without its engine (written before it was kept) is read as this deployment's engine's.
    then = _pool_inputs_as_run(measured, model, measured.engine or deployment.engine, MEASURED_PREFIX)
    if measured.engine is not None:
        now["engine"], then["engine"] = deployment.engine, measured.engine
    if measured.model is not None:
        from quotacalc.inputs.model_config import locate_model

        locate_model(deployment.model)  # an unknown model is the error to report, not a pool measured on another
        now["model"], then["model"] = model_key(deployment.model), model_key(measured.model)
    if measured.expert_parallel is not None and _has_experts(model):
        now["expert_parallel"], then["expert_parallel"] = deployment.expert_parallel, measured.expert_parallel
    if (
        measured.state_dtype is not None
        and state_dtype_as_run(measured.state_dtype, model, f"{MEASURED_PREFIX}state_dtype") is not None
    ):
        now["state_dtype"] = state_dtype_as_run(deployment.state_dtype, model)
        then["state_dtype"] = state_dtype_as_run(measured.state_dtype, model, f"{MEASURED_PREFIX}state_dtype")
    if measured.max_model_len is not None:
        # Recorded where the logged count depends on it (windowed or state layers); unset means the model's maximum.
        now["max_model_len"] = deployment.max_model_len or model_max_context(deployment.model)
        then["max_model_len"] = measured.max_model_len
    changed = [f"{key} {then[key]} -> {now[key]}" for key in now if now[key] != then[key]]
    if not changed:
        return None
    return (
        f"the measured pool of {deployment.kv_pool_tokens:,} tokens was measured on another deployment "
        f"({', '.join(changed)})"
    )


def check_measured_pool(deployment: Deployment, *, source: str | None) -> None:
    """Raise if a measured pool is used on a deployment other than the one it was measured on."""
    mismatch = measured_pool_mismatch(deployment)
    if mismatch is not None:
        raise QuotacalcError(
            mismatch,
            source=source,
            field="kv_pool_tokens",
            fix="measure the pool on this deployment, remove kv_pool_tokens to estimate it, or give --kv-pool-tokens",
        )


def unrecorded_pool_change(file_values: dict[str, Any], deployment: Deployment) -> str | None:
    """Why a file's ``kv_pool_tokens`` without ``kv_pool_measured_with`` does not hold for ``deployment`` (the file's
    values with flags or a pool's keys over them): it holds for the file's own deployment, read as the record it
    would have (model, GPU, TP, expert parallelism, dtypes, memory share, token budget, engine), each compared as the
    engine runs it;
    or None."""
    from quotacalc.core.deployment import KvPoolMeasuredWith

    pool = file_values.get("kv_pool_tokens")
    if pool is None or file_values.get("kv_pool_measured_with") is not None or deployment.kv_pool_tokens != pool:
        return None
    try:
        own = Deployment.model_validate({**file_values, "model": file_values.get("model", deployment.model)})
    except ValidationError:
        return None  # the file alone is not a deployment: the merged one was validated, and is what is priced
    record = KvPoolMeasuredWith(
        model=own.model,
        gpu=own.gpu,
        tp=own.tp,
        weight_dtype=own.weight_dtype,
        kv_dtype=own.kv_dtype,
        memory_utilization=own.memory_utilization,
        max_num_batched_tokens=own.max_num_batched_tokens,
        engine=own.engine,
        expert_parallel=own.expert_parallel,
        state_dtype=own.state_dtype or "auto",
    )
    mismatch = measured_pool_mismatch(deployment.model_copy(update={"kv_pool_measured_with": record}))
    if mismatch is None:
        return None
    return mismatch.replace("was measured on another deployment", "holds for the file's own deployment, not this one")


def check_unrecorded_pool(file_values: dict[str, Any], deployment: Deployment, *, source: str | None) -> None:
    """Raise if flags moved a file's unrecorded measured pool to another deployment (``unrecorded_pool_change``)."""
    change = unrecorded_pool_change(file_values, deployment)
    if change is not None:
        raise QuotacalcError(
            change,
            source=source,
            field="kv_pool_tokens",
            fix="remove kv_pool_tokens from the file to estimate the pool, or give --kv-pool-tokens",
        )


def build_tenant(file_values: dict[str, Any] | None, flag_values: dict[str, Any], *, source: str | None) -> Tenant:
    given = {key: value for key, value in flag_values.items() if value is not None}
    try:
        return Tenant.model_validate({**(file_values or {}), **given})
    except ValidationError as error:
        raise _one_line_validation_error(
            error, Tenant, source=source, from_flags=set(given), prefix="tenant."
        ) from None
