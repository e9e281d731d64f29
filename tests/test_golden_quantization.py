"""Every branch of the quantization reader, with bytes per parameter worked out from each format's spec.

Sources: AWQ and GPTQ store one fp16 scale per group and a zero point packed at the weights' width
(vLLM's qzeros, int32-packed: 4 or 8 bits) per group; DeepSeek-V3's fp8 checkpoint one fp32 scale per 128x128 block; OCP MX fp4 one 8-bit
scale per 32 values; NVIDIA fp4 one fp8 scale per 16; compressed-tensors names ``num_bits`` and
``type`` ("int" or "float") in each config group's ``weights``.
"""

from __future__ import annotations

import pytest

from quotacalc.catalog.dtypes import DTYPES
from quotacalc.core.arch import ParamGroup
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.quantization import checkpoint_layout, explicit_layout

BF16 = DTYPES["bf16"]
LINEAR = (
    ParamGroup.ATTENTION,
    ParamGroup.MLP,
    ParamGroup.ROUTED_EXPERTS,
    ParamGroup.SHARED_EXPERTS,
    ParamGroup.MAMBA,
)
KEPT = (ParamGroup.EMBEDDING, ParamGroup.LM_HEAD, ParamGroup.NORM, ParamGroup.ROUTER, ParamGroup.VISION)


def hopper(dtype: str) -> bool:
    return dtype in ("bf16", "fp16", "fp8", "int8", "tf32")


def blackwell(dtype: str) -> bool:
    return hopper(dtype) or dtype == "fp4"


def layout(config, gpu=hopper):
    return checkpoint_layout(config, BF16, source="config.json", gpu_supports=gpu)


def linear_bytes(result) -> set[float]:
    return {result.storage(group).bytes_per_param for group in LINEAR}


def assert_rest_in_bf16(result):
    for group in KEPT:
        assert result.storage(group).dtype == "bf16" and result.storage(group).bytes_per_param == 2


