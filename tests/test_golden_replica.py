"""The numeric replica model and the engine reserve, on round coefficients worked out by hand.

``ReplicaModel`` is built directly from coefficients a reader can hold in their head (a 1 GFLOP
token, 1 TFLOP/s, 100 GB/s, 1,000 B of KV per token, one window of 100 tokens), so every
expected time below is arithmetic shown in the comment, not a figure copied from the program.
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from quotacalc.catalog.gpus import GpuSources, GpuSpec
from quotacalc.core import memory
from quotacalc.core.arch import DenseMLP, FullAttention, Layer, ModelArch, MoE
from quotacalc.core.deployment import GIB, Deployment
from quotacalc.core.replica import ReplicaModel, _by_window, allreduce_s_per_token, allreduces_per_step

MODEL = ReplicaModel(
    flops_per_token=1e9,
    attention_flops_per_attended_token=1e3,
    sliding_attention=((100, 500.0),),
    compute_flops_per_s=1e12,
    bandwidth_bytes_per_s=1e11,
    kv_bytes_per_token_per_gpu=1000,
    sliding_kv=((100, 200.0),),
    state_bytes_per_sequence_per_gpu=5000,
    weight_bytes_per_gpu=1e9,
    decode_weight_bytes_per_gpu_at=lambda batch: 1e9 + batch * 1e6,
    kv_pool_bytes_per_gpu=1e9,
    step_overhead_s=1e-3,
    sequence_overhead_s=1e-5,
    allreduces_per_step=4,
    allreduce_latency_s=1e-5,
    allreduce_s_per_token=1e-8,
    request_overhead_s=5e-3,
    max_num_batched_tokens=1000,
)


def test_sequence_cache_and_pool():
    # 50 tokens: 50 x 1,000 growing + 5,000 state + 50 x 200 in the window (not yet full).
    assert MODEL.sequence_kv_bytes_per_gpu(50) == 50_000 + 5000 + 10_000
    # 1,000 tokens: the window holds its 100 only.
    assert MODEL.sequence_kv_bytes_per_gpu(1000) == 1_000_000 + 5000 + 20_000
    assert MODEL.sequence_kv_bytes_per_gpu(100) == 100_000 + 5000 + 20_000
    # 1e9 B of pool / 1,025,000 B per sequence = 975.6: 975 sequences.
    assert MODEL.pool_sequences(1000) == 975 == MODEL.pool_tokens(1000)


def test_attention_flops_with_a_window():
    assert MODEL.attention_flops(50) == 50 * 1e3 + 50 * 500
    assert MODEL.attention_flops(1000) == 1000 * 1e3 + 100 * 500
    assert MODEL.attention_flops(100) == 100 * 1e3 + 100 * 500


def test_roofline_decode_step():
    # Batch 10 at 1,000 tokens: reads 1e9 + 10 x 1e6 of weights and 10 x 1,025,000 of cache at 1e11 B/s.
    memory_s = (1e9 + 1e7 + 10 * 1_025_000) / 1e11
    compute_s = 10 * (1e9 + 1_050_000) / 1e12
    assert memory_s == pytest.approx(0.0102025) and compute_s == pytest.approx(0.0100105)
    assert MODEL.decode_memory_s(10, 1000) == pytest.approx(memory_s)
    assert MODEL.decode_compute_s(10, 1000) == pytest.approx(compute_s)
    assert MODEL.roofline_step_time_s(10, 1000) == pytest.approx(memory_s)
    # Batch 100 at 10 tokens is compute-bound: 100 x (1e9 + 15,000) / 1e12 = 0.1000015 s
    # against (1.1e9 + 100 x 35,000) / 1e11 = 0.011035 s.
    assert MODEL.roofline_step_time_s(100, 10) == pytest.approx(0.1000015)


def test_engine_decode_step():
    # Roofline 0.0102025 + step overhead 0.001 + 10 sequences x 1e-5 + 4 all-reduces x (1e-5 + 10 x 1e-8).
    assert MODEL.allreduce_s(10) == pytest.approx(4 * 1.01e-5)
    assert MODEL.step_time_s(10, 1000) == pytest.approx(0.0102025 + 0.001 + 0.0001 + 4.04e-5)
    # Compute-bound at batch 100, 10 tokens: 0.1000015 + 0.001 + 0.001 + 4 x (1e-5 + 1e-6).
    assert MODEL.step_time_s(100, 10) == pytest.approx(0.1000015 + 0.001 + 0.001 + 4.4e-5)


def test_prefill_chunks():
    # 100 new tokens, nothing cached: each attends (100 + 1) / 2 = 50.5 on average, all inside the window:
    # 100 x (1e9 + 50.5 x 1,000 + 50.5 x 500) / 1e12 = 0.100007575 s.
    assert MODEL.prefill_compute_s(100) == pytest.approx(0.100007575)
    assert MODEL.roofline_prefill_time_s(100) == pytest.approx(0.100007575)
    # One token computes in ~1 ms but still reads the weights once: 1e9 / 1e11 = 10 ms.
    assert MODEL.roofline_prefill_time_s(1) == pytest.approx(0.01)
    # As an engine step: + 1 ms overhead + 4 x (1e-5 + 100 x 1e-8) of all-reduces.
    assert MODEL.prefill_time_s(100) == pytest.approx(0.100007575 + 0.001 + 4.4e-5)
    # After 1,000 cached tokens, 500 new ones attend 1,000 + 250.5 (window: 100):
    # 500 x (1e9 + 1,250,500 + 50,000) / 1e12 = 0.50065025 s.
    assert MODEL.prefill_compute_s(500, 1000) == pytest.approx(0.50065025)


def test_time_to_first_token_in_chunks():
    # One chunk: request overhead 5 ms + the 100-token chunk above.
    assert MODEL.ttft_s(100) == pytest.approx(0.005 + 0.101051575)
    # 1,500 tokens in chunks of 1,000 then 500:
    #   first: 1,000 x (1e9 + 500.5 x 1,000 + 100 x 500) / 1e12 = 1.0005505, + 0.001 + 4 x (1e-5 + 1e-5)
    #   second: 0.50065025 (after 1,000 cached) + 0.001 + 4 x (1e-5 + 5e-6)
    first = 1.0005505 + 0.001 + 8e-5
    second = 0.50065025 + 0.001 + 6e-5
    assert MODEL.ttft_s(1500) == pytest.approx(0.005 + first + second)
    # Exactly one chunk's worth is one chunk.
    assert MODEL.ttft_s(1000) == pytest.approx(0.005 + first)


def test_loaded_inter_token_latency():
    # 10 requests of 100 prompt + 20 output tokens: the batch sits at 100 + 20/2 = 110 tokens of context:
    #   memory (1e9 + 1e7 + 10 x (110,000 + 5,000 + 20,000)) / 1e11 = 0.0101135 s (compute: 0.0100016 s)
    #   + 0.001 + 10 x 1e-5 + 4 x 1.01e-5 = 0.0112539 s,
    # and each step carries (10 - 1) / 20 of another request's prefill: 0.45 x (0.100007575 + 4 x 100 x 1e-8).
    assert MODEL.interleaved_prefill_s(100) == pytest.approx(0.100011575)
    step = 0.0101135 + 0.001 + 0.0001 + 4.04e-5
    assert MODEL.loaded_itl_s(10, 100, 20) == pytest.approx(step + 0.45 * 0.100011575)
    # Alone, no other prefill rides in its steps.
    alone = MODEL.loaded_itl_s(1, 100, 20)
    assert alone == pytest.approx(MODEL.step_time_s(1, 110))


def test_full_load_throughput():
    # The engine schedules at most max_num_seqs (1,024 here) whatever the pool holds.
    assert MODEL.max_load_batch(100, 20) == 1024
    # Requests of 100 + 20 tokens hold 120,000 + 5,000 + 20,000 = 145,000 B each: 1e9 / 145,000 = 6,896 at once.
    uncapped = replace(MODEL, max_num_seqs=100_000)
    assert uncapped.max_load_batch(100, 20) == 6896
    # Step at 6,896 x 110 tokens: compute-bound, 6,896 x (1e9 + 160,000) / 1e12 = 6.89710336 s,
    # + 0.001 + 0.06896 + 4 x (1e-5 + 6,896 x 1e-8); plus 6,896 / 20 prefills of 0.100011575 s each.
    step = 6.89710336 + 0.001 + 0.06896 + 4 * (1e-5 + 6896e-8) + 6896 / 20 * 0.100011575
    assert uncapped.max_load_output_tokens_per_s(100, 20) == pytest.approx(6896 / step)
    # A pool that holds no such request serves nothing.
    assert replace(MODEL, kv_pool_bytes_per_gpu=1000).max_load_output_tokens_per_s(100, 20) == 0.0


def test_windows_summed_per_size():
    assert _by_window([(100, 1.0), (200, 2.0), (100, 3.0)]) == ((100, 4.0), (200, 2.0))
    assert _by_window([]) == ()


def toy_arch(feed_forward, layers: int = 3) -> ModelArch:
    attention = FullAttention(hidden_size=1024, num_heads=8, num_kv_heads=8, head_dim=128, v_head_dim=128)
    return ModelArch(
        name="toy",
        model_type="toy",
        hidden_size=1024,
        vocab_size=1000,
        tie_word_embeddings=True,
        layers=(Layer(mixer=attention, feed_forward=feed_forward, norm_params=0),) * layers,
        final_norm_params=0,
    )


def test_all_reduce_coefficients():
    arch = toy_arch(DenseMLP(hidden_size=1024, intermediate_size=4096))
    # Two per layer under TP; none on one GPU.
    assert allreduces_per_step(arch, 4) == 6 and allreduces_per_step(arch, 1) == 0
    # Ring all-reduce of one token's hidden state: 2 (TP - 1) / TP x 1,024 x 2 B over 4e11 B/s.
    assert allreduce_s_per_token(arch, 4, 4e11) == pytest.approx(2 * 3 / 4 * 2048 / 4e11)
    assert allreduce_s_per_token(arch, 2, 4e11) == pytest.approx(2 * 1 / 2 * 2048 / 4e11)
    assert allreduce_s_per_token(arch, 1, 4e11) == 0.0


GPU = GpuSpec(
    id="toy",
    name="Toy",
    vendor="none",
    memory_bytes=80 * GIB,
    memory_bandwidth_bytes_per_s=1e12,
    dense_tflops={"bf16": 100},
    interconnect_bandwidth_bytes_per_s=4e11,
    allreduce_latency_s=1e-5,
    sources=GpuSources(
        memory_bytes="t",
        memory_bandwidth_bytes_per_s="t",
        dense_tflops="t",
        interconnect_bandwidth_bytes_per_s="t",
        allreduce_latency_s="t",
    ),
)


def test_vllm_default_token_budget_and_max_num_seqs():
    # vLLM's 'vllm serve' default: 8,192 on GPUs of 70 GiB or more (A100 aside), else 2,048.
    assert memory.vllm_default_max_num_batched_tokens(GPU) == 8192
    # The threshold itself counts as large.
    edge = GPU.model_copy(update={"memory_bytes": memory.VLLM_LARGE_GPU_BYTES})
    assert memory.vllm_default_max_num_batched_tokens(edge) == 8192
    below = GPU.model_copy(update={"memory_bytes": memory.VLLM_LARGE_GPU_BYTES - 1})
    assert memory.vllm_default_max_num_batched_tokens(below) == 2048
    assert memory.vllm_default_max_num_batched_tokens(GPU.model_copy(update={"memory_bytes": 48 * GIB})) == 2048
    assert memory.vllm_default_max_num_batched_tokens(GPU.model_copy(update={"id": "a100-80gb-sxm"})) == 2048
    deployment = Deployment(model="m", gpu="toy")
    assert memory.max_num_batched_tokens(deployment, GPU) == 8192
    assert memory.max_num_batched_tokens(deployment.model_copy(update={"max_num_batched_tokens": 512}), GPU) == 512
    # max_num_seqs follows the same rule: 1,024 from the threshold up (A100 aside), else 256.
    assert memory.vllm_default_max_num_seqs(edge) == 1024 and memory.vllm_default_max_num_seqs(below) == 256
    assert memory.vllm_default_max_num_seqs(GPU.model_copy(update={"id": "a100-80gb-sxm"})) == 256


def test_feed_forward_width_and_activations():
    dense = toy_arch(DenseMLP(hidden_size=1024, intermediate_size=4096))
    assert memory.feed_forward_width(dense) == 4096
    # MoE: top 2 of 8 experts of 512 plus one shared expert of 768.
    moe = toy_arch(
        MoE(
            hidden_size=1024,
            num_experts=8,
            top_k=2,
            expert_intermediate_size=512,
            num_shared_experts=1,
            shared_intermediate_size=768,
        )
    )
    assert memory.feed_forward_width(moe) == 2 * 512 + 768
    assert memory.feed_forward_width(toy_arch(None)) == 0
    # (4 x 4,096 / TP 2 + 6 x 1,024) x 2 B = 28,672 B per token per GPU.
    assert memory.activation_bytes_per_token_per_gpu(dense, 2) == (4 * 4096 / 2 + 6 * 1024) * 2 == 28_672


def test_runtime_reserve_modelled_and_given():
    arch = toy_arch(DenseMLP(hidden_size=1024, intermediate_size=4096))
    deployment = Deployment(model="m", gpu="toy", tp=2, max_num_batched_tokens=1000)
    reserve = memory.runtime_reserve(arch, deployment, GPU)
    # 0.13 GiB base + 0.41 GiB per doubling of TP (one at TP 2) + the larger of 1,000 tokens x 28,672 B of
    # activations and the profiling sampler's min(1,024 sequences, 1,000 tokens) x 1,000 vocab x 39 B.
    assert reserve.base_bytes == pytest.approx(0.13 * GIB)
    assert reserve.tp_comm_bytes == pytest.approx(0.41 * GIB * 1)
    assert reserve.activation_bytes == 1000 * 28_672
    assert reserve.sampler_bytes == 1000 * 1000 * 39
    assert reserve.total_bytes == pytest.approx(0.13 * GIB + 0.41 * GIB + max(28_672_000, 39_000_000))
    # TP 8 is three doublings: 1.23 GiB, where 1.25 GiB for each of 7 peers gave 8.75 GiB.
    wide = memory.runtime_reserve(arch, deployment.model_copy(update={"tp": 8}), GPU)
    assert wide.tp_comm_bytes == pytest.approx(3 * 0.41 * GIB)
    assert reserve.given is False and reserve.max_num_batched_tokens == 1000
    given = memory.runtime_reserve(arch, deployment.model_copy(update={"runtime_reserve_gib": 5.5}), GPU)
    assert given.given is True and given.total_bytes == 5.5 * GIB
    assert given.tp_comm_bytes == 0 and given.activation_bytes == 0 and given.max_num_batched_tokens == 1000


def test_full_load_of_one_sequence():
    # max_num_seqs 1: one request of 100 + 20 tokens at a time, at 110 tokens of context:
    #   memory (1e9 + 1e6 + 110,000 + 5,000 + 100 x 200) / 1e11 = 0.01001135 s (compute 0.00100016 s)
    #   + 0.001 + 1e-5 + 4 x (1e-5 + 1e-8) = 0.01106139 s a step, plus 1/20 of its own prefill (0.100011575 s).
    one = replace(MODEL, max_num_seqs=1)
    assert one.max_load_batch(100, 20) == 1
    assert one.max_load_output_tokens_per_s(100, 20) == pytest.approx(1 / (0.01106139 + 0.100011575 / 20), rel=1e-9)


def test_replica_model_takes_the_engines_max_num_seqs():
    from quotacalc.core.price import price
    from quotacalc.inputs.resolve import resolve

    # Llama 3.1 8B BF16 on an A100 80GB: its pool holds thousands of 128-token requests, but vLLM's default
    # max_num_seqs there is 256 (1,024 only on GPUs of 70 GiB or more other than the A100); given, it wins.
    short = {
        "model": "Llama-3.1-8B-Instruct",
        "gpu": "a100-80gb-sxm",
        "load_prompt_tokens": 100,
        "load_output_tokens": 28,
    }
    figures = {step.name: step for step in price(resolve(Deployment(**short))).steps}
    assert figures["max_load_batch"].value == 256
    assert "256 (vLLM default)" in figures["max_load_batch"].substituted
    given = {step.name: step for step in price(resolve(Deployment(**short, max_num_seqs=300))).steps}
    assert given["max_load_batch"].value == 300 and "300 (given)" in given["max_load_batch"].substituted
    # The all-reduce latency's source: the GPU catalog's, or the deployment's own.
    tp2 = {step.name: step for step in price(resolve(Deployment(**short, tp=2))).steps}
    assert "(a100-80gb-sxm catalog)" in tp2["allreduce_s"].substituted
    mine = {step.name: step for step in price(resolve(Deployment(**short, tp=2, allreduce_latency_s=2e-5))).steps}
    assert "(given)" in mine["allreduce_s"].substituted


def test_expert_touch_step_shows_its_own_numbers():
    from quotacalc.core.price import price
    from quotacalc.inputs.resolve import resolve

    # gpt-oss-120b: 128 experts, top 4; at the default batch 32 and uniform routing the step substitutes them.
    steps = {
        step.name: step for step in price(resolve(Deployment(model="gpt-oss-120b", gpu="h100-sxm", batch=32))).steps
    }
    assert steps["expected_experts_touched"].substituted == "128 × (1 − (1 − 4/128)^32)"
    assert steps["expected_experts_touched"].value == pytest.approx(128 * (1 - (1 - 4 / 128) ** 32))
    skewed = {
        step.name: step
        for step in price(resolve(Deployment(model="gpt-oss-120b", gpu="h100-sxm", batch=32, expert_skew=1.0))).steps
    }
    assert skewed["expected_experts_touched"].substituted == "E=128, k=4, B=32, skew=1.0"


def test_engine_prompt_token_is_one_full_chunk_on_an_idle_replica_by_hand():
    from quotacalc.core.price import price
    from quotacalc.inputs.resolve import resolve

    # Llama 3.1 8B, FP8 on one H100 (no all-reduce): a chunk of the 8,192-token budget, each token
    # attending (8,192 + 1) / 2 = 4,096.5 earlier ones at 2 x 32 heads x (128 + 128) x 32 layers =
    # 524,288 FLOPs each, besides 2 x the 8,030,261,248 parameters less the untied embedding table and
    # LM head (128,256 x 4,096 = 525,336,576 each): a prompt token gathers its embedding row and only the
    # chunk's last token computes logits (2 x 525,336,576 once); compute-bound at 1,979e12 x 0.5; plus
    # the 0.2 ms step overhead, 32 layers x 30 us and the prefill pass's 32 layers x 90 us; divided by the chunk.
    result = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", weight_dtype="fp8")))
    vocab_matrix = 128_256 * 4_096
    assert vocab_matrix == 525_336_576
    prompt_token_flops = 2 * (8_030_261_248 - 2 * vocab_matrix) + 524_288 * 4096.5
    compute_s = (8192 * prompt_token_flops + 2 * vocab_matrix) / (1979e12 * 0.5)
    assert result.engine_prompt_token_s == pytest.approx((compute_s + 0.0002 + 32 * 3e-5 + 32 * 9e-5) / 8192, rel=1e-9)
    # The method's prompt token keeps 2 x every active parameter (docs/method.md; the worked example's 35.7 us).
    assert result.prompt_token_s == pytest.approx(2 * 8_030_261_248 / (1979e12 * 0.5), rel=1e-9)


def test_padded_weights_per_gpu_of_gpt_oss_at_tp2_by_hand():
    from quotacalc.core.price import price
    from quotacalc.inputs.resolve import resolve

    # gpt-oss-120b (65,248,815,744 B of checkpoint: 65,190,340,224 with its 4,608 experts' 8,640 biases each at
    # MXFP4's 0.53125 B, plus 4,608 x 8,640 x (2 - 0.53125) = 58,475,520 B as they are stored, in BF16;
    # tests/test_quantized_biases.py. 36 layers of 128 MXFP4 experts, 2,880 x 2,880, gated:
    # 1,692,057,600 B a layer) on 2 A100s: vLLM's Marlin backend pads each rank's 1,440 channels to 1,536
    # and the hidden 2,880 to 3,072. Each rank also holds the whole BF16 router (ReplicatedLinear): 36 x
    # (2,880 x 128 + 128 bias) x 2 B, half of it beyond its 1/TP share.
    result = price(resolve(Deployment(model="gpt-oss-120b", gpu="a100-80gb-sxm", tp=2)))
    padding = 36 * 1_692_057_600 * (1536 * 3072 / (1440 * 2880) - 1) / 2
    router = 36 * (2880 * 128 + 128) * 2
    assert router == 26_551_296
    assert result.weight_bytes_per_gpu == pytest.approx(65_248_815_744 / 2 + router / 2 + padding, rel=1e-12)


def test_a_context_term_for_several_layers_alike_scales_every_per_token_figure():
    """ContextTerm.times(n): n layers alike read and compute n times one layer's per token of context, within the
    same bound; a term without its own prompt FLOPs keeps none (it prefills as it decodes)."""
    from quotacalc.core.arch import ContextTerm

    mla = ContextTerm(None, 576.0, 73_728.0, 49_152.0)
    assert mla.times(1) is mla
    assert mla.times(2) == ContextTerm(None, 1_152.0, 147_456.0, 98_304.0)
    assert mla.times(61) == ContextTerm(None, 35_136.0, 4_497_408.0, 2_998_272.0)
    window = ContextTerm(4096, 512.0, 8_192.0)
    assert window.times(3) == ContextTerm(4096, 1_536.0, 24_576.0, None)
    assert window.times(3).prefill_flops_per_token == 24_576.0
