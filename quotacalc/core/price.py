"""Deployment -> token costs, weights, KV pool, replica budget and prices (docs/method.md §1, §2, §6).

The figures come from the numeric replica model (``core/replica.py``); this module renders each
of them as an explained step (formula, substituted inputs, value), section by section: weights,
KV, compute, decode, engine, pool, prices. ``pricing_basis`` picks which decode step the prices
follow: docs/method.md's roofline (default) or the engine's (roofline + overheads).
"""

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal, TypeVar, cast

from pydantic import BaseModel, ConfigDict

from quotacalc.catalog.gpus import GpuSpec
from quotacalc.core import kv_groups, memory
from quotacalc.core.arch import ModelArch, ParamGroup, TokenMixer
from quotacalc.core.deployment import GENERIC_ENGINE, Deployment, PricingBasis, engine_profile
from quotacalc.core.explain import Ledger, Step, fmt
from quotacalc.core.figures import derived_keys, record_derived
from quotacalc.core.pricing_inputs import PricingInputs
from quotacalc.core.pricing_warning import PricingError, PricingWarning, flag_words
from quotacalc.core.replica import (
    EngineCompute,
    ReplicaModel,
    engine_compute,
    expected_busiest_rank_experts,
    expected_distinct_experts,
    replica_model,
    routed_expert_slots,
)
from quotacalc.core.weights import (
    WeightLayout,
    engine_padding_bytes_per_gpu,
    engine_read,
    replicated_extra_bytes_per_gpu,
    vllm_default_mxfp4_backend,
)
from quotacalc.errors import QuotacalcError

if TYPE_CHECKING:
    from quotacalc.catalog.engines import EngineProfile, StaticMemoryFraction

SECONDS_PER_HOUR = 3600

__all__ = [
    "ExpertTraffic",
    "PriceResult",
    "PricingInputs",
    "check_parallelism",
    "expected_busiest_rank_experts",
    "expected_distinct_experts",
    "price",
]


