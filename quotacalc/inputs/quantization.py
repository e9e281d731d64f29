"""Read a checkpoint's ``quantization_config`` into a per-group weight layout.

Quantized checkpoints quantize the linear layers and keep embeddings, the LM head, norms and
routers in the checkpoint dtype, unless ``modules_to_not_convert``/``ignore`` say more.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from quotacalc.catalog.dtypes import Dtype, dtype_by_name
from quotacalc.core.arch import ParamGroup
from quotacalc.core.weights import ENGINE_VOCAB_BYTES_PER_PARAM, GroupStorage, WeightLayout, uniform_layout
from quotacalc.errors import QuotacalcError

#: Groups a weight-quantization method converts by default.
_LINEAR_GROUPS = (
    ParamGroup.ATTENTION,
    ParamGroup.MLP,
    ParamGroup.ROUTED_EXPERTS,
    ParamGroup.SHARED_EXPERTS,
    ParamGroup.MAMBA,
)

#: Substrings of module patterns (``modules_to_not_convert``) and the group they name.
_MODULE_HINTS: tuple[tuple[str, ParamGroup], ...] = (
    ("shared_expert", ParamGroup.SHARED_EXPERTS),
    ("router", ParamGroup.ROUTER),
    ("mlp.gate", ParamGroup.ROUTER),
    ("experts", ParamGroup.ROUTED_EXPERTS),
    ("self_attn", ParamGroup.ATTENTION),
    ("attn", ParamGroup.ATTENTION),
    ("embed", ParamGroup.EMBEDDING),
    ("lm_head", ParamGroup.LM_HEAD),
    ("mamba", ParamGroup.MAMBA),
    ("mixer", ParamGroup.MAMBA),
    ("vision", ParamGroup.VISION),
    ("multi_modal", ParamGroup.VISION),
    ("mlp", ParamGroup.MLP),
)


def _groups_named(patterns: list[str]) -> set[ParamGroup]:
    named = set()
    for pattern in patterns:
        for hint, group in _MODULE_HINTS:
            if hint in pattern:
                named.add(group)
                break
    return named


_FIELD = "quantization_config"


def _bad(source: str, key: str, problem: str, fix: str | None = None) -> QuotacalcError:
    return QuotacalcError(problem, source=source, field=f"{_FIELD}.{key}" if key else _FIELD, fix=fix)


def _int_field(config: dict[str, Any], keys: tuple[str, ...], default: int, source: str) -> int:
    """The first of ``keys`` the config states, as a strict integer (no booleans, floats or strings)."""
    for key in keys:
        value = config.get(key)
        if value is None:
            continue
        if isinstance(value, bool) or not isinstance(value, int):
            raise _bad(source, key, f"must be an integer, got {value!r}")
        return value
    return default


def _group_size(config: dict[str, Any], source: str, per_channel_inputs: int) -> tuple[int, str]:
    """Weights per scale group, and how to say it; ``-1`` is per-channel: one scale per output row."""
    group = _int_field(config, ("group_size", "q_group_size"), 128, source)
    if group == -1:
        return per_channel_inputs, f"per channel ({per_channel_inputs} inputs per scale)"
    if group <= 0:
        raise _bad(source, "group_size", f"must be a positive integer or -1 (per channel), got {group}")
    return group, f"per {group}"


class QuantizedDtype(NamedTuple):
    """What a quantization config stores its weights as, and whether the matmuls still take 16-bit activations."""

    dtype_name: str
    scale_bytes_per_element: float
    description: str
    weight_only: bool


def _quantized_dtype(config: dict[str, Any], source: str, per_channel_inputs: int) -> QuantizedDtype:
    """The stored dtype, its scale bytes per element, a description and whether it is weight-only.

    Weight-only: the matmuls take 16-bit activations (the weights are dequantized in the kernel), so they run at the
    checkpoint's 16-bit rate, not the stored format's: GPTQ/AWQ at any width (Marlin), bitsandbytes, and
    compressed-tensors whose ``input_activations`` is null (W8A16, W4A16)."""
    dtype, scale, description = _quantized_format(config, source, per_channel_inputs)
    method = str(config.get("quant_method", "")).lower()
    if method in ("compressed-tensors", "compressed_tensors"):
        # A group states input_activations: null for weight-only schemes (W8A16, W4A16); a config that leaves the
        # key out says nothing, and is read as its weights' format throughout.
        group = _compressed_tensors_group(config, source)
        weight_only = "input_activations" in group and group["input_activations"] is None
    else:
        weight_only = method in ("awq", "gptq", "autoround", "auto-round", "bitsandbytes")
    return QuantizedDtype(
        dtype, scale, description + (", weight-only (16-bit activations)" if weight_only else ""), weight_only
    )


class StoredFormat(NamedTuple):
    """How a quantization config stores its weights."""

    dtype: str
    scale_bytes_per_element: float
    description: str


def _quantized_format(config: dict[str, Any], source: str, per_channel_inputs: int) -> StoredFormat:
    """The dtype name, scale bytes per element and description of a quantization config's stored weights."""
    raw_method = config.get("quant_method", "")
    if not isinstance(raw_method, str):
        raise _bad(source, "quant_method", f"must be a string, got {raw_method!r}")
    method = raw_method.lower()
    if method in ("fp8", "fbgemm_fp8", "finegrained_fp8"):
        block = config.get("weight_block_size")
        if block:
            if (
                not isinstance(block, list)
                or len(block) != 2
                or any(isinstance(side, bool) or not isinstance(side, int) or side <= 0 for side in block)
            ):
                raise _bad(source, "weight_block_size", f"must be two positive integers [rows, columns], got {block!r}")
            # One float32 scale per block of weights.
            scale = 4 / (block[0] * block[1])
            return StoredFormat("fp8", scale, f"fp8, one fp32 scale per {block[0]}x{block[1]} block")
        return StoredFormat("fp8", 0.0, "fp8, per-tensor scales")
    if method == "mxfp4":
        return StoredFormat("mxfp4", 0.0, "mxfp4 (OCP MX, e8m0 scale per 32)")
    if method in ("awq", "gptq", "autoround", "auto-round"):
        bits = _int_field(config, ("bits", "w_bit"), 4, source)
        group, per = _group_size(config, source, per_channel_inputs)
        if bits not in (4, 8):
            raise _bad(source, "bits", f"{bits}-bit {method} is not priced yet", "4 and 8 bits are")
        # An fp16 scale and a zero point packed at the weights' width per group: vLLM's GPTQ and AWQ methods
        # allocate qzeros [groups, outputs / (32 / bits)] int32 whether or not the checkpoint is symmetric.
        return StoredFormat(
            f"int{bits}", (2 + bits / 8) / group, f"{method} int{bits}, fp16 scale + {bits}-bit zero {per}"
        )
    if method in ("bitsandbytes",):
        if config.get("load_in_4bit"):
            # bitsandbytes quantizes 4-bit weights in blocks of 64 with an fp32 absmax each; double quantization
            # stores those absmax in 8 bits with one fp32 scale per 256 blocks (bitsandbytes functional.quantize_4bit).
            if config.get("bnb_4bit_use_double_quant"):
                return StoredFormat(
                    "int4", 1 / 64 + 4 / (64 * 256), "bitsandbytes 4-bit, 8-bit absmax per 64 (double quantized)"
                )
            return StoredFormat("int4", 4 / 64, "bitsandbytes 4-bit, fp32 absmax per 64")
        # LLM.int8(): an fp32 scale per output row (its inputs: per_channel_inputs weights).
        return StoredFormat(
            "int8", 4 / per_channel_inputs, f"bitsandbytes 8-bit, fp32 scale per row ({per_channel_inputs} inputs)"
        )
    if method in ("compressed-tensors", "compressed_tensors"):
        weights = _compressed_tensors_weights(config, source)
        num_bits = weights.get("num_bits")
        is_float = weights.get("type") == "float"
        if num_bits == 8 and not isinstance(num_bits, bool):
            return StoredFormat("fp8" if is_float else "int8", 0.0, "compressed-tensors 8-bit")
        if num_bits == 4 and not isinstance(num_bits, bool):
            if not is_float and weights.get("strategy") in ("group", "channel"):
                return StoredFormat("int4", *_compressed_int4_scales(weights, source, per_channel_inputs))
            return StoredFormat("nvfp4" if is_float else "int4", 0.0, "compressed-tensors 4-bit")
    raise _bad(
        source,
        "quant_method",
        f"quantization method '{method or '?'}' is not understood",
        fix="pass --weight-dtype to price it anyway",
    )


