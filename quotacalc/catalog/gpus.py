"""The GPU catalog: vendor peak figures, one data file (``gpus.yaml``), one source per figure."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt

from quotacalc.catalog.entries import get_named, load_shipped_yaml, parse_entries

CATALOG_FILE = "gpus.yaml"


class GpuSources(BaseModel):
    """Where each figure of a GPU entry comes from."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    memory_bytes: str
    memory_bandwidth_bytes_per_s: str
    dense_tflops: str
    interconnect_bandwidth_bytes_per_s: str
    allreduce_latency_s: str


class GpuSpec(BaseModel):
    """One accelerator's peak figures. Efficiencies (MFU, MBU) are deployment inputs, not GPU facts."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    id: str
    name: str
    vendor: str
    aliases: tuple[str, ...] = ()
    #: HBM capacity as the device reports it to the runtime (not the marketing figure).
    memory_bytes: PositiveInt
    memory_bandwidth_bytes_per_s: PositiveFloat
    #: Dense (no 2:4 sparsity) tensor-core peak per compute dtype, in TFLOPS.
    dense_tflops: dict[str, PositiveFloat] = Field(min_length=1)
    #: GPU-to-GPU bandwidth one way (NVLink, else PCIe): what a tensor-parallel all-reduce moves.
    interconnect_bandwidth_bytes_per_s: PositiveFloat
    #: One small all-reduce inside an engine step, launch and synchronisation included.
    allreduce_latency_s: PositiveFloat
    sources: GpuSources

    def peak_flops_per_s(self, compute_dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype; raises if the GPU has no tensor cores for it."""
        return self.dense_tflops[compute_dtype] * 1e12

    def supports(self, compute_dtype: str) -> bool:
        return compute_dtype in self.dense_tflops


class GpuCatalog(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    gpus: dict[str, GpuSpec]

    def get(self, name: str) -> GpuSpec:
        """Find a GPU by id or alias (case-insensitive), suggesting close ids when unknown."""
        return get_named(self.gpus, name, what="GPU", field="gpu", listing="run 'quotacalc gpus' for the catalog")


def parse_catalog(document: object, source: str) -> GpuCatalog:
    """Validate a parsed catalog document; errors name the entry and field."""
    return GpuCatalog(gpus=parse_entries(document, "gpus", GpuSpec, source))


@lru_cache(maxsize=1)
def load_gpu_catalog() -> GpuCatalog:
    """The shipped GPU catalog."""
    path = Path(__file__).with_name(CATALOG_FILE)
    return parse_catalog(load_shipped_yaml(path), str(path))