class ExpertTraffic(BaseModel):
    """Experts one decode step reads in an MoE layer."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    moe_layers: int
    num_experts: int
    top_k: int
    expected_experts_touched: float
    expert_bytes: float


class PriceResult(BaseModel):
    """A deployment's figures, in SI units (seconds, bytes, USD), with the steps that produced them.

    ``decode_step_s`` is docs/method.md's roofline step; ``itl_s`` the engine's (what a user measures as
    inter-token latency at that batch). ``output_weight`` and the prices follow ``pricing_basis``.
    """

    model_config = ConfigDict(defer_build=True, frozen=True)

    total_params: int
    active_params: int
    weight_bytes: float
    weight_bytes_per_gpu: float
    kv_bytes_per_token: float
    kv_bytes_per_token_per_gpu: float
    state_bytes_per_sequence: float
    #: KV a token costs in sliding-window and local-chunk layers while inside their window (0 when every layer grows).
    window_kv_bytes_per_token: float
    peak_flops_per_gpu: float
    #: What the stated MFU is multiplied by on this GPU and dtype (PricingInputs.mfu_scale).
    mfu_scale: float
    compute_dtype: str
    effective_bandwidth_per_gpu: float
    prompt_token_s: float
    attention_flops_per_prompt_token: float
    prompt_token_at_context_s: float
    decode_weight_bytes_per_gpu: float
    decode_kv_bytes_per_gpu: float
    decode_memory_s: float
    decode_compute_s: float
    decode_bound: Literal["memory", "compute"]
    decode_step_s: float
    #: Batch the decode figures are at: --batch, or the largest the KV pool holds when that is smaller.
    decode_batch: int
    #: What the MoE layers add to each forward pass beside the roofline (0 for dense models).
    moe_overhead_s: float
    decode_overhead_s: float
    allreduce_s: float
    #: Weight bytes an engine's decode step reads per GPU (decode_weight_bytes_per_gpu less what it skips).
    engine_decode_weight_bytes_per_gpu: float
    #: decode_compute_s without FLOPs for the embedding table, which an engine gathers.
    engine_decode_compute_s: float
    #: decode_step_s over the weights an engine reads and the FLOPs it computes (itl_s without its overheads).
    engine_decode_step_s: float
    itl_s: float
    #: FLOPs of one prompt token in an engine's prefill before attention (no embedding or LM head matmul).
    engine_flops_per_prompt_token: float
    #: What each prefill pass adds beside the roofline: layers × prefill_layer_overhead_s.
    prefill_overhead_s: float
    engine_prompt_token_s: float
    ttft_s: float
    pricing_basis: Literal["roofline", "engine"]
    output_token_s: float
    output_weight: float
    replica_units_per_s: float
    max_num_batched_tokens: int
    #: The share of GPU memory the engine may use: given, or the engine's default (vLLM 0.9, SGLang's rule).
    memory_utilization: float
    runtime_reserve_bytes_per_gpu: float
    kv_pool_bytes_per_gpu: float
    kv_pool_tokens: int
    kv_pool_source: Literal["measured", "estimated"]
    max_resident_sequences: int
    #: Tokens the pool holds when it is filled with sequences of --context: kv_pool_tokens where every layer's cache
    #: grows with the context; max_resident_sequences × context where some layers hold a window or a fixed state,
    #: which a short sequence pays in full (kv_pool_tokens is vLLM's count at max_model_len). What the tiers' KV
    #: caps and the simulator count tokens against.
    kv_pool_tokens_at_context: int
    load_prompt_tokens: int
    load_output_tokens: int
    max_load_batch: int
    max_load_output_tokens_per_s: float
    dedicated_usd_per_month: float
    usd_per_unit: float
    usd_per_million_prompt_tokens: float
    usd_per_million_cached_prompt_tokens: float
    usd_per_million_output_tokens: float
    expert_traffic: ExpertTraffic | None
    #: Units one GPU-hour sells at the ceiling (core/figures.py derives it).
    units_per_gpu_hour: float
    steps: tuple[Step, ...]
    warnings: tuple[str, ...]
    #: The warnings as data: each one's key, problem and fix, for a reader that names keys where they were set.
    pricing_warnings: tuple[PricingWarning, ...] = ()
    inputs: PricingInputs


def larger_pool_fixes(inputs: PricingInputs, *first: str) -> str:
    """The fixes for a pool too small, as one clause: ``first``, raising TP, an FP8 KV cache unless it is one
    already (advice to use the dtype in use helps nobody)."""
    return PricingWarning(field="", problem="", fix=_larger_pool_fix(inputs, *first)).worded_fix(flag_words)


def _larger_pool_fix(inputs: PricingInputs, *first: str) -> str:
    """``larger_pool_fixes`` as a fix template (``first`` may name keys: ``lower {batch}``)."""
    fixes = [*first, "raise {tp}"]
    if inputs.kv_dtype.bytes_per_element > 1:
        fixes.append("use {kv_dtype=fp8}")
    return ", ".join(fixes[:-1]) + (", or " if len(fixes) > 2 else " or ") + fixes[-1]


def check_parallelism(arch: ModelArch, deployment: Deployment) -> None:
    """TP must split every layer evenly (heads, Mamba channels); EP must split the experts."""
    tp = deployment.tp
    mixers = [mixer for mixer, _ in arch.mixer_groups()]
    for mixer in mixers:
        if problem := mixer.tp_problem(tp):
            # Every size up to 64 GPUs (eight 8-GPU nodes), not only powers of two: 10 KV heads split over 5.
            valid = [size for size in range(1, 65) if not any(m.tp_problem(size) for m in mixers)]
            raise QuotacalcError(
                f"{tp} {problem} of {arch.name}", field="tp", fix=f"valid: {', '.join(map(str, valid))}"
            )
    if deployment.expert_parallel:
        for moe in arch.moe_layers():
            if moe.num_experts % tp:
                raise QuotacalcError(
                    f"expert parallelism over {tp} GPUs does not split {moe.num_experts} experts evenly",
                    field="expert_parallel",
                    fix="choose a TP that divides the experts, or turn expert parallelism off",
                )
        if not arch.moe_layers():
            raise PricingError(
                f"{arch.name} has no experts to shard", field="expert_parallel", fix="drop {expert_parallel}"
            )


def _check_inputs(inputs: PricingInputs) -> None:
    arch, gpu, deployment = inputs.arch, inputs.gpu, inputs.deployment
    check_parallelism(arch, deployment)
    moe_layers = arch.moe_layers()
    if moe_layers:
        shape = moe_layers[0]
        if any(
            (m.num_experts, m.top_k, m.expert_params()) != (shape.num_experts, shape.top_k, shape.expert_params())
            for m in moe_layers
        ):
            raise QuotacalcError(f"{arch.name}: MoE layers of different shapes are not priced yet", field="model")
    if not gpu.supports(inputs.weights.compute_dtype):
        raise QuotacalcError(
            f"{gpu.name} has no tensor cores for {inputs.weights.compute_dtype}",
            field="weight_dtype",
            fix="choose another weight dtype",
        )
    if arch.max_context_tokens and deployment.context > arch.max_context_tokens:
        raise QuotacalcError(
            f"{deployment.context:,} tokens exceed {arch.name}'s maximum context of {arch.max_context_tokens:,}",
            field="context",
            fix=f"use a context of at most {arch.max_context_tokens:,} tokens",
        )
    if deployment.max_model_len is not None:
        if arch.max_context_tokens and deployment.max_model_len > arch.max_context_tokens:
            raise QuotacalcError(
                f"{deployment.max_model_len:,} tokens exceed {arch.name}'s maximum context of "
                f"{arch.max_context_tokens:,} (vLLM refuses a longer max_model_len)",
                field="max_model_len",
                fix=f"at most {arch.max_context_tokens:,} tokens, or leave it out for the model's maximum",
            )
        if deployment.context > deployment.max_model_len:
            raise QuotacalcError(
                f"a context of {deployment.context:,} tokens exceeds max_model_len {deployment.max_model_len:,}",
                field="context",
                fix=f"use a context of at most {deployment.max_model_len:,} tokens, or raise max_model_len",
            )


#: A recorded figure keeps its own type: a count stays an int.
_Figure = TypeVar("_Figure", int, float)


@dataclass
class _Explainer:
    """What every section reads (inputs, the replica model) and writes (the ledger, figures, warnings)."""

    inputs: PricingInputs
    ledger: Ledger = field(default_factory=Ledger)
    figures: dict = field(default_factory=dict)
    warnings: list[PricingWarning] = field(default_factory=list)
    model: ReplicaModel | None = None

    def record(self, name: str, value: _Figure, **kwargs) -> _Figure:
        self.figures[name] = value
        self.ledger.record(name, value, **kwargs)
        return value


# --------------------------------------------------------------------------- sections


def _weights_section(x: _Explainer) -> None:
    arch, deployment, layout = x.inputs.arch, x.inputs.deployment, x.inputs.weights
    total, active = arch.total_params(), arch.active_params()
    x.record(
        "total_params",
        total,
        formula="Σ_group parameters (tied embeddings once)",
        substituted=_group_terms(arch.params_by_group()),
        unit="params",
    )
    x.record(
        "active_params",
        active,
        formula="Σ_group parameters a text token runs through (top-k routed experts; vision tower idle)",
        substituted=_group_terms(arch.active_params_by_group()),
        unit="params",
    )
    params_by_group = arch.params_by_group()
    weight_bytes = x.record(
        "weight_bytes",
        layout.weight_bytes(params_by_group),
        formula="Σ_group params × bytes/param",
        substituted=_weight_terms(layout, params_by_group),
        unit="B",
        note=f"dtypes: {layout.source}",
    )
    padding = engine_padding_bytes_per_gpu(arch, layout, deployment, x.inputs.gpu)
    replicated = replicated_extra_bytes_per_gpu(arch, layout, deployment.tp)
    if not padding and not replicated:
        x.record(
            "weight_bytes_per_gpu",
            weight_bytes / deployment.tp,
            formula="weight_bytes / TP",
            substituted=f"{fmt(weight_bytes)} / {deployment.tp}",
            unit="B",
        )
        return
    notes = []
    if replicated:
        replicated_bytes = layout.weight_bytes(arch.replicated_params_by_group())
        kinds = "MLA latent down-projections, MoE routers"
        labels = dict.fromkeys(mixer.replicated_label() for mixer, _ in arch.mixer_groups())
        kinds += "".join(f", {label}" for label in labels if label)
        if any(layer.per_layer_input_params for layer in arch.layers):
            kinds += ", Gemma 4's per-layer input gates and projections"
        notes.append(
            f"{fmt(replicated_bytes)} B of layers the engine keeps whole on every rank ({kinds}: "
            "ReplicatedLinear in vLLM and SGLang) add (1 − 1/TP) of themselves"
        )
    if padding:
        backend = deployment.mxfp4_moe_backend or vllm_default_mxfp4_backend(x.inputs.gpu.id, x.inputs.gpu.vendor)
        notes.append(f"vLLM's {backend} MoE backend rounds the experts' sizes up for its kernels (core/weights.py)")
    x.record(
        "weight_bytes_per_gpu",
        weight_bytes / deployment.tp + replicated + padding,
        formula="weight_bytes / TP + replicated layers' full copies + the engine's padding of MXFP4 experts",
        substituted=f"{fmt(weight_bytes)} / {deployment.tp} + {fmt(replicated)} + {fmt(padding)}",
        unit="B",
        note="; ".join(notes),
    )


def _kv_section(x: _Explainer) -> None:
    inputs = x.inputs
    arch, tp = inputs.arch, inputs.deployment.tp
    kv_b, state_b = inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element
    kv_per_token = memory.kv_bytes_per_token(arch, kv_b)
    growing = [(mixer, n) for mixer, n in arch.mixer_groups() if mixer.grows_with_context()]
    kv_elements = sum(n * mixer.cache_elements_per_token() for mixer, n in growing)
    substituted = (
        f"{sum(n for _, n in growing)} layers, {fmt(kv_elements)} values × {fmt(kv_b)} B ({inputs.kv_dtype.name})"
    )
    if kv_per_token != kv_elements * kv_b:
        substituted += f", in the engine's layout {fmt(kv_per_token)} B"
    x.record(
        "kv_bytes_per_token",
        kv_per_token,
        formula="Σ_growing layers cached values per token × kv_dtype_bytes (2 × kv_heads × head_dim for attention)",
        substituted=substituted,
        unit="B",
        note=memory.cost_rules(arch),
    )
    x.record(
        "kv_bytes_per_token_per_gpu",
        memory.kv_bytes_per_token_per_gpu(arch, kv_b, tp),
        formula="per rank: kv_heads split over TP (one replicated head per rank below that); MLA latent whole",
        substituted=f"{fmt(kv_per_token)} over TP {tp}",
        unit="B",
    )
    windowed = memory.window_kv_bytes_per_token(arch, kv_b)
    x.figures["window_kv_bytes_per_token"] = windowed
    if windowed:
        groups = _windowed_groups(arch, kv_b)
        windows = sorted(
            {term.bound_tokens for mixer, _ in groups for term in mixer.context_terms(kv_b, tp) if term.bound_tokens}
        )
        x.record(
            "window_kv_bytes_per_token",
            windowed,
            formula="Σ_windowed layers cached values per token × kv_dtype_bytes, while the token is inside the window",
            substituted=" + ".join(
                f"{n} × {fmt(m.cache_bytes_per_token(kv_b) / kv_b)} × {fmt(kv_b)} ({inputs.kv_dtype.name})"
                for m, n in groups
            ),
            unit="B",
            note=f"{sum(n for _, n in groups)} layers keep at most {' or '.join(f'{w:,}' for w in windows)} tokens "
            "a sequence (sliding windows, local chunks)",
        )
    state = memory.state_bytes_per_sequence(arch, state_b)
    x.figures["state_bytes_per_sequence"] = state
    if not state and inputs.deployment.state_dtype not in (None, "auto"):
        x.warnings.append(
            PricingWarning(
                field="state_dtype",
                problem=f"state_dtype {inputs.deployment.state_dtype} changes nothing: {arch.name} keeps no "
                "recurrent state (Mamba, linear attention, short convolution)",
                fix="remove {state_dtype}",
            )
        )
    if state:
        x.record(
            "state_bytes_per_sequence",
            state,
            formula="Σ_state layers ((d_conv − 1) × conv_channels × checkpoint dtype bytes + SSM or recurrent state × "
            "state_dtype_bytes)",
            substituted=_state_substituted(arch, state, state_b, inputs.state_dtype.name),
            unit="B",
        )


def _windowed_groups(arch: ModelArch, kv_b: float) -> list[tuple[TokenMixer, int]]:
    """The layer kinds whose KV stops at a window (not a fixed state), with their counts."""
    return [(m, n) for m, n in arch.mixer_groups() if not m.grows_with_context() and m.cache_bytes_per_token(kv_b)]


def _group_terms(params_by_group: Mapping[ParamGroup, int]) -> str:
    """'525,336,576 (embedding) + ...': each group's parameters, as params_by_group in the JSON."""
    return " + ".join(f"{fmt(params)} ({group.value})" for group, params in params_by_group.items() if params)


