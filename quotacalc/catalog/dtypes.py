"""Number formats for weights and KV cache: bytes per element and the tensor-core math they run in."""

from pydantic import BaseModel, ConfigDict

from quotacalc.errors import UsageError, close_names

#: transformers/torch dtype names -> quotacalc dtype names.
TORCH_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "half": "fp16", "float": "fp32"}


def torch_dtype_name(value: object) -> str | None:
    """quotacalc's name of a torch dtype a config states (``"bfloat16"`` -> ``"bf16"``), or None."""
    return TORCH_DTYPES.get(value) if isinstance(value, str) else None


class Dtype(BaseModel):
    """A storage format. ``bytes_per_element`` includes block scales where the format has them."""

    model_config = ConfigDict(defer_build=True, frozen=True)

    name: str
    bytes_per_element: float
    #: Tensor-core format the matmuls run in when weights are stored in this format.
    compute_dtype: str
    #: Format used instead when a GPU has no tensor cores for ``compute_dtype`` (weight-only kernels).
    fallback_compute_dtype: str
    note: str
    #: Scale bytes per weight that ``--weight-dtype`` adds for a grouped format whose group a checkpoint states
    #: (a checkpoint's ``quantization_config`` gives its own group and replaces this).
    flag_scale_bytes_per_element: float = 0.0


_DTYPES: tuple[Dtype, ...] = (
    Dtype(name="fp32", bytes_per_element=4, compute_dtype="tf32", fallback_compute_dtype="tf32", note="IEEE float32"),
    Dtype(name="bf16", bytes_per_element=2, compute_dtype="bf16", fallback_compute_dtype="fp16", note="bfloat16"),
    Dtype(name="fp16", bytes_per_element=2, compute_dtype="fp16", fallback_compute_dtype="bf16", note="IEEE float16"),
    Dtype(
        name="fp8",
        bytes_per_element=1,
        compute_dtype="fp8",
        fallback_compute_dtype="bf16",
        note="float8 (e4m3/e5m2); W8A8 where the GPU has fp8 tensor cores, else weight-only",
    ),
    Dtype(name="int8", bytes_per_element=1, compute_dtype="int8", fallback_compute_dtype="bf16", note="int8 W8A8"),
    Dtype(
        name="int4",
        bytes_per_element=0.5,
        compute_dtype="bf16",
        fallback_compute_dtype="fp16",
        note="4-bit weight-only (AWQ, GPTQ); as a flag, an fp16 scale and a 4-bit zero per 128 weights",
        # AutoAWQ's and GPTQ's default group of 128 (q_group_size / group_size), each with an fp16 scale and a
        # packed 4-bit zero point: what an AWQ/GPTQ checkpoint's quantization_config prices to.
        flag_scale_bytes_per_element=(2 + 0.5) / 128,
    ),
    Dtype(
        name="mxfp4",
        # OCP microscaling: 32 fp4 values share one 8-bit scale, so 4 + 8/32 bits each.
        bytes_per_element=(4 + 8 / 32) / 8,
        # Weight-only: vLLM's mxfp4 MoE backends take bf16 activations (Mxfp4Config.get_supported_act_dtypes;
        # on Blackwell get_mxfp4_backend defaults to 'FlashInfer MXFP4 BF16', MXFP8 activations only with
        # VLLM_USE_FLASHINFER_MOE_MXFP4_MXFP8=1; Marlin and Triton elsewhere dequantize to bf16), so the
        # tensor cores run at the bf16 rate, not the fp4 one.
        compute_dtype="bf16",
        fallback_compute_dtype="fp16",
        note="OCP MX fp4, one e8m0 scale per 32 values; weight-only (bf16 activations, as vLLM runs it)",
    ),
    Dtype(
        name="nvfp4",
        # 16 fp4 values share one fp8 scale, so 4 + 8/16 bits each.
        bytes_per_element=(4 + 8 / 16) / 8,
        compute_dtype="fp4",
        fallback_compute_dtype="bf16",
        note="NVIDIA fp4, one fp8 scale per 16 values",
    ),
)

DTYPES: dict[str, Dtype] = {dtype.name: dtype for dtype in _DTYPES}

_ALIASES: dict[str, str] = {
    "float32": "fp32",
    "bfloat16": "bf16",
    "float16": "fp16",
    "half": "fp16",
    "fp8_e4m3": "fp8",
    "fp8_e5m2": "fp8",
    "e4m3": "fp8",
    "e5m2": "fp8",
    "float8": "fp8",
    "float8_e4m3fn": "fp8",
    "w8a8": "int8",
    "awq": "int4",
    "gptq": "int4",
    "fp4": "nvfp4",
}


def dtype_by_name(name: str, *, field: str = "dtype", source: str | None = None) -> Dtype:
    """Look up a dtype by name or alias (case-insensitive)."""
    key = str(name).strip().lower()
    key = _ALIASES.get(key, key)
    if key in DTYPES:
        return DTYPES[key]
    known = sorted({*DTYPES, *_ALIASES})
    close = close_names(key, known, n=3)
    hint = f"did you mean {', '.join(close)}?" if close else f"one of {', '.join(DTYPES)}"
    raise UsageError(f"unknown dtype '{name}'", source=source, field=field, fix=hint)
