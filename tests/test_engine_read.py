"""The weights an engine's decode step reads, against the stored weights the method's roofline reads.

An engine gathers only the batch's rows of the input embedding table, does not run a vision tower on
text, and runs the LM head unquantized where an explicit --weight-dtype stores it quantized (vLLM's
quantization methods apply to linear layers, its LM head is a vocabulary embedding; ModelOpt's
configs exclude '*lm_head*'). Every expected figure is computed by hand from the model's config.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from quotacalc import Deployment, price, resolve
from quotacalc.core.arch import ParamGroup
from quotacalc.core.replica import replica_model
from quotacalc.core.weights import EngineRead, engine_read

# Llama 3.1 8B (models/Llama-3.1-8B-Instruct/config.json): vocabulary 128,256, hidden 4,096, untied;
# 8,030,261,248 parameters; KV 2 × 32 layers × 8 heads × 128 × 2 B = 131,072 B a token in BF16.
LLAMA8_TABLE_PARAMS = 128_256 * 4_096
LLAMA8_PARAMS = 8_030_261_248
LLAMA8_KV_BYTES_PER_TOKEN = 2 * 32 * 8 * 128 * 2
H100_BYTES_PER_S = 3.35e12


def priced(**fields):
    return price(resolve(Deployment(**fields)))


def test_untied_bf16_step_skips_the_input_embedding_table():
    result = priced(model="Llama-3.1-8B-Instruct", gpu="h100-sxm")
    assert result.decode_weight_bytes_per_gpu == LLAMA8_PARAMS * 2  # the method's roofline reads every weight
    assert result.engine_decode_weight_bytes_per_gpu == (LLAMA8_PARAMS - LLAMA8_TABLE_PARAMS) * 2


def test_itl_by_hand_at_batch_one():
    """itl = (engine weight read + context × KV per token) / (peak × MBU) + step (0.2 ms) + 32 layers × 30 us + one
    sequence's overhead."""
    result = priced(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", batch=1, context=1000)
    read = (LLAMA8_PARAMS - LLAMA8_TABLE_PARAMS) * 2 + 1000 * LLAMA8_KV_BYTES_PER_TOKEN
    assert result.engine_decode_step_s == pytest.approx(read / (H100_BYTES_PER_S * 0.75), rel=1e-9)
    assert result.itl_s == pytest.approx(read / (H100_BYTES_PER_S * 0.75) + 0.0002 + 32 * 30e-6 + 0.00001, rel=1e-9)
    roofline = (LLAMA8_PARAMS * 2 + 1000 * LLAMA8_KV_BYTES_PER_TOKEN) / (H100_BYTES_PER_S * 0.75)
    assert result.decode_step_s == pytest.approx(roofline, rel=1e-9)


@pytest.mark.parametrize("tp", [1, 2])
def test_explicit_fp8_reads_the_head_at_16_bits(tp):
    """FP8 everywhere as stored; the engine skips the 1-byte table and reads the head at 2 bytes: they cancel."""
    result = priced(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", tp=tp, weight_dtype="fp8")
    assert result.weight_bytes_per_gpu == LLAMA8_PARAMS / tp
    skipped, upcast = LLAMA8_TABLE_PARAMS * 1, LLAMA8_TABLE_PARAMS * (2 - 1)
    assert result.engine_decode_weight_bytes_per_gpu == pytest.approx((LLAMA8_PARAMS - skipped + upcast) / tp)


def test_explicit_int4_head_upcast_is_the_16_bit_head_less_the_int4_one():
    # --weight-dtype int4 stores 0.5 B + AWQ's default group scales (2.5 B per 128 weights) a parameter.
    int4 = 0.5 + 2.5 / 128
    inputs = resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", weight_dtype="int4"))
    read = engine_read(inputs.arch, inputs.weights)
    assert read.embedding_bytes == pytest.approx(LLAMA8_TABLE_PARAMS * int4)
    assert read.lm_head_upcast_bytes == pytest.approx(LLAMA8_TABLE_PARAMS * (2 - int4))
    assert read.vision_bytes == 0
    assert read.delta_bytes == pytest.approx(LLAMA8_TABLE_PARAMS * (2 - int4 - int4))


@pytest.mark.parametrize("dtype", ["bf16", "fp16", "fp32"])
def test_no_upcast_at_16_bits_or_wider(dtype):
    inputs = resolve(Deployment(model="Llama-3.1-8B-Instruct", gpu="h100-sxm", weight_dtype=dtype))
    assert inputs.weights.engine_vocab_bytes_per_param is None  # engines run the head as stored
    read = engine_read(inputs.arch, inputs.weights)
    assert read.lm_head_upcast_bytes == 0
    assert read.delta_bytes == -read.embedding_bytes


def test_tied_head_reads_the_table_at_16_bits_and_skips_the_vision_tower():
    """Gemma 3 27B ties its head to the table (262,208 × 5,376, transformers' Gemma3TextConfig) and has a
    SigLIP tower: under FP8 at TP 2 the engine reads the table at 2 bytes instead of 1 and no tower."""
    inputs = resolve(Deployment(model="gemma-3-27b-it", gpu="h100-sxm", tp=2, weight_dtype="fp8"))
    vision_params = inputs.arch.params_by_group()[ParamGroup.VISION]
    assert vision_params > 0
    read = engine_read(inputs.arch, inputs.weights)
    assert read.embedding_bytes == 0  # tied: the head reads the table
    assert read.lm_head_upcast_bytes == 262_208 * 5_376 * (2 - 1)
    assert read.vision_bytes == vision_params * 1
    model = replica_model(inputs, price(inputs).kv_pool_bytes_per_gpu)
    assert model.engine_read_delta_bytes_per_gpu == pytest.approx((262_208 * 5_376 - vision_params) / 2)
    # In the checkpoint's BF16 the tower is 2 bytes a parameter and the head is read as stored.
    stored = resolve(Deployment(model="gemma-3-27b-it", gpu="h100-sxm", tp=2))
    assert engine_read(stored.arch, stored.weights) == EngineRead(
        embedding_bytes=0, vision_bytes=vision_params * 2, lm_head_upcast_bytes=0
    )


def test_checkpoint_quantization_keeps_its_own_head():
    """DeepSeek-V3's checkpoint quantizes linear layers to FP8 and keeps its head and table in BF16
    (vocabulary 129,280, hidden 7,168, untied): nothing is upcast, the BF16 table is skipped, and the
    layers vLLM keeps whole on every rank are read whole."""
    inputs = resolve(Deployment(model="DeepSeek-V3", gpu="h200", tp=8))
    read = engine_read(inputs.arch, inputs.weights)
    assert read.lm_head_upcast_bytes == 0
    assert read.embedding_bytes == 129_280 * 7_168 * 2
    model = replica_model(inputs, price(inputs).kv_pool_bytes_per_gpu)
    # Every rank also reads its whole copy of what the engine replicates: 61 MLA layers' down-projections
    # and norms (7,168 x 1,536 + 1,536 + 7,168 x (512 + 64) + 512) and 58 routers (7,168 x 256), each at its
    # group's stored bytes, beyond the 1/8 share the roofline counts.
    # The norms (1,536 + 512 a layer) are counted in the norm group, stored in BF16 (the checkpoint keeps them so).
    mla, norms, routers = 61 * (7_168 * 1_536 + 7_168 * 576), 61 * (1_536 + 512), 58 * 7_168 * 256
    assert inputs.arch.replicated_params_by_group() == {
        ParamGroup.ATTENTION: mla,
        ParamGroup.NORM: norms,
        ParamGroup.ROUTER: routers,
    }
    replicated = (
        mla * inputs.weights.storage(ParamGroup.ATTENTION).bytes_per_param
        + norms * inputs.weights.storage(ParamGroup.NORM).bytes_per_param
        + routers * inputs.weights.storage(ParamGroup.ROUTER).bytes_per_param
    )
    for batch in (1, 64):
        assert model.engine_weight_read_bytes_per_gpu(batch) == pytest.approx(
            model.decode_weight_bytes_per_gpu_at(batch) - 129_280 * 7_168 * 2 / 8 + replicated * (1 - 1 / 8)
        )
    assert model.prefill_weight_read_s() == pytest.approx(
        (model.weight_bytes_per_gpu - 129_280 * 7_168 * 2 / 8 + replicated * (1 - 1 / 8)) / model.bandwidth_bytes_per_s
    )


def test_method_example_roofline_is_untouched():
    """docs/method.md §7: the decode step 14.1 ms reads all 17.6 GB of weights per GPU."""
    result = priced(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8", kv_dtype="bf16")
    assert result.decode_step_s == pytest.approx(0.0141, abs=0.00005)
    assert result.decode_weight_bytes_per_gpu == result.weight_bytes_per_gpu


ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize(
    "point_id",
    ["sb-h100-qwen3-8b-bf16-128-128-c1", "musgrave-a100-40-8b-c1", "ib-a100-40-qwen7b-short-c1"],
)
def test_bf16_vllm_single_user_steps_within_ten_percent(point_id):
    """vLLM releases' BF16 single-user ITL of untied 7-8B models (tests/data/measurements/decode_itl.yaml, with
    sources): +13% to +15% while the step read the embedding table, within 10% without it."""
    sys.path.insert(0, str(ROOT / "bench"))
    from accuracy import load, measured_decode, predict_decode

    point = next(p for p in load("decode_itl.yaml") if p["id"] == point_id)
    assert predict_decode(point) / measured_decode(point) - 1 == pytest.approx(0, abs=0.10)


def test_dense_models_replicate_nothing_so_the_worked_example_holds():
    """Llama 3.3 70B FP8 at TP 4 (docs/method.md's worked example): 70,553,706,496 B / 4 a GPU, nothing whole."""
    inputs = resolve(Deployment(model="Llama-3.3-70B-Instruct", gpu="h100-sxm", tp=4, weight_dtype="fp8"))
    assert inputs.arch.replicated_params_by_group() == {}
    assert price(inputs).weight_bytes_per_gpu == 70_553_706_496 / 4


def test_moe_router_is_whole_on_every_rank():
    """Mixtral 8x7B BF16 at TP 2: 32 routers of 4,096 x 8 at 2 B, half of them beyond each rank's share."""
    inputs = resolve(Deployment(model="Mixtral-8x7B-v0.1", gpu="h100-sxm", tp=2))
    routers = 32 * 4_096 * 8
    assert inputs.arch.replicated_params_by_group() == {ParamGroup.ROUTER: routers}
    result = price(inputs)
    assert result.weight_bytes_per_gpu == pytest.approx(result.weight_bytes / 2 + routers * 2 / 2, rel=1e-12)
    # At TP 1 (on a 141 GB H200) there is nothing beyond the one copy.
    assert price(resolve(Deployment(model="Mixtral-8x7B-v0.1", gpu="h200"))).weight_bytes_per_gpu == (
        result.weight_bytes
    )


def test_mla_without_a_query_latent_replicates_only_the_kv_down_projection():
    """DeepSeek-V2-Lite's shape (no q_lora_rank): the query projection is split by heads; the KV
    down-projection, 2,048 x (512 + 64), and its 512-wide norm are whole."""
    from quotacalc.core.arch import MLAAttention

    mla = MLAAttention(
        hidden_size=2048,
        num_heads=16,
        q_lora_rank=None,
        kv_lora_rank=512,
        qk_nope_head_dim=128,
        qk_rope_head_dim=64,
        v_head_dim=128,
    )
    assert mla.replicated_params() == {ParamGroup.ATTENTION: 2048 * 576, ParamGroup.NORM: 512}


def test_hybrid_layers_without_a_mixer_replicate_their_router():
    """Nemotron-3-Nano's pattern (tests/data/configs/nemotron_h_moe) has 23 MoE layers with no token mixer
    and Mamba layers with no feed-forward block: only the 23 routers (2,688 x 128) are whole on every rank."""
    from quotacalc.inputs.resolve import load_arch

    config = Path(__file__).parent / "data" / "configs" / "nemotron_h_moe"
    arch, _ = load_arch(str(config))
    assert any(layer.mixer is None for layer in arch.layers)
    assert any(layer.feed_forward is None for layer in arch.layers)
    assert arch.replicated_params_by_group() == {ParamGroup.ROUTER: 23 * 2_688 * 128}