def _state_substituted(arch: ModelArch, state: float, state_b: float, dtype_name: str) -> str:
    values = memory.state_elements_per_sequence(arch)
    rules = list(dict.fromkeys(mixer.state_layout_rule() for mixer, _ in arch.mixer_groups()))
    if any(rules):
        # A kind that keeps its state in a fixed layout (DeepSeek V4's fp8_ds_mla window, float32 compressors).
        return f"{fmt(values)} values: {'; '.join(rule for rule in rules if rule)}: {fmt(state)} B"
    text = f"{fmt(values)} values × {fmt(state_b)} B ({dtype_name})"
    if state != values * state_b:
        # The conv state stays at the checkpoint's dtype (vLLM's mamba_cache_dtype), and Kimi Delta Attention's
        # recurrent state is fp32 whatever the state dtype (as vLLM keeps it).
        text += f", the conv state at the checkpoint's {arch.checkpoint_dtype} and KDA's recurrent state at fp32: {fmt(state)} B"
    return text


def _pool_section(x: _Explainer) -> float:
    """The KV pool per GPU: measured, or what memory_utilization × HBM leaves after weights and the reserve."""
    inputs = x.inputs
    arch, gpu, deployment = inputs.arch, inputs.gpu, inputs.deployment
    reserve = memory.runtime_reserve(arch, deployment, gpu)
    x.figures["max_num_batched_tokens"] = reserve.max_num_batched_tokens
    if reserve.given:
        x.record(
            "runtime_reserve_bytes_per_gpu",
            reserve.total_bytes,
            formula="runtime_reserve_gib (given)",
            substituted=f"{fmt(cast(float, deployment.runtime_reserve_gib))} GiB",
            unit="B",
        )
    elif reserve.static_fraction:
        x.record(
            "runtime_reserve_bytes_per_gpu",
            reserve.total_bytes,
            formula="reserve_base + reserve_per_tp_doubling × log2(TP)",
            substituted=f"{fmt(reserve.base_bytes)} + {fmt(reserve.tp_comm_bytes)}",
            unit="B",
            note=f"{deployment.engine} keeps activations and CUDA graphs outside memory_utilization (its "
            "mem_fraction_static); base and per-doubling terms are its profile's (quotacalc engines)",
        )
    else:
        source = memory.token_budget(deployment, gpu)[1]
        x.record(
            "runtime_reserve_bytes_per_gpu",
            reserve.total_bytes,
            formula="reserve_base + reserve_per_tp_doubling × log2(TP) + max(max_num_batched_tokens × "
            "(4 × ffn_width / TP + 6 × hidden) × 2 B, min(max_num_seqs, max_num_batched_tokens) × vocab × "
            f"{fmt(deployment.sampler_bytes_per_logit)} B)",
            substituted=f"{fmt(reserve.base_bytes)} + {fmt(reserve.tp_comm_bytes)} + max("
            f"{fmt(reserve.max_num_batched_tokens)} ({source}) × "
            f"{fmt(memory.activation_bytes_per_token_per_gpu(arch, deployment.tp))}, "
            f"{fmt(reserve.sampler_bytes)})",
            unit="B",
            note="base and per-doubling terms fitted on vLLM start-up logs (docs/accuracy.md); the last term is the "
            "profiling run's peak: the forward pass's activations or the sampler's logits, whichever is larger",
        )
    weight_bytes_per_gpu = x.figures["weight_bytes_per_gpu"]
    utilization, utilization_source = memory.memory_utilization(deployment, gpu)
    x.figures["memory_utilization"] = utilization
    usable = x.record(
        "kv_pool_bytes_estimate_per_gpu",
        utilization * gpu.memory_bytes - weight_bytes_per_gpu - reserve.total_bytes,
        formula="memory_utilization × HBM − weight_bytes_per_gpu − runtime_reserve_bytes_per_gpu",
        substituted=f"{utilization} ({utilization_source}) × {fmt(gpu.memory_bytes)} − {fmt(weight_bytes_per_gpu)} − "
        f"{fmt(reserve.total_bytes)}",
        unit="B",
        note=_static_fraction_note(deployment, gpu)
        if deployment.memory_utilization is None and memory.sizes_pool_by_static_fraction(deployment.engine)
        else None,
    )
    kv_b, state_b = inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element
    layout = kv_groups.hybrid_layout(arch, kv_b, state_b, deployment.tp)
    if layout is not None:
        return _hybrid_pool_section(x, layout, usable)
    request_per_gpu = memory.request_kv_bytes_per_gpu(arch, deployment.context, kv_b, state_b, deployment.tp)
    pool_token_bytes = x.figures["kv_bytes_per_token_per_gpu"] or request_per_gpu / deployment.context
    if deployment.kv_pool_tokens is not None:
        pool_tokens = _measured_pool_tokens(x, deployment.kv_pool_tokens)
        return _pool_that_fits(x, pool_tokens * pool_token_bytes)
    if usable <= 0:
        _no_pool(x)
    x.figures["kv_pool_source"] = "estimated"
    x.record(
        "kv_pool_tokens",
        math.floor(usable / pool_token_bytes),
        formula="kv_pool_bytes_per_gpu / kv_bytes_per_token_per_gpu",
        substituted=f"{fmt(usable)} / {fmt(pool_token_bytes)}",
        unit="tokens",
    )
    return usable


def _static_fraction_note(deployment: Deployment, gpu: GpuSpec) -> str:
    """How the engine's default memory share was reached: its reserved MiB, term by term."""
    # Called only for an engine whose profile has the rule (default_memory_utilization's source).
    rule = cast("StaticMemoryFraction", cast("EngineProfile", engine_profile(deployment.engine)).static_memory_fraction)
    tokens, source = memory.token_budget(deployment, gpu)
    graph_batch = rule.graph_batch(gpu.memory_bytes, deployment.tp)
    reserved = rule.reserved_mib(gpu.memory_bytes, deployment.tp, tokens)
    memory_mib = gpu.memory_bytes / 2**20
    return (
        f"{deployment.engine}'s mem_fraction_static = round((memory − reserved) / memory, 3), reserved = "
        f"{fmt(rule.base_mib)} + {fmt(rule.per_batched_token_mib)} × max({fmt(tokens)} ({source}), "
        f"{fmt(rule.min_batched_tokens)}) + {fmt(rule.per_graph_sequence_mib)} × {graph_batch} (CUDA-graph batch) + "
        f"{fmt(rule.per_tp_rank_mib)} × {deployment.tp} (TP), at least {fmt(rule.floor_mib)} above "
        f"{fmt(rule.floor_above_gib)} GiB = {fmt(reserved)} MiB of {fmt(memory_mib)} MiB"
    )


def _no_pool(x: _Explainer) -> None:
    inputs = x.inputs
    deployment = inputs.deployment
    weights = x.figures["weight_bytes_per_gpu"]
    share = x.figures["memory_utilization"]
    # Where the weights take under half the GPU, what leaves no pool is the share or the reserve the user set.
    set_share = deployment.memory_utilization is not None and weights >= share * inputs.gpu.memory_bytes
    if weights < inputs.gpu.memory_bytes / 2 and (set_share or deployment.runtime_reserve_gib is not None):
        field = "memory_utilization" if set_share else "runtime_reserve_gib"
        raise PricingError(
            f"{share:g} of {inputs.gpu.id}'s {inputs.gpu.memory_bytes / 1e9:.1f} GB less {weights / 1e9:.1f} GB of "
            f"weights and {x.figures['runtime_reserve_bytes_per_gpu'] / 1e9:.1f} GB of runtime reserve per GPU leave "
            "no KV pool",
            field=field,
            fix="raise {memory_utilization}"
            if set_share
            else "lower {runtime_reserve_gib} or raise {memory_utilization}",
        )
    raise PricingError(
        f"{inputs.arch.name} does not fit: {weights / 1e9:.1f} GB of weights per GPU leave no KV pool on "
        f"{inputs.gpu.id}",
        field="tp",
        fix="raise {tp}, use a smaller {weight_dtype}, or a larger GPU",
    )


def _kinds_substituted(layout: kv_groups.KvGroupLayout) -> str:
    return " + ".join(f"ceil({cache.layers} / {layout.group_layers})" for cache in layout.types)


def _kinds_named(layout: kv_groups.KvGroupLayout) -> str:
    return ", ".join(
        f"{cache.layers} {cache.kind.value}" + (f" (window {cache.window_tokens:,})" if cache.window_tokens else "")
        for cache in layout.types
    )


