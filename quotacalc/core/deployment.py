"""The value types the core computes on: a deployment (how one replica serves a model) and a tenant's traffic.

Every assumption (efficiencies, ceiling, prices, memory reserve) is a field here with a documented
default; nothing the core uses is a buried constant. Loading them from files and flags is
``quotacalc.inputs.deployment``'s job.
"""

from enum import Enum
from functools import lru_cache
from typing import TYPE_CHECKING, Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from quotacalc.catalog.kernels import MXFP4_MOE_PADDING

if TYPE_CHECKING:
    from quotacalc.catalog.engines import EngineProfile

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
#: Bytes a logit holds in the profiling sampler: no sampler keeps a kilobyte per vocabulary entry (vLLM's take 15-39).
MAX_SAMPLER_BYTES_PER_LOGIT = 1_000
MAX_BURST_S = 366 * 86_400  # a year
#: Bytes one logit occupies at the peak of vLLM's profiling sampler run when its top-k/top-p sorts the
#: vocabulary (the PyTorch sampler): the fp32 logits, the temperature-scaled copy, the sorted values (4 B) and
#: int64 indices (8 B), softmax and cumulative probabilities, masks. vLLM's profile_run samples
#: min(max_num_seqs, max_num_batched_tokens) requests over the whole vocabulary after the forward pass
#: (gpu_model_runner._dummy_sampler_run). Measured, not fitted on the pool points: vLLM 0.11's 'peak activation'
#: on H100 at 1,024 sequences is 4.76 GiB for Llama 3.1 8B (128,256 tokens), 5.64 GiB for Qwen3-32B (151,936)
#: and 7.38 GiB for gpt-oss (201,088): 38.9, 38.9 and 38.5 B a logit (llm-d/llm-d-benchmark
#: empirical-vllm-memory-results.md). Where top-k/top-p does not sort (FlashInfer's sampler, logged as 'Using
#: FlashInfer for top-p & top-k sampling.'), vLLM 0.19's 'torch peak memory increase' on H100 at 1,024 sequences
#: is 1.89 GiB for Llama 3.1 8B and 2.21 GiB for Qwen2.5-7B (152,064 tokens): 15.5 and 15.2 B a logit, about
#: 15.4 (llm-d-incubation/llm-d-planner accuracy/accuracy_report.md); give it as sampler_bytes_per_logit.
VLLM_SAMPLER_BYTES_PER_LOGIT = 39.0
#: An engine overhead (per step, sequence or request) or an all-reduce of a minute is no engine's.
MAX_OVERHEAD_S = 60
#: One routed-expert slot of one MoE layer costs microseconds (2 us fitted); a millisecond each is a unit slip.
MAX_MOE_SLOT_OVERHEAD_S = 1e-3
#: An eager prefill costs about a millisecond a layer on SGLang (docs/accuracy.md); 10 ms a layer is a unit slip.
MAX_PREFILL_LAYER_OVERHEAD_S = 1e-2
#: The engine profile that changes no default (vLLM, NIM / TensorRT-LLM: what the defaults were fitted on).
GENERIC_ENGINE = "generic"
#: vLLM's default gpu-memory-utilization: the share of GPU memory an engine without its own rule may use.
VLLM_MEMORY_UTILIZATION = 0.9
MAX_RPS = 10**9
MAX_TOKENS_PER_REQUEST = 100_000_000

#: Strict: no booleans or floats for counts, no strings for numbers, no NaN or infinity anywhere.
_STRICT = ConfigDict(defer_build=True, frozen=True, extra="forbid", strict=True, allow_inf_nan=False)


def digit_count(value: int) -> str:
    """How many digits a (huge) whole number has, for an error that cannot print it."""
    try:
        return str(len(str(value)))
    except ValueError:  # Python will not print an integer of more than 4,300 digits
        return "more than 4,300"


def _at_most(value: float, limit: float) -> float:
    if value > limit:
        shown = f"a {digit_count(value)}-digit number" if isinstance(value, int) and value > 10**20 else value
        raise ValueError(f"must be at most {limit:,}, got {shown}")
    return value


