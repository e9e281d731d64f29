"""Turn a validated ``Deployment`` into ``PricingInputs``: model architecture, GPU, dtypes, weight layout."""

from __future__ import annotations

from typing import Any

from quotacalc.catalog.dtypes import dtype_by_name
from quotacalc.catalog.gpus import load_gpu_catalog
from quotacalc.catalog.models import find_shipped
from quotacalc.core.deployment import Deployment
from quotacalc.core.pricing_inputs import PricingInputs
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.measured_pool import check_measured_pool
from quotacalc.inputs.model_arch import config_state_dtype, load_arch
from quotacalc.inputs.quantization import checkpoint_layout, explicit_layout


def resolve(deployment: Deployment) -> PricingInputs:
    """Everything ``price`` needs, looked up and validated once. A measured pool recorded on another deployment
    is refused here too, for a library caller that builds a Deployment without a plan file."""
    if not isinstance(deployment, Deployment):
        raise TypeError(f"resolve() takes a quotacalc.Deployment, got {type(deployment).__name__}")
    check_measured_pool(deployment, source=None)
    catalog = load_gpu_catalog()
    gpu = catalog.get(deployment.gpu)
    arch, resolved = load_arch(deployment.model)
    native = dtype_by_name(arch.checkpoint_dtype)
    if deployment.weight_dtype is not None:
        weights = explicit_layout(
            dtype_by_name(deployment.weight_dtype, field="weight_dtype"), gpu_supports=gpu.supports
        )
    else:
        quantization = resolved.config.get("quantization_config")
        weights = checkpoint_layout(
            quantization,
            native,
            source=resolved.source.config_path,
            gpu_supports=gpu.supports,
            per_channel_inputs=arch.hidden_size,
        )
    if deployment.kv_dtype in (None, "auto"):
        # The checkpoint's dtype, unless the engine keeps a layer kind's cache in one dtype only (DeepSeek V4: fp8).
        served = {name for layer in arch.layers if layer.mixer and (name := layer.mixer.served_kv_dtype())}
        kv_dtype = dtype_by_name(served.pop(), field="kv_dtype") if len(served) == 1 else native
    else:
        kv_dtype = dtype_by_name(deployment.kv_dtype, field="kv_dtype")
    for problem in dict.fromkeys(layer.mixer.kv_dtype_problem(kv_dtype.name) for layer in arch.layers if layer.mixer):
        if problem:
            raise QuotacalcError(
                f"{arch.name}: {problem}",
                field="kv_dtype",
                fix="leave --kv-dtype out for the dtype the engine keeps, or give one the message names",
            )
    state_dtype = (
        config_state_dtype(resolved.config) or native
        if deployment.state_dtype in (None, "auto")
        else dtype_by_name(deployment.state_dtype, field="state_dtype")
    )
    return PricingInputs(
        deployment=deployment,
        arch=arch,
        gpu=gpu,
        weights=weights,
        kv_dtype=kv_dtype,
        state_dtype=state_dtype,
        mfu_scale=catalog.mfu_scale(gpu, weights.compute_dtype),
        checkpoint_quantization=_quant_method(resolved.config),
        hub_id=_hub_id(deployment.model),
        local_model=not resolved.source.shipped and resolved.source.hf_id is None,
    )


def _hub_id(reference: str) -> str | None:
    """A shipped config's first hub id where ``reference`` is its folder name (not a hub id or a path)."""

    shipped = find_shipped(reference) if "/" not in reference else None
    return shipped.hf_ids[0] if shipped is not None and shipped.hf_ids else None


def _quant_method(config: dict[str, Any]) -> str | None:
    """The checkpoint's quantization method (quantization_config.quant_method, at the top or in text_config)."""
    text = config.get("text_config")
    for section in (config, text if isinstance(text, dict) else {}):
        quantization = section.get("quantization_config")
        if isinstance(quantization, dict):
            method = quantization.get("quant_method")
            return str(method) if method else "unknown"
    return None
