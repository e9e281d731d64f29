"""The engine catalog: what a serving engine changes in the engine model's defaults (``engines.yaml``)."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, NonNegativeFloat, PositiveFloat, PositiveInt, field_validator

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


class TokenBudgetStep(BaseModel):
    """One row of an engine's default token budget per step: ``tokens`` on a GPU with less than ``below_gib`` GiB of
    memory (the last row, without a bound, on every larger GPU)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    below_gib: PositiveFloat | None = None
    tokens: PositiveInt


class EngineProfile(BaseModel):
    """One serving engine: the defaults it changes, and where they come from."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: str
    name: str
    aliases: tuple[str, ...] = ()
    defaults: EngineDefaults
    #: The engine's own default token budget per step (its chunk size) by the GPU's memory, where it is not vLLM's;
    #: None: vLLM's rule (core/memory.py).
    max_num_batched_tokens: tuple[TokenBudgetStep, ...] | None = None
    source: str

    @field_validator("max_num_batched_tokens")
    @classmethod
    def _steps_cover_every_gpu(cls, steps: tuple[TokenBudgetStep, ...] | None) -> tuple[TokenBudgetStep, ...] | None:
        if steps is None:
            return None
        bounds = [step.below_gib for step in steps]
        if not steps or bounds[-1] is not None or None in bounds[:-1]:
            raise ValueError("give rows of below_gib and tokens, the last without below_gib (every larger GPU)")
        if bounds[:-1] != sorted(set(bounds[:-1])):
            raise ValueError("below_gib must grow from row to row")
        return steps

    def default_max_num_batched_tokens(self, gpu_memory_bytes: float) -> int | None:
        """The engine's own token budget on a GPU of that memory, or None where it keeps vLLM's."""
        if self.max_num_batched_tokens is None:
            return None
        gib = gpu_memory_bytes / 2**30
        return next(s.tokens for s in self.max_num_batched_tokens if s.below_gib is None or gib < s.below_gib)


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