@pytest.mark.parametrize(
    ("config", "dtype", "bytes_per_param", "compute"),
    [
        # fp8 with 128x128 blocks: 1 B + 4 B / 16,384 weights.
        ({"quant_method": "fp8", "weight_block_size": [128, 128]}, "fp8", 1 + 4 / 16384, "fp8"),
        # fp8 blocks need not be square: 1 B + 4 B / (64 x 32).
        ({"quant_method": "finegrained_fp8", "weight_block_size": [64, 32]}, "fp8", 1 + 4 / 2048, "fp8"),
        ({"quant_method": "fbgemm_fp8"}, "fp8", 1, "fp8"),
        # mxfp4: 4 bits + an 8-bit scale per 32 = 4.25 bits; no fp4 tensor cores on Hopper.
        ({"quant_method": "mxfp4"}, "mxfp4", 4.25 / 8, "bf16"),
        # AWQ int4, group 128: 0.5 B + (2 B scale + 0.5 B zero) / 128; weight-only, bf16 matmuls.
        ({"quant_method": "awq", "bits": 4, "group_size": 128}, "int4", 0.5 + 2.5 / 128, "bf16"),
        # AWQ's own spelling (w_bit, q_group_size), group 64.
        ({"quant_method": "awq", "w_bit": 4, "q_group_size": 64}, "int4", 0.5 + 2.5 / 64, "bf16"),
        # GPTQ int8, group 128: 1 B + (2 B fp16 scale + 1 B zero, qzeros packed four to an int32) / 128; weight-only (Marlin
        # dequantizes in the kernel, activations stay 16-bit), so the matmuls run at the bf16 rate, not int8's.
        ({"quant_method": "gptq", "bits": 8, "group_size": 128}, "int8", 1 + 3 / 128, "bf16"),
        # GPTQ int8, group 32: 1 B + 3 B / 32.
        ({"quant_method": "gptq", "bits": 8, "group_size": 32}, "int8", 1 + 3 / 32, "bf16"),
        # No group size stated: 128 (the AWQ/GPTQ default).
        ({"quant_method": "gptq", "bits": 4}, "int4", 0.5 + 2.5 / 128, "bf16"),
        ({"quant_method": "autoround", "bits": 4, "group_size": 128}, "int4", 0.5 + 2.5 / 128, "bf16"),
        ({"quant_method": "auto-round", "bits": 4, "group_size": 64}, "int4", 0.5 + 2.5 / 64, "bf16"),
        # Nothing stated: 4 bits in groups of 128.
        ({"quant_method": "awq"}, "int4", 0.5 + 2.5 / 128, "bf16"),
        # AWQ's spelling of 8 bits.
        ({"quant_method": "awq", "w_bit": 8, "q_group_size": 64}, "int8", 1 + 3 / 64, "bf16"),
        # bitsandbytes NF4/FP4: blocks of 64 weights, an fp32 absmax each: 0.5 B + 4 B / 64.
        ({"quant_method": "bitsandbytes", "load_in_4bit": True}, "int4", 0.5 + 4 / 64, "bf16"),
        # Double quantized: the absmax in 8 bits (1 B / 64) and an fp32 scale per 256 blocks (4 B / 16,384).
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True, "bnb_4bit_use_double_quant": True},
            "int4",
            0.5 + 1 / 64 + 4 / 16384,
            "bf16",
        ),
        # LLM.int8(): 1 B + an fp32 scale per row of 4,096 inputs (layout()'s per_channel_inputs); 16-bit matmuls.
        ({"quant_method": "bitsandbytes", "load_in_8bit": True}, "int8", 1 + 4 / 4096, "bf16"),
        # compressed-tensors W8A16 (no input_activations): weight-only; W8A8 (int8 activations): int8 tensor cores.
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int"}, "input_activations": None}},
            },
            "int8",
            1,
            "bf16",
        ),
        (
            {
                "quant_method": "compressed-tensors",
                "config_groups": {
                    "g": {"weights": {"num_bits": 8, "type": "int"}, "input_activations": {"num_bits": 8}}
                },
            },
            "int8",
            1,
            "int8",
        ),
    ],
)
def test_quantized_linear_layers(config, dtype, bytes_per_param, compute):
    result = layout(config)
    assert {result.storage(group).dtype for group in LINEAR} == {dtype}
    (stored,) = linear_bytes(result)
    assert stored == pytest.approx(bytes_per_param, rel=1e-12)
    assert result.compute_dtype == compute
    assert_rest_in_bf16(result)
    assert result.source.startswith("checkpoint quantization_config: ")


@pytest.mark.parametrize(
    ("config", "description"),
    [
        ({"quant_method": "fp8"}, "fp8, per-tensor scales"),
        ({"quant_method": "mxfp4"}, "mxfp4 (OCP MX, e8m0 scale per 32)"),
        (
            {"quant_method": "bitsandbytes", "load_in_4bit": True},
            "bitsandbytes 4-bit, fp32 absmax per 64, weight-only (16-bit activations)",
        ),
        (
            {"quant_method": "bitsandbytes", "load_in_8bit": True},
            "bitsandbytes 8-bit, fp32 scale per row (4096 inputs), weight-only (16-bit activations)",
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 8, "type": "int"}}}},
            "compressed-tensors 8-bit",
        ),
        (
            {"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}},
            "compressed-tensors 4-bit",
        ),
    ],
)
def test_each_format_is_described(config, description):
    assert layout(config, gpu=blackwell).source == f"checkpoint quantization_config: {description}"


def test_descriptions_name_the_format():
    assert layout({"quant_method": "fp8", "weight_block_size": [64, 32]}).source == (
        "checkpoint quantization_config: fp8, one fp32 scale per 64x32 block"
    )
    assert layout({"quant_method": "gptq", "bits": 8, "group_size": 32}).source == (
        "checkpoint quantization_config: gptq int8, fp16 scale + 8-bit zero per 32, weight-only (16-bit activations)"
    )
    assert layout({"quant_method": "awq", "bits": 4, "group_size": 64}).source == (
        "checkpoint quantization_config: awq int4, fp16 scale + 4-bit zero per 64, weight-only (16-bit activations)"
    )


def compressed(num_bits: int, kind: str) -> dict:
    return {
        "quant_method": "compressed-tensors",
        "config_groups": {"group_0": {"targets": ["Linear"], "weights": {"num_bits": num_bits, "type": kind}}},
    }