def _block_substituted(layout: kv_groups.KvGroupLayout) -> str:
    state = max((c.state_bytes for c in layout.types if c.kind is kv_groups.CacheKind.STATE), default=0.0)
    if not state:
        return f"{kv_groups.VLLM_BLOCK_TOKENS}"
    full = [c for c in layout.types if c.kind is kv_groups.CacheKind.FULL] or [
        c for c in layout.types if c.kind is not kv_groups.CacheKind.STATE
    ]
    align = kv_groups.block_align_tokens(list(layout.types))
    return (
        f"max({kv_groups.VLLM_BLOCK_TOKENS}, {align} × ceil({state:.0f} / ({align} × {full[0].bytes_per_token:.0f})))"
    )


def _page_substituted(layout: kv_groups.KvGroupLayout) -> str:
    attention = [c for c in layout.types if c.kind is not kv_groups.CacheKind.STATE]
    if not attention:
        return f"{layout.page_bytes:.0f}"
    widest = max(attention, key=lambda c: c.block_tokens * c.bytes_per_token)
    return f"{widest.block_tokens} × {widest.bytes_per_token:.0f}"


def _blocks_substituted(layout: kv_groups.KvGroupLayout, tokens: int, batched_tokens: int) -> str:
    terms = []
    for cache in layout.types:
        groups, block = layout.groups_of(cache), cache.block_tokens
        if cache.kind is kv_groups.CacheKind.FULL:
            terms.append(f"{groups} × ceil({tokens:,} / {block})")
        elif cache.kind is kv_groups.CacheKind.SLIDING:
            terms.append(
                f"{groups} × (ceil(min({cache.window_tokens} − 1 + {batched_tokens:,}, {tokens:,}) / {block}) + 1)"
            )
        elif cache.kind is kv_groups.CacheKind.CHUNKED:
            terms.append(f"{groups} × ceil(min({cache.window_tokens} + {batched_tokens:,}, {tokens:,}) / {block})")
        else:
            terms.append(f"{groups} × 1")
    return " + ".join(terms)


def vllm_max_model_len(arch: ModelArch, deployment: Deployment) -> int:
    """The engine's max_model_len: the deployment's, else vLLM's default, the model's maximum context (the
    deployment's context if it states none)."""
    if deployment.max_model_len is not None:
        return deployment.max_model_len
    return arch.max_context_tokens or deployment.context


def _hybrid_pool_section(x: _Explainer, layout: kv_groups.KvGroupLayout, usable: float) -> float:
    """The pool of a model whose layers keep more than one kind of cache, in vLLM's hybrid manager's blocks
    (core/kv_groups.py): kv_pool_tokens is its logged 'GPU KV cache size', max_resident_sequences the
    sequences of --context its blocks hold while they decode."""
    inputs = x.inputs
    arch, gpu, deployment = inputs.arch, inputs.gpu, inputs.deployment
    batched = memory.max_num_batched_tokens(deployment, gpu)
    max_model_len = vllm_max_model_len(arch, deployment)
    x.figures["kv_group_layout"] = layout
    x.record(
        "kv_cache_groups",
        layout.groups,
        formula="Σ_kinds ceil(layers of the kind / layers per group); layers per group = the fewest of one kind, "
        "or the most when under 1.5 × the fewest",
        substituted=f"{_kinds_substituted(layout)}",
        unit="groups",
        note=f"{_kinds_named(layout)} layers; vLLM's hybrid KV cache manager "
        "(kv_cache_utils._get_kv_cache_groups_uniform_page_size): every group draws blocks of one page size from one pool",
    )
    x.record(
        "kv_block_tokens",
        layout.min_block_tokens,
        formula="16, or with state layers 16 × ceil(state_bytes_per_layer / (16 × full-attention bytes per token "
        "per layer)) so one attention page holds one sequence's state",
        substituted=_block_substituted(layout),
        unit="tokens",
        note="HybridAttentionMambaModelConfig.verify_and_update_config; smaller attention pages raise their block "
        "size to the largest page (unify_kv_cache_spec_page_size)",
    )
    x.record(
        "kv_page_bytes_per_gpu",
        layout.page_bytes,
        formula="block × bytes per token of one layer (the largest over the kinds; state pages padded to it)",
        substituted=_page_substituted(layout),
        unit="B",
    )
    if deployment.kv_pool_tokens is not None:
        pool_tokens = _measured_pool_tokens(x, deployment.kv_pool_tokens)
        blocks = layout.blocks_for_logged_tokens(pool_tokens, max_model_len, batched)
        x.record(
            "kv_pool_blocks",
            blocks,
            formula="ceil(kv_pool_tokens × blocks_per_request(max_model_len) / max_model_len)",
            substituted=f"ceil({fmt(pool_tokens)} × {layout.blocks_per_request(max_model_len, batched)} / {max_model_len:,})",
            unit="blocks",
        )
        return _pool_that_fits(x, blocks * layout.bytes_per_block)
    if usable <= 0:
        _no_pool(x)
    x.figures["kv_pool_source"] = "estimated"
    blocks = x.record(
        "kv_pool_blocks",
        layout.num_blocks(usable),
        formula="floor(kv_pool_bytes_estimate_per_gpu / kv_page_bytes_per_gpu / layers per group)",
        substituted=f"floor({fmt(usable)} / {fmt(layout.page_bytes)} / {layout.group_layers})",
        unit="blocks",
        note="kv_cache_utils.get_num_blocks",
    )
    per_request = x.record(
        "kv_blocks_per_request",
        layout.blocks_per_request(max_model_len, batched),
        formula="Σ_groups blocks of one max_model_len request: full ceil(L / block), sliding ceil(min(window − 1 + "
        "max_num_batched_tokens, L) / block) + 1, chunked ceil(min(chunk + max_num_batched_tokens, L) / block), "
        "state 1 page",
        substituted=_blocks_substituted(layout, max_model_len, batched),
        unit="blocks",
        note=f"L = max_model_len = {max_model_len:,} "
        + ("(given)" if deployment.max_model_len else "(vLLM's default: the model's maximum context)"),
    )
    groups_rule = layout.logged_tokens(blocks, max_model_len, batched, rule=kv_groups.TokenCountRule.BLOCKS_PER_GROUP)
    x.record(
        "kv_pool_tokens",
        layout.logged_tokens(blocks, max_model_len, batched),
        formula="floor(kv_pool_blocks / kv_blocks_per_request × max_model_len)",
        substituted=f"floor({fmt(blocks)} / {per_request} × {max_model_len:,})",
        unit="tokens",
        note="vLLM 0.21+'s 'GPU KV cache size' (maximum concurrency × max_model_len); vLLM 0.10-0.20 logged "
        f"kv_pool_blocks // kv_cache_groups × block = {groups_rule:,}",
    )
    return usable


def _pool_that_fits(x: _Explainer, pool_bytes_per_gpu: float) -> float:
    """A measured or given pool, refused where it and the weights need more than the GPU's memory: it was
    measured on another deployment (a larger GPU, a higher TP) or mistyped."""
    inputs = x.inputs
    weights = x.figures["weight_bytes_per_gpu"]
    if pool_bytes_per_gpu + weights > inputs.gpu.memory_bytes:
        raise QuotacalcError(
            f"a pool of {inputs.deployment.kv_pool_tokens:,} tokens needs {pool_bytes_per_gpu / 1e9:,.1f} GB of KV "
            f"per GPU beside {weights / 1e9:,.1f} GB of weights, more than {inputs.gpu.id}'s "
            f"{inputs.gpu.memory_bytes / 1e9:,.1f} GB",
            field="kv_pool_tokens",
            fix="give the pool measured on this deployment (GPU, TP, dtypes), or leave it out to estimate it",
        )
    return pool_bytes_per_gpu


def _measured_pool_tokens(x: _Explainer, kv_pool_tokens: int) -> float:
    """Record a measured pool (--kv-pool-tokens) as the pool's figure."""
    x.figures["kv_pool_source"] = "measured"
    return x.record(
        "kv_pool_tokens",
        kv_pool_tokens,
        formula="measured (--kv-pool-tokens)",
        substituted=f"{fmt(kv_pool_tokens)}",
        unit="tokens",
    )