#: The smallest MFU, MBU, ceiling or memory share a deployment may state (calibrate's own bounds are above it).
MIN_EFFICIENCY = 0.01


def _fraction(value: float, *, allow_zero: bool = False) -> float:
    low_ok = value >= 0 if allow_zero else value > 0
    if not (low_ok and value <= 1):
        interval = "[0, 1]" if allow_zero else "(0, 1]"
        raise ValueError(f"must be in {interval}, got {value}")
    return value + 0.0  # -0.0 is 0: printed, it would read as a negative price


class PricingBasis(str, Enum):
    """Which decode step time drives W, the replica budget and the prices.

    ``roofline`` is docs/method.md's: max(memory, compute), what the hardware allows; the worked example's
    figures rest on it, so it is the default. ``engine`` adds what a real engine spends beside the
    roofline (per-step overhead, tensor-parallel all-reduces): what a user measures as inter-token
    latency. Both are always reported (``decode_step_s`` and ``itl_s``); the basis only picks which
    one the prices follow.
    """

    ROOFLINE = "roofline"
    ENGINE = "engine"


class KvPoolMeasuredWith(BaseModel):
    """The deployment a measured KV pool (``kv_pool_tokens``) was read on: it holds only for that one."""

    model_config = _STRICT

    model: str | None = Field(
        None, description="the model it was measured with, as --model names it (None: not recorded, not checked)"
    )
    gpu: str = Field(description="GPU catalog id or alias")
    tp: int = Field(description="tensor-parallel GPUs per replica")
    weight_dtype: str | None = Field(None, description="weight dtype; None: the checkpoint's")
    kv_dtype: str | None = Field(None, description="KV cache dtype; None: the checkpoint's")
    memory_utilization: float | None = Field(
        None,
        description="vLLM gpu-memory-utilization (SGLang mem-fraction-static); None: the engine's default",
    )
    max_num_batched_tokens: int | None = Field(
        None, description="the engine's token budget per step; None: the engine's default"
    )
    max_model_len: int | None = Field(
        None,
        description="vLLM max-model-len (the log's max_seq_len): a windowed or state model's logged pool counts "
        "requests of this length; None: not recorded, not checked",
    )
    engine: str | None = Field(
        None,
        description="the engine profile it was measured under ('quotacalc engines'); None: not recorded, not checked",
    )
    expert_parallel: bool | None = Field(
        None, description="whether MoE experts were sharded whole across the GPUs; None: not recorded, not checked"
    )
    state_dtype: str | None = Field(
        None,
        description="the recurrent state dtype of a Mamba or DeltaNet model, as the engine kept it; None: not "
        "recorded, not checked",
    )

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str | None) -> str | None:
        return None if value is None else engine_id(value)


def served_model_name(model: str) -> str:
    """The name clients send for a model an engine loads: a hub id ("org/name") as it is, a local path by its last
    component."""
    if model.startswith((".", "/", "~")) or model.count("/") > 1:
        return model.rstrip("/").rsplit("/", 1)[-1]
    return model


def not_a_flag(value: str) -> str:
    """A name the engine files pass to vLLM or SGLang as an argument's value (their config files become arguments,
    ``--model NAME``, ``--served-model-name NAME``): one starting with '-' would be read as a flag of its own
    (``--trust-remote-code``)."""
    text = value.strip()
    if text.startswith("-") or served_model_name(text).startswith("-"):
        raise ValueError(
            f"must not start with '-', nor end in a folder or file whose name does, which an engine reads as a flag, "
            f"got {text!r}"
        )
    return value


