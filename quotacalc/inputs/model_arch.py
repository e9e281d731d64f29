"""A model's architecture and resolved config, from a shipped name, a hub id or a path: read once per process."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import ValidationError

from quotacalc.catalog.dtypes import Dtype, dtype_by_name, torch_dtype_name
from quotacalc.catalog.models import find_shipped
from quotacalc.core.arch import ModelArch
from quotacalc.errors import QuotacalcError
from quotacalc.inputs.model_config import (
    ModelSource,
    ResolvedConfig,
    load_model_config,
    locate_model,
    read_config_bytes,
)
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
    from quotacalc.inputs.arch_checks import check_arch

    check_arch(arch, config_path)
    return arch, resolved


def config_state_dtype(config: dict[str, Any]) -> Dtype | None:
    """The recurrent state dtype a config asks for (``mamba_ssm_dtype``, at its top or in ``text_config``), which
    vLLM keeps unless --mamba-ssm-cache-dtype says otherwise (a Qwen3.5-35B-A3B log matches only with it)."""
    text = config.get("text_config")
    for section in (config, text if isinstance(text, dict) else {}):
        name = torch_dtype_name(section.get("mamba_ssm_dtype"))
        if name is not None:
            return dtype_by_name(name)
    return None
