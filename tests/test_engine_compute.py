"""The FLOPs an engine computes for a text token, against docs/method.md's 2 × active parameters.

A token's embedding row is gathered, not multiplied; every decode token computes its logits (the LM head,
vocabulary × hidden; tied, the table is the head), but a prefill chunk computes them for its last token
only (vLLM's ``logits_indices``; TensorRT-LLM without ``gather_context_logits``). The method's
``prompt_token_s`` keeps 2 × active parameters. Every expected figure is computed by hand from the
model's config.
"""

from __future__ import annotations

import pytest
from conftest import CONFIGS

from quotacalc import Deployment, price, resolve
from quotacalc.core.replica import EngineCompute, engine_compute

# Llama 3.1 8B (models/Llama-3.1-8B-Instruct/config.json): 8,030,261,248 parameters, untied, vocabulary
# 128,256 x hidden 4,096 = 525,336,576 in the table and as many in the head.
LLAMA8_PARAMS = 8_030_261_248
LLAMA8_VOCAB_MATRIX = 128_256 * 4_096
H100_FP8_FLOPS = 1979e12


def arch_of(model: str, **fields):
    return resolve(Deployment(model=model, gpu="h100-sxm", **fields)).arch


def test_untied_model_drops_the_table_and_keeps_the_head_for_decode_only():
    compute = engine_compute(arch_of("Llama-3.1-8B-Instruct"))
    assert compute == EngineCompute(
        params_per_token=LLAMA8_PARAMS - LLAMA8_VOCAB_MATRIX, logits_params=LLAMA8_VOCAB_MATRIX
    )
    assert compute.params_per_prompt_token == LLAMA8_PARAMS - 2 * LLAMA8_VOCAB_MATRIX == 6_979_588_096


def test_tied_model_multiplies_the_table_as_its_head():
    """Gemma 3 27B ties its head to the 262,208 x 5,376 table: a decode token runs every active parameter
    (the table once, as the head); a prompt token all but the table."""
    arch = arch_of("gemma-3-27b-it", tp=2)
    table = 262_208 * 5_376
    assert arch.tie_word_embeddings
    compute = engine_compute(arch)
    assert compute.params_per_token == arch.active_params()
    assert compute.logits_params == table
    assert compute.params_per_prompt_token == arch.active_params() - table


def test_moe_keeps_its_routed_experts_at_top_k():
    """gpt-oss-120b: untied 201,088 x 2,880 matrices are a tenth of its 5.7e9 active parameters."""
    arch = arch_of("gpt-oss-120b", tp=2)
    matrix = 201_088 * 2_880
    compute = engine_compute(arch)
    assert compute.params_per_token == arch.active_params() - matrix
    assert compute.params_per_prompt_token == arch.active_params() - 2 * matrix


def test_ttft_charges_the_logits_once_a_chunk():
    """Llama 3.1 8B FP8 on one H100, a 16,384-token prompt: two chunks of 8,192 (vLLM's default budget
    there), each compute-bound; the second attends the first's 8,192 cached tokens. Each token attends at
    2 x 32 heads x (128 + 128) x 32 layers = 524,288 FLOPs an attended token."""
    result = price(
        resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", weight_dtype="fp8", context=16384))
    )
    rate = H100_FP8_FLOPS * 0.5
    per_token = 2 * (LLAMA8_PARAMS - 2 * LLAMA8_VOCAB_MATRIX)
    logits = 2 * LLAMA8_VOCAB_MATRIX
    first = (8192 * (per_token + 524_288 * 4096.5) + logits) / rate
    second = (8192 * (per_token + 524_288 * (8192 + 4096.5)) + logits) / rate
    assert result.engine_flops_per_prompt_token == per_token
    # Each chunk pays the step overhead (0.2 ms), 32 layers x 30 us and 32 layers x 90 us; the request, 3 ms once.
    chunk_overhead = 0.0002 + 32 * 30e-6 + 0.00288
    assert result.ttft_s == pytest.approx(0.003 + first + chunk_overhead + second + chunk_overhead, rel=1e-9)
    # The method's prompt token is untouched: 2 x every active parameter.
    assert result.prompt_token_s == pytest.approx(2 * LLAMA8_PARAMS / rate, rel=1e-9)


