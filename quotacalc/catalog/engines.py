"""The engine catalog: what a serving engine changes in the engine model's defaults (``engines.yaml``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, ValidationError

from quotacalc.errors import QuotacalcError, UsageError, close_names

CATALOG_FILE = "engines.yaml"


class EngineDefaults(BaseModel):
    """The engine-model inputs a profile may set; None: the input's own default."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    step_overhead_s: NonNegativeFloat | None = None
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
        key = name.strip().lower()
        return next((engine for engine in self.engines.values() if key == engine.id or key in engine.aliases), None)

    def get(self, name: str) -> EngineProfile:
        """Find an engine by id or alias (case-insensitive), suggesting close ids when unknown."""
        engine = self.find(name)
        if engine is not None:
            return engine
        key = name.strip().lower()
        names = [*self.engines, *(alias for engine in self.engines.values() for alias in engine.aliases)]
        close = close_names(key, names, n=3, cutoff=0.5)
        fix = (
            f"did you mean {', '.join(close)}?" if close else f"one of {', '.join(self.engines)} ('quotacalc engines')"
        )
        raise UsageError(f"unknown engine '{name}'", field="engine", fix=fix)


def parse_engine_catalog(document: object, source: str) -> EngineCatalog:
    """Validate a parsed engine catalog; errors name the entry and field."""
    if not isinstance(document, dict) or not isinstance(document.get("engines"), dict):
        raise QuotacalcError("expected a mapping with an 'engines' key", source=source)
    engines = {}
    for engine_id, entry in document["engines"].items():
        try:
            engines[engine_id] = EngineProfile.model_validate({"id": engine_id, **(entry or {})})
        except ValidationError as error:
            first = error.errors()[0]
            field = ".".join(str(part) for part in ("engines", engine_id, *first["loc"]))
            raise QuotacalcError(first["msg"], source=source, field=field) from None
    return EngineCatalog(engines=engines)


@lru_cache(maxsize=1)
def load_engine_catalog() -> EngineCatalog:
    """The shipped engine catalog."""
    from quotacalc.cache import load_yaml_file_cached
    from quotacalc.catalog.gpus import preparsed_twin

    path = Path(__file__).with_name(CATALOG_FILE)
    return parse_engine_catalog(load_yaml_file_cached(path, preparsed_twin(path)), str(path))
