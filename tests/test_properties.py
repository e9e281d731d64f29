"""Invariants of the method, checked on random toy models and deployments (hypothesis).

Each property says when it holds. They complement the golden figures: a formula that is right at
the worked example but wrong elsewhere (a sign, a floor, a dropped term) breaks one of these on
some model. Examples are few and fast (no files, no transformers); ``derandomize`` keeps CI
repeatable.
"""

from __future__ import annotations

import itertools
import math

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from quotacalc.catalog.dtypes import DTYPES
from quotacalc.catalog.gpus import GpuSources, GpuSpec
from quotacalc.core import memory
from quotacalc.core.arch import (
    DenseMLP,
    FullAttention,
    Layer,
    Mamba2Mixer,
    ModelArch,
    MoE,
    SlidingWindowAttention,
    mean_attended_tokens,
)
from quotacalc.core.deployment import Deployment, Traffic
from quotacalc.core.kv import request_kv
from quotacalc.core.price import PricingInputs, expected_busiest_rank_experts, expected_distinct_experts, price
from quotacalc.core.traffic import size_traffic
from quotacalc.core.weights import uniform_layout

FAST = settings(
    max_examples=30, deadline=None, derandomize=True, database=None, suppress_health_check=[HealthCheck.too_slow]
)

GPU = GpuSpec(
    id="big",
    name="A large toy GPU",
    vendor="none",
    memory_bytes=10**15,  # room for any pool the strategies draw (a given pool must fit the GPU)
    memory_bandwidth_bytes_per_s=3e12,
    dense_tflops={"bf16": 1000},
    interconnect_bandwidth_bytes_per_s=4e11,
    allreduce_latency_s=1e-5,
    sources=GpuSources(
        memory_bytes="toy",
        memory_bandwidth_bytes_per_s="toy",
        dense_tflops="toy",
        interconnect_bandwidth_bytes_per_s="toy",
        allreduce_latency_s="toy",
    ),
)


@st.composite
def archs(draw, moe: bool | None = None) -> ModelArch:
    """A random decoder: GQA attention (some layers sliding, some Mamba-2), dense or MoE feed-forward."""
    heads = draw(st.sampled_from([8, 16, 32]))
    kv_heads = draw(st.sampled_from([h for h in (1, 2, 4, 8) if heads % h == 0]))
    head_dim = draw(st.sampled_from([32, 64, 128]))
    hidden = heads * head_dim
    attention = FullAttention(
        hidden_size=hidden, num_heads=heads, num_kv_heads=kv_heads, head_dim=head_dim, v_head_dim=head_dim
    )
    sliding = SlidingWindowAttention(
        **attention.model_dump(exclude={"kind"}), window_tokens=draw(st.integers(16, 4096))
    )
    mamba = Mamba2Mixer(hidden_size=hidden, num_heads=heads, head_dim=64, n_groups=8, d_state=64, d_conv=4)
    use_moe = draw(st.booleans()) if moe is None else moe
    if use_moe:
        experts = draw(st.sampled_from([8, 16, 64]))
        ffn = MoE(
            hidden_size=hidden,
            num_experts=experts,
            top_k=draw(st.integers(1, 8)),
            expert_intermediate_size=draw(st.sampled_from([256, 1024])),
        )
    else:
        ffn = DenseMLP(hidden_size=hidden, intermediate_size=draw(st.sampled_from([1024, 4096, 11008])))
    kinds = draw(st.lists(st.sampled_from(["full", "full", "sliding", "mamba"]), min_size=1, max_size=8))
    if "full" not in kinds:
        kinds[0] = "full"
    mixers = {"full": attention, "sliding": sliding, "mamba": mamba}
    layers = tuple(Layer(mixer=mixers[kind], feed_forward=ffn, norm_params=2 * hidden) for kind in kinds)
    return ModelArch(
        name="random",
        model_type="toy",
        hidden_size=hidden,
        vocab_size=draw(st.integers(1000, 200_000)),
        tie_word_embeddings=draw(st.booleans()),
        layers=layers,
        final_norm_params=hidden,
    )


def inputs(arch: ModelArch, **deployment) -> PricingInputs:
    fields = dict(model="random", gpu="big", kv_pool_tokens=10**7, runtime_reserve_gib=1.0)
    return PricingInputs(
        deployment=Deployment(**{**fields, **deployment}),
        arch=arch,
        gpu=GPU,
        weights=uniform_layout("bf16", 2, "bf16", "toy"),
        kv_dtype=DTYPES["bf16"],
        state_dtype=DTYPES["bf16"],
    )