def test_engine_decode_compute_skips_the_embedding_gather():
    """At batch 1,024 of 100-token contexts the FP8 8B step is compute-bound on FLOPs alone."""
    result = price(
        resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", weight_dtype="fp8", batch=1024, context=100))
    )
    rate = H100_FP8_FLOPS * 0.5
    attention = 524_288 * 100
    assert result.decode_compute_s == pytest.approx(1024 * (2 * LLAMA8_PARAMS + attention) / rate, rel=1e-9)
    engine = 1024 * (2 * (LLAMA8_PARAMS - LLAMA8_VOCAB_MATRIX) + attention) / rate
    assert result.engine_decode_compute_s == pytest.approx(engine, rel=1e-9)
    assert result.engine_decode_step_s == pytest.approx(max(engine, result.decode_memory_s), rel=1e-6)


@pytest.mark.parametrize("prefill_layer_overhead_s", [9e-5, 1e-3])
def test_the_simulator_prefills_one_long_prompt_at_the_engine_flops(prefill_layer_overhead_s):
    """One 4,000-token request alone on one H100 (Llama 3.1 8B BF16, 989.5 TFLOPS): one compute-bound chunk, so its first
    token comes after 4,000 prompt tokens at 2 x 6,979,588,096 FLOPs, their attention, one token's logits,
    the step overhead and the request overhead (docs/accuracy.md's TTFT), and 32 layers x prefill_layer_overhead_s
    (90 us by default; an eager prefill's 1 ms)."""
    from quotacalc.inputs.scenario import scenario_from_dict
    from quotacalc.sim.events import Simulation, build_setup

    workload = {
        "arrival": {"kind": "poisson", "rate_rps": 1},
        "prompt_tokens": {"kind": "fixed", "tokens": 4000},
        "output_tokens": {"kind": "fixed", "tokens": 2},
        "max_tokens": 2,
    }
    tier = {
        "name": "open",
        "max_context_tokens": 131072,
        "kv_cap_tokens_per_replica": 10_000_000,
        "max_concurrent_sequences": 1000,
        "max_output_tokens": 100,
        "priority": 0,
    }
    document = {
        "plan": {
            "pools": [
                {
                    "name": "p",
                    "replicas": 1,
                    "deployment": {
                        "model": "Llama-3.1-8B-Instruct",
                        "gpu": "h100-sxm",
                        "prefill_layer_overhead_s": prefill_layer_overhead_s,
                    },
                }
            ],
            "tiers": [tier],
            "tenants": [{"name": "t", "tier": "open", "units_per_s": 1e9}],
        },
        "workload": {"tenants": [{"tenant": "t", **workload}]},
        "requests": 1,
    }
    result = Simulation(build_setup(scenario_from_dict(document)), "reserve_capped", "fair").run()
    flops = 4000 * (2 * (LLAMA8_PARAMS - 2 * LLAMA8_VOCAB_MATRIX) + 524_288 * 2000.5) + 2 * LLAMA8_VOCAB_MATRIX
    # MFU 0.5 is stated on the H100 at FP8; at BF16 its best matmul reaches 80.3% of the peak against 70.9% at FP8
    # (catalog/gpus.yaml's matmul_efficiency, from a public MAMF table).
    bf16_rate = 989.5e12 * 0.5 * (0.803 / 0.709)
    assert flops / bf16_rate > LLAMA8_PARAMS * 2 / (3.35e12 * 0.75)  # compute-bound: above one weight read
    eager_s = 32 * prefill_layer_overhead_s
    assert result.ttft_p50_s == pytest.approx(0.003 + flops / bf16_rate + 0.0002 + 32 * 30e-6 + eager_s, rel=1e-9)


