"""What the shipped catalogs share: their YAML read through a pre-parsed twin, entries keyed by id and validated
where they are read, found by id or alias."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol, TypeVar

from pydantic import BaseModel, ValidationError

from quotacalc.errors import QuotacalcError, UsageError, close_names


class Named(Protocol):
    id: str
    aliases: tuple[str, ...]


Entry = TypeVar("Entry", bound=BaseModel)
Found = TypeVar("Found", bound=Named)


def preparsed_twin(path: Path) -> Path:
    """Where the pre-parsed JSON of a shipped YAML catalog lives (built by scripts/build_specs.py)."""
    return Path(__file__).resolve().parent / "specs" / "catalogs" / f"{path.parent.name}-{path.stem}.json"


def load_shipped_yaml(path: Path) -> object:
    """A shipped YAML catalog, parsed (from its pre-parsed twin or the cache when they hold its bytes)."""
    from quotacalc.cache import load_yaml_file_cached

    return load_yaml_file_cached(path, preparsed_twin(path))


def parse_entries(document: object, key: str, model: type[Entry], source: str) -> dict[str, Entry]:
    """The ``key`` mapping of a parsed catalog document, each entry validated with its id; errors name the entry
    and field."""
    if not isinstance(document, dict) or not isinstance(document.get(key), dict):
        raise QuotacalcError(f"expected a mapping with a '{key}' key", source=source)
    entries = {}
    for entry_id, entry in document[key].items():
        try:
            entries[entry_id] = model.model_validate({"id": entry_id, **(entry or {})})
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in (key, entry_id, *first["loc"]))
            raise QuotacalcError(first["msg"], source=source, field=field) from None
    return entries


def find_named(entries: dict[str, Found], name: str) -> Found | None:
    """The entry whose id or alias is ``name`` (case-insensitive), or None."""
    key = name.strip().lower()
    return next((entry for entry in entries.values() if key == entry.id or key in entry.aliases), None)


def get_named(entries: dict[str, Found], name: str, *, what: str, field: str, listing: str) -> Found:
    """The entry whose id or alias is ``name``; unknown, a one-line error suggesting close ids, else ``listing``."""
    found = find_named(entries, name)
    if found is not None:
        return found
    names = [*entries, *(alias for entry in entries.values() for alias in entry.aliases)]
    close = close_names(name.strip().lower(), names, n=3, cutoff=0.5)
    fix = f"did you mean {', '.join(close)}?" if close else listing
    raise UsageError(f"unknown {what} '{name}'", field=field, fix=fix)