batches = st.integers(1, 512)
contexts = st.integers(1, 200_000)


@FAST
@given(archs(), batches, contexts, st.floats(0.05, 1.0), st.floats(0.05, 1.0))
def test_output_weight_at_least_one(arch, batch, context, mfu, mbu):
    """W >= 1 always under the roofline: a decode step is at least its compute, batch x (2 x active +
    attention) FLOPs at the prefill rate, so an output token costs at least one prompt token."""
    result = price(inputs(arch, batch=batch, context=context, mfu=mfu, mbu=mbu))
    assert result.output_weight >= 1 - 1e-12
    assert result.decode_step_s >= result.decode_compute_s
    assert result.decode_step_s >= result.decode_memory_s


@FAST
@given(archs(), batches, contexts, st.integers(1, 256), st.floats(0.0, 2.0))
def test_decode_step_never_falls_as_the_batch_grows(arch, batch, context, more, skew):
    """More sequences read more KV and touch no fewer experts (any routing skew): the step never shortens."""
    small = price(inputs(arch, batch=batch, context=context, expert_skew=skew))
    large = price(inputs(arch, batch=batch + more, context=context, expert_skew=skew))
    assert large.decode_step_s >= small.decode_step_s * (1 - 1e-12)
    assert large.decode_weight_bytes_per_gpu >= small.decode_weight_bytes_per_gpu * (1 - 1e-12)


@FAST
@given(archs(), batches, contexts, st.integers(1, 100_000))
def test_decode_step_never_falls_as_the_context_grows(arch, batch, context, more):
    small = price(inputs(arch, batch=batch, context=context))
    large = price(inputs(arch, batch=batch, context=context + more))
    assert large.decode_step_s >= small.decode_step_s
    assert large.decode_kv_bytes_per_gpu >= small.decode_kv_bytes_per_gpu
    assert large.attention_flops_per_prompt_token >= small.attention_flops_per_prompt_token


@FAST
@given(archs())
def test_weights_per_gpu_fall_as_tp_grows(arch):
    """Every TP that splits the model holds 1/TP of the weights per GPU: strictly less as TP grows."""
    sizes = [tp for tp in (1, 2, 4, 8) if not any(layer.mixer.tp_problem(tp) for layer in arch.layers)]
    results = [price(inputs(arch, tp=tp)) for tp in sizes]
    for smaller, larger in itertools.pairwise(results):
        assert larger.weight_bytes_per_gpu < smaller.weight_bytes_per_gpu
        assert larger.decode_weight_bytes_per_gpu <= smaller.decode_weight_bytes_per_gpu
        # KV per GPU never grows with TP either (replicated heads keep it level at worst).
        assert larger.kv_bytes_per_token_per_gpu <= smaller.kv_bytes_per_token_per_gpu
        assert larger.prompt_token_s < smaller.prompt_token_s
    replicated = inputs(arch, tp=1).weights.weight_bytes(arch.replicated_params_by_group())
    for tp, result in zip(sizes, results, strict=True):
        # 1/TP of the weights, and the layers engines keep whole on every rank (MoE routers, MLA's
        # latent down-projections) in full.
        assert result.weight_bytes_per_gpu == pytest.approx((result.weight_bytes - replicated) / tp + replicated)
        # Heads split evenly or replicated: per GPU x TP covers the whole KV at least.
        assert result.kv_bytes_per_token_per_gpu * tp >= result.kv_bytes_per_token
        # Every rank multiplies the layers it holds whole: the replica's FLOPs grow by TP - 1 copies of theirs.
        repeated = 2 * (tp - 1) * sum(arch.replicated_params_by_group().values())
        assert result.engine_flops_per_prompt_token == pytest.approx(
            results[0].engine_flops_per_prompt_token + repeated
        )