def test_moe_slots_add_to_every_forward_pass_by_hand():
    """Mixtral 8x7B BF16 at TP 2 on H100: 32 MoE layers of top 2 = 64 routed-expert slots a forward pass, x log2(2)
    = 1, at the default 2 us each: 0.128 ms in every decode step and every prefill chunk; at TP 4, twice that. A
    dense model has none, nor a MoE at TP 1, and the method's roofline decode_step_s never has it."""
    mixtral = price(resolve(Deployment(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2, batch=8, context=1000)))
    assert mixtral.moe_overhead_s == pytest.approx(64 * 2e-6)
    assert mixtral.decode_overhead_s == pytest.approx(0.0002 + 32 * 30e-6 + 64 * 2e-6 + 8 * 0.00001)
    assert mixtral.itl_s == pytest.approx(
        mixtral.engine_decode_step_s + mixtral.decode_overhead_s + mixtral.allreduce_s, rel=1e-12
    )
    # Set to zero, the ITL drops by exactly that time; the roofline step does not move.
    plain = price(
        resolve(
            Deployment(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2, batch=8, context=1000, moe_slot_overhead_s=0.0)
        )
    )
    assert mixtral.itl_s - plain.itl_s == pytest.approx(64 * 2e-6, rel=1e-9)
    assert mixtral.ttft_s - plain.ttft_s == pytest.approx(64 * 2e-6, rel=1e-9)  # one chunk of 1,000 tokens
    assert mixtral.decode_step_s == plain.decode_step_s
    tp4 = price(resolve(Deployment(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=4)))
    assert tp4.moe_overhead_s == pytest.approx(64 * 2 * 2e-6)
    dense = price(resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm")))
    assert dense.moe_overhead_s == 0.0
    one_gpu = price(resolve(Deployment(model="Mixtral-8x7B-v0.1", gpu="h200")))
    assert one_gpu.moe_overhead_s == 0.0


def test_calibrate_recovers_a_moe_slot_overhead():
    """Runs measured as the model predicts them at 10 us a slot (Mixtral at TP 2): --fit moe_slot_overhead_s
    gives 10 us back from the 2 us default."""
    from quotacalc.core.calibrate import BenchmarkPoint, calibrate, predictions

    inputs = resolve(Deployment(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2))
    blank = [
        BenchmarkPoint(source="b.csv", row=f"r{c}", concurrency=c, prompt_tokens=500.0, output_tokens=300.0, itl_s=1.0)
        for c in (1, 2, 4, 8, 16, 32, 64)
    ]
    measured = predictions(inputs, {"moe_slot_overhead_s": 1e-5}, blank)
    points = [b.model_copy(update={"itl_s": value}) for b, value in zip(blank, measured, strict=True)]
    result = calibrate(inputs, points, parameters=["moe_slot_overhead_s"])
    (fitted,) = result.parameters
    assert fitted.name == "moe_slot_overhead_s" and fitted.before == 2e-6
    # Within the fit's weak pull towards the 2 us start (0.3% of one figure's error per 2 us).
    assert fitted.after == pytest.approx(1e-5, rel=2e-2)


def test_calibrate_says_when_the_runs_cannot_move_a_parameter():
    """A dense model has no MoE slots, and TP 1 no all-reduces: fitting either says so instead of reporting a fit."""
    from quotacalc.core.calibrate import BenchmarkPoint, calibrate

    inputs = resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm"))
    points = [
        BenchmarkPoint(source="b.csv", row=f"r{c}", concurrency=c, prompt_tokens=500.0, output_tokens=300.0, itl_s=i)
        for c, i in ((1, 0.0075), (32, 0.0095))
    ]
    result = calibrate(inputs, points, parameters=["mbu", "moe_slot_overhead_s", "allreduce_latency_s"])
    assert (
        "moe_slot_overhead_s, allreduce_latency_s: Llama-3.1-8B-Instruct at TP 1 has no such term (MoE slots need MoE "
        "layers and TP > 1, all-reduces TP > 1), so the runs cannot move it: left at its starting value; drop it "
        "from --fit"
    ) in result.warnings
    # Mixtral at TP 2 has both: no such warning.
    mixtral = resolve(Deployment(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2))
    both = calibrate(mixtral, points, parameters=["mbu", "moe_slot_overhead_s", "allreduce_latency_s"])
    assert not any("has no such term" in warning for warning in both.warnings)
    values = {parameter.name: parameter for parameter in result.parameters}
    assert values["moe_slot_overhead_s"].after == values["moe_slot_overhead_s"].before == 2e-6
    assert values["mbu"].after != values["mbu"].before  # the one it can move is fitted


def test_prefill_layer_overhead_adds_to_every_prefill_pass_by_hand():
    """Llama 3.3 70B (80 layers): 90 us a layer by default, 7.2 ms once a prefill chunk; at 1 ms a layer, 80 ms.
    A 20,000-token prompt in chunks of 8,192 (H100's default budget) pays it three times; a decode-only step never.
    A prompt prefilled among decodes pays none where prefill rides in the decode step (mixed_prefill, the default)
    and its own pass's where it does not (SGLang); the method's roofline figures never move."""
    base = Deployment(
        model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=2, weight_dtype="fp8", batch=16, context=1000,
        prefill_layer_overhead_s=0.0,
    )  # fmt: skip
    assert price(resolve(base.model_copy(update={"prefill_layer_overhead_s": 9e-5}))).prefill_overhead_s == (
        pytest.approx(80 * 9e-5)
    )
    assert Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm").prefill_layer_overhead_s == 9e-5
    eager = base.model_copy(update={"prefill_layer_overhead_s": 1e-3})
    plain_result, eager_result = price(resolve(base)), price(resolve(eager))
    assert plain_result.prefill_overhead_s == 0.0
    assert eager_result.prefill_overhead_s == pytest.approx(80 * 1e-3)
    assert eager_result.ttft_s - plain_result.ttft_s == pytest.approx(0.080, rel=1e-9)  # one 1,000-token chunk
    assert eager_result.itl_s == plain_result.itl_s
    assert eager_result.decode_step_s == plain_result.decode_step_s
    assert eager_result.prompt_token_s == plain_result.prompt_token_s
    from quotacalc.core.replica import replica_model

    def model_of(deployment):
        return replica_model(resolve(deployment), price(resolve(deployment)).kv_pool_bytes_per_gpu)

    plain, model = model_of(base), model_of(eager)
    assert model.ttft_s(20_000) - plain.ttft_s(20_000) == pytest.approx(3 * 0.080, rel=1e-9)  # ceil(20000 / 8192)
    assert model.step_time_s(16, 1000) == plain.step_time_s(16, 1000)
    assert model.mixed_step_time_s(16, 1000, 0.0, 0) == plain.mixed_step_time_s(16, 1000, 0.0, 0)
    # Mixed: a chunk riding in a decode step adds its FLOPs, no pass of its own.
    assert model.mixed_step_time_s(16, 1000, 0.01, 512) == plain.mixed_step_time_s(16, 1000, 0.01, 512)
    assert model.loaded_itl_s(25, 500, 1000) == plain.loaded_itl_s(25, 500, 1000)
    # Not mixed: each prefill is a pass the decodes wait for, 80 ms; at concurrency 25 with 1,000-token outputs
    # each step carries 24/1000 of a prefill.
    apart = model_of(eager.model_copy(update={"mixed_prefill": False}))
    assert apart.mixed_step_time_s(16, 1000, 0.01, 512) - plain.mixed_step_time_s(16, 1000, 0.01, 512) == (
        pytest.approx(0.080, rel=1e-9)
    )
    # A decode step without prefill tokens runs no prefill pass, mixed or not; one prompt token is a pass.
    assert apart.mixed_step_time_s(16, 1000, 0.0, 0) == apart.step_time_s(16, 1000)
    assert model.mixed_step_time_s(16, 1000, 0.0, 0) == model.step_time_s(16, 1000)
    assert apart.mixed_step_time_s(16, 1000, 1e-5, 1) - plain.mixed_step_time_s(16, 1000, 1e-5, 1) == (
        pytest.approx(0.080, rel=1e-9)
    )
    assert apart.loaded_itl_s(25, 500, 1000) - plain.loaded_itl_s(25, 500, 1000) == pytest.approx(
        24 / 1000 * 0.080, rel=1e-9
    )
    assert apart.ttft_s(20_000) == model.ttft_s(20_000)


def test_calibrate_recovers_a_prefill_layer_overhead():
    """First tokens at three prompt lengths measured as the model predicts them at 0.9 ms a layer (Llama 3.1 8B,
    32 layers: 28.8 ms a chunk), request overhead fixed: --fit mfu,prefill_layer_overhead_s gives 0.9 ms back."""
    from quotacalc.core.calibrate import BenchmarkPoint, calibrate, predictions

    inputs = resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm"))
    blank = [
        BenchmarkPoint(source="b.csv", row=f"r{p}", concurrency=1, prompt_tokens=p, output_tokens=1.0, ttft_s=1.0)
        for p in (128.0, 1024.0, 4096.0)
    ]
    measured = predictions(inputs, {"prefill_layer_overhead_s": 9e-4, "mfu": 0.4}, blank)
    points = [b.model_copy(update={"ttft_s": value}) for b, value in zip(blank, measured, strict=True)]
    result = calibrate(inputs, points, parameters=["mfu", "prefill_layer_overhead_s"])
    fitted = {parameter.name: parameter for parameter in result.parameters}
    assert fitted["prefill_layer_overhead_s"].before == 9e-5  # the default
    assert fitted["prefill_layer_overhead_s"].after == pytest.approx(9e-4, rel=2e-2)
    assert fitted["mfu"].after == pytest.approx(0.4, rel=2e-2)


# DeepSeek-V3 (models/DeepSeek-V3/config.json): hidden 7,168, q_lora_rank 1,536, kv_lora_rank 512, rope 64;
# 61 layers, of which 58 MoE (first_k_dense_replace 3) over 256 routed experts.
DSV3_MLA_REPLICATED = 7_168 * 1_536 + 1_536 + 7_168 * (512 + 64) + 512  # q_a_proj + norm, kv_a_proj + norm
DSV3_ROUTER = 256 * 7_168


def test_every_rank_runs_the_layers_it_holds_whole():
    """vLLM, SGLang and TensorRT-LLM keep MLA's down-projections and the MoE router whole on every rank
    (ReplicatedLinear), so at TP 8 each of the eight ranks multiplies them for every token: the replica spends
    7 more copies of their FLOPs than a 1/TP split would. A dense model has none, so TP changes nothing."""
    arch = arch_of("DeepSeek-V3", tp=8, weight_dtype="fp8")
    replicated = 61 * DSV3_MLA_REPLICATED + 58 * DSV3_ROUTER
    assert replicated == 1_030_023_168
    one, eight = engine_compute(arch, 1), engine_compute(arch, 8)
    assert one.replicated_params == eight.replicated_params == replicated
    assert eight.params_per_token - one.params_per_token == eight.repeated_params == 7 * replicated
    assert eight.params_per_prompt_token - one.params_per_prompt_token == 7 * replicated
    # The prefill a TTFT charges at TP 8 counts them; the method's prompt_token_s does not.
    result = price(resolve(Deployment(model="DeepSeek-V3", gpu="h200", tp=8, weight_dtype="fp8")))
    assert result.engine_flops_per_prompt_token == 2 * eight.params_per_prompt_token
    dense = arch_of("Llama-3.3-70B-Instruct", tp=4)
    assert engine_compute(dense, 4).params_per_token == engine_compute(dense, 1).params_per_token
    assert engine_compute(dense, 4).replicated_params == 0


def test_mla_decodes_absorbed_and_prefills_expanded():
    """vLLM's MLA (vllm/v1/attention/backends/mla/common.py: 'compute friendly' for prefill, 'data-movement
    friendly' for decode; SGLang and TensorRT-LLM the same): a prompt token attends with the latents up-projected,
    2 x 128 heads x (192 + 128) = 81,920 FLOPs a key at DeepSeek-V3's sizes; a decode token attends the latent
    itself, 2 x 128 x (512 + 64 + 512) = 278,528. 61 MLA layers; the cache read is the latent either way."""
    from quotacalc.core.replica import replica_model

    inputs = resolve(Deployment(model="DeepSeek-V3", gpu="h200", tp=8, weight_dtype="fp8"))
    model = replica_model(inputs, kv_pool_bytes_per_gpu=1e11)
    assert model.attention_flops(1_000) == 61 * 278_528 * 1_000
    assert model.prefill_attention_flops(1_000) == 61 * 81_920 * 1_000
    # A 2,000-token prompt in one chunk: each token attends (2,000 + 1) / 2 keys on average, at the expanded form.
    flops = 2_000 * (model.prefill_flops_per_token + 61 * 81_920 * 2_001 / 2) + model.logits_flops_per_token
    assert model.prefill_compute_s(2_000) == pytest.approx(flops / model.compute_flops_per_s, rel=1e-12)
    # A dense model decodes and prefills alike.
    llama = resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm"))
    dense = replica_model(llama, kv_pool_bytes_per_gpu=1e10)
    assert dense.attention_flops(1_000) == dense.prefill_attention_flops(1_000) == 524_288 * 1_000


def test_one_all_reduce_after_each_block():
    """Each token mixer and each feed-forward block ends in a row-parallel projection whose output TP ranks
    all-reduce (vLLM's RowParallelLinear, reduce_results): two a layer for Qwen3-8B's 36 layers; one a layer for
    Nemotron 3 Nano's 52 (hybrid_override_pattern 'MEMEM*E...': each a Mamba, MoE or attention block alone); five
    for each of LongCat-Flash's 28 layers (two attention + MLP sublayers and the shortcut MoE). None at TP 1."""
    from quotacalc.core.replica import allreduces_per_step

    qwen = arch_of("Qwen3-8B", tp=2)
    assert allreduces_per_step(qwen, 2) == 72
    assert allreduces_per_step(qwen, 1) == 0
    nemotron = resolve(Deployment(model=str(CONFIGS / "nemotron_h_moe"), gpu="b200", tp=2)).arch
    assert allreduces_per_step(nemotron, 2) == 52
    longcat = resolve(Deployment(model=str(CONFIGS / "longcat_flash_chat"), gpu="h200", tp=8, weight_dtype="fp8")).arch
    assert allreduces_per_step(longcat, 8) == 5 * 28
    # The step charges each its latency: Nemotron's 52 at B200's 10.5 us.
    result = price(resolve(Deployment(model=str(CONFIGS / "nemotron_h_moe"), gpu="b200", tp=2, batch=1)))
    per_token = 2 * (2 - 1) / 2 * 2_688 * 2 / 900e9
    assert result.allreduce_s == pytest.approx(52 * (10.5e-6 + per_token), rel=1e-9)


def test_every_forward_pass_pays_each_layers_fixed_cost():
    """layer_overhead_s (30 us by default, docs/accuracy.md 'A fixed cost per layer'): Llama 3.3 70B's 80 layers add
    2.4 ms to every decode step and to every prefill chunk (a 20,000-token prompt: three chunks of 8,192 on H100);
    the method's roofline figures never move."""
    from quotacalc.core.replica import replica_model

    base = dict(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=2, weight_dtype="fp8", batch=8, context=1000)
    assert Deployment(**base).layer_overhead_s == 3e-5
    with_layers, without = (price(resolve(Deployment(**base, layer_overhead_s=v))) for v in (3e-5, 0.0))
    assert with_layers.itl_s - without.itl_s == pytest.approx(80 * 3e-5, rel=1e-9)
    assert with_layers.ttft_s - without.ttft_s == pytest.approx(80 * 3e-5, rel=1e-9)  # one chunk of 1,000 tokens
    assert with_layers.decode_step_s == without.decode_step_s
    assert with_layers.prompt_token_s == without.prompt_token_s
    models = [
        replica_model(resolve(Deployment(**base, layer_overhead_s=v)), kv_pool_bytes_per_gpu=1e10) for v in (3e-5, 0.0)
    ]
    assert models[0].ttft_s(20_000) - models[1].ttft_s(20_000) == pytest.approx(3 * 80 * 3e-5, rel=1e-9)


def test_calibrate_recovers_a_layer_overhead():
    """Runs measured as the model predicts them at 50 us a layer (Llama 3.1 8B, 32 layers): --fit
    mbu,layer_overhead_s gives 50 us back from the 30 us default, the step overhead held at its 0.2 ms."""
    from quotacalc.core.calibrate import BenchmarkPoint, calibrate, predictions

    inputs = resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm"))
    blank = [
        BenchmarkPoint(source="b.csv", row=f"r{c}", concurrency=c, prompt_tokens=500.0, output_tokens=300.0, itl_s=1.0)
        for c in (1, 4, 16, 64)
    ]
    measured = predictions(inputs, {"layer_overhead_s": 5e-5, "mbu": 0.7}, blank)
    points = [b.model_copy(update={"itl_s": value}) for b, value in zip(blank, measured, strict=True)]
    fitted = {p.name: p for p in calibrate(inputs, points, parameters=["mbu", "layer_overhead_s"]).parameters}
    assert fitted["layer_overhead_s"].before == 3e-5
    assert fitted["layer_overhead_s"].after == pytest.approx(5e-5, rel=2e-2)
    assert fitted["mbu"].after == pytest.approx(0.7, rel=2e-2)