def test_compressed_tensors_fp4_is_not_int4():
    # NVFP4 (type float, 4 bits): 4 bits + one 8-bit scale per 16 = 4.5 bits, fp4 tensor cores on Blackwell.
    fp4 = layout(compressed(4, "float"), gpu=blackwell)
    assert {fp4.storage(g).dtype for g in LINEAR} == {"nvfp4"}
    assert linear_bytes(fp4) == {4.5 / 8}
    assert fp4.compute_dtype == "fp4"
    # W4A16 int (type int, 4 bits): 0.5 B, weight-only.
    int4 = layout(compressed(4, "int"), gpu=blackwell)
    assert {int4.storage(g).dtype for g in LINEAR} == {"int4"}
    assert linear_bytes(int4) == {0.5}
    assert int4.compute_dtype == "bf16"


def test_compressed_tensors_eight_bits():
    fp8 = layout(compressed(8, "float"))
    assert {fp8.storage(g).dtype for g in LINEAR} == {"fp8"} and fp8.compute_dtype == "fp8"
    int8 = layout(compressed(8, "int"))
    assert {int8.storage(g).dtype for g in LINEAR} == {"int8"} and int8.compute_dtype == "int8"
    assert linear_bytes(fp8) == linear_bytes(int8) == {1}


def test_compressed_tensors_reads_the_first_group_with_weights():
    config = compressed(4, "float")
    config["config_groups"] = {"empty": {"targets": []}, **config["config_groups"]}
    assert layout(config, gpu=blackwell).compute_dtype == "fp4"
    config["quant_method"] = "compressed_tensors"
    assert layout(config, gpu=blackwell).storage(ParamGroup.MLP).dtype == "nvfp4"


@pytest.mark.parametrize(
    "config",
    [
        compressed(3, "int"),
        {"quant_method": "compressed-tensors", "config_groups": {}},
        {"quant_method": "hqq"},
        {"bits": 4},
    ],
)
def test_unknown_methods_name_the_field(config):
    with pytest.raises(QuotacalcError) as error:
        layout(config)
    assert error.value.field == "quantization_config.quant_method"
    assert error.value.source == "config.json"
    assert error.value.fix == "pass --weight-dtype to price it anyway"


def test_a_config_without_a_method_says_so():
    with pytest.raises(QuotacalcError) as error:
        layout({"bits": 4})
    assert error.value.problem == "quantization method '?' is not understood"
    with pytest.raises(QuotacalcError) as error:
        layout({"quant_method": "HQQ"})
    assert error.value.problem == "quantization method 'hqq' is not understood"


def test_unpriced_bit_width_names_the_bits():
    with pytest.raises(QuotacalcError, match="3-bit gptq is not priced yet") as error:
        layout({"quant_method": "gptq", "bits": 3, "group_size": 128})
    assert error.value.field == "quantization_config.bits"


def test_modules_kept_in_the_checkpoint_dtype():
    # gpt-oss keeps attention, router, embeddings and head in bf16; only the experts are mxfp4.
    config = {
        "quant_method": "mxfp4",
        "modules_to_not_convert": [
            "model.layers.*.self_attn",
            "model.layers.*.mlp.router",
            "model.embed_tokens",
            "lm_head",
        ],
    }
    result = layout(config)
    assert result.storage(ParamGroup.ROUTED_EXPERTS).dtype == "mxfp4"
    assert result.storage(ParamGroup.ATTENTION).dtype == "bf16"
    assert result.storage(ParamGroup.SHARED_EXPERTS).dtype == "mxfp4"
    # compressed-tensors spells it ``ignore``; each hint names its group.
    for pattern, group in [
        ("model.layers.0.mlp.shared_expert", ParamGroup.SHARED_EXPERTS),
        ("re:.*mlp.gate$", ParamGroup.ROUTER),
        ("model.layers.0.mlp.experts", ParamGroup.ROUTED_EXPERTS),
        ("model.layers.0.attn", ParamGroup.ATTENTION),
        ("model.layers.0.mamba", ParamGroup.MAMBA),
        ("backbone.layers.0.mixer", ParamGroup.MAMBA),
        ("model.layers.0.mlp", ParamGroup.MLP),
    ]:
        kept = layout({**compressed(8, "float"), "ignore": [pattern]})
        assert kept.storage(group).dtype == "bf16", pattern
        others = [g for g in LINEAR if g != group]
        assert all(kept.storage(g).dtype == "fp8" for g in others), pattern


