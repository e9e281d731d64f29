"""The engine model against cited public measurements (tests/data/measurements/ holds them all).

Each test names its source and a tolerance: the issue's targets (decode ITL within 10%, TTFT
within 20%, KV pool within 10%). Expected figures are the measurements, never the program's output;
where a test checks a relation, the hand computation is in the test.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from quotacalc import Deployment, Traffic, price, resolve, size_traffic
from quotacalc.catalog.gpus import load_gpu_catalog
from quotacalc.core.memory import (
    GIB,
    activation_bytes_per_token_per_gpu,
    vllm_default_max_num_batched_tokens,
    vllm_default_max_num_seqs,
)
from quotacalc.core.replica import replica_model

NIM = "https://docs.nvidia.com/nim/benchmarking/llm/1.0.0/performance"
LLAMA70_FP8_TP2 = dict(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=2, weight_dtype="fp8", kv_dtype="fp8")
LLAMA8_FP8 = dict(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", tp=1, weight_dtype="fp8", kv_dtype="fp8")


def model_for(**fields):
    inputs = resolve(Deployment(**fields))
    return replica_model(inputs, price(inputs).kv_pool_bytes_per_gpu)


@pytest.fixture(scope="module")
def llama70():
    return model_for(**LLAMA70_FP8_TP2)


@pytest.fixture(scope="module")
def llama8():
    return model_for(**LLAMA8_FP8)


# --------------------------------------------------------------------------- decode ITL (10%)


@pytest.mark.parametrize(
    ("concurrency", "prompt", "output", "measured_s"),
    [(1, 5000, 500, 0.01858), (1, 20000, 2000, 0.01958), (25, 5000, 500, 0.03875), (50, 1000, 1000, 0.02587)],
)
def test_itl_llama70b_fp8_on_2xh100(llama70, concurrency, prompt, output, measured_s):
    """NIM 1.8.0 (TensorRT-LLM), Llama 3.3 70B FP8 TP2 on 2x H100 SXM (NIM benchmarking 'Performance')."""
    assert llama70.loaded_itl_s(concurrency, prompt, output) == pytest.approx(measured_s, rel=0.10)


@pytest.mark.parametrize(
    ("concurrency", "prompt", "output", "measured_s"),
    [(1, 200, 200, 0.00463), (25, 200, 200, 0.00519), (100, 200, 200, 0.00757), (25, 1000, 1000, 0.00584)],
)
def test_itl_llama8b_fp8_on_h100(llama8, concurrency, prompt, output, measured_s):
    """NIM 1.8.0, Llama 3.1 8B FP8 TP1 on one H100 SXM."""
    assert llama8.loaded_itl_s(concurrency, prompt, output) == pytest.approx(measured_s, rel=0.10)


def test_the_roofline_alone_misses_a_fixed_gap_the_engine_model_closes(llama70):
    """At concurrency 1 the roofline is about 4 ms short for 70B FP8 TP2, whatever the context.

    NIM measures 18.80 ms at 200/200 and 19.58 ms at 20000/2000: the roofline step (35.3 GB of
    weights per GPU at 2.51 TB/s = 14.1 ms, plus a little KV) is short by 4.5-5 ms at both, and
    the engine model's gap (0.2 ms step + 80 layers of 30 us + 10 us + 160 all-reduces of 14 us) is the same at
    both.
    """
    for prompt, output, measured_s in ((200, 200, 0.0188), (20000, 2000, 0.01958)):
        context = prompt + output / 2
        roofline = llama70.roofline_step_time_s(1, context)
        assert measured_s - roofline == pytest.approx(0.0047, abs=0.0008)
        assert llama70.step_time_s(1, context) == pytest.approx(measured_s, rel=0.05)
    gap = llama70.step_time_s(1, 1000) - llama70.roofline_step_time_s(1, 1000)
    assert gap == pytest.approx(
        0.0002 + 80 * 30e-6 + 0.00001 + 160 * (14e-6 + 0.5 * 8192 * 2 * 2 / 450e9 * 1), rel=1e-6
    )


@pytest.mark.parametrize(
    ("gpu", "model", "tp", "latency_s", "build", "tolerance"),
    [
        ("a100-80gb-sxm", "Llama-3.3-70B-Instruct", 4, 3.99059, 9523, 0.10),
        ("a100-80gb-sxm", "Llama-3.1-8B-Instruct", 1, 1.57927, 9523, 0.10),
        ("h100-sxm", "Llama-3.3-70B-Instruct", 4, 2.44447, 9555, 0.10),
        ("h200", "Mixtral-8x7B-v0.1", 2, 1.9211, 9513, 0.10),
        # H200 decodes below MBU 0.75 (0.60-0.78 in tests/data/measurements/h200-llama-3.1-8b-kernels.json):
        # at the default the model is about 10% fast there (docs/accuracy.md).
        ("h200", "Llama-3.3-70B-Instruct", 4, 2.07508, 9513, 0.12),
    ],
)
def test_vllm_ci_latency(gpu, model, tp, latency_s, build, tolerance):
    """vLLM CI latency tests (buildkite.com/vllm/performance-benchmark/builds/<build>): batch 8, 32 in, 128 out, BF16.

    End to end: one prefill of 8 x 32 tokens, then 127 decode steps at batch 8, mean context 96.
    """
    replica = model_for(model=model, gpu=gpu, tp=tp, weight_dtype="bf16", kv_dtype="bf16")
    predicted = replica.prefill_time_s(8 * 32, 0) + 127 * replica.step_time_s(8, 32 + 64)
    assert predicted == pytest.approx(latency_s, rel=tolerance)


# --------------------------------------------------------------------------- MoE decode (docs/accuracy.md)

INFERENCEX_828 = "https://github.com/SemiAnalysisAI/InferenceX/issues/828"
GPT_OSS_H100 = dict(model="gpt-oss-120b", gpu="h100-sxm", kv_dtype="bf16", mxfp4_moe_backend="marlin")


@pytest.mark.parametrize(
    ("tp", "concurrency", "prompt", "output", "measured_s"),
    [(8, 4, 922, 922, 0.00372), (4, 4, 7373, 922, 0.0045), (2, 64, 922, 922, 0.01521)],
)
def test_itl_gpt_oss_120b_on_h100(tp, concurrency, prompt, output, measured_s):
    """gpt-oss-120b (MXFP4 experts, Marlin) on H100 at TP 2-8, vLLM 0.15.1 (InferenceX issue 828: 1K/1K and 8K/1K
    at 0.9 of the nominal lengths, 'TPOT (ms)'). Fit points of the MoE evidence. With the MoE slot overhead (36
    layers x top 4 x log2(TP) x 2 us: 0.29, 0.58 and 0.86 ms a forward pass at TP 2, 4, 8) the model is 10% slow at
    TP 8 and 2% at TP 4 at four requests (10-14% fast without it) and 6% slow at TP 2 with 64 requests, so the
    tolerance is 15%, not the 10% target."""
    replica = model_for(tp=tp, **GPT_OSS_H100)
    assert replica.loaded_itl_s(concurrency, prompt, output) == pytest.approx(measured_s, rel=0.15)


def test_deepseek_r1_fixed_cost_per_step_is_mostly_the_moe_slots_held_out():
    """DeepSeek-R1 FP8 at TP 8, SGLang 0.5.9, 4 requests of 1K/1K (InferenceX run 23552373331, mean TPOT): 10.29 ms
    on H200, 8.76 ms on B200. The B200 reads 1.6x faster (7.7 against 4.8 TB/s), yet the measured step is only
    1.5 ms shorter: a fixed time per step, 3.1 ms on H200 and 3.5 ms on B200 without a MoE term. The MoE slot
    overhead fitted without any DeepSeek point (58 MoE layers x top 8 x log2(8) x 2 us = 2.78 ms a forward pass)
    leaves 0.1 and 0.6 ms. Held out: pinned where it is so that a change that moves it is seen (docs/accuracy.md)."""
    gaps = {}
    for gpu, measured_s in (("h200", 0.01029), ("b200", 0.00876)):
        replica = model_for(model="DeepSeek-V3", gpu=gpu, tp=8, weight_dtype="fp8", kv_dtype="bf16")
        assert replica.moe_overhead_s == pytest.approx(58 * 8 * 3 * 2e-6)
        gaps[gpu] = measured_s - replica.loaded_itl_s(4, 922, 922)
    assert -0.0002 < gaps["h200"] < 0.0004
    assert 0.0003 < gaps["b200"] < 0.0009
    assert abs(gaps["h200"] - gaps["b200"]) < 0.001


def test_qwen3_30b_a3b_fixture_has_the_published_parameter_count():
    """tests/data/configs/qwen3_30b_a3b (vLLM PR 23151's H100 run in decode_itl.yaml): llama.cpp's load log of the
    model (ollama issue 10458) prints 'model params = 30.53 B'. By hand: embeddings and head 2 x 151,936 x 2,048
    = 622,329,856; each of 48 layers: attention 2,048 x 32 x 128 (q) + 2 x 2,048 x 4 x 128 (k, v) + 32 x 128 x
    2,048 (o) + 2 x 128 (q/k norms) = 18,874,624; router 2,048 x 128 = 262,144; experts 128 x 3 x 2,048 x 768 =
    603,979,776; norms 2 x 2,048; final norm 2,048: 30,532,122,624."""
    from quotacalc.inputs.resolve import load_arch

    arch, _ = load_arch(str(Path(__file__).resolve().parent / "data" / "configs" / "qwen3_30b_a3b"))
    layer = 2_048 * 32 * 128 + 2 * 2_048 * 4 * 128 + 32 * 128 * 2_048 + 2 * 128 + 2_048 * 128
    layer += 128 * 3 * 2_048 * 768 + 2 * 2_048
    assert arch.total_params() == 2 * 151_936 * 2_048 + 48 * layer + 2_048 == 30_532_122_624


# --------------------------------------------------------------------------- TTFT (20%)


@pytest.mark.parametrize(("prompt", "measured_s"), [(500, 0.04777), (5000, 0.40677), (20000, 1.83301)])
def test_ttft_llama70b_fp8_tp2(llama70, prompt, measured_s):
    """NIM 1.8.0, concurrency 1: time to first token of one prompt on an idle 2x H100."""
    assert llama70.ttft_s(prompt) == pytest.approx(measured_s, rel=0.20)


def test_ttft_llama8b_fp8_long_prompt(llama8):
    """NIM 1.8.0, Llama 3.1 8B FP8 on one H100, 20,000-token prompt at concurrency 1: 403.2 ms."""
    assert llama8.ttft_s(20000) == pytest.approx(0.4032, rel=0.20)


def test_a_long_prompt_is_prefilled_in_chunks_of_the_token_budget(llama8):
    """20,000 tokens at vLLM's 8,192 budget on H100: chunks of 8,192, 8,192 and 3,616, the later ones
    attending to what came before; plus the request overhead (3 ms)."""
    chunks = llama8.prefill_time_s(8192, 0) + llama8.prefill_time_s(8192, 8192) + llama8.prefill_time_s(3616, 16384)
    assert llama8.ttft_s(20000) == pytest.approx(0.003 + chunks)


# --------------------------------------------------------------------------- full load


def test_full_load_throughput_charges_prefill(llama70):
    """NIM 1.8.0, 70B FP8 TP2, 200 in / 200 out at concurrency 250: 5,067 output tokens/s.

    Throughput = concurrency x output / (TTFT + output x ITL) with the other requests' prefills
    interleaved in the ITL; without charging prefill the replica looks about twice as fast.
    """
    itl = llama70.loaded_itl_s(250, 200, 200)
    throughput = 250 * 200 / (llama70.ttft_s(200) + 200 * itl)
    assert throughput == pytest.approx(5067, rel=0.15)
    batch = llama70.max_load_batch(200, 200)
    uncharged = batch / llama70.step_time_s(batch, 300)
    assert llama70.max_load_output_tokens_per_s(200, 200) < 0.6 * uncharged


def test_price_reports_engine_figures():
    result = price(resolve(Deployment(**LLAMA70_FP8_TP2, context=5000, load_prompt_tokens=200, load_output_tokens=200)))
    # NIM: TTFT 406.77 ms for a 5,000-token prompt; ITL at batch 128 is the engine step there.
    assert result.ttft_s == pytest.approx(0.40677, rel=0.20)
    assert result.itl_s == pytest.approx(result.decode_step_s + result.decode_overhead_s + result.allreduce_s)
    # 5,000-token sequences: the pool holds fewer than 128, so the batch that fits is priced.
    assert result.decode_batch == result.max_resident_sequences < 128
    assert result.decode_overhead_s == pytest.approx(0.0002 + 80 * 30e-6 + result.decode_batch * 0.00001)
    assert result.max_load_output_tokens_per_s > 0 and result.max_load_batch > 250
    names = {step.name for step in result.steps}
    assert {"itl_s", "ttft_s", "decode_overhead_s", "allreduce_s", "max_load_output_tokens_per_s"} <= names


# --------------------------------------------------------------------------- KV pool (10%)


def test_kv_pool_of_the_worked_example():
    """docs/method.md §7: 646,503 tokens measured for Llama 3.3 70B FP8, BF16 KV, TP4 on H100 SXM (a fit point)."""
    result = price(
        resolve(Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="bf16"))
    )
    assert result.kv_pool_tokens == pytest.approx(646_503, rel=0.05)


def test_kv_pool_on_a100_40gb():
    """github.com/ilseokoh/vllm-gce: Llama 3.1 8B BF16 on A100 40GB, vLLM 0.15.1, util 0.9, 8,192 batched
    tokens: 'GPU KV cache size: 157,936 tokens' (run with enforce_eager: no CUDA graphs to reserve)."""
    result = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="a100-40gb-sxm", max_num_batched_tokens=8192)))
    assert result.kv_pool_tokens == pytest.approx(157_936, rel=0.10)


def test_kv_pool_of_a_large_fp8_moe():
    """github.com/vllm-project/vllm/issues/21348: Qwen3-235B-A22B-FP8, TP4 on H100, vLLM defaults (July 2025,
    with LMCache's connector): 'GPU KV cache size: 178,880 tokens'. The one fit point outside 10%: its log
    implies 2.8 GiB per GPU beside the sampler's logits where the model has 0.95 GiB of non-torch memory at
    TP 4 (bench/fit_reserve.py step 3; docs/accuracy.md says so), so the estimate is 24% over. Pinned where
    it is, so a change that moves it shows here."""
    result = price(resolve(Deployment(model="Qwen3-235B-A22B", gpu="h100-sxm", tp=4, weight_dtype="fp8")))
    assert result.kv_pool_tokens == pytest.approx(178_880 * 1.24, rel=0.02)


LLMD = "github.com/llm-d/llm-d-benchmark config_explorer/empirical-vllm-memory-results.md (vLLM 0.11, H100, util 0.9)"


def test_kv_memory_of_llama_8b_on_h100():
    """LLMD: Llama 3.1 8B BF16 on one H100: 'Available KV cache memory: 51.38 GiB' (a fit point).

    By hand: 0.9 x 79.19 GiB - 14.96 GiB of weights - (0.13 GiB + 1,024 x 128,256 x 39 B = 4.77 GiB)."""
    result = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm")))
    by_hand = 0.9 * 85_029_158_912 - 8_030_261_248 * 2 - 0.13 * GIB - 1024 * 128_256 * 39
    assert result.kv_pool_bytes_per_gpu == pytest.approx(by_hand)
    assert result.kv_pool_bytes_per_gpu / GIB == pytest.approx(51.38, rel=0.01)


def test_kv_memory_of_qwen3_32b_at_tp2():
    """LLMD: Qwen3-32B BF16 on two H100: 'Available KV cache memory: 34.49 GiB' (a fit point; the config
    is tests/data/configs/qwen3_32b)."""
    from pathlib import Path

    config = Path(__file__).resolve().parent / "data" / "configs" / "qwen3_32b" / "config.json"
    result = price(resolve(Deployment(model=str(config), gpu="h100-sxm", tp=2)))
    assert result.kv_pool_bytes_per_gpu / GIB == pytest.approx(34.49, rel=0.01)


def test_llama2_7b_fixture_has_the_published_parameter_count():
    """tests/data/configs/llama2_7b (TensorRT-LLM's Llama 2 7B runs in decode_itl.yaml and ttft.yaml): by
    hand, embeddings and head 2 x 32,000 x 4,096 = 262,144,000; each of 32 layers 4 x 4,096^2 (attention)
    + 3 x 4,096 x 11,008 (MLP) + 2 x 4,096 (norms) = 202,383,360; final norm 4,096: 6,738,415,616
    (Llama 2's '7B')."""
    from pathlib import Path

    from quotacalc.inputs.resolve import load_arch

    arch, _ = load_arch(str(Path(__file__).resolve().parent / "data" / "configs" / "llama2_7b"))
    assert arch.total_params() == 2 * 32_000 * 4_096 + 32 * (4 * 4_096**2 + 3 * 4_096 * 11_008 + 2 * 4_096) + 4_096
    assert arch.total_params() == 6_738_415_616


def test_llama_405b_fixture_has_the_published_parameter_count():
    """tests/data/configs/llama3_1_405b (AMD's MI300X TP 8 runs in decode_itl.yaml): by hand, embeddings and
    head 2 x 128,256 x 16,384 = 4,202,692,608; each of 126 layers 2 x 16,384^2 (q, o) + 2 x 16,384 x 1,024
    (k, v: 8 KV heads of 128) + 3 x 16,384 x 53,248 (MLP) + 2 x 16,384 (norms) = 3,187,703,808; final norm
    16,384: 405,853,388,800 (Llama 3.1's '405B')."""
    from pathlib import Path

    from quotacalc.inputs.resolve import load_arch

    arch, _ = load_arch(str(Path(__file__).resolve().parent / "data" / "configs" / "llama3_1_405b"))
    per_layer = 2 * 16_384**2 + 2 * 16_384 * 1_024 + 3 * 16_384 * 53_248 + 2 * 16_384
    assert arch.total_params() == 2 * 128_256 * 16_384 + 126 * per_layer + 16_384
    assert arch.total_params() == 405_853_388_800


def test_kv_memory_of_llama_70b_fp8_at_tp2_held_out():
    """LLMD: Llama 3.3 70B FP8-dynamic on two H100: 'Available KV cache memory: 32.0 GiB' (held out).
    The estimate is 3.5% over: --weight-dtype fp8 counts the BF16 embeddings and LM head at one byte
    (vLLM: 'Model loading took 33.88 GiB', quotacalc 32.85 GiB)."""
    result = price(
        resolve(Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=2, weight_dtype="fp8", kv_dtype="bf16"))
    )
    assert result.kv_pool_bytes_per_gpu / GIB == pytest.approx(32.0, rel=0.10)


DENNISLEE = (
    "github.com/dennislee22/vLLM-benchmarking log/ (vLLM 0.10.1.1, Qwen2-7B-Instruct BF16, 2,048 batched tokens)"
)
QWEN2_7B = Path(__file__).resolve().parent / "data" / "configs" / "qwen2_7b_instruct" / "config.json"


def test_kv_memory_with_flashinfer_sampler_on_a100_held_out():
    """DENNISLEE vllm-7B-1gpuA10080GB-0.25GRAM.log: one A100 80GB at util 0.25, 'Using FlashInfer for top-p &
    top-k sampling.', 'Available KV cache memory: 5.01 GiB' (held out). FlashInfer's sampler does not sort the
    vocabulary: 15.4 B a logit (measured on vLLM 0.19, quotacalc/core/deployment.py), not the sorting sampler's 39.

    By hand: 0.25 x 79.15 GiB - 7,615,616,512 x 2 B of weights - (0.13 GiB + max(forward 2,048 x (4 x 18,944
    + 6 x 3,584) x 2 B = 0.37 GiB, sampler 256 x 152,064 x 15.4 B = 0.56 GiB)) = 4.91 GiB (-2%); at 39 B a
    logit the sampler is 1.41 GiB and the estimate 4.06 GiB (-19%)."""
    a100 = 84_987_740_160  # a100-80gb-sxm, bytes
    weights = 7_615_616_512 * 2
    sampler = 256 * 152_064 * 15.4
    deployment = Deployment(
        model=str(QWEN2_7B), gpu="a100-80gb-sxm", memory_utilization=0.25, sampler_bytes_per_logit=15.4
    )
    result = price(resolve(deployment))
    assert result.kv_pool_bytes_per_gpu == pytest.approx(0.25 * a100 - weights - 0.13 * GIB - sampler)
    assert result.kv_pool_bytes_per_gpu / GIB == pytest.approx(5.01, rel=0.03)
    sorting = price(resolve(deployment.model_copy(update={"sampler_bytes_per_logit": 39.0})))
    assert sorting.kv_pool_bytes_per_gpu / GIB == pytest.approx(5.01 * 0.81, rel=0.01)


def test_the_sorting_sampler_costs_what_the_two_node_log_shows_held_out():
    """DENNISLEE: the same model at TP 2 and util 0.5, once on one node with FlashInfer's sampler ('Available KV
    cache memory: 31.83 GiB' of an A100 80GB's 39.58 GiB budget) and once over two nodes whose install lacks
    FlashInfer ('Falling back to the PyTorch-native implementation of top-p & top-k sampling.': 11.03 GiB of an
    A100 40GB's 19.70). The logs leave 0.62 and 1.55 GiB beside the 7.12 GiB of weights; the sorting sampler's
    256 x 152,064 x (39 - 15.4) B = 0.85 GiB accounts for most of the 0.93 GiB between them. Both held out."""
    one_node = Deployment(
        model=str(QWEN2_7B), gpu="a100-80gb-sxm", tp=2, memory_utilization=0.5, sampler_bytes_per_logit=15.4
    )
    two_nodes = Deployment(model=str(QWEN2_7B), gpu="a100-40gb-sxm", tp=2, memory_utilization=0.5)
    assert price(resolve(one_node)).kv_pool_bytes_per_gpu / GIB == pytest.approx(31.83, rel=0.03)
    assert price(resolve(two_nodes)).kv_pool_bytes_per_gpu / GIB == pytest.approx(11.03, rel=0.05)


def test_sampler_bytes_per_logit_default_and_bad_values():
    """The default is the sorting sampler's measured 39 B (38.9, 38.9 and 38.5 B a logit in vLLM 0.11's logs,
    cited at core/deployment.py's VLLM_SAMPLER_BYTES_PER_LOGIT); a sampler holds some bytes per logit, not a kilobyte."""
    assert Deployment(model="m", gpu="h100-sxm").sampler_bytes_per_logit == 39
    for bad in (0, -15.4, 1001):
        with pytest.raises(ValueError, match="sampler_bytes_per_logit"):
            Deployment(model="m", gpu="h100-sxm", sampler_bytes_per_logit=bad)


def test_reserve_grows_with_log2_tp_and_batched_tokens():
    """Per GPU: 0.13 GiB + 0.41 GiB per doubling of TP + the profiling peak: the larger of the forward
    pass's activations, batched tokens x (4 x 28,672 / TP + 6 x 8,192) x 2 B, and the sampler's
    min(max_num_seqs, batched tokens) x 128,256 vocabulary x 39 B."""
    sampler = 1024 * 128256 * 39  # 4.77 GiB at vLLM's default of 1,024 sequences on H200
    reserves = {
        tp: price(resolve(Deployment(model="Llama-3.3-70B-Instruct", gpu="h200", tp=tp, weight_dtype="fp8")))
        for tp in (1, 2, 4, 8)
    }
    assert reserves[1].runtime_reserve_bytes_per_gpu == pytest.approx(0.13 * GIB + sampler)
    assert reserves[4].runtime_reserve_bytes_per_gpu == pytest.approx(0.13 * GIB + 2 * 0.41 * GIB + sampler)
    # TP 8: 1.36 GiB of non-torch memory, where the old 1.25 GiB per peer gave 8.85 GiB.
    assert reserves[8].runtime_reserve_bytes_per_gpu == pytest.approx(0.13 * GIB + 3 * 0.41 * GIB + sampler)

    # With 16 sequences the sampler needs 76 MiB and the activations set the peak.
    def few_sequences(tokens: int):
        deployment = Deployment(
            model="Llama-3.3-70B-Instruct",
            gpu="h200",
            tp=4,
            weight_dtype="fp8",
            max_num_seqs=16,
            max_num_batched_tokens=tokens,
        )
        return price(resolve(deployment)).runtime_reserve_bytes_per_gpu

    assert few_sequences(8192) == pytest.approx(0.13 * GIB + 2 * 0.41 * GIB + 8192 * (4 * 28672 / 4 + 6 * 8192) * 2)
    assert few_sequences(8192) - few_sequences(2048) == pytest.approx(6144 * (4 * 28672 / 4 + 6 * 8192) * 2)
    arch = resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm")).arch
    # vLLM reports an activation peak of 1.20 GiB for Llama 3.1 8B at 8,192 tokens (docs/accuracy.md).
    assert 8192 * activation_bytes_per_token_per_gpu(arch, 1) / GIB == pytest.approx(1.20, rel=0.05)


# gpt-oss-120b: 36 layers x 128 experts x 3 x 2,880 x 2,880 MXFP4 values at 4.25 bits (60.71 GiB in all).
GPT_OSS_EXPERT_BYTES = 36 * 128 * 3 * 2880 * 2880 * 4.25 / 8


@pytest.mark.parametrize(
    ("gpu", "backend", "padded_intermediate", "padded_hidden"),
    [
        ("h100-sxm", None, 2880, 2880),  # Triton: intermediate to a multiple of 64 (2,880 is one), hidden kept
        ("a100-80gb-sxm", None, 2944, 3072),  # Marlin: intermediate to 128, hidden to 256
        ("b200", None, 3072, 3072),  # FlashInfer TRT-LLM on SM100: both to 256
        ("h100-sxm", "marlin", 2944, 3072),  # the backend a pip install without triton_kernels falls back to
    ],
)
def test_mxfp4_experts_padded_as_vllm_pads_them(gpu, backend, padded_intermediate, padded_hidden):
    """vllm/model_executor/layers/quantization/mxfp4.py Mxfp4MoEMethod.create_weights: each backend rounds
    the per-rank intermediate and the hidden size up for its kernels; the expert bytes grow by the ratio."""
    # At 0.95 of memory, as the Marlin runs were (at 0.9 the padded model leaves no pool on an H100).
    base = price(resolve(Deployment(model="gpt-oss-120b", gpu="h100-sxm", mxfp4_moe_backend="triton")))
    result = price(
        resolve(Deployment(model="gpt-oss-120b", gpu=gpu, mxfp4_moe_backend=backend, memory_utilization=0.95))
    )
    factor = padded_intermediate * padded_hidden / (2880 * 2880)
    assert result.weight_bytes_per_gpu - base.weight_bytes_per_gpu == pytest.approx(GPT_OSS_EXPERT_BYTES * (factor - 1))
    assert result.weight_bytes == base.weight_bytes  # the checkpoint is what it is; only the resident copy grows


def test_mxfp4_marlin_weights_match_vllms_log():
    """github.com/vllm-project/vllm/issues/23278: gpt-oss-120b on one H100 with the Marlin backend (vLLM
    0.10.1): 'Model loading took 65.9651 GiB'; the padded experts give 65.84 GiB (60.71 unpadded)."""
    marlin = Deployment(model="gpt-oss-120b", gpu="h100-sxm", mxfp4_moe_backend="marlin", memory_utilization=0.95)
    assert price(resolve(marlin)).weight_bytes_per_gpu / GIB == pytest.approx(65.9651, rel=0.01)


def test_mxfp4_backend_is_checked():
    with pytest.raises(ValueError, match="mxfp4_moe_backend"):
        Deployment(model="gpt-oss-120b", gpu="h100-sxm", mxfp4_moe_backend="cutlass")
    # Padding applies to MXFP4 experts only: an FP8 model is untouched whatever the backend.
    plain = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", weight_dtype="fp8")))
    marlin = price(
        resolve(
            Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", weight_dtype="fp8", mxfp4_moe_backend="marlin")
        )
    )
    assert plain.weight_bytes_per_gpu == marlin.weight_bytes_per_gpu == plain.weight_bytes


@pytest.mark.parametrize(
    ("gpu", "tokens", "sequences"),
    [("h100-sxm", 8192, 1024), ("h200", 8192, 1024), ("a100-80gb-sxm", 2048, 256), ("l40s", 2048, 256)],
)
def test_vllm_default_batch_limits(gpu, tokens, sequences):
    """vLLM 0.10 EngineArgs.get_batch_defaults, 'vllm serve': 8,192 tokens and 1,024 sequences at 70 GiB or
    more except A100, else 2,048 and 256."""
    spec = load_gpu_catalog().get(gpu)
    assert vllm_default_max_num_batched_tokens(spec) == tokens
    assert vllm_default_max_num_seqs(spec) == sequences


def test_full_load_batch_is_capped_by_the_engines_sequences(llama8):
    # 8B FP8 on H100: the pool holds 2,500+ requests of 400 tokens, vLLM runs at most 1,024 at once.
    assert llama8.pool_sequences(400) > 1024
    assert llama8.max_load_batch(200, 200) == 1024


# --------------------------------------------------------------------------- pricing basis


def test_engine_basis_prices_the_engine_step():
    roofline = price(resolve(Deployment(**LLAMA70_FP8_TP2)))
    engine = price(resolve(Deployment(**LLAMA70_FP8_TP2, pricing_basis="engine")))
    assert roofline.pricing_basis == "roofline" and engine.pricing_basis == "engine"
    assert roofline.output_weight == pytest.approx(roofline.decode_step_s / 128 / roofline.prompt_token_s)
    assert engine.output_weight == pytest.approx(engine.itl_s / 128 / engine.engine_prompt_token_s)
    assert engine.replica_units_per_s == pytest.approx(0.65 / engine.engine_prompt_token_s)
    assert engine.usd_per_million_output_tokens > roofline.usd_per_million_output_tokens


def test_tp1_has_no_allreduce(llama8):
    assert llama8.allreduce_s(128) == 0
    # 0.2 ms a step and 32 layers of 30 us.
    assert llama8.step_time_s(1, 100) == pytest.approx(
        llama8.roofline_step_time_s(1, 100) + 0.0002 + 32 * 30e-6 + 0.00001
    )


# --------------------------------------------------------------------------- feasibility


EXAMPLE = ("--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8")


def test_batch_above_the_pool_is_priced_at_the_batch_that_fits(run_cli):
    code, out, err = run_cli("price", *EXAMPLE, "--batch", "512", "--json")
    assert code == 0
    results = json.loads(out)["results"]
    assert results["decode_batch"] == results["max_resident_sequences"] < 512
    assert "does not fit the KV pool" in err
    code, out, err = run_cli("price", *EXAMPLE, "--batch", "512", "--json", "--strict")
    assert code == 1 and "--strict" in err


def test_context_above_the_models_maximum_is_an_error(run_cli):
    code, _, err = run_cli("price", *EXAMPLE, "--context", "200000")
    assert code == 1 and "131,072" in err
    code, _, err = run_cli("kv", *EXAMPLE, "--context", "200000")
    assert code == 1 and "131,072" in err


def test_size_refuses_a_request_the_pool_cannot_hold(run_cli):
    # 646,503 tokens of pool; a request of 700,000 tokens cannot be resident.
    tenant = Traffic(rps=1, prompt_tokens=100_000, output_tokens=1000)
    replica = price(
        resolve(
            Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_pool_tokens=50_000)
        )
    )
    with pytest.raises(Exception, match="of the replica's KV pool"):
        size_traffic(replica, tenant)
    code, out, err = run_cli(
        "size",
        *EXAMPLE,
        "--kv-pool-tokens",
        "50000",
        "--rps",
        "1",
        "--prompt-tokens",
        "100000",
        "--output-tokens",
        "1000",
    )
    assert code == 1 and out == "" and "KV pool" in err


def test_measured_pool_holds_only_where_it_was_measured(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "model: Llama-3.3-70B-Instruct\ngpu: h100-sxm\ntp: 4\nweight_dtype: fp8\nkv_dtype: bf16\n"
        "kv_pool_tokens: 646503\n"
        "kv_pool_measured_with: {gpu: h100, tp: 4, weight_dtype: fp8, kv_dtype: bf16, memory_utilization: 0.9}\n",
        encoding="utf-8",
    )
    code, out, _ = run_cli("price", plan, "--json")
    assert code == 0 and json.loads(out)["results"]["kv_pool_source"] == "measured"
    code, _, err = run_cli("price", plan, "--tp", "8")
    assert code == 1 and "tp 4 -> 8" in err and "kv_pool_tokens" in err
    code, _, err = run_cli("price", plan, "--gpu", "h200", "--memory-utilization", "0.95")
    assert code == 1 and "gpu h100-sxm -> h200" in err and "memory_utilization 0.9 -> 0.95" in err
    # A pool given on the command line wins: the user says it holds for this run.
    code, out, _ = run_cli("price", plan, "--tp", "8", "--kv-pool-tokens", "1200000", "--json")
    assert code == 0 and json.loads(out)["results"]["kv_pool_tokens"] == 1_200_000


def test_a_measured_pool_holds_only_under_the_engine_it_was_measured_with(run_cli, tmp_path):
    """A record that names its engine: another engine is a change, and so is the token budget that engine defaults
    to (SGLang's 16,384 on a B200 where vLLM's is 8,192). A record without one (written before it was kept) compares
    budgets by the deployment's own engine, as it did."""
    plan = tmp_path / "plan.yaml"
    head = "model: Llama-3.1-8B-Instruct\ngpu: b200\nkv_pool_tokens: 1200000\n"
    plan.write_text(head + "kv_pool_measured_with: {gpu: b200, tp: 1, engine: vllm}\n", encoding="utf-8")
    code, out, _ = run_cli("price", plan, "--json")  # vllm is the generic profile's alias
    assert code == 0 and json.loads(out)["results"]["kv_pool_source"] == "measured"
    code, out, err = run_cli("price", plan, "--engine", "sglang")
    assert code == 1 and out == ""
    assert "engine generic -> sglang" in err and "max_num_batched_tokens 8192 -> 16384" in err
    plan.write_text(head + "kv_pool_measured_with: {gpu: b200, tp: 1}\n", encoding="utf-8")
    code, out, _ = run_cli("price", plan, "--engine", "sglang", "--json")
    assert code == 0 and json.loads(out)["results"]["kv_pool_source"] == "measured"
    plan.write_text(head + "kv_pool_measured_with: {gpu: b200, tp: 1, engine: sglng}\n", encoding="utf-8")
    code, out, err = run_cli("price", plan)
    assert code == 2 and out == "" and "kv_pool_measured_with.engine" in err and "did you mean sglang?" in err


def test_a_measured_pool_that_names_its_model_holds_only_for_that_model(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    measured_with = "{model: meta-llama/Llama-3.3-70B-Instruct, gpu: h100, tp: 4, weight_dtype: fp8, kv_dtype: bf16}"
    plan.write_text(
        "model: Llama-3.3-70B-Instruct\ngpu: h100-sxm\ntp: 4\nweight_dtype: fp8\nkv_dtype: bf16\n"
        f"kv_pool_tokens: 646503\nkv_pool_measured_with: {measured_with}\n",
        encoding="utf-8",
    )
    # The same model named as its hub id and as the shipped folder: the pool holds.
    code, out, _ = run_cli("price", plan, "--json")
    assert code == 0 and json.loads(out)["results"]["kv_pool_source"] == "measured"
    # Another model on the same GPU and TP: the 70B's pool would price the 8B's; refused, naming both.
    code, out, err = run_cli("price", plan, "--model", "Llama-3.1-8B-Instruct")
    assert code == 1 and out == ""
    assert "model llama-3.3-70b-instruct -> llama-3.1-8b-instruct" in err and "kv_pool_tokens" in err


@pytest.mark.parametrize(
    ("model", "tp"), [("gemma-3-27b-it", 2), ("Mixtral-8x7B-v0.1", 2), ("AI21-Jamba-1.5-Mini", 2), ("DeepSeek-V3", 8)]
)
def test_the_fast_step_is_the_explained_one(model, tp):
    """step_time_s inlines the sums for speed: it must equal the engine's roofline + overheads + all-reduces, term by
    term."""
    replica = model_for(model=model, gpu="h200", tp=tp)
    # Σ top-k over the MoE layers x log2(TP) x 2 us: Mixtral 32 x 2 x 1, Jamba 16 x 2 x 1, DeepSeek-V3 58 x 8 x 3.
    slots = {"gemma-3-27b-it": 0, "Mixtral-8x7B-v0.1": 64, "AI21-Jamba-1.5-Mini": 32, "DeepSeek-V3": 464 * 3}[model]
    assert replica.moe_overhead_s == pytest.approx(slots * 2e-6, abs=1e-15)
    # Layers x 90 us a prefill pass: gemma-3-27b 62, Mixtral 32, Jamba 32, DeepSeek-V3 61.
    layers = {"gemma-3-27b-it": 62, "Mixtral-8x7B-v0.1": 32, "AI21-Jamba-1.5-Mini": 32, "DeepSeek-V3": 61}[model]
    assert replica.prefill_overhead_s == pytest.approx(layers * 9e-5, rel=1e-12)
    for batch, context in ((1, 10), (7, 900), (64, 4096), (256, 60000)):
        expected = (
            replica.engine_decode_step_s(batch, context)
            + replica.step_overhead_s
            + replica.moe_overhead_s
            + batch * replica.sequence_overhead_s
            + replica.allreduce_s(batch)
        )
        assert replica.step_time_s(batch, context) == pytest.approx(expected, rel=1e-12)
        prefill = (
            max(replica.prefill_compute_s(batch * 3, context), replica.prefill_weight_read_s())
            + replica.step_overhead_s
            + replica.moe_overhead_s
            + replica.prefill_overhead_s
            + replica.allreduce_s(batch * 3)
        )
        assert replica.prefill_time_s(batch * 3, context) == pytest.approx(prefill, rel=1e-12)


def test_accuracy_targets_and_the_doc_that_reports_them():
    """The accuracy targets at default efficiencies, on the cited measurements (bench/accuracy.py):
    decode ITL within 10% and TTFT within 20% mean absolute error, KV pool within 10% median, on the
    fit points; on the held-out points too, or the doc states the miss; docs/accuracy.md holds the
    table the script prints now."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    table = subprocess.run(
        [sys.executable, str(root / "bench" / "accuracy.py"), "--markdown"], capture_output=True, text=True, check=True
    ).stdout
    assert table in (root / "docs" / "accuracy.md").read_text(encoding="utf-8")
    summary = {
        line.split("|")[1].strip(): line.split("|")[2:5]
        for line in table.splitlines()
        if line.startswith("| fit") or line.startswith("| held out")
    }
    # Per GPU (all points): reported with any miss, not a target of its own (L4, A100 40GB and H200 miss 10%
    # at the defaults; docs/accuracy.md says why).
    per_gpu = [line for line in table.splitlines() if line.startswith("| ") and "(" in line and "%" in line]
    doc = (root / "docs" / "accuracy.md").read_text(encoding="utf-8")
    # The targets are checked on the unrounded errors (the table rounds 9.97% to 10.0%), from the same script.
    sys.path.insert(0, str(root / "bench"))
    try:
        import accuracy
    finally:
        sys.path.remove(str(root / "bench"))
    rows = accuracy.rows()
    fit, held = accuracy.summary(rows, False), accuracy.summary(rows, True)
    for label, errors in (("fit", fit), ("held out", held)):
        for group, cell in zip(("ITL", "TTFT"), summary[label][:2], strict=True):
            assert f"{100 * errors[group]:.1f}%" == cell.strip(), (label, group)
    # Fit: the defaults' own points; points added since join it unless held out, so a miss there is stated too.
    itl, ttft = 100 * fit["ITL"], 100 * fit["TTFT"]
    fit_miss = f"Fit-set ITL mean absolute error is {itl:.1f}%, above the 10% target"
    assert itl < 10 or fit_miss in doc, ("fit", itl, per_gpu)
    assert ttft < 20 or f"Fit-set TTFT mean absolute error is {ttft:.1f}%, above the 20% target" in doc, ("fit", ttft)
    # Held out: within the targets, or the doc states the miss (independent checks are not fitted away).
    itl, ttft = 100 * held["ITL"], 100 * held["TTFT"]
    assert itl < 10 or f"Held-out ITL mean absolute error is {itl:.1f}%, above the 10% target" in doc, itl
    assert ttft < 20 or f"Held-out TTFT mean absolute error is {ttft:.1f}%, above the 20% target" in doc, ttft
    # KV pool: median within 10% on the fit points; on the held-out points too, or the doc says it misses.
    kv_fit, kv_held = (float(summary[label][2].strip().rstrip("%")) for label in ("fit", "held out"))
    assert kv_fit < 10, kv_fit
    assert kv_held < 10 or f"KV pool held-out median is {kv_held:.1f}%, above the 10% target" in doc, kv_held


def test_a_files_pool_without_a_record_holds_for_the_files_own_deployment(run_cli, tmp_path):
    """No kv_pool_measured_with: the pool was measured (or chosen) for the file's deployment, so a flag that changes
    the GPU, TP or a dtype is an error naming the change; in a comparison the row's pool is estimated, saying why."""
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "model: Llama-3.3-70B-Instruct\ngpu: h100\ntp: 4\nweight_dtype: fp8\nkv_pool_tokens: 646503\n", encoding="utf-8"
    )
    code, out, _ = run_cli("price", plan, "--json")
    assert code == 0 and json.loads(out)["results"]["kv_pool_source"] == "measured"
    # The same deployment spelled by its catalog id, or a flag that does not touch the pool: still the file's pool.
    code, out, _ = run_cli("price", plan, "--gpu", "h100-sxm", "--batch", "64", "--json")
    assert code == 0 and json.loads(out)["results"]["kv_pool_tokens"] == 646_503
    code, out, err = run_cli("price", plan, "--gpu", "a100-40gb-sxm", "--tp", "8")
    assert code == 1 and out == "" and len(err.splitlines()) == 1
    assert (
        "kv_pool_tokens: the measured pool of 646,503 tokens holds for the file's own deployment, not this one" in err
    )
    assert "gpu h100-sxm -> a100-40gb-sxm, tp 4 -> 8" in err
    # A flag restating what the file's deployment already runs at (the engine's default share and engine, the
    # checkpoint's KV dtype) changes nothing.
    code, out, _ = run_cli(
        "price", plan, "--memory-utilization", "0.9", "--engine", "generic", "--kv-dtype", "bf16", "--json"
    )
    assert code == 0 and json.loads(out)["results"]["kv_pool_tokens"] == 646_503
    code, out, _ = run_cli("price", plan, "--gpu", "h100-sxm,h200", "--tp", "4", "--format", "json")
    rows = json.loads(out)["rows"]
    assert [row["kv_pool_tokens"] == 646_503 for row in rows] == [True, False]
    assert "KV pool estimated: the measured pool of 646,503 tokens holds for the file's own" in rows[1]["warnings"][0]
    code, out, _ = run_cli("price", plan, "--tp", "8", "--kv-pool-tokens", "1200000", "--json")
    assert code == 0 and json.loads(out)["results"]["kv_pool_tokens"] == 1_200_000


def test_a_pool_larger_than_the_gpu_is_refused(run_cli):
    # Llama 3.3 70B, TP 4, BF16 KV: 80 layers × 8 KV heads × 128 × 2 × 2 B / 4 = 81,920 B per token per GPU, so
    # 646,503 tokens need 52.96 GB; beside 70.55e9 B / 4 = 17.6 GB of FP8 weights that is more than an L4's 23.6 GB.
    code, out, err = run_cli(
        "price",
        "--model",
        "Llama-3.3-70B-Instruct",
        "--gpu",
        "l4",
        "--tp",
        "4",
        "--weight-dtype",
        "fp8",
        "--kv-pool-tokens",
        "646503",
    )
    assert code == 1 and out == ""
    assert (
        "--kv-pool-tokens: a pool of 646,503 tokens needs 53.0 GB of KV per GPU beside 17.6 GB of weights, more "
        "than l4's 23.6 GB" in err
    )


def test_a_request_of_exactly_max_model_len_is_served(run_cli):
    args = ("--model", "Llama-3.3-70B-Instruct", "--gpu", "h100-sxm", "--tp", "4", "--weight-dtype", "fp8")
    code, out, err = run_cli("kv", *args, "--max-model-len", "2048", "--context", "2048", "--json")
    assert code == 0, err
    assert json.loads(out)["results"]["context_tokens"] == 2048
    code, _, err = run_cli("kv", *args, "--max-model-len", "2048", "--context", "2049")
    assert code == 1 and "context: 2,049 tokens exceed max_model_len 2,048" in err


def test_a_pool_holds_only_at_the_expert_parallelism_and_state_dtype_it_was_measured_at(run_cli, tmp_path):
    """Jamba 1.5 Mini has experts (expert parallelism moves weights between GPUs) and Mamba layers (the state dtype
    sizes every sequence's state): both change the pool, so both are compared, as the engine runs them."""
    plan = tmp_path / "plan.yaml"
    head = "model: AI21-Jamba-1.5-Mini\ngpu: h100\ntp: 2\nkv_pool_tokens: 400000\n"
    plan.write_text(head, encoding="utf-8")
    code, _, err = run_cli("price", plan, "--expert-parallel")
    assert code == 1 and "not this one (expert_parallel False -> True)" in err
    code, _, err = run_cli("price", plan, "--state-dtype", "fp32")
    assert code == 1 and "not this one (state_dtype bf16 (the model's) -> fp32)" in err
    code, out, _ = run_cli("price", plan, "--state-dtype", "auto", "--json")  # the model's own: no change
    assert code == 0 and json.loads(out)["results"]["kv_pool_tokens"] == 400_000
    plan.write_text(
        head + "kv_pool_measured_with: {gpu: h100, tp: 2, expert_parallel: true, state_dtype: float32}\n",
        encoding="utf-8",
    )
    code, _, err = run_cli("price", plan)
    assert code == 1 and "(expert_parallel True -> False, state_dtype fp32 -> bf16 (the model's))" in err
    code, out, _ = run_cli("price", plan, "--expert-parallel", "--state-dtype", "fp32", "--json")
    assert code == 0 and json.loads(out)["results"]["kv_pool_source"] == "measured"
    # A record without them (written before they were kept) is not checked for them.
    plan.write_text(head + "kv_pool_measured_with: {gpu: h100, tp: 2}\n", encoding="utf-8")
    code, out, _ = run_cli("price", plan, "--expert-parallel", "--state-dtype", "fp32", "--json")
    assert code == 0 and json.loads(out)["results"]["kv_pool_source"] == "measured"


def test_a_state_dtype_is_no_change_for_a_model_without_state(run_cli, tmp_path):
    plan = tmp_path / "plan.yaml"
    plan.write_text(
        "model: Llama-3.1-8B-Instruct\ngpu: h100\nkv_pool_tokens: 400000\n"
        "kv_pool_measured_with: {gpu: h100, tp: 1, expert_parallel: false, state_dtype: fp32}\n",
        encoding="utf-8",
    )
    code, out, err = run_cli("price", plan, "--json")
    assert code == 0, err
    assert json.loads(out)["results"]["kv_pool_source"] == "measured"
