"""Golden figures for every formula of the core, on toy models small enough to compute by hand.

Each expected value is written as the arithmetic a reader can redo (shapes of the modules as
transformers builds them, the method's formulas), never copied from quotacalc's output. The
models are built directly from the core's specs (no config file, no transformers), so these tests
run in milliseconds and are the ones the mutation run (CONTRIBUTING.md, "Mutation testing") relies on.
"""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from quotacalc.catalog.dtypes import DTYPES
from quotacalc.catalog.gpus import GpuSources, GpuSpec
from quotacalc.core import memory
from quotacalc.core.arch import (
    DenseMLP,
    FullAttention,
    Layer,
    Mamba1Mixer,
    Mamba2Mixer,
    MLAAttention,
    ModelArch,
    MoE,
    ParamGroup,
    SlidingWindowAttention,
    kv_heads_per_rank,
    mean_attended_tokens,
)
from quotacalc.core.deployment import GIB, Deployment, Traffic
from quotacalc.core.kv import request_kv
from quotacalc.core.price import (
    PricingInputs,
    check_parallelism,
    expected_busiest_rank_experts,
    expected_distinct_experts,
    price,
)
from quotacalc.core.traffic import size_traffic
from quotacalc.core.weights import GroupStorage, WeightLayout, uniform_layout
from quotacalc.errors import QuotacalcError

A = ParamGroup.ATTENTION

# --------------------------------------------------------------------------- toy pieces