def _compute_section(x: _Explainer) -> None:
    inputs, model = x.inputs, x.model
    assert model is not None
    deployment, layout = inputs.deployment, inputs.weights
    tp, context = deployment.tp, deployment.context
    peak = inputs.gpu.peak_flops_per_s(layout.compute_dtype)
    x.figures["peak_flops_per_gpu"] = peak
    dtype, efficiency = layout.compute_dtype, inputs.gpu.matmul_efficiency.get(layout.compute_dtype)
    x.record(
        "mfu_scale",
        inputs.mfu_scale,
        formula="matmul_efficiency(GPU, compute_dtype) / matmul_efficiency(MFU reference)",
        substituted="1" if efficiency is None else f"{efficiency} / {efficiency / inputs.mfu_scale:.4g}",
        unit="",
        note=f"the share of its {dtype} peak the {inputs.gpu.id}'s best matmul reaches, over the H100 SXM's at FP8 "
        "where MFU is stated (catalog/gpus.yaml, docs/method.md)"
        + (f"; no measured {dtype} matmul efficiency for this GPU" if efficiency is None else ""),
    )
    rate = f"({tp} × {fmt(peak)} ({layout.compute_dtype}) × {deployment.mfu} × {inputs.mfu_scale:.4g})"
    x.figures["compute_rate"] = rate
    x.record(
        "prompt_token_s",
        model.flops_per_token / model.compute_flops_per_s,
        formula="2 × active_params / (TP × peak_flops(compute_dtype) × MFU × mfu_scale)",
        substituted=f"2 × {fmt(x.figures['active_params'])} / {rate}",
        unit="s",
    )
    attention = x.record(
        "attention_flops_per_prompt_token",
        memory.attention_flops_per_prompt_token(inputs.arch, context, inputs.deployment.tp),
        formula="Σ_attention layers 2 × heads × (qk_dim + v_dim) × mean attended tokens",
        substituted=f"mean over a {fmt(context)}-token prompt (causal; sliding layers capped at their window)",
        unit="FLOP",
        note=memory.cost_rules(inputs.arch),
    )
    x.record(
        "prompt_token_at_context_s",
        (model.flops_per_token + attention) / model.compute_flops_per_s,
        formula="(2 × active_params + attention_flops_per_prompt_token) / (TP × peak_flops × MFU × mfu_scale)",
        substituted=f"(2 × {fmt(x.figures['active_params'])} + {fmt(attention)}) / {rate}",
        unit="s",
        note="what a prompt token costs inside a prompt of --context tokens; prompt_token_s leaves attention out",
    )


def _moe_steps(x: _Explainer, batch: int) -> None:
    """Experts one decode step touches (MoE only), and the weight bytes it reads."""
    inputs = x.inputs
    arch, deployment, layout = inputs.arch, inputs.deployment, inputs.weights
    tp = deployment.tp
    moe_layers = arch.moe_layers()
    if not moe_layers:
        x.figures["expert_traffic"] = None
        # The roofline's read (docs/method.md: weights / TP); the copies some layers keep on every rank are the
        # engine step's (engine_decode_weight_bytes_per_gpu), as for MoE models.
        assert x.model is not None
        x.figures["decode_weight_bytes_per_gpu"] = x.model.decode_weight_bytes_per_gpu_at(batch)
        return
    shape = moe_layers[0]
    expert_bytes = layout.weight_bytes(shape.expert_params_by_group())
    layers = len(moe_layers)
    skew = deployment.expert_skew
    touched = expected_distinct_experts(shape.num_experts, shape.top_k, batch, skew)
    routing = "uniform routing" if skew == 0 else f"Zipf skew {skew}"
    x.record(
        "expected_experts_touched",
        touched,
        formula="E × (1 − (1 − k/E)^B)" if skew == 0 else "Σ_i 1 − (1 − min(1, k·p_i))^B, p_i ∝ i^−skew",
        substituted=f"{shape.num_experts} × (1 − (1 − {shape.top_k}/{shape.num_experts})^{batch})"
        if skew == 0
        else f"E={shape.num_experts}, k={shape.top_k}, B={batch}, skew={skew}",
        unit="experts",
        note=f"per MoE layer per decode step, assuming {routing}",
    )
    other_bytes = x.figures["weight_bytes"] - layers * shape.num_experts * expert_bytes
    if deployment.expert_parallel:
        busiest = expected_busiest_rank_experts(shape.num_experts, tp, touched / shape.num_experts)
        x.record(
            "busiest_rank_experts_touched",
            busiest,
            formula="E[max over EP ranks of Binomial(E/EP, experts_touched/E)]",
            substituted=f"E/EP = {shape.num_experts // tp}, p = {fmt(touched / shape.num_experts)}, EP = {tp}",
            unit="experts",
            note="expert parallel: each GPU holds whole experts; the step waits for the busiest GPU",
        )
        substituted = f"{fmt(other_bytes)} / {tp} + {layers} × {fmt(busiest)} × {fmt(expert_bytes)}"
        formula = "non-expert bytes / TP + moe_layers × busiest_rank_experts_touched × expert_bytes"
    else:
        substituted = f"({fmt(other_bytes)} + {layers} × {fmt(touched)} × {fmt(expert_bytes)}) / {tp}"
        formula = "(non-expert bytes + moe_layers × experts_touched × expert_bytes) / TP"
    assert x.model is not None
    x.record(
        "decode_weight_bytes_per_gpu",
        x.model.decode_weight_bytes_per_gpu_at(batch),
        formula=formula,
        substituted=substituted,
        unit="B",
    )
    x.figures["expert_traffic"] = ExpertTraffic(
        moe_layers=layers,
        num_experts=shape.num_experts,
        top_k=shape.top_k,
        expected_experts_touched=touched,
        expert_bytes=expert_bytes,
    )


def _decode_batch(x: _Explainer) -> int:
    """--batch, or the largest batch the pool holds at --context when that is smaller (with a warning)."""
    model, deployment = x.model, x.inputs.deployment
    assert model is not None
    layout = x.figures.get("kv_group_layout")
    if layout is not None:
        blocks = x.figures["kv_pool_blocks"]
        decoding = layout.blocks_per_request(deployment.context, 1)
        resident = x.record(
            "max_resident_sequences",
            blocks // decoding,
            formula="floor(kv_pool_blocks / blocks one decoding sequence of --context holds)",
            substituted=f"floor({fmt(blocks)} / ({_blocks_substituted(layout, deployment.context, 1)}))",
            unit="sequences",
            note=f"sequences of {deployment.context:,} tokens the pool holds while they decode (one new token a step: "
            "sliding layers keep their window's blocks); vLLM's logged 'maximum concurrency' reserves a whole "
            "max_num_batched_tokens chunk in each sliding group",
        )
    else:
        resident = x.record(
            "max_resident_sequences",
            model.pool_sequences(deployment.context),
            formula="floor(kv_pool_bytes_per_gpu / request_kv_bytes_per_gpu(context))",
            substituted=f"floor({fmt(model.kv_pool_bytes_per_gpu)} / {fmt(model.sequence_kv_bytes_per_gpu(deployment.context))})",
            unit="sequences",
            note=f"sequences of {deployment.context:,} tokens the pool holds at once, KV and any state (vLLM's 'maximum concurrency')",
        )
    if resident < 1 and deployment.kv_pool_tokens is not None:
        # The pool was given, not estimated: the figure to doubt is the one given.
        raise PricingError(
            f"a pool of {deployment.kv_pool_tokens:,} tokens does not hold one sequence of {deployment.context:,} tokens",
            field="kv_pool_tokens",
            fix="give the engine's logged 'GPU KV cache size' for this deployment, or lower {context}",
        )
    if resident < 1:
        raise PricingError(
            f"one sequence of {deployment.context:,} tokens does not fit the KV pool",
            field="context",
            fix=_larger_pool_fix(x.inputs, "lower {context}"),
        )
    # A window or a fixed state costs a short sequence in full, whether or not vLLM's hybrid layout holds it
    # (DeepSeek V4 keeps its window and compressor state per sequence, priced by bytes).
    fixed_per_sequence = model.state_bytes_per_sequence_per_gpu > 0 or any(kv for _, kv in model.sliding_kv)
    _pool_tokens_at_context(x, int(resident), layout is not None or fixed_per_sequence)
    # The engine schedules at most max_num_seqs sequences a step: a larger batch never runs. (Without one, the
    # batch is the input: generate sets max-num-seqs to it, whatever the engine's own default.)
    seqs = deployment.max_num_seqs
    if seqs is not None and seqs < min(deployment.batch, resident):
        x.warnings.append(
            PricingWarning(
                field="batch",
                problem=f"a decode batch of {deployment.batch} is above max_num_seqs {seqs}, the most the engine runs "
                f"at once: priced at batch {seqs}",
                fix="lower {batch}, or raise {max_num_seqs}",
            )
        )
        return seqs
    if deployment.batch <= resident:
        return deployment.batch
    x.warnings.append(
        PricingWarning(
            field="batch",
            problem=f"a decode batch of {deployment.batch} at {deployment.context:,} tokens does not fit the KV pool, "
            f"which holds {resident} such sequences: priced at batch {resident}",
            fix=_larger_pool_fix(x.inputs, "lower {batch}"),
        )
    )
    return int(resident)


