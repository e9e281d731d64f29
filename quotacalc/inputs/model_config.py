"""Resolve a ``--model`` reference to its Hugging Face config, read through transformers' AutoConfig.

AutoConfig fills the fields a config.json leaves out with the config class's defaults. Importing
transformers costs about a second, so shipped models come pre-resolved (``inputs.shipped_specs``)
and every other resolved config is cached on disk, keyed by the config's bytes and the installed
transformers; only the first call on a config that is not shipped imports it.
"""

from __future__ import annotations

import json
import os
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from quotacalc.cache import cache_key, read_entry, write_entry
from quotacalc.catalog.models import find_shipped, shipped_models
from quotacalc.errors import QuotacalcError, UsageError, close_names

#: Bump when the cached document's layout changes.
CACHE_FORMAT = 3


class ModelSource(BaseModel):
    """Where a model's config came from."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    reference: str
    name: str
    config_path: str
    shipped: bool = False
    hf_id: str | None = None


class ResolvedConfig(BaseModel):
    """A model config as transformers sees it (class defaults filled in), with its source."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    source: ModelSource
    config_class: str
    transformers_version: str
    config: dict[str, Any]
    #: Keys the config.json itself states (dotted for sub-configs, canonical and alias names), as
    #: opposed to class defaults: sizes a file leaves out must not be guessed.
    given_keys: frozenset[str] = frozenset()


def locate_model(reference: str) -> ModelSource:
    """Turn what the user typed into a config.json on disk (or a hub id), without reading it."""
    path = Path(reference).expanduser()
    if path.is_dir():
        config_path = path / "config.json"
        if not config_path.is_file():
            raise QuotacalcError(
                "no config.json in this directory",
                source=str(path),
                field="model",
                fix="point --model at a model folder",
            )
        return ModelSource(reference=reference, name=path.resolve().name, config_path=str(config_path))
    if path.is_file():
        return ModelSource(reference=reference, name=path.resolve().parent.name, config_path=str(path))
    if shipped := find_shipped(reference):
        return ModelSource(
            reference=reference,
            name=shipped.name,
            config_path=str(shipped.config_path),
            shipped=True,
            hf_id=shipped.hf_ids[0] if shipped.hf_ids else None,
        )
    if reference.count("/") == 1 and not reference.startswith((".", "/", "~")):
        return ModelSource(reference=reference, name=reference.split("/")[1], config_path="", hf_id=reference)
    names = [model.name for model in shipped_models()]
    close = close_names(reference, names, n=3, cutoff=0.4) or close_names(
        reference.lower(), [name.lower() for name in names], n=3, cutoff=0.4
    )
    fix = f"did you mean {', '.join(close)}?" if close else "run 'quotacalc models', or give a path or a hub id"
    raise UsageError(f"unknown model '{reference}': not a shipped model, a path, or a hub id", field="model", fix=fix)


def _hub_reachable(endpoint: str, timeout_s: float = 3.0) -> bool:
    """One quick TCP connect, so an offline machine fails at once instead of after the hub client's retries."""
    import socket
    from urllib.parse import urlparse

    url = urlparse(endpoint)
    port = url.port or (443 if url.scheme == "https" else 80)
    try:
        with socket.create_connection((url.hostname or "", port), timeout=timeout_s):
            return True
    except OSError:
        return False


def _download_from_hub(source: ModelSource) -> Path:
    """config.json of a hub model: from the local Hugging Face cache when offline, else downloaded."""
    from huggingface_hub import constants, hf_hub_download

    online = not constants.HF_HUB_OFFLINE and _hub_reachable(constants.ENDPOINT)
    try:
        return Path(hf_hub_download(source.hf_id, "config.json", local_files_only=not online, etag_timeout=5))
    except Exception as error:
        reason = "offline, and not in the local Hugging Face cache" if not online else type(error).__name__
        raise QuotacalcError(
            f"cannot fetch config.json of '{source.hf_id}' from the Hugging Face hub ({reason})",
            field="model",
            fix="use a shipped model (quotacalc models) or a local directory with config.json",
        ) from None


def _transformers_stamp() -> str:
    """Identifies the installed transformers cheaply (no import), so an upgrade invalidates the cache."""
    spec = find_spec("transformers")
    if spec is None or spec.origin is None:
        raise QuotacalcError("transformers is not installed", field="model", fix="pip install transformers")
    return str(os.stat(spec.origin).st_mtime_ns)


