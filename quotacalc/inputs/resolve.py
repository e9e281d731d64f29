"""Turn a validated ``Deployment`` into ``PricingInputs``: model architecture, GPU, dtypes, weight layout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from quotacalc.catalog.dtypes import Dtype, dtype_by_name
from quotacalc.catalog.gpus import load_gpu_catalog
from quotacalc.catalog.models import find_shipped
from quotacalc.core.arch import ModelArch
from quotacalc.core.deployment import Deployment
from quotacalc.core.price import PricingInputs
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.arch_checks import check_arch
from quotacalc.inputs.hf_arch import torch_dtype_name
from quotacalc.inputs.model_config import (
    ModelSource,
    ResolvedConfig,
    load_model_config,
    locate_model,
    read_config_bytes,
)
from quotacalc.inputs.quantization import checkpoint_layout, explicit_layout
from quotacalc.inputs.shipped_specs import load_spec, spec_arch

#: Architectures read in this process, by reference and the config's bytes: a command reads its model once, however
#: many checks ask for it (the measured pool's record, then the price).
_READ: dict[tuple[str, str, bytes], tuple[ModelArch, ResolvedConfig]] = {}
_READ_KEPT = 16


def load_arch(reference: str) -> tuple[ModelArch, ResolvedConfig]:
    """A model's architecture from a shipped name, hub id or path (shipped ones pre-resolved, no transformers)."""
    source = locate_model(reference)
    if not source.config_path:
        return _read_arch(reference, source)
    key = (reference, source.config_path, read_config_bytes(Path(source.config_path)))
    if key not in _READ:
        if len(_READ) >= _READ_KEPT:
            _READ.clear()
        _READ[key] = _read_arch(reference, source, key[2])
    return _READ[key]


def _read_arch(reference: str, source: ModelSource, data: bytes | None = None) -> tuple[ModelArch, ResolvedConfig]:
    shipped = find_shipped(reference) if source.shipped else None
    if shipped is not None and data is not None and (spec := load_spec(shipped, data)):
        return spec_arch(spec, source.name), ResolvedConfig(source=source, **spec["resolved"])
    from quotacalc.inputs.architectures import read_arch  # every family's reader: not needed for a shipped spec

    resolved = load_model_config(reference)
    config_path = str(resolved.source.config_path)
    try:
        arch = read_arch(resolved.config, name=resolved.source.name, source=config_path, given_keys=resolved.given_keys)
    except ValidationError as error:  # a layer spec refused a value the reader passed on
        first = error.errors()[0]
        field = ".".join(str(part) for part in first["loc"] if not isinstance(part, int))
        raise QuotacalcError(
            f"{first['msg']}, got {first.get('input')!r}", source=config_path, field=field or None
        ) from None
    except (TypeError, ArithmeticError, LookupError, AttributeError) as error:
        # A field of a type or shape no real config has, met where a reader did arithmetic on it.
        raise QuotacalcError(f"the config's fields do not fit together ({error})", source=config_path) from None
    check_arch(arch, config_path)
    return arch, resolved


def resolve(deployment: Deployment) -> PricingInputs:
    """Everything ``price`` needs, looked up and validated once. A measured pool recorded on another deployment
    is refused here too, for a library caller that builds a Deployment without a plan file."""
    from quotacalc.inputs.deployment import check_measured_pool

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
    from quotacalc.catalog.models import find_shipped

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


def config_state_dtype(config: dict[str, Any]) -> Dtype | None:
    """The recurrent state dtype a config asks for (``mamba_ssm_dtype``, at its top or in ``text_config``), which
    vLLM keeps unless --mamba-ssm-cache-dtype says otherwise (a Qwen3.5-35B-A3B log matches only with it)."""
    text = config.get("text_config")
    for section in (config, text if isinstance(text, dict) else {}):
        name = torch_dtype_name(section.get("mamba_ssm_dtype"))
        if name is not None:
            return dtype_by_name(name)
    return None