@FAST
@given(
    archs(),
    st.floats(0.001, 100),
    st.floats(1.5, 50),
    st.floats(0, 10_000),
    st.floats(0, 4_000),
    st.floats(0, 1),
)
def test_tenant_figures_scale_linearly_with_rps(arch, rps, factor, prompt, output, cached):
    """units/s, replicas, bucket rate and depth and the shared price are rps x per-request figures;
    the per-request figures and the request's share of the pool do not move with rps."""
    assume(prompt + output > 0)  # requests of no tokens are refused (tests/test_golden_core.py)
    replica = price(inputs(arch, context=4096))
    base = size_traffic(replica, Traffic(rps=rps, prompt_tokens=prompt, output_tokens=output, cached_fraction=cached))
    scaled = size_traffic(
        replica, Traffic(rps=rps * factor, prompt_tokens=prompt, output_tokens=output, cached_fraction=cached)
    )
    for key in ("units_per_s", "replicas", "bucket_rate_units_per_s", "bucket_depth_units", "shared_usd_per_month"):
        assert math.isclose(getattr(scaled, key), factor * getattr(base, key), rel_tol=1e-9, abs_tol=1e-12), key
    assert scaled.units_per_request == base.units_per_request
    assert scaled.request_pool_share == base.request_pool_share
    assert scaled.dedicated_replicas >= base.dedicated_replicas >= 1
    assert scaled.dedicated_replicas == max(1, math.ceil(scaled.replicas - 1e-9))


@FAST
@given(archs(), st.floats(0.01, 1))
def test_prices_follow_the_unit_price(arch, weight):
    result = price(inputs(arch, cached_prompt_weight=weight))
    assert math.isclose(
        result.usd_per_million_output_tokens, result.output_weight * result.usd_per_million_prompt_tokens
    )
    assert math.isclose(result.usd_per_million_cached_prompt_tokens, weight * result.usd_per_million_prompt_tokens)
    # Doubling the GPU price doubles every price; the replica budget does not move.
    dearer = price(inputs(arch, cached_prompt_weight=weight, gpu_hour_usd=5.0))
    assert math.isclose(dearer.usd_per_unit, 2 * result.usd_per_unit)
    assert dearer.replica_units_per_s == result.replica_units_per_s


@FAST
@given(archs(moe=False), st.integers(1, 50_000))
def test_request_kv_grows_with_context_and_stops_at_windows(arch, context):
    """KV of a request: full layers grow linearly, sliding layers stop at their window, state is fixed."""
    kv_b, state_b = 2, 2
    one = memory.request_kv_bytes(arch, context, kv_b, state_b)
    two = memory.request_kv_bytes(arch, 2 * context, kv_b, state_b)
    growth = memory.kv_bytes_per_token(arch, kv_b)
    assert two >= one
    # Doubling the context adds exactly the growing layers' KV for the extra tokens, plus whatever the
    # windows still had room for (at most the windows' whole KV).
    extra = two - one - growth * context
    assert -1e-6 <= extra <= memory.window_bytes_per_sequence(arch, kv_b, 2 * context) + 1e-6
    replica = price(inputs(arch))
    assert request_kv(replica, 2 * context).pool_share >= request_kv(replica, context).pool_share


@FAST
@given(st.integers(1, 256), st.integers(1, 16), st.integers(1, 2048), st.floats(0.0, 3.0))
def test_expected_experts_bounded_and_monotone(experts, top_k, batch, skew):
    """Between k (one token, no cap) and E; never more with skew than uniform (Jensen: 1 - (1 - q)^B is
    concave in q, so spreading the same total pick probability evenly touches the most)."""
    assume(top_k <= experts)
    uniform = expected_distinct_experts(experts, top_k, batch)
    skewed = expected_distinct_experts(experts, top_k, batch, skew)
    assert top_k - 1e-9 <= uniform <= experts + 1e-9
    assert 0 < skewed <= uniform + 1e-9
    assert expected_distinct_experts(experts, top_k, batch + 1, skew) >= skewed - 1e-9


@FAST
@given(st.sampled_from([(8, 2), (8, 4), (64, 8), (256, 8), (16, 16)]), st.floats(0.0, 1.0))
def test_busiest_rank_between_the_mean_and_all_its_experts(layout, probability):
    experts, ranks = layout
    per_rank = experts // ranks
    busiest = expected_busiest_rank_experts(experts, ranks, probability)
    assert per_rank * probability - 1e-9 <= busiest <= per_rank + 1e-9


@FAST
@given(st.integers(1, 100_000), st.integers(1, 10_000), st.integers(0, 1000))
def test_mean_attended_tokens_bounds(context, window, more):
    windowed = mean_attended_tokens(context, window)
    assert windowed <= (context + 1) / 2 + 1e-9
    assert windowed <= window
    assert mean_attended_tokens(context + more, window) >= windowed - 1e-9
    assert mean_attended_tokens(context + more) >= mean_attended_tokens(context)


@FAST
@given(archs())
def test_active_parameters_at_most_total(arch):
    assert 0 < arch.active_params() <= arch.total_params()
    assert sum(arch.params_by_group().values()) == arch.total_params()