#: A GPU with round figures: 80 GB, 2 TB/s, 500 dense bf16 TFLOPS, 1000 fp8.
TOY_GPU = GpuSpec(
    id="toy",
    name="Toy GPU",
    vendor="none",
    memory_bytes=80_000_000_000,
    memory_bandwidth_bytes_per_s=2e12,
    dense_tflops={"bf16": 500, "fp8": 1000},
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


def gqa(**extra) -> FullAttention:
    """8 query heads, 2 KV heads of 128 over a 1024-wide model."""
    return FullAttention(hidden_size=1024, num_heads=8, num_kv_heads=2, head_dim=128, v_head_dim=128, **extra)


def toy_dense(layers: int = 4, mixer=None) -> ModelArch:
    """``layers`` x (GQA attention + gated MLP 1024 -> 4096 + two norms), untied 1000-token vocabulary."""
    mixer = mixer or gqa()
    layer = Layer(mixer=mixer, feed_forward=DenseMLP(hidden_size=1024, intermediate_size=4096), norm_params=2048)
    return ModelArch(
        name="toy",
        model_type="llama",
        hidden_size=1024,
        vocab_size=1000,
        tie_word_embeddings=False,
        layers=(layer,) * layers,
        final_norm_params=1024,
    )


# Attention: q 1024x1024, k and v 1024x256 each, o 1024x1024 (no biases).
TOY_ATTENTION = 1024 * 1024 + 2 * 1024 * 256 + 1024 * 1024  # 2,621,440
# Gated MLP: gate and up 1024x4096, down 4096x1024.
TOY_MLP = 3 * 1024 * 4096  # 12,582,912
TOY_LAYER = TOY_ATTENTION + TOY_MLP + 2048
TOY_TOTAL = 4 * TOY_LAYER + 2 * 1000 * 1024 + 1024  # 62,874,624


def toy_deployment(**extra) -> Deployment:
    fields = dict(
        model="toy",
        gpu="toy",
        tp=2,
        batch=16,
        context=1000,
        mfu=0.5,
        mbu=0.8,
        ceiling=0.6,
        gpu_hour_usd=2.0,
        hours_per_month=700,
        memory_utilization=0.9,
        runtime_reserve_gib=1.0,
        cached_prompt_weight=0.1,
        burst_s=30,
    )
    return Deployment(**{**fields, **extra})


def toy_inputs(arch: ModelArch | None = None, layout: WeightLayout | None = None, **deployment) -> PricingInputs:
    bf16 = DTYPES["bf16"]
    return PricingInputs(
        deployment=toy_deployment(**deployment),
        arch=arch or toy_dense(),
        gpu=TOY_GPU,
        weights=layout or uniform_layout("bf16", 2, "bf16", "toy"),
        kv_dtype=bf16,
        state_dtype=bf16,
    )


@pytest.fixture(scope="module")
def toy():
    return price(toy_inputs())


# --------------------------------------------------------------------------- parameters, by module shape


def test_toy_total_by_hand():
    assert TOY_TOTAL == 62_874_624
    arch = toy_dense()
    assert arch.total_params() == TOY_TOTAL
    assert arch.active_params() == TOY_TOTAL
    assert arch.params_by_group() == {
        ParamGroup.EMBEDDING: 1_024_000,
        ParamGroup.LM_HEAD: 1_024_000,
        ParamGroup.NORM: 4 * 2048 + 1024,
        ParamGroup.VISION: 0,
        ParamGroup.ATTENTION: 4 * TOY_ATTENTION,
        ParamGroup.MLP: 4 * TOY_MLP,
    }


def test_tied_embeddings_counted_once_and_vision_idle():
    arch = toy_dense().model_copy(update={"tie_word_embeddings": True, "vision_params": 5000})
    assert arch.total_params() == TOY_TOTAL - 1_024_000 + 5000
    # A text token runs through no vision tower.
    assert arch.active_params() == TOY_TOTAL - 1_024_000
    assert arch.active_params_by_group()[ParamGroup.VISION] == 0


def test_attention_biases_norms_and_sinks():
    # q, k, v biases: 1024 + 256 + 256; o bias: 1024; q/k RMSNorm: 2 x head_dim; sinks: one per query head.
    assert gqa(qkv_bias=True).params()[A] == TOY_ATTENTION + 1536
    assert gqa(o_bias=True).params()[A] == TOY_ATTENTION + 1024
    assert gqa(qk_norm=True).params()[A] == TOY_ATTENTION + 256
    assert gqa(sinks=True).params()[A] == TOY_ATTENTION + 8


def test_attention_with_a_different_value_head():
    # head_dim 64 for q and k, 32 for v: q 1024x512, k 1024x128, v 1024x64, o 256x1024.
    mixer = FullAttention(hidden_size=1024, num_heads=8, num_kv_heads=2, head_dim=64, v_head_dim=32)
    assert mixer.params()[A] == 1024 * 512 + 1024 * 128 + 1024 * 64 + 256 * 1024
    assert mixer.cache_elements_per_token() == 2 * (64 + 32)
    assert mixer.attention_flops_per_token(10) == 2 * 8 * (64 + 32) * 10


def test_mla_parameters_with_and_without_q_lora():
    # DeepSeek-style MLA, hidden 1024, 4 heads, q_lora 256, kv_lora 128, nope 32, rope 16, v 32:
    #   q_a 1024x256 + q_a_norm 256 + q_b 256x(4 x 48)
    #   kv_a 1024x(128 + 16) + kv_a_norm 128 + kv_b 128x(4 x (32 + 32))
    #   o 4 x 32 x 1024
    mla = MLAAttention(
        hidden_size=1024,
        num_heads=4,
        q_lora_rank=256,
        kv_lora_rank=128,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=32,
    )
    # The two latent norms (256 + 128) sit in the norm group, not the attention group: quantized checkpoints
    # keep them 16-bit (tests/test_quantized_biases.py).
    kv_and_o = 1024 * 144 + 128 * 4 * 64 + 4 * 32 * 1024
    assert mla.params() == {A: 1024 * 256 + 256 * 4 * 48 + kv_and_o, ParamGroup.NORM: 256 + 128}
    # Without q_lora, q is one 1024 x (4 x 48) projection (no q_a_norm); o_bias adds 1024.
    plain = mla.model_copy(update={"q_lora_rank": None, "o_bias": True})
    assert plain.params() == {A: 1024 * 4 * 48 + kv_and_o + 1024, ParamGroup.NORM: 128}


def test_mamba1_parameters_by_module():
    # Jamba's Mamba: hidden 64, d_inner 128, d_state 8, d_conv 4, dt_rank 4.
    #   in_proj 64 x 256 (+256 bias)  conv1d 128 x 4 (+128 bias)  x_proj 128 x (4 + 16)
    #   dt_proj 4 x 128 + 128  A_log 128 x 8  D 128  out_proj 128 x 64 (+64 bias)
    #   dt/B/C norms 4 + 8 + 8
    base = dict(hidden_size=64, d_inner=128, d_state=8, d_conv=4, dt_rank=4)
    core = 128 * 4 + 128 * 20 + 4 * 128 + 128 + 128 * 8 + 128
    plain = Mamba1Mixer(**base, conv_bias=False)
    assert plain.params()[ParamGroup.MAMBA] == 64 * 256 + core + 128 * 64
    full = Mamba1Mixer(**base, conv_bias=True, proj_bias=True, inner_norms=True)
    assert full.params()[ParamGroup.MAMBA] == 64 * 256 + 256 + core + 128 + 128 * 64 + 64 + 20


def test_mamba2_parameters_by_module():
    # Mamba-2: hidden 64, 4 heads of 32 (d_inner 128), 2 groups, d_state 16, d_conv 4.
    #   in_proj 64 x (2 x 128 + 2 x 2 x 16 + 4) = 64 x 324;  conv over 128 + 64 = 192 channels: 192 x 4 (+192)
    #   dt_bias, A_log, D: 3 x 4;  gated norm 128;  out_proj 128 x 64 (+64)
    base = dict(hidden_size=64, num_heads=4, head_dim=32, n_groups=2, d_state=16, d_conv=4)
    plain = Mamba2Mixer(**base, conv_bias=False, gated_norm=False)
    assert plain.d_inner == 128 and plain.conv_dim == 192
    assert plain.params()[ParamGroup.MAMBA] == 64 * 324 + 192 * 4 + 12 + 128 * 64
    biased = Mamba2Mixer(**base, proj_bias=True)
    assert biased.params()[ParamGroup.MAMBA] == 64 * 324 + 324 + 192 * 4 + 192 + 12 + 128 + 128 * 64 + 64
    # Falcon-H1: in_proj biased, out_proj not.
    split = Mamba2Mixer(**base, proj_bias=True, out_proj_bias=False)
    assert split.params()[ParamGroup.MAMBA] == biased.params()[ParamGroup.MAMBA] - 64


def test_mlp_shapes():
    # Plain MLP: up and down only; biases on up (4096) and down (1024).
    assert DenseMLP(hidden_size=1024, intermediate_size=4096, gated=False).params() == {ParamGroup.MLP: 2 * 1024 * 4096}
    assert DenseMLP(hidden_size=1024, intermediate_size=4096, gated=False, bias=True).params() == {
        ParamGroup.MLP: 2 * 1024 * 4096 + 4096 + 1024
    }
    # Gated with biases: gate and up 4096 each, down 1024.
    assert DenseMLP(hidden_size=1024, intermediate_size=4096, bias=True).params() == {
        ParamGroup.MLP: 3 * 1024 * 4096 + 2 * 4096 + 1024
    }


def test_moe_total_and_active():
    # 8 experts of 3 x 64 x 32, top 2, router 64 x 8; one shared expert 3 x 64 x 48 with a 64-wide gate.
    moe = MoE(
        hidden_size=64,
        num_experts=8,
        top_k=2,
        expert_intermediate_size=32,
        num_shared_experts=1,
        shared_intermediate_size=48,
        shared_expert_gate=True,
    )
    expert = 3 * 64 * 32
    assert moe.expert_params() == expert
    fixed = {ParamGroup.ROUTER: 64 * 8 + 64, ParamGroup.SHARED_EXPERTS: 3 * 64 * 48}
    assert moe.params() == {**fixed, ParamGroup.ROUTED_EXPERTS: 8 * expert}
    assert moe.active_params() == {**fixed, ParamGroup.ROUTED_EXPERTS: 2 * expert}


def test_moe_biases_plain_experts_and_latent():
    # gpt-oss: expert biases (gate+up 2 x 32, down 64) and a router bias (8).
    biased = MoE(
        hidden_size=64, num_experts=8, top_k=2, expert_intermediate_size=32, expert_bias=True, router_bias=True
    )
    assert biased.expert_params() == 3 * 64 * 32 + 2 * 32 + 64
    assert biased.params()[ParamGroup.ROUTER] == 64 * 8 + 8
    # Nemotron-H: plain (up, down) experts at a 16-wide latent; projections 64 -> 16 and back (+ biases 16 + 64).
    latent = MoE(
        hidden_size=64,
        num_experts=8,
        top_k=2,
        expert_intermediate_size=32,
        gated=False,
        expert_width=16,
        latent_projection_bias=True,
        num_shared_experts=2,
        shared_intermediate_size=24,
    )
    assert latent.expert_params() == 2 * 16 * 32
    assert latent.params()[ParamGroup.MLP] == 2 * 64 * 16 + 16 + 64
    # Shared experts keep the model width and the experts' (plain) shape: 2 x 2 x 64 x 24.
    assert latent.params()[ParamGroup.SHARED_EXPERTS] == 2 * 2 * 64 * 24
    assert latent.model_copy(update={"latent_projection_bias": False}).params()[ParamGroup.MLP] == 2 * 64 * 16


def test_layer_without_mixer_or_feed_forward():
    layer = Layer(mixer=None, feed_forward=None, norm_params=7)
    assert layer.params() == {ParamGroup.NORM: 7} == layer.active_params()


def test_mixer_counts():
    mamba = Mamba1Mixer(hidden_size=64, d_inner=128, d_state=8, d_conv=4, dt_rank=4)
    arch = toy_dense().model_copy(
        update={
            "layers": (
                Layer(mixer=mamba, feed_forward=None, norm_params=0),
                Layer(mixer=None, feed_forward=None, norm_params=0),
            )
        }
    )
    assert arch.mixer_counts() == {"mamba1": 1, "none": 1}


# --------------------------------------------------------------------------- cache and state per kind


def test_kv_heads_per_rank():
    # 8 KV heads over TP 4: 2 each; over TP 16 each rank keeps one replicated head.
    assert (kv_heads_per_rank(8, 4), kv_heads_per_rank(8, 8), kv_heads_per_rank(8, 16)) == (2, 1, 1)


def test_full_attention_cache_rules():
    mixer = gqa()
    assert mixer.cache_elements_per_token() == 2 * (128 + 128)
    assert mixer.cache_elements_per_token_per_gpu(2) == 1 * 256
    assert mixer.cache_elements_per_token_per_gpu(4) == 1 * 256  # replicated
    assert mixer.cached_tokens(5000) == 5000 and mixer.attended_tokens(5000) == 5000
    assert mixer.grows_with_context() is True
    assert mixer.state_elements_per_sequence() == 0 == mixer.state_elements_per_sequence_per_gpu(2)


def test_sliding_window_cache_rules():
    mixer = SlidingWindowAttention(**gqa().model_dump(exclude={"kind"}), window_tokens=100)
    assert mixer.cached_tokens(60) == 60 and mixer.cached_tokens(5000) == 100
    assert mixer.attended_tokens(60) == 60 and mixer.attended_tokens(5000) == 100
    assert mixer.grows_with_context() is False
    assert mixer.state_elements_per_sequence() == 0 == mixer.state_elements_per_sequence_per_gpu(2)
    assert mixer.params() == gqa().params()


def test_mean_attended_tokens_causal_and_windowed():
    # Causal: token i attends i tokens (itself and the i - 1 before it); mean over 1..10 = 5.5.
    assert mean_attended_tokens(10) == 5.5
    # Window 4: tokens 1..4 attend 1..4, tokens 5..10 attend 4 each: (1 + 2 + 3 + 4 + 6 x 4) / 10 = 3.4.
    assert mean_attended_tokens(10, 4) == pytest.approx(sum(min(i, 4) for i in range(1, 11)) / 10) == 3.4
    # A window the prompt never reaches changes nothing; the edge (context == window) too.
    assert mean_attended_tokens(4, 4) == 2.5 == mean_attended_tokens(4)
    assert mean_attended_tokens(5, 4) == (1 + 2 + 3 + 4 + 4) / 5
    sliding = SlidingWindowAttention(**gqa().model_dump(exclude={"kind"}), window_tokens=4)
    assert sliding.mean_prompt_attended_tokens(10) == 3.4
    assert gqa().mean_prompt_attended_tokens(10) == 5.5


def test_mla_cache_and_flops_include_the_rope_dimensions():
    mla = MLAAttention(
        hidden_size=1024,
        num_heads=4,
        q_lora_rank=None,
        kv_lora_rank=128,
        qk_nope_head_dim=32,
        qk_rope_head_dim=16,
        v_head_dim=32,
    )
    # The latent (128) plus the shared rope key (16), held whole by every TP rank.
    assert mla.cache_elements_per_token() == 144 == mla.cache_elements_per_token_per_gpu(8)
    # QK^T over nope + rope (48) and AV over v (32), per head, per attended token, 2 FLOPs per MAC.
    assert mla.attention_flops_per_token(10) == 2 * 4 * (32 + 16 + 32) * 10
    assert mla.mean_prompt_attended_tokens(10) == 5.5 and mla.attended_tokens(7) == 7 and mla.cached_tokens(7) == 7
    assert mla.grows_with_context() and mla.state_elements_per_sequence() == 0


def test_mamba_state_whole_and_per_gpu():
    # Mamba-1: (d_conv - 1) x d_inner conv values + d_inner x d_state SSM values = 3 x 128 + 128 x 8.
    m1 = Mamba1Mixer(hidden_size=64, d_inner=128, d_state=8, d_conv=4, dt_rank=4)
    assert m1.state_elements_per_sequence() == 3 * 128 + 128 * 8 == 1408
    assert m1.state_elements_per_sequence_per_gpu(2) == 704
    assert m1.state_elements_per_sequence_per_gpu(3) == math.ceil(1408 / 3) == 470
    # Mamba-2: conv over d_inner + 2 groups x d_state = 128 + 64 = 192 channels, SSM 4 heads x 32 x 16.
    m2 = Mamba2Mixer(hidden_size=64, num_heads=4, head_dim=32, n_groups=2, d_state=16, d_conv=4)
    assert m2.state_elements_per_sequence() == 3 * 192 + 4 * 32 * 16 == 2624
    # TP 2: 64 inner channels + 1 group (2 x 16) per rank; 2 heads.
    assert m2.state_elements_per_sequence_per_gpu(2) == 3 * (64 + 2 * 16) + 2 * 32 * 16
    # TP 4: fewer groups than ranks: each rank keeps one replicated group.
    assert m2.state_elements_per_sequence_per_gpu(4) == 3 * (32 + 2 * 16) + 1 * 32 * 16
    # Several groups per rank (Nemotron-H has 8): 8 groups over TP 2 leave 4 per rank, 4 x 2 x 16 = 128
    # B and C channels beside 64 of the 128 inner ones.
    grouped = Mamba2Mixer(hidden_size=64, num_heads=4, head_dim=32, n_groups=8, d_state=16, d_conv=4)
    assert grouped.state_elements_per_sequence_per_gpu(2) == 3 * (64 + 2 * 4 * 16) + 2 * 32 * 16 == 1600
    # TP 3 is refused by tp_problem (4 heads); at TP 4 two groups per rank, one head per rank.
    assert grouped.state_elements_per_sequence_per_gpu(4) == 3 * (32 + 2 * 2 * 16) + 1 * 32 * 16 == 800
    # Element counts are whole numbers (they size byte buffers): never a float, even where the division is exact.
    for mixer, tp in ((m2, 2), (m2, 4), (grouped, 2), (grouped, 4), (m1, 3)):
        assert type(mixer.state_elements_per_sequence_per_gpu(tp)) is int
    for mixer in (m1, m2):
        assert mixer.cache_elements_per_token() == 0 == mixer.cache_elements_per_token_per_gpu(2)
        assert mixer.cached_tokens(99) == 0 and mixer.attended_tokens(99) == 0
        assert mixer.mean_prompt_attended_tokens(99) == 0 and mixer.attention_flops_per_token(99) == 0
        assert mixer.grows_with_context() is False


def test_tp_problems_name_what_does_not_divide():
    assert gqa().tp_problem(2) is None and gqa().tp_problem(8) is None
    assert gqa().tp_problem(3) == "does not divide the 8 attention heads"
    four_kv = FullAttention(hidden_size=1024, num_heads=12, num_kv_heads=4, head_dim=128, v_head_dim=128)
    assert four_kv.tp_problem(6) == "is not a multiple of the 4 KV heads"
    six_kv = FullAttention(hidden_size=1024, num_heads=12, num_kv_heads=6, head_dim=128, v_head_dim=128)
    assert six_kv.tp_problem(4) == "does not divide the 6 KV heads"
    assert six_kv.tp_problem(6) is None and six_kv.tp_problem(12) is None
    mla = MLAAttention(
        hidden_size=64,
        num_heads=4,
        q_lora_rank=None,
        kv_lora_rank=8,
        qk_nope_head_dim=8,
        qk_rope_head_dim=8,
        v_head_dim=8,
    )
    assert mla.tp_problem(4) is None and mla.tp_problem(3) == "does not divide the 4 attention heads"
    m1 = Mamba1Mixer(hidden_size=64, d_inner=128, d_state=8, d_conv=4, dt_rank=4)
    assert m1.tp_problem(4) is None and m1.tp_problem(3) == "does not divide the Mamba inner size 128"
    m2 = Mamba2Mixer(hidden_size=64, num_heads=4, head_dim=32, n_groups=2, d_state=16, d_conv=4)
    assert m2.tp_problem(2) is None and m2.tp_problem(8) == "does not divide the 4 Mamba heads"
    assert DenseMLP(hidden_size=8, intermediate_size=8).tp_problem(3) is None
    assert MoE(hidden_size=8, num_experts=3, top_k=1, expert_intermediate_size=8).tp_problem(2) is None


def test_check_parallelism_lists_the_tp_sizes_that_work():
    arch = toy_dense(mixer=FullAttention(hidden_size=1024, num_heads=12, num_kv_heads=4, head_dim=128, v_head_dim=128))
    with pytest.raises(QuotacalcError) as error:
        check_parallelism(arch, toy_deployment(tp=3))
    # 12 heads, 4 KV heads: TP 1, 2 and 4 split both; 12 gives each rank one head and a replica of a KV head.
    assert error.value.field == "tp"
    assert error.value.fix == "valid: 1, 2, 4, 12"
    # 3 divides the 12 query heads but not the 4 KV heads.
    assert error.value.problem == "3 does not divide the 4 KV heads of toy"
    check_parallelism(arch, toy_deployment(tp=4))
    # 64 heads, 8 KV heads (Llama 3.3 70B's): every power of two up to 64 splits them (above 8 ranks,
    # each holds a replicated KV head).
    wide = toy_dense(mixer=FullAttention(hidden_size=8192, num_heads=64, num_kv_heads=8, head_dim=128, v_head_dim=128))
    with pytest.raises(QuotacalcError) as error:
        check_parallelism(wide, toy_deployment(tp=3))
    assert error.value.fix == "valid: 1, 2, 4, 8, 16, 32, 64"
    # 40 heads, 10 KV heads (phi-4's): sizes that are not powers of two are listed too.
    phi = toy_dense(mixer=FullAttention(hidden_size=5120, num_heads=40, num_kv_heads=10, head_dim=128, v_head_dim=128))
    with pytest.raises(QuotacalcError) as error:
        check_parallelism(phi, toy_deployment(tp=4))
    assert error.value.fix == "valid: 1, 2, 5, 10, 20, 40"
    check_parallelism(phi, toy_deployment(tp=5))


def test_expert_parallel_checks():
    arch = toy_moe()
    with pytest.raises(QuotacalcError, match="does not split 4 experts") as error:
        check_parallelism(arch, toy_deployment(tp=8, expert_parallel=True, batch=4))
    assert error.value.field == "expert_parallel"
    assert error.value.fix == "choose a TP that divides the experts, or turn expert parallelism off"
    with pytest.raises(QuotacalcError, match="no experts") as error:
        check_parallelism(toy_dense(), toy_deployment(expert_parallel=True))
    assert error.value.field == "expert_parallel"
    assert error.value.fix == "drop --expert-parallel"
    check_parallelism(arch, toy_deployment(tp=2, expert_parallel=True))


# --------------------------------------------------------------------------- memory sums over layers


def test_memory_sums_for_a_mixed_model():
    # 1 full + 1 sliding (window 100) + 1 Mamba-1 layer, bf16 (2 B per value).
    sliding = SlidingWindowAttention(**gqa().model_dump(exclude={"kind"}), window_tokens=100)
    mamba = Mamba1Mixer(hidden_size=1024, d_inner=128, d_state=8, d_conv=4, dt_rank=4)
    arch = toy_dense().model_copy(
        update={
            "layers": tuple(Layer(mixer=m, feed_forward=None, norm_params=0) for m in (gqa(), sliding, mamba, None))
        }
    )
    # Growth per token: the full layer only, 512 values x 2 B; per GPU at TP 2: 256 x 2 B.
    assert memory.kv_bytes_per_token(arch, 2) == 1024
    assert memory.kv_bytes_per_token_per_gpu(arch, 2, 2) == 512
    assert memory.state_bytes_per_sequence(arch, 2) == 1408 * 2
    assert memory.state_bytes_per_sequence(arch, 2, tp=2) == 704 * 2
    # At 1,000 tokens: full 1000 x 512 + sliding 100 x 512 values, plus the state.
    assert memory.window_bytes_per_sequence(arch, 2, 1000) == 100 * 512 * 2
    assert memory.window_bytes_per_sequence(arch, 2, 40) == 40 * 512 * 2
    # An fp32 state keeps the conv state (3 x 128 values; 192 per GPU at TP 2) at the checkpoint's bf16 and the SSM
    # state (128 x 8; 512 per GPU) at 4 B, as vLLM's mamba_cache_dtype and mamba_ssm_cache_dtype do.
    assert memory.request_kv_bytes(arch, 1000, 2, 4) == (1000 * 512 + 100 * 512) * 2 + 384 * 2 + 1024 * 4
    assert memory.request_kv_bytes_per_gpu(arch, 1000, 2, 4, 2) == (1000 * 256 + 100 * 256) * 2 + 192 * 2 + 512 * 4
    # Attention FLOPs: full 2 x 8 x 256 x attended, sliding capped at 100; Mamba none.
    per_token = 2 * 8 * 256
    assert memory.attention_flops_per_output_token(arch, 1000) == per_token * (1000 + 100)
    windowed_mean = (100 * 101 / 2 + 900 * 100) / 1000
    assert memory.attention_flops_per_prompt_token(arch, 1000) == pytest.approx(per_token * (500.5 + windowed_mean))


# --------------------------------------------------------------------------- expert routing


def test_expected_distinct_experts_uniform_by_hand():
    # E = 4, k = 2: one token touches 2; two tokens touch 4 x (1 - (1/2)^2) = 3.
    assert expected_distinct_experts(4, 2, 1) == 2
    assert expected_distinct_experts(4, 2, 2) == 3
    assert expected_distinct_experts(4, 1, 3) == pytest.approx(4 * (1 - (3 / 4) ** 3))


def test_zipf_skew_keeps_top_k():
    # E = 4, k = 2, Zipf exponent 1: popularity 1, 1/2, 1/3, 1/4 over 25/12, so an expert is picked
    # by a token with probability k p_i = 24/25, 12/25, 8/25, 6/25. One token still touches k = 2.
    assert expected_distinct_experts(4, 2, 1, skew=1.0) == pytest.approx(2)
    # Two tokens: Σ 1 - (1 - k p_i)^2 = (624 + 456 + 336 + 264) / 625 = 2.688.
    picks = [Fraction(24, 25), Fraction(12, 25), Fraction(8, 25), Fraction(6, 25)]
    assert sum(1 - (1 - p) ** 2 for p in picks) == Fraction(1680, 625)
    assert expected_distinct_experts(4, 2, 2, skew=1.0) == pytest.approx(2.688)


def test_zipf_skew_caps_a_pick_at_certainty():
    # E = 4, k = 3, exponent 2: popularity 1, 1/4, 1/9, 1/16 over 205/144; k p_1 = 432/205 > 1 is capped at 1,
    # the rest are 108/205, 48/205 and 27/205: one token touches 1 + 183/205 = 388/205 experts (fewer than k).
    assert expected_distinct_experts(4, 3, 1, skew=2.0) == pytest.approx(388 / 205)


def test_busiest_rank_under_expert_parallelism():
    # E = 4 over 2 ranks (2 experts each), each touched with p = 1/2: a rank's count is Binomial(2, 1/2)
    # (1/4, 1/2, 1/4). P(max >= 1) = 1 - (1/4)^2 = 15/16, P(max >= 2) = 1 - (3/4)^2 = 7/16: E[max] = 22/16.
    assert expected_busiest_rank_experts(4, 2, 0.5) == pytest.approx(22 / 16)
    # One rank: the mean, E p; certainty: every expert.
    assert expected_busiest_rank_experts(4, 1, 0.25) == pytest.approx(1.0)
    assert expected_busiest_rank_experts(8, 4, 1.0) == pytest.approx(2.0)
    assert expected_busiest_rank_experts(8, 4, 0.0) == 0


# --------------------------------------------------------------------------- price: every figure of a toy replica


def test_toy_price_every_figure(toy):
    weight_bytes = 2 * TOY_TOTAL
    compute_rate = 2 * 500e12 * 0.5  # TP x peak bf16 x MFU
    prompt_token_s = 2 * TOY_TOTAL / compute_rate
    assert toy.total_params == TOY_TOTAL and toy.active_params == TOY_TOTAL
    assert toy.weight_bytes == weight_bytes
    assert toy.weight_bytes_per_gpu == weight_bytes / 2
    # 4 layers x 2 KV heads x (128 + 128) x 2 B; per GPU one KV head per rank.
    assert toy.kv_bytes_per_token == 4 * 2 * 256 * 2 == 4096
    assert toy.kv_bytes_per_token_per_gpu == 4 * 1 * 256 * 2 == 2048
    assert toy.state_bytes_per_sequence == 0
    assert toy.peak_flops_per_gpu == 500e12 and toy.compute_dtype == "bf16"
    assert toy.effective_bandwidth_per_gpu == 2e12 * 0.8
    assert toy.prompt_token_s == pytest.approx(prompt_token_s)
    # Mean prompt token at 1,000 attends 500.5 tokens: 4 layers x 2 x 8 heads x 256 x 500.5.
    assert toy.attention_flops_per_prompt_token == 4 * 2 * 8 * 256 * 500.5
    assert toy.prompt_token_at_context_s == pytest.approx((2 * TOY_TOTAL + 4 * 4096 * 500.5) / compute_rate)
    # Decode at batch 16, 1,000 tokens: weights per GPU plus 16 x 1,000 x 2,048 B of KV per GPU.
    assert toy.decode_weight_bytes_per_gpu == weight_bytes / 2
    assert toy.decode_kv_bytes_per_gpu == 16 * 1000 * 2048
    memory_s = (weight_bytes / 2 + 16 * 1000 * 2048) / 1.6e12
    compute_s = 16 * (2 * TOY_TOTAL + 4 * 4096 * 1000) / compute_rate
    assert toy.decode_memory_s == pytest.approx(memory_s)
    assert toy.decode_compute_s == pytest.approx(compute_s)
    assert toy.decode_bound == "memory" and toy.decode_step_s == pytest.approx(memory_s)
    assert toy.output_token_s == pytest.approx(memory_s / 16)
    assert toy.output_weight == pytest.approx(memory_s / 16 / prompt_token_s)
    assert toy.replica_units_per_s == pytest.approx(0.6 / prompt_token_s)
    # Pool: 0.9 x 80 GB - weights per GPU - 1 GiB, in 2,048-byte tokens.
    usable = 0.9 * 80e9 - weight_bytes / 2 - GIB
    assert toy.kv_pool_bytes_per_gpu == pytest.approx(usable)
    assert toy.kv_pool_tokens == math.floor(usable / 2048) == 34_601_261
    assert toy.kv_pool_source == "estimated"
    assert toy.max_resident_sequences == math.floor(usable / (1000 * 2048)) == 34_601
    # 2 GPUs x $2 x 700 h; a unit costs the replica's dollars per second over its units per second.
    assert toy.dedicated_usd_per_month == 2 * 2.0 * 700 == 2800
    usd_per_unit = 2 * 2.0 / 3600 / (0.6 / prompt_token_s)
    assert toy.usd_per_unit == pytest.approx(usd_per_unit)
    assert toy.usd_per_million_prompt_tokens == pytest.approx(1e6 * usd_per_unit)
    assert toy.usd_per_million_cached_prompt_tokens == pytest.approx(1e6 * usd_per_unit * 0.1)
    assert toy.usd_per_million_output_tokens == pytest.approx(1e6 * usd_per_unit * memory_s / 16 / prompt_token_s)
    assert toy.expert_traffic is None and toy.warnings == ()


def test_cached_prompt_price_follows_its_weight():
    heavy = price(toy_inputs(cached_prompt_weight=0.25))
    assert heavy.usd_per_million_cached_prompt_tokens == pytest.approx(0.25 * heavy.usd_per_million_prompt_tokens)
    free = price(toy_inputs(cached_prompt_weight=0.0))
    assert free.usd_per_million_cached_prompt_tokens == 0


def test_compute_bound_decode_at_a_large_batch():
    # Batch 4,096 at 10 tokens: memory (weights + 4,096 x 10 x 2,048 B) / 1.6e12 = 92.3 us;
    # compute 4,096 x (2 x 62.9 M + 4 x 4,096 x 10) / 5e14 = 1.03 ms.
    result = price(toy_inputs(batch=4096, context=10))
    compute_s = 4096 * (2 * TOY_TOTAL + 4 * 4096 * 10) / 5e14
    assert result.decode_bound == "compute"
    assert result.decode_compute_s == pytest.approx(compute_s)
    assert result.decode_memory_s == pytest.approx((TOY_TOTAL + 4096 * 10 * 2048) / 1.6e12)
    assert result.decode_step_s == pytest.approx(compute_s)


def test_measured_pool_overrides_the_estimate():
    result = price(toy_inputs(kv_pool_tokens=1000))
    assert result.kv_pool_tokens == 1000 and result.kv_pool_source == "measured"
    assert result.kv_pool_bytes_per_gpu == 1000 * 2048
    # 1,000 tokens of pool hold one 1,000-token sequence; a batch of 16 does not fit.
    assert result.max_resident_sequences == 1
    assert any("does not fit the KV pool" in warning and "holds 1 such" in warning for warning in result.warnings)


def test_model_that_does_not_fit_is_refused():
    # 0.9 x 80 GB leaves nothing once 74 GB of weights per GPU are there.
    layout = uniform_layout("huge", 2 * 74e9 / TOY_TOTAL, "bf16", "toy")
    with pytest.raises(QuotacalcError, match="does not fit") as error:
        price(toy_inputs(layout=layout))
    assert error.value.field == "tp"


def test_gpu_without_the_compute_dtype_is_refused():
    layout = uniform_layout("fp4", 0.5, "fp4", "toy")
    with pytest.raises(QuotacalcError, match="no tensor cores for fp4") as error:
        price(toy_inputs(layout=layout))
    assert error.value.field == "weight_dtype"
    assert error.value.fix == "choose another weight dtype"


def test_a_batch_the_pool_holds_exactly_is_priced_as_given():
    # 16 sequences of 1,000 tokens at 2,048 B per token per GPU: a pool of 16,000 tokens holds exactly 16.
    result = price(toy_inputs(kv_pool_tokens=16_000))
    assert result.max_resident_sequences == 16
    assert result.warnings == ()
    assert result.decode_kv_bytes_per_gpu == 16 * 1000 * 2048


def test_a_context_the_pool_cannot_hold_once_is_refused():
    # An estimated pool one token short of the context: the context (or the deployment) is what to change.
    context = price(toy_inputs()).kv_pool_tokens + 1
    with pytest.raises(QuotacalcError) as error:
        price(toy_inputs(context=context))
    assert error.value.field == "context"
    assert error.value.problem == f"one sequence of {context:,} tokens does not fit the KV pool"
    assert error.value.fix == "lower --context, raise --tp, or use --kv-dtype fp8"


def test_a_given_pool_too_small_for_one_sequence_is_blamed_on_itself():
    # 999 tokens given for a 1,000-token context: the given pool is the figure to doubt, not the context.
    with pytest.raises(QuotacalcError) as error:
        price(toy_inputs(kv_pool_tokens=999))
    assert error.value.field == "kv_pool_tokens"
    assert error.value.problem == "a pool of 999 tokens does not hold one sequence of 1,000 tokens"
    assert "logged 'GPU KV cache size'" in error.value.fix


def test_context_above_the_models_maximum_is_refused():
    arch = toy_dense().model_copy(update={"max_context_tokens": 512})
    with pytest.raises(QuotacalcError, match="1,000 tokens exceed toy's maximum context of 512") as error:
        price(toy_inputs(arch=arch))
    assert error.value.field == "context"
    assert price(toy_inputs(arch=arch, context=512)).inputs.deployment.context == 512


def test_fp8_weights_compute_in_fp8():
    # fp8 storage: 1 B per parameter, matmuls at 1,000 TFLOPS: half the bf16 prompt-token time.
    layout = uniform_layout("fp8", 1, "fp8", "toy")
    result = price(toy_inputs(layout=layout))
    assert result.weight_bytes == TOY_TOTAL
    assert result.prompt_token_s == pytest.approx(2 * TOY_TOTAL / (2 * 1000e12 * 0.5))


def test_all_windowed_model_counts_the_pool_at_the_context():
    # Every layer slides over 100 tokens: no growth per token; the pool is counted in tokens of
    # a 1,000-token sequence's per-token average: 4 layers x 100 x 256 x 2 B per GPU / 1,000.
    sliding = SlidingWindowAttention(**gqa().model_dump(exclude={"kind"}), window_tokens=100)
    result = price(toy_inputs(arch=toy_dense(mixer=sliding)))
    per_sequence = 4 * 100 * 256 * 2
    assert result.kv_bytes_per_token == 0
    assert result.decode_kv_bytes_per_gpu == 16 * per_sequence
    usable = 0.9 * 80e9 - TOY_TOTAL - GIB
    assert result.kv_pool_tokens == math.floor(usable / (per_sequence / 1000))
    assert result.max_resident_sequences == math.floor(usable / per_sequence)


# --------------------------------------------------------------------------- MoE traffic


def toy_moe() -> ModelArch:
    """2 layers of GQA attention + 4 experts (3 x 1024 x 512 each), top 2."""
    moe = MoE(hidden_size=1024, num_experts=4, top_k=2, expert_intermediate_size=512)
    layer = Layer(mixer=gqa(), feed_forward=moe, norm_params=2048)
    return toy_dense().model_copy(update={"layers": (layer, layer)})


EXPERT = 3 * 1024 * 512


def test_moe_decode_reads_the_experts_the_batch_touches():
    arch = toy_moe()
    total = arch.total_params()
    assert total == 2 * (TOY_ATTENTION + 1024 * 4 + 4 * EXPERT + 2048) + 2 * 1000 * 1024 + 1024
    assert arch.active_params() == total - 2 * 2 * EXPERT
    # Batch 2 touches 4 x (1 - (1/2)^2) = 3 experts per layer; TP 2 splits every byte.
    result = price(toy_inputs(arch=arch, batch=2))
    non_expert_bytes = 2 * (total - 2 * 4 * EXPERT)
    assert result.expert_traffic.expected_experts_touched == 3
    assert result.expert_traffic.expert_bytes == 2 * EXPERT
    assert result.expert_traffic.moe_layers == 2
    assert result.decode_weight_bytes_per_gpu == pytest.approx((non_expert_bytes + 2 * 3 * 2 * EXPERT) / 2)
    # Prefill runs the active parameters only.
    assert result.prompt_token_s == pytest.approx(2 * (total - 4 * EXPERT) / 5e14)


def test_moe_under_expert_parallelism_waits_for_the_busiest_rank():
    # Batch 2: p = 3/4 per expert; each of 2 ranks holds 2 experts: Binomial(2, 3/4) = (1/16, 6/16, 9/16);
    # E[max of 2] = P(max >= 1) + P(max >= 2) = (1 - (1/16)^2) + (1 - (7/16)^2) = 255/256 + 207/256.
    arch = toy_moe()
    busiest = Fraction(255, 256) + Fraction(207, 256)
    assert expected_busiest_rank_experts(4, 2, 0.75) == pytest.approx(float(busiest))
    result = price(toy_inputs(arch=arch, batch=2, expert_parallel=True))
    non_expert_bytes = 2 * (arch.total_params() - 2 * 4 * EXPERT)
    assert result.decode_weight_bytes_per_gpu == pytest.approx(non_expert_bytes / 2 + 2 * float(busiest) * 2 * EXPERT)


def test_moe_skew_in_the_price():
    result = price(toy_inputs(arch=toy_moe(), batch=2, expert_skew=1.0))
    # E = 4, k = 2, exponent 1, batch 2: 2.688 experts (test_zipf_skew_keeps_top_k).
    assert result.expert_traffic.expected_experts_touched == pytest.approx(2.688)


def test_moe_layers_of_different_shapes_are_refused():
    small = MoE(hidden_size=1024, num_experts=4, top_k=1, expert_intermediate_size=512)
    arch = toy_moe()
    arch = arch.model_copy(
        update={"layers": (arch.layers[0], arch.layers[1].model_copy(update={"feed_forward": small}))}
    )
    with pytest.raises(QuotacalcError, match="different shapes") as refused:
        price(toy_inputs(arch=arch))
    assert refused.value.field == "model"


# --------------------------------------------------------------------------- a hybrid's state in the price


def test_state_counts_in_resident_sequences():
    # 4 Mamba-1 layers (state 1,408 values each, 704 per GPU at TP 2) beside the 4 attention layers.
    mamba = Mamba1Mixer(hidden_size=1024, d_inner=128, d_state=8, d_conv=4, dt_rank=4)
    base = toy_dense()
    layers = base.layers + (Layer(mixer=mamba, feed_forward=None, norm_params=0),) * 4
    arch = base.model_copy(update={"layers": layers})
    result = price(toy_inputs(arch=arch, kv_pool_tokens=100_000))
    assert result.state_bytes_per_sequence == 4 * 1408 * 2
    per_sequence = 1000 * 2048 + 4 * 704 * 2
    assert result.decode_kv_bytes_per_gpu == 16 * per_sequence
    # vLLM's hybrid manager (core/kv_groups.py): at TP 2 an attention layer keeps 512 B a token and a Mamba layer
    # 1,408 B of state per GPU, so the block stays 16 tokens (16 x ceil(1,408 / (16 x 512)) = 16) and the state
    # page is padded to 16 x 512 = 8,192 B; 4 + 4 layers make 2 groups of 4. The measured 100,000 tokens at
    # max_model_len 1,000 (the toy has no maximum context: --context) are ceil(100,000 x (63 + 1) / 1,000)
    # = 6,400 blocks; a decoding sequence of 1,000 tokens takes 63 + 1 of them.
    assert result.kv_pool_bytes_per_gpu == 6400 * 8192 * 4
    assert result.max_resident_sequences == 6400 // 64 == 100


# --------------------------------------------------------------------------- request KV


def test_request_kv_by_hand(toy):
    kv = request_kv(toy, 10_000)
    assert kv.request_kv_bytes == 10_000 * 4096
    assert kv.request_kv_bytes_per_gpu == 10_000 * 2048
    assert kv.pool_share == pytest.approx(10_000 / 34_601_261, rel=1e-6)
    assert kv.requests_resident == 3460 and kv.requests_to_fill_pool == 3461
    assert kv.window_kv_bytes == 0 and kv.state_bytes == 0
    # A prompt token at 10,000 tokens: (2 x params + 4 x 4,096 x 5,000.5) / (2 x params) units.
    units = (2 * TOY_TOTAL + 4 * 4096 * 5000.5) / (2 * TOY_TOTAL)
    assert kv.prompt_token_units_at_context == pytest.approx(units)
    assert kv.prefill_units == pytest.approx(10_000 * units)


def test_request_kv_of_exactly_the_pool():
    replica = price(toy_inputs(kv_pool_tokens=5000))
    kv = request_kv(replica, 5000)
    assert kv.pool_share == 1 and kv.requests_resident == 1 and kv.requests_to_fill_pool == 1
    half = request_kv(replica, 2000)
    # 2,000 of 5,000 tokens: 2 fit at once, 3 fill the pool.
    assert half.pool_share == pytest.approx(0.4) and half.requests_resident == 2 and half.requests_to_fill_pool == 3


def test_request_kv_of_a_state_only_model_at_zero_kv():
    mamba = Mamba1Mixer(hidden_size=1024, d_inner=128, d_state=8, d_conv=4, dt_rank=4)
    arch = toy_dense(mixer=mamba)
    replica = price(toy_inputs(arch=arch))
    kv = request_kv(replica, 100)
    assert kv.request_kv_bytes == 4 * 1408 * 2 and kv.state_bytes == 4 * 1408 * 2
    assert kv.prompt_token_units_at_context == 1


# --------------------------------------------------------------------------- tenant sizing


def test_tenant_units_with_cached_prompt_and_its_weight(toy):
    # 1,000 prompt tokens, 40% from the prefix cache at weight 0.1, 100 output tokens at W.
    tenant = Traffic(rps=3, prompt_tokens=1000, output_tokens=100, cached_fraction=0.4)
    sized = size_traffic(toy, tenant)
    # An uncached prompt token inside a 1,000-token prompt also attends 500.5 tokens on average:
    # (2 x params + 4 layers x 4,096 x 500.5) / (2 x params) units.
    token_units = (2 * TOY_TOTAL + 4 * 4096 * 500.5) / (2 * TOY_TOTAL)
    per_request = 600 * token_units + 400 * 0.1 + toy.output_weight * 100
    assert sized.units_per_request == pytest.approx(per_request)
    assert sized.units_per_s == pytest.approx(3 * per_request)
    assert sized.replicas == pytest.approx(3 * per_request / toy.replica_units_per_s)
    assert sized.bucket_rate_units_per_s == pytest.approx(3 * per_request)
    # burst_s 30 in the toy deployment
    assert sized.bucket_depth_units == pytest.approx(30 * 3 * per_request)
    assert sized.shared_usd_per_month == pytest.approx(sized.replicas * 2800)


def test_tenant_request_kv_includes_its_output_tokens(toy):
    sized = size_traffic(toy, Traffic(rps=1, prompt_tokens=3000, output_tokens=1000))
    # The request at its full length: 4,000 tokens x 4,096 B; its share is 4,000 x 2,048 B of the pool per GPU.
    assert sized.request_kv_bytes == 4000 * 4096
    assert sized.request_pool_share == pytest.approx(4000 * 2048 / toy.kv_pool_bytes_per_gpu)


def test_dedicated_replicas_round_up_and_at_least_one(toy):
    per_request = 1000 * (2 * TOY_TOTAL + 4 * 4096 * 500.5) / (2 * TOY_TOTAL)  # prompt only, at its attention
    for wanted, expected in ((1e-9, 1), (0.3, 1), (1.0, 1), (2.0, 2), (2.5, 3)):
        rps = wanted * toy.replica_units_per_s / per_request
        sized = size_traffic(toy, Traffic(rps=rps, prompt_tokens=1000, output_tokens=0))
        assert sized.dedicated_replicas == expected, wanted
        assert sized.dedicated_total_usd_per_month == expected * 2800
    # No requests at all size to nothing: refused, as a plan refuses such a tenant.
    with pytest.raises(QuotacalcError) as refused:
        size_traffic(toy, Traffic(rps=0, prompt_tokens=1000, output_tokens=0))
    assert refused.value.field == "rps" and "0 units/s" in refused.value.problem
    with pytest.raises(QuotacalcError) as refused:
        size_traffic(toy, Traffic(rps=5, prompt_tokens=0, output_tokens=0))
    assert refused.value.field == "prompt_tokens" and "0 units/s" in refused.value.problem
    # Every prompt token cached at weight 0 and no output: 0 units a request, refused alike.
    free = toy.inputs.model_copy(
        update={"deployment": toy.inputs.deployment.model_copy(update={"cached_prompt_weight": 0.0})}
    )
    with pytest.raises(QuotacalcError) as refused:
        size_traffic(price(free), Traffic(rps=5, prompt_tokens=100, output_tokens=0, cached_fraction=1.0))
    assert refused.value.field == "cached_fraction" and "0 units" in refused.value.problem


def test_a_share_of_replicas_never_costs_more_than_the_whole_replicas_it_rounds_to(toy):
    """A load a hair above one replica from floating-point noise is one dedicated replica, and its shared price is
    that replica's, not 7,200.000000000005 against 7,200 (a CI check of shared <= dedicated failed on it)."""
    per_request = 1000 * (2 * TOY_TOTAL + 4 * 4096 * 500.5) / (2 * TOY_TOTAL)
    rps = toy.replica_units_per_s / per_request * (1 + 4e-16)
    sized = size_traffic(toy, Traffic(rps=rps, prompt_tokens=1000, output_tokens=0))
    assert sized.replicas > 1 and sized.dedicated_replicas == 1
    assert sized.shared_usd_per_month == sized.dedicated_total_usd_per_month == 2800
    half = size_traffic(toy, Traffic(rps=rps / 2, prompt_tokens=1000, output_tokens=0))
    assert half.shared_usd_per_month == pytest.approx(1400)  # a real share stays its share


# --------------------------------------------------------------------------- weight layouts


def test_weight_layout_sums_group_by_group():
    layout = WeightLayout(
        groups={
            group: GroupStorage(dtype="int4", bytes_per_param=0.5)
            if group == ParamGroup.MLP
            else GroupStorage(dtype="bf16", bytes_per_param=2)
            for group in ParamGroup
        },
        compute_dtype="bf16",
        source="toy",
    )
    counts = {ParamGroup.MLP: 300, ParamGroup.ATTENTION: 100, ParamGroup.NORM: 0}
    assert layout.weight_bytes(counts) == 300 * 0.5 + 100 * 2
    assert layout.storage(ParamGroup.MLP).dtype == "int4"
    assert layout.describe(counts) == "int4 (75.0% of params), bf16 rest"
    assert layout.describe({ParamGroup.ATTENTION: 5}) == "bf16"
    uniform = uniform_layout("fp8", 1, "fp8", "flag")
    assert uniform.weight_bytes(counts) == 400 and uniform.describe(counts) == "fp8"
    assert uniform.compute_dtype == "fp8" and uniform.source == "flag"


# --------------------------------------------------------------------------- explain


@pytest.mark.parametrize(
    ("number", "text"),
    [
        (True, "True"),
        (3, "3"),
        (1_234_567.0, "1,234,567"),  # a whole number below 1e15: thousands separators
        (1e15, "1e+15"),  # from 1e15 on: 4 significant digits
        (2_500_000.5, "2.5e+06"),  # not whole, at or above 1e6: 4 significant digits
        (0.0005, "0.0005"),  # below 1e-3: 4 significant digits
        (0.5, "0.5"),
        (0.0153428, "0.01534"),  # below 1: 4 significant digits
        (12.34567, "12.3457"),  # else 4 decimals, trailing zeros dropped
        (12.00001, "12"),  # ... and the point with them
        (1_000_000.5, "1e+06"),
        (999.99999, "1000"),
        (-1234.5, "-1234.5"),
        (0, "0"),
        (-0.25, "-0.25"),
    ],
)
def test_fmt(number, text):
    from quotacalc.core.explain import fmt

    assert fmt(number) == text


def test_ledger_records_and_returns():
    from quotacalc.core.explain import Ledger

    ledger = Ledger()
    assert ledger.record("x", 2.5, formula="a × b", substituted="1 × 2.5", unit="s", note="n") == 2.5
    assert ledger.record("y", 1, formula="f", substituted="1", unit="") == 1
    (x, y) = ledger.steps
    assert (x.name, x.value, x.formula, x.substituted, x.unit, x.note) == ("x", 2.5, "a × b", "1 × 2.5", "s", "n")
    assert y.note is None


def test_size_steps_are_named_for_their_figures(toy):
    sized = size_traffic(toy, Traffic(rps=1, prompt_tokens=100, output_tokens=10))
    assert [step.name for step in sized.steps] == [
        "prompt_token_units",
        "units_per_request",
        "units_per_s",
        "replicas",
        "bucket_rate_units_per_s",
        "bucket_depth_units",
        "shared_usd_per_month",
        "dedicated_total_usd_per_month",
        "request_pool_share",
    ]
    values = {step.name: step.value for step in sized.steps}
    for name in ("units_per_request", "units_per_s", "replicas", "bucket_depth_units", "request_pool_share"):
        assert values[name] == getattr(sized, name), name


def test_a_request_of_exactly_the_pool_is_served_and_one_token_more_is_not():
    replica = price(toy_inputs(kv_pool_tokens=5000, batch=1))
    exact = size_traffic(replica, Traffic(rps=1, prompt_tokens=4000, output_tokens=1000))
    assert exact.request_pool_share == 1
    with pytest.raises(
        QuotacalcError, match=r"one request of 5,001 tokens needs 100% of the replica's KV pool"
    ) as error:
        size_traffic(replica, Traffic(rps=1, prompt_tokens=4001, output_tokens=1000))
    assert error.value.field == "prompt_tokens"
    # 5,001 / 5,000 = 100.02%, shown rounded; the fix names every way to make room.
    assert str(error.value) == (
        "prompt_tokens: one request of 5,001 tokens needs 100% of the replica's KV pool (5,000 tokens) "
        "(shorten the tenant's requests, use a GPU with more memory, raise --tp, or use --kv-dtype fp8)"
    )


def test_the_shortest_requests_are_sized_at_their_own_length():
    replica = price(toy_inputs(kv_pool_tokens=5000, batch=1))
    # One output token and no prompt: a request of 1 token, 1/5,000 of a 5,000-token pool (full attention).
    one = size_traffic(replica, Traffic(rps=1, prompt_tokens=0, output_tokens=1))
    assert one.request_pool_share == pytest.approx(1 / 5000, rel=1e-12)
    # No prompt, or under one token of it: charged at the parameter-only cost of 1 unit per prompt token.
    for prompt_tokens in (0, 0.4):
        sized = size_traffic(replica, Traffic(rps=1, prompt_tokens=prompt_tokens, output_tokens=1))
        assert {step.name: step.value for step in sized.steps}["prompt_token_units"] == 1.0
    # A one-token prompt is charged at its cost inside a 1-token prompt, as kv reports it (above 1: it
    # attends to itself), not a 2-token one.
    sized = size_traffic(replica, Traffic(rps=1, prompt_tokens=1, output_tokens=0))
    at_one = request_kv(replica, 1).prompt_token_units_at_context
    assert at_one > 1 and at_one < request_kv(replica, 2).prompt_token_units_at_context
    assert {step.name: step.value for step in sized.steps}["prompt_token_units"] == at_one


def test_request_kv_refuses_a_context_above_the_models_maximum():
    arch = toy_dense().model_copy(update={"max_context_tokens": 512})
    replica = price(toy_inputs(arch=arch, context=512))
    with pytest.raises(QuotacalcError) as error:
        request_kv(replica, 1000)
    assert str(error.value) == "context: 1,000 tokens exceed toy's maximum context of 512 (at most 512 tokens)"
    assert request_kv(replica, 512).context_tokens == 512


def test_request_kv_steps_are_named_for_their_figures(toy):
    kv = request_kv(toy, 1000)
    assert [step.name for step in kv.steps] == [
        "request_kv_bytes",
        "request_kv_bytes_per_gpu",
        "pool_share",
        "requests_resident",
        "requests_to_fill_pool",
        "prompt_token_units_at_context",
        "prefill_units",
    ]
    values = {step.name: step.value for step in kv.steps}
    for name in values:
        assert values[name] == getattr(kv, name), name


def test_plan_numbers_must_be_finite_and_positive():
    from quotacalc.core.plan import _finite_positive

    assert _finite_positive(0.5) == 0.5 and _finite_positive(1e-9) == 1e-9
    for bad in (0.0, -1.0, float("inf"), float("nan")):
        with pytest.raises(ValueError, match="must be a positive finite number"):
            _finite_positive(bad)


# --------------------------------------------------------------------------- bounds' messages


def test_bounds_name_the_limit_and_the_value():
    from quotacalc.core.deployment import _at_most, _fraction, digit_count

    assert _at_most(8, 8) == 8  # the limit itself is allowed
    with pytest.raises(ValueError, match=r"^must be at most 8, got 9$"):
        _at_most(9, 8)
    with pytest.raises(ValueError, match=r"^must be at most 1,000, got 1000.5$"):
        _at_most(1000.5, 1000)
    # Up to 10**20 an integer is shown; above it, only its length (a 400-digit flag is not echoed).
    with pytest.raises(ValueError, match=r"^must be at most 1,000, got 100000000000000000000$"):
        _at_most(10**20, 1000)
    with pytest.raises(ValueError, match=r"^must be at most 1,000, got a 22-digit number$"):
        _at_most(10**21, 1000)
    with pytest.raises(ValueError, match=r"^must be at most 1,000, got a 401-digit number$"):
        _at_most(10**400, 1000)
    assert digit_count(10**400) == "401"
    with pytest.raises(ValueError, match=r"^must be at most 1,000, got a 21-digit number$"):
        _at_most(10**20 + 1, 1000)  # just above 10**20: its length, not its digits
    assert digit_count(10**5000) == "more than 4,300"  # Python refuses to print an int that long
    assert _fraction(1.0) == 1.0 and _fraction(0.0, allow_zero=True) == 0.0
    with pytest.raises(ValueError, match=r"^must be in \(0, 1\], got 0.0$"):
        _fraction(0.0)
    with pytest.raises(ValueError, match=r"^must be in \[0, 1\], got 1.5$"):
        _fraction(1.5, allow_zero=True)
    with pytest.raises(ValueError, match=r"^must be in \(0, 1\], got -0.1$"):
        _fraction(-0.1)


# --------------------------------------------------------------------------- fmt, the explain steps' numbers


@pytest.mark.parametrize(
    ("number", "shown"),
    [
        (0, "0"),
        (1, "1"),
        (2.0, "2"),
        (1e6, "1,000,000"),  # whole numbers: grouped digits
        (1.5, "1.5"),  # from 1: four decimals, zeros dropped
        (1.0005, "1.0005"),
        (1.23456, "1.2346"),
        (999_999.5, "999999.5"),
        (1_234_567.5, "1.235e+06"),  # from 1e6: four significant digits, scientific
        (0.5, "0.5"),  # under 1: four significant digits
        (0.123456, "0.1235"),
        (0.001, "0.001"),
        (0.00025, "0.00025"),
        (-2.5e-4, "-0.00025"),
    ],
)
def test_fmt_branches(number, shown):
    from quotacalc.core.explain import fmt

    assert fmt(number) == shown


# --------------------------------------------------------------------------- MXFP4 expert padding (vLLM's kernels)


def _mxfp4(*moes):
    """A stand-in model of these MoE layers whose routed experts are stored in MXFP4 (4.25 bits)."""
    from types import SimpleNamespace

    storage = SimpleNamespace(dtype="mxfp4", bytes_per_param=4.25 / 8)
    return SimpleNamespace(moe_layers=lambda: list(moes)), SimpleNamespace(storage=lambda group: storage)


def test_vllm_default_mxfp4_backend_by_gpu():
    from quotacalc.core.weights import vllm_default_mxfp4_backend

    for gpu_id in ("h100-sxm", "h100-pcie", "h200", "h20"):
        assert vllm_default_mxfp4_backend(gpu_id, "nvidia") == "triton"
    for gpu_id in ("b200", "gb200", "b300", "gb300"):
        assert vllm_default_mxfp4_backend(gpu_id, "nvidia") == "flashinfer-trtllm"
    for gpu_id in ("a100-80gb-sxm", "l40s", "l4"):
        assert vllm_default_mxfp4_backend(gpu_id, "nvidia") == "marlin"
    assert vllm_default_mxfp4_backend("mi300x", "amd") == "rocm"


def test_round_up_to_a_multiple():
    from quotacalc.core.weights import _round_up

    assert _round_up(2880, 64) == 2880 and _round_up(2880, 128) == 2944 and _round_up(2880, 256) == 3072
    assert _round_up(1, 128) == 128 and _round_up(128, 128) == 128 and _round_up(1440, 128) == 1536


def test_mxfp4_padding_of_gpt_oss_sized_experts_by_hand():
    from quotacalc.core.weights import mxfp4_padding_bytes_per_gpu

    # gpt-oss-120b's experts: hidden 2,880, intermediate 2,880, gated (3 matrices), 128 per layer.
    moe = MoE(hidden_size=2880, num_experts=128, top_k=4, expert_intermediate_size=2880)
    arch, layout = _mxfp4(moe)
    expert_bytes = 3 * 2880 * 2880 * (4.25 / 8) * 128  # 1,692,057,600 B per layer
    assert expert_bytes == 1_692_057_600
    # Marlin at TP 1: intermediate 2,880 -> 2,944 (x128), hidden 2,880 -> 3,072 (x256).
    marlin = expert_bytes * (2944 * 3072 / (2880 * 2880) - 1)
    assert mxfp4_padding_bytes_per_gpu(arch, layout, 1, False, "marlin") == pytest.approx(marlin, rel=1e-12)
    # TP 2 splits the intermediate: 1,440 per rank -> 1,536; the padded bytes are split over 2 GPUs.
    tp2 = expert_bytes * (1536 * 3072 / (1440 * 2880) - 1) / 2
    assert mxfp4_padding_bytes_per_gpu(arch, layout, 2, False, "marlin") == pytest.approx(tp2, rel=1e-12)
    # Expert parallel keeps each expert whole (2,880), and the experts are spread over the 2 GPUs.
    assert mxfp4_padding_bytes_per_gpu(arch, layout, 2, True, "marlin") == pytest.approx(marlin / 2, rel=1e-12)
    # Triton pads the intermediate to 64 (2,880 is 45 x 64) and keeps the hidden size: nothing added.
    assert mxfp4_padding_bytes_per_gpu(arch, layout, 1, False, "triton") == 0.0
    # Ungated experts have two matrices, not three.
    plain = MoE(hidden_size=2880, num_experts=128, top_k=4, expert_intermediate_size=2880, gated=False)
    arch, layout = _mxfp4(plain)
    assert mxfp4_padding_bytes_per_gpu(arch, layout, 1, False, "marlin") == pytest.approx(marlin * 2 / 3, rel=1e-12)


def test_mxfp4_padding_skips_experts_split_below_one_channel_and_sums_layers():
    from quotacalc.core.weights import mxfp4_padding_bytes_per_gpu

    # Intermediate 2 over TP 2: one channel per rank, padded to 128 (x128) and the hidden 256 -> 256.
    narrow = MoE(hidden_size=256, num_experts=2, top_k=1, expert_intermediate_size=2)
    # Intermediate 1 over TP 2: nothing per rank (0 channels): no padding from this layer.
    empty = MoE(hidden_size=256, num_experts=2, top_k=1, expert_intermediate_size=1)
    arch, layout = _mxfp4(empty, narrow)
    narrow_bytes = 3 * 256 * 2 * (4.25 / 8) * 2
    expected = narrow_bytes * (128 * 256 / (1 * 256) - 1) / 2
    assert mxfp4_padding_bytes_per_gpu(arch, layout, 2, False, "marlin") == pytest.approx(expected, rel=1e-12)
    # Not MXFP4: nothing.
    from types import SimpleNamespace

    bf16 = SimpleNamespace(storage=lambda group: SimpleNamespace(dtype="bf16", bytes_per_param=2))
    assert mxfp4_padding_bytes_per_gpu(arch, bf16, 2, False, "marlin") == 0.0


def test_engine_padding_follows_the_deployment_backend_or_the_gpus_default():
    from types import SimpleNamespace

    from quotacalc.core.weights import engine_padding_bytes_per_gpu, mxfp4_padding_bytes_per_gpu

    moe = MoE(hidden_size=2880, num_experts=128, top_k=4, expert_intermediate_size=2880)
    arch, layout = _mxfp4(moe)

    def deployment(backend, expert_parallel=False):
        return SimpleNamespace(mxfp4_moe_backend=backend, tp=2, expert_parallel=expert_parallel)

    a100 = SimpleNamespace(id="a100-80gb-sxm", vendor="nvidia")
    mi300 = SimpleNamespace(id="mi300x", vendor="amd")
    assert engine_padding_bytes_per_gpu(arch, layout, deployment(None), a100) == mxfp4_padding_bytes_per_gpu(
        arch, layout, 2, False, "marlin"
    )
    assert engine_padding_bytes_per_gpu(arch, layout, deployment(None), mi300) == mxfp4_padding_bytes_per_gpu(
        arch, layout, 2, False, "rocm"
    )
    # The deployment's backend wins over the GPU's default: Triton pads 1,440 channels per rank to 1,472 (x64).
    triton = 1_692_057_600 * (1472 / 1440 - 1) / 2
    assert engine_padding_bytes_per_gpu(arch, layout, deployment("triton"), a100) == pytest.approx(triton, rel=1e-12)
    assert engine_padding_bytes_per_gpu(arch, layout, deployment(None, True), a100) == mxfp4_padding_bytes_per_gpu(
        arch, layout, 2, True, "marlin"
    )
    assert mxfp4_padding_bytes_per_gpu(arch, layout, 2, True, "marlin") != mxfp4_padding_bytes_per_gpu(
        arch, layout, 2, False, "marlin"
    )


def test_weight_layout_label_sums_each_dtype_over_its_groups():
    from quotacalc.core.weights import GroupStorage, WeightLayout

    fp4 = GroupStorage(dtype="mxfp4", bytes_per_param=4.25 / 8)
    bf16 = GroupStorage(dtype="bf16", bytes_per_param=2)
    fp8 = GroupStorage(dtype="fp8", bytes_per_param=1)
    groups = {group: bf16 for group in ParamGroup}
    groups[ParamGroup.ROUTED_EXPERTS] = fp4
    groups[ParamGroup.ATTENTION] = fp8
    layout = WeightLayout(groups=groups, compute_dtype="bf16", source="test")
    counts = {
        ParamGroup.ROUTED_EXPERTS: 900,
        ParamGroup.ATTENTION: 40,
        ParamGroup.EMBEDDING: 30,
        ParamGroup.LM_HEAD: 30,
    }
    # bf16 holds 30 + 30 = 60 parameters, more than fp8's 40: mxfp4 90.0%, then bf16, then fp8.
    assert layout.describe(counts) == "mxfp4 (90.0% of params), bf16/fp8 rest"
    assert layout.describe({ParamGroup.ROUTED_EXPERTS: 5, ParamGroup.EMBEDDING: 0}) == "mxfp4"


def test_kv_heads_per_rank_is_a_whole_count():
    from quotacalc.core.arch import kv_heads_per_rank

    assert kv_heads_per_rank(8, 2) == 4 and type(kv_heads_per_rank(8, 2)) is int
    assert kv_heads_per_rank(8, 8) == 1 and kv_heads_per_rank(8, 16) == 1  # replicated below one per rank
    assert type(kv_heads_per_rank(8, 16)) is int
