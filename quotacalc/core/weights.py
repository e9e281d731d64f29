"""How a model's weights are stored: bytes per parameter for each parameter group."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict

from quotacalc.catalog.kernels import MXFP4_MOE_PADDING
from quotacalc.core.arch import ModelArch, ParamGroup

if TYPE_CHECKING:
    from quotacalc.catalog.gpus import GpuSpec
    from quotacalc.core.deployment import Deployment


class GroupStorage(BaseModel):
    """Storage of one parameter group: its dtype, and bytes per parameter including any scales."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    dtype: str
    bytes_per_param: float


class WeightLayout(BaseModel):
    """Per-group storage of a checkpoint (or a uniform ``--weight-dtype``), and the dtype its matmuls run in."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    groups: dict[ParamGroup, GroupStorage]
    #: Dtype of the tensor-core math for the bulk of the parameters (before any GPU fallback).
    compute_dtype: str
    #: Where the layout came from, for --explain.
    source: str
    #: Bytes per parameter an engine runs the vocabulary matrices (embedding table, LM head) in, where that
    #: differs from their stored dtype above: an explicit quantized --weight-dtype stores every parameter in it
    #: (docs/method.md's simplification, which its worked example's weights and KV pool rest on), but engines
    #: leave both unquantized (None: as stored). Only the engine's decode read uses it (engine_read).
    engine_vocab_bytes_per_param: float | None = None

    def storage(self, group: ParamGroup) -> GroupStorage:
        return self.groups[group]

    def weight_bytes(self, params_by_group: dict[ParamGroup, int]) -> float:
        """Bytes of a set of parameters, group by group."""
        return sum(count * self.groups[group].bytes_per_param for group, count in params_by_group.items())

    def describe(self, params_by_group: dict[ParamGroup, int]) -> str:
        """Short label: the one dtype, or the main dtype with its share of parameters and the rest."""
        params_by_dtype: dict[str, int] = {}
        for group, count in params_by_group.items():
            if count:
                dtype = self.groups[group].dtype
                params_by_dtype[dtype] = params_by_dtype.get(dtype, 0) + count
        ranked = sorted(params_by_dtype.items(), key=lambda item: -item[1])
        if len(ranked) == 1:
            return ranked[0][0]
        main, main_count = ranked[0]
        share = main_count / sum(params_by_dtype.values())
        return f"{main} ({share:.1%} of params), {'/'.join(dtype for dtype, _ in ranked[1:])} rest"


def uniform_layout(
    dtype: str,
    bytes_per_param: float,
    compute_dtype: str,
    source: str,
    engine_vocab_bytes_per_param: float | None = None,
) -> WeightLayout:
    """Every parameter in one dtype (the method's simplification for an explicit ``--weight-dtype``)."""
    storage = GroupStorage(dtype=dtype, bytes_per_param=bytes_per_param)
    return WeightLayout(
        groups={group: storage for group in ParamGroup},
        compute_dtype=compute_dtype,
        source=source,
        engine_vocab_bytes_per_param=engine_vocab_bytes_per_param,
    )


#: Bytes per parameter of the embedding table and LM head in an engine serving a quantized --weight-dtype:
#: 16-bit. vLLM's quantization methods (fp8, int8, AWQ, GPTQ, ...) apply to linear layers, and its
#: VocabParallelEmbedding and ParallelLMHead are not LinearBase, so `--quantization fp8` leaves both
#: unquantized; NVIDIA ModelOpt's default quantization configs (TensorRT-LLM and NIM checkpoints) disable
#: '*lm_head*', and AWQ/GPTQ checkpoints keep both in FP16. Measured: vLLM 0.11 loads
#: RedHatAI/Llama-3.3-70B-Instruct-FP8-dynamic at TP 2 in 33.88 GiB a GPU ('Model loading took'; llm-d
#: empirical-vllm-memory-results.md), 32.85 GiB with every parameter at one byte, 33.83 with the table and
#: head at two (tests/data/measurements/kv_pool.yaml, llmd-llama-3.3-70b-fp8-tp2-h100).
ENGINE_VOCAB_BYTES_PER_PARAM = 2.0


@dataclass(frozen=True, slots=True)
class EngineRead:
    """How a text forward pass in an engine reads the weights differently from one read of every stored byte
    (docs/method.md's roofline), whole model, bytes."""

    #: The input embedding table (untied) and any per-layer input embedding, which the engine does not read:
    #: it gathers the batch's rows.
    embedding_bytes: float
    #: The vision tower, which runs on image tokens only.
    vision_bytes: float
    #: What reading the LM head at 16 bits adds where an explicit quantized --weight-dtype stores it smaller.
    lm_head_upcast_bytes: float

    @property
    def delta_bytes(self) -> float:
        """Bytes read beside the stored weights (negative: fewer)."""
        return self.lm_head_upcast_bytes - self.embedding_bytes - self.vision_bytes


def engine_read(arch: ModelArch, layout: WeightLayout) -> EngineRead:
    """What an engine's forward pass skips of the stored weights, and what it reads wider (tied: the head reads
    the embedding table, so the table is read, at 16 bits)."""
    params = arch.params_by_group()
    # Gathered tables: the input embedding unless tied to the head, and any per-layer input embedding (Gemma 4).
    gathered = params[ParamGroup.EMBEDDING] - (arch.vocab_size * arch.hidden_size if arch.tie_word_embeddings else 0)
    embedding = gathered * layout.storage(ParamGroup.EMBEDDING).bytes_per_param
    upcast = 0.0
    if layout.engine_vocab_bytes_per_param is not None:
        head = ParamGroup.EMBEDDING if arch.tie_word_embeddings else ParamGroup.LM_HEAD
        head_params = arch.vocab_size * arch.hidden_size
        upcast = head_params * (layout.engine_vocab_bytes_per_param - layout.storage(head).bytes_per_param)
    vision = params[ParamGroup.VISION] * layout.storage(ParamGroup.VISION).bytes_per_param
    return EngineRead(embedding_bytes=embedding, vision_bytes=vision, lm_head_upcast_bytes=upcast)


# --------------------------------------------------------------------------- engine padding


def vllm_default_mxfp4_backend(gpu_id: str, vendor: str) -> str:
    """The MXFP4 MoE backend vLLM picks by default (mxfp4.py get_mxfp4_backend, with its bundled kernels).

    Hopper (SM90) runs the Triton kernels (vLLM 0.11+ images, pip installs from 0.11.1, when triton_kernels
    became a dependency, vLLM PR 27370; a pip install of 0.11.0 or earlier has no triton_kernels and falls
    back to Marlin), Blackwell (SM100) FlashInfer's TRT-LLM kernels, AMD the ROCm path, and
    Ampere/Ada, which the Triton kernels do not support (they need SM90-SM100), Marlin.
    """
    if vendor == "amd":
        return "rocm"
    if gpu_id.startswith(("h100", "h200", "h20")):
        return "triton"
    if gpu_id.startswith(("b200", "gb200", "b300", "gb300")):
        return "flashinfer-trtllm"
    return "marlin"


def _round_up(value: int, multiple: int) -> int:
    return -(-value // multiple) * multiple


def mxfp4_padding_factor(hidden_size: int, intermediate_per_rank: int, backend: str) -> float:
    """Padded over checkpoint size of one MXFP4 expert's matrices under a vLLM MoE backend."""
    intermediate_multiple, hidden_multiple = MXFP4_MOE_PADDING[backend]
    padded = _round_up(intermediate_per_rank, intermediate_multiple) * _round_up(hidden_size, hidden_multiple)
    return padded / (intermediate_per_rank * hidden_size)


def mxfp4_padding_bytes_per_gpu(
    arch: ModelArch, layout: WeightLayout, tp: int, expert_parallel: bool, backend: str
) -> float:
    """Bytes per GPU vLLM adds to MXFP4 routed experts by padding them for its kernels (0 otherwise)."""
    if layout.storage(ParamGroup.ROUTED_EXPERTS).dtype != "mxfp4":
        return 0.0
    bytes_per_param = layout.storage(ParamGroup.ROUTED_EXPERTS).bytes_per_param
    extra = 0.0
    for moe in arch.moe_layers():
        width = moe.expert_width or moe.hidden_size
        # Tensor parallel splits every expert's intermediate; expert parallel keeps experts whole.
        intermediate = moe.expert_intermediate_size if expert_parallel else moe.expert_intermediate_size // tp
        if intermediate <= 0:
            continue
        factor = mxfp4_padding_factor(width, intermediate, backend)
        matrices = 3 if moe.gated else 2
        expert_bytes = matrices * width * moe.expert_intermediate_size * bytes_per_param * moe.num_experts
        extra += expert_bytes * (factor - 1) / tp
    return extra


def engine_padding_bytes_per_gpu(arch: ModelArch, layout: WeightLayout, deployment: Deployment, gpu: GpuSpec) -> float:
    """Bytes per GPU the engine adds to the checkpoint's weights for its kernels (MXFP4 expert padding)."""
    backend = deployment.mxfp4_moe_backend or vllm_default_mxfp4_backend(gpu.id, gpu.vendor)
    return mxfp4_padding_bytes_per_gpu(arch, layout, deployment.tp, deployment.expert_parallel, backend)


def replicated_extra_bytes_per_gpu(arch: ModelArch, layout: WeightLayout, tp: int) -> float:
    """Bytes each GPU holds beyond its 1/TP share because the engine keeps some layers whole on every rank
    (``ModelArch.replicated_params_by_group``): their bytes × (1 − 1/TP)."""
    return layout.weight_bytes(arch.replicated_params_by_group()) * (1 - 1 / tp)


def engine_extra_bytes_per_gpu(arch: ModelArch, layout: WeightLayout, deployment: Deployment, gpu: GpuSpec) -> float:
    """Bytes per GPU an engine holds beside weight_bytes / TP: the layers it replicates on every rank, and its
    padding of MXFP4 experts."""
    return replicated_extra_bytes_per_gpu(arch, layout, deployment.tp) + engine_padding_bytes_per_gpu(
        arch, layout, deployment, gpu
    )