def test_no_quantization_is_the_checkpoint_dtype():
    result = checkpoint_layout(None, DTYPES["fp16"], source="c", gpu_supports=hopper)
    assert {result.storage(g).dtype for g in ParamGroup} == {"fp16"}
    assert result.compute_dtype == "fp16" and result.source == "checkpoint dtype fp16"
    assert checkpoint_layout({}, BF16, source="c", gpu_supports=hopper).compute_dtype == "bf16"


def test_explicit_dtype_and_its_fallback():
    fp8 = explicit_layout(DTYPES["fp8"], gpu_supports=hopper)
    assert fp8.compute_dtype == "fp8" and fp8.source == "--weight-dtype fp8"
    assert {fp8.storage(g).bytes_per_param for g in ParamGroup} == {1}
    # An A100 has no fp8 tensor cores: fp8 weights run as bf16 matmuls (weight-only).
    ampere = explicit_layout(DTYPES["fp8"], gpu_supports=lambda d: d in ("bf16", "fp16", "int8", "tf32"))
    assert ampere.compute_dtype == "bf16"


# Malformed configs: each error names the file, the field under quantization_config, and what was
# wrong, in one line (``source: field: problem (fix)``, quotacalc.errors.QuotacalcError.one_line).


def error_line(config) -> str:
    with pytest.raises(QuotacalcError) as error:
        layout(config)
    return str(error.value)


@pytest.mark.parametrize(
    ("config", "line"),
    [
        # A group size is a positive integer or -1; 0 would divide by zero, a string or a float is a typo.
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 0},
            "config.json: quantization_config.group_size: must be a positive integer or -1 (per channel), got 0",
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": -2},
            "config.json: quantization_config.group_size: must be a positive integer or -1 (per channel), got -2",
        ),
        # AWQ's own spelling is reported under the canonical name group_size.
        (
            {"quant_method": "awq", "q_group_size": 0},
            "config.json: quantization_config.group_size: must be a positive integer or -1 (per channel), got 0",
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": "128"},
            "config.json: quantization_config.group_size: must be an integer, got '128'",
        ),
        (
            {"quant_method": "gptq", "bits": 4, "group_size": 1.5},
            "config.json: quantization_config.group_size: must be an integer, got 1.5",
        ),
        # The field named is the key the file used.
        (
            {"quant_method": "awq", "q_group_size": "64"},
            "config.json: quantization_config.q_group_size: must be an integer, got '64'",
        ),
        (
            {"quant_method": "awq", "bits": "4"},
            "config.json: quantization_config.bits: must be an integer, got '4'",
        ),
        # true is an int to Python, not a bit width.
        (
            {"quant_method": "gptq", "bits": True},
            "config.json: quantization_config.bits: must be an integer, got True",
        ),
        (
            {"quant_method": "awq", "w_bit": 4.0},
            "config.json: quantization_config.w_bit: must be an integer, got 4.0",
        ),
        (
            {"quant_method": "gptq", "bits": 3, "group_size": 128},
            "config.json: quantization_config.bits: 3-bit gptq is not priced yet (4 and 8 bits are)",
        ),
        (
            {"quant_method": 5},
            "config.json: quantization_config.quant_method: must be a string, got 5",
        ),
        (
            {"quant_method": "zip"},
            "config.json: quantization_config.quant_method: quantization method 'zip' is not understood "
            "(pass --weight-dtype to price it anyway)",
        ),
    ],
)
def test_malformed_numbers_are_named(config, line):
    assert error_line(config) == line


BLOCK_PROBLEM = (
    "config.json: quantization_config.weight_block_size: must be two positive integers [rows, columns], got "
)


