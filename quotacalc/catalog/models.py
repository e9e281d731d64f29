"""The shipped model configs (``models/`` in the repo, ``quotacalc/models`` in a wheel)."""

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict

INDEX_FILE = "index.yaml"


class ShippedModel(BaseModel):
    """A Hugging Face config.json that ships with quotacalc, and the hub ids that resolve to it."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    config_path: Path
    hf_ids: tuple[str, ...]


def shipped_models_dir() -> Path:
    """Where the shipped configs are: inside the package when installed, the repo's ``models/`` in a checkout."""
    package_dir = Path(__file__).resolve().parent.parent
    for candidate in (package_dir / "models", package_dir.parent / "models"):
        if (candidate / INDEX_FILE).is_file():
            return candidate
    raise FileNotFoundError(f"shipped models not found beside {package_dir}")


def shipped_specs_dir() -> Path:
    """Pre-resolved specs of the shipped models (``inputs.shipped_specs``), inside the package."""
    return Path(__file__).resolve().parent / "specs"


@lru_cache(maxsize=1)
def shipped_models() -> tuple[ShippedModel, ...]:
    """Every shipped model, in index order."""
    from quotacalc.catalog.entries import load_shipped_yaml

    folder = shipped_models_dir()
    index = load_shipped_yaml(folder / INDEX_FILE)
    return tuple(
        ShippedModel(name=name, config_path=folder / name / "config.json", hf_ids=tuple(ids or ()))
        for name, ids in index.items()
    )


def find_shipped(reference: str) -> ShippedModel | None:
    """A shipped model by folder name or hub id, case-insensitive."""
    key = reference.strip().lower()
    for model in shipped_models():
        if key == model.name.lower() or key in (hf_id.lower() for hf_id in model.hf_ids):
            return model
    return None