def _compressed_int4_scales(weights: dict[str, Any], source: str, per_channel_inputs: int) -> tuple[float, str]:
    """Scale bytes per weight of a grouped or per-channel compressed-tensors int4 layer: one 16-bit scale per
    group (the checkpoint's dtype: Kimi K2.5 stores ``weight_scale`` [rows, inputs / 32] in bf16), and a packed
    4-bit zero point per group when not symmetric."""
    if weights.get("strategy") == "channel":
        group, per = per_channel_inputs, f"per channel ({per_channel_inputs} inputs per scale)"
    else:
        group = _int_field(weights, ("group_size",), 128, source)
        if group <= 0:
            raise _bad(source, "group_size", f"must be a positive integer, got {group}")
        per = f"per {group}"
    if weights.get("symmetric", True):
        return 2 / group, f"compressed-tensors int4, 16-bit scale {per}"
    return (2 + 0.5) / group, f"compressed-tensors int4, 16-bit scale + 4-bit zero {per}"


def _compressed_tensors_group(config: dict[str, Any], source: str) -> dict[str, Any]:
    """The first config group that quantizes weights (its ``weights`` and ``input_activations``), or {}."""
    groups = config.get("config_groups") or {}
    if not isinstance(groups, dict):
        raise _bad(source, "config_groups", f"must be an object of named groups, got {type(groups).__name__}")
    for name, group in groups.items():
        if group is not None and not isinstance(group, dict):
            raise _bad(source, f"config_groups.{name}", "must be an object")
        weights = (group or {}).get("weights")
        if weights is not None and not isinstance(weights, dict):
            raise _bad(source, f"config_groups.{name}.weights", "must be an object")
        if weights:
            return group or {}
    return {}