def _token_budget_warning(x: _Explainer, batch: int) -> None:
    """A vLLM deployment whose token budget is below the batch it is priced at (generate writes that batch as its
    max-num-seqs): that engine refuses to start."""
    deployment = x.inputs.deployment
    if deployment.engine != GENERIC_ENGINE:
        return
    tokens = memory.max_num_batched_tokens(deployment, x.inputs.gpu)
    if memory.token_budget_below_sequences(tokens, batch):
        x.warnings.append(
            PricingWarning(
                field="max_num_batched_tokens",
                problem=f"max_num_batched_tokens {tokens:,} is below the decode batch of {batch}, which generate "
                "writes as max-num-seqs: vLLM refuses to start",
                fix=f"raise {{max_num_batched_tokens}} to at least {batch}, or lower {{batch}}",
            )
        )


def _pool_tokens_at_context(x: _Explainer, resident: int, per_kind: bool) -> None:
    context, pool_tokens = x.inputs.deployment.context, x.figures["kv_pool_tokens"]
    if not per_kind:
        x.record(
            "kv_pool_tokens_at_context",
            pool_tokens,
            formula="kv_pool_tokens (every cached token costs the same)",
            substituted=f"{fmt(pool_tokens)}",
            unit="tokens",
        )
        return
    x.record(
        "kv_pool_tokens_at_context",
        resident * context,
        formula="max_resident_sequences × context",
        substituted=f"{resident:,} × {context:,}",
        unit="tokens",
        note="tokens the pool holds filled with sequences of --context that decode: a window or a fixed state costs "
        "a short sequence as much as a long one, and vLLM's count at max_model_len reserves a prefill chunk in each "
        "window group; tier KV caps and the simulator count against this",
    )


def _decode_section(x: _Explainer, batch: int) -> None:
    inputs, model = x.inputs, x.model
    assert model is not None
    deployment = inputs.deployment
    context = deployment.context
    _moe_steps(x, batch)
    per_sequence = model.sequence_kv_read_bytes_per_gpu(context)
    shared_reads = per_sequence - model.sequence_kv_bytes_per_gpu(context)
    kv_bytes = x.record(
        "decode_kv_bytes_per_gpu",
        batch * per_sequence,
        formula="batch × request_kv_bytes_per_gpu(context)  (= batch × context × kv_bytes_per_token / TP for full attention)",
        substituted=f"{batch} × {fmt(per_sequence)}",
        unit="B",
        note=f"includes {fmt(shared_reads)} B a sequence that KV-shared layers read of their producers' caches"
        if shared_reads > 0
        else memory.cost_rules(inputs.arch),
    )
    bandwidth = x.record(
        "effective_bandwidth_per_gpu",
        model.bandwidth_bytes_per_s,
        formula="peak HBM bandwidth × MBU",
        substituted=f"{fmt(inputs.gpu.memory_bandwidth_bytes_per_s)} × {deployment.mbu}",
        unit="B/s",
    )
    weights_read = x.figures["decode_weight_bytes_per_gpu"]
    memory_s = x.record(
        "decode_memory_s",
        model.decode_memory_s(batch, context),
        formula="(weight bytes read per GPU + decode_kv_bytes_per_gpu) / effective_bandwidth_per_gpu",
        substituted=f"({fmt(weights_read)} + {fmt(kv_bytes)}) / {fmt(bandwidth)}",
        unit="s",
    )
    compute_s = x.record(
        "decode_compute_s",
        model.decode_compute_s(batch, context),
        formula="batch × (2 × active_params + attention FLOPs at context) / (TP × peak_flops × MFU × mfu_scale)",
        substituted=f"{batch} × (2 × {fmt(x.figures['active_params'])} + {fmt(model.attention_flops(context))}) / "
        f"{x.figures['compute_rate']}",
        unit="s",
    )
    bound = "memory" if memory_s >= compute_s else "compute"
    x.figures["decode_bound"] = bound
    x.record(
        "decode_step_s",
        model.roofline_step_time_s(batch, context),
        formula="max(decode_memory_s, decode_compute_s)",
        substituted=f"max({fmt(memory_s)}, {fmt(compute_s)})",
        unit="s",
        note=f"{bound}-bound at batch {batch}; docs/method.md's roofline, no engine overheads",
    )


def _engine_section(x: _Explainer, batch: int) -> None:
    """What an engine adds beside the roofline: the inter-token latency, the first token, the full load."""
    assert x.model is not None
    compute = engine_compute(x.inputs.arch, x.inputs.deployment.tp)
    _engine_overheads(x, x.model, batch)
    _engine_decode(x, x.model, batch, compute)
    _engine_prefill(x, x.model, compute)
    _full_load(x, x.model)


def _engine_overheads(x: _Explainer, model: ReplicaModel, batch: int) -> None:
    """A decode step's fixed costs beside the roofline: MoE routing, per-step and per-sequence overheads, all-reduces."""
    inputs = x.inputs
    deployment, gpu, arch = inputs.deployment, inputs.gpu, inputs.arch
    slots = routed_expert_slots(arch)
    moe_overhead_s = x.record(
        "moe_overhead_s",
        model.moe_overhead_s,
        formula="Σ_MoE layers top_k × log2(TP) × moe_slot_overhead_s (routing, token permutation, narrow "
        "expert-GEMM tiles, once a forward pass)",
        substituted=f"{slots} × log2({deployment.tp}) × {fmt(deployment.moe_slot_overhead_s)}",
        unit="s",
        note="0 for dense models; default fitted on the MoE decode latencies' fit points (docs/accuracy.md)",
    )
    x.record(
        "decode_overhead_s",
        model.step_overhead_s + moe_overhead_s + batch * model.sequence_overhead_s,
        formula="step_overhead_s + layers × layer_overhead_s + moe_overhead_s + batch × sequence_overhead_s "
        "(scheduling once a step; each layer's kernels' fixed cost; sampling and bookkeeping per sequence)",
        substituted=f"{fmt(deployment.step_overhead_s)} + {len(arch.layers)} × {fmt(deployment.layer_overhead_s)} + "
        f"{fmt(moe_overhead_s)} + {batch} × {fmt(model.sequence_overhead_s)}",
        unit="s",
        note="defaults fitted on NIM, vLLM, SGLang and TensorRT-LLM decode latencies; a layer's fixed cost measured on "
        "an H200 too (docs/accuracy.md)",
    )
    latency_source = "given" if deployment.allreduce_latency_s is not None else f"{gpu.id} catalog"
    x.record(
        "allreduce_s",
        model.allreduce_s(batch),
        formula="allreduces × (allreduce_latency + batch × 2(TP−1)/TP × hidden × 2 B / interconnect bandwidth)",
        substituted=f"{model.allreduces_per_step} × ({fmt(model.allreduce_latency_s)} ({latency_source}) + {batch} × "
        f"{fmt(model.allreduce_s_per_token)})",
        unit="s",
        note="one all-reduce after each token mixer and feed-forward block (two a layer for most models) under "
        "tensor parallelism, none at TP 1; "
        f"interconnect {fmt(gpu.interconnect_bandwidth_bytes_per_s)} B/s one way ({gpu.id} catalog)",
    )


def _engine_decode(x: _Explainer, model: ReplicaModel, batch: int, compute: EngineCompute) -> None:
    """The decode step as an engine runs it (the weights it reads, the FLOPs it computes) and the inter-token
    latency."""
    inputs = x.inputs
    deployment, arch = inputs.deployment, inputs.arch
    tp = deployment.tp
    read = engine_read(arch, inputs.weights)
    engine_weights = x.record(
        "engine_decode_weight_bytes_per_gpu",
        model.engine_weight_read_bytes_per_gpu(batch),
        formula="decode weight bytes read per GPU − (input embedding table, untied + vision tower − LM head read at "
        "16 bits under a quantized weight_dtype) / TP + replicated layers' full copies",
        substituted=f"{fmt(x.figures['decode_weight_bytes_per_gpu'])} − ({fmt(read.embedding_bytes)} + "
        f"{fmt(read.vision_bytes)} − {fmt(read.lm_head_upcast_bytes)}) / {tp} + "
        f"{fmt(replicated_extra_bytes_per_gpu(arch, inputs.weights, tp))}",
        unit="B",
        note="the weights an engine's decode step reads: it gathers only the batch's rows of the embedding table, "
        "skips the vision tower on text, runs the LM head unquantized and reads whole the layers every rank holds "
        "whole",
    )
    rate = x.figures["compute_rate"]
    engine_compute_s = x.record(
        "engine_decode_compute_s",
        model.engine_decode_compute_s(batch, deployment.context),
        formula="batch × (2 × (active_params − embedding table − LM head + vocabulary × hidden + (TP − 1) × "
        "replicated params) + attention FLOPs at context) / (TP × peak_flops × MFU × mfu_scale)",
        substituted=f"{batch} × (2 × {fmt(compute.params_per_token)} + "
        f"{fmt(model.attention_flops(deployment.context))}) / {rate}",
        unit="s",
        note="decode_compute_s as an engine computes it: a token's embedding row is gathered, not multiplied; "
        "its logits are; every rank runs the layers it holds whole (MLA down-projections, routers) on every token",
    )
    engine_step = x.record(
        "engine_decode_step_s",
        model.engine_decode_step_s(batch, deployment.context),
        formula="max((engine_decode_weight_bytes_per_gpu + decode_kv_bytes_per_gpu) / effective_bandwidth_per_gpu, "
        "engine_decode_compute_s)",
        substituted=f"max(({fmt(engine_weights)} + {fmt(x.figures['decode_kv_bytes_per_gpu'])}) / "
        f"{fmt(x.figures['effective_bandwidth_per_gpu'])}, "
        f"{fmt(engine_compute_s)})",
        unit="s",
        note="decode_step_s over the weights an engine reads and the FLOPs it computes",
    )
    x.record(
        "itl_s",
        model.step_time_s(batch, deployment.context),
        formula="engine_decode_step_s + decode_overhead_s + allreduce_s",
        substituted=f"{fmt(engine_step)} + {fmt(x.figures['decode_overhead_s'])} + {fmt(x.figures['allreduce_s'])}",
        unit="s",
        note="the engine's decode step: the inter-token latency a user measures at this batch, without prefills "
        "interleaved",
    )