class EngineConfig(BaseModel):
    """How the engine runs the replica: the model, the GPUs and their parallelism, dtypes, the batch and context it is priced at, and the engine's memory and scheduling settings."""

    model_config = _STRICT

    model: str = Field(description="shipped model name, Hugging Face id, or path to a config")
    serve_model: str | None = Field(
        None,
        min_length=1,
        max_length=1000,
        description="the model generated engine files load, as `vllm serve` takes it: a hub id, or the weights' path "
        "on the engine's host; default: a shipped config's hub id, else --model (a local config path as given)",
    )
    gpu: str = Field(description="GPU catalog id (quotacalc gpus)")
    tp: int = Field(1, description="tensor-parallel GPUs per replica, GPUs")
    expert_parallel: bool = Field(False, description="shard MoE experts whole across the replica's GPUs")
    weight_dtype: str | None = Field(None, description="weight dtype for every parameter; default: the checkpoint's")
    kv_dtype: str | None = Field(None, description="KV cache dtype; default: the checkpoint's dtype")
    state_dtype: str | None = Field(
        None,
        description="Mamba or Gated DeltaNet SSM / recurrent state dtype (vLLM's --mamba-ssm-cache-dtype; the conv "
        "state stays at the checkpoint's dtype); default: the config's mamba_ssm_dtype where it states one (vLLM "
        "keeps it), else the checkpoint's dtype",
    )
    batch: int = Field(128, description="decode batch: sequences per decode step, sequences")
    context: int = Field(1700, description="mean context of a sequence in the decode batch, tokens")
    max_model_len: int | None = Field(
        None,
        description="the longest sequence (prompt + output) the engine admits, tokens (vLLM's --max-model-len); "
        "default: the model's maximum context. vLLM's logged KV cache size of a model with windowed or state "
        "layers counts requests of this length",
    )
    memory_utilization: float | None = Field(
        None,
        description="share of GPU memory the engine may use, a fraction in [0.01, 1] (vLLM gpu-memory-utilization, "
        "SGLang mem-fraction-static); default: the engine's, 0.9 for vLLM, SGLang's own rule by the GPU's memory, "
        "token budget, CUDA-graph batch and TP ('quotacalc engines')",
    )
    runtime_reserve_gib: float | None = Field(
        None,
        description="per-GPU activations, CUDA graphs and runtime buffers outside weights and KV, GiB; "
        "default: a model of TP, max_num_batched_tokens and max_num_seqs fitted on vLLM start-up logs",
    )
    reserve_base_gib: float = Field(
        0.13,
        description="modelled reserve per GPU beside the profiling peak: vLLM's non-torch memory on one GPU "
        "(CUDA context, allocator, cuBLAS workspaces), GiB (vLLM 0.11 logs, docs/accuracy.md)",
    )
    reserve_per_tp_doubling_gib: float = Field(
        0.41,
        description="modelled reserve per GPU added by each doubling of TP: NCCL and custom all-reduce buffers, "
        "GiB x log2(TP) (fitted on vLLM start-up logs, bench/fit_reserve.py, docs/accuracy.md)",
    )
    sampler_bytes_per_logit: float = Field(
        VLLM_SAMPLER_BYTES_PER_LOGIT,
        description="bytes one logit holds at the peak of vLLM's profiling sampler run, B: 39 where top-k/top-p "
        "sorts the vocabulary (the PyTorch sampler, vLLM 0.11's default), about 15 where it does not (FlashInfer's "
        "sampler, logged 'Using FlashInfer for top-p & top-k sampling'; vLLM 0.19) (docs/accuracy.md)",
    )
    mxfp4_moe_backend: str | None = Field(
        None,
        description="vLLM's MXFP4 MoE kernel backend (triton, marlin, flashinfer-trtllm, flashinfer-cutlass, rocm), "
        "which sets how much it pads MXFP4 experts; default: vLLM's choice for the GPU",
    )
    max_num_batched_tokens: int | None = Field(
        None,
        description="engine's token budget per step (vLLM --max-num-batched-tokens, SGLang --chunked-prefill-size); "
        "default: the engine profile's ('quotacalc engines'), else vLLM 0.10's for 'vllm serve': 8192 on GPUs of "
        "70 GiB or more except A100, else 2048",
    )
    max_num_seqs: int | None = Field(
        None,
        description="engine's cap on concurrent sequences (vLLM --max-num-seqs), bounds the full-load batch; "
        "default: vLLM 0.10's for 'vllm serve': 1024 on GPUs of 70 GiB or more except A100, else 256",
    )
    engine: str = Field(
        GENERIC_ENGINE,
        description="serving engine whose engine-model defaults apply ('quotacalc engines'): generic (vLLM, NIM / "
        "TensorRT-LLM), sglang or tensorrt-llm-pytorch; an input given explicitly still wins",
    )
    mixed_prefill: bool = Field(
        True,
        description="prefill chunks ride in decode steps (vLLM chunked prefill, TensorRT-LLM in-flight batching), so a "
        "prompt adds no prefill pass of its own to the decodes; off: each prefill costs the decodes a prefill pass's "
        "overhead (SGLang without --enable-mixed-chunk runs it apart; TensorRT-LLM's PyTorch backend runs the step "
        "that holds it eagerly)",
    )