def autoconfig_document(raw: dict[str, Any], source_name: str) -> dict[str, Any]:
    """A parsed config.json resolved through AutoConfig: the document the cache and shipped specs keep."""
    config, config_class, version, given = _autoconfig_to_dict(raw, source_name)
    return {"config_class": config_class, "transformers_version": version, "config": config, "given_keys": given}


def _autoconfig_to_dict(raw: dict[str, Any], source_name: str) -> tuple[dict[str, Any], str, str, list[str]]:
    os.environ.setdefault("TRANSFORMERS_NO_ADVISORY_WARNINGS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    import transformers
    from transformers import AutoConfig

    model_type = raw.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise QuotacalcError(
            "no model_type",
            source=source_name,
            field="model_type",
            fix="a Hugging Face config.json names its model_type",
        )
    fields = {key: value for key, value in raw.items() if key != "model_type"}
    try:
        config = AutoConfig.for_model(model_type, **fields)
    except ValueError as error:
        if "Unrecognized" in str(error) or "model_type" in str(error):
            raise QuotacalcError(
                f"model_type '{model_type}' is unknown to transformers {transformers.__version__}",
                source=source_name,
                field="model_type",
                fix="upgrade transformers, or check the config",
            ) from None
        raise QuotacalcError(str(error).splitlines()[0], source=source_name) from None
    except (TypeError, KeyError, AttributeError) as error:
        raise QuotacalcError(f"transformers rejects this config: {error}", source=source_name) from None
    return _resolved_dict(config), type(config).__name__, transformers.__version__, sorted(_given_keys(config, raw))


def _given_keys(config: Any, raw: dict[str, Any], prefix: str = "") -> set[str]:
    """Keys present in the raw file, under both their own and their canonical (attribute_map) names."""
    aliases = type(config).attribute_map
    given = set()
    for key, value in raw.items():
        given.update({prefix + key, prefix + aliases.get(key, key)})
        nested = getattr(config, key, None)
        if isinstance(value, dict) and hasattr(type(nested), "attribute_map"):
            given |= _given_keys(nested, value, f"{prefix}{key}.")
    return given


def _resolved_dict(config: Any) -> dict[str, Any]:
    """``to_dict()`` plus the alias names of ``attribute_map`` (``num_experts`` beside ``num_local_experts``)."""
    document = config.to_dict()
    for alias in type(config).attribute_map:
        if alias not in document:
            try:
                document[alias] = getattr(config, alias)
            except AttributeError:
                continue
    for key in list(document):
        nested = getattr(config, key, None)
        if hasattr(nested, "to_dict") and hasattr(type(nested), "attribute_map"):
            document[key] = _resolved_dict(nested)
    return document


def read_config_bytes(path: Path) -> bytes:
    """A config.json's bytes, with a one-line error when it cannot be read."""
    try:
        return path.read_bytes()
    except OSError as error:
        raise QuotacalcError(f"cannot read config: {error.strerror}", source=str(path), field="model") from None


def parse_config_json(data: bytes, path: Path) -> dict[str, Any]:
    """A config.json's object, with a one-line error when it is malformed."""
    try:
        raw = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        where = f" at line {error.lineno}, column {error.colno}" if isinstance(error, json.JSONDecodeError) else ""
        raise QuotacalcError(
            f"malformed config JSON{where}", source=str(path), fix="fix or replace the config.json"
        ) from None
    if not isinstance(raw, dict):
        raise QuotacalcError("config is not a JSON object", source=str(path))
    return raw


def load_model_config(reference: str) -> ResolvedConfig:
    """Resolve ``reference`` and read its config through AutoConfig (cached on disk)."""
    source = locate_model(reference)
    if not source.config_path:
        source = source.model_copy(update={"config_path": str(_download_from_hub(source))})
    path = Path(source.config_path)
    data = read_config_bytes(path)
    key = cache_key(data, f"config-{CACHE_FORMAT}", _transformers_stamp())
    cached = read_entry("configs", key)
    if isinstance(cached, dict):
        return ResolvedConfig(source=source, **cached)
    document = autoconfig_document(parse_config_json(data, path), str(path))
    write_entry("configs", key, document)
    return ResolvedConfig(source=source, **document)