@pytest.mark.parametrize(
    "block",
    [
        [0, 128],  # a zero side would divide by zero
        [128, 0],
        [-128, 128],
        [128],  # one side only
        [128, 128, 128],  # three sides
        5,  # not a list
        "128x128",
        ["a", "b"],
        [True, 128],  # true is not a side length
        [128.0, 128],
    ],
)
def test_malformed_fp8_blocks_are_named(block):
    assert error_line({"quant_method": "fp8", "weight_block_size": block}) == BLOCK_PROBLEM + repr(block)


def test_smallest_groups_and_blocks_are_accepted():
    # A group of 1 weight: 0.5 B + (2 B scale + 0.5 B zero) / 1 = 3 B per parameter.
    (stored,) = linear_bytes(layout({"quant_method": "gptq", "bits": 4, "group_size": 1}))
    assert stored == 3.0
    # A 1x128 block: 1 B + 4 B / 128.
    (stored,) = linear_bytes(layout({"quant_method": "fp8", "weight_block_size": [1, 128]}))
    assert stored == 1 + 4 / 128


def test_per_channel_scales_cover_the_inputs_of_a_row():
    # group_size -1: one scale per output row of per_channel_inputs weights; 0.5 B + 2.5 B / 4096 at 4 bits.
    result = layout({"quant_method": "gptq", "bits": 4, "group_size": -1})
    (stored,) = linear_bytes(result)
    assert stored == 0.5 + 2.5 / 4096
    assert result.source == (
        "checkpoint quantization_config: gptq int4, fp16 scale + 4-bit zero per channel (4096 inputs per scale), "
        "weight-only (16-bit activations)"
    )
    # At 8 bits, a 5120-wide model: 1 B + (2 B scale + 1 B zero) / 5120.
    wide = checkpoint_layout(
        {"quant_method": "gptq", "bits": 8, "group_size": -1},
        BF16,
        source="config.json",
        gpu_supports=hopper,
        per_channel_inputs=5120,
    )
    (stored,) = linear_bytes(wide)
    assert stored == 1 + 3 / 5120
    assert wide.source == (
        "checkpoint quantization_config: gptq int8, fp16 scale + 8-bit zero per channel (5120 inputs per scale), "
        "weight-only (16-bit activations)"
    )


@pytest.mark.parametrize(
    ("config_groups", "line"),
    [
        (
            [1],
            "config.json: quantization_config.config_groups: must be an object of named groups, got list",
        ),
        ("int4", "config.json: quantization_config.config_groups: must be an object of named groups, got str"),
        ({"group_0": 5}, "config.json: quantization_config.config_groups.group_0: must be an object"),
        (
            {"group_0": {"weights": [4]}},
            "config.json: quantization_config.config_groups.group_0.weights: must be an object",
        ),
    ],
)
def test_malformed_compressed_tensors_groups_are_named(config_groups, line):
    assert error_line({"quant_method": "compressed-tensors", "config_groups": config_groups}) == line


def test_an_empty_compressed_tensors_group_is_skipped():
    # A group stated as null says nothing; the next group's weights are read (4-bit int: 0.5 B).
    config = compressed(4, "int")
    config["config_groups"] = {"unused": None, **config["config_groups"]}
    (stored,) = linear_bytes(layout(config))
    assert stored == 0.5


@pytest.mark.parametrize(
    ("key", "value"),
    [
        ("modules_to_not_convert", "lm_head"),  # a string, not a list of one
        ("modules_to_not_convert", [1]),
        ("ignore", ["lm_head", None]),
        ("ignore", {"lm_head": True}),
    ],
)
def test_malformed_module_lists_are_named(key, value):
    assert error_line({"quant_method": "awq", key: value}) == (
        f"config.json: quantization_config.{key}: must be a list of module names"
    )


@pytest.mark.parametrize("config", ["gptq", ["gptq"], 4])
def test_a_quantization_config_that_is_not_an_object_is_named(config):
    with pytest.raises(QuotacalcError) as error:
        layout(config)
    assert error.value.field == "quantization_config"
    assert str(error.value) == f"config.json: quantization_config: must be an object, got {type(config).__name__}"


