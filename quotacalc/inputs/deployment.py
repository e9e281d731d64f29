"""The deployment and tenant inputs: a YAML file and/or flags, validated into typed objects.

Every assumption (efficiencies, ceiling, prices, memory reserve) is a field here with a documented
default; nothing the core uses is a buried constant.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from quotacalc.errors import QuotacalcError, UsageError, close_names

GIB = 2**30


def _fraction(value: float, *, allow_zero: bool = False) -> float:
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value <= 1):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(f"must be in {interval}, got {value}")
    return value


class Deployment(BaseModel):
    """How one replica serves a model. Defaults are the worked example's assumptions (METHOD.md §7)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    model: str = Field(description="shipped model name, Hugging Face id, or path to a config")
    gpu: str = Field(description="GPU catalog id (quotacalc gpus)")
    tp: int = Field(1, description="tensor-parallel GPUs per replica")
    expert_parallel: bool = Field(False, description="shard MoE experts whole across the replica's GPUs")
    weight_dtype: str | None = Field(None, description="weight dtype for every parameter; default: the checkpoint's")
    kv_dtype: str | None = Field(None, description="KV cache dtype; default: the checkpoint's dtype")
    state_dtype: str | None = Field(None, description="Mamba state dtype; default: the checkpoint's dtype")
    batch: int = Field(128, description="decode batch: sequences per decode step")
    context: int = Field(1700, description="mean context (tokens) of a sequence in the decode batch")
    mfu: float = Field(0.5, description="model FLOPs utilisation in prefill (and compute-bound decode)")
    mbu: float = Field(0.75, description="memory-bandwidth utilisation in decode")
    ceiling: float = Field(0.65, description="utilisation ceiling: share of replica time sold")
    gpu_hour_usd: float = Field(2.5, description="price of one GPU-hour, USD")
    hours_per_month: float = Field(720, description="hours billed per month for a dedicated replica")
    memory_utilization: float = Field(
        0.9, description="share of GPU memory the engine may use (vLLM gpu-memory-utilization)"
    )
    runtime_reserve_gib: float = Field(
        5.5, description="per-GPU activations, CUDA graphs and runtime buffers outside weights and KV, GiB"
    )
    kv_pool_tokens: int | None = Field(
        None, description="measured KV pool (tokens per replica); overrides the estimate"
    )
    expert_skew: float = Field(
        0.0, description="MoE routing skew: Zipf exponent of expert popularity; 0 = uniform routing"
    )
    cached_prompt_weight: float = Field(0.1, description="units charged per prompt token served from the prefix cache")
    burst_s: float = Field(60, description="token-bucket depth, in seconds of contracted units")

    @field_validator("model", "gpu")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    @field_validator("tp", "batch", "context")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError(f"must be a positive integer, got {value}")
        return value

    @field_validator("kv_pool_tokens")
    @classmethod
    def _positive_pool(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError(f"must be a positive integer, got {value}")
        return value

    @field_validator("mfu", "mbu", "ceiling", "memory_utilization")
    @classmethod
    def _unit_interval(cls, value: float) -> float:
        return _fraction(value)

    @field_validator("cached_prompt_weight")
    @classmethod
    def _weight(cls, value: float) -> float:
        return _fraction(value, allow_zero=True)

    @field_validator("gpu_hour_usd", "runtime_reserve_gib", "expert_skew")
    @classmethod
    def _non_negative(cls, value: float) -> float:
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        return value

    @field_validator("hours_per_month", "burst_s")
    @classmethod
    def _positive_float(cls, value: float) -> float:
        if value <= 0:
            raise ValueError(f"must be positive, got {value}")
        return value

    @property
    def runtime_reserve_bytes(self) -> float:
        return self.runtime_reserve_gib * GIB


class Tenant(BaseModel):
    """A tenant's traffic on a deployment."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    rps: float = Field(description="requests per second")
    prompt_tokens: float = Field(description="mean prompt tokens per request")
    output_tokens: float = Field(description="mean output tokens per request")
    cached_fraction: float = Field(0.0, description="share of prompt tokens served from the prefix cache")

    @field_validator("rps", "prompt_tokens", "output_tokens")
    @classmethod
    def _non_negative(cls, value: float) -> float:
        if value < 0:
            raise ValueError(f"must not be negative, got {value}")
        return value

    @field_validator("cached_fraction")
    @classmethod
    def _fraction_field(cls, value: float) -> float:
        return _fraction(value, allow_zero=True)


class PlanFile(BaseModel):
    """A deployment YAML file: the deployment's fields, and optionally a ``tenant`` section."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    deployment: dict[str, Any]
    tenant: dict[str, Any] | None = None


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
    "max_model_len": "context",
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


def _one_line_validation_error(
    error: ValidationError, model: type[BaseModel], *, source: str | None, from_flags: set[str], prefix: str = ""
) -> QuotacalcError:
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "?"
    if first["type"] == "extra_forbidden":
        close = suggest_key(field, list(model.model_fields))
        fix = f"did you mean '{close}'?" if close else f"known keys: {', '.join(model.model_fields)}"
        return QuotacalcError(f"unknown key '{field}'", source=source, field=prefix + field, fix=fix)
    if first["type"] == "missing":
        return UsageError(
            "is required",
            source=source,
            field=flag_name(field) if not source else prefix + field,
            fix="give it in the file or as a flag",
        )
    message = first["msg"].removeprefix("Value error, ")
    where = flag_name(field) if field in from_flags else prefix + field
    return QuotacalcError(message, source=None if field in from_flags else source, field=where)


def load_plan_file(path: str) -> PlanFile:
    """Read a deployment YAML file strictly: duplicate keys, unknown keys and bad YAML are errors."""
    file = Path(path)
    try:
        text = file.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise UsageError("no such file", source=path, fix="check the path to the deployment YAML") from None
    except OSError as error:
        raise QuotacalcError(f"cannot read: {error.strerror}", source=path) from None
    from quotacalc.inputs.yaml_strict import load_yaml_text  # PyYAML only when a file is given

    document = load_yaml_text(text, source=path)
    if document is None:
        document = {}
    if not isinstance(document, dict):
        raise QuotacalcError("expected a mapping of deployment keys", source=path)
    tenant = document.get("tenant")
    if tenant is not None and not isinstance(tenant, dict):
        raise QuotacalcError("must be a mapping (rps, prompt_tokens, ...)", source=path, field="tenant")
    deployment = {key: value for key, value in document.items() if key != "tenant"}
    model = deployment.get("model")
    if isinstance(model, str) and (beside := file.parent / model).exists() and not Path(model).is_absolute():
        # A model path in a plan file means beside the file, wherever the command runs from.
        deployment["model"] = str(beside)
    return PlanFile(deployment=deployment, tenant=tenant)


def build_deployment(file_values: dict[str, Any], flag_values: dict[str, Any], *, source: str | None) -> Deployment:
    """Flags override the file; errors name the flag or the file's key."""
    given = {key: value for key, value in flag_values.items() if value is not None}
    try:
        return Deployment.model_validate({**file_values, **given})
    except ValidationError as error:
        raise _one_line_validation_error(error, Deployment, source=source, from_flags=set(given)) from None


def build_tenant(file_values: dict[str, Any] | None, flag_values: dict[str, Any], *, source: str | None) -> Tenant:
    given = {key: value for key, value in flag_values.items() if value is not None}
    try:
        return Tenant.model_validate({**(file_values or {}), **given})
    except ValidationError as error:
        raise _one_line_validation_error(
            error, Tenant, source=source, from_flags=set(given), prefix="tenant."
        ) from None
