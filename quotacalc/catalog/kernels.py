"""The kernel backends an engine picks among, and what each asks of the weights it runs."""

from __future__ import annotations

#: How vLLM pads MXFP4 MoE expert matrices for its kernels: (multiple the per-rank intermediate size
#: is rounded up to, multiple the hidden size is rounded up to), by MoE backend. Source:
#: vllm/model_executor/layers/quantization/mxfp4.py, Mxfp4MoEMethod.create_weights (vLLM 0.10-0.15):
#: Marlin ("n % 256 == 0 and k % 128 == 0": intermediate to 128, hidden to 256); FlashInfer TRT-LLM
#: on SM100 (both to 256); FlashInfer CUTLASS on SM100 / SM90 (both to 128); ROCm
#: (mxfp4_utils.get_padding_alignment: 128 below gfx950); Triton (intermediate to 64, hidden kept).
#: Weights and their e8m0 scales grow by the same factor; gpt-oss (hidden 2,880, intermediate 2,880)
#: gains 9.0% of its expert bytes under Marlin, 13.8% under TRT-LLM, nothing under Triton.
MXFP4_MOE_PADDING: dict[str, tuple[int, int]] = {
    "triton": (64, 1),
    "marlin": (128, 256),
    "flashinfer-trtllm": (256, 256),
    "flashinfer-cutlass": (128, 128),
    "rocm": (128, 128),
}