def _compressed_tensors_weights(config: dict[str, Any], source: str) -> dict[str, Any]:
    return _compressed_tensors_group(config, source).get("weights") or {}


def _module_patterns(quantization: dict[str, Any], source: str) -> list[str]:
    patterns: list[str] = []
    for key in ("modules_to_not_convert", "ignore"):
        value = quantization.get(key) or []
        if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
            raise _bad(source, key, "must be a list of module names")
        patterns += value
    return patterns


def checkpoint_layout(
    quantization: dict[str, Any] | None,
    checkpoint_dtype: Dtype,
    *,
    source: str,
    gpu_supports,
    per_channel_inputs: int = 4096,
) -> WeightLayout:
    """The layout the checkpoint ships in: quantized linear layers if it says so, else its dtype throughout.

    ``per_channel_inputs`` is the inputs one per-channel scale covers (``group_size: -1``): the hidden
    size, the input width of every projection but the MLP's down projection (whose wider rows need fewer
    scales, so this errs high)."""
    if not quantization:
        return uniform_layout(
            checkpoint_dtype.name,
            checkpoint_dtype.bytes_per_element,
            _compute(checkpoint_dtype, gpu_supports),
            f"checkpoint dtype {checkpoint_dtype.name}",
        )
    if not isinstance(quantization, dict):
        raise _bad(source, "", f"must be an object, got {type(quantization).__name__}")
    dtype_name, scale_bytes, description, weight_only = _quantized_dtype(quantization, source, per_channel_inputs)
    quantized = dtype_by_name(dtype_name)
    keep = _groups_named(_module_patterns(quantization, source))
    groups = {}
    for group in ParamGroup:
        if group in _LINEAR_GROUPS and group not in keep:
            groups[group] = GroupStorage(
                dtype=quantized.name, bytes_per_param=quantized.bytes_per_element + scale_bytes
            )
        else:
            groups[group] = GroupStorage(
                dtype=checkpoint_dtype.name, bytes_per_param=checkpoint_dtype.bytes_per_element
            )
    expert_dtype = quantization.get("expert_dtype")
    if expert_dtype == "fp4" and ParamGroup.ROUTED_EXPERTS not in keep:
        # DeepSeek V4's routed experts ship in MXFP4 beside fp8 linears (transformers folds the config's
        # expert_dtype in here; vLLM's DeepseekV4FP8Config runs them with Mxfp4MoEMethod, models/deepseek_v4.py).
        mxfp4 = dtype_by_name("mxfp4")
        groups[ParamGroup.ROUTED_EXPERTS] = GroupStorage(dtype=mxfp4.name, bytes_per_param=mxfp4.bytes_per_element)
        description += "; routed experts mxfp4 (expert_dtype fp4)"
    elif expert_dtype not in (None, "fp8"):
        raise _bad(source, "expert_dtype", f"is {expert_dtype!r}: vLLM reads fp4 or fp8", "fp4 or fp8, as published")
    return WeightLayout(
        groups=groups,
        compute_dtype=_compute(checkpoint_dtype if weight_only else quantized, gpu_supports),
        source=f"checkpoint quantization_config: {description}",
    )


def explicit_layout(dtype: Dtype, *, gpu_supports) -> WeightLayout:
    """Every parameter in ``dtype`` (``--weight-dtype``), with the group scales the format's usual checkpoints
    carry (int4: an fp16 scale and a 4-bit zero per 128 weights, as AWQ/GPTQ ship)."""
    quantized = dtype.bytes_per_element < ENGINE_VOCAB_BYTES_PER_PARAM
    scales = dtype.flag_scale_bytes_per_element
    source = f"--weight-dtype {dtype.name}"
    if scales:
        source += f" (+{scales:.5f} B of group scales a weight)"
    return uniform_layout(
        dtype.name,
        dtype.bytes_per_element + scales,
        _compute(dtype, gpu_supports),
        source,
        engine_vocab_bytes_per_param=ENGINE_VOCAB_BYTES_PER_PARAM if quantized else None,
    )


def _compute(dtype: Dtype, gpu_supports) -> str:
    return dtype.compute_dtype if gpu_supports(dtype.compute_dtype) else dtype.fallback_compute_dtype
