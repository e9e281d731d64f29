"""Whether a measured KV pool holds for a deployment: the deployment it was measured on, compared as the engine
runs each (unset dtypes are the checkpoint's, an unset memory share or token budget the engine's default)."""

from __future__ import annotations

from functools import cache
from typing import Any

from pydantic import ValidationError

from quotacalc.core.deployment import Deployment
from quotacalc.errors import QuotacalcError


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
    from quotacalc.inputs.model_arch import load_arch

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
    from quotacalc.inputs.model_arch import config_state_dtype, load_arch

    arch, resolved = load_arch(model)
    if not arch.keeps_recurrent_state():
        return None
    configured = config_state_dtype(resolved.config)
    return configured.name if configured is not None else arch.checkpoint_dtype


@cache
def _has_experts(model: str) -> bool:
    from quotacalc.inputs.model_arch import load_arch

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
    from quotacalc.inputs.model_arch import load_arch

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