@pytest.mark.parametrize(
    ("weights", "bytes_per_param", "description"),
    [
        # Kimi K2.5's experts: int4 packed 8 to an int32 (0.5 B) and a bf16 scale per 32 (weight_scale
        # [7,168, 64] for a [7,168, 2,048] down projection): 0.5 + 2 / 32 = 0.5625 B.
        (
            {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 32, "symmetric": True},
            0.5625,
            "compressed-tensors int4, 16-bit scale per 32",
        ),
        # Asymmetric: a packed 4-bit zero point per group too, 0.5 + 2.5 / 128.
        (
            {"num_bits": 4, "type": "int", "strategy": "group", "group_size": 128, "symmetric": False},
            0.5 + 2.5 / 128,
            "compressed-tensors int4, 16-bit scale + 4-bit zero per 128",
        ),
        # Per channel: one scale per output row of 4,096 inputs.
        (
            {"num_bits": 4, "type": "int", "strategy": "channel"},
            0.5 + 2 / 4096,
            "compressed-tensors int4, 16-bit scale per channel (4096 inputs per scale)",
        ),
    ],
)
def test_compressed_tensors_int4_scales_are_counted(weights, bytes_per_param, description):
    result = layout({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": weights}}})
    assert linear_bytes(result) == {bytes_per_param}
    assert result.source == f"checkpoint quantization_config: {description}"
    assert_rest_in_bf16(result)


def test_a_float32_checkpoint_is_priced_as_vllm_serves_it_in_bfloat16():
    """vLLM's dtype 'auto' takes a float32 checkpoint down to bfloat16 (config/model.py _resolve_auto_dtype): OLMo 7B's
    config says float32, so its weights are 2 B a parameter and its KV 32 layers x 2 x 32 heads x 128 x 2 B = 524,288 B
    a token; --weight-dtype fp32 --kv-dtype fp32 still prices float32 (twice both)."""
    from pathlib import Path

    from quotacalc.core.deployment import Deployment
    from quotacalc.core.price import price
    from quotacalc.inputs.resolve import resolve

    olmo = str(Path(__file__).parent / "data" / "configs" / "olmo_7b")
    served = price(resolve(Deployment(model=olmo, gpu="h100-sxm", context=1_000)))
    assert served.inputs.weights.compute_dtype == "bf16"
    assert served.kv_bytes_per_token == 32 * 2 * 32 * 128 * 2 == 524_288
    assert served.weight_bytes == 2 * served.total_params
    assert any("float32" in note for note in served.inputs.arch.notes)
    as_fp32 = price(
        resolve(Deployment(model=olmo, gpu="h100-sxm", context=1_000, weight_dtype="fp32", kv_dtype="fp32"))
    )
    assert as_fp32.weight_bytes == 4 * served.total_params and as_fp32.kv_bytes_per_token == 2 * 524_288


@pytest.mark.parametrize(
    ("name", "bytes_per_param"),
    [
        # A flag names no group, so int4 takes AutoAWQ's and GPTQ's default: 0.5 B + (2 B scale + 0.5 B zero) / 128.
        ("int4", 0.5 + 2.5 / 128),
        # Formats whose scales are part of the format, or per tensor/channel (negligible), add nothing.
        ("fp8", 1.0),
        ("int8", 1.0),
        ("mxfp4", 4.25 / 8),
        ("nvfp4", 4.5 / 8),
        ("bf16", 2.0),
    ],
)
def test_weight_dtype_flag_counts_the_formats_usual_scales(name, bytes_per_param):
    result = explicit_layout(DTYPES[name], gpu_supports=blackwell)
    assert {result.storage(group).bytes_per_param for group in ParamGroup} == {bytes_per_param}


def test_weight_dtype_int4_flag_matches_a_default_awq_checkpoint():
    """The flag and the checkpoint path agree on a linear layer, so a plan priced at --weight-dtype int4 is
    what serving the AWQ/GPTQ build of the model costs (bar its 16-bit embeddings, which the flag quantizes)."""
    flag = explicit_layout(DTYPES["int4"], gpu_supports=hopper)
    checkpoint = layout({"quant_method": "awq", "bits": 4})
    assert flag.storage(ParamGroup.MLP) == checkpoint.storage(ParamGroup.MLP)
    assert "group scales" in flag.source