class EfficiencyConfig(BaseModel):
    """How far the engine falls short of the roofline: utilisations and overheads, measured or fitted (quotacalc calibrate)."""

    model_config = _STRICT

    mfu: float = Field(
        0.5, description="model FLOPs utilisation in prefill (and compute-bound decode), a fraction in [0.01, 1]"
    )
    mbu: float = Field(0.75, description="memory-bandwidth utilisation in decode, a fraction in [0.01, 1]")
    step_overhead_s: float = Field(
        0.0002, description="fixed time of each engine step beside the roofline and the layers' own: scheduling, s"
    )
    layer_overhead_s: float = Field(
        3e-5,
        description="time each layer adds to every engine forward pass (decode step or prefill chunk) beside the "
        "roofline: its kernels' fixed cost, launch and ramp, a few microseconds each, s",
    )
    sequence_overhead_s: float = Field(
        0.00001,
        description="time each sequence adds to an engine step beside the roofline: its sampling, "
        "detokenisation and bookkeeping, s",
    )
    request_overhead_s: float = Field(
        0.003, description="fixed time to first token beside the prefill passes: API server, tokenizer, scheduling, s"
    )
    moe_slot_overhead_s: float = Field(
        2e-6,
        description="time each routed-expert slot (top-k) of each MoE layer adds to an engine forward pass per "
        "doubling of TP, beside the roofline: routing, token permutation, narrow expert-GEMM tiles, s",
    )
    prefill_layer_overhead_s: float = Field(
        9e-5,
        description="time each layer adds to a prefill forward pass beside the roofline: its small kernels' fixed "
        "cost (norms, rotary, attention set-up), and an eager engine's launches and rank synchronisation, s",
    )
    allreduce_latency_s: float | None = Field(
        None, description="latency of one tensor-parallel all-reduce, s; default: the GPU catalog's"
    )
    expert_skew: float = Field(
        0.0, description="MoE routing skew: Zipf exponent of expert popularity (0 to 100); 0 = uniform routing"
    )


class CommercialConfig(BaseModel):
    """What a replica costs and how much of it is sold: prices, the ceiling, the pricing basis and the full-load workload the budget is read at."""

    model_config = _STRICT

    ceiling: float = Field(0.65, description="utilisation ceiling: share of replica time sold, a fraction in [0.01, 1]")
    gpu_hour_usd: float = Field(2.5, description="price of one GPU-hour, USD")
    hours_per_month: float = Field(720, description="hours billed per month for a dedicated replica, h (at most 744)")
    pricing_basis: PricingBasis = Field(
        PricingBasis.ROOFLINE,
        strict=False,  # named in YAML and flags as a string; strict mode would want the enum itself
        description="decode step behind W, budget and prices: roofline (docs/method.md) or engine (with overheads)",
    )
    load_prompt_tokens: int | None = Field(
        None, description="prompt tokens per request of the full-load workload; default: --context"
    )
    load_output_tokens: int = Field(
        128, description="output tokens per request of the full-load workload (vllm bench serve's default)"
    )


class MeasuredPoolConfig(BaseModel):
    """A KV pool read from the engine's start-up log, and the deployment it was read on."""

    model_config = _STRICT

    kv_pool_tokens: int | None = Field(
        None, description="measured KV pool (tokens per replica); overrides the estimate"
    )
    kv_pool_measured_with: KvPoolMeasuredWith | None = Field(
        None, description="the deployment kv_pool_tokens was measured on (plan files); a run that differs is an error"
    )


