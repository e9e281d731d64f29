"""Read a checkpoint's ``quantization_config`` into a per-group weight layout.

Quantized checkpoints quantize the linear layers and keep embeddings, the LM head, norms and
routers in the checkpoint dtype, unless ``modules_to_not_convert``/``ignore`` say more.
"""

from __future__ import annotations

from typing import Any

from quotacalc.catalog.dtypes import Dtype, dtype_by_name
from quotacalc.core.arch import ParamGroup
from quotacalc.core.weights import GroupStorage, WeightLayout, uniform_layout
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


def _quantized_dtype(config: dict[str, Any], source: str) -> tuple[str, float, str]:
    """(dtype name, scale bytes per element, description) for a quantization config."""
    method = str(config.get("quant_method", "")).lower()
    if method in ("fp8", "fbgemm_fp8", "finegrained_fp8"):
        block = config.get("weight_block_size")
        if block:
            # One float32 scale per block of weights.
            scale = 4 / (block[0] * block[1])
            return "fp8", scale, f"fp8, one fp32 scale per {block[0]}x{block[1]} block"
        return "fp8", 0.0, "fp8, per-tensor scales"
    if method == "mxfp4":
        return "mxfp4", 0.0, "mxfp4 (OCP MX, e8m0 scale per 32)"
    if method in ("awq", "gptq", "autoround", "auto-round"):
        bits = config.get("bits", config.get("w_bit", 4))
        group = config.get("group_size", config.get("q_group_size", 128)) or 128
        if bits == 8:
            return "int8", 2 / group, f"{method} int8, fp16 scale per {group}"
        if bits != 4:
            raise QuotacalcError(
                f"{bits}-bit {method} is not priced yet", source=source, field="quantization_config.bits"
            )
        # An fp16 scale and a packed 4-bit zero point per group.
        return "int4", (2 + 0.5) / group, f"{method} int4, fp16 scale + 4-bit zero per {group}"
    if method in ("bitsandbytes",):
        if config.get("load_in_4bit"):
            return "int4", 0.0, "bitsandbytes 4-bit"
        return "int8", 0.0, "bitsandbytes 8-bit"
    if method in ("compressed-tensors", "compressed_tensors"):
        bits = _compressed_tensors_bits(config)
        if bits == 8:
            return "fp8" if _compressed_tensors_is_float(config) else "int8", 0.0, "compressed-tensors 8-bit"
        if bits == 4:
            return ("nvfp4" if _compressed_tensors_is_float(config) else "int4"), 0.0, "compressed-tensors 4-bit"
    raise QuotacalcError(
        f"quantization method '{method or '?'}' is not understood",
        source=source,
        field="quantization_config.quant_method",
        fix="pass --weight-dtype to price it anyway",
    )


def _compressed_tensors_weights(config: dict[str, Any]) -> dict[str, Any]:
    for group in (config.get("config_groups") or {}).values():
        weights = (group or {}).get("weights")
        if weights:
            return weights
    return {}


def _compressed_tensors_bits(config: dict[str, Any]) -> int | None:
    return _compressed_tensors_weights(config).get("num_bits")


def _compressed_tensors_is_float(config: dict[str, Any]) -> bool:
    return _compressed_tensors_weights(config).get("type") == "float"


def checkpoint_layout(
    quantization: dict[str, Any] | None, checkpoint_dtype: Dtype, *, source: str, gpu_supports
) -> WeightLayout:
    """The layout the checkpoint ships in: quantized linear layers if it says so, else its dtype throughout."""
    if not quantization:
        return uniform_layout(
            checkpoint_dtype.name,
            checkpoint_dtype.bytes_per_element,
            _compute(checkpoint_dtype, gpu_supports),
            f"checkpoint dtype {checkpoint_dtype.name}",
        )
    dtype_name, scale_bytes, description = _quantized_dtype(quantization, source)
    quantized = dtype_by_name(dtype_name)
    keep = _groups_named(
        list(quantization.get("modules_to_not_convert") or []) + list(quantization.get("ignore") or [])
    )
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
    return WeightLayout(
        groups=groups,
        compute_dtype=_compute(quantized, gpu_supports),
        source=f"checkpoint quantization_config: {description}",
    )


def explicit_layout(dtype: Dtype, *, gpu_supports) -> WeightLayout:
    return uniform_layout(
        dtype.name, dtype.bytes_per_element, _compute(dtype, gpu_supports), f"--weight-dtype {dtype.name}"
    )


def _compute(dtype: Dtype, gpu_supports) -> str:
    return dtype.compute_dtype if gpu_supports(dtype.compute_dtype) else dtype.fallback_compute_dtype
