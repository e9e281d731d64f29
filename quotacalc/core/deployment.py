"""The value types the core computes on: a deployment (how one replica serves a model) and a tenant's traffic.

Every assumption (efficiencies, ceiling, prices, memory reserve) is a field here with a documented
default; nothing the core uses is a buried constant. Loading them from files and flags is
``quotacalc.inputs.deployment``'s job.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

GIB = 2**30

#: Upper bounds on each number: far past any real deployment, low enough that every figure stays finite
#: and every loop short. Each is documented in the field's help.
MAX_TP = 1024
MAX_BATCH = 1_000_000
MAX_CONTEXT_TOKENS = 100_000_000
MAX_POOL_TOKENS = 10**12
MAX_GPU_HOUR_USD = 1_000_000
MAX_HOURS_PER_MONTH = 744  # 31 days
MAX_RESERVE_GIB = 10_000
MAX_EXPERT_SKEW = 100
MAX_BURST_S = 366 * 86_400  # a year
MAX_RPS = 10**9
MAX_TOKENS_PER_REQUEST = 100_000_000

#: Strict: no booleans or floats for counts, no strings for numbers, no NaN or infinity anywhere.
_STRICT = ConfigDict(defer_build=True, frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


def _digits(value: int) -> str:
    try:
        return str(len(str(value)))
    except ValueError:  # Python will not print an integer of more than 4,300 digits
        return "more than 4,300"


def _at_most(value: float, limit: float) -> float:
    if value > limit:
        shown = f"a {_digits(value)}-digit number" if isinstance(value, int) and value > 10**20 else value
        raise ValueError(f"must be at most {limit:,}, got {shown}")
    return value


def _fraction(value: float, *, allow_zero: bool = False) -> float:
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value <= 1):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(f"must be in {interval}, got {value}")
    return value


class Deployment(BaseModel):
    """How one replica serves a model. Defaults are the worked example's assumptions (METHOD.md §7)."""

    model_config = _STRICT

    model: str = Field(description="shipped model name, Hugging Face id, or path to a config")
    gpu: str = Field(description="GPU catalog id (quotacalc gpus)")
    tp: int = Field(1, description="tensor-parallel GPUs per replica, GPUs")
    expert_parallel: bool = Field(False, description="shard MoE experts whole across the replica's GPUs")
    weight_dtype: str | None = Field(None, description="weight dtype for every parameter; default: the checkpoint's")
    kv_dtype: str | None = Field(None, description="KV cache dtype; default: the checkpoint's dtype")
    state_dtype: str | None = Field(None, description="Mamba state dtype; default: the checkpoint's dtype")
    batch: int = Field(128, description="decode batch: sequences per decode step, sequences")
    context: int = Field(1700, description="mean context of a sequence in the decode batch, tokens")
    mfu: float = Field(
        0.5, description="model FLOPs utilisation in prefill (and compute-bound decode), a fraction in (0, 1]"
    )
    mbu: float = Field(0.75, description="memory-bandwidth utilisation in decode, a fraction in (0, 1]")
    ceiling: float = Field(0.65, description="utilisation ceiling: share of replica time sold, a fraction in (0, 1]")
    gpu_hour_usd: float = Field(2.5, description="price of one GPU-hour, USD")
    hours_per_month: float = Field(720, description="hours billed per month for a dedicated replica, h (at most 744)")
    memory_utilization: float = Field(
        0.9, description="share of GPU memory the engine may use, a fraction in (0, 1] (vLLM gpu-memory-utilization)"
    )
    runtime_reserve_gib: float = Field(
        5.5, description="per-GPU activations, CUDA graphs and runtime buffers outside weights and KV, GiB"
    )
    kv_pool_tokens: int | None = Field(
        None, description="measured KV pool (tokens per replica); overrides the estimate"
    )
    expert_skew: float = Field(
        0.0, description="MoE routing skew: Zipf exponent of expert popularity (0 to 100); 0 = uniform routing"
    )
    cached_prompt_weight: float = Field(
        0.1, description="units charged per prompt token served from the prefix cache, in [0, 1]"
    )
    burst_s: float = Field(60, description="token-bucket depth, s of contracted units")

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

    @field_validator("*")
    @classmethod
    def _bounded(cls, value: object, info) -> object:
        limit = _DEPLOYMENT_LIMITS.get(info.field_name)
        return value if limit is None or value is None else _at_most(value, limit)

    @property
    def runtime_reserve_bytes(self) -> float:
        return self.runtime_reserve_gib * GIB


class Tenant(BaseModel):
    """A tenant's traffic on a deployment."""

    model_config = _STRICT

    rps: float = Field(description="requests per second, req/s")
    prompt_tokens: float = Field(description="mean prompt tokens per request, tokens")
    output_tokens: float = Field(description="mean output tokens per request, tokens")
    cached_fraction: float = Field(
        0.0, description="share of prompt tokens served from the prefix cache, a fraction in [0, 1]"
    )

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

    @field_validator("rps", "prompt_tokens", "output_tokens")
    @classmethod
    def _bounded(cls, value: float, info) -> float:
        return _at_most(value, MAX_RPS if info.field_name == "rps" else MAX_TOKENS_PER_REQUEST)


_DEPLOYMENT_LIMITS = {
    "tp": MAX_TP,
    "batch": MAX_BATCH,
    "context": MAX_CONTEXT_TOKENS,
    "kv_pool_tokens": MAX_POOL_TOKENS,
    "gpu_hour_usd": MAX_GPU_HOUR_USD,
    "hours_per_month": MAX_HOURS_PER_MONTH,
    "runtime_reserve_gib": MAX_RESERVE_GIB,
    "expert_skew": MAX_EXPERT_SKEW,
    "burst_s": MAX_BURST_S,
}