class QuotaConfig(BaseModel):
    """How a tenant's quota is charged: cached prompt tokens' weight and the token bucket's depth."""

    model_config = _STRICT

    cached_prompt_weight: float = Field(
        0.1, description="units charged per prompt token served from the prefix cache, in [0, 1]"
    )
    burst_s: float = Field(60, description="token-bucket depth, s of contracted units")


_Part = TypeVar("_Part", bound=BaseModel)

#: The deployment's parts, one per concern; ``Deployment`` holds their fields flat (the flags, the plan's keys and
#: the JSON Schema are its fields).
DEPLOYMENT_PARTS = (EngineConfig, EfficiencyConfig, CommercialConfig, MeasuredPoolConfig, QuotaConfig)


# pydantic orders inherited fields from the last base to the first: the engine's come first.
class Deployment(QuotaConfig, MeasuredPoolConfig, CommercialConfig, EfficiencyConfig, EngineConfig):
    """How one replica serves a model: every part's fields, flat. Defaults are the worked example's assumptions
    (docs/method.md §7)."""

    model_config = _STRICT

    def part(self, kind: type[_Part]) -> _Part:
        """This deployment's fields of one concern (one of ``DEPLOYMENT_PARTS``), as that part."""
        return kind.model_construct(**{name: getattr(self, name) for name in kind.model_fields})

    @model_validator(mode="before")
    @classmethod
    def _engine_defaults(cls, data: Any) -> Any:
        """The engine profile's defaults for the inputs not given: an explicit value wins over the profile."""
        if not isinstance(data, dict) or not isinstance(data.get("engine"), str):
            return data
        profile = engine_profile(data["engine"])
        return data if profile is None else {**profile.defaults.given(), **data}

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, value: str) -> str:
        return engine_id(value)

    @field_validator("model", "gpu")
    @classmethod
    def _named(cls, value: str) -> str:
        if not value.strip():
            raise ValueError("must not be empty")
        return value.strip()

    @field_validator("serve_model")
    @classmethod
    def _servable_name(cls, value: str | None) -> str | None:
        # It becomes the engines' --model and the gateways' model name: no engine loads a name with a newline or NUL.
        if value is not None and (not value.strip() or any(not character.isprintable() for character in value)):
            raise ValueError("must be a hub id or a path: not empty, no control characters")
        return value if value is None else value.strip()

    @field_validator("model", "serve_model")
    @classmethod
    def _not_a_flag(cls, value: str | None) -> str | None:
        return value if value is None else not_a_flag(value)

    @field_validator("tp", "batch", "context", "load_output_tokens")
    @classmethod
    def _positive(cls, value: int) -> int:
        if value <= 0:
            raise ValueError(f"must be a positive integer, got {value}")
        return value

    @field_validator("kv_pool_tokens", "max_num_batched_tokens", "max_num_seqs", "load_prompt_tokens", "max_model_len")
    @classmethod
    def _positive_pool(cls, value: int | None) -> int | None:
        if value is not None and value <= 0:
            raise ValueError(f"must be a positive integer, got {value}")
        return value

    @field_validator("mxfp4_moe_backend")
    @classmethod
    def _mxfp4_backend(cls, value: str | None) -> str | None:
        if value is None:
            return value
        name = value.strip().lower()
        if name not in MXFP4_MOE_PADDING:
            raise ValueError(f"must be one of {', '.join(MXFP4_MOE_PADDING)}, got {value!r}")
        return name

    @field_validator("mfu", "mbu", "ceiling", "memory_utilization")
    @classmethod
    def _unit_interval(cls, value: float | None) -> float | None:
        # A share of a GPU below 1% is no deployment, and a subnormal one overflows every time and price to inf.
        if value is not None and 0 < value < MIN_EFFICIENCY:
            raise ValueError(
                f"must be in [{MIN_EFFICIENCY}, 1] (a share of the GPU; below 1% runs nothing), got {value}"
            )
        return None if value is None else _fraction(value)

    @field_validator("cached_prompt_weight")
    @classmethod
    def _weight(cls, value: float) -> float:
        return _fraction(value, allow_zero=True)

    @field_validator(
        "gpu_hour_usd",
        "runtime_reserve_gib",
        "reserve_base_gib",
        "reserve_per_tp_doubling_gib",
        "expert_skew",
        "step_overhead_s",
        "layer_overhead_s",
        "sequence_overhead_s",
        "request_overhead_s",
        "moe_slot_overhead_s",
        "prefill_layer_overhead_s",
        "allreduce_latency_s",
    )
    @classmethod
    def _non_negative(cls, value: float | None) -> float | None:
        if value is not None and value < 0:
            raise ValueError(f"must not be negative, got {value}")
        return None if value is None else value + 0.0  # -0.0 is 0: printed, it would read as a negative price

    @field_validator("hours_per_month", "burst_s", "sampler_bytes_per_logit")
    @classmethod
    def _positive_float(cls, value: float) -> float:
        if value <= 0:
            raise ValueError(f"must be positive, got {value}")
        return value

    @field_validator("*")
    @classmethod
    def _bounded(cls, value: Any, info) -> Any:
        limit = _DEPLOYMENT_LIMITS.get(info.field_name)
        return value if limit is None or value is None else _at_most(value, limit)

    @property
    def load_prompt(self) -> int:
        """Prompt tokens per request of the full-load workload."""
        return self.load_prompt_tokens if self.load_prompt_tokens is not None else self.context