def _engine_prefill(x: _Explainer, model: ReplicaModel, compute: EngineCompute) -> None:
    """A prompt token as an engine prefills it, and the first token's latency on an idle replica."""
    deployment, gpu, arch = x.inputs.deployment, x.inputs.gpu, x.inputs.arch
    tp = deployment.tp
    chunk = model.max_num_batched_tokens
    x.record(
        "engine_flops_per_prompt_token",
        model.prefill_flops_per_token,
        formula="2 × (active_params − embedding table − LM head + (TP − 1) × replicated params)",
        substituted=f"2 × {fmt(compute.params_per_prompt_token)} (of which {tp - 1} × "
        f"{fmt(compute.replicated_params)} replicated)",
        unit="FLOP",
        note="what a prompt token multiplies in an engine's prefill, before attention, over all TP ranks: its "
        f"embedding row is gathered, only a chunk's last token computes logits (2 × {fmt(compute.logits_params)} "
        "FLOPs once a chunk), and every rank runs the layers it holds whole; prompt_token_s keeps 2 × "
        "active_params (docs/method.md)",
    )
    x.record(
        "prefill_overhead_s",
        model.prefill_overhead_s,
        formula="layers × prefill_layer_overhead_s (a prefill pass's small kernels, and an eager engine's launches "
        "and rank synchronisation; once a prefill pass)",
        substituted=f"{len(arch.layers)} × {fmt(deployment.prefill_layer_overhead_s)}",
        unit="s",
        note=f"engine {deployment.engine} ('quotacalc engines'); fitted on first-token latencies (docs/accuracy.md)"
        + ("" if deployment.mixed_prefill else "; not mixed: each prefill costs the decodes this pass's overhead"),
    )
    x.record(
        "engine_prompt_token_s",
        model.prefill_time_s(chunk, 0) / chunk,
        formula="prefill_time(max_num_batched_tokens) / max_num_batched_tokens (a full chunk: "
        "engine_flops_per_prompt_token, attention within it, overhead and all-reduces)",
        substituted=f"{_prefill_terms(model, chunk, 0)} / {fmt(chunk)}",
        unit="s",
        note=PREFILL_TERMS_NOTE,
    )
    x.record(
        "ttft_s",
        model.ttft_s(deployment.context),
        formula="request_overhead_s + Σ_chunks of max_num_batched_tokens (max(chunk FLOPs at "
        "engine_flops_per_prompt_token, one weight read) + step_overhead_s + layers × layer_overhead_s + "
        "moe_overhead_s + prefill_overhead_s + "
        "all-reduces)",
        substituted=_ttft_terms(model, deployment.context),
        unit="s",
        note=f"one request of --context tokens ({fmt(deployment.context)}) on an idle replica, in chunks of at most "
        f"max_num_batched_tokens {fmt(chunk)} ({memory.token_budget(deployment, gpu)[1]}); {PREFILL_TERMS_NOTE}",
    )


def _full_load(x: _Explainer, model: ReplicaModel) -> None:
    """The full-load workload: the largest batch of its requests the pool holds, and the throughput then."""
    deployment, arch = x.inputs.deployment, x.inputs.arch
    prompt, output = deployment.load_prompt, deployment.load_output_tokens
    x.figures["load_prompt_tokens"], x.figures["load_output_tokens"] = prompt, output
    # A workload the user gave must run; the default one (--context + 128) only reports what fits.
    given = deployment.load_prompt_tokens is not None or "load_output_tokens" in deployment.model_fields_set
    limits = [
        (limit, what)
        for limit, what in (
            (arch.max_context_tokens, f"{arch.name}'s maximum context"),
            (deployment.max_model_len, "max_model_len"),
        )
        if limit
    ]
    if given and limits and prompt + output > min(limits)[0]:
        limit, what = min(limits)
        raise PricingError(
            f"the full-load workload's requests of {prompt + output:,} tokens (prompt {prompt:,} + output {output:,}) "
            f"exceed {what} of {limit:,}",
            field="load_prompt_tokens",
            fix=f"{{load_prompt_tokens}} + {{load_output_tokens}} of at most {limit:,}",
        )
    load_batch = x.record(
        "max_load_batch",
        model.max_load_batch(prompt, output),
        formula="min(floor(kv_pool_blocks / blocks of one request of load_prompt + load_output), max_num_seqs)"
        if model.kv_block_layout is not None
        else "min(floor(kv_pool_bytes_per_gpu / request_kv_bytes_per_gpu(load_prompt + load_output)), max_num_seqs)",
        substituted=f"requests of {fmt(prompt)} + {fmt(output)} tokens at their full length, at most "
        f"{fmt(model.max_num_seqs)} ({'given' if deployment.max_num_seqs is not None else 'vLLM default'})",
        unit="sequences",
    )
    if load_batch < 1:
        x.warnings.append(
            PricingWarning(
                field="load_prompt_tokens",
                problem=f"no request of the full-load workload ({prompt:,} + {output:,} tokens) fits the KV pool: "
                "max_load_output_tokens_per_s is 0",
                fix="shorten {load_prompt_tokens} / {load_output_tokens}, or raise {tp}",
            )
        )
    x.record(
        "max_load_output_tokens_per_s",
        model.max_load_output_tokens_per_s(prompt, output),
        formula="B / (itl(B, prompt + output/2) + B / output × (prefill FLOP time(prompt) + its all-reduces))",
        substituted=f"{fmt(load_batch)} / ({fmt(model.step_time_s(load_batch, prompt + output / 2))} + "
        f"{fmt(load_batch)} / {fmt(output)} × {fmt(model.interleaved_prefill_s(prompt))})"
        if load_batch > 0
        else f"no request of {fmt(prompt)} + {fmt(output)} tokens fits the pool",
        unit="tokens/s",
        note="throughput at full load: every request's prefill charged to the replica (chunked prefill rides in "
        f"decode steps); architecture {arch.name}",
    )


