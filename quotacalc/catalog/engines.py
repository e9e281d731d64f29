"""The engine catalog: what a serving engine changes in the engine model's defaults (``engines.yaml``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, NonNegativeFloat

from quotacalc.catalog.entries import find_named, get_named, load_shipped_yaml, parse_entries

CATALOG_FILE = "engines.yaml"


class EngineDefaults(BaseModel):
    """The engine-model inputs a profile may set; None: the input's own default."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    step_overhead_s: NonNegativeFloat | None = None
    layer_overhead_s: NonNegativeFloat | None = None
    sequence_overhead_s: NonNegativeFloat | None = None
    request_overhead_s: NonNegativeFloat | None = None
    moe_slot_overhead_s: NonNegativeFloat | None = None
    prefill_layer_overhead_s: NonNegativeFloat | None = None
    mixed_prefill: bool | None = None

    def given(self) -> dict[str, float | bool]:
        """The inputs this profile sets."""
        return {name: value for name, value in self.model_dump().items() if value is not None}


class EngineProfile(BaseModel):
    """One serving engine: the defaults it changes, and where they come from."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: str
    name: str
    aliases: tuple[str, ...] = ()
    defaults: EngineDefaults
    source: str


class EngineCatalog(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    engines: dict[str, EngineProfile]

    def find(self, name: str) -> EngineProfile | None:
        """The engine whose id or alias is ``name`` (case-insensitive), or None."""
        return find_named(self.engines, name)

    def get(self, name: str) -> EngineProfile:
        """Find an engine by id or alias (case-insensitive), suggesting close ids when unknown."""
        listing = f"one of {', '.join(self.engines)} ('quotacalc engines')"
        return get_named(self.engines, name, what="engine", field="engine", listing=listing)


def parse_engine_catalog(document: object, source: str) -> EngineCatalog:
    """Validate a parsed engine catalog; errors name the entry and field."""
    return EngineCatalog(engines=parse_entries(document, "engines", EngineProfile, source))


@lru_cache(maxsize=1)
def load_engine_catalog() -> EngineCatalog:
    """The shipped engine catalog."""
    path = Path(__file__).with_name(CATALOG_FILE)
    return parse_engine_catalog(load_shipped_yaml(path), str(path))