def engine_id(name: str) -> str:
    """The catalog id of an engine named by id or alias; unknown, a ValueError suggesting close names."""
    profile = engine_profile(name)
    if profile is None:
        from quotacalc.catalog.engines import load_engine_catalog
        from quotacalc.errors import close_names

        engines = load_engine_catalog().engines
        names = [*engines, *(alias for engine in engines.values() for alias in engine.aliases)]
        close = close_names(name.strip().lower(), names, cutoff=0.5)
        suggestion = f"did you mean {', '.join(close)}? " if close else ""
        raise ValueError(f"unknown engine {name!r}; {suggestion}choose from {', '.join(engines)}")
    return profile.id


# The shipped catalog is read once (load_engine_catalog's own cache) and its profiles are frozen: a name's profile
# never changes, and price asks for it several times a call.
@lru_cache(maxsize=256)
def engine_profile(name: str) -> "EngineProfile | None":
    """The catalog's profile for an engine id or alias, or None."""
    from quotacalc.catalog.engines import load_engine_catalog

    return load_engine_catalog().find(name)


class Traffic(BaseModel):
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
    "max_model_len": MAX_CONTEXT_TOKENS,
    "kv_pool_tokens": MAX_POOL_TOKENS,
    "gpu_hour_usd": MAX_GPU_HOUR_USD,
    "hours_per_month": MAX_HOURS_PER_MONTH,
    "runtime_reserve_gib": MAX_RESERVE_GIB,
    "expert_skew": MAX_EXPERT_SKEW,
    "burst_s": MAX_BURST_S,
    "reserve_base_gib": MAX_RESERVE_GIB,
    "reserve_per_tp_doubling_gib": MAX_RESERVE_GIB,
    "sampler_bytes_per_logit": MAX_SAMPLER_BYTES_PER_LOGIT,
    "max_num_batched_tokens": MAX_CONTEXT_TOKENS,
    "max_num_seqs": MAX_BATCH,
    "load_prompt_tokens": MAX_CONTEXT_TOKENS,
    "load_output_tokens": MAX_CONTEXT_TOKENS,
    "step_overhead_s": MAX_OVERHEAD_S,
    "layer_overhead_s": MAX_PREFILL_LAYER_OVERHEAD_S,
    "sequence_overhead_s": MAX_OVERHEAD_S,
    "request_overhead_s": MAX_OVERHEAD_S,
    "moe_slot_overhead_s": MAX_MOE_SLOT_OVERHEAD_S,
    "prefill_layer_overhead_s": MAX_PREFILL_LAYER_OVERHEAD_S,
    "allreduce_latency_s": MAX_OVERHEAD_S,
}