def _price_section(x: _Explainer, batch: int) -> None:
    deployment = x.inputs.deployment
    tp = deployment.tp
    engine = deployment.pricing_basis == PricingBasis.ENGINE
    x.figures["pricing_basis"] = deployment.pricing_basis.value
    step_name, prompt_name = ("itl_s", "engine_prompt_token_s") if engine else ("decode_step_s", "prompt_token_s")
    step, prompt_token_s = x.figures[step_name], x.figures[prompt_name]
    basis_note = f"pricing_basis {deployment.pricing_basis.value}"
    output_token_s = x.record(
        "output_token_s",
        step / batch,
        formula=f"{step_name} / batch",
        substituted=f"{fmt(step)} / {batch}",
        unit="s",
        note=basis_note,
    )
    output_weight = x.record(
        "output_weight",
        output_token_s / prompt_token_s,
        formula=f"W = output_token_s / {prompt_name}",
        substituted=f"{fmt(output_token_s)} / {fmt(prompt_token_s)}",
        unit="units",
        note=basis_note,
    )
    units_per_s = x.record(
        "replica_units_per_s",
        deployment.ceiling / prompt_token_s,
        formula=f"ceiling / {prompt_name}",
        substituted=f"{deployment.ceiling} / {fmt(prompt_token_s)}",
        unit="units/s",
        note=basis_note,
    )
    dedicated = x.record(
        "dedicated_usd_per_month",
        tp * deployment.gpu_hour_usd * deployment.hours_per_month,
        formula="GPUs × $/GPU-hour × hours/month",
        substituted=f"{tp} × {deployment.gpu_hour_usd} × {fmt(deployment.hours_per_month)}",
        unit="USD",
    )
    del dedicated
    usd_per_unit = x.record(
        "usd_per_unit",
        tp * deployment.gpu_hour_usd / SECONDS_PER_HOUR / units_per_s,
        formula="GPUs × $/GPU-hour / 3600 / replica_units_per_s",
        substituted=f"{tp} × {deployment.gpu_hour_usd} / 3600 / {fmt(units_per_s)}",
        unit="USD",
    )
    x.record(
        "usd_per_million_prompt_tokens",
        1e6 * usd_per_unit,
        formula="10^6 × usd_per_unit",
        substituted=f"10^6 × {fmt(usd_per_unit)}",
        unit="USD",
    )
    x.record(
        "usd_per_million_cached_prompt_tokens",
        1e6 * usd_per_unit * deployment.cached_prompt_weight,
        formula="10^6 × usd_per_unit × cached_prompt_weight",
        substituted=f"10^6 × {fmt(usd_per_unit)} × {deployment.cached_prompt_weight}",
        unit="USD",
    )
    x.record(
        "usd_per_million_output_tokens",
        1e6 * usd_per_unit * output_weight,
        formula="10^6 × usd_per_unit × W",
        substituted=f"10^6 × {fmt(usd_per_unit)} × {fmt(output_weight)}",
        unit="USD",
    )


# --------------------------------------------------------------------------- price


def price(inputs: PricingInputs) -> PriceResult:
    """Price one replica of a deployment."""
    if not isinstance(inputs, PricingInputs):
        raise TypeError(f"price() takes PricingInputs, got {type(inputs).__name__}: price(resolve(Deployment(...)))")
    _check_inputs(inputs)
    x = _Explainer(inputs)
    _weights_section(x)
    _kv_section(x)
    pool_bytes = _pool_section(x)
    x.model = replica_model(inputs, pool_bytes)
    _compute_section(x)
    batch = _decode_batch(x)
    _token_budget_warning(x, batch)
    _decode_section(x, batch)
    _engine_section(x, batch)
    _price_section(x, batch)
    record_derived(x.record, x.figures, inputs.deployment)
    f = x.figures
    return PriceResult(
        total_params=f["total_params"],
        active_params=f["active_params"],
        weight_bytes=f["weight_bytes"],
        weight_bytes_per_gpu=f["weight_bytes_per_gpu"],
        kv_bytes_per_token=f["kv_bytes_per_token"],
        kv_bytes_per_token_per_gpu=f["kv_bytes_per_token_per_gpu"],
        state_bytes_per_sequence=f["state_bytes_per_sequence"],
        window_kv_bytes_per_token=f["window_kv_bytes_per_token"],
        peak_flops_per_gpu=f["peak_flops_per_gpu"],
        mfu_scale=f["mfu_scale"],
        compute_dtype=inputs.weights.compute_dtype,
        effective_bandwidth_per_gpu=f["effective_bandwidth_per_gpu"],
        prompt_token_s=f["prompt_token_s"],
        attention_flops_per_prompt_token=f["attention_flops_per_prompt_token"],
        prompt_token_at_context_s=f["prompt_token_at_context_s"],
        decode_weight_bytes_per_gpu=f["decode_weight_bytes_per_gpu"],
        decode_kv_bytes_per_gpu=f["decode_kv_bytes_per_gpu"],
        decode_memory_s=f["decode_memory_s"],
        decode_compute_s=f["decode_compute_s"],
        decode_bound=f["decode_bound"],
        decode_step_s=f["decode_step_s"],
        decode_batch=batch,
        moe_overhead_s=f["moe_overhead_s"],
        decode_overhead_s=f["decode_overhead_s"],
        allreduce_s=f["allreduce_s"],
        engine_decode_weight_bytes_per_gpu=f["engine_decode_weight_bytes_per_gpu"],
        engine_decode_compute_s=f["engine_decode_compute_s"],
        engine_decode_step_s=f["engine_decode_step_s"],
        itl_s=f["itl_s"],
        engine_flops_per_prompt_token=f["engine_flops_per_prompt_token"],
        prefill_overhead_s=f["prefill_overhead_s"],
        engine_prompt_token_s=f["engine_prompt_token_s"],
        ttft_s=f["ttft_s"],
        pricing_basis=f["pricing_basis"],
        output_token_s=f["output_token_s"],
        output_weight=f["output_weight"],
        replica_units_per_s=f["replica_units_per_s"],
        max_num_batched_tokens=f["max_num_batched_tokens"],
        memory_utilization=f["memory_utilization"],
        runtime_reserve_bytes_per_gpu=f["runtime_reserve_bytes_per_gpu"],
        kv_pool_bytes_per_gpu=pool_bytes,
        kv_pool_tokens=f["kv_pool_tokens"],
        kv_pool_source=f["kv_pool_source"],
        max_resident_sequences=f["max_resident_sequences"],
        kv_pool_tokens_at_context=f["kv_pool_tokens_at_context"],
        load_prompt_tokens=f["load_prompt_tokens"],
        load_output_tokens=f["load_output_tokens"],
        max_load_batch=f["max_load_batch"],
        max_load_output_tokens_per_s=f["max_load_output_tokens_per_s"],
        dedicated_usd_per_month=f["dedicated_usd_per_month"],
        usd_per_unit=f["usd_per_unit"],
        usd_per_million_prompt_tokens=f["usd_per_million_prompt_tokens"],
        usd_per_million_cached_prompt_tokens=f["usd_per_million_cached_prompt_tokens"],
        usd_per_million_output_tokens=f["usd_per_million_output_tokens"],
        expert_traffic=f["expert_traffic"],
        **{key: f[key] for key in derived_keys()},
        steps=tuple(x.ledger.steps),
        warnings=tuple(warning.worded() for warning in x.warnings),
        pricing_warnings=tuple(x.warnings),
        inputs=inputs,
    )


#: How ``_prefill_terms`` writes a prefill chunk, for --explain's notes.
PREFILL_TERMS_NOTE = (
    "a chunk is (max(its FLOP time, one read of the weights) + step, MoE and prefill overheads + its all-reduces)"
)
#: Chunks a first token's substitution lists one by one; a longer prompt shows its first and last and their sum.
_LISTED_CHUNKS = 3


def _prefill_terms(model: ReplicaModel, tokens: int, context_tokens: int) -> str:
    """One prefill chunk on an idle replica, term by term, as ``ReplicaModel.prefill_time_s`` adds them."""
    compute = model.prefill_compute_s(tokens, context_tokens)
    overheads = model.step_overhead_s + model.moe_overhead_s + model.prefill_overhead_s
    allreduces = model.allreduces_per_step * (model.allreduce_latency_s + tokens * model.allreduce_s_per_token)
    return f"(max({fmt(compute)}, {fmt(model.prefill_weight_read_s())}) + {fmt(overheads)} + {fmt(allreduces)})"


def _ttft_terms(model: ReplicaModel, prompt_tokens: int) -> str:
    """request_overhead_s + each chunk's terms (``ReplicaModel.ttft_s``'s sum), a long prompt's middle elided."""
    chunks, done = [], 0
    while done < prompt_tokens:
        tokens = min(model.max_num_batched_tokens, prompt_tokens - done)
        chunks.append((tokens, done))
        done += tokens
    if len(chunks) <= _LISTED_CHUNKS:
        listed = " + ".join(_prefill_terms(model, tokens, context) for tokens, context in chunks)
    else:
        middle = sum(model.prefill_time_s(tokens, context) for tokens, context in chunks[1:-1])
        listed = (
            f"{_prefill_terms(model, *chunks[0])} + {fmt(middle)} (the middle {len(chunks) - 2} chunks) + "
            f"{_prefill_terms(model, *chunks[-1])}"
        )
    return f"{fmt(model.request_overhead_s)} + {listed}"


def _weight_terms(layout: WeightLayout, params_by_group: Mapping[ParamGroup, int]) -> str:
    """Σ params × bytes/param by storage dtype (the step's note says where the dtypes come from)."""
    by_dtype: dict[tuple[str, float], int] = {}
    for group, count in params_by_group.items():
        if count:
            storage = layout.groups[group]
            key = (storage.dtype, storage.bytes_per_param)
            by_dtype[key] = by_dtype.get(key, 0) + count
    return " + ".join(
        f"{fmt(count)} × {fmt(bytes_per_param)} ({dtype})"
        for (dtype, bytes_per_param), count in sorted(by_dtype.items(), key=lambda item: -item[1])
    )
