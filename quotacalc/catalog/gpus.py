"""The GPU catalog: vendor peak figures, one data file (``gpus.yaml``), one source per figure."""

from functools import lru_cache
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, PositiveFloat, PositiveInt, model_validator

from quotacalc.catalog.entries import get_named, load_shipped_yaml, parse_entries
from quotacalc.errors import QuotacalcError

CATALOG_FILE = "gpus.yaml"


class GpuSources(BaseModel):
    """Where each figure of a GPU entry comes from."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    memory_bytes: str
    memory_bandwidth_bytes_per_s: str
    dense_tflops: str
    interconnect_bandwidth_bytes_per_s: str
    allreduce_latency_s: str
    matmul_efficiency: str | None = None


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
    #: Per compute dtype, the share of the dense peak the best matmul reaches (measured; absent: unknown).
    matmul_efficiency: dict[str, float] = {}
    sources: GpuSources

    @model_validator(mode="after")
    def _matmul_efficiency(self) -> "GpuSpec":
        for dtype, share in self.matmul_efficiency.items():
            if not 0 < share <= 1:
                raise ValueError(f"matmul_efficiency.{dtype} must be a share of the peak in (0, 1], got {share}")
            if dtype not in self.dense_tflops:
                raise ValueError(f"matmul_efficiency.{dtype}: the GPU has no dense_tflops for {dtype}")
        if self.matmul_efficiency and self.sources.matmul_efficiency is None:
            raise ValueError("matmul_efficiency needs sources.matmul_efficiency")
        return self

    def peak_flops_per_s(self, compute_dtype: str) -> float:
        """Dense peak FLOP/s for a compute dtype; raises if the GPU has no tensor cores for it."""
        return self.dense_tflops[compute_dtype] * 1e12

    def supports(self, compute_dtype: str) -> bool:
        return compute_dtype in self.dense_tflops


class MfuReference(BaseModel):
    """The GPU and compute dtype on which an MFU is stated (docs/method.md's worked example runs there)."""

    model_config = ConfigDict(defer_build=True, frozen=True, extra="forbid")

    gpu: str
    dtype: str


class GpuCatalog(BaseModel):
    model_config = ConfigDict(defer_build=True, frozen=True)

    gpus: dict[str, GpuSpec]
    mfu_reference: MfuReference

    def reference_matmul_efficiency(self) -> float:
        """The reference GPU's matmul efficiency at the reference dtype."""
        return self.gpus[self.mfu_reference.gpu].matmul_efficiency[self.mfu_reference.dtype]

    def mfu_scale(self, gpu: GpuSpec, compute_dtype: str) -> float:
        """What an MFU stated on the reference becomes on ``gpu`` at ``compute_dtype``: the ratio of their
        matmul efficiencies (1 where the GPU's is unknown)."""
        share = gpu.matmul_efficiency.get(compute_dtype)
        return 1.0 if share is None else share / self.reference_matmul_efficiency()

    def get(self, name: str) -> GpuSpec:
        """Find a GPU by id or alias (case-insensitive), suggesting close ids when unknown."""
        return get_named(self.gpus, name, what="GPU", field="gpu", listing="run 'quotacalc gpus' for the catalog")


def parse_catalog(document: object, source: str) -> GpuCatalog:
    """Validate a parsed catalog document; errors name the entry and field."""
    gpus = parse_entries(document, "gpus", GpuSpec, source)
    reference = document.get("mfu_reference") if isinstance(document, dict) else None
    fix = "name the GPU id and dtype whose matmul_efficiency an MFU is stated against"
    if not isinstance(reference, dict):
        raise QuotacalcError("missing or not a mapping", source=source, field="mfu_reference", fix=fix)
    try:
        mfu_reference = MfuReference(**reference)
    except (TypeError, ValueError) as error:
        raise QuotacalcError(
            f"must hold gpu and dtype ({error.__class__.__name__})", source=source, field="mfu_reference", fix=fix
        ) from None
    spec = gpus.get(mfu_reference.gpu)
    if spec is None or mfu_reference.dtype not in spec.matmul_efficiency:
        raise QuotacalcError(
            f"{mfu_reference.gpu} has no matmul_efficiency for {mfu_reference.dtype}",
            source=source,
            field="mfu_reference",
            fix=fix,
        )
    return GpuCatalog(gpus=gpus, mfu_reference=mfu_reference)


@lru_cache(maxsize=1)
def load_gpu_catalog() -> GpuCatalog:
    """The shipped GPU catalog."""
    path = Path(__file__).with_name(CATALOG_FILE)
    return parse_catalog(load_shipped_yaml(path), str(path))
