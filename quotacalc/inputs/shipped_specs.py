"""Pre-resolved specs of the shipped models, so that no call on a shipped model imports transformers.

A spec (``quotacalc/catalog/specs/<model>.json``) is what resolving the shipped ``config.json``
through AutoConfig and the family reader gives: the resolved config document (as the on-disk cache
keeps it) and the ``ModelArch``. It names the SHA-256 of the config it was built from; a spec whose
config has changed since is ignored (the slow path runs), and ``tests/test_shipped_specs.py``
rebuilds every spec and fails on any drift. Rebuild with ``python scripts/build_specs.py``.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from quotacalc.catalog.models import ShippedModel, shipped_specs_dir
from quotacalc.core.arch import ModelArch

#: Bump when the spec document's layout changes (old specs are then ignored until rebuilt).
SPEC_FORMAT = 1


def spec_path(model: ShippedModel) -> Path:
    return shipped_specs_dir() / f"{model.name}.json"


def config_digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def build_spec_document(model: ShippedModel) -> dict[str, Any]:
    """Resolve a shipped config through AutoConfig (imports transformers) into its spec document."""
    from quotacalc.inputs.architectures import read_arch
    from quotacalc.inputs.model_config import autoconfig_document, parse_config_json, read_config_bytes

    data = read_config_bytes(model.config_path)
    document = autoconfig_document(parse_config_json(data, model.config_path), str(model.config_path))
    arch = read_arch(
        document["config"],
        name=model.name,
        source=str(model.config_path),
        given_keys=frozenset(document["given_keys"]),
    )
    return {
        "spec_format": SPEC_FORMAT,
        "model": model.name,
        "config_sha256": config_digest(data),
        "resolved": document,
        "arch": arch.model_dump(mode="json"),
    }


def shipped_yaml_files() -> list[Path]:
    """The YAML catalogs that ship with a pre-parsed JSON twin."""
    from quotacalc.catalog import engines, gpus
    from quotacalc.catalog.models import INDEX_FILE, shipped_models_dir

    return [
        Path(gpus.__file__).with_name(gpus.CATALOG_FILE),
        Path(engines.__file__).with_name(engines.CATALOG_FILE),
        shipped_models_dir() / INDEX_FILE,
    ]


def build_twin_document(path: Path) -> dict[str, Any]:
    """A shipped YAML catalog, parsed by the strict loader, keyed by its bytes (imports PyYAML)."""
    from quotacalc.cache import yaml_cache_key
    from quotacalc.inputs.yaml_strict import load_yaml_text

    data = path.read_bytes()
    return {"key": yaml_cache_key(data), "document": load_yaml_text(data.decode("utf-8"), source=str(path))}


def spec_text(document: dict[str, Any]) -> str:
    """The file text of a spec: sorted keys, so a rebuild that changes nothing changes no byte."""
    return json.dumps(document, indent=1, sort_keys=True) + "\n"


def twin_text(document: dict[str, Any]) -> str:
    """The file text of a catalog's twin: keys in the YAML's order (the models index is ordered)."""
    return json.dumps(document, indent=1) + "\n"


def load_spec(model: ShippedModel, config_bytes: bytes) -> dict[str, Any] | None:
    """The shipped spec of ``model`` when it was built from exactly these config bytes, else None."""
    try:
        document = json.loads(spec_path(model).read_text(encoding="utf-8"))
    except (OSError, ValueError, FileNotFoundError):
        return None
    if (
        not isinstance(document, dict)
        or document.get("spec_format") != SPEC_FORMAT
        or document.get("config_sha256") != config_digest(config_bytes)
    ):
        return None
    return document


def spec_arch(document: dict[str, Any], name: str) -> ModelArch:
    """The spec's architecture, under the name the caller resolved."""
    arch = ModelArch.model_validate(document["arch"])
    return arch if arch.name == name else arch.model_copy(update={"name": name})
