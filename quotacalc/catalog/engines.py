"""The engine catalog: what a serving engine changes in the engine model's defaults (``engines.yaml``)."""

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
    reserve_base_gib: NonNegativeFloat | None = None
    reserve_per_tp_doubling_gib: NonNegativeFloat | None = None

    def given(self) -> dict[str, float | bool]:
        """The inputs this profile sets."""
        return {name: value for name, value in self.model_dump().items() if value is not None}


class TokenBudgetStep(BaseModel):
    """One row of an engine's default token budget per step: ``tokens`` on a GPU with less than ``below_gib`` GiB of
    memory (the last row, without a bound, on every larger GPU)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    below_gib: PositiveFloat | None = None
    tokens: PositiveInt


class GraphBatchStep(BaseModel):
    """One row of an engine's default largest CUDA-graph batch: on a GPU with less than ``below_gib`` GiB (the last
    row, without a bound, on every larger GPU), ``below_tp_4`` sequences at TP 1-2 and ``from_tp_4`` at TP 4 and up."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    below_gib: PositiveFloat | None = None
    below_tp_4: PositiveInt
    from_tp_4: PositiveInt


class StaticMemoryFraction(BaseModel):
    """An engine that sizes its KV pool from a static memory fraction (SGLang's mem_fraction_static): weights and
    KV get fraction × the GPU's memory, and activations and CUDA graphs live outside it. Its default fraction is
    (memory − reserved) / memory, rounded to 3 decimals, with reserved in MiB = base + per_batched_token × max(token
    budget, min_batched_tokens) + per_graph_sequence × largest CUDA-graph batch + per_tp_rank × TP, at least
    ``floor_mib`` on GPUs above ``floor_above_gib``."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    base_mib: NonNegativeFloat
    per_batched_token_mib: NonNegativeFloat
    min_batched_tokens: PositiveInt
    per_graph_sequence_mib: NonNegativeFloat
    per_tp_rank_mib: NonNegativeFloat
    floor_mib: NonNegativeFloat
    floor_above_gib: PositiveFloat
    cuda_graph_max_bs: tuple[GraphBatchStep, ...]

    @field_validator("cuda_graph_max_bs")
    @classmethod
    def _steps_cover_every_gpu(cls, steps: tuple[GraphBatchStep, ...]) -> tuple[GraphBatchStep, ...]:
        _check_memory_rows([step.below_gib for step in steps])
        return steps

    def graph_batch(self, gpu_memory_bytes: float, tp: int) -> int:
        """The largest CUDA-graph batch the engine captures by default on a GPU of that memory at that TP."""
        step = _row_for(self.cuda_graph_max_bs, gpu_memory_bytes)
        return step.below_tp_4 if tp < 4 else step.from_tp_4

    def reserved_mib(self, gpu_memory_bytes: float, tp: int, batched_tokens: int) -> float:
        """The memory the default fraction leaves outside weights and KV, MiB."""
        reserved = (
            self.base_mib
            + self.per_batched_token_mib * max(batched_tokens, self.min_batched_tokens)
            + self.per_graph_sequence_mib * self.graph_batch(gpu_memory_bytes, tp)
            + self.per_tp_rank_mib * tp
        )
        if gpu_memory_bytes / 2**30 > self.floor_above_gib:
            reserved = max(reserved, self.floor_mib)
        return reserved

    def default_fraction(self, gpu_memory_bytes: float, tp: int, batched_tokens: int) -> float:
        """The engine's default static memory fraction on this GPU, TP and token budget."""
        memory_mib = gpu_memory_bytes / 2**20
        return round((memory_mib - self.reserved_mib(gpu_memory_bytes, tp, batched_tokens)) / memory_mib, 3)


def _check_memory_rows(bounds: list[float | None]) -> None:
    if not bounds or bounds[-1] is not None or None in bounds[:-1]:
        raise ValueError("give rows of below_gib, the last without below_gib (every larger GPU)")
    if bounds[:-1] != sorted(set(bounds[:-1])):
        raise ValueError("below_gib must grow from row to row")


def _row_for(rows, gpu_memory_bytes: float):
    gib = gpu_memory_bytes / 2**30
    return next(row for row in rows if row.below_gib is None or gib < row.below_gib)


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
    #: How the engine sizes its KV pool where it is not vLLM's way (memory_utilization × HBM − weights − the
    #: profiling run's peak): SGLang's static fraction. None: vLLM's.
    static_memory_fraction: StaticMemoryFraction | None = None
    source: str

    @field_validator("max_num_batched_tokens")
    @classmethod
    def _steps_cover_every_gpu(cls, steps: tuple[TokenBudgetStep, ...] | None) -> tuple[TokenBudgetStep, ...] | None:
        if steps is not None:
            _check_memory_rows([step.below_gib for step in steps])
        return steps

    def default_max_num_batched_tokens(self, gpu_memory_bytes: float) -> int | None:
        """The engine's own token budget on a GPU of that memory, or None where it keeps vLLM's."""
        if self.max_num_batched_tokens is None:
            return None
        return _row_for(self.max_num_batched_tokens, gpu_memory_bytes).tokens


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
