"""Deployment -> token costs, weights, KV pool, replica budget and prices (METHOD.md §1, §2, §6)."""

from __future__ import annotations

import math
from typing import Literal

from pydantic import BaseModel, ConfigDict

from quotacalc.catalog.dtypes import Dtype
from quotacalc.catalog.gpus import GpuSpec
from quotacalc.core import memory
from quotacalc.core.arch import ModelArch, MoE, ParamGroup
from quotacalc.core.deployment import Deployment
from quotacalc.core.explain import Ledger, Step, fmt
from quotacalc.core.weights import WeightLayout
from quotacalc.errors import QuotacalcError

SECONDS_PER_HOUR = 3600


class PricingInputs(BaseModel):
    """Everything a price depends on, resolved and validated."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    deployment: Deployment
    arch: ModelArch
    gpu: GpuSpec
    weights: WeightLayout
    kv_dtype: Dtype
    state_dtype: Dtype


class ExpertTraffic(BaseModel):
    """Experts one decode step reads in an MoE layer."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    moe_layers: int
    num_experts: int
    top_k: int
    expected_experts_touched: float
    expert_bytes: float


class PriceResult(BaseModel):
    """A deployment's figures, in SI units (seconds, bytes, USD), with the steps that produced them."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    total_params: int
    active_params: int
    weight_bytes: float
    weight_bytes_per_gpu: float
    kv_bytes_per_token: float
    kv_bytes_per_token_per_gpu: float
    state_bytes_per_sequence: float
    peak_flops_per_gpu: float
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
    output_token_s: float
    output_weight: float
    replica_units_per_s: float
    kv_pool_bytes_per_gpu: float
    kv_pool_tokens: int
    kv_pool_source: Literal["measured", "estimated"]
    max_resident_sequences: int
    dedicated_usd_per_month: float
    usd_per_unit: float
    usd_per_million_prompt_tokens: float
    usd_per_million_cached_prompt_tokens: float
    usd_per_million_output_tokens: float
    expert_traffic: ExpertTraffic | None
    steps: tuple[Step, ...]
    warnings: tuple[str, ...]
    inputs: PricingInputs


def expected_distinct_experts(num_experts: int, top_k: int, batch: int, skew: float = 0.0) -> float:
    """Expected distinct experts a batch of ``batch`` tokens routes to in one layer.

    Uniform routing gives E(1-(1-k/E)^B). With ``skew`` > 0, expert popularity follows a Zipf law
    with that exponent and each expert is picked by a token with probability min(1, k p_i).
    """
    if skew == 0:
        return num_experts * (1 - (1 - top_k / num_experts) ** batch)
    weights = [1 / (rank + 1) ** skew for rank in range(num_experts)]
    total = sum(weights)
    return sum(1 - (1 - min(1.0, top_k * weight / total)) ** batch for weight in weights)


def check_parallelism(arch: ModelArch, deployment: Deployment) -> None:
    """TP must split every layer evenly (heads, Mamba channels); EP must split the experts."""
    tp = deployment.tp
    mixers = [layer.mixer for layer in arch.layers if layer.mixer is not None]
    for mixer in mixers:
        if problem := mixer.tp_problem(tp):
            valid = [size for size in (1, 2, 4, 8, 16, 32, 64) if not any(m.tp_problem(size) for m in mixers)]
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
            raise QuotacalcError(
                f"{arch.name} has no experts to shard", field="expert_parallel", fix="drop --expert-parallel"
            )


def expected_busiest_rank_experts(num_experts: int, ranks: int, touch_probability: float) -> float:
    """Expected touched experts on the busiest of ``ranks`` expert-parallel GPUs.

    Each rank holds E/ranks experts, each touched independently with ``touch_probability``, so a
    rank's count is binomial and the step waits for the largest: E[max] = Σ_m (1 − F(m)^ranks).
    """
    per_rank = num_experts // ranks
    pmf = [
        math.comb(per_rank, m) * touch_probability**m * (1 - touch_probability) ** (per_rank - m)
        for m in range(per_rank + 1)
    ]
    expected_max, cdf = 0.0, 0.0
    for m in range(per_rank):
        cdf += pmf[m]
        expected_max += 1 - min(1.0, cdf) ** ranks
    return expected_max


def _moe_traffic(inputs: PricingInputs, total_bytes: float, ledger: Ledger) -> tuple[float, ExpertTraffic | None]:
    """Weight bytes one decode step reads on each GPU, and the expert traffic behind it."""
    arch, deployment, layout = inputs.arch, inputs.deployment, inputs.weights
    tp = deployment.tp
    moe_layers: list[MoE] = arch.moe_layers()
    if not moe_layers:
        return total_bytes / tp, None
    shape = moe_layers[0]
    if any(
        (m.num_experts, m.top_k, m.expert_params()) != (shape.num_experts, shape.top_k, shape.expert_params())
        for m in moe_layers
    ):
        raise QuotacalcError(f"{arch.name}: MoE layers of different shapes are not priced yet", field="model")
    expert_bytes = shape.expert_params() * layout.storage(ParamGroup.ROUTED_EXPERTS).bytes_per_param
    layers = len(moe_layers)
    touched = expected_distinct_experts(shape.num_experts, shape.top_k, deployment.batch, deployment.expert_skew)
    routing = "uniform routing" if deployment.expert_skew == 0 else f"Zipf skew {deployment.expert_skew}"
    ledger.record(
        "expected_experts_touched",
        touched,
        formula="E × (1 − (1 − k/E)^B)"
        if deployment.expert_skew == 0
        else "Σ_i 1 − (1 − min(1, k·p_i))^B, p_i ∝ i^−skew",
        substituted=f"{shape.num_experts} × (1 − (1 − {shape.top_k}/{shape.num_experts})^{deployment.batch})"
        if deployment.expert_skew == 0
        else f"E={shape.num_experts}, k={shape.top_k}, B={deployment.batch}, skew={deployment.expert_skew}",
        unit="experts",
        note=f"per MoE layer per decode step, assuming {routing}",
    )
    other_bytes = total_bytes - layers * shape.num_experts * expert_bytes
    if deployment.expert_parallel:
        busiest = expected_busiest_rank_experts(shape.num_experts, tp, touched / shape.num_experts)
        ledger.record(
            "busiest_rank_experts_touched",
            busiest,
            formula="E[max over EP ranks of Binomial(E/EP, experts_touched/E)]",
            substituted=f"E/EP = {shape.num_experts // tp}, p = {fmt(touched / shape.num_experts)}, EP = {tp}",
            unit="experts",
            note="expert parallel: each GPU holds whole experts; the step waits for the busiest GPU",
        )
        read_per_gpu = other_bytes / tp + layers * busiest * expert_bytes
        substituted = f"{fmt(other_bytes)} / {tp} + {layers} × {fmt(busiest)} × {fmt(expert_bytes)}"
        formula = "non-expert bytes / TP + moe_layers × busiest_rank_experts_touched × expert_bytes"
    else:
        read_per_gpu = (other_bytes + layers * touched * expert_bytes) / tp
        substituted = f"({fmt(other_bytes)} + {layers} × {fmt(touched)} × {fmt(expert_bytes)}) / {tp}"
        formula = "(non-expert bytes + moe_layers × experts_touched × expert_bytes) / TP"
    ledger.record("decode_weight_bytes_per_gpu", read_per_gpu, formula=formula, substituted=substituted, unit="B")
    traffic = ExpertTraffic(
        moe_layers=layers,
        num_experts=shape.num_experts,
        top_k=shape.top_k,
        expected_experts_touched=touched,
        expert_bytes=expert_bytes,
    )
    return read_per_gpu, traffic


def price(inputs: PricingInputs) -> PriceResult:
    """Price one replica of a deployment."""
    arch, gpu, deployment, layout = inputs.arch, inputs.gpu, inputs.deployment, inputs.weights
    check_parallelism(arch, deployment)
    ledger = Ledger()
    warnings: list[str] = []
    tp, batch, context = deployment.tp, deployment.batch, deployment.context
    kv_b, state_b = inputs.kv_dtype.bytes_per_element, inputs.state_dtype.bytes_per_element

    total_params = arch.total_params()
    active_params = arch.active_params()
    ledger.record(
        "total_params",
        total_params,
        formula="Σ parameters (tied embeddings once)",
        substituted=f"{fmt(total_params)}",
        unit="params",
    )
    ledger.record(
        "active_params",
        active_params,
        formula="parameters a text token runs through (top-k routed experts; vision tower idle)",
        substituted=f"{fmt(active_params)}",
        unit="params",
    )
    params_by_group = arch.params_by_group()
    weight_bytes = layout.weight_bytes(params_by_group)
    ledger.record(
        "weight_bytes",
        weight_bytes,
        formula="Σ_group params × bytes/param",
        substituted=f"{layout.describe(params_by_group)} ({layout.source})",
        unit="B",
    )
    weight_bytes_per_gpu = weight_bytes / tp
    ledger.record(
        "weight_bytes_per_gpu",
        weight_bytes_per_gpu,
        formula="weight_bytes / TP",
        substituted=f"{fmt(weight_bytes)} / {tp}",
        unit="B",
    )

    kv_per_token = memory.kv_bytes_per_token(arch, kv_b)
    kv_per_token_per_gpu = memory.kv_bytes_per_token_per_gpu(arch, kv_b, tp)
    growing = [layer.mixer for layer in arch.layers if layer.mixer is not None and layer.mixer.grows_with_context()]
    kv_elements = sum(mixer.cache_elements_per_token() for mixer in growing)
    ledger.record(
        "kv_bytes_per_token",
        kv_per_token,
        formula="Σ_growing layers cached values per token × kv_dtype_bytes (2 × kv_heads × head_dim for attention)",
        substituted=f"{len(growing)} layers, {fmt(kv_elements)} values × {fmt(kv_b)} B ({inputs.kv_dtype.name})",
        unit="B",
    )
    ledger.record(
        "kv_bytes_per_token_per_gpu",
        kv_per_token_per_gpu,
        formula="per rank: kv_heads split over TP (one replicated head per rank below that); MLA latent whole",
        substituted=f"{fmt(kv_per_token)} over TP {tp}",
        unit="B",
    )
    state_per_sequence = memory.state_bytes_per_sequence(arch, state_b)
    if state_per_sequence:
        ledger.record(
            "state_bytes_per_sequence",
            state_per_sequence,
            formula="Σ_mamba layers ((d_conv − 1) × conv_channels + ssm state) × state_dtype_bytes",
            substituted=f"{fmt(state_per_sequence / state_b)} values × {fmt(state_b)} B ({inputs.state_dtype.name})",
            unit="B",
        )

    if not gpu.supports(layout.compute_dtype):
        raise QuotacalcError(
            f"{gpu.name} has no tensor cores for {layout.compute_dtype}",
            field="weight_dtype",
            fix="choose another weight dtype",
        )
    peak = gpu.peak_flops_per_s(layout.compute_dtype)
    compute_rate = tp * peak * deployment.mfu
    prompt_token_s = ledger.record(
        "prompt_token_s",
        2 * active_params / compute_rate,
        formula="2 × active_params / (TP × peak_flops(compute_dtype) × MFU)",
        substituted=f"2 × {fmt(active_params)} / ({tp} × {fmt(peak)} ({layout.compute_dtype}) × {deployment.mfu})",
        unit="s",
    )
    attention_flops = memory.attention_flops_per_prompt_token(arch, context)
    ledger.record(
        "attention_flops_per_prompt_token",
        attention_flops,
        formula="Σ_attention layers 2 × heads × (qk_dim + v_dim) × mean attended tokens",
        substituted=f"mean over a {fmt(context)}-token prompt (causal; sliding layers capped at their window)",
        unit="FLOP",
    )
    prompt_token_at_context_s = ledger.record(
        "prompt_token_at_context_s",
        (2 * active_params + attention_flops) / compute_rate,
        formula="(2 × active_params + attention_flops_per_prompt_token) / (TP × peak_flops × MFU)",
        substituted=f"(2 × {fmt(active_params)} + {fmt(attention_flops)}) / ({tp} × {fmt(peak)} × {deployment.mfu})",
        unit="s",
        note="what a prompt token costs inside a prompt of --context tokens; prompt_token_s leaves attention out",
    )

    decode_weight_bytes_per_gpu, traffic = _moe_traffic(inputs, weight_bytes, ledger)
    request_per_gpu = memory.request_kv_bytes_per_gpu(arch, context, kv_b, state_b, tp)
    decode_kv_bytes_per_gpu = batch * request_per_gpu
    ledger.record(
        "decode_kv_bytes_per_gpu",
        decode_kv_bytes_per_gpu,
        formula="batch × request_kv_bytes_per_gpu(context)  (= batch × context × kv_bytes_per_token / TP for full attention)",
        substituted=f"{batch} × {fmt(request_per_gpu)}",
        unit="B",
    )
    bandwidth = gpu.memory_bandwidth_bytes_per_s * deployment.mbu
    ledger.record(
        "effective_bandwidth_per_gpu",
        bandwidth,
        formula="peak HBM bandwidth × MBU",
        substituted=f"{fmt(gpu.memory_bandwidth_bytes_per_s)} × {deployment.mbu}",
        unit="B/s",
    )
    decode_memory_s = ledger.record(
        "decode_memory_s",
        (decode_weight_bytes_per_gpu + decode_kv_bytes_per_gpu) / bandwidth,
        formula="(weight bytes read per GPU + decode_kv_bytes_per_gpu) / effective_bandwidth_per_gpu",
        substituted=f"({fmt(decode_weight_bytes_per_gpu)} + {fmt(decode_kv_bytes_per_gpu)}) / {fmt(bandwidth)}",
        unit="s",
    )
    output_attention_flops = memory.attention_flops_per_output_token(arch, context)
    decode_compute_s = ledger.record(
        "decode_compute_s",
        batch * (2 * active_params + output_attention_flops) / compute_rate,
        formula="batch × (2 × active_params + attention FLOPs at context) / (TP × peak_flops × MFU)",
        substituted=f"{batch} × (2 × {fmt(active_params)} + {fmt(output_attention_flops)}) / ({tp} × {fmt(peak)} × {deployment.mfu})",
        unit="s",
    )
    decode_bound: Literal["memory", "compute"] = "memory" if decode_memory_s >= decode_compute_s else "compute"
    decode_step_s = ledger.record(
        "decode_step_s",
        max(decode_memory_s, decode_compute_s),
        formula="max(decode_memory_s, decode_compute_s)",
        substituted=f"max({fmt(decode_memory_s)}, {fmt(decode_compute_s)})",
        unit="s",
        note=f"{decode_bound}-bound at batch {batch}",
    )
    output_token_s = ledger.record(
        "output_token_s",
        decode_step_s / batch,
        formula="decode_step_s / batch",
        substituted=f"{fmt(decode_step_s)} / {batch}",
        unit="s",
    )
    output_weight = ledger.record(
        "output_weight",
        output_token_s / prompt_token_s,
        formula="W = output_token_s / prompt_token_s",
        substituted=f"{fmt(output_token_s)} / {fmt(prompt_token_s)}",
        unit="units",
    )
    replica_units_per_s = ledger.record(
        "replica_units_per_s",
        deployment.ceiling / prompt_token_s,
        formula="ceiling / prompt_token_s",
        substituted=f"{deployment.ceiling} / {fmt(prompt_token_s)}",
        unit="units/s",
    )

    # The KV pool: what memory_utilization × HBM leaves after weights and the runtime reserve.
    reserve_bytes = (deployment.runtime_reserve_gib if deployment.runtime_reserve_gib is not None else 5.5) * 2**30
    usable = deployment.memory_utilization * gpu.memory_bytes - weight_bytes_per_gpu - reserve_bytes
    ledger.record(
        "kv_pool_bytes_estimate_per_gpu",
        usable,
        formula="memory_utilization × HBM − weight_bytes_per_gpu − runtime_reserve",
        substituted=f"{deployment.memory_utilization} × {fmt(gpu.memory_bytes)} − {fmt(weight_bytes_per_gpu)} − {fmt(reserve_bytes)}",
        unit="B",
    )
    pool_token_bytes = kv_per_token_per_gpu or request_per_gpu / context
    if deployment.kv_pool_tokens is not None:
        pool_tokens, pool_source = deployment.kv_pool_tokens, "measured"
        pool_bytes = pool_tokens * pool_token_bytes
        ledger.record(
            "kv_pool_tokens",
            pool_tokens,
            formula="measured (--kv-pool-tokens)",
            substituted=f"{fmt(pool_tokens)}",
            unit="tokens",
        )
    else:
        if usable <= 0:
            raise QuotacalcError(
                f"{arch.name} does not fit: {weight_bytes_per_gpu / 1e9:.1f} GB of weights per GPU leave no KV pool on {gpu.id}",
                field="tp",
                fix="raise --tp, use a smaller --weight-dtype, or a larger GPU",
            )
        pool_bytes, pool_source = usable, "estimated"
        pool_tokens = ledger.record(
            "kv_pool_tokens",
            math.floor(usable / pool_token_bytes),
            formula="kv_pool_bytes_per_gpu / kv_bytes_per_token_per_gpu",
            substituted=f"{fmt(usable)} / {fmt(pool_token_bytes)}",
            unit="tokens",
        )
    max_resident = ledger.record(
        "max_resident_sequences",
        math.floor(pool_bytes / request_per_gpu),
        formula="floor(kv_pool_bytes_per_gpu / request_kv_bytes_per_gpu(context))",
        substituted=f"floor({fmt(pool_bytes)} / {fmt(request_per_gpu)})",
        unit="sequences",
        note=f"sequences of {context:,} tokens the pool holds at once, KV and any state (vLLM's 'maximum concurrency')",
    )
    if batch > max_resident:
        warnings.append(
            f"a decode batch of {batch} at {context:,} tokens does not fit the KV pool, which holds {max_resident} such "
            f"sequences: lower --batch, or raise --tp or use --kv-dtype fp8"
        )
    if arch.max_context_tokens and context > arch.max_context_tokens:
        warnings.append(f"--context {context} exceeds the model's max_position_embeddings {arch.max_context_tokens}")

    dedicated = ledger.record(
        "dedicated_usd_per_month",
        tp * deployment.gpu_hour_usd * deployment.hours_per_month,
        formula="GPUs × $/GPU-hour × hours/month",
        substituted=f"{tp} × {deployment.gpu_hour_usd} × {fmt(deployment.hours_per_month)}",
        unit="USD",
    )
    usd_per_unit = ledger.record(
        "usd_per_unit",
        tp * deployment.gpu_hour_usd / SECONDS_PER_HOUR / replica_units_per_s,
        formula="GPUs × $/GPU-hour / 3600 / replica_units_per_s",
        substituted=f"{tp} × {deployment.gpu_hour_usd} / 3600 / {fmt(replica_units_per_s)}",
        unit="USD",
    )
    per_million_prompt = ledger.record(
        "usd_per_million_prompt_tokens",
        1e6 * usd_per_unit,
        formula="10^6 × usd_per_unit",
        substituted=f"10^6 × {fmt(usd_per_unit)}",
        unit="USD",
    )
    per_million_cached = ledger.record(
        "usd_per_million_cached_prompt_tokens",
        1e6 * usd_per_unit * deployment.cached_prompt_weight,
        formula="10^6 × usd_per_unit × cached_prompt_weight",
        substituted=f"10^6 × {fmt(usd_per_unit)} × {deployment.cached_prompt_weight}",
        unit="USD",
    )
    per_million_output = ledger.record(
        "usd_per_million_output_tokens",
        1e6 * usd_per_unit * output_weight,
        formula="10^6 × usd_per_unit × W",
        substituted=f"10^6 × {fmt(usd_per_unit)} × {fmt(output_weight)}",
        unit="USD",
    )

    return PriceResult(
        total_params=total_params,
        active_params=active_params,
        weight_bytes=weight_bytes,
        weight_bytes_per_gpu=weight_bytes_per_gpu,
        kv_bytes_per_token=kv_per_token,
        kv_bytes_per_token_per_gpu=kv_per_token_per_gpu,
        state_bytes_per_sequence=state_per_sequence,
        peak_flops_per_gpu=peak,
        compute_dtype=layout.compute_dtype,
        effective_bandwidth_per_gpu=bandwidth,
        prompt_token_s=prompt_token_s,
        attention_flops_per_prompt_token=attention_flops,
        prompt_token_at_context_s=prompt_token_at_context_s,
        decode_weight_bytes_per_gpu=decode_weight_bytes_per_gpu,
        decode_kv_bytes_per_gpu=decode_kv_bytes_per_gpu,
        decode_memory_s=decode_memory_s,
        decode_compute_s=decode_compute_s,
        decode_bound=decode_bound,
        decode_step_s=decode_step_s,
        output_token_s=output_token_s,
        output_weight=output_weight,
        replica_units_per_s=replica_units_per_s,
        kv_pool_bytes_per_gpu=pool_bytes,
        kv_pool_tokens=pool_tokens,
        kv_pool_source=pool_source,
        max_resident_sequences=max_resident,
        dedicated_usd_per_month=dedicated,
        usd_per_unit=usd_per_unit,
        usd_per_million_prompt_tokens=per_million_prompt,
        usd_per_million_cached_prompt_tokens=per_million_cached,
        usd_per_million_output_tokens=per_million_output,
        expert_traffic=traffic,
        steps=tuple(ledger.steps),
        warnings=tuple(warnings),
        inputs=inputs,
    )
